"""The planner's rows (``python -m sparsecc bench --plans``; issue 24's benchmark list): each
expression of three or more operands next to the hand-ordered SciPy/NumPy/torch composition a
user would write (the first baseline: the reference and the target's), GraphBLAS where it is
importable, and sparsecc's own one loop nest (``optimize=False``, a column of its own, not a
peer).  ``scale`` multiplies the issue's sizes (``--plans-scale``; 1: the issue's); ``small``
gives tiny inputs for tests.  :func:`overhead` measures row 9: a repeated planned call against
its steps called directly, and the first planning of six operands."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from .baselines import _graphblas, _torch, _torch_csr
from .cases import IB, VB, Case, _csr_bytes, _nnz, _products
from .generators import coo3, rmat, uniform_rows
from .timing import measure, measure_pair

#: the one-nest column's baseline name (not in baselines.PEERS: sparsecc itself)
ONE_NEST = "optimize=False"


def _one_nest(expr, formats, names=(), out_format=None):
    """A baseline factory: sparsecc's one loop nest of ``expr`` (compiled outside the timing)."""
    def make(*ops):
        import sparsecc as sc
        if names:
            k = sc.compile(expr, out_format=out_format, optimize=False, **dict(zip(names, formats)))
            named = dict(zip(names, ops))
            return lambda: k(**named)
        k = sc.compile(expr, *formats, out_format=out_format, optimize=False)
        return lambda: k(*ops)
    return make


def _with_torch(b: dict, name: str, make) -> dict:
    if _torch() is not None:
        b[name] = make
    return b


def _scaled(n: float, scale: float, least: int = 8) -> int:
    return max(least, int(round(n * scale)))


