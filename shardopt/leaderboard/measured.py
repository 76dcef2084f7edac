"""The measured leaderboard: every solver, searching with each cost model, judged on real kernels - all plans of an
instance measured *together*, paired and interleaved - and a report of which ranking survives measurement.

Why the plans of an instance are measured together: on a shared machine a kernel's speed drifts between regimes
that last seconds to tens of seconds (docs/measured.md), so two plans judged in separate sessions differ by the
machine as much as by the plans. One session per instance (shardopt.measure.plan_timing.measure_plans) times every
device of every plan once per round, so each plan's cost comes from the same stretch of time as its rivals'.

Rows go to the `measured` table of the leaderboard store, one per (instance, solver, seed, backend, cost model), with
the solver's own predicted cost beside the measured one and its bootstrap CI. Identical plans (the proxy heuristics
do not read the cost model; two models may agree) are timed once and share their measurement. Resumable: an instance
whose rows are all in the store is skipped; a run killed mid-instance redoes that instance only.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from shardopt.leaderboard.entries import PortfolioEntry, portfolio_entry
from shardopt.leaderboard.store import (
    UNRECORDED_SETTINGS,
    LeaderboardError,
    check_db_path,
    check_time_limit,
    code_version,
    connect,
    rekey_with_settings,
    settings_key,
    settings_label,
)

MEASURED_SCHEMA = """
CREATE TABLE IF NOT EXISTS measured (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    instance_file TEXT NOT NULL,
    instance_hash TEXT NOT NULL,
    solver TEXT NOT NULL,
    cost_model TEXT NOT NULL,
    seed INTEGER NOT NULL,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    solve_time_s REAL,
    predicted_ms REAL,
    measured_ms REAL,
    ci_low_ms REAL,
    ci_high_ms REAL,
    device_ms TEXT,
    plan_key TEXT,
    rounds INTEGER,
    session_s REAL,
    judge TEXT,
    machine TEXT,
    rule TEXT,
    code_version TEXT NOT NULL,
    created_at TEXT NOT NULL,
    settings TEXT NOT NULL,
    UNIQUE (instance_hash, solver, seed, backend, cost_model, settings)
)
"""
MEASURED_COLUMNS = ("suite", "instance_file", "instance_hash", "solver", "cost_model", "seed", "backend", "status",
                    "reason", "solve_time_s", "predicted_ms", "measured_ms", "ci_low_ms", "ci_high_ms", "device_ms",
                    "plan_key", "rounds", "session_s", "judge", "machine", "rule", "code_version", "created_at", "settings")


def open_measured(db: Path) -> Any:
    con = connect(db)
    con.execute(MEASURED_SCHEMA)
    con.commit()
    # rows measured before the settings were keyed did not record their time limit
    rekey_with_settings(con, "measured", MEASURED_SCHEMA, MEASURED_COLUMNS, lambda row: UNRECORDED_SETTINGS)
    return con


@dataclass
class MeasuredSummary:
    instances: int
    skipped: int
    rows: int = 0
    failed: int = 0
    sessions: list[dict[str, Any]] = field(default_factory=list)


def _solve_pair(inst: Any, solver: str, cm: str, seed: int, time_limit: float | None,
                options: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """One (solver, cost model) pair's row (without measurement) and plan (None without one)."""
    from costmodels.auto import model_for
    from solvers.catalog import get_solver

    row: dict[str, Any] = {"solver": solver, "cost_model": cm, "seed": seed}
    start = time.perf_counter()
    try:
        obj = get_solver(solver, **(options or {}))
        obj.prepare()  # (one-time imports: not part of the row's solve time)
        res = obj.solve(inst, model_for(cm, inst), time_limit=time_limit, seed=seed)
    except Exception as exc:  # noqa: BLE001 - a crashing solver is a failed row, never a lost run
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}", solve_time_s=time.perf_counter() - start)
        return row, None
    row.update(status=res.status.value, reason=res.reason, solve_time_s=res.wall_time_s)
    if res.status.has_plan and res.plan is not None:
        row["predicted_ms"] = res.predicted_cost if res.predicted is not None else res.plan.predicted_cost
        return row, res.plan
    return row, None


