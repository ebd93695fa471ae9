"""``python -m sparsecc demo``: compile four kernels, check them against SciPy/NumPy, time them."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp


def median_time(fn, repeat: int = 7) -> float:
    """Median wall time of ``fn`` over ``repeat`` calls, after one warm-up call."""
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def poisson2d(n: int) -> sp.csr_array:
    """The 5-point Laplacian on an n x n grid (n^2 rows)."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    eye = sp.eye_array(n)
    return (sp.kron(t, eye) + sp.kron(eye, t)).tocsr()


def random_rows(m: int, n: int, per_row: int, rng) -> sp.csr_array:
    indptr = np.arange(0, m * per_row + 1, per_row, dtype=np.int32)
    cols = rng.integers(0, n, size=m * per_row).astype(np.int32)
    A = sp.csr_array((rng.random(m * per_row), cols, indptr), shape=(m, n))
    A.sum_duplicates()
    return A


def _close(got, want) -> bool:
    """Equal values; sparse results also compared without densifying them."""
    if sp.issparse(got) or sp.issparse(want):
        diff = sp.csr_array(got) - sp.csr_array(want)
        return diff.nnz == 0 or bool(abs(diff).max() <= 1e-9 * (1 + abs(sp.csr_array(want)).max()))
    return bool(np.allclose(got, want, rtol=1e-9, atol=1e-9))


def main(scale: float = 1.0) -> int:
    import sparsecc as sc

    rng = np.random.default_rng(0)
    n = int(300 * scale)
    A = poisson2d(n)                                           # SpMV / SpMM
    x = rng.random(A.shape[1])
    X = rng.random((A.shape[1], 32))
    S = random_rows(int(4000 * scale), int(4000 * scale), 10, rng)     # SDDMM (S's pattern)
    U, V = rng.random((S.shape[0], 16)), rng.random((S.shape[1], 16))
    d = max(8, int(60 * scale))                               # MTTKRP
    nnz = int(0.02 * d ** 3)
    flat = rng.choice(d ** 3, size=nnz, replace=False)
    T = sp.coo_array((rng.random(nnz), np.unravel_index(flat, (d, d, d))), shape=(d, d, d))
    B, C = rng.random((d, 16)), rng.random((d, 16))

    def mttkrp_scipy():
        unfold = sp.csr_array((T.data, (T.coords[0], T.coords[1] * d + T.coords[2])), shape=(d, d * d))
        khatri_rao = (B[:, None, :] * C[None, :, :]).reshape(d * d, 16)
        return unfold @ khatri_rao

    def sddmm_numpy():
        r = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
        vals = S.data * np.einsum("ij,ij->i", U[r], V[S.indices])
        return sp.csr_array((vals, S.indices, S.indptr), shape=S.shape)

    cases = [
        ("SpMV   ij,j->i        ", "ij,j->i", (A, x), lambda: A @ x, "scipy A @ x"),
        ("SpMM   ik,kj->ij (32) ", "ik,kj->ij", (A, X), lambda: A @ X, "scipy A @ X"),
        ("SDDMM  ij,ik,jk->ij   ", "ij,ik,jk->ij", (S, U, V), sddmm_numpy, "numpy gather"),
        ("SpGEMM ik,kj->ij      ", "ik,kj->ij", (S, S), lambda: S @ S, "scipy A @ A"),
        ("MTTKRP ijk,jr,kr->ir  ", "ijk,jr,kr->ir", (T, B, C), mttkrp_scipy, "scipy unfolding"),
    ]
    print(f"sparsecc {sc.__version__}: compile, check against SciPy/NumPy, time (median of 7)")
    print("compile: seconds to compile on the first call; 'disk': loaded from the kernel cache on disk, "
          "'cached': already loaded in this process\n")
    print(f"{'kernel':24}{'shape / nnz':>22}{'compile':>10}{'sparsecc':>11}{'baseline':>11}{'ratio':>7}  baseline")
    ok = True
    for label, expr, ops, baseline, bname in cases:
        before = sc.cache_info()
        t0 = time.perf_counter()
        k = sc.compile(expr)
        got = k(*ops)
        t_compile = time.perf_counter() - t0
        after = sc.cache_info()
        # the first call's time is a compile time only when it compiled; else the kernel was loaded
        compiled = f"{t_compile:.2f}s" if after.misses > before.misses else \
            ("disk" if after.disk_hits > before.disk_hits else "cached")
        want = baseline()
        good = _close(got, want)
        ok &= good
        t_ours = median_time(lambda: k(*ops))
        t_base = median_time(baseline)
        shape = f"{'x'.join(map(str, ops[0].shape))} / {ops[0].nnz}"
        print(f"{label}{shape:>22}{compiled:>10}{t_ours * 1e3:>9.2f}ms{t_base * 1e3:>9.2f}ms"
              f"{t_ours / t_base:>7.2f}  {bname}{'' if good else '   MISMATCH'}")
    info = sc.cache_info()
    print(f"\nresults match: {'yes' if ok else 'NO'}; compilations this run: {info.misses}, "
          f"kernels from the disk cache: {info.disk_hits}")
    return 0 if ok else 1
