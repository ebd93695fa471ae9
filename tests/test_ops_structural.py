"""sparsecc.ops structural ops against NumPy/SciPy (seeded): values against dense NumPy
indexing, patterns against SciPy's (which keeps stored zeros) or against the stored
entries the op moves.  Every distinct (op, formats, dtype) is a compile: the grid is modest.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = ["csr", "csc", "coo"]
GRID = [(f, "float64") for f in FORMATS] + [("csr", d) for d in ("float32", "int64", "complex128")]


def rand(shape, density, seed, dtype="float64", fmt="coo"):
    rng = np.random.default_rng(seed)
    D = rng.random(shape) * (rng.random(shape) < density)
    if dtype == "int64":
        D = np.ceil(D * 5)
    if dtype == "complex128":
        D = D * (1 + 2j)
    X = sp.coo_array(D.astype(dtype))
    if X.nnz:
        X.data[0] = 0                   # a stored zero: must stay stored when selected
    return X.asformat(fmt)


def stored(x) -> set:
    c = sp.coo_array(x)
    return set(zip(*[k.tolist() for k in c.coords]))


def mask(x) -> np.ndarray:
    m = np.zeros(x.shape, bool)
    m[sp.coo_array(x).coords] = True
    return m


def check(got, x, key):
    """Values as NumPy's indexing of the dense copy; pattern: the stored entries selected."""
    want = x.toarray()[key]
    if np.ndim(want) == 0:
        assert np.ndim(got) == 0 and got == want
        return
    assert sp.issparse(got) and got.shape == want.shape
    np.testing.assert_array_equal(got.toarray(), want)
    sel = mask(x)[key]
    assert stored(got) == set(zip(*np.nonzero(sel))), "stored entries differ from the selected stored entries"


KEYS = [np.s_[1:5, ::2], np.s_[::-1, 2], np.s_[[3, 1, 1], :], np.s_[2, 3], np.s_[-1], np.s_[0:0],
        np.s_[:, -3:], np.s_[..., 1:7:3], np.s_[None, 2], np.s_[np.array([True, False, True, False, False, True])],
        np.s_[4:1:-2, [0, 7]]]


@pytest.mark.parametrize("fmt,dtype", GRID)
def test_getitem_matrix(fmt, dtype):
    x = rand((6, 8), 0.35, 1, dtype, fmt)
    for key in KEYS if dtype == "float64" else KEYS[:3]:
        got = ops.getitem(x, key)
        check(got, x, key)
        if sp.issparse(got) and got.ndim == 2:
            assert got.format == fmt           # a matrix keeps its layout
            if fmt == "csr":                  # SciPy keeps stored zeros too: same pattern
                ref = x[key]
                assert stored(got) == stored(ref)


def test_getitem_nd_coo():
    T = rand((3, 4, 5), 0.3, 2)
    for key in [np.s_[1, 0, 1:], np.s_[:, 2:10:2], np.s_[..., None, 1], np.s_[-1], np.s_[:, ::-1, 1],
                np.s_[1:3, [3, 0, 3]], np.s_[2, 3, 4], np.s_[:, 0:0], np.s_[:, :, -2]]:
        got = ops.getitem(T, key)
        check(got, T, key)


def test_getitem_random_keys_all_formats():
    rng = np.random.default_rng(3)

    def rand_key(n):
        if rng.random() < 0.2:
            return int(rng.integers(-n, n))
        a, b = sorted(int(v) for v in rng.integers(-n - 2, n + 3, 2))
        step = int(rng.choice([1, 2, 3, -1, -2]))
        return slice(b, a, step) if step < 0 else slice(a, b, step)

    for trial in range(12):
        rank = 2 if trial % 2 else 3
        shape = tuple(int(v) for v in rng.integers(1, 7, rank))
        x = rand(shape, 0.35, 100 + trial)
        key = tuple(rand_key(n) for n in shape)
        for fmt in (FORMATS if rank == 2 else ["coo"]):
            check(ops.getitem(x.asformat(fmt), key), x, key)


