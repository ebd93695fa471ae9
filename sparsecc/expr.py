"""The expression IR: one frozen, hashable tree for einsum and index notation alike.

A kernel is a :class:`Statement` ``out[i, j] = expr``.  Equal statements hash equal, so a
statement (with formats, dtypes and options) keys the compile cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from .errors import DTypeError, OperandError, ShapeError

def conjugate(x):
    """``conj``: numpy.conjugate of a complex value; a real, integer or bool value itself
    (numpy.conjugate would make a bool an int8)."""
    return np.conjugate(x) if np.iscomplexobj(x) else x


#: unary functions the DSL knows, with the numpy function that defines their meaning
UNARY = {
    "neg": np.negative, "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "log": np.log,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sinh": np.sinh,
    "asin": np.arcsin, "atan": np.arctan, "expm1": np.expm1, "log1p": np.log1p,
    "ceil": np.ceil, "floor": np.floor, "conj": conjugate,
}


def _caster(name: str):
    def cast(x):
        return np.asarray(x).astype(name)[()]
    cast.__name__ = f"astype_{name}"
    return cast


#: conversions (NumPy's ``astype``): ``astype_float32(x)`` and so on, one per supported dtype;
#: a conversion maps 0 to 0, so it keeps a sparse operand's pattern
CASTS = {f"astype_{n}": _caster(n) for n in ("bool", "int32", "int64", "float32", "float64", "complex64",
                                              "complex128")}
UNARY.update(CASTS)
BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide,
          "%": np.remainder,
          "min": np.minimum, "max": np.maximum, "pow": np.power,
          "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
          "==": np.equal, "!=": np.not_equal, "and": np.logical_and, "or": np.logical_or,
          "xor": np.logical_xor,
          # GraphBLAS's structural multiplies: 1, the left value, the right value
          "pair": lambda a, b: np.ones(np.broadcast(a, b).shape, np.int64)[()],
          "first": lambda a, b: a, "second": lambda a, b: b}
#: binary ops written as functions in index notation: ``min(a, b)``
BINARY_FUNCTIONS = ("min", "max", "pow", "pair", "first", "second")
_LOGICAL = {"and": "land", "or": "lor", "xor": "lxor"}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")

#: ``sum`` has NumPy's meaning (every entry, unstored ones are zeros); the others are
#: GraphBLAS monoids over *stored* entries: a point takes part only where every sparse
#: operand of the body stores a value, and no contribution gives the identity (dense
#: result) or no entry (sparse result).
REDUCTIONS = ("sum", "plus", "times", "min", "max", "lor", "land", "lxor")
#: the NumPy function each monoid applies, and its identity per dtype kind
MONOIDS = {
    "sum": (np.add, 0), "plus": (np.add, 0), "times": (np.multiply, 1),
    "min": (np.minimum, "+inf"), "max": (np.maximum, "-inf"),
    "lor": (np.logical_or, False), "land": (np.logical_and, True), "lxor": (np.logical_xor, False),
}


@dataclass(frozen=True, slots=True)
class Access:
    tensor: str
    indices: tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Const:
    """A constant.  A Python scalar is weak in NumPy's promotion rules (``2.5 * x[i]`` keeps
    float32); a NumPy scalar (a folded function of constants, ``tanh(0.5)``) is strong.
    Equal only to a constant of the same type and bits (``1``, ``1.0``, ``True``, ``0.0`` and
    ``-0.0`` differ, ``nan`` equals itself), so equal trees have equal dtypes and values."""

    value: Union[bool, int, float, complex, np.generic]

    def _key(self):
        v = self.value
        if isinstance(v, (float, complex, np.inexact)):
            return type(v), np.asarray(v).tobytes()
        return type(v), v

    def __eq__(self, other):
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


@dataclass(frozen=True, slots=True)
class Unary:
    fn: str
    arg: "Expr"


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True, slots=True)
class Reduce:
    """``op[indices](body)``; ``identity``: what a monoid reduction starts from (None: the
    monoid's own, e.g. +inf for ``min``)."""

    op: str
    indices: tuple[str, ...]
    body: "Expr"
    identity: Union[bool, int, float, None] = None


@dataclass(frozen=True, slots=True)
class Where:
    """``where(cond, a, b)``: NumPy's select."""

    cond: "Expr"
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True, slots=True)
class Index:
    """The value of an index variable (``index(j)``), as int64."""

    name: str


