"""Operands that live on an NVIDIA GPU (``device="cuda"``; docs/gpu.md "Device arrays").

Recognised without importing any GPU library: CuPy arrays, torch CUDA tensors and anything
else with ``__cuda_array_interface__`` (v2/v3), objects whose ``__dlpack_device__`` is
kDLCUDA (their ``__dlpack__`` capsule read with ctypes), and ``cupyx.scipy.sparse`` CSR /
CSC / COO matrices (their ``data``/``indices``/``indptr`` arrays).  Dense device buffers
must be C-contiguous; a sparse one runs in its own storage (no conversion on the device:
a format the kernel has no GPU loop for is a :class:`DeviceError` naming the fix).

The kernel is compiled with ``Options.device_buffers`` naming the buffers that are device
pointers: ``passes/device_args.py`` removes the host code's allocation, copies and free of
each, so the launch gets the user's pointers (host operands of the same call are still
copied in).  The dense result is allocated on the device in the library of the first
device operand: CuPy in -> CuPy out, torch in -> torch out, otherwise a
:class:`DeviceArray` (memory from the driver, freed with ``cuMemFree`` when collected).

Validation (``check=True``): the index arrays of device sparse operands are copied to the
host with ``cuMemcpyDtoH`` and checked like SciPy operands (in range, positions
non-decreasing, sorted without duplicates): an O(nnz) transfer per call.  With
``check=False`` nothing is read: the operands must be valid (an out-of-range index is an
out-of-bounds read on the device).  The driver is asked through ctypes only.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import math
import weakref

import numpy as np

from .. import dtypes as dt
from ..errors import DeviceError, OperandError
from ..formats import Format, resolve
from . import targets

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


# ----------------------------------------------------------------------------- the driver
class _Driver:
    """The few driver calls the runtime makes itself, in the primary context of device 0
    (the one libmlir_cuda_runtime.so uses)."""

    def __init__(self):
        problem, _ = targets.cuda_probe()
        if problem:
            raise DeviceError(problem)
        self.cu = ctypes.CDLL(targets.CUDA_DRIVER)
        dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
        self._check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self._check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc:
            raise DeviceError(f"the CUDA driver failed: {what} returned CUDA error {rc}")

    def call(self, name: str, *args) -> None:
        cu = self.cu
        self._check(cu.cuCtxPushCurrent_v2(self.ctx), "cuCtxPushCurrent")
        try:
            self._check(getattr(cu, name)(*args), name)
        finally:
            cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def to_host(self, ptr: int, dtype, n: int) -> np.ndarray:
        out = np.empty(n, dtype)
        if n:
            self.call("cuMemcpyDtoH_v2", ctypes.c_void_p(out.ctypes.data), ctypes.c_uint64(ptr),
                      ctypes.c_size_t(out.nbytes))
        return out

    def device_of(self, ptr: int) -> int | None:
        """The device ordinal of device pointer ``ptr``; None: not CUDA memory."""
        ordinal = ctypes.c_int(-1)
        rc = self.cu.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(ptr))  # DEVICE_ORDINAL
        return None if rc else ordinal.value

    @contextlib.contextmanager
    def current(self):
        """The primary context current on this thread for the block's ``*_now`` calls."""
        self._check(self.cu.cuCtxPushCurrent_v2(self.ctx), "cuCtxPushCurrent")
        try:
            yield self
        finally:
            self.cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def sync_now(self, stream) -> None:
        """Wait for the work a producer announced (a CAI v3 ``stream``; None: everything);
        inside :meth:`current`."""
        if stream is None:
            self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        else:
            self._check(self.cu.cuStreamSynchronize(ctypes.c_void_p(int(stream))), "cuStreamSynchronize")


_driver: _Driver | None = None


def driver() -> _Driver:
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver


# ----------------------------------------------------------------------------- device arrays
class DeviceArray:
    """A dense result on the device for operands from no known library (only
    ``__cuda_array_interface__``/DLPack): C-contiguous memory from ``cuMemAlloc``, freed
    with ``cuMemFree`` when this object is collected (or by :meth:`free`).  It has
    ``__cuda_array_interface__`` (v3), so CuPy, torch, Numba ... take it without a copy;
    :meth:`get` copies it to a NumPy array."""

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        d = driver()
        ptr = ctypes.c_uint64(0)
        d.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(max(self.nbytes, 1)))
        self.ptr = ptr.value
        self._free = weakref.finalize(self, _free, ptr.value)
        d.call("cuMemsetD8_v2", ctypes.c_uint64(self.ptr), ctypes.c_ubyte(0), ctypes.c_size_t(self.nbytes))

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "strides": None,
                "version": 3, "stream": None}

    def get(self) -> np.ndarray:
        """A NumPy copy of the array."""
        return driver().to_host(self.ptr, self.dtype, self.size).reshape(self.shape)

    def free(self) -> None:
        """Free the device memory now (the object must not be used after)."""
        self._free()

    def __repr__(self):
        return f"<sparsecc DeviceArray shape={self.shape} dtype={self.dtype} at 0x{self.ptr:x}>"


def _free(ptr: int) -> None:
    if _driver is not None:
        try:
            _driver.call("cuMemFree_v2", ctypes.c_uint64(ptr))
        except DeviceError:
            pass


# ----------------------------------------------------------------------------- recognition
@dataclasses.dataclass
class Buffer:
    """One C-contiguous device buffer: its pointer, shape, dtype; ``stream`` the producer's
    (CAI v3; None: unknown, the whole context is synchronized); ``keep``: what keeps it alive."""

    ptr: int
    shape: tuple
    dtype: np.dtype
    stream: object
    keep: object

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass
class DeviceSparse:
    """A ``cupyx.scipy.sparse`` matrix: ``format`` (csr/csc/coo), shape, buffers."""

    format: str
    shape: tuple
    data: Buffer
    indices: Buffer | None = None      # csr/csc
    indptr: Buffer | None = None
    row: Buffer | None = None          # coo
    col: Buffer | None = None
    library: str = "cupy"

    @property
    def dtype(self):
        return self.data.dtype


def _dlpack_device(x):
    if not hasattr(x, "__dlpack_device__") or isinstance(x, np.ndarray):
        return None
    try:
        return tuple(int(v) for v in x.__dlpack_device__())
    except Exception:                   # noqa: BLE001 - not a DLPack device
        return None


def is_device(x) -> bool:
    """Whether operand ``x`` lives on a GPU (see the module docstring)."""
    if library_of(x) == "torch":       # any layout (a sparse tensor's interface raises): its device says
        device = getattr(x, "device", None)
        if getattr(device, "type", None) is not None:
            return device.type == "cuda"
    try:
        if hasattr(x, "__cuda_array_interface__"):
            return True
    except Exception:                   # noqa: BLE001 - the interface exists but cannot be read
        dev = _dlpack_device(x)
        return dev is None or dev[0] != KDL_CPU     # (buffer_of then says why)
    if type(x).__module__.startswith("cupyx.scipy.sparse"):
        return True
    dev = _dlpack_device(x)
    return dev is not None and dev[0] != KDL_CPU


def library_of(x) -> str:
    """``cupy``, ``torch`` or ``""`` (a generic device array)."""
    for cls in type(x).__mro__:          # subclasses too (nn.Parameter, tensor subclasses)
        lib = {"cupy": "cupy", "cupyx": "cupy", "torch": "torch"}.get(cls.__module__.split(".")[0])
        if lib:
            return lib
    return ""


def _c_strides(shape, itemsize: int) -> tuple:
    out, s = [], itemsize
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(out[::-1])


def _contiguous(shape, strides, itemsize: int) -> bool:
    if strides is None:
        return True
    want = _c_strides(shape, itemsize)
    return all(n <= 1 or a == b for n, a, b in zip(shape, strides, want))


