"""Jobs that mix GPU generations (issue 36, Topology.device_hardware): each device is priced on its own kind's
profile and links, a uniform list costs what no list does, the solvers put the hot tables on the faster kind, bad
lists exit 2 naming the element, and what prices one kind only (the neural models, the certified bound) says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import solve_on_budget
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel
from shardopt.cli import app
from shardopt.core.ir import AccessProfile, Instance, Kernel, Plan, Shard, Table, Topology, Workload, load_instance
from shardopt.core.plan_check import check_plan

ROOT = Path(__file__).resolve().parents[1]
MIXED = ROOT / "instances/suites/mixed-test/mixed-test-s1-0000.json"
GiB = 1024**3


def relabel(inst: Instance, kinds: list[str] | None, hardware: str | None = None) -> Instance:
    doc = json.loads(inst.model_dump_json())
    doc["topology"]["device_hardware"] = kinds
    if hardware is not None:
        doc["topology"]["hardware"] = hardware
    return Instance.model_validate(doc)


def two_kinds(hot_pooling: float = 40.0) -> Instance:
    """One A100 and one H200 (hosts of one), a hot table and two cold ones, room for any placement."""
    tables = [Table(name="hot", rows=2_000_000, dim=128, pooling_factor=hot_pooling, access=AccessProfile(zipf=0.6)),
              Table(name="cold0", rows=500_000, dim=32, pooling_factor=1.0, access=AccessProfile(zipf=1.1)),
              Table(name="cold1", rows=400_000, dim=32, pooling_factor=1.0, access=AccessProfile(zipf=1.1))]
    topo = Topology(num_devices=2, devices_per_host=1, memory_bytes=[4 * GiB, 4 * GiB], hardware="a100", device_hardware=["a100", "h200"])
    return Instance(name="two-kinds", tables=tables, topology=topo, workload=Workload(batch_size=65536))


def test_a_uniform_list_costs_exactly_what_no_list_does() -> None:
    inst = load_instance(ROOT / "instances/suites/dreamshard-test/dreamshard-test-s1-0000.json")
    listed = relabel(inst, [inst.topology.hardware] * inst.topology.num_devices)
    assert not listed.topology.is_mixed and listed.topology.hardware_kinds() == [inst.topology.hardware] * inst.topology.num_devices
    plan = [Shard(table=t.name, device=i % inst.topology.num_devices) for i, t in enumerate(inst.tables)]
    a = AnalyticCostModel().plan_costs(inst, plan).columns
    b = AnalyticCostModel().plan_costs(listed, plan).columns
    assert np.array_equal(a, b)
    # and a document without the list is written as before (its content hash unchanged)
    assert "device_hardware" not in json.loads(inst.model_dump_json())["topology"]


def test_each_device_is_priced_on_its_own_kind() -> None:
    """A device's compute and all-to-all on the mixed job are what the same device costs on a job of its kind alone
    (a100 and h200 have the same collective start-ups, so nothing of the other kind leaks in)."""
    inst = load_instance(MIXED)
    kinds = inst.topology.hardware_kinds()
    assert inst.topology.is_mixed and set(kinds) == {"a100", "h200"}
    D = inst.topology.num_devices
    plan = [Shard(table=t.name, device=(7 * i) % D) for i, t in enumerate(inst.tables)]
    mixed = AnalyticCostModel().plan_costs(inst, plan).columns
    for kind in ("a100", "h200"):
        alone = AnalyticCostModel().plan_costs(relabel(inst, None, kind), plan).columns
        on = np.array([k == kind for k in kinds])
        np.testing.assert_allclose(mixed[on], alone[on], rtol=1e-12)
        assert not np.allclose(mixed[~on], alone[~on])  # (the other kind's devices do differ)
    bm = AnalyticCostModel().bind(inst)
    S = np.repeat(bm.table_states[:3].sum(axis=0)[None], D, axis=0)
    per_device = bm.compute_costs(S, bm.devices)
    h200 = np.array([k == "h200" for k in kinds])
    assert (per_device[h200].sum(axis=1) < per_device[~h200].sum(axis=1).min()).all()  # the newer kind is faster
    # no device named: the reference kind (the topology's `hardware`), as a table's cost alone is ordered by
    np.testing.assert_array_equal(bm.compute_costs(S[:1]), per_device[[int(np.flatnonzero(~h200)[0])]])
    # candidates in any order are priced on their own kinds
    cands = np.array([D - 1, 0, D // 2])
    np.testing.assert_array_equal(bm.compute_costs(S[cands], cands), per_device[cands])


def test_the_hot_table_goes_to_the_faster_kind_and_the_solvers_find_it() -> None:
    inst = two_kinds()
    cm = AnalyticCostModel()
    on_h200 = [Shard(table="hot", device=1), Shard(table="cold0", device=0), Shard(table="cold1", device=0)]
    on_a100 = [Shard(table="hot", device=0), Shard(table="cold0", device=1), Shard(table="cold1", device=1)]
    assert cm.plan_costs(inst, on_h200).max_cost < 0.8 * cm.plan_costs(inst, on_a100).max_cost

    for solver in ("greedy", "neuroshard", "cpsat"):
        plan = solve_on_budget(solver, inst, cm, 5, seed=0).plan
        hot = [s.device for s in plan.shards if s.table == "hot"]
        assert hot and all(d == 1 for d in hot), (solver, plan.shards)
        assert cm.plan_costs(inst, plan).max_cost <= cm.plan_costs(inst, on_h200).max_cost * (1 + 1e-9)


def test_planning_for_the_mix_beats_planning_blind_to_it() -> None:
    """On a committed `mixed` instance, greedy knowing each device's kind gives a plan faster (judged with the mix)
    than greedy pricing every device as the reference kind, and both plans keep each device's own memory."""
    inst = load_instance(MIXED)
    blind = relabel(inst, None)
    cm = AnalyticCostModel()
    from solvers.catalog import get_solver

    aware = get_solver("greedy").solve(inst, cm, seed=0).plan
    unaware = get_solver("greedy").solve(blind, cm, seed=0).plan
    for plan in (aware, unaware):
        assert check_plan(inst, plan).ok
    assert cm.plan_costs(inst, aware).max_cost < 0.9 * cm.plan_costs(inst, unaware).max_cost


