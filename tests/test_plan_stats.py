"""The planner's statistics and estimates (sparsecc/plan/stats.py) against exact counts:
the stored entries of Boolean products computed by SciPy on 0/1 copies.  No compiles."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsecc.plan import stats as S


def exact(a, b) -> int:
    a = sp.csr_array(a).astype(bool).astype(np.int8)
    b = sp.csr_array(b).astype(bool).astype(np.int8)
    return int((a @ b).nnz)


def uniform(n, per, seed):
    return sp.random_array((n, n), density=per / n, format="csr", random_state=np.random.default_rng(seed))


def powerlaw(n, per, seed, alpha=0.9):
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, n + 1) ** alpha
    w /= w.sum()
    r = rng.choice(n, n * per, p=w)
    c = rng.choice(n, n * per, p=rng.permutation(w))
    m = sp.coo_array((np.ones(n * per), (r, c)), shape=(n, n)).tocsr()
    m.sum_duplicates()
    return m


def banded(n, w):
    offs = list(range(-w, w + 1))
    return sp.diags_array([np.ones(n - abs(o)) for o in offs], offsets=offs, format="csr")


CASES = {
    "uniform": lambda: (uniform(3000, 8, 1), uniform(3000, 8, 2)),
    "powerlaw": lambda: (powerlaw(3000, 8, 3), powerlaw(3000, 8, 4)),
    "banded": lambda: (banded(3000, 5), banded(3000, 5)),
    "uniform-large": lambda: (uniform(30000, 10, 5), uniform(30000, 10, 6)),   # more slices than are sampled
    "powerlaw-large": lambda: (powerlaw(30000, 8, 7), powerlaw(30000, 8, 8)),
    "banded-csc": lambda: (banded(30000, 4).tocsc(), banded(30000, 4)),
    "rect-coo": lambda: (sp.random_array((2000, 500), density=0.01, format="coo", random_state=9),
                         sp.random_array((500, 4000), density=0.02, format="csc", random_state=10)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_estimate_within_2x(case):
    a, b = CASES[case]()
    x, y = S.of_operand(a, ("i", "k")), S.of_operand(b, ("k", "j"))
    truth = exact(a, b)
    got = S.estimate(x, y, ("i", "j")).nnz
    assert truth / 2 <= got <= truth * 2, (case, got, truth)
    # the bound bounds
    assert S.degree_bound(x, y, ("i", "j")) >= truth
    # the same estimate in another order of the result's indices
    assert S.estimate(x, y, ("j", "i")).nnz == pytest.approx(truth, rel=1.0)


@pytest.mark.parametrize("case", ["uniform", "powerlaw", "uniform-large", "powerlaw-large"])
def test_uniform_estimate_within_2x_without_locality(case):
    """The uniform-independence estimate (used where no coordinates are known) is within 2x
    where coordinates carry no locality; on banded inputs it overestimates (the bound too),
    which is why real operands are sampled."""
    a, b = CASES[case]()
    x, y = S.of_operand(a, ("i", "k")), S.of_operand(b, ("k", "j"))
    truth = exact(a, b)
    assert truth / 2 <= S.uniform_estimate(x, y, ("i", "j")) <= 2 * truth


def test_banded_needs_sampling():
    a, b = CASES["banded"]()
    x, y = S.of_operand(a, ("i", "k")), S.of_operand(b, ("k", "j"))
    truth = exact(a, b)
    assert S.uniform_estimate(x, y, ("i", "j")) > 2 * truth      # what sampling corrects
    got, per, g = S.sampled_estimate(x, y, ("i", "j"))
    assert got == pytest.approx(truth, rel=0.2) and g == "i" and per.shape == (3000,)


def test_sampled_is_exact_when_every_slice_is_drawn():
    a = uniform(200, 4, 11)
    b = uniform(200, 4, 12)
    x, y = S.of_operand(a, ("i", "k")), S.of_operand(b, ("k", "j"))
    got, per, _ = S.sampled_estimate(x, y, ("i", "j"))
    assert got == exact(a, b)
    rows = np.diff(sp.csr_array((sp.csr_array(a).astype(bool).astype(np.int8) @ sp.csr_array(b).astype(bool)
                                 .astype(np.int8))).indptr)
    np.testing.assert_array_equal(per, rows)


def test_deterministic():
    a, b = CASES["powerlaw-large"]()
    one = S.estimate(S.of_operand(a, "ik"), S.of_operand(b, "kj"), ("i", "j")).nnz
    two = S.estimate(S.of_operand(a, "ik"), S.of_operand(b, "kj"), ("i", "j")).nnz
    assert one == two


def test_operand_stats_counts():
    a = sp.random_array((50, 40), density=0.1, format="csr", random_state=3)
    st = S.of_operand(a, ("i", "j"))
    d = a.toarray() != 0
    np.testing.assert_array_equal(st.count("i"), d.sum(1))
    np.testing.assert_array_equal(st.count("j"), d.sum(0))
    assert st.nnz == d.sum() and st.nonempty == (int(d.any(1).sum()), int(d.any(0).sum()))
    for fmt in ("csc", "coo"):
        other = S.of_operand(getattr(a, "to" + fmt)(), ("i", "j"))
        np.testing.assert_array_equal(other.count("i"), d.sum(1))
        np.testing.assert_array_equal(other.count("j"), d.sum(0))
    dense = S.of_operand(np.ones((3, 4)), ("i", "j"))
    assert dense.full and dense.nnz == 12


def test_dense_side_projection_exact():
    """Sparse times dense: the sparse side's distinct projections times the dense side's
    free sizes (A @ X stores every column of each non-empty row of A)."""
    a = sp.random_array((300, 300), density=0.003, format="csr", random_state=4)
    x = np.ones((300, 7))
    st = S.estimate(S.of_operand(a, "ik"), S.of_operand(x, "kj"), ("i", "j"))
    assert st.nnz == int((np.diff(a.indptr) > 0).sum()) * 7
    # matrix-vector with a dense vector: the non-empty rows
    st = S.estimate(S.of_operand(a, "ik"), S.of_operand(np.ones(300), "k"), ("i",))
    assert st.nnz == int((np.diff(a.indptr) > 0).sum())


def test_empty_and_single_entry():
    z = sp.csr_array((100, 100))
    one = sp.csr_array(([1.0], ([3], [4])), shape=(100, 100))
    for a, b in ((z, one), (one, z), (one, one.T.tocsr()), (one, one)):
        got = S.estimate(S.of_operand(a, "ik"), S.of_operand(b, "kj"), ("i", "j")).nnz
        assert got == exact(a, b)
