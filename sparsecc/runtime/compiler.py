"""Compiling in a worker process, so that a compiler crash cannot take the caller down."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading

from ..errors import CompileError
from ..options import DEFAULT, Options

_lock = threading.Lock()
_worker: subprocess.Popen | None = None


_stderr = None


def _start() -> subprocess.Popen:
    global _stderr
    # stderr goes to a file: a pipe nobody reads could fill up and stall the worker
    _stderr = tempfile.TemporaryFile(mode="w+")
    env = dict(os.environ)
    # the worker must find this very package, wherever it was imported from
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-c", _BOOT, pkg_root], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=_stderr, text=True, env=env,
                            bufsize=1)


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


def _save_ir(mlir: str) -> str:
    fd, path = tempfile.mkstemp(prefix="sparsecc-failed-", suffix=".mlir")
    with os.fdopen(fd, "w") as f:
        f.write(mlir)
    return path


def compile_library(mlir: str, out: str, *, options: Options | None = None, opt_level: int | None = None,
                    cpu: str | None = None, name: str = "kernel", what: str = "kernel",
                    entry: str = "sparsecc_entry", object_only: bool = False) -> dict:
    """Compile ``mlir`` into the shared library ``out``; returns stages and the ABI, and
    what was chosen for the kernel (``parallel``: the MLIR strategy, ``openmp``: whether
    the library has parallel loops and needs the OpenMP runtime).

    ``options``: every code-generation option (:class:`sparsecc.Options`; ``opt_level`` and
    ``cpu``, when given, override its fields); ``entry``: the exported packed entry point;
    ``object_only``: write an object file instead of linking a library (ahead-of-time builds
    link several).

    Raises :class:`CompileError` (IR saved) when MLIR or LLVM reject the kernel or crash.
    """
    global _worker
    options = options or DEFAULT
    if opt_level is not None or cpu is not None:
        options = dataclasses.replace(options, opt_level=options.opt_level if opt_level is None else opt_level,
                                      cpu=cpu if cpu is not None else options.cpu)
    req = {"mlir": mlir, "entry": entry, "object_only": object_only, "options": dataclasses.asdict(options),
           "out": out, "name": name}
    with _lock:
        if _worker is None or _worker.poll() is not None:
            _worker = _start()
        w = _worker
        try:
            w.stdin.write(json.dumps(req) + "\n")
            w.stdin.flush()
            line = w.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            w.kill()
            w.wait()
            _stderr.seek(0)
            err = _stderr.read()[-2000:]
            _worker = None
            raise CompileError(f"the compiler crashed while compiling {what} "
                               f"(exit status {w.returncode}):\n{err.strip()}", _save_ir(mlir))
    reply = json.loads(line)
    if not reply["ok"]:
        raise CompileError(f"MLIR/LLVM could not compile {what}:\n{reply['error']}", _save_ir(mlir))
    return reply


def shutdown() -> None:
    global _worker
    with _lock:
        if _worker is not None:
            _worker.stdin.close()
            _worker.wait(timeout=10)
            _worker = None
