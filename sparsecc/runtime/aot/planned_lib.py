"""A planned kernel of a loaded ahead-of-time library (``sc.aot.Planned``; docs/aot.md
"Planned kernels"): its plan, fixed at build time, runs step by step through the library's
step kernels, each validating its operands as any loaded kernel does."""

from __future__ import annotations

from ...errors import SparseccError
from ...formats import Format
from .manifest import checked_digest, statement_from_json


class LibraryPlanned:
    """A loaded planned kernel: ``k(*operands)`` runs its steps in order (intermediates are
    the step kernels' results, as the JIT's planned calls have them); ``steps`` lists the
    step kernels, ``plan`` the manifest's record of the plan; ``ir(stage, step=n)`` a step's
    IR (from 1)."""

    def __init__(self, kernel, steps, plan: dict):
        self._kernel, self.steps, self.plan = kernel, tuple(steps), plan
        self.stmt, self.source = kernel.stmt, kernel.source
        self._run = tuple((k, tuple(s["inputs"]), s["output"]) for k, s in zip(self.steps, plan["steps"]))

    def __repr__(self):
        return f"<sparsecc.aot planned kernel '{self.source}': {len(self.steps)} steps>"

    def __call__(self, *args, **kwargs):
        env = dict(zip(self.stmt.operands, self._kernel.bind(*args, **kwargs)))
        out = None
        for k, inputs, output in self._run:
            out = env[output] = k(*[env[n] for n in inputs])
        return out

    def ir(self, stage: str = "mlir", step: int | None = None) -> str:
        if not isinstance(step, int) or isinstance(step, bool) or not 1 <= step <= len(self.steps):
            raise SparseccError(f"'{self.source}' runs a plan of {len(self.steps)} steps: give step=1.."
                                f"{len(self.steps)}")
        return self.steps[step - 1].ir(stage)


def load_planned(name: str, kname: str, spec: dict, kernels: dict, lib, manifest_of: str) -> LibraryPlanned:
    """Planned kernel ``kname`` of library ``name``: its record checked against the digest the
    library embeds and its steps against the library's kernels, before anything is called."""
    from ..kernel import Kernel

    bad = checked_digest(name, kname, spec, lib, manifest_of)
    try:
        stmt = statement_from_json(spec["stmt"])
        fmts = {o["key"]: Format.dense(len(o["indices"])) if o["format"] == "dense" else Format.parse(o["format"])
                for o in spec["operands"]}
        steps = spec["plan"]["steps"]
        known = set(stmt.operands)
        ready = []
        for s in steps:
            step = kernels.get(s["kernel"]) if isinstance(s, dict) else None
            if step is None or not all(x in known for x in s["inputs"]):
                raise ValueError(f"step {s!r} is not a step kernel of the library reading what is computed before it")
            ready.append(step)
            known.add(s["output"])
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as err:     # SparseccError too
        raise bad(f"malformed plan ({type(err).__name__}: {err})") from None
    if not ready:
        raise bad("a plan of no steps")
    out_format = Format.parse(spec["out_format"]) if spec["out_format"] else "dense"
    k = Kernel(stmt, fmts, source=spec["source"], out_format=out_format, prune=spec.get("prune", False))
    return LibraryPlanned(k, ready, spec["plan"])
