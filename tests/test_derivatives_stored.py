"""sc.jvp, sc.hessian and sc.hvp with respect to a sparse operand's stored values, and the
renumbering cache (docs/derivatives.md, derivatives/stored.py, entries.py).

Oracles: torch.func.hessian / jacrev of the expression written out again in torch, the
variables being the stored entries scattered into a dense matrix in canonical order (CSR and
COO row-major, CSC column-major); J @ v of the Jacobian computed by sc.jacobian for jvp.
Kernels are shared through module-level derivative objects.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

torch = pytest.importorskip("torch")

#: a least-squares objective plus a term nonlinear in A's stored values
OBJ = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2) + sum[i,j](exp(A[i,j]) * x[j])"
RES = "r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) * sum[j](L[i,j] * L[i,j]) - f[i]"
H, HV = sc.hessian(OBJ, wrt="A"), sc.hvp(OBJ, wrt="A")
J, JV = sc.jacobian(RES, wrt="L"), sc.jvp(RES, wrt="L")


def _coords(M):
    d = sp.coo_array(M).toarray() != 0
    rows, cols = np.nonzero(d.T if M.format == "csc" else d)
    return (cols, rows) if M.format == "csc" else (rows, cols)


def _obj_operands(fmt, seed=9):
    rng = np.random.default_rng(seed)
    A = sp.random_array((6, 4), density=0.4, format="csr", random_state=rng)
    A = sp.csr_array((A.data + 0.1, A.indices, A.indptr), shape=A.shape).asformat(fmt)
    return dict(A=A, x=rng.standard_normal(4), b=rng.standard_normal(6))


def _obj_torch(ops):
    rows, cols = (torch.tensor(c) for c in _coords(ops["A"]))
    tx, tb = torch.tensor(ops["x"]), torch.tensor(ops["b"])

    def fn(v):
        Ad = torch.zeros(6, 4, dtype=torch.float64).index_put((rows, cols), v)
        E = torch.zeros(6, 4, dtype=torch.float64).index_put((rows, cols), torch.exp(v))
        return ((Ad @ tx - tb) ** 2).sum() + (E * tx).sum()
    return fn, torch.tensor(ops["A"].toarray()[_coords(ops["A"])])


@pytest.mark.parametrize("fmt", ["csr", "csc", pytest.param("coo", marks=pytest.mark.slow)])
def test_hessian_and_hvp_wrt_stored_values(fmt):
    ops = _obj_operands(fmt)
    fn, v = _obj_torch(ops)
    ref = torch.func.hessian(fn)(v).numpy()
    got = H(**ops)
    n = ops["A"].nnz
    assert isinstance(got, sp.csr_array) and got.shape == (n, n)
    np.testing.assert_allclose(got.toarray(), ref, rtol=1e-12, atol=1e-12)
    # pattern: pairs of entries in one row of A (the quadratic term) plus the diagonal (exp)
    rows = _coords(ops["A"])[0]
    want = (rows[:, None] == rows[None, :])
    np.testing.assert_array_equal(got.toarray() != 0, want & (ref != 0))
    pr, pc = H.pattern(A=ops["A"], layout="coo")
    M = np.zeros((n, n), bool)
    M[pr, pc] = True
    np.testing.assert_array_equal(M, want)
    lower = H(**ops, triangle="lower")
    np.testing.assert_allclose(lower.toarray(), np.tril(ref), rtol=1e-12, atol=1e-12)
    ip, ix = H.pattern(A=ops["A"], layout="csc", triangle="lower")
    vals = H.values(**ops, layout="csc", triangle="lower")
    np.testing.assert_allclose(sp.csc_array((vals, ix, ip), shape=(n, n)).toarray(), np.tril(ref),
                               rtol=1e-12, atol=1e-12)
    t = np.random.default_rng(4).standard_normal(n)
    np.testing.assert_allclose(HV(**ops, tangent=t), ref @ t, rtol=1e-12, atol=1e-12)


def test_jvp_wrt_stored_values_matches_jacobian():
    rng = np.random.default_rng(1)
    L = sp.random_array((6, 6), density=0.4, format="csr", random_state=rng)
    ops = dict(L=L, u=rng.uniform(0.1, 1, 6), lam=0.8, f=np.ones(6))
    v = rng.standard_normal(L.nnz)
    for M in (L, L.tocsc()):
        o = dict(ops, L=M)
        np.testing.assert_allclose(JV(**o, tangent=v), J(**o) @ v, rtol=1e-12, atol=1e-12)
    with pytest.raises(sc.OperandError, match="stored entry"):
        JV(**ops, tangent=np.ones(L.nnz + 1))


def test_sparse_vector_and_dense_matrix_wrt():
    rng = np.random.default_rng(2)
    u = np.zeros(6)
    keep = [1, 3, 4]
    u[keep] = rng.uniform(0.1, 1, 3)
    A = sp.random_array((6, 6), density=0.5, format="csr", random_state=rng)
    f = "f[] = sum[i,j](A[i,j] * u[i] * u[j]) + sum[i](exp(u[i]))"
    dense_H = (A.toarray() + A.toarray().T + np.diag(np.exp(u)))[np.ix_(keep, keep)]
    Hs = sc.hessian(f, wrt="u")(A=A, u=sp.coo_array(u))
    np.testing.assert_allclose(Hs.toarray(), dense_H, rtol=1e-12)
    t = rng.standard_normal(3)
    np.testing.assert_allclose(sc.hvp(f, wrt="u")(A=A, u=sp.coo_array(u), tangent=t), dense_H @ t, rtol=1e-12)
    D, x = rng.standard_normal((3, 4)), rng.standard_normal(4)
    HD = sc.hessian("f[] = sum[i]((sum[j](D[i,j] * x[j])) ** 2)", wrt="D")(D=D, x=x)
    np.testing.assert_allclose(HD.toarray(), np.kron(np.eye(3), 2 * np.outer(x, x)), rtol=1e-12, atol=1e-12)


def test_vector_result_hessian_says_what_to_do():
    with pytest.raises(sc.SparseccError, match="scalar"):
        sc.hessian(RES, wrt="L")
    with pytest.raises(sc.SparseccError, match="scalar"):
        sc.hvp(RES, wrt="u")


def test_renumbering_is_cached_and_never_stale():
    L = sp.csr_array(np.array([[2.0, 0, 0, 0], [1, 3, 0, 0], [0, 1, 4, 0], [0, 0, 1, 5]]))
    ops = dict(L=L, u=np.linspace(0.1, 1, 4), lam=0.8, f=np.ones(4))
    Jl = sc.jacobian(RES, wrt="L")
    first = Jl(**ops)
    t = Jl._tensor_for(ops)
    kept = t._layouts[0]
    again = Jl(**ops)
    assert t._layouts[0] is kept and len(t._layouts) == 1       # served from the cache
    np.testing.assert_array_equal(first.toarray(), again.toarray())
    first.indices[:] = 0                                          # the caller's copy, not the cache's
    np.testing.assert_array_equal(Jl(**ops).indices, again.indices)
    # the same objects mutated in place (row 0's entry moves to column 2): a new pattern
    L.indices[0] = 2
    got = Jl(**ops)
    fresh = sc.jacobian(RES, wrt="L")(**dict(ops, L=L.copy()))
    np.testing.assert_array_equal(got.toarray(), fresh.toarray())
    u = ops["u"]
    assert got[0, 0] == pytest.approx(u[2] + 2 * 0.8 * np.exp(u[0]) * 2.0)
