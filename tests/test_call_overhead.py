"""The repeated-call fast path (``runtime/call.py``): a kernel called again with operands of
the kind its last plan was made for skips the general path (operand inspection lists, plan
lookup, argument lists), and ``sc.einsum`` called again with the same arguments skips its
parsing and broadcasting analysis.  Whatever changes between calls - shapes, dtypes,
formats, index widths, values, layouts, bad buffers - must either fit the cached plan
exactly or go through the general path: never run a wrong plan, never skip a check.

Oracles: ``numpy.einsum`` on dense copies.  Calls come in seeded random orders, so each
plan is reached right after every other one.
"""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import call as call_mod
from sparsecc.runtime import specialization

from conftest import assert_matches, dense_of, random_sparse


def csr(rng, shape, density=0.35, dtype=np.float64, fmt="csr"):
    return random_sparse(shape, density, dtype, rng, fmt=fmt)


def with_int64_indices(A):
    """A as users build it: ``csr_array((data, (rows, cols)))`` gives int64 indices."""
    c = A.tocoo()
    B = type(A)((c.data, (c.row.astype(np.int64), c.col.astype(np.int64))), shape=A.shape).asformat(A.format)
    B.indptr = B.indptr.astype(np.int64)
    B.indices = B.indices.astype(np.int64)
    return B


def oracle(expr, *ops):
    return np.einsum(expr, *[dense_of(o) for o in ops])


def spmv_operands(rng):
    """One entry per kind of call of 'ij,j->i': every one gets its own plan."""
    A = csr(rng, (10, 10))
    A1 = csr(rng, (1, 1), 1.0)
    dup = sp.csr_array((np.array([1.0, 2.0, 4.0]), np.array([2, 2, 0]), np.array([0, 2, 2, 3])), shape=(3, 3))
    return {
        "csr": (A, rng.random(10)),
        "csr-other-shape": (csr(rng, (7, 3)), rng.random(3)),
        "csr-int64": (with_int64_indices(A), rng.random(10)),
        "csr-int64-indptr-only": (_indptr64(A), rng.random(10)),
        "csr-f32": (csr(rng, (10, 10), dtype=np.float32), rng.random(10).astype(np.float32)),
        "csr-f32-x-f64": (csr(rng, (10, 10), dtype=np.float32), rng.random(10)),
        "csr-int": (csr(rng, (10, 10), dtype=np.int64), rng.integers(-3, 4, 10)),
        "csr-complex-x": (A, rng.random(10) + 1j * rng.random(10)),     # values converted to complex
        "csr-matrix": (sp.csr_matrix(A), rng.random(10)),
        "csc": (A.tocsc(), rng.random(10)),
        "coo": (A.tocoo(), rng.random(10)),
        "dense": (A.toarray(), rng.random(10)),
        "empty": (sp.csr_array((4, 6)), rng.random(6)),
        "zero-rows": (sp.csr_array((0, 6)), rng.random(6)),
        "one-entry": (A1, rng.random(1)),
        "strided-x": (A, rng.random(20)[::2]),
        "non-canonical": (dup, rng.random(3)),
        "1-d-csr-as-matrix-row": (csr(rng, (1, 10)), rng.random(10)),
    }


def _indptr64(A):
    B = A.copy()
    B.indptr = B.indptr.astype(np.int64)
    return B


