"""`shardopt explain`: why a plan's bottleneck device is the bottleneck, and the best single changes (solvers.explain)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    EXIT_BAD_INPUT,
    CLIError,
    CostModelOpt,
    JsonOpt,
    ModelsOpt,
    _choose_cost_model,
    _console,
    _emit_json,
    _esc,
    _fmt_bytes,
    _guard,
    _load_instance,
    _plan_scope,
    _print_lines,
    _sync_lines,
    _warn,
    app,
)


@app.command("explain")
def explain(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance.", show_default=False)],
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan for it.", show_default=False)],
    cost_model: CostModelOpt = None,
    models: ModelsOpt = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many of the bottleneck's heaviest shards to list.")] = 8,
    changes: Annotated[int, typer.Option("--changes", min=0, help="How many of the best single moves / swaps to list.")] = 5,
    bound: Annotated[bool, typer.Option("--bound/--no-bound", help="Compute the certified bound of the analytic model beside the plan.")] = True,
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.0, help="Seconds the bound's solver may work.")] = 10.0,
    json_out: JsonOpt = False,
) -> None:
    """Why the bottleneck device is the bottleneck: its cost columns, its heaviest shards, how far it is above the mean
    and above the certified bound, and the best single moves or swaps with their predicted effect."""
    with _guard(json_out):
        from costmodels.analytic import AnalyticCostModel
        from shardopt.core.ir import load_plan
        from shardopt.core.plan_check import check_plan
        from shardopt.measure.evaluate import cost_model_label, hash_warning
        from solvers.explain import explain_plan

        instance = _load_instance(instance_path)
        choice = _choose_cost_model(cost_model, instance, models)
        model = choice.model
        plan = load_plan(plan_path)
        warning = hash_warning(instance, plan)
        if warning:
            _warn(f"{plan_path}: {warning}")
        instance, sync = _plan_scope(instance, plan)  # (a 2D plan: its sharding group, and the replica sync beside it)
        if sync is not None and bound:
            _warn("no certified bound beside a 2D plan: the bound per group size is not computed (the group's flat "
                  "instance can be bounded on its own)")
            bound = False
        check = check_plan(instance, plan)
        if not check.ok:
            violations = [v.message for v in check.violations]
            raise CLIError(f"{plan_path}: invalid plan: {len(violations)} violation(s):\n" + "\n".join("  " + v for v in violations[:20]),
                           EXIT_BAD_INPUT, "invalid_plan", extra={"violations": violations})
        label = cost_model_label(model, instance)
        is_analytic = isinstance(model, AnalyticCostModel)
        ex = explain_plan(instance, model, plan, top=top, changes=changes, bound_time_limit=time_limit if bound and is_analytic else None,
                          cost_model_label=label)
        if bound and not is_analytic:
            _warn(f"no certified bound: it is a bound of the analytic model, and the plan is judged by {label}")
        if plan.cost_model and plan.cost_model not in (label, model.describe()):
            _warn(f"the plan was made with {plan.cost_model}; it is explained by {label} (--cost-model to choose)")
        if json_out:
            _emit_json({"instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()},
                        "plan": {"path": str(plan_path), "solver": plan.solver}, "cost_model_choice": choice.to_dict(),
                        "cost_model_card": choice.card_id, **ex.to_dict(),
                        **({"two_d": {**sync.to_dict(), "embedding_ms": ex.plan_cost, "total_ms": ex.plan_cost + sync.ms}}
                           if sync is not None else {})})
            return
        _render(ex, instance, plan_path, plan)
        if sync is not None:
            _print_lines(_console(), _sync_lines(sync, ex.plan_cost, f"predicted by {label}"))


def _render(ex: Any, instance: Any, plan_path: Path, plan: Any) -> None:
    from rich.table import Table

    from costmodels.base import COST_COLUMNS

    console = _console()
    d = ex.bottleneck
    total = ex.plan_cost
    head = [f"plan {plan_path.name} ({plan.solver or '?'}) on {instance.name or 'instance'}, predicted by {ex.cost_model}",
            f"plan cost {total:.3f} ms: device {d} is the bottleneck"
            + (f", {100 * ex.above_runner_up:.1f} % above the next device ({ex.runner_up}, {ex.runner_up_ms:.3f} ms)" if ex.above_runner_up is not None else "")
            + f", {100 * ex.above_mean:.1f} % above the mean device ({ex.mean_ms:.3f} ms)"]
    memory = f"device {d} holds {ex.shards_on_bottleneck} shards in {_fmt_bytes(ex.hbm_used)} of {_fmt_bytes(ex.hbm_capacity)} HBM ({100 * ex.hbm_used / ex.hbm_capacity:.0f} %)"
    if ex.host_capacity:
        memory += f" and {_fmt_bytes(ex.host_used)} of {_fmt_bytes(ex.host_capacity)} host memory"
    head.append(memory)
    b = ex.bound
    if b is not None:
        if b.value_ms is None:
            head.append(b.note)
        else:
            head.append(f"certified lower bound {b.value_ms:.3f} ms ({b.note}): the plan is {100 * b.gap:.2f} % above it"
                        + ("" if b.certified else " (not a certified gap)"))
    _print_lines(console, head)

    cols = Table(title=_esc(f"device {d} against the mean device (ms)"), title_justify="left")
    cols.add_column("")
    for c in COST_COLUMNS:
        cols.add_column(c.replace("_", " "), justify="right")
    cols.add_column("total", justify="right")
    row = ex.columns[d]
    cols.add_row(f"device {d}", *[f"{v:.3f}" for v in row], f"{total:.3f}", style="bold")
    cols.add_row("share", *[f"{100 * v / total:.0f} %" if total > 0 else "-" for v in row], "100 %")
    mean = ex.columns.mean(axis=0)
    cols.add_row("mean device", *[f"{v:.3f}" for v in mean], f"{ex.mean_ms:.3f}")
    console.print(cols)

    heavy = Table(title=_esc(f"heaviest shards on device {d}: what removing each would save there ({len(ex.weights)} of {ex.shards_on_bottleneck})"),
                  title_justify="left")
    for h in ("shard", "placement", "bytes (HBM / host)", "alone ms", "compute ms", "comm ms", "saves ms", "share"):
        heavy.add_column(h, justify="left" if h in ("shard", "placement") else "right")
    for w in ex.weights:
        heavy.add_row(_esc(w.label), w.kind, f"{_fmt_bytes(w.hbm_bytes)} / {_fmt_bytes(w.host_bytes)}", f"{w.alone_ms:.3f}",
                      f"{w.marginal[0] + w.marginal[1]:.3f}", f"{w.marginal[2] + w.marginal[3]:.3f}", f"{w.marginal_ms:.3f}", f"{100 * w.share:.0f} %")
    console.print(heavy)
    lines = [f"shared by all its shards (launches, floors, cache competition; the total minus every shard's saving): {ex.shared_ms:.3f} ms"]
    _print_lines(console, lines)

    if ex.changes:
        ch = Table(title="best single changes (predicted)", title_justify="left")
        for h in ("change", "plan cost ms", "change ms", "%", "bottleneck after"):
            ch.add_column(h, justify="left" if h == "change" else "right")
        for c in ex.changes:
            style = "green" if c.delta_ms < 0 else None
            ch.add_row(_esc(c.text), f"{c.cost_ms:.3f}", f"{c.delta_ms:+.3f}", f"{100 * c.delta_ms / total:+.2f}" if total > 0 else "-",
                       f"device {c.new_bottleneck}", style=style)
        console.print(ch)
    if ex.hints:
        _print_lines(console, ["why, in short:"] + [f"  - {h}" for h in ex.hints])
