"""The benchmark suite (sparsecc.bench): generators, the result check, the report files, the
FAILED path.  No timing is asserted anywhere: the bench is a benchmark, not a test."""

import argparse
import json

import numpy as np
import pytest
import scipy.sparse as sp

from sparsecc import bench
from sparsecc.bench.baselines import _torch_csr
from sparsecc.bench.cases import _products
from sparsecc.bench.generators import _int32
from sparsecc.__main__ import main as cli


def _args(tmp_path, **kw):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["--small", "--no-real", "--repeat", "3",
                         "--json", str(tmp_path / "r.json"), "--png", str(tmp_path / "r.png"),
                         "--markdown", str(tmp_path / "r.md")])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


# --------------------------------------------------------------------------- the check

def test_check_result_dense():
    rng = np.random.default_rng(0)
    want = rng.random((7, 3))
    assert bench.check_result(want.copy(), want)[0]
    assert bench.check_result(want + 1e-13, want)[0]
    bad = want.copy()
    bad[3, 1] += 1e-3
    ok, detail = bench.check_result(bad, want)
    assert not ok and "above tolerance" in detail
    nan = want.copy()
    nan[0, 0] = np.nan
    assert not bench.check_result(nan, want)[0]
    assert not bench.check_result(want[:6], want)[0]                 # shape
    assert bench.check_result(np.zeros((0, 3)), np.zeros((0, 3)))[0]  # empty


def test_check_result_sparse_and_mixed():
    rng = np.random.default_rng(1)
    A = sp.random_array((30, 20), density=0.1, format="csr", random_state=rng)
    assert bench.check_result(A.copy(), A)[0]
    assert bench.check_result(A.toarray(), A)[0]
    withzero = sp.csr_array(A, copy=True)
    withzero.data[0] = 0.0                 # a stored zero where the reference has a value
    assert not bench.check_result(withzero, A)[0]
    # a stored zero where the reference has no entry is the same value
    B = sp.csr_array((np.array([1.0, 2.0]), np.array([0, 1], np.int32), np.array([0, 1, 2], np.int32)), shape=(2, 2))
    Bz = sp.csr_array((np.array([1.0, 0.0, 2.0]), np.array([0, 1, 1], np.int32), np.array([0, 2, 3], np.int32)),
                      shape=(2, 2))
    assert bench.check_result(Bz, B)[0] and bench.check_result(B, Bz)[0]
    T = sp.coo_array((np.ones(2), ([0, 1], [1, 0], [0, 1])), shape=(2, 2, 2))
    assert bench.check_result(T, T.todense())[0]
    assert not bench.check_result(T, 2 * T.todense())[0]


def test_check_result_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    A = sp.random_array((10, 8), density=0.3, format="csr", random_state=rng)
    x = rng.random(8)
    assert bench.check_result(torch.from_numpy(A @ x), A @ x)[0]
    tA = _torch_csr(_int32(A))
    assert bench.check_result(tA, A)[0]
    assert not bench.check_result(tA, 2 * A)[0]


# --------------------------------------------------------------------------- generators and the table

def test_generators():
    rng = np.random.default_rng(3)
    A = bench.uniform_rows(100, 80, 5, rng)
    assert A.shape == (100, 80) and A.indices.dtype == np.int32 and A.has_canonical_format
    assert np.all(np.diff(A.indptr) <= 5) and A.nnz > 400
    P = bench.poisson2d(6)
    assert P.shape == (36, 36) and P.nnz == 5 * 36 - 4 * 6
    assert np.allclose(P.toarray(), P.toarray().T) and np.allclose(P.sum(axis=1)[7], 0)
    Q = bench.poisson3d(4)
    assert Q.shape == (64, 64) and Q.nnz == 7 * 64 - 6 * 16
    R = bench.rmat(10, 8, rng)
    deg = np.diff(R.indptr)
    assert R.shape == (1024, 1024) and 0 < R.nnz <= 8 * 1024 and deg.max() > 4 * deg.mean()  # skewed
    T = bench.coo3(10, 50, rng)
    assert T.shape == (10, 10, 10) and T.nnz == 50 and T.coords[0].dtype == np.int32 and T.has_canonical_format
    assert bench.coo3(10, 50, rng, index32=False).coords[0].dtype == np.int64
    flat = np.ravel_multi_index(T.coords, T.shape)
    assert np.all(np.diff(flat) > 0)                                  # canonical, distinct


