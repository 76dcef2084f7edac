"""Memory tiers (issue 17, item 1): HBM and host memory per device, shard kernels fused / fused_uvm_caching /
fused_uvm, and a checker that counts both tiers separately and names the device and the tier."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from shardopt.core.feasibility import infeasibility_reason, tiered_infeasibility_reason
from shardopt.core.hardware import PROFILES, load_profile, profile_from_dict, profile_to_dict
from shardopt.core.ir import IRError, Kernel, Shard, dumps, instance_from_dict, load_instance, plan_from_dict
from shardopt.core.memory import (
    CACHE_SLOT_META_BYTES,
    device_host_memory_use,
    device_memory_use,
    shard_bytes,
    shard_host_bytes,
    slice_bytes,
)
from shardopt.core.plan_check import check_plan

ROOT = Path(__file__).resolve().parents[1]


def tiered(host: int | list[int] = 0, hbm: int = 1_000_000, devices: int = 2, optimizer: str = "rowwise_adagrad") -> dict:
    return {
        "tables": [
            {"name": "big", "rows": 10_000, "dim": 16, "pooling_factor": 2.0, "access": {"zipf": 1.0}},
            {"name": "small", "rows": 1_000, "dim": 8, "pooling_factor": 1.0, "access": {"zipf": 0.5}},
        ],
        "topology": {"num_devices": devices, "devices_per_host": devices, "memory_bytes": hbm, "hardware": "a100",
                     "host_memory_bytes": host},
        "workload": {"batch_size": 512, "optimizer": optimizer},
    }


def test_old_documents_load_and_keep_their_hash_and_text() -> None:
    path = ROOT / "instances" / "examples" / "small.json"
    inst = load_instance(path)
    assert inst.topology.host_memory_bytes == 0 and not inst.topology.has_host_memory
    text = dumps(inst)
    assert "host_memory_bytes" not in text and "host_link_bandwidth" not in text
    # the hash of a topology without host memory is what it was before the tiers existed (results are keyed by it)
    assert instance_from_dict(json.loads(text)).content_hash() == inst.content_hash()
    plan = plan_from_dict({"shards": [{"table": "t0", "device": 0}]})
    assert plan.shards[0].kernel is Kernel.fused and "kernel" not in dumps(plan)


def test_kernel_fields_are_validated_with_the_field_named() -> None:
    bad = [
        ({"kernel": "fused_uvm_caching"}, "cache_load_factor: required with kernel 'fused_uvm_caching'"),
        ({"kernel": "fused_uvm", "cache_load_factor": 0.5}, "cache_load_factor: 0.5 is only meaningful with kernel 'fused_uvm_caching'"),
        ({"kernel": "fused_uvm_caching", "cache_load_factor": 1.5}, "cache_load_factor"),
        ({"kernel": "fused_uvm_caching", "cache_load_factor": 0}, "cache_load_factor"),
        ({"kernel": "ssd"}, "kernel"),
        ({"kernel": "fused_uvm", "replicated": True}, "a data-parallel replica lives in HBM"),
    ]
    for extra, expected in bad:
        with pytest.raises(IRError) as err:
            plan_from_dict({"shards": [{"table": "t", "device": 0, **extra}]})
        assert expected in str(err.value), (extra, str(err.value))
        assert "shards[0]" in str(err.value)
    with pytest.raises(IRError, match=r"topology.host_memory_bytes\[1\]: -5 must be >= 0"):
        instance_from_dict(tiered(host=[10, -5]))
    with pytest.raises(IRError, match="host_memory_bytes: 3 values for 2 devices"):
        instance_from_dict(tiered(host=[1, 2, 3]))


def test_bytes_per_tier_by_hand() -> None:
    inst = instance_from_dict(tiered(host=10_000_000))
    big = inst.tables[0]
    whole = 10_000 * 16 * 4 + 10_000 * 4  # fp32 weights + one rowwise-adagrad accumulator per row
    hbm = Shard(table="big", device=0)
    assert (shard_bytes(inst, big, hbm), shard_host_bytes(inst, big, hbm)) == (whole, 0)
    # UVM: the weights in host memory; rowwise_adagrad's accumulator stays in HBM (fbgemm's construct_split_state)
    uvm = Shard(table="big", device=0, kernel="fused_uvm")
    assert (shard_bytes(inst, big, uvm), shard_host_bytes(inst, big, uvm)) == (10_000 * 4, 10_000 * 16 * 4)
    cached = Shard(table="big", device=0, kernel="fused_uvm_caching", cache_load_factor=0.25)
    assert cached.cache_rows(big) == 2_500
    assert shard_bytes(inst, big, cached) == 2_500 * (16 * 4 + CACHE_SLOT_META_BYTES) + 10_000 * 4
    assert shard_host_bytes(inst, big, cached) + 10_000 * 4 == whole
    # a cached row-wise slice caches its own rows, rounded up
    part = Shard(table="big", device=1, row_offset=0, rows=999, kernel="fused_uvm_caching", cache_load_factor=0.1)
    assert part.cache_rows(big) == math.ceil(99.9) == 100
    assert shard_host_bytes(inst, big, part) == slice_bytes(inst, big, 999, 16) - 999 * 4
    # adam's moments are managed with the weights: all in host memory
    adam = instance_from_dict(tiered(host=10_000_000, optimizer="adam"))
    assert shard_bytes(adam, adam.tables[0], uvm) == 0
    assert shard_host_bytes(adam, adam.tables[0], uvm) == slice_bytes(adam, adam.tables[0], 10_000, 16)


def test_checker_counts_each_tier_and_names_device_and_tier() -> None:
    # HBM 150,000 per device: 'big' (680,000 bytes) fits only in host memory
    inst = instance_from_dict(tiered(host=[1_000_000, 0], hbm=150_000))
    ok = [Shard(table="big", device=0, kernel="fused_uvm_caching", cache_load_factor=0.1), Shard(table="small", device=1)]
    res = check_plan(inst, ok)
    assert res.ok, [str(v) for v in res.violations]
    assert list(res.memory_use) == [1_000 * (64 + CACHE_SLOT_META_BYTES) + 10_000 * 4, 1_000 * 8 * 4 + 1_000 * 4]
    assert list(res.host_memory_use) == [640_000, 0]
    assert list(device_memory_use(inst, ok)) == list(res.memory_use)
    assert list(device_host_memory_use(inst, ok)) == list(res.host_memory_use)

    # a cache too large for HBM: an HBM violation on device 0, naming the table
    over = [Shard(table="big", device=0, kernel="fused_uvm_caching", cache_load_factor=0.5), Shard(table="small", device=1)]
    (v,) = check_plan(inst, over).violations
    assert v.kind == "memory" and v.device == 0 and v.table == "big" and "bytes of HBM" in v.message
    # UVM on a device without host memory
    (v,) = check_plan(inst, [Shard(table="big", device=0, kernel="fused_uvm"), Shard(table="small", device=1, kernel="fused_uvm")]).violations
    assert v.kind == "host_memory" and v.device == 1 and "no host memory" in v.message and "'small'" in v.message
    # host memory exceeded
    small_host = instance_from_dict(tiered(host=[500_000, 500_000], hbm=100_000))
    (v,) = check_plan(small_host, [Shard(table="big", device=0, kernel="fused_uvm"), Shard(table="small", device=1)]).violations
    assert v.kind == "host_memory" and v.device == 0
    assert v.message == "device 0: 640,000 bytes of UVM shards ('big') exceed its 500,000 bytes of host memory by 140,000"
    # row-wise over both devices' host memory fits
    rw = [Shard(table="big", device=0, rows=5_000, kernel="fused_uvm"),
          Shard(table="big", device=1, row_offset=5_000, kernel="fused_uvm"), Shard(table="small", device=1)]
    assert check_plan(small_host, rw).ok


def test_tiered_feasibility() -> None:
    inst = instance_from_dict(tiered(host=0, hbm=100_000))
    assert "fits on no device" in infeasibility_reason(inst)
    reason = tiered_infeasibility_reason(inst)
    assert reason is not None and "no host memory" in reason and "short by" in reason
    roomy = instance_from_dict(tiered(host=400_000, hbm=100_000))
    assert tiered_infeasibility_reason(roomy) is None  # 716,000 bytes in 1,000,000 of HBM + host


def test_profiles_have_host_links_and_old_profile_files_load(tmp_path: Path) -> None:
    for p in PROFILES.values():
        assert p.host_link_bandwidth > 0 and p.host_link
    assert PROFILES["gh200"].host_link == "NVLink-C2C" and PROFILES["gh200"].host_link_bandwidth > 5 * PROFILES["h100"].host_link_bandwidth
    d = profile_to_dict(PROFILES["v100"])
    del d["host_link_bandwidth"], d["host_link"]  # a profile written before host links existed
    assert profile_from_dict(d).host_link_bandwidth == PROFILES["v100"].host_link_bandwidth
    shipped = load_profile(ROOT / "costmodels" / "profiles" / "cpu-2core.json")
    assert shipped.host_link_bandwidth > 0
