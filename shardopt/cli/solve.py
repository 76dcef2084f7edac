"""`shardopt solve`: place an instance's tables with a solver and print the plan with its predicted cost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from shardopt.cli.common import (
    CLIError,
    DEFAULT_SOLVER,
    EXIT_INFEASIBLE,
    CostModelOpt,
    JsonOpt,
    ModelsOpt,
    _choose_cost_model,
    _console,
    _cost_summary,
    _device_table,
    _emit_json,
    _guard,
    _load_instance,
    _memory_doc,
    _model_label,
    _print_lines,
    _solver_with_options,
    solver_time_limit,
    app,
)
from shardopt.cli.live import EXIT_INTERRUPTED, live_solve
from shardopt.cli.pick import check_portfolio, pick, pick_doc, pick_lines, portfolio_candidates
from shardopt.measure.pick import PICK_PORTFOLIO
from solvers.base import STOP_WORDS, StopReason


@app.command()
def solve(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance to place.", show_default=False)],
    solver: Annotated[str, typer.Option("--solver", "-s", help="Solver name (see `shardopt solvers`).")] = DEFAULT_SOLVER,
    cost_model: CostModelOpt = None,
    models: ModelsOpt = None,
    time_limit: Annotated[Optional[float], typer.Option("--time-limit", min=0.0, help="Seconds the command may take, start-up and loading included (the solver gets at least half; with --pick, each candidate's solve) \\[default: the solver's own budget: neuroshard 2-10 s by instance size, cpsat / milp 60 s, torchrec 300 s; the heuristics run to the end].", show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed: same seed, same plan.")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", metavar="PLAN.json", help="Write the plan here.")] = None,
    option: Annotated[
        Optional[list[str]],
        typer.Option("--option", "-O", metavar="KEY=VALUE", help="A solver option (repeatable), e.g. -O max_split=4 -O split_apart=false; values are JSON, else text."),
    ] = None,
    from_plan: Annotated[
        Optional[Path],
        typer.Option("--from", metavar="OLD_PLAN.json", help="Re-plan from this earlier plan: tables matched by name keep their shards where that pays, new ones are placed; the bytes moved are reported.", show_default=False),
    ] = None,
    max_moved_bytes: Annotated[
        Optional[str],
        typer.Option("--max-moved-bytes", metavar="N|P%", help="With --from: at most N bytes moved, or P% of the model's bytes.", show_default=False),
    ] = None,
    move_weight: Annotated[
        Optional[float],
        typer.Option("--move-weight", min=0.0, metavar="MS_PER_GIB", help="With --from: price each GiB moved at this many ms of plan cost.", show_default=False),
    ] = None,
    pick_backend: Annotated[
        Optional[str],
        typer.Option("--pick", metavar="cpu|cuda", help="Solve with a portfolio (--portfolio, each with the chosen cost model and with analytic), measure the plans together on this judge, and return the measured-fastest.", show_default=False),
    ] = None,
    candidates: Annotated[Optional[int], typer.Option("--candidates", min=1, help="With --pick: at most this many candidates (the chosen model's first).", show_default=False)] = None,
    portfolio: Annotated[str, typer.Option("--portfolio", metavar="S,S,...", help="With --pick: the solvers of the portfolio.")] = ",".join(PICK_PORTFOLIO),
    json_out: JsonOpt = False,
) -> None:
    """Place an instance's tables on its devices and print the plan with its predicted cost (or, with --pick, the
    measured-fastest plan of a portfolio)."""
    with _guard(json_out):
        from shardopt.measure.evaluate import cost_model_label
        from shardopt.core.ir import save, to_dict
        from shardopt.core.memory import device_memory_use

        solver_obj = _solver_with_options(solver, option or [])  # unknown names / options fail before any file is read
        if pick_backend is not None:
            pick_backend = pick_backend.strip().lower()
            if pick_backend not in ("cpu", "cuda"):
                raise CLIError(f"--pick: {pick_backend!r} is not cpu or cuda (the judge that measures the candidates)")
            if from_plan is not None:
                raise CLIError("--pick and --from: re-planning keeps one solver's moves; pick among fresh plans without --from")
            portfolio_names = check_portfolio(portfolio)
        elif candidates is not None:
            raise CLIError("--candidates needs --pick cpu|cuda")
        if from_plan is None and (max_moved_bytes is not None or move_weight is not None):
            raise CLIError("--max-moved-bytes and --move-weight need --from OLD_PLAN.json (the plan whose placement moving away from costs)")
        instance = _load_instance(instance_path)
        choice = _choose_cost_model(cost_model, instance, models)
        model = choice.model
        picked: dict[str, Any] | None = None
        pick_text: list[str] = []
        if pick_backend is not None:
            cands = portfolio_candidates(instance, choice, portfolio_names, candidates, time_limit, seed)
            winner, report, notes = pick(instance, cands, pick_backend, seed)
            result, model, solver = winner.result, winner.model, winner.solver
            picked = pick_doc(report, cands, winner, notes)
            pick_text = pick_lines(report, winner, pick_backend) + notes
        else:
            with live_solve(f"{solver} solving {instance.name or instance_path.name}", quiet=json_out):
                limit = solver_time_limit(time_limit)  # (the command's limit: start-up and loading come out of it)
                if from_plan is not None:
                    result = _replan(solver_obj, instance, model, from_plan, max_moved_bytes, move_weight, limit, seed)
                else:
                    result = solver_obj.solve(instance, model, time_limit=limit, seed=seed)
        interrupted = result.stopped is StopReason.interrupted
        head = {"instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()}}
        if interrupted and (not result.status.has_plan or result.plan is None):
            raise CLIError("interrupted (Ctrl-C) before the search found a plan", EXIT_INTERRUPTED, "interrupted",
                           extra={**head, "solver": solver, "status": result.status.value, "stopped": "interrupted",
                                  "wall_time_s": result.wall_time_s})
        if not result.status.has_plan or result.plan is None:
            reason = result.reason or "the solver gave no reason"
            status = result.status.value
            if status == "infeasible":
                message = reason
            elif "not proven" in reason:
                message = reason
            else:
                message = f"{reason} (solver {solver} found no plan; the instance is not proven infeasible)"
            raise CLIError(
                message,
                EXIT_INFEASIBLE,
                "infeasible" if status == "infeasible" else "no_solution",
                extra={**head, "solver": solver, "status": status, "reason": reason, "wall_time_s": result.wall_time_s},
            )
        plan = result.plan
        costs = result.predicted if result.predicted is not None else model.plan_costs(instance, plan)
        memory = device_memory_use(instance, plan.shards)
        label = (f"predicted by {_model_label(choice, instance)}" if picked is None or model is choice.model
                 else f"predicted by {cost_model_label(model, instance)}")
        if out is not None:
            try:
                save(plan, out)
            except OSError as exc:
                raise CLIError(f"{out}: cannot write the plan ({exc.strerror or exc})") from None
        if json_out:
            _emit_json(
                {
                    **head,
                    "solver": plan.solver,
                    "status": result.status.value,
                    "stopped": result.stopped.value if result.stopped is not None else None,
                    "wall_time_s": result.wall_time_s,
                    "seed": seed,
                    "cost_model": cost_model_label(model, instance),
                    "cost_model_choice": choice.to_dict(),
                    "cost_model_card": choice.card_id,
                    "lower_bound": result.lower_bound,
                    "predicted": costs.to_dict(),
                    "memory": _memory_doc(instance, memory),
                    "out": str(out) if out is not None else None,
                    **({"replan": result.info["replan"]} if "replan" in result.info else {}),
                    **({"pick": picked} if picked is not None else {}),
                    **({"policy": result.info["policy"], "policy_from_card": result.info.get("policy_from_card")}
                       if "policy" in result.info else {}),
                    "plan": to_dict(plan),
                }
            )
            if interrupted:
                raise typer.Exit(EXIT_INTERRUPTED)
            return
        console = _console()
        title = f"plan for {instance.name or instance_path.name} by {plan.solver} ({label})"
        console.print(_device_table(title, instance, plan.shards, memory, costs))
        lines = _cost_summary(costs, label)
        status = f"solver {plan.solver}: {result.status.value} in {result.wall_time_s:.3f} s, {STOP_WORDS.get(result.stopped, 'stopped')} (seed {seed}"
        status += f", time limit {time_limit:g} s)" if time_limit is not None else ")"
        if result.lower_bound is not None:
            gap = (costs.max_cost - result.lower_bound) / costs.max_cost if costs.max_cost > 0 else 0.0
            what = result.info.get("bound_is_for") or "the solver's model"
            status += f" · lower bound {result.lower_bound:.3f} ms of {what} (gap {100 * gap:.1f}%)"
        if result.info.get("policy_from_card"):
            status += f" · policy trained on {result.info['policy_from_card']} (calibrate --with-policies)"
        lines.append(status)
        if "replan" in result.info:
            lines.append(_replan_line(result.info["replan"]))
        lines += pick_text
        fallback = _fallback_line(result.info)
        if fallback:
            lines.append(fallback)
        neighbourhoods = any("neighbourhood_devices" in it for it in result.info.get("iterations", []))
        if neighbourhoods and "certified_bound" not in result.info and getattr(model, "name", None) == "analytic":
            lines.append(f"(solved a neighbourhood at a time: that bound is only the linear model's table cuts; a certified bound of "
                         f"the analytic model: shardopt bound {instance_path} --plan PLAN.json, or -O certified_bound=true)")
        lines.append(f"plan written to {out}" if out is not None else "plan not saved (use --out PLAN.json)")
        if interrupted:
            lines.append("interrupted (Ctrl-C): this is the best plan the search had found; the plan file says so (stopped: interrupted)")
        _print_lines(console, lines)
        if interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)


def _parse_moved_budget(text: str, model_bytes: int) -> int:
    """--max-moved-bytes: bytes (an integer) or a percentage of the model's bytes ('5%')."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            share = float(raw[:-1])
            if not 0 <= share <= 100:
                raise ValueError
            return int(model_bytes * share / 100)
        value = int(raw.replace("_", "").replace(",", ""))
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        raise CLIError(f"--max-moved-bytes: {text!r} is not a byte count >= 0 or a percentage like 5%") from None


