"""The hand-written SpGEMM with an operand read transposed (``A^T B``: the kernel transposes it
in O(entries), the operand stays CSR) and with constant factors (the least-squares Hessian's
``2 * A^T A``), and the masked sum ``ij,jk,ik->`` (triangle counting), against SciPy,
numpy.einsum on dense copies and networkx; threads 1 and 2 bitwise equal."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

DTYPES = ["float64", "int32", "complex128"]
SLOW_DTYPES = ["bool", "int64", "float32"]


def _rand(m, n, density, dtype, rng, empty_rows=()):
    A = sp.random_array((m, n), density=density, format="csr", rng=rng)
    A = sp.csr_array(A)
    for r in empty_rows:
        A.data[A.indptr[r]:A.indptr[r + 1]] = 0
    A.eliminate_zeros()
    if dtype == "bool":
        return sp.csr_array(A.astype(bool))
    if np.dtype(dtype).kind in "iu":
        A.data = np.ceil(A.data * 5)
    if np.dtype(dtype).kind == "c":
        return sp.csr_array(A.astype(dtype) * (1 + 2j))
    return sp.csr_array(A.astype(dtype))


def _dense(A):
    return A.toarray()


@pytest.fixture(scope="module", autouse=True)
def _threads():
    before = sc.get_num_threads()
    yield
    sc.set_num_threads(before)


def _uses(k, marker):
    return marker in k.ir("mlir")


def _check_transposed(dtype, seed):
    rng = np.random.default_rng(seed)
    A = _rand(40, 30, 0.15, dtype, rng, empty_rows=(0, 7))
    B = _rand(40, 25, 0.2, dtype, rng, empty_rows=(3,))
    k = sc.compile("ik,ij->kj")
    got = k(A, B)
    assert isinstance(got, sp.csr_array) and got.has_sorted_indices
    want = np.einsum("ik,ij->kj", _dense(A), _dense(B))
    np.testing.assert_allclose(got.toarray(), want, rtol=1e-12 if dtype != "float32" else 1e-5)
    # the Boolean product's pattern, whatever the values
    patt = (sp.csr_array(A.astype(bool).astype(np.int64)).T @ sp.csr_array(B.astype(bool).astype(np.int64)))
    assert got.nnz == sp.csr_array(patt).nnz
    if dtype != "bool":
        assert _uses(k, "%A0_pos"), "the hand-written SpGEMM transposing A in the kernel did not run"
    return k, A, B, got


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_spgemm(dtype):
    k, A, B, got = _check_transposed(dtype, 0)
    sc.set_num_threads(2)
    again = k(A, B)
    sc.set_num_threads(1)
    one = k(A, B)
    for r in (again, one):
        assert np.array_equal(r.indptr, got.indptr) and np.array_equal(r.indices, got.indices)
        assert np.array_equal(r.data, got.data)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", SLOW_DTYPES)
def test_transposed_spgemm_more_dtypes(dtype):
    _check_transposed(dtype, 1)


def test_transposed_spgemm_edges():
    k = sc.compile("ik,ij->kj")
    empty = sp.csr_array((5, 4))
    B = _rand(5, 3, 0.5, "float64", np.random.default_rng(2))
    assert k(empty, B).nnz == 0 and k(empty, B).shape == (4, 3)
    one = sp.csr_array((np.array([3.0]), (np.array([2]), np.array([1]))), shape=(5, 4))
    np.testing.assert_allclose(k(one, B).toarray(), one.toarray().T @ B.toarray())
    # unsorted, duplicate-free rows
    A = _rand(5, 4, 0.6, "float64", np.random.default_rng(3))
    U = sp.csr_array((A.data[::-1].copy(), A.indices[::-1].copy(), A.indptr), shape=A.shape)
    for r in range(5):
        lo, hi = A.indptr[r], A.indptr[r + 1]
        U.indices[lo:hi] = A.indices[lo:hi][::-1]
        U.data[lo:hi] = A.data[lo:hi][::-1]
    U.has_sorted_indices = False
    np.testing.assert_allclose(k(U, B).toarray(), A.toarray().T @ B.toarray())


def test_scaled_spgemm():
    rng = np.random.default_rng(4)
    A, B = _rand(30, 20, 0.2, "float64", rng), _rand(20, 25, 0.2, "float64", rng)
    got = sc.evaluate("C[i,j] = sum[k](2.5 * A[i,k] * B[k,j])", A=A, B=B, out_format="csr")
    np.testing.assert_allclose(got.toarray(), 2.5 * (A @ B).toarray())
    Ai, Bi = _rand(30, 20, 0.2, "int32", rng), _rand(20, 25, 0.2, "int32", rng)
    k = sc.compile("C[i,j] = sum[k](A[i,k] * (3 * B[k,j]))", out_format="csr")
    got = k(A=Ai, B=Bi)
    assert got.dtype == np.int32 and _uses(k, "@fill_row")
    np.testing.assert_array_equal(got.toarray(), 3 * (Ai.toarray() @ Bi.toarray()))
    # a constant that widens the dtype keeps the sparsifier's kernel, with NumPy's result
    got = sc.evaluate("C[i,j] = sum[k](A[i,k] * (0.5 * B[k,j]))", A=Ai, B=Bi, out_format="csr")
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.toarray(), 0.5 * (Ai.toarray() @ Bi.toarray()))


def test_hessian_least_squares_runs_spgemm():
    rng = np.random.default_rng(5)
    A = _rand(60, 25, 0.1, "float64", rng, empty_rows=(1,))
    x, b = rng.random(25), rng.random(60)
    H = sc.hessian("f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)", wrt="x")
    got = H(A=A, x=x, b=b)
    np.testing.assert_allclose(got.toarray(), 2 * (A.T @ A).toarray(), rtol=1e-12)
    k = next(iter(H._kernels.values()))
    assert _uses(k, "%A0_pos")


# ------------------------------------------------------------------ ij,jk,ik-> (masked sum)
def _tri(n, density, rng, dtype="float64"):
    G = sp.random_array((n, n), density=density, format="csr", rng=rng)
    L = sp.csr_array(sp.tril(G + G.T, -1))
    L.data[:] = 1
    return sp.csr_array(L.astype(dtype))


@pytest.fixture(scope="module")
def tri_kernel():
    return sc.compile("ij,jk,ik->", "csr", "csr", "csr")


@pytest.mark.parametrize("dtype", ["float64", "int64", "complex128"])
def test_masked_sum(tri_kernel, dtype):
    rng = np.random.default_rng(6)
    A, B, C = (_rand(30, 30, 0.2, dtype, rng, empty_rows=(0, 5)) for _ in range(3))
    sc.set_num_threads(1)
    one = tri_kernel(A, B, C)
    want = np.einsum("ij,jk,ik->", _dense(A), _dense(B), _dense(C))
    np.testing.assert_allclose(one, want, rtol=1e-12)
    assert _uses(tri_kernel, "@row_sum")
    sc.set_num_threads(2)
    two = tri_kernel(A, B, C)
    assert np.asarray(one).tobytes() == np.asarray(two).tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["int32", "float32", "bool"])
def test_masked_sum_more_dtypes(tri_kernel, dtype):
    rng = np.random.default_rng(7)
    A, B, C = (_rand(20, 20, 0.3, dtype, rng) for _ in range(3))
    want = np.einsum("ij,jk,ik->", _dense(A), _dense(B), _dense(C))
    np.testing.assert_allclose(tri_kernel(A, B, C), want, rtol=1e-5)


def test_masked_sum_edges(tri_kernel):
    Z = sp.csr_array((6, 6))
    L = _tri(6, 0.5, np.random.default_rng(8))
    assert tri_kernel(Z, Z, Z) == 0 and tri_kernel(L, Z, L) == 0
    one = sp.csr_array((np.array([2.0]), (np.array([1]), np.array([0]))), shape=(6, 6))
    assert tri_kernel(one, one, one) == 0
    E = sp.csr_array((3, 3))
    assert tri_kernel(E[:0], E, E[:0]) == 0


def test_triangles_networkx():
    nx = pytest.importorskip("networkx")
    G = nx.gnm_random_graph(80, 400, seed=9)
    L = sp.csr_array(sp.tril(nx.to_scipy_sparse_array(G, format="csr"), -1))
    L.data[:] = 1.0
    got = sc.einsum("ij,jk,ik->", L, L, L)
    assert got == sum(nx.triangles(G).values()) // 3
