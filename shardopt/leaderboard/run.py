"""Running a leaderboard: every (instance, solver, seed) of a suite solved and judged the same way in worker
processes, each row handed to the one writer (shardopt.leaderboard.store); the suite's certified bounds beside them.

With a measured judge (cpu, cuda) nothing runs in parallel: a plan timed while other processes solve or time is
judged by the load as much as by the plan, so run_leaderboard then solves and judges one task at a time, whatever
`jobs` says (RunSummary.sequential). The CLI's measured leaderboard (shardopt.leaderboard.measured) goes further and
times all plans of an instance together, paired and interleaved."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardopt.measure.engine import Engine

from shardopt.leaderboard.entries import portfolio_entry
from shardopt.leaderboard.store import (
    BOUND_COLUMNS,
    BOUND_KIND,
    FAILED_STATUSES,
    SUITE_MANIFEST,
    LeaderboardError,
    check_db_path,
    check_time_limit,
    code_version,
    connect,
    finished_keys,
    insert_row,
    settings_key,
)

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
    repeats: int | str = "auto"  # the measured judge's stopping rule (evaluate_plan); unused by the simulator
    target: float = 0.02
    time_cap_s: float = 120.0
    options: str = "{}"  # the solver's options that differ from its defaults, as JSON (checked: solver_options_key)

    @property
    def settings(self) -> str:
        """What the store keys besides instance, solver, seed, backend and cost model (store.settings_key)."""
        from shardopt.measure.evaluate import MEASURED_BACKENDS, stop_rule

        judge = stop_rule(self.repeats, self.target, self.time_cap_s).key() if self.backend in MEASURED_BACKENDS else None
        return settings_key(self.time_limit, judge, {self.solver: json.loads(self.options)})

    def key(self) -> tuple[str, str, int, str, str, str]:
        return (self.instance_hash, self.solver, self.seed, self.backend, self.cost_model, self.settings)


def solve_task(task: Task) -> dict[str, Any]:
    """Solve and judge one (instance, solver, seed): the row to store. Runs in a worker process."""
    from costmodels.auto import model_for
    from shardopt.core.ir import load_instance
    from shardopt.measure.evaluate import MEASURED_BACKENDS, evaluate_plan
    from solvers.catalog import NotAccepted, get_solver, spec_of

    instance = load_instance(task.path)
    row: dict[str, Any] = {
        "suite": task.suite, "instance_file": Path(task.path).name, "instance_name": instance.name,
        "instance_hash": task.instance_hash, "solver": task.solver, "seed": task.seed, "backend": task.backend,
        "cost_model": task.cost_model, "time_limit": task.time_limit, "code_version": code_version(),
        "settings": task.settings,
    }
    model = model_for(task.cost_model, instance)  # (auto: the calibrated model of the instance's hardware, if any)
    solver = get_solver(task.solver, **json.loads(task.options))
    solver.prepare()  # (one-time imports: not part of any row's solve time)
    row["params"] = json.dumps(solver.params(), sort_keys=True, default=str)
    start = time.perf_counter()
    refused = spec_of(task.solver).accepts(instance)
    try:
        if refused is not None:  # (constraints it would break, an instance beyond it: a failed row, named)
            raise NotAccepted(refused)
        result = solver.solve(instance, model, time_limit=task.time_limit, seed=task.seed)
    except NotAccepted as exc:
        row.update(status="no_solution", reason=str(exc), solve_time_s=0.0)
    except Exception as exc:  # noqa: BLE001 - a crashing solver is a failed row, never a lost one
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}", solve_time_s=time.perf_counter() - start)
    else:
        row.update(status=result.status.value, reason=result.reason, solve_time_s=result.wall_time_s,
                   lower_bound=result.lower_bound, stopped=result.stopped.value if result.stopped is not None else None)
        if result.status.has_plan and result.plan is not None:
            # the solver's own prediction of its plan's cost, by the cost model it searched with
            row["predicted_ms"] = result.predicted.max_cost if result.predicted is not None else result.plan.predicted_cost
            measured = task.backend in MEASURED_BACKENDS
            judge_opts: dict[str, Any] = dict(repeats=task.repeats, target=task.target, time_cap_s=task.time_cap_s) if measured else {}
            try:
                ev = evaluate_plan(instance, result.plan, backend=task.backend, **judge_opts)
            except Exception as exc:  # noqa: BLE001 - an invalid plan is a failure of the solver
                row.update(status="judge_error", reason=f"{type(exc).__name__}: {exc}")
            else:
                row.update(judge=ev.judge, columns=json.dumps(ev.costs.columns.tolist()),
                           max_cost_ms=ev.costs.max_cost, critical_path_ms=ev.costs.critical_path)
                if measured:
                    iv = ev.interval or {}
                    row.update(ci_low_ms=iv.get("low"), ci_high_ms=iv.get("high"), judge_rounds=ev.repeats,
                               machine=json.dumps(ev.machine, sort_keys=True, default=str) if ev.machine else None)
    row["created_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return row


@dataclass
class RunSummary:
    total: int
    skipped: int
    done: int = 0
    failed: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    sequential: bool = False  # a measured judge: jobs > 1 was overridden, one task at a time


def solver_options_key(solvers: list[str], solver_options: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Each solver's options that differ from its defaults, checked against its options dataclass before anything is
    solved or stored (LeaderboardError naming the option otherwise): what a row's settings key records."""
    from solvers.catalog import spec_of
    from solvers.options import OptionError, changed_options

    solver_options = solver_options or {}
    for name in solver_options:
        if name not in solvers:
            raise LeaderboardError(f"--option: {name!r} is not one of --solvers ({', '.join(solvers)})")
    out: dict[str, dict[str, Any]] = {}
    for name in solvers:
        entry = portfolio_entry(name)
        if entry is not None and not entry.takes_options:
            continue
        klass = spec_of(name).solver_class()
        try:
            options = klass(**solver_options.get(name, {})).options
        except OptionError as exc:
            raise LeaderboardError(f"--option: {exc}") from None
        out[name] = changed_options(options, klass.default_options)
    return out


