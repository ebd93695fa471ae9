"""The call path: from a kernel call's operands to the native call and back.

Per kernel, what every call shares (:class:`_CallInfo`: operand names, where each index
takes its size); per kind of operands (type, dtype, rank, index widths), a call plan
(:class:`_Plan`: resolved formats, a loader per operand, the loaded specialization, the
argument layout); per call, operands read and validated, buffers packed
(``memref.ArgPacker``), the ctypes call of ``sparsecc_entry``, a ``MemoryError`` when it
returns 1, and the result wrapped.  :func:`call_with_buffers` is the same native call for
kernels built outside ``Kernel`` (the op library's structural kernels).

``Kernel.__call__`` is :func:`call` (and ``Kernel._prepare`` is :func:`prepare`): the
``Kernel`` API lives in ``runtime/kernel.py``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from .. import dtypes as dt
from ..errors import FormatError, OperandError, ShapeError
from ..expr import Statement, accesses, describe, index_sizes
from ..formats import Format, resolve
from . import specialization as _spec
from .loader import STATS, Loaded
from . import memref as _memref
from .memref import ArgPacker, describe as describe_array, specifier
from .operands import (_INDEX, INT32_MAX, aos_like, as_operand, coo_aos, default_format, index_dtypes,
                       load_compressed, load_csr1d, load_dense, loader, nnz_bound, own_widths)
from .results import release, result_view, wrap
from .specialization import (HUGE_FACTOR, HUGE_SLACK, Compiled, _check_blocks, _for_sparse_result, _result_dtype,
                             _without_coiterated_blocks, gpu_formats, huge_dimension, sparse_result_orders, specialize)
from .validate import SMALL, check_deferred, small_compressed_ok_typed, compressed_structure_ok_typed, check_widths, known_orders, validate

if TYPE_CHECKING:
    from .kernel import Kernel


def bind_named(source: str, names, args, kwargs) -> list:
    """The operands of index-notation statement ``source`` (operand ``names``), given by
    position and/or by name, in ``names`` order; clear errors for extra, unknown, repeated
    or missing operands."""
    if len(args) > len(names):
        raise OperandError(f"'{source}' takes {len(names)} operands ({', '.join(names)}), "
                           f"got {len(args)} positional")
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise OperandError(f"'{source}' has no operand {k!r}; its operands are {', '.join(names)}")
        if k in values:
            raise OperandError(f"operand {k!r} given twice")
        values[k] = v
    missing = [o for o in names if o not in values]
    if missing:
        raise OperandError(f"'{source}' needs operand(s) {', '.join(missing)}")
    return [values[o] for o in names]


_SPARSE_TYPES = {sp.csr_array, sp.csr_matrix, sp.csc_array, sp.csc_matrix, sp.coo_array, sp.coo_matrix}
_BSR_TYPES = {sp.bsr_array, sp.bsr_matrix}
_DIRECT = frozenset({np.ndarray} | _SPARSE_TYPES | _BSR_TYPES)    # no as_operand needed


def _key_of(x) -> tuple:
    """What a call plan depends on about operand ``x`` (its kind, never its contents):
    the type (for SciPy: the format), the value dtype, the rank or block size, the index
    dtypes (they decide the index widths)."""
    t = type(x)
    if t is np.ndarray:
        return t, x.dtype, x.ndim
    if t in _SPARSE_TYPES:
        return t, x.data.dtype, len(x.shape), index_dtypes(x)
    if t in _BSR_TYPES:
        return t, x.data.dtype, x.data.shape[1:], index_dtypes(x)
    if isinstance(x, np.ndarray):
        return t, x.dtype, x.ndim
    return (t, x.format, x.dtype, len(x.shape), tuple(x.blocksize) if x.format == "bsr" else None,
            index_dtypes(x))


class _CallInfo:
    """What every call of one kernel shares: how operands are named in messages, where
    each index takes its size from, and the call plans made so far."""

    __slots__ = ("stmt", "n", "named", "whats", "slot", "src", "same", "ranks", "out_slots", "plans", "fast")

    def __init__(self, stmt: Statement):
        ops = stmt.operands
        self.stmt = stmt
        self.n = len(ops)
        self.named = bool(ops) and not ops[0].startswith("#")
        self.whats = tuple(describe(n) for n in ops)
        names = list(dict.fromkeys([i for a in accesses(stmt.expr) for i in a.indices] + list(stmt.indices)))
        self.slot = {i: j for j, i in enumerate(names)}
        src, same, ranks = {}, [], []
        for a in accesses(stmt.expr):
            k = ops.index(a.tensor)
            ranks.append((k, len(a.indices)))
            for d, i in enumerate(a.indices):
                j = self.slot[i]
                if j in src:
                    same.append((k, d, j))
                else:
                    src[j] = (k, d)
        self.src = tuple(src.get(j) for j in range(len(names)))
        self.same = tuple(same)
        self.ranks = tuple(dict.fromkeys(ranks))
        self.out_slots = tuple(self.slot[i] for i in stmt.indices)
        self.plans: dict = {}
        #: the repeated-call path of the plan used last (see :func:`_fast_source`), or None
        self.fast = None

    def sizes(self, shapes: list) -> list[int]:
        """The size of every index (in slot order); a ShapeError where shapes disagree."""
        for k, r in self.ranks:
            if len(shapes[k]) != r:
                self._fail(shapes)
        try:
            sizes = [shapes[k][d] for k, d in self.src]
        except TypeError:          # an index no operand binds
            self._fail(shapes)
        for k, d, j in self.same:
            if shapes[k][d] != sizes[j]:
                self._fail(shapes)
        return sizes

    def _fail(self, shapes):
        sizes = index_sizes(self.stmt, {n: tuple(s) for n, s in zip(self.stmt.operands, shapes)})
        unbound = [i for i in self.slot if i not in sizes]
        raise ShapeError(f"index {unbound[0]!r} takes its size from no operand" if unbound else
                         f"operand shapes {[tuple(s) for s in shapes]} do not fit '{self.stmt}'")


class _LoadedKey:
    """A key of the loaded-kernel table with its hash computed once (a Statement hashes its
    whole expression tree each time): a plan checks on every call that its kernel is still
    the loaded one, so forgetting loaded kernels reaches kernels already planned."""

    __slots__ = ("key", "hash")

    def __init__(self, key):
        self.key = key
        self.hash = hash(key)

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        return other is self.key or other == self.key


def _loaded_key(comp: Compiled) -> _LoadedKey | None:
    for k, v in list(_spec._loaded.items()):
        if v is comp:
            return _LoadedKey(k)
    return None


@dataclass(eq=False, slots=True)
class _Plan:
    """How to call a kernel on operands of one kind (see ``Kernel._prepare``).  Holds nothing
    read from an operand's buffers: those are read and validated on every call."""

    comp: Compiled
    key: _LoadedKey | None          # where ``comp`` is in ``_loaded``; None: ahead-of-time
    library: dict | None
    formats: tuple[Format, ...]     # widths resolved
    out_fmt: Format | None
    loaders: tuple                  # per operand: operands.load_*
    converts: tuple | None          # per operand: the dtype its values are converted to
    size_slots: tuple[int, ...]     # the kernel's size arguments, as slots of the call's sizes
    out_dtype: np.dtype
    packer: ArgPacker
    #: operands whose indices range check the kernel does itself (validate.check_deferred)
    guarded: frozenset = frozenset()
    fast: object = None             # the repeated-call path (see _fast_source), or None

    def current(self, k: "Kernel") -> bool:
        if self.library is not None:
            return k._library is self.library
        return k._library is None and self.key is not None and _spec._loaded.get(self.key) is self.comp


