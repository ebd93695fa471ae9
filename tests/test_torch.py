"""sparsecc.torch: torch tensors in and out (zero-copy), autograd through compiled adjoints.

Oracles: torch's own dense ops and numpy.einsum on dense copies, torch.autograd on dense
copies (masked to the pattern), torch.sparse.mm's backward, torch.autograd.gradcheck."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
import sparsecc as sc  # noqa: E402
import sparsecc.torch as sct  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
warnings.filterwarnings("ignore", message=".*Sparse (CSR|CSC|BSR|BSC) tensor support is in beta.*")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")

LAYOUTS = ["strided", "coo", "coo_uncoalesced", "csr", "csr32", "csc", "bsr"]
DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int32, torch.int64, torch.bool]


def _dense(shape, dtype, seed, density=0.5):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) < density
    if dtype == torch.bool:
        return mask
    if dtype.is_complex:
        v = torch.randn(shape, generator=g, dtype=dtype)
    elif dtype.is_floating_point:
        v = torch.randn(shape, generator=g, dtype=dtype)
    else:
        v = torch.randint(1, 5, shape, generator=g, dtype=dtype)
    return v * mask


def _layout(D, layout, block=(2, 2)):
    if layout == "strided":
        return D.clone()
    if layout == "coo":
        return D.to_sparse().coalesce()
    if layout == "coo_uncoalesced":        # every entry split in two halves (int/bool: stored twice as is)
        c = D.to_sparse().coalesce()
        idx, val = c.indices(), c.values()
        if D.dtype == torch.bool:
            v2 = torch.cat([val, torch.zeros_like(val)])
        elif D.dtype.is_floating_point or D.dtype.is_complex:
            v2 = torch.cat([val / 2, val / 2])
        else:
            v2 = torch.cat([val - val // 2, val // 2])
        t = torch.sparse_coo_tensor(torch.cat([idx, idx], 1), v2, D.shape, check_invariants=True)
        assert not t.is_coalesced()
        return t
    if layout == "csr":
        return D.to_sparse_csr()
    if layout == "csr32":
        c = D.to_sparse_csr()
        return torch.sparse_csr_tensor(c.crow_indices().int(), c.col_indices().int(), c.values(), D.shape,
                                       check_invariants=True)
    if layout == "csc":
        return D.to_sparse_csc()
    if layout == "bsr":
        return D.to_sparse_bsr(block)
    raise AssertionError(layout)


def _np_dense(t):
    t = t.detach()
    return (t.to_dense() if t.layout != torch.strided else t).numpy()


def _close(got, want, dtype):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    if dtype in (torch.bool, torch.int32, torch.int64):
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if dtype in (torch.float32, torch.complex64) else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- import
def test_import_sparsecc_does_not_import_torch():
    code = "import sys, sparsecc, sparsecc.ops, sparsecc.autodiff; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=_env())


def _env(**drop):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


# ----------------------------------------------------------------------------- forward
@pytest.mark.parametrize("layout", LAYOUTS)
def test_spmv_every_layout(layout):
    D = _dense((6, 4), torch.float64, 1)
    A = _layout(D, layout)
    x = torch.randn(4, dtype=torch.float64)
    before = _np_dense(A).copy()
    y = sct.einsum("ij,j->i", A, x)
    assert isinstance(y, torch.Tensor) and y.layout == torch.strided and y.dtype == torch.float64
    _close(y.numpy(), np.einsum("ij,j->i", D.numpy(), x.numpy()), torch.float64)
    np.testing.assert_array_equal(_np_dense(A), before)     # nothing the user passes is modified


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["strided", "csr", "coo_uncoalesced"])
def test_spmm_dtypes(layout, dtype):
    D = _dense((5, 4), dtype, 2)
    B = _dense((4, 3), dtype, 3, density=1.0)
    y = sct.einsum("ij,jk->ik", _layout(D, layout), B)
    assert y.dtype == dtype
    _close(y.numpy(), np.einsum("ij,jk->ik", D.numpy(), B.numpy()), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_are_refused(dtype):
    with pytest.raises(sc.DTypeError, match="float16|bfloat16"):
        sct.einsum("ij,j->i", torch.ones(2, 2, dtype=dtype), torch.ones(2, dtype=dtype))


def test_non_cpu_tensor_is_refused():
    with pytest.raises(sc.SparseccError, match="CPU tensors only"):
        sct.einsum("ij,j->i", torch.ones(2, 2, device="meta"), torch.ones(2))


def test_hybrid_sparse_is_refused():
    h = torch.ones(3, 2, 2).to_sparse(sparse_dim=1)
    with pytest.raises(sc.FormatError, match="hybrid"):
        sct.einsum("ijk->i", h)


@pytest.mark.parametrize("out_format,layout", [("csr", torch.sparse_csr), ("csc", torch.sparse_csc),
                                               ("coo", torch.sparse_coo)])
def test_sparse_results_have_the_matching_layout(out_format, layout):
    D, B = _dense((5, 4), torch.float64, 4), _dense((4, 6), torch.float64, 5)
    C = sct.einsum("ik,kj->ij", D.to_sparse_csr(), B.to_sparse_csr(), out_format=out_format)
    assert C.layout == layout
    _close(C.to_dense().numpy(), (D @ B).numpy(), torch.float64)


def test_sddmm_csr_result_is_on_the_pattern():
    D = _dense((6, 5), torch.float64, 6)
    A = D.to_sparse_csr()
    U, V = torch.randn(6, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    k = sct.compile("ij,ik,jk->ij", "csr", "dense", "dense", out_format="csr")
    C = k(A, U, V)
    assert C.layout == torch.sparse_csr
    assert torch.equal(C.crow_indices().long(), A.crow_indices()) and torch.equal(C.col_indices().long(),
                                                                                   A.col_indices())
    _close(C.to_dense().numpy(), (D * (U @ V.T)).numpy(), torch.float64)


def test_evaluate_max_reduction():
    D = _dense((4, 5), torch.float64, 7)
    b = torch.randn(4, dtype=torch.float64)
    z = sct.evaluate("z[i] = max[j](A[i,j]) + b[i]", A=D.to_sparse_csr(), b=b)
    S = sp.csr_array(D.numpy())
    want = np.array([S[[i]].data.max() if S[[i]].nnz else -np.inf for i in range(4)]) + b.numpy()
    _close(z.numpy(), want, torch.float64)


def test_ops_on_tensors():
    D = _dense((4, 5), torch.float64, 8)
    B = torch.randn(5, 2, dtype=torch.float64)
    _close(sct.ops.mm(D.to_sparse_csr(), B).numpy(), (D @ B).numpy(), torch.float64)
    with pytest.raises(sc.SparseccError, match="no backward"):
        sct.ops.transpose(D.to_sparse_csr().requires_grad_())


# ----------------------------------------------------------------------------- zero-copy
@pytest.mark.parametrize("layout", ["strided", "coo", "coo_uncoalesced", "csr", "csr32", "csc", "bsr"])
def test_operands_share_memory(layout):
    t = _layout(_dense((4, 6), torch.float64, 9), layout)
    x = sct.to_sparsecc(t)
    if layout == "strided":
        assert np.shares_memory(x, t.numpy())
        return
    if layout.startswith("coo"):
        assert np.shares_memory(x.data, t._values().numpy())
        assert np.shares_memory(x.coords[0], t._indices().numpy()) and x.coords[0].dtype == np.int64
        assert x.has_canonical_format == t.is_coalesced()
        return
    ptr = t.ccol_indices() if layout == "csc" else t.crow_indices()
    idx = t.row_indices() if layout == "csc" else t.col_indices()
    assert np.shares_memory(x.data, t.values().numpy())
    assert np.shares_memory(x.indptr, ptr.numpy()) and np.shares_memory(x.indices, idx.numpy())
    assert x.indices.dtype == (np.int32 if layout == "csr32" else np.int64)


def test_int64_indices_run_without_conversion():
    t = _dense((4, 6), torch.float64, 10).to_sparse_csr()
    k = sct.compile("ij,j->i")
    k(t, torch.ones(6, dtype=torch.float64))
    assert [f.pos_width for f in k.last.last_formats()][0] == 64
    t32 = _layout(_dense((4, 6), torch.float64, 10), "csr32")
    k(t32, torch.ones(6, dtype=torch.float64))
    assert [f.pos_width for f in k.last.last_formats()][0] == 32


def test_results_share_the_kernels_buffers():
    C = sp.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]]))
    t = sct.from_sparsecc(C)
    assert np.shares_memory(t.values().numpy(), C.data) and np.shares_memory(t.col_indices().numpy(), C.indices)
    y = np.arange(3.0)
    assert np.shares_memory(sct.from_sparsecc(y).numpy(), y)


# ----------------------------------------------------------------------------- gradients
GRAD_LAYOUTS = ["coo", "coo_uncoalesced", "csr", "csr32", "csc", "bsr"]


def _sparse_leaf(D, layout):
    return _layout(D, layout).detach().requires_grad_(True)


def _gradcheck(f, inputs):
    return torch.sparse.as_sparse_gradcheck(torch.autograd.gradcheck)(f, inputs, masked=True)


@pytest.mark.parametrize("layout", GRAD_LAYOUTS)
def test_gradcheck_spmv_spmm(layout):
    D = _dense((4, 6), torch.float64, 11)
    A = _sparse_leaf(D, layout)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    B = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda A, x: sct.einsum("ij,j->i", A, x), (A, x))
    assert _gradcheck(lambda A, B: sct.einsum("ij,jk->ik", A, B), (A, B))


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr"])
def test_gradcheck_sddmm_sparse_output(layout):
    D = _dense((4, 6), torch.float64, 12)
    A = _sparse_leaf(D, layout)
    U = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    V = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    k = sct.compile("ij,ik,jk->ij", out_format="csr")
    assert _gradcheck(lambda A, U, V: k(A, U, V), (A, U, V))


def test_gradcheck_mttkrp_and_chain():
    T = _dense((3, 4, 5), torch.float64, 13, density=0.3).to_sparse().requires_grad_(True)
    B = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    C = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda T, B, C: sct.einsum("ijk,jr,kr->ir", T, B, C), (T, B, C))
    A = _sparse_leaf(_dense((4, 6), torch.float64, 14), "csr")
    B2 = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    M = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda A, B2, M: sct.einsum("ij,jk,kl->il", A, B2, M), (A, B2, M))


@pytest.mark.parametrize("layout", GRAD_LAYOUTS)
def test_grads_match_dense_autograd_masked(layout):
    D = _dense((4, 6), torch.float64, 15)
    A = _sparse_leaf(D, layout)
    B = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    W = torch.randn(4, 3, dtype=torch.float64)
    # torch.autograd.grad: torch cannot accumulate a CSC/BSR gradient into a leaf's .grad
    # ("Sparse CSC tensors do not have is_contiguous"); see test_values_leaf_for_every_layout
    gA, gB = torch.autograd.grad((sct.einsum("ij,jk->ik", A, B) * W).sum(), (A, B))
    Dd = D.clone().requires_grad_(True)
    Bd = B.detach().clone().requires_grad_(True)
    ((Dd @ Bd) * W).sum().backward()
    assert gA.layout == A.layout
    mask = _np_dense(_layout(torch.ones_like(D) * (D != 0), layout)) != 0
    if layout == "bsr":
        mask = np.kron(_np_dense(_layout(D, "bsr")).reshape(2, 2, 3, 2).any(axis=(1, 3)) * 1, np.ones((2, 2))) != 0
    _close(_np_dense(gA), Dd.grad.numpy() * mask, torch.float64)
    _close(gB.numpy(), Bd.grad.numpy(), torch.float64)
    # the gradient has the operand's own index tensors (its pattern, stored zeros included)
    if layout == "coo":
        assert torch.equal(gA._indices(), A._indices())
    elif layout == "coo_uncoalesced":     # one entry per coordinate, as torch.sparse.mm's gradient
        assert torch.equal(gA._indices(), A.detach().coalesce().indices())
    elif layout in ("csr", "csr32", "bsr"):
        assert torch.equal(gA.col_indices(), A.col_indices())


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
def test_values_leaf_for_every_layout(layout):
    """The leaf is the values tensor, the sparse tensor built from it: .backward() works for
    every layout and the gradient is in the layout's value order."""
    D = _dense((4, 6), torch.float64, 19)
    base = _layout(D, layout)
    v = base.values().clone().requires_grad_(True)
    if layout == "csc":
        A = torch.sparse_csc_tensor(base.ccol_indices(), base.row_indices(), v, D.shape)
    else:
        ctor = torch.sparse_csr_tensor if layout == "csr" else torch.sparse_bsr_tensor
        A = ctor(base.crow_indices(), base.col_indices(), v, D.shape)
    x = torch.randn(6, dtype=torch.float64)
    w = torch.randn(4, dtype=torch.float64)
    (sct.einsum("ij,j->i", A, x) * w).sum().backward()
    want = torch.outer(w, x)          # d/dA[i,j] at every entry (no zeros)
    if layout == "csc":
        mask = torch.sparse_csc_tensor(base.ccol_indices(), base.row_indices(), torch.ones_like(v), D.shape)
    else:
        ctor = torch.sparse_csr_tensor if layout == "csr" else torch.sparse_bsr_tensor
        mask = ctor(base.crow_indices(), base.col_indices(), torch.ones_like(v), D.shape)
    expect = _layout(want * mask.to_dense(), layout).values()     # same pattern, same order
    assert expect.shape == v.shape
    _close(v.grad.numpy(), expect.numpy(), torch.float64)


