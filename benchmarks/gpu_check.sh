#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (issue 17, docs/gpu.md): the device and the
# driver, the GPU tests (none skipped when a device is there), then SpMV, SpMM (k=64),
# SDDMM and MTTKRP compiled with device="cuda", checked against SciPy/NumPy, timed, with
# achieved GB/s against the device's memory bandwidth and cuSPARSE's time via CuPy when
# installed.  Finishes in a few minutes.  Usage: bash benchmarks/gpu_check.sh [scale]
# (scale 1: SpMV with about 50M stored entries; 0.1 for a quick look).
set -u
cd "$(dirname "$0")/.."
export SPARSECC_CACHE_DIR="${SPARSECC_CACHE_DIR:-/tmp/sparsecc-gpucheck}"
SCALE="${1:-1}"
echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -5
echo "== tests (tests/test_gpu.py)"
timeout 300 python -m pytest -q -rs tests/test_gpu.py 2>&1 | tail -15
echo "== kernels (scale $SCALE)"
timeout 400 python - "$SCALE" <<'EOF'
import ctypes, sys, time
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import targets

scale = float(sys.argv[1])
problem, arch = targets.cuda_probe()
print("driver probe:", problem or f"ok, {arch}")
if problem:
    sys.exit(1)
cu = ctypes.CDLL("libcuda.so.1")
clock, bus, name = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(256)
cu.cuDeviceGetAttribute(ctypes.byref(clock), 36, 0)     # memory clock (kHz)
cu.cuDeviceGetAttribute(ctypes.byref(bus), 37, 0)       # memory bus width (bits)
cu.cuDeviceGetName(name, 256, 0)
peak = 2 * clock.value * 1e3 * bus.value / 8 / 1e9
print(f"device: {name.value.decode()} {arch}, memory bandwidth about {peak:.0f} GB/s (from the driver)")
try:
    import cupy, cupyx.scipy.sparse as csp
except Exception as err:                                   # noqa: BLE001
    cupy = None
    print(f"CuPy not installed ({type(err).__name__}): no cuSPARSE comparison")


def timed(f, reps=5):
    f()
    t = time.perf_counter()
    for _ in range(reps):
        r = f()
    return (time.perf_counter() - t) / reps, r


def cusparse(A, *dense):
    if cupy is None:
        return None
    Ad, ds = csp.csr_matrix(A), [cupy.asarray(d) for d in dense]
    def run():
        r = Ad @ ds[0]
        cupy.cuda.Device().synchronize()
        return r
    return timed(run)[0]


rng = np.random.default_rng(0)
def report(what, t, nbytes, err, ref_t=None, cus=None):
    line = f"{what:34s} {t * 1e3:9.2f} ms  {nbytes / t / 1e9:8.1f} GB/s ({100 * nbytes / t / 1e9 / peak:5.1f}% of peak)  max rel err {err:.1e}"
    if ref_t:
        line += f"  SciPy {ref_t * 1e3:.2f} ms"
    if cus:
        line += f"  cuSPARSE (data on device) {cus * 1e3:.2f} ms"
    print(line, flush=True)

for dt in ("float32", "float64"):
    n = int(2_000_000 * scale); nnz_row = 25
    A = sp.random_array((n, n), density=nnz_row / n, format="csr", dtype=dt, random_state=rng)
    A.indices = A.indices.astype(np.int32); A.indptr = A.indptr.astype(np.int32)
    x = rng.standard_normal(n).astype(dt)
    try:
        k = sc.compile("ij,j->i", "csr", "dense", device="cuda")
        t, y = timed(lambda: k(A, x))
        ref_t, ref = timed(lambda: A @ x, 2)
        err = np.max(np.abs(y - ref)) / max(np.max(np.abs(ref)), 1e-30)
        nbytes = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes + x.nbytes + y.nbytes
        report(f"SpMV {dt} nnz={A.nnz:,} (copies)", t, nbytes, err, ref_t, cusparse(A, x))
    except sc.SparseccError as e:
        print(f"SpMV {dt}: {type(e).__name__}: {e}")

    m = int(200_000 * scale)
    B = sp.random_array((m, m), density=20 / m, format="csr", dtype=dt, random_state=rng)
    X = rng.standard_normal((m, 64)).astype(dt)
    try:
        k = sc.compile("ik,kj->ij", "csr", "dense", device="cuda")
        t, Y = timed(lambda: k(B, X))
        ref_t, ref = timed(lambda: B @ X, 2)
        err = np.max(np.abs(Y - ref)) / max(np.max(np.abs(ref)), 1e-30)
        nbytes = B.data.nbytes * 2 + B.indptr.nbytes + X.nbytes + Y.nbytes
        report(f"SpMM k=64 {dt} nnz={B.nnz:,} (copies)", t, nbytes, err, ref_t, cusparse(B, X))
    except sc.SparseccError as e:
        print(f"SpMM {dt}: {type(e).__name__}: {e}")

    U, V = rng.standard_normal((m, 64)).astype(dt), rng.standard_normal((64, m)).astype(dt)
    try:
        k = sc.compile("ij,ik,kj->ij", "csr", "dense", "dense", out_format="dense", device="cuda")
        mm = min(m, 4_000)
        Bs = B[:mm, :mm].tocsr()
        t, S = timed(lambda: k(Bs, U[:mm], V[:, :mm]))
        ref = Bs.toarray() * (U[:mm] @ V[:, :mm])
        err = np.max(np.abs(S - ref)) / max(np.max(np.abs(ref)), 1e-30)
        report(f"SDDMM to dense {dt} {mm}x{mm} (copies)", t, S.nbytes * 2 + U[:mm].nbytes * 2, err)
    except sc.SparseccError as e:
        print(f"SDDMM {dt}: {type(e).__name__}: {e}")

    try:
        T = sp.random_array((int(2000 * scale) + 2, 500, 500), density=1e-3, format="coo", dtype=dt, random_state=rng)
        Bm, Cm = rng.standard_normal((500, 32)).astype(dt), rng.standard_normal((500, 32)).astype(dt)
        k = sc.compile("ijk,jr,kr->ir", sc.Format(("dense", "compressed", "compressed")), "dense", "dense", device="cuda")
        t, M = timed(lambda: k(T, Bm, Cm))
        i, j, kk = T.coords
        ref = np.zeros((T.shape[0], 32), dt)
        np.add.at(ref, i, T.data[:, None] * Bm[j] * Cm[kk])
        err = np.max(np.abs(M - ref)) / max(np.max(np.abs(ref)), 1e-30)
        report(f"MTTKRP {dt} nnz={T.nnz:,} (copies)", t, T.data.nbytes * 4 + M.nbytes, err)
    except sc.SparseccError as e:
        print(f"MTTKRP {dt}: {type(e).__name__}: {e}")
print("(times include the host code's device allocations and copies in and out: the data starts on the host)")
EOF
echo "== done"
