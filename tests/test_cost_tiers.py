"""Memory tiers in the cost models (issue 17, item 2): the analytic model prices a shard in host memory by its HBM
cache's hits and the host link's misses (docs/analytic-model.md, "Memory tiers"), prices HBM-only plans exactly as
before, and the predictors and judges that cannot price a kind refuse it by name instead of pricing it as HBM."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import instances
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from costmodels.analytic import (
    CACHE_LOOKUP_BYTES,
    MS,
    PREFETCH_LAUNCHES,
    STATE_CACHED,
    STATE_GATHER,
    STATE_HOST_BWD_IN,
    STATE_HOST_BWD_OUT,
    STATE_HOST_BWD_ROWS,
    STATE_HOST_FWD_IN,
    STATE_HOST_FWD_OUT,
    STATE_HOST_FWD_ROWS,
    STATE_SIZE,
    STATE_UVM,
    AnalyticCostModel,
    cache_miss_share,
    mean_count,
    sector_bytes,
)
from costmodels.base import UnsupportedPlacementError, shard_cache_fraction
from costmodels.registry import get_cost_model
from shardopt.core.hardware import get_profile
from shardopt.core.ir import ACCESS_BINS, Kernel, Plan, Shard, instance_from_dict, load_instance

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "instances" / "examples"


def tiered(hw: str = "h100", zipf: float | None = 1.05, histogram: list[float] | None = None, rows: int = 2_000_000,
           opt: str = "rowwise_adagrad", devices: int = 2, batch: int = 65536, link: float | None = None):
    access = {"zipf": zipf} if histogram is None else {"histogram": histogram}
    topo = {"num_devices": devices, "devices_per_host": devices, "memory_bytes": 10**11, "host_memory_bytes": 10**12, "hardware": hw}
    if link is not None:
        topo["host_link_bandwidth"] = link
    return instance_from_dict({
        "tables": [
            {"name": "big", "rows": rows, "dim": 64, "pooling_factor": 20.0, "access": access},
            {"name": "small", "rows": 100_000, "dim": 32, "pooling_factor": 5.0, "access": {"zipf": 1.0}},
        ],
        "topology": topo,
        "workload": {"batch_size": batch, "optimizer": opt},
    })


def big(kernel: Kernel = Kernel.fused, lf: float | None = None, device: int = 0, **kw) -> Shard:
    return Shard(table="big", device=device, kernel=kernel, cache_load_factor=lf, **kw)


def device0(bm, shard: Shard) -> np.ndarray:
    """Device 0's four columns with `shard` on it and the small table on device 1."""
    return bm.plan_costs([shard, Shard(table="small", device=1)]).columns[0]


# ---------------------------------------------------------------------------------------------------------------
# the analytic model's memory tiers


@pytest.mark.parametrize("hw", ["v100", "h100", "gh200"])
@pytest.mark.parametrize("zipf", [0.0, 1.05])
def test_uvm_shard_costs_more_than_the_same_shard_in_hbm(hw: str, zipf: float) -> None:
    bm = AnalyticCostModel().bind(tiered(hw, zipf))
    fused, uvm = device0(bm, big()), device0(bm, big(Kernel.fused_uvm))
    assert uvm[0] > fused[0] and uvm[1] > fused[1]
    assert uvm[2:] == pytest.approx(fused[2:])  # the all-to-all does not care where the rows live


@pytest.mark.parametrize("opt", ["sgd", "rowwise_adagrad"])
def test_a_cache_of_every_row_costs_fused_plus_the_documented_bookkeeping(opt: str) -> None:
    """lf 1.0: no miss, so no host traffic; the forward pays the cache prefetch's launches and CACHE_LOOKUP_BYTES per
    lookup over HBM (docs), the backward is the fused one (rowwise_adagrad's state lives in HBM for fbgemm's UVM
    tables too)."""
    inst = tiered("h100", opt=opt)
    bm = AnalyticCostModel().bind(inst)
    fused, cached = device0(bm, big()), device0(bm, big(Kernel.fused_uvm_caching, 1.0))
    p = bm.profile
    lookups = inst.workload.batch_size * 20.0
    occ = bm.occupancy(bm.table_states[0])  # the kernel's occupancy: bags only, the same for both
    delta_ms = (PREFETCH_LAUNCHES * p.launch_overhead_s + lookups * CACHE_LOOKUP_BYTES / (p.hbm_bandwidth * p.gather_efficiency) / occ) * MS
    assert cached[0] - fused[0] == pytest.approx(delta_ms, rel=1e-9)
    assert cached[1] == pytest.approx(fused[1], rel=1e-12)
    state = bm.shard_contribution(big(Kernel.fused_uvm_caching, 1.0))[1]
    assert state[[STATE_HOST_FWD_IN, STATE_HOST_FWD_OUT, STATE_HOST_BWD_IN, STATE_HOST_BWD_OUT]].sum() == 0.0


