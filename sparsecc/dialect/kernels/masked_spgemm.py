"""The masked product with a CSR result, hand-written: ``C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])``.

Also its flat form ``sum[k](M[i,j] * A[i,k] * B[k,j])`` (the nest the planner's mask rule
keeps, docs/planning.md), any operand order, the einsum ``ij,ik,kj->ij``, a constant factor
that keeps the dtype (``sum[k](2 * A[i,k] * B[k,j])``), and an operand stored CSC and read
transposed (``A[k,i]`` CSC has A's CSR buffers of ``(i, k)``): M, A and B CSR, a CSR result
(GraphBLAS's masked ``mxm`` followed by the multiply with M).

MLIR 22's sparsifier compiles the flat form as one nest that never runs in parallel (it
writes a sparse result).  Here blocks of ``ROWS_PER_BLOCK`` rows run in an ``scf.parallel``
(a block's stored entries of A are the thread count's measure; a block where A stores
nothing only clears its flags), in two phases:

1. Each row stamps M's row ``i`` into a dense marker of its thread, the size of the result's
   columns, with each entry's *position* ``p`` in M's buffers (positions are unique over all
   rows, so the marker is never cleared: a stamp of another row lies outside this row's
   positions ``[M_pos[i], M_pos[i+1])``, one unsigned compare).  Then for each ``A[i,k]``,
   B's row ``k`` is read a vector of coordinates at a time (16 int32 with AVX-512: a masked
   load; B's row of A's entry ``PREFETCH_AHEAD`` ahead prefetched), and which of them are in
   M's row is found by one vector compare with each of its coordinates where the row is short
   (``COMPARE_TIERS``: 4, 8), else by a gather of their stamps and one compare; for each that
   is (the mask's bits, lowest first), ``A[i,k] * B[k,j]`` is added to the slot of its stamp
   (checked to be one of the row's) in an accumulator indexed by M's positions (each row owns
   its slots; it starts at ``-0.0``, so the first term is stored exactly) and the slot is
   flagged.  B's values are read only there (a few percent of its
   entries under a sparse mask).  The row's count of flagged slots goes to the result's
   positions.
2. A prefix sum of the counts, then a parallel pass copies each block's flagged entries in
   M's order: the coordinate from M, the value ``M[i,j] * sum``.

So the result stores exactly the entries of M's pattern where at least one product
``A[i,k] * B[k,j]`` is stored (an entry whose terms cancel to zero stays stored), as the
sparsifier's flat nest and ``optimize=False``'s masked SpGEMM do, with the values
``optimize=False`` gives bit for bit (the sum in A's row order, then B's, as SpGEMM's).  Its
rows are in M's order: canonical where M is (the call path sorts an unsorted SciPy operand).
Each row is computed by one thread in a fixed order, so the result does not depend on the
thread count, bit for bit.

M's coordinates are range-checked as they are stamped (a bad one sets the call's flag and is
skipped; the kernel lists them in ``SELF_CHECKED``, so ``check=True`` skips NumPy's check of
them); A's and B's, of which only the rows under M's rows are read, are checked by the call
path before the call and clamped here besides (a bad one sets the flag), so no access leaves
its buffer even with ``check=False``.  The markers are per thread, the size of the result's
columns: a ``huge`` call keeps the sparsifier's kernel (``runtime/fast_paths.py``), as for
SpGEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes as dt
from ...expr import Statement
from ...formats import Format
from ...kernel_abi import NUM_THREADS_GLOBAL, PARALLEL_CHUNK, SELF_CHECKED, TargetFacts
from .emit import (FLAG_CALL, FLAG_DECL, OMP_DECLS, Text, alloc_entries, arith, csr_results, function, if_yield, ity,
                   kernel_head, loop, marker_workspaces, module, operand_params, prefix_sum, return_csr, row_bounds,
                   set_flag, huge_page_decls)
from .recognize import RolePlan, csr_product, scale_literal, stored_order


@dataclass(frozen=True)
class Plan(RolePlan):
    """A recognised masked product (roles ``M`` [i,j], ``A`` [i,k], ``B`` [k,j], each as its
    buffers store it); ``a_first``: A's factor comes before B's in the product; ``scale``:
    the constant factor's MLIR literal, or None."""

    i: str
    j: str
    k: str
    a_first: bool = True
    scale: str | None = None


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written masked product for this specialization, or None."""
    p = csr_product(stmt, formats, dtypes, out_format, scale_ok=True)
    if p is None or len(p.factors) != 3:
        return None
    scale = scale_literal(p.scale, dtypes[0]) if p.scale else None
    if p.scale and scale is None:
        return None
    want = {(p.i, p.j): "M", (p.i, p.k): "A", (p.k, p.j): "B"}
    roles: dict[str, str] = {}
    for a in p.factors:
        role = want.get(stored_order(a, p.formats[a.tensor]))
        if role is None or role in roles:
            return None
        roles[role] = a.tensor
    order = [a.tensor for a in p.factors]
    return Plan("masked_spgemm", tuple((r, roles[r]) for r in ("M", "A", "B")), p.index_order, p.i, p.j, p.k,
                a_first=order.index(roles["A"]) < order.index(roles["B"]), scale=scale)


def _minus_zero(row: dt.DType) -> str:
    """The additive identity that keeps a first term's bits: ``-0.0`` (``-0.0 + x`` is ``x``
    for every x, ``-0.0`` included), 0 for integers."""
    if row.kind == "complex":
        part = row.storage[8:-1]
        return f"complex.constant [-0.0 : {part}, -0.0 : {part}] : {row.storage}"
    return f"arith.constant {'-0.0' if row.kind == 'float' else '0'} : {row.storage}"


#: B's row of A's entry this many ahead (across rows) is prefetched: B's rows are visited in
#: random order (bench row, 1 thread: 0.88-0.91x the time without; 4-16 alike)
PREFETCH_AHEAD = 8
#: a row of M of at most this many entries is tested against a chunk of B's coordinates by
#: comparing its coordinates with them, one vector compare each (the first tier that fits);
#: a longer one by gathering their stamps from the marker.  Bench row (M 4 a row), 1 thread:
#: 4 compares 0.60-0.63x the gather's time, 8 0.75x, 12 0.90x, 16 1.11x
COMPARE_TIERS = (4, 8)
#: rows a parallel iteration takes (its thread's marker looked up once), and such blocks dealt
#: at a time by the dynamic schedule: a call of ``omp_get_thread_num`` per row cost 4-7% of the
#: bench row on one thread
ROWS_PER_BLOCK = 32
BLOCKS_PER_CHUNK = 4
#: an entry of A reads a row of B: the work of about this many entries of SpMV, the unit of
#: the thread count's measure (bench row, 1 thread: ~10 ns an entry of A)
WORK_PER_A_ENTRY = 8


def _accumulate(t: Text, plan: Plan, row: dt.DType, a: str, q: str, slot: str) -> None:
    """``acc[slot] += a * B_val[q]`` and the slot flagged: a product at one of M's entries."""
    T = row.storage
    b = t.op(f"memref.load %B_val[{q}] : memref<?x{T}>")
    prod = t.op(arith(row, "*", a, b) if plan.a_first else arith(row, "*", b, a))
    old = t.op(f"memref.load %acc[{slot}] : memref<?x{T}>")
    t(f"  memref.store {t.op(arith(row, '+', old, prod))}, %acc[{slot}] : memref<?x{T}>")
    t(f"  memref.store %one8, %hit[{slot}] : memref<?xi8>")


