"""The certified bound on networks beyond its two roles: topology levels of three or more, a level inside a host
(`costmodels.comm_terms.pooled_level_terms` pools the levels into the group a table-row-wise split spans and the rest
of the job), and network graphs (`GraphComm.bound_terms`: per device, its own links' shares of its sends and the
last hops of its receives). Their pieces must never be above the model's time (costmodels/level_comm.py,
graph_comm.py) - checked on random topologies and widths - and the bound built on them must stay below every plan
(enumerated optima, random plans)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from conftest import make_instance, solve_on_budget
from test_bound_coverage import best_of, options, row_blocks, with_levels
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel
from costmodels.comm_terms import pooled_level_terms
from costmodels.level_comm import LevelComm
from shardopt.cli import app
from shardopt.core.ir import Instance, Shard, Topology
from shardopt.core.levels import comm_levels, two_level_network
from shardopt.core.plan_check import check_plan
from solvers.bound import analytic_lower_bound, network_pooling
from solvers.bound.inequalities import comm_pieces

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


@pytest.mark.parametrize("levels,per_host", [pytest.param(THREE, 2, marks=pytest.mark.slow), (PAIR, 4)],
                         ids=["three-levels", "level-inside-a-host"])
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
    best, _ = best_of(inst, per_table)
    bound = analytic_lower_bound(inst, CM, time_limit=30)
    assert bound.covers_row_splits and bound.covers_replicas
    assert "pooled" in bound.covers and "topology.levels" in bound.covers
    assert 0 < bound.value_ms <= best * (1 + 1e-7), (bound.value_ms, best)


def test_solvers_plans_are_above_the_bound_on_three_levels() -> None:
    """A 24-table job on 16 devices in hosts of 2, NVLink domains of 8 and the network: greedy's, NeuroShard's and
    cpsat's plans are above the bound, and the bound is far above the table cuts alone."""

    levels = [{"name": "host", "devices": 2, "bandwidth": 4e11}, {"name": "nvlink_domain", "devices": 8, "bandwidth": 3e11, "latency_s": 2e-6},
              {"name": "network", "devices": 16, "bandwidth": 2.5e10, "latency_s": 1e-5}]
    inst = with_levels(make_instance(24, 16, seed=21, per_host=2, mem_factor=1.6, batch_size=65536), levels)
    bound = analytic_lower_bound(inst, CM, time_limit=8)
    assert bound.status in ("optimal", "bound") and bound.source in ("symmetric LP", "relaxation")
    for name in ("greedy", "neuroshard", "cpsat"):
        res = solve_on_budget(name, inst, CM, 2, seed=0)
        assert CM.plan_costs(inst, res.plan.shards).max_cost >= bound.value_ms * (1 - 1e-9), name


