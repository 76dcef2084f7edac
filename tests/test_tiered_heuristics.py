"""The heuristics beyond table-wise HBM (issue 17, item 3, first part): a table larger than every device is split
row-wise in TorchRec's layout instead of being refused, and tables beyond the cluster's HBM go to host memory behind
an HBM cache; every plan passes the two-tier checker."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import spec_instance

from costmodels.registry import get_cost_model
from shardopt.core.ir import Instance, Kernel, Plan, instance_from_dict, load_instance, to_dict
from shardopt.core.memory import table_bytes_array
from shardopt.core.plan_check import check_plan
from shardopt.data.torchrec_io import export_problems, rw_layout
from solvers.catalog import get_solver
from solvers.placement.tiering import CACHE_LOAD_FACTORS, HIT_TARGET, cached_lookup_share, plan_tiers

ROOT = Path(__file__).resolve().parents[1]
HEURISTICS = ["greedy", "size", "dim", "lookup", "size_lookup", "random", "round_robin"]


def small_doc() -> dict:
    return to_dict(load_instance(ROOT / "instances" / "examples" / "small.json"))


def oversized(factor: float = 1.5) -> dict:
    """small.json with table t00 grown to `factor` x a device's memory; the cluster still has room."""
    d = small_doc()
    cap = d["topology"]["memory_bytes"]
    t = d["tables"][0]
    t["rows"] = int(factor * cap / (t["dim"] * 4 + 4))
    return d


@pytest.mark.parametrize("solver", HEURISTICS)
def test_an_oversized_table_is_split_by_rows_not_refused(solver: str) -> None:
    inst = instance_from_dict(oversized())
    big = inst.tables[0]
    assert table_bytes_array(inst)[0] > max(inst.topology.capacities())
    r = get_solver(solver).solve(inst, get_cost_model("analytic"), seed=0)
    assert r.status.has_plan, r.reason
    assert check_plan(inst, r.plan).ok
    mine = sorted((s.row_offset, s.height(big), s.device) for s in r.plan.shards if s.table == big.name)
    expected = [(off, n, d) for d, (off, n) in enumerate(rw_layout(big.rows, inst.topology.num_devices)) if n > 0]
    assert mine == expected  # TorchRec's row_wise layout: it exports one to one
    assert r.plan.params["placements"]["row-wise, HBM"] == 1


@pytest.mark.parametrize("solver", ["greedy", "size", "random"])
def test_tables_beyond_hbm_go_to_host_memory(solver: str) -> None:
    d = small_doc()
    cap = d["topology"]["memory_bytes"]
    d["topology"]["memory_bytes"] = int(cap * 0.3)
    d["topology"]["host_memory_bytes"] = 2 * cap
    inst = instance_from_dict(d)
    assert table_bytes_array(inst).sum() > sum(inst.topology.capacities())
    r = get_solver(solver).solve(inst, get_cost_model("analytic"), seed=0)
    assert r.status.has_plan, r.reason
    res = check_plan(inst, r.plan)
    assert res.ok and res.host_memory_use.sum() > 0
    uvm = [s for s in r.plan.shards if s.kernel is not Kernel.fused]
    assert uvm and all(s.kernel is Kernel.fused_uvm_caching and s.cache_load_factor in CACHE_LOAD_FACTORS for s in uvm)
    # the tables moved are the coldest per byte: none left in HBM is colder than every moved one
    heat = {t.name: t.pooling_factor / b for t, b in zip(inst.tables, table_bytes_array(inst))}
    moved = {s.table for s in uvm}
    assert max(heat[n] for n in moved) <= max(heat[t.name] for t in inst.tables if t.name not in moved)


def test_too_little_memory_in_both_tiers_is_infeasible_with_the_reason() -> None:
    d = small_doc()
    d["topology"]["memory_bytes"] = int(d["topology"]["memory_bytes"] * 0.3)
    r = get_solver("greedy").solve(instance_from_dict(d), get_cost_model("analytic"), seed=0)
    assert r.status.value == "infeasible" and "no host memory" in r.reason and "short by" in r.reason
    d["topology"]["host_memory_bytes"] = 1000
    r = get_solver("greedy").solve(instance_from_dict(d), get_cost_model("analytic"), seed=0)
    assert r.status.value == "infeasible" and "of host memory" in r.reason


