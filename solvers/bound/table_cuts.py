"""Table cuts: z >= Psi_t(k) when table t lies on k devices (`table_cut_values`). As lines in k they are rows of
the relaxation (`table_cut_lines`); their least value over k is a bound that needs no solver (`table_cut_bound`),
the fallback when HiGHS proves nothing within the time limit.
"""

from __future__ import annotations

import math

import numpy as np

from shardopt.core.ir import DIM_ALIGNMENT
from solvers.bound.context import AnalyticRelaxation, _device_bound
from solvers.bound.inequalities import _cross, comm_floor


def table_cut_values(ctx: AnalyticRelaxation, table: int, max_devices: int) -> np.ndarray:
    """Psi_t(k), k = 1..max_devices: a lower bound of the plan cost when table t lies on k devices.

    One of those devices holds >= W_k = 4 ceil(units / k) of t's columns; its compute is >= what the relaxation
    charges t's part alone (adding shards never lowers the per-device bound: docs/analytic-bound.md), which does
    not decrease with the width, and its all-to-all >= `comm_floor(W_k)`."""
    units = int(ctx.terms.dims[table]) // DIM_ALIGNMENT
    top = max(1, min(max_devices, units))
    key = (int(table), top)
    if key not in ctx.cut_values:  # (computed once: the relaxation's rows and the fallback bound both use them)
        total = ctx.alltoall_total_floor(table)
        at: dict[int, float] = {}  # by width: k devices give few distinct widths (512 devices, 64 units: 15)
        vals = []
        for k in range(1, top + 1):
            w = DIM_ALIGNMENT * math.ceil(units / k)
            if w not in at:
                at[w] = _device_bound(ctx, [(table, w)]).total_ms + comm_floor(ctx.bm, w, total)
            vals.append(at[w])
        ctx.cut_values[key] = np.array(vals)
    return ctx.cut_values[key]


def table_cut_bound(ctx: AnalyticRelaxation, table_wise: bool = False) -> float:
    """A bound that needs no solver: every table lies on some k devices, so z >= min_k Psi_t(k) for every table t
    (`table_cut_values`; table-wise, k = 1), or a replicable table is replicated (`replica_floor_ms`), or a table is
    split by rows (then only a busy device's launches and kernel floors). Weak unless one table dominates, but always there: the bound falls back
    to it when HiGHS proves nothing within the time limit."""
    D = ctx.bm.num_devices

    def least(t: int) -> float:
        v = float(table_cut_values(ctx, t, 1 if table_wise else D).min())
        if table_wise:
            return v
        if ctx.replicable[t]:
            v = min(v, ctx.replica_floor_ms(t))
        if ctx.row_split[t] or ctx.host_row_split[t]:  # split by rows, it only makes some device busy
            v = min(v, ctx.terms.launch_ms + 2 * ctx.terms.min_kernel_ms)
        return v

    return max((least(t) for t in range(len(ctx.terms.dims))), default=0.0)


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
