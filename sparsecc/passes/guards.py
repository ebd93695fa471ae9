"""Range checks of coordinates, fused into the kernel's own loop over them.

Generated code trusts its buffers: a coordinate out of range in a sparse operand's ``crd``
buffer, used to index a dense operand (``x[j]`` in SpMV) or the dense output (``y[i]`` in
CSC SpMV), is a wild memory access.  ``check=True`` used to find such coordinates with a
NumPy max over the whole ``indices`` array before the call: a second pass over the largest
array of a memory-bound kernel.  :func:`guard_coordinates` moves that check into the kernel,
where the coordinates are read anyway.

A check per coordinate (compare, clamp, branch next to every ``x[j]``) measured 15-30% slower
on a 200k-row SpMV whose ``x`` sits in the cache: the loop is bound by instructions there, not
by memory.  So the check is per block of rows instead.  The kernel's row loop (an
``omp.loop_nest`` or ``scf.for`` over a dense level, step 1, whose body runs an ``scf.for``
over the positions ``pos[i] .. pos[i+1]`` of the level below) becomes a loop over blocks of
whole rows of about :data:`COST` rows plus stored entries each (each block finds its first
and last row by a binary search in ``pos``, so a thread's share follows the stored entries,
not the row count: R-MAT's long rows).  Each block first takes the unsigned max of its
coordinates ``crd[pos[r0] .. pos[r1]]`` (one tight loop; the coordinates then sit in the
L1/L2 cache for the rows' own loop, so memory sees them once), and runs its rows only when
the max is below the size of every buffer dimension the coordinates index::

    for b in range(ceil((rows + entries) / COST)):       // the parallel loop, 1 block per chunk
        r0, r1 = the first rows whose cost (i - lb) + (pos[i] - pos[lb]) reaches b*COST, (b+1)*COST
        prefetch(values[p]) for p in pos[r0] .. pos[r1], one per cache line
        m = max(crd[p] for p in pos[r0] .. pos[r1])      // unsigned: a negative one is huge
        if pos[r0] < pos[r1] and not m < dim(x, 0): *flag = 1
        else: for i in r0 .. r1: <the original body>

The scan also prefetches the block's lines of every other buffer the rows' loop reads at the
same positions (a CSR's values): a scan that read only the coordinates left the values to a
second memory phase, 15-25% of a 1-thread SpMV on Poisson 3-D (``docs/performance.md``).

Each row is still computed by one thread in its own order: results are bit-identical for any
thread count.  A block with a bad coordinate runs none of its rows, so no access ever leaves
its buffer (the output is the kernel's own fresh buffer; the call raises instead of
returning it).  ``flag`` comes from ``sparsecc_index_flag()``, called once at the start of
the function (in the caller's thread; OpenMP workers share the pointer): the checked entry
(``runtime/entry.py oom_entry_ir``) gives each call its own flag and returns 2 when it was
set.  The dynamic schedule (``rewrites.thread_count``) deals one block at a time; the work
estimate that picks one thread for small loops is computed before, from the rows' bounds.

Only a coordinate buffer (an integer memref argument, through ``memref.subview``/``cast``
views) whose every use is such a load, whose loaded values reach nothing but index operands
of ``memref.load``/``memref.store`` (through integer casts), of memrefs defined before the
row loop, is guarded.  Others (coordinates compared while co-iterating, arithmetic on
coordinates as in BSR blocks, COO segment searches, vector gathers, a sparse result's
insertions) are left alone and not reported: the runtime keeps its NumPy check for them.
Returns the guarded arguments' positions, which the runtime maps to operands
(``runtime/call.py``).  ``indptr`` is not checked here: the runtime's checks of it (starts
at 0, never decreases, ends at the entry count) are what keep every position in bounds.

Pure data over MLIR: imports nothing from ``sparsecc.runtime``.
"""

from __future__ import annotations

from ..kernel_abi import FLAG_FUNCTION, SELF_CHECKED
from .rewrites import InternalError, _slots

VERSION = ("guard_coordinates 9 (blocks of equal rows + entries; the scan's max in the coordinates' width; "
           "the block's values prefetched only for loops of 2^20+ entries; each row prefetches the next "
           "block's coordinates and values at its offset)")
