"""A plan: the steps that compute a statement, each a statement of its own.

:func:`make_plan` reads the statement (:func:`path.product_form`), the operands'
statistics and the result's format, and returns a :class:`Plan`: a tuple of
:class:`Step`, each a ``Statement`` over the operands (positional, ``#0``, ``#1``, ...) named
in ``inputs`` - the statement's own operands or earlier steps' results - with the format its
result is stored in and its estimated entries.  The plan of a statement that is no product
of three or more factors is its one loop nest (one step: the statement itself).

How a plan is chosen (docs/planning.md):

1. **Mask rule.** A sparse factor carrying every output index bounds the result's pattern:
   the product of the other factors is needed only at its entries.  Where it stores fewer
   entries than that product would, the mask stays in the nest that computes the product's
   last step (GraphBLAS's masked ``mxm``; SDDMM; triangle counting ``ij,jk,ik->``, which
   never builds ``L @ L``): with two other factors the whole statement is one nest.
2. **Order.** Otherwise the cheapest tree of two-factor steps (``path.best_tree``; cost:
   ``cost.step_cost`` of each step from the estimated entries of its operands and result).
3. **One nest rule.** Where the one nest visits fewer points (its full join) than the
   tree's steps cost, the plan is the one nest (element-wise products, small factors).

Each intermediate's index order follows the loop order of the step that reads it (its
indices shared with the reading step's outer operand first), and its format is ``dense``
where the algebra allows it (a NumPy sum whose result is dense, or a product of dense
operands) and its step and the step reading it cost less so (``format_of``: the reading
step's products count a dense intermediate's zeros), else ``csr``/``dcsr`` (rank 2; DCSR where few rows are
non-empty) or ``coo`` (rank 1 and 3+): a sparse result, or a semiring's product over stored
entries, keeps every intermediate's pattern, so the result stores exactly the entries the
one nest stores.  Plans are deterministic: the same statistics give the same plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SparseccError
from ..expr import Access, Reduce, Statement, accesses
from . import cost as _cost
from . import mask as _masks
from . import nested as _nested
from . import order as _order
from . import path as _path
from .optimize import check_optimize
from .statements import LETTERS, _name, _text, step_statement
from .stats import TensorStats, estimate

#: a masked one nest (a mask and two other factors) is kept unless steps are estimated at under
#: 1/this of it (the estimates are rough; a mask keeps its product's pattern small)
MASK_MARGIN = 4.0
#: below this share of non-empty rows a sparse matrix intermediate is DCSR
DCSR_BELOW = 1 / 16


@dataclass(frozen=True)
class Step:
    """One step: ``statement`` (operands ``#0``, ``#1``, ... = ``inputs``), its result named
    ``output`` with ``indices`` (the statement's index names), stored as ``format``;
    ``entries``: its estimated stored entries (None: not estimated); ``seconds``: its
    estimated cost; ``text``: the step in index notation with the real names."""

    statement: Statement
    inputs: tuple[str, ...]
    output: str
    indices: tuple[str, ...]
    format: str
    entries: float | None
    seconds: float | None
    text: str
    shape: tuple[int, ...] | None = None

    @property
    def subscripts(self) -> str:
        """The step as einsum subscripts (``"ij,j->i"``)."""
        s = self.statement
        return ",".join("".join(a.indices) for a in accesses(s.expr)) + "->" + "".join(s.indices)


@dataclass(frozen=True)
class Plan:
    """The steps of a statement (see the module docstring).  ``path``: the tree in numpy's
    path format (``optimize=`` takes it back); ``reason``: why this plan; ``seconds`` and
    ``single_seconds``: the estimated costs of the plan and of the one loop nest (None:
    not estimated); ``actual``: the entries each step's result stored in a call that ran
    the plan (``Kernel.last_plan``; None: not run - a dense result stores every element)."""

    statement: Statement
    steps: tuple[Step, ...]
    path: tuple[tuple[int, ...], ...]
    reason: str
    seconds: float | None = None
    single_seconds: float | None = None
    actual: tuple[int, ...] | None = None

    @property
    def single(self) -> bool:
        """Whether the plan is the statement's one loop nest."""
        return len(self.steps) == 1 and self.steps[0].statement == self.statement

    def __len__(self):
        return len(self.steps)

    def __str__(self) -> str:
        def ms(s):
            return "?" if s is None else f"{s * 1e3:.3g} ms"
        head = f"plan for {self.statement}: {len(self.steps)} step{'s' if len(self.steps) != 1 else ''}"
        if self.seconds is not None:
            head += f", est. {ms(self.seconds)}"
            if self.single_seconds is not None and not self.single:
                head += f" (one nest: est. {ms(self.single_seconds)})"
        lines = [head, f"  why: {self.reason}"]
        width = max(len(s.text) for s in self.steps)
        for n, s in enumerate(self.steps, 1):
            vol = math.prod(s.shape) if s.shape else 0
            if s.entries is None:
                size = "entries not estimated"
            else:
                size = f"~{s.entries:,.0f} entries"
                if vol:
                    pct = 100 * s.entries / vol
                    size += (f" ({pct:.0f}%)" if pct >= 10 else f" ({pct:.2g}%)") if s.indices else ""
            if self.actual is not None:
                size += f", actual {self.actual[n - 1]:,}"
            lines.append(f"  {n}. {s.text.ljust(width)}  {s.subscripts:<14} {s.format:<6} {size}"
                         + (f"  est. {ms(s.seconds)}" if s.seconds is not None else ""))
        return "\n".join(lines)


# ------------------------------------------------------------------------ making one
def single_plan(stmt: Statement, result_format: str, reason: str, entries=None, seconds=None,
                single_seconds=None, n: int | None = None) -> Plan:
    step = Step(stmt, tuple(stmt.operands), stmt.output, tuple(stmt.indices), result_format, entries, seconds,
                str(stmt))
    path = (tuple(range(n)),) if n else ()
    return Plan(stmt, (step,), path, reason, seconds, single_seconds)


def make_plan(stmt: Statement, stats: dict[str, TensorStats], dense: dict[str, bool], result_format: str,
              itemsize: int = 8, optimize=True, one_nest_handwritten: bool = False,
              formats: dict[str, str] | None = None, split_reductions: bool = False) -> Plan:
    """The plan of ``stmt`` for operands of statistics ``stats`` (by operand name, indices
    in any names), stored dense or not (``dense``), its result stored as
    ``result_format`` (``"dense"`` or a sparse format's name), values of ``itemsize``
    bytes; ``optimize``: True (the best plan), ``"optimal"`` (exhaustive search),
    ``"greedy"``, or a path in numpy's format.  ``one_nest_handwritten``: the one loop nest
    runs through a hand-written kernel (the caller knows: plan/ asks no runtime), so its cost
    per point is :data:`cost.HANDWRITTEN_SPEEDUP` times lower.  ``formats``: each sparse
    operand's storage format by name (``"csr"``, ``"csc"``, ``"coo"``, ...; absent: read in
    order), so that a step reading one against its stored order costs what it walks, or
    converts it first (``order.py``).  ``split_reductions``: the one nest, compiled, would
    store entries without a term in its sparse result (the runtime's fact, from MLIR's sorted
    loops: ``plan/nested.py``), so its reductions run one index a step."""
    plan = _make_plan(stmt, stats, dense, result_format, itemsize, optimize, one_nest_handwritten, formats)
    if split_reductions and len(plan.steps) == 1:
        # a one nest (or a product's flat form) reducing over several indices into a sparse
        # result that would store entries without a term: one index a step (nested.py)
        split = _nested.split_one_nest(stmt, plan.steps[0], plan.single, dense, result_format, formats, True)
        if split is not None:
            return _split(stmt, *split)
    return plan


def _make_plan(stmt: Statement, stats, dense, result_format: str, itemsize: int, optimize, one_nest_handwritten: bool,
               formats) -> Plan:
    optimize = check_optimize(optimize)
    why: list[str] = []
    prod = _path.product_form(stmt, why)
    path = optimize if isinstance(optimize, tuple) else None
    if prod is None or optimize is False:
        # a reduction below the root, lowered as written, fills a dense temporary of its
        # result's shape: with a sparse result, such reductions are steps of their own (and
        # a reduction over several indices into a sparse result, one index a step)
        split = _nested.split_plan(stmt, dense, result_format, formats)
        if split is not None:
            return _split(stmt, *split)
        if optimize is False:
            return single_plan(stmt, result_format, "one loop nest: optimize=False")
    if prod is None:
        if path is not None and not (len(path) == 1 and sorted(path[0]) == list(range(len(path[0])))
                                     and len(path[0]) == _n_accesses(stmt)):
            if len(path) > 1:
                raise SparseccError(f"optimize= path {list(path)!r}: '{stmt}' cannot be computed in steps "
                                    f"({why[0] if why else 'not a product'}); only its one loop nest "
                                    f"(optimize=False) runs it")
        return single_plan(stmt, result_format, f"one loop nest: {why[0] if why else 'not a product'}")
    leaves = [stats[f.tensor].renamed(f.indices) for f in prod.factors]
    leaf_dense = [dense[f.tensor] for f in prod.factors]
    result_dense = result_format == "dense"

    def dense_allowed(st: TensorStats) -> bool:
        return st.full or (prod.monoid == "sum" and result_dense)

    formats = formats or {}
    layouts = [None if dense[f.tensor] else _order.layout_of(formats.get(f.tensor, ""), f.indices)
               for f in prod.factors]
    search = _path.Search(leaves, leaf_dense, prod.indices, itemsize, result_dense, dense_allowed, layouts)
    n = len(leaves)
    single = _path.single_cost(search, one_nest_handwritten)
    if path is not None:
        tree = _path.tree_from_path(path, n)
        if _path.is_single(tree, n):
            return single_plan(stmt, result_format, "one loop nest: the path given", None, single.seconds,
                               single.seconds, n)
        return _build(stmt, prod, search, tree, result_format, itemsize, "the path given", single)
    greedy = None if optimize in (True,) else optimize == "greedy"
    # 1. the mask rule
    mask = _masks.candidate(search, prod, greedy)
    if mask is not None:
        z, rest, node = mask
        reason = (f"masked by {_name(prod.factors[z].tensor)}: it stores {leaves[z].nnz:,.0f} entries, "
                  f"the product it masks ~{node.stats.nnz:,.0f}")
        # the mask's plan against the rules below, only where the one nest's loop order is
        # known (levels in no cycle: its estimate counts its walks; a cyclic nest visits more
        # points than its full join): its one nest may walk an operand against its order, and
        # with three or more other factors its product's inner steps run unmasked (a dense
        # intermediate of the mask's shape can cost far more than the one nest)
        known = any(lay is not None for lay in layouts) and _order.schedule(
            [f.indices for f in prod.factors], layouts, prod.indices, not result_dense)[0] is not None
        if len(rest) == 2:
            if known:
                best = _path.best_tree(search, greedy=greedy)
                if MASK_MARGIN * best.cost.seconds < single.seconds:
                    return _build(stmt, prod, search, best.tree, result_format, itemsize,
                                  f"cheapest order (the masked one nest est. {single.seconds * 1e3:.3g} ms)", single)
            return _one_nest(stmt, prod, search, result_format, itemsize, "one loop nest: " + reason, single, n)
        tree = (z,) + tuple(node.tree)
        masked = _build(stmt, prod, search, tree, result_format, itemsize, reason, single)
        # (estimated dearer than the one nest, its steps are: ab,ab,b,b->a)
        if not known or masked.seconds <= single.seconds:
            return masked
        best = _path.best_tree(search, greedy=greedy)
        if best.cost.seconds < masked.seconds and best.cost.seconds < single.seconds:
            how = "greedy" if (greedy or (greedy is None and n > _path.EXHAUSTIVE_UP_TO)) else "exhaustive"
            return _build(stmt, prod, search, best.tree, result_format, itemsize,
                          f"cheapest order ({how} search over {n} factors; the mask's steps est. "
                          f"{masked.seconds * 1e3:.3g} ms)", single)
        return _one_nest(stmt, prod, search, result_format, itemsize,
                         f"one loop nest: est. {single.seconds * 1e3:.3g} ms, the mask's steps est. "
                         f"{masked.seconds * 1e3:.3g} ms", single, n)
    # 2. the order
    best = _path.best_tree(search, greedy=greedy)
    # 3. the one-nest rule
    if single.seconds <= best.cost.seconds:
        return _one_nest(stmt, prod, search, result_format, itemsize,
                           f"one loop nest: it visits ~{_path.full_join(search).nnz:,.0f} points"
                           f"{' (a hand-written kernel)' if one_nest_handwritten else ''}, est. "
                           f"{single.seconds * 1e3:.3g} ms, the cheapest steps est. {best.cost.seconds * 1e3:.3g} ms",
                         single, n)
    how = "greedy" if (greedy or (greedy is None and n > _path.EXHAUSTIVE_UP_TO)) else "exhaustive"
    built = _build(stmt, prod, search, best.tree, result_format, itemsize,
                   f"cheapest order ({how} search over {n} factors)", single)
    # the steps as built (their formats, copies and orders chosen) against the one nest again:
    # the search rates each intermediate stored in the order its reader loops
    if built.seconds > single.seconds:
        return _one_nest(stmt, prod, search, result_format, itemsize,
                         f"one loop nest: est. {single.seconds * 1e3:.3g} ms, the cheapest steps as built est. "
                         f"{built.seconds * 1e3:.3g} ms", single, n)
    return built


def _one_nest(stmt: Statement, prod: _path.Product, search: _path.Search, result_format: str, itemsize: int,
              reason: str, single: _cost.Cost, n: int) -> Plan:
    """The one loop nest: the statement itself, or - where a reduction sits inside the
    product (``C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])``) - its flat form, one sum over the
    product of every factor (one step).  The statement as written lowers its inner sum into a
    dense temporary of the result's shape (measured, 5000^2 CSR, M 4/row, A and B 10/row, 1
    thread: 154 ms; the flat nest 1.9 ms, SciPy ``(A @ B).multiply(M)`` 4.9 ms); the flat form
    is the same value wherever the plan may reorder (the multiply distributes over the monoid)
    and stores the same entries (the Boolean pattern product)."""
    if not _nested_reduce(stmt.expr, True):
        return single_plan(stmt, result_format, reason, None, single.seconds, single.seconds, n)
    return _build(stmt, prod, search, tuple(range(n)), result_format, itemsize, reason + " (its flat form)",
                  single)


def _split(stmt: Statement, steps, reason: str) -> Plan:
    """The plan of :func:`nested.split_plan`'s steps (entries and costs not estimated)."""
    made = tuple(Step(st, inputs, out, idx, fmt, None, None, text) for st, inputs, out, idx, fmt, text in steps)
    return Plan(stmt, made, (), reason)


def _nested_reduce(e, top: bool) -> bool:
    """Whether ``e`` holds a reduction other than one at its top."""
    if isinstance(e, Reduce):
        return not top or _nested_reduce(e.body, False)
    return any(_nested_reduce(getattr(e, f), False) for f in ("arg", "left", "right", "body", "cond")
               if hasattr(e, f))


def _n_accesses(stmt: Statement) -> int:
    return len([a for a in accesses(stmt.expr) if a.indices])


def _stats_of(search: _path.Search, tree, members_cache: dict, root: bool) -> TensorStats:
    """Bottom-up statistics of ``tree``'s nodes (a k-ary node: its children joined in order)."""
    if isinstance(tree, int):
        return search.leaves[tree]
    kids = [_stats_of(search, c, members_cache, False) for c in tree]
    members = frozenset(_path.leaves_of(tree))
    indices = search.output if root else search.live(members)
    st = kids[0]
    for j, other in enumerate(kids[1:], 1):
        last = j == len(kids) - 1
        if last:
            want = indices
        else:
            rest = frozenset(m for c in tree[j + 1:] for m in _path.leaves_of(c)) | (
                frozenset(range(search.n)) - members)
            need = set(indices)
            for m in rest:
                need.update(search.leaves[m].indices)
            want = tuple(i for i in dict.fromkeys(st.indices + other.indices) if i in need)
        st = search.estimate(st, other, tuple(want))
    members_cache[id(tree)] = (members, st)
    return st


def _build(stmt: Statement, prod: _path.Product, search: _path.Search, tree, result_format: str, itemsize: int,
           reason: str, single: _cost.Cost) -> Plan:
    """The steps of ``tree`` (post-order), their index orders (top-down: as the reading
    step loops), formats and statements."""
    n = search.n
    info: dict = {}
    _stats_of(search, tree, info, True)
    # index orders: each intermediate in the order the step that makes it loops (its first
    # input's indices first: CSR operands are read row by row), the result in its own
    def terms_of(node):
        return [search.leaves[c].indices if isinstance(c, int) else order[id(c)] for c in node]

    def loop_of(node, kids_order) -> list[str]:
        terms = terms_of(node)
        loop: list[str] = []
        for j in kids_order:
            loop += [i for i in terms[j] if i not in loop]
        return loop

    order: dict[int, tuple[str, ...]] = {}

    def natural(node):
        if isinstance(node, int):
            return
        for c in node:
            natural(c)
        if node is tree:
            mine = tuple(prod.indices)
            terms = terms_of(node)
            owner = next((j for j, t in enumerate(terms) if mine and mine[0] in t), 0)
        else:
            owner = 0
        kids_order = [owner] + [j for j in range(len(node)) if j != owner]
        info[("kids", id(node))] = kids_order
        if node is tree:
            order[id(node)] = tuple(prod.indices)
        else:
            loop = loop_of(node, kids_order)
            order[id(node)] = tuple(sorted(info[id(node)][1].indices, key=loop.index))
    natural(tree)
    natural = None          # (each recursive closure's cell let go: no cycle for the collector)
    # where the step reading an intermediate loops over it the other way round: CSC - unless
    # the intermediate is an element-wise product and its reader's result is sparse: the
    # runtime reads it transposed itself (SciPy's O(nnz) transpose in the reader's loader:
    # runtime/operand_orders.sparse_result_formats), while writing it as CSC loops its own
    # step the other way round (a sparse vector it reads then walked once per outer
    # coordinate: t1[b,a] = T1[b,a] * t0[b] as CSC, 24,839 entries, ran 232 ms, est. 0.4)
    transposed: set[int] = set()

    def elementwise(node) -> bool:
        kids = set(i for c in node for i in (search.leaves[c].indices if isinstance(c, int)
                                               else info[id(c)][1].indices))
        return set(info[id(node)][1].indices) == kids

    def sparse_result(node) -> bool:
        return result_format != "dense" if node is tree else not search.dense_allowed(info[id(node)][1])

    def readers(node):
        if isinstance(node, int):
            return
        loop = loop_of(node, info[("kids", id(node))])
        for c in node:
            if not isinstance(c, int):
                want = tuple(sorted(order[id(c)], key=loop.index))
                # (a masked nest of three or more inputs finds its own loop order)
                if len(want) == 2 and want != order[id(c)] and len(node) == 2 and not (
                        elementwise(c) and sparse_result(node)):
                    transposed.add(id(c))
                readers(c)
    readers(tree)
    readers = None
    steps: list[Step] = []
    names: dict[int, str] = {}
    total = _cost.ZERO
    result_dense = result_format == "dense"

    parent: dict[int, tuple] = {}

    def parents(node):
        if not isinstance(node, int):
            for c in node:
                parent[id(c)] = node
                parents(c)
    parents(tree)
    parents = None

    orders: dict = {}       # id(node) -> ordered(node) (the nodes stay in ``tree``)

    def ordered(node) -> TensorStats:
        got = orders.get(id(node))
        if got is None:
            st, idx = info[id(node)][1], order[id(node)]
            got = orders[id(node)] = TensorStats(idx, tuple(st.size_of(i) for i in idx), st.nnz, st.full,
                                                 tuple(st.counts[st.indices.index(i)] for i in idx),
                                                 tuple(st.nonempty[st.indices.index(i)] for i in idx))
        return got

    def stored_dense(node) -> bool:
        """A node's format as far as known: its step's, else the local rule's."""
        if isinstance(node, int):
            return search.leaf_dense[node]
        if node is tree:
            return result_dense
        if id(node) in names:
            return steps_by_name[names[id(node)]].format == "dense"
        return _format(ordered(node), search.dense_allowed, itemsize) == "dense"

    costs: dict = {}        # (id(node), dense, the kids' formats) -> step_of's cost

    def step_of(node, dense: bool, given: dict) -> _cost.Cost:
        """The cost of ``node``'s step stored ``dense``; ``given``: kids' formats by id."""
        kids = [node[j] for j in info[("kids", id(node))]]
        pairs = [(search.leaves[c] if isinstance(c, int) else info[id(c)][1],
                  given.get(id(c), stored_dense(c))) for c in kids]
        key = (id(node), dense, tuple(d for _, d in pairs))
        got = costs.get(key)
        if got is None:
            st = ordered(node)
            got = costs[key] = _cost.step_cost(pairs, st, dense, products(pairs) / _cost.dense_rate(
                pairs, st.indices, dense), itemsize)
        return got

    joins: dict = {}        # the kids' (id(statistics), stored dense?) -> (their products, the kids)

    def products(pairs) -> float:
        """:func:`_products` once per kids' statistics and formats."""
        key = tuple((id(st), d) for st, d in pairs)
        got = joins.get(key)
        if got is None:
            got = joins[key] = (_products(pairs), pairs)
        return got[0]

    def format_of(node) -> str:
        """An intermediate's format: dense where the algebra allows it and its step and the
        step reading it cost less so (the dense-intermediate rule), else sparse."""
        st = ordered(node)
        if search.dense_allowed(st) and not st.full:
            up = parent[id(node)]

            def both(dense: bool) -> float:
                return (step_of(node, dense, {}).seconds
                        + step_of(up, stored_dense(up), {id(node): dense}).seconds)
            if both(True) < both(False):
                return "dense"
            return _format(st, lambda _: False, itemsize)
        return _format(st, search.dense_allowed, itemsize)

    def emit(node, root):
        nonlocal total
        if isinstance(node, int):
            return
        for c in node:
            emit(c, False)
        kids = [node[j] for j in info[("kids", id(node))]]
        st = info[id(node)][1]
        idx = order[id(node)]
        st_ordered = ordered(node)
        if root:
            fmt = result_format
        else:
            fmt = format_of(node)
            if fmt in ("csr", "dcsr") and id(node) in transposed:
                fmt = "csc"
        inputs, terms, kid_stats = [], [], []
        reads, converts = _conversions(search, kids, idx, fmt != "dense", products, [
            (search.leaves[c], search.leaf_dense[c]) if isinstance(c, int)
            else (info[id(c)][1], steps_by_name[names[id(c)]].format == "dense") for c in kids])
        for pos, c in enumerate(kids):
            if isinstance(c, int):
                f = prod.factors[c]
                if pos in converts:
                    inputs.append(_convert_step(prod, f, search.leaves[c], converts[pos], steps, steps_by_name,
                                                itemsize, stmt, _reorders(search.layouts[c], converts[pos], f.indices)))
                    copy = _order.conversion_cost(search.leaves[c], itemsize,
                                                  _reorders(search.layouts[c], converts[pos], f.indices))
                    total = total + copy
                    reads = reads + _cost.Cost(-copy.bytes, -copy.ops)
                else:
                    inputs.append(f.tensor)
                terms.append(f.indices)
                kid_stats.append((search.leaves[c], search.leaf_dense[c]))
            else:
                inputs.append(names[id(c)])
                terms.append(order[id(c)])
                cst = info[id(c)][1]
                kid_stats.append((cst, steps_by_name[names[id(c)]].format == "dense"))
        scalars = prod.scalars if root else ()
        statement = step_statement(prod, terms, idx, scalars, root and stmt)
        for s in scalars:
            if isinstance(s, Access):
                inputs.append(s.tensor)
        dense = fmt == "dense"
        c = step_of(node, dense, {id(k): d for k, (_, d) in zip(kids, kid_stats)})
        c = c + reads
        total = total + c
        out_name = stmt.output if root else fresh_name(stmt, steps)
        names[id(node)] = out_name
        text = _text(prod, out_name, idx, inputs, terms, scalars)
        step = Step(statement, tuple(inputs), out_name, idx, fmt, float(st.nnz), c.seconds, text,
                    st_ordered.sizes)
        steps.append(step)
        steps_by_name[out_name] = step
    steps_by_name: dict[str, Step] = {}
    emit(tree, True)
    emit = None
    return Plan(stmt, tuple(steps), _path.path_of(tree, n), reason, total.seconds, single.seconds)


def _products(kids_stats) -> float:
    joined = _cost.stored(*kids_stats[0])
    for other in kids_stats[1:]:
        joined = estimate(joined, _cost.stored(*other), tuple(dict.fromkeys(joined.indices + other[0].indices)))
    return joined.nnz


def _conversions(search: _path.Search, kids, idx, out_sparse: bool, products, pairs) -> tuple[_cost.Cost, dict]:
    """What a step over ``kids`` (statistics and storage ``pairs``) spends reading its sparse
    leaves, and which it converts first into the order it reads them (positions in ``kids``:
    ``Search.reads``; the cost includes the copies).  A masked nest of three or more inputs
    too: the sparsifier orders its loops as any nest's (``order.schedule``).  ``products``:
    :func:`_products`."""
    return search.reads(list(kids), [s for s, _ in pairs], [d for _, d in pairs], tuple(idx), products(pairs),
                        out_sparse)


def _reorders(lay, fmt: str, indices) -> bool:
    """Whether converting a leaf stored as ``lay`` into ``fmt`` changes its levels' order."""
    new = _order.layout_of(fmt, tuple(indices))
    return lay is None or new is None or new.levels != lay.levels


def fresh_name(stmt: Statement, steps) -> str:
    """The name of the next intermediate: ``t<k>`` with the first ``k`` from the number of
    steps on that no operand, output or earlier step has (an operand named ``t0`` was read
    as the intermediate of that name)."""
    taken = set(stmt.operands) | {stmt.output} | {s.output for s in steps}
    k = len(steps)
    while f"t{k}" in taken:
        k += 1
    return f"t{k}"


def _convert_step(prod: _path.Product, f: Access, st: TensorStats, fmt: str, steps: list, steps_by_name: dict,
                  itemsize: int, original: Statement, reorders: bool = True) -> str:
    """Append the step copying leaf ``f`` into ``fmt`` (the order its reader loops): a
    compiled copy (``t1[c,d] = T3[c,d]``), the same values and pattern; its name."""
    letters = tuple(LETTERS[k] for k in range(len(f.indices)))
    statement = Statement("out", letters, Access("#0", letters), ("#0",))
    name = fresh_name(original, steps)
    text = f"{name}[{','.join(f.indices)}] = {_name(f.tensor)}[{','.join(f.indices)}]"
    step = Step(statement, (f.tensor,), name, tuple(f.indices), fmt, float(st.nnz),
                _order.conversion_cost(st, itemsize, reorders).seconds, text, tuple(st.sizes))
    steps.append(step)
    steps_by_name[name] = step
    return name


def _format(st: TensorStats, dense_allowed, itemsize: int) -> str:
    """The format an intermediate is stored in (module docstring)."""
    if not st.indices:
        return "dense"
    if dense_allowed(st) and _cost.dense_is_cheaper(st, itemsize):
        return "dense"
    if len(st.indices) == 2:
        rows = st.nonempty_slices(st.indices[0])
        return "dcsr" if st.sizes[0] and rows < DCSR_BELOW * st.sizes[0] else "csr"
    return "coo"
