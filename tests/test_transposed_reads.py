"""One sparse operand read in two index orders (``A[k,l] + A[l,k]``), against NumPy on dense copies.

MLIR 22's sparsifier breaks a cycle in a loop nest's iteration graph by converting one input
value; with one value read twice both reads' constraints are dropped and the compile aborts
(``resolveCycle``: ``!dimToLvl.isIdentity()``).  The compile retry then fell back to the split
form, whose dense temporary made a sparse result store every entry (``Id_[k,l] + A[k,l] +
A[l,k]``, the Hessian of a quadratic form plus a diagonal: 49 stored entries of 7 x 7 where the
union has 21).  The emitter now gives each read that disagrees with the loop order a copy of
its own (``dialect/workarounds.own_order_reads``).  Its sibling: a contraction into a sparse
result reading one operand in two orders (``sum[i](A[i,k] * A[i,l])``, AᵀA) ran in the
inner-product order, because the runtime stores an operand in one order by name.

Patterns are written out with NumPy Booleans from the operands' stored patterns (stored zeros
count).  The default run compiles a few CSR kernels; every operand/result format is ``-m slow``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

N = 7


def _stored(x):
    c = sp.coo_array(x)
    m = np.zeros(c.shape, bool)
    m[tuple(c.coords)] = True
    return m


def _operands():
    rng = np.random.default_rng(40)
    A = sp.random_array((N, N), density=0.2, format="csr", random_state=rng)
    B = sp.random_array((N, N), density=0.3, format="csr", random_state=rng)
    A.data += 0.5
    B.data += 0.5
    A.data[0] = 0.0                        # a stored zero: in the pattern
    return A, B, rng.uniform(0.5, 1.0, N)


def _mm(P, Q):
    return (P.astype(int) @ Q.astype(int)) > 0


#: statement -> (values from dense A, B, c; pattern from A's and B's stored patterns P, Q)
CASES = {
    "C[k,l] = c[k] * Id_[k,l] + A[k,l] + A[l,k]":
        (lambda A, B, c: np.diag(c) + A + A.T, lambda P, Q, E: E | P | P.T),
    "C[k,l] = B[k,l] + A[k,l] + A[l,k]": (lambda A, B, c: B + A + A.T, lambda P, Q, E: Q | P | P.T),
    "C[k,l] = A[k,l] * B[k,l] + A[l,k]": (lambda A, B, c: A * B + A.T, lambda P, Q, E: (P & Q) | P.T),
    "C[k,l] = (A[k,l] - 2 * A[l,k]) * B[k,l]": (lambda A, B, c: (A - 2 * A.T) * B, lambda P, Q, E: (P | P.T) & Q),
    "C[k,l] = where(A[k,l] > 0.7, A[l,k], B[k,l])":
        (lambda A, B, c: np.where(A > 0.7, A.T, B), lambda P, Q, E: (P & P.T) | Q),
    "C[k,l] = A[k,l] * A[l,k]": (lambda A, B, c: A * A.T, lambda P, Q, E: P & P.T),
    "C[k,l] = sum[i](A[i,k] * A[i,l])": (lambda A, B, c: A.T @ A, lambda P, Q, E: _mm(P.T, P)),
    "C[k,l] = sum[i](A[k,i] * A[l,i])": (lambda A, B, c: A @ A.T, lambda P, Q, E: _mm(P, P.T)),
}
DEFAULT = [(s, "csr", "csr") for s in list(CASES)[:3]] + [("C[k,l] = sum[i](A[i,k] * A[i,l])", "csr", "csr")]
SWEEP = [c for c in itertools.product(CASES, ["csr", "csc", "coo"], ["csr", "csc", "coo"]) if c not in DEFAULT]


def _check(stmt, fmt, out):
    A, B, c = _operands()
    values, pattern = CASES[stmt]
    k = sc.compile(stmt, out_format=out)
    ops = dict(A=A.asformat(fmt), B=B.asformat(fmt), c=c, Id_=sp.eye_array(N, format=fmt))
    got = k(**{n: x for n, x in ops.items() if n in k.stmt.operands})
    assert sp.issparse(got)
    np.testing.assert_allclose(got.toarray(), values(A.toarray(), B.toarray(), c), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(_stored(got), pattern(_stored(A), _stored(B), np.eye(N, dtype=bool)))
    return k


@pytest.mark.parametrize("stmt, fmt, out", DEFAULT)
def test_one_operand_in_two_orders(stmt, fmt, out):
    _check(stmt, fmt, out)


@pytest.mark.slow
@pytest.mark.parametrize("stmt, fmt, out", SWEEP)
def test_one_operand_in_two_orders_sweep(stmt, fmt, out):
    _check(stmt, fmt, out)


def test_contraction_reads_each_order_in_gustavson_order():
    # AᵀA with one operand: the read the runtime's storage order does not suit gets its own
    # copy (a convert inside the kernel) instead of leaving the inner-product loop order
    k = _check("C[k,l] = sum[i](A[i,k] * A[i,l])", "csr", "csr")
    text = k.ir("mlir")
    assert text.count("sparse_tensor.convert") == 1
    assert "(d0, d1) -> (d0 : dense, d1 : compressed)" in text and "(d0, d1) -> (d1 : dense, d0 : compressed)" in text
