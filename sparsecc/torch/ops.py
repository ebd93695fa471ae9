"""``sct.ops``: sparsecc's op library (``sc.ops``) on torch tensors.

Each op converts its tensor arguments with :func:`sparsecc.torch.to_sparsecc` (zero-copy),
runs ``sc.ops``'s compiled kernel and returns torch tensors (:func:`from_sparsecc`).
Differentiable ops (``mm``, ``mv``, ``addmm``, ``sampled_addmm``, ``mul``, ``add``, ``sub``,
``sum``, ``softmax``, ``log_softmax``), when a tensor argument requires grad, run as
``sct.einsum`` / ``sct.evaluate`` statements (the same statements ``sc.ops`` runs) or, for
softmax, a Function whose backward is two compiled kernels; the other ops raise
:class:`~sparsecc.errors.SparseccError` for a tensor that requires grad.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from .. import ops as _ops
from ..errors import SparseccError

__all__ = list(_ops.__all__)


def _conv(v, what):
    from .api import to_sparsecc
    if isinstance(v, torch.Tensor):
        if v.requires_grad and torch.is_grad_enabled():  # reached only by ops without a backward
            raise SparseccError(f"{what} requires grad, but sct.ops has no backward yet; use sct.einsum or "
                                f"sct.evaluate for differentiable products (or torch.no_grad())")
        return to_sparsecc(v, what)
    if isinstance(v, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in v):
        return type(v)(_conv(e, f"{what}[{k}]") for k, e in enumerate(v))
    return v


def _back(r):
    from .api import from_sparsecc
    if isinstance(r, tuple):
        return tuple(_back(e) for e in r)
    if isinstance(r, list):
        return [_back(e) for e in r]
    # a Python scalar (nnz, a flag) stays one; a NumPy scalar (a reduction's result:
    # np.float64 is a float too) becomes a 0-d tensor, as torch's own reductions return
    if r is None or (isinstance(r, (bool, int, float, complex)) and not isinstance(r, np.generic)):
        return r
    return from_sparsecc(r)


def _wrap(name):
    fn = getattr(_ops, name)

    @torch.compiler.disable
    @functools.wraps(fn)
    def op(*args, **kwargs):
        from .api import sync_threads
        sync_threads()
        if name in _GRAD and torch.is_grad_enabled() and any(
                isinstance(v, torch.Tensor) and v.requires_grad for v in list(args) + list(kwargs.values())):
            return _GRAD[name](*args, **kwargs)
        args = [_conv(a, f"argument {k} of sct.ops.{name}") for k, a in enumerate(args)]
        kwargs = {k: _conv(v, f"argument {k!r} of sct.ops.{name}") for k, v in kwargs.items()}
        return _back(fn(*args, **kwargs))
    return op


# ------------------------------------------------------------------ differentiable ops
def _T():
    from . import api as T
    return T


def _scalar(v, *tensors):
    """A scalar coefficient as a 0-d tensor of the operands' dtype (a tensor stays itself)."""
    if isinstance(v, torch.Tensor):
        return v
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = torch.promote_types(dt, t.dtype)
    return torch.tensor(v, dtype=dt)


def _mm(mat1, mat2, *, out_format=None):
    return _T().einsum("ik,kj->ij", mat1, mat2, out_format=out_format)


def _mv(mat, vec):
    return _T().einsum("ij,j->i", mat, vec)


def _addmm(input, mat1, mat2, *, beta=1, alpha=1, out_format=None):
    b, a = _scalar(beta, input, mat1, mat2), _scalar(alpha, input, mat1, mat2)
    if not isinstance(beta, torch.Tensor) and beta == 0:
        return _T().evaluate("O[i,j] = alpha * A[i,k] * B[k,j]", A=mat1, B=mat2, alpha=a, out_format=out_format)
    if all(t.layout != torch.strided for t in (input, mat1, mat2)) and out_format not in ("dense", "Dense"):
        # a sparse result: the product as CSR, then the exact union (as sc.ops.addmm)
        P = _T().einsum("ik,kj->ij", mat1, mat2, out_format="csr")
        return _T().evaluate("O[i,j] = beta * C[i,j] + alpha * P[i,j]", C=input, P=P, beta=b, alpha=a,
                             out_format=out_format)
    return _T().evaluate("O[i,j] = beta * C[i,j] + alpha * A[i,k] * B[k,j]", C=input, A=mat1, B=mat2, beta=b,
                         alpha=a, out_format=out_format)


