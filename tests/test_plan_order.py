"""The planner's loop orders against stored orders (sparsecc/plan/order.py): walks of a
sparse operand read out of order are costed, a copy into the order a step reads is inserted
where it costs less, and a mask plan costlier than the one nest loses to it."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.parse import parse_einsum
from sparsecc.plan import make_plan, of_operand
from sparsecc.plan import order as O


def _plan(expr, *ops, formats=True):
    stmt = parse_einsum(expr, len(ops))
    st = {n: of_operand(v) for n, v in zip(stmt.operands, ops)}
    dense = {n: not sp.issparse(v) for n, v in zip(stmt.operands, ops)}
    fmts = {n: v.format for n, v in zip(stmt.operands, ops) if sp.issparse(v)} if formats else None
    return make_plan(stmt, st, dense, "dense", formats=fmts)


def _sparse(n, fmt, seed, per_row=4):
    return sp.random_array((n, n), density=per_row / n, format=fmt, random_state=seed)


def _dense(x):
    return x.toarray() if sp.issparse(x) else x


def test_loop_order_respects_levels_parallel_first():
    csr = [O.layout_of("csr", t) for t in (("a", "b"), ("c", "b"), ("c", "d"))]
    # MLIR's sorter takes the loop freed last (d after c, before b): checked against the
    # sparsifier's sorted linalg.generic for this nest
    assert O.loop_order([("a", "b"), ("c", "b"), ("c", "d")], csr, ("a",)) == ("a", "c", "d", "b")
    csc = O.layout_of("csc", ("c", "b"))
    assert csc.levels == ("b", "c")
    assert O.loop_order([("a", "b"), ("c", "b")], [csr[0], csc], ("a",)) == ("a", "b", "c")
    # conflicting level orders: no order (the emitter converts an operand itself)
    assert O.loop_order([("a", "b"), ("b", "a")], [csr[0], O.layout_of("csr", ("b", "a"))], ()) is None


def test_loop_order_follows_mlirs_sorter():
    # (each order below is what sparse-reinterpret-map gave for sparsecc's one nest)
    lay = O.layout_of
    # of two free reduction loops, the last in index order goes first: loops d, e before a
    terms = [("a", "b"), ("a", "c"), ("d", "b"), ("e", "a")]
    got = O.loop_order(terms, [lay("coo", terms[0]), None, lay("csr", terms[2]), lay("coo", terms[3])], ("d",))
    assert got == tuple("deacb")
    # with a dense operand among them
    terms = [("a", "b"), ("a", "c"), ("a", "d"), ("e", "b")]
    got = O.loop_order(terms, [lay("coo", terms[0]), lay("coo", terms[1]), None, lay("coo", terms[3])], ("c",))
    assert got == tuple("eacdb")
    terms = [("a", "b"), ("c", "a"), ("c", "d"), ("b", "e"), ("c", "f")]
    lays = [lay("csr", terms[0]), lay("coo", terms[1]), None, lay("coo", terms[3]), lay("coo", terms[4])]
    assert O.loop_order(terms, lays, ()) == tuple("cfdabe")


def test_a_cycle_converts_the_first_operand_that_breaks_it():
    lay = O.layout_of
    terms = [("a", "c"), ("b", "c")]
    lays = [lay("coo", terms[0]), lay("coo", terms[1])]
    # a sparse result inserted a, c, b: T[b,c] is converted (MLIR: one sparse_tensor.convert)
    order, conv = O.schedule(terms, lays, ("a", "c", "b"), True)
    assert order == ("a", "c", "b") and conv == 1
    assert O.loop_order(terms, lays, ("a", "c", "b"), True) is None
    conv_lay = O.converted(lays[1], order)
    assert conv_lay.levels == ("c", "b") and conv_lay.nonunique
    # its walks count: the converted COO's c level is walked for each a (every entry: nonunique)
    n = 600
    st = [of_operand(_sparse(n, "coo", 1), terms[0]), of_operand(_sparse(5 * n, "coo", 2).tocsr()[:, :n].tocoo(),
                                                                 terms[1])]
    products = float(st[0].nnz) * 2
    walked = O.extra_ops(terms, st, [False, False], lays, ("a", "c", "b"), products, True)
    assert walked > 100 * products
    csc = [lays[0], lay("csc", terms[1])]
    assert O.extra_ops(terms, st, [False, False], csc, ("a", "c", "b"), products, True) < walked / 10


def test_one_nest_pays_for_a_csr_operand_read_against_its_order():
    n = 2000
    A, B, C = (_sparse(n, "csr", s) for s in (1, 2, 3))
    aware = _plan("ab,cb,cd->a", A, B, C)
    blind = _plan("ab,cb,cd->a", A, B, C, formats=False)
    # loops a, c, b, d: B's rows are walked for every a (~n * nnz(B) entries)
    assert aware.single_seconds > 100 * blind.single_seconds
    assert not aware.single


def test_an_in_order_product_is_no_walk():
    n = 2000
    B, C = _sparse(n, "csr", 2), _sparse(n, "csr", 3)
    stats = [of_operand(B, ("c", "b")), of_operand(C, ("c", "d"))]
    lays = [O.layout_of("csr", s.indices) for s in stats]
    products = 16.0 * n       # each row c: 4 x 4 pairs
    # loops c, b, d: C's row c is walked once per b of B's row c - each entry a product
    assert O.extra_ops([s.indices for s in stats], stats, [False, False], lays, ("b",), products) < 0.1 * products
    # A[a,b] * B[c,b] summed onto a: loops a, c, b - every row c of B walked for each a
    A = _sparse(n, "csr", 1)
    stats = [of_operand(A, ("a", "b")), stats[0]]
    lays = [O.layout_of("csr", s.indices) for s in stats]
    walked = O.extra_ops([s.indices for s in stats], stats, [False, False], lays, ("a",), products)
    assert walked > n * B.nnz / 2


def test_an_operand_read_out_of_order_is_converted():
    n = 2000
    A, C, B = _sparse(n, "csr", 1), _sparse(n, "coo", 3), _sparse(n, "csr", 2)
    plan = _plan("bc,cd,ab->a", A, C, B)
    copies = [s for s in plan.steps if s.subscripts == "ij->ij"]
    assert len(copies) == 1 and copies[0].format in ("csr", "csc") and copies[0].inputs[0] in ("#0", "#1")
    assert plan.seconds < plan.single_seconds / 10
    blind = _plan("bc,cd,ab->a", A, C, B, formats=False)
    assert not any(s.subscripts == "ij->ij" for s in blind.steps)
    again = _plan("bc,cd,ab->a", A, C, B)
    assert again == plan                                  # deterministic


@pytest.fixture(scope="module")
def converted():
    n = 400
    ops = (_sparse(n, "csr", 1), _sparse(n, "coo", 3), _sparse(n, "csr", 2))
    k = sc.compile("bc,cd,ab->a", "csr", "coo", "csr")
    return k, ops


def test_converted_plan_matches_numpy(converted):
    k, ops = converted
    plan = k.plan(*ops)
    assert any(s.subscripts == "ij->ij" for s in plan.steps), str(plan)
    got = k(*ops)
    want = np.einsum("bc,cd,ab->a", *[_dense(x) for x in ops], optimize=True)   # (400^4 points unoptimized: 1 min)
    np.testing.assert_allclose(_dense(got), want, rtol=1e-12, atol=1e-12)
    assert k.last_plan.steps[0].subscripts == "ij->ij"


def test_mask_plan_costlier_than_the_one_nest_loses():
    n = 3000
    T = _sparse(n, "coo", 0)
    rng = np.random.default_rng(0)
    X, v, Y = rng.random((n, 8)), np.ones(n), rng.random((n, 8))
    plan = _plan("ab,ac,b,bc->b", T, X, v, Y)
    # the mask's steps build a dense n x n product first; the one nest or plain steps cost less
    assert plan.seconds <= plan.single_seconds
    assert all(s.entries is None or s.entries < n * n / 2 for s in plan.steps)


def test_a_sparse_nest_with_its_sums_innermost_costs_a_point_an_operation():
    from sparsecc.plan import cost as C
    assert O.reduces_inside(("a", "c", "d", "b"), ("a", "c"))
    assert not O.reduces_inside(("a", "b", "c"), ("a", "c")) and not O.reduces_inside(None, ("a",))
    n, rng = 800, np.random.default_rng(3)
    ops = [sp.coo_array(_sparse(n, "csr", s, k)) for s, k in ((1, 8), (2, 2), (3, 6))]
    stmt = parse_einsum("ab,ac,ad->ac", 3)
    st = {nm: of_operand(v) for nm, v in zip(stmt.operands, ops)}
    plan = make_plan(stmt, st, {nm: False for nm in stmt.operands}, "csr",
                     formats={nm: "coo" for nm in stmt.operands})
    # loops a, c, d, b: a scalar sum per (a, c), one insertion per stored entry of T1[a,c]
    # (the result's pattern): not SPARSE_NEST_POINT_OPS a point, nor an entry per point
    points = n * 8 * 2 * 6
    assert plan.single_seconds < points * C.SPARSE_NEST_POINT_OPS / C.OPS_PER_S / 4
    del rng


def test_masked_steps_costlier_than_the_one_nest_lose_to_it():
    n = 3000
    A, B = _sparse(n, "csr", 1, 7), sp.coo_array(_sparse(n, "csr", 2, 3))
    rng = np.random.default_rng(0)
    u, v = rng.random(n), rng.random(n)
    plan = _plan("ab,ab,b,b->a", A, B, u, v)
    # the mask's steps are its one nest plus u * v first: estimated dearer, the one nest runs
    assert plan.single, str(plan)


def test_a_sparse_intermediate_vector_is_walked_for_every_row_reading_it():
    # t1[a,b] = T0[a,b] * t0[b], t0 a sparse vector (an intermediate, stored in any order it
    # likes): its one level is still walked for each a (measured: 4688 x 3438 CSR, t0 2981
    # entries: 287 ms, estimated 0.5 ms without this)
    n = 3000
    T = of_operand(_sparse(n, "csr", 1), ("a", "b"))
    v = of_operand(sp.random_array((n,), density=0.9, format="coo", random_state=2), ("b",))
    lays = [O.layout_of("csr", ("a", "b")), O.layout_of("coo", ("b",))]
    products = float(T.nnz)
    walked = O.extra_ops([("a", "b"), ("b",)], [T, v], [False, False], lays, ("a", "b"), products, True, skip=(1,))
    assert walked > 100 * products


def test_a_cyclic_masked_nest_is_rated_as_the_runtime_reads_it():
    # T0[a,b] * T1[c,a] * T2[a,c] into a CSR out[c,a]: T1 (c before a) and T2 (a before c) form a
    # cycle; left to the sparsifier it converts T2 and walks T0's rows for every c (measured at
    # row 8's sizes: 8.6 s as one nest, 3.3 ms in two steps), and the nest used to be kept
    # unrated.  The runtime now stores every operand of a sparse result's contraction in its
    # loops' order first (SciPy's transposes), and the nest is rated so: kept, it runs 0.64 ms
    # here against 1.0-2.0 ms for the two-step orders
    n = 3000
    A, B, C = (_sparse(n, "csr", s, 8) for s in (1, 2, 3))
    stmt = parse_einsum("ab,ca,ac->ca", 3)
    st = {nm: of_operand(v) for nm, v in zip(stmt.operands, (A, B, C))}
    plan = make_plan(stmt, st, {nm: False for nm in stmt.operands}, "csr",
                     formats={nm: "csr" for nm in stmt.operands})
    assert plan.single and "masked by" in plan.reason and plan.seconds < 0.005, str(plan)
