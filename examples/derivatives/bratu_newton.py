"""Newton's method on the 2-D Bratu problem with a compiled sparse Jacobian:
python examples/derivatives/bratu_newton.py

-laplace(u) = lam * exp(u) on the unit square, u = 0 on the boundary, on an N x N grid of
interior points.  The residual r(u) = L u - lam * exp(u) and its Jacobian L - lam *
diag(exp(u)) are both compiled kernels; the Jacobian's pattern (L's plus the diagonal) is
computed once, and each Newton step refills only the values, solved by SciPy's spsolve.
"""

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import sparsecc as sc

N, lam = 24, 5.0
h = 1.0 / (N + 1)
T = sp.diags_array([-np.ones(N - 1), 2 * np.ones(N), -np.ones(N - 1)], offsets=[-1, 0, 1])
L = sp.csr_array((sp.kron(sp.eye_array(N), T) + sp.kron(T, sp.eye_array(N))) / h ** 2)
f = np.zeros(N * N)

statement = "r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) - f[i]"
residual = sc.compile(statement)
J = sc.jacobian(residual, wrt="u")
print("derivative statement:", J.statement)

indptr, indices = J.pattern(L=L)                 # once: L's pattern plus the diagonal
print(f"Jacobian pattern: {N * N} x {N * N}, {len(indices)} stored entries")

u = np.zeros(N * N)
norms = []
for step in range(20):
    r = residual(L=L, u=u, lam=-lam, f=f)
    norms.append(np.linalg.norm(r, np.inf))
    print(f"step {step}: |r| = {norms[-1]:.3e}")
    if norms[-1] < 1e-9:
        break
    values = J.values(L=L, u=u, lam=-lam, f=f)   # the values only, on the fixed pattern
    Jm = sp.csr_array((values, indices, indptr), shape=(N * N, N * N))
    u = u - spla.spsolve(Jm.tocsc(), r)

assert norms[-1] < 1e-9, norms
assert len(norms) <= 8, "Newton converges quadratically here"
# the Jacobian kernel's matrix equals the one written by hand
want = (L - lam * sp.diags_array(np.exp(u))).toarray()
assert np.allclose(J(L=L, u=u, lam=-lam, f=f).toarray(), want)
print(f"converged in {len(norms) - 1} Newton steps; max u = {u.max():.6f}")
