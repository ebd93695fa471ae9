"""The lazy-array rows (``python -m sparsecc bench --lazy``; issue 25's benchmark list):
programs written with ``sc.lazy`` / ``@sc.fused`` next to the same loop written with
SciPy/NumPy (the reference and the target's), torch where it is importable, each at 1
thread and all cores in one run.  ``scale`` multiplies the issue's sizes (``--lazy-scale``;
1: the issue's: PageRank on 2^18 vertices, CG on a 1000 x 1000 grid, GCN on 100k nodes).
Row 6, :func:`overhead`, times a cached ``@sc.fused`` call against its program and against
its kernels called directly."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .baselines import _torch, _torch_csr
from .generators import poisson2d, rmat, uniform_rows
from .timing import measure


def _programs():
    """The rows' lazy programs (built on first use: ``import sparsecc.bench`` traces nothing)."""
    import sparsecc as sc
    L = sc.lazy

    @sc.fused
    def pagerank_step(A, r, inv_deg, d, n):
        return (1 - d) / n + d * (A.T @ (r * inv_deg))

    @sc.fused
    def direction(A, p):
        Ap = A @ p
        return Ap, L.vecdot(p, Ap)

    @sc.fused
    def update(x, r, p, Ap, alpha):
        return x + alpha * p, r - alpha * Ap, L.vecdot(r - alpha * Ap, r - alpha * Ap)

    @sc.fused
    def next_p(r, p, beta):
        return r + beta * p

    @sc.fused
    def gcn(A, X, W1, W2):
        H = L.maximum(A @ (X @ W1), 0.0)
        return A @ (H @ W2)

    @sc.fused
    def exp_chain(A, B):
        return L.exp(2 * A + 1) * B

    @sc.fused
    def sq_rows(A, B):
        return ((A - B) ** 2).sum(axis=1)

    return dict(pagerank=pagerank_step, direction=direction, update=update, next_p=next_p, gcn=gcn,
                exp_chain=exp_chain, sq_rows=sq_rows)


_P: dict = {}


def programs() -> dict:
    if not _P:
        _P.update(_programs())
    return _P


# ----------------------------------------------------------------------------- the rows
def _pagerank_rows(scale: float, rng):
    log2 = max(6, int(round(18 + math.log2(scale))))
    A = rmat(log2, 8, rng)
    A.data[:] = 1.0
    n = A.shape[0]
    deg = np.asarray(A.sum(axis=1)).ravel()
    inv_deg = np.divide(1.0, deg, out=np.zeros(n), where=deg > 0)
    step = programs()["pagerank"]

    def ours():
        r = np.full(n, 1.0 / n)
        for _ in range(20):
            r = step(A, r, inv_deg, 0.85, n)
        return r

    def scipy_loop():
        r = np.full(n, 1.0 / n)
        for _ in range(20):
            r = (1 - 0.85) / n + 0.85 * (A.T @ (r * inv_deg))
        return r

    peers = {"scipy loop": scipy_loop}
    torch = _torch()
    if torch is not None:
        tAT = _torch_csr(sp.csr_array(A.T))
        tinv = torch.from_numpy(inv_deg)

        def torch_loop():
            r = torch.full((n,), 1.0 / n, dtype=torch.float64)
            for _ in range(20):
                r = (1 - 0.85) / n + 0.85 * torch.mv(tAT, r * tinv)
            return r.numpy()
        peers["torch loop"] = torch_loop
    return dict(id=f"pagerank20:rmat2^{log2}", ours=ours, peers=peers, target=0.7,
                note=f"{n} vertices, {A.nnz} edges, 20 iterations of @sc.fused pagerank_step")


