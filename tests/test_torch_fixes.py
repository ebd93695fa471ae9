"""Defects of sparsecc.torch found by an adversarial pass (issue 27, items 3, 4, 5, 10, 11, 15).

Oracles: torch itself (dense autograd on dense copies, torch.sparse.softmax, torch's fake
tensors and dtype of eager results, torch.autograd.gradcheck) and formulas written out in torch
ops; nothing here calls sparsecc to make an expected value."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

import sparsecc as sc  # noqa: E402
import sparsecc.torch as sct  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

warnings.filterwarnings("ignore", message=".*Sparse (CSR|CSC|BSR|BSC) tensor support is in beta.*")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")

ops = torch.ops.sparsecc
F64 = torch.float64
DTYPES = [torch.bool, torch.int32, torch.int64, torch.float32, torch.float64, torch.complex64, torch.complex128]


# ------------------------------------------------------- 3: fake and real dtypes of the custom ops
def _values(dtype, n):
    v = torch.arange(1, n + 1)
    return (v % 2 == 1) if dtype == torch.bool else v.to(dtype)


def _fake_dtype(call, *tensors):
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fakes = [[mode.from_tensor(x) for x in t] if isinstance(t, list) else mode.from_tensor(t) for t in tensors]
        return call(*fakes).dtype


def _custom_calls(vdt, ddt):
    """(name, call, tensors) of each custom op on a 3 x 3 CSR operand of dtype vdt with a
    dense operand of dtype ddt; call(*tensors) runs it (real or fake tensors)."""
    crow, col = torch.tensor([0, 2, 2, 3]), torch.tensor([0, 2, 1])
    vals = _values(vdt, 3)
    B = _values(ddt, 6).reshape(3, 2)
    U, V = _values(ddt, 6).reshape(3, 2), _values(ddt, 6).reshape(3, 2)
    return [
        ("einsum_csr", lambda c, k, v, b: ops.einsum_csr("ij,jk->ik", c, k, v, 3, b), (crow, col, vals, [B])),
        ("einsum_sparse", lambda c, k, v, b: ops.einsum_sparse("ij,jk->ik", "csr", [c, k], v, [3, 3], b),
         (crow, col, vals, [B])),
        ("einsum_sparse_sampled",
         lambda c, k, v, b: ops.einsum_sparse_sampled("ij,ik,jk->ij", "csr", [c, k], v, [3, 3], b),
         (crow, col, vals, [U, V])),
    ]


def _sct_dtype(vdt, ddt):
    """What sct.einsum gives for the same operands (docs/torch.md: the custom ops are as sct)."""
    A = torch.sparse_csr_tensor(torch.tensor([0, 2, 2, 3]), torch.tensor([0, 2, 1]), _values(vdt, 3), (3, 3))
    return sct.einsum("ij,jk->ik", A, _values(ddt, 6).reshape(3, 2)).dtype


@pytest.mark.parametrize("vdt", DTYPES, ids=str)
@pytest.mark.parametrize("ddt", DTYPES, ids=str)
def test_custom_op_fake_dtype_is_the_real_dtype(vdt, ddt):
    want = _sct_dtype(vdt, ddt)
    for name, call, tensors in _custom_calls(vdt, ddt):
        real = call(*tensors)
        fake = _fake_dtype(call, *tensors)
        assert (name, fake) == (name, real.dtype), (vdt, ddt)
        assert (name, real.dtype) == (name, want), (vdt, ddt)


def test_int_values_float32_dense_under_fullgraph_compile():
    """The issue's case: int32 values, float32 operands; what follows the op reads the
    kernel's buffer with the dtype the fake implementation predicted."""
    crow, col = torch.tensor([0, 2, 2, 3]), torch.tensor([0, 2, 1])
    vals = torch.tensor([1, 2, 3], dtype=torch.int32)
    B = torch.arange(6, dtype=torch.float32).reshape(3, 2)

    def f(crow, col, vals, B):
        return ops.einsum_sparse("ij,jk->ik", "csr", [crow, col], vals, [3, 3], [B]) * 2 + 1

    want = f(crow, col, vals, B)
    # inductor's on-disk caches key a graph by its code, not by the custom op's fake dtype: a
    # graph compiled against an older fake implementation would come back from them
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        got = torch.compile(f, fullgraph=True, backend="inductor")(crow, col, vals, B)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    dense = torch.tensor([[1, 0, 2], [0, 0, 0], [0, 3, 0]], dtype=torch.float64)
    torch.testing.assert_close(want, (dense @ B.double() * 2 + 1).to(want.dtype))


