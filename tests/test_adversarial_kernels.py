"""Adversarial pass over the hand-written SpMM (dialect/kernels/spmm.py) and SDDMM
(dialect/kernels/sddmm.py ``emit``/``_dot_vector``) kernels: a seeded differential driver
against oracles written out in NumPy loops (no sparsecc code), with the inputs a hostile
user passes (empty shapes, rows, single rows holding everything, duplicates and unsorted
rows, NaN/inf, non-contiguous / read-only / unaligned dense operands, mixed index widths,
column and k counts around every vector width, operands changing between calls of one
kernel after the freed memory was poisoned), 1 vs 2 threads bitwise equal, and bad
coordinates in a subprocess.  The default run keeps a few cases; ``-m slow`` runs 3000 and a valgrind memcheck pass."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import threads

from conftest import memcheck_finds_nothing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPMM = "ik,kj->ij"


@pytest.fixture(autouse=True)
def _restore_threads():
    n, w = sc.get_num_threads(), threads.get_min_parallel_work()
    yield
    sc.set_num_threads(n)
    threads.set_min_parallel_work(w)


# ------------------------------------------------------------------ oracles (plain loops)
def spmm_oracle(indptr, indices, data, X):
    """C[i] = sum over row i's stored entries (in A's order) of data[p] * X[indices[p]], in
    float64/complex128 (an unstored entry is never read: NaN/inf in X meet stored entries only)."""
    m = len(indptr) - 1
    out = np.zeros((m, X.shape[1]), np.complex128 if X.dtype.kind == "c" else np.float64)
    for r in range(m):
        for p in range(int(indptr[r]), int(indptr[r + 1])):
            out[r] += data[p] * X[int(indices[p])].astype(out.dtype)
    return out


def sddmm_oracle(indptr, indices, data, Xr, Yr):
    """vals[p] = data[p] * sum_k Xr[i, k] * Yr[indices[p], k] (row-major X[i,k], Y[j,k]);
    integers wrap like NumPy's (computed modulo 2**64 then cast)."""
    vals = []
    for r in range(len(indptr) - 1):
        for p in range(int(indptr[r]), int(indptr[r + 1])):
            x, y = Xr[r], Yr[int(indices[p])]
            if Xr.dtype.kind in "iu":
                s = 0
                for a, b in zip(x.tolist(), y.tolist()):
                    s += a * b
                vals.append(int(data[p]) * s)
            elif Xr.dtype.kind == "c":
                vals.append(complex(data[p]) * sum((complex(a) * complex(b) for a, b in zip(x, y)), 0j))
            else:       # real floats: no complex arithmetic (inf * (1+0j) has a NaN part)
                vals.append(float(data[p]) * sum((float(a) * float(b) for a, b in zip(x, y)), 0.0))
    return vals


def _wrap_ints(vals, dtype):
    bits = np.dtype(dtype).itemsize * 8
    out = []
    for v in vals:
        v %= 1 << bits
        out.append(v - (1 << bits) if v >= 1 << (bits - 1) else v)
    return np.array(out, dtype=dtype)


def _close(got, want, dtype):
    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
    return np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


# ------------------------------------------------------------------ random hostile inputs
def _values(n, dtype, rng, special=False):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-9, 10, n).astype(dtype)
    v = rng.standard_normal(n)
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(n)
    v = v.astype(dtype)
    if special and n:
        hit = rng.random(n) < 0.1
        v[hit] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0]), int(hit.sum()))
    return v


def _csr(m, n, dtype, rng, *, pos, crd, canonical=True, special=False):
    """A CSR operand of shape (m, n) with a random row layout: empty, one row holding
    everything, the last rows empty; duplicates and unsorted rows unless ``canonical``."""
    kind = rng.integers(0, 5)
    nnz = 0 if (m == 0 or n == 0 or kind == 0) else int(rng.integers(1, 3 * m * n + 2))
    if kind == 1 and m:
        rows = np.full(nnz, rng.integers(0, m))                 # one row holds everything
    elif kind == 2 and m:
        rows = rng.integers(0, max(1, m // 2), nnz)             # the last rows empty
    else:
        rows = rng.integers(0, max(m, 1), nnz)
    cols = rng.integers(0, max(n, 1), nnz)
    if canonical:
        key = np.unique(rows * n + cols) if nnz else np.zeros(0, np.int64)
        rows, cols = (key // n, key % n) if nnz else (rows, cols)
    else:
        order = np.argsort(rows, kind="stable")             # rows grouped, columns as drawn
        rows, cols = rows[order], cols[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))]) if m else np.zeros(1, np.int64)
    a = sp.csr_array((_values(len(rows), dtype, rng, special), cols.astype(crd), indptr.astype(pos)), shape=(m, n))
    a.indptr, a.indices = indptr.astype(pos), cols.astype(crd)     # (csr_array may narrow them)
    return a


