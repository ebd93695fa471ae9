"""The lazy array and its namespace: each operation records a node of the DAG (see the
package docstring and docs/lazy.md); ``lower`` turns the DAG into statements."""

from __future__ import annotations

import builtins
import functools
import importlib
import linecache
import sys

import numpy as np
import scipy.sparse as sp

from ..errors import DTypeError, OperandError, ShapeError, SparseccError
from ..expr import BINARY, UNARY, Const, Unary, fold
from ..runtime.pydata import is_pydata, to_scipy

_SCALARS = (bool, int, float, complex, np.generic)
#: index labels of reductions' terms
_LETTERS = "ijklmnopqrstuvwxyzabcdefghABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _where_called(depth: int = 2) -> str:
    """``file:line: code`` of the user's line that called into a lazy array."""
    f = sys._getframe(depth)
    while f is not None and f.f_code.co_filename.startswith(__file__.rsplit("/", 1)[0]):
        f = f.f_back
    if f is None:                                   # pragma: no cover
        return "<unknown>"
    code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{f.f_code.co_filename}:{f.f_lineno}" + (f": {code}" if code else "")


class Operators:
    """NumPy's operators for lazy arrays and indexed expressions (``sc.indices``) alike:
    ``_binary``/``_unary`` dispatch on an indexed side."""

    __slots__ = ()

    def __add__(self, o): return _binary("+", self, o)
    def __radd__(self, o): return _binary("+", o, self)
    def __sub__(self, o): return _binary("-", self, o)
    def __rsub__(self, o): return _binary("-", o, self)
    def __mul__(self, o): return _binary("*", self, o)
    def __rmul__(self, o): return _binary("*", o, self)
    def __truediv__(self, o): return _binary("/", self, o)
    def __rtruediv__(self, o): return _binary("/", o, self)
    def __pow__(self, o): return _binary("pow", self, o)
    def __rpow__(self, o): return _binary("pow", o, self)
    def __floordiv__(self, o): return _binary("//", self, o)
    def __rfloordiv__(self, o): return _binary("//", o, self)
    def __mod__(self, o): return _binary("%", self, o)
    def __rmod__(self, o): return _binary("%", o, self)
    def __and__(self, o): return logical_and(self, o, "&")
    def __rand__(self, o): return logical_and(o, self, "&")
    def __or__(self, o): return logical_or(self, o, "|")
    def __ror__(self, o): return logical_or(o, self, "|")
    def __xor__(self, o): return logical_xor(self, o, "^")
    def __rxor__(self, o): return logical_xor(o, self, "^")
    def __invert__(self): return logical_not(self, "~")
    def __lt__(self, o): return _binary("<", self, o)
    def __le__(self, o): return _binary("<=", self, o)
    def __gt__(self, o): return _binary(">", self, o)
    def __ge__(self, o): return _binary(">=", self, o)
    def __eq__(self, o): return _binary("==", self, o)      # noqa: D105
    def __ne__(self, o): return _binary("!=", self, o)
    def __neg__(self): return _unary("neg", self)
    def __abs__(self): return _unary("abs", self)


