"""sc.explore and sc.compile(..., autotune=True): candidates, ranking, checks, report, cache.

Small operands, few candidates, ``repeat`` small: the cost is the compiles (shared through
the session's kernel cache).  No timing assertions: only that times exist and are ranked.
"""

import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import _progress
from sparsecc.explore import (AutotunedKernel, ExploreReport, Row, _block_candidates, _default_candidates,
                              compare, decode_format, encode_format, load_choice, store_choice)

from sparsecc.explore.reference import Majority, sampled_reference
from sparsecc.explore.runner import _bind as runner_bind
from sparsecc.expr import index_sizes

from conftest import assert_matches, dense_of, random_dense, random_sparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
mod = sys.modules["sparsecc.explore.runner"]               # candidates compile through runner._compile
compare_mod = sys.modules["sparsecc.explore.compare"]


def spmv_operands(rng, shape=(12, 10), density=0.3, dtype="float64"):
    A = random_sparse(shape, density, dtype, rng, fmt="csr")
    x = random_dense((shape[1],), dtype, rng)
    return A, x


def ranked_ok(report):
    return [r for r in report.rows if r.ok]


# --------------------------------------------------------------------------- ranking and best
def test_einsum_ranking_and_best(rng):
    A, x = spmv_operands(rng)
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "csc", "coo"], None], repeat=2, progress=False)
    assert isinstance(rep, ExploreReport)
    assert len(rep.rows) == 3 and all(r.ok for r in rep.rows), str(rep)
    times = [r.median_s for r in rep.rows]
    assert times == sorted(times) and all(t > 0 for t in times)
    assert all(r.compile_s is not None and r.compile_s >= 0 and r.runs >= 3 for r in rep.rows)
    assert rep.best_formats == rep.rows[0].formats
    assert rep.best_formats[1] == "dense"            # dense operands stay dense
    assert rep.best_options == sc.Options() and rep.best_threads is None
    assert_matches(rep.best(A, x), np.einsum("ij,j->i", A.toarray(), x))
    assert rep.best is rep.best                       # compiled once
    # the first candidate is the operands' own formats: the baseline of the speedup column
    assert min(rep.rows, key=lambda r: r.index).formats == ("csr", "dense")
    text = str(rep)
    assert "rank" in text and "speedup" in text and "csc, dense" in text
    assert "<table>" in rep._repr_html_()


@pytest.mark.parametrize("dtype", ["float32", "int64", "complex128"])
def test_dtypes(rng, dtype):
    A, x = spmv_operands(rng, dtype=dtype)
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "dcsr"], None], repeat=1, progress=False)
    assert all(r.ok for r in rep.rows), str(rep)
    assert_matches(rep.best(A, x), np.einsum("ij,j->i", A.toarray(), x))


def test_notation_named_options_and_threads(rng):
    A, x = spmv_operands(rng)
    before = sc.get_num_threads()
    rep = sc.explore("y[i] = A[i,j] * x[j]", A=A, x=x, formats={"A": ["csr", "csc"]},
                     index_widths=[None, 64], threads=[1, 2], repeat=1, progress=False)
    assert {r.options.index_width for r in rep.rows} == {None, 64}
    assert all(r.ok for r in rep.rows), str(rep)
    assert "index_width=64" in str(rep)
    k = rep.best
    assert_matches(k(A=A, x=x), A.toarray() @ x)
    assert sc.get_num_threads() == before              # restored
    assert len(rep.rows) == 8 and {r.threads for r in rep.rows} == {1, 2}
    assert rep.best_threads in (1, 2)


def test_sparse_result_candidates(rng):
    A = random_sparse((8, 7), 0.3, "float64", rng, fmt="csr")
    B = random_sparse((7, 9), 0.3, "float64", rng, fmt="csr")
    rep = sc.explore("ik,kj->ij", A, B, formats=[["csr", "dcsr"], ["csr", "csc"]], repeat=1, progress=False)
    assert len(rep.rows) == 4 and all(r.ok for r in rep.rows), str(rep)
    got = rep.best(A, B)
    assert sp.issparse(got)
    assert_matches(got, A.toarray() @ B.toarray())
    # a contraction with a sparse result stores its operands row-wise: the report says so
    csc = next(r for r in rep.rows if r.formats == ("csr", "csc"))
    assert csc.ran_as == ("csr", "csr") and "ran as csr, csr" in csc.status


