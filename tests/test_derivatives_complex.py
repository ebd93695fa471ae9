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
