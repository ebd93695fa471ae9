"""Symbolic derivatives of index-notation statements: Statement -> Statement, nothing run.

``derivative(stmt, wrt, k)`` is the statement of ``d out[...] / d wrt[k]`` with a new index
``k`` after the output's.  The derivative is linear in the occurrences of ``wrt``: each
access ``wrt[a]`` contributes the product of the chain-rule factors on its path times the
Kronecker delta ``delta(a, k)`` (:func:`terms`).  A delta whose index a ``sum[a]`` on the path
binds is summed away by substituting ``a := k`` in that sum's body (``sum[j](L[i,j] * u[j])``
gives ``L[i,k]``); a delta of an output index stays and is read from the sparse identity
operand ``DELTA`` (``Id_[i,k]``), so element-wise terms give a diagonal and the result's
pattern follows from the operands' patterns by the ordinary rules (``patterns.py``).

``contracted(stmt, wrt, tangent)`` is the forward-mode statement ``sum[k](d out / d wrt[k] *
tangent[k])`` (a delta term gives ``c * tangent[a]``, no identity), one kernel.

Pure: imports only the expression IR and the errors.
"""

from __future__ import annotations

from ..errors import SparseccError
from ..expr import (Access, Binary, Const, Dense, Expr, Index, Reduce, Statement, Stored, Unary, Where,
                    accesses, children, fold, free_indices, show, used_indices)

#: the sparse identity operand a delta of an output index reads
DELTA = "Id_"


class NotDifferentiableError(SparseccError):
    """The statement has no derivative sparsecc can build (a comparison, ``//``, ``%``, a
    non-sum monoid, ``stored``/``dense`` on the path to the differentiated operand)."""


# ------------------------------------------------------------------ small algebra


def _zero(e: Expr) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == 0


def _one(e: Expr) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == 1


def neg(a: Expr) -> Expr:
    if isinstance(a, Const):
        return Const(-a.value)
    if isinstance(a, Unary) and a.fn == "neg":
        return a.arg
    return Unary("neg", a)


def mul(a: Expr, b: Expr, hoist: bool = False) -> Expr:
    """``a * b``, constants 1 dropped.  ``hoist``: a sum times a factor that does not use its
    indices becomes one sum of the product (``sum[m](x) * y`` -> ``sum[m](x * y)``), so a
    contracted derivative is one nest the planner can order rather than a dense temporary
    of the contraction's free indices (not in Jacobian terms: ``sum[j](x) * Id_[i,k]`` stays a
    vector temporary times the diagonal rather than a nest over i, j and k)."""
    if _one(a):
        return b
    if _one(b):
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return fold(Binary("*", a, b))
    for s, o, first in ((a, b, True), (b, a, False)) if hoist else ():
        if isinstance(s, Reduce) and s.op == "sum" and not set(s.indices) & set(used_indices(o)):
            body = mul(s.body, o, True) if first else mul(o, s.body, True)
            return _sum(s.indices, body)
    return Binary("*", a, b)


def _sum(indices, body: Expr) -> Expr:
    if not indices:
        return body
    if isinstance(body, Reduce) and body.op == "sum":
        return Reduce("sum", tuple(indices) + body.indices, body.body)
    return Reduce("sum", tuple(indices), body)


def pow_(x: Expr, r) -> Expr:
    if r == 1:
        return x
    if r == 0:
        return Const(1)
    return Binary("pow", x, Const(r))


def substitute(e: Expr, m: dict) -> Expr:
    """``e`` with the free indices in ``m`` renamed (a reduction's own indices shadow)."""
    if not m:
        return e
    if isinstance(e, Access):
        return Access(e.tensor, tuple(m.get(i, i) for i in e.indices))
    if isinstance(e, Index):
        return Index(m.get(e.name, e.name))
    if isinstance(e, Const):
        return e
    if isinstance(e, Reduce):
        inner = {k: v for k, v in m.items() if k not in e.indices}
        return Reduce(e.op, e.indices, substitute(e.body, inner), e.identity)
    if isinstance(e, Unary):
        return Unary(e.fn, substitute(e.arg, m))
    if isinstance(e, Binary):
        return Binary(e.op, substitute(e.left, m), substitute(e.right, m))
    if isinstance(e, Where):
        return Where(substitute(e.cond, m), substitute(e.left, m), substitute(e.right, m))
    return type(e)(substitute(e.body, m))


def reads(e: Expr, name: str) -> bool:
    return any(a.tensor == name for a in accesses(e))


# ------------------------------------------------------------------ derivative rules


