"""Values on a known pattern: a Jacobian's repeated ``values(...)`` without building its pattern.

The first call (``J(...)`` or ``J.values(...)``) for some operand patterns runs the derivative
kernel (a sparse result: its pattern and values).  When that kernel is the hand-written element-wise merge
(``dialect/kernels/ewise.py``: ``L[i,k] + lam * exp(u[i]) * Id[i,k]``, a Jacobian's usual
shape), the same merge is also emitted values-only: it takes the pattern's positions and
fills an array of the pattern's length in its order, allocating nothing (no coordinates
written, no buffer grown, no pages of a fresh result cleared).  Later calls whose sparse
operands have exactly the index arrays of the first (compared with copies of them, so an
in-place change is a new pattern) run it (``J(...)`` then returns the values on a copy of the
recorded pattern); any other call takes the ordinary kernel, which also records the new
pattern (the last one per layout; copied, so nothing the caller holds is recorded).

The values kernel writes at the recorded positions, so the recorded pattern must be the one
the operands give: the index arrays are compared on every call, the shapes, index and value
dtypes too.  Every value is computed by the compiled kernel.
"""

from __future__ import annotations

import ctypes

import numpy as np
import scipy.sparse as sp

from ..dialect.kernels import ewise
from ..errors import OperandError
from ..expr import accesses
from ..runtime import fast_paths, targets
from ..runtime.loader import load_module
from ..runtime.memref import describe, specifier
from .common import _dtype_check


class _Recorded:
    """One operand pattern's values kernel, what it was compiled for, and the pattern."""

    def __init__(self, mod, names, keys, indices, pattern, dtype, sizes):
        self.mod, self.names, self.keys, self.indices = mod, names, keys, indices
        self.pattern, self.dtype, self.sizes = pattern, dtype, sizes
        self.shape = None


def _key(x):
    """What must not change between the recording call and a values-only one besides the
    index arrays' contents: the kind, shape, dtypes, layout."""
    if sp.issparse(x):
        return (x.format, x.shape, x.dtype, x.indptr.dtype, x.indices.dtype, bool(x.has_canonical_format))
    a = np.asarray(x)
    return ("dense", a.shape, a.dtype, a.flags.c_contiguous)


def _width(a: np.ndarray) -> int:
    return a.dtype.itemsize * 8


def _sorted_rows(x) -> bool:
    """Whether every row (column) of CSR (CSC) ``x`` has strictly increasing indices."""
    ind = x.indices.astype(np.int64, copy=False)
    if ind.size < 2:
        return True
    up = np.diff(ind) > 0
    starts = np.asarray(x.indptr[1:-1], np.int64) - 1      # the last entry of each row but the last
    starts = starts[(starts >= 0) & (starts < up.size)]
    up[starts] = True
    return bool(up.all())


