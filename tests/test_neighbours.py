"""sparsecc next to other parallel libraries: the libomp settings made through the runtime's
API (read back), and the per-call serial/parallel decision on work (iterations plus stored
entries): it is taken where the rule says (a worker thread appears or not), and parallel and
serial results are bit-identical and match numpy.einsum.  No timing assertions."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import threads


def _run(code, **env):
    e = dict(os.environ)
    for name in ("SPARSECC_NUM_THREADS", "KMP_BLOCKTIME", "SPARSECC_MIN_PARALLEL_WORK"):
        e.pop(name, None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=e, timeout=120)
    assert r.returncode == 0, r.stderr        # a signal (crash) fails the test too
    return r


@pytest.fixture(autouse=True)
def _restore():
    n, w = sc.get_num_threads(), threads.get_min_parallel_work()
    yield
    sc.set_num_threads(n)
    threads.set_min_parallel_work(w)


# ------------------------------------------------------------------ libomp settings, read back
BLOCKTIME = """
    import threading
    import numpy as np, scipy.sparse as sp, sparsecc as sc
    from sparsecc.runtime import threads
    A = sp.random_array((3000, 300), density=0.01, format="csr", rng=1)
    k = sc.compile("ij,j->i", "csr", "dense")
    threads.set_min_parallel_work(0)
    sc.set_num_threads(2)
    k(A, np.ones(300))                        # a parallel kernel: libomp loaded and running
    got = [threads.blocktime()]
    t = threading.Thread(target=lambda: (k(A, np.ones(300)), got.append(threads.blocktime())))
    t.start(); t.join()
    print(got)
"""


def test_blocktime_is_zero_through_the_runtime_api():
    """Without KMP_BLOCKTIME in the environment, libomp's blocktime reads back 0 in the
    thread that loaded it and in a Python thread started later."""
    assert _run(BLOCKTIME).stdout.strip() == "[0, 0]"


def test_the_users_blocktime_wins():
    assert _run(BLOCKTIME, KMP_BLOCKTIME="50").stdout.strip() == "[50, 50]"


# --------------------------------------------------------------------------- the threshold
def test_threshold_setting_is_checked():
    for bad in (-1, 1.5, "10", None, True, 2 ** 63):
        with pytest.raises(sc.SparseccError):
            threads.set_min_parallel_work(bad)
    threads.set_min_parallel_work(np.int64(7))
    assert threads.get_min_parallel_work() == 7
    sc.set_num_threads(2)
    assert threads.threads_for(6) == 1 and threads.threads_for(7) == 2


def test_threshold_from_the_environment():
    code = "from sparsecc.runtime import threads; print(threads.get_min_parallel_work())"
    assert _run(code, SPARSECC_MIN_PARALLEL_WORK="1234").stdout.strip() == "1234"
    r = _run(code, SPARSECC_MIN_PARALLEL_WORK="lots")
    from sparsecc.passes.rewrites import MIN_PARALLEL_WORK
    assert r.stdout.strip() == str(MIN_PARALLEL_WORK) and "SPARSECC_MIN_PARALLEL_WORK" in r.stderr


DECISION = """
    import os, numpy as np, scipy.sparse as sp, sparsecc as sc
    from sparsecc.runtime import threads
    A = sp.random_array((4000, 300), density=0.01, format="csr", rng=3)
    work = A.shape[0] + A.nnz                 # rows + stored entries under them
    x = np.ones(300)
    k = sc.compile("ij,j->i", "csr", "dense")
    tasks = lambda: len(os.listdir("/proc/self/task"))
    sc.set_num_threads(1)
    ref = k(A, x)
    before = tasks()
    sc.set_num_threads(2)
    threads.set_min_parallel_work(work + 1)   # just above: serial, no worker thread
    serial = k(A, x)
    a = tasks()
    threads.set_min_parallel_work(work)       # reached: parallel, libomp starts a worker
    par = k(A, x)
    b = tasks()
    print(a - before, b - before, np.array_equal(ref, serial), np.array_equal(ref, par))
"""


def test_the_decision_is_taken_at_the_threshold():
    """The kernel counts rows + stored entries on each call: one more than that as the
    threshold keeps it on one thread (no OS thread appears), exactly that runs two."""
    assert _run(DECISION, KMP_BLOCKTIME="0").stdout.split() == ["0", "1", "True", "True"]


def _matrix(kind, fmt, dtype, rng):
    if kind == "empty":
        A = sp.csr_array((700, 40), dtype=dtype)
    elif kind == "single":
        A = sp.csr_array((np.array([3], dtype), (np.array([650]), np.array([7]))), shape=(700, 40))
    else:
        A = sp.random_array((2600, 40), density=0.05, format="csr", rng=rng, dtype=np.float64)
        A.data = (A.data * 10).astype(dtype) if np.issubdtype(dtype, np.integer) else A.data.astype(dtype)
        A.data[A.data == 0] = 1
    return A


@pytest.mark.parametrize("fmt", ["csr", "dcsr"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("kind", ["empty", "single", "many"])
@pytest.mark.parametrize("expr", ["ij,j->i", "ik,kj->ij", "ij->i"])
def test_serial_and_parallel_are_bit_identical(fmt, dtype, kind, expr):
    rng = np.random.default_rng(11)
    A = _matrix(kind, fmt, dtype, rng)
    kept = A.copy()
    ops = [A]
    if expr == "ij,j->i":
        ops.append((rng.random(40) * 10).astype(dtype))
    elif expr == "ik,kj->ij":
        ops.append((rng.random((40, 3)) * 10).astype(dtype))
    fmts = [fmt] + ["dense"] * (len(ops) - 1)
    want = np.einsum(expr, *[o.toarray() if sp.issparse(o) else o for o in ops])
    k = sc.compile(expr, *fmts)
    sc.set_num_threads(2)
    got = {}
    for least in (0, 10 ** 12):               # always parallel, always serial
        threads.set_min_parallel_work(least)
        got[least] = k(*ops)
    assert got[0].dtype == got[10 ** 12].dtype
    assert np.array_equal(got[0], got[10 ** 12])
    if np.issubdtype(dtype, np.integer):
        assert np.array_equal(got[0], want)
    else:
        np.testing.assert_allclose(got[0], want, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert (A != kept).nnz == 0               # the operand is untouched


def test_csf_mttkrp_serial_and_parallel_agree():
    """A 3-D CSF operand: the outer loop's positions are the first compressed level's."""
    rng = np.random.default_rng(5)
    T = sp.random_array((2000, 12, 10), density=0.01, format="coo", rng=rng)
    B, C = rng.random((12, 4)), rng.random((10, 4))
    want = np.einsum("ijk,jr,kr->ir", T.toarray(), B, C)
    k = sc.compile("ijk,jr,kr->ir", "csf", "dense", "dense")
    sc.set_num_threads(2)
    threads.set_min_parallel_work(0)
    par = k(T, B, C)
    threads.set_min_parallel_work(10 ** 12)
    ser = k(T, B, C)
    assert np.array_equal(par, ser)
    np.testing.assert_allclose(par, want, rtol=1e-12)
