"""sparsecc.ops: structural operations - indexing, slicing, concatenation, reshapes,
tensordot, trace, nnz/density.

Slices, integer indices, new axes, concatenation, stacking, reshapes and ``prune`` are one
compiled "gather" kernel each (``sparsecc/dialect/structural.py``: MLIR sparse slices, a
``sparse_tensor.foreach`` over the stored entries, ``tensor.insert`` at the new
coordinates).  ``index_select`` (and slices with negative steps, integer-array indices) is
a compiled contraction with a 0/1 selection matrix built from the *indices* alone;
``tensordot`` and ``trace`` are einsum kernels.  Exactness: a selected unstored entry stays
unstored, a selected stored zero stays stored.  Reference: docs/ops.md.
"""

from __future__ import annotations

import math
import operator
import string

import numpy as np
import scipy.sparse as sp

from .. import dtypes as dt
from ..api import einsum
from ..dialect.structural import Source, gather_kernel
from ..errors import OperandError, ShapeError, SparseccError
from ..formats import resolve
from ..runtime.call import call_with_buffers
from ..runtime.loader import load_module
from ..runtime.operands import INT32_MAX, as_operand, build
from ..runtime.results import new_result, wrap
from ..runtime.validate import validate
from ._args import dim_or_axis, required

__all__ = ["getitem", "index_select", "narrow", "cat", "stack", "hstack", "vstack", "reshape", "flatten",
           "tensordot", "trace", "nnz", "density", "prune", "SparseIndexError"]


class SparseIndexError(ShapeError, IndexError):
    """An index out of range or an index NumPy would refuse (also an ``IndexError``)."""


# ----------------------------------------------------------------------------- the runner

def _row_major(x) -> str:
    """The format a gather reads ``x`` in: its levels in dimension order (CSR for matrices,
    COO otherwise; a CSC/BSR matrix is stored as CSR first, a layout conversion)."""
    if x.ndim == 2 and x.format != "coo":
        return "csr"
    return "coo"


_INDEX_MAX = 2**63 - 1


def _gather(xs: list, sources: list[dict], ints: list[int], out_shape: tuple[int, ...], out_format,
            ordered: bool, dtype: np.dtype):
    """Run one gather kernel over the sparse operands ``xs`` (see dialect/structural.py)."""
    if any(not -_INDEX_MAX <= int(v) <= _INDEX_MAX for v in ints):
        raise ShapeError(f"a size or offset does not fit a 64-bit index: {ints}")
    stores = []
    for k, x in enumerate(xs):
        if x.dtype != dtype:
            x = x.astype(dtype)         # operands of a concatenation share the result's dtype
        stores.append(build(x, resolve(_row_major(x), x.ndim, f"operand {k}"), f"operand {k}"))
    # positions: by the entries it can store, at most its operands' (each is copied once or not)
    wide = (max(out_shape, default=0) > INT32_MAX,
            math.prod(out_shape) > INT32_MAX and sum(int(x.data.size) for x in xs) > INT32_MAX)
    of = resolve(out_format, len(out_shape), "the result").with_widths(64 if wide[1] else 32,
                                                                       64 if wide[0] else 32)
    if of.is_dense:
        raise SparseccError("internal error: a gather builds a sparse result")
    ordered = ordered and of.order == tuple(range(of.rank)) and of.block is None
    srcs = tuple(Source(s.fmt, **kw) for s, kw in zip(stores, sources))
    # compiled, cached, loaded and counted like every kernel (sc.cache_info())
    mod = load_module(gather_kernel(srcs, of, dt.lookup(dtype).name, ordered), what="a structural kernel")
    res = new_result(of)
    call_with_buffers(mod, res, ints, stores, "a structural kernel")
    del stores
    return wrap(of, tuple(out_shape), np.dtype(dtype), res)


def _sparse(x, what: str = "operand"):
    x = as_operand(x, what)
    if not sp.issparse(x):
        raise OperandError(f"{what} is a NumPy array; this operation takes a SciPy sparse array "
                           f"(index a NumPy array with NumPy)")
    validate(x, what)
    dt.lookup(x.dtype, what)
    return x


