"""The STREAM-like bandwidth probe the report measures kernels against."""

from __future__ import annotations

import math
import time

import numpy as np


def stream_probe(mbytes: int = 512, repeat: int = 5, threads: int = 1) -> dict:
    """STREAM-like bandwidths in GB/s, best of ``repeat``: ``read`` (the faster of NumPy's
    ``sum`` and ``max`` over an array of ``mbytes`` MB - ``max`` is the SIMD one, ``sum`` is
    pairwise and can be compute-bound - in ``threads`` slices reduced concurrently; NumPy
    drops the GIL in reductions) and ``copy`` (read + write, one thread, bytes counted twice)."""
    from concurrent.futures import ThreadPoolExecutor
    a = np.ones(mbytes * (1 << 20) // 8)
    b = np.empty_like(a)
    parts = np.array_split(a, threads)
    best_read = best_copy = math.inf
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for _ in range(repeat):
            for reduce in (np.sum, np.max):
                t = time.perf_counter()
                if threads == 1:
                    reduce(a)
                else:
                    list(pool.map(reduce, parts))
                best_read = min(best_read, time.perf_counter() - t)
            t = time.perf_counter()
            np.copyto(b, a)
            best_copy = min(best_copy, time.perf_counter() - t)
    return {"read_gbs": a.nbytes / best_read / 1e9, "copy_gbs": 2 * a.nbytes / best_copy / 1e9,
            "mbytes": mbytes, "threads": threads}
