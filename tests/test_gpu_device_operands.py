"""Device-resident operands with device="cuda" (issue 17, docs/gpu.md "Device arrays").

Without a GPU: the lowered host code (no gpu.alloc/memcpy/dealloc for device buffers), and
the host plumbing against a stub libcuda.so.1 built here that records its calls (its
"device" pointers are host memory, its launch runs nothing): no cuMemAlloc/cuMemcpy for
device operands, the launch gets the user's pointers, results come back as the operand's
library's arrays (CuPy and torch stand-ins in the subprocess), mixed host and device
operands, the checks (strided, wrong device, bad indices) before any launch."""

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
from sparsecc.runtime import targets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_DEVICE = targets.cuda_probe()[0] == ""


def _host(bufs):
    k = sc.compile("ij,j->i", "csr", "dense", device="cuda", options=sc.Options(device="cuda", device_buffers=bufs))
    gpu = k.ir("gpu")
    return k, gpu[gpu.index("func.func @kernel("):]


# ------------------------------------------------------------------ the rewrite (lowered IR)
def test_all_device_buffers_no_copies_in_the_host_code():
    """SpMV's memref arguments: A's pos, crd, values (0-2), x (3), y (4): all device
    pointers -> no device allocation, no copy, no free; the launch takes the arguments."""
    k, host = _host((0, 1, 2, 3, 4))
    assert "gpu.alloc" not in host and "gpu.memcpy" not in host and "gpu.dealloc" not in host
    launch = re.search(r"gpu.launch_func .*args\((.*)\)", host).group(1)
    for arg in ("%arg7", "%arg6", "%subview_0", "%subview_1", "%subview"):   # y, x, A's pos/crd/values
        assert f"{arg} : memref" in launch
    assert "gpu.wait async" not in host        # no stream created for nothing
    llvm = k.ir("llvm")
    called = set(re.findall(r"call [^@]*@(mgpu\w+)", llvm))
    assert "mgpuLaunchKernel" in called and "mgpuMemAlloc" not in called and "mgpuMemcpy" not in called
    assert ".visible .entry kernel0(" in k.ir("ptx")


def test_mixed_host_and_device_buffers():
    """Only x (3) on the device: the others keep their allocation and copies, x has none."""
    k, host = _host((3,))
    assert "%arg6" in re.search(r"gpu.launch_func .*args\((.*)\)", host).group(1)
    assert not re.search(r"gpu.memcpy .*%arg6", host)
    assert len(re.findall(r"gpu.alloc", host)) == 4 and len(re.findall(r"gpu.dealloc", host)) == 4
    assert re.search(r"gpu.memcpy async \[%\w+\] %arg7, %memref", host)       # y still copied back


def test_device_buffers_are_part_of_the_key():
    a = targets.resolve(sc.Options(device="cuda", gpu_arch="sm_90"))
    b = targets.resolve(sc.Options(device="cuda", gpu_arch="sm_90", device_buffers=(3, 4)))
    assert a.key() != b.key() and "device_buffers=3,4" in b.key()
    assert "device_buffers" not in sc.Options(device="cuda", device_buffers=(4, 3)).key()
    assert sc.Options(device="cuda", device_buffers=[4, 3, 3]).device_buffers == (3, 4)
    for bad in ((-1,), ("a",), 3):
        with pytest.raises(sc.SparseccError, match="device_buffers"):
            sc.Options(device="cuda", device_buffers=bad)
    with pytest.raises(sc.SparseccError, match="device_buffers"):
        sc.Options(device_buffers=(1,))


