"""MTTKRP (and TTV) over a 3-D COO operand, hand-written (issue 14).

``M[i,r] = sum[j,k](A[i,j,k] * B[j,r] * C[k,r])`` (the einsum ``ijk,jr,kr->ir``; the factors
in any operand order, either of them stored transposed (``B[r,j]``), the result ``M[r,i]``
too) with A a 3-D COO tensor (one coordinate array per dimension, or the columns of one
(nnz, 3) array: MLIR's SoA / AoS COO), B and C dense, a dense result.  MLIR's sparsifier
walks A's COO segments in nested ``scf.while`` loops that never run in parallel and
multiplies ``B[j,r] * C[k,r]`` again for every entry and r.  This kernel:

* walks A's entries in (i, j) segments and, per block of columns r (``VECTOR_BYTES`` wide,
  then a quarter of that, then single columns), sums ``t[r] = sum_k A[i,j,k] * C[k,r]`` in
  registers (two accumulators: even and odd entries), then ``M[i,r] += B[j,r] * t[r]`` once
  per segment: the B factor is out of the k loop, and t never goes through memory;
* runs in parallel over *slots* of ``SLOT`` consecutive entries.  A slot owns the i-slices
  whose first entry lies in it (tested in O(1): the entry before the slot and its last one
  are in different slices), and computes each of them to its end (past the slot when the
  slice is longer; the slice end is tested once per segment); a slot in the middle of a
  long slice has nothing to do.  Each row of M is therefore written by one thread in a
  fixed order: no atomics, and the result does not depend on the thread count, bit for
  bit.  The loop over slots is an ``scf.parallel`` (OpenMP through the ordinary pipeline);
  its work measure (``passes/rewrites.py`` ``thread_count``: iterations x ``ROW_WORK`` for
  a loop that reads no positions buffer) is the stored entries, as ``SLOT == ROW_WORK``.

TTV ``M[i,j] = sum[k](A[i,j,k] * v[k])`` with a dense result (or ``M[j,i]``) is the same walk
with one column, ``v`` in place of C and no B; TTM ``M[i,j,r] = sum[k](A[i,j,k] * C[k,r])``
(the planner's first step of a Tucker chain ``ijk,jr,ks->irs``) the same walk with no B,
each segment's ``t`` stored as the row ``M[i,j,:]`` (A is canonical: one segment per (i, j)).
The TTM writes its whole result, so the call hands it uninitialized memory
(``fills_output``, as for the dense GEMM): before each segment the thread that runs it zeroes
the rows ``M[i',j',:]`` between the previous entry's (i, j) and its own (the empty (i, j)
rows of its slice and the empty slices before it, from row 0 for the first entry), after the
last entry the rows to the end; with no entries one serial fill.  The zero fill of a fresh
result (``np.zeros``: page clearing and memset on the calling thread) then runs in parallel
with the work, and the rows are written once.

A's coordinates are canonical here (sorted, distinct): the runtime's COO loaders pass a
canonical operand as it is and sum a non-canonical one on a copy (``runtime/operands.py``);
the ownership rule needs only that each i-slice is contiguous.

The function has the arguments of the sparsifier's kernel for the same statement after
``sparse-tensor-codegen`` (the sizes, A's positions, coordinates, values and specifier, the
dense factors, the output memref), so the call path packs it unchanged; the MTTKRP's and
TTV's output arrives zeroed (``np.zeros``, runtime/call.py) as for the sparsifier's kernels,
the TTM's uninitialized (``np.empty``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes as dt
from ...expr import Statement
from ...formats import Format
from ...kernel_abi import ROW_WORK, TargetFacts
from .emit import Text, arith, function, if_yield, ity, kernel_head, loop, module, multiply_add, spec_type, zero
from .recognize import RolePlan, factors, index_order, is_dense_rowmajor, one_kind, plain_sum

#: entries per parallel iteration: the thread-count rewrite counts ROW_WORK per iteration
#: of a loop that reads no positions buffer, so one slot of ROW_WORK entries counts as
#: its entries (the work threshold then compares stored entries, as for a CSR row loop)
SLOT = ROW_WORK
#: two accumulators per block (even / odd entries of a segment)
PAIRS = True
#: the columns of one block of t (in registers): 128 bytes, four AVX2 registers
VECTOR_BYTES = 128

_KINDS = ("float", "int")
_SOA = ("compressed(nonunique)", "singleton(nonunique, soa)", "singleton(soa)")
_AOS = ("compressed(nonunique)", "singleton(nonunique)", "singleton")


@dataclass(frozen=True)
class Plan(RolePlan):
    """A recognised MTTKRP: the operand names of A, B (the factor of A's level-1 index j)
    and C (of its level-2 index k), whether B / C / the result are stored transposed, and
    whether A's coordinates are one interleaved (AoS) buffer."""

    i: str
    j: str
    k: str
    r: str
    b_t: bool
    c_t: bool
    m_t: bool
    aos: bool


def _coo3(f: Format | None) -> str | None:
    if f is None or f.is_dense or f.block is not None or tuple(f.order or (0, 1, 2)) != (0, 1, 2):
        return None
    if f.pos_width not in (32, 64) or f.crd_width not in (32, 64):
        return None
    return "soa" if f.levels == _SOA else "aos" if f.levels == _AOS else None


def _match_ttv(stmt: Statement, fmts: dict) -> Plan | None:
    """TTV ``M[i,j] = sum[k](A[i,j,k] * v[k])`` (or ``M[j,i]``): the same walk over A's (i, j)
    segments with one column, v in place of C and no B."""
    e = stmt.expr
    if not plain_sum(e, 1):
        return None
    facs = factors(e.body)
    if facs is None or len(facs) != 2 or len({a.tensor for a in facs}) != 2:
        return None
    A, v = facs if len(facs[0].indices) == 3 else facs[::-1]
    if len(A.indices) != 3 or _coo3(fmts[A.tensor]) is None or len(set(A.indices)) != 3:
        return None
    i, j, k = A.indices
    if v.indices != (k,) or e.indices != (k,) or not fmts[v.tensor].is_dense or set(stmt.indices) != {i, j}:
        return None
    return Plan("ttv", (("A", A.tensor), ("V", v.tensor)), index_order(stmt), i, j, k, "",
                b_t=False, c_t=False, m_t=stmt.indices == (j, i), aos=_coo3(fmts[A.tensor]) == "aos")


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written MTTKRP (or TTV) for this specialization, or None (the sparsifier's kernel)."""
    if out_format is not None or not one_kind(dtypes, _KINDS):
        return None
    if len(stmt.operands) == 2 and len(stmt.indices) == 3:
        return _match_ttm(stmt, dict(zip(stmt.operands, formats)))
    if len(stmt.indices) != 2:
        return None
    if len(stmt.operands) == 2:
        return _match_ttv(stmt, dict(zip(stmt.operands, formats)))
    if len(stmt.operands) != 3:
        return None
    e = stmt.expr
    if not plain_sum(e, 2):
        return None
    facs = factors(e.body)
    if facs is None or len(facs) != 3 or len({a.tensor for a in facs}) != 3:
        return None
    fmts = dict(zip(stmt.operands, formats))
    sparse = [a for a in facs if len(a.indices) == 3]
    if len(sparse) != 1:
        return None
    A = sparse[0]
    layout = _coo3(fmts[A.tensor])
    i, j, k = A.indices
    if layout is None or len({i, j, k}) != 3 or set(e.indices) != {j, k}:
        return None
    out = set(stmt.indices)
    if i not in out:
        return None
    r = next(x for x in stmt.indices if x != i)
    if r in (i, j, k):
        return None
    rest = [a for a in facs if a is not A]
    bs = [a for a in rest if set(a.indices) == {j, r} and len(a.indices) == 2]
    cs = [a for a in rest if set(a.indices) == {k, r} and len(a.indices) == 2]
    if len(bs) != 1 or len(cs) != 1 or not (is_dense_rowmajor(fmts[bs[0].tensor]) and is_dense_rowmajor(fmts[cs[0].tensor])):
        return None
    B, C = bs[0], cs[0]
    return Plan("mttkrp", (("A", A.tensor), ("B", B.tensor), ("C", C.tensor)), index_order(stmt), i, j, k, r,
                b_t=B.indices == (r, j), c_t=C.indices == (r, k), m_t=stmt.indices == (r, i),
                aos=layout == "aos")


def _match_ttm(stmt: Statement, fmts: dict) -> Plan | None:
    """TTM ``M[i,j,r] = sum[k](A[i,j,k] * C[k,r])``: A's last index summed, C dense row-major,
    the result in the order (i, j, r)."""
    e = stmt.expr
    if not plain_sum(e, 1):
        return None
    facs = factors(e.body)
    if facs is None or len(facs) != 2 or len({a.tensor for a in facs}) != 2:
        return None
    A, C = facs if len(facs[0].indices) == 3 else facs[::-1]
    if len(A.indices) != 3 or _coo3(fmts[A.tensor]) is None or len(set(A.indices)) != 3 or len(C.indices) != 2:
        return None
    i, j, k = A.indices
    r = C.indices[1]
    if C.indices[0] != k or r in A.indices or e.indices != (k,) or stmt.indices != (i, j, r):
        return None
    if not is_dense_rowmajor(fmts[C.tensor]):
        return None
    return Plan("ttm", (("A", A.tensor), ("C", C.tensor)), index_order(stmt), i, j, k, r,
                b_t=False, c_t=False, m_t=False, aos=_coo3(fmts[A.tensor]) == "aos")


def emit(plan: Plan, formats: dict, out: Format | None, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module (module docstring); ``formats`` by operand name, widths resolved
    (``out``: None, a dense result; ``facts``: nothing here depends on them)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fa = plan.format_of("A", formats)
    pw, cw = fa.pos_width, fa.crd_width
    PT, CT, VT, MT = f"memref<?x{ity(pw)}>", f"memref<?x{ity(cw)}>", f"memref<?x{T}>", f"memref<?x?x{T}>"
    fl = row.kind == "float"
    lanes = VECTOR_BYTES // row.numpy.itemsize
    # contiguous rows of C, B and M: blocks of `lanes` columns, then a quarter of that, then
    # one; a transposed factor or result is read column by column
    ttv, ttm = plan.kind == "ttv", plan.kind == "ttm"
    M3, MF = f"memref<?x?x?x{T}>", f"memref<?x{T}>"
    widths = (lanes, max(lanes // 4, 1), 1) if not (plan.b_t or plan.c_t or plan.m_t or ttv) else (1,)
    widths = tuple(dict.fromkeys(widths))

    # the kernel's parameters, in the sparsifier kernel's order
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    for op, f in formats.items():
        rl = plan.role(op)
        if rl == "A":
            crds = ["%A_crd"] if plan.aos else ["%A_crd0", "%A_crd1", "%A_crd2"]
            params += [f"%A_pos: {PT}"] + [f"{c}: {CT}" for c in crds] + \
                      [f"%A_val: {VT}", f"%A_spec: {spec_type(3, len(crds) + 2)}"]
        else:
            params.append(f"%{rl}: {VT if rl == 'V' else MT}")
    params.append(f"%M: {M3 if ttm else MT}")
    crds = ["%A_crd"] if plan.aos else ["%A_crd0", "%A_crd1", "%A_crd2"]
    dense = [("%V", VT)] if ttv else [("%C", MT)] if ttm else [("%B", MT), ("%C", MT)]
    dense.append(("%M", M3 if ttm else MT))
    buf_params = ", ".join(f"{c}: {CT}" for c in crds) + f", %A_val: {VT}, " + \
        ", ".join(f"{n}: {ty}" for n, ty in dense)
    buf_args = ", ".join(crds) + ", %A_val, " + ", ".join(n for n, _ in dense)
    buf_types = ", ".join([CT] * len(crds)) + f", {VT}, " + ", ".join(ty for _, ty in dense)

    # ---- @mttkrp_slot(slot, nnz, R, buffers): one slot's i-slices
    s = Text()

    def crd(p: str, d: int) -> str:
        if plan.aos:
            three = s.op("arith.constant 3 : index")
            at = s.op(f"arith.muli {p}, {three} : index")
            if d:
                at = s.op(f"arith.addi {at}, {s.op(f'arith.constant {d} : index')} : index")
            return s.load_index("%A_crd", at, cw)
        return s.load_index(f"%A_crd{d}", p, cw)

    def same_row(p: str, bound: str) -> str:
        """0 < p < bound and I[p] == I[p - 1] (the loads only when in bounds)."""
        pos = s.op(f"arith.cmpi ugt, {p}, %c0 : index")
        inb = s.op(f"arith.cmpi ult, {p}, {bound} : index")
        ok = s.op(f"arith.andi {pos}, {inb} : i1")

        def same() -> str:
            pm = s.op(f"arith.subi {p}, %c1 : index")
            a, b = crd(p, 0), crd(pm, 0)
            return s.op(f"arith.cmpi eq, {a}, {b} : index")
        return if_yield(s, ok, "i1", same, lambda: "%false", name=s.fresh("same"))

    def at2(mem: str, row_ix: str, col: str, transposed: bool) -> str:
        return f"{mem}[{col}, {row_ix}]" if transposed else f"{mem}[{row_ix}, {col}]"

    def fill(t: Text, mem: str, a: str, b: str) -> None:
        """``mem[a:b] = 0`` (a flat view of the TTM result)"""
        x = t.fresh("z")
        t(f"scf.for {x} = {a} to {b} step %c1 {{")
        t(f"  memref.store %zf, {mem}[{x}] : {MF}")
        t("}")

    s.index_constants()
    if ttm:     # the result as one flat buffer and its (i, j) sizes: the kernel zeroes its empty rows
        s(f"%zf = {zero(row)}")
        s(f"%MI = memref.dim %M, %c0 : {M3}")
        s(f"%MJ = memref.dim %M, %c1 : {M3}")
        s(f"%Mf = memref.collapse_shape %M [[0, 1, 2]] : {M3} into {MF}")
    s("%c2 = arith.constant 2 : index")
    s("%cm2 = arith.constant -2 : index")
    s("%false = arith.constant false")
    s("%true = arith.constant true")
    s(f"%cslot = arith.constant {SLOT} : index")
    lo = s.op("arith.muli %slot, %cslot : index")
    hi0 = s.op("arith.addi " + lo + ", %cslot : index")
    hi = s.op(f"arith.minui {hi0}, %nnz : index")
    # a slot owns nothing when its entries and the one before it are in one i-slice (the
    # coordinates are sorted): O(1), as most slots of a long slice own nothing
    first = s.op("arith.cmpi eq, " + lo + ", %c0 : index")

    def slices_differ() -> str:
        lm = s.op(f"arith.subi {lo}, %c1 : index")
        hm = s.op(f"arith.subi {hi}, %c1 : index")
        return s.op(f"arith.cmpi ne, {crd(lm, 0)}, {crd(hm, 0)} : index")
    owns = if_yield(s, first, "i1", lambda: "%true", slices_differ, name=s.fresh("owns"))
    s(f"scf.if {owns} {{")
    # p0: the first entry in [lo, hi) that starts an i-slice
    p0 = s.fresh("p0")
    s(f"{p0} = scf.while (%q = {lo}) : (index) -> index {{")
    go = same_row("%q", hi)
    s(f"scf.condition({go}) %q : index")
    s("} do {")
    s("^bb0(%q1: index):")
    n1 = s.op("arith.addi %q1, %c1 : index")
    s(f"  scf.yield {n1} : index")
    s("}")
    # the (i, j) segments from p0 to the end of the last i-slice that starts before hi
    # (tested once per segment)
    s(f"%done = scf.while (%p = {p0}) : (index) -> index {{")
    before = s.op(f"arith.cmpi ult, %p, {hi} : index")
    more = if_yield(s, before, "i1", lambda: "%true", lambda: same_row("%p", "%nnz"), name=s.fresh("more"))
    s(f"scf.condition({more}) %p : index")
    s("} do {")
    s("^bb0(%ps: index):")
    iv, jv = crd("%ps", 0), crd("%ps", 1)
    if ttm:     # zero the rows M[i', j', :] between the previous entry's (i, j) and this one's
        flat = s.op(f"arith.addi {s.op(f'arith.muli {iv}, %MJ : index')}, {jv} : index")
        at0 = s.op("arith.cmpi eq, %ps, %c0 : index")

        def after_previous() -> str:
            pm = s.op("arith.subi %ps, %c1 : index")
            pf = s.op(f"arith.addi {s.op(f'arith.muli {crd(pm, 0)}, %MJ : index')}, {crd(pm, 1)} : index")
            return s.op(f"arith.addi {pf}, %c1 : index")
        gap = if_yield(s, at0, "index", lambda: "%c0", after_previous, name=s.fresh("gap"))
        fill(s, "%Mf", s.op(f"arith.muli {gap}, %R : index"), s.op(f"arith.muli {flat}, %R : index"))
    p1 = s.op("arith.addi %ps, %c1 : index")
    q = s.fresh("q")
    s(f"{q} = scf.while (%e = {p1}) : (index) -> index {{")
    inb = s.op("arith.cmpi ult, %e, %nnz : index")

    def same_segment() -> str:
        ie, je = crd("%e", 0), crd("%e", 1)
        e1 = s.op(f"arith.cmpi eq, {ie}, {iv} : index")
        e2 = s.op(f"arith.cmpi eq, {je}, {jv} : index")
        return s.op(f"arith.andi {e1}, {e2} : i1")
    same = if_yield(s, inb, "i1", same_segment, lambda: "%false", name=s.fresh("same"))
    s(f"scf.condition({same}) %e : index")
    s("} do {")
    s("^bb0(%e1: index):")
    s(f"  scf.yield {s.op('arith.addi %e1, %c1 : index')} : index")
    s("}")
    # columns r in blocks of w (a vector of w lanes in registers, accumulated over the
    # segment's entries: t[r] = sum_k A[i,j,k] * C[k,r]), then M[i,r] += B[j,r] * t[r]
    start = "%c0"
    for w in widths:
        ty = f"vector<{w}x{T}>" if w > 1 else T
        cw_ = s.op(f"arith.constant {w} : index")
        left = s.op(f"arith.subi %R, {start} : index")
        nb = s.op(f"arith.divui {left}, {cw_} : index")
        span = s.op(f"arith.muli {nb}, {cw_} : index")
        end = s.op(f"arith.addi {start}, {span} : index")
        zv = s.op(f"arith.constant dense<{'0.0' if fl else '0'}> : {ty}" if w > 1 else zero(row))
        rb = s.fresh("rb")
        s(f"scf.for {rb} = {start} to {end} step {cw_} {{")
        def term(x: str, v: str) -> str:
            """v + A[x] * C[k(x), rb:rb+w]"""
            kv = crd(x, 2)
            av = s.op(f"memref.load %A_val[{x}] : {VT}")
            if w > 1:
                cv = s.op(f"vector.load %C[{kv}, {rb}] : {MT}, {ty}")
                asp = s.op(f"vector.broadcast {av} : {T} to {ty}")
            elif ttv:
                cv = s.op(f"memref.load %V[{kv}] : {VT}")
                asp = av
            else:
                cv = s.op(f"memref.load {at2('%C', kv, rb, plan.c_t)} : {MT}")
                asp = av
            return multiply_add(s, fl, asp, cv, v, ty)

        # two accumulators (even / odd entries of the segment, then the odd tail into the
        # first): a single chain of dependent FMAs was the loop's bound
        ln = s.op(f"arith.subi {q}, %ps : index")
        pairs = s.op(f"arith.andi {ln}, %cm2 : index")
        mid = s.op(f"arith.addi %ps, {pairs} : index") if PAIRS else "%ps"
        two = s.fresh("two")
        s(f"{two}:2 = scf.for %x = %ps to {mid} step %c2 iter_args(%ea = {zv}, %eb = {zv}) -> ({ty}, {ty}) {{")
        n0 = term("%x", "%ea")
        n1 = term(s.op("arith.addi %x, %c1 : index"), "%eb")
        s(f"  scf.yield {n0}, {n1} : {ty}, {ty}")
        s("}")
        tail = s.fresh("tail")
        s(f"{tail} = scf.for %x = {mid} to {q} step %c1 iter_args(%et = {two}#0) -> ({ty}) {{")
        s(f"  scf.yield {term('%x', '%et')} : {ty}")
        s("}")
        acc = s.op(arith(row, "+", tail, f"{two}#1", ty))
        if ttv:     # M[i,j] += t
            mat = at2("%M", iv, jv, plan.m_t)
            mv = s.op(f"memref.load {mat} : {MT}")
            out = s.op(arith(row, "+", mv, acc))
            s(f"  memref.store {out}, {mat} : {MT}")
            s("}")
            continue
        if ttm:     # M[i,j,rb:rb+w] = t (the one segment of (i, j): A is canonical)
            if w > 1:
                s(f"  vector.store {acc}, %M[{iv}, {jv}, {rb}] : {M3}, {ty}")
            else:
                s(f"  memref.store {acc}, %M[{iv}, {jv}, {rb}] : {M3}")
            s("}")
            start = end
            continue
        if w > 1:
            bv = s.op(f"vector.load %B[{jv}, {rb}] : {MT}, {ty}")
            mv = s.op(f"vector.load %M[{iv}, {rb}] : {MT}, {ty}")
        else:
            bv = s.op(f"memref.load {at2('%B', jv, rb, plan.b_t)} : {MT}")
            mv = s.op(f"memref.load {at2('%M', iv, rb, plan.m_t)} : {MT}")
        out = multiply_add(s, fl, bv, acc, mv, ty)
        if w > 1:
            s(f"  vector.store {out}, %M[{iv}, {rb}] : {MT}, {ty}")
        else:
            s(f"  memref.store {out}, {at2('%M', iv, rb, plan.m_t)} : {MT}")
        s("}")
        start = end
    if ttm:     # the last segment: zero the rows after it
        s(f"scf.if {s.op(f'arith.cmpi eq, {q}, %nnz : index')} {{")
        nxt = s.op(f"arith.addi {flat}, %c1 : index")
        rows = s.op("arith.muli %MI, %MJ : index")
        fill(s, "%Mf", s.op(f"arith.muli {nxt}, %R : index"), s.op(f"arith.muli {rows}, %R : index"))
        s("}")
    s(f"scf.yield {q} : index")
    s("}")
    s("}")
    s("return")
    slot_fn = function(f"func.func private @mttkrp_slot(%slot: index, %nnz: index, %R: index, {buf_params}) {{",
                       s.lines)

    # ---- @kernel: the slots, in parallel
    t = Text()
    t.index_constants()
    nnz = t.load_index("%A_pos", "%c1", pw)
    slots = t.op(f"arith.ceildivui {nnz}, {t.op(f'arith.constant {SLOT} : index')} : index")
    R = "%c1" if ttv else f"%size_{plan.r}"
    if ttm:     # no entries, no slot: one serial fill of the whole result
        t(f"scf.if {t.op(f'arith.cmpi eq, {nnz}, %c0 : index')} {{")
        t(f"%zf = {zero(row)}")
        t("%c2 = arith.constant 2 : index")
        n0, n1, n2 = (t.op(f"memref.dim %M, %c{d} : {M3}") for d in range(3))
        size = t.op(f"arith.muli {t.op(f'arith.muli {n0}, {n1} : index')}, {n2} : index")
        fill(t, t.op(f"memref.collapse_shape %M [[0, 1, 2]] : {M3} into {MF}"), "%c0", size)
        t("}")
    opening, closing = loop(parallel, "%s", "%c0", slots)
    t(opening)
    t(f"  func.call @mttkrp_slot(%s, {nnz}, {R}, {buf_args}) : (index, index, index, {buf_types}) -> ()")
    t(closing)
    t("return")
    return module(slot_fn, kernel_head(params), t.lines)
