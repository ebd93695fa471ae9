"""Malformed operands end in a SparseccError before native code runs - never a signal.

Each case runs in its own subprocess, so a crash fails that case instead of killing the suite.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETUP = """
import numpy as np, scipy.sparse as sp, sparsecc as sc
x3 = np.ones(3)
def csr():
    return sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]]))
"""

# (case id, code that must raise a SparseccError, text the message must contain)
CASES = [
    ("csr index too large", "A = csr(); A.indices[1] = 7; sc.einsum('ij,j->i', A, x3)", "index 7"),
    ("csr index huge", "A = csr(); A.indices[0] = 2**30; sc.einsum('ij,j->i', A, x3)", "out of range"),
    ("csr index negative", "A = csr(); A.indices[2] = -5; sc.einsum('ij,j->i', A, x3)", "negative"),
    ("indptr not from 0", "A = csr(); A.indptr[0] = 1; sc.einsum('ij,j->i', A, x3)", "start at 0"),
    ("indptr decreasing", "A = csr(); A.indptr[1] = 3; A.indptr[2] = 2; sc.einsum('ij,j->i', A, x3)",
     "decreases"),
    ("indptr past nnz", "A = csr(); A.indptr[-1] = 9; sc.einsum('ij,j->i', A, x3)", "indptr ends at 9"),
    ("indptr too short", "A = csr(); A.indptr = A.indptr[:-1]; sc.einsum('ij,j->i', A, x3)", "indptr has"),
    ("data too short", "A = csr(); A.data = A.data[:2]; sc.einsum('ij,j->i', A, x3)", "data has 2"),
    ("csc row index", "A = csr().tocsc(); A.indices[0] = 3; sc.einsum('ij,j->i', A, x3)", "index 3"),
    ("csr as dcsc", "A = csr(); A.indices[0] = 9; sc.einsum('ij,j->i', A, x3, formats=['dcsc', None])",
     "index 9"),
    ("sparse result", "A = csr(); A.indices[0] = 9; sc.einsum('ik,kj->ij', A, csr())", "index 9"),
    ("coo coordinate", "A = csr().tocoo(); A.coords[1][0] = 4; sc.einsum('ij,j->i', A, x3)", "index 4"),
    ("coo negative", "A = csr().tocoo(); A.coords[0][2] = -1; sc.einsum('ij,j->i', A, x3)", "negative"),
    ("coo lengths", "A = csr().tocoo(); A.coords = (A.coords[0][:2], A.coords[1]); "
                    "sc.einsum('ij,j->i', A, x3)", "entries"),
    ("nd coo coordinate",
     "T = sp.coo_array(np.ones((2, 2, 2))); T.coords[2][3] = 5; sc.einsum('ijk->', T)", "dimension 2"),
    ("bsr index", "B = sp.bsr_array(np.ones((4, 4)), blocksize=(2, 2)); B.indices[0] = 6; "
                  "sc.einsum('ij,j->i', B, np.ones(4))", "index 6"),
    ("shape mismatch", "sc.einsum('ij,j->i', csr(), np.ones(4))", "size"),
    ("float16", "sc.einsum('ij,j->i', csr(), np.ones(3, dtype=np.float16))", "float16"),
    ("object array", "sc.einsum('ij,j->i', csr(), np.array(['a', 'b', 'c'], dtype=object))", "dtype object"),
    ("strings", "sc.einsum('ij,j->i', csr(), 'abc')", ""),
    ("too few operands", "sc.einsum('ij,j->i', csr())", "operand"),
    ("32-bit width overflow",
     "A = sp.csr_array((np.ones(1), np.array([2**31 + 5], dtype=np.int64), np.array([0, 1])), "
     "shape=(1, 2**32)); "
     "f = sc.Format(('dense', 'compressed'), pos_width=32, crd_width=32); "
     "sc.einsum('ij->i', A, formats=[f])", "32-bit"),
]


def _run(code: str) -> subprocess.CompletedProcess:
    script = SETUP + textwrap.dedent(f"""
    try:
        {code}
    except sc.SparseccError as err:
        assert isinstance(err, ValueError)
        print("SparseccError", type(err).__name__, err)
    else:
        print("NO ERROR")
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.mark.parametrize("code,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_operand_raises_in_a_subprocess(code, needle):
    r = _run(code)
    assert r.returncode == 0, f"exit status {r.returncode} (a signal is negative):\n{r.stderr[-2000:]}"
    assert r.stdout.startswith("SparseccError"), r.stdout + r.stderr[-2000:]
    assert needle in r.stdout, r.stdout


def test_operands_are_untouched_and_check_false_skips_validation():
    A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]]))
    before = [A.data.copy(), A.indices.copy(), A.indptr.copy()]
    A.indices[1] = 9
    with pytest.raises(sc.OperandError, match="operand 0"):
        sc.einsum("ij,j->i", A, np.ones(3))
    A.indices[1] = 2
    for got, want in zip([A.data, A.indices, A.indptr], before):
        np.testing.assert_array_equal(got, want)
    k = sc.compile("ij,j->i", "csr", "dense", check=False)     # trusted input: no validation
    np.testing.assert_allclose(k(A, np.ones(3)), A @ np.ones(3))
    assert not k.check and sc.compile("ij,j->i", "csr", "dense").check


