"""Row 8 of issue 24: random einsums of 3 to 5 operands (``python -m sparsecc bench --plans``,
``--plans-random N`` cases, default 100; ``--plans-scale`` scales the sizes).

Each case is drawn from one seeded generator: a connected expression (every operand after
the first shares one index with those before, now and then two: a cycle), its output (none,
one or two of its indices), and per index a size - a "big" one, log-uniform in 1k-50k
(times ``scale``), or a feature width of 4-32 for a dense operand's second dimension.  Two-
dimensional operands over two big indices are sparse (CSR or COO, 2-8 entries a row); one
over a big index and a feature width is dense or sparse; vectors are dense.  An output has at
most one big index stored dense (a second one makes the result sparse, as sparsecc's default
result format does for sparse operands).

Timed side by side, 1 thread: sparsecc planned (``optimize=True``), sparsecc's one loop nest
(``optimize=False``) and opt_einsum's ``contract`` over pydata/sparse COO arrays
(``backend="sparse"``) where both are importable.  The one nest over big random indices can
take minutes: a case whose one nest the planner estimates above :data:`NEST_LIMIT_S` has its
big sizes halved (down to 1k) before anything runs, and a call over :data:`ONCE_S` is timed
by that one call (marked "1 call").  Every result is checked against the
one nest's (and opt_einsum's where it ran).  The row's targets: no case slower than 1.2x
its one nest; geometric means <= 0.3x the one nest and <= 0.1x opt_einsum.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from .timing import measure

#: a case's one nest (estimated by the planner, or its first call) stays under this
NEST_LIMIT_S = 1.0
#: a peer call measured once above this is not repeated
ONCE_S = 0.5
#: a case (its compiles, every call) runs in a process of its own cut after this
CASE_TIMEOUT_S = 120.0
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _opt_einsum():
    try:
        import opt_einsum
        import sparse
    except ImportError:
        return None
    return opt_einsum, sparse


def random_expression(rng, scale: float = 1.0) -> dict:
    """One case: ``{"expr", "shapes", "kinds"}`` (kinds per operand: "csr", "coo", "dense")."""
    n_ops = int(rng.integers(3, 6))
    big, feature = {}, {}
    used: list[str] = []

    def fresh(is_big: bool) -> str:
        name = LETTERS[len(big) + len(feature)]
        if is_big:
            big[name] = max(64, int(round(math.exp(rng.uniform(math.log(1000), math.log(50_000))) * scale)))
        else:
            feature[name] = int(rng.integers(4, 33))
        return name

    terms, kinds = [], []
    first = (fresh(True), fresh(True))
    terms.append(first)
    kinds.append(str(rng.choice(["csr", "coo"])))
    used += first
    for _ in range(n_ops - 1):
        bigs = [i for i in used if i in big]
        shared = str(rng.choice(bigs))
        roll = rng.random()
        if roll < 0.2:                                  # a vector on a big index
            terms.append((shared,))
            kinds.append("dense")
        elif roll < 0.4:                                # a dense feature matrix
            w = next((i for i in used if i in feature), None) if rng.random() < 0.5 else None
            w = w or fresh(False)
            terms.append((shared, w))
            kinds.append("dense")
            used.append(w)
        elif roll < 0.5 and len(bigs) > 1:              # a cycle: two indices seen before
            other = str(rng.choice([i for i in bigs if i != shared]))
            terms.append((shared, other))
            kinds.append(str(rng.choice(["csr", "coo"])))
        else:                                           # a sparse matrix to a new big index
            new = fresh(True)
            terms.append((shared, new) if rng.random() < 0.7 else (new, shared))
            kinds.append(str(rng.choice(["csr", "coo"])))
            used.append(new)
    indices = list(dict.fromkeys(i for t in terms for i in t))
    n_out = int(rng.choice([0, 1, 1, 2]))
    out = [str(i) for i in rng.permutation(indices)[:n_out]]
    if sum(i in big for i in out) > 1:
        out = [i for i in out if i in big][:2]          # two big indices: a sparse result
    sizes = {**big, **feature}
    expr = ",".join("".join(t) for t in terms) + "->" + "".join(out)
    return {"expr": expr, "terms": terms, "out": out, "sizes": sizes, "big": sorted(big), "kinds": kinds,
            "per_row": [int(rng.integers(2, 9)) for _ in terms]}


def operands(case: dict, rng) -> list:
    """The case's operands (seeded): sparse ones with ``per_row`` entries a row."""
    from .generators import uniform_rows
    ops = []
    for t, kind, k in zip(case["terms"], case["kinds"], case["per_row"]):
        shape = tuple(case["sizes"][i] for i in t)
        if kind == "dense":
            ops.append(rng.random(shape))
            continue
        A = uniform_rows(shape[0], shape[1], min(k, shape[1]), rng)
        ops.append(sp.coo_array(A) if kind == "coo" else A)
    return ops


