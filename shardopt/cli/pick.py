"""`shardopt solve --pick cpu|cuda`: solve with a portfolio, measure the candidates together, keep the fastest.

A search trusts its cost model beyond the model's accuracy (docs/measured.md: the plans a search picks are the ones its
model under-predicts), and which model and solver give the fastest plan differs by instance. So instead of trusting
one prediction, the portfolio's plans - each solver with the chosen model (`auto` by default) and with the analytic
model - are re-timed on the judge the user names, paired and interleaved (shardopt.measure.compare), and the
measured-fastest is returned with its interval and how much it beat each other candidate. "Re-timed on real
hardware" as part of solving, not only of benchmarking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardopt.cli.common import CLIError


@dataclass
class Candidate:
    name: str  # "solver / cost model"
    solver: str
    cost_model: str  # the name asked (auto is shown as what it chose)
    model: Any
    result: Any  # SolveResult
    same_as: str | None = None  # an earlier candidate with the very same plan (measured once)


def portfolio_candidates(instance: Any, choice: Any, portfolio: list[str], limit: int | None, time_limit: float | None,
                         seed: int) -> list[Candidate]:
    """Every portfolio solver with the chosen model, then the model-dependent ones with the analytic model (when that
    is another model); at most `limit` of them, in that order. Solvers that find no plan are left out (and said so by the caller)."""
    from costmodels.registry import get_cost_model
    from shardopt.core.ir import plan_key
    from shardopt.measure.pick import portfolio_pairs
    from solvers.catalog import get_solver, spec_of

    chosen = choice.card.id if choice.card is not None else choice.name
    models = {chosen: choice.model}
    pairs = portfolio_pairs(portfolio, chosen, lambda s: spec_of(s).uses_cost_model)[:limit]
    out: list[Candidate] = []
    for solver, label in pairs:
        if label not in models:
            models[label] = get_cost_model(label)
        model = models[label]
        result = get_solver(solver).solve(instance, model, time_limit=time_limit, seed=seed)
        cand = Candidate(f"{solver} / {label}", solver, label, model, result)
        if result.status.has_plan and result.plan is not None:
            key = plan_key(result.plan)
            cand.same_as = next((c.name for c in out if c.same_as is None and c.result.plan is not None
                                 and plan_key(c.result.plan) == key), None)
        out.append(cand)
    return out


def check_portfolio(text: str) -> list[str]:
    from solvers.catalog import solver_names

    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise CLIError(f"--portfolio: {text!r} names no solver")
    known = solver_names()
    for n in names:
        if n not in known:
            raise CLIError(f"--portfolio: unknown solver {n!r} (known: {', '.join(known)})")
    return names


def pick(instance: Any, candidates: list[Candidate], backend: str, seed: int, progress: Any = None, **judge: Any) -> tuple[Candidate, Any, list[str]]:
    """The measured-fastest candidate (shardopt.measure.pick: close ones re-timed in a second session), the outcome
    (None with one distinct plan) and notes (candidates without a plan, duplicates). `judge` goes to each session's
    compare_plans (time_cap_s: `--pick-time`)."""
    from shardopt.measure.pick import pick_fastest

    notes = [f"{c.name}: no plan ({c.result.reason or c.result.status.value})" for c in candidates if c.result.plan is None]
    notes += [f"{c.name}: the same plan as {c.same_as} (measured once)" for c in candidates if c.same_as]
    distinct = [c for c in candidates if c.result.plan is not None and c.same_as is None]
    if not distinct:
        raise CLIError("--pick: no candidate of the portfolio found a plan", 3, "no_solution")
    if len(distinct) == 1:
        return distinct[0], None, notes + ["one distinct plan: nothing to measure against"]
    names = [c.name for c in distinct]
    default = default_candidate(candidates)
    prefer = names.index(default) if default in names else None
    outcome = pick_fastest(instance, [c.result.plan for c in distinct], names, backend, seed=seed, prefer=prefer, progress=progress, **judge)
    return distinct[outcome.winner], outcome, notes


def default_candidate(candidates: list[Candidate]) -> str | None:
    """The name under which the default solve's plan (the default solver with the chosen model, the portfolio's first)
    was measured - that of an earlier candidate with the same plan - or None where the portfolio has none."""
    from solvers.catalog import DEFAULT_SOLVER

    if not candidates:
        return None
    chosen = candidates[0].cost_model
    c = next((c for c in candidates if c.solver == DEFAULT_SOLVER and c.cost_model == chosen and c.result.plan is not None), None)
    return None if c is None else (c.same_as or c.name)


def pick_lines(outcome: Any, winner: Candidate, backend: str) -> list[str]:
    if outcome is None:
        return [f"picked {winner.name} (the portfolio's only distinct plan)"]
    report = outcome.deciding
    best = next(p for p in report.plans if p.name == winner.name)
    iv = best.interval
    lines = [f"picked {winner.name}: measured {best.cost_ms:.3f} ms on {backend} (95 % CI [{iv.low:.3f}, {iv.high:.3f}]; "
             f"{report.rounds} interleaved rounds; judge: {report.judge})"]
    lines += ["  " + c.sentence() for c in outcome.first.comparisons]
    if outcome.confirm is not None:
        lines.append(f"  second session ({outcome.confirm.rounds} rounds, the close ones):")
        lines += ["    " + c.sentence() for c in outcome.confirm.comparisons]
        lines.append(outcome.how())
    return lines


def pick_doc(outcome: Any, candidates: list[Candidate], winner: Candidate, notes: list[str]) -> dict[str, Any]:
    """--json's `pick`: every candidate with its prediction and its measurement in the deciding session (the second,
    where there was one, for the plans it re-timed), the outcome's sessions and notes."""
    measured: dict[str, Any] = {}
    if outcome is not None:
        for report in (outcome.first, outcome.confirm):
            if report is not None:
                measured.update({p.name: p for p in report.plans})
    rows = []
    for c in candidates:
        p = measured.get(c.name)
        rows.append({"name": c.name, "solver": c.solver, "cost_model": c.cost_model, "status": c.result.status.value,
                     "predicted_ms": float(c.result.predicted.max_cost) if c.result.predicted is not None else None,
                     "measured_ms": p.cost_ms if p else None,
                     "ci_ms": [p.interval.low, p.interval.high] if p else None, "same_as": c.same_as})
    return {"winner": winner.name, "candidates": rows, "notes": notes,
            "sessions": outcome.sessions if outcome is not None else 0,
            "how": outcome.how() if outcome is not None else "one distinct plan",
            "relative_to_fastest": ({outcome.names[i]: r for i, r in outcome.relative.items()} if outcome is not None else {}),
            "compare": outcome.first.to_dict() if outcome is not None else None,
            "confirm": outcome.confirm.to_dict() if outcome is not None and outcome.confirm is not None else None}
