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

Code-generation options (``sc.Options``) change the pipelines: ``loop_order`` and
``parallel`` fill in options of ``sparse-reinterpret-map`` and ``sparsification``,
``vector_length`` adds ``sparse-vectorization``, and a kernel with parallel loops goes
through ``OPENMP`` (``scf.parallel`` -> OpenMP).  :func:`pipelines` gives the exact
pipelines of one options object; :func:`fingerprint` (part of the cache key) covers every
table and rewrite.

This module is pure data over MLIR: it imports nothing from ``sparsecc.runtime``.  What the
pipelines need to know about the machine (is an OpenMP runtime installed?) comes in as a
:class:`PipelineFacts`, which the runtime's compile target resolves once per process
(``runtime/targets.py``) and hands to :func:`lower`.

Each entry is ``(pass, reason)``; an entry may be ``("func.func(...)", ...)`` to nest.
``<name>`` in a pass is a placeholder filled in from the options (see :func:`sparsify`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..options import DEFAULT, Options


@dataclass(frozen=True)
class PipelineFacts:
    """Facts about the machine that change the pipelines, resolved by the runtime (the
    compile target) and passed in: the pipelines never look them up themselves.

    ``openmp``: an OpenMP runtime is there to run parallel loops; without one,
    ``Options(parallel="auto")`` compiles serial code."""

    openmp: bool = False

# MLIR with encoded tensors -> loops over sparse buffers (dense values still tensors).
# MLIR's sparsification-and-bufferization mini-pipeline, spelled out: as a textual pass it
# cannot be told to free the sparse temporaries it makes (create-sparse-deallocs), and every
# transpose or format conversion inside a kernel then leaked its buffers.
SPARSIFY: tuple[tuple[str, str], ...] = (
    ("pre-sparsification-rewrite", "fold and rewrite sparse ops into forms the sparsifier handles"),
    ("func.func(empty-tensor-to-alloc-tensor)", "tensor.empty of the sparse result into an allocation"),
    ("sparse-reinterpret-map{scope=all<loop-order>}",
     "demap non-identity level maps (CSC, BSR blocks) so loops run over levels, and sort each "
     "generic's loops (Options.loop_order: MLIR's loop-ordering-strategy)"),
    # (here: parallel_strategy, see rewrites.py - reads the sorted loops to choose a safe
    #  parallelization strategy for this kernel)
    ("sparsification{enable-runtime-library=false<parallel>}",
     "sparsify every linalg.generic over encoded tensors (loops over stored entries only); "
     "may insert a conversion where no loop order fits (transposes); a parallelization "
     "strategy turns the chosen loops into scf.parallel"),
    ("func.func(stage-sparse-ops)", "split conversions and other complex sparse ops into stages"),
    ("lower-sparse-ops-to-foreach{enable-runtime-library=false enable-convert=true}",
     "conversions and the rest into sparse_tensor.foreach loops"),
    ("sparse-reinterpret-map{scope=except-generic}", "demap what the previous step created"),
    ("func.func(lower-sparse-foreach-to-scf)", "foreach loops into scf loops"),
    ("loop-invariant-code-motion", "hoist invariant loads out of the sparse loops"),
    ("<vectorize>",
     "only with Options.vector_length > 0: sparse-vectorization turns innermost loops into "
     "vector ops (gathers, masked loads); enable-simd-index32 when every index is 32-bit"),
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
    ("func.func(convert-linalg-to-loops)",
     "the remaining dense linalg ops (fills) become loops (serial: LLVM makes the output's fill "
     "a memset; convert-linalg-to-parallel-loops made it a collapsed 2-D OpenMP loop with a "
     "udiv/urem per element, which made SpMM 30% slower)"),
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
    ("<openmp-to-llvm>", "only for kernels with parallel loops: convert-openmp-to-llvm, the types "
     "inside OpenMP regions (the regions themselves go to LLVM IR at translation)"),
    ("reconcile-unrealized-casts", "drop the casts the conversions left between them"),
)

# scf.parallel -> OpenMP, between widen_i1_memrefs and LOWER_TO_LLVM, only for kernels that
# have parallel loops after sparsification (then inline_alloca_scopes and thread_count, see
# rewrites.py).
OPENMP: tuple[tuple[str, str], ...] = (
    ("convert-scf-to-openmp",
     "each scf.parallel becomes omp.parallel + omp.wsloop (static schedule: each thread a "
     "contiguous block of rows); libomp runs them"),
)

# LLVM tuning for the host CPU (Options.cpu = None), added to its feature string when the
# host has AVX-512 (see runtime/_worker.py)
LLVM_AVX512_TUNING: tuple[tuple[str, str], ...] = (
    ("-prefer-256-bit",
     "LLVM's server-CPU tuning keeps vectors at 256 bits; 512-bit vectors made CSR SpMM "
     "(32 columns) up to 20% faster and SpMV no slower (docs/threads-and-options.md)"),
)

#: named stages of a compile, in order: each maps one IR text to the next
STAGES = ("mlir", "sparsified", "llvm-dialect", "llvm", "object")


def pipeline_text(passes: tuple[tuple[str, str], ...]) -> str:
    return "builtin.module(" + ",".join(p for p, _ in passes) + ")"


def _fill(passes, values: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """``passes`` with each ``<name>`` placeholder replaced; a pass that is only a placeholder
    is dropped when its value is empty."""
    out = []
    for p, why in passes:
        for k, v in values.items():
            p = p.replace(f"<{k}>", v)
        if p:
            out.append((p, why))
    return tuple(out)


def sparsify(options: Options = DEFAULT, strategy: str = "none", index32: bool = True):
    """SPARSIFY for ``options``, with MLIR parallelization ``strategy`` (already made safe by
    ``parallel_strategy``); ``index32``: every position/coordinate of the kernel is 32-bit."""
    vl = options.vector_length
    return _fill(SPARSIFY, {
        "loop-order": "" if options.loop_order == "default" else f" loop-ordering-strategy={options.loop_order}",
        "parallel": "" if strategy == "none" else f" parallelization-strategy={strategy}",
        "vectorize": "" if not vl else
        f"sparse-vectorization{{vl={vl}{' enable-simd-index32=true' if index32 else ''}}}",
    })


def lower_to_llvm(openmp: bool) -> tuple[tuple[str, str], ...]:
    return _fill(LOWER_TO_LLVM, {"openmp-to-llvm": "convert-openmp-to-llvm" if openmp else ""})


def pipelines(options: Options = DEFAULT, strategy: str = "none", index32: bool = True,
              openmp: bool = False) -> dict[str, tuple[tuple[str, str], ...]]:
    """The pipelines one kernel goes through, by name, in order."""
    out = {"sparsify": sparsify(options, strategy, index32), "bufferize": BUFFERIZE}
    if openmp:
        out["openmp"] = OPENMP
    out["lower-to-llvm"] = lower_to_llvm(openmp)
    return out


@lru_cache(maxsize=None)
def fingerprint() -> str:
    """Every pipeline table and rewrite, as text: part of the cache key (the options, which
    select among them, and the target, whose facts do, are in the key too)."""
    from . import guards, reassoc, rewrites, widen_i1
    tables = (SPARSIFY, BUFFERIZE, OPENMP, LOWER_TO_LLVM, LLVM_AVX512_TUNING)
    return "\n".join([*("\n".join(p for p, _ in t) for t in tables), rewrites.VERSION, guards.VERSION,
                      f"auto={rewrites.AUTO} min_parallel_trip={rewrites.MIN_PARALLEL_TRIP} chunk={rewrites.CHUNK}",
                      widen_i1.VERSION, reassoc.VERSION])


def host_features(features: str) -> str:
    """The LLVM feature string for the host CPU: its own features plus the tuning above."""
    if "+avx512f" in features.split(","):
        features = ",".join([features, *(f for f, _ in LLVM_AVX512_TUNING)])
    return features


def _index32(module) -> bool:
    """Whether every sparse encoding in ``module`` has 32-bit positions and coordinates
    (read from the encodings' attributes, through the MLIR bindings)."""
    from mlir import ir
    from mlir.dialects import sparse_tensor

    ok = True

    def check(t) -> None:
        nonlocal ok
        if isinstance(t, ir.RankedTensorType):
            enc = t.encoding
            if enc is not None:
                e = sparse_tensor.EncodingAttr(enc)
                ok = ok and e.pos_width == 32 and e.crd_width == 32

    def visit(op):
        for v in list(op.operands) + list(op.results):
            check(v.type)
        for region in op.regions:
            for block in region.blocks:
                for a in block.arguments:
                    check(a.type)
        if op.name == "func.func":
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            for t in list(ftype.inputs) + list(ftype.results):
                check(t)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return ok


def run_passes(module, passes) -> None:
    """Run ``passes`` (a table) on ``module``."""
    from mlir import passmanager
    if passes:
        passmanager.PassManager.parse(pipeline_text(passes)).run(module.operation)


def sparsify_and_bufferize(module, options: Options, requested: str, facts: dict | None = None) -> str:
    """``SPARSIFY`` (with the parallelization strategy ``requested`` made safe for this
    kernel once its loops are sorted), the rewrites between, ``BUFFERIZE`` and the ``i1``
    widening: every target's first half.  Returns the strategy chosen; ``facts`` gets
    ``"inexact"``: whether a sparse output would store entries without a term
    (``rewrites.inexact_sparse_outputs``, read from the sorted loops)."""
    from .rewrites import inexact_sparse_outputs, parallel_strategy, restrict_to_tensor, sort_algorithm
    from .widen_i1 import widen_i1_memrefs

    index32 = _index32(module)
    names = [p for p, _ in SPARSIFY]
    split = names.index("sparsification{enable-runtime-library=false<parallel>}")
    run_passes(module, sparsify(options)[:split])       # up to the loop sorting
    strategy = parallel_strategy(module, requested)
    if facts is not None:
        facts["inexact"] = inexact_sparse_outputs(module)
    passes = sparsify(options, strategy, index32)
    cut = [p for p, _ in passes].index("sparse-buffer-rewrite")
    run_passes(module, passes[split:cut])
    sort_algorithm(module, "heap_sort")
    run_passes(module, passes[cut:])
    restrict_to_tensor(module)
    run_passes(module, BUFFERIZE)
    widen_i1_memrefs(module)
    if options.reassociate:                 # sums of inner loops in any order (options.py)
        from .reassoc import reassociate_reductions
        reassociate_reductions(module)
    return strategy


def lower(module, options: Options = DEFAULT, facts: PipelineFacts = PipelineFacts()):
    """Run every pipeline and rewrite on ``module`` down to the LLVM dialect (inside the
    compile worker), for a machine with ``facts``.  Returns ``(module, stages, info)``: the
    lowered module, the ``sparsified`` stage's text, and what was chosen
    (``{"parallel": strategy, "openmp": bool, "guarded": [argument positions], "inexact":
    bool}``: the arguments whose coordinates ``guards.guard_coordinates`` range-checks in the
    kernel; whether a sparse output would store entries without a term)."""
    from .guards import guard_coordinates
    from .rewrites import count_parallel_loops, inline_alloca_scopes, thread_count

    requested = options.parallel
    if requested == "auto" and not facts.openmp:
        requested = "none"                      # no OpenMP runtime installed: serial code
    sorted_facts: dict = {}
    strategy = sparsify_and_bufferize(module, options, requested, sorted_facts)
    stages = {"sparsified": str(module)}
    openmp = count_parallel_loops(module) > 0
    if openmp:
        run_passes(module, OPENMP)
        inline_alloca_scopes(module)
        thread_count(module)
    guarded = guard_coordinates(module)     # range checks fused into the loops over coordinates
    run_passes(module, lower_to_llvm(openmp))
    return module, stages, {"parallel": strategy, "openmp": openmp, "guarded": guarded, **sorted_facts}