def _shrink(case: dict) -> dict:
    sizes = dict(case["sizes"])
    for i in case["big"]:
        sizes[i] = max(1000 if sizes[i] >= 1000 else sizes[i], sizes[i] // 2)
    return {**case, "sizes": sizes}


def _formats(case: dict) -> tuple:
    return tuple(case["kinds"])


def _out_format(case: dict):
    return "csr" if sum(i in case["big"] for i in case["out"]) > 1 else None


def _first_call(fn, limit: float) -> float | None:
    """Seconds of one call of ``fn`` run in a forked child (its kernels compiled and loaded
    already), or None where it ran past ``limit`` seconds (the child is killed): native code
    cannot be interrupted in the process itself.  Where fork is missing, the call here."""
    import os
    import select
    import signal
    if not hasattr(os, "fork"):
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                # the child: one call, its time down the pipe, no cleanup
        try:
            t = time.perf_counter()
            fn()
            os.write(w, repr(time.perf_counter() - t).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], limit)
        got = os.read(r, 64).decode() if ready else ""
    finally:
        os.close(r)
        if not got:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return float(got) if got else None


def _tiny(case: dict, rng) -> list:
    """Operands of the case's kinds with every size 8: a call on them compiles the kernels a
    call on the real ones loads (the same specialization)."""
    return operands({**case, "sizes": {i: 8 for i in case["sizes"]}}, rng)


def _time(fn, budget: float) -> tuple[float, bool]:
    """Seconds a call: the median of several, or one call where it takes over
    :data:`ONCE_S` (then True)."""
    t = time.perf_counter()
    fn()
    once = time.perf_counter() - t
    if once > ONCE_S:
        return once, True
    return measure(fn, None, budget)["median_s"], False


def _dense(x) -> np.ndarray:
    if hasattr(x, "todense") and not isinstance(x, np.ndarray):
        x = x.todense()
    return np.asarray(x, dtype=np.float64)


def run_case(case: dict, seed: int, budget: float = 0.2) -> dict:
    """Time one case (module docstring); the row's entry for it."""
    import sparsecc as sc
    for _ in range(8):              # big sizes halved while the planner's one-nest estimate is over the limit
        ops = operands(case, np.random.default_rng(seed))
        planned = sc.compile(case["expr"], *_formats(case), out_format=_out_format(case))
        # (an expression that is no product - element-wise - compiles as a plain kernel: its one nest)
        plan = planned.plan(*ops) if hasattr(planned, "plan") else sc.plan(case["expr"], *ops)
        est = plan.single_seconds if plan.single_seconds is not None else plan.seconds
        if est is None or est <= NEST_LIMIT_S or all(case["sizes"][i] <= 1000 for i in case["big"]):
            break
        case = _shrink(case)
    row = {"expr": case["expr"], "kinds": list(case["kinds"]), "shapes": [list(np.shape(x)) for x in ops],
           "steps": len(plan.steps), "est_one_nest_s": est, "ok": True, "error": None}
    try:
        nest = sc.compile(case["expr"], *_formats(case), out_format=_out_format(case), optimize=False)
        nest(*_tiny(case, np.random.default_rng(seed)))     # compiled here, so the child only runs it
        y = planned(*ops)
        row["sparsecc_s"], _ = _time(lambda: planned(*ops), budget)
        first = _first_call(lambda: nest(*ops), NEST_LIMIT_S * 4)
        if first is None:           # past the limit: "> limit", its result not checked
            row["one_nest_s"], row["one_nest_timeout"], row["one_nest_once"] = NEST_LIMIT_S * 4, True, True
            ok = True
        else:
            ref = nest(*ops)
            ok = np.allclose(_dense(y), _dense(ref), rtol=1e-8, atol=1e-8)
            row["one_nest_s"], row["one_nest_once"] = (first, True) if first > ONCE_S else _time(
                lambda: nest(*ops), budget)
        peer = _opt_einsum()
        if peer is not None:
            oe, sparse = peer
            pops = [x if isinstance(x, np.ndarray) else sparse.COO.from_scipy_sparse(x) for x in ops]
            got = oe.contract(case["expr"], *pops, backend="sparse")
            ok = ok and np.allclose(_dense(got), _dense(y), rtol=1e-8, atol=1e-8)
            row["opt_einsum_s"], row["opt_einsum_once"] = _time(
                lambda: oe.contract(case["expr"], *pops, backend="sparse"), budget)
        row["ok"] = bool(ok)
        if not ok:
            row["error"] = "results differ"
    except Exception as e:      # noqa: BLE001 - a case that fails is reported, the row goes on
        row["ok"], row["error"] = False, f"{type(e).__name__}: {e}"[:300]
    return row


