"""Lazy operations that move entries rather than compute them - ``astype``, basic slicing,
``reshape`` - and ``argmax``/``argmin`` (docs/lazy.md, Structure).

A slice or a reshape is a contraction with 0/1 *selection* operands: ``x[1::2]`` is
``sum[k](S[i,k] * x[k,j])`` where ``S`` (a CSR ``bool`` array, one entry per row) picks
row ``1 + 2 i``; ``x.reshape(m)`` is ``sum[i,j](R0[f,i] * R1[f,j] * x[i,j])`` where ``R0`` and
``R1`` pick the digits of the flat position ``f``.  The selection arrays are operands (built
from the shapes, never from values); the compiled kernel moves the values, so a sparse
operand stays sparse and a slice of a lazy intermediate fuses into the statement that
reads it.  ``bool`` selections keep every dtype as it is (NumPy's promotion).
"""

from __future__ import annotations

import builtins
import operator

import numpy as np
import scipy.sparse as sp

from .. import dtypes as _dtypes
from ..errors import DTypeError, ShapeError, SparseccError
from .core import LazyArray, _axes, _binary, _contract, _monoid, _where_called, expand_dims, lazy, squeeze, where


# ----------------------------------------------------------------------- astype
def astype(x, dtype, copy=True) -> LazyArray:
    """``x.astype(dtype)``: NumPy's conversion (floats to integers truncate toward zero; to
    ``bool`` is ``!= 0``), computed in the kernel that reads it; it maps 0 to 0, so a sparse
    operand keeps its pattern.  ``copy`` is accepted for NumPy's signature (a lazy value is
    never shared)."""
    x = lazy(x)
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise DTypeError(f"{_where_called()}: astype: {dtype!r} is not a NumPy dtype") from None
    if name not in _dtypes.TABLE:
        raise DTypeError(f"{_where_called()}: astype: sparsecc computes in {', '.join(_dtypes.SUPPORTED)}, "
                         f"not {name}")
    if name == x.dtype.name:
        return x
    if x.dtype.kind == "c" and np.dtype(name).kind != "c":
        raise DTypeError(f"{_where_called()}: astype: {x.dtype} to {name} would discard the imaginary part; "
                         f"take sc.lazy.real/abs first")
    return LazyArray("unary", f"astype_{name}", (x,), x.shape, name, x.sparse)


# ---------------------------------------------------------------------- selections
def _selection(rows: np.ndarray, n: int) -> sp.csr_array:
    """A ``len(rows) x n`` CSR bool array with one entry per row, at column ``rows[r]``."""
    m = len(rows)
    return sp.csr_array((np.ones(m, bool), rows.astype(np.int64), np.arange(m + 1, dtype=np.int64)), shape=(m, n))


def _selection_leaf(rows: np.ndarray, n: int) -> LazyArray:
    """The selection as a leaf marked ``op="select"``: the lowering inlines a chain it reads
    (one entry per row: the chain is computed once per selected entry)."""
    leaf = lazy(_selection(rows, n))
    leaf.op = "select"
    return leaf


def _select(x: LazyArray, picks: dict, what: str) -> LazyArray:
    """``x`` with axis ``a`` read at ``picks[a]`` (an index array; one output axis each)."""
    if not picks:
        return x
    labels = [f"p{a}" for a in range(x.ndim)]
    out = list(labels)
    terms, kids = [], []
    for a, rows in picks.items():
        out[a] = f"q{a}"
        terms.append((out[a], labels[a]))
        kids.append(_selection_leaf(rows, x.shape[a]))
    node = _contract(terms + [tuple(labels)], tuple(out), kids + [x], what)
    node.sparse = x.sparse              # selections do not make a dense value sparse
    return node


