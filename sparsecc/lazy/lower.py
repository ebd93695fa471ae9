"""Lowering a lazy DAG to statements and running them: ``sc.compute`` and ``@sc.fused``
(docs/lazy.md, What fuses)."""

from __future__ import annotations

import builtins
import functools

import numpy as np
import scipy.sparse as sp

from ..errors import SparseccError
from ..expr import Access, Binary, Const, Dense, Index, Reduce, Statement, Stored, Unary, Where, accesses, fold
from ..program import Program
from ..runtime.pydata import is_pydata, to_scipy
from .core import _LETTERS, LazyArray, _from_torch, _is_torch, _placeholder, lazy, torch_api


# ----------------------------------------------------------- the DAG as statements
#: the most operations inlined into one statement: a longer chain (a loop of lazy updates)
#: is cut into statements of at most this depth (the IR takes 100 levels: ``expr.MAX_DEPTH``)
MAX_INLINE = 40


class _Lowering:
    """Statements computing ``outputs`` (see docs/lazy.md, What fuses): a node becomes a
    statement of its own where it is an output, a contraction or reduction read by anything
    but a contraction (or read twice), or an element-wise chain read by a contraction that
    is not a plain product; everything else is inlined into its reader's statement."""

    def __init__(self, outputs):
        self.leaves: dict[int, str] = {}
        self.leaf_nodes: list[LazyArray] = []
        self.names: dict[int, str] = {}
        self.statements: list[Statement] = []
        self.parents: dict[int, list] = {}
        seen, order, stack = set(), [], [(o, False) for o in outputs]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.append((n, True))
            for k in n.kids:
                if isinstance(k, LazyArray):
                    self.parents.setdefault(id(k), []).append(n)
            stack.extend((k, False) for k in reversed(n.kids) if isinstance(k, LazyArray))
        self.order = order                     # children first
        self.outputs = outputs
        out_ids = set()
        self.reshape: dict[int, tuple] = {}
        for o in outputs:
            base = o
            while base.kind == "keep":
                base = base.kids[0]
            out_ids.add(id(base))
            self.reshape[id(o)] = (id(base), o.shape)
        self._out_ids = out_ids

    def _readers(self, n) -> list:
        """n's readers (through transposes)."""
        out = []
        for p in self.parents.get(id(n), []):
            out += (self._readers(p) or [p]) if p.kind == "perm" else [p]
        return out

    def _materialize(self, n) -> bool:
        if n.kind in ("leaf", "index"):
            return False
        if id(n) in self._out_ids:
            return True
        if n.kind in ("perm", "keep"):
            return False
        readers = self._readers(n)
        if n.kind in ("contract", "reduce"):
            if n.kind == "contract" and self._epilogue(n, readers):
                return False
            return n.kind == "reduce" or len(self.parents.get(id(n), [])) > 1 or \
                builtins.any(r.kind != "contract" for r in readers)
        # element-wise: its own statement where a product of several arrays reads it and it is
        # no product itself (the planner orders products; a sum of one chain stays one nest)
        products = [r for r in readers if r.kind == "contract"
                    and builtins.sum(isinstance(k, LazyArray) and k.op != "select" for k in r.kids) > 1]
        return bool(products) and not self._is_factor(n)

    def _epilogue(self, n, readers) -> bool:
        """Whether the contraction ``n`` - a sparse matrix times dense vectors, a dense vector -
        is inlined into its one reader, an element-wise node of its shape over constants and
        dense arrays (``(1 - d) / n + d * (A.T @ x)``: one statement, the scatter or SpMV
        kernel's final pass computes the reader; docs/lazy.md, What fuses)."""
        if n.ndim != 1 or len(self.parents.get(id(n), [])) != 1 or len(readers) != 1:
            return False            # (a vector result is dense whatever its operands: the rules)
        reader = readers[0]
        if reader.kind not in ("binary", "unary") or reader.shape != n.shape:
            return False
        kids = [k.kids[0] if isinstance(k, LazyArray) and k.kind == "perm" else k for k in n.kids]
        mats = [k for k in kids if isinstance(k, LazyArray) and k.sparse]
        if len(mats) != 1 or mats[0].kind != "leaf" or mats[0].op == "select" or mats[0].ndim != 2:
            return False
        return builtins.all(k is n or self._plain(k) for k in reader.kids)

    def _plain(self, k) -> bool:
        """Constants and element-wise chains of dense leaves (nothing that makes a statement)."""
        if isinstance(k, Const):
            return True
        if k.sparse or k.kind not in ("leaf", "binary", "unary") or id(k) in self._out_ids:
            return False
        return k.kind == "leaf" or builtins.all(self._plain(c) for c in k.kids)

    def _is_factor(self, n) -> bool:
        if isinstance(n, Const) or n.kind in ("leaf", "contract"):
            return True
        if n.kind == "perm":
            return self._is_factor(n.kids[0])
        return n.kind == "binary" and n.op == "*" and builtins.all(self._is_factor(k) for k in n.kids)

    def lower(self):
        for n in self.order:
            if n.kind == "leaf":
                name = self.leaves.setdefault(id(n), f"a{len(self.leaves)}")
                if name == f"a{len(self.leaf_nodes)}":
                    self.leaf_nodes.append(n)
        depth: dict[int, int] = {}
        for n in self.order:
            d = 1 + builtins.max((depth[id(k)] for k in n.kids if isinstance(k, LazyArray)), default=0)
            if n.kind != "leaf" and (self._materialize(n) or d > MAX_INLINE) or \
                    (n.kind == "leaf" and id(n) in self._out_ids):
                self._statement(n)
                d = 1
            depth[id(n)] = d
        return self

    def _statement(self, n):
        fresh = iter(_LETTERS)
        idx = tuple(next(fresh) for _ in range(n.ndim))
        expr = fold(self._expr(n, idx, fresh, top=True))
        if isinstance(expr, Const):
            raise SparseccError("a lazy result computed from constants only")
        name = f"v{len(self.statements)}"
        ops = tuple(dict.fromkeys(a.tensor for a in accesses(expr)))
        self.statements.append(Statement(name, idx, expr, ops))
        self.names[id(n)] = name

    def _expr(self, n, idx, fresh, top=False):
        if isinstance(n, Const):
            return n
        if not top and id(n) in self.names:
            return Access(self.names[id(n)], idx)
        k = n.kind
        if k == "leaf":
            return Access(self.leaves[id(n)], idx)
        if k == "index":                   # the position along axis n.op (argmax)
            return Index(idx[n.op])
        if k == "unary":
            return Unary(n.op, self._expr(n.kids[0], idx, fresh))
        if k in ("binary", "where"):
            kids = [self._bcast(c, idx, n.shape, fresh) for c in n.kids]
            if k == "binary" and n.op in ("/", "//", "%") and isinstance(n.kids[1], LazyArray) and n.kids[1].ndim:
                # index notation divides by scalars only; stored(...) over dense operands is
                # NumPy's division at every entry (a sparse operand: its dense temporary)
                kids = [Dense(e) if isinstance(c, LazyArray) and c.sparse else e for c, e in zip(n.kids, kids)]
                return Stored(Binary(n.op, *kids))
            return Binary(n.op, *kids) if k == "binary" else Where(*kids)
        if k == "perm":
            inner = [None] * n.ndim
            for a, src in enumerate(n.op):
                inner[src] = idx[a]
            return self._expr(n.kids[0], tuple(inner), fresh)
        if k == "keep":
            return self._expr(n.kids[0], tuple(i for a, i in enumerate(idx) if a not in n.op), fresh)
        if k == "contract":
            labels, out = n.op
            name = dict(zip(out, idx))
            body = None
            reduced = []
            for t, c in zip(labels, n.kids):
                for l in t:
                    if l not in name:
                        name[l] = next(fresh)
                        reduced.append(name[l])
                e = self._expr(c, tuple(name[l] for l in t), fresh)
                body = e if body is None else Binary("*", body, e)
            reduced = _used(reduced, body)
            return Reduce("sum", tuple(reduced), body) if reduced else body
        if k == "reduce":
            op, axes = n.op
            it = iter(idx)
            inner = []
            red = []
            for a in range(n.kids[0].ndim):
                if a in axes:
                    red.append(next(fresh))
                    inner.append(red[-1])
                else:
                    inner.append(next(it))
            body = self._expr(n.kids[0], tuple(inner), fresh)
            red = _used(red, body)
            if not red:
                return body
            if n.kids[0].sparse:
                body = Dense(body)
            return Reduce(op, tuple(red), body)
        raise SparseccError(f"internal: unknown lazy node {k}")   # pragma: no cover

    def _bcast(self, c, idx, shape, fresh):
        """``c``'s expression read at ``idx`` (the reader's indices, NumPy's broadcasting: a
        size-1 axis against a longer one reads its one entry, a sum over a fresh index)."""
        if isinstance(c, Const):
            return c
        k = c.ndim
        mine = list(idx[len(idx) - k:]) if k else []
        extra = []
        for a in range(k):
            if c.shape[a] == 1 and shape[len(shape) - k + a] != 1:
                mine[a] = next(fresh)
                extra.append(mine[a])
        e = self._expr(c, tuple(mine), fresh)
        extra = _used(extra, e)
        return Reduce("sum", tuple(extra), e) if extra else e


