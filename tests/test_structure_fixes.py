"""Statements that compiled wrong or not at all (kernel structure: operands, formats,
reductions), each checked against an oracle that shares no code with sparsecc: numpy.einsum
on dense copies, or loops written out over the stored entries (GraphBLAS's semantics: only
stored entries take part; an output entry with no term gets the monoid's identity)."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

IDENT = {"plus": 0, "times": 1, "min": np.inf, "max": -np.inf, "lor": False, "land": True}
ADD = {"plus": lambda a, b: a + b, "times": lambda a, b: a * b, "min": min, "max": max,
       "lor": lambda a, b: bool(a) or bool(b), "land": lambda a, b: bool(a) and bool(b)}


def _stored(x):
    """(dense copy, mask of stored entries) of a scipy array or a numpy array (all stored)."""
    if isinstance(x, np.ndarray):
        return x, np.ones(x.shape, bool)
    c = sp.coo_array(x)
    mask = np.zeros(c.shape, bool)
    mask[c.coords] = True
    return c.toarray(), mask


def _row_reduce(x, op, axis):
    """op over ``axis`` of a 2-d operand's stored entries, identity where none (loops)."""
    d, m = _stored(x)
    if axis == 0:
        d, m = d.T, m.T
    out = []
    for r in range(d.shape[0]):
        acc = IDENT[op]
        for c in range(d.shape[1]):
            if m[r, c]:
                acc = ADD[op](acc, d[r, c])
        out.append(acc)
    return np.array(out)


M = np.array([[5.0, 0.0, 1.0, 0.0],
              [0.0, 3.0, 0.0, 0.0],
              [0.0, 0.0, 0.0, 0.0],
              [-2.0, 0.0, 0.0, 7.0]])


# ------------------------------------------------------------------ 2: block formats
@pytest.mark.parametrize("op", ["max", "min", "plus"])
@pytest.mark.parametrize("axis", [0, 1])
def test_monoid_over_bsr_sees_every_block(op, axis):
    B = sp.bsr_array(M, blocksize=(2, 2))
    stmt = f"y[i] = {op}[j](A[i,j])" if axis == 1 else f"y[j] = {op}[i](A[i,j])"
    got = sc.evaluate(stmt, A=B)
    np.testing.assert_array_equal(got, _row_reduce(B, op, axis))


def test_bsr_issue_example_and_semiring():
    B = sp.bsr_array(M[:2], blocksize=(2, 2))
    np.testing.assert_array_equal(sc.ops.amax(B, axis=1), [5, 3])
    x = np.arange(4.0)
    d, m = _stored(B)              # both 2x2 blocks are stored: every entry, zeros included
    assert m.all()
    want = [max(d[i, j] + x[j] for j in range(4)) for i in range(2)]
    np.testing.assert_array_equal(sc.einsum("ij,j->i", B, x, semiring="max_plus"), want)


