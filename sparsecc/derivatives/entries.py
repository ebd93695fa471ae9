"""The stored entries of a ``wrt`` operand, the variables of a derivative with respect to its
stored values (docs/derivatives.md): their coordinates in canonical order (CSR and COO
row-major, CSC column-major, a dense array row-major) and the mask operand ``P_`` storing
ones on them.  Only coordinates move here; no value is computed.

``EntryCache`` keeps the entries of the patterns seen recently, each with copies of the
operand's index arrays: a later operand is served from the cache only when its index
arrays equal those copies (compared, O(nnz) memcmp-like work), so a pattern mutated in place
is a new pattern, never a stale layout.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import OperandError

#: patterns kept per derivative
CACHED = 4


class Entries:
    """``shape``; ``coords`` (one int64 array per dimension, canonical order); ``keys``
    (their row-major linear positions); ``ascending`` (keys sorted: CSR/COO/dense) and
    ``order`` (argsort of keys, when not); ``mask(dtype)``: ones on the entries."""

    def __init__(self, w, signature):
        self.signature = signature
        self.shape, self.coords, self._mask = _entries(w)
        self.size = int(self.coords[0].size) if self.coords else 1
        _check_index_range(self.shape)
        self.keys = np.ravel_multi_index(self.coords, self.shape) if self.coords and self.size else \
            np.zeros(0, np.int64)
        self.ascending = bool(self.keys.size < 2 or (self.keys[1:] > self.keys[:-1]).all())
        self.order = None if self.ascending else np.argsort(self.keys, kind="stable")
        self._masks: dict = {}

    def mask(self, dtype):
        dtype = np.dtype(dtype)
        m = self._masks.get(dtype)
        if m is None:
            m = self._masks[dtype] = self._mask.astype(dtype)
        return m

    def carrying(self, values: np.ndarray):
        """An operand storing ``values`` (one per entry, canonical order) on these entries:
        the values move into the mask's layout, none is computed."""
        m = self._mask
        if not sp.issparse(m):
            return np.ascontiguousarray(values).reshape(self.shape)
        if m.format == "coo":
            return sp.coo_array((values, m.coords), shape=m.shape)
        return type(m)((values, m.indices, m.indptr), shape=m.shape)

    def same(self, other: "Entries") -> bool:
        return other is self or (self.shape == other.shape and np.array_equal(self.keys, other.keys))

    def matches(self, signature) -> bool:
        a, b = self.signature, signature
        return a is not None and b is not None and a[:2] == b[:2] and len(a[2]) == len(b[2]) and \
            all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a[2], b[2]))


def signature(w):
    """(format, shape, index arrays) of a CSR/CSC/COO operand, a dense array's shape; None
    for other formats (their entries are computed on every call)."""
    if not sp.issparse(w):
        return ("dense", tuple(np.shape(w)), ())
    if w.format in ("csr", "csc"):
        return (w.format + ("c" if w.has_canonical_format else ""), w.shape, (w.indptr, w.indices))
    if w.format == "coo":
        return ("coo" + ("c" if w.has_canonical_format else ""), w.shape, tuple(w.coords))
    return None


class EntryCache:
    def __init__(self):
        self._kept: list[Entries] = []

    def get(self, w, dtype=None) -> Entries:
        sig = signature(w)
        for e in self._kept:
            if e.matches(sig):
                return e
        kept = None if sig is None else (sig[0], sig[1], tuple(np.array(a, copy=True) for a in sig[2]))
        e = Entries(w, kept)
        if kept is not None:
            self._kept.insert(0, e)
            del self._kept[CACHED:]
        return e


def _check_index_range(shape):
    total = 1
    for n in shape:
        total *= int(n)
    if total > np.iinfo(np.int64).max:
        raise OperandError(f"an operand of shape {tuple(shape)} has more entries than int64 positions "
                           f"can number; derivatives with respect to its stored values need fewer")


def _entries(w):
    """(shape, coordinates of each stored entry in canonical order, the mask operand)."""
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
        mask = type(c)((np.ones(len(minor)), c.indices.copy(), c.indptr.copy()), shape=c.shape)
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
