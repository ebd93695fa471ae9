"""The masked product's sum, hand-written: ``s[] = sum[i,j,k](A[i,j] * B[j,k] * C[i,k])``
with A, B, C CSR (the einsum ``ij,jk,ik->``: triangle counting on a graph's lower triangle,
``L`` three times, never building ``L @ L``).

MLIR 22's sparsifier compiles this statement as one nest whose scalar reduction it never
parallelizes (the bench's triangle row ran as fast on 2 threads as on 1).  This kernel runs
the rows ``i`` in an ``scf.parallel``: each row stamps C's row ``i`` into a dense marker of
its thread (the row number as the stamp, so it is never cleared; C's values beside it),
then for each entry ``A[i,j]`` sums ``B[j,k] * C[i,k]`` over B's row ``j`` where the marker
has ``k`` (a ``select``, no branch), and multiplies that sum by ``A[i,j]``.  Each row's sum
goes to a vector of row sums, which is added up serially in row order at the end: each row
is summed by one thread in a fixed order, so the result does not depend on the thread
count, bit for bit.  The workspaces are per thread, the size of C's columns (a ``huge``
call keeps the sparsifier's kernel, as for SpGEMM: ``runtime/fast_paths.py``).  Only stored
entries are read; the kernel needs no sorted rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

from ... import dtypes as dt
from ...expr import Reduce, Statement
from ...formats import Format
from ...kernel_abi import NUM_THREADS_GLOBAL, TargetFacts
from .emit import OMP_DECLS, Text, arith, kernel_head, loop, marker_workspaces, module, operand_params, zero
from .recognize import PRODUCT_KINDS, RolePlan, factors, is_csr, one_kind, plain_sum


@dataclass(frozen=True)
class Plan(RolePlan):
    """A recognised masked sum (roles ``A`` [i,j], ``B`` [j,k], ``C`` [i,k])."""

    i: str
    j: str
    k: str


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written masked sum for this specialization, or None."""
    if stmt.indices or out_format is not None or len(formats) != 3 or not one_kind(dtypes, PRODUCT_KINDS):
        return None
    e = stmt.expr
    if not (isinstance(e, Reduce) and plain_sum(e, 3)):
        return None
    facs = factors(e.body)
    if facs is None or len(facs) != 3 or len({a.tensor for a in facs}) != 3:
        return None
    fmts = dict(zip(stmt.operands, formats))
    if not all(is_csr(fmts.get(a.tensor)) for a in facs):
        return None
    for a, b, c in permutations(facs):
        if len(a.indices) != 2 or len(b.indices) != 2 or len(c.indices) != 2:
            return None
        i, j = a.indices
        if b.indices[0] != j:
            continue
        k = b.indices[1]
        if c.indices == (i, k) and len({i, j, k}) == 3 and set(e.indices) == {i, j, k}:
            order = tuple(dict.fromkeys(ix for f in facs for ix in f.indices))
            return Plan("masked_sum", (("A", a.tensor), ("B", b.tensor), ("C", c.tensor)), order, i, j, k)
    return None


def _row_function(fa: Format, fb: Format, fc: Format, row: dt.DType) -> list[str]:
    """``@row_sum(i, base, mark, cval, ...)``: row ``i``'s sum (the module docstring)."""
    T = row.storage
    t = Text()
    t.index_constants()
    t(f"%zero = {zero(row)}")
    i1 = t.op("arith.addi %i, %c1 : index")
    clo = t.load_index("%C_pos", "%i", fc.pos_width)
    chi = t.load_index("%C_pos", i1, fc.pos_width)
    t(f"scf.for %q = {clo} to {chi} step %c1 {{")       # C's row i, stamped
    kv = t.load_index("%C_crd", "%q", fc.crd_width)
    at = t.op(f"arith.addi %base, {kv} : index")
    t(f"  memref.store %i, %mark[{at}] : memref<?xindex>")
    t(f"  memref.store {t.op(f'memref.load %C_val[%q] : memref<?x{T}>')}, %cval[{at}] : memref<?x{T}>")
    t("}")
    alo = t.load_index("%A_pos", "%i", fa.pos_width)
    ahi = t.load_index("%A_pos", i1, fa.pos_width)
    t(f"%s = scf.for %p = {alo} to {ahi} step %c1 iter_args(%acc = %zero) -> ({T}) {{")
    jv = t.load_index("%A_crd", "%p", fa.crd_width)
    a = t.op(f"memref.load %A_val[%p] : memref<?x{T}>")
    j1 = t.op(f"arith.addi {jv}, %c1 : index")
    blo = t.load_index("%B_pos", jv, fb.pos_width)
    bhi = t.load_index("%B_pos", j1, fb.pos_width)
    inner = t.fresh("in")
    t(f"{inner} = scf.for %r = {blo} to {bhi} step %c1 iter_args(%u = %zero) -> ({T}) {{")
    kv = t.load_index("%B_crd", "%r", fb.crd_width)
    at = t.op(f"arith.addi %base, {kv} : index")
    mk = t.op(f"memref.load %mark[{at}] : memref<?xindex>")
    hit = t.op(f"arith.cmpi eq, {mk}, %i : index")
    b = t.op(f"memref.load %B_val[%r] : memref<?x{T}>")
    c = t.op(f"memref.load %cval[{at}] : memref<?x{T}>")
    bc = t.op(arith(row, "*", b, c))
    term = t.op(f"arith.select {hit}, {bc}, %zero : {T}")
    t(f"  scf.yield {t.op(arith(row, '+', '%u', term))} : {T}")
    t("}")
    t(f"  scf.yield {t.op(arith(row, '+', '%acc', t.op(arith(row, '*', a, inner))))} : {T}")
    t("}")
    t("return %s : " + T)
    pa, ca = f"i{fa.pos_width}", f"i{fa.crd_width}"
    pb, cb = f"i{fb.pos_width}", f"i{fb.crd_width}"
    pc, cc = f"i{fc.pos_width}", f"i{fc.crd_width}"
    sig = (f"func.func private @row_sum(%i: index, %base: index, %mark: memref<?xindex>, %cval: memref<?x{T}>, "
           f"%A_pos: memref<?x{pa}>, %A_crd: memref<?x{ca}>, %A_val: memref<?x{T}>, "
           f"%B_pos: memref<?x{pb}>, %B_crd: memref<?x{cb}>, %B_val: memref<?x{T}>, "
           f"%C_pos: memref<?x{pc}>, %C_crd: memref<?x{cc}>, %C_val: memref<?x{T}>) -> {T} {{")
    return [sig] + [f"  {ln}" for ln in t.lines] + ["}"]


