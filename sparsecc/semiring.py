"""Semirings: einsum over ``(add, multiply)`` pairs other than ``(+, *)``.

A semiring einsum ``sc.einsum("ji,j->i", W, d, semiring="min_plus")`` becomes the statement
``out[i] = min[j](W[j,i] + d[j])`` whose reduction is a *monoid over stored entries*: a term
takes part only where every sparse operand stores an entry (GraphBLAS's rule: an unstored
entry is absent, not zero), and an output entry with no term gets the monoid's identity in a
dense result and is not stored in a sparse one.  Dense operands store every entry.

Names follow GraphBLAS (``<add>_<multiply>``); :class:`Semiring` defines others.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Union

from .errors import ParseError, SparseccError
from .expr import REDUCTIONS, Access, Binary, Const, Expr, Index, Reduce, Statement, Stored, Unary, Where, walk

#: the multiply operators a semiring may name, and the IR op each is
MULTIPLIES = {
    "times": "*", "plus": "+", "minus": "-", "div": "/", "min": "min", "max": "max",
    "land": "and", "lor": "or", "lxor": "xor", "pair": "pair", "first": "first", "second": "second",
    "pow": "pow",
}
#: the add monoids (reductions over stored entries)
ADDS = tuple(r for r in REDUCTIONS if r != "sum")


@dataclass(frozen=True)
class Semiring:
    """A semiring ``(add, multiply)`` with the add monoid's ``identity``, for
    ``einsum(..., semiring=...)`` and ``compile(..., semiring=...)``.

    Args:
        add: The add monoid: ``"plus"``, ``"times"``, ``"min"``, ``"max"``, ``"lor"`` or
            ``"land"``.
        mul: A multiply operator name (``"times"``, ``"plus"``, ``"minus"``, ``"div"``,
            ``"min"``, ``"max"``, ``"land"``, ``"lor"``, ``"lxor"``, ``"pair"``, ``"first"``,
            ``"second"``, ``"pow"``) or an expression in ``a`` and ``b`` in index notation's
            syntax (``"a * b + 1"``, ``"max(a, b) - 1"``): the value of one term from a
            stored pair.
        identity: The value a reduction starts from; ``None``: the monoid's own (0 for plus,
            1 for times, +inf for min, -inf for max, False for lor, True for land). An output
            entry with no term gets it in a dense result.
        name: A name to show; ``None`` for none.

    Raises:
        SparseccError: An unknown monoid, operator or malformed expression.
    """

    add: str
    mul: str
    identity: Union[bool, int, float, None] = None
    name: str | None = None

    def __post_init__(self):
        if self.add not in ADDS:
            raise SparseccError(f"a semiring's add must be one of {', '.join(ADDS)}; got {self.add!r}")
        if not isinstance(self.mul, str):
            raise SparseccError(f"a semiring's mul is an operator name or an expression in a and b, "
                                f"got {type(self.mul).__name__}")
        _multiply(self.mul)         # fail early on a bad expression
        if self.identity is not None and not isinstance(self.identity, (bool, int, float)):
            raise SparseccError(f"a semiring's identity is a number, got {self.identity!r}")

    def __str__(self):
        return self.name or f"Semiring(add={self.add!r}, mul={self.mul!r}, identity={self.identity!r})"


_NAMED_PAIRS = [
    ("plus", "times"), ("min", "plus"), ("max", "plus"), ("min", "times"), ("max", "times"),
    ("min", "max"), ("max", "min"), ("lor", "land"), ("land", "lor"), ("plus", "pair"),
    ("plus", "min"), ("plus", "max"), ("min", "first"), ("min", "second"), ("max", "first"),
    ("max", "second"), ("plus", "first"), ("plus", "second"), ("lor", "pair"), ("times", "times"),
    ("plus", "plus"), ("min", "minus"), ("max", "minus"), ("lxor", "land"),
]
#: GraphBLAS's built-in semirings by name (``"min_plus"``, ``"lor_land"`` ...)
NAMED: dict[str, Semiring] = {}


def _register():
    for add, mul in _NAMED_PAIRS:
        if add in ADDS:
            NAMED[f"{add}_{mul}"] = Semiring(add, mul, name=f"{add}_{mul}")


def lookup(semiring) -> Semiring:
    """A :class:`Semiring` from a name or an instance."""
    if isinstance(semiring, Semiring):
        return semiring
    if isinstance(semiring, str):
        key = semiring.strip().lower()
        if key in NAMED:
            return NAMED[key]
        raise SparseccError(f"unknown semiring {semiring!r}; known: {', '.join(sorted(NAMED))}, "
                            f"or sc.Semiring(add=..., mul=..., identity=...)")
    raise SparseccError(f"semiring must be a name or sc.Semiring, got {type(semiring).__name__}")


@lru_cache(maxsize=256)
def _multiply(mul: str):
    """``(a, b) -> Expr`` for a multiply name or expression."""
    key = mul.strip()
    if key in MULTIPLIES:
        op = MULTIPLIES[key]
        return lambda a, b: Binary(op, a, b)
    from .parse import parse_notation
    try:
        stmt = parse_notation(f"_t = {key}")
    except ParseError as err:
        raise SparseccError(f"semiring multiply {mul!r} is neither an operator "
                            f"({', '.join(MULTIPLIES)}) nor an expression in a and b: {err}") from None
    bad = [n for n in stmt.operands if n not in ("a", "b")]
    if bad:
        raise SparseccError(f"semiring multiply {mul!r} may only use a and b, not {', '.join(bad)}")
    if any(isinstance(n, (Reduce, Index)) for n in walk(stmt.expr)):
        raise SparseccError(f"semiring multiply {mul!r} must be a scalar expression of a and b")
    template = stmt.expr
    used = set(stmt.operands)

    def multiply(a, b):
        e = _substitute(template, {"a": a, "b": b})
        # a side the expression ignores still takes part: a term exists only where both
        # sides store an entry (mul="b" is second(a, b), not b alone, which would lose a's
        # pattern and the sizes of indices only a carries)
        if "a" not in used:
            e = Binary("second", a, e)
        if "b" not in used:
            e = Binary("first", e, b)
        return e
    return multiply


def _substitute(e: Expr, env: dict) -> Expr:
    if isinstance(e, Access):
        return env[e.tensor]
    if isinstance(e, (Const, Index)):
        return e
    if isinstance(e, Unary):
        return Unary(e.fn, _substitute(e.arg, env))
    if isinstance(e, Binary):
        return Binary(e.op, _substitute(e.left, env), _substitute(e.right, env))
    if isinstance(e, Where):
        return Where(*(_substitute(c, env) for c in (e.cond, e.left, e.right)))
    if isinstance(e, Stored):
        return Stored(_substitute(e.body, env))
    raise AssertionError(e)


def apply(stmt: Statement, semiring: Semiring) -> Statement:
    """The einsum statement ``stmt`` (``sum[k](A * B * ...)``) over ``semiring``: the
    factors combined by its multiply, left to right, summed by its add monoid over stored
    entries (no contracted index: the multiply over the stored entries of all factors, in a
    reduction over no index, whose identity fills what no stored pair reaches)."""
    expr = stmt.expr
    red = None
    if isinstance(expr, Reduce):
        red, expr = expr.indices, expr.body
    factors = []

    def flatten(e):
        if isinstance(e, Binary) and e.op == "*":
            flatten(e.left)
            flatten(e.right)
        else:
            factors.append(e)
    flatten(expr)
    mul = _multiply(semiring.mul)
    body = factors[0]
    for f in factors[1:]:
        body = mul(body, f)
    # no contracted index: a reduction over no index, so that an output entry no stored pair
    # reaches gets the add monoid's identity in a dense result (as with a contraction)
    body = Reduce(semiring.add, red or (), body if red else Stored(body), semiring.identity)
    return Statement(stmt.output, stmt.indices, body, stmt.operands)


_register()