def _used(names, e) -> list:
    """``names`` that ``e`` reads (a reduction over an index its body does not use is refused)."""
    used = {i for acc in accesses(e) for i in acc.indices}
    return [i for i in names if i in used]


_PROGRAMS: dict = {}


class _Compiled:
    """A lowered DAG: its program and how to feed it."""

    def __init__(self, outputs, out_format=None, cached=False):
        #: ``cached``: held by @sc.fused for one trace key, so later calls may replay the
        #: first call's steps (``Program.replay``: no per-call plan where none depends on values)
        self.cached, self.replay, self.feed, self.plain_args = cached, None, None, False
        low = _Lowering(outputs).lower()
        self.program_key = tuple(low.statements)
        self.outs = [(low.names[low.reshape[id(o)][0]], low.reshape[id(o)][1]) for o in outputs]
        self.leaves = [(low.leaves[id(n)], n) for n in low.leaf_nodes]
        self.torch = builtins.any(n.torch for n in low.leaf_nodes)
        self.pydata = builtins.any(n.pydata for n in low.leaf_nodes)
        wanted = tuple(dict.fromkeys(name for name, _ in self.outs))
        if out_format is None:
            # a value NumPy would hold dense stays dense (a slice or reshape of a dense
            # array reads it through sparse selections, whose product the rules make sparse)
            dense = {low.names[low.reshape[id(o)][0]] for o in outputs if not o.sparse and o.ndim}
            formats = {n: "dense" for n in wanted if n in dense} or None
        else:
            formats = {n: out_format for n in wanted}
        key = (self.program_key, wanted, out_format if out_format is not None else tuple(sorted(formats or ())))
        prog = _PROGRAMS.get(key)
        if prog is None:
            prog = Program(low.statements, outputs=wanted, out_format=formats)
            try:
                _PROGRAMS[key] = prog
            except TypeError:           # an unhashable format object: no memo
                pass
        self.program = prog
        self.statements = low.statements
        #: results as the program gives them (no reshape, no torch or pydata conversion)
        self.plain = not (self.torch or self.pydata) and builtins.all(
            low.names.get(id(o)) == name for o, (name, _) in zip(outputs, self.outs))

    def run(self, args=()):
        feed = self.feed
        if feed is None:
            needed = set(self.program.operands)
            feed = self.feed = [(name, n.op if n.value is None else None, n.value, n.torch, n.pydata)
                                for name, n in self.leaves if name in needed]
        env = {}
        for name, slot, value, torch, pydata in feed:
            if slot is None:
                env[name] = value
            else:
                a = args[slot]
                env[name] = _from_torch(a) if torch else to_scipy(a, "an argument") if pydata else a
        if self.replay is not None:
            out = self.replay(env)
        else:
            out = self.program(**env)
            if self.cached:            # @sc.fused: the next call has this call's key
                self.replay = self.program.replay()
        if self.plain:
            return [out[name] for name, _ in self.outs]
        res = []
        for name, shape in self.outs:
            r = out[name]
            if tuple(r.shape) != tuple(shape):
                r = r.reshape(shape)
            res.append(r)
        if self.torch:                 # torch in, torch out
            res = [torch_api().from_sparsecc(r) for r in res]
        elif self.pydata:              # pydata in: sparse results as pydata COO arrays
            res = [_to_pydata(r) if sp.issparse(r) else r for r in res]
        return res


