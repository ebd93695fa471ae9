"""NVIDIA GPU code from the same expressions (issue 17; docs/gpu.md).

Without a device: PTX generation, host code and its copies, the grid, the race rule, the
cache key, Options validation and the errors (the no-driver one in a subprocess, and a stub
driver built here).  With a device (the only skip): the kernels against NumPy."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import cache, targets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a driver and a device are here (the device tests run; the no-driver ones do not)
HAS_DEVICE = targets.cuda_probe()[0] == ""

#: the kernels with dense results that run on the GPU: (name, subscripts, formats, out_format)
KERNELS = {
    "spmv": ("ij,j->i", ("{f}", "dense"), None),
    "spmm": ("ik,kj->ij", ("{f}", "dense"), None),
    "sddmm": ("ij,ik,kj->ij", ("{f}", "dense", "dense"), "dense"),
}


def _kernel(name, fmt, dtype="float64", **kw):
    expr, fmts, out = KERNELS[name]
    return sc.compile(expr, *(f.format(f=fmt) for f in fmts), out_format=out, device="cuda", **kw), expr


def _operands(name, fmt, dtype, seed=0, m=37, n=29, k=5, density=0.2):
    rng = np.random.default_rng(seed)
    A = sp.random_array((m, n), density=density, format="csr", dtype=dtype, random_state=rng)
    A = A.asformat(fmt) if fmt != "dense" else A.toarray()
    if name == "spmv":
        return A, rng.standard_normal(n).astype(dtype)
    if name == "spmm":
        return A, rng.standard_normal((n, k)).astype(dtype)
    return A, rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def _dense(x):
    return x.toarray() if sp.issparse(x) else x


def _ir_with_dtype(name, fmt, dtype):
    """The IR stages of the specialization for ``dtype`` operands, without running it."""
    from sparsecc.formats import resolve
    from sparsecc.runtime.kernel import specialize
    from sparsecc.runtime.specialization import gpu_formats
    k, _ = _kernel(name, fmt)
    fmts = [resolve(k.formats[n], k._ranks[n], n).with_widths(32, 32) for n in k.stmt.operands]
    fmts = tuple(f if f.is_dense else f.with_widths(32, 32) for f in gpu_formats(k.stmt, fmts))
    out = k._result_format(frozenset(n for n, f in zip(k.stmt.operands, fmts) if not f.is_dense), ())
    return specialize(k.stmt, fmts, (dtype,) * len(fmts), k.options, out).stages()


# ----------------------------------------------------------------- PTX, no device needed
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_ptx_for_each_kernel_class(name, fmt, dtype):
    stages = _ir_with_dtype(name, fmt, dtype)
    ptx = stages["ptx"]
    assert ".visible .entry kernel0(" in ptx
    assert ".target sm_90" in ptx
    t = "f32" if dtype == "float32" else "f64"
    assert f"mul.rn.{t}" in ptx and f"add.rn.{t}" in ptx           # the product and the sum, in dtype
    assert f"st.global.b{t[1:]}" in ptx                            # the result, in device memory
    assert "atom." not in ptx                     # no atomics: no thread adds into another's entry
    ptxas = shutil.which("ptxas")
    if ptxas:                                     # the toolkit's assembler accepts it when present
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sparsecc-{os.getpid()}-{name}-{dtype}.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        try:
            r = subprocess.run([ptxas, "-arch=sm_90", path, "-o", os.devnull], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        finally:
            os.remove(path)


@pytest.mark.parametrize("expr, fmts, out", [
    ("ijk,jr,kr->ir", (("dense", "compressed", "compressed"), "dense", "dense"), None),     # MTTKRP
    ("ijk,k->ij", (("dense", "compressed", "compressed"), "dense"), "dense"),               # TTV
    ("ij->i", ("csr",), None),                                                              # row sums
    ("ij,ij->i", ("csr", "dense"), None)])
def test_ptx_for_other_kernels_with_a_dense_outer_level(expr, fmts, out):
    fmts = [sc.Format(f) if isinstance(f, tuple) else f for f in fmts]
    ptx = sc.compile(expr, *fmts, out_format=out, device="cuda").ir("ptx")
    assert ".visible .entry kernel0(" in ptx and "atom." not in ptx


def test_64_bit_indices_load_in_one_instruction():
    """The gpu.module gets the NVPTX data layout: without it i64 was 4-byte aligned and each
    64-bit position/coordinate load was split into two 32-bit loads."""
    ptx = sc.compile("ij,j->i", "csr", "dense", device="cuda", options=sc.Options(index_width=64)).ir("ptx")
    assert "ld.global.b64" in ptx and "ld.global.b32" not in ptx


def test_ptx_without_a_device_and_the_host_code():
    k, _ = _kernel("spmv", "csr")
    ptx = k.ir("ptx")
    assert ".entry" in ptx and ".target sm_90" in ptx
    llvm = k.ir("llvm")
    called = set(re.findall(r"call [^@]*@(mgpu\w+)", llvm))
    # streams, the embedded PTX loaded at load time (JIT by the driver), device buffers,
    # copies both ways, the launch, and the frees
    assert {"mgpuModuleLoadJIT", "mgpuModuleGetFunction", "mgpuStreamCreate", "mgpuMemAlloc", "mgpuMemcpy",
            "mgpuLaunchKernel", "mgpuStreamSynchronize", "mgpuMemFree", "mgpuStreamDestroy"} <= called
    assert "mgpuCreateCsr" not in llvm            # no cuSPARSE: the runtime has none


def test_host_operands_are_copied_in_and_out_and_the_grid_fits_the_problem():
    k, _ = _kernel("spmv", "csr")
    gpu = k.ir("gpu")
    host = gpu[gpu.index("func.func @kernel("):]
    launch = re.search(r"gpu.launch_func async @sparse_kernels::@kernel0 blocks in \((%\w+),", host)
    assert launch
    before = host[:launch.start()]
    # every buffer is allocated on the device and copied in before the launch ...
    allocs = re.findall(r"(%memref\w*), %asyncToken\w* = gpu.alloc", before)
    copies_in = re.findall(r"gpu.memcpy async \[%\w+\] (%memref\w*), %", before)
    assert allocs and sorted(allocs) == sorted(copies_in)
    # ... the result (y: the function's last argument) copied back after it, and all freed
    after = host[launch.end():]
    assert re.search(r"gpu.memcpy async \[%\w+\] %arg7, %memref", after)
    assert len(re.findall(r"gpu.dealloc", after)) == len(allocs)
    # blocks = clamp(ceil(rows / threads), 1, 2^31 - 1): not one block
    grid = launch.group(1)
    assert re.search(rf"{grid} = arith.minui", before) and "arith.ceildivui" in before


@pytest.mark.parametrize("name", ["spmv", "spmm"])
def test_no_parallel_reduction_loop(name):
    """The race trap: MLIR's strategy would also parallelize a loop that carries a reduction
    into the output; the GPU loop here is the output's row loop, each thread its own rows."""
    k, _ = _kernel(name, "csr")
    sparsified = k.ir("sparsified")
    loops = re.findall(r"scf.parallel \((%\w+)\) = .*\{", sparsified)
    assert len(loops) == 1
    assert "scf.reduce(" not in sparsified        # no value combined across iterations
    body = k.ir("gpu")
    kernel = body[body.index("llvm.func @kernel0"):body.index("func.func @kernel(")]
    assert "atomicrmw" not in kernel
    # the only stores of the kernel write the output at the thread's row (the grid-stride
    # index, the block argument of the outer loop header)
    row = re.search(r"\^bb1\((%\d+): i64\)", kernel).group(1)
    stores = re.findall(r"llvm.store %\d+, (%\d+)", kernel)
    assert stores
    for ptr in stores:
        gep = re.search(rf"{ptr} = llvm.getelementptr inbounds\|nuw %\d+\[(%\d+)\]", kernel).group(1)
        if name == "spmv":
            assert gep == row
        else:                                   # row * k + column
            assert re.search(rf"{gep} = llvm.add %\d+, %\d+", kernel)