def test_adam_moments_of_a_uvm_table_cross_the_host_link_even_when_every_row_is_cached() -> None:
    """fbgemm keeps a non-rowwise optimizer state of a MANAGED_CACHING table in UVM (construct_split_state with
    cacheable=False): adam's moments are read and written over the link."""
    bm = AnalyticCostModel().bind(tiered("h100", opt="adam"))
    state = bm.shard_contribution(big(Kernel.fused_uvm_caching, 1.0))[1]
    assert state[STATE_HOST_BWD_IN] > 0 and state[STATE_HOST_BWD_IN] == state[STATE_HOST_BWD_OUT]
    assert device0(bm, big(Kernel.fused_uvm_caching, 1.0))[1] > device0(bm, big())[1]


LOAD_FACTORS = [0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0]


@pytest.mark.parametrize("hw", ["v100", "h100", "gh200"])
@pytest.mark.parametrize("zipf", [0.0, 0.8, 1.05, 1.3])
def test_cost_falls_as_the_cache_grows(hw: str, zipf: float) -> None:
    bm = AnalyticCostModel().bind(tiered(hw, zipf))
    costs = [device0(bm, big(Kernel.fused_uvm_caching, lf))[:2].sum() for lf in LOAD_FACTORS]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(costs, costs[1:])), costs
    assert costs[0] > costs[-1]
    misses = [bm.cache_miss_share(0, lf) for lf in LOAD_FACTORS]
    assert all(b <= a for a, b in zip(misses, misses[1:])) and misses[-1] == 0.0 and bm.cache_miss_share(0, 0.0) == 1.0


def test_a_skewed_table_needs_a_smaller_cache_than_a_uniform_one() -> None:
    hot, flat = AnalyticCostModel().bind(tiered(zipf=1.1)), AnalyticCostModel().bind(tiered(zipf=0.0))

    def smallest(bm, target: float) -> float:
        return next(lf for lf in LOAD_FACTORS if bm.cache_miss_share(0, lf) <= target)

    for target in (0.5, 0.3, 0.2):
        assert smallest(hot, target) < smallest(flat, target)
    # and so the skewed table's cached shard costs less at the same load factor
    assert device0(hot, big(Kernel.fused_uvm_caching, 0.1))[:2].sum() < device0(flat, big(Kernel.fused_uvm_caching, 0.1))[:2].sum()


def test_miss_share_of_the_documented_cases() -> None:
    """Rows read once are spread over the rows the histogram cannot rank (uniform: hit rate = cached share, as
    TorchRec's estimate); rows read more often are the hottest and are cached first."""
    once = np.zeros(ACCESS_BINS)
    once[0] = 1.0
    assert cache_miss_share(once, rows=1000.0, lookups=100.0, cache_rows=250.0) == pytest.approx(0.75)
    two_kinds = np.zeros(ACCESS_BINS)
    two_kinds[0], two_kinds[5] = 0.5, 0.5  # half the touched rows read once, half ~24 times
    unique = 1000.0 / (0.5 * 1 + 0.5 * 24.5)
    # a cache exactly the size of the hot rows: every hot lookup hits, every single read misses
    miss = cache_miss_share(two_kinds, rows=10_000.0, lookups=1000.0, cache_rows=0.5 * unique)
    assert miss == pytest.approx(0.5 * 1 / (0.5 * 1 + 0.5 * 24.5))


