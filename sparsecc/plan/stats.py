"""Operand statistics and estimates of an intermediate's stored entries.

A :class:`TensorStats` describes one tensor of a plan under the statement's index names:
its indices and sizes, its stored entries, and per index the stored entries of each slice
(``counts``; ``None``: unknown, read as uniform).  :func:`of_operand` reads them from a real
operand in O(nnz) (``np.diff`` of the index pointers, ``np.bincount`` of the coordinates); an
operand's coordinates stay reachable for the sampled estimate.

Three estimates of the entries of ``sum[C](X * Y)`` projected onto the indices ``out``
(``C``: the indices of X and Y not in ``out``):

* :func:`uniform_estimate` - coordinates independent and uniform given the per-slice
  counts: the join's size from the counts of a shared index, then balls into bins per slice
  of an output index (so heavy rows collide more);
* :func:`degree_bound` - an upper bound in Galley's style (degree constraints): no output
  slice stores more than its size or than its products, each product bounded by the other
  side's largest degree on the shared index;
* :func:`sampled_estimate` - for two operands whose coordinates are known: the exact number
  of products of each slice of an output index (one ``searchsorted`` per entry), then the
  distinct outputs of up to ``SAMPLES`` slices drawn with probability proportional to their
  products (a fixed seed: the same operands give the same estimate in every process); the
  estimate is ``products * mean(distinct / products)`` of the drawn slices - unbiased, exact
  when every slice with products is drawn.

:func:`estimate` picks among them: the sampled estimate where both operands are real
sparse operands, an exact rule where one side is dense (the other side's distinct
projections times the dense side's free sizes), else the uniform estimate; each capped by
the bound.  Nothing here computes a result: only counts of coordinates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: slices the sampled estimate draws
SAMPLES = 256
#: products the sampled estimate expands at most (it draws fewer slices beyond)
MAX_EXPANDED = 1 << 18
#: the seed of the draw (fixed: plans are deterministic)
SEED = 0x5C_0E57


@dataclass(eq=False)
class TensorStats:
    """Statistics of one tensor of a plan: ``indices`` (names), ``sizes``, ``nnz`` (stored
    entries, an estimate for intermediates), ``full`` (every entry stored: a dense operand or
    a product of dense ones), ``counts`` (per index: an array of the stored entries of each
    slice, or None), ``nonempty`` (per index: the slices storing anything, or None) and, for a
    real sparse operand, ``coords`` (its coordinates per index, made on first use)."""

    indices: tuple[str, ...]
    sizes: tuple[int, ...]
    nnz: float
    full: bool = False
    counts: tuple = ()
    nonempty: tuple = ()
    source: object = None          # the SciPy operand (coordinates on demand)
    _coords: list = field(default_factory=list, repr=False)    # [per-dimension coordinates], shared by renamings

    def __post_init__(self):
        if not self.counts:
            self.counts = (None,) * len(self.indices)
        if not self.nonempty:
            self.nonempty = (None,) * len(self.indices)
        self._volume = math.prod(self.sizes)
        self._sums: dict = {}           # index position -> the sum of its counts (a planning asks often)
        self._bytes: dict = {}          # (stored dense?, itemsize) -> cost.tensor_bytes

    @property
    def volume(self) -> int:
        return self._volume

    def count_sum(self, index: str) -> float:
        """``float(self.count(index).sum())``, once."""
        at = self.indices.index(index)
        got = self._sums.get(at)
        if got is None:
            got = self._sums[at] = float(self.count(index).sum())
        return got

    @property
    def density(self) -> float:
        v = self.volume
        return 1.0 if v == 0 else min(1.0, self.nnz / v)

    def size_of(self, index: str) -> int:
        return self.sizes[self.indices.index(index)]

    def count(self, index: str) -> np.ndarray:
        """The stored entries of each slice along ``index`` (uniform where unknown)."""
        at = self.indices.index(index)
        c = self.counts[at]
        if c is None:
            n = self.sizes[at]
            return np.full(n, self.nnz / n if n else 0.0)
        return c

    def nonempty_slices(self, index: str) -> float:
        at = self.indices.index(index)
        ne = self.nonempty[at]
        if ne is not None:
            return ne
        n = self.sizes[at]
        if self.full:
            return n if self.nnz else 0
        return n * (1 - math.exp(-self.nnz / n)) if n else 0.0

    def coords(self) -> dict | None:
        """The coordinates of a real sparse operand per index (``None`` for others)."""
        if self.source is None:
            return None
        if not self._coords:
            self._coords.append(_coordinates(self.source))
        return dict(zip(self.indices, self._coords[0]))

    def renamed(self, indices: tuple[str, ...]) -> "TensorStats":
        """The same tensor read under other index names (an access ``A[i,k]``)."""
        return TensorStats(tuple(indices), self.sizes, self.nnz, self.full, self.counts, self.nonempty,
                           self.source, self._coords)


def _coordinates(x) -> tuple[np.ndarray, ...]:
    fmt = x.format
    if fmt in ("csr", "csc") and x.ndim == 2:
        p = np.asarray(x.indptr)
        outer = np.arange(len(p) - 1, dtype=np.int64).repeat(p[1:] - p[:-1])
        inner = np.asarray(x.indices, dtype=np.int64)
        return (outer, inner) if fmt == "csr" else (inner, outer)
    c = x if fmt == "coo" else x.tocoo()
    return tuple(np.asarray(a, dtype=np.int64) for a in c.coords)


def of_operand(x, indices: tuple[str, ...] | None = None) -> TensorStats:
    """The statistics of a SciPy sparse or NumPy operand (O(nnz); nothing is copied but
    the counts).  ``indices``: the names of its dimensions (default ``d0, d1, ...``)."""
    shape = tuple(int(s) for s in np.shape(x))
    indices = tuple(indices) if indices is not None else tuple(f"d{d}" for d in range(len(shape)))
    if not _is_sparse(x):
        v = math.prod(shape)
        counts = tuple(np.full(n, v / n if n else 0.0) for n in shape)
        return TensorStats(indices, shape, float(v), True, counts, tuple(n if v else 0 for n in shape))
    counts = []
    fmt = x.format
    if fmt in ("csr", "csc") and x.ndim == 2:
        p = np.asarray(x.indptr)
        along = (p[1:] - p[:-1]).astype(np.float64)
        across = np.bincount(np.asarray(x.indices), minlength=shape[1 if fmt == "csr" else 0]).astype(np.float64)
        counts = [along, across] if fmt == "csr" else [across, along]
        nnz = int(p[-1]) if p.size else 0
    else:
        c = x if fmt == "coo" else x.tocoo()
        nnz = int(c.nnz)
        counts = [np.bincount(np.asarray(a), minlength=n).astype(np.float64) for a, n in zip(c.coords, shape)]
        x = c
    nonempty = tuple(int(np.count_nonzero(c)) for c in counts)
    return TensorStats(indices, shape, float(nnz), False, tuple(counts), nonempty, x)


def _is_sparse(x) -> bool:
    return hasattr(x, "format") and hasattr(x, "nnz") and not isinstance(x, np.ndarray)


# ------------------------------------------------------------------------- estimates
def _shared(x: TensorStats, y: TensorStats) -> list[str]:
    return [i for i in x.indices if i in y.indices]


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """``a . b`` without BLAS (whose threads spin on a loaded machine for a short vector)."""
    return float(np.multiply(a, b).sum())


def _flat(x: TensorStats, index: str) -> float | None:
    """The stored entries of every slice along ``index`` where ``x`` knows no counts there
    (uniform: what :meth:`TensorStats.count` fills its array with), else None.  The
    estimates below compute with this one number where a side is uniform, instead of an
    array of it: most of a planning's time went into such arrays."""
    at = x.indices.index(index)
    if x.counts[at] is not None:
        return None
    n = x.sizes[at]
    return x.nnz / n if n else 0.0


