"""Semirings, monoid reductions and stored(...) against brute force and scipy.sparse.csgraph.

GraphBLAS semantics: only stored entries take part; an output entry with no term gets the
add monoid's identity in a dense result and is not stored in a sparse one.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

import sparsecc as sc
from sparsecc.parse import parse_einsum, parse_notation
from sparsecc.semiring import NAMED, apply, lookup

from oracle import dense_and_mask, evaluate

FORMATS = ["csr", "csc", "coo", "dcsr"]


def _matrix(shape, density, dtype, seed, negative=True):
    rng = np.random.default_rng(seed)
    A = sp.random_array(shape, density=density, format="csr", random_state=seed)
    vals = rng.standard_normal(A.nnz) * 3 if negative else rng.random(A.nnz) * 3 + 0.5
    if np.dtype(dtype).kind in "iu":
        vals = np.round(vals)            # stored zeros appear, and must take part
    A.data = vals.astype(dtype)
    if np.dtype(dtype) == bool:
        A.data = np.ones(A.nnz, bool)
        A.data[::3] = False             # stored False values
    return sp.csr_array(A)


def _brute_matvec(D, M, x, add, mul, ident, transpose=False):
    """y[i] = add over stored j of mul(A[i,j], x[j]) by explicit loops."""
    if transpose:
        D, M = D.T, M.T
    out = []
    for i in range(D.shape[0]):
        acc = ident
        for j in range(D.shape[1]):
            if M[i, j]:
                acc = add(acc, mul(D[i, j], x[j]))
        out.append(acc)
    return np.array(out)


_ADD = {"plus": np.add, "times": np.multiply, "min": np.minimum, "max": np.maximum,
        "lor": np.logical_or, "land": np.logical_and, "lxor": np.logical_xor}
_MUL = {"times": np.multiply, "plus": np.add, "min": np.minimum, "max": np.maximum,
        "land": np.logical_and, "lor": np.logical_or, "pair": lambda a, b: 1, "first": lambda a, b: a,
        "second": lambda a, b: b, "minus": np.subtract, "lxor": np.logical_xor}
_IDENT = {"plus": 0, "times": 1, "min": np.inf, "max": -np.inf, "lor": False, "land": True, "lxor": False}

REQUIRED = ["plus_times", "min_plus", "max_plus", "min_times", "max_times", "min_max", "max_min",
            "lor_land", "land_lor", "plus_pair"]


def test_required_names_exist():
    for name in REQUIRED:
        assert name in NAMED


@pytest.mark.parametrize("name", REQUIRED + ["plus_min", "min_first", "max_second", "lxor_land"])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_semiring_matvec_brute_force(name, fmt):
    s = lookup(name)
    boolean = s.add in ("lor", "land", "lxor") or s.mul in ("land", "lor", "lxor")
    dtype = bool if boolean else np.float64
    A = _matrix((9, 7), 0.3, dtype, seed=5)
    keep = np.repeat(np.arange(9), np.diff(A.indptr)) != 4          # row 4 stores nothing
    A = sp.csr_array((A.data[keep], A.indices[keep], np.r_[0, np.cumsum(np.bincount(
        np.repeat(np.arange(9), np.diff(A.indptr))[keep], minlength=9))]), shape=A.shape)
    x = (np.random.default_rng(1).standard_normal(7) * 2).astype(dtype) if not boolean else \
        np.random.default_rng(1).random(7) < 0.6
    y = sc.einsum("ij,j->i", A, x, formats=(fmt, "dense"), semiring=name)
    D, M = dense_and_mask(A)
    want = _brute_matvec(D, M, x, _ADD[s.add], _MUL[s.mul], _IDENT[s.add])
    assert M[4].sum() == 0
    expected = (np.bool_ if s.add in ("lor", "land", "lxor") or s.mul in ("land", "lor", "lxor")
                else np.int64 if s.mul == "pair" else np.float64)
    assert y.dtype == expected
    np.testing.assert_allclose(np.asarray(y, float), np.asarray(want, float))


@pytest.mark.parametrize("name", ["min_plus", "max_times", "plus_pair", "lor_land", "min_max"])
@pytest.mark.parametrize("out", ["dense", "csr"])
@pytest.mark.parametrize("fmts", [("csr", "csr"), ("csr", "csc"), ("coo", "dcsr")])
def test_semiring_matmul_against_oracle(name, out, fmts):
    s = lookup(name)
    dtype = bool if s.add == "lor" else np.float64
    A = _matrix((8, 6), 0.3, dtype, seed=7)
    B = _matrix((6, 5), 0.35, dtype, seed=8)
    got = sc.einsum("ik,kj->ij", A, B, formats=fmts, semiring=name, out_format=out)
    stmt = apply(parse_einsum("ik,kj->ij", 2), s)
    want, stored = evaluate(stmt, {"#0": A, "#1": B}, {"#0", "#1"})
    if out == "dense":
        np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float))
    else:
        assert sp.issparse(got)
        coo = sp.coo_array(got)
        mask = np.zeros(got.shape, bool)
        mask[tuple(coo.coords)] = True
        np.testing.assert_array_equal(mask, stored)          # exactly the pairs that met
        np.testing.assert_allclose(np.asarray(got.toarray(), float), np.where(stored, want, 0).astype(float))


def test_identity_in_dense_result_and_absent_in_sparse():
    A = sp.csr_array(np.array([[0.0, 2.0], [0.0, 0.0]]))    # row 1 stores nothing
    x = np.array([5.0, 1.0])
    y = sc.einsum("ij,j->i", A, x, semiring="min_plus")
    np.testing.assert_array_equal(y, [3.0, np.inf])
    C = sc.einsum("ik,kj->ij", A, sp.csr_array(np.eye(2)), semiring="min_plus", out_format="csr")
    assert C.nnz == 1 and C[0, 1] == 3.0


def test_stored_zero_takes_part_unstored_does_not():
    A = sp.csr_array((np.array([0.0, -1.0]), np.array([0, 1]), np.array([0, 2, 2])), shape=(2, 3))
    x = np.array([1.0, 1.0, 1.0])
    # max_times: row 0 has a stored 0 (counts) and -1; the unstored (0,2) must not give 0*1
    np.testing.assert_array_equal(sc.einsum("ij,j->i", A, x, semiring="max_times"), [0.0, -np.inf])
    A.data[0] = -3.0
    np.testing.assert_array_equal(sc.einsum("ij,j->i", A, x, semiring="max_times"), [-1.0, -np.inf])


def test_user_semiring_expression_and_identity():
    A = _matrix((6, 5), 0.4, np.float64, seed=2)
    x = np.arange(5.0)
    s = sc.Semiring(add="max", mul="a * b + 1", identity=-100.0)
    y = sc.einsum("ij,j->i", A, x, semiring=s)
    D, M = dense_and_mask(A)
    want = _brute_matvec(D, M, x, np.maximum, lambda a, b: a * b + 1, -100.0)
    np.testing.assert_allclose(y, want)


def test_bellman_ford_matches_csgraph():
    rng = np.random.default_rng(3)
    n = 60
    W = sp.random_array((n, n), density=0.06, format="csr", random_state=4)
    W.data = rng.random(W.nnz) * 10 + 0.1
    for source in (0, 7):
        dist = np.full(n, np.inf)
        dist[source] = 0.0
        for _ in range(n):
            new = np.minimum(dist, sc.einsum("ji,j->i", W, dist, semiring="min_plus"))
            if np.array_equal(new, dist):
                break
            dist = new
        np.testing.assert_allclose(dist, csgraph.shortest_path(W, indices=source, directed=True))


@pytest.mark.parametrize("fmt", FORMATS)
def test_bfs_reachability_matches_csgraph(fmt):
    n = 50
    A = sp.random_array((n, n), density=0.04, format="csr", random_state=9).astype(bool)
    frontier = np.zeros(n, bool)
    frontier[0] = True
    seen = frontier.copy()
    while frontier.any():
        frontier = sc.einsum("ji,j->i", A, frontier, formats=(fmt, "dense"), semiring="lor_land") & ~seen
        seen |= frontier
    order = csgraph.breadth_first_order(A, 0, directed=True, return_predecessors=False)
    np.testing.assert_array_equal(np.flatnonzero(seen), np.sort(order))


@pytest.mark.parametrize("case", [(0, 0), (0, 5), (1, 1)])
def test_empty_and_single_entry(case):
    m, n = case
    A = sp.csr_array((m, n)) if case != (1, 1) else sp.csr_array(np.array([[2.5]]))
    x = np.ones(n)
    y = sc.einsum("ij,j->i", A, x, semiring="min_plus")
    assert y.shape == (m,)
    if case == (1, 1):
        assert y[0] == 3.5


# ------------------------------------------------------------ index notation: monoids, stored()

MONOID_CASES = [
    "y[i] = min[j](A[i,j])", "y[i] = max[j](A[i,j])", "y[i] = times[j](A[i,j])",
    "y[i] = plus[j](A[i,j] * x[j])", "y[i] = min[j](A[i,j] + x[j])", "y[j] = max[i](A[i,j] - x[j])",
    "y[i] = lor[j](A[i,j] > 0)", "y[i] = land[j](A[i,j] < 1)", "y[i] = plus[j](pair(A[i,j], x[j]))",
    "s = max[i,j](A[i,j])", "y[i] = min[j](where(A[i,j] == max[k](A[i,k]), index(j), 1000))",
]


@pytest.mark.parametrize("text", MONOID_CASES)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_monoid_reductions_against_oracle(text, fmt, dtype):
    A = _matrix((7, 6), 0.35, dtype, seed=11)
    A = sp.csr_array(A.multiply(np.arange(7)[:, None] != 2))  # an empty row
    A.eliminate_zeros() if dtype == np.int64 else None
    x = np.arange(6).astype(dtype)
    stmt = parse_notation(text)
    ops = {"A": A, "x": x}
    ops = {k: ops[k] for k in stmt.operands}
    got = sc.evaluate(text, formats={"A": fmt}, **ops)
    want, _ = evaluate(stmt, ops, {"A"})
    np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float).reshape(np.shape(got)))


def test_all_negative_rows_max_over_stored():
    A = sp.csr_array(np.array([[-1.0, 0, -3.0], [0, 0, 0], [-2.0, -5.0, -4.0]]))
    np.testing.assert_array_equal(sc.evaluate("y[i] = max[j](A[i,j])", A=A), [-1.0, -np.inf, -2.0])
    np.testing.assert_array_equal(sc.evaluate("y[i] = min[j](A[i,j])", A=A), [-3.0, np.inf, -5.0])


STORED_CASES = [
    "C[i,j] = stored(exp(A[i,j] - m[i]))", "C[i,j] = stored(A[i,j] + B[i,j])",
    "C[i,j] = stored(A[i,j] / m[i])", "C[i,j] = stored(cos(A[i,j]) * B[i,j] + 1)",
    "C[i,j] = stored(exp(A[i,j] - max[k](A[i,k])) / plus[k](exp(A[i,k] - max[l](A[i,l]))))",
    "C[i,k] = min[j](A[i,j] + W[j,k])",
]


@pytest.mark.parametrize("text", STORED_CASES)
@pytest.mark.parametrize("out", ["csr", "dense", "coo"])
def test_stored_keeps_operand_patterns(text, out):
    A = _matrix((7, 6), 0.35, np.float64, seed=13)
    A.data[::5] = 0.0                                  # stored zeros stay stored
    B = _matrix((7, 6), 0.5, np.float64, seed=14)
    W = _matrix((6, 6), 0.3, np.float64, seed=15)
    m = np.linspace(1, 2, 7)
    stmt = parse_notation(text)
    ops = {k: {"A": A, "B": B, "W": W, "m": m}[k] for k in stmt.operands}
    got = sc.evaluate(text, out_format=out, **ops)
    want, stored = evaluate(stmt, ops, {n for n in ops if sp.issparse(ops[n])})
    if out == "dense":
        fill = want if isinstance(stmt.expr, type(parse_notation("y[i]=min[j](A[i,j])").expr)) else \
            np.where(stored, want, 0)
        np.testing.assert_allclose(got, fill)
        return
    coo = sp.coo_array(got)
    mask = np.zeros(got.shape, bool)
    mask[tuple(coo.coords)] = True
    np.testing.assert_array_equal(mask, stored)
    np.testing.assert_allclose(got.toarray(), np.where(stored, want, 0))


# ------------------------------------------------------------ value-semantics binary ops

VALUE_CASES = [
    ("C[i,j] = max(A[i,j], B[i,j])", np.maximum), ("C[i,j] = min(A[i,j], 0)", lambda a, b: np.minimum(a, 0)),
    ("C[i,j] = A[i,j] > B[i,j]", np.greater), ("C[i,j] = A[i,j] <= B[i,j]", np.less_equal),
    ("C[i,j] = pow(A[i,j], 2)", lambda a, b: a ** 2), ("C[i,j] = where(A[i,j] > 0, A[i,j], B[i,j])",
                                                        lambda a, b: np.where(a > 0, a, b)),
    ("C[i,j] = lor(A[i,j], B[i,j])", np.logical_or), ("C[i,j] = land(A[i,j], B[i,j])", np.logical_and),
]


@pytest.mark.parametrize("text,fn", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
@pytest.mark.parametrize("kinds", ["sparse-sparse", "sparse-dense"])
def test_value_semantics_ops_match_numpy(text, fn, kinds):
    A = _matrix((6, 5), 0.4, np.float64, seed=21)
    B = _matrix((6, 5), 0.4, np.float64, seed=22)
    if kinds == "sparse-dense":
        B = B.toarray()
    got = sc.evaluate(text, A=A, B=B) if "B" in text else sc.evaluate(text, A=A)
    want = fn(A.toarray(), B.toarray() if sp.issparse(B) else B)
    got = got.toarray() if sp.issparse(got) else got
    np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float))


def test_sparse_results_of_value_ops_follow_pattern_rules():
    A = _matrix((6, 5), 0.4, np.float64, seed=23)
    B = _matrix((6, 5), 0.4, np.float64, seed=24)
    C = sc.evaluate("C[i,j] = max(A[i,j], B[i,j])", A=A, B=B, out_format="csr")
    union = (A != 0).toarray() | (B != 0).toarray()
    coo = sp.coo_array(C)
    mask = np.zeros(C.shape, bool)
    mask[tuple(coo.coords)] = True
    assert not (mask & ~union).any()
    with pytest.raises(sc.FormatError, match="every entry"):
        sc.evaluate("C[i,j] = A[i,j] >= B[i,j]", A=A, B=B, out_format="csr")


# ------------------------------------------------------------ errors

def test_errors():
    A = _matrix((3, 3), 0.5, np.float64, seed=1)
    x = np.ones(3)
    with pytest.raises(sc.SparseccError, match="unknown semiring"):
        sc.einsum("ij,j->i", A, x, semiring="min_plux")
    with pytest.raises(sc.SparseccError, match="add must be"):
        sc.Semiring(add="avg", mul="times")
    with pytest.raises(sc.SparseccError, match="may only use a and b"):
        sc.Semiring(add="min", mul="a + c")
    with pytest.raises(sc.SparseccError, match="index notation"):
        sc.compile("y[i] = A[i,j] * x[j]", semiring="min_plus")
    with pytest.raises(sc.ParseError, match="division is only by a scalar"):
        sc.evaluate("C[i,j] = A[i,j] / x[j]", A=A, x=x)
    with pytest.raises(sc.ParseError, match="unknown reduction"):
        sc.evaluate("y[i] = avg[j](A[i,j])", A=A)
    with pytest.raises(sc.DTypeError):
        sc.evaluate("y[i] = max[j](A[i,j])", A=A.astype(np.complex128))


# ---------------------------------------------------------------------------------------
# References that share no code with sparsecc: each named semiring written out here (no
# sparsecc.semiring lookup, no parser, no tests/oracle.py), loops over the stored entries
# SciPy lists, and scipy.sparse.csgraph for shortest paths and BFS levels.

def _min(dtype):
    return np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).max


def _max(dtype):
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


#: name -> (add, multiply, identity of add for a result dtype)
WRITTEN = {
    "plus_times": (lambda a, b: a + b, lambda a, b: a * b, lambda t: 0),
    "min_plus": (min, lambda a, b: a + b, _min),
    "max_plus": (max, lambda a, b: a + b, _max),
    "min_times": (min, lambda a, b: a * b, _min),
    "max_times": (max, lambda a, b: a * b, _max),
    "min_max": (min, max, _min),
    "max_min": (max, min, _max),
    "lor_land": (lambda a, b: a or b, lambda a, b: a and b, lambda t: False),
    "land_lor": (lambda a, b: a and b, lambda a, b: a or b, lambda t: True),
    "plus_pair": (lambda a, b: a + b, lambda a, b: 1, lambda t: 0),
}
#: the dtypes each is checked in (land/lor over numbers is not a semiring GraphBLAS names)
WRITTEN_DTYPES = {name: ["bool"] if name in ("lor_land", "land_lor") else
                  ["float64", "int64"] + (["bool"] if name == "plus_pair" else []) for name in WRITTEN}


def _stored_matrix(shape, dtype, seed, empty_row):
    """A CSR matrix with stored zeros/False values and no entry in row ``empty_row``."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < 0.35
    mask[empty_row] = False
    r, c = np.nonzero(mask)
    if np.dtype(dtype) == bool:
        vals = rng.random(r.size) < 0.7
    else:
        vals = rng.integers(-4, 5, size=r.size).astype(dtype)     # stored zeros included
        if np.dtype(dtype).kind == "f":
            vals = vals + rng.choice([0.0, 0.5], size=r.size)
    return sp.csr_array((vals.astype(dtype), (r, c)), shape=shape)


