"""SDDMM's vector dot product (sparsecc/dialect/kernels/sddmm.py ``_dot_vector``): every chunk
and tail path (k = 0 .. 128 around the vector widths 8 and 16), float/int dtypes on vectors,
complex and transposed X / Y on the scalar loop, empty and single-entry masks, 1 vs 2
threads bitwise equal.  Oracles: ``numpy.einsum`` on dense copies, a written-out loop over
the stored entries, and for float64 the documented summation order replayed exactly with
``fractions.Fraction`` (each fused multiply-add rounded once), which must match bit for bit."""

import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

from conftest import seed as _seed
from sparsecc.runtime import threads

KS = [0, 1, 7, 8, 9, 15, 16, 17, 32, 33, 128]
DTYPES = ["float64", "float32", "int64", "complex128"]
#: the documented order (docs/performance.md): lanes per vector, vector accumulators
LANES = {"float64": 8, "float32": 16, "int64": 8, "int32": 16}
ACCS = 1

pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py




def _values(shape, dtype, rng):
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _mask(m, n, nnz, dtype, rng, width=np.int64):
    """A CSR mask built the way users build one (COO triples), rows 0 and m//2 left empty."""
    rows = rng.integers(0, m, nnz) if m and n else np.zeros(0, np.int64)
    cols = rng.integers(0, n, nnz) if m and n else np.zeros(0, np.int64)
    keep = (rows != 0) & (rows != m // 2) if m > 2 else np.ones(len(rows), bool)
    rows, cols = rows[keep], cols[keep]
    A = sp.csr_array((_values(len(rows), dtype, rng), (rows, cols)), shape=(m, n))
    A.sum_duplicates()
    A.indptr, A.indices = A.indptr.astype(width), A.indices.astype(width)
    return A


def _loop(A, X, Y, xt=False, yt=False):
    """The written-out SDDMM: one dot product per stored entry, in Python's own arithmetic."""
    out = np.zeros(A.nnz, dtype=A.dtype)
    kk = X.shape[0] if xt else X.shape[1]
    for i in range(A.shape[0]):
        for p in range(A.indptr[i], A.indptr[i + 1]):
            j = A.indices[p]
            s = A.dtype.type(0)
            for k in range(kk):
                s = s + (X[k, i] if xt else X[i, k]) * (Y[k, j] if yt else Y[j, k])
            out[p] = A.data[p] * s
    return out


def _fma(x, y, acc):
    return float(Fraction(x) * Fraction(y) + Fraction(acc))      # one rounding, as fma


def _documented_f64(A, X, Y):
    """float64 values in the documented order: chunk c of W lanes into accumulator c mod ACCS
    by fused multiply-add lane by lane (chunks after the last whole ACCS*W block, and the
    partial last chunk, into accumulator 0), accumulators added pairwise, then the lanes
    halved ([0, h) + [h, 2h)) down to one; times A's value."""
    W, kk = LANES["float64"], X.shape[1]
    main = kk - kk % (ACCS * W)
    out = np.zeros(A.nnz)
    for i in range(A.shape[0]):
        for p in range(A.indptr[i], A.indptr[i + 1]):
            j = A.indices[p]
            accs = [[0.0] * W for _ in range(ACCS)]
            for k in range(kk):
                c, lane = divmod(k, W)
                a = accs[c % ACCS if k < main else 0]
                a[lane] = _fma(X[i, k], Y[j, k], a[lane])
            while len(accs) > 1:
                accs = [[x + y for x, y in zip(accs[q], accs[q + 1])] for q in range(0, len(accs), 2)]
            v = accs[0]
            while len(v) > 1:
                h = len(v) // 2
                v = [v[q] + v[q + h] for q in range(h)]
            out[p] = A.data[p] * v[0]
    return out


def _close(got, want, dtype):
    if np.dtype(dtype).kind == "i":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max(initial=0))))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kk", KS)
def test_dot_product_widths(dtype, kk):
    rng = np.random.default_rng(_seed(dtype, kk))
    A = _mask(13, 11, 60, dtype, rng)
    X, Y = _values((13, kk), dtype, rng), _values((11, kk), dtype, rng)
    a0, x0, y0 = A.copy(), X.copy(), Y.copy()
    k = sc.compile("ij,ik,jk->ij")
    D = k(A, X, Y)
    ir = k.ir()
    assert "linalg.generic" not in ir                           # the hand-written kernel
    assert ("vector.load" in ir) == (np.dtype(dtype).kind != "c")  # complex: the scalar loop
    np.testing.assert_array_equal(D.indptr, A.indptr)
    np.testing.assert_array_equal(D.indices, A.indices)
    assert D.dtype == A.dtype
    _close(D.toarray(), np.einsum("ij,ik,jk->ij", A.toarray(), X, Y), dtype)
    _close(D.data, _loop(A, X, Y), dtype)
    if dtype == "float64":
        assert D.data.tobytes() == _documented_f64(A, X, Y).tobytes()
    for got, was in ((A.data, a0.data), (A.indices, a0.indices), (X, x0), (Y, y0)):
        np.testing.assert_array_equal(got, was)                 # nothing the user passed changed


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("kk", [15, 16, 17, 33])
def test_sixteen_lanes(dtype, kk):
    """32-bit dtypes: 16 lanes a vector, so 15/16/17/33 take the masked, full and mixed tails."""
    rng = np.random.default_rng(_seed("16", dtype, kk))
    A = _mask(9, 14, 40, dtype, rng, np.int32)
    X, Y = _values((9, kk), dtype, rng), _values((14, kk), dtype, rng)
    D = sc.einsum("ij,ik,jk->ij", A, X, Y)
    _close(D.toarray(), np.einsum("ij,ik,jk->ij", A.toarray(), X, Y), dtype)
    _close(D.data, _loop(A, X, Y), dtype)


