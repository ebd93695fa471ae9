"""Adversarial tests for the code that landed with SpGEMM's new fill phase: the hand-written
SpGEMM kernel (bitmap marker, prefetch across rows, non-temporal value stores on one thread),
the result position widths chosen from a bound on the stored entries (``kernel.bound_rule``
/ ``entries_bound``, the repeated-call path's width class) and the guard's value prefetch.

Oracles share no code with sparsecc: ``numpy.einsum`` on dense copies, SciPy's ``A @ B``
(sorted) and the structural product (every pair of stored entries sharing ``k``, so entries
that cancel to 0 stay stored).  The default run keeps a few seeded cases; ``-m slow`` runs
more."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import kernel as kernel_mod

from conftest import memcheck_finds_nothing, seed


# --------------------------------------------------------------- result position widths
def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def _no_overflowing_positions(k, C):
    """A result storing more than ``POS32_MAX`` entries never has 32-bit positions."""
    of = k.last_specialization().out_format
    nnz = C.nnz
    if of is not None and of.pos_width == 32:
        assert nnz <= kernel_mod.POS32_MAX, (f"{nnz} stored entries with 32-bit positions "
                                             f"(POS32_MAX {kernel_mod.POS32_MAX})")


def _upper(n, dtype=np.float64):
    """Strictly upper triangular, all stored: ``A + A.T`` stores twice A's entries."""
    a = sp.csr_array(np.triu(np.arange(1, n * n + 1, dtype=dtype).reshape(n, n), 1))
    return a


def _increasing3(n):
    """3-D COO storing (i, j, k) for i < j < k: its two transposes below are disjoint from it."""
    i, j, k = np.indices((n, n, n))
    d = np.where((i < j) & (j < k), 1.0 + i + 2 * j + 3 * k, 0.0)
    return sp.coo_array(d)


# (statement, operands builder, numpy oracle)
_BOUND_CASES = {
    "a_plus_a_t": ("C[i,j] = A[i,j] + A[j,i]", lambda: dict(A=_upper(6)),
                   lambda A: A + A.T),
    "a_minus_a_t": ("C[i,j] = A[i,j] - A[j,i]", lambda: dict(A=_upper(6)),
                    lambda A: A - A.T),
    "neg_a_t_plus_b": ("C[i,j] = -A[j,i] + B[i,j] + A[i,j]", lambda: dict(A=_upper(6), B=_upper(6).T.tocsr()),
                       lambda A, B: -A.T + B + A),
    "a_times_b_plus_a_t": ("C[i,j] = A[i,j] * (B[i,j] + A[j,i])",
                           lambda: dict(A=sp.csr_array(np.ones((6, 6))), B=_upper(6)),
                           lambda A, B: A * (B + A.T)),
    "a_times_b_t": ("C[i,j] = A[i,j] * B[j,i]", lambda: dict(A=sp.csr_array(np.ones((6, 6))), B=_upper(6)),
                    lambda A, B: A * B.T),
    # a factor broadcast along the result (a Jacobian's diagonal term): the union of A and B
    "row_scaled": ("C[i,j] = A[i,j] + s * exp(v[i]) * B[i,j]",
                   lambda: dict(A=_upper(6), s=2.0, v=np.linspace(-1, 1, 6), B=sp.csr_array(np.eye(6))),
                   lambda A, s, v, B: A + s * np.exp(v)[:, None] * B),
    "mask_sum": ("C[i,j] = sum[k](A[i,j] * X[i,k])", lambda: dict(A=_upper(6), X=np.ones((6, 3))),
                 lambda A, X: A * X.sum(1)[:, None]),
    "product": ("C[i,j] = sum[k](A[i,k] * B[k,j])",
                lambda: dict(A=sp.csr_array(np.ones((6, 1))), B=sp.csr_array(np.ones((1, 6)))),
                lambda A, B: A @ B),
    "three_d": ("C[i,j,k] = A[i,j,k] + A[k,j,i] + A[j,i,k]", lambda: dict(A=_increasing3(4)),
                lambda A: A + A.transpose(2, 1, 0) + A.transpose(1, 0, 2)),
}