def _unary_factor(fn: str, x: Expr) -> Expr | None:
    """d fn(x) / dx as an expression in x (None: zero almost everywhere)."""
    one = Const(1)
    if fn.startswith("astype_"):    # a conversion: 1 into a float/complex dtype, 0 into an integer one
        return one if fn[7:].startswith(("float", "complex")) else None
    if fn == "exp" or fn == "expm1":
        return Unary("exp", x)
    if fn == "log":
        return pow_(x, -1.0)
    if fn == "log1p":
        return pow_(Binary("+", one, x), -1.0)
    if fn == "sqrt":
        return mul(Const(0.5), pow_(Unary("sqrt", x), -1.0))
    if fn == "sin":
        return Unary("cos", x)
    if fn == "cos":
        return neg(Unary("sin", x))
    if fn == "tan":
        t = Unary("tan", x)
        return Binary("+", one, Binary("*", t, t))
    if fn == "tanh":
        t = Unary("tanh", x)
        return Binary("-", one, Binary("*", t, t))
    if fn == "sinh":
        return mul(Const(0.5), Binary("+", Unary("exp", x), Unary("exp", neg(x))))
    if fn == "asin":
        return pow_(Unary("sqrt", Binary("-", one, Binary("*", x, x))), -1.0)
    if fn == "atan":
        return pow_(Binary("+", one, Binary("*", x, x)), -1.0)
    if fn == "abs":          # the subgradient 0 at 0 (torch's sign)
        return Where(Binary(">", x, Const(0)), one, Where(Binary("<", x, Const(0)), Const(-1), Const(0)))
    if fn in ("ceil", "floor"):
        return None
    if fn == "conj":
        raise NotDifferentiableError("no derivative of conj(...): conj is not holomorphic (complex "
                                     "derivatives here are d f / d z, docs/derivatives.md)")
    raise NotDifferentiableError(f"no derivative of {fn}(...)")


def terms(e: Expr, wrt: str, k, source: str) -> list[tuple[Expr, tuple]]:
    """``d e / d wrt[k...]`` as ``[(c, pending)]``: the sum of ``c`` times a Kronecker delta
    ``delta(a, k_d)`` for each pair ``(a, k_d)`` in ``pending`` (the deltas not yet summed
    away; an empty tuple: ``c`` itself, which reads the ``k``'s).  ``k``: one new index per
    dimension of ``wrt`` (a string for a vector)."""
    ks = (k,) if isinstance(k, str) else tuple(k)
    if isinstance(e, Access):
        if e.tensor != wrt:
            return []
        return [(Const(1), tuple(zip(e.indices, ks)))]
    if isinstance(e, (Const, Index)):
        return []
    if not reads(e, wrt):
        return []
    if isinstance(e, Unary):
        if e.fn == "neg":
            return [(neg(c), a) for c, a in terms(e.arg, wrt, k, source)]
        f = _unary_factor(e.fn, e.arg)
        if f is None:
            return []
        return [(mul(c, f), a) for c, a in terms(e.arg, wrt, k, source)]
    if isinstance(e, Where):
        out = [(Where(e.cond, c, Const(0)), a) for c, a in terms(e.left, wrt, k, source)]
        out += [(Where(e.cond, Const(0), c), a) for c, a in terms(e.right, wrt, k, source)]
        return out       # the condition is piecewise constant: no derivative of its own
    if isinstance(e, Binary):
        L, R = e.left, e.right
        tl, tr = terms(L, wrt, k, source), terms(R, wrt, k, source)
        op = e.op
        if op == "+":
            return tl + tr
        if op == "-":
            return tl + [(neg(c), a) for c, a in tr]
        if op == "*":
            return [(mul(c, R), a) for c, a in tl] + [(mul(L, c), a) for c, a in tr]
        if op == "/":
            out = [(mul(c, pow_(R, -1.0)), a) for c, a in tl]
            return out + [(mul(neg(mul(L, pow_(R, -2.0))), c), a) for c, a in tr]
        if op == "pow":
            out = []
            if tl:
                if isinstance(R, Const):
                    f = mul(Const(R.value), pow_(L, R.value - 1)) if R.value != 0 else None
                else:
                    f = mul(R, Binary("pow", L, Binary("-", R, Const(1))))
                out += [(mul(c, f), a) for c, a in tl] if f is not None else []
            if tr:
                f = mul(Binary("pow", L, R), Unary("log", L))
                out += [(mul(c, f), a) for c, a in tr]
            return out
        if op in ("max", "min"):      # ties split evenly (torch.maximum's gradient)
            cmp = ">" if op == "max" else "<"

            def share(x, y, c):
                return Where(Binary(cmp, x, y), c, Where(Binary("==", x, y), mul(Const(0.5), c), Const(0)))
            return [(share(L, R, c), a) for c, a in tl] + [(share(R, L, c), a) for c, a in tr]
        raise NotDifferentiableError(f"'{source}': the operator '{op}' in {show(e)} has no derivative "
                                     f"(comparisons, //, %, Boolean and structural operators)")
    if isinstance(e, Reduce):
        if e.op != "sum":
            raise NotDifferentiableError(f"'{source}': no derivative through the monoid reduction "
                                         f"{e.op}[...] (sum has one)")
        out = []
        for c, a in terms(e.body, wrt, k, source):
            bound = {x: kk for x, kk in a if x in e.indices}
            if bound:                   # sum[a](c * delta(a, k)) = c[a := k]
                c, a = substitute(c, bound), tuple(p for p in a if p[0] not in bound)
            rest = tuple(i for i in e.indices if i not in bound)
            unused = [i for i in rest if i not in free_indices(c)]
            if unused:
                raise NotDifferentiableError(
                    f"'{source}': the derivative of {show(e)} sums a term that does not use "
                    f"{', '.join(unused)} (a multiple of that index's size): not supported yet")
            out.append((_sum(rest, c), a))
        return out
    if isinstance(e, (Stored, Dense)):
        raise NotDifferentiableError(f"'{source}': no derivative through {type(e).__name__.lower()}(...) yet")
    raise NotDifferentiableError(f"'{source}': no derivative through {type(e).__name__}")


