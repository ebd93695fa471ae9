"""Sparse Jacobians, Hessians and their products as compiled kernels (docs/derivatives.md).

``sc.jacobian(r, wrt="u")`` differentiates the statement symbolically (``symbolic.py``:
Statement -> Statement) and compiles the derivative statement, whose sparse result's pattern
follows from the operands' patterns; ``sc.jvp`` compiles the derivative contracted with a
tangent; ``sc.hessian`` differentiates twice, ``sc.hvp`` is the forward derivative of the
gradient.  Every value is computed by a compiled kernel (through ``make.make_kernel``, so
derivative statements with several products are planned).  Jacobians with respect to a sparse
operand's stored values and of matrix results are in ``tensor.py``; complex derivatives are
holomorphic (``common._dtype_check``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import DTypeError, OperandError, SparseccError
from ..expr import Statement, accesses, index_sizes
from ..options import Options
from ..parse import parse_notation
from ..patterns import default_result_format
from .common import _dtype_check, _identity, _in, _kernel
from .symbolic import DELTA, NotDifferentiableError, check_wrt, contracted, derivative, fresh_index, split_reads
from .entries import EntryCache
from .values import FixedPatternValues, into, known_values
from .stored import StoredHessian, StoredHVP
from .tensor import TensorJacobian, check_flatten

__all__ = ["jacobian", "jvp", "hessian", "hvp", "gradient", "Jacobian", "Hessian", "ForwardDerivative", "HessianVector",
           "PatternError",
           "NotDifferentiableError"]

_TANGENT = "Tan_"


def _source(expr_or_kernel, options):
    """(statement, source text, options) of a statement string or a compiled kernel."""
    if isinstance(expr_or_kernel, str):
        if "=" not in expr_or_kernel:
            raise SparseccError(f"derivatives take an index-notation statement ('r[i] = ...'), got "
                                f"{expr_or_kernel!r}")
        return parse_notation(expr_or_kernel), expr_or_kernel, options
    stmt = getattr(expr_or_kernel, "stmt", None)
    if not isinstance(stmt, Statement):
        raise SparseccError(f"derivatives take a statement or a kernel from sc.compile, got "
                            f"{type(expr_or_kernel).__name__}")
    if stmt.operands and stmt.operands[0].startswith("#"):
        raise SparseccError("derivatives take index-notation kernels (operands by name), not einsum subscripts")
    return stmt, getattr(expr_or_kernel, "source", str(stmt)), options or getattr(expr_or_kernel, "options", None)


class _Derived:
    """What the derivative callables share: the source statement, ``wrt``, the operands."""

    def __init__(self, stmt, source, wrt, options):
        self.stmt, self.source, self.wrt = stmt, source, wrt
        self.options = options
        self.names = stmt.operands     # the operands a call takes (the objective's, for hvp)

    def _operands(self, kwargs: dict, need_wrt=True) -> dict:
        ops = dict(kwargs)
        unknown = [n for n in ops if n not in self.names]
        if unknown:
            raise OperandError(f"'{self.source}' has no operand(s) {', '.join(unknown)} "
                               f"(operands: {', '.join(self.names)})")
        if need_wrt:
            missing = [n for n in self.names if n not in ops]
            if missing:
                raise OperandError(f"'{self.source}': missing operand(s) {', '.join(missing)}")
        w = ops.get(self.wrt)
        if w is not None and sp.issparse(w) and not getattr(self, "sparse_wrt_ok", False):
            raise OperandError(f"wrt={self.wrt!r}: {type(self).__name__} is with respect to a dense operand, "
                               f"got a sparse {type(w).__name__} (sc.jacobian takes its stored values)")
        return ops


class Jacobian(_Derived):
    """``J(**operands)``: the Jacobian ``d out[i] / d wrt[k]`` as a ``csr_array`` on its
    pattern (every entry the expression can make nonzero, stored zeros kept); ``pattern`` and
    ``values`` as below.  ``statement``: the derivative statement compiled."""

    sparse_wrt_ok = True

    def __init__(self, stmt, source, wrt, options, flatten=False):
        super().__init__(stmt, source, wrt, options)
        self.flatten = check_flatten(flatten)
        self.tensor = None             # a sparse or higher-rank wrt, or a matrix result (tensor.py)
        rank = check_wrt(stmt, wrt, source, any_rank=True)
        if not stmt.indices:
            raise SparseccError(f"sc.jacobian is for a vector or matrix result (r[i] = ...); '{source}' is "
                                f"a scalar (sc.gradient and sc.hessian differentiate a scalar)")
        if rank > 1 or len(stmt.indices) > 1:
            self.tensor = TensorJacobian(self, masked=rank > 1, flatten=flatten)
            self.statement, self.aliases, self.base, self._kernels = self.tensor.statement, {}, stmt, {}
            return
        self.k = fresh_index(stmt, "k")
        self.statement = derivative(stmt, wrt, self.k, source=source)
        self.aliases: dict = {}        # an operand read in two index orders: passed twice
        if self.statement is not None:
            self.statement, self.aliases = split_reads(self.statement)
        self.base = stmt               # the statement differentiated
        self._kernels: dict = {}
        self._masked = None            # the Jacobian wrt a sparse vector's stored values
        self._fixed: dict = {}         # layout -> values on the last pattern (values.py)

    def __repr__(self):
        return f"<sc.jacobian of '{self.source}' wrt {self.wrt}: {self.statement}>"

    def _kernel_for(self, layout: str):
        k = self._kernels.get(layout)
        if k is None:
            k = self._kernels[layout] = _kernel(self.statement, self.options, layout)
        return k

    def _shape(self, ops: dict) -> tuple[int, int]:
        shapes = {n: tuple(np.shape(x)) for n, x in ops.items()}
        base = self.base
        sizes = index_sizes(base, {n: s for n, s in shapes.items() if n in base.operands})
        if self.statement is not None:
            named = dict(shapes, **{a: shapes[n] for a, n in self.aliases.items() if n in shapes})
            for i, n in index_sizes(self.statement, {n: s for n, s in named.items()
                                                     if n in self.statement.operands}).items():
                sizes.setdefault(i, n)
        m = sizes.get(base.indices[0])
        n = shapes[self.wrt][0] if self.wrt in shapes else sizes.get(self.k)
        if m is None or n is None:
            raise OperandError(f"'{self.source}': the operands given do not fix the derivative's shape; "
                               f"pass the operand {self.wrt!r} too")
        return m, n

    def _args(self, ops: dict, dtype, layout: str = "csr") -> dict:
        args = {n: x for n, x in ops.items() if n in self.statement.operands}
        args.update({a: ops[n] for a, n in self.aliases.items() if n in ops})
        if DELTA in self.statement.operands:
            args[DELTA] = _identity(self._shape(ops)[1], dtype, layout == "csc")
        return args

    def _run(self, ops: dict, layout: str, record: bool = False):
        dt = _dtype_check(self.stmt, ops, self.wrt, self.source)
        if self.statement is None:
            m, n = self._shape(ops)
            cls = sp.csc_array if layout == "csc" else sp.csr_array
            return cls((m, n), dtype=dt)
        args = self._args(ops, dt, layout)
        sparse = frozenset(n for n, x in args.items() if sp.issparse(x))
        if default_result_format(self.statement, sparse) == "dense":
            layout = "dense"           # the pattern is full (or dense along an index): every entry
        k = self._kernel_for(layout)
        out = k(**args)
        if not sp.issparse(out):       # a full pattern: every entry
            out = np.asarray(out)
        elif record and out.dtype == dt:   # again on this pattern: the values-only kernel
            self._fixed.setdefault(layout, FixedPatternValues()).record(
                k, {n: args[n] for n in self.statement.operands}, out)
        return _in(out, dt)

    def _tensor_for(self, ops: dict):
        """The tensor Jacobian serving these operands (None: the vector one)."""
        if self.tensor is not None:
            return self.tensor
        if sp.issparse(ops.get(self.wrt)):
            if self._masked is None:
                self._masked = TensorJacobian(self, masked=True, flatten=self.flatten)
            return self._masked
        return None

    def __call__(self, **operands):
        ops = self._operands(operands)
        t = self._tensor_for(ops)
        if t is not None:
            return t.run(ops)
        known = known_values(self, ops, "csr")
        if known is not None:            # the recorded pattern (copied: the caller owns the result)
            vals, (indptr, indices) = known
            m = sp.csr_array((vals, indices.copy(), indptr.copy()), shape=self._fixed["csr"].shape)
            m.has_canonical_format = True    # (the kernel's own pattern: sorted, no duplicates)
            return m
        return self._run(ops, "csr", record=True)

    def pattern(self, layout: str = "csr", **operands):
        """The pattern alone, from the sparse operands' patterns (dense operands may be left
        out where the sparse ones fix the shape): ``(indptr, indices)`` for ``"csr"``/``"csc"``,
        ``(rows, cols)`` for ``"coo"`` (row-major, the order of ``values(layout="coo")``).
        It is computed by the same compiled kernel on operands of ones, whose result's
        pattern depends on no value: the same for every call with the same operand patterns."""
        _layout(layout)
        ops = self._operands(operands, need_wrt=False)
        t = self._tensor_for(ops)
        if t is not None:
            return _tensor_layout(t.run(_ones_for(self.base, ops, self.wrt, t.masked)), layout, "pattern")
        if self.statement is not None:
            shapes = {n: tuple(np.shape(x)) for n, x in ops.items()}
            shapes.update({a: shapes[n] for a, n in self.aliases.items() if n in shapes})
            sizes = index_sizes(self.statement, shapes)
            if self.wrt in shapes:
                sizes[self.k] = shapes[self.wrt][0]
            dt = np.float64
            for a in accesses(self.statement.expr):
                if a.tensor in ops or a.tensor == DELTA or a.tensor in self.aliases:
                    continue
                if not all(i in sizes for i in a.indices):
                    raise OperandError(f"J.pattern: the operands given do not fix the shape of "
                                       f"{a.tensor!r}; pass it (any values)")
                ops[a.tensor] = np.ones(tuple(sizes[i] for i in a.indices), dt)
        m = self._run(ops, "csc" if layout == "csc" else "csr")
        if not sp.issparse(m):
            m = sp.csr_array(np.ones(m.shape, bool)) if layout != "csc" else sp.csc_array(np.ones(m.shape, bool))
        if layout == "coo":
            rows = np.repeat(np.arange(m.shape[0], dtype=m.indices.dtype), np.diff(m.indptr))
            return rows, m.indices
        return m.indptr, m.indices

    def values(self, layout: str = "csr", pattern=None, out=None, **operands) -> np.ndarray:
        """The values on the pattern in a fixed layout: CSR order (``"csr"``, and ``"coo"``:
        row-major triplets, ``pattern(layout="coo")``'s order) or CSC order (``"csc"``,
        computed by the derivative kernel with a CSC result).  ``pattern``: the pattern the
        caller holds (from ``pattern(layout=...)``); a ``PatternError`` if these operands'
        pattern differs (values are never placed in a stale layout).  ``out``: an array of
        the pattern's length and the values' dtype to write them into (returned).  A repeated
        call on the pattern of the last one runs a values-only kernel (``values.py``)."""
        _layout(layout)
        ops = self._operands(operands)
        t = self._tensor_for(ops)
        if t is not None:
            m = t.run(ops)
            _same_pattern(pattern, lambda: _tensor_layout(m, layout, "pattern"))
            return into(out, _tensor_layout(m, layout, "values"))
        kind = "csc" if layout == "csc" else "csr"
        known = known_values(self, ops, kind, out)
        if known is not None:
            vals, (indptr, indices) = known
            _same_pattern(pattern, lambda: _compressed_layout(indptr, indices, layout))
            return vals
        m = self._run(ops, kind, record=True)
        if not sp.issparse(m):
            _same_pattern(pattern, lambda: _full_pattern(m.shape, layout))
            return into(out, np.ascontiguousarray(m.T if layout == "csc" else m).reshape(-1))
        _same_pattern(pattern, lambda: _compressed_layout(m.indptr, m.indices, layout))
        return into(out, m.data)


class PatternError(OperandError):
    """``values(..., pattern=p)`` for operands whose derivative pattern is not ``p``."""


def _same_pattern(given, current):
    if given is None:
        return
    cur = current()
    if len(given) != len(cur) or not all(np.shape(a) == np.shape(b) and np.array_equal(a, b)
                                         for a, b in zip(given, cur)):
        raise PatternError("these operands' derivative pattern differs from the pattern passed (it was "
                           "computed for other operand patterns): call pattern(...) again for them")


def _full_pattern(shape, layout):
    m = sp.csr_array(np.ones(shape, bool)) if layout != "csc" else sp.csc_array(np.ones(shape, bool))
    return _compressed_layout(m.indptr, m.indices, layout)


def _compressed_layout(indptr, indices, layout):
    if layout == "coo":
        return np.repeat(np.arange(len(indptr) - 1, dtype=indices.dtype), np.diff(indptr)), indices
    return indptr, indices


def _ones_for(stmt: Statement, ops: dict, wrt: str, masked: bool) -> dict:
    """``ops`` with every dense operand left out read as ones (its shape from the others)."""
    ops = dict(ops)
    if masked and wrt not in ops:
        raise OperandError(f"J.pattern: pass {wrt!r} (its stored entries are the Jacobian's columns)")
    sizes = index_sizes(stmt, {n: tuple(np.shape(x)) for n, x in ops.items() if n in stmt.operands})
    for a in accesses(stmt.expr):
        if a.tensor in ops:
            continue
        if not all(i in sizes for i in a.indices):
            raise OperandError(f"J.pattern: the operands given do not fix the shape of {a.tensor!r}; "
                               f"pass it (any values)")
        ops[a.tensor] = np.ones(tuple(sizes[i] for i in a.indices)) if a.indices else 1.0
    return ops


def _tensor_layout(m, layout: str, what: str):
    """The pattern or the values of a tensor Jacobian's result ``m`` in ``layout`` (only
    coordinates and values move)."""
    if isinstance(m, np.ndarray):          # a full pattern: every entry
        if m.ndim == 2:
            m = sp.csr_array(np.ones(m.shape, bool)) if what == "pattern" else m
        else:
            m = sp.coo_array(np.ones(m.shape, bool)) if what == "pattern" else m
        if what == "values":
            if m.ndim == 2 and layout == "csc":
                return np.ascontiguousarray(m.T).reshape(-1)
            return np.ascontiguousarray(m).reshape(-1)
    if m.ndim > 2:
        if layout != "coo":
            raise SparseccError(f"this Jacobian is {m.ndim}-D: its {what} is in layout='coo' "
                                f"(or ask for flatten=True)")
        return tuple(m.coords) if what == "pattern" else m.data
    if layout == "csc":
        m = sp.csc_array(m)
        m.sort_indices()
    if what == "values":
        return m.data
    if layout == "coo":
        return np.repeat(np.arange(m.shape[0], dtype=m.indices.dtype), np.diff(m.indptr)), m.indices
    return m.indptr, m.indices


def _layout(layout):
    if layout not in ("csr", "csc", "coo"):
        raise SparseccError(f"layout must be 'csr', 'csc' or 'coo', got {layout!r}")


class ForwardDerivative(_Derived):
    """``f(**operands, tangent=v)``: ``J @ v`` without forming J (one compiled kernel).  With
    respect to a sparse operand's stored values (or a dense matrix's entries) ``v`` holds
    one value per stored entry in canonical order (``sc.jacobian``'s columns)."""

    sparse_wrt_ok = True

    def __init__(self, stmt, source, wrt, options):
        super().__init__(stmt, source, wrt, options)
        if _TANGENT in stmt.operands:
            raise SparseccError(f"'{source}' names an operand {_TANGENT}, which sc.jvp uses itself")
        self.rank = check_wrt(stmt, wrt, source, any_rank=True)
        ks, taken = [], stmt
        for _ in range(self.rank):
            ks.append(fresh_index(taken, "k"))
            taken = Statement(taken.output, taken.indices + (ks[-1],), taken.expr, taken.operands)
        self.statement = contracted(stmt, wrt, _TANGENT, ks[0] if self.rank == 1 else tuple(ks), source=source)
        self._kernel = None
        self._entries = EntryCache()

    def __repr__(self):
        return f"<sc.jvp of '{self.source}' wrt {self.wrt}: {self.statement}>"

    def _tangent(self, w, tangent, dt):
        """The tangent operand: ``tangent`` itself for a dense vector ``wrt``, else its values
        on ``wrt``'s stored entries (moved into the entries' layout)."""
        tangent = np.asarray(tangent)
        stored = sp.issparse(w) or self.rank > 1
        ent = self._entries.get(w) if stored else None
        want = (ent.size,) if stored else np.shape(w)
        if tangent.shape != want and not (stored and not sp.issparse(w) and tangent.shape == np.shape(w)):
            what = (f"one value per stored entry of {self.wrt!r} in canonical order, shape {want}" if stored
                    else f"{self.wrt!r}'s shape {want}")
            raise OperandError(f"the tangent must have {what}, got {tangent.shape}")
        if tangent.dtype.kind not in "fc" or (tangent.dtype.kind == "c" and dt.kind != "c"):
            raise DTypeError(f"the tangent must be floating-point (complex for a complex derivative), "
                             f"got {tangent.dtype}")
        return ent.carrying(tangent.reshape(-1)) if stored else tangent

    def __call__(self, tangent=None, **operands):
        if tangent is None:
            raise OperandError("sc.jvp(...)(..., tangent=v): the tangent is missing")
        ops = self._operands(operands)
        dt = _dtype_check(self.stmt, ops, self.wrt, self.source)
        tan = self._tangent(ops[self.wrt], tangent, dt)
        if self.statement is None:
            shape = tuple(index_sizes(self.stmt, {n: np.shape(x) for n, x in ops.items()})[i]
                          for i in self.stmt.indices)
            return np.zeros(shape, dt)[()] if shape else dt.type(0)
        if self._kernel is None:
            self._kernel = _kernel(self.statement, self.options, "dense")
        args = {n: x for n, x in ops.items() if n in self.statement.operands}
        args[_TANGENT] = tan
        return _in(self._kernel(**args), dt)


def _scalar(stmt, source, what):
    if stmt.indices:
        raise SparseccError(f"{what} is for a scalar result ('f[] = ...' or 'f = ...'); '{source}' has "
                            f"output indices {','.join(stmt.indices)} (its second derivative is a tensor of "
                            f"rank {len(stmt.indices) + 2}): differentiate a scalar of it instead, e.g. the "
                            f"Lagrangian 'f[] = sum[{','.join(stmt.indices)}](y[{','.join(stmt.indices)}] * ...)', "
                            f"or use sc.jacobian")


def _gradient_statement(stmt, source, wrt):
    _scalar(stmt, source, "sc.hessian/sc.gradient")
    k = fresh_index(stmt, "k")
    g = derivative(stmt, wrt, k, output="G_", source=source)
    if g is None:
        raise SparseccError(f"'{source}' does not depend on {wrt!r}")
    # ``G_[k] = ...``: the gradient as a statement of its own
    return Statement("G_", (k,), g.expr, g.operands)


class Gradient(_Derived):
    """``g(**operands)``: the gradient of a scalar result as a dense vector (one kernel);
    with respect to a sparse operand, a vector over its stored entries in canonical order
    (masked, as ``sc.jacobian``'s columns)."""

    sparse_wrt_ok = True

    def __init__(self, stmt, source, wrt, options):
        super().__init__(stmt, source, wrt, options)
        _scalar(stmt, source, "sc.gradient")
        self.tensor = None
        if check_wrt(stmt, wrt, source, any_rank=True) > 1:
            self.tensor = TensorJacobian(self, masked=True, flatten=False)
            self.statement = self.tensor.statement
        else:
            self.statement = _gradient_statement(stmt, source, wrt)
        self._kernel = None

    def __call__(self, **operands):
        ops = self._operands(operands)
        if self.tensor is not None or sp.issparse(ops.get(self.wrt)):
            if self.tensor is None:
                self.tensor = TensorJacobian(self, masked=True, flatten=False)
            (p,), vals, (n,) = self.tensor.coordinates(ops)
            g = np.zeros(n, vals.dtype)
            g[p] = vals                    # the kernel's values at their entries' positions
            return g
        dt = _dtype_check(self.stmt, ops, self.wrt, self.source)
        if self._kernel is None:
            self._kernel = _kernel(self.statement, self.options, "dense")
        return _in(self._kernel(**{n: x for n, x in ops.items() if n in self.statement.operands}), dt)


class Hessian(Jacobian):
    """``H(**operands, triangle=None|"lower"|"upper")``: the Hessian of a scalar result, the
    Jacobian of its gradient statement (``gradient_statement``).  With respect to a sparse
    operand's stored values (or a dense matrix's entries): ``H[p, q]`` over its entries in
    canonical order (``stored.StoredHessian``)."""

    sparse_wrt_ok = True

    def __init__(self, stmt, source, wrt, options):
        self.objective = stmt
        _scalar(stmt, source, "sc.hessian")
        self.stored = None
        if check_wrt(stmt, wrt, source, any_rank=True) > 1:
            _Derived.__init__(self, stmt, source, wrt, options)
            self.stored = StoredHessian(self, check_wrt(stmt, wrt, source, any_rank=True))
            self.gradient_statement = self.stored.gradient_statement
            self.statement, self.aliases, self.base, self._kernels = self.stored.statement, {}, stmt, {}
            self.tensor = self._masked = None
            self.flatten = False
            return
        self.gradient_statement = _gradient_statement(stmt, source, wrt)
        super().__init__(self.gradient_statement, source, wrt, options)
        self.stmt, self.names = stmt, stmt.operands   # operands are checked against the objective
        self._gstmt = self.gradient_statement

    def _stored_for(self, ops):
        if self.stored is None and sp.issparse(ops.get(self.wrt)):
            self.stored = StoredHessian(self, 1)
        return self.stored

    def _matrix(self, ops, layout):
        """The Hessian at ``ops``: a sparse matrix, or a dense array where the pattern is full."""
        st = self._stored_for(ops)
        if st is None:
            return self._run(ops, layout)
        m = st.run(ops)
        if not sp.issparse(m):              # every pair of entries: a full pattern, as CSR
            n = m.shape[0]
            m = sp.csr_array((m.reshape(-1), np.tile(np.arange(n), n), np.arange(0, n * n + 1, max(n, 1))[:n + 1]),
                             shape=(n, n))
        return m

    def __call__(self, triangle=None, **operands):
        return _triangle(self._matrix(self._operands(operands), "csr"), triangle)

    def pattern(self, layout: str = "csr", triangle=None, **operands):
        """As ``Jacobian.pattern``; ``triangle="lower"|"upper"``: that triangle's pattern only."""
        ops = self._operands(operands, need_wrt=False)
        if self._stored_for(ops) is not None:
            _layout(layout)
            m = self._matrix(_ones_for(self.objective, ops, self.wrt, True), "csr")
            return _tensor_layout(_triangle(m, triangle), layout, "pattern")
        if triangle is None:
            return super().pattern(layout, **operands)
        _triangle(None, triangle)
        indptr, indices = super().pattern("csc" if layout == "csc" else "csr", **operands)
        keep, indptr = _kept(indptr, indices, triangle, layout == "csc")
        if layout == "coo":
            return np.repeat(np.arange(len(indptr) - 1, dtype=indices.dtype), np.diff(indptr)), indices[keep]
        return indptr, indices[keep]

    def values(self, layout: str = "csr", triangle=None, pattern=None, **operands):
        """As ``Jacobian.values``; ``triangle``: the values of that triangle, in its pattern's
        order; ``pattern``: the pattern the caller holds (checked, as for a Jacobian)."""
        ops = self._operands(operands)
        if self._stored_for(ops) is not None:
            _layout(layout)
            m = _triangle(self._matrix(ops, "csr"), triangle)
            _same_pattern(pattern, lambda: _tensor_layout(m, layout, "pattern"))
            return _tensor_layout(m, layout, "values")
        if triangle is None:
            return super().values(layout, pattern=pattern, **operands)
        _triangle(None, triangle)
        m = self._run(ops, "csc" if layout == "csc" else "csr")
        csc = layout == "csc"
        full = not sp.issparse(m)
        pat = (sp.csc_array if csc else sp.csr_array)(np.ones(m.shape, bool)) if full else m
        keep, indptr = _kept(pat.indptr, pat.indices, triangle, csc)
        if pattern is not None:
            rows = np.repeat(np.arange(len(indptr) - 1, dtype=pat.indices.dtype), np.diff(indptr))
            _same_pattern(pattern, lambda: (rows, pat.indices[keep]) if layout == "coo" else
                          (indptr, pat.indices[keep]))
        if full:                       # a full pattern: every entry, row- (column-) major
            return np.ascontiguousarray(m.T if csc else m).reshape(-1)[keep]
        return m.data[keep]


class HessianVector(_Derived):
    """``hv(**operands, tangent=v)``: ``H @ v`` without forming H.  A dense vector ``wrt``:
    the forward derivative of the gradient statement (one planned kernel); a sparse
    operand's stored values: ``v`` and the result over its entries in canonical order
    (``stored.StoredHVP``)."""

    sparse_wrt_ok = True

    def __init__(self, stmt, source, wrt, options):
        super().__init__(stmt, source, wrt, options)
        _scalar(stmt, source, "sc.hvp")
        rank = check_wrt(stmt, wrt, source, any_rank=True)
        self.dense = None
        self.stored = StoredHVP(self, rank) if rank > 1 else None
        if rank == 1:
            self.dense = ForwardDerivative(_gradient_statement(stmt, source, wrt), source, wrt, options)
            self.dense.names = stmt.operands
        self.statement = (self.dense or self.stored).statement

    def __repr__(self):
        return f"<sc.hvp of '{self.source}' wrt {self.wrt}: {self.statement}>"

    def __call__(self, tangent=None, **operands):
        if tangent is None:
            raise OperandError("sc.hvp(...)(..., tangent=v): the tangent is missing")
        ops = self._operands(operands)
        if self.stored is None and sp.issparse(ops.get(self.wrt)):
            self.stored = StoredHVP(self, 1)
        if self.stored is not None and (self.dense is None or sp.issparse(ops.get(self.wrt))):
            return self.stored.run(ops, tangent)
        return self.dense(tangent=tangent, **operands)


def _kept(indptr, indices, triangle, csc):
    """(which stored entries lie in the triangle, the triangle's indptr) of a CSR/CSC pattern."""
    major = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    rows, cols = (indices, major) if csc else (major, indices)
    keep = cols <= rows if triangle == "lower" else cols >= rows
    counts = np.bincount(major[keep], minlength=len(indptr) - 1)
    return keep, np.concatenate([[0], np.cumsum(counts)]).astype(indptr.dtype)


def _triangle(H, triangle):
    """``H``'s lower or upper triangle (the entries selected by their coordinates: values
    move, none is computed; stored zeros kept)."""
    if triangle not in (None, "lower", "upper"):
        raise SparseccError(f"triangle must be None, 'lower' or 'upper', got {triangle!r}")
    if H is None or triangle is None:
        return H
    if not sp.issparse(H):
        return np.tril(H) if triangle == "lower" else np.triu(H)
    H = sp.csr_array(H)
    keep, indptr = _kept(H.indptr, H.indices, triangle, False)
    return sp.csr_array((H.data[keep], H.indices[keep], indptr), shape=H.shape)


def jacobian(expr, wrt: str, options: Options | None = None, flatten: bool = False) -> Jacobian:
    """The sparse Jacobian of a statement ``r[i] = ...`` (or a kernel from ``sc.compile``)
    with respect to the dense vector operand ``wrt``, or to the stored values of a sparse
    operand ``wrt`` (column ``p``: its ``p``-th stored entry in canonical order).  A matrix
    result gives a 3-D ``coo_array``, or with ``flatten=True`` a matrix whose rows are the
    result's indices flattened row-major (docs/derivatives.md)."""
    stmt, source, options = _source(expr, options)
    return Jacobian(stmt, source, wrt, options, flatten=flatten)


def jvp(expr, wrt: str, options: Options | None = None) -> ForwardDerivative:
    """Forward mode: ``sc.jvp(r, wrt="u")(**operands, tangent=v)`` is ``J @ v``, one kernel."""
    stmt, source, options = _source(expr, options)
    return ForwardDerivative(stmt, source, wrt, options)


def gradient(expr, wrt: str, options: Options | None = None) -> Gradient:
    """The gradient of a scalar statement ``f[] = ...`` with respect to ``wrt`` (dense)."""
    stmt, source, options = _source(expr, options)
    return Gradient(stmt, source, wrt, options)


def hessian(expr, wrt: str, options: Options | None = None) -> Hessian:
    """The sparse Hessian of a scalar statement ``f[] = ...`` with respect to ``wrt``."""
    stmt, source, options = _source(expr, options)
    return Hessian(stmt, source, wrt, options)


def hvp(expr, wrt: str, options: Options | None = None) -> HessianVector:
    """The Hessian-vector product ``H @ v`` of a scalar statement without forming H:
    ``sc.hvp(f, wrt="x")(**operands, tangent=v)`` (the forward derivative of the gradient);
    with respect to a sparse operand's stored values, ``v`` over its entries."""
    stmt, source, options = _source(expr, options)
    return HessianVector(stmt, source, wrt, options)
