"""max/min gradients into sparse results: elementwise max(A, B) / min(A, B) with a sparse
result, and max/min reductions whose result is sparse.  The gradient goes to the attaining
entries, ties split evenly (torch.maximum / torch.amax), masked on the operands' patterns.

Oracle: torch autograd on dense copies (torch.maximum/minimum; amax/amin over the stored
entries, unstored ones filled with -inf/+inf so they never attain), masked to the patterns."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sparsecc.torch as sct  # noqa: E402

warnings.filterwarnings("ignore", message=".*Sparse (CSR|CSC|BSR|BSC) tensor support is in beta.*")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")


def _sparse(D, layout):
    t = {"csr": D.to_sparse_csr, "coo": lambda: D.to_sparse().coalesce(), "csc": D.to_sparse_csc}[layout]()
    return t.requires_grad_(True)


def _pattern(t):
    t = t.detach()
    if t.layout == torch.sparse_coo:
        return torch.sparse_coo_tensor(t._indices(), torch.ones_like(t._values()), t.shape).to_dense() != 0
    if t.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(t.crow_indices(), t.col_indices(), torch.ones_like(t.values()),
                                       t.shape).to_dense() != 0
    return torch.sparse_csc_tensor(t.ccol_indices(), t.row_indices(), torch.ones_like(t.values()),
                                   t.shape).to_dense() != 0


def _with_ties(shape, seed, density=0.6):
    """Small integers (many ties, some stored zeros), as float64."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randint(-2, 3, shape, generator=g).double()
    keep = torch.rand(shape, generator=g) < density
    return v, keep


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("layout", ["csr", "coo", "csc"])
@pytest.mark.parametrize("seed", [0, 1])
def test_elementwise_max_min_sparse_result(op, layout, seed):
    va, ka = _with_ties((5, 6), seed)
    vb, kb = _with_ties((5, 6), seed + 10)
    # the stored values, zeros among them, on each pattern (kept as stored entries)
    A = torch.sparse_coo_tensor(ka.nonzero().T, va[ka], (5, 6)).coalesce()
    B = torch.sparse_coo_tensor(kb.nonzero().T, vb[kb], (5, 6)).coalesce()
    A = (A if layout == "coo" else (A.to_sparse_csr() if layout == "csr" else A.to_sparse_csc()))
    B = (B if layout == "coo" else (B.to_sparse_csr() if layout == "csr" else B.to_sparse_csc()))
    A, B = A.detach().requires_grad_(True), B.detach().requires_grad_(True)
    C = sct.evaluate(f"C[i,j] = {op}(A[i,j], B[i,j])", A=A, B=B, out_format="csr")
    W = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 20))
    Cd = C.detach().to_dense()
    gA, gB = torch.autograd.grad(sct.evaluate("s = sum[i,j](C[i,j] * W[i,j])", C=C, W=W), (A, B))
    Ad = (va * ka).requires_grad_(True)
    Bd = (vb * kb).requires_grad_(True)
    ref = (torch.maximum if op == "max" else torch.minimum)(Ad, Bd)
    torch.testing.assert_close(Cd, ref.detach())
    # the loss reads C's stored entries only: the same mask on the dense side
    (ref * W * _pattern(C)).sum().backward()
    torch.testing.assert_close(gA.to_dense(), Ad.grad * _pattern(A))
    torch.testing.assert_close(gB.to_dense(), Bd.grad * _pattern(B))
    assert gA.layout == A.layout and gB.layout == B.layout


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_reduction_with_a_sparse_result(op, layout):
    v, k = _with_ties((6, 5), 3, density=0.4)
    k[2] = False                                       # a row with no entry: no result entry
    A = torch.sparse_coo_tensor(k.nonzero().T, v[k], (6, 5)).coalesce()
    A = (A if layout == "coo" else A.to_sparse_csr()).detach().requires_grad_(True)
    w = torch.tensor([1.0, 2.0, 1.0, 1.0, 0.5], dtype=torch.float64, requires_grad=True)
    z = sct.evaluate(f"z[i] = {op}[j](A[i,j] * w[j])", A=A, w=w, out_format="coo")
    assert z.layout == torch.sparse_coo and z._nnz() == int(k.any(1).sum())
    c = torch.arange(1.0, 7.0, dtype=torch.float64)
    gA, gw = torch.autograd.grad(sct.einsum("i,i->", z, c), (A, w))
    # oracle: amax/amin over the stored terms (unstored ones can never attain), masked
    fill = float("-inf") if op == "max" else float("inf")
    Ad = (v * k).requires_grad_(True)
    wd = w.detach().clone().requires_grad_(True)
    terms = torch.where(k, Ad * wd, torch.full_like(Ad, fill))
    red = terms.amax(1) if op == "max" else terms.amin(1)
    has = k.any(1)
    torch.testing.assert_close(z.detach().to_dense()[has], red.detach()[has])
    (torch.where(has, red, torch.zeros_like(red)) * c).sum().backward()
    torch.testing.assert_close(gA.to_dense(), Ad.grad * k)
    torch.testing.assert_close(gw, wd.grad)


