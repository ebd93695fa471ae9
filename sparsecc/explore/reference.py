"""The independent check of each candidate's result.

Candidates are never only compared with each other's output: the first candidate to run
may itself be wrong (MLIR 22 miscompiles are recorded in the code).  Two references:

- :class:`SampledReference`: the statement written out in NumPy at a few sampled output
  coordinates (random ones, ones where operands store entries, and some of each sparse
  result's stored entries), from the operands' values alone.  It covers NumPy-meaning
  statements: accesses, constants, ``index(i)``, ``+``, ``-``, ``*``, negation, ``sum``
  reductions and ``dense(...)``, with numeric (non-bool) operands and reduction grids of at
  most :data:`GRID_LIMIT` points per sampled entry.  This is a check of a few entries, not
  a result: every result still comes from a compiled kernel.
- :class:`Majority`: for other statements (monoids, ``stored``, comparisons, ...), the
  candidates that agree with each other form groups; the largest group, if strictly larger
  than every other one, is right and the others wrong.  A tie leaves the tied candidates
  unverified (not ok), so autotuning never remembers one of them.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..expr import Access, Binary, Const, Dense, Index, Reduce, Unary, accesses, infer_dtypes, walk
from .compare import _entries, _tolerance, compare

#: the sampler evaluates at most this many points of a reduction per sampled entry
GRID_LIMIT = 1 << 21
#: sampled output coordinates: this many at random and this many where operands store entries
N_RANDOM, N_STORED = 16, 16
#: stored entries of each sparse candidate result also checked
N_RESULT = 16
_SEED = 20240613


class _Unsupported(Exception):
    pass


def _supported(stmt, values) -> bool:
    for e in walk(stmt.expr):
        if isinstance(e, (Access, Const, Index, Dense)):
            if isinstance(e, Access) and len(set(e.indices)) != len(e.indices):
                return False                    # a repeated index (a diagonal): not sampled
            continue
        if isinstance(e, Binary) and e.op in ("+", "-", "*"):
            continue
        if isinstance(e, Unary) and e.fn == "neg":
            continue
        if isinstance(e, Reduce) and e.op == "sum":
            continue
        return False
    return all(np.dtype(v.dtype).kind in "iufc" for v in values)


class _Operand:
    """An operand's values for the sampler: dense as given; sparse as canonical COO, with
    its entries sorted by the dimensions a lookup fixes (made once per set of dimensions)."""

    def __init__(self, x):
        self.shape = tuple(int(s) for s in x.shape)
        if sp.issparse(x):
            c = x.tocoo(copy=True)              # never the user's arrays
            c.sum_duplicates()
            self.coords = [np.asarray(k, dtype=np.int64) for k in c.coords]
            self.data = np.asarray(c.data)
            self.dense = None
        else:
            self.dense = np.asarray(x)
        self._sorted: dict = {}

    def sub(self, fixed: dict[int, int], free: list[int]) -> np.ndarray:
        """The values at the fixed positions (dimension -> coordinate) over the free
        dimensions (in ``free``'s order), dense."""
        if self.dense is not None:
            idx = tuple(fixed[d] if d in fixed else slice(None) for d in range(len(self.shape)))
            view = self.dense[idx]
            kept = [d for d in range(len(self.shape)) if d not in fixed]
            return np.transpose(view, [kept.index(d) for d in free])
        out = np.zeros([self.shape[d] for d in free], dtype=self.data.dtype)
        dims = tuple(sorted(fixed))
        if dims not in self._sorted:
            key = (np.ravel_multi_index([self.coords[d] for d in dims], [self.shape[d] for d in dims])
                   if dims else np.zeros(self.data.size, np.int64))
            order = np.argsort(key, kind="stable")
            self._sorted[dims] = (key[order], order)
        keys, order = self._sorted[dims]
        want = np.ravel_multi_index([fixed[d] for d in dims], [self.shape[d] for d in dims]) if dims else 0
        lo, hi = np.searchsorted(keys, want, "left"), np.searchsorted(keys, want, "right")
        pick = order[lo:hi]
        if pick.size and free:
            np.add.at(out, tuple(self.coords[d][pick] for d in free), self.data[pick])
        elif pick.size:
            out[()] = self.data[pick].sum()     # canonical: one entry at most
        return out


class SampledReference:
    """The statement evaluated in NumPy at sampled output coordinates (see the module)."""

    kind = "sampled"

    def __init__(self, stmt, names, values, sizes: dict[str, int]):
        self.stmt = stmt
        self.sizes = sizes
        self.ops = {n: _Operand(v) for n, v in zip(names, values)}
        self.dtype = infer_dtypes(stmt, {n: np.dtype(v.dtype) for n, v in zip(names, values)})[stmt.expr]
        self.shape = tuple(sizes[i] for i in stmt.indices)
        self.rtol = _tolerance(self.dtype)
        self._cache: dict[tuple, tuple] = {}
        self.samples = self._sample_coordinates()
        for c in self.samples:
            self._at(c)

    # ---------------------------------------------------------------- where to look
    def _sample_coordinates(self) -> list[tuple]:
        rng = np.random.default_rng(_SEED)
        size = math.prod(self.shape)
        if size == 0:
            return []
        if size <= N_RANDOM + N_STORED:
            return [tuple(int(v) for v in np.unravel_index(k, self.shape)) for k in range(size)] \
                if self.shape else [()]
        out = {tuple(int(rng.integers(0, n)) for n in self.shape) for _ in range(N_RANDOM)}
        # where a sparse operand stores entries: its coordinates for the output indices it has
        where = [(a, self.ops[a.tensor]) for a in accesses(self.stmt.expr)
                 if self.ops[a.tensor].dense is None and self.ops[a.tensor].data.size]
        for k in range(N_STORED if where else 0):
            a, op = where[k % len(where)]
            e = int(rng.integers(0, op.data.size))
            at = {i: int(op.coords[d][e]) for d, i in enumerate(a.indices)}
            out.add(tuple(at[i] if i in at else int(rng.integers(0, self.sizes[i])) for i in self.stmt.indices))
        return sorted(out)

    # ---------------------------------------------------------------- evaluation
    def _at(self, coord: tuple) -> tuple:
        """(value, magnitude, terms) of the result at ``coord``: the magnitude is the
        statement with every operand and constant made absolute (the scale of rounding
        errors), ``terms`` the count of nonzero terms its reductions summed."""
        got = self._cache.get(coord)
        if got is None:
            bound = dict(zip(self.stmt.indices, coord))
            self._terms = 0
            with np.errstate(all="ignore"):
                val, mag = self._eval(self.stmt.expr, bound, [])
            val = np.asarray(val).astype(self.dtype)[()]
            got = self._cache[coord] = (val, float(np.real(mag)), self._terms)
        return got

    def _eval(self, e, bound: dict, axes: list):
        """``e`` with indices in ``bound`` fixed, as an array with one axis per entry of
        ``axes`` (the enclosing reductions' indices; size-1 where ``e`` does not use one)."""
        if isinstance(e, Access):
            op = self.ops[e.tensor]
            fixed = {d: bound[i] for d, i in enumerate(e.indices) if i in bound}
            free_idx = [i for i in axes if i in e.indices]
            sub = op.sub(fixed, [e.indices.index(i) for i in free_idx])
            shape = [self.sizes[i] if i in e.indices else 1 for i in axes]
            v = sub.reshape(shape)
            return v, np.abs(v)
        if isinstance(e, Const):
            return e.value, abs(e.value)
        if isinstance(e, Index):
            if e.name in bound:
                return np.int64(bound[e.name]), abs(bound[e.name])
            shape = [self.sizes[i] if i == e.name else 1 for i in axes]
            v = np.arange(self.sizes[e.name], dtype=np.int64).reshape(shape)
            return v, v
        if isinstance(e, Dense):
            return self._eval(e.body, bound, axes)
        if isinstance(e, Unary):                 # neg
            v, m = self._eval(e.arg, bound, axes)
            return np.negative(v), m
        if isinstance(e, Binary):
            a, ma = self._eval(e.left, bound, axes)
            b, mb = self._eval(e.right, bound, axes)
            if e.op == "*":
                return a * b, np.multiply(ma, mb, dtype=np.float64)
            return (a + b if e.op == "+" else a - b), np.add(ma, mb, dtype=np.float64)
        if isinstance(e, Reduce):               # sum
            new = [i for i in e.indices if i not in bound and i not in axes]
            full = [self.sizes[i] for i in axes + new]
            if math.prod(full) > GRID_LIMIT:
                raise _Unsupported
            v, m = self._eval(e.body, bound, axes + new)
            v, m = np.broadcast_to(np.asarray(v), full), np.broadcast_to(np.asarray(m, dtype=np.float64), full)
            drop = tuple(range(len(axes), len(full)))
            self._terms += int(np.count_nonzero(m))
            body_dt = v.dtype
            v, m = np.sum(v, axis=drop), np.sum(m, axis=drop)
            if body_dt.kind in "iu":
                v = v.astype(body_dt)             # einsum's rule: the body's dtype (wrapping)
            return v, m
        raise _Unsupported

    def describe(self) -> str:
        return f"the statement written out in NumPy at {len(self.samples)} sampled entries"

    # ---------------------------------------------------------------- checking
    def check(self, result) -> str | None:
        """``None`` if ``result`` matches the reference at every sampled coordinate (and at
        some of a sparse result's stored entries), else why not."""
        is_sparse = sp.issparse(result)
        shape = tuple(result.shape) if (is_sparse or hasattr(result, "shape")) else ()
        if shape != self.shape:
            return f"shape {shape} differs from {self.shape}"
        dtype = np.dtype(result.dtype if hasattr(result, "dtype") else type(result))
        if dtype != self.dtype:
            return f"dtype {dtype} differs from {self.dtype}"
        coords = list(self.samples)
        if is_sparse:
            keys, vals = _entries(result, shape)
            if keys.size:
                pick = np.random.default_rng(_SEED + 1).choice(keys.size, min(N_RESULT, keys.size), replace=False)
                for k in sorted(pick):
                    c = tuple(int(v) for v in np.unravel_index(int(keys[k]), shape))
                    try:
                        self._at(c)
                        coords.append(c)
                    except Exception:   # noqa: BLE001 - the sampler's own limit: check the rest
                        pass
            if coords:
                lin = np.array([np.ravel_multi_index(c, shape) for c in coords], dtype=np.int64)
                at = np.searchsorted(keys, lin)
                found = (at < keys.size) & (keys[np.minimum(at, max(keys.size - 1, 0))] == lin) \
                    if keys.size else np.zeros(lin.size, bool)
                got = np.zeros(lin.size, dtype=vals.dtype)
                got[found] = vals[at[found]]
        else:
            arr = np.asarray(result)
            got = np.array([arr[c] for c in coords], dtype=arr.dtype)
        if not coords:
            return None
        want = np.array([self._at(c)[0] for c in coords], dtype=self.dtype)
        mag = np.array([self._at(c)[1] for c in coords])
        terms = np.array([self._at(c)[2] for c in coords], dtype=np.float64)
        if self.rtol is None:
            bad = np.flatnonzero(got != want)
        else:
            eps = float(np.finfo(self.dtype).eps)
            # summation order differs: |error| <= (terms + 2) eps sum|term| (both sides rounded)
            tol = mag * np.maximum(self.rtol, 2 * eps * (terms + 2)) + np.finfo(np.float64).tiny
            with np.errstate(invalid="ignore"):
                diff = np.abs(got.astype(np.complex128) - want.astype(np.complex128))
                ok = (diff <= tol) | (np.isnan(got) & np.isnan(want)) | (got == want)
            bad = np.flatnonzero(~ok)
        if bad.size == 0:
            return None
        k = int(bad[0])
        return (f"{bad.size} of {len(coords)} sampled entries differ from the statement evaluated "
                f"in NumPy, e.g. at {coords[k]}: {got[k]!r} instead of {want[k]!r}")


def sampled_reference(stmt, names, values, sizes) -> SampledReference | None:
    """A :class:`SampledReference` if the statement is within the sampler, else ``None``."""
    if not _supported(stmt, values):
        return None
    try:
        return SampledReference(stmt, names, values, sizes)
    except (_Unsupported, MemoryError, ValueError, TypeError, OverflowError):
        return None


class Majority:
    """Groups of candidates with equal results (one result kept per group)."""

    kind = "majority"

    def __init__(self):
        self.groups: list[list] = []           # [representative result, [rows]]

    def add(self, row, result) -> None:
        for g in self.groups:
            if compare(result, g[0]) is None:
                g[1].append(row)
                return
        self.groups.append([result, [row]])

    def verdicts(self) -> dict:
        """``{id(row): None (right) or why not}`` once every candidate ran: the largest group
        is right if it is strictly larger than every other; without one, nothing is."""
        groups = sorted(self.groups, key=lambda g: -len(g[1]))
        total = sum(len(g[1]) for g in groups)
        won = groups[0] if groups and (len(groups) == 1 or len(groups[0][1]) > len(groups[1][1])) else None
        counts = ", ".join(str(len(g[1])) for g in groups)
        out: dict = {}
        for g in groups:
            if g is won:
                why = None
            elif won is not None:
                why = (f"wrong result (against the majority of candidates, {len(won[1])} of {total}): "
                       f"{compare(g[0], won[0])}")
            else:
                why = f"unverified: the candidates disagree without a majority (groups of {counts} of {total})"
            out.update((id(row), why) for row in g[1])
        return out
