"""`shardopt leaderboard run` and `shardopt leaderboard report`: suites x solvers x judge into a resumable SQLite
store, and the tables / plots made from it (see shardopt.leaderboard)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    EXIT_BAD_INPUT,
    AddressOpt,
    CLIError,
    EngineOpt,
    JsonOpt,
    _command_line,
    _console,
    _emit_json,
    _engine,
    _esc,
    _guard,
    _print_lines,
    _progress,
    app,
)

leaderboard_app = typer.Typer(
    name="leaderboard",
    help="Run every solver on a suite into a resumable SQLite store, and report leaderboards from it.",
    no_args_is_help=True,
)
app.add_typer(leaderboard_app, name="leaderboard")


@contextmanager
def _lb_guard(json_out: bool) -> Iterator[None]:
    from shardopt.leaderboard.store import LeaderboardError

    with _guard(json_out):
        try:
            yield
        except LeaderboardError as exc:
            raise CLIError(str(exc), EXIT_BAD_INPUT, "bad_leaderboard_request") from None


@leaderboard_app.command("run")
def run(
    suite_dir: Annotated[Path, typer.Argument(metavar="SUITE_DIR", help="A directory of instance files (suite.json is skipped).")],
    solvers: Annotated[str, typer.Option("--solvers", "-s", help="Comma-separated solver names (see `shardopt solvers`); with a measured backend also `pick` (solve --pick's portfolio, per cost model, its plans measured in a session of their own and the fastest kept).")],
    db: Annotated[Path, typer.Option("--db", metavar="RESULTS.sqlite", help="The SQLite store; finished rows are skipped on re-runs.")],
    backend: Annotated[str, typer.Option("--backend", "-b", help="Judge backend: sim, cpu, cuda.")] = "sim",
    cost_model: Annotated[str, typer.Option("--cost-model", help="Cost model the solvers optimise: auto (per instance: the model calibrated on its hardware, else analytic), a name or a path (analytic:PROFILE.json, MODEL.npz; see `shardopt solve --help`); with a measured backend, a comma-separated list (each solver searches with each).")] = "auto",
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Worker processes (simulated judge only: a measured backend solves and times one instance at a time).")] = 1,
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="Per-solve time limit in seconds (part of a row's key: a re-run with another limit solves again, into rows of its own) \\[default: each solver's own budget].", show_default=False)] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds 0..K-1 per (instance, solver).")] = 1,
    bounds: Annotated[bool, typer.Option("--bounds", help="Also store each instance's certified lower bound of the analytic model (shardopt bound): the reports' gap column. Simulated judge only.")] = False,
    bound_time_limit: Annotated[float, typer.Option("--bound-time-limit", help="Seconds per instance for the bound (its dual bound at the limit is still a bound).")] = 10.0,
    repeats: Annotated[str, typer.Option("--repeats", "-r", help="Measured backends: rounds per instance session, or 'auto'.")] = "auto",
    target: Annotated[float, typer.Option("--target", help="Measured backends, --repeats auto: every plan's CI half-width to reach.")] = 0.02,
    time_cap: Annotated[float, typer.Option("--time-cap", help="Measured backends: seconds of timing per instance at most.")] = 120.0,
    option: Annotated[list[str] | None, typer.Option("--option", "-O", metavar="SOLVER.KEY=VALUE", help="A solver option (repeatable; `shardopt solvers --options NAME` lists them), part of the rows' key.", show_default=False)] = None,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Solve and judge every (instance, solver, seed) of SUITE_DIR; one row each in the store. With a measured backend
    (cpu, cuda) all plans of an instance are measured together, paired and interleaved (the `measured` table)."""
    with _lb_guard(json_out):
        from shardopt.leaderboard.run import check_bound_request, compute_bounds, run_leaderboard
        from shardopt.leaderboard.store import LeaderboardError

        names = [s.strip() for s in solvers.split(",") if s.strip()]
        solver_options = _solver_options(option or [])
        if jobs < 1:
            raise LeaderboardError(f"--jobs: {jobs} must be >= 1")
        if bounds and backend not in ("cpu", "cuda"):
            check_bound_request(backend, cost_model, bound_time_limit)  # fail before any solve
        with _engine(engine, address, jobs) as eng:
            if backend in ("cpu", "cuda"):
                _run_measured(suite_dir, names, db, backend, cost_model, time_limit, seeds, repeats, target, time_cap, bounds,
                              jobs, eng, json_out, solver_options)
                return
            with _progress(f"leaderboard ({eng.describe()})", enabled=not json_out) as tick:
                summary = run_leaderboard(suite_dir, names, db, backend=backend, cost_model=cost_model, seeds=seeds,
                                          time_limit=time_limit, jobs=jobs, engine=eng, progress=tick, solver_options=solver_options)
        doc = {"db": str(db), "suite": str(suite_dir), "total": summary.total, "skipped": summary.skipped,
               "done": summary.done, "failed": summary.failed, "engine": engine}
        lines = [f"{summary.done} new rows ({summary.failed} without a plan), {summary.skipped} already finished under these settings, "
                 f"{summary.total} in all -> {_esc(str(db))}"]
        if bounds:
            with _progress("certified bounds", enabled=not json_out) as tick:
                bs = compute_bounds(suite_dir, db, backend=backend, cost_model=cost_model, time_limit=bound_time_limit, progress=tick)
            doc["bounds"] = {"total": bs.total, "skipped": bs.skipped, "done": bs.done, "failed": bs.failed}
            lines.append(f"certified bounds: {bs.done} new ({bs.failed} without a value), {bs.skipped} already there")
        if json_out:
            _emit_json(doc)
        else:
            _print_lines(_console(), lines)


