"""Range checks fused into the kernel (passes/guards.py): a large CSR/CSC operand's
``indices`` are checked by the kernel's own loop over them, per block of rows, instead of a
NumPy max before the call.

* bad indices (too large, huge, negative in int32 and int64, in the first/last row, after
  empty rows, CSR and CSC; SpMV, SpMM, SDDMM with a dense result, MTTKRP-style) give the
  same OperandError as before and never a signal (subprocesses);
* valid inputs give numpy.einsum's results (formats x dtypes x index widths x threads,
  empty and single-entry operands);
* a guarded kernel's call runs no NumPy range check over ``indices`` (so the fusion cannot
  silently regress), and one without the guard still does.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import validate as validate_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _csr(m, n, per_row, dtype=np.float64, index=np.int64, empty_rows=(), seed=0):
    """An m x n CSR with ``per_row`` entries in each row but ``empty_rows``, as users build it."""
    rng = np.random.default_rng(seed)
    rows = np.array([i for i in range(m) if i not in set(empty_rows) for _ in range(per_row)], dtype=np.int64)
    cols = rng.integers(0, n, rows.size)
    vals = rng.uniform(0.5, 1.5, rows.size).astype(dtype)
    A = sp.csr_array((vals, (rows, cols)), shape=(m, n))
    A.sum_duplicates()
    A.indices = A.indices.astype(index)
    A.indptr = A.indptr.astype(index)
    return A


# ------------------------------------------------------------ bad indices: an error, no signal
# Each kernel runs every kind of bad index in one subprocess (compiles are shared); the child
# prints one JSON line per case.  A signal fails the test with the cases it got through.
CHILD = r"""
import json, sys, numpy as np, scipy.sparse as sp, sparsecc as sc
from sparsecc.runtime import call as call_mod
kernel, threads = sys.argv[1], int(sys.argv[2])
sc.set_num_threads(threads)
seen = []
orig = call_mod.check_deferred
def spy(defer, guarded=()):
    seen.append(sorted(guarded))
    return orig(defer, guarded)
call_mod.check_deferred = spy

