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


def resolve(options, name: str | None = None) -> Target:
    """The target ``options`` compile for (``name``, else ``options.device``), resolved on
    this machine (cached by its kind)."""
    if name is None:
        name = getattr(options, "device", DEFAULT)
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

# ----------------------------------------------------------------------------- cuda
# (issue 17, docs/gpu.md.)  The host code is compiled and linked like the CPU's and called
# through the same packed entry; it calls libmlir_cuda_runtime.so's mgpu* functions, left
# undefined in the library and resolved at load from the runtime, which the loader opens
# globally first - only after probing the driver with ctypes (an MLIR ExecutionEngine or a
# dlopen of the runtime without libcuda aborts or fails; the kernel library's constructor
# loads the embedded PTX, which needs a device).  Nothing here runs at ``import sparsecc``.

def _mlir_lib(name: str) -> str:
    import importlib.util
    spec = importlib.util.find_spec("mlir")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "lib", name)
        if os.path.exists(path):
            return path
    return ""


#: where the driver is looked for (a test points it at a stub)
CUDA_DRIVER = os.environ.get("SPARSECC_CUDA_DRIVER", "libcuda.so.1")


@lru_cache(maxsize=None)
def cuda_probe(driver: str = "") -> tuple[str, str]:
    """``(problem, arch)``: why no kernel can run on a CUDA device here (empty: none), and
    the first device's architecture (``sm_XY``; empty without one).  Only ctypes calls of
    the driver (cuInit, cuDeviceGetCount, cuDeviceGetAttribute): never the MLIR runtime."""
    driver = driver or CUDA_DRIVER
    try:
        cu = ctypes.CDLL(driver)
    except OSError as err:
        return f"no CUDA driver/device: the NVIDIA driver ({driver}) cannot be loaded ({err})", ""
    try:
        rc = cu.cuInit(0)
        if rc:
            return f"no CUDA driver/device: cuInit failed with CUDA error {rc}", ""
        n = ctypes.c_int(0)
        rc = cu.cuDeviceGetCount(ctypes.byref(n))
        if rc or n.value < 1:
            return f"no CUDA driver/device: the driver sees no device (cuDeviceGetCount: error {rc}, {n.value} devices)", ""
        dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        if cu.cuDeviceGet(ctypes.byref(dev), 0):
            return "no CUDA driver/device: cuDeviceGet(0) failed", ""
        cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)    # COMPUTE_CAPABILITY_MAJOR
        cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)    # COMPUTE_CAPABILITY_MINOR
    except AttributeError as err:           # not a CUDA driver
        return f"no CUDA driver/device: {driver} is not a CUDA driver ({err})", ""
    return "", f"sm_{major.value}{minor.value}" if major.value else ""


def _arch_number(arch: str) -> int:
    return int("".join(c for c in arch[3:] if c.isdigit()) or 0)


@lru_cache(maxsize=None)
def _cuda_target(gpu_arch: str | None) -> Target:
    from ..passes import gpu
    arch = gpu_arch
    if arch is None:                        # the device's, else the documented default
        arch = cuda_probe()[1] or gpu.DEFAULT_ARCH
    import hashlib
    return make("cuda", {"gpu_arch": arch, "ptx": gpu.PTX_FEATURES,
                         "tables": hashlib.sha256(gpu.fingerprint().encode()).hexdigest()[:16]})


def _cuda_resolve(options) -> Target:
    return _cuda_target(options.gpu_arch)


def _cuda_facts(target: Target):
    from ..passes.gpu import GpuFacts
    return GpuFacts(arch=target.param("gpu_arch"))


def _cuda_lower(module, options, facts):
    from ..passes import gpu
    return gpu.lower(module, options, facts, facts.arch)


def _cuda_codegen(llvm_ir: str, target: Target, options, exported: str) -> tuple[str, bytes]:
    """The host module (PTX embedded as a constant, a constructor that loads it through
    mgpuModuleLoadJIT): compiled for this machine's CPU like a CPU kernel."""
    return _cpu_codegen(llvm_ir, _cpu_target(None), options, exported)


