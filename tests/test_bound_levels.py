"""The certified bound on topology levels beyond its two roles (three levels or more, a level inside a host):
`costmodels.comm_terms.pooled_level_terms` pools the levels into the group a table-row-wise split spans and the rest
of the job. Its pieces must never be above the level model's time (costmodels/level_comm.py) - checked on random
topologies and widths - and the bound built on them must stay below every plan (enumerated optima, random plans)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from conftest import make_instance
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel
from costmodels.comm_terms import pooled_level_terms
from costmodels.level_comm import LevelComm
from shardopt.cli import app
from shardopt.core.ir import Instance, Shard, Topology
from shardopt.core.levels import comm_levels, two_level_network
from shardopt.core.plan_check import check_plan
from solvers.bound import BoundError, analytic_lower_bound, network_refusal
from test_bound_coverage import options, row_blocks, with_levels

CM = AnalyticCostModel()

# host of 2 with its own link, an NVLink domain of 2 hosts, the network; a pair inside a host of 4, then the network
THREE = [{"name": "host", "devices": 2, "bandwidth": 3e11},
         {"name": "nvlink_domain", "devices": 4, "bandwidth": 2e11, "latency_s": 1e-6},
         {"name": "network", "devices": 8, "bandwidth": 2e10, "latency_s": 1e-5}]
PAIR = [{"name": "pair", "devices": 2, "bandwidth": 3e11}, {"name": "network", "devices": 8, "bandwidth": 2e10}]


def random_topology(rng: np.random.Generator) -> Topology:
    """Levels of random sizes and bandwidths over hosts of 1-8 devices: three or four levels, or a level (or two)
    inside a host - every nesting `two_level_network` does not take."""
    while True:
        per_host = int(rng.choice([1, 2, 4, 8]))
        sizes = sorted({int(s) for s in rng.choice([2, 4, 8, 16, 32], size=int(rng.integers(2, 5)))})
        D = sizes[-1] * int(rng.choice([1, 2, 4]))
        sizes = [s for s in sizes if s < D] + [D]
        if any(b % a for a, b in zip(sizes, sizes[1:])) or any(s % per_host and per_host % s for s in sizes) or D % per_host:
            continue
        levels = [{"name": f"l{i}", "devices": s, "bandwidth": float(rng.uniform(1e10, 1e12)), "latency_s": float(rng.uniform(0, 2e-5))}
                  for i, s in enumerate(sizes)]
        topo = Topology.model_validate({"num_devices": D, "devices_per_host": per_host, "memory_bytes": 10**10, "hardware": "h100",
                                        "levels": levels})
        if two_level_network(topo) is not None:
            return topo


def test_pooled_pieces_are_never_above_the_level_model() -> None:
    """On 60 random topologies, 20 random width vectors each: the pieces' max (one direction) is at most the level
    model's all-to-all on every device, and the table-row-wise collectives' rows are at most `hierarchical_time`. The
    sends are exact where no level straddles the group (a level with peers on both sides sends to all of them at
    once): with one device holding all the width, its time is its send's, and the pieces reach it."""
    rng = np.random.default_rng(7)
    tight = exact = 0
    for _ in range(60):
        topo = random_topology(rng)
        levels = comm_levels(topo, None)  # (levels are listed: no profile needed)
        D, G = topo.num_devices, topo.intra_group_size
        lc = LevelComm(levels, num_devices=D, group_size=G, batch=8192.0, alltoall_latency_s=1e-5)
        ct = pooled_level_terms(levels, num_devices=D, group_size=G, batch=8192.0, latency_ms=lc.latency_ms, hier_start_ms=lc.hier_start_ms)
        assert ct.pooled and ct.local_size == G
        sizes = [1] + [lv.devices for lv in levels]
        exact += not any(a < G < b for a, b in zip(sizes, sizes[1:]))
        send_l, send_r = ct.send_scales
        for trial in range(20):
            dims = rng.integers(0, 5, size=D).astype(float) * 16 * (rng.random(D) < 0.7)
            if trial == 0:
                dims = np.zeros(D)
                dims[int(rng.integers(D))] = 64.0
            group = np.repeat(dims.reshape(-1, G).sum(axis=1), G) if G <= D else np.full(D, dims.sum())
            total = dims.sum()
            nl, nr = ct.local_peers, ct.remote_peers
            pieces = [send_l * nl * dims, ct.local_scale * (group - dims)]
            if not ct.single_host:
                pieces += [send_r * nr * dims, ct.remote_scale * (total - group)]
            bound = ct.latency_ms + np.max(pieces, axis=0)
            true = lc.time(dims)
            assert np.all(bound <= true * (1 + 1e-12)), (topo.levels, dims, bound, true)
            if trial == 0:
                d = int(np.argmax(dims))
                tight += bool(np.isclose(bound[d], true[d], rtol=1e-12)) and not any(a < G < b for a, b in zip(sizes, sizes[1:]))
            # the table-row-wise collectives: per group width W_h
            H = ct.num_groups
            widths = rng.integers(0, 3, size=H).astype(float) * 32
            mine = np.repeat(widths, G)
            rows = ct.hier_intra_ms * mine + np.maximum(ct.hier_send_ms * mine, ct.hier_recv_ms * (widths.sum() - mine))
            hier = rows + (ct.hier_start_ms if widths.sum() > 0 else 0.0)
            assert np.all(hier <= lc.hierarchical_time(widths) * (1 + 1e-12) + 1e-15)
    assert exact >= 30 and tight == exact  # (the device that holds everything waits for its sends, priced exactly)


