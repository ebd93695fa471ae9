"""sparsecc over Dask arrays (sparsecc/dask, docs/distributed.md) on a two-process
LocalCluster whose workers use their own kernel cache (as on machines sharing no
filesystem), and pydata/sparse arrays as in-memory operands.  Oracles: numpy.einsum on
dense copies, SciPy, written-out loops."""

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import scipy.sparse as sp

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
sparse = pytest.importorskip("sparse")

import sparsecc as sc  # noqa: E402
from sparsecc.runtime.pydata import to_scipy  # noqa: E402

from conftest import random_dense, random_sparse  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def client():
    worker_cache = tempfile.mkdtemp(prefix="sparsecc-dask-workers-")
    assert worker_cache != os.environ.get("SPARSECC_CACHE_DIR")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None,
                                       env={"SPARSECC_CACHE_DIR": worker_cache, "PYTHONPATH": ROOT,
                                            "SPARSECC_NUM_THREADS": "1"})
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def dense(x):
    if sp.issparse(x):
        return x.toarray()
    if hasattr(x, "todense"):
        return np.asarray(x.todense())
    return np.asarray(x)


def pydata_coo(a):
    """A pydata COO with the coordinates and values of SciPy array ``a`` (test data only)."""
    c = a.tocoo()
    return sparse.COO(np.vstack(c.coords) if c.nnz else np.zeros((c.ndim, 0), np.int64), c.data, shape=c.shape)


