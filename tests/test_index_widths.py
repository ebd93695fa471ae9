"""Index widths follow the operand's own index arrays (issue 14): a kernel reads int32 and
int64 SciPy index arrays as they are, compiling the variant for their width, instead of
copying int64 indices to 32 bits on every call.

The spy records the buffers the argument packer hands to native code; a zero-copy call
passes the user's own arrays (same address).  Results are compared with oracles that share
no code with sparsecc: ``numpy.einsum`` on dense copies and SciPy's products.
"""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.parse import parse_einsum
from sparsecc.runtime import call
from sparsecc.runtime.kernel import Kernel
from sparsecc.runtime.memref import ArgPacker

from conftest import assert_matches


@pytest.fixture
def passed(monkeypatch):
    """The addresses of every buffer each call hands to native code (per call, per operand)."""
    seen = []
    pack = ArgPacker.pack
    monkeypatch.setattr(call, "FAST", False)        # the repeated-call path packs without pack()

    def spy(self, scalars, operands, out):
        seen.append([{b.ctypes.data for b in (bufs if lv is not None else [bufs])} for bufs, lv in operands])
        return pack(self, scalars, operands, out)
    monkeypatch.setattr(ArgPacker, "pack", spy)
    return seen


def _matrix(rng, fmt, shape, density, dtype, idx):
    A = sp.random_array(shape, density=density, rng=rng, format="csr").astype(dtype)
    if dtype == np.complex128:
        A = A + 1j * A
    if fmt == "coo":
        A = A.tocoo()
        A.coords = tuple(c.astype(idx) for c in A.coords)
        A.has_canonical_format = True
        return A
    if fmt == "bsr":
        A = sp.bsr_array(A.toarray(), blocksize=(2, 2))
        A.sort_indices()            # SciPy's dense -> BSR leaves a block row's indices unsorted
        A = sp.bsr_array((A.data, A.indices, A.indptr), shape=A.shape)
    else:
        A = A.asformat(fmt)
    A.indices = A.indices.astype(idx)
    A.indptr = A.indptr.astype(idx)
    return A


def _index_arrays(A):
    return list(A.coords) if A.format == "coo" else [A.indptr, A.indices]


FORMATS = ["csr", "csc", "coo", "bsr"]
IDX = [np.int32, np.int64]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("idx", IDX)
def test_spmv_reads_the_users_index_arrays(rng, passed, fmt, idx):
    A = _matrix(rng, fmt, (40, 30), 0.2, np.float64, idx)
    x = rng.random(30)
    before = [a.copy() for a in _index_arrays(A)]
    k = sc.compile("ij,j->i")
    assert_matches(k(A, x), A.toarray() @ x)
    for a in _index_arrays(A):
        assert a.ctypes.data in passed[-1][0], f"{fmt} {np.dtype(idx)} index array copied"
    for a, b in zip(_index_arrays(A), before):      # nothing modified
        assert a.dtype == idx and np.array_equal(a, b)
    f = k.last_formats()[0]
    w = np.dtype(idx).itemsize * 8
    assert (f.pos_width, f.crd_width) == (w, w)
    ir = k.ir()     # the encoding, or a hand-written kernel's (CSC: scatter.py) index memrefs
    assert f"crdWidth = {w}" in ir or f"%A_crd: memref<?xi{w}>" in ir, ir[:400]


@pytest.mark.parametrize("idx", IDX)
def test_nd_coo_mttkrp_reads_the_users_coordinates(rng, passed, idx):
    d, r = 9, 3
    flat = np.sort(rng.choice(d ** 3, size=80, replace=False))
    T = sp.coo_array((rng.random(flat.size), np.unravel_index(flat, (d, d, d))), shape=(d, d, d))
    T.coords = tuple(c.astype(idx) for c in T.coords)   # built from coordinates: flagged non-canonical
    B, C = rng.random((d, r)), rng.random((d, r))
    got = sc.einsum("ijk,jr,kr->ir", T, B, C)
    assert_matches(got, np.einsum("ijk,jr,kr->ir", T.toarray(), B, C))
    for c in T.coords:
        assert c.ctypes.data in passed[-1][0]