def test_kernel_last_formats(rng):
    # what explore's "ran as" reads: the formats the last call stored its operands in
    A, x = spmv_operands(rng)
    from sparsecc.parse import parse_einsum
    from sparsecc.runtime.kernel import Kernel
    k = Kernel(parse_einsum("ij,j->i", 2), {"#0": "csc", "#1": "dense"})   # not sc.compile's memoized one
    assert k.last_formats() is None
    k(A, x)
    f = k.last_formats()
    assert f[0].order == (1, 0) and f[0].pos_width == 32 and f[1].is_dense


@pytest.mark.parametrize("case", ["empty", "single"])
def test_edge_operands(rng, case):
    A = sp.csr_array((6, 4)) if case == "empty" else sp.csr_array(([2.5], ([3], [1])), shape=(6, 4))
    x = rng.random(4)
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "coo", "dcsc"], None], repeat=1, progress=False)
    assert all(r.ok for r in rep.rows), str(rep)
    assert_matches(rep.best(A, x), A.toarray() @ x)


def test_rank3_csf_orders_and_roundtrip(rng, tmp_path):
    T = random_sparse((5, 6, 7), 0.2, "float64", rng)
    B, C = rng.random((6, 3)), rng.random((7, 3))
    csf = sc.Format(("compressed",) * 3, (2, 0, 1), name="csf(2,0,1)")
    rep = sc.explore("ijk,jr,kr->ir", T, B, C, formats={0: ["coo", csf]}, repeat=1, progress=False)
    assert all(r.ok for r in rep.rows), str(rep)
    assert_matches(rep.best(T, B, C), np.einsum("ijk,jr,kr->ir", dense_of(T), B, C))
    # JSON round trip: rows, formats (sc.Format objects included), text
    back = ExploreReport.from_json(rep.to_json(str(tmp_path / "r.json")))
    assert str(back) == str(rep)
    assert [r.formats for r in back.rows] == [r.formats for r in rep.rows]
    assert any(isinstance(f, sc.Format) and f.order == (2, 0, 1) for r in back.rows for f in r.formats)
    assert json.loads((tmp_path / "r.json").read_text())["expression"] == "ijk,jr,kr->ir"
    assert_matches(back.best(T, B, C), np.einsum("ijk,jr,kr->ir", dense_of(T), B, C))
    # plot: a PNG file
    path = rep.plot(str(tmp_path / "explore.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_from_json_rejects_garbage():
    for text in ["{", "[]", '{"sparsecc_explore": 1}', '{"a": 1}']:
        with pytest.raises(sc.SparseccError):
            ExploreReport.from_json(text)


def test_format_encoding_roundtrip():
    for spec in ["csr", None, sc.Format.bsr((2, 3)), sc.Format.coo(3, 1), sc.Format.csf(3, (1, 2, 0)),
                 sc.Format(("dense", "compressed"), (1, 0), pos_width=64, crd_width=32)]:
        assert decode_format(json.loads(json.dumps(encode_format(spec)))) == spec


# --------------------------------------------------------------------------- default candidates
def test_default_candidates():
    rng = np.random.default_rng(0)
    A = random_sparse((8, 12), 0.2, "float64", rng, fmt="csc")
    c = _default_candidates(A, 2, (8, 12), allow_blocks=True)
    assert c[0] == "csc"                                   # the operand's own first
    assert {"csr", "csc", "coo", "dcsr", "dcsc"} <= set(c)
    assert any(s.startswith("bsr") for s in c)
    assert not any(s.startswith("bsr") for s in _default_candidates(A, 2, (8, 12), allow_blocks=False))
    odd = random_sparse((7, 9), 0.2, "float64", rng, fmt="csr")
    assert not any(s.startswith("bsr") for s in _default_candidates(odd, 2, (7, 9), allow_blocks=True))
    assert _default_candidates(np.ones((3, 4)), 2, (3, 4), allow_blocks=True) == ["dense"]
    T = random_sparse((3, 4, 5), 0.3, "float64", rng)
    c3 = _default_candidates(T, 3, (3, 4, 5), allow_blocks=True)
    assert c3[0] == "coo" and len(c3) == 7
    assert {f.order for f in c3[1:]} == {(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)}
    c4 = _default_candidates(random_sparse((2, 3, 2, 3), 0.3, "float64", rng), 4, (2, 3, 2, 3), True)
    assert c4[0] == "coo" and len(c4) >= 4


def test_block_candidates_follow_block_structure():
    blocks = sp.random_array((4, 4), density=0.5, random_state=1, format="csr")
    A = sp.csr_array(sp.kron(blocks, np.ones((4, 4))))          # dense 4x4 blocks
    got = _block_candidates(A, A.shape)
    assert "bsr4x4" in got and "bsr2x2" in got
    scattered = sp.csr_array(([1.0, 2.0], ([0, 9], [3, 14])), shape=(16, 16))
    assert _block_candidates(scattered, (16, 16)) == ["bsr2x2"]  # no structure: one cheap candidate


def test_explored_bsr_block_sizes(rng):
    blocks = random_sparse((3, 4), 0.5, "float64", rng, fmt="csr")
    A = sp.csr_array(sp.kron(blocks, np.ones((2, 2))))
    x = rng.random(A.shape[1])
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "bsr2x2"], None], repeat=1, progress=False)
    assert all(r.ok for r in rep.rows), str(rep)
    for r in rep.rows:
        assert_matches(sc.compile("ij,j->i", *r.formats)(A, x), A.toarray() @ x)


