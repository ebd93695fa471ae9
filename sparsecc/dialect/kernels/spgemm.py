"""SpGEMM with CSR operands and a CSR result, hand-written: ``C[i,j] = sum[k](A[i,k] * B[k,j])``.

(An operand stored CSC and read transposed - ``A[k,i]`` with ``i`` outer, ``B[j,k]`` with
``k`` outer - has the same buffers as a CSR one in the order of the product and is served
the same.)

MLIR 22's sparsifier never parallelizes a loop that writes a sparse output, and a sparse
result with a reduction inside goes through access-pattern expansion and a sort of every
row's inserted coordinates.  This kernel is a two-phase Gustavson product.  Phase 1
counts each row's distinct columns with a dense marker (one per thread, stamped with the
row, so never cleared), a prefix sum gives the positions; phase 2 fills each row with a
dense accumulator (one per thread) whose marker is a per-thread two-level bitmap (clear
between rows), puts the row's coordinates in order (insertion sort up to ``INSERTION_MAX``
entries; else the set bits of the bitmap read in order, gathering the values as they come,
when its summary words are few; else ``sparse_tensor.sort`` of the row's entries) and
gathers the values.  Both phases prefetch the row of B that A's entry ``PREFETCH_AHEAD``
ahead will read; on one thread the values are stored non-temporally where the target has
such stores (x86-64: :attr:`sparsecc.kernel_abi.TargetFacts.nontemporal_stores`).  The
result is canonical (sorted, no duplicates); like the sparsifier's kernel it stores every
entry the pattern has, an entry whose terms cancel to zero included.

Each row is computed by one thread in a fixed order (``A``'s entries, then ``B``'s row), so
the result does not depend on the thread count, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ... import dtypes as dt
from ...expr import Statement
from ...formats import Format
from ...kernel_abi import NUM_THREADS_GLOBAL, TargetFacts
from .emit import (OMP_DECLS, Text, alloc_entries, arith, csr_results, function, huge_page_decls, if_yield, ity,
                   kernel_head, loop, module, operand_params, prefix_sum, return_csr, store_maybe_nontemporal,
                   marker_workspaces)
from .recognize import RolePlan, csr_product, scale_literal, stored_order

#: a row of at most this many entries is put in order by insertion sort
INSERTION_MAX = 32
#: a longer row is read in order from its bitmap when its summary words (4096 columns each)
#: number at most this many per entry; else it is heap sorted
SCAN_WORDS_PER_ENTRY = 4
#: the B row prefetched is that of A's entry this many ahead in the row
PREFETCH_AHEAD = 2
# On one thread the result's values are stored non-temporally where the target has such
# stores (x86-64: ``movnt``, then one ``sfence`` before the kernel returns): they are written
# once, and a cache line fill for each of them was 6-9% of the kernel's time.  With more
# threads in the team the stores stay ordinary (another thread's weakly ordered stores would
# need a fence before the join).


@dataclass(frozen=True)
class Plan(RolePlan):
    """A recognised SpGEMM (roles ``A``, ``B``): ``a_first``: A's factor is the left one of
    the product."""

    i: str
    j: str
    k: str
    a_first: bool = True
    a_transposed: bool = False      # A's operand is read as A[k,i]: CSR of its transpose built in the kernel
    scale: str | None = None        # the constant factor's MLIR literal (``2 * A[i,k] * B[k,j]``)


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written SpGEMM for this specialization, or None (the sparsifier's kernel)."""
    p = csr_product(stmt, formats, dtypes, out_format, scale_ok=True)
    if p is None or len(p.factors) != 2:
        return None
    i, j, k = p.i, p.j, p.k
    scale = scale_literal(p.scale, dtypes[0]) if p.scale else None
    if p.scale and scale is None:
        return None
    f0, f1 = p.factors
    for a, b, first in ((f0, f1, True), (f1, f0, False)):
        # A's buffers store (i, k) (CSR of A[i,k], or CSC of A[k,i]: the same buffers) or
        # (k, i) (a CSR operand read transposed, A[k,i]: the kernel transposes it first, in
        # O(entries), as SciPy's A.T @ B does); B's store (k, j)
        ia, ib = stored_order(a, p.formats[a.tensor]), stored_order(b, p.formats[b.tensor])
        if ib == (k, j) and ia in ((i, k), (k, i)):
            return Plan("spgemm", (("A", a.tensor), ("B", b.tensor)), p.index_order, i, j, k, a_first=first,
                        a_transposed=ia == (k, i), scale=scale)
    return None


