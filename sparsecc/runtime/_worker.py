"""The compile worker: MLIR text in, a shared library out.

Runs in its own process (``python -m sparsecc.runtime._worker``) because the MLIR wheels are
built with assertions that abort the whole process; a crash here costs the caller a
``CompileError``, not its notebook.  Protocol: one JSON request per line on stdin, one JSON
reply per line on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback

ENTRY = "sparsecc_entry"


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
        module = ir.Module.parse(_packed_wrapper(str(module), ciface, types, req.get("entry", ENTRY)))
        stages["llvm-dialect"] = str(module)
        llvm_ir = llvm_dialect.translate_module_to_llvmir(module.operation)

    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    mod = llb.parse_assembly(llvm_ir)
    mod.verify()
    # Only the packed entry is exported: every other function (the kernel, its C interface,
    # the sparsifier's insert/sort helpers) becomes internal, so LLVM may inline them and
    # several kernels can share one library without clashing symbols.
    entry = req.get("entry", ENTRY)
    for fn in mod.functions:
        if not fn.is_declaration and fn.name != entry:
            fn.linkage = "internal"
    cpu = options.cpu or llb.get_host_cpu_name()
    features = host_features(llb.get_host_cpu_features().flatten()) if not options.cpu else ""
    tm = llb.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=features, opt=options.opt_level, reloc="pic", codemodel="default")
    pb = llb.create_pass_builder(tm, llb.create_pipeline_tuning_options(speed_level=options.opt_level))
    pb.getModulePassManager().run(mod, pb)
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
        with open(o, "wb") as f:
            f.write(obj)
        cc = req.get("cc") or "cc"
        libs = ["-lm"]
        if chosen["openmp"]:            # libomp by name; the runtime loads it before the kernel
            from sparsecc.runtime.threads import link_args
            libs = link_args() + libs
        r = subprocess.run([cc, "-shared", "-o", so, o, *libs], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"linking with {cc} failed: {r.stderr.strip()}")
        os.replace(so, out)
    return reply


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply = compile_job(req)
        except Exception as err:   # MLIRError carries the diagnostics in its text
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}",
                     "trace": traceback.format_exc(limit=4)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
