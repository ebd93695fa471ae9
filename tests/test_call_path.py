"""The call path: plans cached per kind of operand, never per operand contents, and
``Options.index_width``.

A kernel caches, per kind of call (operand types, dtypes, ranks, formats, whether anything
needs 64-bit indices), the resolved formats, the compiled kernel and the layout of its
arguments.  Everything read from an operand - its buffers, shape, sortedness flag - is read
and validated again on every call, so changing an operand between calls is always seen.
"""

import threading

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.runtime import memref, specialization, validate
from sparsecc.runtime.memref import ArgPacker

from conftest import assert_matches, random_sparse


def csr(rng, shape=(6, 5), density=0.4):
    return random_sparse(shape, density, np.float64, rng, fmt="csr")


# ------------------------------------------------------------------ changes between calls
def test_changed_values_are_seen(rng):
    A, x = csr(rng), rng.random(5)
    k = sc.compile("ij,j->i", "csr", "dense")
    assert_matches(k(A, x), A @ x)
    A.data *= -3.0                                  # in place: same arrays, same plan
    assert_matches(k(A, x), A @ x)
    x[:] = rng.random(5)
    assert_matches(k(A, x), A @ x)


@pytest.mark.parametrize("change,needle", [
    (lambda A: A.indices.__setitem__(0, 99), "index 99"),
    (lambda A: A.indices.__setitem__(1, -4), "negative"),
    (lambda A: A.indptr.__setitem__(-1, A.indptr[-1] + 3), "indptr ends at"),
    (lambda A: A.indptr.__setitem__(2, A.indptr[-1] + 1), "decreases"),
    (lambda A: setattr(A, "data", A.data[:-1]), "data has"),
    (lambda A: setattr(A, "indices", A.indices.astype(np.float64)), "integers"),
    (lambda A: setattr(A, "data", np.ones((len(A.data), 1))), "one-dimensional"),
], ids=["index-too-large", "negative-index", "indptr-past-end", "indptr-decreasing", "short-data",
        "float-indices", "2d-data"])
def test_invalid_after_a_valid_call_is_an_error(rng, change, needle):
    A, x = csr(rng), rng.random(5)
    assert A.indptr[2] > 0
    k = sc.compile("ij,j->i", "csr", "dense")
    assert_matches(k(A, x), A @ x)                  # a plan exists now
    good = A.copy()
    change(A)
    with pytest.raises(sc.OperandError, match=needle):
        k(A, x)
    assert_matches(k(good, x), good @ x)            # and the kernel still works


@pytest.mark.parametrize("n", [3, 40, 200])          # small (list) and large (NumPy) checks
def test_invalid_index_found_at_any_size(rng, n):
    A = csr(rng, (n, n), 0.3)
    A.indices[-1] = n
    with pytest.raises(sc.OperandError, match=f"index {n}"):
        sc.einsum("ij,j->i", A, np.ones(n))


def test_other_shapes_dtypes_and_layouts_between_calls(rng):
    k = sc.compile("ij,j->i")
    before = sc.cache_info()
    for shape in [(6, 5), (40, 31), (1, 1), (0, 3), (6, 5)]:
        A, x = csr(rng, shape), rng.random(shape[1])
        assert_matches(k(A, x), A @ x)
    after = sc.cache_info()
    A, x = csr(rng), rng.random(5)
    A.indices = A.indices.astype(np.int64)          # int64 indices: copied to 32 bits
    assert_matches(k(A, x), A @ x)
    assert A.indices.dtype == np.int64              # the operand is untouched
    xs = rng.random(10)[::2]                        # a strided vector: copied
    assert_matches(k(A, xs), A @ xs)
    A32 = A.astype(np.float32)
    assert_matches(k(A32, x.astype(np.float32)), A32 @ x.astype(np.float32))
    assert_matches(k(A.tocsc(), x), A @ x)           # another format: another plan
    assert_matches(k(A.toarray(), x), A @ x)         # dense
    assert_matches(k(A.toarray().tolist(), list(x)), A @ x)   # array-likes
    assert after.misses >= before.misses


