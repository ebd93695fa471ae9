"""PageRank with @sc.fused: the step is traced once, then every iteration runs the cached
program (one SpMV-like kernel for A.T @ (r * inv_deg), one fused element-wise kernel).

    python examples/lazy/pagerank.py [--small]
"""

import sys

import numpy as np
import scipy.sparse as sp

import sparsecc as sc


@sc.fused
def pagerank_step(A, r, inv_deg, d, n):
    return (1 - d) / n + d * (A.T @ (r * inv_deg))


def main(n: int, iters: int = 20, d: float = 0.85):
    rng = np.random.default_rng(0)
    A = sp.random_array((n, n), density=min(1.0, 8 / n), format="csr", random_state=rng)
    A.data[:] = 1.0
    deg = np.asarray(A.sum(axis=1)).ravel()
    inv_deg = np.divide(1.0, deg, out=np.zeros(n), where=deg > 0)
    r = np.full(n, 1.0 / n)
    ref = r.copy()
    for _ in range(iters):
        r = pagerank_step(A, r, inv_deg, d, n)
        ref = (1 - d) / n + d * (A.T @ (ref * inv_deg))     # the same loop in SciPy/NumPy: the oracle
    assert pagerank_step.traces == 1, pagerank_step.traces
    assert np.allclose(r, ref, rtol=1e-10, atol=1e-14), np.abs(r - ref).max()
    top = np.argsort(-r)[:5]
    print(f"PageRank on {n} vertices, {A.nnz} edges, {iters} iterations: top vertices {top.tolist()}")
    print(f"traced {pagerank_step.traces} time(s); matches SciPy: yes")


if __name__ == "__main__":
    main(200 if "--small" in sys.argv else 20000)