# --------------------------------------------------------------------------- failures and checks
def test_failed_candidates_are_rows(rng):
    A, x = spmv_operands(rng, shape=(12, 10))
    # bsr3x3 does not divide 10 columns: the kernel refuses the operand - a row, not an exception
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "bsr3x3"], None], repeat=1, progress=False)
    bad = [r for r in rep.rows if not r.ok]
    assert len(bad) == 1 and bad[0].formats[0] == "bsr3x3"
    assert bad[0].error.startswith("failed: ShapeError")
    assert rep.rows[0].ok and rep.rows[-1] is bad[0]           # failed rows rank last
    assert "failed: ShapeError" in str(rep)


def test_compile_failure_is_a_row(rng, monkeypatch):
    A, x = spmv_operands(rng)
    real = mod._compile

    def compile_or_fail(expression, formats, options, out_format, *a):
        if formats[0] == "dcsc":
            raise sc.CompileError("MLIR said no (a test)")
        return real(expression, formats, options, out_format, *a)
    monkeypatch.setattr(mod, "_compile", compile_or_fail)
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "dcsc"], None], repeat=1, progress=False)
    row = next(r for r in rep.rows if r.formats[0] == "dcsc")
    assert not row.ok and row.error == "failed: CompileError: MLIR said no (a test)"
    assert rep.best_formats == ("csr", "dense")


def test_nothing_ran(rng):
    A, x = spmv_operands(rng, shape=(12, 10))
    rep = sc.explore("ij,j->i", A, x, formats=[["bsr3x3"], None], repeat=1, progress=False)
    assert not rep.rows[0].ok
    with pytest.raises(sc.SparseccError, match="no candidate"):
        _ = rep.best


def test_wrong_result_detected(rng, monkeypatch):
    A, x = spmv_operands(rng)
    real = mod._compile

    class Off:                                   # a kernel whose results are off by one
        def __init__(self, k):
            self.k = k

        def __call__(self, *args):
            return self.k(*args) + 1.0

    def compile_wrong(expression, formats, options, out_format, *a):
        k = real(expression, formats, options, out_format, *a)
        return Off(k) if formats[0] == "coo" else k
    monkeypatch.setattr(mod, "_compile", compile_wrong)
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "coo"], None], repeat=1, progress=False)
    row = next(r for r in rep.rows if r.formats[0] == "coo")
    assert not row.ok and row.error.startswith("wrong result") and row.median_s is None
    assert rep.best_formats[0] == "csr"


class Wrong:
    """A kernel whose results are off: dense ones by one, sparse ones doubled."""

    def __init__(self, k):
        self.k = k

    def __call__(self, *args, **kwargs):
        got = self.k(*args, **kwargs)
        return 2 * got if sp.issparse(got) else got + 1.0


def first_candidate_wrong(monkeypatch, first):
    """Candidates compile as usual, except format ``first`` of operand 0 (the first candidate)."""
    real = mod._compile

    def compile_(expression, formats, options, out_format, *a):
        k = real(expression, formats, options, out_format, *a)
        return Wrong(k) if formats[0] == first else k
    monkeypatch.setattr(mod, "_compile", compile_)


