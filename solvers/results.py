"""What a solve returns, as data: its status, why it stopped, the plan and its predicted cost, and the typed facts a
caller shows the user (the bounds, a memory fallback, a re-plan's moves, the policy used, the search's statistics). A leaf module, so that the
CLI, the leaderboard and the solvers read one definition and no caller digs in a solver's `info` dict, which holds
each solver's own diagnostics for `--json` and benchmarks only.

Two kinds of bound, never mixed: `lower_bound` is certified, a lower bound of the plan cost under the cost model that
judged the plan, over every plan the bound covers (`lower_bound_of` says which); `model_bound` is a bound a solver
proved of its own model (cpsat's linearisation, HiGHS's relaxation), useful for its search and no bound of the plan
cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from costmodels.base import DeviceCosts
from shardopt.core.ir import Plan, PlanStatus
from solvers.status import STOP_WORDS, SolveStatus, StopReason

__all__ = ["NOT_PROVEN", "STOP_WORDS", "FallbackUse", "PolicyUse", "ProvenBound", "ReplanReport", "SearchStats", "SolveResult", "SolveStatus", "StopReason",
           "PackingFailure", "PackingReport", "TieredLayoutChoice", "WarmStart", "WorkBudgetUse"]

# what every result without a plan and without a proof says (fail() adds it where a reason does not)
NOT_PROVEN = "the instance is not proven infeasible"


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
class TieredLayoutChoice:
    """One tiered layout a heuristic packed (the arguments of solvers.placement.tiering.plan_tiers) and its plan's
    cost there: what greedy hands the search that starts from it (neuroshard searches in each), as a typed value
    rather than through `info`."""

    within_host: bool  # the oversized tables' row splits stay within a host (else over all devices)
    lean: bool  # the lean layout (the fewest tables row-wise / in host memory)
    rowwise: tuple[str, ...]  # the tables retried row-wise, by name
    oversized_to_host: bool | tuple[str, ...]  # the oversized tables put in host memory whole: all (True), none, or these
    cost: float | None  # the heuristic's plan cost in it (None: a default layout to try, not packed)
    headroom: float  # the share of each device's HBM the layout may fill

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WarmStart:
    """The plan a search began from: the solver (or start) that made it and its cost under the search's model."""

    solver: str
    cost: float


@dataclass(frozen=True)
class SearchStats:
    """What a search did, as a typed value that the next stage, a caller and the tests read (never `info`): how many
    states its cost model scored, how many of them it packed only with the completion check (a tight instance, where
    neuroshard then also searches the tiered layouts), its steps (beam steps; re-linearisations), the polish's moves,
    every warm start's plan cost (None: that start found no plan, or broke a constraint) and the one it began from."""

    states_scored: int = 0
    states_rescored_safe: int = 0
    steps: int = 0
    polish_moves: int = 0
    warm_starts: dict[str, float | None] = field(default_factory=dict)
    warm_start: WarmStart | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PackingFailure:
    """Where one packing stage of a constructive heuristic ran out of memory: the table it could not place, its bytes,
    the largest free space on any device then, and how many tables the stage had placed."""

    stage: str
    table: str
    table_bytes: int
    largest_free: int
    placed: int


@dataclass(frozen=True)
class PackingReport:
    """How a constructive heuristic packed the tables: the stage whose plan it returns (None: none placed them all),
    every stage it tried in order, and where each failed stage ran out of memory."""

    stage: str | None
    stages_tried: tuple[str, ...]
    failures: tuple[PackingFailure, ...] = ()

    @property
    def fallback_used(self) -> bool:
        """Whether a stage other than the solver's own order placed the plan."""
        return self.stage not in (None, "primary")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WorkBudgetUse:
    """The work budget a default solve ran on (shardopt.core.work): its work seconds, the wall-clock safety cap, and
    whether the cap fired (then the plan depends on the machine's speed, and `stopped` says `wall_cap`)."""

    work_s: float
    wall_cap_s: float | None
    wall_cap_fired: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GroupSizeTrial:
    """One sharding group size a 2D solve tried (solvers/two_d.py): by which solver (the scout's or the one asked
    for: `refined`), its status, the group plan's embedding cost and the replica sync per iteration (ms, by the cost
    model and costmodels/replica_sync.py), or why it has no plan (`why`; status `not_formed` where G forms no groups)."""

    group_size: int
    solver: str
    refined: bool
    status: str
    embedding_ms: float | None
    sync_ms: float | None
    wall_s: float
    why: str | None

    @property
    def total_ms(self) -> float:
        """The iteration's cost: embedding + sync (inf without a plan)."""
        if self.embedding_ms is None or self.sync_ms is None:
            return float("inf")
        return self.embedding_ms + self.sync_ms

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_ms": self.total_ms if self.embedding_ms is not None else None}


@dataclass(frozen=True)
class TwoDChoice:
    """The sharding group size a 2D solve chose (None: no plan) and every size it tried, with the chosen plan's sync
    (costmodels.replica_sync.ReplicaSync.to_dict)."""

    group_size: int | None
    trials: tuple[GroupSizeTrial, ...]
    sync: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"group_size": self.group_size, "sync": self.sync, "trials": [t.to_dict() for t in self.trials]}


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
    layouts: tuple[TieredLayoutChoice, ...] = ()  # the tiered layouts it packed, cheapest first (greedy's, for a search after it)
    stats: SearchStats | None = None  # what its search did (None: a solver without one, or none ran)
    work_budget: WorkBudgetUse | None = None  # the work budget it ran on (None: a time limit, or a solver without one)
    packing: PackingReport | None = None  # a constructive heuristic's packing stages (None: no such solver)
    two_d: TwoDChoice | None = None  # a 2D instance's sharding group size and the sizes tried (None: a flat instance)

    def __post_init__(self) -> None:
        if self.stopped is None:
            self.stopped = StopReason.proven if self.status in (SolveStatus.optimal, SolveStatus.infeasible) else StopReason.converged
        if self.plan is not None and (self.plan.status.value != self.status.value or self.plan.stopped != self.stopped.value):
            self.plan = self.plan.model_copy(update={"status": PlanStatus(self.status.value), "stopped": self.stopped.value})

    @property
    def predicted_cost(self) -> float | None:
        return self.predicted.max_cost if self.predicted is not None else None
