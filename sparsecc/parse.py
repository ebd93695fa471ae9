"""Parsers for both front-end forms.  Both produce the same :class:`~sparsecc.expr.Statement`.

* einsum subscripts, with ``numpy.einsum``'s rules (implicit output, ``->``, repeated indices)
* index notation: ``y[i] = A[i,j] * x[j] + 2.5 * b[i]``, with TACO's rule for implicit sums
"""

from __future__ import annotations

import re
from functools import lru_cache

from .errors import OperandError, ParseError
from .expr import (COMPARISONS, MAX_DEPTH, REDUCTIONS, UNARY, Access, Binary, Const, Dense, Expr, Index, Reduce,
                   Statement, Stored, Unary, Where, accesses, depth, fold, free_indices, used_indices, walk)

#: functions of two arguments in index notation, and the IR op each is
_FUNCTIONS2 = {"min": "min", "max": "max", "pow": "pow", "pair": "pair", "first": "first",
               "second": "second", "land": "and", "lor": "or", "lxor": "xor"}
_SPECIAL = ("where", "stored", "index", "dense")

# ----------------------------------------------------------------------------- einsum


@lru_cache(maxsize=1024)
def parse_einsum(subscripts: str, n_operands: int) -> Statement:
    if not isinstance(subscripts, str):
        raise ParseError(f"einsum subscripts must be a string, got {type(subscripts).__name__}")
    s = subscripts.replace(" ", "")
    if "..." in s:
        raise ParseError(f"{subscripts!r}: an ellipsis ('...') needs the operands' ranks: sc.einsum and "
                         f"sc.compile expand it at each call; here name every index")
    if s.count("->") > 1:
        raise ParseError(f"{subscripts!r}: more than one '->'")
    lhs, arrow, rhs = s.partition("->")
    terms = lhs.split(",")
    for t in terms + ([rhs] if arrow else []):
        bad = re.sub(r"[A-Za-z]", "", t)
        if bad:
            raise ParseError(f"{subscripts!r}: invalid character {bad[0]!r} in subscripts "
                             f"(indices are single letters a-z, A-Z)")
    if len(terms) != n_operands:
        raise OperandError(f"einsum subscripts {subscripts!r} name {len(terms)} operand(s) "
                           f"but {n_operands} were given")
    counts: dict[str, int] = {}
    for t in terms:
        for c in t:
            counts[c] = counts.get(c, 0) + 1
    if arrow:
        out = tuple(rhs)
        for c in out:
            if c not in counts:
                raise ParseError(f"{subscripts!r}: output index '{c}' appears in no input")
        if len(set(out)) != len(out):
            raise ParseError(f"{subscripts!r}: output index repeated in '{rhs}'")
    else:
        out = tuple(sorted(c for c, n in counts.items() if n == 1))
    names = tuple(f"#{k}" for k in range(n_operands))
    factors = [Access(n, tuple(t)) for n, t in zip(names, terms)]
    expr: Expr = factors[0]
    for f in factors[1:]:
        expr = Binary("*", expr, f)
    contracted = tuple(c for c in counts if c not in out)
    if contracted:
        expr = Reduce("sum", contracted, expr)
    levels = depth(expr)          # before any recursive walk of the tree (as parse_notation)
    if levels > MAX_DEPTH:
        raise ParseError(f"einsum of {n_operands} operands: their product is {levels} levels deep; sparsecc "
                         f"accepts at most {MAX_DEPTH} (deeper trees exhaust Python's stack): multiply the "
                         f"operands in several einsum calls")
    return Statement("out", out, expr, names)


# --------------------------------------------------------------------- index notation

