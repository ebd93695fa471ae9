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
* ``kernel_facts(target) -> TargetFacts``: what the hand-written kernels' emission is told
  (``sparsecc/kernel_abi.py``: the processor architecture and operating system the code runs
  on, resolved here into the parameters ``arch`` and ``system``; emission never reads the host);
* ``lower(module, options, facts)``: the pass pipelines (data in ``sparsecc/passes/``) and
  the rewrites between them, MLIR down to the LLVM dialect (in the compile worker);
* ``oom_variant(target)``: where the checked-allocation entry keeps its jump buffer in
  objects of this target (``entry.oom_entry_ir``);
* ``codegen(llvm_ir, target, options, entry, oom) -> (llvm_text, object_bytes, imports,
  exports)``: LLVM IR to an object for the host (a GPU target: PTX embedded in host code)
  with the checked entry ``entry`` linked in; ``imports``/``exports``: the symbols the
  object needs and defines;
* ``artifact(target)``: the file suffix of what ``link`` writes (``.so``, ``.o``);
* ``link(obj, out, target, info)``: the object into the artifact ``out`` (``info``: what
  ``lower`` chose, e.g. whether OpenMP is needed);
* ``load(path, info, target) -> library``: load the artifact, after whatever runtime it
  needs: an object with ``sparsecc_entry`` and the other exported names as attributes
  (``ctypes.CDLL``, or :class:`JitLibrary`).

**Linking without a C compiler.**  The CPU target links with a C compiler when there is
one (``$CC``, else ``cc`` on ``PATH``: ``cc -shared`` makes ``<key>.so``, loaded with
``ctypes.CDLL``), and otherwise keeps the object itself (``<key>.o``) and loads it into the
process with LLVM's ORC JIT (llvmlite, JITLink): its undefined symbols resolve against
libc, libm, libgcc_s and, for parallel kernels, the libomp sparsecc loaded.  The choice
(``linker``: ``cc`` or ``orc``) is made once per process and is part of the cache key.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ..errors import InternalError
from ..kernel_abi import TargetFacts
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
    kernel_facts: Callable
    lower: Callable
    oom_variant: Callable
    codegen: Callable
    artifact: Callable
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

    def kernel_facts(self) -> TargetFacts:
        return self.kind.kernel_facts(self)

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
def _machine() -> dict:
    """The parameters ``arch`` and ``system`` of the machine the code runs on (this one: the
    CPU target compiles for the host's triple, and a cuda kernel's host code runs here)."""
    return {"arch": platform.machine().lower(), "system": sys.platform}


def _machine_facts(target: Target) -> TargetFacts:
    wide = "+avx512f" in target.param("features").split(",")
    return TargetFacts(arch=target.param("arch"), system=target.param("system"), vector_bytes=64 if wide else 32)


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
    cc, why = c_compiler()
    if cc is None and os.environ.get("CC", "").strip():
        warnings.warn(f"sparsecc: {why}; kernels are loaded without a C compiler (LLVM's ORC JIT)",
                      UserWarning, stacklevel=2)
    return make("cpu", {**_machine(), "cpu": name, "features": features,
                        "openmp": runtime_version() if lib else "", "openmp_lib": lib or "",
                        "linker": "cc" if cc else "orc", "cc": shlex.join(cc) if cc else ""})


def c_compiler(cc: str | None = None, *, zig: bool = False) -> tuple[list[str] | None, str]:
    """The C compiler command to use: ``cc`` if given, else ``$CC``, else ``cc`` on ``PATH``
    (its first word resolved on ``PATH``), else, with ``zig`` (ahead-of-time builds, never
    JIT links: a Zig link takes seconds), Zig's from the ``ziglang`` package (the ``aot``
    extra); ``(None, why)`` when there is none."""
    where = "given" if cc else "in CC"
    if cc is None:
        cc = os.environ.get("CC", "").strip()
    if cc:
        try:
            cmd = shlex.split(cc)
        except ValueError as err:
            return None, f"the C compiler {where} ({cc!r}) cannot be split into words: {err}"
        exe = shutil.which(cmd[0]) if cmd else None
        if exe is None:
            return None, f"the C compiler {where} ({cc!r}) is not a program on PATH"
        return [exe, *cmd[1:]], ""
    exe = shutil.which("cc")
    if exe is not None:
        return [exe], ""
    if zig:
        import importlib.util
        if importlib.util.find_spec("ziglang") is not None:
            return [sys.executable, "-m", "ziglang", "cc"], ""
    return None, "no C compiler was found (CC is not set and there is no cc on PATH)"


def _cpu_resolve(options) -> Target:
    return _cpu_target(options.cpu)


def _cpu_facts(target: Target) -> PipelineFacts:
    return PipelineFacts(openmp=bool(target.param("openmp")))


def _cpu_oom_variant(target: Target) -> str:
    return "tls" if target.param("linker", "cc") == "cc" else "key"


