"""Format exploration and autotuning on the user's own data.

``sc.explore(expression, *operands, ...)`` compiles the expression for every candidate
combination of storage formats (and, if asked, index widths, vector lengths and thread
counts), runs each once, checks its result against the first candidate that ran, times it
and returns an :class:`ExploreReport`, ranked fastest first.  ``sc.compile(...,
autotune=True)`` explores on its first call and remembers the choice on disk
(:class:`AutotunedKernel`).

Every result comes from a compiled kernel: candidates are only compared with each other.
"""

from __future__ import annotations

import gc
import hashlib
import html
import itertools
import json
import math
import os
import platform
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from . import _progress
from . import dtypes as dt
from .errors import FormatError, OperandError, ShapeError, SparseccError
from .expr import accesses, describe, index_sizes
from .formats import Format, resolve
from .options import DEFAULT, Options
from .parse import looks_like_notation, parse_einsum, parse_notation
from .runtime.kernel import bind_named
from ._machine import cpu_model

#: at most this many candidates unless ``max_candidates`` says otherwise
MAX_CANDIDATES = 64
#: each timing sample loops the kernel for at least this long (tiny kernels: clock resolution)
MIN_SAMPLE_S = 1e-3
#: results with at most this many elements are compared densely, larger sparse ones by entries
DENSE_COMPARE_LIMIT = 1 << 22
#: an autotuned kernel's exploration stops starting new candidates after this many seconds
AUTOTUNE_BUDGET_S = 60.0
AUTOTUNE_REPEAT = 5
_BLOCK_SIZES = (2, 4, 8)


# --------------------------------------------------------------------------- rows and the report
@dataclass
class Row:
    """One candidate.  ``formats``: one format per operand, in operand order (a name or an
    ``sc.Format``); ``threads``: the thread count it ran with (``None``: left as it was).
    ``median_s``: median seconds per call; ``compile_s``: first call minus one run (the
    compile, or the load from the disk cache when ``cached``); ``convert_s``: of each call,
    the time spent building the operands' buffers before native code runs (measured on its
    own: an estimate); ``ok``: ran and matched the reference; ``error``: why not;
    ``ran_as``: the formats the kernel stored its operands in, where they differ."""

    formats: tuple
    options: Options
    threads: int | None = None
    median_s: float | None = None
    compile_s: float | None = None
    convert_s: float | None = None
    ok: bool = False
    error: str | None = None
    cached: bool = False
    runs: int = 0
    index: int = 0                # position in exploration order (0: the baseline)
    ran_as: tuple | None = None   # the formats the kernel stored operands in, where they differ

    @property
    def status(self) -> str:
        if not self.ok:
            return self.error or "failed"
        if self.ran_as:
            return "ok, ran as " + ", ".join(_spec_name(s) for s in self.ran_as)
        return "ok"


def _spec_name(spec) -> str:
    if spec is None:
        return "own"
    if isinstance(spec, Format):
        return str(spec)
    return str(spec).strip()


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