def _hostile(X, rng):
    """X (C-ordered) in a layout a user passes: Fortran, strided, negative strides,
    read-only, or unaligned (a view at an odd byte offset of a bytes buffer)."""
    kind = rng.integers(0, 6)
    if kind == 1:
        return np.asfortranarray(X)
    if kind == 2:
        big = np.empty((X.shape[0], 2 * X.shape[1]), X.dtype)
        big[:, ::2] = X
        return big[:, ::2]
    if kind == 3:
        return X[::-1, ::-1].copy()[::-1, ::-1]
    if kind == 4:
        Y = X.copy()
        Y.flags.writeable = False
        return Y
    if kind == 5 and X.size:
        raw = np.zeros(X.nbytes + 1, np.uint8)
        Y = raw[1:].view(X.dtype).reshape(X.shape)
        Y[...] = X
        return Y
    return X


def _poison(nbytes):
    """Fill freed memory of about ``nbytes`` with NaN bit patterns, so a result allocated
    with np.empty that the kernel leaves unwritten shows."""
    for _ in range(3):
        junk = np.empty(max(nbytes, 1), np.uint8)
        junk[...] = 0xFF
        del junk


WIDTHS = [(np.int32, np.int32), (np.int64, np.int64), (np.int32, np.int64), (np.int64, np.int32)]


def run_spmm_case(seed):
    rng = np.random.default_rng(seed)
    dtype = [np.float64, np.float32][seed % 2]
    pos, crd = WIDTHS[rng.integers(0, 4)]
    m, K = (int(v) for v in rng.integers(0, 9, 2))
    n = int(rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 70, 255, 256, 257]))
    canonical = bool(rng.integers(0, 2))
    # NaN/inf only with canonical rows: with duplicates, summing them first (a dense copy)
    # and summing their products (SciPy, this kernel) differ at inf - inf
    A = _csr(m, K, dtype, rng, pos=pos, crd=crd, canonical=canonical, special=canonical)
    X = _values(K * n, dtype, rng, special=canonical).reshape(K, n)
    Xh = _hostile(X, rng)
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy(), np.array(Xh, copy=True))
    want = spmm_oracle(A.indptr, A.indices, A.data, X)
    _poison(m * n * X.itemsize)
    got = sc.einsum(SPMM, A, Xh)
    assert got.shape == (m, n) and got.dtype == dtype
    assert _close(got, want, dtype), (seed, m, K, n, dtype, pos, crd)
    for b, a in zip(before, (A.data, A.indices, A.indptr, Xh)):      # nothing the user passes is modified
        np.testing.assert_array_equal(a, b)
    return got


