"""Complex derivatives (docs/derivatives.md): holomorphic, ``J[i,k] = d r_i / d z_k``.

Oracles: torch.func.jvp on dense copies, one basis tangent a column (forward mode with a
complex tangent gives ``f'(z) v`` for a holomorphic f; torch.func.jacfwd refuses complex inputs), and central differences along both the real and the
imaginary axis (equal for a holomorphic function, which is what makes ``d f / d z`` one
number); functions without a complex derivative raise a SparseccError.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

torch = pytest.importorskip("torch")
from torch.func import jvp  # noqa: E402

N = 6
RES = "r[i] = sum[j](L[i,j] * u[j] * u[j]) + lam * exp(u[i]) - sin(u[i]) * log(u[i]) - f[i]"


def _operands(dtype=np.complex128):
    rng = np.random.default_rng(8)
    L = sp.random_array((N, N), density=0.3, format="csr", random_state=rng).astype(dtype)
    L.data += 0.5j
    u = (rng.uniform(0.2, 1, N) + 1j * rng.uniform(0.2, 1, N)).astype(dtype)
    real = np.float32 if dtype == np.complex64 else np.float64
    return dict(L=L, u=u, lam=real(0.8), f=np.ones(N, real))


def _fn(ops):
    Ld = torch.tensor(ops["L"].toarray(), dtype=torch.complex128)
    return lambda u: Ld @ (u * u) + ops["lam"] * torch.exp(u) - torch.sin(u) * torch.log(u) - 1


def _jacfwd(fn, z):
    return np.stack([jvp(fn, (z,), (e,))[1].numpy() for e in torch.eye(len(z), dtype=z.dtype)], axis=1)


def _stored(x):
    c = sp.coo_array(x)
    m = np.zeros(c.shape, bool)
    m[tuple(c.coords)] = True
    return m


@pytest.fixture(scope="module")
def J():
    return sc.jacobian(RES, wrt="u")


def test_complex_jacobian_is_holomorphic(J):
    ops = _operands()
    got = J(**ops)
    assert got.dtype == np.complex128 and isinstance(got, sp.csr_array)
    fn = _fn(ops)
    z = torch.tensor(ops["u"])
    ref = _jacfwd(fn, z)
    np.testing.assert_allclose(got.toarray(), ref, rtol=1e-12, atol=1e-12)
    h = 1e-6
    for step in (h, 1j * h):     # real and imaginary steps agree: d f / d z
        fd = np.stack([((fn(z + step * e) - fn(z - step * e)) / (2 * step)).numpy()
                       for e in torch.eye(N, dtype=torch.complex128)], axis=1)
        np.testing.assert_allclose(got.toarray(), fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(_stored(got), _stored(ops["L"]) | np.eye(N, dtype=bool))
    v = np.linspace(1, 2, N) - 0.5j
    t = sc.jvp(RES, wrt="u")(**ops, tangent=v)
    np.testing.assert_allclose(t, ref @ v, rtol=1e-12, atol=1e-12)


def test_complex64(J):
    ops = _operands(np.complex64)
    got = J(**ops)
    assert got.dtype == np.complex64
    ref = _jacfwd(_fn(ops), torch.tensor(ops["u"].astype(np.complex128)))
    np.testing.assert_allclose(got.toarray(), ref, rtol=2e-4, atol=2e-4)


def test_complex_wrt_stored_values_and_hessian():
    ops = _operands()
    got = sc.jacobian(RES, wrt="L")(**ops)
    L = ops["L"]
    rows = np.repeat(np.arange(N), np.diff(L.indptr))
    want = np.zeros((N, L.nnz), complex)
    want[rows, np.arange(L.nnz)] = (ops["u"] ** 2)[L.indices]          # d r_i / d L_ij = u_j^2
    np.testing.assert_allclose(got.toarray(), want, rtol=1e-12)
    A = L.copy()
    x = ops["u"]
    f = "f[] = sum[i](c[i] * exp(x[i])) + sum[i,j](A[i,j] * x[i] * x[j])"
    H = sc.hessian(f, wrt="x")(A=A, x=x, c=np.ones(N))
    # the second derivative written out (d2/dz2 of exp(z) and of the quadratic form)
    np.testing.assert_allclose(H.toarray(), np.diag(np.exp(x)) + A.toarray() + A.toarray().T, rtol=1e-12)


@pytest.mark.parametrize("stmt", [
    "r[i] = abs(u[i]) * c[i]",
    "r[i] = max(u[i], c[i])",
    "r[i] = where(u[i] > 0.5, u[i], c[i])",
])
def test_not_holomorphic_refused(stmt):
    u = np.ones(N) + 1j
    with pytest.raises(sc.SparseccError, match="holomorphic"):
        sc.jacobian(stmt, wrt="u")(u=u, c=np.ones(N))


def test_conj_refused():
    with pytest.raises(sc.SparseccError, match="holomorphic"):
        sc.jacobian("r[i] = conj(u[i]) * c[i]", wrt="u")


def test_complex_asin_atan_expm1_log1p_and_real_where():
    # the functions not covered above, and a `where` whose condition reads only real operands
    # (dense c and a real sparse A, stored as complex by the runtime) beside complex values
    rng = np.random.default_rng(3)
    z = rng.uniform(0.1, 0.5, N) + 1j * rng.uniform(0.1, 0.5, N)
    c = rng.uniform(0, 1, N)
    A = sp.random_array((N, N), density=0.4, format="csr", random_state=rng)
    stmt = ("r[i] = asin(z[i]) + atan(z[i]) * c[i] + expm1(z[i]) - log1p(z[i]) * z[i]"
            " + where(c[i] > 0.5, z[i] * z[i], 2 * z[i]) + sum[j](where(A[i,j] > 0.5, A[i,j] * z[j] * z[j], A[i,j] * z[j]))")
    got = sc.jacobian(stmt, wrt="z")(z=z, c=c, A=A)
    tc, tA = torch.tensor(c), torch.tensor(A.toarray())

    def fn(u):
        return (torch.asin(u) + torch.atan(u) * tc + torch.expm1(u) - torch.log1p(u) * u
                + torch.where(tc > 0.5, u * u, 2 * u) + (torch.where(tA > 0.5, tA, 0) * u * u).sum(1)
                + (torch.where(tA > 0.5, 0, tA) * u).sum(1))
    tz = torch.tensor(z)
    ref = _jacfwd(fn, tz)
    np.testing.assert_allclose(got.toarray(), ref, rtol=1e-12, atol=1e-12)
    h = 1e-6
    for step in (h, 1j * h):
        fd = np.stack([((fn(tz + step * e) - fn(tz - step * e)) / (2 * step)).numpy()
                       for e in torch.eye(N, dtype=torch.complex128)], axis=1)
        np.testing.assert_allclose(got.toarray(), fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(_stored(got), _stored(A) | np.eye(N, dtype=bool))


def test_complex_ordering_is_numpys():
    # complex values compare lexicographically (real parts first), as in NumPy
    a = np.array([1 + 1j, 1 + 2j, 2 - 1j, 1 + 1j, np.nan + 0j])
    b = np.array([1 + 2j, 1 + 1j, 1 + 5j, 1 + 1j, 1 + 0j])
    for op in ("<", "<=", ">", ">="):
        with np.errstate(invalid="ignore"):
            want = np.where(eval(f"a {op} b"), 1.0, 0.0)                  # noqa: S307
        np.testing.assert_array_equal(sc.evaluate(f"r[i] = where(a[i] {op} b[i], 1.0, 0.0)", a=a, b=b), want)
