"""Hand-written loop kernels for statements whose sparse result MLIR's sparsifier builds serially.

MLIR 22's sparsifier never parallelizes a loop that writes a sparse output, and a sparse
result with a reduction inside (SpGEMM) goes through access-pattern expansion and a sort of
every row's inserted coordinates.  For two statement shapes sparsecc writes the loops itself
(``scf``/``memref``/``arith``, ``scf.parallel`` for the rows, which the ordinary pipeline turns
into OpenMP) and compiles them through the same pipeline as every kernel:

* **SDDMM** ``C[i,j] = A[i,j] * sum[k](X[i,k] * Y[j,k])`` (also ``X[k,i]``/``Y[k,j]``, any
  operand order, the einsum ``ij,ik,jk->ij``): A CSR, X and Y dense (row-major), a CSR result.
  The result's pattern is A's: its positions and coordinates are copies of A's, and each
  stored value ``A[i,j] * dot(X[i,:], Y[j,:])`` is computed by a parallel loop over the rows,
  the dot product on 64-byte vectors in a fixed order (``_dot_vector``); a transposed X or Y
  is first copied row-major (``_pack``); A's coordinates are range-checked in the loop.
* **SpGEMM** ``C[i,j] = sum[k](A[i,k] * B[k,j])`` with A, B and the result CSR: a two-phase
  Gustavson product.  Phase 1 counts each row's distinct columns with a dense marker (one per
  thread, stamped with the row, so never cleared), a prefix sum gives the positions; phase 2
  fills each row with a dense accumulator (one per thread) whose marker is a per-thread
  two-level bitmap (clear between rows), puts the row's coordinates in order (insertion sort
  up to ``INSERTION_MAX`` entries; else the set bits of the bitmap read in order, gathering
  the values as they come, when its summary words are few; else ``sparse_tensor.sort`` of
  the row's entries) and gathers the values.  Both phases prefetch the row of B that A's
  entry ``PREFETCH_AHEAD`` ahead will read; on one thread the values are stored
  non-temporally (``NONTEMPORAL``).  The
  result is canonical (sorted, no duplicates); like the sparsifier's kernel it stores every
  entry the pattern has, an entry whose terms cancel to zero included.

Each row is computed by one thread in a fixed order (``A``'s entries, then ``B``'s row), so
the result does not depend on the thread count, bit for bit.

The function has exactly the arguments and results the sparsifier's kernel for the same
statement has after ``sparse-tensor-codegen`` (``docs/architecture.md``: the sizes, then per
operand its buffers and specifier struct or a dense memref; the result's buffers and
specifier returned), so the call path packs and adopts it unchanged.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..expr import Access, Binary, Reduce, Statement
from ..formats import Format
from ..passes.guards import FLAG_FUNCTION as _FLAG
from ..passes.guards import SELF_CHECKED as _SELF_CHECKED


@dataclass(frozen=True)
class Plan:
    """A recognised statement: ``kind`` ("sddmm" or "spgemm"), the operand name of each role,
    and for SDDMM whether X / Y are stored transposed (``X[k,i]`` / ``Y[k,j]``)."""

    kind: str
    roles: tuple[tuple[str, str], ...]      # (role, operand name)
    index_order: tuple[str, ...]
    i: str
    j: str
    k: str
    x_t: bool = False
    y_t: bool = False
    a_first: bool = True                    # SpGEMM: A's factor is the left one of the product

    def role(self, name: str) -> str:
        return {n: r for r, n in self.roles}[name]


_KINDS = ("float", "int", "complex")
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
#: SpGEMM: a row of at most this many entries is put in order by insertion sort
INSERTION_MAX = 32
#: SpGEMM: a longer row is read in order from its bitmap when its summary words (4096
#: columns each) number at most this many per entry; else it is heap sorted
SCAN_WORDS_PER_ENTRY = 4
#: SpGEMM on one thread stores the result's values non-temporally (x86-64: ``movnt``, then
#: one ``sfence`` before the kernel returns): they are written once, and a cache line fill
#: for each of them was 6-9% of the kernel's time.  With more threads in the team the stores
#: stay ordinary (another thread's weakly ordered stores would need a fence before the join)
NONTEMPORAL = platform.machine().lower() in ("x86_64", "amd64")
#: SpGEMM: the B row prefetched is that of A's entry this many ahead in the row
PREFETCH_AHEAD = 2


def _factors(e) -> list | None:
    if isinstance(e, Access):
        return [e]
    if isinstance(e, Binary) and e.op == "*":
        left, right = _factors(e.left), _factors(e.right)
        if left is not None and right is not None:
            return left + right
    return None


def _is_csr(f: Format | None) -> bool:
    return (f is not None and f.block is None and f.levels == ("dense", "compressed")
            and tuple(f.order or (0, 1)) == (0, 1) and f.pos_width in (32, 64) and f.crd_width in (32, 64))


def _is_dense_rowmajor(f: Format) -> bool:
    return f.is_dense and f.block is None and tuple(f.order or (0, 1)) == (0, 1)


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> Plan | None:
    """The hand-written kernel for this specialization, or None (the sparsifier's kernel)."""
    if not _is_csr(out_format) or len(stmt.indices) != 2 or len(set(dtypes)) != 1:
        return None
    if dt.TABLE[dtypes[0]].kind not in _KINDS:
        return None
    fmts = dict(zip(stmt.operands, formats))
    i, j = stmt.indices
    e = stmt.expr
    outer = None
    if isinstance(e, Binary) and e.op == "*":        # A[i,j] * sum[k](...)
        if isinstance(e.left, Access) and isinstance(e.right, Reduce):
            outer, e = e.left, e.right
        elif isinstance(e.right, Access) and isinstance(e.left, Reduce):
            outer, e = e.right, e.left
        else:
            return None
    if not (isinstance(e, Reduce) and e.op == "sum" and e.identity is None and len(e.indices) == 1):
        return None
    k = e.indices[0]
    facs = _factors(e.body)
    if facs is None:
        return None
    if outer is not None:
        facs = [outer] + facs
    if len({a.tensor for a in facs}) != len(facs) or len({i, j, k}) != 3:
        return None
    # the signature's order: first appearance over the statement's accesses (signature.py)
    from ..expr import accesses
    index_order = tuple(dict.fromkeys(ix for a in accesses(stmt.expr) for ix in a.indices))
    if len(facs) == 2:
        a, b = facs
        if a.indices == (k, j) and b.indices == (i, k):
            a, b = b, a
            first = False
        else:
            first = True
        if a.indices != (i, k) or b.indices != (k, j):
            return None
        if not (_is_csr(fmts[a.tensor]) and _is_csr(fmts[b.tensor])):
            return None
        return Plan("spgemm", (("A", a.tensor), ("B", b.tensor)), index_order, i, j, k, a_first=first)
    if len(facs) == 3:
        sparse = [a for a in facs if a.indices == (i, j)]
        if len(sparse) != 1 or not _is_csr(fmts[sparse[0].tensor]):
            return None
        A = sparse[0]
        rest = [a for a in facs if a is not A]
        xs = [a for a in rest if set(a.indices) == {i, k}]
        ys = [a for a in rest if set(a.indices) == {j, k}]
        if len(xs) != 1 or len(ys) != 1:
            return None
        X, Y = xs[0], ys[0]
        if not (_is_dense_rowmajor(fmts[X.tensor]) and _is_dense_rowmajor(fmts[Y.tensor])):
            return None
        return Plan("sddmm", (("A", A.tensor), ("X", X.tensor), ("Y", Y.tensor)), index_order, i, j, k,
                    x_t=X.indices == (k, i), y_t=Y.indices == (k, j))
    return None


# ------------------------------------------------------------------------------ MLIR text
_SPEC = "!llvm.struct<(array<2 x i64>, array<3 x i64>)>"


def _ity(width: int) -> str:
    return f"i{width}"


class _Text:
    def __init__(self):
        self.lines: list[str] = []
        self.n = 0

    def fresh(self, stem: str = "v") -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def op(self, rhs: str, stem: str = "v") -> str:
        v = self.fresh(stem)
        self.lines.append(f"{v} = {rhs}")
        return v

    def load_index(self, mem: str, at: str, width: int) -> str:
        v = self.op(f"memref.load {mem}[{at}] : memref<?x{_ity(width)}>")
        return self.op(f"arith.index_cast {v} : {_ity(width)} to index")

    def store_index(self, value: str, mem: str, at: str, width: int) -> None:
        v = self.op(f"arith.index_cast {value} : index to {_ity(width)}")
        self(f"memref.store {v}, {mem}[{at}] : memref<?x{_ity(width)}>")


def _mul(row: dt.DType, a: str, b: str) -> str:
    return {"float": "arith.mulf", "int": "arith.muli", "complex": "complex.mul"}[row.kind] + \
        f" {a}, {b} : {row.storage}"


def _add(row: dt.DType, a: str, b: str) -> str:
    return {"float": "arith.addf", "int": "arith.addi", "complex": "complex.add"}[row.kind] + \
        f" {a}, {b} : {row.storage}"


def _zero(row: dt.DType) -> str:
    if row.kind == "complex":
        part = row.storage[8:-1]
        return f"complex.constant [0.0 : {part}, 0.0 : {part}] : {row.storage}"
    return f"arith.constant {'0.0' if row.kind == 'float' else '0'} : {row.storage}"


#: ask the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``, Linux's 14) on a
#: result's coordinates and values: they are fresh pages, and faulting them in 4 KiB at a time
#: (12k faults for the bench's 48 MB) cost more than the merge, on two threads more still
HUGE_PAGES = sys.platform.startswith("linux")
_HUGE = 1 << 21
MADVISE = "func.func private @madvise(!llvm.ptr, i64, i32) -> i32"


def huge_pages(t: _Text, mem: str, ty: str, count: str, itemsize: int) -> None:
    """``madvise(MADV_HUGEPAGE)`` on the 2 MiB-aligned part of ``mem`` (``count`` elements)."""
    p = t.op(f"memref.extract_aligned_pointer_as_index {mem} : {ty} -> index")
    size = t.op(f"arith.muli {count}, {t.op(f'arith.constant {itemsize} : index')} : index")
    mask = t.op(f"arith.constant {-_HUGE} : index")
    up = t.op(f"arith.addi {p}, {t.op(f'arith.constant {_HUGE - 1} : index')} : index")
    lo = t.op(f"arith.andi {up}, {mask} : index")
    hi = t.op(f"arith.andi {t.op(f'arith.addi {p}, {size} : index')}, {mask} : index")
    ok = t.op(f"arith.cmpi ugt, {hi}, {lo} : index")
    t(f"scf.if {ok} {{")
    n = t.op(f"arith.index_cast {t.op(f'arith.subi {hi}, {lo} : index')} : index to i64")
    ptr = t.op(f"llvm.inttoptr {t.op(f'arith.index_cast {lo} : index to i64')} : i64 to !llvm.ptr")
    t.op(f"func.call @madvise({ptr}, {n}, {t.op('arith.constant 14 : i32')}) : (!llvm.ptr, i64, i32) -> i32")
    t("}")


def _spec_struct(t: _Text, m: str, n: str, m1: str, nnz: str) -> str:
    s = t.op(f"llvm.mlir.undef : {_SPEC}")
    for path, v in (("0, 0", m), ("0, 1", n), ("1, 0", m1), ("1, 1", nnz), ("1, 2", nnz)):
        c = t.op(f"arith.index_cast {v} : index to i64")
        s = t.op(f"llvm.insertvalue {c}, {s}[{path}] : {_SPEC}")
    return s


def _params(plan: Plan, formats: dict, dtype: str):
    """The function's parameters (in the sparsifier kernel's order) and per role its SSA names."""
    row = dt.TABLE[dtype]
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    names: dict[str, tuple] = {}
    for op, f in formats.items():
        r = plan.role(op)
        if f.is_dense:
            params.append(f"%{r}: memref<?x?x{row.storage}>")
            names[r] = (f"%{r}",)
        else:
            params += [f"%{r}_pos: memref<?x{_ity(f.pos_width)}>", f"%{r}_crd: memref<?x{_ity(f.crd_width)}>",
                       f"%{r}_val: memref<?x{row.storage}>", f"%{r}_spec: {_SPEC}"]
            names[r] = (f"%{r}_pos", f"%{r}_crd", f"%{r}_val")
    return params, names


def _header(plan: Plan, formats: dict, out: Format, dtype: str, parallel: bool) -> tuple[list[str], str]:
    row = dt.TABLE[dtype]
    params, _ = _params(plan, formats, dtype)
    results = f"memref<?x{_ity(out.pos_width)}>, memref<?x{_ity(out.crd_width)}>, memref<?x{row.storage}>, {_SPEC}"
    decl = [MADVISE] if HUGE_PAGES else []
    if parallel:
        decl += ["func.func private @omp_get_thread_num() -> i32",
                "func.func private @omp_get_max_threads() -> i32",
                "func.func private @omp_get_num_threads() -> i32",
                "func.func private @omp_get_num_procs() -> i32"]
    return decl, (f"func.func @kernel({', '.join(params)}) -> ({results}) "
                  f"attributes {{llvm.emit_c_interface}} {{")


def _loop(parallel: bool, iv: str, lo: str, hi: str) -> tuple[str, str]:
    """The row loop's opening line and its terminator (scf.parallel or a serial scf.for)."""
    if parallel:
        return f"scf.parallel ({iv}) = ({lo}) to ({hi}) step (%c1) {{", "  scf.reduce\n}"
    return f"scf.for {iv} = {lo} to {hi} step %c1 {{", "}"


def sddmm(plan: Plan, formats: dict, out: Format, dtype: str, parallel: bool) -> str:
    """The SDDMM kernel (module docstring)."""
    row = dt.TABLE[dtype]
    fa = next(f for op, f in formats.items() if plan.role(op) == "A")
    decl, head = _header(plan, formats, out, dtype, parallel)
    t = _Text()
    t("%c0 = arith.constant 0 : index")
    t("%c1 = arith.constant 1 : index")
    m, n, kk = f"%size_{plan.i}", f"%size_{plan.j}", f"%size_{plan.k}"
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    nnz = t.load_index("%A_pos", m, fa.pos_width)
    cap = t.op(f"arith.maxui {nnz}, %c1 : index")
    pw, cw = out.pos_width, out.crd_width
    t(f"%C_pos = memref.alloc({m1}) : memref<?x{_ity(pw)}>")
    t(f"%C_crd = memref.alloc({cap}) : memref<?x{_ity(cw)}>")
    t(f"%C_val = memref.alloc({cap}) : memref<?x{row.storage}>")
    if HUGE_PAGES:
        huge_pages(t, "%C_crd", f"memref<?x{_ity(cw)}>", cap, cw // 8)
        huge_pages(t, "%C_val", f"memref<?x{row.storage}>", cap, row.numpy.itemsize)
    t.store_index("%c0", "%C_pos", "%c0", pw)
    zero = t.op(_zero(row))
    last_entry = t.op(f"arith.subi {cap}, %c1 : index")
    # this call's out-of-range flag (runtime/_worker.py): a coordinate of A not below n is
    # reported there and its entry skipped, so check=True needs no NumPy pass over A's indices
    flag = t.op(f"llvm.call @{_FLAG}() : () -> !llvm.ptr")
    one32 = t.op("arith.constant 1 : i32")
    # X[k,i] / Y[k,j] stored transposed: a row-major copy first (one parallel pass), so the
    # dot product reads contiguous rows like the untransposed form (and gives its bits)
    xs = _pack(t, "%X", "%Xw", m, kk, row, parallel) if plan.x_t else "%X"
    ys = _pack(t, "%Y", "%Yw", n, kk, row, parallel) if plan.y_t else "%Y"
    opening, closing = _loop(parallel, "%i", "%c0", m)
    t(opening)
    # the body reads A_pos[i] and A_pos[i + 1]: the thread count follows the stored entries
    lo = t.load_index("%A_pos", "%i", fa.pos_width)
    i1 = t.op("arith.addi %i, %c1 : index")
    hi = t.load_index("%A_pos", i1, fa.pos_width)
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
    if _vector_width(plan, row):
        s = _dot_vector(t, xs, ys, row, jv, kk)
    else:
        s = _dot_scalar(t, xs, ys, row, jv, kk, zero)
    v = t.op(_mul(row, a, s))
    t(f"memref.store {v}, %C_val[%p] : memref<?x{row.storage}>")
    t("} else {")
    # atomic (monotonic, as SpMM and passes/guards.py): the row loop's threads may all store it
    t(f"llvm.store {one32}, {flag} atomic monotonic {{alignment = 4 : i64}} : i32, !llvm.ptr")
    t("}")
    t("}")
    t(closing)
    for w in {xs, ys} - {"%X", "%Y"}:
        t(f"memref.dealloc {w} : memref<?x?x{row.storage}>")
    spec = _spec_struct(t, m, n, m1, nnz)
    t(f"return %C_pos, %C_crd, %C_val, {spec} : memref<?x{_ity(pw)}>, memref<?x{_ity(cw)}>, "
      f"memref<?x{row.storage}>, {_SPEC}")
    decl.append(f"llvm.func @{_FLAG}() -> !llvm.ptr")
    params, _ = _params(plan, formats, dtype)
    crd_arg = next(q for q, prm in enumerate(params) if prm.startswith("%A_crd:"))
    head = head.replace("attributes {llvm.emit_c_interface}",
                        f"attributes {{llvm.emit_c_interface, {_SELF_CHECKED} = array<i64: {crd_arg}>}}")
    return _module(decl, head, t.lines)


def _vector_width(plan: Plan, row: dt.DType) -> int:
    """Lanes of SDDMM's vector dot product (one 64-byte vector), or 0 for the scalar loop:
    a float (f32, f64) or integer dtype; complex dtypes keep the scalar loop."""
    if row.kind not in ("float", "int"):
        return 0
    return 64 // row.numpy.itemsize


def _pack(t: _Text, src: str, dst: str, rows: str, kk: str, row: dt.DType, parallel: bool) -> str:
    """``dst[r, k] = src[k, r]``: a row-major copy (``rows`` x ``kk``) of a dense operand
    stored transposed, by a parallel loop over its rows (consecutive rows read neighbouring
    elements of the same ``kk`` lines of ``src``)."""
    ty = f"memref<?x?x{row.storage}>"
    t(f"{dst} = memref.alloc({rows}, {kk}) : {ty}")
    if HUGE_PAGES:
        huge_pages(t, dst, ty, t.op(f"arith.muli {rows}, {kk} : index"), row.numpy.itemsize)
    r = t.fresh("r")
    opening, closing = _loop(parallel, r, "%c0", rows)
    t(opening)
    t(f"scf.for %kt = %c0 to {kk} step %c1 {{")
    v = t.op(f"memref.load {src}[%kt, {r}] : {ty}")
    t(f"memref.store {v}, {dst}[{r}, %kt] : {ty}")
    t("}")
    t(closing)
    return dst


def _dot_scalar(t: _Text, xs: str, ys: str, row: dt.DType, jv: str, kk: str, zero: str) -> str:
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
        return t.op(_mul(row, x, y))
    ty = ", ".join([row.storage] * U)
    t(f"{parts[0]}:{U} = scf.for %k = %c0 to {kmain} step {cu} "
      f"iter_args({', '.join(f'{a_} = {zero}' for a_ in accs)}) -> ({ty}) {{")
    nxt = []
    for u in range(U):
        ku = t.op(f"arith.addi %k, {t.op(f'arith.constant {u} : index')} : index") if u else "%k"
        nxt.append(t.op(_add(row, accs[u], xy_at(ku))))
    t(f"scf.yield {', '.join(nxt)} : {ty}")
    t("}")
    vals = [f"{parts[0]}#{u}" for u in range(U)]
    while len(vals) > 1:
        vals = [t.op(_add(row, vals[q], vals[q + 1])) for q in range(0, len(vals), 2)]
    racc, s = t.fresh("racc"), t.fresh("s")
    t(f"{s} = scf.for %k = {kmain} to {kk} step %c1 iter_args({racc} = {vals[0]}) -> ({row.storage}) {{")
    t(f"scf.yield {t.op(_add(row, racc, xy_at('%k')))} : {row.storage}")
    t("}")
    return s


def _dot_vector(t: _Text, xs: str, ys: str, row: dt.DType, jv: str, kk: str) -> str:
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
        if fl:
            return t.op(f"vector.fma {x}, {y}, {acc} : {vt}")
        return t.op(f"arith.addi {acc}, {t.op(f'arith.muli {x}, {y} : {vt}')} : {vt}")

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
    got = t.fresh("vtail")
    t(f"{got} = scf.if {has} -> ({vt}) {{")
    mask = t.op(f"vector.create_mask {left} : vector<{W}xi1>")
    x = t.op(f"vector.maskedload {xs}[%i, {kfull}], {mask}, {vzero} : {mt}, vector<{W}xi1>, {vt} into {vt}")
    y = t.op(f"vector.maskedload {ys}[{jv}, {kfull}], {mask}, {vzero} : {mt}, vector<{W}xi1>, {vt} into {vt}")
    t(f"scf.yield {fma(x, y, vals[0])} : {vt}")
    t("} else {")
    t(f"scf.yield {vals[0]} : {vt}")
    t("}")
    vals[0] = got
    add = "arith.addf" if fl else "arith.addi"
    while len(vals) > 1:
        vals = [t.op(f"{add} {vals[q]}, {vals[q + 1]} : {vt}") for q in range(0, len(vals), 2)]
    v, w = vals[0], W
    while w > 1:
        h = w // 2
        lo = t.op(f"vector.shuffle {v}, {v} [{', '.join(map(str, range(h)))}] : vector<{w}x{el}>, vector<{w}x{el}>")
        hi = t.op(f"vector.shuffle {v}, {v} [{', '.join(map(str, range(h, w)))}] : vector<{w}x{el}>, vector<{w}x{el}>")
        v = t.op(f"{add} {lo}, {hi} : vector<{h}x{el}>")
        w = h
    return t.op(f"vector.extract {v}[0] : {el} from vector<1x{el}>")


def _module(decl: list[str], head: str, body: list[str]) -> str:
    out = ["module {"] + [f"  {d}" for d in decl] + [f"  {head}"]
    out += [f"    {line}" for ln in body for line in ln.split("\n")]
    out += ["  }", "}"]
    return "\n".join(out) + "\n"


def _prefetch_next(t: "_Text", hi: str, fa: Format, fb: Format, T: str | None) -> None:
    """Prefetch the B row of A's entry ``PREFETCH_AHEAD`` ahead (clamped to A's last entry,
    ``%anz`` - 1: across the row's end, as a thread takes the next rows next): B's rows are
    visited in random order, and the product loop stalled on their first loads."""
    c2 = t.op(f"arith.constant {PREFETCH_AHEAD} : index")
    nx = t.op(f"arith.addi %p, {c2} : index")
    last = t.op("arith.subi %anz, %c1 : index")
    nx2 = t.op(f"arith.minui {nx}, {last} : index")
    kn = t.load_index("%A_crd", nx2, fa.crd_width)
    bn = t.load_index("%B_pos", kn, fb.pos_width)
    t(f"memref.prefetch %B_crd[{bn}], read, locality<3>, data : memref<?x{_ity(fb.crd_width)}>")
    if T is not None:
        t(f"memref.prefetch %B_val[{bn}], read, locality<3>, data : memref<?x{T}>")


def _row_functions(plan: Plan, fa: Format, fb: Format, out: Format, dtype: str) -> list[str]:
    """``@count_row`` (phase 1) and ``@fill_row`` (phase 2) of SpGEMM: one row ``i`` with the
    marker / accumulator slice at ``base`` (a thread's own)."""
    row = dt.TABLE[dtype]
    T = row.storage
    pa, ca, pb, cb = (_ity(fa.pos_width), _ity(fa.crd_width), _ity(fb.pos_width), _ity(fb.crd_width))
    co = _ity(out.crd_width)
    # ---- count
    t = _Text()
    t("%c0 = arith.constant 0 : index")
    t("%c1 = arith.constant 1 : index")
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
    res = t.op(f"scf.if {new} -> (index) {{")
    t(f"  memref.store %stamp, %mark[{at}] : memref<?xindex>")
    inc = t.op("arith.addi %cc, %c1 : index")
    t(f"  scf.yield {inc} : index")
    t("} else {")
    t("  scf.yield %cc : index")
    t("}")
    t(f"scf.yield {res} : index")
    t("}")
    t("scf.yield %c2 : index")
    t("}")
    t("return %cnt : index")
    count = (f"func.func private @count_row(%i: index, %stamp: index, %base: index, %mark: memref<?xindex>, %anz: index, "
             f"%A_pos: memref<?x{pa}>, %A_crd: memref<?x{ca}>, %B_pos: memref<?x{pb}>, "
             f"%B_crd: memref<?x{cb}>) -> index {{")
    fns = [count] + [f"  {ln}" for ln in t.lines] + ["}"]
    # ---- fill
    t = _Text()
    t("%c0 = arith.constant 0 : index")
    t("%c1 = arith.constant 1 : index")
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
    k1 = t.op(f"arith.addi {kv}, %c1 : index")
    blo = t.load_index("%B_pos", kv, fb.pos_width)
    bhi = t.load_index("%B_pos", k1, fb.pos_width)
    t(f"%w2, %lo2, %hi2 = scf.for %q = {blo} to {bhi} step %c1 iter_args(%ww = %w, %lo1 = %lo0, %hi1 = %hi0) "
      f"-> (index, index, index) {{")
    jv = t.load_index("%B_crd", "%q", fb.crd_width)
    b = t.op(f"memref.load %B_val[%q] : memref<?x{T}>")
    prod = t.op(_mul(row, a, b) if plan.a_first else _mul(row, b, a))
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
    t(f"{r1}, {r2}, {r3} = scf.if {new} -> (index, index, index) {{")
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
    t(f"  scf.yield {inc}, {mn}, {mx} : index, index, index")
    t("} else {")
    old = t.op(f"memref.load %acc[{at}] : memref<?x{T}>")
    s = t.op(_add(row, old, prod))
    t(f"  memref.store {s}, %acc[{at}] : memref<?x{T}>")
    t("  scf.yield %ww, %lo1, %hi1 : index, index, index")
    t("}")
    t(f"scf.yield {r1}, {r2}, {r3} : index, index, index")
    t("}")
    t("scf.yield %w2, %lo2, %hi2 : index, index, index")
    t("}")
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
    cond = t.op(f"scf.if {gt} -> (i1) {{")
    qm = t.op("arith.subi %q0, %c1 : index")
    prev = t.op(f"memref.load %C_crd[{qm}] : memref<?x{co}>")
    c = t.op(f"arith.cmpi sgt, {prev}, {key} : {co}")
    t(f"  scf.yield {c} : i1")
    t("} else {")
    t("  scf.yield %false : i1")
    t("}")
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
    sres = t.op(f"scf.if {snz} -> (index) {{")
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
    t(f"scf.if %nt {{")
    t(f"  memref.store {jv_}, %C_val[%w1] {{nontemporal = true}} : memref<?x{T}>")
    t("} else {")
    t(f"  memref.store {jv_}, %C_val[%w1] : memref<?x{T}>")
    t("}")
    vm1 = t.op("arith.subi %v1, %one : i64")
    v2 = t.op(f"arith.andi %v1, {vm1} : i64")
    w3 = t.op("arith.addi %w1, %c1 : index")
    t(f"  scf.yield {v2}, {w3} : i64, index")
    t("}")
    um1 = t.op("arith.subi %u1, %one : i64")
    u2 = t.op(f"arith.andi %u1, {um1} : i64")
    t(f"  scf.yield {u2}, {got}#1 : i64, index")
    t("}")
    t(f"  scf.yield {sgot}#1 : index")
    t("} else {")
    t("  scf.yield %w : index")
    t("}")
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
    t(f"scf.if %nt {{")
    t(f"  memref.store {v}, %C_val[%p] {{nontemporal = true}} : memref<?x{T}>")
    t("} else {")
    t(f"  memref.store {v}, %C_val[%p] : memref<?x{T}>")
    t("}")
    t("}")
    t("}")
    t("return")
    fill = (f"func.func private @fill_row(%i: index, %base: index, %start: index, "
            f"%acc: memref<?x{T}>, %wbase: index, %bm: memref<?xi64>, %sbase: index, %sm: memref<?xi64>, %n: index, %anz: index, %nt: i1, "
            f"%A_pos: memref<?x{pa}>, %A_crd: memref<?x{ca}>, %A_val: memref<?x{T}>, "
            f"%B_pos: memref<?x{pb}>, %B_crd: memref<?x{cb}>, %B_val: memref<?x{T}>, "
            f"%C_crd: memref<?x{co}>, %C_val: memref<?x{T}>) {{")
    fns += [fill] + [f"  {ln}" for ln in t.lines] + ["}"]
    return fns


def spgemm(plan: Plan, formats: dict, out: Format, dtype: str, parallel: bool) -> str:
    """The SpGEMM kernel (module docstring)."""
    row = dt.TABLE[dtype]
    T = row.storage
    fa = next(f for op, f in formats.items() if plan.role(op) == "A")
    fb = next(f for op, f in formats.items() if plan.role(op) == "B")
    decl, head = _header(plan, formats, out, dtype, parallel)
    if parallel:    # the thread count sc.set_num_threads writes (passes/rewrites.py thread_count)
        decl.append("llvm.mlir.global external @sparsecc_num_threads(1 : i32) {addr_space = 0 : i32} : i32")
    decl += _row_functions(plan, fa, fb, out, dtype)
    pa, ca, pb, cb = (_ity(fa.pos_width), _ity(fa.crd_width), _ity(fb.pos_width), _ity(fb.crd_width))
    pw, cw = out.pos_width, out.crd_width
    t = _Text()
    t("%c0 = arith.constant 0 : index")
    t("%c1 = arith.constant 1 : index")
    t("%cm1 = arith.constant -1 : index")
    m, n = f"%size_{plan.i}", f"%size_{plan.j}"
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    if parallel:    # one marker and accumulator per thread
        # the team: sc.set_num_threads's count (the library's global, which the row loops'
        # num_threads reads: passes/rewrites.py thread_count), which may exceed libomp's
        # default; a thread past the workspaces allocated its own for every row (O(n) each)
        a1 = t.op("func.call @omp_get_max_threads() : () -> i32")
        a2 = t.op("func.call @omp_get_num_procs() : () -> i32")
        g = t.op("llvm.mlir.addressof @sparsecc_num_threads : !llvm.ptr")
        a0 = t.op(f"llvm.load {g} : !llvm.ptr -> i32")
        a3 = t.op(f"arith.maxsi {t.op(f'arith.maxsi {a1}, {a2} : i32')}, {a0} : i32")
        a4 = t.op(f"arith.index_cast {a3} : i32 to index")
        nt = t.op(f"arith.maxsi {a4}, %c1 : index")
    else:
        nt = "%c1"
    size = t.op(f"arith.muli {nt}, {n} : index")
    size1 = t.op(f"arith.maxui {size}, %c1 : index")
    t(f"%mark = memref.alloc({size1}) : memref<?xindex>")
    t(f"%acc = memref.alloc({size1}) : memref<?x{T}>")
    t(f"scf.for %x = %c0 to {size} step %c1 {{")
    t("  memref.store %cm1, %mark[%x] : memref<?xindex>")
    t("}")
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
    t(f"%C_pos = memref.alloc({m1}) : memref<?x{_ity(pw)}>")
    t.store_index("%c0", "%C_pos", "%c0", pw)
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
    opening, closing = _loop(parallel, "%i", "%c0", m)
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
    # the prefix sum (serial: O(rows))
    t("scf.for %i = %c0 to " + m + " step %c1 {")
    i1 = t.op("arith.addi %i, %c1 : index")
    u = t.load_index("%C_pos", "%i", pw)
    w = t.load_index("%C_pos", i1, pw)
    s = t.op(f"arith.addi {u}, {w} : index")
    t.store_index(s, "%C_pos", i1, pw)
    t("}")
    nnz = t.load_index("%C_pos", m, pw)
    cap = t.op(f"arith.maxui {nnz}, %c1 : index")
    t(f"%C_crd = memref.alloc({cap}) : memref<?x{_ity(cw)}>")
    t(f"%C_val = memref.alloc({cap}) : memref<?x{T}>")
    if HUGE_PAGES:
        huge_pages(t, "%C_crd", f"memref<?x{_ity(cw)}>", cap, cw // 8)
        huge_pages(t, "%C_val", f"memref<?x{T}>", cap, row.numpy.itemsize)
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
        if not NONTEMPORAL:
            nts = t.op("arith.constant false")
        t(f"func.call @fill_row(%i, {base}, {start}, {acc}, {wbase}, {bm}, {sbase}, {sm}, {n}, {anz}, {nts}, "
          f"%A_pos, %A_crd, %A_val, "
          f"%B_pos, %B_crd, %B_val, %C_crd, %C_val) : (index, index, index, "
          f"memref<?x{T}>, index, memref<?xi64>, index, memref<?xi64>, index, index, i1, memref<?x{pa}>, memref<?x{ca}>, memref<?x{T}>, memref<?x{pb}>, memref<?x{cb}>, "
          f"memref<?x{T}>, memref<?x{_ity(cw)}>, memref<?x{T}>) -> ()")
    thread_slice(fill)
    t(closing)
    if NONTEMPORAL:     # this thread's non-temporal stores visible before the result is handed on
        t('llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()')
    t("memref.dealloc %mark : memref<?xindex>")
    t("memref.dealloc %bm : memref<?xi64>")
    t("memref.dealloc %sm : memref<?xi64>")
    t(f"memref.dealloc %acc : memref<?x{T}>")
    spec = _spec_struct(t, m, n, m1, nnz)
    t(f"return %C_pos, %C_crd, %C_val, {spec} : memref<?x{_ity(pw)}>, memref<?x{_ity(cw)}>, "
      f"memref<?x{T}>, {_SPEC}")
    return _module(decl, head, t.lines)


def emit(plan: Plan, formats: dict, out: Format, dtype: str, parallel: bool) -> str:
    """The MLIR module of a recognised statement (:func:`match`); ``formats`` by operand name
    (widths resolved), ``parallel``: the rows in ``scf.parallel`` (else serial ``scf.for``)."""
    return (sddmm if plan.kind == "sddmm" else spgemm)(plan, formats, out, dtype, parallel)
