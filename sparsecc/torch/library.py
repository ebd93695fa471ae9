"""``torch.library`` custom ops over sparsecc, for ``torch.compile(..., fullgraph=True)``.

Dynamo refuses sparse graph inputs, so these ops take a CSR matrix as its dense components
(``crow``, ``col``, ``values`` and the column count) and dense operands, and return a dense
result, whose shape is known without data: each has a fake-tensor implementation, and a
registered autograd formula whose backward is another custom op running the compiled
adjoints (``values`` gets its gradient on the pattern, in value order).

    y = torch.ops.sparsecc.einsum_csr("ij,jk->ik", crow, col, values, n_cols, [B])

Operand 0 of ``subscripts`` is the CSR matrix, the others the dense tensors in order.

Every layout: ``einsum_sparse(subscripts, layout, indices, values, shape, dense)`` (a dense
result) and ``einsum_sparse_sampled(...)`` (the result on the sparse operand's pattern, as a
values tensor of ``values``' shape), with ``layout`` "csr" / "csc" / "coo" / "bsr" and
``indices`` that layout's index tensors (``_COMPONENTS``); backward:
``einsum_sparse_backward``.
"""

from __future__ import annotations

import torch

from ..autodiff import NotDifferentiableError
from ..errors import OperandError, SparseccError

__all__ = ["einsum_csr", "einsum_sparse", "einsum_sparse_sampled"]


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
    if crow.dim() != 1 or crow.shape[0] < 1:
        raise OperandError(f"einsum_csr's crow tensor has shape {list(crow.shape)}; expected 1-D with one "
                           f"entry per row plus one")
    _check_components("csr", [crow, col], values, [crow.shape[0] - 1, n_cols])
    return torch.sparse_csr_tensor(crow, col, values, (crow.shape[0] - 1, n_cols))


#: the torch dtypes sparsecc.torch takes, as NumPy's
_NUMPY_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.complex64: "complex64",
                 torch.complex128: "complex128", torch.int32: "int32", torch.int64: "int64", torch.bool: "bool"}
_TORCH_DTYPES = {v: k for k, v in _NUMPY_DTYPES.items()}


def _result_dtype(subscripts: str, values, dense) -> torch.dtype:
    """The dtype of a custom op's result: sparsecc's rule (NumPy's promotion, docs/dsl.md), the
    dtype ``sct.einsum`` gives for the same operands (int32 values with float32 operands:
    float64).  The one rule of both implementations: the fake ones return it, the real ones
    cast their result to it (a no-op where the kernel computed in it), so a compiled graph
    reads the buffer with the dtype the kernel wrote."""
    import sparsecc as sc
    from ..errors import DTypeError
    names = []
    for t in (values, *dense):
        if t.dtype not in _NUMPY_DTYPES:
            raise DTypeError(f"a custom op's operand has dtype {t.dtype}; sparsecc.torch takes float32, float64, "
                             f"complex64, complex128, int32, int64 and bool (convert float16/bfloat16 with "
                             f".float())")
        names.append(_NUMPY_DTYPES[t.dtype])
    return _TORCH_DTYPES[str(sc.compile(subscripts).result_dtype(names))]


@torch.library.custom_op("sparsecc::einsum_csr", mutates_args=())
def einsum_csr(subscripts: str, crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, n_cols: int,
               dense: list[torch.Tensor]) -> torch.Tensor:
    from .api import compile as _compile
    with torch.no_grad():
        out = _compile(subscripts)(_matrix(crow, col, values, n_cols), *dense)
    return (out if out.layout == torch.strided else out.to_dense()).to(_result_dtype(subscripts, values, dense))


@einsum_csr.register_fake
def _(subscripts, crow, col, values, n_cols, dense):
    _, rhs, size = _sizes(subscripts, crow, n_cols, dense)
    return values.new_empty([size[c] for c in rhs], dtype=_result_dtype(subscripts, values, dense))


