"""The report: the text table, Markdown and the chart."""

from __future__ import annotations


def _fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def _ms(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.1f}us" if v < 1 else f"{v:.2f}"


def _why(r: dict, width: int = 150) -> str:
    """A failed row's reason on one line (the JSON keeps the whole message)."""
    text = " ".join((r["error"] or r.get("check") or "").split())
    return text if len(text) <= width else text[:width - 3] + "..."


LEGEND = ("times: median per call in ms (us: microseconds); "
          "ratio = sparsecc time / baseline time (below 1: sparsecc is faster); speedup = 1-thread time / "
          "all-cores time;\nbest peer = the fastest of SciPy, torch and GraphBLAS on the row, r.best = sparsecc "
          "time / its time; %BW = GB/s against the measured DRAM read bandwidth (inputs that fit in the CPU "
          "caches can exceed 100%)")


def _target_cells(r: dict) -> tuple[str, str]:
    tgt, tt = r.get("target"), r.get("thread_target")
    met = "-" if tgt is None else ("yes" if tgt["met"] else "NO")
    if tt is not None and tt["met"] is False:
        met += ", threads NO" if tgt else "threads NO"
    return ("<= " + _fmt(tgt["ratio"], "g") if tgt else "-"), met


def table(rows: list[dict], targets: bool = False) -> str:
    """The text table, one line per row.  ``targets``: add the development targets' columns."""
    cols = [("kernel", 9, "<"), ("input", 10, "<"), ("sparsecc", 9, ">"), ("1 thread", 9, ">"),
            ("speedup", 7, ">"), ("baseline", 16, ">"), ("ratio", 6, ">")]
    if targets:
        cols += [("target", 7, ">"), ("met", 14, "<")]
    cols += [("torch", 9, ">"), ("r.torch", 7, ">"), ("best peer", 19, ">"), ("r.best", 6, ">"),
             ("GFLOP/s", 7, ">"), ("GB/s", 6, ">"), ("%BW", 4, ">"), ("compile s", 9, ">")]

    def line(cells):
        return "  ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, cols)).rstrip()

    hdr = line([c[0] for c in cols])
    lines = [hdr, "-" * len(hdr)]
    for r in rows:
        if not r["ok"]:
            lines.append(f"{r['kernel']:9}  {r['input'][:10]:10}  FAILED  {_why(r)}")
            continue
        bases = r["baselines"]
        ref = next(iter(bases))
        torch = bases.get("torch")
        cells = [r["kernel"], r["input"][:10], _ms(r["sparsecc_ms"]), _ms(r["sparsecc_1t_ms"]),
                 _fmt(r["thread_speedup"]), f"{ref} {_ms(bases[ref]['ms'])}", _fmt(bases[ref]["ratio"])]
        if targets:
            cells += list(_target_cells(r))
        peer = r.get("best_peer")
        cells += [_ms(torch["ms"]) if torch else "-", _fmt(torch["ratio"]) if torch else "-",
                  f"{peer['name']} {_ms(peer['ms'])}" if peer else "-", _fmt(peer["ratio"]) if peer else "-",
                  _fmt(r["gflops"]),
                  _fmt(r["gbs"], ".1f"), _fmt(None if r["bw_fraction"] is None else 100 * r["bw_fraction"], ".0f"),
                  _fmt(r["compile_s"])]
        lines.append(line(cells))
    return "\n".join(lines)