def test_non_contiguous_dense_operands_are_copied():
    A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0]]))
    X = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    x = np.arange(6.0)[::2]
    np.testing.assert_allclose(sc.einsum("ij,jk->ik", A, X), A @ X)
    np.testing.assert_allclose(sc.einsum("ij,j->i", A, x), A @ x)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
def test_empty_operands(shape):
    A = sp.csr_array(shape)
    x = np.ones(shape[1])
    assert sc.einsum("ij,j->i", A, x).shape == (shape[0],)
    C = sc.einsum("ik,kj->ij", A, sp.csr_array((shape[1], 2)))
    assert C.shape == (shape[0], 2) and C.nnz == 0
    assert sc.einsum("ij->", A) == 0


def test_nan_and_inf_propagate_like_numpy():
    A = sp.csr_array(np.array([[np.nan, 0, 1], [0, np.inf, 0], [-np.inf, 0, 2]]))
    x = np.array([1.0, 2.0, 0.0])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(sc.einsum("ij,j->i", A, x), A.toarray() @ x)
        C = sc.einsum("ik,kj->ij", A, A)
        want = sp.csr_array(A) @ sp.csr_array(A)
    np.testing.assert_array_equal(C.toarray(), want.toarray())


@pytest.mark.parametrize("expr,out", [("ijk,k->ij", None), ("ijk,k->ij", "dense"), ("ijk,jr,kr->ir", None),
                                      ("ijk->ik", "coo")])
def test_a_large_coo_wrongly_flagged_canonical_follows_the_scan(expr, out):
    """SciPy's has_canonical_format set True on unsorted coordinates with duplicates: the
    sparse-result TTV trusted the flag (so did SciPy's own sum_duplicates) and returned wrong
    entries although validation's native scan had just found the order.  From NATIVE_MIN
    entries on, the scan wins; the user's operand keeps its (wrong) flag and buffers."""
    from sparsecc.runtime.validate import NATIVE_MIN
    rng = np.random.default_rng(4)
    nnz = NATIVE_MIN + 100
    c = rng.integers(0, 20, size=(3, nnz))
    A = sp.coo_array((rng.random(nnz), tuple(c)), shape=(20, 20, 20))
    A.has_canonical_format = True
    before = [a.copy() for a in (A.data, *A.coords)]
    D = np.zeros((20, 20, 20))
    np.add.at(D, tuple(c), A.data)
    ops = [A] + [rng.random((20, 16)) if t == "jr" or t == "kr" else rng.random(20)
                 for t in expr.split("->")[0].split(",")[1:]]
    got = sc.einsum(expr, *ops, out_format=out)
    got = got.toarray() if hasattr(got, "toarray") else (got.todense() if hasattr(got, "todense") else got)
    np.testing.assert_allclose(got, np.einsum(expr, D, *ops[1:]), rtol=1e-10, atol=1e-12)
    assert A.has_canonical_format and all((a == b).all() for a, b in zip(before, (A.data, *A.coords)))