def _dot_counts(x: TensorStats, y: TensorStats, k: str) -> float:
    """``x.count(k) . y.count(k)``."""
    fx, fy = _flat(x, k), _flat(y, k)
    if fx is None and fy is None:
        key = ("dot", id(y), k)         # once per pair (the join's size and the bound ask both)
        got = x._sums.get(key)
        if got is None:
            got = x._sums[key] = (_dot(x.count(k), y.count(k)), y)     # (y kept: its id stays its own)
        return got[0]
    if fx is not None and fy is not None:
        return x.size_of(k) * fx * fy
    return (fx if fx is not None else fy) * (y if fx is not None else x).count_sum(k)


def _largest(x: TensorStats, k: str) -> float:
    """``max(x.count(k), initial=0)``."""
    f = _flat(x, k)
    if f is None:
        key = ("max", k)                # once per statistics (as count_sum)
        got = x._sums.get(key)
        if got is None:
            got = x._sums[key] = float(x.count(k).max(initial=0.0))
        return got
    return max(f, 0.0) if x.size_of(k) else 0.0


def join_size(x: TensorStats, y: TensorStats) -> float:
    """The estimated products of ``X * Y`` (pairs of stored entries agreeing on the shared
    indices): exact for one shared index whose counts are known, else independent."""
    return _join(x, y, _shared(x, y))