def test_rank_and_shape_errors_after_a_plan(rng):
    A, x = csr(rng), rng.random(5)
    k = sc.compile("ij,j->i")
    k(A, x)
    with pytest.raises(sc.ShapeError, match="index 'j' has size 5"):
        k(A, np.ones(4))
    with pytest.raises(sc.ShapeError, match="2 dimensions|1 indices"):
        k(A, np.ones((5, 1)))
    assert_matches(k(A, x), A @ x)


def test_non_canonical_after_canonical(rng):
    A, x = csr(rng, (3, 3), 0.5), rng.random(3)
    k = sc.compile("ij,j->i", "csr", "dense")
    assert_matches(k(A, x), A @ x)
    # duplicates and unsorted indices: summed and sorted on a copy, the operand untouched
    B = sp.csr_array((np.array([1.0, 2.0, 4.0, 8.0]), np.array([2, 2, 0, 1]), np.array([0, 3, 3, 4])),
                     shape=(3, 3))
    assert not B.has_canonical_format
    before = (B.data.copy(), B.indices.copy())
    assert_matches(k(B, x), np.array([3 * x[2] + 4 * x[0], 0.0, 8 * x[1]]))
    np.testing.assert_array_equal(B.data, before[0])
    np.testing.assert_array_equal(B.indices, before[1])


@pytest.mark.parametrize("fmt", ["csr", "coo", "dcsr", "dense"])
def test_values_in_foreign_byte_order(fmt, rng):
    """SciPy's constructors refuse such values, but they can be assigned."""
    A, x = csr(rng), rng.random(5)
    if fmt == "dense":
        big = A.toarray().astype(">f8")
    else:
        big = A.tocoo() if fmt == "coo" else A.copy()
        big.data = big.data.astype(">f8")
    got = sc.einsum("ij,j->i", big, x.astype(">f8"), formats=[None if fmt in ("coo", "dense") else fmt, None])
    np.testing.assert_allclose(got, A @ x, rtol=1e-12)


def test_forgetting_loaded_kernels_reaches_planned_kernels(rng, monkeypatch):
    A, x = csr(rng), rng.random(5)
    # an expression no other test compiles: another test may have loaded "ij,j->i" from
    # another cache folder (the bench suite runs in-process with its own), which a fresh
    # cache folder then lacks
    k = sc.compile("w_fgt[p] = Q_fgt[p,q] * u_fgt[q]", Q_fgt="csr")
    k(A, x)
    i0 = sc.cache_info()
    k(A, x)
    i1 = sc.cache_info()
    assert (i1.hits, i1.disk_hits, i1.misses) == (i0.hits + 1, i0.disk_hits, i0.misses)
    monkeypatch.setattr(specialization, "_loaded", {})       # as a new process: load from disk again
    assert_matches(k(A, x), A @ x)
    i2 = sc.cache_info()
    assert (i2.disk_hits, i2.misses) == (i1.disk_hits + 1, i1.misses)


def test_threads_with_different_shapes(rng):
    """Each thread packs its arguments in its own block."""
    k = sc.compile("ij,j->i", "csr", "dense")
    cases = [(csr(np.random.default_rng(s), (5 + s, 3 + s)), np.random.default_rng(s).random(3 + s))
             for s in range(8)]
    k(*cases[0])
    errors = []
    barrier = threading.Barrier(8)

    def run(A, x):
        barrier.wait()
        try:
            for _ in range(200):
                np.testing.assert_allclose(k(A, x), A @ x, rtol=1e-12)
        except Exception as err:           # noqa: BLE001 - reported below
            errors.append(err)

    ts = [threading.Thread(target=run, args=c) for c in cases]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_sparse_results_repeatedly(rng):
    k = sc.compile("ik,kj->ij")
    for shape in [(6, 5), (9, 9), (1, 4), (6, 5)]:
        A, B = csr(rng, shape), csr(rng, shape[::-1])
        C = k(A, B)
        assert C.format == "csr" and C.has_canonical_format
        assert_matches(C, A.toarray() @ B.toarray())


# ------------------------------------------------------------------ index_width
FORMATS = ["csr", "csc", "coo", "dcsr", "csf", "bsr2x2"]


