"""Row splits held within one host (TorchRec's table_row_wise): reduce-scatter in the host, then all-to-all across
hosts, priced apart from the all-to-all (costmodels/hierarchical.py, docs/analytic-model.md)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodels.analytic import AnalyticCostModel
from costmodels.hierarchical import in_host_row_split, in_host_row_split_tables, table_comm_widths
from costmodels.registry import get_cost_model
from shardopt.core.hardware import get_profile
from shardopt.core.ir import Instance, Shard, instance_from_dict
from shardopt.core.plan_check import check_plan
from solvers.exact.tiered import split_tiered
from solvers.neuroshard.grid import PieceModel
from solvers.placement.plan_moves import PlanShards
from solvers.placement.polish import layout_of, polish_placements
from solvers.placement.tiering import row_wise_shards

BATCH = 65536


def _instance(inter_bw: float | None = None, devices: int = 8, per_host: int = 4, hot_rows: int = 4_000_000) -> Instance:
    """A hot table and seven small ones on 2 hosts x 4 devices (a100)."""
    tables = [{"name": "hot", "rows": hot_rows, "dim": 16, "pooling_factor": 80.0, "access": {"zipf": 0.6}}]
    tables += [{"name": f"t{i}", "rows": 50_000, "dim": 16, "pooling_factor": 2.0, "access": {"zipf": 0.5}} for i in range(7)]
    topo: dict = {"num_devices": devices, "devices_per_host": per_host, "memory_bytes": 8 * 2**30, "hardware": "a100"}
    if inter_bw is not None:
        topo["inter_host_bandwidth"] = inter_bw
    return instance_from_dict({"schema_version": 1, "kind": "instance", "name": "hot-on-two-hosts", "tables": tables,
                               "topology": topo, "workload": {"batch_size": BATCH, "optimizer": "rowwise_adagrad"}})


def _others(inst: Instance) -> list[Shard]:
    return [Shard(table=t.name, device=i % inst.topology.num_devices) for i, t in enumerate(inst.tables) if t.name != "hot"]


def test_table_row_wise_costs_the_bytes_of_a_reduce_scatter_in_the_host_then_an_all_to_all_across_hosts() -> None:
    """Hand count, from the profile's bandwidths: the hot table (width 16) split over host 0's 4 devices, nothing else.
    Host 0's devices each send (L-1)/L x B x 16 x 4 bytes over NVLink and (H-1) x B/D x 16 x 4 over the network; host
    1's devices receive B/D x 16 x 4 over the network; both collectives' start-ups on every device."""
    inst = _instance()
    p = get_profile("a100")
    hot = inst.tables[0]
    plan = row_wise_shards(hot, [0, 1, 2, 3])
    cols = AnalyticCostModel().bind(inst).plan_costs(plan).columns
    L, H, D, w = 4, 2, 8, 16
    nvlink = (L - 1) / L * BATCH * w * 4 / p.nvlink_bandwidth
    net = (H - 1) * BATCH / D * w * 4 / p.network_bandwidth
    start = 2 * p.alltoall_latency_s + p.network_latency_s
    # (no table is table-, column- or row-wise: no all-to-all runs, so none of its start-up is paid)
    expected = np.array([nvlink + net + start] * 4 + [net + start] * 4) * 1e3
    assert np.allclose(cols[:, 2], expected, rtol=1e-12)
    assert np.allclose(cols[:, 3], expected, rtol=1e-12)  # backward: all-to-all back, all-gather in the host


def test_table_row_wise_moves_devices_per_host_times_fewer_network_bytes_than_the_direct_reduce_scatter() -> None:
    """On a slow network the two layouts differ by what crosses it: per device of the table's host, 1 x B/D x w
    (table_row_wise) against L x B/D x w for the same rows held over the host and reduce-scattered directly."""
    fast = 1e18  # NVLink that costs nothing: only the network and the start-ups remain
    inst = instance_from_dict({**_instance(inter_bw=1e9).model_dump(mode="json"),
                               "topology": {**_instance(inter_bw=1e9).topology.model_dump(mode="json"), "intra_host_bandwidth": fast}})
    bm = AnalyticCostModel().bind(inst)
    hot = inst.tables[0]
    twrw = bm.plan_costs(row_wise_shards(hot, [0, 1, 2, 3])).columns[0, 2]  # (its collectives only: no all-to-all runs)
    empty = bm.comm_costs(np.zeros(8))[0, 0]
    direct_dims = np.array([16.0] * 4 + [0.0] * 4)  # the same blocks in the all-to-all accounting
    direct = bm.comm_costs(direct_dims)[0, 0]
    per_unit = BATCH / 8 * 4 / 1e9 * 1e3  # ms per unit of width and peer over the network
    p = get_profile("a100")
    assert twrw == pytest.approx(16 * per_unit + (2 * p.alltoall_latency_s + p.network_latency_s) * 1e3, rel=1e-6)
    assert direct - empty == pytest.approx(4 * 16 * per_unit, rel=1e-6)


def test_only_whole_host_row_splits_leave_the_all_to_all() -> None:
    inst = _instance()
    hot = inst.tables[0]
    cases = {
        "whole host": (row_wise_shards(hot, [4, 5, 6, 7]), [0, 16]),
        "part of a host": (row_wise_shards(hot, [0, 1]), [0, 0]),
        "across hosts": (row_wise_shards(hot, range(8)), [0, 0]),
        "whole table": ([Shard(table="hot", device=3)], [0, 0]),
        "grid": ([s.model_copy(update={"cols": 8}) for s in row_wise_shards(hot, [0, 1, 2, 3])]
                 + [s.model_copy(update={"col_offset": 8, "cols": 8}) for s in row_wise_shards(hot, [4, 5, 6, 7])], [8, 8]),
    }
    for what, (shards, hier) in cases.items():
        direct, h = table_comm_widths(inst, hot, shards)
        assert h.tolist() == hier, what
        flags = in_host_row_split(inst, hot, shards)
        assert direct.sum() == sum(s.width(hot) for s, f in zip(shards, flags) if not f), what
    one_host = _instance(per_host=8)  # a single host: every row split is the direct reduce-scatter (TorchRec: row_wise)
    assert not any(in_host_row_split(one_host, one_host.tables[0], row_wise_shards(one_host.tables[0], [0, 1, 2, 3])))
    assert in_host_row_split_tables(inst, row_wise_shards(hot, [0, 1, 2, 3]) + _others(inst)) == ["hot"]


def test_a_plan_without_such_splits_costs_what_it_did() -> None:
    """The all-to-all accounting is untouched where no host holds a row split: row-wise over all devices and a
    split over part of a host price exactly as the direct reduce-scatter (widths in an all-to-all), in the
    all-to-all of their sharding type (row_wise, table_row_wise), apart from the table-wise tables' one."""
    inst = _instance()
    bm = AnalyticCostModel().bind(inst)
    for shards in (row_wise_shards(inst.tables[0], range(8)), row_wise_shards(inst.tables[0], [2, 3])):
        plan = shards + _others(inst)
        states = sum(np.eye(8)[s.device][:, None] * bm.shard_contribution(s)[1][None, :] for s in plan)
        rows = [np.bincount([s.device for s in part], weights=[bm.shard_contribution(s)[2] for s in part], minlength=8)
                for part in (shards, _others(inst))]
        expected = bm.device_costs(states, rows[0]).columns
        expected[:, 2:4] += bm.comm_costs(rows[1])
        assert np.allclose(bm.plan_costs(plan).columns, expected, rtol=1e-12)


