"""sparsecc.ops: element-wise operations, transposes and conversions (torch.sparse's names).

Each is one index-notation kernel (``sc.evaluate``), generated for the operand's rank;
scalars travel as 0-d operands, so one compile serves every value.  Result patterns follow
the pattern rules (docs/sparse-results.md): ``mul`` keeps the sparse operand's pattern,
``add``/``sub`` of two sparse operands the union, functions with ``f(0) = 0`` the operand's
pattern.  Reference: docs/ops.md.
"""

from __future__ import annotations

import numbers
import operator
import string

import numpy as np
import scipy.sparse as sp

from ..api import einsum, evaluate
from ..errors import OperandError, ShapeError
from ..runtime.operands import as_operand, to_coo

__all__ = ["mul", "add", "sub", "div", "neg", "abs", "sqrt", "sin", "tanh", "log1p", "expm1",
           "transpose", "permute", "to_dense", "from_dense", "sparse_like", "sparse_mask"]


def _idx(rank: int) -> str:
    return ",".join(f"i{k}" for k in range(rank))


def _acc(name: str, rank: int) -> str:
    return f"{name}[{_idx(rank)}]" if rank else name


def _is_scalar(v) -> bool:
    return isinstance(v, (numbers.Number, np.generic)) or (isinstance(v, np.ndarray) and v.ndim == 0)


def _scalar(v, *others) -> np.ndarray:
    """``v`` as a 0-d operand of the dtype NumPy gives ``others`` combined with ``v``."""
    return np.asarray(v, dtype=np.result_type(*others, v))


def _dims(values, what: str) -> list[int]:
    """Dimension arguments as ints (NumPy integers too); anything else is a ShapeError."""
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        raise ShapeError(f"{what} must be integers, got {values!r}") from None


def _default_layout(x):
    return x.format if sp.issparse(x) and x.ndim == 2 and x.format in ("csr", "csc", "coo") else None


def mul(input, other, *, out_format=None):
    """``torch.mul``: ``input * other`` with ``other`` a scalar or a tensor of the same
    shape.  Pattern: the intersection (a dense ``other`` keeps ``input``'s pattern)."""
    x = as_operand(input, "input")
    if _is_scalar(other):
        s = _scalar(other, x.dtype)
        return evaluate(f"{_acc('O', x.ndim)} = s * {_acc('X', x.ndim)}", s=s, X=x,
                        out_format=out_format if out_format is not None else _default_layout(x))
    y = as_operand(other, "other")
    _same_shape(x, y)
    return evaluate(f"{_acc('O', x.ndim)} = {_acc('X', x.ndim)} * {_acc('Y', x.ndim)}", X=x, Y=y,
                    out_format=out_format)


def _same_shape(x, y):
    if tuple(x.shape) != tuple(y.shape):
        raise ShapeError(f"shapes {tuple(x.shape)} and {tuple(y.shape)} differ (no broadcasting)")


def _add(x, other, alpha, sign: str, out_format):
    x = as_operand(x, "input")
    if _is_scalar(other):     # a 0-d operand: one compile serves every value
        s = _scalar(other if alpha == 1 else other * alpha, x.dtype)    # a Python scalar stays weak
        return evaluate(f"{_acc('O', x.ndim)} = {_acc('X', x.ndim)} {sign} s", X=x, s=s,
                        out_format=out_format)
    y = as_operand(other, "other")
    _same_shape(x, y)
    if alpha == 1:
        return evaluate(f"{_acc('O', x.ndim)} = {_acc('X', x.ndim)} {sign} {_acc('Y', x.ndim)}", X=x, Y=y,
                        out_format=out_format)
    a = _scalar(alpha, x.dtype, y.dtype)
    return evaluate(f"{_acc('O', x.ndim)} = {_acc('X', x.ndim)} {sign} a * {_acc('Y', x.ndim)}", X=x, Y=y, a=a,
                    out_format=out_format)


def add(input, other, *, alpha=1, out_format=None):
    """``torch.add``: ``input + alpha * other``.  Two sparse operands: the union of their
    patterns (entries that cancel stay stored); a dense operand or a scalar: a dense result."""
    return _add(input, other, alpha, "+", out_format)