class LazyArray(Operators):
    """A value not computed yet: a node of the traced DAG, with NumPy's ``shape`` and
    ``dtype``.  Build it with ``sc.lazy(x)`` and the operators / ``sc.lazy`` functions;
    ``sc.compute`` computes it."""

    __slots__ = ("kind", "op", "kids", "shape", "dtype", "sparse", "value", "torch", "pydata", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, kind, op, kids, shape, dtype, sparse=False, value=None):
        self.kind, self.op, self.kids = kind, op, tuple(kids)
        self.shape, self.dtype, self.sparse, self.value = tuple(shape), np.dtype(dtype), sparse, value
        #: a torch operand (leaves): results of a computation reading one are torch tensors
        self.torch = False
        #: a pydata/sparse operand (leaves): sparse results are pydata COO arrays
        self.pydata = False

    # ---------------------------------------------------------------- NumPy look
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def T(self) -> "LazyArray":
        return permute_dims(self, tuple(range(self.ndim))[::-1])

    def __repr__(self):
        return f"<sparsecc.LazyArray {self.kind} shape={self.shape} dtype={self.dtype}>"

    __hash__ = object.__hash__

    def __bool__(self):
        raise SparseccError(f"{_where_called()}: the truth value of a lazy array is not known while tracing "
                            f"(Python control flow on a lazy value's contents); compute it first with "
                            f"sc.compute, or use sc.lazy.where")

    def __iter__(self):
        raise SparseccError(f"{_where_called()}: a lazy array cannot be iterated while tracing")

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d lazy array")
        return self.shape[0]

    def __array__(self, *a, **k):
        raise SparseccError(f"{_where_called()}: a lazy array has no values yet; sc.compute(x) gives them")

    # ----------------------------------------------------------------- operators
    def __pos__(self): return self
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)

    def sum(self, axis=None, keepdims=False): return sum(self, axis=axis, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return max(self, axis=axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return min(self, axis=axis, keepdims=keepdims)
    def mean(self, axis=None, keepdims=False): return mean(self, axis=axis, keepdims=keepdims)
    def prod(self, axis=None, keepdims=False): return prod(self, axis=axis, keepdims=keepdims)
    def argmax(self, axis=None, keepdims=False): return _structure().argmax(self, axis=axis, keepdims=keepdims)
    def argmin(self, axis=None, keepdims=False): return _structure().argmin(self, axis=axis, keepdims=keepdims)
    def astype(self, dtype, copy=True): return _structure().astype(self, dtype)
    def reshape(self, *shape): return _structure().reshape(self, shape[0] if len(shape) == 1 else shape)
    def __getitem__(self, key):
        ix = _indices()
        return ix.Indexed.access(self, key) if ix.is_index_key(key) else _structure().getitem(self, key)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fn = _UFUNCS.get(ufunc.__name__)
        if method != "__call__" or fn is None or kwargs:
            return NotImplemented
        return fn(*inputs)


def _structure():
    """``structure`` (it imports this module)."""
    return importlib.import_module(".structure", __package__)


def _indices():
    """``indices`` (index objects; it imports this module)."""
    return importlib.import_module(".indices", __package__)


def _indexed(*xs) -> bool:
    return builtins.any(getattr(x, "_sc_indexed", False) for x in xs)


# ---------------------------------------------------------------------- building
def lazy(x) -> LazyArray:
    """``sc.lazy(x)``: a NumPy array, a SciPy sparse array/matrix, or a NumPy 0-d value as a
    lazy operand (a LazyArray stays itself)."""
    if isinstance(x, LazyArray):
        return x
    if _indexed(x):                     # an indexed expression (sc.indices): its free indices in order
        return x.lazy()
    if _is_torch(x):
        node = lazy(_from_torch(x))
        node.torch = True
        return node
    if is_pydata(x):                    # COO/GCXS over its buffers (SciPy arrays; no copy)
        node = lazy(to_scipy(x, "a sc.lazy operand"))
        node.pydata = True
        return node
    if sp.issparse(x):
        if x.format not in ("csr", "csc", "coo"):
            x = x.tocsr()
        return LazyArray("leaf", None, (), x.shape, x.dtype, True, x)
    if isinstance(x, np.ndarray) or isinstance(x, np.generic):
        x = np.asarray(x)
        return LazyArray("leaf", None, (), x.shape, x.dtype, False, x)
    if hasattr(x, "__array__") and not isinstance(x, _SCALARS):
        x = np.asarray(x)
        return LazyArray("leaf", None, (), x.shape, x.dtype, False, x)
    raise OperandError(f"sc.lazy takes a NumPy array, a SciPy or pydata/sparse array or a torch tensor, got "
                       f"{type(x).__name__}")


asarray = lazy


def _is_torch(x) -> bool:
    """A torch tensor (checked by its type's module: ``import sparsecc`` imports no torch)."""
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "layout")


def _from_torch(t):
    """A CPU torch tensor's NumPy/SciPy view (``sparsecc.torch.to_sparsecc``); a tensor that
    requires grad is refused (lazy arrays run no backward)."""
    if getattr(t, "requires_grad", False):
        raise SparseccError(f"{_where_called(3)}: sc.lazy of a tensor that requires grad: lazy arrays compute "
                            f"values only; use sparsecc.torch for gradients, or pass t.detach()")
    return torch_api().to_sparsecc(t, "a sc.lazy operand")


def torch_api():
    """``sparsecc.torch``, imported on demand (as ``dispatch.py`` imports its on-demand
    packages: it imports ``sparsecc`` itself, and only a torch operand needs it)."""
    return importlib.import_module("sparsecc.torch")


def _placeholder(x, slot: int) -> LazyArray:
    node = lazy(x)
    out = LazyArray("leaf", slot, (), node.shape, node.dtype, node.sparse, None)
    out.torch, out.pydata = node.torch, node.pydata
    return out


def _operand(x):
    """A LazyArray, or a Python scalar as a constant (a NumPy scalar is a 0-d operand: a new
    value compiles nothing, and NumPy promotes it as it promotes the NumPy scalar)."""
    if isinstance(x, LazyArray):
        return x
    if isinstance(x, np.generic):
        return lazy(np.asarray(x))
    if isinstance(x, _SCALARS):
        return Const(x)
    return lazy(x)


def _dummy(x):
    if isinstance(x, Const):
        return x.value
    return np.ones((), x.dtype)


def _result_dtype(fn, args) -> np.dtype:
    try:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*[_dummy(a) for a in args])).dtype
    except (TypeError, ValueError) as err:
        raise SparseccError(f"{_where_called(3)}: numpy refuses this for "
                            f"{', '.join(str(_dummy(a).dtype if not isinstance(a, Const) else type(a.value).__name__) for a in args)} "
                            f"({err})") from None


