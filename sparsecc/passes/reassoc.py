"""``Options.reassociate``: let LLVM reorder the sums of inner loops.

After sparsification a sum over stored entries (SpMV's row sum) is an ``scf.for`` whose
iteration argument is the accumulator: ``%s = arith.addf %acc, %term`` yielded back.
Without fast-math flags LLVM must add the terms in order: one chain of dependent adds, one
floating-point add latency (about 4 cycles) per stored entry, however wide the machine.
``fastmath<reassoc>`` on that add lets LLVM's loop vectorizer split the sum into several
partial sums (interleaved accumulators, vector lanes with gathers where its cost model
likes them) and add them up after the loop.

Only that add is marked: the multiply stays exact and no ``contract`` flag is set (no FMA
contraction).  The order of additions then depends on the row's own length and alignment,
never on the thread that runs it, so results stay bitwise equal for any thread count.
"""

from __future__ import annotations

VERSION = "reassociate 1 (scf.for iter_arg addf, reassoc only)"

#: the float adds this rewrite marks
_ADDS = ("arith.addf",)


def _iter_arg_position(value, loop) -> int | None:
    """The index among ``loop``'s results of ``value`` if it is one of its iteration
    arguments (block argument 1.. of its body), else None."""
    from mlir import ir
    if not isinstance(value, ir.BlockArgument):
        return None
    if value.owner.owner != loop:
        return None
    n = value.arg_number
    return n - 1 if n >= 1 else None


def reassociate_reductions(module) -> int:
    """Mark ``fastmath<reassoc>`` on every float add that accumulates into an ``scf.for``
    iteration argument (``%new = arith.addf %acc, %x`` or ``%x, %acc`` with ``%new``
    yielded at ``%acc``'s position).  Returns how many were marked."""
    from mlir import ir

    from .rewrites import ops_named

    attr = ir.Attribute.parse("#arith.fastmath<reassoc>")
    marked = 0
    for loop in ops_named(module, "scf.for"):
        body = loop.regions[0].blocks[0]
        ops = list(body.operations)
        if not ops or ops[-1].name != "scf.yield":
            continue
        yielded = list(ops[-1].operands)
        for op in ops[:-1]:
            if op.name not in _ADDS:
                continue
            result = op.results[0]
            for operand in op.operands:
                pos = _iter_arg_position(operand, loop)
                if pos is not None and pos < len(yielded) and yielded[pos] == result:
                    # the accumulator's only use must be this add (else the partial sums
                    # would be observable inside the loop)
                    if len(list(operand.uses)) == 1 and len(list(result.uses)) == 1:
                        op.attributes["fastmath"] = attr
                        marked += 1
                    break
    return marked
