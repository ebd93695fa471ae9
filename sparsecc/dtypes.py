"""The one dtype table: numpy dtype <-> MLIR element type <-> ctypes.

``bool`` is stored as ``i8`` in every buffer (numpy stores bools as bytes, and the MLIR
wheels abort on stores into ``i1`` memrefs); kernels compute on ``i1`` inside loop bodies.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from .errors import DTypeError


@dataclass(frozen=True, slots=True)
class DType:
    name: str          # numpy name
    mlir: str          # element type inside loop bodies
    storage: str       # element type of buffers (memrefs / tensors)
    kind: str          # "bool" | "int" | "float" | "complex"
    ctype: type        # ctypes scalar of one element (complex: of one component)

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.name)


TABLE: dict[str, DType] = {
    d.name: d
    for d in (
        DType("bool", "i1", "i8", "bool", ctypes.c_uint8),
        DType("int32", "i32", "i32", "int", ctypes.c_int32),
        DType("int64", "i64", "i64", "int", ctypes.c_int64),
        DType("float32", "f32", "f32", "float", ctypes.c_float),
        DType("float64", "f64", "f64", "float", ctypes.c_double),
        DType("complex64", "complex<f32>", "complex<f32>", "complex", ctypes.c_float),
        DType("complex128", "complex<f64>", "complex<f64>", "complex", ctypes.c_double),
    )
}

SUPPORTED = tuple(TABLE)


_BY_DTYPE = {np.dtype(name): row for name, row in TABLE.items()}


def lookup(dtype, what: str = "operand") -> DType:
    """The table row for a numpy dtype (or anything ``np.dtype`` accepts)."""
    row = _BY_DTYPE.get(dtype) if isinstance(dtype, np.dtype) else None
    if row is not None:
        return row
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise DTypeError(f"{what} has dtype {dtype!r}, which is not a numpy dtype") from None
    try:
        return TABLE[name]
    except KeyError:
        hint = f" ({name} is refused on purpose: convert it, x.astype(np.int32); docs/dsl.md, " \
               f"Known limitations)" if name in NARROW_INTEGERS else ""
        raise DTypeError(
            f"{what} has dtype {name}; sparsecc supports {', '.join(SUPPORTED)}{hint}"
        ) from None


#: integer dtypes refused on purpose (docs/dsl.md, Known limitations): i8 is the storage of
#: bool here, and NumPy's promotion of 8/16-bit and unsigned integers (uint8 + int8 ->
#: int16, uint64 + int64 -> float64, wrapping in the narrow type) has no row in the table;
#: every op (sc.ops, sparsecc.torch) refuses them alike, at the call
NARROW_INTEGERS = ("int8", "uint8", "int16", "uint16", "uint32", "uint64")
