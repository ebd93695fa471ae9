"""sparsecc next to other parallel libraries: how much a parallel sparsecc call slows the
torch op run right after it, and sparsecc on all cores against one thread on mid-size inputs.

    python benchmarks/neighbours.py                  # both parts, ratios printed
    python benchmarks/neighbours.py --rounds 7       # more interleaved rounds (medians over them)
    python benchmarks/neighbours.py --env KMP_BLOCKTIME=200ms   # any setting, for comparison
    python benchmarks/neighbours.py --part blocktime --blocktimes 0,20,50,200,1000   # spin policies

Part 1 (needs torch): ``torch.mv`` on a CSR matrix timed one call at a time, interleaved in
rounds: "alone" (back to back, sparsecc idle for longer than any spin time), "after serial"
(each torch call right after the same sparsecc SpMV on one thread: torch's own threads have
gone to sleep just as well), "after parallel" (right after it on all threads).  Ratios:
after parallel / alone, and after parallel / after serial (what sparsecc's threads cost).
Also the reverse: a sparsecc call right after a torch op, against sparsecc alone.

Part 3 (``--part blocktime``, needs torch): libomp blocktimes in microseconds, interleaved round
by round in one process (``KMP_BLOCKTIME=0us`` in the environment before libomp loads makes
``kmp_set_blocktime`` take microseconds; without a unit it takes milliseconds), each measured on
both sides of the trade: SpMV on the bench's 3-D Poisson row on all threads, calls back to back
(a spinning worker is awake for the next call), and ``torch.mv`` right after a parallel sparsecc
call (a spinning worker holds a core torch's team wants), against ``torch.mv`` alone.  Every
sample is kept: medians and the share of stalls (samples over 5x the alone median: a thread
waiting out a scheduler time slice), which on a loaded machine say more than a median.

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


def part_blocktime(rounds: int, blocktimes, calls: int = 10):
    try:
        import torch
    except Exception:           # noqa: BLE001
        print("torch not importable: part 3 skipped")
        return
    if os.environ.get("KMP_BLOCKTIME", "").strip() not in ("", "0us"):
        print("part 3 sets KMP_BLOCKTIME=0us itself: run it without KMP_BLOCKTIME (or --env)")
        return
    os.environ["KMP_BLOCKTIME"] = "0us"         # before libomp loads: kmp_set_blocktime in us
    import warnings
    import sparsecc as sc
    from sparsecc.bench.generators import poisson3d, uniform_rows
    from sparsecc.runtime import threads

    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    rng = np.random.default_rng(2)
    P = poisson3d(60)
    xp = rng.random(P.shape[1])
    A = uniform_rows(2000, 2000, 10, rng)
    x = rng.random(2000)
    big = uniform_rows(50_000, 50_000, 10, rng)
    xb = rng.random(50_000)
    k = sc.compile("ij,j->i", "csr", "dense", check=True)
    tA = torch.sparse_csr_tensor(torch.from_numpy(A.indptr), torch.from_numpy(A.indices),
                                 torch.from_numpy(A.data), size=A.shape)
    tx = torch.from_numpy(x)
    tmv = lambda: torch.mv(tA, tx)       # noqa: E731
    np.testing.assert_allclose(k(P, xp), P @ xp)
    rt = threads.load_runtime()
    sc.set_num_threads(max(2, sc.get_num_threads()))
    for _ in range(20):
        k(P, xp), k(big, xb), tmv()
    pois = {b: [] for b in blocktimes}
    after = {b: [] for b in blocktimes}
    alone = []
    for _ in range(rounds):
        for b in blocktimes:
            rt.kmp_set_blocktime(b)
            k(P, xp)
            time.sleep(0.01)
            pois[b] += _one_call_times(lambda: k(P, xp), calls)
            after[b] += _one_call_times(tmv, calls, before=lambda: k(big, xb))
            rt.kmp_set_blocktime(0)
            k(big, xb)                  # the workers asleep before the 'alone' samples
            time.sleep(0.01)
            alone += _one_call_times(tmv, max(1, calls // 2))
    am = _median(alone)
    stalls = lambda v: 100.0 * float(np.mean(np.asarray(v) > 5 * am))     # noqa: E731
    print(f"\nlibomp blocktime (us; interleaved, {rounds} rounds, load {os.getloadavg()[0]:.1f}): "
          f"torch {torch.get_num_threads()} threads, sparsecc {sc.get_num_threads()}; torch.mv "
          f"{A.shape[0]}x{A.shape[1]} alone {_fmt(am)}, stalls {stalls(alone):.0f}%")
    for b in blocktimes:
        a = _median(after[b])
        print(f"  blocktime {b:6d} us: Poisson-3D SpMV back to back best {_fmt(min(pois[b]))} median "
              f"{_fmt(_median(pois[b]))} | torch.mv after a parallel call {_fmt(a)} ({a / am:5.2f}x "
              f"alone), stalls {stalls(after[b]):.0f}%")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=41, help="single calls per round and measurement")
    p.add_argument("--settle", type=float, default=0.3, help="idle seconds before an 'alone' measurement")
    p.add_argument("--budget", type=float, default=0.05, help="seconds per 1-vs-2-thread measurement")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE set before anything loads")
    p.add_argument("--part", choices=("all", "torch", "threads", "blocktime"), default="all")
    p.add_argument("--blocktimes", default="0,20,50,200,1000",
                   help="part 3: libomp blocktimes in microseconds, comma-separated")
    args = p.parse_args(argv)
    for kv in args.env:
        name, _, value = kv.partition("=")
        os.environ[name] = value
    os.environ.setdefault("SPARSECC_CACHE_DIR", "/tmp/cache-neighbours")
    if args.part in ("all", "torch"):
        part_torch(args.rounds, args.calls, args.settle)
    if args.part in ("all", "threads"):
        part_threads(args.rounds, args.budget)
    if args.part == "blocktime":
        part_blocktime(args.rounds, [int(b) for b in args.blocktimes.split(",")])


if __name__ == "__main__":
    main()