def getitem(x: LazyArray, key) -> LazyArray:
    """Basic indexing: integers, slices (any step), ``...`` and ``None``; other keys (arrays,
    masks) are refused."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or
                isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))):
            raise SparseccError(f"{_where_called(3)}: lazy arrays take basic indexing (integers, slices, ..., "
                                f"None), not {type(k).__name__}")
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise ShapeError(f"{_where_called(3)}: an index can only have a single ellipsis ('...')")
    used = builtins.sum(k is not None and k is not Ellipsis for k in key)
    if used > x.ndim:
        raise ShapeError(f"{_where_called(3)}: too many indices for a lazy array of shape {x.shape}: {used}")
    if builtins.any(k is Ellipsis for k in key):
        at = [k is Ellipsis for k in key].index(True)
        key = key[:at] + (slice(None),) * (x.ndim - used) + key[at + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - used)
    picks, drop, new, axis, pos = {}, [], [], 0, 0
    for k in key:
        if k is None:
            new.append(pos)
            pos += 1
            continue
        n = x.shape[axis]
        if isinstance(k, slice):
            rows = np.arange(n)[k]
            if len(rows) != n or (n and (rows != np.arange(n)).any()):
                picks[axis] = rows
            pos += 1
        else:
            i = operator.index(k)
            if not -n <= i < n:
                raise ShapeError(f"{_where_called(3)}: index {i} is out of bounds for axis {axis} with size {n}")
            picks[axis] = np.array([i % n])
            drop.append(axis)
        axis += 1
    out = _select(x, picks, "indexing")
    if drop:
        out = squeeze(out, axis=tuple(drop))
    for p in new:
        out = expand_dims(out, p)
    return out


def _digits(size: int, shape: tuple) -> list:
    """For each axis of ``shape``: the digit of every flat position 0..size-1 (C order)."""
    flat = np.arange(size, dtype=np.int64)
    return [idx for idx in np.unravel_index(flat, shape)] if shape else []


def reshape(x, shape, copy=None) -> LazyArray:
    """``numpy.reshape(x, shape)`` in C order (one ``-1`` allowed).  Inserting or removing
    size-1 axes is ``expand_dims``/``squeeze``; any other reshape reads ``x`` through
    selection operands of the flat position (module docstring)."""
    x = lazy(x)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if builtins.sum(s == -1 for s in shape) > 1 or builtins.any(s < -1 for s in shape):
        raise ShapeError(f"{_where_called()}: reshape: {shape} is no shape (one -1 at most)")
    if -1 in shape:
        rest = int(np.prod([s for s in shape if s != -1]))
        if rest == 0 or x.size % rest:
            raise ShapeError(f"{_where_called()}: cannot reshape a lazy array of size {x.size} into shape {shape}")
        shape = tuple(x.size // rest if s == -1 else s for s in shape)
    if int(np.prod(shape)) != x.size:
        raise ShapeError(f"{_where_called()}: cannot reshape a lazy array of size {x.size} into shape {shape}")
    if shape == x.shape:
        return x
    if tuple(s for s in shape if s != 1) == tuple(s for s in x.shape if s != 1):
        out = squeeze(x) if 1 in x.shape else x      # only size-1 axes move
        for a, s in enumerate(shape):
            if s == 1:
                out = expand_dims(out, a)
        return out
    size = x.size
    labels_in = [f"p{a}" for a in range(x.ndim)]
    labels_out = [f"q{b}" for b in range(len(shape))]
    terms, kids = [], []
    if x.ndim == 1:
        labels_in = ["f"]                            # the flat position is x's own index
    else:
        for a, d in enumerate(_digits(size, x.shape)):
            terms.append(("f", labels_in[a]))
            kids.append(_selection_leaf(d, x.shape[a]))
    if len(shape) == 1:
        labels_out = ["f"]
    else:
        for b, d in enumerate(_digits(size, shape)):
            terms.append(("f", labels_out[b]))
            kids.append(_selection_leaf(d, shape[b]))
    node = _contract(terms + [tuple(labels_in)], tuple(labels_out), kids + [x], "reshape")
    node.sparse = x.sparse
    return node


# ------------------------------------------------------------------ argmax, argmin
def _arg(op: str, x, axis, keepdims) -> LazyArray:
    """The first position of the maximum (minimum) along ``axis`` - NumPy's rule: unstored
    entries are zeros, a ``nan`` wins - as the minimum position where the entry equals the
    reduction's value (two statements: the max, then the positions)."""
    x = lazy(x)
    if x.ndim == 0:
        raise ShapeError(f"{_where_called(3)}: arg{op} of a 0-d lazy array (its position is 0)")
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise ShapeError(f"{_where_called(3)}: arg{op} takes one axis or None, got {axis!r}")
    axes = _axes(x, axis)
    if builtins.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"{_where_called(3)}: arg{op} of an empty axis (NumPy refuses it too)")
    if x.dtype.kind == "c":
        raise DTypeError(f"{_where_called(3)}: arg{op} of complex values is not supported")
    best = _monoid(op, x, axis, True)
    hit = _binary("==", x, best)
    if x.dtype.kind == "f":
        hit = _binary("or", hit, _binary("!=", x, x))      # nan: the first nan
    if axis is None:
        strides = np.cumprod((1,) + x.shape[:0:-1])[::-1]
        pos = None
        for a, s in enumerate(strides):
            term = LazyArray("index", a, (), x.shape, np.int64)
            term = term if s == 1 else _binary("*", term, int(s))
            pos = term if pos is None else _binary("+", pos, term)
    else:
        pos = LazyArray("index", axes[0], (), x.shape, np.int64)
    big = int(x.size)
    return _monoid("min", where(hit, pos, big), axis, keepdims)


def argmax(x, axis=None, keepdims=False) -> LazyArray:
    """``numpy.argmax(x, axis=, keepdims=)``: int64 positions (flat ones for ``axis=None``)."""
    return _arg("max", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False) -> LazyArray:
    """``numpy.argmin(x, axis=, keepdims=)``: int64 positions (flat ones for ``axis=None``)."""
    return _arg("min", x, axis, keepdims)