def _join(x: TensorStats, y: TensorStats, shared: list[str]) -> float:
    """:func:`join_size` given the shared indices."""
    if not shared:
        return x.nnz * y.nnz
    if len(shared) == 1:        # (the usual case: what the loop below gives, without it)
        return _dot_counts(x, y, shared[0])
    best = math.inf
    for k in shared:
        others = math.prod(x.size_of(s) for s in shared if s != k)
        dot = _dot_counts(x, y, k)
        best = min(best, dot / others if others else 0.0)
    return best


def _sizes(x: TensorStats, y: TensorStats) -> dict[str, int]:
    out = dict(zip(x.indices, x.sizes))
    out.update(zip(y.indices, y.sizes))
    return out


def _group(x: TensorStats, y: TensorStats, out: tuple[str, ...]):
    """The output index to group products by, and the side it comes from (X first)."""
    for i in out:
        if i in x.indices:
            return i, x, y
    for i in out:
        if i in y.indices:
            return i, y, x
    return None, x, y


def uniform_estimate(x: TensorStats, y: TensorStats, out: tuple[str, ...]) -> float:
    """Entries of ``sum[C](X * Y)`` on ``out`` if coordinates were independent and uniform
    given the per-slice counts of one output index (balls into bins per slice)."""
    sizes = _sizes(x, y)
    return _uniform(x, y, out, sizes, math.prod(sizes[i] for i in out), join_size(x, y))


def _uniform(x: TensorStats, y: TensorStats, out, sizes: dict, volume: int, join: float) -> float:
    """:func:`uniform_estimate` given the sizes, the result's volume and the join's size."""
    if join <= 0 or volume == 0:
        return 0.0
    if set(out) == set(x.indices) | set(y.indices):     # nothing contracted
        return min(join, volume)
    if not out:
        return 1.0
    g, gx, _ = _group(x, y, out)
    fan = join / gx.nnz if gx.nnz else 0.0
    vslice = volume / sizes[g]
    flat = _flat(gx, g)
    if flat is not None:
        return sizes[g] * (vslice * -math.expm1(-(flat * fan) / vslice))
    per_slice = gx.count(g) * fan
    return float(np.add.reduce(vslice * -np.expm1(-per_slice / vslice)))    # (np.sum's reduction)