@dataclass(frozen=True, slots=True)
class Stored:
    """``stored(e)``: ``e`` only where every sparse operand read by ``e`` stores an entry
    (GraphBLAS's rule: unstored entries are absent, not zero).  Elsewhere the result stores
    nothing, whatever ``e`` of zero would be - so ``stored(exp(A[i,j]))`` keeps A's pattern."""

    body: "Expr"


@dataclass(frozen=True, slots=True)
class Dense:
    """``dense(e)``: ``e`` with NumPy's meaning at every entry (unstored entries are zeros),
    computed into a dense temporary first - so a monoid reduction or ``stored(...)`` around
    it sees every entry (``min[j](dense(A[i,j]))`` is the minimum including zeros)."""

    body: "Expr"


Expr = Union[Access, Const, Unary, Binary, Reduce, Where, Index, Stored, Dense]


@dataclass(frozen=True, slots=True)
class Statement:
    """``output[indices] = expr``; ``operands`` lists the inputs in call order."""

    output: str
    indices: tuple[str, ...]
    expr: Expr
    operands: tuple[str, ...]

    def __str__(self) -> str:
        lhs = f"{self.output}[{','.join(self.indices)}]" if self.indices else self.output
        return f"{lhs} = {show(self.expr)}"


def describe(name: str) -> str:
    """How messages name an operand: einsum operands are positional (``#0``)."""
    return f"operand {name[1:]}" if name.startswith("#") else f"operand '{name}'"



def bind_by_name(subject: str, names, args, kwargs, noun: str = "operand") -> list:
    """The values of ``names`` (the operands of ``subject``: a statement's quoted text, "the
    program"), given by position and/or by name, in ``names`` order; an OperandError names
    the extra, unknown, repeated or missing ones.  The one binding of a kernel's and a
    program's call (``runtime/plans.py``, ``program.py``, ``explore``)."""
    names = tuple(names)
    if len(args) > len(names):
        raise OperandError(f"{subject} takes {len(names)} {noun}s ({', '.join(names)}), "
                           f"got {len(args)} positional")
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise OperandError(f"{subject} has no {noun} {k!r}; its {noun}s are {', '.join(names)}")
        if k in values:
            raise OperandError(f"{noun} {k!r} given twice")
        values[k] = v
    missing = [o for o in names if o not in values]
    if missing:
        raise OperandError(f"{subject} needs {noun}(s) {', '.join(missing)}")
    return [values[o] for o in names]

def show(e: Expr) -> str:
    if isinstance(e, Access):
        shown = e.tensor if not e.tensor.startswith("#") else f"T{e.tensor[1:]}"
        return f"{shown}[{','.join(e.indices)}]" if e.indices else shown
    if isinstance(e, Const):
        return repr(e.value.item() if isinstance(e.value, np.generic) else e.value)
    if isinstance(e, Unary):
        return f"{e.fn}({show(e.arg)})"
    if isinstance(e, Binary):
        if e.op in BINARY_FUNCTIONS or e.op in _LOGICAL:
            return f"{_LOGICAL.get(e.op, e.op)}({show(e.left)}, {show(e.right)})"
        return f"({show(e.left)} {e.op} {show(e.right)})"
    if isinstance(e, Where):
        return f"where({show(e.cond)}, {show(e.left)}, {show(e.right)})"
    if isinstance(e, Index):
        return f"index({e.name})"
    if isinstance(e, Stored):
        return f"stored({show(e.body)})"
    if isinstance(e, Dense):
        return f"dense({show(e.body)})"
    return f"{e.op}[{','.join(e.indices)}]({show(e.body)})"