def _from_cai(x, what: str) -> Buffer:
    try:
        cai = x.__cuda_array_interface__
    except Exception as err:            # noqa: BLE001 - a CPU torch tensor raises here
        raise DeviceError(f"{what}: its __cuda_array_interface__ cannot be read ({err})") from None
    shape = tuple(int(s) for s in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    if cai.get("mask") is not None:
        raise DeviceError(f"{what}: masked device arrays are not supported")
    if not _contiguous(shape, cai.get("strides"), dtype.itemsize):
        raise DeviceError(f"{what} is a strided view on the device (strides {tuple(cai['strides'])} for shape "
                          f"{shape}): sparsecc takes C-contiguous device memory only; make a contiguous copy "
                          f"on the device first (cupy.ascontiguousarray / tensor.contiguous())")
    stream = cai.get("stream") if int(cai.get("version", 2)) >= 3 else None
    return Buffer(int(cai["data"][0] or 0), shape, dtype, stream, x)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}


def _from_dlpack(x, what: str) -> Buffer:
    """A DLPack (kDLCUDA) operand: its capsule is kept alive for the call (its destructor
    calls the producer's deleter)."""
    try:
        cap = x.__dlpack__()
    except Exception as err:            # noqa: BLE001
        raise DeviceError(f"{what}: its __dlpack__() failed ({err})") from None
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    try:
        addr = get(cap, b"dltensor")
    except ValueError:
        raise DeviceError(f"{what}: __dlpack__() did not return a 'dltensor' capsule") from None
    t = _DLTensor.from_address(addr)     # DLManagedTensor starts with its DLTensor
    if t.device.device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise DeviceError(f"{what}: DLPack device type {t.device.device_type} is not CUDA (2) or CUDA managed (13)")
    kind = _DL_KINDS.get(t.dtype.code)
    if kind is None or t.dtype.lanes != 1:
        raise DeviceError(f"{what}: DLPack dtype code {t.dtype.code} x{t.dtype.lanes} is not supported")
    dtype = np.dtype("?" if kind == "b" else f"{kind}{t.dtype.bits // 8}")
    shape = tuple(t.shape[k] for k in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[k] * dtype.itemsize for k in range(t.ndim))
    if not _contiguous(shape, strides, dtype.itemsize):
        raise DeviceError(f"{what} is a strided view on the device: sparsecc takes C-contiguous device memory only")
    return Buffer(int(t.data or 0) + int(t.byte_offset), shape, dtype, None, (x, cap))


def buffer_of(x, what: str) -> Buffer:
    try:
        has = hasattr(x, "__cuda_array_interface__")
    except Exception:                   # noqa: BLE001 - _from_cai says why
        has = True
    if has:
        return _from_cai(x, what)
    return _from_dlpack(x, what)


def recognise(x, what: str):
    """A device operand as a :class:`Buffer` (dense) or :class:`DeviceSparse`."""
    if type(x).__module__.startswith("cupyx.scipy.sparse"):
        fmt = getattr(x, "format", None)
        if fmt in ("csr", "csc"):
            return DeviceSparse(fmt, tuple(int(s) for s in x.shape), buffer_of(x.data, what),
                                indices=buffer_of(x.indices, what), indptr=buffer_of(x.indptr, what))
        if fmt == "coo":
            return DeviceSparse(fmt, tuple(int(s) for s in x.shape), buffer_of(x.data, what),
                                row=buffer_of(x.row, what), col=buffer_of(x.col, what))
        raise DeviceError(f"{what}: cupyx.scipy.sparse {fmt} matrices are not supported on the device "
                          f"(CSR, CSC and COO are); convert it on the device (x.tocsr())")
    layout = str(getattr(x, "layout", "torch.strided")) if library_of(x) == "torch" else "torch.strided"
    if layout in ("torch.sparse_csr", "torch.sparse_csc"):
        csr = layout == "torch.sparse_csr"
        ptr, idx = (x.crow_indices(), x.col_indices()) if csr else (x.ccol_indices(), x.row_indices())
        if x.dim() != 2 or x.values().dim() != 1:
            raise DeviceError(f"{what}: a batched or hybrid torch sparse tensor is not taken on the device")
        return DeviceSparse("csr" if csr else "csc", tuple(int(s) for s in x.shape), buffer_of(x.values(), what),
                            indices=buffer_of(idx, what), indptr=buffer_of(ptr, what), library="torch")
    if layout != "torch.strided":
        raise DeviceError(f"{what}: torch {layout} CUDA tensors are not taken on the device (strided, "
                          f"sparse_csr and sparse_csc are); convert it on the device (x.to_sparse_csr())")
    return buffer_of(x, what)


