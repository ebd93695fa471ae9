"""Side-by-side timings of core kernels against SciPy/NumPy, medians, in one process.

    python benchmarks/bench_core.py            # the issue-5 sizes (about a minute)
    python benchmarks/bench_core.py --small    # quick

Prints median times and sparsecc/baseline ratios (below 1.0: sparsecc is faster).
"""

from __future__ import annotations

import argparse

import numpy as np

import sparsecc as sc
from sparsecc.demo import median_time as median, random_rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--small", action="store_true")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    n = 20_000 if args.small else 200_000
    A = random_rows(n, n, 10, rng)
    x = rng.random(n)
    m = 5_000 if args.small else 50_000
    B = random_rows(m, m, 10, rng)
    X = rng.random((m, 32))
    tiny = random_rows(10, 10, 3, rng)
    xt = rng.random(10)
    rows = [
        ("SpMV ij,j->i", f"{n}x{n}, 10/row", "ij,j->i", (A, x), lambda: A @ x),
        ("SpMM ik,kj->ij k=32", f"{m}x{m}, 10/row", "ik,kj->ij", (B, X), lambda: B @ X),
        ("per-call SpMV 10x10", "10x10", "ij,j->i", (tiny, xt), lambda: tiny @ xt),
    ]
    print(f"{'kernel':24}{'input':>20}{'sparsecc':>12}{'scipy':>12}{'ratio':>8}")
    for name, what, expr, ops, base in rows:
        k = sc.compile(expr)
        assert np.allclose(k(*ops), base())
        t_k, t_b = median(lambda: k(*ops)), median(base)
        unit, f = ("us", 1e6) if t_b < 1e-3 else ("ms", 1e3)
        print(f"{name:24}{what:>20}{t_k * f:>10.2f}{unit}{t_b * f:>10.2f}{unit}{t_k / t_b:>8.2f}")


if __name__ == "__main__":
    main()
