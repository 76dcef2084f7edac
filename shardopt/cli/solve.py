"""`shardopt solve`: place an instance's tables with a solver and print the plan with its predicted cost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    EXIT_INFEASIBLE,
    CLIError,
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
    app,
    solver_time_limit,
)
from shardopt.cli.live import EXIT_INTERRUPTED, live_solve
from shardopt.cli.pick import check_portfolio, pick, pick_doc, pick_lines, portfolio_candidates
from shardopt.measure.pick import PICK_PORTFOLIO
from solvers.catalog import DEFAULT_SOLVER
from solvers.results import STOP_WORDS, FallbackUse, ReplanReport, SolveResult, StopReason


@app.command()
def solve(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance to place.", show_default=False)],
    solver: Annotated[str, typer.Option("--solver", "-s", help="Solver name (see `shardopt solvers`).")] = DEFAULT_SOLVER,
    cost_model: CostModelOpt = None,
    models: ModelsOpt = None,
    time_limit: Annotated[float | None, typer.Option("--time-limit", min=0.0, help="Seconds the command may take, start-up and loading included (the solver gets at least half; with --pick, each candidate's solve) \\[default: the solver's own budget: neuroshard 2-60 s by instance size, cpsat / milp 60 s, torchrec 300 s; the heuristics run to the end].", show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed: same seed, same plan.")] = 0,
    out: Annotated[Path | None, typer.Option("--out", "-o", metavar="PLAN.json", help="Write the plan here.")] = None,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-O", metavar="KEY=VALUE", help="A solver option (repeatable), e.g. -O max_split=4 -O split_apart=false; values are JSON, else text."),
    ] = None,
    from_plan: Annotated[
        Path | None,
        typer.Option("--from", metavar="OLD_PLAN.json", help="Re-plan from this earlier plan: tables matched by name keep their shards where that pays, new ones are placed; the bytes moved are reported.", show_default=False),
    ] = None,
    max_moved_bytes: Annotated[
        str | None,
        typer.Option("--max-moved-bytes", metavar="N|P%", help="With --from: at most N bytes moved, or P% of the model's bytes.", show_default=False),
    ] = None,
    move_weight: Annotated[
        float | None,
        typer.Option("--move-weight", min=0.0, metavar="MS_PER_GIB", help="With --from: price each GiB moved at this many ms of plan cost.", show_default=False),
    ] = None,
    pick_backend: Annotated[
        str | None,
        typer.Option("--pick", metavar="cpu|cuda", help="Solve with a portfolio (--portfolio, each with the chosen cost model and with analytic), measure the plans together on this judge, and return the measured-fastest.", show_default=False),
    ] = None,
    candidates: Annotated[int | None, typer.Option("--candidates", min=1, help="With --pick: at most this many candidates (the chosen model's first).", show_default=False)] = None,
    portfolio: Annotated[str, typer.Option("--portfolio", metavar="S,S,...", help="With --pick: the solvers of the portfolio.")] = ",".join(PICK_PORTFOLIO),
    pick_time: Annotated[float | None, typer.Option("--pick-time", min=1.0, metavar="SECONDS", help="With --pick: the most seconds one measurement session may take (it stops sooner once every plan's 95 % CI is within 2 %; close plans get a second session) \\[default: 120].", show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Place an instance's tables on its devices and print the plan with its predicted cost (or, with --pick, the
    measured-fastest plan of a portfolio)."""
    with _guard(json_out):
        from shardopt.core.ir import save
        from solvers.catalog import check_accepts

        solver_obj = _solver_with_options(solver, option or [])  # unknown names / options fail before any file is read
        pick_backend, portfolio_names = _check_flags(pick_backend, candidates, portfolio, from_plan, max_moved_bytes, move_weight)
        if pick_time is not None and pick_backend is None:
            raise CLIError("--pick-time needs --pick cpu|cuda")
        instance = _load_instance(instance_path)
        for name in portfolio_names if pick_backend is not None else [solver]:
            check_accepts(name, instance)  # (exit 2 naming the constraints a solver would break, and who honours them)
        _no_constraint_proof(instance, instance_path)
        choice = _choose_cost_model(cost_model, instance, models)
        model = choice.model
        picked: dict[str, Any] | None = None
        pick_text: list[str] = []
        if pick_backend is not None:
            cands = portfolio_candidates(instance, choice, portfolio_names, candidates, time_limit, seed)
            judge = {"time_cap_s": pick_time} if pick_time is not None else {}
            winner, report, notes = pick(instance, cands, pick_backend, seed, **judge)
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
        head = {"instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()}}
        plan = _plan_or_refusal(result, solver, head)
        if out is not None:
            try:
                save(plan, out)
            except OSError as exc:
                raise CLIError(f"{out}: cannot write the plan ({exc.strerror or exc})") from None
        shown = _Shown(instance, instance_path, result, model, choice, seed, time_limit, out, picked, pick_text)
        if json_out:
            _emit_json({**head, **shown.doc()})
        else:
            shown.print()
        if result.stopped is StopReason.interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)