def test_gh200_nvlink_c2c_makes_uvm_cheaper_than_pcie_on_h100() -> None:
    h100, gh200 = AnalyticCostModel().bind(tiered("h100")), AnalyticCostModel().bind(tiered("gh200"))
    assert gh200.profile.host_link_bandwidth > h100.profile.host_link_bandwidth
    for shard in (big(Kernel.fused_uvm), big(Kernel.fused_uvm_caching, 0.05)):
        penalty = {n: device0(bm, shard)[:2].sum() - device0(bm, big())[:2].sum() for n, bm in (("h100", h100), ("gh200", gh200))}
        assert 0 < penalty["gh200"] < penalty["h100"] / 3
        assert device0(gh200, shard)[:2].sum() < device0(h100, shard)[:2].sum()


def test_the_topologys_host_link_override_is_the_link_used() -> None:
    slow = AnalyticCostModel().bind(tiered("h100", link=4e9))
    base = AnalyticCostModel().bind(tiered("h100"))
    assert slow.profile.host_link_bandwidth == 4e9 and base.profile.host_link_bandwidth == get_profile("h100").host_link_bandwidth
    state = base.shard_contribution(big(Kernel.fused_uvm))[1]
    nbytes, rows, p = state[STATE_HOST_FWD_IN], state[STATE_HOST_FWD_ROWS], base.profile
    assert state[STATE_HOST_FWD_OUT] == 0.0
    # the slow link is bytes-bound (64 ns a 256-byte row); h100's own is row-bound (its measured row-gather constants)
    base_s = max(nbytes / p.host_link_bandwidth, rows / p.host_row_rate + nbytes / p.host_gather_bandwidth)
    assert device0(slow, big(Kernel.fused_uvm))[0] - device0(base, big(Kernel.fused_uvm))[0] == pytest.approx(
        (nbytes / 4e9 - base_s) * MS, rel=1e-9)
    assert device0(slow, big())[0] == device0(base, big())[0]  # an HBM plan does not use the link


def test_fused_uvm_reads_every_lookup_and_updates_every_unique_row_over_the_link() -> None:
    inst = tiered("h100", zipf=0.9)
    bm = AnalyticCostModel().bind(inst)
    state = bm.shard_contribution(big(Kernel.fused_uvm))[1]
    lookups = inst.workload.batch_size * 20.0
    sb = float(sector_bytes(np.array(64.0), np.array(4.0), 32))
    unique = min(2_000_000, lookups / max(float(mean_count(bm.histograms[0])), 1.0))
    assert state[STATE_GATHER] == 0.0  # nothing gathered from HBM
    assert state[STATE_HOST_FWD_IN] == pytest.approx(lookups * sb) and state[STATE_HOST_FWD_OUT] == 0.0
    assert state[STATE_HOST_BWD_IN] == pytest.approx(unique * sb) and state[STATE_HOST_BWD_OUT] == pytest.approx(unique * sb)
    assert state[STATE_UVM] == 1.0 and state[STATE_CACHED] == 0.0


def test_a_cache_smaller_than_the_batchs_rows_reads_the_rest_directly() -> None:
    """Steady state of the cache: missed rows are fetched into it (and as many evicted rows written back) when it
    has room; the rows beyond its size in this batch are read and updated in host memory directly."""
    inst = tiered("h100", zipf=0.0, rows=2_000_000)
    bm = AnalyticCostModel().bind(inst)
    lookups = inst.workload.batch_size * 20.0
    unique = min(2_000_000, lookups / max(float(mean_count(bm.histograms[0])), 1.0))
    sb = 256.0
    roomy = bm.shard_contribution(big(Kernel.fused_uvm_caching, 0.9))[1]
    assert roomy[STATE_HOST_BWD_IN] == 0.0 and roomy[STATE_HOST_FWD_OUT] > 0 and roomy[STATE_HOST_FWD_IN] == roomy[STATE_HOST_FWD_OUT]
    lf = 0.5 * unique / 2_000_000  # half of this batch's rows
    small = bm.shard_contribution(big(Kernel.fused_uvm_caching, lf))[1]
    cache_rows = np.ceil(lf * 2_000_000)
    assert small[STATE_HOST_BWD_IN] == pytest.approx((unique - cache_rows) * sb, rel=1e-6)
    assert small[STATE_HOST_FWD_IN] > small[STATE_HOST_FWD_OUT]  # the overflow's lookups are read, not fetched


