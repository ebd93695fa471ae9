"""Ahead-of-time libraries: kernels compiled once into ``lib<name>.so`` + ``<name>.h`` +
``<name>.json``, and a loader that runs them with only NumPy and SciPy.

Each kernel becomes one object (its packed MLIR entry ``<name>_<kernel>_entry``, every other
symbol internal) plus a C wrapper, generated here, that takes plain pointers and sizes,
builds the memref descriptors and the storage specifier, and calls the entry.  The JSON
manifest records each kernel's expression, formats, dtypes and result format; ``load`` parses
the expression again (no MLIR involved) and calls the entries through the same operand
validation and result wrapping as JIT kernels.
"""

from .builder import build
from .library import Library, load
from .manifest import MANIFEST_VERSION, spec_digest, statement_from_json, statement_to_json

__all__ = ["build", "load", "Library", "MANIFEST_VERSION", "spec_digest", "statement_to_json",
           "statement_from_json"]
