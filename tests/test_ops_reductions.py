"""sc.ops reductions (both zero semantics), argmax, softmax, scatter_reduce, coalesce, pow, where."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch  # a test dependency (pyproject: torch==2.13.0): its documented examples are the reference

import sparsecc as sc
from sparsecc import ops


def _matrix(shape=(7, 6), density=0.4, dtype=np.float64, seed=0):
    """Stored negatives, stored zeros, an empty row (2) and an all-negative row (4)."""
    rng = np.random.default_rng(seed)
    A = sp.random_array(shape, density=density, format="csr", random_state=seed)
    vals = rng.standard_normal(A.nnz) * 3
    A.data = (np.round(vals) if np.dtype(dtype).kind == "i" else vals).astype(dtype)
    D = A.toarray()
    if shape[0] > 4:
        D[2] = 0
        D[4] = -np.abs(rng.standard_normal(shape[1]) * 3).astype(dtype) - 1
    A = sp.csr_array(D)
    A.data[::5] = 0                 # stored zeros take part when implicit_zeros=False
    return A


def _stored_reduce(A, fn, ident, axis):
    """Brute force over stored entries only."""
    D = A.toarray()
    M = np.zeros(A.shape, bool)
    coo = sp.coo_array(A)
    M[tuple(coo.coords)] = True
    return fn(np.where(M, D, ident), axis=axis)


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


NP = {"sum": np.sum, "prod": np.prod, "amax": np.amax, "amin": np.amin, "mean": np.mean}
AXES = [None, 0, 1, -1, (0, 1)]


@pytest.mark.parametrize("name", list(NP))
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_value_semantics_match_numpy(name, axis, dtype):
    A = _matrix(dtype=dtype)
    got = getattr(ops, name)(A, axis=axis)
    want = NP[name](A.toarray(), axis=axis)
    np.testing.assert_allclose(_dense(got), want, rtol=1e-12)
    assert np.asarray(got).dtype == np.asarray(want).dtype or sp.issparse(got)


IDENT = {"sum": 0, "prod": 1, "amax": -np.inf, "amin": np.inf}


@pytest.mark.parametrize("name", list(IDENT))
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_stored_semantics_match_brute_force(name, axis):
    A = _matrix()
    got = getattr(ops, name)(A, axis=axis, implicit_zeros=False)
    want = _stored_reduce(A, NP[name], IDENT[name], axis)
    np.testing.assert_allclose(_dense(got), want)


def test_stored_mean_and_empty_rows():
    A = _matrix()
    got = ops.mean(A, axis=1, implicit_zeros=False)
    D, M = A.toarray(), np.zeros(A.shape, bool)
    M[tuple(sp.coo_array(A).coords)] = True
    with np.errstate(invalid="ignore"):
        want = np.where(M, D, 0).sum(1) / M.sum(1)
    np.testing.assert_allclose(got, want)
    assert np.isnan(got[2])                                   # the empty row
    assert ops.amax(A, axis=1, implicit_zeros=False)[2] == -np.inf
    assert ops.prod(A, axis=1, implicit_zeros=False)[2] == 1
    assert ops.amax(A, axis=1)[2] == 0 and ops.prod(A, axis=1)[2] == 0


@pytest.mark.parametrize("fmt", ["csc", "coo", "dense"])
@pytest.mark.parametrize("name", ["amax", "prod", "mean"])
def test_other_formats(fmt, name):
    A = _matrix(seed=3)
    X = A.toarray() if fmt == "dense" else A.asformat(fmt)
    for semantics in (True, False):
        got = getattr(ops, name)(X, axis=1, implicit_zeros=semantics)
        if semantics or fmt == "dense":
            want = NP[name](A.toarray(), axis=1)
        elif name == "mean":
            continue
        else:
            want = _stored_reduce(A, NP[name], IDENT[name], 1)
        np.testing.assert_allclose(_dense(got), want)


@pytest.mark.parametrize("axis", [0, 2, (0, 2), None])
@pytest.mark.parametrize("name", ["sum", "amax", "amin", "prod"])
def test_three_dimensional_coo(axis, name):
    rng = np.random.default_rng(4)
    D = np.where(rng.random((4, 5, 3)) < 0.3, rng.standard_normal((4, 5, 3)), 0.0)
    T = sp.coo_array(D)
    got = getattr(ops, name)(T, axis=axis)
    np.testing.assert_allclose(_dense(got), NP[name](D, axis=axis))
    if axis == 2:        # a rank-2 result follows the pattern rules: rows with stored entries
        stored = getattr(ops, name)(T, axis=axis, implicit_zeros=False)
        M = D != 0
        if name in ("sum", "amax"):
            assert sp.issparse(stored)
            mask = np.zeros(stored.shape, bool)
            mask[tuple(sp.coo_array(stored).coords)] = True
            np.testing.assert_array_equal(mask, M.any(axis=2))


def test_empty_matrix():
    E = sp.csr_array((0, 4))
    assert ops.sum(E) == 0
    assert ops.prod(E) == 1
    with pytest.raises(sc.ShapeError):
        ops.amax(E)
    assert ops.amax(E, axis=0, implicit_zeros=False).shape == (4,)
    np.testing.assert_array_equal(ops.amax(sp.csr_array((3, 4)), axis=1), 0)


def test_bool_and_int32_sums_widen_like_numpy():
    A = _matrix() != 0
    assert ops.sum(A, axis=1).dtype == np.sum(A.toarray(), axis=1).dtype
    np.testing.assert_array_equal(ops.sum(A, axis=1), A.toarray().sum(1))
    B = _matrix(dtype=np.int64).astype(np.int32)
    assert ops.sum(B).dtype == np.sum(B.toarray()).dtype


def test_axis_errors():
    A = _matrix()
    for bad in (2, -3, (0, 0), 1.5):
        with pytest.raises(sc.ShapeError):
            ops.sum(A, axis=bad)


# --------------------------------------------------------------------------- argmax

@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
def test_argmax_matches_numpy(fn, axis, fmt):
    A = _matrix(seed=5)
    X = A.toarray() if fmt == "dense" else A.asformat(fmt)
    np.testing.assert_array_equal(getattr(ops, fn)(X, axis=axis), getattr(np, fn)(A.toarray(), axis=axis))


def test_argmax_stored_only_and_nan():
    A = sp.csr_array(np.array([[0, -2.0, -1.0], [0, 0, 0], [3.0, 0, 3.0]]))
    np.testing.assert_array_equal(ops.argmax(A, axis=1), [0, 0, 0])
    np.testing.assert_array_equal(ops.argmax(A, axis=1, implicit_zeros=False), [2, -1, 0])
    np.testing.assert_array_equal(ops.argmin(A, axis=1, implicit_zeros=False), [1, -1, 0])
    N = sp.csr_array(np.array([[1.0, np.nan, 5.0]]))
    assert ops.argmax(N, axis=1)[0] == np.argmax(N.toarray(), axis=1)[0] == 1
    with pytest.raises(sc.ShapeError):
        ops.argmax(sp.csr_array((2, 0)), axis=1)


# --------------------------------------------------------------------------- softmax

def _softmax_direct(A, dim, log=False):
    D, M = A.toarray(), np.zeros(A.shape, bool)
    M[tuple(sp.coo_array(A).coords)] = True
    Z = np.where(M, D, -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.max(Z, axis=dim, keepdims=True)
        e = np.exp(Z - m)
        out = e / e.sum(axis=dim, keepdims=True)
        if log:
            out = Z - m - np.log(e.sum(axis=dim, keepdims=True))
    return np.where(M, out, 0), M


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_softmax_against_direct_computation(dim, log, fmt):
    A = _matrix(seed=6).asformat(fmt)
    got = (ops.log_softmax if log else ops.softmax)(A, dim)
    want, M = _softmax_direct(sp.csr_array(A), dim, log)
    mask = np.zeros(A.shape, bool)
    mask[tuple(sp.coo_array(got).coords)] = True
    np.testing.assert_array_equal(mask, M)                  # A's pattern, stored zeros included
    np.testing.assert_allclose(got.toarray(), want, atol=1e-12)
    if not log:
        sums = np.asarray(got.sum(axis=dim)).ravel()
        nonempty = M.any(axis=dim)
        np.testing.assert_allclose(sums[nonempty], 1.0)


def test_softmax_matches_torch_sparse_and_dense():
    A = _matrix(seed=7)
    t = torch.sparse_coo_tensor(np.vstack(sp.coo_array(A).coords), sp.coo_array(A).data, A.shape,
                                check_invariants=True)
    want = torch.sparse.softmax(t, 1).to_dense().numpy()
    np.testing.assert_allclose(ops.softmax(A, 1).toarray(), want, atol=1e-12)
    D = np.random.default_rng(1).standard_normal((4, 5))
    np.testing.assert_allclose(ops.softmax(D, 1), torch.softmax(torch.tensor(D), 1).numpy())


# -------------------------------------------------------------------- scatter_reduce

def test_scatter_reduce_torch_documented_examples():
    src = np.array([1., 2., 3., 4., 5., 6.])
    index = np.array([0, 1, 0, 1, 2, 1])
    inp = np.array([1., 2., 3., 4.])
    np.testing.assert_array_equal(ops.scatter_reduce(inp, 0, index, src, "sum"), [5., 14., 8., 4.])
    np.testing.assert_array_equal(ops.scatter_reduce(inp, 0, index, src, "sum", include_self=False),
                                  [4., 12., 5., 4.])
    inp2 = np.array([5., 4., 3., 2.])
    np.testing.assert_array_equal(ops.scatter_reduce(inp2, 0, index, src, "amax"), [5., 6., 5., 2.])
    np.testing.assert_array_equal(ops.scatter_reduce(inp2, 0, index, src, "amax", include_self=False),
                                  [3., 6., 5., 2.])


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("case", ["1d", "2d-dim0", "2d-dim1", "3d-dim1", "int64", "small-index"])
def test_scatter_reduce_random_against_torch(reduce, include_self, case):
    rng = np.random.default_rng(hash(case) % 1000)
    dtype = np.int64 if case == "int64" else np.float64
    shape = {"1d": (5,), "2d-dim0": (4, 3), "2d-dim1": (4, 3), "3d-dim1": (3, 4, 2), "int64": (4, 3),
             "small-index": (5, 4)}[case]
    dim = {"2d-dim1": 1, "3d-dim1": 1}.get(case, 0)
    src_shape = tuple(s + 1 for s in shape)
    idx_shape = tuple(s - 1 if case == "small-index" else s for s in shape)
    inp = (rng.integers(-5, 6, shape) if dtype == np.int64 else rng.standard_normal(shape)).astype(dtype)
    src = (rng.integers(-5, 6, src_shape) if dtype == np.int64 else rng.standard_normal(src_shape)).astype(dtype)
    index = rng.integers(0, shape[dim], idx_shape)
    got = ops.scatter_reduce(inp, dim, index, src, reduce, include_self=include_self)
    want = torch.tensor(inp).scatter_reduce(dim, torch.tensor(index), torch.tensor(src), reduce=reduce,
                                            include_self=include_self).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.dtype == want.dtype



@pytest.mark.parametrize("reduce", ["mean", "sum", "amax"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_scatter_reduce_keeps_the_dtype_like_torch(reduce, include_self, dtype):
    """torch keeps the input's dtype; "mean" widened float32 to float64 and int32 to int64
    (its count of entries was an int64).  Integer mean floors (negative sums too); targets
    no index points at keep the input's value; an empty index returns the input."""
    rng = np.random.default_rng(np.dtype(dtype).itemsize + include_self)
    kind = np.dtype(dtype).kind
    inp = (rng.integers(-9, 10, (5, 3)) if kind == "i" else rng.standard_normal((5, 3))).astype(dtype)
    src = (rng.integers(-9, 10, (6, 3)) if kind == "i" else rng.standard_normal((6, 3))).astype(dtype)
    index = rng.integers(0, 3, (6, 3))              # rows 3 and 4 get nothing
    for dim, idx in ((0, index), (1, index[:5] % 3), (0, np.zeros((0, 3), np.int64))):
        got = ops.scatter_reduce(inp, dim, idx, src[:, :3] if dim == 0 else src[:5], reduce,
                                 include_self=include_self)
        want = torch.tensor(inp).scatter_reduce(dim, torch.tensor(idx, dtype=torch.int64),
                                                torch.tensor(src[:, :3] if dim == 0 else src[:5]), reduce=reduce,
                                                include_self=include_self).numpy()
        assert got.dtype == want.dtype == dtype
        if kind == "i":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_mean_of_complex64_and_bools(include_self):
    """complex64 stays complex64 (it widened to complex128); a mean of bools is refused
    before any compile, as torch refuses it."""
    rng = np.random.default_rng(5)
    inp = (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64)
    src = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex64)
    index = np.array([0, 1, 0, 1, 1, 3])             # 2 and 4 get nothing
    got = ops.scatter_reduce(inp, 0, index, src, "mean", include_self=include_self)
    want = torch.tensor(inp).scatter_reduce(0, torch.tensor(index), torch.tensor(src), reduce="mean",
                                            include_self=include_self).numpy()
    assert got.dtype == want.dtype == np.complex64
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(sc.DTypeError, match="mean"):
        ops.scatter_reduce(np.ones(3, bool), 0, np.array([0, 0]), np.ones(2, bool), "mean",
                           include_self=include_self)

