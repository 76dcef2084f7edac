"""Solver leaderboards: every (instance, solver, seed) of a suite solved and judged the same way, one row each in a
resumable SQLite store, and reports (terminal table, Markdown, one self-contained HTML file with inline SVG plots).

The store: one row per (instance_hash, solver, seed, backend, cost_model), committed as soon as it is done, so a run
killed at any moment loses at most the rows in flight and a re-run skips every finished row. Worker processes only
solve and judge; the parent process alone writes (SQLite in WAL mode, with a busy timeout for concurrent runs).
"""

from __future__ import annotations

import html
import json
import math
import os
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SUITE_MANIFEST = "suite.json"
FAILED_STATUSES = ("infeasible", "no_solution", "judge_error", "error")

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    instance_file TEXT NOT NULL,
    instance_name TEXT NOT NULL,
    instance_hash TEXT NOT NULL,
    solver TEXT NOT NULL,
    params TEXT NOT NULL,
    seed INTEGER NOT NULL,
    backend TEXT NOT NULL,
    cost_model TEXT NOT NULL,
    judge TEXT,
    time_limit REAL,
    columns TEXT,
    max_cost_ms REAL,
    critical_path_ms REAL,
    solve_time_s REAL,
    status TEXT NOT NULL,
    reason TEXT,
    lower_bound REAL,
    code_version TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (instance_hash, solver, seed, backend, cost_model)
)
"""

BOUNDS_SCHEMA = """
CREATE TABLE IF NOT EXISTS bounds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    instance_file TEXT NOT NULL,
    instance_hash TEXT NOT NULL,
    cost_model TEXT NOT NULL,
    kind TEXT NOT NULL,
    value_ms REAL,
    status TEXT NOT NULL,
    reason TEXT,
    covers TEXT,
    time_limit REAL,
    time_s REAL,
    code_version TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (instance_hash, cost_model, kind)
)
"""
BOUND_KIND = "analytic"  # solvers.analytic_bound: every table- and column-wise plan, analytic model
BOUND_COLUMNS = ("suite", "instance_file", "instance_hash", "cost_model", "kind", "value_ms", "status", "reason", "covers",
                 "time_limit", "time_s", "code_version", "created_at")

COLUMNS = (
    "suite", "instance_file", "instance_name", "instance_hash", "solver", "params", "seed", "backend", "cost_model",
    "judge", "time_limit", "columns", "max_cost_ms", "critical_path_ms", "solve_time_s", "status", "reason",
    "lower_bound", "code_version", "created_at",
)


class LeaderboardError(ValueError):
    """Bad input to a leaderboard run or report (bad db path, empty suite, unknown solver, empty store)."""


# ---------------------------------------------------------------------------------------------------------------
# the store


def check_db_path(db: Path, must_exist: bool = False) -> None:
    db = Path(db)
    if must_exist:
        if not db.is_file():
            raise LeaderboardError(f"--db: {db} does not exist (run `shardopt leaderboard run` first)")
        return
    if db.is_dir():
        raise LeaderboardError(f"--db: {db} is a directory, not a database file")
    parent = db.parent if str(db.parent) else Path(".")
    if not parent.is_dir():
        raise LeaderboardError(f"--db: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (db.exists() and not os.access(db, os.W_OK)):
        raise LeaderboardError(f"--db: {db} is not writable")


def connect(db: Path) -> sqlite3.Connection:
    """Open the store (WAL, so runs can share it) and create its tables. Two runs starting on a new file race for
    the journal-mode switch, which SQLite answers "database is locked" without waiting: that is retried."""
    deadline = time.monotonic() + 60.0
    while True:
        con = None
        try:
            con = sqlite3.connect(str(db), timeout=60.0)
            con.execute("PRAGMA busy_timeout = 60000")
            con.execute("PRAGMA journal_mode = WAL")
            con.execute(SCHEMA)
            con.execute(BOUNDS_SCHEMA)
            con.commit()
            return con
        except sqlite3.OperationalError as exc:
            if con is not None:
                con.close()
            if "locked" in str(exc) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise LeaderboardError(f"--db: {db}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            if con is not None:
                con.close()
            raise LeaderboardError(f"--db: {db}: {exc}") from None


def finished_keys(con: sqlite3.Connection) -> set[tuple[str, str, int, str, str]]:
    rows = con.execute("SELECT instance_hash, solver, seed, backend, cost_model FROM results").fetchall()
    return {tuple(r) for r in rows}  # type: ignore[misc]


def insert_row(con: sqlite3.Connection, row: dict[str, Any]) -> bool:
    """Insert one row and commit; False when an equal key was already there (another run finished it first)."""
    cur = con.execute(
        f"INSERT OR IGNORE INTO results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})",
        [row.get(c) for c in COLUMNS],
    )
    con.commit()
    return cur.rowcount == 1


def load_rows(db: Path) -> list[dict[str, Any]]:
    check_db_path(db, must_exist=True)
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60.0)
        con.row_factory = sqlite3.Row
        rows = [dict(r) for r in con.execute("SELECT * FROM results ORDER BY suite, instance_file, solver, seed")]
        con.close()
    except sqlite3.DatabaseError as exc:
        raise LeaderboardError(f"--db: {db}: not a leaderboard database ({exc})") from None
    if not rows:
        raise LeaderboardError(f"--db: {db} holds no results")
    return rows


def load_bounds(db: Path) -> dict[tuple[str, str], float]:
    """{(instance_hash, cost_model): certified bound (ms)} from the store's bounds table (empty if it has none)."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60.0)
        got = con.execute("SELECT instance_hash, cost_model, value_ms FROM bounds WHERE kind = ? AND value_ms IS NOT NULL",
                          (BOUND_KIND,)).fetchall()
        con.close()
    except sqlite3.OperationalError:  # a store written before bounds existed
        return {}
    return {(h, cm): float(v) for h, cm, v in got}


