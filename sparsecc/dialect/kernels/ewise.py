"""Element-wise maps and merges of one or two CSR (or CSC) operands, hand-written.

``C[i,j] = f(A[i,j], B[i,j], s, ...)`` with a sparse result of the operands' order, and the
row reduction ``v[i] = sum[j](f(A[i,j], B[i,j], ...))`` with a dense result, for any
element-wise body ``f`` (arithmetic, comparisons, ``min``/``max``/``pow``, math functions,
conversions; constants and 0-d operands ``s``).  MLIR 22's sparsifier co-iterates two
compressed rows with a branchy ``scf.while`` lattice and writes a sparse result by insertion
(serial); here each row is one merge (``scf.parallel`` over the rows):

* which entries take part follows from the body (:func:`vanishes`): an entry stored in A
  only counts when ``f(a, 0)`` is not structurally 0, one in B only when ``f(0, b)`` is not;
  entries stored in both always count (the value of a point is ``f`` with 0 for the operand
  that does not store it: NumPy's value on dense copies);
* a result with A's pattern (``2 * A``, ``exp(2*A + 1) * B`` has B's) copies that operand's
  positions and coordinates and computes one value per entry, looking the other operand's
  value up by a merge; a union or intersection counts each row first (phase 1), then a
  prefix sum, then writes (phase 2); a row reduction sums the row's values.

Entries stored in both are stored even where their value is 0 (as the sparsifier does).
Operands reach the kernel canonical (sorted, no duplicates: ``runtime/operands.py``).
Each row is written by one thread in a fixed order: results do not depend on the thread
count.  The kernel has the sparsifier kernel's arguments and results (``docs/architecture.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...expr import BINARY, Access, Binary, Const, Reduce, Statement, Unary, accesses, children, fold, infer_dtypes
from ...formats import Format
from ...kernel_abi import TargetFacts
from ...patterns import keeps_zero, zero_behaviour
from ..constants import body_type, const_text, row_of
from ..regions import Body
from .emit import (Text, alloc_entries, csr_params, csr_results, huge_page_decls, if_yield, ity, kernel_head, loop,
                   module, prefix_sum, return_csr, row_bounds)
from .recognize import is_compressed

_KINDS = ("bool", "int", "float", "complex")
#: functions cheap enough that a merge computes every point's value and selects one
_CHEAP_FNS = ("neg", "abs", "conj")
_NO_OPS = ("pair", "first", "second")


@dataclass(frozen=True)
class EwisePlan:
    kind: str                       # "ewise"
    body: object                    # the folded element-wise body
    sparse: tuple[str, ...]         # the sparse operands: A (and B)
    order: tuple[int, int]          # the operands' (and a sparse result's) dimension order
    index_order: tuple[str, ...]
    reduce: bool                    # v[outer] = sum[inner](body), a dense result
    keep: tuple[bool, bool]         # entries stored in A only / in B only take part
    out_dtype: str
    cheap: bool                     # no math function: compute every point's value, select
    rows: tuple = ()                # subexpressions computed once a row (row_invariants)


def vanishes(e, absent: frozenset) -> bool | None:
    """Whether ``e`` is 0 wherever the operands in ``absent`` store nothing, whatever the
    stored values of the others (None: a node this kernel does not take)."""
    if isinstance(e, Access):
        return e.tensor in absent
    if isinstance(e, Const):
        return bool(e.value == 0)
    if isinstance(e, Unary):
        v = vanishes(e.arg, absent)
        return None if v is None else (v and keeps_zero(e.fn))
    if not isinstance(e, Binary) or e.op in _NO_OPS or e.op not in BINARY:
        return None
    lv, rv = vanishes(e.left, absent), vanishes(e.right, absent)
    if lv is None or rv is None:
        return None
    if e.op in ("+", "-"):
        return lv and rv
    if e.op == "*":
        return lv or rv
    if e.op == "/":    # 0 / y is 0 only where y is not 0: y must read no absent operand
        if isinstance(e.right, Const) and e.right.value == 0:
            return False   # 0 / 0 is NaN (NumPy's dense value): the pattern is not kept
        return lv and not any(a.tensor in absent for a in accesses(e.right))
    for side, other, first in ((e.right, lv, True), (e.left, rv, False)):
        if isinstance(side, Const):          # op(0, c) (or op(c, 0)) decides
            fn = BINARY[e.op]
            with np.errstate(all="ignore"):
                try:
                    z = fn(0, side.value) if first else fn(side.value, 0)
                except (ValueError, ZeroDivisionError):
                    z = fn(0.0, side.value) if first else fn(side.value, 0.0)
            return other and bool(np.asarray(z) == 0)
    nonzero, left_kills, right_kills = zero_behaviour(e.op)
    return (lv and rv and not nonzero) or (lv and left_kills) or (rv and right_kills)


def _cheap(e, real: bool, rows: tuple = ()) -> bool:
    """No call to a math function, no loop (``pow(x, 2)`` of reals is ``x * x`` to LLVM),
    outside the once-a-row values ``rows``."""
    if e in rows:
        return True
    if isinstance(e, Unary):
        return (e.fn in _CHEAP_FNS or e.fn.startswith("astype_")) and _cheap(e.arg, real, rows)
    if isinstance(e, Binary):
        square = e.op == "pow" and real and isinstance(e.right, Const) and e.right.value == 2
        return (square or e.op not in ("pow", "/", "//", "%")) and _cheap(e.left, real, rows) and \
            _cheap(e.right, real, rows)
    return True


def match(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
          out_format: Format | None) -> EwisePlan | None:
    """The element-wise kernel's plan for this specialization, or None."""
    if any(dt.TABLE[d].kind not in _KINDS for d in dtypes if d in dt.TABLE):
        return None
    fmts = dict(zip(stmt.operands, formats))
    e = fold(stmt.expr)
    reduce = isinstance(e, Reduce)
    if reduce:
        if e.op != "sum" or e.identity is not None or len(e.indices) != 1 or len(stmt.indices) != 1 or \
                (out_format is not None and not out_format.is_dense):
            return None
        body = e.body
    elif len(stmt.indices) == 2 and out_format is not None and not out_format.is_dense:
        body = e
    else:
        return None
    accs = accesses(body)
    if vanishes(body, frozenset()) is None or not accs:
        return None
    sparse = tuple(dict.fromkeys(a.tensor for a in accs if len(a.indices) == 2))
    if not 1 <= len(sparse) <= 2 or set(a.tensor for a in accs) != set(stmt.operands):
        return None
    idx = next(a.indices for a in accs if len(a.indices) == 2)
    if idx[0] == idx[1] or any(len(a.indices) == 2 and a.indices != idx for a in accs):
        return None
    order = tuple(fmts[sparse[0]].order or (0, 1))
    if order not in ((0, 1), (1, 0)) or not all(is_compressed(fmts[s], order) for s in sparse):
        return None
    outer, inner = idx[order[0]], idx[order[1]]
    # besides the sparse operands: 0-d operands, and dense vectors along the outer index
    # (read once a row: ``L[i,k] + lam * exp(u[i]) * Id[i,k]``, a Jacobian's diagonal term)
    for a in accs:
        if a.tensor in sparse:
            continue
        f = fmts[a.tensor]
        if not (f.is_dense and f.rank == len(a.indices) and a.indices in ((), (outer,))):
            return None
    if reduce and (tuple(stmt.indices) != (outer,) or tuple(e.indices) != (inner,)):
        return None
    if not reduce and (tuple(stmt.indices) != idx or not is_compressed(out_format, order)):
        return None
    folded = Statement(stmt.output, stmt.indices, e, stmt.operands)
    out_dtype = infer_dtypes(folded, {k: np.dtype(v) for k, v in zip(stmt.operands, dtypes)})[e]
    if out_dtype.name not in dt.TABLE or (reduce and dt.TABLE[out_dtype.name].kind == "bool"):
        return None
    if not vanishes(body, frozenset(sparse)):      # a full pattern: not this kernel's
        return None
    if len(sparse) == 1:
        keep = (True, False)
    else:
        keep = (not vanishes(body, frozenset(sparse[1:])), not vanishes(body, frozenset(sparse[:1])))
    order_ix = tuple(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))
    rows = row_invariants(body, frozenset(sparse))
    return EwisePlan("ewise", body, sparse, order, order_ix, reduce, keep, out_dtype.name,
                     _cheap(body, dt.TABLE[out_dtype.name].kind == "float", rows), rows)


