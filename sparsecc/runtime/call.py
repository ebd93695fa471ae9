"""The in-memory call path: from a kernel call's operands to the native call and back.

Per call: operands read and validated, the call plan of their kind looked up (made by
``runtime/plans.py`` on a miss), buffers packed (``memref.ArgPacker``), the ctypes call of
``sparsecc_entry``, a ``MemoryError`` when it returns 1 (an ``OperandError`` when a guarded
index was out of range: 2), and the result wrapped.  A repeated call of the plan used last
runs through that plan's straight-line path (its source: ``runtime/fast_call.py``).
:func:`call_with_buffers` is the same native call for kernels built outside ``Kernel`` (the
op library's structural kernels).

This path runs NumPy, SciPy (and what ``operands.as_operand`` converts) in memory.  A call
with an operand of another kind (a Dask array, a device array) is handed to the router that
``sparsecc/dispatch.py`` installs (:func:`set_router`): the one place that decides which
executor runs a call.  The runtime imports no front end.

``Kernel.__call__`` is :func:`call` (``Kernel._prepare``: ``plans.prepare``): the ``Kernel``
API lives in ``runtime/kernel.py``.
"""

from __future__ import annotations

import ctypes

import numpy as np
import scipy.sparse as sp

from ..errors import OperandError
from . import specialization as _spec
from .loader import STATS, Loaded
from . import memref as _memref
from .memref import describe as describe_array, specifier
from .operands import INT32_MAX, as_operand, index_dtypes, nnz_bound
from .results import as_csc, release, result_view, wrap
from .specialization import _check_blocks, huge_dimension
from .validate import SMALL, check_deferred, small_compressed_ok_typed, compressed_structure_ok_typed, known_orders, validate
from .fast_call import _fast_source
# the call plans (runtime/plans.py), under the names other modules import from here
from .plans import (_BSR_TYPES, _DIRECT, _SPARSE_TYPES, _CallInfo, _key_of, _Plan, _resolve_cached,  # noqa: F401
                    _to_bsr, bind_named, operand_widths, prepare)

#: the repeated-call path is on (tests that spy on ``ArgPacker.pack`` turn it off)
FAST = True
_MISS = object()
#: what a router returns for a call it leaves to this path
MISS = _MISS

#: ``route(kernel, operands)``: the result of a call some other executor takes, else
#: ``MISS``; set from above (sparsecc/dispatch.py).  None: every call runs here
_router = None


def set_router(route) -> None:
    """Install ``route`` (a callable with a bool attribute ``every_call``): the general path
    asks it once per call, at the call's first operand of a type this path does not take
    (``every_call``: before it looks at any operand).  The repeated-call path never asks: it
    takes only operands of its own plan's kind."""
    global _router
    _router = route


def call(self, *args, **kwargs):
    """``Kernel.__call__``: the plan used last, through its repeated-call path when the
    operands are of its kind (:func:`_fast_source`: every check still runs), else the
    general path."""
    info = self._call_info
    if info is not None and not kwargs and FAST:
        fast = info.fast
        if fast is not None:
            got = fast(self, args)
            if got is not _MISS:
                return got
    return _call_general(self, args, kwargs)


