"""Kernels: specialize, compile (or find in a cache), call.

A :class:`Kernel` is a statement plus the formats the user fixed.  Each call resolves the
rest (formats from the operands, dtypes, index widths) into a specialization; each
specialization is compiled once per process (memory cache) and once per machine (disk cache).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from functools import lru_cache
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from ..dialect import KernelSignature, emit_kernel
from ..errors import CompileError, OperandError, SparseccError
from ..expr import Statement, accesses, describe, index_sizes, infer_dtypes
from ..formats import Format, resolve
from ..options import DEFAULT, Options
from . import cache, compiler
from .memref import describe as describe_array, specifier
from .operands import as_operand, build, default_format


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
    n = len(sig.index_order) + 1          # sizes, output (written in place, not returned)
    for f in formats:
        n += 1 if f.is_dense else len(f.fields()) + 1
    return n


def _build(stmt, fmts, dts, options, split):
    mlir, sig = emit_kernel(stmt, fmts, dts, split=split)
    key = cache.key_of(mlir, options.key())
    so, _ = cache.paths(key)
    info = cache.load(key)
    if info is None:
        reply = compiler.compile_library(mlir, so, opt_level=options.opt_level, cpu=options.cpu,
                                         what=f"'{stmt}'")
        info = {"stages": reply["stages"], "arg_types": reply["arg_types"]}
        cache.store(key, info)
        STATS.misses += 1
        _dump(key, reply["stages"])
    else:
        STATS.disk_hits += 1
    return mlir, sig, key, info


def specialize(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
               options: Options) -> Compiled:
    mem_key = (stmt, formats, dtypes, options)
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
        built = None
        try:
            built = _build(stmt, fmts, dts, options, split=False)
        except CompileError as first:
            # The sparsifier rejects (or crashes on) some fused expressions; the same
            # statement split into one generic per sparse operation often compiles.
            if first.ir_path and os.path.exists(first.ir_path):
                os.remove(first.ir_path)      # a failure reports the IR of the final attempt
        if built is None:
            built = _build(stmt, fmts, dts, options, split=True)
        mlir, sig, key, info = built
        so, meta = cache.paths(key)
        n = _expected_args(sig, formats)
        if len(info["arg_types"]) != n:
            raise SparseccError(f"internal error: kernel for '{stmt}' takes {len(info['arg_types'])} "
                                f"arguments, the runtime expected {n}")
        lib = ctypes.CDLL(so)
        entry = lib.sparsecc_entry
        entry.restype = None
        entry.argtypes = [ctypes.c_void_p]
        got = Compiled(key, sig, formats, mlir, lib, entry, meta)
        _loaded[mem_key] = got
        return got


class Kernel:
    """A compiled-on-demand kernel: ``k(A, x)`` (einsum) or ``k(A=A, x=x)`` (index notation)."""

    def __init__(self, stmt: Statement, formats: dict[str, object], options: Options = DEFAULT,
                 source: str = ""):
        self.stmt = stmt
        self.formats = formats
        self.options = options
        self.source = source or str(stmt)
        self._ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
        self._last: Compiled | None = None
        for name, spec in formats.items():
            if spec is not None and not (isinstance(spec, str) and spec.strip().lower() == "bsr"):
                resolve(spec, self._ranks[name], describe(name))   # fail early on bad formats

    def __repr__(self):
        fm = ", ".join(f"{describe(n)}: {self.formats.get(n) or 'from operand'}" for n in self.stmt.operands)
        return f"<sparsecc.Kernel '{self.source}' ({fm})>"

    # ------------------------------------------------------------------ calling
    def _bind(self, args, kwargs) -> list:
        ops = self.stmt.operands
        named = not ops[0].startswith("#") if ops else False
        if named:
            if len(args) > len(ops):
                raise OperandError(f"'{self.source}' takes {len(ops)} operands ({', '.join(ops)}), "
                                   f"got {len(args)} positional")
            values = dict(zip(ops, args))
            for k, v in kwargs.items():
                if k not in ops:
                    raise OperandError(f"'{self.source}' has no operand {k!r}; its operands are {', '.join(ops)}")
                if k in values:
                    raise OperandError(f"operand {k!r} given twice")
                values[k] = v
            missing = [o for o in ops if o not in values]
            if missing:
                raise OperandError(f"'{self.source}' needs operand(s) {', '.join(missing)}")
            return [values[o] for o in ops]
        if kwargs:
            raise OperandError(f"einsum kernels take operands by position, got keyword(s) {', '.join(kwargs)}")
        if len(args) != len(ops):
            raise OperandError(f"'{self.source}' takes {len(ops)} operand(s), got {len(args)}")
        return list(args)

    def _prepare(self, args, kwargs):
        values = [as_operand(v, describe(n)) for n, v in zip(self.stmt.operands, self._bind(args, kwargs))]
        shapes, dtypes, fmts = {}, [], []
        for name, x in zip(self.stmt.operands, values):
            what = describe(name)
            dtypes.append(dt.lookup(x.dtype, what).name)
            shapes[name] = tuple(x.shape)
        sizes = index_sizes(self.stmt, shapes)
        for name, x in zip(self.stmt.operands, values):
            what = describe(name)
            own, block = default_format(x)
            spec = self.formats.get(name) or own
            fmts.append(_resolve_cached(spec, self._ranks[name], what, block))
        stores = [build(x, f, describe(n)) for n, x, f in zip(self.stmt.operands, values, fmts)]
        out = _result_dtype(self.stmt, tuple(dtypes))
        if out.kind == "c":
            # The sparsifier cannot lower real->complex conversions inside a sparse loop:
            # store such an operand's values as complex (numpy.einsum converts them too).
            for k, s in enumerate(stores):
                if not s.fmt.is_dense and s.buffers[-1].dtype != out:
                    s.buffers[-1] = s.buffers[-1].astype(out)
                    dtypes[k] = out.name
        return stores, tuple(dtypes), sizes

    def __call__(self, *args, **kwargs):
        stores, dtypes, sizes = self._prepare(args, kwargs)
        comp = specialize(self.stmt, tuple(s.fmt for s in stores), dtypes, self.options)
        self._last = comp
        sig = comp.signature
        out = np.empty(tuple(sizes[i] for i in self.stmt.indices), dtype=sig.out_dtype)
        keep = []                                   # everything the call points into
        for i in sig.index_order:
            keep.append(ctypes.c_int64(sizes[i]))
        for s in stores:
            if s.fmt.is_dense:
                keep.append(describe_array(s.buffers[0]))
            else:
                keep.extend(describe_array(b) for b in s.buffers)
                keep.append(specifier(s.lvl_sizes, [b.size for b in s.buffers]))
        keep.append(describe_array(out))
        argv = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
        comp.entry(argv)
        del keep, stores
        return out[()] if out.ndim == 0 else out

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
                fmts.append(resolve(spec, self._ranks[n], describe(n)).with_widths(32, 32))
            comp = specialize(self.stmt, tuple(fmts), ("float64",) * len(fmts), self.options)
        if stage == "mlir":
            return comp.mlir
        return comp.stages()[stage]


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