def row_invariants(e, sparse: frozenset) -> tuple:
    """The largest subexpressions of ``e`` that read a dense vector (along the outer index)
    and no sparse operand: computed once a row, before the row's entries."""
    got: list = []

    def visit(x):
        accs = accesses(x)
        if accs and any(a.indices for a in accs) and not any(a.tensor in sparse for a in accs):
            if x not in got:
                got.append(x)
            return
        for c in children(x):
            visit(c)
    visit(e)
    return tuple(got)


# ------------------------------------------------------------------------------ MLIR text
def emit(plan: EwisePlan, formats: dict, out: Format | None, dtype: str, parallel: bool,
         facts: TargetFacts, stmt: Statement, dtypes: tuple[str, ...], values: bool = False) -> str:
    """The MLIR module of the kernel; ``formats`` by operand name (widths resolved).
    ``values``: the values-only kernel of a sparse result whose pattern is known (a
    derivative's, ``derivatives/values.py``): two more parameters, the pattern's positions
    ``%C_pos`` and the values ``%C_val`` it fills in the pattern's order; nothing allocated,
    no coordinate written, no result.  The caller guarantees the pattern is the one these
    operands' patterns give (every write lands inside ``%C_val``)."""
    if values and (plan.reduce or out is None):
        raise ValueError("a values-only kernel is for a sparse result")
    opdt = dict(zip(stmt.operands, dtypes))
    folded = Statement(stmt.output, stmt.indices, plan.body, stmt.operands)
    node_dtypes = infer_dtypes(folded, {k: np.dtype(v) for k, v in opdt.items()})
    orow = dt.TABLE[plan.out_dtype]
    OT = orow.storage
    A = plan.sparse[0]
    B = plan.sparse[1] if len(plan.sparse) == 2 else None
    role = {A: "A"} | ({B: "B"} if B else {})
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    slot = {op: k for k, op in enumerate(formats)}     # (operand names need not be MLIR names)
    for op, f in formats.items():
        T = dt.TABLE[opdt[op]].storage
        params += csr_params(role[op], f, T) if op in role else [f"%s{slot[op]}: memref<{'?x' * f.rank}{T}>"]
    if plan.reduce:
        params.append(f"%out_m: memref<?x{OT}>")
    if values:
        params += [f"%C_pos: memref<?x{ity(out.pos_width)}>", f"%C_val: memref<?x{OT}>"]
    head = kernel_head(params, None if plan.reduce or values else csr_results(out, OT))
    t = Text()
    t.index_constants()
    outer_ix = plan.index_order.index(_outer(plan, stmt))
    dims = [f"%size_{ix}" for ix in plan.index_order]
    m, n = dims[outer_ix], dims[1 - outer_ix]
    m1 = t.op(f"arith.addi {m}, %c1 : index")
    body = _RowBody(node_dtypes, sparse_loop=False)
    body.prefix = "e"
    scalars = {}
    for a in accesses(plan.body):
        if not a.indices and a.tensor not in scalars:
            scalars[a.tensor] = t.op(f"memref.load %s{slot[a.tensor]}[] : memref<{dt.TABLE[opdt[a.tensor]].storage}>")
    zeros = {op: t.op(const_text(0, dt.TABLE[opdt[op]])[0]) for op in plan.sparse}
    const_at = len(t.lines)

    def value(vals: dict) -> str:
        """The body's value (in the result dtype) with ``vals`` for the sparse operands."""
        body.lines = []
        body.args = {a: (vals[a.tensor] if a.tensor in vals else scalars[a.tensor]) for a in accesses(plan.body)
                     if a.tensor in vals or not a.indices}
        v = body.value(plan.body, orow)
        t.lines.extend(body.lines)
        return v

    def row_prelude() -> None:
        """At the top of a row loop: the once-a-row values (dense vectors read at ``%i``)."""
        body.pre = {}
        if not plan.rows:
            return
        body.lines = []
        body.args = {}
        for a in accesses(plan.body):
            if a.indices and a.tensor not in plan.sparse:
                body.args[a] = t.op(f"memref.load %s{slot[a.tensor]}[%i] : "
                                    f"memref<?x{dt.TABLE[opdt[a.tensor]].storage}>")
            elif not a.indices:
                body.args[a] = scalars[a.tensor]
        pre = {r: body.value(r) for r in plan.rows}
        t.lines.extend(body.lines)
        body.pre = pre

    fa = formats[A]
    fb = formats[B] if B else None
    T_A = dt.TABLE[opdt[A]].storage
    T_B = dt.TABLE[opdt[B]].storage if B else None
    opening, closing = loop(parallel, "%i", "%c0", m)
    driver = None                       # the operand whose pattern the result has
    if B is None or plan.keep == (True, False):
        driver = "A"
    elif plan.keep == (False, True):
        driver = "B"
    acc_zero = t.op(const_text(0, orow)[0]) if plan.reduce else None

    def bounds(r: str, f: Format):
        lo, _, hi = row_bounds(t, f"%{r}_pos", "%i", f.pos_width)
        return lo, hi

    if not plan.reduce and not values:
        t(f"%C_pos = memref.alloc({m1}) : memref<?x{ity(out.pos_width)}>")
    if driver is not None:
        D, fd = driver, (fa if driver == "A" else fb)
        if not plan.reduce:
            base = t.load_index(f"%{D}_pos", "%c0", fd.pos_width)
            nnz = t.op(f"arith.subi {t.load_index(f'%{D}_pos', m, fd.pos_width)}, {base} : index")
            if values:
                end = t.op(f"arith.addi {base}, {nnz} : index")
        if not plan.reduce and not values:
            cap = t.op(f"arith.maxui {nnz}, %c1 : index")
            alloc_entries(t, cap, out, orow, facts)
            t(f"scf.for %q = %c0 to {m1} step %c1 {{")
            t.store_index(t.op(f"arith.subi {t.load_index(f'%{D}_pos', '%q', fd.pos_width)}, {base} : index"),
                          "%C_pos", "%q", out.pos_width)
            t("}")
            # the coordinates: one flat copy (vectorised)
            end = t.op(f"arith.addi {base}, {nnz} : index")
            t(f"scf.for %p = {base} to {end} step %c1 {{")
            w = t.op(f"arith.subi %p, {base} : index")
            t.store_index(t.load_index(f"%{D}_crd", "%p", fd.crd_width), "%C_crd", w, out.crd_width)
            t("}")
        if B is None and not plan.reduce and not plan.rows:     # a map: the values in one flat loop too
            _loop_values(t, plan, base, end, lambda p: value({A: t.op(f"memref.load %A_val[{p}] : "
                                                                       f"memref<?x{T_A}>")}),
                         OT, orow, acc_zero, base)
            _finish(t, values, m, n, m1, nnz, out, OT)
            t.lines[const_at:const_at] = body.hoisted
            return module(huge_page_decls(facts), head, t.lines)
        t(opening)
        row_prelude()
        dlo, dhi = bounds(D, fd)
        if B is None:
            acc = _loop_values(t, plan, dlo, dhi, lambda p: value({A: t.op(f"memref.load %A_val[{p}] : "
                                                                            f"memref<?x{T_A}>")}),
                               OT, orow, acc_zero, base if not plan.reduce else None)
        else:
            O, fo, T_O, T_D = ("B", fb, T_B, T_A) if D == "A" else ("A", fa, T_A, T_B)
            olo, ohi = bounds(O, fo)
            names = {"A": A, "B": B}
            acc = _driven(t, plan, D, O, fd, fo, T_D, T_O, dlo, dhi, olo, ohi, names, zeros, value, OT, orow,
                          acc_zero, base if not plan.reduce else None)
        if plan.reduce:
            t(f"memref.store {acc}, %out_m[%i] : memref<?x{OT}>")
        t(closing)
        if plan.reduce:
            t("return")
        else:
            _finish(t, values, m, n, m1, nnz, out, OT)
    else:
        _merge_kernel(t, plan, fa, fb, T_A, T_B, A, B, zeros, value, OT, orow, opening, closing, bounds, m, n, m1,
                      out, facts, acc_zero, row_prelude, values)
    t.lines[const_at:const_at] = body.hoisted
    decls = huge_page_decls(facts) if not plan.reduce else []
    return module(decls, head, t.lines)


