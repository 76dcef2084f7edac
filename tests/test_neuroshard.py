"""NeuroShard: valid plans, never worse than its own no-split grid plan, reproducible, within its budget, and
the halves of a split table apart when asked."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from costmodels.analytic import AnalyticCostModel
from costmodels.registry import get_cost_model
from shardopt.core.ir import load_instance
from shardopt.core.plan_check import check_plan
from solvers.catalog import get_solver
from solvers.neuroshard.config import FAITHFUL, NeuroShardConfig
from solvers.neuroshard.pieces import split
from solvers.neuroshard.search import NeuroShardSolver

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "instances" / "examples"
SUITES = ROOT / "instances" / "suites"
QUICK = dict(max_steps=3)


def split_tables(plan) -> dict[str, list[int]]:
    devices = defaultdict(list)
    for s in plan.shards:
        devices[s.table].append(s.device)
    return {t: d for t, d in devices.items() if len(d) > 1}


def test_faithful_configuration_is_the_papers():
    assert FAITHFUL.beam_width == 3 and FAITHFUL.candidates_by_size == 10 and FAITHFUL.candidates_by_cost == 10
    assert FAITHFUL.max_steps == 10 and FAITHFUL.scales == (1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4, 1.45, 1.5)
    assert not (FAITHFUL.split_apart or FAITHFUL.comm_aware or FAITHFUL.dedup or FAITHFUL.polish)
    assert FAITHFUL.patience is None and FAITHFUL.refine_extra == 0 and not FAITHFUL.placement_polish
    assert FAITHFUL.anytime  # (not the paper's: issue 18 asks every solver to honour --time-limit and have a default budget)
    assert split((0, 0, 64)) == ((0, 0, 32), (0, 32, 32))
    assert not (FAITHFUL.uneven_halves or FAITHFUL.soft_dim_cap)
    assert split((0, 0, 12), uneven=False) is None and split((0, 8, 4), uneven=False) is None  # exact halves, 4-aligned


def test_split_cuts_odd_unit_widths_unevenly():
    """The improved search cuts a piece of an odd number of 4-column units too (the wider part second); nothing
    narrower than 8 columns; exact halves where they exist."""
    assert split((0, 0, 12)) == ((0, 0, 4), (0, 4, 8))
    assert split((2, 8, 108)) == ((2, 8, 52), (2, 60, 56))
    assert split((0, 0, 64)) == ((0, 0, 32), (0, 32, 32))
    assert split((0, 8, 4)) is None and split((0, 8, 4), uneven=False) is None
    for cols in range(8, 257, 4):
        a, b = split((1, 0, cols))
        assert a[2] % 4 == 0 and b[2] % 4 == 0 and a[2] + b[2] == cols and 0 <= b[2] - a[2] <= 4 and b[1] == a[2]


@pytest.mark.parametrize("name", ["neuroshard", "neuroshard_faithful"])
@pytest.mark.parametrize("path", [EXAMPLES / "small.json", EXAMPLES / "tight.json", SUITES / "neuroshard-test" / "neuroshard-test-s1-0000.json"])
def test_valid_and_never_worse_than_its_no_split_grid_plan(name, path):
    inst = load_instance(path)
    result = get_solver(name).solve(inst, AnalyticCostModel(), seed=0)
    assert result.status.has_plan, result.reason
    assert check_plan(inst, result.plan).ok
    assert result.predicted_cost <= result.info["no_split_grid_cost"] + 1e-9
    if name == "neuroshard":
        assert result.predicted_cost <= result.info["greedy_seed_cost"] + 1e-9


def test_same_seed_same_plan():
    inst = load_instance(SUITES / "dreamshard-test" / "dreamshard-test-s1-0000.json")
    a = NeuroShardSolver(**QUICK).solve(inst, AnalyticCostModel(), seed=4)
    b = NeuroShardSolver(**QUICK).solve(inst, AnalyticCostModel(), seed=4)
    assert a.plan.shards == b.plan.shards


def test_time_budget_is_honoured_with_the_best_plan_so_far():
    inst = load_instance(EXAMPLES / "large.json")
    limit = 3.0
    result = get_solver("neuroshard").solve(inst, AnalyticCostModel(), time_limit=limit)
    assert result.status.value == "feasible" and result.stopped.value == "time_limit" and check_plan(inst, result.plan).ok
    assert result.wall_time_s < limit + max(5.0, limit)  # the search stops at the budget; checking the plan follows


def test_split_halves_land_apart_when_asked():
    """A neuroshard-family instance where splitting pays: with split_apart, no table has two shards on one device."""
    inst = load_instance(SUITES / "neuroshard-test" / "neuroshard-test-s1-0000.json")
    apart = NeuroShardSolver(**QUICK).solve(inst, AnalyticCostModel())
    splits = split_tables(apart.plan)
    assert splits, "expected this instance to split at least one table"
    assert all(len(set(d)) == len(d) for d in splits.values())


def test_works_with_the_neural_model_and_heterogeneous_memory():
    inst = load_instance(EXAMPLES / "small.json")
    caps = [int(c * f) for c, f in zip(inst.topology.capacities(), (0.6, 1.0, 1.4, 1.0))]
    hetero = inst.model_copy(update={"topology": inst.topology.model_copy(update={"memory_bytes": caps})})
    result = NeuroShardSolver(**QUICK).solve(hetero, get_cost_model("neural"))
    assert result.status.has_plan and check_plan(hetero, result.plan).ok
    use = check_plan(hetero, result.plan).memory_use
    assert np.all(use <= np.array(caps))


def test_infeasible_even_with_splits():
    inst = load_instance(EXAMPLES / "infeasible.json")
    result = get_solver("neuroshard").solve(inst, AnalyticCostModel())
    assert result.status.value == "infeasible" and ("huge" in result.reason or "short" in result.reason)


def test_improvements_switch_off_one_by_one():
    inst = load_instance(EXAMPLES / "small.json")
    for switch in ("split_apart", "comm_aware", "dedup", "polish", "seed_with_greedy"):
        r = NeuroShardSolver(NeuroShardConfig(max_steps=2), **{switch: False}).solve(inst, AnalyticCostModel())
        assert r.status.has_plan and r.plan.params[switch] is False


def odd_units_instance():  # noqa: ANN201
    """8 devices, one per host: t0 (7 four-column units) 2.4 devices large, t3 1.6; t1 (108 columns) wider than any
    lane's dim cap of the exact-halves search (1.5 x 324 / 8 = 61)."""
    from shardopt.core.ir import instance_from_dict

    return instance_from_dict({
        "name": "odd-units", "tables": [
            {"name": "t0", "rows": 2_000_000, "dim": 28, "pooling_factor": 6.0, "access": {"zipf": 1.1}},
            {"name": "t1", "rows": 100_000, "dim": 108, "pooling_factor": 24.0, "access": {"zipf": 1.0}},
            {"name": "t2", "rows": 50_000, "dim": 60, "pooling_factor": 9.7, "access": {"zipf": 0.7}},
            {"name": "t3", "rows": 300_000, "dim": 128, "pooling_factor": 36.0, "access": {"zipf": 0.5}}],
        "topology": {"num_devices": 8, "devices_per_host": 1, "hardware": "gh200", "memory_bytes": 95_000_000},
        "workload": {"batch_size": 65536, "optimizer": "rowwise_adagrad"}})


