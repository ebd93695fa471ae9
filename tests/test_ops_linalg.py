"""sparsecc.ops linear algebra and element-wise ops against NumPy/SciPy/torch (seeded).

Values against dense oracles; patterns (which entries are stored) against the rules of
docs/ops.md.  The grid is kept modest: every distinct (op, formats, dtype) is a compile.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import ops

FORMATS = ["csr", "csc", "coo"]
DTYPES = ["float64", "float32", "int64", "complex128"]
# every format in float64, every dtype in CSR (each combination is a compile)
GRID = [(f, "float64") for f in FORMATS] + [("csr", d) for d in DTYPES[1:]]


def rand_sparse(shape, density, fmt, dtype, seed, stored_zero=True):
    rng = np.random.default_rng(seed)
    D = rng.random(shape) * (rng.random(shape) < density)
    if dtype == "int64":
        D = np.ceil(D * 5)
    if dtype == "complex128":
        D = D + 1j * D[::-1].reshape(shape) * (D != 0)
    X = sp.coo_array(D.astype(dtype))
    if stored_zero and X.nnz:
        X.data[0] = 0                   # a stored zero must stay stored
    return X.asformat(fmt)


def dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def close(got, ref, dtype="float64"):
    tol = 1e-5 if dtype in ("float32",) else 1e-10
    np.testing.assert_allclose(dense(got), dense(ref), rtol=tol, atol=tol)


def stored(x) -> set:
    c = sp.coo_array(x)
    return set(zip(*[k.tolist() for k in c.coords]))


# ----------------------------------------------------------------------------- linalg

@pytest.mark.parametrize("fmt,dtype", GRID)
def test_mm_sparse_dense(fmt, dtype):
    A = rand_sparse((7, 5), 0.4, fmt, dtype, 1)
    B = np.random.default_rng(2).random((5, 3)).astype(dtype)
    got = ops.mm(A, B)
    assert isinstance(got, np.ndarray) and got.dtype == np.dtype(dtype)
    close(got, dense(A) @ B, dtype)


@pytest.mark.parametrize("fmt", FORMATS)
def test_mm_sparse_sparse_pattern(fmt):
    A = rand_sparse((6, 5), 0.4, fmt, "float64", 3)
    B = rand_sparse((5, 4), 0.4, fmt, "float64", 4)
    got = ops.mm(A, B)
    assert sp.issparse(got) and got.format == "csr"
    close(got, dense(A) @ dense(B))
    boolean = (dense(A) != 0) | _stored_mask(A)
    want = (boolean.astype(int) @ ((dense(B) != 0) | _stored_mask(B)).astype(int)) > 0
    assert stored(got) == set(zip(*np.nonzero(want)))


def _stored_mask(x):
    m = np.zeros(x.shape, bool)
    c = sp.coo_array(x)
    m[c.coords] = True
    return m


def test_mv_and_torch_names():
    import torch
    A = rand_sparse((6, 5), 0.4, "csr", "float64", 5)
    x = np.arange(5.0)
    close(ops.mv(A, x), torch.mv(torch.tensor(dense(A)), torch.tensor(x)).numpy())
    close(ops.smm(A, np.eye(5)), dense(A))
    h = ops.hspmm(A, np.ones((5, 2)))
    assert h.format == "csr"
    rows = set(np.nonzero(np.asarray(_stored_mask(A).any(1)))[0].tolist())
    assert {r for r, _ in stored(h)} == rows and h.nnz == 2 * len(rows)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_addmm_against_torch(dtype):
    import torch
    rng = np.random.default_rng(6)
    C = rng.random((6, 3)).astype(dtype)
    A = rand_sparse((6, 4), 0.5, "csr", dtype, 7)
    B = rng.random((4, 3)).astype(dtype)
    for beta, alpha in [(1, 1), (0.5, -2.0), (2, 3)]:
        ref = torch.addmm(torch.tensor(C), torch.tensor(dense(A)), torch.tensor(B), beta=beta, alpha=alpha).numpy()
        close(ops.addmm(C, A, B, beta=beta, alpha=alpha), ref)


def test_addmm_one_compile_for_every_scalar():
    rng = np.random.default_rng(8)
    C, A, B = rng.random((4, 3)), rand_sparse((4, 5), 0.5, "csr", "float64", 9), rng.random((5, 3))
    ops.addmm(C, A, B, beta=0.25, alpha=4.0)
    before = sc.cache_info().misses
    for k in range(3):
        close(ops.addmm(C, A, B, beta=k, alpha=k + 1.5) if k else ops.addmm(C, A, B, beta=0.5, alpha=1.5),
              (k or 0.5) * C + (k + 1.5) * (dense(A) @ B))
    assert sc.cache_info().misses - before <= 1      # beta == 0 is its own kernel


def test_addmm_beta_zero_ignores_nan():
    A = rand_sparse((4, 5), 0.5, "csr", "float64", 10)
    B = np.ones((5, 2))
    got = ops.addmm(np.full((4, 2), np.nan), A, B, beta=0, alpha=2)
    close(got, 2 * dense(A) @ B)


def test_sspaddmm_sparse_union():
    import torch
    C = rand_sparse((5, 3), 0.3, "csr", "float64", 11)
    A = rand_sparse((5, 4), 0.3, "csr", "float64", 12)
    B = np.random.default_rng(13).random((4, 3))
    got = ops.sspaddmm(C, A, B, beta=0.5, alpha=2.0)
    assert sp.issparse(got)
    ref = torch.sspaddmm(torch.tensor(dense(C)).to_sparse(), torch.tensor(dense(A)).to_sparse(),
                         torch.tensor(B), beta=0.5, alpha=2.0).to_dense().numpy()
    close(got, ref)
    rows = np.asarray(_stored_mask(A).any(1))
    want = _stored_mask(C) | rows[:, None]
    assert stored(got) == set(zip(*np.nonzero(want)))



@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_addmm_of_sparse_operands_stores_the_union_only(fmt, seed):
    """With sparse input, mat1 and mat2 the documented pattern is the union of input's and
    the product's: the one fused statement (recompiled split by MLIR 22) stored every entry
    (30 of 30 where the union has 17).  Stored zeros are entries of the pattern."""
    C = rand_sparse((6, 5), 0.3, fmt, "float64", 20 + seed)
    A = rand_sparse((6, 4), 0.3, fmt, "float64", 40 + seed)
    B = rand_sparse((4, 5), 0.3, fmt, "float64", 60 + seed)
    got = ops.addmm(C, A, B, beta=0.5, alpha=2.0)
    assert sp.issparse(got)
    close(got, 0.5 * dense(C) + 2.0 * (dense(A) @ dense(B)))
    product = (_stored_mask(A).astype(int) @ _stored_mask(B).astype(int)) != 0     # stored zeros count
    assert stored(got) == set(zip(*np.nonzero(_stored_mask(C) | product)))
    got = ops.addmm(sp.csr_array((6, 5)), A, B)
    assert stored(got) == set(zip(*np.nonzero(product)))


@pytest.mark.parametrize("second", ["dense", "sparse"])
def test_bmm(second):
    rng = np.random.default_rng(14)
    A = sp.coo_array(rng.random((3, 4, 5)) * (rng.random((3, 4, 5)) < 0.4))
    Bd = rng.random((3, 5, 2)) * (rng.random((3, 5, 2)) < (0.5 if second == "sparse" else 2))
    B = sp.coo_array(Bd) if second == "sparse" else Bd
    got = ops.bmm(A, B)
    assert sp.issparse(got) == (second == "sparse")
    close(got, np.einsum("bik,bkj->bij", A.toarray(), Bd))


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_sampled_addmm_keeps_input_pattern(fmt):
    import torch
    rng = np.random.default_rng(15)
    C = rand_sparse((6, 5), 0.3, fmt, "float64", 16)
    M1, M2 = rng.random((6, 3)), rng.random((3, 5))
    got = ops.sampled_addmm(C, M1, M2, beta=0.5, alpha=2.0)
    assert got.format == fmt and stored(got) == stored(C)
    warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
    R = sp.csr_array(C)                        # keeps the stored zero, which is sampled too
    tc = torch.sparse_csr_tensor(torch.tensor(R.indptr, dtype=torch.int64), torch.tensor(R.indices, dtype=torch.int64),
                                 torch.tensor(R.data), size=R.shape, check_invariants=True)
    ref = torch.sparse.sampled_addmm(tc, torch.tensor(M1), torch.tensor(M2), beta=0.5, alpha=2.0).to_dense().numpy()
    close(got, ref)


def test_sparse_mask_and_from_dense():
    rng = np.random.default_rng(17)
    D = rng.random((5, 6))
    M = rand_sparse((5, 6), 0.3, "csr", "float64", 18)
    got = ops.sparse_mask(D, M)
    assert got.format == "csr" and stored(got) == stored(M)
    close(got, D * _stored_mask(M))
    S = rand_sparse((5, 6), 0.5, "csr", "float64", 19, stored_zero=False)
    got = ops.sparse_mask(S, M.tocoo())        # sparse input: every mask entry stored, 0 where S has none
    assert got.format == "coo" and stored(got) == stored(M)
    close(got, dense(S) * _stored_mask(M))
    like = ops.sparse_like(D, M)
    assert stored(like) == stored(M)
    Z = D * (D > 0.6)
    F = ops.from_dense(Z)
    assert F.format == "csr" and F.nnz == np.count_nonzero(Z)
    close(F, Z)
    close(ops.from_dense(D, M), D * _stored_mask(M))


# ----------------------------------------------------------------------------- element-wise

@pytest.mark.parametrize("fmt,dtype", GRID)
def test_mul_add_sub_keep_patterns(fmt, dtype):
    A = rand_sparse((6, 5), 0.4, fmt, dtype, 20)
    B = rand_sparse((6, 5), 0.4, fmt, dtype, 21)
    close(ops.mul(A, B), dense(A) * dense(B), dtype)
    got = ops.add(A, B)
    close(got, dense(A) + dense(B), dtype)
    assert stored(got) == stored(A) | stored(B)
    s = ops.mul(A, 3)
    assert s.dtype == np.dtype(dtype) and stored(s) == stored(A)
    close(s, 3 * dense(A), dtype)


def test_sub_alpha_div_scalar_add():
    import torch
    A = rand_sparse((5, 4), 0.5, "csr", "float64", 22)
    B = rand_sparse((5, 4), 0.5, "csr", "float64", 23)
    ref = torch.sub(torch.tensor(dense(A)), torch.tensor(dense(B)), alpha=2.5).numpy()
    close(ops.sub(A, B, alpha=2.5), ref)
    close(ops.add(A, dense(B)), dense(A) + dense(B))          # dense operand: dense result
    d = ops.div(A, 4)
    assert stored(d) == stored(A)
    close(d, dense(A) / 4)
    Ai = rand_sparse((5, 4), 0.5, "csr", "int64", 24)
    assert ops.div(Ai, 2).dtype == np.float64
    Y = dense(B) + 1.0                                         # division by a tensor: A's pattern
    q = ops.div(A, Y)
    assert stored(q) == stored(A)
    close(q, dense(A) / Y)
    z = ops.div(A, 0)                                          # inf/nan at stored entries only
    assert stored(z) == stored(A)
    out = ops.add(A, 1.5)
    assert isinstance(out, np.ndarray)
    close(out, dense(A) + 1.5)
    close(ops.mul(A, dense(B)), dense(A) * dense(B))


@pytest.mark.parametrize("fn,fmt", [(f, "csr") for f in ["neg", "abs", "sqrt", "sin", "tanh", "log1p", "expm1"]]
                         + [("neg", "csc"), ("neg", "coo")])
def test_unary_functions(fn, fmt):
    A = rand_sparse((5, 6), 0.4, fmt, "float64", 25)
    got = getattr(ops, fn)(A)
    assert sp.issparse(got) and got.format == fmt and stored(got) == stored(A)
    ref = np.negative(dense(A)) if fn == "neg" else getattr(np, fn)(dense(A))
    close(got, ref)


def test_unary_nd_and_complex():
    rng = np.random.default_rng(26)
    T = sp.coo_array(rng.random((3, 4, 2)) * (rng.random((3, 4, 2)) < 0.5))
    close(ops.sqrt(T), np.sqrt(T.toarray()))
    C = rand_sparse((4, 4), 0.5, "csr", "complex128", 27)
    close(ops.abs(C), np.abs(dense(C)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_transpose_permute_to_dense(fmt):
    A = rand_sparse((4, 7), 0.4, fmt, "float64", 28)
    t = ops.transpose(A, 0, 1)
    assert stored(t) == {(j, i) for i, j in stored(A)}
    close(t, dense(A).T)
    d = ops.to_dense(A)
    assert isinstance(d, np.ndarray)
    close(d, dense(A))
    T = sp.coo_array(np.random.default_rng(29).random((2, 3, 4)))
    close(ops.permute(T, (2, 0, 1)), T.toarray().transpose(2, 0, 1))
    close(ops.transpose(T, -1, 0), np.swapaxes(T.toarray(), -1, 0))


def test_edge_cases_empty_and_single():
    E = sp.csr_array((0, 4))
    assert ops.mm(E, np.ones((4, 2))).shape == (0, 2)
    Z = sp.csr_array((3, 4))           # nothing stored
    assert ops.mul(Z, Z).nnz == 0 and ops.neg(Z).nnz == 0
    one = sp.csr_array(([2.0], ([1], [2])), shape=(3, 4))
    close(ops.mm(one, np.ones((4, 1))), dense(one) @ np.ones((4, 1)))
    assert stored(ops.sqrt(one)) == {(1, 2)}


def test_errors():
    A = rand_sparse((4, 5), 0.5, "csr", "float64", 30)
    with pytest.raises(sc.ShapeError):
        ops.mm(A, np.ones((4, 2)))
    with pytest.raises(sc.ShapeError):
        ops.mv(A, np.ones((5, 1)))
    with pytest.raises(sc.ShapeError):
        ops.addmm(np.ones((3, 3)), A, np.ones((5, 3)))
    with pytest.raises(sc.ShapeError):
        ops.mul(A, np.ones((4, 4)))
    with pytest.raises(sc.ShapeError):
        ops.div(A, np.ones((A.shape[0] + 1, A.shape[1])))
    with pytest.raises(sc.ShapeError):
        ops.permute(A, (0, 0))
    with pytest.raises(sc.ShapeError):
        ops.transpose(A, 0, 2)
    with pytest.raises(sc.OperandError):
        ops.sampled_addmm(np.ones((4, 5)), np.ones((4, 2)), np.ones((2, 5)))
    with pytest.raises(sc.SparseccError):
        ops.mm(A, "x")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "complex64"])
def test_a_python_scalar_keeps_the_operands_dtype(dtype):
    """A Python scalar is weak, as in NumPy 2 and torch: add/sub/div/where/pow with one keep a
    float32 (complex64) operand's dtype (add, sub, div, where and pow with a non-positive
    exponent made the scalar an array first, a float64 one).  Integers combined with a
    Python float widen like NumPy's; NumPy on the dense copy is the oracle."""
    A = rand_sparse((5, 4), 0.5, "csr", dtype, 31)
    D = dense(A)
    M = sp.csr_array(D.real > 0.3 if D.dtype.kind == "c" else D > 0.3)
    Md = dense(M)
    checks = [(lambda: ops.add(A, 2.5), lambda: D + 2.5), (lambda: ops.add(A, 3), lambda: D + 3),
              (lambda: ops.sub(A, 1.5, alpha=2), lambda: D - 3.0), (lambda: ops.div(A, 2.0), lambda: D / 2.0),
              (lambda: ops.div(A, 4), lambda: D / 4)]
    if D.dtype.kind != "c":         # where over complex values: a CompileError of its own
        checks += [(lambda: ops.where(M, A, 2.5), lambda: np.where(Md, D, 2.5)),
                   (lambda: ops.where(M, A, 7), lambda: np.where(Md, D, 7))]
    checks.append((lambda: ops.pow(A, 0), lambda: D ** 0))
    if D.dtype.kind != "i":
        checks += [(lambda: ops.pow(A, -1.0), lambda: D ** -1.0), (lambda: ops.pow(A, -2), lambda: D ** -2)]
    for got, want in checks:
        with np.errstate(all="ignore"):
            g, w = got(), want()
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(dense(g), w, rtol=1e-6 if w.dtype in (np.float32, np.complex64) else 1e-12)


def test_integer_to_a_negative_integer_power_is_refused():
    """NumPy and torch refuse it; the kernel gave 0 for 2 ** -1 (and for 0 ** -1)."""
    A = rand_sparse((5, 4), 0.5, "csr", "int32", 32)
    for e in (-1, np.int64(-2), np.array([[-1] * 4] * 5)):
        with pytest.raises(sc.DTypeError, match="negative"):
            ops.pow(A, e)