def _to_pydata(r):
    import sparse                       # a pydata operand was given: the package is there
    c = r.tocoo()
    return sparse.COO(np.vstack(c.coords) if c.nnz else np.zeros((c.ndim, 0), np.int64), c.data, shape=c.shape,
                      has_duplicates=False)


def compute(*lazies, format=None):     # noqa: A002
    """Compute lazy arrays: one program for all of them (shared steps once).  One argument
    gives its result; several give a tuple.  Results are NumPy arrays or SciPy sparse
    arrays (docs/lazy.md, Patterns); ``format``: every result's layout (``"dense"``,
    ``"csr"``, ``"coo"``, ... as ``out_format=`` of ``sc.einsum``)."""
    if not lazies:
        raise SparseccError("sc.compute needs at least one lazy array")
    outs = [lazy(x) for x in lazies]
    res = _Compiled(outs, format).run()
    return res[0] if len(res) == 1 else tuple(res)


_ARRAY_TYPES = (np.ndarray, sp.csr_array, sp.csc_array, sp.coo_array, sp.csr_matrix, sp.csc_matrix, sp.coo_matrix)


def _arg_key(a):
    t = type(a)
    if t in _ARRAY_TYPES:               # the common case first (a cached call's key is its cost)
        return ("array", t, a.dtype, a.shape)
    if t is float or t is int:
        return ("const", t, a)
    if isinstance(a, LazyArray):
        raise SparseccError("a @sc.fused function takes NumPy/SciPy arrays and Python scalars, not lazy arrays")
    if isinstance(a, (bool, int, float, complex)) and not isinstance(a, np.generic):
        return ("const", type(a), a)
    if _is_torch(a):
        return ("array", "torch", a.layout, a.dtype, tuple(a.shape))
    if sp.issparse(a):
        return ("array", type(a), a.dtype, a.shape)
    if is_pydata(a):
        return ("array", type(a), getattr(a, "compressed_axes", None), a.dtype, tuple(a.shape))
    if isinstance(a, np.generic):      # an operand too, but passed on as a 0-d array (its own key)
        return ("array", "numpy scalar", a.dtype, ())
    if isinstance(a, np.ndarray):
        return ("array", np.ndarray, a.dtype, a.shape)
    try:
        hash(a)
    except TypeError:
        raise SparseccError(f"a @sc.fused argument of type {type(a).__name__} is neither an array nor a "
                            f"hashable constant") from None
    return ("const", type(a), a)


