"""Results out: the buffers of a sparse result, adopted by NumPy and wrapped as SciPy arrays.

A kernel with a sparse result returns its storage (MLIR's codegen ABI): one memref per
buffer (positions and coordinates per level, then values) and a specifier whose
``mem_sizes`` give the used length of each buffer (the allocations are larger).  The kernel
``malloc``-ed every buffer and the caller owns it: each becomes a NumPy array over the
kernel's memory, without a copy, and libc ``free`` runs exactly once, when the last array
viewing it is collected.
"""

from __future__ import annotations

import ctypes
import weakref
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from ..formats import Format
from .memref import descriptor_class, specifier_class

_libc = ctypes.CDLL(None)
_free = _libc.free
_free.argtypes = [ctypes.c_void_p]
_free.restype = None


@lru_cache(maxsize=None)
def result_class(nbuffers: int, nlevels: int) -> type:
    """The struct a kernel returns a sparse tensor in: the buffers' memref descriptors,
    then the storage specifier (MLIR packs multiple results into one struct)."""
    fields = [(f"b{k}", descriptor_class(1)) for k in range(nbuffers)]
    fields.append(("spec", specifier_class(nlevels, nbuffers)))
    return type(f"SparseResult{nbuffers}x{nlevels}", (ctypes.Structure,), {"_fields_": fields})


def new_result(fmt: Format):
    return result_class(len(fmt.fields()), len(fmt.levels))()


def result_view(fmt: Format, block, offset: int):
    """The result struct inside an argument block (see ``memref.ArgPacker``)."""
    return result_class(len(fmt.fields()), len(fmt.levels)).from_buffer(block, offset)


def release(res) -> None:
    """Free every buffer of the sparse result struct ``res`` without adopting it: for a
    kernel that returned normally but reported an index out of range (rc 2), whose result
    the call discards.  (After rc 1, a jump out of a failed allocation, the struct holds no
    result: nothing to free.)"""
    freed: set = set()
    for name, _ in res._fields_:
        if name.startswith("b"):
            base = getattr(res, name).allocated
            if base and base not in freed:
                freed.add(base)
                _free(base)


def _adopt(desc, n: int, dtype: np.dtype, freed: set) -> np.ndarray:
    """The first ``n`` elements of a kernel-allocated buffer as an array that frees it."""
    base = desc.allocated
    if n == 0:
        if base and base not in freed:
            freed.add(base)
            _free(base)
        return np.empty(0, dtype)
    ptr = desc.aligned + desc.offset * dtype.itemsize
    raw = (ctypes.c_char * (n * dtype.itemsize)).from_address(ptr)
    if base not in freed:          # one free per allocation, however many views
        freed.add(base)
        weakref.finalize(raw, _free, base)
    return np.frombuffer(raw, dtype=dtype)


def adopt_buffers(res, fmt: Format, dtype: np.dtype) -> tuple[list[np.ndarray], list[int]]:
    """Every buffer of the returned sparse tensor, in field order, and its level sizes."""
    spec = res.spec
    freed: set = set()
    out = []
    for k, (kind, _) in enumerate(fmt.fields()):
        if kind == "val":
            t = dtype
        else:
            t = np.dtype(np.int32 if (fmt.pos_width if kind == "pos" else fmt.crd_width) == 32 else np.int64)
        out.append(_adopt(getattr(res, f"b{k}"), int(spec.mem_sizes[k]), t, freed))
    return out, list(spec.lvl_sizes)


def level_coordinates(fmt: Format, bufs: list[np.ndarray], lvl_sizes: list[int]) -> list[np.ndarray]:
    """The coordinate of every stored value, per level (the inverse of the level builder)."""
    fields = {f: b for f, b in zip(fmt.fields(), bufs)}
    aos = fmt.aos_coo_start()
    coords: list[np.ndarray] = []       # per level, one entry per node of that level
    nparent = 1
    for l, size in enumerate(lvl_sizes):
        base = fmt.level_base(l)
        if base == "dense":
            coords = [np.repeat(c, size) for c in coords]
            coords.append(np.tile(np.arange(size, dtype=np.int64), nparent))
            nparent *= size
        elif base in ("compressed", "loose_compressed"):
            pos = fields[("pos", l)].astype(np.int64)
            if base == "compressed":
                lo, hi = pos[:-1], pos[1:]
            else:
                lo, hi = pos[0::2], pos[1::2]
            counts = hi - lo
            crd = _crd(fields, fmt, aos, l)
            if len(lo) == 1 and not coords:     # a top level (COO): its nodes are one range
                coords_idx = slice(int(lo[0]), int(hi[0]))
                coords.append(crd[coords_idx].astype(np.int64))
                nparent = int(counts[0])
                continue
            # nodes in order; loose segments may leave gaps, so gather by position
            idx = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(counts.sum())
            coords = [np.repeat(c, counts) for c in coords]
            coords.append(crd[idx].astype(np.int64))
            nparent = int(counts.sum())
            coords_idx = idx
        else:   # singleton: one coordinate per node of the level above
            crd = _crd(fields, fmt, aos, l)
            coords.append(crd[coords_idx].astype(np.int64))
    return coords


