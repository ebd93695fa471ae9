"""Sparse results: values against SciPy/NumPy and patterns against the rules in
docs/sparse-results.md, for every input format x output format."""

import gc
import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from conftest import assert_matches, random_sparse

IN_FORMATS = ["csr", "csc", "coo", "dcsr", "dcsc", "bsr2x2"]
OUT_FORMATS = ["csr", "csc", "coo", "dcsr", "dcsc", "csf"]
SCIPY_TYPE = {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array, "dcsr": sp.csr_array,
              "dcsc": sp.csc_array, "csf": sp.csr_array}


def pattern(x) -> set:
    """Stored coordinates (stored zeros included) of a SciPy array."""
    c = sp.coo_array(x)
    return set(zip(*(np.asarray(k).tolist() for k in c.coords)))


def ones_like(x):
    """The pattern of ``x`` as a 0/1 CSR matrix (stored zeros become ones)."""
    c = sp.coo_array(x)
    return sp.csr_array((np.ones(c.nnz), c.coords), shape=c.shape)


def operand(kind, shape, rng, fmt):
    """A sparse operand of a given kind (random, empty, one entry, explicit zeros)."""
    if kind == "empty":
        a = sp.coo_array((np.zeros(0), (np.zeros(0, int), np.zeros(0, int))), shape=shape)
    elif kind == "single":
        a = sp.coo_array((np.array([2.5]), ([1], [2])), shape=shape)
    elif kind == "zeros":       # every stored value is an explicit zero
        a = random_sparse(shape, 0.3, "float64", rng)
        a = sp.coo_array((np.zeros(a.nnz), a.coords), shape=shape)
    else:
        a = random_sparse(shape, 0.3, "float64", rng)
    return a if fmt == "coo" else a.tocsr()


# name -> (expression, operand shapes (None: dense), scipy oracle, pattern oracle)
OPS = {
    "matmul": ("ik,kj->ij", [(6, 4), (4, 8)], lambda A, B: A @ B,
               lambda A, B: pattern((ones_like(A) @ ones_like(B)))),
    "add": ("C[i,j] = A[i,j] + B[i,j]", [(6, 4), (6, 4)], lambda A, B: A + B,
            lambda A, B: pattern(A) | pattern(B)),
    "sub": ("C[i,j] = A[i,j] - B[i,j]", [(6, 4), (6, 4)], lambda A, B: A - B,
            lambda A, B: pattern(A) | pattern(B)),
    "multiply": ("ij,ij->ij", [(6, 4), (6, 4)], lambda A, B: A.multiply(B),
                 lambda A, B: pattern(A) & pattern(B)),
    "scale": ("C[i,j] = 2.5 * A[i,j]", [(6, 4)], lambda A: 2.5 * A, lambda A: pattern(A)),
    "transpose": ("ij->ji", [(6, 4)], lambda A: A.T, lambda A: {(j, i) for i, j in pattern(A)}),
    "neg": ("C[i,j] = -A[i,j]", [(6, 4)], lambda A: -A, lambda A: pattern(A)),
    "sddmm": ("ij,ik,jk->ij", [(6, 4), None, None], None, lambda S, X, Y: pattern(S)),
}


def _operands(name, kind, fmt, rng):
    expr, shapes, _, _ = OPS[name]
    ops = []
    for k, shape in enumerate(shapes):
        if shape is None:
            ops.append(rng.random((6 if k == 1 else 4, 3)))
        else:
            ops.append(operand(kind if k == 0 else "random", shape, rng, fmt))
    return ops


def _call(name, ops, in_fmt, out_fmt):
    expr = OPS[name][0]
    fmts = [in_fmt if sp.issparse(o) else "dense" for o in ops]
    if "=" in expr:
        names = ["A", "B"][:len(ops)]
        return sc.evaluate(expr, formats=dict(zip(names, fmts)), out_format=out_fmt, **dict(zip(names, ops)))
    return sc.einsum(expr, *ops, formats=fmts, out_format=out_fmt)


def _check(name, ops, got, out_fmt):
    _, _, oracle, pattern_rule = OPS[name]
    assert isinstance(got, SCIPY_TYPE[out_fmt]), type(got)
    dense = [o.toarray() if sp.issparse(o) else o for o in ops]
    if oracle is None:
        want = np.einsum(OPS[name][0], *dense)
    else:
        want = oracle(*[sp.csr_array(o) if sp.issparse(o) else o for o in ops])
        want = want.toarray() if sp.issparse(want) else want
    assert_matches(got, want)
    assert pattern(got) == pattern_rule(*ops)
    if got.format in ("csr", "csc"):
        assert got.has_canonical_format
        for lo, hi in zip(got.indptr[:-1], got.indptr[1:]):
            assert np.all(np.diff(got.indices[lo:hi]) > 0)       # sorted and unique
    if got.format == "coo":
        flat = np.ravel_multi_index(got.coords, got.shape)
        assert np.all(np.diff(flat) > 0)                        # canonical