def _default_format(x, rank: int):
    """Results keep a matrix's own layout (csr, csc, coo); other ranks are COO, other
    matrix layouts CSR (the pattern rules' defaults)."""
    if rank == 2:
        return x.format if x.ndim == 2 and x.format in ("csr", "csc", "coo") else "csr"
    return "coo"


def _int(v, what: str) -> int:
    """``v`` as a Python int (an integer or a NumPy integer), else a ShapeError."""
    try:
        return operator.index(v)
    except TypeError:
        raise ShapeError(f"{what} must be an integer, got {v!r}") from None


def _axis(dim, rank: int, what: str = "dim") -> int:
    try:
        d = operator.index(dim)
    except TypeError:
        raise ShapeError(f"{what} must be an integer, got {dim!r}") from None
    if not -rank <= d < rank:
        raise ShapeError(f"{what} {d} is out of range for a tensor of rank {rank}")
    return d % rank


# ----------------------------------------------------------------------------- indexing

def _letters(n: int, skip: str = "") -> list[str]:
    return [c for c in string.ascii_letters if c not in skip][:n]


def _selection(index: np.ndarray, n: int, dtype) -> sp.csr_array:
    """The 0/1 matrix S (len(index) x n) with S[r, index[r]] = 1 (built from the indices)."""
    k = index.size
    return sp.csr_array((np.ones(k, dtype=dtype), index.astype(np.int64), np.arange(k + 1)), shape=(k, n))


def _index_array(index, n: int, what: str) -> np.ndarray:
    a = np.asarray(index)
    if a.dtype == bool:
        if a.ndim != 1 or a.size != n:
            raise SparseIndexError(f"{what}: a boolean mask must be 1-d of length {n}, got shape {a.shape}")
        return np.flatnonzero(a)
    if a.size == 0:
        a = a.astype(np.int64)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise SparseIndexError(f"{what}: an index array must be 1-d integers, got {a.dtype} of shape {a.shape}")
    a = a.astype(np.int64)
    bad = (a < -n) | (a >= n)
    if bad.any():
        raise SparseIndexError(f"{what}: index {int(a[bad][0])} is out of range for size {n}")
    return np.where(a < 0, a + n, a)


def index_select(input, dim=None, index=None, *, axis=None, out_format=None):
    """``torch.index_select``: the entries of ``input`` at positions ``index`` along ``dim``
    (repeats and any order allowed).  A compiled contraction with the selection matrix
    ``S[r, index[r]] = 1``; sparse in, sparse out (the input's layout for matrices, COO
    otherwise); dense in, dense out.  ``axis=`` may replace ``dim``."""
    dim = dim_or_axis(axis, dim, "index_select")
    index = required(index, "index", "index_select")
    x = as_operand(input, "input")
    if sp.issparse(x):
        validate(x, "input")
    rank = x.ndim
    d = _axis(dim, rank)
    idx = _index_array(index, x.shape[d], "index_select")
    S = _selection(idx, x.shape[d], x.dtype)
    letters = _letters(rank + 1)
    r, xs = letters[-1], letters[:rank]
    outs = xs.copy()
    outs[d] = r
    if out_format is None and sp.issparse(x):
        out_format = _default_format(x, rank)
    return einsum(f"{r}{xs[d]},{''.join(xs)}->{''.join(outs)}", S, x, out_format=out_format)


def _normalize_key(key, shape: tuple[int, ...]) -> list:
    if not isinstance(key, tuple):
        key = (key,)
    n_ell = sum(k is Ellipsis for k in key)
    if n_ell > 1:
        raise SparseIndexError("an index can only have a single ellipsis ('...')")
    used = sum(k is not None and k is not Ellipsis for k in key)
    if used > len(shape):
        raise SparseIndexError(f"too many indices: {used} for a tensor of rank {len(shape)}")
    out = []
    for k in key:
        if k is Ellipsis:
            out += [slice(None)] * (len(shape) - used)
        else:
            out.append(k)
    out += [slice(None)] * (len(shape) - sum(k is not None for k in out))
    return out


