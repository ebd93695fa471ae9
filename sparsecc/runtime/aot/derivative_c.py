"""The C side of a derivative kernel in an ahead-of-time library (``sc.aot.build`` of an
``sc.jacobian``/``sc.hessian``; docs/aot.md "Jacobians and Hessians").

The derivative statement is built as an ordinary kernel ``<lib>_<k>`` with a CSR (or CSC)
result.  On top of it, for C callers that fill a solver's structures without Python:

- ``<lib>_<k>_pattern(...)``: the pattern at these operands' patterns (the kernel's result,
  one triangle of it for a Hessian built with ``triangle=``);
- ``<lib>_<k>_values(..., values, nvalues)``: the values only, in the layout's order;
- for a pattern fixed at build time (example operands given), the pattern as constant
  tables ``<lib>_<k>_row_ptr``/``_col_ptr``, ``_row_ind``, ``_col_ind`` and the sizes
  ``<LIB>_<K>_NROWS``/``_NCOLS``/``_NNZ``; ``_values`` then returns 3 for operands of another
  pattern.

The wrappers take the derivative's operands less the identity (``Id_``, made inside from the
index sizes) and less an operand's second name (``A__1``: the same buffers are passed again).
The tables' bytes go into the library through an assembler ``.incbin`` (``table_asm``), not as
C initializers: a pattern of millions of entries compiles in no time that way.
"""

from __future__ import annotations

import numpy as np

from ...errors import SparseccError
from ...formats import Format, resolve
from .cwrapper import _C_TYPES, LOCAL, _field_names, _index_c, local_problem


def _operand_params(op: dict) -> list[tuple[str, str]]:
    """(C type, C name) of each parameter an operand takes, as ``cwrapper._c_kernel`` has them."""
    ct = _C_TYPES[op["dtype"]]
    if op["format"] == "dense":
        return [(f"const {ct} *", op["name"])]
    out = []
    for cname, ctype, _ in _field_names(Format.parse(op["format"]), op["name"]):
        out += [(f"const {ctype or ct} *", cname), ("int64_t ", f"{cname}_len")]
    return out


def _user_format(info: dict, base: str, op: dict, kname: str) -> str:
    """The encoding of operand ``base`` as the caller passes it: the format it was given
    (``info["formats"]``), at the widths of the kernel's (which may read it transposed)."""
    if op["format"] == "dense":
        return "dense"
    built = Format.parse(op["format"])
    name = info.get("formats", {}).get(base)
    if name is None:
        return op["format"]
    fmt = resolve(name, len(op["indices"]), f"operand {base!r}").with_widths(built.pos_width, built.crd_width)
    got = fmt.encoding()
    if got != op["format"] and not _transposes(fmt, built):
        raise SparseccError(f"kernel {kname!r}: the derivative reads {base!r} as {op['format']}, which the "
                            f"C wrapper cannot make from the {name} given; give {base!r} as CSR or CSC")
    return got


def _transposes(a: Format, b: Format) -> bool:
    """Whether ``a`` and ``b`` are CSR and CSC (one the other transposed)."""
    def order(f):
        if f.rank != 2 or f.block is not None or tuple(f.levels) != ("dense", "compressed"):
            return None
        return tuple(f.order or (0, 1))
    return {order(a), order(b)} == {(0, 1), (1, 0)}


def _identity(op: dict, n: str) -> tuple[list, list, list]:
    """(setup, teardown, call arguments) of the n x n identity the delta operand reads."""
    it = _index_c(Format.parse(op["format"]).pos_width)
    ct = _C_TYPES[op["dtype"]]
    setup = [f"    {it} *id_pos = malloc((size_t)({n} + 1) * sizeof *id_pos);",
             f"    {it} *id_crd = malloc((size_t)({n} ? {n} : 1) * sizeof *id_crd);",
             f"    {ct} *id_val = malloc((size_t)({n} ? {n} : 1) * sizeof *id_val);",
             "    if (!id_pos || !id_crd || !id_val) { free(id_pos); free(id_crd); free(id_val); return 1; }",
             f"    for (int64_t t = 0; t < {n}; t++) {{ id_pos[t] = ({it})t; id_crd[t] = ({it})t; id_val[t] = 1; }}",
             f"    id_pos[{n}] = ({it}){n};"]
    return setup, ["    free(id_pos); free(id_crd); free(id_val);"], \
        ["id_pos", f"{n} + 1", "id_crd", n, "id_val", n]