@pytest.mark.parametrize("out_fmt", OUT_FORMATS)
@pytest.mark.parametrize("in_fmt", IN_FORMATS)
@pytest.mark.parametrize("name", list(OPS))
def test_every_input_and_output_format(name, in_fmt, out_fmt):
    rng = np.random.default_rng(hash((name, in_fmt, out_fmt)) % 2**32)
    ops = _operands(name, "random", in_fmt, rng)
    _check(name, ops, _call(name, ops, in_fmt, out_fmt), out_fmt)


@pytest.mark.parametrize("kind", ["empty", "single", "zeros"])
@pytest.mark.parametrize("name", list(OPS))
def test_edge_operands(name, kind):
    rng = np.random.default_rng(7)
    for in_fmt, out_fmt in (("csr", "csr"), ("coo", "coo"), ("csc", "csc")):
        ops = _operands(name, kind, in_fmt, rng)
        _check(name, ops, _call(name, ops, in_fmt, out_fmt), out_fmt)


def test_row_and_column_sums_have_sparse_results():
    A = sp.csr_array(np.array([[1., 0, 2, 0, 0], [0, 0, 0, 0, 0], [0, 3, 0, 0, 0], [0, 0, 0, 0, 0],
                               [0, 0, 0, 5, 0]]))
    for fmt in ("csr", "csc", "coo", "dcsr"):
        rows = sc.einsum("ij->i", A, formats=[fmt], out_format="coo")
        assert isinstance(rows, sp.coo_array) and rows.ndim == 1
        assert pattern(rows) == {(0,), (2,), (4,)}
        assert_matches(rows, A.sum(axis=1))
        cols = sc.einsum("ij->j", A, formats=[fmt], out_format="coo")
        assert pattern(cols) == {(0,), (1,), (2,), (3,)}
        assert_matches(cols, A.sum(axis=0))
    # the default for a rank-1 result is dense
    assert isinstance(sc.einsum("ij->i", A), np.ndarray)


def test_cancellation_keeps_entries_and_prune_drops_them():
    A = sp.csr_array(np.array([[1., 0, 2], [0, 3, 0]]))
    C = sc.evaluate("C[i,j] = A[i,j] - B[i,j]", A=A, B=A.copy())
    assert C.nnz == 3 and pattern(C) == pattern(A) and not C.data.any()
    P = sc.evaluate("C[i,j] = A[i,j] - B[i,j]", A=A, B=A.copy(), prune=True)
    assert P.nnz == 0 and P.shape == A.shape
    T = sp.coo_array(np.arange(8.0).reshape(2, 2, 2))
    R = sc.einsum("ijk,ijk->ijk", T, T * 0, prune=True)
    assert isinstance(R, sp.coo_array) and R.nnz == 0


def test_structural_zeros_are_never_read():
    A = sp.csr_array(np.array([[1., 0, 2], [0, 0, 0], [0, 4, 0]]))
    x = np.array([1.0, np.inf, np.nan])
    y = sc.einsum("ij,j->i", A, x)
    # row 0 stores nothing in column 1 and row 2 nothing in column 2: inf/nan never read there
    assert y[1] == 0 and np.isnan(y[0]) and y[2] == np.inf
    B = np.full((3, 3), np.inf)
    for fmt in ("csr", "coo", "csc"):
        C = sc.einsum("ij,ij->ij", A, B, formats=[fmt, "dense"], out_format="csr")
        assert pattern(C) == pattern(A) and np.all(np.isinf(C.data))
        D = sc.einsum("ij,ij->ij", A, B, formats=[fmt, "dense"], out_format="dense")
        assert np.isfinite(D[A.toarray() == 0]).all() and (D[A.toarray() == 0] == 0).all()
    # SpGEMM: a stored zero is an ordinary value (0 * inf = nan), an unstored one is not read
    Z = sp.csr_array((np.array([0.0]), ([0], [1])), shape=(2, 2))
    W = sp.csr_array((np.array([np.inf, 1.0]), ([1, 0], [0, 1])), shape=(2, 2))
    C = sc.einsum("ik,kj->ij", Z, W)
    assert pattern(C) == {(0, 0)} and np.isnan(C.data[0])


# (expression, which operands are sparse (others dense), expected default result type)
DEFAULTS = [
    ("ij,j->i", (0,), np.ndarray),            # rank 1
    ("ij,ij->", (0, 1), np.generic),          # rank 0: a NumPy scalar
    ("ik,kj->ij", (0,), np.ndarray),          # sparse x dense: dense in j
    ("ik,kj->ij", (0, 1), sp.csr_array),      # SpGEMM
    ("ij,ij->ij", (0,), sp.csr_array),        # sampled by the sparse operand
    ("ij,ik,jk->ij", (0,), sp.csr_array),     # SDDMM
    ("ij->ji", (0,), sp.csr_array),
    ("ijk,ijk->ijk", (0, 1), sp.coo_array),   # N-d: COO
    ("ijk,k->ij", (0,), sp.csr_array),        # TTV
    ("ijk,kl->ijl", (0,), np.ndarray),        # TTM: dense in l
]