def _broadcast_shape(shapes, what) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"{_where_called(3)}: {what}: shapes {', '.join(map(str, shapes))} do not "
                         f"broadcast") from None


def _unary(fn: str, x) -> LazyArray:
    if _indexed(x):
        return _indices().apply_unary(fn, x)
    x = _operand(x)
    if isinstance(x, Const):
        return fold(Unary(fn, x)).value
    return LazyArray("unary", fn, (x,), x.shape, _result_dtype(UNARY[fn], [x]), x.sparse)


def _binary(op: str, a, b) -> LazyArray:
    if _indexed(a, b):
        return _indices()._product(a, b) if op == "*" else _indices().apply_binary(op, a, b)
    a, b = _operand(a), _operand(b)
    kids = [a, b]
    shape = _broadcast_shape([k.shape for k in kids if isinstance(k, LazyArray)], f"'{op}'")
    return LazyArray("binary", op, kids, shape, _result_dtype(BINARY[op], kids),
                     builtins.any(isinstance(k, LazyArray) and k.sparse for k in kids))


def where(cond, x1, x2) -> LazyArray:
    """``numpy.where(cond, x1, x2)``."""
    if _indexed(cond, x1, x2):
        return _indices().apply_where(cond, x1, x2)
    kids = [_operand(cond), _operand(x1), _operand(x2)]
    shape = _broadcast_shape([k.shape for k in kids if isinstance(k, LazyArray)], "where")
    return LazyArray("where", None, kids, shape, _result_dtype(lambda c, a, b: np.where(c, a, b), kids),
                     builtins.any(isinstance(k, LazyArray) and k.sparse for k in kids))


def _bool_only(spelled, *xs):
    """``& | ^ ~`` only on bool, where they are NumPy's logical operators (its bitwise ones on
    integers are not in the DSL)."""
    if spelled:
        for x in xs:
            dt = (x.lazy() if _indexed(x) else x if isinstance(x, LazyArray) else np.asarray(x)).dtype
            if dt != np.bool_:
                raise DTypeError(f"{_where_called(3)}: '{spelled}' on {dt} operands is NumPy's bitwise "
                                 f"operator, which sparsecc does not compile; it works on bool arrays (the "
                                 f"logical one), or use sc.lazy.logical_and/or/xor/not")


def _logical(op: str, a, b, spelled) -> LazyArray:
    _bool_only(spelled, a, b)
    return _binary(op, a, b)