#: every case into CSR; the repeated operand into every format (the default run stays short)
_BOUND_PARAMS = ([(c, "csr") for c in sorted(_BOUND_CASES) if c != "three_d"]
                 + [pytest.param("three_d", "coo", marks=pytest.mark.slow)]        # 20 s of compiles
                 + [(c, f) for c in ("a_plus_a_t", "product") for f in ("coo", "dcsr", "csc")])


@pytest.mark.parametrize("case,out_format", _BOUND_PARAMS)
def test_result_positions_never_overflow_32_bits(case, out_format, monkeypatch):
    """POS32_MAX made small, around the result's stored entries: a result storing more than
    it with 32-bit positions would, at the real threshold, overflow them (memory corruption).
    ``A[i,j] + A[j,i]`` reads one operand twice: its union stores up to twice its entries."""
    src, build, oracle = _BOUND_CASES[case]
    ops = build()
    want = oracle(*[_dense(x) for x in ops.values()])
    k = sc.compile(src, out_format=out_format)
    total = int(np.prod(want.shape))
    stored = int(np.count_nonzero(want))
    for limit in sorted({max(stored - 1, 1), stored, total - 1}):
        if limit >= total:
            continue
        monkeypatch.setattr(kernel_mod, "POS32_MAX", limit)
        for _ in range(2):              # the general path, then the repeated-call path
            C = k(**ops)
            _no_overflowing_positions(k, C)
            np.testing.assert_allclose(_dense(C), want, rtol=1e-12, atol=0)


def test_repeated_calls_alternating_across_the_bound(monkeypatch):
    """The repeated-call path's width class: calls whose union bound lies below, then above
    POS32_MAX, alternating (a plan of the other width is never reused)."""
    k = sc.compile("C[i,j] = A[i,j] + A[j,i]")
    small, big = _upper(6), sp.csr_array(np.triu(np.ones((6, 6)), 1) + np.eye(6))
    small_want, big_want = _dense(small) + _dense(small).T, _dense(big) + _dense(big).T
    monkeypatch.setattr(kernel_mod, "POS32_MAX", 25)     # small: 30 stored, big: 36
    for _ in range(3):
        for A, want in ((small, small_want), (big, big_want)):
            C = k(A)
            _no_overflowing_positions(k, C)
            np.testing.assert_array_equal(_dense(C), want)


# ------------------------------------------------------------------- SpGEMM's fill phase
from sparsecc.runtime import threads as _threads      # noqa: E402

SPGEMM_DTYPES = ["float64", "float32", "int32", "int64", "complex64", "complex128"]
#: columns of the result that sit on the bitmap's word and summary-word boundaries
_EDGE_COLS = (0, 1, 31, 32, 33, 62, 63, 64, 65, 127, 128, 4095, 4096, 4097)


def _values(n, dtype, rng, *, overflow=False):
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        hi = np.iinfo(dtype).max // 2 if overflow else 9
        return rng.integers(-hi, hi, n, endpoint=True).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