def _prefetch_next(t: Text, hi: str, fa: Format, fb: Format, T: str | None) -> None:
    """Prefetch the B row of A's entry ``PREFETCH_AHEAD`` ahead (clamped to A's last entry,
    ``%anz`` - 1: across the row's end, as a thread takes the next rows next): B's rows are
    visited in random order, and the product loop stalled on their first loads."""
    c2 = t.op(f"arith.constant {PREFETCH_AHEAD} : index")
    nx = t.op(f"arith.addi %p, {c2} : index")
    last = t.op("arith.subi %anz, %c1 : index")
    nx2 = t.op(f"arith.minui {nx}, {last} : index")
    kn = t.load_index("%A_crd", nx2, fa.crd_width)
    bn = t.load_index("%B_pos", kn, fb.pos_width)
    t(f"memref.prefetch %B_crd[{bn}], read, locality<3>, data : memref<?x{ity(fb.crd_width)}>")
    if T is not None:
        t(f"memref.prefetch %B_val[{bn}], read, locality<3>, data : memref<?x{T}>")


def _row_functions(plan: Plan, fa: Format, fb: Format, out: Format, dtype: str) -> list[str]:
    """``@count_row`` (phase 1) and ``@fill_row`` (phase 2) of SpGEMM: one row ``i`` with the
    marker / accumulator slice at ``base`` (a thread's own)."""
    row = dt.TABLE[dtype]
    T = row.storage
    pa, ca, pb, cb = (ity(fa.pos_width), ity(fa.crd_width), ity(fb.pos_width), ity(fb.crd_width))
    co = ity(out.crd_width)
    # ---- count
    t = Text()
    t.index_constants()
    t.n = 100
    i1 = t.op("arith.addi %i, %c1 : index")
    lo = t.load_index("%A_pos", "%i", fa.pos_width)
    hi = t.load_index("%A_pos", i1, fa.pos_width)
    t(f"%cnt = scf.for %p = {lo} to {hi} step %c1 iter_args(%c = %c0) -> (index) {{")
    kv = t.load_index("%A_crd", "%p", fa.crd_width)
    _prefetch_next(t, hi, fa, fb, None)
    k1 = t.op(f"arith.addi {kv}, %c1 : index")
    blo = t.load_index("%B_pos", kv, fb.pos_width)
    bhi = t.load_index("%B_pos", k1, fb.pos_width)
    t(f"%c2 = scf.for %q = {blo} to {bhi} step %c1 iter_args(%cc = %c) -> (index) {{")
    jv = t.load_index("%B_crd", "%q", fb.crd_width)
    at = t.op(f"arith.addi %base, {jv} : index")
    mk = t.op(f"memref.load %mark[{at}] : memref<?xindex>")
    new = t.op(f"arith.cmpi ne, {mk}, %stamp : index")

    def stamp() -> str:
        t(f"  memref.store %stamp, %mark[{at}] : memref<?xindex>")
        return t.op("arith.addi %cc, %c1 : index")
    res = if_yield(t, new, "index", stamp, lambda: "%cc")
    t(f"scf.yield {res} : index")
    t("}")
    t("scf.yield %c2 : index")
    t("}")
    t("return %cnt : index")
    count = (f"func.func private @count_row(%i: index, %stamp: index, %base: index, %mark: memref<?xindex>, %anz: index, "
             f"%A_pos: memref<?x{pa}>, %A_crd: memref<?x{ca}>, %B_pos: memref<?x{pb}>, "
             f"%B_crd: memref<?x{cb}>) -> index {{")
    fns = function(count, t.lines)
    # ---- fill
    t = Text()
    t.index_constants()
    t.n = 200
    i1 = t.op("arith.addi %i, %c1 : index")
    lo = t.load_index("%A_pos", "%i", fa.pos_width)
    hi = t.load_index("%A_pos", i1, fa.pos_width)
    t("%c6 = arith.constant 6 : index")
    t("%c63 = arith.constant 63 : index")
    t("%one = arith.constant 1 : i64")
    t("%zero = arith.constant 0 : i64")
    t("%false = arith.constant false")
    t(f"%end, %mn, %mx = scf.for %p = {lo} to {hi} step %c1 iter_args(%w = %start, %lo0 = %n, %hi0 = %c0) "
      f"-> (index, index, index) {{")
    kv = t.load_index("%A_crd", "%p", fa.crd_width)
    _prefetch_next(t, hi, fa, fb, T)
    a = t.op(f"memref.load %A_val[%p] : memref<?x{T}>")
    if plan.scale is not None:      # the constant factor, once per A entry
        kind = "complex.constant" if row.kind == "complex" else "arith.constant"
        a = t.op(arith(row, "*", t.op(f"{kind} {plan.scale} : {T}"), a))
    k1 = t.op(f"arith.addi {kv}, %c1 : index")
    blo = t.load_index("%B_pos", kv, fb.pos_width)
    bhi = t.load_index("%B_pos", k1, fb.pos_width)
    t(f"%w2, %lo2, %hi2 = scf.for %q = {blo} to {bhi} step %c1 iter_args(%ww = %w, %lo1 = %lo0, %hi1 = %hi0) "
      f"-> (index, index, index) {{")
    jv = t.load_index("%B_crd", "%q", fb.crd_width)
    b = t.op(f"memref.load %B_val[%q] : memref<?x{T}>")
    prod = t.op(arith(row, "*", a, b) if plan.a_first else arith(row, "*", b, a))
    at = t.op(f"arith.addi %base, {jv} : index")
    # this column's bit in the thread's bitmap: the row's marker (its bits are clear between
    # rows; a few KiB, where a marker per column was as large as the accumulator) and, read
    # back in column order below, the row's coordinates in order
    wd = t.op(f"arith.shrui {jv}, %c6 : index")
    wa = t.op(f"arith.addi %wbase, {wd} : index")
    bt = t.op(f"arith.andi {jv}, %c63 : index")
    bt64 = t.op(f"arith.index_cast {bt} : index to i64")
    bit = t.op(f"arith.shli %one, {bt64} : i64")
    word = t.op(f"memref.load %bm[{wa}] : memref<?xi64>")
    has = t.op(f"arith.andi {word}, {bit} : i64")
    new = t.op(f"arith.cmpi eq, {has}, %zero : i64")
    r1, r2, r3 = t.fresh("r"), t.fresh("r"), t.fresh("r")

    def first_time() -> str:
        return _first_in_row(t, word, bit, wa, wd, prod, at, jv, out, T)

    def again() -> str:
        old = t.op(f"memref.load %acc[{at}] : memref<?x{T}>")
        s = t.op(arith(row, "+", old, prod))
        t(f"  memref.store {s}, %acc[{at}] : memref<?x{T}>")
        return "%ww, %lo1, %hi1"
    if_yield(t, new, "index, index, index", first_time, again, name=f"{r1}, {r2}, {r3}")
    t(f"scf.yield {r1}, {r2}, {r3} : index, index, index")
    t("}")
    t("scf.yield %w2, %lo2, %hi2 : index, index, index")
    t("}")
    _put_in_order(t, out, T)
    t("return")
    fill = (f"func.func private @fill_row(%i: index, %base: index, %start: index, "
            f"%acc: memref<?x{T}>, %wbase: index, %bm: memref<?xi64>, %sbase: index, %sm: memref<?xi64>, %n: index, %anz: index, %nt: i1, "
            f"%A_pos: memref<?x{pa}>, %A_crd: memref<?x{ca}>, %A_val: memref<?x{T}>, "
            f"%B_pos: memref<?x{pb}>, %B_crd: memref<?x{cb}>, %B_val: memref<?x{T}>, "
            f"%C_crd: memref<?x{co}>, %C_val: memref<?x{T}>) {{")
    fns += function(fill, t.lines)
    return fns


