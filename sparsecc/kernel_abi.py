"""What generated kernels, the pass pipelines and the runtime agree on: a ground module.

The hand-written kernels (``dialect/kernels/``) emit MLIR that the rewrites in ``passes/`` and the
checked entry of ``runtime/entry.py`` then find by these names, and they size their parallel
loops by the work measure the thread-count rewrite uses.  The names live here so that
``dialect`` and ``passes`` both read them without importing each other; like ``errors``,
``options`` and ``dtypes``, this module imports nothing from the layers above it (nothing from
``sparsecc`` at all).

:class:`TargetFacts` is what emission may know about the machine a kernel is built for: the
runtime's compile target resolves it (``runtime/targets.py``, ``Target.kernel_facts()``) and
passes it in, so the same statement gives the same MLIR text for the same facts on any host.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the function, defined by the checked entry (``runtime/entry.py oom_entry_ir``), that
#: returns this call's out-of-range flag (``passes/guards.py``, the hand-written SDDMM/SpMM)
FLAG_FUNCTION = "sparsecc_index_flag"
#: a kernel function's attribute (``array<i64: ...>``): the coordinate arguments it
#: range-checks itself, reported with the ones ``passes/guards.py`` guards
SELF_CHECKED = "sparsecc.self_checked"
#: the library global (i32) holding ``sc.set_num_threads``'s count: the thread-count rewrite
#: (``passes/rewrites.py thread_count``) defines it unless the kernel does (SpGEMM sizes its
#: per-thread workspaces by it); ``runtime/threads.py`` writes it
NUM_THREADS_GLOBAL = "sparsecc_num_threads"
#: the library global (i64) below whose work a parallel loop runs on one thread
#: (``passes/rewrites.py``; ``runtime/threads.py`` writes it)
MIN_PARALLEL_WORK_GLOBAL = "sparsecc_min_parallel_work"
#: a parallel loop whose iterations read no positions buffer (so its stored entries are
#: unknown) counts each iteration as this much work (``passes/rewrites.py thread_count``;
#: the hand-written MTTKRP's slots hold this many entries)
ROW_WORK = 16
#: a kernel function's attribute (i64): the dynamic schedule's chunk (iterations dealt at a
#: time) of its parallel loops, instead of ``passes/rewrites.py CHUNK`` (the hand-written
#: dense contraction's iterations are blocks of rows, a few thousand of them: dealt one by one)
PARALLEL_CHUNK = "sparsecc.parallel_chunk"


@dataclass(frozen=True)
class TargetFacts:
    """The machine a kernel's code is built for, as the hand-written kernels see it.

    ``arch``: the processor architecture (``platform.machine()`` spelling, lower case:
    ``x86_64``, ``aarch64`` ...); ``system``: the operating system (``sys.platform``:
    ``linux``, ``darwin`` ...); ``vector_bytes``: the widest vector register the target's
    features give (64 with AVX-512, else 32: the dense contraction sizes its register blocks
    by it).  Resolved by the compile target, never read by the emitter."""

    arch: str
    system: str
    vector_bytes: int = 32

    @property
    def nontemporal_stores(self) -> bool:
        """x86-64: ``movnt`` stores and an ``sfence`` (``llvm.x86.sse.sfence``) before return."""
        return self.arch in ("x86_64", "amd64")

    @property
    def huge_pages(self) -> bool:
        """Linux: ``madvise(MADV_HUGEPAGE)`` (14) on fresh result buffers."""
        return self.system.startswith("linux")