# ------------------------------------------------------------- import isolation
def test_import_sparsecc_imports_no_dask_or_sparse():
    code = ("import sys, sparsecc, sparsecc.ops, sparsecc.runtime.call; "
            "bad = [m for m in ('dask', 'distributed', 'sparse') if m in sys.modules]; assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------- pydata in memory
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("nnz_case", ["random", "empty", "single"])
def test_pydata_coo_any_rank(dtype, nnz_case, rng):
    density = {"random": 0.3, "empty": 0.0, "single": None}[nnz_case]
    shape = (5, 4, 3)
    if density is None:
        T = sp.coo_array((np.array([2], dtype), (np.array([1]), np.array([2]), np.array([0]))), shape=shape)
    else:
        T = random_sparse(shape, density, dtype, rng)
    P = pydata_coo(T)
    U, V = random_dense((4, 2), dtype, rng), random_dense((3, 2), dtype, rng)
    got = sc.einsum("ijk,jr,kr->ir", P, U, V)
    want = np.einsum("ijk,jr,kr->ir", dense(T), U, V)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got.dtype == want.dtype
    M = pydata_coo(random_sparse((6, 5), 0.4, dtype, rng))
    x = random_dense(5, dtype, rng)
    np.testing.assert_allclose(sc.evaluate("y[i] = A[i,j] * x[j]", A=M, x=x), dense(M) @ x, rtol=1e-5)


@pytest.mark.parametrize("axis,fmt", [(0, "csr"), (1, "csc")])
def test_pydata_gcxs_as_csr_csc_without_copies(axis, fmt, rng):
    A = random_sparse((7, 6), 0.4, np.float64, rng)
    G = sparse.GCXS(pydata_coo(A), compressed_axes=(axis,))
    S = to_scipy(G, "A")
    assert S.format == fmt
    assert np.shares_memory(S.data, G.data) and np.shares_memory(S.indices, G.indices)
    x = rng.random(6)
    np.testing.assert_allclose(sc.einsum("ij,j->i", G, x), dense(A) @ x)
    k = sc.compile("ij,j->i")
    k(G, x)
    assert k.last_formats()[0].order == ((0, 1) if axis == 0 else (1, 0))


def test_pydata_coo_without_copies_and_unmodified(rng):
    P = pydata_coo(random_sparse((4, 5, 6), 0.3, np.float64, rng))
    S = to_scipy(P, "T")
    assert all(np.shares_memory(c, P.coords) for c in S.coords) and np.shares_memory(S.data, P.data)
    before = (P.coords.copy(), P.data.copy())
    sc.einsum("ijk->i", P)
    np.testing.assert_array_equal(P.coords, before[0])
    np.testing.assert_array_equal(P.data, before[1])


def test_pydata_nonzero_fill_value_is_refused():
    P = sparse.COO(np.array([[0], [1]]), np.array([1.0]), shape=(2, 2), fill_value=1.0)
    with pytest.raises(sc.OperandError, match="fill_value"):
        sc.einsum("ij->i", P)


# ------------------------------------------------------------- Dask arrays
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_spmv_summed_index_split_scipy_chunks(client, dtype, rng):
    A = random_sparse((60, 45), 0.2, dtype, rng, fmt="csr")
    x = random_dense(45, dtype, rng)
    dA = da.from_array(A, chunks=(20, 10), asarray=False)      # j in 5 chunks: partials combined
    y = sc.einsum("ij,j->i", dA, x)
    assert isinstance(y, da.Array) and y.chunks == ((20, 20, 20),)
    got = y.compute()
    assert got.dtype == dtype
    np.testing.assert_allclose(got, dense(A) @ x, rtol=1e-5)


def test_spmm_dense_dask_operand_and_index_notation(client, rng):
    A = random_sparse((30, 40), 0.2, np.float64, rng, fmt="csr")
    B = rng.random((40, 6))
    dB = da.from_array(B, chunks=(9, 3))                        # j split, output k split
    got = sc.evaluate("C[i,k] = A[i,j] * B[j,k]", A=A, B=dB).compute()   # A in memory, B lazy
    np.testing.assert_allclose(got, dense(A) @ B)


def test_spgemm_sparse_chunks_sparse_partials(client, rng):
    A = random_sparse((25, 30), 0.15, np.float64, rng, fmt="csr")
    B = random_sparse((30, 20), 0.15, np.float64, rng, fmt="csr")
    dA = da.from_array(A, chunks=(10, 12), asarray=False)
    dB = da.from_array(B, chunks=(12, 8), asarray=False)
    C = sc.einsum("ik,kj->ij", dA, dB, out_format="csr")
    got = C.compute()
    assert sp.issparse(got)
    np.testing.assert_allclose(got.toarray(), (A @ B).toarray())


def test_min_plus_semiring_combines_with_min(client, rng):
    n = 24
    W = random_sparse((n, n), 0.2, np.float64, rng, fmt="csr")
    d = rng.random(n)
    dW = da.from_array(W, chunks=(5, n), asarray=False)        # the reduced j split in 5
    got = sc.einsum("ji,j->i", dW, d, semiring="min_plus").compute()
    Wd, mask = dense(W), dense(W) != 0
    want = np.full(n, np.inf)
    for j in range(n):                                          # written out: min over stored W[j,i]
        for i in range(n):
            if mask[j, i]:
                want[i] = min(want[i], Wd[j, i] + d[j])
    np.testing.assert_array_equal(got, want)


def test_mttkrp_chunked_3d_pydata_coo(client, rng):
    T = random_sparse((14, 12, 10), 0.1, np.float64, rng)
    U, V = rng.random((12, 4)), rng.random((10, 4))
    dT = da.from_array(pydata_coo(T), chunks=(7, 5, 4))
    dU = da.from_array(U, chunks=(5, 2))
    got = sc.einsum("ijk,jr,kr->ir", dT, dU, V).compute()
    np.testing.assert_allclose(got, np.einsum("ijk,jr,kr->ir", dense(T), U, V))


def test_sparse_3d_result_chunks_are_pydata(client, rng):
    T = random_sparse((8, 6, 5), 0.2, np.float64, rng)
    dT = da.from_array(pydata_coo(T), chunks=(4, 3, 5))
    s = rng.random(5) + 1
    R = sc.einsum("ijk,k->ijk", dT, s)
    got = R.compute()
    assert type(got).__module__.startswith("sparse")
    np.testing.assert_allclose(dense(got), dense(T) * s)


def test_scalar_result_and_compiled_kernel(client, rng):
    A = random_sparse((20, 20), 0.3, np.float64, rng, fmt="csr")
    dA = da.from_array(A, chunks=(7, 6), asarray=False)
    s = sc.einsum("ij->", dA).compute()
    np.testing.assert_allclose(s, dense(A).sum())
    k = sc.compile("ij,j->i", "csr", "dense")
    x = rng.random(20)
    np.testing.assert_allclose(k(dA, da.from_array(x, chunks=5)).compute(), dense(A) @ x)


def test_mismatched_chunks_of_a_shared_index_are_rechunked(client, rng):
    A = random_sparse((16, 18), 0.3, np.float64, rng, fmt="csr")
    x = rng.random(18)
    dA = da.from_array(A, chunks=(8, 6), asarray=False)
    dx = da.from_array(x, chunks=7)                             # j: 6,6,6 vs 7,7,4
    np.testing.assert_allclose(sc.einsum("ij,j->i", dA, dx).compute(), dense(A) @ x)


def test_inner_reduction_is_not_split(client, rng):
    A = rng.random((6, 8))
    dA = da.from_array(A, chunks=(3, 3))
    got = sc.evaluate("y[i] = sqrt(sum[j](A[i,j]))", A=dA).compute()
    np.testing.assert_allclose(got, np.sqrt(A.sum(1)))


class _Odd:
    """An array-like chunk type sparsecc does not know."""

    def __init__(self, a):
        self.a, self.shape, self.dtype, self.ndim = a, a.shape, a.dtype, a.ndim

    def __getitem__(self, k):
        return _Odd(self.a[k])


def test_unknown_chunk_type_is_refused_before_any_task():
    x = da.from_array(_Odd(np.ones(6)), chunks=3, asarray=False, meta=_Odd(np.ones(0)))
    with pytest.raises(sc.OperandError, match="_Odd chunks"):
        sc.einsum("i,i->i", x, np.ones(6))


def test_worker_compiles_once_per_kernel_not_per_task(client, rng):
    A = random_sparse((64, 64), 0.1, np.float32, rng, fmt="csc")
    x = rng.random(64).astype(np.float32)
    before = client.run(_counters)
    dA = da.from_array(A, chunks=(8, 8), asarray=False)         # 64 block tasks, 48 combine tasks
    np.testing.assert_allclose(sc.einsum("ij,j->i", dA, x).compute(), dense(A) @ x, rtol=1e-5)
    after = client.run(_counters)
    loads = {w: (after[w][1] - before[w][1]) + (after[w][2] - before[w][2]) for w in after}
    hits = sum(after[w][0] - before[w][0] for w in after)
    assert all(n <= 2 for n in loads.values()), loads    # the block kernel and the combine kernel
    assert hits >= 64 + 16 - 4


def _counters():
    import sparsecc
    s = sparsecc.cache_info()
    return s.hits, s.disk_hits, s.misses


def test_size_one_broadcast_of_a_dask_operand(client, rng):
    A = random_sparse((8, 6), 0.4, np.float64, rng, fmt="csr")
    b = rng.random((1, 6))
    got = sc.einsum("ij,ij->ij", da.from_array(A, chunks=(4, 3), asarray=False), da.from_array(b, chunks=(1, 3)))
    np.testing.assert_allclose(dense(got.compute()), dense(A) * b)


@pytest.mark.parametrize("call", [lambda d: sc.ops.getitem(d, (slice(0, 2),)), lambda d: sc.ops.cat([d, d], 0),
                                  lambda d: sc.ops.reshape(d, (3, 4)), lambda d: sc.ops.argmax(d, 0)],
                         ids=["getitem", "cat", "reshape", "argmax"])
def test_op_library_refuses_ops_needing_global_coordinates(call):
    dA = da.from_array(np.ones((4, 3)), chunks=2)
    with pytest.raises(sc.OperandError, match=r"sc\.ops\.\w+ does not take Dask arrays.*[Cc]ompute"):
        call(dA)


def test_int_lor_land_and_non_neutral_identity(client, rng):
    A = sp.csr_array(rng.integers(1, 5, (10, 9)) * (rng.random((10, 9)) < 0.3))
    x = rng.integers(0, 5, 9)
    dA = da.from_array(A, chunks=(5, 2), asarray=False)
    got = sc.einsum("ij,j->i", dA, x).compute()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, A @ x)
    # plus from identity 3: splitting j would add 3 once per partial, so j stays whole
    plus3 = sc.Semiring("plus", "times", identity=3)
    np.testing.assert_array_equal(sc.einsum("ij,j->i", dA, x, semiring=plus3).compute(),
                                  sc.einsum("ij,j->i", A, x, semiring=plus3))
    B = sp.csr_array(rng.random((10, 10)) < 0.2)
    v = rng.random(10) < 0.5
    got = sc.einsum("ij,j->i", da.from_array(B, chunks=(5, 3), asarray=False), v, semiring="lor_land").compute()
    np.testing.assert_array_equal(got, (B.toarray() & v[None, :]).any(1))


