"""``torch.library`` custom ops over sparsecc, for ``torch.compile(..., fullgraph=True)``.

Dynamo refuses sparse graph inputs, so these ops take a CSR matrix as its dense components
(``crow``, ``col``, ``values`` and the column count) and dense operands, and return a dense
result, whose shape is known without data: each has a fake-tensor implementation, and a
registered autograd formula whose backward is another custom op running the compiled
adjoints (``values`` gets its gradient on the pattern, in value order).

    y = torch.ops.sparsecc.einsum_csr("ij,jk->ik", crow, col, values, n_cols, [B])

Operand 0 of ``subscripts`` is the CSR matrix, the others the dense tensors in order.
"""

from __future__ import annotations

import torch

from ..errors import SparseccError

__all__ = ["einsum_csr"]


def _parse(subscripts: str, n_dense: int):
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    terms = lhs.split(",")
    if not arrow or "." in s or len(terms) != 1 + n_dense or len(terms[0]) != 2:
        raise SparseccError(f"einsum_csr takes explicit subscripts 'ij,...->...' with a matrix first and one "
                            f"term per dense operand ({n_dense}), got {subscripts!r}")
    return terms, rhs


def _sizes(subscripts, crow, n_cols, dense):
    terms, rhs = _parse(subscripts, len(dense))
    size = {terms[0][0]: crow.shape[0] - 1, terms[0][1]: n_cols}
    for t, d in zip(terms[1:], dense):
        for c, n in zip(t, d.shape):
            size.setdefault(c, n)
    return terms, rhs, size


def _matrix(crow, col, values, n_cols):
    return torch.sparse_csr_tensor(crow, col, values, (crow.shape[0] - 1, n_cols))


@torch.library.custom_op("sparsecc::einsum_csr", mutates_args=())
def einsum_csr(subscripts: str, crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, n_cols: int,
               dense: list[torch.Tensor]) -> torch.Tensor:
    from . import compile as _compile
    with torch.no_grad():
        out = _compile(subscripts)(_matrix(crow, col, values, n_cols), *dense)
    return out if out.layout == torch.strided else out.to_dense()


@einsum_csr.register_fake
def _(subscripts, crow, col, values, n_cols, dense):
    _, rhs, size = _sizes(subscripts, crow, n_cols, dense)
    dtype = torch.result_type(values, dense[0]) if dense else values.dtype
    for d in dense[1:]:
        dtype = torch.promote_types(dtype, d.dtype)
    return values.new_empty([size[c] for c in rhs], dtype=dtype)


@torch.library.custom_op("sparsecc::einsum_csr_backward", mutates_args=())
def einsum_csr_backward(subscripts: str, crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor,
                        n_cols: int, dense: list[torch.Tensor], grad: torch.Tensor) -> list[torch.Tensor]:
    from . import compile as _compile
    grads = _compile(subscripts).vjp(grad.contiguous(), _matrix(crow, col, values, n_cols), *dense)
    return [grads[0].values().clone()] + [g.clone() for g in grads[1:]]


@einsum_csr_backward.register_fake
def _(subscripts, crow, col, values, n_cols, dense, grad):
    return [torch.empty_like(values)] + [torch.empty_like(d) for d in dense]


def _setup(ctx, inputs, output):
    subscripts, crow, col, values, n_cols, dense = inputs
    ctx.subscripts, ctx.n_cols = subscripts, n_cols
    ctx.save_for_backward(crow, col, values, *dense)


def _backward(ctx, grad):
    crow, col, values, *dense = ctx.saved_tensors
    grads = torch.ops.sparsecc.einsum_csr_backward(ctx.subscripts, crow, col, values, ctx.n_cols, dense, grad)
    return None, None, None, grads[0], None, list(grads[1:])


einsum_csr.register_autograd(_backward, setup_context=_setup)
