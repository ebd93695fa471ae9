"""Jacobians and Hessians in ahead-of-time libraries (docs/aot.md "Jacobians and Hessians"):
the pattern tables and the values entry points, read and called from a C program compiled
with the system's C compiler against the generated header, compared with the JIT kernels."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")

BRATU = "r[i] = sum[j](L[i,j] * u[j]) + lam[] * exp(u[i]) - f[i]"
LSQ2 = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2)"     # 2 A^T A: the kernel reads A as CSC
LSQ = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2) + sum[j](c[] * x[j] ** 4)"


def _laplacian(n):
    T = sp.diags_array([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], offsets=[-1, 0, 1])
    return sp.csr_array(sp.kron(sp.eye_array(n), T) + sp.kron(T, sp.eye_array(n)))


def _c_array(name, a, ctype):
    return f"static const {ctype} {name}[] = {{{', '.join(repr(float(v)) if ctype == 'double' else str(int(v)) for v in a) or '0'}}};"


def _csr_args(name, M):
    return f"{name}_ptr, {len(M.indptr)}, {name}_ind, {M.nnz}, {name}_val, {M.nnz}"


def _csr_data(name, M):
    return "\n".join([_c_array(f"{name}_ptr", M.indptr, "int32_t"), _c_array(f"{name}_ind", M.indices, "int32_t"),
                      _c_array(f"{name}_val", M.data, "double")])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    rng = np.random.default_rng(0)
    L = _laplacian(4)
    n = L.shape[0]
    u, lam = rng.uniform(0, 0.5, n), -2.5
    A = sp.csr_array(sp.random_array((12, 6), density=0.3, format="csr", rng=rng) + sp.eye_array(12, 6))
    x, c = rng.standard_normal(6), 0.7
    J = sc.jacobian(BRATU, wrt="u")
    H = sc.hessian(LSQ2, wrt="x")
    out = str(tmp_path_factory.mktemp("aotderiv"))
    sc.aot.build("dl", {"J": sc.aot.Derivative(J, {"L": L}),
                        "Jc": sc.aot.Derivative(J, formats={"L": "csr"}, layout="csc"),
                        "H": sc.aot.Derivative(H, {"A": A}, layout="coo", triangle="lower"),
                        "H2": sc.aot.Derivative(sc.hessian(LSQ2, wrt="x"), {"A": A}, triangle="upper")}, out)
    L2 = _laplacian(3)         # another pattern: the fixed J refuses it, the run-time one takes it
    prog = f"""#include <stdio.h>
#include <stdlib.h>
#include "dl.h"
{_csr_data("L", L)}
{_csr_data("L2", L2)}
{_csr_data("A", A)}
{_c_array("u", u, "double")}
static const double lam = {lam!r};
static void show(const char *what, const double *v, int64_t n) {{
    printf("%s", what); for (int64_t t = 0; t < n; t++) printf(" %.17g", v[t]); printf("\\n"); }}
static void showi(const char *what, const int32_t *v, int64_t n) {{
    printf("%s", what); for (int64_t t = 0; t < n; t++) printf(" %d", v[t]); printf("\\n"); }}
