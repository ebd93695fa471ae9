"""``sc.compile(..., autotune=True)``: :class:`AutotunedKernel` explores on its first call
(or finds the earlier choice in memory or on disk) and then runs the chosen kernel."""

from __future__ import annotations

import threading
import warnings

from ..errors import FormatError, ShapeError
from ..expr import accesses, describe
from ..options import DEFAULT, Options
from . import runner
from .candidates import _check_spec, _is_block
from .report import ExploreReport, _spec_name
from . import storage

#: an autotuned kernel's exploration stops starting new candidates after this many seconds
AUTOTUNE_BUDGET_S = 60.0
AUTOTUNE_REPEAT = 5


class AutotunedKernel:
    """``sc.compile(expr, ..., autotune=True)``: on its first call, explores formats on those
    operands (or finds the earlier choice in memory or on disk), then runs the chosen kernel;
    later calls go straight to it, whatever their operands.

    A format given to ``compile`` fixes that operand (a list of formats: the candidates to
    try); the other sparse operands are explored.  ``choice``: ``(formats, options)`` once
    chosen; ``tuned_from``: ``"explored"``, ``"memory"`` or ``"disk"``; ``report``: the
    :class:`ExploreReport` when this kernel explored."""

    def __init__(self, expr: str, formats: tuple, named: dict, options: Options | None, out_format,
                 prune: bool, check: bool):
        from ..make import make_kernel as _kernel
        self.options = options or DEFAULT
        plain_pos = tuple(None if isinstance(f, (list, tuple)) else f for f in formats)
        plain_named = {k: (None if isinstance(v, (list, tuple)) else v) for k, v in named.items()}
        # the plain kernel validates the expression, options and fixed formats now
        self._base = _kernel(expr, plain_pos, plain_named, self.options, out_format, prune, check)
        stmt = self._base.stmt
        self.stmt, self.source = stmt, expr
        self.out_format, self.prune, self.check = out_format, bool(prune), bool(check)
        given = dict(zip(stmt.operands, formats))
        given.update(named)
        self._given = {k: v for k, v in given.items() if v is not None}
        ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
        for name, v in self._given.items():
            if isinstance(v, (list, tuple)):
                if not v:
                    raise FormatError(f"{describe(name)}: an empty list of candidate formats")
                rank = ranks[name]
                for spec in v:
                    _check_spec(spec, rank, describe(name))
        self.choice: tuple | None = None
        self.tuned_from: str | None = None
        self.report: ExploreReport | None = None
        self._chosen = None
        self._fallback = None
        self._lock = threading.Lock()

    def __repr__(self):
        state = "not tuned yet" if self.choice is None else \
            f"chose {', '.join(_spec_name(s) for s in self.choice[0])} ({self.tuned_from})"
        return f"<sparsecc.AutotunedKernel '{self.source}' ({state})>"

    def _tune(self, args, kwargs):
        with self._lock:
            if self._chosen is not None:
                return self._chosen
            values = self._base.bind(*args, **kwargs)
            if any(type(v).__module__.startswith("dask.") for v in values):
                from ..dask.tune import representative_blocks     # Dask operands: tuned on one block
                values = representative_blocks(self.stmt, values)
            names = self.stmt.operands
            stmt_values, _ = runner._validated(self.stmt, names, values)
            fixed = {k: v for k, v in self._given.items() if not isinstance(v, (list, tuple))}
            cands = {k: list(v) for k, v in self._given.items() if isinstance(v, (list, tuple))}
            key = storage.tuning_key(self.source, stmt_values, {**fixed, **{k: tuple(v) for k, v in cands.items()}},
                             self.options, self.out_format)
            with storage._memory_lock:
                got = storage._memory.get(key)
            source = "memory"
            if got is None:
                got, source = storage.load_choice(key), "disk"
            if got is None or len(got[0]) != len(names):
                restrict = {k: [v] for k, v in fixed.items()}
                restrict.update(cands)
                restrict = {names.index(k): v for k, v in restrict.items()}
                explore_args = {"formats": restrict or None, "options": self.options, "out_format": self.out_format,
                                "repeat": AUTOTUNE_REPEAT, "budget_s": AUTOTUNE_BUDGET_S,
                                "convert": False}      # timed as it will be called: operands as given
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)   # a cap or budget: the report says so
                    report = runner.explore(self.source, *stmt_values, **explore_args)
                self.report = report
                if not any(r.ok for r in report.rows):
                    # nothing ran: the plain kernel raises the real error for these operands
                    self._chosen = self._base
                    self.tuned_from = "explored"
                    return self._chosen
                got = (report.best_formats, report.best_options)
                storage.store_choice(key, got[0], got[1], {"expression": self.source,
                                                   "formats": [_spec_name(s) for s in got[0]],
                                                   "median_s": report.best_row.median_s})
                source = "explored"
            with storage._memory_lock:
                storage._memory[key] = got
            self.choice, self.tuned_from = got, source
            self._chosen = runner._compile(self.source, got[0], got[1], self.out_format, self.prune, self.check)
            return self._chosen

    def __call__(self, *args, **kwargs):
        k = self._chosen
        if k is None:
            k = self._tune(args, kwargs)
        try:
            if self.choice is not None and any(_is_block(s) for s in self.choice[0]) and \
                    any(type(v).__module__.startswith("dask.") for v in (*args, *kwargs.values())):
                raise ShapeError("a block format over Dask chunks of any size: run as CSR")
            return k(*args, **kwargs)
        except ShapeError:
            # a chosen BSR block size that does not divide a later operand's shape: run that
            # operand as CSR instead (every other format takes any operand)
            if self.choice is None or not any(_is_block(s) for s in self.choice[0]):
                raise
            if self._fallback is None:
                fmts = tuple("csr" if _is_block(s) else s for s in self.choice[0])
                self._fallback = runner._compile(self.source, fmts, self.choice[1], self.out_format, self.prune,
                                          self.check)
            return self._fallback(*args, **kwargs)

    def ir(self, stage: str = "mlir") -> str:
        """The chosen kernel's IR (the plain kernel's before the first call)."""
        return (self._chosen or self._base).ir(stage)