def test_uneven_halves_and_a_soft_dim_cap_hold_odd_unit_tables_in_hbm():
    """Exact halves cannot cut t0 (28 columns: 14 is not 4-aligned) below a device, and the hard dim cap leaves t1 no
    lane: that search splits t0 and t3 by rows over all devices, whose pooled partial sums cost the network 8x the
    bytes. Uneven halves and the soft cap find column pieces that all fit in HBM, far cheaper (simulated)."""
    inst = odd_units_instance()
    cm = get_cost_model("analytic")
    new = NeuroShardSolver().solve(inst, cm, seed=0, time_limit=5)
    old = NeuroShardSolver(uneven_halves=False, soft_dim_cap=False).solve(inst, cm, seed=0, time_limit=5)
    assert check_plan(inst, new.plan).ok and check_plan(inst, old.plan).ok
    assert any(s.rows is not None for s in old.plan.shards)  # (the old search's answer: row splits)
    assert all(s.rows is None and s.kernel.value == "fused" for s in new.plan.shards)
    assert new.predicted_cost < 0.5 * old.predicted_cost
    again = NeuroShardSolver().solve(inst, cm, seed=0, time_limit=5)
    assert sorted(map(repr, again.plan.shards)) == sorted(map(repr, new.plan.shards))  # same seed, same plan


