"""Reverse-mode derivatives of sparsecc kernels, computed by other sparsecc kernels.

``vjp(kernel, cotangent, *operands)`` (also ``Kernel.vjp``) returns the gradient of each
operand for a kernel whose statement is a *product*: ``out[so] = c * sum(T1[s1] * ... *
Tn[sn])`` (every einsum without a semiring, and index notation of the same shape).  The
gradient of operand ``k`` is the product of the cotangent with the other operands, summed
onto ``sk``: an index-notation statement compiled like any kernel (and cached like one).

- **Sparse operands** get a gradient on their own pattern (masked semantics, as
  ``torch.sparse.mm`` and JAX): the adjoint statement is multiplied by a pattern operand
  ``P`` (the operand's indices, values 1), so it is an SDDMM evaluated only at the stored
  coordinates - no dense matrix of the operand's shape ever exists.  The result has the
  operand's type (CSR, CSC, COO, BSR), its index arrays and its entry order; stored zeros
  get their gradient too.  An uncoalesced COO operand gets one entry per coordinate (its
  coalesced pattern, sorted), as ``torch.sparse.mm`` gives.
- **Repeated indices** (``ii->``): the adjoint carries ``where(index(i) == index(i_), ...)``
  for a sparse operand; for a dense operand the gradient over the distinct indices is placed
  on the diagonal of a zero array (NumPy writes it; it computes nothing).
- **Indices only the operand has** (``ij->i``: ``j`` is summed over ``A`` alone): the
  gradient does not depend on them; a sparse operand's pattern supplies them, a dense
  operand's gradient is a read-only broadcast view (``numpy.broadcast_to``).
- Semirings, monoid reductions, functions and any other statement raise
  :class:`~sparsecc.errors.SparseccError` (no derivative yet).

This module imports no torch; ``sparsecc.torch`` builds its autograd on it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .errors import OperandError, ShapeError, SparseccError
from .expr import Access, Binary, Const, Reduce, Statement

_OUT, _COT, _PAT = "Grad_", "Gcot_", "Ppat_"


class NotDifferentiableError(SparseccError):
    """The kernel's statement has no derivative sparsecc can compile (yet)."""


def _factors(stmt: Statement, source: str):
    """(accesses, constants) of a product statement; NotDifferentiableError otherwise."""
    e = stmt.expr
    if isinstance(e, Reduce):
        if e.op != "sum":
            raise NotDifferentiableError(
                f"'{source}' reduces with the monoid '{e.op}' (a semiring or a stored-only reduction): "
                f"gradients are defined for sum-of-products kernels only (no backward for semirings yet)")
        e = e.body
    acc, consts = [], []

    def flatten(x):
        if isinstance(x, Binary) and x.op == "*":
            flatten(x.left)
            flatten(x.right)
        elif isinstance(x, Access):
            acc.append(x)
        elif isinstance(x, Const) and not isinstance(x.value, (bool, np.bool_)):
            consts.append(x)
        else:
            raise NotDifferentiableError(
                f"'{source}' is not a product of operands (it holds {type(x).__name__.lower()} nodes): "
                f"gradients are compiled for einsum-style products only, not yet for sums, functions, "
                f"where or reductions inside the expression")
    flatten(e)
    names = [a.tensor for a in acc]
    if len(set(names)) != len(names):
        raise NotDifferentiableError(f"'{source}' reads an operand twice: no gradient for that yet "
                                     f"(pass it as two operands)")
    return acc, consts


def _name(op: str, k: int) -> str:
    return f"X{k}_"


def _access(name: str, idx) -> str:
    return f"{name}[{','.join(idx)}]" if idx else name


def _const_text(consts) -> list[str]:
    out = []
    for c in consts:
        v = c.value.item() if isinstance(c.value, np.generic) else c.value
        out.append(f"({v!r})")
    return out


def _element_coords(x):
    """Coordinates of each stored element of sparse ``x`` in its storage order (one array per
    dimension; for BSR, block by block, each block row-major)."""
    f = x.format
    if f == "coo":
        return tuple(np.asarray(c) for c in x.coords)
    if f in ("csr", "csc"):
        major = np.repeat(np.arange(len(x.indptr) - 1, dtype=np.int64), np.diff(x.indptr))
        minor = np.asarray(x.indices, dtype=np.int64)
        return (major, minor) if f == "csr" else (minor, major)
    if f == "bsr":
        R, C = x.blocksize
        brow = np.repeat(np.arange(len(x.indptr) - 1, dtype=np.int64), np.diff(x.indptr))
        bcol = np.asarray(x.indices, dtype=np.int64)
        r = (brow[:, None, None] * R + np.arange(R)[None, :, None]) + np.zeros((1, 1, C), np.int64)
        c = (bcol[:, None, None] * C + np.arange(C)[None, None, :]) + np.zeros((1, R, 1), np.int64)
        return r.reshape(-1), c.reshape(-1)
    raise OperandError(f"no gradient for a sparse operand in format {f!r} yet")


