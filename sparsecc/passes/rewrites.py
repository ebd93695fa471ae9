"""Python rewrites inside the sparsification pipeline.

``sort_algorithm`` (before ``sparse-buffer-rewrite``): SpGEMM-like kernels sort each row's new
column indices; MLIR's default ``hybrid_quick_sort`` spent 62% of a 4000 x 4000 SpGEMM in the
sort.  ``heap_sort`` measured 1.6x faster end to end (20k x 20k, 10 per row: 105 vs 174 ms).

``restrict_to_tensor`` (between sparsification and dense bufferization):

The sparsifier hands each dense output of a sparse loop back as
``bufferization.to_tensor %buffer`` without ``restrict``.  MLIR's own mini-pipeline then
bufferizes without analysis; the textual ``one-shot-bufferize`` that sparsecc runs instead
(see pipeline.py) refuses such ops.  Every buffer there is the one the sparsifier just wrote
in place and nothing else aliases it, so each one is marked ``restrict writable``.
"""

from __future__ import annotations

import re

VERSION = ("restrict_to_tensor 1; sort_algorithm heap_sort 1; parallel_strategy 1; "
           "inline_alloca_scopes 1; thread_count 1")


def ops_named(root, name: str) -> list:
    """Every op called ``name`` below ``root`` (a module or an op), collected before any
    rewrite touches them."""
    from mlir import ir

    found = []

    def visit(op):
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    (root.operation if hasattr(root, "operation") else root).walk(visit)
    return found


def restrict_to_tensor(module) -> int:
    """Mark every ``bufferization.to_tensor`` restrict and writable; returns how many changed."""
    from mlir import ir

    changed = [op for op in ops_named(module, "bufferization.to_tensor") if "restrict" not in op.attributes]
    for op in changed:
        op.attributes["restrict"] = ir.UnitAttr.get()
        op.attributes["writable"] = ir.UnitAttr.get()
    return len(changed)


def sort_algorithm(module, algorithm: str) -> int:
    """Set the algorithm of every ``sparse_tensor.sort`` (the per-row sort of SpGEMM's
    expanded access pattern)."""
    from mlir import ir

    attr = ir.Attribute.parse(f"#sparse_tensor<SparseTensorSortAlgorithm {algorithm}>")
    found = ops_named(module, "sparse_tensor.sort")
    for op in found:
        op.attributes["algorithm"] = attr
    return len(found)


# ----------------------------------------------------------------------------- parallel loops
#: strategies that parallelize inner loops too, and what they fall back to when a kernel
#: has a reduction loop
_ANY_LOOP = {"dense-any-loop": "dense-outer-loop", "any-storage-any-loop": "any-storage-outer-loop"}
#: what parallel="auto" asks MLIR for where it is safe: the outermost loop, whether it runs
#: over a dense level (CSR rows) or a compressed one (DCSR's stored rows); measured in
#: docs/threads-and-options.md
AUTO = "any-storage-outer-loop"


def _generics(module) -> list[tuple[list[str], bool]]:
    """(iterator types in loop order, has a dense output) of every linalg.generic over
    encoded tensors, as the sparsifier will see them."""
    from mlir import ir

    found = []
    for op in ops_named(module, "linalg.generic"):
        enc = [isinstance(v.type, ir.RankedTensorType) and ir.RankedTensorType(v.type).encoding is not None
               for v in op.operands]
        if any(enc):
            iters = ["reduction" if "reduction" in str(a) else "parallel" for a in op.attributes["iterator_types"]]
            found.append((iters, not enc[-1]))
    return found


def parallel_strategy(module, requested: str) -> str:
    """The MLIR parallelization strategy to sparsify ``module`` with, given the
    ``Options.parallel`` the user asked for.  Runs after ``sparse-reinterpret-map`` has sorted
    every generic's loops (loop 0 is the outermost).

    MLIR's sparsifier does not look at iterator types when it parallelizes a loop: an outer
    reduction loop (CSC SpMV, ``ij->j`` over CSR) would write ``y`` from several threads at
    once, and a parallel reduction into a scalar changes the order of a floating-point sum.
    So a loop may run in parallel only if it is a ``parallel`` iterator (it indexes the
    output, so iterations write disjoint entries) of a generic with a dense output (MLIR never
    parallelizes a sparse output).  ``*-outer-loop``: only if loop 0 of every such generic
    is parallel, else ``none``; ``*-any-loop``: only without any reduction loop, else the
    outer-loop variant; ``auto``: :data:`AUTO` where that is safe."""
    if requested == "none":
        return "none"
    dense_out = [iters for iters, dense in _generics(module) if dense]
    if not dense_out:
        return "none"
    outer_ok = all(iters[0] == "parallel" for iters in dense_out)
    if requested == "auto":
        return AUTO if outer_ok else "none"
    if requested in _ANY_LOOP and any("reduction" in iters for iters in dense_out):
        requested = _ANY_LOOP[requested]
    return requested if outer_ok else "none"


