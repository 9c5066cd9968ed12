"""The report's three PNG figures, drawn with matplotlib's Agg canvas (no display, no pyplot state).

1. fraction of the floor vs datasheet peak bandwidth, one point per GPU and mode, published points beside (paper
   convention for both; ours also in the strict convention, hollow);
2. ms/step vs context with the floor at peak (solid) and at measured bandwidth (dashed), per model and mode;
3. achieved GB/s vs the measured bandwidth, per GPU and mode.
Only valid cells are drawn; devices without a datasheet peak (CPUs) are left out of figure 1 only.
"""

from __future__ import annotations

import textwrap

from pathlib import Path

from floorline.core import published
from floorline.report import cells as C
from floorline.report.document import Figure

MODE_COLORS = {"eager": "#1f77b4", "static": "#ff7f0e", "graph": "#2ca02c", "compile": "#d62728", "native": "#9467bd"}
EXTRA_COLORS = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
DEVICE_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def _figure(width: float, height: float):
    """A figure on the Agg canvas: set here, per figure, so importing floorline never touches matplotlib's backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _colors(variants: list[str]) -> dict[str, str]:
    extra = iter(EXTRA_COLORS * 4)
    return {v: MODE_COLORS.get(v) or next(extra) for v in variants}


def _dodge(variants: list[str]) -> dict[str, float]:
    """Multiplicative x offsets (log axes) so the modes of one GPU sit side by side."""
    n = len(variants)
    return {v: 10 ** (0.018 * (i - (n - 1) / 2)) for i, v in enumerate(variants)}


def _percent_axis(ax) -> None:
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(1.0))


def _bandwidth_ticks(ax, ticks: dict[float, str]) -> None:
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    xs = sorted(ticks)
    ax.set_xticks(xs, [f"{ticks[x]}\n{x:.0f}" for x in xs], fontsize=8)


def _plain_log_ticks(axis, values: list[float]) -> None:
    """Ticks at 1-2-5 steps labelled as plain numbers on a log axis that spans `values` (10^3 reads worse)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo, hi = min(values), max(values)
    steps = [m * 10 ** e for e in range(-3, 7) for m in (1, 2, 5)]
    inside = [t for t in steps if lo / 1.3 <= t <= hi * 1.3] or [lo, hi]
    axis.set_major_locator(FixedLocator(inside))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


# ----------------------------------------------------------------------------------------------------- figure 1
def fraction_points(cells: list[dict]) -> list[dict]:
    """One point per (device with a datasheet peak, mode): medians and ranges of the valid cells' fractions."""
    out = []
    for (dev, v), rs in C.grouped(C.valid(cells), lambda r: (C.device(r), C.variant(r))):
        peak = C.median(rs, "peak_gbps")
        paper = C.numbers(rs, "paper_fraction_of_floor_peak")
        if not peak or not paper:
            continue
        out.append({"device": dev, "variant": v, "peak_gbps": peak,
                    "paper": C.median(rs, "paper_fraction_of_floor_peak"),
                    "paper_lo": min(paper), "paper_hi": max(paper), "strict": C.median(rs, "fraction_of_floor_peak"),
                    "n": len(rs)})
    return out


