"""Emit one MLIR function for a statement.

The function (``@kernel``) takes, in order: one ``index`` per index variable (its size), one
tensor per operand (sparse operands carry their ``#sparse_tensor.encoding``; all dimensions
are dynamic, so one compile serves every shape), and, for a dense result, the output as a
memref, which the kernel writes in place (``bufferization.materialize_in_destination``).
A sparse result is built by the kernel (insertion, or access-pattern expansion for
SpGEMM-like loops) from a ``tensor.empty`` of the output encoding and returned: its buffers
are allocated by the kernel and belong to the caller.

Dense temporaries are ``memref.alloc``-ed and freed with ``memref.dealloc`` before the
function returns (the pass pipeline runs no deallocation pass; see ``passes/pipeline.py``).

Each reduction that is not the whole right-hand side becomes a ``linalg.generic`` of its own
that fills a dense temporary; the rest of the statement is one more ``linalg.generic``.
Math functions inside a loop over a sparse operand are ``sparse_tensor.unary`` ops, whose
``absent`` region gives ``f(0)`` where ``f(0) != 0`` (so ``exp`` of an unstored entry is 1).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError
from ..expr import UNARY as UNARY_NP   # numpy's meaning of each function, for f(0)
from ..expr import (Access, Binary, Const, Expr, Reduce, Statement, Unary, accesses, free_indices,
                    infer_dtypes)
from ..formats import Format


@dataclass(frozen=True)
class KernelSignature:
    """What the runtime needs to call the function: the argument order."""

    index_order: tuple[str, ...]          # one index argument per name, in order
    operands: tuple[str, ...]             # operand names, in order
    out_rank: int
    out_dtype: str
    out_format: Format | None = None      # None: dense output written in place


_FLOAT_FN = {"abs": "math.absf", "sqrt": "math.sqrt", "exp": "math.exp", "log": "math.log",
             "sin": "math.sin", "cos": "math.cos", "tan": "math.tan", "tanh": "math.tanh",
             "sinh": "math.sinh", "asin": "math.asin", "atan": "math.atan", "expm1": "math.expm1",
             "log1p": "math.log1p", "ceil": "math.ceil", "floor": "math.floor"}
_COMPLEX_FN = {"abs": "complex.abs", "sqrt": "complex.sqrt", "exp": "complex.exp", "log": "complex.log",
               "sin": "complex.sin", "cos": "complex.cos", "tan": "complex.tan", "tanh": "complex.tanh",
               "expm1": "complex.expm1", "log1p": "complex.log1p"}
_ARITH = {  # op -> kind -> MLIR op
    "+": {"float": "arith.addf", "int": "arith.addi", "complex": "complex.add", "bool": "arith.ori"},
    "-": {"float": "arith.subf", "int": "arith.subi", "complex": "complex.sub"},
    "*": {"float": "arith.mulf", "int": "arith.muli", "complex": "complex.mul", "bool": "arith.andi"},
    "/": {"float": "arith.divf", "complex": "complex.div"},
}


def _row(np_dtype) -> dt.DType:
    return dt.lookup(np_dtype, "an intermediate value")


def _const_text(value, row: dt.DType) -> tuple[str, str]:
    """(op text, type) of a constant of dtype ``row`` (bools are i8 in storage and bodies)."""
    if row.kind == "bool":
        return f"arith.constant {int(bool(value))} : i8", "i8"
    if row.kind == "int":
        return f"arith.constant {int(value.real if isinstance(value, complex) else value)} : {row.mlir}", row.mlir
    if row.kind == "float":
        v = float(value.real if isinstance(value, complex) else value)
        return f"arith.constant {_float_lit(v, row.mlir)} : {row.mlir}", row.mlir
    c = complex(value)
    part = row.mlir[8:-1]
    return (f"complex.constant [{_float_lit(c.real, part)} : {part}, {_float_lit(c.imag, part)} : {part}] "
            f": {row.mlir}", row.mlir)


def _float_lit(v: float, ty: str = "f64") -> str:
    """A float literal; NaN and infinities as hex bit patterns of the type's width."""
    if np.isnan(v) or np.isinf(v):
        bits = np.array(v, dtype=np.float32 if ty == "f32" else np.float64)
        return "0x" + bits.view(np.uint32 if ty == "f32" else np.uint64).item().to_bytes(
            bits.itemsize, "big").hex().upper()
    return repr(float(v))


def _body_type(row: dt.DType) -> str:
    return "i8" if row.kind == "bool" else row.mlir