_VERSION: str | None = None


def code_version() -> str:
    global _VERSION
    if _VERSION is None:
        from shardopt import __version__

        try:
            out = subprocess.run(
                ["git", "describe", "--always", "--dirty"], cwd=Path(__file__).resolve().parent,
                capture_output=True, text=True, timeout=10, check=False,
            )
            git = out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
        except (OSError, subprocess.SubprocessError):
            git = "unknown"
        _VERSION = f"{__version__}+{git}"
    return _VERSION


# ---------------------------------------------------------------------------------------------------------------
# running


def suite_files(suite_dir: Path) -> list[Path]:
    suite_dir = Path(suite_dir)
    if not suite_dir.is_dir():
        raise LeaderboardError(f"SUITE_DIR: {suite_dir} is not a directory")
    files = sorted(p for p in suite_dir.glob("*.json") if p.name != SUITE_MANIFEST)
    if not files:
        raise LeaderboardError(f"SUITE_DIR: {suite_dir} holds no instance files (*.json)")
    return files


@dataclass(frozen=True)
class Task:
    suite: str
    path: str
    instance_hash: str
    solver: str
    seed: int
    backend: str
    cost_model: str
    time_limit: float | None


def solve_task(task: Task) -> dict[str, Any]:
    """Solve and judge one (instance, solver, seed): the row to store. Runs in a worker process."""
    from costmodels.registry import get_cost_model
    from shardopt.evaluate import evaluate_plan
    from shardopt.ir import load_instance
    from solvers.registry import get_solver

    instance = load_instance(task.path)
    row: dict[str, Any] = {
        "suite": task.suite, "instance_file": Path(task.path).name, "instance_name": instance.name,
        "instance_hash": task.instance_hash, "solver": task.solver, "seed": task.seed, "backend": task.backend,
        "cost_model": task.cost_model, "time_limit": task.time_limit, "code_version": code_version(),
    }
    model = get_cost_model(task.cost_model)
    solver = get_solver(task.solver)
    row["params"] = json.dumps(solver.params(), sort_keys=True, default=str)
    start = time.perf_counter()
    try:
        result = solver.solve(instance, model, time_limit=task.time_limit, seed=task.seed)
    except Exception as exc:  # noqa: BLE001 - a crashing solver is a failed row, never a lost one
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}", solve_time_s=time.perf_counter() - start)
    else:
        row.update(status=result.status.value, reason=result.reason, solve_time_s=result.wall_time_s,
                   lower_bound=result.lower_bound)
        if result.status.has_plan and result.plan is not None:
            try:
                ev = evaluate_plan(instance, result.plan, backend=task.backend)
            except Exception as exc:  # noqa: BLE001 - an invalid plan is a failure of the solver
                row.update(status="judge_error", reason=f"{type(exc).__name__}: {exc}")
            else:
                row.update(judge=ev.judge, columns=json.dumps(ev.costs.columns.tolist()),
                           max_cost_ms=ev.costs.max_cost, critical_path_ms=ev.costs.critical_path)
    row["created_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


@dataclass
class RunSummary:
    total: int
    skipped: int
    done: int = 0
    failed: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)


