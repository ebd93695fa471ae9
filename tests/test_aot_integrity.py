"""Ahead-of-time libraries that are damaged, hostile or oddly named: a truncated or altered
``lib<name>.so`` (was: SIGBUS in dlopen), manifests and libraries that are not regular files
(a FIFO, a link to /dev/zero ...), manifests of the wrong shape (was: a raw AttributeError),
kernel names that collide with the Library's attributes or the generated C symbols (was: a
broken Library, or the C compiler's error), the IR of loaded kernels (was: ""), and the
``aot`` command line (index notation, errors without tracebacks).  Crash and hang candidates
run in subprocesses with a timeout.  One small library (a CSR SpMV, as in test_aot.py) is
built once and copied per case."""

import json
import os
import resource
import shutil
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
A = sp.csr_array(np.array([[1.0, 0, 2, 0], [0, 3, 0, 0], [4, 0, 5, 6]]))
X = np.array([1.0, 2, 3, 4])

LOAD = """
import sys
sys.modules["mlir"] = None          # loading needs neither
sys.modules["llvmlite"] = None
import numpy as np, scipy.sparse as sp
import sparsecc as sc
A = sp.csr_array(np.array([[1.0, 0, 2, 0], [0, 3, 0, 0], [4, 0, 5, 6]]))
try:
    lib = sc.aot.load(sys.argv[1], *sys.argv[2:])
except sc.LibraryError as err:
    print("LibraryError:", err)
    print("path:", err.path)
else:
    assert np.array_equal(lib.spmv(A, np.array([1.0, 2, 3, 4])), [7.0, 6.0, 43.0])
    print("OK")
"""


def _run(args, timeout=60, small=True):
    def limit():            # 2 GiB of address space: an unbounded read fails fast, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    try:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=ENV,
                              timeout=timeout, preexec_fn=limit if small else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {timeout} s")


def _load(folder, *name):
    r = _run(["-c", LOAD, str(folder), *name])
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("aot-integrity")
    sc.aot.build("integ", {"spmv": sc.compile("ij,j->i", "csr", "dense")}, str(d))
    return d


@pytest.fixture
def lib(built, tmp_path):
    d = tmp_path / "lib"
    shutil.copytree(built, d)
    return d


def _manifest(d):
    return json.loads((d / "integ.json").read_text())


def _write_manifest(d, m):
    (d / "integ.json").write_text(json.dumps(m))


# ------------------------------------------------------------------ the library's bytes
def test_intact_library_loads(lib):
    assert _load(lib).strip() == "OK"
    m = _manifest(lib)
    data = (lib / "libinteg.so").read_bytes()
    import hashlib
    assert m["library"] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.0])
def test_truncated_library_is_refused_not_a_sigbus(lib, cut):
    so = lib / "libinteg.so"
    data = so.read_bytes()
    so.write_bytes(data[: int(len(data) * cut)])
    out = _load(lib)
    assert "LibraryError:" in out and str(so) in out and "truncated" in out, out


def test_altered_library_of_the_same_size_is_refused(lib):
    so = lib / "libinteg.so"
    b = bytearray(so.read_bytes())
    for k in range(len(b) // 3, len(b) // 3 + 32):
        b[k] ^= 0xFF
    so.write_bytes(bytes(b))
    out = _load(lib)
    assert "LibraryError:" in out and "SHA-256" in out and str(so) in out, out


def test_manifest_of_an_older_build_without_the_hash_still_loads(lib):
    m = _manifest(lib)
    del m["library"]
    _write_manifest(lib, m)
    assert _load(lib).strip() == "OK"
    # without a recorded hash a truncated library is still refused: its ELF headers
    # name more bytes than the file holds
    so = lib / "libinteg.so"
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])
    out = _load(lib, "integ")
    assert "LibraryError:" in out and str(so) in out, out


# ------------------------------------------------------------------ files that are not regular
def _fifo(path, elsewhere):
    os.mkfifo(path)


def _dev_zero(path, elsewhere):
    os.symlink("/dev/zero", path)


def _link_elsewhere(path, elsewhere):
    shutil.copyfile(str(path) + ".keep", elsewhere)      # the file's own valid bytes
    os.symlink(elsewhere, path)


def _folder(path, elsewhere):
    os.mkdir(path)


def _huge(path, elsewhere):
    with open(path, "wb") as f:        # sparse: no disk space used
        f.truncate(16 << 30)


