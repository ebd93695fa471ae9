"""From the expression IR to MLIR text: ``linalg.generic`` over ``#sparse_tensor.encoding`` tensors.

``function`` (``emit_kernel``: the module for one statement), ``signature`` (argument order, types,
``KernelSignature``), ``regions`` (an expression as a ``linalg.generic`` body and its
``sparse_tensor`` regions), ``temporaries`` (dense temporaries, diagonals, in-kernel conversions),
``workarounds`` (MLIR 22 bugs avoided), ``constants`` (literals, identities, casts), ``structural``
(gather kernels for slices, concatenation, reshapes).
"""

from .function import emit_kernel
from .signature import KernelSignature

__all__ = ["KernelSignature", "emit_kernel"]
