"""Row splits where they pay: a hot, heavily pooled table that column pieces cannot balance is split by rows (and
the other tables rebalanced around it), and the plan is cheaper than any table- or column-wise plan can be (the
certified bound of those plans says so); cpsat, started from the default solver's plan, never ends above it."""

from __future__ import annotations

import numpy as np
import pytest

from costmodels.analytic import AnalyticCostModel
from shardopt.core.ir import AccessProfile, Instance, Shard, Table, Topology, Workload
from shardopt.core.plan_check import check_plan
from solvers.bound import analytic_lower_bound
from solvers.catalog import get_solver
from solvers.placement.polish import hot_table_splits

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
    assert check_plan(inst, c.plan).ok and c.predicted.max_cost <= c.info["warm_starts"]["neuroshard"] + 1e-12


@pytest.mark.parametrize("devices,per_host", [(8, 4), (16, 4)])
def test_hot_table_splits_offer_rows_hosts_and_a_grid(devices: int, per_host: int):
    inst = hot_instance(devices=devices, per_host=per_host)
    bm = CM.bind(inst)
    plan = [Shard(table="hot", device=0)] + [Shard(table=t.name, device=1 + i % (devices - 1)) for i, t in enumerate(inst.tables[1:])]
    (t, options), = [(t, o) for t, o in hot_table_splits(inst, bm, plan)]
    assert inst.tables[t].name == "hot"
    kinds = [what for what, _ in options]
    hosts = devices // per_host
    assert kinds.count("row-wise") == 1 and kinds.count("table-row-wise") == 1 and kinds.count("grid") == 1
    # the in-host split goes to the host the other tables load least: host 0 holds the hot table, the rest share out
    (in_host,) = [sh for what, sh in options if what == "table-row-wise"]
    load = bm.plan_costs([s for s in plan if s.table != "hot"]).total.reshape(hosts, per_host).sum(axis=1)
    assert {s.device // per_host for s in in_host} == {int(np.argmin(load))}
    grid = dict(options)["grid"]
    width = inst.tables[0].dim // hosts
    assert {s.width(inst.tables[0]) for s in grid} == {width} and len(grid) == devices
    for b in range(hosts):  # one column block per host, split by rows over that host's devices
        block = [s for s in grid if s.col_offset == b * width]
        assert {s.device // per_host for s in block} == {b} and sum(s.height(inst.tables[0]) for s in block) == inst.tables[0].rows
    others = [s for s in plan if s.table != "hot"]
    for _, shards in options:
        assert check_plan(inst, others + shards).ok


def test_no_hot_table_no_split_offered():
    """A table at or below the mean device compute is balanced by placement alone: none offered."""
    inst = hot_instance()
    cool = inst.model_copy(update={"tables": [inst.tables[0].model_copy(update={"pooling_factor": 1.0})] + inst.tables[1:]})
    bm = CM.bind(cool)
    plan = [Shard(table=t.name, device=i % 8) for i, t in enumerate(cool.tables)]
    assert all(cool.tables[t].name != "hot" for t, _ in hot_table_splits(cool, bm, plan))