def _check_flags(pick_backend: str | None, candidates: int | None, portfolio: str, from_plan: Path | None, max_moved_bytes: str | None,
                 move_weight: float | None) -> tuple[str | None, list[str]]:
    """The flags that go together checked before any file is read: (the --pick judge, normalised; its portfolio)."""
    portfolio_names: list[str] = []
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
    return pick_backend, portfolio_names


def _no_constraint_proof(instance: Any, instance_path: Path) -> None:
    """Exit 3 before any solver runs where the placement constraints provably leave no plan, naming them
    (shardopt.core.constraint_proofs)."""
    from shardopt.core.constraint_proofs import constraint_infeasibility

    proof = constraint_infeasibility(instance)
    if proof is not None:
        reason = f"no plan can meet the instance's placement constraints: {proof}"
        raise CLIError(reason, EXIT_INFEASIBLE, "infeasible", extra={"instance": {"path": str(instance_path), "name": instance.name},
                                                                    "status": "infeasible", "reason": reason})


def _plan_or_refusal(result: SolveResult, solver: str, head: dict[str, Any]) -> Any:
    """The result's plan, or the exit docs/architecture.md gives a solve without one: interrupted before a plan (130), no plan
    (3, with the solver's reason, which says whether the instance is proven infeasible)."""
    if result.status.has_plan and result.plan is not None:
        return result.plan
    if result.stopped is StopReason.interrupted:
        raise CLIError("interrupted (Ctrl-C) before the search found a plan", EXIT_INTERRUPTED, "interrupted",
                       extra={**head, "solver": solver, "status": result.status.value, "stopped": "interrupted",
                              "wall_time_s": result.wall_time_s})
    reason = result.reason or f"solver {solver} found no plan and gave no reason"
    status = result.status.value
    raise CLIError(
        reason,  # (a result without a plan and without a proof says so itself: solvers.base.fail)
        EXIT_INFEASIBLE,
        "infeasible" if status == "infeasible" else "no_solution",
        extra={**head, "solver": solver, "status": status, "reason": reason, "wall_time_s": result.wall_time_s},
    )


class _Shown:
    """A solve's plan as the user sees it: the `--json` document, or the device table and the summary lines."""

    def __init__(self, instance: Any, instance_path: Path, result: SolveResult, model: Any, choice: Any, seed: int,
                 time_limit: float | None, out: Path | None, picked: dict[str, Any] | None, pick_text: list[str]) -> None:
        from shardopt.core.memory import device_memory_use
        from shardopt.measure.evaluate import cost_model_label
        from solvers.two_d import planned_instance

        self.job = instance  # (a 2D instance's job; `instance` below is what the plan places: its sharding group)
        instance = planned_instance(instance, result.plan)
        self.instance, self.instance_path, self.result, self.model, self.choice = instance, instance_path, result, model, choice
        self.seed, self.time_limit, self.out, self.picked, self.pick_text = seed, time_limit, out, picked, pick_text
        self.plan = result.plan
        self.costs = result.predicted if result.predicted is not None else model.plan_costs(instance, self.plan)
        self.memory = device_memory_use(instance, self.plan.shards)
        self.label = (f"predicted by {_model_label(choice, instance)}" if picked is None or model is choice.model
                      else f"predicted by {cost_model_label(model, instance)}")

    def doc(self) -> dict[str, Any]:
        from shardopt.core.ir import to_dict
        from shardopt.measure.evaluate import cost_model_label

        result, plan = self.result, self.plan
        return {
            "solver": plan.solver,
            "status": result.status.value,
            "stopped": result.stopped.value if result.stopped is not None else None,
            "wall_time_s": result.wall_time_s,
            "seed": self.seed,
            "cost_model": cost_model_label(self.model, self.instance),
            "cost_model_choice": self.choice.to_dict(),
            "cost_model_card": self.choice.card_id,
            "lower_bound": result.lower_bound,
            "lower_bound_of": result.lower_bound_of,
            **({} if result.lower_bound is not None else
               {"lower_bound_note": _no_bound_note(_is_analytic(self.model), _topology_refusal(self.instance))}),
            **({"solver_bound": result.model_bound.to_dict()} if result.model_bound is not None else {}),
            "predicted": self.costs.to_dict(),
            "memory": _memory_doc(self.instance, self.memory),
            "out": str(self.out) if self.out is not None else None,
            **({"replan": result.replan.to_dict()} if result.replan is not None else {}),
            **({"pick": self.picked} if self.picked is not None else {}),
            **({"policy": result.policy.checkpoint, "policy_from_card": result.policy.from_card} if result.policy is not None else {}),
            **({"search": result.stats.to_dict()} if result.stats is not None else {}),
            **({"work_budget": result.work_budget.to_dict()} if result.work_budget is not None else {}),
            **({"two_d": result.two_d.to_dict()} if result.two_d is not None else {}),
            "plan": to_dict(plan),
        }

    def print(self) -> None:
        result, plan, costs, instance = self.result, self.plan, self.costs, self.instance
        console = _console()
        title = f"plan for {self.job.name or self.instance_path.name} by {plan.solver} ({self.label})"
        lines = _cost_summary(costs, self.label)
        sync = None
        if result.two_d is not None:
            from costmodels.replica_sync import replica_sync
            from shardopt.cli.common import _sync_lines
            from shardopt.cli.two_d_view import group_size_table, two_d_setting

            title += f", one sharding group of {plan.sharding_group_size} ranks"
            console.print(group_size_table(result.two_d))
            sync = replica_sync(self.job, plan, instance.topology.num_devices)
            lines += [two_d_setting(self.job, result.two_d)] + _sync_lines(sync, costs.max_cost, self.label)
        console.print(_device_table(title, instance, plan.shards, self.memory, costs, None if sync is None else sync.rank_ms))
        status = f"solver {plan.solver}: {result.status.value} in {result.wall_time_s:.3f} s, {STOP_WORDS.get(result.stopped, 'stopped')} (seed {self.seed}"
        status += f", time limit {self.time_limit:g} s)" if self.time_limit is not None else ")"
        if result.policy is not None and result.policy.from_card:
            status += f" · policy trained on {result.policy.from_card} (calibrate --with-policies)"
        lines.append(status)
        lines += _bound_lines(instance, result, costs.max_cost, _is_analytic(self.model), self.instance_path)
        if result.replan is not None:
            lines.append(_replan_line(result.replan))
        lines += self.pick_text
        if result.fallback is not None:
            lines.append(_fallback_line(result.fallback))
        lines.append(f"plan written to {self.out}" if self.out is not None else "plan not saved (use --out PLAN.json)")
        if result.stopped is StopReason.interrupted:
            lines.append("interrupted (Ctrl-C): this is the best plan the search had found; the plan file says so (stopped: interrupted)")
        _print_lines(console, lines)


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


