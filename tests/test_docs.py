"""Code in the docs runs and prints what the docs say it prints.

Every ```python block of README.md and of every page under docs/ is executed.  A block is
self-contained, unless its first line is the marker ``# continues the previous block``: then it
runs in the namespace the previous block of the same page left (a chain of blocks is one test).
A block followed directly by a ```text block must print exactly that text (whitespace at line
ends ignored; the number in a line "<stage> N lines" may differ, since pipelines change).

A chain that shows cache counters (``cache_info``) runs in a fresh process with an empty
cache, as a reader's first run would; a chain that changes process-wide settings (thread
counts, environment variables) runs in another process with the suite's cache; every other
chain runs in this process.  All run in an empty working folder, reusing compiled kernels.  A chain that imports torch
is skipped when torch is not installed.

The site (mkdocs.yml: the pages plus the API reference generated from docstrings) builds with
``mkdocs build --strict`` when mkdocs is installed (the ``docs`` extra).
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CONTINUES = "# continues the previous block"
_FENCE = re.compile(r"^```python\n(.*?)^```[ \t]*\n(?:\s*\n)*(?:^```text\n(.*?)^```)?", re.S | re.M)
_LINES = re.compile(r"^(\S+) \d+ lines$")
_SEP = "\x00--sparsecc-doc-block--\x00"


def _pages():
    return [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))


def _chains(page: Path):
    """[(first block's index, [(code, expected text or None), ...]), ...] of one page."""
    chains = []
    for k, m in enumerate(_FENCE.finditer(page.read_text())):
        code, out = m.group(1), m.group(2)
        if code.lstrip().startswith(CONTINUES):
            assert chains, f"{page.name} block {k} continues a block that does not exist"
            chains[-1][1].append((code, out))
        else:
            chains.append((k, [(code, out)]))
    return chains


def _cases():
    for page in _pages():
        name = page.relative_to(ROOT).with_suffix("").as_posix().replace("/", "-")
        for k, blocks in _chains(page):
            yield pytest.param(blocks, id=f"{name}-{k}")


def _normalize(text: str) -> list[str]:
    return [_LINES.sub(r"\1 N lines", l.rstrip()) for l in text.strip().splitlines()]


_DRIVER = """
import json, sys
blocks = json.loads(sys.stdin.read())
ns = {"__name__": "__doc_example__"}
for code in blocks:
    exec(compile(code, "<doc>", "exec"), ns)
    sys.stdout.flush()
    print(%r, flush=True)
""" % _SEP


def _run_apart(codes, tmp_path, fresh_cache):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    if fresh_cache:
        env["SPARSECC_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(codes), capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.split(_SEP + "\n")[:len(codes)]


def _run_here(codes, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__doc_example__"}
    outs = []
    for code in codes:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<doc>", "exec"), ns)
        outs.append(buf.getvalue())
    return outs


@pytest.mark.parametrize("blocks", list(_cases()))
def test_doc_block(blocks, tmp_path, monkeypatch):
    codes = [c for c, _ in blocks]
    joined = "\n".join(codes)
    if re.search(r"^\s*(import torch|from torch|import sparsecc\.torch|from sparsecc import torch)", joined, re.M):
        pytest.importorskip("torch")
    shown = any(out is not None for _, out in blocks)
    if "cache_info" in joined and shown:                      # counters from a reader's first run
        outs = _run_apart(codes, tmp_path, fresh_cache=True)
    elif re.search(r"set_num_threads|environ", joined):      # process-wide settings stay out of this process
        outs = _run_apart(codes, tmp_path, fresh_cache=False)
    else:
        outs = _run_here(codes, tmp_path, monkeypatch)
    for (code, expected), out in zip(blocks, outs):
        if expected is not None:
            assert _normalize(out) == _normalize(expected), code


def test_every_continuation_has_a_block_before_it():
    for page in _pages():
        _chains(page)


def test_site_builds_strict(tmp_path):
    """The docs site, API reference included, builds with warnings as errors."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "reference" / "index.html").exists()