def _crd(fields, fmt: Format, aos, l: int) -> np.ndarray:
    if aos is not None and aos <= l < fmt.aos_coo_end(aos):
        width = len(fmt.levels) - aos
        return fields[("crd", aos)].reshape(-1, width)[:, l - aos]
    return fields[("crd", l)]


def wrap(fmt: Format, shape: tuple[int, ...], dtype: np.dtype, res, prune: bool = False):
    """A SciPy array over the returned buffers: csr/csc/bsr where SciPy has the layout
    (no copy), otherwise an N-d coo_array with canonical coordinates."""
    bufs, lvl_sizes = adopt_buffers(res, fmt, dtype)
    out = _scipy(fmt, shape, bufs, lvl_sizes)
    if prune:
        out = _prune(out)
    return out


def as_csc(a):
    """A kernel's CSR result ``a`` stored as CSC (SciPy's O(nnz) transposition of its
    buffers), built as a CSC result is (:func:`_compressed`): a contraction's CSC result is
    built as CSR (``specialization.csc_built_as_csr``)."""
    y = a.tocsc()
    if y.indices.dtype == _I32 and y.indptr.dtype == _I32 and _direct(sp.csc_array):
        return _compressed(sp.csc_array, y.data, y.indices, y.indptr, a.shape)
    return _canonical(y)


def _canonical(a):
    if a.format in ("csr", "csc"):
        a.has_sorted_indices = True
    a.has_canonical_format = True
    return a


_I32 = np.dtype(np.int32)
_VARIABLE = frozenset({"_shape", "indices", "indptr", "data", "_has_sorted_indices", "_has_canonical_format"})
_constant: dict = {}         # csr_array / csc_array -> the attributes SciPy's constructor sets to constants


def _compressed(cls, val, crd, pos, shape):
    """``_canonical(cls((val, crd, pos), shape=shape))`` for a kernel's own CSR/CSC result
    (int32 indices, canonical by construction) without SciPy's format check, which costs
    about 10 us a call: the array's attributes set as SciPy's constructor sets them (it
    keeps such buffers as they are: no copy either way)."""
    a = cls.__new__(cls)
    d = a.__dict__
    d.update(_constant[cls])
    d["_shape"] = (int(shape[0]), int(shape[1]))
    d["indices"], d["indptr"], d["data"] = crd, pos, val
    d["_has_sorted_indices"] = d["_has_canonical_format"] = True
    return a


def _direct(cls) -> bool:
    """Does :func:`_compressed` build what SciPy's constructor builds for ``cls`` (checked
    once per process against the constructor, never assumed)?"""
    got = _constant.get(cls)
    if got is None:
        got = False
        try:
            val, crd, pos = np.array([1.0, 2.0]), np.array([1, 0], np.int32), np.array([0, 1, 2], np.int32)
            shape = (2, 3) if cls is sp.csr_array else (3, 2)     # two rows / two columns
            ref = _canonical(cls((val, crd, pos), shape=shape))
            attrs = vars(ref)
            same = lambda a, b: a.dtype == b.dtype and a.shape == b.shape and a.ctypes.data == b.ctypes.data
            if _VARIABLE <= set(attrs) and same(ref.indices, crd) and same(ref.indptr, pos) and same(ref.data, val):
                _constant[cls] = {k: v for k, v in attrs.items() if k not in _VARIABLE}
                a = _compressed(cls, val, crd, pos, shape)
                got = (vars(a).keys() == attrs.keys() and type(a) is type(ref) and a.shape == ref.shape
                       and a.nnz == ref.nnz and a.has_canonical_format and a.has_sorted_indices
                       and np.array_equal(a.toarray(), ref.toarray()) and repr(a) == repr(ref))
        except Exception:       # noqa: BLE001 - another SciPy: the constructor, always
            got = False
        if not got:
            _constant[cls] = False
        return got
    return got is not False