@pytest.mark.parametrize("case", [("ij->", ("csr",), "outer loop of its loop nest carries a reduction"),
                                  ("ij,ij->i", ("dcsr", "dcsr"), "no parallel GPU loop"),
                                  ("ij,ij->i", ("csr", "coo"), "no parallel GPU loop")])
def test_kernels_without_gpu_code_say_why(case):
    expr, fmts, why = case
    k = sc.compile(expr, *fmts, device="cuda")
    with pytest.raises(sc.DeviceError, match=f"no GPU code.*{why}"):
        k.ir("ptx")
    ops = [sp.random_array((6, 5), density=0.5, format="csr", random_state=s).asformat("coo" if f == "coo" else "csr")
           for s, f in enumerate(fmts)]
    with pytest.raises(sc.DeviceError, match="no GPU code"):    # never a silent CPU run
        k(*ops)


GPU_NESTS = [("ij,j->i", ("{f}", "dense"), None), ("ik,kj->ij", ("{f}", "dense"), None),
             ("ij,ik,kj->ij", ("{f}", "dense", "dense"), "dense"), ("ij->j", ("{f}",), None),
             ("ij->i", ("{f}",), None)]


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
@pytest.mark.parametrize("expr, fmts, out", GPU_NESTS)
def test_the_gpu_loop_nest_runs_on_the_cpu_and_matches_numpy(expr, fmts, out, fmt, monkeypatch):
    """The loop nest MLIR outlines for the GPU (the operand formats planned for it, the
    parallel outer loop) is the CPU's with parallel='any-storage-outer-loop': the same
    sparsified IR, run here through OpenMP, checked against numpy.einsum (random, empty and
    one-entry operands).  (The CPU's hand-written kernels are kept out: the sparsifier's nest is
    what is compared.)"""
    from sparsecc.formats import resolve
    from sparsecc.runtime import fast_paths
    monkeypatch.setattr(fast_paths, "route", lambda *a, **k: None)   # (SpMM, ewise row sums, scatter)
    from sparsecc.runtime.specialization import gpu_formats
    fmts = [f.format(f=fmt) for f in fmts]
    gk = sc.compile(expr, *fmts, out_format=out, device="cuda")
    planned = gpu_formats(gk.stmt, [resolve(f, gk._ranks[n], n) for f, n in zip(fmts, gk.stmt.operands)])
    planned = [f if f.is_dense else f.with_widths(32, 32) for f in planned]
    assert not planned[0].is_dense and planned[0].levels[0] == "dense"
    ck = sc.compile(expr, *planned, out_format=out, options=sc.Options(parallel="any-storage-outer-loop"))
    assert "scf.parallel" in gk.ir("sparsified")
    assert ck.ir("sparsified") == gk.ir("sparsified")
    rng = np.random.default_rng(7)
    m, n, r = 23, 17, 4
    cases = [sp.random_array((m, n), density=0.3, format="csr", random_state=rng),
             sp.csr_array((m, n)), sp.csr_array(([1.5], ([m - 1], [0])), shape=(m, n))]
    for A in cases:
        A = A.asformat("csr" if fmt == "dcsr" else fmt)
        lhs = expr.split("->")[0].split(",")
        ops = [A] + [rng.standard_normal(tuple({"i": m, "j": n, "k": r}[c] for c in s)) for s in lhs[1:]]
        if expr == "ik,kj->ij":
            ops = [A, rng.standard_normal((n, r))]
        got = ck(*ops)
        want = np.einsum(expr, *[_dense(x) for x in ops])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_sparse_results_stay_on_the_cpu():
    A = sp.random_array((6, 5), density=0.5, format="csr", random_state=1)
    with pytest.raises(sc.DeviceError, match="sparse result.*keeps kernels with sparse outputs.*CPU"):
        sc.einsum("ik,kj->ij", A, A.T.tocsr(), device="cuda")
    with pytest.raises(sc.DeviceError, match="sparse result"):
        sc.evaluate("C[i,j] = A[i,j] * B[i,j]", A=A, B=A, device="cuda")