def degree_bound(x: TensorStats, y: TensorStats, out: tuple[str, ...]) -> float:
    """An upper bound on the entries of ``sum[C](X * Y)`` on ``out`` (degree constraints):
    each slice of an output index stores at most its volume, and at most its products,
    each entry of that side meeting at most the other side's largest degree on a shared
    index; also the whole volume and the products themselves."""
    sizes = _sizes(x, y)
    return _degree_bound(x, y, out, sizes, math.prod(sizes[i] for i in out), _shared(x, y))


def _degree_bound(x: TensorStats, y: TensorStats, out, sizes: dict, volume: int, shared: list[str],
                  join: float | None = None, cap: float | None = None) -> float:
    """:func:`degree_bound` given the sizes, the result's volume and the shared indices
    (``join``: :func:`join_size`, where known: with one shared index, the products' bound).
    ``cap``: the estimate the bound caps (``estimate``): then the result is only sure to
    give ``min(cap, degree_bound(...))`` - a slice term over an array of counts is skipped
    where a lower bound on it, from the counts' sum and largest count, shows it cannot go
    below the cap or the bound so far (the same minimum, without its array arithmetic)."""
    bound = float(volume)
    if not shared:
        bound = min(bound, x.nnz * y.nnz)
    elif join is not None and len(shared) == 1:
        bound = min(bound, join)        # (join_size's one dot product)
    else:
        bound = min(bound, min(_dot_counts(x, y, k) for k in shared))
    if out and shared:
        for side, other in ((x, y), (y, x)):
            for g in out:
                if g in side.indices:
                    break
            else:
                continue
            degree = _largest(other, shared[0]) if len(shared) == 1 else min(_largest(other, k) for k in shared)
            vslice = volume / sizes[g] if sizes[g] else 0.0
            flat = _flat(side, g)
            if flat is not None:
                bound = min(bound, sizes[g] * min(vslice, flat * degree))
            else:
                if cap is not None and _term_above(side, g, vslice, degree, min(cap, bound)):
                    continue
                bound = min(bound, float(np.add.reduce(np.minimum(vslice, side.count(g) * degree))))
    return bound


#: the relative margin :func:`_term_above` keeps below its lower bound (a float sum of n terms
#: errs by under ~log2(n) units in the last place: 1e-9 covers any array by far)
_MARGIN = 1e-9


def _term_above(side: TensorStats, g: str, vslice: float, degree: float, low: float) -> bool:
    """Whether ``np.add.reduce(np.minimum(vslice, side.count(g) * degree))`` is surely at
    least ``low``: each slice's term ``min(v, c * d)`` is at least ``(c / M) * min(v, M * d)``
    for ``0 <= c <= M`` (concave in ``c``, 0 at 0), so the sum is at least
    ``(S / M) * min(v, M * d)`` - the counts' sum ``S`` and largest ``M``, kept per statistics."""
    m = _largest(side, g)
    if not m > 0 or not degree >= 0 or not vslice >= 0:
        return False
    return side.count_sum(g) / m * min(vslice, m * degree) * (1 - _MARGIN) > low


def _keys(coords: dict, names, sizes: dict) -> np.ndarray | None:
    """One int64 key per entry from the coordinates of ``names`` (None: it would overflow).
    One name: its coordinates themselves (read only: every caller only reads a key)."""
    if math.prod(max(sizes[n], 1) for n in names) >= 1 << 62:
        return None
    if len(names) == 1:
        return coords[names[0]]
    key = None
    for n in names:
        c = coords[n]
        key = c.copy() if key is None else key * sizes[n] + c
    return key if key is not None else np.zeros(len(next(iter(coords.values()))), np.int64)


def _outer_pointers(x: TensorStats, shared: list[str]) -> np.ndarray | None:
    """The index pointers of a SciPy CSR/CSC operand compressed along the one index in
    ``shared`` (its entries in that index's order), else None."""
    src = x.source
    if len(shared) != 1 or src is None or src.format not in ("csr", "csc") or src.ndim != 2:
        return None
    outer = x.indices[0] if src.format == "csr" else x.indices[1]
    if outer != shared[0]:
        return None
    return np.asarray(src.indptr, dtype=np.int64)