def plan_tasks(suite_dir: Path, solvers: list[str], seeds: int, backend: str, cost_model: str,
               time_limit: float | None, repeats: int | str = "auto", target: float = 0.02,
               time_cap_s: float = 120.0, solver_options: dict[str, dict[str, Any]] | None = None) -> list[Task]:
    from costmodels.auto import check_cost_model_name
    from shardopt.core.ir import load_instance
    from shardopt.measure.evaluate import BACKENDS, MEASURED_BACKENDS, stop_rule
    from solvers.catalog import spec_of

    if not solvers:
        raise LeaderboardError("--solvers: no solver named")
    for s in solvers:
        entry = portfolio_entry(s)
        if entry is not None and entry.measured_only:
            raise LeaderboardError(f"--solvers: {s!r} measures its candidates: it is an entry of the measured leaderboard "
                                   "(--backend cpu|cuda), not of the simulated one")
        spec_of(s)  # (UnknownSolverError for a name the catalog does not have)
    if backend not in BACKENDS:
        raise LeaderboardError(f"--backend: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if seeds < 1:
        raise LeaderboardError(f"--seeds: {seeds} must be >= 1")
    check_time_limit(time_limit)
    check_cost_model_name(cost_model)  # raises UnknownCostModelError early
    if backend in MEASURED_BACKENDS:
        stop_rule(repeats, target, time_cap_s)  # raises EvaluationError early
    options = solver_options_key(solvers, solver_options)
    suite = Path(suite_dir).resolve().name
    tasks = []
    for f in suite_files(suite_dir):
        h = load_instance(f).content_hash()
        for s in solvers:
            for seed in range(seeds):
                tasks.append(Task(suite, str(f), h, s, seed, backend, cost_model, time_limit, repeats, target, time_cap_s,
                                  json.dumps(options[s], sort_keys=True)))
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
    repeats: int | str = "auto",
    target: float = 0.02,
    time_cap_s: float = 120.0,
    engine: Engine | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    solver_options: dict[str, dict[str, Any]] | None = None,
) -> RunSummary:
    """Solve and judge every unfinished (instance, solver, seed) of `suite_dir`, one committed row each, the rows
    written here as the tasks finish (the one writer). The tasks run on `engine` (shardopt.measure.engine; default:
    a local pool of `jobs` processes). With a measured `backend` (cpu, cuda) and the local engine, one task at a time
    whatever `jobs` says (the summary's `sequential`); on a Ray cluster each task asks for a GPU (cuda) or one CPU.
    Judged with evaluate_plan(repeats=, target=, time_cap_s=). `solver_options`: per solver, its options (-O), which
    the rows' settings key records."""
    from shardopt.measure.engine import LocalEngine, Resources, results, timing_resources
    from shardopt.measure.evaluate import MEASURED_BACKENDS

    check_db_path(db)
    if jobs < 1:
        raise LeaderboardError(f"--jobs: {jobs} must be >= 1")
    tasks = plan_tasks(suite_dir, solvers, seeds, backend, cost_model, time_limit, repeats, target, time_cap_s, solver_options)
    measured = backend in MEASURED_BACKENDS
    local = engine is None or isinstance(engine, LocalEngine)
    sequential = measured and local and max(jobs, engine.slots if engine is not None else 1) > 1
    if engine is None or (measured and local):
        engine = LocalEngine(1 if measured else jobs)  # never time a plan beside other work on this machine
    resources = timing_resources(backend) if measured else Resources()
    con = connect(db)
    try:
        done_keys = finished_keys(con)
        todo = [t for t in tasks if t.key() not in done_keys]
        summary = RunSummary(total=len(tasks), skipped=len(tasks) - len(todo), sequential=sequential)
        if progress:
            progress(summary.skipped, summary.total)
        with results(engine, solve_task, todo, resources=resources) as rows:
            for _, row in rows:
                insert_row(con, row)
                summary.done += 1
                summary.failed += row["status"] in FAILED_STATUSES
                summary.rows.append(row)
                if progress:
                    progress(summary.skipped + summary.done, summary.total)
                if on_row:
                    on_row(row)
    finally:
        con.close()
    return summary