@pytest.mark.parametrize("levels,per_host", [(THREE, 2), (PAIR, 4)], ids=["three-levels", "level-inside-a-host"])
def test_bound_below_the_enumerated_optimum_on_pooled_levels(levels: list[dict], per_host: int) -> None:
    """3 tables on 8 devices: whole on any device, column halves and row halves on 6 of the 28 pairs of devices
    (drawn per table: within a host, a domain and across), a replica, and a whole group's split (the hierarchical
    collectives); the bound is below the best of them, and says how it priced the network."""
    inst = with_levels(make_instance(3, 8, seed=9, per_host=per_host, mem_factor=1.5, batch_size=65536), levels)
    D, L = inst.topology.num_devices, inst.topology.intra_group_size
    rng = np.random.default_rng(5)
    pairs = list(itertools.combinations(range(D), 2))
    per_table = []
    for t in range(len(inst.tables)):
        opts = options(inst, t, host=False)
        whole_and_replica = opts[:D] + opts[-1:]
        some = [pairs[i] for i in rng.choice(len(pairs), size=6, replace=False)]
        half = inst.tables[t].dim // 2
        name = inst.tables[t].name
        opts = whole_and_replica + [[Shard(table=name, device=a, cols=half), Shard(table=name, device=b, col_offset=half, cols=half)]
                                    for a, b in some]
        opts += [row_blocks(inst, t, [a, b], [0.5, 0.5]) for a, b in some]
        opts += [row_blocks(inst, t, list(range(h * L, h * L + L)), [1.0 / L] * L) for h in range(inst.topology.num_intra_groups)]
        per_table.append(opts)
    best = math.inf
    for choice in itertools.product(*per_table):
        shards = [s for opt in choice for s in opt]
        if check_plan(inst, shards).ok:
            best = min(best, CM.plan_costs(inst, shards).max_cost)
    bound = analytic_lower_bound(inst, CM, time_limit=30)
    assert bound.covers_row_splits and bound.covers_replicas
    assert "pooled" in bound.covers and "topology.levels" in bound.covers
    assert 0 < bound.value_ms <= best * (1 + 1e-7), (bound.value_ms, best)


def test_solvers_plans_are_above_the_bound_on_three_levels() -> None:
    """A 24-table job on 16 devices in hosts of 2, NVLink domains of 8 and the network: greedy's, NeuroShard's and
    cpsat's plans are above the bound, and the bound is far above the table cuts alone."""
    from solvers.catalog import get_solver

    levels = [{"name": "host", "devices": 2, "bandwidth": 4e11}, {"name": "nvlink_domain", "devices": 8, "bandwidth": 3e11, "latency_s": 2e-6},
              {"name": "network", "devices": 16, "bandwidth": 2.5e10, "latency_s": 1e-5}]
    inst = with_levels(make_instance(24, 16, seed=21, per_host=2, mem_factor=1.6, batch_size=65536), levels)
    bound = analytic_lower_bound(inst, CM, time_limit=20)
    assert bound.status in ("optimal", "bound") and bound.source in ("symmetric LP", "relaxation")
    for name in ("greedy", "neuroshard", "cpsat"):
        res = get_solver(name).solve(inst, CM, time_limit=3, seed=0)
        assert CM.plan_costs(inst, res.plan.shards).max_cost >= bound.value_ms * (1 - 1e-9), name


def test_a_graph_is_still_refused_and_the_cli_bounds_levels(tmp_path) -> None:
    from shardopt.core.network_graph import two_level_graph

    inst = with_levels(make_instance(3, 8, seed=9, per_host=2), THREE)
    assert network_refusal(inst) is None
    doc = json.loads(make_instance(3, 4, seed=9, per_host=2).model_dump_json())
    doc["topology"]["graph"] = two_level_graph(4, 2, 3e11, 2.5e10, 1e-5)
    graph = Instance.model_validate(doc)
    assert "topology.graph" in network_refusal(graph)
    with pytest.raises(BoundError, match="topology.graph"):
        analytic_lower_bound(graph, CM, time_limit=2)
    path = tmp_path / "three.json"
    path.write_text(inst.model_dump_json())
    r = CliRunner().invoke(app, ["bound", str(path), "--time-limit", "10", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["bound"]
    assert out["value_ms"] > 0 and "pooled" in out["covers"]