@torch.library.custom_op("sparsecc::einsum_csr_backward", mutates_args=())
def einsum_csr_backward(subscripts: str, crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor,
                        n_cols: int, dense: list[torch.Tensor], grad: torch.Tensor) -> list[torch.Tensor]:
    from .api import compile as _compile
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


# --------------------------------------------------------------- every layout, sampled results
#: the index tensors each layout is given by, in order
_COMPONENTS = {"csr": ("crow_indices", "col_indices"), "csc": ("ccol_indices", "row_indices"),
               "coo": ("indices",), "bsr": ("crow_indices", "col_indices")}
#: the format a sampled result is built in (BSR: element-wise CSR, read back block by block)
_SAMPLED_FORMAT = {"csr": "csr", "csc": "csc", "coo": "coo", "bsr": "csr"}


def _check_components(layout: str, indices, values, shape):
    """The component tensors' ranks, dtypes and the shape, before torch's constructors (which
    raise RuntimeError on them, or build a tensor SciPy then refuses)."""
    if any(int(n) < 0 for n in shape):
        raise OperandError(f"a {layout} operand has a negative dimension: shape {list(shape)}")
    for name, t in zip(_COMPONENTS[layout], indices):
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise OperandError(f"the {layout} operand's {name} tensor has dtype {t.dtype}; index tensors "
                               f"hold integers")
        want = 2 if layout == "coo" else 1
        if t.dim() != want or (layout == "coo" and t.shape[0] != len(shape)):
            raise OperandError(f"the {layout} operand's {name} tensor has shape {list(t.shape)}; expected "
                               + (f"({len(shape)}, nnz), one row per dimension" if layout == "coo" else "1-D"))
    vdim = 3 if layout == "bsr" else 1
    if values.dim() != vdim:
        raise OperandError(f"the {layout} operand's values tensor has shape {list(values.shape)}; expected "
                           f"{'(blocks, R, C)' if vdim == 3 else '1-D'}")
    # one value (block) per stored element: torch's constructors raise RuntimeError otherwise
    # (COO), SciPy's ValueError (compressed); shapes only, so the fake implementations run it too
    last = indices[-1]
    n = last.shape[-1] if last.dim() else 0
    if values.shape[0] != n:
        raise OperandError(f"the {layout} operand's values tensor has {values.shape[0]} "
                           f"{'blocks' if layout == 'bsr' else 'entries'}, but its {_COMPONENTS[layout][-1]} "
                           f"tensor has {n}: one per stored element")


def _check(subscripts: str, layout: str, indices, shape, n_dense: int, sampled: bool, values=None):
    if layout not in _COMPONENTS:
        raise SparseccError(f"layout is one of {', '.join(_COMPONENTS)}, got {layout!r}")
    want = _COMPONENTS[layout]
    if len(indices) != len(want):
        raise SparseccError(f"a {layout} operand is given by {len(want)} index tensor(s) ({', '.join(want)}), "
                            f"got {len(indices)}")
    if values is not None:
        _check_components(layout, indices, values, shape)
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    terms = lhs.split(",")
    if not arrow or "." in s or len(terms) != 1 + n_dense or len(terms[0]) != len(shape):
        raise SparseccError(f"einsum_sparse takes explicit subscripts with the sparse operand first (one index "
                            f"per dimension of its shape {list(shape)}) and one term per dense operand "
                            f"({n_dense}), got {subscripts!r}")
    if layout != "coo" and len(shape) != 2:
        raise SparseccError(f"a {layout} operand is a matrix, got shape {list(shape)}")
    if sampled and rhs != terms[0]:
        raise SparseccError(f"einsum_sparse_sampled's result lives on the sparse operand's pattern: its "
                            f"output subscripts must be {terms[0]!r}, got {rhs!r}")
    return terms, rhs


