"""Seeded input generators: uniform rows, 2-D/3-D Poisson, R-MAT, 3-D COO tensors (int32
indices, as sparsecc reads them without copies), and :func:`user_built`: the same inputs as
users build them (int64 indices)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def uniform_rows(m: int, n: int, per_row: int, rng, dtype=np.float64) -> sp.csr_array:
    """``per_row`` uniformly random columns in each row (duplicates merged): gather-bound."""
    indptr = np.arange(0, m * per_row + 1, per_row, dtype=np.int64)
    cols = rng.integers(0, n, size=m * per_row)
    A = sp.csr_array((rng.random(m * per_row).astype(dtype), cols, indptr), shape=(m, n))
    A.sum_duplicates()
    return _int32(A)


def poisson2d(n: int) -> sp.csr_array:
    """The 5-point Laplacian on an n x n grid (n^2 rows): regular, bandwidth-bound."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    eye = sp.eye_array(n)
    return _int32((sp.kron(t, eye) + sp.kron(eye, t)).tocsr())


def poisson3d(n: int) -> sp.csr_array:
    """The 7-point Laplacian on an n x n x n grid (n^3 rows)."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    eye = sp.eye_array(n)
    A = sp.kron(sp.kron(t, eye), eye) + sp.kron(sp.kron(eye, t), eye) + sp.kron(sp.kron(eye, eye), t)
    return _int32(A.tocsr())


def rmat(scale: int, edge_factor: int, rng, probs=(0.57, 0.19, 0.19, 0.05)) -> sp.csr_array:
    """An R-MAT (Graph500 parameters) power-law matrix with 2^scale rows and about
    ``edge_factor`` entries per row before duplicates merge: skewed rows, load imbalance."""
    n, m = 1 << scale, edge_factor << scale
    rows = np.zeros(m, np.int64)
    cols = np.zeros(m, np.int64)
    cum = np.cumsum(probs)
    for bit in range(scale):
        q = np.searchsorted(cum, rng.random(m) * cum[-1], side="right")
        rows |= (q >> 1) << bit
        cols |= (q & 1) << bit
    perm = rng.permutation(n)                  # break the locality of low vertex ids
    A = sp.coo_array((rng.random(m), (perm[rows], perm[cols])), shape=(n, n)).tocsr()
    A.sum_duplicates()
    return _int32(A)


def coo3(d: int, nnz: int, rng, index32: bool = True) -> sp.coo_array:
    """A d x d x d COO tensor with ``nnz`` distinct uniformly random entries (canonical order)."""
    flat = np.sort(rng.choice(d ** 3, size=nnz, replace=False))
    T = sp.coo_array((rng.random(nnz), np.unravel_index(flat, (d, d, d))), shape=(d, d, d))
    if index32:     # the kernel's own width: no per-call copy (SciPy makes N-d coordinates int64)
        T.coords = tuple(c.astype(np.int32) for c in T.coords)
    T.has_canonical_format = True           # sorted and distinct by construction
    return T


def _int32(A: sp.csr_array) -> sp.csr_array:
    A = sp.csr_array(A)
    A.indices = A.indices.astype(np.int32, copy=False)
    A.indptr = A.indptr.astype(np.int32, copy=False)
    return A


def user_built(A):
    """``A`` rebuilt the way users build sparse arrays: ``sp.csr_array((data, (rows, cols)))``
    for a matrix, ``sp.coo_array((data, coords))`` for a tensor, from int64 coordinates (what
    ``np.nonzero``, ``np.unravel_index`` and ``np.arange`` give).  SciPy then keeps int64
    indices, and flags the COO array as not canonical (it was built from coordinates)."""
    if A.format == "coo":
        return sp.coo_array((A.data.copy(), tuple(c.astype(np.int64) for c in A.coords)), shape=A.shape)
    c = A.tocoo()
    return sp.csr_array((c.data, (c.row.astype(np.int64), c.col.astype(np.int64))), shape=A.shape)
