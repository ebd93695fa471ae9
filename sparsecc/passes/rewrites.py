"""Python rewrite between sparsification and dense bufferization.

The sparsifier hands each dense output of a sparse loop back as
``bufferization.to_tensor %buffer`` without ``restrict``.  MLIR's own mini-pipeline then
bufferizes without analysis; the textual ``one-shot-bufferize`` that sparsecc runs instead
(see pipeline.py) refuses such ops.  Every buffer there is the one the sparsifier just wrote
in place and nothing else aliases it, so each one is marked ``restrict writable``.
"""

from __future__ import annotations

VERSION = "restrict_to_tensor 1"


def restrict_to_tensor(module) -> int:
    """Mark every ``bufferization.to_tensor`` restrict and writable; returns how many changed."""
    from mlir import ir

    changed = []

    def visit(op):
        if op.name == "bufferization.to_tensor" and "restrict" not in op.attributes:
            changed.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in changed:
        op.attributes["restrict"] = ir.UnitAttr.get()
        op.attributes["writable"] = ir.UnitAttr.get()
    return len(changed)
