"""``where`` over sparse operands in every storage order, against NumPy on dense copies.

``where(c, a, b)`` with two tensor branches runs as ``where(c, a, 0) + where(c, 0, b)``; each half
is a ``sparse_tensor`` region op whose regions say what an unstored entry means.  The regions
must give NumPy's value for every combination of stored/unstored condition and branch, in any
loop order the operands' formats impose (a condition read from a vector indexed by the outer
loop - ``x[j]`` next to CSC operands, ``y[i]`` next to CSR ones - is the case that went wrong).

Each kernel is compiled once and called on several operands (the issue's example, random ones,
an empty one, one with a single entry).  The default run keeps a few combinations; the whole
sweep is ``-m slow``.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from conftest import seed

# the example (issue 27, item 1)
AD = np.array([[1, 0, 2, 0], [0, 3, 4, 0], [5, 0, 0, 6]], float)
BD = np.array([[0, 7, 0, 8], [9, 0, 10, 0], [0, 11, 12, 0]], float)
XD = np.array([.9, .1, .9, .1])


def _where(c, a, b):
    return np.where(c, a, b)


#: statement -> NumPy on dense copies (A, B: (m, n); x: (n,); y: (m,))
EXPRS = {
    "C[i,j] = where(x[j] > 0.5, A[i,j], 2.0 * B[i,j])": lambda A, B, x, y, **_: _where(x[None, :] > .5, A, 2.0 * B),
    "C[i,j] = where(x[j] > 0.5, A[i,j], B[i,j])": lambda A, B, x, y, **_: _where(x[None, :] > .5, A, B),
    "C[i,j] = where(y[i] > 0.5, A[i,j], B[i,j])": lambda A, B, x, y, **_: _where(y[:, None] > .5, A, B),
    "C[i,j] = where(A[i,j] > 4, A[i,j], B[i,j])": lambda A, B, x, y, **_: _where(A > 4, A, B),
    "C[i,j] = where(A[i,j] > 4, B[i,j], 1.0)": lambda A, B, x, y, **_: _where(A > 4, B, 1.0),
    "C[i,j] = where(A[i,j] > 4, 1.0, B[i,j])": lambda A, B, x, y, **_: _where(A > 4, 1.0, B),
    "C[i,j] = where(x[j] > 0.5, B[i,j], 3.0)": lambda A, B, x, y, **_: _where(x[None, :] > .5, B, 3.0),
    "C[i,j] = where(x[j] > 0.5, 3.0, B[i,j])": lambda A, B, x, y, **_: _where(x[None, :] > .5, 3.0, B),
    "C[i,j] = where(x[j] > 0.5, 0, B[i,j])": lambda A, B, x, y, **_: _where(x[None, :] > .5, 0.0, B),
    "C[i,j] = where(y[i] > 0.5, A[i,j], 0) * B[i,j]": lambda A, B, x, y, **_: _where(y[:, None] > .5, A, 0.0) * B,
    # stored(...): only where the condition and both branches store an entry (x is dense, and
    # so is a dense A or B: stored everywhere)
    "C[i,j] = stored(where(x[j] > 0.5, A[i,j], B[i,j]))":
        lambda A, B, x, y, sa, sb: _where(sa & sb, _where(x[None, :] > .5, A, B), 0.0),
}
#: those selecting a nonzero constant: a value at every entry, so no sparse result
EVERY_ENTRY = {e for e in EXPRS if "1.0" in e or "3.0" in e}
FORMATS = ("csr", "csc", "dcsr", "dcsc", "coo", "dense")
OUTS = (None, "dense", "csr", "csc", "coo")
#: the operand format pairs of the sweep: each format with itself, and mixed storage orders
PAIRS = [(f, f) for f in FORMATS] + [("csr", "csc"), ("csc", "csr"), ("dense", "csc"), ("coo", "dcsc"),
                                      ("dcsc", "dense"), ("csc", "coo")]


def _operand(d: np.ndarray, fmt: str):
    if fmt == "dense":
        return d
    if fmt in ("csr", "dcsr"):
        return sp.csr_array(d)
    if fmt in ("csc", "dcsc"):
        return sp.csc_array(d)
    return sp.coo_array(d)


def _datasets(key):
    """The issue's example, random operands of two densities, an empty pair, a single entry."""
    rng = np.random.default_rng(seed(*key))
    out = [(AD, BD, XD, np.array([.2, .7, .9]))]
    for shape, dens in (((5, 7), .4), ((6, 4), .7)):
        A = np.where(rng.random(shape) < dens, rng.integers(1, 9, shape), 0).astype(float)
        B = np.where(rng.random(shape) < dens, rng.integers(1, 9, shape), 0).astype(float)
        out.append((A, B, rng.random(shape[1]), rng.random(shape[0])))
    out.append((np.zeros((3, 4)), np.zeros((3, 4)), XD, np.array([.9, .1, .9])))
    one = np.zeros((3, 4))
    one[2, 0] = 5.0
    out.append((one, one[::-1].copy(), XD, np.array([.9, .9, .9])))
    return out