# FLAG_FUNCTION (the function, defined by the checked entry, that returns this call's flag) and
# SELF_CHECKED (a kernel function's attribute: the coordinate arguments it range-checks itself,
# reported with the guarded ones) live in sparsecc/kernel_abi.py, shared with dialect/kernels/
#: the rows plus stored entries of one checked block (blocks hold whole rows: a row longer
#: than this is a block of its own)
COST = 8192

#: the prefetch of the values runs only when the row loop has at least this many stored
#: entries (12-16 MB of values and coordinates): below, the data comes from the cache,
#: where the hardware prefetcher keeps up and the prefetch loop only costs time
PREFETCH_MIN_ENTRIES = 1 << 20

_VIEWS = ("memref.subview", "memref.cast", "memref.reinterpret_cast")
_CASTS = ("arith.extui", "arith.extsi", "arith.index_cast", "arith.index_castui", "arith.trunci")


def _is_block_arg(v) -> bool:
    from mlir import ir
    return isinstance(v.owner, ir.Block)


def _op(x):
    return x.operation if hasattr(x, "operation") else x


def _parent_op(op):
    p = _op(op).parent
    return _op(p) if p is not None else None


def _top_op(op, block):
    """The ancestor of ``op`` (or ``op``) directly in ``block``; None if it is not below it."""
    cur = _op(op)
    while cur is not None and cur.parent is not None:    # (.block of the module asserts)
        if cur.block == block:
            return cur
        cur = _parent_op(cur)
    return None


def _is_integer(t) -> bool:
    from mlir import ir
    try:
        ir.IntegerType(t)
    except ValueError:
        return False
    return True


def _integer_memref(t) -> bool:
    from mlir import ir
    try:
        element = ir.MemRefType(t).element_type
    except ValueError:
        return False
    return isinstance(element, ir.IntegerType) or isinstance(element.maybe_downcast(), ir.IntegerType)


def _analyse_arg(arg):
    """For one memref argument: ``[(load, [(chain of cast ops to an index value, [(memref,
    dimension)])])]``, or None when some use of the argument, or of a loaded value, is not a
    guardable one."""
    loads, views = [], [arg]
    while views:
        v = views.pop()
        for use in v.uses:
            op, n = _op(use.owner), use.operand_number
            if op.name in _VIEWS and n == 0:
                views.append(op.results[0])
            elif op.name == "memref.load" and n == 0:
                loads.append(op)
            elif op.name != "memref.dim" or n != 0:
                return None
    found = []
    for ld in loads:
        chains = []
        stack = [(ld.results[0], [])]
        while stack:
            v, chain = stack.pop()
            uses = []
            for use in v.uses:
                op, n = _op(use.owner), use.operand_number
                if op.name in _CASTS:
                    stack.append((op.results[0], chain + [op]))
                elif op.name == "memref.load" and n >= 1:
                    uses.append((op.operands[0], n - 1))
                elif op.name == "memref.store" and n >= 2:
                    uses.append((op.operands[1], n - 2))
                else:
                    return None
            if uses:
                chains.append((chain, uses))
        if not chains:
            return None
        found.append((ld, chains))
    return found or None


def _strip_casts(v):
    while not _is_block_arg(v) and _op(v.owner).name in _CASTS:
        v = _op(v.owner).operands[0]
    return v


def _is_const(v, value: int) -> bool:
    if _is_block_arg(v) or _op(v.owner).name != "arith.constant":
        return False
    return str(_op(v.owner).attributes["value"]).split(":")[0].strip() == str(value)


