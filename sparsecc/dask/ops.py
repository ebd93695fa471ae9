"""The op library (``sc.ops``) over Dask arrays (docs/distributed.md).

``sparsecc.ops`` calls :func:`dispatch` when an operand is a Dask array.  An op that is an
einsum or index-notation kernel underneath runs as that kernel over the Dask operands
(``sparsecc.dask.call``: one compiled kernel per op and formats, one task per block,
partial results of a split reduced index combined by the root reduction's monoid).  An op
whose in-memory kernel is not a monoid reduction at its root is a short chain of such
kernels, each planned the same way:

* ``amax``/``amin``/``prod`` with ``implicit_zeros=True`` on sparse chunks: the reduction of
  the stored entries and their count (both split, combined by ``max``/``min``/``times`` and
  ``+``), then one element-wise kernel adds the unstored zeros where the count is short;
* ``mean``: the sum (and, stored-only, the count), then one element-wise division;
* ``addmm``/``sspaddmm``/``sampled_addmm``: the product (split, combined by ``+``), then one
  element-wise kernel for ``beta * input + alpha * product``.

``softmax``/``log_softmax`` reduce below the root: their dimension is kept in one chunk
(the plan rechunks it), the other dimensions stay split.  Ops that need global coordinates
(slices, concatenation, reshapes, scatters, arg-reductions, ...) raise an ``OperandError``
naming the op: compute the operand first.
"""

from __future__ import annotations

import numbers
import string

import numpy as np
import scipy.sparse as sp

from ..api import einsum, evaluate
from ..errors import DTypeError, OperandError, ShapeError, SparseccError
from ..runtime.operands import as_operand
from . import _chunk_kind, is_dask


def dispatch(name: str, args: tuple, kwargs: dict):
    """``sc.ops.<name>(*args, **kwargs)`` with a Dask operand: a lazy Dask array."""
    f = OPS.get(name)
    if f is None:
        raise OperandError(
            f"sc.ops.{name} does not take Dask arrays: it needs the operand's global coordinates "
            f"(or a global order of its entries), which one block does not have. Compute the operand "
            f"first (x.compute()) and call sc.ops.{name} on the in-memory array; ops over Dask arrays: "
            f"{', '.join(sorted(OPS))} (docs/distributed.md)")
    return f(*args, **kwargs)


# ------------------------------------------------------------------ operands
def _operand(x, what: str):
    if is_dask(x):
        if any(isinstance(c, float) and np.isnan(c) for cc in x.chunks for c in cc):
            raise OperandError(f"{what} has unknown chunk sizes; call .compute_chunk_sizes() first")
        _chunk_kind(x, what)        # an unknown chunk type: an OperandError before any task
        return x
    return as_operand(x, what)


def _is_sparse(x) -> bool:
    if is_dask(x):
        return not isinstance(x._meta, np.ndarray)
    return sp.issparse(x)


def _layout(x):
    """A matrix's own SciPy layout (csr, csc, coo), else None (the pattern rules decide)."""
    m = x._meta if is_dask(x) else x
    return m.format if sp.issparse(m) and x.ndim == 2 and m.format in ("csr", "csc", "coo") else None


def _is_scalar(v) -> bool:
    return isinstance(v, (numbers.Number, np.generic)) or (isinstance(v, np.ndarray) and v.ndim == 0)


def _idx(rank: int) -> list[str]:
    return [f"i{k}" for k in range(rank)]


def _acc(name: str, idx) -> str:
    return f"{name}[{','.join(idx)}]" if len(idx) else name


def _same_shape(x, y):
    if tuple(x.shape) != tuple(y.shape):
        raise ShapeError(f"shapes {tuple(x.shape)} and {tuple(y.shape)} differ (no broadcasting)")


def _matrix(x, what: str, rank: int = 2):
    x = _operand(x, what)
    if x.ndim != rank:
        raise ShapeError(f"{what} must have rank {rank}, got shape {tuple(x.shape)}")
    return x


