"""Planned kernels in ahead-of-time libraries (docs/aot.md "Planned kernels"): the plan fixed
at build time from example operands, its C function (the one nest's signature, the steps run
in order) called from a C program compiled with gcc -Werror against the generated header,
and the loaded Python callable, each against the JIT and numpy.einsum on dense copies."""

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

HESS = "H[k,l] = sum[i](A[i,k] * 2 * A__1[i,l]) + d[k] * I[k,l]"
LSQ = "f[] = sum[i]((sum[j](A[i,j] * x[j]) - b[i]) ** 2) + sum[j](c[] * x[j] ** 4)"     # 2 AᵀA + 12 c diag(x²)


def _c_array(name, a, ctype):
    a = np.ravel(a)
    vals = ", ".join(repr(float(v)) if ctype == "double" else str(int(v)) for v in a) or "0"
    return f"static const {ctype} {name}[] = {{{vals}}};"


def _csr_data(name, M):
    return "\n".join([_c_array(f"{name}_ptr", M.indptr, "int32_t"), _c_array(f"{name}_ind", M.indices, "int32_t"),
                      _c_array(f"{name}_val", M.data, "double")])


def _csr_args(name, M):
    return f"{name}_ptr, {len(M.indptr)}, {name}_ind, {M.nnz}, {name}_val, {M.nnz}"


