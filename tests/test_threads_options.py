"""Parallel kernels and code-generation options: every parallelization strategy, on 1 and 2
threads, gives numpy.einsum's result - and exactly the serial kernel's bits (no parallel
reduction reorders a sum, no loop races on an output); options split the cache; the thread
count is validated and read from SPARSECC_NUM_THREADS."""

import os
import subprocess
import sys
import textwrap
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from conftest import assert_matches, random_sparse
from sparsecc.options import PARALLEL
from sparsecc.passes.rewrites import CHUNK
from sparsecc.runtime import threads

RNG_SEED = 2024
#: rows of the test matrices: parallel loops deal rows to threads in chunks of CHUNK
#: (``schedule(dynamic, CHUNK)``), so a matrix of fewer than 2 x CHUNK rows is one chunk
#: for one thread and the "parallel" run never runs two threads at once.  ROWS gives
#: two threads at least 3 chunks to share (test_rows_are_split_between_threads).
ROWS = 3 * CHUNK + 300


@pytest.fixture(autouse=True)
def _restore_threads():
    # these inputs are small: parallel loops must really run on 2 threads here, below the
    # default work threshold (tests/test_neighbours.py covers the threshold itself)
    n, w = sc.get_num_threads(), threads.get_min_parallel_work()
    threads.set_min_parallel_work(0)
    yield
    sc.set_num_threads(n)
    threads.set_min_parallel_work(w)


def _operands(name, fmt, rng):
    """(einsum, operands, formats) of kernel ``name`` with its sparse operand in ``fmt``.
    Shapes are above the trip count below which a parallel loop runs on one thread, and the
    rows span several scheduling chunks (ROWS)."""
    m, n = ROWS, 600
    A = random_sparse((m, n), 0.005, np.float64, rng, fmt="csr")
    keep = np.ones(m)
    keep[[3, 4, 5]] = 0                 # empty rows
    A = (sp.diags_array(keep) @ A).tocsr()
    A.eliminate_zeros()
    x, X = rng.random(n), rng.random((n, 5))
    if name == "spmv":
        return "ij,j->i", (A, x), (fmt, "dense")
    if name == "spmm":
        return "ik,kj->ij", (A, X), (fmt, "dense")
    if name == "sum":
        return "ij->", (A,), (fmt,)
    if name == "row-sum":
        return "ij->i", (A,), (fmt,)
    if name == "col-sum":                 # outer loop over rows would race on the output
        return "ij->j", (A,), (fmt,)
    if name == "sddmm":
        U, V = rng.random((m, 4)), rng.random((n, 4))
        return "ij,ik,jk->ij", (A, U, V), (fmt, "dense", "dense")
    if name == "spgemm":
        B = random_sparse((n, 300), 0.02, np.float64, rng, fmt="csr")
        return "ik,kj->ij", (A, B), (fmt, fmt)
    if name == "mttkrp":
        T = random_sparse((ROWS, 30, 20), 0.002, np.float64, rng)
        B, C = rng.random((30, 4)), rng.random((20, 4))
        return "ijk,jr,kr->ir", (T, B, C), (fmt, "dense", "dense")
    raise AssertionError(name)