def run_sddmm_case(seed):
    rng = np.random.default_rng(seed)
    dtype = [np.float64, np.float32, np.int32, np.int64, np.complex128, np.complex64][seed % 6]
    pos, crd = WIDTHS[rng.integers(0, 4)]
    lanes = 64 // np.dtype(dtype).itemsize
    m, n = (int(v) for v in rng.integers(0, 7, 2))
    kk = int(rng.choice([0, 1, 2, lanes - 1, lanes, lanes + 1, 2 * lanes - 1, 2 * lanes + 1, 3 * lanes + 3, 100]))
    spec = ["ij,ik,jk->ij", "ij,ki,jk->ij", "ij,ik,kj->ij", "ij,ki,kj->ij"][rng.integers(0, 4)]
    A = _csr(m, n, dtype, rng, pos=pos, crd=crd, special=True)
    X = _values(m * kk, dtype, rng, special=True).reshape(m, kk)
    Y = _values(n * kk, dtype, rng, special=True).reshape(n, kk)
    if np.dtype(dtype).kind in "iu" and rng.integers(0, 2):      # products that overflow
        X[...] = np.iinfo(dtype).max // 3 - rng.integers(0, 5, X.shape)
    Xo = X if spec[3:5] == "ik" else X.T.copy()
    Yo = Y if spec[6:8] == "jk" else Y.T.copy()
    want = sddmm_oracle(A.indptr, A.indices, A.data, X, Y)
    Xh, Yh = _hostile(Xo, rng), _hostile(Yo, rng)
    before = [np.array(a, copy=True) for a in (A.data, A.indices, A.indptr, Xh, Yh)]
    got = sc.einsum(spec, A, Xh, Yh)
    for b, a in zip(before, (A.data, A.indices, A.indptr, Xh, Yh)):     # nothing the user passes is modified
        np.testing.assert_array_equal(a, b)
    assert got.shape == (m, n) and got.dtype == dtype
    np.testing.assert_array_equal(got.indptr, A.indptr)
    np.testing.assert_array_equal(got.indices, A.indices)
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(got.data, _wrap_ints(want, dtype))
    else:
        assert _close(got.data, np.array(want), dtype), (seed, spec, m, n, kk, dtype)
    return got


DEFAULT_CASES = 24
SLOW_CASES = 3000


@pytest.mark.parametrize("seed", range(DEFAULT_CASES))
def test_spmm_differential(seed):
    run_spmm_case(seed)


@pytest.mark.parametrize("seed", range(DEFAULT_CASES))
def test_sddmm_differential(seed):
    run_sddmm_case(seed)


@pytest.mark.slow
def test_differential_many():
    for seed in range(DEFAULT_CASES, SLOW_CASES):
        run_spmm_case(seed)
        run_sddmm_case(seed)


# ------------------------------------------------------------------ targeted sweeps
def test_spmm_every_column_count_on_poisoned_memory():
    """k = 0..70 and 255/256/257/1000 (every full/half/quarter/eighth block and masked tail
    of both dtypes): each output entry written (the result is np.empty; freed memory holding
    NaN patterns is recycled), on a row of X at the very end of its buffer."""
    rng = np.random.default_rng(11)
    for dtype in (np.float64, np.float32):
        k = sc.compile(SPMM)
        for n in list(range(71)) + [255, 256, 257, 1000]:
            # rows: X's last row, empty, empty, X's first and last rows, empty
            A = sp.csr_array((_values(3, dtype, rng), np.array([5, 0, 5]), np.array([0, 1, 1, 1, 3, 3])),
                             shape=(5, 6))
            X = _values(6 * n, dtype, rng).reshape(6, n)
            _poison(5 * n * X.itemsize)
            got = k(A, X)
            assert got.shape == (5, n) and got.dtype == dtype
            assert _close(got, spmm_oracle(A.indptr, A.indices, A.data, X), dtype), n
        assert "vector.maskedload" in k.ir() and "linalg.generic" not in k.ir()     # the hand-written kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.complex64, np.complex128])
def test_sddmm_k_around_the_lanes(dtype):
    """k around the vector widths of each dtype (16 f32/i32 lanes, 8 f64/i64, complex's
    scalar loop), nnz below the prefetch distance, the last rows empty, every transposed
    form at k = 0 and 1."""
    rng = np.random.default_rng(12)
    lanes = 64 // np.dtype(dtype).itemsize
    ks = sorted({0, 1, 2, lanes - 1, lanes, lanes + 1, 2 * lanes - 1, 2 * lanes, 2 * lanes + 1, 3 * lanes + 5})
    for kk in ks:
        for spec in ("ij,ik,jk->ij", "ij,ki,jk->ij", "ij,ik,kj->ij", "ij,ki,kj->ij") if kk < 2 else ("ij,ik,jk->ij",):
            rows = np.array([0, 0, 1, 1, 1, 2])                  # 6 entries (< 16); rows 3..6 empty
            cols = np.array([0, 4, 1, 2, 4, 3])
            A = sp.csr_array((_values(6, dtype, rng), (rows, cols)), shape=(7, 5))
            X = _values(7 * kk, dtype, rng).reshape(7, kk)
            Y = _values(5 * kk, dtype, rng).reshape(5, kk)
            Xo = X if spec[3:5] == "ik" else X.T.copy()
            Yo = Y if spec[6:8] == "jk" else Y.T.copy()
            got = sc.einsum(spec, A, Xo, Yo)
            want = sddmm_oracle(A.indptr, A.indices, A.data, X, Y)
            if np.dtype(dtype).kind in "iu":
                np.testing.assert_array_equal(got.data, _wrap_ints(want, dtype))
            else:
                assert _close(got.data, np.array(want), dtype), (kk, spec)


