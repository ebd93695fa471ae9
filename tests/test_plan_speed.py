"""The planner's speed work (issue 24, rows 9): a repeated planned call of a planned
statistics class runs its compiled closure (``sparsecc/planned_fast.py``) - no planning, no
bind, every operand still validated by the step that reads it, a class change plans again -
and the memoised planning (``plan/path.py``'s per-search memo, the mask rule's estimate
first, the exact pruning of splits) gives the plans it gave before.  No timings here: the
bench's overhead row measures them."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import planned
from sparsecc.expr import accesses
from sparsecc.bench.generators import uniform_rows
from sparsecc.plan import path as plan_path
from sparsecc.runtime.kernel import Kernel

PATH = [(1, 2), (0, 1)]


def _ops(seed=0, n=10):
    rng = np.random.default_rng(seed)
    return sp.csr_array(uniform_rows(n, n, 3, rng)), sp.csr_array(uniform_rows(n, n, 3, rng)), rng.random(n)


def _oracle(A, B, x):
    return np.einsum("ij,jk,k->i", A.toarray(), B.toarray(), x)


@pytest.fixture(scope="module")
def chain():
    return sc.compile("ij,jk,k->i", "csr", "csr", "dense", optimize=PATH)


def _spy(monkeypatch):
    counts = {"plan": 0, "bind": 0, "key": 0}
    make_plan, key = planned.make_plan, planned._class_key

    def counting_plan(*a, **k):
        counts["plan"] += 1
        return make_plan(*a, **k)

    def counting_key(values):
        counts["key"] += 1
        return key(values)

    bind = Kernel.bind

    def counting_bind(self, *a, **k):
        counts["bind"] += 1
        return bind(self, *a, **k)
    monkeypatch.setattr(planned, "make_plan", counting_plan)
    monkeypatch.setattr(planned, "_class_key", counting_key)
    monkeypatch.setattr(Kernel, "bind", counting_bind)
    return counts


def test_cached_planned_call_does_not_replan_or_rebind(chain, monkeypatch):
    A, B, x = _ops(0)
    chain(A, B, x)                          # planned (or found planned), steps prepared
    counts = _spy(monkeypatch)
    for seed in (1, 2, 3):                  # other operands of the same class
        A, B, x = _ops(seed)
        np.testing.assert_allclose(chain(A, B, x), _oracle(A, B, x))
    assert counts == {"plan": 0, "bind": 0, "key": 0}
    assert chain.last_plan is not None and len(chain.last_plan.steps) == 2
    assert chain.last_plan.actual == (10, 10)


def test_class_change_plans_again(chain, monkeypatch):
    A, B, x = _ops(4)
    chain(A, B, x)
    counts = _spy(monkeypatch)
    A2, B2, x2 = _ops(5, n=40)              # every dimension in another magnitude: another class
    np.testing.assert_allclose(chain(A2, B2, x2), _oracle(A2, B2, x2))
    assert counts["key"] == 1 and counts["plan"] in (0, 1)      # planned unless an earlier test did
    assert len(chain._fasts) >= 2
    counts.update(plan=0, key=0)
    chain(A, B, x)                          # back to the first class: its closure, no key
    chain(A2, B2, x2)
    assert counts["key"] == 2 and counts["plan"] == 0           # the switch reads the key once each
    D = sp.csr_array(np.ones((10, 10)))     # the same shapes, denser: another class
    np.testing.assert_allclose(chain(D, B, x), _oracle(D, B, x))
    assert counts["key"] == 3


def test_cached_call_still_validates(chain):
    A, B, x = _ops(6)
    chain(A, B, x)
    bad = A.copy()
    bad.indices = bad.indices.copy()
    bad.indices[0] = 10                     # past its dimension: same class, bad operand
    with pytest.raises(sc.SparseccError):
        chain(bad, B, x)
    with pytest.raises(sc.SparseccError):
        chain(A, B, x[:9])                  # a wrong size within the class: the step says so
    np.testing.assert_allclose(chain(A, B, x), _oracle(A, B, x))


def test_cached_call_other_kinds_take_the_general_call(chain):
    A, B, x = _ops(7)
    chain(A, B, x)
    for args in ((sp.csr_matrix(A), B, x), (A, sp.coo_array(B), x), (A, B, list(x)), (A, B, x.astype(np.float32)),
                 (sp.csr_array((A * 10).astype(np.int64)), B, x), (A, B, x[::-1].copy()[::-1])):
        want = np.einsum("ij,jk,k->i", *(a.toarray() if sp.issparse(a) else np.asarray(a) for a in args))
        for _ in range(2):                  # the general call, then the class's closure (a cast, a view)
            np.testing.assert_allclose(chain(*args), want, rtol=1e-5)
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense")         # a one-step plan (10 x 10): its own closure
    for seed in (8, 9):
        A, B, x = _ops(seed)
        np.testing.assert_allclose(k(A, B, x), _oracle(A, B, x))
    assert k._fast is not None and k.last_plan.single


# the plans main gave before the memoised planning (recorded on these seeded operands); the
# cyclic 5-factor ones are one nests since a cyclic mask nest is rated (row8: measured faster)
BEFORE = [
    ('ab,bc,cd,de,ef,f->a', True, ((('#4', '#5'), 't0', 'dense'), (('#3', 't0'), 't1', 'dense'), (('#2', 't1'), 't2', 'dense'), (('#1', 't2'), 't3', 'dense'), (('#0', 't3'), 'out', 'dense'))),
    ('ab,bc,cd,de,ef,f->a', 'greedy', ((('#4', '#5'), 't0', 'dense'), (('#3', 't0'), 't1', 'dense'), (('#2', 't1'), 't2', 'dense'), (('#1', 't2'), 't3', 'dense'), (('#0', 't3'), 'out', 'dense'))),
    ('ij,jk,kl,lm,m->i', True, ((('#3', '#4'), 't0', 'dense'), (('#2', 't0'), 't1', 'dense'), (('#1', 't1'), 't2', 'dense'), (('#0', 't2'), 'out', 'dense'))),
    ('ij,jk,kl,li,ij->', True, ((('#0', '#1', '#2', '#3', '#4'), 'out', 'dense'),)),
    ('ij,jk,kl,li,ij->', 'greedy', ((('#0', '#1', '#2', '#3', '#4'), 'out', 'dense'),)),
    ('ki,k,kj,jl,l->i', True, ((('#3', '#4'), 't0', 'dense'), (('#2', 't0'), 't1', 'dense'), (('#1', 't1'), 't2', 'dense'), (('#0', 't2'), 'out', 'dense'))),
    # (its one nest, two reduction loops inside the result's, stored 68 entries without a term: a
    # call finds that when it compiles and splits its sums, plan/nested.py; planning alone cannot)
    ('ab,bc,cd,da,ac->ab', True, ((('#0', '#1', '#2', '#3', '#4'), 'out', 'csr'),)),
    ('ab,bc,cd,da,ac->ab', 'greedy', ((('#0', '#1', '#2', '#3', '#4'), 'out', 'csr'),)),
]


def _cases():
    rng = np.random.default_rng(11)

    def R(m, n, k):
        return uniform_rows(m, n, k, rng)
    return {
        "ab,bc,cd,de,ef,f->a": [R(400, 400, 4) for _ in range(5)] + [rng.random(400)],
        "ij,jk,kl,lm,m->i": [R(600, 200, 3), sp.coo_array(R(200, 600, 6)), R(600, 100, 2), rng.random((100, 20)),
                             rng.random(20)],
        "ij,jk,kl,li,ij->": [R(150, 150, 6), R(150, 150, 6), R(150, 150, 6), R(150, 150, 6), R(150, 150, 3)],
        "ki,k,kj,jl,l->i": [R(800, 60, 6), rng.random(800), R(800, 60, 6), R(60, 40, 4), rng.random(40)],
        "ab,bc,cd,da,ac->ab": [R(120, 120, 8), R(120, 120, 8), R(120, 120, 8), R(120, 120, 8), R(120, 120, 2)],
    }


def _summary(p):
    return tuple((s.inputs, s.output, s.format) for s in p.steps)


def test_memoised_planning_gives_the_plans_before(monkeypatch):
    cases = _cases()
    for expr, opt, before in BEFORE:
        memo = _fresh_plan(expr, cases[expr], opt)
        assert _summary(memo) == before, (expr, opt)
        monkeypatch.setattr(plan_path, "MEMO", False)
        plain = _fresh_plan(expr, cases[expr], opt)       # (planned again: sc.plan's kernel keeps plans)
        monkeypatch.setattr(plan_path, "MEMO", True)
        assert plain is not memo and str(plain) == str(memo), (expr, opt)


def test_index_notation_by_name_takes_the_closure(monkeypatch):
    k = sc.compile("y[i] = sum[j,k](A[i,j] * B[j,k] * x[k])", A="csr", B="csr", x="dense", optimize=PATH)
    A, B, x = _ops(10)
    np.testing.assert_allclose(k(A=A, B=B, x=x), _oracle(A, B, x))
    counts = _spy(monkeypatch)
    A, B, x = _ops(11)
    np.testing.assert_allclose(k(x=x, A=A, B=B), _oracle(A, B, x))
    np.testing.assert_allclose(k(A, B, x), _oracle(A, B, x))
    assert counts == {"plan": 0, "bind": 0, "key": 0}
    with pytest.raises(sc.SparseccError):
        k(A=A, B=B, y=x)                    # a wrong name: the general call says so


def _fresh_plan(expr, ops, optimize=True, out_format=None):
    """``sc.plan`` planned afresh (sc.plan's kernel keeps its plans per statistics class)."""
    from sparsecc.make import make_kernel
    k = make_kernel(expr, (), {}, None, out_format, False, True, None, planned.check_optimize(optimize))
    if hasattr(k, "_plans"):
        k._plans.clear()
    return sc.plan(expr, *ops, optimize=optimize, out_format=out_format)


def _random_plans(n: int, seed: int, scale: float) -> list[str]:
    from sparsecc.bench import plan_random as pr
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        case = pr.random_expression(rng, scale)
        ops = pr.operands(case, np.random.default_rng(seed * 1000 + k))
        for opt in (True, "greedy"):
            out.append(str(_fresh_plan(case["expr"], ops, opt, pr._out_format(case))))
    return out


@pytest.mark.parametrize("n, seed, scale", [
    (12, 5, 0.05),
    pytest.param(100, 0, 1.0, marks=pytest.mark.slow),
])
def test_bounded_split_search_gives_the_plans_rating_every_split(monkeypatch, n, seed, scale):
    """The lower bound that orders and stops a subset's splits (``path.BOUND``) picks what
    rating every split in turn (with no memo) picks, on row 8's seeded random einsums."""
    bounded = _random_plans(n, seed, scale)
    monkeypatch.setattr(plan_path, "BOUND", False)
    monkeypatch.setattr(plan_path, "MEMO", False)
    every = _random_plans(n, seed, scale)
    assert bounded == every
    assert sum("steps" in p for p in bounded) > n // 2      # the cases do plan in steps


def _random_plan_objects(n: int, seed: int, scale: float) -> list:
    from sparsecc.bench import plan_random as pr
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        case = pr.random_expression(rng, scale)
        ops = pr.operands(case, np.random.default_rng(seed * 1000 + k))
        out.append(_fresh_plan(case["expr"], ops, True, pr._out_format(case)))
    return out


def test_connected_subsets_give_the_plans_of_every_subset(monkeypatch):
    """Only connected subsets are steps (``path.CONNECTED_ONLY``): on row 8's seeded random
    einsums the plans cost what the search over every subset finds, in as many steps (a tie
    between independent sums may come in another order), and no outer product is a step."""
    connected = _random_plan_objects(12, 5, 0.05)
    monkeypatch.setattr(plan_path, "CONNECTED_ONLY", False)
    every = _random_plan_objects(12, 5, 0.05)
    assert sum(not p.single for p in connected) > 6
    for a, b in zip(connected, every):
        assert len(a.steps) == len(b.steps), (str(a), str(b))
        assert a.seconds == pytest.approx(b.seconds, rel=1e-9), (str(a), str(b))
        for st in a.steps:
            terms = [set(x.indices) for x in accesses(st.statement.expr)]
            if len(terms) == 2 and all(terms):
                assert terms[0] & terms[1], st.text         # no outer product of two factors


def test_a_chain_estimates_only_its_connected_subsets(monkeypatch):
    """Planning a chain of six factors estimates its 15 connected subsets' results, not the
    57 subsets of two or more (and the steps' own estimates, the same either way)."""
    ops = _cases()["ab,bc,cd,de,ef,f->a"]
    calls = []
    real = plan_path.estimate
    monkeypatch.setattr(plan_path, "estimate", lambda *a: calls.append(a) or real(*a))
    counts = []
    for flag in (True, False):
        monkeypatch.setattr(plan_path, "CONNECTED_ONLY", flag)
        calls.clear()
        p = _fresh_plan("ab,bc,cd,de,ef,f->a", ops)
        counts.append(len(calls))
        assert len(p.steps) == 5
    assert counts[0] + 40 <= counts[1], counts


def test_connected_masks_of_a_chain_and_of_unconnected_factors():
    from sparsecc.plan.stats import TensorStats

    def search(*terms):
        leaves = [TensorStats(tuple(t), (4,) * len(t), 4.0) for t in terms]
        return plan_path.Search.__new__(plan_path.Search), leaves

    s, leaves = search("ab", "bc", "cd", "de")
    s.leaves = leaves
    conn = plan_path._connected_masks(s, [0, 1, 2, 3])
    assert conn(0b0011) and conn(0b0110) and conn(0b1111) and conn(0b0100)
    assert not conn(0b0101) and not conn(0b1001) and not conn(0b1011)
    s.leaves = [TensorStats(tuple(t), (4,) * len(t), 4.0) for t in ("ab", "bc", "d", "de")]
    assert plan_path._connected_masks(s, [0, 1, 2, 3]) is None       # two parts: every subset searched
    assert plan_path._connected_masks(s, [0, 1]) is not None


def test_unconnected_factors_still_plan_their_outer_product():
    rng = np.random.default_rng(4)
    A, B, D = (uniform_rows(30, 30, 3, rng) for _ in range(3))
    d = rng.random(30)
    got = sc.einsum("ab,bc,d,de->ace", A, B, d, D)
    want = np.einsum("ab,bc,d,de->ace", A.toarray(), B.toarray(), d, D.toarray())
    np.testing.assert_allclose(got.toarray() if sp.issparse(got) else got, want, rtol=1e-10)


def test_sampled_draw_is_numpys_choice():
    """``stats._draw`` (the sampled estimate's draw, without ``Generator.choice``'s checks)
    draws what ``Generator.choice`` draws with the same seed and weights."""
    from sparsecc.plan import stats
    rng = np.random.default_rng(3)
    for n in (300, 2000, 40_000):
        w = rng.random(n) * (rng.random(n) < 0.3)
        p = w / w.sum()
        want = np.random.default_rng(stats.SEED).choice(n, size=stats.SAMPLES, p=p)
        np.testing.assert_array_equal(stats._draw(p), want)


# ------------------------------------------ what a repeated call records (k.last_plan, k.ir)

def test_repeated_call_records_each_steps_actual_entries(monkeypatch):
    """The class's closure records the plan and each step's stored entries as the general
    call does: a dense step's from the operands' dimensions, a sparse one's from its result."""
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense", optimize=PATH)
    for n in (10, 12, 15):                  # dimensions 8..15 (two density classes), other sizes
        A, B, x = _ops(n, n=n)
        k(A, B, x)
        k(A, B, x)                          # (the class's closure from the second call on)
        assert k._fast is not None and k.last_plan.actual == (n, n)
        assert str(k.last_plan).count(f"actual {n:,}") == 2
    one = sc.compile("ij,jk,k->i", "csr", "csr", "dense")          # a one-step plan, dense result
    for n in (9, 14):
        A, B, x = _ops(n, n=n)
        one(A, B, x)
        one(A, B, x)
        assert one.last_plan.single and one.last_plan.actual == (n,)
    rng = np.random.default_rng(3)
    s = sc.compile("ij,jk,kl->il", "csr", "csr", "csr", optimize=[(0, 1), (0, 1)])   # sparse steps
    for _ in range(3):
        A, B, C = (sp.csr_array(uniform_rows(12, 12, 3, rng)) for _ in range(3))
        out = s(A, B, C)
        assert s.last_plan.actual == ((A @ B).nnz, out.nnz)
    monkeypatch.setattr(planned._fast, "build", lambda *a, **kw: None)   # (what the general call records)
    g = sc.compile("ij,jk,kl->il", "csr", "csr", "csr", optimize=[(1, 2), (0, 1)])
    out = g(A, B, C)
    assert g._fast is None and g.last_plan.actual == ((B @ C).nnz, out.nnz)


def test_last_steps_outlive_a_one_step_call():
    """``k.ir(step=...)`` reads the steps of the last call planned in steps: a later call whose
    plan is one nest (another class) or that failed records no plan and keeps them."""
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense")
    big = [sp.csr_array(uniform_rows(400, 400, 4, np.random.default_rng(1))) for _ in range(2)] + [np.ones(400)]
    for _ in range(2):                      # steps (400 x 400), the second call through the closure
        k(*big)
    steps = k._last_steps
    assert len(steps) == 2 and k.last_plan is not None and not k.last_plan.single
    A, B, x = _ops(0)
    for _ in range(2):                      # one nest (10 x 10): its plan, the steps kept
        k(A, B, x)
        assert k.last_plan.single and k._last_steps is steps and not k._planned_last
    assert k.ir("mlir", step=1) == steps[0].ir("mlir")
    with pytest.raises(sc.SparseccError):
        k(A, B, x[:9])                      # a step refuses: no plan recorded, the steps kept
    assert k.last_plan is None and k._last_steps is steps


def test_degree_bound_under_an_estimate_keeps_the_minimum():
    """``stats._degree_bound`` with ``cap`` skips slice terms it shows cannot go below the cap
    or the bound so far: ``min(cap, result)`` is ``min(cap, degree_bound(...))`` exactly."""
    import math
    from sparsecc.plan import stats
    rng = np.random.default_rng(7)
    skipped = 0
    for _ in range(3000):
        n = {i: int(rng.integers(1, 200)) for i in "abcd"}

        def make(idx):
            nnz = float(rng.uniform(0, math.prod(n[i] for i in idx)) * rng.choice([1, 0.01, 1e-4]))
            counts = []
            for i in idx:
                c = None
                if rng.random() < 0.6:
                    c = rng.random(n[i]) ** rng.uniform(0.1, 5) * (rng.random(n[i]) < rng.uniform(0.05, 1))
                    c = c / c.sum() * nnz if c.sum() else c
                counts.append(c)
            return stats.TensorStats(tuple(idx), tuple(n[i] for i in idx), nnz, False, tuple(counts))
        x = make("".join(rng.permutation(list("abcd"))[: rng.integers(1, 4)]))
        y = make("".join(rng.permutation(list("abcd"))[: rng.integers(1, 4)]))
        out = tuple(i for i in dict.fromkeys(x.indices + y.indices) if rng.random() < 0.5)
        sizes = stats._sizes(x, y)
        volume = math.prod(sizes[i] for i in out)
        want = stats.degree_bound(x, y, out)
        for cap in (want, want * rng.uniform(0, 2), float(rng.uniform(0, volume + 1))):
            got = stats._degree_bound(x, y, out, sizes, volume, stats._shared(x, y), None, cap)
            assert min(cap, got) == min(cap, want)
            skipped += got != want
    assert skipped                          # (the skip does happen)


def test_first_steps_operands_of_another_kind_take_the_general_call(monkeypatch):
    """The class's closure leaves the type and dtype tests of the operands its first step
    reads as they are to that step's repeated-call path (where it is the one the closure was
    built with): an operand of another type, dtype or index dtype within the class's bounds
    misses there and takes the general call (never the step's own general call on it), for a
    one-step plan and for the first step of a path; converted operands keep their tests."""
    def int64_indices(A):
        A = sp.csr_array(A, copy=True)
        A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
        return A
    general = {"n": 0}
    call_general = planned.PlannedKernel._call_general

    def counting(self, args, kwargs):
        general["n"] += 1
        return call_general(self, args, kwargs)
    monkeypatch.setattr(planned.PlannedKernel, "_call_general", counting)
    for k in (sc.compile("ij,jk,k->i", "csr", "csr", "dense"), sc.compile("ij,jk,k->i", "csr", "csr", "dense", optimize=PATH)):
        A, B, x = _ops(20)
        k(A, B, x)
        k(A, B, x)
        others = [(sp.csr_matrix(A), B, x), (A, sp.csr_matrix(B), x), (A, B, x.astype(np.float32)),
                  (A, sp.csr_array(B.astype(np.float32)), x), (A, B, x.astype(np.int64))]     # other classes
        same = [(int64_indices(A), B, x), (A, int64_indices(B), x),                         # the class, other kinds
                (A, B, np.asfortranarray(np.stack([x, x]))[0])]
        for args in others + same + [(A, B, x)] + same[::-1] + others[::-1]:
            want = np.einsum("ij,jk,k->i", *(a.toarray() if sp.issparse(a) else np.asarray(a) for a in args))
            n = general["n"]
            got = k(*args)
            np.testing.assert_allclose(got, want, rtol=1e-5)
            assert got.dtype == want.dtype
            if any(args is o for o in others):
                assert general["n"] == n + 1    # (another class than the last call's: the general call)
        k(A, B, x)                          # (back to the class: its closure installed again)
        general["n"] = 0
        for _ in range(3):
            np.testing.assert_allclose(k(A, B, x), _oracle(A, B, x))     # the class's closure
        assert general["n"] == 0
    mixed = sc.compile("ij,jk,k->i", "csr", "csr", "dense", optimize=PATH)   # x converted first: its dtype tested
    A, B, x = _ops(21)
    x32 = x.astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(mixed(A, B, x32), _oracle(A, B, x32), rtol=1e-5)
    general["n"] = 0
    got = mixed(A, B, x)                    # float64 x: another class
    assert general["n"] == 1 and got.dtype == np.float64
    np.testing.assert_allclose(got, _oracle(A, B, x))


def test_closure_keeps_the_type_tests_when_the_first_steps_path_is_another_kinds():
    """Where the first step's repeated-call path in place when the closure is built was made
    for operands of other types or dtypes (a step kernel is shared; a router may have served
    the call), the closure tests those operands' types and dtypes itself."""
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense", optimize=PATH)
    A, B, x = _ops(30)
    k(A, B, x)
    key = planned._class_key((A, B, x))
    plan = k._plans[key]
    ready = k._runs[(id(plan), tuple(v.dtype for v in (A, B, x)))]
    own = planned._fast.build(k, key, plan, *ready)
    assert "_F0" in own.source
    step = ready[0][0]
    step(sp.csr_matrix(B), x)               # the first step's path: another type's
    other = planned._fast.build(k, key, plan, *ready)
    assert "_F0" not in other.source and "type(a1) is not _T1" in other.source
    np.testing.assert_allclose(other(k, (A, B, x)), _oracle(A, B, x))
    assert other(k, (A, sp.csr_matrix(B), x)) is planned._MISS