def getitem(input, key, *, out_format=None):
    """``input[key]`` with NumPy's index syntax on any rank and sparse format:
    integers (negative ones count from the end), slices (any step, also negative),
    ``None`` (a new unit axis), ``...``, and one integer array or boolean mask.  Use
    ``np.s_``: ``getitem(T, np.s_[1, 0, 1:])``.  A sparse result (rank >= 1), or a
    NumPy scalar when every dimension gets an integer.

    Args:
        input (scipy.sparse.sparray): The sparse tensor to index (any rank, any format).
        key (int | slice | tuple | numpy.ndarray): NumPy's index (``np.s_[...]``).
        out_format (str | Format | None): The result's format, as in ``sc.einsum``
            (``None``: the pattern rules).

    Returns:
        result (scipy.sparse.sparray | numpy.generic): The selected entries.

    Raises:
        SparseIndexError: An index out of range or malformed (a mask of the wrong length,
            two ellipses, more than one index array).
        OperandError: ``input`` is not a SciPy sparse array."""
    x = _sparse(input, "input")
    key = _normalize_key(key, x.shape)
    dims = iter(range(x.ndim))
    slices = []            # (offset, size, stride) per input dimension
    pick = []              # per result dimension: input dimension or None
    selects = []           # (result dimension, index array): applied after the slice
    arrays = 0
    drop = []
    for k in key:
        if k is None:
            pick.append(None)
            continue
        d = next(dims)
        n = x.shape[d]
        if isinstance(k, slice):
            if isinstance(k.step, (int, np.integer)) and k.step == 0:     # NumPy: ValueError
                raise ShapeError(f"slice step cannot be zero (dimension {d})")
            try:
                start, stop, step = k.indices(n)
            except TypeError:
                raise SparseIndexError(f"slice {k} for dimension {d}: start, stop and step must be "
                                       f"integers or None") from None
            if step > 0:
                slices.append((start, len(range(start, stop, step)), step))
            else:
                slices.append((0, n, 1))
                selects.append((len(pick), np.arange(start, stop, step, dtype=np.int64)))
            pick.append(d)
            continue
        a = np.asarray(k) if not isinstance(k, (int, np.integer)) else None
        if a is not None and a.ndim == 0 and a.dtype.kind in "iu":
            k, a = int(a), None
        if a is None:
            try:
                i = operator.index(k)
            except TypeError:
                raise SparseIndexError(f"unsupported index {k!r} (integers, slices, None, ..., "
                                       f"one integer array or boolean mask)") from None
            if not -n <= i < n:
                raise SparseIndexError(f"index {i} is out of range for dimension {d} of size {n}")
            slices.append((i % n, 1, 1))
            drop.append(d)
            continue
        arrays += 1
        if arrays > 1:
            raise SparseIndexError("only one integer array or boolean mask per index is supported")
        slices.append((0, n, 1))
        selects.append((len(pick), _index_array(a, n, f"index for dimension {d}")))
        pick.append(d)
    if arrays and drop:
        adv = [not isinstance(k, slice) and k is not None for k in key]
        first, last = adv.index(True), len(adv) - 1 - adv[::-1].index(True)
        if not all(adv[first:last + 1]):
            raise SparseIndexError("an integer array with integers that are not next to it moves "
                                   "dimensions in NumPy; index in two steps instead")
    if not pick:                      # every dimension an integer: a scalar
        onehots = []
        for (i, _, _), n in zip(slices, x.shape):
            e = np.zeros(n, dtype=x.dtype)
            e[i] = 1
            onehots.append(e)
        xs = "".join(_letters(x.ndim))
        return einsum(f"{xs},{','.join(xs)}->", x, *onehots)
    shape = tuple(slices[d][1] if d is not None else 1 for d in pick)
    fmt = out_format
    if fmt is None:
        fmt = _default_format(x, len(pick))
    trivial = not drop and all(p is not None for p in pick) and \
        all(s == (0, n, 1) for s, n in zip(slices, x.shape))
    if trivial and selects:
        y = x
    else:
        ints = list(shape) + [v for s in slices for v in s]
        # a test on every stored entry's coordinates: MLIR 22's sliced iteration (extract_slice)
        # loses entries (COO slices, CSR column slices ending at the last column)
        y = _gather([x], [dict(filtered=True, pick=tuple(pick))], ints, shape, fmt, True, x.dtype)
    for d, idx in selects:
        y = index_select(y, d, idx, out_format=fmt)
    return y


