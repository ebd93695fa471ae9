"""The one way from MLIR text to a callable native entry point: the disk-cache lookup
(verified), a compile in the worker process on a miss (failures remembered there), the
load (with the OpenMP runtime first when the library needs it), and the counters that
``sc.cache_info()`` reports.

Every kernel goes through :func:`load_module`: einsum specializations
(``runtime/specialization.py``) and the op library's structural kernels alike.  Nothing
outside ``sparsecc/runtime`` compiles, loads or counts kernels itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from dataclasses import dataclass, field

from ..options import DEFAULT, Options
from . import cache, compiler, targets, threads


@dataclass
class Stats:
    hits: int = 0         # calls served by an already loaded kernel
    disk_hits: int = 0    # kernels loaded from the disk cache
    misses: int = 0       # compilations

    def __repr__(self):
        return f"CacheInfo(hits={self.hits}, disk_hits={self.disk_hits}, misses={self.misses})"


#: the process's counters (``sc.cache_info()`` returns a copy)
STATS = Stats()


@dataclass
class Loaded:
    """One compiled module, loaded: its disk-cache key, the library and its packed entry
    point ``sparsecc_entry(void **args) -> int`` (1: an allocation inside failed)."""

    key: str
    lib: object                         # ctypes.CDLL, or targets.JitLibrary (no C compiler)
    entry: object
    info: dict = field(repr=False)      # what the cache JSON records: stages, arg_types, parallel, openmp
    info_path: str = ""


_modules: dict[tuple, Loaded] = {}
_lock = threading.Lock()


def _dump(key: str, stages: dict) -> None:
    folder = os.environ.get("SPARSECC_DUMP_IR")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    ext = {"llvm": "ll"}
    for k, (stage, text) in enumerate(stages.items()):
        with open(os.path.join(folder, f"{key}.{k}-{stage}.{ext.get(stage, 'mlir')}"), "w") as f:
            f.write(text)


def _from_disk_or_compile(mlir: str, options: Options, what: str) -> Loaded:
    target = targets.resolve(options)   # resolved once per process (cached)
    key = cache.key_of(mlir, options.key(), target)
    entry = cache.lookup(key)           # verified (SHA-256) or None; a bad entry is deleted
    if entry is not None:
        try:                            # a verified pair whose library will not load: rebuild
            lib = cache.open_library(entry, target)   # the target's loader (libomp first if needed)
        except OSError:
            cache.discard(entry)
            entry = None
    if entry is None:
        out = cache.build_path(key)     # a temporary name: store() hashes it and installs it
        reply = compiler.compile_library(mlir, out, target=target, options=options, what=what)
        entry = cache.store(key, {"stages": reply["stages"], "arg_types": reply["arg_types"],
                                  "parallel": reply["parallel"], "openmp": reply["openmp"],
                                  "guarded": reply.get("guarded", []), "inexact": reply.get("inexact", False),
                                  "imports": reply["imports"], "exports": reply["exports"]}, out)
        STATS.misses += 1
        _dump(key, reply["stages"])
        lib = cache.open_library(entry, target)   # exactly the bytes that were hashed
    else:
        STATS.disk_hits += 1
    threads.register(lib)                 # its thread count follows sc.set_num_threads
    fn = lib.sparsecc_entry
    fn.restype = ctypes.c_int             # 1: an allocation failed, 2: a guarded index out of range
                                          # (runtime/entry.py oom_entry_ir)
    fn.argtypes = [ctypes.c_void_p]
    return Loaded(key, lib, fn, entry.info, entry.meta)


def load_module(mlir: str, *, what: str = "a kernel", options: Options = DEFAULT,
                memo: bool = True) -> Loaded:
    """The loaded module for ``mlir`` compiled with ``options``: from this process's memory
    (``memo``; counted as a hit), else from the disk cache (a disk hit), else compiled in
    the worker process (a miss; ``what`` names the kernel in a :class:`CompileError`).

    ``memo=False``: a caller that keeps its own table of loaded kernels (and counts its own
    hits) goes to the disk cache directly."""
    if not memo:
        return _from_disk_or_compile(mlir, options, what)
    k = (mlir, options)
    got = _modules.get(k)
    if got is None:
        with _lock:
            got = _modules.get(k)
            if got is None:
                got = _modules[k] = _from_disk_or_compile(mlir, options, what)
                return got
    STATS.hits += 1
    return got


def read_info(info_path: str) -> dict:
    """A cache entry's JSON, read again (for ``Kernel.ir``): as :func:`cache.lookup` reads
    it, no link followed, no FIFO waited on, a bounded read; :class:`LibraryError` when it
    went bad (the kernel keeps running from memory; the next process rebuilds the entry)."""
    from ..errors import LibraryError
    from . import files
    try:
        info = json.loads(files.read_regular(info_path, files.JSON_LIMIT))
    except (OSError, ValueError, RecursionError) as err:
        why = err.why if isinstance(err, files.NotRegular) else (getattr(err, "strerror", None) or str(err))
        raise LibraryError(f"cannot read the kernel cache entry {info_path}: {why}", info_path) from None
    if not isinstance(info, dict) or not isinstance(info.get("stages"), dict):
        raise LibraryError(f"the kernel cache entry {info_path} holds no IR stages", info_path)
    return info


def read_stages(loaded_info_path: str) -> dict:
    """The IR stages recorded in a cache entry's JSON."""
    return read_info(loaded_info_path)["stages"]