def _call_general(self, args, kwargs):
    info = self._call_info or self._static()
    if kwargs or info.named or len(args) != info.n:
        args = self.bind(*args, **kwargs)
    route = _router                     # asked at most once per call
    if route is not None and (route.every_call or (self._auto_bsr and any(type(x) not in _DIRECT for x in args))):
        got = route(self, args)
        if got is not _MISS:
            return got
        route = None
    if self._auto_bsr:
        args = _to_bsr(args, self._auto_bsr, info.whats)
    # every operand is read and (check=True) validated on every call; the plan caches
    # only what follows from the operands' kinds (type, dtype, rank) and widths
    check = self.check
    defer = [] if check else None       # indices range checks a guarded kernel does itself
    values, keys, shapes, counts = [], [], [], []
    orders = None           # (operand, sorted?) where validation's native scan found out
    for x, what in zip(args, info.whats):
        t = type(x)
        if t is np.ndarray:
            keys.append((t, x.dtype, x.ndim))
            counts.append(x.size)
        else:
            if t not in _DIRECT:
                if route is not None:       # another executor's operand? (Dask, a device: dispatch.py)
                    got = route(self, args)
                    if got is not _MISS:
                        return got
                    route = None
                x = as_operand(x, what)
                t = type(x)
            if check:
                ordered = validate(x, what, defer, len(values))
                if ordered is False and x.has_canonical_format:
                    # SciPy's flag says canonical, the scan says not: every later step (SciPy's
                    # own sum_duplicates included) would trust the flag; a flagless view
                    x = _flagless(x)
                if ordered is not None:
                    orders = (orders or []) + [(x, ordered)]
            if t in _SPARSE_TYPES:
                data = x.data
                # the index dtypes: a kernel reads int32 or int64 index arrays as they are
                keys.append((t, data.dtype, len(x.shape), index_dtypes(x)))
                counts.append(data.size)
            else:
                keys.append(_key_of(x))
                counts.append(nnz_bound(x))
        values.append(x)
        shapes.append(x.shape)
    sizes = info.sizes(shapes)
    out_shape = [sizes[j] for j in info.out_slots]
    wide = None            # does anything need 64-bit indices?  (usually one cheap test)
    # the result's entries: by a bound the statement gives before the kernel runs (kernel.py)
    entries_wide = self._entries_wide(values, counts, out_shape)
    if max(counts + sizes) > INT32_MAX or entries_wide:
        wide = (tuple((max(s, default=0) > INT32_MAX, n > INT32_MAX) for s, n in zip(shapes, counts)),
                max(out_shape, default=0) > INT32_MAX, entries_wide)
    huge = huge_dimension(sizes, counts)
    pkey = (tuple(keys), wide, tuple(out_shape) if self._shape_keyed else None, huge)
    plan = info.plans.get(pkey)
    if plan is not None and plan.library is None and _spec._loaded.get(plan.key) is plan.comp:
        STATS.hits += 1                 # a call served by a loaded kernel
    elif plan is None or not plan.current(self):
        plan = info.plans[pkey] = self._prepare(values, keys, shapes, sizes, wide, huge)
        plan.fast = _fast_call(self, info, plan, keys, wide, huge, pkey[2] is not None)
    info.fast = plan.fast
    comp = self._last = plan.comp
    if defer:
        check_deferred(defer, plan.guarded)
    if orders is None:
        operands = [load(x, f, what) for load, x, f, what in zip(plan.loaders, values, plan.formats, info.whats)]
    else:
        with known_orders(orders):      # the COO order validation found: not scanned twice
            operands = [load(x, f, what) for load, x, f, what in zip(plan.loaders, values, plan.formats, info.whats)]
    if plan.converts is not None:
        for k, to in enumerate(plan.converts):
            if to is not None:
                bufs = operands[k][0]
                bufs[-1] = bufs[-1].astype(to)
    out_fmt = plan.out_fmt
    scalars = [sizes[j] for j in plan.size_slots]
    if out_fmt is None:
        # zeroed: JIT kernels skip their own (serial) zero fill, see emit_kernel
        out = (np.empty if getattr(comp, "fills_output", False) else np.zeros)(out_shape, dtype=plan.out_dtype)
        _, base = plan.packer.pack(scalars, operands, out)
        rc = comp.entry(base)
        if rc:
            _failed(self.source, rc, defer)
        return out[()] if out.ndim == 0 else out
    if out_fmt.block is not None:
        _check_blocks(out_fmt, out_shape)
    block, base = plan.packer.pack(scalars, operands, None)
    rc = comp.entry(base)
    if rc:
        if rc == 2:     # it returned normally: the result it built is freed, not leaked
            release(result_view(out_fmt, block, plan.packer.result_at))
        _failed(self.source, rc, defer)
    del operands
    got = wrap(out_fmt, tuple(out_shape), plan.out_dtype, result_view(out_fmt, block, plan.packer.result_at),
               self.prune)
    return as_csc(got) if plan.transposed else got


def _flagless(x):
    """COO operand ``x`` over the same buffers, not flagged canonical (no copy)."""
    y = sp.coo_array((x.data, tuple(x.coords)), shape=x.shape, copy=False)
    y.has_canonical_format = False
    return y