def _operand(layout: str, indices, values, shape):
    """The torch sparse tensor over the components (no copy; sparsecc validates it)."""
    shape = tuple(int(n) for n in shape)
    if layout == "coo":
        return torch.sparse_coo_tensor(indices[0], values, shape, check_invariants=False)
    ctor = {"csr": torch.sparse_csr_tensor, "csc": torch.sparse_csc_tensor, "bsr": torch.sparse_bsr_tensor}[layout]
    return ctor(indices[0], indices[1], values, shape, check_invariants=False)


def _values_on(x, g) -> torch.Tensor:
    """Sparse tensor ``g``'s values at every stored element of sparse tensor ``x``, in x's
    value order and values shape (0 where g stores nothing): moves values only."""
    from .. import autodiff
    from .api import to_sparsecc
    return torch.from_numpy(autodiff._values_on(to_sparsecc(x), to_sparsecc(g)).copy())


def _duplicated(layout: str, x) -> bool:
    """Whether COO operand ``x`` (a torch tensor) stores a coordinate more than once."""
    if layout != "coo" or x._nnz() < 2:
        return False
    import numpy as np
    from ..runtime.operands import is_canonical_coo
    from .api import to_sparsecc
    xs = to_sparsecc(x)
    if is_canonical_coo(xs):
        return False
    key = np.ravel_multi_index(tuple(xs.coords), xs.shape)
    return np.unique(key).size != key.size


def _per_element(subscripts: str, x, dense):
    """For a COO operand with duplicates: (its coalesced pattern holding ones, the sampled
    product of the other operands at each stored element, in x's order).  Subscripts are
    linear in the sparse operand, so element k's share of the result is its own value times
    that product (the elements of a coordinate sum to the coalesced result)."""
    from .api import compile as _compile
    c = x.detach().coalesce()           # the pattern only: its values are replaced by ones
    ones = torch.sparse_coo_tensor(c.indices(), torch.ones_like(c.values()), c.shape, is_coalesced=True)
    with torch.no_grad():
        rest = _compile(subscripts, out_format="coo")(ones, *dense)
    return ones, _values_on(x, rest)


def _elementwise(text: str, **vectors) -> torch.Tensor:
    """A compiled element-wise statement over 1-D tensors (``S[k] = V[k] * R[k]``)."""
    import sparsecc as sc
    from .api import from_sparsecc, to_sparsecc
    return from_sparsecc(sc.evaluate(text, **{n: to_sparsecc(v) for n, v in vectors.items()}))


