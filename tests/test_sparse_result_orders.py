"""The storage orders a kernel with a sparse result reads its operands in
(``runtime/operand_orders.py``: ``sparse_result_formats``), found by the planner's random
einsums (bench row 8): summed loops inside the output's where Gustavson's order crosses
loops no operand joins, operands read in the result's order by a statement with no
reduction, and the loaders that store them so in O(nnz)."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.formats import Format
from sparsecc.runtime import operand_orders, specialization
from sparsecc.runtime.operands import _build_levels, _coo, _coords, _storage


def _with_empty_rows(m, n, seed):
    rng = np.random.default_rng(seed)
    a = sp.random_array((m, n), density=0.15, format="csr", random_state=rng).toarray()
    a[rng.random(m) < 0.3] = 0          # empty rows: where a dense level would reach nothing
    a[:, rng.random(n) < 0.2] = 0
    return a


def _pattern(expr, arrays, kinds):
    pats = [np.ones_like(a, dtype=np.int64) if k == "dense" else (a != 0).astype(np.int64)
            for a, k in zip(arrays, kinds)]
    return np.einsum(expr, *pats) != 0


def _as(a, kind):
    return a if kind == "dense" else sp.csr_array(a).asformat(kind if kind != "dcsr" else "csr")


CASES = [("ij,ik->i", [(30, 20), (30, 25)]), ("ik,ij->i", [(30, 20), (30, 25)]),
         ("ij,ik,il->i", [(30, 20), (30, 25), (30, 7)]), ("ij,i,ik->i", [(30, 20), (30,), (30, 25)]),
         ("ji,ki->i", [(20, 30), (25, 30)]), ("ij,kj->ij", [(30, 20), (25, 20)]),
         ("ij,ki->ij", [(30, 20), (25, 30)]), ("ij,jk,jl->j", [(30, 20), (20, 25), (20, 7)]),
         ("ab,bc,bd->ab", [(30, 20), (20, 25), (20, 7)]), ("ij,ik,i->ji", [(30, 20), (30, 25), (30,)]),
         ("ij,j,i->ji", [(30, 20), (20,), (30,)]), ("ij->ji", [(30, 20)]), ("ij,ij->i", [(30, 20), (30, 20)]),
         ("ij,j->i", [(30, 20), (20,)]), ("ji,j->i", [(20, 30), (20,)])]


#: format mixes a case runs by default (of up to 124; ``-m slow``: all of those of three matrices)
SAMPLED_MIXES = 10


@pytest.mark.parametrize("expr,shapes", CASES)
def test_sparse_results_store_the_pattern_product(expr, shapes):
    """Every format mix (a seeded sample of 10 where there are more; all under ``-m slow``): the
    values numpy.einsum gives, stored exactly where the Boolean pattern product is (MLIR 22 marks
    an entry stored when its outermost summed loop runs: an empty CSR row reached through its
    dense level under another summed loop stored an explicit zero - the summed-inside order reads
    such operands as DCSR)."""
    _store_the_pattern_product(expr, shapes, SAMPLED_MIXES)


@pytest.mark.slow
@pytest.mark.parametrize("expr,shapes", [c for c in CASES if sum(len(s) == 2 for s in c[1]) >= 2])
def test_sparse_results_store_the_pattern_product_every_mix(expr, shapes):
    _store_the_pattern_product(expr, shapes, None)


def _store_the_pattern_product(expr, shapes, most):
    arrays = [_with_empty_rows(*s, seed=k) if len(s) == 2 else np.random.default_rng(k).random(s)
              for k, s in enumerate(shapes)]
    ref = np.einsum(expr, *arrays)
    options = [["csr", "csc", "coo", "dcsr", "dense"] if len(s) == 2 else ["dense"] for s in shapes]
    mixes = [m for m in itertools.product(*options) if not all(k == "dense" for k in m)]
    if most is not None and len(mixes) > most:
        # every format in every position at least once (the first ones), the rest drawn
        rng = np.random.default_rng(len(mixes))
        first = [tuple(o[min(r, len(o) - 1)] for o in options) for r in range(5)]
        rest = [mixes[i] for i in rng.choice(len(mixes), most, replace=False)]
        mixes = list(dict.fromkeys(m for m in first + rest if not all(k == "dense" for k in m)))[:most]
    for kinds in mixes:
        for out in ("coo", "csr") if len(expr.split("->")[1]) == 2 else ("coo",):
            y = sc.compile(expr, *kinds, out_format=out)(*[_as(a, k) for a, k in zip(arrays, kinds)])
            got = np.zeros(ref.shape, bool)
            c = sp.coo_array(y)
            got[tuple(c.coords)] = True
            assert np.allclose(y.toarray(), ref), (expr, kinds, out)
            assert (got == _pattern(expr, arrays, kinds)).all(), (expr, kinds, out)


def _formats(expr, kinds, out="coo"):
    k = sc.compile(expr, *kinds, out_format=out)
    shapes = {"ij,ik->i": [(6, 5), (6, 4)], "ij,kj->ij": [(6, 5), (4, 5)], "ij,j,i->ji": [(6, 5), (5,), (6,)],
              "ij,ik,il->i": [(6, 5), (6, 4), (6, 3)]}[expr]
    ops = [_as(_with_empty_rows(*s, seed=1), kd) if len(s) == 2 else np.ones(s) for s, kd in zip(shapes, kinds)]
    k(*ops)
    return k.last_specialization().formats


def test_private_sums_run_inside_the_output_loops():
    """``bc,bd->b`` into a sparse vector: Gustavson's order (c, d, b) crosses c with d (39 ms
    at 474 rows); the operands are read row-wise (output first) and, with two summed indices,
    with compressed outer levels (DCSR)."""
    stmt = sc.compile("ij,ik->i", "csr", "csr", out_format="coo").stmt
    assert operand_orders._sums_inside(stmt, frozenset(stmt.operands)) == frozenset(stmt.operands)
    assert operand_orders._row_wise_orders(stmt, frozenset(stmt.operands)) == {n: (0, 1) for n in stmt.operands}
    # Gustavson's order for the same statement read by an ahead-of-time build
    assert operand_orders._row_wise_orders(stmt) == {n: (1, 0) for n in stmt.operands}
    for f in _formats("ij,ik->i", ("csr", "csr")):
        assert f.order == (0, 1) and f.levels == ("compressed", "compressed")
    # a summed index carried by a dense operand: Gustavson's order (its loop always runs)
    stmt3 = sc.compile("ij,ik,il->i", "csr", "csr", "dense", out_format="coo").stmt
    assert operand_orders._sums_inside(stmt3, frozenset(stmt3.operands[:2])) is None


def test_a_sparse_vector_with_one_sum_runs_output_first():
    """``ij,j->i`` / ``ij,ij->i`` into a sparse vector: output-first (a scalar sum per row),
    though Gustavson's order crosses nothing - it expanded the whole vector into a workspace
    and sorted its coordinates (2000 rows: 0.57 -> 0.19 ms, 1.07 -> 0.28 from COO)."""
    for expr, kinds in (("ij,j->i", ("csr", "dense")), ("ij,ij->i", ("coo", "coo"))):
        stmt = sc.compile(expr, *kinds, out_format="coo").stmt
        assert operand_orders._sums_inside(stmt, frozenset(stmt.operands[:1])) == frozenset()
        assert operand_orders._row_wise_orders(stmt, frozenset(stmt.operands[:1]))[stmt.operands[0]] == (0, 1)
    # two summed indices, one shared: Gustavson's order as before
    stmt = sc.compile("ij,jk->i", "csr", "csr", out_format="coo").stmt
    assert operand_orders._sums_inside(stmt, frozenset(stmt.operands)) is None


def test_one_private_sum_keeps_dense_levels():
    """``ij,kj->ij``: Gustavson's order (i, k, j) crosses k with i; output first (i, j, k)
    the second operand is read column-wise as CSC - its dense level located, not walked:
    one summed index needs no compression (entering its loop is a product)."""
    stmt = sc.compile("ij,kj->ij", "coo", "csr", out_format="csr").stmt
    assert operand_orders._sums_inside(stmt, frozenset(stmt.operands)) == frozenset()
    a, b = _formats("ij,kj->ij", ("coo", "csr"), "csr")
    assert b.order == (1, 0) and b.levels == ("dense", "compressed")


def test_elementwise_reads_operands_in_the_results_order():
    """``ij,j,i->ji`` into CSR: the CSR operand is read as CSC (SciPy's O(nnz) transpose),
    not converted inside the kernel (a sort that grew with the square of the entries: 7.5 ms
    against 0.43 for 52,737 entries); a COO operand as COO sorted by column."""
    assert _formats("ij,j,i->ji", ("csr", "dense", "dense"), "csr")[0].order == (1, 0)
    f = _formats("ij,j,i->ji", ("coo", "dense", "dense"), "csr")[0]
    assert f.order == (1, 0) and f.levels == _coo(2).levels


@pytest.mark.parametrize("kind", ["csr", "csc", "coo"])
@pytest.mark.parametrize("width", [None, 32, 64])
def test_reordering_loaders_match_the_level_build(kind, width):
    """The O(nnz) loaders (CSR/CSC as DCSR/DCSC, any as COO sorted by column) give the
    buffers the generic level build gives, duplicates and unsorted coordinates included."""
    a = _with_empty_rows(30, 20, 5)
    x = sp.csr_array(a).asformat(kind)
    if kind == "coo":
        x = sp.coo_array((np.r_[x.data, 1.0, 2.0], (np.r_[x.coords[0], 1, 1], np.r_[x.coords[1], 3, 3])),
                         shape=x.shape)
    fmts = [Format(_coo(2).levels, (1, 0), None, width, width)]
    if kind != "coo":
        fmts += [Format(("compressed", "compressed"), order, None, width, width) for order in ((0, 1), (1, 0))]
    for f in fmts:
        got = _storage(x, f, "x")
        c, v = _coords(x)
        ref = _build_levels(f, x.shape, c, np.ascontiguousarray(v), "x")
        assert got.fmt == ref.fmt and list(got.lvl_sizes) == list(ref.lvl_sizes)
        assert all(g.dtype == r.dtype and np.array_equal(g, r) for g, r in zip(got.buffers, ref.buffers))


def test_a_contractions_csc_result_is_built_as_csr():
    """``ij,jk->ik`` into CSC: built as CSR and transposed by SciPy (O(nnz); MLIR 22's
    conversion inside the kernel grew with the square of the entries: 26 ms against 1.6 +
    0.7 for 79,866 entries), on the general and the repeated call alike."""
    rng = np.random.default_rng(3)
    A = sp.random_array((40, 30), density=0.1, format="csr", random_state=rng)
    B = sp.random_array((30, 50), density=0.1, format="csr", random_state=rng)
    k = sc.compile("ij,jk->ik", "csr", "csr", out_format="csc")
    want = (A @ B).tocsc()
    for _ in range(3):              # the first call plans, the later ones take the repeated path
        C = k(A, B)
        assert type(C) is sp.csc_array and C.has_canonical_format and C.indices.dtype == np.int32
        assert np.array_equal(C.indptr, want.indptr) and np.array_equal(C.indices, want.indices)
        assert np.allclose(C.data, want.data)
    assert k.last_specialization().out_format.order == (0, 1)
    # an element-wise statement into CSC keeps its own kernel (it reads the operand as CSC)
    k2 = sc.compile("ij->ij", "csr", out_format="csc")
    assert k2(A).format == "csc" and k2.last_specialization().out_format.order == (1, 0)