def sampled_estimate(x: TensorStats, y: TensorStats, out: tuple[str, ...]) -> tuple[float, np.ndarray, str] | None:
    """The sampled estimate for two real sparse operands (module docstring): ``(entries,
    estimated entries per slice of the grouping index, that index)``, or None where it does
    not apply (a side without coordinates, keys that would overflow)."""
    cx, cy = x.coords(), y.coords()
    if cx is None or cy is None:
        return None
    sizes = _sizes(x, y)
    g, gx, gy = _group(x, y, out)
    if g is None:
        return None
    cgx, cgy = (cx, cy) if gx is x else (cy, cx)
    shared = _shared(gx, gy)
    kx = _keys(cgx, shared, sizes)
    rest = [i for i in out if i != g]
    if kx is None or math.prod(sizes[i] for i in out) >= 1 << 62:
        return None     # (Y's keys, over the same names, would overflow alike)
    ptr = _outer_pointers(gy, shared)
    if ptr is not None:         # Y compressed along the one shared index: its own positions
        order = None
        deg = (ptr[1:] - ptr[:-1])[kx]
    else:
        ky = _keys(cgy, shared, sizes)
        order = np.argsort(ky, kind="stable")
        sky = ky[order]
        lo = np.searchsorted(sky, kx, "left")
        deg = np.searchsorted(sky, kx, "right") - lo
    groups = cgx[g]
    per_group = np.bincount(groups, weights=deg, minlength=sizes[g])
    total = float(per_group.sum())
    if total == 0:
        return 0.0, np.zeros(sizes[g]), g
    if np.count_nonzero(per_group) <= SAMPLES:
        drawn = per_group.nonzero()[0]
        mult = np.ones(drawn.size)
        exact = True
    else:
        pick = _draw(per_group / total)
        m = SAMPLES
        while True:     # draws are independent: fewer of them where they would expand too much
            times = np.bincount(pick[:m], minlength=sizes[g])    # (np.unique's values and counts)
            drawn = times.nonzero()[0]
            if per_group[drawn].sum() <= MAX_EXPANDED or m <= 16:
                break
            m //= 2
        mult = times[drawn].astype(np.float64)
        exact = False
    mark = np.zeros(sizes[g], bool)     # (np.isin's answer, by a table: drawn are slices of g)
    mark[drawn] = True
    sel = mark[groups].nonzero()[0]
    d = deg[sel]
    n = int(d.sum())
    # the products of the drawn slices: X's entry ``sel`` repeated once per partner, Y's
    # partners at ``at`` (its first partner's position, then the next ones)
    first = ptr[kx[sel]] if order is None else lo[sel]
    at = (first - (d.cumsum() - d)).repeat(d) + np.arange(n)
    if order is not None:
        at = order[at]
    # (int32 keys where they fit: the same values, sorted faster)
    kind = np.int64 if math.prod(sizes[i] for i in out) >= 1 << 31 else np.int32
    key = None
    for i in [g] + rest:
        c = cgx[i][sel].repeat(d) if i in gx.indices else cgy[i][at]
        if key is None:
            key = c.astype(kind)
        else:
            key *= sizes[i]
            key += c.astype(kind, copy=False)
    distinct = _distinct(key)
    owner = distinct // max(1, math.prod(sizes[i] for i in rest))
    dist_g = np.bincount(owner, minlength=sizes[g])[drawn].astype(np.float64)    # (owners are drawn slices)
    if exact:
        per = np.zeros(sizes[g])
        per[drawn] = dist_g
        return float(dist_g.sum()), per, g
    ratio = dist_g / per_group[drawn]
    mean = float((ratio * mult).sum() / mult.sum())
    per = per_group * mean
    per[drawn] = dist_g
    return total * mean, per, g