class ExploreReport:
    """What :func:`explore` found.  ``rows`` are ranked: candidates that ran, fastest first,
    then those that failed, gave a different result or were skipped.  ``best`` is a ready
    ``Kernel`` with the winning formats and options (``sc.set_num_threads(report.best_threads)``
    for the thread count, if threads were explored)."""

    def __init__(self, expression: str, operands: tuple[str, ...], rows: list[Row], out_format=None,
                 notes: list[str] | None = None, elapsed_s: float = 0.0, repeat: int = 0):
        self.expression = expression
        self.operands = tuple(operands)
        self.out_format = out_format
        self.notes = list(notes or [])
        self.elapsed_s = elapsed_s
        self.repeat = repeat
        ok = sorted((r for r in rows if r.ok), key=lambda r: (r.median_s, r.index))
        rest = sorted((r for r in rows if not r.ok),
                      key=lambda r: (str(r.error or "").startswith("skipped"), r.index))
        self.rows = ok + rest
        self._best = None

    # --------------------------------------------------------------- the winner
    def _winner(self) -> Row:
        if not self.rows or not self.rows[0].ok:
            why = "; ".join(dict.fromkeys(r.status for r in self.rows)) or "no candidates"
            raise SparseccError(f"no candidate of '{self.expression}' ran: {why}")
        return self.rows[0]

    @property
    def best_formats(self) -> tuple:
        return self._winner().formats

    @property
    def best_options(self) -> Options:
        return self._winner().options

    @property
    def best_threads(self) -> int | None:
        return self._winner().threads

    @property
    def best_row(self) -> Row:
        return self._winner()

    @property
    def best(self):
        """``sc.compile(expression, *best_formats, options=best_options)``."""
        if self._best is None:
            self._best = _compile(self.expression, self.best_formats, self.best_options, self.out_format)
        return self._best

    # --------------------------------------------------------------- display
    def _baseline(self) -> Row | None:
        base = [r for r in self.rows if r.index == 0 and r.ok]
        if base:
            return base[0]
        ok = [r for r in self.rows if r.ok]
        return max(ok, key=lambda r: r.median_s) if ok else None

    def _varied_options(self) -> list[str]:
        all_names = [f.name for f in fields(Options)]
        names = [f for f in all_names if len({getattr(r.options, f) for r in self.rows}) > 1]
        return names or [f for f in all_names if any(getattr(r.options, f) != getattr(DEFAULT, f) for r in self.rows)]

    def _options_text(self, o: Options, shown: list[str]) -> str:
        return ", ".join(f"{f}={getattr(o, f)}" for f in shown) or "-"

    def table(self) -> list[list[str]]:
        """The report as rows of text: a header, then one row per candidate."""
        shown = self._varied_options()
        base = self._baseline()
        show_conv = any(r.convert_s and r.median_s and r.convert_s > 0.05 * r.median_s for r in self.rows)
        head = ["rank", "formats", "options", "threads", "time", "speedup", "compile"]
        head += ["of which convert"] if show_conv else []
        head += ["status"]
        out = [head]
        for k, r in enumerate(self.rows):
            line = [str(k + 1) if r.ok else "-", ", ".join(_spec_name(s) for s in r.formats),
                    self._options_text(r.options, shown), "-" if r.threads is None else str(r.threads),
                    _fmt_time(r.median_s),
                    f"{base.median_s / r.median_s:.2f}x" if (r.ok and base and r.median_s) else "-",
                    "cached" if r.cached else _fmt_time(r.compile_s)]
            if show_conv:
                line.append(_fmt_time(r.convert_s) if r.convert_s else "-")
            status = r.status
            line.append(status if len(status) <= 100 else status[:97] + "...")
            out.append(line)
        return out

    def _title(self) -> str:
        n_ok = sum(r.ok for r in self.rows)
        n_skip = sum(str(r.error or "").startswith("skipped") for r in self.rows)
        n_fail = len(self.rows) - n_ok - n_skip
        ops = ", ".join(o if not o.startswith("#") else f"operand {o[1:]}" for o in self.operands)
        parts = [f"{len(self.rows)} candidate{'s' if len(self.rows) != 1 else ''}", f"{n_ok} ran"]
        if n_fail:
            parts.append(f"{n_fail} failed or wrong")
        if n_skip:
            parts.append(f"{n_skip} skipped")
        base = self._baseline()
        against = "-" if base is None else ("the first candidate" if base.index == 0 else "the slowest") + \
            f" ({', '.join(_spec_name(s) for s in base.formats)})"
        return (f"sc.explore '{self.expression}' (formats of {ops}): {', '.join(parts)} in {self.elapsed_s:.1f} s\n"
                f"time: median per call of {self.repeat} samples; speedup: against {against}; "
                f"compile: first call minus one run (cached: no compile)")

    def __str__(self) -> str:
        t = self.table()
        widths = [max(len(row[c]) for row in t) for c in range(len(t[0]))]
        lines = [self._title()]
        for row in t:
            cells = [c.rjust(w) if k in (0, 4, 5, 6) else c.ljust(w) for k, (c, w) in enumerate(zip(row, widths))]
            lines.append("  ".join(cells).rstrip())
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        t = self.table()
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in t[0])
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in t[1:])
        notes = "".join(f"<p>note: {esc(n)}</p>" for n in self.notes)
        title = "<br>".join(esc(t) for t in self._title().splitlines())
        return (f"<div><p>{title}</p><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table>{notes}</div>")

    # --------------------------------------------------------------- data
    def to_dict(self) -> dict:
        return {"sparsecc_explore": 1, "expression": self.expression, "operands": list(self.operands),
                "out_format": encode_format(self.out_format), "elapsed_s": self.elapsed_s,
                "repeat": self.repeat, "notes": self.notes,
                "rows": [{"formats": [encode_format(s) for s in r.formats], "options": asdict(r.options),
                          "threads": r.threads, "median_s": r.median_s, "compile_s": r.compile_s,
                          "convert_s": r.convert_s, "ok": r.ok, "error": r.error, "cached": r.cached,
                          "runs": r.runs, "index": r.index,
                          "ran_as": None if r.ran_as is None else [encode_format(s) for s in r.ran_as]}
                         for r in self.rows]}

    def to_json(self, path: str | None = None) -> str:
        """The report as JSON text (also written to ``path`` if given)."""
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    @classmethod
    def from_json(cls, text: str) -> ExploreReport:
        """A report from :meth:`to_json`'s text (``best`` compiles again when asked for)."""
        try:
            d = json.loads(text)
            if not isinstance(d, dict) or d.get("sparsecc_explore") != 1:
                raise ValueError("not a sparsecc explore report")
            rows = [Row(tuple(decode_format(s) for s in r["formats"]), Options(**r["options"]), r["threads"],
                        r["median_s"], r["compile_s"], r["convert_s"], bool(r["ok"]), r["error"],
                        bool(r["cached"]), int(r["runs"]), int(r["index"]),
                        None if r.get("ran_as") is None else tuple(decode_format(s) for s in r["ran_as"]))
                    for r in d["rows"]]
            return cls(d["expression"], tuple(d["operands"]), rows, decode_format(d["out_format"]),
                       d["notes"], float(d["elapsed_s"]), int(d["repeat"]))
        except SparseccError:
            raise
        except (ValueError, KeyError, TypeError) as err:
            raise SparseccError(f"not a sparsecc explore report: {err}") from None

    # --------------------------------------------------------------- chart
    def plot(self, path: str = "explore.png", title: str | None = None) -> str:
        """A horizontal bar chart of the candidates that ran (fastest on top), saved as PNG
        with matplotlib's Agg renderer (no window, no global pyplot state).  Returns ``path``."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            raise SparseccError("ExploreReport.plot needs matplotlib (pip install matplotlib)") from None
        ok = [r for r in self.rows if r.ok]
        shown = self._varied_options()
        labels, secs = [], []
        for r in ok:
            lab = ", ".join(_spec_name(s) for s in r.formats)
            o = self._options_text(r.options, shown)
            if o != "-":
                lab += f" | {o}"
            if r.threads is not None:
                lab += f" | {r.threads} thr"
            labels.append(lab if len(lab) <= 60 else lab[:57] + "...")
            secs.append(r.median_s)
        scale, unit = 1.0, "s"
        if secs:
            for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
                if max(secs) >= scale:
                    break
        fig = Figure(figsize=(8, 1.2 + 0.32 * max(len(ok), 1)))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        y = np.arange(len(ok))
        vals = [s / scale for s in secs]
        conv = [min(r.convert_s or 0.0, r.median_s) / scale for r in ok]
        show_conv = any(c > 0.05 * v for c, v in zip(conv, vals))
        if not show_conv:
            conv = [0.0] * len(ok)
        colors = ["tab:green" if k == 0 else "tab:blue" for k in range(len(ok))]
        ax.barh(y, [v - c for v, c in zip(vals, conv)], color=colors, label="kernel call")
        if show_conv:
            ax.barh(y, conv, left=[v - c for v, c in zip(vals, conv)], color="lightgray", hatch="//",
                    edgecolor="gray", label="of which building operand buffers (estimate)")
            ax.legend(fontsize=7, loc="lower right")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"median time per call ({unit})")
        for k, v in enumerate(vals):
            ax.text(v, k, f" {v:.3g}", va="center", fontsize=7)
        failed = len(self.rows) - len(ok)
        ax.set_title(title or f"sc.explore '{self.expression}'" + (f" ({failed} not shown: failed/skipped)"
                                                                  if failed else ""), fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=100, format="png")
        return path


# --------------------------------------------------------------------------- format (de)serialization
def encode_format(spec):
    """A format spec as JSON data: a name stays a string, an ``sc.Format`` becomes a dict."""
    if spec is None or isinstance(spec, str):
        return spec
    if isinstance(spec, Format):
        return {"levels": list(spec.levels), "order": list(spec.order),
                "block": list(spec.block) if spec.block else None,
                "pos_width": spec.pos_width, "crd_width": spec.crd_width, "name": spec.name}
    raise FormatError(f"cannot store format {spec!r}")


def decode_format(obj):
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        return Format(tuple(obj["levels"]), tuple(obj["order"]),
                      tuple(obj["block"]) if obj.get("block") else None,
                      obj.get("pos_width"), obj.get("crd_width"), name=obj.get("name") or "")
    raise FormatError(f"not a stored format: {obj!r}")


# --------------------------------------------------------------------------- comparing results
def _tolerance(dtype: np.dtype) -> float | None:
    """Relative tolerance for results of ``dtype`` (``None``: exact)."""
    if dtype.kind in "biu":
        return None
    return 1e-4 if dtype in (np.float32, np.complex64) or dtype.itemsize <= 4 else 1e-9


def _close(got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> str | None:
    rtol = _tolerance(dtype)
    if rtol is None:
        if np.array_equal(got, want):
            return None
        bad = int(np.count_nonzero(got != want))
        return f"{bad} of {got.size} values differ"
    g, w = np.asarray(got), np.asarray(want)
    finite = np.abs(w[np.isfinite(w)])
    scale = float(finite.max()) if finite.size else 0.0
    # candidates sum in different orders: errors scale with the largest value, not each entry
    atol = rtol * scale if scale else np.finfo(np.float64).tiny
    if np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        return None
    with np.errstate(invalid="ignore"):
        d = np.abs(g - w)
    nan_mismatch = int(np.count_nonzero(np.isnan(g) != np.isnan(w)))
    worst = float(np.nanmax(d)) if d.size and not np.all(np.isnan(d)) else float("nan")
    return (f"values differ: max |difference| {worst:.3g} (tolerance {atol + rtol * scale:.3g})"
            + (f", {nan_mismatch} NaN positions differ" if nan_mismatch else ""))


def _entries(x, shape) -> tuple[np.ndarray, np.ndarray]:
    """A sparse result's entries as (sorted unique linear indices, summed values)."""
    c = x.tocoo()
    coords = [np.asarray(k, dtype=np.int64) for k in c.coords]
    lin = np.ravel_multi_index(coords, shape) if c.nnz else np.zeros(0, np.int64)
    keys, inv = np.unique(lin, return_inverse=True)
    vals = np.zeros(keys.size, dtype=c.data.dtype)
    np.add.at(vals, inv.reshape(-1), c.data)
    return keys, vals