def _operands(seed=0):
    rng = np.random.default_rng(seed)
    A = sp.random_array((300, 200), density=0.02, format="csr", rng=rng)
    B = sp.random_array((200, 250), density=0.02, format="csr", rng=rng)
    x = rng.standard_normal(250)
    X, W = rng.standard_normal((200, 16)), rng.standard_normal((16, 4))
    H = sp.csr_array(sp.random_array((60, 20), density=0.1, format="csr", rng=rng))
    d = rng.standard_normal(20)
    C = sp.random_array((20, 250), density=0.05, format="csr", rng=rng)
    return dict(A=A, B=B, x=x, X=X, W=W, H=H, d=d, I=sp.eye_array(20, format="csr"), C=C)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    o = _operands()
    A, B, x, X, W, H, d, I = (o[k] for k in "A B x X W H d I".split())
    k_chain = sc.compile("ij,jk,k->i", "csr", "csr", "dense")
    # operands named like locals the planned wrapper once declared (rc, t0: gcc refused the C)
    # operands named like the planner's intermediates (t0) and the wrapper's old locals (rc)
    k_gnn = sc.compile("Y[i,l] = sum[j,k](A[i,j] * rc[j,k] * t0[k,l])", A="csr", rc="dense", t0="dense")
    k_hess = sc.compile(HESS, A="csr", A__1="csr", d="dense", I="csr")
    k_sp = sc.compile("ij,jk,lk->il", "csr", "csr", "csr", out_format="csr")     # sparse intermediates
    out = str(tmp_path_factory.mktemp("aotplans"))
    sc.aot.build("pl", {"chain": sc.aot.Planned(k_chain, (A, B, x)),
                        "gnn": sc.aot.Planned(k_gnn, (A, X, W)),
                        "hess": sc.aot.Planned(k_hess, dict(A=H, A__1=H, d=d, I=I)),
                        "sp": sc.aot.Planned(k_sp, (A, B, o["C"])),
                        # a nested Hessian with example operands: built as its split steps
                        "lsq": sc.aot.Derivative(sc.hessian(LSQ, wrt="x"), {"A": H}, layout="coo",
                                                 triangle="lower")}, out)
    Ct = o["C"].tocsc()         # the one nest (and so the planned function) reads l,k column-wise
    E1, E2 = sp.csr_array((300, 200)), sp.csr_array((200, 250))      # no stored entries
    EH = sp.csr_array((60, 20))
    prog = f"""#include <stdio.h>
#include <stdlib.h>
#include "pl.h"
{_csr_data("A", A)}
{_csr_data("B", B)}
{_csr_data("E1", E1)}
{_csr_data("E2", E2)}
{_csr_data("H", H)}
{_csr_data("EH", EH)}
{_csr_data("I", I)}
{_csr_data("C", Ct)}
{_c_array("x", x, "double")}
{_c_array("X", X, "double")}
{_c_array("W", W, "double")}
{_c_array("d", d, "double")}
static void show(const char *what, const double *v, int64_t n) {{
    printf("%s", what); for (int64_t t = 0; t < n; t++) printf(" %.17g", v[t]); printf("\\n"); }}
static void showi(const char *what, const int32_t *v, int64_t n) {{
    printf("%s", what); for (int64_t t = 0; t < n; t++) printf(" %d", v[t]); printf("\\n"); }}
static void sparse(const char *what, int rc, pl_sparse_result *r) {{
    char name[64];
    printf("%s_rc %d\\n", what, rc);
    snprintf(name, sizeof name, "%s_ptr", what); showi(name, r->buffers[0], r->lengths[0]);
    snprintf(name, sizeof name, "%s_ind", what); showi(name, r->buffers[1], r->lengths[1]);
    snprintf(name, sizeof name, "%s_val", what); show(name, r->buffers[2], r->lengths[2]);
    pl_free_result(r);
}}
int main(void) {{
    double y[300], g[300 * 4];
    int rc = pl_chain(300, 200, 250, {_csr_args("A", A)}, {_csr_args("B", B)}, x, y);
    printf("chain_rc %d\\n", rc); show("chain", y, 300);
    rc = pl_chain(300, 200, 250, {_csr_args("E1", E1)}, {_csr_args("E2", E2)}, x, y);
    printf("chain_empty_rc %d\\n", rc); show("chain_empty", y, 300);
    rc = pl_chain(0, 0, 0, {_csr_args("E1", sp.csr_array((0, 0)))}, {_csr_args("E2", sp.csr_array((0, 0)))}, x, y);
    printf("chain_zero_rc %d\\n", rc);
    rc = pl_gnn(300, 200, 16, 4, {_csr_args("A", A)}, X, W, g);
    printf("gnn_rc %d\\n", rc); show("gnn", g, 300 * 4);
    pl_sparse_result r;
    sparse("hess", pl_hess(60, 20, 20, {_csr_args("H", H)}, {_csr_args("H", H)}, d, {_csr_args("I", I)}, &r), &r);
    sparse("sp", pl_sp(300, 200, 250, 20, {_csr_args("A", A)}, {_csr_args("B", B)}, {_csr_args("C", Ct)}, &r), &r);
    double c = 0.7, *v = malloc(PL_LSQ_NNZ * sizeof *v);
    rc = pl_lsq_values(60, 20, 20, {_csr_args("H", H)}, &c, d, v, PL_LSQ_NNZ);
    printf("lsq_rc %d\\n", rc); show("lsq_val", v, PL_LSQ_NNZ); free(v);
    showi("lsq_rows", pl_lsq_row_ind, PL_LSQ_NNZ); showi("lsq_cols", pl_lsq_col_ind, PL_LSQ_NNZ);
    sparse("hess_empty", pl_hess(60, 20, 20, {_csr_args("EH", EH)}, {_csr_args("EH", EH)}, d, {_csr_args("I", I)},
         &r), &r);
    return 0;
}}
"""
    src = os.path.join(out, "main.c")
    with open(src, "w") as f:
        f.write(prog)
    exe = os.path.join(out, "main")
    subprocess.run([CC, "-std=c99", "-Wall", "-Werror", src, "-I", out, "-L", out, "-lpl", "-Wl,-rpath," + out,
                    "-o", exe], check=True, capture_output=True, text=True)
    run = subprocess.run([exe], check=True, capture_output=True, text=True)
    lines = dict(line.split(" ", 1) if " " in line else (line, "") for line in run.stdout.splitlines())
    got = {k: np.array(v.split(), dtype=float) for k, v in lines.items()}
    return dict(got=got, out=out, ops=o, chain=k_chain, gnn=k_gnn, hess=k_hess, sp=k_sp, lib=sc.aot.load(out))


def _hess_dense(H, d):
    return 2 * np.einsum("ik,il->kl", H.toarray(), H.toarray()) + np.diag(d)


