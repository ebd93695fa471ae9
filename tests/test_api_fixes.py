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
])
def test_bsr_result_errors_before_native_code(code, err, needle):
    r = _run(f"import numpy as np, scipy.sparse as sp, sparsecc as sc\n"
             f"try:\n    {code}\nexcept sc.{err} as e:\n    print('RAISED', e)\n")
    assert r.returncode == 0, r.stderr
    assert "RAISED" in r.stdout and needle in r.stdout, r.stdout + r.stderr
