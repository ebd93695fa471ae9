"""The formats a kernel's operands run in when its result is sparse
(``runtime/plans.prepare``; ``runtime/specialization`` re-exports these names).

- a contraction's operands are stored in Gustavson's loop order (the result's indices, the
  summed ones just before the last: :func:`_row_wise_orders`), or output-first where that
  order crosses loops no operand joins (:func:`_sums_inside`), with compressed outer levels
  where MLIR 22's stored-entry flag needs them;
- an element-wise statement reads an operand whose levels run against the result's in the
  result's order (:func:`_result_order_reads`), so the sparsifier converts nothing itself;
- MLIR 22 fails on block-sparse operands and dense levels below sparse ones
  (:func:`_for_sparse_result`), and a huge-dimension call makes nothing sized by a dimension.
"""

from __future__ import annotations

from functools import lru_cache

from ..expr import Access, Binary, Reduce, Statement, accesses
from ..formats import Format


_CSR = Format.csr()


def sparse_result_formats(stmt: Statement, formats, huge: bool = False, out_format: Format | None = None,
                          ahead_of_time: bool = False) -> list[Format]:
    """The format each operand of a statement with a sparse result (stored as
    ``out_format``) runs in: stored in the order :func:`sparse_result_orders` gives
    (:func:`_for_sparse_result`), with compressed outer levels where the summed loops run
    inside the output's (:func:`_sums_inside`); a statement with no reduction reads each
    sparse operand whose levels run against the result's in the result's order
    (:func:`_result_order_reads`; not in a ``huge`` call, whose plans make nothing sized
    by a dimension: there the kernel sorts).  ``ahead_of_time``: a library's kernel, whose
    operands' formats its manifest fixed - Gustavson's orders only, as it was built
    (:func:`result_format_for`)."""
    sparse = frozenset(n for n, f in zip(stmt.operands, formats) if not f.is_dense)
    orders = sparse_result_orders(stmt, formats, huge, frozenset() if ahead_of_time else sparse)
    if ahead_of_time:
        return [_for_sparse_result(f, orders.get(n), huge) for n, f in zip(stmt.operands, formats)]
    if not orders and out_format is not None and not huge:
        orders = _result_order_reads(stmt, tuple(formats), out_format)
    inside = None if huge and isinstance(stmt.expr, Reduce) and len(sparse) == 1 else _sums_inside(stmt, sparse)
    out = []
    for n, f in zip(stmt.operands, formats):
        g = _for_sparse_result(f, orders.get(n), huge)
        out.append(_compressed_outer(g) if inside and n in inside and not g.is_dense else g)
    return out


@lru_cache(maxsize=1024)
def _result_order_reads(stmt: Statement, formats: tuple[Format, ...], out_format: Format) -> dict:
    """For a statement with no reduction into a sparse result: the storage order (result's
    indices first, in its levels' order) of each sparse operand read once whose levels run
    against the result's - the runtime stores it so (SciPy's O(nnz) transpose for CSR/CSC, a
    sort for COO), where the sparsifier would break the cycle with a conversion inside the
    kernel that grows with the square of the entries (``ij,j,i->ji`` into CSR, a 6640 x 474
    CSR with 52,737 entries, 1 thread: 7.5 ms; from its CSC 0.43 ms)."""
    if out_format.block is not None or (isinstance(stmt.expr, Reduce) and stmt.expr.indices):
        return {}
    res = [stmt.indices[d] for d in out_format.order]
    reads: dict = {}
    for a in accesses(stmt.expr):
        reads.setdefault(a.tensor, set()).add(a.indices)
    loop = res + [i for i in dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices) if i not in res]
    orders = {}
    for name, f in zip(stmt.operands, formats):
        idx = next(iter(reads.get(name, ())), None)
        if f.is_dense or f.block is not None or len(reads.get(name, ())) != 1 or len(set(idx)) != len(idx):
            continue
        levels = [idx[d] for d in f.order]
        if [i for i in levels if i in res] != [i for i in res if i in levels]:
            orders[name] = tuple(sorted(range(len(idx)), key=lambda d: loop.index(idx[d])))
    return orders


