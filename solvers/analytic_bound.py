"""A certified lower bound of the *analytic* cost model over table-wise and column-wise plans.

The exact solvers' bound (solvers/exact.py) is a bound of a model linearised around one plan: a plan better than it
under the real analytic model can exist. This module bounds the analytic model itself: `analytic_lower_bound`
returns a number B such that every plan of the instance made of table-wise and column-wise shards (any column split
into shards whose widths are multiples of DIM_ALIGNMENT, several shards of one table on one device included; not
row-wise or data-parallel shards) has an analytic max-device cost >= B.

How: a mixed-integer *relaxation* of the placement problem in which every cost term is replaced by a proven
under-estimate (every inequality and its proof: docs/analytic-bound.md), solved by HiGHS (scipy.optimize.milp). The
relaxation's optimum is <= the cost of every such plan, and any *dual* bound a branch-and-bound solver proves for
it is <= that optimum; so whatever HiGHS proves by the time limit is a bound, not only a proven optimum.

Variables, per pair (table t, device d) where a 4-column shard of t fits in d's memory::

    n[t, d]  integer in [0, nmax]   t's columns on d, in units of DIM_ALIGNMENT
    x[t, d]  binary                 d holds some of t      (x <= n <= nmax x)
    c[t, d]  integer                sectors per row (c >= 4 n e / 32): exact ceil for one shard
    s[t, d]  >= 0                   sector bytes per row read, summed over t's shards on d (>= 32 c, >= the hull pieces)

per table k_t integer (devices holding t), and per device y_d (busy), f_d / b_d (forward / backward kernel, ms), h_d (ms of forward time saved by L2 hits),
m_d (fwd + bwd all-to-all, ms); and z. Minimise z subject to::

    sum_d n[t, d] = dim_t / 4                                   every column of every table placed
    s[t, d] >= 32 c[t, d],  s >= a_k x + b_k 4 n                sector waste (ceil is subadditive; hull of the ceil)
    sum_t mem_col_t 4 n[t, d] + mem_fixed_t x[t, d] <= cap_d    weights + optimizer state
    y_d >= x[t, d]
    h_d <= kappa (lam C y_d + sum_t G_t(lam) s[t, d])           every lam in a set of knapsack multipliers
    f_d >= min_kernel y_d,  f_d >= sum_t (fwd per shard x + per column 4 n + per sector byte s) - h_d
    b_d >= min_kernel y_d,  b_d >= sum_t (bwd per shard x + per column 4 n + per sector byte s)
    m_d >= every linear piece of the all-to-all (it is a max of linear pieces: exact)
    z >= 4 launch y_d + f_d + b_d + m_d
    k_t = sum_d x[t, d],  z >= alpha + beta k_t                 t's widest part: Psi_t(k), its lower convex hull
    u_d >= u_d' for consecutive interchangeable devices         symmetry (same host, same capacity)

It is exact (to float rounding) for a device that holds one whole table with occupancy 1; the slack is in the
competition of several tables for the cache (a fractional knapsack instead of the model's hottest-first fill), the
sector rounding of split shards, occupancy below 1, and above all in what branch and bound has not closed by the
time limit (measured: docs/benchmarks.md). The LP relaxation is solved first, so a bound exists even when HiGHS
finds no integer solution in time. The relaxation's best solution describes a real plan (`relaxation_plan`).

The coefficients are derived from the model's constants, then *checked* against `BoundAnalytic.shard_states` for
every table at every shard width (`_verify_terms`): if the analytic model changes, the bound refuses to run rather
than bound a model it no longer matches.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from costmodels.analytic import (
    BWD_LAUNCHES,
    CACHE_SHARE,
    INDEX_BYTES,
    MS,
    OUTPUT_BYTES,
    SORT_BYTES_PER_LOOKUP,
    AnalyticCostModel,
    BoundAnalytic,
    mean_count,
    sector_bytes,
)
from costmodels.base import CostModel
from shardopt.ir import DIM_ALIGNMENT, Instance, Optimizer, Plan

COVERS = (
    "every plan of table-wise and column-wise shards (any split into shards whose widths are multiples of "
    f"{DIM_ALIGNMENT}, several shards of one table on one device included), under the analytic cost model; not "
    "row-wise or data-parallel shards, not other cost models"
)
COVERS_TABLE_WISE = (
    "every table-wise plan (each table whole on one device), under the analytic cost model; not column-, row-wise or "
    "data-parallel shards, not other cost models"
)
ROUNDOFF = 1e-12  # relative float round-off treated as zero in the cache rows
MAX_MULTIPLIERS = 64  # knapsack multipliers (lam) per device: rows of the cache bound
MIP_REL_GAP = 1e-4  # HiGHS stops when its primal and dual bounds are this close ("optimal")
FULL_RELAXATION_MAX_PAIRS = 20_000  # above this many (table, device) pairs, interchangeable devices get the symmetric LP only
MEMORY_SLACK = 1e-9  # memory rows are divided by the capacity; this keeps float rounding from cutting a plan off
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
    probe_sb = sector_bytes(np.full(n, float(DIM_ALIGNMENT)), bm._elem, p.sector_bytes)
    from costmodels.analytic import _FOOT, _GATHER, _REUSE

    lookups = probe[:, _GATHER] / probe_sb  # batch x pooling factor
    unique = np.minimum(np.minimum(bm._rows, lookups / np.maximum(mean_count(bm.histograms), 1.0)), lookups)
    opt = bm._optimizer
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
        elem=bm._elem.copy(),
        fwd_fixed_ms=(lookups + batch) * INDEX_BYTES / hbm_bw * MS,
        fwd_col_ms=np.full(n, batch * OUTPUT_BYTES / hbm_bw * MS),
        fwd_sb_ms=lookups / hbm_bw * MS,
        bwd_fixed_ms=(lookups * SORT_BYTES_PER_LOOKUP + unique * opt_fixed) * bwd_scale,
        bwd_col_ms=(batch * OUTPUT_BYTES + unique * opt_col) * bwd_scale + lookups * OUTPUT_BYTES / l2_bw * MS / p.bwd_bandwidth_factor,
        bwd_sb_ms=2 * unique * bwd_scale,
        foot_per_sb=probe[:, _FOOT] / probe_sb[:, None],
        reuse_per_sb=probe[:, _REUSE] / probe_sb[:, None],
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
    from costmodels.analytic import _BAGS, _FOOT, _REUSE

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
    ok = bool(np.all(np.abs(states[:, _FOOT] - terms.foot_per_sb[table] * sb[:, None]) <= _VERIFY_RTOL * scale))
    ok &= bool(np.all(np.abs(states[:, _REUSE] - terms.reuse_per_sb[table] * sb[:, None]) <= _VERIFY_RTOL * scale))
    states = states.copy()
    states[:, _FOOT] = 0.0  # no cache: the forward is then all HBM traffic
    states[:, _BAGS] = bm.profile.sm_count * bm.profile.warps_per_sm  # occupancy 1
    model = bm.compute_costs(states)
    fwd, bwd = _terms_kernels(terms, table, width)
    floor = terms.min_kernel_ms
    launch = bm.profile.launch_overhead_s * MS
    ok &= np.allclose(model[:, 0], launch + np.maximum(floor, fwd), rtol=_VERIFY_RTOL, atol=1e-15)
    ok &= np.allclose(model[:, 1], BWD_LAUNCHES * launch + np.maximum(floor, bwd), rtol=_VERIFY_RTOL, atol=1e-15)
    if not ok:
        raise BoundError(
            "the analytic cost model no longer matches the bound's coefficients (solvers/analytic_bound.py): "
            "refusing to report a bound of a model it does not reproduce"
        )


# ---------------------------------------------------------------------------------------------------------------
# sector waste: the lower convex hull of ceil(w e / 32) 32 over w = 4, 8, ..., dim


def sector_hull(dim: int, elem: float, sector: int) -> np.ndarray:
    """Lines (a, b), as rows of a [k, 2] array, of the lower convex hull of the points (W, sb(W)) for W = 4, 8,
    ..., dim: for every such W, sb(W) >= a + b W, with equality at W = dim (an extreme point).

    Why this bounds a *split* table too: sb is subadditive (ceil(p) + ceil(q) >= ceil(p + q)), so shards of widths
    w_1..w_k of one table on one device read sum_i sb(w_i) >= sb(sum_i w_i) >= a + b sum_i w_i sector bytes per row.
    """
    ws = np.arange(DIM_ALIGNMENT, dim + 1, DIM_ALIGNMENT, dtype=np.float64)
    sb = sector_bytes(ws, np.full(len(ws), float(elem)), sector)
    hull: list[tuple[float, float]] = []
    for p in zip(ws.tolist(), sb.tolist()):  # Andrew's monotone chain, lower half
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) <= 0:
            hull.pop()
        hull.append(p)
    if len(hull) == 1:
        return np.array([[hull[0][1], 0.0]])
    lines = []
    for (w0, s0), (w1, s1) in zip(hull[:-1], hull[1:]):
        b = (s1 - s0) / (w1 - w0)
        lines.append((s1 - b * w1, b))  # through the right end point: exact at W = dim for the last line
    return np.array(lines)


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def hull_value(lines: np.ndarray, width: float) -> float:
    """The hull's value at `width` (columns): a lower bound of the sector bytes of shards that wide in all."""
    return float(np.max(lines[:, 0] + lines[:, 1] * width)) if width > 0 else 0.0


