"""Hessians and Hessian-vector products of a scalar with respect to the stored values of a
sparse operand (docs/derivatives.md): ``H[p, q] = d2 f / d w_p d w_q``, ``p`` and ``q`` the
stored entries of ``w`` in canonical order (``sc.jacobian``'s column convention).

The gradient statement ``G_[k...] = d f / d w[k...]`` is differentiated again with respect to
``w[k2...]``; both index groups are masked by ones on ``w``'s entries (``P_`` and ``Q_``), so
the compiled kernel's sparse (COO) result holds only pairs of stored entries.  Its
coordinates are then renumbered as entry positions (coordinates only, cached per pattern as
``tensor.Renumbering``); no value is computed here.  The Hessian-vector product is the
forward derivative of the gradient statement with the tangent stored on ``w``'s entries,
masked by ``P_``: one kernel, its result's coordinates placed at their entry positions.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import DTypeError, OperandError, SparseccError
from ..expr import Access, Binary, Statement, accesses, fold
from ..patterns import default_result_format
from .common import _dtype_check, _identity, _in, _kernel
from .entries import EntryCache
from .symbolic import contracted, derivative, fresh_index, split_reads
from .tensor import CACHED, Renumbering, _deltas

ROWS, COLS, TANGENT = "P_", "Q_", "Tan_"


def _fresh(stmt: Statement, n: int, taken=()) -> tuple:
    ks = []
    for _ in range(n):
        s = Statement(stmt.output, stmt.indices + tuple(taken) + tuple(ks), stmt.expr, stmt.operands)
        ks.append(fresh_index(s, "k"))
    return tuple(ks)


def _masked(expr, mask, ks):
    return fold(Binary("*", expr, Access(mask, ks)))


def _stmt(output, indices, expr):
    return Statement(output, tuple(indices), expr, tuple(dict.fromkeys(a.tensor for a in accesses(expr))))


class StoredSecond:
    """What the Hessian and the Hessian-vector product with respect to stored values share:
    the gradient statement over ``w``'s indices, the entries, the identities, the cache."""

    def __init__(self, owner, rank: int):
        self.owner, self.rank = owner, rank
        stmt, wrt, source = owner.stmt, owner.wrt, owner.source
        for name in (ROWS, COLS, TANGENT):
            if name in stmt.operands:
                raise SparseccError(f"'{source}' names an operand {name}, which derivatives use themselves")
        self.ks = _fresh(stmt, rank)
        g = derivative(stmt, wrt, self.ks, output="G_", source=source, deltas=_deltas(rank))
        if g is None:
            raise SparseccError(f"'{source}' does not depend on {wrt!r}")
        self.gradient_statement = _stmt("G_", self.ks, g.expr)
        self.entries = EntryCache()
        self._kernels: dict = {}
        self._layouts: list = []

    def kernel(self, stmt, fmt):
        k = self._kernels.get((str(stmt), fmt))
        if k is None:
            k = self._kernels[(str(stmt), fmt)] = _kernel(stmt, self.owner.options, fmt)
        return k

    def args(self, stmt, aliases, ops, dt, extra):
        w = ops[self.owner.wrt]
        ent = self.entries.get(w)
        args = dict(ops, **extra(ent))
        for d, name in enumerate(_deltas(self.rank)):
            if name in stmt.operands or name in aliases.values():
                args[name] = _identity(ent.shape[d], dt)
        args.update({a: args[n] for a, n in aliases.items() if n in args})
        return {n: x for n, x in args.items() if n in stmt.operands}, ent

    def renumbered(self, res, ent, lead: int):
        """The result's coordinates as entry positions: the first ``lead`` groups of
        ``rank`` coordinates each (0 or 1), then the last group."""
        for i, lay in enumerate(self._layouts):
            if lay.matches(res.coords, (lead,), ent):
                self._layouts.insert(0, self._layouts.pop(i))
                return lay
        lay = _PairRenumbering(res.coords, ent, self.rank, lead)
        self._layouts.insert(0, lay)
        del self._layouts[CACHED:]
        return lay


class _PairRenumbering(Renumbering):
    """``Renumbering`` for the Hessian (two groups of ``w``'s coordinates, both renumbered)
    and the Hessian-vector product (one group)."""

    def __init__(self, kcoords, ent, rank, lead):
        self.kcoords = tuple(np.array(c, copy=True) for c in kcoords)
        self.out_shape, self.ent, self._matrix = (lead,), ent, None
        cs = [np.asarray(c, np.int64) for c in kcoords]
        groups = [cs[g * rank:(g + 1) * rank] for g in range(lead + 1)]
        pos = [_positions(ent, grp) for grp in groups]
        self.shape = (ent.size,) * (lead + 1)
        self.perm = None
        if lead and pos[0].size > 1 and not _ascending_pairs(pos[0], pos[1]):
            self.perm = np.lexsort((pos[1], pos[0]))
            pos = [p[self.perm] for p in pos]
        elif not lead and pos[0].size > 1 and not bool((pos[0][1:] > pos[0][:-1]).all()):
            self.perm = np.argsort(pos[0], kind="stable")
            pos = [pos[0][self.perm]]
        self.coords = tuple(pos)


