"""Everything that changes generated code, in one frozen object with a stable key.

The thread count is not here: it is a run-time setting (``sc.set_num_threads``) that does
not change the compiled code, so it does not split the cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import SparseccError

#: MLIR's ``parallelization-strategy`` values, plus "auto" (sparsecc picks per kernel)
PARALLEL = ("auto", "none", "dense-outer-loop", "any-storage-outer-loop", "dense-any-loop",
            "any-storage-any-loop")
#: MLIR's ``loop-ordering-strategy`` of ``sparse-reinterpret-map``
LOOP_ORDERS = ("default", "dense-outer")


@dataclass(frozen=True, slots=True)
class Options:
    """``opt_level``: LLVM optimization level (0-3).  ``cpu``: target CPU name for LLVM
    (``None``: this machine's CPU and features).  ``parallel``: how loops are spread over
    threads (MLIR's ``parallelization-strategy``; ``"auto"`` lets sparsecc choose).
    ``vector_length``: SIMD width of the sparsifier's vectorizer (0: scalar code).
    ``index_width``: 32 or 64-bit positions and coordinates (``None``: 32 when they fit).
    ``loop_order``: MLIR's loop-ordering strategy where it leaves a choice."""

    opt_level: int = 3
    cpu: str | None = None
    parallel: str = "auto"
    vector_length: int = 0
    index_width: int | None = None
    loop_order: str = "default"

    def __post_init__(self):
        if self.opt_level not in (0, 1, 2, 3):
            raise SparseccError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")
        if self.parallel not in PARALLEL:
            raise SparseccError(f"parallel must be one of {', '.join(PARALLEL)}; got {self.parallel!r}")
        if not isinstance(self.vector_length, int) or self.vector_length < 0 or (
                self.vector_length & (self.vector_length - 1)):
            raise SparseccError(f"vector_length must be 0 or a power of two, got {self.vector_length!r}")
        if self.index_width not in (None, 32, 64):
            raise SparseccError(f"index_width must be None, 32 or 64, got {self.index_width!r}")
        if self.loop_order not in LOOP_ORDERS:
            raise SparseccError(f"loop_order must be one of {', '.join(LOOP_ORDERS)}; got {self.loop_order!r}")

    def key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(asdict(self).items()))


DEFAULT = Options()