def _transposed(user: dict, op: dict, p: str) -> tuple[list, list, list]:
    """(setup, teardown, call arguments): a CSR operand given as CSC or the other way round,
    converted to the order the kernel reads (a counting sort, O(nnz) per call)."""
    fmt = Format.parse(op["format"])
    it, ct = _index_c(fmt.pos_width), _C_TYPES[op["dtype"]]
    dims = [f"n_{i}" for i in op["indices"]]
    given_major, major = (dims[1], dims[0]) if tuple(Format.parse(user["format"]).order or (0, 1)) == (1, 0) else (dims[0], dims[1])
    (pos, _), (crd, _), (val, _) = [(c, t) for c, t, _ in _field_names(Format.parse(user["format"]), user["name"])]
    setup = [f"    int64_t {p}nnz = (int64_t){pos}[{given_major}];",
             f"    {it} *{p}pos = calloc((size_t){major} + 1, sizeof *{p}pos);",
             f"    {it} *{p}crd = malloc((size_t)({p}nnz ? {p}nnz : 1) * sizeof *{p}crd);",
             f"    {ct} *{p}val = malloc((size_t)({p}nnz ? {p}nnz : 1) * sizeof *{p}val);",
             f"    {it} *{p}next = malloc((size_t)({major} ? {major} : 1) * sizeof *{p}next);",
             f"    if (!{p}pos || !{p}crd || !{p}val || !{p}next) {{ free({p}pos); free({p}crd); free({p}val); "
             f"free({p}next); return 1; }}",
             f"    for (int64_t q = 0; q < {p}nnz; q++) {p}pos[{crd}[q] + 1]++;",
             f"    for (int64_t c = 0; c < {major}; c++) {{ {p}pos[c + 1] += {p}pos[c]; {p}next[c] = {p}pos[c]; }}",
             f"    for (int64_t a = 0; a < {given_major}; a++)",
             f"        for (int64_t q = {pos}[a]; q < {pos}[a + 1]; q++) {{ int64_t w = {p}next[{crd}[q]]++; "
             f"{p}crd[w] = ({it})a; {p}val[w] = {val}[q]; }}",
             f"    free({p}next);"]
    return setup, [f"    free({p}pos); free({p}crd); free({p}val);"], \
        [f"{p}pos", f"{major} + 1", f"{p}crd", f"{p}nnz", f"{p}val", f"{p}nnz"]


def _macro(lib: str, kname: str, what: str) -> str:
    return f"{lib}_{kname}".upper() + what


def _keep(info: dict) -> str:
    """The C condition on (minor, major) that keeps an entry of the triangle."""
    lower_if_minor_le = info["layout"] != "csc"        # CSR: minor = column, major = row
    want_le = lower_if_minor_le == (info["triangle"] == "lower")
    return "(int64_t)crd[p] <= a" if want_le else "(int64_t)crd[p] >= a"


