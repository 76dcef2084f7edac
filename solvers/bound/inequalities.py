"""The relaxation's closed-form inequalities, each a function of the terms (solvers.bound.terms) alone:
the lower convex hull of the sector waste, the cache-hit bound (the dual of the fractional knapsack: its
multipliers and slopes), and the all-to-all as a max of linear pieces (`comm_pieces`, `comm_floor`).
Proofs: docs/analytic-bound.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodels.analytic import BoundAnalytic, sector_bytes
from shardopt.core.ir import DIM_ALIGNMENT
from solvers.bound.terms import ShardTerms

ROUNDOFF = 1e-12  # relative float round-off treated as zero in the cache rows
MAX_MULTIPLIERS = 64  # knapsack multipliers (lam) per device: rows of the cache bound


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
    ct = bm.comm_terms()
    lat = 2 * ct.latency_ms
    ls, rs = 2 * scale_at(ct.local_scale, device), 2 * scale_at(ct.remote_scale, device)  # receives
    ss_l, ss_r = (2 * scale_at(s, device) for s in ct.send_scales)  # sends (the same, unless levels were pooled)
    nl, nr = float(ct.local_peers[device]), float(ct.remote_peers[device])
    if ct.single_host:
        return [CommPiece(lat, ss_l * nl, 0.0), CommPiece(lat + ls * total_width, -ls, 0.0)]
    pieces = [
        CommPiece(lat, ss_l * nl, 0.0),
        CommPiece(lat, -ls, ls),
        CommPiece(lat, ss_r * nr, 0.0),
        CommPiece(lat + rs * total_width, 0.0, -rs),
    ]
    gs, gr = 2 * ct.group_send_scale, 2 * ct.group_recv_scale  # (a graph's shared links: its group's bytes together)
    if gs > 0:
        pieces.append(CommPiece(lat, 0.0, gs))
    if gr > 0:
        pieces.append(CommPiece(lat + gr * total_width, 0.0, -gr))
    return pieces


def scale_at(scale: float | np.ndarray, device: int) -> float:
    """A scale of one device (a job that mixes kinds has one per device: its own links)."""
    return float(scale) if np.ndim(scale) == 0 else float(np.asarray(scale)[device])


def comm_floor(bm: BoundAnalytic, width: float, total: float | None = None) -> float:
    """A lower bound (ms, fwd + bwd) of the all-to-all of *any* device whose pooled width is >= `width`: the least,
    over devices, of the pieces that do not decrease with the device's own width (its sends), and on one host
    also the receive piece, since max(n_l u, total - u) >= max(n_l width, n_l total / (n_l + 1)) for u >= width."""
    if bm.num_devices == 1:
        return 0.0
    total = float(bm.table_dims.sum()) if total is None else total  # (the all-to-alls' least total width)
    ct = bm.comm_terms()
    nl, nr = ct.local_peers.astype(np.float64), ct.remote_peers.astype(np.float64)
    send_l, send_r = ct.send_scales
    if ct.single_host:
        # max(s nl u, r (total - u)) over u is least where the two meet: s nl r total / (s nl + r) (s = r: nl total / (nl + 1))
        t = np.maximum(send_l * nl * width, send_l * nl * ct.local_scale * total / (send_l * nl + ct.local_scale))
    else:
        t = np.maximum(send_l * nl * width, send_r * nr * width)
    return float((2 * (ct.latency_ms + t)).min())


def host_receive_terms(bm: BoundAnalytic) -> tuple[float, float, float] | None:
    """(S, B, C) of the receive floor: the plan cost is >= S + B c + C T wherever some device's charge outside the
    all-to-alls is >= c and the all-to-alls carry >= T of width in all; None where it does not apply (one host; scales
    or peer counts that differ by device).

    Why: that device receives rr (T - v) per direction from other hosts, v its host's width, and a host that holds
    much width to receive little must send it: each host mate i pays sr n_r u_i. Weighting the holder's receive
    piece by 1, its send piece and each of its L - 1 mates' send pieces by rho = rr / (sr n_r) (the weights that
    cancel v and the holder's own width u) and dividing by their sum gives S = 2 lat, B = (1 + rho) / (1 + L rho),
    C = rr / (1 + L rho) (rr, sr both directions): a device with a heavy part of a table pays it on top of nearly the
    whole receive, however its host's width is spread (docs/analytic-bound.md, row 12b)."""
    if bm.num_devices == 1:
        return None
    ct = bm.comm_terms()
    send_r = ct.send_scales[1]
    if ct.single_host or np.ndim(ct.remote_scale) or np.ndim(send_r) or len(set(ct.remote_peers.tolist())) != 1:
        return None
    nr = float(ct.remote_peers[0])
    rr, sr = 2 * float(ct.remote_scale), 2 * float(send_r)
    if nr <= 0 or rr <= 0 or sr <= 0:
        return None
    rho = rr / (sr * nr)
    weights = 1 + ct.local_size * rho
    return 2 * ct.latency_ms, (1 + rho) / weights, rr / weights


def host_receive_floor(bm: BoundAnalytic, compute: float, total: float) -> float:
    """`host_receive_terms` at one device's charge `compute` and the all-to-alls' total `total`; -inf where they do
    not apply."""
    terms = host_receive_terms(bm)
    if terms is None:
        return -math.inf
    start, per_compute, per_total = terms
    return start + per_compute * compute + per_total * total