def emit(plan: Plan, formats: dict, out: Format | None, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module (module docstring); ``formats`` by operand name, widths resolved
    (``out``: None, the scalar result; ``facts``: nothing here depends on them)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fa, fb, fc = (plan.format_of(r, formats) for r in ("A", "B", "C"))
    params = operand_params(plan, formats, T) + [f"%out_m: memref<{T}>"]
    decl = list(OMP_DECLS) if parallel else []
    if parallel:
        decl.append(f"llvm.mlir.global external @{NUM_THREADS_GLOBAL}(1 : i32) {{addr_space = 0 : i32}} : i32")
    decl += _row_function(fa, fb, fc, row)
    m, n = f"%size_{plan.i}", f"%size_{plan.k}"
    t = Text()
    t.index_constants()
    t("%cm1 = arith.constant -1 : index")
    t(f"%zero = {zero(row)}")
    nt = marker_workspaces(t, n, T, parallel, "cval")   # per thread: a thread past them allocated its own per row
    m1 = t.op(f"arith.maxui {m}, %c1 : index")
    t(f"%rows = memref.alloc({m1}) : memref<?x{T}>")
    args = "%A_pos, %A_crd, %A_val, %B_pos, %B_crd, %B_val, %C_pos, %C_crd, %C_val"
    types = ", ".join(f"memref<?x{ty}>" for ty in (f"i{fa.pos_width}", f"i{fa.crd_width}", T,
                                                   f"i{fb.pos_width}", f"i{fb.crd_width}", T,
                                                   f"i{fc.pos_width}", f"i{fc.crd_width}", T))

    def call(base: str, mark: str, cval: str) -> None:
        s = t.op(f"func.call @row_sum(%i, {base}, {mark}, {cval}, {args}) : "
                 f"(index, index, memref<?xindex>, memref<?x{T}>, {types}) -> {T}")
        t(f"memref.store {s}, %rows[%i] : memref<?x{T}>")

    opening, closing = loop(parallel, "%i", "%c0", m)
    t(opening)
    i1 = t.op("arith.addi %i, %c1 : index")
    t.load_index("%A_pos", "%i", fa.pos_width)      # (the thread count follows A's entries)
    t.load_index("%A_pos", i1, fa.pos_width)
    if parallel:
        tid = t.op(f"arith.index_cast {t.op('func.call @omp_get_thread_num() : () -> i32')} : i32 to index")
        ok = t.op(f"arith.cmpi ult, {tid}, {nt} : index")
        t(f"scf.if {ok} {{")
        call(t.op(f"arith.muli {tid}, {n} : index"), "%mark", "%cval")
        t("} else {")         # a thread past the workspaces allocated: its own, for this row
        n1 = t.op(f"arith.maxui {n}, %c1 : index")
        own = t.op(f"memref.alloc({n1}) : memref<?xindex>")
        ocv = t.op(f"memref.alloc({n1}) : memref<?x{T}>")
        t(f"scf.for %y = %c0 to {n} step %c1 {{")
        t(f"  memref.store %cm1, {own}[%y] : memref<?xindex>")
        t("}")
        call("%c0", own, ocv)
        t(f"memref.dealloc {own} : memref<?xindex>")
        t(f"memref.dealloc {ocv} : memref<?x{T}>")
        t("}")
    else:
        call("%c0", "%mark", "%cval")
    t(closing)
    t(f"%total = scf.for %i = %c0 to {m} step %c1 iter_args(%s = %zero) -> ({T}) {{")
    v = t.op(f"memref.load %rows[%i] : memref<?x{T}>")
    t(f"  scf.yield {t.op(arith(row, '+', '%s', v))} : {T}")
    t("}")
    t(f"memref.store %total, %out_m[] : memref<{T}>")
    t("memref.dealloc %mark : memref<?xindex>")
    t(f"memref.dealloc %cval : memref<?x{T}>")
    t(f"memref.dealloc %rows : memref<?x{T}>")
    t("return")
    return module(decl, kernel_head(params), t.lines)