def test_device_operands_without_a_driver_say_why():
    """Device operands are taken (tests/test_gpu_device_operands.py); without a driver the
    probe's reason is a DeviceError before anything reads them."""
    class OnGpu:                                  # what CuPy arrays and torch CUDA tensors show
        shape = (5,)
        __cuda_array_interface__ = {"shape": (5,), "typestr": "<f8", "data": (0, False), "version": 3}

    A = sp.random_array((6, 5), density=0.5, format="csr", random_state=1)
    if HAS_DEVICE:
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(sc.DeviceError, match="no CUDA driver/device"):
        sc.einsum("ij,j->i", A, OnGpu(), device="cuda")


@pytest.mark.parametrize("semiring", ["min_plus", "lor_land"])
def test_semiring_spmv_has_gpu_code(semiring):
    ptx = sc.compile("ij,j->i", "csr", "dense", semiring=semiring, device="cuda").ir("ptx")
    assert ".visible .entry kernel0(" in ptx and "atom." not in ptx


def test_autotune_is_refused_on_cuda():
    with pytest.raises(sc.DeviceError, match="autotune=True explores formats on the CPU only"):
        sc.compile("ij,j->i", None, "dense", autotune=True, device="cuda")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the library")
def test_aot_library_with_the_ptx_embedded(tmp_path):
    """sc.aot.build of cuda kernels: the host code with the PTX inside, linked against
    libmlir_cuda_runtime.so (run path: its own folder, then the MLIR tools package's);
    a CPU kernel beside it stays CPU code; loading it asks the driver first."""
    import json
    k = sc.compile("ij,j->i", "csr", "dense", device="cuda", options=sc.Options(gpu_arch="sm_80"))
    k2 = sc.compile("ik,kj->ij", "csr", "dense")                       # per kernel: this one on the CPU
    path = sc.aot.build("g", {"spmv": k, "spmm": k2}, str(tmp_path))
    data = open(path, "rb").read()
    assert data.count(b".visible .entry kernel0(") == 1 and b".target sm_80" in data
    nm = subprocess.run(["nm", "-D", path], capture_output=True, text=True).stdout
    assert re.search(r" T g_spmv_entry", nm) and re.search(r" U mgpuModuleLoadJIT", nm)
    assert re.search(r" U mgpuLaunchKernel", nm)
    dyn = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    assert "libmlir_cuda_runtime.so" in dyn and "$ORIGIN" in dyn
    manifest = json.load(open(tmp_path / "g.json"))
    assert manifest["device"] == "cuda"
    assert manifest["kernels"]["spmv"]["device"] == "cuda" and manifest["kernels"]["spmv"]["gpu_arch"] == "sm_80"
    assert "device" not in manifest["kernels"]["spmm"]
    # device="cuda" for the whole library: both kernels get GPU code
    path2 = sc.aot.build("h", {"spmv": sc.compile("ij,j->i", "csr", "dense"), "spmm": k2}, str(tmp_path / "h"),
                         device="cuda")
    assert open(path2, "rb").read().count(b".visible .entry kernel0(") == 2
    if not HAS_DEVICE:
        with pytest.raises(sc.DeviceError, match="holds cuda kernels and cannot be loaded here: no CUDA driver"):
            sc.aot.load(str(tmp_path))


