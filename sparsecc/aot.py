"""Ahead-of-time libraries: ``sc.aot.build(name, kernels, folder)`` and ``sc.aot.load(folder)``.

See docs/aot.md.  The implementation is in ``sparsecc.runtime.aot``; loading imports neither
MLIR nor llvmlite.
"""

from .runtime.aot import Library, build, load

__all__ = ["build", "load", "Library"]
