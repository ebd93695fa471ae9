"""Gradients through einsum subscripts with an ellipsis (sct.einsum / sct.compile expand it
from the operands' ranks before differentiating).

Oracles: torch.autograd.gradcheck (as_sparse_gradcheck, masked=True, for sparse operands)
and torch.einsum's autograd on dense copies (masked to the pattern)."""

import warnings

import pytest

torch = pytest.importorskip("torch")
import sparsecc as sc  # noqa: E402
import sparsecc.torch as sct  # noqa: E402

warnings.filterwarnings("ignore", message=".*Sparse (CSR|CSC|BSR|BSC) tensor support is in beta.*")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")


def _sparse(shape, seed, layout, density=0.5):
    g = torch.Generator().manual_seed(seed)
    D = torch.randn(shape, generator=g, dtype=torch.float64) * (torch.rand(shape, generator=g) < density)
    t = {"csr": D.to_sparse_csr, "coo": lambda: D.to_sparse().coalesce(), "csc": D.to_sparse_csc,
         "strided": D.clone}[layout]()
    return D, t.requires_grad_(True)


def _gradcheck(f, inputs):
    return torch.sparse.as_sparse_gradcheck(torch.autograd.gradcheck)(f, inputs, masked=True)


@pytest.mark.parametrize("layout", ["csr", "coo", "csc", "strided"])
def test_batched_dense_times_sparse_matrix(layout):
    _, A = _sparse((4, 5), 1, layout)
    B = torch.randn(2, 3, 5, 2, dtype=torch.float64, requires_grad=True)       # batch dims (2, 3)
    assert _gradcheck(lambda A, B: sct.einsum("...ij,...jk->...ik", A, B), (A, B))
    assert _gradcheck(lambda A, B: sct.einsum("ij,...jk->...ik", A, B), (A, B))
    k = sct.compile("...ij,...jk->...ik")
    assert _gradcheck(lambda A, B: k(A, B), (A, B))


def test_sparse_3d_operand_with_batch_dims():
    _, T = _sparse((3, 4, 5), 2, "coo", density=0.3)
    B = torch.randn(3, 5, 2, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda T, B: sct.einsum("...ij,...jk->...ik", T, B), (T, B))
    assert _gradcheck(lambda T, B: sct.einsum("...ij,...jk", T, B), (T, B))          # implicit output


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_against_torch_einsum_masked(layout):
    D, A = _sparse((4, 5), 3, layout)
    B = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    W = torch.randn(2, 4, 3, dtype=torch.float64)
    gA, gB = torch.autograd.grad((sct.einsum("ij,...jk->...ik", A, B) * W).sum(), (A, B))
    Dd, Bd = D.clone().requires_grad_(True), B.detach().clone().requires_grad_(True)
    (torch.einsum("ij,...jk->...ik", Dd, Bd) * W).sum().backward()
    torch.testing.assert_close(gA.to_dense(), Dd.grad * (D != 0))
    torch.testing.assert_close(gB, Bd.grad)
    assert gA.layout == A.layout


def test_size_one_broadcasting_with_grad_is_a_clear_error():
    A = torch.randn(1, 4, 5, dtype=torch.float64, requires_grad=True)
    B = torch.randn(3, 5, 2, dtype=torch.float64)
    with pytest.raises(sc.SparseccError, match="size-1"):
        sct.einsum("...ij,...jk->...ik", A, B)