def test_3d_sparse_partials_and_empty_operands(client, rng):
    T = random_sparse((5, 4, 6), 0.3, np.float64, rng)
    M = random_sparse((6, 7), 0.3, np.float64, rng, fmt="csr")
    R = sc.einsum("ijl,lk->ijk", da.from_array(pydata_coo(T), chunks=(3, 4, 2)),
                  da.from_array(M, chunks=(2, 7), asarray=False)).compute()
    np.testing.assert_allclose(dense(R), np.einsum("ijl,lk->ijk", dense(T), dense(M)))
    E = da.from_array(sp.csr_array((4, 6)), chunks=(2, 3), asarray=False)
    np.testing.assert_array_equal(sc.einsum("ij,j->i", E, np.ones(6)).compute(), np.zeros(4))
    Z = sc.einsum("ij,jk->ik", E, da.from_array(sp.csr_array((6, 3)), chunks=(3, 3), asarray=False)).compute()
    assert sp.issparse(Z) and Z.nnz == 0 and Z.shape == (4, 3)


def test_compiled_libraries_travel_with_the_graph(client, rng):
    """Workers with the client's CPU load the libraries the client compiled (they arrive
    with the graph, into the workers' own cache): no compile on any worker."""
    A = random_sparse((30, 30), 0.2, np.float32, rng, fmt="csr")
    x = rng.random(30).astype(np.float32)
    before = client.run(_counters)
    got = sc.einsum("ij,j->i", da.from_array(A, chunks=(10, 10), asarray=False), x, semiring="max_times")
    got = got.compute()
    after = client.run(_counters)
    Ad = dense(A)
    want = np.where(Ad != 0, Ad * x[None, :], -np.inf).max(1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert all(after[w][2] == before[w][2] for w in after), (before, after)     # no worker compiled
    assert sum(after[w][1] - before[w][1] for w in after) >= 2                   # loaded from disk


def test_unknown_chunk_sizes_are_refused_before_any_task():
    x = da.from_array(np.arange(10.0), chunks=5)
    y = x[x > 3]                                            # chunk sizes unknown until computed
    with pytest.raises(sc.OperandError, match="unknown chunk sizes"):
        sc.einsum("i,i->", y, y)
    with pytest.raises(sc.OperandError, match="unknown chunk sizes"):
        sc.compile("i,i->")(y, y)
    for op in (lambda: sc.ops.sum(y), lambda: sc.ops.amax(y, 0), lambda: sc.ops.mul(y, 2.0)):
        with pytest.raises(sc.OperandError, match="input has unknown chunk sizes"):
            op()


def test_op_library_and_broadcasting_take_pydata_operands(rng):
    A = random_sparse((6, 5), 0.4, np.float64, rng, fmt="csr")
    P, G = pydata_coo(A), sparse.GCXS(pydata_coo(A), compressed_axes=(0,))
    np.testing.assert_allclose(sc.ops.sum(P, 0), dense(A).sum(0))
    np.testing.assert_allclose(dense(sc.ops.add(P, G)), 2 * dense(A))
    b = rng.random((1, 5))
    np.testing.assert_allclose(dense(sc.einsum("ij,ij->ij", P, b)), dense(A) * b)


def test_min_plus_spgemm_sparse_partials_and_prune(client, rng):
    A = random_sparse((12, 15), 0.25, np.float64, rng, fmt="csr")
    B = random_sparse((15, 10), 0.25, np.float64, rng, fmt="csr")
    dA = da.from_array(A, chunks=(6, 4), asarray=False)
    dB = da.from_array(B, chunks=(4, 5), asarray=False)
    got = sc.einsum("ik,kj->ij", dA, dB, semiring="min_plus", out_format="csr").compute()
    Ad, Bd = dense(A), dense(B)
    terms = np.where((Ad != 0)[:, :, None] & (Bd != 0)[None, :, :], Ad[:, :, None] + Bd[None, :, :], np.inf)
    want = terms.min(1)
    stored = np.isfinite(want)
    assert sp.issparse(got)
    np.testing.assert_array_equal(dense(got)[stored], want[stored])
    assert set(zip(*got.nonzero())) == set(zip(*np.nonzero(stored)))
    # entries that cancel across partials are dropped with prune=True (the combine prunes too)
    C = sp.csr_array(np.array([[1.0, 1.0], [0.0, 1.0]]))       # C @ D has a 0 at (0, 0) from 1 - 1
    D = sp.csr_array(np.array([[1.0, 0.0], [-1.0, 1.0]]))
    dC = da.from_array(C, chunks=(2, 1), asarray=False)
    dD = da.from_array(D, chunks=(1, 2), asarray=False)
    got = sc.einsum("ik,kj->ij", dC, dD, prune=True).compute()
    np.testing.assert_array_equal(dense(got), dense(C) @ dense(D))
    assert got.nnz == np.count_nonzero(dense(C) @ dense(D))


def test_scalar_and_list_operands_beside_dask_ones(client, rng):
    x = rng.random(9)
    dx = da.from_array(x, chunks=4)
    np.testing.assert_allclose(sc.evaluate("y[i] = a * x[i] + b[i]", a=2.5, x=dx, b=list(range(9))).compute(),
                               2.5 * x + np.arange(9))
    np.testing.assert_allclose(sc.evaluate("y[i] = a * x[i]", a=np.float64(3.0), x=dx).compute(), 3 * x)


# ------------------------------------------------------------- the op library on Dask arrays
def _stored_oracle(op, Ad, mask, axis):
    """Reductions over stored entries only, written out on the dense copy and its mask."""
    fill = {"sum": 0, "prod": 1, "amax": -np.inf, "amin": np.inf}
    if op == "mean":
        return np.where(mask, Ad, 0).sum(axis) / mask.sum(axis)
    f = {"sum": np.sum, "prod": np.prod, "amax": np.max, "amin": np.min}[op]
    return f(np.where(mask, Ad, fill[op]), axis=axis)


def _chunked(kind, A, chunks):
    if kind == "scipy":
        return da.from_array(A, chunks=chunks, asarray=False)
    return da.from_array(A.toarray(), chunks=chunks)


@pytest.mark.parametrize("kind,case", [("scipy", "random"),
                                       pytest.param("numpy", "random", marks=pytest.mark.slow),
                                       ("scipy", "empty"), ("scipy", "single")])
@pytest.mark.parametrize("implicit_zeros", [True, False])
def test_op_reductions_split_along_the_reduced_index(client, kind, case, implicit_zeros, rng):
    if case == "random":
        A = random_sparse((9, 14), 0.3, np.float64, rng, fmt="csr")
    elif case == "empty":
        A = sp.csr_array((9, 14))
    else:
        A = sp.csr_array((np.array([-2.5]), (np.array([4]), np.array([11]))), shape=(9, 14))
    Ad, mask = dense(A), dense(A) != 0
    if kind == "numpy":
        mask = np.ones_like(mask)            # a dense operand stores every entry
    dA = _chunked(kind, A, (5, 4))           # the reduced axis 1 in 4 chunks: partials combined
    with np.errstate(invalid="ignore", divide="ignore"):
        for op in ("sum", "amax", "amin", "prod", "mean"):
            for axis in ((1, None) if case == "random" else (1,)):
                got = getattr(sc.ops, op)(dA, axis, implicit_zeros=implicit_zeros)
                assert isinstance(got, da.Array), op
                if implicit_zeros:
                    want = {"sum": np.sum, "amax": np.max, "amin": np.min, "prod": np.prod,
                            "mean": np.mean}[op](Ad, axis=axis)
                else:
                    want = _stored_oracle(op, Ad, mask, axis)
                np.testing.assert_allclose(got.compute(), want, rtol=1e-12, err_msg=f"{op} axis={axis}")


def test_op_reductions_integers_and_3d_pydata(client, rng):
    A = sp.csr_array(rng.integers(-3, 4, (8, 10)) * (rng.random((8, 10)) < 0.4))
    dA = da.from_array(A, chunks=(3, 3), asarray=False)
    Ad = A.toarray()
    for op, f in (("sum", np.sum), ("amax", np.max), ("amin", np.min), ("prod", np.prod)):
        got = getattr(sc.ops, op)(dA, 0).compute()
        assert got.dtype == f(Ad, axis=0).dtype, op
        np.testing.assert_array_equal(got, f(Ad, axis=0))
    T = random_sparse((6, 5, 8), 0.3, np.float64, rng)
    dT = da.from_array(pydata_coo(T), chunks=(3, 5, 3))
    np.testing.assert_allclose(sc.ops.amax(dT, (0, 2)).compute(), dense(T).max((0, 2)))
    np.testing.assert_allclose(dense(sc.ops.mean(dT, 2).compute()), dense(T).mean(2))   # CSR, as in memory
    for op in ("prod", "mean"):     # a chain of kernels over Dask arrays returns what the op returns in memory
        assert type(getattr(sc.ops, op)(dT, 2).compute()) is type(getattr(sc.ops, op)(T, 2)), op
    # stored entries only, pydata chunks (3-d: the pydata kernels test_mttkrp's workers compiled)
    Td, mask = dense(T), dense(T) != 0
    with np.errstate(invalid="ignore"):
        for op in ("amin", "prod", "mean"):
            got = getattr(sc.ops, op)(dT, 2, implicit_zeros=False).compute()
            want, some = _stored_oracle(op, Td, mask, 2), mask.any(2)
            if sp.issparse(got):        # as in memory: a sparse result stores the rows that store something
                assert set(zip(*got.nonzero())) <= set(zip(*np.nonzero(some))), op
                got = np.where(some, dense(got), want)
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=op)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_op_softmax_along_a_split_dimension_is_rechunked(client, log, dim, rng):
    A = random_sparse((7, 9), 0.35, np.float64, rng, fmt="csr")
    dA = da.from_array(A, chunks=(3, 4), asarray=False)      # dim split either way
    got = (sc.ops.log_softmax if log else sc.ops.softmax)(dA, dim)
    assert got.chunks == dA.chunks                            # the other dimension stays split
    got = got.compute()
    Ad, mask = dense(A), dense(A) != 0
    want = np.zeros_like(Ad)
    for k in range(Ad.shape[1 - dim]):                        # written out over stored entries
        row = (slice(None), k) if dim == 0 else (k, slice(None))
        v, m = Ad[row], mask[row]
        if m.any():
            e = np.exp(v[m] - v[m].max())
            out = np.zeros_like(v)
            out[m] = np.log(e / e.sum()) if log else e / e.sum()
            want[row] = out
    assert sp.issparse(got)
    assert set(zip(*got.nonzero())) <= set(zip(*np.nonzero(mask)))
    np.testing.assert_allclose(dense(got), want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.float32, marks=pytest.mark.slow)])