def _ones_on(t):
    """A tensor of t's layout and pattern holding ones (no gradient)."""
    t = t.detach()
    if t.layout == torch.sparse_coo:
        # one 1 per coordinate: ones at duplicates would count the sampled product once per
        # duplicate (coalesce() gives the pattern; its summed values are not used)
        c = t if t.is_coalesced() else t.coalesce()
        return torch.sparse_coo_tensor(c._indices(), torch.ones_like(c._values()), t.shape, is_coalesced=True)
    if t.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(t.crow_indices(), t.col_indices(), torch.ones_like(t.values()), t.shape)
    if t.layout == torch.sparse_csc:
        return torch.sparse_csc_tensor(t.ccol_indices(), t.row_indices(), torch.ones_like(t.values()), t.shape)
    raise SparseccError(f"sampled_addmm: input must be a sparse COO, CSR or CSC matrix, got {t.layout}")


_LAYOUT = {torch.sparse_coo: "coo", torch.sparse_csr: "csr", torch.sparse_csc: "csc"}


def _sampled_addmm(input, mat1, mat2, *, beta=1, alpha=1, out_format=None):
    T = _T()
    fmt = out_format if out_format is not None else _LAYOUT.get(input.layout, "csr")
    S = T.einsum("ij,ik,kj->ij", _ones_on(input).to(torch.promote_types(mat1.dtype, mat2.dtype)), mat1, mat2,
                 out_format=fmt)
    b, a = _scalar(beta, input, mat1, mat2), _scalar(alpha, input, mat1, mat2)
    return T.evaluate("O[i,j] = beta * C[i,j] + alpha * S[i,j]", C=input, S=S, beta=b, alpha=a, out_format=fmt)


def _idx(rank):
    return ",".join("ijklmnop"[:rank])


def _mul(input, other, *, out_format=None):
    r = input.dim()
    if not isinstance(other, torch.Tensor) or other.dim() == 0:
        return _T().evaluate(f"O[{_idx(r)}] = s * X[{_idx(r)}]", s=_scalar(other, input), X=input,
                             out_format=out_format if out_format is not None else _LAYOUT.get(input.layout))
    return _T().evaluate(f"O[{_idx(r)}] = X[{_idx(r)}] * Y[{_idx(r)}]", X=input, Y=other, out_format=out_format)


def _addsub(sign):
    def op(input, other, *, alpha=1, out_format=None):
        r = input.dim()
        if not isinstance(other, torch.Tensor) or other.dim() == 0:
            s = _scalar(other, input) * alpha
            return _T().evaluate(f"O[{_idx(r)}] = X[{_idx(r)}] {sign} s", X=input, s=s, out_format=out_format)
        return _T().evaluate(f"O[{_idx(r)}] = X[{_idx(r)}] {sign} a * Y[{_idx(r)}]", X=input, Y=other,
                             a=_scalar(alpha, input, other), out_format=out_format)
    return op


def _sum(input, axis=None, *, dim=None, implicit_zeros: bool = True, out_format=None):
    if dim is not None:
        axis = dim
    r = input.dim()
    axes = tuple(range(r)) if axis is None else tuple(a % r for a in ((axis,) if isinstance(axis, int) else axis))
    idx = "ijklmnop"[:r]
    out = "".join(c for k, c in enumerate(idx) if k not in axes)
    red = ",".join(c for k, c in enumerate(idx) if k in axes)
    op = "sum" if implicit_zeros else "plus"
    if op == "plus":
        raise SparseccError("sct.ops.sum(implicit_zeros=False) has no backward yet (a monoid over stored "
                            "entries); its values equal implicit_zeros=True's")
    lhs = f"O[{','.join(out)}]" if out else "O"
    return _T().evaluate(f"{lhs} = sum[{red}](X[{','.join(idx)}])", X=input, out_format=out_format)