def _rows_matrix(rows: list, shape, dtype, rng, *, overflow=False, duplicates=False, unsorted=False,
                 widths=(np.int32, np.int32), zeros=False):
    """CSR from a list of column lists (one per row), built buffer by buffer (no SciPy
    coalescing): duplicates and unsorted rows as given."""
    m, n = shape
    cols = []
    for r in rows:
        c = np.asarray(sorted(set(int(x) for x in r if 0 <= x < n)), np.int64)
        if duplicates and c.size:
            c = np.concatenate([c, rng.choice(c, min(3, c.size))])
        if unsorted or duplicates:
            c = rng.permutation(c)
        cols.append(c)
    indptr = np.concatenate([[0], np.cumsum([c.size for c in cols])]).astype(widths[0])
    indices = (np.concatenate(cols) if cols else np.zeros(0, np.int64)).astype(widths[1])
    data = _values(indices.size, dtype, rng, overflow=overflow)
    if zeros and data.size:
        data[rng.integers(0, data.size, max(1, data.size // 8))] = 0      # explicit zeros: stored
    a = sp.csr_array((data, indices, indptr), shape=shape)
    if duplicates or unsorted:
        a.has_canonical_format = False
        a.has_sorted_indices = False
    return a


def _hostile_rows(m, n, rng):
    """Rows of a hostile kind each: empty, full, one entry, the boundary columns, n - 1,
    exactly 32 / 33 entries, random of any length."""
    out = []
    for _ in range(m):
        kind = rng.integers(0, 8)
        if kind == 0 or n == 0:
            out.append([])
        elif kind == 1:
            out.append(range(n))
        elif kind == 2:
            out.append([n - 1])
        elif kind == 3:
            out.append([c for c in _EDGE_COLS if c < n] + [n - 1])
        elif kind in (4, 5):
            want = 32 + (kind == 5)
            out.append(rng.choice(n, min(n, want), replace=False))
        else:
            out.append(rng.choice(n, rng.integers(0, min(n, 80) + 1), replace=False))
    return out


def _structural(A, B):
    """The structural product's pattern (every pair of stored entries sharing k: entries
    that cancel to 0 included), rows sorted."""
    A1, B1 = sp.csr_array(A, copy=True), sp.csr_array(B, copy=True)
    for x in (A1, B1):
        x.sum_duplicates()
        x.data = np.ones(x.data.size, np.int64)
    S = sp.csr_array(A1 @ B1)
    S.sort_indices()
    return S


def _check_spgemm(C, A, B, dtype):
    S = _structural(A, B)
    assert C.format == "csr" and C.shape == S.shape
    np.testing.assert_array_equal(np.asarray(C.indptr, np.int64), S.indptr)
    np.testing.assert_array_equal(np.asarray(C.indices, np.int64), S.indices)
    want = A.toarray() @ B.toarray()
    got = C.toarray()
    assert got.dtype == want.dtype == np.dtype(dtype)
    if want.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)          # wraps as NumPy's integers wrap
    else:
        tol = 1e-4 if want.dtype in (np.float32, np.complex64) else 1e-11
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (1 + np.abs(want).max(initial=0)))


_SPGEMM_SHAPES = [(7, 9, 1), (9, 5, 63), (9, 7, 64), (11, 8, 65), (10, 12, 130), (6, 30, 4097),
                  (5, 40, 8200), (4, 0, 70), (0, 5, 70), (6, 6, 0), (1, 1, 1), (40, 70, 300)]


def _spgemm_case(case: int):
    rng = np.random.default_rng(seed("spgemm", case))
    m, kk, n = _SPGEMM_SHAPES[case % len(_SPGEMM_SHAPES)]
    dtype = SPGEMM_DTYPES[rng.integers(len(SPGEMM_DTYPES))]
    wa = (np.int32, np.int64)[rng.integers(2)], (np.int32, np.int64)[rng.integers(2)]
    wb = (np.int32, np.int64)[rng.integers(2)], (np.int32, np.int64)[rng.integers(2)]
    overflow = dtype.startswith("int") and rng.random() < 0.5
    mode = rng.integers(0, 4)     # 0: canonical, 1: duplicates, 2: unsorted, 3: explicit zeros
    A = _rows_matrix(_hostile_rows(m, kk, rng), (m, kk), dtype, rng, overflow=overflow, widths=wa,
                     duplicates=mode == 1, unsorted=mode == 2, zeros=mode == 3)
    B = _rows_matrix(_hostile_rows(kk, n, rng), (kk, n), dtype, rng, overflow=overflow, widths=wb,
                     duplicates=mode == 1, unsorted=mode == 2, zeros=mode == 3)
    return A, B, dtype


def _run_spgemm_cases(cases):
    _threads.set_min_parallel_work(0)
    for case in cases:
        A, B, dtype = _spgemm_case(case)
        a0 = [x.copy() for x in (A.indptr, A.indices, A.data, B.indptr, B.indices, B.data)]
        got = []
        k = sc.compile("ik,kj->ij")
        for t in (1, 2):
            sc.set_num_threads(t)
            got.append(k(A, B))
            # the hand-written kernel (a huge dimension keeps the sparsifier's)
            assert ("linalg.generic" not in k.ir()) or B.shape[1] > 30 * (A.nnz + B.nnz) + 4096
        one, two = got
        for x, y in ((one.indptr, two.indptr), (one.indices, two.indices), (one.data, two.data)):
            assert x.tobytes() == y.tobytes(), f"case {case}: 1 and 2 threads differ"
        try:
            _check_spgemm(one, A, B, dtype)
        except AssertionError as e:
            raise AssertionError(f"case {case} ({A.shape} x {B.shape}, {dtype}, "
                                 f"{A.indptr.dtype}/{A.indices.dtype} x {B.indptr.dtype}/{B.indices.dtype}): {e}")
        for x, x0 in zip((A.indptr, A.indices, A.data, B.indptr, B.indices, B.data), a0):
            np.testing.assert_array_equal(x, x0)          # nothing the user passed is modified


@pytest.mark.usefixtures("restore_threads")
def test_spgemm_differential_driver():
    _run_spgemm_cases(range(12))


@pytest.mark.slow
@pytest.mark.usefixtures("restore_threads")
def test_spgemm_differential_driver_slow():
    _run_spgemm_cases(range(12, 300))


def _bits(C):
    return (np.asarray(C.indptr).tobytes(), np.asarray(C.indices).tobytes(), np.asarray(C.data).tobytes())


@pytest.mark.usefixtures("restore_threads")
def test_spgemm_thread_count_changes_between_calls_and_serial_kernel():
    """The non-temporal stores are chosen per call from the team's size: the thread count
    changed between calls of one kernel (general and repeated-call paths), a kernel compiled
    with parallel='none', all give the same bits and SciPy's values."""
    rng = np.random.default_rng(seed("threads-between"))
    A = _rows_matrix(_hostile_rows(300, 200, rng), (300, 200), "float64", rng)
    B = _rows_matrix(_hostile_rows(200, 700, rng), (200, 700), "float64", rng)
    _threads.set_min_parallel_work(0)
    k = sc.compile("ik,kj->ij")
    serial = sc.compile("ik,kj->ij", options=sc.Options(parallel="none"))
    ref = None
    for t in (1, 2, 1, 2, 2, 1):
        sc.set_num_threads(t)
        for C in (k(A, B), serial(A, B)):
            if ref is None:
                _check_spgemm(C, A, B, "float64")
                ref = _bits(C)
            assert _bits(C) == ref
    assert "scf.parallel" not in serial.ir() and "linalg.generic" not in serial.ir()


@pytest.mark.usefixtures("restore_threads")
def test_spgemm_concurrent_calls_from_python_threads():
    """Two Python threads calling one kernel at once (two OpenMP root threads, each with its
    own team and workspaces): every result is the single-call result."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(seed("concurrent"))
    A = _rows_matrix(_hostile_rows(200, 150, rng), (200, 150), "complex128", rng)
    B = _rows_matrix(_hostile_rows(150, 500, rng), (150, 500), "complex128", rng)
    _threads.set_min_parallel_work(0)
    sc.set_num_threads(2)
    k = sc.compile("ik,kj->ij")
    want = _bits(k(A, B))
    with ThreadPoolExecutor(2) as pool:
        for got in pool.map(lambda _: _bits(k(A, B)), range(16)):
            assert got == want
    _check_spgemm(k(A, B), A, B, "complex128")


@pytest.mark.parametrize("kind", ["csc_a", "csc_b", "bool", "mixed_dtypes", "huge", "empty_a", "empty_b"])
@pytest.mark.usefixtures("restore_threads")
def test_spgemm_neighbours_of_the_hand_written_kernel(kind):
    """Calls next to the hand-written kernel's route (CSC operands, bool, mixed dtypes, a
    huge dimension, empty operands): SciPy's values and the structural pattern."""
    rng = np.random.default_rng(seed("neighbours", kind))
    m, kk, n = 40, 30, 5_000_000 if kind == "huge" else 90
    dt = {"bool": "float64", "mixed_dtypes": "float32"}.get(kind, "float64")
    A = _rows_matrix(_hostile_rows(m, kk, rng) if kind != "empty_a" else [[]] * m, (m, kk), dt, rng)
    Brows = _hostile_rows(kk, min(n, 300), rng) if kind != "empty_b" else [[]] * kk
    if kind == "huge":
        Brows = [[c * 16_000 + 7 for c in r] for r in Brows]
    B = _rows_matrix(Brows, (kk, n), "float64", rng)
    if kind == "bool":
        A, B = A.astype(bool), B.astype(bool)
    if kind == "csc_a":
        A = sp.csc_array(A)
    if kind == "csc_b":
        B = sp.csc_array(B)
    _threads.set_min_parallel_work(0)
    for t in (1, 2):
        sc.set_num_threads(t)
        C = sp.csr_array(sc.einsum("ik,kj->ij", A, B))
        C.sort_indices()
        S = _structural(sp.csr_array(A), sp.csr_array(B))
        np.testing.assert_array_equal(np.asarray(C.indptr, np.int64), S.indptr)
        np.testing.assert_array_equal(np.asarray(C.indices, np.int64), S.indices)
        want = (sp.csr_array(A) @ sp.csr_array(B))
        assert C.dtype == want.dtype
        np.testing.assert_allclose((C - want).data if C.dtype != bool else 0, 0, atol=1e-5)


