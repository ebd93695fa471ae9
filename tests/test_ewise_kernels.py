"""The hand-written element-wise kernel (dialect/kernels/ewise.py: maps of one CSR/CSC
operand, unions and intersections of two with any element-wise body, their row sums) and
the transposed SpMV (dialect/kernels/scatter.py), against NumPy on dense copies: formats
(csr, csc fire the kernels; coo, dcsr and mixed ones run the sparsifier's and must agree),
dtypes, empty rows, stored zeros, NaN/inf, 1 and 2 threads.  Default: one case per
statement; the sweep is ``-m slow``."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.dialect.kernels import ewise
from sparsecc.runtime import threads

from conftest import random_values, seed as _seed

pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py

M, N = 37, 23


def _matrix(dtype, rng, *, special=False):
    """A sparse matrix with empty rows, a stored zero (and with ``special`` inf/NaN)."""
    d = (rng.random((M, N)) < 0.2)
    d[rng.integers(0, M, 6)] = False                     # empty rows
    rows, cols = np.nonzero(d)
    vals = random_values(len(rows), np.dtype(dtype), rng)
    if len(vals) > 3:
        vals[0] = 0                                     # an explicit stored zero
        if special and np.dtype(dtype).kind in "fc":
            vals[1], vals[2] = np.inf, np.nan
    return sp.coo_array((vals, (rows, cols)), shape=(M, N))


def _as(a, fmt):
    return {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array, "dcsr": sp.csr_array}[fmt](a)


#: (statement, NumPy on dense copies, sparse result, special values allowed (the dense
#: value where one operand stores nothing is the value the sparse rules give), dtypes)
CASES = {
    "scale": ("C[i,j] = 2 * B[i,j]", lambda A, B: 2 * B, True, True),
    "exp_chain": ("C[i,j] = exp(2 * A[i,j] + 1) * B[i,j]", lambda A, B: np.exp(2 * A + 1) * B, True, False),
    "sub_rows": ("y[i] = sum[j](A[i,j] - B[i,j])", lambda A, B: (A - B).sum(1), False, True),
    "square_rows": ("y[i] = sum[j](pow(A[i,j] - B[i,j], 2))", lambda A, B: ((A - B) ** 2).sum(1), False, True),
    "max": ("C[i,j] = max(A[i,j], B[i,j])", lambda A, B: np.maximum(A, B), True, True),
    "product": ("C[i,j] = A[i,j] * B[i,j]", lambda A, B: A * B, True, False),
    "product_rows": ("y[i] = sum[j](A[i,j] * B[i,j])", lambda A, B: (A * B).sum(1), False, False),
    "abs_rows": ("y[i] = sum[j](abs(A[i,j]))", lambda A, B: np.abs(A).sum(1), False, True),
}
DTYPES = ["float64", "float32", "int32", "int64", "complex128", "bool"]


def _skip(name, dtype):
    kind = np.dtype(dtype).kind
    return (name == "max" and kind == "c") or (name == "exp_chain" and kind in "biu") or \
        (kind == "b" and (name in ("scale",) or not CASES[name][2]))     # (a sum of bools is a bool here)


def _run(name, dtype, fa, fb, out_fmt, rng, *, special=False):
    text, ref, sparse_out, special_ok = CASES[name]
    A0, B0 = _matrix(dtype, rng, special=special and special_ok), _matrix(dtype, rng, special=special and special_ok)
    ops = {"A": _as(A0, fa), "B": _as(B0, fb)}
    ops = {k: v for k, v in ops.items() if f"{k}[" in text}
    named = {k: ("dcsr" if f == "dcsr" else None) for k, f in (("A", fa), ("B", fb)) if k in ops}
    k = sc.compile(text, out_format=out_fmt if sparse_out else None,
                   **{k: v for k, v in named.items() if v is not None})
    got = k(**ops)
    with np.errstate(all="ignore"):
        want = ref(A0.toarray(), B0.toarray())
    got_d = got.toarray() if sp.issparse(got) else got
    tol = 1e-5 if dtype in ("float32",) else 1e-10
    if np.dtype(dtype).kind in "biu" and not np.issubdtype(np.asarray(want).dtype, np.floating):
        np.testing.assert_array_equal(got_d, want)
    else:
        np.testing.assert_allclose(got_d, want, rtol=tol, atol=tol, equal_nan=True)
    return k, got, ops


def _handwritten(k) -> bool:
    return "linalg.generic" not in k.ir()


@pytest.mark.parametrize("name", list(CASES))
def test_each_statement_fires_and_agrees(name):
    """One dtype per statement, CSR operands and result: the kernel's IR is hand-written."""
    dtype = {"max": "int32", "product": "complex128", "sub_rows": "int64", "abs_rows": "float32"}.get(name, "float64")
    k, got, ops = _run(name, dtype, "csr", "csr", "csr", np.random.default_rng(_seed(name)), special=True)
    assert _handwritten(k)