# ------------------------------------------------------------------ linalg
def mm(mat1, mat2, *, out_format=None):
    return einsum("ik,kj->ij", _matrix(mat1, "mat1"), _matrix(mat2, "mat2"), out_format=out_format)


def smm(input, mat, *, out_format="csr"):
    return mm(input, mat, out_format=out_format)


def hspmm(mat1, mat2, *, out_format="csr"):
    return mm(mat1, mat2, out_format=out_format)


def mv(mat, vec):
    return einsum("ij,j->i", _matrix(mat, "mat"), _matrix(vec, "vec", 1))


def bmm(input, mat2, *, out_format=None):
    return einsum("bik,bkj->bij", _matrix(input, "input", 3), _matrix(mat2, "mat2", 3), out_format=out_format)


def _scalars(beta, alpha, *ops):
    t = np.result_type(*[o.dtype for o in ops], beta, alpha)
    return np.asarray(beta, dtype=t), np.asarray(alpha, dtype=t)


def _product_shape(C, A, B):
    if (C.shape[0], C.shape[1]) != (A.shape[0], B.shape[1]):
        raise ShapeError(f"input has shape {tuple(C.shape)} but mat1 @ mat2 has {(A.shape[0], B.shape[1])}")


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out_format=None):
    C, A, B = _matrix(input, "input"), _matrix(mat1, "mat1"), _matrix(mat2, "mat2")
    b, a = _scalars(beta, alpha, C, A, B)
    _product_shape(C, A, B)
    if beta == 0:
        return evaluate("O[i,j] = alpha * A[i,k] * B[k,j]", A=A, B=B, alpha=a, out_format=out_format)
    # the product first (its split k combined by +), then the sum: one kernel each
    P = einsum("ik,kj->ij", A, B)
    fmt = _in_memory_format("O[i,j] = beta * C[i,j] + alpha * A[i,k] * B[k,j]", out_format, (C.shape[0], C.shape[1]),
                            [n for n, v in (("C", C), ("A", A), ("B", B)) if _is_sparse(v)])
    return evaluate("O[i,j] = beta * C[i,j] + alpha * P[i,j]", C=C, P=P, beta=b, alpha=a, out_format=fmt)


def sspaddmm(input, mat1, mat2, *, beta=1, alpha=1, out_format="csr"):
    C, A, B = _matrix(input, "input"), _matrix(mat1, "mat1"), _matrix(mat2, "mat2")
    _product_shape(C, A, B)
    b, a = _scalars(beta, alpha, C, A, B)
    P = einsum("ik,kj->ij", A, B, out_format="csr")
    return evaluate("O[i,j] = beta * C[i,j] + alpha * P[i,j]", C=C, P=P, beta=b, alpha=a, out_format=out_format)


def _pattern_blocks(m, value, dtype):
    """``m``'s pattern with every stored value ``value`` (``elementwise._pattern``: built
    from the indices alone), block by block for a Dask ``m``."""
    if not is_dask(m):
        from ..ops.elementwise import _pattern
        return _pattern(m, value, dtype)
    return m.map_blocks(_block_pattern, value, dtype, dtype=np.dtype(dtype),
                        meta=_block_pattern(m._meta, value, dtype))


def _block_pattern(block, value, dtype):
    from ..ops.elementwise import _pattern
    from . import _chunk_out
    p = _pattern(block, value, dtype)
    return _chunk_out(p, p.ndim)        # N-d: a pydata COO chunk, as the plan's results


def sampled_addmm(input, mat1, mat2, *, beta=1, alpha=1, out_format=None):
    C = _operand(input, "input")
    if not _is_sparse(C) or C.ndim != 2:
        raise OperandError("sampled_addmm: input must be a sparse matrix")
    A, B = _matrix(mat1, "mat1"), _matrix(mat2, "mat2")
    _product_shape(C, A, B)
    b, a = _scalars(beta, alpha, C, A, B)
    fmt = out_format if out_format is not None else (_layout(C) or "csr")
    P = _pattern_blocks(C, 1, np.result_type(A.dtype, B.dtype))
    S = einsum("ij,ik,kj->ij", P, A, B, out_format=fmt)
    return evaluate("O[i,j] = beta * C[i,j] + alpha * S[i,j]", C=C, S=S, beta=b, alpha=a, out_format=fmt)