BAD_CHILD = r"""
import sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import threads
which, nthreads = sys.argv[1], int(sys.argv[2])
sc.set_num_threads(nthreads)
threads.set_min_parallel_work(0)
rng = np.random.default_rng(3)
A = sp.random_array((60, 50), density=0.2, format="csr", random_state=1)
B = sp.random_array((50, 70), density=0.2, format="csr", random_state=2)
k = sc.compile("ik,kj->ij")
good = k(A, B)                     # the plan (and the repeated-call path) made first
X = A if which.startswith("A") else B
X = X.copy()
bad = {"A_big": 50, "A_neg": -1, "B_big": 70, "B_neg": -3, "A_last": 50, "B_last": 1 << 40}[which]
at = X.nnz - 1 if which.endswith("last") else X.nnz // 2
if bad >= 1 << 31:
    X.indices = X.indices.astype(np.int64)
X.indices[at] = bad
args = (X, B) if which.startswith("A") else (A, X)
for _ in range(2):                 # general path, then the repeated-call path
    try:
        k(*args)
    except sc.SparseccError as e:
        assert "indices" in str(e) or "coordinate" in str(e) or "range" in str(e), e
    else:
        raise SystemExit("no error for a coordinate out of range")
assert (k(A, B) != good).nnz == 0
print("ok")
"""


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("which", ["A_big", "A_neg", "B_big", "B_neg", "A_last", "B_last"])
def test_spgemm_bad_coordinates_raise_in_a_subprocess(which, nthreads):
    """A coordinate out of range in A (read two entries ahead by the prefetch, which loads
    B's positions at it) or in B (the accumulator's and bitmap's index): a clear error with
    check=True, on the general and the repeated-call path; a signal fails the test."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", BAD_CHILD, which, str(nthreads)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])


COUNTING_MALLOC = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
/* counts malloc requests of a size in [counted_lo, counted_hi) */
size_t counted_lo, counted_hi, counted;
static void *(*real)(size_t);
void *malloc(size_t n) {
    if (!real) real = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    if (n >= counted_lo && n < counted_hi) __atomic_fetch_add(&counted, 1, __ATOMIC_RELAXED);
    return real(n);
}
"""

