"""Kernels: specialize, compile (or find in a cache), call.

A :class:`Kernel` is a statement plus the formats the user fixed.  Each call resolves the
rest (formats from the operands, dtypes, index widths) into a specialization; each
specialization is compiled once per process (memory cache) and once per machine (disk cache).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import math
import os
import threading
from functools import lru_cache
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .. import dtypes as dt
from ..dialect import KernelSignature, emit_kernel
from ..errors import CompileError, FormatError, OperandError, ShapeError, SparseccError
from ..expr import Reduce, Statement, accesses, describe, index_sizes, infer_dtypes
from ..formats import Format, resolve
from ..options import DEFAULT, Options
from ..patterns import check_sparse_result, default_result_format
from . import cache, compiler, threads
from .memref import ArgPacker
from .operands import INT32_MAX, as_operand, default_format, loader, nnz_bound
from .results import result_view, wrap
from .validate import check_widths, validate


@dataclass
class Stats:
    hits: int = 0         # calls served by an already loaded kernel
    disk_hits: int = 0    # kernels loaded from the disk cache
    misses: int = 0       # compilations

    def __repr__(self):
        return f"CacheInfo(hits={self.hits}, disk_hits={self.disk_hits}, misses={self.misses})"


STATS = Stats()
_loaded: dict[tuple, "Compiled"] = {}
_key_locks: dict[tuple, threading.Lock] = {}
_registry_lock = threading.Lock()


@dataclass
class Compiled:
    """One specialization, loaded: the native entry point and how to call it."""

    key: str
    signature: KernelSignature
    formats: tuple[Format, ...]
    out_format: Format | None
    mlir: str
    lib: ctypes.CDLL
    entry: object
    info_path: str
    _stages: dict | None = field(default=None, repr=False)

    def stages(self) -> dict:
        if self._stages is None:
            with open(self.info_path) as f:
                self._stages = json.load(f)["stages"]
        return self._stages


def _dump(key: str, stages: dict) -> None:
    folder = os.environ.get("SPARSECC_DUMP_IR")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    ext = {"llvm": "ll"}
    for k, (stage, text) in enumerate(stages.items()):
        with open(os.path.join(folder, f"{key}.{k}-{stage}.{ext.get(stage, 'mlir')}"), "w") as f:
            f.write(text)


def _expected_args(sig: KernelSignature, formats) -> int:
    n = len(sig.index_order) + 1          # sizes, then the dense output or the sparse result's struct
    for f in formats:
        n += 1 if f.is_dense else len(f.fields()) + 1
    return n


def _build(stmt, fmts, dts, out_format, options, split, via=None):
    """Emit and compile (or find on disk) one form of a specialization.  Every field of
    ``options`` reaches the compile worker and the cache key (``index_width`` too, which the
    operands' formats already carry in their widths)."""
    # the call path allocates dense results with np.zeros (see Kernel.__call__)
    mlir, sig = emit_kernel(stmt, fmts, dts, split=split, out_format=out_format, via=via, zeroed_output=True)
    key = cache.key_of(mlir, options.key())
    entry = cache.lookup(key)           # verified (SHA-256) or None; a bad entry is deleted
    if entry is None:
        out = cache.build_path(key)     # a temporary name: store() hashes it and installs it
        reply = compiler.compile_library(mlir, out, options=options, what=f"'{stmt}'")
        entry = cache.store(key, {"stages": reply["stages"], "arg_types": reply["arg_types"],
                                  "parallel": reply["parallel"], "openmp": reply["openmp"]}, out)
        STATS.misses += 1
        _dump(key, reply["stages"])
    else:
        STATS.disk_hits += 1
    return mlir, sig, key, entry


def specialize(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
               options: Options, out_format: Format | None = None) -> Compiled:
    """The loaded kernel for one specialization (``out_format``: a sparse result's format,
    widths resolved; ``None`` for a dense result)."""
    mem_key = (stmt, formats, dtypes, options, out_format)
    got = _loaded.get(mem_key)
    if got is not None:
        STATS.hits += 1
        return got
    with _registry_lock:
        lock = _key_locks.setdefault(mem_key, threading.Lock())
    with lock:                      # two threads asking for one kernel compile it once
        got = _loaded.get(mem_key)
        if got is not None:
            STATS.hits += 1
            return got
        fmts, dts = dict(zip(stmt.operands, formats)), dict(zip(stmt.operands, dtypes))
        built = _first_that_compiles(
            _attempts(stmt, formats, out_format),
            lambda split, via: _build(stmt, fmts, dts, out_format, options, split, via))
        mlir, sig, key, entry = built
        info = entry.info
        n = _expected_args(sig, formats)
        if len(info["arg_types"]) != n:
            raise SparseccError(f"internal error: kernel for '{stmt}' takes {len(info['arg_types'])} "
                                f"arguments, the runtime expected {n}")
        if info.get("openmp"):
            threads.load_runtime()        # libomp, before the library that needs it
        lib = cache.open_library(entry)   # exactly the bytes that were hashed
        threads.register(lib)             # its thread count follows sc.set_num_threads
        fn = lib.sparsecc_entry
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p]
        got = Compiled(key, sig, formats, out_format, mlir, lib, fn, entry.meta)
        _loaded[mem_key] = got
        return got


