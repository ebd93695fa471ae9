"""``sct.ops``: sparsecc's op library (``sc.ops``) on torch tensors.

Each op converts its tensor arguments with :func:`sparsecc.torch.to_sparsecc` (zero-copy),
runs ``sc.ops``'s compiled kernel and returns torch tensors (:func:`from_sparsecc`).  The ops
have no backward yet: a tensor that requires grad raises
:class:`~sparsecc.errors.SparseccError` (use ``sct.einsum`` / ``sct.evaluate`` for
differentiable products).
"""

from __future__ import annotations

import functools

import torch

from .. import ops as _ops
from ..errors import SparseccError

__all__ = list(_ops.__all__)


def _conv(v, what):
    from . import to_sparsecc
    if isinstance(v, torch.Tensor):
        if v.requires_grad and torch.is_grad_enabled():
            raise SparseccError(f"{what} requires grad, but sct.ops has no backward yet; use sct.einsum or "
                                f"sct.evaluate for differentiable products (or torch.no_grad())")
        return to_sparsecc(v, what)
    if isinstance(v, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in v):
        return type(v)(_conv(e, f"{what}[{k}]") for k, e in enumerate(v))
    return v


def _back(r):
    from . import from_sparsecc
    if isinstance(r, tuple):
        return tuple(_back(e) for e in r)
    if isinstance(r, list):
        return [_back(e) for e in r]
    if r is None or isinstance(r, (bool, int, float, complex)):
        return r
    return from_sparsecc(r)


def _wrap(name):
    fn = getattr(_ops, name)

    @torch.compiler.disable
    @functools.wraps(fn)
    def op(*args, **kwargs):
        from . import sync_threads
        sync_threads()
        args = [_conv(a, f"argument {k} of sct.ops.{name}") for k, a in enumerate(args)]
        kwargs = {k: _conv(v, f"argument {k!r} of sct.ops.{name}") for k, v in kwargs.items()}
        return _back(fn(*args, **kwargs))
    return op


for _name in __all__:
    globals()[_name] = _wrap(_name)
del _name