def sub(input, other, *, alpha=1, out_format=None):
    """``torch.sub``: ``input - alpha * other`` (patterns as :func:`add`)."""
    return _add(input, other, alpha, "-", out_format)


def div(input, other, *, out_format=None):
    """``torch.div``: ``input / other``, true division (integers give floats).

    By a scalar: ``input``'s pattern (one compile serves every divisor; dividing by 0 gives
    inf/nan at the stored entries only, like torch).  By a tensor of the same shape: the
    quotient at ``input``'s stored entries (``stored(X / Y)``; a dense ``input`` stores every
    entry), so a sparse ``input`` keeps its pattern and its unstored zeros are never divided.
    """
    x = as_operand(input, "input")
    if _is_scalar(other):
        s = _scalar(other, x.dtype)
        return evaluate(f"{_acc('O', x.ndim)} = {_acc('X', x.ndim)} / s", X=x, s=s,
                        out_format=out_format if out_format is not None else _default_layout(x))
    y = as_operand(other, "other")
    _same_shape(x, y)
    return evaluate(f"{_acc('O', x.ndim)} = stored({_acc('X', x.ndim)} / {_acc('Y', x.ndim)})", X=x, Y=y,
                    out_format=out_format if out_format is not None else _default_layout(x))


def _unary(fn: str):
    def op(input, *, out_format=None):
        x = as_operand(input, "input")
        return evaluate(f"{_acc('O', x.ndim)} = {fn}({_acc('X', x.ndim)})", X=x,
                        out_format=out_format if out_format is not None else _default_layout(x))
    op.__name__ = op.__qualname__ = {"neg": "neg"}.get(fn, fn)
    op.__doc__ = (f"``torch.{fn}`` element-wise: the function of every stored entry; ``{fn}(0) = 0``, "
                  f"so the result keeps ``input``'s pattern and layout.")
    return op


neg = _unary("neg")
abs = _unary("abs")        # noqa: A001 - torch's name
sqrt = _unary("sqrt")
sin = _unary("sin")
tanh = _unary("tanh")
log1p = _unary("log1p")
expm1 = _unary("expm1")


def permute(input, dims, *, out_format=None):
    """``torch.permute``: dimension ``k`` of the result is dimension ``dims[k]`` of
    ``input`` (an einsum kernel; stored entries move, nothing else changes)."""
    x = as_operand(input, "input")
    return einsum(permute_subscripts(dims, x.ndim), x,
                  out_format=out_format if out_format is not None else _default_layout(x))


def permute_subscripts(dims, r: int) -> str:
    """The einsum subscripts of ``permute(x, dims)`` for a rank-``r`` ``x`` (checked)."""
    dims = _dims(dims if isinstance(dims, (tuple, list)) else (dims,), "permute: dims")
    if sorted(d % r if -r <= d < r else -1 for d in dims) != list(range(r)):
        raise ShapeError(f"dims {tuple(dims)} is not a permutation of {r} dimensions")
    letters = string.ascii_lowercase[:r]
    return f"{letters}->{''.join(letters[d % r] for d in dims)}"


def transpose_dims(dim0, dim1, r: int) -> list:
    """The ``dims`` of ``permute`` that swap ``dim0`` and ``dim1`` of a rank-``r`` tensor."""
    dim0, dim1 = _dims((dim0, dim1), "transpose: dim0 and dim1")
    for d in (dim0, dim1):
        if not -r <= d < r:
            raise ShapeError(f"dimension {d} is out of range for a tensor of rank {r}")
    dims = list(range(r))
    dims[dim0 % r], dims[dim1 % r] = dims[dim1 % r], dims[dim0 % r]
    return dims


def transpose(input, dim0: int = 0, dim1: int = 1, *, out_format=None):
    """``torch.transpose``: swap two dimensions."""
    x = as_operand(input, "input")
    return permute(x, transpose_dims(dim0, dim1, x.ndim), out_format=out_format)