def _attempts(stmt: Statement, formats: tuple[Format, ...], out_format: Format | None) -> list:
    """The (split, via) forms to try, in order.  The sparsifier rejects (or crashes on) some
    fused expressions, and finds no loop order for some sparse results: retry split into one
    generic per sparse operation, then building the result in dimension order (or an
    operand's storage order) and converting it inside the kernel."""
    attempts = [(False, None), (True, None)]
    if out_format is None:
        return attempts
    in_order = _in_dimension_order(out_format)
    if isinstance(stmt.expr, Reduce) and stmt.expr.indices:
        # a contraction inserting in an order other than dimension order (CSR x CSR -> CSC)
        # gets the inner-product loop order, which stores every entry: build it in dimension
        # order (Gustavson's row-wise loops) and convert.  Never in an operand's order, for
        # the same reason.
        return [(False, in_order), (True, in_order)] if in_order is not None else attempts
    vias = [in_order] + _orders_of_operands(stmt, formats, out_format)
    return attempts + [(sp, v) for v in dict.fromkeys(v for v in vias if v is not None) for sp in (False, True)]


def _first_that_compiles(attempts, build):
    for k, (split, via) in enumerate(attempts):
        try:
            return build(split, via)
        except CompileError as err:
            if k == len(attempts) - 1:
                raise
            if err.ir_path and os.path.exists(err.ir_path):
                os.remove(err.ir_path)    # a failure reports the IR of the final attempt


def compile_specialization(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
                           options: Options, out_format: Format | None, obj_path: str,
                           entry: str) -> KernelSignature:
    """Compile one specialization into the object file ``obj_path`` exporting ``entry``
    (ahead-of-time libraries; no cache).  Returns its signature.  Always serial code
    (``parallel="none"``): an ahead-of-time library needs only libc and libm, no OpenMP
    runtime."""
    fmts, dts = dict(zip(stmt.operands, formats)), dict(zip(stmt.operands, dtypes))
    options = dataclasses.replace(options, parallel="none")

    def build(split, via):
        mlir, sig = emit_kernel(stmt, fmts, dts, split=split, out_format=out_format, via=via)
        reply = compiler.compile_library(mlir, obj_path, options=options,
                                         what=f"'{stmt}'", entry=entry, object_only=True)
        if len(reply["arg_types"]) != _expected_args(sig, formats):
            raise SparseccError(f"internal error: unexpected arguments for '{stmt}'")
        return sig
    return _first_that_compiles(_attempts(stmt, formats, out_format), build)


def result_format_for(k: "Kernel", formats: list[Format], width: int) -> tuple[Format | None, list[Format]]:
    """The result format of kernel ``k`` with operands in ``formats`` and fixed index widths
    (ahead-of-time builds), and the operand formats it then runs with."""
    stmt = k.stmt
    formats = _without_coiterated_blocks(formats)
    sparse = frozenset(n for n, f in zip(stmt.operands, formats) if not f.is_dense)
    spec = k.out_format if k.out_format is not None else default_result_format(stmt, sparse)
    fmt = resolve(spec, len(stmt.indices), "the result")
    if fmt.is_dense:
        return None, formats
    check_sparse_result(stmt, sparse)
    orders = _row_wise_orders(stmt)
    formats = [_for_sparse_result(f, orders.get(n)).with_widths(width, width)
               for n, f in zip(stmt.operands, formats)]
    return fmt.with_widths(width, width), formats


