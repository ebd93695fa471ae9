"""Kernels on a machine without a C compiler: objects loaded in-process by LLVM's ORC JIT
(runtime/targets.py), the checked-allocation entry as LLVM IR (runtime/_worker.py), `CC`
honoured where a C compiler is used (ahead-of-time libraries), a clear error without one.

Every run without a compiler is a subprocess whose PATH holds no cc/gcc/clang, with CC unset
and its own empty cache folder; results are checked against NumPy/SciPy there."""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import targets
from sparsecc.runtime._worker import OOM_VARIANTS, oom_entry_ir

HAVE_CC = shutil.which("cc") is not None


def no_cc_env(tmp_path, **extra):
    """An environment with no C compiler on PATH, CC unset, and a fresh cache folder."""
    bare = tmp_path / "bin"
    bare.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env.update(PATH=str(bare), SPARSECC_CACHE_DIR=str(tmp_path / "cache"), **extra)
    return env


def run(script, env, timeout=600, args=()):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                       env=env, timeout=timeout)
    assert r.returncode == 0, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


KERNELS = """
import json, sys, warnings
import numpy as np, scipy.sparse as sp, sparsecc as sc
from sparsecc.runtime import cache, targets, threads
import shutil
assert shutil.which("cc") is None and shutil.which("gcc") is None and shutil.which("clang") is None
rng = np.random.default_rng(7)
out = {}
for dtype in (np.float64, np.float32):
    for fmt in ("csr", "coo", "csc"):
        A = sp.random_array((30, 20), density=0.2, format=fmt, rng=rng, dtype=dtype)
        x = rng.random(20).astype(dtype)
        y = sc.einsum("ij,j->i", A, x)                                   # dense result
        assert y.dtype == dtype and np.allclose(y, A.toarray() @ x, rtol=1e-5), (dtype, fmt)
    B = sp.random_array((20, 25), density=0.2, format="csr", rng=rng, dtype=dtype)
    A = sp.random_array((30, 20), density=0.2, format="csr", rng=rng, dtype=dtype)
    C = sc.einsum("ik,kj->ij", A, B, out_format="csr")                   # sparse result
    assert isinstance(C, sp.csr_array) and np.allclose(C.toarray(), A.toarray() @ B.toarray(), rtol=1e-5)
# edge cases: empty and single-entry operands
E = sp.csr_array((4, 3))
assert np.array_equal(sc.einsum("ij,j->i", E, np.ones(3)), np.zeros(4))
S = sp.csr_array((np.array([2.5]), np.array([1]), np.array([0, 0, 1, 1])), shape=(3, 2))
assert np.array_equal(sc.einsum("ik,kj->ij", S, S.T.tocsr(), out_format="csr").toarray(), S.toarray() @ S.toarray().T)
# a parallel kernel on 2 threads: libomp's worker thread appears, the thread count and the
# work threshold are the kernel's globals (found through the JIT) and follow the settings
import ctypes, os
threads.set_min_parallel_work(0)
k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(parallel="auto"))
A = sp.random_array((4000, 300), density=0.02, format="csr", rng=rng)
x = rng.random(300)
sc.set_num_threads(1)
assert np.allclose(k(A, x), A.toarray() @ x)
before = len(os.listdir("/proc/self/task"))
sc.set_num_threads(2)
assert np.allclose(k(A, x), A.toarray() @ x)
assert len(os.listdir("/proc/self/task")) == before + 1
assert "__kmpc_fork_call" in k.ir("llvm")
lib = k._last.lib
assert isinstance(lib, targets.JitLibrary), type(lib)
assert ctypes.c_int32.from_address(lib.address_of("sparsecc_num_threads")).value == 2
assert ctypes.c_int64.from_address(lib.address_of("sparsecc_min_parallel_work")).value == 0
sc.set_num_threads(1)
assert ctypes.c_int32.from_address(lib.address_of("sparsecc_num_threads")).value == 1
target = targets.resolve(sc.Options())
out["linker"] = target.param("linker")
out["libs"] = sorted({type(lib).__name__ for lib in cache._libs.values()})
out["stats"] = [sc.cache_info().misses, sc.cache_info().disk_hits]
print(json.dumps(out))
"""