def test_op_linalg_over_dask_arrays(client, dtype, rng):
    A = random_sparse((10, 12), 0.3, dtype, rng, fmt="csr")
    B = random_dense((12, 5), dtype, rng)
    C = random_dense((10, 5), dtype, rng)
    x = random_dense(12, dtype, rng)
    Ad = dense(A)
    dA = da.from_array(A, chunks=(5, 4), asarray=False)      # k split in 3: partials combined by +
    dB = da.from_array(B, chunks=(4, 3))
    tol = dict(rtol=1e-5 if dtype == np.float32 else 1e-12)
    got = sc.ops.mm(dA, dB)
    assert isinstance(got, da.Array)
    np.testing.assert_allclose(got.compute(), Ad @ B, **tol)
    np.testing.assert_allclose(sc.ops.mv(dA, x).compute(), Ad @ x, **tol)
    np.testing.assert_allclose(sc.ops.addmm(C, dA, dB, beta=0.5, alpha=2).compute(), 0.5 * C + 2 * (Ad @ B), **tol)
    np.testing.assert_allclose(sc.ops.addmm(C, dA, B, beta=0, alpha=3).compute(), 3 * (Ad @ B), **tol)
    S = sp.csr_array(random_sparse((10, 5), 0.3, dtype, rng, fmt="csr"))
    dS = da.from_array(S, chunks=(5, 5), asarray=False)
    M = random_dense((10, 12), dtype, rng)
    got = sc.ops.sampled_addmm(dS, da.from_array(M, chunks=(5, 4)), dB, beta=0.5, alpha=2).compute()
    mask = dense(S) != 0
    assert sp.issparse(got) and set(zip(*got.nonzero())) <= set(zip(*np.nonzero(mask)))
    np.testing.assert_allclose(dense(got), np.where(mask, 0.5 * dense(S) + 2 * (M @ B), 0), **tol)
    P = random_sparse((12, 6), 0.3, dtype, rng, fmt="csr")
    got = sc.ops.mm(dA, da.from_array(P, chunks=(4, 3), asarray=False)).compute()
    assert sp.issparse(got)
    np.testing.assert_allclose(dense(got), Ad @ dense(P), **tol)