def sparse_result_orders(stmt: Statement, formats, huge: bool = False, sparse: frozenset = frozenset()) -> dict:
    """The storage order of each operand of a contraction with a sparse result
    (:func:`_row_wise_orders`).  In a ``huge`` call with one sparse operand (``ij->j``),
    the result's indices come first and the summed ones last: Gustavson's order would
    expand the result's last index into a dense row of its size (a workspace of 17 bytes
    per element of that dimension) while the work is O(stored entries); in this order the
    operand runs as COO sorted by the result's indices and the result is inserted in order.
    ``sparse``: the sparse operands' names (:func:`_sums_inside`; none: Gustavson's orders)."""
    if huge and isinstance(stmt.expr, Reduce) and sum(not f.is_dense for f in formats) == 1:
        return _output_first_orders(stmt)
    return _row_wise_orders(stmt, sparse)


@lru_cache(maxsize=None)
def _output_first_orders(stmt: Statement) -> dict:
    loop = list(stmt.indices) + [i for i in dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices)
                                 if i not in stmt.indices]
    return {a.tensor: tuple(sorted(range(len(a.indices)), key=lambda d: loop.index(a.indices[d])))
            for a in accesses(stmt.expr) if len(set(a.indices)) == len(a.indices)}


@lru_cache(maxsize=None)
def _row_wise_orders(stmt: Statement, sparse: frozenset = frozenset()) -> dict:
    """For a contraction with a sparse result: the storage order of each operand that makes
    Gustavson's loop order possible - the result's indices in order, with the summed indices
    just before the last one (``ik,kj->ij``: i, k, j; ``ij,ik->jk``: j, i, k).  Any other
    order leaves the sparsifier the inner-product order, which stores every entry.  Where
    :func:`_sums_inside` holds (``sparse``: the sparse operands' names), the output-first
    order instead."""
    if not isinstance(stmt.expr, Reduce) or not stmt.expr.indices:
        return {}
    out = list(stmt.indices)
    summed = [i for i in dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices) if i not in out]
    loop = out + summed if _sums_inside(stmt, sparse) is not None else out[:-1] + summed + out[-1:]
    orders = {}
    for a in accesses(stmt.expr):
        if a.tensor not in orders and len(set(a.indices)) == len(a.indices):
            orders[a.tensor] = tuple(sorted(range(len(a.indices)), key=lambda d: loop.index(a.indices[d])))
    return orders


@lru_cache(maxsize=None)
def _sums_inside(stmt: Statement, sparse: frozenset) -> frozenset | None:
    """Whether a sum of products into a sparse result runs its summed loops inside its output
    loops (each output entry's sum a scalar, inserted once) rather than in Gustavson's order
    (None: not): where Gustavson's order crosses loops no operand joins and the output-first
    order does not, and every summed index is carried by one operand alone, a sparse one (the
    sum factorizes per output entry) - and for a sparse vector with one summed index, wherever
    the output-first order crosses nothing.  ``ij,ik->i`` into a sparse vector looped j, k, i walks
    every column of the one operand against every column of the other (``bc,bd->b``, 474 x
    398 and 474 x 932, 3 and 8 entries a row, 1 thread: 39 ms from CSR, 53 from COO); looped
    i, j, k it is each row's products (0.14 / 0.5 ms).

    Returned: the operands to run with compressed outer levels (:func:`sparse_result_formats`:
    CSR as DCSR).  MLIR 22 marks an output entry stored at the first iteration of its
    outermost summed loop, whether or not the summed loops inside it reach a product: a CSR's
    empty row reached through its dense level, under another operand's summed loop, stored an
    explicit zero where the product stores nothing.  So with two or more summed indices every
    operand carrying one is compressed, and must carry the first output index (its outer
    level then on the outermost loop: compressed, it is co-iterated there, not walked under
    a loop it lacks); with one summed index nothing is compressed (entering its loop is a
    product)."""
    e = stmt.expr
    if not isinstance(e, Reduce) or e.op != "sum" or e.identity is not None or not _is_product(e.body):
        return None
    out = list(stmt.indices)
    acc = [a for a in accesses(e) if a.indices]
    summed = [i for i in dict.fromkeys(i for a in acc for i in a.indices) if i not in out]
    terms = [set(a.indices) for a in acc]
    if not out or _crossed(out + summed, terms):
        return None
    if len(summed) == 1 and len(out) == 1:
        # a sparse vector: Gustavson's order expands the whole vector into a workspace and
        # sorts its coordinates at the end (ij,j->i into COO, 2000 rows: 0.57 ms); with one
        # summed index, entering its loop is a product whoever carries it
        return frozenset()
    owners = []
    for i in summed:
        got = [a for a in acc if i in a.indices]
        if len(got) != 1 or got[0].tensor not in sparse:
            return None
        owners.append(got[0])
    if not _crossed(out[:-1] + summed + out[-1:], terms):
        return None
    if len(summed) == 1:
        return frozenset()
    if any(out[0] not in a.indices for a in owners):
        return None
    return frozenset(a.tensor for a in owners)


