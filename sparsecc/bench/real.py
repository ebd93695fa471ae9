"""Real matrices that installed pip packages ship (SciPy's PROPACK test data, networkx
graphs), read locally; a missing package or file means no matrix."""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .generators import _int32


def _site_file(module: str, *parts: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:                   # noqa: BLE001 - a broken optional package: no matrix
        return None
    path = os.path.join(os.path.dirname(mod.__file__), *parts)
    return path if os.path.exists(path) else None


def _propack(key: str):
    # SciPy's PROPACK test data: two Harwell-Boeing matrices (illc1850, mhd1280b), stored as
    # pickled scipy matrices inside an .npz - the installed SciPy's own file, read locally.
    path = _site_file("scipy", "sparse", "linalg", "tests", "propack_test_data.npz")
    if path is None:
        return None
    with np.load(path, allow_pickle=True) as z:
        return _int32(sp.csr_array(z[key][()]))


def _nx_graph(name: str):
    try:
        import networkx as nx
    except Exception:                   # noqa: BLE001 - optional package
        return None
    G = getattr(nx, name)()
    return _int32(nx.to_scipy_sparse_array(G, format="csr", dtype=np.float64))


#: name -> (where it comes from, loader returning a csr_array or None when not installed)
REAL_MATRICES = {
    "illc1850": ("scipy sparse/linalg/tests/propack_test_data.npz (A_real, Harwell-Boeing ILLC1850)",
                 lambda: _propack("A_real")),
    "mhd1280b": ("scipy sparse/linalg/tests/propack_test_data.npz (A_complex, Harwell-Boeing MHD1280B, complex)",
                 lambda: _propack("A_complex")),
    "lesmis": ("networkx les_miserables_graph (weighted co-appearances)",
               lambda: _nx_graph("les_miserables_graph")),
    "karate": ("networkx karate_club_graph (weighted)", lambda: _nx_graph("karate_club_graph")),
    "davis": ("networkx davis_southern_women_graph (bipartite)", lambda: _nx_graph("davis_southern_women_graph")),
    "florentine": ("networkx florentine_families_graph", lambda: _nx_graph("florentine_families_graph")),
}


def real_matrices() -> dict:
    """The real matrices found in installed packages: name -> (source, csr_array)."""
    out = {}
    for name, (src, load) in REAL_MATRICES.items():
        try:
            A = load()
        except Exception:       # noqa: BLE001 - a package version without the file: skip it
            A = None
        if A is not None:
            out[name] = (src, A)
    return out
