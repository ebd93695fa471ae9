"""Planned expressions with the rest of sparsecc: the actual sizes in ``str(plan)`` after a
call, Dask operands, AOT builds and explore/autotune of 3+-factor expressions.  Oracles:
SciPy / numpy.einsum on dense copies."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc


def rand(shape, density, seed, fmt="csr"):
    rng = np.random.default_rng(seed)
    return sp.random_array(shape, density=density, format="coo", random_state=rng).asformat(fmt)


N = 200
A, B, C = (rand((N, N), 0.03, s) for s in (1, 2, 3))
x = np.random.default_rng(4).random(N)


# ------------------------------------------------------------- actual sizes in str(plan)
def test_last_plan_shows_actual_entries_of_each_step():
    k = sc.compile("ij,jk,kl->il", optimize=[(0, 1), (0, 1)])
    assert k.last_plan is None
    out = k(A, B, C)
    p = k.last_plan
    assert len(p.steps) == 2
    assert p.actual == ((A @ B).nnz, out.nnz)           # SciPy's product stores what the step stored
    np.testing.assert_allclose(out.toarray(), (A @ B @ C).toarray())
    text = str(p)
    assert f"actual {(A @ B).nnz:,}" in text and f"actual {out.nnz:,}" in text
    assert k.plan(A, B, C).actual is None                # the plan for operands: estimates only
    assert "actual" not in str(k.plan(A, B, C))


def test_last_plan_dense_steps_and_single_plan():
    k = sc.compile("ij,jk,k->i", optimize=[(1, 2), (0, 1)])
    y = k(A, B, x)
    np.testing.assert_allclose(y, A @ (B @ x))
    assert k.last_plan.actual == (N, N)                   # a dense intermediate stores every element
    one = sc.compile("ij,jk,k->i", optimize=[(0, 1, 2)])
    one(A, B, x)
    assert one.last_plan.single and one.last_plan.actual == (N,)
