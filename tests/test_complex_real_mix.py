"""A real sparse value promoted to complex inside a kernel whose result is real (``abs(A +
B)``, A complex, B real): the emitted ``complex.create`` is unknown to MLIR 22's sparsifier,
which then left the whole loop nest unlowered (a CompileError for a valid statement).  Values
against NumPy on dense copies."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

rng = np.random.default_rng(5)
BASE = [np.round(rng.standard_normal((4, 5)) * (rng.random((4, 5)) < 0.5), 1) for _ in range(2)]


def _gt0(a):                       # NumPy's order on complex values: lexicographic
    return (a.real > 0) | ((a.real == 0) & (a.imag > 0)) if a.dtype.kind == "c" else a > 0


CASES = {
    "abs(A+B)": ("v[i,j] = abs(a0[i,j] + a1[i,j])", lambda a, b: np.abs(a + b)),
    "abs(A*B)": ("v[i,j] = abs(a0[i,j] * a1[i,j])", lambda a, b: np.abs(a * b)),
    "abs(where)": ("v[i,j] = abs(where(a0[i,j] > 0, a0[i,j], a1[i,j]))",
                   lambda a, b: np.abs(np.where(_gt0(a), a, b))),
    "rowsum abs": ("y[i] = sum[j](abs(a0[i,j] - a1[i,j]))", lambda a, b: np.abs(a - b).sum(1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtypes,formats", [(("complex128", "float64"), ("csr", "csc")),
                                            (("float32", "complex64"), ("csr", "csr"))],
                         ids=["c128+f64-csr,csc", "f32+c64-csr"])
def test_real_operand_promoted_to_complex(name, dtypes, formats):
    stmt, oracle = CASES[name]
    d = [(b * (1 + 1j) if t.startswith("complex") else b).astype(t) for b, t in zip(BASE, dtypes)]
    ops = {f"a{k}": getattr(sp, f"{f}_array")(x) for k, (x, f) in enumerate(zip(d, formats))}
    got = sc.compile(stmt, a0=formats[0], a1=formats[1])(**ops)
    got = got.toarray() if hasattr(got, "toarray") else np.asarray(got)
    want = oracle(*d)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