HOSTILE = {"fifo": _fifo, "symlink-to-dev-zero": _dev_zero, "symlink-elsewhere": _link_elsewhere,
           "folder": _folder, "huge-file": _huge}


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("which", ["integ.json", "libinteg.so"])
def test_manifest_or_library_that_is_not_a_regular_file_is_refused(lib, tmp_path, which, kind):
    path = lib / which
    os.replace(path, str(path) + ".keep")
    HOSTILE[kind](path, tmp_path / "elsewhere")
    out = _load(lib, "integ")
    assert "LibraryError:" in out and str(path) in out, out


# ------------------------------------------------------------------ manifests of the wrong shape
def _set(path, value):
    def edit(m):
        *outer, last = path
        for k in outer:
            m = m[k]
        if value is _DELETE:
            del m[last]
        else:
            m[last] = value
    return edit


_DELETE = object()
SHAPES = {
    "top-level-list": lambda m: [m],
    "top-level-null": lambda m: None,
    "kernels-list": _set(["kernels"], [1, 2]),
    "kernels-null": _set(["kernels"], None),
    "kernels-missing": _set(["kernels"], _DELETE),
    "name-int": _set(["name"], 7),
    "name-other": _set(["name"], "other"),
    "version-str": _set(["version"], "2"),
    "library-list": _set(["library"], []),
    "library-size-str": _set(["library", "size"], "16776"),
    "library-sha-short": _set(["library", "sha256"], "abc"),
    "kernel-entry-list": _set(["kernels", "spmv"], []),
    "kernel-name-not-c": lambda m: m["kernels"].__setitem__("../x", m["kernels"].pop("spmv")),
    "operands-null": _set(["kernels", "spmv", "operands"], None),
    "operands-dicts-of-lists": _set(["kernels", "spmv", "operands"], [[1], [2]]),
    "operand-dtype-int": _set(["kernels", "spmv", "operands", 0, "dtype"], 5),
    "operand-indices-str": _set(["kernels", "spmv", "operands", 0, "indices"], "ij"),
    "out-dtype-list": _set(["kernels", "spmv", "out_dtype"], ["float64"]),
    "out-format-int": _set(["kernels", "spmv", "out_format"], 3),
    "index-order-null": _set(["kernels", "spmv", "index_order"], None),
    "entry-missing": _set(["kernels", "spmv", "entry"], _DELETE),
    "stmt-list": _set(["kernels", "spmv", "stmt"], []),
    "stmt-expr-str": _set(["kernels", "spmv", "stmt", "expr"], "x"),
    "stmt-node-unknown": _set(["kernels", "spmv", "stmt", "expr"], {"t": "Eval"}),
    "stmt-deeply-nested": _set(["kernels", "spmv", "stmt", "expr"], "DEEP"),       # 50000 nested lists
    "prune-str": _set(["kernels", "spmv", "prune"], "no"),
    "guarded-dict": _set(["kernels", "spmv", "guarded"], {"a": 1}),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_manifest_of_the_wrong_shape_is_a_library_error(lib, shape):
    m = _manifest(lib)
    got = SHAPES[shape](m)
    text = json.dumps(m if got is None and shape != "top-level-null" else got)
    text = text.replace('"DEEP"', "[" * 50000 + "]" * 50000)
    (lib / "integ.json").write_text(text)
    with pytest.raises(sc.LibraryError, match="integ.json") as err:
        sc.aot.load(str(lib), "integ")
    assert not isinstance(err.value.__cause__, (AttributeError, TypeError, KeyError))


def test_library_error_is_a_sparsecc_error():
    assert issubclass(sc.LibraryError, sc.SparseccError)


# ------------------------------------------------------------------ kernel names
SPMV = sc.compile("ij,j->i", "csr", "dense")


@pytest.mark.parametrize("kernels,why", [
    ({"path": SPMV}, "the Library's own"),
    ({"name": SPMV}, "the Library's own"),
    ({"_kernels": SPMV}, "the Library's own"),
    ({"__class__": SPMV}, "the Library's own"),
    ({"free_result": SPMV}, "collides"),
    ({"sparse_result": SPMV}, "collides"),
    ({"a": SPMV, "a_entry": SPMV}, "collides"),
    ({"a": SPMV, "a_spec_sha256": SPMV}, "collides"),
    ({"a": SPMV, "a_entry_loops": SPMV}, "collides"),
])
def test_kernel_names_that_collide_are_refused_before_compiling(tmp_path, kernels, why, monkeypatch):
    from sparsecc.runtime import kernel
    monkeypatch.setattr(kernel, "compile_specialization",
                        lambda *a, **k: pytest.fail("compiled before the names were checked"))
    with pytest.raises(sc.SparseccError, match=why) as err:
        sc.aot.build("coll", kernels, str(tmp_path))
    assert not isinstance(err.value, sc.CompileError)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("expr,formats,why", [
    ("y[i] = k[i]", {"k": "dense"}, "operand 'k'"),          # the wrapper's argument counter
    ("y[i] = free[i]", {"free": "dense"}, "operand 'free'"),  # libc's free, called by the wrapper
    ("y[i] = out[i]", {"out": "dense"}, "operand 'out'"),    # the result's parameter
    ("y[i] = A[i,j] * A_pos1[j]", {"A": "csr", "A_pos1": "dense"}, "operand 'A_pos1'"),   # A's buffer
    ("y[i] = n_i[i]", {"n_i": "dense"}, "operand 'n_i'"),    # the size of index i
])
def test_operand_names_that_collide_in_the_c_wrapper_are_refused(tmp_path, expr, formats, why, monkeypatch):
    from sparsecc.runtime import kernel
    monkeypatch.setattr(kernel, "compile_specialization",
                        lambda *a, **k: pytest.fail("compiled before the names were checked"))
    with pytest.raises(sc.SparseccError, match=why) as err:
        sc.aot.build("coll", {"k1": sc.compile(expr, **formats)}, str(tmp_path))
    assert not isinstance(err.value, sc.CompileError)


def test_library_attributes_are_its_own_and_kernels_are_reached_by_name(lib):
    got = sc.aot.load(str(lib))
    assert got.name == "integ" and got.path.endswith("libinteg.so")
    assert "spmv" in repr(got) and got.spmv is got["spmv"]
    assert "spmv" in dir(got) and list(got.kernels) == ["spmv"]
    with pytest.raises(AttributeError, match="no kernel 'spmm'"):
        got.spmm
    with pytest.raises(KeyError):
        got["spmm"]


# ------------------------------------------------------------------ the IR of loaded kernels
def test_loaded_kernels_give_their_ir_without_mlir(lib):
    code = """
import sys
sys.modules["mlir"] = None
sys.modules["llvmlite"] = None
import sparsecc as sc
lib = sc.aot.load(sys.argv[1])
print(lib.spmv.ir()[:2000])
print("----")
print(lib.spmv.ir("llvm")[:20000])
"""
    r = _run(["-c", code, str(lib)], small=False)
    assert r.returncode == 0, r.stderr[-3000:]
    mlir, llvm = r.stdout.split("----")
    assert "sparse_tensor" in mlir and "func.func" in mlir
    assert "define" in llvm and "integ_spmv_entry" in llvm


def test_ir_of_a_library_built_without_it_says_so(lib):
    m = _manifest(lib)
    del m["ir"]
    _write_manifest(lib, m)
    os.remove(lib / "integ.ir.json")
    got = sc.aot.load(str(lib))
    assert np.array_equal(got.spmv(A, X), [7.0, 6.0, 43.0])
    with pytest.raises(sc.LibraryError, match="keeps no IR"):
        got.spmv.ir()


def test_ir_file_that_was_altered_is_refused(lib):
    p = lib / "integ.ir.json"
    p.write_text(p.read_text().replace("func.func", "func.funk"))
    with pytest.raises(sc.LibraryError, match="integ.ir.json"):
        sc.aot.load(str(lib)).spmv.ir()


# ------------------------------------------------------------------ the command line
def _cli(*kernels, out):
    args = ["-m", "sparsecc", "aot", "--name", "cli", "-o", str(out)]
    for k in kernels:
        args += ["--kernel", k]
    return _run(args, timeout=300, small=False)


def test_command_line_takes_index_notation(tmp_path):
    r = _cli("y[i] = A[i,j] * x[j]:csr,dense", "spmv2=y[i] = A[i,j] * x[j]:A=csr,x=dense", out=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    got = sc.aot.load(str(tmp_path))
    assert sorted(got.kernels) == ["spmv2", "y"]
    for k in ("y", "spmv2"):
        assert np.array_equal(got[k](A, X), A @ X)


@pytest.mark.parametrize("kernel,msg", [
    ("spmv=ij,j-i:csr,dense", "invalid character"),
    ("spmv=ij,j->i:bogus,dense", "unknown format"),
    ("spmv=ij,j->i", "expected"),
    ("ij,j->i:csr,dense", "NAME"),
    ("free_result=ij,j->i:csr,dense", "collides"),
    ("spmv=y[i] = A[i,j] * x[j]:A=csr,z=dense", "z"),
])
def test_command_line_errors_are_messages_with_exit_code_2(tmp_path, kernel, msg):
    r = _cli(kernel, out=tmp_path / "out")
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and msg in r.stderr, r.stderr
