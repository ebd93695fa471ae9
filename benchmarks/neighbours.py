"""sparsecc next to other parallel libraries: how much a parallel sparsecc call slows the
torch op run right after it, and sparsecc on all cores against one thread on mid-size inputs.

    python benchmarks/neighbours.py                  # both parts, ratios printed
    python benchmarks/neighbours.py --rounds 7       # more interleaved rounds (medians over them)
    python benchmarks/neighbours.py --env KMP_BLOCKTIME=200ms   # any setting, for comparison

Part 1 (needs torch): ``torch.mv`` on a CSR matrix timed one call at a time, interleaved in
rounds: "alone" (back to back, sparsecc idle for longer than any spin time), "after serial"
(each torch call right after the same sparsecc SpMV on one thread: torch's own threads have
gone to sleep just as well), "after parallel" (right after it on all threads).  Ratios:
after parallel / alone, and after parallel / after serial (what sparsecc's threads cost).
Also the reverse: a sparsecc call right after a torch op, against sparsecc alone.

Part 2: sparsecc SpMV/SpMM at ``sc.set_num_threads(2)`` against ``1``, interleaved, on
mid-size inputs (illc1850 from SciPy's test data, uniform rows of a few sizes).

No assertion: timings on a shared machine are noisy; medians over interleaved rounds are
printed with their spread (min-max of the round medians).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402


def _median(xs):
    return float(np.median(xs))


def _one_call_times(fn, n, before=None):
    """Seconds of ``n`` single calls of ``fn``, each preceded by ``before()`` (untimed)."""
    out = []
    for _ in range(n):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _fmt(s):
    return f"{s * 1e6:8.1f} us" if s < 1e-3 else f"{s * 1e3:8.2f} ms"


def _spread(meds):
    return f"(rounds {_fmt(min(meds)).strip()} .. {_fmt(max(meds)).strip()})"


def part_torch(rounds: int, calls: int, settle: float, n: int = 2000, per_row: int = 10):
    try:
        import torch
    except Exception:           # noqa: BLE001
        print("torch not importable: part 1 skipped")
        return
    import sparsecc as sc
    from sparsecc.bench.generators import uniform_rows

    rng = np.random.default_rng(0)
    A = uniform_rows(n, n, per_row, rng)
    x = rng.random(n)
    big = uniform_rows(50_000, 50_000, 10, rng)         # a sparsecc call that surely runs parallel
    xb = rng.random(50_000)
    k = sc.compile("ij,j->i", "csr", "dense", check=False)
    import warnings
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    tA = torch.sparse_csr_tensor(torch.from_numpy(A.indptr), torch.from_numpy(A.indices),
                                 torch.from_numpy(A.data), size=A.shape)
    tx = torch.from_numpy(x)
    tX = torch.from_numpy(rng.random((n, 64)))
    dense = torch.from_numpy(rng.random((256, 256)))

    sc_small = lambda: k(A, x)             # noqa: E731
    sc_big = lambda: k(big, xb)            # noqa: E731
    peers = {
        f"torch.mv CSR {n}x{n}": lambda: torch.mv(tA, tx),
        f"torch.sparse.mm CSR {n}x{n} @ {n}x64": lambda: torch.sparse.mm(tA, tX),
        "torch.mm dense 256x256": lambda: torch.mm(dense, dense),
    }
    np.testing.assert_allclose(k(A, x), A @ x)
    print(f"torch {torch.__version__}: {torch.get_num_threads()} threads; sparsecc "
          f"{sc.get_num_threads()} threads; sparsecc call before each 'after' sample: SpMV "
          f"{big.shape[0]}x{big.shape[1]} ({big.nnz} entries)")
    nt = sc.get_num_threads()
    from sparsecc.runtime import threads
    sc_big()
    rt = threads.load_runtime() if "KMP_BLOCKTIME" not in os.environ else None
    bt = threads.blocktime()

    def serial_big():
        sc.set_num_threads(1)
        sc_big()
        sc.set_num_threads(nt)

    for name, fn in peers.items():
        for _ in range(20):
            fn()
        sc_big()
        alone, after1, after, after200, sc_alone, sc_after = [], [], [], [], [], []
        for _ in range(rounds):
            time.sleep(settle)
            alone.append(_median(_one_call_times(fn, calls)))
            after1.append(_median(_one_call_times(fn, calls, before=serial_big)))
            after.append(_median(_one_call_times(fn, calls, before=sc_big)))
            if rt is not None:                  # before: libomp's default blocktime, 200 ms
                rt.kmp_set_blocktime(200)
                after200.append(_median(_one_call_times(fn, calls, before=sc_big)))
                rt.kmp_set_blocktime(bt)
            time.sleep(settle)
            sc_alone.append(_median(_one_call_times(sc_small, calls)))
            sc_after.append(_median(_one_call_times(sc_small, calls, before=fn)))
        a, a1, b = _median(alone), _median(after1), _median(after)
        print(f"  {name:38s} alone {_fmt(a)}  after serial sparsecc {_fmt(a1)}  after parallel "
              f"{_fmt(b)}  ratio {b / a:6.2f} / {b / a1:5.2f}  {_spread(after)}")
        if after200:
            c = _median(after200)
            print(f"  {'  (blocktime 200 ms, libomp default)':38s} after parallel {_fmt(c)}  ratio "
                  f"{c / a:6.2f} / {c / a1:5.2f}  {_spread(after200)}")
        a, b = _median(sc_alone), _median(sc_after)
        print(f"  {'  sparsecc SpMV ' + str(n) + ' after it':38s} alone {_fmt(a)}  after torch "
              f"{_fmt(b)}  ratio {b / a:6.2f}")


def part_threads(rounds: int, budget: float):
    import sparsecc as sc
    from sparsecc.bench.generators import uniform_rows
    from sparsecc.bench.real import real_matrices
    from sparsecc.bench.timing import measure

    rng = np.random.default_rng(1)
    inputs = {}
    real = real_matrices()
    if "illc1850" in real:
        inputs["illc1850"] = real["illc1850"][1]
    for m, per in ((500, 8), (2000, 10), (8000, 10), (30000, 10), (200000, 10)):
        inputs[f"uniform {m}x{m} {per}/row"] = uniform_rows(m, m, per, rng)
    mv = sc.compile("ij,j->i", "csr", "dense", check=False)
    mm = sc.compile("ik,kj->ij", "csr", "dense", check=False)
    from sparsecc.runtime import threads
    was, least = sc.get_num_threads(), threads.get_min_parallel_work()
    print(f"\nsparsecc 2 threads vs 1 (ratios t2/t1; above 1: 2 threads are slower); threshold "
          f"{least} (rows + stored entries)")
    for name, A in inputs.items():
        x = rng.random(A.shape[1])
        X = rng.random((A.shape[1], 16))
        for kname, call in (("SpMV", lambda: mv(A, x)), ("SpMM16", lambda: mm(A, X))):
            t1, t2, t2raw = [], [], []
            for _ in range(rounds):
                sc.set_num_threads(1)
                t1.append(measure(call, None, budget)["median_s"])
                sc.set_num_threads(2)
                threads.set_min_parallel_work(0)            # before: every loop parallel
                t2raw.append(measure(call, None, budget)["median_s"])
                threads.set_min_parallel_work(least)        # now: serial below the threshold
                t2.append(measure(call, None, budget)["median_s"])
            a, r, b = _median(t1), _median(t2raw), _median(t2)
            print(f"  {kname:6s} {name:26s} work {A.shape[0] + A.nnz:8d}  1t {_fmt(a)}  2t always "
                  f"{_fmt(r)} ({r / a:5.2f})  2t with threshold {_fmt(b)} ({b / a:5.2f})")
    sc.set_num_threads(was)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=41, help="single calls per round and measurement")
    p.add_argument("--settle", type=float, default=0.3, help="idle seconds before an 'alone' measurement")
    p.add_argument("--budget", type=float, default=0.05, help="seconds per 1-vs-2-thread measurement")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE set before anything loads")
    p.add_argument("--part", choices=("all", "torch", "threads"), default="all")
    args = p.parse_args(argv)
    for kv in args.env:
        name, _, value = kv.partition("=")
        os.environ[name] = value
    os.environ.setdefault("SPARSECC_CACHE_DIR", "/tmp/cache-neighbours")
    if args.part in ("all", "torch"):
        part_torch(args.rounds, args.calls, args.settle)
    if args.part in ("all", "threads"):
        part_threads(args.rounds, args.budget)


if __name__ == "__main__":
    main()