# ---------------------------------------------------------------------------------------------------------------
# cache hits: the dual of the fractional knapsack


def knapsack_multipliers(terms: ShardTerms, max_count: int = MAX_MULTIPLIERS) -> np.ndarray:
    """The multipliers lam of the cache bound: 0, the ratio at which each whole table alone fills the cache, and
    (up to `max_count` in all) the other re-reads-per-byte ratios of the tables' bins.

    For any lam >= 0, the bytes served by L2 on a device are <= lam C + sum over its shards' bins of
    (reuse - lam foot)^+ (weak duality of the fractional knapsack; docs/analytic-bound.md). Any set of lam is
    valid; more is tighter. The bound is exact for one table alone when lam is the ratio of the bin the cache fills
    up in (`critical_ratio`), so those are always kept; of the other ratios, a log-spaced subset when too many."""
    foot, reuse = terms.foot_per_sb, terms.reuse_per_sb
    ratios = np.divide(reuse, foot, out=np.zeros_like(foot), where=foot > 0)
    required = _merge([0.0] + [critical_ratio(terms, t) for t in range(len(terms.dims))])
    others = [v for v in _merge(ratios[(foot > 0) & (ratios > 0)].tolist()) if v not in required]
    room = max(0, max_count - len(required))
    if len(others) > room:
        idx = np.unique(np.round(np.geomspace(1, len(others), room)).astype(int) - 1) if room else []
        others = [others[i] for i in idx]
    return np.array(_merge(required + others))


def critical_ratio(terms: ShardTerms, table: int) -> float:
    """Re-reads per byte of the bin in which the cache fills up when the whole table is alone on a device (0 when
    all of it fits): the optimal dual multiplier of that device's knapsack."""
    sb = float(sector_bytes(terms.dims[table : table + 1], terms.elem[table : table + 1], terms.sector)[0])
    foot = terms.foot_per_sb[table] * sb  # hottest bin first, which is also the order of the ratios (one table)
    full = np.nonzero(np.cumsum(foot) >= terms.cache_bytes)[0]
    if len(full) == 0:
        return 0.0
    b = int(full[0])
    return float(terms.reuse_per_sb[table, b] / terms.foot_per_sb[table, b])


def _merge(values: list[float]) -> list[float]:
    """Sorted distinct values, those equal up to float rounding (1e-12 relative) merged."""
    keep: list[float] = []
    for v in sorted(values):
        if not keep or v > keep[-1] * (1 + 1e-12) + 1e-300:
            keep.append(float(v))
    return keep


def hit_slopes(terms: ShardTerms, lams: np.ndarray) -> np.ndarray:
    """G[t, k] = sum_b (reuse_per_sb[t, b] - lams[k] foot_per_sb[t, b])^+ : bytes of the dual bound per sector byte
    of t's rows on the device. A bin whose own ratio is lam leaves float round-off (|diff| ~ 1e-16 reuse) that
    should be 0: terms below ROUNDOFF x reuse are zeroed (docs/analytic-bound.md, "Floating point")."""
    reuse = terms.reuse_per_sb[:, None, :]
    diff = reuse - lams[None, :, None] * terms.foot_per_sb[:, None, :]
    diff[diff <= ROUNDOFF * reuse] = 0.0
    return diff.sum(axis=2)


def hits_upper_bound(terms: ShardTerms, lams: np.ndarray, slopes: np.ndarray, sector_sums: dict[int, float]) -> float:
    """Upper bound (bytes) of the L2 hits of a device whose table t has `sector_sums[t]` sector bytes per row
    (summed over its shards): min over lam of lam C + sum_t G_t(lam) s_t."""
    if not sector_sums:
        return 0.0
    idx = np.array(list(sector_sums))
    s = np.array(list(sector_sums.values()))
    return float(np.min(lams * terms.cache_bytes + s @ slopes[idx]))


# ---------------------------------------------------------------------------------------------------------------
# per-device bounds for a given set of shards (what the relaxation charges a device at that point)