def test_scatter_reduce_errors():
    x = np.zeros(4)
    with pytest.raises(sc.OperandError):
        ops.scatter_reduce(x, 0, np.array([0, 4]), np.ones(2), "sum")
    with pytest.raises(sc.OperandError):
        ops.scatter_reduce(x, 0, np.array([0, 1]), np.ones(2), "median")
    with pytest.raises(sc.ShapeError):
        ops.scatter_reduce(x, 0, np.zeros((2, 2), int), np.ones((2, 2)), "sum")
    with pytest.raises(sc.OperandError):
        ops.scatter_reduce(x, 0, np.array([0, 1]), np.ones(2, np.float32), "sum")


# -------------------------------------------------------------------------- coalesce

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("rank", [2, 3])
def test_coalesce_with_any_reduction(reduce, rank):
    rng = np.random.default_rng(rank)
    shape = (4, 5, 3)[:rank]
    n = 40
    coords = tuple(rng.integers(0, s, n) for s in shape)
    vals = rng.standard_normal(n)
    A = sp.coo_array((vals, coords), shape=shape)
    out = ops.coalesce(A, reduce)
    assert out.has_canonical_format and out.format == "coo"
    groups = {}
    for k in range(n):
        groups.setdefault(tuple(int(c[k]) for c in coords), []).append(vals[k])
    fn = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce]
    got = {tuple(int(c) for c in cc): v for cc, v in zip(zip(*out.coords), out.data)}
    assert set(got) == set(groups)
    for key, vs in groups.items():
        np.testing.assert_allclose(got[key], fn(vs))
    lin = np.ravel_multi_index(tuple(out.coords), shape)
    assert np.all(np.diff(lin) > 0)                         # sorted, unique



