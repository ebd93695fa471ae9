"""Complex gradients through sparsecc.torch, in torch's convention (the conjugate Wirtinger
derivative: for y = A x, grad_A = grad_y conj(x)^T on A's pattern, grad_x = conj(A)^T grad_y).

Oracles: torch.autograd.gradcheck (finite differences, complex128; as_sparse_gradcheck with
masked=True for sparse operands) and torch autograd on dense copies, masked to the pattern."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sparsecc as sc  # noqa: E402
import sparsecc.torch as sct  # noqa: E402

warnings.filterwarnings("ignore", message=".*Sparse (CSR|CSC|BSR|BSC) tensor support is in beta.*")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")

LAYOUTS = ["csr", "coo", "csc", "bsr"]
#: torch cannot build a complex CSR/CSC/BSR tensor that requires grad from its components
#: ("sparse_compressed_tensor does not support automatic differentiation for outputs with
#: complex dtype"), which as_sparse_gradcheck does: those layouts are checked against dense
#: autograd instead (test_against_dense_torch_autograd_masked)
GRADCHECK_LAYOUTS = ["strided", "coo"]


def _dense(shape, seed, density=0.5, dtype=torch.complex128):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) < density
    return torch.randn(shape, generator=g, dtype=dtype) * mask


def _leaf(D, layout):
    if layout == "strided":
        return D.clone().requires_grad_(True)
    t = {"csr": D.to_sparse_csr, "csc": D.to_sparse_csc, "coo": lambda: D.to_sparse().coalesce(),
         "bsr": lambda: D.to_sparse_bsr((2, 2))}[layout]()
    return t.requires_grad_(True)


def _gradcheck(f, inputs):
    return torch.sparse.as_sparse_gradcheck(torch.autograd.gradcheck)(f, inputs, masked=True)


def _todense(t):
    t = t.detach()
    return t.to_dense() if t.layout != torch.strided else t


def _mask(A):
    """The operand's stored pattern as a dense bool tensor (BSR: whole blocks)."""
    A = A.detach()
    if A.layout == torch.sparse_bsr:
        v = torch.ones_like(A.values())
        return torch.sparse_bsr_tensor(A.crow_indices(), A.col_indices(), v, A.shape).to_dense() != 0
    if A.layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(A._indices(), torch.ones_like(A._values()), A.shape).to_dense() != 0
    ctor = torch.sparse_csr_tensor if A.layout == torch.sparse_csr else torch.sparse_csc_tensor
    a, b = (A.crow_indices(), A.col_indices()) if A.layout == torch.sparse_csr else (A.ccol_indices(),
                                                                                     A.row_indices())
    return ctor(a, b, torch.ones_like(A.values()), A.shape).to_dense() != 0


@pytest.mark.parametrize("layout", GRADCHECK_LAYOUTS)
def test_gradcheck_spmv_spmm(layout):
    A = _leaf(_dense((4, 6), 1), layout)
    x = torch.randn(6, dtype=torch.complex128, requires_grad=True)
    B = torch.randn(6, 3, dtype=torch.complex128, requires_grad=True)
    assert _gradcheck(lambda A, x: sct.einsum("ij,j->i", A, x), (A, x))
    assert _gradcheck(lambda A, B: sct.einsum("ij,jk->ik", A, B), (A, B))


@pytest.mark.parametrize("layout", ["coo"])
def test_gradcheck_sddmm(layout):
    A = _leaf(_dense((4, 6), 2), layout)
    U = torch.randn(4, 2, dtype=torch.complex128, requires_grad=True)
    V = torch.randn(6, 2, dtype=torch.complex128, requires_grad=True)
    k = sct.compile("ij,ik,jk->ij", out_format="coo")
    assert _gradcheck(lambda A, U, V: k(A, U, V), (A, U, V))


@pytest.mark.parametrize("layout", GRADCHECK_LAYOUTS)
def test_gradcheck_elementwise_exp_and_conj(layout):
    A = _leaf(_dense((4, 5), 3) * 0.5, layout)
    x = (torch.randn(5, dtype=torch.complex128) * 0.5).requires_grad_(True)
    assert _gradcheck(lambda A, x: sct.evaluate("y[i] = exp(A[i,j]) * x[j]", A, x), (A, x))
    assert _gradcheck(lambda A, x: sct.evaluate("y[i] = conj(A[i,j]) * x[j]", A, x), (A, x))
    assert _gradcheck(lambda A, x: sct.evaluate("y[i] = exp(conj(A[i,j] * x[j]))", A, x), (A, x))
    assert _gradcheck(lambda A, x: sct.evaluate("y[i] = sum[j](A[i,j] * conj(x[j])) / (2 - 1j)", A, x), (A, x))
    # abs of a complex value (not holomorphic): torch's sgn rule
    assert _gradcheck(lambda A, x: sct.evaluate("y[i] = abs(A[i,j]) * x[j]", A, x), (A, x))
    assert _gradcheck(lambda A, x: sct.evaluate("y[i] = sqrt(abs(conj(A[i,j]) * x[j]) + 1)", A, x), (A, x))


