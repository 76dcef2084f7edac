"""The `huge` and `tiered` instance families (issue 17, item 5) and the constructive plan that guarantees them
feasible (shardopt.core.feasibility.constructive_tiered_plan)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shardopt.cli import app
from shardopt.core.feasibility import constructive_tiered_plan, infeasibility_reason, tiered_infeasibility_reason
from shardopt.core.ir import Instance, Kernel, instance_from_dict, load_instance
from shardopt.core.memory import table_bytes_array
from shardopt.core.plan_check import check_plan
from shardopt.data.pools import generate_pool, load_pool, save_pool, standard_pool_path
from shardopt.data.suites import FAMILIES, HOST_DRAM_PER_HBM, SuiteError, generate_suite

SUITES = Path(__file__).resolve().parents[1] / "instances" / "suites"
SEEDS = (0, 5, 9)
COUNT = 6


@pytest.fixture(scope="module")
def pools():
    return {part: load_pool(standard_pool_path(part)) for part in ("train", "test")}


@pytest.fixture(scope="module")
def generated(pools, tmp_path_factory):
    """COUNT instances of each family for each seed, train pool for even seeds and test pool for odd ones."""
    out = {}
    for family in ("huge", "tiered"):
        for seed in SEEDS:
            part = "train" if seed % 2 == 0 else "test"
            d = tmp_path_factory.mktemp(f"{family}-{seed}")
            out[family, seed] = (part, [load_instance(p) for p in generate_suite(family, pools[part], COUNT, seed, part, d)])
    return out


def _common_checks(inst: Instance, family: str, seed: int, part: str, pool) -> None:
    topo = inst.topology
    meta = inst.metadata
    assert (meta["family"], meta["suite"], meta["seed"], meta["pool"]) == (family, family, seed, part)
    assert meta["pool_name"] == pool.name and meta["pool_synthetic"] is True
    assert meta["feasibility"]["witness"] == "shardopt.core.feasibility.constructive_tiered_plan"
    assert {t.name for t in inst.tables} <= {t.name for t in pool.tables}  # train tables for train suites, test for test
    assert 2 <= topo.num_devices <= 16 and topo.num_devices % topo.devices_per_host == 0
    assert inst.workload.batch_size == pool.batch_size
    assert tiered_infeasibility_reason(inst) is None
    assert infeasibility_reason(inst) is not None  # no table-wise HBM plan: that is what both families are for


@pytest.mark.parametrize("seed", SEEDS)
def test_huge_instances(generated, pools, seed):
    part, instances = generated["huge", seed]
    for inst in instances:
        _common_checks(inst, "huge", seed, part, pools[part])
        topo = inst.topology
        assert topo.hardware in ("a100", "h100")
        sizes = table_bytes_array(inst)
        largest = int(sizes.max())
        # the largest table exceeds every device's HBM by 2-20x
        assert all(2 <= largest / cap <= 20 for cap in topo.capacities()), (inst.name, largest / topo.capacity(0))
        huge = {h["name"] for h in inst.metadata["huge_tables"]}
        assert 1 <= len(huge) <= 3
        for t, size in zip(inst.tables, sizes):
            ratio = size / topo.capacity(0)
            assert (2 <= ratio <= 20) if t.name in huge else (ratio <= 1), (t.name, ratio)
        # host memory: the odd-indexed instances, as the hardware has it; none on the others
        hosted = inst.metadata["index"] % 2 == 1
        if hosted:
            assert topo.host_capacity(0) == int(np.ceil(HOST_DRAM_PER_HBM[topo.hardware] * topo.capacity(0)))
        else:
            assert not topo.has_host_memory and topo.num_devices >= 4
            assert sizes.sum() / sum(topo.capacities()) > 0.3  # HBM still sized by the tight rule
        plan = constructive_tiered_plan(inst)
        assert plan is not None
        check = check_plan(inst, plan)
        assert check.ok, [str(v) for v in check.violations]
        # the huge tables are split by rows (or, with host memory, may sit whole in it)
        for name in huge:
            shards = [s for s in plan if s.table == name]
            assert all(s.cols is None and s.col_offset == 0 for s in shards)
            if not hosted:
                assert len(shards) >= 2 and all(s.kernel is Kernel.fused for s in shards)
            else:
                assert len(shards) >= 2 or shards[0].kernel is not Kernel.fused


@pytest.mark.parametrize("seed", SEEDS)
def test_tiered_instances(generated, pools, seed):
    part, instances = generated["tiered", seed]
    for inst in instances:
        _common_checks(inst, "tiered", seed, part, pools[part])
        topo = inst.topology
        assert topo.hardware in ("a100", "h100", "gh200")
        sizes = table_bytes_array(inst)
        ratio = sizes.sum() / sum(topo.capacities())
        assert 1.5 <= ratio <= 4, (inst.name, ratio)
        assert inst.metadata["memory_utilisation"] == round(ratio, 4)
        hosts = topo.host_capacities()
        assert all(h >= HOST_DRAM_PER_HBM[topo.hardware] * topo.capacity(0) for h in hosts)
        plan = constructive_tiered_plan(inst)
        assert plan is not None
        check = check_plan(inst, plan)
        assert check.ok, [str(v) for v in check.violations]
        # both tiers used and within their capacities
        assert any(s.kernel is not Kernel.fused for s in plan)
        assert check.host_memory_use.sum() > 0 and all(check.host_memory_use <= np.array(hosts))
        assert all(check.memory_use <= np.array(topo.capacities()))


def test_families_cover_what_they_promise():
    """The committed suites together: hosted and HBM-only huge instances, ratios well up the 2-20x range, several hosts,
    gh200 in tiered, and UVM caches in the witnesses."""
    huge = [load_instance(p) for p in sorted((SUITES / "huge-train").glob("huge-*.json"))]
    tiered = [load_instance(p) for p in sorted((SUITES / "tiered-train").glob("tiered-*.json"))]
    assert len(huge) == 40 and len(tiered) == 40
    ratios = [h["ratio"] for i in huge for h in i.metadata["huge_tables"]]
    assert min(ratios) >= 2 and max(ratios) > 10
    assert {i.topology.has_host_memory for i in huge} == {True, False}
    for insts in (huge, tiered):
        assert any(i.topology.num_hosts > 1 for i in insts) and any(i.topology.num_hosts == 1 for i in insts)
        assert {i.topology.num_devices for i in insts} >= {2, 16}
    assert {i.topology.hardware for i in tiered} == {"a100", "h100", "gh200"}
    assert sum(i.metadata["feasibility"]["fused_uvm_caching_shards"] for i in tiered) > 0
    tiered_ratios = [i.metadata["memory_utilisation"] for i in tiered]
    assert min(tiered_ratios) < 2.2 and max(tiered_ratios) > 3.3


@pytest.mark.parametrize("family", ["huge", "tiered"])
def test_same_seed_same_suite(family, pools, tmp_path):
    a = generate_suite(family, pools["train"], 3, 4, "train", tmp_path / "a")
    b = generate_suite(family, pools["train"], 3, 4, "train", tmp_path / "b")
    c = generate_suite(family, pools["train"], 3, 5, "train", tmp_path / "c")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]


@pytest.mark.parametrize("family", ["huge", "tiered"])
def test_pool_too_small(family, tmp_path):
    with pytest.raises(SuiteError, match=f"family '{family}' needs"):
        generate_suite(family, generate_pool(n=6, seed=0), 1, 0, "all", tmp_path)
    assert FAMILIES[family].make is not None


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_cli_generates_huge_and_tiered(tmp_path):
    r = run("generate", "--family", "huge", "--count", "2", "--seed", "3", "--pool", "test", "--out", str(tmp_path / "h"), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["family"] == "huge" and len(doc["instances"]) == 2
    manifest = json.loads((tmp_path / "h" / "suite.json").read_text())
    assert manifest["family"] == "huge" and manifest["count"] == 2 and manifest["seed"] == 3
    inst = load_instance(tmp_path / "h" / doc["instances"][1])
    assert (inst.metadata["family"], inst.metadata["seed"], inst.metadata["pool"]) == ("huge", 3, "test")
    r = run("generate", "--family", "tiered", "--count", "1", "--out", str(tmp_path / "t"))
    assert r.exit_code == 0 and "wrote 1 tiered instances" in r.stdout
    r = run("inspect", str(tmp_path / "h"), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rows"][1]["host_memory_per_device"] > 0  # index 1: host memory
    r = run("inspect", str(tmp_path / "h"))
    assert r.exit_code == 0 and "host memory" in r.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--family", "hugee", "--count", "1"], "unknown family 'hugee'"),
        (["--family", "huge", "--count", "0"], "--count: 0"),
        (["--family", "tiered", "--count", "-1"], "--count: -1"),
        (["--family", "tiered", "--count", "1", "--pool-file", "TINY"], "family 'tiered' needs"),
        (["--family", "huge", "--count", "1", "--pool", "everything"], "everything"),
    ],
)
def test_cli_bad_values_exit_2(args, needle, tmp_path):
    tiny = tmp_path / "tiny.json"
    save_pool(generate_pool(n=4, seed=0), tiny)
    r = run("generate", *[str(tiny) if a == "TINY" else a for a in args], "--out", str(tmp_path / "out"))
    assert r.exit_code == 2, r.output
    assert needle in r.output


# ---------------------------------------------------------------------------------------------------------------
# constructive_tiered_plan on hand-sized instances


def two_tables(hbm: int, host: int | list[int] = 0, devices: int = 2) -> Instance:
    """'big': 10,000 rows x 16 (680,000 bytes with rowwise Adagrad), 'small': 1,000 x 8 (36,000 bytes)."""
    return instance_from_dict({
        "tables": [
            {"name": "big", "rows": 10_000, "dim": 16, "pooling_factor": 2.0, "access": {"zipf": 1.0}},
            {"name": "small", "rows": 1_000, "dim": 8, "pooling_factor": 1.0, "access": {"zipf": 0.5}},
        ],
        "topology": {"num_devices": devices, "devices_per_host": devices, "memory_bytes": hbm, "hardware": "a100",
                     "host_memory_bytes": host},
        "workload": {"batch_size": 512},
    })


def _valid(inst: Instance) -> list:
    plan = constructive_tiered_plan(inst)
    assert plan is not None
    check = check_plan(inst, plan)
    assert check.ok, [str(v) for v in check.violations]
    return plan


def test_witness_table_wise_when_it_fits():
    plan = _valid(two_tables(hbm=1_000_000))
    assert sorted((s.table, s.rows, s.kernel) for s in plan) == [("big", None, Kernel.fused), ("small", None, Kernel.fused)]


def test_witness_splits_a_table_larger_than_any_device_by_rows():
    inst = two_tables(hbm=400_000)
    assert "fits on no device" in infeasibility_reason(inst)
    big = [s for s in _valid(inst) if s.table == "big"]
    assert len(big) == 2 and {s.device for s in big} == {0, 1} and all(s.kernel is Kernel.fused for s in big)
    assert sorted((s.row_offset, s.rows) for s in big)[0][0] == 0 and sum(s.rows for s in big) == 10_000


def test_witness_uses_host_memory_and_caches():
    # HBM 2 x 100,000 cannot hold 'big': it goes to host memory, split over both devices' host memory
    plan = _valid(two_tables(hbm=100_000, host=400_000))
    assert all(s.kernel is not Kernel.fused for s in plan if s.table == "big")
    # room for a cache: the host table gets one
    plan = _valid(two_tables(hbm=200_000, host=1_000_000))
    assert any(s.kernel is Kernel.fused_uvm_caching and s.cache_load_factor == 0.2 for s in plan)
    # a table split between the tiers when host memory cannot take all of it
    plan = _valid(two_tables(hbm=100_000, host=300_000))
    kinds = {s.kernel for s in plan if s.table == "big"}
    assert Kernel.fused in kinds and Kernel.fused_uvm in kinds
    # host memory on one device only
    _valid(two_tables(hbm=100_000, host=[1_000_000, 0]))


def test_witness_none_when_nothing_fits_and_bad_load_factor():
    assert constructive_tiered_plan(two_tables(hbm=100_000)) is None  # 716,000 bytes, 200,000 of HBM, no host memory
    assert constructive_tiered_plan(two_tables(hbm=100_000, host=250_000)) is None  # short by 16,000 bytes
    with pytest.raises(ValueError, match="cache_load_factor"):
        constructive_tiered_plan(two_tables(hbm=1_000_000), cache_load_factor=0)