def _vector_constants(t: Text, fb: Format, MT: str, mlo: str, mhi: str, nm1: str, lanes: int) -> dict:
    """The row's constants of :func:`_b_row` (written before A's loop); ``lo``, ``len``: the
    row's first position in M and its entries, in the marker's type."""
    CT = ity(fb.crd_width)
    v = {"vc": f"vector<{lanes}x{CT}>", "vb": f"vector<{lanes}xi1>", "CT": CT, "lanes": lanes}
    v["lo"] = t.op(f"arith.index_cast {mlo} : index to {MT}")
    v["len"] = t.op(f"arith.index_cast {t.op(f'arith.subi {mhi}, {mlo} : index')} : index to {MT}")
    v["zc"] = t.op(f"arith.constant dense<0> : {v['vc']}")
    v["top"] = t.op(f"vector.broadcast {t.op(f'arith.index_cast {nm1} : index to {CT}')} : {CT} to {v['vc']}")
    v["step"] = t.op(f"arith.constant {lanes} : index")
    return v


def _in_marker(t: Text, v: dict, MT: str):
    """The test of :func:`_b_row`: a gather of the coordinates' stamps, each compared with the
    row's positions (its constants written here, before A's loop)."""
    vc, vb = v["vc"], v["vb"]
    vm = f"vector<{v['lanes']}x{MT}>"
    none = t.op(f"arith.constant dense<-1> : {vm}")
    lo = t.op(f"vector.broadcast {v['lo']} : {MT} to {vm}")
    vlen = t.op(f"vector.broadcast {v['len']} : {MT} to {vm}")

    def test(jc: str, mask: str) -> str:
        mk = t.op(f"vector.gather %mark[%base][{jc}], {mask}, {none} : memref<?x{MT}>, {vc}, {vb}, {vm} into {vm}")
        return t.op(f"arith.cmpi ult, {t.op(f'arith.subi {mk}, {lo} : {vm}')}, {vlen} : {vm}")
    return test


