"""Topology graphs (issue 36): a networkx node-link document as the network. The graph of the two levels of old costs
what the two-level model does (every committed instance's golden plan); shared links (an oversubscribed uplink) slow
the devices whose bytes cross them as the formula says; bad graphs exit 2 naming the element."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel
from shardopt.cli import app
from shardopt.core.hardware import get_profile
from shardopt.core.ir import Instance, Plan, Shard, load_instance
from shardopt.core.network_graph import two_level_graph
from tests.topology_golden import GOLDEN, golden_plan

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9
SAMPLE = sorted(json.loads(GOLDEN.read_text()))[::3]  # every third committed instance: all families, one host to 512 devices


def as_graph(inst: Instance) -> Instance:
    topo, prof = inst.topology, get_profile(inst.topology.hardware)
    doc = json.loads(inst.model_dump_json())
    doc["topology"]["graph"] = two_level_graph(topo.num_devices, topo.devices_per_host, topo.intra_host_bandwidth or prof.nvlink_bandwidth,
                                               topo.inter_host_bandwidth or prof.network_bandwidth, prof.network_latency_s)
    for name in ("intra_host_bandwidth", "inter_host_bandwidth"):
        doc["topology"].pop(name, None)
    return Instance.model_validate(doc)


@pytest.mark.parametrize("name", SAMPLE)
def test_the_graph_of_two_levels_costs_what_the_two_level_model_does(name: str) -> None:
    inst = load_instance(ROOT / name)
    if inst.topology.num_devices == 1:
        pytest.skip("one device: no network")
    plan = golden_plan(inst)
    want = AnalyticCostModel().plan_costs(inst, plan)
    bm = AnalyticCostModel().bind(as_graph(inst))
    assert bm.lists_network
    got = bm.plan_costs(plan)
    np.testing.assert_allclose(got.fwd_comm, want.fwd_comm, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.bwd_comm, want.bwd_comm, rtol=1e-9, atol=1e-12)
    # the greedy solvers' question, answered incrementally over the links: what the two-level model answers
    dims = np.asarray(AnalyticCostModel().bind(inst).shard_sums(plan.shards)[1].sum(axis=0))
    cands = np.unique(np.linspace(0, inst.topology.num_devices - 1, 7).astype(int))
    np.testing.assert_allclose(bm.comm_totals_after_adding(dims, 32.0, cands),
                               AnalyticCostModel().bind(inst).comm_totals_after_adding(dims, 32.0, cands), rtol=1e-9, atol=1e-12)


def leaf_spine(uplink: float) -> Instance:
    """4 devices, 2 per leaf switch (also their host), the leaves joined by one spine link of `uplink` bytes/s."""
    nodes = [{"id": f"g{d}", "device": d} for d in range(4)] + [{"id": "leaf0"}, {"id": "leaf1"}, {"id": "spine", "latency_s": 5e-6}]
    edges = [{"source": f"g{d}", "target": f"leaf{d // 2}", "bandwidth": 100 * GB} for d in range(4)]
    edges += [{"source": "leaf0", "target": "spine", "bandwidth": uplink}, {"source": "leaf1", "target": "spine", "bandwidth": uplink}]
    tables = [{"name": f"t{i}", "rows": 10000, "dim": 32, "pooling_factor": 4.0, "access": {"zipf": 1.0}} for i in range(8)]
    return Instance.model_validate({"schema_version": 1, "kind": "instance", "name": "leaf-spine", "tables": tables,
                                    "topology": {"num_devices": 4, "devices_per_host": 2, "memory_bytes": 10**10, "hardware": "h100",
                                                 "graph": {"nodes": nodes, "edges": edges}},
                                    "workload": {"batch_size": 4096, "optimizer": "sgd"}})


def test_a_shared_uplink_is_the_bottleneck_of_the_devices_that_cross_it() -> None:
    dims = np.array([64.0, 32.0, 16.0, 0.0])
    q = 4096 / 4 * 4
    lat = (get_profile("h100").alltoall_latency_s + 5e-6) * 1e3
    for uplink in (400 * GB, 20 * GB):
        bm = AnalyticCostModel().bind(leaf_spine(uplink))
        got = bm.comm_time(dims)
        up = [2 * q * (dims[0] + dims[1]), 2 * q * (dims[2] + dims[3])]  # each leaf's devices send to 2 peers beyond it
        for d in range(4):
            other = d ^ 1
            own = max(3 * q * dims[d], q * (dims.sum() - dims[d])) / (100 * GB)  # its link to the leaf: sends to 3 peers
            shared = max(up[0], up[1]) / uplink  # it sends up its leaf's uplink and receives down it, from the other leaf's uplink
            assert got[d] == pytest.approx(max(own, shared) * 1e3 + lat, rel=1e-9), (uplink, d, other)
    slow, fast = AnalyticCostModel().bind(leaf_spine(20 * GB)), AnalyticCostModel().bind(leaf_spine(400 * GB))
    assert (slow.comm_time(dims) > fast.comm_time(dims)).all()
    after = slow.comm_totals_after_adding(dims, 16.0, np.arange(4))
    for c in range(4):
        bumped = dims.copy()
        bumped[c] += 16.0
        np.testing.assert_allclose(after[c], slow.comm_totals(bumped), rtol=1e-12)


def graph_doc(**changes) -> dict:
    doc = json.loads(leaf_spine(20 * GB).model_dump_json())
    g = doc["topology"]["graph"]
    for key, value in changes.items():
        if key == "nodes":
            g["nodes"] = value(g["nodes"])
        elif key == "edges":
            g["edges"] = value(g["edges"])
        else:
            doc["topology"][key] = value
    return doc


BAD_GRAPHS = [
    (dict(edges=lambda e: e[:4]), "graph: no path joins device(s) 2, 3 to device 0"),
    (dict(edges=lambda e: e[:-1] + [{**e[-1], "bandwidth": 0}]), "graph.edges[5] (leaf1 - spine).bandwidth: 0 must be a number > 0"),
    (dict(nodes=lambda n: n[1:]), "topology.graph.nodes: no node for device(s) 0"),
    (dict(edges=lambda e: e + [{"source": "g0", "target": "leaf9", "bandwidth": 1e9}]), "graph.edges[6] (g0 - leaf9): node 'leaf9' is not in graph.nodes"),
    (dict(nodes=lambda n: [{**n[0], "device": 1}] + n[1:]), "graph.nodes[1].device: device 1 is node 'g0' already"),
    (dict(nodes=lambda n: [{**n[0], "host": 1}] + n[1:]), "graph.nodes[0].host: device 0 says host 1"),
    (dict(edges=lambda e: e + [{"source": "g0", "target": "leaf0", "bandwidth": 1e9}]), "graph.edges[6] (g0 - leaf0): the link is listed twice"),
    (dict(levels=[{"name": "x", "devices": 4, "bandwidth": 1e10}]), "give the network as levels or as a graph, not both"),
    (dict(inter_host_bandwidth=1e10), "inter_host_bandwidth: 10000000000.0 beside graph"),
]


@pytest.mark.parametrize("changes, message", BAD_GRAPHS)
def test_bad_graphs_exit_2_naming_the_element(tmp_path: Path, changes: dict, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(graph_doc(**changes)))
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "greedy"])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_graph_topologies_are_solved_inspected_and_drawn(tmp_path: Path) -> None:
    inst = leaf_spine(20 * GB)
    path = tmp_path / "leaf-spine.json"
    path.write_text(inst.model_dump_json())
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "neuroshard", "--time-limit", "3", "--json", "-c", "analytic"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    plan = Plan.model_validate(doc["plan"])
    assert doc["predicted"]["max_cost_ms"] == pytest.approx(AnalyticCostModel().plan_costs(inst, plan).max_cost, rel=1e-9)
    assert doc["lower_bound"] is None and "shardopt bound" in doc["lower_bound_note"]  # (a graph is bounded, on asking)
    svg = tmp_path / "net.svg"
    r = CliRunner().invoke(app, ["inspect", str(path), "--draw", str(svg)])
    assert r.exit_code == 0, r.output
    assert "7 nodes (4 devices, 3 switches) and 6 links" in r.output.replace("\n", " ").replace("│", " ").replace("  ", " ") or "7 nodes" in r.output
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    r = CliRunner().invoke(app, ["inspect", str(path), "--draw", str(tmp_path / "net.png")])
    assert r.exit_code == 2 and "--draw" in r.output
    from shardopt.data.torchrec_io import TorchRecTopologyError, torchrec_pod_size

    with pytest.raises(TorchRecTopologyError, match="topology.graph"):
        torchrec_pod_size(inst.topology)
    levels_svg = tmp_path / "levels.svg"
    r = CliRunner().invoke(app, ["inspect", str(ROOT / "instances/suites/nvl72-test/nvl72-test-s1-0000.json"), "--draw", str(levels_svg)])
    assert r.exit_code == 0 and "nvlink_domain" in levels_svg.read_text()


def test_a_graph_plan_with_a_row_split_in_a_host_and_a_replica() -> None:
    inst = as_graph(load_instance(ROOT / "instances/suites/tiered-test/tiered-test-s1-0003.json"))
    base = load_instance(ROOT / "instances/suites/tiered-test/tiered-test-s1-0003.json")
    plan = golden_plan(base)
    assert any(s.replicated for s in plan.shards)
    np.testing.assert_allclose(AnalyticCostModel().plan_costs(inst, plan).bwd_comm, AnalyticCostModel().plan_costs(base, plan).bwd_comm, rtol=1e-9)
    shards = [Shard(table=t.name, device=i % inst.topology.num_devices) for i, t in enumerate(inst.tables)]
    assert AnalyticCostModel().plan_costs(inst, shards).max_cost > 0


def test_a_graph_is_routed_once_per_document() -> None:
    """Binding the same graph twice reuses its routes (a solve binds several times); another bandwidth is routed
    anew and priced on its own."""
    a, b = AnalyticCostModel().bind(leaf_spine(20 * GB)), AnalyticCostModel().bind(leaf_spine(20 * GB))
    assert a._by_level is b._by_level
    c = AnalyticCostModel().bind(leaf_spine(5 * GB))
    assert c._by_level is not a._by_level
    dims = np.array([32.0, 0.0, 0.0, 32.0])
    assert np.all(c.comm_time(dims) > a.comm_time(dims))
