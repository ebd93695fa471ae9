"""Dense temporaries and in-kernel copies: each reduction below the root becomes a
``linalg.generic`` of its own filling a dense temporary (``memref.alloc``-ed, freed with
``memref.dealloc`` before the function returns: the pass pipeline runs no deallocation pass), a
sparse operand read with a repeated index (``A[i,i]``) its diagonal, selected from the stored
entries by a ``sparse_tensor.foreach``, and sparse operands are read in another format through a
``sparse_tensor.convert`` inside the kernel.  A mixin of the function builder
(``function._Function``: ``fresh``, ``alloc``, ``generic``)."""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import FormatError
from ..expr import Access, Binary, Const, Dense, Expr, Index, Reduce, Stored, Unary, Where, accesses, \
    describe, free_indices, show, used_indices
from ..formats import Format
from .constants import const_text, row_of
from .regions import ARITH
from .signature import tensor_type


def replace_accesses(e: Expr, swaps: dict, node_dtypes: dict) -> Expr:
    """``e`` with the accesses in ``swaps`` replaced; every rebuilt node gets its old node's
    dtype in ``node_dtypes``."""
    if isinstance(e, Access):
        return swaps.get(e, e)
    if isinstance(e, Unary):
        new = Unary(e.fn, replace_accesses(e.arg, swaps, node_dtypes))
    elif isinstance(e, Binary):
        new = Binary(e.op, replace_accesses(e.left, swaps, node_dtypes),
                     replace_accesses(e.right, swaps, node_dtypes))
    elif isinstance(e, Where):
        new = Where(*(replace_accesses(c, swaps, node_dtypes) for c in (e.cond, e.left, e.right)))
    elif isinstance(e, Stored):
        new = Stored(replace_accesses(e.body, swaps, node_dtypes))
    else:
        return e
    node_dtypes[new] = node_dtypes[e]
    return new


