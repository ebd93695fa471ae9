"""A plan's intermediates are named ``t<k>``; one named like an operand (``t0``) was read as
that operand by the next step (a FormatError for ``t0 @ (t1 @ x)``; an AOT library's planned
C function computed with the user's ``t0``).  Values against SciPy on the same operands."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

N = 2000
rng = np.random.default_rng(0)
A = sp.random_array((N, N), density=5 / N, format="csr", random_state=1)
B = sp.random_array((N, N), density=5 / N, format="csr", random_state=2)
X = rng.random(N)


@pytest.mark.parametrize("names", [("t0", "t1", "x"), ("t1", "t0", "x"), ("A", "B", "t0"), ("t0", "B", "t1")])
def test_operands_named_like_intermediates(names):
    a, b, c = names
    k = sc.compile(f"y[i] = sum[j,k]({a}[i,j] * {b}[j,k] * {c}[k])", **{a: "csr", b: "csr", c: "dense"})
    ops = {a: A, b: B, c: X}
    plan = k.plan(**ops)
    assert len(plan.steps) == 2
    assert not {s.output for s in plan.steps[:-1]} & set(names)
    np.testing.assert_allclose(k(**ops), A @ (B @ X), rtol=1e-12)
