"""sparsecc.ops: linear algebra (torch.sparse's names and semantics, SciPy/NumPy in and out).

Every operation is one or two compiled kernels (``sc.einsum`` / ``sc.evaluate``); ``beta``
and ``alpha`` travel as 0-d operands, so one compile serves every value.  Result layouts:
``torch``'s where it defines one (``mm`` of sparse x dense is dense, sparse x sparse is
sparse; ``smm``/``hspmm``/``sspaddmm`` sparse; ``sampled_addmm`` the input's pattern), else the
pattern rules (docs/sparse-results.md).  ``out_format=`` asks for another.  Reference:
docs/ops.md.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..api import einsum, evaluate
from ..errors import OperandError, ShapeError
from ..runtime.operands import as_operand
from .elementwise import _pattern

__all__ = ["mm", "mv", "addmm", "sspaddmm", "smm", "hspmm", "bmm", "sampled_addmm"]


def _matrix(x, what: str, rank: int = 2):
    x = as_operand(x, what)
    if x.ndim != rank:
        raise ShapeError(f"{what} must have rank {rank}, got shape {tuple(x.shape)}")
    return x


def _scalars(beta, alpha, *ops):
    t = np.result_type(*[o.dtype for o in ops], beta, alpha)
    return np.asarray(beta, dtype=t), np.asarray(alpha, dtype=t)


def mm(mat1, mat2, *, out_format=None):
    """``torch.sparse.mm`` / ``torch.mm``: the matrix product.  sparse x dense -> dense;
    sparse x sparse -> sparse (CSR, the Boolean product's pattern).

    Args:
        mat1 (numpy.ndarray | scipy.sparse.sparray): The left matrix.
        mat2 (numpy.ndarray | scipy.sparse.sparray): The right matrix.
        out_format (str | Format | None): The result's format, as in ``sc.einsum``
            (``None``: the pattern rules).

    Returns:
        result (numpy.ndarray | scipy.sparse.sparray): ``mat1 @ mat2``.

    Raises:
        ShapeError: The inner dimensions differ or an operand is not a matrix."""
    A, B = _matrix(mat1, "mat1"), _matrix(mat2, "mat2")
    return einsum("ik,kj->ij", A, B, out_format=out_format)


def mv(mat, vec):
    """``torch.mv``: matrix-vector product, a dense vector."""
    A, x = _matrix(mat, "mat"), _matrix(vec, "vec", 1)
    return einsum("ij,j->i", A, x)


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out_format=None):
    """``torch.addmm`` / ``torch.sparse.addmm``: ``beta * input + alpha * (mat1 @ mat2)``,
    one kernel (two when all three are sparse: the product, then the sum).  With ``beta == 0``, ``input`` is ignored (NaN/inf in it do not propagate),
    as in torch.  Pattern: the union of ``input``'s and the product's; dense when any part
    is dense in some dimension.

    Args:
        input (numpy.ndarray | scipy.sparse.sparray): The matrix added, of the product's shape.
        mat1 (numpy.ndarray | scipy.sparse.sparray): The left factor.
        mat2 (numpy.ndarray | scipy.sparse.sparray): The right factor.
        beta (int | float | complex): The factor of ``input`` (a run-time value: one compile
            serves every ``beta``).
        alpha (int | float | complex): The factor of the product (run-time, likewise).
        out_format (str | Format | None): The result's format, as in ``sc.einsum``
            (``None``: the pattern rules).

    Returns:
        result (numpy.ndarray | scipy.sparse.sparray): ``beta * input + alpha * (mat1 @ mat2)``.

    Raises:
        ShapeError: The shapes do not agree."""
    C, A, B = _matrix(input, "input"), _matrix(mat1, "mat1"), _matrix(mat2, "mat2")
    b, a = _scalars(beta, alpha, C, A, B)
    if (C.shape[0], C.shape[1]) != (A.shape[0], B.shape[1]):
        raise ShapeError(f"input has shape {tuple(C.shape)} but mat1 @ mat2 has {(A.shape[0], B.shape[1])}")
    if beta == 0:
        return evaluate("O[i,j] = alpha * A[i,k] * B[k,j]", A=A, B=B, alpha=a, out_format=out_format)
    if all(sp.issparse(x) for x in (C, A, B)) and out_format not in ("dense", "Dense"):
        # a sparse result: fused, the statement is recompiled split by MLIR 22 and stores every
        # entry of its dense temporary; the product as CSR, then the union is exact
        P = einsum("ik,kj->ij", A, B, out_format="csr")
        return evaluate("O[i,j] = beta * C[i,j] + alpha * P[i,j]", C=C, P=P, beta=b, alpha=a,
                        out_format=out_format)
    return evaluate("O[i,j] = beta * C[i,j] + alpha * A[i,k] * B[k,j]", C=C, A=A, B=B, beta=b, alpha=a,
                    out_format=out_format)


def sspaddmm(input, mat1, mat2, *, beta=1, alpha=1, out_format="csr"):
    """``torch.sspaddmm``: ``beta * input + alpha * (mat1 @ mat2)`` with sparse ``input`` and
    ``mat1`` and dense ``mat2``, a sparse result (CSR): ``input``'s entries and every entry
    of the rows where ``mat1`` stores something.  Two kernels (the product as CSR, then the
    sum): fused in one, MLIR 22 needs the split form, which stores every entry."""
    C, A, B = _matrix(input, "input"), _matrix(mat1, "mat1"), _matrix(mat2, "mat2")
    if (C.shape[0], C.shape[1]) != (A.shape[0], B.shape[1]):
        raise ShapeError(f"input has shape {tuple(C.shape)} but mat1 @ mat2 has {(A.shape[0], B.shape[1])}")
    b, a = _scalars(beta, alpha, C, A, B)
    P = einsum("ik,kj->ij", A, B, out_format="csr")
    return evaluate("O[i,j] = beta * C[i,j] + alpha * P[i,j]", C=C, P=P, beta=b, alpha=a, out_format=out_format)


def smm(input, mat, *, out_format="csr"):
    """``torch.smm``: sparse ``input`` @ dense ``mat``, a sparse result (CSR) storing every
    entry of the rows where ``input`` stores something."""
    return mm(input, mat, out_format=out_format)


def hspmm(mat1, mat2, *, out_format="csr"):
    """``torch.hspmm``: sparse ``mat1`` @ dense ``mat2`` as a "hybrid" sparse matrix - its
    stored rows are dense.  Returned as a CSR array whose non-empty rows are stored in full
    (torch's hybrid COO has the same rows and values)."""
    return mm(mat1, mat2, out_format=out_format)


def bmm(input, mat2, *, out_format=None):
    """``torch.bmm``: matrix products batched over the leading dimension, ``(b, n, m) @ (b,
    m, p)``; 3-d COO arrays or NumPy arrays.  sparse x dense -> dense, sparse x sparse ->
    a 3-d COO array."""
    A, B = _matrix(input, "input", 3), _matrix(mat2, "mat2", 3)
    return einsum("bik,bkj->bij", A, B, out_format=out_format)


def sampled_addmm(input, mat1, mat2, *, beta=1, alpha=1, out_format=None):
    """``torch.sparse.sampled_addmm`` (SDDMM): ``beta * input + alpha * (mat1 @ mat2)``
    computed only at ``input``'s stored entries; a sparse result with exactly ``input``'s
    pattern, in its layout.  Two kernels: the sampled product, then the sum.

    Args:
        input (scipy.sparse.sparray): The sparse matrix whose pattern is sampled.
        mat1 (numpy.ndarray): The dense left factor.
        mat2 (numpy.ndarray): The dense right factor.
        beta (int | float | complex): The factor of ``input``'s values.
        alpha (int | float | complex): The factor of the sampled product.
        out_format (str | Format | None): The result's format, as in ``sc.einsum``
            (``None``: the pattern rules).

    Returns:
        result (scipy.sparse.sparray): A sparse matrix with ``input``'s pattern.

    Raises:
        ShapeError: The shapes do not agree."""
    C = as_operand(input, "input")
    if not sp.issparse(C) or C.ndim != 2:
        raise OperandError("sampled_addmm: input must be a sparse matrix")
    A, B = _matrix(mat1, "mat1"), _matrix(mat2, "mat2")
    if (C.shape[0], C.shape[1]) != (A.shape[0], B.shape[1]):
        raise ShapeError(f"input has shape {tuple(C.shape)} but mat1 @ mat2 has {(A.shape[0], B.shape[1])}")
    b, a = _scalars(beta, alpha, C, A, B)
    fmt = out_format if out_format is not None else (C.format if C.format in ("csr", "csc", "coo") else "csr")
    P = _pattern(C, 1, np.result_type(A.dtype, B.dtype))
    S = einsum("ij,ik,kj->ij", P, A, B, out_format=fmt)
    return evaluate("O[i,j] = beta * C[i,j] + alpha * S[i,j]", C=C, S=S, beta=b, alpha=a,
                    out_format=fmt)