int main(void) {{
    int64_t n = {n};
    showi("J_row_ptr", dl_J_row_ptr, DL_J_NROWS + 1);
    showi("J_col_ind", dl_J_col_ind, DL_J_NNZ);
    showi("J_row_ind", dl_J_row_ind, DL_J_NNZ);
    double *v = malloc(DL_J_NNZ * sizeof *v);
    int rc = dl_J_values(n, n, {_csr_args("L", L)}, &lam, u, v, DL_J_NNZ);
    printf("J_rc %d\\n", rc); show("J_values", v, DL_J_NNZ);
    printf("J_other_pattern_rc %d\\n", dl_J_values(9, 9, {_csr_args("L2", L2)}, &lam, u, v, DL_J_NNZ));
    dl_sparse_result p;
    rc = dl_Jc_pattern(9, 9, {_csr_args("L2", L2)}, &lam, u, &p);
    printf("Jc_pattern_rc %d\\n", rc);
    showi("Jc_col_ptr", p.buffers[0], p.lengths[0]);
    showi("Jc_row_ind", p.buffers[1], p.lengths[1]);
    int64_t nnz = p.lengths[1];
    dl_free_result(&p);
    double *w = malloc(nnz * sizeof *w);
    rc = dl_Jc_values(9, 9, {_csr_args("L2", L2)}, &lam, u, w, nnz);
    printf("Jc_rc %d\\n", rc); show("Jc_values", w, nnz);
    printf("Jc_wrong_count_rc %d\\n", dl_Jc_values(9, 9, {_csr_args("L2", L2)}, &lam, u, w, nnz - 1));
    showi("H_row_ind", dl_H_row_ind, DL_H_NNZ);
    showi("H_col_ind", dl_H_col_ind, DL_H_NNZ);
    double *h = malloc(DL_H_NNZ * sizeof *h);
    rc = dl_H_values(12, 6, 6, {_csr_args("A", A)}, h, DL_H_NNZ);
    printf("H_rc %d\\n", rc); show("H_values", h, DL_H_NNZ);
    printf("H_sizes %d %d %d\\n", (int)DL_H_NROWS, (int)DL_H_NCOLS, (int)DL_H_NNZ);
    double *h2 = malloc(DL_H2_NNZ * sizeof *h2);
    rc = dl_H2_values(12, 6, 6, {_csr_args("A", A)}, h2, DL_H2_NNZ);
    printf("H2_rc %d\\n", rc); show("H2_values", h2, DL_H2_NNZ);
    showi("H2_row_ptr", dl_H2_row_ptr, DL_H2_NROWS + 1);
    showi("H2_col_ind", dl_H2_col_ind, DL_H2_NNZ);
    free(v); free(w); free(h); free(h2);
    return 0;
}}
"""
    src = os.path.join(out, "main.c")
    with open(src, "w") as f:
        f.write(prog)
    exe = os.path.join(out, "main")
    subprocess.run([CC, "-std=c99", "-Wall", "-Werror", src, "-I", out, "-L", out, "-ldl", "-Wl,-rpath," + out,
                    "-o", exe], check=True, capture_output=True, text=True)
    run = subprocess.run([exe], check=True, capture_output=True, text=True)
    lines = dict(line.split(" ", 1) if " " in line else (line, "") for line in run.stdout.splitlines())
    got = {k: np.array(v.split(), dtype=float) for k, v in lines.items()}
    return dict(got=got, L=L, L2=L2, u=u, lam=lam, A=A, x=x, c=c, J=J, H=H, out=out)


def test_fixed_jacobian_tables_and_values(built):
    g, J, L = built["got"], built["J"], built["L"]
    ops = dict(L=L, u=built["u"], lam=built["lam"], f=np.zeros(L.shape[0]))
    indptr, indices = J.pattern(L=L)
    rows, cols = J.pattern(layout="coo", L=L)
    np.testing.assert_array_equal(g["J_row_ptr"], indptr)
    np.testing.assert_array_equal(g["J_col_ind"], indices)
    np.testing.assert_array_equal(g["J_row_ind"], rows)
    assert g["J_rc"][0] == 0
    np.testing.assert_allclose(g["J_values"], J.values(**ops), rtol=1e-15)
    # the oracle: L - 2.5 diag(exp(u)) written out with SciPy, on the pattern's entries
    want = (L + sp.diags_array(built["lam"] * np.exp(built["u"]))).toarray()
    np.testing.assert_allclose(g["J_values"], want[rows, cols], rtol=1e-14)
    assert g["J_other_pattern_rc"][0] == 3        # a 9 x 9 grid is not the tables' pattern


def test_run_time_pattern_csc(built):
    g, J, L2 = built["got"], built["J"], built["L2"]
    u = built["u"][:9]
    assert g["Jc_pattern_rc"][0] == 0 and g["Jc_rc"][0] == 0
    colptr, rowind = J.pattern(layout="csc", L=L2)
    np.testing.assert_array_equal(g["Jc_col_ptr"], colptr)
    np.testing.assert_array_equal(g["Jc_row_ind"], rowind)
    np.testing.assert_allclose(g["Jc_values"], J.values(layout="csc", L=L2, u=u, lam=built["lam"], f=np.zeros(9)),
                               rtol=1e-15)
    assert g["Jc_wrong_count_rc"][0] == 3


def test_fixed_hessian_lower_triplets(built):
    g, H, A, x, c = built["got"], built["H"], built["A"], built["x"], built["c"]
    rows, cols = H.pattern(layout="coo", triangle="lower", A=A)
    np.testing.assert_array_equal(g["H_row_ind"], rows)
    np.testing.assert_array_equal(g["H_col_ind"], cols)
    assert tuple(g["H_sizes"]) == (6, 6, len(rows))
    assert g["H_rc"][0] == 0
    ops = dict(A=A, x=x, b=np.zeros(12))
    np.testing.assert_allclose(g["H_values"], H.values(layout="coo", triangle="lower", **ops), rtol=1e-14)
    want = (2 * (A.T @ A)).toarray()   # written out with SciPy
    np.testing.assert_allclose(g["H_values"], want[rows, cols], rtol=1e-13)
    assert np.all(cols <= rows)


def test_operand_read_transposed(built):
    """2 A^T A reads A as CSC: the C caller passes the CSR it has, the wrapper transposes it."""
    g, A = built["got"], built["A"]
    header = open(os.path.join(built["out"], "dl.h")).read()
    assert "(d1 : dense, d0 : compressed)" in header.split("dl_H2:")[1].split("\n * A__1:")[0]
    assert g["H2_rc"][0] == 0
    H2 = sc.hessian(LSQ2, wrt="x")
    indptr, indices = H2.pattern(A=A, triangle="upper")
    np.testing.assert_array_equal(g["H2_row_ptr"], indptr)
    np.testing.assert_array_equal(g["H2_col_ind"], indices)
    want = np.triu((2 * (A.T @ A)).toarray())
    rows = np.repeat(np.arange(6), np.diff(indptr))
    np.testing.assert_allclose(g["H2_values"], want[rows, indices], rtol=1e-13)


def test_manifest_and_load(built):
    lib = sc.aot.load(built["out"])
    with open(os.path.join(built["out"], "dl.json")) as f:
        rec = json.load(f)["kernels"]
    assert rec["J"]["derivative"]["pattern"] == "fixed" and rec["Jc"]["derivative"]["pattern"] == "operands"
    assert rec["H"]["derivative"]["triangle"] == "lower"
    assert rec["J"]["derivative"]["nnz"] == len(built["J"].pattern(L=built["L"])[1])
    # from Python the library gives the derivative statement's kernel, the identity an operand
    L, u, lam = built["L"], built["u"], built["lam"]
    n = L.shape[0]
    got = lib.J(L=L, u=u, lam=np.float64(lam), Id_=sp.identity(n, format="csr"))
    want = built["J"](L=L, u=u, lam=lam, f=np.zeros(n))
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.data, want.data, rtol=1e-15)


def test_refused():
    J = sc.jacobian(BRATU, wrt="u")
    with pytest.raises(sc.SparseccError, match="needs a format"):
        sc.aot.build("dx", {"J": J}, "/nonexistent-never-written")
    with pytest.raises(sc.SparseccError, match="triangle"):
        sc.aot.Derivative(J, triangle="lower")
    with pytest.raises(sc.SparseccError, match="layout"):
        sc.aot.Derivative(J, layout="bsr")
    with pytest.raises(sc.SparseccError, match="DIA|CSR, CSC or COO"):
        sc.aot.Derivative(J, {"L": sp.dia_array(_laplacian(2))}).kernel_and_record()


def test_nested_hessian_refused():
    """LSQ's Hessian, 2 A^T A + 12 c diag(x^2), holds a nested sum over A beside the identity
    term: the JIT computes the sum as a sparse step, a library's one loop nest would store
    every entry; without example operands (which build it as its steps: tests/test_aot_plans.py)
    refused, naming what to do (docs/aot.md, Nested reductions)."""
    with pytest.raises(sc.SparseccError, match="nested reduction.*example operands.*derivative of each term"):
        sc.aot.build("nh", {"H": sc.aot.Derivative(sc.hessian(LSQ, wrt="x"), formats={"A": "csr"})},
                     "/nonexistent/never")
