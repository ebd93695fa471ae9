"""SPARSECC_MAX_ALLOC_BYTES (runtime/_worker.py's checked allocators) as a user sets it: a
small limit raises MemoryError, the process stays alive and the next call works; a value the
native code reads otherwise than it looks ("1e9" is 1 byte to strtoll) is named in the error."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import os, numpy as np, scipy.sparse as sp, sparsecc as sc
    a = sp.coo_array(np.ones(3000)); b = sp.coo_array(np.ones(3000))
    try:
        sc.einsum("i,j->ij", a, b, out_format="csr")     # 9M entries: > 64 MiB of values
        print("no error")
    except MemoryError as err:
        print("MemoryError:", err)
    os.environ.pop("SPARSECC_MAX_ALLOC_BYTES")
    r = sc.einsum("i,j->ij", a, b, out_format="csr")
    print("next call:", r.nnz)
""")


@pytest.mark.parametrize("value,named", [("70000000", False), ("1e9", True),
                                         pytest.param("1_000_000_000", True, marks=pytest.mark.slow)])
def test_small_or_misread_limit(value, named):
    env = dict(os.environ, SPARSECC_MAX_ALLOC_BYTES=value)
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "MemoryError:" in out and "next call: 9000000" in out, out
    if named:
        assert f"SPARSECC_MAX_ALLOC_BYTES={value!r} is read as 1 byte" in out, out
    else:
        assert "is read as" not in out, out
