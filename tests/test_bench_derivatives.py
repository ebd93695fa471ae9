"""The derivative bench rows (sparsecc/bench/derivative_rows.py) run, check both sides agree
and report ratios against their targets, at a tiny scale (the timings are not asserted)."""

import json

import pytest

from sparsecc.bench import cli, derivative_rows


def test_rows_tiny(tmp_path):
    out = tmp_path / "d.json"
    p = __import__("argparse").ArgumentParser()
    cli.add_arguments(p)
    args = p.parse_args(["--derivatives", "--derivatives-scale", "0.01", "--small", "--repeat", "1", "--json", str(out)])
    import io
    buf = io.StringIO()
    assert cli.run(args, out=buf) == 0
    text = buf.getvalue()
    assert "| lsq-hessian" in text and "| lsq-hvp" in text and "bratu-jacobian N=10" in text
    report = json.loads(out.read_text())
    rows = {r["id"]: r for r in report["derivatives"]}
    assert all(r["ok"] for r in rows.values())
    assert rows["lsq-hessian"]["target"] == 1.0 and rows["lsq-hvp"]["target"] == 1.2
    assert rows["lsq-hessian"]["ratio"] == pytest.approx(rows["lsq-hessian"]["sparsecc"] / rows["lsq-hessian"]["peer"])
    bratu = rows["bratu-jacobian N=4"]
    assert bratu["nnz"] == 16 + 4 * 4 * 3           # 5-point Laplacian on a 4 x 4 grid
    try:
        import casadi  # noqa: F401
    except ImportError:
        assert "values_ratio" not in bratu
    else:
        assert bratu["values_target"] == 1.0 and bratu["pattern_target"] == 0.1
        assert isinstance(bratu["pattern_met"], bool)


def test_laplacian():
    L = derivative_rows.laplacian(4)
    assert L.shape == (16, 16) and L.nnz == 16 + 4 * 4 * 3
