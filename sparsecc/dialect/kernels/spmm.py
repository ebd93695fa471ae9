"""SpMM with a dense result, hand-written (issue 14).

``C[i,j] = sum[k](A[i,k] * X[k,j])`` (the einsum ``ik,kj->ij``, either operand order, any
index names: ``ij,jk->ik``) with A CSR, X dense row-major and a dense (row-major) result,
float32/float64.  MLIR's sparsifier makes the loop ``for i, for p in row i, for j:
C[i,j] += A[p] * X[crd[p],j]``: the j loop loads and stores the row of C for every stored
entry.  This kernel:

* keeps a block of the output row in vector registers (``vector<W x T>`` with W x T =
  ``BLOCK_BYTES``; LLVM splits it into the machine's registers) while it walks the row's
  entries (``math.fma`` of the broadcast value with ``vector.load`` of X's row), then
  stores the block once.  The columns go in blocks of ``BLOCK_BYTES``, then at most one
  each of a half, a quarter and an eighth of that, then a masked block
  (``vector.maskedload``/``maskedstore``) for the last few: any column count works;
* prefetches, for each entry, the same columns of the X row of the entry ``PREFETCH``
  entries ahead (in the whole operand: across row ends too): X's rows are read in A's column
  order, which the hardware prefetcher cannot guess;
* runs the rows in an ``scf.parallel`` (OpenMP through the ordinary pipeline; the body reads
  ``pos[i]`` and ``pos[i+1]``, so ``passes/rewrites.py thread_count`` weighs the loop by its
  rows plus stored entries and deals rows dynamically).  Each output entry is summed by one
  thread in A's order, so the result does not depend on the thread count, bit for bit;
* range-checks A's coordinates itself (``check=True`` then skips the NumPy check of
  ``indices``, as for ``passes/guards.py``): every coordinate it uses is clamped below X's
  row count (so no access leaves X) and the row's unsigned maximum is compared once per row
  block; an out-of-range one sets the call's flag (``sparsecc_index_flag``), the call then
  raises the NumPy check's ``OperandError``.  With no columns the coordinates are scanned
  on their own.

The kernel itself needs no canonical order (each entry it reads is added to the row's
sums), but the call path hands it a canonical A: an operand with unsorted or duplicate
coordinates is coalesced on a copy first, as for every kernel (docs/formats.md), so
duplicates are summed before they multiply X (as ``numpy.einsum`` on a dense copy does).  The function has the arguments of the
sparsifier's kernel for the same statement (the sizes, per operand its buffers and
specifier or its dense memref, the output memref), so the call path packs it unchanged.  It
writes every entry of the output (empty rows and an X without rows give zeros), so the call
hands it uninitialized memory (``Compiled.fills_output``): the zero fill of a fresh 12.8 MB
result was 5-12% of the bench's call.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes as dt
from ...expr import Access, Binary, Statement
from ...formats import Format
from ...kernel_abi import TargetFacts
from .emit import (FLAG_CALL, FLAG_DECL, Text, kernel_head, loop, module, multiply_add, operand_params, row_bounds,
                   set_flag)
from .recognize import RolePlan, index_order, is_csr, is_dense_rowmajor, one_kind, plain_sum

#: the widest block of an output row kept in registers while the row's entries are read:
#: 256 bytes (32 float64: 8 AVX2 registers of 16, 4 of AVX-512's 32)
BLOCK_BYTES = 256
#: the X row prefetched is the one of the entry this many entries ahead
PREFETCH = 4
#: the value kinds routed here (int and complex keep the sparsifier's kernel)
_KINDS = ("float",)


@dataclass(frozen=True)
class Plan(RolePlan):
    """A recognised SpMM: the operand names of A (CSR) and X (dense), the index names."""

    i: str
    k: str
    j: str


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written SpMM for this specialization, or None (the sparsifier's kernel)."""
    if out_format is not None or len(stmt.operands) != 2 or len(stmt.indices) != 2 or not one_kind(dtypes, _KINDS):
        return None
    e = stmt.expr
    if not plain_sum(e, 1):
        return None
    b = e.body
    if not (isinstance(b, Binary) and b.op == "*" and isinstance(b.left, Access) and isinstance(b.right, Access)):
        return None
    fmts = dict(zip(stmt.operands, formats))
    left, right = b.left, b.right
    if left.tensor == right.tensor or len(left.indices) != 2 or len(right.indices) != 2:
        return None
    A, X = (left, right) if not fmts[left.tensor].is_dense else (right, left)
    if not is_csr(fmts[A.tensor]) or not is_dense_rowmajor(fmts[X.tensor]):
        return None
    i, k = A.indices
    j = X.indices[1]
    if X.indices[0] != k or e.indices != (k,) or stmt.indices != (i, j) or len({i, j, k}) != 3:
        return None
    return Plan("spmm", (("A", A.tensor), ("X", X.tensor)), index_order(stmt), i, k, j)