def test_cache_choice_follows_the_access_skew() -> None:
    hot = np.zeros(17)
    hot[[0, 10]] = [0.99, 0.01]  # 1 % of the unique rows take most lookups
    flat = np.zeros(17)
    flat[0] = 1.0
    assert cached_lookup_share(hot, 100_000, 50_000.0, 20_000) > HIT_TARGET > cached_lookup_share(flat, 100_000, 50_000.0, 20_000)
    assert cached_lookup_share(flat, 100_000, 50_000.0, 100_000) == pytest.approx(1.0)
    # more cache never serves fewer lookups
    shares = [cached_lookup_share(hot, 100_000, 50_000.0, f * 100_000) for f in CACHE_LOAD_FACTORS]
    assert shares == sorted(shares)


def test_same_seed_same_tiered_plan() -> None:
    inst = instance_from_dict(oversized(2.5))
    a = get_solver("random").solve(inst, get_cost_model("analytic"), seed=3).plan
    b = get_solver("random").solve(inst, get_cost_model("analytic"), seed=3).plan
    assert a.shards == b.shards
    assert not isinstance(plan_tiers(inst), str)


def test_table_wise_instances_are_untouched() -> None:
    """Where a table-wise HBM plan can exist, the heuristics place tables exactly as before (no tiers)."""
    inst = load_instance(ROOT / "instances" / "examples" / "small.json")
    r = get_solver("greedy").solve(inst, get_cost_model("analytic"), seed=0)
    assert "placements" not in r.plan.params
    assert all(s.kernel is Kernel.fused and s.rows is None and s.cols is None for s in r.plan.shards)


def test_every_registered_solver_says_which_placements_it_produces() -> None:
    from typer.testing import CliRunner

    from shardopt.cli.main import app
    from solvers.catalog import solver_names, spec_of

    for name in solver_names():
        assert spec_of(name).placements, name
    result = CliRunner().invoke(app, ["solvers", "--json"])
    import json

    rows = {r["name"]: r for r in json.loads(result.stdout)["solvers"]}
    assert "row_wise" in rows["greedy"]["placements"] and rows["greedy"]["host_memory"] is True
    assert "row-wise" in rows["greedy"]["placement_note"] and "UVM" in rows["greedy"]["placement_note"]