class _RowBody(Body):
    """A body whose once-a-row subexpressions (``pre``: node -> SSA value) are read, not
    recomputed."""

    pre: dict = {}

    def value(self, e, want=None):
        v = self.pre.get(e)
        if v is None:
            return super().value(e, want)
        row = row_of(self.node_dtypes[e])
        return v if want is None or want.name == row.name else self.cast(v, row, want)


def _outer(plan: EwisePlan, stmt: Statement) -> str:
    idx = next(a.indices for a in accesses(plan.body) if len(a.indices) == 2)
    return idx[plan.order[0]]


def _add(row: dt.DType, a: str, b: str) -> str:
    op = {"float": "arith.addf", "int": "arith.addi", "complex": "complex.add"}[row.kind]
    return f"{op} {a}, {b} : {row.storage}"


def _loop_values(t: Text, plan, lo, hi, val, OT, orow, acc_zero, base):
    """A loop over one operand's row entries: their values stored (``base``: the result's
    first position) or summed (returns the sum)."""
    if plan.reduce:
        acc = t.fresh("acc")
        t(f"{acc} = scf.for %p = {lo} to {hi} step %c1 iter_args(%s = {acc_zero}) -> ({OT}) {{")
        v = val("%p")
        t(f"scf.yield {t.op(_add(orow, '%s', v))} : {OT}")
        t("}")
        return acc
    t(f"scf.for %p = {lo} to {hi} step %c1 {{")
    v = val("%p")
    w = t.op(f"arith.subi %p, {base} : index")
    t(f"memref.store {v}, %C_val[{w}] : memref<?x{OT}>")
    t("}")
    return None