def _pattern(x, dtype):
    """A pattern operand (values 1) with ``x``'s stored coordinates, and the result format
    the sampled adjoint is built in."""
    f = x.format
    if f in ("csr", "csc"):
        cls = sp.csr_array if f == "csr" else sp.csc_array
        return cls((np.ones(len(x.indices), dtype), x.indices, x.indptr), shape=x.shape), f
    coords = _element_coords(x)
    if len(coords) == 2:      # COO and BSR: the coalesced element pattern, row-wise
        key = np.unique(np.ravel_multi_index(coords, x.shape))
        r, c = np.unravel_index(key, x.shape)
        indptr = np.searchsorted(r, np.arange(x.shape[0] + 1)).astype(np.int64)
        return sp.csr_array((np.ones(len(key), dtype), c.astype(np.int64), indptr), shape=x.shape), "csr"
    key = np.unique(np.ravel_multi_index(coords, x.shape))
    p = sp.coo_array((np.ones(len(key), dtype), np.unravel_index(key, x.shape)), shape=x.shape)
    p.has_canonical_format = True
    return p, "coo"


def _values_on(x, g):
    """The values of sparse result ``g`` at every stored element of ``x``, in ``x``'s order
    and shape of ``x.data`` (0 where ``g`` stores nothing).  Only moves values."""
    if g.format == x.format and g.format in ("csr", "csc") and np.array_equal(g.indptr, x.indptr) \
            and np.array_equal(g.indices, x.indices):
        return np.asarray(g.data)
    want = np.ravel_multi_index(_element_coords(x), x.shape) if x.nnz else np.zeros(0, np.int64)
    have = np.ravel_multi_index(_element_coords(g), g.shape) if g.nnz else np.zeros(0, np.int64)
    vals = np.asarray(g.data).reshape(-1)
    if len(have) > 1 and np.any(have[1:] < have[:-1]):
        order = np.argsort(have, kind="stable")
        have, vals = have[order], vals[order]
    out = np.zeros(len(want), vals.dtype if len(vals) else np.asarray(g.data).dtype)
    if len(have):
        pos = np.minimum(np.searchsorted(have, want), len(have) - 1)
        hit = have[pos] == want
        out[hit] = vals[pos[hit]]
    return out.reshape(np.shape(x.data))


def _like(x, values):
    """A sparse array of ``x``'s type over ``x``'s index arrays holding ``values``."""
    f = x.format
    if f == "csr":
        return sp.csr_array((values, x.indices, x.indptr), shape=x.shape)
    if f == "csc":
        return sp.csc_array((values, x.indices, x.indptr), shape=x.shape)
    if f == "bsr":
        return sp.bsr_array((values, x.indices, x.indptr), shape=x.shape)
    out = sp.coo_array((values, tuple(x.coords)), shape=x.shape)
    out.has_canonical_format = bool(x.has_canonical_format)
    return out


