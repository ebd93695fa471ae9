"""Nonlinear least squares with a compiled sparse Jacobian:
python examples/derivatives/least_squares.py

Fit x to data b = A g(x_true), g(x) = x + 0.1 x^3 element-wise, A a sparse 2n x n matrix.
The residual r(x) = A g(x) - b and its Jacobian A diag(1 + 0.3 x^2) (A's pattern) are both
compiled kernels; scipy.optimize.least_squares takes the Jacobian as the csr_array the
Jacobian kernel returns (its trust-region solver then works with LSMR on the sparse matrix).
"""

import numpy as np
import scipy.optimize as so
import scipy.sparse as sp

import sparsecc as sc

rng = np.random.default_rng(0)
n = 400
A = sp.random_array((2 * n, n), density=6 / n, format="csr", rng=rng) + sp.eye_array(2 * n, n, format="csr")
A = sp.csr_array(A)
x_true = rng.uniform(-1.0, 1.0, n)
b = A @ (x_true + 0.1 * x_true ** 3)

statement = "r[i] = sum[j](A[i,j] * (x[j] + 0.1 * x[j] ** 3)) - b[i]"
residual = sc.compile(statement)
J = sc.jacobian(residual, wrt="x")
print("derivative statement:", J.statement)

# the Jacobian's pattern is A's: fixed by A alone, computed once
indptr, indices = J.pattern(A=A)
assert np.array_equal(indptr, A.indptr) and np.array_equal(indices, A.indices)

calls = {"fun": 0, "jac": 0}


def fun(x):
    calls["fun"] += 1
    return residual(A=A, x=x, b=b)


def jac(x):
    calls["jac"] += 1
    return J(A=A, x=x, b=b)          # a csr_array on A's pattern


result = so.least_squares(fun, np.zeros(n), jac=jac, xtol=1e-12, ftol=1e-12, gtol=1e-12)
print(f"status {result.status}: {result.message}")
print(f"{calls['fun']} residuals, {calls['jac']} Jacobians; cost {result.cost:.3e}")

assert result.success, result.message
assert np.max(np.abs(result.x - x_true)) < 1e-8, np.max(np.abs(result.x - x_true))
# the Jacobian kernel's matrix equals A diag(g'(x)) written out with SciPy
want = A @ sp.diags_array(1.0 + 0.3 * result.x ** 2)
assert np.allclose(jac(result.x).toarray(), want.toarray())
print(f"recovered x_true: max error {np.max(np.abs(result.x - x_true)):.2e}")
