"""Cache entries that are not regular files (a FIFO, a symbolic link to /dev/zero or to
another file, a folder, a file far larger than any entry): refused without blocking,
without following the link and without reading more than a bound, then deleted and
rebuilt (docs/environment.md).  Each case runs in a subprocess with a timeout: before the
fix a FIFO blocked forever and /dev/zero was read until memory ran out."""

import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")

SPMV = """
import sys
import numpy as np, scipy.sparse as sp
import sparsecc as sc
A = sp.csr_array(np.array([[1.0, 0, 2, 0], [0, 3, 0, 0], [4, 0, 5, 6]]))
x = np.array([1.0, 2, 3, 4])
y = sc.einsum("ij,j->i", A, x, formats=("csr", "dense"))
assert np.array_equal(y, [7.0, 6.0, 43.0]), y
i = sc.cache_info()
print("misses", i.misses, "disk_hits", i.disk_hits)
"""

# the disk cache alone (no compile worker, no MLIR): safe to run with a small address space
LOOKUP = """
import sys
from sparsecc.runtime import cache
print("entry", cache.lookup(sys.argv[1]) is not None)
"""


def _run(code, cache_dir, *args, timeout=120, small=False):
    def limit():            # 2 GiB of address space: an unbounded read fails fast, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    env = dict(ENV, SPARSECC_CACHE_DIR=str(cache_dir))
    try:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=timeout, preexec_fn=limit if small else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {timeout} s (blocked on a cache entry)")


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache folder holding one valid entry (the CSR SpMV), and its key."""
    d = tmp_path_factory.mktemp("warm-cache")
    os.chmod(d, 0o700)
    r = _run(SPMV, d)
    assert r.returncode == 0, r.stderr[-3000:]
    (key,) = [n[:-3] for n in os.listdir(d) if n.endswith(".so")]
    return d, key


def _fifo(path, elsewhere):
    os.mkfifo(path)


def _dev_zero(path, elsewhere):
    os.symlink("/dev/zero", path)


def _link_elsewhere(path, elsewhere):
    shutil.copyfile(path.with_suffix(".keep"), elsewhere)      # the entry's own valid bytes
    os.symlink(elsewhere, path)


def _folder(path, elsewhere):
    os.mkdir(path)
    (path / "x").write_text("x")


def _huge(path, elsewhere):
    with open(path, "wb") as f:        # sparse: no disk space used
        f.truncate(16 << 30)


HOSTILE = {"fifo": _fifo, "symlink-to-dev-zero": _dev_zero, "symlink-elsewhere": _link_elsewhere,
           "folder": _folder, "huge-file": _huge}


def _case(warm, tmp_path, which, kind):
    src, key = warm
    d = tmp_path / "cache"
    shutil.copytree(src, d)
    os.chmod(d, 0o700)
    path = d / f"{key}{which}"
    os.replace(path, path.with_suffix(".keep"))
    elsewhere = tmp_path / "elsewhere"
    HOSTILE[kind](path, elsewhere)
    return d, key, path, elsewhere


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("which", [".json", ".so"])
def test_hostile_entry_is_refused_and_deleted(warm, tmp_path, which, kind):
    d, key, path, elsewhere = _case(warm, tmp_path, which, kind)
    r = _run(LOOKUP, d, key, timeout=60, small=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["entry", "False"]
    assert not os.path.lexists(path) and not os.path.lexists(d / f"{key}.so")     # the pair was deleted
    if kind == "symlink-elsewhere":
        assert elsewhere.exists()                  # the link was removed, not what it pointed to


@pytest.mark.parametrize("kind", ["fifo", "symlink-elsewhere"])
def test_hostile_json_is_rebuilt_through_the_public_api(warm, tmp_path, kind):
    d, key, path, _ = _case(warm, tmp_path, ".json", kind)
    r = _run(SPMV, d, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["misses", "1", "disk_hits", "0"]          # compiled again
    for f in (f"{key}.json", f"{key}.so"):
        assert os.path.isfile(d / f) and not os.path.islink(d / f)
    assert json.loads((d / f"{key}.json").read_text())["key"] == key
    r = _run(SPMV, d, timeout=180)                                          # and the new entry serves
    assert r.stdout.split() == ["misses", "0", "disk_hits", "1"], r.stderr[-3000:]


def test_autotune_choice_that_is_not_a_regular_file_counts_as_none(tmp_path):
    """The autotune choices live in the same folder (``<cache>/autotune/<key>.json``)."""
    d = tmp_path / "cache"
    (d / "autotune").mkdir(parents=True)
    os.chmod(d, 0o700)
    os.mkfifo(d / "autotune" / "k1.json")
    os.symlink("/dev/zero", d / "autotune" / "k2.json")
    code = ("from sparsecc.explore import storage\n"
            "print(storage.load_choice('k1'), storage.load_choice('k2'))")
    r = _run(code, d, timeout=60, small=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["None", "None"]


def test_ir_of_a_kernel_whose_entry_was_replaced_by_a_fifo(tmp_path):
    """``k.ir(stage)`` reads the entry's JSON again: a FIFO there is an error, not a hang."""
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    code = SPMV + """
import os
k = sc.compile("ij,j->i", "csr", "dense")
k(A, x)
(name,) = [n for n in os.listdir(sys.argv[1]) if n.endswith(".json")]
os.remove(os.path.join(sys.argv[1], name)); os.mkfifo(os.path.join(sys.argv[1], name))
try:
    k.ir("llvm")
except sc.SparseccError as err:
    print("refused", type(err).__name__)
"""
    r = _run(code, d, str(d), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused" in r.stdout, r.stdout


def test_autotune_choice_replaces_a_folder_in_its_place(tmp_path, monkeypatch):
    from sparsecc.explore import storage
    from sparsecc.options import Options
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "autotune" / "k3.json").mkdir(parents=True)
    os.chmod(tmp_path / "cache", 0o700)
    storage.store_choice("k3", ("csr", "dense"), Options())
    assert storage.load_choice("k3")[1] == Options()