def loaded_specialization(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
                          out_format: Format | None, lib, fn, path: str) -> dict:
    """A kernel from an ahead-of-time library, keyed as ``Kernel.__call__`` looks it up."""
    index_order = tuple(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))
    out = _result_dtype(stmt, dtypes)
    sig = KernelSignature(index_order, stmt.operands, len(stmt.indices), out.name, out_format)
    comp = Compiled(path, sig, formats, out_format, "", lib, fn, "")
    return {(formats, dtypes, out_format): comp}


@lru_cache(maxsize=None)
def _in_dimension_order(fmt: Format | None) -> Format | None:
    """``fmt`` with its levels in dimension order (CSC -> CSR), or None if it already is."""
    if fmt is None or fmt.block is not None or fmt.order == tuple(range(fmt.rank)):
        return None
    return Format(fmt.levels, None, None, fmt.pos_width, fmt.crd_width)


_CSR = Format.csr()


def _without_coiterated_blocks(fmts: list[Format]) -> list[Format]:
    """Block-sparse operands run as CSR when another operand is sparse too: MLIR 22 mixes up
    coordinates when it co-iterates demapped blocks with some sparse operands (found by the
    property tests: ``jl,lij->i`` with a BSR and a CSF/COO operand gave wrong values)."""
    if sum(not f.is_dense for f in fmts) < 2 or all(f.block is None for f in fmts):
        return fmts
    return [_CSR if f.block is not None else f for f in fmts]


def _for_sparse_result(f: Format, order: tuple[int, ...] | None) -> Format:
    """The format an operand runs in when the result is sparse.  MLIR 22 fails on two kinds:
    block-sparse operands (demapping the blocks leaves unresolved casts: run as CSR) and
    dense levels below a sparse one (a transposed result from hybrid COO reads
    uninitialized memory: run as COO over every dimension).  Operands of a contraction are
    stored in ``order`` (see :func:`_row_wise_orders`)."""
    if f.block is not None:
        f = _CSR
    if order is not None and not f.is_dense and f.order != order:
        f = _reordered(f, order)
    bases = [f.level_base(l) for l in range(len(f.levels))]
    sparse_levels = [k for k, b in enumerate(bases) if b != "dense"]
    if sparse_levels and "dense" in bases[sparse_levels[0]:]:
        return _coo_of(f.rank)
    return f


@lru_cache(maxsize=None)
def _reordered(f: Format, order: tuple[int, ...]) -> Format:
    return Format(f.levels, order, None, f.pos_width, f.crd_width)


@lru_cache(maxsize=None)
def _row_wise_orders(stmt: Statement) -> dict:
    """For a contraction with a sparse result: the storage order of each operand that makes
    Gustavson's loop order possible - the result's indices in order, with the summed indices
    just before the last one (``ik,kj->ij``: i, k, j; ``ij,ik->jk``: j, i, k).  Any other
    order leaves the sparsifier the inner-product order, which stores every entry."""
    if not isinstance(stmt.expr, Reduce) or not stmt.expr.indices:
        return {}
    out = list(stmt.indices)
    summed = [i for i in dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices) if i not in out]
    loop = out[:-1] + summed + out[-1:]
    orders = {}
    for a in accesses(stmt.expr):
        if a.tensor not in orders and len(set(a.indices)) == len(a.indices):
            orders[a.tensor] = tuple(sorted(range(len(a.indices)), key=lambda d: loop.index(a.indices[d])))
    return orders


@lru_cache(maxsize=None)
def _coo_of(rank: int) -> Format:
    return Format.coo(rank)


def _orders_of_operands(stmt: Statement, formats: tuple[Format, ...], out: Format) -> list[Format]:
    """``out`` with its levels in the order the sparse operands store the output's indices
    (CSC * CSC -> CSR is built as CSC, then converted)."""
    found = []
    for a in accesses(stmt.expr):
        f = formats[stmt.operands.index(a.tensor)]
        if f.is_dense or f.block is not None:
            continue
        seq = [a.indices[d] for d in f.order if a.indices[d] in stmt.indices]
        seq = list(dict.fromkeys(seq)) + [i for i in stmt.indices if i not in seq]
        order = tuple(stmt.indices.index(i) for i in seq)
        if order != out.order and all(order != g.order for g in found):
            found.append(Format(out.levels, order, None, out.pos_width, out.crd_width))
    return found


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


