"""Running one case: build the inputs, compile, check against every baseline, then time
sparsecc (all cores and one thread) and the baselines."""

from __future__ import annotations

import os
import time

import numpy as np

from ..runtime.threads import set_num_threads
from .baselines import PEERS, _torch, graphblas_threads
from .cases import Case, _nnz
from .check import _comparable, check_result
from .timing import measure


def _peer_threads(n: int):
    """torch's and GraphBLAS's thread counts (the peers run on as many threads as sparsecc)."""
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(n)
    graphblas_threads(n)


def best_peer(row: dict) -> dict | None:
    """The fastest of the row's peers (``baselines.PEERS``: SciPy, torch, GraphBLAS) that
    agree with the reference: its name, ms and sparsecc's ratio to it; None without one."""
    peers = [(b["ms"], name) for name, b in row["baselines"].items()
             if name.split(" ")[0] in PEERS and b["agrees"]]      # "scipy A@(B@x)": a SciPy composition
    if not peers:
        return None
    ms, name = min(peers)
    return {"name": name, "ms": ms, "ratio": row["sparsecc_ms"] / ms}


#: idle seconds before each library's timing phase: the previous phase's OpenMP workers
#: (torch's libgomp spins about 3-20 ms after each op; libomp's sparsecc sets blocktime 0)
#: go to sleep first, so no library is timed against another's spinning threads
SETTLE_S = 0.05

#: interleaved timing rounds per case (sparsecc, its 1-thread run, every baseline, again):
#: one phase per column let a transient neighbour decide a ratio; issue 24's triangle row ran
#: its planned call at its 1-thread time in the 2-thread pass while the same kernel, timed
#: later as optimize=False, sped up 1.5x (docs/benchmarks.md)
ROUNDS = 2


def _settle():
    time.sleep(SETTLE_S)


def all_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- running one case

