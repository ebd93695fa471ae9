"""Kernel.vjp where an operand's derivative does not depend on any operand (neg, scaling, a
cast): the adjoint statement reads only the cotangent.  It raised "has no operand 'X0_'"."""
import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

X = np.array([1.0, -2.0, 0.5])
A = sp.csr_array(np.array([[0.0, 2.0, 0.0], [1.5, 0.0, -1.0]]))

CASES = [
    # (statement, operands, cotangent, want: the gradient of each operand, written out)
    ("y[i] = neg(x[i])", {"x": X}, np.array([1.0, 2.0, 3.0]), {"x": -np.array([1.0, 2.0, 3.0])}),
    ("y[i] = 3.0 * x[i] - 1.0", {"x": X}, np.ones(3), {"x": np.full(3, 3.0)}),
    ("y[] = sum[i](neg(x[i]))", {"x": X}, np.array(2.0), {"x": np.full(3, -2.0)}),
    ("y[i] = neg(x[i]) + 2.0 * z[i]", {"x": X, "z": X}, np.ones(3), {"x": np.full(3, -1.0), "z": np.full(3, 2.0)}),
    ("y[i] = astype_float32(x[i])", {"x": X}, np.ones(3, np.float32), {"x": np.ones(3)}),
    ("y[i] = sum[j](neg(A[i,j]))", {"A": A}, np.array([1.0, 2.0]),
     {"A": np.array([[0.0, -1.0, 0.0], [-2.0, 0.0, -2.0]])}),
]


@pytest.mark.parametrize("stmt,ops,cot,want", CASES, ids=[c[0] for c in CASES])
def test_vjp_of_a_constant_derivative(stmt, ops, cot, want):
    k = sc.compile(stmt)
    grads = dict(zip(k.stmt.operands, k.vjp(cot, **ops)))
    for name, w in want.items():
        g = grads[name]
        if not sp.issparse(g):
            assert g.flags.writeable, name
        g = g.toarray() if sp.issparse(g) else np.asarray(g)
        np.testing.assert_allclose(g, w, err_msg=name)
