"""``python -m sparsecc gpucheck``: one run that says whether the GPU path works here and how
fast it is (issue 17, docs/gpu.md "Checking on a GPU machine").

It probes the driver (ctypes only: without a driver or device it prints the reason and
returns 1, never touching the MLIR CUDA runtime), then compiles SpMV, SpMM (k=64), SDDMM to
a dense result and MTTKRP with ``device="cuda"``, runs them on host data (the host code
copies in and out) and, when CuPy is installed, on device data (no copies), checks each
against SciPy/NumPy, and prints the time, the achieved GB/s against the device's memory
bandwidth (from the driver), cuSPARSE's time via CuPy, and the issue's two targets (SpMV
with data on the device at >= 50% of the bandwidth; SpMM k=64 within 1.5x of cuSPARSE).
Returns 0 when every result matched, 1 otherwise.  ``scale`` 1: SpMV with 50M stored
entries (a few minutes on an H200, most of it building the SciPy operands).
"""

from __future__ import annotations

import ctypes
import sys
import time

import numpy as np


def _device_facts(driver: str) -> tuple[str, float]:
    cu = ctypes.CDLL(driver)
    clock, bus, name = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(256)
    dev = ctypes.c_int(0)
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    cu.cuDeviceGetAttribute(ctypes.byref(clock), 36, dev)      # memory clock (kHz)
    cu.cuDeviceGetAttribute(ctypes.byref(bus), 37, dev)        # memory bus width (bits)
    if hasattr(cu, "cuDeviceGetName"):
        cu.cuDeviceGetName(name, 256, dev)
    peak = 2 * clock.value * 1e3 * bus.value / 8 / 1e9
    return name.value.decode(errors="replace") or "?", peak


def _timed(f, reps: int = 5):
    r = f()
    t = time.perf_counter()
    for _ in range(reps):
        r = f()
    return (time.perf_counter() - t) / reps, r


def _rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-30)
    return float(np.max(np.abs(got - want), initial=0.0)) / scale