def models_for(solver: str, cost_models: list[str]) -> list[str]:
    """The cost models a solver is run with: all of them, or only the first for a solver whose plan does not depend on
    the model (its catalog spec says so; it is reported beside every model)."""
    from solvers.catalog import spec_of

    entry = portfolio_entry(solver)
    if (entry.uses_cost_model if entry is not None else spec_of(solver).uses_cost_model):
        return cost_models
    return cost_models[:1]


def _solve_instance(path: Path, solvers: list[str], cost_models: list[str], seed: int, time_limit: float | None,
                    options: dict[str, dict[str, Any]] | None = None) -> tuple[Any, list[dict[str, Any]], list[Any]]:
    """Every (solver, cost model) pair's plan of one instance: the rows (without measurement) and the plans."""
    from shardopt.core.ir import load_instance

    inst = load_instance(path)
    rows, plans = [], []
    for solver in solvers:
        if portfolio_entry(solver) is not None:  # (its rows are drawn from the others': `_portfolio_rows`)
            continue
        for cm in models_for(solver, cost_models):
            row, plan = _solve_pair(inst, solver, cm, seed, time_limit, (options or {}).get(solver))
            rows.append(row)
            plans.append(plan)
    return inst, rows, plans


def _portfolio_rows(entry: PortfolioEntry, inst: Any, rows: list[dict[str, Any]], plans: list[Any],
                    job: InstanceSession) -> tuple[list[dict[str, Any]], list[Any]]:
    """A portfolio entry's row and plan per cost model (`pick`, shardopt.leaderboard.entries): its portfolio's plans
    (reusing the instance's rows of the same pairs) measured in sessions of their own (shardopt.measure.pick: the
    close ones twice), the measured-fastest kept - and then measured again with every other plan of the instance, so
    that its row carries no winner's luck from the session that chose it."""
    from costmodels.auto import model_for
    from shardopt.core.ir import plan_key
    from shardopt.measure.pick import pick_fastest, portfolio_pairs
    from solvers.catalog import DEFAULT_SOLVER, spec_of

    solved = {(r["solver"], r["cost_model"]): (r, p) for r, p in zip(rows, plans)}
    out_rows, out_plans = [], []
    for cm in job.cost_models:
        if (entry.name, cm) in job.have:
            continue
        candidates: dict[str, tuple[str, dict[str, Any], Any]] = {}  # plan key -> (label, row, plan): distinct plans
        spent = 0.0
        for solver, model in portfolio_pairs(entry.portfolio, cm, lambda s: spec_of(s).uses_cost_model):
            if (solver, model) not in solved:
                solved[(solver, model)] = _solve_pair(inst, solver, model, job.seed, job.time_limit, job.solver_options.get(solver))
            r, p = solved[(solver, model)]
            spent += r.get("solve_time_s") or 0.0
            if p is not None:
                candidates.setdefault(plan_key(p), (f"{solver} / {model}", r, p))
        row: dict[str, Any] = {"solver": entry.name, "cost_model": cm, "seed": job.seed}
        if not candidates:
            row.update(status="no_solution", reason="no solver of the portfolio found a plan", solve_time_s=spent)
            out_rows.append(row)
            out_plans.append(None)
            continue
        keys = list(candidates)
        session_s = 0.0
        if len(keys) == 1:
            best, how = keys[0], "one distinct plan"
        else:  # sessions of their own (seed + 1: not the leaderboard session's order)
            started = time.perf_counter()
            default = solved.get((DEFAULT_SOLVER, cm), (None, None))[1]  # the default solve's plan: kept in a near-tie
            prefer = keys.index(plan_key(default)) if default is not None else None
            outcome = pick_fastest(inst, [candidates[k][2] for k in keys], [candidates[k][0] for k in keys],
                                   job.backend, seed=job.seed + 1, rule=job.rule, prefer=prefer)
            session_s = time.perf_counter() - started
            best, how = keys[outcome.winner], outcome.how()
        label, _, plan = candidates[best]
        row.update(status="feasible", reason=f"picked {label}: {how}", solve_time_s=spent + session_s,
                   predicted_ms=float(model_for(cm, inst).plan_costs(inst, plan).max_cost))
        out_rows.append(row)
        out_plans.append(plan)
    return out_rows, out_plans