def _in_row(t: Text, v: dict, fm: Format, mlo: str, mhi: str, up_to: int):
    """The test of :func:`_b_row` for a row of M of at most ``up_to`` entries: its coordinates,
    broadcast (written here, before A's loop; past the row's end, or for a coordinate out of
    range, an impossible one: a chunk's are clamped below n), compared with the chunk's, no
    gather."""
    CT, vc, vb = v["CT"], v["vc"], v["vb"]
    last = t.op(f"arith.subi {mhi}, %c1 : index")
    ln = t.op(f"arith.subi {mhi}, {mlo} : index")
    none = t.op(f"arith.constant -1 : {CT}")
    cols = []
    for e in range(up_to):
        ce = t.op(f"arith.constant {e} : index")
        at = t.op(f"arith.minui {t.op(f'arith.addi {mlo}, {ce} : index')}, {last} : index")
        ci = t.load_index("%M_crd", at, fm.crd_width)
        ok = t.op(f"arith.andi {t.op(f'arith.cmpi ult, {ce}, {ln} : index')}, "
                  f"{t.op(f'arith.cmpi ult, {ci}, %n : index')} : i1")      # (a bad one: flagged, never cast)
        c = t.op(f"arith.select {ok}, {t.op(f'arith.index_cast {ci} : index to {CT}')}, {none} : {CT}")
        cols.append(t.op(f"vector.broadcast {c} : {CT} to {vc}"))

    def test(jc: str, mask: str) -> str:
        got = [t.op(f"arith.cmpi eq, {jc}, {c} : {vc}") for c in cols]
        while len(got) > 1:
            got = [t.op(f"arith.ori {got[q]}, {got[q + 1]} : {vb}") for q in range(0, len(got) - 1, 2)] + \
                  got[len(got) - len(got) % 2:]
        return got[0]
    return test


