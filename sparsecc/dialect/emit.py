"""Emit one MLIR function for a statement.

The function (``@kernel``) takes, in order: one ``index`` per index variable (its size), one
tensor per operand (sparse operands carry their ``#sparse_tensor.encoding``; all dimensions
are dynamic, so one compile serves every shape), and, for a dense result, the output as a
memref, which the kernel writes in place (``bufferization.materialize_in_destination``).
A sparse result is built by the kernel (insertion, or access-pattern expansion for
SpGEMM-like loops) from a ``tensor.empty`` of the output encoding and returned: its buffers
are allocated by the kernel and belong to the caller.

Dense temporaries are ``memref.alloc``-ed and freed with ``memref.dealloc`` before the
function returns (the pass pipeline runs no deallocation pass; see ``passes/pipeline.py``).

Each reduction that is not the whole right-hand side becomes a ``linalg.generic`` of its own
that fills a dense temporary; the rest of the statement is one more ``linalg.generic``.
Math functions inside a loop over a sparse operand are ``sparse_tensor.unary`` ops, whose
``absent`` region gives ``f(0)`` where ``f(0) != 0`` (so ``exp`` of an unstored entry is 1).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError
from ..expr import UNARY as UNARY_NP   # numpy's meaning of each function, for f(0)
from ..expr import BINARY as BINARY_NP
from ..expr import (COMPARISONS, Access, Binary, Const, Dense, Expr, Index, Reduce, Statement, Stored, Unary,
                    Where, accesses, children, fold, free_indices, infer_dtypes, walk)
from ..formats import Format
from ..patterns import zero_behaviour


@dataclass(frozen=True)
class KernelSignature:
    """What the runtime needs to call the function: the argument order."""

    index_order: tuple[str, ...]          # one index argument per name, in order
    operands: tuple[str, ...]             # operand names, in order
    out_rank: int
    out_dtype: str
    out_format: Format | None = None      # None: dense output written in place


_FLOAT_FN = {"abs": "math.absf", "sqrt": "math.sqrt", "exp": "math.exp", "log": "math.log",
             "sin": "math.sin", "cos": "math.cos", "tan": "math.tan", "tanh": "math.tanh",
             "sinh": "math.sinh", "asin": "math.asin", "atan": "math.atan", "expm1": "math.expm1",
             "log1p": "math.log1p", "ceil": "math.ceil", "floor": "math.floor"}
_COMPLEX_FN = {"abs": "complex.abs", "sqrt": "complex.sqrt", "exp": "complex.exp", "log": "complex.log",
               "sin": "complex.sin", "cos": "complex.cos", "tan": "complex.tan", "tanh": "complex.tanh",
               "expm1": "complex.expm1", "log1p": "complex.log1p"}
_ARITH = {  # op -> kind -> MLIR op
    "+": {"float": "arith.addf", "int": "arith.addi", "complex": "complex.add", "bool": "arith.ori"},
    "-": {"float": "arith.subf", "int": "arith.subi", "complex": "complex.sub"},
    "*": {"float": "arith.mulf", "int": "arith.muli", "complex": "complex.mul", "bool": "arith.andi"},
    "/": {"float": "arith.divf", "complex": "complex.div"},
}


_NATIVE = ("+", "-", "*", "/")      # ops the sparsifier understands on its own (union/intersection)
_MINMAX = {"min": {"float": "arith.minimumf", "int": "arith.minsi", "bool": "arith.minui"},
           "max": {"float": "arith.maximumf", "int": "arith.maxsi", "bool": "arith.maxui"}}
_CMP = {"float": {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"},
        "int": {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"},
        "bool": {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "eq", "!=": "ne"}}
_LOGIC = {"and": "arith.andi", "or": "arith.ori", "xor": "arith.xori"}
#: a reduction's combining op per kind (``sum``/``plus`` use ``+``)
_MONOID_OP = {"times": "*", "min": "min", "max": "max", "lor": "or", "land": "and", "lxor": "xor"}
_BOOL = dt.TABLE["bool"]


def identity_of(op: str, row: dt.DType, given=None):
    """The identity of reduction ``op`` in dtype ``row`` (a Python value); ``given``: the
    user's (a semiring's), converted to ``row``."""
    if given is not None:
        return np.asarray(given).astype(row.numpy).item()
    if op in ("sum", "plus"):
        return 0
    if op == "times":
        return 1
    if op in ("lor", "land", "lxor"):
        return op == "land"
    if row.kind == "complex":
        raise DTypeError(f"{op} of complex values is not defined (complex numbers have no order)")
    if row.kind == "int":
        info = np.iinfo(row.numpy)
        return info.max if op == "min" else info.min
    if row.kind == "bool":
        return op == "min"
    return np.inf if op == "min" else -np.inf


def _row(np_dtype) -> dt.DType:
    return dt.lookup(np_dtype, "an intermediate value")


def _const_text(value, row: dt.DType) -> tuple[str, str]:
    """(op text, type) of a constant of dtype ``row`` (bools are i8 in storage and bodies)."""
    if row.kind == "bool":
        return f"arith.constant {int(bool(value))} : i8", "i8"
    if row.kind == "int":
        return f"arith.constant {int(value.real if isinstance(value, complex) else value)} : {row.mlir}", row.mlir
    if row.kind == "float":
        v = float(value.real if isinstance(value, complex) else value)
        return f"arith.constant {_float_lit(v, row.mlir)} : {row.mlir}", row.mlir
    c = complex(value)
    part = row.mlir[8:-1]
    return (f"complex.constant [{_float_lit(c.real, part)} : {part}, {_float_lit(c.imag, part)} : {part}] "
            f": {row.mlir}", row.mlir)


def _float_lit(v, ty: str = "f64") -> str:
    """A float literal MLIR reads back as exactly ``v`` rounded to ``ty`` (f32/f64).

    MLIR's lexer needs a ``.`` in a decimal float (``1e-05`` is not one) and converts a
    decimal through ``double`` (for f32 a second rounding), so decimals are written only
    when they read back bit-exactly; everything else (NaN with its payload, infinities,
    float32 values such as 0.1f) as the hex bit pattern of the type's width."""
    with np.errstate(over="ignore"):     # 1e39 as f32 is inf, as in numpy
        x = (np.float32 if ty == "f32" else np.float64)(v)
    if np.isfinite(x):
        text = repr(float(x))
        if "." not in text:
            mant, _, exp = text.partition("e")
            text = f"{mant}.0e{exp}" if exp else f"{mant}.0"
        if np.float64(float(text)).astype(x.dtype).tobytes() == x.tobytes() and float(text) == float(x):
            return text
    return "0x" + x.view(np.uint32 if ty == "f32" else np.uint64).item().to_bytes(x.itemsize, "big").hex().upper()


def _body_type(row: dt.DType) -> str:
    return "i8" if row.kind == "bool" else row.mlir