def _first_in_row(t: Text, word: str, bit: str, wa: str, wd: str, prod: str, at: str, jv: str, out: Format,
                  T: str) -> str:
    """A column's first product in the row: its bits set, its value and coordinate stored;
    yields the next write position and the row's new min/max column."""
    word2 = t.op(f"arith.ori {word}, {bit} : i64")
    t(f"memref.store {word2}, %bm[{wa}] : memref<?xi64>")
    t(f"  memref.store {prod}, %acc[{at}] : memref<?x{T}>")
    t.store_index(jv, "%C_crd", "%ww", out.crd_width)
    # and the word's bit in the summary (bit w of summary word w / 64: bitmap word w is in use)
    sw = t.op(f"arith.shrui {wd}, %c6 : index")
    sa = t.op(f"arith.addi %sbase, {sw} : index")
    sbt = t.op(f"arith.andi {wd}, %c63 : index")
    sbt64 = t.op(f"arith.index_cast {sbt} : index to i64")
    sbit = t.op(f"arith.shli %one, {sbt64} : i64")
    sword = t.op(f"memref.load %sm[{sa}] : memref<?xi64>")
    sword2 = t.op(f"arith.ori {sword}, {sbit} : i64")
    t(f"memref.store {sword2}, %sm[{sa}] : memref<?xi64>")
    inc = t.op("arith.addi %ww, %c1 : index")
    mn = t.op(f"arith.minui %lo1, {jv} : index")
    mx = t.op(f"arith.maxui %hi1, {jv} : index")
    return f"{inc}, {mn}, {mx}"


