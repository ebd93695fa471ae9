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

from ..errors import InternalError
from ..kernel_abi import MIN_PARALLEL_WORK_GLOBAL, NUM_THREADS_GLOBAL, PARALLEL_CHUNK, ROW_WORK

VERSION = ("restrict_to_tensor 1; sort_algorithm heap_sort 1; parallel_strategy 1; "
           "inline_alloca_scopes 1; thread_count 4 (work threshold, chunk attribute); "
           "inexact_sparse_outputs 1 (a fact in the cache entry)")


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

    reduction = ir.Attribute.parse("#linalg.iterator_type<reduction>")
    found = []
    for op in ops_named(module, "linalg.generic"):
        enc = [isinstance(v.type, ir.RankedTensorType) and ir.RankedTensorType(v.type).encoding is not None
               for v in op.operands]
        if any(enc):
            iters = ["reduction" if a == reduction else "parallel" for a in op.attributes["iterator_types"]]
            found.append((iters, not enc[-1]))
    return found


def inexact_sparse_outputs(module) -> bool:
    """Whether a generic of ``module`` (loops sorted) would store entries without a term in its
    sparse output: MLIR 22's sparsifier inserts a sparse output's entry after the reduction
    loops inside its last output loop once *a* body of the outermost of them ran (direct
    insertion: its "valid" flag), and with access-pattern expansion (a reduction loop before
    the last output loop) whether or not one ran.  So an inner reduction loop that finds
    nothing under an outer one that found something (``y[i] = sum[j,k](A[i,j] * B[j,k])``
    with row ``j`` of B empty), or a reduction inside an expanded level, stores the monoid's
    identity at an entry the pattern rules leave unstored: true for two or more reduction
    loops after the last output loop, or one after it and another before it.  The planner
    splits such a statement's reductions into steps of one loop each (plan/nested.py)."""
    for iters, dense in _generics(module):
        if dense or "parallel" not in iters:
            continue
        last = len(iters) - 1 - iters[::-1].index("parallel")
        trailing = len(iters) - 1 - last
        if trailing >= 2 or (trailing and "reduction" in iters[:last]):
            return True
    return False


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
        raise InternalError("a parallel loop with a reduction")
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


# ROW_WORK (the work of one iteration of a parallel loop that reads no positions buffer) lives
# in sparsecc/kernel_abi.py, shared with the hand-written MTTKRP's slots
#: the default of ``sparsecc_min_parallel_work``, the run-time global every parallel kernel
#: library holds (``runtime/threads.py`` writes it): a parallel loop runs on one thread
#: when its work - iterations plus the stored entries under them - is below it.  Waking a
#: second thread, dealing chunks and joining costs tens of microseconds, more on a busy
#: machine; measured on 2 cores (docs/threads-and-options.md), SpMV on 2 threads was slower
#: than on 1 up to about 10^5 stored entries
MIN_PARALLEL_WORK = 100_000
#: kept for the cache key and older tests: the iteration count of ``MIN_PARALLEL_WORK``
#: with no positions buffer
MIN_PARALLEL_TRIP = MIN_PARALLEL_WORK // ROW_WORK
#: how iterations are dealt to threads: chunks of this many, handed out on demand
#: (``schedule(dynamic)``): rows vary in length, and on a machine shared with other work a
#: static split waits for its slowest thread; 0 = static (one contiguous block per thread)
CHUNK = 1024


#: probes the position of ``num_threads`` among omp.parallel's operand segments and of the
#: chunk among omp.wsloop's (they differ between MLIR versions; read, never assumed)
_PROBE = """
func.func @f(%b: index, %n: i32, %c: i64) {
  omp.parallel num_threads(%n : i32) {
    omp.wsloop schedule(dynamic = %c : i64) {
      omp.loop_nest (%i) : index = (%b) to (%b) step (%b) {
        omp.yield
      }
    }
    omp.terminator
  }
  return
}
"""


def _slots() -> tuple[int, int, object]:
    """(num_threads slot of omp.parallel, chunk slot of omp.wsloop, the dynamic schedule
    attribute), read from a parsed probe in the current context."""
    from mlir import ir
    probe = ir.Module.parse(_PROBE)
    par, = ops_named(probe, "omp.parallel")
    ws, = ops_named(probe, "omp.wsloop")
    seg_p = list(ir.DenseI32ArrayAttr(par.attributes["operandSegmentSizes"]))
    seg_w = list(ir.DenseI32ArrayAttr(ws.attributes["operandSegmentSizes"]))
    return seg_p.index(1), seg_w.index(1), ws.attributes["schedule_kind"]


