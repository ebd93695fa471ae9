"""Threads: how many the parallel kernels use, and the OpenMP runtime they run on.

Kernels with parallel loops (``Options.parallel``) are OpenMP code: MLIR's
``convert-scf-to-openmp`` lowering calls libomp's ``__kmpc_*`` entry points (GNU libgomp has
none of them).  libomp comes from the ``cmeel-libomp`` wheel, a dependency of sparsecc; it
is loaded from site-packages by absolute path, privately (``RTLD_LOCAL``, so it never
interposes another OpenMP runtime such as torch's libgomp), before the first parallel
kernel.  The kernel library names ``libomp.so`` as a needed library, and the dynamic linker
binds it to the copy already loaded.

The thread count is a run-time setting, not part of the compiled code or the cache key:
every parallel kernel library holds an ``int32 sparsecc_num_threads`` that its parallel
loops read on each call (``num_threads`` of each ``omp.parallel``);
:func:`set_num_threads` writes it in every loaded library.  Default: the CPUs this process
may run on (``os.sched_getaffinity``), or ``SPARSECC_NUM_THREADS``, read at import.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from functools import lru_cache

from ..errors import SparseccError
from ..kernel_abi import MIN_PARALLEL_WORK_GLOBAL, NUM_THREADS_GLOBAL

_RUNTIME_DIST = "cmeel-libomp"
_RUNTIME_FILE = "cmeel.prefix/lib/libomp.so"
_MAX_THREADS = 4096

_lock = threading.Lock()
_counters: list = []            # the sparsecc_num_threads of every loaded parallel kernel
_thresholds: list = []          # the sparsecc_min_parallel_work of every loaded parallel kernel
_runtime = None                 # the loaded libomp (ctypes.CDLL)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _integer(n, what: str, lo: int, hi: int, kind: str) -> int:
    """``n`` as an int in [lo, hi] (NumPy integers too), or a SparseccError naming ``what``."""
    if isinstance(n, bool) or not isinstance(n, int):
        try:
            import numpy as np
            ok = isinstance(n, np.integer)
        except ImportError:
            ok = False
        if not ok:
            raise SparseccError(f"{what} must be {kind}, got {n!r}")
        n = int(n)
    if n < lo or n > hi:
        raise SparseccError(f"{what} must be between {lo} and {hi}, got {n}" if hi < 2 ** 62
                            else f"{what} must be {kind}, got {n}")
    return n


def _checked(n, what: str) -> int:
    return _integer(n, what, 1, _MAX_THREADS, "a positive integer")


def _from_env() -> int:
    text = os.environ.get("SPARSECC_NUM_THREADS", "").strip()
    if not text:
        return _cores()
    try:
        return _checked(int(text), "SPARSECC_NUM_THREADS")
    except (ValueError, SparseccError):
        warnings.warn(f"SPARSECC_NUM_THREADS={text!r} is not a thread count between 1 and {_MAX_THREADS}; "
                      f"using all {_cores()} cores", RuntimeWarning, stacklevel=3)
        return _cores()


_num_threads = _from_env()
_chosen = bool(os.environ.get("SPARSECC_NUM_THREADS", "").strip())   # the user's count wins


def _default_min_work() -> int:
    from ..passes.rewrites import MIN_PARALLEL_WORK
    text = os.environ.get("SPARSECC_MIN_PARALLEL_WORK", "").strip()
    if not text:
        return MIN_PARALLEL_WORK
    try:
        n = int(text)
        if n < 0:
            raise ValueError
        return n
    except ValueError:
        warnings.warn(f"SPARSECC_MIN_PARALLEL_WORK={text!r} is not a non-negative integer; "
                      f"using {MIN_PARALLEL_WORK}", RuntimeWarning, stacklevel=3)
        return MIN_PARALLEL_WORK


_min_work = _default_min_work()


def set_min_parallel_work(work: int) -> None:
    """A parallel loop runs on one thread when its work (iterations plus the stored entries
    under them, decided on each call inside the kernel) is below ``work``; 0 = always on
    :func:`get_num_threads` threads.  Takes effect at once in every loaded kernel.  Raises
    :class:`SparseccError` for anything but a non-negative integer."""
    global _min_work
    work = _integer(work, "the minimum parallel work", 0, 2 ** 63 - 1, "a non-negative integer")
    with _lock:
        _min_work = work
        for c in _thresholds:
            c.value = work


def get_min_parallel_work() -> int:
    """The work below which a parallel loop runs on one thread (:func:`set_min_parallel_work`)."""
    return _min_work


def threads_for(work: int) -> int:
    """The threads a parallel loop of ``work`` (iterations plus stored entries) runs on: the
    rule compiled into every kernel, for the call path and tools that want to know."""
    return 1 if work < _min_work else _num_threads


def set_num_threads(n: int) -> None:
    """Run parallel kernels on ``n`` threads, from now on, in every thread of this process.

    A run-time setting: nothing recompiles. The default is the CPUs this process may run on,
    or ``SPARSECC_NUM_THREADS``. After this call, front ends that follow another library's
    count (``sparsecc.torch`` follows torch's) leave the count alone.

    Args:
        n: The number of threads, 1 to 4096; 1 runs every kernel serially.

    Raises:
        SparseccError: ``n`` is not an integer from 1 to 4096.
    """
    global _chosen
    _set(_checked(n, "the number of threads"))
    _chosen = True


def follow_num_threads(n: int) -> None:
    """Run parallel kernels on ``n`` threads unless the user chose a count
    (:func:`set_num_threads` or ``SPARSECC_NUM_THREADS``): how a front end for another
    library (``sparsecc.torch``) makes sparsecc follow that library's thread count."""
    if not _chosen and n != _num_threads:
        _set(_checked(n, "the number of threads"))


def _set(n: int) -> None:
    global _num_threads
    with _lock:
        _num_threads = n
        for c in _counters:
            c.value = n


def get_num_threads() -> int:
    """The number of threads parallel kernels run on.

    Returns:
        The count set by ``set_num_threads``, ``SPARSECC_NUM_THREADS`` or the CPUs this
        process may run on.
    """
    return _num_threads


# ------------------------------------------------------------------------------ the runtime
@lru_cache(maxsize=None)
def runtime_path() -> str | None:
    """The libomp inside site-packages (the ``cmeel-libomp`` wheel), or None without it."""
    from importlib import metadata
    try:
        path = metadata.distribution(_RUNTIME_DIST).locate_file(_RUNTIME_FILE)
    except metadata.PackageNotFoundError:
        return None
    path = os.path.abspath(str(path))
    return path if os.path.exists(path) else None


@lru_cache(maxsize=None)
def runtime_version() -> str:
    """The OpenMP runtime's package and version, for the cache key."""
    from importlib import metadata
    try:
        return f"{_RUNTIME_DIST}={metadata.version(_RUNTIME_DIST)}"
    except metadata.PackageNotFoundError:
        return f"{_RUNTIME_DIST}=none"


def load_runtime() -> ctypes.CDLL:
    """Load libomp (once per process) so that parallel kernel libraries can be loaded."""
    global _runtime
    with _lock:
        if _runtime is None:
            path = runtime_path()
            if path is None:
                raise SparseccError(f"parallel kernels need the OpenMP runtime from the {_RUNTIME_DIST!r} "
                                    f"package (a dependency of sparsecc): pip install {_RUNTIME_DIST}, or "
                                    f"compile with sc.Options(parallel='none')")
            lib = ctypes.CDLL(path)             # RTLD_LOCAL: never interposes another runtime
            _configure(lib)
            _runtime = lib
        return _runtime


# ------------------------------------------------------------------ being a good neighbour
#: libomp settings sparsecc makes through the runtime's API (``kmp_set_defaults``) when it
#: loads libomp, unless the user set the same variable in the environment.  Blocktime 0: a
#: worker sleeps as soon as its parallel region ends, instead of spinning for 200 ms on a
#: core that the caller's next parallel library (torch's libgomp team, MKL, ...) needs.
#: Short spins (20 us - 1 ms, which libomp 21 accepts as ``KMP_BLOCKTIME=20us``) were measured
#: against 0 with ``benchmarks/neighbours.py --part blocktime``: they help back-to-back calls at
#: best, not in the median on a loaded machine, and make the torch op after a call stall more
#: often (docs/threads-and-options.md), so 0 stays.
DEFAULTS = {"KMP_BLOCKTIME": "0"}


def _configure(lib: ctypes.CDLL) -> None:
    """Apply :data:`DEFAULTS` to a freshly loaded libomp, before any parallel region.
    ``kmp_set_defaults`` initializes the runtime (registering the calling thread with the
    old defaults) and then changes the process-wide defaults that every thread registered
    later starts from; ``kmp_set_blocktime`` fixes the calling thread's own setting."""
    lib.kmp_set_defaults.argtypes = [ctypes.c_char_p]
    lib.kmp_set_defaults.restype = None
    lib.kmp_set_blocktime.argtypes = [ctypes.c_int]
    lib.kmp_set_blocktime.restype = None
    lib.kmp_get_blocktime.argtypes = []
    lib.kmp_get_blocktime.restype = ctypes.c_int
    for name, value in DEFAULTS.items():
        if name not in os.environ:              # the user's own setting wins
            lib.kmp_set_defaults(f"{name}={value}".encode())
    if "KMP_BLOCKTIME" not in os.environ:
        lib.kmp_set_blocktime(int(DEFAULTS["KMP_BLOCKTIME"]))


def blocktime() -> int:
    """libomp's blocktime (how long a worker spins after a parallel region before it sleeps)
    for the calling thread, read back from the runtime (loading it).  In milliseconds, or in
    microseconds when the user's ``KMP_BLOCKTIME`` was given in them (``200us``): libomp's
    ``kmp_get_blocktime``/``kmp_set_blocktime`` count in the unit of ``KMP_BLOCKTIME``."""
    return int(load_runtime().kmp_get_blocktime())


def _global(lib, ctype, name: str):
    """The global ``name`` of a loaded kernel library: a ``ctypes.CDLL``, or an object loaded
    by ORC without a C compiler (``targets.JitLibrary``: ``address_of``).  ValueError if none."""
    if isinstance(lib, ctypes.CDLL):
        return ctype.in_dll(lib, name)
    addr = lib.address_of(name)
    if addr is None:
        raise ValueError(name)
    return ctype.from_address(addr)


def register(lib: ctypes.CDLL) -> bool:
    """Point ``lib``'s thread count at the current setting and follow later changes; False
    if ``lib`` has no parallel loops."""
    try:
        counter = _global(lib, ctypes.c_int32, NUM_THREADS_GLOBAL)
    except ValueError:
        return False
    try:
        least = _global(lib, ctypes.c_int64, MIN_PARALLEL_WORK_GLOBAL)
    except ValueError:                  # compiled before the work threshold: none to follow
        least = None
    with _lock:
        counter.value = _num_threads
        if not any(ctypes.addressof(c) == ctypes.addressof(counter) for c in _counters):
            _counters.append(counter)
        if least is not None:
            least.value = _min_work
            if not any(ctypes.addressof(c) == ctypes.addressof(least) for c in _thresholds):
                _thresholds.append(least)
    return True