@pytest.mark.parametrize("dtype", ["float64", "int64", "complex128"])
@pytest.mark.parametrize("spec", ["ij,ki,jk->ij", "ij,ik,kj->ij", "ij,ki,kj->ij", "jk,ij,ik->ij", "kj,ki,ij->ij"])
@pytest.mark.parametrize("kk", [0, 7, 9, 33])
def test_transposed_forms(dtype, spec, kk):
    """X[k,i] or Y[k,j] (strided rows) are copied row-major first: the same values, bit for
    bit, as the untransposed form; any operand order."""
    rng = np.random.default_rng(_seed(dtype, spec, kk))
    A = _mask(12, 10, 50, dtype, rng)
    X, Y = _values((12, kk), dtype, rng), _values((10, kk), dtype, rng)
    given = {"ij": A, "ik": X, "ki": np.ascontiguousarray(X.T), "jk": Y, "kj": np.ascontiguousarray(Y.T)}
    names = spec[:-4].split(",")
    ops = [given[s] for s in names]
    x0 = [o.copy() for o in ops]
    D = sc.einsum(spec, *ops)
    dense = [o.toarray() if sp.issparse(o) else o for o in ops]
    _close(D.toarray(), np.einsum(spec, *dense), dtype)
    _close(D.data, _loop(A, X, Y), dtype)
    assert D.data.tobytes() == sc.einsum("ij,ik,jk->ij", A, X, Y).data.tobytes()
    for o, was in zip(ops, x0):
        np.testing.assert_array_equal(o.toarray() if sp.issparse(o) else o, was.toarray() if sp.issparse(was) else was)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
@pytest.mark.parametrize("shape,nnz", [((0, 0), 0), ((0, 5), 0), ((7, 0), 0), ((6, 8), 0), ((1, 1), 1), ((5, 9), 1)])
@pytest.mark.parametrize("kk", [0, 9])
def test_empty_and_single(dtype, shape, nnz, kk):
    rng = np.random.default_rng(_seed(dtype, shape, nnz, kk))
    m, n = shape
    if nnz:
        A = sp.csr_array((_values(1, dtype, rng), ([m - 1], [n // 2])), shape=shape)
    else:
        A = sp.csr_array(shape, dtype=dtype)
    X, Y = _values((m, kk), dtype, rng), _values((n, kk), dtype, rng)
    D = sc.einsum("ij,ik,jk->ij", A, X, Y)
    assert D.shape == shape and D.nnz == nnz and D.dtype == np.dtype(dtype)
    _close(D.toarray(), np.einsum("ij,ik,jk->ij", A.toarray(), X, Y), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kk", [32, 33])
def test_threads_bitwise_equal(dtype, kk):
    rng = np.random.default_rng(_seed("threads", dtype, kk))
    A = _mask(4000, 3000, 40000, dtype, rng)
    X, Y = _values((4000, kk), dtype, rng), _values((3000, kk), dtype, rng)
    threads.set_min_parallel_work(0)
    sc.set_num_threads(1)
    one = sc.einsum("ij,ik,jk->ij", A, X, Y)
    sc.set_num_threads(2)
    two = sc.einsum("ij,ik,jk->ij", A, X, Y)
    assert one.data.tobytes() == two.data.tobytes()
    rows = rng.choice(4000, 40, replace=False)               # a sample against NumPy
    sub = A[rows]
    _close(one[rows].toarray(), np.einsum("ij,ik,jk->ij", sub.toarray(), X[rows], Y), dtype)


def test_kernel_checks_the_mask_coordinates():
    """check=True: the kernel range-checks A's coordinates itself (no NumPy pass before the
    call); a bad one (too large, negative; int32 and int64 indices) raises OperandError naming
    operand 0.  In a subprocess: a missed check would be a wild read."""
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        from sparsecc.errors import OperandError
        rng = np.random.default_rng(0)
        k = sc.compile("ij,ik,jk->ij")
        for width in (np.int32, np.int64):
            for bad in (30, 2**31 - 1, -1):
                for kk in (9, 32):
                    A = sp.random_array((20, 30), density=0.2, rng=rng, format="csr")
                    A.indices, A.indptr = A.indices.astype(width), A.indptr.astype(width)
                    X, Y = rng.random((20, kk)), rng.random((30, kk))
                    good = k(A, X, Y)
                    assert k._last.guarded, 'the kernel checks no coordinates itself'
                    A.indices[7] = bad
                    a0 = A.indices.copy()
                    try:
                        k(A, X, Y)
                    except OperandError as e:
                        assert "operand 0" in str(e) and "indices" in str(e), e
                    else:
                        raise AssertionError(f"no error for index {bad}")
                    assert (A.indices == a0).all()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