@dataclass(frozen=True)
class InstanceSession:
    """One instance's work for the measured leaderboard: solve with every (solver, cost model) not yet stored and
    time the distinct plans together. A task of its own (picklable) so an engine can run it anywhere."""

    suite: str
    path: str
    instance_hash: str
    solvers: tuple[str, ...]
    cost_models: tuple[str, ...]
    have: frozenset[tuple[str, str]]  # (solver, cost model) pairs already in the store
    backend: str
    seed: int
    time_limit: float | None
    rule: Any  # shardopt.measure.confidence.StopRule
    options: str = "{}"  # per solver, its options that differ from the defaults (JSON; solver_options_key)

    @property
    def solver_options(self) -> dict[str, dict[str, Any]]:
        return json.loads(self.options)

    @property
    def settings(self) -> str:
        return settings_key(self.time_limit, self.rule.key(), self.solver_options)


def measure_instance(job: InstanceSession) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The rows of one instance (each with its measurement, or its failure) and the timing session's summary."""
    from shardopt.core.ir import plan_key
    from shardopt.measure.backends.base import kernel_label
    from shardopt.measure.plan_timing import measure_plans

    path = Path(job.path)
    inst, rows, plans = _solve_instance(path, list(job.solvers), list(job.cost_models), job.seed, job.time_limit, job.solver_options)
    for entry in filter(None, map(portfolio_entry, job.solvers)):
        picked_rows, picked_plans = _portfolio_rows(entry, inst, rows, plans, job)
        rows, plans = rows + picked_rows, plans + picked_plans
    keep = [(r, p) for r, p in zip(rows, plans) if (r["solver"], r["cost_model"]) not in job.have]
    distinct: dict[str, Any] = {}
    for r, p in keep:
        if p is not None:
            r["plan_key"] = plan_key(p)
            distinct.setdefault(r["plan_key"], p)
    keys = list(distinct)
    started = time.perf_counter()
    session = None
    by_key: dict[str, dict[str, Any]] = {}
    if keys:
        m, comms = measure_plans(inst, [distinct[k] for k in keys], job.backend, job.rule, seed=job.seed)
        session = {"instance": path.name, "plans": len(keys), "rounds": m.stop.rounds,
                   "stop": m.stop.reason, "seconds": round(time.perf_counter() - started, 2)}
        profile = inst.topology.hardware
        kernels = sorted({kernel_label(lab) for labels in m.labels for lab in labels if lab})
        judge = (f"{'; '.join(kernels)} on {m.hardware}, measured compute (all plans of the instance "
                 f"interleaved); all-to-all modelled (analytic, {profile} profile)")
        for k, ps, iv in zip(keys, m.samples, m.intervals):
            f, b = ps.device_medians()
            by_key[k] = dict(measured_ms=ps.plan_cost(), ci_low_ms=iv.low, ci_high_ms=iv.high,
                             device_ms=json.dumps((f + b + ps.fixed_ms).round(4).tolist()), rounds=m.stop.rounds,
                             session_s=session["seconds"], judge=judge,
                             machine=json.dumps(m.machine.to_dict()) if m.machine else None, rule=job.rule.describe())
    out = []
    for r, p in keep:
        if p is not None:
            r.update(by_key[r["plan_key"]])
        r.update(suite=job.suite, instance_file=path.name, instance_hash=job.instance_hash, backend=job.backend,
                 settings=job.settings, code_version=code_version(), created_at=datetime.now(UTC).isoformat(timespec="seconds"))
        out.append(r)
    return out, session