def test_empty_and_single_entry():
    E = sp.csr_array((0, 5))
    assert ops.getitem(E, np.s_[:, 1:3]).shape == (0, 2)
    Z = sp.csr_array((4, 5))
    g = ops.getitem(Z, np.s_[1:3])
    assert g.nnz == 0 and g.shape == (2, 5)
    one = sp.coo_array(([7.0], ([2], [3])), shape=(4, 5))
    check(ops.getitem(one, np.s_[2]), one, np.s_[2])
    assert ops.getitem(one, np.s_[2, 3]) == 7.0 and ops.getitem(one, np.s_[1, 3]) == 0.0
    assert ops.reshape(Z, (10, 2)).nnz == 0
    assert ops.cat([E, E], 0).shape == (0, 5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_index_select_and_narrow(fmt):
    import torch
    x = rand((6, 7), 0.4, 4, fmt=fmt)
    idx = [5, 0, 5, -1]
    got = ops.index_select(x, 1, idx)
    ref = torch.index_select(torch.tensor(x.toarray()), 1, torch.tensor([5, 0, 5, 6])).numpy()
    np.testing.assert_array_equal(got.toarray(), ref)
    assert stored(got) == set(zip(*np.nonzero(mask(x)[:, [5, 0, 5, 6]])))
    assert ops.index_select(x, 0, []).shape == (0, 7)
    n = ops.narrow(x, 0, -4, 3)
    np.testing.assert_array_equal(n.toarray(), torch.narrow(torch.tensor(x.toarray()), 0, -4, 3).numpy())
    d = ops.index_select(x.toarray(), 0, [1, 1])           # dense in, dense out
    assert isinstance(d, np.ndarray)
    np.testing.assert_array_equal(d, x.toarray()[[1, 1]])


@pytest.mark.parametrize("fmt", FORMATS)
def test_cat_stack_hstack_vstack(fmt):
    a, b = rand((4, 5), 0.4, 5, fmt=fmt), rand((4, 3), 0.4, 6, fmt=fmt)
    h = ops.hstack([a, b])
    ref = sp.hstack([a, b], format="csr")
    np.testing.assert_array_equal(h.toarray(), ref.toarray())
    assert stored(h) == stored(ref) and h.format == fmt
    c = rand((2, 5), 0.4, 7, fmt=fmt)
    v = ops.vstack([a, c, a])
    ref = sp.vstack([a, c, a], format="csr")
    np.testing.assert_array_equal(v.toarray(), ref.toarray())
    assert stored(v) == stored(ref)
    s = ops.stack([a, a], 2)
    np.testing.assert_array_equal(s.toarray(), np.stack([a.toarray()] * 2, 2))
    assert len(stored(s)) == 2 * len(stored(a))


def test_cat_nd_mixed_dtypes_and_1d():
    T = rand((2, 3, 4), 0.4, 8)
    U = rand((2, 3, 2), 0.4, 9, dtype="int64")
    got = ops.cat([T, U], -1)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.toarray(), np.concatenate([T.toarray(), U.toarray()], -1))
    v = sp.coo_array(np.array([0.0, 1.0, 0.0, 2.0]))
    np.testing.assert_array_equal(ops.hstack([v, v]).toarray(), np.hstack([v.toarray()] * 2))
    np.testing.assert_array_equal(ops.vstack([v, v]).toarray(), np.vstack([v.toarray()] * 2))


@pytest.mark.parametrize("fmt,dtype", GRID)
def test_reshape_flatten(fmt, dtype):
    x = rand((6, 8), 0.35, 10, dtype, fmt)
    got = ops.reshape(x, (4, -1))
    ref = sp.csr_array(x).reshape((4, 12))                    # SciPy keeps stored zeros too
    np.testing.assert_array_equal(got.toarray(), ref.toarray())
    assert stored(got) == stored(ref)
    f = ops.flatten(x)
    assert f.shape == (48,)
    np.testing.assert_array_equal(f.toarray(), x.toarray().reshape(-1))
    assert len(stored(f)) == len(stored(x))


def test_reshape_nd():
    T = rand((3, 4, 5), 0.3, 11)
    for shape in [(4, 15), (60,), (5, 2, 6), (2, 3, 2, 5)]:
        got = ops.reshape(T, shape)
        np.testing.assert_array_equal(got.toarray(), T.toarray().reshape(shape))
        assert len(stored(got)) == len(stored(T))
    np.testing.assert_array_equal(ops.flatten(T, 1).toarray(), T.toarray().reshape(3, 20))