_resolved: dict = {}


def _resolve_cached(spec, rank, what, block) -> Format:
    try:
        k = (spec, rank, block)
        f = _resolved.get(k)
    except TypeError:
        return resolve(spec, rank, what, block)
    if f is None:
        f = _resolved[k] = resolve(spec, rank, what, block)
    return f


def _to_bsr(args, positions, whats) -> list:
    """Operands given as plain "bsr" that are not SciPy BSR arrays, as ``bsr_array``s with
    the block size SciPy's ``tobsr()`` picks (``scipy.sparse``'s ``estimate_blocksize``): a
    change of layout.  A block size with a 1 then runs as CSR (see ``formats.resolve``)."""
    args = list(args)
    for k in positions:
        x = args[k]
        if sp.issparse(x) and x.format == "bsr":
            continue
        x = as_operand(x, whats[k])
        validate(x, whats[k])       # SciPy's conversion trusts the buffers: check them first
        if x.ndim != 2:
            raise FormatError(f"{whats[k]} has rank {x.ndim}, but 'bsr' is for matrices")
        try:
            args[k] = sp.bsr_array(x)
        except (TypeError, ValueError) as err:
            raise OperandError(f"{whats[k]} cannot be stored as BSR: {err}") from None
    return args


def prepare(self, values, keys, shapes, sizes, wide, huge=False) -> "_Plan":
    """The plan for calls with operands like ``values``: resolved formats and widths,
    a loader per operand, the compiled kernel and its argument layout.  It depends only
    on what ``keys``, ``wide`` and ``huge`` (a dimension much larger than the stored
    entries: see ``specialization.huge_dimension``) say about the operands, never on
    their contents."""
    info = self._static()
    ops = self.stmt.operands
    dtypes, fmts = [], []
    for name, x, what in zip(ops, values, info.whats):
        dtypes.append(dt.lookup(x.dtype, what).name)
        own, block = default_format(x)
        spec = self.formats.get(name)
        if spec is None and own == "coo" and x.ndim >= 2 and aos_like(x):
            fmts.append(coo_aos(x.ndim))    # its coordinates are one (nnz, rank) array: read it as is
            continue
        fmts.append(_resolve_cached(spec or own, self._ranks[name], what, block))
    fmts = _without_coiterated_blocks(fmts)
    if self.options.device != "cpu":
        fmts = gpu_formats(self.stmt, fmts)     # a GPU loop needs a dense outer level (docs/gpu.md)
    out_shape = tuple(sizes[j] for j in info.out_slots)
    out_fmt = self._result_format(frozenset(n for n, f in zip(ops, fmts) if not f.is_dense), out_shape,
                                  bool(wide and wide[2]))
    if out_fmt is not None:
        orders = sparse_result_orders(self.stmt, fmts, huge)
        fmts = [_for_sparse_result(f, orders.get(n), huge) for n, f in zip(ops, fmts)]
    fmts = [f if f.is_dense else self._operand_widths(f, x, shape, what, wide and wide[0][k])
            for k, (f, x, shape, what) in enumerate(zip(fmts, values, shapes, info.whats))]
    out = _result_dtype(self.stmt, tuple(dtypes))
    converts = [None] * len(ops)
    if out.kind == "c":
        # The sparsifier cannot lower real->complex conversions inside a sparse loop:
        # store such an operand's values as complex (numpy.einsum converts them too).
        for k, f in enumerate(fmts):
            if not f.is_dense and dtypes[k] != out.name:
                converts[k] = out
                dtypes[k] = out.name
    formats, dtypes = tuple(fmts), tuple(dtypes)
    if self._library is not None:
        comp = self._library.get((formats, dtypes, out_fmt))
        if comp is None:
            (fm, dd, _), = self._library
            raise OperandError(
                f"this ahead-of-time kernel '{self.source}' was built for operands "
                f"{', '.join(f'{f} {d}' for f, d in zip(fm, dd))}; got "
                f"{', '.join(f'{f} {d}' for f, d in zip(formats, dtypes))}")
        key = None
    else:
        comp = specialize(self.stmt, formats, dtypes, self.options, out_fmt, huge)
        key = _loaded_key(comp)
    sig = comp.signature
    layout = [len(s) if f.is_dense else (len(f.fields()), len(f.levels)) for f, s in zip(formats, shapes)]
    out_layout = (len(out_fmt.fields()), len(out_fmt.levels)) if out_fmt is not None else len(out_shape)
    return _Plan(comp=comp, key=key, library=self._library, formats=formats, out_fmt=out_fmt,
                 guarded=_guarded_operands(comp, values, formats, len(sig.index_order)),
                 loaders=tuple(loader(x, f) for x, f in zip(values, formats)),
                 converts=tuple(converts) if any(c is not None for c in converts) else None,
                 size_slots=tuple(info.slot[i] for i in sig.index_order),
                 out_dtype=np.dtype(sig.out_dtype),
                 packer=ArgPacker(len(sig.index_order), layout, out_layout))