def _operand(fmt, rng, shape):
    A = csr(rng, shape, 0.35)
    return {"csc": A.tocsc(), "coo": A.tocoo(), "bsr2x2": A.tobsr((2, 2))}.get(fmt, A)


def _own_width(A, fmt):
    """index_width=None: the widths of the operand's own index arrays where the kernel reads
    them as they are (its own layout), else 32 (docs/formats.md)."""
    if fmt in ("dcsr", "csf"):
        return 32, 32
    if fmt == "coo":
        return (A.coords[0].dtype.itemsize * 8,) * 2
    return A.indptr.dtype.itemsize * 8, A.indices.dtype.itemsize * 8


@pytest.mark.parametrize("width", [None, 32, 64])
@pytest.mark.parametrize("fmt", FORMATS)
def test_index_width_spmv(fmt, width, rng):
    A, x = _operand(fmt, rng, (6, 4)), rng.random(4)
    index = (lambda a: a.coords[0]) if fmt == "coo" else (lambda a: a.indices)
    dtype, before = index(A).dtype, index(A).copy()
    k = sc.compile("ij,j->i", fmt, "dense", options=sc.Options(index_width=width))
    assert_matches(k(A, x), A.toarray() @ x)
    used = k.last_formats()[0]
    assert (used.pos_width, used.crd_width) == ((64, 64) if width == 64 else (32, 32) if width == 32
                                                else _own_width(A, fmt))
    ir = k.ir()     # the encoding, or a hand-written kernel's (CSC: scatter.py) index memrefs
    assert f"posWidth = {used.pos_width}" in ir or f"%A_pos: memref<?xi{used.pos_width}>" in ir, ir[:400]
    assert index(A).dtype == dtype                 # widened or narrowed on a copy
    np.testing.assert_array_equal(index(A), before)


@pytest.mark.parametrize("width", [None, 32, 64])
@pytest.mark.parametrize("fmt", FORMATS)
def test_index_width_spgemm_sparse_result(fmt, width, rng):
    A, B = _operand(fmt, rng, (6, 4)), _operand(fmt, rng, (4, 6))
    k = sc.compile("ik,kj->ij", fmt, fmt, options=sc.Options(index_width=width))
    C = k(A, B)
    assert_matches(C, A.toarray() @ B.toarray())
    want = np.int64 if width == 64 else np.int32
    assert C.format == "csr" and C.indptr.dtype == want and C.indices.dtype == want
    out = k.last_specialization().out_format
    assert (out.pos_width, out.crd_width) == ((64, 64) if width == 64 else (32, 32))
    assert all(f.pos_width == (64 if width == 64 else 32) for f in k.last_formats()) or (
        width is None and [f.pos_width for f in k.last_formats()] == [_own_width(X, fmt)[0] for X in (A, B)])


def test_index_width_64_complex_and_nd(rng):
    T = random_sparse((3, 4, 5), 0.3, np.complex128, rng)
    M = rng.random((5, 2))
    k = sc.compile("ijk,kr->ijr", "csf", "dense", options=sc.Options(index_width=64))
    assert_matches(k(T, M), np.einsum("ijk,kr->ijr", T.toarray(), M))
    A = csr(rng)
    k = sc.compile("ij,ij->ij", "csr", "csr", options=sc.Options(index_width=64))
    Z = A.astype(np.complex128) * (1 + 2j)
    C = k(A, Z)                                     # real values converted to complex, 64-bit
    assert_matches(C, A.toarray() * Z.toarray())
    assert C.indices.dtype == np.int64


def test_fixed_format_width_wins_over_index_width(rng):
    A, x = csr(rng), rng.random(5)
    f = sc.Format(("dense", "compressed"), pos_width=32, crd_width=32)
    k = sc.compile("ij,j->i", f, "dense", options=sc.Options(index_width=64))
    assert_matches(k(A, x), A @ x)
    assert k.last_formats()[0].pos_width == 32


def _huge():
    """One entry in a 1 x 2^32 matrix: its column index needs 64 bits (no large allocation)."""
    return sp.csr_array((np.array([2.0]), np.array([2**31 + 5]), np.array([0, 1])), shape=(1, 2**32))


