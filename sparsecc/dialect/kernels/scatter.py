"""The transposed SpMV, hand-written: ``y[c] = sum[r](A[r,c] * x[r] * ...)``.

A CSR (or CSC) operand whose stored outer level is the *reduced* index ``r`` (``A.T @ x`` of
a CSR ``A``: PageRank's step), times dense vectors indexed by ``r`` and 0-d operands.  Each
stored row scatters into the result, which the sparsifier does serially.  Here:

* one block: ``y`` is zeroed, then each row ``r`` adds ``A[r,c] * (x[r] * ...)`` to ``y[c]``;
* with ``P`` blocks (``P`` = stored entries / (16 x result entries), at most 8: as many
  as their accumulators pay for), the rows are cut into ``P`` blocks of about equal stored
  entries (a binary search of the positions); block ``b`` scatters into its own zeroed
  accumulator (block 0's is ``y``; ``scf.parallel`` over the blocks: one per thread), then
  ``y[c]`` adds the other accumulators' ``c`` in block order (``scf.parallel`` over ``c``).

``P`` follows from the operand alone, so the result does not depend on the thread count
(nor differs from the serial kernel's), bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes as dt
from ...expr import Access, Reduce, Statement
from ...formats import Format
from ...kernel_abi import TargetFacts
from .emit import Text, arith, csr_params, ity, kernel_head, loop, module, zero
from .recognize import factors, index_order, is_compressed, one_kind, plain_sum

_KINDS = ("float", "int", "complex")
#: a block (and its accumulator of n entries) per this many entries per result entry: the
#: accumulators' zeroing, fresh pages and sum cost more than a second thread gains below it
#: (PageRank's R-MAT 2^18, 7.7 entries per column: 10.8 ms in 3 blocks vs 6.6 ms in one, 1 thread)
ENTRIES_PER_COLUMN = 16
#: the most blocks (the most threads the kernel keeps busy)
MAX_BLOCKS = 8


@dataclass(frozen=True)
class ScatterPlan:
    kind: str                       # "scatter"
    sparse: str                     # A's operand name
    vectors: tuple[str, ...]        # dense vectors over r, in the product's order
    scalars: tuple[str, ...]        # 0-d operands, in the product's order
    order: tuple[int, int]
    index_order: tuple[str, ...]
    r: str                          # the reduced index (A's stored outer dimension)
    c: str                          # the result's index


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> ScatterPlan | None:
    """The scatter kernel's plan for this specialization, or None."""
    if len(stmt.indices) != 1 or (out_format is not None and not out_format.is_dense) or \
            not one_kind(dtypes, _KINDS):
        return None
    e = stmt.expr
    if not (isinstance(e, Reduce) and plain_sum(e, 1)):
        return None
    r, (c,) = e.indices[0], stmt.indices
    facs = factors(e.body)
    if facs is None or len({a.tensor for a in facs}) != len(facs) or set(a.tensor for a in facs) != set(stmt.operands):
        return None
    fmts = dict(zip(stmt.operands, formats))
    mats = [a for a in facs if len(a.indices) == 2]
    if len(mats) != 1:
        return None
    A = mats[0]
    order = tuple(fmts[A.tensor].order or (0, 1))
    if order not in ((0, 1), (1, 0)) or not is_compressed(fmts[A.tensor], order):
        return None
    if (A.indices[order[0]], A.indices[order[1]]) != (r, c):
        return None
    vectors, scalars = [], []
    for a in facs:
        if a is A:
            continue
        f = fmts[a.tensor]
        if not f.is_dense or f.block is not None:
            return None
        if a.indices == (r,):
            vectors.append(a.tensor)
        elif a.indices == ():
            scalars.append(a.tensor)
        else:
            return None
    return ScatterPlan("scatter", A.tensor, tuple(vectors), tuple(scalars), order, index_order(stmt), r, c)