# ------------------------------------------------------------------ the stub driver
RECORDING = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef unsigned long long ptr_t;
static FILE *lg(void) { static FILE *f; if (!f) f = fopen(STUB_LOG, "a"); return f; }
#define LOG(...) (fprintf(lg(), __VA_ARGS__), fflush(lg()))
int cuInit(unsigned f) { return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int k) { *d = k; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) { *v = attr == 75 ? 9 : 0; return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { static int ctx; *c = &ctx; return 0; }
int cuCtxPushCurrent_v2(void *c) { return 0; }
int cuCtxPopCurrent_v2(void **c) { return 0; }
int cuCtxSynchronize(void) { LOG("ctx-sync\n"); return 0; }
int cuGetErrorName(int e, const char **s) { *s = "STUB"; return 0; }
int cuStreamCreate(void **s, unsigned f) { static int st; *s = &st; return 0; }
int cuStreamDestroy_v2(void *s) { return 0; }
int cuStreamSynchronize(void *s) { if ((ptr_t)s < 16) LOG("stream-sync %llu\n", (ptr_t)s); return 0; }
int cuStreamWaitEvent(void *s, void *e, unsigned f) { return 0; }
int cuEventCreate(void **e, unsigned f) { static int ev; *e = &ev; return 0; }
int cuEventDestroy_v2(void *e) { return 0; }
int cuEventRecord(void *e, void *s) { return 0; }
int cuEventSynchronize(void *e) { return 0; }
int cuMemAlloc_v2(ptr_t *p, size_t n) { *p = (ptr_t)malloc(n ? n : 1); LOG("alloc %zu %llu\n", n, *p); return 0; }
int cuMemAllocManaged(ptr_t *p, size_t n, unsigned f) { return cuMemAlloc_v2(p, n); }
int cuMemFree_v2(ptr_t p) { free((void *)p); LOG("free %llu\n", p); return 0; }
int cuMemcpy(ptr_t d, ptr_t s, size_t n) { memcpy((void *)d, (void *)s, n); LOG("copy %zu\n", n); return 0; }
int cuMemcpyAsync(ptr_t d, ptr_t s, size_t n, void *st) { return cuMemcpy(d, s, n); }
int cuMemcpyDtoH_v2(void *d, ptr_t s, size_t n) { memcpy(d, (void *)s, n); LOG("to-host %zu\n", n); return 0; }
int cuMemsetD8_v2(ptr_t d, unsigned char v, size_t n) { memset((void *)d, v, n); LOG("memset %zu\n", n); return 0; }
int cuMemsetD16Async(ptr_t d, unsigned short v, size_t n, void *s) { return 0; }
int cuMemsetD32Async(ptr_t d, unsigned v, size_t n, void *s) { return 0; }
int cuMemHostRegister_v2(void *p, size_t n, unsigned f) { return 0; }
int cuMemHostUnregister(void *p) { return 0; }
int cuPointerGetAttribute(void *out, int attr, ptr_t p) { *(int *)out = ORDINAL; return 0; }
int cuModuleLoadData(void **m, const void *img) { static int mod; *m = &mod; return 0; }
int cuModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void **v) { return cuModuleLoadData(m, img); }
int cuModuleUnload(void *m) { return 0; }
int cuModuleGetFunction(void **f, void *m, const char *name) { static int fn; *f = &fn; return 0; }
int cuFuncSetAttribute(void *f, int a, int v) { return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shm, void *s, void **params, void **extra) {
  /* the bound, then each memref as (allocated, aligned, offset, size, stride): log the aligned pointers */
  LOG("launch grid=%u bound=%lld ptrs", gx, *(long long *)params[0]);
  for (int k = 0; k < NMEMREFS; k++) LOG(" %llu", *(ptr_t *)params[1 + 5 * k + 1]);
  LOG(" params");                   /* every parameter as 64 bits (all are: index, pointers, i64) */
  for (int k = 0; k < NPARAMS; k++) LOG(" %llu", *(ptr_t *)params[k]);
  LOG("\n");
  return 0; }
