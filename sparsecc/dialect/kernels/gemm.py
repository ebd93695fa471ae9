"""Dense x dense contractions, hand-written (issue 24): ``C[..., i, j] = sum[k](X[...] * Y[..., j])``.

The planner's dense steps - ``X @ W`` of a GNN layer, the dense half of a Tucker chain - and
any two-operand einsum over dense row-major operands with one summed index and a dense
result, where:

* ``j``, the result's last index, is the last index of ``Y`` and not an index of ``X``;
* ``i``, the result's second-to-last index, is an index of ``X`` and not of ``Y``;
* every other index of the result (a *batch* index, ``b`` in ``bik,bkj->bij`` or ``i`` in
  the Tucker step ``ijk,jl->ikl``) is an index of X or Y or both; X's indices in any order.

MLIR's sparsifier makes this the loop ``for i, for j, for k: C[i,j] += X[i,k] * Y[k,j]``
with the sum in memory.  This kernel instead

* computes a block of ``ROWS`` rows (``i``) by ``BLOCK_REGISTERS`` vector registers of
  columns (``j``; the target's width, ``TargetFacts.vector_bytes``) at a time,
  the ``ROWS`` accumulators in vector registers (``vector<W x T>``; LLVM splits a wide one
  into the machine's registers) while it walks ``k``: each ``vector.load`` of Y's row is
  used ``ROWS`` times, each element of X is broadcast once per column block (``math.fma``
  for floats, ``muli``/``addi`` for integers: exact, wrapping as NumPy does);
* takes the last columns (fewer than a block) with one masked block
  (``vector.maskedload``/``maskedstore``) and the last rows (fewer than ``ROWS``) one row
  at a time, so any shape works: 1 x n, n x 1, and empty dimensions (``k`` empty: zeros);
* runs its row blocks (over every batch index too) in an ``scf.parallel``, OpenMP through
  the ordinary pipeline, dealt one block at a time (``kernel_abi.PARALLEL_CHUNK``); the
  loop's work measure (``passes/rewrites.py thread_count``) is read from a small buffer of
  each block's cumulative work (its ``ROWS x N x K`` multiply-adds over ``FMA_PER_WORK``),
  which the body reads at ``[t]`` and ``[t + 1]``, so a small product stays on one thread.
  Each output entry is summed by one thread in ``k``'s order, so results do not depend on
  the thread count, bit for bit;
* complex values: the same blocks of one row by one column, ``complex.mul``/``add``
  (correct, not fast: the vector dialect has no complex vectors).

It writes every output entry, so the call hands it uninitialized memory
(``Compiled.fills_output``).  The function has the sparsifier kernel's arguments for the
same statement (the sizes, each operand's dense memref, the output memref).
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes as dt
from ...expr import Access, Binary, Statement
from ...formats import Format
from ...kernel_abi import PARALLEL_CHUNK, TargetFacts
from .emit import Text, if_yield, kernel_head, module, multiply_add
from .recognize import RolePlan, index_order, one_kind, plain_sum

#: the columns of one block, in vector registers of the target (``TargetFacts.vector_bytes``):
#: two of them (AVX2: 64 bytes, 8 float64; AVX-512: 128 bytes).  Measured, 100k x 128 x 32
#: float64, 1 thread, AVX-512 machine (best of 5, interleaved): 128 bytes 49 ms, 64 bytes 59
BLOCK_REGISTERS = 2
#: the rows of one block, each with its accumulator of two registers: 12 of the 16 (AVX2)
#: or 32 (AVX-512) registers, leaving room for Y's row and the broadcast
ROWS = 6
#: multiply-adds per unit of the thread-count rewrite's work measure (a unit: about one
#: stored entry of SpMV, ~1-2 ns; a register-blocked multiply-add is ~0.1 ns)
FMA_PER_WORK = 8
#: the value kinds served (complex: scalar blocks)
_KINDS = ("float", "int", "complex")


@dataclass(frozen=True)
class Plan(RolePlan):
    """A recognised dense contraction: roles ``X`` (has ``i``) and ``Y`` (ends in ``j``),
    their accesses' indices, the result's indices (``out``: batch indices, ``i``, ``j``)
    and the summed index ``k``."""

    x: tuple[str, ...]
    y: tuple[str, ...]
    out: tuple[str, ...]
    k: str


def _dense(f: Format, rank: int) -> bool:
    return f.is_dense and f.block is None and tuple(f.order or range(rank)) == tuple(range(rank))


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written dense contraction for this specialization, or None."""
    if out_format is not None or len(stmt.operands) != 2 or len(stmt.indices) < 2 or not one_kind(dtypes, _KINDS):
        return None
    e = stmt.expr
    if not plain_sum(e, 1):
        return None
    b = e.body
    if not (isinstance(b, Binary) and b.op == "*" and isinstance(b.left, Access) and isinstance(b.right, Access)):
        return None
    fmts = dict(zip(stmt.operands, formats))
    if b.left.tensor == b.right.tensor:
        return None
    out, k = tuple(stmt.indices), e.indices[0]
    i, j = out[-2], out[-1]
    if len(set(out)) != len(out) or k in out:
        return None
    accs = (b.left, b.right)
    for a in accs:
        if len(set(a.indices)) != len(a.indices) or not _dense(fmts[a.tensor], len(a.indices)):
            return None
    ys = [a for a in accs if j in a.indices and i not in a.indices]
    if len(ys) != 1:
        return None
    Y = ys[0]
    X = accs[1] if Y is accs[0] else accs[0]
    if j in X.indices or i not in X.indices or k not in X.indices or k not in Y.indices:
        return None
    batch = set(out[:-2])
    if Y.indices[-1] != j and (set(Y.indices) & batch or dt.TABLE[dtypes[0]].kind == "complex"):
        return None          # Y read with its own strides: only the packed kernel (emit) does
    if not set(X.indices) <= batch | {i, k} or not set(Y.indices) <= batch | {k, j}:
        return None
    if not batch <= set(X.indices) | set(Y.indices):
        return None
    return Plan("gemm", (("X", X.tensor), ("Y", Y.tensor)), index_order(stmt), X.indices, Y.indices, out, k)


