"""What a solve returns, as data: its status, why it stopped, the plan and its predicted cost, and the typed facts a
caller shows the user (the bounds, a memory fallback, a re-plan's moves, the policy used). A leaf module, so that the
CLI, the leaderboard and the solvers read one definition and no caller digs in a solver's `info` dict, which holds
each solver's own diagnostics for `--json` and benchmarks only.

Two kinds of bound, never mixed: `lower_bound` is certified, a lower bound of the plan cost under the cost model that
judged the plan, over every plan the bound covers (`lower_bound_of` says which); `model_bound` is a bound a solver
proved of its own model (cpsat's linearisation, HiGHS's relaxation), useful for its search and no bound of the plan
cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from costmodels.base import DeviceCosts
from shardopt.core.ir import Plan, PlanStatus

# what every result without a plan and without a proof says (fail() adds it where a reason does not)
NOT_PROVEN = "the instance is not proven infeasible"


class SolveStatus(str, Enum):
    """What the result is. Why the search stopped is a separate field (StopReason): a plan found when the time limit
    ended the search is `feasible`, stopped by `time_limit`."""

    optimal = "optimal"
    feasible = "feasible"
    # a solver's shorthand for "feasible, stopped by the time limit": a SolveResult records it as exactly that
    timeout = "timeout"
    infeasible = "infeasible"  # proven: no plan exists (the reason says why)
    no_solution = "no_solution"  # this solver found no plan; the instance is not proven infeasible

    @property
    def has_plan(self) -> bool:
        return self in (SolveStatus.optimal, SolveStatus.feasible, SolveStatus.timeout)


class StopReason(str, Enum):
    """Why a search stopped, whatever it found."""

    time_limit = "time_limit"  # the limit ended it: the result is the best found by then
    converged = "converged"  # it ran its whole course (a constructive heuristic, a search that converged)
    proven = "proven"  # optimality or infeasibility was proven
    interrupted = "interrupted"  # the user stopped it (Ctrl-C): the result is the best found by then
    work_budget = "work_budget"  # its default work budget ended it (shardopt.core.work): the same plan on any machine
    wall_cap = "wall_cap"  # the wall-clock safety cap of a work budget ended it: the plan depends on the machine's speed


# a stop reason in a status line: "feasible in 2.0 s, stopped by the time limit"
STOP_WORDS = {StopReason.time_limit: "stopped by the time limit", StopReason.converged: "search converged",
              StopReason.proven: "proven", StopReason.interrupted: "interrupted by the user",
              StopReason.work_budget: "stopped by its work budget", StopReason.wall_cap: "stopped by the wall-clock safety cap"}


@dataclass(frozen=True)
class ProvenBound:
    """A bound and what it is a bound of, in words ("every table- and column-wise plan", "the linearised model
    around the returned plan")."""

    value: float
    of: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FallbackUse:
    """A constructive heuristic ran out of memory in its own order and a fallback stage placed the tables: the plan
    does not follow the rule the user asked for, and says so."""

    stage: str  # the stage that placed the plan
    stage_text: str  # what that stage does, in words
    failed_table: str  # the first table the solver's own order could not place
    placed_before: int  # how many tables that order had placed by then
    compared: dict[str, float] = field(default_factory=dict)  # stage -> predicted cost of its plan, where several packed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReplanReport:
    """What re-planning from a deployed plan moved (solvers.replan): the bytes moved against the budget, what was
    carried over, and the solver's plan from scratch for contrast."""

    moved_bytes: int
    max_moved_bytes: int | None
    move_weight_ms_per_gib: float
    model_bytes: int
    carried_over: dict[str, Any]
    scratch: dict[str, Any]
    starts: list[Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PolicyUse:
    """The trained policy an RL solver rolled out, and the calibrated model card it was trained on (None: the shipped
    policy)."""

    checkpoint: str
    from_card: str | None = None


@dataclass
class SolveResult:
    solver: str
    status: SolveStatus
    plan: Plan | None = None
    reason: str | None = None
    wall_time_s: float = 0.0
    lower_bound: float | None = None  # certified: a bound of the plan cost under the judging model (see above)
    predicted: DeviceCosts | None = None
    info: dict[str, Any] = field(default_factory=dict)
    stopped: StopReason | None = None  # None: inferred from the status (proven for optimal / infeasible, else converged)
    lower_bound_of: str | None = None  # the plans the certified bound covers, in words
    model_bound: ProvenBound | None = None  # a bound of the solver's own model only
    fallback: FallbackUse | None = None
    replan: ReplanReport | None = None
    policy: PolicyUse | None = None

    def __post_init__(self) -> None:
        if self.status is SolveStatus.timeout:  # (an interrupted search also reads its clock as past the deadline)
            self.status = SolveStatus.feasible
            self.stopped = self.stopped or StopReason.time_limit
        if self.stopped is None:
            self.stopped = StopReason.proven if self.status in (SolveStatus.optimal, SolveStatus.infeasible) else StopReason.converged
        if self.plan is not None and (self.plan.status.value != self.status.value or self.plan.stopped != self.stopped.value):
            self.plan = self.plan.model_copy(update={"status": PlanStatus(self.status.value), "stopped": self.stopped.value})

    @property
    def predicted_cost(self) -> float | None:
        return self.predicted.max_cost if self.predicted is not None else None
