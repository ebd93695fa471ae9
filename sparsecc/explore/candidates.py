"""The candidates of an exploration: formats per operand (defaults by kind and rank, BSR
block sizes that fit the data), option variants and thread counts."""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from ..errors import FormatError, OperandError, SparseccError
from ..expr import describe
from ..formats import Format, resolve
from ..options import DEFAULT, Options
from ..runtime.operands import to_coo

#: at most this many candidates unless ``max_candidates`` says otherwise
MAX_CANDIDATES = 64
_BLOCK_SIZES = (2, 4, 8)


def _own_name(x) -> str:
    if sp.issparse(x):
        if x.format == "bsr":
            return f"bsr{x.blocksize[0]}x{x.blocksize[1]}"
        return x.format if x.format in ("csr", "csc", "coo") else "csr"
    return "dense"


@lru_cache(maxsize=None)
def _csf(rank: int, order: tuple[int, ...]) -> Format:
    name = "csf" if order == tuple(range(rank)) else "csf(" + ",".join(map(str, order)) + ")"
    return Format(("compressed",) * rank, order, name=name)


def _block_candidates(x, shape) -> list[str]:
    """BSR block sizes that divide the shape and fill at least half of each stored block on
    this data (the two fullest, larger first on ties); if none does, the smallest dividing
    one (a cheap point of comparison).  One O(nnz) pass per size."""
    divides = [b for b in _BLOCK_SIZES if shape[0] % b == 0 and shape[1] % b == 0 and min(shape) >= b]
    if not divides:
        return []
    c = to_coo(x) if sp.issparse(x) else sp.coo_array(np.asarray(x))
    nnz = c.nnz
    good = []
    for b in divides:
        if nnz == 0:
            break
        blocks = np.unique((np.asarray(c.coords[0], np.int64) // b) * (shape[1] // b)
                           + np.asarray(c.coords[1], np.int64) // b).size
        fill = nnz / (blocks * b * b)
        if fill >= 0.5:
            good.append((fill, b))
    if not good:
        return [f"bsr{divides[0]}x{divides[0]}"]
    good = sorted(good, reverse=True)[:2]
    return [f"bsr{b}x{b}" for _, b in sorted(good, key=lambda g: g[1])]


def _default_candidates(x, rank: int, shape, allow_blocks: bool) -> list:
    own = _own_name(x)
    if not sp.issparse(x):
        return ["dense"]
    if rank == 1:
        return ["coo"]
    if rank == 2:
        cands = [own, "csr", "csc", "coo", "dcsr", "dcsc"]
        if allow_blocks:
            cands += _block_candidates(x, shape)
        elif own.startswith("bsr"):
            cands.remove(own)
        return list(dict.fromkeys(cands))
    orders = list(itertools.permutations(range(rank))) if rank == 3 else \
        [tuple(range(rank)[k:]) + tuple(range(rank)[:k]) for k in range(rank)] + [tuple(reversed(range(rank)))]
    return ["coo"] + [_csf(rank, o) for o in dict.fromkeys(orders)]


def _as_list(v) -> list:
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


def _check_spec(spec, rank: int, what: str):
    if spec is None:
        return
    if isinstance(spec, str) and spec.strip().lower() == "bsr":
        raise FormatError(f"{what}: name the block size to explore, e.g. 'bsr2x2'")
    resolve(spec, rank, what)


def _format_candidates(formats, names, values, ranks, shapes, allow_blocks) -> list[list]:
    n = len(names)
    per: list = [None] * n
    if formats is None:
        pass
    elif isinstance(formats, dict):
        for key, v in formats.items():
            if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < n:
                k = key
            elif isinstance(key, str) and key in names:
                k = names.index(key)
            else:
                shown = ", ".join(o if not o.startswith("#") else o[1:] for o in names)
                raise FormatError(f"formats names operand {key!r}, which is not an operand "
                                  f"(operands: {shown}; einsum operands by position)")
            per[k] = _as_list(v)
    elif isinstance(formats, (list, tuple)):
        if len(formats) != n:
            raise OperandError(f"formats lists {len(formats)} entries for {n} operand(s); give one "
                               f"format or list of formats per operand, or a dict")
        per = [None if v is None else _as_list(v) for v in formats]
    else:
        raise FormatError(f"formats is a dict or a list (one entry per operand), got {type(formats).__name__}")
    out = []
    for k in range(n):
        what = describe(names[k])
        if per[k] is None:
            out.append(_default_candidates(values[k], ranks[k], shapes[k], allow_blocks))
            continue
        if not per[k]:
            raise FormatError(f"formats gives {what} no candidates")
        cands = []
        for spec in per[k]:
            spec = _own_name(values[k]) if spec is None else spec
            _check_spec(spec, ranks[k], what)
            cands.append(spec)
        out.append(list(dict.fromkeys(cands)))
    return out


def _option_candidates(options, index_widths, vector_lengths) -> list[Options]:
    if options is None:
        base = [DEFAULT]
    elif isinstance(options, Options):
        base = [options]
    elif isinstance(options, (list, tuple)) and options and all(isinstance(o, Options) for o in options):
        base = list(dict.fromkeys(options))
    else:
        raise SparseccError(f"options is sc.Options or a list of them, got {options!r}")
    out = []
    for o in base:
        for iw in (_as_list(index_widths) if index_widths is not None else [o.index_width]):
            for vl in (_as_list(vector_lengths) if vector_lengths is not None else [o.vector_length]):
                out.append(replace(o, index_width=iw, vector_length=vl))   # validated there
    return list(dict.fromkeys(out))


def _thread_candidates(threads) -> list:
    if threads is None:
        return [None]
    vals = _as_list(threads)
    for t in vals:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
            raise SparseccError(f"threads are positive integers, got {t!r}")
    if not vals:
        raise SparseccError("threads is empty")
    return list(dict.fromkeys(int(t) for t in vals))



def _is_block(spec) -> bool:
    if isinstance(spec, Format):
        return spec.block is not None
    return isinstance(spec, str) and spec.strip().lower().startswith("bsr")