def _bound_lines(instance: Any, result: SolveResult, cost: float, analytic: bool, instance_path: Path) -> list[str]:
    """The bounds as solvers.results defines them: the certified bound of the plan cost with its gap; the solver's
    own model's bound named as that and no more; and where neither bounds the plan cost, how to get one."""
    from solvers.bound import plan_gap

    lines = []
    if result.lower_bound is not None:
        gap = plan_gap(instance, cost, result.lower_bound)  # (the one definition of the gap: bound, explain, leaderboard)
        lines.append(f"lower bound {result.lower_bound:.3f} ms over {result.lower_bound_of or 'the plans it covers'} (gap {100 * gap:.1f}%)")
    if result.model_bound is not None:
        lines.append(f"the solver's own bound: {result.model_bound.value:.3f} ms of {result.model_bound.of} (not a bound of the plan cost)")
        if result.lower_bound is None:
            refusal = _topology_refusal(instance)
            hint = f"; shardopt bound {instance_path} --plan PLAN.json" if analytic and refusal is None else ""
            lines.append(f"({_no_bound_note(analytic, refusal)}{hint})")
    return lines


def _topology_refusal(instance: Any) -> str | None:
    """Why the certified bound does not cover the instance's topology (mixed hardware kinds without an envelope; every
    network is covered), or None."""
    if not instance.topology.is_mixed:
        return None
    from solvers.bound import hardware_refusal

    return hardware_refusal(instance)


def _no_bound_note(analytic: bool, network: str | None = None) -> str:
    """Why a result has no certified bound (solvers.results: `lower_bound` holds only that)."""
    if network is not None:
        return f"no certified bound for this topology: {network}"
    return ("no certified bound computed: the analytic model's comes from `shardopt bound`, or within the solve from cpsat / milp "
            "with -O certified_bound=true" if analytic else "no certified bound for this cost model: the certified bound is the analytic model's")


def _is_analytic(model: Any) -> bool:
    """Whether the certified bound (of the analytic formulas, any profile) speaks of this model's costs."""
    from costmodels.analytic import AnalyticCostModel

    return isinstance(model, AnalyticCostModel)


def _replan_line(r: ReplanReport) -> str:
    moved, total = r.moved_bytes, r.model_bytes
    c = r.carried_over
    line = (f"re-planned: {moved:,} bytes moved ({100 * moved / total:.2f} % of the model's {total:,})"
            + (f" within the budget of {r.max_moved_bytes:,}" if r.max_moved_bytes is not None else "")
            + f"; {c['kept_tables']} tables carried over, {len(c['added'])} added, {len(c['removed'])} removed, {len(c['resized'])} resized")
    sc = r.scratch
    if sc.get("cost") is not None:
        line += f"; the solver's plan from scratch: {sc['cost']:.3f} ms, {sc['moved_bytes_relabelled']:,} bytes moved after relabelling devices"
    return line


def _fallback_line(f: FallbackUse) -> str:
    """A heuristic that ran out of memory in its own order says so, and which fallback placed the tables (a plan
    from a memory-first pass is not the rule the user asked for)."""
    line = (f"memory ran out in the solver's own order (table {f.failed_table!r} after {f.placed_before} tables); "
            f"placed by the fallback {f.stage} ({f.stage_text})")
    others = [f"{name}'s {cost:.3f} ms" for name, cost in f.compared.items() if name != f.stage]
    if f.stage in f.compared and others:
        line += f": {f.compared[f.stage]:.3f} ms, cheaper than " + " and ".join(others)
    return line
