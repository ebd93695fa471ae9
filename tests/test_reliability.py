"""Reliability: a damaged disk cache is rebuilt, never loaded; unsafe cache folders are
refused; processes and threads share kernels safely; native code runs without the GIL;
repeated calls do not leak; empty operands, NaN and inf behave as in NumPy/SciPy."""

import gc
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import cache, specialization
from conftest import assert_matches, random_sparse


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache folder and an empty table of loaded kernels: the next call of any
    kernel goes to the disk cache (and compiles, the first time)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(d))
    monkeypatch.setattr(specialization, "_loaded", {})
    monkeypatch.setattr(cache, "_libs", {})
    return d


def forget():
    """Forget the loaded kernels (not the disk cache), as a new process would."""
    specialization._loaded.clear()
    cache._libs.clear()


def stats():
    i = sc.cache_info()
    return i.misses, i.disk_hits


def entries(d):
    """The cache folder's files, less the lock file."""
    return sorted(n for n in os.listdir(d) if n != ".lock")


def assert_one_valid_entry(d, key):
    """``key`` has one valid pair of files, and no temporary files are left."""
    assert [n for n in entries(d) if n.startswith((key, "."))] == [f"{key}.json", f"{key}.so"]
    info = json.loads((d / f"{key}.json").read_text())
    assert info["key"] == key
    assert hashlib.sha256((d / f"{key}.so").read_bytes()).hexdigest() == info["sha256"]
    assert cache.lookup(key) is not None


# ------------------------------------------------------------------ damaged entries
A = sp.csr_array(np.array([[1.0, 0, 2, 0], [0, 3, 0, 0], [4, 0, 5, 6], [0, 7, 0, 8]]))
X = np.array([1.0, 2, 3, 4])


def spmv_csr():
    return sc.einsum("ij,j->i", A, X, formats=("csr", "dense"))


def spmv_csc():
    return sc.einsum("ij,j->i", A, X, formats=("csc", "dense"))


def _truncate(so, meta, other):
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])


def _empty_so(so, meta, other):
    so.write_bytes(b"")