#: functions with no complex derivative (not holomorphic), and piecewise ones
NOT_HOLOMORPHIC = frozenset({"abs", "conj", "ceil", "floor"})


def non_holomorphic(e: Expr, wrt: str) -> str | None:
    """The first sub-expression on the path to ``wrt`` that has no complex (holomorphic)
    derivative, as text: ``abs``, ``conj``, ``ceil``, ``floor``, ``max``/``min``, or a
    condition of ``where`` that reads ``wrt`` (complex values have no order)."""
    if not reads(e, wrt):
        return None
    if isinstance(e, Unary) and e.fn in NOT_HOLOMORPHIC:
        return show(e)
    if isinstance(e, Binary) and e.op in ("max", "min"):
        return show(e)
    if isinstance(e, Where) and reads(e.cond, wrt):
        return show(e.cond)
    for c in children(e):
        found = non_holomorphic(c, wrt)
        if found:
            return found
    return None


def check_wrt(stmt: Statement, wrt: str, source: str, any_rank: bool = False) -> int:
    """The rank of ``wrt`` (1 unless ``any_rank``: the stored values of a sparse operand)."""
    if not isinstance(wrt, str) or wrt not in stmt.operands:
        raise SparseccError(f"wrt={wrt!r} is not an operand of '{source}' (operands: {', '.join(stmt.operands)})")
    ranks = {len(a.indices) for a in accesses(stmt.expr) if a.tensor == wrt}
    if any_rank and len(ranks) == 1 and ranks != {0}:
        pass
    elif ranks != {1}:
        raise SparseccError(f"wrt={wrt!r}: derivatives are with respect to a vector (rank-1) operand; "
                            f"'{wrt}' has rank {ranks.pop()}")
    if any(len(set(a.indices)) != len(a.indices) for a in accesses(stmt.expr)):
        raise NotDifferentiableError(f"'{source}': repeated indices (diagonals) are not differentiated yet")
    return ranks.pop()


def fresh_index(stmt: Statement, base: str) -> str:
    taken = set(used_indices(stmt.expr)) | set(stmt.indices)
    k, n = base, 0
    while k in taken:
        n += 1
        k = f"{base}{n}"
    return k


def _total(parts: list[Expr]) -> Expr | None:
    """The sum of ``parts``, equal parts counted once with their multiplicity (the product
    rule's ``x * L + x * L`` of ``L * L`` is ``2 * (x * L)``)."""
    counts: dict = {}
    for p in parts:
        counts[p] = counts.get(p, 0) + 1
    parts = [p if n == 1 else mul(Const(n), p) for p, n in counts.items()]
    out = None
    for p in parts:
        if isinstance(p, Unary) and p.fn == "neg" and out is not None:
            out = Binary("-", out, p.arg)
        else:
            out = p if out is None else Binary("+", out, p)
    return out


