"""Row splits where they pay: a hot, heavily pooled table that column pieces cannot balance is split by rows (and
the other tables rebalanced around it), and the plan is cheaper than any table- or column-wise plan can be (the
certified bound of those plans says so); cpsat, started from the default solver's plan, never ends above it."""

from __future__ import annotations

import numpy as np
import pytest

from costmodels.analytic import AnalyticCostModel
from shardopt.core.ir import AccessProfile, Instance, Shard, Table, Topology, Workload
from shardopt.core.plan_check import check_plan
from shardopt.core.torchrec_form import grid_problem
from solvers.bound import analytic_lower_bound
from solvers.catalog import get_solver
from solvers.placement.hot_splits import GRID_SHAPES_KEPT, grid_shapes, hot_table_splits

CM = AnalyticCostModel()


def hot_instance(devices: int = 8, per_host: int = 8, small: int = 10, seed: int = 0) -> Instance:
    """One hot table (16 columns: at most 4 column pieces of 4, on half of 8 devices) among small ones."""
    rng = np.random.default_rng(seed)
    tables = [Table(name="hot", rows=2_000_000, dim=16, pooling_factor=200.0, access=AccessProfile(zipf=0.9))]
    tables += [Table(name=f"s{i}", rows=int(rng.integers(1000, 100_000)), dim=int(rng.choice([16, 32, 64])),
                     pooling_factor=float(rng.uniform(1, 5)), access=AccessProfile(zipf=0.9)) for i in range(small)]
    return Instance(name="hot", tables=tables, topology=Topology(num_devices=devices, devices_per_host=per_host, memory_bytes=16 * 2**30,
                                                              hardware="a100"), workload=Workload(batch_size=65536))


def test_a_hot_table_is_split_by_rows_below_every_table_and_column_wise_plan():
    inst = hot_instance()
    r = get_solver("neuroshard").solve(inst, CM, seed=0, time_limit=60)
    assert check_plan(inst, r.plan).ok
    hot = [s for s in r.plan.shards if s.table == "hot"]
    assert len(hot) > 1 and all(s.height(inst.tables[0]) < inst.tables[0].rows for s in hot)
    # no table- or column-wise plan (replicas left out too) can cost this little
    b = analytic_lower_bound(inst, CM, time_limit=60, row_splits=False, replicas=False)
    assert b.status in ("optimal", "bound") and r.predicted.max_cost < b.value_ms
    # and cpsat, whose items are whole tables and column pieces, returns at most that plan's cost
    c = get_solver("cpsat").solve(inst, CM, seed=0, time_limit=20)
    assert check_plan(inst, c.plan).ok and c.predicted.max_cost <= c.stats.warm_starts["neuroshard"] + 1e-12


@pytest.mark.parametrize("devices,per_host", [(8, 4), (16, 4), (64, 8)])
def test_hot_table_splits_offer_rows_hosts_and_grids(devices: int, per_host: int):
    inst = hot_instance(devices=devices, per_host=per_host)
    hot = inst.tables[0]
    bm = CM.bind(inst)
    plan = [Shard(table="hot", device=0)] + [Shard(table=t.name, device=1 + i % (devices - 1)) for i, t in enumerate(inst.tables[1:])]
    offered = hot_table_splits(inst, bm, plan)
    (t, options) = offered[0]  # hottest first (on 64 devices the small tables too exceed the mean device's compute)
    assert inst.tables[t].name == "hot"
    kinds = [what for what, _ in options]
    hosts = devices // per_host
    grids = [what for what in kinds if what.startswith("grid ")]
    assert kinds.count("row-wise") == 1 and kinds.count("table-row-wise") == 1
    assert 1 <= len(grids) <= GRID_SHAPES_KEPT and len(set(grids)) == len(grids)
    # the in-host split goes to the host the other tables load least: host 0 holds the hot table, the rest share out
    (in_host,) = [sh for what, sh in options if what == "table-row-wise"]
    load = bm.plan_costs([s for s in plan if s.table != "hot"]).total.reshape(hosts, per_host).sum(axis=1)
    assert {s.device // per_host for s in in_host} == {int(np.argmin(load))}
    shapes = set(grid_shapes(inst, hot))
    for what in grids:
        c, r = (int(x) for x in what.split()[1].split("x"))
        assert (c, r) in shapes and r in (1, per_host)
        grid = dict(options)[what]
        assert {s.width(hot) for s in grid} == {hot.dim // c} and len(grid) == c * r
        # every (row, column) of the table exactly once; column blocks over one host's ranks in TorchRec's layout
        cells = sorted((s.col_offset, s.row_offset, s.height(hot)) for s in grid)
        for b in range(c):
            block = [(ro, h) for co, ro, h in cells if co == b * hot.dim // c]
            assert sum(h for _, h in block) == hot.rows
        if r > 1:
            assert grid_problem(inst, hot, grid) == ""
    others = [s for s in plan if s.table != "hot"]
    for _, shards in options:
        assert check_plan(inst, others + shards).ok


def test_grid_shapes_are_equal_aligned_blocks_within_hosts():
    """Column blocks cut the width into equal 4-aligned widths; a block lies on one device or on one host's
    devices (at most two blocks per host), never the whole table."""
    inst = hot_instance(devices=64, per_host=8)
    hot = inst.tables[0].model_copy(update={"dim": 128})
    shapes = grid_shapes(inst, hot)
    assert (1, 1) not in shapes and (1, 8) not in shapes
    assert {(32, 1), (2, 8), (16, 8)} <= set(shapes) and (32, 8) not in shapes  # 32 blocks on 8 hosts: four per host
    assert all(128 % c == 0 and (128 // c) % 4 == 0 and r in (1, 8) for c, r in shapes)


def test_no_hot_table_no_split_offered():
    """A table at or below the mean device compute is balanced by placement alone: none offered."""
    inst = hot_instance()
    cool = inst.model_copy(update={"tables": [inst.tables[0].model_copy(update={"pooling_factor": 1.0})] + inst.tables[1:]})
    bm = CM.bind(cool)
    plan = [Shard(table=t.name, device=i % 8) for i, t in enumerate(cool.tables)]
    assert all(cool.tables[t].name != "hot" for t, _ in hot_table_splits(cool, bm, plan))