def test_real_matrices_come_from_installed_packages():
    found = bench.real_matrices()
    for src, A in found.values():
        assert sp.issparse(A) and A.format == "csr" and A.nnz > 0 and src
    pytest.importorskip("networkx")
    assert found["karate"][1].shape == (34, 34)


def test_table_has_the_issue_targets():
    by_id = {c.id: c for c in bench.cases(small=True)}
    want = {"spmv:uniform": 1.0, "spmm32:uniform": 0.5, "sddmm32:uniform": 0.5, "spgemm:uniform": 1.2,
            "mttkrp:uniform": 0.5, "spmv:tiny": 5.0}
    assert {i: by_id[i].target for i in want} == want
    assert by_id["spmv:uniform"].target_threads == "1"
    assert by_id["spmv:uniform"].thread_target == by_id["spmm32:uniform"].thread_target == 1.6
    for k in ("spmm8", "spmm128", "sddmm128", "add", "mul", "ttv"):
        assert f"{k}:uniform" in by_id
    c = by_id["spmv:uniform"]                      # the bandwidth model of field.md
    A = bench.uniform_rows(100, 100, 10, np.random.default_rng(0))
    x = np.ones(100)
    assert c.bytes((A, x), None) == A.nnz * 12 + 101 * 4 + 100 * 16
    assert c.flops((A, x), None) == 2 * A.nnz
    assert _products(A, A) == int(np.diff(A.indptr)[A.indices].sum())     # Gustavson's multiplies


def test_select():
    cs = bench.cases(small=True)
    assert {c.kernel for c in bench.select(cs, "spmv,spgemm:rmat")} == {"spmv", "spgemm"}
    assert [c.id for c in bench.select(cs, "spgemm:rmat")] == ["spgemm:rmat"]
    with pytest.raises(SystemExit, match="unknown kernel"):
        bench.select(cs, "nope")


# --------------------------------------------------------------------------- a real run

