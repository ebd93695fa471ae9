"""Property-based tests of semiring einsums against the brute-force evaluator (tests/oracle.py).

Hypothesis draws an einsum expression (1-3 operands of rank 1-3 over ``ijkl``, no
diagonals, an explicit output), sizes per index (1 included), a storage format per operand
(sparse ones as in test_properties.py, or dense), a semiring, stored zeros now and then, and
``out_format`` (``None``, ``"dense"``, or a sparse one of the result's rank).  Each example
checks the values against the evaluator, which applies GraphBLAS's rules on dense copies
(only stored entries take part; the identity where nothing does), and for sparse results
that the stored pattern is exactly the entries some term reached.

Run length as in test_properties.py: ``SPARSECC_HYPOTHESIS_EXAMPLES`` (default 25 here) and
``SPARSECC_HYPOTHESIS_SEED``.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

import sparsecc as sc
from oracle import evaluate
from sparsecc.expr import Stored
from sparsecc.parse import parse_einsum
from sparsecc.semiring import apply, lookup

MAX_EXAMPLES = int(os.environ.get("SPARSECC_HYPOTHESIS_EXAMPLES", "25"))
_SEED = os.environ.get("SPARSECC_HYPOTHESIS_SEED")

SEMIRINGS = ["plus_times", "min_plus", "max_plus", "max_times", "min_max", "max_min", "plus_pair",
             "lor_land", "min_first", "plus_min"]
SPARSE = {1: ["coo"], 2: ["csr", "csc", "coo", "dcsr", "dcsc"], 3: ["coo", "csf"]}


@st.composite
def cases(draw):
    n_ops = draw(st.integers(1, 3))
    terms = []
    for _ in range(n_ops):
        rank = draw(st.integers(1, 3))
        terms.append("".join(draw(st.permutations("ijkl"))[:rank]))
    used = sorted(set("".join(terms)))
    out = draw(st.lists(st.sampled_from(used), unique=True, max_size=min(3, len(used))))
    sizes = {i: draw(st.integers(1, 5)) for i in used}
    fmts = [draw(st.sampled_from(SPARSE[len(t)] + ["dense"])) for t in terms]
    semiring = draw(st.sampled_from(SEMIRINGS))
    densities = [draw(st.sampled_from([0.0, 0.3, 0.6, 1.0])) for _ in terms]
    zeros = [draw(st.booleans()) for _ in terms]
    rank = len(out)
    outs = [None, "dense"] + (["csr"] if rank == 2 else ["coo"] if rank else [])
    out_format = draw(st.sampled_from(outs))
    seed_ = draw(st.integers(0, 2**16))
    return "".join([",".join(terms), "->", "".join(out)]), sizes, fmts, semiring, densities, zeros, out_format, seed_


def _operand(term, sizes, fmt, density, zeros, boolean, rng):
    shape = tuple(sizes[i] for i in term)
    mask = rng.random(shape) < density
    vals = (rng.random(shape) < 0.7) if boolean else np.round(rng.standard_normal(shape) * 4) / 2
    if fmt == "dense":
        return np.asarray(vals, bool if boolean else np.float64)
    coords = np.nonzero(mask)
    data = vals[coords]
    if zeros and len(data) and not boolean:
        data[::2] = 0.0                     # stored zeros take part in a semiring
    A = sp.coo_array((data.astype(bool if boolean else np.float64), coords), shape=shape)
    A.has_canonical_format = True
    if len(shape) == 2 and fmt in ("csr", "dcsr"):
        return sp.csr_array(A)
    if len(shape) == 2 and fmt in ("csc", "dcsc"):
        return sp.csc_array(A)
    return A


def _stored(x) -> np.ndarray:
    mask = np.zeros(x.shape, bool)
    c = sp.coo_array(x)
    mask[tuple(c.coords)] = True
    return mask


_settings = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=_SEED is None,
                     suppress_health_check=list(HealthCheck))


def _seeded(f):
    return seed(int(_SEED))(f) if _SEED is not None else f


@_seeded
@_settings
@given(cases())
def test_semiring_einsum_matches_brute_force(case):
    subscripts, sizes, fmts, name, densities, zeros, out_format, seed_ = case
    note(repr(case))
    rng = np.random.default_rng(seed_)
    s = lookup(name)
    boolean = s.add == "lor"
    terms = subscripts.split("->")[0].split(",")
    ops = [_operand(t, sizes, f, d, z, boolean, rng) for t, f, d, z in zip(terms, fmts, densities, zeros)]
    got = sc.einsum(subscripts, *ops, formats=fmts, semiring=name, out_format=out_format)
    stmt = apply(parse_einsum(subscripts, len(ops)), s)
    names = stmt.operands
    want, reached = evaluate(stmt, dict(zip(names, ops)), {n for n, o in zip(names, ops) if sp.issparse(o)})
    if sp.issparse(got):
        dense = np.asarray(got.toarray(), float)
        stored = _stored(got)
        want = np.asarray(want, float)
        np.testing.assert_allclose(dense[reached], want[reached])
        out = subscripts.split("->")[1]
        independent = any(not (set(t) & set(out)) for t in terms)
        if not any(sp.issparse(o) for o in ops):
            # documented (docs/sparse-results.md): a sparse result computed from dense
            # operands only is converted from a dense one, which stores nonzeros only
            assert not (stored & ~reached).any()
            assert (dense[~reached] == 0).all()
        elif independent:
            # documented (docs/semirings.md, "Limits"): an operand sharing no index with the
            # result is reduced in a loop of its own, and MLIR 22 then stores every entry
            # the other operands reach, with the identity where this one stores nothing
            assert not (reached & ~stored).any()
            ident = float(np.asarray(lookup(name).identity if lookup(name).identity is not None
                                     else {"plus": 0, "times": 1, "min": np.inf, "max": -np.inf,
                                           "lor": 0}[lookup(name).add]))
            assert np.isin(dense[stored & ~reached], [0.0, ident]).all()
        else:
            np.testing.assert_array_equal(stored, reached)
    else:
        if isinstance(stmt.expr, Stored):      # no contracted index: unreached entries are 0
            want = np.where(reached, want, 0)
        np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float).reshape(np.shape(got)))
