"""The transposed SpMV, hand-written: ``y[c] = sum[r](A[r,c] * x[r] * ...)``.

A CSR (or CSC) operand whose stored outer level is the *reduced* index ``r`` (``A.T @ x`` of
a CSR ``A``: PageRank's step), times dense vectors indexed by ``r`` and 0-d operands.  Each
stored row scatters into the result, which the sparsifier does serially.  Here:

* one block: ``y`` is zeroed, then each row ``r`` adds ``A[r,c] * (x[r] * ...)`` to ``y[c]``;
* with ``P`` blocks (``P`` the largest power of two, at most 8, not above stored entries /
  (3 x result entries): as many as their accumulators pay for), the rows are cut into ``P`` blocks of about equal stored
  entries (a binary search of the positions); block ``b`` scatters into its own zeroed
  accumulator (block 0's is ``y``; ``scf.parallel`` over the blocks: one per thread), then
  ``y[c]`` adds the other accumulators' ``c`` in block order (``scf.parallel`` over ``c``).

``P`` follows from the operand alone, so the result does not depend on the thread count
(nor differs from the serial kernel's), bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...expr import Access, Binary, Const, Expr, Reduce, Statement, Stored, Unary, Where, accesses, children, fold, \
    infer_dtypes, walk
from ...formats import Format
from ...kernel_abi import TargetFacts
from ..regions import Body
from .emit import FLAG_CALL, FLAG_DECL, Text, arith, csr_params, ity, kernel_head, loop, module, set_flag, zero
from .recognize import index_order, is_compressed, one_kind, plain_sum

_KINDS = ("float", "int", "complex")
#: a block (and its accumulator of n entries) per this many entries per result entry: an
#: accumulator costs its zeroing and its read in the final pass (16 bytes a column), a block
#: at least 3 entries a column (12 bytes each and a read-modify-write of the accumulator);
#: PageRank's R-MAT 2^18 (7.7 entries a column) runs in 2 blocks, a second thread halves it
ENTRIES_PER_COLUMN = 3
#: the most blocks (the most threads the kernel keeps busy)
MAX_BLOCKS = 8


@dataclass(frozen=True)
class ScatterPlan:
    kind: str                       # "scatter"
    sparse: str                     # A's operand name
    vectors: tuple[str, ...]        # dense operands over r (read in the row factor)
    scalars: tuple[str, ...]        # 0-d operands
    order: tuple[int, int]
    index_order: tuple[str, ...]
    r: str                          # the reduced index (A's stored outer dimension)
    c: str                          # the result's index
    row: Expr | None = None         # the row factor: the body's product without A (None: 1)
    post: Expr | None = None        # the result's expression of the sum (Access(SUM, (c,))), None: the sum
    columns: tuple[str, ...] = ()   # dense operands over c (read in ``post``)


#: the sum's placeholder in :attr:`ScatterPlan.post`
SUM = "%sum"
#: nodes a row factor or a post expression may hold (element-wise over dense operands)
_ELEMENTWISE = (Access, Const, Unary, Binary, Where, Stored)


def _split(e) -> tuple[Reduce, object] | None:
    """The one reduction of ``e`` and ``e`` with it replaced by ``Access(SUM, ())`` (its
    indices fixed by the caller), or None (no reduction, or several)."""
    found = [n for n in walk(e) if isinstance(n, Reduce)]
    if len(found) != 1:
        return None
    red = found[0]

    def sub(n):
        if n is red:
            return Access(SUM, ())
        kids = children(n)
        if not kids:
            return n
        new = tuple(sub(k) for k in kids)
        if isinstance(n, Unary):
            return Unary(n.fn, new[0])
        if isinstance(n, Binary):
            return Binary(n.op, *new)
        if isinstance(n, Where):
            return Where(*new)
        return Stored(new[0]) if isinstance(n, Stored) else None
    post = sub(e)
    sub = None              # (the recursive closure's cell let go: no cycle for the collector)
    return (red, post) if post is not None and all(isinstance(n, _ELEMENTWISE) for n in walk(post)) else None


def _product(e) -> list | None:
    """The terms of a product ``t1 * t2 * ...`` (not split below other operators)."""
    if isinstance(e, Binary) and e.op == "*":
        left, right = _product(e.left), _product(e.right)
        return left + right
    return [e]


def _over(e, fmts: dict, ix: str) -> set | None:
    """The dense operands ``e`` reads at ``[ix]`` (0-d ones too), None if ``e`` is not
    element-wise over dense operands read at ``[ix]`` or ``[]``."""
    if not all(isinstance(n, _ELEMENTWISE) for n in walk(e)):
        return None
    names = set()
    for a in accesses(e):
        if a.tensor == SUM:
            continue
        f = fmts.get(a.tensor)
        if f is None or not f.is_dense or f.block is not None or a.indices not in ((ix,), ()):
            return None
        names.add(a.tensor)
    return names


def _times(terms: list):
    out = None
    for x in terms:
        out = x if out is None else Binary("*", out, x)
    return out


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> ScatterPlan | None:
    """The scatter kernel's plan for this specialization, or None: ``y[c] = post(sum[r](A[r,c]
    * row))``, ``row`` and ``post`` element-wise over dense operands read at ``[r]`` (and
    ``[]``), ``[c]`` (and ``[]``); the result has the operands' dtype."""
    if len(stmt.indices) != 1 or (out_format is not None and not out_format.is_dense) or \
            not one_kind(dtypes, _KINDS):
        return None
    split = _split(fold(stmt.expr))
    if split is None:
        return None
    e, post = split
    if not plain_sum(e, 1):
        return None
    r, (c,) = e.indices[0], stmt.indices
    fmts = dict(zip(stmt.operands, formats))
    terms = _product(e.body)
    mats = [a for a in terms if isinstance(a, Access) and len(a.indices) == 2]
    if len(mats) != 1:
        return None
    A = mats[0]
    order = tuple(fmts[A.tensor].order or (0, 1))
    if order not in ((0, 1), (1, 0)) or not is_compressed(fmts[A.tensor], order):
        return None
    if (A.indices[order[0]], A.indices[order[1]]) != (r, c):
        return None
    rest = [x for x in terms if x is not A]
    row_names = _over(_times(rest), fmts, r) if rest else set()
    post_names = _over(post, fmts, c)
    if row_names is None or post_names is None or A.tensor in row_names | post_names:
        return None
    post = _fix(post, c)
    if isinstance(post, Access):                          # the plain sum
        post = None
    else:
        fake = Statement(stmt.output, stmt.indices, post, stmt.operands)
        types = {k: np.dtype(v) for k, v in zip(stmt.operands, dtypes)} | {SUM: np.dtype(dtypes[0])}
        if infer_dtypes(fake, types)[post] != np.dtype(dtypes[0]):      # (an int sum made float)
            return None
    if rest:
        fake = Statement(stmt.output, (r,), _times(rest), stmt.operands)
        got = infer_dtypes(fake, {k: np.dtype(v) for k, v in zip(stmt.operands, dtypes)})[fake.expr]
        if got != np.dtype(dtypes[0]):
            return None
    ops = [o for o in stmt.operands if o != A.tensor]
    vectors = tuple(o for o in ops if o in row_names and fmts[o].rank == 1)
    columns = tuple(o for o in ops if o in post_names and fmts[o].rank == 1)
    scalars = tuple(o for o in ops if fmts[o].rank == 0)
    if set(vectors) & set(columns) or set(vectors) | set(columns) | set(scalars) != set(ops):
        return None             # (a vector read at [r] and at [c]: a square A's, not this kernel's)
    return ScatterPlan("scatter", A.tensor, vectors, scalars, order, index_order(stmt), r, c,
                       _times(rest) if rest else None, post, columns)