# ------------------------------------------------------------- 4: uncoalesced COO in sct.ops
def _uncoalesced(D, parts=2):
    """D as an uncoalesced COO tensor: every entry split into ``parts`` equal duplicates."""
    c = D.to_sparse().coalesce()
    idx = torch.cat([c.indices()] * parts, 1)
    v = torch.cat([c.values() / parts] * parts)
    t = torch.sparse_coo_tensor(idx, v, D.shape)
    assert not t.is_coalesced()
    return t


D4 = torch.tensor([[1, 0, 2], [.5, 3, 1]], dtype=F64)


def test_sampled_addmm_uncoalesced_requiring_grad():
    U, V = torch.ones(2, 2, dtype=F64), torch.ones(2, 3, dtype=F64)
    A = _uncoalesced(D4).requires_grad_()
    got = sct.ops.sampled_addmm(A, U, V, beta=0.5)
    want = 0.5 * D4 + (D4 != 0) * (U @ V)
    torch.testing.assert_close(got.to_dense().detach(), want)
    with torch.no_grad():
        torch.testing.assert_close(sct.ops.sampled_addmm(A, U, V, beta=0.5).to_dense(), want)
    W = torch.arange(6, dtype=F64).reshape(2, 3)
    (got.to_dense() * W).sum().backward()
    torch.testing.assert_close(A.grad.to_dense(), 0.5 * W * (D4 != 0))
    assert A.grad.coalesce()._nnz() == int((D4 != 0).sum())


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_softmax_uncoalesced_gradient_is_torchs(log, dim):
    W = torch.arange(6, dtype=F64).reshape(2, 3) - 2
    A = _uncoalesced(D4).requires_grad_()
    y = (sct.ops.log_softmax if log else sct.ops.softmax)(A, dim)
    (y.to_dense() * W).sum().backward()
    R = _uncoalesced(D4).requires_grad_()
    r = (torch.sparse.log_softmax if log else torch.sparse.softmax)(R, dim)
    (r.to_dense() * W).sum().backward()
    torch.testing.assert_close(y.to_dense().detach(), r.to_dense().detach())
    torch.testing.assert_close(A.grad.to_dense(), R.grad.to_dense())
    # one entry per coordinate (the coalesced pattern), as the other differentiable ops give
    assert A.grad._nnz() == int((D4 != 0).sum())


def test_sampled_custom_op_uncoalesced_coo_is_per_element():
    """einsum_sparse_sampled's result is in values' order: each stored element (a duplicate
    too) gets its own value times the sampled product, so the elements of a coordinate sum to
    the coalesced result; gradients as torch's autograd of that formula."""
    A = _uncoalesced(D4, 2)
    idx = A._indices()
    # the two halves of each entry made unequal, so a wrong split shows
    vals = (A._values() * torch.tensor([0.5] * 5 + [1.5] * 5, dtype=F64)).requires_grad_()
    g = torch.Generator().manual_seed(4)
    U = torch.randn(2, 2, dtype=F64, generator=g, requires_grad=True)
    V = torch.randn(3, 2, dtype=F64, generator=g, requires_grad=True)
    s = ops.einsum_sparse_sampled("ij,ik,jk->ij", "coo", [idx], vals, [2, 3], [U, V])
    ref = vals * (U @ V.T)[idx[0], idx[1]]
    torch.testing.assert_close(s.detach(), ref.detach())
    dense = torch.sparse_coo_tensor(idx, s.detach(), (2, 3)).to_dense()
    torch.testing.assert_close(dense, D4 * (U @ V.T).detach())
    w = torch.arange(10, dtype=F64) - 3
    got = torch.autograd.grad((s * w).sum(), (vals, U, V))
    want = torch.autograd.grad((ref * w).sum(), (vals, U, V))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.library.opcheck(ops.einsum_sparse_sampled.default, ("ij,ik,jk->ij", "coo", [idx], vals, [2, 3], [U, V]))


