"""The compile worker: MLIR text in, a shared library out.

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

ENTRY = "sparsecc_entry"
HEADER = 8
BODY = "__body"            # the MLIR packed entry is <entry>__body; <entry> is C (OOM_C)
#: the C library functions generated code may allocate with, redirected to checked wrappers
ALLOCATORS = ("malloc", "calloc", "realloc", "aligned_alloc")

# Every allocation of a kernel is checked.  The generated code calls sparsecc_malloc & co.
# (the declarations are renamed after LLVM's optimization, which knows malloc's meaning);
# on NULL they longjmp back to the exported entry, which returns 1 instead of 0, and the
# Python call path raises MemoryError.  The kernel's temporaries allocated before that leak.
# In a thread other than the caller's (an OpenMP worker) there is nothing to jump back to:
# that still aborts.  Shared with ahead-of-time libraries (runtime/aot.py).
OOM_C = r"""
#include <setjmp.h>
#include <stddef.h>
#include <stdlib.h>
#define SPARSECC_HIDDEN __attribute__((visibility("hidden")))
static __thread jmp_buf *sparsecc_oom_jump;
static void sparsecc_oom(void) {
    if (sparsecc_oom_jump) longjmp(*sparsecc_oom_jump, 1);
    abort();
}
SPARSECC_HIDDEN void *sparsecc_malloc(size_t n) {
    void *p = malloc(n); if (!p && n) sparsecc_oom(); return p;
}
SPARSECC_HIDDEN void *sparsecc_calloc(size_t k, size_t n) {
    void *p = calloc(k, n); if (!p && k && n) sparsecc_oom(); return p;
}
SPARSECC_HIDDEN void *sparsecc_realloc(void *q, size_t n) {
    void *p = realloc(q, n); if (!p && n) sparsecc_oom(); return p;
}
SPARSECC_HIDDEN void *sparsecc_aligned_alloc(size_t a, size_t n) {
    void *p = aligned_alloc(a, n); if (!p && n) sparsecc_oom(); return p;
}
/* int NAME(void **args): 0, or 1 when an allocation failed (out of memory) */
#define SPARSECC_ENTRY(NAME) \
    SPARSECC_HIDDEN void NAME##__body(void **args); \
    int NAME(void **args) { \
        jmp_buf here; jmp_buf *volatile outer = sparsecc_oom_jump; \
        sparsecc_oom_jump = &here; \
        if (setjmp(here)) { sparsecc_oom_jump = outer; return 1; } \
        NAME##__body(args); \
        sparsecc_oom_jump = outer; \
        return 0; \
    }
"""


def redirect_allocations(mod) -> None:
    """Point the calls to C allocators in llvmlite module ``mod`` at the checked wrappers."""
    for fn in mod.functions:
        if fn.is_declaration and fn.name in ALLOCATORS:
            fn.name = f"sparsecc_{fn.name}"


class Rejected(Exception):
    """MLIR or LLVM refused the kernel (or the linker failed): not a bug in sparsecc."""


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
    generator -> an object, linked by the target into a library (or kept as an object)."""
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

    stages["llvm"], obj = target.kind.codegen(llvm_ir, target, options, entry + BODY)
    out = req["out"]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    reply = {"ok": True, "stages": stages, "arg_types": types, "parallel": chosen["parallel"],
             "openmp": chosen["openmp"]}
    if req.get("object_only"):          # ahead-of-time libraries link several objects later
        if chosen["openmp"]:
            from sparsecc.errors import InternalError
            raise InternalError("an ahead-of-time object with parallel loops")
        with open(out, "wb") as f:
            f.write(obj)
        return reply
    target.kind.link(obj, out, target, chosen, entry, req.get("cc") or "cc")
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
