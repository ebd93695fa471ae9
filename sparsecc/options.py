"""Everything that changes generated code, in one frozen object with a stable key.

The thread count is not here: it is a run-time setting (``sc.set_num_threads``) that does
not change the compiled code, so it does not split the cache.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from .errors import SparseccError

#: MLIR's ``parallelization-strategy`` values, plus "auto" (sparsecc picks per kernel)
PARALLEL = ("auto", "none", "dense-outer-loop", "any-storage-outer-loop", "dense-any-loop",
            "any-storage-any-loop")
#: MLIR's ``loop-ordering-strategy`` of ``sparse-reinterpret-map``
LOOP_ORDERS = ("default", "dense-outer")
#: where a kernel runs: ``cpu`` (this machine's CPU) or ``cuda`` (an NVIDIA GPU; docs/gpu.md)
DEVICES = ("cpu", "cuda")
#: the NVIDIA architectures LLVM 22's NVPTX backend generates PTX for (sm_50 and newer:
#: older ones are gone from CUDA 12 drivers); ``sparsecc.passes.gpu.DEFAULT_ARCH`` without one
GPU_ARCHS = ("sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80",
             "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101", "sm_101a",
             "sm_103", "sm_103a", "sm_110", "sm_110a", "sm_120", "sm_120a", "sm_121", "sm_121a")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True, slots=True)
class Options:
    """Code generation options: a frozen, hashable object; every field but ``device`` and ``gpu_arch`` (in the target's key) is part of the
    kernel cache key (the thread count is not: it is a run-time setting).

    Args:
        opt_level: LLVM's optimization level, 0 to 3.
        cpu: The target CPU for LLVM: ``None`` for this machine's CPU and all its features,
            or an LLVM CPU name (``"x86-64"``, ``"x86-64-v3"``, ``"skylake"`` ...).
        parallel: Which loops run in parallel (MLIR's ``parallelization-strategy``):
            ``"auto"`` (sparsecc chooses: the outer loop when it writes a dense result),
            ``"none"``, ``"dense-outer-loop"``, ``"any-storage-outer-loop"``,
            ``"dense-any-loop"``, ``"any-storage-any-loop"``.
        vector_length: ``0`` for scalar code (LLVM may still vectorize), or a power of two
            for MLIR's sparse vectorizer.
        index_width: 32 or 64-bit positions and coordinates of formats built by sparsecc;
            ``None``: 32 where they fit.
        loop_order: ``"default"`` or ``"dense-outer"`` (MLIR's loop-ordering strategy, where
            the formats leave a choice).
        reassociate: Let LLVM reorder the additions of a sum over stored entries (the
            ``+`` reduction of an inner loop: SpMV's row sums) into several partial sums
            (``fastmath<reassoc>`` on that add), so it unrolls them with independent
            accumulators and vectorizes them.  Results may then differ from a
            left-to-right sum in the last bits; they stay the same for any thread count.

        device: ``"cpu"`` or ``"cuda"`` (also the ``device=`` argument of ``sc.einsum``,
            ``sc.evaluate``, ``sc.compile``).
        gpu_arch: The NVIDIA architecture a ``cuda`` kernel's PTX is generated for, e.g.
            ``"sm_90"`` (``None``: the device's, or ``sm_90`` where no device can be asked).
        device_buffers: Set by the runtime for device-resident operands (``device="cuda"``;
            docs/gpu.md): the positions, among the kernel's buffer arguments, of the buffers
            that are device pointers (no copies for them).  Leave it empty.
    Raises:
        SparseccError: A field has the wrong type or an unknown value (an unknown CPU name
            included).
    """

    opt_level: int = 3
    cpu: str | None = None
    parallel: str = "auto"
    vector_length: int = 0
    index_width: int | None = None
    loop_order: str = "default"
    reassociate: bool = False
    device: str = "cpu"
    gpu_arch: str | None = None
    device_buffers: tuple = ()

    def __post_init__(self):
        if not _is_int(self.opt_level) or self.opt_level not in (0, 1, 2, 3):
            raise SparseccError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")
        if self.cpu is not None:
            if not isinstance(self.cpu, str) or not self.cpu.strip():
                raise SparseccError(f"cpu must be an LLVM CPU name such as 'skylake' or 'znver3' "
                                    f"(None: this machine's), got {self.cpu!r}")
            known = known_cpus()
            if known and self.cpu not in known:
                near = sorted(c for c in known if c[:3] == self.cpu[:3].lower())[:8]
                raise SparseccError(f"cpu {self.cpu!r} is not a CPU LLVM knows for this machine's target"
                                    + (f"; similar names: {', '.join(near)}" if near else
                                       "; see `llc -mcpu=help`, or use None for this machine's CPU"))
        if not isinstance(self.parallel, str) or self.parallel not in PARALLEL:
            raise SparseccError(f"parallel must be one of {', '.join(PARALLEL)}; got {self.parallel!r}")
        if not _is_int(self.vector_length) or self.vector_length < 0 or (
                self.vector_length & (self.vector_length - 1)):
            raise SparseccError(f"vector_length must be 0 or a power of two, got {self.vector_length!r}")
        if self.index_width is not None and (not _is_int(self.index_width) or self.index_width not in (32, 64)):
            raise SparseccError(f"index_width must be None, 32 or 64, got {self.index_width!r}")
        if not isinstance(self.loop_order, str) or self.loop_order not in LOOP_ORDERS:
            raise SparseccError(f"loop_order must be one of {', '.join(LOOP_ORDERS)}; got {self.loop_order!r}")
        if not isinstance(self.reassociate, (bool, np.bool_)):
            raise SparseccError(f"reassociate must be True or False, got {self.reassociate!r}")
        object.__setattr__(self, "reassociate", bool(self.reassociate))
        if not isinstance(self.device, str) or self.device not in DEVICES:
            raise SparseccError(f"device must be one of {', '.join(DEVICES)}; got {self.device!r}")
        if self.gpu_arch is not None and (not isinstance(self.gpu_arch, str) or self.gpu_arch not in GPU_ARCHS):
            raise SparseccError(f"gpu_arch must be None (the device's) or an NVIDIA architecture such as "
                                f"'sm_80' or 'sm_90' ({', '.join(GPU_ARCHS)}); got {self.gpu_arch!r}")
        bufs = self.device_buffers
        if isinstance(bufs, list) and not bufs:        # from JSON (the compile worker's request)
            object.__setattr__(self, "device_buffers", ())
        elif bufs != ():
            if (not isinstance(bufs, (tuple, list)) or not all(_is_int(b) and b >= 0 for b in bufs)
                    or self.device != "cuda"):
                raise SparseccError(f"device_buffers must be a tuple of buffer positions (>= 0), with "
                                    f"device='cuda' only; got {bufs!r} with device={self.device!r}")
            object.__setattr__(self, "device_buffers", tuple(sorted(set(int(b) for b in bufs))))

    def key(self) -> str:
        """The options' part of the disk key.  ``device``, ``gpu_arch`` and ``device_buffers``
        are left out: the compile target's part names them (``target=cuda;gpu_arch=sm_90``),
        resolved."""
        return ",".join(f"{k}={v}" for k, v in sorted(asdict(self).items())
                        if k not in ("device", "gpu_arch", "device_buffers"))


DEFAULT = Options()


@lru_cache(maxsize=1)
def known_cpus() -> frozenset:
    """The CPU names LLVM knows for this machine's target, from the ``llc`` of the LLVM
    tools package (``llc -mcpu=help``), read once, the first time a CPU is named (an
    unknown name makes LLVM abort the compile worker).  Empty if ``llc`` is not there:
    the name is then not checked."""
    import importlib.util
    import subprocess
    spec = importlib.util.find_spec("llvm")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        llc = os.path.join(folder, "bin", "llc")
        if os.access(llc, os.X_OK):
            break
    else:
        return frozenset()
    try:
        import llvmlite.binding as llb
        triple = llb.get_default_triple()
        r = subprocess.run([llc, f"-mtriple={triple}", "-mcpu=help"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError, ImportError):
        return frozenset()
    text = r.stdout + r.stderr
    names = set()
    section = text.split("Available CPUs for this target:", 1)[-1].split("Available features", 1)[0]
    for line in section.splitlines():
        m = re.match(r"\s+(\S+)\s+-", line)
        if m:
            names.add(m.group(1))
    return frozenset(names)
