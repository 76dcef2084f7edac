"""Which plans beyond table- and column-wise HBM shards the relaxation covers, and what it charges them:
data-parallel replicas (`ReplicaTerms`, `replicable`) and shards in host memory (`host_tier_reason`, `host_tables`).

and row splits (`RowTerms`, `row_split_kinds`).

Why they enter the relaxation without new nonlinear terms (proofs: docs/analytic-bound.md, "Replicas, host memory
and row splits"): a replica is a load every device carries whatever else it holds (a constant per device, priced
once per table from the model's own state of the replica); a shard in host memory costs at least what the same
shard costs in HBM when the host link is no faster than HBM; and a row block of a share rho of a table's rows costs
a per-block constant (its bags: indices, the pooled output, its gradient) plus rho times the rest, every term of the
model being linear in the block's lookups and unique rows, which are rho times the table's. What a row split adds to
the collectives (its own all-to-all, or within one host the hierarchical ones) is linear in which devices hold
blocks. Row x column blocks (grid) stay outside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.analytic import (
    INDEX_BYTES,
    MS,
    OUTPUT_BYTES,
    STATE_BAGS,
    STATE_BWD_L2,
    STATE_BWD_STREAM,
    STATE_FOOT,
    STATE_FWD_STREAM,
    STATE_GATHER,
    STATE_REUSE,
    BoundAnalytic,
    sector_bytes,
)
from shardopt.core.ir import Instance, Kernel
from shardopt.core.memory import table_bytes_array
from shardopt.core.sharding_types import COLUMN_WISE, DATA_PARALLEL, ROW_WISE, TABLE_ROW_WISE, TABLE_WISE, allowed_types
from solvers.bound.terms import _VERIFY_RTOL, BoundError, ShardTerms
from solvers.placement.rules import TierRules


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
    mem = table_bytes_array(inst).astype(np.float64)
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
        types = allowed_types(instance.topology, tc.sharding_types)
        if types is not None and DATA_PARALLEL not in types:
            allowed[t] = False
        if tc.kernels is not None and Kernel.fused not in tc.kernels:
            allowed[t] = False
        if tc.devices is not None and len(set(tc.devices) & set(range(D))) < D:
            allowed[t] = False
        if types is not None and allowed[t] and not set(types) & {TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE}:
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
    """([T] may have shards in host memory, [T] must: its kernels leave out fused), as the tiering layouts read the
    constraints (`TierRules`)."""
    rules = TierRules(instance)
    n = len(instance.tables)
    may = np.array([rules.allows(t, Kernel.fused_uvm) or rules.allows(t, Kernel.fused_uvm_caching) for t in range(n)], dtype=bool)
    must = np.array([rules.host_only(t) for t in range(n)], dtype=bool)
    return may, must


@dataclass(frozen=True)
class RowTerms:
    """Per table, what a row block (the table's full width, a share rho of its rows) charges its device: per block
    (its bags: indices and offsets, the pooled output and its gradient) and per unit of rho (lookups, sorting, the
    unique rows' update, the gathered sectors); its sector bytes per row (the cache-hit rows take `sb rho` as a
    shard's `s`) and its bytes per unit of rho (weights and optimizer state)."""

    rw: np.ndarray  # [T] bool: a plan may split t by rows over devices (TorchRec's row_wise, or a partial host)
    twrw: np.ndarray  # [T] bool: ... over every device of one host of several (table_row_wise: the hierarchical collectives)
    fwd_block_ms: np.ndarray
    fwd_rho_ms: np.ndarray
    bwd_block_ms: np.ndarray
    bwd_rho_ms: np.ndarray
    sb: np.ndarray  # [T] sector bytes of a full-width row
    mem_rho: np.ndarray  # [T] bytes of the whole table (weights + state), x rho for a block
    mem_col_rho: np.ndarray  # [T] of those, the ones a block in host memory moves there (weights, adam's moments)


def row_terms(bm: BoundAnalytic, terms: ShardTerms) -> RowTerms:
    """`RowTerms` from the shard terms (a full-width shard's per-shard constants split into the part that scales
    with the batch's bags and the part that scales with lookups), checked against the model's own row blocks."""
    p = bm.profile
    batch = float(bm.batch)
    hbm_bw = p.hbm_bandwidth * p.gather_efficiency
    bwd_scale = MS / hbm_bw / p.bwd_bandwidth_factor
    dims = terms.dims
    sb = sector_bytes(dims, terms.elem, terms.sector)
    bag_fwd = batch * INDEX_BYTES / hbm_bw * MS
    bag_bwd_col = batch * OUTPUT_BYTES * bwd_scale
    rw, twrw = row_split_kinds(bm.instance)
    out = RowTerms(
        rw=rw, twrw=twrw,
        fwd_block_ms=bag_fwd + terms.fwd_col_ms * dims,
        fwd_rho_ms=terms.fwd_fixed_ms - bag_fwd + terms.fwd_sb_ms * sb,
        bwd_block_ms=bag_bwd_col * dims,
        bwd_rho_ms=terms.bwd_fixed_ms + (terms.bwd_col_ms - bag_bwd_col) * dims + terms.bwd_sb_ms * sb,
        sb=sb,
        mem_rho=terms.mem_col * dims + terms.mem_fixed,
        mem_col_rho=terms.mem_col * dims,
    )
    _verify_row_terms(bm, terms, out)
    return out


def _verify_row_terms(bm: BoundAnalytic, terms: ShardTerms, rows: RowTerms) -> None:
    """Refuse to bound a model whose row blocks the terms do not reproduce: every table at row shares 1/7, 1/2 and
    1, alone on a device with occupancy forced to 1 and no cache, must cost block + rho x per-rho (before the
    floor), and its cache footprint and reuse must be rho x the whole table's."""
    n = len(terms.dims)
    for rho in (1.0 / 7.0, 0.5, 1.0):
        states = bm.shard_states(np.arange(n), terms.dims, np.full(n, rho), np.ones(n))
        whole = bm.shard_states(np.arange(n), terms.dims, np.ones(n), np.ones(n))
        scale = np.abs(whole).max(axis=1, keepdims=True)
        ok = bool(np.all(np.abs(states[:, STATE_FOOT] - rho * whole[:, STATE_FOOT]) <= _VERIFY_RTOL * scale))
        ok &= bool(np.all(np.abs(states[:, STATE_REUSE] - rho * whole[:, STATE_REUSE]) <= _VERIFY_RTOL * scale))
        st = states.copy()
        st[:, STATE_FOOT] = 0.0
        st[:, STATE_BAGS] = bm.profile.sm_count * bm.profile.warps_per_sm
        model = bm.compute_costs(st)
        launch = bm.profile.launch_overhead_s * MS
        fwd = np.maximum(terms.min_kernel_ms, rows.fwd_block_ms + rho * rows.fwd_rho_ms) + launch
        bwd = np.maximum(terms.min_kernel_ms, rows.bwd_block_ms + rho * rows.bwd_rho_ms) + 3 * launch
        ok &= np.allclose(model[:, 0], fwd, rtol=_VERIFY_RTOL, atol=1e-15) and np.allclose(model[:, 1], bwd, rtol=_VERIFY_RTOL, atol=1e-15)
        if not ok:
            raise BoundError("the analytic cost model's row blocks no longer match the bound's coefficients (solvers/bound/coverage.py): "
                             "refusing to report a bound of a model it does not reproduce")


def row_split_kinds(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    """([T] may be split by rows priced as the direct collective, [T] ... as the hierarchical ones): the first
    where its sharding types include row_wise or table_row_wise (a table_row_wise split over part of a host is priced
    as the direct one), the second where they include table_row_wise and the cluster has several hosts of several
    devices (the layout `costmodels.hierarchical.in_host_row_split` prices so). Any kernel may hold a row block."""
    n = len(instance.tables)
    topo = instance.topology
    rw = np.ones(n, dtype=bool)
    twrw = np.full(n, topo.num_intra_groups >= 2 and topo.intra_group_size >= 2)  # (hosts, or NVLink domains of hosts)
    c = instance.constraints
    if c is None:
        return rw, twrw
    index = instance.table_index()
    for tc in c.tables:
        t = index[tc.table]
        types = allowed_types(instance.topology, tc.sharding_types)
        if types is not None:
            rw[t] &= bool({ROW_WISE, TABLE_ROW_WISE} & set(types))
            twrw[t] &= TABLE_ROW_WISE in types
    return rw, twrw