def _solver_options(items: list[str]) -> dict[str, dict[str, Any]]:
    """`-O SOLVER.KEY=VALUE` strings as {solver: {key: value}} (values JSON-decoded where they are JSON)."""
    from shardopt.leaderboard.store import LeaderboardError
    from solvers.options import OptionError, parse_option_text

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        solver, dot, rest = item.partition(".")
        if not dot or not solver.strip() or "=" in solver:
            raise LeaderboardError(f"--option: {item!r} is not SOLVER.KEY=VALUE (e.g. cpsat.max_split=1)")
        try:
            out.setdefault(solver.strip(), {}).update(parse_option_text([rest]))
        except OptionError as exc:
            raise LeaderboardError(f"--option: {item!r}: {exc}") from None
    return out


def _run_measured(suite_dir: Path, names: list[str], db: Path, backend: str, cost_model: str, time_limit: float | None,
                  seeds: int, repeats: str, target: float, time_cap: float, bounds: bool, jobs: int, eng: Any, json_out: bool,
                  solver_options: dict[str, dict[str, Any]]) -> None:
    from shardopt.leaderboard.measured import run_measured_leaderboard
    from shardopt.leaderboard.store import LeaderboardError
    from shardopt.measure.engine import LocalEngine

    if bounds:
        raise LeaderboardError("--bounds: the certified bound is of the analytic model; a measured judge is not bounded by it")
    if seeds != 1:
        raise LeaderboardError("--seeds: a measured leaderboard runs seed 0 (one paired session per instance)")
    if jobs < 1:
        raise LeaderboardError(f"--jobs: {jobs} must be >= 1")
    # a plan timed beside other work is judged by the load as much as by the plan: nothing runs in parallel here
    local = isinstance(eng, LocalEngine)
    note = (f"--jobs {jobs} ignored: a measured leaderboard solves and times one instance at a time on this machine, never beside other work"
            if jobs > 1 and local else None)
    models = [m.strip() for m in cost_model.split(",") if m.strip()]
    with _progress(f"measured leaderboard on {backend} (instances; {eng.describe() if not local else 'local'})", enabled=not json_out) as tick:
        summary = run_measured_leaderboard(suite_dir, names, models, db, backend=backend, time_limit=time_limit,
                                           repeats=repeats, target=target, time_cap_s=time_cap, engine=eng, progress=tick,
                                           solver_options=solver_options)
    doc = {"db": str(db), "suite": str(suite_dir), "backend": backend, "cost_models": models,
           "instances": summary.instances, "skipped": summary.skipped, "rows": summary.rows, "failed": summary.failed,
           "sessions": summary.sessions, "jobs": 1 if local else None, "engine": eng.name}
    if note:
        doc["note"] = note
    if json_out:
        _emit_json(doc)
        return
    secs = sum(s["seconds"] for s in summary.sessions)
    _print_lines(_console(), ([note] if note else []) + [
        f"{summary.rows} new rows ({summary.failed} without a plan) from {len(summary.sessions)} paired sessions "
        f"({secs:.0f} s of timing), {summary.skipped} instances already finished under these settings -> {_esc(str(db))}"])