# ------------------------------------------------------------------ element-wise
def mul(input, other, *, out_format=None):
    x = _operand(input, "input")
    n = _idx(x.ndim)
    if _is_scalar(other):
        s = np.asarray(other, dtype=np.result_type(x.dtype, other))
        return evaluate(f"{_acc('O', n)} = s * {_acc('X', n)}", s=s, X=x,
                        out_format=out_format if out_format is not None else _layout(x))
    y = _operand(other, "other")
    _same_shape(x, y)
    return evaluate(f"{_acc('O', n)} = {_acc('X', n)} * {_acc('Y', n)}", X=x, Y=y, out_format=out_format)


def _add(x, other, alpha, sign: str, out_format):
    x = _operand(x, "input")
    n = _idx(x.ndim)
    X = _acc("X", n)
    if _is_scalar(other):
        v = other if alpha == 1 else other * alpha      # a Python scalar stays weak (NumPy 2, torch)
        s = np.asarray(v, dtype=np.result_type(x.dtype, v))
        return evaluate(f"{_acc('O', n)} = {X} {sign} s", X=x, s=s, out_format=out_format)
    y = _operand(other, "other")
    _same_shape(x, y)
    if alpha == 1:
        return evaluate(f"{_acc('O', n)} = {X} {sign} {_acc('Y', n)}", X=x, Y=y, out_format=out_format)
    a = np.asarray(alpha, dtype=np.result_type(x.dtype, y.dtype, alpha))
    return evaluate(f"{_acc('O', n)} = {X} {sign} a * {_acc('Y', n)}", X=x, Y=y, a=a, out_format=out_format)


def add(input, other, *, alpha=1, out_format=None):
    return _add(input, other, alpha, "+", out_format)


def sub(input, other, *, alpha=1, out_format=None):
    return _add(input, other, alpha, "-", out_format)


def div(input, other, *, out_format=None):
    x = _operand(input, "input")
    n = _idx(x.ndim)
    fmt = out_format if out_format is not None else _layout(x)
    if _is_scalar(other):
        s = np.asarray(other, np.result_type(x.dtype, other))         # a Python scalar stays weak
        return evaluate(f"{_acc('O', n)} = {_acc('X', n)} / s", X=x, s=s, out_format=fmt)
    y = _operand(other, "other")
    _same_shape(x, y)
    return evaluate(f"{_acc('O', n)} = stored({_acc('X', n)} / {_acc('Y', n)})", X=x, Y=y, out_format=fmt)


def _unary(fn: str):
    def op(input, *, out_format=None):
        x = _operand(input, "input")
        n = _idx(x.ndim)
        return evaluate(f"{_acc('O', n)} = {fn}({_acc('X', n)})", X=x,
                        out_format=out_format if out_format is not None else _layout(x))
    return op


def permute(input, dims, *, out_format=None):
    from ..ops.elementwise import permute_subscripts
    x = _operand(input, "input")
    return einsum(permute_subscripts(dims, x.ndim), x,
                  out_format=out_format if out_format is not None else _layout(x))


def transpose(input, dim0: int = 0, dim1: int = 1, *, out_format=None):
    from ..ops.elementwise import transpose_dims
    x = _operand(input, "input")
    return permute(x, transpose_dims(dim0, dim1, x.ndim), out_format=out_format)


