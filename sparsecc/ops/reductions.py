"""sparsecc.ops: reductions with both meanings of zero, softmax, scatter/coalesce, argmax.

Every result is computed by a compiled sparsecc kernel; NumPy only builds index operands
(the coordinates of duplicates, the targets of a scatter) and wraps results.

Zero semantics (``implicit_zeros``):

* ``True`` (default): NumPy's answer on the dense array - an unstored entry is a 0, so a row
  with an unstored entry has ``amax >= 0`` and ``prod == 0``, and ``mean`` divides by the
  full length.  Computed over stored entries plus a count of them (never a dense pass),
  except ``argmax``/``argmin``, which look at every entry like NumPy does.
* ``False``: over stored entries only (torch's reductions over specified elements, flag4j's
  ``prod``); a row that stores nothing gets the reduction's identity - 0 for ``sum``, 1 for
  ``prod``, -inf/+inf (the dtype's extremes for integers) for ``amax``/``amin``, NaN for
  ``mean`` and -1 for ``argmax``/``argmin``.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from ..api import evaluate
from ..errors import DTypeError, OperandError, ShapeError, SparseccError
from ..runtime.operands import as_operand
from ._args import dim_or_axis, required

__all__ = ["sum", "prod", "amax", "amin", "mean", "argmax", "argmin", "softmax", "log_softmax",
           "scatter_reduce", "coalesce", "pow", "where"]

# ----------------------------------------------------------------------------- helpers

def _names(rank: int, stem: str = "i") -> list[str]:
    return [f"{stem}{k}" for k in range(rank)]


def _acc(name: str, idx) -> str:
    return f"{name}[{','.join(idx)}]" if len(idx) else name


def _axes(axis, rank: int, what: str = "axis") -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple) as sorted non-negative axes."""
    if axis is None:
        return tuple(range(rank))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in items:
        if not isinstance(a, (numbers.Integral, np.integer)) or isinstance(a, bool):
            raise ShapeError(f"{what} must be an int or a tuple of ints, got {axis!r}")
        b = int(a) + rank if a < 0 else int(a)
        if not 0 <= b < rank:
            raise ShapeError(f"{what} {a} is out of range for a tensor of rank {rank}")
        if b in out:
            raise ShapeError(f"{what} {a} is repeated in {axis!r}")
        out.append(b)
    return tuple(sorted(out))


def _one_axis(dim, rank: int, what: str = "dim") -> int:
    """One dimension (an int, negative allowed): a tuple is a ShapeError, not an unpacking error."""
    if isinstance(dim, (tuple, list)):
        raise ShapeError(f"{what} must be one int, got {dim!r}")
    return _axes(dim, rank, what)[0]


def _operand(x, what: str = "input"):
    return as_operand(x, what)


def _is_sparse(x) -> bool:
    return sp.issparse(x)


class _Plan:
    """Index names of one reduction of a rank-``rank`` operand over ``axes``."""

    def __init__(self, rank: int, axes: tuple[int, ...], shape):
        self.all = _names(rank)
        self.kept = [n for k, n in enumerate(self.all) if k not in axes]
        self.red = [n for k, n in enumerate(self.all) if k in axes]
        self.count = int(np.prod([shape[a] for a in axes], dtype=np.int64)) if axes else 1

    def x(self, name: str = "X", suffix: str = "") -> str:
        """``X`` indexed with the reduced indices renamed by ``suffix`` (for nested reductions)."""
        return _acc(name, [n + suffix if n in self.red else n for n in self.all])

    def red_of(self, suffix: str = "") -> str:
        return ",".join(n + suffix for n in self.red)

    def out(self) -> str:
        return _acc("O", self.kept)


def _run(text: str, out_format, **operands):
    # A BSR operand is read as CSR (the runtime's layout conversion; the blocks' stored
    # zeros stay stored): MLIR 22 gives wrong monoid reductions (max/min/times/plus over
    # stored entries, sparse_tensor.reduce) along a row of BSR blocks - each row keeps only
    # its last block's value, since the dense level i mod R sits between the blocks of a row.
    formats = {k: "csr" for k, v in operands.items()
               if sp.issparse(v) and v.format == "bsr" and v.ndim == 2}
    return evaluate(text, out_format=out_format, formats=formats or None, **operands)


