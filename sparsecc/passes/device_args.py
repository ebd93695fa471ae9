"""A rewrite of the cuda target's host code for operands that already live on the device.

``sparse-gpu-codegen`` writes host code that, for every buffer the GPU kernel touches,
allocates device memory (``gpu.alloc``), copies the host buffer in (``gpu.memcpy``), passes
the device copy to ``gpu.launch_func``, copies the result back and frees the copies
(``gpu.dealloc``).  For a buffer whose descriptor already holds a *device* pointer (a CuPy
array, a torch CUDA tensor, anything with ``__cuda_array_interface__``/DLPack), that is
wrong: the copy would read device memory as host memory.  :func:`keep_on_device` takes the
set of such buffers as its option (``device_memrefs``: positions among the memref
arguments of ``func.func @kernel``, in order; the runtime computes them from the operands'
formats, and they are part of the target's cache key) and, for each of them, drops the
allocation, the copy in, the copy out and the free, so the launch receives the argument
(or the host code's subview of it) itself: the kernel reads and writes the user's device
memory.  Host buffers keep their copies (mixed host and device operands work).

It refuses (``DeviceError``) a kernel whose host code would touch a device buffer's
contents in any other way (a ``memref.load``/``store`` on the CPU): that would read device
memory on the host.  Pure data over MLIR: imports nothing from ``sparsecc.runtime``.
"""

from __future__ import annotations

#: the version of this rewrite (part of the cuda target's key through passes/gpu.py)
VERSION = "device-args-1"

#: host ops that may see a device buffer: they use its descriptor, never its contents
_DESCRIPTOR_ONLY = frozenset({"memref.dim", "memref.subview", "memref.cast", "memref.extract_strided_metadata",
                              "gpu.launch_func"})
_VIEWS = frozenset({"memref.subview", "memref.cast"})


def _owner_op(value):
    """The operation defining ``value`` (None for a block argument)."""
    from mlir import ir
    op = value.owner
    if isinstance(op, ir.Block):
        return None
    return op.operation if hasattr(op, "operation") else op


def _root(value):
    """``value`` with subviews and casts looked through."""
    while True:
        op = _owner_op(value)
        if op is None or op.name not in _VIEWS:
            return value
        value = op.operands[0]


def _kernel_func(module):
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and str(op.attributes["sym_name"]) == '"kernel"':
            return op
    from ..errors import InternalError
    raise InternalError("no func.func @kernel in the module")


def _memref_args(func) -> list:
    block = func.regions[0].blocks[0]
    return [a for a in block.arguments if str(a.type).startswith("memref<")]


def _walk(func, name: str) -> list:
    from .rewrites import ops_named
    return ops_named(func, name)


def _async_deps(op) -> list:
    """The async dependencies of a gpu op (its leading ``!gpu.async.token`` operands)."""
    return [v for v in op.operands if str(v.type) == "!gpu.async.token"]


def _drop(op, via=None) -> None:
    """Erase async gpu op ``op``; uses of its token go to its first dependency (or ``via``)."""
    deps = _async_deps(op)
    for r in op.results:
        if str(r.type) == "!gpu.async.token":
            repl = deps[0] if deps else via
            if repl is None:
                from ..errors import InternalError
                raise InternalError(f"an async {op.name} without dependencies to stand in for its token")
            r.replace_all_uses_with(repl)
    op.erase()


def keep_on_device(module, device_memrefs) -> int:
    """Rewrite ``func.func @kernel``'s host code so that the memref arguments at positions
    ``device_memrefs`` (device pointers) are used in place (see the module docstring).
    Returns how many copies (in and out) were removed."""
    device_memrefs = sorted(set(int(k) for k in device_memrefs))
    if not device_memrefs:
        return 0
    from mlir import ir
    from mlir.dialects import gpu

    from ..errors import DeviceError
    func = _kernel_func(module)
    args = _memref_args(func)
    if device_memrefs[-1] >= len(args):
        from ..errors import InternalError
        raise InternalError(f"device buffer {device_memrefs[-1]} of a kernel with {len(args)} memref arguments")
    dev = [args[k] for k in device_memrefs]

    def on_device(v) -> bool:
        r = _root(v)
        return any(r == a for a in dev)

    removed = 0
    # copies in: gpu.memcpy %alloc, %arg -> the launch (and everything) uses %arg itself
    for cp in _walk(func, "gpu.memcpy"):
        dst, src = cp.operands[-2], cp.operands[-1]
        alloc = _owner_op(dst)
        if not on_device(src) or alloc is None or alloc.name != "gpu.alloc":
            continue
        if str(dst.type) != str(src.type):
            with ir.InsertionPoint(alloc), alloc.location:
                from mlir.dialects import memref
                src = memref.CastOp(dst.type, src).result
        alloc.results[0].replace_all_uses_with(src)
        _drop(cp)
        _drop(alloc)
        removed += 1
    # copies out (now from the buffer to itself) and the frees of the buffers kept
    for cp in _walk(func, "gpu.memcpy"):
        dst, src = cp.operands[-2], cp.operands[-1]
        if on_device(dst) and on_device(src):
            _drop(cp)
            removed += 1
    for d in _walk(func, "gpu.dealloc"):
        if on_device(d.operands[-1]):
            _drop(d)
    # nothing else on the host may read or write a device buffer's contents
    for a in dev:
        todo = [a]
        while todo:
            v = todo.pop()
            for use in v.uses:
                user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                if user.name in _VIEWS:
                    todo.extend(user.results)
                elif user.name not in _DESCRIPTOR_ONLY:
                    raise DeviceError(f"this kernel's host code uses a device operand's buffer in {user.name} "
                                      f"(on the CPU), so it cannot take that operand on the device; pass it as "
                                      f"a host array")
    _tidy_waits(func)
    return removed


def _tidy_waits(func) -> None:
    """Each synchronous ``gpu.wait`` waits for each token once (it destroys the stream of
    each: twice would destroy one twice); streams created for nothing (a ``gpu.wait async``
    without dependencies whose only use is such a wait) are not created at all."""
    from mlir import ir
    from mlir.dialects import gpu
    for w in _walk(func, "gpu.wait"):
        if len(w.results):
            continue
        toks, seen = [], []
        for t in w.operands:
            if any(t == s for s in seen):
                continue
            seen.append(t)
            op = _owner_op(t)
            if (op is not None and op.name == "gpu.wait" and not _async_deps(op)
                    and sum(1 for _ in t.uses) == 1):
                continue                    # an empty stream: dropped below
            toks.append(t)
        if len(toks) == len(w.operands):
            continue
        with ir.InsertionPoint(w), w.location:
            gpu.WaitOp(None, toks)
        empties = [s for s in seen if not any(s == t for t in toks)]
        w.erase()
        for s in empties:
            op = _owner_op(s)
            if op is not None and not any(True for _ in s.uses):
                op.erase()