COUNT_CHILD = r"""
import ctypes, os, sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import threads
threads.set_min_parallel_work(0)
sc.set_num_threads(int(sys.argv[1]))
n = 123457
rng = np.random.default_rng(5)
def R(m, c, nnz):
    return sp.csr_array((rng.random(nnz) + 0.5, (rng.integers(0, m, nnz), rng.integers(0, c, nnz))), shape=(m, c))
A, B = R(20000, 3000, 30000), R(3000, n, 30000)
k = sc.compile("ik,kj->ij")
k(A, B)
lib = ctypes.CDLL(os.environ["LD_PRELOAD"])
lo, hi, count = (ctypes.c_size_t.in_dll(lib, x) for x in ("counted_lo", "counted_hi", "counted"))
lo.value, hi.value = n * 8, n * 8 + 64     # a marker or accumulator of one row of C (not the team's)
C = k(A, B)
print("row-sized", count.value)
S = A @ B
assert C.nnz >= S.nnz and abs(C - S).max() < 1e-12
"""


def test_spgemm_team_larger_than_the_openmp_default_keeps_its_workspaces(tmp_path):
    """``sc.set_num_threads`` above the CPUs (and libomp's ``omp_get_max_threads``): the team
    has that many threads, and each needs its own marker, accumulator and bitmap.  Sized by
    ``max(omp_get_max_threads, omp_get_num_procs)`` only, the extra threads took the fallback:
    workspaces the size of a row of C allocated (and the marker initialised) for every row
    they computed, O(n) per row (counted by a malloc wrapper: none may be allocated)."""
    import os
    import shutil
    import subprocess
    import sys
    cc = os.environ.get("CC") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler for the counting malloc")
    (tmp_path / "count.c").write_text(COUNTING_MALLOC)
    so = tmp_path / "libcount.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(so), str(tmp_path / "count.c"), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(so))
    r = subprocess.run([sys.executable, "-c", COUNT_CHILD, str(4 * max(2, os.cpu_count() or 2))],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "row-sized 0" in r.stdout, r.stdout


# ----------------------------------------------------------- the guard's value prefetch
def _guarded_operand(m, n, nnz, dtype, fmt, rng):
    rows, cols = rng.integers(0, max(m, 1), nnz), rng.integers(0, max(n, 1), nnz)
    v = rng.random(nnz) + 0.5
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(nnz)
    v = (v > 0.9) if np.dtype(dtype) == bool else v.astype(dtype)
    a = sp.coo_array((v, (rows, cols)), shape=(m, n))
    a.sum_duplicates()
    return a.asformat(fmt)


_GUARDED = [("ij,j->i", "csr", None), ("ij,j->i", "csc", None), ("ij,j->i", None, "dcsr"), ("ij,i->j", "csr", None)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["bool", "complex64", "int32", "float64"])
@pytest.mark.usefixtures("restore_threads")
def test_guarded_kernels_with_prefetched_values(dtype, threads):
    """Kernels whose coordinates the block scan checks (and whose values it prefetches, one
    per 64-byte line: 64 bools, 8 complex64 per line), every value dtype, no stored entry
    (a zero-size value buffer), one, a block's worth and a row longer than a block."""
    from sparsecc.passes import guards
    rng = np.random.default_rng(seed("guards", dtype, threads))
    _threads.set_min_parallel_work(0)
    sc.set_num_threads(threads)
    for expr, layout, fmt in _GUARDED:
        k = sc.compile(expr, fmt, None)
        for m, n, nnz in ((300, 200, 0), (300, 200, 1), (2000, 900, 3 * guards.COST), (3, guards.COST * 3, 2 * guards.COST)):
            A = _guarded_operand(m, n, nnz, dtype, layout or "csr", rng)
            x = _guarded_operand(1, A.shape[1] if expr == "ij,j->i" else A.shape[0], 10**6, dtype, "csr", rng).toarray()[0]
            got = k(A, x)
            want = np.einsum(expr, A.toarray(), x)
            assert got.dtype == want.dtype
            if want.dtype.kind in "bi":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "complex64" else 1e-12, atol=1e-3)
            if nnz and expr == "ij,j->i" and layout == "csr":
                assert k._last.guarded, "the CSR SpMV's coordinates are no longer checked in the kernel"