@dataclass(frozen=True)
class DeviceComputeBound:
    """Lower bounds (ms) of one device's analytic fwd and bwd compute for a set of shards, and the parts."""

    fwd_ms: float
    bwd_ms: float
    hits_bytes_upper: float  # the relaxation's upper bound of the device's L2 hits
    sector_bytes_lower: dict[int, float] = field(default_factory=dict)  # per table index

    @property
    def total_ms(self) -> float:
        return self.fwd_ms + self.bwd_ms


def _analytic_binding(instance: Instance, cost_model: CostModel | None) -> BoundAnalytic:
    """The analytic model bound to `instance`; BoundError naming the model for anything else."""
    model = cost_model if cost_model is not None else AnalyticCostModel()
    if not isinstance(model, AnalyticCostModel):
        name = getattr(model, "name", type(model).__name__)
        raise BoundError(
            f"cost model {name!r}: the certified bound is for the analytic cost model only (analytic or "
            "analytic:PROFILE); its inequalities are proven for the analytic formulas, not for a learned model"
        )
    bm = model.bind(instance)
    if type(bm) is not BoundAnalytic:
        raise BoundError(f"cost model {model.name!r} binds to {type(bm).__name__}, not the analytic model the bound is proven for")
    return bm


class AnalyticRelaxation:
    """Everything per instance the bound needs, computed once (terms, hulls, multipliers), and what the relaxation
    charges a device or a plan at a given point (for tests, and to see where the slack is)."""

    def __init__(self, instance: Instance, cost_model: CostModel | None = None):
        bm = _analytic_binding(instance, cost_model)
        self.bm = bm
        self.terms = shard_terms(bm)
        _verify_terms(bm, self.terms)
        self.hulls = [sector_hull(int(d), float(e), self.terms.sector) for d, e in zip(self.terms.dims, self.terms.elem)]
        self.lams = knapsack_multipliers(self.terms)
        self.slopes = hit_slopes(self.terms, self.lams)
        self.cut_values: dict[tuple[int, int], np.ndarray] = {}  # table_cut_values, by (table, max devices)

    def device_bound(self, shards: Sequence[tuple[int, int]]) -> DeviceComputeBound:
        """See `device_compute_lower_bound`."""
        return _device_bound(self, shards)

    def device_costs(self, shards: Sequence[tuple[int, int, int]]) -> np.ndarray:
        """See `relaxed_device_costs`."""
        return _relaxed_device_costs(self, shards)


def _device_bound(ctx: AnalyticRelaxation, shards: Sequence[tuple[int, int]]) -> DeviceComputeBound:
    t = ctx.terms
    if not shards:
        return DeviceComputeBound(0.0, 0.0, 0.0)
    width: dict[int, float] = {}
    for table, w in shards:
        if not 0 <= int(table) < len(t.dims) or w <= 0 or w % DIM_ALIGNMENT:
            raise ValueError(f"shard ({table}, {w}): expected a table index and a width that is a positive multiple of {DIM_ALIGNMENT}")
        width[int(table)] = width.get(int(table), 0.0) + float(w)
    for i, w in width.items():
        if w > t.dims[i]:
            raise ValueError(f"table {i}: shards {w:g} columns wide in all, but the table has {int(t.dims[i])}")
    # sum_i sb(w_i) >= sb(sum_i w_i): what the relaxation's s >= 32 c charges at an integral point
    ssum = {i: float(sector_bytes(np.array([w]), t.elem[i : i + 1], t.sector)[0]) for i, w in width.items()}
    hits = max(0.0, hits_upper_bound(t, ctx.lams, ctx.slopes, ssum)) if t.kappa_ms > 0 else 0.0
    fwd = sum(t.fwd_fixed_ms[i] + t.fwd_col_ms[i] * w + t.fwd_sb_ms[i] * ssum[i] for i, w in width.items()) - t.kappa_ms * hits
    bwd = sum(t.bwd_fixed_ms[i] + t.bwd_col_ms[i] * w + t.bwd_sb_ms[i] * ssum[i] for i, w in width.items())
    launch = ctx.bm.profile.launch_overhead_s * MS
    return DeviceComputeBound(
        fwd_ms=launch + max(t.min_kernel_ms, fwd),
        bwd_ms=BWD_LAUNCHES * launch + max(t.min_kernel_ms, bwd),
        hits_bytes_upper=hits,
        sector_bytes_lower=ssum,
    )


def device_compute_lower_bound(
    instance: Instance, shards: Sequence[tuple[int, int]], cost_model: CostModel | None = None
) -> DeviceComputeBound:
    """What the relaxation charges one device holding `shards` ((table index, width in columns) pairs; a table may
    appear several times): lower bounds of its analytic fwd and bwd compute. Exact for one whole table alone at
    occupancy 1. Tests compare it with `BoundAnalytic.compute_costs` of the shards' summed states."""
    return AnalyticRelaxation(instance, cost_model).device_bound(shards)


# ---------------------------------------------------------------------------------------------------------------
# the all-to-all: a max of linear pieces in (own width u, host width v), exact


@dataclass(frozen=True)
class CommPiece:
    """fwd + bwd all-to-all of device d >= const + cu u_d + cv v_host(d) (ms); the max over pieces is exact."""

    const: float
    cu: float
    cv: float


def comm_pieces(bm: BoundAnalytic, device: int, total_width: float) -> list[CommPiece]:
    """The linear pieces of `BoundAnalytic.comm_time` for `device` (x2: backward equals forward). One device: none
    (no all-to-all). One host: send D-1 shares vs receive everyone else's. Several hosts: NVLink send / receive and
    network send / receive, each a piece."""
    if bm.num_devices == 1:
        return [CommPiece(0.0, 0.0, 0.0)]
    lat = 2 * bm._latency_ms
    ls, rs = 2 * bm._local_scale, 2 * bm._remote_scale
    nl, nr = float(bm._local_peers[device]), float(bm._remote_peers[device])
    if bm._single_host:
        return [CommPiece(lat, ls * nl, 0.0), CommPiece(lat + ls * total_width, -ls, 0.0)]
    return [
        CommPiece(lat, ls * nl, 0.0),
        CommPiece(lat, -ls, ls),
        CommPiece(lat, rs * nr, 0.0),
        CommPiece(lat + rs * total_width, 0.0, -rs),
    ]


def relaxed_device_costs(instance: Instance, shards: Sequence[tuple[int, int, int]], cost_model: CostModel | None = None) -> np.ndarray:
    """Per device, what the relaxation charges a plan given as (table index, device, width) triples:
    compute lower bound + all-to-all (exact). [D] ms; every entry <= the analytic model's device total."""
    return AnalyticRelaxation(instance, cost_model).device_costs(shards)


