"""Ahead-of-time libraries get the hand-written kernels (SpGEMM, SDDMM, SpMM, A+B, MTTKRP),
serial: results against SciPy/NumPy (exact patterns), both index widths, empty operands,
bad indices through sc.aot.load and through the C header, libc-only dependencies."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import sparsecc as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_CC = shutil.which("cc") is not None

#: the kernels, and what each is served by (recorded in the manifest)
KINDS = {"spgemm": "spgemm", "sddmm": "sddmm", "spmm": "spmm", "add": "union", "sub": "union",
         "mttkrp": "mttkrp", "ttv": "ttv", "spmv": None}
#: dtypes per width: the 32-bit library in float64, the 64-bit one in float32 / int64
DTYPES = {32: {}, 64: {"spgemm": ("float32",) * 2, "sddmm": ("float32",) * 3, "spmm": ("float32",) * 2,
                       "add": ("int64",) * 2, "sub": ("float32",) * 2, "mttkrp": ("float32",) * 3,
                       "ttv": ("float32",) * 2}}


@pytest.fixture(scope="module", params=[32, 64], ids=["idx32", "idx64"])
def hwlib(request, tmp_path_factory):
    width = request.param
    out = str(tmp_path_factory.mktemp(f"aot_hw{width}"))
    dtypes = {k: DTYPES[width].get(k, ("float64",) * n) for k, n in
              (("spgemm", 2), ("sddmm", 3), ("spmm", 2), ("add", 2), ("sub", 2), ("mttkrp", 3), ("ttv", 2),
                                     ("spmv", 2))}
    sc.aot.build("hw", {
        "spgemm": sc.compile("ik,kj->ij", "csr", "csr", out_format="csr"),
        "sddmm": sc.compile("ij,ik,jk->ij", "csr", "dense", "dense", out_format="csr"),
        "spmm": sc.compile("ik,kj->ij", "csr", "dense"),
        "add": sc.compile("C[i,j] = A[i,j] + B[i,j]", A="csr", B="csr", out_format="csr"),
        "sub": sc.compile("C[i,j] = A[i,j] - B[i,j]", A="csc", B="csc", out_format="csc"),
        "mttkrp": sc.compile("ijk,jr,kr->ir", "coo", "dense", "dense"),
        "ttv": sc.compile("ijk,k->ij", "coo", "dense", out_format="dense"),
        "spmv": sc.compile("ij,j->i", "csr", "dense"),      # the sparsifier's, for comparison
    }, out, index_width=width, dtype=dtypes)
    return out, width


def test_manifest_records_the_hand_written_kernels(hwlib):
    out, width = hwlib
    man = json.load(open(os.path.join(out, "hw.json")))
    assert {k: v.get("kernel") for k, v in man["kernels"].items()} == KINDS
    assert man["kernels"]["spmm"]["fills_output"] is True
    assert man["kernels"]["mttkrp"]["fills_output"] is False
    # SpMM and SDDMM range-check A's coordinates themselves (check=True skips NumPy's check)
    assert man["kernels"]["spmm"]["guarded"] and man["kernels"]["sddmm"]["guarded"]
    assert man["kernels"]["spgemm"]["guarded"] == []
    # a SpGEMM call with a dimension much larger than its stored entries: the sparsifier's kernel
    assert man["kernels"]["spgemm"]["huge_dimensions"] == "sparsifier"
    syms = subprocess.run(["nm", "-D", "--defined-only", os.path.join(out, "libhw.so")],
                          capture_output=True, text=True).stdout
    assert "hw_spgemm_entry_loops" in syms and "hw_spgemm_entry_sparsifier" in syms
    for spec in man["kernels"].values():
        for op in spec["operands"]:
            assert op["format"] == "dense" or f"posWidth = {width}, crdWidth = {width}" in op["format"]


def test_sparsifier_kernels_keep_their_manifest_entry(tmp_path):
    """A kernel no hand-written one serves is recorded as before, but for its fused range
    checks (``guarded``, read as empty from older manifests)."""
    sc.aot.build("old", {"spmv": sc.compile("ij,j->i", "csr", "dense"),
                         "rowsum": sc.compile("ij->i", "coo")}, str(tmp_path))
    man = json.load(open(tmp_path / "old.json"))["kernels"]
    assert set(man["spmv"]) - set(man["rowsum"]) <= {"guarded"}
    assert not {"kernel", "fills_output", "huge_dimensions"} & set(man["spmv"])


def test_library_depends_only_on_libc(hwlib):
    out, _ = hwlib
    text = subprocess.run(["ldd", os.path.join(out, "libhw.so")], capture_output=True, text=True).stdout
    deps = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert deps <= {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "/lib64/ld-linux-x86-64.so.2"}, deps
    syms = subprocess.run(["nm", "-D", "--undefined-only", os.path.join(out, "libhw.so")],
                          capture_output=True, text=True).stdout
    assert "omp" not in syms and "sparsecc_index_flag" not in syms, syms


# run in a subprocess (a crash fails the test), without MLIR or llvmlite importable
CHECKS = r"""
import sys
sys.modules["mlir"] = None
sys.modules["llvmlite"] = None
import numpy as np, scipy.sparse as sp
import sparsecc as sc
lib = sc.aot.load(sys.argv[1])
width = int(sys.argv[2])
ity = np.int32 if width == 32 else np.int64
rng = np.random.default_rng(14)
DT = {"spgemm": "float64", "sddmm": "float64", "spmm": "float64", "add": "float64", "sub": "float64",
      "mttkrp": "float64", "ttv": "float64"}