@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
def test_grads_match_torch_sparse_mm(layout):
    D = _dense((5, 4), torch.float64, 16)
    A1, A2 = _sparse_leaf(D, layout), _sparse_leaf(D, layout)
    B1 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    B2 = B1.detach().clone().requires_grad_(True)
    W = torch.randn(5, 3, dtype=torch.float64)
    (sct.einsum("ij,jk->ik", A1, B1) * W).sum().backward()
    (torch.sparse.mm(A2, B2) * W).sum().backward()
    _close(A1.grad.to_dense().numpy(), A2.grad.to_dense().numpy(), torch.float64)
    _close(B1.grad.numpy(), B2.grad.numpy(), torch.float64)


def test_stored_zero_gets_its_gradient():
    crow, col = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 1])
    A = torch.sparse_csr_tensor(crow, col, torch.tensor([0.0, 2.0, 3.0], dtype=torch.float64), (2, 2),
                                requires_grad=True)
    x = torch.tensor([5.0, 7.0], dtype=torch.float64)
    sct.einsum("ij,j->i", A, x).sum().backward()
    assert A.grad.values().tolist() == [5.0, 7.0, 7.0]


@pytest.mark.parametrize("expr,shapes", [("ii->", [(4, 4)]), ("ij->i", [(4, 3)]), ("i,j->ij", [(3,), (2,)]),
                                         ("ij,ij->", [(3, 4), (3, 4)])])
