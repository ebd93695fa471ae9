"""Compile targets as data: what code is built for, how, and how it is loaded.

A :class:`Target` is a frozen value: its :class:`TargetKind` (found by name in
:data:`KINDS`) and the parameters it was resolved with.  Everything that compiles or loads
a kernel (the compile worker, the disk cache key, ahead-of-time builds, the kernel) takes a
target and calls its kind's functions; nothing outside this module asks which target it is.

The runtime resolves a target once per process (:func:`resolve`, cached): runtime facts such
as the host CPU and whether the OpenMP runtime is installed are looked up here, written into
the target's parameters, and handed to the pass pipelines as arguments
(:class:`sparsecc.passes.PipelineFacts`): the pipelines import nothing from the runtime.
The compile worker receives the resolved target as ``{"name", "params"}`` in its request and
rebuilds it with :func:`from_request`: it never probes the machine itself.

What a target kind must provide (``cpu`` below; a ``cuda`` kind adds one entry to
:data:`KINDS` with the same fields):

* ``name``: the registry key, also the first part of the cache key;
* ``resolve(options) -> Target``: runs in the user's process, once per distinct input
  (cache it): fills in the parameters from the options and the machine (CPU name and
  features; a GPU's architecture ...).  Parameters are strings, so they travel as JSON;
* ``key_params``: the parameters that change generated code, hashed into the disk key
  (CPU name and features, the OpenMP runtime's version; a GPU architecture);
* ``facts(target) -> PipelineFacts``: what the pass pipelines are told;
* ``lower(module, options, facts)``: the pass pipelines (data in ``sparsecc/passes/``) and
  the rewrites between them, MLIR down to the LLVM dialect (in the compile worker);
* ``codegen(llvm_ir, target, options, exported) -> (llvm_text, object_bytes)``: LLVM IR to
  an object for the host (a GPU target: PTX embedded in host code);
* ``link(obj, out, target, info, entry, cc)``: the object into the shared library ``out``
  (``info``: what ``lower`` chose, e.g. whether OpenMP is needed);
* ``load(path, info) -> library``: load the library (ctypes for the host), after whatever
  runtime it needs.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ..errors import InternalError
from ..passes.pipeline import PipelineFacts, host_features, lower

#: the target a kernel is built for unless one is named
DEFAULT = "cpu"


@dataclass(frozen=True)
class TargetKind:
    """The functions and tables of one kind of target (see the module docstring)."""

    name: str
    resolve: Callable
    key_params: tuple[str, ...]
    facts: Callable
    lower: Callable
    codegen: Callable
    link: Callable
    load: Callable


@dataclass(frozen=True)
class Target:
    """A resolved compile target: its kind and its parameters (name -> string, sorted)."""

    kind: TargetKind
    params: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return self.kind.name

    def param(self, name: str, default: str = "") -> str:
        return dict(self.params).get(name, default)

    def replace(self, **params: str) -> "Target":
        """This target with some parameters changed (tests; a variant of the host)."""
        merged = dict(self.params)
        merged.update(params)
        return Target(self.kind, tuple(sorted(merged.items())))

    def key(self) -> str:
        """The target's part of the disk cache key."""
        return ";".join([f"target={self.name}", *(f"{k}={self.param(k)}" for k in self.kind.key_params)])

    def facts(self) -> PipelineFacts:
        return self.kind.facts(self)

    def request(self) -> dict:
        """What the compile worker receives (JSON)."""
        return {"name": self.name, "params": dict(self.params)}


def make(name: str, params: dict) -> Target:
    kind = KINDS.get(name)
    if kind is None:
        raise InternalError(f"no compile target named {name!r} (known: {', '.join(sorted(KINDS))})")
    return Target(kind, tuple(sorted((str(k), str(v)) for k, v in params.items())))


def from_request(req: dict) -> Target:
    """The target a compile request names (inside the compile worker)."""
    if not isinstance(req, dict) or not isinstance(req.get("params"), dict):
        raise InternalError(f"a compile request without a well-formed target: {req!r}")
    return make(req.get("name"), req["params"])


def resolve(options, name: str = DEFAULT) -> Target:
    """The target ``options`` compile for, resolved on this machine (cached by its kind)."""
    kind = KINDS.get(name)
    if kind is None:
        raise InternalError(f"no compile target named {name!r} (known: {', '.join(sorted(KINDS))})")
    return kind.resolve(options)


