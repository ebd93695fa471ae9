"""Assemble the MLIR module (``func.func @kernel``) for one statement: ``emit_kernel`` puts the
function's parts in order (operand conversions, temporaries, the root ``linalg.generic``, the
result) and ``_Function.generic`` writes one ``linalg.generic`` (maps, iterators, the
reduction's combine).

A sparse result is built by the kernel (insertion, or access-pattern expansion for
SpGEMM-like loops) from a ``tensor.empty`` of the output encoding and returned: its buffers
are allocated by the kernel and belong to the caller.  A dense result is written in place
(``bufferization.materialize_in_destination``).  The argument order is in ``signature.py``, a
body's regions in ``regions.py``, temporaries in ``temporaries.py``, the MLIR 22 workarounds in
``workarounds.py``, constants and casts in ``constants.py``.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import dtypes as dt
from ..expr import Expr, Reduce, Statement, Stored, accesses, fold, infer_dtypes
from ..formats import Format
from .constants import body_type, const_text, identity_of, row_of
from .regions import ARITH, MONOID_OP, Body
from .signature import KernelSignature, arguments, tensor_type
from .temporaries import Temporaries, replace_accesses
from .workarounds import Workarounds


def emit_kernel(stmt: Statement, formats: dict[str, Format], dtypes: dict[str, str],
                name: str = "kernel", split: bool = False,
                out_format: Format | None = None, via: Format | None = None,
                zeroed_output: bool = False) -> tuple[str, KernelSignature]:
    """MLIR text of the kernel and the signature the runtime calls it with.

    ``formats`` holds a resolved Format (index widths set) per operand; ``dtypes`` a numpy
    dtype name per operand; ``out_format`` the (resolved) format of a sparse result, or
    ``None`` for a dense one.  ``split``: give every operation below the root that reads a
    sparse operand a ``linalg.generic`` (and dense temporary) of its own - the retry when
    the sparsifier fails on the fused form.  ``via``: build the sparse result in this format
    first, then ``sparse_tensor.convert`` it to ``out_format`` (the retry when no loop order
    can insert into ``out_format`` directly, e.g. a CSC sum of CSR operands).
    ``zeroed_output``: the caller passes a dense output that is already zero (``np.zeros``:
    fresh pages the OS zeroes at first touch, inside the possibly parallel loops), so the
    kernel skips its serial ``linalg.fill`` unless the result starts from another identity.
    Ahead-of-time kernels keep the fill: C callers pass any buffer.
    """
    # constant subexpressions are computed here, by NumPy (values exactly NumPy's)
    stmt = Statement(stmt.output, stmt.indices, fold(stmt.expr), stmt.operands)
    node_dtypes = infer_dtypes(stmt, {k: np.dtype(v) for k, v in dtypes.items()})
    out_row = row_of(node_dtypes[stmt.expr])
    index_order, encs, aliases, ranks, types, ssa, params = arguments(stmt, formats, dtypes)
    fn = _Function(node_dtypes, encs, types, ssa, formats, aliases, dtypes)
    expr = fn.index_operands(stmt.expr, index_order)
    fn.split = split
    expr = fn.materialize_inner_reductions(expr, split)
    red = expr.indices if isinstance(expr, Reduce) else ()
    red_op = expr.op if isinstance(expr, Reduce) else "sum"
    ident = expr.identity if isinstance(expr, Reduce) else None
    body_expr = expr.body if isinstance(expr, Reduce) else expr
    sparse_out = out_format is not None and not out_format.is_dense
    build = via if via is not None else out_format
    if sparse_out and build.block is None:
        # the loops a sparse result is inserted from: its storage order, a contraction's
        # summed indices just before the last (Gustavson's order, runtime/specialization.py)
        seq = [stmt.indices[d] for d in build.order]
        fn.loop_hint = tuple(seq[:-1] + [i for i in red if i not in seq] + seq[-1:]) if red else tuple(seq)
    if sparse_out:
        aliases.append(f"#encout = {out_format.encoding()}")
        out_type = tensor_type(len(stmt.indices), out_row, "#encout")
        sizes = ", ".join(f"%size_{i}" for i in stmt.indices)
        build_type = out_type
        if via is not None:
            aliases.append(f"#encvia = {via.encoding()}")
            build_type = tensor_type(len(stmt.indices), out_row, "#encvia")
        tail = []
        if not any(a.tensor in fn.encs for a in accesses(body_expr)):
            # every input of the last loop nest is dense (temporaries): the sparsifier cannot
            # insert from dense loops, so compute densely and convert (which stores nonzeros)
            dense_type = tensor_type(len(stmt.indices), out_row, None)
            fn.alloc("%dense_out_m", "%dense_out", stmt.indices, out_row)
            res = fn.generic("%dense_out", dense_type, stmt.indices, red, body_expr, fn.node_dtypes[expr],
                             red_op=red_op, identity=ident)
            fn.lines.append(f"%converted = sparse_tensor.convert {res} : {dense_type} to {out_type}")
            res = "%converted"
        else:
            fn.lines.append(f"%out = tensor.empty({sizes}) : {build_type}")
            res = fn.generic("%out", build_type, stmt.indices, red, body_expr, fn.node_dtypes[expr], fill=False,
                             red_op=red_op, identity=ident)
        if via is not None and res != "%converted":
            tail = [f"%converted = sparse_tensor.convert {res} : {build_type} to {out_type}",
                    f"bufferization.dealloc_tensor {res} : {build_type}"]
            res = "%converted"
        result, tail = f" -> {out_type}", [*tail, *fn.deallocs, f"return {res} : {out_type}"]
    else:
        out_type = tensor_type(len(stmt.indices), out_row, None)
        out_memref = "memref" + out_type[len("tensor"):]
        params.append(f"%out_m: {out_memref}")
        fn.lines.insert(0, f"%out = bufferization.to_tensor %out_m restrict writable : {out_memref} to {out_type}")
        skip_fill = zeroed_output and red_op in ("sum", "plus") and ident in (None, 0)
        res = fn.generic("%out", out_type, stmt.indices, red, body_expr, fn.node_dtypes[expr], red_op=red_op,
                         identity=ident, fill=not skip_fill)
        result = ""
        tail = [f"bufferization.materialize_in_destination {res} in restrict writable %out_m "
                f": ({out_type}, {out_memref}) -> ()", *fn.deallocs, "return"]
    body = "\n".join("    " + l for l in fn.lines + tail)
    text = "\n".join(aliases) + f"""