def _replan(solver_obj: Any, instance: Any, model: Any, from_plan: Path, max_moved: str | None, weight: float | None,
            time_limit: float | None, seed: int) -> Any:
    from shardopt.core.ir import load_plan
    from shardopt.core.memory import table_bytes_array
    from solvers.replan.replan import replan

    old = load_plan(from_plan)
    budget = None if max_moved is None else _parse_moved_budget(max_moved, int(table_bytes_array(instance).sum()))
    return replan(solver_obj, instance, model, old, max_moved_bytes=budget, move_weight=weight or 0.0, time_limit=time_limit, seed=seed)


def _replan_line(info: dict[str, Any]) -> str:
    moved, total = info["moved_bytes"], info["model_bytes"]
    c = info["carried_over"]
    line = (f"re-planned: {moved:,} bytes moved ({100 * moved / total:.2f} % of the model's {total:,})"
            + (f" within the budget of {info['max_moved_bytes']:,}" if info["max_moved_bytes"] is not None else "")
            + f"; {c['kept_tables']} tables carried over, {len(c['added'])} added, {len(c['removed'])} removed, {len(c['resized'])} resized")
    sc = info["scratch"]
    if sc.get("cost") is not None:
        line += f"; the solver's plan from scratch: {sc['cost']:.3f} ms, {sc['moved_bytes_relabelled']:,} bytes moved after relabelling devices"
    return line


def _fallback_line(info: dict[str, Any]) -> str | None:
    """A heuristic that ran out of memory in its own order says so, and which fallback placed the tables (a plan
    from a memory-first pass is not the rule the user asked for)."""
    from solvers.heuristics.constructive import FALLBACK_STAGES

    if not info.get("fallback_used") or not info.get("failures"):
        return None
    first = info["failures"][0]
    stage = info["stage"]
    line = (f"memory ran out in the solver's own order (table {first['table']!r} after {first['placed']} tables); "
            f"placed by the fallback {stage} ({FALLBACK_STAGES.get(stage, stage)})")
    compared = info.get("fallbacks_compared") or {}
    others = [f"{name}'s {cost:.3f} ms" for name, cost in compared.items() if name != stage]
    if stage in compared and others:
        line += f": {compared[stage]:.3f} ms, cheaper than " + " and ".join(others)
    return line
