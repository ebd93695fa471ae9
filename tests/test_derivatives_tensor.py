"""sc.jacobian with respect to a sparse operand's stored values, and of matrix results
(docs/derivatives.md, derivatives/tensor.py).

Oracles: torch.func.jacrev of the expression written out again in torch on dense copies (the
variables are the stored entries, scattered into a dense matrix in canonical order), central
finite differences of that torch function in float64, and patterns written out from the
operands' stored patterns with NumPy.  Kernels are shared: one statement per feature.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

torch = pytest.importorskip("torch")
from torch.func import jacrev  # noqa: E402

N = 6
#: a residual reading L linearly, quadratically and inside exp (row sums)
RES = "r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) * sum[j](L[i,j] * L[i,j]) - f[i]"


def _stored(x):
    c = sp.coo_array(x)
    m = np.zeros(c.shape, bool)
    m[tuple(c.coords)] = True
    return m


def _canonical_coords(L):
    """The stored entries' coordinates in canonical order, written out: CSR and COO row-major,
    CSC column-major."""
    d = _stored(L)
    rows, cols = np.nonzero(d.T if L.format == "csc" else d)
    return (cols, rows) if L.format == "csc" else (rows, cols)


def _res_operands(fmt, seed=0):
    rng = np.random.default_rng(seed)
    L = sp.random_array((N, N), density=0.3, format="coo", random_state=rng)
    L = sp.coo_array((L.data + 0.5, L.coords), shape=L.shape)
    L.data[1] = 0.0                                   # a stored zero is a variable too
    return dict(L=L.asformat(fmt), u=rng.uniform(0.1, 1.0, N), lam=0.8, f=np.ones(N))


def _res_torch(ops, coords):
    u, f = torch.tensor(ops["u"]), torch.tensor(ops["f"])
    idx = tuple(torch.tensor(c) for c in coords)

    def fn(v):
        Ld = torch.zeros(N, N, dtype=torch.float64).index_put(idx, v)
        return Ld @ u + ops["lam"] * torch.exp(u) * (Ld * Ld).sum(1) - f
    return fn, torch.tensor(ops["L"].toarray()[coords])


@pytest.fixture(scope="module")
def J_L():
    return sc.jacobian(RES, wrt="L")


@pytest.mark.parametrize("fmt", ["csr", "csc", pytest.param("coo", marks=pytest.mark.slow)])
def test_jacobian_wrt_stored_values(J_L, fmt):
    ops = _res_operands(fmt)
    coords = _canonical_coords(ops["L"])
    got = J_L(**ops)
    assert isinstance(got, sp.csr_array) and got.shape == (N, ops["L"].nnz)
    fn, v = _res_torch(ops, coords)
    ref = jacrev(fn)(v).numpy()
    np.testing.assert_allclose(got.toarray(), ref, rtol=1e-12, atol=1e-12)
    h = 1e-6
    fd = np.stack([((fn(v + h * e) - fn(v - h * e)) / (2 * h)).numpy()
                   for e in torch.eye(len(v), dtype=torch.float64)], axis=1)
    np.testing.assert_allclose(got.toarray(), fd, rtol=1e-6, atol=1e-7)
    # r[i] reads row i of L only: column p is stored exactly in row(p), stored zero included
    want = np.zeros((N, len(v)), bool)
    want[coords[0], np.arange(len(v))] = True
    np.testing.assert_array_equal(_stored(got), want)
    indptr, indices = J_L.pattern(L=ops["L"])
    np.testing.assert_array_equal(indptr, got.indptr)
    np.testing.assert_array_equal(indices, got.indices)
    np.testing.assert_array_equal(J_L.values(**ops), got.data)


def test_columns_follow_the_operands_data(J_L):
    # column p is L.data[p] of a canonical CSR: perturbing that value moves r like column p
    ops = _res_operands("csr", seed=3)
    L = ops["L"]
    J = J_L(**ops).toarray()
    fn, _ = _res_torch(ops, _canonical_coords(L))
    for p in (0, L.nnz - 1):
        d = np.zeros(L.nnz)
        d[p] = 1e-6
        hi = sp.csr_array((L.data + d, L.indices, L.indptr), shape=L.shape).toarray()
        lo = sp.csr_array((L.data - d, L.indices, L.indptr), shape=L.shape).toarray()
        f = lambda M: (M @ ops["u"] + 0.8 * np.exp(ops["u"]) * (M * M).sum(1) - 1)   # noqa: E731
        np.testing.assert_allclose((f(hi) - f(lo)) / 2e-6, J[:, p], rtol=1e-6, atol=1e-7)


MAT = "C[i,j] = A[i,j] * exp(u[j]) + B[i,j] * u[i] * u[i]"


def _mat_operands():
    rng = np.random.default_rng(5)
    A, B = (sp.random_array((N, N), density=0.3, format="csr", random_state=rng) for _ in range(2))
    return dict(A=A, B=B, u=rng.uniform(0.1, 1.0, N))


def _mat_reference(ops):
    tA, tB = torch.tensor(ops["A"].toarray()), torch.tensor(ops["B"].toarray())
    return jacrev(lambda x: tA * torch.exp(x)[None, :] + tB * (x * x)[:, None])(torch.tensor(ops["u"])).numpy()


def test_matrix_result_3d_and_flattened():
    ops = _mat_operands()
    ref = _mat_reference(ops)
    J = sc.jacobian(MAT, wrt="u")
    got = J(**ops)
    assert isinstance(got, sp.coo_array) and got.shape == (N, N, N)
    np.testing.assert_allclose(got.todense(), ref, rtol=1e-12, atol=1e-12)
    PA, PB = _stored(ops["A"]), _stored(ops["B"])
    eye = np.eye(N, dtype=bool)
    want = (PA[:, :, None] & eye[None, :, :]) | (PB[:, :, None] & eye[:, None, :])
    dense_pat = np.zeros(got.shape, bool)
    dense_pat[tuple(got.coords)] = True
    np.testing.assert_array_equal(dense_pat, want)
    coords = J.pattern(layout="coo", A=ops["A"], B=ops["B"])
    for a, b in zip(coords, got.coords):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(sc.SparseccError, match="3-D"):
        J.pattern(A=ops["A"], B=ops["B"])
    Jf = sc.jacobian(MAT, wrt="u", flatten=True)
    flat = Jf(**ops)
    assert isinstance(flat, sp.csr_array) and flat.shape == (N * N, N)
    np.testing.assert_allclose(flat.toarray(), ref.reshape(N * N, N), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(_stored(flat), want.reshape(N * N, N))
    indptr, indices = Jf.pattern(A=ops["A"], B=ops["B"])
    np.testing.assert_array_equal(indptr, flat.indptr)
    np.testing.assert_array_equal(indices, flat.indices)


def test_matrix_result_dense_pattern_is_an_array():
    D = np.random.default_rng(2).standard_normal((3, 4))
    u = np.linspace(0.1, 1, 4)
    got = sc.jacobian("C[i,j] = D[i,j] * u[j] * u[j]", wrt="u")(D=D, u=u)
    assert isinstance(got, np.ndarray) and got.shape == (3, 4, 4)
    np.testing.assert_allclose(got, np.einsum("ij,jk->ijk", D * 2 * u, np.eye(4)), rtol=1e-12)


def test_refusals():
    with pytest.raises(sc.SparseccError, match="flatten"):
        sc.jacobian(MAT, wrt="u", flatten="yes")
    with pytest.raises(sc.SparseccError, match="scalar"):
        sc.jacobian("f[] = sum[i](u[i])", wrt="u")
    ops = _res_operands("csr")
    u = ops["u"].copy()
    u[0] = 0.0
    with pytest.raises(sc.OperandError, match="stored entry"):    # a sparse u: one value per stored entry
        sc.jvp(RES, wrt="u")(**dict(ops, u=sp.coo_array(u)), tangent=np.ones(N))
    with pytest.raises(sc.SparseccError, match="scalar"):
        sc.hessian(RES, wrt="L")


def test_dense_matrix_wrt_is_every_entry():
    # a dense D: every entry is a variable, row-major (D.flat[p]); the pattern is full
    rng = np.random.default_rng(6)
    D, u = rng.standard_normal((3, 4)), rng.standard_normal(4)
    got = sc.jacobian("r[i] = sum[j](D[i,j] * D[i,j] * u[j])", wrt="D")(D=D, u=u)
    tu = torch.tensor(u)
    ref = jacrev(lambda d: ((d * d) @ tu))(torch.tensor(D)).numpy().reshape(3, 12)
    assert isinstance(got, np.ndarray) and got.shape == (3, 12)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_matrix_result_wrt_stored_values():
    # d C[i,j] / d L_p: one entry per stored entry p, at (row(p), col(p), p)
    rng = np.random.default_rng(7)
    L = sp.random_array((4, 5), density=0.4, format="csr", random_state=rng)
    u = rng.standard_normal(5)
    stmt = "C[i,j] = L[i,j] * L[i,j] * u[j]"
    got = sc.jacobian(stmt, wrt="L")(L=L, u=u)
    rows, cols = _canonical_coords(L)
    p = np.arange(L.nnz)
    tu = torch.tensor(u)

    def fn(v):
        Ld = torch.zeros(4, 5, dtype=torch.float64).index_put((torch.tensor(rows), torch.tensor(cols)), v)
        return Ld * Ld * tu[None, :]
    ref = jacrev(fn)(torch.tensor(L.toarray()[rows, cols])).numpy()
    assert isinstance(got, sp.coo_array) and got.shape == (4, 5, L.nnz)
    np.testing.assert_allclose(got.todense(), ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(got.coords, (rows, cols, p)):
        np.testing.assert_array_equal(a, b)
    flat = sc.jacobian(stmt, wrt="L", flatten=True)(L=L, u=u)
    np.testing.assert_allclose(flat.toarray(), ref.reshape(20, L.nnz), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_gradient_wrt_stored_values(fmt):
    rng = np.random.default_rng(9)
    A = sp.random_array((6, 4), density=0.4, format="csr", random_state=rng).asformat(fmt)
    x, b = rng.standard_normal(4), rng.standard_normal(6)
    g = sc.gradient("f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)", wrt="A")(A=A, x=x, b=b)
    rows, cols = _canonical_coords(A)
    tx, tb = torch.tensor(x), torch.tensor(b)

    def fn(v):
        Ad = torch.zeros(6, 4, dtype=torch.float64).index_put((torch.tensor(rows), torch.tensor(cols)), v)
        return ((Ad @ tx - tb) ** 2).sum()
    ref = torch.func.grad(fn)(torch.tensor(A.toarray()[rows, cols])).numpy()
    assert g.shape == (A.nnz,)
    np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12)