def test_rows_are_split_between_threads():
    """The test matrices really split: more rows than 2 threads x one chunk each, above the
    trip count below which a loop runs on one thread, and the kernel deals them in chunks
    of CHUNK (libomp's dynamic dispatch, as the compiled LLVM IR shows)."""
    rng = np.random.default_rng(RNG_SEED)
    _, (A, x), _ = _operands("spmv", "csr", rng)
    assert A.shape[0] > 2 * CHUNK, "two threads would not both get a chunk"
    k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(parallel="auto"))
    k(A, x)
    ir = k.ir("llvm")
    # a row loop whose coordinates index x is split into checked blocks of about guards.COST
    # rows + entries (passes/guards.py), dealt one block at a time
    assert "@__kmpc_dispatch_init_8u(" in ir and "i64 1)" in ir and "sparsecc_index_flag" in ir, \
        "not schedule(dynamic, 1 block)"
    assert -(-A.shape[0] // CHUNK) >= 3


def test_two_threads_really_run_in_a_parallel_kernel():
    """In a fresh process: one thread makes libomp start no worker; two threads on ROWS
    rows do (an OS thread appears in /proc/self/task), so the parallel runs above really
    have a team of two."""
    code = f"""
        import os, numpy as np, scipy.sparse as sp, sparsecc as sc
        A = sp.random_array(({ROWS}, 300), density=0.01, format="csr", rng=1)
        x = np.ones(300)
        k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(parallel="auto"))
        tasks = lambda: len(os.listdir("/proc/self/task"))
        sc.set_num_threads(1)
        one = k(A, x)
        before = tasks()
        sc.set_num_threads(1)
        k(A, x)
        assert tasks() == before, "a worker thread on 1 thread"
        sc.set_num_threads(2)
        two = k(A, x)
        assert tasks() == before + 1, (before, tasks())
        assert np.array_equal(one, two)
        print("ok")
    """
    r = _run(code, KMP_BLOCKTIME="0", SPARSECC_MIN_PARALLEL_WORK="0")
    assert r.stdout.strip() == "ok", r.stdout


def _dense(ops):
    return [o.toarray() if sp.issparse(o) else o for o in ops]


def _check(name, fmt, parallel, **extra):
    rng = np.random.default_rng(RNG_SEED)
    expr, ops, fmts = _operands(name, fmt, rng)
    want = np.einsum(expr, *_dense(ops))
    serial = sc.compile(expr, *fmts, options=sc.Options(parallel="none"))
    ref = serial(*ops)
    k = sc.compile(expr, *fmts, options=sc.Options(parallel=parallel, **extra))
    for n in (1, 2):
        sc.set_num_threads(n)
        got = k(*ops)
        assert_matches(got, want)
        g, r = (x.toarray() if sp.issparse(x) else np.asarray(x) for x in (got, ref))
        assert np.array_equal(g, r), f"{name} {fmt} {parallel} on {n} threads differs from the serial kernel"
    return k


FORMATS_2D = ["csr", "csc", "coo", "dcsr", "dense"]
KERNELS_2D = ["spmv", "spmm", "sum", "row-sum", "col-sum"]
#: the strategies that differ on every format; the others run on a subset by default
BROAD = ("auto", "any-storage-any-loop")
NARROW_FORMATS = ("csr", "csc", "dcsr", "dense")
NARROW_KERNELS = ("spmv", "spmm", "sum", "col-sum")


def _matrix():
    for parallel in PARALLEL:
        if parallel == "none":
            continue                    # the reference itself
        for kernel in KERNELS_2D:
            for fmt in FORMATS_2D:
                narrow = parallel in BROAD or (fmt in NARROW_FORMATS and kernel in NARROW_KERNELS)
                yield pytest.param(parallel, kernel, fmt, marks=() if narrow else pytest.mark.slow)


@pytest.mark.parametrize("parallel,kernel,fmt", list(_matrix()))
def test_every_strategy_matches_einsum_and_the_serial_kernel(parallel, kernel, fmt):
    _check(kernel, fmt, parallel)


@pytest.mark.parametrize("parallel", PARALLEL)
@pytest.mark.parametrize("kernel,fmt", [("sddmm", "csr"), ("sddmm", "coo"), ("spgemm", "csr"),
                                        ("spgemm", "dcsr"), ("mttkrp", "csf"), ("mttkrp", "coo")])
def test_sparse_results_and_3d_under_every_strategy(parallel, kernel, fmt):
    _check(kernel, fmt, parallel)


def _parallel_loops(k) -> bool:
    return "@__kmpc_fork_call(ptr nonnull" in k.ir("llvm")


@pytest.mark.parametrize("kernel,fmt,expected", [
    ("spmv", "csr", True),        # dense outer loop writing disjoint rows
    ("spmm", "csr", True),
    ("spmv", "dcsr", True),       # compressed outer loop over unique rows
    ("row-sum", "csr", True),
    ("spmv", "csc", True),        # outer loop is the summed index: hand-written blocks, each its
    ("col-sum", "csr", True),     # own accumulator (dialect/kernels/scatter.py), no race on y
    ("sum", "csr", False),        # a reduction into one scalar: would reorder the sum
    ("sddmm", "csr", True),       # sparse results: hand-written row loops (dialect/kernels/)
    ("spgemm", "csr", True),
    ("sddmm", "coo", False),      # a sparse result MLIR builds: it never parallelizes it
])
def test_auto_parallelizes_only_where_safe(kernel, fmt, expected):
    k = _check(kernel, fmt, "auto")
    assert _parallel_loops(k) == expected


def test_none_has_no_parallel_loops_and_needs_no_runtime():
    k = _check("spmv", "csr", "none")
    assert not _parallel_loops(k)


def test_any_loop_strategy_falls_back_to_outer_loop_with_a_reduction():
    # SpMV's inner loop sums into y[i]: any-storage-any-loop may only keep the outer loop
    k = _check("spmv", "csr", "any-storage-any-loop")
    assert "scf.reduce(" not in k.ir("sparsified")
    assert k.ir("llvm").count("call void (ptr, i32, ptr, ...) @__kmpc_fork_call") == 1


@pytest.mark.parametrize("options", [dict(vector_length=4), dict(vector_length=8),
                                     dict(loop_order="dense-outer"),
                                     dict(vector_length=4, loop_order="dense-outer", parallel="auto")])
@pytest.mark.parametrize("kernel,fmt", [("spmv", "csr"), ("spmm", "csc"), ("sum", "coo"), ("sddmm", "csr")])
def test_codegen_options_match_einsum(options, kernel, fmt):
    rng = np.random.default_rng(RNG_SEED)
    expr, ops, fmts = _operands(kernel, fmt, rng)
    k = sc.compile(expr, *fmts, options=sc.Options(**options))
    assert_matches(k(*ops), np.einsum(expr, *_dense(ops)))


def test_opt_level_zero_matches_einsum():
    rng = np.random.default_rng(RNG_SEED)
    expr, ops, fmts = _operands("spmm", "csr", rng)
    k = sc.compile(expr, *fmts, options=sc.Options(opt_level=0, parallel="auto"))
    assert_matches(k(*ops), np.einsum(expr, *_dense(ops)))


def test_vector_length_makes_vector_code():
    k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(vector_length=4, parallel="none"))
    rng = np.random.default_rng(1)
    A = random_sparse((50, 40), 0.2, np.float64, rng, fmt="csr")
    assert_matches(k(A, np.ones(40)), A.toarray() @ np.ones(40))
    assert "vector<4xf64>" in k.ir("sparsified")