def test_one_launch_per_kernel_group() -> None:
    """TorchRec builds one TBE per compute kernel on a device: fused + fused_uvm_caching = two launches a pass."""
    inst = tiered("h100")
    bm = AnalyticCostModel().bind(inst)
    both = bm.plan_costs([big(Kernel.fused_uvm_caching, 1.0), Shard(table="small", device=0)]).columns[0]
    alone = [bm.plan_costs([s]).columns[0] for s in (big(Kernel.fused_uvm_caching, 1.0), Shard(table="small", device=0))]
    p = bm.profile
    state = bm.shard_contribution(big(Kernel.fused_uvm_caching, 1.0))[1] + bm.table_states[1]
    # the device's own arithmetic: 2 groups, the prefetch, one kernel over both tables' bytes
    assert bm.compute_costs(state)[1] == pytest.approx(both[1])
    one_group = state.copy()
    one_group[STATE_CACHED] = 0.0
    assert bm.compute_costs(state)[1] - bm.compute_costs(one_group)[1] == pytest.approx(3 * p.launch_overhead_s * MS)
    assert both[1] > max(alone[0][1], alone[1][1])


# ---------------------------------------------------------------------------------------------------------------
# HBM plans cost what they cost before the tiers; the incremental API


# (max cost, critical path) of two plans per example, computed by the model as of 7aba2aa (before the tiers):
# a table-wise assignment (table i on device i % D) and a plan splitting every third table by columns and the
# next by rows
BEFORE_TIERS = {
    "small": (1.1035846230663335, 1.2364042497330003, 1.57961273609412, 1.6434011094274537),
    "large": (17.377844587101933, 18.950708587101936, 19.604399630181675, 21.570479630181676),
    "tight": (5.606851578348374, 5.980141634941592, 5.497220956416393, 6.263914517086035),
}


@pytest.mark.parametrize("name", sorted(BEFORE_TIERS))
def test_hbm_plans_cost_exactly_what_they_cost_before_the_tiers(name: str) -> None:
    inst = load_instance(EXAMPLES / f"{name}.json")
    bm = AnalyticCostModel().bind(inst)
    D = inst.topology.num_devices
    dev = np.arange(len(inst.tables)) % D
    shards = []
    for i, t in enumerate(inst.tables):
        d = int(dev[i])
        if i % 3 == 1 and t.dim >= 8:
            shards += [Shard(table=t.name, device=d, cols=4), Shard(table=t.name, device=(d + 1) % D, col_offset=4)]
        elif i % 3 == 2 and t.rows >= 2:
            shards += [Shard(table=t.name, device=d, rows=t.rows // 2), Shard(table=t.name, device=(d + 1) % D, row_offset=t.rows // 2)]
        else:
            shards.append(Shard(table=t.name, device=d))
    a = bm.assignment_costs(dev)
    # (the pinned figures priced the mixed plan's widths as ONE all-to-all; the judge now runs one per sharding type,
    # docs/analytic-model.md, which costs at least as much: the per-type judge is checked in tests/test_output_dists.py)
    states, dists, extra, hier = bm.shard_sums(shards)
    b = bm.device_costs(states, dists.sum(axis=0), extra, hier)
    assert bm.plan_costs(shards).max_cost >= b.max_cost
    tw = bm.plan_costs([Shard(table=t.name, device=int(d)) for t, d in zip(inst.tables, dev)])
    assert (a.max_cost, a.critical_path, b.max_cost, b.critical_path) == BEFORE_TIERS[name]
    assert np.array_equal(tw.columns, a.columns)
    assert STATE_SIZE == 2 * ACCESS_BINS + 14 and bm.table_states[:, STATE_GATHER + 6:].sum() == 0.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_tables=8, max_devices=4))
def test_the_tier_branch_with_every_row_in_hbm_is_the_hbm_model(inst) -> None:
    bm = AnalyticCostModel().bind(inst)
    n = len(inst.tables)
    widths = np.array([t.dim for t in inst.tables], dtype=np.float64)
    rf = np.linspace(0.3, 1.0, n)
    plain = bm.shard_states(np.arange(n), widths, rf, np.ones(n))
    tiers = bm.shard_states(np.arange(n), widths, rf, np.ones(n), np.ones(n), np.zeros(n, dtype=bool))
    assert np.allclose(plain, tiers, rtol=1e-12, atol=0.0)
    assert np.array_equal(bm.shard_states(np.arange(n), widths, rf, np.ones(n), None), plain)


