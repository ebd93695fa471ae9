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
from .entries import EntryCache
from .symbolic import DELTA, derivative, fresh_index, split_reads

MASK = "P_"


def _deltas(rank: int) -> tuple:
    return tuple(DELTA if d == 0 else f"Id{d}_" for d in range(rank))


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
        self._entries = EntryCache()   # the wrt patterns seen recently (entries.py)
        self._layouts: list = []       # their renumberings (Renumbering)

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
        ent = None
        if self.masked:
            ent = self._entries.get(w)
            args[MASK] = ent.mask(dt)
            shape = ent.shape
        else:
            shape = np.shape(w)
        for d, name in enumerate(_deltas(len(self.ks))):
            if name in self.statement.operands or name in self.aliases.values():
                args[name] = _identity(shape[d], dt)
        args.update({a: args[n] for a, n in self.aliases.items() if n in args})
        return {n: x for n, x in args.items() if n in self.statement.operands}, shape, ent

    def _kernel(self, fmt):
        k = self._kernels.get(fmt)
        if k is None:
            k = self._kernels[fmt] = _kernel(self.statement, self.owner.options, fmt)
        return k

    # ---------------------------------------------------------------- the call
    def coordinates(self, ops: dict):
        """(coordinates over (result indices..., wrt axis), values, full shape), lexsorted.
        The coordinates are shared with the renumbering cache: callers copy before handing
        them out."""
        dt = _dtype_check(self.owner.stmt, ops, self.owner.wrt, self.owner.source)
        out_shape = self._sizes(ops)
        w = ops[self.owner.wrt]
        if self.statement is None:
            n = self._entries.get(w, dt).size if self.masked else np.shape(w)[0]
            return tuple(np.zeros(0, np.int64) for _ in range(len(out_shape) + 1)), np.zeros(0, dt), \
                out_shape + (n,)
        args, wshape, ent = self._args(ops, dt)
        sparse = frozenset(n for n, x in args.items() if sp.issparse(x))
        if default_result_format(self.statement, sparse) == "dense":
            full = np.asarray(_in(np.asarray(self._kernel("dense")(**args)), dt))
            lead = full.reshape(out_shape + (-1,))
            if self.masked:               # the entries, in canonical order
                lead = lead[..., ent.keys] if ent.size else np.zeros(out_shape + (0,), dt)
            return None, lead, lead.shape         # a full pattern: every entry, dense
        res = _in(self._kernel("coo")(**args), dt)
        if not isinstance(res, sp.coo_array):
            res = sp.coo_array(res)
        lay = self._renumbered(res.coords, out_shape, wshape, ent)
        vals = np.asarray(res.data)
        return lay.coords, (vals if lay.perm is None else vals[lay.perm]), lay.shape

    def _renumbered(self, kcoords, out_shape, wshape, ent) -> "Renumbering":
        """The kernel's coordinates ``kcoords`` renumbered (the wrt's ``k...`` as entry
        positions ``p``) and sorted, from the cache when the kernel returned exactly these
        coordinates for this wrt pattern before (compared, never assumed: the cache keeps
        copies), else computed and kept."""
        for i, lay in enumerate(self._layouts):
            if lay.matches(kcoords, out_shape, ent):
                self._layouts.insert(0, self._layouts.pop(i))
                return lay
        lay = Renumbering(kcoords, out_shape, wshape, ent, self.masked)
        self._layouts.insert(0, lay)
        del self._layouts[CACHED:]
        return lay

    def run(self, ops: dict):
        cs, vals, shape = self.coordinates(ops)
        if cs is None:                          # dense: the result's indices, then the wrt axis
            return vals.reshape(-1, shape[-1]) if self.flatten else vals
        if len(shape) == 2 or self.flatten:
            lay = self._layouts[0] if self._layouts and self._layouts[0].coords is cs else None
            if lay is None:                     # the identically-zero derivative: no kernel ran
                lay = Renumbering.of(cs, shape)
            indptr, cols = lay.matrix()
            return sp.csr_array((vals, cols.copy(), indptr.copy()), shape=(len(indptr) - 1, shape[-1]))
        return sp.coo_array((vals, tuple(c.copy() for c in cs)), shape=shape)


#: renumberings kept per Jacobian (one per operand pattern seen recently)
CACHED = 4


class Renumbering:
    """How a derivative kernel's result coordinates become the Jacobian's: the wrt's
    coordinates ``k...`` as entry positions ``p``, sorted row-major (``perm``: the values'
    order, None when already sorted), and the CSR layout of the flattened matrix.  Depends
    only on the kernel's coordinates and the wrt's entries, which are kept as copies and
    compared on every use (a pattern mutated in place is a new pattern: docs/derivatives.md)."""

    def __init__(self, kcoords, out_shape, wshape, ent, masked):
        self.kcoords = tuple(np.array(c, copy=True) for c in kcoords)
        self.out_shape, self.ent = out_shape, ent
        cs = [np.asarray(c, np.int64) for c in kcoords]
        nout = len(out_shape)
        if masked:
            lin = np.ravel_multi_index(tuple(cs[nout:]), wshape)
            keys = ent.keys
            if ent.ascending:             # row-major canonical order (CSR, COO)
                p = np.searchsorted(keys, lin)
            else:
                p = ent.order[np.searchsorted(keys[ent.order], lin)]
            cs = cs[:nout] + [p.astype(np.int64)]
            n = ent.size
        else:
            n = wshape[0]
        self.shape = out_shape + (n,)
        self.perm = None
        if not _ascending(np.ravel_multi_index(tuple(cs), self.shape)):
            self.perm = np.lexsort(tuple(cs[::-1]))
            cs = [c[self.perm] for c in cs]
        self.coords = tuple(cs)
        self._matrix = None

    @classmethod
    def of(cls, cs, shape):
        lay = cls.__new__(cls)
        lay.coords, lay.shape, lay._matrix, lay.perm = cs, shape, None, None
        return lay

    def matches(self, kcoords, out_shape, ent) -> bool:
        return (out_shape == self.out_shape and (ent is self.ent or (ent is not None and self.ent is not None
                                                                     and ent.same(self.ent)))
                and len(kcoords) == len(self.kcoords)
                and all(np.array_equal(a, b) for a, b in zip(kcoords, self.kcoords)))

    def matrix(self):
        """(indptr, columns) of the Jacobian as a matrix over the result's flattened indices."""
        if self._matrix is None:
            cs, shape = self.coords, self.shape
            rows = np.ravel_multi_index(cs[:-1], shape[:-1]) if len(shape) > 2 else cs[0]
            m = int(np.prod(shape[:-1]))
            indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))]).astype(np.int64)
            self._matrix = indptr, cs[-1]
        return self._matrix


def _ascending(keys) -> bool:
    return bool(keys.size < 2 or (keys[1:] > keys[:-1]).all())


def _accesses(stmt):
    from ..expr import accesses
    return accesses(stmt.expr)


def check_flatten(flatten) -> bool:
    if flatten not in (True, False):
        raise SparseccError(f"flatten must be True or False, got {flatten!r}")
    return flatten