int cuLaunchKernelEx(const void *c, void *f, void **p, void **e) { return 0; }
int cuTensorMapEncodeTiled(void) { return 0; }
"""

#: the operands of the subprocess: "device" arrays over host memory, CuPy and torch stand-ins
PRELUDE = textwrap.dedent("""
    import sys, types, numpy as np, scipy.sparse as sp, sparsecc as sc

    class Dev:
        '''anything with __cuda_array_interface__ (v3): a numpy array's memory plays the device's'''
        def __init__(self, a, strides=None, stream=None):
            self.a = a
            self.cai = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                        "strides": strides, "version": 3, "stream": stream}
        @property
        def __cuda_array_interface__(self):
            return self.cai

    # CuPy: an ndarray type from a module named cupy, cupy.zeros, cupy.cuda.Device;
    # cupyx.scipy.sparse.csr_matrix with data/indices/indptr
    cupy = types.ModuleType("cupy")
    class ndarray(Dev):
        pass
    ndarray.__module__ = "cupy"
    cupy.ndarray = ndarray
    cupy.asarray = lambda a: ndarray(np.ascontiguousarray(a))
    cupy.zeros = lambda shape, dtype: ndarray(np.zeros(shape, dtype))
    class _Device:
        def __init__(self, k): pass
        def __enter__(self): return self
        def __exit__(self, *a): return False
    cupy.cuda = types.SimpleNamespace(Device=_Device)
    sys.modules["cupy"] = cupy
    class csr_matrix:
        format = "csr"
        def __init__(self, A):
            self.shape, self.data = A.shape, cupy.asarray(A.data)
            self.indices, self.indptr = cupy.asarray(A.indices), cupy.asarray(A.indptr)
    csr_matrix.__module__ = "cupyx.scipy.sparse._csr"
    class csc_matrix(csr_matrix):
        format = "csc"
    csc_matrix.__module__ = "cupyx.scipy.sparse._csc"

    def log():
        return [l for l in open(LOG).read().splitlines()]
    def mark():
        open(LOG, "a").write("---\\n")