def emit(plan: ScatterPlan, formats: dict, out: Format | None, dtype: str, parallel: bool,
         facts: TargetFacts) -> str:
    """The MLIR module of the kernel; ``formats`` by operand name (widths resolved)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fa = formats[plan.sparse]
    pw, cw = fa.pos_width, fa.crd_width
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    slot = {op: k for k, op in enumerate(formats)}     # (operand names need not be MLIR names)
    for op, f in formats.items():
        if op == plan.sparse:
            params += csr_params("A", f, T)
        elif op in plan.vectors:
            params.append(f"%x{slot[op]}: memref<?x{T}>")
        else:
            params.append(f"%s{slot[op]}: memref<{T}>")
    params.append(f"%out_m: memref<?x{T}>")
    head = kernel_head(params)
    t = Text()
    t.index_constants()
    # A's stored outer dimension (the reduced index) has m entries, the result n
    m, n = f"%size_{plan.r}", f"%size_{plan.c}"
    t(f"%zero = {zero(row)}")
    scal = [t.op(f"memref.load %s{slot[s]}[] : memref<{T}>") for s in plan.scalars]

    def row_scale(r: str) -> str | None:
        s = None
        for v in plan.vectors:
            x = t.op(f"memref.load %x{slot[v]}[{r}] : memref<?x{T}>")
            s = x if s is None else t.op(arith(row, "*", s, x))
        for x in scal:
            s = x if s is None else t.op(arith(row, "*", s, x))
        return s

    def scatter_rows(lo: str, hi: str, acc: str, base: str | None) -> None:
        t(f"scf.for %r = {lo} to {hi} step %c1 {{")
        plo = t.load_index("%A_pos", "%r", pw)
        phi = t.load_index("%A_pos", t.op("arith.addi %r, %c1 : index"), pw)
        s = row_scale("%r")
        t(f"scf.for %p = {plo} to {phi} step %c1 {{")
        col = t.load_index("%A_crd", "%p", cw)
        at = col if base is None else t.op(f"arith.addi {base}, {col} : index")
        v = t.op(f"memref.load %A_val[%p] : memref<?x{T}>")
        if s is not None:
            v = t.op(arith(row, "*", v, s))
        old = t.op(f"memref.load {acc}[{at}] : memref<?x{T}>")
        t(f"memref.store {t.op(arith(row, '+', old, v))}, {acc}[{at}] : memref<?x{T}>")
        t("}")
        t("}")

    def serial() -> None:
        t(f"scf.for %c = %c0 to {n} step %c1 {{")
        t(f"  memref.store %zero, %out_m[%c] : memref<?x{T}>")
        t("}")
        scatter_rows("%c0", m, "%out_m", None)

    # the blocks: as many as the entries pay for (their accumulators cost 2 x n), at most
    # MAX_BLOCKS - from the operand alone, so every thread count (and the serial kernel) sums
    # in the same order
    p0 = t.load_index("%A_pos", "%c0", pw)
    total = t.op(f"arith.subi {t.load_index('%A_pos', m, pw)}, {p0} : index")
    per = t.op(f"arith.muli {t.op(f'arith.maxui {n}, %c1 : index')}, {t.op(f'arith.constant {ENTRIES_PER_COLUMN} : index')} : index")
    want = t.op(f"arith.divui {total}, {per} : index")
    nb = t.op(f"arith.minui {t.op(f'arith.maxui {want}, %c1 : index')}, "
              f"{t.op(f'arith.constant {MAX_BLOCKS} : index')} : index")
    one = t.op(f"arith.cmpi ule, {nb}, %c1 : index")
    t(f"scf.if {one} {{")
    serial()
    t("} else {")
    _blocks(t, nb, m, n, pw, T, scatter_rows, p0, total, parallel)
    t("}")
    t("return")
    return module([], head, t.lines)


def _blocks(t: Text, nb: str, m: str, n: str, pw: int, T: str, scatter_rows, p0: str, total: str,
            parallel: bool) -> None:
    """``nb`` blocks of rows of about equal entries, each into its own accumulator, then
    the accumulators summed in block order."""
    nb1 = t.op(f"arith.addi {nb}, %c1 : index")
    t(f"%brow = memref.alloc({nb1}) : memref<?xindex>")
    t(f"%bpos = memref.alloc({nb1}) : memref<?x{ity(pw)}>")
    t(f"scf.for %b = %c0 to {nb1} step %c1 {{")
    share = t.op(f"arith.divui {t.op(f'arith.muli {total}, %b : index')}, {nb} : index")
    goal = t.op(f"arith.addi {p0}, {share} : index")
    # the first row whose position is >= goal (positions never decrease)
    bs = t.fresh("bs")
    t(f"{bs}:2 = scf.while (%lo = %c0, %hi = {m}) : (index, index) -> (index, index) {{")
    t(f"  %more = arith.cmpi ult, %lo, %hi : index")
    t("  scf.condition(%more) %lo, %hi : index, index")
    t("} do {")
    t("^bb0(%l: index, %h: index):")
    mid = t.op("arith.divui " + t.op("arith.addi %l, %h : index") + ", " + t.op("arith.constant 2 : index")
               + " : index")
    below = t.op(f"arith.cmpi ult, {t.load_index('%A_pos', mid, pw)}, {goal} : index")
    nl = t.op(f"arith.select {below}, {t.op(f'arith.addi {mid}, %c1 : index')}, %l : index")
    nh = t.op(f"arith.select {below}, %h, {mid} : index")
    t(f"scf.yield {nl}, {nh} : index, index")
    t("}")
    t(f"memref.store {bs}#0, %brow[%b] : memref<?xindex>")
    t.store_index(t.load_index("%A_pos", f"{bs}#0", pw), "%bpos", "%b", pw)
    t("}")
    nb_1 = t.op(f"arith.subi {nb}, %c1 : index")
    size = t.op(f"arith.maxui {t.op(f'arith.muli {nb_1}, {n} : index')}, %c1 : index")
    t(f"%ws = memref.alloc({size}) : memref<?x{T}>")
    # each block: its accumulator zeroed (first touched by its thread: block 0's is the
    # result, block b's %ws[(b - 1) n ...]), its rows scattered (the loop's work is weighed
    # by %bpos[b + 1] - %bpos[b]: passes/rewrites.py thread_count)
    opening, closing = loop(parallel, "%b", "%c0", nb)
    t(opening)
    t.load_index("%bpos", "%b", pw)
    b1 = t.op("arith.addi %b, %c1 : index")
    t.load_index("%bpos", b1, pw)
    lo = t.op("memref.load %brow[%b] : memref<?xindex>")
    hi = t.op(f"memref.load %brow[{b1}] : memref<?xindex>")
    first = t.op("arith.cmpi eq, %b, %c0 : index")
    t(f"scf.if {first} {{")
    t(f"scf.for %c = %c0 to {n} step %c1 {{")
    t(f"  memref.store %zero, %out_m[%c] : memref<?x{T}>")
    t("}")
    scatter_rows(lo, hi, "%out_m", None)
    t("} else {")
    base = t.op(f"arith.muli {t.op('arith.subi %b, %c1 : index')}, {n} : index")
    end = t.op(f"arith.addi {base}, {n} : index")
    t(f"scf.for %c = {base} to {end} step %c1 {{")
    t(f"  memref.store %zero, %ws[%c] : memref<?x{T}>")
    t("}")
    scatter_rows(lo, hi, "%ws", base)
    t("}")
    t(closing)
    opening, closing = loop(parallel, "%c", "%c0", n)
    t(opening)
    s = t.fresh("sum")
    y0 = t.op(f"memref.load %out_m[%c] : memref<?x{T}>")
    t(f"{s} = scf.for %b = %c0 to {nb_1} step %c1 iter_args(%a = {y0}) -> ({T}) {{")
    at = t.op(f"arith.addi {t.op(f'arith.muli %b, {n} : index')}, %c : index")
    x = t.op(f"memref.load %ws[{at}] : memref<?x{T}>")
    t(f"scf.yield {t.op(_add(T, '%a', x))} : {T}")
    t("}")
    t(f"memref.store {s}, %out_m[%c] : memref<?x{T}>")
    t(closing)
    t(f"memref.dealloc %ws : memref<?x{T}>")
    t("memref.dealloc %brow : memref<?xindex>")
    t(f"memref.dealloc %bpos : memref<?x{ity(pw)}>")


def _add(T: str, a: str, b: str) -> str:
    if T.startswith("complex"):
        return f"complex.add {a}, {b} : {T}"
    return f"{'arith.addf' if T.startswith('f') else 'arith.addi'} {a}, {b} : {T}"