def bound_row(suite: str, path: str, instance_hash: str, cost_model: str, time_limit: float) -> dict[str, Any]:
    """The certified analytic bound of one instance (solvers.bound), as a row of the bounds table."""
    from costmodels.registry import get_cost_model
    from shardopt.core.ir import load_instance
    from solvers.bound import analytic_lower_bound

    row: dict[str, Any] = {"suite": suite, "instance_file": Path(path).name, "instance_hash": instance_hash,
                           "cost_model": cost_model, "kind": BOUND_KIND, "time_limit": time_limit, "code_version": code_version()}
    start = time.perf_counter()
    try:
        b = analytic_lower_bound(load_instance(path), get_cost_model(bound_model(cost_model)), time_limit=time_limit)
    except Exception as exc:  # noqa: BLE001 - a failed bound is a row saying why, never a lost run
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}", time_s=time.perf_counter() - start)
    else:
        ok = b.status.proves_bound
        weak = "HiGHS proved nothing in time: the table-cut bound alone (solvers.bound.table_cut_bound)"
        row.update(status=b.status.value, value_ms=b.value_ms if ok else None, covers=b.covers, time_s=b.time_s,
                   reason=b.reason if not ok else (weak if b.source == "table cuts" else None))
    row["created_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return row


def bound_model(cost_model: str) -> str:
    """The analytic model a leaderboard's bounds are of: the one named, or with `auto` the simulated judge's own (the
    bound bounds the judge's cost of any plan, whatever model the solvers searched with)."""
    return "analytic" if cost_model == "auto" else cost_model


def check_bound_request(backend: str, cost_model: str, time_limit: float) -> None:
    """Bounds are of the analytic model: only for its simulated judge."""
    from costmodels.analytic import AnalyticCostModel
    from costmodels.registry import get_cost_model

    if backend != "sim":
        raise LeaderboardError(f"--bounds: the certified bound is of the analytic model, but the judge here is the {backend!r} "
                               f"backend (measured); use --backend sim")
    if not isinstance(get_cost_model(bound_model(cost_model)), AnalyticCostModel):
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
    from shardopt.core.ir import load_instance

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