class _Softmax(torch.autograd.Function):
    """sc.ops.softmax / log_softmax of a matrix along ``dim``; backward: two compiled kernels
    on the result's pattern (the row sums, then the gradient), read back in input order."""

    @staticmethod
    def forward(ctx, x, dim, log, out_format):
        from .api import from_sparsecc, to_sparsecc
        xs = to_sparsecc(x, "input")
        ys = (_ops.log_softmax if log else _ops.softmax)(xs, dim, out_format=out_format)
        ctx.xs, ctx.ys, ctx.dim, ctx.log, ctx.x = xs, ys, dim, log, x
        ctx.set_materialize_grads(False)        # an undefined output gradient gives none (as torch)
        return from_sparsecc(ys)

    @staticmethod
    def backward(ctx, g):
        if g is None:
            return None, None, None, None
        import numpy as np
        import scipy.sparse as sp
        import sparsecc as sc
        from .. import autodiff
        from .api import _grad_tensor, to_sparsecc
        gs = to_sparsecc(g, "the output gradient")
        ys, r = ctx.ys, ctx.dim % 2
        o, rr = ("i", "j") if r == 1 else ("j", "i")
        if sp.issparse(ys):          # the output gradient read on y's pattern (0 where it stores nothing)
            gs = autodiff._like(ys, autodiff._values_on(ys, gs) if sp.issparse(gs) else _dense_at(gs, ys))
        if ctx.log:      # dx = g - exp(y) * sum_r(g)
            s = sc.evaluate(f"s[{o}] = plus[{rr}](G[i,j])", G=gs)
            gx = sc.evaluate(f"D[i,j] = stored(G[i,j] - exp(Y[i,j]) * s[{o}])", G=gs, Y=ys, s=s,
                             out_format=_fmt(ys))
        else:            # dx = y * (g - sum_r(g * y))
            s = sc.evaluate(f"s[{o}] = plus[{rr}](G[i,j] * Y[i,j])", G=gs, Y=ys)
            gx = sc.evaluate(f"D[i,j] = stored(Y[i,j] * (G[i,j] - s[{o}]))", G=gs, Y=ys, s=s,
                             out_format=_fmt(ys))
        xs = ctx.xs
        if sp.issparse(xs):
            if xs.format == "coo" and not xs.has_canonical_format:
                # one gradient per coordinate, on the coalesced pattern (as sct.einsum's and
                # torch.sparse.mm's), not the whole gradient at every duplicate
                xs = autodiff._coalesced_pattern(xs, gx.dtype)
            vals = autodiff._values_on(xs, gx)
            return _grad_tensor(ctx.x, autodiff._like(xs, vals)), None, None, None
        return torch.from_numpy(np.asarray(gx)), None, None, None


def _fmt(y):
    import scipy.sparse as sp
    return y.format if sp.issparse(y) and y.format in ("csr", "csc", "coo") else ("csr" if sp.issparse(y)
                                                                                  else "dense")


def _dense_at(g, y):
    """A dense gradient's values at y's stored entries, in y's order (moves values only)."""
    from .. import autodiff
    coords = autodiff._element_coords(y)
    return g[coords]


def _softmax_op(log):
    def op(input, dim=None, *, axis=None, out_format=None):
        d = dim if dim is not None else axis
        if input.dim() != 2 or d is None:
            raise SparseccError("the backward of sct.ops.softmax/log_softmax is for matrices with dim 0 or 1")
        return _Softmax.apply(input, d, log, out_format)
    return op


_GRAD = {"mm": _mm, "mv": _mv, "addmm": _addmm, "sampled_addmm": _sampled_addmm, "mul": _mul,
         "add": _addsub("+"), "sub": _addsub("-"), "sum": _sum, "softmax": _softmax_op(False),
         "log_softmax": _softmax_op(True)}

for _name in __all__:
    globals()[_name] = _wrap(_name)
del _name