def test_dense_result_custom_op_uncoalesced_coo():
    A = _uncoalesced(D4, 3)
    idx = A._indices()
    vals = A._values().clone().requires_grad_()
    B = torch.arange(6, dtype=F64).reshape(3, 2).requires_grad_()
    y = ops.einsum_sparse("ij,jk->ik", "coo", [idx], vals, [2, 3], [B])
    ref = torch.sparse_coo_tensor(idx, vals, (2, 3)).to_dense() @ B
    torch.testing.assert_close(y.detach(), ref.detach())
    w = torch.arange(4, dtype=F64).reshape(2, 2)
    for a, b in zip(torch.autograd.grad((y * w).sum(), (vals, B)), torch.autograd.grad((ref * w).sum(), (vals, B))):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_vjp_of_an_operand_with_repeated_coordinates(fmt):
    """(sibling of 4, Kernel.vjp) SciPy CSR/CSC may repeat a coordinate (non-canonical): each
    stored value's gradient is the gradient at its coordinate (the pattern of ones had a 2
    there, so every duplicate got twice it)."""
    data, minor, ptr = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 1, 0, 2]), np.array([0, 2, 4])
    if fmt == "csr":
        A = sp.csr_array((data, minor, ptr), shape=(2, 3))
    elif fmt == "csc":
        A = sp.csc_array((data, minor, np.array([0, 2, 3, 4])), shape=(3, 3))
    else:
        A = sp.coo_array((data, (np.array([0, 0, 1, 1]), minor)), shape=(2, 3))
    rows, cols = (np.repeat(np.arange(len(A.indptr) - 1), np.diff(A.indptr)), A.indices) if fmt != "coo" \
        else A.coords
    if fmt == "csc":
        rows, cols = cols, rows
    B = np.arange(6.0).reshape(3, 2)
    G = np.arange(2.0 * A.shape[0]).reshape(A.shape[0], 2) + 1
    gA, gB = sc.compile("ij,jk->ik").vjp(G, A, B)
    dense = np.zeros(A.shape)
    np.add.at(dense, (rows, cols), data)
    np.testing.assert_allclose(gB, dense.T @ G)
    full = G @ B.T                                  # d loss / d A at every coordinate
    if fmt == "coo":                                # one entry per coordinate (docs/torch.md)
        np.testing.assert_allclose(gA.toarray(), np.where(dense != 0, full, 0))
    else:                                           # A's own index arrays, each value its gradient
        np.testing.assert_array_equal(gA.indices, A.indices)
        np.testing.assert_allclose(gA.data, full[rows, cols])


# ------------------------------------------------------------- 5: adjoints at zeros (vs torch)
def _torch_grads(fn, arrays, G):
    ts = [torch.tensor(a, dtype=F64, requires_grad=True) for a in arrays]
    out = fn(*ts)
    grads = torch.autograd.grad(out, ts, torch.tensor(G, dtype=F64), allow_unused=True)
    return [np.zeros(np.shape(a)) if g is None else g.numpy() for g, a in zip(grads, arrays)]


AZ = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.5]])         # zeros stored or not
POINTS = {
    # statement, operands (A first: dense or sparse), the same in torch
    "pow by a scalar exponent": ("y[i] = sum[j](pow(A[i,j], e))", {"e": 2.0}, lambda A, e: torch.pow(A, e).sum(1)),
    "pow by exponent 0": ("y[i] = sum[j](pow(A[i,j], e))", {"e": 0.0}, lambda A, e: torch.pow(A, e).sum(1)),
    "pow by exponent 0.5": ("y[i] = sum[j](pow(A[i,j], e))", {"e": 0.5}, lambda A, e: torch.pow(A, e).sum(1)),
    "pow by a negative exponent": ("y[i] = sum[j](pow(A[i,j], e) * B[i,j])",
                                   {"e": -1.0, "B": np.array([[1.0, 0, 1], [0, 1, 1]])},
                                   lambda A, e, B: (torch.pow(A, e) * B).sum(1)),
    "x ** 0 (constant)": ("y[i] = sum[j](pow(A[i,j], 0.0) * B[i,j])", {"B": np.full((2, 3), 2.0)},
                          lambda A, B: (torch.pow(A, 0.0) * B).sum(1)),
    "pow by an operand": ("y[i] = sum[j](pow(A[i,j], E[i,j]))", {"E": np.array([[0.0, 0.0, 2.0], [1.0, 0.0, 2.0]])},
                          lambda A, E: torch.pow(A, E).sum(1)),
    "scalar to a power": ("y[i] = sum[j](pow(s, A[i,j]))", {"s": 0.0}, lambda A, s: torch.pow(s, A).sum(1)),
    "abs at 0": ("y[i] = sum[j](abs(A[i,j]) * B[i,j])", {"B": np.full((2, 3), 2.0)},
                 lambda A, B: (torch.abs(A) * B).sum(1)),
    "sqrt times zero": ("y[i] = sum[j](sqrt(A[i,j] + 1) * B[i,j])", {"B": np.full((2, 3), 2.0)},
                        lambda A, B: (torch.sqrt(A + 1) * B).sum(1)),
    "division by a scalar": ("y[i] = sum[j](A[i,j] / s)", {"s": 2.0}, lambda A, s: (A / s).sum(1)),
    "max at a tie": ("y[i] = sum[j](max(A[i,j], B[i,j]))", {"B": np.zeros((2, 3))},
                     lambda A, B: torch.maximum(A, B).sum(1)),
}


