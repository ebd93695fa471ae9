"""Forward+backward rows: SpMM and SDDMM through ``sparsecc.torch`` against ``torch.sparse``.

    python -m sparsecc.bench.torch_rows                    # n=4096, density 0.002, k=32
    python -m sparsecc.bench.torch_rows --n 2000 --rounds 3 --threads 1

Each row times one training step's sparse work, forward and backward, on the same inputs:

- **SpMM**: ``Y = A @ B`` with ``A`` CSR (requires grad: its gradient on its pattern) and
  ``B`` dense ``n x k``; backward with a dense output gradient. sparsecc:
  ``sct.einsum("ij,jk->ik", A, B)``; torch: ``torch.sparse.mm(A, B)``.
- **SDDMM**: ``S = M * (U @ V.T)`` on CSR mask ``M``'s pattern (values 1), ``U``, ``V``
  dense ``n x k`` requiring grad; backward with an output gradient on ``M``'s pattern.
  sparsecc: ``sct.compile("ij,ik,jk->ij", out_format="csr")``; torch:
  ``torch.sparse.sampled_addmm(M, U, V.T, beta=0)`` (with a CSR output gradient its
  backward did not form a dense ``n x n`` in torch 2.13: measured, docs/torch.md).

Before timing, every row checks that both give the same result and gradients. The two sides
run interleaved, round after round, and each keeps its best time (the machine's load moves
both alike). Both run on ``torch.get_num_threads()`` threads (sparsecc follows torch's
count). This is a benchmark, not a test: nothing asserts a time. The numbers in
docs/torch.md come from here.
"""

from __future__ import annotations

import argparse
import gc
import time


def _inputs(n: int, density: float, k: int, seed: int):
    import torch
    g = torch.Generator().manual_seed(seed)
    nnz = max(1, int(n * n * density))
    idx = torch.randint(0, n * n, (nnz,), generator=g).unique()
    rows, cols = idx // n, idx % n
    vals = torch.randn(len(idx), generator=g, dtype=torch.float64)
    A = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (n, n), check_invariants=True).coalesce().to_sparse_csr()
    M = torch.sparse_csr_tensor(A.crow_indices(), A.col_indices(), torch.ones_like(A.values()), (n, n))
    B = torch.randn(n, k, generator=g, dtype=torch.float64)
    U = torch.randn(n, k, generator=g, dtype=torch.float64)
    V = torch.randn(n, k, generator=g, dtype=torch.float64)
    G = torch.randn(n, k, generator=g, dtype=torch.float64)
    GS = torch.sparse_csr_tensor(A.crow_indices(), A.col_indices(),
                                 torch.randn(len(idx), generator=g, dtype=torch.float64), (n, n))
    return A, M, B, U, V, G, GS


def _spmm_step(mm):
    def step(A, B, G):
        A = A.detach().requires_grad_(True)
        B = B.detach().requires_grad_(True)
        Y = mm(A, B)
        gA, gB = __import__("torch").autograd.grad(Y, (A, B), G)
        return Y, gA, gB
    return step


def _sddmm_step(sddmm):
    def step(M, U, V, GS):
        import torch
        U = U.detach().requires_grad_(True)
        V = V.detach().requires_grad_(True)
        S = sddmm(M, U, V)
        gU, gV = torch.autograd.grad(S, (U, V), GS)
        return S, gU, gV
    return step


def _time(fn) -> float:
    gc.collect()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _close(a, b, what):
    import torch
    a = a.to_dense() if a.layout != torch.strided else a
    b = b.to_dense() if b.layout != torch.strided else b
    if not torch.allclose(a.detach(), b.detach(), rtol=1e-9, atol=1e-9):
        raise AssertionError(f"{what}: sparsecc and torch.sparse differ")


def rows(n: int = 4096, density: float = 0.002, k: int = 32, rounds: int = 5, seed: int = 0) -> list[dict]:
    """The SpMM and SDDMM forward+backward rows: one dict per row with the best seconds of
    each side over ``rounds`` interleaved rounds and their ratio (torch / sparsecc: above
    1, sparsecc is faster)."""
    import torch
    import sparsecc.torch as sct
    A, M, B, U, V, G, GS = _inputs(n, density, k, seed)
    kernel = sct.compile("ij,ik,jk->ij", out_format="csr")
    sides = {
        "spmm": (_spmm_step(lambda A, B: sct.einsum("ij,jk->ik", A, B)),
                 _spmm_step(torch.sparse.mm), (A, B, G)),
        "sddmm": (_sddmm_step(kernel),
                  _sddmm_step(lambda M, U, V: torch.sparse.sampled_addmm(M, U, V.T, beta=0.0)), (M, U, V, GS)),
    }
    out = []
    for name, (ours, theirs, args) in sides.items():
        got, want = ours(*args), theirs(*args)          # warm-up (compiles) and the check
        for a, b, what in zip(got, want, ("result", "gradient 1", "gradient 2")):
            _close(a, b, f"{name} {what}")
        best = {"sparsecc": float("inf"), "torch.sparse": float("inf")}
        for r in range(rounds):                          # interleaved, alternating who goes first
            order = [("sparsecc", ours), ("torch.sparse", theirs)]
            for side, fn in (order if r % 2 == 0 else order[::-1]):
                best[side] = min(best[side], _time(lambda: fn(*args)))
        out.append({"kernel": f"{name} fwd+bwd", "n": n, "nnz": int(A._nnz()), "k": k,
                    "threads": torch.get_num_threads(), "sparsecc_s": best["sparsecc"],
                    "torch_sparse_s": best["torch.sparse"],
                    "ratio": best["torch.sparse"] / best["sparsecc"]})
    return out


def table(rs: list[dict]) -> str:
    lines = ["| kernel | n | nnz | k | threads | sparsecc (ms) | torch.sparse (ms) | torch / sparsecc |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        lines.append(f"| {r['kernel']} | {r['n']} | {r['nnz']} | {r['k']} | {r['threads']} | "
                     f"{r['sparsecc_s'] * 1e3:.2f} | {r['torch_sparse_s'] * 1e3:.2f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparsecc.bench.torch_rows", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--density", type=float, default=0.002)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (sparsecc follows)")
    a = p.parse_args(argv)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    print(table(rows(a.n, a.density, a.k, a.rounds, a.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