def test_op_elementwise_and_permutes_over_dask_arrays(client, rng):
    A = random_sparse((8, 6), 0.4, np.float64, rng, fmt="csr")
    B = random_sparse((8, 6), 0.4, np.float64, rng, fmt="csr")
    Ad, Bd = dense(A), dense(B)
    dA = da.from_array(A, chunks=(3, 4), asarray=False)
    dB = da.from_array(B, chunks=(4, 2), asarray=False)      # cut differently: rechunked to dA's
    D = rng.random((8, 6)) + 0.5
    cases = [
        (sc.ops.mul(dA, 2.5), 2.5 * Ad), (sc.ops.mul(dA, dB), Ad * Bd), (sc.ops.mul(dA, D), Ad * D),
        (sc.ops.add(dA, dB, alpha=2), Ad + 2 * Bd), (sc.ops.sub(dA, dB), Ad - Bd), (sc.ops.add(dA, 1.5), Ad + 1.5),
        (sc.ops.div(dA, 4), Ad / 4), (sc.ops.div(dA, D), Ad / D),
        (sc.ops.neg(dA), -Ad), (sc.ops.abs(sc.ops.neg(dA)), np.abs(Ad)), (sc.ops.sqrt(dA), np.sqrt(Ad)),
        (sc.ops.sin(dA), np.sin(Ad)), (sc.ops.tanh(dA), np.tanh(Ad)), (sc.ops.log1p(dA), np.log1p(Ad)),
        (sc.ops.expm1(dA), np.expm1(Ad)), (sc.ops.transpose(dA), Ad.T),
    ]
    for k, (got, want) in enumerate(cases):
        assert isinstance(got, da.Array), k
        np.testing.assert_allclose(dense(got.compute()), want, rtol=1e-12, err_msg=str(k))
    assert sc.ops.mul(dA, 2.5).compute().format == "csr"     # the operand's layout, as in memory
    T = random_sparse((4, 5, 6), 0.3, np.float64, rng)
    got = sc.ops.permute(da.from_array(pydata_coo(T), chunks=(2, 5, 3)), (2, 0, 1)).compute()
    np.testing.assert_allclose(dense(got), dense(T).transpose(2, 0, 1))