def test_a_search_out_of_time_before_its_first_state_returns_its_greedy_seed():
    """Never less than its seed: with no time to score even the unsplit state, neuroshard answers with greedy's plan
    (the plan its search starts from), not with no plan."""
    from conftest import make_instance

    from solvers.base import StopReason

    inst = make_instance(40, 8, seed=2, mem_factor=1.1)
    greedy = get_solver("greedy").solve(inst, AnalyticCostModel(), seed=0)
    assert greedy.plan is not None
    r = get_solver("neuroshard").solve(inst, AnalyticCostModel(), time_limit=0.0)
    assert r.plan is not None and check_plan(inst, r.plan).ok
    assert r.stopped is StopReason.time_limit and "greedy's plan" in r.info["fallback"]
    assert r.predicted_cost <= greedy.predicted_cost * (1 + 1e-9)
    # the published search has no seed: cut before its first plan, it answers with greedy's plan made then
    faithful = get_solver("neuroshard_faithful").solve(inst, AnalyticCostModel(), time_limit=0.0)
    assert faithful.plan is not None and check_plan(inst, faithful.plan).ok
    assert "made when the search ran out of time" in faithful.info["fallback"] and faithful.stopped is StopReason.time_limit


def many_devices_instance():  # noqa: ANN201
    """48 tables on 16 a100 devices (two hosts of 8), three tables a device: whole tables' widths are too lumpy to
    balance two all-to-alls (the judge runs one per sharding type) where so few tables share a device."""
    from conftest import make_instance

    return make_instance(48, 16, seed=0, mem_factor=2.0, per_host=8, hardware="a100", batch_size=65536)


def test_one_collective_pieces_cut_every_table_that_may_be_cut() -> None:
    """Every table cut in two or more 4-aligned pieces that cover it, but the ones that cannot be cut: narrower than 8
    columns, or kept whole by a placement constraint (table-wise only)."""
    from costmodels.analytic import AnalyticCostModel
    from shardopt.core.ir import instance_from_dict
    from solvers.neuroshard.grid import PieceModel
    from solvers.neuroshard.pieces import one_collective_pieces

    doc = many_devices_instance().model_dump(mode="json")
    doc["tables"][0]["dim"] = 4
    doc["constraints"] = {"tables": [{"table": doc["tables"][1]["name"], "sharding_types": ["table_wise"]}]}
    inst = instance_from_dict(doc)
    pieces = one_collective_pieces(PieceModel(inst, AnalyticCostModel().bind(inst), None))
    by_table = defaultdict(list)
    for t, off, cols in pieces:
        by_table[t].append((off, cols))
    for t, table in enumerate(inst.tables):
        spans = sorted(by_table[t])
        assert sum(c for _, c in spans) == table.dim and all(c % 4 == 0 and c > 0 for _, c in spans)
        assert all(a + c == b for (a, c), (b, _) in zip(spans, spans[1:]))  # (contiguous: they cover the table once)
        assert len(spans) == (1 if t in (0, 1) else 2) or (t > 1 and len(spans) > 2)


def test_the_one_collective_seed_finds_what_mixed_plans_miss() -> None:
    """On many devices with few tables each, a plan of column pieces only (one all-to-all) beats the plans the search
    reaches from whole tables: the seed's plan wins, runs one collective, and the search without the seed ends dearer
    (simulated; run to convergence, not to a deadline). Since whole tables may join the column-wise collective
    (marked column_wise) the search without the seed runs one collective too, and the seed's finer pieces gain less
    (4.434 against 4.546 ms; without marks 4.434 against 4.841). The cuts of wide pieces after the polish
    (`wide_splits`) take the search without the seed to 4.474: compared here without them."""
    from costmodels.hierarchical import output_dist_widths

    inst = many_devices_instance()
    cm = AnalyticCostModel()
    on = NeuroShardSolver(data_parallel=False).solve(inst, cm, time_limit=120)  # (the lane alone: no replica searches)
    off = NeuroShardSolver(one_collective=False, data_parallel=False, wide_splits=False).solve(inst, cm, time_limit=120)
    assert check_plan(inst, on.plan).ok and on.info["one_collective_cost"] is not None
    assert off.info["one_collective_cost"] is None
    assert on.predicted_cost < 0.99 * off.predicted_cost
    _, kinds = output_dist_widths(inst, list(on.plan.shards))
    assert kinds == ["column_wise"]


