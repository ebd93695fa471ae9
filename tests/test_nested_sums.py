"""Statements whose body holds a reduction (plan/nested.py): a sparse result stores exactly
the pattern docs/sparse-results.md's rules give - the Boolean product for the nested sum,
then union/intersection with the other terms - and the values numpy.einsum gives on dense
copies.  Before the fix the nested sum filled a dense temporary of the result's shape and a
sparse result stored every entry (``sum[i](AT[k,i] * B[i,l]) + I[k,l]``: 3600 of 3600)."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

N = 12
DTYPES = ["bool", "int64", "float64", "complex128"]
FORMATS = ["csr", "csc", "coo", "dcsr"]


def _pat(x):
    """The stored pattern (structural: a stored zero counts)."""
    c = sp.coo_array(x)
    c.sum_duplicates()
    out = np.zeros(c.shape, bool)
    out[c.coords] = True
    return out


def _bp(a, b):
    return (_pat(a).astype(np.int64) @ _pat(b).astype(np.int64)) != 0


def _mm(a, b):
    return np.einsum("ik,kj->ij", a.toarray(), b.toarray())


def _operand(seed, dtype, fmt, density=0.15, empty=False):
    rng = np.random.default_rng(seed)
    m = (rng.random((N, N)) < density) & (not empty)
    # values 0..3 with stored zeros: a pattern read from values (a dense temporary converted
    # back) drops them, the rules keep them
    v = rng.integers(0, 4, (N, N)) if dtype != "complex128" else rng.integers(0, 4, (N, N)) + 1j * rng.integers(0, 2, (N, N))
    r, c = np.nonzero(m)
    a = sp.csr_array((v[r, c].astype(dtype), (r, c)), shape=(N, N))
    return a.asformat(fmt) if fmt != "dcsr" else a


def _min_product(a, b):
    """min over k of A[i,k] * B[k,j] where both are stored; unstored (0) where none is."""
    da, db, pa, pb = a.toarray(), b.toarray(), _pat(a), _pat(b)
    out = np.zeros((N, N), da.dtype)
    for i, j in itertools.product(range(N), range(N)):
        vals = [da[i, k] * db[k, j] for k in range(N) if pa[i, k] and pb[k, j]]
        if vals:
            out[i, j] = min(vals)
    return out


# (statement, operands, oracle value, oracle pattern, dtypes it is defined for)
SHAPES = {
    "sum_plus_sparse": ("J[i,j] = sum[k](A[i,k] * B[k,j]) + I[i,j]", "ABI",
                        lambda o: _mm(o["A"], o["B"]) + o["I"].toarray(),
                        lambda o: _bp(o["A"], o["B"]) | _pat(o["I"]), DTYPES),
    "mask_times_sum": ("C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])", "MAB",
                       lambda o: o["M"].toarray() * _mm(o["A"], o["B"]),
                       lambda o: _pat(o["M"]) & _bp(o["A"], o["B"]), DTYPES),
    "function_of_sum": ("C[i,j] = neg(sum[k](A[i,k] * B[k,j]))", "AB",
                        lambda o: -_mm(o["A"], o["B"]), lambda o: _bp(o["A"], o["B"]),
                        ["int64", "float64", "complex128"]),
    "two_sums": ("C[i,j] = sum[k](A[i,k] * B[k,j]) + sum[l](D[i,l] * E[l,j])", "ABDE",
                 lambda o: _mm(o["A"], o["B"]) + _mm(o["D"], o["E"]),
                 lambda o: _bp(o["A"], o["B"]) | _bp(o["D"], o["E"]), DTYPES),
    "min_plus_sparse": ("C[i,j] = min[k](A[i,k] * B[k,j]) + I[i,j]", "ABI",
                        lambda o: _min_product(o["A"], o["B"]) + o["I"].toarray(),
                        lambda o: _bp(o["A"], o["B"]) | _pat(o["I"]), ["int64", "float64"]),
}

CASES = [(s, d, f) for s, (_, _, _, _, ds) in SHAPES.items() for d in ds for f in FORMATS]
# cheap by default: every shape once per dtype and once per format, the rest slow
_DEFAULT = set()
for _s, (_, _, _, _, _ds) in SHAPES.items():
    for _k, _d in enumerate(_ds):
        _DEFAULT.add((_s, _d, FORMATS[_k % len(FORMATS)]))
PARAMS = [pytest.param(*c, marks=() if c in _DEFAULT else pytest.mark.slow) for c in CASES]


def _check(shape, dtype, fmt, empty=(), optimize=True):
    text, names, value, pattern, _ = SHAPES[shape]
    ops = {n: _operand(7 * k + 1, dtype, fmt, 0.5 if n == "M" else 0.15, n in empty) for k, n in enumerate(names)}
    if "I" in ops:
        ops["I"] = sp.eye_array(N, dtype=dtype, format=fmt if fmt != "dcsr" else "csr")
    formats = {n: "dcsr" for n in names} if fmt == "dcsr" else None
    got = sc.evaluate(text, formats=formats, out_format=fmt, optimize=optimize, **ops)
    want_pat = pattern(ops)
    assert (_pat(got) == want_pat).all(), f"{text}: stores {int(_pat(got).sum())}, the rule gives {int(want_pat.sum())}"
    assert sp.coo_array(got).nnz == int(want_pat.sum())
    np.testing.assert_allclose(sp.coo_array(got).toarray(), value(ops))


@pytest.mark.parametrize("shape,dtype,fmt", PARAMS)
def test_pattern_and_values(shape, dtype, fmt):
    _check(shape, dtype, fmt)


@pytest.mark.parametrize("shape", ["mask_times_sum", "sum_plus_sparse"])
def test_one_nest_requested(shape):
    """optimize=False keeps the nested sum a step of its own (no dense temporary)."""
    _check(shape, "float64", "csr", optimize=False)


@pytest.mark.parametrize("shape,empty", [("sum_plus_sparse", "A"), ("two_sums", "ABDE"), ("mask_times_sum", "M")])
def test_empty_operands(shape, empty):
    _check(shape, "float64", "csr", empty=empty)


def test_plan_says_so():
    A = _operand(1, "float64", "csr")
    p = sc.plan("J[i,j] = sum[k](A[i,k] * B[k,j]) + I[i,j]", A=A, B=A, I=A, out_format="csr")
    assert len(p.steps) == 2 and p.steps[0].format == "csr" and "nested" in p.reason


def test_dense_result_unchanged():
    """A dense result keeps the one nest (its temporary costs what the result does)."""
    A = _operand(1, "float64", "csr")
    k = sc.compile("J[i,j] = sum[k](A[i,k] * B[k,j]) + I[i,j]", out_format="dense")
    assert k.plan(A=A, B=A, I=A).single
    np.testing.assert_allclose(k(A=A, B=A, I=A), _mm(A, A) + A.toarray())