@pytest.mark.parametrize("fmt", ["csf", "coo", "dense-trailing"])
def test_monoid_over_3d_formats_with_dense_levels(fmt):
    rng = np.random.default_rng(2)
    T = np.where(rng.random((3, 4, 2)) < 0.3, rng.integers(1, 9, (3, 4, 2)), 0).astype(float)
    x = sp.coo_array(T)
    spec = {"csf": "csf", "coo": "coo",
            "dense-trailing": "(i, j, k) -> (i : compressed(nonunique), j : singleton, k : dense)"}[fmt]
    d, m = _stored(x)
    if fmt == "dense-trailing":      # the trailing dense level stores every k of a stored (i, j)
        m = np.repeat(m.any(axis=2, keepdims=True), 2, axis=2)
    want = np.full((3, 2), -np.inf)
    for i, j, k in zip(*np.nonzero(m)):
        want[i, k] = max(want[i, k], d[i, j, k])
    got = sc.compile("y[i,k] = max[j](T[i,j,k])", out_format="dense", T=spec)(T=x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("spec", ["(i, j) -> (i : compressed, j : dense)", "(i, j) -> (j : compressed, i : dense)"])
@pytest.mark.parametrize("axis", [0, 1])
def test_monoid_over_2d_hybrid_formats(spec, axis):
    D = np.array([[0.0, 4.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 0.0, 2.0]])
    m = np.zeros(D.shape, bool)           # a dense level stores every entry below a stored parent
    if "i : compressed" in spec:
        m[D.any(axis=1)] = True
    else:
        m[:, D.any(axis=0)] = True
    dd, mm = (D, m) if axis == 1 else (D.T, m.T)
    want = [max([v for v, s in zip(r, q) if s], default=-np.inf) for r, q in zip(dd, mm)]
    stmt = "y[i] = max[j](A[i,j])" if axis == 1 else "y[j] = max[i](A[i,j])"
    np.testing.assert_array_equal(sc.compile(stmt, A=spec)(A=sp.coo_array(D)), want)


# ------------------------------------------------------------------ 3: land on non-bool values
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("fmt", [sp.csr_array, sp.csc_array, sp.coo_array])
def test_land_sees_stored_entries_only(dtype, fmt):
    A = fmt(np.array([[1, 2], [0, 3], [0, 0]], dtype=dtype))
    np.testing.assert_array_equal(sc.evaluate("y[i] = land[j](A[i,j])", A=A), [True, True, True])
    np.testing.assert_array_equal(sc.einsum("ij,j->i", A, np.zeros(2, dtype), semiring="land_lor"),
                                  [True, True, True])
    # a stored zero is False
    S = fmt(sp.coo_array((np.array([1, 0], dtype), (np.array([0, 1]), np.array([0, 1]))), shape=(2, 2)))
    np.testing.assert_array_equal(sc.evaluate("y[i] = land[j](A[i,j])", A=S), [True, False])


# ------------------------------------------------------------------ 4: identity without contraction
@pytest.mark.parametrize("semiring", ["min_plus", "max_plus", "land_lor", "max_min"])
@pytest.mark.parametrize("fmt", ["coo", "csr", "csc"])
def test_semiring_without_contraction_fills_identity(semiring, fmt):
    add, mul = semiring.split("_")
    F = {"plus": np.add, "times": np.multiply, "min": np.minimum, "lor": np.logical_or,
         "land": np.logical_and}[mul]
    A = sp.coo_array(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 4.0]])).asformat(fmt)
    B = sp.coo_array(np.array([[3.0, 5.0, 0.0], [0.0, 0.0, 1.0]])).asformat(fmt)
    x = np.array([2.0, -1.0])
    for sub, ops in (("ij,ij->ij", (A, B)), ("kj,k->kj", (A, x)), ("j,j->j", (sp.coo_array(A.toarray()[0]),
                                                                             np.array([1.0, 2.0, 3.0])))):
        got = sc.einsum(sub, *ops, semiring=semiring, out_format="dense")
        dense = [_stored(o) for o in ops]
        ins = sub.split("->")[0].split(",")
        shape = got.shape
        want = np.empty(shape, dtype=got.dtype)
        for pos in np.ndindex(*shape):
            env = dict(zip(sub.split("->")[1], pos))
            vals = [d[tuple(env[c] for c in s)] for (d, _), s in zip(dense, ins)]
            present = all(m[tuple(env[c] for c in s)] for (_, m), s in zip(dense, ins))
            want[pos] = F(*vals) if present else IDENT[add]
        np.testing.assert_array_equal(got, want, err_msg=f"{sub} {semiring} {fmt}")


# ------------------------------------------------------------------ 5: sparse with a broadcast dense vector
def _operand(fmt, D):
    if fmt == "bsr":
        return sp.bsr_array(D, blocksize=(2, 2))
    return {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array, "dcsr": sp.csr_array}[fmt](D)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "bsr"])
@pytest.mark.parametrize("stmt, oracle", [
    ("C[i,j] = A[i,j] + y[i]", lambda D, y, z: D + y[:, None]),
    ("C[i,j] = A[i,j] - z[j]", lambda D, y, z: D - z[None, :]),
    ("C[i,j] = y[i] - A[i,j]", lambda D, y, z: y[:, None] - D),
    ("C[i,j] = max(A[i,j], y[i])", lambda D, y, z: np.maximum(D, y[:, None])),
    ("C[i,j] = min(A[i,j], z[j])", lambda D, y, z: np.minimum(D, z[None, :])),
    ("C[i,j] = A[i,j] < y[i]", lambda D, y, z: D < y[:, None]),
    ("x[i] = sum[j](A[i,j] - y[i])", lambda D, y, z: (D - y[:, None]).sum(axis=1)),
    ("x[j] = sum[i](A[i,j] + z[j])", lambda D, y, z: (D + z[None, :]).sum(axis=0)),
])
def test_sparse_plus_broadcast_vector(fmt, stmt, oracle):
    rng = np.random.default_rng(5)
    D = np.where(rng.random((4, 6)) < 0.4, rng.random((4, 6)), 0.0)
    y, z = rng.random(4) - 0.5, rng.random(6) - 0.5
    k = sc.compile(stmt, A="dcsr") if fmt == "dcsr" else sc.compile(stmt)
    ops = {n: v for n, v in dict(A=_operand(fmt, D), y=y, z=z).items() if f"{n}[" in stmt}
    np.testing.assert_allclose(k(**ops), oracle(D, y, z))