def _row_loop(ld):
    """For a coordinate load ``crd[p]``: ``(row loop, positions loop, positions memref)`` when
    ``p`` is the induction variable of an ``scf.for`` over ``pos[i] .. pos[i+1]`` directly in
    the body of a row loop over ``i`` (``omp.loop_nest`` or ``scf.for`` without loop-carried
    values, step 1); else None."""
    p = ld.operands[1] if len(ld.operands) == 2 else None
    if p is None or not _is_block_arg(p):
        return None
    fblock = p.owner
    F = _op(fblock.owner)
    if F is None or F.name != "scf.for" or len(F.operands) < 3 or not _is_const(F.operands[2], 1):
        return None
    if fblock.arguments[0] != p:
        return None
    L = _parent_op(F)
    if L is None or L.name not in ("omp.loop_nest", "scf.for"):
        return None
    lblock = L.regions[0].blocks[0]
    if F.block != lblock or len(lblock.arguments) != 1:
        return None
    if L.name == "scf.for" and (len(L.operands) != 3 or len(L.results)):
        return None
    if L.name == "omp.loop_nest" and (len(L.operands) != 3 or not _is_const(L.operands[2], 1)):
        return None
    if L.name == "scf.for" and not _is_const(L.operands[2], 1):
        return None
    iv = lblock.arguments[0]
    lo, hi = _strip_casts(F.operands[0]), _strip_casts(F.operands[1])
    if _is_block_arg(lo) or _is_block_arg(hi):
        return None
    lo, hi = _op(lo.owner), _op(hi.owner)
    if lo.name != "memref.load" or hi.name != "memref.load" or len(lo.operands) != 2 or len(hi.operands) != 2:
        return None
    pos = lo.operands[0]
    if hi.operands[0] != pos or lo.operands[1] != iv:
        return None
    nxt = hi.operands[1]
    if _is_block_arg(nxt) or _op(nxt.owner).name != "arith.addi":
        return None
    a, b = _op(nxt.owner).operands
    if not ((a == iv and _is_const(b, 1)) or (b == iv and _is_const(a, 1))):
        return None
    if not _is_block_arg(pos) and _top_op(pos.owner, lblock) is not None:
        return None                     # positions defined inside the row loop
    if str(iv.type) != "index":
        return None
    return L, F, pos


def _to_index(v):
    from mlir import ir
    from mlir.dialects import arith
    index = ir.IndexType.get()
    if str(v.type) == "index":
        return v
    w = ir.IntegerType(v.type).width
    if w < 64:
        v = arith.extui(ir.IntegerType.get_signless(64), v)
    return arith.index_cast(index, v)


def guard_coordinates(module) -> list[int]:
    """Check the coordinates a kernel loads and uses as indices per block of rows (see the
    module docstring); returns the positions of the guarded arguments of ``kernel``."""
    from mlir import ir
    from mlir.dialects import llvm

    funcs = [op for op in module.body.operations if op.operation.name == "func.func"
             and len(op.regions[0].blocks)]
    ptr = ir.Type.parse("!llvm.ptr")
    declared = any(op.operation.name == "llvm.func" and "sym_name" in op.operation.attributes
                   and ir.StringAttr(op.operation.attributes["sym_name"]).value == FLAG_FUNCTION
                   for op in module.body.operations)
    reported: list[int] = []
    for fn in funcs:
        name = ir.StringAttr(fn.attributes["sym_name"]).value
        # a hand-written kernel that range-checks some coordinate arguments itself (and
        # sets this call's flag) lists them in SELF_CHECKED (dialect/kernels/sddmm.py)
        own = set(ir.DenseI64ArrayAttr(fn.attributes[SELF_CHECKED])) if SELF_CHECKED in fn.attributes else set()
        if name == "kernel":
            reported = sorted(own)
        block = fn.regions[0].blocks[0]
        order = []                       # (row loop, positions loop, positions, [(load, chains)])
        guarded = []
        for k, arg in enumerate(block.arguments):
            if not _integer_memref(arg.type):
                continue
            found = _analyse_arg(arg)
            if found is None:
                continue
            plan = []
            for ld, chains in found:
                got = _row_loop(ld)
                if got is None:
                    break
                L, F, pos = got
                top = _top_op(L, block)
                ok = top is not None

                def before_top(v):
                    """``v`` is available before the loop's outermost op (the checks and the
                    block count are computed there)."""
                    if _is_block_arg(v):
                        return v.owner == block
                    d = _op(v.owner)
                    return d.parent is not None and d.block == block and d.is_before_in_block(top)

                ok = ok and before_top(pos) and before_top(L.operands[0]) and before_top(L.operands[1])
                for _, uses in chains:
                    for mem, _ in uses:
                        ok = ok and before_top(mem)
                if not ok:
                    break
                plan.append((L, F, pos, ld, chains))
            else:
                guarded.append(k)
                for L, F, pos, ld, chains in plan:
                    at = next((i for i, x in enumerate(order) if x[0] == L), None)
                    if at is None:
                        order.append((L, F, pos, []))
                        at = len(order) - 1
                    order[at][3].append((ld, chains))
        if not order:
            continue
        if not declared:
            with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
                llvm.LLVMFuncOp(FLAG_FUNCTION, ir.TypeAttr.get(ir.Type.parse("!llvm.func<ptr ()>")),
                                linkage=ir.Attribute.parse("#llvm.linkage<external>"))
            declared = True
        loc = fn.location
        with ir.InsertionPoint.at_block_begin(block), loc:
            flag = llvm.CallOp(ptr, [], [], ir.DenseI32ArrayAttr.get([]),
                               callee=ir.FlatSymbolRefAttr.get(FLAG_FUNCTION)).result
        for L, F, pos, guards in order:
            _strip_mine(L, F, pos, guards, flag, block, loc)
        if name == "kernel":
            reported = sorted(set(guarded) | own)
    return reported