def random_rows(n: int = 100, seed: int = 0, scale: float = 1.0, budget: float = 0.2, out=None,
                case_timeout: float | None = CASE_TIMEOUT_S) -> dict:
    """Row 8: ``n`` seeded cases (:func:`random_expression`), each timed (:func:`run_case`) in
    a process of its own cut at ``case_timeout`` seconds (None: here, uncut), and the summary:
    ratios to the one nest and to opt_einsum, their geometric means, the worst ratio to the
    one nest, and the targets."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n):
        case = random_expression(rng, scale)
        if case_timeout is None:
            r = run_case(case, seed * 1000 + k, budget)
        else:
            r = _isolated(case, seed * 1000 + k, budget, case_timeout)
        r["id"] = k
        rows.append(r)
        if out is not None:
            print(case_line(r), file=out, flush=True)
    return {"cases": rows, "summary": summarize(rows), "n": n, "seed": seed, "scale": scale}


def _isolated(case: dict, seed: int, budget: float, timeout: float) -> dict:
    """:func:`run_case` in a fresh process (1 thread) cut at ``timeout`` seconds: a planned
    call, a step or a peer that runs for minutes is reported, not waited for."""
    import json
    import subprocess
    import sys
    code = ("import json, sys; from sparsecc.runtime.threads import set_num_threads; set_num_threads(1); "
            "from sparsecc.bench.plan_random import run_case; "
            "a = json.loads(sys.stdin.read()); print('ROW ' + json.dumps(run_case(a[0], a[1], a[2]), default=float))")
    import os
    import pathlib
    here = str(pathlib.Path(__file__).resolve().parents[2])     # this sparsecc, not another on the path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    try:
        got = subprocess.run([sys.executable, "-c", code], input=json.dumps([case, seed, budget]), text=True,
                             capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"expr": case["expr"], "kinds": list(case["kinds"]), "ok": False,
                "error": f"timeout: the case ran past {timeout:g} s"}
    line = next((ln for ln in got.stdout.splitlines() if ln.startswith("ROW ")), None)
    if line is None:
        return {"expr": case["expr"], "kinds": list(case["kinds"]), "ok": False,
                "error": f"the case's process failed: {got.stderr.strip()[-300:]}"}
    return json.loads(line[4:])


def summarize(rows: list[dict]) -> dict:
    good = [r for r in rows if r["ok"]]
    nest = [r["sparsecc_s"] / r["one_nest_s"] for r in good]
    peer = [r["sparsecc_s"] / r["opt_einsum_s"] for r in good if r.get("opt_einsum_s")]

    def gmean(v):
        return float(math.exp(sum(map(math.log, v)) / len(v))) if v else None
    s = {"cases": len(rows), "failed": [r["id"] for r in rows if not r["ok"]],
         "gmean_vs_one_nest": gmean(nest), "worst_vs_one_nest": max(nest) if nest else None,
         "gmean_vs_opt_einsum": gmean(peer), "worst_vs_opt_einsum": max(peer) if peer else None,
         "one_nest_once": sum(bool(r.get("one_nest_once")) for r in good),
         "one_nest_timeouts": sum(bool(r.get("one_nest_timeout")) for r in good)}
    s["targets"] = {"worst_vs_one_nest <= 1.2": s["worst_vs_one_nest"] is not None and s["worst_vs_one_nest"] <= 1.2,
                    "gmean_vs_one_nest <= 0.3": s["gmean_vs_one_nest"] is not None and s["gmean_vs_one_nest"] <= 0.3,
                    "gmean_vs_opt_einsum <= 0.1": (s["gmean_vs_opt_einsum"] is not None
                                                   and s["gmean_vs_opt_einsum"] <= 0.1)}
    return s


def _ms(v, once=False) -> str:
    return "-" if v is None else f"{v * 1e3:.3g}" + ("(1 call)" if once else "")


def case_line(r: dict) -> str:
    if not r["ok"]:
        return f"  {r['id']:3d} {r['expr']:26} FAILED {r['error']}"
    oe = r.get("opt_einsum_s")
    return (f"  {r['id']:3d} {r['expr']:26} {','.join(k[:3] for k in r['kinds']):23} steps {r['steps']}  "
            f"sparsecc {_ms(r['sparsecc_s'])} ms  one nest "
            f"{'>' if r.get('one_nest_timeout') else ''}{_ms(r['one_nest_s'], r['one_nest_once'])} ms "
            f"({r['sparsecc_s'] / r['one_nest_s']:.2f})  opt_einsum "
            f"{_ms(oe, r.get('opt_einsum_once'))} ms" + (f" ({r['sparsecc_s'] / oe:.3f})" if oe else ""))


def summary_line(res: dict) -> str:
    s = res["summary"]

    def f(v, p=3):
        return "-" if v is None else f"{v:.{p}g}"
    met = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in s["targets"].items())
    return (f"random einsums (row 8): {s['cases']} cases (seed {res['seed']}, scale {res['scale']:g}), "
            f"{len(s['failed'])} failed; sparsecc / optimize=False geometric mean {f(s['gmean_vs_one_nest'])}, "
            f"worst {f(s['worst_vs_one_nest'])} ({s['one_nest_once']} one nests timed by one call, {s['one_nest_timeouts']} cut at {4 * NEST_LIMIT_S:g} s: counted as that, a bound in the one nest's favour); "
            f"sparsecc / opt_einsum(sparse) geometric mean {f(s['gmean_vs_opt_einsum'])}; targets {met}")
