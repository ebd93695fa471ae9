"""torch.ops.sparsecc.einsum_sparse / einsum_sparse_sampled: custom ops over a sparse operand's
dense components (CSR, CSC, COO, BSR) for torch.compile(fullgraph=True), with fake
implementations and registered autograd.

Oracles: torch.library.opcheck (schema, fake tensors, autograd registration) and dense torch
autograd on dense copies (the values' gradient read on the pattern)."""

import warnings

import pytest

torch = pytest.importorskip("torch")
import sparsecc as sc  # noqa: E402
import sparsecc.torch as sct  # noqa: E402,F401 - registers the ops

warnings.filterwarnings("ignore", message=".*Sparse (CSR|CSC|BSR|BSC) tensor support is in beta.*")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")


def _dense(shape, seed, density=0.4, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype) * (torch.rand(shape, generator=g) < density)


def _components(D, layout):
    """(index tensors, values) of dense D in ``layout``."""
    if layout == "csr":
        t = D.to_sparse_csr()
        return [t.crow_indices(), t.col_indices()], t.values()
    if layout == "csc":
        t = D.to_sparse_csc()
        return [t.ccol_indices(), t.row_indices()], t.values()
    if layout == "bsr":
        t = D.to_sparse_bsr((2, 2))
        return [t.crow_indices(), t.col_indices()], t.values()
    t = D.to_sparse().coalesce()
    return [t.indices()], t.values()


def _on_pattern(full, D, layout):
    """A dense tensor's entries at the layout's stored elements, in its value order/shape."""
    idx, vals = _components(D, layout)
    if layout == "bsr":                # stored blocks, row-major block order
        return full.reshape(D.shape[0] // 2, 2, D.shape[1] // 2, 2).permute(0, 2, 1, 3)[_blocks(D)]
    if layout == "coo":
        return full[idx[0][0], idx[0][1]]
    if layout == "csr":
        rows = torch.repeat_interleave(torch.arange(D.shape[0]), idx[0].diff())
        return full[rows, idx[1]]
    cols = torch.repeat_interleave(torch.arange(D.shape[1]), idx[0].diff())
    return full[idx[1], cols]


def _operand(seed, layout):
    """A 6 x 4 sparse operand: dense copy, index tensors, values (a leaf requiring grad)."""
    D = _dense((6, 4), seed)
    idx, vals = _components(D, layout)
    return D, idx, vals.clone().requires_grad_(True)


def _blocks(D):
    return (D != 0).reshape(D.shape[0] // 2, 2, D.shape[1] // 2, 2).any(3).any(1)


@pytest.mark.parametrize("layout", ["csr", "csc", "coo", "bsr"])
def test_einsum_sparse_dense_result(layout):
    D, idx, vals = _operand(1, layout)
    B = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.sparsecc.einsum_sparse.default, ("ij,jk->ik", layout, idx, vals, [6, 4], [B]))
    y = torch.ops.sparsecc.einsum_sparse("ij,jk->ik", layout, idx, vals, [6, 4], [B])
    W = torch.randn(6, 3, dtype=torch.float64)
    gv, gB = torch.autograd.grad((y * W).sum(), (vals, B))
    Dd, Bd = D.clone().requires_grad_(True), B.detach().clone().requires_grad_(True)
    ref = Dd @ Bd
    (ref * W).sum().backward()
    torch.testing.assert_close(y.detach(), ref.detach())
    torch.testing.assert_close(gB, Bd.grad)
    torch.testing.assert_close(gv, _on_pattern(Dd.grad, D, layout))


@pytest.mark.parametrize("layout", ["csr", "csc", "coo", "bsr"])
def test_einsum_sparse_sampled(layout):
    D, idx, vals = _operand(2, layout)
    U = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    V = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    args = ("ij,ik,jk->ij", layout, idx, vals, [6, 4], [U, V])
    torch.library.opcheck(torch.ops.sparsecc.einsum_sparse_sampled.default, args)
    s = torch.ops.sparsecc.einsum_sparse_sampled(*args)
    assert s.shape == vals.shape
    w = torch.randn(vals.shape, dtype=torch.float64)
    gv, gU, gV = torch.autograd.grad((s * w).sum(), (vals, U, V))
    Dd = D.clone().requires_grad_(True)
    Ud, Vd = U.detach().clone().requires_grad_(True), V.detach().clone().requires_grad_(True)
    ref = Dd * (Ud @ Vd.T)
    torch.testing.assert_close(s.detach(), _on_pattern(ref.detach(), D, layout))
    # the loss weighs the stored elements: the same weights on the dense side
    if layout == "bsr":
        Wd = torch.sparse_bsr_tensor(idx[0], idx[1], w, D.shape).to_dense()
    elif layout == "coo":
        Wd = torch.sparse_coo_tensor(idx[0], w, D.shape).to_dense()
    elif layout == "csr":
        Wd = torch.sparse_csr_tensor(idx[0], idx[1], w, D.shape).to_dense()
    else:
        Wd = torch.sparse_csc_tensor(idx[0], idx[1], w, D.shape).to_dense()
    (ref * Wd).sum().backward()
    torch.testing.assert_close(gU, Ud.grad)
    torch.testing.assert_close(gV, Vd.grad)
    torch.testing.assert_close(gv, _on_pattern(Dd.grad, D, layout))


def test_bad_components_are_clear_errors():
    D = _dense((4, 4), 3)
    idx, vals = _components(D, "csr")
    with pytest.raises(sc.SparseccError, match="layout"):
        torch.ops.sparsecc.einsum_sparse("ij,j->i", "bsc", idx, vals, [4, 4], [torch.ones(4, dtype=torch.float64)])
    with pytest.raises(sc.SparseccError, match="index tensor"):
        torch.ops.sparsecc.einsum_sparse("ij,j->i", "coo", idx, vals, [4, 4], [torch.ones(4, dtype=torch.float64)])
    with pytest.raises(sc.SparseccError, match="output subscripts"):
        torch.ops.sparsecc.einsum_sparse_sampled("ij,j->i", "csr", idx, vals, [4, 4],
                                                 [torch.ones(4, dtype=torch.float64)])


def _train(model, x, steps=2):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


@pytest.mark.parametrize("kind", ["dense_csc", "sampled_coo"])
def test_fullgraph_training_step_matches_eager(kind):
    D = _dense((6, 6), 4, density=0.5)
    layout = "csc" if kind == "dense_csc" else "coo"
    idx, vals = _components(D, layout)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2, dtype=torch.float64)
            self.vals = torch.nn.Parameter(vals.clone())
            for k, t in enumerate(idx):
                self.register_buffer(f"idx{k}", t)

        def forward(self, x):
            ix = [getattr(self, f"idx{k}") for k in range(len(idx))]
            h = self.lin(x)
            if kind == "dense_csc":
                y = torch.ops.sparsecc.einsum_sparse("ij,jk->ik", layout, ix, self.vals, [6, 6], [h])
                return torch.tanh(y).sum()
            s = torch.ops.sparsecc.einsum_sparse_sampled("ij,ik,jk->ij", layout, ix, self.vals, [6, 6], [h, h])
            return (torch.sigmoid(s) * torch.arange(s.shape[0], dtype=s.dtype)).sum()

    torch.manual_seed(0)
    x = torch.randn(6, 3, dtype=torch.float64)
    eager = M()
    compiled = M()
    compiled.load_state_dict(eager.state_dict())
    want = _train(eager, x)
    got = _train(torch.compile(compiled, fullgraph=True), x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(compiled.vals.detach(), eager.vals.detach())
    torch.testing.assert_close(compiled.lin.weight.detach(), eager.lin.weight.detach())