def run_measured_leaderboard(
    suite_dir: Path,
    solvers: list[str],
    cost_models: list[str],
    db: Path,
    *,
    backend: str = "cpu",
    seed: int = 0,
    time_limit: float | None = 5.0,
    repeats: int | str = "auto",
    target: float = 0.02,
    time_cap_s: float = 120.0,
    engine: Any = None,
    progress: Callable[[int, int], None] | None = None,
    solver_options: dict[str, dict[str, Any]] | None = None,
) -> MeasuredSummary:
    """Solve every instance of `suite_dir` with every (solver, cost model) and measure its plans together: one task
    per instance (`measure_instance`) on `engine` (default: in this process, one instance at a time; on a Ray cluster
    each instance's session on a worker of its own, with a GPU for the cuda backend), its rows written here, one
    instance committed at a time, as the sessions finish."""
    from costmodels.auto import check_cost_model_name
    from shardopt.core.ir import load_instance
    from shardopt.leaderboard.run import solver_options_key, suite_files
    from shardopt.measure.engine import LocalEngine, results, timing_resources
    from shardopt.measure.evaluate import MEASURED_BACKENDS, stop_rule
    from solvers.catalog import spec_of

    check_db_path(db)
    if backend not in MEASURED_BACKENDS:
        raise LeaderboardError(f"--backend: {backend!r} is not a measured backend ({', '.join(MEASURED_BACKENDS)})")
    if not solvers or not cost_models:
        raise LeaderboardError("--solvers / --cost-model: name at least one of each")
    for s in solvers:
        if portfolio_entry(s) is None:
            spec_of(s)  # (UnknownSolverError for a name the catalog does not have)
    for cm in cost_models:
        check_cost_model_name(cm)
    check_time_limit(time_limit)
    rule = stop_rule(repeats, target, time_cap_s)
    options = solver_options_key(solvers, solver_options)
    settings = settings_key(time_limit, rule.key(), options)
    if engine is None or isinstance(engine, LocalEngine):
        engine = LocalEngine(1)  # never time a plan beside other work on this machine
        if backend == "cuda":  # judged here: refuse before solving anything or creating the store
            from shardopt.measure.backends.cuda import cuda_unavailable
            from shardopt.measure.evaluate import BackendUnavailableError

            why = cuda_unavailable()
            if why is not None:
                raise BackendUnavailableError(backend, why)
    files = suite_files(suite_dir)
    suite = Path(suite_dir).resolve().name
    con = open_measured(db)
    summary = MeasuredSummary(instances=len(files), skipped=0)
    try:
        jobs: list[InstanceSession] = []
        for path in files:
            h = load_instance(path).content_hash()
            have = {(r[0], r[1]) for r in con.execute(
                "SELECT solver, cost_model FROM measured WHERE instance_hash = ? AND seed = ? AND backend = ? AND settings = ?",
                (h, seed, backend, settings))}
            wanted = {(s, cm) for s in solvers for cm in models_for(s, cost_models)}
            if wanted <= have:
                summary.skipped += 1
                continue
            todo = tuple(s for s in solvers if any((s, cm) not in have for cm in cost_models))
            jobs.append(InstanceSession(suite, str(path), h, todo, tuple(cost_models), frozenset(have), backend, seed, time_limit, rule,
                                        json.dumps(options, sort_keys=True)))
        if progress:
            progress(summary.skipped, len(files))
        with results(engine, measure_instance, jobs, resources=timing_resources(backend)) as sessions:
            for n, (_, (rows, session)) in enumerate(sessions):
                if session is not None:
                    summary.sessions.append(session)
                for r in rows:
                    con.execute(f"INSERT OR REPLACE INTO measured ({', '.join(MEASURED_COLUMNS)}) VALUES "
                                f"({', '.join('?' for _ in MEASURED_COLUMNS)})", [r.get(c) for c in MEASURED_COLUMNS])
                    summary.rows += 1
                    summary.failed += r.get("measured_ms") is None
                con.commit()  # one instance at a time: a killed run redoes at most the instances in flight
                if progress:
                    progress(summary.skipped + n + 1, len(files))
    finally:
        con.close()
    return summary


# ---------------------------------------------------------------------------------------------------------------
# the report


def load_measured(db: Path) -> list[dict[str, Any]]:
    check_db_path(db, must_exist=True)
    con = open_measured(db)
    try:
        cur = con.execute(f"SELECT {', '.join(MEASURED_COLUMNS)} FROM measured ORDER BY suite, instance_file, solver, cost_model")
        return [dict(zip(MEASURED_COLUMNS, r)) for r in cur.fetchall()]
    finally:
        con.close()