module {{
  func.func @{name}({', '.join(params)}){result} attributes {{ llvm.emit_c_interface }} {{
{body}
  }}
}}
"""
    sig = KernelSignature(index_order, stmt.operands, len(stmt.indices), out_row.name,
                          out_format if sparse_out else None)
    return text, sig


class _Function(Workarounds, Temporaries):
    def __init__(self, node_dtypes, encs, types, ssa, formats=None, aliases=None, dtypes=None):
        self.node_dtypes = dict(node_dtypes)
        self.encs = encs
        self.formats = dict(formats or {})   # operand -> Format (as read by the loops)
        self.aliases = aliases if aliases is not None else []
        self.dtypes = dtypes or {}
        self.types = dict(types)
        self.ssa = dict(ssa)
        self.lines: list[str] = []
        self.split = False                # the split retry (see emit_kernel)
        self.deallocs: list[str] = []     # dense temporaries, freed before returning
        self.n = 0
        self.hoist_ids = itertools.count()   # hoisted values of every generic's body
        self.loop_hint: tuple = ()          # the root's indices in the result's storage order

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def alloc(self, buf: str, tensor: str | None, idx, row: dt.DType) -> None:
        """A dense temporary: ``memref.alloc`` (freed before returning), and as a tensor."""
        mtype = "memref<" + "".join("?x" for _ in idx) + row.storage + ">"
        sizes = ", ".join(f"%size_{i}" for i in idx)
        self.lines.append(f"{buf} = memref.alloc({sizes}) : {mtype}")
        self.deallocs.append(f"memref.dealloc {buf} : {mtype}")
        if tensor:
            self.lines.append(f"{tensor} = bufferization.to_tensor {buf} restrict writable : {mtype} "
                              f"to {tensor_type(len(idx), row, None)}")

    def generic(self, init: str, init_type: str, out_idx, red_idx, body_expr: Expr, out_np,
                fill: bool = True, red_op: str = "sum", identity=None) -> str:
        """One ``linalg.generic`` computing ``body_expr`` (reduced over ``red_idx`` by
        ``red_op``) into ``init`` (filled with the reduction's identity first unless ``fill``
        is False: a sparse output starts empty).  A monoid reduction (any ``red_op`` but
        ``sum``) reads its body in stored mode and combines with ``sparse_tensor.reduce`` in a
        loop over a sparse operand, so only stored entries take part."""
        row = row_of(out_np)
        dims = list(out_idx) + [i for i in red_idx if i not in out_idx]
        d = {i: f"d{k}" for k, i in enumerate(dims)}
        domain = f"({', '.join(d[i] for i in dims)})"
        filled = init
        if fill:
            zero_text, zt = const_text(identity_of(red_op, row, identity) if red_idx or red_op != "sum" else 0, row)
            z = self.fresh("zero")
            self.lines.append(f"{z} = {zero_text}")
            filled = self.fresh("init")
            self.lines.append(f"{filled} = linalg.fill ins({z} : {zt}) outs({init} : {init_type}) -> {init_type}")
        ins = list(dict.fromkeys(a for a in accesses(body_expr)))
        sparse_loop = any(a.tensor in self.encs for a in ins)
        for _ in range(3 if sparse_loop else 0):
            # again after a sparse copy: it stores more indices than the operand it replaces
            # (``A[i,j] + A[j,k]``: each side is copied over i, j, k in turn)
            swaps = self.broadcasts(body_expr, dims, stored=red_op != "sum")
            if not swaps:
                break
            body_expr = replace_accesses(body_expr, swaps, self.node_dtypes)
            ins = list(dict.fromkeys(a for a in accesses(body_expr)))
        if sparse_loop:
            swaps = self.own_order_reads(ins, dims, "#enc" in init_type)
            if swaps:
                body_expr = replace_accesses(body_expr, swaps, self.node_dtypes)
                ins = list(dict.fromkeys(a for a in accesses(body_expr)))
        if self.split and (red_op != "sum" and red_idx or isinstance(body_expr, Stored)):
            # the retry for stored semantics (which split temporaries would break): read every
            # sparse operand in the loop order out_idx, red_idx, where no order conflicts
            for a in ins:
                seq = self._level_indices(a) if a.tensor in self.encs else None
                if seq is not None:
                    f = self.formats[a.tensor]
                    order = tuple(sorted(f.order, key=lambda dd: dims.index(a.indices[dd])))
                    if order != f.order:
                        self.convert(a, Format(f.levels, order, None, f.pos_width, f.crd_width))
        if red_idx and red_op != "sum":
            swaps = self.reductions_inside(ins, out_idx, red_idx)
            if swaps:
                body_expr = replace_accesses(body_expr, swaps, self.node_dtypes)
                ins = list(dict.fromkeys(a for a in accesses(body_expr)))
            if not fill:                      # a sparse result (it starts empty)
                self.no_dense_reduced_levels(ins, red_idx)
        invariants = {}
        if sparse_loop:
            # 0-d dense operands are read once, before the loops: the sparsifier treats such
            # a value as a loop invariant (x / s keeps x's pattern), while a 0-d tensor input
            # of the generic trips it up (and crashed MLIR 22 for x + s)
            for a in [a for a in ins if not a.indices and a.tensor not in self.encs]:
                v = self.fresh("scalar")
                self.lines.append(f"{v} = tensor.extract {self.ssa[a.tensor]}[] : {self.types[a.tensor]}")
                invariants[a] = v
            ins = [a for a in ins if a not in invariants]
        maps, in_vals, in_types = [], [], []
        for a in ins:
            maps.append(f"affine_map<{domain} -> ({', '.join(d[i] for i in a.indices)})>")
            in_vals.append(self.ssa[a.tensor])
            in_types.append(self.types[a.tensor])
        maps.append(f"affine_map<{domain} -> ({', '.join(d[i] for i in out_idx)})>")
        iters = ", ".join('"parallel"' if i in out_idx else '"reduction"' for i in dims)
        body = Body(self.node_dtypes, sparse_loop, frozenset(a.tensor for a in ins if a.tensor in self.encs),
                     {i: k for k, i in enumerate(dims)}, ids=self.hoist_ids)
        body.stored = red_op != "sum" and bool(red_idx)
        bargs = []
        body.args.update(invariants)
        body.invariants = frozenset(invariants)
        for k, a in enumerate(ins):
            arow = row_of(self.node_dtypes[a])
            body.args[a] = f"%in{k}"
            bargs.append(f"%in{k}: {body_type(arow)}")
        bargs.append(f"%acc: {body_type(row)}")
        v = body.value(body_expr, row)
        bt = body_type(row)
        if red_idx and (red_op == "sum" or (red_op == "plus" and not sparse_loop)):
            op = ARITH["+"][row.kind]
            v = body.emit(f"{op} %acc, {v} : {bt}")
        elif red_idx or (red_op != "sum" and fill):
            # a monoid over stored entries, "plus" included: with a plain add the sparsifier
            # inserts into a sparse result after every reduction loop, reached or not.  Over no
            # index (a semiring einsum without a contracted index) into a dense result, the
            # body still combines with %acc: a body that ignores it lets the fill with the
            # identity be dropped (every output entry counts as overwritten), leaving 0 where
            # no stored pair met
            combine = MONOID_OP.get(red_op, "+")
            if sparse_loop:
                ident = body.hoist_constant(identity_of(red_op, row, identity), row)
                region = body.region([bt, bt], lambda p, q: body.apply(combine, p, q, row, row), bt)
                rv = body.fresh()
                ind = "\n        "
                body.lines.append(f"{rv} = sparse_tensor.reduce {v}, %acc, {ident} : {bt} {{{ind}  "
                                  + f"{ind}  ".join(region) + f"{ind}}}")
                v = rv
            else:
                v = body.apply(combine, "%acc", v, row, row)
        self.lines.extend(body.hoisted)
        res = self.fresh("res")
        ind = "\n      "
        ins_text = f"ins({', '.join(in_vals)} : {', '.join(in_types)}) " if ins else ""
        self.lines.append(
            f"{res} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}]}}"
            f"{ind}{ins_text}outs({filled} : {init_type}) {{"
            f"{ind}^bb0({', '.join(bargs)}):{ind}  " + f"{ind}  ".join(body.lines + [f"linalg.yield {v} : {body_type(row)}"])
            + f"{ind}}} -> {init_type}")
        return res