@pytest.mark.parametrize("case", sorted(POINTS))
@pytest.mark.parametrize("sparse", [False, True])
def test_adjoints_at_zero_match_torch(case, sparse):
    text, others, fn = POINTS[case]
    G = np.array([1.0, 2.0])
    k = sc.compile(text)
    names = k.stmt.operands
    arrays = {"A": AZ, **others}
    want = _torch_grads(fn, [arrays[n] for n in ["A", *others]], G)
    want = dict(zip(["A", *others], want))
    A = sp.csr_array(AZ) if sparse else AZ
    got = dict(zip(names, k.vjp(G, **{**arrays, "A": A})))
    for n in names:
        g = got[n]
        w = np.where(AZ != 0, want[n], 0) if (sparse and n == "A") else want[n]     # the masked rule
        g = g.toarray() if sp.issparse(g) else np.asarray(g)
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"{case}: gradient of {n}")
    # sparsecc.torch: the same adjoints through autograd
    ts = {n: torch.tensor(arrays[n], dtype=F64, requires_grad=True) for n in names}
    if sparse:
        ts["A"] = torch.tensor(AZ, dtype=F64).to_sparse_csr().requires_grad_()
    y = sct.evaluate(text, **ts)
    grads = torch.autograd.grad(y, [ts[n] for n in names], torch.tensor(G, dtype=F64))
    for n, g in zip(names, grads):
        w = np.where(AZ != 0, want[n], 0) if (sparse and n == "A") else want[n]
        g = g.to_dense() if g.layout != torch.strided else g
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-12, err_msg=f"{case}: sct gradient of {n}")


def test_pow_exponent_gradient_finite_difference():
    """The issue's case against finite differences: A with a stored zero and implicit ones."""
    A = sp.csr_array((np.array([1.5, 0.0, 2.0]), np.array([0, 1, 2]), np.array([0, 2, 3])), shape=(2, 3))
    k = sc.compile("y[i] = sum[j](pow(A[i,j], e))")
    G = np.array([1.0, -2.0])
    ge = float(k.vjp(G, A=A, e=1.7)[1])
    Ad = A.toarray()
    h = 1e-6
    fd = (G @ (np.power(Ad, 1.7 + h).sum(1)) - G @ (np.power(Ad, 1.7 - h).sum(1))) / (2 * h)
    assert np.isfinite(ge)
    np.testing.assert_allclose(ge, fd, rtol=1e-6)