def _failed(source: str, rc: int, defer):
    """A kernel returned ``rc`` != 0: 2, a guarded coordinate was out of range (raise the
    NumPy check's message for it; the caller has freed the sparse result the kernel
    returned); 1, out of memory (a sparse result the kernel was building is leaked)."""
    if rc == 2:
        if defer is None:       # check=False: nothing was checked before the call
            raise OperandError(f"sparsecc: an operand of '{source}' holds an index out of range (found by "
                               f"the kernel's own range check; with check=True the operands are checked "
                               f"before the call and the message names the operand and the index)")
        check_deferred(defer)
        raise OperandError(f"sparsecc: an operand of '{source}' holds an index out of range "
                           f"(its indices changed during the call?)")
    _out_of_memory(source)


def _out_of_memory(source: str):
    raise MemoryError(f"sparsecc: the kernel '{source}' ran out of memory (an allocation inside "
                      f"it failed); the temporaries it had allocated so far are leaked" + alloc_limit_note())


def alloc_limit_note() -> str:
    """Where ``SPARSECC_MAX_ALLOC_BYTES`` reads otherwise than it looks (the kernels parse it
    with C's ``strtoll``: leading digits only, so "1e9" is 1 byte), a sentence saying so."""
    import os
    import re
    v = os.environ.get("SPARSECC_MAX_ALLOC_BYTES")
    if v is None or re.fullmatch(r"\s*[+-]?\d+", v):
        return ""
    m = re.match(r"\s*([+-]?\d+)", v)
    n = int(m.group(1)) if m else 0
    read = f"{n} byte{'s' if n != 1 else ''}" if n > 0 else "unset (half of physical memory)"
    return (f"; SPARSECC_MAX_ALLOC_BYTES={v!r} is read as {read}: the limit is a whole number of bytes "
            f"(e.g. 1000000000)")


def call_with_buffers(mod: Loaded, result, scalars, stores, what: str) -> None:
    """Call module ``mod``'s ``sparsecc_entry`` with: the sparse result's struct ``result``
    (``results.new_result``), the ``scalars`` as 64-bit indices, then each stored operand of
    ``stores`` (``operands.build``) as its buffers' descriptors and its specifier.  Raises
    ``MemoryError`` when an allocation inside the kernel failed (``what`` names it)."""
    keep = [result] + [ctypes.c_int64(int(v)) for v in scalars]
    for s in stores:
        keep += [describe_array(b) for b in s.buffers]
        keep.append(specifier(s.lvl_sizes, [b.size for b in s.buffers]))
    argv = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
    rc = mod.entry(argv)
    if rc == 2:
        if result is not None:
            release(result)
        raise OperandError(f"sparsecc: an operand of {what} holds an index out of range")
    if rc:
        raise MemoryError(f"sparsecc: {what} ran out of memory (an allocation inside it failed)"
                          + alloc_limit_note())


def _fast_call(kernel, info: _CallInfo, plan: _Plan, keys, wide, huge, shape_keyed):
    """The repeated-call path of ``plan`` (a function ``fast(kernel, args)``), or None where
    the plan's kind of call is not one it covers."""
    src = _fast_source(kernel, info, plan, keys, wide, huge, shape_keyed)
    if src is None:
        return None
    source, consts = src
    fills = getattr(plan.comp, "fills_output", False)      # the kernel writes every output entry
    namespace = {"_MISS": _MISS, "_kmod": kernel._limits, "_ndarray": np.ndarray, "_zeros": np.empty if fills else np.zeros, "_spec": _spec, "_STATS": STATS,
                 "_small_ok": small_compressed_ok_typed, "_structure_ok": compressed_structure_ok_typed, "_SMALL": SMALL, "_validate": validate, "_failed": _failed, "_release": release,
                 "_check_deferred": check_deferred, "_GUARDED": plan.guarded,
                 "_wrap": wrap, "_as_csc": as_csc, "_result_view": result_view, "_word": _memref._word, "_HEADER": _memref._HEADER,
                 "_address": _memref.address, "_pack_into": plan.packer.struct.pack_into,
                 "_MINE": plan.packer._mine, "_BLOCK": plan.packer.block, **consts}
    exec(source, namespace)     # noqa: S102 - our own source, made from the plan
    return namespace["fast"]
