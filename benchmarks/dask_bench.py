"""SpMV, SpMM (k = 32) and MTTKRP (rank 32) over Dask arrays on LocalClusters of 1 and 2
workers (processes, 1 thread each), side by side with the in-memory kernel: times, same-run
ratios and the bytes moved between workers.

    PYTHONPATH=. python benchmarks/dask_bench.py [--scale 1.0] [--repeat 5]

The Dask operands are persisted on the workers first (data that lives on the cluster, as it
would on a real one); each timed run persists the result there (``client.persist`` + wait),
so the time is the plan's tasks and transfers, not gathering the result to the client.
Both clusters run at once and the runs interleave (in-memory, 1 worker, 2 workers, again),
so load on the machine hits all three alike; the table shows the best and the median of
``--repeat`` runs, ratios of the best times.  Bytes moved: distributed's own counter
``Worker.transfer_outgoing_bytes_total`` (worker-to-worker transfers: partial results, operand
blocks a task needs from another worker), summed over workers, per run.  Every result is
checked against the in-memory sparsecc kernel (itself tested against NumPy and SciPy).
Needs ``sparsecc[dask]``.
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

K = 32          # SpMM columns and MTTKRP rank


def _pydata(a):
    import sparse
    c = a.tocoo()
    return sparse.COO(np.vstack(c.coords), c.data, shape=c.shape)


def _cases(scale: float, rng):
    """(name, expression, in-memory operands, Dask operands from (da, in-memory operands), note)."""
    n = max(int(400_000 * scale), 8)
    A = sp.random_array((n, n), density=10 / n, format="csr", rng=rng, dtype=np.float64)
    x = rng.random(n)
    B = rng.random((n, K))
    m = max(int(400 * scale ** (1 / 3)), 8)
    T = sp.random_array((m, m, m), density=min(4e6 * scale / m ** 3, 1.0), format="coo", rng=rng)
    T.sum_duplicates()      # canonical (sorted) like the pydata chunks: an unsorted COO is sorted per call
    U, V = rng.random((m, K)), rng.random((m, K))
    rows, cols = (n + 3) // 4, (n + 1) // 2          # A in 4 x 2 blocks: j split, partials combined
    return [
        ("SpMV", "ij,j->i", (A, x),
         lambda da: (da.from_array(A, chunks=(rows, cols), asarray=False), da.from_array(x, chunks=cols)),
         f"A {n}x{n}, nnz {A.nnz}, blocks 4x2"),
        ("SpMM", "ij,jk->ik", (A, B),
         lambda da: (da.from_array(A, chunks=(rows, cols), asarray=False), da.from_array(B, chunks=(cols, K))),
         f"A {n}x{n}, nnz {A.nnz}, B {n}x{K}"),
        ("MTTKRP", "ijk,jr,kr->ir", (T, U, V),
         lambda da: (da.from_array(_pydata(T), chunks=((m + 3) // 4, (m + 1) // 2, m)),
                     da.from_array(U, chunks=((m + 1) // 2, K)), da.from_array(V, chunks=(m, K))),
         f"T {m}^3, nnz {T.nnz}, rank {K}, blocks 4x2x1"),
    ]


def _moved(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values())


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main(argv=None):
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-stealing", action="store_true",
                   help="turn the scheduler's work stealing off (it may move operand blocks to idle workers)")
    args = p.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore", message="Sending large graph")      # the operands, once, at setup
    warnings.filterwarnings("ignore", message="Port .* is already in use")
    if args.no_stealing:
        import dask
        dask.config.set({"distributed.scheduler.work-stealing": False})
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    cases = _cases(args.scale, rng)
    env = {"SPARSECC_CACHE_DIR": tempfile.mkdtemp(prefix="sparsecc-dask-bench-"), "SPARSECC_NUM_THREADS": "1",
           "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    sc.set_num_threads(1)
    clusters = {w: LocalCluster(n_workers=w, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address=None, env=env) for w in (1, 2)}
    clients = {w: Client(c, set_as_default=False) for w, c in clusters.items()}
    try:
        plans = {}
        for name, expr, ops, lazy, _ in cases:
            want = sc.einsum(expr, *ops)
            for w, client in clients.items():
                with client.as_current():
                    dops = client.persist(list(lazy(da)))    # operands live on the workers
                    wait(dops)
                    y = sc.einsum(expr, *dops)               # kernels compiled once, here; shipped
                    got = client.compute(y, sync=True)       # warm: workers load; checked
                np.testing.assert_allclose(got, want, rtol=1e-9)
                plans[name, w] = (client, y, int(sum(x.nbytes for x in [got])))
        times = {key: [] for key in [(c[0], w) for c in cases for w in (0, 1, 2)]}
        moved = {key: [] for key in plans}
        for _ in range(args.repeat):
            for name, expr, ops, _, _ in cases:
                times[name, 0].append(_timed(lambda: sc.einsum(expr, *ops)))
                for w in (1, 2):
                    client, y, _ = plans[name, w]
                    before = _moved(client)

                    def run():
                        with client.as_current():
                            r = client.persist(y)
                            wait(r)
                        del r
                    times[name, w].append(_timed(run))
                    moved[name, w].append(_moved(client) - before)
    finally:
        for c in clients.values():
            c.close()
        for c in clusters.values():
            c.close()
    load = os.getloadavg()[0]
    print(f"# {os.cpu_count()} cores, load average {load:.2f}; scale {args.scale}, best | median of "
          f"{args.repeat} interleaved runs{', no work stealing' if args.no_stealing else ''}; "
          f"wall {time.perf_counter() - t0:.0f} s")
    print(f"{'case':7} {'in-memory':>17} {'1 worker':>17} {'2 workers':>17} {'1w/mem':>7} {'2w/1w':>6} "
          f"{'moved 1w':>9} {'moved 2w':>9} {'result':>8}  operands")
    for name, _, _, _, note in cases:
        b = {w: min(times[name, w]) for w in (0, 1, 2)}
        md = {w: statistics.median(times[name, w]) for w in (0, 1, 2)}
        cell = {w: f"{b[w] * 1e3:7.1f} | {md[w] * 1e3:7.1f}" for w in (0, 1, 2)}
        mv = {w: statistics.median(moved[name, w]) / 1e6 for w in (1, 2)}
        print(f"{name:7} {cell[0]:>17} {cell[1]:>17} {cell[2]:>17} {b[1] / b[0]:7.2f} {b[2] / b[1]:6.2f} "
              f"{mv[1]:7.2f}MB {mv[2]:7.2f}MB {plans[name, 1][2] / 1e6:6.1f}MB  {note}")


if __name__ == "__main__":
    main()
