"""The hand-written masked product (``sparsecc/dialect/kernels/masked_spgemm.py``):
``C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])``, its flat form and the einsum ``ij,ik,kj->ij``,
M, A and B CSR, a CSR result.

Oracles share no code with sparsecc: the pattern is SciPy's product of the operands' patterns
(ones, so nothing cancels) masked by M's, the values ``M * (A @ B)`` on NumPy dense copies, and
for float64 the bits of ``optimize=False`` (SpGEMM, then the mask: the sum in the same order).
Every test also checks that the hand-written kernel ran (its row function in the IR), so it
fails on the sparsifier's one nest.  Compiles are shared (one kernel object per spelling)."""

import functools
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import threads

from conftest import memcheck_finds_nothing, seed

pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py

NESTED = "C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])"
#: spelling -> (statement, the operands' order: M, A, B by position)
SPELLINGS = {
    "nested": (NESTED, "MAB"),
    "mask_last": ("C[i,j] = sum[k](A[i,k] * B[k,j]) * M[i,j]", "ABM"),
    "einsum": ("ij,ik,kj->ij", "MAB"),
    "einsum_bma": ("kj,ij,ik->ij", "BMA"),
}
DTYPES = ["float64", "float32", "int64", "int32", "complex128", "complex64"]


@functools.lru_cache(maxsize=None)
def kernel(spelling: str, **kw):
    text = SPELLINGS[spelling][0]
    if "->" in text:
        return sc.compile(text, "csr", "csr", "csr", out_format="csr", **kw)
    return sc.compile(text, M="csr", A="csr", B="csr", out_format="csr", **kw)


def call(spelling: str, M, A, B, **kw):
    k = kernel(spelling, **kw)
    ops = {"M": M, "A": A, "B": B}
    order = SPELLINGS[spelling][1]
    if "->" in SPELLINGS[spelling][0]:
        return k, k(*[ops[c] for c in order])
    return k, k(**ops)


def hand_written(k) -> bool:
    """The last call ran the hand-written kernel (its one step, or its one nest)."""
    steps = getattr(k, "_last_steps", None)
    return "@masked_row" in (steps[0] if steps else k).ir()


# ------------------------------------------------------------------------ operands
def values(n, dtype, rng):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-4, 5, n).astype(dtype)          # explicit zeros included: still stored
    v = rng.uniform(-1.5, 1.5, n)
    if dtype.kind == "c":
        v = v + 1j * rng.uniform(-1, 1, n)
    return v.astype(dtype)


