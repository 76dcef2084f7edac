"""Topology levels (issue 36): old documents load and cost exactly as before; a topology that lists the two levels
of old (host, network) costs what the two-level model says; levels change the all-to-all as the level formula says;
bad levels are refused naming the field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel
from shardopt.cli import app
from shardopt.core.hardware import get_profile
from shardopt.core.ir import Instance, Plan, Shard, load_instance
from tests.topology_golden import GOLDEN, golden_plan

ROOT = Path(__file__).resolve().parents[1]


def with_levels(inst: Instance, levels: list[dict]) -> Instance:
    doc = inst.model_dump(mode="json")
    doc["topology"]["levels"] = levels
    for name in ("intra_host_bandwidth", "inter_host_bandwidth"):
        doc["topology"].pop(name, None)
    return Instance.model_validate(doc)


def two_levels_of_old(inst: Instance) -> list[dict]:
    """The levels a topology without them stands for: NVLink in a host, the network between hosts."""
    topo, prof = inst.topology, get_profile(inst.topology.hardware)
    out = []
    if topo.devices_per_host > 1:
        out.append({"name": "host", "devices": topo.devices_per_host, "bandwidth": topo.intra_host_bandwidth or prof.nvlink_bandwidth})
    if topo.num_hosts > 1:
        out.append({"name": "network", "devices": topo.num_devices, "bandwidth": topo.inter_host_bandwidth or prof.network_bandwidth,
                    "latency_s": prof.network_latency_s})
    return out


GOLDEN_COSTS = json.loads(GOLDEN.read_text())
GOLDEN_RTOL = 1e-14  # a few units in the last place of a double


@pytest.mark.parametrize("name", sorted(GOLDEN_COSTS))
def test_old_documents_load_and_cost_exactly_as_before(name: str) -> None:
    inst = load_instance(ROOT / name)
    was = GOLDEN_COSTS[name]
    assert hashlib.sha256(inst.model_dump_json().encode()).hexdigest() == was["document_sha256"]
    costs = AnalyticCostModel().plan_costs(inst, golden_plan(inst))
    # the same to the last bits: numpy's sums and einsum reorder their additions with the CPU's vector width, so the
    # file written on one machine can differ from another's in the last place (a changed formula moves far more)
    np.testing.assert_allclose(float(costs.max_cost), was["max_cost_ms"], rtol=GOLDEN_RTOL, atol=0)
    np.testing.assert_allclose(costs.fwd_comm, was["fwd_comm_ms"], rtol=GOLDEN_RTOL, atol=0)
    np.testing.assert_allclose(costs.bwd_comm, was["bwd_comm_ms"], rtol=GOLDEN_RTOL, atol=0)
    if inst.topology.num_devices > 1:  # the same two levels, listed: the level formulas give the same costs
        levelled = with_levels(inst, two_levels_of_old(inst))
        again = AnalyticCostModel().plan_costs(levelled, golden_plan(levelled))
        np.testing.assert_allclose(again.fwd_comm, costs.fwd_comm, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(again.bwd_comm, costs.bwd_comm, rtol=1e-12, atol=1e-12)
        assert again.max_cost == pytest.approx(costs.max_cost, rel=1e-12)


GB = 1e9
RACK = [  # 8 devices: hosts of 2, NVLink domains of 4 (two hosts), a network over both domains
    {"name": "host", "devices": 2, "bandwidth": 300 * GB},
    {"name": "nvlink_domain", "devices": 4, "bandwidth": 200 * GB, "latency_s": 2e-6},
    {"name": "network", "devices": 8, "bandwidth": 25 * GB, "latency_s": 10e-6},
]


def rack_instance(levels: list[dict] | None = RACK, batch: int = 4096) -> Instance:
    tables = [{"name": f"t{i}", "rows": 20000 + 1000 * i, "dim": 16 * (1 + i % 4), "pooling_factor": 4.0 + i, "access": {"zipf": 1.0}}
              for i in range(12)]
    topo = {"num_devices": 8, "devices_per_host": 2, "memory_bytes": 10**10, "hardware": "a100"}
    if levels is not None:
        topo["levels"] = levels
    return Instance.model_validate({"schema_version": 1, "kind": "instance", "name": "rack", "tables": tables, "topology": topo,
                                    "workload": {"batch_size": batch, "optimizer": "sgd"}})


def test_the_all_to_all_follows_the_levels_by_hand() -> None:
    inst = rack_instance()
    bm = AnalyticCostModel().bind(inst)
    dims = np.array([16.0, 32, 0, 48, 64, 0, 16, 32])
    q = 4096 / 8 * 4
    lat = (get_profile("a100").alltoall_latency_s + 10e-6) * 1e3
    want = []
    for d in range(8):
        host, dom = d // 2 * 2, d // 4 * 4
        recv_host = dims[host:host + 2].sum() - dims[d]
        recv_dom = dims[dom:dom + 4].sum() - dims[host:host + 2].sum()
        recv_net = dims.sum() - dims[dom:dom + 4].sum()
        t = max(max(1 * dims[d], recv_host) * q / (300 * GB), max(2 * dims[d], recv_dom) * q / (200 * GB),
                max(4 * dims[d], recv_net) * q / (25 * GB))
        want.append(t * 1e3 + lat)
    np.testing.assert_allclose(bm.comm_time(dims), want, rtol=1e-12)
    np.testing.assert_allclose(bm.comm_totals(dims), 2 * np.array(want), rtol=1e-12)


@pytest.mark.parametrize("levels", [RACK, RACK[1:], RACK[:1] + RACK[2:]])
def test_adding_a_width_costs_what_the_full_formula_says(levels: list[dict]) -> None:
    bm = AnalyticCostModel().bind(rack_instance(levels))
    rng = np.random.default_rng(3)
    for _ in range(5):
        dims = rng.integers(0, 6, size=8).astype(float) * 16
        cands = np.arange(8)
        got = bm.comm_totals_after_adding(dims, 32.0, cands)
        for c in cands:
            after = dims.copy()
            after[c] += 32.0
            np.testing.assert_allclose(got[c], bm.comm_totals(after), rtol=1e-12)


def test_an_nvlink_domain_over_hosts_is_cheaper_than_the_network_between_them() -> None:
    flat = rack_instance([{"name": "host", "devices": 2, "bandwidth": 300 * GB},
                          {"name": "network", "devices": 8, "bandwidth": 25 * GB, "latency_s": 10e-6}])
    plan = Plan(shards=[Shard(table=t.name, device=i % 8) for i, t in enumerate(flat.tables)], solver="rr")
    in_domain = AnalyticCostModel().plan_costs(rack_instance(), plan)
    over_network = AnalyticCostModel().plan_costs(flat, plan)
    assert in_domain.fwd_comm.max() < over_network.fwd_comm.max()
    one_domain = rack_instance([{"name": "host", "devices": 2, "bandwidth": 300 * GB},
                                {"name": "nvlink_domain", "devices": 8, "bandwidth": 300 * GB, "latency_s": 2e-6}])
    assert AnalyticCostModel().plan_costs(one_domain, plan).fwd_comm.max() < in_domain.fwd_comm.max()


def test_row_splits_in_a_host_and_replicas_follow_the_levels() -> None:
    inst = rack_instance()
    t0, t1 = inst.tables[0], inst.tables[1]
    half = t1.rows // 2
    shards = [Shard(table=t0.name, device=d, replicated=True) for d in range(8)]
    shards += [Shard(table=t1.name, device=2, rows=half), Shard(table=t1.name, device=3, row_offset=half, rows=t1.rows - half)]
    shards += [Shard(table=t.name, device=i % 8) for i, t in enumerate(inst.tables[2:])]
    bm = AnalyticCostModel().bind(inst)
    # host 1 (devices 2, 3) holds t1 split by rows: its reduce-scatter crosses the host level (1 peer), its all-to-all
    # over the local rank's 3 peers elsewhere: 1 in the NVLink domain, 2 over the network
    hw = np.zeros(4)
    hw[1] = t1.dim
    q = 4096 / 8 * 4
    H = 4
    prof = get_profile("a100")
    start = (2 * prof.alltoall_latency_s + 10e-6) * 1e3
    got = bm.hierarchical_comm(hw)
    for d in range(8):
        mine = hw[d // 2]
        intra = 1 * H * q * mine / (300 * GB)
        dom_hosts = hw[d // 4 * 2: d // 4 * 2 + 2]
        inter = max(max(1 * q * mine, q * (dom_hosts.sum() - mine)) / (200 * GB), max(2 * q * mine, q * (hw.sum() - dom_hosts.sum())) / (25 * GB))
        assert got[d] == pytest.approx((intra + inter) * 1e3 + start, rel=1e-12)
    assert bm.replicated_comm(0) == pytest.approx(2 * 7 / 8 * t0.rows * t0.dim * 4 / (25 * GB) * 1e3, rel=1e-12)
    costs = bm.plan_costs(shards)
    assert np.all(costs.bwd_comm > costs.fwd_comm)  # the replica's all-reduce rides on the backward pass


BAD = [
    ([{"name": "host", "devices": 2, "bandwidth": 1e11}], "levels[0].devices: 2 is not num_devices 8"),
    ([{"name": "host", "devices": 4, "bandwidth": 1e11}, {"name": "pod", "devices": 4, "bandwidth": 1e10}], "levels[1].devices: 4 is not more than"),
    ([{"name": "a", "devices": 4, "bandwidth": 1e11}, {"name": "b", "devices": 6, "bandwidth": 1e10}, {"name": "c", "devices": 8, "bandwidth": 1e9}],
     "levels[1].devices: 6 is not a multiple of levels[0].devices 4"),
    ([{"name": "x", "devices": 8, "bandwidth": 0}], "bandwidth"),
    ([{"name": "x", "devices": 4, "bandwidth": 1e11}, {"name": "x", "devices": 8, "bandwidth": 1e10}], "levels[1].name: 'x' repeats"),
]


@pytest.mark.parametrize("levels, message", BAD)
def test_bad_levels_exit_2_naming_the_field(tmp_path: Path, levels: list[dict], message: str) -> None:
    doc = json.loads(rack_instance(None).model_dump_json())
    doc["topology"]["levels"] = levels
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "greedy"])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_levels_that_cut_across_hosts_or_beside_the_old_overrides_are_refused() -> None:
    doc = json.loads(rack_instance(None).model_dump_json())
    doc["topology"]["devices_per_host"] = 4
    doc["topology"]["levels"] = [{"name": "pair", "devices": 2, "bandwidth": 1e11}, {"name": "odd", "devices": 8, "bandwidth": 1e10}]
    Instance.model_validate(doc)  # pairs inside a host of 4: fine
    doc["topology"]["devices_per_host"] = 2
    doc["topology"]["levels"] = [{"name": "quad", "devices": 4, "bandwidth": 1e11}, {"name": "net", "devices": 8, "bandwidth": 1e10}]
    Instance.model_validate(doc)  # a domain of two hosts: fine
    doc["topology"]["num_devices"], doc["topology"]["devices_per_host"] = 12, 3
    doc["topology"]["levels"] = [{"name": "quad", "devices": 4, "bandwidth": 1e11}, {"name": "net", "devices": 12, "bandwidth": 1e10}]
    with pytest.raises(ValueError, match=r"levels\[0\].devices: 4 cuts across hosts of 3 devices"):
        Instance.model_validate(doc)
    doc = json.loads(rack_instance().model_dump_json())
    doc["topology"]["inter_host_bandwidth"] = 1e10
    with pytest.raises(ValueError, match="inter_host_bandwidth: .* beside levels"):
        Instance.model_validate(doc)


def test_levels_round_trip_and_stay_out_of_old_documents() -> None:
    inst = rack_instance()
    again = Instance.model_validate_json(inst.model_dump_json())
    assert again == inst and again.topology.levels[1].name == "nvlink_domain"
    assert "levels" not in rack_instance(None).model_dump_json()


def test_torchrec_takes_an_nvlink_group_of_whole_hosts_and_refuses_what_it_cannot_say() -> None:
    from shardopt.data.torchrec_io import TorchRecTopologyError, topology_bandwidths, torchrec_pod_size

    domain = rack_instance(RACK[1:]).topology  # NVLink domains of 2 hosts, then the network
    assert torchrec_pod_size(domain) == 2
    bw = topology_bandwidths(domain)
    assert bw["intra_host_bw"] == 200 * GB / 1000 and bw["inter_host_bw"] == 25 * GB / 1000
    assert torchrec_pod_size(rack_instance(None).topology) is None
    with pytest.raises(TorchRecTopologyError, match="two levels .* not 3: host"):
        torchrec_pod_size(rack_instance().topology)
    doc = json.loads(rack_instance(None).model_dump_json())
    doc["topology"]["devices_per_host"] = 4
    doc["topology"]["levels"] = [{"name": "pair", "devices": 2, "bandwidth": 1e11}, {"name": "net", "devices": 8, "bandwidth": 1e10}]
    with pytest.raises(TorchRecTopologyError, match=r"levels\[0\]: 'pair' \(2 devices\) lies inside a host of 4"):
        torchrec_pod_size(Instance.model_validate(doc).topology)


def test_torchrec_planner_gets_the_pod_size() -> None:
    pytest.importorskip("torchrec")
    from solvers.torchrec_solver import TorchRecSolver

    topology, note = TorchRecSolver()._topology(rack_instance(RACK[1:]))
    assert topology.intra_group_size == 4 and topology.local_world_size == 2 and note["pod_size"] == 2


def test_what_prices_two_levels_only_says_so() -> None:
    from costmodels.auto import choose_auto
    from costmodels.base import UnsupportedPlacementError
    from costmodels.registry import get_cost_model
    from costmodels.store import shipped_cards
    from solvers.bound import analytic_lower_bound

    inst = rack_instance()  # (three levels: the bound pools them into its two roles, and says so)
    assert "pooled" in analytic_lower_bound(inst, time_limit=2).covers
    cpu = Instance.model_validate({**json.loads(inst.model_dump_json()), "topology": {**json.loads(inst.topology.model_dump_json()), "hardware": "cpu"}})
    with pytest.raises(UnsupportedPlacementError, match="lists its network"):
        get_cost_model("neural-cpu").bind(cpu)
    shipped = [c for c in shipped_cards() if c.hardware == "cpu" and c.preferred == "neural"]
    assert shipped
    same_machine = shipped[0].fingerprint  # (as on the machine that measured it: only the levels stand in the way)
    assert choose_auto(rack_instance(None).model_copy(update={"topology": cpu.topology.model_copy(update={"levels": None})}),
                       shipped[:1], machine=same_machine)[0] is not None
    card, reason = choose_auto(cpu, shipped[:1], machine=same_machine)
    assert card is None and "topology.levels" in reason and "analytic" in reason


def test_solvers_plan_on_levels_and_their_costs_are_the_models(tmp_path: Path) -> None:
    inst = rack_instance()
    path = tmp_path / "rack.json"
    path.write_text(inst.model_dump_json())
    for solver in ("greedy", "neuroshard", "cpsat"):
        r = CliRunner().invoke(app, ["solve", str(path), "--solver", solver, "--time-limit", "3", "--json", "-c", "analytic"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        plan = Plan.model_validate(doc["plan"])
        assert doc["predicted"]["max_cost_ms"] == pytest.approx(AnalyticCostModel().plan_costs(inst, plan).max_cost, rel=1e-9)
        assert doc["lower_bound"] is None and "shardopt bound" in doc["lower_bound_note"]  # (levels are bounded, on asking)


def test_inspect_shows_the_levels(tmp_path: Path) -> None:
    path = tmp_path / "rack.json"
    path.write_text(rack_instance().model_dump_json())
    r = CliRunner().invoke(app, ["inspect", str(path), "--json"])
    assert r.exit_code == 0, r.output
    levels = json.loads(r.stdout)["comm_levels"]
    assert [(lv["name"], lv["devices"], lv["peers"]) for lv in levels] == [("host", 2, 1), ("nvlink_domain", 4, 2), ("network", 8, 4)]
    r = CliRunner().invoke(app, ["inspect", str(ROOT / "instances/examples/small.json")])
    assert r.exit_code == 0 and "from the" in r.output


def test_the_nvl72_family_lists_its_domain_and_torchrec_takes_it() -> None:
    from shardopt.data.pools import generate_pool
    from shardopt.data.suites import FAMILIES, generate_instance
    from shardopt.data.torchrec_io import torchrec_pod_size

    pool = generate_pool(n=300, seed=4)
    for index, devices in ((0, 144), (1, 288)):
        inst = generate_instance(FAMILIES["nvl72"], pool, seed=2, index=index, pool_label="test")
        topo = inst.topology
        assert topo.hardware == "gb200" and topo.num_devices == devices and topo.devices_per_host == 4
        assert [(lv.name, lv.devices) for lv in topo.levels] == [("nvlink_domain", 72), ("network", devices)]
        assert 2 * devices <= len(inst.tables) <= 4 * devices
        assert torchrec_pod_size(topo) == 18
        bm = AnalyticCostModel().bind(inst)
        dims = np.zeros(devices)
        dims[0] = 64.0
        t = bm.comm_time(dims)  # a width on device 0: its rack's peers receive it over NVLink, the other racks' over the network
        assert t[1] < t[72] and t[1] == pytest.approx(t[71])


DOMAINS = [{"name": "nvlink_domain", "devices": 8, "bandwidth": 900 * GB},
           {"name": "network", "devices": 16, "bandwidth": 50 * GB, "latency_s": 10e-6}]


def domain_instance() -> Instance:
    """16 devices in hosts of 4, two NVLink domains of 8 (two hosts each)."""
    tables = [{"name": f"t{i}", "rows": 40000 + 1000 * i, "dim": 32 * (1 + i % 3), "pooling_factor": 6.0, "access": {"zipf": 1.0}} for i in range(20)]
    return Instance.model_validate({"schema_version": 1, "kind": "instance", "name": "domains", "tables": tables,
                                    "topology": {"num_devices": 16, "devices_per_host": 4, "memory_bytes": 10**10, "hardware": "gb200",
                                                 "levels": DOMAINS},
                                    "workload": {"batch_size": 8192, "optimizer": "sgd"}})


def test_table_row_wise_spans_the_nvlink_domain() -> None:
    from shardopt.core.sharding_types import TABLE_ROW_WISE, sharding_type

    assert domain_instance().topology.intra_group_size == 8  # the domain, not the host of 4
    assert rack_instance().topology.intra_group_size == 2  # the host is listed: it is the group
    assert rack_instance(None).topology.intra_group_size == 2
    pairs = json.loads(rack_instance(None).model_dump_json())
    pairs["topology"]["devices_per_host"] = 4
    pairs["topology"]["levels"] = [{"name": "pair", "devices": 2, "bandwidth": 1e11}, {"name": "net", "devices": 8, "bandwidth": 1e10}]
    assert Instance.model_validate(pairs).topology.intra_group_size == 4  # no level of whole hosts short of the job: the host
    inst = domain_instance()
    t = inst.tables[0]
    step = t.rows // 8
    shards = [Shard(table=t.name, device=8 + k, row_offset=k * step, rows=step if k < 7 else t.rows - 7 * step) for k in range(8)]
    assert sharding_type(inst.topology, t, shards) == TABLE_ROW_WISE
    rest = [Shard(table=u.name, device=i % 16) for i, u in enumerate(inst.tables[1:])]
    bm = AnalyticCostModel().bind(inst)
    with_split = bm.plan_costs(shards + rest)
    without = bm.plan_costs(rest)
    # the split's collectives on device 0 (other domain): its reduce-scatter moves nothing of its own (W_0 = 0), its
    # all-to-all receives q W from its local rank's peer in domain 1 over the network; two start-ups and the network's
    q = 8192 / 16 * 4
    prof = get_profile("gb200")
    hier_0 = q * t.dim / (50 * GB) * 1e3 + (2 * prof.alltoall_latency_s + 10e-6) * 1e3
    assert with_split.fwd_comm[0] - without.fwd_comm[0] == pytest.approx(hier_0, rel=1e-9)
    # on device 8: the reduce-scatter sends 7 domain peers H q W over NVLink (H = 2 domains), the all-to-all q W to one peer
    hier_8 = 7 * 2 * q * t.dim / (900 * GB) * 1e3 + q * t.dim / (50 * GB) * 1e3 + (2 * prof.alltoall_latency_s + 10e-6) * 1e3
    assert bm.hierarchical_comm(np.array([0.0, t.dim]))[8] == pytest.approx(hier_8, rel=1e-9)


def test_a_table_row_wise_split_over_the_domain_exports_to_torchrec() -> None:
    pytest.importorskip("torchrec")
    from shardopt.data.torchrec_io import export_problems, to_torchrec_plan

    inst = domain_instance()
    t = inst.tables[0]
    step = -(-t.rows // 8)
    shards = [Shard(table=t.name, device=8 + k, row_offset=k * step, rows=min(step, t.rows - k * step)) for k in range(8)]
    shards += [Shard(table=u.name, device=i % 16) for i, u in enumerate(inst.tables[1:])]
    plan = Plan(shards=shards, solver="hand")
    assert export_problems(inst, plan) == []
    sharding_plan = to_torchrec_plan(inst, plan)
    (module,) = sharding_plan.plan.values()
    ps = module[t.name]
    assert ps.sharding_type == "table_row_wise" and [r for r in ps.ranks] == list(range(8, 16))


def test_explain_on_an_nvl72_plan_where_communication_dominates() -> None:
    """explain's hint for a communication-bound bottleneck sums the device's widths over the per-type collectives
    (it formatted the array of them, and crashed, on the first such plan: an NVL72 rack's greedy plan)."""
    from solvers.catalog import get_solver
    from solvers.explain import explain_plan

    inst = load_instance(ROOT / "instances/suites/nvl72-test/nvl72-test-s1-0000.json")
    cm = AnalyticCostModel()
    plan = get_solver("greedy").solve(inst, cm, seed=0).plan
    ex = explain_plan(inst, cm, plan, bound_time_limit=10)
    hint = next(h for h in ex.hints if h.startswith("communication is"))
    assert "columns wide" in hint and "[" not in hint
    assert ex.bound is not None and ex.bound.value_ms is not None and ex.bound.value_ms <= ex.plan_cost