def _flip_bytes(so, meta, other):
    b = bytearray(so.read_bytes())
    for k in range(len(b) // 3, len(b) // 3 + 64):
        b[k] ^= 0xFF
    so.write_bytes(bytes(b))


def _foreign_so(so, meta, other):
    so.write_bytes((other / "so").read_bytes())


def _garbage_json(so, meta, other):
    meta.write_bytes(b"\x00\xff{garbage")


def _json_list(so, meta, other):
    meta.write_text("[1, 2, 3]")


def _foreign_json(so, meta, other):
    meta.write_bytes((other / "json").read_bytes())


def _foreign_pair(so, meta, other):
    so.write_bytes((other / "so").read_bytes())
    meta.write_bytes((other / "json").read_bytes())


def _edit_json(**change):
    def edit(so, meta, other):
        info = json.loads(meta.read_text())
        for k, v in change.items():
            if v is None:
                info.pop(k)
            else:
                info[k] = v
        meta.write_text(json.dumps(info))
    return edit


def _json_other_key(so, meta, other):
    info = json.loads(meta.read_text())
    info["key"] = json.loads((other / "json").read_text())["key"]
    meta.write_text(json.dumps(info))


def _no_json(so, meta, other):
    meta.unlink()


def _no_so(so, meta, other):
    so.unlink()


DAMAGE = {
    "truncated-so": _truncate,
    "empty-so": _empty_so,
    "corrupted-so-bytes": _flip_bytes,
    "foreign-so": _foreign_so,
    "garbage-json": _garbage_json,
    "json-not-an-object": _json_list,
    "json-of-another-kernel": _foreign_json,
    "json-with-another-key": _json_other_key,
    "foreign-pair": _foreign_pair,
    "json-sha-mismatch": _edit_json(sha256="0" * 64),
    "json-sha-wrong-type": _edit_json(sha256=12345),
    "json-missing-sha": _edit_json(sha256=None),
    "json-arg-types-wrong-type": _edit_json(arg_types="ptr"),
    "json-missing-stages": _edit_json(stages=None),
    "json-arg-types-wrong-count": _edit_json(arg_types=["!llvm.ptr"]),
    "json-stages-edited": _edit_json(stages={"mlir": "module {}"}),
    "json-missing-checksum": _edit_json(checksum=None),
    "json-missing": _no_json,
    "so-missing": _no_so,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_entry_is_rebuilt_not_loaded(damage, fresh, tmp_path, monkeypatch):
    want = A @ X
    assert_matches(spmv_csr(), want)
    (key,) = [n[:-3] for n in entries(fresh) if n.endswith(".so")]
    assert_matches(spmv_csc(), want)                    # another kernel, for the foreign files
    other = tmp_path / "other"
    other.mkdir()
    (key2,) = [n[:-3] for n in entries(fresh) if n.endswith(".so") and n[:-3] != key]
    (other / "so").write_bytes((fresh / f"{key2}.so").read_bytes())
    (other / "json").write_bytes((fresh / f"{key2}.json").read_bytes())

    so, meta = fresh / f"{key}.so", fresh / f"{key}.json"
    DAMAGE[damage](so, meta, other)
    damaged = so.read_bytes() if so.exists() else None

    loaded = []                       # the bytes of every library loaded from now on
    real_open = cache.open_library
    monkeypatch.setattr(cache, "open_library", lambda e, *a: loaded.append(e.data) or real_open(e, *a))
    forget()
    misses, disk_hits = stats()
    assert_matches(spmv_csr(), want)
    assert stats() == (misses + 1, disk_hits)           # rebuilt, not loaded from disk
    assert_one_valid_entry(fresh, key)
    assert loaded == [so.read_bytes()]                  # what was loaded is the new entry
    if damage in ("truncated-so", "empty-so", "corrupted-so-bytes", "foreign-so", "foreign-pair"):
        assert loaded[0] != damaged

    forget()                                            # and the new entry serves a new process
    assert_matches(spmv_csr(), want)
    assert stats() == (misses + 1, disk_hits + 1)


def test_library_replaced_between_hash_and_load_is_not_loaded(fresh, tmp_path, monkeypatch):
    """Another process replaces <key>.so after sparsecc hashed it: what is loaded is still
    the verified bytes."""
    B = sp.csr_array(np.array([[1.0, 2, 0], [0, 0, 3], [4, 0, 0]]))      # B != B.T
    x = np.array([1.0, 10, 100])
    assert_matches(sc.einsum("ij,j->i", B, x, formats=("csr", "dense")), B @ x)
    (key,) = [n[:-3] for n in entries(fresh) if n.endswith(".so")]
    sc.einsum("ij,j->i", B, x, formats=("csc", "dense"))
    (key2,) = [n[:-3] for n in entries(fresh) if n.endswith(".so") and n[:-3] != key]
    foreign = (fresh / f"{key2}.so").read_bytes()   # computes B.T @ x on CSR buffers
    # the entries, copied to another folder: dlopen would reuse a library loaded before
    # from the same path, which would hide a load by path here
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    for n in entries(fresh):
        (other / n).write_bytes((fresh / n).read_bytes())
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(other))
    real_read = cache._read

    def read_then_replace(k, d):
        got = real_read(k, d)
        if k == key and got[0] is not None:
            tmp = other / "swap.tmp"
            tmp.write_bytes(foreign)
            os.replace(tmp, other / f"{key}.so")
        return got

    monkeypatch.setattr(cache, "_read", read_then_replace)
    forget()
    misses, disk_hits = stats()
    assert_matches(sc.einsum("ij,j->i", B, x, formats=("csr", "dense")), B @ x)
    assert stats() == (misses, disk_hits + 1)
    assert not [n for n in os.listdir(other) if n.endswith(".load.so")]   # private copies unlinked


def test_cache_module_never_unpickles():
    with open(cache.__file__) as f:
        src = f.read()
    for mod in ("pickle", "marshal", "shelve", "dill"):
        assert f"import {mod}" not in src


# ------------------------------------------------------------------ unsafe cache folders
def _world_writable(d):
    d.mkdir()
    d.chmod(0o777)


def _group_writable(d):
    d.mkdir()
    d.chmod(0o770)


def _sticky_world_writable(d):          # like /tmp itself
    d.mkdir()
    d.chmod(0o1777)


def _not_owned(d):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)


