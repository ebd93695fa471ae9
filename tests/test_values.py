"""Expression values: constants, integer and float division, pow, folding, deep expressions.

Every result is compared with NumPy (bitwise where NumPy's value is exact).  Kernels that
could trap (SIGFPE) run in a subprocess: a signal fails the test instead of the run.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.expr import accesses

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_py(code: str, env: dict | None = None) -> str:
    """Run ``code`` in a fresh interpreter; it must exit cleanly (no signal) and print 'ok'."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, **(env or {})}, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert r.stdout.strip().endswith("ok"), r.stdout + r.stderr[-3000:]
    return r.stdout


def bits_equal(got, want):
    """Same dtype, shape and bit pattern (NaNs of any payload are equal)."""
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "fc":
        g, w = got.view(got.real.dtype), want.view(want.real.dtype)
        both_nan = np.isnan(g) & np.isnan(w)
        assert np.array_equal(np.where(both_nan, 0, g.view(f"u{g.itemsize}")),
                              np.where(both_nan, 0, w.view(f"u{w.itemsize}"))), (got, want)
    else:
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------- integer division (issue 3)

INT_DIV = """
import warnings
import numpy as np, scipy.sparse as sp, sparsecc as sc
from tests.test_values import bits_equal
warnings.simplefilter("ignore")
dt = np.dtype("{dtype}")
lo = np.iinfo(dt).min
x = np.array([7, -7, 0, 1, lo, -1, 5], dtype=dt)
for op in ("//", "%"):
    for d in (0, -1, 2, -2, 1):
        bits_equal(sc.evaluate(f"y[i] = x[i] {{op}} d", x=x, d=dt.type(d)),
                   eval(f"x {{op}} dt.type(d)"))
    y = np.array([0, -1, 3, 0, -1, -1, -3], dtype=dt)
    bits_equal(sc.evaluate(f"y[i] = stored(x[i] {{op}} v[i])", x=x, v=y), eval(f"x {{op}} y"))
    # sparse over sparse: B stores explicit zeros
    A = sp.csr_array((np.array([7, -7, lo, 3], dt), np.array([0, 1, 0, 1]), np.array([0, 2, 3, 4])), shape=(3, 2))
    B = sp.csr_array((np.array([0, 2, -1, 0], dt), np.array([0, 1, 0, 1]), np.array([0, 2, 3, 4])), shape=(3, 2))
    bits_equal(sc.evaluate(f"C[i,j] = stored(A[i,j] {{op}} B[i,j])", A=A, B=B), eval(f"A.toarray() {{op}} B.toarray()"))
    # a literal 0 divisor on a sparse operand
    bits_equal(sc.evaluate(f"C[i,j] = A[i,j] {{op}} 0", A=A), eval(f"A.toarray() {{op}} dt.type(0)"))
# a semiring whose multiply divides
x2 = np.array([3, 0, -4], dtype=dt)
A = sp.csr_array(np.array([[6, 0, 8], [0, 5, 0]], dtype=dt))
got = sc.einsum("ij,j->i", A, x2, semiring=sc.Semiring("plus", "a // b"))
want = np.array([6 // 3 + 8 // -4, 0], dtype=dt)   # 5 // 0 == 0 takes part
bits_equal(got, want)
print("ok")
"""


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_integer_division_by_zero_and_minus_one(dtype):
    run_py(INT_DIV.format(dtype=dtype))


# ------------------------------------------------------------- float constants (issue 1)

CONSTANTS = ["1e-5", "1e30", "0.1", "-0.0", "1e39", "2.5e-45", "1.7976931348623157e308", "5e-324", "3",
             "(1e-5+2.5e-7j)", "0.1j", "(1e300*1e300)", "(0.0/0.0)", "(-(1e300*1e300) + 0.5j)", "(0.0/0.0 + 1j)",
             "(-0.0 + 0j)"]


def _python_value(c):
    """What Python makes of constant text ``c`` (where Python raises or overflows, NumPy's
    IEEE values: 0.0/0.0 is nan, 1e300*1e300 is inf)."""
    return eval(c.replace("0.0/0.0", "float('nan')").replace("1e300*1e300", "float('inf')"))


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_float_constants_round_trip_bit_exactly(dtype):
    x = np.ones(3, dtype=dtype)
    for c in CONSTANTS:
        if "j" in c and dtype.startswith("float"):
            continue
        with np.errstate(all="ignore"):
            want = x * _python_value(c)
        bits_equal(sc.evaluate(f"y[i] = x[i] * {c}", x=x), want)


