"""``sparsecc.ops``: named sparse operations (torch.sparse's names where it has one).

Every operation is a sparsecc program compiled like any other kernel; NumPy and SciPy only
move operands in and results out.  Reference: docs/ops.md.
"""

from .linalg import *        # noqa: F401,F403  mm, mv, addmm, ... (docs/ops.md)
from .elementwise import *   # noqa: F401,F403  mul, add, neg, abs, ...
from .structural import *    # noqa: F401,F403  getitem, cat, reshape, ...
from .reductions import *    # noqa: F401,F403  sum, prod, amax, softmax, scatter_reduce, ...
from . import linalg, elementwise, structural, reductions

__all__ = sorted(set(linalg.__all__) | set(elementwise.__all__) | set(structural.__all__)
                 | set(reductions.__all__))