def test_the_neural_model_prices_the_hierarchical_collectives_by_the_same_formula() -> None:
    inst = _instance()
    widths = np.array([[16.0, 0.0], [8.0, 24.0]])
    analytic = AnalyticCostModel().bind(inst).hierarchical_comm(widths)
    neural = get_cost_model("neural").bind(inst).hierarchical_comm(widths)
    assert analytic.shape == (2, 8) and np.allclose(neural, analytic)
    plan = row_wise_shards(inst.tables[0], [0, 1, 2, 3]) + _others(inst)
    nb = get_cost_model("neural").bind(inst)
    # its plan cost adds exactly that term to its own all-to-all
    _, dims, _, hier = nb.shard_sums(plan)
    dims = dims.sum(axis=0)  # (one output dist: the table-wise tables')
    assert hier.tolist() == [16.0, 0.0] and dims.sum() == 16 * 7
    assert np.allclose(nb.plan_costs(plan).columns[:, 2], nb.comm_costs(dims)[:, 0] + analytic[0])


def test_searches_around_a_fixed_table_row_wise_split_see_its_comm() -> None:
    """The device polish of neuroshard (PieceModel over layout_of), the move search of replan/explain (PlanShards)
    and the exact solvers' tiered split take the split's collectives as a per-device constant: their plan cost is the
    judge's."""
    inst = _instance(inter_bw=5e9)
    bm = AnalyticCostModel().bind(inst)
    plan = row_wise_shards(inst.tables[0], [0, 1, 2, 3]) + _others(inst)
    judge = bm.plan_costs(plan)
    ps = PlanShards(inst, bm, plan)
    assert ps.cost == pytest.approx(judge.max_cost, rel=1e-12)
    assert np.allclose(ps.columns(), judge.columns)
    assert not ps.movable[:4].any() and ps.movable[4:].all()
    pm = PieceModel(inst, bm, layout_of(inst, plan))
    pieces = [(i, 0, 16) for i in range(1, 8)]
    states, widths, _, _ = pm.info(pieces)
    cost, totals = pm.plan_cost(states, widths, np.array([s.device for s in plan[4:]]), pm.rows(pieces))
    assert cost == pytest.approx(judge.max_cost, rel=1e-12) and np.allclose(totals, judge.total)
    split = split_tiered(inst, bm, plan)
    assert split is not None and np.allclose(split.base_extra, 2 * bm.hierarchical_comm(np.array([16.0, 0.0])))


