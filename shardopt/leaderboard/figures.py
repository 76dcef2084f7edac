"""The reports' figures: matplotlib, drawn to inline SVG, one renderer for every report page.

The simulated leaderboard once drew its charts as hand-built SVG: solver names collided on the x axis and log-axis
labels overlapped when opened in a browser. matplotlib lays out rotated tick labels and legends itself; the same
data gives the same file (fixed hash salt, no date), and the page stays one self-contained file.
"""

from __future__ import annotations

import io
from typing import Any

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (reports are written on machines without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def svg(fig: Any) -> str:
    """The figure as an inline <svg> element (no XML prolog, no DOCTYPE), deterministic; the figure is closed."""
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "shardopt"  # stable ids: the same data gives the same file
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def readable_log_axis(axis: Any) -> None:
    """Major ticks at 1-2-5 steps with plain labels and no minor labels: minor log labels overlap on a narrow range.
    Call it after plotting: an axis spanning less than a decade gets at most 4 evenly spaced ticks instead (a 1-2-5
    locator leaves it one tick or none, and matplotlib's fallback labels collide)."""
    import matplotlib.ticker as ticker

    axis.set_minor_formatter(ticker.NullFormatter())
    axis.set_minor_locator(ticker.NullLocator())
    low, high = sorted(axis.get_view_interval())
    if low > 0 and high / low < 10:
        axis.set_major_locator(ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
    else:
        axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0), numticks=8))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))


def no_data(text: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 0.6))
    ax.axis("off")
    ax.text(0.0, 0.5, text, va="center")
    return svg(fig)


def bars(labels: list[str], values: list[float], errors: list[float], ylabel: str, title: str = "",
         reference: float | None = 1.0) -> str:
    """One bar per label with an error bar; labels rotated so that long solver names never collide."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(labels) + 2), 3.8))
    ax.bar(range(len(labels)), values, yerr=errors, capsize=3, color=[PALETTE[i % len(PALETTE)] for i in range(len(labels))])
    ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right")
    if reference is not None:
        ax.axhline(reference, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    return svg(fig)


def horizontal_bars(labels: list[str], values: list[float], notes: list[str], xlabel: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 0.32 * len(labels) + 1.0))
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, values, color=[PALETTE[i % len(PALETTE)] for i in range(len(labels))])
    ax.set_yticks(ys, labels)
    top = max(values, default=0) or 1
    for y, v, note in zip(ys, values, notes):
        ax.text(v + 0.01 * top, y, note, va="center", fontsize=8)
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel(xlabel)
    return svg(fig)


def points(series: dict[str, tuple[list[float], list[float]]], xlabel: str, ylabel: str, logx: bool = False,
           reference: float | None = None) -> str:
    """Scatter, one colour per series, the legend outside the frame."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    for i, (name, (xs, ys)) in enumerate(series.items()):
        if xs:
            ax.scatter(xs, ys, s=14, alpha=0.75, color=PALETTE[i % len(PALETTE)], label=name)
    if logx:
        ax.set_xscale("log")
        readable_log_axis(ax.xaxis)
    if reference is not None:
        ax.axhline(reference, color="grey", lw=0.8, ls="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return svg(fig)
