"""`shardopt bound`: a certified lower bound of the analytic cost model over the plans it covers (table-, column-,
row-wise and replicated shards, in HBM or host memory: solvers.bound), and, with --plan, how far a plan can at most
be from the best such plan."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_INFEASIBLE,
    CLIError,
    JsonOpt,
    ModelsOpt,
    _choose_cost_model,
    _console,
    _cost_model,
    _emit_json,
    _err,
    _guard,
    _load_instance,
    _print_lines,
    _warn,
    app,
)


def _analytic_model(name: str | None, instance: Any, models: Path | None = None) -> Any:
    """The analytic cost model the bound is computed under (its inequalities are proven for the analytic formulas
    only): `analytic` / `analytic:PROFILE`; `auto` or a calibrated model's name resolve through its card, and a
    measured (neural) model's card lends its refitted analytic profile, with a note that the bound is of that
    profile's costs, not the neural model's. Exit 2 naming the value where no analytic model stands behind the name."""
    from costmodels.analytic import AnalyticCostModel

    if name is None or name == "analytic" or name.startswith("analytic:"):
        return _cost_model(name)
    choice = _choose_cost_model(name, instance, models)
    if isinstance(choice.model, AnalyticCostModel):
        return choice.model
    card = choice.card
    if card is not None and "analytic" in card.models:
        _err(f"the certified bound is for analytic models only: {name!r} resolved to {card.id}'s neural model; bounding "
             f"under its refitted profile ({card.id}/analytic): a bound of that profile's plan costs, not of the neural "
             "model's", style="cyan", prefix="note")
        return _cost_model(card.cost_model_name("analytic"))
    raise CLIError(
        f"--cost-model {name!r}: the certified bound is for the analytic cost model only (analytic, analytic:PROFILE, "
        "or a calibrated model's ID/analytic)",
        EXIT_BAD_INPUT,
        "unsupported_cost_model",
    )


def _plan_doc(instance: Any, plan_path: Path, model: Any, bound: Any) -> tuple[dict[str, Any], list[str]]:
    """The plan's analytic cost and its gap to the bound, and warnings when the bound does not cover the plan."""
    from shardopt.core.ir import load_plan
    from shardopt.core.plan_check import check_plan
    from shardopt.measure.evaluate import hash_warning
    from solvers.bound import plan_gap, uncovered_reason

    plan = load_plan(plan_path)
    warnings: list[str] = []
    hw = hash_warning(instance, plan)
    if hw:
        warnings.append(f"{plan_path}: {hw}")
    check = check_plan(instance, plan)
    if not check.ok:
        raise CLIError(f"{plan_path}: invalid plan: " + "; ".join(v.message for v in check.violations[:5]), EXIT_BAD_INPUT,
                       "invalid_plan", extra={"violations": [v.message for v in check.violations]})
    why = uncovered_reason(plan.shards, bound.table_wise, bound)
    if why is not None:
        warnings.append(f"{plan_path}: {why}: its gap is not certified")
    cost = model.plan_costs(instance, plan).max_cost
    doc = {"path": str(plan_path), "solver": plan.solver, "cost_ms": cost, "gap": plan_gap(instance, cost, bound),
           "covered": not warnings or all("content hash" in w for w in warnings)}
    return doc, warnings