def test_incremental_states_with_cache_fractions_match_the_full_plan() -> None:
    inst = tiered("h100", devices=2)
    bm = AnalyticCostModel().bind(inst)
    t = inst.tables[0]
    plan = [big(Kernel.fused_uvm_caching, 0.2, rows=t.rows // 2),
            big(Kernel.fused_uvm, device=1, row_offset=t.rows // 2),
            Shard(table="small", device=0)]
    cfs = [shard_cache_fraction(s, s.height(t)) for s in plan[:2]]
    assert cfs[1] == 0.0 and cfs[0] == pytest.approx(0.2)
    # what a solver does: shard_states with the cache share as a 5th positional argument, summed per device
    states = bm.shard_states(np.array([0, 0]), np.array([64.0, 64.0]), np.array([0.5, 0.5]), np.ones(2), np.array(cfs))
    S = np.zeros((2, STATE_SIZE))
    S[0] += states[0] + bm.table_states[1]
    S[1] += states[1]
    full = bm.plan_costs(plan)
    assert np.allclose(bm.compute_costs(S), full.columns[:, :2], rtol=1e-12)
    assert np.allclose(bm.shard_state(0, 64, 0.5, 1.0, cfs[0]), states[0])
    # removing the cached shard from device 0 is a subtraction, as for HBM shards
    assert np.allclose(bm.compute_costs(S[0] - states[0]), bm.compute_costs(bm.table_states[1]))


# ---------------------------------------------------------------------------------------------------------------
# data-parallel replicas and row-wise shards


def test_a_replica_pays_the_dense_optimizer_step_of_every_row() -> None:
    """TorchRec's data_parallel sharding runs the dense kernel: a dense gradient, all-reduced, and the optimizer
    over every row, read and written (docs)."""
    inst = tiered("h100", zipf=1.2, rows=200_000, devices=4)
    bm = AnalyticCostModel().bind(inst)
    rep = bm.shard_state(0, 64, 1.0, 0.25)
    sparse_like = bm.shard_state(0, 64, 1.0, 1.0)
    from costmodels.analytic import OUTPUT_BYTES, SORT_BYTES_PER_LOOKUP, STATE_BWD_STREAM

    lookups = inst.workload.batch_size / 4 * 20.0
    dense = 200_000 * (2 * 64 * OUTPUT_BYTES + 2 * (64 * 4 + 4))  # gradient write + read; weights + rowwise state
    assert rep[STATE_BWD_STREAM] == pytest.approx(inst.workload.batch_size / 4 * 64 * OUTPUT_BYTES + lookups * SORT_BYTES_PER_LOOKUP + dense)
    assert rep[STATE_BWD_STREAM] > sparse_like[STATE_BWD_STREAM] / 4
    costs = bm.plan_costs([Shard(table="big", device=d, replicated=True) for d in range(4)] + [Shard(table="small", device=0)])
    assert costs.bwd_comm[1] > costs.fwd_comm[1]  # the gradient all-reduce


def test_row_wise_partial_sums_cost_the_reduce_scatters_bytes() -> None:
    """A table split row-wise over all D devices: each device holds partial sums of width w for the whole batch;
    the reduce-scatter sends and receives (D - 1) / D x B x w x 4 bytes per device, which is what the all-to-all
    accounting charges for a width w on every device (docs: "Row-wise shards")."""
    inst = tiered("h100", devices=4)
    bm = AnalyticCostModel().bind(inst)
    t = inst.tables[0]
    block = t.rows // 4
    shards = [Shard(table="big", device=d, row_offset=d * block, rows=block if d < 3 else None) for d in range(4)]
    costs = bm.plan_costs(shards)
    B, D, w = inst.workload.batch_size, 4, 64
    expected = (D - 1) / D * B * w * 4 / bm.intra_bw * MS + bm._latency_ms
    assert costs.fwd_comm == pytest.approx(np.full(4, expected)) and costs.bwd_comm == pytest.approx(np.full(4, expected))


# ---------------------------------------------------------------------------------------------------------------
# predictors and judges that cannot price a kind say so


@pytest.mark.parametrize("model", ["neural", "neural-cpu"])
@pytest.mark.parametrize("kernel,lf", [(Kernel.fused_uvm_caching, 0.2), (Kernel.fused_uvm, None)])
def test_neural_models_refuse_host_memory_shards_by_name(model: str, kernel: Kernel, lf: float | None) -> None:
    inst = tiered("v100", devices=3)
    cm = get_cost_model(model)
    plan = [Shard(table="small", device=0), Shard(table="big", device=2, kernel=kernel, cache_load_factor=lf)]
    with pytest.raises(UnsupportedPlacementError) as err:
        cm.plan_costs(inst, plan)
    msg = str(err.value)
    assert "neural cost model" in msg and cm.name in msg and f"kernel {kernel.value}" in msg
    assert "table 'big'" in msg and "device 2" in msg and "no host-memory tier" in msg and "--cost-model analytic" in msg
    assert isinstance(err.value, ValueError) and err.value.table == "big" and err.value.device == 2
    bm = cm.bind(inst)
    with pytest.raises(UnsupportedPlacementError, match="table 'big'"):
        bm.shard_states(np.array([0]), np.array([64.0]), np.ones(1), np.ones(1), np.array([0.0]))


def test_neural_models_refuse_replicas_and_cost_row_wise_shards() -> None:
    inst = tiered("v100", devices=2)
    bm = get_cost_model("neural").bind(inst)
    with pytest.raises(UnsupportedPlacementError, match="data-parallel replica .table 'small' on device 0."):
        bm.plan_costs([Shard(table="big", device=0)] + [Shard(table="small", device=d, replicated=True) for d in range(2)])
    t = inst.tables[0]
    rw = bm.plan_costs([Shard(table="big", device=0, rows=t.rows // 2), Shard(table="big", device=1, row_offset=t.rows // 2),
                        Shard(table="small", device=0)])
    assert np.all(np.isfinite(rw.columns)) and rw.max_cost > 0
    assert bm.unsupported(Shard(table="big", device=0, rows=10)) is None


def test_analytic_model_costs_every_kind() -> None:
    bm = AnalyticCostModel().bind(tiered())
    for s in (big(Kernel.fused_uvm_caching, 0.5), big(Kernel.fused_uvm), Shard(table="big", device=0, replicated=True)):
        assert bm.unsupported(s) is None


def _write_uvm_case(tmp_path: Path) -> tuple[str, str]:
    inst = tiered("h100", rows=20_000, batch=512)
    plan = Plan(shards=[big(Kernel.fused_uvm_caching, 0.25), Shard(table="small", device=1)])
    ipath, ppath = tmp_path / "inst.json", tmp_path / "plan.json"
    ipath.write_text(inst.model_dump_json())
    ppath.write_text(plan.model_dump_json())
    return str(ipath), str(ppath)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_measured_judges_refuse_host_memory_shards(tmp_path: Path, backend: str) -> None:
    from shardopt.cli import app

    ipath, ppath = _write_uvm_case(tmp_path)
    result = CliRunner().invoke(app, ["evaluate", ipath, ppath, "--backend", backend, "--no-cache"])
    assert result.exit_code == 2, result.stdout + result.stderr
    err = " ".join(result.stderr.split())
    assert "does not time host-memory shards" in err and "table 'big' on device 0" in err and "fused_uvm_caching" in err
    assert "--backend sim" in err and "Traceback" not in err
    result = CliRunner().invoke(app, ["compare", ipath, ppath, ppath, "--backend", backend])
    assert result.exit_code == 2 and "does not time host-memory shards" in " ".join(result.stderr.split())
    sim = CliRunner().invoke(app, ["evaluate", ipath, ppath, "--backend", "sim", "--json"])
    assert sim.exit_code == 0 and json.loads(sim.stdout)["max_cost_ms"] > 0


def test_solving_a_tiered_instance_with_a_neural_model_exits_2_naming_the_kind(tmp_path: Path) -> None:
    """A table no device holds goes row-wise behind a cache (solvers/placement/tiering.py); the greedy solver asks the cost
    model for those shards' state, and the neural model refuses instead of pricing them as HBM shards."""
    from shardopt.cli import app

    doc = json.loads(tiered("h100").model_dump_json())
    doc["topology"]["memory_bytes"], doc["topology"]["host_memory_bytes"] = 200_000_000, 1_000_000_000
    ipath = tmp_path / "tight.json"
    ipath.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["solve", str(ipath), "--solver", "greedy", "--cost-model", "neural"])
    err = " ".join(result.stderr.split())
    assert result.exit_code == 2, err
    assert "neural cost model 'neural' cannot cost kernel fused_uvm_caching (table 'big' on device 0)" in err
    assert "--cost-model analytic" in err
    assert CliRunner().invoke(app, ["solve", str(ipath), "--solver", "greedy"]).exit_code == 0


def test_measurement_cache_key_includes_the_memory_tier() -> None:
    from shardopt.measure.backends.base import TimingSettings
    from shardopt.measure.cache import measurement_key

    inst = tiered("h100")
    s = TimingSettings(batch_size=64, seed=0)

    def key(shard: Shard) -> str:
        return measurement_key("cuda", "k", "hw", inst, [shard], s)

    plain = key(Shard(table="big", device=0))
    assert plain == key(Shard(table="big", device=0, kernel=Kernel.fused))
    keys = {plain, key(big(Kernel.fused_uvm)), key(big(Kernel.fused_uvm_caching, 0.2)), key(big(Kernel.fused_uvm_caching, 0.5))}
    assert len(keys) == 4


def test_no_measured_path_times_a_host_memory_shard_as_hbm(tmp_path: Path) -> None:
    """The shared timing path refuses too (the measured leaderboard calls it directly), and the measured
    leaderboard does not take two plans that differ only in a shard's tier for one."""
    from shardopt.core.ir import plan_key
    from shardopt.measure.confidence import StopRule
    from shardopt.measure.plan_timing import MeasureError, measure_plans

    inst = tiered("h100", rows=20_000, batch=512)
    uvm = Plan(shards=[big(Kernel.fused_uvm_caching, 0.25), Shard(table="small", device=1)])
    hbm = Plan(shards=[big(), Shard(table="small", device=1)])
    with pytest.raises(MeasureError, match="does not time host-memory shards"):
        measure_plans(inst, [hbm, uvm], "cpu", StopRule(fixed=1))
    assert plan_key(uvm) != plan_key(hbm)
    assert plan_key(hbm) == plan_key(Plan(shards=[Shard(table="small", device=1), big(Kernel.fused)]))


# ---------------------------------------------------------------------------------------------------------------
# row-granular host reads (the first GPU lease's host-link probe)

PROBES = sorted((ROOT / "benchmarks" / "results").glob("gpu-h200-*/lease*/host-link.json"))


def test_the_hopper_row_gather_constants_are_the_fit_of_the_committed_h200_probes() -> None:
    from costmodels.host_link import fit_host_rows

    assert PROBES
    h200 = get_profile("h200")
    fits = [fit_host_rows(json.loads(probe.read_text())) for probe in PROBES]
    for fit in fits:
        assert fit.points == 5 and fit.max_rel_error < 0.05
        # the row rate varies less with the host (47.8-48.9 M rows/s over five machines): each probe near the constant
        assert fit.host_row_rate == pytest.approx(h200.host_row_rate, rel=0.03)
        # the per-byte part varies more (133-148 GB/s over five machines): each probe near the constant
        assert fit.host_gather_bandwidth == pytest.approx(h200.host_gather_bandwidth, rel=0.12)
    # the constants are the probes' medians
    assert float(np.median([f.host_row_rate for f in fits])) == pytest.approx(h200.host_row_rate, rel=0.01)
    assert float(np.median([f.host_gather_bandwidth for f in fits])) == pytest.approx(h200.host_gather_bandwidth, rel=0.01)
    assert get_profile("h100").host_row_rate == h200.host_row_rate  # same die and host interface (not measured)
    for name in ("v100", "a100", "gh200"):  # not measured: bytes only
        assert get_profile(name).host_row_rate is None and get_profile(name).host_gather_bandwidth is None


def test_the_fit_refuses_a_probe_without_gathers() -> None:
    from costmodels.host_link import fit_host_rows

    with pytest.raises(ValueError, match="gather_zero_copy"):
        fit_host_rows({"gather_zero_copy": "no CUDA view of pinned host memory"})


@pytest.mark.parametrize("dim", [16, 64, 256])
def test_narrow_uvm_rows_cost_the_row_rate_not_the_links_bytes(dim: int) -> None:
    """A fused_uvm table of 64-byte rows reads each lookup's row on its own: on h100 the forward's host time is the
    measured ~20 ns a row, an order of magnitude over its bytes at 63 GB/s; on a100 (not measured) the bytes alone."""
    inst = instance_from_dict({
        "tables": [{"name": "big", "rows": 2_000_000, "dim": dim, "pooling_factor": 20.0, "access": {"zipf": 1.05}},
                   {"name": "small", "rows": 100_000, "dim": 32, "pooling_factor": 5.0, "access": {"zipf": 1.0}}],
        "topology": {"num_devices": 2, "devices_per_host": 2, "memory_bytes": 10**11, "host_memory_bytes": 10**12,
                     "hardware": "h100"},
        "workload": {"batch_size": 65536, "optimizer": "sgd"},
    })
    bm = AnalyticCostModel().bind(inst)
    state = bm.shard_contribution(big(Kernel.fused_uvm))[1]
    lookups = 65536 * 20.0
    assert state[STATE_HOST_FWD_ROWS] == pytest.approx(lookups) and state[STATE_HOST_FWD_IN] == pytest.approx(lookups * dim * 4)
    p = bm.profile
    uvm, hbm = device0(bm, big(Kernel.fused_uvm)), device0(bm, big())
    row_s = 1 / p.host_row_rate + dim * 4 / p.host_gather_bandwidth
    assert uvm[0] - hbm[0] >= lookups * row_s * MS * 0.95  # at least the rows' host time (less the HBM gather saved)
    if dim == 16:
        assert row_s > 10 * dim * 4 / p.host_link_bandwidth
    a100 = AnalyticCostModel().bind(inst.model_copy(update={"topology": inst.topology.model_copy(update={"hardware": "a100"})}))
    s100 = a100.shard_contribution(big(Kernel.fused_uvm))[1]
    host = device0(a100, big(Kernel.fused_uvm))[0] - device0(a100, big())[0]
    assert host <= s100[STATE_HOST_FWD_IN] / a100.profile.host_link_bandwidth * MS * 1.01 + 1e-9


def test_uvm_backward_rows_are_the_unique_rows_read_from_host() -> None:
    inst = tiered("h100", zipf=0.9, opt="sgd")
    bm = AnalyticCostModel().bind(inst)
    state = bm.shard_contribution(big(Kernel.fused_uvm))[1]
    sb = float(sector_bytes(np.array(64.0), np.array(4.0), 32))
    assert state[STATE_HOST_BWD_ROWS] == pytest.approx(state[STATE_HOST_BWD_IN] / sb)
    hbm = bm.shard_contribution(big())[1]
    assert hbm[STATE_HOST_FWD_ROWS] == 0.0 and hbm[STATE_HOST_BWD_ROWS] == 0.0


def test_profiles_round_trip_with_and_without_row_constants(tmp_path) -> None:
    from shardopt.core.hardware import load_profile, profile_to_dict

    for name in ("h200", "a100"):
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(profile_to_dict(get_profile(name))))
        assert load_profile(f) == get_profile(name)
    doc = profile_to_dict(get_profile("h200"))
    doc["host_row_rate"] = -1
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="host_row_rate"):
        load_profile(f)


def test_a_table_without_a_measured_access_has_a_finite_miss_share() -> None:
    """Issue 'trust': under one lookup per batch the histogram is all zero and the miss share was 0 / 0 = NaN; the
    rows are then taken as equally likely, and the cache sizing picks from finite numbers."""
    zero = np.zeros(17)
    shares = [cache_miss_share(zero, 1000.0, 0.5, c) for c in (0.0, 100.0, 500.0, 1000.0)]
    assert all(math.isfinite(x) for x in shares)
    assert shares == pytest.approx([1.0, 0.9, 0.5, 0.0])