GUARD_BAD_CHILD = r"""
import sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import threads
dtype, nthreads = sys.argv[1], int(sys.argv[2])
sc.set_num_threads(nthreads)
threads.set_min_parallel_work(0)
rng = np.random.default_rng(4)
for m, n, nnz in ((3000, 500, 40000), (2, 20000, 19000)):
    A = sp.random_array((m, n), density=nnz / (m * n), format="csr", random_state=5).astype(dtype)
    x = np.ones(n, dtype)
    for where in (A.nnz - 1, 0, A.nnz // 2):
        for bad in (n, -1, 1 << 30):
            B = A.copy()
            B.indices[where] = bad
            try:
                sc.einsum("ij,j->i", B, x)
            except sc.OperandError:
                pass
            else:
                raise SystemExit(f"no error: {dtype} {m}x{n} entry {where} = {bad}")
print("ok")
"""


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["bool", "complex64"])
def test_guarded_bad_coordinates_with_prefetched_values_in_a_subprocess(dtype, threads):
    """A bad coordinate in the last block, the first, the middle, of a guarded SpMV with 1-
    and 8-byte values (the prefetch loop's line stride differs): OperandError, no signal."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", GUARD_BAD_CHILD, dtype, str(threads)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])


@pytest.mark.parametrize("element,per_line", [("i8", 64), ("f32", 16), ("f64", 8), ("i64", 8),
                                              ("complex<f32>", 8), ("complex<f64>", 4)])
def test_the_scan_prefetches_one_value_per_cache_line(element, per_line):
    """The scan's prefetch loop steps one 64-byte line of values: a complex64 is 8 bytes (its
    two f32 parts), not the 16 assumed for every type without a width (which prefetched
    each line of complex64 values twice)."""
    from mlir import ir
    from sparsecc.passes import guards
    with ir.Context():
        assert guards.elements_per_line(ir.Type.parse(element)) == per_line


_OPS_CASES = {
    "index_select_repeats": (lambda A: sc.ops.index_select(A, 0, np.zeros(40, np.int64)),
                             lambda D: D[np.zeros(40, np.int64)]),
    "add_transpose": (lambda A: sc.ops.add(A, sc.ops.transpose(A, 0, 1)), lambda D: D + D.T),
    "mul_self": (lambda A: sc.ops.mul(A, A), lambda D: D * D),
    "mm_self": (lambda A: sc.ops.mm(A, A), lambda D: D @ D),
    "sspaddmm": (lambda A: sc.ops.sspaddmm(A, A, A), lambda D: D + D @ D),
}


@pytest.mark.parametrize("case", sorted(_OPS_CASES))
def test_op_library_results_never_overflow_32_bit_positions(case, monkeypatch):
    """The op library's kernels (gathers by a selection matrix with repeated rows, unions of
    an operand with its own transpose, products of an operand with itself): a result that
    stores more than POS32_MAX entries has 64-bit positions."""
    A = sp.csr_array(np.triu(np.arange(1.0, 65.0).reshape(8, 8), 1) + np.eye(8)[::-1])
    op, oracle = _OPS_CASES[case]
    want = oracle(A.toarray())
    stored = int(np.count_nonzero(want))
    for limit in sorted({max(stored - 1, 1), stored}):
        if limit >= want.size:
            continue
        monkeypatch.setattr(kernel_mod, "POS32_MAX", limit)
        C = op(A)
        if sp.issparse(C):
            assert not (C.nnz > limit and np.asarray(getattr(C, "indptr", np.zeros(0, np.int64))).dtype == np.int32
                        and C.format in ("csr", "csc")), (C.nnz, limit)
        np.testing.assert_allclose(_dense(C), want, rtol=1e-12)


@pytest.mark.usefixtures("restore_threads")
def test_spgemm_differential_driver_with_64_bit_result_positions(monkeypatch):
    """The same hostile cases with POS32_MAX made small: results with 64-bit positions and
    32-bit coordinates (the prefix sum and the row starts in 64 bits)."""
    monkeypatch.setattr(kernel_mod, "POS32_MAX", 40)
    _run_spgemm_cases(range(300, 306))


VALGRIND_SPGEMM = r"""
import sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import threads
sys.path.insert(0, "tests")
from test_adversarial_spgemm import _rows_matrix, _hostile_rows, _check_spgemm
opts = sc.Options(cpu="x86-64-v3")      # AVX2: valgrind decodes no AVX-512
threads.set_min_parallel_work(0)
rng = np.random.default_rng(0)

