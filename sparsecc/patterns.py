"""Pattern rules: which entries a result stores, from the operands' patterns alone.

A pattern is either *full* (every entry stored, as a dense operand) or *sparse*, constrained
by the sparse operands read under some indices.  The rules (docs/sparse-results.md):

* ``A + B``, ``A - B``: the union (a full operand makes the union full);
* ``A * B``, ``A / c``: the intersection (a full operand leaves the other's pattern);
* ``sum[k]`` (contraction): entry stored when some ``k`` contributes - the Boolean product;
* ``f(A)`` with ``f(0) == 0`` keeps A's pattern; with ``f(0) != 0`` (``exp``, ``cos``,
  ``log``) the result is full, as is adding a scalar to a sparse operand.  Those two are
  refused when a sparse result is asked for, since the pattern would come from values
  (``f(0)``) rather than from the operands.

A diagonal ``A[i,i]`` of a sparse operand counts as dense (the kernel extracts it into a
dense vector first).  Only the kind of each operand (sparse or dense) matters, never its
values.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import FormatError
from .expr import UNARY, Access, Binary, Const, Expr, Reduce, Statement, Unary, show, used_indices


@dataclass(frozen=True)
class Pattern:
    full: bool
    indices: frozenset = frozenset()   # indices constrained by sparse operands (sparse patterns)
    why: str | None = None             # a full pattern made by a 0 -> non-zero op on a sparse one


FULL = Pattern(True)


@lru_cache(maxsize=None)
def keeps_zero(fn: str) -> bool:
    """Does ``fn`` map 0 to 0 (so that unstored entries stay unstored)?"""
    with np.errstate(all="ignore"):
        return bool(UNARY[fn](np.float64(0.0)) == 0)


def pattern_of(e: Expr, sparse: frozenset[str]) -> Pattern:
    """The pattern of ``e`` when the operands named in ``sparse`` are sparse."""
    if isinstance(e, Access):
        if e.tensor in sparse and len(set(e.indices)) == len(e.indices):
            return Pattern(False, frozenset(e.indices))
        # dense operands, and diagonals of sparse ones (A[i,i]), which kernels read as a
        # dense vector: every entry counts as stored
        return FULL
    if isinstance(e, Const):
        return FULL
    if isinstance(e, Unary):
        p = pattern_of(e.arg, sparse)
        if p.full or keeps_zero(e.fn):
            return p
        return Pattern(True, why=f"{e.fn}(0) is not 0, so {show(e)} stores a value at every entry "
                                 f"where the operand stores none")
    if isinstance(e, Reduce):
        p = pattern_of(e.body, sparse)
        return p if p.full else Pattern(False, p.indices - set(e.indices))
    assert isinstance(e, Binary)
    a, b = pattern_of(e.left, sparse), pattern_of(e.right, sparse)
    if e.op in "+-":
        if not a.full and not b.full:
            return Pattern(False, a.indices | b.indices)
        scalar_side = (e.right if a.full is False else e.left)
        why = a.why or b.why
        if why is None and (not a.full or not b.full) and not used_indices(scalar_side):
            why = f"'{show(e)}' adds a scalar to a sparse operand, which stores a value at every entry"
        return Pattern(True, why=why)
    if e.op == "*":
        if a.full and b.full:
            return Pattern(True, why=a.why or b.why)
        return Pattern(False, (a.indices if not a.full else frozenset()) | (b.indices if not b.full else frozenset()))
    # division: only stored entries of the dividend are read (x / c)
    if not b.full:
        return Pattern(True, why=f"'{show(e)}' divides by a sparse operand, whose unstored zeros give inf/nan")
    return a


def result_pattern(stmt: Statement, sparse: frozenset[str]) -> Pattern:
    return pattern_of(stmt.expr, sparse)


def default_result_format(stmt: Statement, sparse: frozenset[str]) -> str:
    """``"dense"`` for rank 0/1 results and patterns dense in some output dimension;
    else ``"csr"`` for matrices and ``"coo"`` for higher ranks."""
    rank = len(stmt.indices)
    if rank < 2:
        return "dense"
    p = result_pattern(stmt, sparse)
    if p.full or not set(stmt.indices) <= p.indices:
        return "dense"
    return "csr" if rank == 2 else "coo"


def check_sparse_result(stmt: Statement, sparse: frozenset[str]) -> None:
    """Refuse a sparse result whose pattern would depend on values (see module docstring)."""
    p = result_pattern(stmt, sparse)
    if p.full and p.why:
        raise FormatError(f"cannot give '{stmt}' a sparse result: {p.why}. "
                          f"Ask for a dense result instead (out_format='dense', or out_format=None)")
