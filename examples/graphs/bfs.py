"""Breadth-first search on Zachary's karate club (shipped with networkx), level by level.

Each step is one boolean ``lor_land`` product ``next = A^T (or.and) frontier``, masked by the
nodes already seen - the GraphBLAS formulation of BFS.  Checked against networkx's BFS levels.
"""

import sys

import networkx as nx
import numpy as np

import sparsecc as sc


def bfs_levels(A, source: int) -> np.ndarray:
    n = A.shape[0]
    level = np.full(n, -1)
    frontier = np.zeros(n, bool)
    frontier[source] = True
    step = sc.compile("ji,j->i", "csr", "dense", semiring="lor_land")
    depth = 0
    while frontier.any():
        level[frontier] = depth
        frontier = step(A, frontier) & (level < 0)     # neighbours not seen yet
        depth += 1
    return level


def main() -> int:
    G = nx.karate_club_graph()
    A = nx.to_scipy_sparse_array(G, nodelist=range(G.number_of_nodes()), format="csr").astype(bool)
    level = bfs_levels(A, 0)
    want = nx.single_source_shortest_path_length(G, 0)
    ok = all(level[k] == d for k, d in want.items()) and (level >= 0).sum() == len(want)
    print(f"karate club: {A.shape[0]} members; BFS levels from member 0:",
          {d: int((level == d).sum()) for d in range(level.max() + 1)})
    print("matches networkx:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