from conftest import exact_blocks as exact     # exact-size heap blocks: a read past their end shows

k = sc.compile("ik,kj->ij", options=opts)
for t in (1, 2):
    sc.set_num_threads(t)
    for dtype in ("float64", "complex64", "int32"):
        for (m, kk, n) in ((3, 4, 1), (5, 6, 63), (5, 6, 64), (6, 5, 65), (4, 40, 4097), (3, 3, 0)):
            A = exact(_rows_matrix(_hostile_rows(m, kk, rng), (m, kk), dtype, rng))
            B = exact(_rows_matrix(_hostile_rows(kk, n, rng), (kk, n), dtype, rng))
            _check_spgemm(k(A, B), A, B, dtype)
print("done")
"""


@pytest.mark.slow
@pytest.mark.skipif(not __import__("sys").platform.startswith("linux") or not __import__("shutil").which("valgrind"),
                    reason="needs valgrind")
def test_spgemm_reads_nothing_outside_its_buffers_under_valgrind(tmp_path):
    """SpGEMM's bitmap, prefetch (two entries ahead, clamped) and value gathers on operands in
    exact-size heap blocks, 1 and 2 threads: memcheck finds no invalid or uninitialised
    access by a kernel."""
    memcheck_finds_nothing(VALGRIND_SPGEMM, tmp_path)


@pytest.mark.usefixtures("restore_threads")
def test_spgemm_repeated_calls_alternating_across_the_bound(monkeypatch):
    """SpGEMM (the hand-written kernel) on the repeated-call path, products whose exact count
    lies below, then above POS32_MAX, alternating: each result's positions are wide enough."""
    rng = np.random.default_rng(seed("spgemm-alternating"))
    small = (_rows_matrix([[0], [1], [], [2]], (4, 3), "float64", rng),
             _rows_matrix([[0, 1], [2], [3]], (3, 5), "float64", rng))
    big = (_rows_matrix([[0, 1, 2]] * 4, (4, 3), "float64", rng),
           _rows_matrix([range(5)] * 3, (3, 5), "float64", rng))
    monkeypatch.setattr(kernel_mod, "POS32_MAX", 12)            # small: 4 stored, big: 20
    k = sc.compile("ik,kj->ij")
    for _ in range(3):
        for A, B in (small, big):
            C = k(A, B)
            _no_overflowing_positions(k, C)
            _check_spgemm(C, A, B, "float64")
