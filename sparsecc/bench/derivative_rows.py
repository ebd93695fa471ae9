"""Derivative rows (issue 26): sparse Jacobians, Hessians and Hessian-vector products
against CasADi and SciPy, side by side in one run.

    python -m sparsecc bench --derivatives                   # the issue's sizes (minutes)
    python -m sparsecc bench --derivatives --derivatives-scale 0.1 --json d.json
    python -m sparsecc.bench.derivative_rows --scale 0.1

Rows:

- **Bratu 2-D Jacobian** on an N x N grid (N = 300 and 1000 at scale 1): the residual
  ``r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) - f[i]`` (L the 5-point Laplacian).
  sparsecc: ``J.values`` per call and ``J.pattern`` (warm: the kernel compiled; the first
  call, with its compile, is in the JSON). CasADi (when installed, the ``bench`` extra): the
  same residual as an SX expression, ``jacobian`` wrapped in a ``Function`` evaluated through
  its virtual machine (values), and ``jacobian_sparsity`` (the pattern alone). Targets:
  values <= 1.0x the fastest peer, pattern <= 0.1x CasADi's. SciPy's ``L + diags(lam *
  exp(u))`` written by hand is shown beside them (a reference, not an AD peer), and
  sparsejac on JAX (``sparsejac.jacrev`` jitted, one thread, the pattern given to it: it
  colours a pattern, it does not find one) where both install (the ``bench`` extra).
- **Least-squares Hessian**: ``f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)``, A 100k x 20k
  with 8 entries a row: ``H(...)`` against SciPy's ``2 * (A.T @ A)`` (<= 1.0x).
- **Hessian-vector product** of the same objective: ``sc.hvp`` against ``A.T @ (A @ v)`` (<= 1.2x).

Every row checks both sides agree before timing. The sides run interleaved, round after
round, each keeping its best median (the machine's load moves both alike). sparsecc runs on
one thread unless ``--threads`` says otherwise (the peers run on one). This is a
benchmark, not a test: nothing asserts a time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from .timing import measure

BRATU = "r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) - f[i]"
LSQ = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)"


def laplacian(N: int) -> sp.csr_array:
    h = 1.0 / (N + 1)
    T = sp.diags_array([-np.ones(N - 1), 2 * np.ones(N), -np.ones(N - 1)], offsets=[-1, 0, 1])
    L = sp.csr_array((sp.kron(sp.eye_array(N), T) + sp.kron(T, sp.eye_array(N))) / h ** 2)
    L.eliminate_zeros()          # kron of small grids stores the zeros of its blocks
    return L


def _best(sides: dict, rounds: int, budget: float) -> dict:
    """{name: best median seconds} of each side, run interleaved ``rounds`` times."""
    best = {k: float("inf") for k in sides}
    for _ in range(rounds):
        for k, fn in sides.items():
            best[k] = min(best[k], measure(fn, budget=budget)["median_s"])
    return best


def _casadi():
    try:
        import casadi
    except ImportError:
        return None
    return casadi


def _sparsejac(L, u: np.ndarray, lam: float, f: np.ndarray):
    """The Bratu residual's Jacobian through sparsejac on JAX (when both install: the
    ``bench`` extra), its pattern given (L's plus the diagonal: sparsejac colours it, it does
    not detect it), jitted, one CPU thread; (values callable, (indptr, indices, data) of its
    result), or None."""
    import os
    if "jax" not in __import__("sys").modules:
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    try:
        import jax
        import jax.numpy as jnp
        import sparsejac
        from jax.experimental import sparse as jsparse
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    n = L.shape[0]
    Lj = jsparse.BCOO.from_scipy_sparse(L)
    fj = jnp.asarray(f)
    pat = sp.coo_array(L + sp.eye_array(n))
    pat.sum_duplicates()
    sparsity = jsparse.BCOO((jnp.ones(pat.nnz, bool), jnp.stack([jnp.asarray(pat.row), jnp.asarray(pat.col)], 1)),
                            shape=(n, n))
    jac = jax.jit(sparsejac.jacrev(lambda x: Lj @ x + lam * jnp.exp(x) - fj, sparsity=sparsity))
    uj = jnp.asarray(u)

    def values():
        return jac(uj).data.block_until_ready()
    got = jac(uj)
    ij = np.asarray(got.indices)
    csr = sp.csr_array((np.asarray(got.data), (ij[:, 0], ij[:, 1])), shape=(n, n))
    csr.sort_indices()
    return values, csr


def bratu_row(N: int, rounds: int, budget: float, seed: int) -> dict:
    import sparsecc as sc
    L = laplacian(N)
    n = N * N
    rng = np.random.default_rng(seed)
    u, lam, f = rng.uniform(0.0, 1.0, n), -5.0, np.zeros(n)
    J = sc.jacobian(BRATU, wrt="u")
    t = time.perf_counter()
    indptr, indices = J.pattern(L=L)
    first_pattern = time.perf_counter() - t
    t = time.perf_counter()
    vals = J.values(L=L, u=u, lam=lam, f=f)
    first_values = time.perf_counter() - t
    hand = (L + sp.diags_array(lam * np.exp(u))).tocsr()
    hand.sort_indices()
    ok = np.array_equal(hand.indptr, indptr) and np.array_equal(hand.indices, indices) and \
        np.allclose(hand.data, vals, rtol=1e-13)
    sides = {"sparsecc values": lambda: J.values(L=L, u=u, lam=lam, f=f),
             "sparsecc pattern": lambda: J.pattern(L=L),
             "scipy by hand": lambda: (L + sp.diags_array(lam * np.exp(u))).data}
    row = {"id": f"bratu-jacobian N={N}", "n": n, "nnz": int(len(indices)), "ok": bool(ok),
           "first_pattern_s": first_pattern, "first_values_s": first_values}
    ca = _casadi()
    if ca is not None:
        Lc = L.tocsc()
        t = time.perf_counter()
        us = ca.SX.sym("u", n)
        Ld = ca.DM(ca.Sparsity(n, n, Lc.indptr.tolist(), Lc.indices.tolist()), Lc.data)
        r = ca.mtimes(Ld, us) + lam * ca.exp(us) - ca.DM(f)
        row["casadi_expression_s"] = time.perf_counter() - t
        t = time.perf_counter()
        pat = ca.jacobian_sparsity(r, us)
        row["casadi pattern"] = time.perf_counter() - t        # once: seconds at these sizes
        t = time.perf_counter()
        F = ca.Function("J", [us], [ca.jacobian(r, us)])
        row["casadi_jacobian_function_s"] = time.perf_counter() - t
        ud = ca.DM(u)
        got = sp.csr_array(F(ud).sparse())
        got.sort_indices()
        row["ok"] = bool(row["ok"] and pat.nnz() == len(indices) and np.array_equal(got.indptr, indptr)
                         and np.array_equal(got.indices, indices) and np.allclose(got.data, vals, rtol=1e-12))
        sides["casadi values"] = lambda: F(ud)
    sj = _sparsejac(L, u, lam, f)
    if sj is not None:
        sides["sparsejac values"], got = sj
        row["ok"] = bool(row["ok"] and np.array_equal(got.indptr, indptr) and np.array_equal(got.indices, indices)
                         and np.allclose(got.data, vals, rtol=1e-12))
    row.update(_best(sides, rounds, budget))
    peers = [row[k] for k in ("casadi values", "sparsejac values") if k in row]
    if peers:
        row["values_ratio"] = row["sparsecc values"] / min(peers)
        row["values_target"] = 1.0
    if "casadi pattern" in row:
        row["pattern_ratio"] = row["sparsecc pattern"] / row["casadi pattern"]
        row["pattern_target"] = 0.1
    row["vs_scipy_by_hand"] = row["sparsecc values"] / row["scipy by hand"]
    return row


def lsq_inputs(scale: float, seed: int):
    m, n = max(8, int(100_000 * scale)), max(8, int(20_000 * scale))
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, n, (m, 8))
    A = sp.csr_array((rng.standard_normal(m * 8), cols.ravel(), np.arange(0, 8 * m + 1, 8)), shape=(m, n))
    A.sum_duplicates()
    return sp.csr_array(A), rng.standard_normal(n), rng.standard_normal(m), rng.standard_normal(n)


def hessian_rows(scale: float, rounds: int, budget: float, seed: int) -> list[dict]:
    import sparsecc as sc
    A, x, b, v = lsq_inputs(scale, seed)
    H, hv = sc.hessian(LSQ, wrt="x"), sc.hvp(LSQ, wrt="x")
    size = f"A {A.shape[0]}x{A.shape[1]}, {A.nnz} nnz"
    t = time.perf_counter()
    Hm = H(A=A, x=x, b=b)
    first_h = time.perf_counter() - t
    want = (2 * (A.T @ A)).tocsr()
    ok_h = Hm.shape == want.shape and abs(Hm - want).max() <= 1e-12 * max(1.0, abs(want).max())
    t = time.perf_counter()
    got = hv(A=A, x=x, b=b, tangent=v)
    first_v = time.perf_counter() - t
    ok_v = np.allclose(got, 2 * (A.T @ (A @ v)), rtol=1e-12, atol=1e-12)
    best = _best({"sparsecc H": lambda: H(A=A, x=x, b=b), "scipy 2*A.T@A": lambda: 2 * (A.T @ A)}, rounds, budget)
    hrow = {"id": "lsq-hessian", "size": size, "nnz": int(Hm.nnz), "ok": bool(ok_h), "first_s": first_h,
            "sparsecc": best["sparsecc H"], "peer": best["scipy 2*A.T@A"], "peer_name": "scipy 2*(A.T@A)",
            "ratio": best["sparsecc H"] / best["scipy 2*A.T@A"], "target": 1.0}
    best = _best({"sparsecc hvp": lambda: hv(A=A, x=x, b=b, tangent=v), "scipy": lambda: A.T @ (A @ v)},
                 rounds, budget)
    vrow = {"id": "lsq-hvp", "size": size, "ok": bool(ok_v), "first_s": first_v, "sparsecc": best["sparsecc hvp"],
            "peer": best["scipy"], "peer_name": "scipy A.T@(A@v)", "ratio": best["sparsecc hvp"] / best["scipy"],
            "target": 1.2}
    return [hrow, vrow]


def rows(scale: float = 1.0, rounds: int = 3, budget: float = 0.5, seed: int = 0) -> list[dict]:
    """Every derivative row at ``scale`` (the grid side and A's dimensions multiplied by it)."""
    out = []
    for N in (300, 1000):
        out.append(bratu_row(max(4, int(round(N * scale))), rounds, budget, seed))
    out += hessian_rows(scale, rounds, budget, seed)
    for r in out:
        for what in ("values", "pattern", ""):
            ratio, target = r.get(f"{what}_ratio" if what else "ratio"), r.get(f"{what}_target" if what else "target")
            if ratio is not None:
                r[f"{what}_met" if what else "met"] = bool(ratio <= target)
    return out


def _ms(s):
    return "-" if s is None else f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def table(rs: list[dict]) -> str:
    """The rows as a Markdown table: sparsecc, the peer, the ratio (below 1: sparsecc faster)."""
    lines = ["| row | what | sparsecc | peer | ratio | target | met | check |", "|---|---|---:|---:|---:|---|---|---|"]
    for r in rs:
        chk = "ok" if r["ok"] else "FAILED"
        if r["id"].startswith("bratu"):
            size = f"{r['n']:,} unknowns, {r['nnz']:,} nnz"
            for what, mine, peer, name in (("values", "sparsecc values", "casadi values", "CasADi VM"),
                                           ("pattern", "sparsecc pattern", "casadi pattern", "CasADi jacobian_sparsity")):
                ratio = r.get(f"{what}_ratio")
                lines.append(f"| {r['id']} ({size}) | {what} | {_ms(r[mine])} | {_ms(r.get(peer))} {name} | "
                             f"{'-' if ratio is None else f'{ratio:.3g}'} | <= {r.get(f'{what}_target', '-')} | "
                             f"{'-' if ratio is None else 'yes' if r[f'{what}_met'] else 'no'} | {chk} |")
            if "sparsejac values" in r:
                lines.append(f"| {r['id']} | values vs sparsejac (JAX, pattern given) | {_ms(r['sparsecc values'])} | "
                             f"{_ms(r['sparsejac values'])} sparsejac | "
                             f"{r['sparsecc values'] / r['sparsejac values']:.3g} | (peer) | | |")
            lines.append(f"| {r['id']} | values vs SciPy by hand | {_ms(r['sparsecc values'])} | "
                         f"{_ms(r['scipy by hand'])} L + diags | {r['vs_scipy_by_hand']:.3g} | (reference) | | |")
        else:
            lines.append(f"| {r['id']} ({r['size']}) | {'Hessian' if r['id'] == 'lsq-hessian' else 'H @ v'} | "
                         f"{_ms(r['sparsecc'])} | {_ms(r['peer'])} {r['peer_name']} | {r['ratio']:.3g} | "
                         f"<= {r['target']} | {'yes' if r['met'] else 'no'} | {chk} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparsecc.bench.derivative_rows", description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="sparsecc's thread count (the peers run on one)")
    args = p.parse_args(argv)
    import sparsecc as sc
    sc.set_num_threads(args.threads)     # as `python -m sparsecc bench --derivatives` does
    rs = rows(args.scale, args.rounds, seed=args.seed)
    print(table(rs))
    return 0 if all(r["ok"] for r in rs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