def test_aot_cuda_kernels_without_gpu_code_are_refused(tmp_path):
    with pytest.raises(sc.DeviceError, match="no GPU code"):
        sc.aot.build("g", {"total": sc.compile("ij->", "csr", device="cuda")}, str(tmp_path))
    with pytest.raises(sc.DeviceError, match="sparse result"):
        sc.aot.build("g", {"spgemm": sc.compile("ik,kj->ij", "csr", "csr", out_format="csr")}, str(tmp_path),
                     device="cuda")


# ------------------------------------------------------------- options, device, cache key
def test_options_validation():
    assert sc.Options().device == "cpu" and sc.Options().gpu_arch is None
    assert sc.Options(gpu_arch="sm_80").gpu_arch == "sm_80"
    for bad in ("sm_91", "sm90", "compute_90", "", 90):
        with pytest.raises(sc.SparseccError, match="gpu_arch must be"):
            sc.Options(gpu_arch=bad)
    for bad in ("gpu", "CUDA", None, 1):
        with pytest.raises(sc.SparseccError, match="device must be one of cpu, cuda"):
            sc.Options(device=bad)
    with pytest.raises(sc.SparseccError, match="device must be one of"):
        sc.compile("ij,j->i", "csr", "dense", device="rocm")
    with pytest.raises(sc.SparseccError, match="device must be one of"):
        sc.einsum("ij,j->i", np.ones((2, 2)), np.ones(2), device="tpu")


