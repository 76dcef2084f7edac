"""Classes of defect a fuzz with placement constraints found, each held on a small case of its class.

- A `min_partition` wider than the table means the table is never cut by columns (TorchRec's column block is
  min(min_partition, dim)): the checker holds every plan to it, and no solver cuts such a table.
- A column_wise-only table a search cannot cut (4 columns, a min_partition as wide as it) or that sits in a
  co-locate / separate group is placed whole with its shard marked column-wise, as greedy does, not given up on.
- TorchRec's planner refuses a topology it cannot take before it plans, by name, whatever the time limit.
"""

from __future__ import annotations

import json

import pytest
from conftest import make_instance

from costmodels.analytic import AnalyticCostModel
from shardopt.core.ir import Instance, Plan, Shard, instance_from_dict
from shardopt.core.plan_check import check_plan
from solvers.catalog import get_solver

SEARCHES = ("neuroshard", "neuroshard_faithful", "cpsat", "milp_highs")


def _constrained(inst: Instance, constraints: dict, dims: dict[int, int] | None = None) -> Instance:
    doc = json.loads(inst.model_dump_json())
    for i, d in (dims or {}).items():
        doc["tables"][i]["dim"] = d
    doc["constraints"] = constraints
    return instance_from_dict(doc)


def _cut_tables(inst: Instance, plan: Plan) -> set[str]:
    index = inst.table_index()
    return {s.table for s in plan.shards if s.width(inst.tables[index[s.table]]) < inst.tables[index[s.table]].dim}


def test_the_checker_refuses_a_column_cut_of_a_table_narrower_than_its_min_partition() -> None:
    inst = _constrained(make_instance(2, 2, seed=1), {"tables": [{"table": "t0", "min_partition": 512}]})
    t0 = inst.tables[0]
    half = t0.dim // 2
    cut = [Shard(table="t0", device=0, col_offset=0, cols=half), Shard(table="t0", device=1, col_offset=half, cols=t0.dim - half),
           Shard(table="t1", device=0)]
    report = check_plan(inst, cut)
    assert not report.ok and "min_partition 512" in str(report)
    assert check_plan(inst, [Shard(table="t0", device=0), Shard(table="t1", device=1)]).ok


@pytest.mark.parametrize("solver", SEARCHES)
def test_no_search_cuts_a_table_whose_min_partition_is_wider_than_it(solver: str) -> None:
    """Four of eight tables carry a min_partition 64 columns wider than they are; the searches, which cut the hot
    tables of this instance when free, keep those four whole in columns."""
    base = make_instance(8, 4, seed=3, mem_factor=1.3)
    wide = {t.name for t in base.tables[:4]}
    inst = _constrained(base, {"tables": [{"table": t.name, "min_partition": t.dim + 64} for t in base.tables[:4]]})
    r = get_solver(solver).solve(inst, AnalyticCostModel(), time_limit=5, seed=0)
    assert r.status.has_plan, r.reason
    assert check_plan(inst, r.plan).ok
    assert not _cut_tables(inst, r.plan) & wide


CANNOT_CUT = {
    "four columns": ({"tables": [{"table": "t0", "sharding_types": ["column_wise"]}]}, {0: 4}),
    "min_partition as wide": ({"tables": [{"table": "t0", "sharding_types": ["column_wise"], "min_partition": 512}]}, None),
    "in a separate group": ({"tables": [{"table": "t0", "sharding_types": ["column_wise"]}], "separate": [["t0", "t1"]]}, None),
}


@pytest.mark.parametrize("solver", SEARCHES)
@pytest.mark.parametrize("case", sorted(CANNOT_CUT))
def test_a_column_wise_only_table_that_cannot_be_cut_is_placed_whole_and_marked(solver: str, case: str) -> None:
    constraints, dims = CANNOT_CUT[case]
    inst = _constrained(make_instance(6, 4, seed=2), constraints, dims)
    greedy = get_solver("greedy").solve(inst, AnalyticCostModel(), seed=0)
    assert greedy.status.has_plan  # (greedy places it: a search seeded by greedy must too)
    r = get_solver(solver).solve(inst, AnalyticCostModel(), time_limit=5, seed=0)
    assert r.status.has_plan, r.reason
    assert check_plan(inst, r.plan).ok
    t0 = [s for s in r.plan.shards if s.table == "t0"]
    assert len(t0) == 1 and t0[0].column_wise  # (one whole shard, in the column-wise collective)