def test_dense_gradients_repeated_and_summed_only_indices(expr, shapes):
    ts = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    assert torch.autograd.gradcheck(lambda *a: sct.einsum(expr, *a), ts)


def test_sparse_diagonal_gradient():
    D = _dense((4, 4), torch.float64, 17) + torch.eye(4, dtype=torch.float64)
    A = _sparse_leaf(D, "csr")
    assert _gradcheck(lambda A: sct.einsum("ii->", A), (A,))


def test_numpy_vjp():
    rng = np.random.default_rng(0)
    A = sp.random_array((5, 4), density=0.5, format="csr", random_state=1)
    B = rng.standard_normal((4, 3))
    G = rng.standard_normal((5, 3))
    gA, gB = sc.compile("ij,jk->ik").vjp(G, A, B)
    assert isinstance(gA, sp.csr_array) and np.shares_memory(gA.indices, A.indices)
    mask = A.toarray() != 0
    np.testing.assert_allclose(gA.toarray(), (G @ B.T) * mask, atol=1e-12)
    np.testing.assert_allclose(gB, A.toarray().T @ G, atol=1e-12)
    with pytest.raises(sc.ShapeError, match="cotangent"):
        sc.compile("ij,jk->ik").vjp(G[:2], A, B)


def test_backward_of_a_semiring_is_a_clear_error():
    A = _sparse_leaf(_dense((3, 3), torch.float64, 18), "csr")
    y = sct.einsum("ij,j->i", A, torch.ones(3, dtype=torch.float64), semiring="times_times")
    with pytest.raises(sc.SparseccError, match="monoid 'times'"):
        y.sum().backward()