def _dense_vector(n, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == bool:
        return rng.random(n) < 0.6
    return rng.integers(-3, 4, size=n).astype(dtype)


def _result_dtype(name, dtype):
    if name == "plus_pair":
        return np.dtype(np.int64)
    return np.dtype(dtype)


def _loops(name, A, B, dense_b):
    """C[i, j] = add over stored k of mul(A[i, k], B[k, j]) for B a CSR matrix or a dense
    2-d array (every entry stored); an empty sum is the identity (dense result), and
    ``met`` marks the pairs some stored term reached (a sparse result stores exactly those)."""
    add, mul, ident = WRITTEN[name]
    out_dtype = _result_dtype(name, A.dtype)
    m, n = A.shape[0], B.shape[1]
    C = np.full((m, n), ident(out_dtype), dtype=out_dtype)
    met = np.zeros((m, n), bool)
    for i in range(m):
        for p in range(A.indptr[i], A.indptr[i + 1]):
            k, a = A.indices[p], A.data[p]
            if dense_b:
                cols = range(n)
                vals = B[k]
            else:
                cols = B.indices[B.indptr[k]:B.indptr[k + 1]]
                vals = dict(zip(cols, B.data[B.indptr[k]:B.indptr[k + 1]]))
            for j in cols:
                t = mul(a.item(), vals[j].item())
                C[i, j] = t if not met[i, j] else add(C[i, j].item(), t)
                met[i, j] = True
    return C, met


def _cycle(seq, k):
    return seq[k % len(seq)]


WRITTEN_CASES = [(name, dtype) for name in WRITTEN for dtype in WRITTEN_DTYPES[name]]


@pytest.mark.parametrize("name,dtype", WRITTEN_CASES)
def test_named_semiring_spmv_against_written_loops(name, dtype):
    A = _stored_matrix((9, 7), dtype, seed=11, empty_row=4)
    x = _dense_vector(7, dtype, seed=12)
    fmt = _cycle(FORMATS, WRITTEN_CASES.index((name, dtype)))
    y = sc.einsum("ij,j->i", A, x, formats=(fmt, "dense"), semiring=name)
    want, _ = _loops(name, A, x[:, None], dense_b=True)
    assert y.dtype == want.dtype, (y.dtype, want.dtype)
    np.testing.assert_array_equal(y, want[:, 0])             # row 4: the identity


@pytest.mark.parametrize("name,dtype", WRITTEN_CASES)
def test_named_semiring_spmm_against_written_loops(name, dtype):
    A = _stored_matrix((8, 6), dtype, seed=13, empty_row=0)
    X = np.stack([_dense_vector(6, dtype, seed=14 + j) for j in range(3)], axis=1)
    fmt = _cycle(FORMATS, WRITTEN_CASES.index((name, dtype)) + 1)
    Y = sc.einsum("ik,kj->ij", A, X, formats=(fmt, "dense"), semiring=name)
    want, _ = _loops(name, A, X, dense_b=True)
    assert Y.dtype == want.dtype
    np.testing.assert_array_equal(Y, want)


@pytest.mark.parametrize("out", ["dense", "csr"])
@pytest.mark.parametrize("name,dtype", [(n, WRITTEN_DTYPES[n][0]) for n in WRITTEN])
def test_named_semiring_spgemm_against_written_loops(name, dtype, out):
    A = _stored_matrix((7, 6), dtype, seed=15, empty_row=2)
    B = _stored_matrix((6, 5), dtype, seed=16, empty_row=3)
    fmts = _cycle([("csr", "csr"), ("csr", "csc"), ("coo", "dcsr"), ("dcsr", "csr")], list(WRITTEN).index(name))
    C = sc.einsum("ik,kj->ij", A, B, formats=fmts, semiring=name, out_format=out)
    want, met = _loops(name, A, B, dense_b=False)
    assert not met[2].any()
    if out == "dense":
        assert C.dtype == want.dtype
        np.testing.assert_array_equal(C, want)
    else:
        assert isinstance(C, sp.csr_array) and C.dtype == want.dtype
        coo = sp.coo_array(C)
        have = np.zeros(C.shape, bool)
        have[tuple(coo.coords)] = True
        np.testing.assert_array_equal(have, met)             # exactly the pairs that met
        np.testing.assert_array_equal(C.toarray()[met], want[met])


@pytest.mark.parametrize("fmt", FORMATS)
def test_bellman_ford_multi_source_spmm_matches_csgraph(fmt):
    """min_plus SpMM (one column per source) iterated to its fixed point = shortest paths."""
    rng = np.random.default_rng(21)
    n = 40
    W = sp.random_array((n, n), density=0.08, format="csr", random_state=22)
    W.data = np.round(rng.random(W.nnz) * 9 + 1)
    sources = [0, 5, 17]
    D = np.full((n, len(sources)), np.inf)
    D[sources, range(len(sources))] = 0.0
    for _ in range(n):
        new = np.minimum(D, sc.einsum("ji,jk->ik", W, D, formats=(fmt, "dense"), semiring="min_plus"))
        if np.array_equal(new, D):
            break
        D = new
    else:
        raise AssertionError("no fixed point after n relaxations")
    np.testing.assert_array_equal(D.T, csgraph.shortest_path(W, directed=True, indices=sources))


def _bfs_levels(A, source):
    """Levels from csgraph.breadth_first_order: level[v] = level[parent] + 1; -1 unreached."""
    order, pred = csgraph.breadth_first_order(A, source, directed=True, return_predecessors=True)
    level = np.full(A.shape[0], -1)
    level[source] = 0
    for v in order[1:]:
        level[v] = level[pred[v]] + 1
    return level


@pytest.mark.parametrize("name,fmt", [("lor_land", "csr"), ("lor_land", "coo"), ("lor_land", "csc"),
                                      ("lor_pair", "csr"), ("lor_pair", "csc"), ("lor_pair", "dcsr")])
def test_bfs_levels_match_csgraph(name, fmt):
    n = 60
    A = sp.random_array((n, n), density=0.04, format="csr", random_state=31).astype(bool)
    A = sp.csr_array(A)
    for source in (0, 9):
        level = np.full(n, -1)
        level[source] = 0
        frontier = level == 0
        depth = 0
        while frontier.any():
            depth += 1
            if name == "lor_pair":      # pair ignores values: the frontier stores only its vertices
                step = sc.einsum("ji,j->i", A, sp.coo_array(frontier), formats=(fmt, "coo"), semiring=name)
            else:
                step = sc.einsum("ji,j->i", A, frontier, formats=(fmt, "dense"), semiring=name)
            frontier = step & (level < 0)
            level[frontier] = depth
        np.testing.assert_array_equal(level, _bfs_levels(A, source))


@pytest.mark.parametrize("subscripts,fmt", [
    ("ji,j->i", "csr"), ("ij,j->i", "csc"), ("ij,j->i", "csr"), ("ij,j->i", "coo"),
    ("ji,j->i", "csc"), ("ji,j->i", "dcsr"), ("ji,j->i", "coo")])
def test_lor_pair_with_a_dense_vector(subscripts, fmt):
    """pair ignores values and a dense vector stores every entry: y[i] is whether A stores
    anything in its row (column for "ji") i - written out over SciPy's stored entries."""
    A = _stored_matrix((7, 7), "bool", seed=41, empty_row=3)
    x = np.zeros(7, bool)
    y = sc.einsum(subscripts, A, x, formats=(fmt, "dense"), semiring="lor_pair")
    counts = np.diff(A.indptr) if subscripts == "ij,j->i" else np.bincount(A.indices, minlength=7)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, counts > 0)


@pytest.mark.parametrize("semiring", ["min_plus", "max_plus", "max_min", "plus_pair"])
def test_semiring_spmv_reads_the_vector_without_a_matrix_temporary(semiring):
    """A semiring SpMV read ``x`` through an n x n dense copy (a workaround meant for unions,
    applied to the stored-mode body of a monoid reduction): 4.9 s a call at n = 20k, and no
    memory for n = 200k.  Here n = 200k with one entry per row against a written-out loop."""
    n = 200_000
    rng = np.random.default_rng(5)
    cols = rng.integers(0, n, n)
    vals = rng.random(n)
    A = sp.csr_array((vals, (np.arange(n), cols)), shape=(n, n))
    x = rng.random(n)
    k = sc.compile("ij,j->i", "csr", "dense", semiring=semiring)
    assert "memref.alloc(%size_i, %size_j)" not in k.ir("mlir")
    got = k(A, x)
    add, mul = {"min_plus": (np.minimum, np.add), "max_plus": (np.maximum, np.add),
                "max_min": (np.maximum, np.minimum), "plus_pair": (np.add, lambda a, b: np.ones_like(a))}[semiring]
    want = mul(vals, x[cols])           # one stored entry per row: the row's only term
    np.testing.assert_allclose(got, want)
