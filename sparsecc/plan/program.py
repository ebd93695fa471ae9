"""Programs: several statements planned as one list of steps (docs/planning.md, Programs).

A program is data: a tuple of ``Statement`` s, each reading the program's inputs or an
earlier statement's output.  Its plan is the steps of every statement's own plan
(``make_plan``), renamed into one namespace of values and merged:

* **shared steps** - a step equal to an earlier one (the same statement up to the names of
  its operands, output and indices, reading the same values, stored in the same format and
  dtype) is not repeated: its output is the earlier step's value;
* **dead values** - a statement whose output no requested output needs is not planned
  (:func:`live`), and each value's last reader is known (:attr:`ProgramPlan.last_use`), so a
  front end drops it there.

It calls no kernels: ``sparsecc.program`` plans each statement as its inputs become known
(a statement's plan reads its operands' statistics, and an earlier output's are known once
it ran) and runs the steps :meth:`Builder.add` returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import ParseError
from ..expr import Access, Binary, Const, Dense, Expr, Index, Reduce, Statement, Stored, Unary, Where
from .plan import LETTERS, Plan


def check(statements: tuple[Statement, ...], outputs=None, texts=None) -> tuple[str, ...]:
    """The outputs a program returns (every statement's, or ``outputs``); a ParseError
    naming the statement for an output name used twice, a statement reading an output
    that a later statement defines, or an unknown name in ``outputs``."""
    texts = texts or [str(s) for s in statements]
    defined: dict[str, int] = {}
    later = {s.output: k for k, s in enumerate(statements)}
    for k, s in enumerate(statements):
        where = f"statement {k + 1} ('{texts[k]}')"
        if s.output in defined:
            raise ParseError(f"{where}: output {s.output!r} is already defined by statement {defined[s.output] + 1}; "
                             f"each statement needs an output name of its own")
        for name in s.operands:
            if name not in defined and later.get(name, -1) > k:
                raise ParseError(f"{where} reads {name!r}, which statement {later[name] + 1} defines later; "
                                 f"a statement reads only the program's inputs and earlier outputs")
        defined[s.output] = k
    if outputs is None:
        return tuple(s.output for s in statements)
    if isinstance(outputs, str):
        outputs = (outputs,)
    outputs = tuple(outputs)
    for name in outputs:
        if name not in defined:
            raise ParseError(f"outputs= names {name!r}, which no statement defines "
                             f"(outputs: {', '.join(defined)})")
    return tuple(dict.fromkeys(outputs))


def live(statements: tuple[Statement, ...], outputs: tuple[str, ...]) -> tuple[int, ...]:
    """The statements (by position) that ``outputs`` need, in program order."""
    need = set(outputs)
    keep = []
    for k in range(len(statements) - 1, -1, -1):
        s = statements[k]
        if s.output in need:
            keep.append(k)
            need.update(s.operands)
    return tuple(reversed(keep))


def inputs_of(statements: tuple[Statement, ...]) -> tuple[str, ...]:
    """The program's inputs: operands no earlier statement defines, in order of first use."""
    defined, out = set(), {}
    for s in statements:
        for name in s.operands:
            if name not in defined:
                out[name] = None
        defined.add(s.output)
    return tuple(out)


# --------------------------------------------------------------------- canonical form
def canonical(stmt: Statement) -> Statement:
    """``stmt`` with its operands ``#0, #1, ...`` (in operand order), its output ``out`` and
    its indices lettered in order of first appearance (output indices first): two steps
    computing the same thing from the same values have equal canonical statements."""
    tensors = {n: f"#{k}" for k, n in enumerate(stmt.operands)}
    letter: dict[str, str] = {}

    def name(i):
        if i not in letter:
            letter[i] = LETTERS[len(letter)] if len(letter) < len(LETTERS) else f"x{len(letter)}"
        return letter[i]
    for i in stmt.indices:
        name(i)

    def walk(e: Expr) -> Expr:
        if isinstance(e, Access):
            return Access(tensors[e.tensor], tuple(name(i) for i in e.indices))
        if isinstance(e, Index):
            return Index(name(e.name))
        if isinstance(e, Const):
            return e
        if isinstance(e, Unary):
            return Unary(e.fn, walk(e.arg))
        if isinstance(e, Binary):
            return Binary(e.op, walk(e.left), walk(e.right))
        if isinstance(e, Where):
            return Where(walk(e.cond), walk(e.left), walk(e.right))
        if isinstance(e, Stored):
            return Stored(walk(e.body))
        if isinstance(e, Dense):
            return Dense(walk(e.body))
        if isinstance(e, Reduce):
            idx = tuple(name(i) for i in e.indices)
            return Reduce(e.op, idx, walk(e.body), e.identity)
        raise TypeError(type(e).__name__)          # pragma: no cover
    expr = walk(stmt.expr)
    return Statement("out", tuple(letter[i] for i in stmt.indices), expr, tuple(tensors.values()))


# ------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class ProgramStep:
    """One step of a program: ``statement`` over ``inputs`` (value names: program inputs,
    earlier steps' outputs), its result the value ``output``, stored as ``format`` (the
    plan's format; ``out_format``: what its kernel is asked for, None: the kernel's own),
    its operands read as ``read_as`` (None: as stored) after conversion to ``dtype`` (None:
    none); ``origin``: the statement (from 1) it belongs to; ``text``: the step with the
    program's names."""

    statement: Statement
    inputs: tuple[str, ...]
    output: str
    format: str
    out_format: object
    read_as: tuple
    dtype: object
    origin: int
    text: str

    def key(self) -> tuple:
        return (canonical(self.statement), self.inputs, self.format, str(self.out_format), self.read_as,
                str(self.dtype))


@dataclass
class ProgramPlan:
    """The steps of a program (module docstring): ``steps`` in the order they run,
    ``outputs`` (output name -> the value holding it), ``shared``: the steps not run
    because an equal step ran, as ``(statement number, step text, the value reused)``;
    ``dead``: the statements no requested output needs; ``plans``: each planned statement's
    own plan."""

    statements: tuple[Statement, ...]
    steps: list[ProgramStep] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    shared: list[tuple[int, str, str]] = field(default_factory=list)
    dead: tuple[int, ...] = ()
    plans: dict[int, Plan] = field(default_factory=dict)

    @property
    def last_use(self) -> dict[str, int]:
        """Each value's last reading step (index into ``steps``)."""
        out: dict[str, int] = {}
        for n, s in enumerate(self.steps):
            for v in s.inputs:
                out[v] = n
        return out

    def __str__(self) -> str:
        n = len(self.steps)
        head = f"program of {len(self.statements)} statement{'s' if len(self.statements) != 1 else ''}: " \
               f"{n} step{'s' if n != 1 else ''}"
        if self.shared:
            head += f", {len(self.shared)} shared"
        if self.dead:
            head += f", statement{'s' if len(self.dead) != 1 else ''} {', '.join(str(d + 1) for d in self.dead)} " \
                    f"not needed"
        lines = [head]
        width = max((len(s.text) for s in self.steps), default=0)
        for k, s in enumerate(self.steps, 1):
            lines.append(f"  {k}. [{s.origin}] {s.text.ljust(width)}  {s.format}")
        for origin, text, value in self.shared:
            lines.append(f"  -  [{origin}] {text}  (shared: {value})")
        return "\n".join(lines)


class Builder:
    """Merges statements' plans into a :class:`ProgramPlan` (module docstring)."""

    def __init__(self, statements: tuple[Statement, ...], dead=()):
        self.plan = ProgramPlan(tuple(statements), dead=tuple(dead))
        self._by_key: dict[tuple, str] = {}
        self._alias: dict[str, str] = {}

    def forget(self, value: str) -> None:
        """``value`` is released: a later step equal to the one that made it runs again."""
        for key in [key for key, v in self._by_key.items() if v == value]:
            del self._by_key[key]

    def value(self, name: str) -> str:
        """The value a name holds (a shared step's output: the earlier step's)."""
        return self._alias.get(name, name)

    def add(self, origin: int, stmt: Statement, plan: Plan, kernel_steps) -> list[tuple[int, ProgramStep]]:
        """Add statement ``origin``'s (from 1) ``plan``; ``kernel_steps``: per plan step
        ``(out_format, read_as, dtype)`` as its kernel runs it.  Returns the steps to run
        (those no earlier step equals) as ``(position in plan.steps, step)``."""
        self.plan.plans[origin] = plan
        local: dict[str, str] = {}
        new: list[tuple[int, ProgramStep]] = []
        last = plan.steps[-1]
        for pos, (step, (out_format, read_as, dtype)) in enumerate(zip(plan.steps, kernel_steps)):
            inputs = tuple(self.value(local.get(n, n)) for n in step.inputs)
            output = stmt.output if step is last else f"{stmt.output}.{step.output}"
            text = str(stmt) if plan.single else _rename_text(step.text, {**{n: self.value(v) for n, v in local.items()},
                                                                       step.output: output})
            ps = ProgramStep(step.statement, inputs, output, step.format, out_format, tuple(read_as), dtype, origin,
                             text)
            key = ps.key()
            earlier = self._by_key.get(key)
            if earlier is not None:
                self._alias[output] = earlier
                self.plan.shared.append((origin, text, earlier))
            else:
                self._by_key[key] = output
                self.plan.steps.append(ps)
                new.append((pos, ps))
            local[step.output] = output
        self.plan.outputs[stmt.output] = self.value(stmt.output)
        return new


def _rename_text(text: str, names: dict[str, str]) -> str:
    """``text`` with each intermediate's plan name (``t0``) replaced by its program value."""
    if not names:
        return text
    pat = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?![\w.])")
    return pat.sub(lambda m: names[m.group(1)], text)