@pytest.mark.parametrize("fmt", FORMATS)
def test_prune_nnz_density(fmt):
    x = rand((5, 6), 0.5, 12, fmt=fmt)
    assert ops.nnz(x) == x.nnz and ops.density(x) == x.nnz / 30
    p = ops.prune(x)
    ref = sp.csr_array(x.toarray())
    assert stored(p) == stored(ref) and p.format == fmt
    np.testing.assert_array_equal(p.toarray(), ref.toarray())
    dup = sp.coo_array(([1.0, 2.0, 0.0], ([0, 0, 1], [1, 1, 2])), shape=(2, 3))
    assert ops.nnz(dup) == 2 and ops.nnz(np.zeros((2, 3))) == 6
    n = sp.coo_array(([np.nan, 0.0], ([0, 1], [0, 0])), shape=(2, 2))
    assert stored(ops.prune(n)) == {(0, 0)}


def test_tensordot_and_trace():
    T = rand((3, 4, 5), 0.4, 13)
    U = rand((4, 5, 2), 0.4, 14)
    got = ops.tensordot(T, U, ([1, 2], [0, 1]))
    np.testing.assert_allclose(got.toarray() if sp.issparse(got) else got,
                               np.tensordot(T.toarray(), U.toarray(), ([1, 2], [0, 1])))
    D = np.random.default_rng(15).random((5, 3))
    np.testing.assert_allclose(ops.tensordot(T, D, 1), np.tensordot(T.toarray(), D, 1))
    A = rand((5, 5), 0.5, 16, fmt="csr")
    assert np.isclose(ops.trace(A), A.trace())
    S = rand((4, 3, 4), 0.5, 17)
    np.testing.assert_allclose(ops.trace(S, 0, 2), np.trace(S.toarray(), axis1=0, axis2=2))


def test_errors():
    x = rand((4, 5), 0.5, 18, fmt="csr")
    with pytest.raises(IndexError):
        ops.getitem(x, np.s_[4])
    with pytest.raises(sc.ShapeError):
        ops.getitem(x, np.s_[1, 2, 3])
    with pytest.raises(sc.ShapeError):
        ops.getitem(x, np.s_[[0, 1], [1, 2]])
    with pytest.raises(sc.ShapeError):
        ops.getitem(x, np.s_["a"])
    with pytest.raises(sc.ShapeError):
        ops.index_select(x, 2, [0])
    with pytest.raises(sc.ShapeError):
        ops.index_select(x, 0, [9])
    with pytest.raises(sc.ShapeError):
        ops.narrow(x, 1, 3, 4)
    with pytest.raises(sc.ShapeError):
        ops.cat([x, rand((4, 4), 0.5, 19)], 0)
    with pytest.raises(sc.ShapeError):
        ops.stack([x, x.T])
    with pytest.raises(sc.ShapeError):
        ops.reshape(x, (3, 7))
    with pytest.raises(sc.ShapeError):
        ops.reshape(x, (-1, -1))
    with pytest.raises(sc.ShapeError):
        ops.trace(x)
    with pytest.raises(sc.ShapeError):
        ops.tensordot(x, x, ([1], [1, 0]))
    with pytest.raises(sc.ShapeError):
        ops.tensordot(x, x, 1)
    with pytest.raises(sc.OperandError):
        ops.getitem(np.ones((2, 2)), 0)
    with pytest.raises(sc.OperandError):
        ops.cat([], 0)
    assert isinstance(sc.ops.SparseIndexError("x"), sc.SparseccError)


def test_one_compile_serves_every_shape():
    ops.getitem(rand((6, 8), 0.4, 20, fmt="csr"), np.s_[1:3, 2:7])
    before = sc.cache_info().misses
    for seed, shape in [(21, (9, 4)), (22, (3, 30))]:
        x = rand(shape, 0.4, seed, fmt="csr")
        check(ops.getitem(x, np.s_[1:3, 1:4]), x, np.s_[1:3, 1:4])
    assert sc.cache_info().misses == before


def test_ops_tour_example_runs():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "ops_tour.py")], capture_output=True, check=False,
                       text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    assert "all checks passed" in r.stdout