def test_cache_key_differs_by_target_and_arch():
    mlir = "module {}"
    cpu = cache.key_of(mlir, sc.Options().key(), targets.resolve(sc.Options()))
    t90 = targets.resolve(sc.Options(device="cuda", gpu_arch="sm_90"))
    t80 = targets.resolve(sc.Options(device="cuda", gpu_arch="sm_80"))
    assert t90.name == "cuda" and t90.param("gpu_arch") == "sm_90" and t80.param("gpu_arch") == "sm_80"
    k90 = cache.key_of(mlir, sc.Options(device="cuda", gpu_arch="sm_90").key(), t90)
    k80 = cache.key_of(mlir, sc.Options(device="cuda", gpu_arch="sm_80").key(), t80)
    assert len({cpu, k90, k80}) == 3
    # the CPU key is what it was before the GPU options existed (no cache invalidated)
    assert "device" not in sc.Options().key() and "gpu_arch" not in sc.Options().key()


def test_arch_reaches_the_ptx_and_device_kw_matches_options():
    k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(gpu_arch="sm_80"), device="cuda")
    assert k.options.device == "cuda" and ".target sm_80" in k.ir("ptx")
    k2 = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(device="cuda", gpu_arch="sm_80"))
    assert k2.ir("ptx") == k.ir("ptx")
    cpu = sc.compile("ij,j->i", "csr", "dense")
    with pytest.raises(sc.SparseccError, match="unknown stage 'ptx'"):
        cpu.ir("ptx")


def test_pipelines_are_data_with_reasons():
    from sparsecc.passes import gpu
    for table in (gpu.GPU_CODEGEN, gpu.GPU_HOST):
        for p, why in table:
            assert p and len(why) > 10
    names = [p for p, _ in gpu.pipelines()["lower-to-llvm"]]
    assert "gpu-module-to-binary{format=isa}" in names and names[-1] == "reconcile-unrealized-casts"
    assert any("parallelization-strategy=any-storage-outer-loop" in p for p, _ in gpu.pipelines()["sparsify"])


