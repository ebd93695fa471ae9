"""Jacobian values on a known pattern (sparsecc/derivatives/values.py): a repeated
``J.values(...)`` on the last call's operand pattern runs the values-only kernel
(``ewise.emit(values=True)``); any other pattern runs the ordinary kernel.  Oracles:
``torch.func.jacrev`` on dense copies, and the ordinary kernel's result (bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.derivatives import PatternError

from conftest import seed as _seed

torch = pytest.importorskip("torch")
from torch.func import jacrev  # noqa: E402

BRATU = "r[i] = sum[j](L[i,j] * u[j]) + lam * exp(u[i]) - f[i]"


def _laplacian(n: int) -> sp.csr_array:
    T = sp.diags_array([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], offsets=[-1, 0, 1])
    L = sp.csr_array(sp.kron(sp.eye_array(n), T) + sp.kron(T, sp.eye_array(n)))
    L.eliminate_zeros()
    L.sort_indices()
    return sp.csr_array((L.data, L.indices.astype(np.int32), L.indptr.astype(np.int32)), shape=L.shape)


def _torch_jacobian(L, u, lam, f):
    Lt = torch.tensor(L.toarray(), dtype=torch.float64)
    return jacrev(lambda x: Lt @ x + lam * torch.exp(x) - torch.tensor(f))(torch.tensor(u)).numpy()


@pytest.fixture(scope="module")
def bratu():
    J = sc.jacobian(BRATU, wrt="u")
    L = _laplacian(6)
    return J, L


_REF = []


def _ordinary(**ops):
    """The ordinary kernel's result: a Jacobian that never keeps a recorded pattern."""
    if not _REF:
        _REF.append(sc.jacobian(BRATU, wrt="u"))
    _REF[0]._fixed.clear()
    return _REF[0](**ops)


def _fixed_calls(J, layout="csr"):
    f = J._fixed.get(layout)
    return 0 if f is None else f.calls


def test_repeated_values_run_the_values_only_kernel(bratu):
    """The second call on the same pattern is the values-only kernel's: the same bits as the
    ordinary kernel, torch's Jacobian at the pattern's entries; new values of u and lam
    (same pattern) too; ``pattern=`` is still checked."""
    J, L = bratu
    rng = np.random.default_rng(_seed("values-only"))
    n = L.shape[0]
    u, f = rng.uniform(0.1, 1.0, n), rng.standard_normal(n)
    first = J.values(L=L, u=u, lam=-2.0, f=f)
    before = _fixed_calls(J)
    indptr, indices = J.pattern(L=L)
    for lam in (-2.0, 0.5):
        u = rng.uniform(0.1, 1.0, n)
        got = J.values(L=L, u=u, lam=lam, f=f, pattern=(indptr, indices))
        ref = _ordinary(L=L, u=u, lam=lam, f=f)
        assert np.array_equal(ref.indptr, indptr) and np.array_equal(ref.indices, indices)
        assert got.tobytes() == ref.data.tobytes()
        dense = _torch_jacobian(L, u, lam, f)
        rows = np.repeat(np.arange(n), np.diff(indptr))
        np.testing.assert_allclose(got, dense[rows, indices], rtol=1e-13)
        assert np.count_nonzero(dense) == np.count_nonzero(got)
    assert _fixed_calls(J) == before + 2 and first.size == indices.size
    with pytest.raises(PatternError):
        J.values(L=L, u=u, lam=lam, f=f, pattern=(indptr, indices[::-1].copy()))


def test_another_pattern_runs_the_ordinary_kernel(bratu):
    """An in-place change of L's indices (same shape, same number of entries) and a matrix
    with other entries are other patterns: the ordinary kernel, then recorded anew; a
    ``pattern=`` of the old one is a PatternError."""
    J, L0 = bratu
    rng = np.random.default_rng(_seed("other-pattern"))
    n = L0.shape[0]
    u, f = rng.uniform(0.1, 1.0, n), np.zeros(n)
    L = L0.copy()
    J.values(L=L, u=u, lam=1.0, f=f)
    old = J.pattern(L=L)
    calls = _fixed_calls(J)
    # row 0 stores columns 0, 1, 6: move the entry at column 6 to column 7 (in place)
    assert list(L.indices[:3]) == [0, 1, 6]
    L.indices[2] = 7
    got = J.values(L=L, u=u, lam=1.0, f=f)
    assert _fixed_calls(J) == calls
    np.testing.assert_array_equal(got, _ordinary(L=L, u=u, lam=1.0, f=f).data)
    with pytest.raises(PatternError):             # (recorded: by the values-only kernel)
        J.values(L=L, u=u, lam=1.0, f=f, pattern=old)
    assert _fixed_calls(J) == calls + 1
    L2 = sp.csr_array(L0 + sp.eye_array(n, k=3, dtype=np.float64))
    got = J.values(L=L2, u=u, lam=1.0, f=f)
    assert _fixed_calls(J) == calls + 1 and got.size == _ordinary(L=L2, u=u, lam=1.0, f=f).nnz