def test_manifest_records_the_plan(built):
    with open(os.path.join(built["out"], "pl.json")) as f:
        kernels = json.load(f)["kernels"]
    for name in ("chain", "gnn", "hess"):
        plan = kernels[name]["plan"]
        assert len(plan["steps"]) == 2 and plan["from"] == "example operands"
        assert [s["kernel"] for s in plan["steps"]] == [f"{name}__1", f"{name}__2"]
        assert all(kernels[s["kernel"]]["step_of"] == name for s in plan["steps"])
    assert [s["format"] for s in kernels["gnn"]["plan"]["steps"]] == ["dense", "dense"]
    assert [s["format"] for s in kernels["hess"]["plan"]["steps"]] == ["csr", "csr"]
    # (no copy of C first: the step reading it transposed has a sparse result, whose operands
    # the runtime stores in its loops' order - plan/order.runtime_reads)
    assert [s["format"] for s in kernels["sp"]["plan"]["steps"]] == ["csr", "csr"]
    lib = built["lib"]
    assert set(lib.kernels) == {"chain", "gnn", "hess", "sp", "lsq"}
    assert kernels["lsq"]["derivative"]["pattern"] == "fixed" and len(kernels["lsq"]["plan"]["steps"]) == 2       # steps are not public kernels


def test_c_chain_and_dense_intermediate(built):
    g, o = built["got"], built["ops"]
    A, B, x = o["A"], o["B"], o["x"]
    want = np.einsum("ij,jk,k->i", A.toarray(), B.toarray(), x)
    assert g["chain_rc"][0] == 0
    np.testing.assert_allclose(g["chain"], want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g["chain"], built["chain"](A, B, x), rtol=1e-12, atol=1e-13)
    assert g["gnn_rc"][0] == 0
    want = np.einsum("ij,jk,kl->il", A.toarray(), o["X"], o["W"]).ravel()
    np.testing.assert_allclose(g["gnn"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g["gnn"], built["gnn"](A, o["X"], o["W"]).ravel(), rtol=1e-12, atol=1e-12)


def test_c_empty_operands(built):
    g = built["got"]
    assert g["chain_empty_rc"][0] == 0 and g["chain_zero_rc"][0] == 0
    np.testing.assert_array_equal(g["chain_empty"], np.zeros(300))
    assert g["hess_empty_rc"][0] == 0
    d = built["ops"]["d"]
    np.testing.assert_array_equal(g["hess_empty_ptr"], np.arange(21))
    np.testing.assert_array_equal(g["hess_empty_ind"], np.arange(20))
    np.testing.assert_array_equal(g["hess_empty_val"], d)


def test_c_nested_reduction(built):
    g, o = built["got"], built["ops"]
    H, d, I = o["H"], o["d"], o["I"]
    assert g["hess_rc"][0] == 0
    jit = built["hess"](A=H, A__1=H, d=d, I=I)
    np.testing.assert_array_equal(g["hess_ptr"], jit.indptr)       # A^T A's pattern and the diagonal
    np.testing.assert_array_equal(g["hess_ind"], jit.indices)
    np.testing.assert_allclose(g["hess_val"], jit.data, rtol=1e-13)
    C = sp.csr_array((g["hess_val"], g["hess_ind"].astype(np.int64), g["hess_ptr"].astype(np.int64)), shape=(20, 20))
    np.testing.assert_allclose(C.toarray(), _hess_dense(H, d), rtol=1e-12, atol=1e-13)
    assert C.nnz < 20 * 20                                           # not every entry (the one nest's)


def test_c_sparse_intermediates(built):
    g, o = built["got"], built["ops"]
    A, B, C = o["A"], o["B"], o["C"]
    assert g["sp_rc"][0] == 0
    got = sp.csr_array((g["sp_val"], g["sp_ind"].astype(np.int64), g["sp_ptr"].astype(np.int64)), shape=(300, 20))
    np.testing.assert_allclose(got.toarray(), np.einsum("ij,jk,lk->il", A.toarray(), B.toarray(), C.toarray()),
                               rtol=1e-12, atol=1e-13)
    jit = built["sp"](A, B, C)
    np.testing.assert_array_equal(g["sp_ptr"], jit.indptr)
    np.testing.assert_array_equal(g["sp_ind"], jit.indices)
    np.testing.assert_allclose(built["lib"].sp(A, B, C).toarray(), jit.toarray(), rtol=1e-12, atol=1e-13)


def test_c_nested_hessian_values(built):
    """The least-squares Hessian 2 AᵀA + 12 c diag(x²), a nested sum beside the identity
    term, built from example operands as its split steps: _values on the tables' own
    operands fills A^T A's pattern and the diagonal (its one nest stored every entry)."""
    g, o = built["got"], built["ops"]
    A, x, c = o["H"], o["d"], 0.7
    assert g["lsq_rc"][0] == 0
    Hs = sc.hessian(LSQ, wrt="x")
    rows, cols = Hs.pattern(layout="coo", triangle="lower", A=A)
    np.testing.assert_array_equal(g["lsq_rows"], rows)
    np.testing.assert_array_equal(g["lsq_cols"], cols)
    dense = 2 * A.toarray().T @ A.toarray() + np.diag(12 * c * x ** 2)
    np.testing.assert_allclose(g["lsq_val"], dense[rows, cols], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g["lsq_val"], Hs.values(layout="coo", triangle="lower", A=A, x=x, c=c,
                                                       b=np.zeros(60)), rtol=1e-13)
    assert len(rows) < 20 * 21 // 2


def test_loaded_callable_matches_jit(built):
    lib, o = built["lib"], built["ops"]
    A, B, x = o["A"], o["B"], o["x"]
    np.testing.assert_allclose(lib.chain(A, B, x), built["chain"](A, B, x), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(lib.gnn(A, o["X"], o["W"]), np.einsum("ij,jk,kl->il", A.toarray(), o["X"], o["W"]),
                               rtol=1e-12, atol=1e-12)
    H, d, I = o["H"], o["d"], o["I"]
    got = lib.hess(A=H, A__1=H, d=d, I=I)
    jit = built["hess"](A=H, A__1=H, d=d, I=I)
    assert isinstance(got, sp.csr_array) and got.nnz == jit.nnz
    np.testing.assert_allclose(got.toarray(), _hess_dense(H, d), rtol=1e-12, atol=1e-13)
    # other operands than the examples (another statistics class): the same fixed plan, right values
    o2 = _operands(seed=3)
    A2 = sp.random_array((40, 30), density=0.3, format="csr", rng=1)
    B2 = sp.random_array((30, 10), density=0.3, format="csr", rng=2)
    np.testing.assert_allclose(lib.chain(A2, B2, o2["x"][:10]),
                               np.einsum("ij,jk,k->i", A2.toarray(), B2.toarray(), o2["x"][:10]), rtol=1e-12)
    E1, E2 = sp.csr_array((300, 200)), sp.csr_array((200, 250))
    np.testing.assert_array_equal(lib.chain(E1, E2, x), np.zeros(300))
    EH = sp.csr_array((60, 20))
    got = lib.hess(A=EH, A__1=EH, d=d, I=I)
    np.testing.assert_array_equal(got.toarray(), np.diag(d))
    with pytest.raises(sc.SparseccError):
        lib.chain(A.astype(np.float32), B, x)
    assert lib.chain.ir("mlir", step=1).startswith("#") or "func.func" in lib.chain.ir("mlir", step=1)


def test_planned_refusals(tmp_path):
    k = sc.compile("ij,jk,k->i", "csr", "csr", "dense")
    with pytest.raises(sc.SparseccError, match="tuple"):
        sc.aot.Planned(k, 3)
    with pytest.raises(sc.SparseccError, match="kernel from sc.compile"):
        sc.aot.Planned("ij,jk,k->i", ())
    o = _operands()
    with pytest.raises(sc.SparseccError, match="names another kernel"):
        sc.aot.build("x", {"c": sc.aot.Planned(k, (o["A"], o["B"], o["x"])), "c__1": k}, str(tmp_path))