def sparse_mask(input, mask, *, out_format=None):
    x, m = _operand(input, "input"), _operand(mask, "mask")
    if not _is_sparse(m):
        raise OperandError("mask must be a SciPy sparse array")
    _same_shape(x, m)
    n = _idx(x.ndim)
    fmt = out_format if out_format is not None else (_layout(m) or "coo")
    P = _pattern_blocks(m, 1, x.dtype)
    if _is_sparse(x):       # intersection, plus zeros on the rest of the mask's pattern
        Z = _pattern_blocks(m, 0, x.dtype)
        return evaluate(f"{_acc('O', n)} = {_acc('P', n)} * {_acc('X', n)} + {_acc('Z', n)}", P=P, X=x, Z=Z,
                        out_format=fmt)
    return evaluate(f"{_acc('O', n)} = {_acc('P', n)} * {_acc('X', n)}", P=P, X=x, out_format=fmt)


def sparse_like(input, like, *, out_format=None):
    return sparse_mask(input, like, out_format=out_format)


def from_dense(input, pattern=None, *, out_format="csr"):
    if pattern is not None:
        return sparse_mask(input, pattern, out_format=out_format if out_format != "csr" else None)
    x = _operand(input, "input")
    if _is_sparse(x):
        raise OperandError("from_dense takes a NumPy array")
    letters = string.ascii_lowercase[:x.ndim]
    if out_format == "csr" and x.ndim != 2:
        out_format = "coo"
    return einsum(f"{letters}->{letters}", x, out_format=out_format)


def pow(input, exponent, *, out_format=None):  # noqa: A001
    x = _operand(input, "input")
    n = _idx(x.ndim)
    X, O = _acc("X", n), _acc("O", n)
    if isinstance(exponent, (numbers.Number, np.generic)) and not isinstance(exponent, complex) \
            and np.isreal(exponent) and exponent > 0:
        e = np.asarray(exponent, np.result_type(x.dtype, exponent))
        return _run(f"{O} = stored(pow({X}, e))", out_format, X=x, e=e)
    e = _operand(exponent, "exponent")
    if not is_dask(e) and x.dtype.kind in "iub" and e.dtype.kind in "iub":
        stored = e.data if sp.issparse(e) else e
        if stored.size and stored.min() < 0:
            raise DTypeError("integers to negative integer powers are not allowed (as in NumPy and torch); "
                             "for a float result give a float exponent")
    if e.ndim == 0:
        weak = exponent if isinstance(exponent, numbers.Number) else e     # a Python scalar stays weak
        e = np.asarray(e, np.result_type(x.dtype, weak)) if not is_dask(e) else e
        return _run(f"{O} = pow({X}, e)", out_format, X=x, e=e)
    _same_shape(x, e)
    return _run(f"{O} = pow({X}, {_acc('E', n)})", out_format, X=x, E=e)


def where(condition, input, other, *, out_format=None):
    c, x = _operand(condition, "condition"), _operand(input, "input")
    n = _idx(x.ndim)
    if tuple(c.shape) != tuple(x.shape):
        raise ShapeError(f"condition shape {tuple(c.shape)} differs from input shape {tuple(x.shape)}")
    C, X, O = _acc("C", n), _acc("X", n), _acc("O", n)
    if isinstance(other, (numbers.Number, np.generic)) and other == 0:
        return _run(f"{O} = where({C}, {X}, 0)", out_format, C=c, X=x)
    y = _operand(other, "other")
    if y.ndim == 0:
        weak = other if isinstance(other, numbers.Number) else y         # a Python scalar stays weak
        y = np.asarray(y, np.result_type(x.dtype, weak)) if not is_dask(y) else y
        return _run(f"{O} = where({C}, {X}, y)", out_format, C=c, X=x, y=y)
    if tuple(y.shape) != tuple(x.shape):
        raise ShapeError(f"other shape {tuple(y.shape)} differs from input shape {tuple(x.shape)}")
    return _run(f"{O} = where({C}, {X}, {_acc('Y', n)})", out_format, C=c, X=x, Y=y)


def to_dense(input):
    x = _operand(input, "input")
    letters = string.ascii_lowercase[:x.ndim]
    return einsum(f"{letters}->{letters}", x, out_format="dense")