""")


def _stub(tmp_path, ordinal=0, nmemrefs=5, nparams=None):
    src, lib, log = tmp_path / "stub.c", tmp_path / "libcuda.so.1", tmp_path / "calls.log"
    src.write_text(RECORDING)
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", f'-DSTUB_LOG="{log}"',
                    f"-DORDINAL={ordinal}", f"-DNMEMREFS={nmemrefs}", f"-DNPARAMS={nparams or 1 + 5 * nmemrefs}",
                    "-o", str(lib), str(src)], check=True)
    return lib, log


def _run(tmp_path, body, **stub):
    lib, log = _stub(tmp_path, **stub)
    code = PRELUDE.replace("LOG", repr(str(log))) + textwrap.dedent(body).replace("LOG", repr(str(log)))
    env = dict(os.environ, SPARSECC_CUDA_DRIVER=str(lib), LD_LIBRARY_PATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return r.stdout


needs_stub = [pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the stub driver"),
              pytest.mark.skipif(HAS_DEVICE, reason="this machine has a real driver")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("idx", ["int32", "int64"])
def test_device_operands_no_copies_the_launch_gets_the_users_pointers(tmp_path, dtype, idx):
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    out = _run(tmp_path, f"""
        A = sp.random_array((300, 40), density=0.05, format="csr", dtype="{dtype}", random_state=1)
        A.indices, A.indptr = A.indices.astype("{idx}"), A.indptr.astype("{idx}")
        x = np.ones(40, "{dtype}")
        dA, dx = csr_matrix(A), cupy.asarray(x)
        k = sc.compile("ij,j->i", "csr", "dense", device="cuda")
        mark()
        y = k(dA, dx)
        print("type", type(y).__module__, type(y).__name__, y.a.shape, y.a.dtype, float(abs(y.a).sum()))
        # the launch's memref arguments in the kernel's order: y, A's pos, crd, values, x
        ptrs = [y.a.ctypes.data, dA.indptr.a.ctypes.data, dA.indices.a.ctypes.data, dA.data.a.ctypes.data,
                dx.a.ctypes.data]
        calls = log()[log().index("---") + 1:]
        print("calls", calls)
        print("want", " ".join(map(str, ptrs)))
    """)
    calls = eval(out.split("calls ", 1)[1].splitlines()[0])
    want = out.split("want ", 1)[1].splitlines()[0]
    assert "type cupy ndarray (300,) " + dtype + " 0.0" in out        # CuPy in -> CuPy out (zeroed)
    launch = [c for c in calls if c.startswith("launch")]
    assert [l.split(" params")[0] for l in launch] == [f"launch grid=3 bound=300 ptrs {want}"]   # the user's pointers
    assert not [c for c in calls if c.startswith(("alloc", "copy", "free"))]   # no device copies at all
    assert "to-host" in " ".join(calls)                               # check=True: indices read on the host


def test_mixed_host_and_device_operands_and_a_generic_result(tmp_path):
    """A on the host (SciPy, copied in), x on the device (a bare __cuda_array_interface__
    object): x's pointer reaches the launch, A's buffers are copied; the result is a
    sparsecc DeviceArray (driver memory, zeroed, freed when collected)."""
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    out = _run(tmp_path, """
        A = sp.random_array((300, 40), density=0.05, format="csr", random_state=1)
        x = np.ones(40)
        dx = Dev(x)
        mark()
        y = sc.einsum("ij,j->i", A, dx, device="cuda")
        print("result", type(y).__name__, y.shape, y.dtype, y.get().shape, float(abs(y.get()).sum()))
        print("xptr", dx.a.ctypes.data, "yptr", y.ptr, "nnz", A.nnz)
        calls = log()[log().index("---") + 1:]
        print("calls", calls)
        del y
        import gc; gc.collect()
        print("after", log()[-1])
        y2 = sc.evaluate("y[i] = A[i,j] * x[j]", A=A, x=dx, device="cuda")     # index notation too
        print("evaluate", type(y2).__name__, y2.shape)
    """)
    calls = eval(out.split("calls ", 1)[1].splitlines()[0])
    xptr, yptr, nnz = (int(v) for v in re.search(r"xptr (\d+) yptr (\d+) nnz (\d+)", out).groups())
    assert "result DeviceArray (300,) float64 (300,) 0.0" in out
    allocs = [c for c in calls if c.startswith("alloc")]
    # the result (cuMemAlloc by sparsecc), then A's indptr, indices, values (the host code's)
    assert [int(a.split()[1]) for a in allocs] == [300 * 8, 301 * 4, nnz * 4, nnz * 8]
    assert sorted(int(c.split()[1]) for c in calls if c.startswith("copy")) == sorted([301 * 4, nnz * 4, nnz * 8])
    launch = next(c for c in calls if c.startswith("launch")).split(" params")[0].split()
    ptrs = [int(p) for p in launch[launch.index("ptrs") + 1:]]
    assert ptrs[0] == yptr and ptrs[4] == xptr                       # y (arg 1) and x (last): the user's
    assert not {ptrs[1], ptrs[2], ptrs[3]} & {xptr, yptr}             # A's: device copies
    assert f"after free {yptr}" in out                                 # the DeviceArray freed by the driver
    assert "evaluate DeviceArray (300,)" in out


def test_torch_cuda_tensors_give_torch_results(tmp_path):
    """A torch CUDA tensor stand-in (a class from a module named torch with a CUDA device):
    the result is made by torch.zeros on the operand's device."""
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    out = _run(tmp_path, """
        torch = types.ModuleType("torch")
        class Tensor(Dev):
            layout = "torch.strided"
            device = types.SimpleNamespace(type="cuda", index=0)
        Tensor.__module__ = "torch"
        made = []
        def zeros(shape, dtype, device):
            made.append((tuple(shape), dtype, device))
            return Tensor(np.zeros(shape, dtype))
        torch.zeros, torch.float64, torch.float32 = zeros, "float64", "float32"
        sys.modules["torch"] = torch
        A = sp.random_array((30, 20), density=0.2, format="csr", random_state=1)
        y = sc.einsum("ij,jk->ik", A, Tensor(np.ones((20, 3))), device="cuda")
        print(type(y).__module__, type(y).__name__, made)
        y = sc.einsum("ij,jk->ik", csr_matrix(A), Tensor(np.ones((20, 3))), device="cuda")
        print("first device operand's library:", type(y).__module__)
    """, nmemrefs=5)
    assert "torch Tensor [((30, 3), 'float64', namespace(type='cuda', index=0))]" in out
    assert "first device operand's library: cupy" in out