def main(scale: float = 1.0, out=sys.stdout) -> int:
    import scipy.sparse as sp

    import sparsecc as sc
    from sparsecc.runtime import targets

    def say(*a):
        print(*a, file=out, flush=True)

    problem, arch = targets.cuda_probe()
    say("driver probe:", problem or f"ok, {arch}")
    if problem:
        say("gpucheck: nothing ran (no usable CUDA device); kernels still compile: k.ir('ptx')")
        return 1
    name, peak = _device_facts(targets.CUDA_DRIVER)
    say(f"device: {name} {arch}, memory bandwidth about {peak:.0f} GB/s (from the driver)")
    try:
        import cupy
        import cupyx.scipy.sparse as csp
    except Exception as err:                               # noqa: BLE001 - optional (the cuda extra)
        cupy = csp = None
        say(f"CuPy not installed ({type(err).__name__}): host data only, no cuSPARSE comparison "
            f"(pip install 'sparsecc[cuda]')")

    def sync():
        if cupy is not None:
            cupy.cuda.Device(0).synchronize()

    ok = True
    rng = np.random.default_rng(0)
    tol = {"float32": 1e-4, "float64": 1e-10}

    def report(what, t, nbytes, err, dt, extra=""):
        nonlocal ok
        good = err <= tol[dt]
        ok &= good
        gbs = nbytes / t / 1e9
        share = f"({100 * gbs / peak:5.1f}% of peak)" if peak > 0 else "(peak unknown)"
        say(f"{what:44s} {t * 1e3:9.3f} ms {gbs:8.1f} GB/s {share}  "
            f"rel err {err:.1e} {'ok' if good else 'WRONG'}{extra}")
        return gbs

    def attempt(what, f):
        nonlocal ok
        try:
            f()
        except Exception as e:                              # noqa: BLE001 - report and go on
            ok = False
            say(f"{what}: {type(e).__name__}: {e}")

    for dt in ("float32", "float64"):
        n = max(int(2_000_000 * scale), 16)
        per_row = 25
        A = sp.random_array((n, n), density=min(per_row / n, 1.0), format="csr", dtype=dt, random_state=rng)
        A.indices, A.indptr = A.indices.astype(np.int32), A.indptr.astype(np.int32)
        x = rng.standard_normal(n).astype(dt)
        spmv_bytes = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes + 2 * x.nbytes

        def spmv():
            k = sc.compile("ij,j->i", "csr", "dense", device="cuda")
            ref = A @ x
            t, y = _timed(lambda: k(A, x))
            report(f"SpMV {dt} nnz={A.nnz:,} host data", t, spmv_bytes, _rel_err(y, ref), dt)
            if cupy is None:
                return
            dA, dx = csp.csr_matrix(sp.csr_matrix(A)), cupy.asarray(x)
            kd = sc.compile("ij,j->i", "csr", "dense", device="cuda", check=False)   # no index copy to the host
            t, y = _timed(lambda: kd(dA, dx))
            tc, _ = _timed(lambda: (dA @ dx, sync()))
            gbs = report(f"SpMV {dt} nnz={A.nnz:,} device data, check=False", t, spmv_bytes, _rel_err(cupy.asnumpy(y), ref), dt,
                         f"  cuSPARSE {tc * 1e3:.3f} ms")
            if scale >= 1 and peak > 0:
                say(f"  target SpMV >= 50% of bandwidth on device data: {100 * gbs / peak:.1f}% "
                    f"{'MET' if gbs >= 0.5 * peak else 'NOT MET'}")
        attempt(f"SpMV {dt}", spmv)

        m = max(int(200_000 * scale), 16)
        B = sp.random_array((m, m), density=min(20 / m, 1.0), format="csr", dtype=dt, random_state=rng)
        X = rng.standard_normal((m, 64)).astype(dt)

        def spmm():
            k = sc.compile("ik,kj->ij", "csr", "dense", device="cuda")
            ref = B @ X
            nbytes = B.data.nbytes * 2 + B.indptr.nbytes + 2 * X.nbytes
            t, Y = _timed(lambda: k(B, X))
            report(f"SpMM k=64 {dt} nnz={B.nnz:,} host data", t, nbytes, _rel_err(Y, ref), dt)
            if cupy is None:
                return
            dB, dX = csp.csr_matrix(sp.csr_matrix(B)), cupy.asarray(X)
            kd = sc.compile("ik,kj->ij", "csr", "dense", device="cuda", check=False)
            t, Y = _timed(lambda: kd(dB, dX))
            tc, _ = _timed(lambda: (dB @ dX, sync()))
            report(f"SpMM k=64 {dt} nnz={B.nnz:,} device data, check=False", t, nbytes, _rel_err(cupy.asnumpy(Y), ref), dt,
                   f"  cuSPARSE {tc * 1e3:.3f} ms")
            if scale >= 1:
                say(f"  target SpMM within 1.5x of cuSPARSE: {t / tc:.2f}x {'MET' if t <= 1.5 * tc else 'NOT MET'}")
        attempt(f"SpMM {dt}", spmm)

        def sddmm():
            mm = min(m, 4_000)
            Bs = B[:mm, :mm].tocsr()
            U, V = rng.standard_normal((mm, 64)).astype(dt), rng.standard_normal((64, mm)).astype(dt)
            k = sc.compile("ij,ik,kj->ij", "csr", "dense", "dense", out_format="dense", device="cuda")
            t, S = _timed(lambda: k(Bs, U, V))
            ref = Bs.toarray() * (U @ V)
            report(f"SDDMM to dense {dt} {mm}x{mm} host data", t, S.nbytes * 2 + U.nbytes * 2, _rel_err(S, ref), dt)
        attempt(f"SDDMM {dt}", sddmm)

        def mttkrp():
            T = sp.random_array((max(int(2000 * scale), 2), 500, 500), density=1e-3, format="coo", dtype=dt,
                                random_state=rng)
            Bm, Cm = rng.standard_normal((500, 32)).astype(dt), rng.standard_normal((500, 32)).astype(dt)
            k = sc.compile("ijk,jr,kr->ir", sc.Format(("dense", "compressed", "compressed")), "dense", "dense",
                           device="cuda")
            t, M = _timed(lambda: k(T, Bm, Cm))
            i, j, kk = T.coords
            ref = np.zeros((T.shape[0], 32), np.float64)
            np.add.at(ref, i, T.data[:, None] * Bm[j] * Cm[kk])
            report(f"MTTKRP {dt} nnz={T.nnz:,} host data", t, T.data.nbytes * 4 + M.nbytes, _rel_err(M, ref), dt)
        attempt(f"MTTKRP {dt}", mttkrp)
    say("(host data: times include the host code's device allocations and copies in and out; device data: "
        "none, and check=False: with check=True each call copies the index arrays to the host to validate them)")
    say("gpucheck:", "all results match" if ok else "SOME RESULTS ARE WRONG OR FAILED")
    return 0 if ok else 1