@pytest.mark.parametrize("expr,sparse,want", DEFAULTS)
def test_default_result_format(expr, sparse, want):
    rng = np.random.default_rng(3)
    size = dict(i=5, j=4, k=3, l=2)
    ins = expr.split("->")[0].split(",")
    ops = []
    for k, sub in enumerate(ins):
        shape = tuple(size[c] for c in sub)
        ops.append(random_sparse(shape, 0.4, "float64", rng) if k in sparse else rng.random(shape))
    got = sc.einsum(expr, *ops)
    assert isinstance(got, want), type(got)
    assert_matches(got, np.einsum(expr, *[o.toarray() if sp.issparse(o) else o for o in ops]))


@pytest.mark.parametrize("stmt", ["C[i,j] = exp(A[i,j])", "C[i,j] = cos(A[i,j])", "C[i,j] = A[i,j] + 1",
                                  "C[i,j] = log(A[i,j]) * 2"])
def test_value_dependent_patterns_are_refused(stmt):
    A = sp.csr_array(np.array([[1.0, 0], [0, 2]]))
    with pytest.raises(sc.SparseccError, match="out_format='dense'"):
        sc.evaluate(stmt, A=A, out_format="csr")
    got = sc.evaluate(stmt, A=A)             # the default is a dense result
    assert isinstance(got, np.ndarray)


def test_zero_preserving_functions_keep_the_pattern():
    A = sp.csr_array(np.array([[0.5, 0, 0.25], [0, 0.75, 0]]))
    for fn in ("neg", "abs", "sqrt", "sin", "tan", "asin", "atan", "sinh", "tanh", "expm1", "log1p"):
        got = sc.evaluate(f"C[i,j] = {fn}(A[i,j])", A=A)
        assert isinstance(got, sp.csr_array) and pattern(got) == pattern(A), fn
        want = getattr(np, {"neg": "negative", "asin": "arcsin", "atan": "arctan"}.get(fn, fn))(A.toarray())
        assert_matches(got, want)


def test_nd_results_against_numpy():
    rng = np.random.default_rng(5)
    T = random_sparse((4, 3, 5), 0.3, "float64", rng)
    U = random_sparse((4, 3, 5), 0.3, "float64", rng)
    Td, Ud = T.toarray(), U.toarray()
    R = sc.einsum("ijk,ijk->ijk", T, U, out_format="coo")
    assert isinstance(R, sp.coo_array) and R.shape == (4, 3, 5)
    assert_matches(R, Td * Ud)
    assert pattern(R) == pattern(T) & pattern(U)
    for out in ("coo", "csf"):
        P = sc.einsum("ijk->kji", T, out_format=out)
        assert_matches(P, Td.transpose(2, 1, 0))
        assert pattern(P) == {(k, j, i) for i, j, k in pattern(T)}
    S = sc.evaluate("C[i,j,k] = A[i,j,k] + B[i,j,k]", A=T, B=U)
    assert_matches(S, Td + Ud)
    assert pattern(S) == pattern(T) | pattern(U)


def test_uncoalesced_coo_equals_coalesced():
    """Unsorted COO with duplicates (torch's uncoalesced tensors): duplicates are summed."""
    rng = np.random.default_rng(11)
    A = random_sparse((7, 6), 0.4, "float64", rng)
    r, c = A.coords
    extra = rng.integers(0, A.nnz, 10)
    perm = rng.permutation(A.nnz + 10)
    rows = np.concatenate([r, r[extra]])[perm]
    cols = np.concatenate([c, c[extra]])[perm]
    vals = np.concatenate([A.data, np.ones(10)])[perm]
    U = sp.coo_array((vals, (rows, cols)), shape=A.shape)
    before = (U.data.copy(), U.coords[0].copy(), U.coords[1].copy())
    canon = U.copy()
    canon.sum_duplicates()
    x = rng.random(6)
    for fmt in ("coo", "csr", "dcsc"):
        assert_matches(sc.einsum("ij,j->i", U, x, formats=[fmt, "dense"]), canon @ x)
        got = sc.einsum("ik,kj->ij", U, U.T, formats=[fmt, fmt])
        assert_matches(got, (canon @ canon.T).toarray())
        assert pattern(got) == pattern(ones_like(canon) @ ones_like(canon.T))
        assert_matches(sc.evaluate("C[i,j] = A[i,j] + B[i,j]", A=U, B=U), 2 * canon.toarray())
    # nothing the user passed in was modified
    np.testing.assert_array_equal(U.data, before[0])
    np.testing.assert_array_equal(U.coords[0], before[1])
    np.testing.assert_array_equal(U.coords[1], before[2])
    # N-d
    T = sp.coo_array((np.ones(4), ([1, 0, 1, 1], [0, 2, 0, 1], [3, 1, 3, 0])), shape=(2, 3, 4))
    assert_matches(sc.einsum("ijk->ijk", T), T.toarray())