def _b_row(t: Text, plan: Plan, row: dt.DType, fb: Format, MT: str, a: str, blo: str, bhi: str, nm1: str,
           lanes: int, v: dict, vmax: str, test) -> str:
    """B's row ``blo .. bhi`` ``lanes`` entries at a time: a masked load of the coordinates,
    ``test`` (which lanes are in M's row: :func:`_in_row`, :func:`_in_marker`); only lanes that
    hit go one by one (the mask's bits, lowest first: B's order), their slot the marker's
    stamp; returns ``vmax`` with the coordinates read (lane by lane)."""
    vc, vb, CT = v["vc"], v["vb"], v["CT"]
    bits_t = "i64" if lanes > 32 else "i32"
    zero_b = t.op(f"arith.constant 0 : {bits_t}")
    one_b = t.op(f"arith.constant 1 : {bits_t}")
    out = t.fresh("vmx")
    t(f"{out} = scf.for %q = {blo} to {bhi} step {v['step']} iter_args(%vm0 = {vmax}) -> ({vc}) {{")
    left = t.op(f"arith.subi {bhi}, %q : index")
    mask = t.op(f"vector.create_mask {left} : {vb}")
    jv = t.op(f"vector.maskedload %B_crd[%q], {mask}, {v['zc']} : memref<?x{CT}>, {vb}, {vc} into {vc}")
    jc = t.op(f"arith.minui {jv}, {v['top']} : {vc}")       # clamped: a bad one is flagged after the row
    hits = t.op(f"arith.andi {test(jc, mask)}, {mask} : {vb}")
    word = t.op(f"vector.bitcast {hits} : {vb} to vector<1xi{lanes}>")   # the mask register as bits
    bits = t.op(f"vector.extract {word}[0] : i{lanes} from vector<1xi{lanes}>")
    if lanes < int(bits_t[1:]):
        bits = t.op(f"arith.extui {bits} : i{lanes} to {bits_t}")
    anyhit = t.op(f"arith.cmpi ne, {bits}, {zero_b} : {bits_t}")
    t(f"scf.if {anyhit} {{")
    t(f"%bw = scf.while (%u = {bits}) : ({bits_t}) -> {bits_t} {{")
    t(f"  scf.condition({t.op(f'arith.cmpi ne, %u, {zero_b} : {bits_t}')}) %u : {bits_t}")
    t("} do {")
    t(f"^bb0(%u1: {bits_t}):")
    lane = t.op(f"arith.index_cast {t.op(f'math.cttz %u1 : {bits_t}')} : {bits_t} to index")
    qq = t.op(f"arith.addi %q, {lane} : index")
    j = t.op(f"arith.minui {t.load_index('%B_crd', qq, fb.crd_width)}, {nm1} : index")     # (clamped as above)
    mk1 = t.op(f"memref.load %mark[{t.op(f'arith.addi %base, {j} : index')}] : memref<?x{MT}>")
    # the stamp is one of the row's positions (so every write stays in the row's own slots,
    # whatever a bad coordinate made the test say)
    off = t.op(f"arith.subi {mk1}, {v['lo']} : {MT}")
    mine = t.op(f"arith.cmpi ult, {off}, {v['len']} : {MT}")
    t(f"scf.if {mine} {{")
    _accumulate(t, plan, row, a, qq, t.op(f"arith.index_cast {mk1} : {MT} to index"))
    t("}")
    um1 = t.op(f"arith.subi %u1, {one_b} : {bits_t}")
    t(f"  scf.yield {t.op(f'arith.andi %u1, {um1} : {bits_t}')} : {bits_t}")
    t("}")
    t("}")
    t(f"scf.yield {t.op(f'arith.maxui %vm0, {jv} : {vc}')} : {vc}")
    t("}")
    return out