class FixedPatternValues:
    """``run(args)``: the values of the recorded kernel's sparse result in its CSR/CSC
    order when ``args`` (by operand, in the statement's order) have the recorded pattern,
    else None; then the caller runs the ordinary kernel and hands its result to
    :meth:`record`.  ``pattern``: the recorded ``(indptr, indices)``."""

    def __init__(self):
        self._rec: _Recorded | None = None
        self.calls = 0                  # values-only calls (tests)

    @property
    def pattern(self):
        return None if self._rec is None else self._rec.pattern

    @property
    def shape(self):
        return None if self._rec is None else self._rec.shape

    def run(self, args: dict, out=None):
        rec = self._rec
        if rec is None or tuple(args) != rec.names:
            return None
        for x, key in zip(args.values(), rec.keys):
            if _key(x) != key:
                return None
        for n, (indptr, indices) in rec.indices.items():
            x = args[n]
            if not (np.array_equal(x.indptr, indptr) and np.array_equal(x.indices, indices)):
                return None
            d = x.data
            if not (isinstance(d, np.ndarray) and d.ndim == 1 and d.size == indices.size and d.flags.c_contiguous):
                return None             # (the ordinary path validates, and refuses, such values)
        out = np.empty(rec.pattern[1].size, rec.dtype) if out is None else _checked(out, rec.pattern[1].size,
                                                                                     rec.dtype)
        keep = [ctypes.c_int64(s) for s in rec.sizes]
        arrays = []                     # alive until the call returns
        for x in args.values():
            if sp.issparse(x):
                bufs = (x.indptr, x.indices, x.data)
                keep += [describe(b) for b in bufs]
                keep.append(specifier(list(x.shape) if x.format == "csr" else list(x.shape[::-1]),
                                      [b.size for b in bufs]))
            else:
                a = np.asarray(x)
                arrays.append(a)
                keep.append(describe(a))
        keep += [describe(rec.pattern[0]), describe(out)]
        argv = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
        if rec.mod.entry(argv):         # it allocates nothing: not expected; the ordinary kernel
            return None
        self.calls += 1
        return out

    def record(self, kernel, args: dict, result) -> None:
        """Compile (once per specialization: the disk cache) the values-only kernel of
        ``kernel``'s last call where it ran the hand-written merge, and record ``result``'s
        pattern for ``args``' index arrays (copied)."""
        self._rec = None
        stmt = kernel.stmt
        if not sp.issparse(result) or result.format not in ("csr", "csc") or tuple(args) != stmt.operands:
            return
        spec = kernel.last_specialization()
        if spec is None or spec.out_format is None:
            return
        dtypes = []
        for x, f in zip(args.values(), spec.formats):
            if sp.issparse(x):
                if x.format != result.format or not x.has_canonical_format or \
                        (_width(x.indptr), _width(x.indices)) != (f.pos_width, f.crd_width):
                    return              # a conversion on the ordinary path: not this one's
            elif not np.asarray(x).flags.c_contiguous:
                return
            dtypes.append(np.asarray(x).dtype.name if not sp.issparse(x) else x.dtype.name)
        if set(dtypes) != {result.dtype.name}:
            return                      # (mixed dtypes: the ordinary path converts)
        dtypes = tuple(dtypes)
        options = kernel.options
        target = targets.resolve(options)
        route = fast_paths.route(stmt, spec.formats, dtypes, spec.out_format, options.device,
                                 facts=target.kernel_facts())
        if route is None or route.kind != "ewise":     # the ordinary kernel was not the merge
            return
        plan = ewise.match(stmt, spec.formats, dtypes, spec.out_format)
        if plan is None or plan.reduce or _width(result.indptr) != spec.out_format.pos_width:
            return
        if not all(_sorted_rows(x) for x in args.values() if sp.issparse(x)):
            return                      # (a flag that says canonical wrongly: the merge needs it)
        parallel = options.parallel != "none" and bool(target.param("openmp"))
        mlir = ewise.emit(plan, dict(zip(stmt.operands, spec.formats)), spec.out_format, dtypes[0], parallel,
                          target.kernel_facts(), stmt, dtypes, values=True)
        mod = load_module(mlir, what=f"'{stmt}' (values on a known pattern)", options=options)
        sizes = {}
        for a in accesses(stmt.expr):
            sizes.update(zip(a.indices, np.shape(args[a.tensor])))
        self._rec = _Recorded(mod, tuple(args), tuple(_key(x) for x in args.values()),
                              {n: (x.indptr.copy(), x.indices.copy()) for n, x in args.items() if sp.issparse(x)},
                              (result.indptr.copy(), result.indices.copy()), result.dtype,
                              tuple(int(sizes[ix]) for ix in plan.index_order))
        self._rec.shape = result.shape


def known_values(jac, ops: dict, layout: str, out=None):
    """``(values, (indptr, indices))`` of Jacobian ``jac`` at ``ops`` by the values-only
    kernel where they have the pattern its last ``values(...)`` recorded, else None."""
    fixed = jac._fixed.get(layout)
    if fixed is None or jac.statement is None:
        return None
    args = jac._args(ops, _dtype_check(jac.stmt, ops, jac.wrt, jac.source), layout)
    names = jac.statement.operands
    if set(args) != set(names):
        return None
    vals = fixed.run({n: args[n] for n in names}, out)
    return None if vals is None else (vals, fixed.pattern)


def _checked(out, n: int, dtype) -> np.ndarray:
    if not (isinstance(out, np.ndarray) and out.shape == (n,) and out.dtype == dtype and out.flags.c_contiguous
            and out.flags.writeable):
        what = (f"a {type(out).__name__}" if not isinstance(out, np.ndarray) else
                f"shape {out.shape}, {out.dtype}{'' if out.flags.c_contiguous else ', not contiguous'}"
                f"{'' if out.flags.writeable else ', read-only'}")
        raise OperandError(f"values(out=...) takes a writeable contiguous {np.dtype(dtype)} array of shape ({n},) "
                           f"(the pattern's stored entries), got {what}")
    return out


def into(out, vals: np.ndarray) -> np.ndarray:
    """``vals``, or ``vals`` written into ``out`` (checked) and ``out``."""
    if out is None:
        return vals
    np.copyto(_checked(out, vals.size, vals.dtype), vals.reshape(-1))
    return out
