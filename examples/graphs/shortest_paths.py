"""Single-source shortest paths on Les Miserables' co-appearance graph (shipped with networkx).

Bellman-Ford as repeated min_plus products: ``d = min(d, W^T (min.+) d)`` until nothing
changes.  Each relaxation is one compiled sparsecc kernel that visits only the stored edges.
Edge lengths are 1 / weight (characters who appear together often are close).
Checked against scipy.sparse.csgraph.shortest_path.
"""

import sys

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

import sparsecc as sc


def shortest_paths(W: sp.csr_array, source: int) -> np.ndarray:
    dist = np.full(W.shape[0], np.inf)
    dist[source] = 0.0
    relax = sc.compile("ji,j->i", "csr", "dense", semiring="min_plus")
    for _ in range(W.shape[0]):
        new = np.minimum(dist, relax(W, dist))      # one relaxation over every stored edge
        if np.array_equal(new, dist):
            break
        dist = new
    return dist


def main() -> int:
    G = nx.les_miserables_graph()
    names = list(G.nodes)
    A = nx.to_scipy_sparse_array(G, nodelist=names, weight="weight", format="csr")
    W = sp.csr_array((1.0 / A.data, A.indices, A.indptr), shape=A.shape)   # length = 1 / weight
    source = names.index("Valjean")
    dist = shortest_paths(W, source)
    want = csgraph.shortest_path(W, indices=source, directed=True)
    ok = np.allclose(dist, want)
    closest = np.argsort(dist)[1:6]
    print(f"Les Miserables: {W.shape[0]} characters, {W.nnz} directed edges")
    print("closest to Valjean:", ", ".join(f"{names[k]} ({dist[k]:.3f})" for k in closest))
    print("matches scipy.sparse.csgraph.shortest_path:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