def _positions(ent, coords):
    lin = np.ravel_multi_index(tuple(coords), ent.shape)
    if ent.ascending:
        return np.searchsorted(ent.keys, lin).astype(np.int64)
    return ent.order[np.searchsorted(ent.keys[ent.order], lin)].astype(np.int64)


def _ascending_pairs(p, q):
    return bool(((p[1:] > p[:-1]) | ((p[1:] == p[:-1]) & (q[1:] > q[:-1]))).all())


class StoredHessian(StoredSecond):
    """``H[p, q]`` as an ``nnz x nnz`` ``csr_array`` (stored zeros kept; a full pattern: a
    dense array)."""

    def __init__(self, owner, rank):
        super().__init__(owner, rank)
        k2 = _fresh(self.gradient_statement, rank, self.ks)
        d = derivative(self.gradient_statement, owner.wrt, k2, output="H_", source=owner.source,
                       deltas=_deltas(rank), mask=COLS)
        self.statement, self.aliases = None, {}
        if d is not None:
            self.statement, self.aliases = split_reads(_stmt("H_", self.ks + k2, _masked(d.expr, ROWS, self.ks)))

    def run(self, ops: dict):
        dt = _dtype_check(self.owner.stmt, ops, self.owner.wrt, self.owner.source)
        if self.statement is None:
            n = self.entries.get(ops[self.owner.wrt]).size
            return sp.csr_array((n, n), dtype=dt)
        args, ent = self.args(self.statement, self.aliases, ops, dt,
                              lambda e: {ROWS: e.mask(dt), COLS: e.mask(dt)})
        sparse = frozenset(n for n, x in args.items() if sp.issparse(x))
        if default_result_format(self.statement, sparse) == "dense":      # a dense wrt: every entry
            full = np.asarray(_in(np.asarray(self.kernel(self.statement, "dense")(**args)), dt))
            return full.reshape(ent.size, -1)[np.ix_(ent.keys, ent.keys)] if ent.size else np.zeros((0, 0), dt)
        res = _in(self.kernel(self.statement, "coo")(**args), dt)
        res = res if isinstance(res, sp.coo_array) else sp.coo_array(res)
        lay = self.renumbered(res, ent, 1)
        vals = np.asarray(res.data)
        indptr, cols = lay.matrix()
        return sp.csr_array((vals if lay.perm is None else vals[lay.perm], cols.copy(), indptr.copy()),
                            shape=(ent.size, ent.size))


class StoredHVP(StoredSecond):
    """``hvp(**operands, tangent=v)``: ``H @ v`` over ``w``'s stored entries (one kernel)."""

    sparse_wrt_ok = True

    def __init__(self, owner, rank):
        super().__init__(owner, rank)
        k2 = _fresh(self.gradient_statement, rank, self.ks)
        c = contracted(self.gradient_statement, owner.wrt, TANGENT, k2[0] if rank == 1 else k2,
                       output="HV_", source=owner.source)
        self.statement, self.aliases = None, {}
        if c is not None:
            self.statement, self.aliases = split_reads(_stmt("HV_", self.ks, _masked(c.expr, ROWS, self.ks)))

    def run(self, ops: dict, tangent):
        dt = _dtype_check(self.owner.stmt, ops, self.owner.wrt, self.owner.source)
        w = ops[self.owner.wrt]
        ent = self.entries.get(w)
        tangent = np.asarray(tangent)
        if tangent.shape != (ent.size,) and not (not sp.issparse(w) and tangent.shape == ent.shape):
            raise OperandError(f"the tangent must have one value per stored entry of {self.owner.wrt!r} in "
                               f"canonical order, shape ({ent.size},), got {tangent.shape}")
        if tangent.dtype.kind not in "fc" or (tangent.dtype.kind == "c" and dt.kind != "c"):
            raise DTypeError(f"the tangent must be floating-point (complex for a complex derivative), "
                             f"got {tangent.dtype}")
        out = np.zeros(ent.size, dt)
        if self.statement is None or not ent.size:
            return out
        args, ent = self.args(self.statement, self.aliases, ops, dt,
                              lambda e: {ROWS: e.mask(dt), TANGENT: e.carrying(tangent.reshape(-1))})
        sparse = frozenset(n for n, x in args.items() if sp.issparse(x))
        if default_result_format(self.statement, sparse) == "dense":
            return np.asarray(_in(np.asarray(self.kernel(self.statement, "dense")(**args)), dt)).reshape(-1)[ent.keys]
        res = _in(self.kernel(self.statement, "coo")(**args), dt)
        res = res if isinstance(res, sp.coo_array) else sp.coo_array(res)
        lay = self.renumbered(res, ent, 0)
        vals = np.asarray(res.data)
        out[lay.coords[0]] = vals if lay.perm is None else vals[lay.perm]   # values moved to their entries
        return out