def test_torchrec_refuses_three_levels_before_it_plans() -> None:
    pytest.importorskip("torchrec")
    from shardopt.data.torchrec_io import TorchRecTopologyError

    doc = json.loads(make_instance(8, 8, seed=0).model_dump_json())
    doc["topology"].update(devices_per_host=2, levels=[
        {"name": "host", "devices": 2, "bandwidth": 4e11}, {"name": "nvlink_domain", "devices": 4, "bandwidth": 2e11},
        {"name": "network", "devices": 8, "bandwidth": 2.5e10}])
    inst = instance_from_dict(doc)
    for limit in (2.0, 10.0):
        with pytest.raises(TorchRecTopologyError, match="topology.levels: TorchRec's planner models two levels"):
            get_solver("torchrec").solve(inst, AnalyticCostModel(), time_limit=limit, seed=0)


def _tight_unequal(seed: int) -> Instance:
    """benchmarks/bench_exact_packing.py's instance: tables cut from devices of unequal memory, 99.5 % full."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_exact_packing.py"
    spec = importlib.util.spec_from_file_location("bench_exact_packing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tight_unequal_instance(seed)


def test_the_packer_solves_the_assignment_where_every_first_fit_order_misses_it() -> None:
    """Devices of unequal memory filled to 99.5 %: the solver's own order, the bytes order, worst fit and best fit
    each leave a table unplaced; the exact packing places every table, so greedy (and the searches it seeds) answer
    with a plan, never "no plan", where a table-wise packing exists."""
    inst = _tight_unequal(2)
    r = get_solver("greedy").solve(inst, AnalyticCostModel(), seed=0)
    assert r.status.has_plan, r.reason
    assert check_plan(inst, r.plan).ok
    assert r.packing.stage == "exact_packing", r.packing.stages_tried
    assert {"primary", "worst_fit", "best_fit"} <= set(r.packing.stages_tried)


def test_exact_packing_keeps_pins_and_groups() -> None:
    import numpy as np

    from solvers.placement.exact_packing import exact_packing

    sizes = np.array([6, 5, 3, 1, 2])
    caps = np.array([10, 10])
    allowed = np.ones((5, 2), dtype=bool)
    allowed[0] = [False, True]  # t0 pinned to device 1
    got = exact_packing(sizes, caps, allowed=allowed, apart=[{1}, {0}, set(), set(), set()],
                        together=[set(), set(), {3}, {2}, set()])
    assert got is not None and got[0] == 1 and got[1] == 0 and got[2] == got[3]
    assert (np.bincount(got, weights=sizes, minlength=2) <= caps).all()
    assert exact_packing(np.array([6, 6]), np.array([10, 10]), together=[{1}, {0}]) is None  # (proven: no room together)


def test_a_row_split_over_the_only_device_is_the_whole_table() -> None:
    """On one device a table allowed only row_wise or table_row_wise has one layout: one shard of every row, which
    the checker must accept (TorchRec's row_wise on one rank is that shard)."""
    doc = json.loads(make_instance(3, 1, seed=4).model_dump_json())
    doc["constraints"] = {"tables": [{"table": "t0", "sharding_types": ["table_row_wise"]}, {"table": "t1", "sharding_types": ["row_wise"]}]}
    inst = instance_from_dict(doc)
    assert check_plan(inst, [Shard(table=t.name, device=0) for t in inst.tables]).ok
    for solver in ("greedy", "neuroshard", "cpsat"):
        r = get_solver(solver).solve(inst, AnalyticCostModel(), time_limit=5, seed=0)
        assert r.status.has_plan and check_plan(inst, r.plan).ok, (solver, r.reason)
