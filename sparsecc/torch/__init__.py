"""``sparsecc.torch``: sparsecc on torch tensors, with autograd through compiled kernels.

``sct.einsum``, ``sct.evaluate`` and ``sct.compile`` take the arguments of ``sc.einsum``,
``sc.evaluate`` and ``sc.compile`` (formats, ``options``, ``out_format``, ``prune``,
``check``, ``semiring``) and torch tensors on the CPU: strided, and the sparse layouts COO
(coalesced or not), CSR, CSC and BSR.  Each tensor goes in over its own memory (the NumPy /
SciPy view of its buffers, int32 or int64 indices as they are); results come back as torch
tensors over the kernel's buffers.  Backward runs compiled adjoint kernels
(:mod:`sparsecc.autodiff`): a sparse operand's gradient lives on its pattern.  Reference:
docs/torch.md.  ``import sparsecc`` never imports this module (nor torch).
"""

# the calls and conversions (api.py), the op library (ops.py: sct.ops), and the custom ops
# for torch.compile (library.py: torch.ops.sparsecc.*, registered when imported)
from .api import (TorchKernel, _check_tensor, compile, einsum, evaluate, from_sparsecc,  # noqa: F401,A004
                  sync_threads, to_sparsecc)
from . import ops
from . import library  # noqa: F401

__all__ = ["einsum", "evaluate", "compile", "TorchKernel", "to_sparsecc", "from_sparsecc", "ops", "library",
           "sync_threads"]
