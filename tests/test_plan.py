"""Planned expressions (sparsecc/plan, sparsecc/planned.py) against numpy.einsum on dense
copies: the planner's rules (each test breaks when its rule is removed), optimize= values,
determinism, and results equal to the one nest's (patterns included).  The default run
reuses a handful of step kernels (``ij,j->i``, ``ij,jk->ik`` ...); the sweep is ``slow``."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.planned import PlannedKernel
from sparsecc.runtime.kernel import Kernel


def rand(shape, density, seed, fmt="csr", dtype=np.float64):
    rng = np.random.default_rng(seed)
    if fmt == "dense":
        return rng.random(shape).astype(dtype)
    if len(shape) == 1:
        return sp.random_array(shape, density=density, format="coo", random_state=rng, dtype=dtype)
    a = sp.random_array(shape, density=density, format="coo", random_state=rng)
    a.data = (a.data * 10).astype(dtype) if np.dtype(dtype).kind in "iu" else a.data.astype(dtype)
    return a.asformat(fmt)


def dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def steps(p):
    return [(s.subscripts, s.format) for s in p.steps]


N = 200
A, B, C = (rand((N, N), 0.03, s) for s in (1, 2, 3))
X = rand((N, 16), 1, 4, "dense")
W = rand((16, 4), 1, 5, "dense")
x = rand((N,), 1, 6, "dense")


# ------------------------------------------------------------------- the planner's rules
def test_chain_matvec_plans_right_to_left():
    p = sc.plan("ij,jk,k->i", A, B, x)
    assert steps(p) == [("ij,j->i", "dense"), ("ij,j->i", "dense")]
    assert p.steps[0].inputs == ("#1", "#2") and p.steps[1].inputs == ("#0", "t0")
    assert p.path == ((1, 2), (0, 1))
    got = sc.einsum("ij,jk,k->i", A, B, x)
    np.testing.assert_allclose(got, np.einsum("ij,jk,k->i", dense(A), dense(B), x), rtol=1e-12)


def test_gnn_layer_multiplies_the_dense_factors_first():
    p = sc.plan("ij,jk,kl->il", A, X, W)
    assert p.path == ((1, 2), (0, 1)) and steps(p)[0] == ("ij,jk->ik", "dense")
    np.testing.assert_allclose(sc.einsum("ij,jk,kl->il", A, X, W), dense(A) @ X @ W, rtol=1e-12)


def test_mask_rule_keeps_the_mask_in_the_last_nest():
    """M * (A @ B @ C): A @ B (or B @ C) is materialized, the mask stays in the nest of the
    last product (removing the mask rule gives three two-operand steps).  (A @ B sparse, C
    denser: with A, B and C alike the one nest - or, where the mask is very sparse, a chain
    through M * A - is estimated cheaper, now that the masked nest's walks count.)"""
    M = rand((N, N), 0.02, 7)
    A2, B2, C2 = rand((N, N), 0.01, 1), rand((N, N), 0.01, 2), rand((N, N), 0.5, 3)
    p = sc.plan("ij,ik,kl,lj->ij", M, A2, B2, C2)
    assert len(p.steps) == 2 and "masked by T0" in p.reason
    assert len(p.steps[-1].inputs) == 3 and p.steps[-1].inputs[0] == "#0"
    # a masked product of two: one nest, the statement itself
    q = sc.plan("C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])", M=M, A=A, B=B)
    assert len(q.steps) == 1 and "masked by M" in q.reason and "flat form" in q.reason
    # SDDMM-like: dense factors sampled at a sparse mask's entries
    s = sc.plan("ij,ik,jk->ij", M, X, X)
    assert s.single and "masked" in s.reason


def test_a_reduction_inside_the_product_runs_as_its_flat_nest():
    """M[i,j] * sum[k](A[i,k] * B[k,j]) as written lowers its inner sum into a dense i x j
    temporary (quadratic in n); its one nest runs as the flat sum[k](M * A * B) instead:
    SciPy's (A @ B).multiply(M), entries where a product is stored."""
    M = rand((N, N), 0.02, 9)
    e = "C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])"
    k = sc.compile(e, M="csr", A="csr", B="csr", out_format="csr")
    got = k(M=M, A=A, B=B)
    want = (sp.csr_array(A) @ sp.csr_array(B)).multiply(sp.csr_array(M))
    np.testing.assert_allclose(dense(got), dense(want), rtol=1e-12)
    assert got.nnz == sp.csr_array(want).nnz
    step = k.ir("mlir", step=1)
    assert "memref.alloc(%size_i, %size_j)" not in step
    # the statement as written, as one nest: with CSR operands the hand-written masked product
    # (dialect/kernels/masked_spgemm.py, no temporary either); the sparsifier's lowering of it
    # (a mask stored CSC) fills the dense temporary
    assert "masked_row" in sc.compile(e, M="csr", A="csr", B="csr", optimize=False).ir("mlir")
    assert "memref.alloc(%size_i, %size_j)" in sc.compile(e, M="csc", A="csr", B="csr", optimize=False).ir("mlir")
    # the flat form of an einsum statement is the statement itself: its own one nest
    assert sc.plan("ij,ik,kj->ij", M, A, B).single


def test_mask_rule_does_not_fire_for_a_dense_mask():
    p = sc.plan("ij,ik,kl,lj->ij", rand((N, N), 1, 8, "dense"), A, B, C)
    assert "masked" not in p.reason


def test_triangle_count_stays_one_nest():
    L = sp.tril(A + A.T, -1).tocsr()
    p = sc.plan("ij,jk,ik->", L, L, L)
    assert p.single and "masked" in p.reason       # never builds L @ L
    d = dense(L)
    assert sc.einsum("ij,jk,ik->", L, L, L) == pytest.approx(np.einsum("ij,jk,ik->", d, d, d))


def test_one_nest_rule_for_elementwise_products():
    """Three vectors' dot product: materializing x*y costs more than the one nest."""
    p = sc.plan("i,i,i->", x, x, x)
    assert p.single and "visits" in p.reason


def test_one_nest_rule_takes_a_hand_written_one_nest_as_a_fact():
    """The caller says the one nest is a hand-written kernel: its points cost
    cost.HANDWRITTEN_SPEEDUP times less, so steps only a little cheaper than the
    sparsifier's nest no longer win (plan/ itself asks no runtime)."""
    from sparsecc.plan import make_plan, of_operand
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense")
    st = {n: of_operand(v) for n, v in zip(k.stmt.operands, (A, B, x))}
    dn = {"#0": False, "#1": False, "#2": True}
    steps_plan = make_plan(k.stmt, st, dn, "dense")
    assert not steps_plan.single and steps_plan.seconds < steps_plan.single_seconds < 8 * steps_plan.seconds
    one = make_plan(k.stmt, st, dn, "dense", one_nest_handwritten=True)
    assert one.single and "hand-written" in one.reason
    assert one.single_seconds < steps_plan.single_seconds


def test_mttkrp_one_nest_is_known_hand_written(monkeypatch):
    """PlannedKernel asks runtime/fast_paths whether the one nest is hand-written (MTTKRP
    is): the estimate is the hand-written kernel's, well below the sparsifier's."""
    rng = np.random.default_rng(7)
    T = sp.random_array((30, 30, 30), density=0.05, format="coo", random_state=rng)
    T.sum_duplicates()
    Bm, Cm = rng.random((30, 8)), rng.random((30, 8))
    k = sc.compile("ijk,jr,kr->ir", "coo", "dense", "dense")
    assert isinstance(k, PlannedKernel)
    p = k.plan(T, Bm, Cm)
    assert p.single and "hand-written" in p.reason
    monkeypatch.setattr(PlannedKernel, "_handwritten", lambda self, values, rf: False)
    k._plans.clear()
    q = k.plan(T, Bm, Cm)
    assert "hand-written" not in q.reason and q.single_seconds > 2 * p.single_seconds
    k._plans.clear()
    # a three-factor chain over CSR has no hand-written one nest
    assert not sc.compile("ij,jk,k->i", "csr", "csr", "dense")._handwritten([A, B, x], "dense")


def test_hand_written_one_nest_is_known_without_a_target():
    """The planner asks ``fast_paths.serves`` (no compile target resolved, no llvmlite loaded
    for a plan): on every specialization of the kernel corpus it answers what ``route`` with
    the target's facts answers - the matchers read no facts, only the emitted code does."""
    import kernel_corpus as kc
    from sparsecc.kernel_abi import TargetFacts
    from sparsecc.parse import parse_einsum, parse_notation
    from sparsecc.runtime import fast_paths
    facts = TargetFacts(**kc.FACTS)
    found = 0
    for source, text, fmts, dtypes, out in kc._cases():
        stmt = parse_einsum(text, len(fmts)) if source == "einsum" else parse_notation(text)
        formats, out = tuple(kc._format(f) for f in fmts), kc._format(out)
        routed = fast_paths.route(stmt, formats, tuple(dtypes), out, facts=facts) is not None
        assert fast_paths.serves(stmt, formats, tuple(dtypes), out) == routed, text
        found += routed
    assert found


@pytest.mark.parametrize("stmt", [
    "y[i] = sum[j,k](exp(A[i,j] * B[j,k]) * x[k])",            # a function
    "y[i] = max[j,k](A[i,j] * B[j,k] * x[k])",                  # max does not distribute times
    "y[i] = sum[j,k](where(A[i,j] > 0.5, B[j,k], 1.0) * B[j,k] * x[k])",
    "y[i] = sum[j,k](A[i,j] * B[j,k] * x[k] / 2.0)",                # a division
    "y[i] = sum[j](A[i,j] * sum[k](B[j,k] * x[k]) * x[j]) + x[i]",     # a sum of products
    "y[i] = min[j](A[i,j] + max[k](B[j,k] + x[k]))",            # a second monoid
])
def test_never_reorders_across_nonlinear_parts(stmt):
    names = {"A": A, "B": B, "x": x}
    from sparsecc.parse import parse_notation
    ops = {n: names[n] for n in parse_notation(stmt).operands}
    p = sc.plan(stmt, **ops)
    assert p.single and p.reason.startswith("one loop nest")
    from sparsecc.expr import accesses
    n = len([a for a in accesses(parse_notation(stmt).expr) if a.indices])
    with pytest.raises(sc.SparseccError, match="cannot be computed in steps"):
        sc.compile(stmt, optimize=[(0, 1)] * (n - 1))


def test_distributive_semiring_plans_and_matches():
    """min_plus: + distributes over min, so it plans; the result equals the one nest's.  (The
    path is given: at this size the one nest is the cheaper, B @ x's sparse result being
    walked for every row of A.)"""
    path = [(1, 2), (0, 1)]
    Bgap = B.tolil()
    Bgap[5, :] = 0
    Bgap = sp.csr_array(Bgap)
    Bgap.eliminate_zeros()
    p = sc.plan("ij,jk,k->i", A, Bgap, x, semiring="min_plus", optimize=path)
    assert not p.single
    # stored entries only: B @ x has no entry at row 5, so it is stored sparse (a dense one
    # would hold the identity there and change nothing here, but would for other semirings)
    assert p.steps[0].format == "coo"
    # every row of B stores something, so B @ x stores every entry - but a plan serves every
    # call of its statistics class, and the next B may have an empty row: sparse still
    k = sc.compile("ij,jk,k->i", semiring="min_plus", optimize=path)
    assert k.plan(A, B, x).steps[0].format == "coo"
    for b in (B, Bgap):
        got = sc.einsum("ij,jk,k->i", A, b, x, semiring="min_plus", optimize=path)
        one = sc.einsum("ij,jk,k->i", A, b, x, semiring="min_plus", optimize=False)
        np.testing.assert_allclose(got, one, rtol=1e-12)
    assert sc.plan("ij,jk,k->i", A, B, x, semiring="plus_pair").single     # pair does not distribute


# ---------------------------------------------------------------------- optimize= values
def test_bad_optimize_values():
    for bad in ("fast", 3, None, [(0, 5)], [(0, 0)], [(0, 1)], [()], [("a", 1)], ["path", (0, 1)]):
        with pytest.raises(sc.SparseccError):
            sc.einsum("ij,jk,k->i", A, B, x, optimize=bad)
    with pytest.raises(sc.SparseccError):
        sc.compile("ij,jk,k->i", optimize="quick")
    with pytest.raises(sc.SparseccError, match="leaves 2 operands"):
        sc.plan("ij,jk,k->i", A, B, x, optimize=[(0, 1)])
    with pytest.raises(sc.SparseccError):      # two operands: a path must fit too
        sc.einsum("ij,j->i", A, x, optimize=[(0, 1), (0, 1)])


def test_explicit_paths():
    want = np.einsum("ij,jk,k->i", dense(A), dense(B), x)
    for path in ([(0, 1), (0, 1)], ["einsum_path", (1, 2), (0, 1)], [(0, 1, 2)]):
        np.testing.assert_allclose(sc.einsum("ij,jk,k->i", A, B, x, optimize=path), want, rtol=1e-12)
    p = sc.plan("ij,jk,k->i", A, B, x, optimize=[(0, 1), (0, 1)])
    assert p.path == ((0, 1), (0, 1)) and steps(p)[0] == ("ij,jk->ik", "csr")
    assert sc.plan("ij,jk,k->i", A, B, x, optimize=[(0, 1, 2)]).single
    np.testing.assert_allclose(sc.einsum("ij,jk,k->i", A, B, x, optimize="greedy"), want, rtol=1e-12)
    assert sc.plan("ij,jk,k->i", A, B, x, optimize="greedy").path == ((1, 2), (0, 1))


def test_two_operand_expressions_take_todays_path():
    k = sc.compile("ij,j->i", "csr", "dense")
    assert type(k) is Kernel
    assert type(sc.compile("ij,jk,k->i")) is PlannedKernel
    assert type(sc.compile("ij,jk,k->i", optimize=False)) is Kernel
    assert sc.plan("ij,j->i", A, x).single and not hasattr(k, "plan")


def test_plan_is_cached_per_statistics_class():
    k = sc.compile("ij,jk,k->i")          # sc.compile's memo: other tests may have planned it
    p1 = k.plan(A, B, x)
    before = len(k._plans)
    assert k.plan(rand((N, N), 0.03, 11), B, x) is p1            # same class: not planned again
    assert len(k._plans) == before
    p3 = k.plan(rand((N, N), 0.5, 12), B, x)                        # another density class
    assert p3 is not p1 and len(k._plans) in (before, before + 1)   # new, unless planned before
    k(A, B, x)
    assert k.ir("mlir", step=1).startswith("#enc") and k._last_plan is p1
    with pytest.raises(sc.SparseccError):
        k.ir("mlir", step=3)


def test_plan_deterministic_in_another_process():
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        r = lambda s, d: sp.random_array((300, 300), density=d, format='csr', random_state=np.random.default_rng(s))
        M, A, B, C = r(7, 0.002), r(1, 0.03), r(2, 0.03), r(3, 0.05)
        print(sc.plan('ij,ik,kl,lj->ij', M, A, B, C)); print(sc.plan('ij,jk,kl,lm->im', A, B, C, A))
    """)
    env = dict(os.environ, PYTHONHASHSEED="random")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            for _ in range(2)]
    assert all(o.returncode == 0 for o in outs), outs[0].stderr
    assert outs[0].stdout == outs[1].stdout and "plan for" in outs[0].stdout


def test_str_plan_shows_steps_formats_and_sizes():
    s = str(sc.plan("ij,jk,kl->il", A, B, C))
    assert "2 steps" in s and "csr" in s and "entries" in s and "t0[" in s and "why:" in s


# ----------------------------------------------------------------- results as one nest's
def test_sparse_result_pattern_equals_one_nest():
    """All sparse: intermediates stay sparse, so the result stores exactly the entries the
    one nest stores (stored zeros included: B has some)."""
    Bz = B.copy()
    Bz.data[::3] = 0.0
    got = sc.einsum("ij,jk,kl->il", A, Bz, C)
    one = sc.einsum("ij,jk,kl->il", A, Bz, C, optimize=False)
    assert got.format == one.format == "csr"
    g, o = got.copy(), one.copy()
    g.sort_indices(), o.sort_indices()
    np.testing.assert_array_equal(g.indptr, o.indptr)
    np.testing.assert_array_equal(g.indices, o.indices)
    np.testing.assert_allclose(g.data, o.data, rtol=1e-12, atol=1e-15)


def test_sparse_result_with_a_dense_factor_keeps_the_pattern():
    """A[i,j] * sum[k](B[j,k] * x[k]) as a sparse result: the pattern also needs B's row j
    non-empty - kept by a sparse intermediate, never a dense one."""
    Bgap = B.tolil()
    Bgap[5, :] = 0
    Bgap = sp.csr_array(Bgap)
    Bgap.eliminate_zeros()
    got = sc.einsum("ij,jk,k->ij", A, Bgap, x, out_format="csr")
    one = sc.einsum("ij,jk,k->ij", A, Bgap, x, out_format="csr", optimize=False)
    assert got.nnz == one.nnz
    np.testing.assert_allclose(dense(got), dense(one), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.complex128])
def test_dtypes(dtype):
    a, b = rand((N, N), 0.03, 21, dtype=dtype), rand((N, N), 0.03, 22, dtype=dtype)
    v = (rand((N,), 1, 23, "dense") * 100).astype(dtype)
    got = sc.einsum("ij,jk,k->i", a, b, v)
    want = np.einsum("ij,jk,k->i", dense(a), dense(b), v)
    assert got.dtype == want.dtype
    if np.dtype(dtype).kind == "i":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_mixed_dtypes_compute_in_the_result_dtype():
    ai = rand((N, N), 0.03, 31, dtype=np.int64)
    v32 = x.astype(np.float32)
    got = sc.einsum("ij,jk,k->i", ai, B, v32)
    want = np.einsum("ij,jk,k->i", dense(ai), dense(B), v32)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_index_notation_with_a_constant_and_check_false():
    got = sc.evaluate("y[i] = 2.5 * A[i,j] * B[j,k] * x[k]", A=A, B=B, x=x, check=False)
    np.testing.assert_allclose(got, 2.5 * (dense(A) @ (dense(B) @ x)), rtol=1e-12)
    assert not sc.plan("y[i] = 2.5 * A[i,j] * B[j,k] * x[k]", A=A, B=B, x=x).single


def test_gram_with_weights():
    G = rand((400, 60), 0.05, 41)
    w = rand((400,), 1, 42, "dense")
    got = sc.einsum("ki,k,kj->ij", G, w, G)
    np.testing.assert_allclose(dense(got), dense(G).T @ (w[:, None] * dense(G)), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ the random sweep
LETTERS = "abcdef"


def random_einsum(rng):
    n = int(rng.integers(3, 6))
    used = []
    terms = []
    for k in range(n):
        rank = int(rng.integers(1, 3))
        pool = list(LETTERS[: min(len(LETTERS), n + 1)])
        t = "".join(rng.choice(pool, size=rank, replace=False))
        if k and not set(t) & set("".join(terms)):      # keep it connected
            t = t[:-1] + rng.choice(list("".join(terms)))
            if len(set(t)) != len(t):
                t = t[0]
        terms.append(t)
        used += list(t)
    letters = sorted(set(used))
    out = "".join(rng.choice(letters, size=int(rng.integers(0, 3)), replace=False)) if letters else ""
    return ",".join(terms) + "->" + out


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_random_einsums(seed):
    rng = np.random.default_rng(seed)
    sub = random_einsum(rng)
    terms = sub.split("->")[0].split(",")
    letters = sorted(set("".join(terms)))
    size = {c: int(rng.integers(3, 9)) for c in letters}
    dtype = [np.float64, np.float32, np.int64, np.complex128][seed % 4]
    ops = []
    for k, t in enumerate(terms):
        fmts = ["csr", "csc", "coo", "dense"] if len(t) == 2 else ["coo", "dense"]
        fmt = fmts[int(rng.integers(len(fmts)))]
        ops.append(rand(tuple(size[c] for c in t), 0.4, 100 * seed + k, fmt, dtype))
    want = np.einsum(sub, *[dense(o) for o in ops])
    got = sc.einsum(sub, *ops)
    one = sc.einsum(sub, *ops, optimize=False)
    assert np.asarray(dense(got)).dtype == want.dtype
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(dense(got), want, rtol=tol, atol=tol)
    if sp.issparse(one):
        assert sp.issparse(got) and got.nnz == one.nnz, sub
    # min_plus on the same shapes (real dtypes): against a written-out oracle
    if dtype in (np.float64, np.int64):
        got = sc.einsum(sub, *ops, semiring="min_plus")
        if sp.issparse(got):        # a sparse result: unstored entries are absent (+inf here)
            c = got.tocoo()
            full = np.full(got.shape, np.inf)
            full[tuple(c.coords)] = c.data
            got = full
        got = np.asarray(got)
        if got.dtype.kind == "i":   # an integer min's identity is the dtype's largest value
            got = np.where(got == np.iinfo(got.dtype).max, np.inf, got.astype(np.float64))
        np.testing.assert_allclose(got, min_plus_oracle(sub, ops), rtol=1e-10)


def min_plus_oracle(sub, ops):
    """min over stored entries of the sum of the factors (unstored: absent), by broadcasting
    dense copies with +inf where nothing is stored; no term: +inf."""
    lhs, out = sub.split("->")
    terms = lhs.split(",")
    letters = sorted(set(lhs))
    total = 0
    for t, o in zip(terms, ops):
        v = dense(o).astype(np.float64)
        if sp.issparse(o):
            stored = dense(sp.coo_array((np.ones(o.nnz), o.tocoo().coords), shape=o.shape)) > 0
            v = np.where(stored, v, np.inf)
        v = np.einsum(f"{t}->{''.join(sorted(t, key=letters.index))}", v)
        shape = [o.shape[t.index(c)] if c in t else 1 for c in letters]
        total = total + v.reshape(shape)
    red = tuple(j for j, c in enumerate(letters) if c not in out)
    r = np.min(total, axis=red) if red else total
    kept = [c for c in letters if c in out]
    return np.einsum(f"{''.join(kept)}->{out}", r) if out else r
