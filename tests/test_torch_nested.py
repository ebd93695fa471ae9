"""sparsecc.torch over statements split into steps with sparse temporaries (plan/nested.py):
the forward pass against the same statement on dense torch copies, and the gradients (the
planned autograd Function's, through each step) against torch's own autograd on the dense
copies, masked to each operand's stored entries as sparsecc.torch's gradients are."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sparsecc.torch as sct  # noqa: E402

N = 7

# statement, operand names, optimize, the dense oracle (torch ops on dense copies)
CASES = {
    "sum_plus_sparse": ("J[k,l] = sum[i](AT[k,i] * B[i,l]) + I[k,l]", "AT B I", True,
                        lambda d: d["AT"] @ d["B"] + d["I"]),
    "mask_times_sum": ("C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])", "M A B", False,
                       lambda d: d["M"] * (d["A"] @ d["B"])),
    "neg_sum": ("C[i,j] = neg(sum[k](A[i,k] * B[k,j]))", "A B", True, lambda d: -(d["A"] @ d["B"])),
    "two_sums": ("C[i,j] = sum[k](A[i,k] * B[k,j]) + sum[l](D[i,l] * E[l,j])", "A B D E", True,
                 lambda d: d["A"] @ d["B"] + d["D"] @ d["E"]),
    # min over the stored products only (no term: unstored, read as 0 by the sum), written out
    "min_plus_sparse": ("C[i,j] = min[k](A[i,k] * B[k,j]) + I[i,j]", "A B I", True, lambda d: _min_oracle(d)),
}
PARAMS = [("sum_plus_sparse", "csr", torch.float64), ("mask_times_sum", "coo", torch.float64),
          ("neg_sum", "csr", torch.complex128), ("two_sums", "coo", torch.float64),
          ("min_plus_sparse", "csr", torch.float64)]


def _min_oracle(d):
    a, b = d["A"], d["B"]
    stored = (a != 0)[:, :, None] & (b != 0)[None, :, :]
    p = torch.where(stored, a[:, :, None] * b[None, :, :], torch.full((N, N, N), 1e300, dtype=a.dtype))
    return torch.where(stored.any(1), p.amin(1), torch.zeros((N, N), dtype=a.dtype)) + d["I"]


def _operand(seed, layout, dtype):
    g = torch.Generator().manual_seed(seed)
    d = (torch.rand(N, N, generator=g, dtype=torch.float64) + 0.1) * (torch.rand(N, N, generator=g) < 0.35)
    if dtype.is_complex:
        d = d + 1j * torch.rand(N, N, generator=g, dtype=torch.float64) * (d != 0)
    d = d.to(dtype)
    return d.to_sparse_csr() if layout == "csr" else d.to_sparse().coalesce()


@pytest.mark.parametrize("case,layout,dtype", PARAMS)
def test_split_statement_forward_and_gradients(case, layout, dtype):
    stmt, names, optimize, oracle = CASES[case]
    ops = {n: _operand(s, layout, dtype).requires_grad_() for s, n in enumerate(names.split())}
    out = sct.evaluate(stmt, optimize=optimize, **ops)
    assert out.layout in (torch.sparse_csr, torch.sparse_coo)
    dense = {n: t.detach().to_dense().requires_grad_() for n, t in ops.items()}
    want = oracle(dense)
    np.testing.assert_allclose(out.detach().to_dense().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-14)
    w = torch.rand(N, N, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(dtype)
    (out.to_dense() * w).real.sum().backward()
    (want * w).real.sum().backward()
    for n, t in ops.items():
        stored = t.detach().to_dense() != 0
        got = t.grad.to_dense()
        assert not got[~stored].any(), f"{n}: a gradient off its stored entries"
        np.testing.assert_allclose(got.numpy(), (dense[n].grad * stored).numpy(), rtol=1e-12, atol=1e-14)


def test_split_statement_runs_its_steps_under_autograd(monkeypatch):
    """The gradients come from the planned Function over the steps, not the one nest's adjoints."""
    from sparsecc.torch import api
    seen = []
    forward = api._ApplyPlan.forward
    monkeypatch.setattr(api._ApplyPlan, "forward",
                        staticmethod(lambda ctx, steps, *a: seen.append(len(steps[0].steps)) or forward(ctx, steps, *a)))
    ops = {n: _operand(s, "csr", torch.float64).requires_grad_() for s, n in enumerate("AT B I".split())}
    sct.evaluate(CASES["sum_plus_sparse"][0], **ops)
    assert seen == [2]
