"""IPOPT (through cyipopt) with compiled sparse Jacobians and Hessians:
python examples/derivatives/ipopt_least_squares.py      (needs: pip install cyipopt)

    minimize   f(x) = sum_i (A x - b)_i^2
    subject to c(x) = C (x * x) - d = 0          (m quadratic equality constraints)

IPOPT asks for the constraint Jacobian and the Hessian of the Lagrangian
sigma * f(x) + sum_m lam_m c_m(x) as triplets: their structure once (``jacobianstructure``,
``hessianstructure``), then their values in the same order at every iterate (``jacobian``,
``hessian``).  Both are compiled derivative kernels of index-notation statements: the
structure is ``pattern(layout="coo")`` (the Hessian's lower triangle), the values
``values(layout="coo")`` in the same triplet order.  The answer is checked against the KKT
conditions written out with SciPy.
"""

import sys

import numpy as np
import scipy.sparse as sp

try:
    import cyipopt
except ImportError:
    print("cyipopt is not installed (pip install cyipopt): skipped")
    sys.exit(0)

import sparsecc as sc

rng = np.random.default_rng(2)
n, m = 200, 40
A = sp.csr_array(sp.random_array((2 * n, n), density=4 / n, format="csr", rng=rng)
                 + sp.eye_array(2 * n, n, format="csr"))
C = sp.csr_array(sp.random_array((m, n), density=8 / n, format="csr", rng=rng))
b = rng.standard_normal(2 * n)
d = C @ rng.uniform(0.5, 1.5, n) ** 2             # a feasible point exists

objective_text = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)"
constraints_text = "c[m] = sum[j](C[m,j] * x[j] ** 2) - d[m]"
lagrangian_text = ("L[] = sigma * sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)"
                   " + sum[m](lam[m] * (sum[j](C[m,j] * x[j] ** 2) - d[m]))")

objective = sc.compile(objective_text)
gradient = sc.gradient(objective_text, wrt="x")
constraints = sc.compile(constraints_text)
jac = sc.jacobian(constraints, wrt="x")
hess = sc.hessian(lagrangian_text, wrt="x")
print("constraint Jacobian:", jac.statement)
print("Lagrangian Hessian: ", hess.statement)


class Problem:
    """cyipopt's problem object: every value from a compiled kernel."""

    def __init__(self):
        # the structures depend only on A's and C's patterns: computed once
        self.jac_rows, self.jac_cols = jac.pattern(layout="coo", C=C)
        self.hess_rows, self.hess_cols = hess.pattern(layout="coo", triangle="lower", A=A, C=C)

    def objective(self, x):
        return float(objective(A=A, x=x, b=b))

    def gradient(self, x):
        return gradient(A=A, x=x, b=b)

    def constraints(self, x):
        return constraints(C=C, x=x, d=d)

    def jacobianstructure(self):
        return self.jac_rows, self.jac_cols

    def jacobian(self, x):
        return jac.values(layout="coo", C=C, x=x, d=d)

    def hessianstructure(self):
        return self.hess_rows, self.hess_cols

    def hessian(self, x, lagrange, obj_factor):
        return hess.values(layout="coo", triangle="lower", A=A, b=b, C=C, d=d, x=x,
                           lam=np.asarray(lagrange, float), sigma=float(obj_factor))


problem = Problem()
print(f"Jacobian: {len(problem.jac_rows)} triplets; Hessian (lower triangle): {len(problem.hess_rows)} triplets")
nlp = cyipopt.Problem(n=n, m=m, problem_obj=problem, lb=np.full(n, -1e20), ub=np.full(n, 1e20),
                      cl=np.zeros(m), cu=np.zeros(m))
nlp.add_option("print_level", 0)
nlp.add_option("tol", 1e-10)
x, info = nlp.solve(np.ones(n))
print(f"IPOPT: {info['status_msg'].decode() if isinstance(info['status_msg'], bytes) else info['status_msg']}")
assert info["status"] == 0, info["status_msg"]

# the KKT conditions, written out with SciPy: grad f + J_c^T lam = 0, c(x) = 0
lam = info["mult_g"]
grad_f = 2 * (A.T @ (A @ x - b))
J_c = C @ sp.diags_array(2 * x)
stationarity = np.linalg.norm(grad_f + J_c.T @ lam, np.inf)
feasibility = np.linalg.norm(C @ (x * x) - d, np.inf)
print(f"|grad L| = {stationarity:.2e}, |c(x)| = {feasibility:.2e}, f = {info['obj_val']:.8f}")
assert stationarity < 1e-6 * max(1.0, np.linalg.norm(grad_f, np.inf)), stationarity
assert feasibility < 1e-8, feasibility

# the triplets IPOPT received are the matrices written out with SciPy
Jm = sp.coo_array((problem.jacobian(x), (problem.jac_rows, problem.jac_cols)), shape=(m, n))
assert np.allclose(Jm.toarray(), J_c.toarray())
H_want = 2 * (A.T @ A) + sp.diags_array(2 * (C.T @ lam))
Hm = sp.coo_array((problem.hessian(x, lam, 1.0), (problem.hess_rows, problem.hess_cols)), shape=(n, n))
assert np.allclose(Hm.toarray(), np.tril(H_want.toarray()))
print("Jacobian and Hessian triplets match SciPy's")
