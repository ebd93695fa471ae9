"""A union of sparse operands that do not carry the same indices (``A[i,j] + a[i]`` over
CSR, ``a[i] + b[j]``, ``A[i,j] + c[k]``): MLIR 22's sparsifier crashed compiling them (every
retry), so valid statements raised CompileError.  Values against NumPy on dense copies and
the stored pattern against the union rule (docs/sparse-results.md)."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

rng = np.random.default_rng(3)


def _vec(n):
    d = np.round(rng.standard_normal(n) * (rng.random(n) < 0.5), 2)
    d[0] = 0.0                       # an unstored entry for sure
    d[-1] = d[-1] or 1.5             # and a stored one
    return sp.coo_array(d), d


def _mat(m, n):
    d = np.round(rng.standard_normal((m, n)) * (rng.random((m, n)) < 0.4), 2)
    d[0, 0], d[-1, -1] = 0.0, 2.0
    return d


AD = _mat(3, 4)
SQ = _mat(4, 4)
(a, AV), (b, BV), (c, CV) = _vec(3), _vec(4), _vec(5)

# statement, operands, NumPy value, NumPy pattern (None: the result is dense)
CASES = {
    "A+a[i]": ("C[i,j] = A[i,j] + a[i]", dict(a=a), AD + AV[:, None], (AD != 0) | (AV != 0)[:, None]),
    "A-b[j]": ("C[i,j] = A[i,j] - b[j]", dict(b=b), AD - BV, (AD != 0) | (BV != 0)),
    "max(A,a[i])": ("C[i,j] = max(A[i,j], a[i])", dict(a=a), np.maximum(AD, AV[:, None]),
                    (AD != 0) | (AV != 0)[:, None]),
    "A<a[i]": ("C[i,j] = A[i,j] < a[i]", dict(a=a), AD < AV[:, None], None),
    "a+b": ("C[i,j] = a[i] + b[j]", dict(a=a, b=b), AV[:, None] + BV, (AV != 0)[:, None] | (BV != 0)),
    "min(a,b)": ("C[i,j] = min(a[i], b[j])", dict(a=a, b=b), np.minimum(AV[:, None], BV),
                 (AV != 0)[:, None] | (BV != 0)),
    "A+c[k]": ("C[i,j,k] = A[i,j] + c[k]", dict(c=c), AD[:, :, None] + CV, (AD != 0)[:, :, None] | (CV != 0)),
    "A[i,j]+A[j,k]": ("C[i,j,k] = A[i,j] + A[j,k]", {}, None, None),
    "rowsum(A+b)": ("y[i] = sum[j](A[i,j] + b[j])", dict(b=b), (AD + BV).sum(1), None),
}
DEFAULT = {("A+a[i]", "csr"), ("a+b", "csr"), ("A+c[k]", "coo"), ("max(A,a[i])", "csc"), ("A-b[j]", "dcsr"),
           ("min(a,b)", "csr"), ("A[i,j]+A[j,k]", "csr")}
PARAMS = [pytest.param(n, f, marks=() if (n, f) in DEFAULT else pytest.mark.slow, id=f"{n}-{f}")
          for n in CASES for f in ("csr", "csc", "coo", "dcsr") if "A" in CASES[n][0] or f == "csr"]


def _operand_A(fmt, d=AD):
    return sp.coo_array(d) if fmt == "coo" else sp.csc_array(d) if fmt == "csc" else sp.csr_array(d)


@pytest.mark.parametrize("name,fmt", PARAMS)
def test_union_of_sparse_operands_over_other_indices(name, fmt):
    stmt, ops, want, pattern = CASES[name]
    if name == "A[i,j]+A[j,k]":                  # one operand read twice: a square one
        ops, want = dict(A=_operand_A(fmt, SQ)), SQ[:, :, None] + SQ[None, :, :]
        pattern = (SQ != 0)[:, :, None] | (SQ != 0)[None, :, :]
    elif "A[" in stmt:
        ops = dict(ops, A=_operand_A(fmt))
    formats = {k: (fmt if k == "A" else "coo") for k in ops}
    got = sc.compile(stmt, **formats)(**ops)
    dense = got.toarray() if hasattr(got, "toarray") else got.todense() if hasattr(got, "todense") else got
    np.testing.assert_allclose(np.asarray(dense), want)
    if pattern is not None:
        assert sp.issparse(got) or hasattr(got, "coords")
        if sp.issparse(got):
            coo = sp.coo_array(got)
            stored = np.zeros(pattern.shape, bool)
            stored[tuple(coo.coords)] = True
        else:                                     # 3-D: a pydata-free COO result
            stored = np.zeros(pattern.shape, bool)
            stored[tuple(np.asarray(got.coords))] = True
        np.testing.assert_array_equal(stored, pattern)