def logical_and(x1, x2, _spelled=None): return _logical("and", x1, x2, _spelled)
def logical_or(x1, x2, _spelled=None): return _logical("or", x1, x2, _spelled)
def logical_xor(x1, x2, _spelled=None): return _logical("xor", x1, x2, _spelled)


def logical_not(x, _spelled=None) -> LazyArray:
    """``numpy.logical_not``: true where ``x`` is zero (``~x`` on bool)."""
    _bool_only(_spelled, x)
    return _binary("==", x, False if getattr(x, "dtype", None) == np.bool_ else 0)


def floor_divide(x1, x2): return _binary("//", x1, x2)
def remainder(x1, x2): return _binary("%", x1, x2)
def maximum(x1, x2): return _binary("max", x1, x2)
def minimum(x1, x2): return _binary("min", x1, x2)
def pow(x1, x2): return _binary("pow", x1, x2)      # noqa: A001
def clip(x, min=None, max=None):                    # noqa: A002
    out = x
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


def _make_unary(fn):
    def f(x):
        return _unary(fn, x)
    f.__name__ = f.__qualname__ = fn
    f.__doc__ = f"``numpy.{UNARY[fn].__name__}`` element-wise."
    return f


exp, log, sqrt, sin, cos, tan, tanh, sinh, expm1, log1p, ceil, floor = (
    _make_unary(n) for n in ("exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "expm1", "log1p", "ceil",
                             "floor"))
abs = _make_unary("abs")          # noqa: A001
negative = _make_unary("neg")
arcsin, arctan = _make_unary("asin"), _make_unary("atan")
conj = conjugate = _make_unary("conj")


def square(x):
    """``numpy.square`` (of bool it is int8 in NumPy, a dtype sparsecc does not compile)."""
    if getattr(x, "dtype", None) == np.bool_:
        raise DTypeError(f"{_where_called()}: numpy.square of bool gives int8, which sparsecc does not support; "
                         f"use x.astype(np.int64) first, or x * x (bool)")
    return _binary("*", x, x)


def permute_dims(x, axes) -> LazyArray:
    """``x`` with its axes permuted (``.T`` reverses them)."""
    x = lazy(x)
    axes = tuple(int(a) % x.ndim if x.ndim else int(a) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"{_where_called()}: permute_dims axes {axes} is no permutation of {x.ndim} axes")
    if axes == tuple(range(x.ndim)):
        return x
    return LazyArray("perm", axes, (x,), tuple(x.shape[a] for a in axes), x.dtype, x.sparse)


def einsum(subscripts: str, *operands) -> LazyArray:
    """``numpy.einsum(subscripts, *operands)`` (a sum of products; ``->`` optional)."""
    if not isinstance(subscripts, str):
        raise SparseccError("sc.lazy.einsum takes subscripts as a string")
    s = subscripts.replace(" ", "")
    lhs, _, rhs = s.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise SparseccError(f"einsum '{subscripts}' has {len(terms)} terms but {len(operands)} operands")
    if "->" not in s:
        counts = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    kids = [lazy(o) if not isinstance(o, _SCALARS) else o for o in operands]
    return _contract([tuple(t) for t in terms], tuple(rhs), kids, f"einsum '{subscripts}'")


def _contract(labels, out, kids, what) -> LazyArray:
    size: dict = {}
    nodes = []
    for t, k in zip(labels, kids):
        if isinstance(k, _SCALARS):
            k = Const(k)
            if t:
                raise ShapeError(f"{what}: a scalar has no axes ({''.join(t)})")
        elif len(t) != k.ndim:
            raise ShapeError(f"{_where_called(3)}: {what}: a term of {len(t)} indices for an operand of shape {k.shape}")
        else:
            for c, n in zip(t, k.shape):
                if size.setdefault(c, n) != n:
                    raise ShapeError(f"{_where_called(3)}: {what}: index '{c}' has sizes {size[c]} and {n} "
                                     f"(shapes {', '.join(str(getattr(x, 'shape', ())) for x in kids)})")
        nodes.append(k)
    for c in out:
        if c not in size:
            raise ShapeError(f"{what}: output index '{c}' is in no operand")
    arrays = [k for k in nodes if isinstance(k, LazyArray)]
    dtype = _result_dtype(lambda *a: functools.reduce(np.multiply, a), nodes) if len(nodes) > 1 else \
        np.dtype(nodes[0].dtype)
    sparse = builtins.all(k.sparse for k in arrays) if arrays else False
    sparse = builtins.any(k.sparse for k in arrays)
    return LazyArray("contract", (tuple(map(tuple, labels)), tuple(out)), nodes, tuple(size[c] for c in out), dtype,
                     sparse)


