"""Lazy arrays: NumPy-style code traced into one program of statements (docs/lazy.md).

``sc.lazy(x)`` wraps a NumPy array or a SciPy sparse array as a :class:`LazyArray`; its
operators and the functions of this namespace (``sc.lazy.exp``, ``sc.lazy.sum``,
``sc.lazy.matmul``, ...) record a DAG and compute nothing.  ``sc.compute(*lazies)`` turns
the DAG into statements of sparsecc's IR (``sparsecc.expr``) - element-wise chains fused into
one statement, contractions left to the planner - and runs them as one
``sparsecc.program.Program``: shared steps once, every value by compiled code.
``@sc.fused`` traces a function once per trace key (the arguments' types, dtypes and shapes,
and the values of Python scalars) and reuses the program.

A front end: it uses sparsecc's public API (``sparsecc.expr``, ``sparsecc.program``), never
the runtime's internals.
"""

from __future__ import annotations

import sys
import types

from .lower import compute, fused
from .structure import argmax, argmin, astype, reshape
from .indices import indices
from .core import (LazyArray, abs, ceil, clip, cos, einsum, exp,  # noqa: F401,A004
                   expm1, floor, log, log1p, matmul, max, maximum, mean, min, minimum, permute_dims, pow,
                   sin, sinh, sqrt, sum, tan, tanh, tensordot, vecdot, where, asarray, lazy, negative, arcsin,
                   arctan, square, prod, expand_dims, squeeze, floor_divide, remainder, logical_and,
                   logical_or, logical_xor, logical_not, conj, conjugate)

__all__ = ["LazyArray", "asarray", "compute", "fused", "abs", "ceil", "clip", "cos", "einsum", "exp", "expm1",
           "floor", "log", "log1p", "matmul", "max", "maximum", "mean", "min", "minimum", "permute_dims", "pow",
           "sin", "sinh", "sqrt", "sum", "tan", "tanh", "tensordot", "vecdot", "where", "negative", "arcsin",
           "arctan", "square", "prod", "expand_dims", "squeeze", "argmax", "argmin", "astype", "reshape", "indices",
           "floor_divide", "remainder", "logical_and", "logical_or", "logical_xor", "logical_not", "conj", "conjugate"]


class _Namespace(types.ModuleType):
    """``sc.lazy`` is this module, and calling it wraps an array: ``sc.lazy(A)``."""

    def __call__(self, x):
        return lazy(x)


sys.modules[__name__].__class__ = _Namespace