def derivative_c(lib: str, kname: str, spec: dict, info: dict) -> tuple[str, str]:
    """(declarations with their documentation, definitions) of derivative kernel ``kname``."""
    fn = f"{lib}_{kname}"
    out_fmt = Format.parse(spec["out_format"])
    idx_t = _index_c(out_fmt.pos_width)
    crd_t = _index_c(out_fmt.crd_width)
    val_t = _C_TYPES[spec["out_dtype"]]
    delta, aliases = info.get("delta"), info.get("aliases", {})
    params = [("int64_t ", f"n_{i}") for i in spec["index_order"]]
    call = [f"n_{i}" for i in spec["index_order"]]
    setup, teardown, given, given_order = [], [], set(), []
    for op in spec["operands"]:
        key = op["key"]
        if key == delta:
            s, t, args = _identity(op, f"n_{info['delta_index']}")
            setup, teardown, call = setup + s, teardown + t, call + args
            continue
        base = aliases.get(key, key)
        user = dict(op, name=base, format=_user_format(info, base, op, kname))
        if base not in given:
            given.add(base)
            given_order.append(base)
            params += _operand_params(user)
        if user["format"] == op["format"]:
            call += [name for _, name in _operand_params(user)]
        else:                               # the kernel reads it in the other order: transposed here
            s, t, args = _transposed(user, op, f"{LOCAL}t{len(teardown)}_")
            setup, teardown, call = setup + s, teardown + t, call + args
    ptext = ", ".join(f"{t}{n}" for t, n in params)
    problem = local_problem(kname, [n for _, n in params], ("values", "nvalues"))
    if problem:
        raise SparseccError(problem)
    major_name = "column" if info["layout"] == "csc" else "row"
    lines = [f"static int {fn}__run({ptext}, {lib}_sparse_result *sc_r) {{", *setup,
             f"    int sc_rc = {fn}({', '.join(call)}, sc_r);", *teardown, "    if (sc_rc) return sc_rc;"]
    if info.get("triangle"):
        # one triangle: the entries kept in place, each major's pointer rewritten
        lines += [f"    {{ {idx_t} *pos = ({idx_t} *)sc_r->buffers[0]; {crd_t} *crd = ({crd_t} *)sc_r->buffers[1];",
                  f"      {val_t} *val = ({val_t} *)sc_r->buffers[2];",
                  "      int64_t nmaj = sc_r->lvl_sizes[0], w = 0, start = 0;",
                  "      for (int64_t a = 0; a < nmaj; a++) { int64_t end = (int64_t)pos[a + 1];",
                  f"        for (int64_t p = start; p < end; p++) if ({_keep(info)}) "
                  "{ crd[w] = crd[p]; val[w] = val[p]; w++; }",
                  f"        start = end; pos[a + 1] = ({idx_t})w; }}",
                  "      sc_r->lengths[1] = w; sc_r->lengths[2] = w; }"]
    lines += ["    return 0;", "}", ""]
    fixed = info.get("pattern") is not None
    lines += [f"int {fn}_pattern({ptext}, {lib}_sparse_result *out) {{",
              f"    return {fn}__run({', '.join(n for _, n in params)}, out);", "}", ""]
    lines += [f"int {fn}_values({ptext}, {val_t} *values, int64_t nvalues) {{",
              f"    {lib}_sparse_result sc_r;",
              f"    int sc_rc = {fn}__run({', '.join(n for _, n in params)}, &sc_r);",
              "    if (sc_rc) return sc_rc;",
              "    int64_t sc_nnz = sc_r.lengths[2];",
              "    if (sc_nnz != nvalues) sc_rc = 3;"]
    if fixed:
        nmaj = _macro(lib, kname, "_NCOLS" if info["layout"] == "csc" else "_NROWS")
        ptr = f"{fn}_{major_name[:3]}_ptr"
        ind = f"{fn}_{'row' if info['layout'] == 'csc' else 'col'}_ind"
        lines += [f"    else if (sc_r.lvl_sizes[0] != {nmaj} || sc_r.lengths[0] != {nmaj} + 1 || sc_nnz != {_macro(lib, kname, '_NNZ')}",
                  f"             || memcmp(sc_r.buffers[0], {ptr}, (size_t)({nmaj} + 1) * sizeof({idx_t}))",
                  f"             || (sc_nnz && memcmp(sc_r.buffers[1], {ind}, (size_t)sc_nnz * sizeof({crd_t})))) sc_rc = 3;"]
    lines += [f"    if (!sc_rc && sc_nnz) memcpy(values, sc_r.buffers[2], (size_t)sc_nnz * sizeof({val_t}));",
              f"    {lib}_free_result(&sc_r);", "    return sc_rc;", "}", ""]
    definition = "\n".join(lines)

    what = f"the {info['kind']} of '{info['of']}' with respect to {info['wrt']}"
    order = {"csr": "CSR (row-major)", "coo": "row-major triplet", "csc": "CSC (column-major)"}[info["layout"]]
    tri = f", its {info['triangle']} triangle" if info.get("triangle") else ""
    doc = [f"/* {fn}: {what}{tri}", f" *   {spec['statement']}",
           f" * {fn}_pattern and {fn}_values take the sizes n_<index> as {fn} does, then the operands"]
    named = [f"{b} ({info.get('formats', {}).get(b, 'dense')})" for b in given_order]
    doc.append(f" *   {', '.join(named)}, each as a buffer triple (positions, coordinates, values) or a C array;")
    hidden = ([f"{delta} is the identity, made inside"] if delta else []) + \
             [f"{a} is {b} again" for a, b in aliases.items()]
    doc.append(f" *   {'; '.join(hidden) + ' (' if hidden else '('}an operand {fn} reads in the other order is "
               f"transposed inside).")
    doc += [f" * {fn}_pattern: the pattern at these operands' patterns into out (buffers[0]: {major_name} pointers,",
            f" *   buffers[1]: {'row' if info['layout'] == 'csc' else 'column'} indices, buffers[2]: the values; "
            f"release with {lib}_free_result).",
            f" * {fn}_values: the nvalues values in {order} order into values; 3 if the operands' pattern",
            " *   has another number of stored entries" + (" or is not the tables' pattern" if fixed else "") + "."]
    decls = []
    if fixed:
        m, n = info["shape"]
        nnz = len(info["pattern"][1])
        doc += [f" * The pattern fixed at build time (from the example operands): {m} x {n}, {nnz} stored entries;",
                f" *   triplet t is ({fn}_row_ind[t], {fn}_col_ind[t]), in the order of the values.", " */"]
        decls += [f"#define {_macro(lib, kname, '_NROWS')} {m}", f"#define {_macro(lib, kname, '_NCOLS')} {n}",
                  f"#define {_macro(lib, kname, '_NNZ')} {nnz}",
                  f"extern const {idx_t} {fn}_{major_name[:3]}_ptr[];   /* {m if major_name == 'row' else n} + 1 */",
                  f"extern const {crd_t} {fn}_row_ind[];   /* {_macro(lib, kname, '_NNZ')} */",
                  f"extern const {crd_t} {fn}_col_ind[];   /* {_macro(lib, kname, '_NNZ')} */"]
    else:
        doc += [" * The pattern depends on the operands' patterns: no tables (build with example operands",
                " *   for them); call _pattern once per operand pattern.", " */"]
    decls += [f"int {fn}_pattern({ptext}, {lib}_sparse_result *out);",
              f"int {fn}_values({ptext}, {val_t} *values, int64_t nvalues);"]
    return "\n".join(doc) + "\n" + "\n".join(decls) + "\n", definition


