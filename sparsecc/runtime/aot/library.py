"""Loading an ahead-of-time library: the manifest, each kernel's statement rebuilt from it
and checked against the digest the library embeds, the entries called through ctypes.
Imports neither MLIR nor llvmlite."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re

import numpy as np

from ... import dtypes as dt
from ...errors import LibraryError, SparseccError
from ...formats import Format
from .. import files
from .manifest import MANIFEST_VERSION, checked_digest, shape_problem, statement_from_json
from .planned_lib import load_planned


#: the Library's own attributes: no kernel may be called so (``sc.aot.build`` refuses them,
#: and every name starting with "_"); kernels are reached through ``__getattr__`` and
#: ``lib[name]``, so even a manifest that holds such a name cannot overwrite one
RESERVED = frozenset({"path", "name", "folder", "kernels"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Library:
    """A loaded ahead-of-time library: its kernels by name, as attributes (``lib.spmv(A, x)``)
    or items (``lib["spmv"]``); ``path``, ``name``, ``folder`` and ``kernels`` (a name ->
    kernel mapping) are its own."""

    def __init__(self, path: str, manifest: dict, kernels: dict):
        self.path = path
        self.folder = os.path.dirname(path)
        self.name = manifest["name"]
        self._kernels = dict(kernels)

    @property
    def kernels(self) -> dict:
        return dict(self._kernels)

    def __getattr__(self, k):          # only for names that are not the Library's own
        kernels = self.__dict__.get("_kernels", {})
        if k in kernels:
            return kernels[k]
        raise AttributeError(f"library {self.__dict__.get('name')!r} has no kernel {k!r} "
                             f"(kernels: {', '.join(kernels) or 'none'})")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._kernels))

    def __repr__(self):
        return f"<sparsecc.aot.Library {self.name} ({', '.join(self._kernels)}) from {self.path}>"

    def __getitem__(self, k):
        return self._kernels[k]


def _read(path: str, limit: int, what: str) -> bytes:
    """``path``'s bytes, read as runtime/files.py reads what it trusts (no link followed, no
    FIFO waited on, a regular file only, a bounded read); LibraryError naming it otherwise."""
    try:
        return files.read_regular(path, limit)
    except OSError as err:
        why = err.why if isinstance(err, files.NotRegular) else (err.strerror or str(err))
        raise LibraryError(f"cannot read {what} {path}: {why}", path) from None


def load(folder: str, name: str | None = None) -> Library:
    """Load a library built by :func:`build` from ``folder``.  Imports neither MLIR nor
    llvmlite: only the manifest, the expressions (parsed again) and ctypes.

    Before anything is loaded: the manifest is read (a regular file, not a link, at most
    ``files.JSON_LIMIT`` bytes) and its shape checked; ``lib<name>.so`` is read the same way
    and must have the size and SHA-256 the manifest records (a manifest written before they
    were recorded: a whole ELF file), and what is loaded is exactly those bytes (a private
    copy, as for the kernel cache).  Any failure is a :class:`LibraryError` naming the file."""
    if name is None:
        found = [f[:-5] for f in sorted(os.listdir(folder)) if f.endswith(".json")
                 and os.path.lexists(os.path.join(folder, f"lib{f[:-5]}.so"))]
        if not found:
            raise SparseccError(f"no sparsecc library (lib<name>.so with <name>.json) in {folder}")
        if len(found) > 1:
            raise SparseccError(f"{folder} holds {len(found)} sparsecc libraries ({', '.join(found)}); name one")
        name = found[0]
    if not isinstance(name, str) or not _NAME.match(name):
        raise SparseccError(f"a library name is a C identifier, got {name!r}")
    meta = os.path.abspath(os.path.join(folder, f"{name}.json"))
    try:
        manifest = json.loads(_read(meta, files.JSON_LIMIT, f"the manifest of library {name!r},"))
    except (ValueError, RecursionError) as err:
        raise LibraryError(f"cannot read the manifest of library {name!r}, {meta}: it is not JSON "
                           f"({type(err).__name__}: {err})", meta) from None
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        got = manifest.get("version") if isinstance(manifest, dict) else None
        raise LibraryError(f"library {name!r} was built by another sparsecc (manifest version {got!r} "
                           f"in {meta}); rebuild it with sc.aot.build", meta)
    problem = shape_problem(manifest, name, _NAME)
    if problem:
        raise LibraryError(f"the manifest of library {name!r}, {meta}, is malformed: {problem}; "
                           f"rebuild the library with sc.aot.build", meta)
    path = os.path.abspath(os.path.join(folder, f"lib{name}.so"))
    if manifest.get("device") == "cuda":
        # the library's constructor loads its PTX through libmlir_cuda_runtime.so, which
        # needs the driver and a device: ask the driver first (ctypes), as JIT kernels do
        from ...errors import DeviceError
        from ..targets import cuda_probe
        problem = cuda_probe()[0]
        if problem:
            raise DeviceError(f"library {name!r} holds cuda kernels and cannot be loaded here: {problem}")
        from ..targets import _arch_number
        dev_arch = cuda_probe()[1]
        for kname, spec in manifest["kernels"].items():
            want = spec.get("gpu_arch", "")
            if want and dev_arch and _arch_number(want) > _arch_number(dev_arch):
                raise DeviceError(f"library {name!r}: kernel {kname!r} was built for {want}, but the device is "
                                  f"{dev_arch}; rebuild it with sc.Options(gpu_arch={dev_arch!r})")
    lib = _open(path, name, manifest.get("library"), meta)
    kernels = {}
    ir = _IR(folder, name, manifest.get("ir"))
    for kname, spec in manifest["kernels"].items():
        if "plan" in spec:
            continue
        k = _load_kernel(name, kname, spec, lib, path, manifest_of=meta, stages_of=lambda k=kname: ir.stages(k))
        kernels[kname] = k
    for kname, spec in manifest["kernels"].items():
        if "plan" in spec:
            kernels[kname] = load_planned(name, kname, spec, kernels, lib, meta)
    public = {k: v for k, v in kernels.items() if "step_of" not in manifest["kernels"][k]}
    return Library(path, manifest, public)


def _open(path: str, name: str, recorded: dict | None, meta: str):
    """``lib<name>.so`` loaded from exactly the bytes that were checked (its size and SHA-256
    against the manifest's; without them, a whole ELF file): a truncated or replaced library
    is a LibraryError, never a SIGBUS inside dlopen."""
    data = _read(path, files.LIBRARY_LIMIT, f"library {name!r},")
    if recorded is not None:
        if len(data) != recorded["size"]:
            how = "truncated" if len(data) < recorded["size"] else "longer than built"
            raise LibraryError(f"library {name!r}: {path} holds {len(data)} bytes, the manifest {meta} records "
                               f"{recorded['size']}: it is {how} (an interrupted copy, a full disk?); "
                               f"copy or rebuild it", path)
        if hashlib.sha256(data).hexdigest() != recorded["sha256"]:
            raise LibraryError(f"library {name!r}: the SHA-256 of {path} is not the one the manifest {meta} "
                               f"records: it was altered or replaced after the build; copy or rebuild it", path)
    problem = files.elf_problem(data)       # (a manifest of an older build records no hash)
    if problem:
        raise LibraryError(f"library {name!r}: {path} cannot be loaded: {problem}; copy or rebuild it", path)
    from .. import cache
    try:       # the library's folder first: a cuda library finds libmlir_cuda_runtime.so by $ORIGIN
        return files.load_copy(data, (os.path.dirname(path), cache.private_dir), f"lib{name}", ".so", ctypes.CDLL)
    except OSError as err:
        raise LibraryError(f"cannot load library {name!r} from {path}: {err}", path) from None


class _IR:
    """The IR stages of a library's kernels, from ``<name>.ir.json`` beside it (read and
    checked against the manifest's size and SHA-256 on the first ``Kernel.ir``)."""

    def __init__(self, folder: str, name: str, recorded: dict | None):
        self.path = os.path.abspath(os.path.join(folder, f"{name}.ir.json"))
        self.name, self.recorded, self.kernels = name, recorded, None

    def stages(self, kname: str) -> dict:
        if self.kernels is None:
            if self.recorded is None:
                raise LibraryError(f"library {self.name!r} keeps no IR (built by an older sparsecc): rebuild it "
                                   f"with sc.aot.build, or call .ir() on the kernel it was built from", self.path)
            data = _read(self.path, files.JSON_LIMIT, f"the IR of library {self.name!r},")
            if len(data) != self.recorded["size"] or hashlib.sha256(data).hexdigest() != self.recorded["sha256"]:
                raise LibraryError(f"library {self.name!r}: {self.path} is not the IR file the manifest records "
                                   f"(size or SHA-256); rebuild the library", self.path)
            try:
                self.kernels = json.loads(data)["kernels"]
            except (ValueError, RecursionError, KeyError, TypeError) as err:
                raise LibraryError(f"library {self.name!r}: {self.path} is malformed ({err})", self.path) from None
        got = self.kernels.get(kname) if isinstance(self.kernels, dict) else None
        stages = got.get("stages") if isinstance(got, dict) else None
        if not isinstance(stages, dict) or not stages:
            raise LibraryError(f"library {self.name!r}: {self.path} holds no IR of kernel {kname!r}", self.path)
        return stages


def _load_kernel(name: str, kname: str, spec: dict, lib, path: str, manifest_of: str, stages_of=None):
    """The kernel ``kname`` of a loaded library: its exact statement, formats and dtypes from
    the manifest, checked against the library (the digest it embeds) and against each other
    (the result dtype, the index order) before anything is called."""
    from ..kernel import Kernel, _result_dtype, loaded_specialization
    from ...expr import accesses

    bad = checked_digest(name, kname, spec, lib, manifest_of)
    try:
        stmt = statement_from_json(spec["stmt"])
        dtypes = tuple(dt.lookup(np.dtype(o["dtype"]), f"operand {o['name']}").name for o in spec["operands"])
        fmts = tuple(Format.dense(len(o["indices"])) if o["format"] == "dense" else Format.parse(o["format"])
                     for o in spec["operands"])
        out_fmt = Format.parse(spec["out_format"]) if spec["out_format"] else None
        keys = tuple(o["key"] for o in spec["operands"])
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as err:     # SparseccError too
        raise bad(f"malformed entry ({type(err).__name__}: {err})") from None
    if keys != stmt.operands:
        raise bad(f"operands {keys} but the statement reads {stmt.operands}")
    out = _result_dtype(stmt, dtypes)
    if out.name != spec["out_dtype"]:
        raise bad(f"'{stmt}' of {', '.join(dtypes)} gives {out.name}, the library writes {spec['out_dtype']}")
    index_order = list(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))
    if index_order != spec["index_order"]:
        raise bad(f"index order {index_order}, the library takes {spec['index_order']}")
    try:
        fn = getattr(lib, spec["entry"])
    except AttributeError:
        raise bad(f"the library holds no entry {spec['entry']!r}") from None
    fn.restype = ctypes.c_int           # 1: out of memory, 2: an index out of range (runtime/entry.py oom_entry_ir)
    fn.argtypes = [ctypes.c_void_p]
    k = Kernel(stmt, dict(zip(keys, fmts)), source=spec["source"],
               out_format=out_fmt if out_fmt else "dense", prune=spec.get("prune", False))
    guarded = spec.get("guarded", [])
    n_args = len(index_order) + 1 + sum(1 if f.is_dense else len(f.fields()) + 1 for f in fmts)
    if not (isinstance(guarded, list) and all(type(g) is int and 0 <= g < n_args for g in guarded)):
        raise bad(f"guarded operands {guarded!r}")
    # a dense result: the sparsifier's AOT kernels fill it themselves (emitted without
    # zeroed_output, since manifest version 1), the hand-written ones as recorded
    fills = out_fmt is None and spec.get("device") != "cuda" and (
        spec.get("fills_output") is True if "kernel" in spec else True)
    k._library = loaded_specialization(stmt, fmts, dtypes, out_fmt, lib, fn, path, guarded=tuple(guarded),
                                       fills_output=fills, stages_of=stages_of)
    return k