def test_small_run_writes_json_and_png(tmp_path, capsys):
    args = _args(tmp_path, kernels="spmv:uniform,sddmm32,spmv:tiny")
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "spmv" in out and "sddmm32" in out and "FAILED" not in out
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["schema"] == bench.SCHEMA
    assert {"machine", "config", "bandwidth", "worker_start_s", "real_matrices", "results", "summary"} <= set(r)
    assert r["bandwidth"]["read_1t_gbs"] > 0 and r["config"]["small"] is True
    assert [x["id"] for x in r["results"]] == ["spmv:uniform", "sddmm32:uniform", "spmv:tiny"]
    for x in r["results"]:
        assert x["ok"] and x["error"] is None and x["check"].startswith("vs ")
        for key in ("sparsecc_ms", "sparsecc_1t_ms", "compile_s", "cold_compile", "gflops", "gbs", "bw_fraction",
                    "flops", "bytes", "shape", "nnz", "baselines", "threads"):
            assert key in x, key
        ref = next(iter(x["baselines"]))
        assert x["baselines"][ref]["ms"] > 0 and x["baselines"][ref]["ratio"] > 0
    first = r["results"][0]
    assert "scipy" in first["baselines"] and first["target"]["ratio"] == 1.0
    assert isinstance(first["target"]["met"], bool)
    assert r["results"][1]["baselines"].keys() >= {"numpy"}
    assert r["results"][2]["cold_compile"] is False        # same kernel as the first row
    md = (tmp_path / "r.md").read_text().splitlines()
    assert md[0].startswith("| kernel | input |") and len(md) == 2 + 3
    assert md[2].startswith("| spmv | uniform | 20000x20000 / ") and "<= 1" not in md[2]    # targets: --targets
    png = (tmp_path / "r.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_wrong_kernel_is_reported_failed(tmp_path, capsys):
    # a real sparsecc kernel computing A^T x, checked against scipy's A @ x: must fail
    wrong = bench.Case("wrong", "transposed", "ji,j->i",
                       lambda rng: (bench.uniform_rows(50, 50, 5, rng), rng.random(50)),
                       {"scipy": lambda A, x: (lambda: A @ x)},
                       flops=lambda ops, ref: 1, bytes=lambda ops, ref: 1, formats=("csr", "dense"))
    args = _args(tmp_path, kernels="spmv:tiny")
    assert bench.run(args, extra_cases=[wrong]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "wrong:transposed" in out
    r = json.loads((tmp_path / "r.json").read_text())
    row = r["results"][-1]
    assert row["ok"] is False and "above tolerance" in row["check"] and "sparsecc_ms" not in row
    assert r["summary"]["failed"] == ["wrong:transposed"]
    assert "| wrong | transposed | 50x50 / " in (tmp_path / "r.md").read_text()


def test_run_case_with_a_wrong_result_directly():
    case = next(c for c in bench.cases(small=True) if c.id == "spmv:tiny")
    row = bench.run_case(case, threads=1, repeat=3, budget=0.01, stream={},
                         kernel=lambda A, x: A @ x + 1.0)
    assert row["ok"] is False and "sparsecc_ms" not in row
    row = bench.run_case(case, threads=1, repeat=3, budget=0.01, stream={}, kernel=lambda A, x: 1 / 0)
    assert row["ok"] is False and "ZeroDivisionError" in row["error"]

    def crash(A, x):
        raise RuntimeError("first line\nsecond line | with a bar")
    row = bench.run_case(case, threads=1, repeat=3, budget=0.01, stream={}, kernel=crash)
    lines = bench.table([row]).splitlines()
    assert len(lines) == 3 and "FAILED" in lines[-1] and "first line second line" in lines[-1]
    assert "\n" in row["error"]                                  # the JSON keeps the whole message
    assert bench.markdown([row]).count("\n") == 2 and "\\|" in bench.markdown([row])


def test_cli_lists_the_suite(capsys):
    assert cli(["bench", "--list", "--no-real"]) == 0
    out = capsys.readouterr().out
    assert "spmv:uniform" in out and "mttkrp:uniform" in out and "target" not in out
    assert cli(["bench", "--list", "--no-real", "--targets"]) == 0
    assert "target <= 0.5" in capsys.readouterr().out


# --------------------------------------------------------------------------- peers, user-built inputs, graphblas

def test_user_built_rows_next_to_the_32_bit_ones():
    by_id = {c.id: c for c in bench.cases(small=True)}
    rng = np.random.default_rng(4)
    for k in ("spmv", "spmm32", "mttkrp"):
        assert f"{k}:uniform" in by_id and f"{k}:uniform64" in by_id
        ops32 = by_id[f"{k}:uniform"].build(np.random.default_rng(5))
        ops64 = by_id[f"{k}:uniform64"].build(np.random.default_rng(5))
        A32, A64 = ops32[0], ops64[0]
        idx = list(A64.coords) if A64.format == "coo" else [A64.indptr, A64.indices]
        assert all(a.dtype == np.int64 for a in idx)            # as sp.*_array((data, (rows, cols))) gives
        assert (A64 != A32).nnz == 0                              # the same matrix
        if A64.format == "coo":
            assert not A64.has_canonical_format                  # SciPy's flag for COO built from coordinates
    assert rng is not None


def test_min_plus_row_reference_is_independent():
    case = next(c for c in bench.cases(small=True) if c.kernel == "minplusmv")
    assert case.semiring == "min_plus"
    A = sp.csr_array(np.array([[1.0, 0, 4.0], [0, 0, 0], [2.0, 5.0, 0]]))
    x = np.array([10.0, 1.0, 3.0])
    got = case.baselines["numpy"](A, x)()
    np.testing.assert_array_equal(got, [7.0, np.inf, 6.0])     # written out: min over stored j of A[i,j] + x[j]


def test_best_peer_is_the_fastest_agreeing_peer():
    from sparsecc.bench.runner import best_peer
    row = {"sparsecc_ms": 2.0, "baselines": {
        "numpy": {"ms": 0.5, "ratio": 4.0, "agrees": True},           # not a peer
        "scipy": {"ms": 4.0, "ratio": 0.5, "agrees": True},
        "torch": {"ms": 1.0, "ratio": 2.0, "agrees": False},          # disagrees: never the best
        "graphblas": {"ms": 3.0, "ratio": 2 / 3, "agrees": True}}}
    assert best_peer(row) == {"name": "graphblas", "ms": 3.0, "ratio": 2 / 3}
    assert best_peer({"sparsecc_ms": 1.0, "baselines": {"numpy": {"ms": 1.0, "ratio": 1.0, "agrees": True}}}) is None


def test_small_run_shows_best_peer_and_user_built_rows(tmp_path, capsys):
    args = _args(tmp_path, kernels="spmv:uniform,spmv:uniform64,minplusmv")
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "best peer" in out and "r.best" in out and "FAILED" not in out
    r = json.loads((tmp_path / "r.json").read_text())
    assert [x["id"] for x in r["results"]] == ["spmv:uniform", "spmv:uniform64", "minplusmv:midsize"]
    for x in r["results"]:
        peer = x["best_peer"]
        if x["kernel"] == "spmv":
            assert peer["name"] in x["baselines"] and peer["name"] in ("scipy", "torch", "graphblas")
            assert peer["ms"] == min(b["ms"] for n, b in x["baselines"].items() if n in ("scipy", "torch", "graphblas"))
    try:
        import graphblas  # noqa: F401
        have_gb = True
    except ImportError:
        have_gb = False
    assert ("graphblas" in r["results"][0]["baselines"]) == have_gb
    assert ("graphblas" in r["results"][2]["baselines"]) == have_gb
    md = (tmp_path / "r.md").read_text().splitlines()
    assert "best peer ms" in md[0] and len(md) == 2 + 3


def test_graphblas_absent_is_skipped_cleanly(tmp_path, capsys, monkeypatch):
    from sparsecc.bench import baselines
    monkeypatch.setattr(baselines, "_graphblas", lambda: None)
    args = _args(tmp_path, kernels="spmv:tiny,minplusmv")
    assert bench.run(args) == 0
    r = json.loads((tmp_path / "r.json").read_text())
    for x in r["results"]:
        assert x["ok"] and "graphblas" not in x["baselines"]
    assert r["results"][0]["best_peer"]["name"] in ("scipy", "torch")
    assert r["results"][1]["best_peer"] is None              # min_plus: no peer but graphblas


def test_forward_backward_rows_are_part_of_a_whole_run(tmp_path, capsys, monkeypatch):
    """The fwd+bwd rows (bench/torch_rows.py, timed for real in test_torch_bench_rows) run
    with the whole suite, print their table and land in the JSON; --kernels or --no-fwd-bwd
    leave them out."""
    from sparsecc.bench import cli, torch_rows
    seen = []
    fake = [{"kernel": "spmm fwd+bwd", "n": 10, "nnz": 3, "k": 2, "threads": 1, "sparsecc_s": 1e-3,
             "torch_sparse_s": 2e-3, "ratio": 2.0}]
    monkeypatch.setattr(torch_rows, "rows", lambda **kw: seen.append(kw) or fake)
    args = _args(tmp_path, kernels=None)
    assert cli._fwd_bwd(args, None) == fake and seen and seen[0]["n"] == 1000
    assert "| spmm fwd+bwd | 10 | 3 |" in capsys.readouterr().out
    assert cli._fwd_bwd(_args(tmp_path, kernels="spmv"), None) == []
    assert cli._fwd_bwd(_args(tmp_path, kernels=None, no_fwd_bwd=True), None) == []
    args = _args(tmp_path, kernels="spmv:tiny")
    assert bench.run(args) == 0
    assert json.loads((tmp_path / "r.json").read_text())["fwd_bwd"] == []


# --------------------------------------------------------------------------- the planner's rows (--plans)

def test_plans_rows_list_the_issue_rows(capsys):
    from sparsecc.bench.plan_rows import ONE_NEST, plan_cases
    rows = plan_cases(small=True)
    assert [c.kernel for c in rows] == ["chainmv", "gnn", "chain3", "chain3", "gtdg", "masked", "triangles", "tucker"]
    for c in rows:
        names = list(c.baselines)
        assert names[0].split(" ")[0] in ("scipy", "numpy") and ONE_NEST in names and c.target is not None
    assert ONE_NEST not in plan_cases(small=True, one_nest=False)[0].baselines


def test_plans_small_run_at_one_and_two_threads(tmp_path, capsys):
    args = _args(tmp_path, kernels="chainmv,masked,triangles", plans=True, plans_scale=1.0, threads=2)
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "planned expressions, 1 thread(s)" in out and "planned expressions, 2 thread(s)" in out
    assert "FAILED" not in out and "overhead (ij,jk,k->i" in out
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["config"]["plans"] is True
    got = [(x["id"], x["threads"]) for x in r["results"]]
    ids = ["chainmv:uniform2000", "masked:uniform200", "triangles:rmat9"]
    assert got == [(i, 1) for i in ids] + [(i, 2) for i in ids]
    for x in r["results"]:
        assert x["ok"], x
        assert x["baselines"]["optimize=False"]["agrees"] and x["plan_steps"] >= 1 and x["plan"].startswith("plan ")
        assert x["best_peer"] is not None
    assert r["results"][0]["plan_steps"] == 2            # B @ x first, then A @ t
    assert r["results"][0]["best_peer"]["name"] in ("scipy A@(B@x)", "torch")
    ov = r["plan_overhead"]
    assert ov["steps"] == 1 and ov["path_us"] > 0 and ov["steps_us"] > 0 and ov["plan6_first_ms"] > 0
    # row 9's targets count in the summary (a missed one listed, not hidden behind the table's)
    named = {f"overhead:{k}" for k in ov["targets"]}
    assert named and named <= set(r["summary"]["targets_met"]) | set(r["summary"]["targets_missed"])


def test_plans_triangle_row_counts_triangles_as_networkx():
    nx = pytest.importorskip("networkx")
    import sparsecc as sc
    from sparsecc.bench.generators import rmat
    from sparsecc.bench.plan_rows import tri_lower
    L = tri_lower(rmat(7, 8, np.random.default_rng(3)))
    G = nx.from_scipy_sparse_array(L + L.T)
    want = sum(nx.triangles(G).values()) // 3
    assert want > 0
    assert sc.einsum("ij,jk,ik->", L, L, L) == want
    assert float((L @ L).multiply(L).sum()) == want            # the row's SciPy reference


# --------------------------------------------------------------------------- the lazy rows (--lazy)

@pytest.mark.slow
def test_lazy_small_run_at_one_and_two_threads(tmp_path, capsys):
    args = _args(tmp_path, lazy=True, lazy_scale=1.0, threads=2)
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "lazy programs" in out and "FAILED" not in out and "overhead (cached @sc.fused" in out
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["config"]["lazy"] is True
    ids = [x["id"].split(":")[0] for x in r["results"]]
    assert ids == ["pagerank20", "cg50", "gcn2", "exp(2A+1)*B", "sum((A-B)**2,1)"] * 2
    assert [x["threads"] for x in r["results"]] == [1] * 5 + [2] * 5
    for x in r["results"]:
        assert x["ok"], x
        assert all(b["agrees"] for b in x["baselines"].values())
    assert r["fused_overhead"]["kernels_us"] > 0 and r["fused_overhead"]["statements"] == 2


# --------------------------------------------------------------------------- row 8: random einsums

def test_random_einsums_are_seeded_connected_and_bounded():
    from sparsecc.bench.plan_random import random_expression
    a = [random_expression(np.random.default_rng(5)) for _ in range(2)]
    assert a[0] == a[1]                                         # seeded
    rng = np.random.default_rng(0)
    for _ in range(100):
        c = random_expression(rng)
        assert 3 <= len(c["terms"]) <= 5 and len(c["kinds"]) == len(c["terms"])
        seen = set(c["terms"][0])
        for t in c["terms"][1:]:                                # connected: each shares an index before it
            assert seen & set(t)
            seen |= set(t)
        for t, kind in zip(c["terms"], c["kinds"]):
            big = [i in c["big"] for i in t]
            assert kind in ("csr", "coo", "dense") and (kind != "dense" or not all(big) or len(t) == 1)
            assert all(1000 <= c["sizes"][i] <= 50_000 for i in t if i in c["big"])
        assert sum(i in c["big"] for i in c["out"]) <= 2


@pytest.mark.slow
def test_random_einsums_small_run(tmp_path, capsys):
    args = _args(tmp_path, kernels="random", plans=True, plans_random=2)
    assert bench.run(args) == 0
    r = json.loads((tmp_path / "r.json").read_text())["plan_random"]
    assert len(r["cases"]) == 2 and not r["summary"]["failed"], r["summary"]
    assert r["summary"]["gmean_vs_one_nest"] is not None
    assert "random einsums (row 8)" in capsys.readouterr().out
