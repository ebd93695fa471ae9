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

# MLIR with encoded tensors -> loops over sparse buffers (dense values still tensors)
SPARSIFY: tuple[tuple[str, str], ...] = (
    # MLIR's sparsification-and-bufferization mini-pipeline, spelled out: as a textual pass
    # it cannot be told to free the sparse temporaries it makes (create-sparse-deallocs),
    # and every transpose or format conversion inside a kernel then leaked its buffers.
    ("pre-sparsification-rewrite", "fold and rewrite sparse ops into forms the sparsifier handles"),
    ("func.func(empty-tensor-to-alloc-tensor)", "tensor.empty of the sparse result into an allocation"),
    ("sparse-reinterpret-map{scope=all}",
     "demap non-identity level maps (CSC, BSR blocks) so loops run over levels"),
    ("sparsification{enable-runtime-library=false}",
     "sparsify every linalg.generic over encoded tensors (loops over stored entries only); "
     "may insert a conversion where no loop order fits (transposes)"),
    ("func.func(stage-sparse-ops)", "split conversions and other complex sparse ops into stages"),
    ("lower-sparse-ops-to-foreach{enable-runtime-library=false enable-convert=true}",
     "conversions and the rest into sparse_tensor.foreach loops"),
    ("sparse-reinterpret-map{scope=except-generic}", "demap what the previous step created"),
    ("func.func(lower-sparse-foreach-to-scf)", "foreach loops into scf loops"),
    ("loop-invariant-code-motion", "hoist invariant loads out of the sparse loops"),
    ("sparse-tensor-codegen{create-sparse-deallocs=true}",
     "sparse tensors become pos/crd/value memrefs plus a storage specifier (codegen ABI: "
     "dynamic shapes); temporaries made by the sparsifier are freed"),
    # (before this one: sort_algorithm heap_sort, see rewrites.py)
    ("sparse-buffer-rewrite", "sort, push_back ... on buffers into code"),
)

# (between: restrict_to_tensor, see rewrites.py)

# dense tensors -> memrefs
BUFFERIZE: tuple[tuple[str, str], ...] = (
    ("one-shot-bufferize{bufferize-function-boundaries=true "
     "function-boundary-type-conversion=identity-layout-map unknown-type-conversion=identity-layout-map}",
     "the remaining dense tensors into memrefs (the dense output is written in place)"),
    ("sparse-storage-specifier-to-llvm",
     "the storage specifier becomes an LLVM struct {lvlSizes[rank], memSizes[fields]}"),
    ("func.func(canonicalize)", "clean up after sparsification"),
    ("func.func(expand-realloc)", "memref.realloc (growing sparse output buffers) into alloc+copy+dealloc"),
    ("func.func(convert-linalg-to-loops)", "the remaining dense linalg ops (fills) become loops"),
    ("func.func(convert-vector-to-scf)", "vector transfers left by vectorization become loops"),
)

# (between: widen_i1_memrefs, see widen_i1.py)

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


def fingerprint() -> str:
    """Every pipeline and rewrite, as text: part of the cache key."""
    from . import rewrites, widen_i1
    return "\n".join([pipeline_text(SPARSIFY), rewrites.VERSION, pipeline_text(BUFFERIZE), widen_i1.VERSION,
                      pipeline_text(LOWER_TO_LLVM)])


def lower(module) -> dict[str, str]:
    """Run every pipeline and rewrite on ``module`` (in place, inside the compile worker),
    down to the LLVM dialect; returns the ``sparsified`` stage's text."""
    from mlir import passmanager

    from .rewrites import restrict_to_tensor, sort_algorithm
    from .widen_i1 import widen_i1_memrefs

    cut = [p for p, _ in SPARSIFY].index("sparse-buffer-rewrite")
    passmanager.PassManager.parse(pipeline_text(SPARSIFY[:cut])).run(module.operation)
    sort_algorithm(module, "heap_sort")
    passmanager.PassManager.parse(pipeline_text(SPARSIFY[cut:])).run(module.operation)
    restrict_to_tensor(module)
    passmanager.PassManager.parse(pipeline_text(BUFFERIZE)).run(module.operation)
    widen_i1_memrefs(module)
    stages = {"sparsified": str(module)}
    passmanager.PassManager.parse(pipeline_text(LOWER_TO_LLVM)).run(module.operation)
    return stages
