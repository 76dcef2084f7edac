"""Whole tables cut in place into the column-wise collective (solvers.placement.collectives)."""

from __future__ import annotations

from conftest import make_instance

from costmodels.analytic import AnalyticCostModel
from costmodels.hierarchical import output_dist_widths
from shardopt.core.ir import Shard, instance_from_dict
from shardopt.core.plan_check import check_plan
from solvers.placement.collectives import cut_in_place, join_one_collective

CM = AnalyticCostModel()


def _mixed_plan(inst):  # noqa: ANN001, ANN202
    """t0 cut in halves on devices 0 and 1 (column-wise), every other table whole round the devices (table-wise)."""
    t0 = inst.tables[0]
    shards = [Shard(table=t0.name, device=0, col_offset=0, cols=t0.dim // 2), Shard(table=t0.name, device=1, col_offset=t0.dim // 2, cols=t0.dim // 2)]
    return shards + [Shard(table=t.name, device=k % inst.topology.num_devices) for k, t in enumerate(inst.tables[1:])]


def test_cut_in_place_makes_one_collective_of_equal_halves_that_fit() -> None:
    inst = make_instance(8, 3, seed=2, mem_factor=2.0, batch_size=65536)
    plan = _mixed_plan(inst)
    cut, n = cut_in_place(inst, plan)
    assert check_plan(inst, cut).ok and n == sum(1 for t in inst.tables[1:] if t.dim % 8 == 0)
    assert output_dist_widths(inst, cut)[1] == ["column_wise"]
    for t in inst.tables[1:]:
        mine = [s for s in cut if s.table == t.name]
        assert len({s.device for s in mine}) == 1 and {s.width(t) for s in mine} == {t.dim // 2} and len(mine) == 2


def test_cut_in_place_keeps_tables_the_constraints_or_the_memory_keep_whole() -> None:
    inst = make_instance(8, 3, seed=2, mem_factor=2.0, batch_size=65536)
    doc = inst.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": "t1", "sharding_types": ["table_wise"]}]}
    cut, _ = cut_in_place(instance_from_dict(doc), _mixed_plan(inst))
    assert sum(1 for s in cut if s.table == "t1") == 1
    from shardopt.core.memory import device_memory_use

    plan = _mixed_plan(inst)  # (rowwise_adagrad: a second shard holds a second row of optimizer state per row)
    use = device_memory_use(inst, plan)
    doc = inst.model_dump(mode="json")
    doc["topology"]["memory_bytes"] = int(use.max())  # no room for a second shard on the fullest device
    full = instance_from_dict(doc)
    cut, n = cut_in_place(full, plan)
    fullest = int(use.argmax())
    assert check_plan(full, cut).ok and n > 0
    assert all(s.cols is None for s in cut if s.device == fullest and s.table != inst.tables[0].name)


def test_join_keeps_the_cheaper_plan() -> None:
    inst = make_instance(8, 3, seed=2, mem_factor=2.0, batch_size=65536)
    bm = CM.bind(inst)
    plan = _mixed_plan(inst)
    got, n, cost = join_one_collective(inst, bm, plan)
    before = bm.plan_costs(plan).max_cost
    assert cost == bm.plan_costs(got).max_cost <= before
    assert (n > 0) == (cost < before)
