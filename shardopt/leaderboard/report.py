"""Leaderboard reports from the store: per-suite statistics, a terminal / Markdown table, and one self-contained
HTML file with inline SVG plots."""

from __future__ import annotations

import html
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any



# ---------------------------------------------------------------------------------------------------------------
# reports


@dataclass
class SolverStats:
    solver: str
    runs: int
    failed: int
    mean_cost_ms: float | None  # over the (instance, seed) pairs every solver solved
    mean_ratio: float | None  # cost / best cost on the same (instance, seed), over this solver's solved pairs
    std_ratio: float | None
    wins: int
    mean_solve_s: float
    mean_gap_to_bound: float | None  # cost / the instance's certified bound (shardopt bound), where computed


@dataclass
class SuiteReport:
    suite: str
    backend: str
    cost_model: str
    judge: str
    instances: list[str]
    solvers: list[SolverStats]
    common: int  # (instance, seed) pairs every solver solved
    pairs: int
    points: list[dict[str, Any]]  # per row with a plan: solver, ratio, solve time
    gap_points: list[dict[str, Any]] = field(default_factory=list)  # per row with a plan and a bound: solver, pair, gap

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "backend": self.backend, "cost_model": self.cost_model, "judge": self.judge,
            "instances": self.instances, "pairs": self.pairs, "common_pairs": self.common,
            "solvers": [s.__dict__ for s in self.solvers],
        }


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def build_reports(rows: list[dict[str, Any]], bounds: dict[tuple[str, str], float] | None = None) -> list[SuiteReport]:
    """Per suite: the solvers' statistics. Gaps divide by the certified bound of the analytic model (`bounds`,
    from `leaderboard run --bounds`), for the simulated judge only; the solvers' own `lower_bound`s are not used:
    the exact solvers' are bounds of a linearised model around their own plan and bound nobody else's plans."""
    bounds = bounds or {}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["suite"], r["backend"], r["cost_model"]), []).append(r)
    reports = []
    for (suite, backend, cm), rs in sorted(groups.items()):
        solvers = sorted({r["solver"] for r in rs})
        by_pair: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
        for r in rs:
            by_pair.setdefault((r["instance_hash"], r["seed"]), {})[r["solver"]] = r
        best = {k: min((r["max_cost_ms"] for r in v.values() if r["max_cost_ms"] is not None), default=None)
                for k, v in by_pair.items()}
        bound = {k: bounds.get((k[0], cm)) if backend == "sim" else None for k in by_pair}
        common = [k for k, v in by_pair.items()
                  if all(s in v and v[s]["max_cost_ms"] is not None for s in solvers)]
        stats, points, gap_points = [], [], []
        pair_index = {k: i for i, k in enumerate(sorted(k for k, b in bound.items() if b))}
        for s in solvers:
            mine = [r for r in rs if r["solver"] == s]
            ratios, gaps, wins = [], [], 0
            for r in mine:
                k = (r["instance_hash"], r["seed"])
                c = r["max_cost_ms"]
                if c is None:
                    continue
                if best[k]:
                    ratios.append(c / best[k])
                    points.append({"solver": s, "ratio": c / best[k], "solve_s": r["solve_time_s"] or 0.0})
                if best[k] is not None and c <= best[k] * (1 + 1e-9):
                    wins += 1
                if bound[k]:
                    gaps.append(c / bound[k])
                    gap_points.append({"solver": s, "pair": pair_index[k], "gap": c / bound[k]})
            stats.append(SolverStats(
                solver=s, runs=len(mine), failed=sum(r["max_cost_ms"] is None for r in mine),
                mean_cost_ms=_mean([by_pair[k][s]["max_cost_ms"] for k in common]),
                mean_ratio=_mean(ratios), std_ratio=statistics.pstdev(ratios) if ratios else None, wins=wins,
                mean_solve_s=statistics.fmean(r["solve_time_s"] or 0.0 for r in mine), mean_gap_to_bound=_mean(gaps),
            ))
        judge = next((r["judge"] for r in rs if r["judge"]), f"{cm}, {backend}")
        instances = sorted({r["instance_file"] for r in rs})
        reports.append(SuiteReport(suite, backend, cm, judge, instances, stats, len(common), len(by_pair), points, gap_points))
    return reports