def _with_operand(op, slot: int, value, extra: dict | None = None):
    """A copy of ``op`` (omp.parallel or omp.wsloop, no results) with ``value`` as the one
    operand of its operand segment ``slot`` (which must be empty), its region moved over;
    ``op`` is erased."""
    from mlir import ir
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if slot >= len(seg) or seg[slot] != 0 or len(op.results) or len(op.regions) != 1:
        raise InternalError(f"unexpected {op.name} (operand segments {seg}): cannot set its "
                            f"thread count / schedule")
    at = sum(seg[:slot])
    operands = list(op.operands)
    operands.insert(at, value)
    seg[slot] = 1
    attrs = {k: op.attributes[k] for k in op.attributes}
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(seg)
    attrs.update(extra or {})
    new = ir.Operation.create(op.name, results=[], operands=operands, attributes=attrs, regions=1,
                              loc=op.location, ip=ir.InsertionPoint(op))
    op.regions[0].blocks[0].append_to(new.regions[0])
    op.erase()
    return new


def _defined_outside(value, op) -> bool:
    """Whether ``value`` is defined outside operation ``op`` (so it can be used before it)."""
    from mlir import ir
    owner = value.owner
    cur = owner.owner if isinstance(owner, ir.Block) else owner
    cur = getattr(cur, "operation", cur)
    target = op.operation
    while cur is not None:
        if cur == target:
            return False
        parent = cur.parent
        cur = getattr(parent, "operation", parent) if parent is not None else None
    return True


def _chunk_of(op) -> int:
    """The dynamic schedule's chunk for a parallel region: the enclosing function's
    ``PARALLEL_CHUNK`` attribute, else :data:`CHUNK`."""
    from mlir import ir
    p = op.parent
    while p is not None and p.name != "func.func":
        p = p.parent
    if p is not None and PARALLEL_CHUNK in p.attributes:
        return int(ir.IntegerAttr(p.attributes[PARALLEL_CHUNK]).value)
    return CHUNK


def _positions_buffer(nest, par):
    """The memref that the loop body of ``nest`` reads at ``[iv]`` and ``[iv + 1]`` (a
    compressed level's positions under this loop: the sparsifier's ``pos[i]``, ``pos[i+1]``),
    defined outside ``par``; None if there is none."""
    from mlir import ir
    block = nest.regions[0].blocks[0]
    if not len(block.arguments):
        return None
    iv = block.arguments[0]
    at_iv, at_next = [], []
    for op in block.operations:
        if op.name != "memref.load" or len(op.operands) != 2:
            continue
        mem, idx = op.operands[0], op.operands[1]
        if idx == iv:
            at_iv.append(mem)
        elif isinstance(idx.owner, ir.Operation) or hasattr(idx.owner, "name"):
            add = idx.owner
            if getattr(add, "name", None) != "arith.addi" or iv not in list(add.operands):
                continue
            other = [v for v in add.operands if v != iv]
            c = other[0].owner if other else None
            if (getattr(c, "name", None) == "arith.constant"
                    and str(c.attributes["value"]).split(":")[0].strip() == "1"):
                at_next.append(mem)
    for mem in at_iv:
        if any(mem == m for m in at_next) and _defined_outside(mem, par):
            return mem
    return None