class Temporaries:
    def materialize_inner_reductions(self, e: Expr, split: bool = False) -> Expr:
        """Replace every reduction below the root by a dense temporary, innermost first.

        A sparse operand read with a repeated index (``A[i,i]``) becomes a dense temporary
        too: its diagonal, selected from the stored entries.
        """
        sparse_kernel = any(a.tensor in self.encs for a in accesses(e))

        # ``stored``: False, or the node is computed over stored entries only (a monoid other
        # than NumPy's sum, ``stored(...)``): "plus" where only products lead up to a "plus"
        # reduction (an unstored 0 then adds nothing), else True
        def visit(node: Expr, root: bool, stored=False) -> Expr:
            if isinstance(node, Access):
                if len(set(node.indices)) != len(node.indices):
                    if node.tensor in self.encs:
                        if stored is True:
                            # the dense diagonal turns its unstored entries into stored zeros,
                            # which a min/max/times monoid or a non-annihilating multiply counts
                            raise FormatError(
                                f"{describe(node.tensor)} is sparse and read through a repeated index "
                                f"({show(node)}) in a reduction over stored entries (a semiring other "
                                f"than plus_times, a monoid, stored()): MLIR 22 builds its diagonal "
                                f"densely, where an unstored entry would count as a stored 0; not "
                                f"supported (docs/semirings.md, Limitations)")
                        return self.diagonal(node)
                    if sparse_kernel:
                        # a dense operand's diagonal (a (d0) -> (d0, d0) map) next to a sparse
                        # operand leaves an unbufferized cast in MLIR 22: copy it out first
                        return self.dense_diagonal(node)
                return node
            if isinstance(node, (Const, Index)):
                return node
            inner = True if stored else False           # below a function, a select, a non-product
            if isinstance(node, Unary):
                new = Unary(node.fn, visit(node.arg, False, inner))
            elif isinstance(node, Binary):
                sides = stored if node.op == "*" else inner
                new = Binary(node.op, visit(node.left, False, sides), visit(node.right, False, sides))
            elif isinstance(node, Where):
                kids = [visit(c, False, inner) for c in (node.cond, node.left, node.right)]
                new = Where(*kids)
                if (all(used_indices(k) for k in kids[1:])
                        and any(a.tensor in self.encs for a in accesses(new))):
                    # a select in a sparse loop takes two tensor values (the condition and one
                    # branch) in sparse_tensor.binary: where(c, a, b) = where(c, a, 0) + where(c, 0, b),
                    # exactly (one side is always 0).  A loop-invariant branch (a constant, a
                    # scalar operand) stays in place: regions.where selects it in the binary's
                    # regions (split, where(C, 0, y) crashed the sparsifier next to where(C, X, 0))
                    zero = Const(0)
                    self.node_dtypes.setdefault(zero, np.dtype(np.int64))
                    l, r = Where(kids[0], kids[1], zero), Where(kids[0], zero, kids[2])
                    self._retype(node, l)
                    self._retype(node, r)
                    new = Binary("+", l, r)
            elif isinstance(node, Stored):
                new = Stored(visit(node.body, root, "plus" if stored == "plus" else True))
            elif isinstance(node, Dense):
                body = visit(node.body, root)
                self._retype(node, body)
                if root or not any(a.tensor in self.encs for a in accesses(body)):
                    return body
                return self.temporary(body)
            else:
                below = False if node.op == "sum" else ("plus" if node.op == "plus" else True)
                new = Reduce(node.op, node.indices, visit(node.body, False, below), node.identity)
            self._retype(node, new)
            if isinstance(new, Reduce) and not root:
                return self.temporary(new)
            # (not under stored semantics: a dense temporary would turn absent entries into
            # zeros that take part; such a kernel fails to compile rather than give wrong values)
            if split and not root and not stored and not isinstance(new, Stored) \
                    and any(a.tensor in self.encs for a in accesses(new)):
                return self.temporary(new)
            return new
        return visit(e, True)

    def _retype(self, old: Expr, new: Expr):
        self.node_dtypes[new] = self.node_dtypes[old]

    def temporary(self, r: Expr) -> Access:
        if isinstance(r, Access) and r.tensor not in self.encs:
            return r
        if isinstance(r, Access):
            self.node_dtypes.setdefault(r, self.node_dtypes[r])
        free = free_indices(r)
        row = row_of(self.node_dtypes[r])
        name = self.fresh("tmp")
        ttype = tensor_type(len(free), row, None)
        self.alloc(f"{name}_m", f"{name}_e", free, row)
        if isinstance(r, Reduce):
            res = self.generic(f"{name}_e", ttype, free, r.indices, r.body, self.node_dtypes[r], red_op=r.op,
                               identity=r.identity)
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
        row = row_of(self.node_dtypes[a])
        bt = row.storage
        rank = len(a.indices)
        mtype = "memref<" + "".join("?x" for _ in uniq) + bt + ">"
        ttype = tensor_type(len(uniq), row, None)
        buf = self.fresh("diag")
        z = self.fresh("zero")
        self.lines.append(f"{z} = {const_text(0, row)[0]}")
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
        add = ARITH["+"][row.kind]
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

    def broadcast_copy(self, a: Access, idx) -> Access:
        """A dense temporary ``T[idx] = a`` (``idx`` includes ``a``'s indices)."""
        row = row_of(self.node_dtypes[a])
        name = self.fresh("bc")
        ttype = tensor_type(len(idx), row, None)
        self.alloc(f"{name}_m", f"{name}_e", idx, row)
        res = self.generic(f"{name}_e", ttype, idx, (), a, self.node_dtypes[a], fill=False)
        acc = Access(name, idx)
        self.ssa[name], self.types[name] = res, ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def sparse_broadcast_copy(self, a: Access, idx) -> Access:
        """A sparse temporary ``T[idx] = a`` for sparse operand access ``a`` (``idx`` includes
        its indices): ``a``'s stored entries repeated along the indices it does not carry, in
        ``idx`` order, every level compressed (freed before returning)."""
        f = self.formats[a.tensor]
        fmt = Format(("compressed",) * len(idx), tuple(range(len(idx))), None, f.pos_width, f.crd_width)
        name = self.fresh("sbc")
        alias = f"#encr{self.n}"
        self.aliases.append(f"{alias} = {fmt.encoding()}")
        ttype = tensor_type(len(idx), dt.lookup(self.dtypes[a.tensor]), alias)
        self.lines.append(f"{name}_e = tensor.empty({', '.join(f'%size_{i}' for i in idx)}) : {ttype}")
        res = self.generic(f"{name}_e", ttype, idx, (), a, self.node_dtypes[a], fill=False)
        self.deallocs.append(f"bufferization.dealloc_tensor {res} : {ttype}")
        acc = Access(name, idx)
        self.ssa[name], self.types[name], self.encs[name] = res, ttype, alias
        self.formats[name], self.dtypes[name] = fmt, self.dtypes[a.tensor]
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def kept_first_copy(self, a: Access, out_idx) -> Access:
        """A dense temporary holding dense operand access ``a`` with its kept indices first
        (a transposing copy), for :meth:`reductions_inside`."""
        order = tuple(i for i in a.indices if i in out_idx) + tuple(i for i in a.indices if i not in out_idx)
        row = row_of(self.node_dtypes[a])
        name = self.fresh("kf")
        ttype = tensor_type(len(order), row, None)
        self.alloc(f"{name}_m", f"{name}_e", order, row)
        res = self.generic(f"{name}_e", ttype, order, (), a, self.node_dtypes[a])
        acc = Access(name, order)
        self.ssa[name], self.types[name] = res, ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def convert(self, a: Access, new: Format) -> None:
        """Read sparse operand ``a`` as ``new`` from here on (``sparse_tensor.convert``
        inside the kernel; the copy is freed before returning)."""
        alias = f"#encr{self.n + 1}"
        self.aliases.append(f"{alias} = {new.encoding()}")
        new_type = tensor_type(len(a.indices), dt.lookup(self.dtypes[a.tensor]), alias)
        conv = self.fresh("converted")
        self.lines.append(f"{conv} = sparse_tensor.convert {self.ssa[a.tensor]} : {self.types[a.tensor]} to {new_type}")
        self.deallocs.append(f"bufferization.dealloc_tensor {conv} : {new_type}")
        self.ssa[a.tensor], self.types[a.tensor], self.formats[a.tensor] = conv, new_type, new
