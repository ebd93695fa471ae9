"""Workarounds for MLIR 22's sparsifier: each rewrites what the emitter would write into a form
MLIR 22 lowers correctly (or at all); each docstring names the bug it avoids.  A mixin of the
function builder (``function._Function``), on top of :class:`temporaries.Temporaries`."""

from __future__ import annotations

import numpy as np

from ..errors import DTypeError
from ..expr import (Access, Binary, Dense, Expr, Index, Reduce, Stored, Unary, Where, accesses, children,
                    walk)
from ..formats import Format
from ..patterns import zero_behaviour
from .constants import row_of
from .signature import tensor_type


class Workarounds:
    """The workarounds, each a method of the function builder."""

    def index_operands(self, e: Expr, index_order) -> Expr:
        """``e`` with every ``index(k)`` read from a dense ``iota_k[k] = k`` (int64), filled
        inside the kernel by a one-loop dense ``linalg.generic`` (the only place a
        ``linalg.index`` is emitted) and read like any dense operand.

        MLIR 22 does not renumber ``linalg.index`` when the sparsifier reorders a loop nest
        (``sparse-reinterpret-map`` demapping a permuted operand, the loop sorting picking
        another order than the generic's dimensions): ``index(i)`` then read another loop's
        index (column indices for CSR, CSC, COO in ``min[i](where(X[i,j] != 0, index(i),
        big))``).  An ordinary access ``iota_k[k]`` moves with its loop."""
        names = list(dict.fromkeys(n.name for n in walk(e) if isinstance(n, Index)))
        if not names:
            return e
        row = row_of(np.dtype(np.int64))
        swaps = {}
        for k in names:
            if k not in index_order:
                raise DTypeError(f"index({k}): '{k}' is not a loop index of this kernel")
            name = self.fresh("iota")
            ttype = tensor_type(1, row, None)
            self.alloc(f"{name}_m", f"{name}_e", (k,), row)
            res = self.generic(f"{name}_e", ttype, (k,), (), Index(k), np.dtype(np.int64), fill=False)
            acc = Access(name, (k,))
            self.ssa[name], self.types[name] = res, ttype
            self.node_dtypes[acc] = np.dtype(np.int64)
            swaps[Index(k)] = acc

        def rebuild(node: Expr) -> Expr:
            if isinstance(node, Index):
                return swaps[node]
            if isinstance(node, Unary):
                new = Unary(node.fn, rebuild(node.arg))
            elif isinstance(node, Binary):
                new = Binary(node.op, rebuild(node.left), rebuild(node.right))
            elif isinstance(node, Where):
                new = Where(rebuild(node.cond), rebuild(node.left), rebuild(node.right))
            elif isinstance(node, Reduce):
                new = Reduce(node.op, node.indices, rebuild(node.body), node.identity)
            elif isinstance(node, Stored):
                new = Stored(rebuild(node.body))
            elif isinstance(node, Dense):
                new = Dense(rebuild(node.body))
            else:
                return node
            self.node_dtypes[new] = self.node_dtypes[node]
            return new
        return rebuild(e)

    def dense_diagonal(self, a: Access) -> Access:
        """``D[i] = A[i,i]`` for a dense ``A``, a dense temporary (one dense loop nest).

        MLIR 22: a dense operand read through a ``(d0) -> (d0, d0)`` map next to a sparse
        operand leaves an unbufferized cast; the diagonal is copied out first."""
        uniq = tuple(dict.fromkeys(a.indices))
        row = row_of(self.node_dtypes[a])
        name = self.fresh("ddiag")
        ttype = tensor_type(len(uniq), row, None)
        self.alloc(f"{name}_m", f"{name}_e", uniq, row)
        res = self.generic(f"{name}_e", ttype, uniq, (), a, self.node_dtypes[a], fill=False)
        acc = Access(name, uniq)
        self.ssa[name], self.types[name] = res, ttype
        self.node_dtypes[acc] = self.node_dtypes[a]
        return acc

    def _level_indices(self, a: Access):
        """The indices of sparse access ``a`` in storage (loop) order, or None when the
        access is not a plain permutation (blocks, diagonals)."""
        f = self.formats.get(a.tensor)
        if f is None or f.block is not None or len(set(a.indices)) != len(a.indices):
            return None
        return [a.indices[d] for d in f.order]

    def _compressed_indices(self, e: Expr) -> set:
        """The indices of ``e``'s sparse operands that some non-dense level loops over (all
        of an operand's indices where its levels are not a plain permutation)."""
        out = set()
        for a in accesses(e):
            if a.tensor in self.encs:
                seq, f = self._level_indices(a), self.formats[a.tensor]
                out |= set(a.indices) if seq is None else \
                    {i for l, i in enumerate(seq) if f.level_base(l) != "dense"}
        return out

    def reductions_inside(self, ins, out_idx, red_idx) -> dict:
        """Make every reduced loop of a custom reduction run inside the output's loops.

        MLIR 22 starts a custom reduction (``sparse_tensor.reduce``) from its identity at
        each entry of the loop that encloses it, instead of from what an outer reduced loop
        accumulated: with reduced loops both outside and inside a kept one (a 3-d COO
        reduced over axes 0 and 2; ``ij,ik->i`` with the first operand CSC) only the last
        outer iteration's terms survived.  So when some reduced index is forced outside (it
        comes before a kept one in a sparse operand's levels) while another may run inside,
        every operand that forces one is converted, inside the kernel, to an order with its
        kept levels first (dense operands: read from a transposed dense copy; returned as
        {access: replacement}).  Reductions that all run outside (``ji,j->i`` over CSR, one
        Bellman-Ford step) are left as they are."""
        forcing = []
        outer = set()
        for a in ins:
            f = self.formats.get(a.tensor)
            if a.tensor in self.encs and f.block is not None and any(i in out_idx for i in a.indices) \
                    and any(i not in out_idx for i in a.indices):
                # a block format's block levels come before its in-block ones: a reduced index's
                # block loop then encloses a kept index's offset loop, and the reduction restarts
                # in every block (BSR max over rows saw only the last block).  Read it unblocked.
                self.unblock(a)
                continue

            # a dense operand's dimensions also order the loops the sparsifier picks
            seq = self._level_indices(a) if a.tensor in self.encs else list(a.indices)
            if seq is None or len(set(seq)) != len(seq):
                continue
            kept = [k for k, i in enumerate(seq) if i in out_idx]
            early = {i for k, i in enumerate(seq) if i not in out_idx and kept and k < kept[-1]}
            if early:
                forcing.append(a)
                outer |= early
        if not outer or not (set(red_idx) - outer):
            return {}
        swaps = {}
        for a in forcing:
            if a.tensor in self.encs:
                self.kept_outer(a, out_idx)
            else:
                swaps[a] = self.kept_first_copy(a, out_idx)
        return swaps

    def broadcasts(self, e: Expr, dims, stored: bool = False) -> dict:
        """Dense operands to read broadcast over the loops of a sparse operand they meet in a
        union (``A[i,j] + y[i]`` over CSR, ``- max min <``...; CSC with ``y[j]``; COO with
        either): MLIR 22's sparsifier crashes (SIGSEGV) on a union of a sparse level with a
        dense value invariant in that level's loop.  Such a dense access becomes a dense
        temporary over the sparse side's indices too (``Y[i,j] = y[i]``), which the union
        then co-iterates like any dense matrix.  Returned as {access: replacement}.

        ``stored``: ``e`` is the body of a monoid reduction (a semiring's ``min[j](A + x)``),
        read in stored mode: its binary ops are intersections, which need no copy (the copy
        was an n x n temporary for a ``min_plus`` SpMV)."""
        swaps = {}

        def visit(node, stored):
            if isinstance(node, Stored):
                return visit(node.body, True)
            if isinstance(node, Reduce):
                return visit(node.body, stored or node.op != "sum")
            if isinstance(node, Binary) and not stored:
                nonzero, left_kills, right_kills = zero_behaviour(node.op)
                for side, other, kills in ((node.left, node.right, left_kills),
                                           (node.right, node.left, right_kills)):
                    sparse_idx = {i for a in accesses(side) if a.tensor in self.encs for i in a.indices}
                    if not sparse_idx or (kills and not nonzero) or (node.op == "/" and side is node.left):
                        continue      # an intersection, or x / y (the sparsifier keeps x's pattern)
                    if any(a.tensor in self.encs for a in accesses(other)):
                        # the other side's presence follows its own sparse operand; one that
                        # lacks an index of a compressed level on this side (``A[i,j] + a[i]``
                        # over CSR, ``a[i] + b[j]``; ``A[i,j] + a[j]`` lowers) crashes the same
                        # way: a sparse copy repeated over this side's sparse indices
                        compressed = self._compressed_indices(side)
                        if any(a.tensor in self.encs and compressed <= set(a.indices) for a in accesses(other)):
                            continue  # another sparse operand there carries them and drives the loops
                        for a in accesses(other):
                            if a.tensor in self.encs and a not in swaps and compressed - set(a.indices) \
                                    and self._level_indices(a) is not None:
                                want = set(a.indices) | sparse_idx
                                swaps[a] = self.sparse_broadcast_copy(a, tuple(i for i in dims if i in want))
                        continue
                    dense_other = [a for a in accesses(other) if a.tensor not in self.encs and a.indices]
                    for a in accesses(side) if dense_other else ():
                        if a.tensor in self.encs and self.formats[a.tensor].block is not None:
                            self.unblock(a)     # a block format in a union with a dense operand crashes too
                    for a in dense_other:
                        if not sparse_idx <= set(a.indices) and a not in swaps:
                            want = set(a.indices) | sparse_idx
                            swaps[a] = self.broadcast_copy(a, tuple(i for i in dims if i in want))
            for c in children(node):
                visit(c, stored)
        visit(e, stored)
        return swaps

    def own_order_reads(self, ins, dims, sparse_result: bool = False) -> dict:
        """A sparse operand read in index orders whose levels conflict (``A[k,l] + A[l,k]``
        over CSR: k before l, and l before k) gets, for each read whose levels disagree with
        the loop order, a copy of its own in that order (a ``sparse_tensor.convert`` inside
        the kernel), returned as {access: replacement}.

        MLIR 22's sparsifier breaks a cycle in the iteration graph by converting one input
        *value*, sorting the loops without that value's constraints (``resolveCycle`` in
        SparseReinterpretMap.cpp).  With one value read twice, both reads' constraints go,
        the order found needs no conversion, and an assertion (``!dimToLvl.isIdentity()``)
        aborts the compile; the retries then either built the result through another
        order or fell back to the split form, whose dense temporary made a sparse result
        store every entry (``Id_[k,l] + A[k,l] + A[l,k]``: a union with a dense operand).
        The loop order is the result's storage order (``self.loop_hint``), then ``dims``.

        Into a sparse result, reads of one operand in two orders are also given their own
        copies where they disagree with the order the result is inserted in without forming
        a cycle: the runtime stores an operand in one order (by name), the one its first
        read needs, so ``sum[i](A[i,k] * A[i,l])`` (AᵀA) left the sparsifier the
        inner-product order (every (k, l) pair co-iterating over i: 12 s for a 20k x 5k A
        with 8 entries a row, where Gustavson's order takes 0.2 s)."""
        seqs: dict = {}
        for a in ins:
            seq = self._level_indices(a) if a.tensor in self.encs else None
            if seq is not None:
                seqs.setdefault(a.tensor, {})[a] = seq
        hint = [i for i in getattr(self, "loop_hint", ()) if i in dims]
        target = hint + [i for i in dims if i not in hint]
        swaps = {}
        for name, reads in seqs.items():
            if len({tuple(s) for s in reads.values()}) < 2:
                continue
            if not _cyclic(reads.values()) and not (
                    sparse_result and any(s != sorted(s, key=target.index) for s in reads.values())):
                continue
            for a, seq in reads.items():
                if seq == sorted(seq, key=target.index):
                    continue
                f = self.formats[name]
                order = tuple(sorted(range(f.rank), key=lambda d: target.index(a.indices[d])))
                alias = f"{name}.r{self.n + 1}"
                self.encs[alias], self.dtypes[alias] = self.encs[name], self.dtypes[name]
                self.ssa[alias], self.types[alias], self.formats[alias] = \
                    self.ssa[name], self.types[name], f
                acc = Access(alias, a.indices)
                self.convert(acc, Format(f.levels, order, None, f.pos_width, f.crd_width))
                self.node_dtypes[acc] = self.node_dtypes[a]
                swaps[a] = acc
        return swaps

    def unblock(self, a: Access) -> None:
        """Read block-sparse operand ``a`` without blocks (BSR as CSR) from here on.

        MLIR 22: a block format in a union with a dense operand crashes the sparsifier, and
        a reduction over a block format's rows restarts in every block (see the callers)."""
        f = self.formats[a.tensor]
        if f.block is not None:
            self.convert(a, Format(tuple("compressed" if f.level_base(l) != "dense" else "dense"
                                         for l in range(f.rank)), f.order, None, f.pos_width, f.crd_width))

    def no_dense_reduced_levels(self, ins, red_idx) -> None:
        """A monoid reduction into a sparse result must not loop over a reduced index
        through a *dense* level of a sparse operand (CSR's rows) unless a compressed level
        of another operand drives that loop: MLIR 22 counts every iteration of such a loop
        as a contribution, and the result then stores the identity where nothing was stored
        (``j,ik->j`` with an empty CSR ``B``: +inf for ``min_plus``).  Such operands are
        converted inside the kernel to the same layout with compressed levels (CSR -> DCSR)."""
        driven = set()
        for a, seq in ((a, self._level_indices(a)) for a in ins if a.tensor in self.encs):
            f = self.formats.get(a.tensor)
            if seq is None:
                continue
            driven |= {i for l, i in enumerate(seq) if f.level_base(l) != "dense"}
        for a in ins:
            seq = self._level_indices(a) if a.tensor in self.encs else None
            if seq is None:
                continue
            f = self.formats[a.tensor]
            if any(f.level_base(l) == "dense" and i in red_idx and i not in driven for l, i in enumerate(seq)):
                levels = tuple("compressed" if f.level_base(l) == "dense" else lv for l, lv in enumerate(f.levels))
                self.convert(a, Format(levels, f.order, None, f.pos_width, f.crd_width))

    def kept_outer(self, a: Access, out_idx) -> None:
        """Convert sparse operand ``a`` (inside the kernel) to a storage order with the
        output's (kept) indices' levels first, keeping the rest in their order (MLIR 22's
        custom reduction restarting in each enclosing loop: see :meth:`reductions_inside`)."""
        f = self.formats[a.tensor]
        order = tuple(d for d in f.order if a.indices[d] in out_idx) + \
            tuple(d for d in f.order if a.indices[d] not in out_idx)
        if order != f.order:
            self.convert(a, Format(f.levels, order, None, f.pos_width, f.crd_width))


def _cyclic(seqs) -> bool:
    """Whether the level orders ``seqs`` (each a list of indices, outer first) admit no one
    loop order: a cycle among their "comes before" constraints."""
    after: dict = {}
    for seq in seqs:
        for x, y in zip(seq, seq[1:]):
            after.setdefault(x, set()).add(y)
            after.setdefault(y, set())
    indeg = {x: 0 for x in after}
    for ys in after.values():
        for y in ys:
            indeg[y] += 1
    ready = [x for x, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        x = ready.pop()
        seen += 1
        for y in after[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
    return seen != len(indeg)
