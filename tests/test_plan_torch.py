"""sparsecc.torch through planned expressions: the forward runs the plan's steps, backward
each step's compiled adjoints in reverse (never the one nest's).  Oracles: torch autograd on
dense copies (a sparse operand's gradient masked to its pattern), torch.autograd.gradcheck."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sparsecc.torch as sct  # noqa: E402
from sparsecc import autodiff  # noqa: E402

warnings.filterwarnings("ignore", message=".*Sparse (CSR|CSC|BSR|BSC) tensor support is in beta.*")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")

PATHS = [[(1, 2), (0, 1)], [(0, 1), (0, 1)]]


def _sparse(shape, seed, dtype=torch.float64, density=0.4, layout="csr"):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(shape, generator=g, dtype=torch.float64) * (torch.rand(shape, generator=g) < density)
    if dtype.is_complex:
        t = t * (1 + 0.5j)
    t = t.to(dtype)
    return t.to_sparse_csr() if layout == "csr" else t.to_sparse()


def _dense(shape, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(shape, generator=g, dtype=torch.float64)
    return (t * (1 - 0.25j)).to(dtype) if dtype.is_complex else t.to(dtype)


def _oracle_grads(subscripts, tensors, gout):
    """torch's own gradients on dense copies, a sparse operand's masked to its pattern."""
    dense = [(t.detach().to_dense() if t.layout != torch.strided else t.detach()).clone().requires_grad_()
             for t in tensors]
    out = torch.einsum(subscripts, *[d.to(torch.promote_types(d.dtype, dense[-1].dtype)) for d in dense])
    out.backward(gout)
    grads = []
    for t, d in zip(tensors, dense):
        g = d.grad
        if t.layout != torch.strided:
            g = g * (t.detach().to_dense() != 0)
        grads.append(g)
    return out.detach(), grads


def _spy(monkeypatch):
    """Record the operand count of every kernel autodiff.vjp differentiates."""
    seen = []
    real = autodiff.vjp

    def vjp(kernel, *a, **kw):
        seen.append(len(kernel.stmt.operands))
        return real(kernel, *a, **kw)
    monkeypatch.setattr(autodiff, "vjp", vjp)
    return seen


@pytest.mark.parametrize("path", PATHS)
def test_spmv_chain_gradients_through_each_step(path, monkeypatch):
    seen = _spy(monkeypatch)
    A, B = _sparse((7, 6), 1).requires_grad_(), _sparse((6, 5), 2).requires_grad_()
    x = _dense((5,), 3).requires_grad_()
    y = sct.einsum("ij,jk,k->i", A, B, x, optimize=path)
    gout = _dense((7,), 4)
    y.backward(gout)
    want, grads = _oracle_grads("ij,jk,k->i", [A, B, x], gout)
    torch.testing.assert_close(y, want)
    for t, g in zip((A, B, x), grads):
        got = t.grad.to_dense() if t.grad.layout != torch.strided else t.grad
        torch.testing.assert_close(got, g)
    assert A.grad.layout == torch.sparse_csr and B.grad.layout == torch.sparse_csr
    assert seen and set(seen) == {2}          # each step's adjoints, never the 3-operand nest's


@pytest.mark.parametrize("path", PATHS)
def test_gnn_layer_gradcheck(path):
    A = _sparse((6, 6), 5)
    X, W = _dense((6, 4), 6).requires_grad_(), _dense((4, 3), 7).requires_grad_()
    assert torch.autograd.gradcheck(lambda X, W: sct.einsum("ij,jk,kl->il", A, X, W, optimize=path), (X, W))


def test_sparse_chain_gradcheck_masked():
    # all sparse: the intermediate is a CSR matrix; gradients on each operand's pattern
    A, B, C = (_sparse((5, 5), s).requires_grad_() for s in (8, 9, 10))
    f = sct.compile("ij,jk,kl->il", optimize=[(0, 1), (0, 1)])
    out = f(A, B, C)
    assert len(f.last.plan(*[sct.to_sparsecc(t) for t in (A, B, C)]).steps) == 2
    Ad, Bd = (sct.to_sparsecc(t.detach()) for t in (A, B))
    assert f.last.last_plan.actual[0] == (Ad @ Bd).nnz    # the autograd call records its steps too
    gout = _dense(tuple(out.shape), 11)
    out.to_dense().backward(gout) if out.layout != torch.strided else out.backward(gout)
    _, grads = _oracle_grads("ij,jk,kl->il", [A, B, C], gout)
    for t, g in zip((A, B, C), grads):
        torch.testing.assert_close(t.grad.to_dense(), g)


def test_same_tensor_twice_accumulates():
    # G^T diag(w) G: G is two operands of the plan, its gradient the sum of both
    G = _sparse((6, 4), 12).requires_grad_()
    w = _dense((6,), 13).requires_grad_()
    H = sct.einsum("ki,k,kj->ij", G, w, G, optimize=[(0, 1), (0, 1)])
    gout = _dense((4, 4), 14)
    assert H.layout == torch.sparse_csr        # a sparse result, as the one nest's
    H.to_dense().backward(gout)
    Gd = G.detach().to_dense().requires_grad_()
    wd = w.detach().clone().requires_grad_()
    torch.einsum("ki,k,kj->ij", Gd, wd, Gd).backward(gout)
    torch.testing.assert_close(H.to_dense(), torch.einsum("ki,k,kj->ij", Gd, wd, Gd).detach())
    torch.testing.assert_close(G.grad.to_dense(), Gd.grad * (G.detach().to_dense() != 0))
    torch.testing.assert_close(w.grad, wd.grad)


def test_mixed_dtypes_gradients_in_each_operands_dtype():
    # the steps compute in the result's dtype (float64); each gradient comes back in its operand's
    A = _sparse((6, 5), 15, torch.float32).requires_grad_()
    B = _sparse((5, 4), 16, torch.float32).requires_grad_()
    x = _dense((4,), 17, torch.float64).requires_grad_()
    y = sct.einsum("ij,jk,k->i", A, B, x, optimize=PATHS[0])
    assert y.dtype == torch.float64
    gout = _dense((6,), 18)
    y.backward(gout)
    _, grads = _oracle_grads("ij,jk,k->i", [A, B, x], gout)
    assert (A.grad.dtype, B.grad.dtype, x.grad.dtype) == (torch.float32, torch.float32, torch.float64)
    for t, g in zip((A, B, x), grads):
        got = t.grad.to_dense() if t.grad.layout != torch.strided else t.grad
        torch.testing.assert_close(got.to(torch.float64), g.to(torch.float64), rtol=1e-5, atol=1e-5)


def test_complex_gradients_follow_torch():
    A = _sparse((5, 5), 19, torch.complex128).requires_grad_()
    B = _sparse((5, 5), 20, torch.complex128).requires_grad_()
    x = _dense((5,), 21, torch.complex128).requires_grad_()
    y = sct.einsum("ij,jk,k->i", A, B, x, optimize=PATHS[0])
    gout = _dense((5,), 22, torch.complex128)
    y.backward(gout)
    _, grads = _oracle_grads("ij,jk,k->i", [A, B, x], gout)
    for t, g in zip((A, B, x), grads):
        got = t.grad.to_dense() if t.grad.layout != torch.strided else t.grad
        torch.testing.assert_close(got, g)


def test_only_needed_gradients_and_no_grad_path():
    A, B = _sparse((6, 6), 23), _sparse((6, 6), 24)
    x = _dense((6,), 25).requires_grad_()
    y = sct.einsum("ij,jk,k->i", A, B, x, optimize=PATHS[1])
    y.sum().backward()
    Ad, Bd = A.to_dense(), B.to_dense()
    torch.testing.assert_close(x.grad, Bd.T @ (Ad.T @ torch.ones(6, dtype=torch.float64)))
    with torch.no_grad():
        torch.testing.assert_close(sct.einsum("ij,jk,k->i", A, B, x, optimize=PATHS[1]), Ad @ (Bd @ x.detach()))
    assert np.allclose(y.detach().numpy(), (Ad @ (Bd @ x.detach())).numpy())


def test_second_order_raises():
    A = _sparse((5, 5), 26)
    X, W = _dense((5, 3), 27).requires_grad_(), _dense((3, 2), 28).requires_grad_()
    out = sct.einsum("ij,jk,kl->il", A, X, W, optimize=PATHS[0])
    (gX,) = torch.autograd.grad(out.sum(), X, create_graph=True)
    with pytest.raises(autodiff.NotDifferentiableError):
        gX.sum().backward()