BAD = [
    ({"device_hardware": ["a100"] * 15}, "device_hardware: 15 values for 16 devices"),
    ({"device_hardware": ["a100"] * 15 + ["tpu9"]}, "'tpu9' is not a known hardware profile"),
    ({"device_hardware": ["a100"] * 7 + ["h200"] * 9}, "device_hardware[7]: 'h200' on host 0 beside device_hardware[0] 'a100'"),
    ({"device_hardware": ["h200"] * 8 + ["h100"] * 8}, "hardware: 'a100' is none of the devices' kinds"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_device_hardware_exits_2_naming_the_element(tmp_path: Path, change: dict, message: str) -> None:
    doc = json.loads(MIXED.read_text())
    doc["topology"].update(change)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "greedy"])
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split()) and "Traceback" not in r.output


def test_what_prices_one_kind_says_so(tmp_path: Path) -> None:
    from costmodels.auto import choose_auto
    from costmodels.base import UnsupportedPlacementError
    from costmodels.registry import get_cost_model
    from costmodels.store import shipped_cards

    inst = two_kinds()
    cpu = relabel(inst, ["cpu", "a100"], "cpu")
    with pytest.raises(UnsupportedPlacementError, match="mixes hardware kinds"):
        get_cost_model("neural-cpu").bind(cpu)
    shipped = [c for c in shipped_cards() if c.hardware == "cpu" and c.preferred == "neural"]
    card, reason = choose_auto(cpu, shipped[:1], machine=shipped[0].fingerprint)
    assert card is None and "mixes hardware kinds" in reason
    path = tmp_path / "two.json"
    path.write_text(inst.model_dump_json())
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "greedy", "--json", "-c", "analytic"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    plan = Plan.model_validate(doc["plan"])
    assert doc["predicted"]["max_cost_ms"] == pytest.approx(AnalyticCostModel().plan_costs(inst, plan).max_cost, rel=1e-12)
    assert "a100 + h200 profiles" in doc["cost_model"]


