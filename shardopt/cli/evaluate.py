"""`shardopt evaluate`: check a plan and judge it (the analytic model, or a measured backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
    _cost_summary,
    _device_table,
    _emit_json,
    _engine,
    _guard,
    _load_instance,
    _plan_scope,
    _print_lines,
    _progress,
    _sync_lines,
    _warn,
    app,
)


@app.command()
def evaluate(
    ctx: typer.Context,
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance.", show_default=False)],
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan for it.", show_default=False)],
    backend: Annotated[str, typer.Option("--backend", "-b", help="Judge: sim (analytic, simulated) | cpu | cuda.")] = "sim",
    repeats: RepeatsOpt = "auto",
    target: Annotated[float, typer.Option("--target", help="With --repeats auto: the CI half-width to reach, as a fraction of the plan cost.")] = 0.02,
    time_cap: Annotated[float, typer.Option("--time-cap", help="With --repeats auto: stop after this many seconds of timing.")] = 120.0,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed warm-up passes per device (measured backends).")] = 3,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Index-trace and shuffle seed (measured backends).")] = 0,
    threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads for the cpu backend (pinned to as many cores).")] = 1,
    comm: Annotated[str, typer.Option("--comm", help="All-to-all: modelled (analytic) | measured (cpu: gloo, one process per device).")] = "modelled",
    batch_size: Annotated[int | None, typer.Option("--batch-size", hidden=True)] = None,
    max_rows: Annotated[int | None, typer.Option("--max-rows", hidden=True)] = None,
    cache: Annotated[
        Path | None, typer.Option("--cache", metavar="FILE.sqlite", help="Measurement cache \\[default: $SHARDOPT_CACHE or ~/.cache/shardopt].")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Time everything again; store nothing.")] = False,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a plan and re-time it on a backend (the judge), per device."""
    with _guard(json_out):
        from shardopt.core.ir import load_plan
        from shardopt.core.plan_check import PlanError
        from shardopt.measure.evaluate import evaluate_plan, hash_warning

        if batch_size is not None or max_rows is not None:
            raise CLIError(
                "--batch-size / --max-rows: the judge times the instance's own workload; make a smaller instance with "
                f"`shardopt scale {instance_path} --batch-size B --max-rows R --out SMALL.json`, solve it and judge that one")
        if backend == "sim":
            ignored = _given(ctx, "repeats", "target", "time_cap", "warmup", "seed", "threads", "comm", "cache", "no_cache")
            if ignored:
                _warn(f"{', '.join(ignored)}: the sim judge computes the analytic model's costs and times nothing: ignored")
        instance = _load_instance(instance_path)
        plan = load_plan(plan_path)
        warning = hash_warning(instance, plan)
        if warning:  # before the check: a plan for another instance usually fails it, and this says why
            _warn(f"{plan_path}: {warning}")
        job = instance
        instance, sync = _plan_scope(instance, plan)  # (a 2D plan: its sharding group, and the replica sync beside it)
        measured = backend in ("cpu", "cuda")
        store: Any = None
        if measured and not no_cache:
            from shardopt.measure.cache import MeasurementCache

            store = MeasurementCache(cache) if cache is not None else None
        try:
            if engine != "local" and measured:  # re-timed on a worker of the cluster (a GPU one for cuda), its own cache
                ev = _evaluate_on_cluster(engine, address, instance, plan, backend, cache, no_cache, repeats=repeats, warmup=warmup,
                                          seed=seed, threads=threads, comm=comm, target=target, time_cap_s=time_cap)
            else:
                if engine != "local":
                    _check_engine_name(engine)
                    _warn(f"--engine {engine}: the {backend} judge runs here (it takes milliseconds)")
                with _progress(f"timing on {backend} (rounds)", enabled=measured and not json_out) as tick:
                    ev = evaluate_plan(
                        instance, plan, backend, repeats=repeats, warmup=warmup, seed=seed, threads=threads, comm=comm,
                        target=target, time_cap_s=time_cap, cache=False if no_cache else store, progress=tick,
                    )
        except PlanError as exc:
            raise CLIError(f"{plan_path}: {exc}", EXIT_BAD_INPUT, "invalid_plan",
                           extra={"violations": [v.message for v in exc.violations]}) from None
        if json_out:
            _emit_json(
                {
                    "instance": {"path": str(instance_path), "name": job.name, "hash": job.content_hash()},
                    "plan": {"path": str(plan_path), "solver": plan.solver, "cost_model": plan.cost_model,
                             "predicted_cost": plan.predicted_cost},
                    **ev.to_dict(),
                    **({"two_d": {**sync.to_dict(), "embedding_ms": ev.costs.max_cost,
                                  "total_ms": ev.costs.max_cost + sync.ms}} if sync is not None else {}),
                }
            )
            return
        console = _console()
        title = f"{plan_path.name} on {instance.name or instance_path.name}, judged by {ev.judge}"
        console.print(_device_table(title, instance, plan.shards, ev.memory_use, ev.costs, None if sync is None else sync.rank_ms))
        lines = _cost_summary(ev.costs, f"judged by {ev.judge}") + _sync_lines(sync, ev.costs.max_cost, ev.judge)
        if measured:
            lines += _measured_lines(ev, warmup)
        if plan.predicted_cost is not None:
            lines.append(
                f"the solver {plan.solver or '?'} predicted {plan.predicted_cost:.3f} ms"
                + (f" with {plan.cost_model}" if plan.cost_model else "")
            )
        _print_lines(console, lines)