def _cpu_codegen(llvm_ir: str, target: Target, options, entry: str, oom: str):
    """Optimize ``llvm_ir`` with llvmlite for the target's CPU and features; only the
    packed entry ``<entry>__body`` stays visible (hidden), and the checked entry
    ``entry`` (variant ``oom``) is linked in after optimization."""
    import llvmlite.binding as llb

    from .entry import BODY, Rejected, add_oom_entry, imports_of, redirect_allocations
    exported = entry + BODY
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
    add_oom_entry(mod, entry, oom)
    exports = sorted({fn.name for fn in mod.functions if not fn.is_declaration and fn.linkage.name == "external"
                      and fn.visibility.name == "default"}
                     | {g.name for g in mod.global_variables if not g.is_declaration
                        and g.linkage.name == "external"})
    return str(mod), tm.emit_object(mod), imports_of(mod), exports


def _cpu_artifact(target: Target) -> str:
    return ".so" if target.param("linker", "cc") == "cc" else ".o"


def _cpu_link(obj: bytes, out: str, target: Target, info: dict) -> None:
    """``cc -shared`` the object (the checked entry is inside) with libm, and libomp by name
    when the kernel has parallel loops (no run path: :func:`_cpu_load` loads it first).
    Without a C compiler the object itself is the artifact (loaded by ORC)."""
    from .entry import Rejected
    if target.param("linker", "cc") == "orc":
        with open(out, "wb") as f:
            f.write(obj)
        return
    libs = ["-lm"]
    if info.get("openmp"):
        lib = target.param("openmp_lib")
        if not lib:
            raise InternalError("a kernel with parallel loops for a target without the OpenMP runtime")
        libs = ["-L" + os.path.dirname(lib), "-l:" + os.path.basename(lib), *libs]
    cc = shlex.split(target.param("cc") or "cc")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        o, so = (os.path.join(tmp, f) for f in ("kernel.o", "kernel.so"))
        with open(o, "wb") as f:
            f.write(obj)
        try:
            r = subprocess.run([*cc, "-shared", "-fPIC", "-o", so, o, *libs], capture_output=True, text=True)
        except OSError as err:
            r = None
            why = str(err)
        if r is None or r.returncode:
            raise Rejected(f"linking the kernel with the C compiler {shlex.join(cc)} (CC, else cc on PATH) failed; "
                           f"set CC to a working C compiler: {why if r is None else r.stderr.strip()}")
        os.replace(so, out)


def _cpu_load(path: str, info: dict, target: Target | None = None):
    if target is not None and target.param("linker", "cc") == "orc":
        with open(path, "rb") as f:
            return orc_load(f.read(), info)
    if info.get("openmp"):
        from .threads import load_runtime
        load_runtime()                      # libomp, before the library that needs it
    return ctypes.CDLL(path)


# ----------------------------------------------------------------------------- ORC
class JitLibrary:
    """An object loaded into this process by LLVM's ORC JIT: its exported functions as
    attributes (``ctypes`` function pointers), :meth:`address_of` for its globals.  The
    code stays loaded as long as this object lives (kept for the process, like a CDLL)."""

    def __init__(self, tracker, exports: list[str]):
        self._tracker = tracker
        self._addresses = {n: tracker[n] for n in exports}

    def address_of(self, name: str) -> int | None:
        return self._addresses.get(name)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        addr = self._addresses.get(name)
        if addr is None:
            raise AttributeError(f"the JIT-loaded library exports no {name!r}")
        fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(addr)
        setattr(self, name, fn)
        return fn


_orc_lock = threading.Lock()
_orc: dict = {}


def _orc_state() -> dict:
    """The process's LLJIT (JITLink), the shared pthread key of the checked entries, and the
    libraries symbols are resolved in (created once)."""
    if _orc:
        return _orc
    import llvmlite.binding as llb
    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    libc = ctypes.CDLL(None)
    key = ctypes.c_uint32()
    rc = libc.pthread_key_create(ctypes.byref(key), None)
    if rc:
        raise OSError(rc, "pthread_key_create failed: cannot load kernels without a C compiler")
    handles = [libc]
    for name in ("libm.so.6", "libgcc_s.so.1"):     # libm's functions, compiler-rt builtins
        try:
            handles.append(ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL))
        except OSError:
            pass
    tm = llb.Target.from_default_triple().create_target_machine(reloc="pic", codemodel="default")
    _orc.update(jit=llb.create_lljit_compiler(tm, use_jit_link=True), key=key, handles=handles,
                names=iter(range(1 << 62)))
    return _orc


def orc_load(obj: bytes, info: dict) -> JitLibrary:
    """Load the object ``obj`` of a cache entry into the process (ORC): ``info["imports"]``
    resolved in the loaded libraries (libomp first for a parallel kernel),
    ``info["exports"]`` looked up.  Raises OSError if it cannot be loaded."""
    import llvmlite.binding as llb
    with _orc_lock:
        st = _orc_state()
        handles = list(st["handles"])
        if info.get("openmp"):
            from .threads import load_runtime
            handles.insert(0, load_runtime())
        b = llb.JITLibraryBuilder().add_object_img(obj)
        for name in info.get("imports", []):
            if name == "sparsecc_oom_key":
                b.import_symbol(name, ctypes.addressof(st["key"]))
                continue
            for h in handles:
                try:
                    b.import_symbol(name, ctypes.cast(getattr(h, name), ctypes.c_void_p).value)
                    break
                except AttributeError:
                    continue
        b.add_current_process()         # what codegen added on its own (compiler-rt builtins)
        exports = list(info.get("exports", []))
        for name in exports:
            b.export_symbol(name)
        try:
            tracker = b.link(st["jit"], f"sparsecc{next(st['names'])}")
        except RuntimeError as err:
            raise OSError(f"LLVM's ORC JIT could not load the kernel object: {err}") from None
        return JitLibrary(tracker, exports)