def _grad_one(kernel, k: int, acc, consts, stmt: Statement, cot, ops: list):
    """The gradient of operand ``k`` (an Access in ``acc``)."""
    import sparsecc as sc
    a = acc[k]
    x = ops[stmt.operands.index(a.tensor)]
    sparse = sp.issparse(x)
    shape = np.shape(x) if not sparse else x.shape
    sk = a.indices
    others = [(j, b) for j, b in enumerate(acc) if j != k]
    bound = set(stmt.indices)
    for _, b in others:
        bound.update(b.indices)
    # the operand's own dimension names: a repeated index gets a fresh name and a delta factor
    dims, delta, seen = [], [], {}
    for d, i in enumerate(sk):
        if i in seen:
            fresh = f"{i}_{d}_"
            dims.append(fresh)
            delta.append((seen[i], fresh))
        else:
            seen[i] = i
            dims.append(i)
    factors, args = [], {}
    for _, b in others:
        n = _name(b.tensor, len(args))
        factors.append(_access(n, b.indices))
        args[n] = ops[stmt.operands.index(b.tensor)]
    factors.append(_access(_COT, stmt.indices))
    args[_COT] = cot
    factors += _const_text(consts)
    dt = _result_dtype(x)
    if sparse:
        pat, fmt = _pattern(x, dt)
        factors.insert(0, _access(_PAT, dims))
        args[_PAT] = pat
        for i, j in delta:
            factors.append(f"where(index({i}) == index({j}), 1, 0)")
        text = f"{_access(_OUT, dims)} = " + " * ".join(factors)
        g = sc.evaluate(text, options=kernel.options, out_format=fmt, **args)
        if x.format == "coo" and not x.has_canonical_format:
            # duplicates: one gradient per coordinate, on the coalesced pattern (as torch.sparse.mm)
            key = np.unique(np.ravel_multi_index(tuple(x.coords), x.shape))
            x = sp.coo_array((np.zeros(len(key), dt), np.unravel_index(key, x.shape)), shape=x.shape)
            x.has_canonical_format = True
        return _like(x, _values_on(x, g).astype(dt, copy=False))
    # dense: the gradient over the distinct indices the product binds, then placed
    keep = [i for i in dict.fromkeys(sk) if i in bound]
    text = f"{_access(_OUT, keep)} = " + " * ".join(factors)
    g = np.asarray(sc.evaluate(text, options=kernel.options, out_format="dense", **args)).astype(dt, copy=False)
    uniq = list(dict.fromkeys(sk))
    if keep == list(sk):
        return g
    if keep != uniq:            # indices only the operand has: the gradient is constant along them
        g = g.reshape([shape[sk.index(i)] if i in keep else 1 for i in uniq])
        g = np.broadcast_to(g, [shape[sk.index(i)] for i in uniq])
    if len(uniq) == len(sk):
        return g
    out = np.zeros(shape, dt)
    letters = {i: chr(ord("a") + n) for n, i in enumerate(uniq)}
    np.einsum(f"{''.join(letters[i] for i in sk)}->{''.join(letters[i] for i in uniq)}", out)[...] = g
    return out


def _result_dtype(x):
    dt = np.dtype(x.dtype)
    if dt.kind not in "fc":
        raise NotDifferentiableError(f"gradients are for floating-point and complex operands, got {dt}")
    return dt


def vjp(kernel, cotangent, *args, wrt=None, **kwargs):
    """Gradients of ``kernel(*args, **kwargs)`` for the output cotangent ``cotangent``.

    Returns a tuple with one gradient per operand, in the kernel's operand order (``None``
    for operands not in ``wrt``, a collection of operand positions).  A dense operand's
    gradient is a NumPy array of its shape; a sparse operand's is a SciPy array of its type
    over its index arrays (its pattern: stored zeros included).  The cotangent is a NumPy
    array (or a SciPy sparse array) of the result's shape.  For complex operands this is the
    transpose of the linear map (no conjugation, as JAX's ``vjp``)."""
    from .runtime.operands import as_operand
    if getattr(kernel, "_library", None) is not None:
        raise NotDifferentiableError("an ahead-of-time kernel holds only its own specializations; "
                                     "compile the adjoints with sc.compile")
    stmt = kernel.stmt
    ops = [as_operand(x, f"operand {n}") for x, n in zip(kernel.bind(*args, **kwargs), stmt.operands)]
    acc, consts = _factors(stmt, kernel.source)
    from .expr import index_sizes
    sizes = index_sizes(stmt, {n: tuple(np.shape(x)) if not sp.issparse(x) else tuple(x.shape)
                               for n, x in zip(stmt.operands, ops)})
    want = tuple(sizes[i] for i in stmt.indices)
    cotangent = as_operand(cotangent, "the cotangent")
    if tuple(cotangent.shape) != want:
        raise ShapeError(f"the cotangent of '{kernel.source}' must have the result's shape {want}, "
                         f"got {tuple(cotangent.shape)}")
    if not want:
        cotangent = cotangent.toarray()[()] if sp.issparse(cotangent) else cotangent[()]
    grads = [None] * len(stmt.operands)
    for k, a in enumerate(acc):
        pos = stmt.operands.index(a.tensor)
        if wrt is not None and pos not in wrt:
            continue
        grads[pos] = _grad_one(kernel, k, acc, consts, stmt, cotangent, ops)
    return tuple(grads)