# ----------------------------------------------------------------------------- cpu
@lru_cache(maxsize=None)
def _cpu_target(cpu: str | None) -> Target:
    """``cpu``: an LLVM CPU name (generic features), or None: this machine's CPU, all its
    features and the AVX-512 tuning.  Also the OpenMP runtime, if installed."""
    from .threads import runtime_path, runtime_version
    if cpu:
        name, features = cpu, ""
    else:
        import llvmlite.binding as llb
        name, features = llb.get_host_cpu_name(), host_features(llb.get_host_cpu_features().flatten())
    lib = runtime_path()
    return make("cpu", {"cpu": name, "features": features,
                        "openmp": runtime_version() if lib else "", "openmp_lib": lib or ""})


def _cpu_resolve(options) -> Target:
    return _cpu_target(options.cpu)


def _cpu_facts(target: Target) -> PipelineFacts:
    return PipelineFacts(openmp=bool(target.param("openmp")))


def _cpu_codegen(llvm_ir: str, target: Target, options, exported: str) -> tuple[str, bytes]:
    """Optimize ``llvm_ir`` with llvmlite for the target's CPU and features; only
    ``exported`` stays visible (hidden: the C entry linked next to it calls it)."""
    import llvmlite.binding as llb

    from ._worker import Rejected, redirect_allocations
    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    try:
        mod = llb.parse_assembly(llvm_ir)
        mod.verify()
    except RuntimeError as err:             # LLVM refused the IR
        raise Rejected(f"LLVM: {err}") from None
    # Every other function (the kernel, its C interface, the sparsifier's insert/sort
    # helpers) becomes internal, so LLVM may inline them and several kernels can share one
    # library without clashing symbols.
    for fn in mod.functions:
        if fn.is_declaration:
            continue
        if fn.name == exported:
            fn.visibility = "hidden"
        else:
            fn.linkage = "internal"
    tm = llb.Target.from_default_triple().create_target_machine(
        cpu=target.param("cpu"), features=target.param("features"), opt=options.opt_level,
        reloc="pic", codemodel="default")
    pb = llb.create_pass_builder(tm, llb.create_pipeline_tuning_options(speed_level=options.opt_level))
    pb.getModulePassManager().run(mod, pb)
    redirect_allocations(mod)
    return str(mod), tm.emit_object(mod)


def _cpu_link(obj: bytes, out: str, target: Target, info: dict, entry: str, cc: str) -> None:
    """``cc -shared`` the object with the checked-allocation C entry (``OOM_C``), libm, and
    libomp by name when the kernel has parallel loops (no run path: :func:`_cpu_load` loads
    it first)."""
    from ._worker import OOM_C, Rejected
    libs = ["-lm"]
    if info.get("openmp"):
        lib = target.param("openmp_lib")
        if not lib:
            raise InternalError("a kernel with parallel loops for a target without the OpenMP runtime")
        libs = ["-L" + os.path.dirname(lib), "-l:" + os.path.basename(lib), *libs]
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        o, so, c = (os.path.join(tmp, f) for f in ("kernel.o", "kernel.so", "entry.c"))
        with open(o, "wb") as f:
            f.write(obj)
        with open(c, "w") as f:
            f.write(OOM_C + f"SPARSECC_ENTRY({entry})\n")
        r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", so, o, c, *libs], capture_output=True, text=True)
        if r.returncode:
            raise Rejected(f"linking with {cc} failed: {r.stderr.strip()}")
        os.replace(so, out)


def _cpu_load(path: str, info: dict) -> ctypes.CDLL:
    if info.get("openmp"):
        from .threads import load_runtime
        load_runtime()                      # libomp, before the library that needs it
    return ctypes.CDLL(path)


CPU = TargetKind(name="cpu", resolve=_cpu_resolve, key_params=("cpu", "features", "openmp"), facts=_cpu_facts,
                 lower=lower, codegen=_cpu_codegen, link=_cpu_link, load=_cpu_load)

#: every target kind, by name
KINDS: dict[str, TargetKind] = {CPU.name: CPU}

__all__ = ["DEFAULT", "KINDS", "Target", "TargetKind", "from_request", "make", "resolve"]
