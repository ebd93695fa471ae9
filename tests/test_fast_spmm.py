"""SpMM ``C = A @ X`` (A CSR, X dense row-major, dense result, float32/float64) runs as a
hand-written kernel (sparsecc/dialect/kernels/spmm.py): checked against ``A.toarray() @ X``
and SciPy over dtypes, index widths (mixed too), column counts around the kernel's vector
blocks, empty / single-entry / one-row operands, unsorted and duplicate coordinates, the
einsum spellings, 1 vs 2 threads (bitwise equal), and bad coordinates (an OperandError found
by the kernel itself, in a subprocess).  Integer and complex values, CSC operands keep the
sparsifier's kernel."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import threads
from sparsecc.runtime import validate as validate_mod

from conftest import seed as _seed, random_dense, random_values

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPMM = "ik,kj->ij"


pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py




def _csr(shape, nnz, dtype, rng, pos=np.int64, crd=np.int64, *, rows=None, unsorted=False, duplicates=False):
    """A CSR array built from COO triples as users build it (``rows``: only these rows)."""
    m, n = shape
    r = (rng.choice(rows, nnz) if rows is not None else rng.integers(0, m, nnz)) if m else np.zeros(0, np.int64)
    c = rng.integers(0, n, nnz) if n else np.zeros(0, np.int64)
    if not duplicates:
        key = np.unique(r * max(n, 1) + c)
        r, c = key // max(n, 1), key % max(n, 1)
    vals = random_values(len(r), dtype, rng)
    if duplicates:       # csr_array from COO sums duplicates: build the buffers directly
        order = np.argsort(r, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=m))])
        a = sp.csr_array((vals[order], c[order], indptr), shape=shape)
    else:
        a = sp.csr_array((vals, (r, c)), shape=shape)
        if unsorted:
            for i in range(m):
                lo, hi = a.indptr[i], a.indptr[i + 1]
                p = rng.permutation(hi - lo) + lo
                a.indices[lo:hi], a.data[lo:hi] = a.indices[p].copy(), a.data[p].copy()
            a.has_sorted_indices = False
    a.indptr = a.indptr.astype(pos)
    a.indices = a.indices.astype(crd)
    return a


def _handwritten(k) -> bool:
    ir = k.ir()
    return "linalg.generic" not in ir and "vector.maskedload" in ir


def _same(got, want, dtype=None):
    want = np.asarray(want)
    assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if want.dtype in (np.float32, np.complex64) else 1e-11
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


WIDTHS = [(np.int32, np.int32), (np.int64, np.int64), (np.int32, np.int64), (np.int64, np.int32)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("pos,crd", WIDTHS)
def test_matches_dense_product_over_column_counts(dtype, pos, crd):
    """Column counts around every block width (8/16/32 ... lanes and the masked rest)."""
    rng = np.random.default_rng(_seed(dtype, str(pos), str(crd)))
    A = _csr((37, 29), 200, dtype, rng, pos, crd)
    A0 = A.copy()
    k = sc.compile(SPMM)
    for cols in (0, 1, 7, 8, 31, 32, 33, 128, 131):
        X = random_dense((29, cols), dtype, rng)
        C = k(A, X)
        _same(C, A.toarray() @ X)
        _same(C, A @ X)
        assert _handwritten(k)
        assert k.last_formats()[0].crd_width == np.dtype(crd).itemsize * 8    # no copy of indices
    assert (A.indices == A0.indices).all() and (A.indptr == A0.indptr).all() and (A.data == A0.data).all()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", ["empty", "no-rows", "no-inner", "empty-rows", "one-row", "single", "last-row"])
def test_edge_cases(dtype, case):
    rng = np.random.default_rng(_seed(dtype, case))
    shape, nnz, rows = {"empty": ((20, 15), 0, None), "no-rows": ((0, 15), 0, None), "no-inner": ((20, 0), 0, None),
                        "empty-rows": ((300, 40), 500, [0, 7, 150, 299]), "one-row": ((50, 400), 390, [17]),
                        "single": ((1, 1), 1, None), "last-row": ((60, 60), 5, [59])}[case]
    A = _csr(shape, nnz, dtype, rng, rows=rows)
    for cols in (5, 32, 40):
        X = random_dense((shape[1], cols), dtype, rng)
        C = sc.einsum(SPMM, A, X)
        _same(C, A.toarray() @ X)


@pytest.mark.parametrize("shape,nnz,cols", [((400, 300), 2000, 33), ((400, 300), 0, 32), ((400, 0), 0, 40),
                                            ((400, 300), 50, 7)])
def test_every_output_entry_is_written(shape, nnz, cols):
    """The kernel writes every entry of its output (the call hands it uninitialized memory):
    memory just freed full of NaN never shows through (empty rows, no stored entries, X
    without rows)."""
    rng = np.random.default_rng(_seed(shape, nnz, cols))
    A = _csr(shape, nnz, "float64", rng, rows=[0, 5, 399] if nnz == 50 else None)
    X = rng.random((shape[1], cols))
    k = sc.compile(SPMM)
    for _ in range(3):
        junk = np.full((shape[0], cols), np.nan)
        del junk
        C = k(A, X)
        assert not np.isnan(C).any()
        _same(C, A.toarray() @ X)
    assert _handwritten(k)


@pytest.mark.parametrize("kind", ["unsorted", "duplicates"])
def test_non_canonical_rows(kind):
    """Unsorted coordinates and duplicates in a row: every entry is added to the row's sums."""
    rng = np.random.default_rng(_seed(kind))
    A = _csr((80, 50), 900, "float64", rng, unsorted=kind == "unsorted", duplicates=kind == "duplicates")
    assert not A.has_canonical_format
    want = A.toarray() @ (X := rng.random((50, 33)))     # toarray sums duplicates
    before = (A.indices.copy(), A.data.copy())
    k = sc.compile(SPMM)
    _same(k(A, X), want)
    assert _handwritten(k)
    assert (A.indices == before[0]).all() and (A.data == before[1]).all()


