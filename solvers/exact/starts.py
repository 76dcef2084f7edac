"""Warm starts of the exact solvers beyond the heuristics' plans: the plan of the certified bound's relaxation."""

from __future__ import annotations

from typing import Any

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.ir import Instance
from shardopt.core.plan_check import check_plan

RELAXATION_MAX_PAIRS = 2_000


def relaxation_start(instance: Instance, cost_model: CostModel, bm: BoundCostModel, time_limit: float) -> dict[str, Any] | None:
    """The plan of `shardopt bound`'s relaxation (solvers.bound: HiGHS's best solution of the MILP whose
    optimum bounds every table- and column-wise plan, itself a plan of any 4-aligned column widths) as a warm start,
    judged by the full model; None for a cost model other than the analytic one or a model of more than
    RELAXATION_MAX_PAIRS (table, device) pairs (there the bound takes its symmetric LP, which has no plan).

    Not for a measured model: the relaxation of its analytic surrogate (the card's refitted profile) gave plans
    1.3-3x the greedy start under the neural model, and the searches' plans changed by -0.1 / +0.4 % (geometric mean,
    simulated, cpu-test and the H200 campaign suite; benchmarks/bench_relaxation_start.py, docs/benchmarks.md) for
    30 % of the time limit.

    Why: on many devices the relaxation's plan cuts tables into pieces of whatever widths fill the devices, which
    neither the dyadic items nor NeuroShard's halvings reach (bench_tiered random-505, 16 GH200s at 83 % of HBM:
    NeuroShard's pieces do not pack and it splits tables by rows, 0.285 ms; the relaxation's plan at 10 s, 0.212;
    TorchRec 0.234; simulated)."""
    from solvers.bound import BoundError, analytic_lower_bound

    if len(instance.tables) * instance.topology.num_devices > RELAXATION_MAX_PAIRS or time_limit <= 0:
        return None
    try:
        res = analytic_lower_bound(instance, cost_model, time_limit=time_limit)
    except BoundError:  # (not the analytic model)
        return None
    row: dict[str, Any] = {"solver": "relaxation", "status": res.status, "cost": None}
    if res.plan is not None and check_plan(instance, res.plan).ok:
        row.update(cost=float(bm.plan_costs(res.plan).max_cost), shards=list(res.plan.shards))
    return row
