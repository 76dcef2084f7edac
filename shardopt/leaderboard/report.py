"""Leaderboard reports from the store: per-suite statistics, a terminal / Markdown table, and one self-contained
HTML file with inline SVG plots."""

from __future__ import annotations

import html
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardopt.leaderboard import figures

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
    mean_gap_to_bound: float | None  # (cost - bound) / cost against the instance's certified bound (shardopt bound), where computed


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
    settings: str = ""  # the run settings of its rows, in words (store.settings_label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "backend": self.backend, "cost_model": self.cost_model, "judge": self.judge,
            "settings": self.settings,
            "instances": self.instances, "pairs": self.pairs, "common_pairs": self.common,
            "solvers": [s.__dict__ for s in self.solvers],
        }


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def build_reports(rows: list[dict[str, Any]], bounds: dict[tuple[str, str], float] | None = None) -> list[SuiteReport]:
    """Per suite: the solvers' statistics. Gaps divide by the certified bound of the analytic model (`bounds`,
    from `leaderboard run --bounds`), for the simulated judge only; the solvers' own `lower_bound`s are not used:
    the exact solvers' are bounds of a linearised model around their own plan and bound nobody else's plans."""
    from shardopt.leaderboard.store import UNRECORDED_SETTINGS, settings_label

    bounds = bounds or {}
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:  # (rows of other run settings - another time limit - are a report of their own)
        groups.setdefault((r["suite"], r["backend"], r["cost_model"], r.get("settings") or UNRECORDED_SETTINGS), []).append(r)
    reports = []
    for (suite, backend, cm, settings), rs in sorted(groups.items()):
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
                    gaps.append((c - bound[k]) / c)  # (shardopt bound's and solve's definition: solvers.bound.plan_gap)
                    gap_points.append({"solver": s, "pair": pair_index[k], "gap": (c - bound[k]) / c})
            stats.append(SolverStats(
                solver=s, runs=len(mine), failed=sum(r["max_cost_ms"] is None for r in mine),
                mean_cost_ms=_mean([by_pair[k][s]["max_cost_ms"] for k in common]),
                mean_ratio=_mean(ratios), std_ratio=statistics.pstdev(ratios) if ratios else None, wins=wins,
                mean_solve_s=statistics.fmean(r["solve_time_s"] or 0.0 for r in mine), mean_gap_to_bound=_mean(gaps),
            ))
        judge = next((r["judge"] for r in rs if r["judge"]), f"{cm}, {backend}")
        instances = sorted({r["instance_file"] for r in rs})
        reports.append(SuiteReport(suite, backend, cm, judge, instances, stats, len(common), len(by_pair), points, gap_points,
                                   settings_label(settings)))
    return reports


HEADERS = ["solver", "mean max cost (ms)", "ratio to best", "wins", "failed", "mean solve (s)", "gap to bound"]


def _f(x: float | None, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f} %"


def table_cells(rep: SuiteReport) -> list[list[str]]:
    return [
        [s.solver, _f(s.mean_cost_ms), _f(s.mean_ratio) + (f" ± {s.std_ratio:.3f}" if s.std_ratio else ""),
         str(s.wins), f"{s.failed}/{s.runs}", _f(s.mean_solve_s, 4), _pct(s.mean_gap_to_bound)]
        for s in rep.solvers
    ]


def caption(rep: SuiteReport) -> str:
    return (
        f"{rep.suite}: {len(rep.instances)} instances, {rep.pairs} instance×seed pairs; {rep.settings or 'settings not given'}; "
        f"judge: {rep.judge} (backend {rep.backend}, cost model {rep.cost_model}). Mean max cost is over the {rep.common} pairs every "
        f"solver solved; ratio to best and wins over each solver's solved pairs; failed = infeasible / no plan / "
        f"error, never dropped silently; gap to bound = (cost - bound) / cost, the bound being the instance's certified lower bound of the analytic model "
        f"(shardopt bound: every plan of table-, column-, row-wise and replicated shards, in HBM or host memory, costs at "
        f"least that; row x column blocks are not covered), where `leaderboard run --bounds` computed one."
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


def svg_bars(rep: SuiteReport) -> str:
    """Mean normalised cost (ratio to best) per solver, error bars = std."""
    stats = [s for s in rep.solvers if s.mean_ratio is not None]
    if not stats:
        return figures.no_data("no solved instances")
    return figures.bars([s.solver for s in stats], [s.mean_ratio for s in stats], [s.std_ratio or 0.0 for s in stats],
                        "mean cost / best cost per instance (error bars: std)")


def svg_wins(rep: SuiteReport) -> str:
    """Win counts per solver (ties count for every tied solver), horizontal bars."""
    if not rep.solvers:
        return figures.no_data("no solvers")
    return figures.horizontal_bars([s.solver for s in rep.solvers], [float(s.wins) for s in rep.solvers],
                                   [f"{s.wins} wins, {s.failed} failed" for s in rep.solvers], "wins")


def svg_scatter(rep: SuiteReport) -> str:
    """Normalised cost against solve time (log scale), one point per solved (instance, solver, seed)."""
    if not rep.points:
        return figures.no_data("no solved instances")
    series = {s.solver: ([max(p["solve_s"], 1e-6) for p in rep.points if p["solver"] == s.solver],
                         [p["ratio"] for p in rep.points if p["solver"] == s.solver]) for s in rep.solvers}
    return figures.points(series, "solve time (s, log scale)", "cost / best", logx=True)


def svg_gaps(rep: SuiteReport) -> str:
    """Per instance (those with a certified bound): each solver's gap to the bound, (cost - bound) / cost, in %."""
    if not rep.gap_points:
        return figures.no_data("no certified bound in the store (leaderboard run --bounds)")
    series = {s.solver: ([p["pair"] + 1 for p in rep.gap_points if p["solver"] == s.solver],
                         [100 * p["gap"] for p in rep.gap_points if p["solver"] == s.solver]) for s in rep.solvers}
    return figures.points(series, "instance (those with a certified bound)", "gap to the certified bound (%)", reference=0.0)


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
