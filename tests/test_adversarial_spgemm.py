"""Adversarial tests for the code that landed with SpGEMM's new fill phase: the hand-written
SpGEMM kernel (bitmap marker, prefetch across rows, non-temporal value stores on one thread),
the result position widths chosen from a bound on the stored entries (``kernel.bound_rule``
/ ``entries_bound``, the repeated-call path's width class) and the guard's value prefetch.

Oracles share no code with sparsecc: ``numpy.einsum`` on dense copies, SciPy's ``A @ B``
(sorted) and the structural product (every pair of stored entries sharing ``k``, so entries
that cancel to 0 stay stored).  The default run keeps a few seeded cases; ``-m slow`` runs
more."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import kernel as kernel_mod

from conftest import seed


# --------------------------------------------------------------- result position widths
def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def _no_overflowing_positions(k, C):
    """A result storing more than ``POS32_MAX`` entries never has 32-bit positions."""
    of = k.last_specialization().out_format
    nnz = C.nnz
    if of is not None and of.pos_width == 32:
        assert nnz <= kernel_mod.POS32_MAX, (f"{nnz} stored entries with 32-bit positions "
                                             f"(POS32_MAX {kernel_mod.POS32_MAX})")


def _upper(n, dtype=np.float64):
    """Strictly upper triangular, all stored: ``A + A.T`` stores twice A's entries."""
    a = sp.csr_array(np.triu(np.arange(1, n * n + 1, dtype=dtype).reshape(n, n), 1))
    return a


def _increasing3(n):
    """3-D COO storing (i, j, k) for i < j < k: its two transposes below are disjoint from it."""
    i, j, k = np.indices((n, n, n))
    d = np.where((i < j) & (j < k), 1.0 + i + 2 * j + 3 * k, 0.0)
    return sp.coo_array(d)


# (statement, operands builder, numpy oracle)
_BOUND_CASES = {
    "a_plus_a_t": ("C[i,j] = A[i,j] + A[j,i]", lambda: dict(A=_upper(6)),
                   lambda A: A + A.T),
    "a_minus_a_t": ("C[i,j] = A[i,j] - A[j,i]", lambda: dict(A=_upper(6)),
                    lambda A: A - A.T),
    "neg_a_t_plus_b": ("C[i,j] = -A[j,i] + B[i,j] + A[i,j]", lambda: dict(A=_upper(6), B=_upper(6).T.tocsr()),
                       lambda A, B: -A.T + B + A),
    "a_times_b_plus_a_t": ("C[i,j] = A[i,j] * (B[i,j] + A[j,i])",
                           lambda: dict(A=sp.csr_array(np.ones((6, 6))), B=_upper(6)),
                           lambda A, B: A * (B + A.T)),
    "a_times_b_t": ("C[i,j] = A[i,j] * B[j,i]", lambda: dict(A=sp.csr_array(np.ones((6, 6))), B=_upper(6)),
                    lambda A, B: A * B.T),
    "mask_sum": ("C[i,j] = sum[k](A[i,j] * X[i,k])", lambda: dict(A=_upper(6), X=np.ones((6, 3))),
                 lambda A, X: A * X.sum(1)[:, None]),
    "product": ("C[i,j] = sum[k](A[i,k] * B[k,j])",
                lambda: dict(A=sp.csr_array(np.ones((6, 1))), B=sp.csr_array(np.ones((1, 6)))),
                lambda A, B: A @ B),
    "three_d": ("C[i,j,k] = A[i,j,k] + A[k,j,i] + A[j,i,k]", lambda: dict(A=_increasing3(4)),
                lambda A: A + A.transpose(2, 1, 0) + A.transpose(1, 0, 2)),
}


@pytest.mark.parametrize("out_format", ["csr", "coo", "dcsr", "csc"])
@pytest.mark.parametrize("case", sorted(_BOUND_CASES))
def test_result_positions_never_overflow_32_bits(case, out_format, monkeypatch):
    """POS32_MAX made small, around the result's stored entries: a result storing more than
    it with 32-bit positions would, at the real threshold, overflow them (memory corruption).
    ``A[i,j] + A[j,i]`` reads one operand twice: its union stores up to twice its entries."""
    src, build, oracle = _BOUND_CASES[case]
    ops = build()
    rank = len(next(iter(ops.values())).shape)
    if rank != 2 and out_format != "coo":
        pytest.skip("a 2-D format")
    want = oracle(*[_dense(x) for x in ops.values()])
    k = sc.compile(src, out_format=out_format)
    total = int(np.prod(want.shape))
    stored = int(np.count_nonzero(want))
    for limit in sorted({max(stored - 1, 1), stored, total - 1}):
        if limit >= total:
            continue
        monkeypatch.setattr(kernel_mod, "POS32_MAX", limit)
        for _ in range(2):              # the general path, then the repeated-call path
            C = k(**ops)
            _no_overflowing_positions(k, C)
            np.testing.assert_allclose(_dense(C), want, rtol=1e-12, atol=0)


def test_repeated_calls_alternating_across_the_bound(monkeypatch):
    """The repeated-call path's width class: calls whose union bound lies below, then above
    POS32_MAX, alternating (a plan of the other width is never reused)."""
    k = sc.compile("C[i,j] = A[i,j] + A[j,i]")
    small, big = _upper(6), sp.csr_array(np.triu(np.ones((6, 6)), 1) + np.eye(6))
    small_want, big_want = _dense(small) + _dense(small).T, _dense(big) + _dense(big).T
    monkeypatch.setattr(kernel_mod, "POS32_MAX", 25)     # small: 30 stored, big: 36
    for _ in range(3):
        for A, want in ((small, small_want), (big, big_want)):
            C = k(A)
            _no_overflowing_positions(k, C)
            np.testing.assert_array_equal(_dense(C), want)
