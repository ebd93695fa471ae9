"""Which format is fastest for my data?  python examples/explore_formats.py [chart.png]

Explores SpMV on a block-structured matrix (formats, BSR block sizes included) and MTTKRP on
a 3-D tensor (COO and CSF in every level order), prints the ranked reports, checks the
winners against SciPy/NumPy, and saves a bar chart.  Then an autotuned kernel.
"""

import os
import sys
import tempfile

import numpy as np
import scipy.sparse as sp

import sparsecc as sc

rng = np.random.default_rng(0)

# A matrix made of dense 4x4 blocks (as from a finite-element mesh with 4 unknowns per node)
pattern = sp.random_array((150, 150), density=0.03, format="csr", random_state=rng)
A = sp.csr_array(sp.kron(pattern, np.ones((4, 4))))
x = rng.random(A.shape[1])

report = sc.explore("ij,j->i", A, x, repeat=5)
print(report)
print("best formats:", ", ".join(str(f) for f in report.best_formats))
y = report.best(A, x)                                  # a ready kernel with the winning formats
ok_spmv = np.allclose(y, A @ x)

# MTTKRP, rank 3: COO and CSF in every level order
T = sp.random_array((40, 50, 60), density=0.01, format="coo", random_state=rng)
B, C = rng.random((50, 8)), rng.random((60, 8))
report3 = sc.explore("ijk,jr,kr->ir", T, B, C, repeat=3)
print(report3)
print("best formats:", ", ".join(str(f) for f in report3.best_formats))
ok_mttkrp = np.allclose(report3.best(T, B, C), np.einsum("ijk,jr,kr->ir", T.toarray(), B, C))

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.mkdtemp(), "explore.png")
print("chart:", report.plot(out))

# Autotuning: the first call explores (or finds the choice on disk), later calls run the winner
k = sc.compile("ij,j->i", autotune=True)
ok_auto = np.allclose(k(A, x), A @ x) and np.allclose(k(A, 2 * x), 2 * (A @ x))
print(k, "- tuned from", k.tuned_from)

print("results match:", "yes" if ok_spmv and ok_mttkrp and ok_auto else "NO")
sys.exit(0 if ok_spmv and ok_mttkrp and ok_auto else 1)
