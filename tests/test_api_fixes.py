"""Front-end API: NumPy's einsum forms (ellipsis, broadcasting, sublists), 1-D SciPy
operands, BSR block-size choice, and errors in the user's terms (issues 12 and 19)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from conftest import random_dense, random_sparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (subscripts, operand shapes): NumPy's and pydata/sparse's einsum tests with an ellipsis,
# plus size-1 broadcasting inside and outside the ellipsis
ELLIPSIS = [
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),          # implicit output, broadcast batch
    ("a...,a...", [(3, 4), (3, 4)]),
    ("a...,a...->...", [(3, 2, 2), (3, 2, 1)]),
    ("...a,...a->...", [(2, 3), (3,)]),
    ("i...->...", [(3, 4)]),
    ("...i->...", [(2, 3, 4)]),
    ("ij...,jk...->ik...", [(3, 4, 2), (4, 5, 1)]),
    ("...,...", [(2, 3), (2, 3)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ij,ij->ij", [(3, 1), (3, 4)]),                     # broadcast of a named index
    ("a...,...->a...", [(3, 2, 4), (2, 4)]),
    ("ab...,b->a...", [(3, 4, 2), (4,)]),
    ("...a,...a", [(1, 3), (2, 3)]),
    ("...ab,...bc->...ac", [(1, 2, 3), (4, 1, 3, 2)]),
]


def _operand(shape, fmt, rng):
    if fmt == "dense" or len(shape) == 0:
        return random_dense(shape, "float64", rng)
    if fmt == "csr":
        if len(shape) != 2:
            return random_dense(shape, "float64", rng)
        return random_sparse(shape, 0.5, "float64", rng, fmt="csr")
    return random_sparse(shape, 0.5, "float64", rng)    # (N-d) COO


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


@pytest.mark.parametrize("fmt", ["dense", "csr", "coo"])
@pytest.mark.parametrize("expr,shapes", ELLIPSIS, ids=[e for e, _ in ELLIPSIS])
def test_ellipsis_and_broadcasting_match_numpy(expr, shapes, fmt):
    rng = np.random.default_rng(7)
    ops = [_operand(s, fmt, rng) for s in shapes]
    before = [_dense(o).copy() for o in ops]
    want = np.einsum(expr, *[_dense(o) for o in ops])
    got = sc.einsum(expr, *ops)
    np.testing.assert_allclose(_dense(got), want, rtol=1e-12, atol=1e-12)
    assert _dense(got).shape == want.shape
    for o, b in zip(ops, before):
        np.testing.assert_array_equal(_dense(o), b)     # nothing the user passed is modified


def test_sublist_form_matches_numpy():
    rng = np.random.default_rng(3)
    A = random_sparse((4, 3), 0.5, "float64", rng, fmt="csr")
    x = rng.uniform(size=3)
    T = random_sparse((2, 4, 3), 0.5, "float64", rng)
    Ad = A.toarray()
    np.testing.assert_allclose(sc.einsum(A, [0, 1], x, [1], [0]), np.einsum(Ad, [0, 1], x, [1], [0]))
    np.testing.assert_allclose(_dense(sc.einsum(A, [0, 1], x, [1])), np.einsum(Ad, [0, 1], x, [1]))
    np.testing.assert_allclose(_dense(sc.einsum(T, [Ellipsis, 1, 2], x, [2], [Ellipsis, 1])),
                               np.einsum(T.toarray(), [Ellipsis, 1, 2], x, [2], [Ellipsis, 1]))
    with pytest.raises(sc.ParseError, match="labels are integers"):
        sc.einsum(A, [0, 99], x, [1])
    with pytest.raises(sc.ParseError, match="must be a string"):
        sc.einsum(True, A)


def test_compile_with_ellipsis_works_per_rank():
    k = sc.compile("...ij,...j->...i")
    with pytest.raises(sc.SparseccError, match="call it once"):
        k.ir()
    rng = np.random.default_rng(5)
    for shape in [(3, 4), (2, 3, 4), (2, 2, 3, 4)]:
        A = random_sparse(shape, 0.5, "float64", rng)
        x = rng.uniform(size=shape[-1])
        np.testing.assert_allclose(_dense(k(A, x)), np.einsum("...ij,...j->...i", A.toarray(), x))
    assert "linalg.generic" in k.ir()


@pytest.mark.parametrize("expr,ops,err,needle", [
    ("..i,i", [(3,), (3,)], sc.ParseError, "ellipsis"),
    ("...i->i", [(2, 3)], sc.ParseError, "output names no '...'"),
    ("...ijk", [(2, 3)], sc.ShapeError, "2 dimension"),
    ("ij,ij->ij", [(3, 2), (3, 4)], sc.ShapeError, "size"),
])
def test_ellipsis_errors(expr, ops, err, needle):
    with pytest.raises(err, match=needle):
        sc.einsum(expr, *[np.ones(s) for s in ops])


# ------------------------------------------------------------------ 1-D SciPy operands
def _one_d(kind, v):
    return {"csr": sp.csr_array, "coo": sp.coo_array, "dok": sp.dok_array}[kind](v)


@pytest.mark.parametrize("kind", ["csr", "coo", "dok"])
@pytest.mark.parametrize("dtype", ["float64", "int32", "complex128"])
def test_one_dimensional_sparse_operands(kind, dtype):
    rng = np.random.default_rng(11)
    v = random_sparse((7,), 0.5, dtype, rng).toarray()
    M = random_sparse((5, 7), 0.5, dtype, rng, fmt="csr")
    x = _one_d(kind, v)
    before = v.copy()
    for expr, ops, dense in [("i,i->", (x, v), (v, v)), ("ij,j->i", (M, x), (M.toarray(), v)),
                             ("i->i", (x,), (v,)), ("i,j->ij", (x, x), (v, v))]:
        got = sc.einsum(expr, *ops)
        np.testing.assert_allclose(_dense(got), np.einsum(expr, *dense))
    for f in ("dense", "coo", "csf"):
        np.testing.assert_allclose(sc.einsum("i,i->", x, v, formats=[f, None]), v @ v)
    np.testing.assert_array_equal(_dense(x), before)
    empty = _one_d(kind, np.zeros(4, dtype))
    assert sc.einsum("i->", empty) == 0


def test_one_dimensional_csr_is_zero_copy():
    from sparsecc.runtime.operands import loader
    x = sp.csr_array(np.array([1.0, 0.0, 2.0, 0.0]))
    fmt = sc.Format.coo(1).with_widths(32, 32)
    bufs, sizes = loader(x, fmt)(x, fmt, "x")
    assert sizes == [4]
    assert all(np.shares_memory(b, a) for b, a in zip(bufs, (x.indptr, x.indices, x.data)))


def test_one_dimensional_csr_is_validated():
    x = sp.csr_array(np.array([1.0, 0.0, 2.0]))
    x.indices[1] = 9
    with pytest.raises(sc.OperandError, match="index 9"):
        sc.einsum("i->", x)


def test_two_dimensional_dok():
    rng = np.random.default_rng(2)
    M = random_sparse((4, 3), 0.5, "float64", rng, fmt="csr")
    np.testing.assert_allclose(sc.einsum("ij,j->i", sp.dok_array(M), np.ones(3)), M.toarray().sum(1))


# ------------------------------------------------------------------ BSR block sizes
@pytest.mark.parametrize("kind", ["csr", "coo", "dense", "bsr"])
def test_plain_bsr_operand_takes_scipys_block_size(kind):
    M = np.kron(np.array([[1.0, 0, 2], [0, 3, 0]]), np.ones((2, 2)))     # 4 x 6, 2x2 blocks
    x = np.arange(6.0)
    op = {"csr": sp.csr_array, "coo": sp.coo_array, "dense": np.asarray,
          "bsr": lambda m: sp.bsr_array(m, blocksize=(2, 3))}[kind](M)
    k = sc.compile("ij,j->i", "bsr", None)
    np.testing.assert_allclose(k(op, x), M @ x)
    want = (2, 3) if kind == "bsr" else sp.csr_array(M).tobsr().blocksize
    assert f"d0 floordiv {want[0]} : dense, d1 floordiv {want[1]} : compressed" in k.ir()


def test_plain_bsr_with_a_block_size_of_one_runs_as_csr():
    M = np.eye(3)
    k = sc.compile("ij,j->i", "bsr", None)
    np.testing.assert_allclose(k(M, np.arange(3.0)), np.arange(3.0))      # SciPy picks 1x1
    assert "floordiv" not in k.ir() and "compressed" in k.ir()
    np.testing.assert_allclose(sc.einsum("ij,j->i", sp.bsr_array(M), np.ones(3)), np.ones(3))


def test_plain_bsr_result():
    D = np.arange(24.0).reshape(4, 6)
    got = sc.einsum("ij->ij", D, out_format="bsr")
    assert isinstance(got, sp.bsr_array) and got.blocksize == (4, 3)
    np.testing.assert_array_equal(got.toarray(), D)
    with pytest.raises(sc.FormatError, match="no block size"):
        sc.einsum("ij->ij", np.ones((5, 7)), out_format="bsr")


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("code,err,needle", [
    ("sc.einsum('ij->ij', np.ones((3, 3)), out_format='bsr4x4')", "ShapeError", "do not tile"),
    ("sc.einsum('ij->ij', sp.csr_array(np.eye(3)), out_format='bsr4x4')", "FormatError", "sparse operands"),
    ("sc.einsum('ij->ji', sp.csr_array(np.ones((4, 6))), out_format='bsr2x3')", "FormatError",
     "sparse operands"),
    ("k = sc.compile('ij->ij', out_format='bsr2x2'); k(np.ones((4, 4))); k(np.ones((3, 3)))", "ShapeError",
     "do not tile"),
    # a malformed operand is refused before SciPy converts it to BSR (its C code trusts indices)
    ("A = sp.csr_array(np.ones((4, 4))); A.indices[3] = 10**6; sc.einsum('ij,j->i', A, np.ones(4), "
     "formats=['bsr', None])", "OperandError", "out of range"),
    # the same before a broadcast size-1 dimension is dropped (SciPy's tocoo)
    ("A = sp.csr_array(np.ones((1, 4))); A.indptr[1] = 10**6; sc.einsum('ij,ij->ij', A, np.ones((3, 4)))",
     "OperandError", "indptr ends at"),
])
def test_bsr_result_errors_before_native_code(code, err, needle):
    r = _run(f"import numpy as np, scipy.sparse as sp, sparsecc as sc\n"
             f"try:\n    {code}\nexcept sc.{err} as e:\n    print('RAISED', e)\n")
    assert r.returncode == 0, r.stderr
    assert "RAISED" in r.stdout and needle in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------ Options and Format fields
@pytest.mark.parametrize("kwargs,needle", [
    (dict(cpu=5), "cpu must be an LLVM CPU name"),
    (dict(cpu="bogus"), "not a CPU LLVM knows"),
    (dict(cpu=""), "cpu must be"),
    (dict(opt_level=True), "opt_level"),
    (dict(opt_level=2.0), "opt_level"),
    (dict(vector_length=True), "vector_length"),
    (dict(vector_length=3), "power of two"),
    (dict(index_width=32.0), "index_width"),
    (dict(parallel=None), "parallel"),
    (dict(loop_order=["default"]), "loop_order"),
])
def test_options_fields_are_checked(kwargs, needle):
    with pytest.raises(sc.SparseccError, match=needle):
        sc.Options(**kwargs)


def test_options_known_cpu_and_numpy_integers():
    from sparsecc.options import known_cpus
    cpus = known_cpus()
    if cpus:
        assert "x86-64" in cpus or "generic" in cpus
    sc.Options(cpu="generic" if "generic" in cpus else None, opt_level=np.int64(2))


def test_bad_cpu_was_a_compiler_crash_and_is_now_refused_in_options():
    # before: Options(cpu="bogus") was accepted and LLVM aborted the compile worker
    # ("64-bit code requested on a subtarget that doesn't support it")
    r = _run("import sparsecc as sc\ntry:\n    sc.Options(cpu='bogus')\nexcept sc.SparseccError as e:\n"
             "    print('RAISED', e)\n")
    assert r.returncode == 0 and "RAISED" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("make,needle", [
    (lambda: sc.Format("dense"), "sequence of level types"),
    (lambda: sc.Format((1, 2)), "level 0 is 1"),
    (lambda: sc.Format(("dense", "compressed", "dense", "dense"), block=(-1, 2)), ">= 1"),
    (lambda: sc.Format(("dense", "dense", "dense", "dense"), block=(2.5, 2)), "integer block sizes"),
    (lambda: sc.Format(("dense", "compressed"), block=(2, 2)), "need 4 levels"),
    (lambda: sc.Format(("dense", "compressed"), order="ab"), "dimension numbers"),
    (lambda: sc.Format(("dense", "compressed"), order=(0, 0)), "not a permutation"),
    (lambda: sc.Format(("dense",), pos_width=True), "index width"),
    (lambda: sc.Format(("dense",), crd_width=16), "index width"),
    (lambda: sc.Format(("dense",), name=3), "name"),
    (lambda: sc.Format.bsr(2), r"block size \(R, C\)"),
    (lambda: sc.Format.coo("a"), "rank must be"),
    (lambda: sc.Format.csf(-1), "rank must be"),
    (lambda: sc.Format.dense(-2), "rank must be"),
    (lambda: sc.Format.parse(5), "MLIR level map"),
])
def test_format_fields_are_checked(make, needle):
    with pytest.raises(sc.FormatError, match=needle):
        make()


# ------------------------------------------------------------------ the public API, hostile
SWEEP_SETUP = """
import numpy as np, scipy.sparse as sp, sparsecc as sc
A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]]))
x = np.ones(3)
"""

# (code, the SparseccError subclass, text the message must contain); all run in one subprocess
SWEEP = [
    ("sc.einsum(None, A)", "ParseError", "must be a string"),
    ("sc.einsum(b'ij->i', A)", "ParseError", "must be a string"),
    ("sc.einsum('ij->i')", "OperandError", "0 were given"),
    ("sc.einsum('ij,j->i', A)", "OperandError", "but 1 were given"),
    ("sc.einsum('ij,j->i', A, None)", "OperandError", "not a numeric array"),
    ("sc.einsum('ij,j->i', A, np.array(2.0))", "ShapeError", "0 dimensions"),
    ("sc.einsum('ij,j->i', A, [1, [2, 3]])", "OperandError", "not an array"),
    ("sc.einsum('ij,j->i', A, [2**70, 1, 1])", "OperandError", "not a numeric array"),
    ("sc.einsum('ij,j->i', A, {'a': 1})", "OperandError", "not a numeric array"),
    ("sc.einsum('ij,j->i', A, 'abc')", "SparseccError", ""),
    ("sc.einsum('ij,j->i', A, np.array(['a', 'b', 'c'], dtype=object))", "DTypeError", "object"),
    ("sc.einsum('ij,j->i', A, np.ones(3, np.float16))", "DTypeError", "float16"),
    ("sc.einsum('ij,j->i', A, np.ones(3, np.int8))", "DTypeError", "int8"),
    ("sc.einsum('i->i', np.array(['2020-01-01'] * 3, dtype='datetime64[D]'))", "DTypeError", "datetime64"),
    ("sc.einsum('ij,j->i', A, np.ones(4))", "ShapeError", "size 3"),
    ("sc.einsum('ij,ij->ij', A, sp.csr_array(np.ones((3, 4))))", "ShapeError", "size 3"),
    ("c = A.tocoo(); c._shape = (3, -1); sc.einsum('ij,j->i', c, x)", "ShapeError", "negative"),
    ("sc.einsum('ij,j->i', A, x, formats=5)", "FormatError", "sequence"),
    ("sc.einsum('ij,j->i', A, x, formats='csr')", "FormatError", "sequence"),
    ("sc.einsum('ij,j->i', A, x, formats=sc.Format.csr())", "FormatError", "sequence"),
    ("sc.einsum('ij,j->i', A, x, formats={'A': 'csr'})", "FormatError", "sc.evaluate"),
    ("sc.einsum('ij,j->i', A, x, formats=[5, None])", "FormatError", "got 5"),
    ("sc.einsum('ij,j->i', A, x, formats=['csr'])", "OperandError", "1 format"),
    ("sc.einsum('ij->ij', A, out_format=True)", "FormatError", "got True"),
    ("sc.einsum('ij->ij', A, out_format=['csr'])", "FormatError", "got ['csr']"),
    ("sc.einsum('ij,j->i', A, x, options={})", "SparseccError", "sc.Options"),
    ("sc.einsum('ij,j->i', A, x, options='fast')", "SparseccError", "sc.Options"),
    ("sc.einsum('ij->ij', A, prune='no')", "SparseccError", "prune must be True or False"),
    ("sc.einsum('ij->i', A, check=None)", "SparseccError", "check must be True or False"),
    ("sc.einsum('ij,j->i', A, x, semiring=5)", "SparseccError", "semiring"),
    ("sc.compile(5)", "SparseccError", "string"),
    ("sc.compile('ij,j->i', 'csr', 'dense', 'dense')", "OperandError", "3 formats"),
    ("sc.compile('ij,j->i', A='csr')", "FormatError", "by position"),
    ("sc.compile('...ij,...j', A='csr')", "FormatError", "by position"),
    ("sc.compile('ij,j->i')(A)", "OperandError", "takes 2 operand"),
    ("sc.compile('ij,j->i')(A, x=x)", "OperandError", "by position"),
    ("sc.compile('ij,j->i')(A, None)", "OperandError", "not a numeric array"),
    ("sc.compile('ij,j->i')(A, np.ones((3, 1)))", "ShapeError", "2 dimensions"),
    ("sc.compile('ij->i').ir(5)", "SparseccError", "unknown stage"),
    ("sc.evaluate(5)", "SparseccError", "statement"),
    ("sc.evaluate('y[i] = A[i,j] * x[j]', A=A, x=None)", "OperandError", "not a numeric array"),
    ("sc.evaluate('y[i] = A[i,j] * x[j]', A, x, x)", "OperandError", "takes 2 operands"),
    ("sc.evaluate('y[i] = A[i,j] * x[j]', A, A=A, x=x)", "OperandError", "given twice"),
    ("sc.evaluate('y[i] = A[i,j] * x[j]', A=A, x=x, formats=['csr'])", "OperandError", "1 format"),
    ("sc.evaluate('y[i] = A[i,j] * x[j]', A=A, x=x, formats='csr')", "FormatError", "dict by operand name"),
    ("sc.evaluate('y[i] = A[i,j] * x[j]', A=A, x=x, formats={'B': 'csr'})", "FormatError", "not an operand"),
]


def test_public_api_refuses_hostile_input_in_the_users_terms():
    lines = [SWEEP_SETUP]
    for k, (code, _, _) in enumerate(SWEEP):
        lines.append(f"try:\n    {code}\n    print({k}, 'NO ERROR')\nexcept sc.SparseccError as e:\n"
                     f"    print({k}, type(e).__name__, str(e).replace(chr(10), ' '))\n"
                     f"except Exception as e:\n    print({k}, 'NOT A SparseccError', type(e).__name__, e)\n")
    r = _run("".join(lines))
    assert r.returncode == 0, r.stderr[-2000:]
    got = {}
    for line in r.stdout.splitlines():
        k, _, rest = line.partition(" ")
        if k.isdigit():
            got[int(k)] = rest
    bad = []
    for k, (code, err, needle) in enumerate(SWEEP):
        out = got.get(k, "no output")
        kind, _, msg = out.partition(" ")
        if not (kind == err or (err == "SparseccError" and kind.endswith("Error") and "NOT" not in out)) \
                or needle not in msg:
            bad.append(f"{code}: {out}")
    assert not bad, "\n".join(bad)


def test_sensible_conversions():
    """What the API converts instead of refusing (docs/getting-started.md, Errors)."""
    A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]]))
    want = A.toarray() @ np.arange(3.0)
    ro = np.arange(3.0)
    ro.setflags(write=False)
    for x in ([0, 1, 2], (0.0, 1.0, 2.0), ro, np.repeat(np.arange(3.0), 2)[::2], np.asfortranarray(np.arange(3.0))):
        np.testing.assert_allclose(sc.einsum("ij,j->i", A, x), want)
    np.testing.assert_allclose(sc.einsum("ij,j->i", np.asfortranarray(A.toarray()), np.arange(3.0)), want)
    assert sc.einsum(",->", 2, np.array(3.0)) == 6
    np.testing.assert_allclose(sc.evaluate("y[i] = A[i,j] * x[j]", A, np.arange(3.0)), want)
    np.testing.assert_allclose(sc.evaluate("y[i] = A[i,j] * x[j]", A=A, x=np.arange(3.0),
                                           formats=["dcsr", "dense"]), want)


def test_one_dimensional_operands_not_canonical():
    x = sp.csr_array((np.array([2.0, 1.0, 5.0]), np.array([3, 0, 3]), np.array([0, 3])), shape=(5,))
    c = sp.coo_array((np.array([2.0, 1.0, 5.0]), (np.array([3, 0, 3]),)), shape=(5,))
    want = np.array([1.0, 0, 0, 7, 0])
    for v in (x, c):
        np.testing.assert_array_equal(sc.einsum("i->i", v), want)
        np.testing.assert_array_equal(sc.einsum("i->i", v, out_format="coo").toarray(), want)
        assert sc.einsum("i,i->", v, np.arange(5.0)) == want @ np.arange(5.0)
    np.testing.assert_array_equal(x.indices, [3, 0, 3])        # not modified


@pytest.mark.parametrize("fmt", ["dense", "coo"])
def test_ellipsis_empty_and_single_entry(fmt):
    one = sp.coo_array((np.array([2.5]), (np.array([1]), np.array([0]), np.array([2]))), shape=(2, 3, 4))
    cases = [("...ij,...jk->...ik", [np.zeros((0, 3, 4)), np.zeros((0, 4, 5))]),
             ("...ij,...jk->...ik", [one, np.arange(20.0).reshape(4, 5)]),
             ("...i,...i->...", [one, np.ones((1, 1, 4))]),
             ("i...,i...", [np.zeros((0, 2)), np.zeros((0, 1))])]
    for expr, ops in cases:
        if fmt == "dense":
            ops = [_dense(o) for o in ops]
        want = np.einsum(expr, *[_dense(o) for o in ops])
        got = _dense(sc.einsum(expr, *ops))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want)
