"""Compiling in a worker process, so that a compiler crash cannot take the caller down.

The worker (``_worker.py``) answers length-prefixed JSON frames on a reply channel nothing
else writes to; each reply repeats its request's id.  A reply that does not come within
``SPARSECC_COMPILE_TIMEOUT`` seconds (default 600) stops the worker: the caller gets a
``CompileError`` and the next compile starts a fresh worker.  The worker belongs to the
process that started it: after ``os.fork()`` the child starts its own and never touches the
parent's pipes.  A Python error inside the worker is a bug in sparsecc and raises
``InternalError`` with the worker's traceback.  Failed compiles keep their MLIR in
``<cache folder>/failed/`` (the newest ``FAILED_KEEP``), and a failure is remembered per
kernel for the rest of the process: asking again raises the same error at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time

from ..errors import CompileError, InternalError, SparseccError
from ..options import DEFAULT, Options

DEFAULT_TIMEOUT_S = 600.0
FAILED_KEEP = 50               # failed IR files kept in <cache>/failed/
HEADER = 8                     # bytes of a frame's length (little-endian)
_MAX_FRAME = 1 << 31

_lock = threading.Lock()
_worker: "_Worker | None" = None
_ids = itertools.count(1)
_failed: dict[str, BaseException] = {}     # failed compiles of this process, by request digest

#: test-only: a dict added to every request (see _worker._test_hook)
_test_hook: dict | None = None


@dataclasses.dataclass
class _Worker:
    proc: subprocess.Popen
    stderr: object          # a temporary file: a pipe nobody reads could fill up and stall it
    owner: int              # the pid that started it: only that process may talk to it


def _start() -> _Worker:
    stderr = tempfile.TemporaryFile(mode="w+b")
    env = dict(os.environ)
    # the worker must find this very package, wherever it was imported from
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-c", _BOOT, pkg_root], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr, env=env, bufsize=0)
    return _Worker(proc, stderr, os.getpid())


# The worker runs sparsecc.runtime._worker without executing sparsecc/__init__.py: that
# imports NumPy, SciPy and the whole front end (0.4 s of a first compile here), and the
# worker needs only the passes, the options and MLIR.  The package is entered as a bare
# module whose __path__ is the package folder; submodules import as usual.
_BOOT = """\
import runpy, sys, types
root = sys.argv[1]
pkg = types.ModuleType("sparsecc")
pkg.__path__ = [root + "/sparsecc"]
sys.modules["sparsecc"] = pkg
runpy.run_module("sparsecc.runtime._worker", run_name="__main__", alter_sys=True)
"""


def _after_fork_in_child() -> None:
    """A forked child owns neither the parent's worker nor its lock (another thread of the
    parent may have held it at the fork): forget both, close the inherited pipe ends."""
    global _worker, _lock
    _lock = threading.Lock()
    w, _worker = _worker, None
    if w is not None:
        for f in (w.proc.stdin, w.proc.stdout):
            try:
                os.close(f.fileno())
            except (OSError, ValueError):
                pass
        w.proc.returncode = 0           # never waited for or killed from here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def timeout_s() -> float:
    """``SPARSECC_COMPILE_TIMEOUT`` (seconds, > 0), else ``DEFAULT_TIMEOUT_S``."""
    text = os.environ.get("SPARSECC_COMPILE_TIMEOUT")
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        t = float(text)
    except ValueError:
        t = -1.0
    if not t > 0 or t != t:
        raise SparseccError(f"SPARSECC_COMPILE_TIMEOUT must be a positive number of seconds, got {text!r}")
    return t


def failed_dir() -> str:
    from .cache import cache_dir
    return os.path.join(cache_dir(), "failed")


def _save_ir(mlir: str, digest: str) -> str:
    """Keep the failed MLIR as ``<cache>/failed/<digest>.mlir``, and only the newest
    ``FAILED_KEEP`` files there."""
    d = failed_dir()
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        path = os.path.join(d, f"{digest[:40]}.mlir")
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(mlir)
        os.replace(tmp, path)
        _prune(d)
        return path
    except OSError:                 # the cache folder went away: a private file then
        fd, path = tempfile.mkstemp(prefix="sparsecc-failed-", suffix=".mlir")
        with os.fdopen(fd, "w") as f:
            f.write(mlir)
        return path


def _prune(d: str) -> None:
    try:
        files = [e for e in os.scandir(d) if e.name.endswith(".mlir") and e.is_file(follow_symlinks=False)]
        files.sort(key=lambda e: e.stat().st_mtime, reverse=True)
        for e in files[FAILED_KEEP:]:
            os.remove(e.path)
    except OSError:
        pass


def _stop(w: _Worker) -> str:
    """Kill worker ``w`` and return the end of its stderr."""
    try:
        w.proc.kill()
    except OSError:
        pass
    w.proc.wait()
    for f in (w.proc.stdin, w.proc.stdout):
        try:
            f.close()
        except OSError:
            pass
    try:
        w.stderr.seek(0)
        return w.stderr.read()[-2000:].decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return ""


def _read_reply(w: _Worker, deadline: float) -> bytes | str:
    """One frame from the worker: its bytes, or why none came ("eof", "timeout", "garbage")."""
    fd = w.proc.stdout.fileno()
    buf = b""
    need = HEADER
    have_header = False
    while True:
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return "timeout"
            chunk = os.read(fd, max(need - len(buf), 65536) if have_header else need - len(buf))
            if not chunk:
                return "eof"
            buf += chunk
        if have_header:
            return buf[HEADER:]
        n = int.from_bytes(buf[:HEADER], "little")
        if n >= _MAX_FRAME:
            return "garbage"
        need, have_header = HEADER + n, True


def compile_library(mlir: str, out: str, *, target=None, options: Options | None = None,
                    opt_level: int | None = None, cpu: str | None = None, name: str = "kernel",
                    what: str = "kernel", entry: str = "sparsecc_entry", object_only: bool = False) -> dict:
    """Compile ``mlir`` for ``target`` into the shared library ``out``; returns stages and
    the ABI, and what was chosen for the kernel (``parallel``: the MLIR strategy,
    ``openmp``: whether the library has parallel loops and needs the OpenMP runtime).

    ``target``: a :class:`~sparsecc.runtime.targets.Target` (default: the one ``options``
    resolve to on this machine); the worker receives it resolved (name and parameters) and
    runs its pipelines, code generator and linker.  ``options``: every code-generation
    option (:class:`sparsecc.Options`; ``opt_level`` and ``cpu``, when given, override its
    fields); ``entry``: the exported packed entry point; ``object_only``: write an object
    file instead of linking a library (ahead-of-time builds link several).

    Raises :class:`CompileError` (IR saved) when MLIR or LLVM reject the kernel, crash or
    do not answer in time, :class:`InternalError` for a bug in sparsecc's worker.
    """
    from . import targets
    global _worker
    options = options or DEFAULT
    if opt_level is not None or cpu is not None:
        options = dataclasses.replace(options, opt_level=options.opt_level if opt_level is None else opt_level,
                                      cpu=cpu if cpu is not None else options.cpu)
    if target is None:
        target = targets.resolve(options)
    req = {"mlir": mlir, "entry": entry, "object_only": object_only, "options": dataclasses.asdict(options),
           "name": name, "target": target.request()}
    if _test_hook:
        req["test_hook"] = _test_hook
    digest = hashlib.sha256(json.dumps(req, sort_keys=True).encode()).hexdigest()
    known = _failed.get(digest)
    if known is not None:               # this very compile failed before in this process
        raise known
    limit = timeout_s()
    req["out"] = out
    with _lock:
        req["id"] = rid = next(_ids)
        w = _worker
        if w is not None and (w.owner != os.getpid() or w.proc.poll() is not None):
            if w.owner == os.getpid():
                _stop(w)
            w = _worker = None          # a dead worker, or the parent's (after a fork)
        if w is None:
            w = _worker = _start()
        data = json.dumps(req).encode()
        try:
            w.proc.stdin.write(len(data).to_bytes(HEADER, "little") + data)
            got = _read_reply(w, time.monotonic() + limit)
        except (BrokenPipeError, OSError):
            got = "eof"
        reply = None
        if isinstance(got, bytes):
            try:
                reply = json.loads(got)
            except ValueError:
                got = "garbage"
            else:
                if not isinstance(reply, dict) or reply.get("id") != rid:
                    got, reply = "garbage", None
        if reply is None:
            err_text = _stop(w)
            _worker = None
            status = w.proc.returncode
    if reply is None:
        path = _save_ir(mlir, digest)
        if got == "timeout":
            err = CompileError(f"the compiler did not finish {what} within {limit:g} s "
                               f"(SPARSECC_COMPILE_TIMEOUT); it was stopped, and the next compile "
                               f"starts a fresh one", path)
            err.timed_out = True        # not retried in other forms (kernel.py), not remembered
            raise err
        if got == "garbage":
            raise InternalError(f"the compile worker answered out of protocol while compiling {what}; "
                                f"it was stopped", err_text, path)
        err = CompileError(f"the compiler crashed while compiling {what} "
                           f"(exit status {status}):\n{err_text}", path)
        _failed[digest] = err
        raise err
    if not reply["ok"]:
        path = _save_ir(mlir, digest)
        if reply.get("kind") == "internal":
            err = InternalError(f"internal error in sparsecc while compiling {what} "
                                f"({reply['error'].splitlines()[0] if reply['error'] else ''}); please report it",
                                reply.get("trace", ""), path)
        else:
            err = CompileError(f"MLIR/LLVM could not compile {what}:\n{reply['error']}", path)
        _failed[digest] = err
        raise err
    return reply


def shutdown() -> None:
    global _worker
    with _lock:
        w, _worker = _worker, None
        if w is not None and w.owner == os.getpid():
            w.proc.stdin.close()
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _stop(w)