def thread_count(module) -> int:
    """Give every ``omp.parallel`` of ``module`` (through the MLIR bindings) a
    ``num_threads``: the library's global ``sparsecc_num_threads`` (which
    ``sc.set_num_threads`` writes in every loaded kernel), or 1 when the loop's work is
    below the library's global ``sparsecc_min_parallel_work`` (written by
    ``runtime/threads.py``, default :data:`MIN_PARALLEL_WORK`).  The work, computed on each
    call before the region: the iterations plus the stored entries under them
    (``pos[ub] - pos[lb]`` of the positions buffer the body reads at ``[iv]`` and
    ``[iv + 1]``), or iterations x :data:`ROW_WORK` when there is none.  Its
    ``omp.wsloop`` gets a dynamic schedule of :data:`CHUNK` (or of the enclosing function's
    ``kernel_abi.PARALLEL_CHUNK`` attribute).  Adds the globals; returns how
    many loops changed.  Raises :class:`InternalError` for a parallel region that is not one
    work-sharing loop."""
    from mlir import ir
    from mlir.dialects import arith, llvm, memref, scf

    regions = ops_named(module, "omp.parallel")
    if not regions:
        return 0
    par_slot, chunk_slot, dynamic = _slots()
    i32, i64, index = (ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64), ir.IndexType.get())
    ptr = ir.Type.parse("!llvm.ptr")
    body = module.body
    # (a hand-written kernel may define sparsecc_num_threads itself: it sizes per-thread
    # workspaces by it, dialect/kernels/spgemm.py)
    defined = {ir.StringAttr(op.operation.attributes["sym_name"]).value for op in body.operations
               if op.operation.name == "llvm.mlir.global"}
    with ir.InsertionPoint.at_block_begin(body), ir.Location.unknown():
        if NUM_THREADS_GLOBAL not in defined:
            llvm.GlobalOp(i32, NUM_THREADS_GLOBAL, ir.Attribute.parse("#llvm.linkage<external>"),
                          value=ir.IntegerAttr.get(i32, 1), addr_space=0)
        llvm.GlobalOp(i64, MIN_PARALLEL_WORK_GLOBAL, ir.Attribute.parse("#llvm.linkage<external>"),
                      value=ir.IntegerAttr.get(i64, MIN_PARALLEL_WORK), addr_space=0)
    for par in regions:
        inner = list(par.regions[0].blocks[0].operations) if len(par.regions) == 1 else []
        ws = inner[0] if inner else None
        nest = None
        if ws is not None and ws.name == "omp.wsloop" and len(ws.regions) == 1:
            first = list(ws.regions[0].blocks[0].operations)
            nest = first[0] if first and first[0].name == "omp.loop_nest" else None
        if nest is None or len(nest.operands) % 3 or not len(nest.operands):
            raise InternalError("an omp.parallel that is not one omp.wsloop over an omp.loop_nest: "
                                "cannot set its thread count")
        n = len(nest.operands) // 3          # lower bounds, upper bounds, steps; a nest of
        lb, ub = nest.operands[0], nest.operands[n]   # several dimensions counts its outermost
        pos = _positions_buffer(nest, par) if n == 1 else None
        with ir.InsertionPoint(par), par.location:
            addr = llvm.AddressOfOp(ptr, NUM_THREADS_GLOBAL).result
            wanted = llvm.LoadOp(i32, addr).result
            waddr = llvm.AddressOfOp(ptr, MIN_PARALLEL_WORK_GLOBAL).result
            least = arith.index_cast(index, llvm.LoadOp(i64, waddr).result)
            trip = arith.subi(ub, lb)
            if pos is None:
                work = arith.muli(trip, arith.constant(index, ROW_WORK))
            else:
                # stored entries under the loop's iterations, read only when it has any
                empty = arith.cmpi(arith.CmpIPredicate.eq, trip, arith.constant(index, 0))
                branch = scf.IfOp(empty, [index], has_else=True)
                with ir.InsertionPoint(branch.then_block):
                    scf.YieldOp([arith.constant(index, 0)])
                with ir.InsertionPoint(branch.else_block):
                    ends = []
                    for at in (lb, ub):
                        v = memref.load(pos, [at])
                        try:
                            width = ir.IntegerType(v.type).width
                        except ValueError:          # already index
                            width = None
                        if width is not None:
                            if width < 64:
                                v = arith.extui(i64, v)
                            v = arith.index_cast(index, v)
                        ends.append(v)
                    scf.YieldOp([arith.subi(ends[1], ends[0])])
                work = arith.addi(trip, branch.results[0])
            small = arith.cmpi(arith.CmpIPredicate.ult, work, least)
            nt = arith.select(small, arith.constant(i32, 1), wanted)
            size = _chunk_of(par)
            chunk = None
            if size:        # at most an equal share per thread: a loop of few long iterations
                # (dialect/kernels/scatter.py's blocks) gives each thread one
                share = arith.ceildivui(trip, arith.maxui(arith.index_cast(index, nt), arith.constant(index, 1)))
                per = arith.minui(arith.constant(index, size), arith.maxui(share, arith.constant(index, 1)))
                chunk = arith.index_cast(i64, per)
        if chunk is not None:
            _with_operand(ws, chunk_slot, chunk, {"schedule_kind": dynamic})
        _with_operand(par, par_slot, nt)
    return len(regions)