def run_case(case: Case, *, threads: int, repeat: int | None, budget: float, stream: dict, seed: int = 0,
             kernel=None) -> dict:
    """Build the inputs, compile, check against every baseline, then time.  ``kernel``
    replaces the compiled sparsecc kernel (a callable taking the operands), for tests of
    the checking path."""
    import sparsecc as sc

    from ..runtime.kernel import STATS

    rng = np.random.default_rng(seed)
    row: dict = {"id": case.id, "kernel": case.kernel, "input": case.input, "expr": case.expr,
                 "formats": list(case.formats), "out_format": case.out_format, "note": case.note,
                 "ok": False, "error": None, "threads": threads}
    try:
        t = time.perf_counter()
        ops = case.build(rng)
        row["build_s"] = time.perf_counter() - t
        A = ops[0]
        row["shape"] = list(A.shape)
        row["nnz"] = _nnz(A)
        row["dtype"] = str(A.dtype)
        if kernel is None:
            if case.names:
                k = sc.compile(case.expr, out_format=case.out_format,
                               **dict(zip(case.names, case.formats)))
                named = dict(zip(case.names, ops))
                call = lambda: k(**named)
            else:
                k = sc.compile(case.expr, *case.formats, out_format=case.out_format, semiring=case.semiring)
                call = lambda: k(*ops)
        else:
            call = lambda: kernel(*ops)
        base_calls = {name: make(*ops) for name, make in case.baselines.items()}

        # compile + first call, at all cores (as a user's first call runs)
        set_num_threads(threads)
        _peer_threads(threads)
        misses = STATS.misses
        t = time.perf_counter()
        got = call()
        first = time.perf_counter() - t
        row["cold_compile"] = STATS.misses > misses
        if kernel is None and hasattr(k, "plan"):     # a planned kernel: the plan this call ran
            p = k.plan(**named) if case.names else k.plan(*ops)
            row["plan_steps"], row["plan"] = len(p.steps), str(p)

        # correctness, before any timing
        ref_name = next(iter(base_calls))
        ref = _comparable(base_calls[ref_name]())
        ok, detail = check_result(got, ref)
        row["ok"], row["check"] = ok, f"vs {ref_name}: {detail}"
        row["baseline_checks"] = {}
        for name, fn in base_calls.items():
            if name != ref_name:
                bok, bdetail = check_result(fn(), ref)
                row["baseline_checks"][name] = {"ok": bok, "detail": bdetail}
        del got
        if not ok:
            return row

        # timing: sparsecc at all cores and at 1 thread, baselines with torch at our thread count,
        # in ROUNDS interleaved rounds (each a share of the budget), each figure the least of
        # its rounds' medians: a phase that meets a neighbour's burst (another process on the
        # core a worker thread needs) is not the only sample of its column
        walls, ones, bases, samples = [], [], {name: [] for name in base_calls}, 0
        for _ in range(ROUNDS):
            _settle()
            t_all = measure(call, repeat, budget / ROUNDS)
            walls.append(t_all["median_s"])
            samples += t_all["samples"] * t_all["number"]
            if threads > 1:
                set_num_threads(1)
                _settle()
                ones.append(measure(call, repeat, budget / ROUNDS)["median_s"])
                set_num_threads(threads)
            for name, fn in base_calls.items():
                _settle()
                bases[name].append(measure(fn, repeat, budget / ROUNDS)["median_s"])
        wall = min(walls)
        row["sparsecc_ms"] = wall * 1e3
        row["sparsecc_samples"] = samples
        # compile time: the first call less a steady call; None when the kernel was already
        # compiled in this process (another row with the same expression, formats and dtypes)
        row["first_call_s"] = first
        row["compile_s"] = max(0.0, first - wall) if row["cold_compile"] else None
        row["threads"] = threads
        if threads > 1:
            row["sparsecc_1t_ms"] = min(ones) * 1e3
            row["thread_speedup"] = min(ones) / wall
        else:
            row["sparsecc_1t_ms"] = row["sparsecc_ms"]
            row["thread_speedup"] = 1.0
        row["baselines"] = {}
        for name in base_calls:
            bad = row["baseline_checks"].get(name, {}).get("ok") is False
            ms = min(bases[name]) * 1e3
            row["baselines"][name] = {"ms": ms, "ratio": row["sparsecc_ms"] / ms, "agrees": not bad}
        row["best_peer"] = best_peer(row)
        if case.target is not None:
            mine = row["sparsecc_1t_ms"] if case.target_threads == "1" else row["sparsecc_ms"]
            ratio = mine / row["baselines"][ref_name]["ms"] if mine is not None else None
            row["target"] = {"ratio": case.target, "baseline": ref_name, "threads": case.target_threads,
                             "measured": ratio, "met": ratio is not None and ratio <= case.target}
        if case.thread_target is not None:
            sp_ = row["thread_speedup"]
            row["thread_target"] = {"speedup": case.thread_target, "threads": threads, "measured": sp_,
                                    "met": (sp_ >= case.thread_target) if (sp_ is not None and threads > 1) else None}
        secs = row["sparsecc_ms"] / 1e3
        row["flops"] = float(case.flops(ops, ref))
        row["bytes"] = float(case.bytes(ops, ref))
        row["gflops"] = row["flops"] / secs / 1e9
        row["gbs"] = row["bytes"] / secs / 1e9
        # against the read bandwidth of as many threads as the kernel could use
        bw = stream.get("read_all_gbs") if threads > 1 else stream.get("read_1t_gbs")
        row["bw_fraction"] = row["gbs"] / bw if bw else None
        if row["sparsecc_1t_ms"] is not None:
            row["gbs_1t"] = row["bytes"] / (row["sparsecc_1t_ms"] / 1e3) / 1e9
            bw1 = stream.get("read_1t_gbs")
            row["bw_fraction_1t"] = row["gbs_1t"] / bw1 if bw1 else None
    except Exception as e:      # noqa: BLE001 - one broken kernel must not hide the others
        row["ok"] = False
        row["error"] = f"{type(e).__name__}: {e}"
    return row
