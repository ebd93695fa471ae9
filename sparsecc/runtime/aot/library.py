"""Loading an ahead-of-time library: the manifest, each kernel's statement rebuilt from it
and checked against the digest the library embeds, the entries called through ctypes.
Imports neither MLIR nor llvmlite."""

from __future__ import annotations

import ctypes
import json
import os

import numpy as np

from ... import dtypes as dt
from ...errors import SparseccError
from ...formats import Format
from .manifest import MANIFEST_VERSION, spec_digest, statement_from_json


# ------------------------------------------------------------------------------ load
class Library:
    """A loaded ahead-of-time library: one attribute per kernel (``lib.spmv(A, x)``)."""

    def __init__(self, path: str, manifest: dict, kernels: dict):
        self.path = path
        self.name = manifest["name"]
        self._kernels = kernels
        for k, v in kernels.items():
            setattr(self, k, v)

    def __repr__(self):
        return f"<sparsecc.aot.Library {self.name} ({', '.join(self._kernels)}) from {self.path}>"

    def __getitem__(self, k):
        return self._kernels[k]


def load(folder: str, name: str | None = None) -> Library:
    """Load a library built by :func:`build` from ``folder``.  Imports neither MLIR nor
    llvmlite: only the manifest, the expressions (parsed again) and ctypes."""
    if name is None:
        found = [f[:-5] for f in sorted(os.listdir(folder)) if f.endswith(".json")
                 and os.path.exists(os.path.join(folder, f"lib{f[:-5]}.so"))]
        if not found:
            raise SparseccError(f"no sparsecc library (lib<name>.so with <name>.json) in {folder}")
        if len(found) > 1:
            raise SparseccError(f"{folder} holds {len(found)} sparsecc libraries ({', '.join(found)}); name one")
        name = found[0]
    try:
        with open(os.path.join(folder, f"{name}.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as err:
        raise SparseccError(f"cannot read the manifest of library {name!r} in {folder}: {err}") from None
    if manifest.get("version") != MANIFEST_VERSION:
        raise SparseccError(f"library {name!r} was built by another sparsecc (manifest version "
                            f"{manifest.get('version')})")
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
        for kname, spec in manifest.get("kernels", {}).items():
            want = spec.get("gpu_arch", "")
            if want and dev_arch and _arch_number(want) > _arch_number(dev_arch):
                raise DeviceError(f"library {name!r}: kernel {kname!r} was built for {want}, but the device is "
                                  f"{dev_arch}; rebuild it with sc.Options(gpu_arch={dev_arch!r})")
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        raise SparseccError(f"cannot load library {name!r} from {path}: {err}") from None
    kernels = {}
    for kname, spec in manifest.get("kernels", {}).items():
        k = _load_kernel(name, kname, spec, lib, path, manifest_of=f"{name}.json in {folder}")
        kernels[kname] = k
    return Library(path, manifest, kernels)


def _load_kernel(name: str, kname: str, spec: dict, lib, path: str, manifest_of: str):
    """The kernel ``kname`` of a loaded library: its exact statement, formats and dtypes from
    the manifest, checked against the library (the digest it embeds) and against each other
    (the result dtype, the index order) before anything is called."""
    from ..kernel import Kernel, _result_dtype, loaded_specialization
    from ...expr import accesses

    def bad(why):
        return SparseccError(f"library {name!r}: kernel {kname!r} does not match {manifest_of}: {why}; "
                             f"rebuild the library with sc.aot.build")
    try:
        embedded = (ctypes.c_char * 65).in_dll(lib, f"{name}_{kname}_spec_sha256").value.decode("ascii", "replace")
    except (ValueError, AttributeError):
        raise bad("the library holds no such kernel") from None
    if embedded != spec_digest(spec):
        raise bad("the manifest entry was changed after the library was built")
    try:
        stmt = statement_from_json(spec["stmt"])
        dtypes = tuple(dt.lookup(np.dtype(o["dtype"]), f"operand {o['name']}").name for o in spec["operands"])
        fmts = tuple(Format.dense(len(o["indices"])) if o["format"] == "dense" else Format.parse(o["format"])
                     for o in spec["operands"])
        out_fmt = Format.parse(spec["out_format"]) if spec["out_format"] else None
        keys = tuple(o["key"] for o in spec["operands"])
    except (KeyError, TypeError, ValueError) as err:
        raise bad(f"malformed entry ({type(err).__name__}: {err})") from None
    if keys != stmt.operands:
        raise bad(f"operands {keys} but the statement reads {stmt.operands}")
    out = _result_dtype(stmt, dtypes)
    if out.name != spec["out_dtype"]:
        raise bad(f"'{stmt}' of {', '.join(dtypes)} gives {out.name}, the library writes {spec['out_dtype']}")
    index_order = list(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))
    if index_order != spec["index_order"]:
        raise bad(f"index order {index_order}, the library takes {spec['index_order']}")
    fn = getattr(lib, spec["entry"])
    fn.restype = ctypes.c_int           # 1: out of memory, 2: an index out of range (runtime/_worker.py oom_entry_ir)
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
                                       fills_output=fills)
    return k
