"""The compile worker: MLIR text in, a shared library (or, without a C compiler, an object
file that ORC loads: ``targets.py``) out.

Runs in its own process (``python -m sparsecc.runtime._worker``) because the MLIR wheels are
built with assertions that abort the whole process; a crash here costs the caller a
``CompileError``, not its notebook.

Protocol: length-prefixed frames (8 bytes little-endian length, then UTF-8 JSON).  Requests
come on fd 0; replies go to the pipe that was fd 1 at startup, which the worker keeps on a
private descriptor: fd 1 itself is then pointed at stderr, so nothing a pass, LLVM, MLIR or
a stray ``print`` writes can reach the reply channel.  Each request carries an ``id`` that
its reply repeats.  A reply says ``ok``; a failure says its ``kind``: ``rejected`` (MLIR or
LLVM refused the kernel, or linking failed) or ``internal`` (a Python error in sparsecc: a
bug, with the full traceback).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

# the checked entry (runtime/entry.py), under the names other modules import from here
from sparsecc.runtime.entry import (ALLOCATORS, BODY, ENTRY, OOM_IR, OOM_VARIANTS, Rejected,  # noqa: F401
                                    add_oom_entry, imports_of, oom_entry_ir, redirect_allocations)

HEADER = 8


def _test_hook(hook: dict) -> None:
    """Test-only behaviours (tests/test_reliability.py): misbehave like a pass or LLVM might."""
    if "stdout" in hook:            # garbage on fd 1, as a pass or LLVM writing there would
        print(hook["stdout"])
        os.write(1, hook["stdout"].encode())
    if "sleep" in hook:             # a hang
        time.sleep(hook["sleep"])
    if "internal" in hook:          # a bug in the worker's Python
        raise KeyError(hook["internal"])
    if "abort" in hook:             # an assertion in MLIR
        os.abort()


def add_packed_entry(module, ciface: str, entry: str) -> list[str]:
    """Add ``void <entry>(void **args)`` to ``module`` (LLVM dialect), built through the MLIR
    bindings: args[k] points at argument k of ``ciface``, which it calls.  Returns the
    argument types of ``ciface`` (the kernel's ABI, as text).

    For a pointer argument (a memref descriptor) args[k] *is* that pointer; for anything
    else (sizes, the sparse storage specifier struct) args[k] points at the value.  Passing
    the specifier struct by value from C does not match LLVM's aggregate ABI, so C callers
    go through this wrapper.
    """
    from mlir import ir
    from mlir.dialects import llvm

    from sparsecc.errors import InternalError

    target = None
    for op in module.body.operations:
        if op.operation.name == "llvm.func" and ir.StringAttr(op.attributes["sym_name"]).value == ciface:
            target = op.operation
    if target is None or len(target.regions[0].blocks) == 0:
        raise InternalError(f"no {ciface} after lowering to the LLVM dialect")
    types = [a.type for a in target.regions[0].blocks[0].arguments]
    ptr = ir.Type.parse("!llvm.ptr")
    with ir.InsertionPoint(module.body), ir.Location.unknown():
        fn = llvm.LLVMFuncOp(entry, ir.TypeAttr.get(ir.Type.parse("!llvm.func<void (ptr)>")))
        fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        block = fn.regions[0].blocks.append(ptr)
        with ir.InsertionPoint(block):
            args = block.arguments[0]
            vals = []
            for k, t in enumerate(types):
                p = llvm.GEPOp(ptr, args, [], ir.DenseI32ArrayAttr.get([k]), ptr,
                               ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0)).result
                a = llvm.LoadOp(ptr, p).result
                vals.append(a if t == ptr else llvm.LoadOp(t, a).result)
            llvm.CallOp(None, vals, [], ir.DenseI32ArrayAttr.get([]), callee=ir.FlatSymbolRefAttr.get(ciface))
            llvm.ReturnOp()
    return [str(t) for t in types]


def compile_job(req: dict) -> dict:
    """One request: MLIR text -> the target's pipelines -> LLVM IR -> the target's code
    generator (with the checked entry) -> an object, linked by the target into a library
    (or kept as the object: ahead-of-time builds, and the JIT without a C compiler)."""
    from mlir import ir
    from mlir.dialects import llvm as llvm_dialect

    from sparsecc.options import Options
    from sparsecc.runtime.targets import from_request

    if req.get("test_hook"):
        _test_hook(req["test_hook"])

    options = Options(**req["options"])      # every code-generation option
    target = from_request(req["target"])     # resolved by the caller: no probing here
    entry = req.get("entry", ENTRY)
    stages: dict[str, str] = {}
    with ir.Context():
        module = ir.Module.parse(req["mlir"])
        stages["mlir"] = str(module)
        module, lowered, chosen = target.kind.lower(module, options, target.facts())
        stages.update(lowered)
        types = add_packed_entry(module, f"_mlir_ciface_{req['name']}", entry + BODY)
        module.operation.verify()
        stages["llvm-dialect"] = str(module)
        llvm_ir = llvm_dialect.translate_module_to_llvmir(module.operation)

    # an object a system linker links (a library here, or an ahead-of-time library later)
    # keeps its jump buffer in thread-local storage; one loaded in-process by ORC cannot
    oom = "tls" if req.get("object_only") else target.kind.oom_variant(target)
    stages["llvm"], obj, imports, exports = target.kind.codegen(llvm_ir, target, options, entry, oom)
    out = req["out"]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    reply = {"ok": True, "stages": stages, "arg_types": types, "parallel": chosen["parallel"],
             "openmp": chosen["openmp"], "guarded": chosen.get("guarded", []),
             "inexact": chosen.get("inexact", False),
             "imports": imports, "exports": exports}
    if req.get("object_only"):          # ahead-of-time libraries link several objects later
        if chosen["openmp"]:
            from sparsecc.errors import InternalError
            raise InternalError("an ahead-of-time object with parallel loops")
        with open(out, "wb") as f:
            f.write(obj)
        return reply
    target.kind.link(obj, out, target, chosen)
    return reply


def _read_exact(f, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _rejection(err: BaseException) -> bool:
    if isinstance(err, Rejected):
        return True
    try:
        from mlir import ir
    except ImportError:
        return False
    return isinstance(err, ir.MLIRError)


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")    # the reply pipe, on a private descriptor
    os.dup2(2, 1)                           # fd 1 (C and C++ writers) goes to stderr now
    sys.stdout = sys.stderr
    requests = os.fdopen(0, "rb", buffering=0)
    while True:
        head = _read_exact(requests, HEADER)
        if head is None:
            return
        body = _read_exact(requests, int.from_bytes(head, "little"))
        if body is None:
            return
        req = json.loads(body)
        try:
            reply = compile_job(req)
        except Exception as err:   # MLIRError carries the diagnostics in its text
            reply = {"ok": False, "kind": "rejected" if _rejection(err) else "internal",
                     "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()}
        reply["id"] = req.get("id")
        data = json.dumps(reply).encode()
        replies.write(len(data).to_bytes(HEADER, "little") + data)
        replies.flush()


if __name__ == "__main__":
    main()
