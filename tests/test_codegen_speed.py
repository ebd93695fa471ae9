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


# --------------------------------------------------------------------------- the COO scan
# check=True's native COO scan (runtime/validate.py) compares 32-bit coordinates in 32 bits,
# each entry with the previous one read from memory (vectorized; issue 14, TTV).  Oracle: the
# same two facts written out in NumPy.

def _oracle(coords, shape):
    c = [np.asarray(x, np.int64) for x in coords]
    in_range = all(((x >= 0) & (x < n)).all() for x, n in zip(c, shape))
    ordered = True
    if c[0].size > 1:
        gt = np.zeros(c[0].size - 1, bool)
        eq = np.ones(c[0].size - 1, bool)
        for x in c:
            d = np.diff(x)
            gt |= eq & (d > 0)
            eq &= d == 0
        ordered = bool(gt.all())
    return in_range, ordered


def _canonical(rng, shape, nnz, dtype):
    flat = np.sort(rng.choice(int(np.prod(shape)), size=nnz, replace=False))
    return [c.astype(dtype) for c in np.unravel_index(flat, shape)]


def _edit(coords, case, shape):
    c = [x.copy() for x in coords]
    n = c[0].size
    if case == "swap-first":
        for x in c:
            x[0], x[1] = x[1], x[0]
    elif case == "swap-last":
        for x in c:
            x[-2], x[-1] = x[-1], x[-2]
    elif case == "duplicate":
        for x in c:
            x[n // 2] = x[n // 2 - 1]
    elif case == "last-dim-down":
        c[-1][n // 3] = c[-1][n // 3 - 1] - 1 if c[-2][n // 3] == c[-2][n // 3 - 1] else c[-1][n // 3]
        c[-2][n // 3] = c[-2][n // 3 - 1]
        c[0][n // 3] = c[0][n // 3 - 1]
    elif case == "negative":
        c[1][7] = -1
    elif case == "equal-to-size":
        c[2][-1] = shape[2]
    elif case == "first-out-of-range":
        c[0][0] = shape[0]
    return c


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("case", ["canonical", "swap-first", "swap-last", "duplicate", "last-dim-down",
                                  "negative", "equal-to-size", "first-out-of-range"])
def test_coo_scan_matches_numpy(case, dtype):
    from sparsecc.runtime.validate import NATIVE_MIN, coo_scan
    rng = np.random.default_rng(SEED)
    shape = (40, 50, 60)
    coords = _edit(_canonical(rng, shape, NATIVE_MIN + 123, dtype), case, shape)
    keep = [x.copy() for x in coords]
    got = coo_scan(coords, shape)
    assert got == _oracle(coords, shape)
    assert all(np.array_equal(a, b) for a, b in zip(coords, keep))


def test_coo_scan_strided_and_huge_dimension():
    from sparsecc.runtime.validate import NATIVE_MIN, coo_scan
    rng = np.random.default_rng(SEED)
    shape = (70, 80, 90)
    aos = np.stack(_canonical(rng, shape, NATIVE_MIN + 5, np.int32), axis=1)     # (nnz, 3) rows
    views = [aos[:, d] for d in range(3)]                                        # stride 3
    assert coo_scan(views, shape) == (True, True)
    aos[100, 2] = 90
    assert coo_scan(views, shape) == _oracle(views, shape)
    assert coo_scan(views, shape)[0] is False
    # a dimension beyond 2^31: every non-negative int32 coordinate is in range, a negative one not
    big = (70, 80, 1 << 33)
    c = _canonical(rng, shape, NATIVE_MIN + 5, np.int32)
    c[2][-1] = np.iinfo(np.int32).max
    assert coo_scan(c, big) == _oracle(c, big) == (True, True)
    c[2][3] = -5
    assert coo_scan(c, big) == _oracle(c, big)
    assert coo_scan(c, big)[0] is False


def test_checked_ttv_on_large_coo_matches_and_refuses():
    rng = np.random.default_rng(SEED)
    from sparsecc.runtime.validate import NATIVE_MIN
    shape = (30, 40, 50)
    c = _canonical(rng, shape, NATIVE_MIN + 17, np.int32)
    T = sp.coo_array((rng.standard_normal(c[0].size), tuple(c)), shape=shape)
    v = rng.standard_normal(shape[2])
    k = sc.compile("ijk,k->ij", "coo", "dense", out_format="dense")
    np.testing.assert_allclose(k(T, v), np.einsum("ijk,k->ij", T.toarray(), v), rtol=1e-12, atol=1e-12)
    T.coords[1][9] = 40
    with pytest.raises(sc.OperandError):
        k(T, v)