def markdown(rows: list[dict], targets: bool = False) -> str:
    """The report as a Markdown table.  ``targets``: add the development targets' column."""
    out = [("| kernel | input | shape / nnz | sparsecc ms | 1 thread ms | speedup | baseline ms | ratio "
            + ("| target " if targets else "") + "| torch ms | ratio torch | best peer ms | ratio best peer | GFLOP/s "
            "| GB/s | % BW | compile s |"),
           "|---|---|---|---:|---:|---:|---|---:|" + ("---|" if targets else "") + "---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        shape = "x".join(map(str, r.get("shape", []))) + f" / {r.get('nnz', '-')}"
        if not r["ok"]:
            why = _why(r, 300).replace("|", "\\|")
            out.append(f"| {r['kernel']} | {r['input']} | {shape} | FAILED: {why} {'| ' * (13 if targets else 12)}|")
            continue
        bases = r["baselines"]
        ref = next(iter(bases))
        tgt = r.get("target")
        tt = r.get("thread_target")
        target = "-" if tgt is None else f"<= {tgt['ratio']:g}{' (1 thread)' if tgt['threads'] == '1' else ''}: " \
                                          f"{'met' if tgt['met'] else '**missed**'} ({tgt['measured']:.2f})"
        if tt is not None:
            target += f"; speedup >= {tt['speedup']:g}: " + {True: "met", False: "**missed**", None: "n/a"}[tt["met"]]
        torch = bases.get("torch")
        peer = r.get("best_peer")
        bw = r["bw_fraction"]
        out.append(
            f"| {r['kernel']} | {r['input']} | {shape} | {r['sparsecc_ms']:.3g} | {_fmt(r['sparsecc_1t_ms'], '.3g')} "
            f"| {_fmt(r['thread_speedup'])} | {ref} {bases[ref]['ms']:.3g} | {bases[ref]['ratio']:.2f} "
            f"{'| ' + target + ' ' if targets else ''}"
            f"| {_fmt(torch and torch['ms'], '.3g')} | {_fmt(torch and torch['ratio'])} "
            f"| {peer['name'] + ' ' + format(peer['ms'], '.3g') if peer else '-'} | {_fmt(peer and peer['ratio'])} "
            f"| {r['gflops']:.2f} "
            f"| {r['gbs']:.1f} | {_fmt(None if bw is None else 100 * bw, '.0f')} | {_fmt(r['compile_s'])} |")
    return "\n".join(out)


def chart(rows: list[dict], path: str, title: str = "", targets: bool = False) -> None:
    """Horizontal bars: sparsecc time / baseline time per kernel and input (log scale), one
    bar per baseline, 1.0 as a dashed line (``targets``: each row's target as a red tick)."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["ok"] and r.get("baselines")]
    names = sorted({b for r in done for b in r["baselines"]}, key=lambda b: (b in ("torch", "graphblas"), b))
    fig, ax = plt.subplots(figsize=(9, 0.32 * max(len(done), 4) + 1.4))
    h = 0.8 / max(len(names), 1)
    colors = {"scipy": "#1f77b4", "numpy": "#2ca02c", "torch": "#ff7f0e", "graphblas": "#9467bd"}
    for j, b in enumerate(names):
        ys = [i + (j - (len(names) - 1) / 2) * h for i, r in enumerate(done) if b in r["baselines"]]
        xs = [r["baselines"][b]["ratio"] for r in done if b in r["baselines"]]
        ax.barh(ys, xs, height=h, color=colors.get(b), label=f"vs {b}")
    for i, r in enumerate(done):
        if targets and r.get("target"):
            ax.plot([r["target"]["ratio"]] * 2, [i - 0.45, i + 0.45], color="red", lw=2,
                    label="target" if i == 0 else None)
    ax.axvline(1.0, color="black", ls="--", lw=0.8)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(LogLocator(subs=(2, 5)))       # 0.2, 0.5, 2, 5 ... labelled, never crowded
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.tick_params(axis="x", which="minor", labelsize=8)
    ax.set_yticks(range(len(done)))
    ax.set_yticklabels([r["id"] for r in done], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("sparsecc time / baseline time (lower is better; < 1: sparsecc faster)")
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    ax.legend(seen.values(), seen.keys(), fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0),
              ncol=len(seen), frameon=False)
    ax.set_title(title or "sparsecc vs baselines", fontsize=10, pad=22)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