def test_kernels_run_without_a_c_compiler(tmp_path):
    env = no_cc_env(tmp_path, KMP_BLOCKTIME="0")
    first = json.loads(run(KERNELS, env).stdout.strip().splitlines()[-1])
    assert first["linker"] == "orc" and first["libs"] == ["JitLibrary"]
    assert first["stats"][0] > 0 and first["stats"][1] == 0
    files = os.listdir(tmp_path / "cache")
    assert any(f.endswith(".o") for f in files) and not any(f.endswith(".so") for f in files), files
    # a second process loads the cached objects (verified like libraries), compiling nothing;
    # a CC naming no program is not a C compiler: one warning, then the same path
    env["CC"] = str(tmp_path / "no-such-cc")
    r = run(KERNELS, env)
    second = json.loads(r.stdout.strip().splitlines()[-1])
    assert second["stats"] == [0, first["stats"][0]], (first, second)
    assert "no-such-cc" in r.stderr and "ORC" in r.stderr


OOM = """
import resource, numpy as np, scipy.sparse as sp, sparsecc as sc
outer = sc.compile("ik,kj->ij", "csr", "csr", out_format="csr")
small = sp.csr_array(np.ones((3, 1)))
assert np.allclose(outer(small, small.T.tocsr()).toarray(), np.ones((3, 3)))
with open("/proc/self/status") as f:
    vm = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
X = sp.csr_array(np.ones((20000, 1)))
try:
    outer(X, X.T.tocsr())           # 4e8 stored entries: about 5 GB
    print("no MemoryError")
except MemoryError as err:
    print("outer:", err)
assert np.allclose(outer(small, small.T.tocsr()).toarray(), np.ones((3, 3)))     # still alive
print("OK")
"""


def test_out_of_memory_without_a_c_compiler(tmp_path):
    r = run(OOM, no_cc_env(tmp_path))
    assert "outer: sparsecc: the kernel 'ik,kj->ij' ran out of memory" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("OK")


def test_damaged_object_in_the_cache_is_rebuilt(tmp_path):
    """A cached object with a valid hash that ORC cannot load is discarded and rebuilt."""
    env = no_cc_env(tmp_path)
    script = """
    import numpy as np, scipy.sparse as sp, sparsecc as sc
    A = sp.csr_array(np.eye(3) * 2)
    assert np.allclose(sc.einsum("ij,j->i", A, np.arange(3.0)), 2 * np.arange(3.0))
    print(sc.cache_info())
    """
    run(script, env)
    from sparsecc.runtime import cache
    (obj,) = [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".o"]
    meta = obj.with_suffix(".json")
    data = b"\x7fELF this is not an object file" * 10
    obj.write_bytes(data)
    info = json.loads(meta.read_text())
    import hashlib
    info["sha256"] = hashlib.sha256(data).hexdigest()
    info["checksum"] = cache._checksum(info)
    meta.write_text(json.dumps(info))
    assert "misses=1" in run(script, env).stdout


def _logging_cc(tmp_path, real):
    log = tmp_path / "cc.log"
    script = tmp_path / "my cc"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> '{log}'\nexec {real} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


JIT_SPMV = """
import numpy as np, scipy.sparse as sp, sparsecc as sc
A = sp.random_array((7, 5), density=0.4, format="csr", rng=3)
assert np.allclose(sc.einsum("ij,j->i", A, np.arange(5.0)), A.toarray() @ np.arange(5.0))
print("OK")
"""


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler to wrap")
def test_jit_links_with_CC(tmp_path):
    script, log = _logging_cc(tmp_path, shutil.which("cc"))
    env = no_cc_env(tmp_path, CC=f"'{script}' -Wl,--as-needed")
    env["PATH"] = os.environ["PATH"]
    run(JIT_SPMV, env)
    assert "-shared" in log.read_text() and "--as-needed" in log.read_text()
    assert any(f.endswith(".so") for f in os.listdir(tmp_path / "cache"))