def exact_sums_inside(stmt: Statement, formats) -> bool:
    """Whether a kernel whose loops MLIR's sorted generic shows with several summed loops
    inside the result's last output loop (``rewrites.inexact_sparse_outputs``) stores exactly
    all the same: :func:`_sums_inside`'s construction, every summed index carried by one
    sparse operand alone, each such operand here with compressed levels only (no empty fiber
    under a stored coordinate: a summed loop it drives is never empty where the output loops
    it is co-iterated with reached it)."""
    sparse = frozenset(n for n, f in zip(stmt.operands, formats) if not f.is_dense)
    inside = _sums_inside(stmt, sparse)
    if not inside:
        return False
    fmts = dict(zip(stmt.operands, formats))
    return all(not f.is_dense and all(lv != "dense" for lv in f.levels) for n, f in fmts.items() if n in inside)


def _is_product(e) -> bool:
    """``e`` is accesses multiplied (``A[i,j] * B[i,k]``)."""
    if isinstance(e, Binary) and e.op == "*":
        return _is_product(e.left) and _is_product(e.right)
    return isinstance(e, Access) and len(set(e.indices)) == len(e.indices)


def _crossed(loop, terms) -> bool:
    """Whether a loop of ``loop`` after the first is carried by no operand (``terms``: each
    one's index set) that also carries a loop outside it: a cross product of loops."""
    return any(not any(i in t and t & set(loop[:p]) for t in terms) for p, i in enumerate(loop) if p)


def _for_sparse_result(f: Format, order: tuple[int, ...] | None, huge: bool = False) -> Format:
    """The format an operand runs in when the result is sparse.  MLIR 22 fails on two kinds:
    block-sparse operands (demapping the blocks leaves unresolved casts: run as CSR) and
    dense levels below a sparse one (a transposed result from hybrid COO reads
    uninitialized memory: run as COO over every dimension).  Operands of a contraction are
    stored in ``order`` (see :func:`_row_wise_orders`); in a ``huge`` call (see
    :func:`huge_dimension`) as COO in that order when the reordered levels would start
    with a dense level over another dimension than the operand's own (a CSC operand stored
    row-wise is CSR: positions the size of its rows)."""
    if f.block is not None:
        f = _CSR
    if order is not None and not f.is_dense and f.order != order:
        g = _reordered(f, order)
        if huge and not _dense_prefix(g, range(f.rank)) <= _dense_prefix(f, range(f.rank)):
            return Format(_coo_of(f.rank).levels, order, None, f.pos_width, f.crd_width)
        f = g
    bases = [f.level_base(l) for l in range(len(f.levels))]
    sparse_levels = [k for k, b in enumerate(bases) if b != "dense"]
    if sparse_levels and "dense" in bases[sparse_levels[0]:]:
        return _coo_of(f.rank)
    return f


@lru_cache(maxsize=None)
def _reordered(f: Format, order: tuple[int, ...]) -> Format:
    return Format(f.levels, order, None, f.pos_width, f.crd_width)


def _compressed_outer(f: Format) -> Format:
    """``f`` with its leading dense levels compressed (CSR -> DCSR)."""
    levels = list(f.levels)
    for l in range(len(levels)):
        if f.level_base(l) != "dense":
            break
        levels[l] = "compressed"
    return Format(tuple(levels), f.order, None, f.pos_width, f.crd_width)


def _dense_prefix(f: Format, indices) -> frozenset:
    """The indices whose sizes multiply into the positions of ``f``'s first sparse level
    (its leading dense levels); empty for a dense format or one that starts sparse."""
    if f.is_dense:
        return frozenset(indices)
    dims = f.level_dims()
    out = []
    for l in range(len(f.levels)):
        if f.level_base(l) != "dense":
            break
        out.append(indices[dims[l][0]])
    return frozenset(out)


@lru_cache(maxsize=None)
def _coo_of(rank: int) -> Format:
    return Format.coo(rank)