_OWN_ORDER = {"csr": (None, (0, 1)), "csc": ((1, 0),)}


def _guarded_operands(comp, values, formats, n_sizes: int) -> frozenset:
    """The positions of the SciPy CSR/CSC operands whose ``indices`` the kernel reads as
    they are (their own layout, a coordinate width that holds every index) from an argument
    it range-checks itself (``Compiled.guarded``, passes/guards.py)."""
    guarded = getattr(comp, "guarded", ())
    if not guarded:
        return frozenset()
    out, at = set(), n_sizes
    for k, (x, f) in enumerate(zip(values, formats)):
        if f.is_dense:
            at += 1
            continue
        fields = f.fields()
        if (type(x) in _SPARSE_TYPES and x.format in _OWN_ORDER and len(x.shape) == 2
                and f.levels == ("dense", "compressed") and f.block is None
                and f.order in _OWN_ORDER[x.format] and f.crd_width
                and x.indices.dtype.itemsize * 8 <= f.crd_width
                and at + fields.index(("crd", 1)) in guarded):
            out.add(k)
        at += len(fields) + 1
    return frozenset(out)


def operand_widths(self, f: Format, x, shape, what: str, wide) -> Format:
    """``f`` with its index widths resolved (a width the format fixes is kept):
    ``Options.index_width`` if set; else 64 bits where a dimension or the entry count
    does not fit in int32; else the widths of the operand's own index arrays where the
    kernel reads them as they are (int64 SciPy indices are not copied); else 32 bits.
    ``wide``: (a dimension, the entry count) need 64 bits."""
    want = self.options.index_width
    crd = None
    if want is None:
        if wide and (wide[0] or wide[1]):
            want = 64
        else:
            own = None if f.pos_width or f.crd_width else own_widths(x, f)
            want, crd = own if own is not None else (32, None)
    # a width the format fixes is kept; an unset crdWidth follows a set posWidth (docs/formats.md)
    f = f.with_widths(want, f.pos_width or crd or want)
    nnz = nnz_bound(x)
    if self.options.index_width == 32 and wide and (
            (f.crd_width == 32 and wide[0]) or (f.pos_width == 32 and wide[1])):
        raise OperandError(f"{what} needs 64-bit indices ({max(shape)} is its largest dimension, it stores "
                           f"up to {nnz} entries; 2^31 - 1 is the most 32 bits hold), but "
                           f"Options(index_width=32) fixes 32; use index_width=None or 64")
    check_widths(f, shape, nnz, what)
    return f

