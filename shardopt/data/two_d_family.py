"""The `two-d` family: jobs of 1,024 and 4,096 H100s trained with 2D sparse parallelism (an instance's `two_d`
section, group size `auto`), on the tables of the production pool and of MLPerf DLRMv2.

Why these: 2D parallelism is how such clusters are trained (DMPCollection, TorchRec 1.8), and the two table sets are
the two shapes that decide the group size - many small tables (the pool: the group's all-to-all dominates) and a few
huge ones (DLRMv2's five 40M-row tables: the replica sync of 105 GB dominates). Instance i: 1,024 devices for even i,
4,096 for odd; the pool's tables for i % 4 < 2, DLRMv2's (instances/real/mlperf-dlrmv2-512xh100.json, from the MLPerf
reference's configuration) otherwise. Per instance the seed draws the batch per GPU, the embeddings' share of each
H100's 80 GB, the sync interval, DMPCollection's layout and, for the pool, each table's dim. Hosts of 8 H100s, each
an NVLink domain (the profile's NVLink bandwidth), the network between them (its bandwidth and start-up).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardopt.core.hardware import PROFILES
from shardopt.core.ir import AccessProfile, Instance, Table, Topology, TopologyLevel, Workload, load_instance
from shardopt.data.pools import REPO_INSTANCES, TablePool
from shardopt.data.scale import scale_table

DLRMV2_INSTANCE = REPO_INSTANCES / "real" / "mlperf-dlrmv2-512xh100.json"
TWO_D_WORLDS = (1024, 4096)
TWO_D_HOST = 8
TWO_D_HARDWARE = "h100"
TWO_D_BATCH_PER_GPU = (256, 512, 1024)
TWO_D_HBM_SHARE = (0.3, 0.6)  # the embeddings' share of a device's HBM
TWO_D_SYNC_INTERVALS = (10, 100, 1000)
TWO_D_LAYOUT_WEIGHTS = {"alternating": 0.75, "contiguous": 0.25}
POOL_DIMS, POOL_DIM_WEIGHTS = (16, 32, 64, 128, 256), (0.3, 0.3, 0.2, 0.15, 0.05)  # the production family's


def _levels(devices: int) -> list[TopologyLevel]:
    p = PROFILES[TWO_D_HARDWARE]
    return [TopologyLevel(name="nvlink", devices=TWO_D_HOST, bandwidth=p.nvlink_bandwidth),
            TopologyLevel(name="network", devices=devices, bandwidth=p.network_bandwidth, latency_s=p.network_latency_s)]


def _pool_tables(rng: np.random.Generator, pool: TablePool, batch: int) -> list[Table]:
    dims = rng.choice(np.asarray(POOL_DIMS), size=len(pool.tables), p=np.asarray(POOL_DIM_WEIGHTS) / sum(POOL_DIM_WEIGHTS))
    ratio = batch / pool.batch_size
    out = []
    for src, d in zip(pool.tables, dims):
        t = Table(name=src.name, rows=src.rows, dim=int(d), pooling_factor=src.pooling_factor,
                  access=AccessProfile(histogram=src.access.histogram, zipf=src.access.zipf))
        out.append(scale_table(t, ratio, None))
    return out


def generate_two_d_instance(family: Any, pool: TablePool, seed: int, index: int, pool_label: str) -> Instance:
    """One `two-d` instance of (seed, index), as the module docstring says."""
    rng = np.random.default_rng([seed, index])
    devices = TWO_D_WORLDS[index % 2]
    dlrm = index % 4 >= 2
    batch = devices * int(rng.choice(np.asarray(TWO_D_BATCH_PER_GPU)))
    share = float(rng.uniform(*TWO_D_HBM_SHARE))
    interval = int(rng.choice(np.asarray(TWO_D_SYNC_INTERVALS)))
    layouts = list(TWO_D_LAYOUT_WEIGHTS)
    layout = str(rng.choice(np.asarray(layouts), p=np.asarray([TWO_D_LAYOUT_WEIGHTS[k] for k in layouts])))
    if dlrm:
        source = load_instance(DLRMV2_INSTANCE)
        tables = [t.model_copy(update={"pooling_factor": t.pooling_factor}) for t in source.tables]
        optimizer, tables_from = source.workload.optimizer, f"MLPerf DLRMv2 (instances/real/{DLRMV2_INSTANCE.name})"
    else:
        tables = _pool_tables(rng, pool, batch)
        optimizer, tables_from = Workload.model_fields["optimizer"].default, f"pool {pool.name} ({pool_label})"
    cap = int(PROFILES[TWO_D_HARDWARE].memory_bytes * share)
    topology = Topology(num_devices=devices, devices_per_host=TWO_D_HOST, memory_bytes=cap, hardware=TWO_D_HARDWARE,
                        levels=_levels(devices))
    name = f"{family.name}-{pool_label}-s{seed}-{index:04d}"
    return Instance.model_validate({
        "name": name, "tables": [t.model_dump(mode="json", exclude_none=True) for t in tables],
        "topology": topology.model_dump(mode="json", exclude_none=True),
        "workload": {"batch_size": batch, "optimizer": optimizer.value if hasattr(optimizer, "value") else optimizer},
        "two_d": {"group_size": "auto", "sync_interval": interval, "layout": layout},
        "metadata": {"suite": family.name, "family": family.name, "seed": seed, "index": index, "pool": pool_label,
                     "pool_name": pool.name, "pool_synthetic": pool.synthetic, "tables_from": tables_from,
                     "memory_rule": f"two-d: {TWO_D_HARDWARE}'s HBM x {share:.4f} per device (the embeddings' share)",
                     "paper_memory": family.nominal_memory},
    })
