"""Reading a statement as a product: what may be reordered at all.

:func:`product_form` reads a statement as ``monoid[C](f1 (x) f2 (x) ... (x) fn)`` - a
reduction by one monoid of a product of accesses under one multiply ``(x)`` - or says it
is not one (``None``).  Only then may the factors be combined in another order, and only
when the multiply distributes over the monoid (:data:`DISTRIBUTIVE`: plus-times, min-plus,
max-plus, min-max, max-min, or-and, and-or, xor-and).  A nonlinear function, a comparison,
``where``, a division, ``stored``/``dense``, an index value, or a second monoid anywhere in
the statement make it no product: its plan is the one loop nest.  (``plan/path.py``, the
search over orders, names these too.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..expr import Access, Binary, Const, Expr, Reduce, Statement, Stored

#: (monoid, multiply) pairs whose multiply distributes over the monoid (and is associative
#: and commutative): the only statements whose factors may be reordered
DISTRIBUTIVE = frozenset({("sum", "*"), ("plus", "*"), ("min", "+"), ("max", "+"), ("min", "max"),
                          ("max", "min"), ("lor", "and"), ("land", "or"), ("lxor", "and")})
#: the semiring multiply name of each IR op (``sparsecc.semiring.MULTIPLIES`` inverted)
MULTIPLY_NAMES = {"*": "times", "+": "plus", "min": "min", "max": "max", "and": "land", "or": "lor"}

@dataclass(frozen=True)
class Product:
    """A statement read as a product (see the module docstring).  ``factors``: the accesses
    with at least one index, in the statement's order; ``scalars``: 0-d accesses and
    constants (combined in the last step); ``contracted``: the reduced indices."""

    monoid: str
    mul: str
    identity: object
    factors: tuple[Access, ...]
    scalars: tuple[Expr, ...]
    contracted: tuple[str, ...]
    output: str
    indices: tuple[str, ...]

    @property
    def stored_only(self) -> bool:
        """Whether the monoid reduces stored entries only (GraphBLAS's rule), not NumPy's sum."""
        return self.monoid != "sum"


def product_form(stmt: Statement, why: list | None = None) -> Product | None:
    """``stmt`` as a :class:`Product` of at least three factors, or None (``why`` gets the
    reason appended)."""
    def no(reason):
        if why is not None:
            why.append(reason)
        return None

    e = stmt.expr
    monoid, identity, contracted = None, None, []
    mul = None
    e_top_indices = e.indices if isinstance(e, Reduce) else ()
    if isinstance(e, Reduce):
        monoid, identity, contracted = e.op, e.identity, list(e.indices)
        e = e.body
        if isinstance(e, Stored) and not contracted:
            e = e.body
    if isinstance(e, Binary):
        mul = e.op
    else:
        return no("fewer than three factors")
    factors, scalars, nested = [], [], []

    def flatten(x, inside) -> bool:
        nonlocal monoid
        if isinstance(x, Binary) and x.op == mul:
            return flatten(x.left, inside) and flatten(x.right, inside)
        if isinstance(x, Access):
            if len(set(x.indices)) != len(x.indices):
                return False            # a diagonal: read into a temporary by the nest itself
            (factors if x.indices else scalars).append(x)
            if x.indices:
                nested.append(inside)
            return True
        if isinstance(x, Const):
            scalars.append(x)
            return True
        if isinstance(x, Reduce) and x.op == "sum" and mul == "*" and monoid in (None, "sum") and x.identity is None:
            monoid = "sum"
            contracted.extend(x.indices)
            return flatten(x.body, inside | frozenset(x.indices))
        return False

    flat = flatten(e, frozenset())
    flatten = None          # (the recursive closure's cell let go: no cycle for the collector)
    if not flat:
        return no("not a product of accesses under one monoid (a function, comparison, where, division "
                  "or another monoid in it)")
    if monoid is None:
        return no("no reduction: an element-wise product stays one nest")
    if (monoid, mul) not in DISTRIBUTIVE:
        return no(f"'{mul}' does not distribute over the monoid '{monoid}'")
    if any(isinstance(s, Const) for s in scalars) and (monoid, mul) != ("sum", "*"):
        return no("a constant in a semiring product")
    if len(set(contracted)) != len(contracted) or set(contracted) & set(stmt.indices):
        return no("an index reduced twice")
    # a nested sum's indices are used only inside it (else it cannot be pulled out)
    top = set(e_top_indices)
    for f, inside in zip(factors, nested):
        if any(i in contracted and i not in top and i not in inside for i in f.indices):
            return no("a nested sum's index used outside it")
    if len(set(stmt.indices)) != len(stmt.indices) or not set(stmt.indices) <= {i for f in factors for i in f.indices}:
        return no("an output index no factor carries")
    if len(factors) < 3:
        return no("fewer than three factors")
    return Product(monoid, mul, identity, tuple(factors), tuple(scalars), tuple(contracted), stmt.output,
                   tuple(stmt.indices))