def matmul(x1, x2) -> LazyArray:
    """``x1 @ x2`` (1-D and 2-D operands)."""
    a, b = lazy(x1), lazy(x2)
    if a.ndim == 0 or b.ndim == 0 or a.ndim > 2 or b.ndim > 2:
        raise ShapeError(f"{_where_called()}: matmul takes 1-D and 2-D operands, got shapes {a.shape} and {b.shape}")
    la = ("i", "j") if a.ndim == 2 else ("j",)
    lb = ("j", "k") if b.ndim == 2 else ("j",)
    out = tuple(c for c in la[:-1]) + tuple(c for c in lb[1:])
    if a.shape[-1] != b.shape[0]:
        raise ShapeError(f"{_where_called()}: matmul: shapes {a.shape} and {b.shape} do not align")
    return _contract([la, lb], out, [a, b], "matmul")


def tensordot(x1, x2, axes=2) -> LazyArray:
    """``numpy.tensordot(x1, x2, axes)``."""
    a, b = lazy(x1), lazy(x2)
    if isinstance(axes, int):
        ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        ax_a, ax_b = ([axes[0]] if isinstance(axes[0], int) else list(axes[0]),
                      [axes[1]] if isinstance(axes[1], int) else list(axes[1]))
    ax_a = [x % a.ndim for x in ax_a]
    ax_b = [x % b.ndim for x in ax_b]
    la = [f"a{k}" for k in range(a.ndim)]
    lb = [f"b{k}" for k in range(b.ndim)]
    for p, q in zip(ax_a, ax_b):
        lb[q] = la[p]
    out = [la[k] for k in range(a.ndim) if k not in ax_a] + [lb[k] for k in range(b.ndim) if k not in ax_b]
    return _contract([tuple(la), tuple(lb)], tuple(out), [a, b], "tensordot")


def vecdot(x1, x2, axis=-1) -> LazyArray:
    """The Array API's ``vecdot``: ``sum(conj(x1) * x2, axis=axis)`` (real operands)."""
    return sum(_binary("*", x1, x2), axis=axis)


def _axes(x: LazyArray, axis) -> tuple:
    if axis is None:
        return tuple(range(x.ndim))
    axis = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axis:
        if not -x.ndim <= a < builtins.max(x.ndim, 1):
            raise ShapeError(f"{_where_called(3)}: axis {a} is out of bounds for shape {x.shape}")
        out.append(a % x.ndim)
    return tuple(sorted(set(out)))


def _keep(node: LazyArray, x: LazyArray, axes, keepdims) -> LazyArray:
    if not keepdims or not axes:
        return node
    shape = tuple(1 if k in axes else n for k, n in enumerate(x.shape))
    return LazyArray("keep", tuple(axes), (node,), shape, node.dtype, node.sparse)


def sum(x, axis=None, keepdims=False, over=None) -> LazyArray:      # noqa: A001
    """``numpy.sum(x, axis=, keepdims=)`` (every entry; unstored ones are zeros); of an
    indexed expression (``sc.indices``), ``over=``: the index or indices summed."""
    if _indexed(x) or over is not None:
        if not _indexed(x) or axis is not None or keepdims:
            raise SparseccError(f"{_where_called()}: sum(..., over=) sums an indexed expression (A[i, j] * x[j]) "
                                f"over index objects; axis=/keepdims= are for arrays")
        return _indices().reduce_sum(x, over)
    x = _accumulated(lazy(x))
    axes = _axes(x, axis)
    labels = tuple(_LETTERS[k] for k in range(x.ndim))
    out = tuple(c for k, c in enumerate(labels) if k not in axes)
    return _keep(_contract([labels], out, [x], "sum"), x, axes, keepdims)


