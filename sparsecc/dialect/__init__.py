"""From the expression IR to MLIR text: ``linalg.generic`` over ``#sparse_tensor.encoding`` tensors."""

from .emit import KernelSignature, emit_kernel

__all__ = ["KernelSignature", "emit_kernel"]