def test_the_envelope_is_no_slower_than_any_kind_on_any_state() -> None:
    """What makes the bound of a mixed job sound: the kinds' envelope prices every device state and every width
    vector at or below what each kind does (random states of real shards, with host-memory tiers)."""
    from costmodels.analytic import BoundAnalytic, device_compute_costs, envelope_profile
    from shardopt.core.hardware import PROFILES

    inst = load_instance(ROOT / "instances/suites/tiered-test/tiered-test-s1-0000.json")
    rng = np.random.default_rng(0)
    kinds = [PROFILES[k] for k in ("v100", "a100", "h100", "h200", "gh200", "gb200")]
    env = envelope_profile(kinds)
    bm = AnalyticCostModel().bind(inst)
    T = len(inst.tables)
    n = 400
    shards = bm.shard_states(rng.integers(0, T, n), rng.choice([4, 8, 16, 32, 64, 128], n), rng.uniform(0.05, 1, n), np.ones(n),
                             rng.uniform(0, 1, n), rng.uniform(0, 1, n) < 0.3)
    states = np.stack([shards[rng.choice(n, rng.integers(1, 12), replace=False)].sum(axis=0) for _ in range(300)])
    low = device_compute_costs(states, env)
    for p in kinds:
        assert (low <= device_compute_costs(states, p) * (1 + 1e-12) + 1e-15).all(), p.name
    mixed = two_kinds()
    env_bm = BoundAnalytic(mixed, envelope_profile([PROFILES["a100"], PROFILES["h200"]]))
    mixed_bm = AnalyticCostModel().bind(mixed)
    dims = rng.uniform(0, 500, (200, 2))
    assert (env_bm.comm_totals(dims) <= mixed_bm.comm_totals(dims) * (1 + 1e-12)).all()


def test_the_bound_of_a_mixed_job_is_below_its_best_plan() -> None:
    from itertools import product

    from solvers.bound import analytic_lower_bound

    inst = two_kinds()
    cm = AnalyticCostModel()
    best = min(cm.plan_costs(inst, [Shard(table=t.name, device=d) for t, d in zip(inst.tables, devs)]).max_cost
               for devs in product(range(2), repeat=len(inst.tables)))
    b = analytic_lower_bound(inst, time_limit=10)
    assert 0 < b.value_ms <= best * (1 + 1e-9)
    assert "envelope" in b.covers
    roomier = load_instance(MIXED)  # (devices of different memories: the envelope with the largest memory on every device)
    b = analytic_lower_bound(roomier, time_limit=10)
    assert "envelope" in b.info["envelope_covers"] and "largest device's" in b.info["envelope_covers"]
    from solvers.catalog import get_solver

    plan = get_solver("greedy").solve(roomier, cm, seed=0).plan
    assert 0 < b.value_ms <= cm.plan_costs(roomier, plan).max_cost


def test_inspect_lists_the_kinds(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["inspect", str(MIXED), "--top", "0"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.replace("│", " ").split())
    assert "8 x a100 (devices 0-7" in text and "8 x h200 (devices 8-15" in text and "each device on its own kind's links" in text
    r = CliRunner().invoke(app, ["inspect", str(MIXED), "--json"])
    assert json.loads(r.stdout)["hardware_kinds"] == {"a100": 8, "h200": 8}


def test_a_measured_judge_refuses_a_mixed_job_by_name(tmp_path: Path) -> None:
    """The cpu / cuda judges time every device on this one machine: a mixed job's other kinds would be timed as it."""
    inst = two_kinds()
    path, plan_path = tmp_path / "two.json", tmp_path / "plan.json"
    path.write_text(inst.model_dump_json())
    plan = Plan(instance=inst.content_hash(), solver="hand", shards=[Shard(table="hot", device=1), Shard(table="cold0", device=0),
                                                                      Shard(table="cold1", device=0)])
    plan_path.write_text(plan.model_dump_json())
    for cmd in (["evaluate", str(path), str(plan_path), "--backend", "cpu"], ["compare", str(path), str(plan_path), str(plan_path), "--backend", "cpu"]):
        r = CliRunner().invoke(app, cmd)
        assert r.exit_code == 2, r.output
        assert "device_hardware mixes kinds (a100, h200)" in " ".join(r.output.split()) and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["evaluate", str(path), str(plan_path), "--backend", "sim"])
    assert r.exit_code == 0, r.output


