"""Implicit einsum output (no ``->``) next to size-1 broadcasting, against ``numpy.einsum``.

NumPy's implicit output is the indices that appear exactly once in the subscripts as written
(alphabetical; an ellipsis's dimensions first).  sc.einsum reads an operand's size-1 dimension
without it when another operand gives that index a size: the output must still come from the
subscripts as written, not from the subscripts after the dimension is dropped (``"ij,ij"`` over
``(1, 3)`` and ``(2, 3)`` is a scalar, not a vector over ``i``).  docs/dsl.md.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from conftest import seed

#: (subscripts, shapes, which operands are sparse)
CASES = [
    ("ij,ij", [(1, 3), (2, 3)], ()),
    ("ij,ij", [(1, 3), (2, 3)], (0, 1)),
    ("ij,ij", [(2, 1), (2, 3)], (1,)),
    ("ki,ik", [(1, 3), (3, 2)], (0,)),
    ("ij,ji", [(1, 3), (3, 2)], (1,)),
    ("iJ,Ji", [(1, 3), (3, 2)], ()),
    ("ijk,ik", [(1, 2, 3), (4, 3)], (0,)),
    ("ij,jk", [(2, 1), (3, 4)], (0,)),
    ("ab,b", [(1, 3), (1,)], ()),
    ("ab,bc", [(3, 1), (4, 2)], (1,)),
    ("ij,ij,j", [(1, 3), (2, 3), (1,)], (1,)),
    ("ij,j", [(1, 3), (3,)], (0,)),           # nothing to broadcast: i has size 1 only
    ("ba,ab", [(1, 3), (3, 1)], ()),
    ("...i,...i", [(1, 3), (2, 3)], (0,)),
    ("i...,i...", [(3, 1), (3, 4)], ()),
    ("...ij,...ji", [(1, 2, 3), (4, 3, 2)], ()),
    ("ij...,ij", [(1, 3, 2), (2, 3)], ()),
    ("i...,i", [(1, 3), (4,)], ()),
]


def _operand(shape, sparse, rng):
    d = np.where(rng.random(shape) < 0.7, rng.integers(1, 5, shape), 0).astype(float)
    if sparse:
        return d, (sp.csr_array(d) if d.ndim == 2 else sp.coo_array(d))
    return d, d


@pytest.mark.parametrize("subscripts,shapes,sparse", CASES, ids=lambda v: str(v).replace(" ", ""))
def test_implicit_output_with_size1_broadcasting(subscripts, shapes, sparse):
    rng = np.random.default_rng(seed(subscripts, shapes, sparse))
    dense, ops = zip(*(_operand(sh, k in sparse, rng) for k, sh in enumerate(shapes)))
    want = np.einsum(subscripts, *dense)
    got = sc.einsum(subscripts, *ops)
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    assert got.shape == want.shape, (subscripts, shapes, got.shape, want.shape)
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("subscripts,shapes", [("ij,ij", [(1, 3), (2, 3)]), ("ki,ik", [(1, 3), (3, 2)]),
                                               ("...i,...i", [(1, 3), (2, 3)])])
def test_sublist_form(subscripts, shapes):
    rng = np.random.default_rng(seed(subscripts, shapes))
    dense = [rng.integers(1, 5, sh).astype(float) for sh in shapes]
    letters = {c: k for k, c in enumerate(sorted(set(subscripts) - {".", ","}))}
    subs = [[Ellipsis if part == "..." else letters[part] for part in _split(t)] for t in subscripts.split(",")]
    args = [x for pair in zip([sp.csr_array(dense[0])] + dense[1:], subs) for x in pair]
    want = np.einsum(*[x for pair in zip(dense, subs) for x in pair])
    got = sc.einsum(*args)
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want)


def _split(t: str) -> list[str]:
    out, k = [], 0
    while k < len(t):
        if t.startswith("...", k):
            out.append("...")
            k += 3
        else:
            out.append(t[k])
            k += 1
    return out


def test_issue_examples():
    got = sc.einsum("ij,ij", np.ones((1, 3)), np.ones((2, 3)))
    assert np.shape(got) == () and got == 6.0
    got = sc.einsum("ki,ik", sp.csr_array(np.ones((1, 3))), np.arange(6.).reshape(3, 2))
    assert np.shape(got) == () and got == 15.0
