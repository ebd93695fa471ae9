"""Operands in: SciPy/NumPy objects -> the buffers a kernel reads, without copies where the
layout already fits (SciPy's CSR/CSC/BSR/COO arrays with int32 indices, contiguous values).

Every operand becomes a :class:`Storage`: its buffers in MLIR's field order (positions and
coordinates per level, then values) and its level sizes.  Formats other than the operand's
own are built here from its coordinates (a conversion of layout, not a computation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from .. import dtypes as dt
from ..errors import OperandError, ShapeError
from ..formats import Format
from .pydata import is_pydata, to_scipy
from .validate import NATIVE_MIN, check_widths, coo_scan, scanned_order

INT32_MAX = np.iinfo(np.int32).max
_LINEAR_MAX = np.iinfo(np.int64).max       # shapes whose linear indices fit in int64
_SAME = {"csr": Format.csr(), "csc": Format.csc()}    # SciPy layouts that pass through as they are


@dataclass
class Storage:
    fmt: Format                      # with index widths resolved
    shape: tuple[int, ...]
    buffers: list[np.ndarray]        # field order; dense: [array]
    lvl_sizes: list[int]


def as_operand(x, what: str):
    """Accept NumPy arrays, scalars, array-likes, SciPy sparse arrays/matrices and pydata/sparse
    COO/GCXS arrays (as SciPy arrays over their buffers)."""
    if sp.issparse(x):
        if x.format in ("dia", "lil", "dok"):
            # documented: these formats are converted to CSR (a 1-D dok array to 1-D COO)
            x = x.tocoo() if x.ndim == 1 else x.tocsr()
        return x
    if isinstance(x, np.ndarray):
        return x
    if is_pydata(x):
        return to_scipy(x, what)        # pydata/sparse COO/GCXS: SciPy arrays over its buffers
    if type(x).__module__.startswith("dask."):     # np.asarray would compute it here, whole
        raise OperandError(f"{what} is a Dask array: sc.einsum, sc.evaluate and compiled kernels take Dask "
                           f"arrays (docs/distributed.md), this call needs an in-memory one (.compute() it)")
    try:
        a = np.asarray(x)
    except Exception as err:   # noqa: BLE001 - anything numpy refuses
        raise OperandError(f"{what} is not an array: {type(x).__name__} ({err})") from None
    if a.dtype == object:
        raise OperandError(f"{what} is not a numeric array (got {type(x).__name__})")
    return a


def default_format(x) -> tuple[str, tuple[int, int] | None]:
    """The format an operand runs in unless told otherwise: its own."""
    if sp.issparse(x):
        if x.format == "bsr":
            return "bsr", tuple(x.blocksize)
        if x.ndim == 1:
            return "coo", None          # a 1-D csr_array's buffers are 1-D COO's: zero-copy
        if x.format in ("csr", "csc", "coo"):
            return x.format, None
        return "csr", None
    return "dense", None


def _index_width(fmt: Format, shape, nnz_bound: int) -> int:
    big = max([int(nnz_bound), *(int(s) for s in shape), 0])
    return 32 if big <= INT32_MAX else 64


def _resolve_widths(fmt: Format, x, shape) -> Format:
    """``fmt`` (``x``'s own layout) with unset widths resolved as a kernel call resolves them
    (docs/formats.md): 64 bits where 32 cannot hold the sizes, else the widths of ``x``'s
    own index arrays (read as they are), else 32."""
    if fmt.pos_width is None and _index_width(fmt, shape, x.nnz) == 32:
        own = own_widths(x, fmt)
        if own is not None:
            return fmt.with_widths(own[0], fmt.crd_width or own[1])
    w = fmt.pos_width or _index_width(fmt, shape, x.nnz)
    return fmt.with_widths(w, fmt.crd_width or w)


def _idx(a: np.ndarray, width: int) -> np.ndarray:
    want = np.int32 if width == 32 else np.int64
    return np.ascontiguousarray(a, dtype=want)


def to_coo(x):
    """SciPy's ``x.tocoo()``, also for a CSR/CSC/BSR operand whose ``indptr`` and ``indices``
    have different dtypes (an int64 ``indptr`` next to int32 ``indices``), on which SciPy's
    own ``tocoo`` raises "Output dtype not compatible with inputs": such an operand is first
    viewed with both index arrays in their common dtype (a copy of the narrower one)."""
    if x.format == "coo":
        return x
    if x.format in ("csr", "csc", "bsr") and x.indptr.dtype != x.indices.dtype:
        dt = np.promote_types(x.indptr.dtype, x.indices.dtype)
        y = x.__class__((x.data, x.indices.astype(dt, copy=False), x.indptr.astype(dt, copy=False)),
                        shape=x.shape, copy=False)
        if y.indptr.dtype == y.indices.dtype:
            x = y
    return x.tocoo()


def _coords(x) -> tuple[np.ndarray, np.ndarray]:
    """Canonical (sorted, duplicate-free) coordinates (rank x nnz) and values of any operand."""
    if sp.issparse(x):
        c = to_coo(x)
        if not is_canonical_coo(c):     # one check; coalescing happens on a copy
            c = coalesce(c)
        coords = np.vstack([np.asarray(k) for k in c.coords]) if c.nnz else np.zeros((c.ndim, 0), np.int64)
        return coords, np.asarray(c.data)
    a = np.asarray(x)          # rank >= 1: rank-0 operands always run dense
    nz = np.nonzero(a)
    return np.vstack(nz), a[nz]


@lru_cache(maxsize=None)
def _coo(rank: int) -> Format:
    return Format.coo(rank)


@lru_cache(maxsize=None)
def coo_aos(rank: int) -> Format:
    """COO with its coordinates interleaved in one (nnz, rank) buffer (MLIR's array of
    structs): the layout of a ``coo_array`` whose coordinates are the columns of one array,
    as ``np.unravel_index`` and ``np.nonzero`` give them."""
    return Format(("compressed(nonunique)",) + ("singleton(nonunique)",) * (rank - 2) + ("singleton",))


def aos_like(x) -> bool:
    """``x``'s coordinates look like the columns of one C-ordered (nnz, rank) array (a cheap
    test for the call plan's key; :func:`aos_buffer` checks the addresses)."""
    coords = x.coords
    r = len(coords)
    if r < 2:
        return False
    c0 = coords[0]
    base, step = c0.base, r * c0.itemsize
    return base is not None and all(type(c) is np.ndarray and c.base is base and c.strides == (step,)
                                    and c.dtype == c0.dtype for c in coords)


def aos_buffer(coords) -> np.ndarray | None:
    """The coordinates as one flat (nnz * rank) view of the array they are columns of, or
    None where they are not laid out so."""
    r = len(coords)
    c0 = coords[0]
    s = c0.itemsize
    n = c0.shape[0]
    if n == 0 or r < 2:
        return None
    p = c0.ctypes.data
    for k, c in enumerate(coords):
        if type(c) is not np.ndarray or c.dtype != c0.dtype or c.shape != (n,) or c.strides != (r * s,) \
                or c.ctypes.data != p + k * s:
            return None
    return np.lib.stride_tricks.as_strided(c0, shape=(n * r,), strides=(s,), writeable=False)


def is_canonical_coo(x) -> bool:
    """Sorted, duplicate-free coordinates?  SciPy's flag, or one O(nnz) pass: a native
    scan for large operands (validate's, when it just ran), else NumPy (a coo_array built
    from coordinates is flagged non-canonical even when it is).  Exact for coordinates in
    range, which ``validate`` checks first (``check=False`` promises them).  A large
    operand's scan in this call wins over SciPy's flag (a flag set True on unsorted
    coordinates gave wrong sparse results); below ``NATIVE_MIN`` entries the flag is
    trusted, as SciPy trusts it."""
    if x.nnz >= NATIVE_MIN:
        ordered = scanned_order(x)          # validate() scanned this operand in this call
        if ordered is not None:
            return ordered
    if x.has_canonical_format:
        return True
    if x.nnz < 2:
        return True
    coords = x.coords
    if x.nnz >= NATIVE_MIN:
        # one native pass now (check=False, or validate did not scan)
        ordered = None
        if ordered is None:
            scan = coo_scan(coords, x.shape)
            ordered = None if scan is None else scan[1]
        if ordered is not None:
            return ordered
    if len(coords) == 1:
        c = np.asarray(coords[0])
        return bool((c[1:] > c[:-1]).all())
    shape = tuple(int(s) for s in x.shape)
    if math.prod(shape) <= _LINEAR_MAX and all(np.can_cast(c.dtype, np.int64) for c in coords):
        # coordinates in range (validate.py checks them first): the row-major linear index
        # orders entries exactly as the coordinates do, and one int64 array is built in place
        lin = np.multiply(coords[0], shape[1], dtype=np.int64)
        for c, n in zip(coords[1:-1], shape[2:]):
            lin += c
            lin *= n
        lin += coords[-1]
        return bool(np.less(lin[:-1], lin[1:]).all())
    # lexicographic comparison of consecutive coordinates, dimension by dimension
    greater = np.zeros(x.nnz - 1, dtype=bool)
    equal = np.ones(x.nnz - 1, dtype=bool)
    for c in x.coords:
        c = np.asarray(c)
        a, b = c[1:], c[:-1]
        greater |= equal & (a > b)
        equal &= a == b
    return bool(greater.all())


def coalesce(x):
    """A canonical copy of a COO/CSR/CSC operand: duplicates summed, coordinates sorted.
    (Matrices go through SciPy's CSR routines, O(nnz) plus a sort per row; N-d arrays
    through one sort of the linearized coordinates.)  ``x`` itself is not modified."""
    if x.ndim == 2:
        c = sp.csr_array(x, copy=True) if x.format != "coo" else x.tocsr()
        c.sum_duplicates()
        return c.tocoo()
    shape = tuple(int(s) for s in x.shape)
    lin = np.ravel_multi_index(tuple(np.asarray(c, dtype=np.int64) for c in x.coords), shape)
    uniq, inverse = np.unique(lin, return_inverse=True)
    vals = np.zeros(uniq.size, dtype=x.dtype)
    np.add.at(vals, inverse, x.data)
    out = sp.coo_array((vals, np.unravel_index(uniq, shape)), shape=shape)
    out.has_canonical_format = True
    return out


def _is_coo_layout(fmt: Format, rank: int, aos: bool = False) -> bool:
    """``fmt`` is sparsecc's COO layout (``aos``: :func:`coo_aos`), whatever its index widths."""
    if aos and rank < 2:
        return False
    c = coo_aos(rank) if aos else _coo(rank)
    return fmt.levels == c.levels and fmt.order == c.order and fmt.block is None


def _coo_fast(x, fmt: Format) -> bool:
    return (sp.issparse(x) and x.format == "coo" and _is_coo_layout(fmt, x.ndim)
            and is_canonical_coo(x))


# ---------------------------------------------------------------- the call path
# A kernel's call plan (runtime/kernel.py) picks one loader per operand once per kind of
# operand; a loader runs on every call and returns (buffers in field order, level sizes)
# - or (the array, None) for a dense operand.  Loaders read everything from the operand.

_INDEX = {32: np.dtype(np.int32), 64: np.dtype(np.int64)}


def nnz_bound(x) -> int:
    """At least the number of entries operand ``x`` stores (for the index-width choice)."""
    if isinstance(x, np.ndarray):
        return x.size
    data = x.data
    return data.size if isinstance(data, np.ndarray) else len(data)


_WIDTH_OF = {np.dtype(np.int32): 32, np.dtype(np.int64): 64}


def index_dtypes(x) -> tuple:
    """The dtypes of a SciPy operand's index arrays (part of a call plan's key: they decide
    the widths a kernel is compiled for); ``()`` for anything else."""
    f = getattr(x, "format", None)
    if f == "coo":
        return tuple(c.dtype for c in x.coords) + (aos_like(x),)
    if f in ("csr", "csc", "bsr"):
        return x.indptr.dtype, x.indices.dtype
    return ()


def own_widths(x, fmt: Format) -> tuple[int, int] | None:
    """The (position, coordinate) widths at which operand ``x``'s own index arrays pass to a
    kernel storing it as ``fmt`` without a copy; ``None`` where its buffers are rebuilt
    anyway (another layout) or its index dtypes are not int32/int64."""
    if not sp.issparse(x) or fmt.is_dense:
        return None
    f = x.format
    if f == "coo":
        if not _is_coo_layout(fmt, x.ndim) and not _is_coo_layout(fmt, x.ndim, aos=True):
            return None
        ws = {_WIDTH_OF.get(c.dtype) for c in x.coords}
        if len(ws) != 1 or None in ws:
            return None
        w, = ws
        return w, w                     # the two-entry positions buffer is made per call anyway
    if f == "csr" and x.ndim == 1:
        ok = fmt.levels == _COO1.levels
    elif f in _SAME and x.ndim == 2:
        own = _SAME[f]
        ok = fmt.levels == own.levels and fmt.order == own.order and fmt.block is None
    elif f == "bsr":
        ok = fmt.block == tuple(x.blocksize) and fmt.levels == ("dense", "compressed", "dense", "dense") \
            and fmt.order == (0, 1)
    else:
        return None
    if not ok:
        return None
    pos, crd = _WIDTH_OF.get(x.indptr.dtype), _WIDTH_OF.get(x.indices.dtype)
    return None if pos is None or crd is None else (pos, crd)


def load_dense(x, fmt: Format, what: str):
    if type(x) is not np.ndarray or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return x, None


def load_densified(x, fmt: Format, what: str):
    return np.ascontiguousarray(x.toarray()), None


def load_compressed(x, fmt: Format, what: str):
    """A canonical CSR/CSC operand in its own layout, widths resolved: no copy where its
    index dtypes match the widths."""
    if not x.has_canonical_format:
        return load_any(x, fmt, what)
    shape = x.shape
    order = fmt.order
    return ([np.ascontiguousarray(x.indptr, _INDEX[fmt.pos_width]),
             np.ascontiguousarray(x.indices, _INDEX[fmt.crd_width]), np.ascontiguousarray(x.data)],
            [shape[order[0]], shape[order[1]]])


_COO1 = Format.coo(1)


def load_csr1d(x, fmt: Format, what: str):
    """A canonical 1-D csr_array: its indptr ([0, nnz]), indices and data are the
    positions, coordinates and values of a rank-1 compressed level (no copy)."""
    if not x.has_canonical_format:
        return load_any(x, fmt, what)
    return ([np.ascontiguousarray(x.indptr, _INDEX[fmt.pos_width]),
             np.ascontiguousarray(x.indices, _INDEX[fmt.crd_width]), np.ascontiguousarray(x.data)],
            [x.shape[0]])


def load_coo_aos(x, fmt: Format, what: str):
    """A canonical COO operand whose coordinates are the columns of one (nnz, rank) array,
    run as :func:`coo_aos`: that array is the coordinate buffer (no copy)."""
    coords = x.coords
    if coords[0].dtype == _INDEX[fmt.crd_width] and is_canonical_coo(x):
        buf = aos_buffer(coords)
        if buf is not None:
            return ([np.array([0, x.nnz], dtype=_INDEX[fmt.pos_width]), buf, np.ascontiguousarray(x.data)],
                    [int(s) for s in x.shape])
    return load_any(x, fmt, what)


def load_any(x, fmt: Format, what: str):
    s = build(x, fmt, what)
    return s.buffers, s.lvl_sizes


def _native(x):
    """``x`` with its values in this machine's byte order, on a copy (kernels read native
    values; ``>f8`` data would be read as garbage)."""
    if sp.issparse(x):      # (SciPy's constructors refuse such data: it was assigned)
        data = x.data.astype(x.data.dtype.newbyteorder("="))
        if x.format == "coo":
            return type(x)((data, x.coords), shape=x.shape)
        return type(x)((data, x.indices, x.indptr), shape=x.shape)
    return np.asarray(x).astype(x.dtype.newbyteorder("="))


_BOOL = np.dtype(np.bool_)


def canonical_bools(a: np.ndarray) -> np.ndarray:
    """Bool array ``a`` with every byte 0 or 1: ``a`` itself, or (where some byte is another
    nonzero value, as in a ``uint8`` array viewed as bool) a copy that holds True there.
    NumPy reads any nonzero byte as True; kernels store bools as ``i8`` and compute with
    them as 0/1 (a byte 2 summed as 2, 2 * 128 wrapping to 0)."""
    if a.size and int(a.view(np.uint8).max()) > 1:
        return a.view(np.uint8) != 0
    return a


def _bool_loader(load):
    def load_bools(x, fmt: Format, what: str):
        bufs, lv = load(x, fmt, what)
        if lv is None:
            return canonical_bools(bufs), None
        bufs = list(bufs)
        bufs[-1] = canonical_bools(bufs[-1])
        return bufs, lv
    return load_bools


def loader(x, fmt: Format):
    """The loader for operands of ``x``'s kind run as ``fmt`` (widths resolved)."""
    if x.dtype == _BOOL:
        # (the repeated-call path, which knows only the plain loaders, leaves bools alone)
        return _bool_loader(_loader(x, fmt))
    return _loader(x, fmt)


def _loader(x, fmt: Format):
    if not x.dtype.isnative:
        native = loader(_native(x), fmt)
        return lambda x, fmt, what: native(_native(x), fmt, what)
    if fmt.is_dense:
        return load_densified if sp.issparse(x) else load_dense
    if sp.issparse(x) and x.ndim == 1 and x.format == "csr" and fmt.levels == _COO1.levels:
        return load_csr1d
    if sp.issparse(x) and x.format == "coo" and _is_coo_layout(fmt, x.ndim, aos=True):
        return load_coo_aos
    if sp.issparse(x) and x.ndim == 2 and fmt.block is None:
        own = _SAME.get(x.format)
        if own is not None and fmt.levels == own.levels and fmt.order == own.order:
            return load_compressed
    return load_any


def build(x, fmt: Format, what: str) -> Storage:
    """The buffers of operand ``x`` stored as ``fmt`` (block sizes resolved, widths free)."""
    s = _storage(x, fmt, what)
    if not s.fmt.is_dense:
        check_widths(s.fmt, s.shape, s.buffers[-1].shape[0], what)
    return s


def _storage(x, fmt: Format, what: str) -> Storage:
    shape = tuple(int(s) for s in x.shape)
    row = dt.lookup(x.dtype, what)
    if fmt.is_dense:
        a = x.toarray() if sp.issparse(x) else x
        a = np.ascontiguousarray(a)
        return Storage(fmt, shape, [a], list(shape))
    if fmt.block is not None:
        for d, b in enumerate(fmt.block):
            if shape[d] % b:
                raise ShapeError(f"{what} has shape {shape}, not divisible into blocks of {fmt.block}")
    # ---- zero-copy paths
    if sp.issparse(x) and x.ndim == 2:
        own = _SAME.get(x.format)
        if own is not None and fmt.levels == own.levels and fmt.order == own.order and fmt.block is None:
            if not x.has_canonical_format:
                x = x.copy()
                x.sum_duplicates()    # sorts indices too
            f = _resolve_widths(fmt, x, shape)
            lv = [shape[fmt.order[0]], shape[fmt.order[1]]]
            return Storage(f, shape, [_idx(x.indptr, f.pos_width), _idx(x.indices, f.crd_width),
                                      np.ascontiguousarray(x.data)], lv)
        # CSR read as CSC or the reverse (a planned step reading an intermediate transposed):
        # SciPy's O(nnz) counting transpose, then the path above; the generic level build
        # below sorts (200k entries: 48 ms against 0.6)
        flip = {"csr": "csc", "csc": "csr"}.get(x.format)
        if flip is not None and fmt.block is None and fmt.levels == _SAME[flip].levels \
                and fmt.order == _SAME[flip].order:
            return _storage(x.tocsc() if flip == "csc" else x.tocsr(), fmt, what)
        if flip is not None and fmt.block is None and fmt.levels == ("compressed", "compressed"):
            # DCSR/DCSC (a sparse result's operand with its summed loops inside): the
            # non-empty rows and their index pointers, O(rows + nnz), no sort
            if fmt.order != _SAME[x.format].order:
                return _storage(x.tocsc() if flip == "csc" else x.tocsr(), fmt, what)
            if not x.has_canonical_format:
                x = x.copy()
                x.sum_duplicates()
            f = _resolve_widths(fmt, x, shape)
            ptr = np.asarray(x.indptr)
            rows = np.flatnonzero(ptr[1:] != ptr[:-1])
            return Storage(f, shape, [_idx(np.array([0, rows.size]), f.pos_width), _idx(rows, f.crd_width),
                                      _idx(np.concatenate([ptr[:1], ptr[rows + 1]]), f.pos_width),
                                      _idx(x.indices, f.crd_width), np.ascontiguousarray(x.data)],
                           [shape[fmt.order[0]], shape[fmt.order[1]]])
    if _coo_fast(x, fmt):
        f = _resolve_widths(fmt, x, shape)
        pos = np.array([0, x.nnz], dtype=np.int32 if f.pos_width == 32 else np.int64)
        return Storage(f, shape, [pos] + [_idx(c, f.crd_width) for c in x.coords] + [np.ascontiguousarray(x.data)],
                       list(shape))
    if sp.issparse(x) and x.format == "bsr" and fmt.block == tuple(x.blocksize) \
            and fmt.levels == ("dense", "compressed", "dense", "dense") and fmt.order == (0, 1):
        if not x.has_canonical_format:
            x = x.copy()
            x.sum_duplicates()
        f = _resolve_widths(fmt, x, shape)
        R, C = fmt.block
        return Storage(f, shape, [_idx(x.indptr, f.pos_width), _idx(x.indices, f.crd_width),
                                  np.ascontiguousarray(x.data).reshape(-1)],
                       [shape[0] // R, shape[1] // C, R, C])
    if sp.issparse(x) and x.format == "coo" and x.ndim >= 2 and _is_coo_layout(fmt, x.ndim):
        return _storage(coalesce(x), fmt, what)   # canonical now: the zero-copy path above
    if sp.issparse(x) and x.ndim == 2 and x.format in ("coo", "csr", "csc") and fmt.block is None \
            and fmt.levels == _coo(2).levels and fmt.order == (1, 0) and shape[1] <= 4 * x.nnz + (1 << 16):
        # COO sorted by column (an operand read in a transposed result's order): SciPy's
        # O(nnz + columns) CSC (duplicates summed), its coordinates (52,737 entries: 0.4 ms;
        # sorting them 1.2-8 ms); not where the columns outnumber the entries by far
        y = x.tocsc()
        if not y.has_canonical_format:
            y = y.copy()
            y.sum_duplicates()
        f = _resolve_widths(fmt, y, shape)
        cols = np.repeat(np.arange(shape[1]), np.diff(y.indptr))
        return Storage(f, shape, [_idx(np.array([0, y.nnz]), f.pos_width), _idx(cols, f.crd_width),
                                  _idx(y.indices, f.crd_width), np.ascontiguousarray(y.data)], [shape[1], shape[0]])
    coords, vals = _coords(x)
    return _build_levels(fmt, shape, coords, np.ascontiguousarray(vals, dtype=row.numpy), what)


def _build_levels(fmt: Format, shape, coords: np.ndarray, vals: np.ndarray, what: str) -> Storage:
    """Level buffers of ``fmt`` from canonical coordinates (MLIR's storage scheme)."""
    lvl_dims = fmt.level_dims()
    lvl_crd, lvl_size = [], []
    for d, op, b in lvl_dims:
        c = coords[d].astype(np.int64, copy=False)
        if op == "floordiv":
            lvl_crd.append(c // b); lvl_size.append(shape[d] // b)
        elif op == "mod":
            lvl_crd.append(c % b); lvl_size.append(b)
        else:
            lvl_crd.append(c); lvl_size.append(shape[d])
    nnz = vals.shape[0]
    if lvl_crd and nnz:
        if math.prod(max(1, s) for s in lvl_size) < 1 << 62:
            # one key per entry (the coordinates are distinct: canonical), sorted: lexsort
            # over two levels of 52,737 entries took 8 ms, this 1.2
            key = lvl_crd[0].copy()
            for c, s in zip(lvl_crd[1:], lvl_size[1:]):
                key *= s
                key += c
            perm = np.argsort(key)
        else:
            perm = np.lexsort(lvl_crd[::-1])
        lvl_crd = [c[perm] for c in lvl_crd]
        vals = vals[perm]
    w = fmt.pos_width or _index_width(fmt, shape, nnz)
    f = fmt.with_widths(w, fmt.crd_width or w)
    parent = np.zeros(nnz, dtype=np.int64)   # position of each entry's node at the current level
    nparent = 1
    pos: dict[int, np.ndarray] = {}
    crd: dict[int, np.ndarray] = {}
    for l, size in enumerate(lvl_size):
        base, props = f.level_base(l), f.level_props(l)
        c = lvl_crd[l]
        if base == "dense":
            parent = parent * size + c
            nparent *= size
        elif base in ("compressed", "loose_compressed"):
            # a node per distinct coordinate under its parent; a nonunique level starts a COO
            # segment, whose singleton levels below it hold one coordinate per node
            seg_end = f.aos_coo_end(l) if "nonunique" in props else l + 1
            first = np.ones(nnz, dtype=bool)
            if nnz:
                change = parent[1:] != parent[:-1]
                for k in range(l, seg_end):
                    change |= lvl_crd[k][1:] != lvl_crd[k][:-1]
                first[1:] = change
            group = np.cumsum(first) - 1
            counts = np.bincount(parent[first], minlength=nparent) if nnz else np.zeros(nparent, np.int64)
            ends = np.cumsum(counts)
            if base == "compressed":
                pos[l] = np.concatenate([[0], ends])
            else:
                pos[l] = np.stack([ends - counts, ends], axis=1).reshape(-1)
            for k in range(l, seg_end):
                crd[k] = lvl_crd[k][first]
            parent = group
            nparent = int(first.sum())
        # singleton levels were filled by the nonunique level that starts their segment
    values = np.zeros((nparent,) + vals.shape[1:], dtype=vals.dtype)
    values[parent] = vals
    bufs = []
    aos = f.aos_coo_start()
    for kind, l in f.fields():
        if kind == "pos":
            bufs.append(_idx(pos[l], f.pos_width))
        elif kind == "crd":
            if aos is not None and l == aos:
                # MLIR strides the AoS buffer by every level from the segment's start on,
                # trailing dense levels included (their slots are unused)
                seg = range(aos, len(f.levels))
                cols = [crd.get(k, np.zeros_like(crd[aos])) for k in seg]
                bufs.append(_idx(np.stack(cols, axis=1).reshape(-1), f.crd_width))
            else:
                bufs.append(_idx(crd[l], f.crd_width))
        else:
            bufs.append(values)
    return Storage(f, tuple(shape), bufs, lvl_size)
