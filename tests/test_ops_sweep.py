"""A seeded sweep of every reduction op x axis x format x dtype x implicit_zeros against NumPy
(implicit_zeros=True) or a written-out loop over the stored entries (implicit_zeros=False).

The matrices have an empty row and an empty column, stored zeros, negatives, ties and NaN
(floats); one case is an all-empty matrix.  By default a bounded set runs (each distinct
kernel costs a compile): every op x axis x implicit_zeros once, with the format and dtype
cycling over the combinations.  ``-m slow`` runs the full product.
"""

import itertools
import zlib
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import ops

OPS = ["sum", "mean", "prod", "amax", "amin", "argmax", "argmin"]
AXES = [None, 0, 1, -1]
FORMATS = ["csr", "csc", "coo", "bsr", "dense"]
DTYPES = [np.float64, np.float32, np.int32, np.int64, np.bool_]
SHAPE = (4, 6)          # divisible into 2 x 2 blocks (bsr)


def _matrix(dtype, seed: int, empty: bool = False) -> np.ndarray:
    """Dense data with row 1 and column 2 empty (and a NaN for floats); stored entries are
    the non-zeros plus a few stored zeros, see :func:`_operand`."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        D = rng.random(SHAPE) < 0.5
    else:
        D = rng.integers(-3, 4, SHAPE).astype(dtype)          # ties, negatives, zeros
    if dtype.kind == "f":
        D[3, 4] = np.nan
    D[1, :] = 0
    D[:, 2] = 0
    if empty:
        D[:] = 0
    return D


def _operand(D: np.ndarray, fmt: str, seed: int):
    """``D`` in ``fmt``; sparse formats also store a zero at (0, 0) and (2, 5)."""
    if fmt == "dense":
        return D.copy()
    stored = D != 0
    if D.any() or seed % 2:
        stored[0, 0] = stored[2, 5] = True
    coords = np.nonzero(stored)
    A = sp.coo_array((D[coords], coords), shape=D.shape)
    if fmt == "bsr":
        return sp.bsr_array(A.tocsr(), blocksize=(2, 2))
    return A.asformat(fmt)


def _stored_mask(A) -> np.ndarray:
    if not sp.issparse(A):
        return np.ones(A.shape, bool)
    M = np.zeros(A.shape, bool)
    c = sp.coo_array(A.tocsr())      # bsr stores whole blocks: zeros inside them are stored
    if A.format == "bsr":
        R, C = A.blocksize
        for k in range(A.indptr.size - 1):
            for b in range(A.indptr[k], A.indptr[k + 1]):
                M[k * R:(k + 1) * R, A.indices[b] * C:(A.indices[b] + 1) * C] = True
        return M
    M[tuple(c.coords)] = True
    return M


def _numpy(name: str, D: np.ndarray, axis):
    """NumPy on the dense copy, or None where NumPy raises (an empty axis)."""
    fn = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "amax": np.amax, "amin": np.amin,
          "argmax": np.argmax, "argmin": np.argmin}[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            try:
                return np.asarray(fn(D, axis=axis))
            except ValueError:
                return None


def _lanes(shape, axis):
    """(output position, [flat positions in C order along the reduction]) per output."""
    idx = np.arange(math.prod(shape)).reshape(shape)
    if axis is None:
        return [((), list(idx.reshape(-1)))]
    a = axis % 2
    moved = np.moveaxis(idx, a, -1)
    return [((k,), list(moved[k])) for k in range(moved.shape[0])]


def _stored_only(name: str, D: np.ndarray, M: np.ndarray, axis):
    """A written-out loop over the stored entries of each reduced lane (first occurrence
    wins ties; NaN is the extreme, like NumPy)."""
    dtype = D.dtype
    flat, mflat = D.reshape(-1), M.reshape(-1)
    lanes = _lanes(D.shape, axis)
    sum_dt = np.result_type(np.sum(np.zeros(1, dtype)))
    mean_dt = np.result_type(np.mean(np.zeros(1, dtype)))
    out_dt = {"sum": sum_dt, "prod": sum_dt, "mean": mean_dt, "amax": dtype, "amin": dtype,
              "argmax": np.int64, "argmin": np.int64}[name]
    out = np.zeros(len(lanes), out_dt)
    for k, (_, pos) in enumerate(lanes):
        vals = [flat[p] for p in pos if mflat[p]]
        where = [j for j, p in enumerate(pos) if mflat[p]]
        if name == "sum":
            acc = sum_dt.type(0)
            for v in vals:
                acc = sum_dt.type(acc + sum_dt.type(v))
        elif name == "prod":
            acc = sum_dt.type(1)
            for v in vals:
                acc = sum_dt.type(acc * sum_dt.type(v))
        elif name == "mean":
            acc = mean_dt.type(np.nan)
            if vals:
                s = 0.0
                for v in vals:
                    s += float(v)
                acc = mean_dt.type(s / len(vals))
        elif name in ("amax", "amin"):
            if dtype.kind == "f":
                acc = -np.inf if name == "amax" else np.inf
            elif dtype == np.bool_:
                acc = name == "amin"
            else:
                acc = np.iinfo(dtype).min if name == "amax" else np.iinfo(dtype).max
            for v in vals:
                if v != v:
                    acc = v
                    break
                acc = max(acc, v) if name == "amax" else min(acc, v)
        else:
            acc, best = -1, None
            for j, v in zip(where, vals):
                if v != v:
                    acc = j
                    break
                if best is None or (v > best if name == "argmax" else v < best):
                    acc, best = j, v
        out[k] = acc
    return out.reshape(()) if axis is None else out


def _check(name, axis, fmt, dtype, implicit_zeros, seed, empty=False):
    D = _matrix(dtype, seed, empty)
    A = _operand(D, fmt, seed)
    before = A.toarray() if sp.issparse(A) else A.copy()
    fn = getattr(ops, name)
    if implicit_zeros:
        want = _numpy(name, D, axis)
    else:
        want = _stored_only(name, D, _stored_mask(A), axis)
    if want is None:
        with pytest.raises(sc.ShapeError):
            fn(A, axis=axis, implicit_zeros=implicit_zeros)
        return
    got = fn(A, axis=axis, implicit_zeros=implicit_zeros)
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if np.dtype(dtype) == np.float32 and name in ("sum", "mean", "prod"):
        np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)
    after = A.toarray() if sp.issparse(A) else A
    np.testing.assert_array_equal(after, before)        # the operand is not modified


FULL = list(itertools.product(OPS, AXES, FORMATS, DTYPES, [True, False]))


def _bounded():
    """Every op x axis x implicit_zeros once; formats and dtypes cycle (each op sees every
    format and every dtype)."""
    out = []
    for k, (name, axis, iz) in enumerate(itertools.product(OPS, AXES, [True, False])):
        out.append((name, axis, FORMATS[k % len(FORMATS)], DTYPES[(k // 2 + k) % len(DTYPES)], iz))
    return out


@pytest.mark.parametrize("name,axis,fmt,dtype,implicit_zeros", _bounded())
def test_reduction_sweep(name, axis, fmt, dtype, implicit_zeros):
    _check(name, axis, fmt, dtype, implicit_zeros, seed=zlib.crc32(f"{name}{axis}{fmt}".encode()) % 1000)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("implicit_zeros", [True, False])
def test_reduction_sweep_all_empty(name, implicit_zeros):
    _check(name, 1, "csr", np.float64, implicit_zeros, seed=0, empty=True)


@pytest.mark.slow
@pytest.mark.parametrize("name,axis,fmt,dtype,implicit_zeros", FULL)
def test_reduction_sweep_full(name, axis, fmt, dtype, implicit_zeros):
    _check(name, axis, fmt, dtype, implicit_zeros, seed=7)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_issue_examples(fmt):
    """The reported cases, each against NumPy (or the stored-entry loop)."""
    def S(rows, dtype=None):
        return sp.csr_array(np.array(rows, dtype=dtype)).asformat(fmt)
    B = S([[True, True, False, False]])
    assert ops.mean(B, axis=1).tolist() == [0.5] and ops.mean(B).dtype == np.float64
    assert ops.sum(B, axis=1).dtype == np.int64 and ops.sum(B, axis=1).tolist() == [2]
    for rows, dtype in (([[2**31 - 1, 1]], np.int32), ([[2**62, 2**62]], np.int64)):
        D = np.array(rows, dtype)
        for iz in (True, False):
            np.testing.assert_allclose(ops.mean(S(D), axis=1, implicit_zeros=iz), np.mean(D, axis=1), rtol=1e-15)
        np.testing.assert_allclose(ops.mean(S(D)), np.mean(D), rtol=1e-15)
    for row in ([np.nan, 0, 1.0], [np.inf, 0, 1.0], [-np.inf, 0, 2.0]):
        D = np.array([row, [1.0, 2.0, 3.0]])
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(ops.prod(S(D), axis=1), np.prod(D, axis=1))
            np.testing.assert_array_equal(ops.prod(S(D)), np.prod(D))
    Bb = S([[True, False], [False, False]])
    for name in ("amax", "amin"):
        got = getattr(ops, name)(Bb, axis=1)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, getattr(np, name)(Bb.toarray(), axis=1))
    X = S([[0, 3, 0], [-1, 0, 2.0]])
    assert ops.argmax(X, axis=0, implicit_zeros=False).tolist() == [1, 0, 1]
    assert ops.argmin(X, axis=0, implicit_zeros=False).tolist() == [1, 0, 1]
    assert ops.argmax(X, axis=None, implicit_zeros=False) == 1
    assert ops.argmin(X, axis=None, implicit_zeros=False) == 3
    assert ops.argmin(X, axis=None) == 3 and ops.argmax(X) == 1


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.float32])
def test_empty_axis_tuple_keeps_numpy_dtypes(dtype):
    """axis=() reduces nothing, but the result dtype is still NumPy's (prod of bools: int64)."""
    D = np.array([[1, 0], [0, 1]], dtype)
    A = sp.csr_array(D)
    for name in ("sum", "prod", "amax", "amin", "mean"):
        want = getattr(np, name)(D, axis=())
        got = getattr(ops, name)(A, axis=())
        got = got.toarray() if sp.issparse(got) else np.asarray(got)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [None, 0, 2])
def test_argmax_stored_only_three_dimensional_coo(axis):
    """3-d COO, stored entries only: NumPy on the array with unstored entries set to -inf/+inf
    (-1 where a lane stores nothing); axis=None goes through the one-row reshape."""
    rng = np.random.default_rng(1)
    D = rng.integers(-3, 4, (3, 4, 5)).astype(float)
    D[D < 1] = 0
    T = sp.coo_array(D)
    none = ~(D != 0).any(axis=axis)
    want_max = np.where(none, -1, np.argmax(np.where(D != 0, D, -np.inf), axis=axis))
    want_min = np.where(none, -1, np.argmin(np.where(D != 0, D, np.inf), axis=axis))
    np.testing.assert_array_equal(ops.argmax(T, axis=axis, implicit_zeros=False), want_max)
    np.testing.assert_array_equal(ops.argmin(T, axis=axis, implicit_zeros=False), want_min)