# ------------------------------------------------------------------ reductions
def _plan(x, axis):
    from ..ops.reductions import _axes, _Plan
    return _Plan(x.ndim, _axes(axis, x.ndim), x.shape)


def _run(text: str, out_format, **operands):
    return evaluate(text, out_format=out_format, **operands)


def _in_memory_format(text: str, out_format, shape, sparse: list[str]):
    """``out_format``, else the result format the in-memory op's one kernel ``text`` gives
    when the operands named in ``sparse`` are sparse (the pattern rules), so that a chain of
    kernels over Dask arrays returns what the op returns in memory."""
    if out_format is not None:
        return out_format
    from ..make import make_kernel as _kernel
    f = _kernel(text, (), {}, None).result_format(sparse, tuple(shape))
    return "dense" if f is None else f


def _count(plan, x):
    """The number of stored entries of each reduced row: ``+`` over stored entries (int64)."""
    return _run(f"{plan.out()} = plus[{plan.red_of()}](pair({plan.x()}, 1))", "dense", X=x)


def sum(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):  # noqa: A001
    from ..ops._args import dim_or_axis
    from ..ops.reductions import _np_sum_dtype
    x = _operand(input, "input")
    plan = _plan(x, dim_or_axis(axis, dim, "sum", None))
    body, ops = plan.x(), {"X": x}
    want = _np_sum_dtype(x.dtype)
    if want != x.dtype:
        body = f"{body} * one"
        ops["one"] = np.ones((), want)
    if not plan.red:
        return _run(f"{plan.out()} = {body}", out_format, **ops)
    op = "sum" if implicit_zeros else "plus"
    return _run(f"{plan.out()} = {op}[{plan.red_of()}]({body})", out_format, **ops)


def mean(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):
    from ..ops._args import dim_or_axis
    x = _operand(input, "input")
    plan = _plan(x, dim_or_axis(axis, dim, "mean", None))
    fdt = np.result_type(np.mean(np.zeros(1, x.dtype)))
    one = np.ones((), fdt)
    if not plan.red:
        return _run(f"{plan.out()} = {plan.x()} * one", out_format, X=x, one=one)
    S = _run(f"{plan.out()} = plus[{plan.red_of()}]({plan.x()} * one)", "dense", X=x, one=one)
    o = _acc("O", plan.kept)
    s = _acc("S", plan.kept)
    shape = [x.shape[k] for k, n in enumerate(plan.all) if n in plan.kept]
    sparse = ["X"] if _is_sparse(x) else []
    if implicit_zeros:
        fmt = _in_memory_format(f"{plan.out()} = sum[{plan.red_of()}]({plan.x()} * one) / n", out_format,
                                shape, sparse)
        return _run(f"{o} = {s} / n", fmt, S=S, n=np.asarray(plan.count, fdt))
    fmt = _in_memory_format(f"{plan.out()} = stored(plus[{plan.red_of()}]({plan.x()} * one) / "
                            f"plus[{plan.red_of('c')}](second({plan.x(suffix='c')}, one)))", out_format, shape, sparse)
    K = _run(f"{plan.out()} = plus[{plan.red_of()}](second({plan.x()}, one))", "dense", X=x, one=one)
    return _run(f"{o} = stored({s} / {_acc('K', plan.kept)})", fmt, S=S, K=K)


