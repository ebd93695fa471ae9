"""Ahead-of-time libraries: build, load without MLIR/llvmlite, call from C."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_CC = shutil.which("cc") is not None


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot")
    path = sc.aot.build("mykernels", {
        "spmv": sc.compile("ij,j->i", "csr", "dense"),
        "spmm": sc.compile("ik,kj->ij", "csr", "dense"),
        "spgemm": sc.compile("ik,kj->ij", "csr", "csr", out_format="csr"),
        "mul3": sc.compile("ijk,ijk->ijk", "coo", "coo", out_format="coo"),
        "axpy": sc.compile("y[i] = a * x[i] + y0[i]", a="dense", x="dense", y0="dense"),
    }, str(out))
    assert os.path.basename(path) == "libmykernels.so"
    return str(out)


LOADER = """
import sys
sys.modules["mlir"] = None          # importing either now fails
sys.modules["llvmlite"] = None
import numpy as np, scipy.sparse as sp
import sparsecc as sc
lib = sc.aot.load(sys.argv[1])
rng = np.random.default_rng(0)
A = sp.random_array((30, 20), density=0.2, format="csr", rng=rng)
B = sp.random_array((20, 25), density=0.2, format="csr", rng=rng)
x = rng.random(20); X = rng.random((20, 4))
assert np.allclose(lib.spmv(A, x), A @ x)
assert np.allclose(lib.spmm(A, X), A @ X)
C = lib.spgemm(A, B)
assert isinstance(C, sp.csr_array) and np.allclose(C.toarray(), (A @ B).toarray())
T = sp.random_array((4, 3, 5), density=0.4, format="coo", rng=rng)
R = lib.mul3(T, T)
assert isinstance(R, sp.coo_array) and np.allclose(R.toarray(), T.toarray() ** 2)
assert np.allclose(lib.axpy(2.0, x, x), 3 * x)
bad = A.copy(); bad.indices[0] = 99
try:
    lib.spmv(bad, x)
except sc.SparseccError as err:
    print("validated:", err)
try:
    lib.spmv(A.astype(np.float32), x)
except sc.SparseccError as err:
    print("specialization:", err)
assert not [m for m in sys.modules if m.startswith(("mlir", "llvmlite")) and sys.modules[m] is not None]
print("OK")
"""


def test_load_and_run_without_mlir_or_llvmlite(libdir):
    r = subprocess.run([sys.executable, "-c", LOADER, libdir], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK"), r.stdout
    assert "validated: operand 0: indices holds index 99" in r.stdout
    assert "specialization:" in r.stdout and "float32" in r.stdout


def test_library_depends_only_on_libc(libdir):
    out = subprocess.run(["ldd", os.path.join(libdir, "libmykernels.so")], capture_output=True, text=True).stdout
    deps = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert deps <= {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "/lib64/ld-linux-x86-64.so.2"}, deps


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
def test_header_is_self_contained_c(libdir):
    for std in ("c99", "c11"):
        subprocess.run(["cc", f"-std={std}", "-Wall", "-Werror", "-fsyntax-only", "-x", "c",
                        os.path.join(libdir, "mykernels.h")], check=True)
    text = open(os.path.join(libdir, "mykernels.h")).read()
    assert "mykernels_free_result" in text and "owned by the caller" in text
    assert "int mykernels_spgemm(" in text


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
def test_c_program_against_the_header(libdir, tmp_path):
    src = tmp_path / "main.c"
    src.write_text(open(os.path.join(ROOT, "examples", "aot", "main.c")).read())
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", str(src), "-I", libdir, "-L", libdir,
                    "-lmykernels", f"-Wl,-rpath,{libdir}", "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    A = np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]])
    assert "spmv: 3 3 9" in out
    C = sp.csr_array(A) @ sp.csr_array(A)
    C.sort_indices()
    lines = [f"  C[{i},{j}] = {v:g}" for i, j, v in zip(*C.nonzero(), C.data)]
    assert out.splitlines()[2:] == lines and f"spgemm: {C.nnz} stored" in out


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
def test_example_builds_and_runs():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "aot", "build.py")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "C[2,2] = 33" in r.stdout


def test_generic_cpu_and_command_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sparsecc", "aot", "--name", "cli", "--cpu", "x86-64",
                          "--kernel", "spmv=ij,j->i:csr,dense",
                          "--kernel", "sq=ik,kj->ij:csr,csr:csr", "-o", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    lib = sc.aot.load(str(tmp_path))
    A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0]]))
    assert np.allclose(lib.spmv(A, np.ones(3)), [3, 3])
    assert np.allclose(lib.sq(A[:, :2], A[:, :2]).toarray(), (A[:, :2] @ A[:, :2]).toarray())


def test_build_errors(tmp_path):
    with pytest.raises(sc.FormatError, match="needs one per operand"):
        sc.aot.build("x", {"k": sc.compile("ij,j->i")}, str(tmp_path))
    with pytest.raises(sc.SparseccError, match="C identifier"):
        sc.aot.build("my-lib", {"k": sc.compile("ij,j->i", "csr", "dense")}, str(tmp_path))
    with pytest.raises(sc.SparseccError, match="no sparsecc"):
        sc.aot.load(str(tmp_path))
