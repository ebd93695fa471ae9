"""Adversarial calls (a hostile user's operands) of the call path: the repeated-call path
next to the general one, index dtypes SciPy's own routines refuse, operands changed in
place between calls.  Each result is compared with numpy.einsum on dense copies; bad input
must be a SparseccError before native code runs."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc


def _csr(m, n, density, rng, fmt="csr"):
    return sp.random_array((m, n), density=density, format=fmt, rng=rng)


@pytest.mark.parametrize("fmt", ["csr", "csc", "bsr"])
@pytest.mark.parametrize("m,n", [(4, 3), (300, 200)])
def test_uint64_index_arrays_are_an_operand_error(fmt, m, n):
    # SciPy's sparsetools take int32/int64 indices only: a uint64 indptr/indices used to
    # reach has_canonical_format (ValueError) or BSR's conversion (TypeError)
    rng = np.random.default_rng(0)
    A = _csr(m, n, 0.3, rng).asformat(fmt).copy()
    A.indices = A.indices.astype(np.uint64)
    A.indptr = A.indptr.astype(np.uint64)
    before = (A.indices.copy(), A.indptr.copy())
    x = rng.random(n)
    with pytest.raises(sc.OperandError, match="uint64"):
        sc.einsum("ij,j->i", A, x)
    assert A.indices.dtype == np.uint64 and np.array_equal(A.indices, before[0])
    assert np.array_equal(A.indptr, before[1])
    # the same arrays as int64 work, before and after
    B = A.copy()
    B.indices = B.indices.astype(np.int64)
    B.indptr = B.indptr.astype(np.int64)
    np.testing.assert_allclose(sc.einsum("ij,j->i", B, x), np.einsum("ij,j->i", B.toarray(), x))


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("expr,others", [
    ("ij,ik,kj->ij", lambda rng: [rng.random((5, 3)), rng.random((3, 4))]),
    ("ij,jk->ik", lambda rng: [sp.random_array((4, 3), density=0.5, format="csr", rng=rng)]),
    ("ij,j->i", lambda rng: [rng.random(4)]),
    ("ji,j->i", lambda rng: [rng.random(5)]),
    ("ij->ji", lambda rng: []),
])
@pytest.mark.parametrize("ptr,idx", [(np.int64, np.int32), (np.int32, np.int64)])
def test_mixed_index_dtypes_in_any_layout(fmt, expr, others, ptr, idx):
    # an int64 indptr next to int32 indices: SciPy's own tocoo() raised a bare ValueError
    # ("Output dtype not compatible with inputs") when the kernel wanted another layout
    rng = np.random.default_rng(1)
    A = sp.random_array((5, 4), density=0.5, format=fmt, rng=rng)
    A.indptr = A.indptr.astype(ptr)
    A.indices = A.indices.astype(idx)
    ops = others(rng)
    want = np.einsum(expr, A.toarray(), *[o.toarray() if sp.issparse(o) else o for o in ops])
    for _ in range(2):
        got = sc.einsum(expr, A, *ops)
        got = got.toarray() if sp.issparse(got) else got
        np.testing.assert_allclose(got, want)
    assert A.indptr.dtype == ptr and A.indices.dtype == idx


def test_mixed_index_dtypes_in_ops_that_read_coordinates():
    # the same SciPy tocoo() failure in the op library (sibling of the kernel call path)
    rng = np.random.default_rng(2)
    A = sp.random_array((5, 4), density=0.5, format="csr", rng=rng)
    A.indptr = A.indptr.astype(np.int64)
    D = rng.random((5, 4))
    got = sc.ops.sparse_mask(D, A)
    np.testing.assert_allclose(got.toarray(), np.where(A.toarray() != 0, D, 0))


class _MyCSR(sp.csr_array):
    pass


class _MyCSC(sp.csc_matrix):
    pass


class _MyArray(np.ndarray):
    pass


@pytest.mark.parametrize("cls", [_MyCSR, _MyCSC])
def test_subclasses_of_scipy_arrays_next_to_their_bases(cls):
    # a user subclass of csr_array has a call-plan key of another shape than csr_array's:
    # making its repeated-call path raised "too many values to unpack" on the first call
    rng = np.random.default_rng(3)
    base = sp.random_array((6, 5), density=0.4, format="csr", rng=rng)
    A = cls(base)
    x = rng.random(5)
    k = sc.compile("ij,j->i")
    for op in (A, A, base, A, sp.csr_matrix(base), A):
        for v in (x, x.view(_MyArray)):
            np.testing.assert_allclose(k(op, v), np.einsum("ij,j->i", op.toarray(), np.asarray(v)))


def _loose_bools(values):
    """A bool array whose bytes are not all 0/1 (a uint8 view, as np.frombuffer or an image
    mask gives): NumPy reads every nonzero byte as True."""
    return np.asarray(values, np.uint8).view(np.bool_)


@pytest.mark.parametrize("expr,make", [
    ("ij,j->i", lambda xb: [sp.csr_array(np.ones((2, 4))), xb]),
    ("ij,j->i", lambda xb: [sp.csr_array((xb, np.arange(4), np.array([0, 4])), shape=(1, 4)), np.ones(4)]),
    ("ij,j->i", lambda xb: [sp.coo_array((xb, (np.zeros(4, np.int64), np.arange(4))), shape=(1, 4)), np.ones(4)]),
    ("j,j->j", lambda xb: [xb, xb[::-1].copy()]),
    ("j,j->", lambda xb: [xb, np.arange(4.0)]),
    ("ij,j->i", lambda xb: [sp.csr_array(np.ones((1, 4), bool)), xb]),
    ("ij,ij->ij", lambda xb: [sp.csr_array(np.ones((1, 4), bool)), xb.reshape(1, 4)]),
])
def test_bool_bytes_other_than_0_and_1_read_as_numpy_reads_them(expr, make):
    xb = _loose_bools([0, 2, 128, 255])
    ops = make(xb)
    want = np.einsum(expr, *[o.toarray() if sp.issparse(o) else o for o in ops])
    for _ in range(2):      # the general path, then the repeated-call path
        got = sc.einsum(expr, *ops)
        got = got.toarray() if sp.issparse(got) else np.asarray(got)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert np.array_equal(xb.view(np.uint8), [0, 2, 128, 255])     # not modified
