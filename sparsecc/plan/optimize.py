"""What ``optimize=`` may be: True (the best plan), False (one loop nest), ``"greedy"``,
``"optimal"``, or a contraction path in ``numpy.einsum_path``'s format - checked before
anything runs (docs/planning.md, ``optimize=``)."""

from __future__ import annotations

from ..errors import SparseccError


def _is_path(optimize) -> bool:
    return not isinstance(optimize, (bool, str)) and hasattr(optimize, "__iter__")


def check_optimize(optimize):
    """``optimize`` as the planner takes it (True, False, "greedy", "optimal" or a path as
    a tuple of tuples); a SparseccError for anything else."""
    if optimize is True or optimize is False:
        return optimize
    if isinstance(optimize, str):
        if optimize in ("greedy", "optimal"):
            return optimize
        raise SparseccError(f"optimize={optimize!r}: expected True, False, 'greedy', 'optimal' or a path "
                            f"like [(1, 2), (0, 1)]")
    if _is_path(optimize):
        items = list(optimize)
        out = []
        for k, step in enumerate(items):
            if k == 0 and isinstance(step, str):
                if step != "einsum_path":
                    raise SparseccError(f"optimize= path {optimize!r}: a path starts with 'einsum_path' or a tuple")
                continue
            if isinstance(step, (str, bytes)) or not hasattr(step, "__iter__"):
                raise SparseccError(f"optimize= path {optimize!r}: each step is a tuple of operand positions, "
                                    f"got {step!r}")
            pos = tuple(step)
            if not pos or not all(isinstance(p, int) and not isinstance(p, bool) for p in pos):
                raise SparseccError(f"optimize= path {optimize!r}: step {pos!r} must name at least one operand "
                                    f"position (integers)")
            out.append(pos)
        return tuple(out)
    raise SparseccError(f"optimize={optimize!r}: expected True, False, 'greedy', 'optimal' or a path like "
                        f"[(1, 2), (0, 1)]")