def _lower_bound(pos, lb, ub, plb, target):
    """The first row ``i`` in ``[lb, ub)`` whose cost ``(i - lb) + (pos[i] - pos[lb])`` is at
    least ``target``, else ``ub``: a binary search over ``pos`` (an ``scf.while``)."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf
    index = ir.IndexType.get()
    one = arith.constant(index, 1)
    w = scf.WhileOp([index, index], [lb, ub])
    before = w.before.blocks.append(index, index)
    with ir.InsertionPoint(before):
        lo, hi = before.arguments
        scf.ConditionOp(arith.cmpi(arith.CmpIPredicate.ult, lo, hi), [lo, hi])
    after = w.after.blocks.append(index, index)
    with ir.InsertionPoint(after):
        lo, hi = after.arguments
        mid = arith.addi(lo, arith.shrui(arith.subi(hi, lo), one))
        cost = arith.addi(arith.subi(mid, lb), arith.subi(_to_index(memref.load(pos, [mid])), plb))
        reached = arith.cmpi(arith.CmpIPredicate.uge, cost, target)
        scf.YieldOp([arith.select(reached, lo, arith.addi(mid, one)), arith.select(reached, mid, hi)])
    return w.results[0]


def _streams(F, guards, block, top) -> list:
    """The buffers other than the guarded coordinates that the positions loop ``F`` loads at
    its induction variable ``p`` (a CSR SpMV's values), defined before the row loop's outermost
    op ``top``: what the block's scan prefetches."""
    from mlir import ir
    p = F.regions[0].blocks[0].arguments[0]
    crds = [ld.operands[0] for ld, _ in guards]
    out = []
    for use in p.uses:
        op = _op(use.owner)
        if op.name != "memref.load" or len(op.operands) != 2 or use.operand_number != 1:
            continue
        mem = op.operands[0]
        if any(mem == c for c in crds) or any(mem == m for m in out):
            continue
        if _is_block_arg(mem):
            ok = mem.owner == block
        else:
            d = _op(mem.owner)
            ok = d.parent is not None and d.block == block and d.is_before_in_block(top)
        try:
            ok = ok and ir.MemRefType(mem.type).rank == 1
        except ValueError:
            ok = False
        if ok:
            out.append(mem)
    return out


def elements_per_line(element) -> int:
    """Elements of MLIR type ``element`` in a 64-byte cache line (a complex number: two of its
    parts; a type of unknown size: 16 bytes)."""
    from mlir import ir
    element = element.maybe_downcast() if hasattr(element, "maybe_downcast") else element
    if isinstance(element, ir.ComplexType):
        part = element.element_type
        part = part.maybe_downcast() if hasattr(part, "maybe_downcast") else part
        bits = 2 * getattr(part, "width", 64)
    else:
        bits = getattr(element, "width", 128)
    return max(1, 512 // max(8, bits))


def _prefetch(streams, plo, phi, big) -> None:
    """Software prefetches of every cache line of ``streams[plo .. phi]`` when ``big``."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf
    index = ir.IndexType.get()
    for mem in streams:
        per_line = elements_per_line(ir.MemRefType(mem.type).element_type)
        ahead = scf.ForOp(plo, arith.select(big, phi, plo), arith.constant(index, per_line))
        with ir.InsertionPoint(ahead.body):
            memref.PrefetchOp(mem, [ahead.induction_variable], False, 3, True)   # read, all levels, data
            scf.YieldOp([])


def _prefetch_next(inner, pos, plo, phi, mems, last_of, loc) -> None:
    """At each row ``i`` of a block ``plo .. phi``, prefetch ``mem[pos[i] + (phi - plo)]`` (and
    the line after for 8-byte elements): the next block's coordinates at the same offset,
    which its scan then finds in the cache while this block computes (one or two
    instructions a row; a prefetch never faults nor changes a result)."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf
    index = ir.IndexType.get()
    body = inner.regions[0].blocks[0]
    first = list(body.operations)[0]
    with ir.InsertionPoint(first), loc:
        span = arith.subi(phi, plo)
        some = arith.cmpi(arith.CmpIPredicate.ugt, span, arith.constant(index, 0))
        branch = scf.IfOp(some)
        with ir.InsertionPoint(branch.then_block):
            at = arith.addi(_to_index(memref.load(pos, [inner.induction_variable])), span)
            for mem in mems:
                last = next(x for m, x in last_of if m == mem)
                per_line = elements_per_line(ir.MemRefType(mem.type).element_type)
                for k in range(max(1, 16 // per_line)):
                    q = arith.minui(arith.addi(at, arith.constant(index, k * per_line)), last) if k else \
                        arith.minui(at, last)
                    memref.PrefetchOp(mem, [q], False, 3, True)
            scf.YieldOp([])


def _scan(crd, chain, plo, phi, streams, big, zero, one):
    """The unsigned max of ``crd[plo .. phi]`` after the cast ``chain``, after a loop of
    software prefetches of every cache line of ``streams[plo .. phi]`` when ``big`` (the
    scan itself stays one loop that LLVM vectorizes).  A separate scan that reads only the
    coordinates leaves the values to be fetched afterwards by the rows' own loop, a second
    memory phase that does not overlap the first: 15-25% of a 1-thread SpMV on Poisson 3-D
    (``docs/performance.md``).  Prefetches never fault, and the results do not depend on them.

    The max is taken in the coordinates' own width and cast once after: every cast the
    kernel applies (zero or sign extension, index casts) keeps the unsigned order, a negative
    coordinate included (it stays at the top), so the result is the max of the cast values.
    Half the vector work of a max in 64 bits for 32-bit coordinates."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf
    index = ir.IndexType.get()

    _prefetch(streams, plo, phi, big)
    element = ir.MemRefType(crd.type).element_type
    narrow = chain and all(c.name in ("arith.extui", "arith.extsi", "arith.index_cast", "arith.index_castui")
                           for c in chain) and _is_integer(element)
    start = arith.constant(element, 0) if narrow else zero
    loop = scf.ForOp(plo, phi, one, [start])
    with ir.InsertionPoint(loop.body):
        v = memref.load(crd, [loop.induction_variable])
        if not narrow:
            for cast in chain:
                v = ir.Operation.create(cast.name, results=[cast.results[0].type], operands=[v]).result
        scf.YieldOp([arith.maxui(loop.inner_iter_args[0], v)])
    top = loop.results[0]
    if narrow:
        for cast in chain:
            top = ir.Operation.create(cast.name, results=[cast.results[0].type], operands=[top]).result
    return top


def _strip_mine(L, F, pos, guards, flag, block, loc) -> None:
    """Rewrite row loop ``L`` into blocks of rows of about :data:`COST` rows plus stored
    entries each, each block checked first."""
    from mlir import ir
    from mlir.dialects import arith, llvm, memref, scf
    index, i32, i1, i64 = (ir.IndexType.get(), ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(1),
                           ir.IntegerType.get_signless(64))
    top = _top_op(L, block)
    lb, ub = L.operands[0], L.operands[1]
    # an omp.loop_nest's bounds are computed before its omp.parallel; an scf.for's before it
    anchor = L
    if L.name == "omp.loop_nest":
        ws = _parent_op(L)
        anchor = _parent_op(ws) if ws is not None and ws.name == "omp.wsloop" else None
        if anchor is None or anchor.name != "omp.parallel":
            raise InternalError("an omp.loop_nest outside omp.parallel/omp.wsloop: cannot check its coordinates")
    # the sizes of every indexed buffer dimension, and the constants, before the loop's outermost op
    with ir.InsertionPoint(top), loc:
        zero, one = arith.constant(index, 0), arith.constant(index, 1)
        cost = arith.constant(index, COST)
        true, false = arith.constant(i1, 1), arith.constant(i1, 0)
        one32 = arith.constant(i32, 1)
        dims = []
        for _, chains in guards:
            for _, uses in chains:
                for mem, d in uses:
                    if not any(m == mem and dd == d for m, dd, _ in dims):
                        dims.append((mem, d, memref.dim(mem, arith.constant(index, d))))
        chunk = arith.constant(i64, 1)
        last_of = []         # (buffer, its last position): the next block's prefetches
        for mem in [ld.operands[0] for ld, _ in guards[:1]] + _streams(F, guards, block, top):
            last_of.append((mem, arith.subi(memref.dim(mem, zero), one)))
    # the number of blocks: the loop's rows plus their stored entries, over COST
    with ir.InsertionPoint(anchor), loc:
        trip = arith.subi(ub, lb)
        none = arith.cmpi(arith.CmpIPredicate.eq, trip, zero)
        branch = scf.IfOp(none, [index, i1], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([zero, false])
        with ir.InsertionPoint(branch.else_block):
            stored = arith.subi(_to_index(memref.load(pos, [ub])), _to_index(memref.load(pos, [lb])))
            big = arith.cmpi(arith.CmpIPredicate.uge, stored, arith.constant(index, PREFETCH_MIN_ENTRIES))
            scf.YieldOp([arith.ceildivui(arith.addi(trip, stored), cost), big])
        blocks, big = branch.results[0], branch.results[1]
    lblock = L.regions[0].blocks[0]
    iv = lblock.arguments[0]
    body_ops = list(lblock.operations)[:-1]          # all but the terminator
    iv_uses = [(_op(u.owner), u.operand_number) for u in iv.uses]
    with ir.InsertionPoint(body_ops[0]), loc:
        plb = _to_index(memref.load(pos, [lb]))
        t0 = arith.muli(iv, cost)
        first = _lower_bound(pos, lb, ub, plb, t0)
        end = _lower_bound(pos, lb, ub, plb, arith.addi(t0, cost))
        plo = _to_index(memref.load(pos, [first]))
        phi = _to_index(memref.load(pos, [end]))
        good = None
        streams = _streams(F, guards, block, top)
        next_streams = list(streams)
        for ld, chains in guards:
            for chain, uses in chains:
                sizes = [next(x for m, dd, x in dims if m == mem and dd == d) for mem, d in uses]
                # the unsigned max of the block's coordinates, cast as the kernel casts them;
                # the first scan also prefetches the block's other per-entry buffers
                top_c = _scan(ld.operands[0], chain, plo, phi, streams, big, zero, one)
                streams = []
                for size in sizes:
                    ok = arith.cmpi(arith.CmpIPredicate.ult, top_c, size)
                    good = ok if good is None else arith.andi(good, ok)
        empty = arith.cmpi(arith.CmpIPredicate.uge, plo, phi)
        good = arith.ori(empty, good)
        # expected false: LLVM lays the store out of the straight path
        bad = llvm.intr_expect(arith.xori(good, true), false)
        report = scf.IfOp(bad)
        with ir.InsertionPoint(report.then_block):
            llvm.StoreOp(one32, flag, alignment=4, ordering=ir.IntegerAttr.get(i64, 2))   # monotonic
            scf.YieldOp([])
        run = scf.IfOp(good)
        with ir.InsertionPoint(run.then_block):
            inner = scf.ForOp(first, end, one)
            with ir.InsertionPoint(inner.body):
                inner_yield = scf.YieldOp([])
            scf.YieldOp([])
    for op in body_ops:
        op.move_before(inner_yield)
    for op, n in iv_uses:
        op.operands[n] = inner.induction_variable
    _prefetch_next(inner, pos, plo, phi, [guards[0][0].operands[0], *next_streams], last_of, loc)
    L.operands[0] = zero
    L.operands[1] = blocks
    if L.name == "omp.loop_nest":
        ws = _parent_op(L)
        _, chunk_slot, _ = _slots()
        seg = list(ir.DenseI32ArrayAttr(ws.attributes["operandSegmentSizes"]))
        if chunk_slot < len(seg) and seg[chunk_slot] == 1:
            ws.operands[sum(seg[:chunk_slot])] = chunk