def test_options_change_the_cache_key():
    rng = np.random.default_rng(3)
    A = random_sparse((30, 20), 0.2, np.float64, rng, fmt="csr")
    x = rng.random(20)
    keys = set()
    for opts in [sc.Options(), sc.Options(parallel="none"), sc.Options(parallel="dense-outer-loop"),
                 sc.Options(vector_length=4), sc.Options(loop_order="dense-outer"), sc.Options(opt_level=1),
                 sc.Options(index_width=64)]:
        k = sc.compile("ij,j->i", "csr", "dense", options=opts)
        assert_matches(k(A, x), A.toarray() @ x)
        keys.add(k.last_specialization().key)
    assert len(keys) == 7


def test_thread_count_is_not_in_the_cache_key():
    rng = np.random.default_rng(4)
    A = random_sparse((900, 50), 0.1, np.float64, rng, fmt="csr")
    k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(parallel="auto"))
    sc.set_num_threads(1)
    k(A, np.ones(50))
    before = sc.cache_info()
    sc.set_num_threads(2)
    assert_matches(k(A, np.ones(50)), A.toarray() @ np.ones(50))
    after = sc.cache_info()
    assert (after.misses, after.disk_hits) == (before.misses, before.disk_hits)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None, 10**6])
def test_set_num_threads_validates(bad):
    with pytest.raises(sc.SparseccError):
        sc.set_num_threads(bad)


def test_set_and_get_num_threads():
    sc.set_num_threads(3)
    assert sc.get_num_threads() == 3
    sc.set_num_threads(np.int64(1))
    assert sc.get_num_threads() == 1


def _run(code, **env):
    e = dict(os.environ)
    e.pop("SPARSECC_NUM_THREADS", None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def test_num_threads_from_the_environment():
    code = """
        import os, numpy as np, scipy.sparse as sp, sparsecc as sc
        print(sc.get_num_threads(), len(os.sched_getaffinity(0)))
        A = sp.random_array((3 * 1024 + 300, 300), density=0.05, format="csr", rng=1)
        x = np.ones(300)
        k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(parallel="auto"))
        assert np.allclose(k(A, x), A @ x)
    """
    r = _run(code, SPARSECC_NUM_THREADS="3")
    assert r.stdout.split()[0] == "3"
    r = _run(code)
    n, cores = r.stdout.split()
    assert n == cores
    r = _run(code, SPARSECC_NUM_THREADS="many")
    assert r.stdout.split()[0] == r.stdout.split()[1]
    assert "SPARSECC_NUM_THREADS" in r.stderr


def test_parallel_kernel_from_several_python_threads():
    rng = np.random.default_rng(9)
    A = random_sparse((3000, 400), 0.02, np.float64, rng, fmt="csr")
    X = [rng.random((400, 3)) for _ in range(8)]
    k = sc.compile("ik,kj->ij", "csr", "dense", options=sc.Options(parallel="auto"))
    sc.set_num_threads(2)
    k(A, X[0])
    with ThreadPoolExecutor(4) as ex:
        for _ in range(3):
            for got, x in zip(ex.map(lambda x: k(A, x), X), X):
                assert_matches(got, A.toarray() @ x)


def test_aot_libraries_are_serial(tmp_path):
    from sparsecc import aot
    k = sc.compile("ij,j->i", "csr", "dense", options=sc.Options(parallel="dense-outer-loop"))
    path = aot.build("serial", {"spmv": k}, str(tmp_path))
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    assert "libomp" not in out
    lib = aot.load(str(tmp_path))
    rng = np.random.default_rng(5)
    A = random_sparse((800, 30), 0.1, np.float64, rng, fmt="csr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_matches(lib.spmv(A, np.ones(30)), A.toarray() @ np.ones(30))