def _put_in_order(t: Text, out: Format, T: str) -> None:
    """The end of ``@fill_row``: the row's coordinates put in order, its values gathered."""
    co = ity(out.crd_width)
    # the row's coordinates in order: a row of up to 32 entries by insertion sort; a row whose
    # summary words are few (at most 4 per entry; one summary word covers 4096 columns) by
    # reading the set bits of the summary, then of the bitmap words it marks, in order;
    # else heap sort
    ln = t.op("arith.subi %end, %start : index")
    c32 = t.op(f"arith.constant {INSERTION_MAX} : index")
    small = t.op(f"arith.cmpi ule, {ln}, {c32} : index")
    c12 = t.op("arith.constant 12 : index")
    wlo = t.op(f"arith.shrui %mn, {c12} : index")
    whi = t.op(f"arith.shrui %mx, {c12} : index")
    whi1 = t.op(f"arith.addi {whi}, %c1 : index")
    span = t.op(f"arith.subi {whi1}, {wlo} : index")
    c4 = t.op(f"arith.constant {SCAN_WORDS_PER_ENTRY} : index")
    lim = t.op(f"arith.muli {ln}, {c4} : index")
    dense = t.op(f"arith.cmpi ule, {span}, {lim} : index")
    wide = t.op(f"arith.cmpi ugt, {span}, {lim} : index")
    dirty = t.op(f"arith.ori {small}, {wide} : i1")
    t(f"scf.if {small} {{")
    p1 = t.op("arith.addi %start, %c1 : index")
    t(f"scf.for %p = {p1} to %end step %c1 {{")
    key = t.op(f"memref.load %C_crd[%p] : memref<?x{co}>")
    q = t.fresh("q")
    t(f"{q} = scf.while (%q0 = %p) : (index) -> index {{")
    gt = t.op("arith.cmpi ugt, %q0, %start : index")

    def later() -> str:
        qm = t.op("arith.subi %q0, %c1 : index")
        prev = t.op(f"memref.load %C_crd[{qm}] : memref<?x{co}>")
        return t.op(f"arith.cmpi sgt, {prev}, {key} : {co}")
    cond = if_yield(t, gt, "i1", later, lambda: "%false")
    t(f"scf.condition({cond}) %q0 : index")
    t("} do {")
    t("^bb0(%q1: index):")
    qm = t.op("arith.subi %q1, %c1 : index")
    prev = t.op(f"memref.load %C_crd[{qm}] : memref<?x{co}>")
    t(f"  memref.store {prev}, %C_crd[%q1] : memref<?x{co}>")
    t(f"  scf.yield {qm} : index")
    t("}")
    t(f"memref.store {key}, %C_crd[{q}] : memref<?x{co}>")
    t("}")
    t("} else {")
    t(f"scf.if {dense} {{")
    t(f"%wend = scf.for %sx = {wlo} to {whi1} step %c1 iter_args(%w = %start) -> (index) {{")
    sa = t.op("arith.addi %sbase, %sx : index")
    sword = t.op(f"memref.load %sm[{sa}] : memref<?xi64>")
    snz = t.op(f"arith.cmpi ne, {sword}, %zero : i64")
    sres = if_yield(t, snz, "index", lambda: _read_summary_word(t, sa, sword, out, T), lambda: "%w")
    t(f"scf.yield {sres} : index")
    t("}")
    t("} else {")
    sub = t.op(f"memref.subview %C_crd[%start] [{ln}] [1] : memref<?x{co}> to memref<?x{co}, strided<[1], offset: ?>>")
    t(f"sparse_tensor.sort heap_sort {ln}, {sub} {{perm_map = affine_map<(d0) -> (d0)>, ny = 0 : index}} "
      f": memref<?x{co}, strided<[1], offset: ?>>")
    t("}")
    t("}")
    # clear the bits the row set (none are left where the bitmap was read) and gather the
    # values (the bitmap's reading gathered them as it went)
    t(f"scf.if {dirty} {{")
    t("scf.for %p = %start to %end step %c1 {")
    jv = t.load_index("%C_crd", "%p", out.crd_width)
    wd = t.op(f"arith.shrui {jv}, %c6 : index")
    wa = t.op(f"arith.addi %wbase, {wd} : index")
    t(f"  memref.store %zero, %bm[{wa}] : memref<?xi64>")
    sw = t.op(f"arith.shrui {wd}, %c6 : index")
    sa = t.op(f"arith.addi %sbase, {sw} : index")
    t(f"  memref.store %zero, %sm[{sa}] : memref<?xi64>")
    at = t.op(f"arith.addi %base, {jv} : index")
    v = t.op(f"memref.load %acc[{at}] : memref<?x{T}>")
    store_maybe_nontemporal(t, "%nt", v, "%C_val", "%p", f"memref<?x{T}>")
    t("}")
    t("}")


