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


# The largest parametrized sweeps (14) run in full with ``-m slow`` (python -m pytest -m slow);
# a default run (CI) keeps a fixed half of each, chosen by a hash of the test id, so the
# suite stays under 10 minutes on 2 cores.  docs/reliability.md ("Running the tests").
HALVED_IN_DEFAULT_RUNS = (
    "tests/test_einsum_oracle.py::test_formats_float64",
    "tests/test_sparse_results.py::test_every_input_and_output_format",
    "tests/test_fast_union.py::test_union_matches_scipy",
    "tests/test_fast_mttkrp.py::test_mttkrp_matches_einsum",
    "tests/test_fast_mttkrp.py::test_ttv_matches_einsum",
    "tests/test_threads_options.py::test_every_strategy_matches_einsum_and_the_serial_kernel",
    "tests/test_einsum_oracle.py::test_dtypes",
    "tests/test_notation.py::test_evaluate",
    "tests/test_semirings.py::test_monoid_reductions_against_oracle",
    "tests/test_ops_reductions.py::test_scatter_reduce_random_against_torch",
    "tests/test_ops_sweep.py::test_reduction_sweep",
    "tests/test_neighbours.py::test_serial_and_parallel_are_bit_identical",
    "tests/test_structure_fixes.py::test_repeated_index_next_to_other_operands",
    "tests/test_ops_reductions.py::test_value_semantics_match_numpy",
    "tests/test_adversarial_spgemm.py::test_guarded_kernels_with_prefetched_values",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    import zlib
    for item in items:
        if item.nodeid.split("[")[0] in HALVED_IN_DEFAULT_RUNS and zlib.crc32(item.nodeid.encode()) % 2:
            item.add_marker(pytest.mark.slow)