def _a_file(d):
    d.write_text("not a folder")


UNSAFE = {"world-writable": (_world_writable, "writable by group and others"),
          "group-writable": (_group_writable, "writable by group"),
          "sticky-world-writable": (_sticky_world_writable, "writable by group and others"),
          "not-owned": (_not_owned, "not by the current user"),
          "not-a-folder": (_a_file, "")}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_unsafe_cache_folder_is_refused(case, tmp_path, monkeypatch):
    make, why = UNSAFE[case]
    d = tmp_path / "shared"
    make(d)
    before = sorted(os.listdir(d)) if d.is_dir() else None
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(d))
    monkeypatch.setattr(specialization, "_loaded", {})
    with pytest.warns(UserWarning, match="not using the kernel cache folder") as record:
        assert_matches(spmv_csr(), A @ X)
    msgs = [str(w.message) for w in record if "sparsecc" in str(w.message)]
    assert len(msgs) == 1 and str(d) in msgs[0] and why in msgs[0], msgs
    priv = cache.cache_dir()
    assert priv != str(d) and os.stat(priv).st_mode & 0o777 == 0o700
    assert any(n.endswith(".so") for n in os.listdir(priv))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # warned once per folder
        assert_matches(spmv_csc(), A @ X)
    if before is not None:
        assert sorted(os.listdir(d)) == before         # nothing written there


