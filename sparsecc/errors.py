"""One exception hierarchy.  Messages speak in the user's terms (index, operand, sizes)."""

from __future__ import annotations


class SparseccError(ValueError):
    """Base of every error sparsecc raises for bad input.  Also a ``ValueError``."""


class ParseError(SparseccError):
    """A malformed einsum subscript string or index-notation statement."""


class ShapeError(SparseccError):
    """Operand shapes disagree with the expression or with each other."""


class FormatError(SparseccError):
    """An unknown or inconsistent storage format."""


class DTypeError(SparseccError):
    """An operand dtype sparsecc does not support, or an operation numpy refuses for it."""


class OperandError(SparseccError):
    """Wrong operand count, names or kinds, or a malformed sparse operand."""


class DeviceError(SparseccError, RuntimeError):
    """A kernel cannot run on the device asked for (``device="cuda"``): no CUDA driver, no
    device, an architecture the device cannot run, or a kernel MLIR keeps on the CPU (a
    sparse result; an outer loop that carries a reduction).  Raised before native code runs."""


class LibraryError(SparseccError):
    """A compiled library, or the record beside it, cannot be used: an ahead-of-time
    library whose ``lib<name>.so`` is truncated or not the one its manifest names (size,
    SHA-256), a manifest of the wrong shape, a file that is a symbolic link, a FIFO, a folder
    or too large; a kernel-cache entry read again (``Kernel.ir``) that went bad.  Raised
    before anything is loaded; ``path`` names the file."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class InexactPatternError(FormatError):
    """A loop nest whose sparse result MLIR 22's sparsifier would store with entries that have
    no term: a reduction over several loops inside the result's last output loop
    (``passes/rewrites.inexact_sparse_outputs``).  Raised when it compiles, before any native
    code runs.  A planned call then runs the statement's reductions one index a step
    (``plan/nested.py``); where nothing plans the call (an ahead-of-time one nest, a Dask
    block) it reaches the user, who may ask for a dense result instead."""


class CompileError(SparseccError, RuntimeError):
    """MLIR or LLVM failed (or crashed) while compiling a kernel.

    ``ir_path`` names a file holding the MLIR that failed, for a bug report.
    """

    def __init__(self, message: str, ir_path: str | None = None):
        super().__init__(message if ir_path is None else f"{message}\n(IR saved to {ir_path})")
        self.ir_path = ir_path


class InternalError(SparseccError, RuntimeError):
    """A bug in sparsecc itself (not in the user's input, not an MLIR/LLVM rejection): for
    example a Python error inside the compile worker.  ``worker_traceback`` holds the
    traceback from the worker; ``ir_path`` the MLIR being compiled.  Please report it."""

    def __init__(self, message: str, worker_traceback: str = "", ir_path: str | None = None):
        text = message
        if worker_traceback:
            text += "\n--- traceback in the compile worker ---\n" + worker_traceback.rstrip()
        if ir_path is not None:
            text += f"\n(IR saved to {ir_path})"
        super().__init__(text)
        self.worker_traceback = worker_traceback
        self.ir_path = ir_path