def _check(expr: str, fa: str, fb: str, out):
    names = set(re.findall(r"\b([ABxy])\[", expr))
    formats = {n: f for n, f in (("A", fa), ("B", fb)) if n in names and f != "dense"}
    k = sc.compile(expr, out_format=out, **formats)
    for A, B, x, y in _datasets((expr, fa, fb, out)):
        ops = {"A": _operand(A, fa), "B": _operand(B, fb), "x": x, "y": y}
        if out not in (None, "dense") and expr in EVERY_ENTRY:
            # a nonzero constant branch stores a value at every entry: a sparse result is refused
            with pytest.raises(sc.FormatError, match="selects the constant"):
                k(**{n: v for n, v in ops.items() if n in names})
            return
        got = k(**{n: v for n, v in ops.items() if n in names})
        if out == "dense":
            assert isinstance(got, np.ndarray)
        elif out is not None:
            assert sp.issparse(got) and got.format == out, (type(got), out)
        got = got.toarray() if sp.issparse(got) else np.asarray(got)
        stored_a = np.full(A.shape, True) if fa == "dense" else A != 0
        stored_b = np.full(B.shape, True) if fb == "dense" else B != 0
        want = EXPRS[expr](A, B, x, y, sa=stored_a, sb=stored_b)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert np.array_equal(got, want), f"{expr} {fa}/{fb} -> {out}\nA=\n{A}\nB=\n{B}\nx={x} y={y}\n" \
                                          f"got\n{got}\nwant\n{want}"


# a default run: the case in the orders that went wrong, and one of each other kind
DEFAULT = [
    ("C[i,j] = where(x[j] > 0.5, A[i,j], 2.0 * B[i,j])", "csc", "csc", None),
    ("C[i,j] = where(x[j] > 0.5, A[i,j], 2.0 * B[i,j])", "dcsc", "dcsc", "dense"),
    ("C[i,j] = where(x[j] > 0.5, A[i,j], B[i,j])", "csc", "csc", None),
    ("C[i,j] = where(y[i] > 0.5, A[i,j], B[i,j])", "csr", "csr", "dense"),
    ("C[i,j] = where(A[i,j] > 4, B[i,j], 1.0)", "csr", "csr", None),
    ("C[i,j] = where(x[j] > 0.5, B[i,j], 3.0)", "csc", "csc", "dense"),
    ("C[i,j] = where(x[j] > 0.5, 0, B[i,j])", "csc", "csc", "dense"),
    ("C[i,j] = stored(where(x[j] > 0.5, A[i,j], B[i,j]))", "csc", "dense", None),
]


@pytest.mark.parametrize("expr,fa,fb,out", DEFAULT)
def test_where_formats(expr, fa, fb, out):
    _check(expr, fa, fb, out)


SWEEP = [(e, fa, fb, o) for e, (fa, fb), o in itertools.product(EXPRS, PAIRS, OUTS)
         if (e, fa, fb, o) not in DEFAULT]


@pytest.mark.slow
@pytest.mark.parametrize("expr,fa,fb,out", SWEEP)
def test_where_formats_sweep(expr, fa, fb, out):
    _check(expr, fa, fb, out)