def csr(rows, shape, dtype, rng, width=np.int32):
    """A canonical CSR array with the given sorted column lists per row."""
    indptr = np.zeros(shape[0] + 1, np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    cols = np.array([c for r in rows for c in sorted(r)], np.int64)
    X = sp.csr_array((values(len(cols), dtype, rng), cols.astype(width), indptr.astype(width)), shape=shape)
    assert X.has_canonical_format
    return X


def random_rows(m, n, per, rng, empty=()):
    return [[] if i in empty or n == 0 else sorted(rng.choice(n, min(n, int(rng.integers(0, 2 * per + 1))),
                                                            replace=False).tolist()) for i in range(m)]


def case(name, dtype, rng, width=np.int32):
    """(M, A, B) of one shape case."""
    if name == "random":          # M entries with and without products, empty rows
        m, kk, n = 37, 23, 41
        A = csr(random_rows(m, kk, 2, rng, empty=(3,)), (m, kk), dtype, rng, width)
        B = csr(random_rows(kk, n, 2, rng, empty=(5,)), (kk, n), dtype, rng, width)
        M = csr(random_rows(m, n, 4, rng, empty=(0, 7, m - 1)), (m, n), dtype, rng, width)
    elif name == "empty_mask":
        m, kk, n = 9, 8, 7
        A = csr(random_rows(m, kk, 3, rng), (m, kk), dtype, rng, width)
        B = csr(random_rows(kk, n, 3, rng), (kk, n), dtype, rng, width)
        M = csr([[]] * m, (m, n), dtype, rng, width)
    elif name == "no_product":    # M stores only where A @ B stores nothing
        m, kk, n = 12, 10, 14
        A = csr(random_rows(m, kk, 2, rng), (m, kk), dtype, rng, width)
        B = csr(random_rows(kk, n, 2, rng), (kk, n), dtype, rng, width)
        P = (abs_pattern(A) @ abs_pattern(B)).toarray()
        M = csr([[j for j in range(n) if P[i, j] == 0][:3] for i in range(m)], (m, n), dtype, rng, width)
    elif name == "single":        # one M entry, one product under it
        A = csr([[], [2], []], (3, 4), dtype, rng, width)
        B = csr([[], [], [1, 4], []], (4, 5), dtype, rng, width)
        M = csr([[], [0, 4], []], (3, 5), dtype, rng, width)
    elif name == "cancel":        # two products that cancel: the entry is stored (value 0)
        A = csr([[0, 1]], (1, 2), dtype, rng, width)
        B = csr([[3], [3]], (2, 5), dtype, rng, width)
        A.data[:] = 1
        B.data[:] = [2, -2]
        M = csr([[1, 3]], (1, 5), dtype, rng, width)
    elif name == "zero_k":        # A and B with an empty inner dimension
        A, B = csr([[]] * 4, (4, 0), dtype, rng, width), csr([], (0, 6), dtype, rng, width)
        M = csr([[1], [], [0, 5], []], (4, 6), dtype, rng, width)
    elif name == "wide_rows":     # B rows longer than a vector of coordinates (16), dense-ish M
        m, kk, n = 20, 15, 90
        A = csr(random_rows(m, kk, 3, rng), (m, kk), dtype, rng, width)
        B = csr([sorted(rng.choice(n, int(rng.integers(0, 60)), replace=False).tolist()) for _ in range(kk)],
                (kk, n), dtype, rng, width)
        M = csr(random_rows(m, n, 30, rng), (m, n), dtype, rng, width)
    else:
        raise AssertionError(name)
    return M, A, B


CASES = ["random", "empty_mask", "no_product", "single", "cancel", "zero_k", "wide_rows"]


def abs_pattern(X):
    """X's stored pattern as int64 ones (explicit zeros included)."""
    Y = sp.csr_array((np.ones(X.nnz, np.int64), X.indices.astype(np.int64), X.indptr.astype(np.int64)),
                     shape=X.shape)
    return Y


def check(got, M, A, B, scale=1):
    """``got`` against SciPy's pattern and NumPy's values; canonical CSR."""
    assert isinstance(got, sp.csr_array) and got.dtype == M.dtype
    P = (abs_pattern(A) @ abs_pattern(B)).multiply(abs_pattern(M)).tocsr()
    P.sort_indices()
    np.testing.assert_array_equal(np.asarray(got.indptr, np.int64), P.indptr)
    np.testing.assert_array_equal(np.asarray(got.indices, np.int64), P.indices)
    assert got.has_sorted_indices
    want = M.toarray() * (scale * (A.toarray() @ B.toarray()))
    r, c = P.nonzero()
    if M.dtype.kind in "iu":
        np.testing.assert_array_equal(got.data, want[r, c].astype(M.dtype))
    else:
        tol = 1e-5 if M.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(got.data, want[r, c], rtol=tol, atol=tol)


# ----------------------------------------------------------------------- the tests
@pytest.mark.parametrize("spelling,dtype", [(s, d) for s in SPELLINGS for d in DTYPES
                                            if s == "nested" or d in ("float64", "int32")])
def test_values_and_pattern(spelling, dtype):
    """Every shape case, each spelling and dtype (one compile each; the nested spelling takes
    every dtype, the others two): SciPy's pattern (an entry whose terms cancel stays stored),
    NumPy's values, the hand-written kernel."""
    rng = np.random.default_rng(seed("values", spelling, dtype))
    for name in CASES:
        M, A, B = case(name, dtype, rng)
        k, got = call(spelling, M, A, B)
        check(got, M, A, B)
        assert hand_written(k), name
    if spelling == "nested":
        M, A, B = case("cancel", dtype, rng)
        got = call(spelling, M, A, B)[1]         # M[0,1] has no product, M[0,3] two that cancel
        assert got.nnz == 1 and got.indices[0] == 3 and got.data[0] == 0


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_bits_of_optimize_false_and_of_any_thread_count(dtype):
    """The values are optimize=False's (SpGEMM, then the mask) bit for bit, and the same with
    1, 2 and 5 threads (more than the cores: each needs its own marker; a size with many
    blocks of rows; parallel below the work threshold)."""
    rng = np.random.default_rng(seed("bits", dtype))
    m, kk, n = 700, 300, 500
    M = csr(random_rows(m, n, 6, rng, empty=range(0, m, 9)), (m, n), dtype, rng)
    A = csr(random_rows(m, kk, 8, rng), (m, kk), dtype, rng)
    B = csr(random_rows(kk, n, 8, rng), (kk, n), dtype, rng)
    threads.set_min_parallel_work(0)
    outs = []
    for t in (1, 2, 5, 1):
        sc.set_num_threads(t)
        k, got = call("nested", M, A, B)
        assert hand_written(k)
        outs.append(got)
    check(outs[0], M, A, B)
    for o in outs[1:]:
        assert o.data.tobytes() == outs[0].data.tobytes() and (o.indices == outs[0].indices).all()
    ref = kernel("nested", optimize=False)(M=M, A=A, B=B)
    ref.sort_indices()
    np.testing.assert_array_equal(ref.indices, outs[0].indices)
    assert ref.data.tobytes() == outs[0].data.tobytes()


def test_unsorted_mask_rows_give_sorted_rows():
    """M with each row's coordinates reversed (SciPy's flag: not canonical): sorted rows, the
    right values (the call path sorts a copy, as for every kernel that requires canonical
    rows; a flag that says canonical where the rows are not is trusted, as SciPy does)."""
    rng = np.random.default_rng(seed("unsorted"))
    M, A, B = case("random", "float64", rng)
    R = M.copy()
    for i in range(R.shape[0]):
        lo, hi = R.indptr[i], R.indptr[i + 1]
        R.indices[lo:hi], R.data[lo:hi] = R.indices[lo:hi][::-1].copy(), R.data[lo:hi][::-1].copy()
    R.has_sorted_indices = False
    k, got = call("nested", R, A, B)
    check(got, M, A, B)
    assert hand_written(k)


def test_int64_indices_and_mixed_widths():
    rng = np.random.default_rng(seed("widths"))
    M, A, B = case("random", "float64", rng, width=np.int64)
    k, got = call("nested", M, A, B)
    check(got, M, A, B)
    assert hand_written(k)
    M32 = sp.csr_array((M.data, M.indices.astype(np.int32), M.indptr.astype(np.int32)), shape=M.shape)
    k, got = call("nested", M32, A, B)
    check(got, M32, A, B)
    assert hand_written(k)


@pytest.mark.parametrize("cpu", ["haswell", "x86-64"])
def test_narrower_vectors(cpu):
    """A target without AVX-512 (8 lanes of int32 coordinates, 4 of int64; a generic x86-64
    has no gather instruction at all): the same results."""
    rng = np.random.default_rng(seed("narrow", cpu))
    k = sc.compile(NESTED, M="csr", A="csr", B="csr", out_format="csr", options=sc.Options(cpu=cpu))
    for width in (np.int32, np.int64):
        for name in ("random", "wide_rows", "single"):
            M, A, B = case(name, "float64", rng, width)
            check(k(M=M, A=A, B=B), M, A, B)
    assert hand_written(k)


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_a_constant_factor(dtype):
    rng = np.random.default_rng(seed("scale", dtype))
    k = sc.compile("C[i,j] = M[i,j] * sum[k](3 * A[i,k] * B[k,j])", M="csr", A="csr", B="csr", out_format="csr")
    for name in ("random", "wide_rows"):
        M, A, B = case(name, dtype, rng)
        check(k(M=M, A=A, B=B), M, A, B, scale=3)
    assert hand_written(k)


def test_an_operand_stored_csc_read_transposed():
    """A[k,i] stored CSC has A's CSR buffers of (i, k): served as it is."""
    rng = np.random.default_rng(seed("csc"))
    M, A, B = case("random", "float64", rng)
    k = sc.compile("C[i,j] = M[i,j] * sum[k](At[k,i] * B[k,j])", M="csr", At="csc", B="csr", out_format="csr")
    got = k(M=M, At=sp.csc_array(A.T), B=B)
    check(got, M, A, B)
    assert hand_written(k)


def test_the_planner_knows_the_nest_is_hand_written(monkeypatch):
    """The planned kernel tells make_plan that the masked one nest is hand-written: its
    estimate is well below the sparsifier's nest's (cost.HANDWRITTEN_SPEEDUP a point)."""
    from sparsecc.planned import PlannedKernel
    rng = np.random.default_rng(seed("planner"))
    n = 2000
    M, A, B = (csr(random_rows(n, n, per, rng), (n, n), "float64", rng) for per in (2, 5, 5))
    k = kernel("nested")
    assert k._handwritten([M, A, B], "csr")
    p = k.plan(M=M, A=A, B=B)
    assert len(p.steps) == 1 and "masked by M" in p.reason and "flat form" in p.reason
    monkeypatch.setattr(PlannedKernel, "_handwritten", lambda self, values, rf: False)
    k._plans.clear()
    q = k.plan(M=M, A=A, B=B)
    k._plans.clear()
    from sparsecc.plan import cost as C
    fixed = C.STEP_OVERHEAD_S + C.SPARSE_RESULT_OVERHEAD_S      # a call's costs, alike in both
    assert q.single_seconds - fixed > 4 * (p.single_seconds - fixed)


def test_huge_dimension_keeps_the_sparsifiers_kernel():
    """A dimension far above the stored entries: the per-thread markers (one entry per column)
    would cost more than the call: the sparsifier's nest, the same entries."""
    rng = np.random.default_rng(seed("huge"))
    m, kk, n = 30, 20, 100_000       # (specialization.huge_dimension: over 4 x the entries + 65536)
    A = csr(random_rows(m, kk, 2, rng), (m, kk), "float64", rng)
    B = csr([sorted(rng.choice(n, 3, replace=False).tolist()) for _ in range(kk)], (kk, n), "float64", rng)
    P = (abs_pattern(A) @ abs_pattern(B)).tocsr()
    rows = [P.indices[P.indptr[i]:P.indptr[i + 1]].tolist()[:2] + [int(rng.integers(n))] for i in range(m)]
    M = csr([sorted(set(r)) for r in rows], (m, n), "float64", rng)
    k, got = call("nested", M, A, B)
    check(got, M, A, B)
    assert not hand_written(k)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to link a library")
def test_ahead_of_time_libraries_get_the_serial_kernel(tmp_path):
    """sc.aot.build: the serial loops (and the sparsifier's kernel for huge dimensions), the
    oracle's result through sc.aot.load, a bad coordinate of M an error."""
    sc.aot.build("mm", {"masked": kernel("nested")}, str(tmp_path))
    man = json.loads((tmp_path / "mm.json").read_text())["kernels"]["masked"]
    assert man["kernel"] == "masked_spgemm" and man["huge_dimensions"] == "sparsifier"
    lib = sc.aot.load(str(tmp_path))
    rng = np.random.default_rng(seed("aot"))
    for name in ("random", "wide_rows", "empty_mask"):
        M, A, B = case(name, "float64", rng)
        check(lib.masked(M=M, A=A, B=B), M, A, B)
    M, A, B = case("random", "float64", rng)
    X = M.copy()
    X.indices[-1] = M.shape[1]
    with pytest.raises(sc.SparseccError, match="out of range"):
        lib.masked(M=X, A=A, B=B)


BAD_CHILD = r"""
import sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import threads
threads.set_min_parallel_work(0)
rng = np.random.default_rng(4)
m, kk, n = 40, 30, 50
def R(a, b, w):
    X = sp.random_array((a, b), density=0.3, format="csr", random_state=rng)
    return sp.csr_array((X.data, X.indices.astype(w), X.indptr.astype(w)), shape=X.shape)
def fails(call, what, word=("index", "range")):
    try:
        call()
    except sc.SparseccError as e:
        assert any(x in str(e) for x in word), e
    else:
        raise SystemExit(f"no error: {what}")
S = "C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])"
kinds = {"checked": sc.compile(S, M="csr", A="csr", B="csr", out_format="csr"),
         "unchecked": sc.compile(S, M="csr", A="csr", B="csr", out_format="csr", check=False)}
bad_values = {"big": None, "neg": -1, "wide": 1 << 40}
for w in (np.int32, np.int64):
    M, A, B = R(m, n, w), R(m, kk, w), R(kk, n, w)
    want = (A @ B).multiply(M)
    for nthreads in (1, 2):
        sc.set_num_threads(nthreads)
        for kname, k in kinds.items():
            good = k(M=M, A=A, B=B)             # the plan and the repeated-call path made first
            assert abs(good - want).max() < 1e-12
            assert "@masked_row" in k._last_steps[0].ir()
            for which in "MAB":
                for bad in ("big", "neg", "wide"):
                    if bad == "wide" and w is np.int32:
                        continue
                    X = {"M": M, "A": A, "B": B}[which].copy()
                    X.indices[X.nnz // 2] = {"M": n, "A": kk, "B": n}[which] if bad == "big" else bad_values[bad]
                    ops = {"M": M, "A": A, "B": B, which: X}
                    for _ in range(2):          # general path, then the repeated-call path
                        fails(lambda: k(**ops), f"{kname} {which} {bad} {w.__name__} {nthreads}")
            assert abs(k(M=M, A=A, B=B) - want).max() < 1e-12
        # M's 64-bit coordinate past n whose low 32 bits are a column of B's (32-bit): flagged,
        # never compared truncated (nor a write outside the row's slots)
        if w is np.int32:       # (rows of M of up to 4 entries: compared with B's, not gathered)
            rows = [sorted(rng.choice(n, 3, replace=False)) for _ in range(m)]
            X = sp.csr_array((np.ones(3 * m), np.array(rows, np.int64).ravel(), np.arange(0, 3 * m + 1, 3)),
                             shape=(m, n))
            good_x = X.copy()
            for at in range(0, X.nnz, 2):
                X.indices[at] = (1 << 32) + int(B.indices[at % B.nnz])
            for k in kinds.values():
                k(M=good_x, A=A, B=B)           # (its plan made: the bad call's plan validates nothing)
                fails(lambda: k(M=X, A=A, B=B), f"a 64-bit coordinate of M past n {nthreads}")
                assert abs(k(M=M, A=A, B=B) - want).max() < 1e-12
        # a block of rows where A stores nothing: M's coordinates are still checked there
        empty_a = sp.csr_array((m, kk), dtype=A.dtype)
        empty_a.indptr, empty_a.indices = empty_a.indptr.astype(w), empty_a.indices.astype(w)
        X = M.copy()
        X.indices[X.nnz - 1] = n
        for k in kinds.values():
            fails(lambda: k(M=X, A=empty_a, B=B), f"M over an empty A {w.__name__} {nthreads}")
            assert k(M=M, A=empty_a, B=B).nnz == 0
        short = M.copy()
        short.data = short.data[:-1]
        fails(lambda: kinds["checked"](M=short, A=A, B=B), "a short data array", ("data",))
print("ok")
"""


def test_bad_coordinates_raise_in_a_subprocess():
    """A coordinate out of range (past the dimension, negative, 2^40 in int64 indices) in M, A
    or B, with check=True and check=False, 1 and 2 threads, the general and the repeated-call
    path; a data array shorter than the indices: a clear error, never a wild access (a
    signal fails the test).  M's coordinates are range-checked by the kernel, A's and B's by
    the call path and clamped in the kernel too."""
    r = subprocess.run([sys.executable, "-c", BAD_CHILD], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])