def test_min_plus_semiring_gradient():
    A = _sparse_leaf(_dense((4, 5), torch.float64, 24), "csr")
    d = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda A, d: sct.einsum("ij,j->i", A, d, semiring="min_plus"), (A, d))


# ----------------------------------------------------------------------------- threads
def test_threads_follow_torch_unless_set():
    code = ("import torch, sparsecc as sc, sparsecc.torch as sct\n"
            "torch.set_num_threads(1)\n"
            "sct.einsum('i->', torch.ones(3))\n"
            "assert sc.get_num_threads() == 1, sc.get_num_threads()\n"
            "torch.set_num_threads(2); sct.einsum('i->', torch.ones(3))\n"
            "assert sc.get_num_threads() == 2, sc.get_num_threads()\n"
            "sc.set_num_threads(3); torch.set_num_threads(1); sct.einsum('i->', torch.ones(3))\n"
            "assert sc.get_num_threads() == 3, sc.get_num_threads()\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=_env(SPARSECC_NUM_THREADS=1))
    # a count the user sets wins even when it equals the one torch had
    code = ("import torch, sparsecc as sc, sparsecc.torch as sct\n"
            "torch.set_num_threads(2); sct.einsum('i->', torch.ones(3))\n"
            "sc.set_num_threads(2); torch.set_num_threads(1); sct.einsum('i->', torch.ones(3))\n"
            "assert sc.get_num_threads() == 2, sc.get_num_threads()\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=_env(SPARSECC_NUM_THREADS=1))
    # SPARSECC_NUM_THREADS is the user's choice too
    code = ("import torch, sparsecc as sc, sparsecc.torch as sct\n"
            "torch.set_num_threads(1); sct.einsum('i->', torch.ones(3))\n"
            "assert sc.get_num_threads() == 2, sc.get_num_threads()\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=dict(_env(), SPARSECC_NUM_THREADS="2"))


# ----------------------------------------------------------------------------- example
def test_gcn_example_runs():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch", "gcn.py"), "--epochs", "20"],
                         check=True, capture_output=True, text=True, cwd=ROOT, env=env)
    assert "results match: yes" in out.stdout and "ms per epoch" in out.stdout


# ----------------------------------------------------------------------------- torch.compile
def test_torch_compile_with_graph_breaks_trains_like_eager():
    A = _dense((6, 6), torch.float64, 20, density=0.4).to_sparse_csr()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2, dtype=torch.float64)

        def forward(self, x):
            return torch.tanh(sct.einsum("ij,jk->ik", A, self.lin(x))).sum()

    torch.manual_seed(0)
    m = M()
    x = torch.randn(6, 3, dtype=torch.float64)
    eager = m(x)
    eager.backward()
    g = m.lin.weight.grad.clone()
    m.zero_grad()
    out = torch.compile(m)(x)
    out.backward()
    _close(out.detach().numpy(), eager.detach().numpy(), torch.float64)
    _close(m.lin.weight.grad.numpy(), g.numpy(), torch.float64)


# ----------------------------------------------------------------------------- index notation
NOTATION = [
    ("y[i] = exp(A[i,j]) * x[j]", {"A": (4, 5), "x": (5,)}),
    ("y[i] = tanh(A[i,j] * x[j])", {"A": (4, 5), "x": (5,)}),
    ("y[i] = sin(u[i]) + log(b[i]) - 2.5 * sqrt(b2[i]) / 3", {"u": (4,), "b": (4,), "b2": (4,)}),
    ("y[i,j] = max(A[i,j], 0) * pow(w[j], 2)", {"A": (4, 5), "w": (5,)}),
    ("y[i] = where(u[i] > 0, b[i], atan(b2[i])) * alpha", {"u": (4,), "b": (4,), "b2": (4,), "alpha": ()}),
    ("s = sum[i,j](log1p(abs(A[i,j])) * expm1(x[j]))", {"A": (4, 5), "x": (5,)}),
    ("y[i] = sqrt(sum[j](pow(A[i,j], 2))) * b[i] + C[i,k] * x[k]", {"A": (4, 5), "b": (4,), "C": (4, 3),
                                                                     "x": (3,)}),
    ("O[i,j] = beta * C[i,j] + alpha * A[i,k] * B[k,j]", {"C": (3, 2), "A": (3, 4), "B": (4, 2), "beta": (),
                                                          "alpha": ()}),
]


def _positive(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) + 0.5)