def test_exponent_constant_in_a_sparse_statement():
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, 2.0]]))
    x = np.array([3.0, 4.0])
    bits_equal(sc.evaluate("y[i] = A[i,j] * x[j] + 1e-5", A=A, x=x), A.toarray() @ x + 1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_semiring_identity_in_exponent_form(dtype):
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, 0.0]], dtype=dtype))
    x = np.array([3.0, 4.0], dtype=dtype)
    got = sc.einsum("ij,j->i", A, x, semiring=sc.Semiring("min", "plus", identity=1e30))
    bits_equal(got, np.array([4.0, 1e30], dtype=dtype))


# ------------------------------------------------- emission is a pure function (issue 2)

# kernels whose MLIR has hoisted values (absent constants, monoid identities, op(0, s))
ORDER_KERNELS = ["B[i,j] = exp(A[i,j]) * (1+2j)", "y[i] = min[j](A[i,j] + x[j])", "B[i,j] = A[i,j] - s"]


def _order_ir(order):
    from sparsecc.dialect import emit_kernel
    from sparsecc.formats import resolve
    from sparsecc.parse import parse_notation
    out = {}
    for k in order:
        stmt = parse_notation(ORDER_KERNELS[k])
        fmts = {n: resolve("csr" if n == "A" else "dense", len(next(a.indices for a in accesses(stmt.expr)
                                                                      if a.tensor == n)))
                for n in stmt.operands}
        out[k] = emit_kernel(stmt, fmts, {n: "float64" for n in stmt.operands})[0]
    return out


def test_emitted_ir_does_not_depend_on_what_was_emitted_before():
    first = _order_ir([0, 1, 2])
    again = _order_ir([2, 1, 0, 2])
    assert all(first[k] == again[k] for k in first)


def test_second_process_compiling_in_another_order_hits_the_disk_cache(tmp_path):
    code = """
    import numpy as np, scipy.sparse as sp, sparsecc as sc
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, 2.0]])); x = np.ones(2)
    calls = {{"a": lambda: sc.evaluate("y[i] = min[j](A[i,j] + x[j])", A=A, x=x),
             "b": lambda: sc.evaluate("B[i,j] = A[i,j] - s", A=A, s=1.5),
             "c": lambda: sc.evaluate("B[i,j] = exp(A[i,j]) * (1+2j)", A=A)}}
    for k in "{order}":
        calls[k]()
    print(sc.cache_info().misses, "{order}", "ok")
    """
    env = {"SPARSECC_CACHE_DIR": str(tmp_path)}
    # other hash seeds too: no set or dict order of strings may reach the MLIR
    assert run_py(code.format(order="abc"), {**env, "PYTHONHASHSEED": "1"}).split()[0] == "3"
    assert run_py(code.format(order="cb"), {**env, "PYTHONHASHSEED": "2"}).split()[0] == "0"
    assert run_py(code.format(order="b"), {**env, "PYTHONHASHSEED": "3"}).split()[0] == "0"


# ------------------------------------------------------ float // and % like NumPy (issue 4)

EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 7.0, -7.0, 2.0, -2.0, 0.5, -1.5, 1e-300, -1e-300, 1e300, -1e300,
         5e-324, 1.7976931348623157e308]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["//", "%"])
