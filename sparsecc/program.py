"""Programs of several statements: ``sc.compile("r[i] = ...\\nrr[] = sum[i](r[i] * r[i])")``
(docs/planning.md, Programs).

A :class:`Program` holds a tuple of ``Statement`` s (separated by newlines or ``;`` in the
text form).  A call binds the program's inputs by name, then for each statement a requested
output needs, in order: plans it from the values it reads (``sparsecc.plan``: its own plan,
merged into the program's by ``plan.program.Builder``, which drops steps equal to earlier
ones), runs the new steps - each a compiled kernel from ``make.make_kernel`` - and drops
values no later step reads.  It returns a dict of outputs by name.  No step computes with
NumPy or SciPy (operands of mixed dtypes are converted to the result's dtype first, as a
planned statement's are).
"""

from __future__ import annotations

import scipy.sparse as sp

from .errors import FormatError, ParseError, SparseccError
from .expr import Statement, bind_by_name
from .make import make_kernel
from .options import Options
from .parse import parse_notation
from .patterns import default_result_format
from .plan import check_optimize
from .plan.plan import single_plan
from .plan import program as _program
from .planned import _READ_AS, PlannedKernel

#: where a text holds more than one statement
SEPARATORS = ("\n", ";")


def is_program(text) -> bool:
    """Whether ``text`` holds several statements (a newline or ``;`` between two)."""
    return isinstance(text, str) and len(split(text)) > 1


def split(text: str) -> list[str]:
    """The statements of ``text``: split at newlines and ``;``, blank ones dropped."""
    parts = [text]
    for sep in SEPARATORS:
        parts = [p for q in parts for p in q.split(sep)]
    return [p.strip() for p in parts if p.strip()]


def parse_program(text: str) -> tuple[tuple[Statement, ...], list[str]]:
    """The statements of ``text`` and their texts; a ParseError names the statement."""
    if not isinstance(text, str):
        raise ParseError(f"a program is a string of statements, got {type(text).__name__}")
    texts = split(text)
    if not texts:
        raise ParseError("a program needs at least one statement")
    out = []
    for k, t in enumerate(texts):
        try:
            out.append(parse_notation(t))
        except ParseError as err:
            raise ParseError(f"statement {k + 1} ('{t}'): {err}") from None
    return tuple(out), texts


