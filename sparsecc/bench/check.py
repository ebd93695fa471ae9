"""The correctness check of a kernel's result against a baseline's (SciPy, NumPy, torch)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _comparable(x):
    """A NumPy array or a SciPy sparse array from a sparsecc / SciPy / NumPy / torch /
    python-graphblas result (a GraphBLAS vector's missing entries read as 0)."""
    if sp.issparse(x):
        return x
    if type(x).__module__.startswith("graphblas"):
        import graphblas as gb
        if isinstance(x, gb.Vector):
            return x.to_dense(fill_value=0)
        return gb.io.to_scipy_sparse(x, format="csr")
    if type(x).__module__.startswith("torch"):
        import torch
        if x.layout == torch.sparse_csr:
            return sp.csr_array((x.values().numpy(), x.col_indices().numpy(), x.crow_indices().numpy()),
                                shape=tuple(x.shape))
        if x.layout != torch.strided:
            x = x.to_dense()
        return x.numpy()
    return np.asarray(x)


def check_result(got, want, rtol: float = 1e-9) -> tuple[bool, str]:
    """Do two results hold the same values (within ``rtol`` of the largest magnitude)?
    Returns ``(ok, detail)``.  Sparse results are compared as values, not patterns: an
    explicitly stored zero equals an absent entry."""
    try:
        got, want = _comparable(got), _comparable(want)
    except Exception as e:      # noqa: BLE001 - a result we cannot even read is wrong
        return False, f"unreadable result: {type(e).__name__}: {e}"
    if tuple(got.shape) != tuple(want.shape):
        return False, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    if got.ndim > 2 and (sp.issparse(got) or sp.issparse(want)):
        got = got.todense() if sp.issparse(got) else got
        want = want.todense() if sp.issparse(want) else want
    if sp.issparse(got) or sp.issparse(want):
        g, w = sp.csr_array(got), sp.csr_array(want)
        diff = g - w
        err = float(abs(diff).max()) if diff.nnz else 0.0
        scale = float(abs(w).max()) if w.nnz else 0.0
    else:
        g, w = np.asarray(got), np.asarray(want)
        err = float(np.max(np.abs(g - w))) if g.size else 0.0
        scale = float(np.max(np.abs(w))) if w.size else 0.0
    tol = rtol * (1.0 + scale)
    ok = err <= tol                    # NaN compares False: a NaN where none belongs fails
    return ok, f"max |difference| {err:.3g} ({'within' if ok else 'above'} tolerance {tol:.3g})"
