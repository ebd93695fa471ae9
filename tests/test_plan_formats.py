"""The planner's format rules for dense steps (issue 24): an intermediate is stored dense where
its step and the step reading it cost less so (the dense-intermediate rule, ``plan.py
format_of``), and a dense x dense step runs the hand-written contraction (``gemm.py``): the
GNN layer's ``X @ W``."""

import numpy as np
import pytest

import sparsecc as sc
from sparsecc.bench.generators import uniform_rows
from sparsecc.dialect.kernels import gemm

from conftest import seed as _seed


def _chain(per: int, rng):
    A = uniform_rows(300, 300, per, rng)
    B = uniform_rows(300, 300, 2 * per, rng)
    return A, B, rng.random((300, 16))


@pytest.mark.parametrize("per,want", [(5, "dense"), (1, "csr")])
def test_an_intermediate_follows_its_estimated_fill(per, want):
    """``(A @ B) @ W`` with W dense (a dense result): A @ B ~15% full is stored dense (the
    bytes-only rule kept it CSR below 2/3 full: reading it in the product with W costs more
    than its zeros), ~1% full stays CSR; values as numpy.einsum's either way."""
    rng = np.random.default_rng(_seed("fill", per))
    A, B, W = _chain(per, rng)
    path = [(0, 1), (0, 1)]
    k = sc.compile("ij,jk,kl->il", "csr", "csr", "dense", optimize=path)
    plan = k.plan(A, B, W)
    assert len(plan.steps) == 2 and plan.steps[0].format == want, str(plan)
    got = k(A, B, W)
    np.testing.assert_allclose(got, np.einsum("ij,jk,kl->il", A.toarray(), B.toarray(), W), rtol=1e-12)


def test_a_sparse_result_keeps_sparse_intermediates():
    """With a sparse result the algebra allows no dense intermediate (the result would store
    the zeros of its pattern): the rule never fires, however full the estimate."""
    rng = np.random.default_rng(_seed("fill-sparse"))
    A, B, _ = _chain(8, rng)
    C = uniform_rows(300, 300, 8, rng)
    plan = sc.plan("ij,jk,kl->il", A, B, C, optimize=[(0, 1), (0, 1)], out_format="csr")
    assert plan.steps[0].format in ("csr", "csc", "dcsr")


def test_the_gnn_layer_runs_its_dense_step_through_the_contraction_kernel():
    """``ij,jk,kl->il``, A sparse, X and W dense: the plan is A @ (X @ W), and the X @ W step
    is the hand-written dense contraction (its MLIR is no sparsifier nest)."""
    rng = np.random.default_rng(_seed("gnn"))
    A = uniform_rows(2000, 2000, 10, rng)
    X, W = rng.random((2000, 64)), rng.random((64, 16))
    k = sc.compile("ij,jk,kl->il", "csr", "dense", "dense")
    got = k(A, X, W)
    np.testing.assert_allclose(got, A @ (X @ W), rtol=1e-12)
    plan = k.last_plan
    assert [s.subscripts for s in plan.steps] == ["ij,jk->ik", "ij,jk->ik"] and plan.steps[0].inputs[0] == "#1"
    ir = k.ir("mlir", step=1)
    assert gemm.PARALLEL_CHUNK in ir and "linalg.generic" not in ir


def test_gram_step_reads_a_transposed_operand_through_the_spgemm_kernel():
    """``ki,k,kj->ij`` (G^T diag(w) G): its last step reads ``w * G`` transposed (the call
    path hands it CSC), which the hand-written SpGEMM serves as the CSR of ``(i, k)``; the
    result is the one nest's: CSR, the Boolean product's pattern (entries of value 0 from w's
    zeros included), values."""
    import scipy.sparse as sp
    rng = np.random.default_rng(_seed("gram"))
    G = uniform_rows(3000, 200, 8, rng)
    w = rng.random(3000)
    w[::7] = 0.0                                    # entries of value 0 stay stored, as the one nest's
    k = sc.compile("ki,k,kj->ij", "csr", "dense", "csr")
    got = k(G, w, G)
    ones = sp.csr_array((np.ones_like(G.data), G.indices, G.indptr), shape=G.shape)
    pattern = sp.csr_array(ones.T @ ones)        # the Boolean product: positive values, nothing cancels
    pattern.sort_indices()
    assert isinstance(got, sp.csr_array) and len(k.last_plan.steps) == 2
    assert (got.indptr == pattern.indptr).all() and (got.indices == pattern.indices).all()
    np.testing.assert_allclose(got.toarray(), (G.T @ (G.multiply(w[:, None]))).toarray(), rtol=1e-12)
    assert "linalg.generic" not in k.ir("mlir", step=2)
