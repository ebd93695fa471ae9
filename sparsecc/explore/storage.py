"""Where autotuned choices are kept: in memory for the process and on disk under the kernel
cache (``<cache>/autotune/<key>.json``, written atomically, with a checksum)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
from dataclasses import asdict
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from .._machine import cpu_model
from ..errors import SparseccError
from ..options import Options
from ..runtime import files, targets
from ..runtime.threads import get_num_threads
from .candidates import _own_name
from .report import decode_format, encode_format

_memory: dict[str, tuple] = {}          # tuning key -> (formats, options)
_memory_lock = threading.Lock()


@lru_cache(maxsize=1)
def _machine() -> str:
    return f"{platform.machine()}|{cpu_model()}|{os.cpu_count()}"


def _size_class(n: int) -> int:
    """Coarse size class: sizes within a factor of two share one (the bit length)."""
    return int(n).bit_length()


def tuning_key(expression: str, values, fixed: dict, options: Options, out_format) -> str:
    """The disk key of an autotuned choice: the expression, each operand's kind, dtype, rank
    and size class (shape and stored entries, within a factor of two), the formats fixed by
    the user, options, result format, thread count, machine, compile target (CPU and
    features) and sparsecc version."""
    from .._version import __version__
    ops = []
    for x in values:
        kind = _own_name(x) if sp.issparse(x) else "ndarray"
        nnz = int(x.nnz) if sp.issparse(x) else None
        ops.append([kind, str(np.dtype(x.dtype)), int(x.ndim), [_size_class(s) for s in x.shape],
                    None if nnz is None else _size_class(nnz)])
    parts = {"v": __version__, "expr": expression, "ops": ops,
             "fixed": {k: [encode_format(f) for f in v] if isinstance(v, (list, tuple)) else encode_format(v)
                       for k, v in sorted(fixed.items())},
             "options": options.key(), "out": encode_format(out_format),
             "threads": get_num_threads(), "machine": _machine(), "target": targets.resolve(options).key()}
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _tuning_dir() -> str:
    from ..runtime import cache
    d = os.path.join(cache.cache_dir(), "autotune")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_choice(key: str):
    """The stored ``(formats, options)`` for ``key``, or ``None`` (a missing, unreadable or
    tampered file counts as none and is replaced by the next exploration)."""
    try:
        # no link followed, no FIFO waited on, a bounded read (runtime/files.py)
        d = json.loads(files.read_regular(os.path.join(_tuning_dir(), f"{key}.json"), files.JSON_LIMIT))
        body = {k: v for k, v in d.items() if k != "checksum"}
        if d.get("key") != key or d.get("checksum") != _checksum(body):
            return None
        return tuple(decode_format(s) for s in d["formats"]), Options(**d["options"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, SparseccError):
        return None


def store_choice(key: str, formats: tuple, options: Options, about: dict | None = None) -> str:
    """Write the choice for ``key`` atomically (temporary file, ``os.replace``); returns the path."""
    d = _tuning_dir()
    body = {"key": key, "formats": [encode_format(s) for s in formats], "options": asdict(options),
            "about": about or {}}
    body["checksum"] = _checksum(body)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=".json.tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=1)
        path = os.path.join(d, f"{key}.json")
        if os.path.isdir(path) and not os.path.islink(path):     # a folder in its place
            shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
    return path