def _accumulated(x: LazyArray) -> LazyArray:
    """NumPy's sum and prod of bool or of integers narrower than the platform's accumulate in
    int64 (``np.sum`` of a bool array counts)."""
    if x.dtype.kind in "bi" and x.dtype.itemsize < 8:
        return _structure().astype(x, np.int64)
    return x


def _monoid(op: str, x, axis, keepdims) -> LazyArray:
    x = _accumulated(lazy(x)) if op == "times" else lazy(x)
    axes = _axes(x, axis)
    if op != "times" and builtins.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"{_where_called(3)}: {op} of an empty axis has no identity (NumPy refuses it too)")
    shape = tuple(n for k, n in enumerate(x.shape) if k not in axes)
    node = LazyArray("reduce", (op, axes), (x,), shape, x.dtype, x.sparse)
    return _keep(node, x, axes, keepdims)


def prod(x, axis=None, keepdims=False) -> LazyArray:
    """``numpy.prod`` (NumPy's meaning: unstored entries are zeros; an empty product is 1)."""
    return _monoid("times", x, axis, keepdims)


def expand_dims(x, axis=0) -> LazyArray:
    """``x`` with a size-1 axis inserted at ``axis``."""
    x = lazy(x)
    a = axis + x.ndim + 1 if axis < 0 else axis
    if not 0 <= a <= x.ndim:
        raise ShapeError(f"{_where_called()}: expand_dims axis {axis} is out of bounds for shape {x.shape}")
    shape = x.shape[:a] + (1,) + x.shape[a:]
    return LazyArray("keep", (a,), (x,), shape, x.dtype, x.sparse)


def squeeze(x, axis=None) -> LazyArray:
    """``x`` without its size-1 axes (``axis``: those only; each must have size 1)."""
    x = lazy(x)
    axes = tuple(k for k, n in enumerate(x.shape) if n == 1) if axis is None else _axes(x, axis)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"{_where_called()}: squeeze: axis {a} of shape {x.shape} has size {x.shape[a]}, not 1")
    if not axes:
        return x
    labels = tuple(_LETTERS[k] for k in range(x.ndim))
    return _contract([labels], tuple(c for k, c in enumerate(labels) if k not in axes), [x], "squeeze")


def max(x, axis=None, keepdims=False) -> LazyArray:      # noqa: A001
    """``numpy.max`` (NumPy's meaning: unstored entries are zeros)."""
    return _monoid("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False) -> LazyArray:      # noqa: A001
    """``numpy.min`` (NumPy's meaning: unstored entries are zeros)."""
    return _monoid("min", x, axis, keepdims)


def mean(x, axis=None, keepdims=False) -> LazyArray:
    """``numpy.mean``: the sum divided by the count."""
    x = lazy(x)
    axes = _axes(x, axis)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    return sum(x, axis=axis, keepdims=keepdims) / n


_UFUNCS = {"add": lambda a, b: _binary("+", a, b), "subtract": lambda a, b: _binary("-", a, b),
           "multiply": lambda a, b: _binary("*", a, b), "true_divide": lambda a, b: _binary("/", a, b),
           "divide": lambda a, b: _binary("/", a, b), "power": pow, "maximum": maximum, "minimum": minimum,
           "less": lambda a, b: _binary("<", a, b), "less_equal": lambda a, b: _binary("<=", a, b),
           "greater": lambda a, b: _binary(">", a, b), "greater_equal": lambda a, b: _binary(">=", a, b),
           "equal": lambda a, b: _binary("==", a, b), "not_equal": lambda a, b: _binary("!=", a, b),
           "matmul": lambda a, b: matmul(a, b), "negative": negative, "absolute": abs, "exp": exp, "log": log,
           "sqrt": sqrt, "sin": sin, "cos": cos, "tan": tan, "tanh": tanh, "sinh": sinh, "expm1": expm1,
           "log1p": log1p, "ceil": ceil, "floor": floor, "arcsin": arcsin, "arctan": arctan, "square": square, "conjugate": conjugate,
           "floor_divide": floor_divide, "remainder": remainder, "logical_and": logical_and,
           "logical_or": logical_or, "logical_xor": logical_xor, "logical_not": logical_not}


