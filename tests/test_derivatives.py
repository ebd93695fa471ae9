"""sc.jacobian / sc.jvp / sc.hessian / sc.hvp / sc.gradient (docs/derivatives.md).

Oracles: torch.func.jacrev / torch.func.hessian / torch.func.jvp on dense copies (each
expression written out again in torch), central finite differences of the torch function in
float64, and patterns written out from the operands' patterns with NumPy Booleans.  The
default run compiles few kernels (the Bratu Jacobian over formats x dtypes, one of each other
expression); the whole sweep is ``-m slow``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

torch = pytest.importorskip("torch")
from torch.func import hessian as t_hessian, jacrev, jvp as t_jvp  # noqa: E402

N = 7
BRATU = "r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) - f[i]"


def _sparse(rng, shape, density, fmt, dtype, zero=False):
    A = sp.random_array(shape, density=density, format="coo", random_state=rng, dtype=np.float64)
    A = sp.coo_array((A.data + 0.5, A.coords), shape=shape)
    if zero and A.nnz:          # a stored zero: kept in the pattern
        A.data[0] = 0.0
    A = A.astype(dtype)
    return A.toarray() if fmt == "dense" else A.asformat(fmt)


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def _t(x):
    return torch.tensor(_dense(x), dtype=torch.float64)


def _bool(x):
    return _dense(x) != 0 if not sp.issparse(x) else (sp.coo_array(x).toarray() != 0) | _stored(x)


def _stored(x):
    """The stored coordinates of x as a Boolean matrix (stored zeros too)."""
    if not sp.issparse(x):
        return np.ones(np.shape(x), bool)
    c = sp.coo_array(x)
    m = np.zeros(c.shape, bool)
    m[tuple(c.coords)] = True
    return m


def _pattern_matrix(J):
    return _stored(J)


#: (statement, torch function of the dense operands, sparse operand names, expected pattern
#:  from the sparse operands' stored patterns, u's range)
CASES = {
    "bratu": (BRATU, lambda o, u: o["L"] @ u + o["lam"] * torch.exp(u) - o["f"], ("L",),
              lambda P, I: P["L"] | I, (0.1, 1.0)),
    "products": ("r[i] = sum[j](A[i,j] * u[j] * w[j]) * u[i]",
                 lambda o, u: (o["A"] @ (u * o["w"])) * u, ("A",), lambda P, I: P["A"] | I, (0.1, 1.0)),
    "unary": ("r[i] = sin(u[i]) * c[i] + tanh(sum[j](B[i,j] * u[j])) + sqrt(u[i]) - log(u[i])",
              lambda o, u: torch.sin(u) * o["c"] + torch.tanh(o["B"] @ u) + torch.sqrt(u) - torch.log(u),
              ("B",), lambda P, I: P["B"] | I, (0.2, 1.5)),
    "where_pow": ("r[i] = where(u[i] > 0.5, u[i] ** 2, -u[i] ** 3) + sum[j](A[i,j] * u[j] ** 3) / s",
                  lambda o, u: torch.where(u > 0.5, u ** 2, -u ** 3) + (o["A"] @ u ** 3) / o["s"],
                  ("A",), lambda P, I: P["A"] | I, (0.0, 1.0)),
    "quotient": ("r[i] = u[i] * (1 + sum[j](B[i,j] * u[j] * u[j])) ** -1.0 - u[i] / s - cos(u[i]) ** -1.0",
                 lambda o, u: u / (1 + o["B"] @ (u * u)) - u / o["s"] - torch.cos(u) ** -1.0, ("B",),
                 lambda P, I: P["B"] | I, (0.1, 1.0)),
    "maxmin": ("r[i] = max(u[i], 0.5) * sum[j](A[i,j] * u[j]) - min(u[i], w[i])",
               lambda o, u: torch.maximum(u, torch.tensor(0.5, dtype=u.dtype)) * (o["A"] @ u)
               - torch.minimum(u, o["w"]), ("A",), lambda P, I: P["A"] | I, (0.0, 1.0)),
    "two_sparse": ("r[i] = sum[j](A[i,j] * u[j]) - sum[j](B[i,j] * exp(u[j]))",
                   lambda o, u: o["A"] @ u - o["B"] @ torch.exp(u), ("A", "B"),
                   lambda P, I: P["A"] | P["B"], (0.0, 1.0)),
}


def _operands(name, fmt, dtype, seed=0, zero=True):
    stmt = CASES[name][0]
    rng = np.random.default_rng(seed)
    ops = {}
    for n in sc.parse.parse_notation(stmt).operands:
        if n in CASES[name][2]:
            ops[n] = _sparse(rng, (N, N), 0.3, fmt, dtype, zero=zero)
        elif n in ("lam", "s"):
            ops[n] = dtype(1.7) if n == "s" else dtype(0.8)
        else:
            lo, hi = CASES[name][4] if n == "u" else (0.2, 1.0)
            v = rng.uniform(lo, hi, N).astype(dtype)
            if n == "u" and name in ("where_pow", "maxmin"):   # away from the kinks
                v = np.where(np.abs(v - 0.5) < 0.05, v + 0.1, v).astype(dtype)
            ops[n] = v
    return ops


def _torch_jacobian(name, ops):
    fn = CASES[name][1]
    o = {n: (_t(x) if np.ndim(_dense(x)) else torch.tensor(float(x), dtype=torch.float64)) for n, x in ops.items()}
    u = o.pop("u")
    return jacrev(lambda uu: fn(o, uu))(u).numpy(), (lambda uu: fn(o, uu)), u


def _check_jacobian(name, fmt, dtype):
    stmt, _, sparse_names, expected, _ = CASES[name]
    ops = _operands(name, fmt, dtype)
    J = sc.jacobian(stmt, wrt="u")
    got = J(**ops)
    ref, fn, u = _torch_jacobian(name, ops)
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    assert got.dtype == dtype
    np.testing.assert_allclose(_dense(got), ref, **tol)
    if dtype == np.float64:        # central differences
        h = 1e-6
        fd = np.stack([((fn(u + h * e) - fn(u - h * e)) / (2 * h)).numpy()
                       for e in torch.eye(N, dtype=torch.float64)], axis=1)
        np.testing.assert_allclose(_dense(got), fd, rtol=1e-5, atol=1e-6)
    if fmt == "dense":
        assert isinstance(got, np.ndarray)      # a dense operand: a full pattern
        return got
    assert isinstance(got, sp.csr_array)
    P = {n: _stored(ops[n]) for n in sparse_names}
    want = expected(P, np.eye(N, dtype=bool))
    pat = _pattern_matrix(got)
    np.testing.assert_array_equal(pat, want)    # exactly the rules' pattern, stored zeros kept
    assert not (np.abs(ref) > 0)[~pat].any()    # every nonzero of the dense derivative is in it
    return got


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_bratu_jacobian_formats_dtypes(fmt, dtype):
    _check_jacobian("bratu", fmt, dtype)


@pytest.mark.parametrize("name", [n for n in CASES if n != "bratu"])
def test_jacobian_expressions(name):
    _check_jacobian(name, "csr", np.float64)


def test_piecewise_factor_keeps_float32():
    # where(u > 0.5, 1, ...) is int64 by NumPy's rules: the derivative still comes back float32
    _check_jacobian("maxmin", "csr", np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
@pytest.mark.parametrize("name", list(CASES))
def test_jacobian_sweep(name, fmt, dtype):
    _check_jacobian(name, fmt, dtype)


def test_bratu_statement_and_kernel_call():
    r = sc.compile(BRATU)
    J = sc.jacobian(r, wrt="u")
    assert str(J.statement) == "J_[i,k] = (L[i,k] + ((lam * exp(u[i])) * Id_[i,k]))"
    ops = _operands("bratu", "csr", np.float64)
    got = J(**ops)
    np.testing.assert_allclose(got.toarray(), _torch_jacobian("bratu", ops)[0], rtol=1e-12)
    # the hand-written merge (dialect/kernels/ewise.py: u[i] read once a row), 32-bit indices
    # (the union bound counts lam * exp(u[i]) * Id as Id's entries): no index copy per call
    k = J._kernels["csr"]
    assert "linalg.generic" not in k.ir() and got.indptr.dtype == got.indices.dtype == np.int32
    np.testing.assert_array_equal(J.values(**ops, pattern=J.pattern(L=ops["L"])), got.data)


# ------------------------------------------------------------------ pattern rules


def _rule(stmt, ops, want):
    J = sc.jacobian(stmt, wrt="u")
    got = J(**ops)
    np.testing.assert_array_equal(_stored(got), want)
    indptr, indices = J.pattern(**{n: x for n, x in ops.items() if sp.issparse(x)})
    np.testing.assert_array_equal(indptr, got.indptr)
    np.testing.assert_array_equal(indices, got.indices)
    return got


def test_rule_union():
    rng = np.random.default_rng(3)
    A, B = (_sparse(rng, (N, N), 0.25, "csr", np.float64) for _ in range(2))
    _rule("r[i] = sum[j](A[i,j] * u[j]) - sum[j](B[i,j] * exp(u[j]))", dict(A=A, B=B, u=np.ones(N)),
          _stored(A) | _stored(B))


def test_rule_intersection():
    rng = np.random.default_rng(4)
    A, B = (_sparse(rng, (N, N), 0.5, "csr", np.float64) for _ in range(2))
    got = _rule("r[i] = sum[j](A[i,j] * B[i,j] * u[j])", dict(A=A, B=B, u=np.ones(N)), _stored(A) & _stored(B))
    np.testing.assert_allclose(got.toarray(), A.toarray() * B.toarray())


def test_rule_products():
    # d/du sum[j,m](A[i,m] * B[m,j] * u[j]) = (A B)[i,k]: the Boolean product's pattern
    rng = np.random.default_rng(5)
    A, B = (_sparse(rng, (N, N), 0.2, "csr", np.float64) for _ in range(2))
    want = (_stored(A).astype(int) @ _stored(B).astype(int)) > 0
    got = _rule("r[i] = sum[j,m](A[i,m] * B[m,j] * u[j])", dict(A=A, B=B, u=np.ones(N)), want)
    np.testing.assert_allclose(got.toarray(), A.toarray() @ B.toarray(), rtol=1e-12)


def test_rule_diagonal_from_elementwise_terms():
    rng = np.random.default_rng(6)
    c = rng.uniform(0.5, 1.0, N)
    u = rng.uniform(0.1, 1.0, N)
    J = sc.jacobian("r[i] = exp(u[i]) * c[i] + u[i] * u[i]", wrt="u")
    got = J(u=u, c=c)
    np.testing.assert_array_equal(_stored(got), np.eye(N, dtype=bool))
    np.testing.assert_allclose(got.diagonal(), np.exp(u) * c + 2 * u, rtol=1e-12)
    assert "Id_[i,k]" in str(J.statement)


def test_stored_zeros_kept_and_pattern_stable():
    ops = _operands("bratu", "csr", np.float64, zero=True)
    J = sc.jacobian(BRATU, wrt="u")
    first = J.pattern(L=ops["L"])
    ops0 = dict(ops, lam=0.0)               # every diagonal value 0: still stored
    J0 = J(**ops0)
    np.testing.assert_array_equal(J0.diagonal(), ops["L"].diagonal())
    for _ in range(2):
        again = J.pattern(L=ops["L"])
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
    for call in (J0, J(**dict(ops, u=ops["u"] * 3))):
        np.testing.assert_array_equal(call.indptr, first[0])
        np.testing.assert_array_equal(call.indices, first[1])
    assert (J0.data == 0).any()


def test_value_layouts_against_each_other():
    ops = _operands("bratu", "csr", np.float64)
    J = sc.jacobian(BRATU, wrt="u")
    dense = J(**ops).toarray()
    (indptr, indices), vals = J.pattern(L=ops["L"]), J.values(**ops)
    np.testing.assert_array_equal(sp.csr_array((vals, indices, indptr), shape=(N, N)).toarray(), dense)
    (cptr, cind), cvals = J.pattern(layout="csc", L=ops["L"]), J.values(layout="csc", **ops)
    np.testing.assert_array_equal(sp.csc_array((cvals, cind, cptr), shape=(N, N)).toarray(), dense)
    (rows, cols), tvals = J.pattern(layout="coo", L=ops["L"]), J.values(layout="coo", **ops)
    np.testing.assert_array_equal(dense[rows, cols], tvals)
    assert len(tvals) == len(vals) == len(cvals)
    np.testing.assert_array_equal(np.lexsort((rows, cols)).size, len(rows))
    with pytest.raises(sc.SparseccError, match="layout"):
        J.values(layout="bsr", **ops)


def test_jvp_against_torch():
    ops = _operands("unary", "csr", np.float64)
    v = np.random.default_rng(9).standard_normal(N)
    t = sc.jvp(CASES["unary"][0], wrt="u")
    got = t(tangent=v, **ops)
    _, fn, u = _torch_jacobian("unary", ops)
    _, ref = t_jvp(fn, (u,), (torch.tensor(v),))
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-12, atol=1e-12)
    assert "Id_" not in str(t.statement)      # one kernel, no identity operand


# ------------------------------------------------------------------ Hessians

LSQ = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)"


def _lsq_operands(fmt="csr", dtype=np.float64, m=9, n=6):
    rng = np.random.default_rng(11)
    A = _sparse(rng, (m, n), 0.3, fmt, dtype)
    return dict(A=A, x=rng.standard_normal(n).astype(dtype), b=rng.standard_normal(m).astype(dtype))


def _lsq_torch(ops):
    A, b = _t(ops["A"]), _t(ops["b"])
    return lambda x: ((A @ x - b) ** 2).sum()


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_least_squares_hessian_is_AtA(fmt):
    ops = _lsq_operands(fmt)
    H = sc.hessian(LSQ, wrt="x")
    got = H(**ops)
    ref = t_hessian(_lsq_torch(ops))(torch.tensor(ops["x"], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(got.toarray(), ref, rtol=1e-12, atol=1e-12)
    S = _stored(ops["A"]).astype(int)
    np.testing.assert_array_equal(_stored(got), (S.T @ S) > 0)       # the pattern of A^T A
    lower = H(triangle="lower", **ops)
    np.testing.assert_array_equal(lower.toarray(), np.tril(ref))
    np.testing.assert_array_equal(_stored(lower), np.tril((S.T @ S) > 0))
    upper = H(triangle="upper", **ops)
    np.testing.assert_array_equal(upper.toarray(), np.triu(ref))
    indptr, indices = H.pattern(triangle="lower", A=ops["A"])
    np.testing.assert_array_equal(indptr, lower.indptr)
    np.testing.assert_array_equal(indices, lower.indices)
    np.testing.assert_array_equal(H.values(triangle="lower", **ops), lower.data)
    with pytest.raises(sc.SparseccError, match="triangle"):
        H(triangle="both", **ops)


def test_gradient_and_hvp():
    ops = _lsq_operands()
    fn = _lsq_torch(ops)
    x = torch.tensor(ops["x"], dtype=torch.float64)
    g = sc.gradient(LSQ, wrt="x")(**ops)
    np.testing.assert_allclose(g, torch.func.grad(fn)(x).numpy(), rtol=1e-12)
    v = np.random.default_rng(2).standard_normal(len(ops["x"]))
    hv = sc.hvp(LSQ, wrt="x")
    got = hv(tangent=v, **ops)
    np.testing.assert_allclose(got, t_hessian(fn)(x).numpy() @ v, rtol=1e-12, atol=1e-12)
    assert "Id_" not in str(hv.statement)


def test_hessian_several_terms():
    # a diagonal from the element-wise term plus A + A^T from the quadratic form
    stmt = "f[] = sum[i](c[i] * exp(x[i])) + sum[i,j](A[i,j] * x[i] * x[j])"
    rng = np.random.default_rng(13)
    A = _sparse(rng, (N, N), 0.2, "csr", np.float64)
    ops = dict(A=A, c=rng.uniform(0.5, 1, N), x=rng.uniform(-1, 1, N))
    got = sc.hessian(stmt, wrt="x")(**ops)
    tA, tc = _t(A), torch.tensor(ops["c"])
    ref = t_hessian(lambda x: (tc * torch.exp(x)).sum() + x @ tA @ x)(torch.tensor(ops["x"])).numpy()
    np.testing.assert_allclose(_dense(got), ref, rtol=1e-12, atol=1e-12)
    S = _stored(A)
    np.testing.assert_array_equal(_stored(got), S | S.T | np.eye(N, dtype=bool))


# ------------------------------------------------------------------ refusals


def test_bad_wrt():
    with pytest.raises(sc.SparseccError, match="not an operand"):
        sc.jacobian(BRATU, wrt="v")
    with pytest.raises(sc.SparseccError, match="rank"):
        sc.jacobian(BRATU, wrt="lam")
    with pytest.raises(sc.SparseccError, match="scalar result"):
        sc.hessian(BRATU, wrt="u")
    with pytest.raises(sc.SparseccError, match="scalar"):
        sc.jacobian(LSQ, wrt="x")
    with pytest.raises(sc.SparseccError, match="rank"):
        sc.hessian("f[] = sum[i](c * x[i])", wrt="c")
    # (a sparse wrt: its stored values, tests/test_derivatives_stored.py)


def test_sparse_vector_wrt_takes_its_stored_entries():
    # a sparse u: the columns are its stored entries (masked), here u[1], u[4], u[5]
    ops = _operands("bratu", "csr", np.float64)
    keep = np.array([1, 4, 5])
    u = np.zeros(N)
    u[keep] = ops["u"][keep]
    got = sc.jacobian(BRATU, wrt="u")(**dict(ops, u=sp.coo_array(u)))
    ref = _torch_jacobian("bratu", dict(ops, u=u))[0]
    assert got.shape == (N, 3)
    np.testing.assert_allclose(got.toarray(), ref[:, keep], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stmt", [
    "r[i] = (u[i] > 0) * c[i]",              # a comparison
    "r[i] = u[i] // 2",                      # integer division
    "r[i] = u[i] % 2",
    "r[i] = max[j](A[i,j] * u[j])",          # a non-sum monoid
    "r[i] = stored(A[i,j] * u[j])",
])
def test_not_differentiable(stmt):
    with pytest.raises(sc.SparseccError):
        sc.jacobian(stmt, wrt="u")


def test_integer_and_bool_dtypes_refused():
    # (complex values are differentiated: tests/test_derivatives_complex.py)
    ops = _operands("bratu", "csr", np.float64)
    J = sc.jacobian(BRATU, wrt="u")
    with pytest.raises(sc.DTypeError, match="floating-point"):
        J(**dict(ops, u=np.arange(N)))
    with pytest.raises(sc.DTypeError, match="floating-point"):
        J(**dict(ops, L=ops["L"].astype(np.int64), f=np.arange(N), u=np.arange(N), lam=1))
    with pytest.raises(sc.DTypeError, match="floating-point"):
        J(**dict(ops, u=ops["u"] > 0.5))
    with pytest.raises(sc.DTypeError, match="tangent"):
        sc.jvp(BRATU, wrt="u")(**ops, tangent=np.ones(N, np.int64))


def test_power_operator_parses_as_pow():
    s = sc.parse.parse_notation("y[i] = -x[i] ** 2 + 2 ** -x[i] ** 2")
    assert str(s) == "y[i] = (neg(pow(x[i], 2)) + pow(2, neg(pow(x[i], 2))))"
    x = np.linspace(0.1, 1, 5)
    np.testing.assert_allclose(sc.evaluate("y[i] = -x[i] ** 2 + 2 ** -x[i] ** 2", x=x), -x ** 2 + 2 ** -x ** 2)


def test_union_reading_one_operand_transposed_keeps_the_union_pattern():
    # was a kernel bug (every entry stored; tests/test_transposed_reads.py has the siblings)
    rng = np.random.default_rng(0)
    A = sp.random_array((7, 7), density=0.2, format="csr", random_state=rng)
    k = sc.compile("J_[k,k1] = ((((c[k] * exp(x[k])) * Id_[k,k1]) + A[k,k1]) + A[k1,k])", out_format="csr")
    J = k(A=A, Id_=sp.eye_array(7, format="csr"), c=np.ones(7), x=np.ones(7))
    want = A.toarray() + A.T.toarray() + np.e * np.eye(7)
    np.testing.assert_allclose(J.toarray(), want, rtol=1e-12)
    np.testing.assert_array_equal(_stored(J), _stored(A) | _stored(A.T) | np.eye(7, dtype=bool))


@pytest.mark.parametrize("n, density", [(7, 0.0), (1, 1.0), (1, 0.0)])
def test_bratu_edge_sizes(n, density):
    # an L storing nothing (the pattern is the diagonal), a 1 x 1 system; same kernel as above
    rng = np.random.default_rng(21)
    L = sp.random_array((n, n), density=density, format="csr", random_state=rng)
    u, f = rng.uniform(0.1, 1, n), np.ones(n)
    J = sc.jacobian(BRATU, wrt="u")
    got = J(L=L, u=u, lam=0.8, f=f)
    np.testing.assert_allclose(got.toarray(), L.toarray() + np.diag(0.8 * np.exp(u)), rtol=1e-12)
    np.testing.assert_array_equal(_stored(got), _stored(L) | np.eye(n, dtype=bool))
    indptr, indices = J.pattern(L=L)
    np.testing.assert_array_equal(indptr, got.indptr)
    np.testing.assert_array_equal(indices, got.indices)


def test_identically_zero_derivative():
    # floor is piecewise constant: its derivative is 0, an empty pattern (no kernel to run)
    J = sc.jacobian("r[i] = floor(u[i]) * c[i]", wrt="u")
    assert J.statement is None
    got = J(u=np.linspace(0, 2, 5), c=np.ones(5))
    assert isinstance(got, sp.csr_array) and got.shape == (5, 5) and got.nnz == 0
    t = sc.jvp("r[i] = floor(u[i]) * c[i]", wrt="u")(u=np.ones(5), c=np.ones(5), tangent=np.ones(5))
    np.testing.assert_array_equal(t, np.zeros(5))


def test_missing_and_unknown_operands():
    ops = _operands("bratu", "csr", np.float64)
    J = sc.jacobian(BRATU, wrt="u")
    with pytest.raises(sc.OperandError, match="missing"):
        J(L=ops["L"], u=ops["u"])
    with pytest.raises(sc.OperandError, match="no operand"):
        J(**ops, g=1.0)
    with pytest.raises(sc.OperandError, match="tangent"):
        sc.jvp(BRATU, wrt="u")(**ops)
    with pytest.raises(sc.OperandError, match="shape"):
        sc.jvp(BRATU, wrt="u")(**ops, tangent=np.ones(N + 1))


def test_pattern_same_in_another_process(tmp_path):
    import subprocess
    import sys
    ops = _operands("bratu", "csr", np.float64)
    sp.save_npz(tmp_path / "L.npz", ops["L"])
    code = ("import numpy as np, scipy.sparse as sp, sparsecc as sc\n"
            f"L = sp.csr_array(sp.load_npz({str(tmp_path / 'L.npz')!r}))\n"
            f"p = sc.jacobian({BRATU!r}, wrt='u').pattern(L=L)\n"
            f"np.savez({str(tmp_path / 'p.npz')!r}, indptr=p[0], indices=p[1])\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
    other = np.load(tmp_path / "p.npz")
    here = sc.jacobian(BRATU, wrt="u").pattern(L=ops["L"])
    np.testing.assert_array_equal(other["indptr"], here[0])
    np.testing.assert_array_equal(other["indices"], here[1])