@app.command("bound")
def bound(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance.", show_default=False)],
    cost_model: Annotated[
        str | None,
        typer.Option("--cost-model", "-c", help="analytic, analytic:PROFILE, auto or a calibrated model (its analytic profile) \\[default: analytic, the topology's profile].", show_default=False),
    ] = None,
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.0, help="Seconds HiGHS may work; its dual bound then is the bound.")] = 10.0,
    table_wise: Annotated[bool, typer.Option("--table-wise", help="Bound table-wise plans only (tighter, covers fewer plans).")] = False,
    plan_path: Annotated[Path | None, typer.Option("--plan", metavar="PLAN.json", help="Also print this plan's cost and its gap to the bound.")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="PLAN.json", help="Write the plan the relaxation's best solution describes (a real plan).")
    ] = None,
    models: ModelsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """A certified lower bound of the analytic plan cost: no plan of table-, column-, row-wise or replicated shards costs less."""
    with _guard(json_out):
        from shardopt.measure.evaluate import cost_model_label
        from solvers.bound import BoundError, analytic_lower_bound

        instance = _load_instance(instance_path)
        model = _analytic_model(cost_model, instance, models)
        if instance.two_d is not None:
            if out is not None:
                _warn(f"--out {out}: not written for a 2D instance (one relaxation plan per group size)")
            _two_d_bound(instance, instance_path, model, time_limit, table_wise, plan_path, json_out)
            return
        try:
            result = analytic_lower_bound(instance, model, time_limit=time_limit, table_wise=table_wise)
        except BoundError as exc:
            raise CLIError(str(exc), EXIT_BAD_INPUT, "unsupported_cost_model") from None
        label = cost_model_label(model, instance)
        head = {"instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()}, "cost_model": label}
        if not result.status.proves_bound:
            what = "table-wise HBM" if table_wise else "table- or column-wise HBM"
            raise CLIError(f"no {what} plan fits in memory: {result.reason}", EXIT_INFEASIBLE, "infeasible",
                           extra={**head, "bound": result.to_dict()})
        plan_doc, warnings = _plan_doc(instance, plan_path, model, result) if plan_path is not None else (None, [])
        if out is not None:
            if result.plan is None:
                warnings.append(f"{out} not written: the relaxation found no solution in time")
            else:
                from shardopt.core.ir import save

                try:
                    save(result.plan.model_copy(update={"predicted_cost": result.plan_cost_ms, "lower_bound": result.value_ms}), out)
                except OSError as exc:
                    raise CLIError(f"{out}: cannot write the plan ({exc.strerror or exc})") from None
        for w in warnings:
            _warn(w)
        if json_out:
            _emit_json({**head, "bound": result.to_dict(), "plan": plan_doc, "out": str(out) if out is not None and result.plan else None})
            return
        lines = _human_lines(result, label, time_limit, plan_doc)
        if out is not None and result.plan is not None:
            lines.append(f"the relaxation's plan written to {out}")
        _print_lines(_console(), lines)


def _human_lines(result: Any, label: str, time_limit: float, plan_doc: dict[str, Any] | None) -> list[str]:
    from solvers.status import BoundStatus

    how = {
        BoundStatus.optimal: f"the relaxation solved (HiGHS gap <= {1e-4:g}); the bound is its dual bound",
        BoundStatus.bound: f"HiGHS's dual bound when the {time_limit:g} s limit came; a bound, not the relaxation's optimum",
    }[result.status]
    if result.source == "symmetric LP":
        how = ("the relaxation's LP bound, solved with every device's variables equal (the devices are interchangeable, "
               f"so that is the same bound: docs/analytic-bound.md); {result.solver_message}")
    elif result.source == "per-kind LP":
        how = ("the LP relaxation with each device on its own hardware kind, one copy of the device variables per class of "
               "devices (kind, HBM, host memory): docs/analytic-bound.md, \"the per-kind LP\"")
    elif result.source == "class LP":
        how = ("the LP relaxation with one copy of the device variables per class of devices (HBM, host memory): the devices "
               "differ in memory, host by host, and the pairs are too many to branch on (docs/analytic-bound.md, \"the per-kind LP\")")
    elif result.source == "table cuts":
        how = (f"HiGHS proved nothing within the {time_limit:g} s limit, so this is the bound that "
               "needs no solver: every table lies on some devices, one of which then costs at least this (valid, but weak "
               "unless one table dominates; a longer --time-limit gives the relaxation's bound)")
    lines = [
        f"certified lower bound {result.value_ms:.4f} ms of the plan cost under {label}: {how}",
        f"covers {result.covers}",
        (f"relaxation: {result.variables:,} variables ({result.integer_variables:,} integer), {result.rows:,} rows, "
         f"{result.multipliers} cache multipliers per device; {result.time_s:.2f} s") if result.variables else
        f"relaxation: not built whole; {result.multipliers} cache multipliers per device; {result.time_s:.2f} s",
    ]
    if result.constraints_counted is not None:
        counted = "counted" if result.constraints_counted else "not counted (a bound of every plan, so of the constrained ones too)"
        lines.insert(2, f"the instance's placement constraints: {counted}")
    if result.plan_classes:
        lines.insert(2, _plan_classes_line(result.plan_classes, result.plan_classes_by_rows))
    if result.relaxation_primal_ms is not None:
        lines.append(f"best solution of the relaxation found {result.relaxation_primal_ms:.4f} ms (the relaxation's optimum lies between it and the bound)")
    if result.plan_cost_ms is not None:
        gap = (result.plan_cost_ms - result.value_ms) / result.plan_cost_ms if result.plan_cost_ms > 0 else 0.0
        lines.append(f"that solution describes a real plan ({len(result.plan.shards)} shards; --out saves it): analytic cost "
                     f"{result.plan_cost_ms:.4f} ms, gap (cost - bound) / cost {100 * gap:.2f} %")
    if plan_doc is not None:
        lines.append(
            f"plan {plan_doc['path']} ({plan_doc['solver'] or '?'}): cost {plan_doc['cost_ms']:.4f} ms, gap (cost - bound) / cost "
            f"{100 * plan_doc['gap']:.2f} %" + ("" if plan_doc["covered"] else " (not certified: see the warning)")
        )
    return lines


_CLASS_WORDS = {"table_wise": "table-wise tables only", "mixed": "table- and column-wise tables", "column_wise": "column-wise tables only",
                "rows_and_replicas": "replicas and row splits only"}
_ROW_WORDS = {"none": "no row split", "over_devices": "a row split over devices", "within_hosts": "row splits within hosts"}


def _plan_classes_line(classes: dict[str, float | None], by_rows: dict[str, dict[str, float]]) -> str:
    """One line of the plan classes' bounds (`classes_lp_bound`), the refined ones with their row classes: which kind
    of plan the bound is tight for, and how far above it the others are."""

    def ms(v: float | None) -> str:
        return "not solved in time" if v is None else ("no such plan" if math.isinf(v) else f"{v:.4f}")

    parts = []
    for name, value in classes.items():
        rows = by_rows.get(name)
        detail = f" ({', '.join(f'{_ROW_WORDS.get(r, r)} {ms(v)}' for r, v in rows.items())})" if rows else ""
        parts.append(f"{_CLASS_WORDS.get(name, name)} {ms(value)}{detail}")
    return "by plan class (ms): " + "; ".join(parts)


def _two_d_bound(instance: Any, instance_path: Path, model: Any, time_limit: float, table_wise: bool, plan_path: Path | None,
                 json_out: bool) -> None:
    """A 2D instance's bound: per group size, the group's bound plus the sync floor; the least bounds every 2D plan
    (solvers/bound/two_d.py)."""
    from rich.table import Table

    from shardopt.cli.common import _plan_scope
    from shardopt.core.ir import load_plan
    from solvers.bound.two_d import two_d_lower_bound

    per_g = two_d_lower_bound(instance, model, time_limit=time_limit, table_wise=table_wise)
    proved = [b for b in per_g if b.embedding is not None and b.embedding.status.proves_bound]
    head = {"instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()}, "cost_model": "analytic"}
    if not proved:
        why = "; ".join(f"G = {b.group_size}: {b.why or (b.embedding.reason if b.embedding else '')}" for b in per_g)
        raise CLIError(f"no group size has a plan that fits in memory ({why})", EXIT_INFEASIBLE, "infeasible",
                       extra={**head, "group_sizes": [b.to_dict() for b in per_g]})
    best = min(proved, key=lambda b: b.value_ms)
    plan_doc = None
    if plan_path is not None:
        plan = load_plan(plan_path)
        group, sync = _plan_scope(instance, plan)
        cost = model.plan_costs(group, plan).max_cost + (sync.ms if sync is not None else 0.0)
        plan_doc = {"path": str(plan_path), "group_size": plan.sharding_group_size, "cost_ms": cost,
                    "gap": cost / best.value_ms - 1.0 if best.value_ms > 0 else None}
    if json_out:
        _emit_json({**head, "bound_ms": best.value_ms, "group_size": best.group_size, "group_sizes": [b.to_dict() for b in per_g],
                    "plan": plan_doc})
        return
    table = Table(title="certified bound per sharding group size (ms per iteration, analytic)", title_justify="left")
    for col in ("G", "embedding bound", "sync floor", "bound", "status"):
        table.add_column(col, justify="left" if col == "status" else "right")
    for b in per_g:
        e = b.embedding
        table.add_row(str(b.group_size), f"{e.value_ms:.4f}" if e is not None else "-", f"{b.sync_floor_ms:.4f}",
                      f"{b.value_ms:.4f}" if e is not None else "-", e.status.value if e is not None else (b.why or "")[:60],
                      style="bold" if b is best else None)
    _console().print(table)
    lines = [f"every 2D plan of {instance.name or instance_path.name} costs at least {best.value_ms:.4f} ms per iteration "
             f"(the least over group sizes, at G = {best.group_size}; each group's relaxation within {time_limit / max(1, len(proved)):.3g} s)"]
    if plan_doc is not None:
        lines.append(f"plan {plan_path} (G = {plan_doc['group_size']}): {plan_doc['cost_ms']:.4f} ms, {100 * plan_doc['gap']:.1f} % above the bound")
    _print_lines(_console(), lines)