def _driven(t, plan, D, O, fd, fo, T_D, T_O, dlo, dhi, olo, ohi, names, zeros, value, OT, orow, acc_zero, base):
    """The driver's entries in order; the other operand's row is walked alongside (its value
    where it stores the same coordinate, else 0)."""
    acc_t = f", {OT}" if plan.reduce else ""
    init = f", %s = {acc_zero}" if plan.reduce else ""
    res = t.fresh("dr")
    t(f"{res}:{2 if plan.reduce else 1} = scf.for %p = {dlo} to {dhi} step %c1 iter_args(%po = {olo}{init}) "
      f"-> (index{acc_t}) {{")
    j = t.load_index(f"%{D}_crd", "%p", fd.crd_width)
    # advance the other operand to the first coordinate >= j
    adv = t.fresh("adv")
    t(f"{adv} = scf.while (%x = %po) : (index) -> index {{")
    inr = t.op(f"arith.cmpi ult, %x, {ohi} : index")
    lt = if_yield(t, inr, "i1", lambda: t.op(f"arith.cmpi ult, {t.load_index(f'%{O}_crd', '%x', fo.crd_width)}, "
                                             f"{j} : index"),
                  lambda: t.op("arith.constant false"))
    t(f"scf.condition({lt}) %x : index")
    t("} do {")
    t("^bb0(%y: index):")
    t(f"scf.yield {t.op('arith.addi %y, %c1 : index')} : index")
    t("}")
    inr = t.op(f"arith.cmpi ult, {adv}, {ohi} : index")
    eq = if_yield(t, inr, "i1", lambda: t.op(f"arith.cmpi eq, {t.load_index(f'%{O}_crd', adv, fo.crd_width)}, "
                                             f"{j} : index"),
                  lambda: t.op("arith.constant false"))
    ov = if_yield(t, eq, T_O, lambda: t.op(f"memref.load %{O}_val[{adv}] : memref<?x{T_O}>"),
                  lambda: zeros[names[O]])
    dv = t.op(f"memref.load %{D}_val[%p] : memref<?x{T_D}>")
    v = value({names[D]: dv, names[O]: ov})
    if plan.reduce:
        t(f"scf.yield {adv}, {t.op(_add(orow, '%s', v))} : index, {OT}")
    else:
        w = t.op(f"arith.subi %p, {base} : index")
        t(f"memref.store {v}, %C_val[{w}] : memref<?x{OT}>")
        t(f"scf.yield {adv} : index")
    t("}")
    return f"{res}#1" if plan.reduce else None


