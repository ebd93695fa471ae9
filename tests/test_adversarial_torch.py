"""Adversarial inputs of sparsecc.torch's custom ops (torch.ops.sparsecc.*) and tensor
conversion: malformed components must be a SparseccError (not torch's RuntimeError or
SciPy's ValueError), and a gradient of a gradient through the custom ops must raise
NotDifferentiableError as docs/torch.md says."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparsecc as sc  # noqa: E402
import sparsecc.torch as sct  # noqa: E402
from sparsecc.autodiff import NotDifferentiableError  # noqa: E402

ops = torch.ops.sparsecc


def _parts():
    g = torch.Generator().manual_seed(0)
    A = torch.rand(5, 4, generator=g, dtype=torch.float64)
    A[A < 0.5] = 0
    csr = A.to_sparse_csr()
    coo = A.to_sparse().coalesce()
    x = torch.rand(4, 3, generator=g, dtype=torch.float64)
    return A, csr, coo, x


def _bad_calls():
    A, csr, coo, x = _parts()
    crow, col, vals = csr.crow_indices(), csr.col_indices(), csr.values()
    idx = coo.indices()
    return {
        "crow too short": lambda: ops.einsum_sparse("ij,jk->ik", "csr", [crow[:-1], col], vals, [5, 4], [x]),
        "values too short": lambda: ops.einsum_sparse("ij,jk->ik", "csr", [crow, col], vals[:-1], [5, 4], [x]),
        "csc values too short": lambda: ops.einsum_sparse("ij,jk->ik", "csc", [crow[:-1], col], vals[:-1],
                                                          [5, 4], [x]),
        "negative shape": lambda: ops.einsum_sparse("ij,jk->ik", "csr", [crow, col], vals, [5, -4], [x]),
        "coo with 3 coordinate rows": lambda: ops.einsum_sparse(
            "ij,jk->ik", "coo", [torch.cat([idx, idx[:1]])], coo.values(), [5, 4], [x]),
        "coo with 1-D indices": lambda: ops.einsum_sparse("ij,jk->ik", "coo", [idx[0]], coo.values(), [5, 4], [x]),
        "csr with 2-D col": lambda: ops.einsum_sparse("ij,jk->ik", "csr", [crow, col.reshape(1, -1)], vals,
                                                      [5, 4], [x]),
        "bsr with 1-D values": lambda: ops.einsum_sparse("ij,jk->ik", "bsr", [crow, col], vals, [5, 4], [x]),
        "float index tensors": lambda: ops.einsum_sparse("ij,jk->ik", "csr", [crow.double() + 0.5, col.double()],
                                                         vals, [5, 4], [x]),
        "einsum_csr values too short": lambda: ops.einsum_csr("ij,jk->ik", crow, col, vals[:-1], 4, [x]),
        "einsum_csr negative n_cols": lambda: ops.einsum_csr("ij,jk->ik", crow, col, vals, -1, [x]),
        "einsum_csr empty crow": lambda: ops.einsum_csr("ij,jk->ik", crow[:0], col[:0], vals[:0], 4, [x]),
        "sct csr values too short": lambda: sct.einsum("ij,jk->ik", torch.sparse_csr_tensor(
            crow, col, vals[:-1], (5, 4), check_invariants=False), x),
    }


@pytest.mark.parametrize("case", sorted(_bad_calls()))
def test_malformed_components_are_a_sparsecc_error(case):
    with pytest.raises(sc.SparseccError):
        _bad_calls()[case]()


@pytest.mark.parametrize("which", ["einsum_sparse", "einsum_csr"])
def test_second_order_through_custom_ops_raises_not_differentiable(which):
    A, csr, coo, x = _parts()
    v = csr.values().clone().requires_grad_()
    xx = x.clone().requires_grad_()
    if which == "einsum_sparse":
        y = ops.einsum_sparse("ij,jk->ik", "csr", [csr.crow_indices(), csr.col_indices()], v, [5, 4], [xx])
    else:
        y = ops.einsum_csr("ij,jk->ik", csr.crow_indices(), csr.col_indices(), v, 4, [xx])
    gx, = torch.autograd.grad(y.pow(2).sum(), [xx], create_graph=True)
    # first order is right (dense autograd on the same values)
    Ad = torch.zeros(5, 4, dtype=torch.float64)
    Ad[tuple(csr.to_sparse_coo().coalesce().indices())] = csr.values()
    want = 2 * Ad.T @ (Ad @ x)
    torch.testing.assert_close(gx.detach(), want)
    with pytest.raises(NotDifferentiableError):
        torch.autograd.grad(gx.sum(), [v])