def test_jit_with_a_failing_CC_says_so(tmp_path):
    env = no_cc_env(tmp_path, CC="false")
    env["PATH"] = os.path.dirname(shutil.which("false"))
    r = subprocess.run([sys.executable, "-c", JIT_SPMV], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode != 0 and "set CC to a working C compiler" in r.stderr, r.stderr[-2000:]


# ------------------------------------------------------------------ the checked entry in IR
NESTED = r"""
import ctypes, subprocess, sys, tempfile, os
import llvmlite.binding as llb
from sparsecc.runtime import targets
from sparsecc.runtime._worker import add_oom_entry, imports_of, redirect_allocations
variant, how = sys.argv[1], sys.argv[2]
# body(args): args[0] -> depth; args[1] -> the entry itself (a function pointer), args[2] ->
# an int64 log. depth > 0: call the entry with depth - 1 (a nested entry whose allocation
# fails), log its result, then fail an allocation of its own: the outer entry must return 1
# too, through its own jump buffer (the nested one restored it).
KERNEL = '''
declare ptr @malloc(i64)
declare void @free(ptr)
define hidden void @e__body(ptr %args) {
  %pd = load ptr, ptr %args
  %d = load i64, ptr %pd
  %pf = getelementptr ptr, ptr %args, i64 1
  %f = load ptr, ptr %pf
  %pl = getelementptr ptr, ptr %args, i64 2
  %log = load ptr, ptr %pl
  %nested = icmp sgt i64 %d, 0
  br i1 %nested, label %inner, label %fail
inner:
  %d1 = sub i64 %d, 1
  %a = alloca [3 x ptr]
  %dd = alloca i64
  store i64 %d1, ptr %dd
  store ptr %dd, ptr %a
  %a1 = getelementptr ptr, ptr %a, i64 1
  store ptr %f, ptr %a1
  %a2 = getelementptr ptr, ptr %a, i64 2
  store ptr %log, ptr %a2
  %r = call i32 %f(ptr %a)
  %slot = getelementptr i64, ptr %log, i64 %d1
  %r64 = zext i32 %r to i64
  store i64 %r64, ptr %slot
  br label %fail
fail:
  %p = call ptr @malloc(i64 4611686018427387904)
  call void @free(ptr %p)
  ret void
}
'''
llb.initialize_native_target(); llb.initialize_native_asmprinter()
mod = llb.parse_assembly(KERNEL)
redirect_allocations(mod)
add_oom_entry(mod, "e", variant)
tm = llb.Target.from_default_triple().create_target_machine(reloc="pic", codemodel="default")
obj = tm.emit_object(mod)
if how == "orc":
    lib = targets.orc_load(obj, {"imports": imports_of(mod), "exports": ["e"]})
    addr = lib.address_of("e")
else:
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "e.o"), "wb") as f:
        f.write(obj)
    subprocess.run([how, "-shared", "-o", os.path.join(d, "e.so"), os.path.join(d, "e.o")], check=True)
    addr = ctypes.cast(ctypes.CDLL(os.path.join(d, "e.so")).e, ctypes.c_void_p).value
fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(addr)
log = (ctypes.c_int64 * 4)(-1, -1, -1, -1)
depth = ctypes.c_int64(3)
args = (ctypes.c_void_p * 3)(ctypes.addressof(depth), addr, ctypes.addressof(log))
print(fn(args), list(log))
depth.value = 0
print(fn(args))
"""


@pytest.mark.parametrize("variant,how", [("key", "orc"), ("tls", "cc")])
def test_checked_entry_nested(tmp_path, variant, how):
    """The IR entry keeps OOM_C's semantics: 1 on a failed allocation, and a nested entry
    restores the outer jump buffer (each level returns 1 from its own failure)."""
    if how == "cc" and not HAVE_CC:
        pytest.skip("no C compiler")
    r = run(NESTED, dict(os.environ), args=(variant, how if how == "orc" else shutil.which("cc")))
    assert r.stdout.split("\n")[:2] == ["1 [1, 1, 1, -1]", "1"], r.stdout


def test_entry_variants_differ_only_in_where_the_buffer_is():
    tls, key = (oom_entry_ir("k", v) for v in OOM_VARIANTS)
    assert "thread_local" in tls and "pthread" not in tls
    assert "thread_local" not in key and "@sparsecc_oom_key = external global i32" in key
    assert "returns_twice" in tls and "returns_twice" in key


def test_cache_key_tells_linkers_apart():
    host = targets.resolve(sc.Options())
    assert host.replace(linker="orc").key() != host.replace(linker="cc").key()
    assert host.kind.artifact(host.replace(linker="orc")) == ".o"
    assert host.kind.artifact(host.replace(linker="cc")) == ".so"


# ------------------------------------------------------------------ ahead of time: CC
def test_aot_without_a_c_compiler_names_the_fix(tmp_path, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ziglang" else real(name, *a))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(sc.SparseccError, match=r"needs a C compiler.*sparsecc\[aot\].*CC="):
        sc.aot.build("k", {"spmv": sc.compile("ij,j->i", "csr", "dense")}, str(tmp_path / "out"))
    monkeypatch.setenv("CC", "no-such-compiler -O1")
    with pytest.raises(sc.SparseccError, match="no-such-compiler"):
        sc.aot.build("k", {"spmv": sc.compile("ij,j->i", "csr", "dense")}, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler to wrap")
def test_aot_honours_CC(tmp_path, monkeypatch):
    script, log = _logging_cc(tmp_path, shutil.which("cc"))
    monkeypatch.setenv("CC", f"'{script}' -DSPARSECC_FROM_CC=1")
    out = tmp_path / "lib"
    sc.aot.build("viacc", {"spmv": sc.compile("ij,j->i", "csr", "dense")}, str(out))
    assert "-DSPARSECC_FROM_CC=1" in log.read_text() and "libviacc.so" in log.read_text()
    lib = sc.aot.load(str(out))
    A = sp.random_array((6, 5), density=0.4, format="csr", rng=np.random.default_rng(1))
    x = np.arange(5.0)
    assert np.allclose(lib.spmv(A, x), A.toarray() @ x)


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
def test_aot_example_writes_where_told_and_runs_from_anywhere(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    before = sorted(os.listdir(os.path.join(root, "examples", "aot")))
    out = tmp_path / "named"
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "aot", "build.py"), str(out)],
                       capture_output=True, text=True, cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "C[2,2] = 33" in r.stdout and "-Wl,-rpath,$ORIGIN" in r.stdout
    assert {"libmykernels.so", "mykernels.h", "mykernels.json", "main"} <= set(os.listdir(out))
    assert sorted(os.listdir(os.path.join(root, "examples", "aot"))) == before      # nothing in the source tree
    moved = tmp_path / "elsewhere" / "bin"                 # the folder moved: $ORIGIN moves with it
    shutil.copytree(out, moved)
    shutil.rmtree(out)
    run_ = subprocess.run([str(moved / "main")], capture_output=True, text=True, cwd="/")
    assert run_.returncode == 0 and "spmv: 3 3 9" in run_.stdout, run_.stderr


def test_aot_with_zig_when_there_is_no_cc(tmp_path):
    """The aot extra's Zig C compiler builds a library on a machine without cc (a minute on
    the first run: Zig fills its cache)."""
    import importlib.util
    spec = importlib.util.find_spec("ziglang")
    if spec is None:
        pytest.skip("the aot extra (ziglang) is not installed")
    env = no_cc_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), os.getcwd()) if p)
    script = """
    import sys, numpy as np, scipy.sparse as sp, sparsecc as sc
    sc.aot.build("z", {"spmv": sc.compile("ij,j->i", "csr", "dense")}, sys.argv[1])
    lib = sc.aot.load(sys.argv[1])
    A = sp.random_array((6, 5), density=0.4, format="csr", rng=1)
    assert np.allclose(lib.spmv(A, np.arange(5.0)), A.toarray() @ np.arange(5.0))
    print("OK")
    """
    assert run(script, env, args=(str(tmp_path / "lib"),)).stdout.strip() == "OK"