@pytest.mark.parametrize("e", [2.0, 0.0, 0.5, 2 + 0j, 0j, -1 + 0j], ids=repr)
def test_complex_pow_gradients_at_zero_match_torch(e):
    """torch's rule for a complex base: d/de is 0 where the base is 0 and the exponent is real
    and >= 0 (a complex exponent with imag 0 too); d/dA is 0 where the exponent is 0."""
    g = torch.Generator().manual_seed(5)
    A = torch.randn(3, 4, dtype=torch.complex128, generator=g)
    A[0, 1] = A[2, 2] = 0
    et = torch.tensor(e, dtype=torch.complex128 if isinstance(e, complex) else F64)
    B = torch.randn(3, 4, dtype=torch.complex128, generator=g)
    got = [A.clone().requires_grad_(), et.clone().requires_grad_()]
    y = sct.evaluate("y[i] = sum[j](pow(A[i,j], e) * B[i,j])", A=got[0], e=got[1], B=B)
    ref = [A.clone().requires_grad_(), et.clone().requires_grad_()]
    r = (torch.pow(ref[0], ref[1]) * B).sum(1)
    w = torch.tensor([1.0, -2.0, 0.5j], dtype=torch.complex128)
    for a, b in zip(torch.autograd.grad((y * w).real.sum(), got), torch.autograd.grad((r * w).real.sum(), ref)):
        torch.testing.assert_close(a, b, equal_nan=True)


# ------------------------------------------- 10, 11: components that do not make a valid tensor
def _parts11():
    D = torch.tensor([[1.0, 0, 2, 0], [0, 3, 0, 4]], dtype=F64)
    return D, D.to_sparse_csr(), D.to_sparse_csc(), D.to_sparse_bsr((1, 2)), D.to_sparse().coalesce()


def _bad_component_calls():
    D, csr, csc, bsr, coo = _parts11()
    x = torch.ones(4, 2, dtype=F64)
    xs = [torch.ones(2, 2, dtype=F64), torch.ones(4, 2, dtype=F64)]
    crow = csr.crow_indices().clone()
    crow[-1] -= 1                           # crow[-1] < nnz: torch's invariant check refuses it
    ccol = csc.ccol_indices().clone()
    ccol[-1] -= 1
    bcrow = bsr.crow_indices().clone()
    bcrow[-1] -= 1
    idx, vals = coo.indices(), coo.values()

    def unchecked(ctor, *parts):
        return ctor(*parts, check_invariants=False)
    return {
        "coo values too short": lambda: ops.einsum_sparse("ij,jk->ik", "coo", [idx], vals[:-1], [2, 4], [x]),
        "coo values too long": lambda: ops.einsum_sparse("ij,jk->ik", "coo", [idx], torch.cat([vals, vals]),
                                                         [2, 4], [x]),
        "coo values too short, sampled": lambda: ops.einsum_sparse_sampled("ij,ik,jk->ij", "coo", [idx], vals[:-1],
                                                                           [2, 4], xs),
        "csr crow[-1] < nnz, sct": lambda: sct.einsum("ij,jk->ik", unchecked(
            torch.sparse_csr_tensor, crow, csr.col_indices(), csr.values(), (2, 4)), x),
        "csr crow[-1] < nnz, op": lambda: ops.einsum_sparse("ij,jk->ik", "csr", [crow, csr.col_indices()],
                                                            csr.values(), [2, 4], [x]),
        "csr crow[-1] < nnz, sampled": lambda: ops.einsum_sparse_sampled(
            "ij,ik,jk->ij", "csr", [crow, csr.col_indices()], csr.values(), [2, 4], xs),
        "csr crow[-1] < nnz, einsum_csr": lambda: ops.einsum_csr("ij,jk->ik", crow, csr.col_indices(),
                                                                 csr.values(), 4, [x]),
        "csr crow[-1] > nnz, sct": lambda: sct.einsum("ij,jk->ik", unchecked(
            torch.sparse_csr_tensor, csr.crow_indices() + torch.tensor([0, 0, 1]), csr.col_indices(),
            csr.values(), (2, 4)), x),
        "csc ccol[-1] < nnz, sct": lambda: sct.einsum("ij,jk->ik", unchecked(
            torch.sparse_csc_tensor, ccol, csc.row_indices(), csc.values(), (2, 4)), x),
        "csc ccol[-1] < nnz, op": lambda: ops.einsum_sparse("ij,jk->ik", "csc", [ccol, csc.row_indices()],
                                                            csc.values(), [2, 4], [x]),
        "bsr crow[-1] < blocks, sct": lambda: sct.einsum("ij,jk->ik", unchecked(
            torch.sparse_bsr_tensor, bcrow, bsr.col_indices(), bsr.values(), (2, 4)), x),
        "bsr crow[-1] < blocks, op": lambda: ops.einsum_sparse("ij,jk->ik", "bsr", [bcrow, bsr.col_indices()],
                                                               bsr.values(), [2, 4], [x]),
        "bsr col longer than values, op": lambda: ops.einsum_sparse(
            "ij,jk->ik", "bsr", [bsr.crow_indices(), torch.cat([bsr.col_indices(), bsr.col_indices()])],
            bsr.values(), [2, 4], [x]),
        "csr grad, crow[-1] < nnz": lambda: sct.einsum("ij,jk->ik", unchecked(
            torch.sparse_csr_tensor, crow, csr.col_indices(), csr.values().clone().requires_grad_(), (2, 4)), x),
    }


