"""A reduction over several indices into a sparse result stores exactly the entries that have
a term (docs/sparse-results.md: the Boolean product; a semiring's entry with no term is not
stored).  MLIR 22's sparsifier stored the monoid's identity wherever an outer reduction loop
found something and an inner one nothing: ``y[i] = sum[j,k](A[i,j] * B[j,k])`` into COO
stored ``y[0] = 0`` with row 0 of B empty, ``max_plus`` stored ``-inf`` there (so
``toarray()`` read ``-inf`` instead of 0).  Every case below failed before the split
(plan/nested.py, passes/rewrites.inexact_sparse_outputs); the oracle is written-out loops
over dense copies and masks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.errors import InexactPatternError

ADD = {"sum": (lambda a, b: a + b), "max": max, "min": min, "lor": (lambda a, b: a or b)}
MUL = {"sum": (lambda a, b: a * b), "max": (lambda a, b: a + b), "min": max, "lor": (lambda a, b: a and b)}
SEMIRING = {"sum": None, "max": "max_plus", "min": "min_max", "lor": "lor_land"}


def _sparse(mask, values, fmt):
    idx = np.nonzero(mask)
    x = sp.coo_array((values[idx], idx), shape=mask.shape)
    if mask.ndim == 1:
        return x
    return {"csr": x.tocsr, "csc": x.tocsc, "coo": lambda: x}[fmt]()


def _oracle(terms, out, sizes, masks, values, monoid):
    """{output coordinate: value} over the points where every operand stores an entry."""
    idx = sorted(set("".join(terms)))
    got = {}
    for point in itertools.product(*(range(sizes[c]) for c in idx)):
        env = dict(zip(idx, point))
        at = [tuple(env[c] for c in t) for t in terms]
        if not all(m[p] for m, p in zip(masks, at)):
            continue
        v = values[0][at[0]].item()
        for vals, p in zip(values[1:], at[1:]):
            v = MUL[monoid](v, vals[p].item())
        key = tuple(env[c] for c in out)
        got[key] = v if key not in got else ADD[monoid](got[key], v)
    return got


def _stored(r):
    c = sp.coo_array(r)
    return {tuple(int(x[n]) for x in c.coords): c.data[n].item() for n in range(c.nnz)}


# (einsum, formats, out_format, masks by seed): each has an entry whose outer reduction loop
# finds a term-less inner one
CASES = [
    ("ij,jk->i", ("csr", "csr"), "coo"),        # two reduction loops after the output's
    ("ji,jk->i", ("csr", "csr"), "coo"),        # one before the output loop (expanded), one after
    ("ij,kj->i", ("csr", "csr"), "coo"),
    ("ij,jk,k->i", ("csr", "csr", "coo"), "coo"),
    ("ij,jk,kl->il", ("csr", "coo", "csr"), "csr"),
    ("lj,jk,ki,lk->j", ("dense", "csc", "csc", "coo"), "coo"),   # found only from MLIR's sorted loops
    ("ab,bc,cd,da,ac->ab", ("csr",) * 5, "csr"),   # a cyclic product the mask rule kept one nest
]


def _operands(terms, fmts, sizes, seed, monoid):
    rng = np.random.default_rng(seed)
    masks, values, ops = [], [], []
    for t, f in zip(terms, fmts):
        shape = tuple(sizes[c] for c in t)
        m = np.ones(shape, bool) if f == "dense" else rng.random(shape) < 0.3
        if len(shape) == 2 and f != "dense":
            m[:2, :] = False                    # empty first rows, an empty last column, and a
            m[:, -1] = False                    # row whose entries are in the first columns only
            m[2, :] = False
            m[2, :2] = True
        dtype = bool if monoid == "lor" else np.float64
        v = (rng.random(shape) < 0.8) if monoid == "lor" else rng.integers(-3, 4, shape).astype(np.float64)
        masks.append(m)
        values.append(v.astype(dtype))
        ops.append(v.astype(dtype) if f == "dense" else _sparse(m, v.astype(dtype), f))
    return masks, values, ops


@pytest.mark.parametrize("monoid", ["sum", "max", "lor"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("optimize", [True, False])
def test_sparse_result_stores_only_entries_with_a_term(case, monoid, optimize):
    subs, fmts, out_format = case
    lhs, out = subs.split("->")
    terms = lhs.split(",")
    sizes = {c: 5 + n for n, c in enumerate(sorted(set(lhs) - {","}))}
    masks, values, ops = _operands(terms, fmts, sizes, hash((subs, monoid)) % 1000, monoid)
    want = _oracle(terms, out, sizes, masks, values, monoid)
    kw = {"semiring": SEMIRING[monoid]} if SEMIRING[monoid] else {}
    got = sc.einsum(subs, *ops, out_format=out_format, optimize=optimize, **kw)
    stored = _stored(got)
    assert set(stored) == set(want), f"stored {sorted(set(stored) - set(want))} without a term"
    for key, w in want.items():
        assert stored[key] == pytest.approx(w)


def test_the_plan_splits_one_index_a_step():
    A = sp.csr_array(np.array([[1.0, 0, 0], [0, 2, 0], [0, 0, 0]]))
    B = sp.csr_array(np.array([[0, 0.0], [1, 0], [0, 0]]))      # row 0 empty: y[0] has no term
    k = sc.compile("ij,jk->i", "csr", "csr", out_format="coo")
    y = k(A, B)
    assert y.coords[0].tolist() == [1] and y.data.tolist() == [2.0]
    p = k.last_plan
    assert [s.subscripts for s in p.steps] == ["ij,jk->ij", "ij->i"]
    assert "one index each" in p.reason
    y = sc.einsum("ij,jk->i", A, B, out_format="coo", semiring="max_plus")
    assert y.coords[0].tolist() == [1] and y.data.tolist() == [3.0]
    # a dense result stores every entry anyway: a plain one-nest kernel
    assert not hasattr(sc.compile("ij,jk->i", "csr", "csr"), "last_plan")


def test_expanded_results_without_inner_reductions_stay_one_nest():
    # SpGEMM chains: their reductions run before the result's last loop (access-pattern
    # expansion writes each entry from the innermost body): exact, nothing split
    A = sp.random_array((30, 30), density=0.1, format="csr", rng=1)
    assert sc.plan("ij,jk,kl->il", A, A, A, optimize=False).single
    assert sc.plan("ik,kj->ij", A, A).single


def test_the_runtime_splits_what_it_finds_when_the_nest_compiles():
    # the emitter converts the CSC operand, so the nest inserts directly after three
    # reduction loops: the plan before the first call is one nest; MLIR's sorted loops say
    # it is inexact when it compiles, and the call runs the split plan
    rng = np.random.default_rng(3)
    ops = [np.ones((4, 4), bool), sp.csc_array(rng.random((4, 2)) < 0.5), sp.csc_array(rng.random((2, 1)) < 0.5),
           sp.coo_array(rng.random((4, 2)) < 0.5)]
    k = sc.compile("lj,jk,ki,lk->j", "dense", "csc", "csc", "coo", out_format="coo", semiring="lor_land",
                   optimize=False)
    assert k.plan(*ops).single
    k(*ops)
    assert len(k.last_plan.steps) > 1


def test_a_one_nest_outside_the_planner_is_refused_not_wrong():
    # a kernel nothing plans (a Dask block's, an internal one): the call refuses before its
    # native code runs; an adjoint read on its operand's pattern may run it (its stored 0s
    # are the right gradient values)
    from sparsecc.parse import parse_einsum
    from sparsecc.runtime.kernel import Kernel
    A = sp.csr_array(np.array([[1.0, 0, 0], [0, 2, 0], [0, 0, 0]]))
    B = sp.csr_array(np.array([[0, 0.0], [1, 0], [0, 0]]))
    k = Kernel(parse_einsum("ji,jk->i", 2), {}, out_format="coo")
    with pytest.raises(sc.InexactPatternError, match="out_format='dense'") as info:
        k(A, B)
    assert info.type is InexactPatternError and isinstance(info.value, sc.FormatError)
    k.inexact_ok = True
    assert k(A, B).coords[0].tolist() == [0, 1]      # what MLIR's nest stores: y[0] = 0 has no term


def test_an_ahead_of_time_one_nest_is_refused(tmp_path):
    k = sc.compile("ij,jk->i", "csr", "csr", out_format="coo")
    with pytest.raises(sc.SparseccError, match="without a term"):
        sc.aot.build("several", {"k": k}, str(tmp_path))
