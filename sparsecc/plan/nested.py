"""Statements whose body holds a reduction below its root, computed in steps.

``J[k,l] = sum[i](AT[k,i] * B[i,l]) + I[k,l]`` as one loop nest lowers its inner sum into a
dense temporary of the result's shape (``dialect/temporaries.py``): a sparse result then
stores every entry, and the call costs O(result shape).  :func:`split_plan` computes each
such reduction as a step of its own with a sparse result - its pattern is the Boolean
product of its body's operands (docs/sparse-results.md), a SpGEMM-like step - and the
statement then reads it as a sparse operand, so the union (``+ I``), intersection
(``M * ...``) or pattern-keeping function (``sqrt(...)``) of the remaining statement applies
to that pattern.  The steps are the statement's own evaluation order (inner reductions
first); nothing is reordered, so every monoid and function is kept as written.

Which reductions are split: one below the root that reads a sparse operand, outside a
``stored(...)``, a ``dense(...)`` and a monoid (non-sum) reduction's body (there an absent
entry of the temporary must not read as a stored zero; those keep the one nest), with at
least one free index; only where the statement's result is sparse (a dense result stores
every entry whatever its temporaries).  Innermost first: a reduction inside a split one is
a step of its own before it.
"""

from __future__ import annotations

from ..expr import Access, Binary, Dense, Expr, Reduce, Statement, Stored, Unary, Where, accesses, free_indices

#: where nested reductions' steps store their results, by rank (rank 2: CSR; else COO)
_FORMAT = {2: "csr"}


def split_plan(stmt: Statement, dense: dict[str, bool], result_format: str, reason_of=None):
    """The steps of ``stmt`` with every splittable nested reduction (module docstring) its
    own step, as ``(steps, reason)`` with steps ``(statement, inputs, output, indices,
    format, text)``; None where nothing is split."""
    if result_format == "dense":
        return None
    steps: list[tuple] = []

    def sparse_reads(e: Expr) -> bool:
        return any(a.indices and not dense.get(a.tensor, True) for a in accesses(e)) or \
            any(a.tensor.startswith("#n") for a in accesses(e))

    def visit(e: Expr, root: bool, guarded: bool) -> Expr:
        if isinstance(e, Unary):
            new = Unary(e.fn, visit(e.arg, False, guarded))
        elif isinstance(e, Binary):
            new = Binary(e.op, visit(e.left, False, guarded), visit(e.right, False, guarded))
        elif isinstance(e, Where):
            new = Where(*(visit(c, False, guarded) for c in (e.cond, e.left, e.right)))
        elif isinstance(e, Stored):
            return Stored(visit(e.body, root, True))
        elif isinstance(e, Dense):
            return e
        elif isinstance(e, Reduce):
            body = visit(e.body, False, guarded or e.op != "sum")
            new = Reduce(e.op, e.indices, body, e.identity)
            free = free_indices(new)
            if not root and not guarded and free and sparse_reads(new):
                return _step(new, free, steps)
            return new
        else:
            return e
        return new if new != e else e

    expr = visit(stmt.expr, True, False)
    if not steps:
        return None
    ops = tuple(dict.fromkeys(a.tensor for a in accesses(expr) if a.indices or not a.tensor.startswith("#n")))
    names = {t: f"#{k}" for k, t in enumerate(ops)}
    last = Statement(stmt.output, stmt.indices, _rename(expr, names), tuple(names.values()))
    steps.append((last, ops, stmt.output, tuple(stmt.indices), result_format, str(stmt.__class__(
        stmt.output, stmt.indices, expr, ops))))
    texts = ", ".join(s[5] for s in steps[:-1])
    return steps, f"nested reductions as sparse steps ({texts}), then the statement reading them"


def _step(r: Reduce, free: tuple[str, ...], steps: list) -> Access:
    out = f"#n{len(steps)}"
    ops = tuple(dict.fromkeys(a.tensor for a in accesses(r)))
    names = {t: f"#{k}" for k, t in enumerate(ops)}
    st = Statement("out", free, _rename(r, names), tuple(names.values()))
    fmt = _FORMAT.get(len(free), "coo")
    steps.append((st, ops, out, free, fmt, str(Statement(f"T{out[1:]}", free, r, ops))))
    return Access(out, free)


def _rename(e: Expr, names: dict[str, str]) -> Expr:
    if isinstance(e, Access):
        return Access(names.get(e.tensor, e.tensor), e.indices)
    if isinstance(e, Unary):
        return Unary(e.fn, _rename(e.arg, names))
    if isinstance(e, Binary):
        return Binary(e.op, _rename(e.left, names), _rename(e.right, names))
    if isinstance(e, Where):
        return Where(*(_rename(c, names) for c in (e.cond, e.left, e.right)))
    if isinstance(e, Stored):
        return Stored(_rename(e.body, names))
    if isinstance(e, Dense):
        return Dense(_rename(e.body, names))
    if isinstance(e, Reduce):
        return Reduce(e.op, e.indices, _rename(e.body, names), e.identity)
    return e