class _Body:
    """SSA lines of one ``linalg.generic`` body."""

    def __init__(self, node_dtypes, sparse_loop: bool, sparse_names=frozenset(), dims=None, ids=None):
        self.lines: list[str] = []
        # names of values hoisted in front of the generic, unique in the function: a counter
        # of the function being emitted (never a global one - the MLIR text, and so the
        # disk-cache key, must not depend on what the process emitted before)
        self.ids = ids if ids is not None else itertools.count()
        self.n = 0
        self.node_dtypes = node_dtypes
        self.sparse_loop = sparse_loop
        self.sparse_names = sparse_names  # operands of this generic that are sparse
        self.dims = dims or {}            # index name -> loop dimension
        self.stored = False               # inside stored(...) or a monoid reduction's body
        self.invariants = frozenset()     # 0-d operands read before the loops
        self.prefix = "v"                 # SSA names: %v1 ... in the body, unique ones when hoisting
        self.args: dict[Access, str] = {}
        self.hoisted: list[str] = []     # lines to place before the generic

    def sparse_in(self, e: Expr) -> bool:
        return any(a.tensor in self.sparse_names for a in accesses(e))

    def region(self, types: list[str], fn, out_type: str) -> list[str]:
        """Lines of a ``sparse_tensor`` op region: block arguments of ``types``, the lines
        ``fn(*args)`` emits, and a yield of what it returns."""
        outer, self.lines = self.lines, []
        names = []
        for _ in types:
            self.n += 1
            names.append(f"%p{self.n}")
        head = f"^bb0({', '.join(f'{n}: {t}' for n, t in zip(names, types))}):"
        y = fn(*names)
        body = [head] + self.lines + [f"sparse_tensor.yield {y} : {out_type}"]
        self.lines = outer
        return body

    def sparse_op(self, head: str, regions: list[tuple[str, list[str] | None]]) -> str:
        """Emit ``%v = <head> name={...} ...`` (a region of None is written as ``{}``)."""
        v = self.fresh()
        ind = "\n        "
        text = f"{v} = {head}"
        for name, lines in regions:
            if lines:
                text += f"{ind}{name}={{{ind}  " + f"{ind}  ".join(lines) + f"{ind}}}"
            else:
                text += f"{ind}{name}={{}}"
        self.lines.append(text)
        return v

    def absent_constant(self, value, row: dt.DType) -> str:
        """A constant an ``absent`` region may yield (defined outside the region)."""
        text = _const_text(value, row)[0]
        if text.startswith("arith."):
            return self.emit(text)
        c = f"%absent{next(self.ids)}"
        self.hoisted.append(f"{c} = {text}")
        return c

    def hoist_constant(self, value, row: dt.DType) -> str:
        c = f"%hoisted{next(self.ids)}"
        self.hoisted.append(f"{c} = {_const_text(value, row)[0]}")
        return c

    def fresh(self) -> str:
        self.n += 1
        return f"%{self.prefix}{self.n}"

    def emit(self, text: str) -> str:
        v = self.fresh()
        self.lines.append(f"{v} = {text}")
        return v

    # ----------------------------------------------------------------- casts
    def cast(self, v: str, src: dt.DType, dst: dt.DType) -> str:
        if src.name == dst.name:
            return v
        s, d = src.kind, dst.kind
        if d == "complex":
            part = dst.mlir[8:-1]
            re_ = self.cast(v, src, dt.TABLE["float32" if part == "f32" else "float64"]) if s != "complex" else None
            if s == "complex":   # complex64 -> complex128
                sp = src.mlir[8:-1]
                r = self.emit(f"complex.re {v} : {src.mlir}")
                i = self.emit(f"complex.im {v} : {src.mlir}")
                r = self.emit(f"arith.extf {r} : {sp} to {part}")
                i = self.emit(f"arith.extf {i} : {sp} to {part}")
                return self.emit(f"complex.create {r}, {i} : {dst.mlir}")
            zero = self.emit(f"arith.constant 0.0 : {part}")
            return self.emit(f"complex.create {re_}, {zero} : {dst.mlir}")
        if d == "bool":
            return self.to_bool(v, src)
        if s == "complex":
            raise DTypeError(f"cannot convert {src.name} to {dst.name}")
        st, dty = _body_type(src), _body_type(dst)
        if d == "float":
            if s == "float":
                op = "arith.extf" if dst.mlir == "f64" else "arith.truncf"
                return self.emit(f"{op} {v} : {st} to {dty}")
            op = "arith.uitofp" if s == "bool" else "arith.sitofp"
            return self.emit(f"{op} {v} : {st} to {dty}")
        if d == "int":
            if s == "bool":
                return self.emit(f"arith.extui {v} : i8 to {dty}")
            if s == "int":
                op = "arith.extsi" if int(dty[1:]) > int(st[1:]) else "arith.trunci"
                return self.emit(f"{op} {v} : {st} to {dty}")
        raise DTypeError(f"cannot convert {src.name} to {dst.name}")

    def to_bool(self, v: str, src: dt.DType) -> str:
        """``v != 0`` as a bool (``i8`` 0/1)."""
        if src.kind == "complex":
            part = src.mlir[8:-1]
            z = self.emit(f"arith.constant 0.0 : {part}")
            zc = self.emit(f"complex.create {z}, {z} : {src.mlir}")
            b = self.emit(f"complex.neq {v}, {zc} : {src.mlir}")
        elif src.kind == "float":
            z = self.emit(f"arith.constant 0.0 : {src.mlir}")
            b = self.emit(f"arith.cmpf une, {v}, {z} : {src.mlir}")
        else:
            t = _body_type(src)
            z = self.emit(f"arith.constant 0 : {t}")
            b = self.emit(f"arith.cmpi ne, {v}, {z} : {t}")
        return self.emit(f"arith.extui {b} : i1 to i8")

    # ------------------------------------------------------------ expressions
    def value(self, e: Expr, want: dt.DType | None = None) -> str:
        row = _row(self.node_dtypes[e])
        if isinstance(e, Const):
            target = want or row
            text, _ = _const_text(e.value, target)
            return self.emit(text)
        if isinstance(e, Access):
            v = self.args[e]
        elif isinstance(e, Index):
            if e.name not in self.dims:
                raise DTypeError(f"index({e.name}): '{e.name}' is not a loop index of this kernel")
            i = self.emit(f"linalg.index {self.dims[e.name]} : index")
            v = self.emit(f"arith.index_cast {i} : index to i64")
        elif isinstance(e, Stored):
            outer, self.stored = self.stored, True
            v = self.value(e.body, row)
            self.stored = outer
        elif isinstance(e, Where):
            v = self.where(e, row)
        elif isinstance(e, Binary):
            v = self.binary(e, row)
        elif isinstance(e, Unary):
            v = self.unary(e, row)
        else:
            raise AssertionError(f"unexpected node {e}")
        if want is None or want.name == row.name:
            return v
        if self.sparse_loop and (self.stored or isinstance(e, Stored)) and self.sparse_in(e):
            # over stored entries only: the conversion in a unary region with an empty absent
            # one (a plain arith.cmpf for x != 0 makes the sparsifier visit every entry, and
            # the unstored ones then take part as False)
            t = _body_type(row)
            return self.sparse_op(f"sparse_tensor.unary {v} : {t} to {_body_type(want)}",
                                  [("present", self.region([t], lambda p: self.cast(p, row, want),
                                                           _body_type(want))), ("absent", None)])
        return self.cast(v, row, want)

    def operand_rows(self, e: Binary, row: dt.DType) -> tuple[dt.DType | None, dt.DType | None]:
        """The dtypes ``e``'s two sides are computed in (None: their own)."""
        if e.op in _LOGIC:
            return _BOOL, _BOOL
        if e.op in ("pair", "first", "second"):
            return None, None
        if e.op in COMPARISONS:   # numpy compares in the promoted dtype; constants are weak
            sides = [c.value if isinstance(c, Const) else self.node_dtypes[c] for c in (e.left, e.right)]
            common = _row(np.result_type(*sides)) if not all(isinstance(c, Const) for c in (e.left, e.right)) \
                else _row(np.result_type(*[self.node_dtypes[c] for c in (e.left, e.right)]))
            return common, common
        return row, row          # arithmetic: numpy computes in the result dtype

    def apply(self, op: str, a: str, b: str, in_row: dt.DType | None, row: dt.DType,
              rows: tuple[dt.DType, dt.DType] | None = None) -> str:
        """``a op b`` on plain values (also inside regions)."""
        k = (in_row or row).kind
        bt = _body_type(in_row or row)
        if op in _ARITH:
            ops = _ARITH[op]
            if k not in ops:
                raise DTypeError(f"'{op}' on {row.name} is not supported")
            return self.emit(f"{ops[k]} {a}, {b} : {bt}")
        if op in ("//", "%"):
            if k == "int":
                return self.int_divmod(op, a, b, bt)
            if k == "float":
                return self.float_divmod(op, a, b, bt)
            raise DTypeError(f"'{op}' on {row.name} is not supported")
        if op in _MINMAX:
            if k not in _MINMAX[op]:
                raise DTypeError(f"{op} of {row.name} values is not supported")
            return self.emit(f"{_MINMAX[op][k]} {a}, {b} : {bt}")
        if op == "pow":
            if k == "float":
                return self.emit(f"math.powf {a}, {b} : {bt}")
            if k == "int":
                return self.int_pow(a, b, bt)
            if k == "complex":
                return self.emit(f"complex.pow {a}, {b} : {bt}")
            raise DTypeError(f"pow of {row.name} values is not supported")
        if op in COMPARISONS:
            if k == "complex":
                if op not in ("==", "!="):
                    raise DTypeError(f"'{op}' does not order complex values")
                c = self.emit(f"complex.{'eq' if op == '==' else 'neq'} {a}, {b} : {bt}")
            elif k == "float":
                c = self.emit(f"arith.cmpf {_CMP[k][op]}, {a}, {b} : {bt}")
            else:
                c = self.emit(f"arith.cmpi {_CMP[k][op]}, {a}, {b} : {bt}")
            return self.emit(f"arith.extui {c} : i1 to i8")
        if op in _LOGIC:
            return self.emit(f"{_LOGIC[op]} {a}, {b} : i8")
        if op == "pair":
            return self.emit(_const_text(1, row)[0])
        src = rows[0] if op == "first" else rows[1]
        return self.cast(a if op == "first" else b, src, row)

    def int_pow(self, a: str, b: str, t: str) -> str:
        """``a ** b`` on integers (wrapping like NumPy): square-and-multiply in an
        ``scf.while`` over the bits of ``b`` (MLIR 22 cannot lower ``math.ipowi`` here).
        A negative exponent, which NumPy refuses (a constant one is refused before
        compiling), gives the truncated ``1 / a ** -b``: 1 for a == 1, +-1 for a == -1, else 0."""
        e = self.emit
        zero, one, m1 = e(f"arith.constant 0 : {t}"), e(f"arith.constant 1 : {t}"), e(f"arith.constant -1 : {t}")
        neg = e(f"arith.cmpi slt, {b}, {zero} : {t}")
        start = e(f"arith.select {neg}, {zero}, {b} : {t}")
        r, bs, rs = self.fresh(), self.fresh(), self.fresh()
        c, x, y = self.fresh(), self.fresh(), self.fresh()
        odd, m, r2, b2, s2 = (self.fresh() for _ in range(5))
        w = self.fresh()
        tt = f"{t}, {t}, {t}"
        ind = "\n          "
        self.lines.append(
            f"{w}:3 = scf.while ({r} = {one}, {bs} = {a}, {rs} = {start}) : ({tt}) -> ({tt}) {{{ind}"
            f"{c} = arith.cmpi ne, {rs}, {zero} : {t}{ind}"
            f"scf.condition({c}) {r}, {bs}, {rs} : {tt}{ind}"
            f"}} do {{{ind}^bb0({r}x: {t}, {bs}x: {t}, {rs}x: {t}):{ind}"
            f"{x} = arith.andi {rs}x, {one} : {t}{ind}"
            f"{odd} = arith.cmpi ne, {x}, {zero} : {t}{ind}"
            f"{m} = arith.muli {r}x, {bs}x : {t}{ind}"
            f"{r2} = arith.select {odd}, {m}, {r}x : {t}{ind}"
            f"{b2} = arith.muli {bs}x, {bs}x : {t}{ind}"
            f"{s2} = arith.shrui {rs}x, {one} : {t}{ind}"
            f"scf.yield {r2}, {b2}, {s2} : {tt}{ind}}}")
        del y
        res = f"{w}#0"
        is1 = e(f"arith.cmpi eq, {a}, {one} : {t}")
        is_m1 = e(f"arith.cmpi eq, {a}, {m1} : {t}")
        odd_b = e(f"arith.cmpi ne, {e(f'arith.andi {b}, {one} : {t}')}, {zero} : {t}")
        sign = e(f"arith.select {odd_b}, {m1}, {one} : {t}")
        inv = e(f"arith.select {is_m1}, {sign}, {e(f'arith.select {is1}, {one}, {zero} : {t}')} : {t}")
        return e(f"arith.select {neg}, {inv}, {res} : {t}")

    def int_divmod(self, op: str, a: str, b: str, t: str) -> str:
        """NumPy's integer ``a // b`` or ``a % b``, with no trap: ``x // 0 == x % 0 == 0``,
        ``INT_MIN // -1 == INT_MIN`` (wraps), ``x % -1 == 0``.  The divisor is replaced by 1
        where it is 0 or -1 (where LLVM's sdiv/srem are undefined) and the result selected."""
        e = self.emit
        zero, one, m1 = e(f"arith.constant 0 : {t}"), e(f"arith.constant 1 : {t}"), e(f"arith.constant -1 : {t}")
        is0 = e(f"arith.cmpi eq, {b}, {zero} : {t}")
        is_m1 = e(f"arith.cmpi eq, {b}, {m1} : {t}")
        bad = e(f"arith.ori {is0}, {is_m1} : i1")
        sb = e(f"arith.select {bad}, {one}, {b} : {t}")
        if op == "//":
            q = e(f"arith.floordivsi {a}, {sb} : {t}")
            neg = e(f"arith.subi {zero}, {a} : {t}")            # a // -1, wrapping
            q = e(f"arith.select {is_m1}, {neg}, {q} : {t}")
            return e(f"arith.select {is0}, {zero}, {q} : {t}")
        r = e(f"arith.remsi {a}, {sb} : {t}")                  # sign of a; 0 where sb is 1
        rnz = e(f"arith.cmpi ne, {r}, {zero} : {t}")
        rneg = e(f"arith.cmpi slt, {r}, {zero} : {t}")
        bneg = e(f"arith.cmpi slt, {sb}, {zero} : {t}")
        differ = e(f"arith.xori {rneg}, {bneg} : i1")
        fix = e(f"arith.andi {rnz}, {differ} : i1")
        adj = e(f"arith.addi {r}, {sb} : {t}")
        return e(f"arith.select {fix}, {adj}, {r} : {t}")

    def float_divmod(self, op: str, a: str, b: str, t: str) -> str:
        """NumPy's float ``a // b`` / ``a % b``: npy_floor_divide / npy_remainder (npymath's
        npy_divmod), branch-free: mod = fmod(a, b); div = (a - mod) / b; where mod != 0 and
        its sign differs from b's: mod += b, div -= 1; mod == 0: mod = copysign(0, b);
        floordiv = floor(div), +1 where div - floor(div) > 0.5; div == 0: copysign(0, a / b);
        b == 0: a / b (``//``) and fmod(a, b) (``%``)."""
        e = self.emit
        zero, one, half = (e(f"arith.constant {v} : {t}") for v in ("0.0", "1.0", "0.5"))
        mod = e(f"arith.remf {a}, {b} : {t}")
        b0 = e(f"arith.cmpf oeq, {b}, {zero} : {t}")
        mnz = e(f"arith.cmpf une, {mod}, {zero} : {t}")
        bneg = e(f"arith.cmpf olt, {b}, {zero} : {t}")
        mneg = e(f"arith.cmpf olt, {mod}, {zero} : {t}")
        fix = e(f"arith.andi {mnz}, {e(f'arith.xori {bneg}, {mneg} : i1')} : i1")
        if op == "%":
            m = e(f"arith.select {fix}, {e(f'arith.addf {mod}, {b} : {t}')}, {mod} : {t}")
            m = e(f"arith.select {mnz}, {m}, {e(f'math.copysign {zero}, {b} : {t}')} : {t}")
            return e(f"arith.select {b0}, {mod}, {m} : {t}")
        quot = e(f"arith.divf {a}, {b} : {t}")
        div = e(f"arith.divf {e(f'arith.subf {a}, {mod} : {t}')}, {b} : {t}")
        div = e(f"arith.select {fix}, {e(f'arith.subf {div}, {one} : {t}')}, {div} : {t}")
        fl = e(f"math.floor {div} : {t}")
        up = e(f"arith.cmpf ogt, {e(f'arith.subf {div}, {fl} : {t}')}, {half} : {t}")
        fl = e(f"arith.select {up}, {e(f'arith.addf {fl}, {one} : {t}')}, {fl} : {t}")
        dnz = e(f"arith.cmpf une, {div}, {zero} : {t}")
        fl = e(f"arith.select {dnz}, {fl}, {e(f'math.copysign {zero}, {quot} : {t}')} : {t}")
        return e(f"arith.select {b0}, {quot}, {fl} : {t}")

    def binary(self, e: Binary, row: dt.DType) -> str:
        lrow, rrow = self.operand_rows(e, row)
        lr = lrow or _row(self.node_dtypes[e.left])
        rr = rrow or _row(self.node_dtypes[e.right])
        in_row = lrow if e.op not in ("pair", "first", "second") else None
        rows = (lr, rr)
        sl, sr = self.sparse_in(e.left), self.sparse_in(e.right)
        # x / s by a scalar operand: the sparsifier admits division only by a constant it can
        # prove non-zero, so it goes through a unary region (0 / s stays unstored, as x / c)
        scalar_divisor = (e.op == "/" and sl and bool(accesses(e.right))
                          and all(a in self.invariants for a in accesses(e.right)))
        # x / c by a constant c with 0 / c != 0 (0, nan): the sparsifier only admits a divisor
        # it proves non-zero, so this also goes through a unary region (its absent value 0 / c)
        with np.errstate(all="ignore"):
            odd_divisor = e.op == "/" and isinstance(e.right, Const) and bool(np.asarray(0.0 / np.asarray(e.right.value)) != 0)
        if not self.sparse_loop or (e.op in _NATIVE and not (self.stored and (sl or sr)) and not scalar_divisor
                                    and not odd_divisor):
            a, b = self.value(e.left, lrow), self.value(e.right, rrow)
            return self.apply(e.op, a, b, in_row, row, rows)
        # In a loop over a sparse operand: the op in the regions of sparse_tensor.binary/unary,
        # which say what happens where a side stores nothing.
        out_t = _body_type(row)
        consts = [all(a in self.invariants for a in accesses(c)) and not any(isinstance(n, Index) for n in walk(c))
                  for c in (e.left, e.right)]
        if any(consts) and not all(consts):
            k = 0 if consts[1] else 1                      # the side with tensors
            side, other = (e.left, e.right) if k == 0 else (e.right, e.left)
            srow = rows[k]
            x = self.value(side, srow)

            def present(p):
                c = self.value(other, rows[1 - k])
                return self.apply(e.op, *((p, c) if k == 0 else (c, p)), in_row, row, rows)
            absent = None
            if scalar_divisor:
                pass
            elif not self.stored and accesses(other):
                # op(0, s) of a scalar operand: computed once before the loops
                outer, self.lines, self.prefix = self.lines, [], f"h{next(self.ids)}_"
                z = self.emit(_const_text(0, srow)[0])
                c = self.value(other, rows[1 - k])
                r = self.apply(e.op, *((z, c) if k == 0 else (c, z)), in_row, row, rows)
                self.hoisted.extend(self.lines)
                self.lines, self.prefix = outer, "v"
                absent = [f"sparse_tensor.yield {r} : {out_t}"]
            elif not self.stored:
                with np.errstate(all="ignore"):
                    zero = np.zeros((), srow.numpy)
                    cval = fold(other).value
                    f0 = BINARY_NP[e.op](zero, cval) if k == 0 else BINARY_NP[e.op](cval, zero)
                if np.asarray(f0) != 0:
                    absent = [f"sparse_tensor.yield {self.absent_constant(np.asarray(f0).item(), row)} : {out_t}"]
            return self.sparse_op(f"sparse_tensor.unary {x} : {_body_type(srow)} to {out_t}",
                                  [("present", self.region([_body_type(srow)], present, out_t)),
                                   ("absent", absent)])
        a, b = self.value(e.left, lrow), self.value(e.right, rrow)
        ta, tb = _body_type(lr), _body_type(rr)
        overlap = self.region([ta, tb], lambda p, q: self.apply(e.op, p, q, in_row, row, rows), out_t)
        left = right = None
        if not self.stored:
            with np.errstate(all="ignore"):
                nonzero = bool(np.asarray(BINARY_NP[e.op](np.zeros((), lr.numpy), np.zeros((), rr.numpy))) != 0)
            if nonzero:
                # op(0, 0) != 0: every entry gets a value; read each sparse side densely
                # (an absent entry is a 0) and combine where both are present, i.e. everywhere
                a = self._densified(a, lr) if sl else a
                b = self._densified(b, rr) if sr else b
            else:
                _, left_kills, right_kills = zero_behaviour(e.op)
                if not right_kills:
                    left = self.region([ta], lambda p: self.apply(
                        e.op, p, self.emit(_const_text(0, rr)[0]), in_row, row, rows), out_t)
                if not left_kills:
                    right = self.region([tb], lambda q: self.apply(
                        e.op, self.emit(_const_text(0, lr)[0]), q, in_row, row, rows), out_t)
        return self.sparse_op(f"sparse_tensor.binary {a}, {b} : {ta}, {tb} to {out_t}",
                              [("overlap", overlap), ("left", left), ("right", right)])

    def _densified(self, x: str, row: dt.DType) -> str:
        t = _body_type(row)
        zero = self.absent_constant(0, row)
        return self.sparse_op(f"sparse_tensor.unary {x} : {t} to {t}",
                              [("present", self.region([t], lambda p: p, t)),
                               ("absent", [f"sparse_tensor.yield {zero} : {t}"])])

    def select(self, c: str, a: str, b: str, row: dt.DType) -> str:
        c1 = self.emit(f"arith.trunci {c} : i8 to i1")
        return self.emit(f"arith.select {c1}, {a}, {b} : {_body_type(row)}")

    def where(self, e: Where, row: dt.DType) -> str:
        if not self.sparse_loop:
            c = self.value(e.cond, _BOOL)
            return self.select(c, self.value(e.left, row), self.value(e.right, row), row)
        # In a sparse loop one branch is a constant (see materialize_inner_reductions): the
        # select runs in the regions of a sparse_tensor.binary over the condition and the
        # other branch, which say what an absent side means.
        k = 1 if isinstance(e.right, Const) else 0        # which branch is the tensor one
        tensor_branch, const_branch = (e.left, e.right) if k == 1 else (e.right, e.left)
        if not isinstance(const_branch, Const):
            raise DTypeError(f"where over sparse operands needs a constant branch: {e}")
        bt = _body_type(row)
        c = self.value(e.cond, _BOOL)
        v = self.value(tensor_branch, row)

        def sel(p, q):
            kc = self.value(const_branch, row)
            return self.select(p, q, kc, row) if k == 1 else self.select(p, kc, q, row)
        overlap = self.region(["i8", bt], sel, bt)
        left = right = None
        if not self.stored:
            kval = const_branch.value
            # both absent: the condition is false -> the false branch at 0
            both = 0 if k == 1 else kval
            if both != 0:
                c = self._densified(c, _BOOL) if self.sparse_in(e.cond) else c
                v = self._densified(v, row) if self.sparse_in(tensor_branch) else v
            else:
                # condition stored, branch absent: select(c, 0, k) or select(c, k, 0)
                if (k == 1 and kval != 0) or k == 0:
                    left = self.region(["i8"], lambda p: sel(p, self.emit(_const_text(0, row)[0])), bt)
                # branch stored, condition absent (false): the false branch
                if k == 0:
                    right = self.region([bt], lambda q: q, bt)
                elif kval != 0:
                    right = self.region([bt], lambda q: self.value(const_branch, row), bt)
        return self.sparse_op(f"sparse_tensor.binary {c}, {v} : i8, {bt} to {bt}",
                              [("overlap", overlap), ("left", left), ("right", right)])

    def unary(self, e: Unary, row: dt.DType) -> str:
        arg_row = _row(self.node_dtypes[e.arg])
        # abs of a complex value is real; every other function computes in its result dtype
        in_row = arg_row if e.fn == "abs" and arg_row.kind == "complex" else row
        x = self.value(e.arg, in_row)
        if e.fn == "abs" and row.kind == "bool":
            return x
        tin, tout = _body_type(in_row), _body_type(row)

        def apply(x: str, emit) -> str:
            if e.fn == "neg":
                if row.kind == "float":
                    return emit(f"arith.negf {x} : {tout}")
                if row.kind == "complex":
                    return emit(f"complex.neg {x} : {tout}")
                zero = emit(f"arith.constant 0 : {tout}")
                return emit(f"arith.subi {zero}, {x} : {tout}")
            if row.kind == "int" and e.fn == "abs":
                return emit(f"math.absi {x} : {tout}")
            if in_row.kind == "complex":
                if e.fn not in _COMPLEX_FN:
                    raise DTypeError(f"{e.fn} of a complex value is not supported")
                if e.fn == "abs":
                    return emit(f"complex.abs {x} : {tin}")
                return emit(f"{_COMPLEX_FN[e.fn]} {x} : {tin}")
            if row.kind != "float":
                raise DTypeError(f"{e.fn} of {in_row.name} is not supported")
            return emit(f"{_FLOAT_FN[e.fn]} {x} : {tout}")

        if not self.sparse_loop:
            return apply(x, self.emit)
        # Inside a loop over a sparse operand: f(x) where x is stored, f(0) where it is not.
        with np.errstate(all="ignore"):
            f0 = UNARY_NP[e.fn](np.zeros((), in_row.numpy))
        outer, self.lines = self.lines, []
        self.lines.append(f"^bb0(%p{self.n + 1}: {tin}):")
        self.n += 1
        y = apply(f"%p{self.n}", self.emit)
        present = self.lines + [f"sparse_tensor.yield {y} : {tout}"]
        absent: list[str] = []
        self.lines = outer
        if f0 != 0 and not (self.stored and self.sparse_in(e.arg)):
            # the absent region may only yield an arith.constant or a value defined outside
            # the generic (complex.constant): hoist it in front of the generic
            text = _const_text(f0.item(), row)[0]
            if text.startswith("arith."):
                c = self.emit(text)
            else:
                c = f"%absent{next(self.ids)}"
                self.hoisted.append(f"{c} = {text}")
            absent = [f"sparse_tensor.yield {c} : {tout}"]
        v = self.fresh()
        ind = "\n        "
        self.lines.append(
            f"{v} = sparse_tensor.unary {x} : {tin} to {tout}{ind}present={{{ind}  "
            + f"{ind}  ".join(present) + f"{ind}}}{ind}absent={{" +
            (f"{ind}  " + f"{ind}  ".join(absent) + f"{ind}" if absent else "") + "}")
        return v



