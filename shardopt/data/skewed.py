"""The `skewed` family: a few huge, heavily pooled tables among many small ones, on 8 to 512 devices.

Real models are shaped like this (MLPerf's DLRMv2 has five 40M-row tables among 21 small ones; TorchRec's full-size
Criteo DLRM five of 130-290M rows) and the synthetic pool's families are not: their tables are many and each small
next to a device. Here the hot tables alone load the busiest device, so a good plan splits them (rows or columns)
across many devices because that balances the load and shortens the all-to-all, not because memory forces it.

One instance (seed, index):
- devices SKEWED_DEVICES[index % 7] (each suite of 7 covers every size), hosts of SKEWED_HOST, a100 or h100;
- SKEWED_HOT_TABLES hot tables: rows log-uniform in SKEWED_HOT_ROWS, pooling factor log-uniform in
  SKEWED_HOT_POOLING, dims from SKEWED_HOT_DIMS, a Zipf exponent uniform in [0.4, 1.4] (the pool's range) from which
  the histogram is derived at the instance's batch; each takes the name of a pool table, the rest of it is new;
- SKEWED_SMALL_TABLES small tables drawn from the pool's tables below SKEWED_SMALL_MAX_ROWS rows, with their pooling
  and access (moved to the instance's batch), dims as the GPU families';
- batch = devices x a per-device batch from SKEWED_BATCH_PER_DEVICE;
- memory per device: the hardware's HBM x a share uniform in SKEWED_HBM_SHARE (what a job leaves its embeddings).
  When the tables need more than SKEWED_MAX_FILL of it, the hot tables shrink in proportion (rows never below the
  range's floor; said in the metadata), and the instance is emitted only when constructive_tiered_plan places every
  table, so each is feasible.
"""

from __future__ import annotations

import numpy as np

from shardopt.core.hardware import PROFILES
from shardopt.core.ir import AccessProfile, Instance, Table, Topology, Workload
from shardopt.core.memory import table_bytes_array
from shardopt.core.stats import histogram_from_zipf
from shardopt.data.pools import TablePool, round_histogram
from shardopt.data.scale import scale_table

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


def generate_skewed_instance(family, pool: TablePool, seed: int, index: int, pool_label: str) -> Instance:
    """One `skewed` instance of (seed, index), as the module docstring says."""
    from shardopt.data.suites import (GPU_DIM_WEIGHTS, GPU_DIMS, SuiteError, _common_metadata, _in_pool_order,
                                      _witness, _witness_summary)

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
    for steps in range(SKEWED_MAX_STEPS):
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
