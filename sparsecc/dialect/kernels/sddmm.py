"""SDDMM with a CSR result, hand-written: ``C[i,j] = A[i,j] * sum[k](X[i,k] * Y[j,k])``.

Also ``X[k,i]`` / ``Y[k,j]``, any operand order, the einsum ``ij,ik,jk->ij``: A CSR, X and Y
dense (row-major), a CSR result.  The result's pattern is A's: its positions and coordinates
are copies of A's, and each stored value ``A[i,j] * dot(X[i,:], Y[j,:])`` is computed by a
parallel loop over the rows, the dot product on 64-byte vectors in a fixed order
(:func:`_dot_vector`); a transposed X or Y is first copied row-major (:func:`_pack`); A's
coordinates are range-checked in the loop (a bad one sets the call's flag and its entry is
skipped; the kernel lists them in ``SELF_CHECKED``, so ``check=True`` skips NumPy's check).
Each row is computed by one thread in a fixed order, so the result does not depend on the
thread count, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...expr import Statement
from ...formats import Format
from ...kernel_abi import SELF_CHECKED, TargetFacts
from .emit import (FLAG_CALL, FLAG_DECL, OMP_DECLS, Text, alloc_entries, arith, csr_results, huge_page_decls,
                   huge_pages, if_yield, ity, kernel_head, loop, module, multiply_add, operand_params, return_csr,
                   row_bounds, set_flag, zero)
from .recognize import RolePlan, csr_product, is_csr, is_dense_rowmajor

#: SDDMM's partial sums per dot product (8 measured no faster on this machine: the loop waits
#: on the rows of Y, not on its adds)
_UNROLL = 1
#: SDDMM's vector accumulators (one 64-byte vector each) in the vector dot product, a power
#: of two (they are added pairwise).  1: with k = 32 a second one measured slower in the
#: cache (2.20 vs 2.43 ms, 400k entries) and no faster on the bench row, where the loads of
#: Y's rows, not the FMA latency, are the bound; the FMA chains of consecutive entries overlap
SDDMM_VECTOR_ACCS = 1
#: SDDMM prefetches the row of Y this many stored entries ahead (across rows); 8-32 measured
#: alike on the bench row (k = 32) and at k = 8, about 5-10% faster than 2; k = 128 (rows
#: out of the caches) did not care
SDDMM_PREFETCH_AHEAD = 16


@dataclass(frozen=True)
class Plan(RolePlan):
    """A recognised SDDMM (roles ``A``, ``X``, ``Y``), and whether X / Y are stored
    transposed (``X[k,i]`` / ``Y[k,j]``)."""

    i: str
    j: str
    k: str
    x_t: bool = False
    y_t: bool = False


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written SDDMM for this specialization, or None (the sparsifier's kernel)."""
    p = csr_product(stmt, formats, dtypes, out_format)
    if p is None or len(p.factors) != 3:
        return None
    i, j, k, facs, fmts = p.i, p.j, p.k, p.factors, p.formats
    sparse = [a for a in facs if a.indices == (i, j)]
    if len(sparse) != 1 or not is_csr(fmts[sparse[0].tensor]):
        return None
    A = sparse[0]
    rest = [a for a in facs if a is not A]
    xs = [a for a in rest if set(a.indices) == {i, k}]
    ys = [a for a in rest if set(a.indices) == {j, k}]
    if len(xs) != 1 or len(ys) != 1:
        return None
    X, Y = xs[0], ys[0]
    if not (is_dense_rowmajor(fmts[X.tensor]) and is_dense_rowmajor(fmts[Y.tensor])):
        return None
    return Plan("sddmm", (("A", A.tensor), ("X", X.tensor), ("Y", Y.tensor)), p.index_order, i, j, k,
                x_t=X.indices == (k, i), y_t=Y.indices == (k, j))