def _row_function(plan: Plan, fm: Format, fa: Format, fb: Format, row: dt.DType, lanes: int) -> list[str]:
    """``@masked_row``: phase 1 of row ``i`` (module docstring) with the marker slice at
    ``base``; returns the row's stored entries."""
    T = row.storage
    MT = ity(fm.pos_width)          # the marker holds M's positions
    t = Text()
    t.index_constants()
    t("%one32 = arith.constant 1 : i32")
    t("%zero8 = arith.constant 0 : i8")
    t("%one8 = arith.constant 1 : i8")
    t(f"%init = {_minus_zero(row)}")
    mlo, i1, mhi = row_bounds(t, "%M_pos", "%i", fm.pos_width)
    t(f"scf.for %p = {mlo} to {mhi} step %c1 {{")         # M's row, stamped
    jv = t.load_index("%M_crd", "%p", fm.crd_width)
    t(f"  memref.store %init, %acc[%p] : memref<?x{T}>")
    t("  memref.store %zero8, %hit[%p] : memref<?xi8>")
    inside = t.op(f"arith.cmpi ult, {jv}, %n : index")     # unsigned: a negative one is huge
    t(f"scf.if {inside} {{")
    at = t.op(f"arith.addi %base, {jv} : index")
    t(f"  memref.store {t.op(f'arith.index_cast %p : index to {MT}')}, %mark[{at}] : memref<?x{MT}>")
    t("} else {")
    t(set_flag("%one32", "%flag"))
    t("}")
    t("}")
    has = t.op(f"arith.cmpi ult, {mlo}, {mhi} : index")
    cols = t.op("arith.cmpi ugt, %n, %c0 : index")
    go = t.op(f"arith.andi {has}, {cols} : i1")

    def products() -> str:
        nm1 = t.op("arith.subi %n, %c1 : index")
        alo = t.load_index("%A_pos", "%i", fa.pos_width)
        ahi = t.load_index("%A_pos", i1, fa.pos_width)
        v = _vector_constants(t, fb, MT, mlo, mhi, nm1, lanes)

        def a_loop(test) -> str:
            vmx = t.fresh("vmx")     # B's coordinates read, lane by lane: compared once a row
            t(f"{vmx} = scf.for %pa = {alo} to {ahi} step %c1 iter_args(%vma = {v['zc']}) -> ({v['vc']}) {{")
            kv = t.load_index("%A_crd", "%pa", fa.crd_width)
            okk = t.op(f"arith.cmpi ult, {kv}, %kn : index")

            def entry() -> str:
                a = t.op(f"memref.load %A_val[%pa] : memref<?x{T}>")
                if plan.scale is not None:      # the constant factor, once per A entry (as SpGEMM)
                    kind = "complex.constant" if row.kind == "complex" else "arith.constant"
                    a = t.op(arith(row, "*", t.op(f"{kind} {plan.scale} : {T}"), a))
                # prefetch B's row of A's entry PREFETCH_AHEAD ahead (clamped to A's last entry, B's rows)
                nx = t.op(f"arith.addi %pa, {t.op(f'arith.constant {PREFETCH_AHEAD} : index')} : index")
                nx2 = t.op(f"arith.minui {nx}, {t.op('arith.subi %anz, %c1 : index')} : index")
                kx = t.op(f"arith.minui {t.load_index('%A_crd', nx2, fa.crd_width)}, "
                          f"{t.op('arith.subi %kn, %c1 : index')} : index")
                bn = t.load_index("%B_pos", kx, fb.pos_width)
                t(f"memref.prefetch %B_crd[{bn}], read, locality<3>, data : memref<?x{ity(fb.crd_width)}>")
                blo = t.load_index("%B_pos", kv, fb.pos_width)
                bhi = t.load_index("%B_pos", t.op(f"arith.addi {kv}, %c1 : index"), fb.pos_width)
                return _b_row(t, plan, row, fb, MT, a, blo, bhi, nm1, lanes, v, "%vma", test)

            def bad() -> str:
                t(set_flag("%one32", "%flag"))
                return "%vma"
            t(f"scf.yield {if_yield(t, okk, v['vc'], entry, bad)} : {v['vc']}")
            t("}")
            return vmx

        # which lanes of a chunk of B are in M's row: a short row's coordinates compared with
        # them (COMPARE_TIERS), a longer one's stamps gathered from the marker
        ln = t.op(f"arith.subi {mhi}, {mlo} : index")

        def tier(q: int) -> str:
            if q == len(COMPARE_TIERS):
                return a_loop(_in_marker(t, v, MT))
            short = t.op(f"arith.cmpi ule, {ln}, {t.op(f'arith.constant {COMPARE_TIERS[q]} : index')} : index")
            return if_yield(t, short, v["vc"], lambda: a_loop(_in_row(t, v, fm, mlo, mhi, COMPARE_TIERS[q])),
                            lambda: tier(q + 1))
        vmx = tier(0)
        CT = v["CT"]
        mxc = t.op(f"vector.reduction <maxui>, {vmx} : {v['vc']} into {CT}")
        mx = t.op(f"arith.index_castui {mxc} : {CT} to index")
        t(f"scf.if {t.op(f'arith.cmpi uge, {mx}, %n : index')} {{")
        t(set_flag("%one32", "%flag"))
        t("}")
        cnt = t.fresh("cnt")
        t(f"{cnt} = scf.for %p = {mlo} to {mhi} step %c1 iter_args(%c = %c0) -> (index) {{")
        h = t.op("memref.load %hit[%p] : memref<?xi8>")
        hx = t.op(f"arith.index_castui {h} : i8 to index")
        t(f"scf.yield {t.op(f'arith.addi %c, {hx} : index')} : index")
        t("}")
        return cnt
    res = if_yield(t, go, "index", products, lambda: "%c0")
    t(f"return {res} : index")
    pm, cm, pa, ca, pb, cb = (ity(w) for w in (fm.pos_width, fm.crd_width, fa.pos_width, fa.crd_width,
                                                  fb.pos_width, fb.crd_width))
    sig = (f"func.func private @masked_row(%i: index, %base: index, %mark: memref<?x{MT}>, %acc: memref<?x{T}>, "
           f"%hit: memref<?xi8>, %n: index, %kn: index, %anz: index, %flag: !llvm.ptr, "
           f"%M_pos: memref<?x{pm}>, %M_crd: memref<?x{cm}>, %A_pos: memref<?x{pa}>, %A_crd: memref<?x{ca}>, "
           f"%A_val: memref<?x{T}>, %B_pos: memref<?x{pb}>, %B_crd: memref<?x{cb}>, %B_val: memref<?x{T}>) -> index {{")
    return function(sig, t.lines)


