"""One collective instead of two: a plan's whole tables marked column-wise where they lie (TorchRec's column_wise
with one rank).

Why: the judge runs one all-to-all per sharding type (TorchRec's output dists), each with its own max over devices
and its own start-up. A plan of whole tables and column pieces pays two collectives, and each must be balanced on
its own. A whole table whose one shard is marked column-wise (`Shard.column_wise`) keeps its lookups and its bytes
and moves nothing, but its pooled output joins the column-wise all-to-all. Where every whole table does so, one
all-to-all of the summed widths runs, never dearer than the two under the analytic model: each all-to-all is a max
of linear pieces with no constant term in the widths (so the max of a sum is at most the sum of the maxes), and one
start-up less. TorchRec runs it so (`CwPooledEmbeddingSharding.create_output_dist`: one all-to-all over every
column-wise table's widths per rank, whatever its shard count; tests/test_torchrec_dmp.py runs such a table through
DistributedModelParallel).
"""

from __future__ import annotations

from collections.abc import Callable

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.ir import Instance, Shard
from shardopt.core.plan_check import constraint_violations
from solvers.base import Solver, SolveResult, Stopwatch, finish
from solvers.placement.rules import column_wise_allowed, column_wise_only, with_required_marks


def mark_column_wise(instance: Instance, shards: list[Shard]) -> tuple[list[Shard], int]:
    """`shards` with every whole table (one shard of all its rows and columns, not a replica) marked column-wise where
    it lies, unless its placement constraint's sharding types leave out column_wise. (plan, tables marked)."""
    allowed = column_wise_allowed(instance)
    index = instance.table_index()
    count: dict[str, int] = {}
    for s in shards:
        count[s.table] = count.get(s.table, 0) + 1
    out: list[Shard] = []
    marked = 0
    for s in shards:
        if count[s.table] > 1 or not s.is_whole or s.replicated or s.column_wise or not allowed[index[s.table]]:
            out.append(s)
            continue
        out.append(s.model_copy(update={"column_wise": True}))
        marked += 1
    return out, marked


def join_one_collective(instance: Instance, bm: BoundCostModel, shards: list[Shard]) -> tuple[list[Shard], int, float]:
    """The plan with its whole tables marked column-wise (`mark_column_wise`) where the cost model says it is cheaper
    and it keeps the placement constraints; else the plan as it is. (plan, tables marked: 0 when kept, its cost)."""
    before = float(bm.plan_costs(shards).max_cost)
    joined, marked = mark_column_wise(instance, shards)
    if not marked:
        return shards, 0, before
    after = float(bm.plan_costs(joined).max_cost)
    if after < before * (1 - 1e-12) and not constraint_violations(instance, joined):
        return joined, marked, after
    return shards, 0, before


def mark_column_wise_only(instance: Instance, shards: list[Shard], judge: Callable[[], BoundCostModel]) -> tuple[list[Shard], list[str]]:
    """A whole-table plan that meets its column_wise-only constraints: those tables' whole shards marked column-wise
    (`column_wise_only`); the other whole tables then join that collective too where the judge (asked only then) says
    it is cheaper (`join_one_collective`: one all-to-all, not two). (plan, the tables marked for their constraint)."""
    must = column_wise_only(instance)
    if not must:
        return shards, []
    out, _, _ = join_one_collective(instance, judge(), with_required_marks(instance, shards))
    return out, sorted(must)


def allow_whole_column_wise(instance: Instance) -> Instance | None:
    """The instance with each column_wise-only table (`column_wise_only`) allowed table_wise too; None where there is
    none. Why: a search that cannot cut such a table (4 columns, a min_partition as wide as it, no even cut) or that
    keeps the tables of co-locate / separate groups whole can still place it whole, as greedy does; its whole shard
    marked column-wise (`column_wise_whole`) then meets the original constraint - TorchRec's column_wise with one
    shard. The search runs on this instance, and the plan is checked against the original one."""
    must = column_wise_only(instance)
    if not must or instance.constraints is None:
        return None
    tables = [tc.model_copy(update={"sharding_types": [*tc.sharding_types, "table_wise"]}) if tc.table in must and tc.sharding_types else tc
              for tc in instance.constraints.tables]
    return instance.model_copy(update={"constraints": instance.constraints.model_copy(update={"tables": tables})})


def column_wise_whole(solver: Solver, instance: Instance, cost_model: CostModel, result: SolveResult, clock: Stopwatch,
                      seed: int) -> SolveResult:
    """`result` of a search on `allow_whole_column_wise(instance)` as a result for `instance`: the whole shards of its
    column_wise-only tables marked column-wise (`mark_column_wise_only`), the plan checked against `instance`, its
    status and stop reason kept."""
    if result.plan is None:
        return result
    shards, marked = mark_column_wise_only(instance, list(result.plan.shards), lambda: cost_model.bind(instance))
    out = finish(solver, instance, cost_model, shards, clock, seed=seed, status=result.status,
                 info={**result.info, "column_wise_whole": marked})
    if result.stopped is not None and out.stopped is not result.stopped:
        out.stopped = result.stopped
        out.plan = out.plan.model_copy(update={"stopped": result.stopped.value}) if out.plan is not None else None
    return out
