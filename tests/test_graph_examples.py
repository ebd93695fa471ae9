"""The graph examples (shortest paths, BFS, PageRank on graphs shipped by networkx) run and
agree with scipy.sparse.csgraph / networkx."""

import runpy
from pathlib import Path

import pytest

pytest.importorskip("networkx")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "graphs"


@pytest.mark.parametrize("name", ["shortest_paths", "bfs", "pagerank"])
def test_graph_example(name, capsys):
    mod = runpy.run_path(str(EXAMPLES / f"{name}.py"))
    assert mod["main"]() == 0
    assert "True" in capsys.readouterr().out