def _like_values(g: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Gradient ``g`` in ``values``' dtype (a real operand: the real part, as torch)."""
    if g.is_complex() and not values.is_complex():
        g = g.real
    return g.to(values.dtype)


@torch.library.custom_op("sparsecc::einsum_sparse", mutates_args=())
def einsum_sparse(subscripts: str, layout: str, indices: list[torch.Tensor], values: torch.Tensor,
                  shape: list[int], dense: list[torch.Tensor]) -> torch.Tensor:
    from .api import compile as _compile
    _check(subscripts, layout, indices, shape, len(dense), False, values)
    with torch.no_grad():
        out = _compile(subscripts)(_operand(layout, indices, values, shape), *dense)
    return (out if out.layout == torch.strided else out.to_dense()).to(_result_dtype(subscripts, values, dense))


@einsum_sparse.register_fake
def _(subscripts, layout, indices, values, shape, dense):
    terms, rhs = _check(subscripts, layout, indices, shape, len(dense), False)
    size = dict(zip(terms[0], shape))
    for t, d in zip(terms[1:], dense):
        for c, n in zip(t, d.shape):
            size.setdefault(c, n)
    return values.new_empty([size[c] for c in rhs], dtype=_result_dtype(subscripts, values, dense))


@torch.library.custom_op("sparsecc::einsum_sparse_sampled", mutates_args=())
def einsum_sparse_sampled(subscripts: str, layout: str, indices: list[torch.Tensor], values: torch.Tensor,
                          shape: list[int], dense: list[torch.Tensor]) -> torch.Tensor:
    from .api import compile as _compile
    _check(subscripts, layout, indices, shape, len(dense), True, values)
    x = _operand(layout, indices, values, shape)
    if _duplicated(layout, x):
        # one entry per stored element, not the coalesced value at each of them (which a
        # sum over the duplicates counts once per duplicate)
        _, rest = _per_element(subscripts, x, dense)
        out = _elementwise("S[k] = V[k] * R[k]", V=values, R=rest)
        return out.to(_result_dtype(subscripts, values, dense))
    with torch.no_grad():
        out = _compile(subscripts, out_format=_SAMPLED_FORMAT[layout])(x, *dense)
    return _values_on(x, out).to(_result_dtype(subscripts, values, dense))


@einsum_sparse_sampled.register_fake
def _(subscripts, layout, indices, values, shape, dense):
    _check(subscripts, layout, indices, shape, len(dense), True)
    return values.new_empty(values.shape, dtype=_result_dtype(subscripts, values, dense))


@torch.library.custom_op("sparsecc::einsum_sparse_backward", mutates_args=())
def einsum_sparse_backward(subscripts: str, layout: str, indices: list[torch.Tensor], values: torch.Tensor,
                           shape: list[int], dense: list[torch.Tensor], grad: torch.Tensor,
                           sampled: bool) -> list[torch.Tensor]:
    from .api import compile as _compile
    x = _operand(layout, indices, values, shape)
    grad = grad.contiguous()
    if sampled and _duplicated(layout, x):
        # s[k] = v[k] * r[k] (see _per_element): d/dv[k] is g[k] conj(r[k]); the dense
        # operands get the adjoint of r on the coalesced pattern for the cotangent
        # sum over the duplicates of g[k] conj(v[k]) (torch's convention for complex values)
        ones, rest = _per_element(subscripts, x, dense)
        gv = _elementwise("S[k] = G[k] * conj(R[k])", G=grad, R=rest)
        h = _elementwise("S[k] = G[k] * conj(V[k])", G=grad, V=values)
        grads = _compile(subscripts).vjp(_operand(layout, indices, h, shape), ones, *dense)
        return [_like_values(gv, values)] + [g.clone() for g in grads[1:]]
    # a sampled result's gradient: its values on x's pattern, as a sparse cotangent
    cot = _operand(layout, indices, grad, shape) if sampled else grad
    grads = _compile(subscripts).vjp(cot, x, *dense)
    return [_values_on(x, grads[0])] + [g.clone() for g in grads[1:]]


@einsum_sparse_backward.register_fake
def _(subscripts, layout, indices, values, shape, dense, grad, sampled):
    return [torch.empty_like(values)] + [torch.empty_like(d) for d in dense]


def _setup_sparse(ctx, inputs, output):
    subscripts, layout, indices, values, shape, dense = inputs
    ctx.subscripts, ctx.layout, ctx.shape, ctx.n_indices = subscripts, layout, shape, len(indices)
    ctx.save_for_backward(*indices, values, *dense)


def _backward_of(sampled: bool):
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        indices, values, dense = list(saved[:ctx.n_indices]), saved[ctx.n_indices], list(saved[ctx.n_indices + 1:])
        grads = torch.ops.sparsecc.einsum_sparse_backward(ctx.subscripts, ctx.layout, indices, values, ctx.shape,
                                                          dense, grad, sampled)
        return None, None, [None] * ctx.n_indices, grads[0], None, list(grads[1:])
    return backward


def _second_order(ctx, *grads):
    raise NotDifferentiableError(
        "second-order gradients through sparsecc kernels are not supported: a gradient computed "
        "with create_graph=True cannot be differentiated again (docs/torch.md)")


def _no_context(ctx, inputs, output):
    pass


# differentiating a gradient (create_graph=True) raises, as for sparsecc.torch's functions
einsum_csr_backward.register_autograd(_second_order, setup_context=_no_context)
einsum_sparse_backward.register_autograd(_second_order, setup_context=_no_context)
einsum_sparse.register_autograd(_backward_of(False), setup_context=_setup_sparse)
einsum_sparse_sampled.register_autograd(_backward_of(True), setup_context=_setup_sparse)
