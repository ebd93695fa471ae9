"""Ops that take a pattern operand (sparse_mask, sparse_like, from_dense(pattern=),
sampled_addmm): a pattern is a set, so duplicate entries of a non-canonical mask count once,
in every format (CSR/CSC with a repeated index in a row/column, COO with duplicates, unsorted)."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsecc import ops

SHAPE = (4, 5)
# (row, col) pairs with (1, 2) three times and (3, 0) twice, unsorted
ROWS = np.array([3, 1, 0, 1, 3, 1, 2])
COLS = np.array([0, 2, 4, 2, 0, 2, 1])


def _mask(fmt: str, dtype=np.float64):
    """A non-canonical mask with duplicates in ``fmt`` (values 1, -1, 2, ...: never used)."""
    vals = np.array([1, -1, 2, 5, -3, 4, 7], dtype=dtype)
    if fmt == "coo":
        m = sp.coo_array((vals, (ROWS, COLS)), shape=SHAPE)
        assert not m.has_canonical_format
        return m
    if fmt == "csr":
        order = np.argsort(ROWS, kind="stable")
        indptr = np.searchsorted(ROWS[order], np.arange(SHAPE[0] + 1))
        m = sp.csr_array((vals[order], COLS[order], indptr), shape=SHAPE)
    else:
        order = np.argsort(COLS, kind="stable")
        indptr = np.searchsorted(COLS[order], np.arange(SHAPE[1] + 1))
        m = sp.csc_array((vals[order], ROWS[order], indptr), shape=SHAPE)
    assert not m.has_canonical_format
    return m


def _set_mask() -> np.ndarray:
    M = np.zeros(SHAPE, bool)
    M[ROWS, COLS] = True
    return M


def _snapshot(m):
    return [a.copy() for a in ((m.data,) + tuple(m.coords) if m.format == "coo" else
                               (m.data, m.indices, m.indptr))]


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("op", ["sparse_mask", "sparse_like", "from_dense"])
@pytest.mark.parametrize("sparse_input", [False, True])
def test_duplicate_mask_entries_count_once(fmt, op, sparse_input):
    rng = np.random.default_rng(3)
    D = rng.standard_normal(SHAPE)
    D[0, 4] = 0.0
    x = sp.csr_array(D) if sparse_input else D
    if op == "from_dense" and sparse_input:
        pytest.skip("from_dense takes a NumPy array")
    m = _mask(fmt)
    before = _snapshot(m)
    got = getattr(ops, op)(x, m) if op != "from_dense" else ops.from_dense(x, m)
    M = _set_mask()
    np.testing.assert_array_equal(_dense(got), np.where(M, D, 0.0))
    # exactly the set of the mask's coordinates is stored, once each
    c = sp.coo_array(got)
    assert c.nnz == M.sum()
    assert len(set(zip(c.coords[0].tolist(), c.coords[1].tolist()))) == M.sum()
    for a, b in zip(before, _snapshot(m)):
        np.testing.assert_array_equal(a, b)            # the mask is not modified


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sampled_addmm_duplicate_input_entries(fmt):
    rng = np.random.default_rng(4)
    C = _mask(fmt)
    A, B = rng.standard_normal((SHAPE[0], 3)), rng.standard_normal((3, SHAPE[1]))
    got = ops.sampled_addmm(C, A, B, beta=0.5, alpha=2.0)
    # torch's meaning: input coalesced (duplicates summed), the product sampled once per entry
    Cd = np.zeros(SHAPE)
    np.add.at(Cd, (ROWS, COLS), np.array([1, -1, 2, 5, -3, 4, 7.0]))
    want = np.where(_set_mask(), 0.5 * Cd + 2.0 * (A @ B), 0.0)
    np.testing.assert_allclose(_dense(got), want, rtol=1e-12)
    assert sp.coo_array(got).nnz == _set_mask().sum()


def test_single_entry_and_empty_masks():
    D = np.arange(20.0).reshape(SHAPE) + 1
    one = sp.coo_array((np.ones(3), ([2, 2, 2], [3, 3, 3])), shape=SHAPE)
    got = ops.sparse_mask(D, one)
    np.testing.assert_array_equal(_dense(got), np.where(np.arange(20).reshape(SHAPE) == 13, D, 0))
    empty = sp.csr_array(SHAPE)
    assert ops.sparse_mask(D, empty).nnz == 0