@pytest.mark.parametrize("statement,shapes", NOTATION)
def test_notation_gradients_dense(statement, shapes):
    ts = [(_positive(s, k) * (1 if k % 2 else -1) if "u" == n else _positive(s, k)).requires_grad_(True)
          for k, (n, s) in enumerate(shapes.items())]
    assert torch.autograd.gradcheck(lambda *a: sct.evaluate(statement, **dict(zip(shapes, a))), ts)


@pytest.mark.parametrize("layout", ["csr", "coo", "csc"])
@pytest.mark.parametrize("statement", ["y[i] = exp(A[i,j]) * x[j]", "y[i] = tanh(A[i,j] * x[j])",
                                       "s = sum[i,j](log1p(abs(A[i,j])) * expm1(x[j]))"])
def test_notation_gradients_sparse_masked(statement, layout):
    A = _sparse_leaf(_dense((4, 5), torch.float64, 21), layout)
    x = _positive(5, 22).requires_grad_(True)
    assert _gradcheck(lambda A, x: sct.evaluate(statement, A, x), (A, x))


@pytest.mark.parametrize("layout", ["strided", "csr", "coo"])
def test_max_min_reductions_give_the_gradient_to_the_attaining_entries(layout):
    D = torch.tensor([[1.0, 0.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0], [-2.0, 5.0, 0.0, -1.0]], dtype=torch.float64)
    A = _sparse_leaf(D, layout)
    w = torch.tensor([1.0, 2.0, 0.5, 0.5], dtype=torch.float64, requires_grad=True)
    c = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    z = sct.evaluate("z[i] = max[j](A[i,j] * w[j])", A=A, w=w)
    gA, gw = torch.autograd.grad((z * c).sum(), (A, w))
    # written out: row 0 ties (1.5 at j=2,3: half each), row 1 has no entry (sparse: no gradient;
    # dense: every 0 ties, 1/4 each), row 2's max is 10 at j=1
    want = np.zeros((3, 4))
    want[0, 2] = want[0, 3] = 0.5 * 0.5 * 1
    want[2, 1] = 2.0 * 3
    want_w = np.array([0.0, 5.0 * 3, 0.5 * 1.0 * 3, 0.5 * 1.0 * 3])
    if layout == "strided":
        want[1, :] = 0.25 * 2 * np.array([1.0, 2.0, 0.5, 0.5])
        want_w += 0.25 * 2 * 0.0
    else:
        want = want * (D.numpy() != 0)
    _close(_np_dense(gA), want, torch.float64)
    _close(gw.numpy(), want_w, torch.float64)
    m = sct.evaluate("m = min[i,j](A[i,j])", A=A)
    (gA,) = torch.autograd.grad(m, (A,))
    want = np.zeros((3, 4))
    want[2, 0] = 1.0
    _close(_np_dense(gA), want, torch.float64)


