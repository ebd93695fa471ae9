"""``python -m sparsecc bench``: the benchmark suite.

Times sparsecc kernels against SciPy, NumPy and (when ``import torch`` works) torch.sparse on
the CPU, in one process, on seeded generated inputs and a few real matrices that installed
pip packages ship.  For every kernel it checks the result against the baseline *before*
timing, then reports median times, the ratio to each baseline, GFLOP/s, achieved GB/s and
the fraction of a STREAM-like read bandwidth measured in the same run, the compile time
(cold: the run uses a fresh kernel cache), and the speedup from 1 thread to all cores.

    python -m sparsecc bench                    # full scale (a few minutes)
    python -m sparsecc bench --small            # seconds
    python -m sparsecc bench --kernels spmv,spgemm --json out.json --png out.png

A wrong result is printed as FAILED and the run exits with status 1.  The guide to reading
the report is docs/performance.md.  This is a benchmark, not a test: nothing here asserts a
time.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._machine import cpu_model

SCHEMA = "sparsecc-bench/1"
VB, IB = 8, 4          # bytes per f64 value, per 32-bit index (sparsecc picks 32-bit when it fits)

# --------------------------------------------------------------------------- input generators


def uniform_rows(m: int, n: int, per_row: int, rng, dtype=np.float64) -> sp.csr_array:
    """``per_row`` uniformly random columns in each row (duplicates merged): gather-bound."""
    indptr = np.arange(0, m * per_row + 1, per_row, dtype=np.int64)
    cols = rng.integers(0, n, size=m * per_row)
    A = sp.csr_array((rng.random(m * per_row).astype(dtype), cols, indptr), shape=(m, n))
    A.sum_duplicates()
    return _int32(A)


def poisson2d(n: int) -> sp.csr_array:
    """The 5-point Laplacian on an n x n grid (n^2 rows): regular, bandwidth-bound."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    eye = sp.eye_array(n)
    return _int32((sp.kron(t, eye) + sp.kron(eye, t)).tocsr())