@leaderboard_app.command("report")
def report(
    db: Annotated[Path, typer.Option("--db", metavar="RESULTS.sqlite", help="The store written by `leaderboard run`.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", metavar="DIR", help="Also write leaderboard.md and leaderboard.html here.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Leaderboard tables per suite (terminal; Markdown and self-contained HTML with plots under --out)."""
    with _lb_guard(json_out):
        from rich.table import Table

        from shardopt.leaderboard.measured import (
            build_measured_reports,
            load_measured,
            measured_markdown,
            write_measured_report,
        )
        from shardopt.leaderboard.report import HEADERS, build_reports, caption, table_cells, write_report
        from shardopt.leaderboard.store import LeaderboardError, load_bounds, load_rows

        reports = build_reports(load_rows(db), load_bounds(db)) if _has_rows(db) else []
        measured = build_measured_reports(load_measured(db))
        if not reports and not measured:
            raise LeaderboardError(f"--db: {db} holds no results yet")
        written = write_report(reports, out, _command_line()) if out is not None and reports else []
        if out is not None and measured:
            written += write_measured_report(measured, out, _command_line())
        if json_out:
            _emit_json({"db": str(db), "suites": [r.to_dict() for r in reports], "written": [str(p) for p in written],
                        "measured": [{"suite": m.suite, "backend": m.backend, "settings": m.settings, "instances": m.instances,
                                      "common_instances": m.common, "entries": [_no_nan(vars(e)) for e in m.entries],
                                      "tau_rows": m.tau_rows, "spearman_rows": m.rho_rows, "tau_within": m.tau_within,
                                      "ranking_tau": m.ranking_tau, "ranking_predicted": m.ranking_predicted,
                                      "ranking_measured": m.ranking_measured} for m in measured]})
            return
        console = _console()
        if measured:
            _print_lines(console, measured_markdown(measured).splitlines())
        for rep in reports:
            table = Table(title=f"{_esc(rep.suite)}", caption=_esc(caption(rep)), caption_justify="left")
            for i, h in enumerate(HEADERS):
                table.add_column(h, justify="left" if i == 0 else "right")
            for cells in table_cells(rep):
                table.add_row(*[_esc(c) for c in cells])
            console.print(table)
        if written:
            _print_lines(console, [f"wrote {', '.join(_esc(str(p)) for p in written)}"])


def _no_nan(d: dict) -> dict:
    """NaN (an entry without a measurement) as null: strict JSON has no NaN."""
    return {k: None if isinstance(v, float) and v != v else v for k, v in d.items()}


def _has_rows(db: Path) -> bool:
    """Whether the store holds simulated-style result rows (a measured-only store has none)."""
    from shardopt.leaderboard.store import check_db_path, connect

    check_db_path(db, must_exist=True)
    con = connect(db)
    try:
        return con.execute("SELECT COUNT(*) FROM results").fetchone()[0] > 0
    finally:
        con.close()
