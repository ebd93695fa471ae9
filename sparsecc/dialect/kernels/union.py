"""Element-wise unions with a CSR (or CSC) result, hand-written.

``C[i,j] = A[i,j] + B[i,j]``, ``A - B`` and scaled terms (``a*A[i,j] - B[i,j]*b`` with 0-d
operands ``a``/``b``, what ``sc.ops.add/sub(..., alpha=)`` build): MLIR 22's sparsifier
writes a sparse result by insertion, one row after another (never in parallel).  Here
sparsecc writes the loops itself (``scf``/``memref``), compiled through the ordinary
pipeline, with the sparsifier kernel's arguments and results (the call path is unchanged):

* phase 1: each row's union size, by a merge of the two rows' sorted coordinates
  (``scf.parallel`` over the rows);
* a prefix sum of the counts (serial, O(rows)) gives the result's positions;
* phase 2: the same merge writes each row's coordinates and values (``scf.parallel``).

Values are those of the sparsifier's lattice points, bit for bit: where both operands store
an entry, the expression; where only the left does, the left term alone; where only the
right does, the right term (``-term`` for ``-``: ``negf``, ``0 - x`` for integers,
``complex.neg``).  Every entry of the union is stored (a stored zero, a cancellation
``x - x``).  Operands reach the kernel canonical (``runtime/operands.py`` sorts and sums
duplicates of a non-canonical CSR/CSC on a copy), which the merge needs.  Each row is
written by one thread in a fixed order, so the result does not depend on the thread count.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes as dt
from ...expr import Access, Binary, Statement
from ...formats import Format
from ...kernel_abi import TargetFacts
from .emit import (Text, alloc_entries, arith, csr_params, csr_results, huge_page_decls, ity, kernel_head, loop,
                   module, prefix_sum, return_csr, row_bounds)
from .recognize import is_compressed, one_kind

_KINDS = ("float", "int", "complex")


@dataclass(frozen=True)
class Term:
    tensor: str
    scale: str | None = None       # the 0-d operand's name
    scale_first: bool = True       # ``a * A`` (True) or ``A * a``


@dataclass(frozen=True)
class UnionPlan:
    kind: str                      # "union"
    op: str                        # "+" or "-"
    left: Term
    right: Term
    index_order: tuple[str, ...]
    outer: int                     # the dimension stored by level 0 (0: CSR, 1: CSC)


def _term(e, idx: tuple[str, ...]) -> Term | None:
    if isinstance(e, Access) and e.indices == idx:
        return Term(e.tensor)
    if isinstance(e, Binary) and e.op == "*":
        for s, x, first in ((e.left, e.right, True), (e.right, e.left, False)):
            if isinstance(s, Access) and s.indices == () and isinstance(x, Access) and x.indices == idx:
                return Term(x.tensor, s.tensor, first)
    return None


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> UnionPlan | None:
    """The union kernel's plan for this specialization, or None (the sparsifier's kernel)."""
    if out_format is None or len(stmt.indices) != 2 or not one_kind(dtypes, _KINDS):
        return None
    order = tuple(out_format.order or (0, 1))
    if order not in ((0, 1), (1, 0)) or not is_compressed(out_format, order):
        return None
    e = stmt.expr
    if not (isinstance(e, Binary) and e.op in ("+", "-")):
        return None
    idx = tuple(stmt.indices)
    left, right = _term(e.left, idx), _term(e.right, idx)
    if left is None or right is None:
        return None
    names = [left.tensor, right.tensor] + [s for s in (left.scale, right.scale) if s]
    if len(set(names)) != len(names) or set(names) != set(stmt.operands) or len(names) != len(stmt.operands):
        return None
    fmts = dict(zip(stmt.operands, formats))
    if not (is_compressed(fmts[left.tensor], order) and is_compressed(fmts[right.tensor], order)):
        return None
    for s in (left.scale, right.scale):
        if s is not None and not (fmts[s].is_dense and fmts[s].rank == 0):
            return None
    return UnionPlan("union", e.op, left, right, idx, order[0])


# ------------------------------------------------------------------------------ MLIR text
def _neg(t: Text, row: dt.DType, v: str, zero: str | None) -> str:
    """``-v`` as the sparsifier writes it (kNegF / kNegC / kNegI: ``0 - v``)."""
    if row.kind == "float":
        return t.op(f"arith.negf {v} : {row.storage}")
    if row.kind == "complex":
        return t.op(f"complex.neg {v} : {row.storage}")
    return t.op(f"arith.subi {zero}, {v} : {row.storage}")


def emit(plan: UnionPlan, formats: dict, out: Format, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module of the union kernel; ``formats`` by operand name (widths resolved)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fa, fb = formats[plan.left.tensor], formats[plan.right.tensor]
    pw, cw = out.pos_width, out.crd_width
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    for op, f in formats.items():
        if op in (plan.left.tensor, plan.right.tensor):
            r = "A" if op == plan.left.tensor else "B"
            params += csr_params(r, f, T)
        else:
            params.append(f"%s_{op}: memref<{T}>")
    head = kernel_head(params, csr_results(out, T))
    t = Text()
    t.index_constants()
    t("%big = arith.constant -1 : index")     # past every coordinate (unsigned compares)
    dims = [f"%size_{ix}" for ix in plan.index_order]
    m, n = dims[plan.outer], dims[1 - plan.outer]
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    scal = {}
    for term in (plan.left, plan.right):
        if term.scale is not None:
            scal[term.scale] = t.op(f"memref.load %s_{term.scale}[] : memref<{T}>")
    zero = None
    if plan.op == "-" and row.kind == "int":
        zero = t.op(f"arith.constant 0 : {T}")

    def term_value(term: Term, x: str) -> str:
        if term.scale is None:
            return x
        s = scal[term.scale]
        return t.op(arith(row, "*", s, x) if term.scale_first else arith(row, "*", x, s))

    def right_only(y: str) -> str:
        v = term_value(plan.right, y)
        return v if plan.op == "+" else _neg(t, row, v, zero)

    def bounds(r: str, f: Format):
        lo, _, hi = row_bounds(t, f"%{r}_pos", "%i", f.pos_width)
        return lo, hi

    t(f"%C_pos = memref.alloc({m1}) : memref<?x{ity(pw)}>")
    t.store_index("%c0", "%C_pos", "%c0", pw)
    opening, closing = loop(parallel, "%i", "%c0", m)
    # phase 1: each row's union size: |A row| + |B row| - |common columns|
    t(opening)
    alo, ahi = bounds("A", fa)         # (the thread count follows A's entries)
    blo, bhi = bounds("B", fb)
    res = t.fresh("cnt")
    t(f"{res}:3 = scf.while (%pa = {alo}, %pb = {blo}, %nc = %c0) : (index, index, index) -> (index, index, index) {{")
    ca = t.op(f"arith.cmpi ult, %pa, {ahi} : index")
    cb = t.op(f"arith.cmpi ult, %pb, {bhi} : index")
    both = t.op(f"arith.andi {ca}, {cb} : i1")
    t(f"scf.condition({both}) %pa, %pb, %nc : index, index, index")
    t("} do {")
    t("^bb0(%qa: index, %qb: index, %qc: index):")
    ja = t.load_index("%A_crd", "%qa", fa.crd_width)
    jb = t.load_index("%B_crd", "%qb", fb.crd_width)
    le = t.op(f"arith.cmpi ule, {ja}, {jb} : index")
    ge = t.op(f"arith.cmpi uge, {ja}, {jb} : index")
    eq = t.op(f"arith.andi {le}, {ge} : i1")
    da = t.op(f"arith.index_cast {t.op(f'arith.extui {le} : i1 to i64')} : i64 to index")
    db = t.op(f"arith.index_cast {t.op(f'arith.extui {ge} : i1 to i64')} : i64 to index")
    dc = t.op(f"arith.index_cast {t.op(f'arith.extui {eq} : i1 to i64')} : i64 to index")
    na, nb, nc = (t.op(f"arith.addi %qa, {da} : index"), t.op(f"arith.addi %qb, {db} : index"),
                  t.op(f"arith.addi %qc, {dc} : index"))
    t(f"scf.yield {na}, {nb}, {nc} : index, index, index")
    t("}")
    la = t.op(f"arith.subi {ahi}, {alo} : index")
    lb = t.op(f"arith.subi {bhi}, {blo} : index")
    tot = t.op(f"arith.addi {la}, {lb} : index")
    cnt = t.op(f"arith.subi {tot}, {res}#2 : index")
    i1 = t.op("arith.addi %i, %c1 : index")
    t.store_index(cnt, "%C_pos", i1, pw)
    t(closing)
    nnz = prefix_sum(t, m, pw)
    cap = t.op(f"arith.maxui {nnz}, %c1 : index")
    alloc_entries(t, cap, out, row, facts)
    # phase 2: the merge writes the row (the thread count follows the result's entries)
    t(opening)
    start, _, end = row_bounds(t, "%C_pos", "%i", pw)
    alo, ahi = bounds("A", fa)
    blo, bhi = bounds("B", fb)
    # the merge while both rows have entries left: no branch on the coordinates (the values
    # of the three lattice points are computed and one is selected; complex values branch)
    mg = t.fresh("mg")
    t(f"{mg}:3 = scf.while (%pa = {alo}, %pb = {blo}, %w = {start}) : (index, index, index) -> (index, index, index) {{")
    ca = t.op(f"arith.cmpi ult, %pa, {ahi} : index")
    cb = t.op(f"arith.cmpi ult, %pb, {bhi} : index")
    both = t.op(f"arith.andi {ca}, {cb} : i1")
    t(f"scf.condition({both}) %pa, %pb, %w : index, index, index")
    t("} do {")
    t("^bb0(%qa: index, %qb: index, %qw: index):")
    ja = t.load_index("%A_crd", "%qa", fa.crd_width)
    jb = t.load_index("%B_crd", "%qb", fb.crd_width)
    le = t.op(f"arith.cmpi ule, {ja}, {jb} : index")
    ge = t.op(f"arith.cmpi uge, {ja}, {jb} : index")
    j = t.op(f"arith.minui {ja}, {jb} : index")
    t.store_index(j, "%C_crd", "%qw", cw)
    eq = t.op(f"arith.andi {le}, {ge} : i1")
    x = t.op(f"memref.load %A_val[%qa] : memref<?x{T}>")
    y = t.op(f"memref.load %B_val[%qb] : memref<?x{T}>")
    if row.kind == "complex":
        t(f"scf.if {eq} {{")
        v = t.op(arith(row, plan.op, term_value(plan.left, x), term_value(plan.right, y)))
        t(f"  memref.store {v}, %C_val[%qw] : memref<?x{T}>")
        t("} else {")
        t(f"scf.if {le} {{")
        t(f"  memref.store {term_value(plan.left, x)}, %C_val[%qw] : memref<?x{T}>")
        t("} else {")
        t(f"  memref.store {right_only(y)}, %C_val[%qw] : memref<?x{T}>")
        t("}")
        t("}")
    else:
        tx, ty = term_value(plan.left, x), term_value(plan.right, y)
        v_both = t.op(arith(row, plan.op, tx, ty))
        v_right = ty if plan.op == "+" else _neg(t, row, ty, zero)
        one = t.op(f"arith.select {le}, {tx}, {v_right} : {T}")
        v = t.op(f"arith.select {eq}, {v_both}, {one} : {T}")
        t(f"memref.store {v}, %C_val[%qw] : memref<?x{T}>")
    da = t.op(f"arith.index_cast {t.op(f'arith.extui {le} : i1 to i64')} : i64 to index")
    db = t.op(f"arith.index_cast {t.op(f'arith.extui {ge} : i1 to i64')} : i64 to index")
    t(f"scf.yield {t.op(f'arith.addi %qa, {da} : index')}, {t.op(f'arith.addi %qb, {db} : index')}, "
      f"{t.op('arith.addi %qw, %c1 : index')} : index, index, index")
    t("}")
    # the rest of whichever row has entries left (at most one does)
    off_a = t.op(f"arith.subi {mg}#2, {mg}#0 : index")
    t(f"scf.for %p = {mg}#0 to {ahi} step %c1 {{")
    wa = t.op(f"arith.addi %p, {off_a} : index")
    t.store_index(t.load_index("%A_crd", "%p", fa.crd_width), "%C_crd", wa, cw)
    x = t.op(f"memref.load %A_val[%p] : memref<?x{T}>")
    t(f"memref.store {term_value(plan.left, x)}, %C_val[{wa}] : memref<?x{T}>")
    t("}")
    off_b = t.op(f"arith.subi {mg}#2, {mg}#1 : index")
    t(f"scf.for %p = {mg}#1 to {bhi} step %c1 {{")
    wb = t.op(f"arith.addi %p, {off_b} : index")
    t.store_index(t.load_index("%B_crd", "%p", fb.crd_width), "%C_crd", wb, cw)
    y = t.op(f"memref.load %B_val[%p] : memref<?x{T}>")
    t(f"memref.store {right_only(y)}, %C_val[{wb}] : memref<?x{T}>")
    t("}")
    t(closing)
    return_csr(t, m, n, m1, nnz, out, T)
    return module(huge_page_decls(facts), head, t.lines)
