"""Element-wise unions (A + B, A - B, a*A + b*B) with CSR/CSC results run as a hand-written
parallel merge kernel (sparsecc/dialect/kernels/union.py): checked against SciPy / NumPy
over dtypes, index widths (mixed too), empty / single-entry / disjoint / identical patterns,
and bit for bit against the sparsifier's kernel for the same statement (stored zeros,
cancellations, -0.0, inf), and 1 vs 2 threads."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.dialect.kernels import ewise as handwritten_ewise
from sparsecc.dialect.kernels import union as handwritten_union
from sparsecc.runtime import threads

from conftest import seed as _seed, random_values

DTYPES = ["float64", "float32", "int64", "complex128"]
STATEMENTS = {
    "add": ("C[i,j] = A[i,j] + B[i,j]", lambda A, B, a, b: A + B),
    "sub": ("C[i,j] = A[i,j] - B[i,j]", lambda A, B, a, b: A - B),
    "scaled": ("C[i,j] = a*A[i,j] + B[i,j]*b", lambda A, B, a, b: a * A + B * b),
    "scaled_sub": ("C[i,j] = A[i,j] - b*B[i,j]", lambda A, B, a, b: A - b * B),
}


pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py




def _csr(shape, nnz, dtype, rng, width=np.int32, *, pattern=None):
    """A CSR array built from COO triples (``pattern``: these (rows, cols))."""
    m, n = shape
    if pattern is None:
        rows = rng.integers(0, m, nnz) if m and n else np.zeros(0, np.int64)
        cols = rng.integers(0, n, nnz) if m and n else np.zeros(0, np.int64)
        key = np.unique(rows * max(n, 1) + cols)
        rows, cols = key // max(n, 1), key % max(n, 1)
    else:
        rows, cols = pattern
    a = sp.csr_array((random_values(len(rows), dtype, rng), (rows, cols)), shape=shape)
    a.indptr, a.indices = a.indptr.astype(width), a.indices.astype(width)
    return a


def _scalars(dtype):
    return np.asarray(2, dtype), np.asarray(-3, dtype)


def _operands(case, dtype, rng, wa, wb):
    shapes = {"plain": (30, 25), "empty": (0, 6), "no_cols": (5, 0), "empty_rows": (40, 12),
              "single": (1, 1), "one_empty": (15, 20), "identical": (20, 30), "disjoint": (20, 30)}
    shape = shapes[case]
    if case == "identical":
        A = _csr(shape, 100, dtype, rng, wa)
        r, c = A.nonzero()
        return A, _csr(shape, 0, dtype, rng, wb, pattern=(r, c))
    if case == "disjoint":
        A = _csr(shape, 100, dtype, rng, wa)
        dense = np.ones(shape, bool)
        dense[A.nonzero()] = False
        r, c = np.nonzero(dense)
        keep = rng.random(len(r)) < 0.2
        return A, _csr(shape, 0, dtype, rng, wb, pattern=(r[keep], c[keep]))
    if case == "empty_rows":     # rows 0..9 and every third row store nothing
        A = _csr(shape, 120, dtype, rng, wa)
        B = _csr(shape, 120, dtype, rng, wb)
        for X in (A, B):
            X.data[np.repeat(np.arange(shape[0]), np.diff(X.indptr)) % 3 == 0] = 0
            X.eliminate_zeros()
            X.indptr, X.indices = X.indptr.astype(wa), X.indices.astype(wa)
        return A, B
    nnz = {"plain": (90, 80), "empty": (0, 0), "no_cols": (0, 0), "single": (1, 1), "one_empty": (70, 0)}[case]
    return _csr(shape, nnz[0], dtype, rng, wa), _csr(shape, nnz[1], dtype, rng, wb)


def _run(name, A, B, dtype, **kw):
    stmt, _ = STATEMENTS[name]
    a, b = _scalars(dtype)
    ops = {"A": A, "B": B}
    if "a*" in stmt:
        ops["a"] = a
    if "b" in stmt.replace("B", ""):
        ops["b"] = b
    k = sc.compile(stmt, **kw)
    return k, k(**ops)


def _same(got, want, dtype):
    got_d, want_d = got.toarray(), np.asarray(want)
    assert got_d.dtype == np.dtype(dtype)
    if want_d.dtype.kind in "iu":
        np.testing.assert_array_equal(got_d, want_d)
    else:
        tol = 1e-5 if want_d.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(got_d, want_d, rtol=tol, atol=tol)


def _union_nnz(A, B):
    return (abs(A).astype(bool).astype(np.int8) + abs(B).astype(bool).astype(np.int8)).nnz


def _handwritten(k) -> bool:
    return "linalg.generic" not in k.ir()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(STATEMENTS))
@pytest.mark.parametrize("case", ["plain", "empty", "no_cols", "empty_rows", "single", "one_empty",
                                  "identical", "disjoint"])
def test_union_matches_scipy(dtype, name, case):
    rng = np.random.default_rng(_seed(dtype, name, case))
    A, B = _operands(case, dtype, rng, np.int32, np.int32)
    k, C = _run(name, A, B, dtype)
    assert _handwritten(k)
    assert C.format == "csr" and C.has_canonical_format
    for i in range(C.shape[0]):
        assert np.all(np.diff(C.indices[C.indptr[i]:C.indptr[i + 1]]) > 0)
    a, b = _scalars(dtype)
    _same(C, STATEMENTS[name][1](A.toarray(), B.toarray(), a, b), dtype)
    assert C.nnz == _union_nnz(A, B)          # every entry of the union, cancellations too


@pytest.mark.parametrize("widths", [(np.int64, np.int64), (np.int32, np.int64), (np.int64, np.int32)])
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_union_index_widths(widths, dtype):
    rng = np.random.default_rng(_seed(dtype, str(widths)))
    A, B = _operands("plain", dtype, rng, *widths)
    for name in ("add", "scaled"):
        k, C = _run(name, A, B, dtype)
        assert _handwritten(k)
        _same(C, STATEMENTS[name][1](A.toarray(), B.toarray(), *_scalars(dtype)), dtype)


def _special(dtype, rng):
    """Operands whose union has stored zeros, cancellations, -0.0 and inf on each side."""
    m, n = 12, 10
    A = _csr((m, n), 60, dtype, rng)
    B = _csr((m, n), 0, dtype, rng, pattern=A.nonzero())     # a copy of A's pattern...
    B.data[:] = A.data                                     # ...and values: A - B cancels
    extra = _csr((m, n), 40, dtype, rng)
    B = (B + extra).tocsr()
    B.indptr, B.indices = B.indptr.astype(np.int32), B.indices.astype(np.int32)
    if np.dtype(dtype).kind == "f":
        A.data[::5], B.data[1::6], B.data[2::7] = 0.0, -0.0, np.inf
    else:
        A.data[::5], B.data[1::6] = 0, 0
    return A, B


@pytest.mark.parametrize("dtype", ["float64", "int64", "complex128"])
@pytest.mark.parametrize("name", list(STATEMENTS))
def test_union_bitwise_as_the_sparsifier(dtype, name, monkeypatch):
    rng = np.random.default_rng(_seed("special", dtype, name))
    A, B = _special(dtype, rng)
    k, C = _run(name, A, B, dtype)
    assert _handwritten(k)
    monkeypatch.setattr(handwritten_union, "match", lambda *a, **kw: None)
    monkeypatch.setattr(handwritten_ewise, "match", lambda *a, **kw: None)   # (which takes any union)
    k2, R = _run(name, A, B, dtype, options=sc.Options(opt_level=2))   # another specialization
    assert not _handwritten(k2)
    np.testing.assert_array_equal(C.indptr, R.indptr)
    np.testing.assert_array_equal(C.indices, R.indices)
    assert C.data.tobytes() == R.data.tobytes()


def test_union_csc_and_non_canonical_inputs():
    rng = np.random.default_rng(21)
    A, B = _csr((30, 40), 200, "float64", rng), _csr((30, 40), 150, "float64", rng)
    Ac, Bc = A.tocsc(), B.tocsc()
    k = sc.compile("C[i,j] = A[i,j] - B[i,j]", out_format="csc")
    C = k(A=Ac, B=Bc)
    assert _handwritten(k) and C.format == "csc"
    _same(C, A.toarray() - B.toarray(), "float64")
    # unsorted rows and duplicates: sorted and summed on a copy, the user's arrays untouched
    U = sp.csr_array((np.r_[A.data, 1.0, 2.0], np.r_[A.indices, 3, 3],
                      np.r_[A.indptr[:-1], A.indptr[-1] + 2]), shape=A.shape)
    U.indices[:U.indptr[1]] = U.indices[:U.indptr[1]][::-1].copy()
    U.has_sorted_indices = False
    u0 = U.copy()
    C = sc.evaluate("C[i,j] = A[i,j] + B[i,j]", A=U, B=B)
    _same(C, U.toarray() + B.toarray(), "float64")
    np.testing.assert_array_equal(U.indices, u0.indices)
    np.testing.assert_array_equal(U.data, u0.data)


def test_ops_add_sub_take_the_union_kernel():
    rng = np.random.default_rng(22)
    A, B = _csr((25, 30), 120, "float64", rng), _csr((25, 30), 100, "float64", rng)
    _same(sc.ops.add(A, B), A.toarray() + B.toarray(), "float64")
    _same(sc.ops.sub(A, B, alpha=0.5), A.toarray() - 0.5 * B.toarray(), "float64")
    k = sc.compile("O[i0,i1] = X[i0,i1] - a * Y[i0,i1]")
    k(X=A, Y=B, a=np.asarray(0.5))
    assert _handwritten(k)


def test_other_unions_keep_the_sparsifier():
    rng = np.random.default_rng(23)
    A, B = _csr((10, 8), 30, "float64", rng), _csr((10, 8), 30, "float32", rng)
    k = sc.compile("C[i,j] = A[i,j] + B[i,j]")
    _same(k(A=A, B=B), A.toarray() + B.toarray(), "float64")        # mixed dtypes: not this kernel's,
    assert _handwritten(k) and k.ir().count("arith.extf") >= 1      # the element-wise one's (ewise.py)
    k = sc.compile("C[i,j] = A[i,j] + B[i,j]", out_format="coo")
    assert k(A=A, B=B.astype(np.float64)).format == "coo"
    assert not _handwritten(k)


def test_union_threads_bitwise_equal():
    rng = np.random.default_rng(24)
    A, B = _csr((20000, 5000), 100000, "float64", rng), _csr((20000, 5000), 100000, "float64", rng)
    threads.set_min_parallel_work(0)
    out = []
    for n in (1, 2):
        sc.set_num_threads(n)
        out.append(sc.evaluate("C[i,j] = A[i,j] - B[i,j]", A=A, B=B))
    for x, y in ((out[0].indptr, out[1].indptr), (out[0].indices, out[1].indices), (out[0].data, out[1].data)):
        assert x.tobytes() == y.tobytes()
    ref = A - B                         # sparse: a dense 20000 x 5000 copy took 10 s
    assert out[1].nnz == ref.nnz and abs(out[1] - ref).max() == 0


def test_large_union_in_a_subprocess():
    """A crash (signal) fails the test instead of killing the test run."""
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        rng = np.random.default_rng(0)
        n = 50000
        r = np.repeat(np.arange(n), 6); c = rng.integers(0, n, n * 6)
        A = sp.csr_array((rng.random(n * 6), (r, c)), shape=(n, n))
        B = sp.csr_array((rng.random(n * 6), (r, rng.integers(0, n, n * 6))), shape=(n, n))
        C = sc.evaluate("C[i,j] = A[i,j] + B[i,j]", A=A, B=B)
        assert abs(C - (A + B)).max() == 0 and C.nnz == (A + B).nnz
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["int32", "complex64"])
def test_union_other_dtypes(dtype):
    rng = np.random.default_rng(_seed("other", dtype))
    A, B = _operands("plain", dtype, rng, np.int32, np.int64)
    for name in ("sub", "scaled"):
        k, C = _run(name, A, B, dtype)
        assert _handwritten(k)
        _same(C, STATEMENTS[name][1](A.toarray(), B.toarray(), *_scalars(dtype)), dtype)
