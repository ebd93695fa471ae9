"""Minimize with a compiled gradient and a compiled sparse Hessian:
python examples/derivatives/trust_constr.py

f(x) = sum_i (A x - b)_i^2 + sum_j x_j^4, A sparse 3n x n: a convex objective whose Hessian
2 A^T A + 12 diag(x^2) has the pattern of A^T A plus the diagonal.  sc.gradient and
sc.hessian compile the gradient and the Hessian (a SpGEMM plus a diagonal) from the
statement; scipy.optimize.minimize(method="trust-constr") takes the Hessian as a sparse
matrix, and sc.hvp's Hessian-vector product serves as hessp in a second run.
"""

import numpy as np
import scipy.optimize as so
import scipy.sparse as sp

import sparsecc as sc

rng = np.random.default_rng(1)
n = 300
A = sp.csr_array(sp.random_array((3 * n, n), density=4 / n, format="csr", rng=rng)
                 + sp.eye_array(3 * n, n, format="csr"))
b = rng.standard_normal(3 * n)

statement = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2) + sum[j](x[j] ** 4)"
objective = sc.compile(statement)
gradient = sc.gradient(statement, wrt="x")
H = sc.hessian(statement, wrt="x")
hvp = sc.hvp(statement, wrt="x")
print("Hessian statement:", H.statement)

indptr, indices = H.pattern(A=A)   # A^T A's pattern (a SpGEMM step) plus the diagonal
print(f"Hessian pattern: {n} x {n}, {len(indices)} stored entries")
S = sp.csr_array((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
want = (S.T @ S + sp.eye_array(n)).tocsr()
want.sort_indices()
assert np.array_equal(indptr, want.indptr) and np.array_equal(indices, want.indices)


def run(**derivatives):
    return so.minimize(lambda x: float(objective(A=A, x=x, b=b)), np.zeros(n), method="trust-constr",
                       jac=lambda x: gradient(A=A, x=x, b=b),
                       options={"gtol": 1e-10, "xtol": 1e-14, "maxiter": 500}, **derivatives)


def grad_by_hand(x):                    # the oracle: the gradient written out with SciPy
    return 2 * (A.T @ (A @ x - b)) + 4 * x ** 3


with_hess = run(hess=lambda x: H(A=A, x=x, b=b))              # a csr_array
with_hessp = run(hessp=lambda x, v: hvp(A=A, x=x, b=b, tangent=np.asarray(v, float)))  # SciPy probes with int8
for name, res in (("hess", with_hess), ("hessp", with_hessp)):
    g = np.linalg.norm(grad_by_hand(res.x), np.inf)
    print(f"{name}: {res.message} after {res.nit} iterations; f = {res.fun:.10f}, |grad f| = {g:.2e}")
    assert res.success, res.message
    assert g < 1e-7, g
assert np.allclose(with_hess.x, with_hessp.x, atol=1e-8)

# the compiled Hessian equals 2 A^T A + 12 diag(x^2) written out with SciPy, on its pattern
x = with_hess.x
want = 2 * (A.T @ A) + sp.diags_array(12 * x ** 2)
got = H(A=A, x=x, b=b)
assert np.allclose(got.toarray(), want.toarray())
assert np.allclose(hvp(A=A, x=x, b=b, tangent=np.ones(n)), want @ np.ones(n))
print("Hessian and Hessian-vector product match SciPy's")