def count_parallel_loops(module) -> int:
    """How many ``scf.parallel`` the sparsifier made; raises if one carries a reduction
    (``parallel_strategy`` never allows one: it would not be exact)."""
    loops = ops_named(module, "scf.parallel")
    if any(len(op.results) for op in loops):
        raise RuntimeError("internal error: a parallel loop with a reduction")
    return len(loops)


def inline_alloca_scopes(module) -> int:
    """Inline the ``memref.alloca_scope`` that ``convert-scf-to-openmp`` wraps around each
    parallel loop body: ``convert-scf-to-cf`` cannot lower the loops inside one (its region
    holds a single block).  A scope that holds a ``memref.alloca`` stays (inlined, it would
    grow the stack on every iteration); returns how many were inlined."""
    done = 0
    for scope in ops_named(module, "memref.alloca_scope"):
        if ops_named(scope, "memref.alloca") or len(scope.results):
            continue
        ops = list(scope.regions[0].blocks[0].operations)
        for op in ops[:-1]:                   # all but memref.alloca_scope.return
            op.move_before(scope)
        scope.erase()
        done += 1
    return done


#: below this many iterations a parallel loop runs on one thread (waking the team costs
#: more than a few hundred short rows)
MIN_PARALLEL_TRIP = 512
#: how iterations are dealt to threads: chunks of this many, handed out on demand
#: (``schedule(dynamic)``): rows vary in length, and on a machine shared with other work a
#: static split waits for its slowest thread; 0 = static (one contiguous block per thread)
CHUNK = 1024
_PARALLEL = re.compile(r"^(\s*)omp\.parallel \{\n(\s*omp\.wsloop [^\n]*\{\n\s*omp\.loop_nest \([^)]*\) : \w+ = "
                       r"\(([^)]*)\) to \(([^)]*)\))", re.M)


def thread_count(text: str) -> str:
    """Give every ``omp.parallel`` of the module text ``num_threads(n)``: n is read from the
    library's global ``sparsecc_num_threads`` (which ``sc.set_num_threads`` writes in every
    loaded kernel), or 1 when the loop has fewer than :data:`MIN_PARALLEL_TRIP` iterations."""
    count = text.count("omp.parallel")
    k = 0

    def sub(m):
        nonlocal k
        k += 1
        # a loop nest of several dimensions (a fill) counts its outermost one
        ind, lb, ub = m.group(1), m.group(3).split(",")[0].strip(), m.group(4).split(",")[0].strip()
        pre = [f"%sc_ntp{k} = llvm.mlir.addressof @sparsecc_num_threads : !llvm.ptr",
               f"%sc_ntg{k} = llvm.load %sc_ntp{k} : !llvm.ptr -> i32",
               f"%sc_trip{k} = arith.subi {ub}, {lb} : index",
               f"%sc_min{k} = arith.constant {MIN_PARALLEL_TRIP} : index",
               f"%sc_small{k} = arith.cmpi ult, %sc_trip{k}, %sc_min{k} : index",
               f"%sc_one{k} = arith.constant 1 : i32",
               f"%sc_nt{k} = arith.select %sc_small{k}, %sc_one{k}, %sc_ntg{k} : i32"]
        loop = m.group(2)
        if CHUNK:
            pre.append(f"%sc_chunk{k} = arith.constant {CHUNK} : i64")
            loop = loop.replace("omp.wsloop {", f"omp.wsloop schedule(dynamic = %sc_chunk{k} : i64) {{", 1)
        return "".join(f"{ind}{p}\n" for p in pre) + f"{ind}omp.parallel num_threads(%sc_nt{k} : i32) {{\n" + loop

    text = _PARALLEL.sub(sub, text)
    if k != count:
        raise RuntimeError(f"internal error: {count - k} omp.parallel without a recognized loop")
    glob = "  llvm.mlir.global external @sparsecc_num_threads(1 : i32) {addr_space = 0 : i32} : i32\n"
    head, sep, rest = text.partition("module {\n")
    if not sep:
        head, sep, rest = text.partition("module attributes")
        line_end = rest.index("{\n") + 2
        return head + sep + rest[:line_end] + glob + rest[line_end:]
    return head + sep + glob + rest
