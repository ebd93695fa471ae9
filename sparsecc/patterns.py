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

from .errors import FormatError, InternalError
from .expr import (BINARY, UNARY, Access, Binary, Const, Dense, Expr, Index, Reduce, Statement, Stored, Unary,
                   Where, children, show, used_indices)


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


def direct_accesses(e: Expr) -> list[Access]:
    """The accesses of ``e`` outside nested reductions (those become dense temporaries)."""
    if isinstance(e, Access):
        return [e]
    if isinstance(e, (Reduce, Dense)):
        return []
    return [a for c in children(e) for a in direct_accesses(c)]


def stored_pattern(body: Expr, sparse: frozenset[str]) -> Pattern:
    """The pattern of ``stored(body)``: the intersection of the sparse operands it reads."""
    idx = [a.indices for a in direct_accesses(body)
           if a.tensor in sparse and len(set(a.indices)) == len(a.indices)]
    if not idx:
        return FULL
    return Pattern(False, frozenset(i for t in idx for i in t))


_SAMPLES = (-2.5, -1.0, 0.5, 1.0, 3.0)


@lru_cache(maxsize=None)
def zero_behaviour(op: str) -> tuple[bool, bool, bool]:
    """(op(0, 0) != 0, op(0, y) == 0 for every y, op(x, 0) == 0 for every x) for ``op``."""
    fn = BINARY[op]
    with np.errstate(all="ignore"):
        z = np.float64(0.0)
        nonzero = bool(np.asarray(fn(z, z)) != 0)
        left = all(bool(np.asarray(fn(z, np.float64(y))) == 0) for y in _SAMPLES)
        right = all(bool(np.asarray(fn(np.float64(x), z)) == 0) for x in _SAMPLES)
    return nonzero, left, right


def _const_value(e: Expr):
    return e.value if isinstance(e, Const) else None


def _generic_binary(e: Binary, a: Pattern, b: Pattern) -> Pattern:
    """Value semantics of any binary op, from how it treats zeros: entries where both sides
    are unstored stay unstored iff ``op(0, 0) == 0``; a side that annihilates (``op(0, y)
    == 0``) bounds the pattern by its own."""
    fn = BINARY[e.op]
    nonzero, left_kills, right_kills = zero_behaviour(e.op)
    why = a.why or b.why
    for side, other, pat, kills, first in ((e.right, e.left, a, left_kills, True),
                                           (e.left, e.right, b, right_kills, False)):
        c = _const_value(side)
        if c is not None:      # op with a constant: keeps the other side's pattern iff op(0, c) == 0
            with np.errstate(all="ignore"):
                try:
                    v = fn(0, c) if first else fn(c, 0)
                except ValueError:      # pow(x, -1): numpy refuses only integer zeros
                    v = fn(0.0, c) if first else fn(c, 0.0)
            if bool(np.asarray(v) != 0):
                return Pattern(True, why=why or f"'{show(e)}' is not 0 where {show(other)} is 0, so it stores "
                                                f"a value at every entry")
            return pat
    if nonzero:
        return Pattern(True, why=why or f"'{show(e)}' is not 0 where both sides are 0, so it stores a value "
                                        f"at every entry")
    sides = [p for p, kills in ((a, left_kills), (b, right_kills)) if kills and not p.full]
    if sides:      # bounded by every annihilating sparse side
        return Pattern(False, frozenset().union(*(p.indices for p in sides)))
    if a.full or b.full:
        return Pattern(True, why=why)
    return Pattern(False, a.indices | b.indices)


def pattern_of(e: Expr, sparse: frozenset[str]) -> Pattern:
    """The pattern of ``e`` when the operands named in ``sparse`` are sparse."""
    if isinstance(e, Stored):
        return stored_pattern(e.body, sparse)
    if isinstance(e, (Index, Dense)):
        return FULL
    if isinstance(e, Where):
        a, b = pattern_of(e.left, sparse), pattern_of(e.right, sparse)
        why = a.why or b.why
        for side in (e.left, e.right):
            c = _const_value(side)
            if c is not None and c != 0:
                return Pattern(True, why=why or f"'{show(e)}' selects the constant {c!r}, so it stores a value "
                                                f"at every entry")
        if isinstance(e.left, Const):
            return b
        if isinstance(e.right, Const):
            return a
        if a.full or b.full:
            return Pattern(True, why=why)
        return Pattern(False, a.indices | b.indices)
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
        p = pattern_of(e.body, sparse) if e.op == "sum" else stored_pattern(e.body, sparse)
        return p if p.full else Pattern(False, p.indices - set(e.indices))
    if not isinstance(e, Binary):
        raise InternalError(f"no pattern rule for {type(e).__name__}")
    a, b = pattern_of(e.left, sparse), pattern_of(e.right, sparse)
    if e.op not in ("+", "-", "*", "/"):
        return _generic_binary(e, a, b)
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