def _cg_rows(scale: float, rng):
    m = max(8, int(round(1000 * math.sqrt(scale))))
    A = poisson2d(m)
    b = rng.random(m * m)
    P = programs()
    direction, update, next_p = P["direction"], P["update"], P["next_p"]
    iters = 50

    def ours():
        x = np.zeros_like(b)
        r = b.copy()
        p = r.copy()
        rr = float(r @ r)
        for _ in range(iters):
            Ap, pAp = direction(A, p)
            alpha = np.float64(rr / pAp)
            x, r, rr_new = update(x, r, p, Ap, alpha)
            beta = np.float64(rr_new / rr)
            rr = float(rr_new)
            p = next_p(r, p, beta)
        return x

    def scipy_cg():
        # rtol 0: the 50 iterations run (SciPy's loop, its own vector updates)
        x, _ = spla.cg(A, b, rtol=0.0, atol=0.0, maxiter=iters)
        return x
    return dict(id=f"cg50:poisson2d{m}", ours=ours, peers={"scipy cg": scipy_cg}, target=0.8,
                note=f"{m * m} unknowns, {A.nnz} entries, 50 iterations of three @sc.fused steps", rtol=1e-6)


def _gcn_rows(scale: float, rng):
    n = max(64, int(round(100_000 * scale)))
    A = uniform_rows(n, n, 10, rng)
    X = rng.random((n, 128))
    W1 = rng.random((128, 64)) - 0.5
    W2 = rng.random((64, 16)) - 0.5
    gcn = programs()["gcn"]
    peers = {}
    torch = _torch()
    if torch is not None:
        tA = _torch_csr(A)
        tX, tW1, tW2 = torch.from_numpy(X), torch.from_numpy(W1), torch.from_numpy(W2)

        def torch_gcn():
            H = torch.relu(torch.sparse.mm(tA, tX @ tW1))
            return torch.sparse.mm(tA, H @ tW2).numpy()
        peers["torch.sparse.mm"] = torch_gcn
    peers["scipy"] = lambda: A @ (np.maximum(A @ (X @ W1), 0.0) @ W2)
    return dict(id=f"gcn2:uniform{n}", ours=lambda: gcn(A, X, W1, W2), peers=peers,
                target=1.0 if torch is not None else None,
                note=f"two layers 128->64->16 on {n} nodes, 10 per row" +
                     ("" if torch is not None else " (torch absent: no target peer)"))


def _elementwise_rows(scale: float, rng):
    n = max(64, int(round(100_000 * scale)))
    A, B = uniform_rows(n, n, 10, rng), uniform_rows(n, n, 10, rng)
    P = programs()
    exp_chain, sq_rows = P["exp_chain"], P["sq_rows"]
    # SciPy refuses sparse + nonzero scalar: its operator chain for exp(2A+1) * B is
    # e * (expm1(2A) * B + B) (four sparse operations, the same values)
    rows = [dict(id=f"exp(2A+1)*B:uniform{n}", ours=lambda: exp_chain(A, B),
                 peers={"scipy chain": lambda: np.e * ((2 * A).expm1().multiply(B) + B)}, target=0.5,
                 note="one kernel over B's pattern (SciPy: e*(expm1(2A).multiply(B) + B))"),
            dict(id=f"sum((A-B)**2,1):uniform{n}", ours=lambda: sq_rows(A, B),
                 peers={"scipy chain": lambda: (A - B).power(2).sum(axis=1)}, target=0.5,
                 note="one kernel (SciPy: (A - B).power(2).sum(axis=1))")]
    return rows


