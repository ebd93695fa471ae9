"""The baselines each kernel is checked and timed against: SciPy, NumPy, torch.sparse (when
``import torch`` works) and python-graphblas, SuiteSparse:GraphBLAS (when ``import graphblas``
works: the ``bench`` extra).  Each factory takes the operands and returns a zero-argument
callable; preparation happens in the factory, outside the timing.  ``PEERS``: the libraries
a user could call instead of sparsecc (the report's ``best peer``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _torch():
    try:
        import torch
        return torch
    except Exception:           # noqa: BLE001 - not installed, or a broken install: no torch baseline
        return None


#: the libraries a user could call instead (NumPy baselines are written-out references)
PEERS = ("scipy", "torch", "graphblas")

_gb_state: list = []


def _graphblas():
    """python-graphblas, initialized once in blocking mode (every call computes its result
    before it returns, so the timing holds the work), or None when it is not installed."""
    if not _gb_state:
        try:
            import graphblas as gb
            try:
                gb.init("suitesparse", blocking=True)
            except Exception:   # noqa: BLE001 - already initialized (by its first use elsewhere)
                pass
            _gb_state.append(gb)
        except Exception:       # noqa: BLE001 - not installed, or a broken install: no graphblas baseline
            _gb_state.append(None)
    return _gb_state[0]


def graphblas_threads(n: int) -> None:
    gb = _graphblas()
    if gb is not None:
        gb.ss.config["nthreads"] = n


def _gb_mv(semiring):
    def make(A, x):
        gb = _graphblas()
        M, v = gb.io.from_scipy_sparse(A), gb.Vector.from_dense(x)
        op = getattr(gb.semiring, semiring)

        def run():
            w = M.mxv(v, op).new()
            w.wait()
            return w
        return run
    return make


def _gb_spgemm(A, B):
    gb = _graphblas()
    M, N = gb.io.from_scipy_sparse(A), gb.io.from_scipy_sparse(B)

    def run():
        C = M.mxm(N, gb.semiring.plus_times).new()
        C.wait()
        return C
    return run


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
    if _graphblas() is not None:
        b["graphblas"] = _gb_mv("plus_times")
    return b


def _minplus_numpy(A, x):
    """min over stored j of A[i,j] + x[j] (+inf for a row without entries), written out
    with NumPy: a row's stored entries are one segment of A's arrays."""
    starts = A.indptr[:-1]
    full = np.diff(A.indptr) > 0                 # rows with entries, prepared once
    cols, data, first = A.indices, A.data, starts[full]

    def run():
        out = np.full(A.shape[0], np.inf, dtype=np.result_type(A.dtype, x.dtype))
        if first.size:
            out[full] = np.minimum.reduceat(data + x[cols], first)
        return out
    return run


def _minplus_baselines():
    b = {"numpy": _minplus_numpy}
    if _graphblas() is not None:
        b["graphblas"] = _gb_mv("min_plus")    # (its rows without entries hold no value; the inputs have none)
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
    if _graphblas() is not None:
        b["graphblas"] = _gb_spgemm
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
