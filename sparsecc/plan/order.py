"""Loop orders against stored orders: what a loop nest walks when it reads a sparse operand
out of its order, and the conversion that avoids it.

The sparsifier orders a nest's loops so that each sparse operand's levels are visited in
its storage order (a topological sort of the levels' edges, parallel loops first, else in
the statement's index order: :func:`loop_order`).  A *compressed* level (CSR's second,
COO's and DCSR's first) is walked, not located: where the loop over it runs inside a loop
over an index the operand does not carry, the level is walked again for every coordinate
of that outer loop - a COO operand looked up by its first index walks all its rows for each
outer coordinate, a CSR ``T[c,b]`` under a loop over ``a`` walks every row ``c`` for each
``a`` (:func:`walks`).  Dense operands' loops and the result's multiply-adds pay that walk
only where it finds nothing to multiply: a nest costs ``max(products, walked)``
(:func:`extra_ops`).

A leaf operand walked so may instead be converted first (:func:`conversion`: a compiled copy
step ``t[c,d] = T[c,d]`` stored CSR in the order the nest reads it, CSC where that order is
the reverse); the planner takes it where the copy costs less than the walk.

The facts come in as data (:class:`Layout`, built by the caller from each operand's format):
this module runs nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from . import cost as _cost
from .stats import TensorStats


@dataclass(frozen=True)
class Layout:
    """A sparse operand's storage: ``levels``, its indices in storage order, and
    ``compressed``, per level, whether the level is walked (compressed) rather than located
    (dense) or followed one to one (singleton); ``nonunique``: the first level repeats a
    coordinate once per entry (COO), so a walk over it steps over every entry."""

    levels: tuple[str, ...]
    compressed: tuple[bool, ...]
    nonunique: bool = False

    def __post_init__(self):
        if len(self.levels) != len(self.compressed):
            raise ValueError(f"layout {self.levels!r}: {len(self.compressed)} level kinds for "
                             f"{len(self.levels)} levels")


#: the layouts of formats by name, as level kinds (rank 2; ``coo`` of any rank)
def layout_of(fmt: str, indices: tuple[str, ...]) -> Layout | None:
    """The layout of an operand stored as ``fmt`` (``"csr"``, ``"csc"``, ``"dcsr"``,
    ``"coo"``) over ``indices``; None for dense (or a format not known here: read in order)."""
    idx = tuple(indices)
    if fmt == "csr" and len(idx) == 2:
        return Layout(idx, (False, True))
    if fmt == "csc" and len(idx) == 2:
        return Layout((idx[1], idx[0]), (False, True))
    if fmt == "dcsr" and len(idx) == 2:
        return Layout(idx, (True, True))
    if fmt == "coo" and idx:
        return Layout(idx, (True,) + (False,) * (len(idx) - 1), len(idx) > 1)
    return None


def _sort(dims, chains, outs) -> tuple[str, ...] | None:
    """MLIR's ``IterationGraphSorter::topoSort`` (default strategy) over the level edges of
    ``chains``: loops with no unplaced predecessor wait in two lists (parallel - output - and
    reduction); a parallel one goes first, and of a list its *last* entry (loops enter in
    index order, then as their last predecessor is placed); None on a cycle."""
    pos = {i: k for k, i in enumerate(dims)}
    edge = [[False] * len(dims) for _ in dims]
    indeg = [0] * len(dims)
    for levels in chains:
        for a, b in zip(levels, levels[1:]):
            f, t = pos[a], pos[b]
            if f != t and not edge[f][t]:
                edge[f][t] = True
                indeg[t] += 1
    par = [k for k, i in enumerate(dims) if indeg[k] == 0 and i in outs]
    red = [k for k, i in enumerate(dims) if indeg[k] == 0 and i not in outs]
    done: list[int] = []
    while par or red:
        src = (par or red).pop()
        done.append(src)
        for dst in range(len(dims)):
            if edge[src][dst]:
                indeg[dst] -= 1
                if indeg[dst] == 0:
                    (par if dims[dst] in outs else red).append(dst)
    return tuple(dims[k] for k in done) if len(done) == len(dims) else None


def _masked(dims, sparse, dense_in, out, out_sparse):
    """MLIR's masks, strictest first (every dense operand's and a dense result's row-major
    order, then dense inputs', then the dense result's, then sparse levels only): the first
    order found that a sparse result admits (its leading parallel loops cover all but its
    last level); None where the sparse levels alone form a cycle."""
    outs = set(out)
    res = [tuple(out)] if out_sparse else []
    dense_out = [] if out_sparse else [tuple(out)]
    found = None
    for extra in (dense_in + dense_out, dense_in, dense_out, []):
        got = _sort(dims, sparse + res + extra, outs)
        if got is None:
            continue
        found = found or got
        lead = next((k for k, i in enumerate(got) if i not in outs), len(got))
        if not out_sparse or lead >= len(out) - 1:
            return got
    return found


def schedule(terms, layouts, out, out_sparse: bool = False) -> tuple[tuple[str, ...] | None, int | None]:
    """The sparsifier's loop order of a nest over ``terms`` (each factor's indices) whose
    sparse factors are stored as ``layouts`` (None: dense, row-major), producing ``out``
    (stored sparse, in its indices' order, where ``out_sparse``), and the factor it converts
    first, if any: MLIR 22's ``GenericOpScheduler`` in ``SparseReinterpretMap.cpp``.  Loops
    are numbered output indices first, then the rest in order of appearance (the emitter's
    ``linalg.generic``); the levels' orders are sorted by :func:`_masked`; where the sparse
    levels form a cycle, the first sparse factor whose levels left out give an order is
    converted into that order (its level kinds kept) and the nest sorted again.  ``(None,
    None)`` where no single conversion breaks the cycle."""
    return _schedule(tuple(tuple(t) for t in terms), tuple(layouts), tuple(out), bool(out_sparse))


@lru_cache(maxsize=4096)
def _schedule(terms, layouts, out, out_sparse):
    """:func:`schedule` on hashable arguments, once per nest shape (a search asks for the same
    ones at many splits)."""
    dims = list(dict.fromkeys(tuple(out) + tuple(i for t in terms for i in t)))
    sparse = [lay.levels for lay in layouts if lay is not None]
    dense_in = [tuple(t) for t, lay in zip(terms, layouts) if lay is None and len(t) > 1]
    got = _masked(dims, sparse, dense_in, out, out_sparse)
    if got is not None:
        return got, None
    res = [tuple(out)] if out_sparse else []
    for k, lay in enumerate(layouts):
        if lay is None:
            continue
        rest = [other.levels for j, other in enumerate(layouts) if other is not None and j != k]
        order = _sort(dims, rest + res, set(out))
        if order is None:
            continue
        trial = list(layouts)
        trial[k] = converted(lay, order)
        again = _masked(dims, [x.levels for x in trial if x is not None], dense_in, out, out_sparse)
        return again or order, k
    return None, None


def converted(lay: Layout, loop) -> Layout:
    """``lay`` with its levels permuted into the order ``loop`` visits them, each level's kind
    kept (the sparsifier's ``sparse_tensor.convert`` breaking a cycle: COO stays COO)."""
    return Layout(tuple(sorted(lay.levels, key=list(loop).index)), lay.compressed, lay.nonunique)


def loop_order(terms, layouts, out, out_sparse: bool = False) -> tuple[str, ...] | None:
    """The sparsifier's loop order (:func:`schedule`) where no factor is converted for it;
    None where the sparse levels' orders conflict (a cycle: the sparsifier converts one)."""
    order, conv = schedule(terms, layouts, out, out_sparse)
    return order if conv is None else None


def reduces_inside(loop, out) -> bool:
    """Whether every output loop of ``loop`` runs outside every reduction loop (False where
    the order is unknown: None)."""
    if loop is None:
        return False
    outs = set(out)
    lead = next((k for k, i in enumerate(loop) if i not in outs), len(loop))
    return all(i not in outs for i in loop[lead:])


def _fanout(j: str, leaves, dense, layouts) -> float:
    """How many coordinates of index ``j`` a loop over it visits for one coordinate of the
    loops outside it: the fewest any factor carrying it offers there (a dense factor or
    level: its size; a sparse level: its first level's non-empty slices, a later one its
    average fiber)."""
    best = math.inf
    for st, d, lay in zip(leaves, dense, layouts):
        if j not in st.indices:
            continue
        if d or st.full or lay is None or j not in lay.levels:
            got = float(st.size_of(j))
        else:
            k = lay.levels.index(j)
            first = max(1.0, float(st.nonempty_slices(lay.levels[0])))
            if k == 0:
                got = first if lay.compressed[0] else float(st.size_of(j))
            else:
                got = (float(st.nnz) / first) ** (1.0 / (len(lay.levels) - 1))
        best = min(best, got)
    return 1.0 if math.isinf(best) else max(1.0, best)


def walks(loop, leaves: list[TensorStats], dense: list[bool], layouts, skip=()) -> float:
    """The entries a nest in ``loop`` order walks in the compressed levels of its sparse
    factors (``leaves``' statistics, ``layouts``): a level under loops over indices its
    operand does not carry is walked once for every coordinate those loops visit
    (the loops' :func:`_fanout` multiplied, per coordinate of the operand's own outer levels)."""
    pos = {i: k for k, i in enumerate(loop)}
    fans: dict[str, float] = {}

    def fan(j):             # (only for the loops outside a walked level: most nests have none)
        got = fans.get(j)
        if got is None:
            got = fans[j] = _fanout(j, leaves, dense, layouts)
        return got
    total = 0.0
    for n, (st, lay) in enumerate(zip(leaves, layouts)):
        if lay is None or n in skip:
            continue
        for k, (i, comp) in enumerate(zip(lay.levels, lay.compressed)):
            if not comp:
                continue
            outer = loop[:pos[i]]
            if all(j in st.indices for j in outer):
                continue                # read in its order: walked once
            # the coordinates the loops outside reach, per coordinate of the operand's own
            # outer levels (each reaching this level once where the operand is in order)
            prefix = math.prod(fan(j) for j in outer)
            own = 1.0 if k == 0 else max(1.0, float(st.nonempty_slices(lay.levels[0])))
            points = float(st.nnz) if k > 0 or lay.nonunique else float(st.nonempty_slices(lay.levels[0]))
            total += max(1.0, prefix / own) * points
    return total


def extra_ops(terms, leaves: list[TensorStats], dense: list[bool], layouts, out, products: float,
              out_sparse: bool = False, skip=(), runtime: bool = True) -> float:
    """The operations a nest spends walking beyond its ``products`` (module docstring): 0
    where every sparse factor is read in its order, or no order can be scheduled.  Where the
    sparsifier converts a factor to break a cycle (:func:`schedule`), the copy's operations
    (a sort of its entries) count, and its walks are those of the converted layout.
    ``skip``: factors stored in the order the loops visit them (intermediates): never
    converted, but a level of theirs under a loop over an index they do not carry is walked
    all the same (``t0[b]`` read inside a loop over ``a``).  A sparse result's kernel reads its
    operands as the runtime stores them (:func:`runtime_reads`; ``runtime=False``: as stored,
    for a product a masked nest reads, which is never a kernel's result)."""
    if all(lay is None for lay in layouts):
        return 0.0
    reorder = 0.0
    if out_sparse and runtime:
        layouts, reorder = runtime_reads(terms, leaves, dense, layouts, out, skip)
    loop, conv = schedule(terms, layouts, out, out_sparse)
    if loop is None:
        return reorder
    copy = reorder
    layouts = [converted(lay, loop) if k in skip and lay is not None else lay for k, lay in enumerate(layouts)]
    if conv is not None and conv not in skip:
        nnz = float(leaves[conv].nnz)
        copy = nnz * (_cost.INSERT_OPS + CYCLE_SORT_OPS * math.log2(max(2.0, nnz)))
    return max(0.0, walks(loop, leaves, dense, layouts) - products) + copy


def _crossed(loop, terms) -> bool:
    """Whether a loop of ``loop`` after the first is carried by no term that also carries a
    loop outside it (``runtime/operand_orders._crossed``)."""
    sets = [set(t) for t in terms]
    return any(not any(i in t and t & set(loop[:p]) for t in sets) for p, i in enumerate(loop) if p)


def runtime_loop(terms, sparse, out) -> tuple[tuple[str, ...], bool] | None:
    """The order a kernel with a summed index into a sparse result stores its operands in
    (``runtime/operand_orders._row_wise_orders``): Gustavson's (the result's indices, the
    summed ones just before the last), or the output-first order where Gustavson's crosses
    loops no operand joins, the output-first does not and each summed index belongs to one
    sparse term (``sparse``: per term), or the result is a vector with one summed index and the
    output-first order crosses nothing; and whether operands carrying a summed index then run
    with compressed outer levels (two summed indices or more).  None: no summed index."""
    out = list(out)
    summed = [i for i in dict.fromkeys(i for t in terms for i in t) if i not in out]
    if not summed or not out:
        return None
    gustavson = out[:-1] + summed + out[-1:]
    if len(out) == 1 and len(summed) == 1 and not _crossed(out + summed, terms):
        return tuple(out + summed), False       # a sparse vector with one sum: a scalar per entry
    owners = [[k for k, t in enumerate(terms) if i in t] for i in summed]
    if (all(len(o) == 1 and sparse[o[0]] for o in owners) and _crossed(gustavson, terms)
            and not _crossed(out + summed, terms)):
        if len(summed) == 1:
            return tuple(out + summed), False
        if all(out[0] in terms[o[0]] for o in owners):
            return tuple(out + summed), True
    return tuple(gustavson), False


def runtime_reads(terms, leaves: list[TensorStats], dense: list[bool], layouts, out, skip=()):
    """The layouts a kernel with a sparse result reads its sparse operands in, and what
    storing them so costs: the runtime stores every operand of a kernel with a summed index
    in :func:`runtime_loop`'s order, and each operand of one without whose levels run against
    the result's in the result's order (``runtime/operand_orders.sparse_result_formats``);
    the sparsifier then finds no cycle to break with its own (quadratic) conversion.  Rank 2:
    SciPy's transpose (:data:`REORDER_OPS` an entry, as a copy's); higher ranks: a sort
    (:data:`SORT_OPS`).  ``skip``: intermediates (stored as their reader loops)."""
    out = tuple(out)
    got = runtime_loop(terms, [lay is not None and not d for lay, d in zip(layouts, dense)], out)
    if got is None:
        loop = out + tuple(i for i in dict.fromkeys(i for t in terms for i in t) if i not in out)
        compress = False
    else:
        loop, compress = got
    new, ops = list(layouts), 0.0
    for k, lay in enumerate(layouts):
        if lay is None or k in skip:
            continue
        if got is None and [i for i in lay.levels if i in out] == [i for i in out if i in lay.levels]:
            continue                    # (no sum: read as stored unless against the result)
        want = tuple(sorted(lay.levels, key=loop.index))
        carries_sum = compress and any(i not in out for i in lay.levels)
        if want == lay.levels and not carries_sum:
            continue
        n = float(leaves[k].nnz)
        if len(want) == 2:
            kinds = (True, True) if carries_sum else ((True, True) if lay.compressed[0] else (False, True))
            new[k] = Layout(want, (kinds if not lay.nonunique else lay.compressed), lay.nonunique)
            ops += REORDER_OPS * n if want != lay.levels else n
        else:
            new[k] = Layout(want, lay.compressed, lay.nonunique)
            ops += SORT_OPS * n * math.log2(max(2.0, n)) if want != lay.levels else 0.0
    return new, ops


#: operations per entry and per halving (``log2`` of its entries) of the loader's sort of a
#: COO intermediate of rank 3 or more that a step reads in another order than it is stored
#: (:func:`resort_ops`).  Measured, one thread: 249,398 entries of rank 3, 16 ms
SORT_OPS = 2.0


def resort_ops(terms, leaves: list[TensorStats], dense: list[bool], out, intermediates=()) -> float:
    """The operations the runtime spends sorting the ``intermediates`` (positions) of rank 3 or
    more that a step with a summed index into a sparse result reads in another order than
    stored: it stores every operand in :func:`runtime_loop`'s order (an intermediate is stored
    in its own step's order, its indices as its statistics list them)."""
    got = runtime_loop(terms, [not d for d in dense], out)
    if got is None:
        return 0.0
    loop = list(got[0])
    ops = 0.0
    for k in intermediates:
        st, t = leaves[k], tuple(terms[k])
        if dense[k] or len(t) < 3 or t == tuple(sorted(t, key=loop.index)):
            continue
        n = float(st.nnz)
        ops += SORT_OPS * n * math.log2(max(2.0, n))
    return ops


def conversions(st: TensorStats, lay: Layout) -> list[tuple[str, Layout]]:
    """The formats a rank-2 factor (statistics ``st``, stored ``lay``) may be converted to so
    that a nest reads it in another order: ``"csr"`` (its indices as written) and ``"csc"``,
    those other than its own layout (the caller rates each); none for other ranks."""
    if len(st.indices) != 2:
        return []
    out = []
    for fmt in ("csr", "csc"):
        new = layout_of(fmt, st.indices)
        if new != lay:
            out.append((fmt, new))
    return out


#: operations per entry and per halving (``log2`` of its entries) of a conversion inside a
#: kernel that reorders an operand's levels (a cycle of levels the sparsifier breaks: MLIR's
#: ``sparse_tensor.convert`` through an unordered COO and a sort).  Measured, one thread,
#: ``ab,ba->`` over CSR (``T1`` converted): 4.5k entries 0.34 ms (the same without the cycle
#: 0.04), 16k 1.4, 64k 6.6, 128k 20, 256k 47 - n log n, not the square of the entries rated
#: before (that was a sparse *result* converted inside its kernel: 160k entries ~150 ms, gone:
#: ``specialization.csc_built_as_csr``)
CYCLE_SORT_OPS = 3.5
#: operations per entry a copy step spends reordering its operand's levels beyond its inserts:
#: the runtime reads the operand in the result's order (SciPy's O(nnz) transpose of CSR/CSC,
#: a column sort of COO: ``operand_orders._result_order_reads``), the kernel copies in order.
#: Measured, one thread, CSR -> CSC: 16k entries 0.30 ms, 160k 2.5, 400k 7.9; COO -> CSC 0.43 /
#: 4.1 / 16 (``cost.step_cost`` of the copy without it: 0.2 / 2.0 / 5.0 ms)
REORDER_OPS = 6.0


def conversion_cost(st: TensorStats, itemsize: int, reorders: bool = False) -> _cost.Cost:
    """A copy step into CSR/CSC: read the operand, insert its entries (a few operations
    each), write the result; ``reorders``: its levels change order (:data:`REORDER_OPS`)."""
    ops = float(st.nnz) * _cost.INSERT_OPS
    if reorders:
        ops += REORDER_OPS * float(st.nnz)
    return _cost.step_cost([(st, False)], st, False, ops, itemsize)