def lazy_rows(scale: float = 1.0, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [_pagerank_rows(scale, rng), _cg_rows(scale, rng), _gcn_rows(scale, rng)] + \
        _elementwise_rows(scale, rng)


def _value(r):
    """A result as a NumPy array, or a CSR array for a sparse one (never densified: a
    100k x 100k result)."""
    if sp.issparse(r):
        return sp.csr_array(r)
    return np.asarray(r.numpy() if hasattr(r, "numpy") else r)


def _agree(got, ref, rtol: float) -> tuple[bool, float]:
    """Whether ``got`` equals ``ref`` within ``rtol`` (relative to ref's largest entry), and
    the largest difference."""
    if got.shape != ref.shape:
        return False, float("inf")
    diff = got - ref
    if sp.issparse(diff):
        d = float(abs(diff).max()) if diff.nnz else 0.0
        big = float(abs(ref).max()) if ref.nnz else 0.0
    else:
        d = float(np.abs(np.asarray(diff)).max()) if diff.size else 0.0
        big = float(np.abs(np.asarray(ref)).max()) if np.size(ref) else 0.0
    return d <= 1e-10 + rtol * big, d


def run_row(row: dict, threads: int, repeat=None, budget: float = 0.6) -> dict:
    """Time ``row``'s lazy program and its peers at ``threads`` (peers too, where they
    thread: torch); check each peer's result against the program's."""
    from ..runtime.threads import set_num_threads
    set_num_threads(threads)
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(threads)
    out = {"id": row["id"], "threads": threads, "note": row["note"], "ok": True, "error": None}
    try:
        got = _value(row["ours"]())                  # traces and compiles outside the timing
        out["sparsecc_ms"] = measure(row["ours"], repeat, budget)["median_s"] * 1e3
        bases = {}
        for name, fn in row["peers"].items():
            agrees, diff = _agree(got, _value(fn()), row.get("rtol", 1e-8))
            ms = measure(fn, repeat, budget)["median_s"] * 1e3
            bases[name] = {"ms": ms, "ratio": out["sparsecc_ms"] / ms, "agrees": bool(agrees)}
            if not agrees:
                out["ok"] = False
                out["error"] = f"{name} disagrees (largest difference {diff:.3g})"
        out["baselines"] = bases
        ref = next(iter(bases))
        if row.get("target") is not None:
            out["target"] = {"ratio": row["target"], "vs": ref, "met": bases[ref]["ratio"] <= row["target"]}
    except Exception as err:       # noqa: BLE001 - a row's failure is reported, the others run
        out["ok"], out["error"] = False, f"{type(err).__name__}: {err}"
    return out


# --------------------------------------------------------------------------- row 6: overhead
def overhead(repeat=None, budget: float = 0.3) -> dict:
    """A cached ``@sc.fused`` PageRank step on a 10-vertex graph: the call, its program
    called directly (its plan and step table per call, which a cached call's replay skips),
    and the program's kernels called directly; the issue's figure is the call minus the
    kernels (the trace-key lookup, the operand list, the replay)."""
    from ..program import Program  # noqa: F401  (the program type the fused call holds)
    rng = np.random.default_rng(1)
    A = uniform_rows(10, 10, 3, rng)
    r, inv = rng.random(10), rng.random(10)
    step = programs()["pagerank"]
    step(A, r, inv, 0.85, 10)
    compiled, _ = next(iter(step.cache.values()))
    env = {name: (n.value if n.value is not None else (A, r, inv, 0.85, 10)[n.op]) for name, n in compiled.leaves}
    prog = compiled.program
    needed = {k: v for k, v in env.items() if k in set(prog.operands)}
    kernels = [(s, prog._kernel(s)) for s in prog.statements]

    def direct():
        vals = dict(needed)
        for s, k in kernels:
            vals[s.output] = k(*[vals[n] for n in s.operands])
        return vals
    row = {"id": "overhead:fused-pagerank10", "statements": len(prog.statements)}
    row["call_us"] = measure(lambda: step(A, r, inv, 0.85, 10), repeat, budget)["median_s"] * 1e6
    row["program_us"] = measure(lambda: prog(**needed), repeat, budget)["median_s"] * 1e6
    row["kernels_us"] = measure(direct, repeat, budget)["median_s"] * 1e6
    row["overhead_us"] = row["call_us"] - row["kernels_us"]
    row["target"] = {"overhead_us < 5": row["overhead_us"] < 5.0}
    return row


def overhead_line(r: dict) -> str:
    return (f"overhead (cached @sc.fused pagerank step, 10 vertices, {r['statements']} statement(s), 1 thread): call "
            f"{r['call_us']:.1f}us, its program called directly {r['program_us']:.1f}us, its kernels called directly "
            f"{r['kernels_us']:.1f}us: +{r['overhead_us']:.1f}us beside the kernels (target < 5us; the replay skips the "
            f"program's own step table)")


def table(rows: list[dict]) -> str:
    """One line per row and thread count: sparsecc, the reference, the ratio (below 1:
    sparsecc faster), the target, the other peers."""
    hdr = f"{'row':30} {'thr':>3} {'sparsecc':>10} {'reference':>24} {'ratio':>6} {'target':>7} {'met':>4}  others"
    lines = ["lazy programs (times in ms; ratio = sparsecc / reference)", hdr, "-" * len(hdr)]
    for r in rows:
        if not r["ok"] and "baselines" not in r:
            lines.append(f"{r['id'][:30]:30} {r['threads']:>3}  FAILED {r['error'][:140]}")
            continue
        bases = r["baselines"]
        ref = next(iter(bases))
        tgt = r.get("target")
        others = ", ".join(f"{n} {b['ms']:.2f} ({b['ratio']:.2f})" for n, b in bases.items() if n != ref)
        lines.append(f"{r['id'][:30]:30} {r['threads']:>3} {r['sparsecc_ms']:>10.2f} "
                     f"{ref + ' ' + format(bases[ref]['ms'], '.2f'):>24} {bases[ref]['ratio']:>6.2f} "
                     f"{'<= ' + format(tgt['ratio'], 'g') if tgt else '-':>7} "
                     f"{('yes' if tgt['met'] else 'NO') if tgt else '-':>4}  {others}"
                     + ("" if r["ok"] else f"  FAILED {r['error'][:80]}"))
    return "\n".join(lines)


def run(args, out, machine: dict, schema: str) -> int:
    """``--lazy``: every row at 1 thread and at all cores, then the overhead row; the table
    on ``out``, the figures in ``args.json`` (and the table in ``args.markdown``)."""
    import json
    import os
    import shutil
    import tempfile

    threads = args.threads or os.cpu_count() or 1
    small = bool(args.small)
    scale = 0.005 if small else getattr(args, "lazy_scale", 1.0)
    budget = 0.05 if small else 0.6
    saved = os.environ.get("SPARSECC_CACHE_DIR")
    tmp = None if args.cache_dir else tempfile.mkdtemp(prefix="sparsecc-bench-cache-")
    os.environ["SPARSECC_CACHE_DIR"] = args.cache_dir or tmp
    try:
        specs = lazy_rows(scale, args.seed)
        rows = []
        print(f"sparsecc bench --lazy: {machine['cpu']}, scale {scale:g}, 1 and {threads} thread(s)", file=out)
        for th in sorted({1, threads}):
            for spec in specs:
                rows.append(run_row(spec, th, args.repeat, budget))
                print(table(rows[-1:]).splitlines()[-1] if rows[1:] else table(rows[-1:]), file=out, flush=True)
        from ..runtime.threads import set_num_threads
        set_num_threads(1)
        ov = overhead(args.repeat, 0.05 if small else 0.3)
        set_num_threads(threads)
        print(overhead_line(ov), file=out, flush=True)
    finally:
        if saved is None:
            os.environ.pop("SPARSECC_CACHE_DIR", None)
        else:
            os.environ["SPARSECC_CACHE_DIR"] = saved
        if tmp:
            import atexit
            atexit.register(shutil.rmtree, tmp, True)
    failed = [f"{r['id']}@{r['threads']}t" for r in rows if not r["ok"]]
    report = {"schema": schema, "machine": machine,
              "config": {"lazy": True, "small": small, "lazy_scale": scale, "threads": threads,
                         "repeat": args.repeat, "seed": args.seed, "timing_budget_s": budget},
              "results": rows, "fused_overhead": ov,
              "summary": {"failed": failed,
                          "targets_met": [f"{r['id']}@{r['threads']}t" for r in rows
                                          if r.get("target") and r["target"]["met"]],
                          "targets_missed": [f"{r['id']}@{r['threads']}t" for r in rows
                                             if r.get("target") and not r["target"]["met"]]}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
    if getattr(args, "markdown", None):
        with open(args.markdown, "w") as f:
            f.write("```text\n" + table(rows) + "\n" + overhead_line(ov) + "\n```\n")
    if failed:
        print(f"FAILED (wrong result or error): {', '.join(failed)}", file=out)
    return 1 if failed else 0