def fused(fn):
    """Trace ``fn`` once per trace key - each argument's array type (format), dtype and
    shape, and the value of each Python scalar (a constant of the program) - and run the
    cached program on later calls (``fn.traces`` counts the traces)."""
    cache: dict = {}

    @functools.wraps(fn)
    def wrapper(*args):
        key = tuple(_arg_key(a) for a in args)
        entry = cache.get(key)
        if entry is None:
            wrapper.traces += 1
            traced = [_placeholder(a, k) if kk[0] == "array" else a for k, (a, kk) in enumerate(zip(args, key))]
            result = fn(*traced)
            single = not isinstance(result, (tuple, list))
            outs = [lazy(o) if getattr(o, "_sc_indexed", False) else o for o in ([result] if single else result)]
            for o in outs:
                if not isinstance(o, LazyArray):
                    raise SparseccError(f"@sc.fused {fn.__name__} returned {type(o).__name__}; it must return lazy "
                                        f"arrays (computed from its array arguments)")
            entry = cache[key] = (_Compiled(outs, cached=True), single)
            entry[0].plain_args = not builtins.any(isinstance(a, np.generic) for a in args)
        compiled, single = entry
        res = compiled.run(args if compiled.plain_args else
                           [np.asarray(a) if isinstance(a, np.generic) else a for a in args])
        return res[0] if single else tuple(res)

    wrapper.traces = 0
    wrapper.cache = cache
    return wrapper