def test_default_budget_grows_with_the_instance_beyond_production() -> None:
    """2 s for small instances, 10 s for production (856 x 128), 1 s per 30,000 pairs beyond 300,000, at most 60 s:
    production-xl (3,424 x 512) gets 58.4 s."""
    from solvers.neuroshard.config import default_budget

    assert default_budget(load_instance(EXAMPLES / "small.json")) == 2.0
    assert default_budget(load_instance(SUITES / "production" / "production-all-s0-0000.json")) == 10.0
    xl = load_instance(SUITES / "production-xl" / "production-xl-all-s0-0000.json")
    assert default_budget(xl) == pytest.approx(3424 * 512 / 30_000)


@pytest.mark.parametrize("plateau_first", [False, True], ids=["lower-first", "plateau-first"])
def test_the_polish_leaves_a_plateau_of_twin_devices(plateau_first: bool, monkeypatch) -> None:
    """The halves of the same three tables on devices 0 and 1 tie them at the plan cost: no single move lowers it, but
    moving a piece off each in turn does, and the polish takes those moves (a lower cost or fewer devices at it) -
    looking for a lower cost first, or (as on large models, `PLATEAU_FIRST_CELLS`) taking the first step of either kind."""
    import solvers.neuroshard.pieces as pieces_module
    from shardopt.core.ir import AccessProfile, Instance, Table, Topology, Workload
    from solvers.base import Budget, Stopwatch
    from solvers.neuroshard.grid import PieceModel
    from solvers.neuroshard.pieces import _better_rows, polish

    tables = [Table(name=f"t{i}", rows=200_000, dim=64, pooling_factor=20.0, access=AccessProfile(zipf=0.8)) for i in range(4)]
    inst = Instance(tables=tables, topology=Topology(num_devices=4, devices_per_host=4, memory_bytes=8 * 1024**3, hardware="a100"),
                    workload=Workload(batch_size=65536))
    pm = PieceModel(inst, AnalyticCostModel().bind(inst))
    pieces = [half for t in range(4) for half in split((t, 0, 64))]
    device_of = np.array([0, 1, 0, 1, 0, 1, 2, 3])  # t0, t1, t2 halved over the twins 0 and 1; t3 over 2 and 3
    states, widths, _, _ = pm.info(pieces)
    before, totals = pm.plan_cost(states, widths, device_of, pm.rows(pieces))
    assert np.isclose(totals[0], totals[1]) and totals[0] == before
    cfg = NeuroShardConfig()
    if plateau_first:
        monkeypatch.setattr(pieces_module, "PLATEAU_FIRST_CELLS", 0)
    after_of, moves = polish(pm, pieces, device_of, cfg, Budget.of(Stopwatch(), None))
    after, _ = pm.plan_cost(states, widths, after_of, pm.rows(pieces))
    assert moves >= 2 and after < 0.9 * before
    assert all(after_of[2 * t] != after_of[2 * t + 1] for t in range(4))  # (the halves stay apart)
    # the rule itself: lower, or as low with fewer devices at it; never higher, never as high with as many
    rows = _better_rows(np.array([[0.9, 1.0, 0.6], [1.0, 1.0, 0.5], [0.95, 0.9, 0.9], [1.0 + 1e-6, 0.5, 0.5]]), 1.0, 2)
    assert list(_better_rows(np.array([[0.9, 1.0, 0.6], [0.95, 0.9, 0.9]]), 1.0, 2, plateau=False)) == [1]
    assert list(rows) == [0, 2]