def _blocks(t: Text, name: str, pos: str, width: int, m: str, nb1: str, weight: int = 1) -> None:
    """``name[b]`` = ``weight * pos[min(b * ROWS_PER_BLOCK, m)]`` for the ``nb1`` block bounds:
    a block's stored entries (times ``weight``), the measure of work the thread count reads
    (``passes/rewrites.py thread_count``: one unit is about an entry of SpMV)."""
    t(f"{name} = memref.alloc({nb1}) : memref<?xindex>")
    w = t.op(f"arith.constant {weight} : index") if weight != 1 else None
    t(f"scf.for %b = %c0 to {nb1} step %c1 {{")
    r = t.op(f"arith.minui {t.op('arith.muli %b, %cR : index')}, {m} : index")
    v = t.load_index(pos, r, width)
    t(f"  memref.store {t.op(f'arith.muli {v}, {w} : index') if w else v}, {name}[%b] : memref<?xindex>")
    t("}")


def _block_rows(t: Text, blk: str, m: str) -> tuple[str, str, str, str]:
    """At the top of a loop over blocks ``%b``: the block's first and last stored entries
    (read from ``blk``) and its rows ``[r0, r1)``."""
    b1 = t.op("arith.addi %b, %c1 : index")
    lo = t.op(f"memref.load {blk}[%b] : memref<?xindex>")
    hi = t.op(f"memref.load {blk}[{b1}] : memref<?xindex>")
    r0 = t.op("arith.muli %b, %cR : index")
    r1 = t.op(f"arith.minui {t.op(f'arith.addi {r0}, %cR : index')}, {m} : index")
    return lo, hi, r0, r1