def _merge_kernel(t, plan, fa, fb, T_A, T_B, A, B, zeros, value, OT, orow, opening, closing, bounds, m, n, m1, out,
                  facts, acc_zero, row_prelude, values):
    """A union (both ``keep``) or an intersection (neither): count, prefix sum, write; or sum
    (``values``: the values alone, at the known pattern's positions)."""
    union = plan.keep == (True, True)
    sparse_out = not plan.reduce
    nnz = None
    if sparse_out and not values:
        pw = out.pos_width
        t.store_index("%c0", "%C_pos", "%c0", pw)
        t(opening)                                 # phase 1: each row's size
        alo, ahi = bounds("A", fa)
        blo, bhi = bounds("B", fb)
        res = _merge(t, fa, fb, alo, ahi, blo, bhi, "%c0", "index",
                     lambda qa, qb, le, ge, eq, acc: t.op(f"arith.addi {acc}, {_as_index(t, eq)} : index"))
        if union:
            la = t.op(f"arith.subi {ahi}, {alo} : index")
            lb = t.op(f"arith.subi {bhi}, {blo} : index")
            cnt = t.op(f"arith.subi {t.op(f'arith.addi {la}, {lb} : index')}, {res}#2 : index")
        else:
            cnt = f"{res}#2"
        t.store_index(cnt, "%C_pos", t.op("arith.addi %i, %c1 : index"), pw)
        t(closing)
        nnz = prefix_sum(t, m, pw)
        cap = t.op(f"arith.maxui {nnz}, %c1 : index")
        alloc_entries(t, cap, out, orow, facts)
    t(opening)
    row_prelude()
    alo, ahi = bounds("A", fa)
    blo, bhi = bounds("B", fb)
    start = row_bounds(t, "%C_pos", "%i", out.pos_width)[0] if sparse_out else acc_zero
    acc_ty = "index" if sparse_out else OT

    def val_a(qa):
        return value({A: t.op(f"memref.load %A_val[{qa}] : memref<?x{T_A}>"), B: zeros[B]})

    def val_b(qb):
        return value({A: zeros[A], B: t.op(f"memref.load %B_val[{qb}] : memref<?x{T_B}>")})

    def step(qa, qb, le, ge, eq, acc):
        if sparse_out:
            j = t.op(f"arith.minui {t.load_index('%A_crd', qa, fa.crd_width)}, "
                     f"{t.load_index('%B_crd', qb, fb.crd_width)} : index")
        if union and plan.cheap:
            x = t.op(f"memref.load %A_val[{qa}] : memref<?x{T_A}>")
            y = t.op(f"memref.load %B_val[{qb}] : memref<?x{T_B}>")
            vb, va, vy = value({A: x, B: y}), value({A: x, B: zeros[B]}), value({A: zeros[A], B: y})
            if orow.kind == "complex":
                v = if_yield(t, eq, OT, lambda: vb, lambda: if_yield(t, le, OT, lambda: va, lambda: vy))
            else:
                v = t.op(f"arith.select {eq}, {vb}, {t.op(f'arith.select {le}, {va}, {vy} : {body_type(orow)}')} "
                         f": {body_type(orow)}")
        elif union:
            v = if_yield(t, eq, OT, lambda: value({A: t.op(f"memref.load %A_val[{qa}] : memref<?x{T_A}>"),
                                                   B: t.op(f"memref.load %B_val[{qb}] : memref<?x{T_B}>")}),
                         lambda: if_yield(t, le, OT, lambda: val_a(qa), lambda: val_b(qb)))
        if union:
            if sparse_out:
                _crd(t, values, j, acc, out)
                t(f"memref.store {v}, %C_val[{acc}] : memref<?x{OT}>")
                return t.op(f"arith.addi {acc}, %c1 : index")
            return t.op(_add(orow, acc, v))
        # intersection: only where both store
        def both():
            v = value({A: t.op(f"memref.load %A_val[{qa}] : memref<?x{T_A}>"),
                       B: t.op(f"memref.load %B_val[{qb}] : memref<?x{T_B}>")})
            if sparse_out:
                _crd(t, values, j, acc, out)
                t(f"memref.store {v}, %C_val[{acc}] : memref<?x{OT}>")
                return t.op(f"arith.addi {acc}, %c1 : index")
            return t.op(_add(orow, acc, v))
        return if_yield(t, eq, acc_ty, both, lambda: acc)

    mg = _merge(t, fa, fb, alo, ahi, blo, bhi, start, acc_ty, step)
    acc = f"{mg}#2"
    if union:                      # the rest of whichever row has entries left
        for r, f, q, val in (("A", fa, f"{mg}#0", val_a), ("B", fb, f"{mg}#1", val_b)):
            hi = ahi if r == "A" else bhi
            nxt = t.fresh("rest")
            t(f"{nxt} = scf.for %p = {q} to {hi} step %c1 iter_args(%w = {acc}) -> ({acc_ty}) {{")
            v = val("%p")
            if sparse_out:
                _crd(t, values, t.load_index(f"%{r}_crd", "%p", f.crd_width), "%w", out)
                t(f"memref.store {v}, %C_val[%w] : memref<?x{OT}>")
                t(f"scf.yield {t.op('arith.addi %w, %c1 : index')} : index")
            else:
                t(f"scf.yield {t.op(_add(orow, '%w', v))} : {OT}")
            t("}")
            acc = nxt
    if plan.reduce:
        t(f"memref.store {acc}, %out_m[%i] : memref<?x{OT}>")
    t(closing)
    if sparse_out:
        _finish(t, values, m, n, m1, nnz, out, OT)
    else:
        t("return")


