"""`// % & | ^ ~`, the logical functions and NumPy's sum/prod accumulator on lazy arrays,
against NumPy on dense copies (the divisor a lazy array runs inside stored(...): it computed
a true division before)."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

rng = np.random.default_rng(11)
AI = sp.csr_array(rng.integers(-5, 6, (4, 5)) * (rng.random((4, 5)) < 0.5))
DI = rng.integers(1, 4, (4, 5))
AF = sp.csr_array(rng.standard_normal((4, 5)) * (rng.random((4, 5)) < 0.5)).astype(np.float32)
M = sp.csr_array(rng.random((4, 5)) < 0.5)
N = sp.csr_array(rng.random((4, 5)) < 0.5)
I32 = sp.csr_array(rng.integers(-3, 4, (4, 5)).astype(np.int32))
L = sc.lazy

CASES = {
    "A//d": (lambda: L(AI) // L(DI), lambda a, d: a // d),
    "A%d": (lambda: L(AI) % L(DI), lambda a, d: a % d),
    "d//A": (lambda: L(DI) // L(AI), lambda a, d: np.floor_divide(d, a)),
    "7//A": (lambda: 7 // L(AI), lambda a, d: np.floor_divide(7, a)),
    "A%-3": (lambda: L(AI) % -3, lambda a, d: a % -3),
    "F//0.5": (lambda: L(AF) // 0.5, lambda a, d: AF.toarray() // 0.5),
    "F%F": (lambda: L(AF) % L(AF), lambda a, d: np.remainder(AF.toarray(), AF.toarray())),
    "ufunc floor_divide": (lambda: np.floor_divide(L(AI), 2), lambda a, d: a // 2),
    "M&N": (lambda: L(M) & L(N), lambda a, d: M.toarray() & N.toarray()),
    "M|N": (lambda: L(M) | L(N), lambda a, d: M.toarray() | N.toarray()),
    "M^N": (lambda: L(M) ^ L(N), lambda a, d: M.toarray() ^ N.toarray()),
    "~M": (lambda: ~L(M), lambda a, d: ~M.toarray()),
    "cmp&cmp": (lambda: (L(AI) > 0) & (L(AF) < 0), lambda a, d: (a > 0) & (AF.toarray() < 0)),
    "logical_not F": (lambda: L.logical_not(L(AF)), lambda a, d: np.logical_not(AF.toarray())),
    "logical_and I F": (lambda: L.logical_and(L(AI), L(AF)), lambda a, d: np.logical_and(a, AF.toarray())),
    "sum bool": (lambda: L(M).sum(), lambda a, d: M.toarray().sum()),
    "sum bool axis": (lambda: (L(M) ^ L(N)).sum(axis=1), lambda a, d: (M.toarray() ^ N.toarray()).sum(axis=1)),
    "sum int32": (lambda: L.sum(L(I32), axis=0), lambda a, d: I32.toarray().sum(axis=0)),
    "prod int32": (lambda: L.prod(L(I32), axis=1), lambda a, d: I32.toarray().prod(axis=1)),
    "mean bool": (lambda: L.mean(L(M), axis=1), lambda a, d: M.toarray().mean(axis=1)),
    "conj": (lambda: L.conj(L(AF.astype(np.complex128) * (1 + 2j))), lambda a, d: np.conj(AF.toarray().astype(np.complex128) * (1 + 2j))),
    "np.conjugate": (lambda: np.conjugate(L(AF.astype(np.complex64) * 1j)), lambda a, d: np.conjugate(AF.toarray().astype(np.complex64) * 1j)),
    "max bool": (lambda: L.max(L(M), axis=1), lambda a, d: M.toarray().max(axis=1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_against_numpy(name):
    make, oracle = CASES[name]
    got = sc.compute(make())
    got = got.toarray() if hasattr(got, "toarray") else np.asarray(got)
    with np.errstate(all="ignore"):
        want = np.asarray(oracle(AI.toarray(), DI))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("make,match", [(lambda: L(AI) & L(AI), "bitwise"), (lambda: ~L(AI), "bitwise"),
                                        (lambda: L(AF) | L(M), "bitwise"), (lambda: L.square(L(M)), "int8")],
                         ids=["int&int", "~int", "float|bool", "square(bool)"])
def test_refused_where_numpy_gives_what_sparsecc_does_not_compile(make, match):
    with pytest.raises(sc.DTypeError, match=match):
        make()


def test_index_objects_spell_the_same_operators():
    i, j = sc.indices("i j")
    a, m, n = L(AI), L(M), L(N)
    got = sc.compute(((a[i, j] // 2) % 3 + 2 ** (a[i, j] % 2)).lazy(i, j))
    want = (AI.toarray() // 2) % 3 + 2 ** (AI.toarray() % 2)
    np.testing.assert_array_equal(np.asarray(got.toarray() if hasattr(got, "toarray") else got), want)
    got = sc.compute(((m[i, j] & ~n[i, j]) | (m[i, j] ^ n[i, j])).lazy(i, j))
    m_, n_ = M.toarray(), N.toarray()
    np.testing.assert_array_equal(got.toarray() if hasattr(got, "toarray") else got, (m_ & ~n_) | (m_ ^ n_))
    with pytest.raises(sc.DTypeError, match="bitwise"):
        a[i, j] & a[i, j]