def test_refused_folder_private_cache_is_removed_at_exit(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    script = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        from sparsecc.runtime import cache
        y = sc.einsum("ij,j->i", sp.csr_array(np.eye(3)), np.ones(3))
        assert np.array_equal(y, np.ones(3))
        print(cache.cache_dir())
    """)
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(d))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert f"not using the kernel cache folder {d}" in r.stderr
    priv = r.stdout.strip()
    assert priv and priv != str(d) and not os.path.exists(priv)
    assert os.listdir(d) == []


# ------------------------------------------------------------------ processes
RACE = """
import os, sys, time
import numpy as np, scipy.sparse as sp, sparsecc as sc
sync, n = sys.argv[1], int(sys.argv[2])
open(os.path.join(sync, str(os.getpid())), "w").close()
deadline = time.time() + 60
while len(os.listdir(sync)) < n and time.time() < deadline:     # start together
    time.sleep(0.001)
rng = np.random.default_rng(0)
A = sp.random_array((30, 20), density=0.2, format="csr", rng=rng)
B = sp.random_array((20, 25), density=0.2, format="csr", rng=rng)
C = sc.einsum("ik,kj->ij", A, B, out_format="csr")
assert C.format == "csr" and np.allclose(C.toarray(), (A @ B).toarray())
i = sc.cache_info()
print(i.misses, i.disk_hits)
"""


def test_processes_compiling_one_kernel_at_once_all_succeed(tmp_path):
    n = 3
    folder, sync = tmp_path / "cache", tmp_path / "sync"
    sync.mkdir()
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(folder))
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(sync), str(n)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.split() in (["1", "0"], ["0", "1"]), out
    sos = [f for f in entries(folder) if f.endswith(".so")]
    assert len(sos) == 1
    key = sos[0][:-3]
    assert entries(folder) == [f"{key}.json", f"{key}.so"]   # no temporary files left
    info = json.loads((folder / f"{key}.json").read_text())
    assert hashlib.sha256((folder / f"{key}.so").read_bytes()).hexdigest() == info["sha256"]


# ------------------------------------------------------------------ threads
def _cases(rng):
    """(call, expected) pairs over six kernels, four operand sets each."""
    cases = []
    for _ in range(4):
        M = random_sparse((40, 30), 0.1, np.float64, rng, fmt="csr")
        N = random_sparse((30, 20), 0.1, np.float64, rng, fmt="csr")
        x, D = rng.random(30), rng.random((30, 5))
        T = random_sparse((6, 5, 4), 0.3, np.float64, rng)
        U = random_sparse((6, 5, 4), 0.3, np.float64, rng)
        Md = M.toarray()
        cases += [
            (lambda M=M, x=x: sc.einsum("ij,j->i", M, x), Md @ x),
            (lambda M=M, x=x: sc.einsum("ij,j->i", M, x, formats=("csc", "dense")), Md @ x),
            (lambda M=M, D=D: sc.einsum("ij,jk->ik", M, D), Md @ D),
            (lambda M=M, N=N: sc.einsum("ik,kj->ij", M, N), Md @ N.toarray()),
            (lambda T=T, U=U: sc.einsum("ijk,ijk->ijk", T, U), T.toarray() * U.toarray()),
            (lambda M=M: sc.einsum("ij->j", M, formats=("coo",)), Md.sum(0)),
        ]
    return cases, 6


def test_threads_share_kernels(fresh):
    cases, kinds = _cases(np.random.default_rng(5))
    misses, disk_hits = stats()
    with ThreadPoolExecutor(8) as ex:
        for _ in range(3):                  # first round compiles, the others call loaded kernels
            got = list(ex.map(lambda c: c[0](), cases))
            for g, (_, want) in zip(got, cases):
                assert_matches(g, want)
    assert stats() == (misses + kinds, disk_hits)


def test_same_new_kernel_from_eight_threads_compiles_once(fresh):
    rng = np.random.default_rng(6)
    M = random_sparse((50, 40), 0.1, np.float64, rng, fmt="csr")
    xs = [rng.random(40) for _ in range(8)]
    k = sc.compile("ij,j->i", "dcsr", "dense")
    barrier = threading.Barrier(8)

    def call(x):
        barrier.wait()
        return k(M, x)

    i0 = sc.cache_info()
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(call, xs))
    i1 = sc.cache_info()
    for g, x in zip(got, xs):
        assert_matches(g, M.toarray() @ x)
    assert (i1.misses - i0.misses, i1.disk_hits - i0.disk_hits, i1.hits - i0.hits) == (1, 0, 7)


def test_native_code_runs_without_the_gil():
    rng = np.random.default_rng(7)
    M = sp.random_array((4000, 4000), density=0.05, format="csr", rng=rng)
    D = rng.random((4000, 1000))                  # (300 columns: 45 ms with the hand-written SpMM, too brief)
    k = sc.compile("ij,jk->ik", "csr", "dense")
    k(M[:10], D)                                   # compiled and loaded beforehand
    count, gaps, stop = [0], [], threading.Event()

    def spin():                                    # pure Python: runs only while it holds the GIL
        last = time.perf_counter()
        while not stop.is_set():
            now = time.perf_counter()
            if now - last > 0.02:
                gaps.append((last, now))
            last = now
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.05)
        c0, t0 = count[0], time.perf_counter()
        Y = k(M, D)
        c1, t1 = count[0], time.perf_counter()
    finally:
        stop.set()
        t.join()
    assert t1 - t0 > 0.05, "the kernel ran too briefly to tell"
    longest = max([min(b, t1) - max(a, t0) for a, b in gaps if b > t0 and a < t1], default=0.0)
    assert c1 - c0 > 1000 and longest < 0.5 * (t1 - t0), (c1 - c0, longest, t1 - t0)
    np.testing.assert_allclose(Y[:3], (M[:3] @ D), rtol=1e-10)


# ------------------------------------------------------------------ memory
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_repeated_calls_do_not_grow_memory():
    rng = np.random.default_rng(8)
    M = random_sparse((60, 60), 0.1, np.float64, rng, fmt="csr")     # SpGEMM: ~1500 stored
    x = rng.random(60)
    Mcoo, Mcsc, D = M.tocoo(), M.tocsc(), rng.random((60, 4))
    T = random_sparse((8, 7, 6), 0.4, np.float64, rng)
    U = random_sparse((8, 7, 6), 0.4, np.float64, rng)
    calls = [
        (sc.compile("ij,j->i", "csr", "dense"), (M, x), M @ x),                    # dense result
        (sc.compile("ik,kj->ij", "csr", "csr", out_format="csr"), (M, M), M @ M),  # sparse result
        (sc.compile("ij,j->i", "coo", "dense"), (Mcoo, x), M @ x),                 # COO input
        (sc.compile("ij,jk->ik", "csc", "dense"), (Mcsc, D), M @ D),               # CSC input
        (sc.compile("ijk,ijk->ijk", "coo", "coo"), (T, U), T.toarray() * U.toarray()),  # N-d COO result
    ]
    for k, args, want in calls:
        got = k(*args)
        assert_matches(got, want.toarray() if sp.issparse(want) else want)
    for _ in range(200):                            # warm up allocators and caches
        for k, args, _ in calls:
            k(*args)
    gc.collect()
    before = _rss()
    for _ in range(2000):                           # 10,000 calls
        for k, args, _ in calls:
            k(*args)
    gc.collect()
    grown = _rss() - before
    assert grown < 3 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 10,000 calls"
    assert isinstance(calls[1][0](M, M), sp.csr_array)
    assert isinstance(calls[4][0](T, U), sp.coo_array)


# ------------------------------------------------------------------ empty operands
EMPTY_2D = [(4, 6), (0, 6), (4, 0), (0, 0)]


@pytest.mark.parametrize("shape", EMPTY_2D, ids=str)
def test_empty_operands(shape):
    m, n = shape
    A0 = sp.csr_array((m, n))                       # nnz = 0
    x = np.arange(float(n))
    B0 = sp.csr_array((n, 3))
    assert_matches(sc.einsum("ij,j->i", A0, x), np.zeros(m))
    assert_matches(sc.einsum("ij,j->i", A0.tocsc(), x), np.zeros(m))
    assert_matches(sc.einsum("ij,j->i", A0.tocoo(), x), np.zeros(m))
    assert_matches(sc.einsum("ij,jk->ik", A0.tocsc(), np.ones((n, 3))), np.zeros((m, 3)))
    C = sc.einsum("ik,kj->ij", A0, B0)
    assert isinstance(C, sp.csr_array) and C.shape == (m, 3) and C.nnz == 0
    assert_matches(C, np.zeros((m, 3)))
    assert_matches(sc.einsum("ij->", A0), 0.0)
    assert_matches(sc.einsum("ij,ij->ij", A0, A0, out_format="dense"), np.zeros(shape))


@pytest.mark.parametrize("shape", [(3, 4, 5), (3, 0, 5), (0, 0, 0)], ids=str)
def test_empty_nd_coo(shape):
    T0 = sp.coo_array((np.zeros(0), tuple(np.zeros(0, np.int64) for _ in shape)), shape=shape)
    P = sc.einsum("ijk,ijk->ijk", T0, T0)
    assert isinstance(P, sp.coo_array) and P.shape == shape and P.nnz == 0
    assert_matches(sc.einsum("ijk,k->ij", T0, np.ones(shape[2])), np.zeros(shape[:2]))


def test_empty_operand_against_nonempty():
    rng = np.random.default_rng(9)
    M = random_sparse((5, 4), 0.5, np.float64, rng, fmt="csr")
    Z = sp.csr_array((4, 6))
    C = sc.einsum("ik,kj->ij", M, Z)
    assert C.nnz == 0 and C.shape == (5, 6)
    P = sc.einsum("ij,ij->ij", M, sp.csr_array((5, 4)))
    assert P.nnz == 0


# ------------------------------------------------------------------ NaN and inf
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # SciPy's inf - inf
def test_nan_and_inf_propagate_like_scipy():
    nan, inf = np.nan, np.inf
    # stored nan; inf times a zero of x; inf - inf in one row; inf times nonzero
    A = sp.csr_array(np.array([[nan, 1.0, 0, 0],
                               [0, inf, 0, 0],
                               [inf, 0, -inf, 0],
                               [0, 0, 0, inf],
                               [0, 0, 2.0, 0]]))
    x = np.array([1.0, 0.0, 2.0, 3.0])
    want = A @ x
    assert np.isnan(want[:3]).all() and want[3] == inf and want[4] == 4.0
    for fmt in ("csr", "csc", "coo"):
        np.testing.assert_array_equal(sc.einsum("ij,j->i", A, x, formats=(fmt, "dense")), want)
    # nan in x at a column with no stored entries is never read (as in SciPy)
    x2 = np.array([1.0, 1.0, 1.0, 1.0, nan])
    A2 = sp.csr_array(np.c_[np.eye(4), np.zeros(4)])
    np.testing.assert_array_equal(sc.einsum("ij,j->i", A2, x2), A2 @ x2)
    # sparse results keep nan/inf as stored values
    B = sp.csr_array(np.array([[1.0, 0, 0, 2], [0, 0, 3, 0], [0, 4, 0, 0], [5, 0, 0, 0]]))
    C = sc.einsum("ik,kj->ij", A, B)
    assert isinstance(C, sp.csr_array)
    np.testing.assert_array_equal(C.toarray(), (A @ B).toarray())
    P = sc.einsum("ij,ij->ij", A, A)
    np.testing.assert_array_equal(P.toarray(), A.multiply(A).toarray())
    assert np.isnan(sc.einsum("ij->", A))
    np.testing.assert_array_equal(sc.einsum("ij->i", A), A.sum(axis=1))
    np.testing.assert_array_equal(sc.einsum("ij->i", A.astype(np.float32)),
                                  A.astype(np.float32).sum(axis=1))


# ------------------------------------------------------------------ the compile worker
SIMPLE_MLIR = """
func.func @kernel(%m: memref<4xf64>) attributes { llvm.emit_c_interface } {
  %c0 = arith.constant 0 : index
  %v = arith.constant 1.0 : f64
  memref.store %v, %m[%c0] : memref<4xf64>
  return
}
"""


@pytest.fixture
def worker_hook(monkeypatch, tmp_path):
    """Set a test hook for the compile worker (see runtime/_worker.py), in a fresh cache."""
    from sparsecc.runtime import compiler
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(tmp_path / "cache"))

    def set_hook(hook):
        monkeypatch.setattr(compiler, "_test_hook", hook)
    yield set_hook
    compiler._test_hook = None


def test_worker_printing_to_stdout_does_not_desynchronize(fresh, worker_hook, tmp_path):
    from sparsecc.runtime import compiler
    worker_hook({"stdout": '{"ok": true, "id": 1}\n' * 50})     # prints and os.write(1, ...)
    for k in range(3):
        reply = compiler.compile_library(SIMPLE_MLIR, str(tmp_path / f"k{k}.so"))
        assert reply["ok"] and reply["arg_types"]
    worker_hook(None)
    y = sc.einsum("ij,j->i", sp.csr_array(np.eye(3) * 2), np.ones(3))     # still in step
    assert_matches(y, np.full(3, 2.0))


def test_worker_hang_times_out_and_restarts(worker_hook, tmp_path, monkeypatch):
    from sparsecc.runtime import compiler
    monkeypatch.setenv("SPARSECC_COMPILE_TIMEOUT", "1.5")
    worker_hook({"sleep": 60})
    t = time.monotonic()
    with pytest.raises(sc.CompileError, match="did not finish .* within 1.5 s"):
        compiler.compile_library(SIMPLE_MLIR, str(tmp_path / "a.so"))
    assert time.monotonic() - t < 30
    worker_hook(None)
    # the restarted worker (its start and imports, then the compile) has the usual time: under
    # a loaded machine's 2 cores it took more than 1.5 s now and then (a flaky failure)
    monkeypatch.setenv("SPARSECC_COMPILE_TIMEOUT", "120")
    assert compiler.compile_library(SIMPLE_MLIR, str(tmp_path / "b.so"))["ok"]
    monkeypatch.setenv("SPARSECC_COMPILE_TIMEOUT", "soon")
    with pytest.raises(sc.SparseccError, match="SPARSECC_COMPILE_TIMEOUT"):
        compiler.compile_library(SIMPLE_MLIR, str(tmp_path / "c.so"))


def test_worker_internal_error_keeps_its_traceback_and_is_not_retried(fresh, worker_hook, monkeypatch):
    from sparsecc.runtime import compiler
    calls = []
    real = compiler.compile_library
    monkeypatch.setattr(compiler, "compile_library", lambda *a, **k: calls.append(1) or real(*a, **k))
    worker_hook({"internal": "the bug"})
    with pytest.raises(sc.InternalError) as info:
        sc.compile("ik,kj->ij", "csr", "csr", out_format="csr")(sp.csr_array(np.eye(3)), sp.csr_array(np.eye(3)))
    assert not isinstance(info.value, sc.CompileError)
    assert "KeyError: 'the bug'" in info.value.worker_traceback
    assert "Traceback" in str(info.value) and "_test_hook" in str(info.value)
    assert len(calls) == 1                       # no retry through the compile ladder


FORK_SCRIPT = """
import os, sys, numpy as np, scipy.sparse as sp, sparsecc as sc
from sparsecc.runtime import compiler
A = sp.csr_array(np.eye(3) * 2)
assert np.allclose(sc.einsum("ij,j->i", A, np.ones(3)), 2)     # the parent's worker is running
parent = compiler._worker
pid = os.fork()
if pid == 0:
    try:
        y = sc.einsum("ij,j->i", sp.csc_array(A), np.arange(3.0), formats=("csc", "dense"))
        ok = np.allclose(y, 2 * np.arange(3.0)) and compiler._worker is not parent and compiler._worker.owner == os.getpid()
        os._exit(0 if ok else 3)
    except BaseException as e:
        print(repr(e), file=sys.stderr)
        os._exit(4)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert compiler._worker is parent and parent.proc.poll() is None
y = sc.einsum("ik,kj->ij", A, A, out_format="csr")       # the parent's worker still answers
assert np.allclose(y.toarray(), 4 * np.eye(3))
print("OK")
"""


def test_forked_child_starts_its_own_worker(tmp_path):
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]


OOM_SCRIPT = """
import resource, sys, numpy as np, scipy.sparse as sp, sparsecc as sc
outer = sc.compile("ik,kj->ij", "csr", "csr", out_format="csr")
transpose = sc.compile("ij->ji", "csr", out_format="coo")
small = sp.csr_array(np.ones((3, 1)))
assert np.allclose(outer(small, small.T.tocsr()).toarray(), np.ones((3, 3)))     # compiled before the limit
W = sp.csr_array((np.ones(2), np.array([0, 2**31 - 5], np.int64), np.array([0, 1, 2], np.int64)), shape=(2, 2**31))
T0 = sp.csr_array((np.ones(2), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 3))
assert np.allclose(transpose(T0).toarray(), T0.toarray().T)
with open("/proc/self/status") as f:
    vm = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
X = sp.csr_array(np.ones((20000, 1)))
Y = sp.csr_array(np.ones((1, 20000)))
try:
    outer(X, Y)                 # 4e8 stored entries: about 5 GB
    print("no MemoryError (outer)")
except MemoryError as err:
    print("outer:", err)
try:
    transpose(W)                # a (2, 2**31) matrix with 2 entries
    print("transpose fit")
except MemoryError as err:
    print("transpose:", err)
R = outer(small, small.T.tocsr())      # the process is alive and kernels still run
assert np.allclose(R.toarray(), np.ones((3, 3)))
assert np.allclose(sc.einsum("ij,j->i", X[:5], np.ones(1)), np.ones(5))
print("OK")
"""


def test_out_of_memory_in_a_kernel_raises_memory_error(tmp_path):
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", OOM_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    assert "outer: sparsecc: the kernel 'ik,kj->ij' ran out of memory" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("OK"), r.stdout


def _folder_at(which):
    def damage(so, meta):
        p = so if which == "so" else meta
        p.unlink()
        p.mkdir()
        (p / "inside").write_text("x")
    return damage


def _unloadable_with_valid_hash(so, meta):
    """A pair that passes every check but whose library cannot be loaded."""
    data = b"\x7fELF this is not a loadable library" * 10
    so.write_bytes(data)
    info = json.loads(meta.read_text())
    info["sha256"] = hashlib.sha256(data).hexdigest()
    info["checksum"] = cache._checksum(info)
    meta.write_text(json.dumps(info))


OBSTACLES = {"folder-at-so": _folder_at("so"), "folder-at-json": _folder_at("json"),
             "unloadable-so-with-valid-hash": _unloadable_with_valid_hash}


@pytest.mark.parametrize("damage", list(OBSTACLES))
def test_unusable_entry_is_rebuilt(damage, fresh):
    want = A @ X
    assert_matches(spmv_csr(), want)
    (key,) = [n[:-3] for n in entries(fresh) if n.endswith(".so")]
    so, meta = fresh / f"{key}.so", fresh / f"{key}.json"
    OBSTACLES[damage](so, meta)
    forget()
    misses, disk_hits = stats()
    assert_matches(spmv_csr(), want)
    assert stats() == (misses + 1, disk_hits)           # rebuilt
    assert_one_valid_entry(fresh, key)
    forget()
    assert_matches(spmv_csr(), want)                    # and found by the next process
    assert stats() == (misses + 1, disk_hits + 1)


GROWTH_SCRIPT = """
import numpy as np, scipy.sparse as sp, sparsecc as sc
a = sp.random_array((1, 10**5), density=0.5, random_state=0, format="csr")
try:
    sc.einsum("ai,aj->ij", a, a, out_format="csr")      # 2.5e9 stored entries, grown by doubling
    print("no MemoryError")
except MemoryError as err:
    print("grown:", err)
b = sp.random_array((1, 300), density=0.5, random_state=0, format="csr")
r = sc.einsum("ai,aj->ij", b, b, out_format="csr")
assert np.allclose(r.toarray(), (b.T @ b).toarray())
print("OK")
"""


def test_a_sparse_result_outgrowing_memory_is_a_memory_error_not_a_kill(tmp_path):
    """Linux grants every realloc of a result that grows by doubling until touching the pages
    gets the process killed (SIGKILL: an outer product with 2.5e11 entries on a 24 GB
    machine).  The checked allocators refuse a request over half the physical memory, or
    over SPARSECC_MAX_ALLOC_BYTES (set low here so the test stays small)."""
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(tmp_path), SPARSECC_MAX_ALLOC_BYTES=str(300 << 20))
    r = subprocess.run([sys.executable, "-c", GROWTH_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    assert "grown: sparsecc: the kernel 'ai,aj->ij' ran out of memory" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("OK"), r.stdout
