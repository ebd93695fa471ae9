"""The pass pipelines of the ``cuda`` target, one pass per line with its reason.

The kernel is sparsified and bufferized exactly as for the CPU (``pipeline.py``), except
that the parallelization strategy is always asked for: :func:`rewrites.parallel_strategy`
keeps it only where the outer loop of every generic with a dense output is a ``parallel``
iterator (it indexes the output), so no GPU thread ever adds into an entry another thread
writes (MLIR's sparsifier would parallelize a reduction loop and race: no atomics).  Then
MLIR's sparsifier GPU path (what ``sparsifier{gpu-triple=...}`` runs, spelled out):
``sparse-gpu-codegen`` outlines each ``scf.parallel`` into a ``gpu.module`` kernel with a
grid-stride loop, and the host code around the launch allocates device buffers, copies the
operands in and the result out (``gpu.memcpy``) and frees them; the ``gpu.module`` goes to
NVVM and PTX (``gpu-module-to-binary format=isa``: no CUDA toolkit; the driver
JIT-compiles it when the library is loaded), the host to LLVM calling
``libmlir_cuda_runtime.so``'s ``mgpu*`` functions.

What does not move to the GPU, and why (``DeviceError`` at call time, never a CPU run):
sparse results (MLIR keeps the whole kernel on the CPU), and kernels whose outer loop
carries a reduction into the output (CSC SpMV, a sum to a scalar): no race-free parallel
loop without atomics.

This module is pure data over MLIR: it imports nothing from ``sparsecc.runtime``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..options import DEFAULT, Options
from .pipeline import BUFFERIZE, LOWER_TO_LLVM, PipelineFacts, _fill, run_passes, sparsify, sparsify_and_bufferize

#: the architecture compiled for when none is given and no device tells it (an H100/H200)
DEFAULT_ARCH = "sm_90"
#: the PTX ISA version asked of the NVPTX backend (PTX 8.0: CUDA 12.0 drivers and newer)
PTX_FEATURES = "+ptx80"
#: threads per block of the generated launch (sparse-gpu-codegen's num-threads)
THREADS = 128
#: MLIR strategy asked for before the safety rule (see module docstring): the outer loop,
#: whatever its storage (CSR's dense rows and COO's compressed rows alike)
STRATEGY = "any-storage-outer-loop"

@dataclass(frozen=True)
class GpuFacts(PipelineFacts):
    """What the cuda target tells the pipelines: the architecture to generate PTX for."""

    arch: str = DEFAULT_ARCH
    #: positions among ``@kernel``'s memref arguments of the buffers that are already device
    #: pointers (``device_args.keep_on_device``: no copies for them); empty: all host buffers
    device_memrefs: tuple[int, ...] = ()


# after BUFFERIZE: the parallel loops into GPU kernels
GPU_CODEGEN: tuple[tuple[str, str], ...] = (
    ("sparse-gpu-codegen{num-threads=<threads>}",
     "outline each scf.parallel into a gpu.module kernel (grid-stride loop over the parallel "
     "index); the host allocates device buffers, copies operands in and the result out "
     "(gpu.memcpy), launches and frees"),
    ("gpu.module(strip-debuginfo)", "the NVPTX backend needs no locations"),
    ("gpu.module(convert-scf-to-cf)", "the kernel's loops into branches"),
    ("gpu.module(convert-gpu-to-nvvm{index-bitwidth=64})",
     "thread/block ids and the kernel body into the NVVM and LLVM dialects"),
    ("nvvm-attach-target{chip=<arch> features=<features> O=3}",
     "the architecture the PTX is generated for (Options.gpu_arch)"),
)

# the host side to the LLVM dialect: LOWER_TO_LLVM without its last step, then the GPU ops
GPU_HOST: tuple[tuple[str, str], ...] = (
    ("gpu-to-llvm", "gpu.alloc/memcpy/launch_func/wait into calls of libmlir_cuda_runtime's mgpu* functions"),
    ("gpu-module-to-binary{format=isa}",
     "the gpu.module into PTX text embedded in the host module (isa: no ptxas needed; the "
     "driver JIT-compiles it at load)"),
    ("reconcile-unrealized-casts", "drop the casts the conversions left between them"),
)


def gpu_codegen(arch: str) -> tuple[tuple[str, str], ...]:
    return _fill(GPU_CODEGEN, {"threads": str(THREADS), "arch": arch, "features": PTX_FEATURES})


def host_lowering() -> tuple[tuple[str, str], ...]:
    base = tuple(e for e in _fill(LOWER_TO_LLVM, {"openmp-to-llvm": ""}) if e[0] != "reconcile-unrealized-casts")
    return base + GPU_HOST


def pipelines(options: Options = DEFAULT, strategy: str = STRATEGY, index32: bool = True,
              arch: str = DEFAULT_ARCH) -> dict[str, tuple[tuple[str, str], ...]]:
    """The pipelines one cuda kernel goes through, by name, in order."""
    return {"sparsify": sparsify(options, strategy, index32), "bufferize": BUFFERIZE,
            "gpu-codegen": gpu_codegen(arch), "lower-to-llvm": host_lowering()}


def fingerprint() -> str:
    """The GPU tables as text (with ``pipeline.fingerprint()``: part of a cuda kernel's key)."""
    from .device_args import VERSION as DEVICE_ARGS
    return "\n".join([*(p for p, _ in GPU_CODEGEN + GPU_HOST), DEFAULT_ARCH, PTX_FEATURES, str(THREADS), STRATEGY,
                      VERSION, GPU_DATA_LAYOUT, DEVICE_ARGS])


def ops_named(root, name: str) -> list:
    """The operations called ``name`` under ``root`` (a module or an operation)."""
    found = []

    def visit(op):
        if op.name == name:
            found.append(op)
        from mlir import ir
        return ir.WalkResult.ADVANCE

    getattr(root, "operation", root).walk(visit)
    return found


def ptx_of(module) -> str:
    """The PTX text embedded in ``module``'s ``gpu.binary`` ops (empty: no GPU code)."""
    from mlir.dialects import gpu
    texts = []
    for op in ops_named(module, "gpu.binary"):
        for obj in op.attributes["objects"]:
            data = gpu.ObjectAttr(obj).object
            texts.append(data.decode() if isinstance(data, (bytes, bytearray)) else str(data))
    return "\n".join(texts)


#: the version of the rewrites here (part of the cache key)
VERSION = "gpu-3: grid sized by the grid-stride loop's bound (not the first argument); gpu.module data layout"
#: the NVPTX data layout's alignments for the gpu.module (64-bit integers and floats on 8
#: bytes): without one, MLIR lowers the kernel with LLVM's default layout, where i64 is
#: 4-byte aligned, and every 64-bit position/coordinate load became two 32-bit loads
GPU_DATA_LAYOUT = "#dlti.dl_spec<i64 = dense<64> : vector<2xi64>, f64 = dense<64> : vector<2xi64>>"


def add_data_layout(module) -> int:
    """Give each ``gpu.module`` :data:`GPU_DATA_LAYOUT` (``dlti.dl_spec``); returns how many."""
    from mlir import ir
    done = 0
    for op in ops_named(module, "gpu.module"):
        op.attributes["dlti.dl_spec"] = ir.Attribute.parse(GPU_DATA_LAYOUT)
        done += 1
    return done


#: the largest grid x dimension CUDA allows
MAX_GRID = 2**31 - 1


def grid_loop_bounds(module) -> dict[str, int]:
    """For each outlined ``gpu.func`` (right after ``sparse-gpu-codegen``): the position of
    the kernel argument that bounds its grid-stride loop (its first top-level ``scf.for``).
    It is not always the first argument: SpMM's kernel takes X's column count first and
    the rows second."""
    from mlir import ir
    out = {}
    for f in ops_named(module, "gpu.func"):
        name = ir.StringAttr(f.attributes["sym_name"]).value
        for op in f.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "scf.for":
                ub = op.operands[1]
                if isinstance(ub.owner, ir.Block):
                    out[name] = ir.BlockArgument(ub).arg_number
                break
    return out


def size_grid(module, bounds: dict[str, int]) -> int:
    """Size the grid of each ``gpu.launch_func`` to the problem: ``sparse-gpu-codegen``
    launches one block, and its kernel loops with a grid stride up to the kernel argument
    ``bounds[kernel]`` (:func:`grid_loop_bounds`), so one block is correct but uses one SM.
    The block count becomes ``clamp(ceil(bound / threads), 1, MAX_GRID)``: any count stays
    correct (grid-stride loop), this one gives each thread one iteration.  Returns how
    many launches were sized."""
    from mlir import ir
    from mlir.dialects import arith

    done = 0
    for op in ops_named(module, "gpu.launch_func"):
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        first_arg = sum(seg[:11])
        kernel = str(op.attributes["kernel"]).rsplit("::@", 1)[-1]
        at = bounds.get(kernel)
        if at is None or at >= seg[11]:
            continue
        bound = op.operands[first_arg + at]
        if str(bound.type) != "index":
            continue
        with ir.InsertionPoint(op), op.location:
            idx = ir.IndexType.get()
            threads = op.operands[seg[0] + 3]                    # blockSizeX
            blocks = arith.CeilDivUIOp(bound, threads).result
            blocks = arith.MaxUIOp(blocks, arith.ConstantOp(idx, 1).result).result
            blocks = arith.MinUIOp(blocks, arith.ConstantOp(idx, MAX_GRID).result).result
        op.operands[seg[0]] = blocks                             # gridSizeX
        done += 1
    return done


def lower(module, options: Options = DEFAULT, facts: PipelineFacts = PipelineFacts(), arch: str = DEFAULT_ARCH):
    """Run the cuda pipelines on ``module`` down to the LLVM dialect (in the compile worker).
    Returns ``(module, stages, info)`` like ``pipeline.lower``; ``stages`` adds ``gpu``
    (the host and gpu.module IR after outlining, before lowering) and ``ptx`` (the embedded
    PTX; empty when no loop could move to the GPU); ``info["gpu_kernels"]`` counts the
    launches."""
    def run(passes):
        run_passes(module, passes)

    requested = STRATEGY if options.parallel == "auto" else options.parallel
    sorted_facts: dict = {}
    strategy = sparsify_and_bufferize(module, options, requested, sorted_facts)   # never a parallel reduction loop
    stages = {"sparsified": str(module)}
    codegen = gpu_codegen(arch)
    run(codegen[:1])                                    # sparse-gpu-codegen: the gpu.module appears
    add_data_layout(module)
    bounds = grid_loop_bounds(module)                   # (read before the kernels become LLVM)
    run(codegen[1:])
    launches = size_grid(module, bounds)
    if launches != len(ops_named(module, "gpu.launch_func")):
        from ..errors import InternalError
        raise InternalError("a GPU launch whose grid-stride loop bound is not a kernel argument")
    device_memrefs = tuple(getattr(facts, "device_memrefs", ()))
    if device_memrefs and launches:
        from .device_args import keep_on_device
        keep_on_device(module, device_memrefs)      # device operands: used in place, no copies
    stages["gpu"] = str(module)
    run(host_lowering())
    stages["ptx"] = ptx_of(module)
    return module, stages, {"parallel": strategy, "openmp": False, "gpu_kernels": launches, **sorted_facts}
