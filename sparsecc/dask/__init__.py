"""sparsecc over Dask arrays: ``sc.einsum``, ``sc.evaluate`` and compiled kernels called with
``dask.array`` operands (mixed with in-memory ones) return lazy Dask arrays
(docs/distributed.md).

The plan (:func:`call`), made on the client before any task runs:

1. every Dask operand's chunk type is checked (NumPy, SciPy sparse, pydata/sparse COO/GCXS);
   an in-memory operand becomes a Dask array cut like the Dask operands;
2. each index takes the chunks of the first Dask operand that reads it; another operand cut
   differently along it is rechunked.  An index the split would change the meaning of
   (one reduced below the root, read by ``index()``, or summed from a non-neutral identity)
   is kept in one chunk;
3. one task per output block and per block of the split reduced indices runs the compiled
   kernel on its operand blocks; the partial results of one output block are combined by a
   tree of compiled kernels ``C[...] = op[z](P[..., z])`` with the root reduction's monoid
   ``op`` (a stored-entries reduction, so sparse partials combine as a union).

Kernels travel as their statement and options (:class:`_Spec`); a worker builds the
``Kernel`` once per process.  The client compiles the block and combine kernels for its own
CPU and ships their libraries as one graph key (:class:`_Libraries`), which each worker
installs in its own disk cache; a worker with another CPU has another cache key, finds
nothing and compiles once itself.
``dask`` is imported only here, and this module only when a Dask array is passed
(``sparsecc.dispatch`` imports it on demand; it registers :class:`DaskExecutor` there).
``ops.py``: the op library (``sc.ops``) over Dask arrays, as kernels planned here;
``tune.py``: ``autotune=True`` kernels called with Dask arrays (tuned on one block).
"""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import scipy.sparse as sp

from ..errors import OperandError, SparseccError
from ..expr import Index, Reduce, accesses, describe, walk
from ..formats import resolve
from ..runtime.pydata import is_pydata

#: how many partial results one combine task reduces
SPLIT_EVERY = 4
#: monoids whose partial results combine exactly from any identity (idempotent)
_IDEMPOTENT = frozenset({"min", "max", "lor", "land"})
_NEUTRAL = {"sum": 0, "plus": 0, "times": 1, "lxor": False}


def is_dask(x) -> bool:
    return type(x).__module__.startswith("dask.")


# --------------------------------------------------------------------- worker side
class _Spec:
    """A kernel as it travels to workers: statement, formats and options (all picklable);
    ``kernel()`` builds the ``Kernel`` once per process."""

    _built: dict = {}

    def __init__(self, stmt, formats, options, source, out_format, prune, check):
        self.args = (stmt, tuple(sorted(formats.items())), options, source, out_format, bool(prune), bool(check))

    def kernel(self):
        k = _Spec._built.get(self.args)
        if k is None:
            from ..runtime.kernel import Kernel
            stmt, formats, options, source, out_format, prune, check = self.args
            k = _Spec._built[self.args] = Kernel(stmt, dict(formats), options, source=source,
                                                 out_format=out_format, prune=prune, check=check)
        return k


def _chunk_out(r, rank: int):
    """A kernel's result as a Dask chunk: 0-d arrays for scalars, pydata COO for N-d sparse."""
    if sp.issparse(r):
        if r.ndim == 2:
            return r
        import sparse
        c = r.tocoo()
        return sparse.COO(np.vstack(c.coords) if c.nnz else np.zeros((r.ndim, 0), np.int64), c.data,
                          shape=r.shape, has_duplicates=False, sorted=bool(c.has_canonical_format))
    return np.asarray(r)


class _Libraries:
    """Compiled libraries the client ships with a graph (one graph key, so each worker
    fetches them once): ``(disk key, metadata, bytes)``.  A worker installs them in its own
    disk cache, where its kernel finds them as disk hits; on a worker with another CPU the
    keys differ, nothing matches and the worker compiles its own."""

    _installed: set = set()

    def __init__(self, entries):
        self.entries = tuple(entries)

    def install(self):
        from ..runtime import cache
        for key, info, data in self.entries:
            if key in _Libraries._installed:
                continue
            _Libraries._installed.add(key)
            try:
                cache.install_shipped(key, info, data)
            except OSError:         # an unwritable cache: the worker compiles instead
                pass


def _run_block(spec: _Spec, rank: int, libs: _Libraries, *blocks):
    libs.install()
    return _chunk_out(spec.kernel()(*blocks), rank)