def _relaxed_device_costs(ctx: AnalyticRelaxation, shards: Sequence[tuple[int, int, int]]) -> np.ndarray:
    bm = ctx.bm
    instance = bm.instance
    per_dev: list[list[tuple[int, int]]] = [[] for _ in range(bm.num_devices)]
    u = np.zeros(bm.num_devices)
    for t, d, w in shards:
        per_dev[d].append((t, w))
        u[d] += w
    total = float(ctx.terms.dims.sum())
    host = np.arange(bm.num_devices) // instance.topology.devices_per_host
    v = np.array([u[host == host[d]].sum() for d in range(bm.num_devices)])
    out = np.zeros(bm.num_devices)
    for d in range(bm.num_devices):
        comm = max(p.const + p.cu * u[d] + p.cv * v[d] for p in comm_pieces(bm, d, total))
        out[d] = _device_bound(ctx, per_dev[d]).total_ms + comm
    return out


def comm_floor(bm: BoundAnalytic, width: float) -> float:
    """A lower bound (ms, fwd + bwd) of the all-to-all of *any* device whose pooled width is >= `width`: the least,
    over devices, of the pieces that do not decrease with the device's own width (its sends), and on one host
    also the receive piece, since max(n_l u, total - u) >= max(n_l width, n_l total / (n_l + 1)) for u >= width."""
    if bm.num_devices == 1:
        return 0.0
    total = float(bm.table_dims.sum())
    best = math.inf
    for d in range(bm.num_devices):
        nl, nr = float(bm._local_peers[d]), float(bm._remote_peers[d])
        if bm._single_host:
            t = bm._local_scale * max(nl * width, nl * total / (nl + 1))
        else:
            t = max(bm._local_scale * nl * width, bm._remote_scale * nr * width)
        best = min(best, 2 * (bm._latency_ms + t))
    return best


def table_cut_values(ctx: AnalyticRelaxation, table: int, max_devices: int) -> np.ndarray:
    """Psi_t(k), k = 1..max_devices: a lower bound of the plan cost when table t lies on k devices.

    One of those devices holds >= W_k = 4 ceil(units / k) of t's columns; its compute is >= what the relaxation
    charges t's part alone (adding shards never lowers the per-device bound: docs/analytic-bound.md), which does
    not decrease with the width, and its all-to-all >= `comm_floor(W_k)`."""
    units = int(ctx.terms.dims[table]) // DIM_ALIGNMENT
    top = max(1, min(max_devices, units))
    key = (int(table), top)
    if key not in ctx.cut_values:  # (computed once: the relaxation's rows and the fallback bound both use them)
        vals = []
        for k in range(1, top + 1):
            w = DIM_ALIGNMENT * math.ceil(units / k)
            vals.append(_device_bound(ctx, [(table, w)]).total_ms + comm_floor(ctx.bm, w))
        ctx.cut_values[key] = np.array(vals)
    return ctx.cut_values[key]


def table_cut_bound(ctx: AnalyticRelaxation, table_wise: bool = False) -> float:
    """A bound that needs no solver: every table lies on some k devices, so z >= min_k Psi_t(k) for every table t
    (`table_cut_values`; table-wise, k = 1). Weak unless one table dominates, but always there: the bound falls back
    to it when HiGHS proves nothing within the time limit."""
    D = ctx.bm.num_devices
    return max((float(table_cut_values(ctx, t, 1 if table_wise else D).min()) for t in range(len(ctx.terms.dims))), default=0.0)


def table_cut_lines(ctx: AnalyticRelaxation, table: int, max_devices: int) -> list[tuple[float, float]]:
    """Lines z >= alpha + beta k of the lower convex hull of the points (k, Psi_t(k)): valid at every integer k
    (the number of devices holding t is sum_d x[t, d])."""
    vals = table_cut_values(ctx, table, max_devices)
    pts = list(zip(range(1, len(vals) + 1), vals.tolist()))
    if len(pts) == 1:
        return [(pts[0][1], 0.0)]
    hull: list[tuple[float, float]] = []
    for p in pts:
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) <= 0:
            hull.pop()
        hull.append(p)
    lines = []
    for (k0, v0), (k1, v1) in zip(hull[:-1], hull[1:]):
        beta = (v1 - v0) / (k1 - k0)
        lines.append((v0 - beta * k0, beta))
    return lines


# ---------------------------------------------------------------------------------------------------------------
# the relaxation as a MILP


