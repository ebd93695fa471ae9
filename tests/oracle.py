"""A brute-force NumPy evaluator of sparsecc's expression IR, for tests only.

Every node is evaluated on the full grid of index values (one axis per index), with a
"stored" mask next to the values, so the GraphBLAS rules of ``stored(...)`` and monoid
reductions (``min[j]``, ``max[j]``, ...) can be checked independently of the compiler.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsecc.expr import (BINARY, MONOIDS, UNARY, Access, Binary, Const, Dense, Index, Reduce, Statement,
                           Stored, Unary, Where)


def dense_and_mask(x):
    """(values, stored mask) of an operand: sparse -> its stored entries; dense -> all."""
    if sp.issparse(x):
        coo = sp.coo_array(x)
        coo.sum_duplicates()
        mask = np.zeros(coo.shape, bool)
        mask[tuple(coo.coords)] = True
        return coo.toarray(), mask
    x = np.asarray(x)
    return x, np.ones(x.shape, bool)


def identity(op: str, dtype):
    dtype = np.dtype(dtype)
    ident = MONOIDS[op][1]
    if ident in ("+inf", "-inf"):
        if dtype.kind == "f":
            return np.inf if ident == "+inf" else -np.inf
        if dtype.kind == "b":
            return ident == "+inf"
        info = np.iinfo(dtype)
        return info.max if ident == "+inf" else info.min
    return ident


def evaluate(stmt: Statement, operands: dict, sparse: set):
    """Values of ``stmt`` on the grid of its output indices, and which entries a sparse
    result stores under the GraphBLAS rules (None: every entry)."""
    order: list[str] = []

    def note(i):
        if i not in order:
            order.append(i)
    for i in stmt.indices:
        note(i)

    def collect(e):
        if isinstance(e, Access):
            for i in e.indices:
                note(i)
        elif isinstance(e, Index):
            note(e.name)
        for c in _kids(e):
            collect(c)
    collect(stmt.expr)
    sizes = {}
    for name, x in operands.items():
        pass
    data = {n: dense_and_mask(x) for n, x in operands.items()}

    def find_sizes(e):
        if isinstance(e, Access):
            for i, n in zip(e.indices, np.shape(data[e.tensor][0])):
                sizes[i] = n
        for c in _kids(e):
            find_sizes(c)
    find_sizes(stmt.expr)
    nd = len(order)
    letters = "abcdefghijklmnopqrstuvwxyz"
    L = {i: letters[k] for k, i in enumerate(order)}

    def grid(arr, idx):
        """``arr`` indexed by ``idx``, broadcast onto the grid."""
        sub = "".join(L[i] for i in idx)
        uniq = "".join(dict.fromkeys(sub))
        out = np.einsum(f"{sub}->{uniq}", arr) if sub else np.asarray(arr)
        axes = sorted(uniq, key=lambda c: letters.index(c))
        out = np.einsum(f"{uniq}->{''.join(axes)}", out) if uniq else out
        shape = [sizes[i] if L[i] in uniq else 1 for i in order]
        return np.reshape(out, shape)

    def ev(e, stored_mode, root=False):
        """(values, mask) where mask marks entries every sparse operand read stores."""
        if isinstance(e, Const):
            return np.asarray(e.value), np.ones([1] * nd, bool)
        if isinstance(e, Index):
            shape = [1] * nd
            shape[order.index(e.name)] = sizes[e.name]
            return np.arange(sizes[e.name], dtype=np.int64).reshape(shape), np.ones([1] * nd, bool)
        if isinstance(e, Access):
            v, m = data[e.tensor]
            if e.tensor not in sparse:
                m = np.ones_like(m)
            if len(set(e.indices)) != len(e.indices):
                m = np.ones_like(m)          # a diagonal counts as dense
                m = np.ones(grid(v, e.indices).shape, bool)
                return grid(v, e.indices), m
            return grid(v, e.indices), grid(m, e.indices)
        if isinstance(e, Stored):
            return ev(e.body, True)
        if isinstance(e, Dense):
            v, _ = ev(e.body, False)
            return v, np.ones([1] * nd, bool)
        if isinstance(e, Unary):
            v, m = ev(e.arg, stored_mode)
            with np.errstate(all="ignore"):
                return UNARY[e.fn](v), m
        if isinstance(e, Binary):
            a, ma = ev(e.left, stored_mode)
            b, mb = ev(e.right, stored_mode)
            with np.errstate(all="ignore"):
                return BINARY[e.op](a, b), ma & mb
        if isinstance(e, Where):
            c, mc = ev(e.cond, stored_mode)
            a, ma = ev(e.left, stored_mode)
            b, mb = ev(e.right, stored_mode)
            return np.where(c, a, b), mc & ma & mb
        assert isinstance(e, Reduce)
        axes = tuple(order.index(i) for i in e.indices)
        if e.op == "sum":
            v, m = ev(e.body, False)
            v = np.broadcast_to(v, np.broadcast_shapes(v.shape, m.shape, tuple(sizes[i] if k in axes else 1 for k, i in enumerate(order))))
            return v.sum(axis=axes, keepdims=True), np.ones([1] * nd, bool)
        v, m = ev(e.body, True)
        full = np.broadcast_shapes(v.shape, m.shape, tuple(sizes[i] if k in axes else 1 for k, i in enumerate(order)))
        v, m = np.broadcast_to(v, full), np.broadcast_to(m, full)
        fn = MONOIDS[e.op][0]
        dtype = np.bool_ if e.op in ("lor", "land", "lxor") else v.dtype
        ident = identity(e.op, dtype)
        vals = np.where(m, v.astype(dtype), ident)
        red = fn.reduce(vals, axis=axes, keepdims=True)
        present = m.any(axis=axes, keepdims=True)
        # below the root a reduction is a dense temporary: every entry counts as stored
        return red, present if root else np.ones_like(present)

    v, m = ev(stmt.expr, False, True)
    out_shape = [sizes[i] for i in stmt.indices]
    full = [sizes[i] if i in stmt.indices else 1 for i in order]
    v = np.broadcast_to(v, np.broadcast_shapes(v.shape, tuple(full)))
    m = np.broadcast_to(m, np.broadcast_shapes(m.shape, tuple(full)))
    keep = tuple(k for k, i in enumerate(order) if i not in stmt.indices)
    v = v.reshape([s for k, s in enumerate(v.shape) if k not in keep]) if keep else v
    m = m.reshape([s for k, s in enumerate(m.shape) if k not in keep]) if keep else m
    return np.asarray(v).reshape(out_shape), np.asarray(m).reshape(out_shape)


def _kids(e):
    if isinstance(e, Unary):
        return (e.arg,)
    if isinstance(e, Binary):
        return (e.left, e.right)
    if isinstance(e, Where):
        return (e.cond, e.left, e.right)
    if isinstance(e, (Reduce, Stored, Dense)):
        return (e.body,)
    return ()