def test_the_polish_splits_a_hot_table_within_its_host_where_the_network_is_slow() -> None:
    """One hot table on one device of 2 hosts x 4 over a 5 GB/s network: split over all 8 devices its partial sums
    cross the network from every device; over its own host only one B/D share per device does. The polish takes the
    table_row_wise split (simulated: 1.629 -> 1.423 ms, the row_wise one would cost 1.865), and says so."""
    inst = _instance(inter_bw=5e9)
    bm = AnalyticCostModel().bind(inst)
    plan = [Shard(table=t.name, device=i) for i, t in enumerate(inst.tables)]
    out, info = polish_placements(inst, bm, plan, row_wise=True)
    assert (info["moves"][0]["table"], info["moves"][0]["move"]) == ("hot", "table-row-wise")
    assert in_host_row_split_tables(inst, out)[0] == "hot"
    assert check_plan(inst, out).ok
    assert info["cost_after"] == pytest.approx(bm.plan_costs(out).max_cost, rel=1e-12)
    row_wise = bm.plan_costs(row_wise_shards(inst.tables[0], range(8)) + plan[1:]).max_cost
    assert info["cost_after"] < row_wise and info["cost_after"] < info["cost_before"]


def test_measured_comm_refuses_a_row_split_within_a_host_by_name() -> None:
    from shardopt.core.ir import Plan
    from shardopt.measure.backends.cuda_dist import DistSetupError, validate
    from shardopt.measure.plan_timing import MeasureError, plan_comm

    inst = _instance()
    plan = Plan(shards=row_wise_shards(inst.tables[0], [0, 1, 2, 3]) + _others(inst), solver="test")
    with pytest.raises(MeasureError, match="'hot'.*table_row_wise"):
        plan_comm(inst, plan, "cpu", "measured")
    with pytest.raises(DistSetupError, match="'hot'.*table_row_wise"):
        validate(inst, plan, 8)