def _stack(parts, rank: int):
    """The partial results as one operand with a trailing index ``z`` over them (building an
    operand: coordinates concatenated, no values computed)."""
    first = parts[0]
    if isinstance(first, np.ndarray):
        return np.stack(parts, axis=-1)
    from ..runtime.operands import as_operand
    coords, data = [], []
    for z, p in enumerate(parts):
        c = as_operand(p, "a partial result")
        c = c.tocoo() if c.format != "coo" else c
        cs = [np.asarray(k, dtype=np.int64) for k in c.coords]
        coords.append(np.vstack(cs + [np.full(c.nnz, z, np.int64)]))
        data.append(np.asarray(c.data))
    shape = tuple(int(s) for s in first.shape) + (len(parts),)
    return sp.coo_array((np.concatenate(data), tuple(np.concatenate(coords, axis=1))), shape=shape)


def _combine(cspec: _Spec, rank: int, libs: _Libraries, *parts):
    if len(parts) == 1:
        return parts[0]
    libs.install()
    return _chunk_out(cspec.kernel()(_stack(parts, rank)), rank)


# --------------------------------------------------------------------- client side
def _chunk_kind(x, what: str) -> str:
    """'dense' or 'sparse' for a Dask array's chunk type; an OperandError for others."""
    meta = getattr(x, "_meta", None)
    if isinstance(meta, np.ndarray):
        return "dense"
    if sp.issparse(meta):
        if x.ndim != 2:
            raise OperandError(f"{what} is a Dask array of SciPy {meta.format} chunks with rank {x.ndim}; "
                               f"use pydata/sparse COO chunks for rank != 2")
        return "sparse"
    if is_pydata(meta) and type(meta).__name__ in ("COO", "GCXS"):
        return "sparse"
    raise OperandError(f"{what} is a Dask array of {type(meta).__module__}.{type(meta).__name__} chunks; "
                       f"sparsecc runs on NumPy, SciPy sparse and pydata/sparse COO/GCXS chunks")


def _to_dask(x, what: str, chunks: tuple):
    """An in-memory operand as a Dask array cut into ``chunks`` (its blocks are slices), and
    a zero-size operand like its blocks (the Dask array's ``_meta`` is not always one: Dask
    replaces a meta it cannot slice, such as a BSR array, by a NumPy array)."""
    import dask.array as da
    from ..runtime.operands import as_operand
    x = as_operand(x, what)
    name = f"sparsecc-operand-{uuid.uuid4().hex}"
    if sp.issparse(x):
        if all(len(c) == 1 for c in chunks):
            # one block: the operand itself, in its own format (da.from_array would slice it,
            # and BSR and coo_matrix cannot be sliced)
            meta = _empty_sparse(x)
            dmeta = meta if meta.format in ("csr", "csc") or x.ndim != 2 else meta.tocsr()
            return da.Array({(name,) + (0,) * x.ndim: x}, name, chunks=chunks, dtype=x.dtype, meta=dmeta), meta
        if x.ndim == 2 and x.format in ("csr", "csc"):
            d = da.from_array(x, chunks=chunks, asarray=False, name=name, meta=x[:0, :0])
            return d, d._meta
        import sparse
        c = x.tocoo()
        x = sparse.COO(np.vstack(c.coords) if c.nnz else np.zeros((c.ndim, 0), np.int64), c.data,
                       shape=c.shape)
        # the blocks as sparsecc reads them (Dask's meta, an empty pydata slice, has int64
        # coordinates whatever the blocks' are: the library shipped would not be theirs)
        meta = sp.coo_array((0,) * x.ndim, dtype=x.dtype)
        meta.coords = tuple(np.zeros(0, x.coords.dtype) for _ in range(x.ndim))
        return da.from_array(x, chunks=chunks, asarray=False, name=name), meta
    d = da.from_array(x, chunks=chunks, name=name)
    return d, d._meta


def _empty_sparse(x):
    """A zero-size SciPy operand of ``x``'s class, format, dtype and (for BSR) block size."""
    if x.format == "bsr":
        return type(x)((0, 0), blocksize=x.blocksize, dtype=x.dtype)
    return type(x)((0,) * x.ndim, dtype=x.dtype)