#: the repeated-call path is on (tests that spy on ``ArgPacker.pack`` turn it off)
FAST = True
_MISS = object()


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
    if self._auto_bsr:
        if any(type(x).__module__.startswith("dask.") for x in args):
            from ..dask import call as dask_call
            return dask_call(self, args)
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
                if t.__module__.startswith("dask."):    # Dask arrays: a lazy result (sparsecc/dask)
                    from ..dask import call as dask_call
                    return dask_call(self, args)
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
    return wrap(out_fmt, tuple(out_shape), plan.out_dtype,
                result_view(out_fmt, block, plan.packer.result_at), self.prune)


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


# ---------------------------------------------------------------- the repeated-call path
_FAST_LOADERS = (load_dense, load_compressed, load_csr1d)


def _fast_call(kernel, info: _CallInfo, plan: _Plan, keys, wide, huge, shape_keyed):
    """The repeated-call path of ``plan`` (a function ``fast(kernel, args)``), or None where
    the plan's kind of call is not one it covers."""
    src = _fast_source(kernel, info, plan, keys, wide, huge, shape_keyed)
    if src is None:
        return None
    source, consts = src
    fills = getattr(plan.comp, "fills_output", False)      # the kernel writes every output entry
    from . import kernel as _kmod
    namespace = {"_MISS": _MISS, "_kmod": _kmod, "_ndarray": np.ndarray, "_zeros": np.empty if fills else np.zeros, "_spec": _spec, "_STATS": STATS,
                 "_small_ok": small_compressed_ok_typed, "_structure_ok": compressed_structure_ok_typed, "_SMALL": SMALL, "_validate": validate, "_failed": _failed, "_release": release,
                 "_check_deferred": check_deferred, "_GUARDED": plan.guarded,
                 "_wrap": wrap, "_result_view": result_view, "_word": _memref._word, "_HEADER": _memref._HEADER,
                 "_address": _memref.address, "_pack_into": plan.packer.struct.pack_into,
                 "_MINE": plan.packer._mine, "_BLOCK": plan.packer.block, **consts}
    exec(source, namespace)     # noqa: S102 - our own source, made from the plan
    return namespace["fast"]


