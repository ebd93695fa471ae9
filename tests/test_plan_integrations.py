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


# ------------------------------------------------------------------------------ Dask
def test_dask_operands_run_the_one_nest_blockwise():
    # a planned kernel's call with a Dask operand goes to the Dask front end, whose workers
    # run the statement's one nest on each block (docs/planning.md, Integrations)
    da = pytest.importorskip("dask.array")
    k = sc.compile("ij,jk,k->i")
    r = k(A, B, da.from_array(x, chunks=N // 4))
    assert k.last_plan is None                            # nothing planned for this call
    np.testing.assert_allclose(np.asarray(r.compute()), A @ (B @ x))
    np.testing.assert_allclose(k(A, B, x), A @ (B @ x))   # in memory: planned again
    assert k.last_plan is not None


# ------------------------------------------------------------------------------- AOT
def test_aot_build_of_a_planned_expression_builds_its_one_nest(tmp_path):
    # sc.aot.build compiles a kernel's one nest (docs/aot.md): a library holds no plan
    # (plans depend on the operands' statistics, a library serves every call)
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense")
    try:
        sc.aot.build("planned3", {"chain": k}, str(tmp_path))
    except sc.SparseccError as err:
        if "C compiler" in str(err):
            pytest.skip(str(err))
        raise
    lib = sc.aot.load(str(tmp_path))
    np.testing.assert_allclose(lib.chain(A, B, x), A @ (B @ x))
    np.testing.assert_allclose(lib.chain(A, B, 2 * x), A @ (B @ (2 * x)))