def test_result_keeps_the_driving_pattern():
    """``2 * B`` and ``exp(2A + 1) * B`` store exactly B's entries (its stored zero too)."""
    rng = np.random.default_rng(_seed("pattern"))
    k, got, ops = _run("exp_chain", "float64", "csr", "csr", "csr", rng)
    B = ops["B"]
    assert np.array_equal(got.indptr, B.indptr) and np.array_equal(got.indices, B.indices)
    k, got, ops = _run("scale", "float64", "csr", "csr", "csr", rng)
    assert got.nnz == ops["B"].nnz and _handwritten(k)


def test_csc_and_two_threads():
    """CSC operands and result (and a column sum), the same values on 1 and 2 threads."""
    rng = np.random.default_rng(_seed("csc"))
    A, B = _as(_matrix("float64", rng), "csc"), _as(_matrix("float64", rng), "csc")
    k = sc.compile("C[i,j] = max(A[i,j], B[i,j])", out_format="csc")
    ks = sc.compile("y[j] = sum[i](A[i,j] - B[i,j])")
    outs = []
    threads.set_min_parallel_work(0)            # small operands: parallel loops all the same
    for th in (1, 2):
        sc.set_num_threads(th)
        outs.append((k(A=A, B=B), ks(A=A, B=B)))
    assert _handwritten(k) and _handwritten(ks) and outs[0][0].format == "csc"
    np.testing.assert_array_equal(outs[0][0].toarray(), np.maximum(A.toarray(), B.toarray()))
    np.testing.assert_array_equal(outs[0][0].toarray(), outs[1][0].toarray())
    np.testing.assert_allclose(outs[0][1], (A.toarray() - B.toarray()).sum(0), rtol=1e-12)
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


def test_other_formats_agree_without_the_kernel():
    """COO, DCSR and mixed CSR/CSC operands run the sparsifier's kernel, with the same values."""
    rng = np.random.default_rng(_seed("mixed"))
    for fa, fb in (("coo", "coo"), ("csr", "csc"), ("dcsr", "csr")):
        k, _, _ = _run("square_rows", "float64", fa, fb, "csr", rng)
        assert not _handwritten(k)


def test_match_refuses_full_patterns():
    """A body that is not 0 where neither operand stores (``A + 1``) is not this kernel's."""
    import dataclasses
    from sparsecc.formats import resolve
    from sparsecc.parse import parse_notation
    csr = dataclasses.replace(resolve("csr", 2), pos_width=32, crd_width=32)
    for text, fires in (("y[i] = sum[j](exp(A[i,j]))", False), ("y[i] = sum[j](sin(A[i,j]))", True),
                        ("y[i] = sum[j](A[i,j] + 1)", False), ("y[i] = sum[j](A[i,j] / 2)", True)):
        assert (ewise.match(parse_notation(text), (csr,), ("float64",), None) is not None) == fires, text


#: dense vectors along the outer index beside the sparse operands (read once a row): a
#: Jacobian's diagonal term ``L + lam * exp(u[i]) * Id``, a row scaling, a row sum
ROW_CASES = {
    "diagonal_term": ("C[i,j] = A[i,j] + s * exp(v[i]) * B[i,j]",
                      lambda A, B, v, s: A + s * np.exp(v)[:, None] * B),
    "row_scale": ("C[i,j] = v[i] * A[i,j]", lambda A, B, v, s: v[:, None] * A),
    "mixed": ("C[i,j] = sin(v[i] * A[i,j]) - B[i,j] * (v[i] + s)",
              lambda A, B, v, s: np.sin(v[:, None] * A) - B * (v + s)[:, None]),
    "row_sum": ("y[i] = sum[j](A[i,j] * exp(v[i]))", lambda A, B, v, s: (A * np.exp(v)[:, None]).sum(1)),
}


