"""The one solver interface: `solve(instance, cost_model, *, time_limit, seed) -> SolveResult`.

Every solver's plan goes through the plan checker before it is returned (`finish`), so a caller never sees an
invalid plan; a solver that cannot place every table returns a result with a reason instead, and says whether that
reason is a proof (`infeasible`) or only its own failure (`no_solution`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.ir import Instance, Plan, PlanStatus, Shard
from shardopt.core.plan_check import assert_valid_plan
from shardopt.core.work import WORK_UNITS_PER_S, current_meter, metered, work_cap_s
from solvers.options import NoOptions, build_options, options_as_dict
from solvers.progress import report, stop_requested
from solvers.results import (  # noqa: F401  (the result types, importable from here as from solvers.results)
    NOT_PROVEN,
    STOP_WORDS,
    FallbackUse,
    PolicyUse,
    ProvenBound,
    ReplanReport,
    SolveResult,
    SolveStatus,
    StopReason,
    TieredLayoutChoice,
    WorkBudgetUse,
)


class Solver(ABC):
    """A solver: its name (the catalog's key, `solvers.catalog`), its options (one frozen dataclass, `Options`, checked
    by `solvers.options.build_options`) and `solve`. Its family, description and placements live in its catalog spec."""

    name: ClassVar[str] = "solver"
    Options: ClassVar[type] = NoOptions
    default_options: ClassVar[Any] = None  # an Options value whose defaults differ from the dataclass's (None: those)

    def __init__(self, options: Any = None, **overrides: Any) -> None:
        base = options if options is not None else type(self).default_options
        self.options = build_options(type(self).Options, overrides, solver=self.name, base=base)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every solver's `solve` first asks the placement constraints' counting proofs
        (shardopt.core.constraint_proofs): where no plan can meet them, the answer is `infeasible` with the reason, from
        every solver alike, and no search ever returns a plan that breaks them (a data_parallel-only table pinned off
        some device has no plan, and a packer that placed its replicas anyway handed the checker an invalid plan)."""
        super().__init_subclass__(**kwargs)
        if "solve" in cls.__dict__:
            cls.solve = _proofs_first(cls.__dict__["solve"])  # type: ignore[method-assign]

    @abstractmethod
    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult: ...

    def params(self) -> dict[str, Any]:
        """The solver's settings, recorded in every plan it makes: its options, unless it says more."""
        return options_as_dict(self.options)

    def prepare(self) -> None:  # noqa: B027 - a hook: most solvers need no set-up
        """One-time set-up of this process (an expensive import), outside any solve's time limit: a batch of solves
        (the leaderboard, a sweep) calls it before the first; a single solve need not, and then pays it inside."""


def _proofs_first(solve: Any) -> Any:
    import functools

    @functools.wraps(solve)
    def guarded(self: Solver, instance: Instance, cost_model: CostModel, *args: Any, **kwargs: Any) -> SolveResult:
        if instance.constraints is not None:
            from shardopt.core.constraint_proofs import constraint_infeasibility

            proof = constraint_infeasibility(instance)
            if proof is not None:
                return fail(self, SolveStatus.infeasible, f"no plan can meet the placement constraints: {proof}", Stopwatch(),
                            {"proof": "constraints"})
        if instance.two_d is not None:  # 2D: the flat solve on the sharding group (solvers/two_d.py)
            from solvers.two_d import solve_in_groups

            def flat(sub: Instance, cm: CostModel, time_limit: float | None, seed: int) -> SolveResult:
                return guarded(self, sub, cm, time_limit=time_limit, seed=seed)

            return solve_in_groups(self.name, flat, instance, cost_model, kwargs.get("time_limit"), kwargs.get("seed", 0))
        return solve(self, instance, cost_model, *args, **kwargs)

    return guarded


# how far past every deadline a Stopwatch reads once a stop was requested (solvers.progress): far enough that any
# budget a solver computes from it is spent, finite so that arithmetic on it stays ordinary
STOP_JUMP_S = 1e7


class Stopwatch:
    """A solve's clock. `elapsed` is what the solver checks its deadlines against: made inside a work meter
    (shardopt.core.work.metered: a solve on a work budget), the work done since the clock started, in work seconds,
    and past any deadline once the meter's wall-clock cap fires; otherwise wall seconds. Once the user asks it to
    stop (solvers.progress.request_stop) it reads as past any deadline, so every anytime search returns its best
    plan as at its time limit. `wall` is the real time, for the record."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.meter = current_meter()
        self.start_units = self.meter.units if self.meter is not None else 0.0

    @property
    def wall(self) -> float:
        return time.perf_counter() - self.start

    @property
    def elapsed(self) -> float:
        jump = STOP_JUMP_S if stop_requested() else 0.0
        if self.meter is None:
            return self.wall + jump
        if self.meter.capped():
            return STOP_JUMP_S
        return (self.meter.units - self.start_units) / WORK_UNITS_PER_S + jump


@dataclass(frozen=True)
class Budget:
    """A solve's time: the clock it is read on and the deadline on that clock (None: no limit). Handed down a search,
    every stage asks what it has left (`left`) or whether it is spent (`spent`), and hands a part of it on (`share`),
    instead of each stage turning durations into deadlines of its own."""

    clock: Stopwatch
    deadline: float | None

    @classmethod
    def of(cls, clock: Stopwatch, seconds: float | None) -> Budget:
        """`seconds` from the clock's start (None: no limit)."""
        return cls(clock, None if seconds is None else float(seconds))

    def left(self) -> float | None:
        """Seconds left (0 when spent); None without a limit."""
        return None if self.deadline is None else max(self.deadline - self.clock.elapsed, 0.0)

    def spent(self) -> bool:
        return self.deadline is not None and self.clock.elapsed >= self.deadline

    def share(self, fraction: float) -> Budget:
        """The part of what is left that ends after `fraction` of it (no limit stays no limit)."""
        if self.deadline is None:
            return self
        now = self.clock.elapsed
        return Budget(self.clock, now + fraction * max(self.deadline - now, 0.0))

    def unlimited(self) -> Budget:
        return Budget(self.clock, None)