def poisson3d(n: int) -> sp.csr_array:
    """The 7-point Laplacian on an n x n x n grid (n^3 rows)."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    eye = sp.eye_array(n)
    A = sp.kron(sp.kron(t, eye), eye) + sp.kron(sp.kron(eye, t), eye) + sp.kron(sp.kron(eye, eye), t)
    return _int32(A.tocsr())


def rmat(scale: int, edge_factor: int, rng, probs=(0.57, 0.19, 0.19, 0.05)) -> sp.csr_array:
    """An R-MAT (Graph500 parameters) power-law matrix with 2^scale rows and about
    ``edge_factor`` entries per row before duplicates merge: skewed rows, load imbalance."""
    n, m = 1 << scale, edge_factor << scale
    rows = np.zeros(m, np.int64)
    cols = np.zeros(m, np.int64)
    cum = np.cumsum(probs)
    for bit in range(scale):
        q = np.searchsorted(cum, rng.random(m) * cum[-1], side="right")
        rows |= (q >> 1) << bit
        cols |= (q & 1) << bit
    perm = rng.permutation(n)                  # break the locality of low vertex ids
    A = sp.coo_array((rng.random(m), (perm[rows], perm[cols])), shape=(n, n)).tocsr()
    A.sum_duplicates()
    return _int32(A)


def coo3(d: int, nnz: int, rng, index32: bool = True) -> sp.coo_array:
    """A d x d x d COO tensor with ``nnz`` distinct uniformly random entries (canonical order)."""
    flat = np.sort(rng.choice(d ** 3, size=nnz, replace=False))
    T = sp.coo_array((rng.random(nnz), np.unravel_index(flat, (d, d, d))), shape=(d, d, d))
    if index32:     # the kernel's own width: no per-call copy (SciPy makes N-d coordinates int64)
        T.coords = tuple(c.astype(np.int32) for c in T.coords)
    T.has_canonical_format = True           # sorted and distinct by construction
    return T


def _int32(A: sp.csr_array) -> sp.csr_array:
    A = sp.csr_array(A)
    A.indices = A.indices.astype(np.int32, copy=False)
    A.indptr = A.indptr.astype(np.int32, copy=False)
    return A


# --------------------------------------------------------------------------- real matrices

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


# --------------------------------------------------------------------------- bandwidth probe

def stream_probe(mbytes: int = 512, repeat: int = 5, threads: int = 1) -> dict:
    """STREAM-like bandwidths in GB/s, best of ``repeat``: ``read`` (the faster of NumPy's
    ``sum`` and ``max`` over an array of ``mbytes`` MB - ``max`` is the SIMD one, ``sum`` is
    pairwise and can be compute-bound - in ``threads`` slices reduced concurrently; NumPy
    drops the GIL in reductions) and ``copy`` (read + write, one thread, bytes counted twice)."""
    from concurrent.futures import ThreadPoolExecutor
    a = np.ones(mbytes * (1 << 20) // 8)
    b = np.empty_like(a)
    parts = np.array_split(a, threads)
    best_read = best_copy = math.inf
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for _ in range(repeat):
            for reduce in (np.sum, np.max):
                t = time.perf_counter()
                if threads == 1:
                    reduce(a)
                else:
                    list(pool.map(reduce, parts))
                best_read = min(best_read, time.perf_counter() - t)
            t = time.perf_counter()
            np.copyto(b, a)
            best_copy = min(best_copy, time.perf_counter() - t)
    return {"read_gbs": a.nbytes / best_read / 1e9, "copy_gbs": 2 * a.nbytes / best_copy / 1e9,
            "mbytes": mbytes, "threads": threads}


# --------------------------------------------------------------------------- timing

def measure(fn, repeat: int | None = None, budget: float = 0.5, max_samples: int = 200) -> dict:
    """Median seconds per call of ``fn``: one warm-up call, then samples of ``number`` calls
    each (enough for about 1 ms per sample), ``repeat`` samples or as many as fit ``budget``
    seconds (at least 5).  The garbage collector is off while sampling, as in ``timeit``."""
    fn()
    t = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t, 1e-9)
    number = max(1, int(1e-3 / once))
    samples = repeat or min(max_samples, max(5, int(budget / (once * number))))
    ts = []
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(samples):
            t = time.perf_counter()
            for _ in range(number):
                fn()
            ts.append((time.perf_counter() - t) / number)
    finally:
        if was:
            gc.enable()
    return {"median_s": float(np.median(ts)), "min_s": float(np.min(ts)), "samples": samples, "number": number}


# --------------------------------------------------------------------------- correctness

def _comparable(x):
    """A NumPy array or a SciPy sparse array from a sparsecc / SciPy / NumPy / torch result."""
    if sp.issparse(x):
        return x
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


# --------------------------------------------------------------------------- the kernel table

@dataclass
class Case:
    """One row of the suite: a kernel on one input.

    ``build(rng, small)`` returns the operands (a tuple; index-notation kernels get them by
    name, in the order of ``names``).  ``baselines`` maps a name to a factory that takes the
    operands and returns a zero-argument callable computing the same result (preparation
    such as a format conversion happens in the factory, outside the timing).  The first
    baseline is the reference for the correctness check and the target.  ``flops`` and
    ``bytes`` take the operands and the reference result; ``bytes`` is the least traffic
    the kernel must move (docs/performance.md, the bandwidth model)."""

    kernel: str
    input: str
    expr: str
    build: Callable
    baselines: dict
    flops: Callable
    bytes: Callable
    formats: tuple = ()
    names: tuple = ()
    out_format: str | None = None
    target: float | None = None          # sparsecc time / first baseline's time must be <= this
    target_threads: str = "all"          # "1": the target compares sparsecc on one thread
    thread_target: float | None = None   # speedup 1 thread -> all cores must be >= this
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.kernel}:{self.input}"


def _nnz(A) -> int:
    return int(A.nnz)


def _csr_bytes(A) -> int:
    """Values, column indices and row pointers of a CSR matrix."""
    return _nnz(A) * (VB + IB) + (A.shape[0] + 1) * IB


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


def _products(A, B) -> int:
    """Multiplications in Gustavson's A @ B: sum over k of |A[:, k]| * |B[k, :]|."""
    col_counts = np.bincount(A.indices, minlength=A.shape[1])
    return int(col_counts @ np.diff(B.indptr).astype(np.int64))


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


def _spmv_case(input_name, build, *, target=None, target_threads="all", thread_target=None, note=""):
    return Case("spmv", input_name, "ij,j->i", build, _spmv_baselines(),
                flops=lambda ops, ref: 2 * _nnz(ops[0]),
                bytes=lambda ops, ref: (_csr_bytes(ops[0]) + ops[0].shape[1] * ops[1].itemsize
                                        + ops[0].shape[0] * ops[1].itemsize),
                formats=("csr", "dense"), target=target, target_threads=target_threads,
                thread_target=thread_target, note=note)


