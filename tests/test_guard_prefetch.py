"""The guard's block scan prefetches the block's values (passes/guards.py ``_streams``/``_scan``):
the prefetch loop is in the code of a guarded CSR SpMV, and the kernel gives SciPy's results whatever a block looks like (empty, one entry, a row longer than a
block, entry counts that are not a multiple of a cache line, 1 and 2 threads, value dtypes of 4,
8 and 16 bytes, int32 and int64 indices).  No timing assertions."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.passes import guards


def _csr(m, n, lengths, dtype, index, seed):
    """An m x n CSR whose row i holds ``lengths[i]`` distinct random columns, as users build it
    (``sp.csr_array((data, (rows, cols)))``), then with ``index`` indices."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(m), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths]) if len(rows) else np.zeros(0, int)
    vals = rng.uniform(0.5, 1.5, rows.size)
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.uniform(-1, 1, rows.size)
    A = sp.csr_array((vals.astype(dtype), (rows.astype(np.int64), cols.astype(np.int64))), shape=(m, n))
    A.indices = A.indices.astype(index)
    A.indptr = A.indptr.astype(index)
    return A


def _lengths(kind, m, n, rng):
    if kind == "empty":
        return np.zeros(m, int)
    if kind == "single":
        out = np.zeros(m, int)
        out[m // 2] = 1
        return out
    if kind == "long row":                    # a row longer than a block: a block of its own
        out = rng.integers(0, 4, m)
        out[3] = min(n, guards.COST + 37)
        return out
    return rng.integers(0, 12, m)             # ragged: block ends off the cache lines


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int64])
@pytest.mark.parametrize("kind", ["empty", "single", "long row", "ragged"])
def test_prefetching_guarded_spmv_matches_scipy(kind, dtype, index, threads):
    from sparsecc.runtime import threads as th
    rng = np.random.default_rng(7)
    m, n = 3000, guards.COST + 100
    A = _csr(m, n, _lengths(kind, m, n, rng), dtype, index, seed=11)
    x = (rng.uniform(-1, 1, n) * 4).astype(dtype)
    was, least = sc.get_num_threads(), th.get_min_parallel_work()
    try:
        sc.set_num_threads(threads)
        th.set_min_parallel_work(0)           # parallel (many blocks) even for these sizes
        k = sc.compile("ij,j->i", "csr", "dense", check=True)
        got = k(A, x)
        ref = A.toarray() @ x
        if np.dtype(dtype).kind in "iu":
            np.testing.assert_array_equal(got, ref)
        else:
            eps = 1e-5 if dtype == np.float32 else 1e-13      # per unit of sum |a_ij| |x_j|
            bound = eps * (abs(A).toarray().astype(np.float64) @ np.abs(x).astype(np.float64)) + 1e-30
            assert np.all(np.abs(got - ref) <= bound), np.max(np.abs(got - ref) / bound)
        assert got.dtype == np.dtype(dtype)
    finally:
        sc.set_num_threads(was)
        th.set_min_parallel_work(least)


def test_the_scan_prefetches_the_values_of_a_guarded_spmv():
    """The code itself: a loop of prefetches (one per 64-byte line of the values) before the
    block's max scan, and the coordinates still checked (the kernel reports them guarded)."""
    A = _csr(500, 400, np.full(500, 5), np.float64, np.int32, seed=1)
    k = sc.compile("ij,j->i", "csr", "dense", check=True)
    k(A, np.ones(400))
    assert k._last.guarded, "the CSR SpMV's indices are no longer guarded"
    llvm = k.ir("llvm")
    assert "llvm.prefetch" in llvm, "no prefetch in the guarded SpMV's code"