def test_index_width_32_refuses_an_operand_that_needs_64():
    with pytest.raises(sc.OperandError, match="index_width=32"):
        sc.einsum("ij->i", _huge(), options=sc.Options(index_width=32))


@pytest.mark.parametrize("width", [None, 64])
def test_operand_that_needs_64_bits_runs_with_none_and_64(width):
    k = sc.compile("ij->i", options=sc.Options(index_width=width))
    assert_matches(k(_huge()), np.array([2.0]))
    assert k.last_formats()[0].crd_width == 64


def test_index_width_32_refuses_a_result_that_may_need_64(rng):
    # column 0 of A and row 0 of B full: 70000^2 > 2^31 - 1 products, so as many possible
    # entries (a result whose operands make fewer products keeps 32 bits: test_result_widths)
    A = sp.csr_array((np.ones(70_000), np.zeros(70_000, np.int32), np.arange(70_001, dtype=np.int32)),
                     shape=(70_000, 2))
    B = A.T.tocsr()
    with pytest.raises(sc.OperandError, match="index_width=32"):
        sc.einsum("ik,kj->ij", A, B, options=sc.Options(index_width=32))


# ------------------------------------------------------------------ pieces, without native code
def test_addresses_match_numpy():
    base = np.arange(20.0)
    for a in [base, base[3:], base[::2].copy(), np.empty(0), np.zeros((3, 4), np.int32)[1:], np.float64(1.0) * base]:
        assert memref.address(a) == a.ctypes.data


def test_packer_refuses_a_mismatch_before_native_code():
    p = ArgPacker(2, [(3, 2), 1], 1)
    a, x, out = np.zeros(3, np.int32), np.zeros(4), np.zeros(4)
    p.pack([4, 4], [([a, a, x], [4, 4]), (x, None)], out)               # fits
    with pytest.raises(ValueError):
        p.pack([4, 4], [([a, x], [4, 4]), (x, None)], out)             # a buffer missing
    with pytest.raises(ValueError):
        p.pack([4, 4], [([a, a, x], [4, 4]), (np.zeros((2, 2)), None)], out)   # wrong rank
    with pytest.raises(ValueError):
        p.pack([4], [([a, a, x], [4, 4]), (x, None)], out)                # a size missing


def test_packer_layout():
    p = ArgPacker(1, [(3, 2), 2], 2)
    a, v = np.arange(3, dtype=np.int32), np.arange(5.0)
    X, out = np.zeros((4, 3)), np.zeros((2, 3))
    block, base = p.pack([7], [([a, a[1:], v], [2, 4]), (X, None)], out)
    argv = list(block[:len(p.offsets)])
    words = list(block)
    at = [(q - base) // 8 for q in argv]
    assert words[at[0]] == 7
    assert words[at[1]:at[1] + 5] == [a.ctypes.data, a.ctypes.data, 0, 3, 1]
    assert words[at[2]:at[2] + 5] == [a[1:].ctypes.data, a[1:].ctypes.data, 0, 2, 1]
    assert words[at[4]:at[4] + 5] == [2, 4, 3, 2, 5]                     # level sizes, buffer sizes
    assert words[at[5]:at[5] + 7] == [X.ctypes.data, X.ctypes.data, 0, 4, 3, 3, 1]
    assert words[at[6]:at[6] + 7] == [out.ctypes.data, out.ctypes.data, 0, 2, 3, 3, 1]
    other = []                                      # another thread: its own block
    t = threading.Thread(target=lambda: other.append(p.block()[1]))
    t.start()
    t.join()
    assert other[0] != base


@pytest.mark.parametrize("n", [5, validate.SMALL + 10])
def test_small_and_large_validation_agree(n):
    A = sp.csr_array(np.eye(n))
    cases = {"index": ("indices", 0, n + 2, f"index {n + 2}"), "negative": ("indices", 1, -1, "negative"),
             "start": ("indptr", 0, 1, "start at 0"), "decrease": ("indptr", 2, 0, "decreases at row 1")}
    for name, (field, at, value, needle) in cases.items():
        B = A.copy()
        getattr(B, field)[at] = value
        with pytest.raises(sc.OperandError, match=needle):
            validate.validate(B, "operand 0")
    validate.validate(A, "operand 0")