if width == 64:
    DT = {k: "float32" for k in DT}; DT["add"] = "int64"

def mat(m, n, density, dtype, fmt="csr"):
    A = sp.random_array((m, n), density=density, format=fmt, rng=rng, dtype=np.float64)
    if np.dtype(dtype).kind == "i":
        A.data = rng.integers(-5, 6, A.nnz).astype(np.float64)
    A = A.astype(dtype)
    A.indices = A.indices.astype(ity); A.indptr = A.indptr.astype(ity)
    return A

def pattern(M):
    P = M.copy(); P.data = np.ones_like(P.data, dtype=np.float64); return P.astype(np.float64)

def same_pattern(C, P):
    C = C.tocsr() if C.format == "csr" else C.tocsc()
    P = P.asformat(C.format); P.sum_duplicates(); P.sort_indices()
    assert C.has_canonical_format, "result not canonical"
    assert np.array_equal(C.indptr, P.indptr) and np.array_equal(C.indices, P.indices)

def close(a, b, dtype):
    tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
    assert np.allclose(a, b, rtol=tol, atol=tol), np.abs(np.asarray(a) - np.asarray(b)).max()

def inputs(case):
    if case == "empty":
        return (40, 30, 20), 0.0
    if case == "zero-rows":
        return (0, 30, 20), 0.1
    if case == "single":
        return (1, 1, 1), 1.0
    return (60, 45, 50), 0.15

for case in ("random", "empty", "zero-rows", "single"):
    (m, k, n), d = inputs(case)
    # SpGEMM: pattern = the symbolic product, values = the product
    d0 = DT["spgemm"]
    A, B = mat(m, k, d, d0), mat(k, n, d, d0)
    C = lib.spgemm(A, B)
    assert C.shape == (m, n) and C.dtype == np.dtype(d0)
    same_pattern(C, pattern(A) @ pattern(B))
    close(C.toarray(), A.toarray().astype(np.float64) @ B.toarray().astype(np.float64), d0)
    # SDDMM: A's pattern exactly, values A[i,j] * dot(X[i], Y[j])
    d0 = DT["sddmm"]
    A = mat(m, n, d, d0)
    X = rng.standard_normal((m, 8)).astype(d0); Y = rng.standard_normal((n, 8)).astype(d0)
    C = lib.sddmm(A, X, Y)
    assert C.format == "csr" and np.array_equal(C.indptr, A.indptr) and np.array_equal(C.indices, A.indices)
    close(C.toarray(), A.toarray().astype(np.float64) * (X.astype(np.float64) @ Y.T.astype(np.float64)), d0)
    # SpMM
    d0 = DT["spmm"]
    A = mat(m, k, d, d0); X = rng.standard_normal((k, 7)).astype(d0)
    close(lib.spmm(A, X), A.toarray().astype(np.float64) @ X.astype(np.float64), d0)
    # A + B (CSR), A - B (CSC): the union of the patterns
    d0 = DT["add"]
    A, B = mat(m, n, d, d0), mat(m, n, d, d0)
    C = lib.add(A, B)
    same_pattern(C, pattern(A) + pattern(B))
    assert C.dtype == np.dtype(d0) and np.array_equal(C.toarray(), A.toarray() + B.toarray())
    d0 = DT["sub"]
    A, B = mat(m, n, d, d0, "csc"), mat(m, n, d, d0, "csc")
    C = lib.sub(A, B)
    assert C.format == "csc"
    same_pattern(C, pattern(A) + pattern(B))
    close(C.toarray(), A.toarray() - B.toarray(), d0)
    # MTTKRP / TTV over a 3-D COO
    d0 = DT["mttkrp"]
    T = sp.random_array((m, k, n), density=min(d, 0.05) if d < 1 else 1.0, format="coo", rng=rng).astype(d0)
    T.coords = tuple(c.astype(ity) for c in T.coords)
    Bf = rng.standard_normal((k, 5)).astype(d0); Cf = rng.standard_normal((n, 5)).astype(d0)
    close(lib.mttkrp(T, Bf, Cf), np.einsum("ijk,jr,kr->ir", T.toarray().astype(np.float64),
                                           Bf.astype(np.float64), Cf.astype(np.float64)), d0)
    v = rng.standard_normal(n).astype(d0)
    close(lib.ttv(T, v), np.einsum("ijk,k->ij", T.toarray().astype(np.float64), v.astype(np.float64)), d0)
    print(case, "ok")

