"""The emitter's golden corpus: ``emit_kernel`` inputs and the SHA-256 of the MLIR text each gives.

``tests/data/emit_corpus.jsonl.gz`` holds one case per line: ``{"case": <repr of the inputs>, "sha": ...}``.
``tests/test_emit_split.py`` emits every case in-process (no compile) and compares hashes, so any
change to the emitted MLIR of any kernel shows up (the disk-cache keys of every kernel change with it).

Regenerate, from the repository root:

* ``python tests/emit_corpus.py rehash`` - after an intended change of the emitted MLIR: keeps the
  cases, recomputes their hashes (review the diff: only the kernels you meant to change should move);
* ``python tests/emit_corpus.py capture`` - rebuild the cases themselves: runs the listed test files
  (slow ones included) with compiling stubbed out (every ``emit_kernel`` call the runtime makes is recorded, every form of
  the compile-retry ladder included), then hashes them.  Takes a few minutes; no kernel compiles.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "data" / "emit_corpus.jsonl.gz"
#: the test files whose emit_kernel calls make up the corpus
SOURCES = ["test_einsum_oracle.py", "test_semirings.py", "test_structure_fixes.py", "test_values.py",
           "test_ops_linalg.py", "test_ops_masks.py", "test_ops_reductions.py", "test_ops_sweep.py",
           "test_ops_args.py", "test_notation.py", "test_sparse_results.py", "test_api_fixes.py",
           "test_differential.py", "test_graph_examples.py", "test_validation.py", "test_call_path.py",
           "test_cache_and_errors.py", "test_reliability.py"]


def _namespace() -> dict:
    from sparsecc import expr
    from sparsecc.formats import Format
    ns = {n: getattr(expr, n) for n in ("Access", "Const", "Unary", "Binary", "Reduce", "Where", "Index",
                                         "Stored", "Dense", "Statement")}
    ns.update(Format=Format, np=np, inf=np.inf, nan=np.nan)
    return ns


def case_text(stmt, formats, dtypes, kwargs) -> str:
    return repr((stmt, dict(formats), dict(dtypes), dict(sorted(kwargs.items()))))


def emit_case(text: str, ns: dict | None = None) -> str:
    """The MLIR text of one case."""
    from sparsecc.dialect import emit_kernel
    stmt, formats, dtypes, kwargs = eval(text, ns or _namespace())   # noqa: S307 - our own corpus file
    return emit_kernel(stmt, formats, dtypes, **kwargs)[0]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def load() -> list[dict]:
    with gzip.open(CORPUS, "rt") as f:
        return [json.loads(l) for l in f if l.strip()]


def write(cases: list[str]) -> None:
    ns = _namespace()
    rows = []
    for c in cases:
        try:
            h = sha(emit_case(c, ns))
        except Exception as err:                 # an input the emitter refuses: its error is the golden
            h = "error:" + type(err).__name__ + ":" + sha(str(err))
        rows.append(json.dumps({"case": c, "sha": h}))
    old = {r["case"]: r["sha"] for r in load()} if CORPUS.exists() else {}
    moved = sum(1 for r in rows if json.loads(r)["case"] in old and old[json.loads(r)["case"]] != json.loads(r)["sha"])
    CORPUS.parent.mkdir(exist_ok=True)
    with gzip.GzipFile(CORPUS, "wb", mtime=0) as f:     # mtime=0: the same cases give the same bytes
        f.write(("\n".join(rows) + "\n").encode())
    print(f"{len(rows)} cases -> {CORPUS} ({moved} hashes changed)")


class _Recorder:
    """A pytest plugin: records every emit_kernel call of the runtime; compiling always fails."""

    def __init__(self):
        self.cases: dict[str, None] = {}

    def pytest_configure(self, config):
        from sparsecc.errors import CompileError
        from sparsecc.runtime import specialization
        real = specialization.emit_kernel
        ns = _namespace()

        def recording(stmt, formats, dtypes, **kwargs):
            out = real(stmt, formats, dtypes, **kwargs)
            text = case_text(stmt, formats, dtypes, kwargs)
            try:   # keep only cases whose text reads back to the same MLIR
                if emit_case(text, ns) == out[0]:
                    self.cases.setdefault(text)
            except Exception:
                pass
            return out

        def no_compile(*a, **k):
            raise CompileError("emit corpus capture: compiling is stubbed out")
        specialization.emit_kernel = recording
        specialization.load_module = no_compile


def main(argv) -> int:
    os.chdir(HERE.parent)
    sys.path.insert(0, str(HERE.parent))     # this checkout's sparsecc, not an installed one
    if argv[:1] == ["rehash"]:
        write([r["case"] for r in load()])
        return 0
    if argv[:1] == ["capture"]:
        import pytest
        rec = _Recorder()
        pytest.main(["-q", "-p", "no:cacheprovider", "--tb=no", "-o", "addopts="]
                    + [str(HERE / s) for s in SOURCES] + argv[1:], plugins=[rec])
        write(sorted(rec.cases))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
