"""The baselines each kernel is checked and timed against: SciPy, NumPy and (when ``import
torch`` works) torch.sparse.  Each factory takes the operands and returns a zero-argument
callable; preparation happens in the factory, outside the timing."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _torch():
    try:
        import torch
        return torch
    except Exception:           # noqa: BLE001 - not installed, or a broken install: no torch baseline
        return None


def _torch_csr(A):
    import warnings
    torch = _torch()
    with warnings.catch_warnings():         # "CSR support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(A.indptr), torch.from_numpy(A.indices),
                                       torch.from_numpy(A.data), size=A.shape, check_invariants=False)


def _spmv_baselines():
    b = {"scipy": lambda A, x: (lambda: A @ x)}
    if _torch() is not None:
        def torch_mv(A, x):
            torch = _torch()
            tA, tx = _torch_csr(A), torch.from_numpy(x)
            return lambda: torch.mv(tA, tx)
        b["torch"] = torch_mv
    return b


def _spmm_baselines():
    b = {"scipy": lambda A, X: (lambda: A @ X)}
    if _torch() is not None:
        def torch_mm(A, X):
            torch = _torch()
            tA, tX = _torch_csr(A), torch.from_numpy(X)
            return lambda: torch.sparse.mm(tA, tX)
        b["torch"] = torch_mm
    return b


def _sddmm_numpy(S, X, Y):
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))     # S's pattern, prepared once
    cols, data, indptr = S.indices, S.data, S.indptr

    def run():
        vals = data * np.einsum("ij,ij->i", X[rows], Y[cols])
        return sp.csr_array((vals, cols, indptr), shape=S.shape)
    return run


def _sddmm_torch(S, X, Y):
    torch = _torch()
    tS, tX, tYt = _torch_csr(S), torch.from_numpy(X), torch.from_numpy(Y).T
    sv = torch.from_numpy(S.data)
    crow, col = tS.crow_indices(), tS.col_indices()

    def run():                  # sampled_addmm gives X Y^T on S's pattern; scale by S's values
        R = torch.sparse.sampled_addmm(tS, tX, tYt, beta=0.0)
        return torch.sparse_csr_tensor(crow, col, R.values() * sv, size=S.shape, check_invariants=False)
    return run


def _sddmm_baselines():
    b = {"numpy": _sddmm_numpy}
    if _torch() is not None:
        b["torch"] = _sddmm_torch
    return b


def _spgemm_baselines():
    b = {"scipy": lambda A, B: (lambda: A @ B)}
    if _torch() is not None:
        def torch_spgemm(A, B):
            tA, tB = _torch_csr(A), _torch_csr(B)
            return lambda: tA @ tB
        b["torch"] = torch_spgemm
    return b


def _mttkrp_scipy(T, B, C):
    d1, d2 = T.shape[1], T.shape[2]
    unfold = sp.csr_array((T.data, (T.coords[0], T.coords[1].astype(np.int64) * d2 + T.coords[2])),
                          shape=(T.shape[0], d1 * d2))          # mode-1 unfolding, prepared once
    r = B.shape[1]

    def run():
        khatri_rao = (B[:, None, :] * C[None, :, :]).reshape(d1 * d2, r)
        return unfold @ khatri_rao
    return run


def _ttv_scipy(T, v):
    d0, d1, d2 = T.shape
    unfold = sp.csr_array((T.data, (T.coords[0].astype(np.int64) * d1 + T.coords[1], T.coords[2])), shape=(d0 * d1, d2))
    return lambda: (unfold @ v).reshape(d0, d1)
