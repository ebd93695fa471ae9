"""Constants, identities and casts as MLIR text: literal printing (exact for every float, NaN
payloads included), a reduction's identity per dtype, the body/storage type of a dtype (``bool`` is
``i8``), and the conversions between dtypes inside a ``linalg.generic`` body."""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError

BOOL = dt.TABLE["bool"]


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


def row_of(np_dtype) -> dt.DType:
    return dt.lookup(np_dtype, "an intermediate value")


def const_text(value, row: dt.DType) -> tuple[str, str]:
    """(op text, type) of a constant of dtype ``row`` (bools are i8 in storage and bodies)."""
    if row.kind == "bool":
        return f"arith.constant {int(bool(value))} : i8", "i8"
    if row.kind == "int":
        return f"arith.constant {int(value.real if isinstance(value, complex) else value)} : {row.mlir}", row.mlir
    if row.kind == "float":
        v = float(value.real if isinstance(value, complex) else value)
        return f"arith.constant {float_lit(v, row.mlir)} : {row.mlir}", row.mlir
    c = complex(value)
    part = row.mlir[8:-1]
    return (f"complex.constant [{float_lit(c.real, part)} : {part}, {float_lit(c.imag, part)} : {part}] "
            f": {row.mlir}", row.mlir)


def float_lit(v, ty: str = "f64") -> str:
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


def body_type(row: dt.DType) -> str:
    return "i8" if row.kind == "bool" else row.mlir


class Casts:
    """Conversions between dtypes, for a body that emits SSA lines (``self.emit``)."""

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
        st, dty = body_type(src), body_type(dst)
        if d == "float":
            if s == "float":
                op = "arith.extf" if dst.mlir == "f64" else "arith.truncf"
                return self.emit(f"{op} {v} : {st} to {dty}")
            op = "arith.uitofp" if s == "bool" else "arith.sitofp"
            return self.emit(f"{op} {v} : {st} to {dty}")
        if d == "int":
            if s == "float":      # astype: NumPy truncates toward zero
                return self.emit(f"arith.fptosi {v} : {st} to {dty}")
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
            t = body_type(src)
            z = self.emit(f"arith.constant 0 : {t}")
            b = self.emit(f"arith.cmpi ne, {v}, {z} : {t}")
        return self.emit(f"arith.extui {b} : i1 to i8")