@pytest.mark.parametrize("spec", ["ik,kj->ij", "kj,ik->ij", "ij,jk->ik"])
def test_einsum_spellings(spec):
    rng = np.random.default_rng(_seed(spec))
    A = _csr((40, 30), 250, "float64", rng)
    X = rng.random((30, 12))
    ops = (A, X) if spec.startswith(("ik", "ij")) else (X, A)
    k = sc.compile(spec)
    _same(k(*ops), np.einsum(spec, *[o.toarray() if sp.issparse(o) else o for o in ops]))
    assert _handwritten(k)


def test_index_notation_and_layouts():
    rng = np.random.default_rng(5)
    A = _csr((40, 30), 250, "float32", rng, np.int32, np.int32)
    X = random_dense((30, 9), "float32", rng)
    C = sc.evaluate("C[i,j] = sum[k](A[i,k] * X[k,j])", A=A, X=X)
    _same(C, A.toarray() @ X)
    # a Fortran-ordered or strided X: the same results (the runtime hands the kernel a C copy)
    _same(sc.einsum(SPMM, A, np.asfortranarray(X)), A.toarray() @ X)
    Xw = random_dense((30, 20), "float32", rng)[:, ::2]
    _same(sc.einsum(SPMM, A, Xw), A.toarray() @ Xw)


def test_threads_bitwise_equal():
    """Each output entry is summed by one thread in A's order: 1 and 2 threads agree bit for bit."""
    rng = np.random.default_rng(6)
    A = _csr((5000, 3000), 60000, "float64", rng)
    A2 = _csr((5000, 3000), 30000, "float64", rng, rows=[3, 4, 4999])      # long rows
    X = rng.random((3000, 37))
    k = sc.compile(SPMM)
    threads.set_min_parallel_work(0)
    for a in (A, A2):
        sc.set_num_threads(1)
        one = k(a, X)
        sc.set_num_threads(2)
        two = k(a, X)
        assert np.array_equal(one, two)
        _same(two, a @ X)
    assert _handwritten(k)


def test_serial_loops_and_unchecked_calls():
    """``parallel="none"`` compiles the same loops serially; ``check=False`` the same kernel."""
    rng = np.random.default_rng(10)
    A = _csr((3000, 500), 12000, "float64", rng)
    X = rng.random((500, 33))
    k = sc.compile(SPMM, options=sc.Options(parallel="none"))
    _same(k(A, X), A @ X)
    assert _handwritten(k) and "scf.parallel" not in k.ir()
    k2 = sc.compile(SPMM, check=False)
    _same(k2(A, X), A @ X)
    assert _handwritten(k2)