def compare(got, want) -> str | None:
    """``None`` if result ``got`` matches ``want`` (shape, dtype, values within a dtype-aware
    tolerance: exact for integers and bool, 1e-4 for 32-bit floats and 1e-9 for 64-bit, both
    relative to the largest value, NaN equal to NaN), else why not.  Sparse results are
    compared densely when small, else entry by entry (an absent entry counts as zero)."""
    gs, ws = sp.issparse(got), sp.issparse(want)
    g_shape = tuple(got.shape) if (gs or hasattr(got, "shape")) else ()
    w_shape = tuple(want.shape) if (ws or hasattr(want, "shape")) else ()
    if g_shape != w_shape:
        return f"shape {g_shape} differs from {w_shape}"
    g_dt, w_dt = np.dtype(got.dtype if hasattr(got, "dtype") else type(got)), \
        np.dtype(want.dtype if hasattr(want, "dtype") else type(want))
    if g_dt != w_dt:
        return f"dtype {g_dt} differs from {w_dt}"
    size = math.prod(g_shape)
    if not (gs or ws) or size <= DENSE_COMPARE_LIMIT:
        g = got.toarray() if gs else np.asarray(got)
        w = want.toarray() if ws else np.asarray(want)
        return _close(g.reshape(-1), w.reshape(-1), w_dt)
    if not (gs and ws):
        # one dense and one sparse large result: compare the dense one's entries
        dense, sparse_ = (np.asarray(got), want) if ws else (np.asarray(want), got)
        nz = np.flatnonzero(dense)
        dense = sp.coo_array((dense.reshape(-1)[nz], np.unravel_index(nz, g_shape)), shape=g_shape)
        got, want = (dense, sparse_) if ws else (sparse_, dense)
    gk, gv = _entries(got, g_shape)
    wk, wv = _entries(want, w_shape)
    keys = np.union1d(gk, wk)
    G = np.zeros(keys.size, dtype=g_dt)
    W = np.zeros(keys.size, dtype=w_dt)
    G[np.searchsorted(keys, gk)] = gv
    W[np.searchsorted(keys, wk)] = wv
    return _close(G, W, w_dt)