# ------------------------------------------------------------- autotune=True on Dask arrays
def test_autotune_chooses_formats_on_one_block_then_runs_over_dask(client, rng, monkeypatch):
    from sparsecc.explore import runner, storage
    seen = []
    explore = runner.explore

    def spy(expr, *operands, **kw):             # records what the exploration ran on
        seen.append([(type(o).__name__, tuple(o.shape)) for o in operands])
        return explore(expr, *operands, **kw)
    monkeypatch.setattr(runner, "explore", spy)
    monkeypatch.setattr(storage, "load_choice", lambda key: None)      # explore, whatever is on disk
    monkeypatch.setattr(storage, "_memory", {})
    monkeypatch.setattr(storage, "store_choice", lambda *a, **k: None)
    A = random_sparse((40, 30), 0.2, np.float64, rng, fmt="csr")
    x = rng.random(30)
    dA = da.from_array(A, chunks=(20, 10), asarray=False)
    k = sc.compile("ij,j->i", ["csr", "csc", "coo"], "dense", autotune=True)   # candidates: a short run
    y = k(dA, x)
    assert isinstance(y, da.Array)
    np.testing.assert_allclose(y.compute(), dense(A) @ x)
    assert seen == [[("csr_array", (20, 10)), ("ndarray", (10,))]]           # A's first block, x cut to it
    assert k.tuned_from == "explored" and k.choice[0][0] in ("csr", "csc", "coo") and k.choice[0][1] == "dense"
    assert k.report.best_formats == k.choice[0]
    # later calls, in memory or over Dask cut otherwise, run the chosen kernel
    np.testing.assert_allclose(k(A, x), dense(A) @ x)
    np.testing.assert_allclose(k(da.from_array(A, chunks=(10, 30), asarray=False), x).compute(), dense(A) @ x)
    assert len(seen) == 1


