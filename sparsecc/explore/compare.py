"""Comparing two results (dense or sparse) within a dtype-aware tolerance."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

#: results with at most this many elements are compared densely, larger sparse ones by entries
DENSE_COMPARE_LIMIT = 1 << 22


def _tolerance(dtype: np.dtype) -> float | None:
    """Relative tolerance for results of ``dtype`` (``None``: exact)."""
    if dtype.kind in "biu":
        return None
    return 1e-4 if dtype in (np.float32, np.complex64) or dtype.itemsize <= 4 else 1e-9


def _close(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> str | None:
    rtol = _tolerance(dtype)
    if rtol is None:
        if np.array_equal(got, want):
            return None
        bad = int(np.count_nonzero(got != want))
        return f"{bad} of {got.size} values differ"
    g, w = np.asarray(got), np.asarray(want)
    finite = np.abs(w[np.isfinite(w)])
    scale = float(finite.max()) if finite.size else 0.0
    # candidates sum in different orders: errors scale with the largest value, not each entry
    atol = rtol * scale if scale else np.finfo(np.float64).tiny
    if np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        return None
    with np.errstate(invalid="ignore"):
        d = np.abs(g - w)
    nan_mismatch = int(np.count_nonzero(np.isnan(g) != np.isnan(w)))
    worst = float(np.nanmax(d)) if d.size and not np.all(np.isnan(d)) else float("nan")
    return (f"values differ: max |difference| {worst:.3g} (tolerance {atol + rtol * scale:.3g})"
            + (f", {nan_mismatch} NaN positions differ" if nan_mismatch else ""))


def _entries(x, shape) -> tuple[np.ndarray, np.ndarray]:
    """A sparse result's entries as (sorted unique linear indices, summed values)."""
    c = x.tocoo()
    coords = [np.asarray(k, dtype=np.int64) for k in c.coords]
    lin = np.ravel_multi_index(coords, shape) if c.nnz else np.zeros(0, np.int64)
    keys, inv = np.unique(lin, return_inverse=True)
    vals = np.zeros(keys.size, dtype=c.data.dtype)
    np.add.at(vals, inv.reshape(-1), c.data)
    return keys, vals


def compare(got, want) -> str | None:
    """``None`` if result ``got`` matches ``want`` (shape, dtype, values within a dtype-aware
    tolerance: exact for integers and bool, 1e-4 for 32-bit floats and 1e-9 for 64-bit, both
    relative to the largest value, NaN equal to NaN), else why not.  Sparse results are
    compared densely when small, else entry by entry (an absent entry counts as zero)."""
    gs, ws = sp.issparse(got), sp.issparse(want)
    g_shape = tuple(got.shape) if (gs or hasattr(got, "shape")) else ()
    w_shape = tuple(want.shape) if (ws or hasattr(want, "shape")) else ()
    if g_shape != w_shape:
        return f"shape {g_shape} differs from {w_shape}"
    g_dt, w_dt = np.dtype(got.dtype if hasattr(got, "dtype") else type(got)), \
        np.dtype(want.dtype if hasattr(want, "dtype") else type(want))
    if g_dt != w_dt:
        return f"dtype {g_dt} differs from {w_dt}"
    size = math.prod(g_shape)
    if not (gs or ws) or size <= DENSE_COMPARE_LIMIT:
        g = got.toarray() if gs else np.asarray(got)
        w = want.toarray() if ws else np.asarray(want)
        return _close(g.reshape(-1), w.reshape(-1), w_dt)
    if not (gs and ws):
        # one dense and one sparse large result: compare the dense one's entries
        dense, sparse_ = (np.asarray(got), want) if ws else (np.asarray(want), got)
        nz = np.flatnonzero(dense)
        dense = sp.coo_array((dense.reshape(-1)[nz], np.unravel_index(nz, g_shape)), shape=g_shape)
        got, want = (dense, sparse_) if ws else (sparse_, dense)
    gk, gv = _entries(got, g_shape)
    wk, wv = _entries(want, w_shape)
    keys = np.union1d(gk, wk)
    G = np.zeros(keys.size, dtype=g_dt)
    W = np.zeros(keys.size, dtype=w_dt)
    G[np.searchsorted(keys, gk)] = gv
    W[np.searchsorted(keys, wk)] = wv
    return _close(G, W, w_dt)

