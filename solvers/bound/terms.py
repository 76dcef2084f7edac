"""The bound's per-table coefficients (`ShardTerms`): what one shard of each table adds to its device, split into
the parts the relaxation can express linearly, derived from the analytic model's constants and then *checked*
against `BoundAnalytic.shard_states` for every table at every shard width (`_verify_terms`).

The leaf of the package: every other module of solvers.bound imports from it, it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.analytic import (
    BWD_LAUNCHES,
    CACHE_SHARE,
    INDEX_BYTES,
    MS,
    OUTPUT_BYTES,
    SORT_BYTES_PER_LOOKUP,
    STATE_BAGS,
    STATE_FOOT,
    STATE_GATHER,
    STATE_REUSE,
    BoundAnalytic,
    mean_count,
    sector_bytes,
)
from shardopt.core.ir import DIM_ALIGNMENT, Optimizer

_VERIFY_RTOL = 1e-9


class BoundError(ValueError):
    """A request the bound cannot serve (a cost model other than the analytic one, an unknown backend)."""


# ---------------------------------------------------------------------------------------------------------------
# per-table coefficients


@dataclass(frozen=True)
class ShardTerms:
    """What one shard of each table adds to its device, split into what the relaxation can express linearly.

    For a shard of table t, `w` columns wide, with `sb = ceil(w e / 32) 32` sector bytes per row read, the analytic
    state is (docs/analytic-model.md):  foot_b = foot_per_sb[t, b] sb, reuse_b = reuse_per_sb[t, b] sb,
    gather = lookups sb, fwd_stream = fwd0 + fwd1 w, bwd_stream = bwd0 + bwd1 w + bwd2 sb, bwd_l2 = l2_1 w,
    bags = batch, shards = 1. The *_ms arrays turn those bytes into kernel milliseconds (occupancy 1).
    """

    dims: np.ndarray  # [T] columns
    elem: np.ndarray  # [T] bytes per element
    fwd_fixed_ms: np.ndarray  # [T] per shard (indices and offsets)
    fwd_col_ms: np.ndarray  # [T] per column (pooled output write)
    fwd_sb_ms: np.ndarray  # [T] per sector byte of row (gather, every lookup from HBM)
    bwd_fixed_ms: np.ndarray  # [T] per shard (sort; rowwise_adagrad's state sector per unique row)
    bwd_col_ms: np.ndarray  # [T] per column (output gradient, adam's moments, on-chip accumulation)
    bwd_sb_ms: np.ndarray  # [T] per sector byte (unique-row weight read + write)
    foot_per_sb: np.ndarray  # [T, 17] cache footprint of each bin per sector byte of row width (hottest first)
    reuse_per_sb: np.ndarray  # [T, 17] re-read bytes of each bin per sector byte
    mem_col: np.ndarray  # [T] bytes per column (weights, adam moments)
    mem_fixed: np.ndarray  # [T] bytes per shard (rowwise_adagrad: one fp32 per row)
    kappa_ms: float  # ms of forward time saved per byte served by L2 instead of HBM
    cache_bytes: float  # L2 share for embedding rows
    launch_ms: float  # launches of one busy device (fwd + bwd)
    min_kernel_ms: float
    sector: int


def shard_terms(bm: BoundAnalytic) -> ShardTerms:
    """The coefficients of `ShardTerms` from the analytic model's constants (checked by `_verify_terms`)."""
    p = bm.profile
    inst = bm.instance
    n = len(inst.tables)
    batch = float(bm.batch)
    hbm_bw = p.hbm_bandwidth * p.gather_efficiency
    l2_bw = p.hbm_bandwidth * p.l2_bandwidth_ratio
    bwd_scale = MS / hbm_bw / p.bwd_bandwidth_factor
    probe = bm.shard_states(np.arange(n), np.full(n, DIM_ALIGNMENT), np.ones(n), np.ones(n))
    tt = bm.table_terms()
    probe_sb = sector_bytes(np.full(n, float(DIM_ALIGNMENT)), tt.elem_bytes, p.sector_bytes)
    lookups = probe[:, STATE_GATHER] / probe_sb  # batch x pooling factor
    unique = np.minimum(np.minimum(tt.rows, lookups / np.maximum(mean_count(bm.histograms), 1.0)), lookups)
    opt = tt.optimizer
    opt_fixed = np.full(n, float(p.sector_bytes) * 2) if opt is Optimizer.rowwise_adagrad else np.zeros(n)  # ceil(4/32) 32, read + written
    opt_col = np.full(n, 2 * 8.0) if opt is Optimizer.adam else np.zeros(n)  # 8 w bytes of moments (w % 4 == 0), read + written
    mem_col = np.array([float(inst.table_dtype(t).nbytes) * t.rows for t in inst.tables])
    mem_fixed = np.zeros(n)
    if opt is Optimizer.adam:
        mem_col += np.array([8.0 * t.rows for t in inst.tables])
    elif opt is Optimizer.rowwise_adagrad:
        mem_fixed = np.array([4.0 * t.rows for t in inst.tables])
    return ShardTerms(
        dims=bm.table_dims.copy(),
        elem=tt.elem_bytes,
        fwd_fixed_ms=(lookups + batch) * INDEX_BYTES / hbm_bw * MS,
        fwd_col_ms=np.full(n, batch * OUTPUT_BYTES / hbm_bw * MS),
        fwd_sb_ms=lookups / hbm_bw * MS,
        bwd_fixed_ms=(lookups * SORT_BYTES_PER_LOOKUP + unique * opt_fixed) * bwd_scale,
        bwd_col_ms=(batch * OUTPUT_BYTES + unique * opt_col) * bwd_scale + lookups * OUTPUT_BYTES / l2_bw * MS / p.bwd_bandwidth_factor,
        bwd_sb_ms=2 * unique * bwd_scale,
        foot_per_sb=probe[:, STATE_FOOT] / probe_sb[:, None],
        reuse_per_sb=probe[:, STATE_REUSE] / probe_sb[:, None],
        mem_col=mem_col,
        mem_fixed=mem_fixed,
        kappa_ms=(1.0 / hbm_bw - 1.0 / l2_bw) * MS,
        cache_bytes=p.l2_bytes * CACHE_SHARE,
        launch_ms=(1 + BWD_LAUNCHES) * p.launch_overhead_s * MS,
        min_kernel_ms=p.min_kernel_s * MS,
        sector=p.sector_bytes,
    )