def emit(plan: Plan, formats: dict, out: Format, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module (module docstring); ``formats`` by operand name (widths resolved),
    ``parallel``: the blocks of rows in ``scf.parallel`` (else serial ``scf.for``)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fm, fa, fb = (plan.format_of(r, formats) for r in ("M", "A", "B"))
    MT = ity(fm.pos_width)
    decl = huge_page_decls(facts) + (list(OMP_DECLS) if parallel else [])
    if parallel:    # the thread count sc.set_num_threads writes (passes/rewrites.py thread_count)
        decl.append(f"llvm.mlir.global external @{NUM_THREADS_GLOBAL}(1 : i32) {{addr_space = 0 : i32}} : i32")
    # the vector loop's lanes: one register of B's coordinates (16 x i32 with AVX-512)
    decl += _row_function(plan, fm, fa, fb, row, facts.vector_bytes * 8 // fb.crd_width) + [FLAG_DECL]
    pw, cw = out.pos_width, out.crd_width
    m, n, kn = f"%size_{plan.i}", f"%size_{plan.j}", f"%size_{plan.k}"
    t = Text()
    t.index_constants()
    t("%cm1 = arith.constant -1 : index")
    t("%zero8 = arith.constant 0 : i8")
    t("%one32 = arith.constant 1 : i32")
    t(f"%cR = arith.constant {ROWS_PER_BLOCK} : index")
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    # this call's out-of-range flag (runtime/entry.py), set by a bad coordinate of M, A or B
    flag = t.op(FLAG_CALL)
    mcap = t.op(f"arith.maxui {t.load_index('%M_pos', m, fm.pos_width)}, %c1 : index")
    t(f"%acc = memref.alloc({mcap}) : memref<?x{T}>")       # by M's positions: the sums, the hits
    t(f"%hit = memref.alloc({mcap}) : memref<?xi8>")
    anz = t.load_index("%A_pos", m, fa.pos_width)
    nt = marker_workspaces(t, n, T, parallel, None, MT)
    t(f"%C_pos = memref.alloc({m1}) : memref<?x{ity(pw)}>")
    t.store_index("%c0", "%C_pos", "%c0", pw)
    nb1 = t.op(f"arith.addi {t.op(f'arith.ceildivui {m}, %cR : index')}, %c1 : index")
    nb = t.op(f"arith.subi {nb1}, %c1 : index")
    _blocks(t, "%ablk", "%A_pos", fa.pos_width, m, nb1, WORK_PER_A_ENTRY)
    args = "%M_pos, %M_crd, %A_pos, %A_crd, %A_val, %B_pos, %B_crd, %B_val"
    types = ", ".join(f"memref<?x{ty}>" for ty in (ity(fm.pos_width), ity(fm.crd_width), ity(fa.pos_width),
                                                    ity(fa.crd_width), T, ity(fb.pos_width), ity(fb.crd_width), T))

    def rows(base: str, mark: str, r0: str, r1: str) -> None:
        t(f"scf.for %i = {r0} to {r1} step %c1 {{")
        c = t.op(f"func.call @masked_row(%i, {base}, {mark}, %acc, %hit, {n}, {kn}, {anz}, {flag}, {args}) : "
                 f"(index, index, memref<?x{MT}>, memref<?x{T}>, memref<?xi8>, index, index, index, !llvm.ptr, "
                 f"{types}) -> index")
        t.store_index(c, "%C_pos", t.op("arith.addi %i, %c1 : index"), pw)
        t("}")

    # phase 1: each row's sums and count, a block of rows an iteration
    opening, closing = loop(parallel, "%b", "%c0", nb)
    t(opening)
    alo, ahi, r0, r1 = _block_rows(t, "%ablk", m)        # (the thread count follows A's entries)
    t(f"scf.if {t.op(f'arith.cmpi ult, {alo}, {ahi} : index')} {{")
    if parallel:
        tid = t.op(f"arith.index_cast {t.op('func.call @omp_get_thread_num() : () -> i32')} : i32 to index")
        ok = t.op(f"arith.cmpi ult, {tid}, {nt} : index")
        t(f"scf.if {ok} {{")
        rows(t.op(f"arith.muli {tid}, {n} : index"), "%mark", r0, r1)
        t("} else {")         # a thread past the workspaces allocated: its own, for this block
        own = t.op(f"memref.alloc({t.op(f'arith.maxui {n}, %c1 : index')}) : memref<?x{MT}>")
        fill = t.op(f"arith.constant -1 : {MT}")
        t(f"scf.for %y = %c0 to {n} step %c1 {{")
        t(f"  memref.store {fill}, {own}[%y] : memref<?x{MT}>")
        t("}")
        rows("%c0", own, r0, r1)
        t(f"memref.dealloc {own} : memref<?x{MT}>")
        t("}")
    else:
        rows("%c0", "%mark", r0, r1)
    t("} else {")     # no entry of A in the block's rows: nothing stored; M's coordinates still checked
    t(f"scf.for %i = {r0} to {r1} step %c1 {{")
    t.store_index("%c0", "%C_pos", t.op("arith.addi %i, %c1 : index"), pw)
    t("}")
    mlo, mhi = t.load_index("%M_pos", r0, fm.pos_width), t.load_index("%M_pos", r1, fm.pos_width)
    mx = t.fresh("mx")
    t(f"{mx} = scf.for %p = {mlo} to {mhi} step %c1 iter_args(%m0 = %c0) -> (index) {{")
    t("  memref.store %zero8, %hit[%p] : memref<?xi8>")
    jv = t.load_index("%M_crd", "%p", fm.crd_width)
    t(f"scf.yield {t.op(f'arith.maxui %m0, {jv} : index')} : index")
    t("}")
    bad = t.op(f"arith.andi {t.op(f'arith.cmpi ult, {mlo}, {mhi} : index')}, "
               f"{t.op(f'arith.cmpi uge, {mx}, {n} : index')} : i1")
    t(f"scf.if {bad} {{")
    t(set_flag("%one32", flag))
    t("}")
    t("}")
    t(closing)
    nnz = prefix_sum(t, m, pw)
    alloc_entries(t, t.op(f"arith.maxui {nnz}, %c1 : index"), out, row, facts)
    # phase 2: each block's flagged entries, in M's order (rows are consecutive in M and C)
    _blocks(t, "%mblk", "%M_pos", fm.pos_width, m, nb1)
    t(opening)
    lo, hi, r0, _ = _block_rows(t, "%mblk", m)       # (the thread count follows M's entries)
    w0 = t.load_index("%C_pos", r0, pw)
    w = t.fresh("w")
    t(f"{w} = scf.for %p = {lo} to {hi} step %c1 iter_args(%w = {w0}) -> (index) {{")
    got = t.op(f"arith.cmpi ne, {t.op('memref.load %hit[%p] : memref<?xi8>')}, %zero8 : i8")

    def store() -> str:
        t.store_index(t.load_index("%M_crd", "%p", fm.crd_width), "%C_crd", "%w", cw)
        mv = t.op(f"memref.load %M_val[%p] : memref<?x{T}>")
        s = t.op(f"memref.load %acc[%p] : memref<?x{T}>")
        t(f"  memref.store {t.op(arith(row, '*', mv, s))}, %C_val[%w] : memref<?x{T}>")
        return t.op("arith.addi %w, %c1 : index")
    t(f"scf.yield {if_yield(t, got, 'index', store, lambda: '%w')} : index")
    t("}")
    t(closing)
    t("memref.dealloc %ablk : memref<?xindex>")
    t("memref.dealloc %mblk : memref<?xindex>")
    t(f"memref.dealloc %mark : memref<?x{MT}>")
    t(f"memref.dealloc %acc : memref<?x{T}>")
    t("memref.dealloc %hit : memref<?xi8>")
    return_csr(t, m, n, m1, nnz, out, T)
    params = operand_params(plan, formats, T)
    crd_arg = next(q for q, prm in enumerate(params) if prm.startswith("%M_crd:"))
    attrs = f"{SELF_CHECKED} = array<i64: {crd_arg}>, {PARALLEL_CHUNK} = {BLOCKS_PER_CHUNK} : i64"
    return module(decl, kernel_head(params, csr_results(out, T), attrs), t.lines)
