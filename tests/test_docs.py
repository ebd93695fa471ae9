"""Code in the docs runs and prints what the docs say it prints.

Every ```python block that imports sparsecc (``import sparsecc`` or ``from sparsecc ...``) and is followed directly by a ```text block is
executed; its stdout must equal the text block (whitespace at line ends ignored; the number
in a line "<stage> N lines" may differ, since pipelines change).  A block that prints cache
counters runs in a fresh process with an empty cache, as a reader's first run would.
"""

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"```python\n((?:(?!```).)*?)```[ \t]*\n+```text\n((?:(?!```).)*?)```", re.S)
_LINES = re.compile(r"^(\S+) \d+ lines$")
_IMPORTS = re.compile(r"^\s*(import sparsecc|from sparsecc\b)", re.M)   # `from sparsecc import ops` too


def _cases():
    for md in sorted(DOCS.glob("*.md")):
        for k, m in enumerate(_BLOCK.finditer(md.read_text())):
            code, out = m.group(1), m.group(2)
            if _IMPORTS.search(code):
                yield pytest.param(code, out, id=f"{md.stem}-{k}")


def _normalize(text: str) -> list[str]:
    return [_LINES.sub(r"\1 N lines", l.rstrip()) for l in text.strip().splitlines()]


@pytest.mark.parametrize("code,expected", list(_cases()))
def test_doc_block(code, expected, tmp_path):
    if "cache_info" in code:
        env = dict(os.environ, SPARSECC_CACHE_DIR=str(tmp_path / "cache"))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        out = r.stdout
    else:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<doc>", "exec"), {"__name__": "__doc_example__"})
        out = buf.getvalue()
    assert _normalize(out) == _normalize(expected)