def _terms_kernels(terms: ShardTerms, table: np.ndarray, width: np.ndarray, hits_ms: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """fwd and bwd kernel ms (occupancy 1, no floor) of single shards from the terms, with `hits_ms` saved."""
    sb = sector_bytes(width, terms.elem[table], terms.sector)
    fwd = terms.fwd_fixed_ms[table] + terms.fwd_col_ms[table] * width + terms.fwd_sb_ms[table] * sb - hits_ms
    bwd = terms.bwd_fixed_ms[table] + terms.bwd_col_ms[table] * width + terms.bwd_sb_ms[table] * sb
    return fwd, bwd


def _verify_terms(bm: BoundAnalytic, terms: ShardTerms) -> None:
    """Refuse to bound a model the terms do not reproduce: every table at every width, alone on a device with
    occupancy forced to 1, must cost what the analytic model says (forward with no hits, backward)."""
    tables, widths = [], []
    for t, dim in enumerate(terms.dims.astype(int)):
        ws = np.arange(DIM_ALIGNMENT, dim + 1, DIM_ALIGNMENT)
        tables.append(np.full(len(ws), t))
        widths.append(ws)
    table = np.concatenate(tables)
    width = np.concatenate(widths).astype(np.float64)
    states = bm.shard_states(table, width, np.ones(len(table)), np.ones(len(table)))
    sb = sector_bytes(width, terms.elem[table], terms.sector)
    scale = np.abs(states).max(axis=1, keepdims=True)  # acc - unique cancels: compare against the row's scale
    ok = bool(np.all(np.abs(states[:, STATE_FOOT] - terms.foot_per_sb[table] * sb[:, None]) <= _VERIFY_RTOL * scale))
    ok &= bool(np.all(np.abs(states[:, STATE_REUSE] - terms.reuse_per_sb[table] * sb[:, None]) <= _VERIFY_RTOL * scale))
    states = states.copy()
    states[:, STATE_FOOT] = 0.0  # no cache: the forward is then all HBM traffic
    states[:, STATE_BAGS] = bm.profile.sm_count * bm.profile.warps_per_sm  # occupancy 1
    model = bm.compute_costs(states)
    fwd, bwd = _terms_kernels(terms, table, width)
    floor = terms.min_kernel_ms
    launch = bm.profile.launch_overhead_s * MS
    ok &= np.allclose(model[:, 0], launch + np.maximum(floor, fwd), rtol=_VERIFY_RTOL, atol=1e-15)
    ok &= np.allclose(model[:, 1], BWD_LAUNCHES * launch + np.maximum(floor, bwd), rtol=_VERIFY_RTOL, atol=1e-15)
    if not ok:
        raise BoundError(
            "the analytic cost model no longer matches the bound's coefficients (solvers/bound/terms.py): "
            "refusing to report a bound of a model it does not reproduce"
        )