def test_result_memory_is_owned_by_the_arrays():
    """Buffers the kernel allocated live as long as any view of them."""
    A = sp.csr_array(np.array([[1., 0, 2], [0, 3, 0], [4, 0, 0]]))
    C = sc.einsum("ik,kj->ij", A, A)
    want = (A @ A).toarray()
    data, indices = C.data[:], C.indices
    del C
    gc.collect()
    for _ in range(50):                      # reuse the freed heap, if anything was freed early
        sc.einsum("ik,kj->ij", A, A)
    rebuilt = sp.csr_array((data, indices, sc.einsum("ik,kj->ij", A, A).indptr), shape=(3, 3))
    assert_matches(rebuilt, want)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_spgemm_does_not_leak():
    rng = np.random.default_rng(0)
    A = random_sparse((400, 400), 0.02, "float64", rng, fmt="csr")
    k = sc.compile("ik,kj->ij", "csr", "csr", out_format="csr")
    for _ in range(100):
        k(A, A)
    gc.collect()
    before = _rss_mb()
    for _ in range(3000):
        C = k(A, A)
    del C
    gc.collect()
    assert _rss_mb() - before < 4.0


def test_out_format_errors():
    A = sp.csr_array(np.eye(3))
    with pytest.raises(sc.FormatError, match="rank 1"):
        sc.einsum("ij->i", A, out_format="csr")
    with pytest.raises(sc.FormatError, match="scalar"):
        sc.einsum("ij->", A, out_format="coo")
    with pytest.raises(sc.FormatError, match="unknown format"):
        sc.einsum("ij->ij", A, out_format="nope")
    with pytest.raises(sc.FormatError, match="BSR"):     # MLIR 22: no BSR result from sparse operands
        sc.einsum("ij->ij", A, out_format="bsr")


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "complex128", "bool"])
def test_sparse_results_every_dtype(dtype):
    rng = np.random.default_rng(4)
    A = random_sparse((5, 4), 0.4, dtype, rng, fmt="csr")
    B = random_sparse((4, 6), 0.4, dtype, rng, fmt="csr")
    for expr, ops in (("ik,kj->ij", (A, B)), ("ij,ij->ij", (A, A)), ("ij->ji", (A,))):
        got = sc.einsum(expr, *ops, out_format="csr")
        assert_matches(got, np.einsum(expr, *[o.toarray() for o in ops]))


def test_block_and_hybrid_operands_with_sparse_results():
    rng = np.random.default_rng(9)
    A = random_sparse((6, 4), 0.4, "float64", rng, fmt="csr")
    hybrid = sc.Format.coo(2, 1)
    for fmts in (["bsr2x2", "bsr2x2"], [hybrid, hybrid]):
        for out in ("csr", "csc", "coo"):
            got = sc.einsum("ij,ij->ij", A, A, formats=fmts, out_format=out)
            assert_matches(got, A.toarray() ** 2)
    for a, b in itertools.product(["csr", "csc"], repeat=2):
        got = sc.einsum("ik,kj->ij", A, A.T, formats=[a, b], out_format="csc")
        assert_matches(got, (A @ A.T).toarray())


@pytest.mark.parametrize("fmts", [("csr", "csr"), ("csc", "csc"), ("coo", "coo"), ("csr", "csc")])
def test_transposed_contractions_store_the_boolean_product(fmts):
    """A^T B and (A B)^T: operands are stored in Gustavson's loop order, never the
    inner-product order (which stores every entry)."""
    rng = np.random.default_rng(12)
    A = random_sparse((7, 5), 0.2, "float64", rng, fmt="csr")
    B = random_sparse((7, 6), 0.2, "float64", rng, fmt="csr")
    got = sc.einsum("ij,ik->jk", A, B, formats=list(fmts), out_format="csr")
    assert_matches(got, A.toarray().T @ B.toarray())
    assert pattern(got) == pattern(ones_like(A).T @ ones_like(B))
    C = random_sparse((5, 6), 0.3, "float64", rng, fmt="csr")
    got = sc.einsum("ik,kj->ji", A, C, formats=list(fmts), out_format="coo")
    assert_matches(got, (A.toarray() @ C.toarray()).T)
    assert pattern(got) == pattern((ones_like(A) @ ones_like(C)).T)