def test_device_operand_errors_before_any_launch(tmp_path):
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    out = _run(tmp_path, """
        A = sp.random_array((30, 20), density=0.2, format="csr", random_state=1)
        x = np.ones(20)
        def attempt(label, *ops, **kw):
            try:
                sc.einsum("ij,j->i", *ops, device="cuda", **kw)
                print(label, "ran")
            except sc.SparseccError as e:
                print(label, type(e).__name__, e)
        x2 = np.ones((20, 2))
        attempt("strided", A, Dev(x2[:, 0], strides=(16,)))
        bad = A.copy(); bad.indices = bad.indices.copy(); bad.indices[3] = 99
        attempt("out-of-range", csr_matrix(bad), Dev(x))
        uns = A.copy(); uns.indices = uns.indices.copy(); r = uns.indptr
        row = next(i for i in range(30) if r[i + 1] - r[i] >= 2)
        uns.indices[r[row]:r[row + 1]] = uns.indices[r[row]:r[row + 1]][::-1].copy()
        attempt("unsorted", csr_matrix(uns), Dev(x))
        attempt("csc", csc_matrix(A.tocsc()), Dev(x))
        attempt("shape", csr_matrix(A), Dev(np.ones(21)))
        attempt("no-check", csr_matrix(bad), Dev(x), check=False)
        print("launches", sum(l.startswith("launch") for l in log()))
    """)
    assert "strided DeviceError operand 1 is a strided view on the device" in out
    assert "out-of-range OperandError" in out and "99" in out
    assert "unsorted OperandError" in out and "sorted indices without duplicates" in out
    assert "csc DeviceError operand 0 is stored on the device as CSC, which gives this kernel no GPU loop" in out
    assert "shape ShapeError" in out
    assert "no-check ran" in out                      # check=False: nothing read; the user's promise
    assert out.strip().endswith("launches 1")


def test_another_device_is_refused(tmp_path):
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    out = _run(tmp_path, """
        try:
            sc.einsum("ij,j->i", sp.random_array((5, 4), density=0.5, format="csr", random_state=1),
                      Dev(np.ones(4)), device="cuda")
        except sc.DeviceError as e:
            print("refused", e)
    """, ordinal=1)
    assert "refused operand 1 is on CUDA device 1; sparsecc runs kernels on device 0 only" in out


def test_dlpack_only_operands(tmp_path):
    """An object with only __dlpack__/__dlpack_device__ (kDLCUDA): its DLTensor read with
    ctypes (a capsule made here over a numpy array's memory)."""
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    out = _run(tmp_path, """
        import ctypes
        from sparsecc.runtime.device import _DLTensor
        x = np.arange(4.0)
        shape = (ctypes.c_int64 * 1)(4)
        t = _DLTensor()
        t.data, t.ndim, t.shape = x.ctypes.data, 1, shape
        t.device.device_type, t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 2, 64, 1
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        class DL:
            def __dlpack_device__(self): return (2, 0)
            def __dlpack__(self, stream=None): return new(ctypes.addressof(t), b"dltensor", None)
        mark()
        y = sc.einsum("ij,j->i", sp.random_array((5, 4), density=0.5, format="csr", random_state=1), DL(),
                      device="cuda")
        print("result", type(y).__name__, "xptr", x.ctypes.data)
        print("launch", [l for l in log() if l.startswith("launch")])
    """)
    xptr = re.search(r"xptr (\d+)", out).group(1)
    assert "result DeviceArray" in out and f" {xptr} " in out.split("launch ", 1)[1].split(" params")[0] + " "


# ------------------------------------------------------------------ on a device (else skipped)
gpu = pytest.mark.skipif(not HAS_DEVICE, reason=f"needs an NVIDIA GPU: {targets.cuda_probe()[0]}")


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cupy_operands_on_the_device(dtype):
    cupy = pytest.importorskip("cupy")
    cpx = pytest.importorskip("cupyx.scipy.sparse")
    rng = np.random.default_rng(5)
    for shape in [(37, 29), (1, 1), (2000, 300)]:
        A = sp.random_array(shape, density=0.1, format="csr", dtype=dtype, random_state=rng)
        x = rng.standard_normal(shape[1]).astype(dtype)
        X = rng.standard_normal((shape[1], 64)).astype(dtype)
        dA = cpx.csr_matrix(sp.csr_matrix(A))
        y = sc.einsum("ij,j->i", dA, cupy.asarray(x), device="cuda")
        assert isinstance(y, cupy.ndarray)
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(cupy.asnumpy(y), np.einsum("ij,j->i", A.toarray(), x), **tol)
        Y = sc.einsum("ij,jk->ik", dA, cupy.asarray(X), device="cuda")
        np.testing.assert_allclose(cupy.asnumpy(Y), A.toarray() @ X, **tol)
        # mixed: the matrix on the host, x on the device
        y2 = sc.einsum("ij,j->i", A, cupy.asarray(x), device="cuda")
        np.testing.assert_allclose(cupy.asnumpy(y2), A @ x, **tol)
        cs = sc.einsum("ij->j", cpx.csc_matrix(sp.csc_matrix(A)), device="cuda")      # CSC column sums
        np.testing.assert_allclose(cupy.asnumpy(cs), A.toarray().sum(0), **tol)