def derivative(stmt: Statement, wrt: str, k, output: str = "J_", source: str = "",
               deltas: tuple | None = None, mask: str | None = None) -> Statement | None:
    """``output[out..., k...] = d stmt / d wrt[k...]`` (None: the derivative is identically
    0).  ``k``: a new index (or one per dimension of ``wrt``); ``deltas``: the identity
    operand a delta of an output index reads, per dimension of ``wrt`` (``DELTA``);
    ``mask``: an operand ``mask[k...]`` every term is multiplied by (the pattern of a sparse
    ``wrt``: derivatives with respect to its stored values)."""
    ks = (k,) if isinstance(k, str) else tuple(k)
    rank = check_wrt(stmt, wrt, source or str(stmt), any_rank=mask is not None or len(ks) > 1)
    if rank != len(ks):
        raise SparseccError(f"internal error: {len(ks)} derivative indices for the rank-{rank} {wrt!r}")
    deltas = deltas or (DELTA,) * rank
    parts = []
    for c, a in terms(stmt.expr, wrt, ks, source or str(stmt)):
        for x, kk in a:
            if x not in stmt.indices:      # cannot happen: bound indices are summed away
                raise NotDifferentiableError(f"'{source}': a delta of the unbound index {x}")
            c = mul(c, Access(deltas[ks.index(kk)], (x, kk)))
        parts.append(c)
    expr = _total(parts)
    if expr is None:
        return None
    if mask is not None:                   # (the union of the terms) on the mask's pattern
        expr = Binary("*", expr, Access(mask, ks))
    expr = fold(expr)
    return Statement(output, stmt.indices + ks, expr, tuple(dict.fromkeys(a.tensor for a in accesses(expr))))


def contracted(stmt: Statement, wrt: str, tangent: str, k, output: str = "T_",
               source: str = "") -> Statement | None:
    """``output[out...] = sum[k...](d stmt / d wrt[k...] * tangent[k...])`` (forward mode);
    ``k``: a new index, or one per dimension of ``wrt`` (the stored values of a sparse
    operand: ``tangent`` then stores its values on ``wrt``'s entries).  A delta of an output
    index reads the tangent there (``c * tangent[a]``, no identity)."""
    ks = (k,) if isinstance(k, str) else tuple(k)
    rank = check_wrt(stmt, wrt, source or str(stmt), any_rank=len(ks) > 1)
    if rank != len(ks):
        raise SparseccError(f"internal error: {len(ks)} tangent indices for the rank-{rank} {wrt!r}")
    parts = []
    for c, a in terms(stmt.expr, wrt, ks, source or str(stmt)):
        pending = {kk: x for x, kk in a}
        read = Access(tangent, tuple(pending.get(kk, kk) for kk in ks))
        summed = tuple(kk for kk in ks if kk not in pending)
        parts.append(_sum(summed, mul(c, read, hoist=True)) if summed else mul(c, read))
    expr = _total(parts)
    if expr is None:
        return None
    expr = fold(expr)
    return Statement(output, stmt.indices, expr, tuple(dict.fromkeys(a.tensor for a in accesses(expr))))


def text(stmt: Statement) -> str:
    """The statement as index notation the parser reads back (sums explicit)."""
    return str(stmt)


def split_reads(stmt: Statement) -> tuple[Statement, dict]:
    """``stmt`` with each operand read under a second index order renamed (``A[k,l] +
    A[l,k]`` -> ``A[k,l] + A__1[l,k]``), and {alias: operand}: the call passes the operand
    under both names, so the runtime stores each read in the order its loops want (the
    Hessian's ``sum[i](A[i,k] * A__1[i,k1])`` is then the hand-written SpGEMM of a CSC and a
    CSR operand).  One name is right too (the emitter copies a read whose order disagrees,
    ``dialect/workarounds.own_order_reads``), with one transpose more per call."""
    orders: dict = {}
    aliases: dict = {}

    def name(a: Access) -> str:
        seen = orders.setdefault(a.tensor, [])
        if a.indices not in [o for o, _ in seen]:
            alias = a.tensor if not seen else f"{a.tensor}__{len(seen)}"
            seen.append((a.indices, alias))
            if alias != a.tensor:
                aliases[alias] = a.tensor
        return dict(seen)[a.indices]

    def walk_(e: Expr) -> Expr:
        if isinstance(e, Access):
            return Access(name(e), e.indices) if len(e.indices) > 1 else e
        if isinstance(e, (Const, Index)):
            return e
        if isinstance(e, Reduce):
            return Reduce(e.op, e.indices, walk_(e.body), e.identity)
        if isinstance(e, Unary):
            return Unary(e.fn, walk_(e.arg))
        if isinstance(e, Binary):
            return Binary(e.op, walk_(e.left), walk_(e.right))
        if isinstance(e, Where):
            return Where(walk_(e.cond), walk_(e.left), walk_(e.right))
        return type(e)(walk_(e.body))

    expr = walk_(stmt.expr)
    return Statement(stmt.output, stmt.indices, expr, tuple(dict.fromkeys(a.tensor for a in accesses(expr)))), aliases