def test_notation_without_a_derivative_is_a_clear_error():
    A = _sparse_leaf(_dense((3, 3), torch.float64, 23), "csr")
    y = sct.evaluate("z[i] = times[j](A[i,j])", A=A)
    with pytest.raises(sc.SparseccError, match="monoid"):
        y.sum().backward()
    y = sct.evaluate("z[i] = max[j](A[i,j]) + 1", A=A)
    with pytest.raises(sc.SparseccError, match="nested reduction max"):
        y.sum().backward()
    y = sct.evaluate("z[i] = A[i,j] * A[j,i]", A=A)
    with pytest.raises(sc.SparseccError, match="more than once"):
        y.sum().backward()


def test_custom_op_fullgraph_trains_like_eager():
    A = _dense((6, 6), torch.float64, 25, density=0.4).to_sparse_csr()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2, dtype=torch.float64)
            self.vals = torch.nn.Parameter(A.values().clone())
            self.register_buffer("crow", A.crow_indices())
            self.register_buffer("col", A.col_indices())

        def forward(self, x):
            y = torch.ops.sparsecc.einsum_csr("ij,jk->ik", self.crow, self.col, self.vals, 6, [self.lin(x)])
            return torch.tanh(y).sum()

    torch.manual_seed(0)
    m = M()
    x = torch.randn(6, 3, dtype=torch.float64)
    torch.library.opcheck(torch.ops.sparsecc.einsum_csr.default,
                          ("ij,jk->ik", m.crow, m.col, m.vals.detach().clone().requires_grad_(), 6,
                           [torch.randn(6, 2, dtype=torch.float64, requires_grad=True)]))
    out = torch.compile(m, fullgraph=True)(x)
    out.backward()
    # oracle: dense autograd on a dense copy, the values' gradient read on the pattern
    Ad = A.to_dense().requires_grad_(True)
    lin = torch.nn.Linear(3, 2, dtype=torch.float64)
    lin.load_state_dict(m.lin.state_dict())
    want = torch.tanh(Ad @ lin(x)).sum()
    want.backward()
    _close(out.detach().numpy(), want.detach().numpy(), torch.float64)
    _close(m.vals.grad.numpy(), Ad.grad[A.to_dense() != 0].numpy(), torch.float64)
    _close(m.lin.weight.grad.numpy(), lin.weight.grad.numpy(), torch.float64)