def fraction_vs_peak(cells: list[dict], path: Path) -> Figure:
    from matplotlib.lines import Line2D

    pts = fraction_points(cells)
    pub = published.load()["cells"]
    variants = sorted({p["variant"] for p in pts}, key=C.mode_rank)
    color, dodge = _colors(variants), _dodge(variants)
    fig = _figure(11, 5.6)
    ax = fig.add_subplot()
    ticks: dict[float, str] = {}
    for p in pts:
        x, c = p["peak_gbps"] * dodge[p["variant"]], color[p["variant"]]
        ax.errorbar([x], [p["paper"]], yerr=[[p["paper"] - p["paper_lo"]], [p["paper_hi"] - p["paper"]]], fmt="o",
                    color=c, ms=7, capsize=3, zorder=3)
        if p["strict"] is not None:
            ax.plot([x], [p["strict"]], "o", mfc="none", color=c, ms=7, zorder=3)
        ticks[p["peak_gbps"]] = C.short_device(p["device"])
    for q in pub:
        ax.plot([q["peak_gbps"]], [q["paper_fraction_of_floor_peak"]], "*", color="black", ms=16, zorder=4)
        ticks.setdefault(q["peak_gbps"], q["gpu"])
    for q in pub:  # the label on the side away from our points of the same GPU: left, except at the left edge
        left = q["peak_gbps"] > min(ticks)
        ax.annotate(f"published\n{q['gpu']}: {q['paper_fraction_of_floor_peak']:.3f}",
                    (q["peak_gbps"], q["paper_fraction_of_floor_peak"]), xytext=(-12 if left else 16, 0),
                    textcoords="offset points", fontsize=8, ha="right" if left else "left", va="center")
    ax.axhline(1.0, ls=":", color="grey", lw=1)
    ax.text(min(ticks) / 1.5, 1.0, " at the floor", va="bottom", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_xlim(min(ticks) / 1.6, max(ticks) * 1.6)
    _bandwidth_ticks(ax, ticks)
    top = max([p["paper_hi"] for p in pts] + [p["strict"] or 0 for p in pts] + [1.0])
    ax.set_ylim(0, top * 1.12)
    _percent_axis(ax)
    ax.set_xlabel("datasheet peak memory bandwidth (GB/s, log scale)")
    ax.set_ylabel("fraction of the memory floor at peak\n(floor ms / step ms)")
    fig.suptitle("Batch-1 decode: fraction of the memory floor reached vs peak bandwidth", fontsize=11)
    ax.set_title("ours: median over models and contexts of the valid cells, bars: min-max (paper convention); "
                 "CPUs left out (no datasheet peak)", fontsize=8, color="dimgrey")
    ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=color[v], marker="o", ls="", label=f"ours, {v}") for v in variants]
    handles += [Line2D([], [], color="black", marker="o", ls="", label="ours, paper convention (W+K), filled"),
                Line2D([], [], color="black", marker="o", mfc="none", ls="", label="ours, strict convention, hollow"),
                Line2D([], [], color="black", marker="*", ms=12, ls="", label="published (paper convention W+K)")]
    fig.legend(handles=handles, fontsize=8, loc="outside right upper")  # outside the axes: it hides no point
    fig.savefig(path)
    return Figure(path.name, "fraction of floor vs peak bandwidth",
                  "Fraction of the memory floor at the datasheet peak, per GPU and mode, against its peak bandwidth; "
                  "published points (stars) and ours filled in the paper convention (W+K), ours hollow in the strict "
                  "one. CPUs are left out (no datasheet peak).")


