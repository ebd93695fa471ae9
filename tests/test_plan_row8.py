"""Planner rules found by issue 24's bench row 8 (random einsums, ``sparsecc/bench/
plan_random.py``), each asserted on the plan itself and checked against numpy.einsum on dense
copies (values, and the entries a sparse result stores against ``optimize=False``'s)."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.bench import plan_random as pr
from sparsecc.bench.generators import uniform_rows
from sparsecc.parse import parse_einsum
from sparsecc.plan import cost as C
from sparsecc.plan import make_plan, of_operand
from sparsecc.plan import order as O


def _case(expr, kinds, sizes, per_row, seed=0):
    terms = expr.split("->")[0].split(",")
    out = expr.split("->")[1]
    case = {"expr": expr, "terms": [tuple(t) for t in terms], "out": list(out), "sizes": dict(sizes),
            "big": [i for i, n in sizes.items() if n > 64], "kinds": list(kinds), "per_row": list(per_row)}
    return case, pr.operands(case, np.random.default_rng(seed))


def _compiled(case, optimize=True):
    return sc.compile(case["expr"], *pr._formats(case), out_format=pr._out_format(case), optimize=optimize)


def _dense(x):
    return np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float64)


def _agrees(case, ops):
    """The planned call gives numpy.einsum's values on dense copies and, for a sparse result,
    stores exactly the entries the one nest stores."""
    got = _compiled(case)(*ops)
    want = np.einsum(case["expr"], *[_dense(x) for x in ops], optimize=True)
    np.testing.assert_allclose(_dense(got), want, rtol=1e-10, atol=1e-12)
    if sp.issparse(got):        # (a dense result: the one nest can take seconds, nothing to compare)
        nest = _compiled(case, False)(*ops)
        a, b = sp.coo_array(got), sp.coo_array(nest)
        assert set(zip(*a.coords)) == set(zip(*b.coords))


def _plan(expr, ops, result="dense"):
    stmt = parse_einsum(expr, len(ops))
    st = {n: of_operand(v) for n, v in zip(stmt.operands, ops)}
    dense = {n: not sp.issparse(v) for n, v in zip(stmt.operands, ops)}
    fmts = {n: v.format for n, v in zip(stmt.operands, ops) if sp.issparse(v)}
    return make_plan(stmt, st, dense, result, formats=fmts)


# ----------------------------------------------------------- copies are linear now
def test_a_reordering_copy_costs_linear_in_its_entries():
    """The runtime reads a copy step's operand in its result's order (SciPy's O(nnz)
    transpose, a column sort of COO), so a copy into CSC costs a few operations an entry, not
    the square of its entries (MLIR's in-kernel sort, which the copy no longer runs)."""
    rng = np.random.default_rng(1)
    st, small = (of_operand(uniform_rows(4000, 4000, k, rng), ("c", "d")) for k in (100, 1))
    per = [(O.conversion_cost(s, 8, True).ops - O.conversion_cost(s, 8, False).ops) / s.nnz for s in (st, small)]
    assert per[0] == pytest.approx(per[1]) == pytest.approx(O.REORDER_OPS)
    # 400k entries: a copy is worth making for a step that would walk them
    assert O.conversion_cost(st, 8, True).seconds < 0.02


def test_a_big_operand_read_against_its_order_is_copied_first():
    """``bc,dc,ab->a`` with 100k-entry operands, ``T0[b,c] * T1[d,c]`` summed onto b (a dense
    result: the sparsifier reads them as stored): T1 is copied into CSC first, rated at a few
    operations an entry (at the square of its entries it was 60 ms, and not taken)."""
    n, rng = 20000, np.random.default_rng(1)
    T0, T1 = sp.coo_array(uniform_rows(n, n, 5, rng)), uniform_rows(n, n, 5, rng)
    T2 = uniform_rows(2000, n, 4, rng)
    stmt = parse_einsum("bc,dc,ab->a", 3)
    ops = (T0, T1, T2)
    p = make_plan(stmt, {k: of_operand(v) for k, v in zip(stmt.operands, ops)}, {k: False for k in stmt.operands},
                  "dense", optimize=[(0, 1), (0, 1)], formats={k: v.format for k, v in zip(stmt.operands, ops)})
    copies = [s for s in p.steps if s.subscripts == "ij->ij"]
    assert copies and all(s.format == "csc" and s.seconds < 0.005 for s in copies), str(p)


# ------------------------------------------------- the masked nest of three inputs
ROW13 = ("ab,a,cb,ad,ed->", ["coo", "dense", "coo", "coo", "coo"],
         {"a": 1000, "b": 359, "c": 1000, "d": 1000, "e": 1000}, [4, 6, 8, 4, 7])


def test_a_masked_nest_of_three_inputs_counts_its_walks():
    """Row 8's ``ab,a,cb,ad,ed->`` (seed 13): the masked last step ``T0[a,b] * t[a] *
    T2[c,b]`` over COO operands loops c outside a, walking T0's COO level once per c (ran
    132 ms, estimated 0.2).  Its walks now count, and a copy into the order it reads is
    taken (0.9 ms)."""
    case, ops = _case(*ROW13)
    p = _compiled(case).plan(*ops)
    last = p.steps[-1]
    assert "masked by T0" in p.reason and len(last.inputs) == 3
    copies = {s.output: s for s in p.steps if s.subscripts == "ij->ij"}
    assert any(n in copies and copies[n].format in ("csr", "csc") for n in last.inputs), str(p)
    _agrees(case, ops)


# ---------------------------------- element-wise intermediates stay in their own order
ROW81 = ("ab,ba,ca,db,d->bc", ["csr", "coo", "csr", "coo", "dense"],
         {"a": 2344, "b": 1719, "c": 936, "d": 318}, [8, 5, 8, 7, 3])


def test_an_elementwise_intermediate_read_by_a_sparse_step_is_not_stored_transposed():
    """Row 8's ``ab,ba,ca,db,d->bc`` (seed 81): ``t[b,a] = T1[b,a] * t0[b]`` read as (a, b) by
    ``T0[a,b] * t[b,a]`` (a sparse result).  Stored CSC, its own step looped a outside b and
    walked the sparse vector t0 once per a (232 ms, estimated 0.4); stored CSR, the reader's
    runtime transposes it in O(nnz) (0.25 ms)."""
    case, ops = _case(*ROW81)
    path = [(3, 4), (1, 3), (0, 2), (0, 1)]             # (the plan chosen then)
    p = _compiled(case, path).plan(*ops)
    ew = [s for s in p.steps if s.subscripts == "ij,i->ij"]
    assert ew and all(s.format != "csc" for s in ew), str(p)
    _agrees(case, ops)
    got = _compiled(case, path)(*ops)
    np.testing.assert_allclose(_dense(got), np.einsum(case["expr"], *[_dense(x) for x in ops], optimize=True))


# ------------------------------------------------ rank-3 COO intermediates' costs
def test_a_rank3_sparse_result_with_a_sum_costs_its_workspace():
    x = of_operand(sp.random_array((50, 40), density=0.1, format="csr", random_state=1), ("i", "j"))
    y = of_operand(sp.random_array((40, 30), density=0.1, format="csr", random_state=2), ("j", "k"))
    r3 = type(x)(("i", "j", "k"), (50, 40, 30), 1000.0)
    r3b = type(x)(("i", "k", "l"), (50, 30, 20), 1000.0)
    no_sum = C.step_cost([(x, False), (y, False)], r3, False, 100.0, 8)
    summed = C.step_cost([(x, False), (y, False)], r3b, False, 100.0, 8)
    extra = summed.ops - no_sum.ops
    assert extra == pytest.approx(1000.0 * C.COO_SUM_INSERT_OPS) and extra >= 1000.0 * 10


def test_a_rank3_intermediate_read_in_another_order_is_resorted():
    """A step with a summed index into a sparse result stores its operands in Gustavson's
    order (the runtime's loader): a rank-3 intermediate stored otherwise is sorted (16 ms for
    249,398 entries)."""
    t = type(of_operand(np.ones(2)))(("i", "j", "l"), (100, 100, 100), 1000.0)
    c = type(t)(("l", "j"), (100, 100), 500.0)
    terms = [("i", "j", "l"), ("l", "j")]
    # out[i,j] = sum[l](t[i,j,l] * C[l,j]): Gustavson's order i, l, j: t is resorted
    got = O.resort_ops(terms, [t, c], [False, False], ("i", "j"), (0,))
    assert got == pytest.approx(O.SORT_OPS * 1000 * np.log2(1000)) and got > 1000
    # stored (i, l, j): in order; a leaf (not an intermediate): not the loader's sort
    t2 = type(t)(("i", "l", "j"), (100, 100, 100), 1000.0)
    assert O.resort_ops([("i", "l", "j"), ("l", "j")], [t2, c], [False, False], ("i", "j"), (0,)) == 0
    assert O.resort_ops(terms, [t, c], [False, False], ("i", "j"), ()) == 0


def test_the_masked_chain_does_not_go_through_rank3_intermediates():
    """M * (A @ B @ C), all alike: a chain through M * A (rank 3) was estimated cheapest
    (0.72 ms at 2000^2) and ran 3.8 ms - its rank-3 steps' workspace and re-sort were not
    rated; the one nest (estimated 1.27, ran 0.78) is the plan now."""
    rng = np.random.default_rng(0)
    n = 2000
    M = sp.random_array((n, n), density=0.0002, format="csr", random_state=rng)
    A, B, Cm = (sp.random_array((n, n), density=0.003, format="csr", random_state=rng) for _ in range(3))
    p = sc.plan("ij,ik,kl,lj->ij", M, A, B, Cm)
    assert all(len(s.indices) < 3 for s in p.steps), str(p)


# ------------------------------------------ the one-nest rule against the built steps
ROW7 = ("ab,ac,ad->ac", ["coo", "coo", "coo"], {"a": 773, "b": 1257, "c": 10651, "d": 6905}, [8, 2, 6])


def test_the_one_nest_rule_compares_the_steps_as_built():
    """Row 8's ``ab,ac,ad->ac`` (seed 7): the search rated its two steps under the one nest
    (each intermediate stored as its reader loops); built - formats and orders chosen - they
    were estimated at 0.23 ms against the one nest's 0.19, and ran 1.42x its time.  The
    built plan is compared with the one nest again."""
    case, ops = _case(*ROW7)
    p = _compiled(case).plan(*ops)
    assert p.single and "as built" in p.reason, str(p)
    _agrees(case, ops)


# ------------------------------------- a sparse result's operands as the runtime stores them
ROW15 = ("ab,ca,ac->ca", ["csr", "csr", "csr"], {"a": 4599, "b": 7002, "c": 6208}, [5, 5, 7])


def test_a_sparse_results_operands_are_rated_as_the_runtime_stores_them():
    """Row 8's ``ab,ca,ac->ca`` (seed 15), CSR into CSR: rated with its operands as stored,
    the masked one nest converted ``T2[a,c]`` inside the kernel (6.7 ms, quadratic) and lost
    to two steps (1.55 ms); the runtime stores every operand in the loops' order first (SciPy
    transposes), and the one nest runs 0.72 ms."""
    case, ops = _case(*ROW15)
    p = _compiled(case).plan(*ops)
    assert p.single and "masked by T1" in p.reason, str(p)
    _agrees(case, ops)


def test_runtime_reads_mirror_the_runtimes_orders():
    lay = O.layout_of
    # ij,ik->i: Gustavson's j, k, i crosses j with k; each sum is one sparse operand's: output
    # first, compressed outer levels (two sums)
    assert O.runtime_loop([("i", "j"), ("i", "k")], [True, True], ("i",)) == (("i", "j", "k"), True)
    # a sparse vector with one sum: output first whoever carries it
    assert O.runtime_loop([("i", "j"), ("j",)], [True, False], ("i",)) == (("i", "j"), False)
    # SpGEMM: Gustavson's
    assert O.runtime_loop([("i", "k"), ("k", "j")], [True, True], ("i", "j")) == (("i", "k", "j"), False)
    t = of_operand(sp.random_array((50, 40), density=0.1, format="csr", random_state=1), ("a", "c"))
    u = of_operand(sp.random_array((40, 50), density=0.1, format="csr", random_state=2), ("c", "a"))
    # c,a from (a,c) and (c,a) into (c,a): the first is transposed (REORDER_OPS an entry)
    new, ops = O.runtime_reads([("a", "c"), ("c", "a")], [t, u], [False, False],
                               [lay("csr", ("a", "c")), lay("csr", ("c", "a"))], ("c", "a"))
    assert new[0].levels == ("c", "a") and new[1].levels == ("c", "a") and ops == O.REORDER_OPS * t.nnz


def test_a_sparse_result_costs_its_wrapping():
    """A step with a sparse result pays ``cost.SPARSE_RESULT_OVERHEAD_S`` once (its buffers
    adopted and wrapped: 37-62 us a call against 8-10 for a dense one): small plans of
    several sparse steps lose to their one nest (``ab,bc,cd,da,ac->ab`` over 120^2 CSR:
    three sparse steps, estimated 0.082 ms against the one nest's 0.102, ran 0.55 ms against
    0.20)."""
    st = of_operand(np.ones((4, 4)), ("i", "j"))
    sparse = type(st)(("i", "j"), (4, 4), 3.0)
    d = C.step_cost([(st, True)], st, True, 0.0, 8)
    s = C.step_cost([(st, True)], sparse, False, 0.0, 8)
    assert s.seconds - d.seconds >= C.SPARSE_RESULT_OVERHEAD_S >= 30e-6
    rng = np.random.default_rng(11)
    ops = [uniform_rows(120, 120, 8, rng) for _ in range(4)] + [uniform_rows(120, 120, 2, rng)]
    assert sc.plan("ab,bc,cd,da,ac->ab", *ops, out_format="csr").single


# --------------------------------------- a cycle broken inside a kernel: n log n
ROW79 = ("ab,a,ba,bc,cd->db", ["csr", "dense", "csr", "coo", "dense"], {"a": 562, "b": 1442, "c": 1059, "d": 20},
         [8, 6, 5, 6, 2])


def test_a_cycle_broken_inside_a_kernel_costs_a_sort():
    """The sparsifier's own conversion of an operand whose levels close a cycle sorts it:
    ``ab,ba->`` over CSR, 4.5k entries 0.34 ms (0.04 without the cycle), 64k 6.6 ms, 256k 47 -
    rated at the square of the entries before (0.16 / 25 / 395 ms).  Row 8's
    ``ab,a,ba,bc,cd->db`` (seed 79): its one nest, rated 0.26 ms, ran 2.2 ms; its steps 0.9."""
    t = of_operand(uniform_rows(4000, 4000, 16, np.random.default_rng(2)), ("b", "a"))
    u = of_operand(uniform_rows(4000, 4000, 16, np.random.default_rng(3)), ("a", "b"))
    lay = [O.layout_of("csr", ("a", "b")), O.layout_of("csr", ("b", "a"))]
    got = O.extra_ops([("a", "b"), ("b", "a")], [u, t], [False, False], lay, (), 0.0)
    n = t.nnz
    assert got < 2 * n * (C.INSERT_OPS + O.CYCLE_SORT_OPS * np.log2(n)) < 0.01 * n * n
    case, ops = _case(*ROW79)
    p = _compiled(case).plan(*ops)
    assert not p.single, str(p)
    _agrees(case, ops)