def _read_summary_word(t: Text, sa: str, sword: str, out: Format, T: str) -> str:
    """One nonzero summary word of the row: its bitmap words' set bits in order, each a
    coordinate written and its value gathered; yields the next write position."""
    t(f"  memref.store %zero, %sm[{sa}] : memref<?xi64>")
    sxb = t.op("arith.shli %sx, %c6 : index")
    sgot = t.fresh("sgot")
    t(f"{sgot}:2 = scf.while (%u = {sword}, %wu = %w) : (i64, index) -> (i64, index) {{")
    smore = t.op("arith.cmpi ne, %u, %zero : i64")
    t(f"scf.condition({smore}) %u, %wu : i64, index")
    t("} do {")
    t("^bb0(%u1: i64, %wu1: index):")
    stz = t.op("math.cttz %u1 : i64")
    stzi = t.op(f"arith.index_cast {stz} : i64 to index")
    x = t.op(f"arith.addi {sxb}, {stzi} : index")
    wa = t.op(f"arith.addi %wbase, {x} : index")
    word = t.op(f"memref.load %bm[{wa}] : memref<?xi64>")
    t(f"  memref.store %zero, %bm[{wa}] : memref<?xi64>")
    xb = t.op(f"arith.shli {x}, %c6 : index")
    got = t.fresh("got")
    t(f"{got}:2 = scf.while (%v = {word}, %wv = %wu1) : (i64, index) -> (i64, index) {{")
    more = t.op("arith.cmpi ne, %v, %zero : i64")
    t(f"scf.condition({more}) %v, %wv : i64, index")
    t("} do {")
    t("^bb0(%v1: i64, %w1: index):")
    tz = t.op("math.cttz %v1 : i64")
    tzi = t.op(f"arith.index_cast {tz} : i64 to index")
    j = t.op(f"arith.addi {xb}, {tzi} : index")
    t.store_index(j, "%C_crd", "%w1", out.crd_width)
    jat = t.op(f"arith.addi %base, {j} : index")        # its value, gathered here
    jv_ = t.op(f"memref.load %acc[{jat}] : memref<?x{T}>")
    # written once and not read again here: on one thread without a cache line fill
    # (non-temporal; another thread reading them would need a fence first, so not there)
    store_maybe_nontemporal(t, "%nt", jv_, "%C_val", "%w1", f"memref<?x{T}>")
    vm1 = t.op("arith.subi %v1, %one : i64")
    v2 = t.op(f"arith.andi %v1, {vm1} : i64")
    w3 = t.op("arith.addi %w1, %c1 : index")
    t(f"  scf.yield {v2}, {w3} : i64, index")
    t("}")
    um1 = t.op("arith.subi %u1, %one : i64")
    u2 = t.op(f"arith.andi %u1, {um1} : i64")
    t(f"  scf.yield {u2}, {got}#1 : i64, index")
    t("}")
    return f"{sgot}#1"