def test_matrix_reduction_with_a_sparse_result():
    g = torch.Generator().manual_seed(5)
    v = torch.randint(-2, 3, (3, 4, 5), generator=g).double()
    k = torch.rand(3, 4, 5, generator=g) < 0.3
    T = torch.sparse_coo_tensor(k.nonzero().T, v[k], (3, 4, 5)).coalesce().requires_grad_(True)
    C = sct.evaluate("C[i,j] = max[k](T[i,j,k])", T=T, out_format="csr")
    W = torch.randn(3, 4, dtype=torch.float64, generator=g)
    (gT,) = torch.autograd.grad(sct.evaluate("s = sum[i,j](C[i,j] * W[i,j])", C=C, W=W), (T,))
    Td = (v * k).requires_grad_(True)
    red = torch.where(k, Td, torch.full_like(Td, float("-inf"))).amax(2)
    has = k.any(2)
    (torch.where(has, red, torch.zeros_like(red)) * W).sum().backward()
    torch.testing.assert_close(gT.to_dense(), Td.grad * k)
    np.testing.assert_array_equal(C.detach().to_dense().numpy()[has.numpy()], red.detach().numpy()[has.numpy()])


@pytest.mark.parametrize("nnz", [0, 1])
def test_empty_and_single_entry(nnz):
    idx = torch.tensor([[1], [2]])[:, :nnz]
    A = torch.sparse_coo_tensor(idx, torch.full((nnz,), -3.0, dtype=torch.float64), (3, 4)).coalesce()
    A.requires_grad_(True)
    z = sct.evaluate("z[i] = max[j](A[i,j])", A=A, out_format="coo")
    assert z._nnz() == nnz
    (gA,) = torch.autograd.grad(sct.einsum("i->", z), (A,))
    assert gA._nnz() == nnz and gA._values().tolist() == [1.0] * nnz
    C = sct.evaluate("C[i,j] = min(A[i,j], 0)", A=A, out_format="csr")
    (gA,) = torch.autograd.grad(sct.evaluate("s = sum[i,j](C[i,j])", C=C), (A,))
    assert gA._values().tolist() == [1.0] * nnz


def test_min_plus_semiring_with_a_sparse_result_gradcheck():
    g = torch.Generator().manual_seed(0)
    D = torch.randn(4, 5, dtype=torch.float64, generator=g) * (torch.rand(4, 5, generator=g) < 0.5)
    A = D.to_sparse().coalesce().requires_grad_(True)
    d = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    f = lambda A, d: sct.einsum("ij,jk->ik", A, d, semiring="min_plus", out_format="coo")  # noqa: E731
    assert torch.sparse.as_sparse_gradcheck(torch.autograd.gradcheck)(f, (A, d), masked=True)