def _replace_accesses(e: Expr, swaps: dict, node_dtypes: dict) -> Expr:
    """``e`` with the accesses in ``swaps`` replaced; every rebuilt node gets its old node's
    dtype in ``node_dtypes``."""
    if isinstance(e, Access):
        return swaps.get(e, e)
    if isinstance(e, Unary):
        new = Unary(e.fn, _replace_accesses(e.arg, swaps, node_dtypes))
    elif isinstance(e, Binary):
        new = Binary(e.op, _replace_accesses(e.left, swaps, node_dtypes),
                     _replace_accesses(e.right, swaps, node_dtypes))
    elif isinstance(e, Where):
        new = Where(*(_replace_accesses(c, swaps, node_dtypes) for c in (e.cond, e.left, e.right)))
    elif isinstance(e, Stored):
        new = Stored(_replace_accesses(e.body, swaps, node_dtypes))
    else:
        return e
    node_dtypes[new] = node_dtypes[e]
    return new


def _tensor_type(rank: int, row: dt.DType, enc: str | None) -> str:
    shape = "x".join(["?"] * rank)
    t = f"{shape}x{row.storage}" if rank else row.storage
    return f"tensor<{t}, {enc}>" if enc else f"tensor<{t}>"


def emit_kernel(stmt: Statement, formats: dict[str, Format], dtypes: dict[str, str],
                name: str = "kernel", split: bool = False,
                out_format: Format | None = None, via: Format | None = None,
                zeroed_output: bool = False) -> tuple[str, KernelSignature]:
    """MLIR text of the kernel and the signature the runtime calls it with.

    ``formats`` holds a resolved Format (index widths set) per operand; ``dtypes`` a numpy
    dtype name per operand; ``out_format`` the (resolved) format of a sparse result, or
    ``None`` for a dense one.  ``split``: give every operation below the root that reads a
    sparse operand a ``linalg.generic`` (and dense temporary) of its own - the retry when
    the sparsifier fails on the fused form.  ``via``: build the sparse result in this format
    first, then ``sparse_tensor.convert`` it to ``out_format`` (the retry when no loop order
    can insert into ``out_format`` directly, e.g. a CSC sum of CSR operands).
    ``zeroed_output``: the caller passes a dense output that is already zero (``np.zeros``:
    fresh pages the OS zeroes at first touch, inside the possibly parallel loops), so the
    kernel skips its serial ``linalg.fill`` unless the result starts from another identity.
    Ahead-of-time kernels keep the fill: C callers pass any buffer.
    """
    # constant subexpressions are computed here, by NumPy (values exactly NumPy's)
    stmt = Statement(stmt.output, stmt.indices, fold(stmt.expr), stmt.operands)
    node_dtypes = infer_dtypes(stmt, {k: np.dtype(v) for k, v in dtypes.items()})
    out_row = _row(node_dtypes[stmt.expr])
    encs: dict[str, str] = {}
    aliases: list[str] = []
    for k, opname in enumerate(stmt.operands):
        f = formats[opname]
        if not f.is_dense:
            alias = f"#enc{k}"
            aliases.append(f"{alias} = {f.encoding()}")
            encs[opname] = alias
    ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
    index_order = tuple(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))

    types = {opname: _tensor_type(ranks[opname], dt.lookup(dtypes[opname]), encs.get(opname))
             for opname in stmt.operands}
    ssa = {opname: f"%arg{k}" for k, opname in enumerate(stmt.operands)}
    params = [f"%size_{i}: index" for i in index_order]
    params += [f"{ssa[o]}: {types[o]}" for o in stmt.operands]
    fn = _Function(node_dtypes, encs, types, ssa, formats, aliases, dtypes)
    if any(isinstance(n, Index) for n in walk(stmt.expr)):
        # MLIR 22 does not renumber linalg.index when it demaps a permuted operand (CSC):
        # index(j) then reads another loop's index.  Read such operands in dimension order
        # (converted inside the kernel, freed before returning).
        for k, opname in enumerate(stmt.operands):
            f = formats[opname]
            if f.is_dense or f.block is not None or f.order == tuple(range(f.rank)):
                continue
            alias = f"#encd{k}"
            aliases.append(f"{alias} = {Format(f.levels, None, None, f.pos_width, f.crd_width).encoding()}")
            new_type = _tensor_type(ranks[opname], dt.lookup(dtypes[opname]), alias)
            conv = f"%dimorder{k}"
            fn.lines.append(f"{conv} = sparse_tensor.convert {ssa[opname]} : {types[opname]} to {new_type}")
            fn.deallocs.append(f"bufferization.dealloc_tensor {conv} : {new_type}")
            fn.ssa[opname], fn.types[opname] = conv, new_type
            fn.formats[opname] = Format(f.levels, None, None, f.pos_width, f.crd_width)
    fn.split = split
    expr = fn.materialize_inner_reductions(stmt.expr, split)
    red = expr.indices if isinstance(expr, Reduce) else ()
    red_op = expr.op if isinstance(expr, Reduce) else "sum"
    ident = expr.identity if isinstance(expr, Reduce) else None
    body_expr = expr.body if isinstance(expr, Reduce) else expr
    sparse_out = out_format is not None and not out_format.is_dense
    if sparse_out:
        aliases.append(f"#encout = {out_format.encoding()}")
        out_type = _tensor_type(len(stmt.indices), out_row, "#encout")
        sizes = ", ".join(f"%size_{i}" for i in stmt.indices)
        build_type = out_type
        if via is not None:
            aliases.append(f"#encvia = {via.encoding()}")
            build_type = _tensor_type(len(stmt.indices), out_row, "#encvia")
        tail = []
        if not any(a.tensor in fn.encs for a in accesses(body_expr)):
            # every input of the last loop nest is dense (temporaries): the sparsifier cannot
            # insert from dense loops, so compute densely and convert (which stores nonzeros)
            dense_type = _tensor_type(len(stmt.indices), out_row, None)
            fn.alloc("%dense_out_m", "%dense_out", stmt.indices, out_row)
            res = fn.generic("%dense_out", dense_type, stmt.indices, red, body_expr, fn.node_dtypes[expr],
                             red_op=red_op, identity=ident)
            fn.lines.append(f"%converted = sparse_tensor.convert {res} : {dense_type} to {out_type}")
            res = "%converted"
        else:
            fn.lines.append(f"%out = tensor.empty({sizes}) : {build_type}")
            res = fn.generic("%out", build_type, stmt.indices, red, body_expr, fn.node_dtypes[expr], fill=False,
                             red_op=red_op, identity=ident)
        if via is not None and res != "%converted":
            tail = [f"%converted = sparse_tensor.convert {res} : {build_type} to {out_type}",
                    f"bufferization.dealloc_tensor {res} : {build_type}"]
            res = "%converted"
        result, tail = f" -> {out_type}", [*tail, *fn.deallocs, f"return {res} : {out_type}"]
    else:
        out_type = _tensor_type(len(stmt.indices), out_row, None)
        out_memref = "memref" + out_type[len("tensor"):]
        params.append(f"%out_m: {out_memref}")
        fn.lines.insert(0, f"%out = bufferization.to_tensor %out_m restrict writable : {out_memref} to {out_type}")
        skip_fill = zeroed_output and red_op in ("sum", "plus") and ident in (None, 0)
        res = fn.generic("%out", out_type, stmt.indices, red, body_expr, fn.node_dtypes[expr], red_op=red_op,
                         identity=ident, fill=not skip_fill)
        result = ""
        tail = [f"bufferization.materialize_in_destination {res} in restrict writable %out_m "
                f": ({out_type}, {out_memref}) -> ()", *fn.deallocs, "return"]
    body = "\n".join("    " + l for l in fn.lines + tail)
    text = "\n".join(aliases) + f"""
module {{
  func.func @{name}({', '.join(params)}){result} attributes {{ llvm.emit_c_interface }} {{
{body}
  }}
}}
"""
    sig = KernelSignature(index_order, stmt.operands, len(stmt.indices), out_row.name,
                          out_format if sparse_out else None)
    return text, sig


