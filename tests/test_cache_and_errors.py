"""The caches compile each kernel once; user mistakes raise SparseccError subclasses."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from conftest import assert_matches, random_sparse


def test_second_call_compiles_nothing_and_shapes_do_not_recompile():
    rng = np.random.default_rng(0)
    A = random_sparse((7, 5), 0.3, np.float64, rng, fmt="csr")
    k = sc.compile("ij,j->i", "csr", "dense")
    k(A, np.ones(5))
    before = sc.cache_info()
    k(A, np.ones(5))
    B = random_sparse((40, 31), 0.1, np.float64, rng, fmt="csr")   # another shape, same kernel
    assert_matches(k(B, np.ones(31)), B.toarray() @ np.ones(31))
    after = sc.cache_info()
    assert after.misses == before.misses
    assert after.disk_hits == before.disk_hits
    assert after.hits == before.hits + 2


def test_second_process_finds_kernel_on_disk(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0]]))
        y = sc.einsum("ij,j->i", A, np.array([1.0, 2, 3]))
        assert np.allclose(y, [7, 6]), y
        i = sc.cache_info()
        print(i.misses, i.disk_hits)
    """)
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split() == ["1", "0"]
    assert second.stdout.split() == ["0", "1"]
    assert oct(os.stat(tmp_path).st_mode & 0o777) == "0o700"


def test_import_does_not_import_mlir():
    code = "import sys, sparsecc; print(any(m == 'mlir' or m.startswith('mlir.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ir_stages():
    k = sc.compile("ij,j->i", "csr", "dense")
    mlir = k.ir()
    assert "#sparse_tensor.encoding" in mlir and "linalg.generic" in mlir
    assert "define" in k.ir("llvm")
    assert "llvm.func" in k.ir("llvm-dialect")
    with pytest.raises(sc.SparseccError, match="unknown stage"):
        k.ir("bogus")