#: the deepest expression sparsecc accepts (nodes from the root to a leaf; parentheses and
#: function calls nest the parser as deep): a sum of 100 terms is 100 levels deep.  Deeper
#: trees would exhaust Python's stack in the tree walkers and the emitter.
MAX_DEPTH = 100


def depth(e: Expr) -> int:
    """Levels of ``e`` (a leaf is 1); iterative, so any depth can be measured."""
    best, stack = 0, [(e, 1)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in children(node))
    return best


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Unary):
        return (e.arg,)
    if isinstance(e, Binary):
        return (e.left, e.right)
    if isinstance(e, (Reduce, Stored, Dense)):
        return (e.body,)
    if isinstance(e, Where):
        return (e.cond, e.left, e.right)
    return ()


def accesses(e: Expr) -> list[Access]:
    """Every access in ``e``, left to right."""
    if isinstance(e, Access):
        return [e]
    return [a for c in children(e) for a in accesses(c)]


def used_indices(e: Expr) -> tuple[str, ...]:
    """Indices used anywhere in ``e``, in order of first appearance."""
    seen: dict[str, None] = {}
    for a in accesses(e):
        seen.update(dict.fromkeys(a.indices))
    seen.update(dict.fromkeys(n.name for n in walk(e) if isinstance(n, Index)))
    return tuple(seen)


def walk(e: Expr):
    """Every node of ``e``, parents first."""
    yield e
    for c in children(e):
        yield from walk(c)


def free_indices(e: Expr) -> tuple[str, ...]:
    """Indices of ``e`` that a reduction inside it does not bind."""
    if isinstance(e, Access):
        return tuple(dict.fromkeys(e.indices))
    if isinstance(e, Index):
        return (e.name,)
    if isinstance(e, Reduce):
        return tuple(i for i in free_indices(e.body) if i not in e.indices)
    seen: dict[str, None] = {}
    for c in children(e):
        seen.update(dict.fromkeys(free_indices(c)))
    return tuple(seen)


# ----------------------------------------------------------------------------- folding


def _is_const(e: Expr) -> bool:
    return isinstance(e, Const)


def fold(e: Expr) -> Expr:
    """``e`` with every subexpression of constants only replaced by its value, computed by
    NumPy on scalars of the constants' dtypes (so the value is the one NumPy gives, rounding,
    overflow and division by zero included).  An operator of Python scalars stays a Python
    scalar (weak, as Python would have computed it before NumPy sees it; unary minus too); a
    function of a constant is a NumPy scalar (strong, as ``np.tanh(0.5)`` is).  Iterative: any depth."""
    done: dict[int, Expr] = {}
    stack = [(e, False)]
    while stack:
        node, expanded = stack.pop()
        kids = children(node)
        if not expanded and kids:
            stack.append((node, True))
            stack.extend((c, False) for c in kids if id(c) not in done)
            continue
        new_kids = tuple(done[id(c)] for c in kids)
        done[id(node)] = _fold_node(node, new_kids)
    return done[id(e)]


def _fold_node(node: Expr, kids: tuple) -> Expr:
    if not kids:
        return node
    if isinstance(node, Unary):
        rebuilt = Unary(node.fn, kids[0])
    elif isinstance(node, Binary):
        rebuilt = Binary(node.op, *kids)
    elif isinstance(node, Where):
        rebuilt = Where(*kids)
    elif isinstance(node, Reduce):
        return Reduce(node.op, node.indices, kids[0], node.identity)
    elif isinstance(node, Stored):
        return Stored(kids[0])
    elif isinstance(node, Dense):
        return Dense(kids[0])
    else:
        return node
    if not all(isinstance(k, Const) for k in kids):
        return rebuilt
    vals = [k.value for k in kids]
    weak = all(not isinstance(v, np.generic) for v in vals)
    try:
        # NumPy scalars of each constant's dtype (a Python int beyond int64 is refused)
        args = [v if isinstance(v, np.generic) else np.asarray(v)[()] for v in vals]
        with np.errstate(all="ignore"):
            if isinstance(node, Unary):
                out = UNARY[node.fn](args[0])
            elif isinstance(node, Where):
                out = np.where(*args)
            else:
                out = BINARY[node.op](*args)
    except (TypeError, OverflowError, ValueError) as err:
        raise DTypeError(f"{show(rebuilt)}: numpy refuses this for these constants ({err})") from None
    out = np.asarray(out)[()]
    if weak and (isinstance(node, Binary) or node.fn == "neg"):   # operators, not functions
        return Const(out.item())
    return Const(out)