def test_wrong_first_candidate_against_sampled_reference(rng, monkeypatch):
    # the first candidate is not the reference: a wrong first kernel is marked wrong, the
    # others right (an independent reference: the statement evaluated at sampled entries)
    A, x = spmv_operands(rng, shape=(30, 20))
    first_candidate_wrong(monkeypatch, "csr")
    rep = sc.explore("ij,j->i", A, x, formats=[["csr", "csc", "coo"], None], repeat=1, progress=False)
    by = {r.formats[0]: r for r in rep.rows}
    assert not by["csr"].ok and by["csr"].error.startswith("wrong result"), str(rep)
    assert by["csc"].ok and by["coo"].ok, str(rep)
    assert rep.best_formats[0] in ("csc", "coo")
    assert_matches(rep.best(A, x), A.toarray() @ x)


def test_wrong_first_candidate_sparse_result(rng, monkeypatch):
    A = random_sparse((9, 8), 0.3, "float64", rng, fmt="csr")
    B = random_sparse((8, 7), 0.3, "float64", rng, fmt="csr")
    first_candidate_wrong(monkeypatch, "csr")
    rep = sc.explore("ik,kj->ij", A, B, formats=[["csr", "dcsr"], ["csr"]], repeat=1, progress=False)
    by = {r.formats[0]: r for r in rep.rows}
    assert not by["csr"].ok and by["csr"].error.startswith("wrong result"), str(rep)
    assert by["dcsr"].ok, str(rep)


def test_wrong_first_candidate_against_majority(rng, monkeypatch):
    # a monoid reduction is beyond the sampler: the candidates that agree form the reference
    A, x = spmv_operands(rng, shape=(30, 20))
    first_candidate_wrong(monkeypatch, "csr")
    rep = sc.explore("y[i] = max[j](A[i,j] * x[j])", A=A, x=x, formats={"A": ["csr", "csc", "coo"]},
                     repeat=1, progress=False)
    by = {r.formats[0]: r for r in rep.rows}
    assert not by["csr"].ok and "majority" in by["csr"].error, str(rep)
    assert by["csc"].ok and by["coo"].ok, str(rep)


def test_autotune_never_stores_a_wrong_choice(rng, monkeypatch, tmp_path):
    storage = sys.modules["sparsecc.explore.storage"]
    monkeypatch.setattr(storage, "_tuning_dir", lambda: str(tmp_path))
    monkeypatch.setattr(storage, "_memory", {})
    A, x = spmv_operands(rng, shape=(33, 21))
    first_candidate_wrong(monkeypatch, "csr")
    k = sc.compile("ij,j->i", ["csr", "csc"], None, autotune=True)
    assert_matches(k(A, x), A.toarray() @ x)
    assert k.tuned_from == "explored" and k.choice[0][0] == "csc", str(k.report)
    stored = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert [d["formats"][0] for d in stored] == ["csc"]


def _sampled(expression, *operands):
    stmt, names, values = runner_bind(expression, operands, {})
    sizes = index_sizes(stmt, {n: tuple(v.shape) for n, v in zip(names, values)})
    return sampled_reference(stmt, names, values, sizes)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "complex128"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("case", ["random", "empty", "single"])
def test_sampled_reference_against_numpy(rng, dtype, fmt, case):
    # the checker itself, against numpy.einsum on dense copies (no kernel compiled)
    A = random_sparse((23, 17), {"random": 0.3, "empty": 0.0, "single": 0.0}[case], dtype, rng, fmt=fmt)
    if case == "single":
        A = sp.coo_array(([np.ones(1, dtype)[0] * 3], ([4], [5])), shape=(23, 17)).asformat(fmt)
    x = random_dense((17,), dtype, rng)
    B = random_sparse((17, 11), 0.3, dtype, rng, fmt=fmt)
    T = random_sparse((5, 6, 7), 0.2, dtype, rng, fmt="coo")
    C, D = random_dense((6, 3), dtype, rng), random_dense((7, 3), dtype, rng)
    for expr, ops in [("ij,j->i", (A, x)), ("ik,kj->ij", (A, B)), ("ij->", (A,)), ("ij->ji", (A,)),
                      ("ijk,jr,kr->ir", (T, C, D))]:
        dense = [o.toarray() if sp.issparse(o) else o for o in ops]
        want = np.einsum(expr, *dense)
        ref = _sampled(expr, *ops)
        assert ref is not None, expr
        assert ref.check(want) is None, expr
        assert ref.check(sp.coo_array(want)) is None if want.ndim == 2 else True
        if np.any(want != 0):
            assert ref.check(want * 2) is not None, expr                 # a wrong result is caught
        assert ref.check(want + 1) is not None or want.size == 0, expr