@pytest.mark.parametrize("dtype", ["int64", "complex128", "int32"])
def test_other_values_keep_the_sparsifier_kernel(dtype):
    rng = np.random.default_rng(_seed(dtype))
    A = _csr((30, 20), 150, dtype, rng)
    X = random_dense((20, 11), dtype, rng)
    k = sc.compile(SPMM)
    _same(k(A, X), A.toarray() @ X)
    assert "linalg.generic" in k.ir()


@pytest.mark.parametrize("spec", ["ik,jk->ij", "ik,kj->ji"])
def test_transposed_factor_or_result_keeps_the_sparsifier_kernel(spec):
    rng = np.random.default_rng(_seed(spec))
    A = _csr((30, 20), 150, "float64", rng)
    X = rng.random((11, 20) if spec == "ik,jk->ij" else (20, 11))
    k = sc.compile(spec)
    _same(k(A, X), np.einsum(spec, A.toarray(), X))
    assert "linalg.generic" in k.ir()


def test_csc_and_mixed_dtypes_keep_the_sparsifier_kernel():
    rng = np.random.default_rng(8)
    A = _csr((30, 20), 150, "float64", rng).tocsc()
    X = rng.random((20, 11))
    k = sc.compile(SPMM)
    _same(k(A, X), A.toarray() @ X)
    assert "linalg.generic" in k.ir()
    B = _csr((30, 20), 150, "float64", rng)
    k2 = sc.compile(SPMM)
    _same(k2(B, X.astype(np.float32)), B.toarray() @ X.astype(np.float32))


def test_kernel_checks_the_coordinates_itself(monkeypatch):
    """check=True runs no NumPy range check of a large operand's indices: the kernel does it."""
    calls = []
    orig = validate_mod._in_range

    def spy(c, n, what, name):
        calls.append(name)
        return orig(c, n, what, name)

    monkeypatch.setattr(validate_mod, "_in_range", spy)
    rng = np.random.default_rng(9)
    A = _csr((3000, 2000), 20000, "float64", rng)
    X = rng.random((2000, 16))
    k = sc.compile(SPMM)
    _same(k(A, X), A @ X)
    assert _handwritten(k) and "indices" not in calls
    assert "sparsecc_index_flag" in k.ir("llvm-dialect")


CHILD = r"""
import json, sys, numpy as np, scipy.sparse as sp, sparsecc as sc
from sparsecc.runtime import threads
sc.set_num_threads(int(sys.argv[1])); threads.set_min_parallel_work(0)
k = sc.compile("ik,kj->ij")
rng = np.random.default_rng(1)
for index in (np.int32, np.int64):
    for where in ("first", "middle", "last"):
        for value in ("n", "huge", -1):
            for cols in (0, 3, 32, 40):
                m, n = 3000, 900
                rows = np.repeat(np.arange(m), 4)
                A = sp.csr_array((rng.random(rows.size), (rows, rng.integers(0, n, rows.size))), shape=(m, n))
                A.indices = A.indices.astype(index); A.indptr = A.indptr.astype(index)
                at = {"first": 0, "middle": A.nnz // 2, "last": A.nnz - 1}[where]
                A.indices[at] = {"n": n, "huge": np.iinfo(index).max}.get(value, value)
                before = A.indices.copy()
                try:
                    k(A, rng.random((n, cols)))
                    out = {"error": None}
                except sc.OperandError as err:
                    out = {"error": str(err)}
                out.update(case=[np.dtype(index).name, where, str(value), cols],
                           untouched=bool(np.array_equal(A.indices, before)))
                print(json.dumps(out), flush=True)
# X without rows: every stored entry is out of range
for cols in (0, 4, 32):
    A = sp.csr_array((np.ones(3000), np.zeros(3000, np.int64), np.arange(3001)), shape=(3000, 0))
    try:
        k(A, np.ones((0, cols)))
        out = {"error": None}
    except sc.OperandError as err:
        out = {"error": str(err)}
    out.update(case=["no-x-rows", "", "n", cols], untouched=bool((A.indices == 0).all()))
    print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("nthreads", [1, 2])
def test_bad_coordinates_raise_operand_error_in_a_subprocess(nthreads):
    r = subprocess.run([sys.executable, "-c", CHILD, str(nthreads)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0, f"exit status {r.returncode} after {len(lines)} cases:\n{r.stderr[-3000:]}"
    assert len(lines) == 2 * 3 * 3 * 4 + 3
    for c in lines:
        assert c["error"] is not None and "indices" in c["error"], c
        assert ("negative" if c["case"][2] == "-1" else "out of range") in c["error"], c
        assert c["untouched"], c
