"""sparsecc.bench.torch_rows runs, and checks sparsecc against torch.sparse before timing
(no timing is asserted)."""

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse .* tensor support is in beta")


def test_rows_run_small():
    from sparsecc.bench import torch_rows
    rs = torch_rows.rows(n=64, density=0.05, k=4, rounds=1)
    assert [r["kernel"] for r in rs] == ["spmm fwd+bwd", "sddmm fwd+bwd"]
    assert all(r["sparsecc_s"] > 0 and r["torch_sparse_s"] > 0 for r in rs)
    assert "| spmm fwd+bwd | 64 |" in torch_rows.table(rs)
