"""Sparse operands broadcast in some or all of their dimensions, against ``numpy.einsum``.

A size-1 dimension pairs with any size (NumPy's einsum broadcasting); sc.einsum reads the operand
without it.  A sparse operand broadcast in every dimension (a 1 x 1 SciPy array, a length-1
vector, a 1 x 1 x 1 COO) has no dimension left: it is read as a length-1 vector over an index of
its own, summed, so its one entry (or none) is still read by the kernel (issue 27, item 8: SciPy's
raw ``TypeError`` for a 0-d ``coo_array`` before).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from conftest import seed


def _one(fmt: str, value):
    d = np.array([[value]], float)
    if fmt == "coo-dup":       # uncoalesced: two entries at (0, 0)
        h = np.array([value / 4, 3 * value / 4])
        return sp.coo_array((h, (np.zeros(2, np.int32), np.zeros(2, np.int32))), shape=(1, 1))
    if fmt == "coo-empty":
        return sp.coo_array((1, 1))
    return {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array, "bsr": sp.bsr_array,
            "dok": sp.dok_array, "lil": sp.lil_array, "csr_matrix": sp.csr_matrix}[fmt](d)


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def _check(subscripts, *ops, **kw):
    want = np.einsum(subscripts, *[_dense(x) for x in ops])
    got = sc.einsum(subscripts, *ops, **kw)
    got = _dense(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "dok", "lil", "csr_matrix", "coo-dup", "coo-empty"])
def test_1x1_sparse_operand_broadcast_in_every_dimension(fmt):
    rng = np.random.default_rng(seed(fmt))
    X, Y = rng.random((3, 4)), rng.random((5, 3))
    _check("jk,kl,lj->kj", X, _one(fmt, 2.0), Y)


@pytest.mark.parametrize("case", ["1-d", "3-d", "1x1-implicit", "1x1-sparse-next", "1xN", "Nx1", "0-d"])
def test_siblings(case):
    rng = np.random.default_rng(seed(case))
    if case == "1-d":          # a length-1 sparse vector broadcast against a length-3 one
        _check("i,i->i", sp.coo_array(np.array([1.5])), rng.random(3))
        _check("i,i", sp.coo_array(np.array([1.5])), rng.random(3))
    elif case == "3-d":
        _check("ijk,ijk->ijk", sp.coo_array(np.full((1, 1, 1), 2.5)), rng.random((2, 3, 4)))
    elif case == "1x1-implicit":
        _check("ij,ij", sp.csr_array([[3.0]]), rng.random((2, 3)))
    elif case == "1x1-sparse-next":    # next to another sparse operand
        A = sp.random_array((4, 5), density=0.4, rng=rng, format="csr")
        _check("ij,ij->ij", A, sp.csc_array([[2.0]]))
        _check("ij,ij->ij", A, sp.csc_array((1, 1)))
    elif case == "1xN":
        _check("ij,ij->ij", sp.csr_array(rng.random((1, 4)) * (rng.random((1, 4)) < .6)), rng.random((3, 4)))
    elif case == "Nx1":
        _check("ij,ij->ij", sp.csc_array(rng.random((3, 1))), rng.random((3, 4)))
    else:
        _check(",ij->ij", 2.0, sp.csr_array(rng.random((2, 3))))
        _check("ij,->ij", sp.csr_array(rng.random((2, 3))), np.array(2.0))


def test_1x1_under_a_semiring():
    """Only stored entries take part: a 1 x 1 operand that stores nothing gives no term."""
    A = sp.csr_array(np.array([[1.0, 0, 2.0], [0, 3.0, 0]]))
    got = sc.einsum("ij,ij->ij", A, sp.csr_array([[5.0]]), semiring="min_plus")
    want = np.where(A.toarray() != 0, A.toarray() + 5.0, 0)
    np.testing.assert_allclose(_dense(got), want)
    got = sc.einsum("ij,ij->ij", A, sp.csr_array((1, 1)), semiring="min_plus")
    assert sp.issparse(got) and got.shape == (2, 3) and got.nnz == 0
    got = sc.einsum("ij,ij->ij", A, sp.csr_array((1, 1)), semiring="min_plus", out_format="dense")
    assert got.shape == (2, 3) and np.all(np.isinf(got))


@pytest.mark.parametrize("fmt", ["csr", "coo", "dense"])
def test_1x1_with_a_format(fmt):
    """A format given for it (a matrix format no longer fits a vector: the operand's own)."""
    rng = np.random.default_rng(seed("formats", fmt))
    X, Y = rng.random((3, 4)), rng.random((5, 3))
    _check("jk,kl,lj->kj", X, sp.csr_array([[2.0]]), Y, formats=[None, fmt, None])