def narrow(input, dim=None, start=None, length=None, *, axis=None, out_format=None):
    """``torch.narrow``: entries ``start .. start+length-1`` along ``dim`` (or ``axis``;
    ``start`` may be negative)."""
    dim = dim_or_axis(axis, dim, "narrow")
    start, length = required(start, "start", "narrow"), required(length, "length", "narrow")
    x = _sparse(input, "input")
    d = _axis(dim, x.ndim)
    n = x.shape[d]
    s = _int(start, "narrow: start")
    if not -n <= s <= n:
        raise SparseIndexError(f"start {s} is out of range for dimension {d} of size {n}")
    if s < 0:
        s += n
    length = _int(length, "narrow: length")
    if length < 0 or s + length > n:
        raise SparseIndexError(f"start {s} + length {length} exceeds dimension {d} of size {n}")
    key = [slice(None)] * x.ndim
    key[d] = slice(s, s + length)
    return getitem(x, tuple(key), out_format=out_format)


# ----------------------------------------------------------------------------- joining

def _joinable(tensors, what: str) -> list:
    if isinstance(tensors, (np.ndarray,)) or sp.issparse(tensors):
        raise OperandError(f"{what} takes a sequence of sparse arrays")
    xs = [_sparse(t, f"tensor {k}") for k, t in enumerate(tensors)]
    if not xs:
        raise OperandError(f"{what} needs at least one tensor")
    return xs


def cat(tensors, dim=None, *, axis=None, out_format=None):
    """``torch.cat``: join sparse tensors along an existing dimension ``dim``.  One compiled
    kernel for all operands; the result has the common dtype (``numpy.result_type``).
    ``dim`` (or ``axis``) defaults to 0."""
    dim = dim_or_axis(axis, dim, "cat", 0)
    xs = _joinable(tensors, "cat")
    rank = xs[0].ndim
    d = _axis(dim, rank)
    for k, x in enumerate(xs):
        if x.ndim != rank or any(x.shape[e] != xs[0].shape[e] for e in range(rank) if e != d):
            raise ShapeError(f"cat: tensor {k} has shape {tuple(x.shape)}, tensor 0 {tuple(xs[0].shape)}; "
                             f"they must agree except in dimension {d}")
    shape = list(xs[0].shape)
    shape[d] = sum(x.shape[d] for x in xs)
    ints, off = list(shape), 0
    for x in xs:
        ints += [off if e == d else 0 for e in range(rank)]
        off += x.shape[d]
    dtype = np.result_type(*[x.dtype for x in xs])
    fmt = out_format if out_format is not None else _default_format(xs[0], rank)
    src = dict(pick=tuple(range(rank)), offsets=True)
    return _gather(xs, [src] * len(xs), ints, tuple(shape), fmt, d == 0, dtype)


