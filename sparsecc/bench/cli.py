"""The command: ``python -m sparsecc bench`` flags, the suite run (bandwidth probe, every
case, the summary) and the JSON, PNG and Markdown files."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np

from .._machine import cpu_model
from .bandwidth import stream_probe
from .baselines import _graphblas, _torch
from .cases import IB, VB, Case, cases, select
from .real import real_matrices
from .report import LEGEND, chart, markdown, table
from ..runtime.threads import set_num_threads
from .runner import _peer_threads, all_cores, run_case

SCHEMA = "sparsecc-bench/1"


def machine_info(threads: int) -> dict:
    import scipy

    import sparsecc as sc
    cpu = cpu_model()
    torch = _torch()
    gb = _graphblas()
    return {"cpu": cpu, "cores": all_cores(), "threads": threads, "platform": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "torch": getattr(torch, "__version__", None), "graphblas": getattr(gb, "__version__", None),
            "sparsecc": sc.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadavg": list(os.getloadavg())}


# --------------------------------------------------------------------------- the command

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--small", action="store_true", help="small inputs, short timings (seconds; for CI)")
    p.add_argument("--kernels", default=None,
                   help="comma-separated kernel names (spmv, spmm32, spgemm, ...) or ids (spmv:rmat); default all")
    p.add_argument("--threads", type=int, default=None, help="thread count for 'all cores' (default: all cores)")
    p.add_argument("--repeat", type=int, default=None, help="timing samples per measurement (default: adaptive)")
    p.add_argument("--json", default="bench-results.json", help="write all figures here (default bench-results.json)")
    p.add_argument("--png", default="bench-results.png", help="write the chart here (default bench-results.png; '' for none)")
    p.add_argument("--markdown", default=None, metavar="PATH", help="also write the table as Markdown")
    p.add_argument("--no-real", action="store_true", help="skip the real matrices from installed packages")
    p.add_argument("--cache-dir", default=None,
                   help="kernel cache folder (default: a fresh temporary one, so compile times are cold)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--targets", action="store_true",
                   help="also show the development targets (ratio ceilings) per row and whether this run met them")
    p.add_argument("--list", action="store_true", help="list the kernels and inputs, run nothing")
    p.add_argument("--plans", action="store_true",
                   help="the planner's rows instead (issue 24: expressions of 3+ operands against the hand-ordered "
                        "SciPy/NumPy/torch composition and optimize=False), at 1 thread and all cores")
    p.add_argument("--plans-scale", type=float, default=1.0,
                   help="with --plans: multiply the rows' sizes by this (1: the issue's sizes)")
    p.add_argument("--lazy", action="store_true",
                   help="the lazy-array rows instead (issue 25: @sc.fused PageRank, CG, a GCN and element-wise "
                        "chains against the same loops in SciPy/NumPy/torch, and a cached call's overhead), at 1 "
                        "thread and all cores")
    p.add_argument("--lazy-scale", type=float, default=1.0,
                   help="with --lazy: multiply the rows' sizes by this (1: the issue's sizes)")
    p.add_argument("--derivatives", action="store_true",
                   help="the derivative rows instead (issue 26: Bratu Jacobian vs CasADi, least-squares Hessian "
                        "and Hessian-vector product vs SciPy; bench/derivative_rows.py)")
    p.add_argument("--derivatives-scale", type=float, default=1.0,
                   help="with --derivatives: multiply the grid side and A's dimensions by this (1: the issue's sizes)")
    p.add_argument("--plans-random", type=int, default=None, metavar="N",
                   help="with --plans: row 8's random einsums, N cases (default 100, --small 3; 0: none; "
                        "they run when --kernels is not given or names 'random')")
    p.add_argument("--no-fwd-bwd", action="store_true",
                   help="skip the forward+backward rows (sparsecc.torch against torch.sparse; they run "
                        "when torch is installed and --kernels is not given)")


def _plan_random(args, out) -> dict | None:
    """Row 8 (``plan_random.py``) at 1 thread, unless ``--plans-random 0`` or ``--kernels``
    leaves it out."""
    n = getattr(args, "plans_random", None)
    n = (3 if args.small else 100) if n is None else n
    if n <= 0 or (args.kernels and "random" not in args.kernels.split(",")):
        return None
    from .plan_random import random_rows, summary_line
    scale = 0.05 if args.small else getattr(args, "plans_scale", 1.0)
    print(f"random einsums (row 8): {n} cases, 1 thread", file=out, flush=True)
    set_num_threads(1)
    try:
        res = random_rows(n, args.seed, scale, 0.05 if args.small else 0.2, out)
    finally:
        set_num_threads(args.threads or all_cores())
    print(summary_line(res), file=out, flush=True)
    return res


def run(args, out=None, extra_cases: list[Case] | None = None) -> int:
    """Run the suite for parsed ``args``; returns the exit status (1 when a check FAILED)."""
    out = out or sys.stdout
    if getattr(args, "derivatives", False):
        return _derivatives(args, out)
    threads = args.threads or all_cores()
    if getattr(args, "lazy", False):
        from . import lazy_rows
        return lazy_rows.run(args, out, machine_info(threads), SCHEMA)
    real = {} if args.no_real else real_matrices()
    plans = getattr(args, "plans", False)
    if plans:
        from .plan_rows import plan_cases
        # ("random": row 8, run after the others: plan_random.py)
        wanted = ",".join(k for k in (args.kernels or "").split(",") if k.strip() != "random") or None
        suite = [] if args.kernels and not wanted else select(
            plan_cases(args.small, getattr(args, "plans_scale", 1.0)), wanted)
    else:
        suite = select(cases(args.small, real), args.kernels)
    suite += list(extra_cases or [])
    if args.list:
        for c in suite:
            print(f"{c.id:22} {c.expr:28} formats={','.join(c.formats)}"
                  f"{'  target <= ' + format(c.target, 'g') if c.target and args.targets else ''}", file=out)
        return 0

    saved = os.environ.get("SPARSECC_CACHE_DIR")
    tmp = None
    if args.cache_dir:
        os.environ["SPARSECC_CACHE_DIR"] = args.cache_dir
    else:
        tmp = tempfile.mkdtemp(prefix="sparsecc-bench-cache-")
        os.environ["SPARSECC_CACHE_DIR"] = tmp
    try:
        import sparsecc as sc
        mb = 64 if args.small else 512
        stream = {}
        one = stream_probe(mb, 3 if args.small else 5, 1)
        stream["read_1t_gbs"], stream["copy_1t_gbs"] = one["read_gbs"], one["copy_gbs"]
        # all cores read at least as fast as one (a lower figure is another process's load)
        stream["read_all_gbs"] = max(stream_probe(mb, 3 if args.small else 5, threads)["read_gbs"],
                                     one["read_gbs"]) if threads > 1 else one["read_gbs"]
        stream["mbytes"], stream["threads"] = mb, threads
        print(f"sparsecc {sc.__version__} bench: {machine_info(threads)['cpu']}, {threads} thread(s)", file=out)
        print(f"bandwidth (NumPy, best of several): read {stream['read_1t_gbs']:.1f} GB/s on 1 thread, "
              f"{stream['read_all_gbs']:.1f} GB/s on {threads}; copy {stream['copy_1t_gbs']:.1f} GB/s", file=out)
        if real:
            print("real matrices: " + ", ".join(f"{n} {A.shape[0]}x{A.shape[1]}/{A.nnz}"
                                                for n, (_, A) in real.items()), file=out)
        t = time.perf_counter()                       # start the compile worker before timing compiles
        sc.compile("i,i->")(np.ones(2), np.ones(2))
        worker_s = time.perf_counter() - t
        print(f"compile worker start + first tiny compile: {worker_s:.2f} s\n", file=out)

        budget = 0.1 if args.small else 0.6
        rows = []
        if plans:
            # every row at 1 thread and at all cores (baselines too: torch and GraphBLAS thread)
            from .plan_rows import overhead, overhead_line, plans_table
            for th in sorted({1, threads}):
                these = []
                for c in suite:
                    r = run_case(c, threads=th, repeat=args.repeat, budget=budget, stream=stream, seed=args.seed)
                    these.append(r)
                    tab = plans_table([r], th)
                    print(tab if these[1:] == [] else tab.splitlines()[-1], file=out, flush=True)
                print(file=out)
                rows += these
            set_num_threads(1)
            plan_overhead = overhead(args.repeat, 0.05 if args.small else 0.3, args.seed)
            set_num_threads(threads)
            print(overhead_line(plan_overhead), file=out, flush=True)
            plan_random = _plan_random(args, out)
        for c in ([] if plans else suite):
            r = run_case(c, threads=threads, repeat=args.repeat, budget=budget, stream=stream, seed=args.seed)
            rows.append(r)
            if not rows[1:]:
                print(LEGEND + "\n", file=out)
            tab = table([r], targets=getattr(args, "targets", False))
            print(tab.splitlines()[-1] if rows[1:] else tab, file=out, flush=True)
    finally:
        if saved is None:
            os.environ.pop("SPARSECC_CACHE_DIR", None)
        else:
            os.environ["SPARSECC_CACHE_DIR"] = saved
        if tmp:
            # kernels loaded from it stay in this process's memory cache (k.ir() reads their
            # stages from the folder): remove it when the process ends, not now
            atexit.register(shutil.rmtree, tmp, True)
        _peer_threads(all_cores())

    fwd_bwd = [] if plans else _fwd_bwd(args, out)
    tag = (lambda r: f"{r['id']}@{r.get('threads')}t") if plans else (lambda r: r["id"])
    failed = [tag(r) for r in rows if not r["ok"]]
    if plans and plan_random:       # row 8's cases that failed (a result that differs, an error)
        failed += [f"random:{i}" for i in plan_random["summary"]["failed"]]
    missed = [tag(r) for r in rows if r.get("target") and not r["target"]["met"]]
    met = [tag(r) for r in rows if r.get("target") and r["target"]["met"]]
    # rows 9 and 8 carry their targets as named checks: count them with the table's rows
    named = []
    if plans:
        named += [(f"overhead:{k}", v) for k, v in plan_overhead["targets"].items()]
        if plan_random:
            named += [(f"random:{k}", v) for k, v in plan_random["summary"]["targets"].items()]
    missed += [k for k, v in named if not v]
    met += [k for k, v in named if v]
    thr_missed = [r["id"] for r in rows if r.get("thread_target") and r["thread_target"]["met"] is False]
    report = {
        "schema": SCHEMA,
        "machine": machine_info(threads),
        "config": {"small": bool(args.small), "threads": threads, "plans": bool(plans),
                   "plans_scale": getattr(args, "plans_scale", 1.0) if plans else None, "repeat": args.repeat,
                   "kernels": args.kernels, "seed": args.seed, "timing_budget_s": budget,
                   "bytes_per_value": VB, "bytes_per_index": IB},
        "bandwidth": stream,
        "worker_start_s": worker_s,
        "real_matrices": [{"name": n, "source": src, "shape": list(A.shape), "nnz": int(A.nnz)}
                          for n, (src, A) in real.items()],
        "results": rows,
        "fwd_bwd": fwd_bwd,
        "plan_overhead": plan_overhead if plans else None,
        "plan_random": plan_random if plans else None,
        "summary": {"failed": failed, "targets_missed": missed, "thread_targets_missed": thr_missed,
                    "targets_met": met},
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
    if args.png and rows:           # (none: --plans --kernels random, row 8 only)
        chart(rows, args.png, targets=getattr(args, "targets", False), title=f"sparsecc {report['machine']['sparsecc']} on {report['machine']['cpu']}, "
                              f"{threads} thread(s){' (small)' if args.small else ''}")
    print(file=out)
    for r in rows:
        for name, chk in r.get("baseline_checks", {}).items():
            if not chk["ok"]:
                print(f"note: baseline {name} disagrees on {r['id']}: {chk['detail']}", file=out)
    if getattr(args, "targets", False):
        print(f"targets met: {len(report['summary']['targets_met'])} of "
              f"{len(met) + len(missed)}"
              f"{'; missed: ' + ', '.join(missed) if missed else ''}"
              f"{'; thread targets missed: ' + ', '.join(thr_missed) if thr_missed else ''}", file=out)
    if failed:
        print(f"FAILED (wrong result or error): {', '.join(failed)}", file=out)
    if getattr(args, "markdown", None):
        with open(args.markdown, "w") as f:
            f.write(markdown(rows, targets=getattr(args, "targets", False)) + "\n")
    written = [p for p in (args.json, args.png, getattr(args, "markdown", None)) if p]
    if written:
        print(f"wrote {', '.join(written)}", file=out)
    return 1 if failed else 0


def _derivatives(args, out) -> int:
    """The derivative rows (bench/derivative_rows.py): a table, the JSON; 1 when a check failed."""
    from . import derivative_rows
    if args.cache_dir:
        os.environ["SPARSECC_CACHE_DIR"] = args.cache_dir
    scale = getattr(args, "derivatives_scale", 1.0)
    # one thread unless --threads says otherwise: the peers (CasADi's VM, SciPy) run on one,
    # and a parallel region on a loaded machine waits for its slowest thread
    import sparsecc as sc
    threads = args.threads or 1
    before = sc.get_num_threads()
    sc.set_num_threads(threads)
    try:
        # --repeat: the interleaved rounds (each side keeps its best); --small: short samples
        rs = derivative_rows.rows(scale, rounds=args.repeat or (2 if args.small else 3),
                                  budget=0.02 if args.small else 0.5, seed=args.seed)
    finally:
        sc.set_num_threads(before)
    text = derivative_rows.table(rs)
    print(f"derivatives (issue 26), scale {scale:g}, sparsecc on {threads} thread(s); ratio = sparsecc / peer (below 1: sparsecc faster)\n" + text,
          file=out, flush=True)
    failed = [r["id"] for r in rs if not r["ok"]]
    if args.json:
        import scipy

        casadi = derivative_rows._casadi()
        machine = {"cpu": cpu_model(), "cores": all_cores(), "platform": platform.platform(),
                   "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
                   "casadi": getattr(casadi, "__version__", None), "sparsecc": sc.__version__,
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadavg": list(os.getloadavg())}
        report = {"schema": SCHEMA, "machine": machine,
                  "config": {"derivatives": True, "derivatives_scale": scale, "seed": args.seed,
                             "threads": threads, "rounds": args.repeat or (2 if args.small else 3)},
                  "derivatives": rs, "summary": {"failed": failed}}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
    if getattr(args, "markdown", None):
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if failed:
        print(f"FAILED (wrong result): {', '.join(failed)}", file=out)
    return 1 if failed else 0


def _fwd_bwd(args, out) -> list[dict]:
    """The forward+backward rows (bench/torch_rows.py) when torch is installed, the whole
    suite runs (no --kernels) and --no-fwd-bwd is not given; printed as a second table."""
    if getattr(args, "no_fwd_bwd", False) or args.kernels:
        return []
    try:
        import torch  # noqa: F401
    except ImportError:
        return []
    from . import torch_rows
    rs = torch_rows.rows(n=1000 if args.small else 4096, rounds=2 if args.small else 5, seed=args.seed)
    print("\nforward+backward (sparsecc.torch vs torch.sparse; above 1: sparsecc faster)\n"
          + torch_rows.table(rs), file=out, flush=True)
    return rs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparsecc bench", description="the benchmark suite: sparsecc against SciPy/NumPy/torch/GraphBLAS")
    add_arguments(p)
    return run(p.parse_args(argv))