def test_sampled_reference_limits(rng):
    A, x = spmv_operands(rng)
    assert _sampled("y[i] = max[j](A[i,j] * x[j])", A, x) is None      # a monoid: majority instead
    assert _sampled("ii->i", sp.csr_array(np.eye(4))) is None             # a diagonal
    ref = _sampled("ij,j->i", A, x)
    assert "dtype" in ref.check((A.toarray() @ x).astype(np.float32))
    assert "shape" in ref.check(np.zeros(3))


def test_majority_without_a_winner_verifies_nothing():
    m = Majority()
    rows = [Row(("csr",), sc.Options()), Row(("csc",), sc.Options())]
    m.add(rows[0], np.ones(3))
    m.add(rows[1], np.zeros(3))
    v = m.verdicts()
    assert all(v[id(r)].startswith("unverified") for r in rows)
    third = Row(("coo",), sc.Options())
    m.add(third, np.zeros(3))
    v = m.verdicts()
    assert v[id(rows[1])] is None and v[id(third)] is None and "majority" in v[id(rows[0])]


def test_compare():
    a = np.array([1.0, 2.0, 3.0])
    assert compare(a, a.copy()) is None
    assert compare(a, a * (1 + 1e-12)) is None
    assert "differ" in compare(a, a + [0, 0, 1e-3])
    assert "shape" in compare(a, a[:2])
    assert "dtype" in compare(a, a.astype(np.float32))
    f = np.array([1.0, 2.0], np.float32)
    assert compare(f, f * np.float32(1 + 1e-6)) is None and compare(f, f + np.float32(0.1)) is not None
    i = np.array([1, 2, 3])
    assert compare(i, i.copy()) is None and "1 of 3" in compare(i, i + [0, 0, 1])
    n = np.array([np.nan, 1.0])
    assert compare(n, n.copy()) is None and compare(n, np.array([0.0, 1.0])) is not None
    assert compare(np.float64(2.0), np.float64(2.0)) is None
    S = sp.csr_array(np.array([[0.0, 1.0], [2.0, 0.0]]))
    assert compare(S, S.tocsc()) is None and compare(S, S.toarray()) is None
    S2 = S.copy()
    S2.data[0] = 5.0
    assert "differ" in compare(S, S2)


def test_compare_large_sparse_by_entries(monkeypatch):
    monkeypatch.setattr(compare_mod, "DENSE_COMPARE_LIMIT", 4)
    S = sp.coo_array(([1.0, 2.0, 3.0], ([0, 1, 2], [2, 0, 1])), shape=(3, 3))
    assert compare(S, S.tocsr()) is None
    dup = sp.coo_array(([1.0, 1.5, 0.5, 3.0], ([0, 1, 1, 2], [2, 0, 0, 1])), shape=(3, 3))  # summed
    assert compare(dup, S) is None
    zero = sp.coo_array(([1.0, 2.0, 3.0, 0.0], ([0, 1, 2, 2], [2, 0, 1, 2])), shape=(3, 3))  # stored 0
    assert compare(zero, S) is None
    assert "differ" in compare(sp.coo_array(([1.0, 2.0, 4.0], S.coords), shape=(3, 3)), S)
    assert compare(S.toarray(), S) is None
    T = sp.coo_array(np.arange(24.0).reshape(2, 3, 4))
    assert compare(T, sp.coo_array(np.arange(24.0).reshape(2, 3, 4))) is None


# --------------------------------------------------------------------------- caps, budget, progress
def test_cap_keeps_closest_candidates(rng):
    A, x = spmv_operands(rng)
    with pytest.warns(UserWarning, match="capped to max_candidates=2"):
        rep = sc.explore("ij,j->i", A, x, formats=[["csr", "csc", "coo"], None], index_widths=[None, 64],
                         max_candidates=2, repeat=1, progress=False)
    assert len(rep.rows) == 2 and any("capped" in n for n in rep.notes)
    assert min(rep.rows, key=lambda r: r.index).formats[0] == "csr"