# ------------------------------------------------------------- a worker with another CPU
def _pretend_cpu(name):
    """On a worker: make this process's host CPU read as ``name`` (None: the real one again),
    as on a machine with another CPU; the target (and so the cache key) is resolved anew."""
    import llvmlite.binding as llb
    from sparsecc.runtime import targets
    real = getattr(llb, "_sparsecc_test_real_cpu", None) or llb.get_host_cpu_name
    llb._sparsecc_test_real_cpu = real
    llb.get_host_cpu_name = real if name is None else (lambda: name)
    targets._cpu_target.cache_clear()
    return targets.resolve(sc.Options()).param("cpu")


def _cache_keys():
    import glob
    from sparsecc.runtime import cache
    return sorted(os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(cache.cache_dir(), "*.json")))


def test_a_worker_with_another_cpu_compiles_its_own_kernel(client, rng):
    """Libraries shipped from the client are built for the client's CPU; a worker whose CPU
    differs has another cache key, finds nothing under it and compiles the kernel itself."""
    other, same = sorted(client.scheduler_info()["workers"])
    real = client.run(_pretend_cpu, None, workers=[other])[other]
    try:
        assert client.run(_pretend_cpu, "x86-64-v2", workers=[other])[other] == "x86-64-v2" != real
        A = random_sparse((30, 24), 0.25, np.float64, rng, fmt="csr")
        x = rng.random(24)
        dA = da.from_array(A, chunks=(10, 8), asarray=False)
        # an expression no other test runs: no worker holds its kernel in memory yet
        y = sc.evaluate("y[i] = A[i,j] * x[j] * 2", A=dA, x=x)
        before, keys_before = client.run(_counters), client.run(_cache_keys)
        got = client.compute(y, workers=[other], allow_other_workers=False).result()
        after, keys_after = client.run(_counters), client.run(_cache_keys)
        np.testing.assert_allclose(got, 2 * (dense(A) @ x))
        assert after[other][2] - before[other][2] >= 1, (before, after)       # it compiled
        new = set(keys_after[other]) - set(keys_before[other])
        # the shipped (client-CPU) libraries were installed beside the worker's own, unused
        assert len(new) >= 2 * (after[other][2] - before[other][2]), new
        # the same graph on the worker with the client's CPU: the shipped libraries, no compile
        got = client.compute(y, workers=[same], allow_other_workers=False).result()
        np.testing.assert_allclose(got, 2 * (dense(A) @ x))
        assert client.run(_counters)[same][2] == after[same][2]
    finally:
        assert client.run(_pretend_cpu, None, workers=[other])[other] == real


def test_op_pow_where_and_masks_over_dask_arrays(client, rng):
    A = random_sparse((8, 6), 0.4, np.float64, rng, fmt="csr")
    M = random_sparse((8, 6), 0.4, np.float64, rng, fmt="csr")
    Ad, Md = dense(A), dense(M) != 0
    D = rng.random((8, 6)) + 0.5
    dA = da.from_array(A, chunks=(3, 4), asarray=False)
    dM = da.from_array(M, chunks=(4, 3), asarray=False)
    dD = da.from_array(D, chunks=(4, 2))
    with np.errstate(divide="ignore"):
        cases = [
            (sc.ops.pow(dA, 2), Ad ** 2, Ad != 0), (sc.ops.pow(dA, -1.0), Ad ** -1.0, None),
            (sc.ops.pow(dD, dD), D ** D, None), (sc.ops.where(dM, dA, 0), np.where(Md, Ad, 0), None),
            (sc.ops.where(dM, dD, 2.0), np.where(Md, D, 2.0), None),
            (sc.ops.sparse_mask(dD, dM), np.where(Md, D, 0), Md), (sc.ops.sparse_mask(dA, dM), np.where(Md, Ad, 0), Md),
            (sc.ops.from_dense(dD), D, D != 0),
        ]
    for k, (got, want, pattern) in enumerate(cases):
        assert isinstance(got, da.Array), k
        got = got.compute()
        np.testing.assert_allclose(dense(got), want, rtol=1e-12, err_msg=str(k))
        if pattern is not None:                       # stored entries: exactly the pattern
            assert sp.issparse(got) and set(zip(*got.nonzero())) <= set(zip(*np.nonzero(pattern))), k
    T = random_sparse((4, 5, 6), 0.3, np.float64, rng)
    E = rng.random((4, 5, 6))
    got = sc.ops.sparse_mask(da.from_array(E, chunks=(2, 5, 3)), da.from_array(pydata_coo(T), chunks=(2, 5, 3)))
    got = got.compute()
    assert type(got).__module__.startswith("sparse") and got.nnz == T.nnz
    np.testing.assert_allclose(dense(got), np.where(dense(T) != 0, E, 0))


