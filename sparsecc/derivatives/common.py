"""What the derivative callables share: the kernel of a derivative statement, the identity
operands its deltas read, the dtype rules (real and complex, docs/derivatives.md)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import DTypeError
from ..expr import Statement, infer_dtypes
from .symbolic import NotDifferentiableError, non_holomorphic

_identities: dict = {}


def _kernel(stmt: Statement, options, out_format):
    from ..make import make_kernel
    return make_kernel(str(stmt), (), {}, options, out_format=out_format)


def _identity(n: int, dtype, csc: bool = False):
    """The sparse identity a delta reads (one per size and dtype: an operand, not a result);
    ``csc``: as a CSC array (the same buffers), for a kernel with a CSC result."""
    key = (n, np.dtype(dtype), csc)
    m = _identities.get(key)
    if m is None:
        # 32-bit indices where they fit, as SciPy's own (the operands the kernel reads beside it
        # are usually int32: one index width, read as they are)
        it = np.int32 if n < np.iinfo(np.int32).max else np.int64
        idx = np.arange(n, dtype=it)
        m = (sp.csc_array if csc else sp.csr_array)((np.ones(n, dtype), idx, np.arange(n + 1, dtype=it)),
                                                    shape=(n, n))
        if len(_identities) > 64:
            _identities.clear()
        _identities[key] = m
    return m


def _dtype_check(stmt: Statement, operands: dict, wrt: str, source: str):
    """The derivative's dtype; DTypeError for integer and bool values, and for complex
    values through a function that has no complex derivative (docs/derivatives.md: complex
    derivatives are holomorphic, ``d f / d z``)."""
    dts = {n: np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
           for n, x in operands.items() if n in stmt.operands}
    for n in stmt.operands:
        dts.setdefault(n, np.dtype(np.float64))
    key = (id(stmt), wrt, tuple(dts[n] for n in stmt.operands))
    got = _checked.get(key)
    if got is not None and got[0] is stmt:   # (a repeated call: ~0.3 ms of dtype inference)
        return got[1]
    out = _dtype_rules(stmt, dts, wrt, source)
    if len(_checked) > 256:
        _checked.clear()
    _checked[key] = (stmt, out)          # (the statement kept: its id is not reused)
    return out


_checked: dict = {}


def _dtype_rules(stmt: Statement, dts: dict, wrt: str, source: str):
    out = infer_dtypes(stmt, dts)[stmt.expr]
    for what, dt in (("the result", out), (f"operand '{wrt}'", dts[wrt])):
        if dt.kind not in "fc":
            raise DTypeError(f"'{source}': derivatives are for floating-point or complex values; "
                             f"{what} is {dt}")
    if out.kind == "c" or dts[wrt].kind == "c":
        bad = non_holomorphic(stmt.expr, wrt)
        if bad is not None:
            raise NotDifferentiableError(
                f"'{source}': complex derivatives are holomorphic (d f / d z), and {bad} has none "
                f"(abs, conj, ceil, floor, max, min and conditions on complex values are not holomorphic)")
    return out


def _in(out, dt):
    """A derivative in the statement's dtype: a piecewise factor (``where(u[i] > 0.5, 1,
    0)`` of ``max``, ``abs``) is int64 by NumPy's rules and widens a float32 derivative
    statement to float64; the values come back in the dtype the statement has."""
    if out.dtype == dt:
        return out
    return out.astype(dt) if sp.issparse(out) else np.asarray(out).astype(dt)[()]
