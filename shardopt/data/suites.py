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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardopt.core.ir import AccessProfile, Instance, Table, Topology, Workload, dumps
from shardopt.core.memory import table_bytes_array
from shardopt.data.pools import TablePool
from shardopt.data.scale import scale_table

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
    "cpu": Family(
        "cpu",
        "CPU scale: 2 to 8 devices with 4 to 8 tables each, dims from {8,...,128}, rows capped at 50,000 and the batch "
        "chosen so that a device times in about 5-50 ms on fbgemm's CPU TBE (judge it at its own workload)",
        _cpu_shape,
        (8, 16, 32, 64, 128),
        (0.15, 0.25, 0.25, 0.2, 0.15),
        "v100",
        "none (a CPU-scale family; tight rule)",
        max_rows=CPU_MAX_ROWS,
        batch_rule=cpu_batch,
    ),
}


class SuiteError(ValueError):
    """Bad generation request: unknown family, bad count, pool too small."""


def tight_memory(sizes: np.ndarray, devices: int) -> tuple[int, int]:
    """(capacity per device, FFD steps taken) by the rule in this module's docstring."""
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))[::-1]
    cap = max(int(np.ceil(TIGHT_SLACK * sizes.sum() / devices)), int(sizes[0]))
    steps = 0
    while not first_fit_decreasing_fits(sizes, devices, cap):
        cap = int(np.ceil(cap * SLACK_STEP))
        steps += 1
    return cap, steps


def first_fit_decreasing_fits(sizes_desc: np.ndarray, devices: int, capacity: int) -> bool:
    free = np.full(devices, capacity, dtype=np.int64)
    for s in sizes_desc:
        d = int(np.argmax(free))
        if free[d] < s:
            return False
        free[d] -= s
    return True


def generate_instance(family: Family, pool: TablePool, seed: int, index: int, pool_label: str) -> Instance:
    rng = np.random.default_rng([seed, index])
    shape = family.shape(rng, index)
    n_tables = shape.tables
    if n_tables > len(pool.tables):
        raise SuiteError(f"pool {pool.name!r} has {len(pool.tables)} tables; family {family.name!r} needs {n_tables}")
    chosen = np.sort(rng.choice(len(pool.tables), n_tables, replace=False))
    weights = None if family.dim_weights is None else np.asarray(family.dim_weights) / np.sum(family.dim_weights)
    dims = rng.choice(np.asarray(family.dims), size=n_tables, p=weights)
    tables = [
        Table(
            name=pool.tables[i].name,
            rows=pool.tables[i].rows if family.max_rows is None else min(pool.tables[i].rows, family.max_rows),
            dim=int(d),
            pooling_factor=pool.tables[i].pooling_factor,
            access=AccessProfile(histogram=pool.tables[i].access.histogram, zipf=pool.tables[i].access.zipf),
        )
        for i, d in zip(chosen, dims)
    ]
    batch = pool.batch_size if family.batch_rule is None else family.batch_rule(tables, shape.devices)
    if batch != pool.batch_size:  # the histograms were measured at the pool's batch: move them with it
        tables = [scale_table(t, batch / pool.batch_size, None) for t in tables]
    workload = Workload(batch_size=batch)
    draft = Instance(
        tables=tables,
        topology=Topology(num_devices=shape.devices, devices_per_host=shape.devices_per_host, memory_bytes=1, hardware=family.hardware),
        workload=workload,
    )
    sizes = table_bytes_array(draft)
    cap, steps = tight_memory(sizes, shape.devices)
    name = f"{family.name}-{pool_label}-s{seed}-{index:04d}"
    return draft.model_copy(
        update={
            "name": name,
            "topology": draft.topology.model_copy(update={"memory_bytes": cap}),
            "metadata": {
                "suite": family.name,
                "family": family.name,
                "seed": seed,
                "index": index,
                "pool": pool_label,
                "pool_name": pool.name,
                "pool_synthetic": pool.synthetic,
                "memory_rule": f"tight: {TIGHT_SLACK} x total / devices, +{round((SLACK_STEP - 1) * 100)}% steps until FFD fits ({steps} steps)",
                "memory_utilisation": round(float(sizes.sum()) / (cap * shape.devices), 4),
                "paper_memory": family.nominal_memory,
                **({"rows_capped_at": family.max_rows} if family.max_rows is not None else {}),
                **({"batch_rule": f"{family.batch_rule.__name__}: batch {batch} (pool's {pool.batch_size})"}
                   if family.batch_rule is not None else {}),
            },
        }
    )


def generate_suite(family_name: str, pool: TablePool, count: int, seed: int, pool_label: str, out_dir: Path, command: str = "") -> list[Path]:
    """Write `count` instances and a manifest into `out_dir`; return the instance paths."""
    family = FAMILIES.get(family_name)
    if family is None:
        raise SuiteError(f"family: unknown family {family_name!r} (known: {', '.join(FAMILIES)})")
    if count <= 0:
        raise SuiteError(f"count: {count} must be >= 1")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, hashes = [], {}
    for i in range(count):
        inst = generate_instance(family, pool, seed, i, pool_label)
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
        "command": command,
        "instances": hashes,
    }
    (out_dir / SUITE_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return paths