def test_budget_runs_the_first_and_skips_the_rest(rng):
    A, x = spmv_operands(rng)
    with pytest.warns(UserWarning, match="budget_s"):
        rep = sc.explore("ij,j->i", A, x, formats=[["csr", "csc", "coo"], None], budget_s=1e-9, repeat=3,
                         progress=False)
    assert [r.ok for r in rep.rows] == [True, False, False]
    assert all(r.error.startswith("skipped") for r in rep.rows[1:])
    assert "skipped" in str(rep)


def test_progress_bar(rng, capsys):
    A, x = spmv_operands(rng)
    sc.explore("ij,j->i", A, x, formats=[["csr"], None], repeat=1, progress="always")
    err = capsys.readouterr().err
    assert "explore [" in err and err.endswith("\n")
    sc.explore("ij,j->i", A, x, formats=[["csr"], None], repeat=1, progress=True)   # not a terminal
    assert capsys.readouterr().err == ""
    buf = io.StringIO()
    with _progress.Progress(4, True, stream=buf, width=8) as bar:
        bar.step("a")
        bar.step("b")
    assert "[####....] 2/4" in buf.getvalue() and buf.getvalue().endswith("\n")
    assert not _progress.wanted(True, io.StringIO()) and _progress.wanted("always")


# --------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("kwargs, match", [
    ({"repeat": 0}, "repeat"),
    ({"budget_s": -1}, "budget_s"),
    ({"max_candidates": 0}, "max_candidates"),
    ({"threads": [0]}, "threads"),
    ({"threads": [1.5]}, "threads"),
    ({"index_widths": [16]}, "index_width"),
    ({"vector_lengths": [3]}, "vector_length"),
    ({"options": "fast"}, "options"),
    ({"progress": "sometimes"}, "progress"),
    ({"formats": {"B": ["csr"]}}, "not an operand"),
    ({"formats": {0: ["nosuch"]}}, "unknown format"),
    ({"formats": {0: ["bsr"]}}, "block size"),
    ({"formats": {0: ["csf"]}}, None),            # csf of a matrix is allowed (all compressed)
    ({"formats": [["csr"]]}, "entries"),
    ({"formats": {0: []}}, "no candidates"),
    ({"formats": "csr"}, "dict or a list"),
    ({"out_format": "bsr"}, "bsr"),
])
def test_bad_arguments(rng, kwargs, match):
    A, x = spmv_operands(rng)
    if match is None:
        rep = sc.explore("ij,j->i", A, x, repeat=1, progress=False, **kwargs)
        assert rep.rows[0].ok
        return
    with pytest.raises(sc.SparseccError, match=match):
        sc.explore("ij,j->i", A, x, **{"progress": False, **kwargs})


def test_bad_operands(rng):
    A, x = spmv_operands(rng)
    with pytest.raises(sc.SparseccError):
        sc.explore(42, A, x)
    with pytest.raises(sc.OperandError):
        sc.explore("ij,j->i", A)                                   # one operand short
    with pytest.raises(sc.ShapeError):
        sc.explore("ij,j->i", A, np.ones(3))
    with pytest.raises(sc.OperandError):
        sc.explore("ij,j->i", A, x=x)                              # einsum: by position
    with pytest.raises(sc.OperandError):
        sc.explore("y[i] = A[i,j] * x[j]", A=A)                    # x missing
    with pytest.raises(sc.OperandError):
        sc.explore("y[i] = A[i,j] * x[j]", A=A, x=x, z=x)
    with pytest.raises(sc.DTypeError):
        sc.explore("ij,j->i", A, x.astype(np.float16))
    bad = sp.csr_array((np.ones(2), np.array([0, 99], np.int32), np.array([0, 1, 2] + [2] * 10, np.int32)),
                       shape=(12, 10))
    with pytest.raises(sc.OperandError):
        sc.explore("ij,j->i", bad, x)                               # column index out of range
    with pytest.raises(sc.SparseccError):
        sc.compile("ij,j->i", ["nosuch"], autotune=True)