VALGRIND_CHILD = r"""
import sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
from sparsecc.runtime import threads
sys.path.insert(0, "tests")
from conftest import exact_blocks as exact
from test_masked_spgemm import case, check
opts = sc.Options(cpu="x86-64-v3")      # AVX2: valgrind decodes no AVX-512
threads.set_min_parallel_work(0)
rng = np.random.default_rng(0)
S = "C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])"
k = sc.compile(S, M="csr", A="csr", B="csr", out_format="csr", options=opts)
ku = sc.compile(S, M="csr", A="csr", B="csr", out_format="csr", options=opts, check=False)
for t in (1, 2):
    sc.set_num_threads(t)
    for name in ("random", "wide_rows", "single", "cancel", "zero_k", "empty_mask"):
        M, A, B = (exact(x) for x in case(name, "float64", rng))
        check(k(M=M, A=A, B=B), M, A, B)
        ku(M=M, A=A, B=B)
    # bad coordinates, unchecked: the kernel's own checks, no access outside a buffer
    M, A, B = case("random", "float64", rng)
    m, n = M.shape
    rows = [sorted(rng.choice(n, 3, replace=False)) for _ in range(m)]
    X = sp.csr_array((np.ones(3 * m), np.array(rows, np.int64).ravel(), np.arange(0, 3 * m + 1, 3)), shape=(m, n))
    ku(M=X, A=A, B=B)      # its plan made with valid operands of its class
    for at in range(0, X.nnz, 2):
        X.indices[at] = (1 << 32) + int(B.indices[at % B.nnz])
    bads = [(exact(X), A, B)]
    for which, bad in (("M", n), ("M", -1), ("A", A.shape[1]), ("A", -2), ("B", n), ("B", -1)):
        ops = {"M": M, "A": A, "B": B}
        Y = ops[which].copy()
        Y.indices[Y.nnz - 1] = bad
        ops[which] = Y
        bads.append(tuple(exact(ops[c]) for c in "MAB"))
    for Mb, Ab, Bb in bads:
        for _ in range(2):      # the first call's plan validates its operands; the second reaches the kernel
            try:
                ku(M=Mb, A=Ab, B=Bb)
            except sc.SparseccError:
                pass
print("done")
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="no valgrind")
def test_reads_and_writes_nothing_outside_its_buffers_under_valgrind(tmp_path):
    """Operands in exact-size heap blocks (the masked loads and gathers of B's last chunk, the
    prefetch clamped at A's end), bad coordinates with check=False (the kernel's own checks; a
    64-bit coordinate of M whose low bits are a column of B), 1 and 2 threads: memcheck finds
    no invalid or uninitialised access by a kernel (AVX2 code: valgrind decodes no AVX-512).
    Without the row-slot check of a hit the run aborts in free()."""
    memcheck_finds_nothing(VALGRIND_CHILD, tmp_path)
