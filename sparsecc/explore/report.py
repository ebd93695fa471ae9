"""The exploration report: one :class:`Row` per candidate, the ranked :class:`ExploreReport`
with its text, HTML, JSON and chart renderings, and the JSON form of format specs."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, fields

import numpy as np

from ..errors import FormatError, SparseccError
from ..formats import Format
from ..options import DEFAULT, Options


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
            from ..make import make_kernel
            self._best = make_kernel(self.expression, tuple(self.best_formats), {}, self.best_options, self.out_format)
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
        ax.barh(y, [v - c for v, c in zip(vals, conv)], color=colors)
        if show_conv:
            ax.barh(y, conv, left=[v - c for v, c in zip(vals, conv)], color="lightgray", hatch="//",
                    edgecolor="gray")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"median time per call ({unit})")
        for k, v in enumerate(vals):
            ax.text(v, k, f" {v:.3g}", va="center", fontsize=7)
        if vals:
            ax.set_xlim(0, max(vals) * 1.18)           # room for the value printed after each bar
        from matplotlib.patches import Patch
        handles = [Patch(color="tab:green", label="fastest")]
        if len(ok) > 1:
            handles.append(Patch(color="tab:blue", label="other candidates"))
        if show_conv:
            handles.append(Patch(facecolor="lightgray", hatch="//", edgecolor="gray",
                                 label="of which building operand buffers (estimate)"))
        # above the axes, under the title, outside the plot: it never covers a bar
        ax.legend(handles=handles, fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles),
                  frameon=False, borderaxespad=0.2)
        failed = len(self.rows) - len(ok)
        ax.set_title(title or f"sc.explore '{self.expression}'" + (f" ({failed} not shown: failed/skipped)"
                                                                  if failed else ""), fontsize=9, pad=20)
        fig.tight_layout()
        fig.savefig(path, dpi=100, format="png", bbox_inches="tight")
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

