"""The exact solvers beyond table-wise HBM (issue 17): on instances that need row-wise or host-memory placements they
start from the best tiered plan, keep its row-wise and host-memory shards, and re-place its HBM tables exactly; the
base those fixed shards give every device is costed exactly by the linear model at its expansion point and by the
full model's judgement."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import solve_on_budget

from costmodels.registry import get_cost_model
from shardopt.core.ir import load_instance
from shardopt.core.plan_check import check_plan
from solvers.base import SolveStatus
from solvers.catalog import get_solver
from solvers.exact.formulation import plan_cost
from solvers.exact.linearize import linearize
from solvers.exact.tiered import split_tiered
from solvers.placement.split_items import build_items

ROOT = Path(__file__).resolve().parents[1]
HUGE = ROOT / "instances" / "suites" / "huge-test" / "huge-test-s1-0000.json"
TIERED = ROOT / "instances" / "suites" / "tiered-test" / "tiered-test-s1-0001.json"
CM = get_cost_model("analytic")


def tiered_start(path: Path):  # noqa: ANN201
    inst = load_instance(path)
    # (greedy's tiered plan: NeuroShard's uneven column pieces now hold huge-test-s1-0000 in HBM, no tiers to split)
    plan = get_solver("greedy").solve(inst, CM, seed=0, time_limit=3).plan
    assert plan is not None
    return inst, plan


@pytest.mark.parametrize("path", [HUGE, TIERED])
def test_the_base_is_costed_exactly(path: Path) -> None:
    inst, plan = tiered_start(path)
    bm = CM.bind(inst)
    split = split_tiered(inst, bm, plan.shards)
    assert split is not None and split.fixed and split.movable
    assert {s.table for s in split.fixed}.isdisjoint({s.table for s in split.movable})
    assert all(s.kernel.value == "fused" and s.rows is None and not s.replicated for s in split.movable)
    sub_bm = CM.bind(split.sub)
    D = inst.topology.num_devices
    items = build_items(split.sub, sub_bm, np.arange(len(split.sub.tables)), 8)
    items = dataclasses.replace(items, base_states=split.base_states, base_widths=split.base_widths, base_extra=split.base_extra,
                                base_dists=split.base_dists)
    counts = items.counts_from_shards(split.sub, split.movable, D)
    assert counts is not None
    whole = bm.plan_costs(plan.shards)
    assert plan_cost(sub_bm, items, counts) == pytest.approx(whole.max_cost, rel=1e-9)
    lin = linearize(sub_bm, counts, "planes", items)
    assert np.allclose(lin.device_costs(counts), whole.total, rtol=1e-9)  # exact at the expansion point, base included
    caps = np.array(inst.topology.capacities())
    assert (np.array(split.sub.topology.capacities()) == np.maximum(caps - split.fixed_hbm, 1)).all()


@pytest.mark.parametrize("name", ["cpsat", "milp_highs"])
@pytest.mark.parametrize("path", [HUGE, TIERED])
def test_exact_solvers_place_instances_that_need_tiers(name: str, path: Path) -> None:
    inst = load_instance(path)
    # (relaxation_share=0, neuroshard_share=0: the relaxation's plan, of any column widths, and the default solver's hold
    # huge-test-s1-0000 in HBM, and the tiered path is not taken: test_the_relaxation_start_holds_huge_test_in_hbm)
    r = solve_on_budget(name, inst, CM, 3 if name == "cpsat" else 8, seed=0, relaxation_share=0, neuroshard_share=0)
    assert r.status.has_plan and r.status is not SolveStatus.optimal, (r.status, r.reason)
    assert check_plan(inst, r.plan).ok  # both memory tiers, every table covered once
    tiered = r.info["tiered"]
    assert r.predicted_cost <= tiered["start_cost"] * (1 + 1e-9)  # never worse than its start
    if tiered["fixed_tables"]:
        assert any(s.rows is not None or s.kernel.value != "fused" for s in r.plan.shards)
        assert "tiered" in r.plan.params["placements"]
    else:  # the start (NeuroShard's uneven column pieces: huge-test-s1-0000) holds every table in HBM
        assert all(s.rows is None and s.kernel.value == "fused" and not s.replicated for s in r.plan.shards)
        assert "all in HBM" in r.plan.params["placements"]


def test_fixed_shards_are_kept_as_the_start_has_them() -> None:
    inst = load_instance(HUGE)
    r = solve_on_budget("cpsat", inst, CM, 3, seed=0, tiered_share=0.0, relaxation_share=0, neuroshard_share=0)  # (greedy's plan is the only start)
    assert r.info["tiered"]["start"] == "greedy"
    start = get_solver("greedy").solve(inst, CM, seed=0).plan
    fixed_tables = {s.table for s in start.shards if s.rows is not None or s.kernel.value != "fused" or s.replicated}
    assert fixed_tables and len(fixed_tables) == r.info["tiered"]["fixed_tables"]
    mine = sorted((s.table, s.device, s.row_offset, s.kernel.value) for s in r.plan.shards if s.table in fixed_tables)
    theirs = sorted((s.table, s.device, s.row_offset, s.kernel.value) for s in start.shards if s.table in fixed_tables)
    assert mine == theirs


def test_tiered_off_keeps_the_old_answer() -> None:
    inst = load_instance(HUGE)
    r = solve_on_budget("cpsat", inst, CM, 5, seed=0, tiered=False, relaxation_share=0, neuroshard_share=0)
    assert r.status is SolveStatus.no_solution and "not proven infeasible" in r.reason


def test_a_host_memory_table_is_no_item_of_the_exact_model() -> None:
    """Every item is an HBM shard: a start plan with a table in host memory (whole, behind a cache) cannot be read
    as item counts (it would be that table in its device's HBM: the over-capacity plan cpsat once returned on
    random-868 of benchmarks/bench_tiered.py), while the same plan with the table in HBM can."""
    from shardopt.core.ir import Kernel, Shard

    inst = load_instance(ROOT / "instances" / "examples" / "small.json")
    bm = CM.bind(inst)
    items = build_items(inst, bm)
    D = inst.topology.num_devices
    shards = [Shard(table=t.name, device=k % D) for k, t in enumerate(inst.tables)]
    assert items.counts_from_shards(inst, shards, D) is not None
    shards[0] = Shard(table=inst.tables[0].name, device=0, kernel=Kernel.fused_uvm_caching, cache_load_factor=0.2)
    assert items.counts_from_shards(inst, shards, D) is None


@pytest.mark.slow  # (make test-all; 24 s)
def test_the_relaxation_start_holds_huge_test_in_hbm() -> None:
    """huge-test-s1-0000's 60 GB table in eighths does not pack with the rest (CP-SAT proves it); the plan of the
    analytic bound's relaxation, of any 4-aligned widths, does: cpsat starts from it and stays in HBM, within 5 % of
    its tiered path (simulated: 2.850 against about 2.78 ms, whose NeuroShard start holds the table in HBM in pieces of its
    one-collective state)."""
    inst = load_instance(HUGE)
    # (on a wall-clock limit: the relaxation start runs only there, as HiGHS's root node has no deterministic limit)
    # (20 s: the relaxation's share, 6 s; at 8 s its 2.4 s found no plan on a 2-core Intel Xeon, 2026-12-04)
    r = get_solver("cpsat").solve(inst, CM, seed=0, time_limit=20)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert all(s.rows is None and s.kernel.value == "fused" and not s.replicated for s in r.plan.shards)
    assert r.stats.warm_starts.get("relaxation") is not None
    tiered = get_solver("cpsat", relaxation_share=0, neuroshard_share=0).solve(inst, CM, seed=0, time_limit=8)
    assert r.predicted_cost <= tiered.predicted_cost * 1.05


@pytest.mark.parametrize("time_limit", [1.0, 2.0])
def test_a_short_tiered_solve_is_never_worse_than_its_start(time_limit: float) -> None:
    """The start's fixed shards keep their column_wise marks; the re-placed whole HBM tables are marked too wherever the
    column-wise collective runs anyway (here: the fixed shards' own), as the items priced them. Rebuilt unmarked, a
    plan of the start's own placements ran a second collective and came back dearer than its start (12.30 against
    11.79 ms at 1 s, simulated). Any limit, however the machine's load cuts the search."""
    inst = load_instance(TIERED)
    r = get_solver("cpsat", relaxation_share=0, neuroshard_share=0).solve(inst, CM, seed=0, time_limit=time_limit)
    assert r.plan is not None and check_plan(inst, r.plan).ok
    assert r.predicted_cost <= r.info["tiered"]["start_cost"] * (1 + 1e-9)
