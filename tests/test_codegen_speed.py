"""Options.reassociate (issue 14): the sum of an inner loop over stored entries may be
reordered by LLVM (``fastmath<reassoc>`` on that add only).  Results match written-out
oracles (numpy.einsum on dense copies, SciPy) within a tolerance, and stay bitwise equal on
1 and 2 threads; the default keeps the left-to-right order."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.errors import SparseccError
from sparsecc.runtime import threads

SEED = 1414
#: rows long enough that LLVM's vectorized (partial sums) loop runs, plus short ones
M, N = 1200, 700


@pytest.fixture(autouse=True)
def _restore_threads():
    n, w = sc.get_num_threads(), threads.get_min_parallel_work()
    threads.set_min_parallel_work(0)        # small inputs: really run 2 threads
    yield
    sc.set_num_threads(n)
    threads.set_min_parallel_work(w)


def _matrix(rng, dtype, fmt):
    lens = rng.integers(0, 90, size=M)       # 0 .. 89 entries a row: scalar and vector paths
    lens[[5, 6, 700]] = 0                    # empty rows
    rows = np.repeat(np.arange(M), lens)
    cols = rng.integers(0, N, size=rows.size)
    vals = (rng.standard_normal(rows.size) * 10.0 ** rng.integers(-3, 4, size=rows.size)).astype(dtype)
    A = sp.coo_array((vals, (rows, cols)), shape=(M, N)).tocsr()
    A.sum_duplicates()
    return getattr(A, "to" + fmt)() if fmt in ("csc", "coo") else A


def _tol(dtype):
    return (1e-4, 1e-4) if np.dtype(dtype) == np.float32 else (1e-11, 1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_spmv_reassociated_matches_oracle_and_threads(fmt, dtype):
    rng = np.random.default_rng(SEED)
    A = _matrix(rng, dtype, fmt if fmt != "dcsr" else "csr")
    x = rng.standard_normal(N).astype(dtype)
    keep = (A.copy(), x.copy())
    k = sc.compile("ij,j->i", fmt, "dense", options=sc.Options(reassociate=True))
    ref = np.einsum("ij,j->i", A.toarray().astype(np.float64), x.astype(np.float64))
    sc.set_num_threads(1)
    y1 = k(A, x)
    sc.set_num_threads(2)
    y2 = k(A, x)
    rtol, atol = _tol(dtype)
    np.testing.assert_allclose(y1, ref, rtol=rtol, atol=atol * np.abs(ref).max())
    assert y1.dtype == np.dtype(dtype)
    assert np.array_equal(y1, y2), "1 and 2 threads must give the same bits"
    assert (A != keep[0]).nnz == 0 and np.array_equal(x, keep[1])       # inputs untouched


def test_reassociate_marks_only_the_inner_sum():
    k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(reassociate=True))
    A = _matrix(np.random.default_rng(SEED), np.float64, "csr")
    k(A, np.ones(N))
    text = k.ir("sparsified")
    assert text.count("fastmath<reassoc>") == 1
    assert "arith.mulf" in text and "mulf %" in text and "fastmath<reassoc> : f64" in text
    plain = sc.compile("ij,j->i", "csr", "dense")
    plain(A, np.ones(N))
    assert "fastmath" not in plain.ir("sparsified")
    assert "reassoc" not in plain.ir("llvm")


def test_default_keeps_scipy_order_bitwise():
    # the default is unchanged: a CSR SpMV adds left to right, as SciPy does
    rng = np.random.default_rng(SEED)
    A = _matrix(rng, np.float64, "csr")
    x = rng.standard_normal(N)
    assert np.array_equal(sc.einsum("ij,j->i", A, x), A @ x)


@pytest.mark.parametrize("case", ["empty", "single", "one-row"])
def test_reassociated_edge_cases(case):
    rng = np.random.default_rng(SEED)
    if case == "empty":
        A = sp.csr_array((4, 3))
    elif case == "single":
        A = sp.csr_array(([2.5], ([1], [2])), shape=(4, 3))
    else:
        A = sp.csr_array(rng.standard_normal((1, 300)))
    x = rng.standard_normal(A.shape[1])
    y = sc.einsum("ij,j->i", A, x, options=sc.Options(reassociate=True))
    np.testing.assert_allclose(y, np.einsum("ij,j->i", A.toarray(), x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("expr,out", [("ijk,k->ij", (3, 5)), ("ijk,k->i", (3,))])
def test_reassociated_ttv_on_coo(expr, out):
    rng = np.random.default_rng(SEED)
    shape = (3, 5, 400)
    dense = rng.standard_normal(shape) * (rng.random(shape) < 0.4)
    T = sp.coo_array(dense)
    v = rng.standard_normal(shape[2])
    k = sc.compile(expr, "coo", "dense", out_format="dense", options=sc.Options(reassociate=True))
    sc.set_num_threads(1)
    a = k(T, v)
    sc.set_num_threads(2)
    b = k(T, v)
    assert a.shape == out
    np.testing.assert_allclose(a, np.einsum(expr, dense, v), rtol=1e-11, atol=1e-11)
    assert np.array_equal(a, b)


def test_reassociate_integer_and_complex_unchanged():
    rng = np.random.default_rng(SEED)
    A = sp.csr_array((rng.random((30, 40)) < 0.3) * rng.integers(-5, 5, (30, 40)))
    x = rng.integers(-5, 5, 40)
    assert np.array_equal(sc.einsum("ij,j->i", A, x, options=sc.Options(reassociate=True)), A @ x)
    C = sp.csr_array(A.toarray() * (1 + 2j))
    z = x * (1 - 1j)
    np.testing.assert_allclose(sc.einsum("ij,j->i", C, z, options=sc.Options(reassociate=True)),
                               C.toarray() @ z, rtol=1e-12)


@pytest.mark.parametrize("bad", ["yes", 1, None, 0.0])
def test_reassociate_validated(bad):
    with pytest.raises(SparseccError, match="reassociate must be True or False"):
        sc.Options(reassociate=bad)


def test_reassociate_splits_the_cache():
    assert sc.Options(reassociate=True).key() != sc.Options().key()
    assert sc.Options(reassociate=np.bool_(True)).reassociate is True