def test_a_repeated_call_takes_the_fast_path(rng, monkeypatch):
    """The second call of the same kind never reaches the general path."""
    A, x = csr(rng, (10, 10)), rng.random(10)
    k = sc.compile("ij,j->i")
    assert_matches(k(A, x), A @ x)

    def general(*a, **kw):
        raise AssertionError("the general call path ran for a repeated call")

    monkeypatch.setattr(call_mod, "_call_general", general)
    for _ in range(3):
        assert_matches(k(A, x), A @ x)
        A.data *= -1.5                              # values in place: the same plan
        x[:] = rng.random(10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spmv_kinds_in_any_order(seed):
    rng = np.random.default_rng(seed)
    ops = spmv_operands(rng)
    k = sc.compile("ij,j->i")
    names = list(ops) * 3
    rng.shuffle(names)
    for name in names:
        A, x = ops[name]
        before = [b.copy() for b in _buffers(A)] + [np.array(x, copy=True)]
        got = k(A, x)
        assert_matches(got, oracle("ij,j->i", A, x))
        for b, saved in zip(_buffers(A) + [x], before):
            np.testing.assert_array_equal(b, saved)     # nothing the user passes is modified
        # and the same through sc.einsum (its own repeated-call path)
        assert_matches(sc.einsum("ij,j->i", A, x), oracle("ij,j->i", A, x))


def _buffers(A):
    if sp.issparse(A):
        if A.format == "coo":
            return [A.data, *A.coords]
        return [A.data, A.indices, A.indptr]
    return [A]


@pytest.mark.parametrize("expr,out_format", [("ij,jk->ik", None), ("ij,jk->ik", "dense"), ("ik,kj->ij", "csr")])
def test_matrix_products_in_any_order(expr, out_format, rng):
    """SpMM (dense result) and SpGEMM (sparse result) over changing shapes, widths, formats."""
    k = sc.compile(expr, out_format=out_format)
    A = csr(rng, (8, 6))
    B = csr(rng, (6, 5))
    kinds = [
        (A, B), (A, B.toarray()), (with_int64_indices(A), B), (A, with_int64_indices(B)),
        (csr(rng, (3, 9)), csr(rng, (9, 2))), (A.tocsc(), B), (A.astype(np.float32), B.astype(np.float32)),
        (sp.csr_array((5, 4)), csr(rng, (4, 3))), (csr(rng, (1, 1), 1.0), csr(rng, (1, 1), 1.0)),
    ]
    order = list(range(len(kinds))) * 3
    rng.shuffle(order)
    for j in order:
        L, R = kinds[j]
        got = k(L, R)
        want = oracle(expr, L, R)
        if out_format == "csr":
            assert got.format == "csr" and got.has_canonical_format
        assert_matches(got, want)


def test_bad_operands_after_fast_calls_are_refused(rng):
    A, x = csr(rng, (10, 10)), rng.random(10)
    k = sc.compile("ij,j->i")
    for _ in range(3):
        k(A, x)
    bad = A.copy()
    bad.indices[-1] = 10
    with pytest.raises(sc.OperandError, match="index 10"):
        k(bad, x)
    bad = A.copy()
    bad.indptr[-1] += 1
    with pytest.raises(sc.OperandError, match="indptr ends at"):
        k(bad, x)
    bad = A.copy()
    bad.data = bad.data[:-1]
    with pytest.raises(sc.OperandError, match="data has"):
        k(bad, x)
    with pytest.raises(sc.ShapeError):
        k(A, rng.random(9))
    with pytest.raises(sc.OperandError):
        k(A, x, x)
    assert_matches(k(A, x), A @ x)


def test_check_false_and_back(rng):
    """``check`` is read on every call: a kernel switched back to check=True validates."""
    A, x = csr(rng, (10, 10)), rng.random(10)
    k = sc.compile("ij,j->i")
    k(A, x)
    k.check = False
    assert_matches(k(A, x), A @ x)
    k.check = True
    bad = A.copy()
    bad.indices[0] = -1
    with pytest.raises(sc.OperandError, match="negative"):
        k(bad, x)


def test_forgotten_kernel_is_not_called_through_a_fast_plan(rng, monkeypatch):
    A, x = csr(rng, (10, 10)), rng.random(10)
    k = sc.compile("w_ovh[p] = Q_ovh[p,q] * u_ovh[q]")
    k(A, x)
    k(A, x)
    i0 = sc.cache_info()
    monkeypatch.setattr(specialization, "_loaded", {})       # as a new process would
    assert_matches(k(A, x), A @ x)
    assert sc.cache_info().disk_hits == i0.disk_hits + 1


def test_einsum_repeated_with_broadcasting_and_ellipsis(rng):
    """sc.einsum's repeated-call path must not skip size-1 broadcasting or ellipses."""
    A = csr(rng, (6, 6))
    for x in [rng.random(6), rng.random(1), rng.random(6), rng.random(1)]:
        assert_matches(sc.einsum("ij,j->i", A, x), oracle("ij,j->i", A, x))
    D = rng.random((2, 6, 6))
    for B in [D, rng.random((3, 6, 6)), rng.random((1, 6, 6)), D]:
        assert_matches(sc.einsum("...ij,j->...i", B, np.ones(6)), oracle("...ij,j->...i", B, np.ones(6)))


@pytest.mark.parametrize("bad", [1, 0, None, "yes"])
def test_einsum_flags_still_checked_after_repeated_calls(bad, rng):
    A, x = csr(rng, (4, 4)), rng.random(4)
    for _ in range(2):
        sc.einsum("ij,j->i", A, x, check=True)
        sc.einsum("ij,j->i", A, x, prune=False)
    with pytest.raises(sc.SparseccError, match="check must be"):
        sc.einsum("ij,j->i", A, x, check=bad)
    with pytest.raises(sc.SparseccError, match="prune must be"):
        sc.einsum("ij,j->i", A, x, prune=bad)


def test_einsum_repeated_with_formats_and_options(rng):
    A, x = csr(rng, (6, 6)), rng.random(6)
    want = A @ x
    for formats in [("csr", None), ["dcsr", "dense"], ("coo", None), None, ("csr", None)]:
        for options in [None, sc.Options(index_width=64), None]:
            got = sc.einsum("ij,j->i", A, x, formats=formats, options=options)
            assert_matches(got, want)
    with pytest.raises(sc.OperandError, match="formats names 1"):
        sc.einsum("ij,j->i", A, x, formats=("csr",))


def test_huge_dimension_class_changes_between_calls(rng):
    """A call whose index is far larger than what its operands store is planned apart
    (specialization.huge_dimension): small, huge, small again, through one kernel."""
    k = sc.compile("ik,kj->ij")
    small = (csr(rng, (5, 4)), csr(rng, (4, 3)))
    n = 300_000
    A = sp.csr_array((np.array([2.0, 3.0]), np.array([7, n - 1]), np.array([0, 1, 2, 2])), shape=(3, n))
    B = sp.csr_array((np.array([5.0, 7.0]), np.array([1, 2]), np.r_[np.zeros(8, np.int32), np.ones(n - 9, np.int32),
                                                                  [2, 2]].astype(np.int32)), shape=(n, 3))
    for L, R in [small, (A, B), small, (A, B)]:
        got = k(L, R)
        assert_matches(got, (L @ R).toarray())


def test_64_bit_dimension_between_small_calls():
    """An operand whose dimension needs 64-bit coordinates (a 'wide' plan) between small ones."""
    k = sc.compile("ij->i")
    huge = sp.csr_array((np.array([2.0]), np.array([2**31 + 5]), np.array([0, 1])), shape=(1, 2**32))
    small = sp.csr_array((np.array([1.0, 4.0]), np.array([0, 2]), np.array([0, 1, 2])), shape=(2, 3))
    for X, want in [(small, [1.0, 4.0]), (huge, [2.0]), (small, [1.0, 4.0]), (huge, [2.0])]:
        assert_matches(k(X), np.array(want))


def test_index_notation_kernel_by_position_and_name(rng):
    k = sc.compile("y[i] = A[i,j] * x[j]", A="csr")
    A, x = csr(rng, (5, 5)), rng.random(5)
    for _ in range(2):
        assert_matches(k(A, x), A @ x)
        assert_matches(k(A=A, x=x), A @ x)
        assert_matches(k(x=x, A=A), A @ x)
        assert_matches(k(A, x=x), A @ x)
    with pytest.raises(sc.OperandError):
        k(A)


@pytest.mark.parametrize("expr,shapes", [
    ("i,i->", [(7,), (7,)]),                # one index, a 0-d result
    ("ij->", [(4, 5)]),                     # one operand, a full reduction
    ("i->i", [(6,)]),                       # one index, a dense result of rank 1
    ("ij,ij->ij", [(3, 4), (3, 4)]),        # a sparse result from two sparse operands
    ("ijk,jr,kr->ir", [(4, 3, 5), (3, 2), (5, 2)]),     # a 3-D operand (COO: the general path)
])
def test_other_statement_shapes_repeatedly(expr, shapes, rng):
    """Statements with one index, 0-d results, one operand, N-d operands: repeated calls,
    sparse and dense operands alternating, against numpy.einsum."""
    k = sc.compile(expr)
    variants = []
    for make_sparse in (True, False):
        ops = []
        for s in shapes:
            a = random_sparse(s, 0.5, np.float64, rng, fmt="csr" if len(s) == 2 else "coo")
            ops.append(a if make_sparse and len(s) >= 2 or (make_sparse and len(s) == 1 and len(shapes) == 1)
                       else dense_of(a))
        variants.append(ops)
    variants.append([dense_of(o).astype(np.float32) for o in variants[0]])
    for j in [0, 0, 1, 1, 0, 2, 2, 1, 0]:
        got = k(*variants[j])
        assert_matches(got, oracle(expr, *variants[j]))


@pytest.mark.parametrize("out_format", ["csr", "csc"])
def test_sparse_results_are_what_scipys_constructor_builds(out_format, rng):
    """CSR/CSC results are built without SciPy's format check (runtime/results.py): the
    same attributes, flags and behaviour as the constructor's array over the same buffers."""
    from sparsecc.runtime import results
    A, B = csr(rng, (9, 7)), csr(rng, (7, 8))
    C = sc.einsum("ik,kj->ij", A, B, out_format=out_format)
    cls = sp.csr_array if out_format == "csr" else sp.csc_array
    ref = cls((C.data, C.indices, C.indptr), shape=C.shape)
    ref.has_canonical_format = True
    assert type(C) is cls and vars(C).keys() == vars(ref).keys() and C.shape == ref.shape
    assert all(type(s) is int for s in C.shape) and C.has_canonical_format and C.has_sorted_indices
    assert C.indices.dtype == np.int32 and C.indptr.dtype == np.int32
    assert repr(C) == repr(ref)
    want = A.toarray() @ B.toarray()
    assert_matches(C, want)
    assert_matches(C @ C.T, want @ want.T)
    assert_matches((C + C).toarray(), 2 * want)
    assert_matches(C.T.toarray(), want.T)
    C.sum_duplicates()                                 # a no-op on a canonical array
    assert_matches(C, want)
    empty = sc.einsum("ik,kj->ij", sp.csr_array((3, 4)), sp.csr_array((4, 2)), out_format=out_format)
    assert empty.nnz == 0 and empty.shape == (3, 2) and empty.toarray().sum() == 0


def test_sparse_results_without_the_direct_path(rng, monkeypatch):
    """Another SciPy whose arrays the probe does not recognize: SciPy's constructor."""
    from sparsecc.runtime import results
    monkeypatch.setattr(results, "_constant", {sp.csr_array: False, sp.csc_array: False})
    A, B = csr(rng, (6, 5)), csr(rng, (5, 4))
    C = sc.einsum("ik,kj->ij", A, B)
    assert C.format == "csr" and C.has_canonical_format
    assert_matches(C, A.toarray() @ B.toarray())


@pytest.mark.parametrize("expr,out_shape", [("ij,j->i", (9,)), ("ij->ij", (9, 7)), ("ij,jk->ijk", (9, 7, 8))])
def test_coo_results_are_what_scipys_constructor_builds(expr, out_shape, rng):
    """COO results are built without the constructor's checks too (runtime/results._coo:
    37 against 98 us for a sparse vector step): the same attributes, dtypes and behaviour as
    the constructor's canonical array over the same buffers, at every rank."""
    A, B, x = csr(rng, (9, 7)), csr(rng, (7, 8)), rng.random(7)
    ops = {"ij,j->i": (A, x), "ij->ij": (A,), "ij,jk->ijk": (A, B)}[expr]
    C = sc.einsum(expr, *ops, out_format="coo")
    ref = sp.coo_array((C.data, C.coords), shape=C.shape)
    ref.has_canonical_format = True
    assert type(C) is sp.coo_array and vars(C).keys() == vars(ref).keys() and C.shape == ref.shape == out_shape
    assert all(type(s) is int for s in C.shape) and C.has_canonical_format
    assert [c.dtype for c in C.coords] == [c.dtype for c in ref.coords] and repr(C) == repr(ref)
    want = np.einsum(expr, *[o.toarray() if sp.issparse(o) else o for o in ops])
    assert_matches(C, want)
    C.sum_duplicates()
    assert_matches(C, want)
    assert_matches((C + C).toarray(), 2 * want)
