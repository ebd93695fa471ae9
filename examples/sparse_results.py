"""Sparse results and their patterns: python examples/sparse_results.py

Builds a small graph, counts 2-hop paths with SpGEMM, samples a dense product at the
graph's edges (SDDMM), and shows the union/intersection rules - each result checked
against SciPy/NumPy.
"""

import numpy as np
import scipy.sparse as sp

import sparsecc as sc

rng = np.random.default_rng(0)
n = 2000
A = sp.random_array((n, n), density=5 / n, format="csr", rng=rng)          # a weighted graph

# SpGEMM (Gustavson's row-wise loops): entry (i, j) stored when some k links i -> k -> j
A2 = sc.einsum("ik,kj->ij", A, A)
assert isinstance(A2, sp.csr_array) and A2.has_canonical_format
want = A @ A
assert abs(A2 - want).max() < 1e-12 and A2.nnz == want.nnz
print(f"2-hop paths: {A2.nnz} stored entries ({A2.nnz / n**2:.2%} of the matrix)")

# SDDMM: a dense product sampled at the edges; the result keeps A's pattern
X, Y = rng.random((n, 16)), rng.random((n, 16))
S = sc.einsum("ij,ik,jk->ij", A, X, Y)
r = np.repeat(np.arange(n), np.diff(A.indptr))
assert np.allclose(S.data, A.data * np.einsum("ij,ij->i", X[r], Y[A.indices]))
print(f"SDDMM: {S.nnz} entries, the pattern of A: {np.array_equal(S.indices, A.indices)}")

# union and intersection, as a CSC and an N-d-capable COO result
B = sp.random_array((n, n), density=5 / n, format="csr", rng=rng)
U = sc.evaluate("C[i,j] = A[i,j] - B[i,j]", A=A, B=B, out_format="csc")
I = sc.einsum("ij,ij->ij", A, B, out_format="coo")
assert abs(U - (A - B)).max() < 1e-12 and isinstance(U, sp.csc_array)
assert np.allclose(I.toarray(), A.multiply(B).toarray())
print(f"A - B stores {U.nnz} entries (the union), A * B stores {I.nnz} (the intersection)")

# exp(0) = 1 is not 0: a sparse result is refused, the default is dense
try:
    sc.evaluate("E[i,j] = exp(A[i,j])", A=A[:4, :4], out_format="csr")
except sc.SparseccError as err:
    print("refused:", str(err).split(":")[0])
