"""SDDMM and SpGEMM with CSR results run as hand-written parallel loop kernels
(sparsecc/dialect/kernels/sddmm.py, spgemm.py): checked against SciPy / NumPy oracles over dtypes, index
widths, empty and single-entry operands, unsorted and duplicate inputs, each ordering path of
SpGEMM's rows, and 1 vs 2 threads (bitwise equal)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import threads

from conftest import seed as _seed, random_dense, random_values

DTYPES = ["float64", "float32", "int64", "complex128"]


pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py


def _csr(shape, nnz, dtype, rng, width=np.int32, *, unsorted=False, duplicates=False):
    """A CSR array built the way users build them (COO triples), ``width`` indices."""
    m, n = shape
    rows = rng.integers(0, m, nnz) if m else np.zeros(0, np.int64)
    cols = rng.integers(0, n, nnz) if n else np.zeros(0, np.int64)
    if not duplicates:
        key = np.unique(rows * max(n, 1) + cols)
        rows, cols = key // max(n, 1), key % max(n, 1)
    vals = random_values(len(rows), dtype, rng)
    a = sp.csr_array((vals, (rows, cols)), shape=shape)
    if duplicates:       # csr_array from COO sums duplicates: put them back, unsorted
        order = rng.permutation(len(rows))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))])
        by_row = np.argsort(rows[order], kind="stable")
        a = sp.csr_array((vals[order][by_row], cols[order][by_row], indptr), shape=shape)
        assert not a.has_canonical_format or len(rows) < 2
    elif unsorted:
        for i in range(m):
            lo, hi = a.indptr[i], a.indptr[i + 1]
            p = rng.permutation(hi - lo) + lo
            a.indices[lo:hi], a.data[lo:hi] = a.indices[p].copy(), a.data[p].copy()
        a.has_sorted_indices = False
    a.indptr = a.indptr.astype(width)
    a.indices = a.indices.astype(width)
    return a


def _canonical(c):
    assert sp.issparse(c) and c.format == "csr"
    for i in range(c.shape[0]):
        row = c.indices[c.indptr[i]:c.indptr[i + 1]]
        assert np.all(np.diff(row) > 0), f"row {i} not sorted / has duplicates: {row}"


def _same(got, want):
    got_d, want_d = got.toarray(), np.asarray(want)
    assert got_d.dtype == want_d.dtype
    if want_d.dtype.kind in "iu":
        np.testing.assert_array_equal(got_d, want_d)
    else:
        tol = 1e-4 if want_d.dtype in (np.float32, np.complex64) else 1e-10
        np.testing.assert_allclose(got_d, want_d, rtol=tol, atol=tol)


def _handwritten(k) -> bool:
    return "linalg.generic" not in k.ir()




# ------------------------------------------------------------------------------ SpGEMM
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [np.int32, np.int64])
@pytest.mark.parametrize("shape,nnz", [((30, 20, 25), (90, 70)), ((0, 5, 4), (0, 3)), ((5, 0, 4), (0, 0)),
                                       ((1, 1, 1), (1, 1)), ((40, 30, 1), (0, 10)), ((12, 9, 7), (1, 1))])
def test_spgemm_matches_scipy(dtype, width, shape, nnz):
    rng = np.random.default_rng(_seed(dtype, str(width), shape))
    m, kk, n = shape
    A = _csr((m, kk), nnz[0], dtype, rng, width)
    B = _csr((kk, n), nnz[1], dtype, rng, width)
    k = sc.compile("ik,kj->ij")
    C = k(A, B)
    assert _handwritten(k)
    _canonical(C)
    want = A.toarray() @ B.toarray()
    _same(C, want)
    # the pattern is the structural product's (cancelled entries stay stored, as the
    # sparsifier's kernel does): every stored entry of SciPy's product is there
    S = (abs(A).astype(bool).astype(int) @ abs(B).astype(bool).astype(int))
    assert C.nnz == S.nnz


@pytest.mark.parametrize("spec", ["ik,kj->ij", "kj,ik->ij"])
def test_spgemm_operand_order(spec):
    rng = np.random.default_rng(3)
    A, B = _csr((20, 15), 60, "float64", rng), _csr((15, 18), 50, "float64", rng)
    ops = (A, B) if spec.startswith("ik") else (B, A)
    _same(sc.einsum(spec, *ops), A.toarray() @ B.toarray())


def test_spgemm_notation():
    rng = np.random.default_rng(4)
    A, B = _csr((20, 15), 60, "float32", rng), _csr((15, 18), 50, "float32", rng)
    C = sc.evaluate("C[i,j] = sum[k](A[i,k] * B[k,j])", A=A, B=B)
    _canonical(C)
    _same(C, A.toarray() @ B.toarray())


@pytest.mark.parametrize("kind", ["unsorted", "duplicates"])
def test_spgemm_unsorted_and_duplicate_inputs(kind):
    rng = np.random.default_rng(5)
    A = _csr((25, 30), 120, "float64", rng, **{kind: True})
    B = _csr((30, 20), 100, "float64", rng, **{kind: True})
    a0, b0 = A.copy(), B.copy()
    C = sc.einsum("ik,kj->ij", A, B)
    _canonical(C)
    _same(C, A.toarray() @ B.toarray())
    for x, x0 in ((A, a0), (B, b0)):        # the user's arrays are not modified
        np.testing.assert_array_equal(x.indices, x0.indices)
        np.testing.assert_array_equal(x.data, x0.data)


@pytest.mark.parametrize("case", ["short", "bitmap", "sort"])
def test_spgemm_row_ordering_paths(case, monkeypatch):
    """Each way a row's coordinates are put in order: insertion sort (<= 32 entries), the
    bitmap read in order (few summary words per entry), heap sort (wide sparse rows: here
    forced, as real ones need a million columns)."""
    from sparsecc.dialect.kernels import spgemm
    rng = np.random.default_rng(6)
    options = None
    if case == "sort":
        monkeypatch.setattr(spgemm, "SCAN_WORDS_PER_ENTRY", 0)
        options = sc.Options(opt_level=2)          # another specialization than the default's
    if case == "short":
        A, B = _csr((50, 50), 60, "float64", rng), _csr((50, 4000), 200, "float64", rng)
    elif case == "bitmap":
        A, B = _csr((40, 60), 600, "float64", rng), _csr((60, 300), 3000, "float64", rng)
    else:
        A, B = _csr((30, 40), 300, "float64", rng), _csr((40, 200_000), 1600, "float64", rng)
    k = sc.compile("ik,kj->ij", options=options)
    C = k(A, B)
    _canonical(C)
    lengths = np.diff(C.indptr)
    assert lengths.max() > 32 if case != "short" else lengths.max() <= 32
    _same(C, (A @ B).toarray())


def test_spgemm_threads_bitwise_equal():
    rng = np.random.default_rng(7)
    A, B = _csr((5000, 3000), 40000, "float64", rng), _csr((3000, 4000), 40000, "float64", rng)
    threads.set_min_parallel_work(0)
    sc.set_num_threads(1)
    one = sc.einsum("ik,kj->ij", A, B)
    sc.set_num_threads(2)
    two = sc.einsum("ik,kj->ij", A, B)
    for x, y in ((one.indptr, two.indptr), (one.indices, two.indices), (one.data, two.data)):
        assert x.tobytes() == y.tobytes()
    _same(two, (A @ B).toarray())


def test_serial_option_same_result():
    rng = np.random.default_rng(8)
    A, B = _csr((60, 50), 300, "complex128", rng), _csr((50, 40), 250, "complex128", rng)
    k = sc.compile("ik,kj->ij", options=sc.Options(parallel="none"))
    C = k(A, B)
    assert "scf.parallel" not in k.ir()
    _same(C, A.toarray() @ B.toarray())
    assert C.data.tobytes() == sc.einsum("ik,kj->ij", A, B).data.tobytes()


# ------------------------------------------------------------------------------ SDDMM
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [np.int32, np.int64])
@pytest.mark.parametrize("shape,nnz", [((30, 25, 8), 120), ((0, 4, 3), 0), ((6, 5, 0), 10),
                                       ((1, 1, 1), 1), ((20, 30, 5), 0), ((9, 13, 17), 1)])
def test_sddmm_matches_numpy(dtype, width, shape, nnz):
    rng = np.random.default_rng(_seed(dtype, str(width), shape))
    m, n, kk = shape
    A = _csr((m, n), nnz, dtype, rng, width)
    X, Y = random_dense((m, kk), dtype, rng), random_dense((n, kk), dtype, rng)
    k = sc.compile("ij,ik,jk->ij")
    D = k(A, X, Y)
    assert _handwritten(k)
    _canonical(D)
    np.testing.assert_array_equal(D.indptr, A.indptr)        # the mask's pattern, copied
    np.testing.assert_array_equal(D.indices, A.indices)
    _same(D, np.einsum("ij,ik,jk->ij", A.toarray(), X, Y))


@pytest.mark.parametrize("spec", ["ij,ik,jk->ij", "ij,ki,jk->ij", "ij,ik,kj->ij", "ik,jk,ij->ij"])
def test_sddmm_layouts(spec):
    rng = np.random.default_rng(9)
    A = _csr((20, 30), 100, "float64", rng)
    shapes = {"ij": (20, 30), "ik": (20, 6), "ki": (6, 20), "jk": (30, 6), "kj": (6, 30)}
    ops = [A if s == "ij" else random_dense(shapes[s], "float64", rng) for s in spec[:-4].split(",")]
    dense = [o.toarray() if sp.issparse(o) else o for o in ops]
    _same(sc.einsum(spec, *ops), np.einsum(spec, *dense))


def test_sddmm_notation_with_explicit_zeros_and_unsorted():
    rng = np.random.default_rng(10)
    A = _csr((25, 20), 90, "float64", rng, unsorted=True)
    A.data[::7] = 0.0                    # stored zeros stay stored (the mask's pattern)
    X, Y = rng.random((25, 4)), rng.random((20, 4))
    a0 = A.copy()
    D = sc.evaluate("C[i,j] = A[i,j] * sum[k](X[i,k] * Y[j,k])", A=A, X=X, Y=Y)
    _canonical(D)
    assert D.nnz == A.nnz
    _same(D, A.toarray() * (X @ Y.T))
    np.testing.assert_array_equal(A.indices, a0.indices)


def test_sddmm_threads_bitwise_equal():
    rng = np.random.default_rng(11)
    A = _csr((6000, 3000), 50000, "float64", rng)
    X, Y = rng.random((6000, 16)), rng.random((3000, 16))
    threads.set_min_parallel_work(0)
    sc.set_num_threads(1)
    one = sc.einsum("ij,ik,jk->ij", A, X, Y)
    sc.set_num_threads(2)
    two = sc.einsum("ij,ik,jk->ij", A, X, Y)
    assert one.data.tobytes() == two.data.tobytes()


def test_other_statements_keep_the_sparsifier():
    """Only these shapes take the hand-written path: mixed dtypes keep MLIR's sparsifier (a CSC
    operand is read as CSR for a CSR result: that one is hand-written; a CSC result is built
    as CSR - hand-written - and transposed by SciPy: ``specialization.csc_built_as_csr``)."""
    rng = np.random.default_rng(12)
    A = _csr((10, 8), 30, "float64", rng)
    B = _csr((8, 9), 30, "float32", rng)
    k = sc.compile("ik,kj->ij")
    _same(k(A, B), A.toarray() @ B.toarray().astype(np.float64))
    assert _handwritten(k) is False
    k2 = sc.compile("ik,kj->ij", out_format="csc")
    C = k2(A, B.astype(np.float64))
    assert C.format == "csc"
    _same(C, A.toarray() @ B.toarray().astype(np.float64))
    assert _handwritten(k2)
    k3 = sc.compile("ik,kj->ij", "csr", "csc")
    _same(k3(A, B.astype(np.float64).tocsc()), A.toarray() @ B.toarray().astype(np.float64))
    assert _handwritten(k3)


def test_large_call_in_a_subprocess():
    """A crash (signal) fails the test instead of killing the test run."""
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        rng = np.random.default_rng(0)
        n = 3000
        r = np.repeat(np.arange(n), 8); c = rng.integers(0, n, n * 8)
        A = sp.csr_array((rng.random(n * 8), (r, c)), shape=(n, n))
        C = sc.einsum("ik,kj->ij", A, A)
        assert abs(C - A @ A).max() < 1e-9
        X = rng.random((n, 16)); D = sc.einsum("ij,ik,jk->ij", A, X, X)
        assert np.allclose(D.toarray(), A.toarray() * (X @ X.T))
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_sddmm_non_contiguous_dense_operands():
    rng = np.random.default_rng(13)
    A = _csr((30, 20), 120, "float64", rng)
    X = np.asfortranarray(rng.random((30, 5)))
    Y = rng.random((5, 20)).T                    # a transposed view
    D = sc.einsum("ij,ik,jk->ij", A, X, Y, prune=True)
    _same(D, np.einsum("ij,ik,jk->ij", A.toarray(), X, Y))


@pytest.mark.parametrize("wa,wb", [(np.int32, np.int64), (np.int64, np.int32), (np.int64, np.int64)])
def test_spgemm_rows_of_every_path_exactly(wa, wb):
    """One product with an empty row, a full row (every column: the bitmap read in order),
    rows over 32 entries, short rows and entries whose terms cancel to exactly zero (stored,
    as the structural product has them): SciPy's pattern and values, rows in order, any mix
    of index widths, the same bits on 1 and 2 threads."""
    rng = np.random.default_rng(14)
    m, kk, n = 9, 40, 300
    A = np.zeros((m, kk))
    A[1, :] = rng.random(kk)                     # B's rows all together: a full row
    A[2, rng.choice(kk, 6, replace=False)] = 1.0  # > 32 entries
    A[3, 5], A[3, 6] = 1.0, 1.0                   # row 5 + row 6: cancels (B[6] = -B[5])
    A[5, 7] = 2.5                                 # a short row
    A[7, 5], A[7, 6], A[7, 8] = 1.0, 1.0, 3.0     # cancels, then a long row on top
    # rows 0, 4, 6, 8 of A: empty
    B = np.zeros((kk, n))
    for r in range(kk):
        B[r, rng.choice(n, 12, replace=False)] = rng.random(12) + 0.5
    B[6] = -B[5]
    B[8, :] = rng.random(n)                       # a full row of B
    B[:, 0] = 0.0
    B[0, :] = rng.random(n)                       # so row 1 of the product is full
    As, Bs = sp.csr_array(A), sp.csr_array(B)
    As.indptr, As.indices = As.indptr.astype(wa), As.indices.astype(wa)
    Bs.indptr, Bs.indices = Bs.indptr.astype(wb), Bs.indices.astype(wb)
    threads.set_min_parallel_work(0)
    got = []
    for t in (1, 2):
        sc.set_num_threads(t)
        got.append(sc.einsum("ik,kj->ij", As, Bs))
    one, two = got
    for x, y in ((one.indptr, two.indptr), (one.indices, two.indices), (one.data, two.data)):
        assert x.tobytes() == y.tobytes()
    S = sp.csr_array((A != 0).astype(np.int64) @ (B != 0).astype(np.int64))
    S.sort_indices()
    np.testing.assert_array_equal(one.indptr, S.indptr)
    np.testing.assert_array_equal(one.indices, S.indices)
    np.testing.assert_allclose(one.toarray(), A @ B, rtol=1e-12, atol=1e-12)
    lengths = np.diff(one.indptr)
    assert lengths[1] == n and lengths[0] == 0 and lengths[2] > 32 and 0 < lengths[5] <= 32
    row3 = one.data[one.indptr[3]:one.indptr[4]]
    assert row3.size == 12 and np.all(row3 == 0.0)          # every term cancelled, all stored


def test_spgemm_without_nontemporal_stores_same_bits(monkeypatch):
    """The one-thread kernel's non-temporal value stores (x86-64) and ordinary ones (other
    machines: a target whose facts say aarch64) give the same bits."""
    from sparsecc.runtime import targets
    rng = np.random.default_rng(15)
    A, B = _csr((200, 150), 3000, "float64", rng), _csr((150, 400), 3000, "float64", rng)
    sc.set_num_threads(1)
    one = sc.einsum("ik,kj->ij", A, B)
    resolve = targets.resolve
    monkeypatch.setattr(targets, "resolve", lambda options, name=None: resolve(options, name).replace(arch="aarch64"))
    k = sc.compile("ik,kj->ij", options=sc.Options(opt_level=2))   # another specialization
    other = k(A, B)
    assert "sfence" not in k.ir()                   # (the non-temporal branch: never taken)
    for x, y in ((one.indptr, other.indptr), (one.indices, other.indices), (one.data, other.data)):
        assert x.tobytes() == y.tobytes()
    _same(one, (A @ B).toarray())