# --------------------------------------------------------------------------- inference


def index_sizes(stmt: Statement, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Bind every index to a size from the operand shapes; sizes must agree."""
    sizes: dict[str, int] = {}
    where: dict[str, str] = {}
    for name in stmt.operands:
        if name not in shapes:
            continue
        shape = shapes[name]
        for a in accesses(stmt.expr):
            if a.tensor != name:
                continue
            if len(a.indices) != len(shape):
                raise ShapeError(
                    f"{describe(name)} is used with {len(a.indices)} indices "
                    f"({','.join(a.indices) or 'none'}) but has {len(shape)} dimensions, shape {tuple(shape)}"
                )
            for pos, (i, n) in enumerate(zip(a.indices, shape)):
                if i in sizes and sizes[i] != n:
                    raise ShapeError(
                        f"index '{i}' has size {sizes[i]} in {where[i]} but {n} in "
                        f"{describe(name)} (dimension {pos})"
                    )
                sizes.setdefault(i, int(n))
                where.setdefault(i, describe(name))
    return sizes


def _dummy(dtype: np.dtype):
    return np.ones((), dtype=dtype)


def infer_dtypes(stmt: Statement, dtypes: dict[str, np.dtype]) -> dict[Expr, np.dtype]:
    """The numpy dtype of every node, as numpy would compute it.

    Each node is evaluated on one-element dummies of its children's dtypes; reductions keep
    their body's dtype (``numpy.einsum``'s rule: a sum of bools is a bool).
    """
    out: dict[Expr, np.dtype] = {}

    def visit(e: Expr) -> np.dtype:
        if e in out:
            return out[e]
        if isinstance(e, Access):
            dt = np.dtype(dtypes[e.tensor])
        elif isinstance(e, Const):
            dt = np.asarray(e.value).dtype
        elif isinstance(e, Index):
            dt = np.dtype(np.int64)
        elif isinstance(e, (Stored, Dense)):
            dt = visit(e.body)
        elif isinstance(e, Reduce):
            dt = visit(e.body)
            if e.op in ("lor", "land", "lxor"):
                dt = np.dtype(bool)
        else:
            kids = [visit(c) for c in children(e)]
            fn = (UNARY[e.fn] if isinstance(e, Unary) else
                  (lambda c, a, b: np.where(c, a, b)) if isinstance(e, Where) else BINARY[e.op])
            args = [_dummy(k) for k in kids]
            # A constant operand is a weak Python scalar for numpy's promotion rules.
            if isinstance(e, (Binary, Where)):
                args = [c.value if isinstance(c, Const) else a for c, a in zip(children(e), args)]
            try:
                with np.errstate(all="ignore"):
                    dt = np.asarray(fn(*args)).dtype
            except ValueError as err:     # pow(x[i], -1) on integers
                raise DTypeError(f"{show(e)}: numpy refuses this for {', '.join(str(k) for k in kids)} "
                                 f"({err}); for a float result write the exponent as a float (-1.0)") from None
            except (TypeError, OverflowError) as err:
                names = ", ".join(str(k) for k in kids)
                what = e.fn if isinstance(e, Unary) else "where" if isinstance(e, Where) else f"'{e.op}'"
                raise DTypeError(f"{what} is not defined for {names} in numpy ({err})") from None
        out[e] = dt
        return dt

    visit(stmt.expr)
    return out