# --------------------------------------------------------------------------- threads (lazy)
def _thread_api():
    """``(get_num_threads, set_num_threads)`` if this sparsecc has them, else ``(None, None)``."""
    import sparsecc
    g, s = getattr(sparsecc, "get_num_threads", None), getattr(sparsecc, "set_num_threads", None)
    return (g, s) if callable(g) and callable(s) else (None, None)


# --------------------------------------------------------------------------- candidates
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
    c = x.tocoo() if sp.issparse(x) else sp.coo_array(np.asarray(x))
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


# --------------------------------------------------------------------------- running
def _compile(expression: str, formats: tuple, options: Options, out_format, prune=False, check=True):
    from .api import _kernel
    return _kernel(expression, tuple(formats), {}, options, out_format, prune, check)


def _prepared(x, spec, rank: int):
    """``x`` in SciPy's own layout of format ``spec``, where SciPy has one (so the kernel reads
    it without building buffers each call, as a user storing data that way would); else ``x``."""
    if not isinstance(spec, str):
        return x
    name = spec.strip().lower()
    try:
        if name == "dense":
            return x.toarray() if sp.issparse(x) else x
        if rank == 2 and name in ("csr", "csc"):
            y = sp.csr_array(x) if name == "csr" else sp.csc_array(x)
            if y is x or not y.has_canonical_format:
                y = y.copy()
                y.sum_duplicates()
            return y
        if name == "coo" and rank >= 2:
            y = sp.coo_array(x)
            if y is x:
                return x            # the kernel coalesces a non-canonical COO operand itself
            y.sum_duplicates()
            return y
        if rank == 2 and name.startswith("bsr") and "x" in name:
            r, c = (int(v) for v in name[3:].split("x"))
            y = sp.bsr_array(x, blocksize=(r, c))
            if y is x:
                return x
            y.sum_duplicates()
            return y
    except (ValueError, TypeError, MemoryError):
        return x
    return x


def _convert_estimate(names, values, specs, ranks) -> float | None:
    """Median seconds of building the operands' buffers for ``specs`` (what each call does
    before native code runs); ``None`` if it cannot be measured."""
    from .runtime.operands import build, default_format
    try:
        fmts = []
        for n, x, spec, r in zip(names, values, specs, ranks):
            if spec is None:
                spec, _ = default_format(x)
            block = tuple(x.blocksize) if sp.issparse(x) and x.format == "bsr" else None
            fmts.append(resolve(spec, r, describe(n), block))
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            for n, x, f in zip(names, values, fmts):
                if not f.is_dense:
                    build(x, f, describe(n))
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))
    except Exception:          # noqa: BLE001 - an estimate only; the kernel reports real errors
        return None