def guarded(plan: ScatterPlan, stmt: Statement, formats: tuple[Format, ...]) -> tuple[int, ...]:
    """The kernel argument position of A's coordinates (which the kernel range-checks)."""
    at = len(plan.index_order)
    for op, f in zip(stmt.operands, formats):
        if op == plan.sparse:
            return (at + f.fields().index(("crd", 1)),)
        at += 1 if f.is_dense else len(f.fields()) + 1
    return ()


def _fix(e, c: str):
    """``e`` with the sum's placeholder read at ``[c]``."""
    if isinstance(e, Access):
        return Access(SUM, (c,)) if e.tensor == SUM else e
    kids = tuple(_fix(k, c) for k in children(e))
    if isinstance(e, Unary):
        return Unary(e.fn, *kids)
    if isinstance(e, Binary):
        return Binary(e.op, *kids)
    if isinstance(e, Where):
        return Where(*kids)
    return Stored(*kids) if isinstance(e, Stored) else e


def emit(plan: ScatterPlan, formats: dict, out: Format | None, dtype: str, parallel: bool,
         facts: TargetFacts) -> str:
    """The MLIR module of the kernel; ``formats`` by operand name (widths resolved)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fa = formats[plan.sparse]
    pw = fa.pos_width
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    slot = {op: k for k, op in enumerate(formats)}     # (operand names need not be MLIR names)
    for op, f in formats.items():
        if op == plan.sparse:
            params += csr_params("A", f, T)
        elif op in plan.vectors or op in plan.columns:
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
    t("%one32 = arith.constant 1 : i32")
    t(f"%flag = {FLAG_CALL}")

    def report(bad: str) -> None:
        t(f"scf.if {bad} {{")
        t("  " + set_flag("%one32", "%flag"))
        t("}")

    # no result entries: no row is scattered (any stored entry is out of range)
    live = t.op(f"arith.cmpi ugt, {n}, %c0 : index")
    t(f"%nmax = arith.subi {t.op(f'arith.maxui {n}, %c1 : index')}, %c1 : index")
    rows = t.op(f"arith.select {live}, {m}, %c0 : index")
    scal = {s: t.op(f"memref.load %s{slot[s]}[] : memref<{T}>") for s in plan.scalars}
    types = {op: np.dtype(dtype) for op in formats} | {SUM: np.dtype(dtype)}
    body = Body({}, sparse_loop=False)
    body.prefix = "e"
    const_at = len(t.lines)

    def value(e, at: str, extra: dict) -> str:
        """``e``'s value with its vectors read at ``at``."""
        body.node_dtypes = infer_dtypes(Statement("y", (), e, tuple(types)), types)
        body.lines = []
        body.args = {}
        for a in accesses(e):
            if a.tensor in extra:
                body.args[a] = extra[a.tensor]
            elif a.indices:
                body.args[a] = t.op(f"memref.load %x{slot[a.tensor]}[{at}] : memref<?x{T}>")
            else:
                body.args[a] = scal[a.tensor]
        v = body.value(e, row)
        t.lines.extend(body.lines)
        return v

    def row_scale(r: str) -> str | None:
        return None if plan.row is None else value(plan.row, r, {})

    def finish(c: str, s: str) -> str:
        """The result at ``c`` from its sum ``s``."""
        return s if plan.post is None else value(plan.post, c, {SUM: s})

    def scatter_rows(lo: str, hi: str, acc: str, base: str | None) -> None:
        t(f"scf.for %r = {lo} to {hi} step %c1 {{")
        plo = t.load_index("%A_pos", "%r", pw)
        phi = t.load_index("%A_pos", t.op("arith.addi %r, %c1 : index"), pw)
        s = row_scale("%r")
        # each coordinate clamped below n (no access leaves the accumulator), the row's
        # unsigned maximum compared once: an out-of-range one sets the call's flag
        mx = t.fresh("mx")
        t(f"{mx} = scf.for %p = {plo} to {phi} step %c1 iter_args(%hi = %c0) -> (index) {{")
        col = t.load_index("%A_crd", "%p", fa.crd_width)
        safe = t.op(f"arith.minui {col}, %nmax : index")
        at = safe if base is None else t.op(f"arith.addi {base}, {safe} : index")
        v = t.op(f"memref.load %A_val[%p] : memref<?x{T}>")
        if s is not None:
            v = t.op(arith(row, "*", v, s))
        old = t.op(f"memref.load {acc}[{at}] : memref<?x{T}>")
        t(f"memref.store {t.op(arith(row, '+', old, v))}, {acc}[{at}] : memref<?x{T}>")
        t(f"scf.yield {t.op(f'arith.maxui %hi, {col} : index')} : index")
        t("}")
        report(t.op(f"arith.cmpi ugt, {mx}, %nmax : index"))
        t("}")

    def serial() -> None:
        t(f"scf.for %c = %c0 to {n} step %c1 {{")
        t(f"  memref.store %zero, %out_m[%c] : memref<?x{T}>")
        t("}")
        scatter_rows("%c0", rows, "%out_m", None)
        if plan.post is not None:          # the result's expression: one pass over the sums
            opening, closing = loop(parallel, "%c", "%c0", n)
            t(opening)
            y = t.op(f"memref.load %out_m[%c] : memref<?x{T}>")
            t(f"memref.store {finish('%c', y)}, %out_m[%c] : memref<?x{T}>")
            t(closing)

    # the blocks: as many as the entries pay for (their accumulators cost 2 x n), at most
    # MAX_BLOCKS - from the operand alone, so every thread count (and the serial kernel) sums
    # in the same order
    p0 = t.load_index("%A_pos", "%c0", pw)
    total = t.op(f"arith.subi {t.load_index('%A_pos', m, pw)}, {p0} : index")
    per = t.op(f"arith.muli {t.op(f'arith.maxui {n}, %c1 : index')}, "
               f"{t.op(f'arith.constant {ENTRIES_PER_COLUMN} : index')} : index")
    want = t.op(f"arith.divui {total}, {per} : index")
    nb = "%c1"
    for p in (2, 4, 8):         # a power of two: as many blocks for each of 2, 4, 8 threads
        if p > MAX_BLOCKS:
            break
        cp = t.op(f"arith.constant {p} : index")
        nb = t.op(f"arith.select {t.op(f'arith.cmpi uge, {want}, {cp} : index')}, {cp}, {nb} : index")
    dead = t.op(f"arith.cmpi eq, {n}, %c0 : index")
    report(t.op(f"arith.andi {dead}, {t.op(f'arith.cmpi ugt, {total}, %c0 : index')} : i1"))
    one = t.op(f"arith.ori {t.op(f'arith.cmpi ule, {nb}, %c1 : index')}, {dead} : i1")
    t(f"scf.if {one} {{")
    serial()
    t("} else {")
    _blocks(t, nb, m, n, pw, T, scatter_rows, p0, total, parallel, finish)
    t("}")
    t("return")
    t.lines[const_at:const_at] = body.hoisted
    return module([FLAG_DECL], head, t.lines)


def _blocks(t: Text, nb: str, m: str, n: str, pw: int, T: str, scatter_rows, p0: str, total: str,
            parallel: bool, finish) -> None:
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
    t(f"memref.store {finish('%c', s)}, %out_m[%c] : memref<?x{T}>")
    t(closing)
    t(f"memref.dealloc %ws : memref<?x{T}>")
    t("memref.dealloc %brow : memref<?xindex>")
    t(f"memref.dealloc %bpos : memref<?x{ity(pw)}>")


def _add(T: str, a: str, b: str) -> str:
    if T.startswith("complex"):
        return f"complex.add {a}, {b} : {T}"
    return f"{'arith.addf' if T.startswith('f') else 'arith.addi'} {a}, {b} : {T}"
