"""Adversarial element-wise sums with sparse results: the stored pattern must be exactly
what docs/sparse-results.md's rules say (a union for +/-), whatever the operands' layouts
and the result's, with 0-d scale operands on either term (what sc.ops.add/sub(alpha=)
build).  Oracle: written-out lattice values over the operands' stored coordinates."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc


def _stored(M):
    out = np.zeros(M.shape, bool)
    c = M.tocoo()
    out[c.coords] = True
    return out


def _lattice(stmt_form, op, X, Y, a, b):
    """The union's values: both stored -> the expression; one -> that term alone."""
    Xd, Yd = X.toarray(), Y.toarray()
    L = {"aX": a * Xd, "X": Xd}[stmt_form[0]]
    R = {"Yb": Yd * b, "bY": b * Yd, "Y": Yd}[stmt_form[1]]
    mx, my = _stored(X), _stored(Y)
    both = L + R if op == "+" else L - R
    return np.where(mx & my, both, np.where(mx, L, np.where(my, R if op == "+" else -R, 0))), mx | my


_FORMS = [("X", "bY"), ("aX", "Y"), ("aX", "Yb"), ("X", "Y")]
_ALL = [(lay, out, form, op) for lay in ("csr", "csc", "coo") for out in (None, "csr", "csc", "coo")
        for form in _FORMS for op in "+-"]
# by default: the layouts whose result is built in another order (where a split stored every
# entry), each form once; the whole product with -m slow
_DEFAULT = [("csc", None, ("X", "bY"), "+"), ("csc", "csr", ("aX", "Y"), "-"), ("csr", "csc", ("X", "bY"), "-"),
            ("coo", "csc", ("aX", "Yb"), "+"), ("csc", "coo", ("X", "bY"), "+"), ("csr", None, ("aX", "Yb"), "-"),
            ("csc", "csc", ("X", "Y"), "+")]


@pytest.mark.parametrize("layout,out_format,form,op",
                         _DEFAULT + [pytest.param(*c, marks=pytest.mark.slow) for c in _ALL if c not in _DEFAULT])
def test_scaled_union_stores_exactly_the_union(layout, out_format, form, op):
    rng = np.random.default_rng(11)
    X = sp.random_array((7, 5), density=0.3, format=layout, rng=rng)
    Y = sp.random_array((7, 5), density=0.3, format=layout, rng=rng)
    a, b = np.asarray(-2.0), np.asarray(3.0)
    left = {"aX": "a*X[i,j]", "X": "X[i,j]"}[form[0]]
    right = {"Yb": "Y[i,j]*b", "bY": "b*Y[i,j]", "Y": "Y[i,j]"}[form[1]]
    kw = {"X": X, "Y": Y}
    if "a" in left:
        kw["a"] = a
    if "b" in right:
        kw["b"] = b
    got = sc.evaluate(f"O[i,j] = {left} {op} {right}", out_format=out_format, **kw)
    want, union = _lattice(form, op, X, Y, a, b)
    assert sp.issparse(got)
    np.testing.assert_allclose(got.toarray(), want)
    assert np.array_equal(_stored(got), union), f"{got.nnz} stored, the union has {union.sum()}"


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_ops_add_with_alpha_stores_the_union(layout):
    rng = np.random.default_rng(12)
    X = sp.random_array((40, 30), density=0.05, format=layout, rng=rng)
    Y = sp.random_array((40, 30), density=0.05, format=layout, rng=rng)
    got = sc.ops.add(X, Y, alpha=2)
    np.testing.assert_allclose(got.toarray(), X.toarray() + 2 * Y.toarray())
    assert np.array_equal(_stored(got), _stored(X) | _stored(Y))
