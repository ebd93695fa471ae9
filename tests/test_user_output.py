"""What the tools print to users: the bench table, format labels, the explore chart, the demo."""

import re

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import bench


def _row(**kw):
    row = {"ok": True, "kernel": "spmv", "input": "uniform", "sparsecc_ms": 2.5, "sparsecc_1t_ms": 5.0,
           "thread_speedup": 2.0, "baselines": {"scipy": {"ms": 4.0, "ratio": 0.62}, "torch": {"ms": 2.0, "ratio": 1.25}},
           "target": {"ratio": 1.0, "threads": "1", "met": False, "measured": 1.3},
           "thread_target": {"speedup": 1.6, "met": False}, "gflops": 1.4, "gbs": 30.0, "bw_fraction": 1.31,
           "compile_s": 0.2, "shape": [10, 10], "nnz": 28, "id": "spmv:uniform"}
    row.update(kw)
    return row


def test_bench_table_hides_targets_unless_asked():
    text = bench.table([_row()])
    assert "target" not in text and "NO" not in text
    with_targets = bench.table([_row()], targets=True)
    assert "target" in with_targets.splitlines()[0] and "NO" in with_targets
    assert "target" not in bench.markdown([_row()]) and "missed" in bench.markdown([_row()], targets=True)


@pytest.mark.parametrize("targets", [False, True])
def test_bench_table_cells_do_not_run_together(targets):
    lines = bench.table([_row()], targets=targets).splitlines()
    header, row = lines[0], lines[2]
    # every header name and every cell is separated by at least two spaces
    names = [n for n in re.split(r" {2,}", header.strip())]
    assert "1 thread" in names and "baseline" in names and "%BW" in names
    cells = re.split(r" {2,}", row.strip())
    assert len(cells) == len(names), (names, cells)
    assert "131" in cells[names.index("%BW")]


def test_bench_legend_explains_bw_over_100():
    from sparsecc.bench.report import LEGEND
    assert "%BW" in LEGEND and "100%" in LEGEND and "cache" in LEGEND


@pytest.mark.parametrize("fmt,text", [
    (sc.Format.csf(3, (2, 0, 1)), "csf(2,0,1)"),
    (sc.Format.csf(3), "csf"),
    (sc.Format.csr(), "csr"),
    (sc.Format.bsr((4, 2)), "bsr4x2"),
    (sc.Format.csr().with_widths(32, 64), "csr[posWidth=32,crdWidth=64]"),
    (sc.Format.csf(3, (1, 2, 0)).with_widths(32, 32), "csf(1,2,0)[posWidth=32,crdWidth=32]"),
])
def test_format_str_names_order_and_widths(fmt, text):
    assert str(fmt) == text


def test_format_str_tells_csf_orders_apart():
    import itertools
    names = {str(sc.Format.csf(3, p)) for p in itertools.permutations(range(3))}
    assert len(names) == 6


def test_explore_labels_formats_as_format_prints_them(tmp_path):
    from sparsecc.explore.report import _spec_name
    f = sc.Format.csf(3, (2, 0, 1))
    assert _spec_name(f) == str(f) == "csf(2,0,1)"
    from sparsecc.explore.candidates import _csf
    assert str(_csf(3, (2, 0, 1))) == str(f)           # a candidate sc.explore made, labelled the same


def test_demo_compile_column_says_when_nothing_compiled(tmp_path):
    """A second run finds every kernel on disk: its compile column shows no compile time."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
                                          + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    run = lambda: subprocess.run([sys.executable, "-m", "sparsecc", "demo", "--scale", "0.1"], check=True,
                                 capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600).stdout
    first, second = run(), run()
    rows = lambda out: [l for l in out.splitlines() if re.match(r"^(SpMV|SpMM|SDDMM|SpGEMM|MTTKRP) ", l)]
    assert len(rows(first)) == len(rows(second)) == 5
    assert all(" disk " in l and not re.search(r"\d\.\d\ds ", l) for l in rows(second)), second