def build(m, n, index, layout, empty):
    rng = np.random.default_rng(1)
    keep = [i for i in range(m) if not (empty and 1 <= i < m // 2)]    # rows 1 .. m/2 - 1 empty
    rows = np.repeat(np.array(keep, dtype=np.int64), 5)
    A = sp.csr_array((rng.uniform(0.5, 1.5, rows.size), (rows, rng.integers(0, n, rows.size))), shape=(m, n))
    A.sum_duplicates()
    if layout == "csc":
        A = A.tocsc()
    A.indices = A.indices.astype(index); A.indptr = A.indptr.astype(index)
    return A

def run(A, which):
    m, n = A.shape
    rng = np.random.default_rng(2)
    if kernel == "spmv":
        return sc.einsum("ij,j->i", A, rng.random(n))
    if kernel == "spmm":
        return sc.einsum("ij,jk->ik", A, rng.random((n, 4)))
    if kernel == "sddmm":
        return sc.einsum("ij,ik,jk->ij", A, rng.random((m, 3)), rng.random((n, 3)), out_format="dense")
    if kernel == "mttkrp2":       # MTTKRP's access pattern on a matrix: two factor gathers
        return sc.einsum("ij,jr,ir->ir", A, rng.random((n, 3)), rng.random((m, 3)))
    raise SystemExit("unknown kernel")

m, n = (3000, 700) if threads == 1 else (30000, 7000)     # 2 threads: above the parallel threshold
for index in (np.int32, np.int64):
    for layout in ("csr", "csc"):
        for empty in (False, True):
            for where, value, needle in (("last", "n", "out of range"), ("last", "huge", "out of range"),
                                         ("last", -1, "negative"), ("first", "n", "out of range"),
                                         ("middle", -7, "negative")):
                A = build(m, n, index, layout, empty)
                inner = A.shape[1] if layout == "csr" else A.shape[0]
                v = {"n": inner, "huge": np.iinfo(index).max}.get(value, value)
                k = {"last": A.nnz - 1, "first": 0, "middle": A.nnz // 2}[where]
                A.indices[k] = v
                before = A.indices.copy()
                seen.clear()
                try:
                    run(A, where)
                except sc.OperandError as err:
                    out = {"error": str(err)}
                except Exception as err:
                    out = {"other": f"{type(err).__name__}: {err}"}
                else:
                    out = {"error": None}
                out.update(case=[np.dtype(index).name, layout, empty, where, str(value)], needle=needle,
                           seen=seen[:], untouched=bool(np.array_equal(A.indices, before)))
                print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("kernel,threads", [("spmv", 1), ("spmm", 1), ("sddmm", 1), ("mttkrp2", 1),
                                            ("spmv", 2)])
def test_bad_indices_raise_operand_error_in_a_subprocess(kernel, threads):
    r = subprocess.run([sys.executable, "-c", CHILD, kernel, str(threads)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0, f"exit status {r.returncode} after {len(lines)} cases:\n{r.stderr[-3000:]}"
    assert len(lines) == 2 * 2 * 2 * 5
    fused = 0
    # (a CSC SpMV runs the hand-written scatter kernel, dialect/kernels/scatter.py, which
    # range-checks A's coordinates in its loop as the others do)
    for c in lines:
        assert c["error"] is not None and c["needle"] in c["error"], c
        assert "operand 0" in c["error"] and "indices" in c["error"], c
        assert c["untouched"], c
        # the deferred check skipped the guarded operand (twice when the repeated-call path
        # validated, then declined a non-canonical operand), then ran once for the message
        # after the kernel found the bad index itself; or, on the repeated-call path, no
        # range check ran before the kernel at all (only the structure is checked there) and
        # the full validation named the index the kernel found
        if c["seen"] == [] or (c["seen"] and c["seen"][-1] == [] and all(g == [0] for g in c["seen"][:-1])
                               and len(c["seen"]) in (2, 3)):
            fused += 1
    assert fused == len(lines), [c for c in lines if c["seen"][-1:] != [[]]]


def test_mttkrp_coo_bad_coordinate_in_a_subprocess():
    code = textwrap.dedent("""
    import numpy as np, scipy.sparse as sp, sparsecc as sc
    rng = np.random.default_rng(0)
    for dt in (np.int32, np.int64):
        for bad in (40, -1):
            c = [rng.integers(0, 40, 50000).astype(dt) for _ in range(3)]
            T = sp.coo_array((rng.random(50000), tuple(c)), shape=(40, 40, 40))
            T.coords[1][-1] = bad
            try:
                sc.einsum("ijk,jr,kr->ir", T, rng.random((40, 4)), rng.random((40, 4)))
            except sc.OperandError as err:
                print("OK", err)
            else:
                print("NO ERROR")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("OK") == 4, r.stdout


# ------------------------------------------------------------ valid inputs: results unchanged
@pytest.mark.parametrize("layout", ["csr", "csc"])
@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128])
def test_guarded_kernels_match_numpy(layout, index, dtype):
    rng = np.random.default_rng(3)
    for m, n, per_row, empty in ((700, 300, 3, range(5, 600)), (257, 1000, 7, ()), (1, 500, 100, ()),
                                 (600, 1, 1, ()), (300, 200, 0, ())):
        A = _csr(m, n, per_row, dtype, index, empty_rows=set(empty))
        if layout == "csc":
            A = A.tocsc()
            A.indices = A.indices.astype(index)
            A.indptr = A.indptr.astype(index)
        D = A.toarray()
        x = rng.random(n).astype(dtype)
        X = rng.random((n, 5)).astype(dtype)
        P, Q = rng.random((m, 3)).astype(dtype), rng.random((n, 3)).astype(dtype)
        tol = dict(rtol=1e-5 if dtype == np.float32 else 1e-12)
        np.testing.assert_allclose(sc.einsum("ij,j->i", A, x), np.einsum("ij,j->i", D, x), **tol)
        np.testing.assert_allclose(sc.einsum("ij,jk->ik", A, X), np.einsum("ij,jk->ik", D, X), **tol)
        np.testing.assert_allclose(sc.einsum("ij,ik,jk->ij", A, P, Q, out_format="dense"),
                                   np.einsum("ij,ik,jk->ij", D, P, Q), **tol)


@pytest.mark.parametrize("threads", [1, 2])
def test_guarded_spmv_large_matches_scipy(threads):
    old = sc.get_num_threads()
    sc.set_num_threads(threads)
    try:
        for index in (np.int32, np.int64):
            A = _csr(40000, 9000, 6, index=index, empty_rows=set(range(100, 5000)))
            x = np.random.default_rng(4).random(9000)
            np.testing.assert_allclose(sc.einsum("ij,j->i", A, x), A @ x, rtol=1e-12)
            y = np.random.default_rng(5).random(40000)
            np.testing.assert_allclose(sc.einsum("ij,i->j", A, y), A.T @ y, rtol=1e-12)
    finally:
        sc.set_num_threads(old)


# ------------------------------------------------------------ the NumPy max does not run
@pytest.fixture
def range_checks(monkeypatch):
    calls = []
    orig = validate_mod._in_range

    def spy(c, n, what, name):
        calls.append(name)
        return orig(c, n, what, name)

    monkeypatch.setattr(validate_mod, "_in_range", spy)
    return calls


@pytest.mark.parametrize("index", [np.int32, np.int64])
# (a CSC SpMV runs the hand-written scatter kernel, which range-checks in its loop too)
@pytest.mark.parametrize("expr,layout", [("ij,j->i", "csr"), ("ij,j->i", "csc"), ("ij,jk->ik", "csr")])
def test_guarded_kernel_skips_the_numpy_range_check(range_checks, expr, layout, index):
    A = _csr(2000, 1500, 4, index=index)
    if layout == "csc":
        A = A.tocsc()
        A.indices = A.indices.astype(index)
        A.indptr = A.indptr.astype(index)
    B = np.ones(1500) if expr == "ij,j->i" else np.ones((1500, 3))
    k = sc.compile(expr)
    got = k(A, B)
    np.testing.assert_allclose(got, A @ B)
    assert "indices" not in range_checks, "the NumPy indices check ran for a kernel that guards them"
    assert "sparsecc_index_flag" in k.ir("llvm-dialect")


def test_unguarded_kernels_keep_the_numpy_range_check(range_checks):
    A = _csr(2000, 1500, 4)
    # a sparse result (coordinates copied into the result, not used as indices): NumPy check
    sc.einsum("ij,ij->ij", A, A)
    assert range_checks.count("indices") == 2
    range_checks.clear()
    # BSR: coordinates of blocks, scaled before use
    B = sp.bsr_array(_csr(200, 200, 4).toarray(), blocksize=(2, 2))
    sc.einsum("ij,j->i", B, np.ones(200))
    assert "indices" in range_checks
    range_checks.clear()
    # a width the kernel converts to (int64 indices read as 32-bit): checked before the copy
    k = sc.compile("ij,j->i", options=sc.Options(index_width=32))
    k(A, np.ones(1500))
    assert "indices" in range_checks
    range_checks.clear()
    # check=False checks nothing, the kernel is the same
    sc.compile("ij,j->i", check=False)(A, np.ones(1500))
    assert range_checks == []


# ------------------------------------------------------------ blocks of equal rows + entries
def test_blocks_by_stored_entries_are_bit_identical_across_threads():
    """Rows are dealt to threads in blocks of about guards.COST rows + entries (R-MAT's long
    rows included, one longer than a block): each row still sums in one thread, in order."""
    from sparsecc.bench.generators import rmat
    from sparsecc.passes.guards import COST
    rng = np.random.default_rng(6)
    A = rmat(15, 8, rng)
    n = A.shape[1]
    assert n > 3 * COST
    long_row = sp.csr_array((np.ones(3 * COST), (np.zeros(3 * COST, np.int64), np.arange(3 * COST))),
                            shape=(1, n))
    A = sp.vstack([A, long_row, A], format="csr")
    x = rng.random(A.shape[1])
    X = rng.random((A.shape[1], 3))
    old = sc.get_num_threads()
    try:
        got = {}
        for t in (1, 2):
            sc.set_num_threads(t)
            got[t] = (sc.einsum("ij,j->i", A, x), sc.einsum("ij,jk->ik", A, X))
    finally:
        sc.set_num_threads(old)
    for a, b in zip(got[1], got[2]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(got[1][0], A @ x, rtol=1e-12)
    np.testing.assert_allclose(got[1][1], A @ X, rtol=1e-12)


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_repeated_calls_keep_the_fused_check(range_checks, index, monkeypatch):
    """The repeated-call fast path (runtime/call.py) validated every operand in full, so
    from the second call on the NumPy max ran again for a guarded kernel, and a bad index
    the kernel caught (return code 2) would have been reported as out of memory."""
    from sparsecc.runtime import call as call_mod
    A = _csr(2000, 1500, 4, index=index)
    x = np.ones(1500)
    k = sc.compile("ij,j->i")
    for _ in range(3):
        np.testing.assert_allclose(k(A, x), A @ x)
    assert k._call_info.fast is not None, "the repeated-call path was not built"
    assert "indices" not in range_checks
    bad = A.copy()
    bad.indices[-1] = 1500
    general = call_mod._call_general

    def no_general(*a, **kw):
        raise AssertionError("the call left the repeated-call path")
    monkeypatch.setattr(call_mod, "_call_general", no_general)
    with pytest.raises(sc.OperandError, match="out of range"):
        k(bad, x)
    np.testing.assert_allclose(k(A, x), A @ x)
    monkeypatch.setattr(call_mod, "_call_general", general)


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("bad", [10, -1, 2**31 - 1])
def test_small_operands_on_the_repeated_call_path_leave_indices_to_the_kernel(index, bad, monkeypatch):
    """A small CSR on the repeated-call path of a guarded kernel has only its structure
    checked in Python; a bad index must still be an OperandError (found by the kernel)."""
    from sparsecc.runtime import call as call_mod
    A = sp.random_array((10, 10), density=0.3, random_state=3, format="csr")
    A.indices, A.indptr = A.indices.astype(index), A.indptr.astype(index)
    x = np.ones(10)
    k = sc.compile("ij,j->i")
    for _ in range(2):
        np.testing.assert_allclose(k(A, x), A @ x)
    assert k._call_info.fast is not None
    B = A.copy()
    B.indices[0 if bad < 0 else -1] = bad        # still sorted: a canonical operand
    monkeypatch.setattr(call_mod, "_call_general", lambda *a, **kw: pytest.fail("left the repeated-call path"))
    with pytest.raises(sc.OperandError, match="out of range|negative"):
        k(B, x)
    np.testing.assert_allclose(k(A, x), A @ x)


def _broken(A, how):
    """A copy of CSR ``A`` whose structure is broken in one way (a bad indptr or sizes)."""
    B = sp.csr_array((A.data.copy(), A.indices.copy(), A.indptr.copy()), shape=A.shape)
    if how == "decreasing":                 # swap the ends of a non-empty row r >= 1
        r = 1 + int(np.argmax(np.diff(B.indptr[1:]) > 0))
        B.indptr[r], B.indptr[r + 1] = B.indptr[r + 1], B.indptr[r]
        assert B.indptr[r] > B.indptr[r + 1]
    elif how == "end":
        B.indptr[-1] -= 1
    elif how == "start":
        B.indptr[0] = 1
    elif how == "short_data":
        B.data = B.data[:-1].copy()
    elif how == "huge_middle":
        B.indptr[len(B.indptr) // 2] = np.iinfo(B.indptr.dtype).max
    return B


@pytest.mark.parametrize("shape", [(10, 10), (80, 80), (3000, 700)])
@pytest.mark.parametrize("how", ["decreasing", "end", "start", "short_data", "huge_middle"])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_repeated_call_path_checks_the_structure_of_guarded_operands(shape, how, index, monkeypatch):
    """The repeated-call path checks only the structure (indptr, sizes) of an operand whose
    indices the kernel range-checks itself, at every size: a broken one is an OperandError
    naming indptr/data, on that path, and the next good call still works."""
    from sparsecc.runtime import call as call_mod
    A = sp.random_array(shape, density=min(0.3, 30 / shape[1]), random_state=5, format="csr")
    A.indices, A.indptr = A.indices.astype(index), A.indptr.astype(index)
    x = np.ones(shape[1])
    k = sc.compile("ij,j->i")
    for _ in range(2):
        np.testing.assert_allclose(k(A, x), A @ x)
    assert k._call_info.fast is not None
    B = _broken(A, how)
    monkeypatch.setattr(call_mod, "_call_general", lambda *a, **kw: pytest.fail("left the repeated-call path"))
    with pytest.raises(sc.OperandError, match="indptr|data"):
        k(B, x)
    np.testing.assert_allclose(k(A, x), A @ x)


def test_repeated_calls_of_a_guarded_mid_size_operand_skip_the_full_validation(monkeypatch):
    """A guarded CSR of a few hundred entries on the repeated-call path: its structure is
    checked without the general validation (about 1.5-2.5 us of an 8-14 us call)."""
    from sparsecc.runtime import call as call_mod
    A = sp.random_array((300, 300), density=0.05, random_state=6, format="csr")
    x = np.ones(300)
    k = sc.compile("ij,j->i")
    for _ in range(2):
        k(A, x)
    calls = []
    monkeypatch.setattr(call_mod, "validate", lambda *a, **kw: calls.append(a))
    k._call_info.fast = None                      # remade with the spy in its namespace
    k(A, x)
    assert k._call_info.fast is not None
    calls.clear()
    for _ in range(3):
        np.testing.assert_allclose(k(A, x), A @ x)
    assert calls == []


CHILD_UNCHECKED = r"""
import numpy as np, scipy.sparse as sp, sparsecc as sc
rng = np.random.default_rng(3)
A = sp.random_array((3000, 700), density=0.01, format="csr", rng=rng)
A.indices[-1] = 700                                   # one past the last column
for expr, ops in (("ij,j->i", (A, rng.random(700))), ("ij,jk->ik", (A, rng.random((700, 4))))):
    k = sc.compile(expr, "csr", "dense", check=False)
    for _ in range(2):                                # the general path, then the repeated-call one
        try:
            k(*ops)
        except sc.OperandError as err:
            print("ERROR", err)
        else:
            print("NO ERROR")
"""


def test_check_false_bad_index_says_the_kernel_found_it():
    """With check=False the kernel's own range check still refuses a bad coordinate; the
    message said '(its indices changed during the call?)', which misled: nothing was checked
    before the call."""
    r = subprocess.run([sys.executable, "-c", CHILD_UNCHECKED], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 4, r.stdout
    for line in lines:
        assert line.startswith("ERROR") and "check=True" in line and "changed during the call" not in line, line
