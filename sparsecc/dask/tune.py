"""``sc.compile(..., autotune=True)`` called with Dask operands: the formats are chosen on
one representative block - the first block of every Dask operand, and the matching slice
of every in-memory operand, cut as the plan cuts them (``sparsecc.dask.call``) - and the
chosen kernel then runs over the Dask arrays like any compiled kernel (docs/distributed.md)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import OperandError
from ..expr import accesses, describe
from . import _chunk_kind, is_dask


def representative_blocks(stmt, values) -> list:
    """In-memory operands for ``stmt`` cut to the first block along every index: each index
    takes the first chunk of the first Dask operand that reads it (the plan's rule), an index
    no Dask operand reads stays whole.  Dask blocks are fetched (``.compute()`` of one block:
    data moves, nothing is computed)."""
    from ..runtime.operands import as_operand
    names = stmt.operands
    inds = {}
    for a in accesses(stmt.expr):
        inds.setdefault(a.tensor, tuple(a.indices))
    first = {}
    for x, name in zip(values, names):
        if is_dask(x):
            _chunk_kind(x, describe(name))
            for d, i in enumerate(inds.get(name, ())):
                c = x.chunks[d][0] if x.chunks[d] else 0
                if isinstance(c, float) and np.isnan(c):
                    raise OperandError(f"{describe(name)} has unknown chunk sizes; call .compute_chunk_sizes() first")
                first.setdefault(i, int(c))
    out = []
    for x, name in zip(values, names):
        idx = inds.get(name, ())
        if not is_dask(x):
            x = as_operand(x, describe(name))
        if len(idx) != len(x.shape):
            out.append(x)               # the kernel's own call reports the rank mismatch
            continue
        cut = tuple(slice(0, min(first.get(i, n), n)) for i, n in zip(idx, x.shape))
        if is_dask(x):
            out.append(x[cut].compute())
        elif all(s.stop == n for s, n in zip(cut, x.shape)):
            out.append(x)
        elif sp.issparse(x) and x.ndim == 2:
            b = x.tocsr()[cut]
            out.append(b.asformat(x.format) if x.format in ("csr", "csc", "coo") else b)
        elif sp.issparse(x):
            import sparse
            c = x.tocoo()
            p = sparse.COO(np.vstack(c.coords), c.data, shape=c.shape)[cut]
            out.append(sp.coo_array((p.data, tuple(p.coords)), shape=p.shape))
        else:
            out.append(np.ascontiguousarray(x[cut]))
    return out
