"""Benchmark suites: the papers' task families, drawn from a table pool, reproducible byte for byte.

Each family fixes what the paper that introduced it fixed (table counts, dims, devices); the tables come from a
pool (the train or test half, so learned models are judged on tables they never saw). Memory is the one thing set
differently from the papers: the published fixed capacities (NeuroShard's 4 GiB, AutoShard's 7 GB) make most tasks
drawn from the DLRM pool either trivially roomy or impossible, so every instance gets the *tight* capacity rule
below, and the paper's nominal figure is kept in the metadata.

Memory rule (per device, all devices equal): start from `TIGHT_SLACK` (1.10) x total table bytes / devices, at
least the largest table; then raise it in steps of 2 % until first-fit-decreasing (largest table first onto the
device with the most free memory) places every table. So every instance is feasible, and no device has more than
about 10 % (plus the steps needed) of spare room on average.

Two families go beyond table-wise HBM plans (issue 17) and have their own memory rules, described at their
generators: `huge` (the largest tables 2-20x a device's HBM: no table-wise plan exists, they must be split by rows
or put in host memory) and `tiered` (all tables 1.5-4x the cluster's HBM: some must live in host memory). Their
feasibility is guaranteed constructively: an instance is emitted only when
shardopt.core.feasibility.constructive_tiered_plan builds a plan for it that passes the plan checker.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardopt.core.errors import UserError
from shardopt.core.feasibility import constructive_tiered_plan, infeasibility_reason, tiered_infeasibility_reason
from shardopt.core.hardware import PROFILES
from shardopt.core.ir import AccessProfile, Instance, Kernel, Shard, Table, Topology, TopologyLevel, Workload, dumps
from shardopt.core.memory import slice_bytes, table_bytes_array
from shardopt.core.plan_check import check_plan
from shardopt.core.stats import histogram_from_zipf
from shardopt.data.pools import TablePool, round_histogram
from shardopt.data.scale import scale_table
from shardopt.data.two_d_family import POOL_DIM_WEIGHTS, POOL_DIMS, generate_two_d_instance

TIGHT_SLACK = 1.10
SLACK_STEP = 1.02
SUITE_MANIFEST = "suite.json"


@dataclass(frozen=True)
class TaskShape:
    tables: int
    devices: int
    devices_per_host: int


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    shape: Callable[[np.random.Generator, int], TaskShape]  # (rng, index in suite) -> shape
    dims: tuple[int, ...]
    dim_weights: tuple[float, ...] | None
    hardware: str
    nominal_memory: str  # what the paper used, for the record
    max_rows: int | None = None  # cap every table's rows (the CPU-scale family)
    batch_rule: Callable[[list[Table], int], int] | None = None  # (tables, devices) -> batch  # the instance's batch from its tables; None: the pool's
    # the family's own generator (huge, tiered): (family, pool, seed, index, pool label) -> instance; None: the tight
    # rule of generate_instance. Such a family draws its own shape and hardware (`shape` / `hardware` describe them)
    make: Callable[[Family, TablePool, int, int, str], Instance] | None = None
    # how many times each pool table may be drawn (a model larger than the pool: the k-th copy of table NAME is named
    # NAME-cK, k >= 1, with the same rows, pooling and access); 1: each at most once
    copies: int = 1
    # the topology's levels for a shape (host, NVLink domain, network: Topology.levels); None: the two of old
    levels: Callable[[TaskShape], list[TopologyLevel]] | None = None
    # each device's hardware kind for a shape (Topology.device_hardware, a job that mixes generations; memory shared
    # out in proportion to each kind's HBM); None: every device is `hardware`
    device_hardware: Callable[[TaskShape], list[str]] | None = None


# The CPU-scale family: instances a 2-core CPU can judge at their own workload, each device's shards timing in
# roughly 5-50 ms with fbgemm's CPU TBE. Measured here (2026-11-24, fbgemm-gpu-cpu 1.8.0, one thread, rowwise adagrad,
# batch 2048-4096, dims 64-128): about 0.6 ns per looked-up element forward + backward (0.2 + 0.4); more for narrow
# dims. The batch is chosen so that the mean device moves CPU_TARGET_ELEMENTS elements (about 15 ms), as a power of
# two between CPU_BATCH_RANGE; rows are capped at CPU_MAX_ROWS so a plan's kernels fit in memory several times over.
CPU_TARGET_ELEMENTS = 25_000_000
CPU_BATCH_RANGE = (256, 16384)
CPU_MAX_ROWS = 50_000


def cpu_batch(tables: list[Table], devices: int) -> int:
    """The power-of-two batch at which the mean device looks up about CPU_TARGET_ELEMENTS elements."""
    per_sample = sum(t.pooling_factor * t.dim for t in tables) / devices
    raw = CPU_TARGET_ELEMENTS / max(per_sample, 1e-9)
    batch = 2 ** int(round(np.log2(raw)))
    return int(min(max(batch, CPU_BATCH_RANGE[0]), CPU_BATCH_RANGE[1]))


def _cpu_shape(rng: np.random.Generator, i: int) -> TaskShape:
    devices = int(rng.integers(2, 9))
    tables = devices * int(rng.integers(4, 9))
    return TaskShape(tables, devices, devices)


def _dreamshard_shape(rng: np.random.Generator, i: int) -> TaskShape:
    tables, devices = [(50, 4), (50, 8), (100, 4), (100, 8)][i % 4]
    return TaskShape(tables, devices, devices)


NVL72_DOMAIN = 72  # GPUs per NVLink domain: one GB200 NVL72 rack
NVL72_HOST = 4  # GPUs per compute tray (host)


def _nvl72_shape(rng: np.random.Generator, i: int) -> TaskShape:
    racks = (2, 4)[i % 2]
    devices = NVL72_DOMAIN * racks
    return TaskShape(devices * int(rng.integers(2, 5)), devices, NVL72_HOST)


def _nvl72_levels(shape: TaskShape) -> list[TopologyLevel]:
    """One NVLink domain per rack at the GPU's NVLink bandwidth, the network between racks with its start-up."""
    p = PROFILES["gb200"]
    return [TopologyLevel(name="nvlink_domain", devices=NVL72_DOMAIN, bandwidth=p.nvlink_bandwidth),
            TopologyLevel(name="network", devices=shape.devices, bandwidth=p.network_bandwidth, latency_s=p.network_latency_s)]