# SpGEMM with huge dimensions (the dispatching entry runs the sparsifier's kernel), and at
# the threshold's edges
for n, nnz in ((400_000, 50), (65_536 + 4 * 40, 20), (65_536 + 4 * 40 + 1, 20)):
    rows, cols = rng.integers(0, n, nnz), rng.integers(0, n, nnz)
    A = sp.csr_array((rng.random(nnz).astype(DT["spgemm"]), (rows, cols)), shape=(n, n)); A.sum_duplicates()
    A.indices = A.indices.astype(ity); A.indptr = A.indptr.astype(ity)
    B = A.T.tocsr(); B.indices = B.indices.astype(ity); B.indptr = B.indptr.astype(ity)
    C = lib.spgemm(A, B)
    same_pattern(C, pattern(A) @ pattern(B))
    ref = (A.astype(np.float64) @ B.astype(np.float64)).tocsr(); ref.sort_indices()
    close(C.data, ref.data, DT["spgemm"])

# dense results in memory NumPy just freed (the loader allocates them with np.empty where the
# kernel writes every entry): SpMV (the sparsifier's, fills its output), SpMM, MTTKRP (zeroed)
for r in range(3):
    A = mat(300, 200, 0.05, DT["spmm"]); X = rng.standard_normal((200, 16)).astype(DT["spmm"])
    junk = np.full((300, 16), 7, DT["spmm"]); del junk
    close(lib.spmm(A, X), A.toarray().astype(np.float64) @ X.astype(np.float64), DT["spmm"])
    x = rng.standard_normal(200)
    junk = np.full(300, 7.0); del junk
    close(lib.spmv(A.astype(np.float64), x), A.toarray().astype(np.float64) @ x, "float64")
    T = sp.random_array((40, 30, 20), density=0.05, format="coo", rng=rng).astype(DT["mttkrp"])
    Bf = rng.standard_normal((30, 6)).astype(DT["mttkrp"]); Cf = rng.standard_normal((20, 6)).astype(DT["mttkrp"])
    junk = np.full((40, 6), 7, DT["mttkrp"]); del junk
    close(lib.mttkrp(T, Bf, Cf), np.einsum("ijk,jr,kr->ir", T.toarray().astype(np.float64),
                                           Bf.astype(np.float64), Cf.astype(np.float64)), DT["mttkrp"])

# nothing the user passes is modified
A = mat(30, 20, 0.2, DT["sddmm"]); X = rng.standard_normal((30, 4)).astype(DT["sddmm"])
Y = rng.standard_normal((20, 4)).astype(DT["sddmm"])
copies = [A.data.copy(), A.indices.copy(), A.indptr.copy(), X.copy(), Y.copy()]
lib.sddmm(A, X, Y)
assert all(np.array_equal(a, b) for a, b in zip(copies, [A.data, A.indices, A.indptr, X, Y]))