HEADERS = ["solver", "mean max cost (ms)", "ratio to best", "wins", "failed", "mean solve (s)", "gap to bound"]


def _f(x: float | None, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def table_cells(rep: SuiteReport) -> list[list[str]]:
    return [
        [s.solver, _f(s.mean_cost_ms), _f(s.mean_ratio) + (f" ± {s.std_ratio:.3f}" if s.std_ratio else ""),
         str(s.wins), f"{s.failed}/{s.runs}", _f(s.mean_solve_s, 4), _f(s.mean_gap_to_bound)]
        for s in rep.solvers
    ]


def caption(rep: SuiteReport) -> str:
    return (
        f"{rep.suite}: {len(rep.instances)} instances, {rep.pairs} instance×seed pairs; judge: {rep.judge} "
        f"(backend {rep.backend}, cost model {rep.cost_model}). Mean max cost is over the {rep.common} pairs every "
        f"solver solved; ratio to best and wins over each solver's solved pairs; failed = infeasible / no plan / "
        f"error, never dropped silently; gap to bound = cost / the instance's certified lower bound of the analytic model "
        f"(shardopt bound: every table- and column-wise plan costs at least that; row-wise or replicated shards are "
        f"not covered), where `leaderboard run --bounds` computed one."
    )


def markdown(reports: list[SuiteReport], command: str = "") -> str:
    out = ["# Solver leaderboard", ""]
    if command:
        out += [f"Command: `{command}`", ""]
    for rep in reports:
        out += [f"## {rep.suite}", "", caption(rep), ""]
        out.append("| " + " | ".join(HEADERS) + " |")
        out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(HEADERS))) + "|")
        for cells in table_cells(rep):
            out.append("| " + " | ".join(cells) + " |")
        out += ["", "Instances: " + ", ".join(rep.instances), ""]
    return "\n".join(out)


PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def svg_bars(rep: SuiteReport) -> str:
    """Mean normalised cost (ratio to best) per solver, error bars = std."""
    stats = [s for s in rep.solvers if s.mean_ratio is not None]
    w, h, left, bottom, top = 640, 300, 60, 60, 20
    if not stats:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="40"><text x="10" y="25">no solved instances</text></svg>'
    hi = max(s.mean_ratio + (s.std_ratio or 0) for s in stats) * 1.05
    lo = 0.0
    plot_h = h - bottom - top
    bw = (w - left - 20) / len(stats)

    def y(v: float) -> float:
        return top + plot_h * (1 - (v - lo) / (hi - lo))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{w - 10}" y2="{top + plot_h}" stroke="black"/>']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        parts.append(f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        parts.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - 10}" y2="{y(v):.1f}" stroke="#ddd"/>')
    if hi > 1.0:
        parts.append(f'<line x1="{left}" y1="{y(1.0):.1f}" x2="{w - 10}" y2="{y(1.0):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    for i, s in enumerate(stats):
        x = left + i * bw + bw * 0.15
        bwid = bw * 0.7
        cx = x + bwid / 2
        parts.append(f'<rect x="{x:.1f}" y="{y(s.mean_ratio):.1f}" width="{bwid:.1f}" height="{y(lo) - y(s.mean_ratio):.1f}" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"><title>{html.escape(s.solver)}: {s.mean_ratio:.3f} ± {(s.std_ratio or 0):.3f}</title></rect>')
        sd = s.std_ratio or 0.0
        parts.append(f'<line x1="{cx:.1f}" y1="{y(s.mean_ratio + sd):.1f}" x2="{cx:.1f}" y2="{y(max(lo, s.mean_ratio - sd)):.1f}" stroke="black"/>')
        for v in (s.mean_ratio + sd, max(lo, s.mean_ratio - sd)):
            parts.append(f'<line x1="{cx - 5:.1f}" y1="{y(v):.1f}" x2="{cx + 5:.1f}" y2="{y(v):.1f}" stroke="black"/>')
        parts.append(f'<text x="{cx:.1f}" y="{top + plot_h + 15}" text-anchor="middle">{html.escape(s.solver)}</text>')
    parts.append(f'<text x="{left + (w - left) / 2:.0f}" y="{h - 10}" text-anchor="middle">mean cost / best cost per instance (error bars: std)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def svg_wins(rep: SuiteReport) -> str:
    """Win counts per solver (ties count for every tied solver), horizontal bars."""
    w, row, left = 640, 22, 120
    h = row * len(rep.solvers) + 30
    most = max((s.wins for s in rep.solvers), default=0) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">']
    for i, s in enumerate(rep.solvers):
        y = 10 + i * row
        bw = (w - left - 60) * s.wins / most
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{html.escape(s.solver)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{bw:.1f}" height="{row - 6}" fill="{PALETTE[i % len(PALETTE)]}"/>')
        parts.append(f'<text x="{left + bw + 5:.1f}" y="{y + 14}">{s.wins} wins, {s.failed} failed</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _legend_and_labels(colour: dict[str, str], w: int, h: int, left: int, top: int, right: int, pw: int, ph: int, xlabel: str, ylabel: str) -> list[str]:
    """The solver legend beside a plot frame, and its two axis labels (shared by the point plots)."""
    parts = []
    for i, (s, c) in enumerate(colour.items()):
        ly = top + 10 + i * 16
        parts.append(f'<circle cx="{w - right + 15}" cy="{ly}" r="5" fill="{c}"/>')
        parts.append(f'<text x="{w - right + 25}" y="{ly + 4}">{html.escape(s)}</text>')
    parts.append(f'<text x="{left + pw / 2:.0f}" y="{h - 12}" text-anchor="middle">{html.escape(xlabel)}</text>')
    parts.append(f'<text x="14" y="{top + ph / 2:.0f}" text-anchor="middle" transform="rotate(-90 14 {top + ph / 2:.0f})">{html.escape(ylabel)}</text>')
    return parts


def svg_scatter(rep: SuiteReport) -> str:
    """Normalised cost against solve time (log scale), one point per solved (instance, solver, seed)."""
    w, h, left, bottom, top, right = 640, 320, 60, 50, 20, 140
    pts = rep.points
    if not pts:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="40"><text x="10" y="25">no solved instances</text></svg>'
    xs = [math.log10(max(p["solve_s"], 1e-6)) for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 - x0 < 1e-9:
        x0, x1 = x0 - 0.5, x1 + 0.5
    y0, y1 = min(p["ratio"] for p in pts), max(p["ratio"] for p in pts)
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.05, y1 + 0.05
    pw, ph = w - left - right, h - top - bottom
    colour = {s.solver: PALETTE[i % len(PALETTE)] for i, s in enumerate(rep.solvers)}

    def px(v: float) -> float:
        return left + pw * (v - x0) / (x1 - x0)

    def py(v: float) -> float:
        return top + ph * (1 - (v - y0) / (y1 - y0))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>']
    for i in range(5):
        vx = x0 + (x1 - x0) * i / 4
        vy = y0 + (y1 - y0) * i / 4
        parts.append(f'<text x="{px(vx):.1f}" y="{top + ph + 15}" text-anchor="middle">{10 ** vx:.2g}</text>')
        parts.append(f'<text x="{left - 5}" y="{py(vy) + 4:.1f}" text-anchor="end">{vy:.2f}</text>')
    for p, lx in zip(pts, xs):
        parts.append(f'<circle cx="{px(lx):.1f}" cy="{py(p["ratio"]):.1f}" r="3.5" fill="{colour[p["solver"]]}" fill-opacity="0.7">'
                     f'<title>{html.escape(p["solver"])}: {p["ratio"]:.3f} in {p["solve_s"]:.4f} s</title></circle>')
    parts += _legend_and_labels(colour, w, h, left, top, right, pw, ph, "solve time (s, log scale)", "cost / best")
    parts.append("</svg>")
    return "\n".join(parts)


def svg_gaps(rep: SuiteReport) -> str:
    """Per instance (those with a certified bound): each solver's cost / the bound, one column each."""
    w, h, left, bottom, top, right = 640, 300, 60, 40, 20, 140
    pts = rep.gap_points
    if not pts:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="40"><text x="10" y="25">no certified bound in the store (leaderboard run --bounds)</text></svg>'
    n = max(p["pair"] for p in pts) + 1
    y0, y1 = min(p["gap"] for p in pts), max(p["gap"] for p in pts)
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.05, y1 + 0.05
    pw, ph = w - left - right, h - top - bottom
    colour = {s.solver: PALETTE[i % len(PALETTE)] for i, s in enumerate(rep.solvers)}

    def px(i: int) -> float:
        return left + pw * (i + 0.5) / n

    def py(v: float) -> float:
        return top + ph * (1 - (v - y0) / (y1 - y0))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>']
    if y0 <= 1.0 <= y1:
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(1.0):.1f}" y2="{py(1.0):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    for i in range(5):
        vy = y0 + (y1 - y0) * i / 4
        parts.append(f'<text x="{left - 5}" y="{py(vy) + 4:.1f}" text-anchor="end">{vy:.2f}</text>')
    for p in pts:
        parts.append(f'<circle cx="{px(p["pair"]):.1f}" cy="{py(p["gap"]):.1f}" r="3.5" fill="{colour[p["solver"]]}" fill-opacity="0.7">'
                     f'<title>{html.escape(p["solver"])}: {p["gap"]:.3f} x the bound (instance {p["pair"] + 1})</title></circle>')
    parts += _legend_and_labels(colour, w, h, left, top, right, pw, ph, "instance (those with a certified bound)", "cost / certified bound")
    parts.append("</svg>")
    return "\n".join(parts)


STYLE = (
    "<style>body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px}"
    "td{text-align:right}td:first-child{text-align:left}th{background:#f3f3f3}"
    ".cap{color:#555;font-size:90%}</style></head><body>"
)


def html_report(reports: list[SuiteReport], command: str = "") -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>Solver leaderboard</title>',
           STYLE, "<h1>Solver leaderboard</h1>"]
    if command:
        out.append(f"<p>Command: <code>{html.escape(command)}</code></p>")
    for rep in reports:
        out.append(f"<h2>{html.escape(rep.suite)}</h2>")
        out.append(f'<p class="cap">{html.escape(caption(rep))}</p>')
        out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS) + "</tr>")
        for cells in table_cells(rep):
            out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        out.append("</table>")
        out.append("<h3>Mean normalised cost per solver</h3>")
        out.append(svg_bars(rep))
        out.append("<h3>Cost against solve time</h3>")
        out.append(svg_scatter(rep))
        out.append("<h3>Per-instance gap to the certified lower bound (analytic model)</h3>")
        out.append(svg_gaps(rep))
        out.append("<h3>Wins (best plan on an instance, ties count for each)</h3>")
        out.append(svg_wins(rep))
        out.append(f'<p class="cap">Instances: {html.escape(", ".join(rep.instances))}</p>')
    out.append("</body></html>")
    return "\n".join(out)


def write_report(reports: list[SuiteReport], out_dir: Path, command: str = "") -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, page = out_dir / "leaderboard.md", out_dir / "leaderboard.html"
    md.write_text(markdown(reports, command) + "\n")
    page.write_text(html_report(reports, command) + "\n")
    return [md, page]