def _in_memory(kind, d):
    """``d`` (dense, test data) as the in-memory operand kind ``kind``."""
    if kind == "bsr":
        return sp.bsr_array(d, blocksize=(2, 2))
    if kind == "bsr_matrix":
        return sp.bsr_matrix(d, blocksize=(2, 2))
    if kind == "coo_matrix":
        return sp.coo_matrix(d)
    if kind in ("csr_matrix", "csc_matrix"):
        return getattr(sp, kind)(d)
    if kind == "pydata":
        return sparse.COO.from_numpy(d)
    return sp.coo_array(d)


_M, _T = ("ij,j->i", (6, 4)), ("ijk,k->ij", (4, 3, 4))


@pytest.mark.parametrize("split", [False, True], ids=["one-chunk", "split"])
@pytest.mark.parametrize("kind,expr,shape,case", [
    ("bsr", *_M, "random"), ("bsr", *_M, "empty"), ("bsr", *_M, "single"), ("bsr_matrix", *_M, "random"),
    ("coo_matrix", *_M, "random"), ("coo_matrix", *_M, "empty"), ("csr_matrix", *_M, "random"),
    ("csc_matrix", *_M, "single"), ("coo", *_M, "random"), ("coo", *_T, "random"), ("pydata", *_T, "single"),
    ("coo", "j,j->j", (4,), "random")])
def test_in_memory_sparse_operand_beside_a_dask_one(client, kind, expr, shape, case, split, rng):
    """An in-memory operand whose indices the Dask operand leaves in one chunk is one block
    itself (BSR and coo_matrix cannot be sliced: a raw NotImplementedError / TypeError at
    .compute() before); split, its blocks are slices.  Both operand orders; the library
    shipped with the graph is the one the blocks run (no worker compiles)."""
    d = rng.random(shape) * (rng.random(shape) < 0.5)
    if case == "empty":
        d[...] = 0
    elif case == "single":
        d[...] = 0
        d[(1,) * len(shape)] = 2.5
    A = _in_memory(kind, d)
    x = rng.random(shape[-1])
    dx = da.from_array(x, chunks=2 if split else shape[-1])
    a, out = expr.split(",")[0], expr.split("->")[1]
    want = np.einsum(expr, d, x)
    before = client.run(_counters)
    np.testing.assert_allclose(dense(sc.einsum(expr, A, dx).compute()), want)
    np.testing.assert_allclose(dense(sc.einsum(f"{a[-1]},{a}->{out}", dx, A).compute()), want)
    after = client.run(_counters)
    assert all(after[w][2] == before[w][2] for w in after), (before, after)


def test_op_python_scalars_keep_a_float32_dtype_over_dask_arrays(client, rng):
    """As in memory (tests/test_ops_linalg.py): a Python scalar is weak, so add/sub/div/where/
    pow(-1.0) of float32 blocks stay float32, lazily declared and computed (they were float64)."""
    A = random_sparse((8, 6), 0.4, np.float32, rng, fmt="csr")
    M = random_sparse((8, 6), 0.4, np.float32, rng, fmt="csr")
    Ad, Md = dense(A), dense(M) != 0
    dA = da.from_array(A, chunks=(3, 4), asarray=False)
    dM = da.from_array(M, chunks=(4, 3), asarray=False)
    with np.errstate(divide="ignore"):
        cases = [(sc.ops.add(dA, 2.5), Ad + 2.5), (sc.ops.sub(dA, 1.5, alpha=2), Ad - 3.0), (sc.ops.div(dA, 2), Ad / 2),
                 (sc.ops.where(dM, dA, 2.5), np.where(Md, Ad, 2.5)), (sc.ops.pow(dA, -1.0), Ad ** -1.0)]
    for k, (got, want) in enumerate(cases):
        assert want.dtype == np.float32 and got.dtype == np.float32, k
        got = got.compute()
        assert got.dtype == np.float32, k
        np.testing.assert_allclose(dense(got), want, rtol=1e-6, err_msg=str(k))
    with pytest.raises(sc.DTypeError, match="negative"):
        sc.ops.pow(da.from_array(np.arange(6).reshape(2, 3), chunks=2), -1)