# ----------------------------------------------------------------------------------------------------- figure 2
def ms_vs_context(cells: list[dict], path: Path) -> Figure | None:
    """One row per model, one panel per mode it has valid cells in; lines per device."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    ok = C.valid(cells)
    if not ok:
        return None
    panels = {m: sorted({C.variant(r) for r in ok if str(r.get("model")) == m}, key=C.mode_rank)
              for m in sorted({str(r.get("model")) for r in ok})}
    ncols = max(len(v) for v in panels.values())
    devices = [d for (d,), _ in C.grouped(cells, lambda r: (C.device(r),))]
    dcolor = dict(zip(devices, DEVICE_COLORS * 4))
    ctxs = sorted({r["ctx"] for r in ok if isinstance(r.get("ctx"), int)})
    fig = _figure(1.4 + 3.3 * ncols, 1.0 + 2.9 * len(panels))
    axes = fig.subplots(len(panels), ncols, sharey=True, squeeze=False)
    ys: list[float] = []
    for i, (m, variants) in enumerate(panels.items()):
        for j in range(ncols):
            ax = axes[i][j]
            if j >= len(variants):
                ax.set_axis_off()
                continue
            v = variants[j]
            mine = [r for r in cells if str(r.get("model")) == m and C.variant(r) == v]
            for dev in devices:
                by_ctx = C.grouped([r for r in mine if C.device(r) == dev], lambda r: (C.device(r), r.get("ctx")))
                c = dcolor[dev]
                step = [(k[1], C.median(C.valid(rs), "step_ms_median")) for k, rs in by_ctx]
                step = [(x, y) for x, y in step if y is not None]
                if step:
                    ax.plot(*zip(*step), "o-", color=c, lw=1.6, ms=5)
                    ys += [y for _, y in step]
                for key, style in (("floor_ms_peak", "-"), ("floor_ms_measured", "--")):
                    fl = [(k[1], C.median(rs, key)) for k, rs in by_ctx]
                    fl = [(x, y) for x, y in fl if y is not None]
                    if fl:  # the "_" marker keeps a single context's floor visible
                        ax.plot(*zip(*fl), style, marker="_", ms=12, color=c, lw=1, alpha=0.8)
                        ys += [y for _, y in fl]
            ax.set_title(f"{m} · {v}", fontsize=9)
            if ctxs and ctxs[0] <= 0:  # a decode from an empty cache (llama-bench's tg rows): linear near 0
                lin = next((x for x in ctxs if x > 0), 1)
                ax.set_xscale("symlog", base=2, linthresh=lin, linscale=0.5)
            else:
                ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
            if ctxs:
                ax.set_xticks(ctxs, [str(x) for x in ctxs])
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.set_xlim(ctxs[0] / 1.4 if ctxs[0] > 0 else -0.4 * lin, max(ctxs[-1], 1) * 1.4)
            ax.set_xlabel("context (tokens)", fontsize=9)
            if j == 0:
                ax.set_ylabel("ms per decode step (log)")
    if ys:
        _plain_log_ticks(axes[0][0].yaxis, ys)
    handles = [Line2D([], [], color=dcolor[d], lw=2, label=C.short_device(d)) for d in devices]
    handles += [Line2D([], [], color="black", marker="o", lw=1.6, label="step time (median of valid cells)"),
                Line2D([], [], color="black", lw=1, marker="_", ms=12, label="floor at datasheet peak"),
                Line2D([], [], color="black", lw=1, ls="--", marker="_", ms=12,
                       label="floor at measured bandwidth")]
    width = fig.get_figwidth()  # one panel (4.7 in) holds two legend entries a row and the title in two lines
    fig.legend(handles=handles, loc="outside lower center", ncols=max(1, min(len(handles), 4, int(width / 2.2))),
               fontsize=8)
    fig.suptitle(textwrap.fill("Decode step time vs context, with the memory floor (strict convention)",
                               max(30, int(width * 12))), fontsize=11)
    fig.savefig(path)
    return Figure(path.name, "ms/step vs context with the floor",
                  "Median step time of the valid cells per device against context, one panel per model and mode; "
                  "the floor at the datasheet peak (solid, none for CPUs) and at the measured bandwidth (dashed).")


# ----------------------------------------------------------------------------------------------------- figure 3
def achieved_vs_copy(cells: list[dict], path: Path) -> Figure | None:
    from matplotlib.lines import Line2D

    ok = C.valid(cells)
    meas = {d: C.median(rs, "measured_gbps") for (d,), rs in C.grouped(cells, lambda r: (C.device(r),))}
    pts = [(d, v, rs) for (d, v), rs in C.grouped(ok, lambda r: (C.device(r), C.variant(r)))
           if meas.get(d) and C.numbers(rs, "achieved_gbps")]
    if not pts:
        return None
    variants = sorted({v for _, v, _ in pts}, key=C.mode_rank)
    color, dodge = _colors(variants), _dodge(variants)
    fig = _figure(9, 5.6)
    ax = fig.add_subplot()
    ticks: dict[float, str] = {}
    ys: list[float] = []
    for d, v, rs in pts:
        x, y, a = meas[d] * dodge[v], C.median(rs, "achieved_gbps"), C.numbers(rs, "achieved_gbps")
        ax.errorbar([x], [y], yerr=[[y - min(a)], [max(a) - y]], fmt="o", color=color[v], ms=7, capsize=3, zorder=3)
        ticks[meas[d]] = C.short_device(d)
        ys += a + [meas[d]]
    for (d,), rs in C.grouped(cells, lambda r: (C.device(r),)):
        peak = C.median(rs, "peak_gbps")
        if peak and meas.get(d) in ticks:
            ax.plot([meas[d]], [peak], "_", color="dimgrey", ms=22, mew=2, zorder=2)
            ys.append(peak)
    lo, hi = min(ticks) / 1.6, max(ticks) * 1.6
    ax.plot([lo / 100, hi * 100], [lo / 100, hi * 100], ":", color="grey", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(ys) / 1.5, max(ys) * 1.5)
    _bandwidth_ticks(ax, ticks)
    _plain_log_ticks(ax.yaxis, [min(ys) / 1.5, max(ys) * 1.5])
    ax.set_xlabel("measured bandwidth (GB/s, log scale)")
    ax.set_ylabel("achieved GB/s (log scale)\n= strict floor bytes / step time")
    fig.suptitle("Achieved bandwidth in decode vs the measured bandwidth", fontsize=11)
    ax.set_title("median over models and contexts of the valid cells, bars: min-max", fontsize=8, color="dimgrey")
    ax.grid(alpha=0.3, which="both")
    handles = [Line2D([], [], color=color[v], marker="o", ls="", label=v) for v in variants]
    handles += [Line2D([], [], color="grey", ls=":", label="achieved = measured bandwidth"),
                Line2D([], [], color="dimgrey", marker="_", ms=14, mew=2, ls="", label="datasheet peak (GPUs)")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", framealpha=0.9)
    fig.savefig(path)
    return Figure(path.name, "achieved GB/s vs measured bandwidth",
                  "Achieved bandwidth (strict floor bytes / step time) per device and mode against the device's "
                  "measured bandwidth; the dotted diagonal is the measured bandwidth itself.")


def write_all(cells: list[dict], out_dir: Path) -> list[Figure]:
    """The plots these cells have data for. A plot they have none for is not drawn, and an earlier report's file
    of that name in out_dir is removed, so a reused --out holds no plot of other results."""
    figs = []
    for plot, name in ((fraction_vs_peak, "fraction_vs_peak_bandwidth.png"), (ms_vs_context, "ms_vs_context.png"),
                       (achieved_vs_copy, "achieved_vs_copy_bandwidth.png")):
        f = plot(cells, out_dir / name)
        if f is None:
            (out_dir / name).unlink(missing_ok=True)
        else:
            figs.append(f)
    return figs
