"""sparsecc: a sparse tensor compiler for Python.

Tensor expressions (einsum or index notation) over SciPy sparse and NumPy operands are
lowered to MLIR's ``sparse_tensor`` dialect, compiled through LLVM to native code and run on
the operands' own buffers.  ``import sparsecc`` imports no MLIR; that happens in a worker
process at the first compile.
"""

from ._version import __version__
from . import dispatch  # noqa: F401  (installs the router the runtime's call path asks)
from . import aot
from .api import cache_info, compile, einsum, evaluate, plan
from .explore import explore
from .errors import (CompileError, DeviceError, DTypeError, FormatError, InexactPatternError, InternalError,
                     LibraryError, OperandError, ParseError, ShapeError, SparseccError)
from .formats import Format
from .options import Options
from .runtime.threads import get_num_threads, set_num_threads
from .semiring import Semiring
from . import ops
from .derivatives import PatternError, gradient, hessian, hvp, jacobian, jvp
from . import lazy
from .lazy import compute, fused, indices

__all__ = ["aot", "ops", "lazy", "compute", "fused", "indices", "jacobian", "jvp", "hessian", "hvp", "gradient", "einsum", "evaluate", "compile", "plan", "explore", "cache_info", "Format", "Options", "Semiring",
           "SparseccError",
           "ParseError", "ShapeError", "FormatError", "InexactPatternError", "DTypeError", "OperandError", "CompileError", "DeviceError", "InternalError", "LibraryError",
           "PatternError",
           "__version__", "set_num_threads", "get_num_threads"]
