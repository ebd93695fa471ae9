"""Index notation against NumPy, and the parser's structure (TACO's rule for implicit sums)."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.expr import Binary, Reduce
from sparsecc.parse import parse_einsum, parse_notation
from conftest import assert_matches, random_sparse

rng0 = np.random.default_rng(5)
A = random_sparse((6, 5), 0.4, np.float64, rng0, fmt="csr")
B = random_sparse((6, 5), 0.4, np.float64, rng0, fmt="csr")
Ad, Bd = A.toarray(), B.toarray()
x = rng0.uniform(0.5, 1.5, 5)
b = rng0.uniform(0.5, 1.5, 6)
C = rng0.uniform(0.5, 1.5, (5, 3))

CASES = [
    ("y[i] = A[i,j] * x[j] + 2.5 * b[i]", dict(A=A, x=x, b=b), Ad @ x + 2.5 * b),
    ("y[i] = A[i,j] * x[j] + b[i]", dict(A=A, x=x, b=b), Ad @ x + b),
    ("y[i] = b[i] - A[i,j] * x[j]", dict(A=A, x=x, b=b), b - Ad @ x),
    ("y[i] = sum[j](A[i,j] * x[j]) / 4", dict(A=A, x=x), Ad @ x / 4),
    ("y[i] = alpha * A[i,j] * x[j]", dict(A=A, x=x, alpha=3.0), 3.0 * (Ad @ x)),
    ("y[i] = A[i,j] * x[j] / alpha", dict(A=A, x=x, alpha=2.0), (Ad @ x) / 2.0),
    ("Y[i,j] = A[i,j] + B[i,j]", dict(A=A, B=B), Ad + Bd),
    ("Y[i,j] = A[i,j] - B[i,j]", dict(A=A, B=B), Ad - Bd),
    ("Y[i,j] = A[i,j] * B[i,j]", dict(A=A, B=B), Ad * Bd),
    ("Y[i,j] = A[i,j] + 2.5", dict(A=A), Ad + 2.5),
    ("Y[i,j] = -A[i,j]", dict(A=A), -Ad),
    ("Y[i,j] = exp(A[i,j])", dict(A=A), np.exp(Ad)),
    ("Y[i,j] = cos(A[i,j])", dict(A=A), np.cos(Ad)),
    ("Y[i,j] = sqrt(A[i,j]) + abs(B[i,j])", dict(A=A, B=B), np.sqrt(Ad) + np.abs(Bd)),
    ("Y[i,j] = tanh(A[i,j]) * sin(B[i,j])", dict(A=A, B=B), np.tanh(Ad) * np.sin(Bd)),
    ("Y[i,j] = expm1(A[i,j]) + log1p(B[i,j])", dict(A=A, B=B), np.expm1(Ad) + np.log1p(Bd)),
    ("Y[i,j] = log(A[i,j] + 1)", dict(A=A), np.log(Ad + 1)),
    ("Y[i,k] = A[i,j] * C[j,k]", dict(A=A, C=C), Ad @ C),
    ("s = A[i,j] * A[i,j]", dict(A=A), (Ad * Ad).sum()),
    ("y[j] = sum[i](A[i,j]) * 2", dict(A=A), Ad.sum(0) * 2),
    ("y[i] = exp(sum[j](A[i,j] * x[j]))", dict(A=A, x=x), np.exp(Ad @ x)),
    ("y[i] = A[i,j] * x[j] + B[i,k] * x[k]", dict(A=A, B=B, x=x), Ad @ x + Bd @ x),
    ("Y[i,j] = (A[i,j] + B[i,j]) * x[j] - 1e-3", dict(A=A, B=B, x=x), (Ad + Bd) * x - 1e-3),
]


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc", "dcsr"])
@pytest.mark.parametrize("stmt,operands,want", CASES, ids=[c[0] for c in CASES])
def test_evaluate(stmt, operands, want, fmt):
    formats = {k: fmt for k, v in operands.items() if sp.issparse(v)}
    with np.errstate(all="ignore"):
        assert_matches(sc.evaluate(stmt, formats=formats, **operands), np.asarray(want))


def test_compile_reusable_with_named_formats():
    k = sc.compile("y[i] = A[i,j] * x[j] + 2.5 * b[i]", A="csc")
    assert_matches(k(A=A, x=x, b=b), Ad @ x + 2.5 * b)
    assert_matches(k(A, x, b), Ad @ x + 2.5 * b)   # positional, in order of appearance


def test_complex_constant_and_float32_stays_float32():
    A32 = A.astype(np.float32)
    got = sc.evaluate("Y[i,j] = 2.5 * A[i,j]", A=A32)
    assert got.dtype == np.float32
    assert_matches(sc.evaluate("Y[i,j] = 2j * A[i,j]", A=A), 2j * Ad)


def test_taco_rule_places_sum_at_smallest_subexpression():
    s = parse_notation("y[i] = A[i,j] * x[j] + b[i]")
    assert isinstance(s.expr, Binary) and s.expr.op == "+"
    assert isinstance(s.expr.left, Reduce) and s.expr.left.indices == ("j",)
    s = parse_notation("y[i] = b[i] * (A[i,j] * x[j])")
    assert isinstance(s.expr.right, Reduce)


def test_einsum_and_notation_share_the_ir():
    e = parse_einsum("ij,j->i", 2)
    n = parse_notation("out[i] = A[i,j] * x[j]")
    assert e == parse_einsum("ij,j->i", 2) and hash(e) == hash(parse_einsum("ij,j->i", 2))
    assert str(e) == "out[i] = sum[j]((T0[i,j] * T1[j]))"
    # the same tree up to operand names
    assert str(n).replace("A", "T0").replace("x", "T1") == str(e)
    assert type(n.expr) is type(e.expr) and n.expr.indices == e.expr.indices


def test_unstored_entries_are_zero_for_non_zero_preserving_functions():
    one = sp.csr_array((np.array([2.0]), np.array([1]), np.array([0, 1, 1])), shape=(2, 3))
    got = sc.evaluate("Y[i,j] = exp(A[i,j])", A=one)
    assert_matches(got, np.exp(one.toarray()))


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("fn", ["exp", "cos", "log", "sqrt", "tanh"])
def test_functions_of_sparse_operands_every_float_dtype(fn, dtype):
    """f(0) for unstored entries, as an absent-region constant of the right type (f32 -inf,
    complex constants hoisted out of the loop body)."""
    rng = np.random.default_rng(8)
    M = random_sparse((5, 4), 0.4, dtype, rng, fmt="csr")
    with np.errstate(all="ignore"):
        want = getattr(np, fn)(M.toarray())
    tol = 1e-4 if dtype in ("float32", "complex64") else 1e-10
    got = sc.evaluate(f"Y[i,j] = {fn}(A[i,j])", A=M)
    assert got.dtype == want.dtype
    if fn in ("sqrt", "tanh"):      # f(0) == 0: the result keeps A's pattern (a csr_array)
        assert sp.issparse(got)
        got = got.toarray()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
