"""Argument handling of the op library: ``axis`` (NumPy) and ``dim`` (torch) for every op
that takes a dimension, and SparseccError subclasses (never a bare Python/NumPy exception)
for bad arguments, raised before native code runs."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import ops

A = sp.csr_array(np.array([[0.0, 3.0, 0.0], [-1.0, 0.0, 2.0]]))
D = A.toarray()


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin", "argmax", "argmin"])
def test_reductions_take_axis_or_dim(name):
    by_axis = getattr(ops, name)(A, axis=0)
    by_dim = getattr(ops, name)(A, dim=0)
    np.testing.assert_array_equal(by_axis, by_dim)
    with pytest.raises(sc.SparseccError, match="not both"):
        getattr(ops, name)(A, axis=0, dim=0)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_takes_axis_or_dim(name):
    fn = getattr(ops, name)
    np.testing.assert_array_equal(fn(A, axis=1).toarray(), fn(A, dim=1).toarray())
    np.testing.assert_array_equal(fn(A, 1).toarray(), fn(A, dim=1).toarray())
    with pytest.raises(sc.SparseccError, match="not both"):
        fn(A, axis=1, dim=1)
    with pytest.raises(sc.SparseccError, match="required"):
        fn(A)


def test_structural_ops_take_axis_or_dim():
    np.testing.assert_array_equal(ops.index_select(A, axis=1, index=[2, 0]).toarray(),
                                  ops.index_select(A, 1, [2, 0]).toarray())
    np.testing.assert_array_equal(ops.narrow(A, axis=1, start=1, length=2).toarray(), D[:, 1:3])
    np.testing.assert_array_equal(ops.cat([A, A], axis=1).toarray(), np.hstack([D, D]))
    np.testing.assert_array_equal(ops.stack([A, A], axis=1).toarray(), np.stack([D, D], axis=1))
    for call in (lambda: ops.cat([A, A], 0, axis=1), lambda: ops.stack([A, A], dim=0, axis=0),
                 lambda: ops.index_select(A, 0, [0], axis=0), lambda: ops.narrow(A, 0, 0, 1, axis=0)):
        with pytest.raises(sc.SparseccError, match="not both"):
            call()
    with pytest.raises(sc.SparseccError, match="index"):
        ops.index_select(A, axis=1)


def test_scatter_reduce_axis_and_empty_index():
    x = np.arange(6.0).reshape(2, 3)
    got = ops.scatter_reduce(x, index=np.array([[1, 0, 1]]), src=np.ones((1, 3)), reduce="sum", axis=0)
    np.testing.assert_array_equal(got, [[0, 2, 2], [4, 4, 6]])
    # torch returns the input unchanged for an empty index (any shape, even a float one)
    for idx in (np.zeros(0, np.int64), np.zeros((0, 3), np.int64), np.zeros((2, 0), np.int64), np.array([])):
        for reduce in ("sum", "mean", "amax"):
            out = ops.scatter_reduce(x, 0, idx, np.zeros(idx.shape), reduce, include_self=False)
            np.testing.assert_array_equal(out, x)
    with pytest.raises(sc.SparseccError, match="not both"):
        ops.scatter_reduce(x, 0, np.zeros((1, 3), np.int64), np.ones((1, 3)), "sum", axis=0)


@pytest.mark.parametrize("call", [
    lambda: ops.getitem(A, np.s_[::0]),
    lambda: ops.getitem(A, np.s_[:, 1:2:0]),
    lambda: ops.getitem(A, np.s_[0.5:2]),
    lambda: ops.getitem(A, 1.5),
    lambda: ops.reshape(A, (2**64,)),
    lambda: ops.reshape(A, (2**32, 2**32)),
    lambda: ops.reshape(A, (2.0, 3)),
    lambda: ops.reshape(A, (-2, 3)),
    lambda: ops.reshape(A, "6"),
    lambda: ops.narrow(A, 0, 0.5, 1),
    lambda: ops.narrow(A, 0, 0, 1.5),
    lambda: ops.narrow(A, 5, 0, 1),
    lambda: ops.index_select(A, 0, [0.5]),
    lambda: ops.index_select(A, 2, [0]),
    lambda: ops.index_select(A, 1.0, [0]),
    lambda: ops.sum(A, axis=2),
    lambda: ops.sum(A, axis=1.0),
    lambda: ops.sum(A, axis="0"),
    lambda: ops.argmax(A, axis=(0, 1)),
    lambda: ops.argmax(A, axis=-3),
    lambda: ops.softmax(A, 2),
    lambda: ops.softmax(A, 0.5),
    lambda: ops.transpose(A, 0, 2),
    lambda: ops.transpose(A, 0, 1.5),
    lambda: ops.permute(A, (0, 0)),
    lambda: ops.permute(A, (0, "a")),
    lambda: ops.cat([A, A], 2),
    lambda: ops.stack([A, A], 3),
    lambda: ops.flatten(A, 0, 2),
    lambda: ops.trace(A, 0, 0),
    lambda: ops.tensordot(A, A, axes=((0,), (5,))),
    lambda: ops.tensordot(A, A, axes=-1),
    lambda: ops.scatter_reduce(D, 0, np.array([[5, 0, 0]]), np.ones((1, 3)), "sum"),
    lambda: ops.scatter_reduce(D, 0, np.array([[0.5, 0, 0]]), np.ones((1, 3)), "sum"),
    lambda: ops.scatter_reduce(D, 3, np.array([[0, 0, 0]]), np.ones((1, 3)), "sum"),
    lambda: ops.scatter_reduce(D, 0, np.array([[0, 0, 0]]), np.ones((1, 3)), "max"),
])
def test_bad_arguments_raise_sparsecc_errors(call):
    with pytest.raises(sc.SparseccError):
        call()


def test_reshape_beyond_int64_is_a_shape_error():
    X = sp.coo_array((np.ones(1), ([0], [0])), shape=(2**32, 2**32))
    with pytest.raises(sc.ShapeError, match="2\\*\\*63"):
        ops.reshape(X, (2**64,))


@pytest.mark.parametrize("call", [
    lambda: ops.softmax(A, (0, 1)),
    lambda: ops.log_softmax(A, dim=[1]),
    lambda: ops.scatter_reduce(D, (0,), np.zeros((1, 3), np.int64), np.ones((1, 3)), "sum"),
    lambda: ops.nnz("abc"),
    lambda: ops.density(np.array(["a", "b"])),
])
def test_more_bad_arguments(call):
    with pytest.raises(sc.SparseccError):
        call()