def _same_layout(a: Format, b: Format) -> bool:
    return a.levels == b.levels and a.order == b.order and a.block == b.block


def _ran_as(specs, used, values, ranks) -> tuple | None:
    """The formats a kernel actually stored its operands in, if any differs from the
    candidate's (BSR co-iterated with another sparse operand runs as CSR; a sparse result
    stores contraction operands in Gustavson's order), else ``None``."""
    if not used or len(used) != len(specs):
        return None
    try:
        out, differs = [], False
        for spec, u, x, r in zip(specs, used, values, ranks):
            block = tuple(x.blocksize) if sp.issparse(x) and x.format == "bsr" else None
            want = resolve(spec if spec is not None else _own_name(x), r, "operand", block)
            if _same_layout(want, u):
                out.append(spec)
                continue
            differs = True
            named = [n for n in ("csr", "csc", "dcsr", "dcsc", "coo", "dense")
                     if _safe_same(n, u, r)]
            out.append(named[0] if named else replace(u, pos_width=None, crd_width=None))
        return tuple(out) if differs else None
    except SparseccError:
        return None


def _safe_same(name: str, f: Format, rank: int) -> bool:
    try:
        return _same_layout(resolve(name, rank), f)
    except SparseccError:
        return False


def _sample(kern, args, inner: int) -> float:
    """Seconds per call of ``kern(*args)``, over ``inner`` back-to-back calls (tiny kernels loop
    for at least MIN_SAMPLE_S, to rise above the clock's resolution); no garbage collection
    inside the sample."""
    was = gc.isenabled()
    gc.disable()
    try:
        t = time.perf_counter()
        for _ in range(inner):
            kern(*args)
        return (time.perf_counter() - t) / inner
    finally:
        if was:
            gc.enable()