# ----------------------------------------------------------------------------- the call
_OWN = {"csr": Format.csr(), "csc": Format.csc(), "coo": Format.coo(2)}


def _index_width(b: Buffer, what: str) -> int:
    if b.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise DeviceError(f"{what}: device index arrays must be int32 or int64, got {b.dtype}")
    return 32 if b.dtype == np.dtype(np.int32) else 64


def _check_sparse(s: DeviceSparse, what: str) -> None:
    """check=True: the index arrays copied to the host and checked as SciPy's would be."""
    import scipy.sparse as sp

    from .validate import validate
    d = driver()
    nnz = s.data.size
    data = np.zeros(nnz, s.dtype)
    if s.format == "coo":
        if s.row.size != nnz or s.col.size != nnz:
            raise OperandError(f"{what}: row/col have {s.row.size}/{s.col.size} entries, data has {nnz}")
        row = d.to_host(s.row.ptr, s.row.dtype, nnz)
        col = d.to_host(s.col.ptr, s.col.dtype, nnz)
        validate(sp.coo_array((data, (row, col)), shape=s.shape), what)
        return
    indptr = d.to_host(s.indptr.ptr, s.indptr.dtype, s.indptr.size)
    indices = d.to_host(s.indices.ptr, s.indices.dtype, s.indices.size)
    cls = sp.csr_array if s.format == "csr" else sp.csc_array
    host = cls((data, indices, indptr), shape=s.shape)   # validate reads the buffers as given
    validate(host, what)
    if not host.has_canonical_format:
        raise OperandError(f"{what}: a device {s.format.upper()} matrix must have sorted indices without "
                           f"duplicates (sparsecc cannot re-store it on the device); call "
                           f"x.sum_duplicates() on it first")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What every device call with operands of one kind shares (see :func:`call`)."""

    comp: object
    formats: tuple
    out_dtype: np.dtype
    size_slots: tuple


def _kind(v, x) -> tuple:
    """What a plan depends on about an operand (never its contents or sizes)."""
    if isinstance(v, Buffer):
        return ("dense", v.dtype, len(v.shape))
    if isinstance(v, DeviceSparse):
        idx = (v.row, v.col) if v.format == "coo" else (v.indptr, v.indices)
        return ("sparse", v.format, v.dtype, tuple(b.dtype for b in idx))
    from .plans import _key_of
    return ("host", _key_of(x))


def call(k, args: list):
    """Kernel ``k`` (``device="cuda"``) on operands ``args`` (bound, in operand order), at
    least one of them on the device (see the module docstring).  Operands are read and
    (``check=True``) validated on every call; the plan (formats, the compiled kernel) is
    kept per kind of operands."""
    from .memref import describe, descriptor_class, specifier
    from .operands import INT32_MAX, as_operand, loader, nnz_bound
    from .validate import validate

    info = k._static()
    stmt = k.stmt
    d = driver()                        # the probe: DeviceError without a driver/device
    values, shapes, lib_of_result = [], [], None
    for name, x, what in zip(stmt.operands, args, info.whats):
        if is_device(x):
            v = recognise(x, what)
            if lib_of_result is None:
                lib_of_result = (library_of(x), x)
            _on_device_zero(d, v, what)
            if k.check and isinstance(v, DeviceSparse):
                _check_sparse(v, what)
        else:
            v = as_operand(x, what)
            if k.check:
                validate(v, what)
        values.append(v)
        shapes.append(tuple(v.shape))
    sizes = info.sizes(shapes)
    out_shape = tuple(sizes[j] for j in info.out_slots)
    counts = [v.size if isinstance(v, Buffer) else v.data.size if isinstance(v, DeviceSparse) else nnz_bound(v)
              for v in values]
    wide = max(sizes + counts, default=0) > INT32_MAX       # 64-bit indices for host operands then
    key = (tuple(_kind(v, x) for v, x in zip(values, args)), wide)
    plans = k.__dict__.setdefault("_device_plans", {})
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = _plan(k, values, shapes, sizes, out_shape, wide)
    comp = k._last = plan.comp
    fmts = plan.formats
    out, out_buf = new_result(lib_of_result, out_shape, plan.out_dtype)
    # the arguments: sizes, then each operand's descriptors (and specifier), then the result
    keep = [ctypes.c_int64(int(sizes[j])) for j in plan.size_slots]
    streams, alive = [], []
    for v, f, what in zip(values, fmts, info.whats):
        if isinstance(v, Buffer):
            keep.append(_describe(v.ptr, v.shape, descriptor_class))
            streams.append(v.stream)
        elif isinstance(v, DeviceSparse):
            if v.format == "coo":
                pos = np.array([0, v.data.size], np.int32 if f.pos_width == 32 else np.int64)
                bufs = [pos, v.row, v.col, v.data]
                lvl = list(v.shape)
            else:
                bufs = [v.indptr, v.indices, v.data]
                lvl = [v.shape[f.order[0]], v.shape[f.order[1]]] if f.order else list(v.shape)
            alive.append(bufs)
            for b in bufs:
                if isinstance(b, np.ndarray):
                    keep.append(describe(b))
                else:
                    keep.append(_describe(b.ptr, b.shape, descriptor_class))
                    streams.append(b.stream)
            keep.append(specifier(lvl, [b.size for b in bufs]))
        else:
            got, lvl = loader(v, f)(v, f, what)
            alive.append(got)               # host buffers: alive for the call (copied in)
            if lvl is None:
                keep.append(describe(got))
            else:
                keep += [describe(b) for b in got] + [specifier(lvl, [b.size for b in got])]
    keep.append(_describe(out_buf.ptr, out_buf.shape, descriptor_class))
    streams.append(out_buf.stream)
    with d.current():                       # the producers' work done before the kernel reads it
        for st in dict.fromkeys(streams):
            d.sync_now(st)
    argv = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(a) for a in keep])
    if comp.entry(argv):
        raise MemoryError(f"sparsecc: the kernel '{k.source}' ran out of memory")
    del keep, alive
    return out


def _plan(k, values, shapes, sizes, out_shape, wide) -> _Plan:
    """Formats (a device operand's own; a host operand's as for host calls), dtypes, the
    device buffers among the kernel's memref arguments, the compiled kernel."""
    from .plans import _resolve_cached
    from .operands import default_format
    from .specialization import _result_dtype, gpu_formats, specialize

    info = k._static()
    stmt = k.stmt
    fmts, dtypes = [], []
    for name, v, what in zip(stmt.operands, values, info.whats):
        spec = k.formats.get(name)
        if isinstance(v, (Buffer, DeviceSparse)):
            if isinstance(v, DeviceSparse):
                if v.format == "coo":
                    w = _index_width(v.row, what)
                    if v.col.dtype != v.row.dtype:
                        raise DeviceError(f"{what}: row and col have different dtypes ({v.row.dtype}, {v.col.dtype})")
                    f = _OWN["coo"].with_widths(w, w)
                else:
                    f = _OWN[v.format].with_widths(_index_width(v.indptr, what), _index_width(v.indices, what))
            else:
                f = Format.dense(len(v.shape))
            if spec is not None:
                want = resolve(spec, k._ranks[name], what)
                rank = k._ranks[name]
                if want.is_dense != f.is_dense or (not f.is_dense and (
                        want.levels, want.order or tuple(range(rank))) != (f.levels, f.order or tuple(range(rank)))):
                    raise DeviceError(f"{what} is stored on the device as {f}, but the kernel takes {want}; "
                                      f"sparsecc does not re-store device operands: convert it on the device")
        else:
            own, block = default_format(v)
            f = _resolve_cached(spec or own, k._ranks[name], what, block)
        fmts.append(f)
        dtypes.append(dt.lookup(v.dtype, what).name)
    planned = gpu_formats(stmt, fmts)
    for v, f, g, what in zip(values, fmts, planned, info.whats):
        if isinstance(v, DeviceSparse) and (f.levels, f.order) != (g.levels, g.order):
            raise DeviceError(f"{what} is stored on the device as {v.format.upper()}, which gives this kernel no "
                              f"GPU loop (it runs as {g}, a dense outer level over the first output index); "
                              f"sparsecc does not re-store device operands: convert it on the device "
                              f"(e.g. x.tocsr() / x.tocsc())")
    out_fmt = k._result_format(frozenset(n for n, f in zip(stmt.operands, planned) if not f.is_dense), out_shape)
    if out_fmt is not None:              # (_result_format raises DeviceError for sparse results first)
        raise DeviceError(f"'{k.source}' has a sparse result, which cannot run on the device")
    fmts = [f if f.is_dense or isinstance(v, DeviceSparse)
            else k._operand_widths(f, v, shape, what, (wide, wide) if wide else None)
            for f, v, shape, what in zip(planned, values, shapes, info.whats)]
    out_dtype = _result_dtype(stmt, tuple(dtypes))
    if out_dtype.kind == "c" and any(not f.is_dense and d_ != out_dtype.name for f, d_ in zip(fmts, dtypes)):
        raise DeviceError("a complex result from real sparse values: give the sparse operand complex values")
    # the buffers that are device pointers, as positions among the kernel's memref arguments
    device_buffers, at = [], 0
    for v, f in zip(values, fmts):
        n = 1 if f.is_dense else len(f.fields())
        if isinstance(v, DeviceSparse):
            device_buffers += list(range(at + (1 if v.format == "coo" else 0), at + n))  # COO's [0, nnz]: host
        elif isinstance(v, Buffer):
            device_buffers.append(at)
        at += n
    device_buffers.append(at)            # the result
    options = dataclasses.replace(k.options, device_buffers=tuple(device_buffers))
    comp = specialize(stmt, tuple(fmts), tuple(dtypes), options, None)
    return _Plan(comp, tuple(fmts), np.dtype(out_dtype), tuple(info.slot[i] for i in comp.signature.index_order))