def test_scaling_a_mixed_job_for_one_machine_makes_it_one_kind(tmp_path: Path) -> None:
    out = tmp_path / "scaled.json"
    r = CliRunner().invoke(app, ["scale", str(MIXED), "--batch-size", "4096", "--hardware", "cpu", "--out", str(out)])
    assert r.exit_code == 0, r.output
    scaled = load_instance(out)
    assert scaled.topology.hardware == "cpu" and scaled.topology.device_hardware is None
    assert scaled.metadata["scaled_from"]["hardware"] == ["a100+h200", "cpu"]
    assert scaled.topology.capacities() != [scaled.topology.capacity(0)] * scaled.topology.num_devices  # (each keeps its memory share)


def test_calibrating_for_a_mixed_job_is_refused_by_name() -> None:
    from shardopt.measure.calibration import CalibrationError, domain_settings

    with pytest.raises(CalibrationError, match="mixes hardware kinds"):
        domain_settings("cuda", "a100", [load_instance(MIXED)])


# topology levels for `random_mixed` (hosts of `per_host`, 4 hosts): NVLink domains of two hosts, then the network;
# or three levels (a host link of its own, the domain, the network: pooled into two roles by the bound)
MIXED_LEVELS = {
    "domains": lambda per_host: [{"name": "nvlink_domain", "devices": 2 * per_host, "bandwidth": 3e11, "latency_s": 1e-6},
                                 {"name": "network", "devices": 4 * per_host, "bandwidth": 2.5e10, "latency_s": 1e-5}],
    "three": lambda per_host: [{"name": "host", "devices": per_host, "bandwidth": 4e11},
                               {"name": "nvlink_domain", "devices": 2 * per_host, "bandwidth": 2e11, "latency_s": 1e-6},
                               {"name": "network", "devices": 4 * per_host, "bandwidth": 2.5e10, "latency_s": 1e-5}],
}