def _failure(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"failed: {type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _bind(expression: str, operands: tuple, named: dict):
    """(statement, operand names, operand values) - errors in the user's terms."""
    if not isinstance(expression, str):
        raise SparseccError(f"an expression is a string, got {type(expression).__name__}")
    if looks_like_notation(expression):
        stmt = parse_notation(expression)
        names = stmt.operands
        return stmt, names, bind_named(expression, names, operands, named)
    if named:
        raise OperandError(f"einsum expressions take operands by position, got keyword(s) {', '.join(named)}")
    stmt = parse_einsum(expression, len(operands))
    return stmt, stmt.operands, list(operands)


def _validated(stmt, names, values):
    """Operands accepted the way a kernel accepts them; shapes and dtypes checked (ShapeError,
    DTypeError, OperandError) before anything compiles."""
    from .runtime.operands import as_operand
    from .runtime.validate import validate
    vals = [as_operand(v, describe(n)) for n, v in zip(names, values)]
    for n, v in zip(names, vals):
        validate(v, describe(n))       # malformed buffers: one clear error, not a failed row each
    ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
    for n, v in zip(names, vals):
        dt.lookup(v.dtype, describe(n))
        if v.ndim != ranks[n]:
            raise ShapeError(f"{describe(n)} has {v.ndim} dimension(s), but the expression indexes it "
                             f"with {ranks[n]}")
    index_sizes(stmt, {n: tuple(v.shape) for n, v in zip(names, vals)})
    return vals, [ranks[n] for n in names]


def _result_is_sparse(stmt, names, specs, ranks, out_format) -> bool:
    if out_format is not None:
        return not (isinstance(out_format, str) and out_format.strip().lower() == "dense") and \
            not (isinstance(out_format, Format) and out_format.is_dense)
    from .patterns import default_result_format
    sparse = frozenset(n for n, s, r in zip(names, specs, ranks) if not resolve(s, r).is_dense)
    try:
        return default_result_format(stmt, sparse) != "dense"
    except SparseccError:
        return False


def explore(expression: str, *operands, formats=None, options=None, threads=None, index_widths=None,
            vector_lengths=None, out_format=None, repeat: int = 7, budget_s: float | None = None,
            max_candidates: int = MAX_CANDIDATES, convert: bool = True, progress=True,
            **named_operands) -> ExploreReport:
    """Try candidate formats (and options, thread counts) for ``expression`` on these operands;
    return a ranked :class:`ExploreReport`.

    ``sc.explore("ij,j->i", A, x)`` (einsum: operands by position) or
    ``sc.explore("y[i] = A[i,j] * x[j]", A=A, x=x)`` (index notation: by name).

    ``formats``: ``None`` (candidates for every sparse operand by its rank: matrices csr, csc,
    coo, dcsr, dcsc and BSR block sizes that divide the shape; rank 3+ coo and CSF in every
    level order (rank 3) or its rotations; dense operands stay dense), or a dict
    ``{operand: format or [formats]}`` (by name, or by position for einsum) or a list with one
    entry per operand (a format, a list of formats, or ``None`` for the defaults).
    ``options``: base ``sc.Options`` (or a list of them); ``index_widths`` / ``vector_lengths``
    vary its fields.  ``threads``: thread counts to try (``sc.set_num_threads``; restored after).
    ``repeat``: timing samples per candidate (median).  ``budget_s``: no new candidate starts
    after this many seconds (the first always runs); ``max_candidates``: the product is cut to this many (the
    candidates closest to the first are kept).  ``convert``: time operands stored in each
    candidate's SciPy layout where SciPy has one (converted once, up front); ``False`` times
    calls on the operands exactly as given.  ``progress``: a progress bar on stderr when it
    is a terminal (``"always"``: always; ``False``: never).
    """
    t_start = time.monotonic()
    if isinstance(repeat, bool) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
        raise SparseccError(f"repeat must be a positive integer, got {repeat!r}")
    if budget_s is not None and (isinstance(budget_s, bool) or not isinstance(budget_s, (int, float))
                                 or not budget_s > 0):
        raise SparseccError(f"budget_s must be a positive number of seconds or None, got {budget_s!r}")
    if isinstance(max_candidates, bool) or not isinstance(max_candidates, (int, np.integer)) or max_candidates < 1:
        raise SparseccError(f"max_candidates must be a positive integer, got {max_candidates!r}")
    if progress not in (True, False, None, "always"):
        raise SparseccError(f"progress is True, False or 'always', got {progress!r}")
    stmt, names, values = _bind(expression, operands, named_operands)
    values, ranks = _validated(stmt, names, values)
    shapes = [tuple(int(s) for s in v.shape) for v in values]
    if out_format is not None:
        resolve(out_format, len(stmt.indices), "the result")
    n_sparse = sum(sp.issparse(v) for v in values)
    allow_blocks = n_sparse < 2 and not _result_is_sparse(
        stmt, names, [_own_name(v) for v in values], ranks, out_format)
    fcands = _format_candidates(formats, names, values, ranks, shapes, allow_blocks)
    ocands = _option_candidates(options, index_widths, vector_lengths)
    tcands = _thread_candidates(threads)
    notes = []
    get_threads, set_threads = _thread_api()
    if tcands != [None] and set_threads is None:
        notes.append(f"threads {tcands} not explored: this sparsecc has no sc.set_num_threads")
        tcands = [None]
    axes = fcands + [ocands, tcands]
    total = math.prod(len(a) for a in axes)
    combos = itertools.product(*[range(len(a)) for a in axes])
    if total > max_candidates:
        # keep the candidates closest to the first one (fewest axes changed), in order
        picked = sorted(combos, key=lambda c: sum(i > 0 for i in c))[:max_candidates]
        picked.sort()
        msg = (f"{total} candidates capped to max_candidates={max_candidates} (those closest to the first "
               f"were kept); pass formats=/max_candidates= to choose")
        notes.append(msg)
        warnings.warn(f"sc.explore: {msg}", UserWarning, stacklevel=2)
    else:
        picked = list(combos)
    cands = [(tuple(axes[k][i] for k, i in enumerate(c[:-2])), ocands[c[-2]], tcands[c[-1]]) for c in picked]

    from .runtime.kernel import STATS
    prepared: dict = {}
    rows: list[Row] = []
    timed: list[tuple[Row, object, list, int, list]] = []   # (row, kernel, args, inner loops, samples)
    reference = None
    before = get_threads() if get_threads is not None else None
    skipped = 0
    bar = _progress.Progress(len(cands) + repeat, _progress.wanted(progress))
    try:
        # phase 1: compile, run once, check against the first result, calibrate
        for idx, (fmts, opts, nthr) in enumerate(cands):
            label = ", ".join(_spec_name(s) for s in fmts)
            row = Row(fmts, opts, nthr, index=idx)
            rows.append(row)
            if idx and budget_s is not None and time.monotonic() - t_start > budget_s:
                row.error = f"skipped: budget_s={budget_s:g} spent"
                skipped += 1
                bar.step("skipped")
                continue
            bar.show(label)
            if nthr is not None:
                set_threads(nthr)
            if convert:
                args = []
                for k, (x, spec) in enumerate(zip(values, fmts)):
                    key = (k, _spec_name(spec))
                    if key not in prepared:
                        prepared[key] = _prepared(x, spec, ranks[k])
                    args.append(prepared[key])
            else:
                args = values
            try:
                kern = _compile(expression, fmts, opts, out_format)
                misses = STATS.misses
                t = time.perf_counter()
                result = kern(*args)
                first = time.perf_counter() - t
                row.cached = STATS.misses == misses
                if reference is None:
                    reference = result
                else:
                    why = compare(result, reference)
                    if why is not None:
                        row.error = f"wrong result (against the first candidate that ran): {why}"
                        bar.step(label)
                        continue
                del result
                t = time.perf_counter()
                kern(*args)                                       # warm
                one = time.perf_counter() - t
            except Exception as err:  # noqa: BLE001 - a candidate that breaks is a row, not a crash
                row.error = _failure(err)
                bar.step(label)
                continue
            row.compile_s = max(0.0, first - one)
            used = getattr(getattr(kern, "_last", None), "formats", None)   # widths resolved
            row.ran_as = _ran_as(fmts, used, values, ranks)
            row.convert_s = _convert_estimate(names, args, row.ran_as or fmts, ranks)
            inner = max(1, min(100_000, math.ceil(MIN_SAMPLE_S / max(one, 1e-8))))
            timed.append((row, kern, args, inner, []))
            bar.step(label)
        # phase 2: timing rounds, every candidate once per round (load that drifts while
        # exploring - other processes, frequency changes - hits every candidate alike)
        rounds = 0
        for rnd in range(repeat):
            if rnd and budget_s is not None and time.monotonic() - t_start > budget_s:
                notes.append(f"budget_s={budget_s:g} spent: timed with {rnd} of {repeat} samples")
                break
            bar.show(f"timing, sample {rnd + 1} of {repeat}")
            for row, kern, args, inner, samples in timed:
                if row.error is not None:
                    continue
                if row.threads is not None:
                    set_threads(row.threads)
                try:
                    samples.append(_sample(kern, args, inner))
                except Exception as err:  # noqa: BLE001
                    row.error = _failure(err)
            rounds += 1
            bar.step(f"timing, sample {rnd + 1} of {repeat}")
        for row, kern, args, inner, samples in timed:
            if row.error is None and samples:
                row.median_s = float(np.median(samples))
                row.runs = len(samples) * inner + 2
                row.ok = True
    finally:
        bar.close()
        if before is not None and set_threads is not None:
            set_threads(before)
    if skipped:
        msg = f"budget_s={budget_s:g} spent: {skipped} of {len(rows)} candidates skipped"
        notes.append(msg)
        warnings.warn(f"sc.explore: {msg}", UserWarning, stacklevel=2)
    return ExploreReport(expression, names, rows, out_format, notes, time.monotonic() - t_start, rounds)


# --------------------------------------------------------------------------- autotuning
_memory: dict[str, tuple] = {}          # tuning key -> (formats, options)
_memory_lock = threading.Lock()


@lru_cache(maxsize=1)
def _machine() -> str:
    return f"{platform.machine()}|{cpu_model()}|{os.cpu_count()}"


def _size_class(n: int) -> int:
    """Coarse size class: sizes within a factor of two share one (the bit length)."""
    return int(n).bit_length()


def tuning_key(expression: str, values, fixed: dict, options: Options, out_format) -> str:
    """The disk key of an autotuned choice: the expression, each operand's kind, dtype, rank
    and size class (shape and stored entries, within a factor of two), the formats fixed by
    the user, options, result format, thread count, machine and sparsecc version."""
    from . import __version__
    get_threads, _ = _thread_api()
    ops = []
    for x in values:
        kind = _own_name(x) if sp.issparse(x) else "ndarray"
        nnz = int(x.nnz) if sp.issparse(x) else None
        ops.append([kind, str(np.dtype(x.dtype)), int(x.ndim), [_size_class(s) for s in x.shape],
                    None if nnz is None else _size_class(nnz)])
    parts = {"v": __version__, "expr": expression, "ops": ops,
             "fixed": {k: [encode_format(f) for f in v] if isinstance(v, (list, tuple)) else encode_format(v)
                       for k, v in sorted(fixed.items())},
             "options": options.key(), "out": encode_format(out_format),
             "threads": get_threads() if get_threads is not None else None, "machine": _machine()}
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _tuning_dir() -> str:
    from .runtime import cache
    d = os.path.join(cache.cache_dir(), "autotune")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_choice(key: str):
    """The stored ``(formats, options)`` for ``key``, or ``None`` (a missing, unreadable or
    tampered file counts as none and is replaced by the next exploration)."""
    try:
        with open(os.path.join(_tuning_dir(), f"{key}.json")) as f:
            d = json.load(f)
        body = {k: v for k, v in d.items() if k != "checksum"}
        if d.get("key") != key or d.get("checksum") != _checksum(body):
            return None
        return tuple(decode_format(s) for s in d["formats"]), Options(**d["options"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SparseccError):
        return None


def store_choice(key: str, formats: tuple, options: Options, about: dict | None = None) -> str:
    """Write the choice for ``key`` atomically (temporary file, ``os.replace``); returns the path."""
    d = _tuning_dir()
    body = {"key": key, "formats": [encode_format(s) for s in formats], "options": asdict(options),
            "about": about or {}}
    body["checksum"] = _checksum(body)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=".json.tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=1)
        path = os.path.join(d, f"{key}.json")
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
    return path


class AutotunedKernel:
    """``sc.compile(expr, ..., autotune=True)``: on its first call, explores formats on those
    operands (or finds the earlier choice in memory or on disk), then runs the chosen kernel;
    later calls go straight to it, whatever their operands.

    A format given to ``compile`` fixes that operand (a list of formats: the candidates to
    try); the other sparse operands are explored.  ``choice``: ``(formats, options)`` once
    chosen; ``tuned_from``: ``"explored"``, ``"memory"`` or ``"disk"``; ``report``: the
    :class:`ExploreReport` when this kernel explored."""

    def __init__(self, expr: str, formats: tuple, named: dict, options: Options | None, out_format,
                 prune: bool, check: bool):
        from .api import _kernel
        self.options = options or DEFAULT
        self._lists = {}
        plain_pos = tuple(None if isinstance(f, (list, tuple)) else f for f in formats)
        plain_named = {k: (None if isinstance(v, (list, tuple)) else v) for k, v in named.items()}
        # the plain kernel validates the expression, options and fixed formats now
        self._base = _kernel(expr, plain_pos, plain_named, self.options, out_format, prune, check)
        stmt = self._base.stmt
        self.stmt, self.source = stmt, expr
        self.out_format, self.prune, self.check = out_format, bool(prune), bool(check)
        given = dict(zip(stmt.operands, formats))
        given.update(named)
        self._given = {k: v for k, v in given.items() if v is not None}
        for name, v in self._given.items():
            if isinstance(v, (list, tuple)):
                if not v:
                    raise FormatError(f"{describe(name)}: an empty list of candidate formats")
                rank = self._base._ranks[name]
                for spec in v:
                    _check_spec(spec, rank, describe(name))
        self.choice: tuple | None = None
        self.tuned_from: str | None = None
        self.report: ExploreReport | None = None
        self._chosen = None
        self._fallback = None
        self._lock = threading.Lock()

    def __repr__(self):
        state = "not tuned yet" if self.choice is None else \
            f"chose {', '.join(_spec_name(s) for s in self.choice[0])} ({self.tuned_from})"
        return f"<sparsecc.AutotunedKernel '{self.source}' ({state})>"

    def _tune(self, args, kwargs):
        with self._lock:
            if self._chosen is not None:
                return self._chosen
            values = self._base._bind(args, kwargs)
            names = self.stmt.operands
            stmt_values, _ = _validated(self.stmt, names, values)
            fixed = {k: v for k, v in self._given.items() if not isinstance(v, (list, tuple))}
            cands = {k: list(v) for k, v in self._given.items() if isinstance(v, (list, tuple))}
            key = tuning_key(self.source, stmt_values, {**fixed, **{k: tuple(v) for k, v in cands.items()}},
                             self.options, self.out_format)
            with _memory_lock:
                got = _memory.get(key)
            source = "memory"
            if got is None:
                got, source = load_choice(key), "disk"
            if got is None or len(got[0]) != len(names):
                restrict = {k: [v] for k, v in fixed.items()}
                restrict.update(cands)
                restrict = {names.index(k): v for k, v in restrict.items()}
                explore_args = {"formats": restrict or None, "options": self.options, "out_format": self.out_format,
                                "repeat": AUTOTUNE_REPEAT, "budget_s": AUTOTUNE_BUDGET_S,
                                "convert": False}      # timed as it will be called: operands as given
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)   # a cap or budget: the report says so
                    report = explore(self.source, *stmt_values, **explore_args)
                self.report = report
                if not any(r.ok for r in report.rows):
                    # nothing ran: the plain kernel raises the real error for these operands
                    self._chosen = self._base
                    self.tuned_from = "explored"
                    return self._chosen
                got = (report.best_formats, report.best_options)
                store_choice(key, got[0], got[1], {"expression": self.source,
                                                   "formats": [_spec_name(s) for s in got[0]],
                                                   "median_s": report.best_row.median_s})
                source = "explored"
            with _memory_lock:
                _memory[key] = got
            self.choice, self.tuned_from = got, source
            self._chosen = _compile(self.source, got[0], got[1], self.out_format, self.prune, self.check)
            return self._chosen

    def __call__(self, *args, **kwargs):
        k = self._chosen
        if k is None:
            k = self._tune(args, kwargs)
        try:
            return k(*args, **kwargs)
        except ShapeError:
            # a chosen BSR block size that does not divide a later operand's shape: run that
            # operand as CSR instead (every other format takes any operand)
            if self.choice is None or not any(_is_block(s) for s in self.choice[0]):
                raise
            if self._fallback is None:
                fmts = tuple("csr" if _is_block(s) else s for s in self.choice[0])
                self._fallback = _compile(self.source, fmts, self.choice[1], self.out_format, self.prune,
                                          self.check)
            return self._fallback(*args, **kwargs)

    def ir(self, stage: str = "mlir") -> str:
        """The chosen kernel's IR (the plain kernel's before the first call)."""
        return (self._chosen or self._base).ir(stage)


def _is_block(spec) -> bool:
    if isinstance(spec, Format):
        return spec.block is not None
    return isinstance(spec, str) and spec.strip().lower().startswith("bsr")