# bad indices: check=True validates before native code; check=False: the kernels' own range
# checks (SDDMM, SpMM) return 2 -> OperandError
bad = A.copy(); bad.indices[3] = 25
Xs = rng.standard_normal((20, 3)).astype(DT["spmm"])
bad_spmm = mat(30, 20, 0.2, DT["spmm"]); bad_spmm.indices[-1] = 21
for name, args in (("sddmm", (bad, X, Y)), ("spmm", (bad_spmm, Xs))):
    try:
        lib[name](*args)
    except sc.OperandError as err:
        print(name, "validated:", err)
    else:
        raise AssertionError("no error")
    lib[name].check = False
    try:
        lib[name](*args)
    except sc.OperandError as err:
        print(name, "kernel:", err)
    else:
        raise AssertionError("no error from the kernel")
print("OK")
"""


def test_results_against_scipy_and_numpy(hwlib):
    out, width = hwlib
    r = subprocess.run([sys.executable, "-c", CHECKS, out, str(width)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK"), r.stdout
    for name in ("sddmm", "spmm"):
        assert f"{name} validated:" in r.stdout
        assert f"{name} kernel: sparsecc: an operand of" in r.stdout and "index out of range" in r.stdout


C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "hw.h"
typedef IDX idx;
int main(void) {
    /* A = [[1, 0, 2], [0, 3, 0]] (CSR), X = Y = ones(3 x 2) */
    idx indptr[] = {0, 2, 3}, indices[] = {0, 2, 1};
    REAL data[] = {1, 2, 3}, X[] = {1, 1, 1, 1, 1, 1}, Bd[] = {1, 2, 3, 4, 5, 6};
    hw_sparse_result C;
    int rc = hw_sddmm(2, 3, 2, indptr, 3, indices, 3, data, 3, X, X, &C);
    printf("sddmm rc %d nnz %lld:", rc, (long long)C.lengths[2]);
    for (int e = 0; e < C.lengths[2]; e++) printf(" %g", (double)((REAL *)C.buffers[2])[e]);
    printf("\n");
    hw_free_result(&C);
    REAL out[4] = {7, 7, 7, 7};          /* garbage: the kernel overwrites it */
    rc = hw_spmm(2, 3, 2, indptr, 3, indices, 3, data, 3, Bd, out);
    printf("spmm rc %d: %g %g %g %g\n", rc, (double)out[0], (double)out[1], (double)out[2], (double)out[3]);
    /* T[0,1,2] = 2, T[1,0,1] = 3 (2 x 2 x 3 COO); MTTKRP with B = ones(2 x 2), C = ones(3 x 2) */
    idx tpos[] = {0, 2}, ti[] = {0, 1}, tj[] = {1, 0}, tk[] = {2, 1};
    REAL tv[] = {2, 3}, Bf[] = {1, 1, 1, 1}, Cf[] = {1, 1, 1, 1, 1, 1}, M[4] = {7, 7, 7, 7};
    rc = hw_mttkrp(2, 2, 3, 2, tpos, 2, ti, 2, tj, 2, tk, 2, tv, 2, Bf, Cf, M);
    printf("mttkrp rc %d: %g %g %g %g\n", rc, (double)M[0], (double)M[1], (double)M[2], (double)M[3]);
    indices[2] = 9;                      /* out of range: the kernels' own checks */
    rc = hw_sddmm(2, 3, 2, indptr, 3, indices, 3, data, 3, X, X, &C);
    printf("bad sddmm rc %d\n", rc);
    rc = hw_spmm(2, 3, 2, indptr, 3, indices, 3, data, 3, Bd, out);
    printf("bad spmm rc %d\n", rc);
    return 0;
}
"""


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
def test_c_program_against_the_header(hwlib, tmp_path):
    out, width = hwlib
    real = "double" if width == 32 else "float"
    idx = "int32_t" if width == 32 else "int64_t"
    src = tmp_path / "main.c"
    src.write_text(C_PROGRAM)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", f"-DREAL={real}", f"-DIDX={idx}", str(src), "-I", out,
                    "-L", out, "-lhw", f"-Wl,-rpath,{out}", "-o", str(exe)], check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # SDDMM: A's values times dot(X[i], Y[j]) = 2; SpMM: [[1,0,2],[0,3,0]] @ [[1,2],[3,4],[5,6]]
    # MTTKRP: M[0,:] = 2, M[1,:] = 3
    assert r.stdout.splitlines() == ["sddmm rc 0 nnz 3: 2 4 6", "spmm rc 0: 11 14 9 12", "mttkrp rc 0: 2 2 3 3",
                                     "bad sddmm rc 2", "bad spmm rc 2"]


