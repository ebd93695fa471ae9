"""The C side of an ahead-of-time library: one C entry point per kernel (plain pointers and
sizes -> memref descriptors and storage specifiers -> the kernel's packed entry), the
self-contained header, and the dispatching entry of a SpGEMM built both ways."""

from __future__ import annotations

from ...formats import Format

_C_TYPES = {"float64": "double", "float32": "float", "int64": "int64_t", "int32": "int32_t",
            "bool": "int8_t", "complex128": "double _Complex", "complex64": "float _Complex"}


# ------------------------------------------------------------------ names, checked up front
# Every name the generated C declares is made of the library's, the kernels', the operands'
# and the indices' names: two that come out the same, or an operand named like something the
# wrapper uses, would fail in the C compiler after every kernel was compiled.  They are
# refused before anything is compiled instead.
_C_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if inline
    int long register restrict return short signed sizeof static struct switch typedef union unsigned
    void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn
    _Static_assert _Thread_local bool true false complex imaginary
    alignas alignof and and_eq asm bitand bitor catch char8_t char16_t char32_t class compl concept
    consteval constexpr constinit const_cast co_await co_return co_yield decltype delete dynamic_cast
    explicit export friend mutable namespace new noexcept not not_eq nullptr operator or or_eq private
    protected public reinterpret_cast requires static_assert static_cast template this thread_local
    throw try typeid typename using virtual wchar_t xor xor_eq
    """.split())     # C11 and the C++ keywords (the header is included from C++ too), C99's macros
#: what a kernel's C entry point uses besides its parameters: the types and functions it
#: names, and the locals of its outermost block (C puts them in the parameters' scope)
_WRAPPER_NAMES = frozenset({"int8_t", "int32_t", "int64_t", "size_t", "memset", "free", "NULL",
                            "argv", "k", "res", "out", "d_out"} | {f"memref{r}" for r in range(9)})


#: the global names a derivative kernel adds (derivative_c.py): its entries and tables, and
#: its size macros (upper case)
DERIVATIVE_SUFFIXES = ("_values", "_pattern", "_row_ptr", "_col_ptr", "_row_ind", "_col_ind", "__run")
DERIVATIVE_MACROS = ("_NROWS", "_NCOLS", "_NNZ")


def library_symbols(lib: str, kname: str) -> list[str]:
    """The global names kernel ``kname`` of library ``lib`` defines: its C entry point, its
    packed entry (and a SpGEMM's two forms), the digest of its manifest entry, and what a
    derivative kernel adds (its ``_values``/``_pattern`` entries, tables and size macros:
    reserved for every kernel, so no two kernels' names collide through them)."""
    fn = f"{lib}_{kname}"
    return [fn, f"{fn}_entry", f"{fn}_entry_loops", f"{fn}_entry_sparsifier", f"{fn}_spec_sha256",
            *(fn + s for s in DERIVATIVE_SUFFIXES), *(fn.upper() + m for m in DERIVATIVE_MACROS)]


def symbol_problem(lib: str, knames) -> str | None:
    """Why the kernels ``knames`` cannot share library ``lib`` (two generated C names that
    are the same, e.g. kernels ``a`` and ``a_entry``; a kernel named ``free_result``), or None."""
    owner = {f"{lib}_free_result": "the library's function", f"{lib}_sparse_result": "the library's type",
             f"{lib.upper()}_H": "the header's include guard"}
    for kname in knames:
        for sym in library_symbols(lib, kname):
            if sym in owner:
                return (f"kernel {kname!r}: its C name {sym} collides with {owner[sym]}; "
                        f"rename the kernel")
            owner[sym] = f"kernel {kname!r}'s"
    return None


#: the prefix of the locals the planned and derivative wrappers declare (plan_c.py,
#: derivative_c.py): no operand's C name may start with it there
LOCAL = "sc_"


def local_problem(kname: str, params, reserved=()) -> str | None:
    """Why a planned or derivative wrapper of kernel ``kname`` cannot take parameters
    ``params`` (C names): one starts with :data:`LOCAL` or is one of its own ``reserved``
    parameters, and would be declared twice; or None."""
    for name in params:
        if name.startswith(LOCAL) or name in reserved:
            return (f"kernel {kname!r}: operand C name {name!r} is one the kernel's C wrapper keeps for itself "
                    f"(names starting with {LOCAL!r}{''.join(', ' + r for r in reserved)}); rename the operand")
    return None


def wrapper_problem(lib: str, kname: str, index_order, operands) -> str | None:
    """Why kernel ``kname``'s C entry point cannot be generated (an operand whose C name is a
    keyword, collides with a name the wrapper uses, another parameter or local, or a global
    name of the library), or None.  ``operands``: (C name, Format or None for dense)."""
    seen = {}
    globals_ = {f"{lib}_free_result", f"{lib}_sparse_result", f"{lib.upper()}_H",
                *library_symbols(lib, kname)}

    def declare(name, what, operand):
        if name in _C_KEYWORDS or name in _WRAPPER_NAMES or name in globals_ or name.startswith(LOCAL):
            return (f"kernel {kname!r}: operand {operand!r} is called {name} in C, a name the C wrapper "
                    f"or the language reserves (or starts with {LOCAL!r}, kept for the wrappers' locals); "
                    f"rename the operand")
        if name in seen:
            return (f"kernel {kname!r}: operand {operand!r} gives the C name {name}, which {seen[name]} "
                    f"also has; rename the operand")
        seen[name] = what
        return None

    for i in index_order:
        seen[f"n_{i}"] = f"the size of index {i!r}"
    problems = []
    for name, fmt in operands:
        if fmt is None:
            problems += [declare(name, f"dense operand {name!r}", name),
                         declare(f"d_{name}", f"the descriptor of {name!r}", name)]
            continue
        problems.append(declare(f"s_{name}", f"the specifier of {name!r}", name))
        for cname, _, _ in _field_names(fmt, name):
            problems += [declare(cname, f"a buffer of {name!r}", name),
                         declare(f"{cname}_len", f"a buffer length of {name!r}", name),
                         declare(f"d_{cname}", f"a descriptor of {name!r}", name)]
    return next((p for p in problems if p), None)


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
    from ..specialization import HUGE_FACTOR, HUGE_SLACK
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
    # each kernel's object holds its checked entry (runtime/entry.py oom_entry_ir)
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