CPU = TargetKind(name="cpu", resolve=_cpu_resolve, key_params=("cpu", "features", "openmp", "linker"),
                 facts=_cpu_facts, kernel_facts=_machine_facts, lower=lower, oom_variant=_cpu_oom_variant, codegen=_cpu_codegen,
                 artifact=_cpu_artifact, link=_cpu_link, load=_cpu_load)

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
def _cuda_target(gpu_arch: str | None, device_buffers: tuple = ()) -> Target:
    """``device_buffers``: the kernel's buffers that are device pointers (device-resident
    operands: ``passes/device_args.py`` drops their copies); part of the key."""
    from ..passes import gpu
    arch = gpu_arch
    if arch is None:                        # the device's, else the documented default
        arch = cuda_probe()[1] or gpu.DEFAULT_ARCH
    import hashlib
    params = {**_machine(), "gpu_arch": arch, "ptx": gpu.PTX_FEATURES,
              "tables": hashlib.sha256(gpu.fingerprint().encode()).hexdigest()[:16]}
    if device_buffers:                      # host-operand kernels keep the keys they had
        params["device_buffers"] = ",".join(map(str, device_buffers))
    return make("cuda", params)


def _cuda_resolve(options) -> Target:
    return _cuda_target(options.gpu_arch, tuple(getattr(options, "device_buffers", ())))


def _cuda_facts(target: Target):
    from ..passes.gpu import GpuFacts
    bufs = target.param("device_buffers")
    return GpuFacts(arch=target.param("gpu_arch"),
                    device_memrefs=tuple(int(b) for b in bufs.split(",")) if bufs else ())


def _cuda_lower(module, options, facts):
    from ..passes import gpu
    return gpu.lower(module, options, facts, facts.arch)


def _cuda_host() -> Target:
    """The CPU target the host side of a cuda kernel is compiled and linked for: this
    machine's, linked by a C compiler (the mgpu* symbols resolve when the library is
    loaded after libmlir_cuda_runtime.so, which ORC's in-process loader cannot do)."""
    host = _cpu_target(None)
    if host.param("linker", "cc") != "cc":
        from .entry import Rejected
        raise Rejected("the cuda target links its host code with a C compiler: install one or set CC "
                       "(CPU kernels need none)")
    return host.replace(openmp_lib="")


def _cuda_oom_variant(target: Target) -> str:
    return "tls"                        # linked by a C compiler into a shared library


def _cuda_artifact(target: Target) -> str:
    return ".so"


def _cuda_codegen(llvm_ir: str, target: Target, options, entry: str, oom: str):
    """The host module (PTX embedded as a constant, a constructor that loads it through
    mgpuModuleLoadJIT): compiled for this machine's CPU like a CPU kernel."""
    return _cpu_codegen(llvm_ir, _cuda_host(), options, entry, oom)


def _cuda_link(obj: bytes, out: str, target: Target, info: dict) -> None:
    """Like the CPU's, without OpenMP; the mgpu* symbols stay undefined (see above)."""
    _cpu_link(obj, out, _cuda_host(), {**info, "openmp": False})


class NoDevice:
    """What the cuda loader gives for a kernel that cannot run here: its entry raises
    :class:`DeviceError` (``reason``) when called - after the operands were checked, before
    any native code.  Compiling and ``k.ir("ptx")`` work without a device."""

    def __init__(self, reason: str):
        self.reason = reason
        self.sparsecc_entry = _Raise(reason)

    def address_of(self, name: str) -> int:
        """No globals (``threads.register``: not a threaded library)."""
        raise ValueError(f"{name}: a cuda kernel that cannot run here has no globals")


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


def _cuda_load(path: str, info: dict, target: Target | None = None):
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


CUDA = TargetKind(name="cuda", resolve=_cuda_resolve, key_params=("gpu_arch", "ptx", "tables", "device_buffers"),
                  facts=_cuda_facts, kernel_facts=_machine_facts, lower=_cuda_lower, oom_variant=_cuda_oom_variant, codegen=_cuda_codegen,
                  artifact=_cuda_artifact, link=_cuda_link, load=_cuda_load)

#: every target kind, by name
KINDS: dict[str, TargetKind] = {CPU.name: CPU, CUDA.name: CUDA}

__all__ = ["DEFAULT", "KINDS", "JitLibrary", "Target", "TargetKind", "c_compiler", "from_request", "make",
           "resolve"]
