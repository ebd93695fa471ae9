"""Programs of several statements (docs/planning.md, Programs): each output against NumPy
on dense copies, shared steps run once (the program's step counter), dead statements not
run, and the program errors."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.plan.program import canonical


def _mat(n, m, density, seed, dtype=np.float64, fmt="csr"):
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, m), density=density, format=fmt, random_state=rng)
    if np.dtype(dtype).kind == "i":
        A.data = rng.integers(-3, 4, A.data.size).astype(dtype)
        return A.astype(dtype)
    return A.astype(dtype)


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_residual_program(dtype):
    A = _mat(30, 30, 0.2, 0, dtype)
    rng = np.random.default_rng(1)
    b = rng.integers(-5, 5, 30).astype(dtype)
    x = rng.integers(-5, 5, 30).astype(dtype)
    prog = sc.compile("r[i] = b[i] - sum[j](A[i,j] * x[j])\nrr[] = sum[i](r[i] * r[i])")
    out = prog(A=A, b=b, x=x)
    r = b - _dense(A) @ x
    assert set(out) == {"r", "rr"}
    np.testing.assert_allclose(out["r"], r)
    np.testing.assert_allclose(out["rr"], r @ r)
    assert out["r"].dtype == r.dtype
    assert prog.steps_run == 2
    # by position, in the order the program first reads its inputs (b, A, x)
    out2 = prog(b, A, x)
    np.testing.assert_allclose(out2["rr"], r @ r)


def test_sparse_intermediate_and_semicolons():
    A, B = _mat(20, 15, 0.2, 2), _mat(20, 15, 0.2, 3)
    out = sc.evaluate("C[i,j] = A[i,j] + B[i,j]; s[i] = sum[j](C[i,j]); D[i,j] = C[i,j] * C[i,j]", A=A, B=B)
    C = _dense(A) + _dense(B)
    assert sp.issparse(out["C"]) and sp.issparse(out["D"])
    np.testing.assert_allclose(_dense(out["C"]), C)
    np.testing.assert_allclose(out["s"], C.sum(1))
    np.testing.assert_allclose(_dense(out["D"]), C * C)


def test_shared_product_step_runs_once():
    n = 2000
    A, B, C = (_mat(n, n, 0.005, s) for s in (10, 11, 12))
    x = np.random.default_rng(13).random(n)
    prog = sc.compile("y[i] = sum[j,k](A[i,j] * B[j,k] * x[k]); z[i] = sum[j,k](C[i,j] * B[j,k] * x[k])")
    out = prog(A=A, B=B, C=C, x=x)
    np.testing.assert_allclose(out["y"], _dense(A) @ (_dense(B) @ x))
    np.testing.assert_allclose(out["z"], _dense(C) @ (_dense(B) @ x))
    plan = prog.last_plan
    # each statement plans two steps (B @ x first); the second B @ x is the first one's value
    assert [len(p.steps) for p in plan.plans.values()] == [2, 2]
    assert len(plan.steps) == 3 and prog.steps_run == 3
    assert len(plan.shared) == 1 and plan.shared[0][2] == "y.t0"
    assert "shared" in str(plan)


def test_equal_statements_share_and_different_values_do_not():
    A = _mat(25, 25, 0.2, 4)
    rng = np.random.default_rng(5)
    x, b = rng.random(25), rng.random(25)
    prog = sc.compile("u[i] = A[i,j] * x[j]\nv[k] = A[k,l] * x[l]\nw[i] = A[i,j] * b[j]\nq[i] = A[j,i] * x[j]")
    out = prog(A=A, x=x, b=b)
    np.testing.assert_allclose(out["u"], _dense(A) @ x)
    np.testing.assert_allclose(out["v"], _dense(A) @ x)
    np.testing.assert_allclose(out["w"], _dense(A) @ b)
    np.testing.assert_allclose(out["q"], _dense(A).T @ x)
    assert prog.steps_run == 3               # v is u's value; w reads b; q reads A transposed
    assert canonical(sc.compile("u[i] = A[i,j] * x[j]").stmt) == canonical(sc.compile("v[k] = M[k,l] * y[l]").stmt)


def test_outputs_and_dead_statements():
    A = _mat(20, 20, 0.2, 6)
    x = np.random.default_rng(7).random(20)
    prog = sc.compile("y[i] = A[i,j] * x[j]\nq[i] = A[j,i] * x[j]\nn = sum[i](y[i] * y[i])", outputs=["n"])
    out = prog(A=A, x=x)
    assert list(out) == ["n"]
    y = _dense(A) @ x
    np.testing.assert_allclose(out["n"], y @ y)
    assert prog.steps_run == 2               # q is needed by no output: not run
    assert prog.last_plan.dead == (1,)


@pytest.mark.parametrize("text, match", [
    ("y[i] = A[i,j] * z[j]\nz[i] = A[i,j] * x[j]", r"statement 1 .*reads 'z', which statement 2 defines later"),
    ("y[i] = A[i,j] * x[j]; y[i] = A[j,i] * x[j]", r"statement 2 .*output 'y' is already defined by statement 1"),
    ("y[i] = A[i,j] * x[j]; z[i] = y[i] +", r"statement 2 \('z\[i\] = y\[i\] \+'\)"),
])
def test_program_errors(text, match):
    with pytest.raises(sc.ParseError, match=match):
        sc.compile(text)


def test_program_argument_errors():
    with pytest.raises(sc.ParseError, match="outputs= names 'w'"):
        sc.compile("y[i] = A[i,j] * x[j]; z[i] = y[i] * 2", outputs=["w"])
    prog = sc.compile("y[i] = A[i,j] * x[j]; z[i] = y[i] * 2")
    with pytest.raises(sc.OperandError, match="needs input\(s\) x"):
        prog(A=_mat(3, 3, 0.5, 0))
    with pytest.raises(sc.OperandError, match="no input 'y'"):
        prog(A=_mat(3, 3, 0.5, 0), x=np.ones(3), y=np.ones(3))
    with pytest.raises(sc.FormatError, match="not an input"):
        sc.compile("y[i] = A[i,j] * x[j]; z[i] = y[i] * 2", y="dense")


def test_program_options_reach_every_statement():
    A, B = _mat(20, 15, 0.2, 8), _mat(20, 15, 0.2, 9)
    prog = sc.compile("C[i,j] = A[i,j] * B[i,j]; D[i,j] = C[i,j] + A[i,j]", out_format={"C": "coo"}, A="csc")
    out = prog(A=A, B=B)
    assert out["C"].format == "coo" and out["D"].format == "csr"
    np.testing.assert_allclose(_dense(out["D"]), _dense(A) * _dense(B) + _dense(A))
    n = 2000
    A, B, C = (_mat(n, n, 0.005, s) for s in (10, 11, 12))
    x = np.random.default_rng(13).random(n)
    prog = sc.compile("y[i] = sum[j,k](A[i,j] * B[j,k] * x[k]); z[i] = sum[j,k](C[i,j] * B[j,k] * x[k])",
                      optimize=False)
    out = prog(A=A, B=B, C=C, x=x)
    np.testing.assert_allclose(out["z"], _dense(C) @ (_dense(B) @ x))
    assert prog.steps_run == 2 and not prog.last_plan.shared       # one nest each: nothing to share
    with pytest.raises(sc.FormatError, match="dict by output name"):
        sc.compile("y[i] = A[i,j] * x[j]; z[i] = y[i] * 2", out_format="csr")


def test_a_dropped_value_is_not_shared_later():
    # y is released after its last reader (statement 2); z equals y but comes later: it is
    # computed again, not read from the released value
    A = _mat(20, 20, 0.2, 14)
    x = np.random.default_rng(15).random(20)
    prog = sc.compile("y[i] = A[i,j] * x[j]; s = sum[i](y[i]); z[i] = A[i,j] * x[j]; t = sum[i](z[i] * z[i])",
                      outputs=["s", "t"])
    out = prog(A=A, x=x)
    y = _dense(A) @ x
    np.testing.assert_allclose(out["s"], y.sum())
    np.testing.assert_allclose(out["t"], y @ y)
    assert prog.steps_run == 4
    # kept while a later statement reads it under a shared name
    prog = sc.compile("y[i] = A[i,j] * x[j]; z[i] = A[i,j] * x[j]; s = sum[i](y[i]); t = sum[i](z[i] * z[i])",
                      outputs=["s", "t"])
    out = prog(A=A, x=x)
    np.testing.assert_allclose(out["t"], y @ y)
    assert prog.steps_run == 3