def test_inputs_not_modified(rng):
    A = random_sparse((10, 8), 0.3, "float64", rng, fmt="coo")
    x = rng.random(8)
    before = (A.coords[0].copy(), A.coords[1].copy(), A.data.copy(), x.copy())
    sc.explore("ij,j->i", A, x, formats=[["coo", "csr", "bsr2x2"], None], repeat=1, progress=False)
    for a, b in zip(before, (A.coords[0], A.coords[1], A.data, x)):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- autotuning
def test_autotune_in_process(rng):
    A, x = spmv_operands(rng, shape=(16, 12))
    k = sc.compile("ij,j->i", ["csr", "csc"], None, autotune=True)
    assert isinstance(k, AutotunedKernel) and k.choice is None
    assert_matches(k(A, x), A.toarray() @ x)
    assert k.choice[0][0] in ("csr", "csc") and k.tuned_from in ("explored", "memory", "disk")
    # later calls, any shape and dtype, go to the chosen kernel
    B, y = spmv_operands(rng, shape=(5, 7), dtype="float32")
    assert_matches(k(B, y), np.einsum("ij,j->i", B.toarray(), y))
    # a second kernel for the same problem finds the choice without exploring
    k2 = sc.compile("ij,j->i", ["csr", "csc"], None, autotune=True)
    assert_matches(k2(A, 2 * x), A.toarray() @ (2 * x))
    assert k2.tuned_from == "memory" and k2.report is None and k2.choice == k.choice


def test_autotune_block_choice_takes_any_shape(rng):
    blocks = random_sparse((3, 3), 0.6, "float64", rng, fmt="csr")
    A = sp.csr_array(sp.kron(blocks, np.ones((2, 2))))
    k = sc.compile("y[i] = A[i,j] * x[j]", A=["bsr2x2"], autotune=True)
    x = rng.random(6)
    assert_matches(k(A=A, x=x), A.toarray() @ x)
    assert k.choice[0][0] == "bsr2x2"
    B, y = spmv_operands(rng, shape=(5, 7))                       # 2x2 blocks do not divide 5x7
    assert_matches(k(A=B, x=y), B.toarray() @ y)
    assert "AutotunedKernel" in repr(k) and "sparse_tensor" in k.ir()


AUTOTUNE_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, scipy.sparse as sp, sparsecc as sc
    rng = np.random.default_rng(7)
    A = sp.random_array((24, 20), density=0.2, format="csr", random_state=rng)
    x = rng.random(20)
    k = sc.compile("ij,j->i", autotune=True)
    y = k(A, x)
    ok = bool(np.allclose(y, A.toarray() @ x))
    print(json.dumps({"ok": ok, "from": k.tuned_from, "choice": [str(f) for f in k.choice[0]],
                      "explored": k.report is not None}))
""")


def test_autotune_remembered_across_processes(tmp_path):
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(tmp_path / "cache"))
    outs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", AUTOTUNE_SCRIPT], env=env, capture_output=True, text=True,
                           cwd=ROOT, timeout=300, check=False)
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = outs
    assert first["ok"] and second["ok"]
    assert first["from"] == "explored" and first["explored"]
    assert second["from"] == "disk" and not second["explored"]
    assert second["choice"] == first["choice"]
    stored = list((tmp_path / "cache" / "autotune").glob("*.json"))
    assert len(stored) == 1


def test_stored_choice_tampering_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(tmp_path / "c"))
    path = store_choice("k" * 40, ("csc", "dense"), sc.Options(index_width=64))
    assert load_choice("k" * 40) == (("csc", "dense"), sc.Options(index_width=64))
    with open(path) as f:
        d = json.load(f)
    d["formats"] = ["dcsr", "dense"]
    with open(path, "w") as f:
        json.dump(d, f)
    assert load_choice("k" * 40) is None                           # checksum mismatch
    with open(path, "w") as f:
        f.write("{garbage")
    assert load_choice("k" * 40) is None
    assert load_choice("0" * 40) is None                           # missing


def test_row_status():
    assert Row(("csr",), sc.Options(), ok=True).status == "ok"
    assert Row(("csr",), sc.Options(), error="failed: X").status == "failed: X"


# --------------------------------------------------------------------------- example
def test_example_runs():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "explore_formats.py")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    assert "best formats" in p.stdout and "results match: yes" in p.stdout
