"""The transposed SpMV with element-wise chains fused (dialect/kernels/scatter.py): a row factor
over the reduced index and an expression of the sum (``y = c + d * (A.T @ (r * w))``, PageRank's
step) in the one kernel, and the lazy lowering that makes such a step one statement
(lazy/lower.py ``_epilogue``).  Against NumPy on dense copies, seeded: formats (csr and csc
take the hand-written kernel, coo/dcsr the sparsifier's), dtypes (ints exact), empty rows and
columns, 1 and 2 threads, the same bits for every thread count."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import threads

from conftest import random_values, seed as _seed

pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py

M, N = 41, 29


def _matrix(dtype, rng, shape=(M, N)):
    """A sparse matrix with empty rows and columns and a stored zero."""
    d = rng.random(shape) < 0.25
    d[rng.integers(0, shape[0], 6)] = False
    d[:, rng.integers(0, shape[1], 5)] = False
    rows, cols = np.nonzero(d)
    vals = random_values(len(rows), np.dtype(dtype), rng)
    vals[0] = 0
    return sp.coo_array((vals, (rows, cols)), shape=shape)


#: statement, NumPy on dense copies (a: A as an M x N array), operands beside A, float only
CASES = {
    "pagerank": ("y[i] = 3 + 2 * sum[j](A[j,i] * r[j] * w[j])", lambda a, o: 3 + 2 * (a.T @ (o["r"] * o["w"])),
                 "rw", False),
    "bias": ("y[i] = b[i] - sum[j](A[j,i] * (r[j] - w[j]) * s)", lambda a, o: o["b"] - a.T @ ((o["r"] - o["w"]) * o["s"]),
             "rwbs", False),
    "max": ("y[i] = max(sum[j](A[j,i] * r[j]), 2 * b[i])", lambda a, o: np.maximum(a.T @ o["r"], 2 * o["b"]),
             "rb", False),
    "exp": ("y[i] = exp(sum[j](A[j,i] * sqrt(r[j]))) * s", lambda a, o: np.exp(a.T @ np.sqrt(o["r"])) * o["s"],
            "rs", True),
}


def _operands(names, dtype, rng):
    out = {}
    for c in names:
        n = N if c == "b" else M
        out[c] = np.asarray(random_values(1, np.dtype(dtype), rng)[0]) if c == "s" else \
            random_values(n, np.dtype(dtype), rng)
    return out


# exp/sqrt: float64 only (float32's rounding through exp of a sum is not what the row tests);
# max over complex: NumPy's lexicographic maximum, tested with the comparisons elsewhere
PARAMS = [(name, dtype) for name, case in CASES.items()
          for dtype in ("float64", "float32", "int64", "complex128")
          if not (case[3] and dtype != "float64") and not (name == "max" and dtype == "complex128")]


@pytest.mark.parametrize("name,dtype", PARAMS)
def test_fused_scatter(name, dtype):
    text, numpy, names, float_only = CASES[name]
    rng = np.random.default_rng(_seed(f"fused{name}{dtype}"))
    a = _matrix(dtype, rng)
    ops = _operands(names, dtype, rng)
    want = numpy(a.toarray(), ops)
    k = sc.compile(text)
    threads.set_min_parallel_work(0)
    for fmt in ("csr", "coo", "dcsr"):
        A = sp.csr_array(a) if fmt != "coo" else a
        kk = k if fmt != "dcsr" else sc.compile(text, A="dcsr")
        for th in (1, 2):
            sc.set_num_threads(th)
            got = kk(A=A, **ops)
            assert got.dtype == want.dtype
            if dtype == "int64":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=2e-5 if dtype == "float32" else 1e-12)
    # CSR: the hand-written kernel, no sparsifier loop nest, no second pass elsewhere
    sc.set_num_threads(1)
    k(A=sp.csr_array(a), **ops)
    assert "linalg.generic" not in k.ir() and "%out_m" in k.ir()
    # a CSC A read as A[i,j] is the same kernel
    kc = sc.compile(text.replace("A[j,i]", "A[i,j]"))
    got = kc(A=sp.csc_array(a.T), **ops)
    np.testing.assert_allclose(got, want, rtol=2e-5 if dtype == "float32" else 1e-12)
    assert "linalg.generic" not in kc.ir()


def test_fused_scatter_blocks_same_bits():
    """Many entries per column: blocks, the result expression in the final pass; the same
    bits on 1, 2 and 4 threads and from the serial kernel."""
    rng = np.random.default_rng(_seed("fusedblocks"))
    A = sp.random_array((600, 7), density=0.6, format="csr", rng=rng)
    r, w, b = rng.random(600), rng.random(600), rng.random(7)
    text = "y[i] = 0.15 / 7 + 0.85 * b[i] * sum[j](A[j,i] * r[j] * w[j])"
    k = sc.compile(text)
    ref = sc.compile(text, options=sc.Options(parallel="none"))(A=A, r=r, w=w, b=b)
    np.testing.assert_allclose(ref, 0.15 / 7 + 0.85 * b * (A.T @ (r * w)), rtol=1e-12)
    threads.set_min_parallel_work(0)
    for th in (1, 2, 4):
        sc.set_num_threads(th)
        assert k(A=A, r=r, w=w, b=b).tobytes() == ref.tobytes()
    assert "%ws = memref.alloc" in k.ir()
    assert np.array_equal(k(A=sp.csr_array((9, 7)), r=np.ones(9), w=np.ones(9), b=b), np.full(7, 0.15 / 7))


def test_lazy_pagerank_step_is_one_scatter():
    """The @sc.fused PageRank step is one statement (the contraction inlined into its
    element-wise reader) run by the scatter kernel; removing the fusion fails here."""
    @sc.fused
    def step(A, r, inv_deg, d, n):
        return (1 - d) / n + d * (A.T @ (r * inv_deg))

    rng = np.random.default_rng(_seed("lazypagerank"))
    A = sp.csr_array(_matrix("float64", rng, (M, M)))
    deg = np.asarray(A.sum(axis=1)).ravel()
    inv = np.divide(1.0, deg, out=np.zeros(M), where=deg > 0)
    r = np.full(M, 1.0 / M)
    for _ in range(3):
        got = step(A, r, inv, 0.85, M)
        np.testing.assert_allclose(got, (1 - 0.85) / M + 0.85 * (A.toarray().T @ (r * inv)), rtol=1e-12)
        r = got
    compiled, _ = next(iter(step.cache.values()))
    prog = compiled.program
    assert len(prog.statements) == 1, [str(s) for s in prog.statements]
    ir = prog._kernel(prog.statements[0]).ir()
    assert "linalg.generic" not in ir and "%A_crd" in ir


def test_lazy_epilogue_int_exact_and_other_formats():
    """Integers exact; a CSR A @ x with an epilogue (the sparsifier's one nest) and a COO A."""
    rng = np.random.default_rng(_seed("lazyepilogue"))
    a = _matrix("int64", rng)
    x, y = random_values(M, np.int64, rng), random_values(N, np.int64, rng)
    L = sc.lazy
    for A in (sp.csr_array(a), a):
        got = sc.compute(3 - 2 * (L(A).T @ (L(x) * 2)))
        np.testing.assert_array_equal(got, 3 - 2 * (a.toarray().T @ (x * 2)))
        got = sc.compute(abs(L(A) @ L(y) - 7))
        np.testing.assert_array_equal(got, abs(a.toarray() @ y - 7))
    # read twice: a statement of its own (computed once), still right
    t = L(sp.csr_array(a)).T @ L(x)
    got = sc.compute(t + 1, t * 2)
    np.testing.assert_array_equal(got[0], a.toarray().T @ x + 1)
    np.testing.assert_array_equal(got[1], a.toarray().T @ x * 2)