def test_dump_ir(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, sparsecc as sc
        sc.einsum("ij,jk->ik", np.ones((2, 3)), np.ones((3, 2)), formats=("csr", "dense"))
    """)
    env = dict(os.environ, SPARSECC_DUMP_IR=str(tmp_path / "ir"), SPARSECC_CACHE_DIR=str(tmp_path / "c"))
    subprocess.run([sys.executable, "-c", script], env=env, check=True)
    names = sorted(os.listdir(tmp_path / "ir"))
    assert [n.split(".")[1] for n in names] == ["0-mlir", "1-sparsified", "2-llvm-dialect", "3-llvm"]


A = sp.csr_array(np.eye(3))
x = np.ones(3)

ERRORS = [
    (lambda: sc.einsum("ij,j->i", A, np.ones(4)), sc.ShapeError, "index 'j' has size 3 in operand 0 but 4 in operand 1"),
    (lambda: sc.einsum("ij,j->i", A), sc.OperandError, "name 2 operand"),
    (lambda: sc.einsum("ij,j->k", A, x), sc.ParseError, "output index 'k' appears in no input"),
    (lambda: sc.einsum("ij,j->ii", A, x), sc.ParseError, "repeated"),
    (lambda: sc.einsum("i1,j->i", A, x), sc.ParseError, "invalid character"),
    (lambda: sc.einsum("..ij,j->i", A, x), sc.ParseError, "ellipsis"),
    (lambda: sc.einsum("ij,j->i", A, x, formats=("csx", "dense")), sc.FormatError, "unknown format 'csx'"),
    (lambda: sc.einsum("ijk->i", A), sc.ShapeError, "3 indices"),
    (lambda: sc.einsum("i->i", np.array(["a", "b"])), sc.DTypeError, "supports"),
    (lambda: sc.einsum("i->i", np.ones(3, np.float16)), sc.DTypeError, "float16"),
    (lambda: sc.evaluate("y[i] = A[i,j] * x[j] +", A=A, x=x), sc.ParseError, "column"),
    (lambda: sc.evaluate("y[i] = A[i,j] / x[j]", A=A, x=x), sc.ParseError, "division is only by a scalar"),
    (lambda: sc.evaluate("y[i] = foo(A[i,j])", A=A), sc.ParseError, "unknown function 'foo'"),
    (lambda: sc.evaluate("y[k] = A[i,j]", A=A), sc.ParseError, "output index 'k' appears in no input"),
    (lambda: sc.evaluate("y[i] = A[i,j] * x[j]", A=A), sc.OperandError, "needs operand"),
    (lambda: sc.evaluate("y[i] = A[i,j] * x[j]", A=A, x=x, z=x), sc.OperandError, "no operand 'z'"),
    (lambda: sc.evaluate("Y[i,j] = A[i,j] - B[i,j]", A=A.astype(bool), B=A.astype(bool)), sc.DTypeError, "numpy"),
    (lambda: sc.compile("ij,j->i", "csr"), sc.OperandError, "2 operand"),
    (lambda: sc.compile("ijk,k->ij", "csr", "dense"), sc.FormatError, "rank 3"),
    # plain "bsr" on a csr_array now takes SciPy's block size (tests/test_api_fixes.py)
    (lambda: sc.compile("ijk->i", "bsr")(sp.coo_array(np.ones((2, 2, 2)))), sc.FormatError, "for matrices"),
    (lambda: sc.Format(("dense", "compressed"), (0, 0)), sc.FormatError, r"order \(0, 0\) is not a permutation"),
    (lambda: sc.Format(("dense", "singleton")), sc.FormatError, "nonunique"),
    (lambda: sc.einsum("ij,j->i", object(), x), sc.OperandError, "not"),
]


@pytest.mark.parametrize("call,exc,msg", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_errors(call, exc, msg):
    with pytest.raises(exc, match=msg) as info:
        call()
    assert isinstance(info.value, sc.SparseccError) and isinstance(info.value, ValueError)


def test_user_arrays_are_not_modified():
    rng = np.random.default_rng(2)
    A = random_sparse((8, 6), 0.4, np.float64, rng, fmt="coo")
    # an uncoalesced COO: every entry twice, in reverse order
    rev = slice(None, None, -1)
    U = sp.coo_array((np.r_[A.data, A.data][rev], (np.r_[A.row, A.row][rev], np.r_[A.col, A.col][rev])),
                     shape=A.shape)
    assert not U.has_canonical_format
    before = (U.data.copy(), U.row.copy(), U.col.copy())
    x = rng.random(6)
    for fmt in ("coo", "csr", "dcsc"):
        assert_matches(sc.einsum("ij,j->i", U, x, formats=(fmt, "dense")), U.toarray() @ x)
    assert all(np.array_equal(a, b) for a, b in zip(before, (U.data, U.row, U.col)))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr", "csf", "bsr2x2", "dense"])
@pytest.mark.parametrize("case", ["empty", "single", "zero-rows"])
def test_edge_cases(fmt, case):
    shape = {"empty": (4, 6), "single": (4, 6), "zero-rows": (0, 6)}[case]
    A = sp.csr_array(shape)
    if case == "single":
        A = sp.csr_array((np.array([3.5]), np.array([5]), np.array([0, 0, 1, 1, 1])), shape=shape)
    x = np.arange(6.0)
    assert_matches(sc.einsum("ij,j->i", A, x, formats=(fmt, "dense")), A.toarray() @ x)
    assert_matches(sc.einsum("ij->", A, formats=(fmt,)), np.einsum("ij->", A.toarray()))


def test_structural_zeros_are_never_read():
    A = sp.csr_array((np.array([2.0]), np.array([0]), np.array([0, 1, 1])), shape=(2, 2))
    x = np.array([1.0, np.inf])
    y = sc.einsum("ij,j->i", A, x)
    assert np.array_equal(y, [2.0, 0.0])


def test_scipy_matrices_and_other_formats():
    rng = np.random.default_rng(9)
    D = random_sparse((6, 6), 0.3, np.float64, rng).toarray()
    x = rng.random(6)
    for m in (sp.csr_matrix(D), sp.dia_matrix(D), sp.lil_array(D), sp.dok_array(D), sp.bsr_array(D, blocksize=(3, 2))):
        assert_matches(sc.einsum("ij,j->i", m, x), D @ x)


def test_nd_coo_array():
    rng = np.random.default_rng(4)
    T = random_sparse((5, 4, 3), 0.3, np.float64, rng)
    assert T.ndim == 3 and T.format == "coo"
    v = rng.random(3)
    assert_matches(sc.einsum("ijk,k->ij", T, v), np.einsum("ijk,k->ij", T.toarray(), v))


# Stores into a memref of sub-byte integers trip an assertion in the MLIR wheels that aborts
# the process (../shared/notes/toolchain.md; sparsecc widens the i1 memrefs the sparsifier
# makes, but not i2): the compile worker dies, the caller gets a CompileError.
ABORTS_MLIR = """
func.func @kernel(%v: i2, %m: memref<8xi2>) attributes { llvm.emit_c_interface } {
  %c0 = arith.constant 0 : index
  memref.store %v, %m[%c0] : memref<8xi2>
  return
}
"""


def test_compile_errors_and_crashes_keep_the_process_alive(tmp_path):
    from sparsecc.runtime import compiler
    with pytest.raises(sc.CompileError, match="could not compile") as info:
        compiler.compile_library("func.func @kernel( this is not mlir", str(tmp_path / "a.so"))
    assert os.path.exists(info.value.ir_path)
    with pytest.raises(sc.CompileError, match="crashed") as info:
        compiler.compile_library(ABORTS_MLIR, str(tmp_path / "b.so"))
    assert "memref.store" in open(info.value.ir_path).read()
    # the worker is restarted: kernels compile again
    k = sc.compile("ij,j->i", "dcsc", "dense")
    assert_matches(k(sp.csr_array(np.eye(2) * 3), np.ones(2)), np.full(2, 3.0))


def test_failed_ir_goes_to_the_cache_folder_bounded_and_failures_are_remembered(tmp_path, monkeypatch):
    from sparsecc.runtime import compiler
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compiler, "FAILED_KEEP", 3)
    monkeypatch.setattr(compiler, "_failed", {})
    with pytest.raises(sc.CompileError, match="crashed") as first:
        compiler.compile_library(ABORTS_MLIR, str(tmp_path / "b.so"))
    assert os.path.dirname(first.value.ir_path) == str(tmp_path / "cache" / "failed")
    worker = compiler._worker                      # restarted? not yet: nothing compiled since
    starts = []
    real_start = compiler._start
    monkeypatch.setattr(compiler, "_start", lambda: starts.append(1) or real_start())
    with pytest.raises(sc.CompileError) as again:
        compiler.compile_library(ABORTS_MLIR, str(tmp_path / "c.so"))
    assert again.value is first.value and not starts and compiler._worker is worker   # at once
    for k in range(5):                              # only the newest FAILED_KEEP files stay
        with pytest.raises(sc.CompileError, match="could not compile"):
            compiler.compile_library(f"func.func @kernel{k}( not mlir", str(tmp_path / "a.so"))
    left = sorted(os.listdir(tmp_path / "cache" / "failed"))
    assert len(left) == 3 and all(f.endswith(".mlir") for f in left)


def test_disk_key_includes_the_target_cpu_and_its_features():
    from sparsecc.runtime import cache, targets
    mlir, opts = "module {}", sc.Options().key()
    host = targets.resolve(sc.Options())
    here = cache.key_of(mlir, opts, host)
    assert cache.key_of(mlir, opts, host) == here == cache.key_of(mlir, opts)   # stable; None: the host
    x86 = targets.resolve(sc.Options(cpu="x86-64"))
    assert cache.key_of(mlir, opts, x86) != here                                # Options(cpu=...)
    assert cache.key_of(mlir, opts, x86) != cache.key_of(mlir, opts, targets.resolve(sc.Options(cpu="skylake")))
    features = host.param("features")
    other = host.replace(features=features.replace("+avx2", "-avx2") + ",+avx512f")
    assert cache.key_of(mlir, opts, other) != here                              # same CPU name, other features
    assert cache.key_of(mlir, opts, host.replace(cpu="some-other-cpu")) != here
    assert cache.key_of(mlir, opts, host.replace(features=features)) == here