def emit(plan: Plan, formats: dict, out: Format | None, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module (module docstring); ``formats`` by operand name, widths resolved
    (``out``: None, a dense result; ``facts``: nothing here depends on them)."""
    row = dt.TABLE[dtype]
    T = row.storage
    size = row.numpy.itemsize
    fa = plan.format_of("A", formats)
    pw, cw = fa.pos_width, fa.crd_width
    MT = f"memref<?x?x{T}>"
    params = operand_params(plan, formats, T) + [f"%C: {MT}"]
    m, K, N = f"%size_{plan.i}", f"%size_{plan.k}", f"%size_{plan.j}"

    t = Text()
    t.index_constants()
    t("%one32 = arith.constant 1 : i32")
    t(f"%flag = {FLAG_CALL}")

    def report(bad: str) -> None:
        t(f"scf.if {bad} {{")
        t("  " + set_flag("%one32", "%flag"))
        t("}")

    nnz = t.load_index("%A_pos", m, pw)
    has_rows = t.op(f"arith.cmpi ugt, {K}, %c0 : index")
    t(f"scf.if {has_rows} {{")
    kmax = t.op(f"arith.subi {K}, %c1 : index")
    last = t.op(f"arith.subi {t.op(f'arith.maxui {nnz}, %c1 : index')}, %c1 : index")
    ahead = t.op(f"arith.constant {PREFETCH} : index")
    has_cols = t.op(f"arith.cmpi ugt, {N}, %c0 : index")
    t(f"scf.if {has_cols} {{")
    opening, closing = loop(parallel, "%i", "%c0", m)
    t(opening)
    # the body reads pos[i] and pos[i + 1] directly: the thread count follows the entries
    lo, _, hi = row_bounds(t, "%A_pos", "%i", pw)
    line = max(1, 64 // size)

    def block(cb: str, w: int, mask: str | None) -> None:
        """C[i, cb:cb+w] = sum over the row's entries (in registers), masked by ``mask``."""
        ty = f"vector<{w}x{T}>"
        zv = t.op(f"arith.constant dense<0.0> : {ty}")
        acc, mx = t.fresh("acc"), t.fresh("mx")
        t(f"{acc}, {mx} = scf.for %p = {lo} to {hi} step %c1 iter_args(%a = {zv}, %mx0 = %c0) -> ({ty}, index) {{")
        jv = t.load_index("%A_crd", "%p", cw)
        jc = t.op(f"arith.minui {jv}, {kmax} : index")
        mx2 = t.op(f"arith.maxui %mx0, {jv} : index")
        # the same columns of the X row PREFETCH entries ahead (clamped to the last entry)
        q = t.op(f"arith.minui {t.op(f'arith.addi %p, {ahead} : index')}, {last} : index")
        jn = t.op(f"arith.minui {t.load_index('%A_crd', q, cw)}, {kmax} : index")
        offsets = list(range(0, w, line)) if mask is None else [0]
        if mask is None and (w * size) % 64 == 0 and w > 1:
            offsets.append(w - 1)        # a row not aligned to a cache line spans one more
        for off in offsets:
            col = cb if off == 0 else t.op(f"arith.addi {cb}, {t.op(f'arith.constant {off} : index')} : index")
            t(f"memref.prefetch %X[{jn}, {col}], read, locality<3>, data : {MT}")
        v = t.op(f"memref.load %A_val[%p] : memref<?x{T}>")
        vb = t.op(f"vector.broadcast {v} : {T} to {ty}")
        if mask is None:
            x = t.op(f"vector.load %X[{jc}, {cb}] : {MT}, {ty}")
        else:
            x = t.op(f"vector.maskedload %X[{jc}, {cb}], {mask}, {zv} : {MT}, vector<{w}xi1>, {ty} into {ty}")
        s = multiply_add(t, True, vb, x, "%a", ty)
        t(f"  scf.yield {s}, {mx2} : {ty}, index")
        t("}")
        if mask is None:
            t(f"vector.store {acc}, %C[%i, {cb}] : {MT}, {ty}")
        else:
            t(f"vector.maskedstore %C[%i, {cb}], {mask}, {acc} : {MT}, vector<{w}xi1>, {ty}")
        report(t.op(f"arith.cmpi uge, {mx}, {K} : index"))

    W = max(1, BLOCK_BYTES // size)
    widths = [W, W // 2, W // 4, W // 8]
    start = "%c0"
    for n, w in enumerate(widths):
        cwv = t.op(f"arith.constant {w} : index")
        left = t.op(f"arith.subi {N}, {start} : index")
        if n == 0:          # as many full blocks as fit
            span = t.op(f"arith.muli {t.op(f'arith.divui {left}, {cwv} : index')}, {cwv} : index")
        else:               # at most one of each smaller width
            fits = t.op(f"arith.cmpi uge, {left}, {cwv} : index")
            span = t.op(f"arith.select {fits}, {cwv}, %c0 : index")
        end = t.op(f"arith.addi {start}, {span} : index")
        cb = t.fresh("cb")
        t(f"scf.for {cb} = {start} to {end} step {cwv} {{")
        block(cb, w, None)
        t("}")
        start = end
    # the last columns (fewer than the smallest width): one masked block
    wt = widths[-1]
    rest = t.op(f"arith.subi {N}, {start} : index")
    some = t.op(f"arith.cmpi ugt, {rest}, %c0 : index")
    t(f"scf.if {some} {{")
    mask = t.op(f"vector.create_mask {rest} : vector<{wt}xi1>")
    block(start, wt, mask)
    t("}")
    t(closing)
    t("} else {")
    # no columns: nothing to compute, the coordinates are still checked
    mx = t.fresh("mx")
    t(f"{mx} = scf.for %p = %c0 to {nnz} step %c1 iter_args(%mx0 = %c0) -> (index) {{")
    jv = t.load_index("%A_crd", "%p", cw)
    t(f"  scf.yield {t.op(f'arith.maxui %mx0, {jv} : index')} : index")
    t("}")
    report(t.op(f"arith.cmpi uge, {mx}, {K} : index"))
    t("}")
    t("} else {")
    # X has no rows: every stored entry of A is out of range, and the output is zeros
    report(t.op(f"arith.cmpi ugt, {nnz}, %c0 : index"))
    zero = t.op(f"arith.constant 0.0 : {T}")
    t(f"scf.for %i = %c0 to {m} step %c1 {{")
    t(f"  scf.for %j = %c0 to {N} step %c1 {{")
    t(f"    memref.store {zero}, %C[%i, %j] : {MT}")
    t("  }")
    t("}")
    t("}")
    t("return")
    return module([FLAG_DECL], kernel_head(params), t.lines)


def guarded(plan: Plan, stmt: Statement, formats: tuple[Format, ...]) -> tuple[int, ...]:
    """The kernel argument position of A's coordinates (which the kernel range-checks)."""
    at = len(plan.index_order)
    for op, f in zip(stmt.operands, formats):
        if plan.role(op) == "A":
            return (at + f.fields().index(("crd", 1)),)
        at += 1 if f.is_dense else len(f.fields()) + 1
    return ()
