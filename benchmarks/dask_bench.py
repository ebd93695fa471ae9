"""SpMV, SpMM and MTTKRP over Dask arrays on 1 and 2 workers, side by side with the
in-memory kernel: median times, ratios, and the bytes moved between workers.

    PYTHONPATH=. python benchmarks/dask_bench.py [--scale 1.0] [--repeat 5]

Every result is checked against the in-memory sparsecc kernel (itself tested against NumPy
and SciPy).  Times include the scheduler; the graph is built and its kernels compiled
(once, on the client, shipped to the workers) before timing.  Needs ``sparsecc[dask]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import scipy.sparse as sp

import sparsecc as sc


def _cases(scale: float, rng):
    n = int(200_000 * scale)
    A = sp.random_array((n, n), density=10 / n, format="csr", rng=rng, dtype=np.float64)
    x = rng.random(n)
    B = rng.random((n, 16))
    m = int(2_000 * scale ** (1 / 3)) or 1
    T = sp.random_array((m, m, m), density=2e6 * scale / m ** 3, format="coo", rng=rng)
    U, V = rng.random((m, 16)), rng.random((m, 16))
    return [
        ("SpMV", "ij,j->i", (A, x), lambda da: (da.from_array(A, chunks=(n // 4, n // 2), asarray=False), x)),
        ("SpMM", "ij,jk->ik", (A, B), lambda da: (da.from_array(A, chunks=(n // 4, n // 2), asarray=False), B)),
        ("MTTKRP", "ijk,jr,kr->ir", (T, U, V), lambda da: (da.from_array(_pydata(T), chunks=(m // 4, m, m // 2)),
                                                             U, V)),
    ]


def _pydata(a):
    import sparse
    c = a.tocoo()
    return sparse.COO(np.vstack(c.coords), c.data, shape=c.shape)


def _median(f, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _moved(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values())


def main(argv=None):
    import dask.array as da
    from distributed import Client, LocalCluster

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    cases = _cases(args.scale, rng)
    env = {"SPARSECC_CACHE_DIR": tempfile.mkdtemp(prefix="sparsecc-dask-bench-"), "SPARSECC_NUM_THREADS": "1",
           "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    sc.set_num_threads(1)
    mem = {}
    for name, expr, ops, _ in cases:
        want = sc.einsum(expr, *ops)
        mem[name] = (_median(lambda: sc.einsum(expr, *ops), args.repeat), want)
    rows = []
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None, env=env) as cluster, Client(cluster) as client:
            for name, expr, _, lazy in cases:
                ops = lazy(da)
                y = sc.einsum(expr, *ops)
                np.testing.assert_allclose(y.compute(), mem[name][1], rtol=1e-9)    # warm: loads, checks
                before = _moved(client)
                t = _median(lambda: y.compute(), args.repeat)
                rows.append((name, workers, t, (_moved(client) - before) / args.repeat))
    print(f"{'case':8} {'in-memory':>10} {'1 worker':>10} {'2 workers':>10} {'1w/mem':>7} {'2w/1w':>6} "
          f"{'moved 1w':>10} {'moved 2w':>10}")
    for name, *_ in cases:
        r = {w: (t, b) for n, w, t, b in rows if n == name}
        t0 = mem[name][0]
        print(f"{name:8} {t0 * 1e3:8.1f}ms {r[1][0] * 1e3:8.1f}ms {r[2][0] * 1e3:8.1f}ms "
              f"{r[1][0] / t0:7.2f} {r[2][0] / r[1][0]:6.2f} {r[1][1] / 1e6:8.2f}MB {r[2][1] / 1e6:8.2f}MB")


if __name__ == "__main__":
    main()