def test_float_floor_division_and_remainder_match_numpy(dtype, op):
    with np.errstate(all="ignore"):
        e = np.array(EDGES, dtype=dtype)
    a, b = np.repeat(e, len(e)), np.tile(e, len(e))
    with np.errstate(all="ignore"):
        want = a // b if op == "//" else a % b
        got = sc.evaluate(f"y[i] = stored(a[i] {op} b[i])", a=a, b=b)
    bits_equal(got, want)
    # by a scalar operand, and on a sparse operand (unstored entries are 0 // s)
    for s in (np.inf, -0.0, 0.0, -2.0):
        s = np.asarray(s, dtype=dtype)
        with np.errstate(all="ignore"):
            bits_equal(sc.evaluate(f"y[i] = a[i] {op} s", a=a, s=s), a // s if op == "//" else a % s)
    A = sp.csr_array(np.array([[7.0, 0.0, -7.0], [0.0, np.inf, 0.0]], dtype=dtype))
    with np.errstate(all="ignore"):
        want = A.toarray() // dtype_t(dtype)(-np.inf) if op == "//" else A.toarray() % dtype_t(dtype)(-np.inf)
    bits_equal(sc.evaluate(f"B[i,j] = A[i,j] {op} s", A=A, s=dtype_t(dtype)(-np.inf)), want)


def dtype_t(dtype):
    return np.dtype(dtype).type


# ------------------------------------------- statements that did not compile (issue 5)

def test_integer_pow():
    x = np.array([3, -2, 0, 7, 2**40, 1, -1], dtype=np.int64)
    bits_equal(sc.evaluate("y[i] = pow(x[i], 2)", x=x), x ** 2)
    bits_equal(sc.evaluate("y[i] = pow(x[i], 3)", x=x.astype(np.int32)), x.astype(np.int32) ** 3)
    for e in (0, 1, 5, 63):
        bits_equal(sc.evaluate("y[i] = pow(x[i], e)", x=x, e=e), x ** e)
    v = np.array([0, 1, 2, 63, 62, 9, 4])
    bits_equal(sc.evaluate("y[i] = stored(pow(x[i], v[i]))", x=x, v=v), x ** v)
    Ai = sp.csr_array(np.array([[3, 0], [-2, 5]], dtype=np.int32))
    bits_equal(sc.ops.pow(Ai, 2), Ai.toarray() ** 2)
    bits_equal(sc.evaluate("B[i,j] = pow(A[i,j], 3)", A=Ai), Ai.toarray() ** 3)


def test_negative_integer_power():
    x = np.array([3, -2], dtype=np.int64)
    with pytest.raises(sc.DTypeError, match="pow.*-1.0"):
        sc.evaluate("y[i] = pow(x[i], -1)", x=x)
    A = sp.csr_array(np.array([[1.0, 0.0], [-2.0, 4.0]]))        # float: NumPy's 1 / A
    with np.errstate(all="ignore"):
        bits_equal(sc.evaluate("B[i,j] = pow(A[i,j], -1)", A=A), np.power(A.toarray(), -1))


@pytest.mark.parametrize("stmt, fn", [
    ("B[i,j] = A[i,j] / 0", lambda a: a / 0),
    ("B[i,j] = A[i,j] / (1 - 1)", lambda a: a / 0),
    ("B[i,j] = min(A[i,j], tanh(0.5))", lambda a: np.minimum(a, np.tanh(0.5))),
    ("B[i,j] = A[i,j] < abs(3)", lambda a: a < 3),
    ("B[i,j] = max(A[i,j], exp(-(1e-5)))", lambda a: np.maximum(a, np.exp(-(1e-5)))),
    ("B[i,j] = A[i,j] * (2 // 0 + 1e30)", lambda a: a * 1e30),   # constants of Python scalars stay weak
])
def test_constant_subexpressions(stmt, fn):
    A = sp.csr_array(np.array([[1.0, 0.0, -3.0], [0.0, 2.5, 0.0]], dtype=np.float32))
    with np.errstate(all="ignore"):
        bits_equal(sc.evaluate(stmt, A=A), fn(A.toarray()))


def test_constant_nodes_keep_their_type():
    x = np.array([1, 2, 3])
    bits_equal(sc.evaluate("y[i] = x[i]*1 + x[i]*1.0", x=x), x * 1 + x * 1.0)
    x32 = np.ones(2, np.complex64)
    bits_equal(sc.evaluate("y[i] = x[i] * (1e-5 + 2.5e-7j)", x=x32), x32 * (1e-5 + 2.5e-7j))


# ------------------------------------------------ errors that name the mistake (issue 6)

@pytest.mark.parametrize("stmt, match", [
    ("s = 2", "reads no operand"),
    ("y[i] = sum[j](sum[j](A[i,j]))", "already reduces"),
    ("y[i] = x[i] * index(k)", "'k' indexes no operand"),
    ("y[i] = " + "(" * 500 + "x[i]" + ")" * 500, "nest more than 100"),
    ("y[i] = " + "+".join(["x[i]"] * 1000), "1000 levels deep"),
    ("y[i] = " + "-".join(["A[i,j]"] * 101), "levels deep"),
])
def test_errors_name_the_mistake(stmt, match):
    A = sp.csr_array(np.eye(3))
    x = np.ones(3)
    ops = {k: v for k, v in (("A", A), ("x", x)) if f"{k}[" in stmt}
    with pytest.raises(sc.ParseError, match=match):
        sc.evaluate(stmt, **ops)


def test_deepest_accepted_expression():
    x = np.arange(3.0)
    terms = "+".join(["x[i]"] * 100)                 # 100 levels: the limit
    want = x.copy()
    for _ in range(99):
        want = want + x
    bits_equal(sc.evaluate(f"y[i] = {terms}", x=x), want)
    # the emitter walks such a tree inside sparse regions without exhausting the stack
    from sparsecc.dialect import emit_kernel
    from sparsecc.formats import resolve
    from sparsecc.parse import parse_notation
    stmt = parse_notation("B[i,j] = " + "+".join(["exp(A[i,j])"] * 49) + " - " + "(" * 90 + "A[i,j]" + ")" * 90)
    assert "sparse_tensor.unary" in emit_kernel(stmt, {"A": resolve("csr", 2)}, {"A": "float64"})[0]