def _monoid(op: str, name: str):
    def reduce(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):
        from ..ops._args import dim_or_axis
        from ..ops.reductions import _np_sum_dtype
        x = _operand(input, "input")
        plan = _plan(x, dim_or_axis(axis, dim, name, None))
        if x.dtype.kind == "c" and plan.red:
            raise SparseccError(f"{name} of complex values: "
                                f"{'only sum and mean are' if op != 'times' else 'not'} supported")
        ops = {"X": x}
        body = plan.x()
        if op == "times":
            want = _np_sum_dtype(x.dtype)
            if want != x.dtype:
                body = f"{body} * one"
                ops["one"] = np.ones((), want)
        if not plan.red:
            return _run(f"{plan.out()} = {body}", out_format, **ops)
        if plan.count == 0 and implicit_zeros and op != "times":
            raise ShapeError(f"zero-size reduction: a{op} of an empty axis has no value (NumPy raises too); "
                             f"implicit_zeros=False gives the identity")
        red = f"{plan.out()} = {op}[{plan.red_of()}]({body})"
        if not implicit_zeros or not _is_sparse(x) or plan.count == 0:
            return _run(red, out_format, **ops)
        # NumPy's meaning over split rows: the stored entries' reduction and their count,
        # each combined across blocks by its own monoid, then the unstored zeros added
        R = _run(red, "dense", **ops)
        C = _count(plan, x)
        r, c, o = _acc("R", plan.kept), _acc("C", plan.kept), _acc("O", plan.kept)
        n = np.asarray(plan.count, np.int64)
        shape = [x.shape[k] for k, m in enumerate(plan.all) if m in plan.kept]
        stored_red = f"{op}[{plan.red_of()}]({body})"
        count = f"plus[{plan.red_of('c')}](pair({plan.x(suffix='c')}, 1))"
        if op == "times":
            fmt = _in_memory_format(f"{plan.out()} = where({count} == n, {stored_red}, {stored_red} * 0)",
                                    out_format, shape, ["X"])
            return _run(f"{o} = where({c} == n, {r}, {r} * 0)", fmt, R=R, C=C, n=n)
        fmt = _in_memory_format(f"{plan.out()} = where({count} < n, {op}({stored_red}, zero), {stored_red})",
                                out_format, shape, ["X"])
        return _run(f"{o} = where({c} < n, {op}({r}, zero), {r})", fmt, R=R, C=C, n=n,
                    zero=np.zeros((), x.dtype))
    return reduce


def _softmax(log: bool):
    def softmax(input, dim=None, *, axis=None, out_format=None):
        from ..ops._args import dim_or_axis
        from ..ops.reductions import _one_axis, _Plan
        x = _operand(input, "input")
        d = dim_or_axis(axis, dim, "log_softmax" if log else "softmax")
        if x.dtype.kind not in "fc":
            x = x.astype(np.float64)
        a = _one_axis(d, x.ndim, "dim")
        plan = _Plan(x.ndim, (a,), x.shape)
        r = plan.red[0]
        # each read of X under its own name (a Dask operand is read with one set of indices)
        top = f"max[{r}a]({plan.x('Xa', suffix='a')})"
        total = f"plus[{r}b](exp({plan.x('Xb', suffix='b')} - max[{r}c]({plan.x('Xc', suffix='c')})))"
        body = f"{plan.x()} - {top} - log({total})" if log else f"exp({plan.x()} - {top}) / {total}"
        # reductions below the root: the plan keeps dimension `a` in one chunk (a rechunk)
        return _run(f"{_acc('O', plan.all)} = stored({body})", out_format, X=x, Xa=x, Xb=x, Xc=x)
    return softmax


OPS = {
    "mm": mm, "smm": smm, "hspmm": hspmm, "mv": mv, "bmm": bmm, "addmm": addmm, "sspaddmm": sspaddmm,
    "sampled_addmm": sampled_addmm,
    "mul": mul, "add": add, "sub": sub, "div": div,
    **{f: _unary(f) for f in ("neg", "abs", "sqrt", "sin", "tanh", "log1p", "expm1")},
    "permute": permute, "transpose": transpose, "to_dense": to_dense, "from_dense": from_dense,
    "sparse_mask": sparse_mask, "sparse_like": sparse_like, "pow": pow, "where": where,
    "sum": sum, "mean": mean, "prod": _monoid("times", "prod"), "amax": _monoid("max", "amax"),
    "amin": _monoid("min", "amin"), "softmax": _softmax(False), "log_softmax": _softmax(True),
}
