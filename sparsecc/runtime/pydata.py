"""pydata/sparse operands (``sparse.COO`` of any rank, ``sparse.GCXS``) as SciPy arrays over
the same buffers: a COO's ``coords`` (rank x nnz) and ``data`` become an N-d ``coo_array``,
a 2-D GCXS compressed along axis 0 (1) a ``csr_array`` (``csc_array``), without copies.
Other pydata arrays (DOK, N-d GCXS) are converted to COO first (a change of layout).

``sparse`` is never imported here: an operand is recognized by its type's module, so
``import sparsecc`` stays free of it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import OperandError


def is_pydata(x) -> bool:
    mod = type(x).__module__
    return mod == "sparse" or mod.startswith("sparse.")


def to_scipy(x, what: str):
    """``x`` (a pydata/sparse array) as a SciPy sparse array sharing its buffers."""
    fill = getattr(x, "fill_value", 0)
    try:
        nonzero_fill = bool(np.asarray(fill) != 0)      # NaN too
    except Exception:   # noqa: BLE001 - an odd fill value: refuse it below
        nonzero_fill = True
    if nonzero_fill:
        raise OperandError(f"{what} is a pydata/sparse array with fill_value={fill!r}; sparsecc reads "
                           f"unstored entries as 0 (make it with fill_value=0)")
    name = type(x).__name__
    shape = tuple(int(s) for s in x.shape)
    if name == "GCXS" and len(shape) == 2 and tuple(x.compressed_axes) in ((0,), (1,)):
        cls = sp.csr_array if tuple(x.compressed_axes) == (0,) else sp.csc_array
        out = cls((x.data, x.indices, x.indptr), shape=shape)
        return out
    if name != "COO":
        if not hasattr(x, "asformat"):
            raise OperandError(f"{what} is a pydata/sparse {name}, which sparsecc does not read")
        x = x.asformat("coo")
    coords = np.asarray(x.coords)
    if coords.ndim != 2 or coords.shape[0] != len(shape):
        raise OperandError(f"{what} is a pydata/sparse COO whose coords have shape {coords.shape}, "
                           f"not (rank, nnz) = ({len(shape)}, nnz)")
    # set the buffers directly: SciPy's constructor may cast the coordinates (a copy)
    out = sp.coo_array(shape, dtype=x.data.dtype)
    out.coords = tuple(coords)           # rows of (rank, nnz): views, no copy
    out.data = x.data
    out.has_canonical_format = False     # validation finds the order out
    return out
