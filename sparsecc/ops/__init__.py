"""``sparsecc.ops``: named sparse operations (torch.sparse's names where it has one).

Every operation is a sparsecc program compiled like any other kernel; NumPy and SciPy only
move operands in and results out.  Reference: docs/ops.md.
"""

from .linalg import *        # noqa: F401,F403  mm, mv, addmm, ... (docs/ops.md)
from .elementwise import *   # noqa: F401,F403  mul, add, neg, abs, ...
from .structural import *    # noqa: F401,F403  getitem, cat, reshape, ...
from .reductions import *    # noqa: F401,F403  sum, prod, amax, softmax, scatter_reduce, ...
from . import linalg, elementwise, structural, reductions


def _dask_hook(name: str, fn):
    """``fn`` that hands its call to ``sparsecc.dask.ops`` when an operand is a Dask array
    (a lazy result, or an OperandError naming an op that needs an in-memory operand)."""
    import functools

    @functools.wraps(fn)
    def op(*args, **kwargs):
        for v in (*args, *kwargs.values()):
            if type(v).__module__.startswith("dask.") or (
                    isinstance(v, (list, tuple)) and any(type(w).__module__.startswith("dask.") for w in v)):
                from ..dask.ops import dispatch     # imports dask: only when a Dask array is passed
                return dispatch(name, args, kwargs)
        return fn(*args, **kwargs)
    return op


for _m in (linalg, elementwise, structural, reductions):
    for _name in _m.__all__:
        _f = getattr(_m, _name)
        if callable(_f) and not isinstance(_f, type):
            setattr(_m, _name, _dask_hook(_name, _f))
            globals()[_name] = getattr(_m, _name)
del _m, _name, _f

__all__ = sorted(set(linalg.__all__) | set(elementwise.__all__) | set(structural.__all__)
                 | set(reductions.__all__))
