"""Whole tables marked column-wise where they lie, joining the column-wise collective (solvers.placement.collectives)."""

from __future__ import annotations

from conftest import make_instance

from costmodels.analytic import AnalyticCostModel
from costmodels.hierarchical import output_dist_widths
from shardopt.core.ir import Shard, instance_from_dict
from shardopt.core.memory import device_memory_use
from shardopt.core.plan_check import check_plan
from solvers.placement.collectives import join_one_collective, mark_column_wise

CM = AnalyticCostModel()


def _mixed_plan(inst):  # noqa: ANN001, ANN202
    """t0 cut in halves on devices 0 and 1 (column-wise), every other table whole round the devices (table-wise)."""
    t0 = inst.tables[0]
    shards = [Shard(table=t0.name, device=0, col_offset=0, cols=t0.dim // 2), Shard(table=t0.name, device=1, col_offset=t0.dim // 2, cols=t0.dim // 2)]
    return shards + [Shard(table=t.name, device=k % inst.topology.num_devices) for k, t in enumerate(inst.tables[1:])]


def test_marking_makes_one_collective_without_moving_a_byte() -> None:
    inst = make_instance(8, 3, seed=2, mem_factor=2.0, batch_size=65536)
    plan = _mixed_plan(inst)
    marked, n = mark_column_wise(inst, plan)
    assert check_plan(inst, marked).ok and n == len(inst.tables) - 1
    assert output_dist_widths(inst, plan)[1] == ["table_wise", "column_wise"]
    assert output_dist_widths(inst, marked)[1] == ["column_wise"]
    assert (device_memory_use(inst, marked) == device_memory_use(inst, plan)).all()
    assert [(s.table, s.device, s.col_range(inst.tables[0])) for s in marked] == [(s.table, s.device, s.col_range(inst.tables[0])) for s in plan]
    bm = CM.bind(inst)
    a, b = bm.plan_costs(plan), bm.plan_costs(marked)
    assert (a.columns[:, :2] == b.columns[:, :2]).all()  # the same lookups: compute unchanged, only the all-to-alls merge
    assert b.max_cost < a.max_cost


def test_marking_keeps_tables_their_constraint_keeps_table_wise() -> None:
    inst = make_instance(8, 3, seed=2, mem_factor=2.0, batch_size=65536)
    doc = inst.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": "t1", "sharding_types": ["table_wise"]}]}
    marked, n = mark_column_wise(instance_from_dict(doc), _mixed_plan(inst))
    assert [s.column_wise for s in marked if s.table == "t1"] == [False] and n == len(inst.tables) - 2
    # a replica or a row split is never marked
    plan = [Shard(table="t1", device=d, replicated=True) for d in range(3)]
    plan += [Shard(table="t2", device=0, rows=10), Shard(table="t2", device=1, row_offset=10)]
    plan += [Shard(table=t.name, device=0) for t in inst.tables if t.name not in ("t1", "t2")]
    marked, n = mark_column_wise(inst, plan)
    assert n == len(inst.tables) - 2 and not any(s.column_wise for s in marked if s.table in ("t1", "t2"))


def test_join_keeps_the_cheaper_plan() -> None:
    inst = make_instance(8, 3, seed=2, mem_factor=2.0, batch_size=65536)
    bm = CM.bind(inst)
    plan = _mixed_plan(inst)
    got, n, cost = join_one_collective(inst, bm, plan)
    before = bm.plan_costs(plan).max_cost
    assert cost == bm.plan_costs(got).max_cost <= before
    assert (n > 0) == (cost < before)
    # a plan of whole tables only runs one collective already: marking them gains nothing, the plan is kept
    whole = [Shard(table=t.name, device=k % 3) for k, t in enumerate(inst.tables)]
    got, n, cost = join_one_collective(inst, bm, whole)
    assert n == 0 and got == whole


def test_items_mark_whole_tables_where_the_base_runs_the_column_wise_collective() -> None:
    """Items.shards marks a `whole_column_wise` table where its plan cuts a table or where the base (a tiered layout's
    fixed shards) has column-wise widths; with neither the plan stays table-wise."""
    import dataclasses

    import numpy as np

    from costmodels.hierarchical import DIST_ROW
    from shardopt.core.sharding_types import COLUMN_WISE
    from solvers.placement.split_items import build_items

    inst = make_instance(4, 2, seed=1, mem_factor=4.0)
    bm = CM.bind(inst)
    items = build_items(inst, bm, np.arange(4), 2, whole_column_wise=np.ones(4, dtype=bool))
    counts = items.counts_from_device_of(np.array([0, 1, 0, 1]), 2)
    assert not any(s.column_wise for s in items.shards(counts, inst))
    base = np.zeros((5, 2))
    base[DIST_ROW[COLUMN_WISE], 0] = 8.0
    with_base = dataclasses.replace(items, base_dists=base)
    assert all(s.column_wise for s in with_base.shards(counts, inst))
    cut = counts.copy()
    cut[items.first[0]] = 0
    cut[items.first[0] + 1] = [1, 1]  # (table 0 in two halves)
    marked = items.shards(cut, inst)
    assert [s.column_wise for s in marked if s.cols is None] == [True, True, True]