def _on_device_zero(d: _Driver, v, what: str) -> None:
    """Every buffer of a device operand is CUDA memory of device 0 (the device the MLIR
    runtime launches on); a pointer the driver does not know is refused before any launch."""
    bufs = [v] if isinstance(v, Buffer) else [b for b in (v.data, v.indices, v.indptr, v.row, v.col) if b]
    for b in bufs:
        if not b.size:
            continue
        dev = d.device_of(b.ptr)
        if dev is None:
            raise DeviceError(f"{what} claims to be on the GPU, but the CUDA driver does not know its pointer "
                              f"0x{b.ptr:x} as device memory")
        if dev != 0:
            raise DeviceError(f"{what} is on CUDA device {dev}; sparsecc runs kernels on device 0 only "
                              f"(the device MLIR's runtime uses)")


def _describe(ptr: int, shape, descriptor_class):
    dsc = descriptor_class(len(shape))()
    dsc.allocated = ptr
    dsc.aligned = ptr
    dsc.offset = 0
    if shape:
        dsc.sizes[:] = shape
        dsc.strides[:] = [s // 1 for s in _c_strides(shape, 1)]
    return dsc


def new_result(lib, shape, dtype):
    """A zeroed dense result on the device: ``(array, its Buffer)`` in the library of the
    operand ``lib`` = ``(library name, operand)``."""
    name, x = lib
    if name == "cupy":
        import cupy                     # the operand's type comes from CuPy
        with cupy.cuda.Device(0):
            out = cupy.zeros(shape, dtype=dtype)
    elif name == "torch":
        import torch                    # the operand's type comes from torch
        dev = x.device if getattr(x, "device", None) is not None and x.device.type == "cuda" else "cuda:0"
        out = torch.zeros(shape, dtype=getattr(torch, np.dtype(dtype).name), device=dev)
    else:
        out = DeviceArray(shape, dtype)
    return out, _from_cai(out, "the result")
