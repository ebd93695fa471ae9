"""The expression-to-region lowering: SSA lines of one ``linalg.generic`` body for an expression
(values, binary and unary ops, ``where``, ``index``), and the ``sparse_tensor.binary/unary``
regions that say what an unstored entry means where the sparsifier's own union/intersection
rules do not give NumPy's (or a monoid's stored-only) semantics.

Math functions inside a loop over a sparse operand are ``sparse_tensor.unary`` ops, whose
``absent`` region gives ``f(0)`` where ``f(0) != 0`` (so ``exp`` of an unstored entry is 1).
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError
from ..expr import UNARY as UNARY_NP   # numpy's meaning of each function, for f(0)
from ..expr import BINARY as BINARY_NP
from ..expr import (COMPARISONS, Access, Binary, Const, Expr, Index, Stored, Unary, Where, accesses, fold,
                    used_indices, walk)
from ..patterns import zero_behaviour
from .constants import BOOL, Casts, body_type, const_text, row_of

_FLOAT_FN = {"abs": "math.absf", "sqrt": "math.sqrt", "exp": "math.exp", "log": "math.log",
             "sin": "math.sin", "cos": "math.cos", "tan": "math.tan", "tanh": "math.tanh",
             "sinh": "math.sinh", "asin": "math.asin", "atan": "math.atan", "expm1": "math.expm1",
             "log1p": "math.log1p", "ceil": "math.ceil", "floor": "math.floor"}
_COMPLEX_FN = {"abs": "complex.abs", "sqrt": "complex.sqrt", "exp": "complex.exp", "log": "complex.log",
               "sin": "complex.sin", "cos": "complex.cos", "tan": "complex.tan", "tanh": "complex.tanh",
               "expm1": "complex.expm1", "log1p": "complex.log1p", "conj": "complex.conj"}
ARITH = {  # op -> kind -> MLIR op
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
MONOID_OP = {"times": "*", "min": "min", "max": "max", "lor": "or", "land": "and", "lxor": "xor"}


class Body(Casts):
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
        text = const_text(value, row)[0]
        if text.startswith("arith."):
            return self.emit(text)
        c = f"%absent{next(self.ids)}"
        self.hoisted.append(f"{c} = {text}")
        return c

    def hoist_constant(self, value, row: dt.DType) -> str:
        c = f"%hoisted{next(self.ids)}"
        self.hoisted.append(f"{c} = {const_text(value, row)[0]}")
        return c

    def fresh(self) -> str:
        self.n += 1
        return f"%{self.prefix}{self.n}"

    def emit(self, text: str) -> str:
        v = self.fresh()
        self.lines.append(f"{v} = {text}")
        return v

    # ------------------------------------------------------------ expressions
    def value(self, e: Expr, want: dt.DType | None = None) -> str:
        row = row_of(self.node_dtypes[e])
        if isinstance(e, Const):
            target = want or row
            text, _ = const_text(e.value, target)
            return self.emit(text)
        if isinstance(e, Access):
            v = self.args[e]
        elif isinstance(e, Index):
            # only in the one-loop dense generic that fills an index's iota (see
            # Workarounds.index_operands): in a loop nest the sparsifier reorders, MLIR 22
            # would not renumber the linalg.index
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
        if self.sparse_loop and (self.stored or isinstance(e, Stored) or
                                 want.kind == "complex" and row.kind != "complex") and self.sparse_in(e):
            # over stored entries only: the conversion in a unary region with an empty absent
            # one (a plain arith.cmpf for x != 0 makes the sparsifier visit every entry, and
            # the unstored ones then take part as False).  A real value made complex, too: the
            # sparsifier does not know complex.create and left the whole loop nest unlowered
            # (abs(A + B), A complex, B real CSC)
            t = body_type(row)
            return self.sparse_op(f"sparse_tensor.unary {v} : {t} to {body_type(want)}",
                                  [("present", self.region([t], lambda p: self.cast(p, row, want),
                                                           body_type(want))), ("absent", None)])
        return self.cast(v, row, want)

    def operand_rows(self, e: Binary, row: dt.DType) -> tuple[dt.DType | None, dt.DType | None]:
        """The dtypes ``e``'s two sides are computed in (None: their own)."""
        if e.op in _LOGIC:
            return BOOL, BOOL
        if e.op in ("pair", "first", "second"):
            return None, None
        if e.op in COMPARISONS:   # numpy compares in the promoted dtype; constants are weak
            sides = [c.value if isinstance(c, Const) else self.node_dtypes[c] for c in (e.left, e.right)]
            common = row_of(np.result_type(*sides)) if not all(isinstance(c, Const) for c in (e.left, e.right)) \
                else row_of(np.result_type(*[self.node_dtypes[c] for c in (e.left, e.right)]))
            return common, common
        return row, row          # arithmetic: numpy computes in the result dtype

    def apply(self, op: str, a: str, b: str, in_row: dt.DType | None, row: dt.DType,
              rows: tuple[dt.DType, dt.DType] | None = None) -> str:
        """``a op b`` on plain values (also inside regions)."""
        k = (in_row or row).kind
        bt = body_type(in_row or row)
        if op in ARITH:
            ops = ARITH[op]
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
                return self.complex_pow(a, b, in_row or row)
            raise DTypeError(f"pow of {row.name} values is not supported")
        if op in COMPARISONS:
            if k == "complex":
                if op not in ("==", "!="):
                    c = self.complex_order(op, a, b, bt)
                else:
                    c = self.emit(f"complex.{'eq' if op == '==' else 'neq'} {a}, {b} : {bt}")
            elif k == "float":
                c = self.emit(f"arith.cmpf {_CMP[k][op]}, {a}, {b} : {bt}")
            else:
                c = self.emit(f"arith.cmpi {_CMP[k][op]}, {a}, {b} : {bt}")
            return self.emit(f"arith.extui {c} : i1 to i8")
        if op in _LOGIC:
            return self.emit(f"{_LOGIC[op]} {a}, {b} : i8")
        if op == "pair":
            return self.emit(const_text(1, row)[0])
        src = rows[0] if op == "first" else rows[1]
        return self.cast(a if op == "first" else b, src, row)

    def complex_pow(self, a: str, b: str, row: dt.DType) -> str:
        """NumPy's complex ``a ** b`` (npymath's ``cpow``): 1 where ``b == 0`` (whatever
        ``a``); where ``a == 0``: 0 if ``Re(b) > 0``, else NaN; elsewhere ``complex.pow``
        (``exp(b * log(a))``, which gives NaN at ``a == 0``: ``log(0)`` is ``-inf``)."""
        e = self.emit
        t, part = row.mlir, row.mlir[8:-1]
        p = e(f"complex.pow {a}, {b} : {t}")
        fz = e(f"arith.constant 0.0 : {part}")
        ar, ai = e(f"complex.re {a} : {t}"), e(f"complex.im {a} : {t}")
        br, bi = e(f"complex.re {b} : {t}"), e(f"complex.im {b} : {t}")

        def both_zero(x, y):
            return e(f"arith.andi {e(f'arith.cmpf oeq, {x}, {fz} : {part}')}, "
                     f"{e(f'arith.cmpf oeq, {y}, {fz} : {part}')} : i1")

        a0, b0 = both_zero(ar, ai), both_zero(br, bi)
        pos = e(f"arith.cmpf ogt, {br}, {fz} : {part}")
        zero, one, nan = (e(const_text(v, row)[0]) for v in (0, 1, complex(np.nan, np.nan)))
        at0 = e(f"arith.select {pos}, {zero}, {nan} : {t}")
        r = e(f"arith.select {a0}, {at0}, {p} : {t}")
        return e(f"arith.select {b0}, {one}, {r} : {t}")

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

    def complex_order(self, op: str, a: str, b: str, bt: str) -> str:
        """NumPy's order of complex values: lexicographic, real parts first (a real operand
        stored as complex beside complex values compares as the real it was)."""
        ft = bt[len("complex<"):-1]
        ra, rb = self.emit(f"complex.re {a} : {bt}"), self.emit(f"complex.re {b} : {bt}")
        ia, ib = self.emit(f"complex.im {a} : {bt}"), self.emit(f"complex.im {b} : {bt}")
        strict = {"<": "olt", "<=": "olt", ">": "ogt", ">=": "ogt"}[op]
        real = self.emit(f"arith.cmpf {strict}, {ra}, {rb} : {ft}")
        tie = self.emit(f"arith.cmpf oeq, {ra}, {rb} : {ft}")
        imag = self.emit(f"arith.cmpf {_CMP['float'][op]}, {ia}, {ib} : {ft}")
        return self.emit(f"arith.ori {real}, {self.emit(f'arith.andi {tie}, {imag} : i1')} : i1")

    def binary(self, e: Binary, row: dt.DType) -> str:
        lrow, rrow = self.operand_rows(e, row)
        lr = lrow or row_of(self.node_dtypes[e.left])
        rr = rrow or row_of(self.node_dtypes[e.right])
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
        out_t = body_type(row)
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
                z = self.emit(const_text(0, srow)[0])
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
            return self.sparse_op(f"sparse_tensor.unary {x} : {body_type(srow)} to {out_t}",
                                  [("present", self.region([body_type(srow)], present, out_t)),
                                   ("absent", absent)])
        a, b = self.value(e.left, lrow), self.value(e.right, rrow)
        ta, tb = body_type(lr), body_type(rr)
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
                        e.op, p, self.emit(const_text(0, rr)[0]), in_row, row, rows), out_t)
                if not left_kills:
                    right = self.region([tb], lambda q: self.apply(
                        e.op, self.emit(const_text(0, lr)[0]), q, in_row, row, rows), out_t)
        return self.sparse_op(f"sparse_tensor.binary {a}, {b} : {ta}, {tb} to {out_t}",
                              [("overlap", overlap), ("left", left), ("right", right)])

    def _densified(self, x: str, row: dt.DType) -> str:
        t = body_type(row)
        zero = self.absent_constant(0, row)
        return self.sparse_op(f"sparse_tensor.unary {x} : {t} to {t}",
                              [("present", self.region([t], lambda p: p, t)),
                               ("absent", [f"sparse_tensor.yield {zero} : {t}"])])

    def select(self, c: str, a: str, b: str, row: dt.DType) -> str:
        c1 = self.emit(f"arith.trunci {c} : i8 to i1")
        return self.emit(f"arith.select {c1}, {a}, {b} : {body_type(row)}")

    def where(self, e: Where, row: dt.DType) -> str:
        if not self.sparse_loop:
            c = self.value(e.cond, BOOL)
            return self.select(c, self.value(e.left, row), self.value(e.right, row), row)
        # In a sparse loop one branch is a constant (see materialize_inner_reductions): the
        # select runs in the regions of a sparse_tensor.binary over the condition and the
        # other branch, which say what an absent side means.
        # which branch is the tensor one; the other is a constant or loop-invariant (a scalar
        # operand: its value unknown here, so taken as nonzero)
        k = 1 if not used_indices(e.right) else 0
        tensor_branch, const_branch = (e.left, e.right) if k == 1 else (e.right, e.left)
        if used_indices(const_branch):
            raise DTypeError(f"where over sparse operands needs a constant branch: {e}")
        bt = body_type(row)
        kval = const_branch.value if isinstance(const_branch, Const) else None

        def sel(p, q):
            kc = self.value(const_branch, row)
            return self.select(p, q, kc, row) if k == 1 else self.select(p, kc, q, row)
        if not self.sparse_in(e.cond):
            return self._where_dense_condition(e.cond, tensor_branch, sel, row, kval)
        c = self._sparse_condition(e.cond)
        v = self.value(tensor_branch, row)
        if not used_indices(tensor_branch):
            # both branches loop-invariant (where(C, y, 0) of a scalar operand y): a
            # sparse_tensor.binary of a sparse value and an invariant one crashes the sparsifier
            # (a segfault); a unary of the condition whose absent side (condition False)
            # yields the false branch
            present = self.region(["i8"], lambda p: sel(p, v), bt)
            false = v if k == 0 else (None if kval == 0 else self.value(const_branch, row))
            absent = None if self.stored or false is None else self.region([], lambda: false, bt)
            return self.sparse_op(f"sparse_tensor.unary {c} : i8 to {bt}",
                                  [("present", present), ("absent", absent)])
        overlap = self.region(["i8", bt], sel, bt)
        left = right = None
        if not self.stored:
            # both absent: the condition is false (an unstored condition is 0) and the tensor
            # branch is 0: where(0, v, K) = K, where(0, K, v) = 0
            both = kval if k == 1 else 0
            if both != 0:
                c = self._densified(c, BOOL) if self.sparse_in(e.cond) else c
                v = self._densified(v, row) if self.sparse_in(tensor_branch) else v
            else:
                # condition stored, branch absent: select(c, 0, K) or select(c, K, 0), which is
                # 0 everywhere for K == 0 (no region: a region yielding only zeros makes the
                # loop visit every coordinate for nothing)
                if kval != 0:
                    left = self.region(["i8"], lambda p: sel(p, self.emit(const_text(0, row)[0])), bt)
                # branch stored, condition absent (false): the false branch
                if k == 0:
                    right = self.region([bt], lambda q: q, bt)
                elif kval != 0:
                    right = self.region([bt], lambda q: self.value(const_branch, row), bt)
        return self.sparse_op(f"sparse_tensor.binary {c}, {v} : i8, {bt} to {bt}",
                              [("overlap", overlap), ("left", left), ("right", right)])

    def _sparse_condition(self, cond: Expr) -> str:
        """A sparse ``where`` condition as i8 over its stored entries.  A condition that is
        not bool is computed in its own dtype and converted in a ``sparse_tensor.unary`` with
        an empty ``absent`` region (an unstored condition is 0: False): the sparsifier admits
        ``arith.cmpf``/``cmpi`` on a sparse value but not ``complex.neq``, and failed to
        legalize the ``sparse_tensor.binary`` over a complex condition's ``!= 0``."""
        crow = row_of(self.node_dtypes[cond])
        if crow.kind == "bool" or self.stored or isinstance(cond, Stored):
            return self.value(cond, BOOL)
        v, t = self.value(cond), body_type(crow)
        return self.sparse_op(f"sparse_tensor.unary {v} : {t} to i8",
                              [("present", self.region([t], lambda p: self.cast(p, crow, BOOL), "i8")),
                               ("absent", None)])

    def _where_dense_condition(self, cond: Expr, tensor_branch: Expr, sel, row: dt.DType, kval) -> str:
        """``where`` whose condition reads dense operands only: ``sparse_tensor.unary`` of the
        tensor branch, the condition computed inside its ``present`` region from the
        generic's block arguments (which the sparsifier turns into loads of the dense
        operands there; an ``absent`` region may not compute anything), where ``c`` picks the
        branch's value or the constant.  ``absent`` is empty: for a zero constant (or under
        stored semantics) the result keeps the branch's pattern; for another constant every
        entry gets a value, and the branch is read densely first (an absent entry is a 0).

        MLIR 22 miscompiles the ``sparse_tensor.binary`` of such a condition (a
        ``sparse_tensor.unary`` of a dense operand) with a sparse branch when the condition is
        invariant in the inner loop (``x[j]`` next to CSC operands, ``y[i]`` next to CSR ones,
        i.e. the operands' level order is not the order of the condition's dimensions): the
        loop co-iterating the two halves of ``where(c, a, b)`` stored the tail of one
        operand's entries and then a 0 over each (entries lost or, in a sparse result,
        duplicated coordinates); ``where(c, a, b)`` without arithmetic on a branch, and
        ``where(x[j] > 0.5, 3.0, B[i,j])`` over CSC, crashed the sparsifier."""
        bt = body_type(row)
        v = self.value(tensor_branch, row)

        def condition():
            outer, self.sparse_loop = self.sparse_loop, False   # plain arith on dense values
            try:
                return self.value(cond, BOOL)
            finally:
                self.sparse_loop = outer
        if kval != 0 and not self.stored and self.sparse_in(tensor_branch):
            # every entry gets a value: the branch read densely (an absent entry is a 0; an
            # absent region may not compute the condition)
            v = self._densified(v, row)
        present = self.region([bt], lambda q: sel(condition(), q), bt)
        return self.sparse_op(f"sparse_tensor.unary {v} : {bt} to {bt}",
                              [("present", present), ("absent", None)])

    def unary(self, e: Unary, row: dt.DType) -> str:
        arg_row = row_of(self.node_dtypes[e.arg])
        # abs of a complex value is real; every other function computes in its result dtype
        in_row = arg_row if e.fn == "abs" and arg_row.kind == "complex" else row
        x = self.value(e.arg, in_row)
        if e.fn == "abs" and row.kind == "bool" or e.fn == "conj" and row.kind != "complex" or \
                e.fn.startswith("astype_"):
            return x        # a conversion: value() converted the argument to the result's dtype
        tin, tout = body_type(in_row), body_type(row)

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
            text = const_text(f0.item(), row)[0]
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