def test_bad_index_in_c_frees_the_sddmm_result(hwlib, tmp_path):
    """rc 2 from SDDMM's kernel: the wrapper frees the result it built (malloc counters)."""
    out, width = hwlib
    if not HAVE_CC:
        pytest.skip("no C compiler")
    real = "double" if width == 32 else "float"
    idx = "int32_t" if width == 32 else "int64_t"
    src = tmp_path / "leak.c"
    src.write_text(r"""
#include <malloc.h>
#include <stdio.h>
#include "hw.h"
int main(void) {
    static IDX indptr[1001], indices[20000]; static REAL data[20000], X[1000 * 4];
    for (int i = 0; i <= 1000; i++) indptr[i] = 20 * i;
    for (int e = 0; e < 20000; e++) { indices[e] = e % 1000; data[e] = 1; }
    for (int e = 0; e < 4000; e++) X[e] = 1;
    indices[19999] = 5000;
    hw_sparse_result C;
    struct mallinfo2 before = mallinfo2();
    for (int r = 0; r < 50; r++)
        if (hw_sddmm(1000, 1000, 4, indptr, 1001, indices, 20000, data, 20000, X, X, &C) != 2) return 1;
    struct mallinfo2 after = mallinfo2();
    printf("%zd\n", (ssize_t)(after.uordblks + after.hblkhd) - (ssize_t)(before.uordblks + before.hblkhd));
    return 0;
}
""")
    exe = tmp_path / "leak"
    subprocess.run(["cc", "-std=gnu99", "-Wall", "-Werror", f"-DREAL={real}", f"-DIDX={idx}", str(src), "-I", out,
                    "-L", out, "-lhw", f"-Wl,-rpath,{out}", "-o", str(exe)], check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # 50 leaked results would be 50 x 20000 x (idx + real) bytes, >= 12 MB
    assert int(r.stdout) < 200_000, r.stdout


def test_a_library_with_the_sparsifier_kernels_still_loads(tmp_path, monkeypatch):
    """What older builds wrote (no hand-written kernels, no new manifest fields): loaded with
    outputs in memory NumPy just freed, results right, bad indices refused."""
    import numpy as np
    import scipy.sparse as sp
    from sparsecc.runtime import fast_paths, specialization
    monkeypatch.setattr(fast_paths, "serial_kernel", lambda *a: None)
    real = specialization.compile_specialization
    monkeypatch.setattr(specialization, "compile_specialization",
                        lambda *a, chosen=None, **kw: real(*a, **kw))      # records nothing
    import sparsecc.runtime.kernel as kmod
    monkeypatch.setattr(kmod, "compile_specialization", specialization.compile_specialization)
    sc.aot.build("older", {"spmm": sc.compile("ik,kj->ij", "csr", "dense"),
                           "mttkrp": sc.compile("ijk,jr,kr->ir", "coo", "dense", "dense")}, str(tmp_path))
    man = json.load(open(tmp_path / "older.json"))["kernels"]
    assert not any({"kernel", "guarded", "fills_output"} & set(spec) for spec in man.values())
    lib = sc.aot.load(str(tmp_path))
    rng = np.random.default_rng(5)
    for _ in range(3):
        A = sp.random_array((120, 90), density=0.05, format="csr", rng=rng)
        X = rng.standard_normal((90, 12))
        junk = np.full((120, 12), 7.0); del junk
        np.testing.assert_allclose(lib.spmm(A, X), A.toarray() @ X, rtol=1e-12, atol=1e-12)
        T = sp.random_array((30, 20, 10), density=0.05, format="coo", rng=rng)
        B, C = rng.standard_normal((20, 3)), rng.standard_normal((10, 3))
        junk = np.full((30, 3), 7.0); del junk
        np.testing.assert_allclose(lib.mttkrp(T, B, C), np.einsum("ijk,jr,kr->ir", T.toarray(), B, C),
                                   rtol=1e-12, atol=1e-12)
    bad = A.copy(); bad.indices[0] = 95
    with pytest.raises(sc.OperandError, match="index 95"):
        lib.spmm(bad, X)
