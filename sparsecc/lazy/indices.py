"""Index notation as Python objects: ``i, j = sc.indices("i j")``; ``A[i, j] * x[j]`` and
``sc.lazy.sum(..., over=j)`` (docs/lazy.md, Index objects).

An indexed expression is the lazy DAG of the einsum it mirrors: a product of indexed
factors summed over some indices is the one contraction node ``sc.lazy.einsum`` records
(``sum(A[i,j] * x[j], over=j)`` is ``einsum("ij,j->i", A, x)``: the same statement, the same
program and kernel cache entries).  Other operations (``+``, functions, comparisons) line
the operands' indices up and broadcast, as the string form's ``A[i,j] + x[j]`` does.  The
free indices keep their order of first appearance; ``e.lazy(j, i)`` picks another.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from ..errors import ShapeError, SparseccError
from .core import _SCALARS, LazyArray, Operators, _binary, _contract, _unary, expand_dims, lazy, permute_dims, where


@dataclass(frozen=True, slots=True)
class IndexVar:
    """An index of the Python spelling of index notation (``sc.indices``)."""

    name: str

    def __repr__(self):
        return f"sc.index({self.name!r})"


def indices(names: str):
    """``sc.indices("i j k")``: index objects, one per name (a tuple; one name: the index)."""
    if not isinstance(names, str):
        raise SparseccError("sc.indices takes the names in one string: sc.indices('i j')")
    parts = names.replace(",", " ").split()
    if not parts or builtins.any(not p.isidentifier() for p in parts) or len(set(parts)) != len(parts):
        raise SparseccError(f"sc.indices({names!r}): give distinct identifiers separated by spaces")
    out = tuple(IndexVar(p) for p in parts)
    return out[0] if len(out) == 1 else out


def is_index_key(key) -> bool:
    key = key if isinstance(key, tuple) else (key,)
    return builtins.any(isinstance(k, IndexVar) for k in key)


class Indexed(Operators):
    """An expression over named indices: a product of ``factors`` (each a lazy node or a
    Python scalar with its index labels), or one lazy ``node`` whose axes are ``labels``."""

    __slots__ = ("factors", "labels")
    _sc_indexed = True
    __array_priority__ = 1001

    def __init__(self, factors, labels):
        self.factors = tuple(factors)
        self.labels = tuple(labels)

    @classmethod
    def access(cls, x: LazyArray, key) -> "Indexed":
        key = key if isinstance(key, tuple) else (key,)
        if not builtins.all(isinstance(k, IndexVar) for k in key):
            raise SparseccError("an access takes index objects only (sc.indices); mix no slices or integers in")
        if len(key) != x.ndim:
            raise ShapeError(f"an access of {len(key)} indices for a lazy array of shape {x.shape}")
        labels = tuple(k.name for k in key)
        return cls([(x, labels)], dict.fromkeys(labels))

    # ----------------------------------------------------------- as a lazy array
    def lazy(self, *order) -> LazyArray:
        """The value as a lazy array whose axes are ``order`` (index objects; default: the
        free indices in order of first appearance)."""
        out = tuple(o.name for o in order) if order else self.labels
        if sorted(out) != sorted(self.labels):
            raise ShapeError(f"the axes ({', '.join(out)}) are not the expression's free indices "
                             f"({', '.join(self.labels)})")
        if len(self.factors) == 1 and isinstance(self.factors[0][0], LazyArray) and self.factors[0][1] == out:
            return self.factors[0][0]
        return _contract([f[1] for f in self.factors], out, [f[0] for f in self.factors], "an indexed product")

    def _over(self, labels: tuple) -> LazyArray:
        """The value with axes ``labels`` (a superset of its own, broadcast: size 1)."""
        node = self.lazy()
        mine = list(self.labels)
        for a, name in enumerate(labels):
            if name not in self.labels:
                node = expand_dims(node, node.ndim)
                mine.append(name)
        return permute_dims(node, tuple(mine.index(n) for n in labels))

    # ----------------------------------------------------------- operations
    __hash__ = object.__hash__

    def __bool__(self):
        raise SparseccError("the truth value of an indexed expression is not known while tracing")

    def __repr__(self):
        return f"<sparsecc indexed expression over ({', '.join(self.labels)})>"


def _as_indexed(x) -> Indexed:
    if isinstance(x, Indexed):
        return x
    if isinstance(x, _SCALARS):
        return Indexed([(x, ())], ())
    x = lazy(x)
    if x.ndim:
        raise ShapeError(f"an array of shape {x.shape} beside an indexed expression: index it (A[i, j])")
    return Indexed([(x, ())], ())


def _product(a, b) -> Indexed:
    a, b = _as_indexed(a), _as_indexed(b)
    return Indexed(a.factors + b.factors, dict.fromkeys(a.labels + b.labels))


def apply_binary(op: str, a, b) -> Indexed:
    a, b = _as_indexed(a), _as_indexed(b)
    labels = tuple(dict.fromkeys(a.labels + b.labels))
    return Indexed([(_binary(op, _side(a, labels), _side(b, labels)), labels)], labels)


def _side(x: Indexed, labels):
    """``x`` over ``labels`` (a bare Python scalar stays a scalar: a weak constant)."""
    if not x.labels and len(x.factors) == 1 and isinstance(x.factors[0][0], _SCALARS):
        return x.factors[0][0]
    return x._over(labels)


def apply_unary(fn: str, a) -> Indexed:
    a = _as_indexed(a)
    return Indexed([(_unary(fn, a._over(a.labels)), a.labels)], a.labels)


def apply_where(c, a, b) -> Indexed:
    parts = [_as_indexed(x) for x in (c, a, b)]
    labels = tuple(dict.fromkeys(sum((p.labels for p in parts), ())))
    return Indexed([(where(*[_side(p, labels) for p in parts]), labels)], labels)


def reduce_sum(e: Indexed, over) -> Indexed:
    """``sc.lazy.sum(e, over=j)`` (``over``: an index or a tuple of them)."""
    over = over if isinstance(over, (tuple, list)) else (over,)
    if not builtins.all(isinstance(o, IndexVar) for o in over):
        raise SparseccError("sum(..., over=) takes index objects (sc.indices)")
    names = [o.name for o in over]
    for n in names:
        if n not in e.labels:
            raise ShapeError(f"sum over '{n}': the expression has no index '{n}' (its indices: "
                             f"{', '.join(e.labels) or 'none'})")
    out = tuple(n for n in e.labels if n not in names)
    node = _contract([f[1] for f in e.factors], out, [f[0] for f in e.factors], "sum(..., over=)")
    return Indexed([(node, out)], out)


__all__ = ["IndexVar", "Indexed", "indices", "is_index_key", "reduce_sum", "apply_unary", "apply_binary",
           "apply_where"]
