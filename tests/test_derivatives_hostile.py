"""Hostile inputs for the derivative API (docs/derivatives.md): empty operands, size-1
dimensions, a wrt that is no operand, stored zeros, duplicates in COO, integer and Boolean
dtypes, index overflow, and values asked for a pattern computed for other operands.  Oracles
are written out by hand (values of these tiny cases), and crash candidates run in a
subprocess so an abort fails the test instead of killing the run.  Kernels are shared."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.derivatives import PatternError

R = "r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) * sum[j](L[i,j] * L[i,j]) - f[i]"
O = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)"
JL, JU, JV = sc.jacobian(R, wrt="L"), sc.jacobian(R, wrt="u"), sc.jvp(R, wrt="L")
H, HV = sc.hessian(O, wrt="A"), sc.hvp(O, wrt="A")


def _r(L, u, lam=0.8):
    return dict(L=L, u=u, lam=lam, f=np.ones(len(u)))


@pytest.mark.parametrize("shape", [(0, 0), (3, 3), (1, 1)])
def test_empty_and_size1(shape):
    n = shape[0]
    L = sp.csr_array(shape)                              # stores nothing
    u = np.full(n, 0.5)
    assert JL(**_r(L, u)).shape == (n, 0)
    np.testing.assert_array_equal(JV(**_r(L, u), tangent=np.zeros(0)), np.zeros(n))
    assert JL.pattern(L=L)[1].size == 0 and JL.values(**_r(L, u)).size == 0
    A = sp.csr_array((n, 2))
    assert H(A=A, x=np.ones(2), b=np.ones(n)).shape == (0, 0)
    assert HV(A=A, x=np.ones(2), b=np.ones(n), tangent=np.zeros(0)).shape == (0,)
    one = sp.csr_array(np.full((1, 1), 3.0))
    np.testing.assert_allclose(H(A=one, x=np.array([2.0]), b=np.ones(1)).toarray(), [[8.0]])


def test_wrt_not_an_operand_and_stored_zeros():
    for make in (sc.jacobian, sc.jvp, sc.hvp, sc.gradient):
        with pytest.raises(sc.SparseccError, match="not an operand"):
            make(R if make in (sc.jacobian, sc.jvp) else O, wrt="nothere")
    L = sp.csr_array((np.zeros(3), np.array([0, 1, 2]), np.array([0, 1, 2, 3])), shape=(3, 3))
    u = np.array([0.1, 0.2, 0.3])
    got = JL(**_r(L, u))
    assert got.nnz == 3                                  # a stored zero is a variable
    np.testing.assert_allclose(got.toarray(), np.diag(u), rtol=1e-12)   # lam * exp * 2 * 0 vanishes


def test_duplicates_and_unsorted_are_read_canonically():
    L = sp.coo_array((np.array([1.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([1, 1, 0]))), shape=(2, 2))
    u = np.array([1.0, 2.0])
    got = JL(**_r(L, u, lam=0.0))                        # entries (0,1) = 3 and (1,0) = 3
    np.testing.assert_allclose(got.toarray(), [[u[1], 0], [0, u[0]]])
    np.testing.assert_allclose(H(A=L, x=u, b=np.ones(2)).toarray(), 2 * np.diag([u[1] ** 2, u[0] ** 2]))
    U = sp.csr_array((np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 2, 2])), shape=(2, 2))
    U.has_sorted_indices = False
    np.testing.assert_allclose(JL(**_r(U, u, lam=0.0)).toarray(), [[u[0], u[1]], [0, 0]])


def test_integer_and_bool_dtypes():
    with pytest.raises(sc.DTypeError, match="floating-point"):
        H(A=sp.csr_array(np.eye(2, dtype=np.int64)), x=np.ones(2), b=np.ones(2))
    with pytest.raises(sc.DTypeError, match="floating-point"):
        JV(**_r(sp.csr_array(np.eye(2, dtype=bool)), np.ones(2)), tangent=np.ones(2))
    with pytest.raises(sc.DTypeError, match="tangent"):
        HV(A=sp.csr_array(np.eye(2)), x=np.ones(2), b=np.ones(2), tangent=np.ones(2, np.int64))
    with pytest.raises(sc.OperandError, match="stored entry"):
        HV(A=sp.csr_array(np.eye(2)), x=np.ones(2), b=np.ones(2), tangent=np.ones(3))


def test_stale_pattern_is_refused():
    L = sp.csr_array(np.array([[2.0, 0], [1, 3]]))
    ops = _r(L, np.ones(2))
    for J in (JL, JU):
        for layout in ("csr", "csc", "coo"):
            p = J.pattern(L=L, layout=layout)
            np.testing.assert_array_equal(J.values(**ops, layout=layout, pattern=p), J.values(**ops, layout=layout))
            with pytest.raises(PatternError, match="pattern"):
                J.values(**dict(ops, L=sp.csr_array(np.array([[2.0, 1], [1, 3]]))), layout=layout, pattern=p)
    A = sp.csr_array(np.array([[1.0, 2], [0, 3]]))
    p = H.pattern(A=A, layout="coo", triangle="lower")
    H.values(A=A, x=np.ones(2), b=np.ones(2), layout="coo", triangle="lower", pattern=p)
    with pytest.raises(PatternError):
        H.values(A=sp.csr_array(np.eye(2)), x=np.ones(2), b=np.ones(2), layout="coo", triangle="lower", pattern=p)


CRASH = {
    # more entries than int64 positions can number: a clear error, not an overflow
    "overflow": ("L = sp.coo_array((np.ones(1), (np.array([2**35]), np.array([2**35]))), shape=(2**36, 2**36))\n"
                 "try:\n    sc.gradient('f[] = sum[i,j](L[i,j] * L[i,j])', wrt='L')(L=L)\n"
                 "except sc.OperandError as e:\n    print('refused', e)\n"),
    # a huge but numberable shape with one entry: runs, one variable
    "huge": ("L = sp.coo_array((np.array([3.0]), (np.array([2**31 + 5]), np.array([7]))), shape=(2**32, 2**30))\n"
             "g = sc.gradient('f[] = sum[i,j](L[i,j] * L[i,j])', wrt='L')(L=L)\n"
             "print('refused' if g.tolist() == [6.0] else g)\n"),
}


@pytest.mark.parametrize("name", list(CRASH))
def test_crash_candidates_in_a_subprocess(name):
    code = "import numpy as np, scipy.sparse as sp, sparsecc as sc\n" + CRASH[name]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "refused" in p.stdout


def test_pattern_error_exported_with_the_others():
    """sc.PatternError is the derivatives' PatternError, an OperandError, listed in sc.__all__."""
    assert sc.PatternError is PatternError and issubclass(sc.PatternError, sc.OperandError)
    assert "PatternError" in sc.__all__
