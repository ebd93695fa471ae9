"""Structural kernels: slices, index selections, reshapes and concatenations of sparse tensors.

The expression emitter (``function.py``) builds ``linalg.generic`` ops from index notation; a
slice, a reshape or a concatenation moves stored entries to new coordinates and is no such
op.  One MLIR function here does it for any rank and format (``gather_kernel``):

1. each source operand may be cut by ``tensor.extract_slice`` with MLIR's sparse slice
   encodings (``dimSlices``: offset, size and stride per dimension, all dynamic), or - what
   sparsecc uses, see :class:`Source` - by the same selection tested on each entry;
2. a ``sparse_tensor.foreach`` visits the stored entries of each source in storage order
   and computes the entry's output coordinates with index arithmetic (dropping or adding
   unit dimensions, adding an offset for a concatenation, or linearizing and
   delinearizing for a reshape, row-major as NumPy's ``order='C'``);
3. ``tensor.insert`` stores the value there: straight into the result when the inserts come
   in the result's storage order, else into an unordered COO tensor that a
   ``sparse_tensor.convert`` then sorts into the result's format.

Only stored entries move: an unstored entry stays unstored, a stored zero stays stored.
MLIR's own ops for this were tried first (MLIR 22): ``tensor.expand_shape`` of a sparse
tensor with a dynamic ``output_shape`` gives wrong level sizes and coordinates,
``tensor.collapse_shape`` of a CSC tensor fails ("ConvertOp not staged"),
``sparse_tensor.concatenate`` refuses dynamic shapes, and ``extract_slice`` of a tensor
whose levels are not in dimension order aborts (``srcEnc.isIdentity()``); so sources are
passed in dimension order (a CSC matrix as the CSR storage of its transpose).

Calling convention (as ``signature.py``'s, ``docs/architecture.md``): ``index`` arguments first -
the result's size per dimension, then for each source its slice (offset, size, stride per
dimension) and its coordinate parameters - then one tensor per source; the sparse result
is returned.  Every dimension is dynamic, so one compile serves every shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as dt
from ..errors import InternalError
from ..formats import Format
from .constants import const_text


@dataclass(frozen=True)
class Source:
    """One operand of a gather: its format (levels in dimension order), which of its
    stored entries it keeps, and how a stored entry's coordinates map to the result's.

    ``pick``: for each result dimension, the source dimension whose coordinate it takes, or
    ``None`` for a new unit dimension (coordinate 0); with ``offsets``, each result
    coordinate also gets an ``index`` argument added (concatenation).
    ``pick=None``: a reshape - the coordinates are linearized in the source's shape
    (row-major) and delinearized in the result's.
    ``nonzero``: skip stored entries whose value is zero (an ``scf.if`` around the insert).
    ``filtered``: a slice (offset, size, stride per dimension) as a test on every stored
    entry's coordinates, not ``tensor.extract_slice``: MLIR 22's sliced iteration loses
    entries (found by the tests: ``T[:, 2:3]`` of a 3-d COO tensor came back empty,
    and ``A[:, -3:]`` of a CSR matrix lost most of its entries).
    """

    fmt: Format
    filtered: bool = False      # a slice by a test on each stored entry's coordinates
    pick: tuple[int | None, ...] | None = None
    offsets: bool = False
    nonzero: bool = False       # insert only entries whose value is not zero (prune)


def _ttype(rank: int, dtype: str, enc: str | None) -> str:
    row = dt.TABLE[dtype]
    shape = "x".join(["?"] * rank)
    t = f"{shape}x{row.storage}" if rank else row.storage
    return f"tensor<{t}, {enc}>" if enc else f"tensor<{t}>"


def _not_equal(row: dt.DType, a: str, b: str) -> str:
    if row.kind == "complex":
        return f"complex.neq {a}, {b} : {row.storage}"
    if row.kind == "float":
        return f"arith.cmpf une, {a}, {b} : {row.storage}"     # NaN is kept (NaN != 0)
    return f"arith.cmpi ne, {a}, {b} : {row.storage}"


def unordered_coo(rank: int, pos: int, crd: int) -> Format:
    """A COO format whose inserts may come in any order (sorted by a later convert)."""
    if rank == 1:
        levels = ("compressed(nonunique, nonordered)",)
    else:
        levels = ("compressed(nonunique, nonordered)",) + ("singleton(nonunique, nonordered)",) * (rank - 2) \
            + ("singleton(nonordered)",)
    return Format(levels, None, None, pos, crd)


def gather_kernel(sources: tuple[Source, ...], out: Format, dtype: str, ordered: bool) -> str:
    """The MLIR module of one gather (see the module docstring).  ``ordered``: the stored
    entries arrive in the result's storage order, so they are inserted into it directly."""
    rout = out.rank
    build = out if ordered else unordered_coo(rout, out.pos_width, out.crd_width)
    aliases = [f"#out = {out.encoding()}"]
    if not ordered:
        aliases.append(f"#build = {build.encoding()}")
    out_t = _ttype(rout, dtype, "#out")
    build_t = _ttype(rout, dtype, "#build" if not ordered else "#out")
    params = [f"%n{d}: index" for d in range(rout)]
    tensors = []
    body = []
    sizes = ", ".join(f"%n{d}" for d in range(rout))
    body.append(f"%init = tensor.empty({sizes}) : {build_t}")
    acc = "%init"
    n = [0]

    def fresh(stem: str) -> str:
        n[0] += 1
        return f"%{stem}{n[0]}"

    consts: dict[int, str] = {}

    def const(v: int) -> str:
        if v not in consts:
            consts[v] = f"%c{v}"
            body.insert(0, f"%c{v} = arith.constant {v} : index")
        return consts[v]

    for s, src in enumerate(sources):
        rin = src.fmt.rank
        aliases.append(f"#src{s} = {src.fmt.encoding()}")
        src_t = _ttype(rin, dtype, f"#src{s}")
        tensors.append(f"%a{s}: {src_t}")
        it, it_t = f"%a{s}", src_t
        if src.filtered:
            params += [f"%{k}{s}_{d}: index" for d in range(rin) for k in ("o", "s", "t")]
        if src.offsets:
            params += [f"%off{s}_{d}: index" for d in range(rout)]
        inner: list[str] = []
        crd = [f"%i{s}_{d}" for d in range(rin)]
        conds: list[str] = []
        if src.filtered:
            raw, crd = crd, []
            for d in range(rin):
                diff, span, q, r = fresh("x"), fresh("x"), fresh("x"), fresh("x")
                lo, hi, ex, both, ok = fresh("b"), fresh("b"), fresh("b"), fresh("b"), fresh("b")
                inner += [f"{diff} = arith.subi {raw[d]}, %o{s}_{d} : index",
                          f"{span} = arith.muli %s{s}_{d}, %t{s}_{d} : index",
                          f"{q} = arith.divsi {diff}, %t{s}_{d} : index",
                          f"{r} = arith.remsi {diff}, %t{s}_{d} : index",
                          f"{lo} = arith.cmpi sge, {diff}, {const(0)} : index",
                          f"{hi} = arith.cmpi slt, {diff}, {span} : index",
                          f"{ex} = arith.cmpi eq, {r}, {const(0)} : index",
                          f"{both} = arith.andi {lo}, {hi} : i1",
                          f"{ok} = arith.andi {both}, {ex} : i1"]
                conds.append(ok)
                crd.append(q)
        if src.pick is not None:
            outc = []
            for d, p in enumerate(src.pick):
                c = const(0) if p is None else crd[p]
                if src.offsets:
                    v = fresh("x")
                    inner.append(f"{v} = arith.addi {c}, %off{s}_{d} : index")
                    c = v
                outc.append(c)
        else:   # reshape: linearize in the source's shape, delinearize in the result's
            dims = []
            for d in range(rin):
                v = fresh("dim")
                body.append(f"{v} = tensor.dim {it}, {const(d)} : {it_t}")
                dims.append(v)
            lin = crd[0]
            for d in range(1, rin):
                m, a = fresh("x"), fresh("x")
                inner.append(f"{m} = arith.muli {lin}, {dims[d]} : index")
                inner.append(f"{a} = arith.addi {m}, {crd[d]} : index")
                lin = a
            outc = [None] * rout
            rest = lin
            for d in reversed(range(rout)):
                if d == 0:
                    outc[0] = rest
                    break
                q, r = fresh("x"), fresh("x")
                inner.append(f"{r} = arith.remui {rest}, %n{d} : index")
                inner.append(f"{q} = arith.divui {rest}, %n{d} : index")
                outc[d] = r
                rest = q
        row = dt.TABLE[dtype]
        res = fresh("r")
        block_args = ", ".join([f"%i{s}_{d}: index" for d in range(rin)] + [f"%val{s}: {row.storage}", f"%acc{s}: {build_t}"])
        body.append(f"{res} = sparse_tensor.foreach in {it} init({acc}) : {it_t}, {build_t} -> {build_t} do {{")
        body.append(f"^bb0({block_args}):")
        body += [f"  {line}" for line in inner]
        ins = fresh("ins")
        insert = f"{ins} = tensor.insert %val{s} into %acc{s}[{', '.join(outc)}] : {build_t}"
        if src.nonzero:
            z, cond = fresh("zero"), fresh("nz")
            body.append(f"  {z} = {const_text(0, row)[0]}")
            body.append(f"  {cond} = {_not_equal(row, f'%val{s}', z)}")
            conds.append(cond)
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                v = fresh("b")
                body.append(f"  {v} = arith.andi {cond}, {c} : i1")
                cond = v
            got = fresh("kept")
            body.append(f"  {got} = scf.if {cond} -> ({build_t}) {{")
            body.append(f"    {insert}")
            body.append(f"    scf.yield {ins} : {build_t}")
            body.append("  } else {")
            body.append(f"    scf.yield %acc{s} : {build_t}")
            body.append("  }")
            ins = got
        else:
            body.append(f"  {insert}")
        body.append(f"  sparse_tensor.yield {ins} : {build_t}")
        body.append("}")
        acc = res
    fin = fresh("fin")
    body.append(f"{fin} = sparse_tensor.load {acc} hasInserts : {build_t}")
    if not ordered:
        conv = fresh("conv")
        body.append(f"{conv} = sparse_tensor.convert {fin} : {build_t} to {out_t}")
        fin = conv
    body.append(f"return {fin} : {out_t}")
    lines = list(aliases)
    lines.append("module {")
    lines.append(f"  func.func @kernel({', '.join(params + tensors)}) -> {out_t} "
                 f"attributes {{ llvm.emit_c_interface }} {{")
    lines += [f"    {b}" for b in body]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"