def on_work_budget(work_s: float, solve: Callable[[], SolveResult]) -> SolveResult:
    """Run `solve` on a budget of `work_s` work seconds (shardopt.core.work): its clocks read the work done, so the same
    instance and seed give the same plan on any machine; the wall-clock cap (`work_cap_s`) stays as the safety net.
    The result says which ended it: `work_budget` for the budget, `wall_cap` for the cap. Inside a solve already on
    a budget (a warm start of another solver's default), the outer budget's meter is shared."""
    with metered(cap_s=work_cap_s(work_s)) as meter:
        result = solve()
    if meter.cap_fired:
        result.stopped = StopReason.wall_cap
    elif result.stopped is StopReason.time_limit:
        result.stopped = StopReason.work_budget
    if result.plan is not None and result.stopped is not None and result.plan.stopped != result.stopped.value:
        result.plan = result.plan.model_copy(update={"stopped": result.stopped.value})
    result.work_budget = WorkBudgetUse(work_s, meter.cap_s, meter.cap_fired)
    return result


def finish(
    solver: Solver,
    instance: Instance,
    cost_model: CostModel,
    shards: list[Shard],
    clock: Stopwatch,
    *,
    seed: int,
    status: SolveStatus = SolveStatus.feasible,
    stopped: StopReason | None = None,
    lower_bound: ProvenBound | None = None,
    model_bound: ProvenBound | None = None,
    info: dict[str, Any] | None = None,
    bound: BoundCostModel | None = None,
    extra_params: dict[str, Any] | None = None,
    **facts: Any,
) -> SolveResult:
    """Check the plan (raising PlanError on a solver bug: never hand out an invalid plan), cost it, wrap it.

    `stopped`: why the search stopped (None: inferred from the status, SolveResult); `lower_bound`: a certified bound of the plan cost under `cost_model` (solvers.results), recorded in the plan;
    `model_bound`: a bound of the solver's own model only; `bound`: the cost model already bound to this instance,
    when the solver has it (binding is not free); `extra_params`: settings decided during this solve (recorded in the
    plan beside the solver's own); `facts`: the result's other typed fields (fallback, replan, policy). A whole shard
    of a column_wise-only table is marked column-wise first (`with_required_marks`: the layout unchanged)."""
    from solvers.placement.rules import with_required_marks

    shards = with_required_marks(instance, shards)
    assert_valid_plan(instance, shards)
    predicted = (bound or cost_model.bind(instance)).plan_costs(shards)
    plan = Plan(
        instance=instance.content_hash(),
        solver=solver.name,
        params={**solver.params(), **(extra_params or {})},
        cost_model=cost_model.describe(),
        seed=seed,
        wall_time_s=clock.wall,
        status=PlanStatus(status.value),
        lower_bound=lower_bound.value if lower_bound is not None else None,
        predicted_cost=predicted.max_cost,
        shards=shards,
    )
    report(best_cost=predicted.max_cost, bound=lower_bound.value if lower_bound is not None else None)
    return SolveResult(solver.name, status, plan, None, clock.wall, lower_bound.value if lower_bound is not None else None, predicted,
                       info or {}, _stop_reason(status, stopped), lower_bound_of=lower_bound.of if lower_bound is not None else None,
                       model_bound=model_bound, **facts)


def _stop_reason(status: SolveStatus, stopped: StopReason | None = None) -> StopReason | None:
    """Interrupted where the user asked the search to stop and it was not finished by proof (an interrupted search
    also reads its clock as past the deadline); else the solver's own reason, or None (from the status)."""
    if stop_requested() and status not in (SolveStatus.optimal, SolveStatus.infeasible):
        return StopReason.interrupted
    return stopped


def fail(solver: Solver, status: SolveStatus, reason: str, clock: Stopwatch, info: dict[str, Any] | None = None) -> SolveResult:
    """A result without a plan. One without a proof (`no_solution`) always says that the instance is not proven
    infeasible, so that no caller has to add it or read the reason for it."""
    if status is SolveStatus.no_solution and NOT_PROVEN not in reason.lower():
        reason = f"{reason.rstrip('. ')}; {NOT_PROVEN}"
    return SolveResult(solver.name, status, None, reason, clock.wall, None, None, info or {}, _stop_reason(status))


def unplaceable(solver: Solver, instance: Instance, reason: str, clock: Stopwatch, kinds: str, info: dict[str, Any] | None = None) -> SolveResult:
    """The result when `solver`'s own placements (`kinds`, e.g. "table-wise") cannot hold the instance for `reason`.

    Since plans may split tables by rows and keep tables in host memory (docs/placements.md, "Memory tiers"), a table that fits
    on no device or tables beyond the HBM prove nothing about the instance: it is `infeasible` only when the tables
    exceed all HBM and host memory together; otherwise `no_solution`, naming the solvers that place more kinds."""
    from shardopt.core.feasibility import tiered_infeasibility_reason

    proof = tiered_infeasibility_reason(instance)
    if proof is not None:
        return fail(solver, SolveStatus.infeasible, proof, clock, {**(info or {}), "proof": "feasibility"})
    why = (f"{reason}. {solver.name} places tables {kinds} only; the instance is not proven infeasible: row-wise splits "
           f"or host memory can hold it (solvers that place them: greedy and the other heuristics; see `shardopt solvers`)")
    return fail(solver, SolveStatus.no_solution, why, clock, {**(info or {}), "placements": kinds})
