"""A sparse result's position width follows a bound on the entries it can store, known
before the kernel runs (element-wise unions: the operands' stored entries summed; SpGEMM:
the products A's entries can make), not its dimensions' product: a 100k x 100k ``A + B``
keeps 32-bit positions.  64-bit whenever the bound exceeds ``kernel.POS32_MAX`` (made small
here by monkeypatching, so the tests stay small), and a repeated call whose bound crosses it
never reuses the other width's plan."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import kernel as kernel_mod

from conftest import random_values


def _csr(shape, nnz, rng, dtype="float64", width=np.int64):
    m, n = shape
    key = np.unique(rng.integers(0, m * n, nnz)) if m * n else np.zeros(0, np.int64)
    rows, cols = key // n if n else key, key % n if n else key
    a = sp.csr_array((random_values(len(key), dtype, rng), (rows, cols)), shape=shape)
    a.indptr, a.indices = a.indptr.astype(width), a.indices.astype(width)
    return a


def _exactly(got, want):
    """Same pattern and values as SciPy's (rows in order; entries that cancel stay stored)."""
    want = sp.csr_array(want)
    want.sort_indices()
    assert got.format == "csr" and got.shape == want.shape
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.data, want.data, rtol=1e-12, atol=0)


def _pos_width(k) -> int:
    return k.last_specialization().out_format.pos_width


def _structural_add(A, B):
    """A + B with every entry of the union stored (SciPy drops cancelled ones)."""
    s = (abs(A).astype(bool).astype(np.int8) + abs(B).astype(bool).astype(np.int8)).tocsr()
    dense = A.toarray() + B.toarray() if A.shape[0] * A.shape[1] <= 10**6 else None
    return s, dense


@pytest.mark.parametrize("width", [np.int32, np.int64])
def test_large_add_keeps_32_bit_positions(width):
    rng = np.random.default_rng(1)
    A, B = _csr((100_000, 100_000), 3000, rng, width=width), _csr((100_000, 100_000), 2000, rng, width=width)
    k = sc.compile("C[i,j] = A[i,j] + B[i,j]")
    C = k(A, B)
    assert _pos_width(k) == 32 and C.indptr.dtype == np.int32
    assert C.indices.dtype == np.int32        # coordinates: 32-bit since each dimension fits
    _exactly(C, A + B)
    C2 = k(A, B)                              # the repeated-call path: the same plan
    assert C2.indptr.dtype == np.int32
    _exactly(C2, A + B)


def test_large_spgemm_keeps_32_bit_positions():
    rng = np.random.default_rng(2)
    A, B = _csr((60_000, 60_000), 20_000, rng), _csr((60_000, 60_000), 20_000, rng)
    k = sc.compile("ik,kj->ij")
    C = k(A, B)
    assert _pos_width(k) == 32 and C.indptr.dtype == np.int32
    _exactly(C, A @ B)


@pytest.mark.parametrize("op", ["+", "-"])
def test_union_bound_just_over_gets_64_bits(monkeypatch, op):
    rng = np.random.default_rng(3)
    A, B = _csr((60, 70), 300, rng), _csr((60, 70), 200, rng)
    bound = A.nnz + B.nnz
    k = sc.compile(f"C[i,j] = A[i,j] {op} B[i,j]", options=sc.Options(opt_level=2))
    want = A + B if op == "+" else A - B
    for limit, w in ((bound, 32), (bound - 1, 64), (bound, 32), (bound - 1, 64)):
        monkeypatch.setattr(kernel_mod, "POS32_MAX", limit)
        for _ in range(2):                    # the second call: the repeated-call path
            C = k(A, B)
            assert _pos_width(k) == w and C.indptr.dtype == np.dtype(f"int{w}")
            np.testing.assert_allclose(C.toarray(), want.toarray())
            assert C.nnz == _structural_add(A, B)[0].nnz


def test_union_bound_crossing_between_calls_of_one_kernel(monkeypatch):
    """Operands whose stored entries move the bound across the threshold between calls:
    the plan made for the first call (32-bit positions) is not reused for the second."""
    rng = np.random.default_rng(4)
    monkeypatch.setattr(kernel_mod, "POS32_MAX", 500)
    k = sc.compile("C[i,j] = A[i,j] + B[i,j]", options=sc.Options(opt_level=2))
    small = (_csr((50, 40), 200, rng), _csr((50, 40), 250, rng))
    large = (_csr((50, 40), 300, rng), _csr((50, 40), 300, rng))
    for ops, w in ((small, 32), (small, 32), (large, 64), (large, 64), (small, 32), (large, 64)):
        C = k(*ops)
        assert C.indptr.dtype == np.dtype(f"int{w}") and _pos_width(k) == w
        np.testing.assert_allclose(C.toarray(), (ops[0] + ops[1]).toarray())