class Program:
    """Several statements run as one plan (module docstring).  ``prog(**operands)`` (or
    operands by position, in the order the program first reads them) returns a dict of
    outputs; ``prog.plan(...)`` the :class:`~sparsecc.plan.program.ProgramPlan` a call ran;
    ``steps_run``: the steps this program has run (shared steps count once)."""

    def __init__(self, statements, formats=None, options: Options | None = None, out_format=None,
                 prune: bool = False, check: bool = True, optimize=True, outputs=None, texts=None, source=None):
        statements = tuple(statements)
        if not statements or not all(isinstance(s, Statement) for s in statements):
            raise SparseccError("a program is a non-empty sequence of Statements")
        self.statements = statements
        self.texts = list(texts) if texts is not None else [str(s) for s in statements]
        self.source = source if source is not None else "\n".join(self.texts)
        self.outputs = _program.check(statements, outputs, self.texts)
        self.operands = _program.inputs_of(statements)
        formats = dict(formats or {})
        for name in formats:
            if name not in self.operands:
                raise FormatError(f"format given for {name!r}, which is not an input of the program "
                                  f"(inputs: {', '.join(self.operands)})")
        self.formats = formats
        if out_format is not None and not isinstance(out_format, dict):
            raise FormatError("a program's out_format is a dict by output name ({'C': 'csr'})")
        self.out_format = dict(out_format or {})
        for name in self.out_format:
            if name not in {s.output for s in statements}:
                raise FormatError(f"out_format names {name!r}, which no statement defines")
        self.options, self.prune, self.check = options, prune, check
        self.optimize = check_optimize(optimize)
        self.live = _program.live(statements, self.outputs)
        self.steps_run = 0
        self.last_plan: _program.ProgramPlan | None = None

    def __repr__(self):
        return f"<sparsecc.Program of {len(self.statements)} statements -> {', '.join(self.outputs)}>"

    def bind(self, *args, **kwargs) -> dict:
        return dict(zip(self.operands, bind_by_name("the program", self.operands, args, kwargs, "input")))

    def __call__(self, *args, **kwargs) -> dict:
        env = self.bind(*args, **kwargs)
        plan = self._run(env)
        return {name: env[plan.outputs[name]] for name in self.outputs}

    def plan(self, *args, **kwargs) -> _program.ProgramPlan:
        """The program's plan for these operands.  A statement reading an earlier output is
        planned from that output's statistics, so this runs the program's steps."""
        env = self.bind(*args, **kwargs)
        return self._run(env)

    def replay(self):
        """A function ``run(env) -> outputs`` that runs each live statement's kernel as the
        last call did, without the program's step table: for callers that know the next
        operands have the formats, dtypes and shapes of the last ones (``@sc.fused``'s trace
        key), so each statement's result format is the same.  A statement whose steps all
        repeated earlier ones is reused as the last call reused it; a planned statement runs
        through its kernel (which plans per statistics class, as a call would); values are
        released after their last reader.  None before the first call."""
        plan = self.last_plan
        if plan is None:
            return None
        ran = {ps.origin for ps in plan.steps}
        shared: dict[int, list[str]] = {}
        for origin, _, value in plan.shared:
            shared.setdefault(origin, []).append(value)
        alias: dict[str, str] = {}
        actions = []
        for k in self.live:
            stmt, origin = self.statements[k], k + 1
            ins = tuple(alias.get(n, n) for n in stmt.operands)
            if origin not in ran and len(shared.get(origin, ())) == len(plan.plans[origin].steps):
                alias[stmt.output] = alias.get(shared[origin][-1], shared[origin][-1])
                continue
            actions.append((self._kernel(stmt), ins, stmt.output))
        outputs = tuple((name, alias.get(name, name)) for name in self.outputs)
        keep = {v for _, v in outputs} | set(self.operands)
        last = {}
        for pos, (_, ins, _) in enumerate(actions):
            for v in ins:
                last[v] = pos
        drops = [tuple(v for v in dict.fromkeys(ins) if last[v] == pos and v not in keep)
                 for pos, (_, ins, _) in enumerate(actions)]
        program = self

        def run(env: dict) -> dict:
            for (kernel, ins, output), drop in zip(actions, drops):
                env[output] = kernel(*[env[n] for n in ins])
                for v in drop:
                    del env[v]
            program.steps_run += len(actions)
            return {name: env[v] for name, v in outputs}
        return run

    # ---------------------------------------------------------------- running
    def _kernel(self, stmt: Statement):
        named = {n: self.formats[n] for n in stmt.operands if n in self.formats}
        return make_kernel(stmt, (), named, self.options, self.out_format.get(stmt.output), self.prune, self.check,
                           None, self.optimize)

    def _run(self, env: dict) -> _program.ProgramPlan:
        dead = tuple(k for k in range(len(self.statements)) if k not in self.live)
        builder = _program.Builder(self.statements, dead)
        keep = set(self.outputs)
        # each value's last reader among the live statements: dropped after it
        last_reader: dict[str, int] = {}
        for k in self.live:
            for n in self.statements[k].operands:
                last_reader[n] = k
        casts: dict = {}
        for k in self.live:
            stmt = self.statements[k]
            kernel = self._kernel(stmt)
            values = [env[builder.value(n)] for n in stmt.operands]
            if isinstance(kernel, PlannedKernel):
                plan = kernel.plan(*values)
            else:
                sparse = frozenset(n for n, x in zip(stmt.operands, values) if sp.issparse(x))
                out_format = self.out_format.get(stmt.output)
                rf = default_result_format(stmt, sparse) if out_format is None else str(out_format)
                plan = single_plan(stmt, rf, "one loop nest")
            if plan.single:
                runs = [(self.out_format.get(stmt.output), tuple(self.formats.get(n) for n in stmt.operands), None)]
                kernels = [kernel]
            else:
                runs, kernels = self._steps(stmt, plan, kernel, values)
            new = builder.add(k + 1, stmt, plan, runs)
            for pos, ps in new:
                kk = kernels[pos]
                if isinstance(kk, tuple):         # a step of a planned statement
                    statement, fmts, out_format, prune = kk
                    named = {n: f for n, f in zip(statement.operands, fmts) if f is not None}
                    kk = make_kernel(statement, (), named, self.options, out_format, prune, self.check, None, False)
                args = []
                for n in ps.inputs:
                    x = env[n]
                    if ps.dtype is not None and x.dtype != ps.dtype:
                        ck = (n, ps.dtype)
                        if ck not in casts:
                            casts[ck] = x.astype(ps.dtype)
                        x = casts[ck]
                    args.append(x)
                env[ps.output] = kk(*args)
                self.steps_run += 1
            # dead values: earlier outputs no later statement reads, under any name that
            # holds them, and no requested output holds; a later equal step then runs again
            for n in stmt.operands:
                v = builder.value(n)
                if n in self.operands or v not in env:
                    continue
                names = [m for m in last_reader if builder.value(m) == v] + [v]
                if any(last_reader.get(m, -1) > k for m in names) or any(builder.value(o) == v for o in keep):
                    continue
                del env[v]
                builder.forget(v)
            for key in [c for c in casts if last_reader.get(c[0], -1) <= k]:
                del casts[key]
        self.last_plan = builder.plan
        for name in self.outputs:
            env[builder.plan.outputs[name]]   # noqa: B018  (a KeyError here is a bug)
        return builder.plan

    def _steps(self, stmt, plan, kernel, values):
        """The kernel runs of a planned statement's steps, as ``PlannedKernel._prepare_run``
        makes them: intermediates in the plan's formats, the last step in the statement's."""
        dtypes = tuple(x.dtype for x in values)
        out_dtype = kernel.result_dtype(dtypes)
        cast = out_dtype if any(d != out_dtype for d in dtypes) else None
        formats, runs, kernels = {}, [], []
        last = plan.steps[-1]
        for step in plan.steps:
            root = step is last
            fmts = tuple(self.formats.get(n) if n in stmt.operands else _READ_AS[formats[n]] for n in step.inputs)
            user = self.out_format.get(stmt.output)
            out_format = (user if user is not None else step.format) if root else step.format
            runs.append((out_format, fmts, cast if any(n in stmt.operands for n in step.inputs) else None))
            kernels.append((step.statement, fmts, out_format, self.prune if root else False))
            formats[step.output] = step.format
        return runs, kernels


def compile_program(text, formats=None, options=None, out_format=None, prune=False, check=True, optimize=True,
                    outputs=None) -> Program:
    """``sc.compile`` of a text of several statements (or a sequence of Statements)."""
    if isinstance(text, str):
        statements, texts = parse_program(text)
        source = text
    else:
        statements, texts, source = tuple(text), None, None
    return Program(statements, formats, options, out_format, prune, check, optimize, outputs, texts, source)