def emit(plan: Plan, formats: dict, out: Format, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module (module docstring); ``formats`` by operand name (widths resolved),
    ``parallel``: the rows in ``scf.parallel`` (else serial ``scf.for``)."""
    row = dt.TABLE[dtype]
    fa = plan.format_of("A", formats)
    decl = huge_page_decls(facts) + (list(OMP_DECLS) if parallel else [])
    t = Text()
    t.index_constants()
    m, n, kk = f"%size_{plan.i}", f"%size_{plan.j}", f"%size_{plan.k}"
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    nnz = t.load_index("%A_pos", m, fa.pos_width)
    cap = t.op(f"arith.maxui {nnz}, %c1 : index")
    pw, cw = out.pos_width, out.crd_width
    t(f"%C_pos = memref.alloc({m1}) : memref<?x{ity(pw)}>")
    alloc_entries(t, cap, out, row, facts)
    t.store_index("%c0", "%C_pos", "%c0", pw)
    zero_v = t.op(zero(row))
    last_entry = t.op(f"arith.subi {cap}, %c1 : index")
    # this call's out-of-range flag (runtime/entry.py): a coordinate of A not below n is
    # reported there and its entry skipped, so check=True needs no NumPy pass over A's indices
    flag = t.op(FLAG_CALL)
    one32 = t.op("arith.constant 1 : i32")
    # X[k,i] / Y[k,j] stored transposed: a row-major copy first (one parallel pass), so the
    # dot product reads contiguous rows like the untransposed form (and gives its bits)
    xs = _pack(t, "%X", "%Xw", m, kk, row, parallel, facts) if plan.x_t else "%X"
    ys = _pack(t, "%Y", "%Yw", n, kk, row, parallel, facts) if plan.y_t else "%Y"
    opening, closing = loop(parallel, "%i", "%c0", m)
    t(opening)
    # the body reads A_pos[i] and A_pos[i + 1]: the thread count follows the stored entries
    lo, i1, hi = row_bounds(t, "%A_pos", "%i", fa.pos_width)
    t.store_index(hi, "%C_pos", i1, pw)
    t(f"scf.for %p = {lo} to {hi} step %c1 {{")
    jv = t.load_index("%A_crd", "%p", fa.crd_width)
    # prefetch the row of Y SDDMM_PREFETCH_AHEAD entries ahead (one line per 64 bytes):
    # Y's rows are read in the mask's column order, and the dot product waited on their loads
    # (across rows: the next row's first entries are prefetched from this row's last)
    ahead = t.op(f"arith.constant {SDDMM_PREFETCH_AHEAD} : index")
    nx = t.op(f"arith.addi %p, {ahead} : index")
    nx2 = t.op(f"arith.minui {nx}, {last_entry} : index")
    jn = t.load_index("%A_crd", nx2, fa.crd_width)
    line = t.op(f"arith.constant {max(1, 64 // np.dtype(row.name).itemsize)} : index")
    t(f"scf.for %kp = %c0 to {kk} step {line} {{")
    t(f"  memref.prefetch {ys}[{jn}, %kp], read, locality<3>, data : memref<?x?x{row.storage}>")
    t("}")
    t.store_index(jv, "%C_crd", "%p", cw)
    inside = t.op(f"arith.cmpi ult, {jv}, {n} : index")     # unsigned: a negative one is huge
    t(f"scf.if {inside} {{")
    a = t.op(f"memref.load %A_val[%p] : memref<?x{row.storage}>")
    if _vector_width(row):
        s = _dot_vector(t, xs, ys, row, jv, kk)
    else:
        s = _dot_scalar(t, xs, ys, row, jv, kk, zero_v)
    v = t.op(arith(row, "*", a, s))
    t(f"memref.store {v}, %C_val[%p] : memref<?x{row.storage}>")
    t("} else {")
    t(set_flag(one32, flag))
    t("}")
    t("}")
    t(closing)
    for w in (xs, ys):      # the row-major copies, in this order (a set's order changed with the hash seed)
        if w not in ("%X", "%Y"):
            t(f"memref.dealloc {w} : memref<?x?x{row.storage}>")
    return_csr(t, m, n, m1, nnz, out, row.storage)
    decl.append(FLAG_DECL)
    params = operand_params(plan, formats, row.storage)
    crd_arg = next(q for q, prm in enumerate(params) if prm.startswith("%A_crd:"))
    head = kernel_head(params, csr_results(out, row.storage), f"{SELF_CHECKED} = array<i64: {crd_arg}>")
    return module(decl, head, t.lines)


def _vector_width(row: dt.DType) -> int:
    """Lanes of SDDMM's vector dot product (one 64-byte vector), or 0 for the scalar loop:
    a float (f32, f64) or integer dtype; complex dtypes keep the scalar loop."""
    if row.kind not in ("float", "int"):
        return 0
    return 64 // row.numpy.itemsize


def _pack(t: Text, src: str, dst: str, rows: str, kk: str, row: dt.DType, parallel: bool,
          facts: TargetFacts) -> str:
    """``dst[r, k] = src[k, r]``: a row-major copy (``rows`` x ``kk``) of a dense operand
    stored transposed, by a parallel loop over its rows (consecutive rows read neighbouring
    elements of the same ``kk`` lines of ``src``)."""
    ty = f"memref<?x?x{row.storage}>"
    t(f"{dst} = memref.alloc({rows}, {kk}) : {ty}")
    if facts.huge_pages:
        huge_pages(t, dst, ty, t.op(f"arith.muli {rows}, {kk} : index"), row.numpy.itemsize)
    r = t.fresh("r")
    opening, closing = loop(parallel, r, "%c0", rows)
    t(opening)
    t(f"scf.for %kt = %c0 to {kk} step %c1 {{")
    v = t.op(f"memref.load {src}[%kt, {r}] : {ty}")
    t(f"memref.store {v}, {dst}[{r}, %kt] : {ty}")
    t("}")
    t(closing)
    return dst


def _dot_scalar(t: Text, xs: str, ys: str, row: dt.DType, jv: str, kk: str, zero_v: str) -> str:
    """``sum[k](X[i,k] * Y[j,k])`` as a scalar loop with ``_UNROLL`` partial sums (k = u mod
    U, added pairwise at the end); the order is fixed, so the result does not depend on the
    thread count."""
    U = _UNROLL
    cu = t.op(f"arith.constant {U} : index")
    kr = t.op(f"arith.remui {kk}, {cu} : index")
    kmain = t.op(f"arith.subi {kk}, {kr} : index")
    accs = [t.fresh("acc") for _ in range(U)]
    parts = [t.fresh("part") for _ in range(U)]

    def xy_at(kv):
        x = t.op(f"memref.load {xs}[%i, {kv}] : memref<?x?x{row.storage}>")
        y = t.op(f"memref.load {ys}[{jv}, {kv}] : memref<?x?x{row.storage}>")
        return t.op(arith(row, "*", x, y))
    ty = ", ".join([row.storage] * U)
    t(f"{parts[0]}:{U} = scf.for %k = %c0 to {kmain} step {cu} "
      f"iter_args({', '.join(f'{a_} = {zero_v}' for a_ in accs)}) -> ({ty}) {{")
    nxt = []
    for u in range(U):
        ku = t.op(f"arith.addi %k, {t.op(f'arith.constant {u} : index')} : index") if u else "%k"
        nxt.append(t.op(arith(row, "+", accs[u], xy_at(ku))))
    t(f"scf.yield {', '.join(nxt)} : {ty}")
    t("}")
    vals = [f"{parts[0]}#{u}" for u in range(U)]
    while len(vals) > 1:
        vals = [t.op(arith(row, "+", vals[q], vals[q + 1])) for q in range(0, len(vals), 2)]
    racc, s = t.fresh("racc"), t.fresh("s")
    t(f"{s} = scf.for %k = {kmain} to {kk} step %c1 iter_args({racc} = {vals[0]}) -> ({row.storage}) {{")
    t(f"scf.yield {t.op(arith(row, '+', racc, xy_at('%k')))} : {row.storage}")
    t("}")
    return s


def _dot_vector(t: Text, xs: str, ys: str, row: dt.DType, jv: str, kk: str) -> str:
    """``sum[k](X[i,k] * Y[j,k])`` on vectors of W lanes (one 64-byte vector: 8 x f64, 16 x
    f32), in this fixed order (documented in docs/performance.md), with U =
    ``SDDMM_VECTOR_ACCS`` vector accumulators:

    * chunk ``c`` (``k`` in ``[c*W, (c+1)*W)``) of the main loop (the first ``k - k mod
      (U*W)`` elements) goes to accumulator ``c mod U``, lane by lane, with a fused
      multiply-add (integers: multiply, then add);
    * the full chunks after it, then the partial last chunk (``k mod W`` elements, read with
      a masked load), go to accumulator 0;
    * the accumulators are added pairwise (0+1, 2+3, then those sums), then the W lanes are
      halved: lanes ``[0, h)`` plus lanes ``[h, 2h)``, until one lane is left.

    The order depends on k, W and U only, never on the thread count or the row's position:
    every thread count gives the same bits."""
    W = 64 // row.numpy.itemsize
    U = SDDMM_VECTOR_ACCS
    el = row.storage
    vt = f"vector<{W}x{el}>"
    mt = f"memref<?x?x{el}>"
    fl = row.kind == "float"
    vzero = t.op(f"arith.constant dense<{'0.0' if fl else '0'}> : {vt}")

    def fma(x, y, acc):
        return multiply_add(t, fl, x, y, acc, vt, "vector.fma")

    step = t.op(f"arith.constant {W * U} : index")
    kr = t.op(f"arith.remui {kk}, {step} : index")
    kmain = t.op(f"arith.subi {kk}, {kr} : index")
    accs = [t.fresh("vacc") for _ in range(U)]
    res = t.fresh("vpart")
    tys = ", ".join([vt] * U)
    t(f"{res}:{U} = scf.for %k = %c0 to {kmain} step {step} "
      f"iter_args({', '.join(f'{a_} = {vzero}' for a_ in accs)}) -> ({tys}) {{")
    nxt = []
    for u in range(U):
        ku = t.op(f"arith.addi %k, {t.op(f'arith.constant {u * W} : index')} : index") if u else "%k"
        x = t.op(f"vector.load {xs}[%i, {ku}] : {mt}, {vt}")
        y = t.op(f"vector.load {ys}[{jv}, {ku}] : {mt}, {vt}")
        nxt.append(fma(x, y, accs[u]))
    t(f"scf.yield {', '.join(nxt)} : {tys}")
    t("}")
    vals = [f"{res}#{u}" for u in range(U)]
    # the rest: the full chunks after the main loop (fewer than U), then the masked partial
    # chunk, all into accumulator 0
    cw = t.op(f"arith.constant {W} : index")
    kfull = t.op(f"arith.subi {kk}, {t.op(f'arith.remui {kk}, {cw} : index')} : index")
    if U > 1:
        a0, got = t.fresh("vacc"), t.fresh("vrest")
        t(f"{got} = scf.for %k = {kmain} to {kfull} step {cw} iter_args({a0} = {vals[0]}) -> ({vt}) {{")
        x = t.op(f"vector.load {xs}[%i, %k] : {mt}, {vt}")
        y = t.op(f"vector.load {ys}[{jv}, %k] : {mt}, {vt}")
        t(f"scf.yield {fma(x, y, a0)} : {vt}")
        t("}")
        vals[0] = got
    left = t.op(f"arith.subi {kk}, {kfull} : index")
    has = t.op(f"arith.cmpi ugt, {left}, %c0 : index")

    def tail() -> str:
        mask = t.op(f"vector.create_mask {left} : vector<{W}xi1>")
        x = t.op(f"vector.maskedload {xs}[%i, {kfull}], {mask}, {vzero} : {mt}, vector<{W}xi1>, {vt} into {vt}")
        y = t.op(f"vector.maskedload {ys}[{jv}, {kfull}], {mask}, {vzero} : {mt}, vector<{W}xi1>, {vt} into {vt}")
        return fma(x, y, vals[0])
    vals[0] = if_yield(t, has, vt, tail, lambda: vals[0], name=t.fresh("vtail"), indent="")
    while len(vals) > 1:
        vals = [t.op(arith(row, "+", vals[q], vals[q + 1], vt)) for q in range(0, len(vals), 2)]
    v, w = vals[0], W
    while w > 1:
        h = w // 2
        lo = t.op(f"vector.shuffle {v}, {v} [{', '.join(map(str, range(h)))}] : vector<{w}x{el}>, vector<{w}x{el}>")
        hi = t.op(f"vector.shuffle {v}, {v} [{', '.join(map(str, range(h, w)))}] : vector<{w}x{el}>, vector<{w}x{el}>")
        v = t.op(arith(row, "+", lo, hi, f"vector<{h}x{el}>"))
        w = h
    return t.op(f"vector.extract {v}[0] : {el} from vector<1x{el}>")