def to_dense(input):
    """``torch.Tensor.to_dense``: a NumPy array (unstored entries are 0)."""
    x = as_operand(input, "input")
    letters = string.ascii_lowercase[:x.ndim]
    return einsum(f"{letters}->{letters}", x, out_format="dense")


def _unique_coords(m) -> tuple[np.ndarray, ...]:
    """The set of ``m``'s stored coordinates, sorted in C order, each once (index
    manipulation only: a lexicographic sort and a comparison of neighbours)."""
    c = to_coo(m)        # tocoo keeps duplicates, copies indices
    coords = [np.asarray(k, np.int64) for k in c.coords]
    if c.nnz == 0:
        return tuple(coords)
    order = np.lexsort(coords[::-1])
    coords = [k[order] for k in coords]
    new = np.zeros(c.nnz, bool)
    new[0] = True
    for k in coords:
        new[1:] |= k[1:] != k[:-1]
    return tuple(k[new] for k in coords)


def _pattern(mask, value, dtype):
    """An operand with ``mask``'s pattern as a set - a coordinate stored several times (a
    non-canonical COO, or a CSR/CSC with a repeated index in a row/column) is stored once -
    and every stored value ``value``: built from the mask's indices alone, never from its
    values (summing duplicates of 1 would give 2).  CSR/CSC masks give a CSR/CSC operand,
    other ones a canonical COO."""
    m = as_operand(mask, "mask")
    if not sp.issparse(m):
        raise OperandError("mask must be a SciPy sparse array")
    coords = _unique_coords(m)
    P = sp.coo_array((np.full(coords[0].size if coords else 0, value, dtype), coords), shape=m.shape)
    P.has_canonical_format = True           # sorted, unique: no value is summed below
    if m.ndim == 2 and m.format in ("csr", "csc"):
        return P.tocsr() if m.format == "csr" else P.tocsc()
    return P


def sparse_mask(input, mask, *, out_format=None):
    """``torch.Tensor.sparse_mask``: ``input``'s values at ``mask``'s pattern; the mask's
    values are ignored.  Every stored entry of ``mask`` is stored in the result (with 0
    where a sparse ``input`` stores nothing), in ``mask``'s layout."""
    x = as_operand(input, "input")
    m = as_operand(mask, "mask")
    if tuple(x.shape) != tuple(m.shape):
        raise ShapeError(f"input has shape {tuple(x.shape)} but mask {tuple(m.shape)}")
    fmt = out_format if out_format is not None else (_default_layout(m) or "coo")
    P = _pattern(m, 1, x.dtype)
    r = x.ndim
    if sp.issparse(x):        # intersection, plus zeros on the rest of the mask's pattern
        Z = _pattern(m, 0, x.dtype)
        return evaluate(f"{_acc('O', r)} = {_acc('P', r)} * {_acc('X', r)} + {_acc('Z', r)}", P=P, X=x, Z=Z,
                        out_format=fmt)
    return evaluate(f"{_acc('O', r)} = {_acc('P', r)} * {_acc('X', r)}", P=P, X=x, out_format=fmt)


def from_dense(input, pattern=None, *, out_format="csr"):
    """A sparse array from a NumPy array: its non-zero entries (``pattern=None``; a
    dense-to-sparse conversion in the kernel), or its values at ``pattern``'s stored entries
    (zeros included, as :func:`sparse_mask`)."""
    if pattern is not None:
        return sparse_mask(input, pattern, out_format=out_format if out_format != "csr" else None)
    x = as_operand(input, "input")
    if sp.issparse(x):
        raise OperandError("from_dense takes a NumPy array")
    letters = string.ascii_lowercase[:x.ndim]
    if out_format == "csr" and x.ndim != 2:
        out_format = "coo"
    return einsum(f"{letters}->{letters}", x, out_format=out_format)


def sparse_like(input, like, *, out_format=None):
    """``input`` (dense or sparse) sampled at the pattern of ``like``, in ``like``'s layout:
    a sparse array with the same structure as ``like`` (``torch``: ``input.sparse_mask(like)``)."""
    return sparse_mask(input, like, out_format=out_format)