class _Function:
    def __init__(self, node_dtypes, encs, types, ssa, formats=None, aliases=None, dtypes=None):
        self.node_dtypes = dict(node_dtypes)
        self.encs = encs
        self.formats = dict(formats or {})   # operand -> Format (as read by the loops)
        self.aliases = aliases if aliases is not None else []
        self.dtypes = dtypes or {}
        self.types = dict(types)
        self.ssa = dict(ssa)
        self.lines: list[str] = []
        self.split = False                # the split retry (see emit_kernel)
        self.deallocs: list[str] = []     # dense temporaries, freed before returning
        self.n = 0
        self.hoist_ids = itertools.count()   # hoisted values of every generic's body

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def materialize_inner_reductions(self, e: Expr, split: bool = False) -> Expr:
        """Replace every reduction below the root by a dense temporary, innermost first.

        A sparse operand read with a repeated index (``A[i,i]``) becomes a dense temporary
        too: its diagonal, selected from the stored entries.
        """
        sparse_kernel = any(a.tensor in self.encs for a in accesses(e))

        def visit(node: Expr, root: bool, stored: bool = False) -> Expr:
            if isinstance(node, Access):
                if len(set(node.indices)) != len(node.indices):
                    if node.tensor in self.encs:
                        return self.diagonal(node)
                    if sparse_kernel:
                        # a dense operand's diagonal (a (d0) -> (d0, d0) map) next to a sparse
                        # operand leaves an unbufferized cast in MLIR 22: copy it out first
                        return self.dense_diagonal(node)
                return node
            if isinstance(node, (Const, Index)):
                return node
            if isinstance(node, Unary):
                new = Unary(node.fn, visit(node.arg, False, stored))
            elif isinstance(node, Binary):
                new = Binary(node.op, visit(node.left, False, stored), visit(node.right, False, stored))
            elif isinstance(node, Where):
                kids = [visit(c, False, stored) for c in (node.cond, node.left, node.right)]
                new = Where(*kids)
                if (not any(isinstance(k, Const) for k in kids[1:])
                        and any(a.tensor in self.encs for a in accesses(new))):
                    # a select in a sparse loop takes two tensor values (the condition and one
                    # branch) in sparse_tensor.binary: where(c, a, b) = where(c, a, 0) + where(c, 0, b),
                    # exactly (one side is always 0)
                    zero = Const(0)
                    self.node_dtypes.setdefault(zero, np.dtype(np.int64))
                    l, r = Where(kids[0], kids[1], zero), Where(kids[0], zero, kids[2])
                    self._retype(node, l)
                    self._retype(node, r)
                    new = Binary("+", l, r)
            elif isinstance(node, Stored):
                new = Stored(visit(node.body, root, True))
            elif isinstance(node, Dense):
                body = visit(node.body, root)
                self._retype(node, body)
                if root or not any(a.tensor in self.encs for a in accesses(body)):
                    return body
                return self.temporary(body)
            else:
                new = Reduce(node.op, node.indices, visit(node.body, False, node.op != "sum"), node.identity)
            self._retype(node, new)
            if isinstance(new, Reduce) and not root:
                return self.temporary(new)
            # (not under stored semantics: a dense temporary would turn absent entries into
            # zeros that take part; such a kernel fails to compile rather than give wrong values)
            if split and not root and not stored and not isinstance(new, Stored) \
                    and any(a.tensor in self.encs for a in accesses(new)):
                return self.temporary(new)
            return new
        return visit(e, True)

    def _retype(self, old: Expr, new: Expr):
        self.node_dtypes[new] = self.node_dtypes[old]

    def temporary(self, r: Expr) -> Access:
        if isinstance(r, Access) and r.tensor not in self.encs:
            return r
        if isinstance(r, Access):
            self.node_dtypes.setdefault(r, self.node_dtypes[r])
        free = free_indices(r)
        row = _row(self.node_dtypes[r])
        name = self.fresh("tmp")
        ttype = _tensor_type(len(free), row, None)
        self.alloc(f"{name}_m", f"{name}_e", free, row)
        if isinstance(r, Reduce):
            res = self.generic(f"{name}_e", ttype, free, r.indices, r.body, self.node_dtypes[r], red_op=r.op,
                               identity=r.identity)
        else:
            res = self.generic(f"{name}_e", ttype, free, (), r, self.node_dtypes[r])
        acc = Access(name, free)
        self.ssa[name] = res
        self.types[name] = ttype
        self.node_dtypes[acc] = self.node_dtypes[r]
        return acc

    def diagonal(self, a: Access) -> Access:
        """``D[i] = A[i,i]`` for a sparse ``A``: one pass over the stored entries
        (``sparse_tensor.foreach``) adding those whose repeated coordinates agree into a
        dense temporary.  (The sparsifier admits no ``(i) -> (i, i)`` map on a sparse
        operand, nor a ``select`` on ``linalg.index`` into a dense result.)"""
        uniq = tuple(dict.fromkeys(a.indices))
        first = {i: a.indices.index(i) for i in uniq}
        row = _row(self.node_dtypes[a])
        bt = row.storage
        rank = len(a.indices)
        mtype = "memref<" + "".join("?x" for _ in uniq) + bt + ">"
        ttype = _tensor_type(len(uniq), row, None)
        buf = self.fresh("diag")
        z = self.fresh("zero")
        self.lines.append(f"{z} = {_const_text(0, row)[0]}")
        self.alloc(buf, None, uniq, row)
        self.lines.append(f"linalg.fill ins({z} : {bt}) outs({buf} : {mtype})")
        c = [f"%c{k}" for k in range(rank)]
        conds = []
        body = []
        for k, i in enumerate(a.indices):
            if first[i] != k:
                body.append(f"%eq{k} = arith.cmpi eq, {c[first[i]]}, {c[k]} : index")
                conds.append(f"%eq{k}")
        cond = conds[0]
        for k, other in enumerate(conds[1:]):
            body.append(f"%and{k} = arith.andi {cond}, {other} : i1")
            cond = f"%and{k}"
        at = ", ".join(c[first[i]] for i in uniq)
        add = _ARITH["+"][row.kind]
        body += [f"scf.if {cond} {{",
                 f"  %old = memref.load {buf}[{at}] : {mtype}",
                 f"  %new = {add} %old, %v : {bt}",
                 f"  memref.store %new, {buf}[{at}] : {mtype}", "}"]
        ind = "\n      "
        self.lines.append(
            f"sparse_tensor.foreach in {self.ssa[a.tensor]} : {self.types[a.tensor]} do {{"
            f"{ind}^bb0({', '.join(f'{x}: index' for x in c)}, %v: {bt}):{ind}  " + f"{ind}  ".join(body) +
            "\n    }")
        name = buf[1:]
        res = self.fresh("diagt")
        self.lines.append(f"{res} = bufferization.to_tensor {buf} restrict : {mtype} to {ttype}")
        acc = Access(name, uniq)
        self.ssa[name] = res
        self.types[name] = ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def dense_diagonal(self, a: Access) -> Access:
        """``D[i] = A[i,i]`` for a dense ``A``, a dense temporary (one dense loop nest)."""
        uniq = tuple(dict.fromkeys(a.indices))
        row = _row(self.node_dtypes[a])
        name = self.fresh("ddiag")
        ttype = _tensor_type(len(uniq), row, None)
        self.alloc(f"{name}_m", f"{name}_e", uniq, row)
        res = self.generic(f"{name}_e", ttype, uniq, (), a, self.node_dtypes[a], fill=False)
        acc = Access(name, uniq)
        self.ssa[name], self.types[name] = res, ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def _level_indices(self, a: Access):
        """The indices of sparse access ``a`` in storage (loop) order, or None when the
        access is not a plain permutation (blocks, diagonals)."""
        f = self.formats.get(a.tensor)
        if f is None or f.block is not None or len(set(a.indices)) != len(a.indices):
            return None
        return [a.indices[d] for d in f.order]

    def reductions_inside(self, ins, out_idx, red_idx) -> dict:
        """Make every reduced loop of a custom reduction run inside the output's loops.

        MLIR 22 starts a custom reduction (``sparse_tensor.reduce``) from its identity at
        each entry of the loop that encloses it, instead of from what an outer reduced loop
        accumulated: with reduced loops both outside and inside a kept one (a 3-d COO
        reduced over axes 0 and 2; ``ij,ik->i`` with the first operand CSC) only the last
        outer iteration's terms survived.  So when some reduced index is forced outside (it
        comes before a kept one in a sparse operand's levels) while another may run inside,
        every operand that forces one is converted, inside the kernel, to an order with its
        kept levels first (dense operands: read from a transposed dense copy; returned as
        {access: replacement}).  Reductions that all run outside (``ji,j->i`` over CSR, one
        Bellman-Ford step) are left as they are."""
        forcing = []
        outer = set()
        for a in ins:
            f = self.formats.get(a.tensor)
            if a.tensor in self.encs and f.block is not None and any(i in out_idx for i in a.indices) \
                    and any(i not in out_idx for i in a.indices):
                # a block format's block levels come before its in-block ones: a reduced index's
                # block loop then encloses a kept index's offset loop, and the reduction restarts
                # in every block (BSR max over rows saw only the last block).  Read it unblocked.
                self.unblock(a)
                continue

            # a dense operand's dimensions also order the loops the sparsifier picks
            seq = self._level_indices(a) if a.tensor in self.encs else list(a.indices)
            if seq is None or len(set(seq)) != len(seq):
                continue
            kept = [k for k, i in enumerate(seq) if i in out_idx]
            early = {i for k, i in enumerate(seq) if i not in out_idx and kept and k < kept[-1]}
            if early:
                forcing.append(a)
                outer |= early
        if not outer or not (set(red_idx) - outer):
            return {}
        swaps = {}
        for a in forcing:
            if a.tensor in self.encs:
                self.kept_outer(a, out_idx)
            else:
                swaps[a] = self.kept_first_copy(a, out_idx)
        return swaps

    def broadcasts(self, e: Expr, dims) -> dict:
        """Dense operands to read broadcast over the loops of a sparse operand they meet in a
        union (``A[i,j] + y[i]`` over CSR, ``- max min <``...; CSC with ``y[j]``; COO with
        either): MLIR 22's sparsifier crashes (SIGSEGV) on a union of a sparse level with a
        dense value invariant in that level's loop.  Such a dense access becomes a dense
        temporary over the sparse side's indices too (``Y[i,j] = y[i]``), which the union
        then co-iterates like any dense matrix.  Returned as {access: replacement}."""
        swaps = {}

        def visit(node, stored):
            if isinstance(node, Stored):
                return visit(node.body, True)
            if isinstance(node, Reduce):
                return visit(node.body, stored or node.op != "sum")
            if isinstance(node, Binary) and not stored:
                nonzero, left_kills, right_kills = zero_behaviour(node.op)
                for side, other, kills in ((node.left, node.right, left_kills),
                                           (node.right, node.left, right_kills)):
                    sparse_idx = {i for a in accesses(side) if a.tensor in self.encs for i in a.indices}
                    if not sparse_idx or (kills and not nonzero) or (node.op == "/" and side is node.left):
                        continue      # an intersection, or x / y (the sparsifier keeps x's pattern)
                    if any(a.tensor in self.encs for a in accesses(other)):
                        continue      # the other side's presence follows its own sparse operand
                    dense_other = [a for a in accesses(other) if a.tensor not in self.encs and a.indices]
                    for a in accesses(side) if dense_other else ():
                        if a.tensor in self.encs and self.formats[a.tensor].block is not None:
                            self.unblock(a)     # a block format in a union with a dense operand crashes too
                    for a in dense_other:
                        if not sparse_idx <= set(a.indices) and a not in swaps:
                            want = set(a.indices) | sparse_idx
                            swaps[a] = self.broadcast_copy(a, tuple(i for i in dims if i in want))
            for c in children(node):
                visit(c, stored)
        visit(e, False)
        return swaps

    def broadcast_copy(self, a: Access, idx) -> Access:
        """A dense temporary ``T[idx] = a`` (``idx`` includes ``a``'s indices)."""
        row = _row(self.node_dtypes[a])
        name = self.fresh("bc")
        ttype = _tensor_type(len(idx), row, None)
        self.alloc(f"{name}_m", f"{name}_e", idx, row)
        res = self.generic(f"{name}_e", ttype, idx, (), a, self.node_dtypes[a], fill=False)
        acc = Access(name, idx)
        self.ssa[name], self.types[name] = res, ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def unblock(self, a: Access) -> None:
        """Read block-sparse operand ``a`` without blocks (BSR as CSR) from here on."""
        f = self.formats[a.tensor]
        if f.block is not None:
            self.convert(a, Format(tuple("compressed" if f.level_base(l) != "dense" else "dense"
                                         for l in range(f.rank)), f.order, None, f.pos_width, f.crd_width))

    def kept_first_copy(self, a: Access, out_idx) -> Access:
        """A dense temporary holding dense operand access ``a`` with its kept indices first
        (a transposing copy), for :meth:`reductions_inside`."""
        order = tuple(i for i in a.indices if i in out_idx) + tuple(i for i in a.indices if i not in out_idx)
        row = _row(self.node_dtypes[a])
        name = self.fresh("kf")
        ttype = _tensor_type(len(order), row, None)
        self.alloc(f"{name}_m", f"{name}_e", order, row)
        res = self.generic(f"{name}_e", ttype, order, (), a, self.node_dtypes[a])
        acc = Access(name, order)
        self.ssa[name], self.types[name] = res, ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def no_dense_reduced_levels(self, ins, red_idx) -> None:
        """A monoid reduction into a sparse result must not loop over a reduced index
        through a *dense* level of a sparse operand (CSR's rows) unless a compressed level
        of another operand drives that loop: MLIR 22 counts every iteration of such a loop
        as a contribution, and the result then stores the identity where nothing was stored
        (``j,ik->j`` with an empty CSR ``B``: +inf for ``min_plus``).  Such operands are
        converted inside the kernel to the same layout with compressed levels (CSR -> DCSR)."""
        driven = set()
        for a, seq in ((a, self._level_indices(a)) for a in ins if a.tensor in self.encs):
            f = self.formats.get(a.tensor)
            if seq is None:
                continue
            driven |= {i for l, i in enumerate(seq) if f.level_base(l) != "dense"}
        for a in ins:
            seq = self._level_indices(a) if a.tensor in self.encs else None
            if seq is None:
                continue
            f = self.formats[a.tensor]
            if any(f.level_base(l) == "dense" and i in red_idx and i not in driven for l, i in enumerate(seq)):
                levels = tuple("compressed" if f.level_base(l) == "dense" else lv for l, lv in enumerate(f.levels))
                self.convert(a, Format(levels, f.order, None, f.pos_width, f.crd_width))

    def convert(self, a: Access, new: Format) -> None:
        """Read sparse operand ``a`` as ``new`` from here on (``sparse_tensor.convert``
        inside the kernel; the copy is freed before returning)."""
        alias = f"#encr{self.n + 1}"
        self.aliases.append(f"{alias} = {new.encoding()}")
        new_type = _tensor_type(len(a.indices), dt.lookup(self.dtypes[a.tensor]), alias)
        conv = self.fresh("converted")
        self.lines.append(f"{conv} = sparse_tensor.convert {self.ssa[a.tensor]} : {self.types[a.tensor]} to {new_type}")
        self.deallocs.append(f"bufferization.dealloc_tensor {conv} : {new_type}")
        self.ssa[a.tensor], self.types[a.tensor], self.formats[a.tensor] = conv, new_type, new

    def kept_outer(self, a: Access, out_idx) -> None:
        """Convert sparse operand ``a`` (inside the kernel) to a storage order with the
        output's (kept) indices' levels first, keeping the rest in their order."""
        f = self.formats[a.tensor]
        order = tuple(d for d in f.order if a.indices[d] in out_idx) + \
            tuple(d for d in f.order if a.indices[d] not in out_idx)
        if order != f.order:
            self.convert(a, Format(f.levels, order, None, f.pos_width, f.crd_width))

    def alloc(self, buf: str, tensor: str | None, idx, row: dt.DType) -> None:
        """A dense temporary: ``memref.alloc`` (freed before returning), and as a tensor."""
        mtype = "memref<" + "".join("?x" for _ in idx) + row.storage + ">"
        sizes = ", ".join(f"%size_{i}" for i in idx)
        self.lines.append(f"{buf} = memref.alloc({sizes}) : {mtype}")
        self.deallocs.append(f"memref.dealloc {buf} : {mtype}")
        if tensor:
            self.lines.append(f"{tensor} = bufferization.to_tensor {buf} restrict writable : {mtype} "
                              f"to {_tensor_type(len(idx), row, None)}")

    def generic(self, init: str, init_type: str, out_idx, red_idx, body_expr: Expr, out_np,
                fill: bool = True, red_op: str = "sum", identity=None) -> str:
        """One ``linalg.generic`` computing ``body_expr`` (reduced over ``red_idx`` by
        ``red_op``) into ``init`` (filled with the reduction's identity first unless ``fill``
        is False: a sparse output starts empty).  A monoid reduction (any ``red_op`` but
        ``sum``) reads its body in stored mode and combines with ``sparse_tensor.reduce`` in a
        loop over a sparse operand, so only stored entries take part."""
        row = _row(out_np)
        dims = list(out_idx) + [i for i in red_idx if i not in out_idx]
        d = {i: f"d{k}" for k, i in enumerate(dims)}
        domain = f"({', '.join(d[i] for i in dims)})"
        filled = init
        if fill:
            zero_text, zt = _const_text(identity_of(red_op, row, identity) if red_idx or red_op != "sum" else 0, row)
            z = self.fresh("zero")
            self.lines.append(f"{z} = {zero_text}")
            filled = self.fresh("init")
            self.lines.append(f"{filled} = linalg.fill ins({z} : {zt}) outs({init} : {init_type}) -> {init_type}")
        ins = list(dict.fromkeys(a for a in accesses(body_expr)))
        sparse_loop = any(a.tensor in self.encs for a in ins)
        if sparse_loop:
            swaps = self.broadcasts(body_expr, dims)
            if swaps:
                body_expr = _replace_accesses(body_expr, swaps, self.node_dtypes)
                ins = list(dict.fromkeys(a for a in accesses(body_expr)))
        if self.split and (red_op != "sum" and red_idx or isinstance(body_expr, Stored)):
            # the retry for stored semantics (which split temporaries would break): read every
            # sparse operand in the loop order out_idx, red_idx, where no order conflicts
            for a in ins:
                seq = self._level_indices(a) if a.tensor in self.encs else None
                if seq is not None:
                    f = self.formats[a.tensor]
                    order = tuple(sorted(f.order, key=lambda dd: dims.index(a.indices[dd])))
                    if order != f.order:
                        self.convert(a, Format(f.levels, order, None, f.pos_width, f.crd_width))
        if red_idx and red_op != "sum":
            swaps = self.reductions_inside(ins, out_idx, red_idx)
            if swaps:
                body_expr = _replace_accesses(body_expr, swaps, self.node_dtypes)
                ins = list(dict.fromkeys(a for a in accesses(body_expr)))
            if not fill:                      # a sparse result (it starts empty)
                self.no_dense_reduced_levels(ins, red_idx)
        invariants = {}
        if sparse_loop:
            # 0-d dense operands are read once, before the loops: the sparsifier treats such
            # a value as a loop invariant (x / s keeps x's pattern), while a 0-d tensor input
            # of the generic trips it up (and crashed MLIR 22 for x + s)
            for a in [a for a in ins if not a.indices and a.tensor not in self.encs]:
                v = self.fresh("scalar")
                self.lines.append(f"{v} = tensor.extract {self.ssa[a.tensor]}[] : {self.types[a.tensor]}")
                invariants[a] = v
            ins = [a for a in ins if a not in invariants]
        maps, in_vals, in_types = [], [], []
        for a in ins:
            maps.append(f"affine_map<{domain} -> ({', '.join(d[i] for i in a.indices)})>")
            in_vals.append(self.ssa[a.tensor])
            in_types.append(self.types[a.tensor])
        maps.append(f"affine_map<{domain} -> ({', '.join(d[i] for i in out_idx)})>")
        iters = ", ".join('"parallel"' if i in out_idx else '"reduction"' for i in dims)
        body = _Body(self.node_dtypes, sparse_loop, frozenset(a.tensor for a in ins if a.tensor in self.encs),
                     {i: k for k, i in enumerate(dims)}, ids=self.hoist_ids)
        body.stored = red_op != "sum" and bool(red_idx)
        bargs = []
        body.args.update(invariants)
        body.invariants = frozenset(invariants)
        for k, a in enumerate(ins):
            arow = _row(self.node_dtypes[a])
            body.args[a] = f"%in{k}"
            bargs.append(f"%in{k}: {_body_type(arow)}")
        bargs.append(f"%acc: {_body_type(row)}")
        v = body.value(body_expr, row)
        bt = _body_type(row)
        if red_idx and (red_op == "sum" or (red_op == "plus" and not sparse_loop)):
            op = _ARITH["+"][row.kind]
            v = body.emit(f"{op} %acc, {v} : {bt}")
        elif red_idx or (red_op != "sum" and fill):
            # a monoid over stored entries, "plus" included: with a plain add the sparsifier
            # inserts into a sparse result after every reduction loop, reached or not.  Over no
            # index (a semiring einsum without a contracted index) into a dense result, the
            # body still combines with %acc: a body that ignores it lets the fill with the
            # identity be dropped (every output entry counts as overwritten), leaving 0 where
            # no stored pair met
            combine = _MONOID_OP.get(red_op, "+")
            if sparse_loop:
                ident = body.hoist_constant(identity_of(red_op, row, identity), row)
                region = body.region([bt, bt], lambda p, q: body.apply(combine, p, q, row, row), bt)
                rv = body.fresh()
                ind = "\n        "
                body.lines.append(f"{rv} = sparse_tensor.reduce {v}, %acc, {ident} : {bt} {{{ind}  "
                                  + f"{ind}  ".join(region) + f"{ind}}}")
                v = rv
            else:
                v = body.apply(combine, "%acc", v, row, row)
        self.lines.extend(body.hoisted)
        res = self.fresh("res")
        ind = "\n      "
        ins_text = f"ins({', '.join(in_vals)} : {', '.join(in_types)}) " if ins else ""
        self.lines.append(
            f"{res} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}]}}"
            f"{ind}{ins_text}outs({filled} : {init_type}) {{"
            f"{ind}^bb0({', '.join(bargs)}):{ind}  " + f"{ind}  ".join(body.lines + [f"linalg.yield {v} : {_body_type(row)}"])
            + f"{ind}}} -> {init_type}")
        return res
