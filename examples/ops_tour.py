"""A tour of sparsecc.ops: torch.sparse's operations on SciPy/NumPy operands, each one a
compiled sparsecc kernel, checked against SciPy/NumPy.  Run: python examples/ops_tour.py"""

import numpy as np
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import ops

rng = np.random.default_rng(0)
A = sp.random_array((6, 5), density=0.4, format="csr", random_state=1)
B = rng.random((5, 3))
C = rng.random((6, 3))
T = sp.coo_array(rng.random((3, 4, 5)) * (rng.random((3, 4, 5)) < 0.3))   # a 3-d COO tensor

# linear algebra (torch names; sparse x dense -> dense, sparse x sparse -> sparse)
assert np.allclose(ops.mm(A, B), A @ B)
assert np.allclose(ops.mm(A, A.T).toarray(), (A @ A.T).toarray())
assert np.allclose(ops.addmm(C, A, B, beta=0.5, alpha=2.0), 0.5 * C + 2.0 * (A @ B))
S = ops.sampled_addmm(A, rng.random((6, 2)), rng.random((2, 5)))           # SDDMM: A's pattern
assert S.nnz == A.nnz
print("mm, addmm, sampled_addmm: ok")

# element-wise: patterns follow the rules (mul keeps A's, add of two sparse is the union)
assert np.allclose(ops.mul(A, 3).toarray(), 3 * A.toarray())
assert np.allclose(ops.sqrt(A).toarray(), np.sqrt(A.toarray()))
assert ops.add(A, A).nnz == A.nnz
print("mul, sqrt, add: ok")

# structural: NumPy index syntax on any rank and format
print(ops.getitem(T, np.s_[1, 0, 1:]).toarray(), T.toarray()[1, 0, 1:])
assert np.array_equal(ops.getitem(A, np.s_[::-1, 1:4]).toarray(), A.toarray()[::-1, 1:4])
assert np.array_equal(ops.hstack([A, A]).toarray(), sp.hstack([A, A]).toarray())
assert np.array_equal(ops.reshape(T, (4, 15)).toarray(), T.toarray().reshape(4, 15))
assert np.isclose(ops.trace(ops.getitem(A, np.s_[:5])), A.toarray()[:5].trace())
print("getitem, hstack, reshape, trace: ok; density of A:", round(ops.density(A), 3))
print("kernels:", sc.cache_info())
print("all checks passed")