def _fast_source(kernel, info: _CallInfo, plan: _Plan, keys, wide, huge, shape_keyed):
    """Straight-line Python for calls of ``plan``'s kind: ``(source, constants)``, or None.

    The function it defines returns ``_MISS`` (and the general path runs) unless every
    operand is exactly of the plan's kind - the same types, value and index dtypes (by
    identity), ranks, C-contiguous buffers, canonical (sorted, duplicate-free) CSR/CSC, the
    same index-width and huge-dimension classes, shapes that agree - and the plan's kernel
    is still the loaded one.  Then it does what the general path does, without its lists:
    validates each sparse operand (``check``), allocates a dense result, writes the argument
    block, calls ``sparsecc_entry`` and wraps the result.  It covers plans whose operands
    pass to the kernel as they are (NumPy arrays; CSR/CSC and 1-D CSR arrays in their own
    layout and index widths); the rest (COO, BSR, other formats or widths, value
    conversions, 64-bit or huge-dimension calls, AOT kernels) always take the general path."""
    if (wide is not None or huge or shape_keyed or kernel._auto_bsr or plan.converts is not None
            or plan.library is not None or plan.key is None
            or (plan.out_fmt is not None and plan.out_fmt.block is not None)):
        return None
    consts = {"_COMP": plan.comp, "_KEY": plan.key, "_ENTRY": plan.comp.entry, "_ODT": plan.out_dtype,
              "_SOURCE": kernel.source, "_OUTF": plan.out_fmt, "_RAT": plan.packer.result_at}
    n = info.n
    names = [f"a{k}" for k in range(n)]
    lines = [f"if len(args) != {n}:", "    return _MISS"]
    if n:
        lines.append(f"{', '.join(names)}, = args")
    dims: list[list[str]] = []
    counts: list[str] = []
    layout = []             # fill_source's operands
    checks = []             # the validation lines (when kernel.check)
    after = []              # after validation: what reads beyond the structure
    for k, (key, load, fmt) in enumerate(zip(keys, plan.loaders, plan.formats)):
        if load not in _FAST_LOADERS:
            return None
        a = names[k]
        consts[f"_T{k}"] = key[0]
        consts[f"_DT{k}"] = key[1]
        consts[f"_W{k}"] = info.whats[k]
        if load is load_dense:
            if key[0] is not np.ndarray:
                return None
            r = key[2]
            lines += [f"if type({a}) is not _ndarray or {a}.dtype is not _DT{k} or not {a}.flags.c_contiguous:",
                      "    return _MISS",
                      f"sh{k} = {a}.shape"]
            counts.append(f"{a}.size")
            dk = [f"x{k}_{d}" for d in range(r)]
            lines += [f"if len(sh{k}) != {r}:", "    return _MISS"]
            if r:
                lines.append(f"{', '.join(dk)}, = sh{k}")
            layout.append((a, dk))
            dims.append(dk)
            continue
        if key[0] not in _SPARSE_TYPES:
            return None     # a subclass (its key is _key_of's general form): the general path
        t, _, r, idx = key
        if len(idx) != 2 or _INDEX[fmt.pos_width] != idx[0] or _INDEX[fmt.crd_width] != idx[1] or \
                fmt.block is not None:
            return None     # another width than the operand's own: copied by the general path
        consts[f"_PT{k}"], consts[f"_IT{k}"] = idx
        v, p, i = f"v{k}", f"p{k}", f"i{k}"
        lines += [f"if type({a}) is not _T{k}:", "    return _MISS",
                  # known non-canonical (SciPy's cached flag): decline before validating twice
                  f"if {a}.__dict__.get('_has_canonical_format', True) is False:", "    return _MISS",
                  f"{v} = {a}.data", f"{p} = {a}.indptr", f"{i} = {a}.indices",
                  f"if type({v}) is not _ndarray or type({p}) is not _ndarray or type({i}) is not _ndarray:",
                  "    return _MISS",
                  f"if {v}.dtype is not _DT{k} or {p}.dtype is not _PT{k} or {i}.dtype is not _IT{k}:",
                  "    return _MISS",
                  f"sh{k} = {a}.shape",
                  f"if len(sh{k}) != {r}:", "    return _MISS"]
        dk = [f"x{k}_{d}" for d in range(r)]
        lines.append(f"{', '.join(dk)}, = sh{k}")
        counts.append(f"{v}.size")
        if load is load_compressed and r == 2:
            outer, inner = (dk[fmt.order[0]], dk[fmt.order[1]])
            # (validate's own check over Python lists where it takes them, else validate)
            if k in plan.guarded:       # the kernel range-checks the indices: the structure only
                checks += [f"if not _structure_ok({p}, {i}, {v}, {outer}):",
                           f"    _validate({a}, _W{k}, defer, {k})"]
            else:                       # (validate's own check over Python lists where it takes them)
                checks += [f"if {i}.size > _SMALL or not _small_ok({p}, {i}, {v}, {outer}, {inner}, False):",
                           f"    _validate({a}, _W{k}, defer, {k})"]
        else:
            checks.append(f"_validate({a}, _W{k})")
        after += [f"if not {a}.has_canonical_format:", "    return _MISS",
                  f"if not ({p}.flags.c_contiguous and {i}.flags.c_contiguous and {v}.flags.c_contiguous):",
                  "    return _MISS"]
        layout.append(([p, i, v], [dk[d] for d in fmt.order]))
        dims.append(dk)
    # every index's size, and the shapes that must agree
    size = []
    for j, at in enumerate(info.src):
        if at is None:
            return None
        size.append(dims[at[0]][at[1]])
    for k, d, j in info.same:
        lines += [f"if {dims[k][d]} != {size[j]}:", "    return _MISS"]
    # the index-width and huge-dimension classes: both "no" (specialization.huge_dimension)
    if counts:
        lines += [f"if {' or '.join(f'{c} > {INT32_MAX}' for c in counts)}:", "    return _MISS"]
    if size:
        lines.append(f"m = max({', '.join(size)})" if len(size) > 1 else f"m = {size[0]}")
        stored = " + ".join(counts)
        lines += [f"if m > {HUGE_SLACK} and (m > {INT32_MAX} or m > {HUGE_FACTOR} * ({stored}) + {HUGE_SLACK}):",
                  "    return _MISS"]
    out_dims = [size[j] for j in info.out_slots]
    if out_dims:            # the result's entries: the same class as the plan's (kernel.py)
        lines += [f"if {' * '.join(out_dims)} > _kmod.POS32_MAX and kernel._entries_wide(({''.join(f'{a}, ' for a in names)}), "
                  f"({''.join(f'{c}, ' for c in counts)}), ({''.join(f'{d}, ' for d in out_dims)})):",
                  "    return _MISS"]
    lines += ["if _spec._loaded.get(_KEY) is not _COMP or kernel._library is not None:", "    return _MISS"]
    lines.append("defer = [] if kernel.check else None")
    if checks:
        lines.append("if kernel.check:")
        lines += [f"    {c}" for c in checks]
        # indices range checks the kernel does itself (passes/guards.py), the rest now
        lines += ["    if defer:", "        _check_deferred(defer, _GUARDED)"]
    lines += after
    lines += ["_STATS.hits += 1", "kernel._last = _COMP"]
    out_shape = f"({', '.join(out_dims)}{',' if len(out_dims) == 1 else ''})"
    dense_out = plan.out_fmt is None
    if dense_out:
        lines.append(f"out = _zeros({out_shape}, _ODT)")
    lines += ["try:", "    block, base = _MINE.block", "except AttributeError:", "    block, base = _BLOCK()"]
    fill, pack = _memref.fill_source([size[j] for j in plan.size_slots], layout,
                                     ("out", out_dims) if dense_out else None, plan.packer.args_at // 8)
    lines += fill + [pack, "rc = _ENTRY(base)", "if rc:"]
    if not dense_out:       # rc 2: the kernel returned its result normally: freed, not leaked
        lines += ["    if rc == 2: _release(_result_view(_OUTF, block, _RAT))"]
    # a kernel that found an index out of range: the deferred checks (large operands), then
    # the full check of small ones, name the operand and the index
    lines += ["    if rc == 2 and defer:", "        _check_deferred(defer)"]
    lines += [f"    if rc == 2 and defer is not None: _validate({names[k]}, _W{k})" for k in sorted(plan.guarded)]
    lines += ["    _failed(_SOURCE, rc, defer)"]
    if dense_out:
        lines.append("return out" if out_dims else "return out[()]")
    else:
        lines.append(f"return _wrap(_OUTF, {out_shape}, _ODT, _result_view(_OUTF, block, _RAT), kernel.prune)")
    return "def fast(kernel, args):\n" + "".join(f"    {ln}\n" for ln in lines), consts