@pytest.mark.parametrize("kind", ["spmm", "sddmm"])
def test_one_and_two_threads_bitwise_equal(kind):
    rng = np.random.default_rng(13)
    threads.set_min_parallel_work(0)
    for dtype in (np.float64, np.float32):
        A = _csr(300, 40, dtype, rng, pos=np.int64, crd=np.int32)
        if kind == "spmm":
            args = (SPMM, A, _values(40 * 37, dtype, rng).reshape(40, 37))
        else:
            args = ("ij,ik,jk->ij", A, _values(300 * 23, dtype, rng).reshape(300, 23),
                    _values(40 * 23, dtype, rng).reshape(40, 23))
        got = []
        for nt in (1, 2, 1, 2):
            sc.set_num_threads(nt)
            r = sc.einsum(*args)
            got.append(r if kind == "spmm" else r.data)
        for g in got[1:]:
            assert g.tobytes() == got[0].tobytes()


def test_operands_changing_between_calls_of_one_kernel():
    """The repeated-call path caches a plan per kind of call: shapes, dtypes and index
    widths changing one at a time, with freed memory poisoned before each call (the
    result is np.empty), never show another call's or garbage values."""
    rng = np.random.default_rng(14)
    k = sc.compile(SPMM)
    m, K, n, dtype, pos, crd = 6, 5, 9, np.float64, np.int32, np.int32
    steps = [("m", 0), ("m", 7), ("n", 0), ("n", 33), ("K", 0), ("K", 4), ("dtype", np.float32),
             ("pos", np.int64), ("crd", np.int64), ("n", 1), ("dtype", np.int64), ("dtype", np.float64),
             ("m", 1), ("n", 70)]
    for what, v in steps:
        m, K, n, dtype, pos, crd = {"m": (v, K, n, dtype, pos, crd), "K": (m, v, n, dtype, pos, crd),
                                    "n": (m, K, v, dtype, pos, crd), "dtype": (m, K, n, v, pos, crd),
                                    "pos": (m, K, n, dtype, v, crd), "crd": (m, K, n, dtype, pos, v)}[what]
        for _ in range(3):
            A = _csr(m, K, dtype, rng, pos=pos, crd=crd)
            X = _values(K * n, dtype, rng).reshape(K, n)
            _poison(m * n * 8)
            got = k(A, X)
            assert got.shape == (m, n) and got.dtype == dtype
            want = spmm_oracle(A.indptr, A.indices, A.data, X)
            if np.dtype(dtype).kind in "iu":
                np.testing.assert_array_equal(got, want.astype(dtype))
            else:
                assert _close(got, want, dtype), (what, v)