def _scipy(fmt: Format, shape, bufs, lvl_sizes):
    dense, comp = "dense", "compressed"
    if fmt.block is None and fmt.rank == 2 and fmt.levels in ((dense, comp), (comp, comp)):
        if fmt.levels[0] == dense:
            pos, crd, val = bufs
        else:       # DCSR/DCSC: expand the stored rows into a row pointer (O(rows))
            _, outer_crd, inner_pos, crd, val = bufs
            counts = np.zeros(lvl_sizes[0], dtype=np.int64)
            counts[outer_crd] = np.diff(inner_pos)
            pos = np.concatenate([[0], np.cumsum(counts)]).astype(inner_pos.dtype)
        cls = sp.csr_array if fmt.order == (0, 1) else sp.csc_array
        if crd.dtype == _I32 and pos.dtype == _I32 and _direct(cls):
            return _compressed(cls, val, crd, pos, shape)
        return _canonical(cls((val, crd, pos), shape=shape))
    if fmt.block is not None and fmt.levels == ("dense", "compressed", "dense", "dense") and fmt.order == (0, 1):
        pos, crd, val = bufs
        R, C = fmt.block
        return _canonical(sp.bsr_array((val.reshape(-1, R, C), crd, pos), shape=shape))
    coords = level_coordinates(fmt, bufs, lvl_sizes)
    val = bufs[-1]
    dims = [None] * fmt.rank
    for (d, op, b), c in zip(fmt.level_dims(), coords):
        if op == "floordiv":
            dims[d] = c * b if dims[d] is None else dims[d] + c * b
        elif op == "mod":
            dims[d] = c if dims[d] is None else dims[d] + c
        else:
            dims[d] = c
    idx = np.int32 if max(shape, default=0) <= np.iinfo(np.int32).max else np.int64
    coo_like = fmt.block is None and fmt.order == tuple(range(fmt.rank)) and \
        all(fmt.level_base(l) in ("compressed", "singleton") for l in range(len(fmt.levels)))
    if not coo_like:   # levels out of dimension order, dense levels, blocks: sort to canonical
        if val.size:
            perm = np.lexsort(dims[::-1])
            dims = [c[perm] for c in dims]
            val = val[perm]
    coords = tuple(c.astype(idx, copy=False) for c in dims)
    direct = _coo_direct(fmt.rank, np.dtype(idx))
    if direct is not None:
        return _coo(val, tuple(c.astype(direct[0], copy=False) for c in coords), shape, direct[1])
    return _canonical(sp.coo_array((val, coords), shape=shape))


_coo_constant: dict = {}        # (rank, index dtype) -> (the coordinates' dtype, constant attributes) or False


def _coo(val, coords, shape, constant):
    """``_canonical(sp.coo_array((val, coords), shape=shape))`` for a kernel's own result
    (canonical by construction, coordinates in the dtype the constructor would give them)
    without the constructor's checks, which cost about 40 us a call (a sparse vector step of
    a plan: 100 us against 10 for a dense one): its attributes set as the constructor sets
    them (``constant``: :func:`_coo_direct`'s)."""
    a = sp.coo_array.__new__(sp.coo_array)
    d = a.__dict__
    d.update(constant)
    d["_shape"] = tuple(int(n) for n in shape)
    d["coords"], d["data"] = coords, val
    d["has_canonical_format"] = True
    return a


def _coo_direct(rank: int, idx: np.dtype):
    """``(the coordinates' dtype, constant attributes)`` with which :func:`_coo` builds what
    SciPy's constructor builds for a canonical rank-``rank`` result with ``idx`` coordinates
    (checked once per process against the constructor, never assumed), or None (then the
    constructor, always)."""
    got = _coo_constant.get((rank, idx))
    if got is None:
        got = False
        try:
            val = np.array([1.0, 2.0])
            coords = tuple(np.array([0, 1], idx) for _ in range(rank))
            shape = (3,) * rank
            ref = _canonical(sp.coo_array((val, coords), shape=shape))
            attrs = vars(ref)
            kind = ref.coords[0].dtype
            if rank and set(attrs) == {"_shape", "coords", "data", "has_canonical_format", "maxprint"} and \
                    all(c.dtype == kind for c in ref.coords) and ref.data is val:
                constant = {"maxprint": attrs["maxprint"]}
                a = _coo(val, tuple(c.astype(kind) for c in coords), shape, constant)
                if (vars(a).keys() == attrs.keys() and type(a) is type(ref) and a.shape == ref.shape
                        and a.nnz == ref.nnz and np.array_equal(a.toarray(), ref.toarray()) and repr(a) == repr(ref)):
                    got = (kind, constant)
        except Exception:       # noqa: BLE001 - another SciPy: the constructor, always
            got = False
        _coo_constant[(rank, idx)] = got
    return got or None


def _prune(a):
    """Drop stored zeros (a filter on the stored entries; values are not recomputed)."""
    if a.format in ("csr", "csc", "bsr"):
        a.eliminate_zeros()
        return a
    keep = a.data != 0
    if keep.all():
        return a
    return _canonical(sp.coo_array((a.data[keep], tuple(c[keep] for c in a.coords)), shape=a.shape))
