"""Validation of operands before native code runs.

Generated code trusts its buffers: an out-of-range coordinate is a wild memory access.  Every
check here is O(nnz) at most and runs on every call: vectorized, with one pass per index
array where possible (a coordinate array viewed as unsigned makes ``0 <= c < n`` a single
``max``), or over Python lists for arrays of at most ``SMALL`` entries, where NumPy's fixed
cost per reduction would dominate a small call.  Failures raise
:class:`~sparsecc.errors.OperandError` (a ``SparseccError`` and a ``ValueError``) naming the
operand and the problem.  ``check=False`` on a kernel skips all of it (unsafe: for trusted
hot loops only).

Sortedness and uniqueness are not structural: COO is checked (and coalesced when needed) in
``operands.py``; CSR/CSC/BSR rely on SciPy's ``has_canonical_format``, which SciPy computes
from the arrays (O(nnz)) the first time it is asked and caches.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import scipy.sparse as sp

from ..errors import OperandError, ShapeError
from ..formats import Format

INT32_MAX = np.iinfo(np.int32).max


#: index arrays up to this length are checked in Python lists: a NumPy reduction costs about
#: 1 us whatever its length, ``tolist()`` plus a list scan about 10 ns per element
SMALL = 64

_FORMAT_OF = {sp.csr_array: "csr", sp.csr_matrix: "csr", sp.csc_array: "csc", sp.csc_matrix: "csc",
              sp.coo_array: "coo", sp.coo_matrix: "coo", sp.bsr_array: "bsr", sp.bsr_matrix: "bsr"}


_INDEX_DTYPES = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                                  np.uint8, np.uint16, np.uint32, np.uint64))
#: CSR/CSC/BSR index arrays: SciPy's sparsetools (``has_canonical_format``, conversions)
#: refuse uint64, which no signed index type holds
_COMPRESSED_INDEX_DTYPES = _INDEX_DTYPES - {np.dtype(np.uint64)}


def _index_array(a, what: str, name: str) -> np.ndarray:
    if type(a) is np.ndarray and a.ndim == 1 and a.dtype in _INDEX_DTYPES:
        return a
    a = np.asarray(a)
    if a.ndim != 1:
        raise OperandError(f"{what}: {name} must be one-dimensional, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise OperandError(f"{what}: {name} must hold integers, got {a.dtype}")
    return a


def _values(a, what: str, ndim: int = 1) -> np.ndarray:
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    if a.ndim != ndim:
        raise OperandError(f"{what}: data must be {'one' if ndim == 1 else 'three'}-dimensional, "
                           f"got shape {a.shape}")
    return a


def _in_range(c: np.ndarray, n: int, what: str, name: str) -> None:
    """Every value of ``c`` in ``[0, n)``: one pass (negative values are huge unsigned)."""
    size = c.size
    if size == 0:
        return
    if size <= SMALL:
        values = c.tolist()
        lo, top = min(values), max(values)
        if lo < 0:
            raise OperandError(f"{what}: {name} holds a negative index ({lo})")
    else:
        u = c.view(np.dtype(f"u{c.dtype.itemsize}")) if c.dtype.kind == "i" else c
        top = int(u.max())
        if top >= n and c.dtype.kind == "i" and int(c.min()) < 0:
            raise OperandError(f"{what}: {name} holds a negative index ({int(c.min())})")
    if top >= n:
        raise OperandError(f"{what}: {name} holds index {top}, out of range for a dimension of size {n}")


def _compressed(indptr, indices, data, n_outer: int, n_inner: int, what: str, kind: str,
                defer: list | None = None, k: int = 0) -> None:
    indptr = _index_array(indptr, what, "indptr")
    indices = _index_array(indices, what, "indices")
    for name, a in (("indptr", indptr), ("indices", indices)):
        if a.dtype not in _COMPRESSED_INDEX_DTYPES:
            raise OperandError(f"{what}: {name} has dtype {a.dtype}, which SciPy's sparse routines do not "
                               f"take; use int32 or int64")
    if indptr.size != n_outer + 1:
        raise OperandError(f"{what}: indptr has {indptr.size} entries, expected {n_outer + 1} "
                           f"(one per {kind} plus one)")
    stored = indices.size
    if n_outer < SMALL:
        p = indptr.tolist()
        first, nnz = p[0], p[-1]
        decreasing = p != sorted(p)
    else:
        first, nnz = int(indptr[0]), int(indptr[-1])
        decreasing = bool((indptr[1:] < indptr[:-1]).any())
    if first != 0:
        raise OperandError(f"{what}: indptr must start at 0, starts at {first}")
    if decreasing:
        k = int(np.argmax(indptr[1:] < indptr[:-1]))
        raise OperandError(f"{what}: indptr decreases at {kind} {k} ({int(indptr[k])} -> {int(indptr[k + 1])})")
    if nnz != stored:
        raise OperandError(f"{what}: indptr ends at {nnz} but indices has {stored} entries")
    if len(data) != nnz:
        raise OperandError(f"{what}: indptr ends at {nnz} but data has {len(data)} entries")
    if 0 < stored <= SMALL:
        c = indices.tolist()
        if min(c) >= 0 and max(c) < n_inner:
            return
    elif defer is not None and n_inner > 0:
        # the range check waits for the kernel: one that guards its coordinate loads
        # (passes/guards.py) does it in its own loop; see check_deferred
        defer.append((k, indices, n_inner, what))
        return
    _in_range(indices, n_inner, what, "indices")


def check_deferred(defer: list, guarded=()) -> None:
    """The ``indices`` range checks :func:`validate` deferred (``defer``), for the operands
    whose kernel does not range-check them itself (operand positions not in ``guarded``).
    With ``guarded=()`` every one runs: after a kernel reported an out-of-range coordinate,
    this finds which operand and index, with the message a NumPy check gives."""
    for k, indices, n, what in defer:
        if k not in guarded:
            _in_range(indices, n, what, "indices")


def _small_compressed_ok(indptr, indices, data, n_outer: int, n_inner: int) -> bool:
    """The checks of :func:`_compressed` for a small operand in one pass over Python lists:
    True if it is valid; False sends it to ``_compressed``, which says what is wrong."""
    if not (n_outer < SMALL and type(indptr) is np.ndarray and type(indices) is np.ndarray
            and type(data) is np.ndarray and indptr.ndim == 1 and indices.ndim == 1 and data.ndim == 1
            and indptr.dtype in _COMPRESSED_INDEX_DTYPES and indices.dtype in _COMPRESSED_INDEX_DTYPES):
        return False
    p = indptr.tolist()
    if len(p) != n_outer + 1 or p[0] != 0 or p[-1] != len(indices) or len(indices) != len(data) \
            or len(indices) > SMALL or p != sorted(p):
        return False
    if not p[-1]:
        return True
    c = indices.tolist()
    return min(c) >= 0 and max(c) < n_inner


def small_compressed_ok_typed(indptr, indices, data, n_outer: int, n_inner: int, guarded: bool = False) -> bool:
    """:func:`_small_compressed_ok` for arrays whose types and index dtypes the caller has
    already checked (the repeated-call path's guards): the same checks, less overhead.
    ``guarded``: the kernel range-checks ``indices`` itself (``passes/guards.py``), so only
    the structure (``indptr``, sizes) is checked here."""
    if n_outer >= SMALL or indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
        return False
    p = indptr.tolist()
    n = indices.size
    if len(p) != n_outer + 1 or p[0] != 0 or p[-1] != n or n != data.size or n > SMALL or p != sorted(p):
        return False
    if not n or guarded:
        return True
    c = indices.tolist()
    return min(c) >= 0 and max(c) < n_inner


def compressed_structure_ok_typed(indptr, indices, data, n_outer: int) -> bool:
    """The structure of a CSR/CSC operand whose types, index dtypes and contiguity the
    repeated-call path has checked, and whose ``indices`` the kernel range-checks itself
    (``passes/guards.py``): ``indptr`` has ``n_outer + 1`` entries, starts at 0, never
    decreases and ends at the entry count of ``indices`` and ``data``.  False sends the
    operand to :func:`validate`, which raises the message; any size (the general
    validation costs 1.5-2.5 us more per call on a few hundred entries)."""
    if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1 or indptr.size != n_outer + 1:
        return False
    n = indices.size
    if n != data.size:
        return False
    if n_outer < SMALL:
        p = indptr.tolist()
        return p[0] == 0 and p[-1] == n and p == sorted(p)
    return indptr[0] == 0 and indptr[-1] == n and not (indptr[1:] < indptr[:-1]).any()


def validate(x, what: str, defer: list | None = None, k: int = 0) -> bool | None:
    """Raise OperandError if the buffers of a SciPy operand are inconsistent.  Everything is
    read from the operand on every call: nothing is remembered between calls, since arrays
    can be changed in place at any time.  Returns whether a large COO operand's entries are
    sorted and duplicate-free when its scan found out (else None): see :func:`known_orders`.

    ``defer``: a list where the range check of a large CSR/CSC operand's ``indices`` is put
    instead of run (with ``k``, the operand's position), for :func:`check_deferred` once the
    kernel is known: a kernel that guards its coordinate loads checks them in its own loop
    (``passes/guards.py``).  Everything else (``indptr`` above all, which keeps every
    position in bounds) is checked here as always."""
    t = type(x)
    if t is np.ndarray:
        return
    f = _FORMAT_OF.get(t)
    if f is None:
        if not sp.issparse(x):
            return
        f = x.format
    shape = x.shape
    if shape and min(shape) < 0:
        raise ShapeError(f"{what} has a negative dimension: {tuple(int(s) for s in shape)}")
    if f == "csr" and len(shape) == 1:     # SciPy's 1-D csr_array: one row
        _compressed(x.indptr, x.indices, _values(x.data, what), 1, shape[0], what, "row")
    elif f in ("csr", "csc"):
        if len(shape) != 2:
            raise OperandError(f"{what}: a {f} array must be 2-D")
        outer, inner = (shape[0], shape[1]) if f == "csr" else (shape[1], shape[0])
        if _small_compressed_ok(x.indptr, x.indices, x.data, outer, inner):
            return
        _compressed(x.indptr, x.indices, _values(x.data, what), outer, inner, what,
                    "row" if f == "csr" else "column", defer, k)
    elif f == "bsr":
        data = _values(x.data, what, 3)
        R, C = (int(b) for b in data.shape[1:])
        if R < 1 or C < 1 or shape[0] % R or shape[1] % C:
            raise OperandError(f"{what}: blocks of {R}x{C} do not tile the shape {tuple(shape)}")
        _compressed(x.indptr, x.indices, data, shape[0] // R, shape[1] // C, what, "block row")
    elif f == "coo":
        coords = [_index_array(c, what, f"coordinate array {k}") for k, c in enumerate(x.coords)]
        if len(coords) != len(shape):
            raise OperandError(f"{what}: {len(coords)} coordinate arrays for {len(shape)} dimensions")
        n = len(_values(x.data, what))
        for k, c in enumerate(coords):
            if c.size != n:
                raise OperandError(f"{what}: coordinate array {k} has {c.size} entries, data has {n}")
        scan = coo_scan(coords, shape)      # large operands: one native pass, order included
        if scan is not None and scan[0]:
            return scan[1]
        for k, c in enumerate(coords):      # (the native scan found a bad one: which, where)
            _in_range(c, shape[k], what, f"coordinate array {k} (dimension {k})")
    return None


def check_widths(fmt: Format, shape, nnz: int, what: str) -> None:
    """A 32-bit index width must hold every coordinate and position."""
    if fmt.crd_width == 32 and max(shape, default=0) > INT32_MAX:
        raise OperandError(f"{what}: format {fmt} has 32-bit coordinates, but a dimension has "
                           f"size {max(shape)} (> 2^31 - 1); use crd_width=64 or leave it unset")
    if fmt.pos_width == 32 and nnz > INT32_MAX:
        raise OperandError(f"{what}: format {fmt} has 32-bit positions, but {nnz} entries are stored "
                           f"(> 2^31 - 1); use pos_width=64 or leave it unset")


# ------------------------------------------------------------- the native COO scan
#: COO operands with at least this many entries are scanned by a compiled kernel (one pass,
#: no temporaries); smaller ones by NumPy, which then costs less than the call
NATIVE_MIN = 1 << 15

_MLIR_INT = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}


def _scan_mlir(types: tuple[str, ...], strides: tuple[int, ...]) -> str:
    """A kernel over one coordinate array per dimension (element types ``types``): writes
    out[0] = 1 if every coordinate is in [0, its dimension's size), out[1] = 1 if the
    entries are in strictly increasing lexicographic order (sorted, no duplicates).  Each
    array's stride (in elements) is fixed in the kernel: 1, or the rank for SciPy's views of
    one (nnz, rank) array (what ``np.unravel_index`` returns).

    All-32-bit coordinates are compared in 32 bits (no widening: twice the lanes of a vector)
    and each entry is compared with the previous one read again from memory (a loop without
    carried coordinates, which LLVM vectorizes); 64-bit ones keep the carried form, which
    measured faster for them (``_scan_mlir_carried``)."""
    if any(t != "i32" for t in types):
        return _scan_mlir_carried(types, strides)
    r = len(types)
    mt = [f"memref<?xi32, strided<[{k}], offset: ?>>" for k in strides]
    args = ["%nnz: index"] + [f"%n{d}: index" for d in range(r)] + \
        [f"%c{d}: {m}" for d, m in enumerate(mt)] + ["%out: memref<2xi64>"]
    body = ["  %z = arith.constant 0 : index", "  %one = arith.constant 1 : index",
            "  %t = arith.constant true", "  %big = arith.constant 2147483648 : i64"]
    # the bound in 32 bits: min(size, 2^31), compared unsigned (a negative coordinate is
    # 2^31 or more unsigned; every non-negative int32 is below 2^31)
    for d in range(r):
        body += [f"  %n64_{d} = arith.index_cast %n{d} : index to i64",
                 f"  %m{d} = arith.minui %n64_{d}, %big : i64",
                 f"  %u{d} = arith.trunci %m{d} : i64 to i32"]
    ok = "%t"
    for d in range(r):      # entry 0's range (the caller passes nnz >= NATIVE_MIN > 0)
        body += [f"  %s{d} = memref.load %c{d}[%z] : {mt[d]}",
                 f"  %sin{d} = arith.cmpi ult, %s{d}, %u{d} : i32", f"  %sok{d} = arith.andi {ok}, %sin{d} : i1"]
        ok = f"%sok{d}"
    body.append(f"  %res:2 = scf.for %i = %one to %nnz step %one iter_args(%ok = {ok}, %up = %t) -> (i1, i1) {{")
    body.append("    %im1 = arith.subi %i, %one : index")
    for d in range(r):
        body += [f"    %a{d} = memref.load %c{d}[%i] : {mt[d]}", f"    %p{d} = memref.load %c{d}[%im1] : {mt[d]}",
                 f"    %in{d} = arith.cmpi ult, %a{d}, %u{d} : i32"]
    ok = _in_range_and_increasing(body, r, "i32")
    body.append(f"    scf.yield {ok}, %up1 : i1, i1")
    return _scan_module(args, body)


def _in_range_and_increasing(body: list, r: int, ty: str) -> str:
    """The loop body's tail shared by both scans: the entry's in-range flags ``%in{d}``
    and-ed into ``%ok`` (returns the last name), and ``%up1``: ``%up`` and the entry
    ``%a*`` lexicographically greater than the previous ``%p*`` (compared in ``ty``)."""
    ok = "%ok"
    for d in range(r):
        body.append(f"    %ok{d} = arith.andi {ok}, %in{d} : i1")
        ok = f"%ok{d}"
    # greater than the previous entry, from the last dimension back to the first
    body.append(f"    %g{r - 1} = arith.cmpi sgt, %a{r - 1}, %p{r - 1} : {ty}")
    for d in range(r - 2, -1, -1):
        body += [f"    %gt{d} = arith.cmpi sgt, %a{d}, %p{d} : {ty}",
                 f"    %eq{d} = arith.cmpi eq, %a{d}, %p{d} : {ty}",
                 f"    %e{d} = arith.andi %eq{d}, %g{d + 1} : i1",
                 f"    %g{d} = arith.ori %gt{d}, %e{d} : i1"]
    body.append("    %up1 = arith.andi %up, %g0 : i1")
    return ok


def _scan_module(args: list, body: list) -> str:
    """The scan's module: the loop (``%res``) closed, its two flags stored into ``%out``."""
    body = body + ["  }", "  %f0 = arith.extui %res#0 : i1 to i64", "  %f1 = arith.extui %res#1 : i1 to i64",
                   "  memref.store %f0, %out[%z] : memref<2xi64>", "  memref.store %f1, %out[%one] : memref<2xi64>",
                   "  return"]
    return ("module {\n func.func @kernel(" + ", ".join(args) + ") attributes {llvm.emit_c_interface} {\n"
            + "\n".join(body) + "\n }\n}\n")


def _scan_mlir_carried(types: tuple[str, ...], strides: tuple[int, ...]) -> str:
    """A kernel over one coordinate array per dimension (element types ``types``): writes
    out[0] = 1 if every coordinate is in [0, its dimension's size), out[1] = 1 if the
    entries are in strictly increasing lexicographic order (sorted, no duplicates).  Each
    array's stride (in elements) is fixed in the kernel: 1, or the rank for SciPy's views of
    one (nnz, rank) array (what ``np.unravel_index`` returns)."""
    r = len(types)
    mt = [f"memref<?x{t}, strided<[{k}], offset: ?>>" for t, k in zip(types, strides)]
    args = ["%nnz: index"] + [f"%n{d}: index" for d in range(r)] + \
        [f"%c{d}: {m}" for d, m in enumerate(mt)] + ["%out: memref<2xi64>"]
    body = ["  %z = arith.constant 0 : index", "  %one = arith.constant 1 : index",
            "  %t = arith.constant true", "  %m1 = arith.constant -1 : i64"]
    body += [f"  %u{d} = arith.index_cast %n{d} : index to i64" for d in range(r)]
    prev = ", ".join(f"%p{d} = %m1" for d in range(r))
    body.append(f"  %res:{r + 2} = scf.for %i = %z to %nnz step %one iter_args(%ok = %t, %up = %t, {prev})"
                f" -> (i1, i1{', i64' * r}) {{")
    for d, t in enumerate(types):
        if t == "i64":
            body.append(f"    %a{d} = memref.load %c{d}[%i] : {mt[d]}")
        else:
            body.append(f"    %w{d} = memref.load %c{d}[%i] : {mt[d]}")
            body.append(f"    %a{d} = arith.extsi %w{d} : {t} to i64")
        body.append(f"    %in{d} = arith.cmpi ult, %a{d}, %u{d} : i64")      # negative: huge unsigned
    ok = _in_range_and_increasing(body, r, "i64")
    body.append(f"    scf.yield {ok}, %up1, {', '.join(f'%a{d}' for d in range(r))} : i1, i1{', i64' * r}")
    return _scan_module(args, body)


_scan_modules: dict = {}
_known = threading.local()


class known_orders:
    """``with known_orders([(operand, ordered), ...]):`` - the orders ``validate`` just found
    for these operand objects, for :func:`scanned_order` (``operands.is_canonical_coo``)
    while the block runs: a call validates, then loads its operands, with nothing between
    that could change them; outside the block nothing is remembered."""

    def __init__(self, orders):
        self.orders = orders

    def __enter__(self):
        _known.value = self.orders

    def __exit__(self, *exc):
        _known.value = None


def scanned_order(x) -> bool | None:
    """The order ``validate`` found for operand object ``x`` in this call (None: unknown)."""
    orders = getattr(_known, "value", None)
    if orders:
        for o, ordered in orders:
            if o is x:
                return ordered
    return None


def _strided(c: np.ndarray):
    """The descriptor of a 1-D array with a positive stride (in elements)."""
    from .memref import descriptor_class
    d = descriptor_class(1)()
    d.allocated = d.aligned = c.ctypes.data
    d.offset = 0
    d.sizes[0] = c.shape[0]
    d.strides[0] = c.strides[0] // c.itemsize
    return d


def coo_scan(coords, shape) -> tuple[bool, bool] | None:
    """(every coordinate in range, strictly increasing order) of a COO operand's coordinate
    arrays, in one pass of a kernel compiled by sparsecc itself (through ``load_module``,
    disk-cached like every kernel); ``None`` where NumPy does the checks instead (small,
    not int32/int64, not contiguous, mismatched lengths)."""
    if not coords:
        return None
    n = coords[0].shape[0] if type(coords[0]) is np.ndarray else 0
    if n < NATIVE_MIN:
        return None
    types, strides = [], []
    r = len(coords)
    for c in coords:
        t = _MLIR_INT.get(c.dtype) if type(c) is np.ndarray else None
        if t is None or c.ndim != 1 or c.shape[0] != n:
            return None
        k = c.strides[0]
        k = 1 if k == c.itemsize else r if k == r * c.itemsize else 0
        if not k:
            return None
        types.append(t)
        strides.append(k)
    key = (tuple(types), tuple(strides))
    mod = _scan_modules.get(key, False)
    if mod is False:
        from .loader import load_module
        try:
            mod = load_module(_scan_mlir(*key), what="the COO validation scan")
        except Exception:       # noqa: BLE001 - no compiler here (an AOT-only install): NumPy checks
            mod = None
        _scan_modules[key] = mod
    if mod is None:
        return None
    from .memref import describe
    out = np.zeros(2, np.int64)
    keep = [ctypes.c_int64(n)] + [ctypes.c_int64(int(s)) for s in shape] + \
        [_strided(c) for c in coords] + [describe(out)]
    argv = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
    if mod.entry(argv):
        raise MemoryError("sparsecc: the COO validation scan failed")
    return bool(out[0]), bool(out[1])