def _empty_like(meta, rank: int):
    """A zero-size operand with ``meta``'s chunk type, dtype and index dtypes."""
    if isinstance(meta, np.ndarray):
        return np.empty((0,) * rank, dtype=meta.dtype)
    if sp.issparse(meta):
        if all(n == 0 for n in meta.shape):
            return meta
        return meta[:0, :0] if meta.format in ("csr", "csc") else meta.tocsr()[:0, :0]
    return meta


def _ship(spec: _Spec, cspec, metas, rank: int) -> _Libraries:
    """The libraries of the block kernel and the combine kernel, compiled here for this
    machine's CPU from zero-size operands like the blocks (best effort: on any failure
    nothing is shipped and the workers compile)."""
    from ..runtime import cache
    entries = []
    try:
        k = spec.kernel()
        part = k(*[_empty_like(m, len(m.shape)) for m in metas])
        keys = [k.last_specialization().key]
        if cspec is not None:
            c = cspec.kernel()
            p = _chunk_out(part, rank)
            c(_stack([p, p], rank))
            keys.append(c.last_specialization().key)
        for key in keys:
            e = cache.lookup(key)
            if e is not None:
                entries.append(cache.shippable(e))  # the IR text stays here: small tasks
    except Exception:   # noqa: BLE001 - shipping is an optimization; the workers compile instead
        entries = []
    return _Libraries(entries)


def _root(stmt):
    """(monoid, indices) of the reduction at the statement's root, or (None, ())."""
    e = stmt.expr
    if isinstance(e, Reduce):
        return e.op, tuple(e.indices), e.identity
    return None, (), None


