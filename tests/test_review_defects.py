"""Defects found in review (docs/briefs: "Found, not fixed"), each with the test that failed
before its fix.  Oracles: NumPy on dense copies, torch's own results."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc


# ------------------------------------------------ pow of complex zero (NumPy's cpow rules)

@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_pow_of_zero_follows_numpy(dtype):
    """``pow(A[i], e)`` at A = 0 gave NaN for every exponent (``complex.pow`` is
    ``exp(e * log(0))``); NumPy gives 1 for e == 0, 0 for Re(e) > 0, NaN otherwise."""
    A = np.array([0, 1.5, -0.0, 2j, 0], dtype=dtype)
    E = np.array([1 + 1j, 2, 0, 0.5 - 1j, -1 + 1j], dtype=dtype)
    for e in (1 + 1j, 0j, 2, -1 + 1j, 1j, 0.5):
        got = sc.evaluate("y[i] = pow(A[i], e)", A=A, e=dtype(e))
        with np.errstate(all="ignore"):
            want = np.power(A, dtype(e))
        np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)
    with np.errstate(all="ignore"):
        want = np.power(A, E)
    np.testing.assert_allclose(sc.evaluate("y[i] = pow(A[i], E[i])", A=A, E=E), want, rtol=1e-5,
                               equal_nan=True)


def test_complex_pow_sparse_keeps_zeros():
    A = sp.csr_array(np.array([[0, 1.5, 0], [2j, 0, 0]], dtype=np.complex128))
    got = sc.ops.pow(A, np.complex128(1 + 1j))
    got = got.toarray() if sp.issparse(got) else got
    np.testing.assert_allclose(got, np.power(A.toarray(), 1 + 1j))


# ------------------------------------------------ malformed formats: FormatError, not CompileError

M = sp.random_array((4, 6), density=0.5, random_state=0, format="csr")

BAD_FORMATS = [
    "bsr1x2", "bsr2x1", "bsr1x1",
    "(i, j) -> (i floordiv 1 : dense, j floordiv 2 : compressed, i mod 1 : dense, j mod 2 : dense)",
    "(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 3 : dense, j mod 2 : dense)",
    "(i, j) -> (i : dense, j : compressed, garbage)",
    "(i, j) -> (i : compressed(nonunique), j : compressed(nonunique))",
    "(i, j) -> (i : dense, j : compressed(soa))",
    "(i, j) -> (i : dense(nonunique), j : compressed)",
    "(i, j) -> (i : singleton, j : compressed)",
]


@pytest.mark.parametrize("fmt", BAD_FORMATS)
def test_malformed_formats_are_format_errors(fmt):
    """An explicit "bsr1x2" compiled and failed in MLIR (CompileError); some level maps
    crashed the compile worker (an assertion) or were read wrongly (``mod 3`` ignored)."""
    with pytest.raises(sc.FormatError):
        sc.einsum("ij,j->i", M, np.ones(6), formats=[fmt, None])


def test_block_formats_of_one_refused_where_made():
    with pytest.raises(sc.FormatError, match="block size of 1"):
        sc.Format.bsr((1, 2))
    with pytest.raises(sc.FormatError, match="block size of 1"):
        sc.Format(("dense", "compressed", "dense", "dense"), block=(2, 1))


def test_plain_bsr_with_block_one_still_runs_as_csr():
    B = sp.bsr_array(M.toarray(), blocksize=(1, 2))
    np.testing.assert_allclose(sc.einsum("ij,j->i", B, np.ones(6), formats=["bsr", None]),
                               M.toarray() @ np.ones(6))


# ------------------------------------------------ where: complex conditions/branches, scalar branches

def _rnd(rng, dtype, shape=(4, 5)):
    x = rng.standard_normal(shape) * (rng.random(shape) < 0.5)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape) * (x != 0)
    return x.astype(dtype)


@pytest.mark.parametrize("cdt,xdt,other,sparse", [
    ("bool", "complex128", "array", (1, 1, 1)),        # CompileError: the mask converted to complex
    ("complex128", "complex64", "array", (1, 1, 0)),   # a complex condition: complex.neq in a sparse loop
    ("float64", "complex128", 0, (1, 1, 0)),
    ("bool", "float64", 2.5, (1, 0, 0)),               # a scalar branch next to a dense one: segfault
    ("complex128", "complex128", 2.5 + 1j, (1, 0, 0)),
    ("int32", "float64", 2.5, (1, 1, 0)),
])
def test_where_complex_and_scalar_branches(cdt, xdt, other, sparse):
    rng = np.random.default_rng(7)
    c, x = _rnd(rng, cdt), _rnd(rng, xdt)
    y = _rnd(rng, xdt) if other == "array" else other
    C = sp.csr_array(c) if sparse[0] else c
    X = sp.csr_array(x) if sparse[1] else x
    Y = (sp.csr_array(y) if sparse[2] else y) if other == "array" else y
    got = sc.ops.where(C, X, Y)
    got = got.toarray() if sp.issparse(got) else got
    np.testing.assert_allclose(got, np.where(c != 0, x, y), rtol=1e-6)


# ------------------------------------------------ sparsecc.torch: repeated CSR indices, scalar results

torch = pytest.importorskip("torch")


def _csr(ptr, ind, vals, shape, grad=True):
    v = torch.tensor(vals, dtype=torch.float64, requires_grad=grad)
    return v, torch.sparse_csr_tensor(torch.tensor(ptr), torch.tensor(ind), v, shape, check_invariants=False)


def test_torch_csr_repeated_indices_refused_on_the_grad_path():
    """A CSR tensor storing column 1 twice in row 0 (check_invariants=False): the forward sum
    matched torch's, but torch's own backward of the constructor failed with a shape error."""
    import sparsecc.torch as sct
    v, A = _csr([0, 2, 3], [1, 1, 0], [1.0, 2.0, 3.0], (2, 2))
    x = torch.tensor([1.0, 10.0], dtype=torch.float64, requires_grad=True)
    with pytest.raises(sc.SparseccError, match="stores an index twice"):
        sct.einsum("ij,j->i", A, x)
    y = sct.einsum("ij,j->i", A.detach(), x)          # A needs no gradient: summed, as torch's A @ x
    torch.testing.assert_close(y, A.detach() @ x.detach())
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([3.0, 3.0], dtype=torch.float64))
    with torch.no_grad():
        torch.testing.assert_close(sct.einsum("ij,j->i", A, x), A.detach() @ x.detach())


def test_torch_csr_unsorted_indices_refused_on_the_grad_path():
    """Unsorted (unique) columns: torch's backward of the constructor put the gradients on the
    wrong elements (v.grad [24, 240, 6] for [240, 24, 6]); refused, as repeated ones."""
    import sparsecc.torch as sct
    v, A = _csr([0, 2, 3], [1, 0, 0], [1.0, 2.0, 3.0], (2, 2))
    x = torch.tensor([1.0, 10.0], dtype=torch.float64)
    with pytest.raises(sc.SparseccError, match="out of order"):
        sct.einsum("ij,j->i", A, x)
    torch.testing.assert_close(sct.einsum("ij,j->i", A.detach(), x), A.detach() @ x)
    v, A = _csr([0, 2, 4], [0, 1, 0, 1], [1.0, 2.0, 3.0, 4.0], (2, 2))     # sorted: differentiates
    sct.einsum("ij,j->i", A, x).sum().backward()
    torch.testing.assert_close(v.grad, torch.tensor([1.0, 10.0, 1.0, 10.0], dtype=torch.float64))


def test_torch_ops_scalar_results_are_tensors():
    """sct.ops.trace (and sum, without grad) returned np.float64: a NumPy scalar passed for a
    Python one (np.float64 is a float)."""
    import sparsecc.torch as sct
    E = torch.eye(3, dtype=torch.float64)
    for r in (sct.ops.trace(E), sct.ops.trace(E.to_sparse_csr()), sct.ops.sum(E.to_sparse_csr())):
        assert isinstance(r, torch.Tensor) and r.dim() == 0 and r.dtype == torch.float64
        assert float(r) == 3.0
    assert type(sct.ops.nnz(E.to_sparse_csr())) is int


# ------------------------------------------------ narrow integers: refused on purpose, everywhere

@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint32"])
def test_narrow_integers_are_a_deliberate_dtype_error(dtype):
    x = np.array([1, 2, 3], dtype=dtype)
    for call in (lambda: sc.ops.sum(x), lambda: sc.einsum("i,i->", x, x),
                 lambda: sc.ops.add(sp.csr_array(x.reshape(1, 3)), sp.csr_array(x.reshape(1, 3)))):
        with pytest.raises(sc.DTypeError, match="refused on purpose"):
            call()
    import sparsecc.torch as sct
    if dtype in ("int8", "uint8"):
        t = torch.tensor([1, 2, 3], dtype=getattr(torch, dtype))
        with pytest.raises(sc.DTypeError, match="refused on purpose"):
            sct.ops.sum(t)


def test_program_and_kernel_bind_alike():
    """One binding function (sparsecc.expr.bind_by_name) for kernels and programs."""
    A, x = np.eye(3), np.ones(3)
    k = sc.compile("y[i] = A[i,j] * x[j]")
    prog = sc.compile("y[i] = A[i,j] * x[j]; z[i] = y[i] * 2")
    for f, noun in ((k, "operand"), (prog, "input")):
        with pytest.raises(sc.OperandError, match=f"{noun} 'A' given twice"):
            f(A, A=A, x=x)
        with pytest.raises(sc.OperandError, match=rf"needs {noun}\(s\) x"):
            f(A=A)
        with pytest.raises(sc.OperandError, match=f"has no {noun} 'q'"):
            f(A=A, x=x, q=x)
        with pytest.raises(sc.OperandError, match="got 3 positional"):
            f(A, x, x)


# ------------------------------------------------ a sparse diagonal under a semiring (found by the fuzz)

def test_sparse_diagonal_under_a_semiring_is_refused():
    """``ii,i->i`` with min_max took the unstored A[1,1] as a stored 0: max(0, 4) = 4 where
    no entry exists (identity +inf expected); plus_times is exact and still runs."""
    A = sp.csr_array(np.array([[5.0, 1], [0, 0]]))
    x = np.array([3.0, 4.0])
    for semiring in ("min_max", "max_times", "min_plus", "plus_pair"):
        with pytest.raises(sc.FormatError, match="repeated index"):
            sc.einsum("ii,i->i", A, x, semiring=semiring)
    with pytest.raises(sc.FormatError, match="repeated index"):
        sc.evaluate("y[i] = max[j](A[i,i] * B[i,j])", A=A, B=np.ones((2, 2)))
    np.testing.assert_allclose(sc.einsum("ii,i->i", A, x, semiring="plus_times"), [15.0, 0.0])
    np.testing.assert_allclose(sc.einsum("ii,i->i", A, x), [15.0, 0.0])
    np.testing.assert_allclose(sc.einsum("ii,i->i", A.toarray(), x, semiring="min_max"), [5.0, 4.0])


def test_torch_programs_are_a_clear_parse_error():
    """sct.evaluate of two statements failed with "unexpected character ';'"."""
    import sparsecc.torch as sct
    E = torch.eye(3, dtype=torch.float64)
    with pytest.raises(sc.ParseError, match="one statement at a time"):
        sct.evaluate("y[i] = sum[j](A[i,j] * x[j]); q[] = sum[i](y[i])", A=E, x=torch.ones(3, dtype=torch.float64))
    with pytest.raises(sc.ParseError, match="one statement at a time"):
        sct.compile("y[i] = A[i,j] * x[j]\nz[i] = y[i] * 2")