@dataclass
class _Model:
    """A MILP in scipy.optimize.milp's form, built row by row, with the variable layout kept for reporting."""

    n_vars: int = 0
    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)

    def var(self, lo: float, hi: float, integer: bool = False) -> int:
        self.lb.append(lo)
        self.ub.append(hi)
        self.integer.append(1 if integer else 0)
        self.n_vars += 1
        return self.n_vars - 1

    def row(self, coefs: dict[int, float] | list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(self.row_lo)
        items = coefs.items() if isinstance(coefs, dict) else coefs
        for c, v in items:
            if v != 0.0:
                self.rows.append(r)
                self.cols.append(c)
                self.vals.append(float(v))
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    @property
    def n_rows(self) -> int:
        return len(self.row_lo)


@dataclass
class _Layout:
    pairs: list[tuple[int, int]]
    x: dict[tuple[int, int], int]
    n: dict[tuple[int, int], int]
    s: dict[tuple[int, int], int]
    z: int


def _pairs(instance: Instance, terms: ShardTerms, table_wise: bool) -> tuple[list[tuple[int, int]], dict[tuple[int, int], int]]:
    """(t, d) pairs where t can have a shard on d, and the most units of 4 columns of t that d can hold."""
    caps = instance.topology.capacities()
    pairs: list[tuple[int, int]] = []
    nmax: dict[tuple[int, int], int] = {}
    for t, dim in enumerate(terms.dims.astype(int)):
        units = dim // DIM_ALIGNMENT
        per_unit = terms.mem_col[t] * DIM_ALIGNMENT
        for d, cap in enumerate(caps):
            room = cap - terms.mem_fixed[t]  # what is left for columns after one shard's fixed bytes
            fit = int(min(units, math.floor(room / per_unit))) if room >= 0 else 0
            if table_wise and fit < units:
                continue
            if fit >= 1:
                pairs.append((t, d))
                nmax[(t, d)] = fit
    return pairs, nmax


def _symmetry_classes(instance: Instance) -> list[list[int]]:
    """Devices on one host with equal capacity: permuting them permutes the devices' costs and nothing else."""
    topo = instance.topology
    groups: dict[tuple[int, int], list[int]] = {}
    for d in range(topo.num_devices):
        groups.setdefault((topo.host_of(d), topo.capacity(d)), []).append(d)
    return [g for g in groups.values() if len(g) > 1]


def build_relaxation(ctx: AnalyticRelaxation, table_wise: bool = False, symmetry: bool = True) -> tuple[_Model, _Layout]:
    """The MILP of the module docstring (every row's proof: docs/analytic-bound.md)."""
    bm, t = ctx.bm, ctx.terms
    inst = bm.instance
    n_dev = bm.num_devices
    caps = inst.topology.capacities()
    pairs, nmax = _pairs(inst, t, table_wise)
    m = _Model()
    x = {p: m.var(0, 1, True) for p in pairs}
    n = {p: m.var(0, nmax[p], True) for p in pairs}
    s = {p: m.var(0, math.inf) for p in pairs}
    y = [m.var(0, 1) for _ in range(n_dev)]  # integral at any integral x (y = max x): left continuous
    f = [m.var(0, math.inf) for _ in range(n_dev)]
    b = [m.var(0, math.inf) for _ in range(n_dev)]
    use_hits = t.kappa_ms > 0
    h = [m.var(0, math.inf if use_hits else 0.0) for _ in range(n_dev)]
    comm = [m.var(-math.inf, math.inf) for _ in range(n_dev)]
    z = m.var(-math.inf, math.inf)
    by_dev: list[list[tuple[int, int]]] = [[] for _ in range(n_dev)]
    by_table: list[list[tuple[int, int]]] = [[] for _ in range(len(t.dims))]
    for p in pairs:
        by_table[p[0]].append(p)
        by_dev[p[1]].append(p)
    for ti, ps in enumerate(by_table):  # every column placed
        units = int(t.dims[ti]) // DIM_ALIGNMENT
        m.row([(n[p], 1.0) for p in ps], units, units)
    for p in pairs:
        ti = p[0]
        units = int(t.dims[ti]) // DIM_ALIGNMENT
        if table_wise:
            m.row({n[p]: 1.0, x[p]: -float(units)}, 0.0, 0.0)
        else:
            m.row({n[p]: 1.0, x[p]: -float(nmax[p])}, -math.inf, 0.0)
            m.row({x[p]: 1.0, n[p]: -1.0}, -math.inf, 0.0)
        for a, slope in ctx.hulls[ti]:  # s >= a x + slope W, W = 4 n
            m.row({s[p]: 1.0, x[p]: -a, n[p]: -slope * DIM_ALIGNMENT}, 0.0, math.inf)
        if not table_wise:  # s >= 32 c, c integer >= W e / 32: exact ceil for one shard
            c = m.var(0, math.inf, True)
            m.row({c: 1.0, n[p]: -DIM_ALIGNMENT * t.elem[ti] / t.sector}, 0.0, math.inf)
            m.row({s[p]: 1.0, c: -float(t.sector)}, 0.0, math.inf)
        m.row({y[p[1]]: 1.0, x[p]: -1.0}, 0.0, math.inf)
    for d in range(n_dev):
        ps = by_dev[d]
        mem = [(n[p], t.mem_col[p[0]] * DIM_ALIGNMENT / caps[d]) for p in ps] + [(x[p], t.mem_fixed[p[0]] / caps[d]) for p in ps]
        m.row(mem, -math.inf, 1.0 + MEMORY_SLACK)
        if use_hits:
            for k, lam in enumerate(ctx.lams):
                coefs = [(h[d], 1.0), (y[d], -t.kappa_ms * lam * t.cache_bytes)]
                coefs += [(s[p], -t.kappa_ms * ctx.slopes[p[0], k]) for p in ps]
                m.row(coefs, -math.inf, 0.0)
        fwd = [(f[d], 1.0), (h[d], 1.0)]
        bwd = [(b[d], 1.0)]
        for p in ps:
            ti = p[0]
            fwd += [(x[p], -t.fwd_fixed_ms[ti]), (n[p], -t.fwd_col_ms[ti] * DIM_ALIGNMENT), (s[p], -t.fwd_sb_ms[ti])]
            bwd += [(x[p], -t.bwd_fixed_ms[ti]), (n[p], -t.bwd_col_ms[ti] * DIM_ALIGNMENT), (s[p], -t.bwd_sb_ms[ti])]
        m.row(fwd, 0.0, math.inf)
        m.row(bwd, 0.0, math.inf)
        m.row({f[d]: 1.0, y[d]: -t.min_kernel_ms}, 0.0, math.inf)
        m.row({b[d]: 1.0, y[d]: -t.min_kernel_ms}, 0.0, math.inf)
    total = float(t.dims.sum())
    host = np.arange(n_dev) // inst.topology.devices_per_host
    for d in range(n_dev):
        mates = [e for e in range(n_dev) if host[e] == host[d]]
        for piece in comm_pieces(bm, d, total):
            coefs: dict[int, float] = {comm[d]: 1.0}
            for e in mates if piece.cv else [d]:
                w = piece.cv + (piece.cu if e == d else 0.0)
                for p in by_dev[e]:
                    coefs[n[p]] = coefs.get(n[p], 0.0) - w * DIM_ALIGNMENT
            m.row(coefs, piece.const, math.inf)
        m.row({z: 1.0, y[d]: -t.launch_ms, f[d]: -1.0, b[d]: -1.0, comm[d]: -1.0}, 0.0, math.inf)
    for ti, ps in enumerate(by_table):  # the device with t's widest part: z >= Psi_t(k_t), k_t devices hold t
        lines = table_cut_lines(ctx, ti, 1 if table_wise else len(ps))
        if len(lines) == 1 and lines[0][1] == 0.0:  # one device at most: a constant
            m.row({z: 1.0}, lines[0][0], math.inf)
            continue
        k = m.var(1, min(len(ps), int(t.dims[ti]) // DIM_ALIGNMENT), True)  # an integer to branch on
        m.row([(k, 1.0)] + [(x[p], -1.0) for p in ps], 0.0, 0.0)
        for alpha, beta in lines:
            m.row({z: 1.0, k: -beta}, alpha, math.inf)
    if symmetry:  # within a class, order devices by pooled width (any plan can be permuted so)
        for cls in _symmetry_classes(inst):
            for d0, d1 in zip(cls[:-1], cls[1:]):
                coefs = {}
                for p in by_dev[d0]:
                    coefs[n[p]] = coefs.get(n[p], 0.0) + 1.0
                for p in by_dev[d1]:
                    coefs[n[p]] = coefs.get(n[p], 0.0) - 1.0
                m.row(coefs, 0.0, math.inf)
    return m, _Layout(pairs=pairs, x=x, n=n, s=s, z=z)


def devices_interchangeable(instance: Instance) -> bool:
    """True when permuting devices within hosts and permuting whole hosts maps the relaxation onto itself: every
    device has the same capacity and every host the same number of devices (then `symmetric_relaxation_lp` holds)."""
    topo = instance.topology
    caps = topo.capacities()
    return len(set(caps)) == 1 and topo.num_devices % topo.devices_per_host == 0


def build_symmetric_lp(ctx: AnalyticRelaxation, table_wise: bool = False) -> tuple[_Model, int]:
    """The LP relaxation of `build_relaxation` for interchangeable devices, with every device's variables equal:
    one copy of each pair's variables per table (x_t, n_t, s_t, c_t) and of each device's (y, f, b, h, comm).

    Why it is the same bound: the LP's feasible set (without the symmetry-ordering rows, which only cut off
    permuted copies) is mapped onto itself by the device permutations `devices_interchangeable` allows, and that
    group moves any device to any other; averaging an optimal LP solution over the group gives a feasible solution
    (the set is convex) with the same z in which all devices are equal. So the LP optimum over such symmetric points
    is the LP optimum -- at a size independent of the device count (856 tables x 128 devices: ~4k variables instead
    of ~440k). Rows that sum over devices get the device count as a factor: sum_d n[t, d] = D n_t, k_t = D x_t, and a
    comm piece's host-width term sums the same n over the host's devices. Returns (model, index of z)."""
    bm, t = ctx.bm, ctx.terms
    inst = bm.instance
    if not devices_interchangeable(inst):
        raise ValueError(f"{inst.name}: devices differ in capacity or hosts in size; the symmetric LP does not apply")
    n_dev = bm.num_devices
    per_host = min(inst.topology.devices_per_host, n_dev)
    pairs, nmax = _pairs(inst, t, table_wise)
    fits = sorted({ti for ti, d in pairs if d == 0})
    m = _Model()
    x = {ti: m.var(0, 1) for ti in fits}
    n = {ti: m.var(0, nmax[(ti, 0)]) for ti in fits}
    sv = {ti: m.var(0, math.inf) for ti in fits}
    y, f, b = m.var(0, 1), m.var(0, math.inf), m.var(0, math.inf)
    use_hits = t.kappa_ms > 0
    h = m.var(0, math.inf if use_hits else 0.0)
    comm = m.var(-math.inf, math.inf)
    z = m.var(-math.inf, math.inf)
    for ti in range(len(t.dims)):
        units = int(t.dims[ti]) // DIM_ALIGNMENT
        if ti not in x:  # on no device: the relaxation (and every plan) is infeasible
            m.row([], float(units), float(units))
            continue
        m.row({n[ti]: float(n_dev)}, units, units)
        if table_wise:
            m.row({n[ti]: 1.0, x[ti]: -float(units)}, 0.0, 0.0)
        else:
            m.row({n[ti]: 1.0, x[ti]: -float(nmax[(ti, 0)])}, -math.inf, 0.0)
            m.row({x[ti]: 1.0, n[ti]: -1.0}, -math.inf, 0.0)
        for a, slope in ctx.hulls[ti]:
            m.row({sv[ti]: 1.0, x[ti]: -a, n[ti]: -slope * DIM_ALIGNMENT}, 0.0, math.inf)
        if not table_wise:
            c = m.var(0, math.inf)
            m.row({c: 1.0, n[ti]: -DIM_ALIGNMENT * t.elem[ti] / t.sector}, 0.0, math.inf)
            m.row({sv[ti]: 1.0, c: -float(t.sector)}, 0.0, math.inf)
        m.row({y: 1.0, x[ti]: -1.0}, 0.0, math.inf)
    cap = inst.topology.capacities()[0]
    m.row([(n[ti], t.mem_col[ti] * DIM_ALIGNMENT / cap) for ti in fits] + [(x[ti], t.mem_fixed[ti] / cap) for ti in fits], -math.inf, 1.0 + MEMORY_SLACK)
    if use_hits:
        for k, lam in enumerate(ctx.lams):
            m.row([(h, 1.0), (y, -t.kappa_ms * lam * t.cache_bytes)] + [(sv[ti], -t.kappa_ms * ctx.slopes[ti, k]) for ti in fits], -math.inf, 0.0)
    fwd = [(f, 1.0), (h, 1.0)]
    bwd = [(b, 1.0)]
    for ti in fits:
        fwd += [(x[ti], -t.fwd_fixed_ms[ti]), (n[ti], -t.fwd_col_ms[ti] * DIM_ALIGNMENT), (sv[ti], -t.fwd_sb_ms[ti])]
        bwd += [(x[ti], -t.bwd_fixed_ms[ti]), (n[ti], -t.bwd_col_ms[ti] * DIM_ALIGNMENT), (sv[ti], -t.bwd_sb_ms[ti])]
    m.row(fwd, 0.0, math.inf)
    m.row(bwd, 0.0, math.inf)
    m.row({f: 1.0, y: -t.min_kernel_ms}, 0.0, math.inf)
    m.row({b: 1.0, y: -t.min_kernel_ms}, 0.0, math.inf)
    for piece in comm_pieces(bm, 0, float(t.dims.sum())):  # (device 0 stands for all: the pieces are the same)
        w = (piece.cv * per_host + piece.cu) * DIM_ALIGNMENT
        m.row([(comm, 1.0)] + [(n[ti], -w) for ti in fits], piece.const, math.inf)
    m.row({z: 1.0, y: -t.launch_ms, f: -1.0, b: -1.0, comm: -1.0}, 0.0, math.inf)
    for ti in fits:
        lines = table_cut_lines(ctx, ti, 1 if table_wise else n_dev)
        if len(lines) == 1 and lines[0][1] == 0.0:
            m.row({z: 1.0}, lines[0][0], math.inf)
            continue
        m.row({x[ti]: float(n_dev)}, 1.0, math.inf)  # k_t = D x_t >= 1
        for alpha, beta in lines:
            m.row({z: 1.0, x[ti]: -beta * n_dev}, alpha, math.inf)
    return m, z


def symmetric_lp_bound(ctx: AnalyticRelaxation, table_wise: bool = False, time_limit: float = 10.0) -> float | None:
    """The relaxation's LP bound via `build_symmetric_lp` (HiGHS); +inf when infeasible, None when HiGHS did not
    finish within the limit."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    m, z = build_symmetric_lp(ctx, table_wise)
    c = np.zeros(m.n_vars)
    c[z] = 1.0
    a = csr_matrix((m.vals, (m.rows, m.cols)), shape=(m.n_rows, m.n_vars))
    res = milp(c, constraints=LinearConstraint(a, np.array(m.row_lo), np.array(m.row_hi)), bounds=Bounds(np.array(m.lb), np.array(m.ub)),
               options={"time_limit": float(max(time_limit, 0.05)), "disp": False})
    if res.status == 2:
        return math.inf
    if res.status != 0 or res.fun is None:
        return None
    return float(res.fun)


# ---------------------------------------------------------------------------------------------------------------
# the result and the entry point


@dataclass
class AnalyticBound:
    """A certified lower bound of the analytic plan cost (ms) over the plans `covers` names.

    status: "optimal" (the relaxation was solved to HiGHS's gap MIP_REL_GAP; value = its dual bound), "bound" (the
    time limit came first; value = the dual bound proven by then, still a bound), "infeasible" (the relaxation has no
    solution: no covered plan fits in memory; `reason` says why; value = +inf).
    source: "relaxation" (HiGHS's bound of the relaxation), "symmetric LP" (its LP bound solved with the devices'
    variables equal, `build_symmetric_lp`: for interchangeable devices, when the full relaxation is too large or its
    LP ran out of time), or "table cuts" when nothing else was proven within the limit (value = `table_cut_bound`,
    valid but weak).
    """

    value_ms: float
    status: str
    table_wise: bool
    solver: str
    time_s: float
    covers: str
    cost_model: str = "analytic"
    relaxation_primal_ms: float | None = None  # the best solution of the relaxation found (>= value_ms)
    lp_bound_ms: float | None = None  # the LP relaxation's optimum (<= value_ms)
    plan_cost_ms: float | None = None  # analytic cost of the plan that solution describes (>= value_ms: a real plan)
    plan: Plan | None = None  # that plan (`relaxation_plan`)
    variables: int = 0
    rows: int = 0
    integer_variables: int = 0
    multipliers: int = 0  # knapsack multipliers per device
    reason: str | None = None
    solver_message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    source: str = "relaxation"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("plan")
        if not math.isfinite(self.value_ms):
            d["value_ms"] = None
        return d


def analytic_lower_bound(
    instance: Instance,
    cost_model: CostModel | None = None,
    *,
    time_limit: float = 10.0,
    table_wise: bool = False,
    backend: str = "highs",
) -> AnalyticBound:
    """A certified lower bound of the analytic max-device cost of every table- and column-wise plan of `instance`
    (with `table_wise`: of every table-wise plan, a tighter bound of fewer plans). BoundError for a cost model other
    than the analytic one or an unknown backend. The bound is HiGHS's dual bound of the relaxation at the time
    limit, a bound whether or not the relaxation was solved to optimality."""
    if backend != "highs":
        raise BoundError(f"backend {backend!r}: the bound is computed with HiGHS only (backend 'highs')")
    start = time.perf_counter()
    ctx = AnalyticRelaxation(instance, cost_model)
    model_name = (cost_model or AnalyticCostModel()).name
    covers = COVERS_TABLE_WISE if table_wise else COVERS
    reason = _memory_reason(instance, ctx.terms, table_wise)
    if reason is not None:
        return AnalyticBound(math.inf, "infeasible", table_wise, "a counting argument (no solver needed)", time.perf_counter() - start, covers,
                             model_name, reason=reason)
    solver = "HiGHS (scipy.optimize.milp)"
    symmetric = devices_interchangeable(instance)
    sym: float | None = None  # the relaxation's LP bound the cheap way (build_symmetric_lp), solved only when needed
    n_pairs = len(_pairs(instance, ctx.terms, table_wise)[0])
    if symmetric and n_pairs > FULL_RELAXATION_MAX_PAIRS:
        sym = symmetric_lp_bound(ctx, table_wise, max(0.1, 0.5 * time_limit))
    if sym is not None and math.isfinite(sym):
        # too large to branch on (856 x 128: building alone ~11 s, the LP not done in 20 s); the symmetric LP is the
        # full relaxation's LP bound (build_symmetric_lp)
        return AnalyticBound(
            value_ms=sym, status="bound", table_wise=table_wise, solver=solver, time_s=time.perf_counter() - start, covers=covers,
            cost_model=model_name, lp_bound_ms=sym, multipliers=len(ctx.lams), source="symmetric LP",
            solver_message=f"LP relaxation with the devices' variables equal ({n_pairs:,} pairs: not branched on)",
        )
    model, layout = build_relaxation(ctx, table_wise)
    left = max(0.1, 0.97 * time_limit - 0.1 - (time.perf_counter() - start))  # a reserve for judging the plan
    res = _solve_highs(model, layout, left)
    elapsed = time.perf_counter() - start
    sizes = dict(variables=model.n_vars, rows=model.n_rows, integer_variables=int(sum(model.integer)), multipliers=len(ctx.lams))
    if res["status"] == "infeasible":
        why = ("no assignment of whole tables fits in the devices' memory (HiGHS proved the bin packing infeasible)" if table_wise else
               "no split of the tables into column shards (widths multiples of 4) fits in the devices' memory "
               "(HiGHS proved the memory rows of the relaxation infeasible)")
        return AnalyticBound(math.inf, "infeasible", table_wise, solver, elapsed, covers, model_name, reason=why,
                             solver_message=res["message"], **sizes)
    plan = relaxation_plan(ctx, layout, res["x"], model_name) if res["x"] is not None else None
    plan_cost = ctx.bm.plan_costs(plan).max_cost if plan is not None else None
    value, source, lp_bound = res["bound"], "relaxation", res["lp_bound"]
    if lp_bound is None and symmetric:  # the full LP ran out of time: the same LP bound, the cheap way
        sym = symmetric_lp_bound(ctx, table_wise, max(0.1, time_limit - (time.perf_counter() - start)))
        if sym is not None and math.isfinite(sym):
            lp_bound = sym
            if sym > value:
                value, source = sym, "symmetric LP"
    if not math.isfinite(value):  # HiGHS proved nothing in time (not even the LP): the bound that needs no solver
        value, source = table_cut_bound(ctx, table_wise), "table cuts"  # (its values computed for the relaxation's rows)
    return AnalyticBound(
        value_ms=value, status=res["status"], table_wise=table_wise, solver=solver, time_s=time.perf_counter() - start, covers=covers,
        cost_model=model_name, relaxation_primal_ms=res["primal"], lp_bound_ms=lp_bound, plan_cost_ms=plan_cost, plan=plan,
        solver_message=res["message"], source=source, **sizes,
    )


def relaxation_plan(ctx: AnalyticRelaxation, layout: _Layout, solution: np.ndarray, cost_model: str = "analytic") -> Plan | None:
    """The plan the relaxation's best point describes (n[t, d] x 4 columns of t on d, one shard each): a real plan
    that fits in memory (the memory rows are exact for one shard per pair), judged by the full model. With the
    bound it gives a plan whose distance from the best covered plan is certified. None if it fails the checker."""
    from shardopt.ir import Shard
    from shardopt.plan_check import check_plan

    inst = ctx.bm.instance
    shards = []
    offset = [0] * len(inst.tables)
    for t, d in layout.pairs:
        units = int(round(solution[layout.n[(t, d)]]))
        if units <= 0:
            continue
        table = inst.tables[t]
        width = units * DIM_ALIGNMENT
        whole = offset[t] == 0 and width == table.dim
        shards.append(Shard(table=table.name, device=d) if whole else Shard(table=table.name, device=d, col_offset=offset[t], cols=width))
        offset[t] += width
    plan = Plan(solver="analytic_bound", cost_model=cost_model, shards=shards, instance=inst.content_hash())
    return plan if check_plan(inst, plan).ok else None


def _solve_highs(model: _Model, layout: _Layout, time_limit: float) -> dict[str, Any]:
    """Solve the LP relaxation, then the MILP with the time left; the bound is the larger of the LP optimum and
    the MILP's dual bound (scipy reports no dual bound when HiGHS found no integer solution in time, so the LP's is
    the fallback; both are lower bounds of the relaxation's optimum)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    start = time.perf_counter()
    c = np.zeros(model.n_vars)
    c[layout.z] = 1.0
    a = csr_matrix((model.vals, (model.rows, model.cols)), shape=(model.n_rows, model.n_vars))
    cons = LinearConstraint(a, np.array(model.row_lo), np.array(model.row_hi))
    bounds = Bounds(np.array(model.lb), np.array(model.ub))

    def run(integer: bool, limit: float) -> Any:
        return milp(c, constraints=cons, integrality=np.array(model.integer) if integer else None, bounds=bounds,
                    options={"time_limit": float(max(limit, 0.05)), "mip_rel_gap": MIP_REL_GAP, "disp": False})

    lp = run(False, time_limit)
    if lp.status == 2:
        return {"status": "infeasible", "bound": math.inf, "primal": None, "x": None, "lp_bound": None, "message": lp.message}
    if lp.status == 1:  # the limit came during the LP: the MILP (its presolve alone) would only overrun it
        return {"status": "bound", "bound": -math.inf, "primal": None, "x": None, "lp_bound": None, "message": f"LP relaxation: {lp.message}"}
    lp_bound = float(lp.fun) if lp.status == 0 and lp.fun is not None else -math.inf
    res = run(True, time_limit - (time.perf_counter() - start))
    primal = float(res.fun) if res.x is not None and res.fun is not None else None
    dual = getattr(res, "mip_dual_bound", None)
    dual = float(dual) if dual is not None and math.isfinite(dual) else -math.inf
    out = {"primal": primal, "x": res.x, "lp_bound": lp_bound if math.isfinite(lp_bound) else None, "message": res.message}
    if res.status == 2:
        return {**out, "status": "infeasible", "bound": math.inf}
    if res.status == 0 and primal is not None:
        return {**out, "status": "optimal", "bound": min(max(dual, lp_bound), primal)}
    return {**out, "status": "bound", "bound": max(dual, lp_bound)}


def relaxation_value_at(instance: Instance, shards: Sequence[tuple[int, int, int]], cost_model: CostModel | None = None,
                        *, table_wise: bool = False, time_limit: float = 10.0) -> float:
    """The relaxation's optimum with x and n fixed to a plan ((table index, device, width) triples; several shards
    of a table on a device allowed): the whole MILP, every row included, judged at one point. It must be <= the
    plan's analytic cost (the validity argument of docs/analytic-bound.md, in one number); +inf when the point is
    infeasible in the relaxation (which for a plan that fits in memory would be a bug). Devices of a symmetry class
    are first reordered by pooled width, as the symmetry rows require (the cost is unchanged by the reordering)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    ctx = AnalyticRelaxation(instance, cost_model)
    width: dict[tuple[int, int], int] = {}
    for t, d, w in shards:
        width[(t, d)] = width.get((t, d), 0) + int(w)
    perm = _symmetry_order(instance, width)
    width = {(t, perm[d]): w for (t, d), w in width.items()}
    model, layout = build_relaxation(ctx, table_wise)
    lb, ub = np.array(model.lb), np.array(model.ub)
    for p in layout.pairs:
        units = width.get(p, 0) // DIM_ALIGNMENT
        lb[layout.n[p]] = ub[layout.n[p]] = units
        lb[layout.x[p]] = ub[layout.x[p]] = 1 if units else 0
    if any(p not in layout.x for p in width):
        return math.inf  # a shard where the relaxation has no variable: it does not fit there
    c = np.zeros(model.n_vars)
    c[layout.z] = 1.0
    a = csr_matrix((model.vals, (model.rows, model.cols)), shape=(model.n_rows, model.n_vars))
    res = milp(c, constraints=LinearConstraint(a, np.array(model.row_lo), np.array(model.row_hi)),
               integrality=np.array(model.integer), bounds=Bounds(lb, ub),
               options={"time_limit": time_limit, "disp": False, "mip_rel_gap": 1e-9})
    return float(res.fun) if res.status == 0 else math.inf


def _symmetry_order(instance: Instance, width: dict[tuple[int, int], int]) -> dict[int, int]:
    """device -> device: within each symmetry class, the widest device first (stable)."""
    u: dict[int, int] = {}
    for (_, d), w in width.items():
        u[d] = u.get(d, 0) + w
    perm = {d: d for d in range(instance.topology.num_devices)}
    for cls in _symmetry_classes(instance):
        for new, old in zip(cls, sorted(cls, key=lambda d: -u.get(d, 0))):
            perm[old] = new
    return perm


def _memory_reason(instance: Instance, terms: ShardTerms, table_wise: bool) -> str | None:
    """Counting arguments that prove no covered plan fits: a table none of whose shards fits anywhere; the tables'
    least bytes (one shard each) beyond the devices' total."""
    caps = instance.topology.capacities()
    opt = instance.workload.optimizer.value
    for i, tab in enumerate(instance.tables):
        need = terms.mem_col[i] * (tab.dim if table_wise else DIM_ALIGNMENT) + terms.mem_fixed[i]
        if need > max(caps):
            what = "the whole table" if table_wise else f"even a {DIM_ALIGNMENT}-column shard"
            return (f"table {tab.name!r}: {what} needs {int(need):,} bytes (weights and {opt} state) but the largest device "
                    f"holds {max(caps):,} bytes")
    least = float((terms.mem_col * terms.dims + terms.mem_fixed).sum())
    if least > sum(caps):
        return (f"the tables need at least {int(least):,} bytes (weights and {opt} state, one shard each) but the "
                f"{len(caps)} devices hold {sum(caps):,}: short by {int(least - sum(caps)):,} bytes")
    return None


def plan_gap(instance: Instance, plan_cost: float | Plan, bound: AnalyticBound | float, cost_model: CostModel | None = None) -> float:
    """(cost - bound) / cost: how far a plan can at most be from the best covered plan. `plan_cost` may be a Plan,
    judged by the analytic model (`cost_model`, else the one the bound was computed for)."""
    if isinstance(plan_cost, Plan):
        if cost_model is None:
            from costmodels.registry import get_cost_model

            cost_model = get_cost_model(bound.cost_model if isinstance(bound, AnalyticBound) else "analytic")
        plan_cost = cost_model.plan_costs(instance, plan_cost).max_cost
    value = bound.value_ms if isinstance(bound, AnalyticBound) else float(bound)
    return (float(plan_cost) - value) / float(plan_cost) if plan_cost > 0 else 0.0