@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.int32, np.int64])
def test_coalesce_mean_dtype_is_numpys_mean(dtype):
    """A float32 (complex64) mean of duplicates stays float32 (complex64) and integers give
    float64, as numpy.mean (its count was an int64: float32 became float64)."""
    rng = np.random.default_rng(7)
    coords = (np.array([0, 2, 0, 1, 2, 0]), np.array([1, 0, 1, 1, 0, 1]))
    vals = (rng.integers(-5, 6, 6) if np.dtype(dtype).kind == "i" else rng.standard_normal(6)).astype(dtype)
    out = ops.coalesce(sp.coo_array((vals, coords), shape=(3, 2)), "mean")
    want = {(0, 1): vals[[0, 2, 5]].mean(), (2, 0): vals[[1, 4]].mean(), (1, 1): vals[[3]].mean()}
    assert out.dtype == np.mean(vals).dtype
    got = {(int(i), int(j)): v for i, j, v in zip(*out.coords, out.data)}
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6)

def test_coalesce_empty_and_errors():
    E = sp.coo_array((3, 3))
    assert ops.coalesce(E).nnz == 0
    with pytest.raises(sc.OperandError):
        ops.coalesce(np.zeros((2, 2)))
    with pytest.raises(sc.OperandError):
        ops.coalesce(E, "median")


