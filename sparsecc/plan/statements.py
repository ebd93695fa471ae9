"""The statements of a plan's steps: each step as einsum's own form of its subscripts
(:func:`step_statement`, so a step reuses the kernels of the same two-operand einsum) and as
index notation with the real operand names (``_text``, what ``str(plan)`` prints)."""

from __future__ import annotations

from ..errors import SparseccError
from ..expr import Access, Binary, Const, Reduce, Statement, Stored
from . import path as _path

#: index letters of step statements, in order of first appearance (einsum's own style)
LETTERS = "ijklmnopqrstuvwxyzabcdefghABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _name(tensor: str) -> str:
    return f"T{tensor[1:]}" if tensor.startswith("#") else tensor


def step_statement(prod: _path.Product, terms: list[tuple[str, ...]], out: tuple[str, ...], scalars=(),
                   original: Statement | None = None) -> Statement:
    """The statement of one step: ``terms`` (each factor's indices) combined by the
    product's multiply and reduced by its monoid onto ``out``, in einsum's own form (what
    ``parse_einsum`` and ``semiring.apply`` make of the same subscripts, with index letters
    in order of first appearance), so a step reuses the kernels of the same two-operand
    einsum; ``scalars`` (0-d accesses, constants) join the product (the last step)."""
    letter: dict[str, str] = {}
    for t in list(terms) + [out]:
        for i in t:
            if i not in letter:
                if len(letter) >= len(LETTERS):
                    raise SparseccError("a step with more than 52 indices")
                letter[i] = LETTERS[len(letter)]
    accesses_ = [Access(f"#{k}", tuple(letter[i] for i in t)) for k, t in enumerate(terms)]
    k = len(terms)
    extra = []
    for s in scalars:
        if isinstance(s, Access):
            extra.append(Access(f"#{k}", ()))
            k += 1
    consts = [s for s in scalars if isinstance(s, Const)]
    factors = accesses_ + extra
    mul = prod.mul
    body = factors[0]
    for f in factors[1:]:
        body = Binary(mul, body, f)
    for c in consts:
        body = Binary("*", c, body)
    out_l = tuple(letter[i] for i in out)
    seen = dict.fromkeys(i for t in terms for i in t)
    red = tuple(letter[i] for i in seen if i not in out)
    if prod.monoid == "sum" and mul == "*":
        expr = Reduce("sum", red, body) if red else body
    else:
        expr = Reduce(prod.monoid, red, body if red else Stored(body), prod.identity)
    return Statement("out", out_l, expr, tuple(f"#{j}" for j in range(k)))


_SYMBOL = {"*": " * ", "+": " + "}


def _text(prod: _path.Product, out: str, idx, inputs, terms, scalars) -> str:
    op = _SYMBOL.get(prod.mul, f" {prod.mul} ")
    parts = []
    for s in scalars:
        if isinstance(s, Const):
            parts.append(repr(s.value))
    for name, t in zip(inputs, terms):
        parts.append(f"{_name(name)}[{','.join(t)}]")
    for s in scalars:
        if isinstance(s, Access):
            parts.append(_name(s.tensor))
    body = op.join(parts)
    red = [i for i in dict.fromkeys(i for t in terms for i in t) if i not in idx]
    rhs = f"{prod.monoid}[{','.join(red)}]({body})" if red else body
    lhs = f"{out}[{','.join(idx)}]" if idx else out
    return f"{lhs} = {rhs}"