def plan_tasks(suite_dir: Path, solvers: list[str], seeds: int, backend: str, cost_model: str,
               time_limit: float | None) -> list[Task]:
    from costmodels.registry import get_cost_model
    from shardopt.evaluate import BACKENDS
    from shardopt.ir import load_instance
    from solvers.registry import UnknownSolverError, solver_names

    if not solvers:
        raise LeaderboardError("--solvers: no solver named")
    for s in solvers:
        if s not in solver_names():
            raise UnknownSolverError(s)
    if backend not in BACKENDS:
        raise LeaderboardError(f"--backend: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if seeds < 1:
        raise LeaderboardError(f"--seeds: {seeds} must be >= 1")
    get_cost_model(cost_model)  # raises UnknownCostModelError early
    suite = Path(suite_dir).resolve().name
    tasks = []
    for f in suite_files(suite_dir):
        h = load_instance(f).content_hash()
        for s in solvers:
            for seed in range(seeds):
                tasks.append(Task(suite, str(f), h, s, seed, backend, cost_model, time_limit))
    return tasks


def run_leaderboard(
    suite_dir: Path,
    solvers: list[str],
    db: Path,
    *,
    backend: str = "sim",
    cost_model: str = "analytic",
    seeds: int = 1,
    time_limit: float | None = None,
    jobs: int = 1,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """Solve and judge every unfinished (instance, solver, seed) of `suite_dir`, one committed row each."""
    check_db_path(db)
    if jobs < 1:
        raise LeaderboardError(f"--jobs: {jobs} must be >= 1")
    tasks = plan_tasks(suite_dir, solvers, seeds, backend, cost_model, time_limit)
    con = connect(db)
    try:
        done_keys = finished_keys(con)
        todo = [t for t in tasks if (t.instance_hash, t.solver, t.seed, t.backend, t.cost_model) not in done_keys]
        summary = RunSummary(total=len(tasks), skipped=len(tasks) - len(todo))
        if progress:
            progress(summary.skipped, summary.total)

        def record(row: dict[str, Any]) -> None:
            insert_row(con, row)
            summary.done += 1
            summary.failed += row["status"] in FAILED_STATUSES
            summary.rows.append(row)
            if progress:
                progress(summary.skipped + summary.done, summary.total)
            if on_row:
                on_row(row)

        if jobs == 1 or len(todo) <= 1:
            for t in todo:
                record(solve_task(t))
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                pending = set()
                queue = iter(todo)
                try:
                    for t in queue:  # keep at most 2 x jobs in flight, so an interrupted run wastes little
                        pending.add(pool.submit(solve_task, t))
                        if len(pending) >= 2 * jobs:
                            break
                    while pending:
                        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            record(fut.result())
                            nxt = next(queue, None)
                            if nxt is not None:
                                pending.add(pool.submit(solve_task, nxt))
                except BaseException:
                    for fut in pending:
                        fut.cancel()
                    raise
    finally:
        con.close()
    return summary


def bound_row(suite: str, path: str, instance_hash: str, cost_model: str, time_limit: float) -> dict[str, Any]:
    """The certified analytic bound of one instance (solvers.analytic_bound), as a row of the bounds table."""
    from costmodels.registry import get_cost_model
    from shardopt.ir import load_instance
    from solvers.analytic_bound import analytic_lower_bound

    row: dict[str, Any] = {"suite": suite, "instance_file": Path(path).name, "instance_hash": instance_hash,
                           "cost_model": cost_model, "kind": BOUND_KIND, "time_limit": time_limit, "code_version": code_version()}
    start = time.perf_counter()
    try:
        b = analytic_lower_bound(load_instance(path), get_cost_model(cost_model), time_limit=time_limit)
    except Exception as exc:  # noqa: BLE001 - a failed bound is a row saying why, never a lost run
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}", time_s=time.perf_counter() - start)
    else:
        ok = b.status != "infeasible"
        weak = "HiGHS proved nothing in time: the table-cut bound alone (solvers.analytic_bound.table_cut_bound)"
        row.update(status=b.status, value_ms=b.value_ms if ok else None, covers=b.covers, time_s=b.time_s,
                   reason=b.reason if not ok else (weak if b.source == "table cuts" else None))
    row["created_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


def check_bound_request(backend: str, cost_model: str, time_limit: float) -> None:
    """Bounds are of the analytic model: only for its simulated judge."""
    from costmodels.analytic import AnalyticCostModel
    from costmodels.registry import get_cost_model

    if backend != "sim":
        raise LeaderboardError(f"--bounds: the certified bound is of the analytic model, but the judge here is the {backend!r} "
                               f"backend (measured); use --backend sim")
    if not isinstance(get_cost_model(cost_model), AnalyticCostModel):
        raise LeaderboardError(f"--bounds: the certified bound is of the analytic model, not of --cost-model {cost_model!r}")
    if time_limit <= 0:
        raise LeaderboardError(f"--bound-time-limit: {time_limit} must be > 0")


def compute_bounds(
    suite_dir: Path,
    db: Path,
    *,
    backend: str = "sim",
    cost_model: str = "analytic",
    time_limit: float = 10.0,
    progress: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """The certified lower bound of every instance of `suite_dir` not yet in the store's bounds table: what the
    reports divide each solver's cost by. Only for the simulated judge of the analytic model (the bound is of the
    analytic formulas; a measured judge or another model is not bounded by it)."""
    from shardopt.ir import load_instance

    check_db_path(db)
    check_bound_request(backend, cost_model, time_limit)
    suite = Path(suite_dir).resolve().name
    files = suite_files(suite_dir)
    con = connect(db)
    try:
        have = {tuple(r) for r in con.execute("SELECT instance_hash, cost_model FROM bounds WHERE kind = ?", (BOUND_KIND,))}
        todo = []
        for f in files:
            h = load_instance(f).content_hash()
            if (h, cost_model) not in have:
                todo.append((str(f), h))
        summary = RunSummary(total=len(files), skipped=len(files) - len(todo))
        if progress:
            progress(summary.skipped, summary.total)
        for path, h in todo:
            row = bound_row(suite, path, h, cost_model, time_limit)
            con.execute(f"INSERT OR IGNORE INTO bounds ({', '.join(BOUND_COLUMNS)}) VALUES ({', '.join('?' for _ in BOUND_COLUMNS)})",
                        [row.get(c) for c in BOUND_COLUMNS])
            con.commit()
            summary.done += 1
            summary.failed += row["value_ms"] is None
            summary.rows.append(row)
            if progress:
                progress(summary.skipped + summary.done, summary.total)
    finally:
        con.close()
    return summary


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