# ------------------------------------------------------------------------ pow, where

def test_pow_and_where():
    A = _matrix(seed=8)
    D = A.toarray()
    P = ops.pow(abs(A), 2.5)
    assert sp.issparse(P) and P.nnz == A.nnz
    np.testing.assert_allclose(P.toarray(), np.abs(D) ** 2.5)
    np.testing.assert_allclose(ops.pow(A, 0), D ** 0)
    B = _matrix(seed=9)
    W = ops.where(A > 0, A, B)
    np.testing.assert_allclose(_dense(W), np.where(D > 0, D, B.toarray()))
    W0 = ops.where(A > 0, A, 0)
    assert sp.issparse(W0)
    np.testing.assert_allclose(W0.toarray(), np.where(D > 0, D, 0))
    np.testing.assert_allclose(ops.where(A > 0, A, 7.0), np.where(D > 0, D, 7.0))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_a_large_matrix_needs_no_matrix_temporary(log):
    """softmax's inner plus[k](exp(A - max[l] A)) read the row maxima through an n x n dense
    copy (a union workaround applied to a stored-mode body): 1.5 s at 20k x 20k, no memory
    at 200k.  200k x 200k with two entries per row against a written-out loop."""
    n = 200_000
    rng = np.random.default_rng(9)
    rows = np.repeat(np.arange(n), 2)
    cols = rng.integers(0, n, 2 * n)
    A = sp.csr_array((rng.standard_normal(2 * n), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    S = (sc.ops.log_softmax if log else sc.ops.softmax)(A, 1)
    assert (S.indptr == A.indptr).all() and (S.indices == A.indices).all()
    want = np.empty_like(A.data)
    for i in range(0, n, 997):          # a sample of rows, written out
        lo, hi = A.indptr[i], A.indptr[i + 1]
        v = A.data[lo:hi]
        e = np.exp(v - v.max())
        want[lo:hi] = np.log(e / e.sum()) if log else e / e.sum()
        np.testing.assert_allclose(S.data[lo:hi], want[lo:hi], rtol=1e-12)