def _np_sum_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype ``numpy.sum``/``prod`` give: small integers and bools widen to int64."""
    return np.result_type(np.sum(np.zeros(1, dtype)))


# -------------------------------------------------------------------------- reductions

def sum(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):  # noqa: A001
    """``numpy.sum`` (``implicit_zeros=True``) or the sum of stored entries (``False``: the
    same values; the result's pattern is the rows that store something either way).
    ``axis`` (or torch's ``dim``): None (everything), an int or a tuple of ints.  Result
    dtype as NumPy's (bools and small integers: int64)."""
    axis = dim_or_axis(axis, dim, "sum", None)
    x = _operand(input)
    plan = _Plan(x.ndim, _axes(axis, x.ndim), x.shape)
    body = plan.x()
    ops = {"X": x}
    want = _np_sum_dtype(x.dtype)
    if want != x.dtype:
        body = f"{body} * one"
        ops["one"] = np.ones((), want)
    if not plan.red:
        return _run(f"{plan.out()} = {body}", out_format, **ops)
    op = "sum" if implicit_zeros else "plus"
    return _run(f"{plan.out()} = {op}[{plan.red_of()}]({body})", out_format, **ops)


def mean(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):
    """``numpy.mean`` (``implicit_zeros=True``: divides by the full length) or the mean of
    the stored entries (``False``; a row storing nothing gives NaN).  Like NumPy, bools and
    integers are summed in float64 (each value converted first: no integer overflow, a bool
    counts as 1)."""
    axis = dim_or_axis(axis, dim, "mean", None)
    x = _operand(input)
    plan = _Plan(x.ndim, _axes(axis, x.ndim), x.shape)
    fdt = np.result_type(np.mean(np.zeros(1, x.dtype)))
    one = np.ones((), fdt)
    if not plan.red:
        return _run(f"{plan.out()} = {plan.x()} * one", out_format, X=x, one=one)
    if implicit_zeros:
        return _run(f"{plan.out()} = sum[{plan.red_of()}]({plan.x()} * one) / n", out_format,
                    X=x, one=one, n=np.asarray(plan.count, fdt))
    # the count of stored entries in the mean's dtype: second(X, one) is one per stored entry
    text = (f"{plan.out()} = stored(plus[{plan.red_of()}]({plan.x()} * one) / "
            f"plus[{plan.red_of('c')}](second({plan.x(suffix='c')}, one)))")
    return _run(text, out_format, X=x, one=one)


def prod(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):
    """``numpy.prod`` (``implicit_zeros=True``: 0 where a reduced row has an unstored entry)
    or the product of stored entries (``False``; a row storing nothing gives 1)."""
    return _monoid("times", input, dim_or_axis(axis, dim, "prod", None), implicit_zeros, out_format)


def amax(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):
    """``numpy.amax`` (``implicit_zeros=True``: at least 0 where a reduced row has an
    unstored entry) or the maximum of stored entries (``False``; a row storing nothing
    gives -inf, or the dtype's minimum for integers)."""
    return _monoid("max", input, dim_or_axis(axis, dim, "amax", None), implicit_zeros, out_format)


def amin(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):
    """``numpy.amin`` or the minimum of stored entries (see :func:`amax`)."""
    return _monoid("min", input, dim_or_axis(axis, dim, "amin", None), implicit_zeros, out_format)


def _monoid(op: str, input, axis, implicit_zeros: bool, out_format):
    x = _operand(input)
    plan = _Plan(x.ndim, _axes(axis, x.ndim), x.shape)
    if x.dtype.kind == "c" and plan.red:
        raise SparseccError(f"{'prod' if op == 'times' else 'a' + op} of complex values: "
                            f"{'only sum and mean are' if op != 'times' else 'not'} supported")
    ops = {"X": x}
    body = plan.x()
    if op == "times":
        want = _np_sum_dtype(x.dtype)       # NumPy's, also for axis=(): bools/int32 -> int64
        if want != x.dtype:
            body = f"{body} * one"
            ops["one"] = np.ones((), want)
    if not plan.red:
        return _run(f"{plan.out()} = {body}", out_format, **ops)
    red = f"{op}[{plan.red_of()}]({body})"
    if plan.count == 0 and implicit_zeros and op != "times":
        raise ShapeError(f"zero-size reduction: a{op} of an empty axis has no value (NumPy raises too); "
                         f"implicit_zeros=False gives the identity")
    if not implicit_zeros or not _is_sparse(x) or plan.count == 0:
        return _run(f"{plan.out()} = {red}", out_format, **ops)
    # NumPy's meaning: combine the stored entries' result with the zeros of unstored ones,
    # using the number of stored entries of each reduced row (n: the full length)
    ops["n"] = np.asarray(plan.count, np.int64)
    count = f"plus[{plan.red_of('c')}](pair({plan.x(suffix='c')}, 1))"
    if op == "times":
        # an unstored zero: red * 0, which is NaN where red is NaN or +-inf (like NumPy)
        fix = f"where({count} == n, {red}, {red} * 0)"
    else:
        # the zero as a 0-d operand of the input's dtype (a literal 0 would make bools int64)
        ops["zero"] = np.zeros((), x.dtype)
        fix = f"where({count} < n, {op}({red}, zero), {red})"
    return _run(f"{plan.out()} = {fix}", out_format, **ops)


def argmax(input, axis=None, *, dim=None, implicit_zeros: bool = True):
    """``numpy.argmax``: the first index of the largest value along ``axis`` (an int, or
    None for the flattened C-order index).  ``implicit_zeros=False``: among stored entries
    only (-1 for a row storing nothing).  NaN counts as the largest, like NumPy."""
    return _arg("max", input, dim_or_axis(axis, dim, "argmax", None), implicit_zeros)


def argmin(input, axis=None, *, dim=None, implicit_zeros: bool = True):
    """``numpy.argmin`` (see :func:`argmax`)."""
    return _arg("min", input, dim_or_axis(axis, dim, "argmin", None), implicit_zeros)


def _arg(op: str, input, axis, implicit_zeros: bool):
    x = _operand(input)
    if axis is not None and isinstance(axis, (tuple, list)):
        raise ShapeError("argmax/argmin take one axis (or None), like NumPy")
    axes = _axes(axis, x.ndim)
    plan = _Plan(x.ndim, axes, x.shape)
    if plan.count == 0:
        raise ShapeError(f"arg{op} of an empty sequence (axis {axis!r} of shape {tuple(x.shape)})")
    if x.dtype.kind == "c":
        raise SparseccError(f"arg{op} of complex values is not supported")
    if axis is None and x.ndim > 1 and _is_sparse(x):
        # the flat C-order index: the stored entries reshaped to one row (a compiled gather
        # kernel), then the index along that row
        from .structural import reshape
        row = reshape(x, (1, plan.count), out_format="csr")
        return np.int64(_arg(op, row, 1, implicit_zeros)[0])
    ops = {"X": x, "big": np.asarray(np.iinfo(np.int64).max, np.int64)}
    # the position reported: the index along the axis, or the flat C-order index, read from
    # index operands p_k[i] = i * stride_k (built from the shape alone).  Not index(i):
    # MLIR 22 does not renumber linalg.index when the sparsifier reorders the loops (a
    # reduction over the outer level of a CSR/CSC/COO operand), so index(i0) read i1.
    strides = np.cumprod([1] + [x.shape[a] for a in reversed(axes)][:-1])[::-1]
    terms = []
    for k, (a, st) in enumerate(zip(axes, strides)):
        ops[f"p{k}"] = np.arange(x.shape[a], dtype=np.int64) * np.int64(st)
        terms.append(f"p{k}[{plan.red[k]}]")
    pos = " + ".join(terms)
    sparse = _is_sparse(x)
    if implicit_zeros and sparse:
        # the extreme with NumPy's meaning, then the first entry equal to it, unstored
        # zeros included (dense(...): every entry, like numpy.argmax on the dense array)
        ops["n"] = np.asarray(plan.count, np.int64)
        red = f"{op}[{plan.red_of('m')}]({plan.x(suffix='m')})"
        count = f"plus[{plan.red_of('c')}](pair({plan.x(suffix='c')}, 1))"
        v = f"where({count} < n, {op}({red}, 0), {red})"
        xv = f"dense({plan.x()})"
    else:
        v = f"{op}[{plan.red_of('m')}]({plan.x(suffix='m')})"
        xv = plan.x()
    hit = f"lor({xv} == {v}, land({v} != {v}, {xv} != {xv}))"
    first = f"min[{plan.red_of()}](where({hit}, {pos}, big))"
    text = f"{plan.out()} = where({first} == big, -1, {first})"
    out = _run(text, "dense", **ops)
    return np.int64(out) if np.ndim(out) == 0 else out


# ----------------------------------------------------------------------------- softmax

def softmax(input, dim=None, *, axis=None, out_format=None):
    """``torch.sparse.softmax``: along ``dim``, over stored entries; unstored entries count
    as -inf, so the result keeps ``input``'s pattern and each row's stored values sum to 1.
    A dense ``input`` stores every entry (the usual softmax)."""
    return _softmax(input, dim_or_axis(axis, dim, "softmax"), out_format, log=False)


def log_softmax(input, dim=None, *, axis=None, out_format=None):
    """``torch.sparse.log_softmax``: ``log(softmax(input, dim))`` on ``input``'s pattern."""
    return _softmax(input, dim_or_axis(axis, dim, "log_softmax"), out_format, log=True)


def _softmax(input, dim, out_format, log: bool):
    x = _operand(input)
    if x.dtype.kind not in "fc":
        x = x.astype(np.float64)          # softmax of integers or bools: in floats, like torch
    axis = _one_axis(dim, x.ndim, "dim")
    plan = _Plan(x.ndim, (axis,), x.shape)
    r = plan.red[0]

    def xs(suffix):
        return plan.x(suffix=suffix)
    top = f"max[{r}a]({xs('a')})"
    total = f"plus[{r}b](exp({xs('b')} - max[{r}c]({xs('c')})))"
    if log:
        body = f"{plan.x()} - {top} - log({total})"
    else:
        body = f"exp({plan.x()} - {top}) / {total}"
    return _run(f"{_acc('O', plan.all)} = stored({body})", out_format, X=x)


# ------------------------------------------------------------- scatter_reduce, coalesce

_REDUCES = {"sum": "plus", "prod": "times", "amax": "max", "amin": "min", "mean": "plus"}


def scatter_reduce(input, dim=None, index=None, src=None, reduce=None, *, axis=None,
                   include_self: bool = True):
    """``torch.Tensor.scatter_reduce``: for every position ``p`` of ``index``,
    ``out[p with p[dim] = index[p]]`` is combined with ``src[p]`` by ``reduce`` (``"sum"``,
    ``"prod"``, ``"mean"``, ``"amax"``, ``"amin"``); ``include_self`` says whether ``input``'s
    value takes part.  Entries no index points at keep ``input``'s value.  Integer ``mean``
    rounds down, like torch.  NumPy arrays in, a NumPy array out.  ``axis=`` may replace
    ``dim``.  An empty ``index`` leaves ``input`` unchanged (a copy), like torch."""
    dim = dim_or_axis(axis, dim, "scatter_reduce")
    index, src, reduce = (required(index, "index", "scatter_reduce"), required(src, "src", "scatter_reduce"),
                          required(reduce, "reduce", "scatter_reduce"))
    if reduce not in _REDUCES:
        raise OperandError(f"reduce must be one of {', '.join(_REDUCES)}; got {reduce!r}")
    x = np.asarray(input)
    src = np.asarray(src)
    idx = np.asarray(index)
    if x.ndim >= 1 and idx.size == 0:
        # torch returns the input unchanged for an empty index, whatever its shape: here a
        # scatter of nothing (E stores nothing), which copies X in the kernel
        idx = np.zeros((0,) * x.ndim, np.int64)
        if src.ndim != x.ndim:
            src = np.zeros((0,) * x.ndim, x.dtype)
    if x.ndim == 0 or idx.ndim != x.ndim or src.ndim != x.ndim:
        raise ShapeError(f"input, index and src need the same number of dimensions (>= 1); got "
                         f"{x.ndim}, {idx.ndim}, {src.ndim}")
    if idx.dtype.kind not in "iu":
        raise OperandError(f"index must hold integers, got {idx.dtype}")
    if src.dtype != x.dtype:
        raise OperandError(f"src ({src.dtype}) and input ({x.dtype}) must have the same dtype, as in torch")
    if reduce == "mean" and x.dtype.kind not in "iufc":
        raise DTypeError(f"scatter_reduce 'mean' of {x.dtype} values is not defined (torch refuses it too)")
    d = _one_axis(dim, x.ndim, "dim")
    for k in range(x.ndim):
        if idx.shape[k] > src.shape[k] or (k != d and idx.shape[k] > x.shape[k]):
            raise ShapeError(f"index shape {idx.shape} does not fit src {src.shape} / input {x.shape} "
                             f"in dimension {k}")
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[d]):
        raise OperandError(f"index values must lie in [0, {x.shape[d]}) for dim {d}; "
                           f"got {idx.min()}..{idx.max()}")
    pos = np.indices(idx.shape).reshape(idx.ndim, -1)
    values = np.ascontiguousarray(src[tuple(slice(0, s) for s in idx.shape)].reshape(-1))
    if values.size == 0:              # E's entry dimension has size 1 then: v[e] never read
        values = np.zeros(1, x.dtype)
    targets = pos.copy()
    targets[d] = idx.reshape(-1)
    E = _scatter_pattern(targets, x.shape)
    names = _names(x.ndim)
    t = ",".join(names)
    op = _REDUCES[reduce]
    red = f"{op}[e](second(E[{t},e], v[e]))"
    count = f"plus[c](pair(E[{t},c], 1))"
    X = _acc("X", names)
    ops = {"X": x, "E": E, "v": values}
    if reduce == "mean":
        # divided by the count in the input's dtype, as torch counts (the int64 count of
        # pair(E, 1) widened a float32 mean to float64 and an int32 one to int64); integers
        # floor-divide like torch, by at least 1 where nothing is counted (not selected)
        ops["one"] = np.ones((), x.dtype)
        n = f"plus[m](second(E[{t},m], one))"
        if x.dtype.kind == "i":
            combined = f"({X} + {red}) // ({n} + 1)" if include_self else f"{red} // max({n}, 1)"
        else:
            combined = f"({X} + {red}) / ({n} + 1)" if include_self else f"{red} / {n}"
        combined = f"stored({combined})"
    elif include_self:
        combined = {"plus": f"{X} + {red}", "times": f"{X} * {red}", "max": f"max({X}, {red})",
                    "min": f"min({X}, {red})"}[op]
    else:
        combined = red
    text = f"{_acc('O', names)} = where({count} > 0, {combined}, {X})"
    return _run(text, "dense", **ops)


def _scatter_pattern(targets: np.ndarray, shape) -> sp.coo_array:
    """The (rank+1)-d pattern E[t..., e]: entry ``e`` of the scatter goes to ``t``; sorted
    by target, then entry (a canonical COO: no duplicates, since ``e`` differs)."""
    n = targets.shape[1]
    lin = np.ravel_multi_index(tuple(targets), shape) if n else np.zeros(0, np.int64)
    order = np.argsort(lin, kind="stable")
    coords = tuple(targets[:, order]) + (order,)
    E = sp.coo_array((np.ones(n, bool), coords), shape=tuple(shape) + (max(n, 1),))
    E.has_canonical_format = True
    return E


def coalesce(input, reduce: str = "sum"):
    """Combine duplicate entries of a COO array by ``reduce`` (``"sum"``, ``"prod"``,
    ``"amax"``, ``"amin"``, ``"mean"``), as flag4j's ``coalesce(aggregator)``; returns a
    canonical ``coo_array`` (sorted, unique coordinates).  The combining is a compiled
    reduction over the duplicates; NumPy only finds which coordinates repeat."""
    if reduce not in _REDUCES:
        raise OperandError(f"reduce must be one of {', '.join(_REDUCES)}; got {reduce!r}")
    if not sp.issparse(input):
        raise OperandError(f"coalesce takes a SciPy sparse array, got {type(input).__name__}")
    A = input if input.format == "coo" else sp.coo_array(input)
    coords = np.vstack([np.asarray(c, np.int64) for c in A.coords]) if A.nnz else \
        np.zeros((A.ndim, 0), np.int64)
    if A.nnz == 0:
        out = sp.coo_array((np.zeros(0, A.dtype), tuple(coords)), shape=A.shape)
        out.has_canonical_format = True
        return out
    lin = np.ravel_multi_index(tuple(coords), A.shape)
    uniq, inv = np.unique(lin, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    E = sp.csr_array((np.ones(A.nnz, bool), order, np.searchsorted(inv[order], np.arange(len(uniq) + 1))),
                     shape=(len(uniq), A.nnz))
    E.has_sorted_indices = True
    values = np.ascontiguousarray(A.data)
    op = _REDUCES[reduce]
    ops = {"E": E, "v": values}
    if reduce == "mean":
        # numpy.mean's dtype (float32 stays float32, integers are summed in float64): the
        # values and the count in it (pair(E, 1) counted in int64, which widened float32)
        ops["one"] = np.ones((), np.result_type(np.mean(np.zeros(1, values.dtype))))
        text = "y[u] = stored(plus[e](second(E[u,e], v[e]) * one) / plus[c](second(E[u,c], one)))"
    else:
        text = f"y[u] = {op}[e](second(E[u,e], v[e]))"
    vals = _run(text, "dense", **ops)
    out = sp.coo_array((vals, np.unravel_index(uniq, A.shape)), shape=A.shape)
    out.has_canonical_format = True
    return out


# ----------------------------------------------------------------------- pow and where

def pow(input, exponent, *, out_format=None):  # noqa: A001
    """``torch.pow``: ``input ** exponent``.  A positive scalar exponent keeps ``input``'s
    pattern (0 ** p == 0) and compiles once for every exponent; other exponents give
    ``0 ** p != 0`` at unstored entries, so the result is dense (NumPy's values)."""
    x = _operand(input)
    idx = _names(x.ndim)
    X = _acc("X", idx)
    if isinstance(exponent, (numbers.Number, np.generic)) and not isinstance(exponent, complex) \
            and np.isreal(exponent) and exponent > 0:
        e = np.asarray(exponent, np.result_type(x.dtype, exponent))
        return _run(f"{_acc('O', idx)} = stored(pow({X}, e))", out_format, X=x, e=e)
    e = as_operand(exponent, "exponent")
    if x.dtype.kind in "iub" and e.dtype.kind in "iub" and e.size:
        stored = e.data if sp.issparse(e) else e
        if stored.size and stored.min() < 0:
            raise DTypeError("integers to negative integer powers are not allowed (as in NumPy and torch); "
                             "for a float result give a float exponent")
    if e.ndim == 0:
        # a Python scalar stays weak (NumPy's and torch's rule: float32 ** -1.0 is float32)
        weak = exponent if isinstance(exponent, numbers.Number) else e
        e = np.asarray(e, np.result_type(x.dtype, weak))
        return _run(f"{_acc('O', idx)} = pow({X}, e)", out_format, X=x, e=e)
    if tuple(e.shape) != tuple(x.shape):
        raise ShapeError(f"exponent shape {tuple(e.shape)} differs from input shape {tuple(x.shape)}")
    return _run(f"{_acc('O', idx)} = pow({X}, {_acc('E', idx)})", out_format, X=x, E=e)


def where(condition, input, other, *, out_format=None):
    """``numpy.where``/``torch.where``: ``input`` where ``condition`` holds, else ``other``
    (same shapes, or ``other`` a scalar).  A sparse ``condition`` is False where it stores
    nothing.  Pattern: the union of ``input``'s and ``other``'s (a scalar 0 adds nothing)."""
    c = _operand(condition, "condition")
    x = _operand(input)
    idx = _names(x.ndim)
    if tuple(c.shape) != tuple(x.shape):
        raise ShapeError(f"condition shape {tuple(c.shape)} differs from input shape {tuple(x.shape)}")
    C, X = _acc("C", idx), _acc("X", idx)
    if isinstance(other, (numbers.Number, np.generic)) and other == 0:
        return _run(f"{_acc('O', idx)} = where({C}, {X}, 0)", out_format, C=c, X=x)
    y = _operand(other, "other")
    if y.ndim == 0:
        weak = other if isinstance(other, numbers.Number) else y     # a Python scalar stays weak
        return _run(f"{_acc('O', idx)} = where({C}, {X}, y)", out_format, C=c, X=x,
                    y=np.asarray(y, np.result_type(x.dtype, weak)))
    if tuple(y.shape) != tuple(x.shape):
        raise ShapeError(f"other shape {tuple(y.shape)} differs from input shape {tuple(x.shape)}")
    return _run(f"{_acc('O', idx)} = where({C}, {X}, {_acc('Y', idx)})", out_format, C=c, X=x, Y=y)
