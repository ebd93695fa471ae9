"""Planned calls: a kernel whose statement is a product of three or more factors runs as its
plan's steps (docs/planning.md).

``attach`` (called by ``Kernel.__init__`` for ``optimize=`` other than False) turns such a
kernel into a :class:`PlannedKernel`; every other kernel (two operands, a non-product) stays
a plain ``Kernel`` and its calls take exactly the usual path.  A planned call:

1. binds and reads its operands (SciPy/NumPy; anything else - Dask, torch, device arrays -
   takes the one-nest path as before);
2. looks its plan up by a coarse statistics class of the operands (format, dtype, the
   magnitude of every dimension, the density's power of two): a repeated call of the same
   class does not plan again; a new class plans (``sparsecc.plan.make_plan``);
3. runs each step as a compiled kernel through the usual call path (``Kernel`` objects over
   the step's statement, cached by statement, formats and options), each intermediate the
   SciPy/NumPy result of its step, stored in the plan's format (``out_format=``); the last
   step stores the result in the format the one nest would (or ``out_format``).

No step computes with NumPy or SciPy.  Operands of mixed dtypes are converted to the
result's dtype first (``astype``: what ``numpy.einsum`` computes in), so intermediates are
in the promoted dtype and integers stay exact.

``make.make_kernel`` calls ``attach``; ``dispatch.py`` names this executor's place (an
``every_call`` executor): ``attach`` is its ``claims`` by statement, ``PlannedKernel.__call__``
its ``run``, a class of its own so that two-operand kernels keep their exact call path.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import scipy.sparse as sp

from .errors import InexactPatternError, SparseccError
from .expr import Reduce, accesses, children, describe
from .formats import resolve
from .patterns import default_result_format
from .plan import Plan, check_optimize, make_plan, of_operand, product_form
from .plan import path as _path
from .plan.plan import _nested_reduce as nested_reduction, single_plan
from .runtime import call as _call
from .runtime.kernel import Kernel
from .runtime.operands import as_operand
from .runtime.validate import validate
from . import planned_fast as _fast
from .planned_fast import MISS as _MISS
from .planned_fast import stored as _stored

#: how an intermediate of each plan format is given to the step that reads it
_READ_AS = {"dense": None, "csr": None, "csc": None, "coo": None, "dcsr": "dcsr"}
#: step kernels, by (statement, formats, out_format, options, prune, check)
_STEPS: dict = {}
_SCALARS = (int, float, complex, bool, np.generic)


def attach(kernel: Kernel, optimize) -> None:
    """Make ``kernel`` plan its calls when its statement is a product of three or more
    factors (``optimize``: True, "greedy", "optimal" or a path); a bad ``optimize`` or a
    path its statement cannot follow is a SparseccError here, before any call."""
    optimize = check_optimize(optimize)
    stmt = kernel.stmt
    # its sums may be steps (plan/nested.py): nested ones, and one over several indices into
    # a result that may be sparse
    nested = nested_reduction(stmt.expr, True) or (_may_be_sparse(kernel) and _multi_reduction(stmt.expr))
    if optimize is False and not nested:
        return
    why: list[str] = []
    prod = product_form(stmt, why)
    if isinstance(optimize, tuple):
        n = len(prod.factors) if prod is not None else len([a for a in accesses(stmt.expr) if a.indices])
        tree = _path.tree_from_path(optimize, n)
        if prod is None and not _path.is_single(tree, n):
            raise SparseccError(f"optimize= path {list(optimize)!r}: '{kernel.source}' cannot be computed in "
                                f"steps ({why[0] if why else 'not a product'}); only its one loop nest runs it")
    if (prod is None and not nested) or kernel.options.device != "cpu":
        return
    kernel._optimize = optimize
    kernel._plans = {}
    kernel._runs = {}
    kernel._last_run = _NO_RUN     # (plan, step kernels, planned in steps?, each step's stored entries...)
    kernel._fast = None         # the repeated call of the class called last (planned_fast.py)
    kernel._fasts = {}          # by statistics class
    kernel.__class__ = PlannedKernel
    # a fresh dict for the new class: CPython 3.11 specialises attribute access on an instance's
    # values laid out for its class, and an object whose class changed keeps its old class's
    # layout - every ``kernel.attr`` of its calls then took the generic lookup (~270 machine
    # instructions each, ~1 us a repeated planned call in all)
    kernel.__dict__ = dict(kernel.__dict__)


def _may_be_sparse(kernel) -> bool:
    """Whether ``kernel``'s result may be stored sparse (``out_format``, else the default's
    rule: rank 0 and 1 results are dense)."""
    spec = kernel.out_format
    if spec is None:
        return len(kernel.stmt.indices) >= 2
    if isinstance(spec, str):
        return spec.strip().lower() != "dense"
    return not getattr(spec, "is_dense", False)


def _multi_reduction(e) -> bool:
    """Whether ``e`` holds a reduction over two or more indices."""
    if isinstance(e, Reduce) and len(e.indices) > 1:
        return True
    return any(_multi_reduction(c) for c in children(e))


def _kind(x) -> bool:
    return isinstance(x, np.ndarray) or sp.issparse(x) or isinstance(x, _SCALARS)


def _class_key(values) -> tuple:
    """The statistics class of a call's operands (a plan is reused within one): per operand
    its type (format), value dtype, each dimension's bit length and, for a sparse one, the
    bit length of its elements per stored entry."""
    key = []
    for x in values:
        shape = x.shape
        if isinstance(x, np.ndarray):
            key.append((np.ndarray, x.dtype, tuple(map(int.bit_length, shape))))
        else:
            n = x.data.size if type(x) in _COMPRESSED else x.nnz
            key.append((type(x), x.dtype, tuple(map(int.bit_length, shape)),
                        (math.prod(shape) // (n or 1)).bit_length()))
    return tuple(key)


#: ``PlannedKernel._last_run`` before any planned call: no plan, no step kernels
_NO_RUN = (None, (), False)

_COMPRESSED = frozenset({sp.csr_array, sp.csr_matrix, sp.csc_array, sp.csc_matrix})
_DIRECT = frozenset({np.ndarray, sp.coo_array, sp.coo_matrix}) | _COMPRESSED


class PlannedKernel(Kernel):
    """A kernel whose calls run its plan (module docstring).  ``plan(*operands)`` gives the
    plan a call with those operands runs; ``ir(stage, step=k)`` the IR of the k-th step
    (from 1) of the last planned call."""

    def __call__(self, *args, **kwargs):
        fast = self._fast
        if fast is not None:
            if not kwargs:
                out = fast(self, args)  # planned_fast.py: the class's repeated call, or MISS
                if out is not _MISS:
                    return out
            elif not args and len(kwargs) == len(self.stmt.operands):
                # index notation by name: every operand, nothing else
                try:
                    ops = tuple([kwargs[n] for n in self.stmt.operands])
                except KeyError:
                    ops = None
                if ops is not None:
                    out = fast(self, ops)
                    if out is not _MISS:
                        return out
        return self._call_general(args, kwargs)

    # what the last call ran, kept as one tuple (``_last_run``: a repeated call stores it at once)
    @property
    def _last_plan(self) -> Plan | None:
        return self._last_run[0]

    @property
    def _last_steps(self) -> tuple:
        """The step kernels of the last call planned in steps (kept through later calls)."""
        return self._last_run[1]

    @property
    def _planned_last(self) -> bool:
        return self._last_run[2]

    @property
    def _last_sizes(self) -> tuple:
        return self._last_run[3:]

    def _call_general(self, args, kwargs):
        self._last_run = (None, self._last_run[1], False)
        ops = args
        if kwargs or len(args) != len(self.stmt.operands) or not self.stmt.operands[0].startswith("#"):
            ops = self.bind(*args, **kwargs)
        for x in ops:
            if type(x) not in _DIRECT:
                if self._library is not None or not all(_kind(x) for x in ops):
                    return _call.call(self, *args, **kwargs)
                ops = self._values(ops)
                break
        if self._library is not None:
            return _call.call(self, *args, **kwargs)
        key = _class_key(ops)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan(ops)
        if plan.single:
            try:
                out = _call.call(self, *ops)
            except InexactPatternError:
                # its sparse result would store entries without a term (known once the one nest
                # compiled, before it ran): the reductions one index a step (plan/nested.py)
                plan = self._plans[key] = self._make_plan(ops, split_reductions=True)
                if plan.single:
                    raise
            else:
                self._last_run = (plan, self._last_run[1], False, _stored(out))
                self._install(key, plan, ())
                return out
        out = self._run(plan, ops)
        self._install(key, plan, self._runs[(id(plan), tuple(x.dtype for x in ops))])
        return out

    def _install(self, key, plan: Plan, ready) -> None:
        """Make the next call of class ``key`` take its repeated call (``planned_fast``)."""
        fast = self._fasts.get(key)
        if fast is None:
            fast = _fast.build(self, key, plan, *ready)
            if fast is None:
                return
            self._fasts[key] = fast
        self._fast = fast

    def last_formats(self):
        """As ``Kernel.last_formats``; after a planned call, its last step's."""
        if self._planned_last:
            return self._last_steps[-1].last_formats()
        return Kernel.last_formats(self)

    def last_specialization(self):
        """As ``Kernel.last_specialization``; after a planned call, its last step's."""
        if self._planned_last:
            return self._last_steps[-1].last_specialization()
        return Kernel.last_specialization(self)

    def _values(self, ops) -> list:
        whats = self.operand_descriptions()
        return [x if isinstance(x, np.ndarray) or sp.issparse(x) else as_operand(x, w) for x, w in zip(ops, whats)]

    def plan(self, *args, **kwargs) -> Plan:
        """The plan a call with these operands runs (planned once per statistics class)."""
        ops = self.bind(*args, **kwargs)
        if not all(_kind(x) for x in ops):
            return single_plan(self.stmt, "dense", "one loop nest: operands other than NumPy/SciPy arrays")
        return self._plan_for(self._values(ops))

    def steps_for(self, values):
        """For front ends that run the steps themselves (``sparsecc.torch``'s autograd runs
        each step as its own differentiable call): ``(plan, step kernels, result dtype)`` for
        a call on ``values`` (NumPy/SciPy, operand order), or None where the call runs as one
        nest (a one-step plan, an AOT kernel, other operand kinds).  Each step kernel takes
        ``step.inputs`` (operands converted to the result dtype first, intermediates)."""
        if self._library is not None or not all(_kind(x) for x in values):
            return None
        values = self._values(values)
        plan = self._plan_for(values)
        if plan.single:
            return None
        dtypes = tuple(x.dtype for x in values)
        ready = self._runs.get((id(plan), dtypes))
        if ready is None:
            ready = self._runs[(id(plan), dtypes)] = self._prepare_run(plan, dtypes)
        return plan, ready[0], ready[1]

    def _plan_for(self, values) -> Plan:
        key = _class_key(values)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan(values)
        return plan

    def _make_plan(self, values, split_reductions: bool = False) -> Plan:
        stmt = self.stmt
        stats, dense = {}, {}
        for name, x in zip(stmt.operands, values):
            spec = self.formats.get(name)
            if spec is not None:
                try:
                    dense[name] = resolve(spec, np.ndim(x), describe(name)).is_dense
                except SparseccError:
                    dense[name] = not sp.issparse(x)
            else:
                dense[name] = not sp.issparse(x)
            # a sparse operand stored dense is read as dense (every element), and the reverse.
            # Statistics read the indices: check them first, whatever check= says (once per
            # statistics class; an index past its dimension made bincount abort the process)
            validate(x, describe(name))
            stats[name] = of_operand(x)
        sparse = frozenset(n for n in stmt.operands if not dense[n])
        if self.out_format is None:
            rf = default_result_format(stmt, sparse)
        elif isinstance(self.out_format, str):
            rf = self.out_format.strip().lower()
        else:
            rf = "dense" if getattr(self.out_format, "is_dense", False) else str(self.out_format)
        itemsize = self.result_dtype([x.dtype for x in values]).itemsize
        return make_plan(stmt, stats, dense, rf, itemsize, self._optimize,
                         one_nest_handwritten=self._handwritten(values, rf), formats=self._storage(values),
                         split_reductions=split_reductions)

    def _storage(self, values) -> dict[str, str]:
        """Each sparse operand's storage format by name, as its step reads it (``formats=``'s
        name, else its own: ``operands.default_format``): the fact ``plan/order.py`` reads."""
        from .runtime.operands import default_format
        out = {}
        for name, x in zip(self.stmt.operands, values):
            spec = self.formats.get(name)
            fmt = spec.strip().lower() if isinstance(spec, str) else (None if spec is not None else default_format(x)[0])
            if fmt:
                out[name] = fmt
        return out

    def _handwritten(self, values, rf: str) -> bool:
        """Whether the one nest for these operands runs through a hand-written kernel
        (``runtime/fast_paths.route``: MTTKRP, SDDMM, ...): a fact the plan's cost takes."""
        from .runtime import fast_paths
        from .runtime.operands import default_format
        try:
            fmts = []
            for name, x in zip(self.stmt.operands, values):
                f = resolve(self.formats.get(name) or default_format(x)[0], np.ndim(x), describe(name))
                if not f.is_dense:
                    idx = getattr(x, "indices", None)
                    idx = idx if idx is not None else x.coords[0]
                    f = f.with_widths(idx.dtype.itemsize * 8, idx.dtype.itemsize * 8)
                fmts.append(f)
            out = None if rf == "dense" else resolve(rf, len(self.stmt.indices), "the result").with_widths(64, 64)
            dtypes = (self.result_dtype([x.dtype for x in values]).name,) * len(values)
            return fast_paths.serves(self.stmt, tuple(fmts), dtypes, out, self.options.device)
        except Exception:       # noqa: BLE001 - a format or operand the route cannot read: not hand-written
            return False

    def _run(self, plan: Plan, values):
        stmt = self.stmt
        dtypes = tuple(x.dtype for x in values)
        key = (id(plan), dtypes)        # plans live in self._plans: their ids stay theirs
        ready = self._runs.get(key)
        if ready is None:
            ready = self._runs[key] = self._prepare_run(plan, dtypes)
        kernels, out_dtype, cast = ready
        env = dict(zip(stmt.operands, values))
        if cast:
            # numpy.einsum computes in the result's dtype: intermediates too (integers exact)
            env = {n: (x if x.dtype == out_dtype else x.astype(out_dtype)) for n, x in env.items()}
        for step, k in zip(plan.steps, kernels):
            env[step.output] = k(*[env[n] for n in step.inputs])
        self._record(plan, kernels, env)
        return env[plan.steps[-1].output]

    def _record(self, plan: Plan, kernels, env) -> None:
        """Keep a planned call's plan, step kernels and each step's stored entries."""
        self._last_run = (plan, kernels, True) + tuple([_stored(env[s.output]) for s in plan.steps])

    @property
    def last_plan(self) -> Plan | None:
        """The plan the last planned call ran, with the entries each step's result actually
        stored beside its estimate (``str(k.last_plan)``); None before a planned call."""
        if self._last_plan is None:
            return None
        return dataclasses.replace(self._last_plan, actual=tuple(self._last_sizes))

    def _prepare_run(self, plan: Plan, dtypes) -> tuple:
        """The step kernels of ``plan`` for operands of ``dtypes``, the result's dtype, and
        whether operands are converted to it first."""
        stmt = self.stmt
        out_dtype = self.result_dtype(dtypes)
        formats, kernels = {}, []
        last = plan.steps[-1]
        for step in plan.steps:
            root = step is last
            fmts = tuple(self.formats.get(n) if n in stmt.operands else _READ_AS[formats[n]] for n in step.inputs)
            out_format = (self.out_format if self.out_format is not None else step.format) if root else step.format
            kernels.append(_step_kernel(step, fmts, out_format, self.options, self.prune if root else False,
                                        self.check))
            formats[step.output] = step.format
        # (a statement split at its nested reductions computes each step in its own dtypes)
        cast = product_form(stmt) is not None and any(d != out_dtype for d in dtypes)
        return tuple(kernels), out_dtype, cast

    def ir(self, stage: str = "mlir", step: int | None = None) -> str:
        """The IR of the one nest (``step=None``, as ``Kernel.ir``) or of step ``step``
        (from 1) of the last planned call."""
        if step is None:
            return Kernel.ir(self, stage)
        steps = self._last_steps
        if not steps:
            raise SparseccError(f"'{self.source}' has run no planned call yet; call it (or its plan has one "
                                f"step: ir() without step=)")
        if not isinstance(step, int) or isinstance(step, bool) or not 1 <= step <= len(steps):
            raise SparseccError(f"step={step!r}: the last plan has steps 1..{len(steps)}")
        return steps[step - 1].ir(stage)


def _step_kernel(step, fmts, out_format, options, prune, check) -> Kernel:
    key = (step.statement, fmts, out_format, options, prune, check)
    try:
        k = _STEPS.get(key)
    except TypeError:           # unhashable formats: no memo
        key, k = None, None
    if k is None:
        k = Kernel(step.statement, dict(zip(step.statement.operands, fmts)), options, source=step.text,
                   out_format=out_format, prune=prune, check=check)
        attach(k, False)        # a step reducing over several indices into a sparse result: split
        if key is not None:
            _STEPS[key] = k
    return k


def plan_of(k: Kernel, args, kwargs) -> Plan:
    """``Kernel.plan`` of a kernel that does not plan: its one loop nest."""
    k.bind(*args, **kwargs)
    return single_plan(k.stmt, "dense" if k.out_format is None else str(k.out_format), "one loop nest: " + _why(k))


def _why(k: Kernel) -> str:
    why: list[str] = []
    if product_form(k.stmt, why) is None:
        return why[0] if why else "not a product"
    return "optimize=False"