def call(kernel, args, ship: bool = True):
    """``kernel(*args)`` where some operands are Dask arrays: a lazy Dask array.  ``ship``:
    compile the kernels here and send their libraries with the graph (workers with this
    CPU then load them instead of compiling)."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    from .. import dtypes as dt

    stmt = kernel.stmt
    names, whats = stmt.operands, kernel.operand_descriptions()
    inds: dict[str, tuple[str, ...]] = {}
    for a in accesses(stmt.expr):
        if inds.setdefault(a.tensor, tuple(a.indices)) != tuple(a.indices):
            raise SparseccError(f"{describe(a.tensor)} is read twice with different indices "
                                f"({','.join(inds[a.tensor])} and {','.join(a.indices)}); over Dask arrays "
                                f"each operand is read once - pass it twice under two names")
    out_inds = tuple(stmt.indices)
    op, root, identity = _root(stmt)
    # indices whose split changes nothing but the order of the root monoid's terms
    splittable_red = set()
    if op is not None and (op in _IDEMPOTENT or identity is None or identity == _NEUTRAL.get(op)):
        splittable_red = set(root)
    pinned = {e.name for e in walk(stmt.expr) if isinstance(e, Index)}
    whole = {i for ii in inds.values() for i in ii if i not in out_inds and i not in splittable_red} | pinned

    from ..runtime.operands import as_operand
    args = [x if is_dask(x) else as_operand(x, what) for x, what in zip(args, whats)]   # scalars, lists
    for x, what, name in zip(args, whats, names):
        if is_dask(x):
            if any(isinstance(c, float) and np.isnan(c) for cc in x.chunks for c in cc):
                raise OperandError(f"{what} has unknown chunk sizes; call .compute_chunk_sizes() first")
            _chunk_kind(x, what)
        if len(x.shape) != len(inds[name]):
            raise OperandError(f"{what} has rank {len(x.shape)}, but '{kernel.source}' reads it with "
                               f"{len(inds[name])} indices")
    # sizes and the chunks of each index: the first Dask operand that reads it decides
    size, chunks = {}, {}
    for x, name, what in zip(args, names, whats):
        for d, i in enumerate(inds[name]):
            n = int(x.shape[d])
            if size.setdefault(i, n) != n:
                raise OperandError(f"index {i!r} has size {size[i]} in one operand but {n} in {what}")
            if is_dask(x) and i not in chunks:
                chunks[i] = tuple(int(c) for c in x.chunks[d])
    for i in size:
        if i in whole or i not in chunks:
            chunks[i] = (size[i],)
    ops, metas = [], []
    for x, name, what in zip(args, names, whats):
        want = tuple(chunks[i] for i in inds[name])
        if is_dask(x):
            if tuple(x.chunks) != want:
                x = x.rechunk(want)        # cut like the operand that decided each index
            meta = x._meta
        else:
            x, meta = _to_dask(x, what, want)
        ops.append(x)
        metas.append(meta)
    # the result: dense or sparse, decided as an in-memory call with such operands decides
    sparse_ops = []
    dtypes = []
    for name, x, what, meta in zip(names, ops, whats, metas):
        spec = kernel.formats.get(name)
        if spec is not None and not (isinstance(spec, str) and spec.strip().lower() == "bsr"):
            sparse_ops.append(not resolve(spec, len(inds[name]), what).is_dense)
        else:
            sparse_ops.append(not isinstance(meta, np.ndarray))
        dtypes.append(dt.lookup(x.dtype, what).name)
    out_shape = tuple(size[i] for i in out_inds)
    out_fmt = kernel.result_format([n for n, s in zip(names, sparse_ops) if s], out_shape)
    out_dtype = kernel.result_dtype(dtypes)
    rank = len(out_inds)

    spec = _Spec(stmt, kernel.formats, kernel.options, kernel.source, kernel.out_format, kernel.prune,
                 kernel.check)
    split = [i for i in root if len(chunks.get(i, (1,))) > 1]
    cspec = None
    if split:
        z = "z_"
        while z in size:
            z += "_"
        letters = [f"i{k}_" for k in range(rank)]
        lhs = f"C[{','.join(letters)}]" if rank else "C"
        body = f"{op}[{z}](P[{','.join(letters + [z])}])"
        from ..parse import parse_notation
        cstmt = parse_notation(f"{lhs} = {body}")
        asked = kernel.out_format.strip().lower() if isinstance(kernel.out_format, str) else None
        if out_fmt is None:
            cout = "dense"
        elif rank == 2 and asked in ("csr", "csc", "coo"):
            cout = asked                # the partials' own SciPy layout
        elif rank == 2 and out_fmt.order == (1, 0):
            cout = "csc"
        else:
            cout = "csr" if rank == 2 else "coo"
        cspec = _Spec(cstmt, {}, kernel.options, f"{lhs} = {body}", cout, kernel.prune, kernel.check)

    token = uuid.uuid4().hex
    name = f"sparsecc-{token}"
    pname = f"sparsecc-partial-{token}"
    lkey = f"sparsecc-libraries-{token}"
    dsk = {lkey: _ship(spec, cspec, metas, rank) if ship else _Libraries(())}
    out_blocks = [range(len(chunks[i])) for i in out_inds]
    red_blocks = [range(len(chunks[i])) for i in split]
    for bo in itertools.product(*out_blocks):
        at = dict(zip(out_inds, bo))
        level = []
        for br in itertools.product(*red_blocks):
            at.update(zip(split, br))
            keys = [(x.name,) + tuple(at.get(i, 0) for i in inds[n]) for x, n in zip(ops, names)]
            k = (pname, 0) + bo + br if split else (name,) + bo
            dsk[k] = (_run_block, spec, rank, lkey, *keys)
            level.append(k)
        if not split:
            continue
        depth = 0
        while len(level) > 1:
            depth += 1
            nxt = []
            for g in range(0, len(level), SPLIT_EVERY):
                k = (pname, depth) + bo + (g,)
                dsk[k] = (_combine, cspec, rank, lkey, *level[g:g + SPLIT_EVERY])
                nxt.append(k)
            level = nxt
        dsk[(name,) + bo] = (_combine, cspec, rank, lkey, level[0])
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=ops)
    out_chunks = tuple(chunks[i] for i in out_inds)
    if out_fmt is None:
        meta = np.empty((0,) * rank, dtype=out_dtype)
    elif rank == 2:
        meta = (sp.csc_array if out_fmt.order == (1, 0) else sp.csr_array)((0, 0), dtype=out_dtype)
    else:
        import sparse
        meta = sparse.COO(np.zeros((rank, 0), np.int64), np.zeros(0, out_dtype), shape=(0,) * rank)
    return da.Array(graph, name, chunks=out_chunks, dtype=out_dtype, meta=meta)


class DaskExecutor:
    """Calls with a Dask operand (``sparsecc.dispatch``): the lazy Dask array of :func:`call`."""

    every_call = False

    def claims(self, kernel, operands) -> bool:
        return any(is_dask(x) for x in operands)

    def run(self, kernel, operands):
        return call(kernel, list(operands))


from .. import dispatch as _dispatch  # noqa: E402  (after the executor it registers)

_dispatch.register(DaskExecutor())