def plan_cases(small: bool = False, scale: float = 1.0, one_nest: bool = True) -> list[Case]:
    """Rows 1-7 of issue 24 (row 8, random einsums, and row 10, the two-operand rows, are
    the rest of the suite).  ``one_nest``: add the ``optimize=False`` column."""
    if small:
        scale = 0.01
    s = lambda n, least=8: _scaled(n, scale, least)
    gb = _graphblas()

    def nest(case: Case) -> Case:
        if one_nest:
            case.baselines[ONE_NEST] = _one_nest(case.expr, case.formats, case.names, case.out_format)
        return case

    out = []

    # 1. ij,jk,k->i: A @ (B @ x)
    n1 = s(200_000)

    def b1(rng):
        return uniform_rows(n1, n1, 10, rng), uniform_rows(n1, n1, 10, rng), rng.random(n1)

    def t1(A, B, x):
        torch = _torch()
        tA, tB, tx = _torch_csr(A), _torch_csr(B), torch.from_numpy(x)
        return lambda: torch.mv(tA, torch.mv(tB, tx))
    out.append(nest(Case("chainmv", f"uniform{n1}", "ij,jk,k->i", b1,
                         _with_torch({"scipy A@(B@x)": lambda A, B, x: (lambda: A @ (B @ x))}, "torch", t1),
                         flops=lambda ops, ref: 2 * (_nnz(ops[0]) + _nnz(ops[1])),
                         bytes=lambda ops, ref: _csr_bytes(ops[0]) + _csr_bytes(ops[1]) + 3 * ops[2].size * VB,
                         formats=("csr", "csr", "dense"), target=1.0, note="issue 24 row 1")))

    # 2. GNN layer ij,jk,kl->il: A @ (X @ W)
    n2, f2, h2 = s(100_000), max(2, int(round(128 * min(1.0, scale * 4)))), max(2, int(round(32 * min(1.0, scale * 4))))

    def b2(rng):
        return uniform_rows(n2, n2, 10, rng), rng.random((n2, f2)), rng.random((f2, h2))

    def t2(A, X, W):
        torch = _torch()
        tA, tX, tW = _torch_csr(A), torch.from_numpy(X), torch.from_numpy(W)
        return lambda: torch.sparse.mm(tA, tX @ tW)
    out.append(nest(Case("gnn", f"{n2}x{f2}x{h2}", "ij,jk,kl->il", b2,
                         _with_torch({"scipy A@(X@W)": lambda A, X, W: (lambda: A @ (X @ W))}, "torch", t2),
                         flops=lambda ops, ref: 2 * (ops[1].size * ops[2].shape[1] + _nnz(ops[0]) * ops[2].shape[1]),
                         bytes=lambda ops, ref: _csr_bytes(ops[0]) + ops[1].size * VB + ref.size * VB,
                         formats=("csr", "dense", "dense"), target=1.0, note="issue 24 row 2")))

    # 3. all sparse ij,jk,kl->il: uniform (either order), and a skewed chain where A @ (B @ C) is far dearer
    n3 = s(20_000)

    def b3(rng):
        return tuple(uniform_rows(n3, n3, 10, rng) for _ in range(3))

    spgemm3 = lambda ops, ref: 2 * (_products(ops[0], ops[1]) + _nnz(ref) * 10)
    bytes3 = lambda ops, ref: sum(_csr_bytes(A) for A in ops) + _csr_bytes(sp.csr_array(ref))
    out.append(nest(Case("chain3", f"uniform{n3}", "ij,jk,kl->il", b3,
                         {"scipy (A@B)@C": lambda A, B, C: (lambda: (A @ B) @ C),
                          "scipy A@(B@C)": lambda A, B, C: (lambda: A @ (B @ C))},
                         flops=spgemm3, bytes=bytes3, formats=("csr", "csr", "csr"), out_format="csr",
                         target=1.0, note="issue 24 row 3")))
    m3 = max(4, n3 // 200)

    def b3s(rng):   # A n x n 10/row, B n x m 2/row, C m x n 50/row: (A@B)@C is cheap, B@C is n x n 100/row
        return (uniform_rows(n3, n3, 10, rng), uniform_rows(n3, m3, 2, rng),
                uniform_rows(m3, n3, min(50, n3), rng))
    out.append(nest(Case("chain3", f"skewed{n3}", "ij,jk,kl->il", b3s,
                         {"scipy (A@B)@C": lambda A, B, C: (lambda: (A @ B) @ C),
                          "scipy A@(B@C)": lambda A, B, C: (lambda: A @ (B @ C))},
                         flops=spgemm3, bytes=bytes3, formats=("csr", "csr", "csr"), out_format="csr",
                         target=1.0, note="issue 24 row 3, skewed: the order matters")))

    # 4. ki,k,kj->ij: G^T diag(w) G
    m4, n4 = s(100_000), s(5_000)

    def scipy4(G, w, _):
        return lambda: G.T @ sp.csr_array(G.multiply(w[:, None]))

    def b4ops(rng):
        G = uniform_rows(m4, n4, 8, rng)
        return G, rng.random(m4), G
    out.append(nest(Case("gtdg", f"{m4}x{n4}", "ki,k,kj->ij", b4ops,
                         {"scipy G.T@(w*G)": lambda G, w, G2: scipy4(G, w, None)},
                         flops=lambda ops, ref: 2 * int(np.diff(ops[0].indptr).astype(np.int64) @
                                                        np.diff(ops[0].indptr)),
                         bytes=lambda ops, ref: _csr_bytes(ops[0]) + ops[1].size * VB + _nnz_any(ref) * VB,
                         formats=("csr", "dense", "csr"), target=1.0, note="issue 24 row 4")))

    # 5. masked product: only M's entries of A @ B
    n5 = s(20_000)

    def b5(rng):
        return uniform_rows(n5, n5, 4, rng), uniform_rows(n5, n5, 10, rng), uniform_rows(n5, n5, 10, rng)

    b5base = {"scipy (A@B)*M": lambda M, A, B: (lambda: (A @ B).multiply(M))}
    if gb is not None:
        def gb5(M, A, B):
            gM, gA, gB = (gb.io.from_scipy_sparse(X) for X in (M, A, B))

            def run():
                T = gA.mxm(gB, gb.semiring.plus_times).new(mask=gM.S)
                C = T.ewise_mult(gM, gb.binary.times).new()
                C.wait()
                return C
            return run
        b5base["graphblas"] = gb5
    out.append(nest(Case("masked", f"uniform{n5}", "C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])", b5, b5base,
                         flops=lambda ops, ref: 2 * _nnz(ops[0]) * 10,
                         bytes=lambda ops, ref: sum(_csr_bytes(X) for X in ops) + _nnz_any(ref) * (VB + IB),
                         formats=("csr", "csr", "csr"), names=("M", "A", "B"), out_format="csr",
                         target=0.5, note="issue 24 row 5; M 4/row, A @ B ~100/row")))

    # 6. triangle count on an R-MAT graph's lower triangle
    sc6 = 16 if scale >= 1 else max(6, 16 + int(np.floor(np.log2(max(scale, 1e-6)))))

    def b6(rng):
        L = tri_lower(rmat(sc6, 16, rng))
        return L, L, L

    b6base = {"scipy (L@L)*L": lambda L, L2, L3: (lambda: (L @ L).multiply(L).sum())}
    if gb is not None:
        def gb6(L, L2, L3):
            gL = gb.io.from_scipy_sparse(L)
            return lambda: gL.mxm(gL, gb.semiring.plus_pair).new(mask=gL.S).reduce_scalar().new().value
        b6base["graphblas"] = gb6
    out.append(nest(Case("triangles", f"rmat{sc6}", "ij,jk,ik->", b6, b6base,
                         flops=lambda ops, ref: 2 * _products(ops[0], ops[0]),
                         bytes=lambda ops, ref: _csr_bytes(ops[0]),
                         formats=("csr", "csr", "csr"), target=0.5, note="issue 24 row 6")))

    # 7. Tucker chain ijk,jr,ks->irs
    d7 = s(200, 4)
    nnz7 = min(d7 ** 3 // 2, _scaled(1_000_000, scale ** 3 if scale < 1 else 1.0, 16))

    def b7(rng):
        return coo3(d7, nnz7, rng), rng.random((d7, 16)), rng.random((d7, 16))

    def unfold7(T, U, V):
        d0, d1, d2 = T.shape
        X = sp.csr_array((T.data, (T.coords[0].astype(np.int64) * d1 + T.coords[1], T.coords[2])),
                         shape=(d0 * d1, d2))           # the (ij, k) unfolding, prepared once
        return lambda: np.matmul(U.T, (X @ V).reshape(d0, d1, V.shape[1]))
    out.append(nest(Case("tucker", f"{d7}^3/{nnz7}", "ijk,jr,ks->irs", b7, {"scipy unfolding": unfold7},
                         flops=lambda ops, ref: 2 * _nnz(ops[0]) * 16 + 2 * ops[0].shape[0] * ops[0].shape[1] * 256,
                         bytes=lambda ops, ref: _nnz(ops[0]) * (VB + 3 * IB) + ref.size * VB,
                         formats=("coo", "dense", "dense"), target=1.0, note="issue 24 row 7")))
    return out


def _nnz_any(x) -> int:
    return int(x.nnz) if sp.issparse(x) else int(np.size(x))


def tri_lower(A) -> sp.csr_array:
    """The strict lower triangle of ``A``'s undirected graph (A + A^T, no loops), values 1."""
    G = sp.csr_array(A + A.T)
    L = sp.csr_array(sp.tril(G, -1))
    L.data[:] = 1.0
    L.sum_duplicates()
    L.indices = L.indices.astype(np.int32, copy=False)
    L.indptr = L.indptr.astype(np.int32, copy=False)
    return L


# --------------------------------------------------------------------------- row 9: overhead

def overhead(repeat: int | None = None, budget: float = 0.3, seed: int = 0) -> dict:
    """Row 9: a repeated planned call (cached plan) of ``ij,jk,k->i`` on 10 x 10 operands
    against its two steps called directly (the difference is the planned call's overhead),
    the one nest, and the first planning of a six-operand chain (fresh kernel, no plan yet)."""
    import sparsecc as sc
    rng = np.random.default_rng(seed)
    A, B, x = uniform_rows(10, 10, 3, rng), uniform_rows(10, 10, 3, rng), rng.random(10)
    # the planner keeps 10 x 10 operands in one nest: the planned call against that nest
    # called directly (its plan lookup), and a two-step path against its steps called directly
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense")
    nest = sc.compile("ij,jk,k->i", "csr", "csr", "dense", optimize=False)
    k(A, B, x)
    row: dict = {"id": "overhead:tiny", "steps": len(k.plan(A, B, x).steps)}
    # (each pair timed in alternation: the overhead is the median of the samples' differences)
    m = measure_pair(lambda: k(A, B, x), lambda: nest(A, B, x), repeat, 2 * budget)
    row["planned_us"], row["one_nest_us"] = m["a_median_s"] * 1e6, m["b_median_s"] * 1e6
    row["lookup_us"] = m["diff_s"] * 1e6
    kp = sc.compile("ij,jk,k->i", "csr", "csr", "dense", optimize=[(1, 2), (0, 1)])
    kp(A, B, x)
    s1, s2 = kp._last_steps
    m = measure_pair(lambda: kp(A, B, x), lambda: s2(A, s1(B, x)), repeat, 2 * budget)
    row["path_us"], row["steps_us"] = m["a_median_s"] * 1e6, m["b_median_s"] * 1e6
    row["overhead_us"] = m["diff_s"] * 1e6
    spmv = sc.compile("ij,j->i", "csr", "dense")
    row["spmv_us"] = measure(lambda: spmv(A, x), repeat, budget)["median_s"] * 1e6
    # first planning of six operands: a fresh kernel each time (plans are cached per kernel)
    ops6 = [uniform_rows(2000, 2000, 5, rng) for _ in range(5)] + [rng.random(2000)]
    expr6 = "ab,bc,cd,de,ef,f->a"
    times, cpu = [], []
    for _ in range(5):
        k6 = sc.compile(expr6, "csr", "csr", "csr", "csr", "csr", "dense")
        k6._plans.clear()           # sc.compile gives the same kernel again: plan afresh
        t, c = time.perf_counter(), time.process_time()
        p6 = k6.plan(*ops6)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    row["plan6_first_ms"] = float(np.median(times)) * 1e3
    # the process's CPU time (least of the five): on a shared machine the wall clock counts others' load too
    row["plan6_first_cpu_ms"] = float(np.min(cpu)) * 1e3
    row["plan6_steps"] = len(p6.steps)
    row["targets"] = {"overhead_us <= 1": row["overhead_us"] <= 1.0, "lookup_us <= 1": row["lookup_us"] <= 1.0,
                      "plan6_first_ms <= 5": row["plan6_first_ms"] <= 5.0}
    return row


def overhead_line(r: dict) -> str:
    return (f"overhead (ij,jk,k->i, 10 x 10, 1 thread): planned call {r['planned_us']:.1f}us ({r['steps']} step) vs "
            f"its one nest called directly {r['one_nest_us']:.1f}us (+{r['lookup_us']:.1f}us); path [(1,2),(0,1)] "
            f"{r['path_us']:.1f}us vs its 2 steps called directly {r['steps_us']:.1f}us (+{r['overhead_us']:.1f}us; "
            f"target < 1us); one SpMV {r['spmv_us']:.1f}us; "
            f"first plan of 6 operands {r['plan6_first_ms']:.2f} ms (CPU {r.get('plan6_first_cpu_ms', 0):.2f} ms; "
            f"target < 5 ms, {r['plan6_steps']} steps)")


# --------------------------------------------------------------------------- the table

def plans_table(rows: list[dict], threads: int) -> str:
    """One line per row: sparsecc (planned), the hand-ordered reference, the best peer, the
    one nest; ratios are sparsecc / that time (below 1: sparsecc faster)."""
    cols = [("row", 22, "<"), ("sparsecc", 9, ">"), ("hand-ordered", 24, ">"), ("ratio", 6, ">"),
            ("target", 7, ">"), ("met", 4, "<"), ("best peer", 22, ">"), ("r.best", 6, ">"),
            ("optimize=False", 14, ">"), ("r.nest", 6, ">"), ("steps", 5, ">")]

    def line(cells):
        return "  ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, cols)).rstrip()

    def ms(v):
        return "-" if v is None else (f"{v * 1e3:.1f}us" if v < 1 else f"{v:.2f}")

    hdr = line([c[0] for c in cols])
    lines = [f"planned expressions, {threads} thread(s) (times in ms)", hdr, "-" * len(hdr)]
    for r in rows:
        if not r["ok"]:
            lines.append(f"{r['id'][:22]:22}  FAILED  {(r['error'] or r.get('check') or '')[:140]}")
            continue
        bases = r["baselines"]
        ref = next(iter(bases))
        nest = bases.get(ONE_NEST)
        peer = r.get("best_peer")
        tgt = r.get("target")
        cells = [r["id"][:22], ms(r["sparsecc_ms"]), f"{ref} {ms(bases[ref]['ms'])}", f"{bases[ref]['ratio']:.2f}",
                 f"<= {tgt['ratio']:g}" if tgt else "-", ("yes" if tgt["met"] else "NO") if tgt else "-",
                 f"{peer['name']} {ms(peer['ms'])}" if peer else "-", f"{peer['ratio']:.2f}" if peer else "-",
                 ms(nest["ms"]) if nest else "-", f"{nest['ratio']:.2f}" if nest else "-",
                 str(r.get("plan_steps", "-"))]
        lines.append(line(cells))
    return "\n".join(lines)