def _transposed(fa: Format) -> Format:
    """The format of the CSR transpose the kernel builds of A (64-bit coordinates: A's rows)."""
    return replace(fa, crd_width=64)


def _transpose_a(t: Text, fa: Format, m: str, rows: str, T: str) -> Format:
    """A CSR operand read as ``A[k,i]``: its transpose as CSR (``m`` rows, A's columns),
    built serially in O(entries + m) by counting its columns, a prefix sum and a scatter of
    its rows in order (each row of the transpose sorted); the buffers' names become
    ``%A_pos``, ``%A_crd``, ``%A_val`` from here on (the operand's are renamed ``%A0_*`` in the
    signature).  Returns the transpose's format."""
    ft = _transposed(fa)
    pw = fa.pos_width
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    nnz = t.load_index("%A0_pos", rows, pw)
    n1 = t.op(f"arith.maxui {nnz}, %c1 : index")
    t(f"%A_pos = memref.alloc({m1}) : memref<?x{ity(pw)}>")
    t(f"%A_crd = memref.alloc({n1}) : memref<?xi64>")
    t(f"%A_val = memref.alloc({n1}) : memref<?x{T}>")
    t(f"%A_next = memref.alloc({m1}) : memref<?xindex>")
    t(f"scf.for %x = %c0 to {m1} step %c1 {{")
    t("  memref.store %c0, %A_next[%x] : memref<?xindex>")
    t("}")
    t(f"scf.for %x = %c0 to {nnz} step %c1 {{")     # the column counts, one ahead
    c = t.load_index("%A0_crd", "%x", fa.crd_width)
    c1 = t.op(f"arith.addi {c}, %c1 : index")
    u = t.op(f"memref.load %A_next[{c1}] : memref<?xindex>")
    t(f"  memref.store {t.op(f'arith.addi {u}, %c1 : index')}, %A_next[{c1}] : memref<?xindex>")
    t("}")
    t(f"scf.for %x = %c0 to {m} step %c1 {{")       # positions; %A_next[c]: column c's next slot
    x1 = t.op("arith.addi %x, %c1 : index")
    u = t.op("memref.load %A_next[%x] : memref<?xindex>")
    w = t.op(f"memref.load %A_next[{x1}] : memref<?xindex>")
    t(f"  memref.store {t.op(f'arith.addi {u}, {w} : index')}, %A_next[{x1}] : memref<?xindex>")
    t.store_index(u, "%A_pos", "%x", pw)
    t("}")
    t.store_index(nnz, "%A_pos", m, pw)
    t(f"scf.for %r = %c0 to {rows} step %c1 {{")    # A's rows in order: each transposed row sorted
    r1 = t.op("arith.addi %r, %c1 : index")
    lo = t.load_index("%A0_pos", "%r", pw)
    hi = t.load_index("%A0_pos", r1, pw)
    ri = t.op("arith.index_cast %r : index to i64")
    t(f"scf.for %x = {lo} to {hi} step %c1 {{")
    c = t.load_index("%A0_crd", "%x", fa.crd_width)
    q = t.op(f"memref.load %A_next[{c}] : memref<?xindex>")
    t(f"  memref.store {ri}, %A_crd[{q}] : memref<?xi64>")
    v = t.op(f"memref.load %A0_val[%x] : memref<?x{T}>")
    t(f"  memref.store {v}, %A_val[{q}] : memref<?x{T}>")
    t(f"  memref.store {t.op(f'arith.addi {q}, %c1 : index')}, %A_next[{c}] : memref<?xindex>")
    t("}")
    t("}")
    t("memref.dealloc %A_next : memref<?xindex>")
    return ft


