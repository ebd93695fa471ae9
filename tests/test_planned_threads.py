"""A planned call follows sc.set_num_threads like the one nest does (issue 24 row 6).

The bench's 2-thread pass once timed the planned triangle count (``ij,jk,ik->``, a one-step
plan onto the masked-sum kernel) at its 1-thread time while ``optimize=False`` sped up.  The
suspects were a kernel kept from the 1-thread pass compiled for one thread, and a thread
count missing from the plan's cache key.  Neither holds, and this pins it down: planned,
compiled and called on 1 thread, the planned call runs the one nest's own library, whose
thread count follows the later ``set_num_threads(2)``, and a second OS thread joins its
parallel loop.  (The bench now times every column in two interleaved rounds:
``bench/runner.py ROUNDS``.)"""

import os
import subprocess
import sys
import textwrap


def test_a_kernel_planned_on_one_thread_runs_on_two_later():
    code = """
        import ctypes, os
        import numpy as np, scipy.sparse as sp
        import sparsecc as sc
        from sparsecc.kernel_abi import NUM_THREADS_GLOBAL
        from sparsecc.runtime import threads

        rng = np.random.default_rng(3)
        n = 3000
        A = sp.random_array((n, n), density=0.01, format="csr", rng=rng)
        L = sp.tril(A + A.T, k=-1, format="csr")
        L.data[:] = 1.0
        L.sort_indices()
        L = sp.csr_array(L)
        tasks = lambda: len(os.listdir("/proc/self/task"))

        sc.set_num_threads(1)
        planned = sc.compile("ij,jk,ik->", "csr", "csr", "csr")
        nest = sc.compile("ij,jk,ik->", "csr", "csr", "csr", optimize=False)
        one = planned(L, L, L)
        assert len(planned.plan(L, L, L).steps) == 1
        assert nest(L, L, L) == one
        assert planned._last.key == nest._last.key, "the one-step plan runs another kernel than the nest"
        counter = threads._global(planned._last.lib, ctypes.c_int32, NUM_THREADS_GLOBAL)
        assert counter.value == 1
        before = tasks()

        sc.set_num_threads(2)
        assert counter.value == 2, counter.value
        two = planned(L, L, L)
        assert tasks() == before + 1, (before, tasks())      # libomp's worker joined the loop
        assert two == one                                     # row sums added in row order
        want = float((L @ L).multiply(L).sum())               # SciPy: the triangle count
        assert two == want, (two, want)
        print("ok")
    """
    env = dict(os.environ)
    env.pop("SPARSECC_NUM_THREADS", None)
    env.update(KMP_BLOCKTIME="0", SPARSECC_MIN_PARALLEL_WORK="0")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok"), r.stdout