class Kernel:
    """A compiled-on-demand kernel: ``k(A, x)`` (einsum) or ``k(A=A, x=x)`` (index notation)."""

    def __init__(self, stmt: Statement, formats: dict[str, object], options: Options = DEFAULT,
                 source: str = "", out_format=None, prune: bool = False, check: bool = True):
        self.stmt = stmt
        self.formats = formats
        self.options = options
        self.source = source or str(stmt)
        self.out_format = out_format
        self.prune = bool(prune)
        self.check = bool(check)        # validate operands before native code runs
        self._ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
        self._last: Compiled | None = None
        self._out_cache: dict = {}
        self._library: dict | None = None   # set by sc.aot.load: the only specializations
        for name, spec in formats.items():
            if spec is not None and not (isinstance(spec, str) and spec.strip().lower() == "bsr"):
                resolve(spec, self._ranks[name], describe(name))   # fail early on bad formats
        if out_format is not None:
            if isinstance(out_format, str) and out_format.strip().lower() == "bsr":
                raise FormatError("a BSR result needs a block size: out_format='bsr2x2' or sc.Format.bsr((2, 2))")
            if not stmt.indices and not (isinstance(out_format, str) and out_format.strip().lower() == "dense"):
                raise FormatError(f"'{self.source}' has a scalar result, which cannot be sparse")
            resolve(out_format, len(stmt.indices), "the result")

    def __repr__(self):
        fm = ", ".join(f"{describe(n)}: {self.formats.get(n) or 'from operand'}" for n in self.stmt.operands)
        return f"<sparsecc.Kernel '{self.source}' ({fm})>"

    # ------------------------------------------------------------------ calling
    def _bind(self, args, kwargs) -> list:
        ops = self.stmt.operands
        named = not ops[0].startswith("#") if ops else False
        if named:
            return bind_named(self.source, ops, args, kwargs)
        if kwargs:
            raise OperandError(f"einsum kernels take operands by position, got keyword(s) {', '.join(kwargs)}")
        if len(args) != len(ops):
            raise OperandError(f"'{self.source}' takes {len(ops)} operand(s), got {len(args)}")
        return list(args)

    _call_info: "_CallInfo | None" = None    # made on the first call (see _static)

    def _static(self) -> "_CallInfo":
        """What every call of this kernel shares (made on the first call)."""
        info = self._call_info
        if info is None:
            info = self._call_info = _CallInfo(self.stmt)
        return info

    def _prepare(self, values, keys, shapes, sizes, wide) -> "_Plan":
        """The plan for calls with operands like ``values``: resolved formats and widths,
        a loader per operand, the compiled kernel and its argument layout.  It depends only
        on what ``keys`` and ``wide`` say about the operands, never on their contents."""
        info = self._static()
        ops = self.stmt.operands
        dtypes, fmts = [], []
        for name, x, what in zip(ops, values, info.whats):
            dtypes.append(dt.lookup(x.dtype, what).name)
            own, block = default_format(x)
            spec = self.formats.get(name) or own
            fmts.append(_resolve_cached(spec, self._ranks[name], what, block))
        fmts = _without_coiterated_blocks(fmts)
        out_shape = tuple(sizes[j] for j in info.out_slots)
        out_fmt = self._result_format(frozenset(n for n, f in zip(ops, fmts) if not f.is_dense), out_shape)
        if out_fmt is not None:
            orders = _row_wise_orders(self.stmt)
            fmts = [_for_sparse_result(f, orders.get(n)) for n, f in zip(ops, fmts)]
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
            comp = specialize(self.stmt, formats, dtypes, self.options, out_fmt)
            key = _loaded_key(comp)
        sig = comp.signature
        layout = [len(s) if f.is_dense else (len(f.fields()), len(f.levels)) for f, s in zip(formats, shapes)]
        out_layout = (len(out_fmt.fields()), len(out_fmt.levels)) if out_fmt is not None else len(out_shape)
        return _Plan(comp=comp, key=key, library=self._library, formats=formats, out_fmt=out_fmt,
                     loaders=tuple(loader(x, f) for x, f in zip(values, formats)),
                     converts=tuple(converts) if any(c is not None for c in converts) else None,
                     size_slots=tuple(info.slot[i] for i in sig.index_order),
                     out_dtype=np.dtype(sig.out_dtype),
                     packer=ArgPacker(len(sig.index_order), layout, out_layout))

    def _operand_widths(self, f: Format, x, shape, what: str, wide) -> Format:
        """``f`` with its index widths resolved (a width the format fixes is kept):
        ``Options.index_width`` if set, else 32 bits where every dimension and the entry
        count fit in int32.  ``wide``: (a dimension, the entry count) need 64 bits."""
        want = self.options.index_width
        if want is None:
            want = 64 if wide and (wide[0] or wide[1]) else 32
        # a width the format fixes is kept; an unset crdWidth follows a set posWidth (docs/formats.md)
        f = f.with_widths(want, f.pos_width or want)
        nnz = nnz_bound(x)
        if self.options.index_width == 32 and wide and (
                (f.crd_width == 32 and wide[0]) or (f.pos_width == 32 and wide[1])):
            raise OperandError(f"{what} needs 64-bit indices ({max(shape)} is its largest dimension, it stores "
                               f"up to {nnz} entries; 2^31 - 1 is the most 32 bits hold), but "
                               f"Options(index_width=32) fixes 32; use index_width=None or 64")
        check_widths(f, shape, nnz, what)
        return f

    def _result_format(self, sparse: frozenset, shape: tuple[int, ...]) -> Format | None:
        """The result's format for this call (``None``: dense), index widths resolved:
        ``Options.index_width`` if set; else 32-bit coordinates when every dimension fits,
        32-bit positions when every entry could be stored and still be counted in 32 bits."""
        wide = (max(shape, default=0) > INT32_MAX, math.prod(shape) > INT32_MAX)
        k = (sparse, wide)
        got = self._out_cache.get(k, False)
        if got is not False:
            return got
        spec = self.out_format
        if spec is None:
            spec = default_result_format(self.stmt, sparse)
        fmt = resolve(spec, len(self.stmt.indices), "the result")
        if fmt.is_dense:
            got = None
        else:
            check_sparse_result(self.stmt, sparse)
            want = self.options.index_width
            if want is None:
                got = fmt.with_widths(64 if wide[1] else 32, 64 if wide[0] else 32)
            else:
                got = fmt.with_widths(want, want)
            if (got.crd_width == 32 and wide[0]) or (got.pos_width == 32 and wide[1]):
                # a width fixed by index_width or the result's format that could overflow
                raise OperandError(
                    f"the result has shape {shape}: {'a dimension' if wide[0] else 'its entry count'} "
                    f"may not fit in 32 bits, but {'Options(index_width=32)' if want == 32 else 'its format'} "
                    f"fixes 32-bit {'coordinates' if wide[0] else 'positions'}; use index_width=None or 64")
        self._out_cache[k] = got
        return got

    def __call__(self, *args, **kwargs):
        info = self._call_info or self._static()
        if kwargs or info.named or len(args) != info.n:
            args = self._bind(args, kwargs)
        # every operand is read and (check=True) validated on every call; the plan caches
        # only what follows from the operands' kinds (type, dtype, rank) and widths
        check = self.check
        values, keys, shapes, counts = [], [], [], []
        for x, what in zip(args, info.whats):
            t = type(x)
            if t is np.ndarray:
                keys.append((t, x.dtype, x.ndim))
                counts.append(x.size)
            else:
                if t not in _DIRECT:
                    x = as_operand(x, what)
                    t = type(x)
                if check:
                    validate(x, what)
                if t in _SPARSE_TYPES:
                    data = x.data
                    keys.append((t, data.dtype, len(x.shape)))
                    counts.append(data.size)
                else:
                    keys.append(_key_of(x))
                    counts.append(nnz_bound(x))
            values.append(x)
            shapes.append(x.shape)
        sizes = info.sizes(shapes)
        out_shape = [sizes[j] for j in info.out_slots]
        wide = None            # does anything need 64-bit indices?  (usually one cheap test)
        if max(counts + sizes) > INT32_MAX or (len(out_shape) > 1 and math.prod(out_shape) > INT32_MAX):
            wide = (tuple((max(s, default=0) > INT32_MAX, n > INT32_MAX) for s, n in zip(shapes, counts)),
                    max(out_shape, default=0) > INT32_MAX, math.prod(out_shape) > INT32_MAX)
        pkey = (tuple(keys), wide)
        plan = info.plans.get(pkey)
        if plan is not None and plan.library is None and _loaded.get(plan.key) is plan.comp:
            STATS.hits += 1                 # a call served by a loaded kernel
        elif plan is None or not plan.current(self):
            plan = info.plans[pkey] = self._prepare(values, keys, shapes, sizes, wide)
        comp = self._last = plan.comp
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
            out = np.zeros(out_shape, dtype=plan.out_dtype)
            _, base = plan.packer.pack(scalars, operands, out)
            comp.entry(base)
            return out[()] if out.ndim == 0 else out
        block, base = plan.packer.pack(scalars, operands, None)
        comp.entry(base)
        del operands
        return wrap(out_fmt, tuple(out_shape), plan.out_dtype,
                    result_view(out_fmt, block, plan.packer.result_at), self.prune)

    # -------------------------------------------------------------- inspection
    def ir(self, stage: str = "mlir") -> str:
        """The kernel's IR at ``stage``: ``mlir`` (as emitted), ``sparsified``, ``llvm-dialect``
        or ``llvm``.  Of the last call's specialization, or float64 operands if never called."""
        stages = ("mlir", "sparsified", "llvm-dialect", "llvm")
        if stage not in stages:
            raise SparseccError(f"unknown stage {stage!r}; stages: {', '.join(stages)}")
        comp = self._last
        if comp is None:
            fmts = []
            for n in self.stmt.operands:
                spec = self.formats.get(n) or "dense"
                w = self.options.index_width or 32
                fmts.append(resolve(spec, self._ranks[n], describe(n)).with_widths(w, w))
            out = self._result_format(frozenset(n for n, f in zip(self.stmt.operands, fmts) if not f.is_dense), ())
            comp = specialize(self.stmt, tuple(fmts), ("float64",) * len(fmts), self.options, out)
        if stage == "mlir":
            return comp.mlir
        return comp.stages()[stage]


