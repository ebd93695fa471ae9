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
import subprocess
import sys
import tempfile
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


def _packed_wrapper(module_text: str, ciface: str, types: list[str], entry: str = ENTRY) -> str:
    """``void <entry>(void **args)`` (default ``sparsecc_entry``): args[k] points at argument k.

    For a pointer argument (a memref descriptor) args[k] *is* that pointer; for anything
    else (sizes, the sparse storage specifier struct) args[k] points at the value.  Passing
    the specifier struct by value from C does not match LLVM's aggregate ABI, so C callers
    go through this wrapper.
    """
    lines = [f"  llvm.func @{entry}(%args: !llvm.ptr) attributes {{llvm.emit_c_interface}} {{"]
    vals = []
    for k, t in enumerate(types):
        lines.append(f"    %p{k} = llvm.getelementptr %args[{k}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr")
        lines.append(f"    %a{k} = llvm.load %p{k} : !llvm.ptr -> !llvm.ptr")
        if t == "!llvm.ptr":
            vals.append(f"%a{k}")
        else:
            lines.append(f"    %v{k} = llvm.load %a{k} : !llvm.ptr -> {t}")
            vals.append(f"%v{k}")
    lines.append(f"    llvm.call @{ciface}({', '.join(vals)}) : ({', '.join(types)}) -> ()")
    lines += ["    llvm.return", "  }"]
    text = module_text.rstrip()
    assert text.endswith("}")
    return text[:-1] + "\n".join(lines) + "\n}\n"


def compile_job(req: dict) -> dict:
    from mlir import ir
    from mlir.dialects import llvm as llvm_dialect

    import llvmlite.binding as llb

    from sparsecc.options import Options
    from sparsecc.passes.pipeline import host_features, lower

    if req.get("test_hook"):
        _test_hook(req["test_hook"])

    # every code-generation option (parallel strategy, vector length, loop order ...); the
    # old opt_level/cpu fields still count when a request has no "options"
    options = Options(**req["options"]) if req.get("options") else Options(
        opt_level=req.get("opt_level", 3), cpu=req.get("cpu"))
    stages: dict[str, str] = {}
    with ir.Context():
        module = ir.Module.parse(req["mlir"])
        stages["mlir"] = str(module)
        module, lowered, chosen = lower(module, options)
        stages.update(lowered)
        ciface = f"_mlir_ciface_{req['name']}"
        types = None
        for op in module.body.operations:
            if op.operation.name == "llvm.func" and op.attributes["sym_name"].value == ciface:
                types = [str(a.type) for a in op.regions[0].blocks[0].arguments]
        if types is None:
            raise RuntimeError(f"no {ciface} after lowering")
        module = ir.Module.parse(_packed_wrapper(str(module), ciface, types, req.get("entry", ENTRY) + BODY))
        stages["llvm-dialect"] = str(module)
        llvm_ir = llvm_dialect.translate_module_to_llvmir(module.operation)

    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    try:
        mod = llb.parse_assembly(llvm_ir)
        mod.verify()
    except RuntimeError as err:             # LLVM refused the IR
        raise Rejected(f"LLVM: {err}") from None
    # Only the packed entry is exported: every other function (the kernel, its C interface,
    # the sparsifier's insert/sort helpers) becomes internal, so LLVM may inline them and
    # several kernels can share one library without clashing symbols.
    entry = req.get("entry", ENTRY)
    for fn in mod.functions:
        if fn.is_declaration:
            continue
        if fn.name == entry + BODY:
            fn.visibility = "hidden"    # called by the C entry (OOM_C) linked next to it
        else:
            fn.linkage = "internal"
    cpu = options.cpu or llb.get_host_cpu_name()
    features = host_features(llb.get_host_cpu_features().flatten()) if not options.cpu else ""
    tm = llb.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=features, opt=options.opt_level, reloc="pic", codemodel="default")
    pb = llb.create_pass_builder(tm, llb.create_pipeline_tuning_options(speed_level=options.opt_level))
    pb.getModulePassManager().run(mod, pb)
    redirect_allocations(mod)
    stages["llvm"] = str(mod)
    obj = tm.emit_object(mod)

    out = req["out"]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    reply = {"ok": True, "stages": stages, "arg_types": types, "parallel": chosen["parallel"],
             "openmp": chosen["openmp"]}
    if req.get("object_only"):          # ahead-of-time libraries link several objects later
        if chosen["openmp"]:
            raise RuntimeError("internal error: an ahead-of-time object with parallel loops")
        with open(out, "wb") as f:
            f.write(obj)
        return reply
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        o = os.path.join(tmp, "kernel.o")
        so = os.path.join(tmp, "kernel.so")
        c = os.path.join(tmp, "entry.c")
        with open(o, "wb") as f:
            f.write(obj)
        with open(c, "w") as f:
            f.write(OOM_C + f"SPARSECC_ENTRY({entry})\n")
        cc = req.get("cc") or "cc"
        libs = ["-lm"]
        if chosen["openmp"]:            # libomp by name; the runtime loads it before the kernel
            from sparsecc.runtime.threads import link_args
            libs = link_args() + libs
        r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", so, o, c, *libs], capture_output=True, text=True)
        if r.returncode:
            raise Rejected(f"linking with {cc} failed: {r.stderr.strip()}")
        os.replace(so, out)
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