@gpu
def test_torch_cuda_tensors_on_the_device():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    A = sp.random_array((300, 40), density=0.1, format="csr", random_state=2)
    X = torch.randn(40, 8, dtype=torch.float64, device="cuda")
    Y = sc.einsum("ij,jk->ik", A, X, device="cuda")
    assert isinstance(Y, torch.Tensor) and Y.device.type == "cuda"
    np.testing.assert_allclose(Y.cpu().numpy(), A @ X.cpu().numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(sc.DeviceError, match="C-contiguous"):
        sc.einsum("ij,jk->ik", A, X.T.contiguous().T, device="cuda")     # a transposed view


# ------------------------------------------------------------------ python -m sparsecc gpucheck
@pytest.mark.skipif(HAS_DEVICE, reason="this machine has a CUDA device")
def test_gpucheck_without_a_device_prints_the_reason_and_fails():
    r = subprocess.run([sys.executable, "-m", "sparsecc", "gpucheck", "--scale", "0.01"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, SPARSECC_CUDA_DRIVER="libcuda-absent.so.1"))
    assert r.returncode == 1, r.stderr[-2000:]
    assert "driver probe: no CUDA driver/device: the NVIDIA driver (libcuda-absent.so.1) cannot be loaded" in r.stdout
    assert "nothing ran" in r.stdout and not r.stderr.strip()


def test_gpucheck_against_the_stub_driver_reports_and_never_crashes(tmp_path):
    """The stub's launch runs nothing: every kernel's result is wrong, each is reported,
    the command exits 1 (not a signal)."""
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    lib, _ = _stub(tmp_path, nmemrefs=1)
    r = subprocess.run([sys.executable, "-m", "sparsecc", "gpucheck", "--scale", "0.0001"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, SPARSECC_CUDA_DRIVER=str(lib), LD_LIBRARY_PATH=str(tmp_path)))
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert "driver probe: ok, sm_90" in r.stdout
    for what in ("SpMV float32", "SpMM k=64 float64", "SDDMM to dense float32", "MTTKRP float64"):
        assert what in r.stdout, r.stdout
    assert "WRONG" in r.stdout and r.stdout.strip().endswith("SOME RESULTS ARE WRONG OR FAILED")


# ------------------------------------------------------------------ sparsecc.torch on CUDA tensors
FAKE_CUDA_TENSOR = """
    import torch, sparsecc.torch as sct
    from sparsecc.runtime import device as dev

    class FakeCuda(torch.Tensor):
        '''a CPU tensor that says it is on cuda:0 (this torch has no CUDA): its memory plays
        the device's, its __cuda_array_interface__ points at it'''
        __torch_function__ = torch._C._disabled_torch_function_impl
        @property
        def device(self):
            return torch.device("cuda", 0)
        @property
        def __cuda_array_interface__(self):
            a = self.detach().numpy()
            return {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False), "strides": None,
                    "version": 3, "stream": None}
        def detach(self):
            return torch.Tensor._make_subclass(FakeCuda, torch.Tensor.detach(self))

    def fake(t):
        return torch.Tensor._make_subclass(FakeCuda, t)
    made = []
    def new_result(lib, shape, dtype):   # torch.zeros(device="cuda") needs a CUDA build: made here
        made.append(lib[0])
        out = fake(torch.zeros(shape, dtype=getattr(torch, np.dtype(dtype).name)))
        return out, dev._from_cai(out, "the result")
    dev.new_result = new_result
"""


def test_sparsecc_torch_routes_cuda_tensors_to_the_device(tmp_path):
    """sct.einsum with a CUDA tensor compiles with device="cuda" and hands the tensor to the
    device call path (its pointer reaches the launch); the result is the torch tensor made on
    the device; gradients through CUDA tensors are refused."""
    for m in needs_stub:
        if m.args[0]:
            pytest.skip(m.kwargs["reason"])
    out = _run(tmp_path, textwrap.dedent(FAKE_CUDA_TENSOR) + textwrap.dedent("""
        A = torch.tensor(sp.random_array((1000, 20), density=0.2, format="csr", random_state=1).toarray()).to_sparse_csr()
        X = fake(torch.ones(20, 3, dtype=torch.float64))
        mark()
        k = sct.compile("ij,jk->ik")
        Y = k(A, X)
        print("result", type(Y).__name__, tuple(Y.shape), made, k.last.options.device)
        xptr = X.detach().numpy().ctypes.data
        launch = [l for l in log() if l.startswith("launch")]
        print("x in launch", len(launch) == 1 and str(xptr) in launch[0].split(" params ")[1].split(), launch[0].split()[1])
        try:
            sct.einsum("ij,jk->ik", A, fake(torch.ones(20, 3, dtype=torch.float64)).requires_grad_())
        except sc.SparseccError as e:
            print("grad:", e)
    """), nparams=31)
    assert "result FakeCuda (1000, 3) ['torch'] cuda" in out
    assert "x in launch True grid=8" in out          # ceil(1000 rows / 128): not k's ceil(3 / 128)
    assert "grad: gradients through CUDA tensors are not supported yet" in out


@pytest.mark.skipif(HAS_DEVICE, reason="this machine has a CUDA device")
def test_sparsecc_torch_keeps_refusing_cuda_tensors_without_a_device():
    torch = pytest.importorskip("torch")
    import types
    import sparsecc.torch as sct
    t = types.SimpleNamespace(device=torch.device("cuda", 0), dtype=torch.float64, layout=torch.strided)
    with pytest.raises(sc.OperandError, match=r"CPU tensors only.*\(no CUDA driver/device"):
        sct._check_tensor(t, "operand 1")


@pytest.mark.parametrize("expr, fmts, out", [
    ("ik,kj->ij", ("csr", "dense"), None),                                           # SpMM
    ("ij,ik,kj->ij", ("csr", "dense", "dense"), "dense"),                            # SDDMM to dense
    ("ij->j", ("csc",), None),                                                       # column sums
    ("ijk,jr,kr->ir", (("dense", "compressed", "compressed"), "dense", "dense"), None),   # MTTKRP
])
def test_every_kernel_class_takes_all_its_buffers_on_the_device(expr, fmts, out):
    """All memref arguments device pointers: no device allocation, copy or free remains in any
    kernel class's host code, and the PTX is the same as with host operands (the GPU kernel
    does not change, only what the host does around it)."""
    fmts = [sc.Format(f) if isinstance(f, tuple) else f for f in fmts]
    host_k = sc.compile(expr, *fmts, out_format=out, device="cuda")
    n = len(re.findall(r"%arg\d+: memref<", host_k.ir("gpu").split("func.func @kernel(")[1].split("{")[0]))
    k = sc.compile(expr, *fmts, out_format=out, device="cuda",
                   options=sc.Options(device="cuda", device_buffers=tuple(range(n))))
    host = k.ir("gpu")[k.ir("gpu").index("func.func @kernel("):]
    assert "gpu.alloc" not in host and "gpu.memcpy" not in host and "gpu.dealloc" not in host
    assert k.ir("ptx") == host_k.ir("ptx")


def test_cpu_tensors_and_arrays_are_not_device_operands():
    from sparsecc.runtime.device import is_device
    torch = pytest.importorskip("torch")
    assert not any(is_device(x) for x in (np.ones(3), sp.csr_array(np.eye(3)), torch.ones(3),
                                          torch.ones(3).requires_grad_(), torch.eye(3).to_sparse_csr(),
                                          torch.eye(3).to_sparse()))