def _spmm_case(k, input_name, build, *, target=None, thread_target=None):
    return Case(f"spmm{k}", input_name, "ik,kj->ij", build, _spmm_baselines(),
                flops=lambda ops, ref: 2 * _nnz(ops[0]) * ops[1].shape[1],
                bytes=lambda ops, ref: (_csr_bytes(ops[0]) + ops[1].size * VB
                                        + ops[0].shape[0] * ops[1].shape[1] * VB),
                formats=("csr", "dense"), target=target, thread_target=thread_target)


def _given(A):
    """An input builder returning a fixed (real) matrix."""
    return lambda rng: A


def _sized(small: bool, full, little):
    return little if small else full


def cases(small: bool = False, real: dict | None = None) -> list[Case]:
    """The suite: the issue's target table first, then the other kernels and inputs."""
    s = lambda full, little: _sized(small, full, little)
    n_mv, n_mm, n_gemm = s(200_000, 20_000), s(50_000, 5_000), s(20_000, 2_000)
    d3, nnz3 = s(150, 40), s(500_000, 8_000)

    def uni(n, k=10):
        return lambda rng: uniform_rows(n, n, k, rng)

    def with_vec(make):
        def build(rng):
            A = make(rng)
            return A, rng.random(A.shape[1]).astype(A.dtype)
        return build

    def with_dense(make, k):
        def build(rng):
            A = make(rng)
            return A, rng.random((A.shape[1], k))
        return build

    def sddmm_build(n, k):
        def build(rng):
            S = uniform_rows(n, n, 10, rng)
            return S, rng.random((n, k)), rng.random((n, k))
        return build

    def mttkrp_build(rng):
        return coo3(d3, nnz3, rng), rng.random((d3, 16)), rng.random((d3, 16))

    def ttv_build(rng):
        return coo3(d3, nnz3, rng), rng.random(d3)

    def pair(n):
        return lambda rng: (uniform_rows(n, n, 10, rng), uniform_rows(n, n, 10, rng))

    sddmm_flops = lambda ops, ref: (2 * ops[1].shape[1] + 1) * _nnz(ops[0])
    sddmm_bytes = lambda ops, ref: (_csr_bytes(ops[0]) + _nnz(ops[0]) * VB
                                    + (ops[1].size + ops[2].size) * VB)
    spgemm_bytes = lambda ops, ref: _csr_bytes(ops[0]) + _csr_bytes(ops[1]) + _csr_bytes(sp.csr_array(ref))
    coo3_bytes = lambda T: _nnz(T) * (VB + 3 * IB)

    out = [
        # --- the targets table (issue 5)
        _spmv_case("uniform", with_vec(uni(n_mv)), target=1.0, target_threads="1", thread_target=1.6),
        _spmm_case(32, "uniform", with_dense(uni(n_mm), 32), target=0.5, thread_target=1.6),
        Case("sddmm32", "uniform", "ij,ik,jk->ij", sddmm_build(n_mm, 32), _sddmm_baselines(),
             flops=sddmm_flops, bytes=sddmm_bytes, formats=("csr", "dense", "dense"), out_format="csr",
             target=0.5),
        Case("spgemm", "uniform", "ik,kj->ij", lambda rng: (uni(n_gemm)(rng),) * 2, _spgemm_baselines(),
             flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
             formats=("csr", "csr"), out_format="csr", target=1.2),
        Case("mttkrp", "uniform", "ijk,jr,kr->ir", mttkrp_build, {"scipy": _mttkrp_scipy},
             flops=lambda ops, ref: 3 * _nnz(ops[0]) * ops[1].shape[1],
             bytes=lambda ops, ref: (coo3_bytes(ops[0]) + (ops[1].size + ops[2].size) * VB
                                     + ops[0].shape[0] * ops[1].shape[1] * VB),
             formats=("coo", "dense", "dense"), target=0.5),
        _spmv_case("tiny", lambda rng: (uniform_rows(10, 10, 3, rng), rng.random(10)), target=5.0,
                   note="per-call overhead"),
        # --- more kernels
        _spmm_case(8, "uniform", with_dense(uni(n_mm), 8)),
        _spmm_case(128, "uniform", with_dense(uni(n_mm), 128)),
        Case("sddmm128", "uniform", "ij,ik,jk->ij", sddmm_build(n_mm, 128), _sddmm_baselines(),
             flops=sddmm_flops, bytes=sddmm_bytes, formats=("csr", "dense", "dense"), out_format="csr"),
        Case("add", "uniform", "C[i,j] = A[i,j] + B[i,j]", pair(n_mv), {"scipy": lambda A, B: (lambda: A + B)},
             flops=lambda ops, ref: _nnz(ops[0]) + _nnz(ops[1]) - _nnz(ref),
             bytes=lambda ops, ref: _csr_bytes(ops[0]) + _csr_bytes(ops[1]) + _csr_bytes(ref),
             formats=("csr", "csr"), names=("A", "B"), out_format="csr"),
        Case("mul", "uniform", "C[i,j] = A[i,j] * B[i,j]", pair(n_mv),
             {"scipy": lambda A, B: (lambda: A.multiply(B))},
             flops=lambda ops, ref: _nnz(ref),
             bytes=lambda ops, ref: _csr_bytes(ops[0]) + _csr_bytes(ops[1]) + _csr_bytes(ref),
             formats=("csr", "csr"), names=("A", "B"), out_format="csr"),
        Case("ttv", "uniform", "ijk,k->ij", ttv_build, {"scipy": _ttv_scipy},
             flops=lambda ops, ref: 2 * _nnz(ops[0]),
             bytes=lambda ops, ref: coo3_bytes(ops[0]) + ops[1].size * VB + ref.size * VB,
             formats=("coo", "dense"), out_format="dense"),
        # --- the same kernels on other input families
        _spmv_case("poisson2d", with_vec(lambda rng: poisson2d(s(450, 140)))),
        _spmv_case("poisson3d", with_vec(lambda rng: poisson3d(s(60, 27)))),
        _spmv_case("rmat", with_vec(lambda rng: rmat(s(18, 14), 8, rng))),
        _spmm_case(32, "poisson2d", with_dense(lambda rng: poisson2d(s(220, 70)), 32)),
        _spmm_case(32, "rmat", with_dense(lambda rng: rmat(s(16, 12), 8, rng), 32)),
        Case("spgemm", "poisson2d", "ik,kj->ij", lambda rng: (poisson2d(s(300, 100)),) * 2, _spgemm_baselines(),
             flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
             formats=("csr", "csr"), out_format="csr"),
        Case("spgemm", "rmat", "ik,kj->ij", lambda rng: (rmat(s(14, 10), 8, rng),) * 2, _spgemm_baselines(),
             flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
             formats=("csr", "csr"), out_format="csr"),
    ]
    for name, (src, A) in (real or {}).items():
        out.append(_spmv_case(name, with_vec(_given(A)), note=src))
        if A.shape[0] == A.shape[1] and name in ("mhd1280b", "lesmis"):
            square = _given(A)
            out.append(Case("spgemm", name, "ik,kj->ij", lambda rng, sq=square: (sq(rng),) * 2, _spgemm_baselines(),
                            flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
                            formats=("csr", "csr"), out_format="csr", note=src))
    return out


