"""Which plans beyond table- and column-wise HBM shards the relaxation covers, and what it charges them:
data-parallel replicas (`ReplicaTerms`, `replicable`) and shards in host memory (`host_tier_reason`, `host_tables`).

Why these two and not row splits: a replica is a load every device carries whatever else it holds (a constant per
device, priced once per table from the model's own state of the replica), and a shard in host memory costs at
least what the same shard costs in HBM when the host link is no faster than HBM (proof: docs/analytic-bound.md,
"Replicas and host memory"), so both enter the relaxation without new nonlinear terms. A row split changes every
cost term's scale with the split's height and adds a collective of its own; it stays outside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.analytic import MS, STATE_BWD_L2, STATE_BWD_STREAM, STATE_FWD_STREAM, STATE_GATHER, STATE_REUSE, BoundAnalytic
from shardopt.core.ir import Instance, Kernel
from shardopt.core.memory import table_bytes
from shardopt.core.sharding_types import COLUMN_WISE, DATA_PARALLEL, TABLE_WISE


@dataclass(frozen=True)
class ReplicaTerms:
    """Per table, what a data-parallel replica charges every device (occupancy 1, as for shards): its forward kernel
    with every re-read served by L2 (no cache competition can do better), its backward kernel (the dense gradient
    and the optimizer step over every row), its HBM bytes, and its all-reduce (backward comm)."""

    allowed: np.ndarray  # [T] bool: some plan that meets the placement constraints may replicate t
    forced: np.ndarray  # [T] bool: every such plan does (its sharding types leave only data_parallel)
    fwd_ms: np.ndarray  # [T]
    bwd_ms: np.ndarray  # [T]
    mem: np.ndarray  # [T] bytes on every device
    allreduce_ms: np.ndarray  # [T] backward comm on every device


def replica_terms(bm: BoundAnalytic) -> ReplicaTerms:
    """`ReplicaTerms` from the analytic model's own state of each table's replica (`BoundAnalytic.shard_states` with
    batch fraction 1/D), turned into time as `costmodels.analytic.device_compute_costs` does at occupancy 1."""
    inst = bm.instance
    n = len(inst.tables)
    D = bm.num_devices
    p = bm.profile
    states = bm.shard_states(np.arange(n), bm.table_dims, np.ones(n), np.full(n, 1.0 / D))
    hbm_bw = p.hbm_bandwidth * p.gather_efficiency
    l2_bw = p.hbm_bandwidth * p.l2_bandwidth_ratio
    kappa = max(0.0, 1.0 / hbm_bw - 1.0 / l2_bw)
    reuse = states[:, STATE_REUSE].sum(axis=1)
    fwd = ((states[:, STATE_GATHER] + states[:, STATE_FWD_STREAM]) / hbm_bw - kappa * reuse) * MS
    bwd = (states[:, STATE_BWD_STREAM] / hbm_bw + states[:, STATE_BWD_L2] / l2_bw) / p.bwd_bandwidth_factor * MS
    mem = np.array([float(table_bytes(inst, t)) for t in inst.tables])
    allowed, forced = replicable(inst, mem)
    comm = np.array([bm.replicated_comm(t) if allowed[t] else 0.0 for t in range(n)])
    return ReplicaTerms(allowed=allowed, forced=forced, fwd_ms=np.maximum(fwd, 0.0), bwd_ms=bwd, mem=mem, allreduce_ms=comm)


def replicable(instance: Instance, table_mem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([T] may be replicated, [T] must be): a replica is the whole table in HBM on every device, so it needs room
    on the smallest device, its constraint's sharding types to include data_parallel, its kernels to include fused,
    its pins (if any) to name every device, and no separate group (its partners would then fit nowhere)."""
    n = len(instance.tables)
    allowed = table_mem <= min(instance.topology.capacities())
    forced = np.zeros(n, dtype=bool)
    c = instance.constraints
    if c is None:
        return allowed, forced
    index = instance.table_index()
    D = instance.topology.num_devices
    for tc in c.tables:
        t = index[tc.table]
        types = tc.sharding_types
        if types is not None and DATA_PARALLEL not in types:
            allowed[t] = False
        if tc.kernels is not None and Kernel.fused not in tc.kernels:
            allowed[t] = False
        if tc.devices is not None and len(set(tc.devices) & set(range(D))) < D:
            allowed[t] = False
        if types is not None and allowed[t] and TABLE_WISE not in types and COLUMN_WISE not in types:
            forced[t] = True
    for group in c.separate:
        if len(group) > 1:
            for name in group:
                allowed[index[name]] = False
    return allowed, forced & allowed


def host_tier_reason(bm: BoundAnalytic) -> str | None:
    """Why shards in host memory are outside the bound on this instance, or None when they are covered: the
    relaxation charges such a shard what it would cost in HBM, which is a lower bound only while every byte the host
    link carries instead of HBM costs at least as much (host link <= HBM gather bandwidth, and <= half of it x the
    backward factor, since a backward byte over the link replaces a read and a write in HBM)."""
    if not bm.instance.topology.has_host_memory:
        return "the topology has no host memory"
    p = bm.profile
    hbm_bw = p.hbm_bandwidth * p.gather_efficiency
    link = p.host_link_bandwidth
    if link > hbm_bw or 2 * link > hbm_bw * p.bwd_bandwidth_factor:
        return (f"the host link ({link / 1e9:.1f} GB/s) is faster than the profile's HBM gather bandwidth allows the proof "
                f"({hbm_bw / 1e9:.1f} GB/s, backward factor {p.bwd_bandwidth_factor:g})")
    return None


def host_tables(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    """([T] may have shards in host memory, [T] must: its kernels leave out fused)."""
    n = len(instance.tables)
    may = np.ones(n, dtype=bool)
    must = np.zeros(n, dtype=bool)
    c = instance.constraints
    if c is None:
        return may, must
    index = instance.table_index()
    for tc in c.tables:
        if tc.kernels is None:
            continue
        t = index[tc.table]
        may[t] = any(k.in_host_memory for k in tc.kernels)
        must[t] = Kernel.fused not in tc.kernels
    return may, must