def emit(plan: Plan, formats: dict, out: Format, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module (module docstring); ``formats`` by operand name (widths resolved),
    ``parallel``: the rows in ``scf.parallel`` (else serial ``scf.for``)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fa = plan.format_of("A", formats)
    fb = plan.format_of("B", formats)
    decl = huge_page_decls(facts) + (list(OMP_DECLS) if parallel else [])
    params = operand_params(plan, formats, T)
    if plan.a_transposed:           # the operand's buffers; %A_* are its transpose's (_transpose_a)
        params = [q.replace("%A_", "%A0_", 1) if q.startswith("%A_") else q for q in params]
    head = kernel_head(params, csr_results(out, T))
    if parallel:    # the thread count sc.set_num_threads writes (passes/rewrites.py thread_count)
        decl.append(f"llvm.mlir.global external @{NUM_THREADS_GLOBAL}(1 : i32) {{addr_space = 0 : i32}} : i32")
    decl += _row_functions(plan, _transposed(fa) if plan.a_transposed else fa, fb, out, dtype)
    pa, ca, pb, cb = (ity(fa.pos_width), ity(fa.crd_width), ity(fb.pos_width), ity(fb.crd_width))
    pw, cw = out.pos_width, out.crd_width
    t = Text()
    t.index_constants()
    t("%cm1 = arith.constant -1 : index")
    m, n = f"%size_{plan.i}", f"%size_{plan.j}"
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    nt = marker_workspaces(t, n, T, parallel, "acc")   # per thread: a thread past them allocated its own per row
    c64 = t.op("arith.constant 64 : index")
    t("%zero64 = arith.constant 0 : i64")
    words = t.op(f"arith.ceildivui {n}, {c64} : index")
    wsize = t.op(f"arith.muli {nt}, {words} : index")
    wsize1 = t.op(f"arith.maxui {wsize}, %c1 : index")
    t(f"%bm = memref.alloc({wsize1}) : memref<?xi64>")
    t(f"scf.for %x = %c0 to {wsize} step %c1 {{")
    t("  memref.store %zero64, %bm[%x] : memref<?xi64>")
    t("}")
    swords = t.op(f"arith.ceildivui {words}, {c64} : index")
    ssize = t.op(f"arith.muli {nt}, {swords} : index")
    ssize1 = t.op(f"arith.maxui {ssize}, %c1 : index")
    t(f"%sm = memref.alloc({ssize1}) : memref<?xi64>")
    t(f"scf.for %x = %c0 to {ssize} step %c1 {{")
    t("  memref.store %zero64, %sm[%x] : memref<?xi64>")
    t("}")
    t(f"%C_pos = memref.alloc({m1}) : memref<?x{ity(pw)}>")
    t.store_index("%c0", "%C_pos", "%c0", pw)
    if plan.a_transposed:
        fa = _transpose_a(t, fa, m, f"%size_{plan.k}", T)
        pa, ca = ity(fa.pos_width), ity(fa.crd_width)
    anz = t.load_index("%A_pos", m, fa.pos_width)     # A's stored entries (prefetches stop there)
    args_count = f"%A_pos, %A_crd, %B_pos, %B_crd"
    types_count = f"memref<?x{pa}>, memref<?x{ca}>, memref<?x{pb}>, memref<?x{cb}>"

    def thread_slice(body):
        """``body(base, mark, acc, wbase, bm)`` with this thread's marker, accumulator and
        bitmap slices, or (a thread number past the ones allocated for) its own."""
        if not parallel:
            body("%c0", "%mark", "%acc", "%c0", "%bm", "%c0", "%sm")
            return
        tid0 = t.op("func.call @omp_get_thread_num() : () -> i32")
        tid = t.op(f"arith.index_cast {tid0} : i32 to index")
        ok = t.op(f"arith.cmpi ult, {tid}, {nt} : index")
        t(f"scf.if {ok} {{")
        base = t.op(f"arith.muli {tid}, {n} : index")
        wbase = t.op(f"arith.muli {tid}, {words} : index")
        sbase = t.op(f"arith.muli {tid}, {swords} : index")
        body(base, "%mark", "%acc", wbase, "%bm", sbase, "%sm")
        t("} else {")
        n1 = t.op(f"arith.maxui {n}, %c1 : index")
        own = t.op(f"memref.alloc({n1}) : memref<?xindex>")
        acc = t.op(f"memref.alloc({n1}) : memref<?x{T}>")
        w1 = t.op(f"arith.maxui {words}, %c1 : index")
        bm = t.op(f"memref.alloc({w1}) : memref<?xi64>")
        t(f"scf.for %y = %c0 to {n} step %c1 {{")
        t(f"  memref.store %cm1, {own}[%y] : memref<?xindex>")
        t("}")
        t(f"scf.for %y = %c0 to {words} step %c1 {{")
        t(f"  memref.store %zero64, {bm}[%y] : memref<?xi64>")
        t("}")
        s1 = t.op(f"arith.maxui {swords}, %c1 : index")
        smo = t.op(f"memref.alloc({s1}) : memref<?xi64>")
        t(f"scf.for %y = %c0 to {swords} step %c1 {{")
        t(f"  memref.store %zero64, {smo}[%y] : memref<?xi64>")
        t("}")
        body("%c0", own, acc, "%c0", bm, "%c0", smo)
        t(f"memref.dealloc {smo} : memref<?xi64>")
        t(f"memref.dealloc {own} : memref<?xindex>")
        t(f"memref.dealloc {acc} : memref<?x{T}>")
        t(f"memref.dealloc {bm} : memref<?xi64>")
        t("}")

    # phase 1: each row's count of distinct columns
    opening, closing = loop(parallel, "%i", "%c0", m)
    t(opening)
    i1 = t.op("arith.addi %i, %c1 : index")
    t.load_index("%A_pos", "%i", fa.pos_width)      # (the thread count follows A's entries)
    t.load_index("%A_pos", i1, fa.pos_width)

    def count(base, mark, acc, wbase, bm, sbase, sm):
        c = t.op(f"func.call @count_row(%i, %i, {base}, {mark}, {anz}, {args_count}) : "
                 f"(index, index, index, memref<?xindex>, index, {types_count}) -> index")
        t.store_index(c, "%C_pos", i1, pw)
    thread_slice(count)
    t(closing)
    nnz = prefix_sum(t, m, pw)
    cap = t.op(f"arith.maxui {nnz}, %c1 : index")
    alloc_entries(t, cap, out, row, facts)
    # phase 2: fill, sort, gather
    t(opening)
    i1 = t.op("arith.addi %i, %c1 : index")
    t.load_index("%A_pos", "%i", fa.pos_width)
    t.load_index("%A_pos", i1, fa.pos_width)
    start = t.load_index("%C_pos", "%i", pw)

    def fill(base, mark, acc, wbase, bm, sbase, sm):
        if parallel:    # the team is this thread alone
            nth = t.op("func.call @omp_get_num_threads() : () -> i32")
            nts = t.op(f"arith.cmpi eq, {nth}, {t.op('arith.constant 1 : i32')} : i32")
        else:
            nts = t.op("arith.constant true")
        if not facts.nontemporal_stores:
            nts = t.op("arith.constant false")
        t(f"func.call @fill_row(%i, {base}, {start}, {acc}, {wbase}, {bm}, {sbase}, {sm}, {n}, {anz}, {nts}, "
          f"%A_pos, %A_crd, %A_val, "
          f"%B_pos, %B_crd, %B_val, %C_crd, %C_val) : (index, index, index, "
          f"memref<?x{T}>, index, memref<?xi64>, index, memref<?xi64>, index, index, i1, memref<?x{pa}>, memref<?x{ca}>, memref<?x{T}>, memref<?x{pb}>, memref<?x{cb}>, "
          f"memref<?x{T}>, memref<?x{ity(cw)}>, memref<?x{T}>) -> ()")
    thread_slice(fill)
    t(closing)
    if facts.nontemporal_stores:     # this thread's non-temporal stores visible before the result is handed on
        t('llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()')
    t("memref.dealloc %mark : memref<?xindex>")
    t("memref.dealloc %bm : memref<?xi64>")
    t("memref.dealloc %sm : memref<?xi64>")
    t(f"memref.dealloc %acc : memref<?x{T}>")
    if plan.a_transposed:
        t(f"memref.dealloc %A_pos : memref<?x{pa}>")
        t(f"memref.dealloc %A_crd : memref<?x{ca}>")
        t(f"memref.dealloc %A_val : memref<?x{T}>")
    return_csr(t, m, n, m1, nnz, out, T)
    return module(decl, head, t.lines)
