"""sc.lazy's structure operations (slicing, reshape, astype, argmax/argmin, clip,
permute_dims), index objects (sc.indices), pydata/sparse and torch operands: each against
NumPy on dense copies (docs/lazy.md).  The default tests compile a handful of kernels; the
formats x dtypes x shapes sweep (empty and size-1 axes) is marked slow."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.lazy.lower import _Compiled

L = sc.lazy

OPS = {
    "slice_step": lambda ns, A: A[1::2],
    "slice_neg": lambda ns, A: A[:, ::-2],
    "int_row": lambda ns, A: A[-1] if A.shape[0] else A[:, 0],
    "int_col_expr": lambda ns, A: (2 * A + 1)[..., 0] if A.shape[1] else A[..., None],
    "newaxis": lambda ns, A: A[None, 1:],
    "reshape_flat": lambda ns, A: A.reshape(-1),
    "reshape_2d": lambda ns, A: A.reshape(A.shape[1], A.shape[0]),
    "reshape_3d": lambda ns, A: ns.reshape(A, (A.shape[0], 2, A.shape[1] // 2)) if A.shape[1] % 2 == 0 else
    A.reshape(-1, 1),
    "astype_int32": lambda ns, A: (A * 3).astype(np.int32),
    "astype_float32": lambda ns, A: A.astype(np.float32),
    "astype_bool": lambda ns, A: A.astype(bool),
    "argmax1": lambda ns, A: ns.argmax(A, axis=1),
    "argmin0_keep": lambda ns, A: ns.argmin(A, axis=0, keepdims=True),
    "argmax_all": lambda ns, A: ns.argmax(A),
    "clip": lambda ns, A: ns.clip(A, -1, 1),
    "permute_dims": lambda ns, A: ns.permute_dims(A, (1, 0)),
    "mean_all": lambda ns, A: ns.mean(A, axis=(0, 1)),
}
#: operations NumPy refuses on an empty axis
NEEDS_ROWS = {"argmin0_keep": 0, "argmax1": 1, "argmax_all": None}
FORMATS = ["csr", "csc", "coo", "dense"]
DTYPES = [np.float64, np.float32, np.int64]
SHAPES = [(5, 4), (0, 4), (1, 1)]


def _operand(fmt, dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    d = (rng.integers(-3, 4, shape) * (rng.random(shape) < 0.5)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        d = d + (d != 0) * rng.random(shape).astype(dtype) / 4
    return (d if fmt == "dense" else sp.coo_array(d).asformat(fmt)), d


def _dense(r):
    return r.toarray() if sp.issparse(r) else np.asarray(r)


def _check(op, fmt, dtype, shape):
    if op in NEEDS_ROWS:
        ax = NEEDS_ROWS[op]
        if (np.prod(shape) if ax is None else shape[ax]) == 0:
            with pytest.raises(sc.ShapeError, match="empty axis"):
                OPS[op](L, L(_operand(fmt, dtype, shape)[0]))
            return
    A, Ad = _operand(fmt, dtype, shape)
    with np.errstate(all="ignore"):
        expect = np.asarray(OPS[op](np, Ad))
    got = sc.compute(OPS[op](L, L(A)))
    if fmt == "dense":
        assert isinstance(got, (np.ndarray, np.generic)), type(got)     # a dense value stays dense
    assert _dense(got).shape == expect.shape
    assert _dense(got).dtype == expect.dtype, (got.dtype, expect.dtype)
    tol = 1e-6 if np.dtype(dtype) == np.float32 else 1e-12
    np.testing.assert_allclose(_dense(got), expect, rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["slice_step", "int_row", "reshape_2d", "astype_int32", "argmax1"])
def test_structure_ops(op):
    _check(op, "csr", np.float64, (5, 4))


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_structure_sweep(op, fmt, dtype, shape):
    _check(op, fmt, dtype, shape)


def test_slices_keep_patterns_and_fuse():
    A, Ad = _operand("csr", np.float64, (5, 4))
    r = sc.compute(L(A)[1::2])                  # a sparse operand's slice: sparse, its rows' entries
    assert sp.issparse(r) and r.nnz == np.count_nonzero(Ad[1::2])
    # a slice of an element-wise chain and its reduction: one statement
    c = _Compiled([(2 * L(A) + 1)[1::2].sum(axis=0)])
    assert len(c.statements) == 1


def test_argmax_nan_and_ties():
    x = np.array([[1.0, 3.0, 3.0, np.nan], [0.0, -1.0, 0.0, -1.0]])
    got = sc.compute(L.argmax(L(x), axis=1), L.argmin(L(x), axis=1))
    np.testing.assert_array_equal(got[0], np.argmax(x, axis=1))       # a nan wins; the first of ties
    np.testing.assert_array_equal(got[1], np.argmin(x, axis=1))


def test_structure_errors():
    x = L(np.ones((3, 4)))
    with pytest.raises(sc.ShapeError, match="out of bounds"):
        x[3]
    with pytest.raises(sc.ShapeError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(sc.SparseccError, match="basic indexing"):
        x[np.array([0, 1])]
    with pytest.raises(sc.ShapeError, match="cannot reshape"):
        x.reshape(5, -1)
    with pytest.raises(sc.DTypeError, match="not a NumPy dtype|computes in"):
        x.astype(np.int8)
    with pytest.raises(sc.ShapeError, match="empty axis"):
        L.argmax(L(np.ones((3, 0))), axis=1)


def test_index_objects_are_the_einsum_statement():
    A, Ad = _operand("csr", np.float64, (5, 4))
    x = np.arange(4.0)
    i, j = sc.indices("i j")
    a, lx = L(A), L(x)
    by_objects = L.sum(a[i, j] * lx[j], over=j)
    by_string = L.einsum("ij,j->i", a, lx)
    c1, c2 = _Compiled([L(by_objects)]), _Compiled([by_string])
    assert c1.statements == c2.statements
    assert c1.program is c2.program            # one program entry (and so one set of kernels)
    np.testing.assert_allclose(sc.compute(by_string), Ad @ x)
    before = sc.cache_info().misses
    np.testing.assert_allclose(sc.compute(by_objects), Ad @ x)
    assert sc.cache_info().misses == before     # the string form compiled it
    # element-wise operations line indices up and broadcast, as A[i,j] + x[j] does
    np.testing.assert_allclose(_dense(sc.compute((a[i, j] + lx[j]).lazy(j, i))), (Ad + x).T)
    with pytest.raises(sc.ShapeError, match="no index 'k'"):
        L.sum(a[i, j], over=sc.indices("k"))
    with pytest.raises(sc.SparseccError, match="index objects only"):
        a[i, 0]


def test_pydata_operands():
    sparse = pytest.importorskip("sparse")
    A, Ad = _operand("csr", np.float64, (5, 4))
    x = np.arange(4.0)
    P = sparse.GCXS.from_scipy_sparse(A)       # compressed rows: read as the CSR array it is
    y = sc.compute(L(P) @ L(x))
    np.testing.assert_allclose(y, Ad @ x)
    S = sc.compute(2 * L(sparse.COO.from_scipy_sparse(A)))
    assert isinstance(S, sparse.COO)                # pydata in: a sparse result is pydata COO
    np.testing.assert_allclose(S.todense(), 2 * Ad)


@pytest.mark.slow       # torch in, torch out runs by default in test_lazy.py; this adds slices and casts
def test_torch_slices_and_casts():
    torch = pytest.importorskip("torch")
    _, Ad = _operand("dense", np.float64, (5, 4))
    t = torch.from_numpy(Ad)
    r = sc.compute(L(t)[1::2].astype(np.float32))
    assert isinstance(r, torch.Tensor) and r.dtype == torch.float32
    np.testing.assert_allclose(r.numpy(), Ad[1::2].astype(np.float32))


def test_fused_replays_its_steps():
    """A cached @sc.fused call runs each statement's kernel as the first call did
    (Program.replay): shared steps once, planned statements planned per call."""
    rng = np.random.default_rng(5)
    A = sp.random_array((30, 30), density=0.1, format="csr", random_state=rng)
    B = sp.random_array((30, 30), density=0.1, format="csr", random_state=rng)
    x = rng.random(30)

    @sc.fused
    def f(A, B, x):
        t = A @ x                              # read by two outputs: one step
        return B @ (A @ x) + 1.0, t * 2.0, A @ (B @ x)
    for k in range(3):                         # the first call runs the program, the later ones replay
        Ak = A * (k + 1) if k < 2 else sp.random_array((30, 30), density=0.4, format="csr", random_state=rng)
        y, z, w = f(Ak, B, x)
        np.testing.assert_allclose(y, B @ (Ak @ x) + 1.0)
        np.testing.assert_allclose(z, 2 * (Ak @ x))
        np.testing.assert_allclose(w, Ak @ (B @ x))
    compiled, _ = next(iter(f.cache.values()))
    assert compiled.replay is not None and f.traces == 1
    before = compiled.program.steps_run
    f(A, B, x)
    assert compiled.program.steps_run - before == len(compiled.program.last_plan.steps)