# ----------------------------------------------------------------------------- ops gradients
@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_ops_gradients(layout):
    A = _sparse_leaf(_dense((4, 5), torch.float64, 26), layout)
    B = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    C = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda A, B: sct.ops.mm(A, B), (A, B))
    assert _gradcheck(lambda A, x: sct.ops.mv(A, x), (A, x))
    assert _gradcheck(lambda C, A, B: sct.ops.addmm(C, A, B, beta=0.5, alpha=2.0), (C, A, B))
    assert _gradcheck(lambda A: sct.ops.sum(sct.ops.mul(A, 3.0), dim=1), (A,))
    U = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    V = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    assert _gradcheck(lambda A, U, V: sct.ops.sampled_addmm(A, U, V, beta=0.5, alpha=2.0), (A, U, V))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_softmax_gradients_match_torch_sparse(log, dim):
    D = _dense((4, 5), torch.float64, 27)
    A1 = D.to_sparse().requires_grad_(True)
    A2 = D.to_sparse().requires_grad_(True)
    W = torch.randn(4, 5, dtype=torch.float64)
    ours = (sct.ops.log_softmax if log else sct.ops.softmax)(A1, dim)
    theirs = (torch.sparse.log_softmax if log else torch.sparse.softmax)(A2, dim)
    _close(ours.to_dense().detach().numpy(), theirs.to_dense().detach().numpy(), torch.float64)
    (gA1,) = torch.autograd.grad((ours.to_dense() * W * (D != 0)).sum(), (A1,))
    (gA2,) = torch.autograd.grad((theirs.to_dense() * W * (D != 0)).sum(), (A2,))
    _close(gA1.to_dense().numpy(), gA2.to_dense().numpy(), torch.float64)
    Dd = D.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda X: (sct.ops.log_softmax if log else sct.ops.softmax)(X, dim), (Dd,))


# ----------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr"])
@pytest.mark.parametrize("nnz", [0, 1])
def test_empty_and_single_entry_operands(layout, nnz):
    D = torch.zeros(4, 6, dtype=torch.float64)
    if nnz:
        D[1, 3] = 2.5
    A = _sparse_leaf(D, layout)
    B = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    W = torch.randn(4, 3, dtype=torch.float64)
    y = sct.einsum("ij,jk->ik", A, B)
    _close(y.detach().numpy(), (D @ B).detach().numpy(), torch.float64)
    gA, gB = torch.autograd.grad((y * W).sum(), (A, B))
    _close(gB.numpy(), (D.T @ W).numpy(), torch.float64)
    want = (W @ B.detach().T).numpy()
    mask = _np_dense(_layout(D, layout)) != 0
    if layout == "bsr" and nnz:
        mask = np.zeros((4, 6), bool)
        mask[0:2, 2:4] = True
    _close(_np_dense(gA), want * mask, torch.float64)
    assert gA.layout == A.layout