# ------------------------------------------------------------------ bad coordinates (subprocess)
BAD_CHILD = r"""
import json, sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import threads
kind, nt = sys.argv[1], int(sys.argv[2])
sc.set_num_threads(nt)
threads.set_min_parallel_work(0)
rng = np.random.default_rng(5)
m, n, kk = 40, 30, 9
for width in (np.int32, np.int64):
    for check in (True, False):
        base = sp.random_array((m, n), density=0.3, rng=rng, format="csr")
        nnz = base.nnz
        # first, last, exactly the prefetch distances (4, 16) and before the end, the last 16
        for p in (0, 4, 16, nnz - 17, nnz - 5, nnz - 1):
            for v in (n, -1, n + 1000, np.iinfo(width).max):
                A = sp.csr_array((base.data.copy(), base.indices.astype(width), base.indptr.astype(width)), shape=(m, n))
                A.indices[p] = v
                try:
                    if kind == "spmm":
                        sc.einsum("ik,kj->ij", A, np.ones((n, kk)), check=check)
                    else:
                        sc.einsum("ij,ik,jk->ij", A, np.ones((m, kk)), np.ones((n, kk)), check=check)
                    err = None
                except sc.OperandError as e:
                    err = str(e)
                print(json.dumps({"case": [str(width), check, p, int(v)], "error": err,
                                  "untouched": int(A.indices[p]) == int(width(v))}), flush=True)
"""


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("kind", ["spmm", "sddmm"])
def test_bad_coordinates_at_the_prefetch_distances_in_a_subprocess(kind, nthreads):
    r = subprocess.run([sys.executable, "-c", BAD_CHILD, kind, str(nthreads)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    lines = [__import__("json").loads(s) for s in r.stdout.splitlines() if s.startswith("{")]
    assert r.returncode == 0, f"exit status {r.returncode} after {len(lines)} cases:\n{r.stderr[-3000:]}"
    assert len(lines) == 2 * 2 * 6 * 4
    for c in lines:
        assert c["error"] is not None, c
        assert c["untouched"], c


def test_non_canonical_spmm_operand_is_coalesced_first():
    """The SpMM kernel reads rows as they are, but the call hands it a canonical copy (the
    docs said 'summed as they are (no canonical copy)': they were wrong).  Duplicates
    1e16, -1e16 of one column and 1 of another: summed first (numpy.einsum on a dense
    copy) the row is 1; summed as products in A's order (SciPy's A @ X) it is 0."""
    D = sp.csr_array((np.array([1e16, 1.0, -1e16]), np.array([0, 1, 0]), np.array([0, 3])), shape=(1, 2))
    U = sp.csr_array((np.array([1.0, 1e16, -1e16]), np.array([1, 0, 0]), np.array([0, 3])), shape=(1, 2))
    for A in (D, U):
        before = (A.data.copy(), A.indices.copy())
        got = sc.einsum(SPMM, A, np.ones((2, 3)))
        np.testing.assert_array_equal(got, np.einsum("ik,kj->ij", A.toarray(), np.ones((2, 3))))
        np.testing.assert_array_equal(got, np.ones((1, 3)))
        np.testing.assert_array_equal(A.data, before[0])
        np.testing.assert_array_equal(A.indices, before[1])


# ------------------------------------------------------------------ valgrind memcheck (slow)
VALGRIND_CHILD = r"""
import numpy as np, scipy.sparse as sp
import sparsecc as sc
opts = sc.Options(cpu="x86-64-v3")      # AVX2: valgrind decodes no AVX-512
rng = np.random.default_rng(0)

def fresh(shape, dtype):                 # an exact-size heap block: a read past its end shows
    a = np.empty(int(np.prod(shape)) * np.dtype(dtype).itemsize, np.uint8).view(dtype).reshape(shape)
    a[...] = rng.integers(-3, 4, shape)
    return a

bad = 0
for dtype in (np.float64, np.float32):
    for n in (1, 3, 5, 7, 9, 17, 33, 65):          # masked tails of every width
        K = 130
        A = sp.csr_array((np.ones(3, dtype), (np.array([0, 1, 1]), np.array([K - 1, 0, K - 1]))), shape=(2, K))
        X = fresh((K, n), dtype)
        bad += not np.allclose(sc.einsum("ik,kj->ij", A, X, options=opts), A.toarray() @ X)
for dtype in (np.float64, np.float32, np.int32, np.int64):
    for kk in (1, 3, 7, 9, 15, 17, 33):
        A = sp.csr_array((np.ones(3, dtype), (np.array([0, 2, 2]), np.array([3, 0, 3]))), shape=(3, 4))
        for spec in ("ij,ik,jk->ij", "ij,ki,kj->ij"):
            X = fresh((3, kk) if spec[3:5] == "ik" else (kk, 3), dtype)
            Y = fresh((4, kk) if spec[6:8] == "jk" else (kk, 4), dtype)
            got = sc.einsum(spec, A, X, Y, options=opts).toarray()
            bad += not np.array_equal(got, np.einsum(spec, A.toarray(), X, Y))
print("done", bad)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or not __import__("shutil").which("valgrind"),
                    reason="needs valgrind")
def test_masked_tails_read_nothing_past_the_operands_under_valgrind(tmp_path):
    """Masked tails (SpMM's last columns, SDDMM's last k) at the very end of X's and Y's
    heap blocks: memcheck finds no access by a kernel outside them (about a minute)."""
    memcheck_finds_nothing(VALGRIND_CHILD, tmp_path, done="done 0")


@pytest.mark.skipif(__import__("shutil").which("cc") is None, reason="no C compiler")
def test_aot_spmm_overwrites_a_garbage_output(tmp_path):
    """An AOT library of SpMM called through its C wrapper with an output full of garbage:
    every entry overwritten (empty rows, an empty A and an X without rows too), and through
    sc.aot.load.  (AOT libraries get the hand-written SpMM, serial, which writes every
    output entry: runtime/fast_paths.py serial_kernel; docs/aot.md.)"""
    import ctypes
    k = sc.compile(SPMM, "csr", "dense")
    path = sc.aot.build("advspmm", {"spmm": k}, str(tmp_path))
    lib = ctypes.CDLL(path)
    fn = lib.advspmm_spmm
    P, I = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [I, I, I, P, I, P, I, P, I, P, P]
    fn.restype = ctypes.c_int
    rng = np.random.default_rng(15)
    for m, K, n, density in ((30, 20, 11, 0.3), (30, 20, 33, 0.0), (7, 0, 5, 0.0), (5, 9, 70, 1.0)):
        A = sp.random_array((m, K), density=density, rng=rng, format="csr") if K else sp.csr_array((m, 0))
        X = rng.standard_normal((K, n))
        ip, ix = A.indptr.astype(np.int32), np.ascontiguousarray(A.indices, np.int32)
        data = np.ascontiguousarray(A.data, np.float64)
        out = np.full((m, n), np.nan)
        rc = fn(m, K, n, ip.ctypes.data, len(ip), ix.ctypes.data, len(ix), data.ctypes.data, len(data),
                X.ctypes.data, out.ctypes.data)
        assert rc == 0
        np.testing.assert_allclose(out, spmm_oracle(A.indptr, A.indices, A.data, X), rtol=1e-12, atol=1e-12)
    loaded = sc.aot.load(str(tmp_path))
    A = sp.random_array((9, 8), density=0.4, rng=rng, format="csr")
    X = rng.standard_normal((8, 17))
    np.testing.assert_allclose(loaded["spmm"](A, X), A @ X, rtol=1e-12, atol=1e-12)


def _malloc_bytes():
    """Bytes the C heap holds (glibc's mallinfo2: arena in use plus mmap-ed blocks), or None."""
    import ctypes

    class _MI2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        f = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return None
    f.restype = _MI2
    m = f()
    return m.uordblks + m.hblkhd


@pytest.mark.parametrize("check", [True, False])
def test_sddmm_bad_coordinate_frees_the_result_it_built(check):
    """SDDMM checks A's coordinates itself and still returns the CSR result it built (its
    pos/crd/val allocations) with the out-of-range flag: the call raised OperandError and
    leaked them, about 12 bytes per stored entry per failing call (a 48 MB result lost
    each time; before the kernel's own check, NumPy's raised first and nothing leaked)."""
    if _malloc_bytes() is None:
        pytest.skip("no glibc mallinfo2")
    rng = np.random.default_rng(16)
    A = sp.random_array((400, 300), density=0.2, rng=rng, format="csr")       # 24k entries
    A.indices[A.nnz - 1] = 300
    X, Y = rng.standard_normal((400, 4)), rng.standard_normal((300, 4))
    k = sc.compile("ij,ik,jk->ij", out_format="csr", check=check)
    for _ in range(3):      # warm: the compile, the plan, the repeated-call path
        with pytest.raises(sc.OperandError):
            k(A, X, Y)
    before = _malloc_bytes()
    for _ in range(40):
        with pytest.raises(sc.OperandError):
            k(A, X, Y)
    grown = _malloc_bytes() - before
    assert grown < 2_000_000, f"{grown} bytes kept by 40 failing calls ({A.nnz} entries each)"