def test_every_network_is_bounded_and_the_cli_says_how(tmp_path) -> None:
    inst = with_levels(make_instance(3, 8, seed=9, per_host=2), THREE)
    assert "pooled" in network_pooling(inst)
    assert network_pooling(make_instance(3, 8, seed=9, per_host=2)) is None  # (the two levels of old: exact)
    path = tmp_path / "three.json"
    path.write_text(inst.model_dump_json())
    r = CliRunner().invoke(app, ["bound", str(path), "--time-limit", "10", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["bound"]
    assert out["value_ms"] > 0 and "pooled" in out["covers"]


# ---- network graphs (docs/analytic-bound.md, "Network graphs") -------------------------------------------------


def random_graph_instance(rng: np.random.Generator) -> Instance:
    """Hosts of 1-4 devices on an NVSwitch each (where more than one), every device with a NIC on a leaf switch (one
    leaf per host, or rails: one leaf per local rank), leaves joined through one or two spines, random bandwidths and
    switch latencies: shared links that some devices' bytes cross and others' do not."""
    per_host = int(rng.choice([1, 2, 4]))
    hosts = int(rng.choice([2, 3, 4]))
    D = per_host * hosts
    rails = per_host > 1 and rng.random() < 0.5
    nodes = [{"id": f"g{d}", "device": d} for d in range(D)]
    edges = []
    leaves = per_host if rails else hosts
    nodes += [{"id": f"leaf{i}", "latency_s": float(rng.uniform(0, 5e-6))} for i in range(leaves)]
    spines = int(rng.integers(1, 3))
    nodes += [{"id": f"spine{i}", "latency_s": float(rng.uniform(0, 1e-5))} for i in range(spines)]
    for h in range(hosts):
        if per_host > 1:
            nodes.append({"id": f"nvs{h}"})
            nvl = float(rng.uniform(1e11, 9e11))
            edges += [{"source": f"g{h * per_host + r}", "target": f"nvs{h}", "bandwidth": nvl} for r in range(per_host)]
        for r in range(per_host):
            edges.append({"source": f"g{h * per_host + r}", "target": f"leaf{r if rails else h}", "bandwidth": float(rng.uniform(1e10, 5e10))})
    for i in range(leaves):
        for j in range(spines):
            edges.append({"source": f"leaf{i}", "target": f"spine{j}", "bandwidth": float(rng.uniform(5e9, 1e11))})
    inst = make_instance(int(rng.integers(3, 6)), D, seed=int(rng.integers(1000)), per_host=per_host, mem_factor=float(rng.choice([1.5, 3.0])),
                         batch_size=int(rng.choice([4096, 65536])))
    doc = json.loads(inst.model_dump_json())
    doc["topology"]["graph"] = {"nodes": nodes, "edges": edges}
    return Instance.model_validate(doc)


def test_graph_pieces_are_never_above_the_graph_model() -> None:
    """On 40 random leaf-spine / rail graphs, 20 random width vectors each: the pieces' max (`comm_pieces`, shared
    uplinks' group pieces included) is at most the graph model's all-to-all on every device, and the table-row-wise
    rows at most its `hierarchical_time`."""
    rng = np.random.default_rng(11)
    shared = 0
    for _ in range(40):
        inst = random_graph_instance(rng)
        bm = CM.bind(inst)
        gc = bm._by_level
        ct = bm.comm_terms()
        assert ct.pooled and "topology.graph" in network_pooling(inst)
        D, G = inst.topology.num_devices, ct.group_size
        shared += ct.group_send_scale > ct.send_scales[1] * ct.remote_peers[0] / G * (1 + 1e-9)  # (the uplink's piece binds)
        for _ in range(20):
            dims = rng.integers(0, 5, size=D).astype(float) * 16 * (rng.random(D) < 0.7)
            group = np.repeat(dims.reshape(-1, G).sum(axis=1), G)
            true = 2 * gc.time(dims)  # (the pieces are fwd + bwd)
            for d in range(D):
                bound = max(p.const + p.cu * dims[d] + p.cv * group[d] for p in comm_pieces(bm, d, float(dims.sum())))
                assert bound <= true[d] * (1 + 1e-12), (d, dims, bound, true[d])
            widths = rng.integers(0, 3, size=ct.num_groups).astype(float) * 32
            mine = np.repeat(widths, G)
            rows = ct.hier_intra_ms * mine + np.maximum(ct.hier_send_ms * mine, ct.hier_recv_ms * (widths.sum() - mine))
            assert np.all(rows + (ct.hier_start_ms if widths.sum() else 0.0) <= gc.hierarchical_time(widths) * (1 + 1e-12) + 1e-15)
    assert shared >= 5  # (graphs where a host's bytes together on a shared uplink price more than one device's own)


def test_the_graph_of_two_levels_is_bounded_as_the_two_levels_are() -> None:
    """The graph of the two levels of old (`two_level_graph`) gives the two-level terms exactly - its sends leave and
    its receives arrive over one link per role - so its bound is the two-level bound."""
    from shardopt.core.hardware import get_profile
    from shardopt.core.network_graph import two_level_graph

    inst = make_instance(6, 4, seed=4, per_host=2, mem_factor=1.6, batch_size=65536, hardware="a100")
    prof = get_profile("a100")
    doc = json.loads(inst.model_dump_json())
    doc["topology"]["graph"] = two_level_graph(4, 2, prof.nvlink_bandwidth, prof.network_bandwidth, prof.network_latency_s)
    graph = Instance.model_validate(doc)
    a, b = CM.bind(inst).comm_terms(), CM.bind(graph).comm_terms()
    for name in ("latency_ms", "local_scale", "remote_scale", "hier_intra_ms", "hier_send_ms", "hier_recv_ms", "hier_start_ms"):
        assert getattr(b, name) == pytest.approx(getattr(a, name), rel=1e-12), name
    send = [max(s[0] * t.local_peers[0], s[1] * t.remote_peers[0]) for t, s in ((a, a.send_scales), (b, b.send_scales))]
    assert send[1] == pytest.approx(send[0], rel=1e-12)  # (one send piece on the graph: its busiest own link)
    two, on_graph = analytic_lower_bound(inst, CM, time_limit=20), analytic_lower_bound(graph, CM, time_limit=20)
    assert two.status == on_graph.status == "optimal"  # (solved to HiGHS's gap: the same LP up to a repeated piece)
    assert on_graph.value_ms == pytest.approx(two.value_ms, rel=1e-3) and "topology.graph" in on_graph.covers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_bound_of_a_graph_is_below_its_plans(seed: int) -> None:
    """Random graphs: the bound is below the enumerated best table-wise plan and below random plans of column
    halves, replicas and row splits (over any devices, over a whole host)."""
    rng = np.random.default_rng(100 + seed)
    inst = random_graph_instance(rng)
    while inst.topology.num_devices > 6 or len(inst.tables) > 4:
        inst = random_graph_instance(rng)
    D, L = inst.topology.num_devices, inst.topology.intra_group_size
    bound = analytic_lower_bound(inst, CM, time_limit=20)
    assert bound.covers_row_splits and bound.covers_replicas and "topology.graph" in bound.covers
    best = min((CM.plan_costs(inst, p).max_cost for where in itertools.product(range(D), repeat=len(inst.tables))
                if check_plan(inst, p := [Shard(table=t.name, device=d) for t, d in zip(inst.tables, where)]).ok), default=math.inf)
    assert bound.value_ms <= best * (1 + 1e-7)
    judged = 0
    for _ in range(80):
        shards = []
        for t, table in enumerate(inst.tables):
            u = rng.random()
            if u < 0.15:
                shards += [Shard(table=table.name, device=d, replicated=True) for d in range(D)]
            elif u < 0.4:
                if rng.random() < 0.5 and inst.topology.num_intra_groups > 1:
                    h = int(rng.integers(inst.topology.num_intra_groups))
                    devs = list(range(h * L, h * L + L))
                else:
                    devs = [int(e) for e in rng.choice(D, size=2, replace=False)]
                devs = devs if len(devs) > 1 else devs * 2
                shards += row_blocks(inst, t, devs, [1.0 / len(devs)] * len(devs))
            elif u < 0.65:
                half = table.dim // 2
                shards += [Shard(table=table.name, device=int(rng.integers(D)), cols=half),
                           Shard(table=table.name, device=int(rng.integers(D)), col_offset=half, cols=half)]
            else:
                shards.append(Shard(table=table.name, device=int(rng.integers(D))))
        if check_plan(inst, shards).ok:
            judged += 1
            assert bound.value_ms <= CM.plan_costs(inst, shards).max_cost * (1 + 1e-7)
    assert judged >= 20