def test_operand_modified_in_place_before_backward_is_reported():
    A = _sparse_leaf(_dense((3, 4), torch.float64, 28), "csr")
    x = torch.randn(4, dtype=torch.float64)
    y = sct.einsum("ij,j->i", A, x)
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_double_backward_raises_instead_of_a_silently_missing_term():
    """Gradients are first order: differentiating a gradient (create_graph=True) must raise,
    not drop sparsecc's part of the second-order term (it did: g had no grad_fn, and
    ``grad(g.sum() + X.pow(2).sum(), X)`` returned only the X term)."""
    torch.manual_seed(0)
    A = torch.randn(8, 8, dtype=torch.float64)
    A[A.abs() < 0.7] = 0
    X = torch.randn(8, 4, dtype=torch.float64, requires_grad=True)
    Y = sct.einsum("ij,jk->ik", A.to_sparse_csr(), X)
    g, = torch.autograd.grad(Y.pow(2).sum(), X, create_graph=True)
    with pytest.raises(sc.SparseccError, match="second-order gradients"):
        torch.autograd.grad(g.sum() + X.pow(2).sum(), X)
    g, = torch.autograd.grad(Y.pow(2).sum(), X, create_graph=True)
    with pytest.raises(sc.SparseccError, match="second-order gradients"):
        (g.sum() + X.pow(2).sum()).backward()
    # first-order gradients are unchanged under create_graph
    want = 2 * A.T @ (A @ X.detach())
    assert torch.allclose(g.detach(), want)


@pytest.mark.parametrize("coords", [[[0, 5], [0, 1]], [[0, -1], [0, 1]], [[0, 1], [0, 3]]])
def test_coo_coordinates_out_of_range_are_an_operand_error(coords):
    """A COO tensor built with check_invariants=False and bad coordinates got SciPy's bare
    ValueError (not a SparseccError), from sct calls and the custom ops alike."""
    A = torch.sparse_coo_tensor(torch.tensor(coords), torch.ones(2, dtype=torch.float64), (2, 3),
                                check_invariants=False)
    with pytest.raises(sc.OperandError, match="operand 0"):
        sct.einsum("ij,j->i", A, torch.ones(3, dtype=torch.float64))
    with pytest.raises(sc.SparseccError):
        torch.ops.sparsecc.einsum_sparse("ij,jk->ik", "coo", [torch.tensor(coords)], torch.ones(2, dtype=torch.float64),
                                         [2, 3], [torch.ones(3, 2, dtype=torch.float64)])


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_ops_addmm_of_sparse_tensors_stores_the_union_with_gradients(layout):
    """sct.ops.addmm of three sparse tensors stored every entry (the fused statement ran
    split); now the product then the union, and gradients still match dense autograd masked."""
    torch.manual_seed(3)
    dense_ = []
    for m, n in ((6, 5), (6, 4), (4, 5)):
        D = torch.randn(m, n, dtype=torch.float64)
        D[D.abs() < 1] = 0
        dense_.append(D)
    conv = (lambda D: D.to_sparse_csr()) if layout == "csr" else (lambda D: D.to_sparse().coalesce())
    C, A, B = (conv(D).requires_grad_(True) for D in dense_)
    O = sct.ops.addmm(C, A, B, beta=0.5, alpha=2.0)
    Cd, Ad, Bd = dense_
    union = (Cd != 0) | ((Ad != 0).double() @ (Bd != 0).double() != 0)
    assert O.layout != torch.strided
    assert (O.to_dense() != 0).sum() <= int(union.sum())
    kept = O.to_sparse_coo().coalesce()._indices()
    assert kept.shape[1] == int(union.sum()) and bool(union[kept[0], kept[1]].all())
    W = torch.randn(6, 5, dtype=torch.float64)
    grads = torch.autograd.grad((O.to_dense() * W).sum(), (C, A, B))
    xs = [D.clone().requires_grad_(True) for D in dense_]
    want = torch.autograd.grad(((0.5 * xs[0] + 2 * xs[1] @ xs[2]) * W).sum(), xs)
    for g, w, D in zip(grads, want, dense_):
        assert torch.allclose(g.to_dense(), w * (D != 0))
