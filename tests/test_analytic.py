"""The analytic model shows the effects docs/analytic-model.md documents, and matches its documented formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from costmodels.analytic import BIN_COUNTS, CACHE_SHARE, AnalyticCostModel
from costmodels.registry import UnknownCostModelError, get_cost_model
from shardopt.core.hardware import get_profile
from shardopt.core.ir import Shard, instance_from_dict


def hist(bin_shares: dict[int, float]) -> list[float]:
    h = [0.0] * 17
    for b, s in bin_shares.items():
        h[b] = s
    return h


def table(name: str, rows: int = 100_000, dim: int = 64, pf: float = 10.0, h: list[float] | None = None, **kw) -> dict:
    return {"name": name, "rows": rows, "dim": dim, "pooling_factor": pf, "access": {"histogram": h or hist({0: 0.5, 3: 0.5})}, **kw}


def instance(tables: list[dict], devices: int = 2, per_host: int = 2, hw: str = "v100", batch: int = 4096, opt: str = "rowwise_adagrad"):
    return instance_from_dict(
        {
            "tables": tables,
            "topology": {"num_devices": devices, "devices_per_host": per_host, "memory_bytes": 10**12, "hardware": hw},
            "workload": {"batch_size": batch, "optimizer": opt},
        }
    )


def compute(inst, names: list[str]) -> np.ndarray:
    bm = AnalyticCostModel().bind(inst)
    idx = inst.table_index()
    state = sum(bm.table_states[idx[n]] for n in names)
    return bm.compute_costs(state)


def test_monotone_in_pooling_factor():
    costs = [compute(instance([table("a", pf=pf)]), ["a"]).sum() for pf in (0.5, 1, 2, 5, 10, 20, 50, 100)]
    assert all(b >= a for a, b in zip(costs, costs[1:]))
    assert costs[-1] > costs[0]


def test_monotone_in_batch():
    costs = [compute(instance([table("a")], batch=b), ["a"]).sum() for b in (64, 512, 4096, 16384, 65536, 262144)]
    assert all(b >= a for a, b in zip(costs, costs[1:]))
    assert costs[-1] > 10 * costs[0]


def test_device_of_two_tables_follows_documented_formula_and_is_not_additive():
    """Recompute fwd / bwd for a device holding A and B from docs/analytic-model.md, independently of the code."""
    p = get_profile("v100")
    B = 8192
    ta = table("a", rows=50_000, dim=32, pf=20.0, h=hist({0: 0.4, 4: 0.4, 8: 0.2}))
    tb = table("b", rows=2_000_000, dim=12, pf=3.0, h=hist({0: 0.7, 1: 0.2, 12: 0.1}), dtype="fp16")
    inst = instance([ta, tb], batch=B)

    def per_table(t: dict) -> dict:
        e = 2 if t.get("dtype") == "fp16" else 4
        h = np.array(t["access"]["histogram"])
        L = B * t["pooling_factor"]
        U = min(t["rows"], L / max(1.0, float(h @ BIN_COUNTS)), L)
        A = L * h * BIN_COUNTS / float(h @ BIN_COUNTS)
        sb = math.ceil(t["dim"] * e / 32) * 32
        w = t["dim"]
        return {
            "foot": h * U * sb,
            "reuse": np.maximum(A - h * U, 0) * sb,
            "gather": L * sb,
            "fwd_stream": 8 * L + 8 * B + 4 * B * w,
            "bwd_stream": 4 * B * w + 32 * L + 2 * U * (math.ceil(w * e / 32) * 32 + 32),  # rowwise_adagrad: 4 B/row -> 1 sector
            "bwd_l2": 4 * L * w,
            "bags": B,
        }

    def device_time(parts: list[dict]) -> tuple[float, float]:
        foot = sum(q["foot"] for q in parts)[::-1]
        reuse = sum(q["reuse"] for q in parts)[::-1]
        cap = CACHE_SHARE * p.l2_bytes
        hits, before = 0.0, 0.0
        for f, r in zip(foot, reuse):
            if f > 0:
                hits += min(max((cap - before) / f, 0.0), 1.0) * r
            before += f
        occ = min(1.0, sum(q["bags"] for q in parts) / (p.sm_count * p.warps_per_sm))
        hbm, l2 = p.hbm_bandwidth * p.gather_efficiency, p.hbm_bandwidth * p.l2_bandwidth_ratio
        fwd = ((sum(q["gather"] for q in parts) - hits + sum(q["fwd_stream"] for q in parts)) / hbm + hits / l2) / occ
        bwd = (sum(q["bwd_stream"] for q in parts) / hbm + sum(q["bwd_l2"] for q in parts) / l2) / occ
        return (p.launch_overhead_s + max(p.min_kernel_s, fwd)) * 1e3, (3 * p.launch_overhead_s + max(p.min_kernel_s, bwd)) * 1e3

    pa, pb = per_table(ta), per_table(tb)
    expect_ab = device_time([pa, pb])
    got_ab = compute(inst, ["a", "b"])
    assert got_ab == pytest.approx(expect_ab, rel=1e-9)
    alone = compute(inst, ["a"]) + compute(inst, ["b"])
    assert alone == pytest.approx(np.add(device_time([pa]), device_time([pb])), rel=1e-9)
    assert not np.allclose(got_ab, alone, rtol=1e-3)


def test_hot_sets_compete_for_the_cache():
    """Two tables whose hot rows each fit in L2 alone but not together: together they cost more than apart."""
    p = get_profile("v100")
    cap = CACHE_SHARE * p.l2_bytes
    # every row in bin 10 (~768 accesses); footprint = rows * 256 bytes (dim 64 fp32) = 0.7 of the usable cache
    rows = int(0.7 * cap / 256)
    pf = rows * BIN_COUNTS[10] / 65536

    def t(n: str):
        return table(n, rows=rows, dim=64, pf=pf, h=hist({10: 1.0}))

    inst = instance([t("a"), t("b")], batch=65536)
    bm = AnalyticCostModel().bind(inst)
    sa, sb = bm.table_states
    assert bm.cache_hits(sa) == pytest.approx(sa[17:34].sum())  # alone: every re-read hits
    assert bm.cache_hits(sa + sb) < 0.75 * (bm.cache_hits(sa) + bm.cache_hits(sb))
    launch = get_profile("v100").launch_overhead_s * 1e3
    together = bm.compute_costs(sa + sb)[0] - launch
    apart = bm.compute_costs(sa)[0] + bm.compute_costs(sb)[0] - 2 * launch
    assert together > apart * 1.05


def test_sector_waste_of_short_rows():
    a = compute(instance([table("a", dim=4)], batch=65536), ["a"])  # 16-byte rows move a 32-byte sector
    b = compute(instance([table("a", dim=8)], batch=65536), ["a"])  # 32-byte rows move the same sector
    c = compute(instance([table("a", dim=12)], batch=65536), ["a"])  # 48-byte rows move two sectors
    bm4 = AnalyticCostModel().bind(instance([table("a", dim=4)]))
    bm8 = AnalyticCostModel().bind(instance([table("a", dim=8)]))
    assert bm4.table_states[0][34] == bm8.table_states[0][34]  # same gathered bytes
    assert a[0] <= b[0] < c[0]


def test_launch_once_per_pass_and_floor_for_tiny_kernels():
    p = get_profile("v100")
    tiny = [table(f"t{i}", rows=10, dim=4, pf=0.1) for i in range(5)]
    inst = instance(tiny, batch=16)
    one = compute(inst, ["t0"])
    five = compute(inst, [f"t{i}" for i in range(5)])
    floor_fwd = (p.launch_overhead_s + p.min_kernel_s) * 1e3
    assert one[0] == pytest.approx(floor_fwd)
    assert five[0] == pytest.approx(floor_fwd)  # five tables, one fused launch, still under the floor
    assert five[0] < 5 * one[0]
    bm = AnalyticCostModel().bind(inst)
    assert np.all(bm.compute_costs(np.zeros(bm.state_size)) == 0)  # an empty device costs nothing


def test_backward_includes_optimizer_update():
    bwd = {o: compute(instance([table("a")], opt=o), ["a"])[1] for o in ("sgd", "rowwise_adagrad", "adam")}
    assert bwd["sgd"] < bwd["rowwise_adagrad"] < bwd["adam"]


def test_cross_host_alltoall_costs_more_than_intra_host():
    ts = [table(f"t{i}") for i in range(8)]
    plan = [Shard(table=f"t{i}", device=i) for i in range(8)]
    one_host = AnalyticCostModel().plan_costs(instance(ts, devices=8, per_host=8), plan)
    eight_hosts = AnalyticCostModel().plan_costs(instance(ts, devices=8, per_host=1), plan)
    assert np.all(eight_hosts.fwd_comm > one_host.fwd_comm)
    assert np.all(eight_hosts.bwd_comm > one_host.bwd_comm)
    assert np.allclose(one_host.fwd_compute, eight_hosts.fwd_compute)


def test_alltoall_bytes_formula():
    p = get_profile("a100")
    ts = [table("a", dim=64), table("b", dim=128), table("c", dim=32)]
    inst = instance(ts, devices=4, per_host=2, hw="a100", batch=8192)
    bm = AnalyticCostModel().bind(inst)
    dims = np.array([64.0, 160.0, 0.0, 0.0])
    got = bm.comm_costs(dims)[:, 0]
    q = 8192 / 4 * 4
    # device 0: host {0,1}; sends 64q to 1 local + 2 remote peers; receives 160q locally, 0 remotely
    t0 = max(64 * q * 1, 160 * q) / p.nvlink_bandwidth
    r0 = max(64 * q * 2, 0) / p.network_bandwidth
    expect0 = (p.alltoall_latency_s + p.network_latency_s + max(t0, r0)) * 1e3
    assert got[0] == pytest.approx(expect0)
    # device 2: holds nothing, receives 224q over the network
    expect2 = (p.alltoall_latency_s + p.network_latency_s + 224 * q / p.network_bandwidth) * 1e3
    assert got[2] == pytest.approx(expect2)
    assert np.all(AnalyticCostModel().bind(instance(ts, devices=1, per_host=1)).comm_costs(np.array([224.0])) == 0)


def test_batched_predictions_equal_one_at_a_time():
    ts = [table(f"t{i}", rows=1000 * (i + 1), dim=4 * (i + 1), pf=i + 0.5, h=hist({0: 0.5, i: 0.5})) for i in range(1, 9)]
    bm = AnalyticCostModel().bind(instance(ts, devices=4))
    rng = np.random.default_rng(0)
    states = np.stack([bm.table_states[rng.random(8) < 0.5].sum(axis=0) for _ in range(20)])
    batched = bm.compute_costs(states)
    single = np.stack([bm.compute_costs(s) for s in states])
    assert np.allclose(batched, single)
    dims = rng.integers(0, 300, size=(6, 4)).astype(float)
    assert np.allclose(bm.comm_costs(dims), np.stack([bm.comm_costs(d) for d in dims]))


def test_column_split_halves_gather_and_row_split_halves_lookups():
    inst = instance([table("a", dim=128)])
    bm = AnalyticCostModel().bind(inst)
    full = bm.table_states[0]
    half_cols = bm.shard_state(0, 64)
    half_rows = bm.shard_state(0, 128, row_fraction=0.5)
    assert half_cols[34] == pytest.approx(full[34] / 2)
    assert half_rows[34] == pytest.approx(full[34] / 2)
    plan_cw = [Shard(table="a", device=0, cols=64), Shard(table="a", device=1, col_offset=64)]
    costs = bm.plan_costs(plan_cw)
    assert costs.fwd_compute[0] == pytest.approx(costs.fwd_compute[1])


def test_replicated_table_adds_allreduce():
    inst = instance([table("a"), table("b")], devices=2)
    bm = AnalyticCostModel().bind(inst)
    plan = [Shard(table="a", device=0, replicated=True), Shard(table="a", device=1, replicated=True), Shard(table="b", device=1)]
    costs = bm.plan_costs(plan)
    assert costs.bwd_comm[0] > costs.fwd_comm[0]


def test_zipf_tables_get_a_histogram():
    inst = instance([{"name": "z", "rows": 100_000, "dim": 32, "pooling_factor": 5.0, "access": {"zipf": 1.1}}])
    assert compute(inst, ["z"]).sum() > 0


def test_registry():
    assert get_cost_model("analytic").name == "analytic"
    assert get_cost_model("analytic:h100").bind(instance([table("a")])).profile.name == "h100"
    with pytest.raises(UnknownCostModelError, match="nope"):
        get_cost_model("nope")
    with pytest.raises(UnknownCostModelError, match="x100"):
        get_cost_model("analytic:x100")


@pytest.mark.parametrize("devices,per_host", [(1, 1), (4, 4), (8, 2), (6, 3), (3, 1)])
def test_incremental_comm_equals_full_recomputation(devices, per_host):
    from costmodels.base import BoundCostModel

    ts = [table(f"t{i}", dim=4 * (i + 1)) for i in range(devices + 2)]
    bm = AnalyticCostModel().bind(instance(ts, devices=devices, per_host=per_host, hw="h100"))
    rng = np.random.default_rng(devices)
    dims = rng.integers(0, 400, size=devices).astype(float)
    cands = np.arange(devices)[rng.random(devices) < 0.7] if devices > 1 else np.arange(1)
    fast = bm.comm_totals_after_adding(dims, 52.0, cands)
    slow = BoundCostModel.comm_totals_after_adding(bm, dims, 52.0, cands)
    assert fast.shape == (len(cands), devices)
    assert np.allclose(fast, slow, rtol=1e-12, atol=1e-12)
    assert np.allclose(bm.comm_totals(dims), bm.comm_costs(dims).sum(axis=-1))


@pytest.mark.parametrize("devices,per_host", [(8, 2), (12, 4), (9, 3)])
def test_comm_reads_each_device_hosts_width(devices, per_host):
    """The all-to-all's per-device time from the width on its host (own included) and the total, as the docstring of
    `comm_costs` defines it, here spelled out pairwise (hosts of `per_host` devices)."""
    ts = [table(f"t{i}", dim=4 * (i + 1)) for i in range(devices + 2)]
    bm = AnalyticCostModel().bind(instance(ts, devices=devices, per_host=per_host, hw="h100"))
    rng = np.random.default_rng(devices)
    dims = rng.integers(0, 400, size=(3, devices)).astype(float)
    host = np.arange(devices) // per_host
    same = (host[:, None] == host[None, :]).astype(float)
    local_peers, remote_peers = same.sum(axis=0) - 1, devices - same.sum(axis=0)
    my_host, total = dims @ same, dims.sum(axis=-1, keepdims=True)
    local = np.maximum(dims * local_peers, my_host - dims) * bm._local_scale
    remote = np.maximum(dims * remote_peers, total - my_host) * bm._remote_scale
    assert np.allclose(bm.comm_time(dims), np.maximum(local, remote) + bm._latency_ms, rtol=1e-12, atol=1e-15)
