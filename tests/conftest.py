import os
import tempfile

import numpy as np
import pytest
import scipy.sparse as sp

# A fresh kernel cache for each test session, unless the caller chose one.  Under
# pytest-xdist (`-n 2`) each worker process gets its own folder inside it: tests that count
# compilations must not see a kernel another worker put on the disk.
os.environ.setdefault("SPARSECC_CACHE_DIR", tempfile.mkdtemp(prefix="sparsecc-test-cache-"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["SPARSECC_CACHE_DIR"] = os.path.join(os.environ["SPARSECC_CACHE_DIR"],
                                                    os.environ["PYTEST_XDIST_WORKER"])


def random_sparse(shape, density, dtype, rng, *, fmt="coo"):
    """A random N-d array with about ``density`` of its entries stored (never zero values)."""
    shape = tuple(shape)
    n = int(np.prod(shape))
    nnz = int(round(density * n))
    flat = rng.choice(n, size=nnz, replace=False) if n else np.zeros(0, np.int64)
    coords = np.unravel_index(flat, shape) if n else tuple(np.zeros(0, np.int64) for _ in shape)
    vals = random_values(nnz, dtype, rng)
    a = sp.coo_array((vals, coords), shape=shape)
    if len(shape) == 2 and fmt != "coo":
        a = a.asformat(fmt)
    return a


def random_values(n, dtype, rng):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.ones(n, dtype=bool)
    if dtype.kind == "i":
        return rng.integers(1, 5, size=n).astype(dtype)
    if dtype.kind == "c":
        return (rng.uniform(0.5, 1.5, n) + 1j * rng.uniform(-1, 1, n)).astype(dtype)
    return rng.uniform(0.5, 1.5, n).astype(dtype)


def random_dense(shape, dtype, rng):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return random_values(int(np.prod(shape)), dtype, rng).reshape(shape)


def dense_of(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def assert_matches(got, want):
    """Values equal (dtype included); a sparse result is compared on its dense copy."""
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if want.dtype in (np.float32, np.complex64) else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def exact_blocks(a):
    """A CSR/CSC/BSR array over copies of ``a``'s buffers in exact-size heap blocks, or an
    ndarray copy in one: under memcheck a read or write past a buffer's end shows."""
    def own(x):
        y = np.empty(x.size * x.itemsize, np.uint8).view(x.dtype).reshape(x.shape)
        y[...] = x
        return y
    if isinstance(a, np.ndarray):
        return own(a)
    return type(a)((own(a.data), own(a.indices), own(a.indptr)), shape=a.shape)


def memcheck_finds_nothing(child: str, tmp_path, done: str = "done") -> None:
    """Run ``child`` (Python source, the repository root its working folder) once natively (its
    kernels compile outside valgrind), then under memcheck: it prints ``done`` both times, and
    no invalid or uninitialised access has a frame in a kernel (the kernel cache)."""
    import re
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONMALLOC="malloc")
    warm = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=root, env=env,
                          timeout=900)
    assert warm.stdout.strip() == done, warm.stderr[-2000:]
    log = tmp_path / "vg.log"
    r = subprocess.run(["valgrind", "-q", f"--log-file={log}", sys.executable, "-c", child], capture_output=True,
                       text=True, cwd=root, env=env, timeout=1800)
    assert r.stdout.strip() == done, (r.returncode, r.stderr[-2000:])
    blocks = re.split(r"==\d+== ?\n(?===\d+== \S)", log.read_text())       # one error each
    ours = [b for b in blocks if ("Invalid" in b or "uninitialised" in b) and os.environ["SPARSECC_CACHE_DIR"] in b]
    assert not ours, ours[0]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def seed(*key) -> int:
    """A seed fixed by ``key`` (a test's parameters), the same in every process."""
    import zlib
    return zlib.crc32(repr(key).encode())


@pytest.fixture
def restore_threads():
    """The thread count and the parallel-work threshold as they were before the test."""
    import sparsecc as sc
    from sparsecc.runtime import threads
    n, w = sc.get_num_threads(), threads.get_min_parallel_work()
    yield
    sc.set_num_threads(n)
    threads.set_min_parallel_work(w)


# The largest parametrized sweeps run in full with ``-m slow`` (python -m pytest -m slow); a
# default run (CI) keeps a fixed one in N of each (N below), chosen by a hash of the test id,
# so the suite stays under 10 minutes on 2 cores.  docs/reliability.md ("Running the tests").
# A module fixture that builds kernels for its tests (test_aot's semiring library) builds only
# those of the tests selected.
ONE_IN_N_IN_DEFAULT_RUNS = {
    "tests/test_einsum_oracle.py::test_formats_float64": 2,
    "tests/test_sparse_results.py::test_every_input_and_output_format": 2,
    "tests/test_fast_union.py::test_union_matches_scipy": 2,
    "tests/test_fast_mttkrp.py::test_mttkrp_matches_einsum": 2,
    "tests/test_fast_mttkrp.py::test_ttv_matches_einsum": 2,
    "tests/test_threads_options.py::test_every_strategy_matches_einsum_and_the_serial_kernel": 2,
    "tests/test_einsum_oracle.py::test_dtypes": 2,
    "tests/test_notation.py::test_evaluate": 3,
    "tests/test_semirings.py::test_monoid_reductions_against_oracle": 2,
    "tests/test_ops_reductions.py::test_scatter_reduce_random_against_torch": 2,
    "tests/test_ops_sweep.py::test_reduction_sweep": 4,
    "tests/test_neighbours.py::test_serial_and_parallel_are_bit_identical": 2,
    "tests/test_structure_fixes.py::test_repeated_index_next_to_other_operands": 2,
    "tests/test_ops_reductions.py::test_value_semantics_match_numpy": 2,
    "tests/test_adversarial_spgemm.py::test_guarded_kernels_with_prefetched_values": 4,
    "tests/test_guard_prefetch.py::test_prefetching_guarded_spmv_matches_scipy": 4,
    "tests/test_validation.py::test_malformed_operand_raises_in_a_subprocess": 2,
    "tests/test_aot.py::test_every_semiring_and_dtype_round_trips": 2,
    "tests/test_adversarial_spgemm.py::test_result_positions_never_overflow_32_bits": 2,
    "tests/test_adversarial_spgemm.py::test_spgemm_bad_coordinates_raise_in_a_subprocess": 2,
    "tests/test_dask.py::test_in_memory_sparse_operand_beside_a_dask_one": 3,
    "tests/test_exact_reductions.py::test_sparse_result_stores_only_entries_with_a_term": 2,
    "tests/test_dask.py::test_op_reductions_split_along_the_reduced_index": 2,
    "tests/test_reliability.py::test_damaged_entry_is_rebuilt_not_loaded": 2,
    "tests/test_cache_entries.py::test_hostile_entry_is_refused_and_deleted": 2,
    "tests/test_torch_fixes.py::test_adjoints_at_zero_match_torch": 2,
    "tests/test_torch_fixes.py::test_custom_op_fake_dtype_is_the_real_dtype": 3,
    "tests/test_torch_maxmin_sparse.py::test_elementwise_max_min_sparse_result": 2,
    "tests/test_dimension_allocations.py::test_work_in_stored_entries_needs_no_dimension_sized_memory": 2,
    "tests/test_emit_split.py::test_index_reads_its_own_loop_in_every_format": 2,
    "tests/test_conj.py::test_elementwise_keeps_the_pattern": 2,
    "tests/test_threads_options.py::test_sparse_results_and_3d_under_every_strategy": 2,
    "tests/test_api_fixes.py::test_ellipsis_and_broadcasting_match_numpy": 2,
    "tests/test_lazy.py::test_ops_formats_dtypes": 2,
    "tests/test_gpu_device_operands.py::test_device_operands_no_copies_the_launch_gets_the_users_pointers": 2,
    "tests/test_aot_integrity.py::test_manifest_or_library_that_is_not_a_regular_file_is_refused": 2,
    "tests/test_adversarial_call.py::test_mixed_index_dtypes_in_any_layout": 2,
    "tests/test_dimension_allocations.py::test_huge_dimension_plans_match_scipy": 2,
    "tests/test_ops_reductions.py::test_argmax_matches_numpy": 2,
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    import zlib
    for item in items:
        n = ONE_IN_N_IN_DEFAULT_RUNS.get(item.nodeid.split("[")[0])
        if n and zlib.crc32(item.nodeid.encode()) % n:
            item.add_marker(pytest.mark.slow)
