"""Jacobians beyond vector-by-vector (docs/derivatives.md): with respect to the stored values
of a sparse operand (masked), and of matrix (or higher-rank) results.

The derivative statement is ``D_[out..., k...] = (d out / d wrt[k...]) * P_[k...]``, one new
index per dimension of ``wrt``; a delta of an output index reads an identity of that
dimension's size (``Id_``, ``Id1_``, ...), and ``P_`` holds ones on ``wrt``'s stored
entries (masked: only those are variables).  A compiled kernel computes it with a sparse
(COO) result whose pattern follows from the operands' patterns; what happens here is only
bookkeeping of coordinates: the ``k...`` of each stored entry become its position ``p`` in
``wrt``'s canonical order (CSR and COO row-major, CSC column-major, a dense array
row-major), and the result's coordinates are laid out as asked (a CSR matrix over the
result's (flattened) indices and ``p``, or an N-D ``coo_array``).  No value is computed here.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import OperandError, SparseccError
from ..expr import Statement, index_sizes
from ..patterns import default_result_format
from .common import _dtype_check, _identity, _in, _kernel
from .symbolic import DELTA, derivative, fresh_index, split_reads

MASK = "P_"


def _deltas(rank: int) -> tuple:
    return tuple(DELTA if d == 0 else f"Id{d}_" for d in range(rank))


def entries(w) -> tuple[tuple, tuple[np.ndarray, ...], object]:
    """``(shape, coordinates of each stored entry in canonical order, the mask operand)``
    of a sparse (or dense) ``wrt`` operand; the mask stores ones on those entries."""
    if not sp.issparse(w):
        w = np.asarray(w)
        coords = np.unravel_index(np.arange(w.size), w.shape)
        return w.shape, tuple(c.astype(np.int64) for c in coords), np.ones(w.shape)
    fmt = w.format
    if fmt in ("csr", "csc"):
        c = w if w.has_canonical_format else _canonical(w)
        major = np.repeat(np.arange(len(c.indptr) - 1, dtype=np.int64), np.diff(c.indptr))
        minor = c.indices.astype(np.int64)
        coords = (major, minor) if fmt == "csr" else (minor, major)
        mask = type(c)((np.ones(len(minor)), c.indices, c.indptr), shape=c.shape)
        return c.shape, coords, mask
    c = sp.coo_array(w)
    if not c.has_canonical_format:
        c = c.copy()
        c.sum_duplicates()
    order = np.lexsort(tuple(c.coords[::-1]))
    coords = tuple(np.asarray(x, np.int64)[order] for x in c.coords)
    return c.shape, coords, sp.coo_array((np.ones(len(order)), coords), shape=c.shape)


def _canonical(w):
    c = w.copy()
    c.sum_duplicates()
    c.sort_indices()
    return c


class TensorJacobian:
    """``J(**operands)``: ``d out[...] / d wrt`` where ``wrt`` is a sparse operand (its
    stored values are the variables: column ``p`` is the ``p``-th stored entry in canonical
    order) or the result has two or more indices.  A ``csr_array`` when the Jacobian is a
    matrix (a vector result and a sparse ``wrt``, or ``flatten=True``: rows are the result's
    indices flattened row-major), else an N-D ``coo_array`` (result indices, then ``wrt``'s
    entry or index); stored zeros kept."""

    def __init__(self, owner, masked: bool, flatten: bool):
        self.owner = owner
        stmt, wrt, source = owner.stmt, owner.wrt, owner.source
        self.masked, self.flatten = masked, flatten
        rank = len(next(a.indices for a in _accesses(stmt) if a.tensor == wrt))
        ks, taken = [], stmt
        for d in range(rank if masked else 1):
            k = fresh_index(taken, "k")
            ks.append(k)
            taken = Statement(taken.output, taken.indices + (k,), taken.expr, taken.operands)
        self.ks = tuple(ks)
        self.rank = rank
        st = derivative(stmt, wrt, self.ks, output="D_", source=source,
                        deltas=_deltas(len(ks)), mask=MASK if masked else None)
        self.aliases: dict = {}
        if st is not None:
            st, self.aliases = split_reads(st)
        self.statement = st
        self._kernels: dict = {}

    # ---------------------------------------------------------------- shapes and operands
    def _sizes(self, ops: dict) -> tuple[tuple, tuple]:
        """(the result's shape, the wrt axis: its entry count when masked, else its size)."""
        stmt = self.owner.stmt
        shapes = {n: tuple(np.shape(x)) for n, x in ops.items() if n in stmt.operands}
        sizes = index_sizes(stmt, shapes)
        missing = [i for i in stmt.indices if i not in sizes]
        if missing or self.owner.wrt not in ops:
            raise OperandError(f"'{self.owner.source}': the operands given do not fix the derivative's shape; "
                               f"pass {self.owner.wrt!r} and the operands indexed by {', '.join(missing) or '-'}")
        return tuple(sizes[i] for i in stmt.indices)

    def _args(self, ops: dict, dt):
        w = ops[self.owner.wrt]
        args = dict(ops)
        if self.masked:
            shape, coords, mask = entries(w)
            args[MASK] = mask.astype(dt) if sp.issparse(mask) else mask.astype(dt)
        else:
            shape, coords = np.shape(w), None
        for d, name in enumerate(_deltas(len(self.ks))):
            if name in self.statement.operands or name in self.aliases.values():
                args[name] = _identity(shape[d], dt)
        args.update({a: args[n] for a, n in self.aliases.items() if n in args})
        return {n: x for n, x in args.items() if n in self.statement.operands}, shape, coords

    def _kernel(self, fmt):
        k = self._kernels.get(fmt)
        if k is None:
            k = self._kernels[fmt] = _kernel(self.statement, self.owner.options, fmt)
        return k

    # ---------------------------------------------------------------- the call
    def coordinates(self, ops: dict):
        """(coordinates over (result indices..., wrt axis), values, full shape), lexsorted."""
        dt = _dtype_check(self.owner.stmt, ops, self.owner.wrt, self.owner.source)
        out_shape = self._sizes(ops)
        w = ops[self.owner.wrt]
        if self.statement is None:
            n = entries(w)[1][0].size if self.masked else np.shape(w)[0]
            return tuple(np.zeros(0, np.int64) for _ in range(len(out_shape) + 1)), np.zeros(0, dt), \
                out_shape + (n,)
        args, wshape, coords = self._args(ops, dt)
        sparse = frozenset(n for n, x in args.items() if sp.issparse(x))
        if default_result_format(self.statement, sparse) == "dense":
            full = np.asarray(_in(np.asarray(self._kernel("dense")(**args)), dt))
            lead = full.reshape(out_shape + (-1,))
            if self.masked:               # the entries, in canonical order
                lead = lead[..., np.ravel_multi_index(coords, wshape)] if len(coords[0]) else \
                    np.zeros(out_shape + (0,), dt)
            return None, lead, lead.shape         # a full pattern: every entry, dense
        res = _in(self._kernel("coo")(**args), dt)
        res = sp.coo_array(res)
        cs = [np.asarray(c, np.int64) for c in res.coords]
        vals = np.asarray(res.data)
        nout = len(out_shape)
        if self.masked:
            lin = np.ravel_multi_index(tuple(cs[nout:]), wshape)
            keys = np.ravel_multi_index(coords, wshape)
            if _ascending(keys):           # row-major canonical order (CSR, COO)
                p = np.searchsorted(keys, lin)
            else:
                order = np.argsort(keys, kind="stable")
                p = order[np.searchsorted(keys[order], lin)]
            cs = cs[:nout] + [p.astype(np.int64)]
            n = len(keys)
        else:
            n = wshape[0]
        if _ascending(np.ravel_multi_index(tuple(cs), out_shape + (n,))):
            return tuple(cs), vals, out_shape + (n,)
        perm = np.lexsort(tuple(cs[::-1]))
        return tuple(c[perm] for c in cs), vals[perm], out_shape + (n,)

    def as_matrix(self, cs, vals, shape):
        """The coordinates as a CSR matrix: rows the result's indices (flattened row-major)."""
        rows = np.ravel_multi_index(cs[:-1], shape[:-1]) if len(shape) > 2 else cs[0]
        m = int(np.prod(shape[:-1]))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))]).astype(np.int64)
        return sp.csr_array((vals, cs[-1], indptr), shape=(m, shape[-1]))

    def run(self, ops: dict):
        cs, vals, shape = self.coordinates(ops)
        if cs is None:                          # dense: the result's indices, then the wrt axis
            return vals.reshape(-1, shape[-1]) if self.flatten else vals
        if len(shape) == 2 or self.flatten:
            return self.as_matrix(cs, vals, shape)
        return sp.coo_array((vals, cs), shape=shape)


def _ascending(keys) -> bool:
    return bool(keys.size < 2 or (keys[1:] > keys[:-1]).all())


def _accesses(stmt):
    from ..expr import accesses
    return accesses(stmt.expr)


def check_flatten(flatten) -> bool:
    if flatten not in (True, False):
        raise SparseccError(f"flatten must be True or False, got {flatten!r}")
    return flatten
