"""``conj(x)`` in index notation: numpy.conjugate on complex values, the value itself on real,
integer and bool ones; conj(0) = 0 keeps a sparse operand's pattern.

Oracles: numpy.conjugate / numpy.einsum on dense copies."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.expr import Unary
from sparsecc.parse import parse_notation
from conftest import assert_matches, random_sparse

DTYPES = [np.complex128, np.complex64, np.float64, np.float32, np.int64, np.int32, np.bool_]


def _operands(dtype, nnz_density=0.4, seed=3):
    rng = np.random.default_rng(seed)
    A = random_sparse((5, 4), nnz_density, dtype, rng, fmt="csr")
    x = random_sparse((4,), 1.0, dtype, rng).toarray()
    return A, x


def test_parse():
    s = parse_notation("Y[i,j] = conj(A[i,j])")
    assert s.expr == Unary("conj", s.expr.arg)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "dense"])
def test_elementwise_keeps_the_pattern(dtype, fmt):
    A, _ = _operands(dtype)
    Ad = A.toarray()
    got = sc.evaluate("Y[i,j] = conj(A[i,j])", A=A if fmt != "dense" else Ad, formats={"A": fmt},
                      out_format=None if fmt == "dense" else "csr")
    want = Ad if Ad.dtype.kind != "c" else np.conjugate(Ad)      # real, int, bool: the value itself
    assert_matches(got, want)
    if fmt != "dense":
        assert sp.issparse(got) and got.nnz == A.nnz             # conj(0) = 0: A's pattern


@pytest.mark.parametrize("dtype", DTYPES[:5])
@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_inside_products_and_sums(dtype, fmt):
    A, x = _operands(dtype, seed=4)
    Ad = A.toarray()
    got = sc.evaluate("y[i] = conj(A[i,j]) * x[j]", A=A, x=x, formats={"A": fmt})
    assert_matches(got, np.einsum("ij,j->i", np.conjugate(Ad), x))
    got = sc.evaluate("y[i] = conj(A[i,j] * x[j])", A=A, x=x, formats={"A": fmt})
    assert_matches(got, np.conjugate(np.einsum("ij,j->i", Ad, x)))
    if np.dtype(dtype).kind in "fc":
        assert_matches(sc.evaluate("Y[i,j] = exp(conj(A[i,j]))", A=A, formats={"A": fmt}), np.exp(np.conjugate(Ad)))


@pytest.mark.parametrize("nnz", [0, 1])
def test_empty_and_single_entry(nnz):
    A = sp.csr_array((np.array([1 + 2j] * nnz), np.array([2] * nnz), np.array([0, nnz, nnz])), shape=(2, 3))
    got = sc.evaluate("Y[i,j] = conj(A[i,j])", A=A, out_format="csr")
    assert_matches(got, np.conjugate(A.toarray()))
    assert got.nnz == nnz


def test_constants_fold_and_dtypes():
    x = np.array([1 + 1j, 2 - 3j])
    assert_matches(sc.evaluate("y[i] = x[i] * conj(2j)", x=x), x * np.conjugate(2j))
    b = np.array([True, False])
    got = sc.evaluate("y[i] = conj(b[i])", b=b)
    assert got.dtype == np.bool_                                  # not NumPy's int8: the value itself
    np.testing.assert_array_equal(got, b)


def test_user_operands_unchanged():
    A, _ = _operands(np.complex128, seed=9)
    before = A.data.copy()
    sc.evaluate("Y[i,j] = conj(A[i,j])", A=A, out_format="csr")
    np.testing.assert_array_equal(A.data, before)