@pytest.mark.parametrize("name", list(ROW_CASES))
def test_dense_vectors_along_the_rows(name):
    """CSR operands with a dense ``v[i]`` (an inf in it: NumPy's NaN where ``inf * 0``) take
    the hand-written kernel on 1 and 2 threads, the same bits; CSC operands, where ``i`` is
    not the stored outer index, run the sparsifier's kernel and agree where values are finite."""
    text, ref = ROW_CASES[name]
    rng = np.random.default_rng(_seed(f"rows{name}"))
    A0, B0 = _matrix("float64", rng), _matrix("float64", rng)
    v, s = rng.standard_normal(M), 0.75
    v[3] = np.inf if name == "diagonal_term" else v[3]
    with np.errstate(all="ignore"):
        want = ref(A0.toarray(), B0.toarray(), v, s)
    if name == "diagonal_term":     # inf * 0 is NaN on the stored entries; the others stay 0
        union = np.zeros((M, N), bool)
        union[A0.row, A0.col] = union[B0.row, B0.col] = True
        want = np.where(union, want, 0.0)
    k = sc.compile(text, out_format=None if name == "row_sum" else "csr")
    every = {"A": sp.csr_array(A0), "B": sp.csr_array(B0), "v": v, "s": s}
    ops = {n: every[n] for n in k.stmt.operands}
    threads.set_min_parallel_work(0)
    outs = []
    for th in (1, 2):
        sc.set_num_threads(th)
        got = k(**ops)
        outs.append(got.toarray() if sp.issparse(got) else got)
        np.testing.assert_allclose(outs[-1], want, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert _handwritten(k) and outs[0].tobytes() == outs[1].tobytes()
    if name == "diagonal_term":            # the result stores the union of A and B, no more
        assert k(**ops).nnz == union.sum() and np.isnan(outs[0][3][union[3] & (B0.toarray()[3] == 0)]).all()
        ops["v"] = np.where(np.isfinite(v), v, 0.0)
        want = ref(A0.toarray(), B0.toarray(), ops["v"], s)
    kc = sc.compile(text, out_format=None if name == "row_sum" else "csc")
    with np.errstate(all="ignore"):
        got = kc(**{n: sp.csc_array(x) if n in "AB" else x for n, x in ops.items()})
    assert not _handwritten(kc)
    np.testing.assert_allclose(got.toarray() if sp.issparse(got) else got, want, rtol=1e-12, atol=1e-12)


def test_dense_vectors_along_csc_columns():
    """CSC operands: the stored outer index is the column, so ``v[j]`` is read once a column."""
    rng = np.random.default_rng(_seed("rows-csc"))
    A, B = _as(_matrix("float64", rng), "csc"), _as(_matrix("float64", rng), "csc")
    v = rng.standard_normal(N)
    k = sc.compile("C[i,j] = A[i,j] + exp(v[j]) * B[i,j]", out_format="csc")
    got = k(A=A, B=B, v=v)
    assert _handwritten(k) and got.format == "csc"
    np.testing.assert_allclose(got.toarray(), A.toarray() + np.exp(v)[None, :] * B.toarray(), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "int64", "complex128", "float32"])
def test_transposed_spmv(dtype):
    """``y = A.T @ (x * w) * s`` over a CSR ``A`` (the scatter kernel) on 1 and 2 threads."""
    rng = np.random.default_rng(_seed(f"scatter{dtype}"))
    A = _as(_matrix(dtype, rng), "csr")
    x, w = random_values(M, np.dtype(dtype), rng), random_values(M, np.dtype(dtype), rng)
    s = np.asarray(random_values(1, np.dtype(dtype), rng)[0])
    k = sc.compile("y[i] = sum[j](A[j,i] * x[j] * w[j] * s)")
    want = A.toarray().T @ (x * w * s)
    threads.set_min_parallel_work(0)
    for th in (1, 2):
        sc.set_num_threads(th)
        got = k(A=A, x=x, w=w, s=s)
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12)
    assert "linalg.generic" not in k.ir()
    got = sc.einsum("ji,j->i", A, x)
    np.testing.assert_allclose(got, A.toarray().T @ x, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_transposed_spmv_blocks_many_threads():
    """A matrix with many entries per column runs in blocks (8 here): the same bits on 1, 2
    and 4 threads and from the serial kernel; an empty matrix gives zeros."""
    rng = np.random.default_rng(_seed("blocks"))
    A = sp.random_array((400, 5), density=0.7, format="csr", rng=rng)
    A.data[:5] = 0.0
    x = rng.random(400)
    k = sc.compile("y[i] = sum[j](A[j,i] * x[j])")
    ref = sc.compile("y[i] = sum[j](A[j,i] * x[j])", options=sc.Options(parallel="none"))(A=A, x=x)
    threads.set_min_parallel_work(0)
    for th in (1, 2, 4):
        sc.set_num_threads(th)
        got = k(A=A, x=x)
        np.testing.assert_allclose(got, A.T @ x, rtol=1e-12)
        assert got.tobytes() == ref.tobytes()
    assert "%ws = memref.alloc" in k.ir()
    assert np.array_equal(k(A=sp.csr_array((9, 4)), x=np.ones(9)), np.zeros(4))


@pytest.mark.slow
@pytest.mark.parametrize("name,dtype,fmt", [(n, d, f) for n, d, f in itertools.product(CASES, DTYPES, ("csr", "csc"))
                                            if not _skip(n, d)])
def test_sweep(name, dtype, fmt):
    k, _, _ = _run(name, dtype, fmt, fmt, fmt, np.random.default_rng(_seed(f"{name}{dtype}{fmt}")), special=True)
    # (a row sum of CSC operands reduces over their stored outer level: not a merge per row)
    assert _handwritten(k) == (CASES[name][2] or fmt == "csr")