def _kendall(x: list[float], y: list[float]) -> float | None:
    from scipy.stats import kendalltau

    if len(x) < 3:
        return None
    tau = kendalltau(x, y)[0]
    return None if tau is None or math.isnan(tau) else float(tau)


def _spearman(x: list[float], y: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3:
        return None
    rho = spearmanr(x, y)[0]
    return None if rho is None or math.isnan(rho) else float(rho)


@dataclass
class Entry:
    """One (solver, cost model): mean costs over the instances every entry of its group measured (the report's
    `common`), so that they compare; ratios, CI widths and wins over the entry's own measured instances."""

    solver: str
    cost_model: str
    mean_measured_ms: float  # over the common instances (nan when there are none)
    mean_predicted_ms: float | None  # over the common instances
    measured_ratio: float  # geometric mean over instances of measured / best measured of that instance
    ratio_low: float  # bootstrap over instances, 95 %
    ratio_high: float
    predicted_ratio: float | None  # same, of the solver's own predictions within its cost model
    mean_ci_pct: float
    wins: int
    failed: int


@dataclass
class MeasuredReport:
    suite: str
    backend: str
    instances: int
    entries: list[Entry]
    tau_rows: dict[str, float | None]  # per cost model: Kendall tau of predicted vs measured over all its rows
    rho_rows: dict[str, float | None]  # per cost model: Spearman rho of the same
    tau_within: dict[str, float | None]  # per cost model: mean over instances of the within-instance tau
    ranking_tau: dict[str, float | None]  # per cost model: tau between solver rankings, predicted vs measured
    rows: list[dict[str, Any]]
    judge: str
    machine: str
    common: int = 0  # instances every (solver, cost model) entry measured: the mean columns' instances
    ranking_predicted: dict[str, list[str]] = field(default_factory=dict)  # per cost model: solvers, best first
    ranking_measured: dict[str, list[str]] = field(default_factory=dict)
    # per cost model: the plan-level error of its predictions, {"n", "mape", "bias"} (mean of (predicted -
    # measured) / measured): meaningful where the model predicts the judge's own milliseconds (a calibrated model)
    plan_error: dict[str, dict[str, float]] = field(default_factory=dict)
    dates: tuple[str, str] = ("", "")  # the first and last row's created_at (UTC)
    settings: str = ""  # the run settings of its rows, in words (store.settings_label)


def build_measured_reports(rows: list[dict[str, Any]]) -> list[MeasuredReport]:
    """One report per suite, backend and settings: plans are ranked against the other plans of their instance
    measured under the same settings (a re-run with another time limit is a section of its own)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["suite"], r["backend"], r.get("settings") or UNRECORDED_SETTINGS), []).append(r)
    reports = []
    for (suite, backend, settings), rs in sorted(groups.items()):
        rep = _report(suite, backend, rs)
        rep.settings = settings_label(settings)
        reports.append(rep)
    return reports


def _geo(xs: list[float]) -> float:
    return float(math.exp(statistics.fmean(math.log(x) for x in xs)))


def _report(suite: str, backend: str, rows: list[dict[str, Any]]) -> MeasuredReport:
    ok = [r for r in rows if r["measured_ms"] is not None]
    instances = sorted({r["instance_file"] for r in rows})
    best = {i: min(r["measured_ms"] for r in ok if r["instance_file"] == i) for i in instances if any(r["instance_file"] == i for r in ok)}
    models = sorted({r["cost_model"] for r in rows})
    pairs = sorted({(r["solver"], r["cost_model"]) for r in rows})
    measured_at = {(r["solver"], r["cost_model"], r["instance_file"]): r for r in ok}
    # an entry that measured nothing (a solver that refused every instance) says so in its own row; it must not
    # empty the mean columns of all the others
    present = [(s, cm) for s, cm in pairs if any((s, cm, i) in measured_at for i in instances)]
    common = [i for i in instances if all((s, cm, i) in measured_at for s, cm in present)]
    rng = np.random.default_rng(0)
    entries = []
    for solver, cm in pairs:
        mine = {r["instance_file"]: r for r in rows if r["solver"] == solver and r["cost_model"] == cm}
        good = [r for r in mine.values() if r["measured_ms"] is not None and r["instance_file"] in best]
        shared = [measured_at[(solver, cm, i)] for i in common if (solver, cm, i) in measured_at]
        shared_pred = [r["predicted_ms"] for r in shared if r["predicted_ms"] is not None]
        if not good:
            entries.append(Entry(solver, cm, math.nan, None, math.nan, math.nan, math.nan, None, math.nan, 0, len(mine)))
            continue
        ratios = np.array([r["measured_ms"] / best[r["instance_file"]] for r in good])
        boot = [float(np.exp(np.log(ratios[rng.integers(0, len(ratios), len(ratios))]).mean())) for _ in range(1000)]
        pred_best = {}
        for r in rows:
            if r["cost_model"] == cm and r["predicted_ms"] is not None:
                pred_best[r["instance_file"]] = min(pred_best.get(r["instance_file"], math.inf), r["predicted_ms"])
        pr = [r["predicted_ms"] / pred_best[r["instance_file"]] for r in good if r["predicted_ms"] and pred_best.get(r["instance_file"])]
        entries.append(Entry(
            solver, cm, statistics.fmean(r["measured_ms"] for r in shared) if shared else math.nan,
            statistics.fmean(shared_pred) if shared and len(shared_pred) == len(shared) else None,
            _geo(list(ratios)), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)),
            _geo(pr) if pr else None,
            100 * statistics.fmean((r["ci_high_ms"] - r["ci_low_ms"]) / 2 / r["measured_ms"] for r in good),
            sum(1 for r in good if r["measured_ms"] <= best[r["instance_file"]] * (1 + 1e-9)),
            len(mine) - len(good),
        ))
    tau_rows, rho_rows, tau_within, ranking_tau = {}, {}, {}, {}
    ranking_predicted, ranking_measured = {}, {}
    plan_error: dict[str, dict[str, float]] = {}
    for cm in models:
        # the model-free solvers' predictions were made with the first model; count them under that one only
        mine = [r for r in ok if r["cost_model"] == cm and r["predicted_ms"] is not None]
        tau_rows[cm] = _kendall([r["predicted_ms"] for r in mine], [r["measured_ms"] for r in mine])
        rel = [(r["predicted_ms"] - r["measured_ms"]) / r["measured_ms"] for r in mine if r["measured_ms"] > 0]
        if rel:
            plan_error[cm] = {"n": len(rel), "mape": statistics.fmean(abs(x) for x in rel), "bias": statistics.fmean(rel)}
        rho_rows[cm] = _spearman([r["predicted_ms"] for r in mine], [r["measured_ms"] for r in mine])
        within = []
        for i in instances:
            ri = [r for r in mine if r["instance_file"] == i]
            t = _kendall([r["predicted_ms"] for r in ri], [r["measured_ms"] for r in ri])
            if t is not None:
                within.append(t)
        tau_within[cm] = statistics.fmean(within) if within else None
        es = [e for e in entries if e.cost_model == cm and e.predicted_ratio is not None and not math.isnan(e.measured_ratio)]
        ranking_tau[cm] = _kendall([e.predicted_ratio for e in es], [e.measured_ratio for e in es])
        ranking_predicted[cm] = [e.solver for e in sorted(es, key=lambda e: (e.predicted_ratio, e.solver))]
        ranking_measured[cm] = [e.solver for e in sorted(es, key=lambda e: (e.measured_ratio, e.solver))]
    judge = next((r["judge"] for r in ok if r["judge"]), "")
    machine = ""
    m = next((r["machine"] for r in ok if r["machine"]), None)
    if m:
        md = json.loads(m)
        machine = f"{md['host']} ({md['processor']}, {md['cores']} cores; {md['threads']} timing thread, pinned to CPU {md['pinned_cpus']})"
    stamps = sorted(str(r["created_at"]) for r in rows if r.get("created_at"))
    return MeasuredReport(suite, backend, len(instances), entries, tau_rows, rho_rows, tau_within, ranking_tau, rows, judge,
                          machine, len(common), ranking_predicted, ranking_measured, plan_error,
                          (stamps[0], stamps[-1]) if stamps else ("", ""))


def _dates(dates: tuple[str, str]) -> str:
    first, last = (d.replace("T", " ").split("+")[0] for d in dates)
    if not first:
        return "at an unrecorded date"
    return f"{first} UTC" if first[:10] == last[:10] and first == last else f"{first} to {last} UTC"


def _f(x: float | None, d: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def measured_markdown(reports: list[MeasuredReport], command: str = "") -> str:
    out = ["# Measured leaderboard", ""]
    if command:
        out += [f"Made by: `{command}`", ""]
    for rep in reports:
        sessions = {r["instance_file"]: (r["rounds"], r["session_s"]) for r in rep.rows if r["rounds"]}
        out += [f"## {rep.suite}, judged on {rep.backend}", "",
                f"Settings: {rep.settings or 'not given'}. Judge: {rep.judge}. Machine: {rep.machine}. Measured {_dates(rep.dates)}. {rep.instances} instances; each instance's plans were "
                f"measured together in one interleaved session ({min(s[0] for s in sessions.values()) if sessions else 0}-"
                f"{max(s[0] for s in sessions.values()) if sessions else 0} rounds, "
                f"{sum(s[1] for s in sessions.values()):.0f} s of timing in all). Measured costs are **{rep.backend}** "
                f"milliseconds; predicted costs are each cost model's own (the analytic v100 profile predicts GPU "
                f"microseconds, so compare ranks, not values). Mean measured and predicted ms are over the "
                f"{rep.common} instances every (solver, cost model) measured; ratios, CI half-widths and wins over each "
                f"entry's own measured instances; failed = no plan, never dropped silently.", "",
                "| solver | cost model | measured ratio to best (geo mean, 95 % CI over instances) | mean measured ms | mean CI half-width | wins | failed | predicted ratio to best | mean predicted ms |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for e in sorted(rep.entries, key=lambda e: (e.cost_model, e.measured_ratio if not math.isnan(e.measured_ratio) else 1e9)):
            out.append(f"| {e.solver} | {e.cost_model} | {_f(e.measured_ratio)} [{_f(e.ratio_low)}, {_f(e.ratio_high)}] | "
                       f"{_f(e.mean_measured_ms, 2)} | {_f(e.mean_ci_pct, 1)} % | {e.wins} | {e.failed} | "
                       f"{_f(e.predicted_ratio)} | {_f(e.mean_predicted_ms, 4)} |")
        out += ["", "Does the prediction survive measurement? (rank correlations, 1 = the same order; plan-level error "
                "of the predicted plan cost against the measured one, meaningful for a model of this judge's milliseconds)", "",
                "| cost model | Kendall tau, predicted vs measured plan cost, all rows | Spearman rho, all rows | Kendall tau within an instance (mean) | Kendall tau, solver ranking predicted vs measured | plan-level MAPE | mean signed error |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for cm in sorted(rep.tau_rows):
            err = rep.plan_error.get(cm)
            mape = f"{100 * err['mape']:.1f} %" if err else "-"
            bias = f"{100 * err['bias']:+.1f} %" if err else "-"
            out.append(f"| {cm} | {_f(rep.tau_rows[cm])} | {_f(rep.rho_rows.get(cm))} | {_f(rep.tau_within[cm])} | "
                       f"{_f(rep.ranking_tau[cm])} | {mape} | {bias} |")
        out += ["", "Which ranking survives: solvers by predicted ratio to best (the cost model's own view) and by "
                "measured ratio to best, best first", "",
                "| cost model | ranked by prediction | ranked by measurement |", "| --- | --- | --- |"]
        for cm in sorted(rep.ranking_predicted):
            out.append(f"| {cm} | {' < '.join(rep.ranking_predicted[cm]) or '-'} | {' < '.join(rep.ranking_measured[cm]) or '-'} |")
        out.append("")
    return "\n".join(out) + "\n"


def measured_plots(rep: MeasuredReport) -> list[str]:
    """Inline SVGs: measured ratio to best per solver and cost model (with CIs), and predicted vs measured."""
    from shardopt.leaderboard.figures import pyplot, readable_log_axis, svg

    plt = pyplot()
    models = sorted({e.cost_model for e in rep.entries})
    solvers = sorted({e.solver for e in rep.entries}, key=lambda s: min(
        (e.measured_ratio for e in rep.entries if e.solver == s and not math.isnan(e.measured_ratio)), default=1e9))
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(solvers) * max(1, len(models)) / 2 + 3), 4))
    width = 0.8 / max(1, len(models))
    for j, cm in enumerate(models):
        xs, ys, lo, hi = [], [], [], []
        for i, s in enumerate(solvers):
            e = next((e for e in rep.entries if e.solver == s and e.cost_model == cm), None)
            if e is None or math.isnan(e.measured_ratio):
                continue
            xs.append(i + (j - (len(models) - 1) / 2) * width)
            ys.append(e.measured_ratio)
            lo.append(e.measured_ratio - e.ratio_low)
            hi.append(e.ratio_high - e.measured_ratio)
        ax.bar(xs, ys, width=width, yerr=[lo, hi], capsize=2, label=cm)
    ax.set_xticks(range(len(solvers)), solvers, rotation=45, ha="right")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel(f"measured cost / best of the instance ({rep.backend})")
    ax.set_title(f"{rep.suite}: measured ratio to the best plan (geometric mean, 95 % CI over instances)")
    ax.legend(fontsize=8)
    bars = svg(fig)

    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.8), squeeze=False)
    cmap = plt.get_cmap("tab20")
    colour = {s: cmap(i % 20) for i, s in enumerate(solvers)}
    for ax, cm in zip(axes[0], models):
        for s in solvers:
            pts = [(r["predicted_ms"], r["measured_ms"]) for r in rep.rows
                   if r["solver"] == s and r["cost_model"] == cm and r["predicted_ms"] and r["measured_ms"]]
            if pts:
                ax.scatter(*zip(*pts), s=12, color=colour[s], label=s)
        ax.set_xscale("log")
        ax.set_yscale("log")
        readable_log_axis(ax.xaxis)
        readable_log_axis(ax.yaxis)
        ax.set_xlabel(f"predicted by {cm} (ms)")
        ax.set_ylabel(f"measured on {rep.backend} (ms)")
        ax.set_title(f"{cm}: tau {_f(rep.tau_rows.get(cm), 2)}, rho {_f(rep.rho_rows.get(cm), 2)}", fontsize=9)
    handles: dict[str, Any] = {}  # one legend for every panel: a solver plotted in one panel only is named too
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    ordered = [s for s in solvers if s in handles]
    fig.legend([handles[s] for s in ordered], ordered, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    scatter = svg(fig)
    return [bars, scatter]


def measured_html(reports: list[MeasuredReport], command: str = "") -> str:
    import html

    from shardopt.leaderboard.markdown_html import markdown_html

    body = ["<!doctype html><html><head><meta charset='utf-8'><title>Measured leaderboard</title>",
            "<style>body{font-family:sans-serif;max-width:1280px;margin:auto;padding:0 1em}"
            "table{border-collapse:collapse;font-size:13px;margin:0.6em 0}td,th{border:1px solid #ccc;padding:3px 6px}"
            "th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}"
            "figure{margin:1em 0}svg{max-width:100%;height:auto}</style></head><body>",
            "<h1>Measured leaderboard</h1>"]
    if command:
        body.append(f"<p>Made by: <code>{html.escape(command)}</code></p>")
    for rep in reports:
        md = measured_markdown([rep])
        # (measured_markdown's own page title and command line are this page's already)
        md = "\n".join(line for line in md.splitlines() if not line.startswith("# ") and not line.startswith("Made by:"))
        body.append(markdown_html(md))
        body += [f"<figure>{svg}</figure>" for svg in measured_plots(rep)]
    body.append("</body></html>")
    return "\n".join(body) + "\n"


def write_measured_report(reports: list[MeasuredReport], out_dir: Path, command: str = "",
                          stem: str = "measured-leaderboard") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, page = out_dir / f"{stem}.md", out_dir / f"{stem}.html"
    md.write_text(measured_markdown(reports, command))
    page.write_text(measured_html(reports, command))
    return [md, page]