def _cuda_link(obj: bytes, out: str, target: Target, info: dict, entry: str, cc: str) -> None:
    """Like the CPU's, without OpenMP; the mgpu* symbols stay undefined (see above)."""
    _cpu_link(obj, out, _cpu_target(None).replace(openmp_lib=""), {**info, "openmp": False}, entry, cc)


class NoDevice:
    """What the cuda loader gives for a kernel that cannot run here: its entry raises
    :class:`DeviceError` (``reason``) when called - after the operands were checked, before
    any native code.  Compiling and ``k.ir("ptx")`` work without a device."""

    def __init__(self, reason: str):
        self.reason = reason
        self._handle = ctypes.CDLL(None)._handle     # no sparsecc_num_threads: not threaded
        self.sparsecc_entry = _Raise(reason)


class _Raise:
    def __init__(self, reason: str):
        self.reason, self.restype, self.argtypes = reason, None, None

    def __call__(self, *args):
        from ..errors import DeviceError
        raise DeviceError(self.reason)


#: why a kernel has no GPU code, by what its compile chose (info["parallel"])
NO_GPU_CODE = ("this kernel has no GPU code, so it cannot run with device='cuda' (never silently on the "
               "CPU): {why}")


def no_gpu_code_reason(info: dict) -> str:
    if info.get("parallel", "none") == "none":
        why = ("the outer loop of its loop nest carries a reduction into the output (for example "
               "CSC SpMV/SpMM, a sum to a scalar), and a parallel reduction loop without atomics "
               "would race; store the matrix row-wise (CSR)")
    else:
        why = ("MLIR's sparsifier made no parallel GPU loop of its outer loop (a compressed outer "
               "level, or several sparse operands co-iterated, is iterated serially); use one sparse "
               "operand, or operands with a dense outer level (CSR)")
    return NO_GPU_CODE.format(why=why)


_cuda_loaded = False


def _cuda_load(path: str, info: dict):
    """Probe the driver (ctypes), check the architecture, then load libmlir_cuda_runtime.so
    globally and the kernel library; otherwise a :class:`NoDevice` that raises at the call."""
    global _cuda_loaded
    if not (info.get("stages") or {}).get("ptx"):
        return NoDevice(no_gpu_code_reason(info))
    problem, dev_arch = cuda_probe()
    if problem:
        return NoDevice(problem)
    import re
    m = re.search(r"\.target\s+(sm_\w+)", info["stages"]["ptx"])
    want = m.group(1) if m else ""
    if want and dev_arch and _arch_number(want) > _arch_number(dev_arch):
        return NoDevice(f"the kernel was compiled for {want}, but the device is {dev_arch}: "
                        f"use sc.Options(gpu_arch={dev_arch!r}) or gpu_arch=None (the device's)")
    if not _cuda_loaded:
        runtime = _mlir_lib("libmlir_cuda_runtime.so")
        if not runtime:
            return NoDevice("no CUDA runtime: libmlir_cuda_runtime.so is not in the MLIR tools package")
        try:
            import mlir.ir  # noqa: F401  (loads libLLVM.so, which the runtime library needs)
            ctypes.CDLL(runtime, mode=ctypes.RTLD_GLOBAL)
        except OSError as err:
            return NoDevice(f"no CUDA runtime: {runtime} cannot be loaded ({err})")
        _cuda_loaded = True
    return ctypes.CDLL(path)


CUDA = TargetKind(name="cuda", resolve=_cuda_resolve, key_params=("gpu_arch", "ptx", "tables"),
                  facts=_cuda_facts, lower=_cuda_lower, codegen=_cuda_codegen, link=_cuda_link,
                  load=_cuda_load)

#: every target kind, by name
KINDS: dict[str, TargetKind] = {CPU.name: CPU, CUDA.name: CUDA}

__all__ = ["DEFAULT", "KINDS", "Target", "TargetKind", "from_request", "make", "resolve"]
