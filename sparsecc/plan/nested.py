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

A reduction over two or more indices into a sparse result is split one index a step where
the runtime found its one nest inexact (``force``: ``passes/rewrites.inexact_sparse_outputs``
reads MLIR's sorted loops when the nest compiles).  MLIR 22's sparsifier marks an entry for
insertion once a body of its *outermost* reduction loop runs, so where an inner reduction loop
finds nothing (``y[i] = sum[j,k](A[i,j] * B[j,k])`` with row ``j`` of B empty) it stores the
monoid's identity at an entry that has no term: a stored 0, or ``-inf`` for ``max_plus``,
where the pattern rules store nothing.  Split as ``T[i,j] = sum[k](A[i,j] * B[j,k])``, then
``y[i] = sum[j](T[i,j])``, each step has one reduction loop fewer; a step still inexact is
split again when it compiles.  Any monoid may be split so: the outer reduction reads only the
entries the inner one stored.
"""

from __future__ import annotations

from ..expr import Access, Binary, Dense, Expr, Reduce, Statement, Stored, Unary, Where, accesses, free_indices
from .order import layout_of, schedule

#: where nested reductions' steps store their results, by rank (rank 2: CSR; else COO)
_FORMAT = {2: "csr"}


def split_plan(stmt: Statement, dense: dict[str, bool], result_format: str, formats: dict[str, str] | None = None,
               nested: bool = True, force: bool = False):
    """The steps of ``stmt`` with every splittable nested reduction (module docstring) its
    own step, and a reduction over several indices into a sparse result split one index a
    step, as ``(steps, reason)`` with steps ``(statement, inputs, output, indices, format,
    text)``; None where nothing is split.  ``formats``: each sparse operand's storage format
    by name (absent: CSR for a matrix, COO otherwise); ``nested=False`` splits only the
    root's reduction (a product's flat one nest keeps its inner sums); ``force``: split the
    root's reduction over several indices whatever the loop order says (the runtime found
    its one nest inexact: ``runtime.specialization``)."""
    if result_format == "dense":
        return None
    steps: list[tuple] = []
    formats = formats or {}

    def sparse_reads(e: Expr) -> bool:
        return any(a.indices and not dense.get(a.tensor, True) for a in accesses(e)) or \
            any(a.tensor.startswith("#n") for a in accesses(e))

    def step(r: Reduce, free: tuple[str, ...]) -> Access:
        # the step's own reduction, if over several indices, is split first
        return _step(split_root(r, free, result_format, steps, sparse_reads, dense, formats), free, steps)

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
                return step(new, free)
            return new
        else:
            return e
        return new if new != e else e

    expr = visit(stmt.expr, True, False) if nested else stmt.expr
    n_nested = len(steps)
    expr = split_root(expr, tuple(stmt.indices), result_format, steps, sparse_reads, dense, formats, step, force)
    if not steps:
        return None
    ops = tuple(dict.fromkeys(a.tensor for a in accesses(expr) if a.indices or not a.tensor.startswith("#n")))
    names = {t: f"#{k}" for k, t in enumerate(ops)}
    last = Statement(stmt.output, stmt.indices, _rename(expr, names), tuple(names.values()))
    steps.append((last, ops, stmt.output, tuple(stmt.indices), result_format, str(stmt.__class__(
        stmt.output, stmt.indices, expr, ops))))
    texts = ", ".join(s[5] for s in steps[:-1])
    if n_nested == len(steps) - 1:
        return steps, f"nested reductions as sparse steps ({texts}), then the statement reading them"
    return steps, (f"reductions as sparse steps, one index each, so that the sparse result stores only entries "
                   f"with a term ({texts}), then the statement reading them")


def split_one_nest(stmt: Statement, step, single: bool, dense: dict[str, bool], result_format: str,
                   formats: dict[str, str] | None, force: bool):
    """:func:`split_plan`'s steps for a plan of one step (``step``: the statement itself where
    ``single``, else its flat form over operands ``#0``, ``#1``, ... = ``step.inputs``), its
    root's reduction split only, inputs named as ``stmt``'s; None where nothing is split."""
    if result_format == "dense":
        return None
    if single:
        return split_plan(stmt, dense, result_format, formats, nested=False, force=force)
    names = dict(zip(step.statement.operands, step.inputs))
    split = split_plan(step.statement, {k: dense[v] for k, v in names.items()}, result_format,
                       {k: formats[v] for k, v in names.items() if formats and v in formats}, nested=False,
                       force=force)
    if split is None:
        return None
    return [(st, tuple(names.get(i, i) for i in inputs), *rest) for st, inputs, *rest in split[0]], split[1]


def split_root(e: Expr, out: tuple[str, ...], result_format: str, steps: list, sparse_reads, dense, formats,
               step=None, force: bool = False) -> Expr:
    """``e`` with its reduction over several indices (if ``e`` is one, into a sparse result
    inserted directly: module docstring) split: the reduction over its outer loop's index of
    a step ``T[out..., outer]`` that reduces the rest (itself split the same way), appended
    to ``steps``; else ``e``."""
    if not isinstance(e, Reduce) or len(e.indices) < 2 or result_format == "dense" or not sparse_reads(e):
        return e
    outer = outer_reduction(e, out, dense, formats, force)
    if outer is None:
        return e
    inner = Reduce(e.op, tuple(i for i in e.indices if i != outer), e.body, e.identity)
    free = tuple(out) + (outer,)
    if step is None:
        def step(r, free):
            return _step(split_root(r, free, "sparse", steps, sparse_reads, dense, formats), free, steps)
    return Reduce(e.op, (outer,), step(inner, free), e.identity)


def outer_reduction(r: Reduce, out: tuple[str, ...], dense: dict[str, bool], formats: dict[str, str],
                    force: bool = False) -> str | None:
    """Where ``force`` (the runtime found ``r``'s one nest into a sparse result over ``out``
    inexact: ``passes/rewrites.inexact_sparse_outputs`` reads MLIR's sorted loops), the index
    of its outermost reduction loop (:func:`plan.order.schedule`'s order: the intermediate then
    holds at most the points the one nest visits at that depth; the first index reduced where
    the operands' levels form a cycle); else None.  The plan cannot tell which nests need it:
    the runtime orders a sparse result's operands itself (``runtime/operand_orders.py``) and
    MLIR sorts the loops, so it is a fact of the compiled nest, never a guess here."""
    if not force:
        return None
    terms, layouts = [], []
    for a in accesses(r):
        if not a.indices:
            continue
        terms.append(a.indices)
        if dense.get(a.tensor, not a.tensor.startswith("#n")):
            layouts.append(None)
        else:
            fmt = formats.get(a.tensor) or _FORMAT.get(len(a.indices), "coo")
            layouts.append(layout_of(fmt, a.indices))
    order, _ = schedule(terms, layouts, out, True)
    reds = [i for i in order or () if i in r.indices]
    return reds[0] if reds else r.indices[0]


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