def _memref(rank: int, T: str) -> str:
    return f"memref<{'?x' * rank}{T}>"


def emit(plan: Plan, formats: dict, out: Format | None, dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The MLIR module (module docstring); ``formats`` by operand name, ``out`` None (a
    dense result); ``facts``: the target's vector width sizes the column blocks."""
    row = dt.TABLE[dtype]
    T = row.storage
    vec = row.kind != "complex"
    XT, YT, CT = _memref(len(plan.x), T), _memref(len(plan.y), T), _memref(len(plan.out), T)
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    for op in formats:
        r = plan.role(op)
        params.append(f"%{r}: {XT if r == 'X' else YT}")
    params.append(f"%C: {CT}")
    if vec and not set(plan.y) & set(plan.out[:-2]):
        return _emit_packed(plan, params, dtype, parallel, facts)
    size = {ix: f"%size_{ix}" for ix in plan.index_order}
    batch, i, j, k = plan.out[:-2], plan.out[-2], plan.out[-1], plan.k
    R = ROWS
    W = max(1, BLOCK_REGISTERS * facts.vector_bytes // row.numpy.itemsize) if vec else 1

    t = Text()
    t.index_constants()
    M, N, K = size[i], size[j], size[k]
    rows_c = t.op(f"arith.constant {R} : index")
    nb = t.op(f"arith.ceildivui {M}, {rows_c} : index")
    total = nb
    for bx in batch:
        total = t.op(f"arith.muli {total}, {size[bx]} : index")
    zv = (t.op(f"arith.constant dense<{'0.0' if row.kind == 'float' else '0'}> : vector<{W}x{T}>") if vec
          else t.op(f"complex.constant [0.0 : {T[8:-1]}, 0.0 : {T[8:-1]}] : {T}"))
    cw = t.op(f"arith.constant {W} : index")
    ncols = t.op(f"arith.muli {t.op(f'arith.divui {N}, {cw} : index')}, {cw} : index")     # the full blocks

    def subs(indices, at: dict) -> str:
        return ", ".join(at[ix] for ix in indices)

    def complex_tile(at: dict, rws: list[str], jb: str) -> None:
        """C[rows, jb] = sum over k, the real and imaginary parts summed apart in float
        registers (``complex.mul``'s lowering recovers infinities and NaNs, C99 Annex G: many
        times slower; the product as BLAS's zgemm and NumPy's matmul take it)."""
        F = T[8:-1]
        accs = [(t.fresh("re"), t.fresh("im")) for _ in rws]
        res = t.fresh("res")
        z = t.op(f"arith.constant 0.0 : {F}")
        args = ", ".join(f"{a} = {z}" for pair in accs for a in pair)
        types = ", ".join([F] * 2 * len(rws))
        t(f"{res}:{2 * len(rws)} = scf.for %k = %c0 to {K} step %c1 iter_args({args}) -> ({types}) {{")
        at = dict(at, **{k: "%k", j: jb})
        y = t.op(f"memref.load %Y[{subs(plan.y, at)}] : {YT}")
        yr, yi = t.op(f"complex.re {y} : {T}"), t.op(f"complex.im {y} : {T}")
        new = []
        for (re, im), ir in zip(accs, rws):
            x = t.op(f"memref.load %X[{subs(plan.x, dict(at, **{i: ir}))}] : {XT}")
            xr, xi = t.op(f"complex.re {x} : {T}"), t.op(f"complex.im {x} : {T}")
            nxi = t.op(f"arith.negf {xi} : {F}")
            new.append(t.op(f"math.fma {nxi}, {yi}, {t.op(f'math.fma {xr}, {yr}, {re} : {F}')} : {F}"))
            new.append(t.op(f"math.fma {xi}, {yr}, {t.op(f'math.fma {xr}, {yi}, {im} : {F}')} : {F}"))
        t(f"  scf.yield {', '.join(new)} : {types}")
        t("}")
        for n, ir in enumerate(rws):
            v = t.op(f"complex.create {res}#{2 * n}, {res}#{2 * n + 1} : {T}")
            t(f"memref.store {v}, %C[{subs(plan.out, dict(at, **{i: ir}))}] : {CT}")

    def tile(at: dict, rws: list[str], jb: str, mask: str | None) -> None:
        """C[rows, jb:jb+W] = sum over k (in registers), masked by ``mask``."""
        if not vec:
            return complex_tile(at, rws, jb)
        ty = f"vector<{W}x{T}>" if vec else T
        accs = [t.fresh("acc") for _ in rws]
        res = t.fresh("res")
        args = ", ".join(f"{a} = {zv}" for a in accs)
        types = ", ".join([ty] * len(rws))
        t(f"{res}:{len(rws)} = scf.for %k = %c0 to {K} step %c1 iter_args({args}) -> ({types}) {{")
        at = dict(at, **{k: "%k", j: jb})
        if not vec:
            y = t.op(f"memref.load %Y[{subs(plan.y, at)}] : {YT}")
        elif mask is None:
            y = t.op(f"vector.load %Y[{subs(plan.y, at)}] : {YT}, {ty}")
        else:
            y = t.op(f"vector.maskedload %Y[{subs(plan.y, at)}], {mask}, {zv} : {YT}, vector<{W}xi1>, {ty} into {ty}")
        new = []
        for acc, ir in zip(accs, rws):
            x = t.op(f"memref.load %X[{subs(plan.x, dict(at, **{i: ir}))}] : {XT}")
            if vec:
                xb = t.op(f"vector.broadcast {x} : {T} to {ty}")
                new.append(multiply_add(t, row.kind == "float", xb, y, acc, ty))
            else:
                new.append(t.op(f"complex.add {acc}, {t.op(f'complex.mul {x}, {y} : {T}')} : {T}"))
        t(f"  scf.yield {', '.join(new)} : {types}")
        t("}")
        for n, ir in enumerate(rws):
            c = subs(plan.out, dict(at, **{i: ir}))
            if not vec:
                t(f"memref.store {res}#{n}, %C[{c}] : {CT}")
            elif mask is None:
                t(f"vector.store {res}#{n}, %C[{c}] : {CT}, {ty}")
            else:
                t(f"vector.maskedstore %C[{c}], {mask}, {res}#{n} : {CT}, vector<{W}xi1>, {ty}")

    def columns(at: dict, rws: list[str]) -> None:
        """Every column block of the rows ``rws``: the full ones, then one masked block."""
        jb = t.fresh("jb")
        t(f"scf.for {jb} = %c0 to {ncols} step {cw} {{")
        tile(at, rws, jb, None)
        t("}")
        if vec:
            rest = t.op(f"arith.subi {N}, {ncols} : index")
            t(f"scf.if {t.op(f'arith.cmpi ugt, {rest}, %c0 : index')} {{")
            tile(at, rws, ncols, t.op(f"vector.create_mask {rest} : vector<{W}xi1>"))
            t("}")

    def body(tv: str) -> None:
        """Iteration ``tv``: its batch indices and row block, every column of it."""
        at: dict = {}
        blk = t.op(f"arith.remui {tv}, {nb} : index")
        rest = t.op(f"arith.divui {tv}, {nb} : index")
        for bx in reversed(batch):
            at[bx] = t.op(f"arith.remui {rest}, {size[bx]} : index")
            rest = t.op(f"arith.divui {rest}, {size[bx]} : index")
        i0 = t.op(f"arith.muli {blk}, {rows_c} : index")
        if R == 1:
            columns(at, [i0])
            return
        left = t.op(f"arith.subi {M}, {i0} : index")
        full = t.op(f"arith.cmpi uge, {left}, {rows_c} : index")
        t(f"scf.if {full} {{")
        rws = [i0] + [t.op(f"arith.addi {i0}, {t.op(f'arith.constant {r} : index')} : index") for r in range(1, R)]
        columns(at, rws)
        t("} else {")
        ir = t.fresh("ir")
        t(f"scf.for {ir} = {i0} to {M} step %c1 {{")
        columns(at, [ir])
        t("}")
        t("}")

    per = _work_table(t, rows_c, N, K, total) if parallel else None
    _row_blocks(t, total, per, body)
    if parallel:
        t("memref.dealloc %work : memref<?xindex>")
    t("return")
    attrs = f"{PARALLEL_CHUNK} = 1 : i64" if parallel else ""
    return module([], kernel_head(params, attrs=attrs), t.lines)


def _work_table(t: Text, rows_c: str, n: str, k: str, total: str) -> str:
    """``%work``: each row block's cumulative work (``rows x n x k`` multiply-adds over
    ``FMA_PER_WORK``), read by the blocks' loop at ``[t]`` and ``[t + 1]``: the thread-count
    rewrite's measure (module docstring).  Returns ``per``, one block's work."""
    flops = t.op(f"arith.muli {t.op(f'arith.muli {rows_c}, {n} : index')}, {k} : index")
    unit = t.op(f"arith.constant {FMA_PER_WORK} : index")
    per = t.op(f"arith.maxui {t.op(f'arith.divui {flops}, {unit} : index')}, %c1 : index")
    n1 = t.op(f"arith.addi {total}, %c1 : index")
    t(f"%work = memref.alloc({n1}) : memref<?xindex>")
    t(f"scf.for %w = %c0 to {n1} step %c1 {{")
    t(f"  memref.store {t.op(f'arith.muli %w, {per} : index')}, %work[%w] : memref<?xindex>")
    t("}")
    return per


def _row_blocks(t: Text, total: str, per: str | None, body) -> None:
    """The loop over ``total`` row blocks, ``body(block)`` each: parallel over ``%work``'s
    blocks when ``per`` is given (a block's number is ``work[t] / per``), else serial."""
    if per is not None:
        t(f"scf.parallel (%t) = (%c0) to ({total}) step (%c1) {{")
        lo = t.op("memref.load %work[%t] : memref<?xindex>")
        hi = t.op(f"memref.load %work[{t.op('arith.addi %t, %c1 : index')}] : memref<?xindex>")
        t(f"scf.if {t.op(f'arith.cmpi ugt, {hi}, {lo} : index')} {{")
        body(t.op(f"arith.divui {lo}, {per} : index"))
        t("}")
        t("  scf.reduce")
        t("}")
    else:
        t(f"scf.for %t = %c0 to {total} step %c1 {{")
        body("%t")
        t("}")


#: cache blocking of the packed kernel (:func:`_emit_packed`): ``k`` in blocks of ``KC``, so a
#: block of ``ROWS`` rows of X (``ROWS x KC``) stays in L1 while the column blocks of the
#: panel pass under it; ``j`` in panels of about ``PANEL_BYTES`` (``KC`` x the panel's
#: columns, packed), which stay in L2 while every row block of the panel passes over them
KC = 256
PANEL_BYTES = 1 << 20


def _emit_packed(plan: Plan, params: list[str], dtype: str, parallel: bool, facts: TargetFacts) -> str:
    """The cache-blocked kernel (Y without batch indices, real values): for each panel of
    ``j`` (:data:`PANEL_BYTES`) and block of ``k`` (:data:`KC`), Y's block is copied into a
    contiguous buffer, one column block after another (``KC x W`` each, the last padded with
    zeros), read with Y's own strides - so Y may be stored transposed (``ik,jk->ij``, or a
    transposed result ``ik,kj->ji``, where the roles swap) -; then every row block runs its
    register tiles over it, starting from zero at the first ``k`` block and from the partial
    sums in C after it.  Each entry is still summed by one thread in ``k``'s order: the
    results equal the unblocked kernel's, bit for bit, at any thread count."""
    row = dt.TABLE[dtype]
    T = row.storage
    XT, CT = _memref(len(plan.x), T), _memref(len(plan.out), T)
    YT = _memref(len(plan.y), T)
    size = {ix: f"%size_{ix}" for ix in plan.index_order}
    batch, i, j, k = plan.out[:-2], plan.out[-2], plan.out[-1], plan.k
    R = ROWS
    W = max(1, BLOCK_REGISTERS * facts.vector_bytes // row.numpy.itemsize)
    ty, mty = f"vector<{W}x{T}>", f"vector<{W}xi1>"
    NC = max(W, PANEL_BYTES // (KC * row.numpy.itemsize) // W * W)
    y_rows = plan.y[-1] == j            # Y's columns contiguous: vector loads when packing

    t = Text()
    t.index_constants()
    M, N, K = size[i], size[j], size[k]
    rows_c = t.op(f"arith.constant {R} : index")
    nb = t.op(f"arith.ceildivui {M}, {rows_c} : index")
    total = nb
    for bx in batch:
        total = t.op(f"arith.muli {total}, {size[bx]} : index")
    zv = t.op(f"arith.constant dense<{'0.0' if row.kind == 'float' else '0'}> : {ty}")
    zs = t.op(f"arith.constant {'0.0' if row.kind == 'float' else '0'} : {T}")
    cw, kc_c, nc_c = (t.op(f"arith.constant {v} : index") for v in (W, KC, NC))
    # the packed buffer: min(K, KC) x (min(N, NC) rounded up to W)
    kcap = t.op(f"arith.minui {K}, {kc_c} : index")
    nmin = t.op(f"arith.minui {N}, {nc_c} : index")
    ncap = t.op(f"arith.muli {t.op(f'arith.ceildivui {nmin}, {cw} : index')}, {cw} : index")
    bsz = t.op(f"arith.maxui {t.op(f'arith.muli {kcap}, {ncap} : index')}, %c1 : index")
    t(f"%B = memref.alloc({bsz}) {{alignment = 64 : i64}} : memref<?x{T}>")

    def ysub(kv: str, jv: str) -> str:
        return ", ".join(kv if ix == k else jv for ix in plan.y)

    def pack(jc: str, nc: str, kc: str, kn: str) -> None:
        """B[(b * kn + kk) * W + w] = Y[kc + kk, jc + b * W + w] (0 past N)."""
        nblk = t.op(f"arith.ceildivui {nc}, {cw} : index")
        t(f"scf.for %pb = %c0 to {nblk} step %c1 {{")
        j0 = t.op(f"arith.addi {jc}, {t.op(f'arith.muli %pb, {cw} : index')} : index")
        left = t.op(f"arith.subi {t.op(f'arith.addi {jc}, {nc} : index')}, {j0} : index")
        base = t.op(f"arith.muli %pb, {kn} : index")
        if y_rows:
            mask = t.op(f"vector.create_mask {left} : {mty}")
            t(f"scf.for %pk = %c0 to {kn} step %c1 {{")
            kk = t.op(f"arith.addi {kc}, %pk : index")
            v = t.op(f"vector.maskedload %Y[{ysub(kk, j0)}], {mask}, {zv} : {YT}, {mty}, {ty} into {ty}")
            at = t.op(f"arith.muli {t.op(f'arith.addi {base}, %pk : index')}, {cw} : index")
            t(f"vector.store {v}, %B[{at}] : memref<?x{T}>, {ty}")
            t("}")
        else:
            t(f"scf.for %pw = %c0 to {cw} step %c1 {{")
            jj = t.op(f"arith.addi {j0}, %pw : index")
            inb = t.op(f"arith.cmpi ult, %pw, {left} : index")
            t(f"scf.for %pk = %c0 to {kn} step %c1 {{")
            kk = t.op(f"arith.addi {kc}, %pk : index")
            v = if_yield(t, inb, T, lambda: t.op(f"memref.load %Y[{ysub(kk, jj)}] : {YT}"), lambda: zs)
            row_at = t.op(f"arith.addi {base}, %pk : index")
            at = t.op(f"arith.addi {t.op(f'arith.muli {row_at}, {cw} : index')}, %pw : index")
            t(f"memref.store {v}, %B[{at}] : memref<?x{T}>")
            t("}")
            t("}")
        t("}")

    def subs(indices, at: dict) -> str:
        return ", ".join(at[ix] for ix in indices)

    def tile(at: dict, rws: list[str], pb: str, jb: str, kc: str, kn: str, first: str, mask: str | None) -> None:
        """C[rows, jb:jb+W] (+)= sum over this k block, in registers."""
        accs = [t.fresh("acc") for _ in rws]
        cs = [subs(plan.out, dict(at, **{i: ir, j: jb})) for ir in rws]

        def start(c):
            if mask is None:
                return t.op(f"vector.load %C[{c}] : {CT}, {ty}")
            return t.op(f"vector.maskedload %C[{c}], {mask}, {zv} : {CT}, {mty}, {ty} into {ty}")
        inits = [if_yield(t, first, ty, lambda: zv, lambda c=c: start(c)) for c in cs]
        res = t.fresh("res")
        types = ", ".join([ty] * len(rws))
        base = t.op(f"arith.muli {pb}, {kn} : index")
        args = ", ".join(f"{a} = {v}" for a, v in zip(accs, inits))
        t(f"{res}:{len(rws)} = scf.for %k = %c0 to {kn} step %c1 iter_args({args}) -> ({types}) {{")
        yat = t.op(f"arith.muli {t.op(f'arith.addi {base}, %k : index')}, {cw} : index")
        y = t.op(f"vector.load %B[{yat}] : memref<?x{T}>, {ty}")
        kk = t.op(f"arith.addi {kc}, %k : index")
        new = []
        for acc, ir in zip(accs, rws):
            x = t.op(f"memref.load %X[{subs(plan.x, dict(at, **{i: ir, k: kk}))}] : {XT}")
            xb = t.op(f"vector.broadcast {x} : {T} to {ty}")
            new.append(multiply_add(t, row.kind == "float", xb, y, acc, ty))
        t(f"  scf.yield {', '.join(new)} : {types}")
        t("}")
        for n, c in enumerate(cs):
            if mask is None:
                t(f"vector.store {res}#{n}, %C[{c}] : {CT}, {ty}")
            else:
                t(f"vector.maskedstore %C[{c}], {mask}, {res}#{n} : {CT}, {mty}, {ty}")

    def columns(at: dict, rws: list[str], panel) -> None:
        jc, nc, kc, kn, first = panel
        full = t.op(f"arith.divui {nc}, {cw} : index")
        pb = t.fresh("pb")
        t(f"scf.for {pb} = %c0 to {full} step %c1 {{")
        tile(at, rws, pb, t.op(f"arith.addi {jc}, {t.op(f'arith.muli {pb}, {cw} : index')} : index"),
             kc, kn, first, None)
        t("}")
        rest = t.op(f"arith.subi {nc}, {t.op(f'arith.muli {full}, {cw} : index')} : index")
        t(f"scf.if {t.op(f'arith.cmpi ugt, {rest}, %c0 : index')} {{")
        tile(at, rws, full, t.op(f"arith.addi {jc}, {t.op(f'arith.muli {full}, {cw} : index')} : index"),
             kc, kn, first, t.op(f"vector.create_mask {rest} : {mty}"))
        t("}")

    def body(tv: str, panel) -> None:
        at: dict = {}
        blk = t.op(f"arith.remui {tv}, {nb} : index")
        rest = t.op(f"arith.divui {tv}, {nb} : index")
        for bx in reversed(batch):
            at[bx] = t.op(f"arith.remui {rest}, {size[bx]} : index")
            rest = t.op(f"arith.divui {rest}, {size[bx]} : index")
        i0 = t.op(f"arith.muli {blk}, {rows_c} : index")
        left = t.op(f"arith.subi {M}, {i0} : index")
        t(f"scf.if {t.op(f'arith.cmpi uge, {left}, {rows_c} : index')} {{")
        rws = [i0] + [t.op(f"arith.addi {i0}, {t.op(f'arith.constant {r} : index')} : index") for r in range(1, R)]
        columns(at, rws, panel)
        t("} else {")
        ir = t.fresh("ir")
        t(f"scf.for {ir} = {i0} to {M} step %c1 {{")
        columns(at, [ir], panel)
        t("}")
        t("}")

    per = _work_table(t, rows_c, ncap, kcap, total) if parallel else None
    # k's blocks: at least one, so an empty k still writes its zeros
    kend = t.op(f"arith.maxui {K}, %c1 : index")
    t(f"scf.for %jc = %c0 to {N} step {nc_c} {{")
    nc = t.op(f"arith.minui {nc_c}, {t.op(f'arith.subi {N}, %jc : index')} : index")
    t(f"scf.for %kc = %c0 to {kend} step {kc_c} {{")
    kn = t.op(f"arith.minui {kc_c}, {t.op(f'arith.subi {K}, %kc : index')} : index")
    first = t.op("arith.cmpi eq, %kc, %c0 : index")
    panel = ("%jc", nc, "%kc", kn, first)
    pack("%jc", nc, "%kc", kn)
    _row_blocks(t, total, per, lambda tv: body(tv, panel))
    t("}")
    t("}")
    if parallel:
        t("memref.dealloc %work : memref<?xindex>")
    t(f"memref.dealloc %B : memref<?x{T}>")
    t("return")
    attrs = f"{PARALLEL_CHUNK} = 1 : i64" if parallel else ""
    return module([], kernel_head(params, attrs=attrs), t.lines)