# ------------------------------------------------------------------ 1: repeated indices next to other operands
# opt_einsum's own test expressions with a repeated index (the 8 that failed with COO first)
REPEATED = ["ab,bcc->ac", "bb,ff,be->e", "fbb,dfd,fc,fc->", "ecb,fef,bad,ed->ac", "bcf,bbb,fbf,fc->",
            "bcb,bb,fc,fff->", "dd,fb,be,cdb->cef", "aab,ccb->ac", "fdf,cdd,ccd,afe->ae", "baa,dcf,af,cde->be"]


def _einsum_operands(sub, kinds, seed=1):
    rng = np.random.default_rng(seed)
    ins = sub.split("->")[0].split(",")
    sizes = {c: 2 + (ord(c) % 3) for c in set(sub) if c.isalpha()}
    ops, dense, fmts = [], [], []
    for s, kind in zip(ins, kinds):
        shape = [sizes[c] for c in s]
        D = np.where(rng.random(shape) < 0.5, rng.integers(1, 5, shape), 0).astype(float)
        dense.append(D)
        if kind == "dense" or len(s) == 1:
            ops.append(D)
        elif len(s) == 2 and kind in ("csr", "csc"):
            ops.append(sp.csr_array(D) if kind == "csr" else sp.csc_array(D))
        else:
            ops.append(sp.coo_array(D))
        fmts.append("csf" if kind == "csf" and len(s) == 3 else None)
    return ops, dense, tuple(fmts)


@pytest.mark.parametrize("sub", REPEATED)
@pytest.mark.parametrize("mix", ["coo,dense", "dense,coo", "csr,dense", "csc,dense", "csf,dense"])
def test_repeated_index_next_to_other_operands(sub, mix):
    kinds = mix.split(",")
    n = len(sub.split("->")[0].split(","))
    kinds = [kinds[k % len(kinds)] for k in range(n)]
    ops, dense, fmts = _einsum_operands(sub, kinds)
    got = sc.einsum(sub, *ops, formats=fmts)
    got = got.toarray() if hasattr(got, "toarray") else got
    np.testing.assert_allclose(got, np.einsum(sub, *dense))


# ------------------------------------------------------------------ 6, 7: lor_pair SpMV, a mul ignoring a side
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("sub", ["ij,j->i", "ji,j->i"])
def test_lor_pair_spmv(sub, dtype):
    A = sp.csr_array(np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0]], dtype=dtype))
    want = np.array([True, False, True]) if sub == "ij,j->i" else np.array([True, True, True])
    np.testing.assert_array_equal(sc.einsum(sub, A, np.zeros(3, dtype), semiring="lor_pair"), want)


@pytest.mark.parametrize("mul, fn", [("b", lambda a, b: b), ("a", lambda a, b: a), ("b * 2 - 1", lambda a, b: b * 2 - 1)])
def test_multiply_that_ignores_a_side(mul, fn):
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, 0.0], [2.0, 3.0]]))
    B = sp.csr_array(np.array([[0.0, 4.0], [6.0, 0.0]]))
    x = np.array([5.0, 7.0])
    Ad, Am = _stored(A)
    Bd, Bm = _stored(B)
    want_v = [sum(fn(Ad[i, j], x[j]) for j in range(2) if Am[i, j]) for i in range(3)]
    want_m = [[sum(fn(Ad[i, j], Bd[j, k]) for j in range(2) if Am[i, j] and Bm[j, k]) for k in range(2)]
              for i in range(3)]
    s = sc.Semiring(add="plus", mul=mul)
    np.testing.assert_array_equal(sc.einsum("ij,j->i", A, x, semiring=s), want_v)
    np.testing.assert_array_equal(sc.einsum("ij,jk->ik", A, B, semiring=s).toarray(), want_m)


# ------------------------------------------------------------------ the sweep: semirings x formats x dtypes
from _semiring_sweep import cases as _sweep_cases  # noqa: E402
from _semiring_sweep import check as _sweep_check  # noqa: E402


@pytest.mark.parametrize("semiring, fmt, dtype, sub", _sweep_cases(30, 12))
def test_semiring_sweep(semiring, fmt, dtype, sub):
    try:
        _sweep_check(semiring, fmt, dtype, sub, seed=12)
    except sc.DTypeError as err:        # minus of bools: numpy refuses it too
        assert np.dtype(dtype) == np.bool_ and "minus" in semiring, err
