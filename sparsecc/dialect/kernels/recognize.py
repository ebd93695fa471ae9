"""The hand-written kernels' shared recognition: the statement shapes and formats they serve.

Each kernel module's ``match(stmt, formats, dtypes, out_format)`` returns its plan (a
:class:`RolePlan`: which operand plays which role) or None, built from these checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...expr import Access, Binary, Const, Reduce, Statement, accesses
from ...formats import Format


@dataclass(frozen=True)
class RolePlan:
    """A recognised statement: ``kind`` (the kernel), the operand name of each role (``A``,
    ``X`` ...), and the loop indices in the signature's order (first appearance)."""

    kind: str
    roles: tuple[tuple[str, str], ...]      # (role, operand name)
    index_order: tuple[str, ...]

    def role(self, name: str) -> str:
        """The role of the operand ``name``."""
        return {n: r for r, n in self.roles}[name]

    def format_of(self, role: str, formats: dict) -> Format:
        """The format of the operand in ``role`` (``formats`` by operand name)."""
        return next(f for op, f in formats.items() if self.role(op) == role)


def index_order(stmt: Statement) -> tuple[str, ...]:
    """The kernel signature's index order: first appearance over the accesses (signature.py)."""
    return tuple(dict.fromkeys(ix for a in accesses(stmt.expr) for ix in a.indices))


def factors(e) -> list | None:
    """The accesses of a product ``a * b * ...`` of accesses, or None."""
    if isinstance(e, Access):
        return [e]
    if isinstance(e, Binary) and e.op == "*":
        left, right = factors(e.left), factors(e.right)
        if left is not None and right is not None:
            return left + right
    return None


def is_compressed(f: Format | None, order: tuple[int, ...] = (0, 1)) -> bool:
    """CSR (``order`` (0, 1)) or CSC ((1, 0)), unblocked, 32/64-bit indices."""
    return (f is not None and not f.is_dense and f.block is None and f.levels == ("dense", "compressed")
            and tuple(f.order or (0, 1)) == order and f.pos_width in (32, 64) and f.crd_width in (32, 64))


def is_csr(f: Format | None) -> bool:
    return is_compressed(f, (0, 1))


def is_dense_rowmajor(f: Format) -> bool:
    return f.is_dense and f.block is None and tuple(f.order or (0, 1)) == (0, 1)


def plain_sum(e, n: int) -> bool:
    """``e`` is ``sum[...](...)`` over ``n`` indices, with no identity of its own."""
    return isinstance(e, Reduce) and e.op == "sum" and e.identity is None and len(e.indices) == n


def one_kind(dtypes: tuple[str, ...], kinds: tuple[str, ...]) -> bool:
    """Every operand has the same dtype, of one of the value ``kinds``."""
    return len(set(dtypes)) == 1 and dt.TABLE[dtypes[0]].kind in kinds


@dataclass(frozen=True)
class Product:
    """``C[i,j] = sum[k](...)`` or ``A[i,j] * sum[k](...)`` over a product of accesses
    (SDDMM and SpGEMM): its indices, its factors (the outer one first), the formats by name."""

    i: str
    j: str
    k: str
    factors: tuple
    formats: dict
    index_order: tuple[str, ...]
    scale: tuple = ()       # constant factors of the product (``2 * A[i,k] * B[k,j]``; only with scale_ok)


#: the value kinds of SDDMM and SpGEMM
PRODUCT_KINDS = ("float", "int", "complex")


def scaled_factors(e) -> tuple[list, list] | None:
    """The accesses and the constants of a product ``c * a * b * ...``, or None."""
    if isinstance(e, Access):
        return [e], []
    if isinstance(e, Const):
        return [], [e]
    if isinstance(e, Binary) and e.op == "*":
        left, right = scaled_factors(e.left), scaled_factors(e.right)
        if left is not None and right is not None:
            return left[0] + right[0], left[1] + right[1]
    return None


def csr_product(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
                out_format: Format | None, scale_ok: bool = False) -> Product | None:
    """The product with a CSR result that SDDMM (three factors) and SpGEMM (two) start from;
    ``scale_ok``: constant factors allowed (:attr:`Product.scale`)."""
    if not is_csr(out_format) or len(stmt.indices) != 2 or not one_kind(dtypes, PRODUCT_KINDS):
        return None
    fmts = dict(zip(stmt.operands, formats))
    i, j = stmt.indices
    e = stmt.expr
    outer = None
    if isinstance(e, Binary) and e.op == "*":        # A[i,j] * sum[k](...)
        if isinstance(e.left, Access) and isinstance(e.right, Reduce):
            outer, e = e.left, e.right
        elif isinstance(e.right, Access) and isinstance(e.left, Reduce):
            outer, e = e.right, e.left
        else:
            return None
    if not plain_sum(e, 1):
        return None
    k = e.indices[0]
    scale: list = []
    if scale_ok:
        got = scaled_factors(e.body)
        facs, scale = got if got is not None else (None, [])
    else:
        facs = factors(e.body)
    if facs is None:
        return None
    if outer is not None:
        facs = [outer] + facs
    if len({a.tensor for a in facs}) != len(facs) or len({i, j, k}) != 3:
        return None
    return Product(i, j, k, tuple(facs), fmts, index_order(stmt), tuple(scale))


def scale_literal(consts, dtype: str) -> str | None:
    """The product of the constants in ``dtype`` as an MLIR constant's value, or None where
    they would promote the product past ``dtype`` or are not finite."""
    row = dt.TABLE[dtype]
    v = row.numpy.type(1)
    for c in consts:
        if np.result_type(row.numpy, c.value) != row.numpy:
            return None
        with np.errstate(all="ignore"):
            v = v * row.numpy.type(c.value)
    if not np.all(np.isfinite(v)):
        return None
    if row.kind == "complex":
        part = row.storage[8:-1]
        return f"[{float(v.real)!r} : {part}, {float(v.imag)!r} : {part}]"
    return repr(float(v)) if row.kind == "float" else str(int(v))


def stored_order(access, f: Format) -> tuple | None:
    """The access's indices in the order its CSR or CSC buffers store them (outer first):
    a CSC operand read ``A[k,i]`` is a CSR one of ``(i, k)`` - its buffers are the same (the
    planner's ``G^T @ (w * G)`` step reads ``G``'s transposed copy so); None for others."""
    if is_compressed(f, (0, 1)):
        return access.indices
    if is_compressed(f, (1, 0)):
        return access.indices[::-1]
    return None