class _Body:
    """SSA lines of one ``linalg.generic`` body."""

    def __init__(self, node_dtypes, sparse_loop: bool):
        self.lines: list[str] = []
        self.n = 0
        self.node_dtypes = node_dtypes
        self.sparse_loop = sparse_loop
        self.args: dict[Access, str] = {}
        self.hoisted: list[str] = []     # lines to place before the generic

    def fresh(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def emit(self, text: str) -> str:
        v = self.fresh()
        self.lines.append(f"{v} = {text}")
        return v

    # ----------------------------------------------------------------- casts
    def cast(self, v: str, src: dt.DType, dst: dt.DType) -> str:
        if src.name == dst.name:
            return v
        s, d = src.kind, dst.kind
        if d == "complex":
            part = dst.mlir[8:-1]
            re_ = self.cast(v, src, dt.TABLE["float32" if part == "f32" else "float64"]) if s != "complex" else None
            if s == "complex":   # complex64 -> complex128
                sp = src.mlir[8:-1]
                r = self.emit(f"complex.re {v} : {src.mlir}")
                i = self.emit(f"complex.im {v} : {src.mlir}")
                r = self.emit(f"arith.extf {r} : {sp} to {part}")
                i = self.emit(f"arith.extf {i} : {sp} to {part}")
                return self.emit(f"complex.create {r}, {i} : {dst.mlir}")
            zero = self.emit(f"arith.constant 0.0 : {part}")
            return self.emit(f"complex.create {re_}, {zero} : {dst.mlir}")
        if s == "complex":
            raise DTypeError(f"cannot convert {src.name} to {dst.name}")
        st, dty = _body_type(src), _body_type(dst)
        if d == "float":
            if s == "float":
                op = "arith.extf" if dst.mlir == "f64" else "arith.truncf"
                return self.emit(f"{op} {v} : {st} to {dty}")
            op = "arith.uitofp" if s == "bool" else "arith.sitofp"
            return self.emit(f"{op} {v} : {st} to {dty}")
        if d == "int":
            if s == "bool":
                return self.emit(f"arith.extui {v} : i8 to {dty}")
            if s == "int":
                op = "arith.extsi" if int(dty[1:]) > int(st[1:]) else "arith.trunci"
                return self.emit(f"{op} {v} : {st} to {dty}")
        raise DTypeError(f"cannot convert {src.name} to {dst.name}")

    # ------------------------------------------------------------ expressions
    def value(self, e: Expr, want: dt.DType | None = None) -> str:
        row = _row(self.node_dtypes[e])
        if isinstance(e, Const):
            target = want or row
            text, _ = _const_text(e.value, target)
            return self.emit(text)
        if isinstance(e, Access):
            v = self.args[e]
        elif isinstance(e, Binary):
            kind = row.kind
            # numpy computes a binary op in its result dtype; constants adopt it directly
            a = self.value(e.left, row)
            b = self.value(e.right, row)
            ops = _ARITH[e.op]
            if kind not in ops:
                raise DTypeError(f"'{e.op}' on {row.name} is not supported")
            v = self.emit(f"{ops[kind]} {a}, {b} : {_body_type(row)}")
        elif isinstance(e, Unary):
            v = self.unary(e, row)
        else:
            raise AssertionError(f"unexpected node {e}")
        return self.cast(v, row, want) if want is not None else v

    def unary(self, e: Unary, row: dt.DType) -> str:
        arg_row = _row(self.node_dtypes[e.arg])
        # abs of a complex value is real; every other function computes in its result dtype
        in_row = arg_row if e.fn == "abs" and arg_row.kind == "complex" else row
        x = self.value(e.arg, in_row)
        if e.fn == "abs" and row.kind == "bool":
            return x
        tin, tout = _body_type(in_row), _body_type(row)

        def apply(x: str, emit) -> str:
            if e.fn == "neg":
                if row.kind == "float":
                    return emit(f"arith.negf {x} : {tout}")
                if row.kind == "complex":
                    return emit(f"complex.neg {x} : {tout}")
                zero = emit(f"arith.constant 0 : {tout}")
                return emit(f"arith.subi {zero}, {x} : {tout}")
            if row.kind == "int" and e.fn == "abs":
                return emit(f"math.absi {x} : {tout}")
            if in_row.kind == "complex":
                if e.fn not in _COMPLEX_FN:
                    raise DTypeError(f"{e.fn} of a complex value is not supported")
                if e.fn == "abs":
                    return emit(f"complex.abs {x} : {tin}")
                return emit(f"{_COMPLEX_FN[e.fn]} {x} : {tin}")
            if row.kind != "float":
                raise DTypeError(f"{e.fn} of {in_row.name} is not supported")
            return emit(f"{_FLOAT_FN[e.fn]} {x} : {tout}")

        if not self.sparse_loop:
            return apply(x, self.emit)
        # Inside a loop over a sparse operand: f(x) where x is stored, f(0) where it is not.
        with np.errstate(all="ignore"):
            f0 = UNARY_NP[e.fn](np.zeros((), in_row.numpy))
        outer, self.lines = self.lines, []
        self.lines.append(f"^bb0(%p{self.n + 1}: {tin}):")
        self.n += 1
        y = apply(f"%p{self.n}", self.emit)
        present = self.lines + [f"sparse_tensor.yield {y} : {tout}"]
        absent: list[str] = []
        self.lines = outer
        if f0 != 0:
            # the absent region may only yield an arith.constant or a value defined outside
            # the generic (complex.constant): hoist it in front of the generic
            text = _const_text(f0.item(), row)[0]
            if text.startswith("arith."):
                c = self.emit(text)
            else:
                c = f"%absent{next(_hoist_ids)}"
                self.hoisted.append(f"{c} = {text}")
            absent = [f"sparse_tensor.yield {c} : {tout}"]
        v = self.fresh()
        ind = "\n        "
        self.lines.append(
            f"{v} = sparse_tensor.unary {x} : {tin} to {tout}{ind}present={{{ind}  "
            + f"{ind}  ".join(present) + f"{ind}}}{ind}absent={{" +
            (f"{ind}  " + f"{ind}  ".join(absent) + f"{ind}" if absent else "") + "}")
        return v


_hoist_ids = itertools.count()


def _tensor_type(rank: int, row: dt.DType, enc: str | None) -> str:
    shape = "x".join(["?"] * rank)
    t = f"{shape}x{row.storage}" if rank else row.storage
    return f"tensor<{t}, {enc}>" if enc else f"tensor<{t}>"


def emit_kernel(stmt: Statement, formats: dict[str, Format], dtypes: dict[str, str],
                name: str = "kernel", split: bool = False,
                out_format: Format | None = None, via: Format | None = None) -> tuple[str, KernelSignature]:
    """MLIR text of the kernel and the signature the runtime calls it with.

    ``formats`` holds a resolved Format (index widths set) per operand; ``dtypes`` a numpy
    dtype name per operand; ``out_format`` the (resolved) format of a sparse result, or
    ``None`` for a dense one.  ``split``: give every operation below the root that reads a
    sparse operand a ``linalg.generic`` (and dense temporary) of its own - the retry when
    the sparsifier fails on the fused form.  ``via``: build the sparse result in this format
    first, then ``sparse_tensor.convert`` it to ``out_format`` (the retry when no loop order
    can insert into ``out_format`` directly, e.g. a CSC sum of CSR operands).
    """
    node_dtypes = infer_dtypes(stmt, {k: np.dtype(v) for k, v in dtypes.items()})
    out_row = _row(node_dtypes[stmt.expr])
    encs: dict[str, str] = {}
    aliases: list[str] = []
    for k, opname in enumerate(stmt.operands):
        f = formats[opname]
        if not f.is_dense:
            alias = f"#enc{k}"
            aliases.append(f"{alias} = {f.encoding()}")
            encs[opname] = alias
    ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
    index_order = tuple(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))

    types = {opname: _tensor_type(ranks[opname], dt.lookup(dtypes[opname]), encs.get(opname))
             for opname in stmt.operands}
    ssa = {opname: f"%arg{k}" for k, opname in enumerate(stmt.operands)}
    params = [f"%size_{i}: index" for i in index_order]
    params += [f"{ssa[o]}: {types[o]}" for o in stmt.operands]
    fn = _Function(node_dtypes, encs, types, ssa)
    expr = fn.materialize_inner_reductions(stmt.expr, split)
    red = expr.indices if isinstance(expr, Reduce) else ()
    body_expr = expr.body if isinstance(expr, Reduce) else expr
    sparse_out = out_format is not None and not out_format.is_dense
    if sparse_out:
        aliases.append(f"#encout = {out_format.encoding()}")
        out_type = _tensor_type(len(stmt.indices), out_row, "#encout")
        sizes = ", ".join(f"%size_{i}" for i in stmt.indices)
        build_type = out_type
        if via is not None:
            aliases.append(f"#encvia = {via.encoding()}")
            build_type = _tensor_type(len(stmt.indices), out_row, "#encvia")
        fn.lines.append(f"%out = tensor.empty({sizes}) : {build_type}")
        res = fn.generic("%out", build_type, stmt.indices, red, body_expr, fn.node_dtypes[expr], fill=False)
        tail = []
        if via is not None:
            tail = [f"%converted = sparse_tensor.convert {res} : {build_type} to {out_type}",
                    f"bufferization.dealloc_tensor {res} : {build_type}"]
            res = "%converted"
        result, tail = f" -> {out_type}", [*tail, *fn.deallocs, f"return {res} : {out_type}"]
    else:
        out_type = _tensor_type(len(stmt.indices), out_row, None)
        out_memref = "memref" + out_type[len("tensor"):]
        params.append(f"%out_m: {out_memref}")
        fn.lines.insert(0, f"%out = bufferization.to_tensor %out_m restrict writable : {out_memref} to {out_type}")
        res = fn.generic("%out", out_type, stmt.indices, red, body_expr, fn.node_dtypes[expr])
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