# --------------------------------------------------------------------------- threads

def _set_threads(n: int) -> bool:
    import sparsecc as sc
    setter = getattr(sc, "set_num_threads", None)
    if setter is None:
        return False
    setter(n)
    return True


def _torch_threads(n: int):
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(n)


def all_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- running one case

def run_case(case: Case, *, threads: int, repeat: int | None, budget: float, stream: dict, seed: int = 0,
             kernel=None) -> dict:
    """Build the inputs, compile, check against every baseline, then time.  ``kernel``
    replaces the compiled sparsecc kernel (a callable taking the operands), for tests of
    the checking path."""
    import sparsecc as sc

    from .runtime.kernel import STATS

    rng = np.random.default_rng(seed)
    row: dict = {"id": case.id, "kernel": case.kernel, "input": case.input, "expr": case.expr,
                 "formats": list(case.formats), "out_format": case.out_format, "note": case.note,
                 "ok": False, "error": None}
    try:
        t = time.perf_counter()
        ops = case.build(rng)
        row["build_s"] = time.perf_counter() - t
        A = ops[0]
        row["shape"] = list(A.shape)
        row["nnz"] = _nnz(A)
        row["dtype"] = str(A.dtype)
        if kernel is None:
            if case.names:
                k = sc.compile(case.expr, out_format=case.out_format,
                               **dict(zip(case.names, case.formats)))
                named = dict(zip(case.names, ops))
                call = lambda: k(**named)
            else:
                k = sc.compile(case.expr, *case.formats, out_format=case.out_format)
                call = lambda: k(*ops)
        else:
            call = lambda: kernel(*ops)
        base_calls = {name: make(*ops) for name, make in case.baselines.items()}

        # compile + first call, at all cores (as a user's first call runs)
        _set_threads(threads)
        _torch_threads(threads)
        misses = STATS.misses
        t = time.perf_counter()
        got = call()
        first = time.perf_counter() - t
        row["cold_compile"] = STATS.misses > misses

        # correctness, before any timing
        ref_name = next(iter(base_calls))
        ref = _comparable(base_calls[ref_name]())
        ok, detail = check_result(got, ref)
        row["ok"], row["check"] = ok, f"vs {ref_name}: {detail}"
        row["baseline_checks"] = {}
        for name, fn in base_calls.items():
            if name != ref_name:
                bok, bdetail = check_result(fn(), ref)
                row["baseline_checks"][name] = {"ok": bok, "detail": bdetail}
        del got
        if not ok:
            return row

        # timing: sparsecc at all cores and at 1 thread, baselines with torch at our thread count
        t_all = measure(call, repeat, budget)
        row["sparsecc_ms"] = t_all["median_s"] * 1e3
        row["sparsecc_samples"] = t_all["samples"] * t_all["number"]
        # compile time: the first call less a steady call; None when the kernel was already
        # compiled in this process (another row with the same expression, formats and dtypes)
        row["first_call_s"] = first
        row["compile_s"] = max(0.0, first - t_all["median_s"]) if row["cold_compile"] else None
        row["threads"] = threads
        if threads > 1 and _set_threads(1):
            t_one = measure(call, repeat, budget)
            _set_threads(threads)
            row["sparsecc_1t_ms"] = t_one["median_s"] * 1e3
            row["thread_speedup"] = t_one["median_s"] / t_all["median_s"]
        elif threads == 1 or not hasattr(sc, "set_num_threads"):
            # one thread, or no thread control yet: sparsecc kernels run on the calling thread
            row["sparsecc_1t_ms"] = row["sparsecc_ms"]
            row["thread_speedup"] = 1.0 if threads == 1 else None
        else:
            row["sparsecc_1t_ms"] = row["thread_speedup"] = None
        row["baselines"] = {}
        for name, fn in base_calls.items():
            bad = row["baseline_checks"].get(name, {}).get("ok") is False
            tb = measure(fn, repeat, budget)
            row["baselines"][name] = {"ms": tb["median_s"] * 1e3, "ratio": row["sparsecc_ms"] / (tb["median_s"] * 1e3),
                                      "agrees": not bad}
        if case.target is not None:
            mine = row["sparsecc_1t_ms"] if case.target_threads == "1" else row["sparsecc_ms"]
            ratio = mine / row["baselines"][ref_name]["ms"] if mine is not None else None
            row["target"] = {"ratio": case.target, "baseline": ref_name, "threads": case.target_threads,
                             "measured": ratio, "met": ratio is not None and ratio <= case.target}
        if case.thread_target is not None:
            sp_ = row["thread_speedup"]
            row["thread_target"] = {"speedup": case.thread_target, "threads": threads, "measured": sp_,
                                    "met": (sp_ >= case.thread_target) if (sp_ is not None and threads > 1) else None}
        secs = row["sparsecc_ms"] / 1e3
        row["flops"] = float(case.flops(ops, ref))
        row["bytes"] = float(case.bytes(ops, ref))
        row["gflops"] = row["flops"] / secs / 1e9
        row["gbs"] = row["bytes"] / secs / 1e9
        # against the read bandwidth of as many threads as the kernel could use
        parallel = threads > 1 and hasattr(sc, "set_num_threads")
        bw = stream.get("read_all_gbs") if parallel else stream.get("read_1t_gbs")
        row["bw_fraction"] = row["gbs"] / bw if bw else None
        if row["sparsecc_1t_ms"] is not None:
            row["gbs_1t"] = row["bytes"] / (row["sparsecc_1t_ms"] / 1e3) / 1e9
            bw1 = stream.get("read_1t_gbs")
            row["bw_fraction_1t"] = row["gbs_1t"] / bw1 if bw1 else None
    except Exception as e:      # noqa: BLE001 - one broken kernel must not hide the others
        row["ok"] = False
        row["error"] = f"{type(e).__name__}: {e}"
    return row


