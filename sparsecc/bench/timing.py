"""Timing: median seconds per call, adaptive sample counts, the garbage collector off."""

from __future__ import annotations

import gc
import time

import numpy as np


def measure(fn, repeat: int | None = None, budget: float = 0.5, max_samples: int = 200) -> dict:
    """Median seconds per call of ``fn``: one warm-up call, then samples of ``number`` calls
    each (enough for about 1 ms per sample), ``repeat`` samples or as many as fit ``budget``
    seconds (at least 5).  The garbage collector is off while sampling, as in ``timeit``."""
    number, samples = _counts([fn], repeat, budget, max_samples)
    (ts,) = _sample([fn], number, samples)
    return {"median_s": float(np.median(ts)), "min_s": float(np.min(ts)), "samples": samples, "number": number}


def _counts(fns, repeat, budget: float, max_samples: int) -> tuple[int, int]:
    """Calls per sample (about 1 ms of the first of ``fns``) and samples (``repeat``, or as
    many rounds of every fn as fit ``budget``, at least 5), after a warm-up call of each."""
    for fn in fns:
        fn()
    t = time.perf_counter()
    fns[0]()
    once = max(time.perf_counter() - t, 1e-9)
    number = max(1, int(1e-3 / once))
    return number, repeat or min(max_samples, max(5, int(budget / (len(fns) * once * number))))


def _sample(fns, number: int, samples: int) -> list[list[float]]:
    """``samples`` rounds, each timing ``number`` calls of every fn in turn (seconds per
    call), the garbage collector off."""
    out = [[] for _ in fns]
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(samples):
            for fn, ts in zip(fns, out):
                t = time.perf_counter()
                for _ in range(number):
                    fn()
                ts.append((time.perf_counter() - t) / number)
    finally:
        if was:
            gc.enable()
    return out


def measure_pair(a, b, repeat: int | None = None, budget: float = 0.5, max_samples: int = 400) -> dict:
    """Two calls timed in alternation (a sample of ``a``, then one of ``b``, and again), as
    :func:`measure` times one: a difference of a few hundred nanoseconds between two calls
    of ~10 us survives the machine's drift, which two medians taken one after the other do
    not (they moved by several microseconds between runs on a shared machine).  Returns each
    call's median and the median of the samples' differences ``a - b`` (``diff_s``)."""
    number, samples = _counts([a, b], repeat, budget, max_samples)
    ta, tb = _sample([a, b], number, samples)
    return {"a_median_s": float(np.median(ta)), "b_median_s": float(np.median(tb)),
            "diff_s": float(np.median(np.subtract(ta, tb))), "samples": samples, "number": number}