def tables(lib: str, kname: str, spec: dict, info: dict) -> dict[str, bytes]:
    """{symbol: bytes} of a fixed pattern's constant tables (empty without one)."""
    if info.get("pattern") is None:
        return {}
    out_fmt = Format.parse(spec["out_format"])
    pt = np.int32 if out_fmt.pos_width == 32 else np.int64
    ct = np.int32 if out_fmt.crd_width == 32 else np.int64
    ptr, ind = (np.asarray(a) for a in info["pattern"])
    major = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    fn = f"{lib}_{kname}"
    csc = info["layout"] == "csc"
    rows, cols = (ind, major) if csc else (major, ind)
    return {f"{fn}_{'col' if csc else 'row'}_ptr": ptr.astype(pt).tobytes(),
            f"{fn}_row_ind": rows.astype(ct).tobytes(), f"{fn}_col_ind": cols.astype(ct).tobytes()}


def table_asm(symbols: dict[str, str]) -> str:
    """An assembler file placing each table (symbol -> file of its bytes) in .rodata."""
    out = []
    for sym, path in symbols.items():
        out += ["    .section .rodata", f"    .globl {sym}", f"    .type {sym}, @object", "    .balign 8",
                f"{sym}:", f'    .incbin "{path}"', f"    .size {sym}, .-{sym}"]
    out.append('    .section .note.GNU-stack,"",@progbits')
    return "\n".join(out) + "\n"