MIXED_KINDS = ("a100", "h200")  # the older and the newer generation of the `mixed` family
MIXED_HOST = 8  # GPUs per host


def _mixed_shape(rng: np.random.Generator, i: int) -> TaskShape:
    devices = MIXED_HOST * (2, 4)[i % 2]
    return TaskShape(devices * int(rng.integers(4, 9)), devices, MIXED_HOST)


def _mixed_hardware(shape: TaskShape) -> list[str]:
    """The first half of the hosts of the older generation, the rest of the newer (whole hosts of one kind)."""
    hosts = shape.devices // shape.devices_per_host
    old = hosts // 2
    return [MIXED_KINDS[0] if d // shape.devices_per_host < old else MIXED_KINDS[1] for d in range(shape.devices)]


FAMILIES: dict[str, Family] = {
    "dreamshard": Family(
        "dreamshard",
        "DreamShard (NeurIPS 2022): 50 and 100 tables on 4 and 8 devices of one host, cycling through the 4 shapes",
        _dreamshard_shape,
        (4, 8, 16, 32, 64, 128),
        None,
        "v100",
        "one V100's memory per GPU (tight rule used instead)",
    ),
    "neuroshard": Family(
        "neuroshard",
        "NeuroShard (MLSys 2023): 10 to 59 tables, dims from {4,...,128}, 4 devices",
        lambda rng, i: TaskShape(int(rng.integers(10, 60)), 4, 4),
        (4, 8, 16, 32, 64, 128),
        None,
        "v100",
        "4 GiB per device (tight rule used instead)",
    ),
    "autoshard": Family(
        "autoshard",
        "AutoShard (KDD 2022): 80 tables, dims from {16, 32}, 8 devices",
        lambda rng, i: TaskShape(80, 8, 8),
        (16, 32),
        None,
        "v100",
        "7 GB per device (tight rule used instead)",
    ),
    "production": Family(
        "production",
        "all 856 tables of the DLRM pool, dims mixed up to 256, 128 devices, 8 per host",
        lambda rng, i: TaskShape(856, 128, 8),
        (16, 32, 64, 128, 256),
        (0.3, 0.3, 0.2, 0.15, 0.05),
        "a100",
        "the production cluster of the NeuroShard paper (128 GPUs); tight rule",
    ),
    "production-xl": Family(
        "production-xl",
        "the production tables four times over (3,424 tables, copies renamed NAME-cK), dims mixed up to 256, 512 devices, "
        "8 per host: the scale of the largest published recommendation clusters",
        lambda rng, i: TaskShape(3424, 512, 8),
        (16, 32, 64, 128, 256),
        (0.3, 0.3, 0.2, 0.15, 0.05),
        "a100",
        "none (a scale family; tight rule)",
        copies=4,
    ),
    "nvl72": Family(
        "nvl72",
        "GB200 NVL72 racks: 2 or 4 racks of 72 GPUs, each rack one NVLink domain over 18 hosts of 4 (NVLink 5 within the "
        "rack, 400 Gb/s InfiniBand between racks: topology levels), 2 to 4 tables per GPU drawn from the pool (copies "
        "renamed NAME-cK), dims mixed up to 256",
        lambda rng, i: _nvl72_shape(rng, i),
        (16, 32, 64, 128, 256),
        (0.3, 0.3, 0.2, 0.15, 0.05),
        "gb200",
        "none (a cluster family; tight rule)",
        copies=4,
        levels=lambda shape: _nvl72_levels(shape),
    ),
    "mixed": Family(
        "mixed",
        "two GPU generations in one job: 2 or 4 hosts of 8, the first half A100 80 GB (NVLink 3, 200 Gb/s), the rest "
        "H200 141 GB (NVLink 4, 400 Gb/s); memory shared out in proportion to each kind's HBM; 4 to 8 tables per GPU "
        "drawn from the pool, dims mixed up to 256",
        lambda rng, i: _mixed_shape(rng, i),
        (16, 32, 64, 128, 256),
        (0.3, 0.3, 0.2, 0.15, 0.05),
        MIXED_KINDS[0],
        "none (a cluster family; tight rule, capacities in proportion to HBM)",
        device_hardware=lambda shape: _mixed_hardware(shape),
    ),
    "cpu": Family(
        "cpu",
        "CPU scale: 2 to 8 devices with 4 to 8 tables each, dims from {8,...,128}, rows capped at 50,000 and the batch "
        "chosen so that a device times in about 5-50 ms on fbgemm's CPU TBE (judge it at its own workload)",
        _cpu_shape,
        (8, 16, 32, 64, 128),
        (0.15, 0.25, 0.25, 0.2, 0.15),
        "cpu",
        "none (a CPU-scale family; tight rule)",
        max_rows=CPU_MAX_ROWS,
        batch_rule=cpu_batch,
    ),
}


class SuiteError(UserError, ValueError):
    """Bad generation request: unknown family, bad count, pool too small."""

    error_kind = "bad_suite_request"


# ---------------------------------------------------------------------------------------------------------------
# Families beyond table-wise HBM (issue 17): `huge` and `tiered`
#
# Both: 2 to 16 devices (from TIER_DEVICES), one host or several (devices_per_host divides num_devices: up to 8
# devices one host or two, 12 and 16 devices hosts of 4 to 8; GH200 nodes hold 2 or 4 superchips), 4 to 8 tables per
# device drawn from the pool with dims as the production family's, batch 65,536 (the pool's), rowwise Adagrad, fp32.
# Host memory, where an instance has it, is the hardware's typical host DRAM per GPU in proportion to its HBM,
# scaled like the HBM: host_memory_bytes = HOST_DRAM_PER_HBM[hardware] x the instance's HBM per device.

# host DRAM per GPU / HBM per GPU of the typical server (data sheets): DGX A100 640 GB: 2 TB of DDR4 for 8 x 80 GB;
# DGX H100: 2 TB of DDR5 for 8 x 80 GB; GH200 Grace Hopper: 480 GB of LPDDR5X beside 96 GB of HBM3 (NVLink-C2C)
HOST_DRAM_PER_HBM = {"a100": 256 / 80, "h100": 256 / 80, "gh200": 480 / 96}
TIER_DEVICES = (2, 4, 6, 8, 12, 16)
TIER_TABLES_PER_DEVICE = (4, 8)
GPU_DIMS = (16, 32, 64, 128, 256)
GPU_DIM_WEIGHTS = (0.3, 0.3, 0.2, 0.15, 0.05)

# huge: 1 to 3 tables of HUGE_RATIO x a device's HBM (log-uniform; below 20 so that rounding the rows up stays
# within 20x), drawn from the pool and grown by rows; widths from HUGE_DIMS. The HBM is sized so that the huge tables
# take at most HUGE_HBM_SHARE of the cluster's HBM; on instances with host memory they may go beyond that, into at
# most HUGE_HOST_SHARE of the host memory, so the ratio reachable grows with the cluster (4 devices without host
# memory: 2-2.4x; 16 devices: up to 9.6x; with host memory up to 19.9x from 8 devices).
HUGE_RATIO = (2.0, 19.9)
HUGE_TABLES = (1, 3)
HUGE_DIMS = (64, 128, 256)
HUGE_DIM_WEIGHTS = (0.4, 0.4, 0.2)
HUGE_HBM_SHARE = 0.6
HUGE_HOST_SHARE = 0.75
HUGE_HARDWARE = ("a100", "h100")
# tiered: all tables' bytes (weights + optimizer state) / the cluster's HBM, uniform in TIERED_RATIO
TIERED_RATIO = (1.5, 4.0)
TIERED_HARDWARE = (("a100", 0.35), ("h100", 0.35), ("gh200", 0.30))
MAX_MEMORY_STEPS = 400  # 2 % steps (about 2,750x): a family whose witness never fits is a bug, reported as such


def _tier_hosts(rng: np.random.Generator, devices: int, hardware: str) -> int:
    """Devices per host (a divisor of `devices`): see the comment above."""
    if hardware == "gh200":
        return 4 if devices % 4 == 0 else 2
    if devices <= 8:
        return devices if devices < 4 or rng.random() < 0.5 else devices // 2
    return int(rng.choice([d for d in (8, 6, 4) if devices % d == 0]))


def _own_shape(rng: np.random.Generator, i: int) -> TaskShape:  # pragma: no cover - never called
    raise NotImplementedError("the huge and tiered families draw their shapes in their own generators")


def _in_pool_order(pool: TablePool, tables: list[Table]) -> list[Table]:
    """Tables in the pool's order (the order the other families list them in), so no table's place gives it away."""
    rank = {t.name: i for i, t in enumerate(pool.tables)}
    return sorted(tables, key=lambda t: rank[t.name])


def _regrown_access(t: Table, batch: int) -> Table:
    if t.access.zipf is None:
        return t
    h = histogram_from_zipf(t.rows, t.pooling_factor, t.access.zipf, batch)
    return t.model_copy(update={"access": AccessProfile(histogram=round_histogram(h), zipf=t.access.zipf)})


def _pool_table(pool: TablePool, i: int, dim: int) -> Table:
    t = pool.tables[i]
    return Table(name=t.name, rows=t.rows, dim=int(dim), pooling_factor=t.pooling_factor,
                 access=AccessProfile(histogram=t.access.histogram, zipf=t.access.zipf))


def _draw(rng: np.random.Generator, pool: TablePool, family: str, n: int) -> np.ndarray:
    if n > len(pool.tables):
        raise SuiteError(f"pool {pool.name!r} has {len(pool.tables)} tables; family {family!r} needs {n}")
    return rng.choice(len(pool.tables), n, replace=False)


def _gpu_dims(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice(np.asarray(GPU_DIMS), size=n, p=np.asarray(GPU_DIM_WEIGHTS) / sum(GPU_DIM_WEIGHTS))


def _witness(inst: Instance) -> list[Shard] | None:
    """The constructive plan when it exists and passes the checker (and the necessary condition holds), else None."""
    if tiered_infeasibility_reason(inst) is not None:
        return None
    plan = constructive_tiered_plan(inst)
    if plan is None or not check_plan(inst, plan).ok:
        return None
    return plan


def _witness_summary(inst: Instance, plan: list[Shard]) -> dict[str, object]:
    counts: dict[str, int] = {}
    for sh in plan:
        counts[sh.table] = counts.get(sh.table, 0) + 1
    return {
        "witness": "shardopt.core.feasibility.constructive_tiered_plan",
        "shards": len(plan),
        "row_split_tables": sum(1 for c in counts.values() if c > 1),
        "fused_uvm_caching_shards": sum(1 for sh in plan if sh.kernel is Kernel.fused_uvm_caching),
        "fused_uvm_shards": sum(1 for sh in plan if sh.kernel is Kernel.fused_uvm),
        "table_wise_plan": "none exists" if infeasibility_reason(inst) else "necessary conditions hold",
    }


def _common_metadata(family: Family, pool: TablePool, seed: int, index: int, pool_label: str) -> dict[str, object]:
    return {
        "suite": family.name,
        "family": family.name,
        "seed": seed,
        "index": index,
        "pool": pool_label,
        "pool_name": pool.name,
        "pool_synthetic": pool.synthetic,
    }


def generate_huge_instance(family: Family, pool: TablePool, seed: int, index: int, pool_label: str) -> Instance:
    """One `huge` instance: 1 to 3 tables 2-20x a device's HBM among tables like the other GPU families'.

    Host memory: the odd-indexed instances have it (HOST_DRAM_PER_HBM x HBM per device; 2 to 16 devices), so their
    huge tables may go to host memory or be split by rows; the even-indexed ones have none, so their huge tables must
    be split by rows across the HBM (4 to 16 devices: 2 devices' HBM cannot hold a table twice a device's HBM
    beside anything else).

    HBM per device: max(the largest other table, 1.10 x the other tables' bytes / (devices - 1.10 x H)), H = the sum
    of the huge tables' ratios, at most HUGE_HBM_SHARE x devices (the tight rule of the other families with the huge
    tables counted at their share of the HBM); then raised in steps of 2 % (the huge tables growing with it, so the
    ratios stay) until constructive_tiered_plan places every table, their rows split across devices (and into host
    memory where there is some). Without host memory the tables thus fill about 91 % of the HBM, as in the other
    families; with it, the huge tables beyond HUGE_HBM_SHARE of the HBM need host memory or row splits over it.
    """
    rng = np.random.default_rng([seed, index])
    hosted = index % 2 == 1
    devices = int(rng.choice(TIER_DEVICES if hosted else tuple(d for d in TIER_DEVICES if d >= 4)))
    hardware = str(rng.choice(HUGE_HARDWARE))
    per_host = _tier_hosts(rng, devices, hardware)
    host_ratio = HOST_DRAM_PER_HBM[hardware] if hosted else 0.0
    n_other = devices * int(rng.integers(TIER_TABLES_PER_DEVICE[0], TIER_TABLES_PER_DEVICE[1] + 1))
    budget = HUGE_HBM_SHARE * devices + HUGE_HOST_SHARE * host_ratio * devices  # sum of the ratios at most
    k = int(rng.integers(HUGE_TABLES[0], min(HUGE_TABLES[1], int(budget // HUGE_RATIO[0])) + 1))
    ratios, left = [], budget
    for j in range(k):
        hi = min(HUGE_RATIO[1], left - HUGE_RATIO[0] * (k - 1 - j))
        ratios.append(float(np.exp(rng.uniform(np.log(HUGE_RATIO[0]), np.log(hi)))))
        left -= ratios[-1]
    chosen = _draw(rng, pool, family.name, n_other + k)
    huge_idx, other_idx = chosen[:k], np.sort(chosen[k:])
    huge_dims = rng.choice(np.asarray(HUGE_DIMS), size=k, p=np.asarray(HUGE_DIM_WEIGHTS) / sum(HUGE_DIM_WEIGHTS))
    others = [_pool_table(pool, int(i), int(d)) for i, d in zip(other_idx, _gpu_dims(rng, n_other))]
    huge = [_pool_table(pool, int(i), int(d)) for i, d in zip(huge_idx, huge_dims)]
    workload = Workload(batch_size=pool.batch_size)
    topology = Topology(num_devices=devices, devices_per_host=per_host, memory_bytes=1, hardware=hardware)
    draft = Instance(tables=others + huge, topology=topology, workload=workload)
    sizes = table_bytes_array(draft)[:n_other]
    row_bytes = [slice_bytes(draft, t, 1, t.dim) for t in huge]
    share = min(sum(ratios), HUGE_HBM_SHARE * devices)
    cap = max(int(sizes.max()), int(np.ceil(TIGHT_SLACK * float(sizes.sum()) / (devices - TIGHT_SLACK * share))))
    for steps in range(MAX_MEMORY_STEPS):  # noqa: B007 - the count is reported after the loop
        grown = [t.model_copy(update={"rows": int(np.ceil(r * cap / rb))}) for t, r, rb in zip(huge, ratios, row_bytes)]
        host = int(np.ceil(host_ratio * cap))
        inst = draft.model_copy(update={
            "tables": _in_pool_order(pool, others + grown),
            "topology": topology.model_copy(update={"memory_bytes": cap, "host_memory_bytes": host}),
        })
        plan = _witness(inst)
        if plan is not None:
            break
        cap = int(np.ceil(cap * SLACK_STEP))
    else:
        raise SuiteError(f"family {family.name!r}: no plan found for instance {index} after {MAX_MEMORY_STEPS} memory steps (a bug)")
    # the access histograms at the grown row counts: a Zipf pool's are derived again (more rows, the same lookups);
    # a measured pool's are kept (an approximation, said in the metadata). Bytes do not depend on them.
    grown_names = {t.name for t in grown}
    inst = inst.model_copy(update={"tables": [_regrown_access(t, pool.batch_size) if t.name in grown_names else t for t in inst.tables]})
    all_sizes = table_bytes_array(inst)
    size_of = {t.name: int(b) for t, b in zip(inst.tables, all_sizes)}
    pool_rows = {pool.tables[int(i)].name: pool.tables[int(i)].rows for i in huge_idx}
    name = f"{family.name}-{pool_label}-s{seed}-{index:04d}"
    return inst.model_copy(update={
        "name": name,
        "metadata": {
            **_common_metadata(family, pool, seed, index, pool_label),
            "memory_rule": (
                f"huge: HBM per device = max(largest other table, {TIGHT_SLACK} x other tables / (devices - {TIGHT_SLACK} x "
                f"min(sum of huge ratios, {HUGE_HBM_SHARE} x devices))), +{round((SLACK_STEP - 1) * 100)}% steps (huge tables "
                f"growing with it) until constructive_tiered_plan places every table ({steps} steps)"
            ),
            "memory_utilisation": round(float(all_sizes.sum()) / (cap * devices), 4),
            "host_memory_rule": (
                f"{hardware}'s host DRAM per GPU: {HOST_DRAM_PER_HBM[hardware]:.2f} x HBM per device" if hosted else "none"
            ),
            "huge_tables": [
                {"name": t.name, "ratio": round(size_of[t.name] / cap, 3), "pool_rows": pool_rows[t.name], "rows": t.rows,
                 "dim": t.dim, "access": "derived from zipf at the new rows" if t.access.zipf is not None else "the pool's histogram kept"}
                for t in grown
            ],
            "feasibility": _witness_summary(inst, plan),
            "paper_memory": family.nominal_memory,
        },
    })


def generate_tiered_instance(family: Family, pool: TablePool, seed: int, index: int, pool_label: str) -> Instance:
    """One `tiered` instance: all tables' bytes 1.5-4x the cluster's HBM, fitting with host memory.

    HBM per device = floor(total table bytes / (rho x devices)), rho uniform in TIERED_RATIO, so the tables need rho
    times the HBM there is (some must live in host memory: no HBM-only plan exists). Host memory per device =
    HOST_DRAM_PER_HBM[hardware] x that HBM (a100, h100: 3.2x; gh200: 5x), raised in steps of 2 % (rho stays) until
    constructive_tiered_plan places every table, the coldest in host memory and the hottest host tables behind HBM
    caches, so a plan with UVM shards exists within both tiers. Hardware: a100 / h100 / gh200 (0.35 / 0.35 / 0.3):
    NVLink-C2C makes host memory cheap on the GH200, so a good plan there puts more in it.
    """
    rng = np.random.default_rng([seed, index])
    names, weights = zip(*TIERED_HARDWARE)
    hardware = str(rng.choice(np.asarray(names), p=np.asarray(weights) / sum(weights)))
    devices = int(rng.choice(TIER_DEVICES))
    per_host = _tier_hosts(rng, devices, hardware)
    n_tables = devices * int(rng.integers(TIER_TABLES_PER_DEVICE[0], TIER_TABLES_PER_DEVICE[1] + 1))
    rho = float(rng.uniform(*TIERED_RATIO))
    chosen = np.sort(_draw(rng, pool, family.name, n_tables))
    tables = [_pool_table(pool, int(i), int(d)) for i, d in zip(chosen, _gpu_dims(rng, n_tables))]
    topology = Topology(num_devices=devices, devices_per_host=per_host, memory_bytes=1, hardware=hardware)
    draft = Instance(tables=tables, topology=topology, workload=Workload(batch_size=pool.batch_size))
    total = int(table_bytes_array(draft).sum())
    cap = max(1, int(total // (rho * devices)))
    host = int(np.ceil(HOST_DRAM_PER_HBM[hardware] * cap))
    for steps in range(MAX_MEMORY_STEPS):  # noqa: B007 - the count is reported after the loop
        inst = draft.model_copy(update={"topology": topology.model_copy(update={"memory_bytes": cap, "host_memory_bytes": host})})
        plan = _witness(inst)
        if plan is not None:
            break
        host = int(np.ceil(host * SLACK_STEP))
    else:
        raise SuiteError(f"family {family.name!r}: no plan found for instance {index} after {MAX_MEMORY_STEPS} memory steps (a bug)")
    name = f"{family.name}-{pool_label}-s{seed}-{index:04d}"
    return inst.model_copy(update={
        "name": name,
        "metadata": {
            **_common_metadata(family, pool, seed, index, pool_label),
            "memory_rule": f"tiered: HBM per device = total table bytes / ({rho:.4f} x devices), rho uniform in [{TIERED_RATIO[0]}, {TIERED_RATIO[1]}]",
            "memory_utilisation": round(total / (cap * devices), 4),
            "host_memory_rule": (
                f"{hardware}'s host DRAM per GPU: {HOST_DRAM_PER_HBM[hardware]:.2f} x HBM per device, "
                f"+{round((SLACK_STEP - 1) * 100)}% steps until constructive_tiered_plan places every table ({steps} steps)"
            ),
            "host_memory_utilisation": round(total / ((cap + host) * devices), 4),
            "feasibility": _witness_summary(inst, plan),
            "paper_memory": family.nominal_memory,
        },
    })


FAMILIES["huge"] = Family(
    "huge",
    "tables 2-20x a device's HBM: 1 to 3 huge tables (dims 64-256) among 4 to 8 tables per device like the other GPU "
    "families', 2 to 16 devices (a100 / h100, one host or several); no table-wise plan exists (they must be split by "
    "rows or put in host memory); host memory on the odd-indexed instances, none on the even-indexed ones (4 to 16 "
    "devices, the huge tables split by rows over the HBM)",
    _own_shape,
    GPU_DIMS,  # the huge tables' dims, HUGE_DIMS, are among them
    GPU_DIM_WEIGHTS,
    "a100/h100",
    "none (HBM sized by the tight rule with the huge tables at their share; host memory as the hardware has it)",
    make=generate_huge_instance,
)
FAMILIES["tiered"] = Family(
    "tiered",
    "all tables 1.5-4x the cluster's HBM, fitting with host memory (the hardware's host DRAM per GPU): some tables "
    "must be UVM; 4 to 8 tables per device, 2 to 16 devices (a100 / h100 / gh200, one host or several)",
    _own_shape,
    GPU_DIMS,
    GPU_DIM_WEIGHTS,
    "a100/h100/gh200",
    "none (HBM = total / (1.5 to 4 x devices); host memory as the hardware has it)",
    make=generate_tiered_instance,
)


# ---------------------------------------------------------------------------------------------------------------
# The `skewed` family: a few huge, heavily pooled tables among many small ones, on 8 to 512 devices.
#
# Real models are shaped like this (MLPerf's DLRMv2 has five 40M-row tables among 21 small ones; TorchRec's full-size
# Criteo DLRM five of 130-290M rows) and the synthetic pool's families are not: their tables are many and each small
# next to a device. Here the hot tables alone load the busiest device, so a good plan splits them (rows or columns)
# across many devices because that balances the load and shortens the all-to-all, not because memory forces it.
#
# One instance (seed, index):
# - devices SKEWED_DEVICES[index % 7] (each suite of 7 covers every size), hosts of SKEWED_HOST, a100 or h100;
# - SKEWED_HOT_TABLES hot tables: rows log-uniform in SKEWED_HOT_ROWS, pooling factor log-uniform in
#   SKEWED_HOT_POOLING, dims from SKEWED_HOT_DIMS, a Zipf exponent uniform in [0.4, 1.4] (the pool's range) from which
#   the histogram is derived at the instance's batch; each takes the name of a pool table, the rest of it is new;
# - SKEWED_SMALL_TABLES small tables drawn from the pool's tables below SKEWED_SMALL_MAX_ROWS rows, with their pooling
#   and access (moved to the instance's batch), dims as the GPU families';
# - batch = devices x a per-device batch from SKEWED_BATCH_PER_DEVICE;
# - memory per device: the hardware's HBM x a share uniform in SKEWED_HBM_SHARE (what a job leaves its embeddings).
#   When the tables need more than SKEWED_MAX_FILL of it, the hot tables shrink in proportion (rows never below the
#   range's floor; said in the metadata), and the instance is emitted only when constructive_tiered_plan places every
#   table, so each is feasible.

SKEWED_DEVICES = (8, 16, 32, 64, 128, 256, 512)
SKEWED_HOST = 8
SKEWED_HARDWARE = ("a100", "h100")
SKEWED_HOT_TABLES = (2, 6)
SKEWED_HOT_ROWS = (1e7, 1e8)
SKEWED_HOT_POOLING = (10.0, 100.0)
SKEWED_HOT_DIMS = (64, 128, 256)
SKEWED_HOT_DIM_WEIGHTS = (0.3, 0.5, 0.2)
SKEWED_ZIPF = (0.4, 1.4)
SKEWED_SMALL_TABLES = (20, 120)
SKEWED_SMALL_MAX_ROWS = 2_000_000
SKEWED_BATCH_PER_DEVICE = (512, 1024, 2048)
SKEWED_HBM_SHARE = (0.3, 0.6)
SKEWED_MAX_FILL = 0.6
SKEWED_SHRINK_STEP = 0.98
SKEWED_MAX_STEPS = 200


def generate_skewed_instance(family: Family, pool: TablePool, seed: int, index: int, pool_label: str) -> Instance:
    """One `skewed` instance of (seed, index), as the module docstring says."""

    rng = np.random.default_rng([seed, index])
    devices = SKEWED_DEVICES[index % len(SKEWED_DEVICES)]
    hardware = str(rng.choice(np.asarray(SKEWED_HARDWARE)))
    batch = devices * int(rng.choice(np.asarray(SKEWED_BATCH_PER_DEVICE)))
    share = float(rng.uniform(*SKEWED_HBM_SHARE))
    cap = int(PROFILES[hardware].memory_bytes * share)
    k = int(rng.integers(SKEWED_HOT_TABLES[0], SKEWED_HOT_TABLES[1] + 1))
    n_small = int(rng.integers(SKEWED_SMALL_TABLES[0], SKEWED_SMALL_TABLES[1] + 1))
    small_ids = np.flatnonzero([t.rows < SKEWED_SMALL_MAX_ROWS for t in pool.tables])
    if len(small_ids) < n_small + k:
        raise SuiteError(f"pool {pool.name!r} has {len(small_ids)} tables below {SKEWED_SMALL_MAX_ROWS:,} rows; family {family.name!r} needs {n_small + k}")
    chosen = rng.choice(small_ids, n_small + k, replace=False)
    hot_ids, small = chosen[:k], np.sort(chosen[k:])
    log_rows = rng.uniform(np.log(SKEWED_HOT_ROWS[0]), np.log(SKEWED_HOT_ROWS[1]), size=k)
    log_pf = rng.uniform(np.log(SKEWED_HOT_POOLING[0]), np.log(SKEWED_HOT_POOLING[1]), size=k)
    hot_dims = rng.choice(np.asarray(SKEWED_HOT_DIMS), size=k, p=np.asarray(SKEWED_HOT_DIM_WEIGHTS) / sum(SKEWED_HOT_DIM_WEIGHTS))
    zipf = rng.uniform(*SKEWED_ZIPF, size=k)
    small_dims = rng.choice(np.asarray(GPU_DIMS), size=n_small, p=np.asarray(GPU_DIM_WEIGHTS) / sum(GPU_DIM_WEIGHTS))
    ratio = batch / pool.batch_size
    smalls = []
    for i, d in zip(small, small_dims):
        src = pool.tables[int(i)]
        t = Table(name=src.name, rows=src.rows, dim=int(d), pooling_factor=src.pooling_factor,
                  access=AccessProfile(histogram=src.access.histogram, zipf=src.access.zipf))
        smalls.append(scale_table(t, ratio, None))
    drawn_rows = [int(round(float(np.exp(r)))) for r in log_rows]
    topology = Topology(num_devices=devices, devices_per_host=SKEWED_HOST, memory_bytes=cap, hardware=hardware)
    workload = Workload(batch_size=batch)

    def hot_tables(scale: float) -> list[Table]:
        out = []
        for i, rows, lpf, d, z in zip(hot_ids, drawn_rows, log_pf, hot_dims, zipf):
            r = max(int(SKEWED_HOT_ROWS[0]), int(rows * scale))
            pf = round(float(np.exp(lpf)), 3)
            h = histogram_from_zipf(r, pf, float(z), batch)
            out.append(Table(name=pool.tables[int(i)].name, rows=r, dim=int(d), pooling_factor=pf,
                             access=AccessProfile(histogram=round_histogram(h), zipf=round(float(z), 4))))
        return out

    def assemble(scale: float) -> Instance:
        return Instance(tables=_in_pool_order(pool, smalls + hot_tables(scale)), topology=topology, workload=workload)

    # shrink the hot tables (in proportion) until the model needs at most SKEWED_MAX_FILL of the memory
    total = float(table_bytes_array(assemble(1.0)).sum())
    scale = min(1.0, SKEWED_MAX_FILL * cap * devices / total)
    for steps in range(SKEWED_MAX_STEPS):  # noqa: B007 - the count is reported after the loop
        inst = assemble(scale)
        plan = _witness(inst)
        if plan is not None:
            break
        scale *= SKEWED_SHRINK_STEP
    else:
        raise SuiteError(f"family {family.name!r}: no plan found for instance {index} after {SKEWED_MAX_STEPS} shrink steps (a bug)")
    sizes = table_bytes_array(inst)
    drawn_of = {pool.tables[int(i)].name: rows for i, rows in zip(hot_ids, drawn_rows)}
    lookups = sum(t.pooling_factor * t.dim for t in inst.tables)
    return inst.model_copy(update={
        "name": f"{family.name}-{pool_label}-s{seed}-{index:04d}",
        "metadata": {
            **_common_metadata(family, pool, seed, index, pool_label),
            "memory_rule": f"skewed: {hardware}'s HBM x {share:.4f} per device (the embeddings' share)",
            "memory_utilisation": round(float(sizes.sum()) / (cap * devices), 4),
            "hot_tables": [
                {"name": t.name, "rows": t.rows, "drawn_rows": drawn_of[t.name], "dim": t.dim, "pooling_factor": t.pooling_factor,
                 "zipf": t.access.zipf, "lookup_share": round(t.pooling_factor * t.dim / lookups, 4)}
                for t in inst.tables if t.name in drawn_of
            ],
            "hot_rows_scale": round(scale, 6),
            "shrink_steps": steps,
            "feasibility": _witness_summary(inst, plan),
            "paper_memory": family.nominal_memory,
        },
    })


FAMILIES["skewed"] = Family(
    "skewed",
    "real models' shape: 2 to 6 hot tables (10^7-10^8 rows, pooling 10-100, dims 64-256) among 20 to 120 small pool "
    "tables (below 2M rows), on 8 to 512 devices in hosts of 8 (a100 / h100, the devices cycling through 8, 16, ..., "
    "512 with the index); memory: 30-60 % of the HBM per device",
    _own_shape,
    GPU_DIMS,
    GPU_DIM_WEIGHTS,
    "a100/h100",
    "none (the embeddings' share of a real device's HBM)",
    make=generate_skewed_instance,
)


FAMILIES["two-d"] = Family(
    "two-d",
    "2D sparse parallelism (two_d: group size auto): 1,024 or 4,096 H100s in NVLink hosts of 8, the pool's tables or "
    "MLPerf DLRMv2's (shardopt/data/two_d_family.py)",
    _own_shape,
    POOL_DIMS,
    POOL_DIM_WEIGHTS,
    "h100",
    "none (the embeddings' share of an H100's HBM)",
    make=generate_two_d_instance,
)


def tight_memory(sizes: np.ndarray, devices: int, slack: float = TIGHT_SLACK) -> tuple[int, int]:
    """(capacity per device, FFD steps taken) by the rule in this module's docstring (`slack`: its 1.10)."""
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))[::-1]
    cap = max(int(np.ceil(slack * sizes.sum() / devices)), int(sizes[0]))
    steps = 0
    while not first_fit_decreasing_fits(sizes, devices, cap):
        cap = int(np.ceil(cap * SLACK_STEP))
        steps += 1
    return cap, steps


def tight_memory_shares(sizes: np.ndarray, shares: np.ndarray, slack: float = TIGHT_SLACK) -> tuple[list[int], int]:
    """(capacity of each device, FFD steps taken) by the tight rule when devices hold different amounts (a job that
    mixes generations): capacities in proportion to `shares` (each kind's HBM), summing to `slack` x the total, the
    largest table fitting on the largest device, grown by SLACK_STEP until first-fit decreasing fits."""
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))[::-1]
    shares = np.asarray(shares, dtype=np.float64) / float(np.max(shares))
    unit = max(slack * sizes.sum() / shares.sum(), float(sizes[0]))
    steps = 0
    while True:
        caps = np.ceil(unit * shares).astype(np.int64)
        if first_fit_decreasing_fits(sizes, len(caps), caps):
            return [int(c) for c in caps], steps
        unit *= SLACK_STEP
        steps += 1


def first_fit_decreasing_fits(sizes_desc: np.ndarray, devices: int, capacity: int | np.ndarray) -> bool:
    free = np.broadcast_to(np.asarray(capacity, dtype=np.int64), (devices,)).copy()
    for s in sizes_desc:
        d = int(np.argmax(free))
        if free[d] < s:
            return False
        free[d] -= s
    return True


def generate_instance(family: Family, pool: TablePool, seed: int, index: int, pool_label: str,
                      memory_slack: float | None = None) -> Instance:
    """One instance of `family`. `memory_slack` (tight-rule families only) replaces the rule's TIGHT_SLACK: room a
    planner with a larger storage model needs (TorchRec's adds each shard's input and output buffers)."""
    if memory_slack is not None and family.make is not None:
        raise SuiteError(f"memory_slack: family {family.name!r} sizes its memory by its own rule, not the tight rule")
    if memory_slack is not None and not memory_slack >= 1.0:
        raise SuiteError(f"memory_slack: {memory_slack} must be >= 1 (capacity = slack x total bytes / devices)")
    slack = TIGHT_SLACK if memory_slack is None else float(memory_slack)
    if family.make is not None:
        return family.make(family, pool, seed, index, pool_label)
    rng = np.random.default_rng([seed, index])
    shape = family.shape(rng, index)
    n_tables = shape.tables
    n_pool = len(pool.tables)
    if n_tables > n_pool * family.copies:
        copies = f" (each at most {family.copies} times)" if family.copies > 1 else ""
        raise SuiteError(f"pool {pool.name!r} has {n_pool} tables{copies}; family {family.name!r} needs {n_tables}")
    chosen = np.sort(rng.choice(n_pool * family.copies, n_tables, replace=False))
    weights = None if family.dim_weights is None else np.asarray(family.dim_weights) / np.sum(family.dim_weights)
    dims = rng.choice(np.asarray(family.dims), size=n_tables, p=weights)
    drawn = [(pool.tables[i % n_pool], f"-c{i // n_pool}" if i >= n_pool else "") for i in chosen]  # (a copy's name suffix)
    tables = [
        Table(
            name=src.name + copy,
            rows=src.rows if family.max_rows is None else min(src.rows, family.max_rows),
            dim=int(d),
            pooling_factor=src.pooling_factor,
            access=AccessProfile(histogram=src.access.histogram, zipf=src.access.zipf),
        )
        for (src, copy), d in zip(drawn, dims)
    ]
    batch = pool.batch_size if family.batch_rule is None else family.batch_rule(tables, shape.devices)
    if batch != pool.batch_size:  # the histograms were measured at the pool's batch: move them with it
        tables = [scale_table(t, batch / pool.batch_size, None) for t in tables]
    workload = Workload(batch_size=batch)
    draft = Instance(
        tables=tables,
        topology=Topology(num_devices=shape.devices, devices_per_host=shape.devices_per_host, memory_bytes=1, hardware=family.hardware,
                          levels=None if family.levels is None else family.levels(shape),
                          device_hardware=None if family.device_hardware is None else family.device_hardware(shape)),
        workload=workload,
    )
    sizes = table_bytes_array(draft)
    if family.device_hardware is None:
        cap, steps = tight_memory(sizes, shape.devices, slack)
    else:
        cap, steps = tight_memory_shares(sizes, [PROFILES[k].memory_bytes for k in draft.topology.hardware_kinds()], slack)
    name = f"{family.name}-{pool_label}-s{seed}-{index:04d}" + (f"-m{slack:g}" if memory_slack is not None else "")
    return draft.model_copy(
        update={
            "name": name,
            "topology": draft.topology.model_copy(update={"memory_bytes": cap}),
            "metadata": {
                **_common_metadata(family, pool, seed, index, pool_label),
                "memory_rule": (f"tight: {slack:g} x total / devices" if family.device_hardware is None else
                                f"tight: {slack:g} x total, shared out in proportion to each kind's HBM")
                               + f", +{round((SLACK_STEP - 1) * 100)}% steps until FFD fits ({steps} steps)",
                "memory_utilisation": round(float(sizes.sum()) / (sum(cap) if isinstance(cap, list) else cap * shape.devices), 4),
                "paper_memory": family.nominal_memory,
                **({"rows_capped_at": family.max_rows} if family.max_rows is not None else {}),
                **({"batch_rule": f"{family.batch_rule.__name__}: batch {batch} (pool's {pool.batch_size})"}
                   if family.batch_rule is not None else {}),
            },
        }
    )


def generate_suite(family_name: str, pool: TablePool, count: int, seed: int, pool_label: str, out_dir: Path, command: str = "",
                   memory_slack: float | None = None) -> list[Path]:
    """Write `count` instances and a manifest into `out_dir`; return the instance paths."""
    family = FAMILIES.get(family_name)
    if family is None:
        raise SuiteError(f"family: unknown family {family_name!r} (known: {', '.join(FAMILIES)})")
    if count <= 0:
        raise SuiteError(f"count: {count} must be >= 1")
    generate_instance(family, pool, seed, 0, pool_label, memory_slack)  # a bad request fails before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, hashes = [], {}
    for i in range(count):
        inst = generate_instance(family, pool, seed, i, pool_label, memory_slack)
        path = out_dir / f"{inst.name}.json"
        text = dumps(inst) + "\n"
        path.write_text(text)
        paths.append(path)
        hashes[path.name] = hashlib.sha256(text.encode()).hexdigest()
    manifest = {
        "kind": "suite",
        "family": family.name,
        "description": family.description,
        "count": count,
        "seed": seed,
        "pool": pool_label,
        "pool_name": pool.name,
        "pool_synthetic": pool.synthetic,
        **({"memory_slack": memory_slack} if memory_slack is not None else {}),
        "command": command,
        "instances": hashes,
    }
    (out_dir / SUITE_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return paths