def test_1d_csr_array_reads_its_own_arrays(rng, passed):
    v = sp.csr_array(rng.random(30) * (rng.random(30) < 0.3))
    assert v.format == "csr" and v.ndim == 1
    v.indices, v.indptr = v.indices.astype(np.int64), v.indptr.astype(np.int64)
    y = rng.random(30)
    assert_matches(sc.einsum("i,i->", v, y), v.toarray() @ y)
    assert v.indices.ctypes.data in passed[-1][0] and v.indptr.ctypes.data in passed[-1][0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("fmt", FORMATS)
def test_widths_by_format_and_dtype(rng, fmt, dtype):
    for idx in IDX:
        A = _matrix(rng, fmt, (12, 10), 0.3, dtype, idx)
        X = rng.random((10, 3)).astype(dtype)
        assert_matches(sc.einsum("ij,jk->ik", A, X), np.einsum("ij,jk->ik", A.toarray(), X))


@pytest.mark.parametrize("fmt", ["csr", "coo"])
@pytest.mark.parametrize("nnz", [0, 1])
def test_empty_and_single_entry_int64(fmt, nnz):
    rows, cols = np.arange(nnz, dtype=np.int64), np.arange(nnz, dtype=np.int64) + 2
    A = sp.coo_array((np.ones(nnz) * 2.5, (rows, cols)), shape=(4, 5))
    A = A.tocsr() if fmt == "csr" else A
    if fmt == "csr":
        A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    x = np.arange(5.0)
    assert_matches(sc.einsum("ij,j->i", A, x), A.toarray() @ x)


def test_mixed_widths_dense_and_sparse_results(rng):
    A = _matrix(rng, "csr", (15, 12), 0.3, np.float64, np.int32)
    B = _matrix(rng, "csr", (12, 9), 0.3, np.float64, np.int64)
    Ad, Bd = A.toarray(), B.toarray()
    k = sc.compile("ik,kj->ij", out_format="dense")
    assert_matches(k(A, B), Ad @ Bd)
    assert [(f.pos_width, f.crd_width) for f in k.last_formats()] == [(32, 32), (64, 64)]
    # sparse results keep the documented rule: 32-bit indices where the sizes fit
    C = sc.einsum("ik,kj->ij", A, B)
    assert sp.issparse(C) and C.indices.dtype == np.int32 and C.indptr.dtype == np.int32
    assert_matches(C.toarray(), Ad @ Bd)
    A2 = _matrix(rng, "csr", (15, 12), 0.3, np.float64, np.int64)
    A3 = _matrix(rng, "csr", (15, 12), 0.3, np.float64, np.int32)
    S = sc.einsum("ij,ij->ij", A2, A3)
    assert S.indices.dtype == np.int32
    assert_matches(S.toarray(), A2.toarray() * A3.toarray())
    T = _matrix(rng, "coo", (15, 12), 0.4, np.float64, np.int64)
    assert_matches(sc.einsum("ij,ij->ij", A2, T).toarray(), A2.toarray() * T.toarray())


def test_other_layout_keeps_32_bits(rng, passed):
    """A CSR operand run as DCSR is rebuilt anyway: 32 bits where sizes fit."""
    A = _matrix(rng, "csr", (20, 20), 0.2, np.float64, np.int64)
    x = rng.random(20)
    k = sc.compile("ij,j->i", "dcsr", "dense")
    assert_matches(k(A, x), A.toarray() @ x)
    f = k.last_formats()[0]
    assert (f.pos_width, f.crd_width) == (32, 32)


def test_fixed_widths_still_win(rng):
    A = _matrix(rng, "csr", (20, 20), 0.2, np.float64, np.int64)
    x = rng.random(20)
    for opts in (sc.Options(index_width=32), sc.Options(index_width=64)):
        k = sc.compile("ij,j->i", options=opts)
        assert_matches(k(A, x), A.toarray() @ x)
        assert k.last_formats()[0].pos_width == opts.index_width
    k = sc.compile("ij,j->i", sc.Format(("dense", "compressed"), pos_width=32, crd_width=32), "dense")
    assert_matches(k(A, x), A.toarray() @ x)
    assert k.last_formats()[0].crd_width == 32


def test_plans_follow_the_index_dtypes_between_calls(rng, passed):
    """Same kernel, same operand kind, other index dtype: another plan, both correct."""
    k = sc.compile("ij,j->i")
    A = _matrix(rng, "csr", (30, 25), 0.2, np.float64, np.int32)
    x = rng.random(25)
    for idx in (np.int32, np.int64, np.int32):
        A.indices, A.indptr = A.indices.astype(idx), A.indptr.astype(idx)
        assert_matches(k(A, x), A.toarray() @ x)
        assert A.indices.ctypes.data in passed[-1][0]


def test_coordinates_beyond_int32():
    """Coordinates that only int64 holds: 64-bit kernels, CSR and 3-D COO."""
    n = 3_000_000_000
    A = sp.csr_array((np.array([1.0, 2.0]), np.array([5, n - 1]), np.array([0, 1, 2])), shape=(2, n))
    assert A.indices.dtype == np.int64
    assert_matches(sc.einsum("ij->i", A), np.array([1.0, 2.0]))
    T = sp.coo_array((np.array([1.0, 2.0, 4.0]), (np.array([0, 1, 1]), np.array([7, n - 2, n - 1]),
                                                  np.array([1, 0, 1]))), shape=(2, n, 2))
    v = np.array([10.0, 100.0])
    # the oracle, written out: y[i] = sum over stored (i, j, k) of T * v[k]
    want = np.zeros(2)
    for i, _, kk, t in zip(*T.coords, T.data):
        want[i] += t * v[kk]
    assert_matches(sc.einsum("ijk,k->i", T, v), want)


@pytest.mark.parametrize("pos,crd", [(np.int64, np.int32), (np.int32, np.int64)])
def test_positions_and_coordinates_of_different_widths(rng, passed, pos, crd):
    A = _matrix(rng, "csr", (25, 20), 0.3, np.float64, np.int32)
    A.indptr, A.indices = A.indptr.astype(pos), A.indices.astype(crd)
    x = rng.random(20)
    k = sc.compile("ij,j->i")
    assert_matches(k(A, x), A.toarray() @ x)
    assert {A.indptr.ctypes.data, A.indices.ctypes.data} <= passed[-1][0]
    f = k.last_formats()[0]
    assert (f.pos_width, f.crd_width) == (np.dtype(pos).itemsize * 8, np.dtype(crd).itemsize * 8)


@pytest.mark.parametrize("idx", IDX)
@pytest.mark.parametrize("nnz", [1, 80])
def test_coordinates_that_are_columns_of_one_array_are_read_as_is(rng, passed, idx, nnz):
    """``np.unravel_index`` gives the columns of one (nnz, rank) array: run as array-of-structs
    COO, that array is the kernel's coordinate buffer (no copy)."""
    d, r = 9, 3
    flat = np.sort(rng.choice(d ** 3, size=nnz, replace=False))
    cols = np.ascontiguousarray(np.stack(np.unravel_index(flat, (d, d, d)), axis=1).astype(idx))
    T = sp.coo_array((rng.random(nnz), tuple(cols[:, k] for k in range(3))), shape=(d, d, d))
    T.coords = tuple(cols[:, k] for k in range(3))      # (SciPy's constructor may widen int32)
    assert all(np.shares_memory(c, cols) for c in T.coords)
    B, C = rng.random((d, r)), rng.random((d, r))
    k = sc.compile("ijk,jr,kr->ir")
    assert_matches(k(T, B, C), np.einsum("ijk,jr,kr->ir", T.toarray(), B, C))
    assert cols.ctypes.data in passed[-1][0]
    assert "singleton(soa)" not in k.ir() and k.last_formats()[0].crd_width == np.dtype(idx).itemsize * 8
    # the same kernel on unsorted columns (coalesced on a copy) and on separate arrays
    U = sp.coo_array((T.data[::-1].copy(), tuple(cols[::-1, k] for k in range(3))), shape=(d, d, d))
    U.coords = tuple(cols[::-1, k] for k in range(3))   # negative strides: not this layout
    assert_matches(k(U, B, C), np.einsum("ijk,jr,kr->ir", U.toarray(), B, C))
    S = sp.coo_array((T.data, tuple(np.ascontiguousarray(c) for c in T.coords)), shape=(d, d, d))
    assert_matches(k(S, B, C), np.einsum("ijk,jr,kr->ir", S.toarray(), B, C))


# ------------------------------------------------------------- checks of large COO operands
def _big_coo(rng, idx, d=40, nnz=None, columns=False):
    from sparsecc.runtime.validate import NATIVE_MIN
    nnz = nnz or NATIVE_MIN + 7
    flat = np.sort(rng.choice(d ** 3, size=nnz, replace=False))
    cols = np.ascontiguousarray(np.stack(np.unravel_index(flat, (d, d, d)), axis=1).astype(idx))
    T = sp.coo_array((rng.random(nnz), (cols[:, 0], cols[:, 1], cols[:, 2])), shape=(d, d, d))
    T.coords = tuple(cols[:, k] for k in range(3)) if columns else tuple(cols[:, k].copy() for k in range(3))
    return T, cols


@pytest.mark.parametrize("columns", [False, True])
@pytest.mark.parametrize("idx", IDX)
@pytest.mark.parametrize("bad,needle", [(40, "index 40, out of range"), (-3, "negative index")])
def test_large_coo_bad_coordinate_found(rng, idx, columns, bad, needle):
    """Large COO operands are checked by a native scan: a bad coordinate anywhere, in any
    dimension, is still refused with its value, before the kernel runs."""
    T, cols = _big_coo(rng, idx, columns=columns)
    x = rng.random(40)
    for dim in range(3):
        T2, _ = _big_coo(rng, idx, columns=columns)
        c = T2.coords[dim]
        c[len(c) // 2] = bad
        with pytest.raises(sc.OperandError, match=f"coordinate array {dim}.*{needle}"):
            sc.einsum("ijk,k->ij", T2, x)


@pytest.mark.parametrize("columns", [False, True])
@pytest.mark.parametrize("check", [True, False])
def test_large_coo_order_found(rng, columns, check):
    """Sorted large COO arrays are read as they are; unsorted or duplicated ones are
    coalesced on a copy (the native scan decides), whether validation runs or not."""
    T, cols = _big_coo(rng, np.int64, columns=columns)
    x = rng.random(40)
    k = sc.compile("ijk,k->ij", check=check)
    want = np.einsum("ijk,k->ij", T.toarray(), x)
    assert_matches(k(T, x), want)
    for perm in (np.arange(T.nnz)[::-1], np.r_[0, 0, 1:T.nnz]):   # unsorted; a duplicate
        c = [a[perm].copy() for a in T.coords]
        U = sp.coo_array((T.data[perm], tuple(c)), shape=T.shape)
        U.coords = tuple(c)
        assert_matches(k(U, x), np.einsum("ijk,k->ij", U.toarray(), x))


@pytest.mark.parametrize("dtype", [np.uint64, np.uint32, np.int16])
def test_other_coordinate_dtypes_are_copied_and_right(rng, dtype):
    c = [np.array([0, 1, 1, 2], dtype), np.array([2, 0, 1, 1], dtype), np.array([1, 1, 0, 0], dtype)]
    T = sp.coo_array((np.arange(1.0, 5.0), tuple(c)), shape=(3, 3, 2))
    T.coords = tuple(c)
    x = rng.random(2)
    want = np.zeros(3)                  # written out (SciPy's toarray refuses uint64)
    for i, _, k, v in zip(*c, T.data):
        want[i] += v * x[k]
    assert_matches(sc.einsum("ijk,k->i", T, x), want)
    assert all(a.dtype == dtype for a in T.coords)


@pytest.mark.parametrize("check", [True, False])
def test_large_coo_is_scanned_once_per_call(rng, monkeypatch, check):
    from sparsecc.runtime import operands, validate
    T, _ = _big_coo(rng, np.int64, columns=True)
    x = rng.random(40)
    k = sc.compile("ijk,k->ij", "coo", "dense", out_format="dense", check=check)
    k(T, x)
    scans = []
    real = validate.coo_scan

    def spy(*a):
        scans.append(1)
        return real(*a)
    monkeypatch.setattr(validate, "coo_scan", spy)
    monkeypatch.setattr(operands, "coo_scan", spy)
    assert_matches(k(T, x), np.einsum("ijk,k->ij", T.toarray(), x))
    assert len(scans) == 1


def test_order_found_by_validation_is_not_reused_by_a_later_call(rng, passed):
    """The order validation finds serves only the call that found it: a call that fails
    after validating, then an in-place change, then an unchecked call sees the change
    (the operand is coalesced on a copy, not read as sorted)."""
    T, _ = _big_coo(rng, np.int64)
    k = sc.compile("ijk,k->ij", out_format="dense")
    with pytest.raises(sc.ShapeError):
        k(T, np.ones(41))                   # validated (sorted), then refused
    for c in T.coords:
        c[:2] = c[1::-1].copy()             # the first two entries swapped: not sorted any more
    T.data[:2] = T.data[1::-1].copy()
    x = rng.random(40)
    unchecked = sc.compile("ijk,k->ij", out_format="dense", check=False)
    assert_matches(unchecked(T, x), np.einsum("ijk,k->ij", T.toarray(), x))
    assert not any(c.ctypes.data in passed[-1][0] for c in T.coords)


def test_build_keeps_the_operands_own_widths(rng):
    """operands.build (the op library's structural kernels use it) reads int64 index
    arrays as they are too; results of structural ops stay right."""
    from sparsecc.formats import resolve
    from sparsecc.runtime.operands import build
    A = _matrix(rng, "csr", (20, 16), 0.3, np.float64, np.int64)
    s = build(A, resolve("csr", 2), "A")
    assert (s.fmt.pos_width, s.fmt.crd_width) == (64, 64)
    assert all(np.shares_memory(m, t) for m, t in zip(s.buffers, (A.indptr, A.indices, A.data)))
    T = _matrix(rng, "coo", (20, 16), 0.3, np.float64, np.int64)
    s = build(T, resolve("coo", 2), "T")
    assert s.fmt.crd_width == 64 and np.shares_memory(s.buffers[1], T.coords[0])
    D = A.toarray()
    assert_matches(sc.ops.getitem(A, (slice(3, 11), slice(None, None, 2))).toarray(), D[3:11, ::2])
    assert_matches(sc.ops.cat([A, A], dim=0).toarray(), np.concatenate([D, D], axis=0))
    assert_matches(sc.ops.getitem(T, (slice(2, 9), slice(1, 7))).toarray(), T.toarray()[2:9, 1:7])


def test_large_coo_checks_without_a_compiler(rng, monkeypatch):
    """Where the scan cannot be compiled (an install for ahead-of-time libraries only),
    NumPy checks large COO operands: still refused with the same message."""
    from sparsecc.runtime import loader, validate
    monkeypatch.setattr(validate, "_scan_modules", {})

    def no_compiler(*a, **k):
        raise sc.CompileError("no compiler here")
    monkeypatch.setattr(loader, "load_module", no_compiler)
    T, _ = _big_coo(rng, np.int32)
    assert validate.coo_scan(T.coords, T.shape) is None
    T.coords[1][5] = 40
    with pytest.raises(sc.OperandError, match="coordinate array 1.*index 40"):
        validate.validate(T, "T")


def test_ir_before_and_after_calls_of_each_width(rng):
    # a Kernel of its own: sc.compile memoizes kernels, and another test may have called it
    k = Kernel(parse_einsum("ij,j->i", 2), {"#0": "csr", "#1": "dense"})
    assert "posWidth = 32" in k.ir()                # before any call: 32-bit float64 operands
    for idx, w in ((np.int64, 64), (np.int32, 32)):
        A = _matrix(rng, "csr", (10, 8), 0.3, np.float64, idx)
        x = rng.random(8)
        assert_matches(k(A, x), A.toarray() @ x)
        assert f"posWidth = {w}, crdWidth = {w}" in k.ir()


def _columns_layouts(cols):
    """Coordinate tuples over ``cols`` (a C-ordered (nnz, 3) array): which ones are the
    columns of one (nnz, rank) array (read as the coordinate buffer) and which only look so."""
    n = cols.shape[0]
    wide = np.zeros((n, 4), cols.dtype)
    wide[:, :3] = cols
    flat = cols.reshape(-1)
    return {
        "aos": (tuple(cols[:, k] for k in range(3)), cols.ctypes.data),
        "aos-of-a-1d-base": (tuple(flat[k::3] for k in range(3)), cols.ctypes.data),   # the same bytes
        "3-of-4-columns": (tuple(wide[:, k] for k in range(3)), None),    # stride 4: not this layout
        "swapped-columns": ((cols[:, 1], cols[:, 0], cols[:, 2]), None),   # same base, wrong offsets
        "repeated-column": ((cols[:, 0], cols[:, 0], cols[:, 2]), None),
        "every-other-row": (tuple(cols[::2, k] for k in range(3)), None),
        "fortran": (tuple(np.asfortranarray(cols)[:, k] for k in range(3)), None),   # SoA: contiguous
        "byte-swapped": (tuple(cols.astype(cols.dtype.newbyteorder(">"))[:, k] for k in range(3)), None),
    }


@pytest.mark.parametrize("layout", ["aos", "aos-of-a-1d-base", "3-of-4-columns", "swapped-columns", "repeated-column",
                                    "every-other-row", "fortran", "byte-swapped"])
@pytest.mark.parametrize("idx", IDX)
def test_only_exact_columns_of_one_array_are_the_coordinate_buffer(rng, passed, layout, idx):
    """The array-of-structs reading takes coordinates whose bytes are exactly a C-ordered
    (nnz, rank) array's (column k at offset k, stride rank, one dtype); anything that only
    shares a base or a stride is read another way, with results right either way."""
    d, r, nnz = 7, 3, 40
    flat = np.sort(rng.choice(d ** 3, size=nnz, replace=False))
    cols = np.ascontiguousarray(np.stack(np.unravel_index(flat, (d, d, d)), axis=1).astype(idx))
    coords, base = _columns_layouts(cols)[layout]
    T = sp.coo_array((rng.random(len(coords[0])), coords), shape=(d, d, d))
    T.coords = coords                    # as given (SciPy's constructor may convert)
    B, C = rng.random((d, r)), rng.random((d, r))
    k = sc.compile("ijk,jr,kr->ir")
    dense = np.zeros((d, d, d))
    np.add.at(dense, tuple(np.asarray(c, np.int64) for c in coords), T.data)
    assert_matches(k(T, B, C), np.einsum("ijk,jr,kr->ir", dense, B, C))
    if base is not None:
        assert base in passed[-1][0]                         # that array itself, no copy
        assert "singleton(soa)" not in str(k.last_formats()[0])
    else:
        assert cols.ctypes.data not in passed[-1][0]


@pytest.mark.parametrize("idx", IDX)
def test_columns_of_one_array_mutated_between_calls(rng, passed, idx):
    """The coordinate buffer is read on every call: coordinates and values changed in place
    (still sorted, then unsorted with a duplicate), new columns of another array, separate
    arrays - each call's result is that call's operand's, and the array itself is passed
    whenever it can be."""
    d, r, nnz = 7, 3, 40
    shape = (d, d, d)

    def cols_of(seed_flat):
        return np.ascontiguousarray(np.stack(np.unravel_index(seed_flat, shape), axis=1).astype(idx))
    cols = cols_of(np.sort(rng.choice(d ** 3, size=nnz, replace=False)))
    T = sp.coo_array((rng.random(nnz), tuple(cols[:, k] for k in range(3))), shape=shape)
    T.coords = tuple(cols[:, k] for k in range(3))
    B, C = rng.random((d, r)), rng.random((d, r))
    k = sc.compile("ijk,jr,kr->ir")

    def check(passes=None):
        dense = np.zeros(shape)
        np.add.at(dense, tuple(np.asarray(c, np.int64) for c in T.coords), T.data)
        assert_matches(k(T, B, C), np.einsum("ijk,jr,kr->ir", dense, B, C))
        if passes is not None:
            assert (passes in passed[-1][0]) is True
    check(cols.ctypes.data)
    cols[:] = cols_of(np.sort(rng.choice(d ** 3, size=nnz, replace=False)))     # in place, sorted
    T.data[:] = rng.random(nnz)
    check(cols.ctypes.data)
    cols[:] = cols[::-1].copy()                                                  # unsorted
    cols[1] = cols[0]                                                            # a duplicate
    check()
    other = cols_of(np.sort(rng.choice(d ** 3, size=nnz, replace=False)))
    T.coords = tuple(other[:, k] for k in range(3))
    check(other.ctypes.data)
    T.coords = tuple(other[:, k].copy() for k in range(3))                       # separate arrays
    check(T.coords[0].ctypes.data)