@pytest.mark.parametrize("case", sorted(_bad_component_calls()))
def test_bad_components_are_an_operand_error(case):
    with pytest.raises(sc.OperandError):
        _bad_component_calls()[case]()


@pytest.mark.parametrize("block", [(1, 2), (2, 1), (2, 2)])
def test_bsr_tensor_blocks_of_one_row_or_column(block):
    """(found next to 11) a torch BSR tensor with a block dimension of 1 ran as 'bsr1x2', which
    fails to compile in MLIR 22 (a CompileError); it runs as CSR, as a SciPy bsr_array does."""
    D, *_ = _parts11()
    B = D.to_sparse_bsr(block)
    x = torch.arange(8, dtype=F64).reshape(4, 2)
    torch.testing.assert_close(sct.einsum("ij,jk->ik", B, x), D @ x)
    Bv = B.values().clone().requires_grad_()
    y = ops.einsum_sparse("ij,jk->ik", "bsr", [B.crow_indices(), B.col_indices()], Bv, [2, 4], [x])
    torch.testing.assert_close(y.detach(), D @ x)
    gv, = torch.autograd.grad(y.sum(), [Bv])
    torch.testing.assert_close(gv, _bsr_grad(B, x))


def _bsr_grad(B, x):
    """d sum(A @ x) / d A's block values: x's row sums at every stored element."""
    R, C = B.values().shape[1:]
    cols = B.col_indices()
    rs = x.sum(1)
    return torch.stack([rs[c * C:(c + 1) * C].expand(R, C) for c in cols.tolist()])


# --------------------------------------------------- 15: gradcheck(masked=True) on COO inputs
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_gradcheck_masked_coo(dtype):
    D = torch.tensor([[1.0, 0, 2], [0, 3, 0]], dtype=F64).to(dtype) * (1 + 1j if dtype.is_complex else 1)
    A = D.to_sparse().coalesce().requires_grad_()
    x = torch.randn(3, 2, dtype=dtype, generator=torch.Generator().manual_seed(0)).requires_grad_()
    # torch's own sparse op passes the same call: the reference for what it checks
    if not dtype.is_complex:
        assert torch.autograd.gradcheck(lambda a, b: torch.sparse.mm(a, b), (A, x), masked=True)
    assert torch.autograd.gradcheck(lambda a, b: sct.einsum("ij,jk->ik", a, b), (A, x), masked=True)
    assert torch.autograd.gradcheck(lambda a, b: sct.evaluate("y[i,k] = exp(A[i,j]) * b[j,k]", A=a, b=b), (A, x),
                                    masked=True)


@pytest.mark.parametrize("log", [False, True])
def test_gradcheck_masked_coo_softmax(log):
    A = torch.tensor([[1.0, 0, 2], [0, 3, 0.5]], dtype=F64).to_sparse().coalesce().requires_grad_()
    f = sct.ops.log_softmax if log else sct.ops.softmax
    assert torch.autograd.gradcheck(lambda a: f(a, 1).to_dense(masked_grad=True), (A,), masked=True)


def test_undefined_output_gradient_gives_no_gradient():
    """What gradcheck's undefined-gradient check asks: an undefined output gradient gives
    undefined (None) input gradients, as torch's own sparse ops give."""
    A = torch.tensor([[1.0, 0, 2], [0, 3, 0]], dtype=F64).to_sparse().requires_grad_()
    x = torch.ones(3, 2, dtype=F64, requires_grad=True)
    for y in (sct.einsum("ij,jk->ik", A, x), torch.sparse.mm(A, x)):
        gA, gx = torch.autograd.grad(torch._C._functions.UndefinedGrad()(y), [A, x],
                                     torch.zeros_like(y), allow_unused=True)
        assert gA is None and gx is None