# --------------------------------------------------------------------------- reporting

def _fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def _ms(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.1f}us" if v < 1 else f"{v:.2f}"


def _why(r: dict, width: int = 150) -> str:
    """A failed row's reason on one line (the JSON keeps the whole message)."""
    text = " ".join((r["error"] or r.get("check") or "").split())
    return text if len(text) <= width else text[:width - 3] + "..."


def table(rows: list[dict]) -> str:
    hdr = (f"{'kernel':10}{'input':11}{'sparsecc':>10}{'1 thr':>10}{'spdup':>6}{'baseline':>17}{'ratio':>7}"
           f"{'target':>8}{'met':>11}{'torch':>10}{'r.torch':>8}{'GFLOP/s':>8}{'GB/s':>7}{'%BW':>5}{'comp s':>7}")
    lines = [hdr, "-" * len(hdr)]
    for r in rows:
        if not r["ok"]:
            lines.append(f"{r['kernel']:10}{r['input']:11}  FAILED  {_why(r)}")
            continue
        bases = r["baselines"]
        ref = next(iter(bases))
        tgt = r.get("target")
        met = "-" if tgt is None else ("yes" if tgt["met"] else "NO")
        tt = r.get("thread_target")
        if tt is not None and tt["met"] is False:
            met += " / thr NO" if tgt else "thr NO"
        torch = bases.get("torch")
        lines.append(
            f"{r['kernel']:10}{r['input'][:10]:11}{_ms(r['sparsecc_ms']):>10}{_ms(r['sparsecc_1t_ms']):>10}"
            f"{_fmt(r['thread_speedup']):>6}{ref:>7}{_ms(bases[ref]['ms']):>10}{_fmt(bases[ref]['ratio']):>7}"
            f"{'<=' + _fmt(tgt['ratio'], 'g') if tgt else '-':>8}{met:>11}"
            f"{_ms(torch['ms']) if torch else '-':>10}{_fmt(torch['ratio']) if torch else '-':>8}"
            f"{_fmt(r['gflops']):>8}{_fmt(r['gbs'], '.1f'):>7}"
            f"{_fmt(None if r['bw_fraction'] is None else 100 * r['bw_fraction'], '.0f'):>5}"
            f"{_fmt(r['compile_s']):>7}")
    return "\n".join(lines)