_TOKEN = re.compile(r"""
    (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?j?)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>\*\*|//|<=|>=|==|!=|[-+*/%()\[\],=<>])
  | (?P<space>\s+)
  | (?P<bad>.)
""", re.VERBOSE)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks: list[tuple[str, str, int]] = []
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup
            if kind == "space":
                continue
            if kind == "bad":
                self.fail(f"unexpected character {m.group()!r}", m.start())
            self.toks.append((kind, m.group(), m.start()))
        self.toks.append(("end", "", len(text)))
        self.k = 0
        self.nest = 0             # parentheses / function calls open (bounded by MAX_DEPTH)
        self.stored_depth = 0     # inside stored(...) or a monoid reduction: x / y[i] is exact

    def fail(self, msg: str, pos: int | None = None):
        pos = self.toks[self.k][2] if pos is None else pos
        raise ParseError(f"{msg} at column {pos + 1}:\n  {self.text}\n  {' ' * pos}^")

    def peek(self, ahead: int = 0):
        return self.toks[min(self.k + ahead, len(self.toks) - 1)]

    def take(self, value: str | None = None, kind: str | None = None):
        tok = self.peek()
        if (value is not None and tok[1] != value) or (kind is not None and tok[0] != kind):
            want = repr(value) if value is not None else f"a {kind}"
            got = repr(tok[1]) if tok[0] != "end" else "the end"
            self.fail(f"expected {want}, found {got}")
        self.k += 1
        return tok

    def indices(self) -> tuple[str, ...]:
        self.take("[")
        out: list[str] = []
        if self.peek()[1] != "]":
            out.append(self.take(kind="name")[1])
            while self.peek()[1] == ",":
                self.take(",")
                out.append(self.take(kind="name")[1])
        self.take("]")
        return tuple(out)

    def statement(self):
        name = self.take(kind="name")[1]
        idx = self.indices() if self.peek()[1] == "[" else ()
        if len(set(idx)) != len(idx):
            self.fail(f"output index repeated in {name}[{','.join(idx)}]", 0)
        self.take("=")
        expr = self.comparison()
        if self.peek()[0] != "end":
            self.fail(f"unexpected {self.peek()[1]!r}")
        return name, idx, expr

    def comparison(self) -> Expr:
        self.nest += 1
        if self.nest > MAX_DEPTH:
            self.fail(f"parentheses and function calls nest more than {MAX_DEPTH} levels deep")
        try:
            return self._comparison()
        finally:
            self.nest -= 1

    def _comparison(self) -> Expr:
        e = self.expr()
        if self.peek()[1] in COMPARISONS:
            op = self.take()[1]
            e = Binary(op, e, self.expr())
        return e

    def args(self, n: int, what: str, pos: int) -> list:
        self.take("(")
        out = [self.comparison()]
        while self.peek()[1] == ",":
            self.take(",")
            out.append(self.comparison())
        self.take(")")
        if len(out) != n:
            self.fail(f"{what} takes {n} argument(s), got {len(out)}", pos)
        return out

    def expr(self) -> Expr:
        e = self.term()
        while self.peek()[1] in "+-" and self.peek()[0] == "op":
            op = self.take()[1]
            e = Binary(op, e, self.term())
        return e

    def term(self) -> Expr:
        e = self.factor()
        while self.peek()[1] in ("*", "/", "//", "%"):
            _, op, pos = self.take()
            rhs = self.factor()
            if op in ("/", "//", "%") and free_indices(rhs) and not self.stored_depth:
                self.fail("division is only by a scalar (a constant or a scalar operand), or inside "
                          "stored(...), where only stored entries are divided; "
                          f"the divisor here has indices {','.join(free_indices(rhs))}", pos)
            e = Binary(op, e, rhs)
        return e

    def factor(self) -> Expr:
        if self.peek()[1] == "-":
            self.take("-")
            e = self.factor()
            if isinstance(e, Const):
                return Const(-e.value)
            return Unary("neg", e)
        if self.peek()[1] == "+":
            self.take("+")
            return self.factor()
        return self.power()

    def power(self) -> Expr:
        # ``a ** b`` is pow(a, b), as in Python: binding tighter than unary minus on its left
        # (-x ** 2 is -(x ** 2)), right-associative, the exponent a factor (2 ** -1)
        base = self.atom()
        if self.peek()[1] == "**":
            self.take("**")
            return Binary("pow", base, self.factor())
        return base

    def atom(self) -> Expr:
        kind, val, pos = self.peek()
        if kind == "num":
            self.take()
            v = complex(val) if val.endswith("j") else (float(val) if re.search(r"[.eE]", val) else int(val))
            return Const(v)
        if val == "(":
            self.take("(")
            e = self.comparison()
            self.take(")")
            return e
        if kind != "name":
            self.fail(f"expected an operand, a number or a function, found {val or 'the end'!r}")
        self.take()
        nxt = self.peek()[1]
        if nxt == "(":
            if val in _FUNCTIONS2:
                a, b = self.args(2, val, pos)
                return Binary(_FUNCTIONS2[val], a, b)
            if val == "where":
                return Where(*self.args(3, val, pos))
            if val == "stored":
                self.stored_depth += 1
                body = self.args(1, val, pos)[0]
                self.stored_depth -= 1
                return Stored(body)
            if val == "dense":
                outer, self.stored_depth = self.stored_depth, 0
                body = self.args(1, val, pos)[0]
                self.stored_depth = outer
                return Dense(body)
            if val == "index":
                self.take("(")
                name = self.take(kind="name")[1]
                self.take(")")
                return Index(name)
            if val not in UNARY:
                known = sorted(set(UNARY) | set(_FUNCTIONS2) | set(_SPECIAL))
                self.fail(f"unknown function {val!r}; known: {', '.join(known)}", pos)
            self.take("(")
            e = self.comparison()
            self.take(")")
            return Unary(val, e)
        if nxt == "[":
            idx = self.indices()
            if self.peek()[1] == "(":   # a reduction: sum[j](...)
                if val not in REDUCTIONS:
                    self.fail(f"unknown reduction {val!r}; known: {', '.join(REDUCTIONS)}", pos)
                if not idx:
                    self.fail(f"{val}[] names no index to reduce", pos)
                self.take("(")
                self.stored_depth += val != "sum"
                body = self.comparison()
                self.stored_depth -= val != "sum"
                self.take(")")
                return Reduce(val, idx, body)
            return Access(val, idx)
        if val in UNARY or val in _FUNCTIONS2 or val in _SPECIAL:
            self.fail(f"{val!r} is a function; write {val}(...)", pos)
        return Access(val, ())


