"""MTTKRP ``M[i,r] = sum[j,k](A[i,j,k] * B[j,r] * C[k,r])`` over a 3-D COO operand runs as a
hand-written parallel loop kernel (sparsecc/dialect/kernels/mttkrp.py): checked against
``numpy.einsum`` on dense copies over dtypes, coordinate widths, both COO layouts (one
array per coordinate, or the columns of one (nnz, 3) array), empty and single-entry
tensors, empty i-slices, ranks r = 1, 16, 33 and 70 (a heap buffer), non-canonical input,
and 1 vs 2 threads (bitwise equal); TTV ``ijk,k->ij`` and TTM ``ijk,kr->ijr`` likewise."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import threads

from conftest import seed as _seed, random_dense, random_values

MODE0 = "ijk,jr,kr->ir"


pytestmark = pytest.mark.usefixtures("restore_threads")     # conftest.py




def _coo3(shape, nnz, dtype, rng, width=np.int32, *, aos=False, rows=None):
    """A canonical 3-D COO array with ``nnz`` distinct entries (``rows``: only these i)."""
    size = int(np.prod(shape))
    nnz = min(nnz, size)
    flat = np.sort(rng.choice(size, size=nnz, replace=False)) if nnz else np.zeros(0, np.int64)
    coords = np.unravel_index(flat, shape)
    if rows is not None and nnz:
        i = np.asarray(rows)[np.asarray(coords[0]) % len(rows)]
        key = np.unique(np.ravel_multi_index((i, coords[1], coords[2]), shape))
        coords = np.unravel_index(key, shape)
    n = len(coords[0])
    if aos:      # the columns of one C-ordered (nnz, 3) array
        stacked = np.ascontiguousarray(np.stack(coords, axis=1).astype(width))
        coords = tuple(stacked[:, d] for d in range(3))
    else:
        coords = tuple(np.array(c, dtype=width) for c in coords)
    T = sp.coo_array((random_values(n, dtype, rng), coords), shape=shape)
    T.coords = coords
    T.has_canonical_format = True
    return T


def _handwritten(k) -> bool:
    return "linalg.generic" not in k.ir() and "@mttkrp_slot" in k.ir()


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if want.dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("width", [np.int32, np.int64])
@pytest.mark.parametrize("aos", [False, True])
@pytest.mark.parametrize("shape,nnz,r", [((12, 9, 7), 150, 16), ((5, 6, 4), 0, 16), ((1, 1, 1), 1, 1),
                                         ((7, 8, 9), 1, 33), ((20, 6, 5), 100, 1), ((9, 10, 11), 300, 33),
                                         ((8, 5, 6), 120, 70), ((0, 3, 4), 0, 3), ((4, 5, 6), 30, 0)])
def test_mttkrp_matches_einsum(dtype, width, aos, shape, nnz, r):
    rng = np.random.default_rng(_seed(dtype, str(width), aos, shape, r))
    T = _coo3(shape, nnz, dtype, rng, width, aos=aos)
    B, C = random_dense((shape[1], r), dtype, rng), random_dense((shape[2], r), dtype, rng)
    k = sc.compile(MODE0)
    M = k(T, B, C)
    assert _handwritten(k)
    _same(M, np.einsum(MODE0, T.toarray(), B, C))


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_integer_values(dtype):
    """Integer values take the same kernel (exact: compared for equality)."""
    rng = np.random.default_rng(_seed(dtype))
    T = _coo3((9, 10, 11), 300, dtype, rng, np.int64)
    B, C = random_dense((10, 21), dtype, rng), random_dense((11, 21), dtype, rng)
    k = sc.compile(MODE0)
    _same(k(T, B, C), np.einsum(MODE0, T.toarray(), B, C))
    assert _handwritten(k)


def test_empty_i_slices():
    """Most rows of M have no entries (they stay zero); the stored rows are far apart."""
    rng = np.random.default_rng(1)
    T = _coo3((200, 30, 20), 3000, "float64", rng, rows=[3, 4, 97, 199])
    assert set(np.unique(T.coords[0])) <= {3, 4, 97, 199}
    B, C = rng.random((30, 16)), rng.random((20, 16))
    k = sc.compile(MODE0)
    _same(k(T, B, C), np.einsum(MODE0, T.toarray(), B, C))
    assert _handwritten(k)


def test_long_row_spans_many_slots():
    """One i-slice holds every entry: a single owner computes it, the other slots skip."""
    rng = np.random.default_rng(2)
    T = _coo3((1, 60, 50), 2500, "float64", rng)
    B, C = rng.random((60, 5)), rng.random((50, 5))
    threads.set_min_parallel_work(0)
    sc.set_num_threads(2)
    _same(sc.einsum(MODE0, T, B, C), np.einsum(MODE0, T.toarray(), B, C))


@pytest.mark.parametrize("spec", ["ijk,kr,jr->ir", "ijk,rj,kr->ir", "ijk,jr,rk->ri", "jr,ijk,kr->ir"])
def test_operand_orders_and_layouts(spec):
    rng = np.random.default_rng(3)
    T = _coo3((10, 12, 8), 200, "float64", rng)
    shapes = {"j": 12, "k": 8}
    ops = []
    for s in spec.split("->")[0].split(","):
        ops.append(T if s == "ijk" else rng.random(tuple(shapes.get(c, 6) for c in s)))
    dense = [o.toarray() if sp.issparse(o) else o for o in ops]
    k = sc.compile(spec)
    _same(k(*ops), np.einsum(spec, *dense))
    assert _handwritten(k)


def test_notation():
    rng = np.random.default_rng(4)
    T = _coo3((10, 12, 8), 200, "float32", rng, np.int64)
    B, C = random_dense((12, 4), "float32", rng), random_dense((8, 4), "float32", rng)
    M = sc.evaluate("M[i,r] = sum[j,k](A[i,j,k] * B[j,r] * C[k,r])", A=T, B=B, C=C)
    _same(M, np.einsum(MODE0, T.toarray(), B, C))


def test_non_canonical_coo():
    """Unsorted coordinates with duplicates: the loader sums them on a copy (the user's array
    is untouched); the kernel reads the canonical copy."""
    rng = np.random.default_rng(5)
    shape = (15, 10, 12)
    n = 400
    coords = tuple(rng.integers(0, s, n) for s in shape)
    T = sp.coo_array((rng.random(n), coords), shape=shape)
    assert not T.has_canonical_format
    c0, d0 = [c.copy() for c in T.coords], T.data.copy()
    B, C = rng.random((10, 16)), rng.random((12, 16))
    k = sc.compile(MODE0)
    M = k(T, B, C)
    _same(M, np.einsum(MODE0, T.toarray(), B, C))
    for c, c_ in zip(T.coords, c0):
        np.testing.assert_array_equal(c, c_)
    np.testing.assert_array_equal(T.data, d0)


def test_threads_bitwise_equal():
    rng = np.random.default_rng(6)
    T = _coo3((150, 150, 150), 60_000, "float64", rng)
    B, C = rng.random((150, 16)), rng.random((150, 16))
    threads.set_min_parallel_work(0)
    sc.set_num_threads(1)
    one = sc.einsum(MODE0, T, B, C)
    sc.set_num_threads(2)
    two = sc.einsum(MODE0, T, B, C)
    assert one.tobytes() == two.tobytes()
    _same(two, np.einsum(MODE0, T.toarray(), B, C))


def test_serial_option_same_result():
    rng = np.random.default_rng(7)
    T = _coo3((30, 20, 25), 2000, "float64", rng)
    B, C = rng.random((20, 16)), rng.random((25, 16))
    k = sc.compile(MODE0, options=sc.Options(parallel="none"))
    M = k(T, B, C)
    assert _handwritten(k) and "scf.parallel" not in k.ir()
    assert M.tobytes() == sc.einsum(MODE0, T, B, C).tobytes()


@pytest.mark.parametrize("case", ["complex", "mixed", "mode1", "csf", "three_d_out"])
def test_other_statements_keep_the_sparsifier(case):
    rng = np.random.default_rng(8)
    dtype = "complex128" if case == "complex" else "float64"
    T = _coo3((6, 7, 8), 60, dtype, rng)
    B, C = random_dense((7, 3), dtype, rng), random_dense((8, 3), dtype, rng)
    spec, formats = MODE0, None
    if case == "mixed":
        B = B.astype(np.float32)
    elif case == "mode1":
        spec, B = "ijk,ir,kr->jr", random_dense((6, 3), dtype, rng)
    elif case == "csf":
        formats = ("csf", "dense", "dense")
    elif case == "three_d_out":
        spec = "ijk,jr,kr->irk"
    args = (spec,) if formats is None else (spec, *formats)
    k = sc.compile(*args)
    ops = (T, B, C)
    _same(k(*ops), np.einsum(spec, *[o.toarray() if sp.issparse(o) else o for o in ops]))
    assert not _handwritten(k)


def test_large_call_in_a_subprocess():
    """A crash (signal) fails the test instead of killing the test run."""
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        rng = np.random.default_rng(0)
        d = 120
        flat = np.sort(rng.choice(d ** 3, size=200_000, replace=False))
        T = sp.coo_array((rng.random(flat.size), np.unravel_index(flat, (d, d, d))), shape=(d, d, d))
        B, C = rng.random((d, 16)), rng.random((d, 16))
        M = sc.einsum("ijk,jr,kr->ir", T, B, C)
        unfold = sp.csr_array((T.data, (T.coords[0], T.coords[1] * d + T.coords[2])), shape=(d, d * d))
        want = unfold @ (B[:, None, :] * C[None, :, :]).reshape(d * d, 16)
        assert np.allclose(M, want, rtol=1e-10, atol=1e-10)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


# ------------------------------------------------------------------------------ TTV
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
@pytest.mark.parametrize("width", [np.int32, np.int64])
@pytest.mark.parametrize("aos", [False, True])
@pytest.mark.parametrize("shape,nnz", [((12, 9, 7), 150), ((5, 6, 4), 0), ((1, 1, 1), 1), ((30, 1, 40), 500)])
def test_ttv_matches_einsum(dtype, width, aos, shape, nnz):
    """TTV ``ijk,k->ij`` walks the same (i, j) segments: one owner per i-slice."""
    rng = np.random.default_rng(_seed("ttv", dtype, str(width), aos, shape))
    T = _coo3(shape, nnz, dtype, rng, width, aos=aos)
    v = random_dense((shape[2],), dtype, rng)
    k = sc.compile("ijk,k->ij", out_format="dense")
    _same(k(T, v), np.einsum("ijk,k->ij", T.toarray(), v))
    assert _handwritten(k)


@pytest.mark.parametrize("spec", ["k,ijk->ij", "ijk,k->ji"])
def test_ttv_orders(spec):
    rng = np.random.default_rng(9)
    T = _coo3((10, 12, 8), 300, "float64", rng)
    v = rng.random(8)
    ops = (v, T) if spec.startswith("k,") else (T, v)
    k = sc.compile(spec, out_format="dense")
    _same(k(*ops), np.einsum(spec, *[o.toarray() if sp.issparse(o) else o for o in ops]))
    assert _handwritten(k)


def test_ttv_threads_bitwise_equal_and_other_modes_generic():
    rng = np.random.default_rng(10)
    T = _coo3((150, 150, 150), 60_000, "float64", rng)
    v = rng.random(150)
    threads.set_min_parallel_work(0)
    sc.set_num_threads(1)
    one = sc.einsum("ijk,k->ij", T, v, out_format="dense")
    sc.set_num_threads(2)
    two = sc.einsum("ijk,k->ij", T, v, out_format="dense")
    assert one.tobytes() == two.tobytes()
    _same(two, np.einsum("ijk,k->ij", T.toarray(), v))
    k = sc.compile("ijk,j->ik", out_format="dense")     # over the middle level: the sparsifier's
    _same(k(T, v), np.einsum("ijk,j->ik", T.toarray(), v))
    assert not _handwritten(k)
    k = sc.compile("ijk,k->ij")          # a sparse result: the sparsifier's
    got = k(T, v)
    assert sp.issparse(got) and not _handwritten(k)
    _same(got.toarray(), np.einsum("ijk,k->ij", T.toarray(), v))


# ------------------------------------------------------------------------------ TTM
@pytest.mark.parametrize("dtype,aos", [("float64", False), pytest.param("float64", True, marks=pytest.mark.slow),
                                       pytest.param("float32", False, marks=pytest.mark.slow),
                                       pytest.param("int64", False, marks=pytest.mark.slow), ("int32", True)])
def test_ttm_matches_einsum(dtype, aos):
    """TTM ``ijk,kr->ijr`` (the Tucker chain's first step): the same (i, j) segments, each
    one's sums added to ``M[i,j,:]`` (r in vector blocks, a quarter block, single columns)."""
    rng = np.random.default_rng(_seed("ttm", dtype, aos))
    k = sc.compile("ijk,kr->ijr", out_format="dense")
    for shape, nnz, r in (((12, 9, 7), 150, 16), ((5, 6, 4), 0, 3), ((1, 1, 1), 1, 1), ((30, 1, 40), 500, 37)):
        T = _coo3(shape, nnz, dtype, rng, aos=aos)
        C = random_dense((shape[2], r), dtype, rng)
        _same(k(T, C), np.einsum("ijk,kr->ijr", T.toarray(), C))
        assert _handwritten(k)


def test_ttm_threads_bitwise_equal_and_other_modes_generic():
    rng = np.random.default_rng(11)
    T = _coo3((60, 60, 60), 20_000, "float64", rng)
    C = rng.random((60, 16))
    threads.set_min_parallel_work(0)
    sc.set_num_threads(1)
    one = sc.einsum("ijk,kr->ijr", T, C)
    sc.set_num_threads(2)
    two = sc.einsum("ijk,kr->ijr", T, C)
    assert one.tobytes() == two.tobytes()
    _same(two, np.einsum("ijk,kr->ijr", T.toarray(), C))
    for spec in ("ijk,jr->ikr", "ijk,kr->irj"):       # the middle level summed, r not last: the sparsifier's
        k = sc.compile(spec, out_format="dense")
        D = C if spec.startswith("ijk,k") else rng.random((60, 16))
        _same(k(T, D), np.einsum(spec, T.toarray(), D))
        assert not _handwritten(k)


def _ttm_case(shape, rows, js, nnz, rng, dtype="float64"):
    """A canonical COO with entries only in i-slices ``rows`` and j-rows ``js`` (empty slices
    and empty (i, j) rows elsewhere)."""
    I, J, K = shape
    cells = np.array([(i, j, k) for i in rows for j in js for k in range(K)])
    pick = np.sort(rng.choice(len(cells), size=min(nnz, len(cells)), replace=False))
    c = cells[pick].T if len(pick) else np.zeros((3, 0), np.int64)
    coords = tuple(np.ascontiguousarray(x, dtype=np.int32) for x in c)
    T = sp.coo_array((random_values(len(pick), dtype, rng), coords), shape=shape)
    T.coords, T.has_canonical_format = coords, True
    return T


#: (shape, i-slices with entries, j-rows with entries, entries): empty slices at the start,
#: the middle and the end, empty (i, j) rows inside a slice, no entries, a single entry
TTM_FILL = [((9, 7, 5), [3, 4, 8], [1, 2, 6], 40), ((9, 7, 5), [0, 5], [0, 6], 25),
            ((9, 7, 5), [2], [3], 1), ((6, 4, 3), [], [], 0), ((1, 1, 1), [0], [0], 1),
            ((40, 30, 8), list(range(5, 35, 3)), list(range(2, 28, 2)), 1200)]


@pytest.fixture(scope="module")
def ttm():
    return sc.compile("ijk,kr->ijr", out_format="dense")


@pytest.mark.parametrize("case", range(len(TTM_FILL)))
def test_ttm_writes_empty_rows(ttm, case):
    """The TTM writes every entry of its result (the call hands it np.empty): empty i-slices
    at the start, middle and end, empty (i, j) rows, no entries, one entry; with freed NaNs
    in the memory it gets, and 1 vs 2 threads bitwise equal."""
    shape, rows, js, nnz = TTM_FILL[case]
    rng = np.random.default_rng(_seed("ttm-fill", case))
    T = _ttm_case(shape, rows, js, nnz, rng)
    want_pattern = T.toarray()
    threads.set_min_parallel_work(0)
    got = {}
    for r in (16, 37, 1, 0):
        C = rng.random((shape[2], r))
        want = np.einsum("ijk,kr->ijr", want_pattern, C)
        for n in (1, 2):
            sc.set_num_threads(n)
            junk = np.full(want.shape, np.nan)
            del junk
            M = ttm(T, C)
            assert not np.isnan(M).any()
            _same(M, want)
            got[n] = M.tobytes()
        assert got[1] == got[2]
        assert _handwritten(ttm)


def test_ttm_is_marked_uninitialised_output():
    """The route marks the TTM as writing every entry (its output is np.empty), the MTTKRP and
    TTV not (their outputs stay zeroed)."""
    from sparsecc.formats import Format
    from sparsecc.kernel_abi import TargetFacts
    from sparsecc.parse import parse_einsum
    from sparsecc.runtime import fast_paths
    coo, d2 = Format.coo(3).with_widths(32, 32), Format.dense(2)
    facts = TargetFacts(arch="x86_64", system="linux")
    for spec, fmts, kind, fills in (("ijk,kr->ijr", (coo, d2), "ttm", True),
                                    ("ijk,jr,kr->ir", (coo, d2, d2), "mttkrp", False),
                                    ("ijk,k->ij", (coo, Format.dense(1)), "ttv", False)):
        r = fast_paths.route(parse_einsum(spec, len(fmts)), fmts, ("float64",) * len(fmts), None, facts=facts)
        assert (r.kind, r.fills_output) == (kind, fills)