def markdown(rows: list[dict]) -> str:
    """The report as a Markdown table (docs/performance.md carries one from a full run)."""
    out = [("| kernel | input | shape / nnz | sparsecc ms | 1 thread ms | speedup | baseline ms | ratio | target "
            "| torch ms | ratio torch | GFLOP/s | GB/s | % BW | compile s |"),
           "|---|---|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        shape = "x".join(map(str, r.get("shape", []))) + f" / {r.get('nnz', '-')}"
        if not r["ok"]:
            why = _why(r, 300).replace("|", "\\|")
            out.append(f"| {r['kernel']} | {r['input']} | {shape} | FAILED: {why} {'| ' * 11}|")
            continue
        bases = r["baselines"]
        ref = next(iter(bases))
        tgt = r.get("target")
        tt = r.get("thread_target")
        target = "-" if tgt is None else f"<= {tgt['ratio']:g}{' (1 thread)' if tgt['threads'] == '1' else ''}: " \
                                          f"{'met' if tgt['met'] else '**missed**'} ({tgt['measured']:.2f})"
        if tt is not None:
            target += f"; speedup >= {tt['speedup']:g}: " + {True: "met", False: "**missed**", None: "n/a"}[tt["met"]]
        torch = bases.get("torch")
        bw = r["bw_fraction"]
        out.append(
            f"| {r['kernel']} | {r['input']} | {shape} | {r['sparsecc_ms']:.3g} | {_fmt(r['sparsecc_1t_ms'], '.3g')} "
            f"| {_fmt(r['thread_speedup'])} | {ref} {bases[ref]['ms']:.3g} | {bases[ref]['ratio']:.2f} | {target} "
            f"| {_fmt(torch and torch['ms'], '.3g')} | {_fmt(torch and torch['ratio'])} | {r['gflops']:.2f} "
            f"| {r['gbs']:.1f} | {_fmt(None if bw is None else 100 * bw, '.0f')} | {_fmt(r['compile_s'])} |")
    return "\n".join(out)


def chart(rows: list[dict], path: str, title: str = "") -> None:
    """Horizontal bars: sparsecc time / baseline time per kernel and input (log scale), one
    bar per baseline, the target of each row as a red tick, 1.0 as a dashed line."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["ok"] and r.get("baselines")]
    names = sorted({b for r in done for b in r["baselines"]}, key=lambda b: (b == "torch", b))
    fig, ax = plt.subplots(figsize=(9, 0.32 * max(len(done), 4) + 1.4))
    h = 0.8 / max(len(names), 1)
    colors = {"scipy": "#1f77b4", "numpy": "#2ca02c", "torch": "#ff7f0e"}
    for j, b in enumerate(names):
        ys = [i + (j - (len(names) - 1) / 2) * h for i, r in enumerate(done) if b in r["baselines"]]
        xs = [r["baselines"][b]["ratio"] for r in done if b in r["baselines"]]
        ax.barh(ys, xs, height=h, color=colors.get(b), label=f"vs {b}")
    for i, r in enumerate(done):
        if r.get("target"):
            ax.plot([r["target"]["ratio"]] * 2, [i - 0.45, i + 0.45], color="red", lw=2,
                    label="target" if i == 0 else None)
    ax.axvline(1.0, color="black", ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(done)))
    ax.set_yticklabels([r["id"] for r in done], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("sparsecc time / baseline time (lower is better; < 1: sparsecc faster)")
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    ax.legend(seen.values(), seen.keys(), fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0),
              ncol=len(seen), frameon=False)
    ax.set_title(title or "sparsecc vs baselines", fontsize=10, pad=22)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine_info(threads: int) -> dict:
    import scipy

    import sparsecc as sc
    cpu = cpu_model()
    torch = _torch()
    return {"cpu": cpu, "cores": all_cores(), "threads": threads, "platform": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "torch": getattr(torch, "__version__", None), "sparsecc": sc.__version__,
            "set_num_threads": hasattr(sc, "set_num_threads"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadavg": list(os.getloadavg())}


# --------------------------------------------------------------------------- the command

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--small", action="store_true", help="small inputs, short timings (seconds; for CI)")
    p.add_argument("--kernels", default=None,
                   help="comma-separated kernel names (spmv, spmm32, spgemm, ...) or ids (spmv:rmat); default all")
    p.add_argument("--threads", type=int, default=None, help="thread count for 'all cores' (default: all cores)")
    p.add_argument("--repeat", type=int, default=None, help="timing samples per measurement (default: adaptive)")
    p.add_argument("--json", default="bench-results.json", help="write all figures here (default bench-results.json)")
    p.add_argument("--png", default="bench-results.png", help="write the chart here (default bench-results.png; '' for none)")
    p.add_argument("--markdown", default=None, metavar="PATH", help="also write the table as Markdown")
    p.add_argument("--no-real", action="store_true", help="skip the real matrices from installed packages")
    p.add_argument("--cache-dir", default=None,
                   help="kernel cache folder (default: a fresh temporary one, so compile times are cold)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="list the kernels and inputs, run nothing")


def select(all_cases: list[Case], kernels: str | None) -> list[Case]:
    if not kernels:
        return all_cases
    want = {w.strip() for w in kernels.split(",") if w.strip()}
    chosen = [c for c in all_cases if c.kernel in want or c.id in want]
    unknown = want - {c.kernel for c in all_cases} - {c.id for c in all_cases}
    if unknown:
        raise SystemExit(f"unknown kernel(s): {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted({c.kernel for c in all_cases}))}")
    return chosen


def run(args, out=None, extra_cases: list[Case] | None = None) -> int:
    """Run the suite for parsed ``args``; returns the exit status (1 when a check FAILED)."""
    out = out or sys.stdout
    threads = args.threads or all_cores()
    real = {} if args.no_real else real_matrices()
    suite = select(cases(args.small, real), args.kernels) + list(extra_cases or [])
    if args.list:
        for c in suite:
            print(f"{c.id:22} {c.expr:28} formats={','.join(c.formats)}"
                  f"{'  target <= ' + format(c.target, 'g') if c.target else ''}", file=out)
        return 0

    saved = os.environ.get("SPARSECC_CACHE_DIR")
    tmp = None
    if args.cache_dir:
        os.environ["SPARSECC_CACHE_DIR"] = args.cache_dir
    else:
        tmp = tempfile.mkdtemp(prefix="sparsecc-bench-cache-")
        os.environ["SPARSECC_CACHE_DIR"] = tmp
    try:
        import sparsecc as sc
        mb = 64 if args.small else 512
        stream = {}
        one = stream_probe(mb, 3 if args.small else 5, 1)
        stream["read_1t_gbs"], stream["copy_1t_gbs"] = one["read_gbs"], one["copy_gbs"]
        # all cores read at least as fast as one (a lower figure is another process's load)
        stream["read_all_gbs"] = max(stream_probe(mb, 3 if args.small else 5, threads)["read_gbs"],
                                     one["read_gbs"]) if threads > 1 else one["read_gbs"]
        stream["mbytes"], stream["threads"] = mb, threads
        print(f"sparsecc {sc.__version__} bench: {machine_info(threads)['cpu']}, {threads} thread(s)"
              f"{'' if hasattr(sc, 'set_num_threads') else ' (sc.set_num_threads not available: 1-thread column = same run)'}",
              file=out)
        print(f"bandwidth (NumPy, best of several): read {stream['read_1t_gbs']:.1f} GB/s on 1 thread, "
              f"{stream['read_all_gbs']:.1f} GB/s on {threads}; copy {stream['copy_1t_gbs']:.1f} GB/s", file=out)
        if real:
            print("real matrices: " + ", ".join(f"{n} {A.shape[0]}x{A.shape[1]}/{A.nnz}"
                                                for n, (_, A) in real.items()), file=out)
        t = time.perf_counter()                       # start the compile worker before timing compiles
        sc.compile("i,i->")(np.ones(2), np.ones(2))
        worker_s = time.perf_counter() - t
        print(f"compile worker start + first tiny compile: {worker_s:.2f} s\n", file=out)

        budget = 0.1 if args.small else 0.6
        rows = []
        for c in suite:
            r = run_case(c, threads=threads, repeat=args.repeat, budget=budget, stream=stream, seed=args.seed)
            rows.append(r)
            print(table([r]).splitlines()[-1] if rows[1:] else table([r]), file=out, flush=True)
    finally:
        if saved is None:
            os.environ.pop("SPARSECC_CACHE_DIR", None)
        else:
            os.environ["SPARSECC_CACHE_DIR"] = saved
        if tmp:
            # kernels loaded from it stay in this process's memory cache (k.ir() reads their
            # stages from the folder): remove it when the process ends, not now
            atexit.register(shutil.rmtree, tmp, True)
        _torch_threads(all_cores())

    failed = [r["id"] for r in rows if not r["ok"]]
    missed = [r["id"] for r in rows if r.get("target") and not r["target"]["met"]]
    thr_missed = [r["id"] for r in rows if r.get("thread_target") and r["thread_target"]["met"] is False]
    report = {
        "schema": SCHEMA,
        "machine": machine_info(threads),
        "config": {"small": bool(args.small), "threads": threads, "repeat": args.repeat,
                   "kernels": args.kernels, "seed": args.seed, "timing_budget_s": budget,
                   "bytes_per_value": VB, "bytes_per_index": IB},
        "bandwidth": stream,
        "worker_start_s": worker_s,
        "real_matrices": [{"name": n, "source": src, "shape": list(A.shape), "nnz": int(A.nnz)}
                          for n, (src, A) in real.items()],
        "results": rows,
        "summary": {"failed": failed, "targets_missed": missed, "thread_targets_missed": thr_missed,
                    "targets_met": [r["id"] for r in rows if r.get("target") and r["target"]["met"]]},
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
    if args.png:
        chart(rows, args.png, f"sparsecc {report['machine']['sparsecc']} on {report['machine']['cpu']}, "
                              f"{threads} thread(s){' (small)' if args.small else ''}")
    print(file=out)
    for r in rows:
        for name, chk in r.get("baseline_checks", {}).items():
            if not chk["ok"]:
                print(f"note: baseline {name} disagrees on {r['id']}: {chk['detail']}", file=out)
    print(f"targets met: {len(report['summary']['targets_met'])} of "
          f"{sum(1 for r in rows if r.get('target'))}"
          f"{'; missed: ' + ', '.join(missed) if missed else ''}"
          f"{'; thread targets missed: ' + ', '.join(thr_missed) if thr_missed else ''}", file=out)
    if failed:
        print(f"FAILED (wrong result or error): {', '.join(failed)}", file=out)
    if getattr(args, "markdown", None):
        with open(args.markdown, "w") as f:
            f.write(markdown(rows) + "\n")
    written = [p for p in (args.json, args.png, getattr(args, "markdown", None)) if p]
    if written:
        print(f"wrote {', '.join(written)}", file=out)
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparsecc bench", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
