"""Kernel objects by expression: ``sc.compile``'s memo, shared by the front ends that make
kernels (``api``, ``explore``, ``dask.ops``).

One job: an expression (einsum subscripts or an index-notation statement), the formats by
position or name, options, result format, ``prune``, ``check`` and semiring -> the runtime's
``Kernel``, parsed once and memoized on those arguments.  Calls are not made here: a kernel's
call runs the in-memory path (``runtime/call.py``), which hands calls it does not take to
``sparsecc.dispatch``.
"""

from __future__ import annotations

import numpy as np

from .errors import FormatError, OperandError, SparseccError
from .expr import Statement
from .options import DEFAULT, Options
from .parse import looks_like_notation, parse_einsum, parse_notation
from . import dispatch
from .runtime.kernel import Kernel
from .semiring import apply as apply_semiring
from .semiring import lookup as lookup_semiring

_kernels: dict = {}


def _einsum_arity(subscripts: str) -> int:
    return subscripts.split("->")[0].count(",") + 1


def make_kernel(expr: str, positional: tuple, named: dict, options: Options | None,
                out_format=None, prune: bool = False, check: bool = True, semiring=None, optimize=True) -> Kernel:
    """The ``Kernel`` for ``expr`` (a string, or a parsed ``Statement``) with formats ``positional`` (by position) and ``named`` (by
    operand name, index notation only): the memoized one where the arguments hash."""
    options = DEFAULT if options is None else options
    if not isinstance(options, Options):
        raise SparseccError(f"options must be sc.Options, got {type(options).__name__}")
    for flag, v in (("prune", prune), ("check", check)):
        if not isinstance(v, (bool, np.bool_)):
            raise SparseccError(f"{flag} must be True or False, got {v!r}")
    try:
        key = (expr, positional, tuple(sorted(named.items())), options, out_format, bool(prune), bool(check),
               semiring, optimize)
        k = _kernels.get(key)
    except TypeError:           # unhashable format objects: no memo
        key, k = None, None
    if k is not None:
        return k
    if isinstance(expr, Statement):       # a statement already parsed (a program's step)
        if positional or semiring is not None:
            raise SparseccError("a Statement takes formats by operand name and no semiring")
        for name in named:
            if name not in expr.operands:
                raise FormatError(f"format given for {name!r}, which is not an operand of '{expr}'")
        k = Kernel(expr, dict(named), options, source=str(expr), out_format=out_format, prune=prune, check=check)
        dispatch.plan_calls(k, optimize)
        if key is not None:
            _kernels[key] = k
        return k
    if not isinstance(expr, str):
        raise SparseccError(f"an expression is a string, got {type(expr).__name__}")
    if semiring is not None:
        semiring = lookup_semiring(semiring)
    if looks_like_notation(expr):
        if semiring is not None:
            raise SparseccError("semiring= is for einsum subscripts; in index notation write the monoid "
                                "and the multiply in the statement, e.g. 'y[i] = min[j](W[j,i] + d[j])'")
        stmt = parse_notation(expr)
        if len(positional) > len(stmt.operands):
            raise OperandError(f"'{expr}' has {len(stmt.operands)} operand(s) but {len(positional)} formats were given")
        formats = dict(zip(stmt.operands, positional))
        for name, f in named.items():
            if name not in stmt.operands:
                raise FormatError(f"format given for {name!r}, which is not an operand of '{expr}' "
                                  f"(operands: {', '.join(stmt.operands)})")
            formats[name] = f
    else:
        if named:
            raise FormatError(f"einsum kernels take formats by position, got keyword(s) {', '.join(named)}")
        n = _einsum_arity(expr)
        stmt = parse_einsum(expr, n)
        if semiring is not None:
            stmt = apply_semiring(stmt, semiring)
        if positional and len(positional) != n:
            raise OperandError(f"'{expr}' has {n} operand(s) but {len(positional)} formats were given")
        formats = dict(zip(stmt.operands, positional))
    k = Kernel(stmt, formats, options, source=expr, out_format=out_format, prune=prune, check=check)
    dispatch.plan_calls(k, optimize)   # a product of three or more factors plans its calls
    if key is not None:
        _kernels[key] = k
    return k
