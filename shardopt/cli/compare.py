"""`shardopt compare`: several plans of one instance judged together, each against the first, with a paired 95 %
confidence interval on a measured backend ("x % faster" or "indistinguishable")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shardopt.cli.common import (
    EXIT_BAD_INPUT,
    AddressOpt,
    CLIError,
    EngineOpt,
    JsonOpt,
    RepeatsOpt,
    _check_engine_name,
    _console,
    _emit_json,
    _engine,
    _esc,
    _guard,
    _load_instance,
    _print_lines,
    _progress,
    _warn,
    app,
)


@app.command()
def compare(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance.", show_default=False)],
    plan_paths: Annotated[list[Path], typer.Argument(metavar="PLAN.json PLAN.json ...", help="Two or more plans; each is compared with the first.", show_default=False)],
    backend: Annotated[str, typer.Option("--backend", "-b", help="Judge: cpu | cuda (measured, interleaved) | sim (analytic, exact).")] = "cpu",
    repeats: RepeatsOpt = "auto",
    target: Annotated[float, typer.Option("--target", help="With --repeats auto: every plan's CI half-width to reach, as a fraction of its cost.")] = 0.02,
    time_cap: Annotated[float, typer.Option("--time-cap", help="With --repeats auto: stop after this many seconds of timing.")] = 120.0,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed warm-up passes per device.")] = 3,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Index-trace, shuffle and bootstrap seed.")] = 0,
    threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads for the cpu backend (pinned to as many cores).")] = 1,
    comm: Annotated[str, typer.Option("--comm", help="All-to-all: modelled (analytic) | measured (cpu: gloo, one process per device).")] = "modelled",
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Judge plans together and say, for each against the first, how much faster it is (95 % CI) or that they are indistinguishable."""
    with _guard(json_out):
        from shardopt.core.ir import load_plan
        from shardopt.core.plan_check import PlanError
        from shardopt.measure.compare import compare_plans

        if len(plan_paths) < 2:
            raise CLIError(f"compare: give at least 2 plans (got {len(plan_paths)})")
        instance = _load_instance(instance_path)
        if instance.two_d is not None:
            raise CLIError(f"{instance_path}: two_d: a measured compare of 2D plans is not supported (each group size places "
                           "its own flat instance); judge each with `shardopt evaluate`")
        plans = [load_plan(p) for p in plan_paths]
        names = _names(plan_paths, plans)
        judge = dict(repeats=repeats, target=target, time_cap_s=time_cap, warmup=warmup, seed=seed, threads=threads, comm=comm)
        try:
            if engine != "local" and backend != "sim":  # the whole paired session as one task on a cluster worker
                from shardopt.core.plan_check import PlanError as _PlanError
                from shardopt.core.plan_check import check_plan
                from shardopt.measure.engine import run_one, timing_resources

                for name, plan in zip(names, plans):
                    check = check_plan(instance, plan)
                    if not check.ok:
                        raise _PlanError(check.violations, context=name)
                with _engine(engine, address) as eng:
                    report = run_one(eng, compare_plans, instance, plans, names, backend, resources=timing_resources(backend), **judge)
            else:
                _check_engine_name(engine)
                with _progress(f"timing {len(plans)} plans on {backend} (rounds)", enabled=backend != "sim" and not json_out) as tick:
                    report = compare_plans(instance, plans, names, backend, progress=tick, **judge)
        except PlanError as exc:
            raise CLIError(str(exc), EXIT_BAD_INPUT, "invalid_plan", extra={"violations": [v.message for v in exc.violations]}) from None
        for w in report.warnings:
            _warn(w)
        if json_out:
            _emit_json({"instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()},
                        **report.to_dict()})
            return
        _print_report(report, instance.name or instance_path.name)


def _names(paths: list[Path], plans: list) -> list[str]:
    """Each plan's label: its file name, with the solver that made it; made unique when files share a name."""
    names = []
    for path, plan in zip(paths, plans):
        base = path.name + (f" ({plan.solver})" if plan.solver else "")
        name, k = base, 2
        while name in names:
            name, k = f"{base} #{k}", k + 1
        names.append(name)
    return names


def _print_report(report, title: str) -> None:
    from rich.table import Table

    console = _console()
    table = Table(title=_esc(f"{title}: plans judged by {report.judge}"), title_justify="left")
    table.add_column("plan")
    table.add_column("cost ms", justify="right")
    table.add_column("95 % CI ms" if report.backend != "sim" else "interval", justify="right")
    table.add_column("bottleneck", justify="right")
    table.add_column(f"vs {report.plans[0].name}")
    verdicts = {c.other: c for c in report.comparisons}
    for p in report.plans:
        iv = p.interval
        ci = f"[{iv.low:.3f}, {iv.high:.3f}]" if report.backend != "sim" else "exact"
        c = verdicts.get(p.name)
        vs = "reference" if c is None else (
            f"indistinguishable ({c.faster_pct.estimate:+.1f} %, CI [{c.faster_pct.low:+.1f}, {c.faster_pct.high:+.1f}])"
            if c.verdict == "indistinguishable" else
            f"{abs(c.faster_pct.estimate):.1f} % {'faster' if c.faster_pct.estimate > 0 else 'slower'}"
            + ("" if report.backend == "sim" else f" (CI [{c.faster_pct.low:+.1f}, {c.faster_pct.high:+.1f}] %)"))
        table.add_row(_esc(p.name), f"{p.cost_ms:.3f}", ci, str(p.bottleneck), _esc(vs))
    console.print(table)
    lines = [c.sentence() for c in report.comparisons]
    if report.backend != "sim":
        stop = report.stop or {}
        lines.append(f"{report.rounds} interleaved rounds ({report.rule}); stopped: {stop.get('reason')} after {stop.get('elapsed_s')} s")
        m = report.machine or {}
        if m:
            pin = f"pinned to CPU {','.join(map(str, m['pinned_cpus']))}" if m.get("pinned_cpus") else "not pinned"
            lines.append(f"machine {m['host']}: {m['threads']} thread(s), {pin}; load average "
                         f"{(m.get('load_avg_before') or [float('nan')])[0]:.2f} -> {(m.get('load_avg_after') or [float('nan')])[0]:.2f}")
    _print_lines(console, lines)
