"""ctypes views of MLIR memref descriptors and the sparse storage specifier.

Descriptor classes are made once per rank and reused: building a new ctypes class per call
(as ``mlir.runtime`` does) leaks memory, since ctypes caches pointer types per class forever.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=None)
def descriptor_class(rank: int) -> type:
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
    if rank:
        fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


@lru_cache(maxsize=None)
def specifier_class(levels: int, fields: int) -> type:
    return type(f"Specifier{levels}x{fields}", (ctypes.Structure,),
                {"_fields_": [("lvl_sizes", ctypes.c_int64 * levels), ("mem_sizes", ctypes.c_int64 * fields)]})


def describe(a: np.ndarray):
    """A descriptor for a C-contiguous array; the array must outlive the call."""
    d = descriptor_class(a.ndim)()
    p = a.ctypes.data
    d.allocated = p
    d.aligned = p
    d.offset = 0
    if a.ndim:
        d.sizes[:] = a.shape
        stride, strides = 1, []
        for n in reversed(a.shape):
            strides.append(stride)
            stride *= n
        d.strides[:] = strides[::-1]
    return d


def specifier(lvl_sizes, mem_sizes):
    s = specifier_class(len(lvl_sizes), len(mem_sizes))()
    s.lvl_sizes[:] = lvl_sizes
    s.mem_sizes[:] = mem_sizes
    return s