def _draw(p: np.ndarray) -> np.ndarray:
    """``np.random.default_rng(SEED).choice(p.size, size=SAMPLES, p=p)``, as NumPy's
    ``Generator.choice`` computes it (the cumulative sum normalised, uniform draws placed by
    ``searchsorted``: the same draws), without its argument checks (a third of an estimate)."""
    cdf = p.cumsum()
    cdf /= cdf[-1]
    u = _UNIFORM.get((SEED, SAMPLES))
    if u is None:
        u = _UNIFORM[(SEED, SAMPLES)] = np.random.default_rng(SEED).random(SAMPLES)
    return cdf.searchsorted(u, side="right")


_UNIFORM: dict = {}         # (seed, samples) -> the draw's uniform numbers, made once


def _distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` (sorted distinct values) by a sort: NumPy 2's ``unique`` hashes, and
    costs about 25 times a sort on the ten thousand keys of a planning's estimate."""
    s = a.copy()
    s.sort()
    if s.size < 2:
        return s
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _distinct_projection(x: TensorStats, names: list[str]) -> float:
    """The distinct projections of ``x``'s stored entries onto ``names`` (exact for a real
    operand, else balls into bins)."""
    if not names:
        return 1.0 if x.nnz else 0.0
    sizes = dict(zip(x.indices, x.sizes))
    if set(names) == set(x.indices):
        return x.nnz
    if len(names) == 1 and x.nonempty[x.indices.index(names[0])] is not None:
        return float(x.nonempty[x.indices.index(names[0])])
    c = x.coords()
    if c is not None:
        key = _keys(c, names, sizes)
        if key is not None:
            return float(_distinct(key).size)
    v = math.prod(sizes[n] for n in names)
    return v * -math.expm1(-x.nnz / v) if v else 0.0


def estimate(x: TensorStats, y: TensorStats, out: tuple[str, ...]) -> TensorStats:
    """The statistics of ``sum[C](X * Y)`` on ``out`` (its index order): the entries by the
    best estimate that applies (module docstring), capped by :func:`degree_bound`."""
    sizes = _sizes(x, y)
    out = tuple(out)
    shape = tuple([sizes[i] for i in out])
    volume = math.prod(shape)
    full = x.full and y.full and all([sizes[i] for i in sizes if i not in out])
    per, g = None, None
    if len(set(out)) == len(sizes):     # nothing reduced (out holds only their indices): every product is an entry
        nnz = float(min(join_size(x, y), volume)) if not full else float(volume)
    elif full:
        nnz = float(volume)
    elif x.full or y.full:
        sparse, dense = (y, x) if x.full else (x, y)
        mine = [i for i in out if i in sparse.indices]
        free = math.prod(sizes[i] for i in out if i not in sparse.indices)
        nnz = _distinct_projection(sparse, mine) * free
        if any(sizes[i] == 0 for i in dense.indices if i not in out):
            nnz = 0.0
    else:
        # (the sampled estimate needs both sides' coordinates: real sparse operands)
        got = sampled_estimate(x, y, out) if x.source is not None and y.source is not None else None
        shared = _shared(x, y)
        join = None
        if got is not None:
            nnz, per, g = got
        else:
            join = _join(x, y, shared)
            nnz = _uniform(x, y, out, sizes, volume, join)
        nnz = min(nnz, _degree_bound(x, y, out, sizes, volume, shared, join, nnz))
    nnz = float(min(nnz, volume))
    if per is None:
        counts = nonempty = (None,) * len(out)
    else:
        filled = int(np.count_nonzero(per))
        counts = tuple([per if i == g else None for i in out])
        nonempty = tuple([filled if i == g else None for i in out])
    # ``full`` follows the operands' kinds only (dense ones), never their contents: a plan
    # is reused for every call of the same statistics class, so what it relies on for
    # correctness (a dense intermediate where only stored entries count) must hold for all
    return TensorStats(out, shape, nnz, full, counts, nonempty)

