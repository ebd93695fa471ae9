"""Which executor runs a kernel call: the one place that decides, from the operands' kinds.

A kernel's call (``Kernel.__call__``, ``runtime/call.py``) runs in memory - NumPy and SciPy
operands, the compiled kernel on their buffers - unless an executor registered here claims
it.  The runtime asks :func:`route` (installed with ``call.set_router`` when this module is
imported, which ``import sparsecc`` does) at a call's first operand of a type the in-memory
path does not take; the repeated-call path never asks (it takes only operands of its own
plan's kind), so in-memory calls cost what they did.

An executor is an object with:

* ``claims(kernel, operands) -> bool``: whether it runs this call (``operands``: bound, in
  the kernel's operand order; nothing validated or converted yet);
* ``run(kernel, operands)``: the call's result;
* ``every_call`` (bool): ask it at the start of every call that leaves the repeated-call
  path, not only at an operand the in-memory path does not take.  For executors that claim
  calls with in-memory operands: the planner's plans of kernels (issue 24) are one more
  executor, ``claims`` from the kernel's statement and the operands' statistics, ``run``
  each step's kernel.  A kernel whose calls it claims never builds the in-memory
  repeated-call path (only an in-memory call does), so such an executor keeps its own.

Plans are decided here too, once per kernel rather than per call: :func:`plan_calls` (which
``make.make_kernel`` calls for every kernel it makes) turns a kernel whose statement is a
product of three or more factors into a planned kernel (``sparsecc/planned.py``: the plan,
cached per statistics class of the operands, and its steps run as kernels).  A planned
kernel's call with operands the in-memory path does not take (Dask, a device) comes back
here as any kernel's does.  Two-operand kernels are left as they are, so their calls cost
what they did.

Registered in the order they are asked: the device (``device="cuda"`` kernels with an
operand on the GPU: ``runtime/device.py``), then the front ends that register themselves
when imported.  A front end whose library ``import sparsecc`` must not import (Dask) is
named in :data:`ON_DEMAND` by the package its operands' types come from: a call meeting
such an operand imports the front end, which registers its executor, and is routed again.
"""

from __future__ import annotations

import importlib

from . import planned as _planned
from .runtime import call as _call

MISS = _call.MISS

#: front ends imported on demand: the top-level package of an operand type's module -> the
#: front end, which calls :func:`register` when it is imported
ON_DEMAND = {"dask": "sparsecc.dask"}

_executors: list = []


def register(executor, first: bool = False) -> None:
    """Ask ``executor`` (see the module docstring) before the in-memory path: after the
    executors registered so far, or before them (``first``).  Registering it again moves it."""
    if executor in _executors:
        _executors.remove(executor)
    if first:
        _executors.insert(0, executor)
    else:
        _executors.append(executor)
    _Router.every_call = any(getattr(e, "every_call", False) for e in _executors)


def unregister(executor) -> None:
    """Stop asking ``executor`` (registered with :func:`register`)."""
    if executor in _executors:
        _executors.remove(executor)
    _Router.every_call = any(getattr(e, "every_call", False) for e in _executors)


def executors() -> tuple:
    """The registered executors, in the order they are asked."""
    return tuple(_executors)


def plan_calls(kernel, optimize) -> None:
    """Make ``kernel`` run planned calls where its statement allows (``optimize``: True,
    "greedy", "optimal" or a numpy.einsum path; False leaves it one loop nest).  A bad
    ``optimize`` is a SparseccError here, before any call.  (With False a statement whose
    body holds a reduction still runs it as a step of its own: ``plan/nested.py``.)"""
    _planned.attach(kernel, optimize)


def executor_for(kernel, operands):
    """The executor that claims ``kernel``'s call on ``operands``, or None (in memory)."""
    for e in _executors:
        if e.claims(kernel, operands):
            return e
    pending = {m for m in (type(x).__module__.partition(".")[0] for x in operands) if m in ON_DEMAND}
    for package in sorted(pending):
        importlib.import_module(ON_DEMAND[package])      # registers its executor
        del ON_DEMAND[package]
    return executor_for(kernel, operands) if pending else None


class _Router:
    """What the runtime calls (``call.set_router``): the claimed call's result, else ``MISS``."""

    every_call = False

    def __call__(self, kernel, operands):
        e = executor_for(kernel, operands)
        return MISS if e is None else e.run(kernel, operands)


def route(kernel, operands):
    """``kernel``'s call on ``operands`` run by the executor that claims it, else ``MISS``."""
    return _ROUTER(kernel, operands)


class DeviceExecutor:
    """``device="cuda"`` kernels called with an operand that lives on the GPU (CuPy, torch
    CUDA, ``__cuda_array_interface__``, DLPack): ``runtime/device.py``, no copies."""

    every_call = False

    def claims(self, kernel, operands) -> bool:
        if getattr(kernel, "options", None) is None or kernel.options.device == "cpu":
            return False
        from .runtime import device
        return any(device.is_device(x) for x in operands)

    def run(self, kernel, operands):
        from .runtime import device
        return device.call(kernel, list(operands))


_ROUTER = _Router()
register(DeviceExecutor())
_call.set_router(_ROUTER)