@pytest.mark.parametrize("suite", ["huge-test", "tiered-test"])
def test_greedy_places_every_committed_huge_and_tiered_instance(suite: str) -> None:
    """Each of these instances has a plan (the generator proved it constructively); greedy must find one, valid in
    both tiers, with the row-wise tables in TorchRec's layout: row_wise over all devices, or table_row_wise over
    the devices of one host (where the cluster has several hosts of several devices)."""
    cm = get_cost_model("analytic")
    for path in sorted((ROOT / "instances" / "suites" / suite).glob(f"{suite}-*.json")):
        inst = load_instance(path)
        r = get_solver("greedy").solve(inst, cm, seed=0)
        assert r.status.has_plan, (path.name, r.reason)
        assert check_plan(inst, r.plan).ok
        for t in inst.tables:
            mine = sorted((s.row_offset, s.height(t), s.device) for s in r.plan.shards if s.table == t.name)
            if len(mine) > 1:
                per, D = inst.topology.devices_per_host, inst.topology.num_devices
                layouts = [list(range(D))] + ([list(range(h * per, (h + 1) * per)) for h in range(D // per)] if 1 < per < D else [])
                assert any(mine == [(o, n, g[k]) for k, (o, n) in enumerate(rw_layout(t.rows, len(g))) if n > 0] for g in layouts), (path.name, t.name)
        assert not export_problems(inst, r.plan), path.name


def test_neuroshard_is_not_seeded_with_a_row_wise_greedy_plan() -> None:
    """A table too big whole but not as column slices: greedy now answers row-wise, which is no seed for
    neuroshard's table-wise state (it became an invalid plan, a PlanError, before)."""
    from solvers.neuroshard.grid import PieceModel
    from solvers.neuroshard.search import _greedy_seed

    inst = instance_from_dict(oversized(1.5))
    cm = get_cost_model("analytic")
    start = tuple(sorted((i, 0, t.dim) for i, t in enumerate(inst.tables)))
    assert _greedy_seed(inst, cm, PieceModel(inst, cm.bind(inst)), start, 0) is None
    r = get_solver("neuroshard").solve(inst, cm, time_limit=5, seed=0)
    assert r.status.value in ("feasible", "no_solution"), r.status
    if r.plan is not None:
        assert check_plan(inst, r.plan).ok


def _every_solver_plans(inst: Instance) -> dict:
    """greedy, neuroshard and cpsat each return a valid plan (5 s); greedy's info."""
    infos = {}
    for solver in ("greedy", "neuroshard", "cpsat"):
        r = get_solver(solver).solve(inst, get_cost_model("analytic"), seed=0, time_limit=5)
        assert r.status.has_plan, (solver, r.reason)
        assert check_plan(inst, r.plan).ok
        infos[solver] = r.info
    return infos["greedy"]


@pytest.mark.parametrize("name", ["random-211", "random-585"])
def test_the_lean_layout_places_what_the_default_one_cannot(name: str) -> None:
    """Single-device instances (benchmarks/bench_tiered.py's random seeds 211 and 585) that TorchRec's planner places:
    the default tiering (the coldest tables per byte to host memory, caches for 90 % of the lookups) leaves too little
    HBM or host memory; the lean layout (smallest caches, the largest tables to host memory first) packs, and greedy,
    neuroshard and cpsat all return valid plans from it."""
    from solvers.placement.tiering import plan_tiers

    inst = load_instance(Path(__file__).resolve().parent / "data" / f"{name}.json")
    assert isinstance(plan_tiers(inst), str)  # the default layout does not fit
    lean = plan_tiers(inst, lean=True)
    assert not isinstance(lean, str)
    assert _every_solver_plans(inst)["lean_tiers"] is True


@pytest.mark.parametrize("name", ["random-579", "random-808"])
def test_the_row_wise_layout_over_all_devices_places_what_splits_within_a_host_cannot(name: str) -> None:
    """16 devices on hosts of 2 (benchmarks/bench_tiered.py's random seeds 579 and 808), placed by TorchRec's planner:
    the oversized tables split within one host fill that host's HBM, so a later one fits no layout (579) or the rest
    do not pack (808); greedy then takes the layout that splits them over all devices, and neuroshard and cpsat plan
    from it (the 2026-11-25 benchmark lost both until this fallback existed)."""
    from solvers.placement.tiering import plan_tiers

    inst = load_instance(Path(__file__).resolve().parent / "data" / f"{name}.json")
    assert not isinstance(plan_tiers(inst, within_host=False), str)
    assert _every_solver_plans(inst)["row_splits_within_host"] is False


def _cold_giant() -> Instance:
    """small.json on half the HBM, with host memory, t00 grown to 2.6x a device and made cold (0.05 lookups per
    sample): split by rows it would fill a third of every device's HBM with rows seldom read."""
    d = small_doc()
    cap = d["topology"]["memory_bytes"] // 2
    d["topology"]["memory_bytes"] = cap
    d["topology"]["host_memory_bytes"] = 4 * cap
    t = d["tables"][0]
    t["rows"], t["pooling_factor"] = int(2.6 * cap / (t["dim"] * 4 + 4)), 0.05
    return instance_from_dict(d)


def test_a_cold_oversized_table_goes_to_host_memory_whole_where_that_is_cheaper() -> None:
    """The heuristics pack the layout that puts the tables no device holds in host memory whole (behind an HBM
    cache) beside the one that splits them by rows, and keep the cheaper plan: here the cold giant in host memory and
    every other table in HBM (the row-split layout pushed all 19 others to host memory: 3.57 ms against 1.00)."""
    from solvers.base import Budget, Stopwatch
    from solvers.heuristics.constructive import GreedySolver

    inst = _cold_giant()
    cm = get_cost_model("analytic")
    r = get_solver("greedy").solve(inst, cm, seed=0)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.info["oversized_to_host"] is True
    big = [s for s in r.plan.shards if s.table == "t00"]
    assert len(big) == 1 and big[0].kernel is Kernel.fused_uvm_caching and big[0].rows is None
    assert all(s.kernel is Kernel.fused for s in r.plan.shards if s.table != "t00")
    costs = {}
    for to_host in (False, True):
        got = GreedySolver()._tiered_pack(inst, cm, 0, Budget.of(Stopwatch(), None), False, False, to_host)
        layout, packer, bound, placed = got.layout, got.packed.packer, got.packed.bound, got.packed.placed
        costs[to_host] = min(bound.plan_costs(packer.shards(d)).max_cost for _, d in placed)
    assert layout.tiers[0].kernel is Kernel.fused_uvm_caching and not layout.tiers[0].rowwise
    assert r.predicted.max_cost == pytest.approx(costs[True]) and costs[True] < 0.5 * costs[False]
    ns = get_solver("neuroshard").solve(inst, cm, seed=0, time_limit=5)
    assert ns.status.has_plan and check_plan(inst, ns.plan).ok and ns.predicted.max_cost <= r.predicted.max_cost * (1 + 1e-9)


@pytest.mark.parametrize("hot_first", [True, False])
def test_the_hbm_left_for_row_splits_goes_to_the_hotter_oversized_table(hot_first: bool) -> None:
    """Two tables no device holds, room in HBM for the row-wise blocks of one: the hotter (lookups per byte) gets
    HBM, the colder host memory behind a cache, whichever comes first in the instance."""
    d = small_doc()
    cap = d["topology"]["memory_bytes"]
    d["topology"]["host_memory_bytes"] = 4 * cap
    for k, pooling in ((0, 30.0 if hot_first else 0.5), (1, 0.5 if hot_first else 30.0)):
        t = d["tables"][k]
        t["rows"], t["pooling_factor"] = int(2.4 * cap / (t["dim"] * 4 + 4)), pooling
    inst = instance_from_dict(d)
    layout = plan_tiers(inst, within_host=False)
    assert not isinstance(layout, str)
    hot, cold = (0, 1) if hot_first else (1, 0)
    assert layout.tiers[hot].rowwise and layout.tiers[hot].kernel is Kernel.fused
    assert layout.tiers[cold].rowwise and layout.tiers[cold].kernel is not Kernel.fused


def test_oversized_tables_coldest_per_byte_first_and_only_the_named_to_host_memory() -> None:
    from solvers.placement.tiering import oversized_tables

    d = small_doc()
    cap = d["topology"]["memory_bytes"]
    d["topology"]["host_memory_bytes"] = 4 * cap
    for k, pooling in ((0, 30.0), (1, 0.5)):
        t = d["tables"][k]
        t["rows"], t["pooling_factor"] = int(1.6 * cap / (t["dim"] * 4 + 4)), pooling
    inst = instance_from_dict(d)
    assert oversized_tables(inst) == [1, 0]  # t01 is the colder per byte
    layout = plan_tiers(inst, within_host=False, oversized_to_host=frozenset({1}))
    assert not isinstance(layout, str)
    assert layout.tiers[1].kernel is Kernel.fused_uvm_caching and not layout.tiers[1].rowwise  # whole, in host memory
    assert layout.tiers[0].rowwise and layout.tiers[0].kernel is Kernel.fused  # split by rows in HBM
    # a named table that a device could hold goes to host memory whole too
    named = plan_tiers(inst, within_host=False, oversized_to_host=frozenset({1, 5}))
    assert not isinstance(named, str) and named.tiers[5].kernel is Kernel.fused_uvm_caching and not named.tiers[5].rowwise


def test_only_the_cold_oversized_table_goes_to_host_memory() -> None:
    """Two tables no device holds: the cold 15 GB t0 (2.3 lookups per sample) and the hot t1. All of them split by
    rows, t7 (7 GB) no longer fits whole beside their blocks and is split too; all of them in host memory, the hot one
    misses its cache. Only the cold one in host memory: TorchRec's plan for random-285 of bench_tiered (2.93 ms,
    ours 3.75 before). greedy packs that layout beside the others and keeps the cheapest."""
    from solvers.base import Budget, Stopwatch
    from solvers.heuristics.constructive import GreedySolver

    spec = [(58805592, 64, 2.29, 0.45), (28239029, 132, 31.63, 0.82), (2378792, 64, 22.24, 0.84), (1189, 108, 18.46, 0.81),
            (484, 220, 4.9, 0.91), (46765, 144, 5.07, 0.15), (15792264, 68, 34.72, 0.38), (7973274, 220, 27.85, 0.07),
            (129, 128, 31.67, 0.46), (24148, 176, 19.97, 0.21), (571259, 12, 32.8, 1.19), (65385, 252, 33.99, 1.06),
            (183, 96, 8.3, 1.14), (130, 188, 8.94, 0.07), (3950, 80, 36.41, 0.42)]
    inst = spec_instance("cold-and-hot-giants", spec, {"num_devices": 8, "devices_per_host": 1, "hardware": "a100",
                                                        "memory_bytes": 10620174957, "host_memory_bytes": 33984559862}, 16384)
    cm = get_cost_model("analytic")
    r = get_solver("greedy").solve(inst, cm, seed=0)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.info["oversized_to_host"] == ["t0"]
    t0 = [s for s in r.plan.shards if s.table == "t0"]
    assert len(t0) == 1 and t0[0].kernel is Kernel.fused_uvm_caching
    assert all(s.kernel is Kernel.fused and s.rows is not None for s in r.plan.shards if s.table == "t1")
    costs = {}
    for to_host in (False, True):
        got = GreedySolver()._tiered_pack(inst, cm, 0, Budget.of(Stopwatch(), None), False, False, to_host)
        packer, bound, placed = got.packed.packer, got.packed.bound, got.packed.placed
        costs[to_host] = min(bound.plan_costs(packer.shards(d)).max_cost for _, d in placed)
    assert r.predicted.max_cost < 0.9 * min(costs.values())


def test_a_table_the_row_splits_left_no_room_for_goes_to_host_memory_whole() -> None:
    """The hot giants t8 and t13 split by rows take 3.6 of every device's 9.5 GB; the cold t5 (6.8 GB, 0.85 lookups
    per sample) then fits on no device. Split by rows too, it adds to every device's all-to-all; in host memory whole
    behind a cache, as TorchRec holds it (random-434 of bench_tiered: 3.50 ms, ours 4.38 before), it costs one device a
    few misses. greedy packs the layout that sends such a table to host memory instead of splitting it."""
    spec = [(425, 172, 19.63, 0.01), (1555, 164, 17.32, 1.02), (1879, 60, 3.02, 1.14), (35793, 72, 0.76, 0.03),
            (4019821, 184, 12.52, 0.08), (45784783, 36, 0.85, 0.14), (6389836, 244, 1.08, 0.69), (990465, 176, 9.98, 0.39),
            (43095970, 216, 19.12, 0.96), (218825, 144, 28.21, 1.04), (2306, 32, 39.91, 0.92), (2360, 188, 14.53, 0.45),
            (340, 220, 10.97, 0.96), (61904497, 84, 29.69, 0.78), (6914, 8, 24.61, 0.67), (987269, 220, 6.69, 1.05),
            (86008, 148, 15.01, 0.71), (391, 192, 5.4, 0.34)]
    inst = spec_instance("no-room-left", spec, {"num_devices": 16, "devices_per_host": 1, "hardware": "a100",
                                                 "memory_bytes": 9529378778, "host_memory_bytes": 9529378778}, 16384)
    from solvers.base import Budget, Stopwatch
    from solvers.heuristics.constructive import GreedySolver

    cm = get_cost_model("analytic")
    got = GreedySolver()._tiered_pack(inst, cm, 0, Budget.of(Stopwatch(), None), False, retry_to_host=True)
    packer, bound, placed = got.packed.packer, got.packed.bound, got.packed.placed
    retried = min((packer.shards(d) for _, d in placed), key=lambda sh: bound.plan_costs(sh).max_cost)
    assert check_plan(inst, Plan(shards=retried)).ok
    whole_in_host = {s.table for s in retried if s.kernel is not Kernel.fused and s.rows is None}
    assert whole_in_host and all(n not in ("t8", "t13") for n in whole_in_host)
    assert table_bytes_array(inst)[[int(n[1:]) for n in whole_in_host]].max() <= max(inst.topology.capacities())  # not oversized
    got = GreedySolver()._tiered_pack(inst, cm, 0, Budget.of(Stopwatch(), None), False)
    rowwise, packer, bound, placed = got.rowwise, got.packed.packer, got.packed.bound, got.packed.placed
    assert rowwise  # without: the packer found no room for a table and split it by rows
    split_cost = min(bound.plan_costs(packer.shards(d)).max_cost for _, d in placed)
    retried_cost = bound.plan_costs(retried).max_cost
    assert retried_cost < 0.85 * split_cost
    r = get_solver("greedy").solve(inst, cm, seed=0)  # greedy packs that layout among others and keeps the cheapest
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.predicted.max_cost <= retried_cost + 1e-9


def test_an_oversized_table_too_big_for_one_hosts_memory_goes_there_by_rows() -> None:
    """Seed 1369 of bench_tiered's generator (unseen by the tuning; TorchRec places it): tables of 47 and 41 GB on 4
    devices of 22.9 GB HBM and 22.9 GB host memory each. Split by rows in HBM they left no room for the rest, and
    neither fits one device's host memory whole, so greedy, neuroshard and cpsat found no plan; in the layout that
    sends the oversized tables to host memory (`oversized_to_host=True`), their row-wise blocks now go there behind
    HBM caches (TorchRec's plan does the same) and every solver places it."""
    from solvers.placement.tiering import plan_tiers

    spec = [(11823927, 128, 28.86, 1.28), (14007, 256, 22.08, 1.02), (146664, 48, 6.84, 0.68), (169, 248, 32.1, 0.09),
            (496732, 108, 2.25, 1.34), (75198360, 136, 24.84, 0.71), (42443637, 128, 18.58, 0.59), (721378, 208, 26.25, 0.13),
            (18159242, 4, 4.72, 0.91), (58771, 120, 2.68, 0.33), (68468200, 64, 7.48, 1.36), (13286526, 244, 36.34, 0.62),
            (93406, 20, 39.95, 1.0), (8835502, 128, 39.25, 0.79), (52219175, 224, 28.21, 0.65)]
    inst = spec_instance("seed-1369", spec, {"num_devices": 4, "devices_per_host": 1, "hardware": "h100",
                                              "memory_bytes": 22927815787, "host_memory_bytes": 22927815787}, 65536)
    layout = plan_tiers(inst, within_host=False, lean=True, oversized_to_host=True)  # (the smallest caches)
    assert not isinstance(layout, str)
    for big in (5, 14):  # row-wise over all 4 devices, in host memory behind a cache
        tier = layout.tiers[big]
        assert tier.rowwise and tier.kernel is Kernel.fused_uvm_caching
        assert sorted(s.device for s in layout.fixed if s.table == f"t{big}") == [0, 1, 2, 3]
    not_sent = plan_tiers(inst, within_host=False, lean=True)  # (not sent to host memory: their blocks in HBM, as before)
    assert isinstance(not_sent, str) or not_sent.tiers[14].kernel is Kernel.fused
    assert _every_solver_plans(inst)["oversized_to_host"] is True


def test_a_row_split_that_fits_only_without_headroom_is_placed_not_refused() -> None:
    """Issue 'trust': devices of 210,000 bytes and one table that fits as two row blocks of 200,000 bytes. The
    layout's HBM headroom (90 %) is a preference: greedy, neuroshard and cpsat place it, as TorchRec does."""
    from shardopt.core.memory import slice_bytes

    inst = spec_instance("headroom", [(800, 124, 4.0, 1.0)],
                         {"num_devices": 2, "devices_per_host": 2, "memory_bytes": 210_000, "hardware": "v100"}, 512)
    assert slice_bytes(inst, inst.tables[0], 400, 124) == 200_000 > 0.9 * 210_000
    assert isinstance(plan_tiers(inst), str) and not isinstance(plan_tiers(inst, headroom=1.0), str)
    for solver in ("greedy", "neuroshard", "cpsat"):
        r = get_solver(solver).solve(inst, get_cost_model("analytic"), seed=0, time_limit=5)
        assert r.status.has_plan, f"{solver}: {r.reason}"
        assert check_plan(inst, r.plan).ok and len(r.plan.shards) == 2
    # one byte less per device than the blocks: refused, quoting the bytes it tested (all of them, not 90 %)
    tight = inst.model_copy(update={"topology": inst.topology.model_copy(update={"memory_bytes": 199_999})})
    reason = plan_tiers(tight, headroom=1.0)
    assert isinstance(reason, str) and "399,998 bytes of HBM" in reason and "short by 2 bytes" in reason
    r = get_solver("greedy").solve(tight, get_cost_model("analytic"), seed=0)
    assert not r.status.has_plan and "short by 2 bytes" in r.reason
