"""Contraction order: which factors to combine first, where the algebra allows it
(``plan/product.py``'s :func:`product_form` says whether the statement may be reordered at
all; its names are this module's too).

The search (:func:`best_tree`) is exhaustive over subsets (dynamic programming, every
binary tree over up to :data:`EXHAUSTIVE_UP_TO` factors) or greedy beyond (the cheapest
step first); :func:`tree_from_path` reads numpy's path format.  A tree is a factor's
position (a leaf) or a tuple of subtrees (a step combining them).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Union

from ..errors import SparseccError
from . import cost as _cost
from . import order as _order
from .product import DISTRIBUTIVE, MULTIPLY_NAMES, Product, product_form  # noqa: F401 (this module's names too)
from .stats import TensorStats, estimate, join_size

#: factors up to which the search is exhaustive
EXHAUSTIVE_UP_TO = 8
#: estimates and join sizes kept per search, by their operands' statistics (objects) and
#: indices: pure functions of them, so a subset met again - in another split, the mask
#: rule's search, the one nest's full join, the chosen tree's steps - is not estimated
#: again (tests turn it off to compare)
MEMO = True
#: a subset's splits rated in the order of a lower bound on their cost, up to where it reaches
#: the best so far (``_cheapest``); False: every split rated in turn (tests compare the two)
BOUND = True
#: where the factors are connected (each reaches the others through shared indices), only
#: their connected subsets get a node: an outer product of unrelated factors is never a step
#: (opt_einsum's dynamic programming skips them too). Every connected set splits into two
#: connected parts (a spanning tree's leaf and the rest), so every tree without outer products
#: is still searched; a chain of six factors has 15 such subsets of 57, its first planning
#: ~25% less time, the same plans on row 8's cases (tests compare with False)
CONNECTED_ONLY = True

Tree = Union[int, tuple]


# ---------------------------------------------------------------------------- search
@dataclass
class Node:
    """A subset's best tree so far: its tree, its result's statistics, stored dense?,
    and the cost of every step below and at it."""

    tree: Tree
    stats: TensorStats
    dense: bool
    cost: _cost.Cost


class Search:
    """The context of a search: the factors' statistics (leaves), the output indices, the
    itemsize, and how intermediates may be stored."""

    def __init__(self, leaves: list[TensorStats], dense: list[bool], output: tuple[str, ...], itemsize: int,
                 result_dense: bool, dense_allowed, layouts=None):
        self.leaves = leaves
        # each leaf's storage (order.Layout; None: dense or read in order)
        self.layouts = list(layouts) if layouts is not None else [None] * len(leaves)
        self.leaf_dense = dense
        self.output = tuple(output)
        self.itemsize = itemsize
        self.result_dense = result_dense
        self.dense_allowed = dense_allowed        # (TensorStats) -> bool
        self.n = len(leaves)
        self._estimates: dict = {}      # (id, id, indices) -> (stats, the operands: their ids stay theirs)
        self._joins: dict = {}          # (id, id) -> (products, the operands)
        self._dense_of: dict = {}       # (id, rule) -> (stored dense?, the statistics)
        self._live: dict = {}           # (members' bits, output) -> live indices
        self._carriers: dict = {}       # index -> the bits of the leaves carrying it
        for k, st in enumerate(leaves):
            for i in st.indices:
                self._carriers[i] = self._carriers.get(i, 0) | (1 << k)
        self._all = (1 << self.n) - 1
        self.masking = False            # rating the product a masked nest reads (its root is no kernel's)

    def estimate(self, a: TensorStats, b: TensorStats, indices: tuple[str, ...]) -> TensorStats:
        """``stats.estimate(a, b, indices)``, once per operands and indices (:data:`MEMO`)."""
        if not MEMO:
            return estimate(a, b, indices)
        key = (id(a), id(b), indices)
        got = self._estimates.get(key)
        if got is None:
            got = self._estimates[key] = (estimate(a, b, indices), a, b)
        return got[0]

    def join_size(self, a: TensorStats, b: TensorStats) -> float:
        """``stats.join_size(a, b)``, once per operands (:data:`MEMO`)."""
        if not MEMO:
            return join_size(a, b)
        key = (id(a), id(b))
        got = self._joins.get(key)
        if got is None:
            got = self._joins[key] = (join_size(a, b), a, b)
        return got[0]

    def live(self, members: frozenset, outside: frozenset | None = None) -> tuple[str, ...]:
        """The indices a subset's result keeps: those of its factors that the output or a
        factor outside it carries, in order of first appearance."""
        if outside is not None and outside != frozenset(range(self.n)) - members:
            return self._live_of(members, outside)
        bits = 0
        for k in members:
            bits |= 1 << k
        return self.live_bits(bits)

    def live_bits(self, bits: int) -> tuple[str, ...]:
        """:meth:`live` of the leaves in ``bits`` (leaf ``k``: bit ``k``), every other leaf
        outside; once per subset and output."""
        key = (bits, self.output)
        got = self._live.get(key)
        if got is None:
            out, carriers, rest = self.output, self._carriers, self._all & ~bits
            seen = {}
            k = 0
            while bits >> k:
                if bits >> k & 1:
                    for i in self.leaves[k].indices:
                        if i in out or carriers[i] & rest:
                            seen[i] = None
                k += 1
            got = self._live[key] = tuple(seen)
        return got

    def _live_of(self, members: frozenset, outside: frozenset) -> tuple[str, ...]:
        need = set(self.output)
        for k in outside:
            need.update(self.leaves[k].indices)
        seen = {}
        for k in sorted(members):
            for i in self.leaves[k].indices:
                if i in need:
                    seen[i] = None
        return tuple(seen)

    def storable(self, st: TensorStats, indices) -> bool:
        """Whether an intermediate of statistics ``st`` on ``indices`` has a format (what
        :meth:`combine` asks of a step that is not the root)."""
        return bool(indices) or self._dense(st)

    def _dense(self, st: TensorStats) -> bool:
        """Whether an intermediate of statistics ``st`` is stored dense: once per statistics
        and rule (the mask rule's search allows dense storage for fewer)."""
        key = (id(st), self.dense_allowed)
        got = self._dense_of.get(key)
        if got is None:
            got = self._dense_of[key] = (self.dense_allowed(st) and _cost.dense_is_cheaper(st, self.itemsize), st)
        return got[0]

    def leaf(self, k: int) -> Node:
        return Node(k, self.leaves[k], self.leaf_dense[k], _cost.ZERO)

    def combine(self, a: Node, b: Node, indices: tuple[str, ...], root: bool, st: TensorStats | None = None,
                bound: float | None = None) -> Node | None:
        """``st``: the subset's result statistics where already estimated (its size does not
        depend on the split; estimating it again per split was most of a planning's time).
        ``bound``: None where the step, before its walks are counted, costs at least that
        (with its parts: ``Node.cost.seconds``) - it cannot be cheaper than a node of that cost."""
        if st is None:
            st = self.estimate(a.stats, b.stats, tuple(indices))
        if root:
            dense = self.result_dense
        else:
            dense = self._dense(st)
            if not dense and not indices:
                return None         # a scalar stored sparse: no such format
        kids = [(a.stats, a.dense), (b.stats, b.dense)]
        products = join_size(_cost.stored(a.stats, a.dense), _cost.stored(b.stats, b.dense))
        step = _cost.step_cost(kids, st, dense, products / _cost.dense_rate(kids, indices, dense), self.itemsize)
        if bound is not None and (a.cost + b.cost + step).seconds >= bound:
            return None             # (the walks only add to it)
        step = step + self.reads([a.tree, b.tree], [a.stats, b.stats], [a.dense, b.dense], indices, products,
                                 not dense, not (root and self.masking))[0]
        return Node((a.tree, b.tree), st, dense, a.cost + b.cost + step)

    def reads(self, trees, stats, dense, indices, products, out_sparse: bool = False,
              runtime: bool = True) -> tuple[_cost.Cost, dict]:
        """What a step over ``trees`` (leaves: ints) spends reading its sparse leaves against
        their stored order (``order.extra_ops``), and which leaves it converts first instead
        (position -> format, where the copy costs less than the walk: ``order.conversion``).
        Intermediates are stored in the order their reader loops (``plan._build``)."""
        # a sparse intermediate is stored in the order its reader loops: its levels in order
        layouts = [self.layouts[t] if isinstance(t, int) else
                   (None if d else _order.layout_of("csr" if len(s.indices) == 2 else "coo", s.indices))
                   for t, s, d in zip(trees, stats, dense)]
        if all(lay is None for lay in layouts):
            return _cost.ZERO, {}
        terms = [s.indices for s in stats]
        skip = tuple(k for k, t in enumerate(trees) if not isinstance(t, int))
        # (a rank-3+ intermediate the runtime re-sorts into the step's order: every option pays it)
        resort = _order.resort_ops(terms, stats, dense, indices, skip) if out_sparse and skip and runtime else 0.0
        extra = _order.extra_ops(terms, stats, dense, layouts, indices, products, out_sparse, skip, runtime)
        best = (_cost.Cost(0.0, extra + resort), {})
        if extra <= 0:
            return best
        for k, lay in enumerate(layouts):
            if lay is None:
                continue
            if not isinstance(trees[k], int):
                continue
            for fmt, new in _order.conversions(stats[k], lay):
                trial = list(layouts)
                trial[k] = new
                if _order.loop_order(terms, trial, indices, out_sparse) is None:
                    continue            # levels in a cycle: the emitter would convert again
                c = _order.conversion_cost(stats[k], self.itemsize, new.levels != lay.levels) + _cost.Cost(
                    0.0, _order.extra_ops(terms, stats, dense, trial, indices, products, out_sparse, skip, runtime)
                    + resort)
                if c.seconds < best[0].seconds:
                    best = (c, {k: fmt})
        return best


def best_tree(search: Search, members: list[int] | None = None, output: tuple[str, ...] | None = None,
              greedy: bool | None = None, stats_only: bool = False):
    """The cheapest binary tree over ``members`` (default: every factor) producing
    ``output`` (default: the statement's): exhaustive up to :data:`EXHAUSTIVE_UP_TO`
    factors (or ``greedy=False``), greedy beyond (or ``greedy=True``).  ``stats_only`` (the
    exhaustive search only): the statistics of that tree's result, found without rating
    any split (None where the search is greedy)."""
    members = list(range(search.n)) if members is None else list(members)
    everything = frozenset(range(search.n))
    outside = everything - frozenset(members)
    saved = search.output
    if output is not None:
        search.output = tuple(output)
    try:
        if greedy is None:
            greedy = len(members) > EXHAUSTIVE_UP_TO
        if greedy:
            return None if stats_only else _greedy(search, members, outside)
        return _exhaustive(search, members, outside, stats_only)
    finally:
        search.output = saved


def _exhaustive(search: Search, members: list[int], outside: frozenset, stats_only: bool = False):
    """The cheapest tree over ``members`` (dynamic programming over subsets); ``stats_only``:
    only the statistics of its result, as that search gives them (each subset estimated from
    its first split whose parts have a tree, the first whose result can be stored), without
    rating a split: what the mask rule reads first.

    Under :data:`BOUND` a subset's splits are rated only when a split of a bigger subset
    that holds it needs its cost (``_cheapest``): until then its node is *pending* - its
    statistics, format and a lower bound on its cost (its own step's result bytes, inserts
    and call, what ``_cheapest`` bounds each of its splits by), no tree.  Which subsets have
    a node does not depend on rating (a subset whose first storable split exists is rated
    to a tree: ``Search.combine`` refuses no split of it without a bound), so the choice is
    the one rating every subset in turn gives; most subsets (a chain's disconnected ones,
    whose outer products bound far above the best) are never rated."""
    best: dict[int, Node] = {}
    glob = [0] * (1 << len(members))        # a mask over ``members`` -> its leaves' bits (leaf k: bit k)
    for j, m in enumerate(members):
        best[1 << j] = search.leaf(m)
        glob[1 << j] = 1 << m
    full = (1 << len(members)) - 1
    connected = _connected_masks(search, members) if CONNECTED_ONLY else None
    lazy = BOUND and not stats_only
    rating = _Rating(search, best) if lazy else None
    stored_bytes: dict = {}         # id(node) -> its result's bytes as stored (the nodes stay in ``best``)
    for mask in range(1, full + 1):
        low = mask & -mask
        if mask == low:
            continue
        glob[mask] = glob[mask ^ low] | glob[low]
        root = mask == full
        if connected is not None and not root and not connected(mask):
            continue
        # (every leaf outside the subset - other members and those outside ``members`` - is outside)
        indices = search.output if root else search.live_bits(glob[mask])
        # the subset's statistics: its first split's estimate whose result can be stored
        # (its size does not depend on the split); splits before that one store nothing
        st = None
        for first, (a, b) in enumerate(_splits(best, mask)):
            st = search.estimate(a.stats, b.stats, tuple(indices))
            if root or search.storable(st, indices):
                break
        else:
            continue
        if stats_only:
            best[mask] = Node(None, st, False, _cost.ZERO)
            continue
        if lazy:
            share = _step_share(search, st, root)
            node = best[mask] = Node(None, st, share[0], _cost.Cost(share[1], share[2]))
            rating.pending[id(node)] = (mask, first, indices, root, share)
            continue
        found = _cheapest(search, list(_splits(best, mask))[first:], indices, root, st, stored_bytes)
        if found is not None:
            best[mask] = found
    if stats_only:
        return best[full].stats
    if lazy:
        rating.force(best[full])
    return best[full]


def _connected_masks(search: Search, members: list[int]):
    """``mask -> bool``: whether the members in ``mask`` are connected (each reaches the
    others through shared indices); None where the members themselves are not."""
    near = []
    for j, m in enumerate(members):
        mine = set(search.leaves[m].indices)
        bits = 0
        for jj, mm in enumerate(members):
            if jj != j and mine & set(search.leaves[mm].indices):
                bits |= 1 << jj
        near.append(bits)

    def connected(mask: int) -> bool:
        seen = frontier = mask & -mask
        while frontier:
            grow = 0
            f = frontier
            while f:
                low = f & -f
                grow |= near[low.bit_length() - 1]
                f ^= low
            frontier = grow & mask & ~seen
            seen |= frontier
        return seen == mask

    return connected if connected((1 << len(members)) - 1) else None


def _splits(best: dict, mask: int):
    """A subset's splits ``(part, rest)`` whose parts have a node, each split once (the part
    holding the subset's lowest member first), in the search's order."""
    low = mask & -mask
    sub = (mask - 1) & mask
    while sub:
        if sub & low:
            a, b = best.get(sub), best.get(mask ^ sub)
            if a is not None and b is not None:
                yield a, b
        sub = (sub - 1) & mask


class _Rating:
    """A search's pending nodes (``_exhaustive``) and what rates them: ``best`` (mask ->
    node), ``pending`` (id(node) -> its mask, the index of its first storable split, its
    indices, root?, its step's share) and the nodes' stored bytes by id.  (An object, not a
    closure calling itself: that is a reference cycle, which kept every node of a search
    alive until the garbage collector ran.)"""

    __slots__ = ("search", "best", "pending", "stored_bytes")

    def __init__(self, search: Search, best: dict):
        self.search, self.best, self.pending, self.stored_bytes = search, best, {}, {}

    def force(self, node: Node) -> None:
        """Rate a pending node's splits: its tree and cost, in place (the same object)."""
        todo = self.pending.pop(id(node), None)
        if todo is None:
            return
        mask, first, indices, root, share = todo
        splits = list(_splits(self.best, mask))[first:]
        found = _cheapest(self.search, splits, indices, root, node.stats, self.stored_bytes, self, share)
        node.tree, node.cost = found.tree, found.cost


def _step_share(search: Search, st: TensorStats, root: bool) -> tuple[bool, float, float]:
    """A subset's step's share of every split's cost, from its result's statistics ``st``:
    ``(stored dense?, the result's bytes, inserts and the call as operations)`` -
    ``cost.step_cost`` with no inputs and no products, the same sums in the same order (so a
    rated cost is never below it: ``Search.combine`` adds non-negative terms to them)."""
    dense = search.result_dense if root else search._dense(st)
    out_bytes = _cost.tensor_bytes(st, dense, search.itemsize) * (1 if dense else 2)
    ops = ((0.0 + (0.0 if dense else st.nnz * _cost.INSERT_OPS))
           + (_cost.STEP_OVERHEAD_S + (0.0 if dense else _cost.SPARSE_RESULT_OVERHEAD_S)) * _cost.OPS_PER_S)
    return dense, out_bytes, ops


def _cheapest(search: Search, splits: list, indices: tuple[str, ...], root: bool, st: TensorStats,
              stored_bytes: dict, rating: "_Rating | None" = None, share=None):
    """The cheapest of a subset's ``splits`` (its result's statistics ``st``), the first in
    their order among equals: each rated (:meth:`Search.combine`) in the order of a lower
    bound on its cost - its parts' costs and its step's bytes, inserts and call
    (:func:`cost.step_cost` with no products, no walks) - until that bound reaches the best
    so far.  The bound never exceeds the rated cost (the same sums, in the same order, of
    terms no larger), so the choice is the one rating every split gives.  A pending part
    (``_exhaustive``) counts with its lower bound until the split is next: then ``rating``
    rates it and the split waits again under its bound with the part's cost."""
    if not BOUND:
        found = None
        for a, b in splits:
            node = search.combine(a, b, indices, root, st)
            if node is not None and (found is None or node.cost.seconds < found.cost.seconds):
                found = node
        return found
    # cost.step_cost(kids, st, dense, 0.0, item) and Cost.seconds, spelt out (the same sums in
    # the same order: equal floats, but for a rank-3 result's COO_SUM_INSERT_OPS, left out: a
    # lower bound still), the result's share once for all splits
    _, out_bytes, ops = share if share is not None else _step_share(search, st, root)
    item = search.itemsize
    bw, rate = _cost.BANDWIDTH, _cost.OPS_PER_S

    def tb(node) -> float:
        got = stored_bytes.get(id(node))
        if got is None:
            got = stored_bytes[id(node)] = _cost.tensor_bytes(node.stats, node.dense, item)
        return got

    def bound_of(a, b) -> float:
        moved = (0 + tb(a) + tb(b)) + out_bytes
        ca, cb = a.cost, b.cost
        return ((ca.bytes + cb.bytes) + moved) / bw + ((ca.ops + cb.ops) + ops) / rate

    bounded = [(bound_of(a, b), n) for n, (a, b) in enumerate(splits)]
    heapq.heapify(bounded)
    found, at = None, -1
    while bounded:
        bound, n = heapq.heappop(bounded)
        if found is not None and (bound > found.cost.seconds or (bound == found.cost.seconds and n > at)):
            if bound > found.cost.seconds:
                break
            continue
        a, b = splits[n]
        if a.tree is None or b.tree is None:
            rating.force(a)
            rating.force(b)
            heapq.heappush(bounded, (bound_of(a, b), n))
            continue
        # (a split after the best so far in their order must cost less; one before it, no more)
        node = search.combine(a, b, indices, root, st, None if found is None else
                              (found.cost.seconds if n > at else math.nextafter(found.cost.seconds, math.inf)))
        if node is None:
            continue
        c = node.cost.seconds
        if found is None or c < found.cost.seconds or (c == found.cost.seconds and n < at):
            found, at = node, n
    return found


def _greedy(search: Search, members: list[int], outside: frozenset) -> Node:
    nodes = [(frozenset([m]), search.leaf(m)) for m in members]
    while len(nodes) > 1:
        pick = None
        rest_all = frozenset(m for g, _ in nodes for m in g)
        for x in range(len(nodes)):
            for y in range(x + 1, len(nodes)):
                gx, nx = nodes[x]
                gy, ny = nodes[y]
                group = gx | gy
                root = len(nodes) == 2
                indices = search.output if root else search.live(group, outside | (rest_all - group))
                connected = bool(set(nx.stats.indices) & set(ny.stats.indices))
                node = search.combine(nx, ny, indices, root)
                if node is None:
                    continue
                step = (node.cost + _cost.Cost(-nx.cost.bytes - ny.cost.bytes, -nx.cost.ops - ny.cost.ops)).seconds
                key = (not connected, step, x, y)
                if pick is None or key < pick[0]:
                    pick = (key, x, y, group, node)
        if pick is None:
            raise SparseccError("no order of steps stores every intermediate")
        _, x, y, group, node = pick
        nodes = [n for j, n in enumerate(nodes) if j not in (x, y)] + [(group, node)]
    return nodes[0][1]


def tree_from_path(path, n: int) -> Tree:
    """The tree of numpy's path format (``[(1, 2), (0, 1)]``, optionally led by
    ``"einsum_path"``): each tuple names positions in the current list of operands, which
    are combined and the result appended.  A SparseccError unless it ends with one."""
    items = list(path)
    if items and isinstance(items[0], str):
        if items[0] != "einsum_path":
            raise SparseccError(f"optimize= path {path!r}: a path starts with 'einsum_path' or a tuple")
        items = items[1:]
    current: list[Tree] = list(range(n))
    for step in items:
        if isinstance(step, (str, bytes)) or not hasattr(step, "__iter__"):
            raise SparseccError(f"optimize= path {path!r}: each step is a tuple of operand positions, got {step!r}")
        pos = list(step)
        if not pos or not all(isinstance(p, int) and not isinstance(p, bool) for p in pos):
            raise SparseccError(f"optimize= path {path!r}: step {tuple(pos)!r} must name at least one "
                                f"operand position (integers)")
        if len(set(pos)) != len(pos) or any(p < 0 or p >= len(current) for p in pos):
            raise SparseccError(f"optimize= path {path!r}: step {tuple(pos)!r} names positions outside "
                                f"0..{len(current) - 1} or one twice ({len(current)} operand(s) at that point)")
        picked = tuple(current[p] for p in pos)
        current = [t for j, t in enumerate(current) if j not in pos] + [picked if len(picked) > 1 else picked[0]]
    if len(current) != 1:
        raise SparseccError(f"optimize= path {path!r} leaves {len(current)} operands; it must combine all "
                            f"{n} into one")
    tree = current[0]
    return tree if isinstance(tree, tuple) else (tree,)


def path_of(tree: Tree, n: int) -> tuple[tuple[int, ...], ...]:
    """``tree`` in numpy's path format over ``n`` leaves (the inverse of :func:`tree_from_path`)."""
    current: list = list(range(n))
    out = []

    def visit(t):
        if isinstance(t, int):
            return t
        kids = [visit(c) for c in t]
        pos = tuple(sorted(current.index(k) for k in kids))
        for p in sorted(pos, reverse=True):
            del current[p]
        current.append(t)
        out.append(pos)
        return t
    visit(tree)
    visit = None            # (the recursive closure's cell let go: no cycle for the collector)
    return tuple(out)


def leaves_of(tree: Tree) -> list[int]:
    if isinstance(tree, int):
        return [tree]
    return [k for c in tree for k in leaves_of(c)]


def is_single(tree: Tree, n: int) -> bool:
    return isinstance(tree, tuple) and len(tree) == n and all(isinstance(c, int) for c in tree)


def full_join(search: Search) -> TensorStats:
    """The statistics of every factor joined, nothing reduced (what one nest visits)."""
    st = search.leaves[0]
    for other in search.leaves[1:]:
        st = search.estimate(st, other, tuple(dict.fromkeys(st.indices + other.indices)))
    return st


def single_cost(search: Search, handwritten: bool = False) -> _cost.Cost:
    """The cost of the one loop nest: it visits at least every point of the full join
    (``handwritten``: through a hand-written kernel, :data:`cost.HANDWRITTEN_SPEEDUP` times
    faster a point).  Into a sparse result, a point costs :data:`cost.SPARSE_NEST_POINT_OPS`
    where a reduction loop runs outside an output loop (its product scattered into the
    result's row workspace), one operation where every output loop is outside every
    reduction (a scalar sum, one insertion per result entry: ``order.reduces_inside``)."""
    joined = full_join(search)
    out = search.output
    sizes = dict(zip(joined.indices, joined.sizes))
    # (a sparse factor carrying every output index bounds the result's pattern)
    bound = min([joined.nnz, math.prod(sizes[i] for i in out)] + [
        s.nnz for s, d in zip(search.leaves, search.leaf_dense) if not d and not s.full and set(out) <= set(s.indices)])
    result = TensorStats(out, tuple(sizes[i] for i in out), bound)
    terms = [s.indices for s in search.leaves]
    point = 1.0
    if not search.result_dense:
        point = _cost.SPARSE_NEST_POINT_OPS
        lays = _order.runtime_reads(terms, search.leaves, search.leaf_dense, search.layouts, out)[0]
        if not handwritten and _order.reduces_inside(_order.schedule(terms, lays, out, True)[0], out):
            point = 1.0
            if search.n > 1:        # the entries the result stores: the product reduced onto out
                rest = search.leaves[0]
                for other in search.leaves[1:-1]:
                    rest = search.estimate(rest, other, tuple(dict.fromkeys(rest.indices + other.indices)))
                got = search.estimate(rest, search.leaves[-1], tuple(out))
                result = TensorStats(out, result.sizes, min(result.nnz, got.nnz))
    points = joined.nnz * point
    if handwritten:
        points /= _cost.HANDWRITTEN_SPEEDUP
    else:
        # a sparse leaf read against its stored order is walked for every outer coordinate
        points += _order.extra_ops(terms, search.leaves, search.leaf_dense,
                                   search.layouts, out, joined.nnz, not search.result_dense)
    return _cost.step_cost([(s, d) for s, d in zip(search.leaves, search.leaf_dense)], result,
                           search.result_dense, points, search.itemsize)