# ---------------------------------------------------------------- the call path
_SPARSE_TYPES = {sp.csr_array, sp.csr_matrix, sp.csc_array, sp.csc_matrix, sp.coo_array, sp.coo_matrix}
_BSR_TYPES = {sp.bsr_array, sp.bsr_matrix}
_DIRECT = frozenset({np.ndarray} | _SPARSE_TYPES | _BSR_TYPES)    # no as_operand needed


def _key_of(x) -> tuple:
    """What a call plan depends on about operand ``x`` (its kind, never its contents):
    the type (for SciPy: the format), the value dtype, the rank or block size."""
    t = type(x)
    if t is np.ndarray:
        return t, x.dtype, x.ndim
    if t in _SPARSE_TYPES:
        return t, x.data.dtype, len(x.shape)
    if t in _BSR_TYPES:
        return t, x.data.dtype, x.data.shape[1:]
    if isinstance(x, np.ndarray):
        return t, x.dtype, x.ndim
    return t, x.format, x.dtype, len(x.shape), tuple(x.blocksize) if x.format == "bsr" else None


class _CallInfo:
    """What every call of one kernel shares: how operands are named in messages, where
    each index takes its size from, and the call plans made so far."""

    __slots__ = ("stmt", "n", "named", "whats", "slot", "src", "same", "ranks", "out_slots", "plans")

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
    for k, v in list(_loaded.items()):
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

    def current(self, k: "Kernel") -> bool:
        if self.library is not None:
            return k._library is self.library
        return k._library is None and self.key is not None and _loaded.get(self.key) is self.comp


@lru_cache(maxsize=4096)
def _result_dtype(stmt: Statement, dtypes: tuple[str, ...]) -> np.dtype:
    return infer_dtypes(stmt, {n: np.dtype(d) for n, d in zip(stmt.operands, dtypes)})[stmt.expr]


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