@pytest.mark.parametrize("layout", ["strided"] + LAYOUTS)
def test_against_dense_torch_autograd_masked(layout):
    D = _dense((4, 6), 4)
    A = _leaf(D, layout)
    B = torch.randn(6, 3, dtype=torch.complex128, requires_grad=True)
    W = torch.randn(4, 3, dtype=torch.complex128)
    loss = (sct.einsum("ij,jk->ik", A, B) * W).abs().sum()
    gA, gB = torch.autograd.grad(loss, (A, B))
    Dd = D.clone().requires_grad_(True)
    Bd = B.detach().clone().requires_grad_(True)
    ((Dd @ Bd) * W).abs().sum().backward()
    assert gA.layout == A.layout and gA.dtype == torch.complex128
    mask = _mask(A) if layout != "strided" else torch.ones(D.shape, dtype=torch.bool)
    torch.testing.assert_close(_todense(gA), Dd.grad * mask, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gB, Bd.grad, rtol=1e-10, atol=1e-10)


def test_written_out_convention_spmv():
    """y = A x: grad_A = g conj(x)^T on A's pattern, grad_x = conj(A)^T g (torch's rule)."""
    A = torch.tensor([[1 + 2j, 0], [0, 3 - 1j]], dtype=torch.complex128).to_sparse_csr().requires_grad_(True)
    x = torch.tensor([2 - 1j, 1j], dtype=torch.complex128, requires_grad=True)
    g = torch.tensor([1 + 1j, -2j], dtype=torch.complex128)
    gA, gx = torch.autograd.grad(sct.einsum("ij,j->i", A, x), (A, x), g)
    want_A = np.outer(g.numpy(), np.conjugate(x.detach().numpy())) * (np.abs(_todense(A).numpy()) > 0)
    np.testing.assert_allclose(_todense(gA).numpy(), want_A)
    np.testing.assert_allclose(gx.numpy(), np.conjugate(_todense(A).numpy()).T @ g.numpy())


def test_complex64_and_real_operand_of_a_complex_product():
    D = _dense((3, 4), 5, dtype=torch.complex64)
    A = D.to_sparse_csr().requires_grad_(True)
    x = torch.randn(4, dtype=torch.float32, requires_grad=True)      # a real operand: a real gradient
    gA, gx = torch.autograd.grad(sct.einsum("ij,j->i", A, x).abs().sum(), (A, x))
    Dd, xd = D.clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    (Dd @ xd.to(torch.complex64)).abs().sum().backward()
    assert gx.dtype == torch.float32 and gA.dtype == torch.complex64
    torch.testing.assert_close(gx, xd.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(_todense(gA), Dd.grad * (D != 0), rtol=1e-4, atol=1e-4)


def test_numpy_vjp_keeps_the_transpose_convention():
    """Kernel.vjp (NumPy users) stays JAX's transpose; conjugate=True gives torch's."""
    import scipy.sparse as sp
    A = sp.csr_array(np.array([[1 + 2j, 0], [0, 3 - 1j]]))
    x = np.array([2 - 1j, 1j])
    g = np.array([1 + 1j, -2j])
    k = sc.compile("ij,j->i")
    gA, gx = k.vjp(g, A, x)
    np.testing.assert_allclose(gx, A.toarray().T @ g)
    np.testing.assert_allclose(gA.toarray(), np.outer(g, x) * (A.toarray() != 0))
    from sparsecc.autodiff import vjp
    gA, gx = vjp(k, g, A, x, conjugate=True)
    np.testing.assert_allclose(gx, np.conjugate(A.toarray()).T @ g)
    np.testing.assert_allclose(gA.toarray(), np.outer(g, np.conjugate(x)) * (A.toarray() != 0))


def test_ops_gradients_complex():
    """sct.ops' differentiable ops run as statements: the same convention (siblings)."""
    A = _leaf(_dense((4, 5), 6), "coo")
    B = torch.randn(5, 3, dtype=torch.complex128, requires_grad=True)
    C = torch.randn(4, 3, dtype=torch.complex128, requires_grad=True)
    assert _gradcheck(lambda A, B: sct.ops.mm(A, B), (A, B))
    assert _gradcheck(lambda C, A, B: sct.ops.addmm(C, A, B, beta=0.5 - 1j, alpha=2j), (C, A, B))
    x = torch.randn(5, dtype=torch.complex128, requires_grad=True)
    assert _gradcheck(lambda A, x: sct.ops.mv(A, x), (A, x))
