"""The parts a solver is composed from, as protocols: the seed it starts from and falls back to, the layout proposer
of its tiered search, and the polisher of its searched plan. A leaf module (only typing names the types), as TorchRec's
planner keeps its seams in `protocols.py`: a solver takes each part injected, with a default, and no part imports
the solver that uses it (docs/architecture.md, "Seams").

NeuroShardSolver's defaults: `GreedySolver` (solvers.heuristics.constructive), `tiered_layouts`
(solvers.neuroshard.layouts) and `polish_searched_plan` (solvers.neuroshard.finish).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from costmodels.base import BoundCostModel, CostModel
    from shardopt.core.ir import Instance, Shard
    from solvers.base import Budget
    from solvers.placement.tiering import TieredLayout
    from solvers.results import SolveResult, TieredLayoutChoice


@runtime_checkable
class SeedSolver(Protocol):
    """A solver whose plan a search starts from, reads its tiered layouts off (`SolveResult.layouts`), and returns
    where the search ends without a plan of its own."""

    name: str

    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult: ...


class LayoutProposer(Protocol):
    """The tiered layouts (row-wise tables fixed, cold tables in host memory) a search tries, in the order it tries
    them, each with what made it; a string says why no layout could be made."""

    def __call__(self, instance: Instance, seed_result: SolveResult) -> list[tuple[TieredLayoutChoice, TieredLayout]] | str: ...


class PlanPolisher(Protocol):
    """Cost-driven changes to a searched plan (caches grown, tables moved back to HBM, replicas): the plan, what it
    did (None: nothing to report), and whether the budget ran out."""

    def __call__(self, instance: Instance, bm: BoundCostModel, shards: list[Shard], cfg: Any, data_parallel: bool,
                 budget: Budget, timed_out: bool) -> tuple[list[Shard], dict[str, Any] | None, bool]: ...