def test_a_table_too_big_for_any_device_is_split_within_the_roomiest_host() -> None:
    """The tiering layout: a table 2.5 devices big on 2 hosts x 4 devices goes table_row_wise on one host (blocks
    of rows / 4), the next such table on the other host (it has the most room left); on one host of 8 devices the
    same tables are split over all devices (row_wise). Both plans export to TorchRec."""
    from shardopt.data.torchrec_io import classify_table, export_problems
    from solvers.catalog import get_solver
    from solvers.placement.tiering import plan_tiers

    def inst(per_host: int) -> Instance:
        big = {"rows": 2_000_000, "dim": 64, "pooling_factor": 10.0, "access": {"zipf": 0.8}}
        tables = [{"name": "big0", **big}, {"name": "big1", **big}]
        tables += [{"name": f"t{i}", "rows": 20_000, "dim": 32, "pooling_factor": 4.0, "access": {"zipf": 0.5}} for i in range(6)]
        one = 2_000_000 * 64 * 4 + 2_000_000 * 4  # a big table's weights + rowwise_adagrad state
        return instance_from_dict({"schema_version": 1, "kind": "instance", "name": "two-big", "tables": tables,
                                   "topology": {"num_devices": 8, "devices_per_host": per_host, "memory_bytes": int(one / 2.5), "hardware": "a100"},
                                   "workload": {"batch_size": 16384, "optimizer": "rowwise_adagrad"}})

    two_hosts = inst(4)
    layout = plan_tiers(two_hosts)
    assert not isinstance(layout, str)
    by_table = {name: {two_hosts.topology.host_of(s.device) for s in layout.fixed if s.table == name} for name in ("big0", "big1")}
    assert by_table == {"big0": {0}, "big1": {1}}
    r = get_solver("greedy").solve(two_hosts, get_cost_model("analytic"), seed=0)
    assert r.status.has_plan and check_plan(two_hosts, r.plan).ok and not export_problems(two_hosts, r.plan)
    for name in ("big0", "big1"):
        shards = [s for s in r.plan.shards if s.table == name]
        assert classify_table(two_hosts, two_hosts.tables[int(name[-1])], shards) == "table_row_wise"
    one_host = inst(8)
    layout = plan_tiers(one_host)
    assert not isinstance(layout, str)
    assert sorted(s.device for s in layout.fixed if s.table == "big0") == list(range(8))


def test_neuroshard_searches_both_layouts_of_the_oversized_tables_and_keeps_the_cheaper() -> None:
    """huge-test-s1-0001 (2 hosts x 4 A100s): split within one host, the 54 GB table t357 fills that host's HBM and the
    239 GB table t362 in host memory gets no cache (25.3 ms simulated); split over all 8 devices it leaves room for
    t362's cache (16.8 ms). neuroshard searches greedy's layouts, both ways among them, and keeps the cheapest; which
    one it is, the cost model says."""
    from pathlib import Path

    from shardopt.core.ir import load_instance
    from solvers.catalog import get_solver

    inst = load_instance(Path(__file__).resolve().parents[1] / "instances" / "suites" / "huge-test" / "huge-test-s1-0001.json")
    cm = get_cost_model("analytic")
    r = get_solver("neuroshard").solve(inst, cm, seed=0, time_limit=6)
    assert r.plan is not None and check_plan(inst, r.plan).ok
    compared = r.info["layouts_compared"]
    assert {c["within_host"] for c in compared} == {True, False}  # both ways searched
    assert compared[0]["cost"] <= min(c["cost"] for c in compared)  # greedy's cheapest packed layout first
    cost = cm.bind(inst).plan_costs(r.plan).max_cost
    best = min(compared, key=lambda c: c["searched_cost"])
    assert cost == pytest.approx(best["searched_cost"], rel=1e-9)
    assert r.info["row_splits_within_host"] is best["within_host"]


def test_the_heuristics_row_splits_option_picks_the_layout_of_the_oversized_tables() -> None:
    from shardopt.data.torchrec_io import classify_table
    from solvers.heuristics.constructive import GreedySolver

    big = {"rows": 2_000_000, "dim": 64, "pooling_factor": 10.0, "access": {"zipf": 0.8}}
    tables = [{"name": "big", **big}] + [{"name": f"t{i}", "rows": 20_000, "dim": 32, "pooling_factor": 4.0, "access": {"zipf": 0.5}} for i in range(6)]
    inst = instance_from_dict({"schema_version": 1, "kind": "instance", "name": "one-big", "tables": tables,
                               "topology": {"num_devices": 8, "devices_per_host": 4, "memory_bytes": int((2_000_000 * 68 * 4) / 2.5), "hardware": "a100"},
                               "workload": {"batch_size": 16384, "optimizer": "rowwise_adagrad"}})
    cm = get_cost_model("analytic")
    kinds = {}
    for choice in ("within_host", "all_devices", "auto"):
        r = GreedySolver(row_splits=choice).solve(inst, cm, seed=0)
        assert r.plan is not None and check_plan(inst, r.plan).ok
        kinds[choice] = classify_table(inst, inst.tables[0], [s for s in r.plan.shards if s.table == "big"])
        assert r.info["row_splits_within_host"] is (kinds[choice] == "table_row_wise")
    assert kinds["within_host"] == "table_row_wise" and kinds["all_devices"] == "row_wise"
    with pytest.raises(ValueError, match="option row_splits='both' for solver 'greedy': must be one of auto, within_host, all_devices"):
        GreedySolver(row_splits="both")