@pytest.mark.parametrize("shape,nnz", [((300, 250, 280), (20, 30)), ((80, 90, 70), (400, 500))])
def test_spgemm_bound_just_over_gets_64_bits(monkeypatch, shape, nnz):
    """Each bound in turn as the threshold: nnz(A) * nnz(B), nnz(A) times B's longest row,
    the exact count of products; 32-bit positions at each, 64-bit just under the last."""
    rng = np.random.default_rng(5)
    m, kk, n = shape
    A, B = _csr((m, kk), nnz[0], rng), _csr((kk, n), nnz[1], rng)
    exact = int(np.diff(B.indptr)[A.indices].sum())
    limits = [A.nnz * B.nnz, A.nnz * int(np.diff(B.indptr).max()), exact]
    k = sc.compile("ik,kj->ij", options=sc.Options(opt_level=2))
    want = A @ B
    for limit, w in [(x, 32) for x in limits if x < m * n] + [(exact - 1, 64)]:
        monkeypatch.setattr(kernel_mod, "POS32_MAX", limit)
        for _ in range(2):                    # the second call: the repeated-call path
            C = k(A, B)
            assert _pos_width(k) == w and C.indptr.dtype == np.dtype(f"int{w}")
            _exactly(C, want)
            assert C.nnz <= limit or w == 64


def test_spgemm_bound_crossing_between_calls(monkeypatch):
    rng = np.random.default_rng(6)
    A, B = _csr((40, 40), 150, rng), _csr((40, 40), 150, rng)
    exact = int(np.diff(B.indptr)[A.indices].sum())
    monkeypatch.setattr(kernel_mod, "POS32_MAX", exact)
    k = sc.compile("ik,kj->ij", options=sc.Options(opt_level=2))
    B2 = B.copy()
    B2[0, :] = 1.0                                # a long row: more products
    B2 = sp.csr_array(B2)
    B2.indptr, B2.indices = B2.indptr.astype(np.int64), B2.indices.astype(np.int64)
    assert int(np.diff(B2.indptr)[A.indices].sum()) > exact or (A.indices != 0).all()
    for b in (B, B, B2, B2, B):
        C = k(A, b)
        over = int(np.diff(b.indptr)[A.indices].sum()) > exact
        assert C.indptr.dtype == (np.int64 if over else np.int32)
        np.testing.assert_allclose(C.toarray(), (A @ b).toarray())


def test_other_statements_keep_the_dimensions_rule(monkeypatch):
    """A result with no known bound (here the sum with a broadcast) keeps the rule of its
    dimensions' product."""
    rng = np.random.default_rng(7)
    A, v = _csr((30, 40), 100, rng), _csr((1, 40), 10, rng)
    k = sc.compile("C[i,j] = A[i,j] + V[j]", out_format="csr", options=sc.Options(opt_level=2))
    monkeypatch.setattr(kernel_mod, "POS32_MAX", 30 * 40)
    vv = np.asarray(v.toarray()[0])
    C = k(A, vv)
    assert C.indptr.dtype == np.int32
    monkeypatch.setattr(kernel_mod, "POS32_MAX", 30 * 40 - 1)
    C = k(A, vv)
    assert C.indptr.dtype == np.int64
    np.testing.assert_allclose(C.toarray(), A.toarray() + vv)


def test_large_sddmm_keeps_32_bit_positions():
    """SDDMM's result is on its mask's pattern: at most nnz(A) entries, whatever m x n."""
    rng = np.random.default_rng(11)
    A = _csr((100_000, 100_000), 3000, rng)
    X, Y = rng.random((100_000, 4)), rng.random((100_000, 4))
    k = sc.compile("ij,ik,jk->ij")
    for _ in range(2):                        # the second call: the repeated-call path
        C = k(A, X, Y)
        assert _pos_width(k) == 32 and C.indptr.dtype == np.int32
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        want = sp.csr_array((A.data * np.einsum("ij,ij->i", X[rows], Y[A.indices]), A.indices, A.indptr),
                            shape=A.shape)
        _exactly(C, want)