def _crd(t: Text, values: bool, j: str, at: str, out: Format) -> None:
    """Store coordinate ``j`` of the result at ``at`` (none in a values-only kernel)."""
    if not values:
        t.store_index(j, "%C_crd", at, out.crd_width)


def _finish(t: Text, values: bool, m, n, m1, nnz, out: Format, OT: str) -> None:
    if values:
        t("return")
    else:
        return_csr(t, m, n, m1, nnz, out, OT)


def _as_index(t: Text, b: str) -> str:
    return t.op(f"arith.index_cast {t.op(f'arith.extui {b} : i1 to i64')} : i64 to index")


def _merge(t, fa, fb, alo, ahi, blo, bhi, init, acc_ty, step):
    """``scf.while`` over two sorted rows while both have entries; ``step(qa, qb, le, ge,
    eq, acc) -> acc`` at each point; returns the loop's name (``#0``/``#1``: where A/B
    stopped, ``#2``: the accumulator)."""
    res = t.fresh("mg")
    t(f"{res}:3 = scf.while (%pa = {alo}, %pb = {blo}, %w = {init}) : (index, index, {acc_ty}) -> "
      f"(index, index, {acc_ty}) {{")
    both = t.op(f"arith.andi {t.op(f'arith.cmpi ult, %pa, {ahi} : index')}, "
                f"{t.op(f'arith.cmpi ult, %pb, {bhi} : index')} : i1")
    t(f"scf.condition({both}) %pa, %pb, %w : index, index, {acc_ty}")
    t("} do {")
    qa, qb, qw = t.fresh("qa"), t.fresh("qb"), t.fresh("qw")
    t(f"^bb0({qa}: index, {qb}: index, {qw}: {acc_ty}):")
    ja = t.load_index("%A_crd", qa, fa.crd_width)
    jb = t.load_index("%B_crd", qb, fb.crd_width)
    le = t.op(f"arith.cmpi ule, {ja}, {jb} : index")
    ge = t.op(f"arith.cmpi uge, {ja}, {jb} : index")
    eq = t.op(f"arith.andi {le}, {ge} : i1")
    acc = step(qa, qb, le, ge, eq, qw)
    t(f"scf.yield {t.op(f'arith.addi {qa}, {_as_index(t, le)} : index')}, "
      f"{t.op(f'arith.addi {qb}, {_as_index(t, ge)} : index')}, {acc} : index, index, {acc_ty}")
    t("}")
    return res