def _evaluate_on_cluster(engine: str, address: str | None, instance: Any, plan: Any, backend: str, cache: Any, no_cache: bool, **judge: Any) -> Any:
    """evaluate_plan as one task on the engine's cluster: the plan checked here first (a bad plan is bad input, not a
    failed task); the worker uses its own measurement cache."""
    from shardopt.core.plan_check import PlanError, check_plan
    from shardopt.measure.engine import run_one, timing_resources
    from shardopt.measure.evaluate import evaluate_plan

    check = check_plan(instance, plan)
    if not check.ok:
        raise PlanError(check.violations)
    if cache is not None:
        _warn("--cache: the plan is timed on a cluster worker, which uses its own measurement cache")
    with _engine(engine, address) as eng:
        return run_one(eng, evaluate_plan, instance, plan, backend, resources=timing_resources(backend), cache=False if no_cache else None, **judge)


def _measured_lines(ev: Any, warmup: int) -> list[str]:
    """What a measured judgement rests on: the CI, the rounds and why they stopped, the machine and its load."""
    lines = []
    iv = ev.interval or {}
    if iv and iv.get("high") not in (None, float("inf")):
        lines.append(f"measured plan cost {iv['estimate']:.3f} ms, 95 % CI [{iv['low']:.3f}, {iv['high']:.3f}] "
                     f"(±{100 * iv['relative_half_width']:.1f} %)")
    stop = ev.stop or {}
    cached = sum(1 for t in ev.timings if t and t.get("cached"))
    timed = sum(1 for t in ev.timings if t)
    how = ("from the cache" if stop.get("reason") == "cached"
           else f"{ev.repeats} interleaved rounds after {warmup} warm-ups, stopped: {stop.get('reason')}")
    lines.append(f"compute measured at batch {ev.batch_size} ({how}; {cached} of {timed} devices cached); comm {ev.comm}")
    if ev.machine:
        m = ev.machine
        pin = f"pinned to CPU {','.join(map(str, m['pinned_cpus']))}" if m.get("pinned_cpus") else "not pinned"
        load = m.get("load_avg_before") or [float("nan")]
        after = m.get("load_avg_after") or [float("nan")]
        lines.append(f"machine {m['host']}: {m['threads']} thread(s), {pin}; load average {load[0]:.2f} -> {after[0]:.2f} "
                     f"on {m['cores']} cores")
    return lines


def _given(ctx: typer.Context, *names: str) -> list[str]:
    """The options among `names` the user gave on the command line (not left at their defaults), as --flags."""
    by_name = {p.name: p for p in ctx.command.params}
    out = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if getattr(source, "name", None) == "COMMANDLINE":  # (by name: typer may bring its own click)
            opts = getattr(by_name.get(name), "opts", None) or [f"--{name.replace('_', '-')}"]
            out.append(max(opts, key=len))
    return out
