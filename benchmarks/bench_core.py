"""The benchmark suite, from a checkout: a thin wrapper over ``python -m sparsecc bench``.

    python benchmarks/bench_core.py            # full scale (a few minutes)
    python benchmarks/bench_core.py --small    # seconds
    python benchmarks/bench_core.py --kernels spmv,spmm32,spgemm

Every flag of ``python -m sparsecc bench`` works here; see benchmarks/README.md.
"""

from __future__ import annotations

import sys

from sparsecc.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
