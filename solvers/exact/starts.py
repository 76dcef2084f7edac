"""Warm starts of the exact solvers beyond the heuristics' plans: the plan of the certified bound's relaxation, and
the tiered starts where table- and column-wise HBM plans cannot hold the instance."""

from __future__ import annotations

from typing import Any

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.ir import Instance, Shard
from shardopt.core.plan_check import check_plan, constraint_violations
from solvers.base import Budget
from solvers.protocols import SeedSolver
from solvers.results import SolveResult

RELAXATION_MAX_PAIRS = 2_000


def relaxation_start(instance: Instance, cost_model: CostModel, bm: BoundCostModel, time_limit: float) -> dict[str, Any] | None:
    """The plan of `shardopt bound`'s relaxation (solvers.bound: HiGHS's best solution of the MILP whose
    optimum bounds every table- and column-wise plan, itself a plan of any 4-aligned column widths) as a warm start,
    judged by the full model; None for a cost model other than the analytic one or a model of more than
    RELAXATION_MAX_PAIRS (table, device) pairs (there the bound takes its symmetric LP, which has no plan).

    Not for a measured model: the relaxation of its analytic surrogate (the card's refitted profile) gave plans far
    from the greedy start under the neural model, and the searches' plans did not improve for the time it took
    (benchmarks/bench_relaxation_start.py, docs/results/exact-solvers.md, "cpsat's warm starts with a measured model").

    The relaxation that prices one all-to-all of the summed widths (`per_type=False`): HiGHS finds its plans sooner
    than the per-type one's (huge-test-s1-0000: none within 2.4 s). Its whole tables are not marked column_wise here
    (the marks `relaxation_plan` gives them are taken off); the items price them in the column-wise collective where
    the plan cuts some table (`Items.whole_column_wise`), and the solver's last step marks them where it pays
    (solvers.placement.collectives). Marked, a plan with replicas (which the items cannot express) may be cheaper than
    every plan the items reach (make_instance(10, 4, seed=13, mem_factor=1.3): 0.2607 ms against cpsat's 0.2775), and
    would be returned as the start instead of the search's: not done, the search's own plan and bound kept.

    Why: on many devices the relaxation's plan cuts tables into pieces of whatever widths fill the devices, which
    neither the dyadic items nor NeuroShard's halvings reach (where NeuroShard's pieces do not pack and it splits
    tables by rows). The instances: docs/results/design-evidence.md, "Instances behind design choices"."""
    from solvers.bound import BoundError, analytic_lower_bound

    if len(instance.tables) * instance.topology.num_devices > RELAXATION_MAX_PAIRS or time_limit <= 0:
        return None
    try:
        res = analytic_lower_bound(instance, cost_model, time_limit=time_limit, per_type=False, row_splits=False, host_memory=False)
    except BoundError:  # (not the analytic model)
        return None
    row: dict[str, Any] = {"solver": "relaxation", "status": res.status, "cost": None}
    if res.plan is not None and check_plan(instance, res.plan).ok:
        # (unmarked, as the docstring says why)
        shards = [s.model_copy(update={"column_wise": False}) if s.column_wise else s for s in res.plan.shards]
        row.update(cost=float(bm.plan_costs(shards).max_cost), shards=shards)
    return row


def tiered_starts(instance: Instance, cost_model: CostModel, bm: BoundCostModel, model: CostModel, solvers: tuple[SeedSolver, SeedSolver],
                  time_left: Budget, search_s: float, relaxation_s: float, seed: int
                  ) -> tuple[dict[str, SolveResult], dict[str, float], dict[str, list[Shard]], list[str]]:
    """The tiered starts (the seed's plan, greedy by default, which may take the whole limit: packing a tight tiered
    instance can, and then its plan is the answer; the search's, NeuroShard by default, within `search_s` of what is
    left; the relaxation's, all in HBM where it has a plan, within `relaxation_s`): the results, the cost of each plan
    that meets the placement constraints, their shards, and every start's name."""
    seed_solver, search = solvers
    starts = {"greedy": seed_solver.solve(instance, model, seed=seed, time_limit=max(0.05, time_left.left()))}
    if search_s > 0 and time_left.left() > 0.1:
        starts["neuroshard"] = search.solve(instance, model, seed=seed, time_limit=min(search_s, time_left.left()))
    costs = {n: float(r.predicted.max_cost) for n, r in starts.items() if r.plan is not None and r.predicted is not None
             and not constraint_violations(instance, r.plan.shards)}
    shards_of = {n: list(r.plan.shards) for n, r in starts.items() if n in costs and r.plan is not None}
    names = list(starts)
    # (where the tables exceed the HBM the bound's counting argument says so at once, without a solver)
    got = relaxation_start(instance, cost_model, bm, relaxation_s) if relaxation_s > 0 else None
    if got is not None:
        names.append("relaxation")
        if got["cost"] is not None and not constraint_violations(instance, got["shards"]):
            costs["relaxation"], shards_of["relaxation"] = got["cost"], got["shards"]
    return starts, costs, shards_of, names
