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

from . import cost as _cost
from .stats import TensorStats


@dataclass(frozen=True)
class Layout:
    """A sparse operand's storage: ``levels``, its indices in storage order, and
    ``compressed``, per level, whether the level is walked (compressed) rather than located
    (dense) or followed one to one (singleton)."""

    levels: tuple[str, ...]
    compressed: tuple[bool, ...]

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
        return Layout(idx, (True,) + (False,) * (len(idx) - 1))
    return None


def loop_order(terms, layouts, out, out_sparse: bool = False) -> tuple[str, ...] | None:
    """The sparsifier's loop order of a nest over ``terms`` (each factor's indices) whose
    sparse factors are stored as ``layouts`` (None: dense), producing ``out``: a topological
    order of the level edges, a free parallel (output) loop first, else the first free one in
    the statement's order (output indices, then the rest in order of appearance); None where
    the levels' orders conflict (a cycle: the emitter converts an operand itself).
    ``out_sparse``: the result is inserted in its storage order (its indices as given), so
    its levels order the loops too."""
    dims = list(dict.fromkeys(tuple(out) + tuple(i for t in terms for i in t)))
    before: dict[str, set] = {i: set() for i in dims}
    chains = list(layouts) + ([Layout(tuple(out), (True,) * len(out))] if out_sparse and len(out) > 1 else [])
    for lay in chains:
        if lay is None:
            continue
        for a, b in zip(lay.levels, lay.levels[1:]):
            if a != b:
                before[b].add(a)
    outs = set(out)
    done: set = set()
    order: list[str] = []
    left = dims
    while left:
        # the first free index (its levels' predecessors all placed) that is an output, else the first free
        pick = None
        for i in left:
            if before[i] <= done:
                if i in outs:
                    pick = i
                    break
                if pick is None:
                    pick = i
                    if not outs:
                        break
        if pick is None:
            return None
        order.append(pick)
        done.add(pick)
        left = [i for i in left if i != pick]
    return tuple(order)


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
    fan: dict[str, float] = {}          # each loop's fanout, where a walk asks for it

    def fanout(j: str) -> float:
        got = fan.get(j)
        if got is None:
            got = fan[j] = _fanout(j, leaves, dense, layouts)
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
            prefix = math.prod(fanout(j) for j in outer)
            own = 1.0 if k == 0 else max(1.0, float(st.nonempty_slices(lay.levels[0])))
            points = float(st.nonempty_slices(lay.levels[0])) if k == 0 else float(st.nnz)
            total += max(1.0, prefix / own) * points
    return total


def extra_ops(terms, leaves: list[TensorStats], dense: list[bool], layouts, out, products: float,
              out_sparse: bool = False, skip=()) -> float:
    """The operations a nest spends walking beyond its ``products`` (module docstring): 0
    where every sparse factor is read in its order, or its orders conflict.  ``skip``: factors
    whose levels order the loops but whose walks are not counted (intermediates)."""
    if all(lay is None for lay in layouts):
        return 0.0
    loop = loop_order(terms, layouts, out, out_sparse)
    if loop is None:
        return 0.0
    return max(0.0, walks(loop, leaves, dense, layouts, skip) - products)


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


def conversion_cost(st: TensorStats, itemsize: int) -> _cost.Cost:
    """A copy step into CSR/CSC: read the operand, sort its entries (a few operations each),
    write the result."""
    return _cost.step_cost([(st, False)], st, False, float(st.nnz) * _cost.INSERT_OPS, itemsize)