def stack(tensors, dim=None, *, axis=None, out_format=None):
    """``torch.stack``: join sparse tensors of one shape along a new dimension ``dim`` (or
    ``axis``; default 0)."""
    dim = dim_or_axis(axis, dim, "stack", 0)
    xs = _joinable(tensors, "stack")
    rank = xs[0].ndim
    d = _axis(dim, rank + 1)
    for k, x in enumerate(xs):
        if x.shape != xs[0].shape:
            raise ShapeError(f"stack: tensor {k} has shape {tuple(x.shape)}, tensor 0 {tuple(xs[0].shape)}")
    shape = list(xs[0].shape)
    shape.insert(d, len(xs))
    pick = list(range(rank))
    pick.insert(d, None)
    ints = list(shape)
    for k in range(len(xs)):
        ints += [k if e == d else 0 for e in range(rank + 1)]
    dtype = np.result_type(*[x.dtype for x in xs])
    fmt = out_format if out_format is not None else ("csr" if rank + 1 == 2 else "coo")
    src = dict(pick=tuple(pick), offsets=True)
    return _gather(xs, [src] * len(xs), ints, tuple(shape), fmt, d == 0, dtype)


def hstack(tensors, *, out_format=None):
    """``numpy.hstack`` / ``scipy.sparse.hstack``: along dimension 1 (0 for vectors)."""
    xs = _joinable(tensors, "hstack")
    return cat(xs, 0 if xs[0].ndim == 1 else 1, out_format=out_format)


def vstack(tensors, *, out_format=None):
    """``numpy.vstack`` / ``scipy.sparse.vstack``: along dimension 0 (vectors become rows)."""
    xs = _joinable(tensors, "vstack")
    if xs[0].ndim == 1:
        return stack(xs, 0, out_format=out_format)
    return cat(xs, 0, out_format=out_format)


# ----------------------------------------------------------------------------- reshapes

def reshape(input, shape, *, out_format=None):
    """``torch.reshape`` / ``numpy.reshape`` (row-major, ``order='C'``) of a sparse tensor to
    any rank; one ``-1`` is inferred.  One compiled kernel: linear coordinates of the
    stored entries, split in the new shape."""
    x = _sparse(input, "input")
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = [operator.index(s) for s in shape]
    except TypeError:
        raise ShapeError(f"reshape: the shape must be integers, got {shape!r}") from None
    numel = math.prod(x.shape)
    if shape.count(-1) > 1 or any(s < -1 for s in shape):
        raise ShapeError(f"cannot reshape to {tuple(shape)}: one -1 at most, other sizes >= 0")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or numel % rest:
            raise ShapeError(f"cannot reshape a tensor of shape {tuple(x.shape)} into {tuple(shape)}")
        shape[shape.index(-1)] = numel // rest
    if math.prod(shape) != numel:
        raise ShapeError(f"cannot reshape a tensor of shape {tuple(x.shape)} ({numel} entries) "
                         f"into {tuple(shape)}")
    if not shape:
        raise ShapeError("a sparse tensor cannot be reshaped to rank 0")
    if max(shape) > _INDEX_MAX:
        raise ShapeError(f"cannot reshape to {tuple(shape)}: a dimension of more than 2**63 - 1 "
                         f"entries has no index (sparse indices are int64 at most)")
    fmt = out_format if out_format is not None else _default_format(x, len(shape))
    return _gather([x], [dict(pick=None)], list(shape), tuple(shape), fmt, True, x.dtype)


def flatten(input, start_dim: int = 0, end_dim: int = -1, *, out_format=None):
    """``torch.flatten``: dimensions ``start_dim .. end_dim`` merged into one."""
    x = _sparse(input, "input")
    s, e = _axis(start_dim, x.ndim, "start_dim"), _axis(end_dim, x.ndim, "end_dim")
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = list(x.shape[:s]) + [math.prod(x.shape[s:e + 1])] + list(x.shape[e + 1:])
    return reshape(x, shape, out_format=out_format)


def prune(input, *, out_format=None):
    """Drop stored zeros (explicit zeros, cancelled entries); NaNs stay.  A compiled kernel
    that inserts only the stored entries whose value is not zero."""
    x = _sparse(input, "input")
    fmt = out_format if out_format is not None else _default_format(x, x.ndim)
    return _gather([x], [dict(pick=tuple(range(x.ndim)), nonzero=True)], list(x.shape), tuple(x.shape),
                   fmt, True, x.dtype)


# ----------------------------------------------------------------------------- contractions

