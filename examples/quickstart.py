"""The README's quickstart, runnable: python examples/quickstart.py"""

import numpy as np
import scipy.sparse as sp

import sparsecc as sc

A = sp.random_array((1000, 800), density=0.01, format="csr", random_state=0)
x = np.random.default_rng(0).random(800)
b = np.ones(1000)

y = sc.einsum("ij,j->i", A, x)                              # SpMV, A runs as CSR
assert np.allclose(y, A @ x)
y = sc.einsum("ij,j->i", A, x, formats=("csc", "dense"))    # the same, stored as CSC
assert np.allclose(y, A @ x)

k = sc.compile("ij,j->i", "csr", "dense")                   # a reusable kernel
assert np.allclose(k(A, x), A @ x)
print(k.ir()[:400])                                          # the MLIR it emits

y = sc.evaluate("y[i] = A[i,j] * x[j] + 2.5 * b[i]", A=A, x=x, b=b)
assert np.allclose(y, A @ x + 2.5 * b)

C = sc.einsum("ik,kj->ij", A, A.T)                          # sparse x sparse: a csr_array
assert isinstance(C, sp.csr_array) and np.allclose(C.toarray(), (A @ A.T).toarray())

T = sp.coo_array(np.arange(24.0).reshape(2, 3, 4) % 5 == 0).astype(float)   # an N-d COO tensor
v = np.arange(4.0)
R = sc.einsum("ijk,k->ij", T, v)                             # sparse: rows of T that store entries
assert np.allclose(R.toarray(), np.einsum("ijk,k->ij", T.toarray(), v))
print(sc.cache_info())