def random_mixed(seed: int, host_memory: bool = False, levels: str | None = None) -> Instance:
    """A small job of two kinds on two to four hosts (of one or two devices), the second kind's devices with 1.5x the
    HBM (with `host_memory`, each device a share of host memory as large as its HBM, and less HBM): few enough tables
    that every table-wise plan can be enumerated. `levels` (a key of MIXED_LEVELS): four hosts whose network is
    given as topology levels, the kinds split at an NVLink domain (or, with three levels, a host)."""
    rng = np.random.default_rng(seed)
    per_host = int(rng.choice([1, 2]))
    hosts = 4 if levels else 2 if per_host == 2 else int(rng.choice([2, 3, 4]))
    if levels == "three":
        per_host = 2
    kinds = [("a100", "h200"), ("v100", "h100"), ("a100", "h100"), ("h100", "h200")][seed % 4]
    split = 2 if levels == "domains" else int(rng.integers(1, hosts))
    dev_kinds = [kinds[0] if d // per_host < split else kinds[1] for d in range(per_host * hosts)]
    tables = [Table(name=f"t{i}", rows=int(rng.integers(1000, 3_000_000)), dim=int(rng.choice([4, 8, 16, 32, 64, 128])),
                    pooling_factor=float(rng.choice([1.0, 5.0, 20.0, 80.0])), access=AccessProfile(zipf=float(rng.choice([0.3, 0.8, 1.1, 1.4]))))
              for i in range(int(rng.integers(2, 5)))]
    cap = int(sum(t.rows * t.dim * 4 for t in tables) * float(rng.choice([1.0, 3.0])) / len(dev_kinds)) + 64 * 1024**2
    if host_memory:
        cap //= 2
    mems = [cap if k == kinds[0] else int(cap * 1.5) for k in dev_kinds]
    topo = Topology(num_devices=len(dev_kinds), devices_per_host=per_host, hardware=kinds[0], device_hardware=dev_kinds,
                    memory_bytes=mems, host_memory_bytes=mems if host_memory else 0,
                    levels=MIXED_LEVELS[levels](per_host) if levels else None)
    return Instance(name=f"mixed-{seed}", tables=tables, topology=topo, workload=Workload(batch_size=int(rng.choice([4096, 65536]))))


@pytest.mark.parametrize("seed, host, levels", [(0, False, None), (6, False, None), (10, False, None), (14, False, None), (1, True, None),
                                                (5, True, None), (18, True, None), (38, True, None), (5, False, "domains"),
                                                (9, True, "domains"), (1, False, "three"), (11, False, "three"),
                                                pytest.param(30, True, "three", marks=pytest.mark.slow)])
def test_the_per_kind_bound_is_below_every_plan_it_covers(seed: int, host: bool, levels: str | None) -> None:
    """Each device on its own kind (solvers.bound.kinds): below the best table-wise plan (enumerated) and below random
    plans of column shards, replicas and row splits (over devices anywhere, over all or some devices of one group);
    the bound of all those plans below the table-wise one (it covers more plans). With host memory, shards there too
    (UVM, alone or behind an HBM cache). With topology levels: NVLink domains of two hosts (the group), and three
    levels (pooled)."""
    from itertools import product

    from solvers.bound.kinds import kinds_lp_bound

    inst = random_mixed(seed, host, levels)
    cm = AnalyticCostModel()
    D = inst.topology.num_devices
    (whole, host_whole), (cols, host_cols) = kinds_lp_bound(inst, table_wise=True), kinds_lp_bound(inst)
    assert whole is not None and cols is not None and 0 < cols <= whole * (1 + 1e-9)
    assert host_whole == host_cols == host
    places = [(d, k) for d in range(D) for k in ([Kernel.fused, Kernel.fused_uvm] if host else [Kernel.fused])]
    costs = [cm.plan_costs(inst, plan).max_cost for where in product(places, repeat=len(inst.tables))
             if check_plan(inst, plan := [Shard(table=t.name, device=d, kernel=k) for t, (d, k) in zip(inst.tables, where)]).ok]
    assert costs and whole <= min(costs) * (1 + 1e-9)
    rng = np.random.default_rng(seed + 100)
    judged = 0
    per_host = inst.topology.intra_group_size  # (a table-row-wise split's group: the host, or an NVLink domain)
    for _ in range(60):
        shards: list[Shard] = []
        for t in inst.tables:
            units = t.dim // 4
            u = rng.random()
            if u < 0.15:
                shards += [Shard(table=t.name, device=d, replicated=True) for d in range(D)]
            elif u < 0.35:  # row blocks: on devices anywhere, on every device of one host, or on some of one host
                how = rng.integers(3)
                if how == 0:
                    devs = rng.choice(D, size=int(rng.integers(2, D + 1)), replace=False).tolist()
                else:
                    h = int(rng.integers(D // per_host))
                    devs = list(range(h * per_host, (h + 1) * per_host))[: per_host if how == 1 else max(1, per_host - 1)]
                edges = np.linspace(0, t.rows, len(devs) + 1).astype(int)
                shards += [Shard(table=t.name, device=int(d), row_offset=int(a), rows=int(b - a)) for d, a, b in zip(devs, edges[:-1], edges[1:])]
            elif units > 1 and rng.random() < 0.6:
                cut = int(rng.integers(1, units))
                shards += [Shard(table=t.name, device=int(rng.integers(D)), cols=4 * cut),
                           Shard(table=t.name, device=int(rng.integers(D)), col_offset=4 * cut, cols=4 * (units - cut))]
            elif host and rng.random() < 0.5:  # whole, in host memory: alone or behind a cache
                shards.append(Shard(table=t.name, device=int(rng.integers(D)), kernel=Kernel.fused_uvm) if rng.random() < 0.5 else
                              Shard(table=t.name, device=int(rng.integers(D)), kernel=Kernel.fused_uvm_caching,
                                    cache_load_factor=float(rng.choice([0.05, 0.2, 0.5]))))
            else:
                shards.append(Shard(table=t.name, device=int(rng.integers(D))))
        if check_plan(inst, shards).ok:
            judged += 1
            assert cols <= cm.plan_costs(inst, shards).max_cost * (1 + 1e-9)
    assert judged > 0


def test_the_bound_of_a_mixed_job_prices_each_device_on_its_kind() -> None:
    """On a committed mixed job the per-kind LP is far above the envelope, below a solver's plan, and says what it
    covers: row splits and replicas, not host-memory shards (the envelope's figure in info covers those where the
    topology has host memory)."""
    from solvers.bound import analytic_lower_bound
    from solvers.bound.bound import uncovered_reason
    from solvers.catalog import get_solver

    inst = load_instance(MIXED)
    cm = AnalyticCostModel()
    b = analytic_lower_bound(inst, time_limit=10)
    assert b.source == "per-kind LP" and "its own kind's profile (a100 / h200)" in b.covers
    assert b.value_ms > 1.3 * b.envelope_bound_ms
    plan = get_solver("greedy").solve(inst, cm, seed=0).plan
    assert b.value_ms <= cm.plan_costs(inst, plan).max_cost
    assert uncovered_reason(list(plan.shards), bound=b) is None
    split = [Shard(table="x", device=0, rows=10), Shard(table="x", device=1, row_offset=10)]
    assert uncovered_reason(split, bound=b) is None and b.covers_row_splits and b.covers_replicas
    assert "host memory" in uncovered_reason([Shard(table="x", device=0, kernel=Kernel.fused_uvm)], bound=b)
    r = CliRunner().invoke(app, ["bound", str(MIXED), "--time-limit", "5"])
    assert r.exit_code == 0 and "each device on its own hardware kind" in r.output, r.output


def test_the_per_kind_lp_names_the_topologies_it_does_not_hold_for() -> None:
    from solvers.bound.kinds import device_classes, kinds_lp_bound

    inst = random_mixed(0)
    assert not isinstance(device_classes(inst), str)
    assert "one hardware kind" in device_classes(relabel(inst, None))
    doc = json.loads(inst.model_dump_json())
    doc["topology"]["memory_bytes"][0] += 1 << 20  # two HBM sizes in one host (of two devices)
    uneven = Instance.model_validate(doc)
    classes = device_classes(uneven)
    assert inst.topology.devices_per_host == 2
    assert isinstance(classes, str) and "host 0" in classes and kinds_lp_bound(uneven) == (None, False)


@pytest.mark.parametrize("seed", [6, 14, 30])
def test_the_class_lp_bounds_a_job_of_one_kind_whose_memories_differ(seed: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One kind, two HBM sizes: the same LP with one copy of the device variables per memory class is below the
    enumerated best table-wise plan, and is the bound where the pairs are too many to branch on (above the table
    cuts); the CLI says so."""
    from itertools import product

    import solvers.bound.bound as bound_module
    from solvers.bound import analytic_lower_bound
    from solvers.bound.context import AnalyticRelaxation
    from solvers.bound.kinds import device_classes, kinds_lp_bound
    from solvers.bound.table_cuts import table_cut_bound

    inst = relabel(random_mixed(seed), None)
    assert not inst.topology.is_mixed and len(device_classes(inst, one_kind=True)) == 2
    cm = AnalyticCostModel()
    D = inst.topology.num_devices
    best = min(cm.plan_costs(inst, plan).max_cost for devs in product(range(D), repeat=len(inst.tables))
               if check_plan(inst, plan := [Shard(table=t.name, device=d) for t, d in zip(inst.tables, devs)]).ok)
    value, _ = kinds_lp_bound(inst)
    assert value is not None and 0 < value <= best * (1 + 1e-9)
    monkeypatch.setattr(bound_module, "FULL_RELAXATION_MAX_PAIRS", 0)  # as if the pairs were too many to branch on
    b = analytic_lower_bound(inst, time_limit=10)
    assert b.source == "class LP" and b.value_ms == pytest.approx(value)
    assert b.value_ms > table_cut_bound(AnalyticRelaxation(inst)) and b.value_ms <= best * (1 + 1e-9)
    path = tmp_path / "uneven.json"
    path.write_text(inst.model_dump_json())
    r = CliRunner().invoke(app, ["bound", str(path), "--time-limit", "5"])
    assert r.exit_code == 0 and "per class of devices" in r.output, r.output
