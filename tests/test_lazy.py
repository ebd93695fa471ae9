"""sc.lazy / sc.compute / @sc.fused (docs/lazy.md): each operation against NumPy on dense
copies, for formats x dtypes x shapes (empty, size-1); several outputs with a shared step
computed once; the trace key; tracing errors."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

L = sc.lazy

# each operation twice: over lazy arrays with the sc.lazy namespace, and over NumPy arrays
OPS = {
    "add": lambda ns, A, B, x: A + B,
    "sub": lambda ns, A, B, x: A - B,
    "mul": lambda ns, A, B, x: A * B,
    "scale": lambda ns, A, B, x: 3 * A / 2.0,
    "pow": lambda ns, A, B, x: A ** 2,
    "neg_abs": lambda ns, A, B, x: -abs(A),
    "exp_chain": lambda ns, A, B, x: ns.exp(2 * A + 1) * B,
    "sqrt": lambda ns, A, B, x: ns.sqrt(abs(A)),
    "maximum": lambda ns, A, B, x: ns.maximum(A, 0),
    "minimum": lambda ns, A, B, x: ns.minimum(A, B),
    "compare": lambda ns, A, B, x: A > B,
    "where": lambda ns, A, B, x: ns.where(A > 0, A, B),
    "sum0": lambda ns, A, B, x: A.sum(axis=0),
    "sum1_sq": lambda ns, A, B, x: ((A - B) ** 2).sum(axis=1),
    "sum_all": lambda ns, A, B, x: ns.sum(A),
    "max1": lambda ns, A, B, x: ns.max(A, axis=1),
    "min1": lambda ns, A, B, x: A.min(axis=1),
    "mean1": lambda ns, A, B, x: A.mean(axis=1),
    "keepdims": lambda ns, A, B, x: A - A.sum(axis=1, keepdims=True),
    "matmul": lambda ns, A, B, x: A @ B.T,
    "matvec": lambda ns, A, B, x: A @ x,
    "chain": lambda ns, A, B, x: A @ (B.T @ (A @ x)),
    "transpose": lambda ns, A, B, x: A.T,
    "prod1": lambda ns, A, B, x: (A + 1).prod(axis=1),
    "prod_sparse": lambda ns, A, B, x: ns.prod(A, axis=0),
    "expand_dims": lambda ns, A, B, x: ns.expand_dims(x, 0) * A,
    "divide": lambda ns, A, B, x: A / B,
    "divide_rows": lambda ns, A, B, x: A / (x + 4),
    "broadcast": lambda ns, A, B, x: A * x + ns.sum(B, axis=1, keepdims=True),
    "tensordot": lambda ns, A, B, x: ns.tensordot(A, B, axes=([1], [1])),
    "vecdot": lambda ns, A, B, x: ns.vecdot(A, B),
    "einsum": lambda ns, A, B, x: ns.einsum("ij,ij->i", A, B),
}
#: operations whose result NumPy refuses or that need a non-empty axis
NOT_EMPTY = {"max1", "min1"}
FORMATS = ["csr", "csc", "coo", "dense"]
DTYPES = [np.float64, np.float32, np.int64]
SHAPES = [(5, 4), (0, 4), (1, 1)]


def _operands(fmt, dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(2):
        d = rng.integers(-3, 4, shape) * (rng.random(shape) < 0.5)
        d = d.astype(dtype)
        if np.dtype(dtype).kind == "f":
            d = d + (d != 0) * rng.random(shape).astype(dtype) / 4
        out.append(d)
    x = rng.integers(-3, 4, shape[1]).astype(dtype)
    if fmt == "dense":
        return out[0], out[1], x, out
    return sp.coo_array(out[0]).asformat(fmt), sp.coo_array(out[1]).asformat(fmt), x, out


def _dense(r):
    return r.toarray() if sp.issparse(r) else np.asarray(r)


def _check(op, fmt, dtype, shape):
    if shape[1 if op in NOT_EMPTY else 0] == 0 and op in NOT_EMPTY:
        pytest.skip("NumPy refuses a max/min of an empty axis")
    A, B, x, (Ad, Bd) = _operands(fmt, dtype, shape)
    with np.errstate(all="ignore"):
        expect = np.asarray(OPS[op](np, Ad, Bd, x))
    got = sc.compute(OPS[op](L, L(A), L(B), L(x)))
    assert _dense(got).shape == expect.shape
    assert _dense(got).dtype == expect.dtype, (got.dtype, expect.dtype)
    tol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    np.testing.assert_allclose(_dense(got), expect, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ops_csr_float64(op, shape):
    _check(op, "csr", np.float64, shape)


@pytest.mark.parametrize("op", ["add", "mul", "exp_chain", "sum1_sq", "max1", "matvec", "where"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_ops_formats_dtypes(op, fmt, dtype):
    _check(op, fmt, dtype, (5, 4))


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ops_sweep(op, fmt, dtype, shape):
    _check(op, fmt, dtype, shape)


def test_operands_and_long_chains():
    A, B, x, (Ad, Bd) = _operands("csr", np.float64, (5, 4))
    col = np.arange(5.0).reshape(5, 1)
    np.testing.assert_allclose(_dense(sc.compute(L(col) + L(A))), col + Ad)        # a size-1 axis stretched
    np.testing.assert_allclose(_dense(sc.compute(L(np.float64(2.5)) * L(A))), 2.5 * Ad)   # a 0-d operand
    np.testing.assert_allclose(_dense(sc.compute(L(A))), Ad)                      # a copy
    np.testing.assert_allclose(_dense(sc.compute(np.exp(L(A)) + Bd)), np.exp(Ad) + Bd)   # NumPy ufuncs, arrays
    np.testing.assert_allclose(sc.compute(L(A).sum(axis=1, keepdims=True).sum(axis=1)), Ad.sum(1))
    np.testing.assert_allclose(sc.compute(L.squeeze(L(col))), col[:, 0])
    np.testing.assert_allclose(_dense(sc.compute(L.squeeze(L.expand_dims(L(A), 1), 1))), Ad)
    with pytest.raises(sc.ShapeError, match="has size 4, not 1"):
        L.squeeze(L(A), axis=1)
    y, ly = x.astype(float), L(x.astype(float))
    for k in range(150):                 # deeper than one statement takes: cut into several
        y, ly = y * 0.5 + k, ly * 0.5 + k
    np.testing.assert_allclose(sc.compute(ly), y)


def test_patterns():
    A, B, x, (Ad, Bd) = _operands("csr", np.float64, (5, 4))
    # + is the union, * the intersection, a 0-preserving function keeps the pattern: sparse
    for e, want in ((L(A) + L(B), (Ad != 0) | (Bd != 0)), (L(A) * L(B), (Ad != 0) & (Bd != 0)),
                    (L.sqrt(abs(L(A))), Ad != 0), (2.0 * L(A), Ad != 0)):
        r = sc.compute(e)
        assert sp.issparse(r)
        stored = np.zeros(Ad.shape, bool)
        c = r.tocoo()
        stored[c.coords[0], c.coords[1]] = True
        assert not (stored & ~want).any()
    # exp(0) = 1: a dense result
    assert isinstance(sc.compute(L.exp(L(A))), np.ndarray)


def test_several_outputs_share_a_step():
    n = 2000
    rng = np.random.default_rng(3)
    A = sp.random_array((n, n), density=0.005, format="csr", random_state=rng)
    B = sp.random_array((n, n), density=0.005, format="csr", random_state=rng)
    x = rng.random(n)
    la, lb, lx = L(A), L(B), L(x)
    t = lb @ lx                                    # read by two outputs: computed once
    y, z, nrm = sc.compute(la @ t + 1.0, la.T @ t, L.vecdot(lx, lx))
    np.testing.assert_allclose(y, A @ (B @ x) + 1.0)
    np.testing.assert_allclose(z, A.T @ (B @ x))
    np.testing.assert_allclose(nrm, x @ x)


def test_fused_one_kernel_per_elementwise_chain():
    A, B, _, (Ad, Bd) = _operands("csr", np.float64, (5, 4))
    from sparsecc.lazy.lower import _Compiled
    c = _Compiled([L.exp(2 * L(A) + 1) * L(B)])
    assert len(c.statements) == 1            # one statement: no temporary per operator
    c = _Compiled([((L(A) - L(B)) ** 2).sum(axis=1)])
    assert len(c.statements) == 1
    c = _Compiled([L(A) @ (L(B).T @ L(Ad[:, 0]))])   # a nested contraction: one statement for the planner
    assert len(c.statements) == 1


def test_fused_trace_key():
    calls = []

    @sc.fused
    def step(A, r, d):
        calls.append(1)
        return (1 - d) + d * (A.T @ r)

    A, _, x, (Ad, _) = _operands("csr", np.float64, (5, 5))
    r = np.arange(5.0)
    np.testing.assert_allclose(step(A, r, 0.85), 0.15 + 0.85 * (Ad.T @ r))
    assert step.traces == 1
    before = sc.cache_info().misses
    np.testing.assert_allclose(step(A * 2, r + 1, 0.85), 0.15 + 0.85 * (2 * Ad.T @ (r + 1)))   # new values
    assert step.traces == 1 and sc.cache_info().misses == before
    step(A, r, 0.5)                        # a Python scalar is a constant: a new trace
    assert step.traces == 2
    step(A.astype(np.float32), r, 0.5)     # new dtype
    step(sp.csc_array(A), r, 0.5)          # new format
    A6, _, _, _ = _operands("csr", np.float64, (6, 6))
    step(A6, np.arange(6.0), 0.5)          # new shape
    assert step.traces == 5 and len(calls) == 5
    d = np.float64(0.85)                   # a NumPy scalar is an operand: its value is no part of the key
    step(A, r, d)
    step(A, r, np.float64(0.5))
    assert step.traces == 6


def test_tracing_errors():
    @sc.fused
    def branchy(x):
        if x.sum() > 0:       # control flow on a lazy value
            return x
        return -x

    with pytest.raises(sc.SparseccError, match=r"test_lazy.py:\d+: if x.sum\(\) > 0"):
        branchy(np.ones(3))
    with pytest.raises(sc.ShapeError, match="do not broadcast"):
        L(np.ones(3)) + L(np.ones(4))
    with pytest.raises(sc.ShapeError, match="do not align"):
        L(np.ones((2, 3))) @ L(np.ones(4))
    with pytest.raises(sc.OperandError, match="sc.lazy takes"):
        L("abc")
    with pytest.raises(sc.SparseccError, match="returned int"):
        sc.fused(lambda x: 3)(np.ones(2))
    with pytest.raises(sc.SparseccError, match="no values yet"):
        np.asarray(L(np.ones(2)) + 1)


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "lazy")


@pytest.mark.parametrize("name", ["pagerank.py", "cg.py"])
def test_lazy_examples(name):
    root = os.path.dirname(os.path.dirname(EXAMPLES))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), "--small"], check=True, capture_output=True,
                         text=True, timeout=900, env=env)
    assert "traced" in out.stdout


def test_compute_again_compiles_nothing():
    A, B, x, _ = _operands("csr", np.float64, (5, 4))
    sc.compute(L.exp(L(A)) * L(B) + 1.0)
    before = sc.cache_info().misses
    A2, B2, _, (Ad2, Bd2) = _operands("csr", np.float64, (5, 4), seed=7)
    r = sc.compute(L.exp(L(A2)) * L(B2) + 1.0)
    np.testing.assert_allclose(_dense(r), np.exp(Ad2) * Bd2 + 1.0)
    assert sc.cache_info().misses == before
    # NumPy scalars are operands: a loop of sc.compute with new values compiles once
    sc.compute(np.float64(0.5) * L(A) + L(B))
    before = sc.cache_info().misses
    for a in (0.25, 2.0, -1.0):
        r = sc.compute(np.float64(a) * L(A2) + L(B2))
        np.testing.assert_allclose(_dense(r), a * Ad2 + Bd2)
    assert sc.cache_info().misses == before


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    A, _, x, (Ad, _) = _operands("csr", np.float64, (5, 4))
    At = torch.from_numpy(Ad).to_sparse_coo()
    xt = torch.from_numpy(x)
    y = sc.compute(L(At) @ L(xt) + 1.0)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), Ad @ x + 1.0)
    S = sc.compute(2 * L(At))                      # a sparse result: a sparse tensor
    assert isinstance(S, torch.Tensor) and S.layout != torch.strided
    np.testing.assert_allclose(S.to_dense().numpy(), 2 * Ad)

    @sc.fused
    def f(A, x):
        return L.maximum(A @ x, 0.0)
    np.testing.assert_allclose(f(At, xt).numpy(), np.maximum(Ad @ x, 0))
    np.testing.assert_allclose(f(At, xt + 1).numpy(), np.maximum(Ad @ (x + 1), 0))
    assert f.traces == 1
    f(At.to_dense(), xt)                           # another layout: a new trace
    assert f.traces == 2
    with pytest.raises(sc.SparseccError, match="requires grad"):
        L(torch.ones(3, requires_grad=True))


def test_compute_format():
    A, B, _, (Ad, Bd) = _operands("csr", np.float64, (5, 4))
    r = sc.compute(L(A) * L(B), format="coo")
    assert sp.issparse(r) and r.format == "coo"
    np.testing.assert_allclose(r.toarray(), Ad * Bd)
    r = sc.compute(L(A) + L(B), format="dense")
    assert isinstance(r, np.ndarray)
    np.testing.assert_allclose(r, Ad + Bd)
    with pytest.raises(sc.FormatError):
        sc.compute(L(A).sum(), format="csr")        # a scalar result cannot be sparse