class _Function:
    def __init__(self, node_dtypes, encs, types, ssa):
        self.node_dtypes = dict(node_dtypes)
        self.encs = encs
        self.types = dict(types)
        self.ssa = dict(ssa)
        self.lines: list[str] = []
        self.deallocs: list[str] = []     # dense temporaries, freed before returning
        self.n = 0

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def materialize_inner_reductions(self, e: Expr, split: bool = False) -> Expr:
        """Replace every reduction below the root by a dense temporary, innermost first.

        A sparse operand read with a repeated index (``A[i,i]``) becomes a dense temporary
        too: its diagonal, selected from the stored entries.
        """
        def visit(node: Expr, root: bool) -> Expr:
            if isinstance(node, Access):
                if node.tensor in self.encs and len(set(node.indices)) != len(node.indices):
                    return self.diagonal(node)
                return node
            if isinstance(node, Const):
                return node
            if isinstance(node, Unary):
                new = Unary(node.fn, visit(node.arg, False))
            elif isinstance(node, Binary):
                new = Binary(node.op, visit(node.left, False), visit(node.right, False))
            else:
                new = Reduce(node.op, node.indices, visit(node.body, False))
            self._retype(node, new)
            if isinstance(new, Reduce) and not root:
                return self.temporary(new)
            if split and not root and any(a.tensor in self.encs for a in accesses(new)):
                return self.temporary(new)
            return new
        return visit(e, True)

    def _retype(self, old: Expr, new: Expr):
        self.node_dtypes[new] = self.node_dtypes[old]

    def temporary(self, r: Expr) -> Access:
        free = free_indices(r)
        row = _row(self.node_dtypes[r])
        name = self.fresh("tmp")
        ttype = _tensor_type(len(free), row, None)
        self.alloc(f"{name}_m", f"{name}_e", free, row)
        if isinstance(r, Reduce):
            res = self.generic(f"{name}_e", ttype, free, r.indices, r.body, self.node_dtypes[r])
        else:
            res = self.generic(f"{name}_e", ttype, free, (), r, self.node_dtypes[r])
        acc = Access(name, free)
        self.ssa[name] = res
        self.types[name] = ttype
        self.node_dtypes[acc] = self.node_dtypes[r]
        return acc

    def diagonal(self, a: Access) -> Access:
        """``D[i] = A[i,i]`` for a sparse ``A``: one pass over the stored entries
        (``sparse_tensor.foreach``) adding those whose repeated coordinates agree into a
        dense temporary.  (The sparsifier admits no ``(i) -> (i, i)`` map on a sparse
        operand, nor a ``select`` on ``linalg.index`` into a dense result.)"""
        uniq = tuple(dict.fromkeys(a.indices))
        first = {i: a.indices.index(i) for i in uniq}
        row = _row(self.node_dtypes[a])
        bt = row.storage
        rank = len(a.indices)
        mtype = "memref<" + "".join("?x" for _ in uniq) + bt + ">"
        ttype = _tensor_type(len(uniq), row, None)
        buf = self.fresh("diag")
        z = self.fresh("zero")
        self.lines.append(f"{z} = {_const_text(0, row)[0]}")
        self.alloc(buf, None, uniq, row)
        self.lines.append(f"linalg.fill ins({z} : {bt}) outs({buf} : {mtype})")
        c = [f"%c{k}" for k in range(rank)]
        conds = []
        body = []
        for k, i in enumerate(a.indices):
            if first[i] != k:
                body.append(f"%eq{k} = arith.cmpi eq, {c[first[i]]}, {c[k]} : index")
                conds.append(f"%eq{k}")
        cond = conds[0]
        for k, other in enumerate(conds[1:]):
            body.append(f"%and{k} = arith.andi {cond}, {other} : i1")
            cond = f"%and{k}"
        at = ", ".join(c[first[i]] for i in uniq)
        add = _ARITH["+"][row.kind]
        body += [f"scf.if {cond} {{",
                 f"  %old = memref.load {buf}[{at}] : {mtype}",
                 f"  %new = {add} %old, %v : {bt}",
                 f"  memref.store %new, {buf}[{at}] : {mtype}", "}"]
        ind = "\n      "
        self.lines.append(
            f"sparse_tensor.foreach in {self.ssa[a.tensor]} : {self.types[a.tensor]} do {{"
            f"{ind}^bb0({', '.join(f'{x}: index' for x in c)}, %v: {bt}):{ind}  " + f"{ind}  ".join(body) +
            "\n    }")
        name = buf[1:]
        res = self.fresh("diagt")
        self.lines.append(f"{res} = bufferization.to_tensor {buf} restrict : {mtype} to {ttype}")
        acc = Access(name, uniq)
        self.ssa[name] = res
        self.types[name] = ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def alloc(self, buf: str, tensor: str | None, idx, row: dt.DType) -> None:
        """A dense temporary: ``memref.alloc`` (freed before returning), and as a tensor."""
        mtype = "memref<" + "".join("?x" for _ in idx) + row.storage + ">"
        sizes = ", ".join(f"%size_{i}" for i in idx)
        self.lines.append(f"{buf} = memref.alloc({sizes}) : {mtype}")
        self.deallocs.append(f"memref.dealloc {buf} : {mtype}")
        if tensor:
            self.lines.append(f"{tensor} = bufferization.to_tensor {buf} restrict writable : {mtype} "
                              f"to {_tensor_type(len(idx), row, None)}")

    def generic(self, init: str, init_type: str, out_idx, red_idx, body_expr: Expr, out_np,
                fill: bool = True) -> str:
        """One ``linalg.generic`` computing ``body_expr`` (summed over ``red_idx``) into ``init``
        (zero-filled first unless ``fill`` is False: a sparse output starts empty)."""
        row = _row(out_np)
        dims = list(out_idx) + [i for i in red_idx if i not in out_idx]
        d = {i: f"d{k}" for k, i in enumerate(dims)}
        domain = f"({', '.join(d[i] for i in dims)})"
        filled = init
        if fill:
            zero_text, zt = _const_text(0, row)
            z = self.fresh("zero")
            self.lines.append(f"{z} = {zero_text}")
            filled = self.fresh("init")
            self.lines.append(f"{filled} = linalg.fill ins({z} : {zt}) outs({init} : {init_type}) -> {init_type}")
        ins = list(dict.fromkeys(a for a in accesses(body_expr)))
        sparse_loop = any(a.tensor in self.encs for a in ins)
        maps, in_vals, in_types = [], [], []
        for a in ins:
            maps.append(f"affine_map<{domain} -> ({', '.join(d[i] for i in a.indices)})>")
            in_vals.append(self.ssa[a.tensor])
            in_types.append(self.types[a.tensor])
        maps.append(f"affine_map<{domain} -> ({', '.join(d[i] for i in out_idx)})>")
        iters = ", ".join('"parallel"' if i in out_idx else '"reduction"' for i in dims)
        body = _Body(self.node_dtypes, sparse_loop)
        bargs = []
        for k, a in enumerate(ins):
            arow = _row(self.node_dtypes[a])
            body.args[a] = f"%in{k}"
            bargs.append(f"%in{k}: {_body_type(arow)}")
        bargs.append(f"%acc: {_body_type(row)}")
        v = body.value(body_expr, row)
        if red_idx:
            op = _ARITH["+"][row.kind]
            v = body.emit(f"{op} %acc, {v} : {_body_type(row)}")
        self.lines.extend(body.hoisted)
        res = self.fresh("res")
        ind = "\n      "
        ins_text = f"ins({', '.join(in_vals)} : {', '.join(in_types)}) " if ins else ""
        self.lines.append(
            f"{res} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}]}}"
            f"{ind}{ins_text}outs({filled} : {init_type}) {{"
            f"{ind}^bb0({', '.join(bargs)}):{ind}  " + f"{ind}  ".join(body.lines + [f"linalg.yield {v} : {_body_type(row)}"])
            + f"{ind}}} -> {init_type}")
        return res