def _place_sum(e: Expr, r: str) -> Expr:
    """Sum over ``r`` at the smallest subexpression holding all of its uses (TACO's rule).

    Descends through ``+ - * /`` while every use of ``r`` lies in one operand; wraps there.
    """
    if isinstance(e, Binary):
        in_left, in_right = r in free_indices(e.left), r in free_indices(e.right)
        if in_left and not in_right:
            return Binary(e.op, _place_sum(e.left, r), e.right)
        if in_right and not in_left:
            return Binary(e.op, e.left, _place_sum(e.right, r))
    if isinstance(e, Reduce) and e.op == "sum":
        return Reduce("sum", e.indices + (r,), e.body)
    return Reduce("sum", (r,), e)


@lru_cache(maxsize=1024)
def parse_notation(text: str) -> Statement:
    if not isinstance(text, str):
        raise ParseError(f"a statement must be a string, got {type(text).__name__}")
    p = _Parser(text)
    out, idx, expr = p.statement()
    levels = depth(expr)          # before any recursive walk of the tree
    if levels > MAX_DEPTH:
        raise ParseError(f"the right-hand side is {levels} levels deep (a chain of {levels - 1} operators, "
                         f"or nested calls); sparsecc accepts at most {MAX_DEPTH}: compute parts of it "
                         f"as separate statements")
    names = tuple(dict.fromkeys(a.tensor for a in accesses(expr)))
    if not names:
        raise ParseError(f"{text!r}: the right-hand side reads no operand (an output must be computed "
                         f"from at least one operand, e.g. 's = sum[i](x[i])')")
    if out in names:
        raise ParseError(f"{text!r}: the output {out!r} also appears on the right-hand side")
    ranks: dict[str, int] = {}
    for a in accesses(expr):
        if ranks.setdefault(a.tensor, len(a.indices)) != len(a.indices):
            raise ParseError(f"{text!r}: operand '{a.tensor}' is used with "
                             f"{ranks[a.tensor]} and with {len(a.indices)} indices")
    for e in walk(expr):
        if isinstance(e, Reduce):
            for i in e.indices:
                if i in idx:
                    raise ParseError(f"{text!r}: index '{i}' is both an output index and reduced by {e.op}[...]")
                if i not in free_indices(e.body):
                    if i in used_indices(e.body):
                        raise ParseError(f"{text!r}: {e.op}[{i}] reduces index '{i}', which a reduction "
                                         f"inside its body already reduces; reduce each index once")
                    raise ParseError(f"{text!r}: {e.op}[{i}] reduces an index its body does not use")
    sized = {i for a in accesses(expr) for i in a.indices}
    for e in walk(expr):
        if isinstance(e, Index) and e.name not in sized:
            raise ParseError(f"{text!r}: index({e.name}): '{e.name}' indexes no operand, so it has no size; "
                             f"use an index that some operand has")
    rhs = free_indices(expr)
    for i in idx:
        if i not in rhs:
            raise ParseError(f"{text!r}: output index '{i}' appears in no input")
    for r in rhs:
        if r not in idx:
            expr = _place_sum(expr, r)
    return Statement(out, idx, fold(expr), names)


def looks_like_notation(text: str) -> bool:
    return isinstance(text, str) and "=" in text