def test_import_sparsecc_imports_nothing_cuda():
    code = ("import sys, sparsecc as sc; sc.Options(device='cuda', gpu_arch='sm_90'); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('cupy', 'cupyx', 'cuda', 'cuda_bindings', "
            "'cuda_core', 'torch', 'pycuda') "
            "or m in ('sparsecc.passes.gpu', 'sparsecc.passes.device_args', 'sparsecc.runtime.device')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_cuda_extra_is_pinned_and_not_in_the_test_extra():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    cuda = extras["cuda"]
    assert {re.split(r"==", r)[0] for r in cuda} == {"cuda-python", "cupy-cuda12x"}
    assert all(re.fullmatch(r"[\w-]+==[\d.]+", r) for r in cuda)     # pinned
    for name, reqs in extras.items():
        if name != "cuda":
            assert not any(r.startswith(("cuda-python", "cupy")) for r in reqs), name


# ------------------------------------------------------------------ errors, in a subprocess
CALL = textwrap.dedent("""
    import os, numpy as np, scipy.sparse as sp, sparsecc as sc
    A = sp.random_array((6, 5), density=0.5, format="csr", random_state=1)
    try:
        sc.einsum("ij,j->i", A, np.ones(5), device="cuda",
                  options=sc.Options(gpu_arch=os.environ.get("ARCH") or None))
    except sc.DeviceError as e:
        print("DeviceError:", e)
    print("alive")
""")


def _run(env_extra: dict):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", CALL], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.mark.skipif(HAS_DEVICE, reason="this machine has a CUDA device")
def test_no_driver_is_a_device_error_and_the_process_lives():
    r = _run({})
    assert r.returncode == 0, r.stderr
    assert "DeviceError: no CUDA driver/device" in r.stdout and "alive" in r.stdout


STUB = r"""
#include <stdio.h>
static FILE *log_file(void) { static FILE *f; if (!f) f = fopen(STUB_LOG, "a"); return f; }
int cuInit(unsigned flags) { fprintf(log_file(), "cuInit %u\n", flags); fflush(log_file()); return INIT_RC; }
int cuDeviceGetCount(int *n) { *n = DEVICES; fprintf(log_file(), "cuDeviceGetCount\n"); fflush(log_file()); return 0; }
int cuDeviceGet(int *d, int k) { *d = k; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) { *v = attr == 75 ? 8 : 0; return 0; }
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the stub driver")
@pytest.mark.parametrize("rc, devices, message", [(100, 1, "cuInit failed with CUDA error 100"),
                                                  (0, 0, "the driver sees no device"),
                                                  (0, 1, "compiled for sm_90, but the device is sm_80")])
def test_stub_driver_errors(tmp_path, rc, devices, message):
    """A driver that fails cuInit, one without devices (the runtime would only print errors
    and leave the output untouched), an older device: DeviceError before any kernel runs,
    and the MLIR runtime is never loaded."""
    src, lib, log = tmp_path / "stub.c", tmp_path / "libcuda.so.1", tmp_path / "calls.log"
    src.write_text(STUB)
    subprocess.run(["cc", "-shared", "-fPIC", f'-DSTUB_LOG="{log}"', f"-DINIT_RC={rc}", f"-DDEVICES={devices}",
                    "-o", str(lib), str(src)], check=True)
    r = _run({"SPARSECC_CUDA_DRIVER": str(lib), "ARCH": "sm_90"})
    assert r.returncode == 0, r.stderr
    assert f"DeviceError: " in r.stdout and message in r.stdout and "alive" in r.stdout, r.stdout
    assert "cuInit 0" in log.read_text()


RECORDING_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef unsigned long long ptr_t;
static FILE *lg(void) { static FILE *f; if (!f) f = fopen(STUB_LOG, "a"); return f; }
#define LOG(...) (fprintf(lg(), __VA_ARGS__), fflush(lg()))
int cuInit(unsigned f) { LOG("init\n"); return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int k) { *d = k; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) { *v = attr == 75 ? 9 : 0; return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { static int ctx; *c = &ctx; return 0; }
int cuCtxPushCurrent_v2(void *c) { return 0; }
int cuCtxPopCurrent_v2(void **c) { return 0; }
int cuGetErrorName(int e, const char **s) { *s = "STUB"; return 0; }
int cuStreamCreate(void **s, unsigned f) { static int st; *s = &st; LOG("stream\n"); return 0; }
int cuStreamDestroy_v2(void *s) { LOG("stream-destroy\n"); return 0; }
int cuStreamSynchronize(void *s) { LOG("sync\n"); return 0; }
int cuStreamWaitEvent(void *s, void *e, unsigned f) { return 0; }
int cuEventCreate(void **e, unsigned f) { static int ev; *e = &ev; return 0; }
int cuEventDestroy_v2(void *e) { return 0; }
int cuEventRecord(void *e, void *s) { return 0; }
int cuEventSynchronize(void *e) { return 0; }
int cuMemAlloc_v2(ptr_t *p, size_t n) { *p = (ptr_t)malloc(n ? n : 1); LOG("alloc %zu\n", n); return 0; }
int cuMemAllocManaged(ptr_t *p, size_t n, unsigned f) { return cuMemAlloc_v2(p, n); }
int cuMemFree_v2(ptr_t p) { free((void *)p); LOG("free\n"); return 0; }
int cuMemcpy(ptr_t d, ptr_t s, size_t n) { memcpy((void *)d, (void *)s, n); LOG("copy %zu\n", n); return 0; }
int cuMemcpyAsync(ptr_t d, ptr_t s, size_t n, void *st) { return cuMemcpy(d, s, n); }
int cuMemsetD16Async(ptr_t d, unsigned short v, size_t n, void *s) { return 0; }
int cuMemsetD32Async(ptr_t d, unsigned v, size_t n, void *s) { return 0; }
int cuMemHostRegister_v2(void *p, size_t n, unsigned f) { return 0; }
int cuMemHostUnregister(void *p) { return 0; }
int cuModuleLoadData(void **m, const void *img) { static int mod; *m = &mod;
  LOG("module entry=%d target90=%d\n", strstr(img, ".entry kernel0") != 0, strstr(img, ".target sm_90") != 0); return 0; }
int cuModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void **v) { return cuModuleLoadData(m, img); }
int cuModuleUnload(void *m) { LOG("unload\n"); return 0; }
int cuModuleGetFunction(void **f, void *m, const char *name) { static int fn; *f = &fn; LOG("function %s\n", name); return 0; }
int cuFuncSetAttribute(void *f, int a, int v) { return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shm, void *s, void **params, void **extra) {
  LOG("launch grid=%u,%u,%u block=%u,%u,%u bound=%lld\n", gx, gy, gz, bx, by, bz, *(long long *)params[0]);
  return 0; }
int cuLaunchKernelEx(const void *c, void *f, void **p, void **e) { LOG("launch-ex\n"); return 0; }
int cuTensorMapEncodeTiled(void) { return 0; }
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the stub driver")
@pytest.mark.skipif(HAS_DEVICE, reason="this machine has a real driver")
def test_host_plumbing_against_a_recording_driver(tmp_path):
    """The generated host code through libmlir_cuda_runtime.so against a stub driver that
    records its calls (device memory is host memory; the launch runs nothing): the PTX
    loaded, one allocation and one copy in per buffer, a grid sized to the rows, the
    result copied back, everything freed."""
    src, lib, log = tmp_path / "stub.c", tmp_path / "libcuda.so.1", tmp_path / "calls.log"
    src.write_text(RECORDING_DRIVER)
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", f'-DSTUB_LOG="{log}"', "-o", str(lib),
                    str(src)], check=True)
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        A = sp.random_array((1000, 300), density=0.01, format="csr", random_state=1)
        x = np.ones(300)
        k = sc.compile("ij,j->i", None, "dense", device="cuda")
        k(A.tocsc(), x)                     # a CSC operand runs row-wise on the GPU
        f = k.last_formats()[0]
        print("csc ran as", f.levels, f.order)
        open(LOG, "a").write("---\\n")
        y = sc.einsum("ij,j->i", A, x, device="cuda")
        print("ran", y.shape, A.nnz)
    """).replace("LOG", repr(str(log)))
    env = dict(os.environ, SPARSECC_CUDA_DRIVER=str(lib), LD_LIBRARY_PATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "csc ran as ('dense', 'compressed') (0, 1)" in r.stdout
    nnz = int(r.stdout.split()[-1])
    everything = log.read_text().splitlines()
    assert "module entry=1 target90=1" in everything and "function kernel0" in everything
    calls = everything[everything.index("---") + 1:]       # the second call (SciPy's CSR)
    allocs = sorted(int(c.split()[1]) for c in calls if c.startswith("alloc"))
    # y and x (f64), indptr and indices (i32), values (f64)
    assert allocs == sorted([1000 * 8, 300 * 8, 1001 * 4, nnz * 4, nnz * 8])
    launch = calls.index(next(c for c in calls if c.startswith("launch")))
    copies_in = [int(c.split()[1]) for c in calls[:launch] if c.startswith("copy")]
    copies_out = [int(c.split()[1]) for c in calls[launch:] if c.startswith("copy")]
    assert sorted(copies_in) == allocs and copies_out == [1000 * 8]
    assert calls[launch] == "launch grid=8,1,1 block=128,1,1 bound=1000"      # ceil(1000 / 128)
    assert sum(c == "free" for c in calls) == len(allocs)


# ------------------------------------------------------------------ on a device (else skipped)
gpu = pytest.mark.skipif(not HAS_DEVICE, reason=f"needs an NVIDIA GPU: {targets.cuda_probe()[0]}")


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("shape", [(37, 29), (1, 1), (300, 7)])
def test_on_the_device_against_numpy(name, fmt, dtype, shape):
    ops = _operands(name, fmt, dtype, m=shape[0], n=shape[1])
    k, expr = _kernel(name, fmt)
    got = k(*ops)
    want = np.einsum(expr, *[_dense(x).astype(np.float64) for x in ops])
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-5)