def test_out_and_layouts(bratu):
    """``out=`` receives the values (both paths); a wrong array is an OperandError naming
    the pattern's length.  ``"coo"`` takes the CSR kernel's values; ``"csc"`` its own kernel."""
    J, L = bratu
    rng = np.random.default_rng(_seed("out"))
    n = L.shape[0]
    u, f = rng.uniform(0.1, 1.0, n), np.zeros(n)
    ref = _ordinary(L=L, u=u, lam=0.3, f=f)
    for _ in range(2):
        out = np.full(ref.nnz, np.nan)
        assert J.values(L=L, u=u, lam=0.3, f=f, out=out) is out
        np.testing.assert_array_equal(out, ref.data)
    for bad in (np.empty(ref.nnz - 1), np.empty(ref.nnz, np.float32), np.empty((ref.nnz, 2))[:, 0], [0.0] * ref.nnz):
        with pytest.raises(sc.OperandError, match=f"shape \\({ref.nnz},\\)"):
            J.values(L=L, u=u, lam=0.3, f=f, out=bad)
    rows, cols = J.pattern(L=L, layout="coo")
    np.testing.assert_array_equal(J.values(L=L, u=u, lam=0.3, f=f, layout="coo", pattern=(rows, cols)), ref.data)
    csc = sp.csc_array(ref)
    csc.sort_indices()
    Lc = sp.csc_array(L)
    Lc.sort_indices()
    for Lx in (L, Lc, Lc):      # (u[i] is the inner index of a CSC result: the sparsifier's kernel)
        np.testing.assert_array_equal(J.values(L=Lx, u=u, lam=0.3, f=f, layout="csc"), csc.data)


def test_unsorted_rows_flagged_canonical_are_not_recorded(bratu):
    """A CSR ``L`` whose flag says canonical but whose rows are not sorted: the ordinary path
    sorts a copy (its values are right); the values-only merge, which needs sorted rows, is
    never recorded for it."""
    J, L0 = bratu
    n = L0.shape[0]
    u, f = np.linspace(0.2, 0.9, n), np.zeros(n)
    want = _ordinary(L=L0, u=u, lam=0.7, f=f).toarray()
    L = L0.copy()
    L.indices[:2], L.data[:2] = L.indices[:2][::-1].copy(), L.data[:2][::-1].copy()   # row 0: columns 1, 0
    L.has_sorted_indices = True
    calls = _fixed_calls(J)
    for _ in range(2):
        vals = J.values(L=L, u=u, lam=0.7, f=f)
        indptr, indices = J.pattern(L=L)
        got = sp.csr_array((vals, indices, indptr), shape=(n, n)).toarray()
        np.testing.assert_array_equal(got, want)
    assert _fixed_calls(J) == calls


def test_repeated_call_returns_a_matrix_on_a_copy_of_the_pattern(bratu):
    """``J(...)`` again on the recorded pattern: the values-only kernel, a CSR matrix equal to
    the ordinary one; changing the returned matrix's indices in place changes nothing
    recorded (the next call is right and still values-only)."""
    J, L = bratu
    n = L.shape[0]
    u, f = np.linspace(0.1, 0.8, n), np.ones(n)
    first = J(L=L, u=u, lam=0.4, f=f)
    calls = _fixed_calls(J)
    want = _ordinary(L=L, u=u, lam=0.4, f=f).toarray()
    np.testing.assert_array_equal(first.toarray(), want)
    for _ in range(2):
        got = J(L=L, u=u, lam=0.4, f=f)
        assert got.format == "csr" and got.has_canonical_format and got.dtype == np.float64
        np.testing.assert_array_equal(got.toarray(), want)
        got.indices[:] = 0                      # the caller's copy
        got.indptr[:] = 0
        first.indices[:] = 0
    assert _fixed_calls(J) == calls + 2


@pytest.mark.parametrize("damage", ["short", "strided"])
def test_recorded_pattern_with_damaged_values_goes_the_validated_way(bratu, damage):
    """The recorded index arrays, but a values array shorter than them (or a strided view):
    the values-only kernel would have read past it (it ran before this test); the ordinary
    path validates and refuses the short one, and copies the strided one."""
    J, L0 = bratu
    n = L0.shape[0]
    u, f = np.full(n, 0.5), np.zeros(n)
    J.values(L=L0, u=u, lam=1.0, f=f)
    calls = _fixed_calls(J)
    L = L0.copy()
    if damage == "short":
        L.data = L0.data[:-3].copy()
        with pytest.raises(sc.OperandError, match="data"):
            J.values(L=L, u=u, lam=1.0, f=f)
    else:
        L.data = np.repeat(L0.data, 2)[::2]
        np.testing.assert_array_equal(J.values(L=L, u=u, lam=1.0, f=f), _ordinary(L=L0, u=u, lam=1.0, f=f).data)
    assert _fixed_calls(J) == calls