def tensordot(a, b, axes=2, *, out_format=None):
    """``numpy.tensordot`` / ``torch.tensordot``: sum over ``axes`` (an int: the last
    ``axes`` of ``a`` with the first of ``b``; or two sequences of axes), as one einsum
    kernel.  Result pattern and format by the pattern rules."""
    A, B = as_operand(a, "a"), as_operand(b, "b")
    ra, rb = A.ndim, B.ndim
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > min(ra, rb):
            raise ShapeError(f"tensordot: axes={n} for operands of rank {ra} and {rb}")
        ax_a, ax_b = list(range(ra - n, ra)), list(range(n))
    else:
        try:
            ax_a, ax_b = axes
        except (TypeError, ValueError):
            raise ShapeError(f"tensordot: axes must be an int or a pair of sequences, got {axes!r}") from None
        ax_a = [ax_a] if isinstance(ax_a, (int, np.integer)) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, (int, np.integer)) else list(ax_b)
        if len(ax_a) != len(ax_b):
            raise ShapeError(f"tensordot: {len(ax_a)} axes of a but {len(ax_b)} of b")
        ax_a = [_axis(x, ra, "axis of a") for x in ax_a]
        ax_b = [_axis(x, rb, "axis of b") for x in ax_b]
        if len(set(ax_a)) != len(ax_a) or len(set(ax_b)) != len(ax_b):
            raise ShapeError("tensordot: an axis is repeated")
    for p, q in zip(ax_a, ax_b):
        if A.shape[p] != B.shape[q]:
            raise ShapeError(f"tensordot: axis {p} of a has size {A.shape[p]} but axis {q} of b has {B.shape[q]}")
    letters = _letters(ra + rb)
    sa = letters[:ra]
    sb = letters[ra:ra + rb]
    for p, q in zip(ax_a, ax_b):
        sb[q] = sa[p]
    out = [sa[i] for i in range(ra) if i not in ax_a] + [sb[i] for i in range(rb) if i not in ax_b]
    return einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", A, B, out_format=out_format)


def trace(input, axis1: int = 0, axis2: int = 1, *, out_format=None):
    """The trace over two axes (``numpy.trace``, flag4j's ``tensorTr``): the sum of the
    entries whose coordinates agree in ``axis1`` and ``axis2``; a scalar for a matrix, else
    a tensor of rank - 2.  One einsum kernel with a repeated index."""
    x = as_operand(input, "input")
    rank = x.ndim
    if rank < 2:
        raise ShapeError(f"trace needs two axes; the input has rank {rank}")
    a1, a2 = _axis(axis1, rank, "axis1"), _axis(axis2, rank, "axis2")
    if a1 == a2:
        raise ShapeError(f"trace: axis1 and axis2 are both {a1}")
    if x.shape[a1] != x.shape[a2]:
        raise ShapeError(f"trace: axes {a1} and {a2} have sizes {x.shape[a1]} and {x.shape[a2]}; "
                         f"the diagonal needs equal sizes")
    letters = _letters(rank)
    letters[a2] = letters[a1]
    out = [c for k, c in enumerate(letters) if k not in (a1, a2)]
    return einsum(f"{''.join(letters)}->{''.join(out)}", x, out_format=out_format)


def nnz(input) -> int:
    """The number of stored entries (after summing duplicates of a COO input), as
    ``torch``'s ``_nnz()``; a NumPy array stores every entry."""
    x = as_operand(input, "input")
    if not sp.issparse(x):
        if x.dtype.kind not in "biufc":
            raise OperandError(f"input is not a numeric array (dtype {x.dtype})")
        return int(x.size)
    validate(x, "input")
    if x.format == "coo" and not x.has_canonical_format:
        s = build(x, resolve("coo", x.ndim, "input"), "input")   # coalesced: stored entries only
        return int(s.buffers[-1].size)
    return int(x.nnz)


def density(input) -> float:
    """``nnz / number of entries`` (0.0 for a tensor without entries)."""
    x = as_operand(input, "input")
    n = math.prod(x.shape)
    return nnz(x) / n if n else 0.0
