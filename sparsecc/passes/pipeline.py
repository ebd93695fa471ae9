"""The pass pipelines, one pass per line with its reason.

Kernels go through two pipelines instead of MLIR's all-in-one ``sparsifier``:

* ``sparsifier`` copies a dense output that the function receives as an argument instead of
  writing it in place, and it gives no hook between sparsification and lowering to LLVM;
* the MLIR wheels abort the process on loads and stores of ``i1`` memrefs, which sparse
  outputs create (the ``filled`` bitmap of access-pattern expansion): between the two
  pipelines :func:`widen_i1_memrefs` retypes them to ``i8`` (see ``widen_i1.py``).

Deallocation: the sparsifier frees what it allocates itself (expansion buffers, grown
sparse buffers), and the emitter frees its own dense temporaries with explicit
``memref.dealloc``.  MLIR's ``buffer-deallocation-pipeline`` cannot be used: it rejects the
explicit deallocations the sparsifier emits for sparse outputs.

Each entry is ``(pass, reason)``; an entry may be ``("func.func(...)", ...)`` to nest.
"""

from __future__ import annotations

# MLIR with encoded tensors -> loops over memrefs
SPARSIFY: tuple[tuple[str, str], ...] = (
    ("sparsification-and-bufferization",
     "sparsify every linalg.generic over encoded tensors, then one-shot bufferize; sparse "
     "tensors become pos/crd/value memrefs plus a storage specifier (codegen ABI: dynamic shapes)"),
    ("sparse-storage-specifier-to-llvm",
     "the storage specifier becomes an LLVM struct {lvlSizes[rank], memSizes[fields]}"),
    ("func.func(canonicalize)", "clean up after sparsification"),
    ("func.func(expand-realloc)", "memref.realloc (growing sparse output buffers) into alloc+copy+dealloc"),
    ("func.func(convert-linalg-to-loops)", "the remaining dense linalg ops (fills) become loops"),
    ("func.func(convert-vector-to-scf)", "vector transfers left by vectorization become loops"),
)

# loops over memrefs -> LLVM dialect
LOWER_TO_LLVM: tuple[tuple[str, str], ...] = (
    ("func.func(convert-scf-to-cf)", "structured control flow to branches"),
    ("expand-strided-metadata", "subviews into plain descriptor arithmetic"),
    ("lower-affine", "affine.apply from block formats (floordiv/mod) into arith"),
    ("convert-vector-to-llvm", "vector ops"),
    ("finalize-memref-to-llvm", "memref descriptors and loads/stores"),
    ("func.func(convert-complex-to-standard)", "complex division, abs, exp ... into real arithmetic"),
    ("func.func(arith-expand)", "arith ops LLVM has no instruction for (ceildiv, maximumf ...)"),
    ("func.func(convert-math-to-llvm)", "math ops with LLVM intrinsics"),
    ("convert-math-to-libm", "the rest of math (tan, asin ...) as libm calls"),
    ("convert-complex-to-libm", "complex functions as libm calls"),
    ("convert-complex-to-llvm", "complex values into LLVM structs"),
    ("convert-func-to-llvm", "functions; llvm.emit_c_interface adds the _mlir_ciface_ wrapper"),
    ("convert-arith-to-llvm", "arithmetic"),
    ("convert-cf-to-llvm", "branches"),
    ("reconcile-unrealized-casts", "drop the casts the conversions left between them"),
)

#: named stages of a compile, in order: each maps one IR text to the next
STAGES = ("mlir", "sparsified", "llvm-dialect", "llvm", "object")


def pipeline_text(passes: tuple[tuple[str, str], ...]) -> str:
    return "builtin.module(" + ",".join(p for p, _ in passes) + ")"