@gpu
def test_on_the_device_empty_and_single_entry():
    k, _ = _kernel("spmv", "csr")
    empty = sp.csr_array((5, 4))
    np.testing.assert_array_equal(k(empty, np.ones(4)), np.zeros(5))
    one = sp.csr_array(([2.5], ([3], [1])), shape=(5, 4))
    np.testing.assert_array_equal(k(one, np.arange(4.0)), [0, 0, 0, 2.5, 0])
    zero_rows = sp.csr_array((0, 4))
    assert k(zero_rows, np.ones(4)).shape == (0,)


@gpu
def test_on_the_device_operands_untouched_and_large():
    rng = np.random.default_rng(3)
    A = sp.random_array((200_000, 5_000), density=1e-3, format="csr", random_state=rng)
    x = rng.standard_normal(5_000)
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy(), x.copy())
    y = sc.einsum("ij,j->i", A, x, device="cuda")
    np.testing.assert_allclose(y, A @ x, rtol=1e-12, atol=1e-12)
    for a, b in zip(before, (A.data, A.indices, A.indptr, x)):
        np.testing.assert_array_equal(a, b)


def test_a_cpu_kernel_with_the_same_bytes_does_not_stand_in():
    """A cuda kernel without GPU code can have a CPU kernel's very bytes: the library loaded
    for the CPU must not be handed out for it (found in suite order: a CPU 'ij->' first)."""
    code = ("import scipy.sparse as sp, sparsecc as sc\n"
            "A = sp.random_array((6, 5), density=0.5, format='csr', random_state=0)\n"
            "sc.einsum('ij->', A)\n"
            "k = sc.compile('ij->', 'csr', device='cuda')\n"
            "try:\n    k(A)\nexcept sc.DeviceError:\n    print('refused')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "refused"


@pytest.mark.parametrize("name", ["spmm", "sddmm"])
def test_the_grid_follows_the_grid_stride_loop_bound(name):
    """The grid-stride loop's bound is not always the launch's first argument: SpMM's kernel
    takes k (X's columns) first and the rows second.  Sizing by the first made SpMM's grid
    ceil(k / 128) blocks (one block for k = 64: one SM)."""
    k, _ = _kernel(name, "csr")
    gpu = k.ir("gpu")
    kernel = gpu[gpu.index("llvm.func @kernel0"):gpu.index("func.func @kernel(")]
    bound = int(re.search(r"\^bb1\(%\d+: i64\):.*\n\s+%\d+ = llvm.icmp \"slt\" %\d+, %arg(\d+)", kernel).group(1))
    host = gpu[gpu.index("func.func @kernel("):]
    args = re.search(r"gpu.launch_func .* args\((.*)\)", host).group(1)
    operands = [a.split(" : ")[0].strip() for a in args.split(", %")]
    operands = [o if o.startswith("%") else "%" + o for o in operands]
    assert bound < 2 and operands[bound] != operands[0] or name == "sddmm"    # (SpMM: the rows are second)
    div = re.search(r"arith.ceildivui (%\w+), %c128", host).group(1)
    assert div == operands[bound]
