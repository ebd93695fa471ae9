"""Conjugate gradient written with sc.lazy operations: each iteration's update is one
@sc.fused program (the SpMV, the dot products and the vector updates in a few kernels).

    python examples/lazy/cg.py [--small]
"""

import sys

import numpy as np
import scipy.sparse as sp

import sparsecc as sc

L = sc.lazy


def poisson2d(m: int):
    """The 5-point Laplacian on an m x m grid (symmetric positive definite)."""
    T = sp.diags_array([-np.ones(m - 1), 4 * np.ones(m), -np.ones(m - 1)], offsets=[-1, 0, 1])
    S = sp.diags_array([-np.ones(m - 1), -np.ones(m - 1)], offsets=[-1, 1])
    return (sp.kron(sp.eye_array(m), T) + sp.kron(S, sp.eye_array(m))).tocsr()


@sc.fused
def direction(A, p):
    Ap = A @ p
    return Ap, L.vecdot(p, Ap)


@sc.fused
def update(x, r, p, Ap, alpha):
    x = x + alpha * p
    r = r - alpha * Ap
    return x, r, L.vecdot(r, r)


@sc.fused
def next_p(r, p, beta):
    return r + beta * p


def cg(A, b, iters: int):
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr = float(r @ r)
    for _ in range(iters):
        Ap, pAp = direction(A, p)
        alpha = np.float64(rr / pAp)            # a NumPy scalar: an operand, no retrace per value
        x, r, rr_new = update(x, r, p, Ap, alpha)
        beta = np.float64(rr_new / rr)
        rr = float(rr_new)
        p = next_p(r, p, beta)
    return x, np.sqrt(rr)


def main(m: int, iters: int):
    A = poisson2d(m)
    b = np.random.default_rng(0).random(m * m)
    x, res = cg(A, b, iters)
    # the oracle: the same iterations in NumPy/SciPy
    xr, r = np.zeros_like(b), b.copy()
    p, rr = r.copy(), r @ r
    for _ in range(iters):
        Ap = A @ p
        alpha = rr / (p @ Ap)
        xr, r = xr + alpha * p, r - alpha * Ap
        rr, rr_old = r @ r, rr
        p = r + (rr / rr_old) * p
    assert np.allclose(x, xr, rtol=1e-8, atol=1e-10), np.abs(x - xr).max()
    assert direction.traces == update.traces == next_p.traces == 1
    print(f"CG on a {m} x {m} Poisson grid, {iters} iterations: residual {res:.3e} "
          f"(SciPy/NumPy loop: {np.sqrt(rr):.3e}); traced once each")


if __name__ == "__main__":
    main(12, 30) if "--small" in sys.argv else main(200, 50)
