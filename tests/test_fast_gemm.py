"""Dense x dense contractions run as a hand-written kernel (sparsecc/dialect/kernels/gemm.py):
checked against ``numpy.einsum`` on the same arrays over shapes (1 x n, n x 1, empty
dimensions, rows and columns that are no multiple of the kernel's blocks) x dtypes (exact
integers, float32/64, complex), batched and transposed-X spellings, 1 vs 2 threads (bitwise
equal), an output handed over uninitialized; the spellings it does not serve keep the
sparsifier's kernel."""

import numpy as np
import pytest

import sparsecc as sc
from sparsecc.dialect.kernels import gemm

from conftest import seed as _seed

pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py

SLOW = pytest.mark.slow
DTYPES = ["float64", pytest.param("float32", marks=SLOW), "int64", pytest.param("int32", marks=SLOW), "complex128"]
# (m, k, n): one row / one column, empty m, k, n, and remainders of ROWS and of the column block
SHAPES = [(1, 5, 1), (1, 9, 37), (23, 4, 1), (0, 3, 4), (5, 0, 3), (4, 6, 0), (gemm.ROWS, 8, 16),
          (2 * gemm.ROWS + 1, 7, 19), (13, 31, 35)]


def _handwritten(k) -> bool:
    ir = k.ir()
    return "linalg.generic" not in ir and gemm.PARALLEL_CHUNK in ir


def _values(shape, dtype, rng):
    if np.dtype(dtype).kind == "i":
        big = 2 ** 40 if dtype == "int64" else 2 ** 14        # products wrap for int64, as NumPy's do
        return rng.integers(-big, big, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _same(got, want):
    assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if want.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def kernel():
    return sc.compile("ik,kj->ij", "dense", "dense")


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_einsum_over_shapes(kernel, dtype):
    rng = np.random.default_rng(_seed("gemm", dtype))
    for m, k, n in SHAPES:
        X, Y = _values((m, k), dtype, rng), _values((k, n), dtype, rng)
        _same(kernel(X, Y), np.einsum("ik,kj->ij", X, Y))
        assert _handwritten(kernel)


def test_every_output_entry_is_written(kernel):
    """The call hands the kernel uninitialized memory: freed NaNs never show through (k = 0 too)."""
    rng = np.random.default_rng(_seed("gemm-fill"))
    for m, k, n in ((40, 0, 33), (41, 9, 33)):
        X, Y = rng.random((m, k)), rng.random((k, n))
        for _ in range(3):
            junk = np.full((m, n), np.nan)
            del junk
            C = kernel(X, Y)
            assert not np.isnan(C).any()
            _same(C, X @ Y)


@pytest.mark.parametrize("expr,shapes", [
    ("ijk,jl->ikl", [(5, 7, 13), (7, 11)]),         # the Tucker chain's dense step: a batch index, X "transposed"
    ("bik,bkj->bij", [(3, 13, 5), (3, 5, 17)]),     # batched matmul
    pytest.param("ki,kj->ij", [(9, 14), (9, 10)], marks=SLOW),              # X^T @ Y
    pytest.param("kib,kj->bij", [(4, 7, 3), (4, 9)], marks=SLOW),
    pytest.param("ik,bkj->bij", [(5, 4), (3, 4, 9)], marks=SLOW),          # a batch index of Y only
])
def test_spellings(expr, shapes):
    rng = np.random.default_rng(_seed(expr))
    ops = [rng.random(s) for s in shapes]
    k = sc.compile(expr, "dense", "dense")
    _same(k(*ops), np.einsum(expr, *ops))
    assert _handwritten(k)


# (m, k, n) across the cache blocks: k past gemm.KC, n past a panel (gemm.PANEL_BYTES) and
# a column block into the next, rows a remainder of ROWS
BLOCKED = [(gemm.ROWS + 1, gemm.KC + 3, 2), (2, 2 * gemm.KC, 513 + 19)]


@pytest.mark.parametrize("dtype", ["float64", pytest.param("float32", marks=SLOW), "int64"])
@pytest.mark.parametrize("expr", ["ik,kj->ij", "ik,jk->ij", "ik,kj->ji", pytest.param("ki,jk->ji", marks=SLOW)])
def test_cache_blocks_and_transposed_y(expr, dtype):
    """Y stored transposed (``ik,jk->ij``) and a transposed result (``ik,kj->ji``: the roles
    swap, Y's column index first) are read with their own strides by the packing step."""
    rng = np.random.default_rng(_seed("gemm-blocked", expr, dtype))
    k = sc.compile(expr, "dense", "dense")
    ins, _ = expr.split("->")
    for m, kk, n in SHAPES[:6] + BLOCKED:
        size = {"i": m, "k": kk, "j": n}
        ops = [_values(tuple(size[c] for c in sub), dtype, rng) for sub in ins.split(",")]
        _same(k(*ops), np.einsum(expr, *ops))
        assert _handwritten(k)


def test_unserved_spellings_keep_the_sparsifier():
    """Y transposed where only the unpacked kernel would serve it (complex values; a batch
    index of Y): the sparsifier's kernel."""
    rng = np.random.default_rng(_seed("gemm-unserved"))
    for expr, shapes, dtype in (("ik,jk->ij", [(4, 5), (6, 5)], "complex128"),
                                ("bik,bjk->bij", [(2, 4, 5), (2, 6, 5)], "float64")):
        ops = [_values(s, dtype, rng) for s in shapes]
        k = sc.compile(expr, "dense", "dense")
        _same(k(*ops), np.einsum(expr, *ops))
        assert not _handwritten(k)


def test_threads_give_the_same_bits(kernel):
    rng = np.random.default_rng(_seed("gemm-threads"))
    for m, k, n in ((3001, 77, 45), (601, gemm.KC + 40, 530)):     # the second: two k blocks, two panels
        X, Y = rng.random((m, k)), rng.random((k, n))
        sc.set_num_threads(1)
        one = kernel(X, Y)
        sc.set_num_threads(2)
        two = kernel(X, Y)
        assert np.array_equal(one, two)
        _same(two, X @ Y)


def test_blocks_follow_the_target_vector_width():
    """The column block is two of the target's vector registers (``TargetFacts.vector_bytes``,
    from its features), never the host's: 8 float64 lanes for AVX2, 16 for AVX-512."""
    from sparsecc.formats import Format
    from sparsecc.kernel_abi import TargetFacts
    from sparsecc.parse import parse_einsum
    stmt = parse_einsum("ik,kj->ij", 2)
    formats = (Format.dense(2), Format.dense(2))
    plan = gemm.match(stmt, formats, ("float64",) * 2, None)
    fmts = dict(zip(stmt.operands, formats))
    narrow = gemm.emit(plan, fmts, None, "float64", True, TargetFacts("x86_64", "linux", 32))
    wide = gemm.emit(plan, fmts, None, "float64", True, TargetFacts("x86_64", "linux", 64))
    assert "vector<8xf64>" in narrow and "vector<16xf64>" not in narrow
    assert "vector<16xf64>" in wide and "vector<8xf64>" not in wide