@pytest.mark.parametrize("expr,out,dense_v", [("C[i,j] = A[i,j] * V[j]", "csr", True),
                                              ("C[i,j] = X[j] * (A[i,j] * B[i,j])", "dcsr", True),
                                              ("ij,ik,jk->ij", None, False)])
def test_mask_bound_just_over_gets_64_bits(monkeypatch, expr, out, dense_v):
    """A product with a factor indexed like the result stores at most that factor's
    entries: 32-bit positions at exactly nnz, 64-bit just under it, also across calls."""
    rng = np.random.default_rng(12)
    A, B = _csr((30, 40), 100, rng), _csr((30, 40), 300, rng)
    v = rng.random(40)
    X, Y = rng.random((30, 3)), rng.random((40, 3))
    if "sum" in expr or "->" in expr:
        args, want = (A, X, Y), A.toarray() * (X @ Y.T)
        bound = A.nnz
    elif "B" in expr:
        args, want = dict(A=A, B=B, X=v), v * (A.toarray() * B.toarray())
        bound = min(A.nnz, B.nnz)
    else:
        args, want = dict(A=A, V=v), A.toarray() * v
        bound = A.nnz
    k = sc.compile(expr, out_format=out, options=sc.Options(opt_level=2))
    for limit, w in ((bound, 32), (bound - 1, 64), (bound, 32), (bound - 1, 64)):
        monkeypatch.setattr(kernel_mod, "POS32_MAX", limit)
        for _ in range(2):                    # the second call: the repeated-call path
            C = k(**args) if isinstance(args, dict) else k(*args)
            assert _pos_width(k) == w
            np.testing.assert_allclose(sp.csr_array(C).toarray(), want, rtol=1e-12)


def test_index_width_32_allowed_when_the_bound_fits():
    rng = np.random.default_rng(8)
    A, B = _csr((100_000, 100_000), 1000, rng), _csr((100_000, 100_000), 1000, rng)
    k = sc.compile("C[i,j] = A[i,j] + B[i,j]", options=sc.Options(index_width=32))
    C = k(A, B)
    assert C.indptr.dtype == np.int32
    _exactly(C, A + B)


@pytest.mark.parametrize("op", ["reshape", "slice", "vstack"])
def test_gathers_keep_32_bit_positions(op):
    """The op library's gather kernels (slices, reshapes, concatenation) store at most their
    operands' entries: a 100k x 100k operand's reshape keeps 32-bit positions too."""
    rng = np.random.default_rng(9)
    A = _csr((100_000, 100_000), 2000, rng)
    if op == "reshape":
        got, want = sc.ops.reshape(A, (200_000, 50_000)), sp.csr_array(A.reshape((200_000, 50_000)))
    elif op == "slice":
        got, want = sc.ops.getitem(A, (slice(10, 90_000), slice(5, None))), A[10:90_000, 5:]
    else:
        got, want = sc.ops.vstack([A, A]), sp.vstack([A, A], format="csr")
    assert got.indptr.dtype == np.int32 and got.indices.dtype == np.int32
    _exactly(sp.csr_array(got), want)


@pytest.mark.parametrize("expr,out", [("C[i,j] = A[i,j] + B[i,j]", "dcsr"), ("C[i,j] = A[i,j] - B[j,i]", "coo"),
                                      ("C[i,j] = sum[k](A[i,k] * B[k,j])", "dcsr")])
def test_sparsifier_kernels_with_the_bound(monkeypatch, expr, out):
    """The bound holds for the sparsifier's kernels too (another result format than the
    hand-written kernels'): at the threshold, 32-bit positions and SciPy's values."""
    rng = np.random.default_rng(10)
    A, B = _csr((30, 30), 120, rng), _csr((30, 30), 100, rng)
    if "sum" in expr:
        bound, want = int(np.diff(B.indptr)[A.indices].sum()), A @ B
    else:
        bound, want = A.nnz + B.nnz, (A + B if "+" in expr else A - B.T)
    k = sc.compile(expr, out_format=out, options=sc.Options(opt_level=2))
    for limit, w in ((bound, 32), (bound - 1, 64)):
        monkeypatch.setattr(kernel_mod, "POS32_MAX", limit)
        C = k(A=A, B=B)
        assert _pos_width(k) == w
        assert "linalg.generic" in k.ir()           # the sparsifier's kernel
        np.testing.assert_allclose(sp.csr_array(C).toarray(), want.toarray())
