"""Table cuts: z >= Psi_t(k) when table t lies on k devices (`table_cut_values`). As lines in k they are rows of
the relaxation (`table_cut_lines`); their least value over k is a bound that needs no solver (`table_cut_bound`),
the fallback when HiGHS proves nothing within the time limit. The receive rows' lines (`receive_cut_lines`,
`row_block_cut_lines`) are the same cut through `host_receive_floor` with the all-to-all total left to the LP: what
the device holding a table's largest part (a column part, or a row block) pays besides the all-to-alls.
"""

from __future__ import annotations

import math

import numpy as np

from costmodels.analytic import BWD_LAUNCHES, MS
from shardopt.core.ir import DIM_ALIGNMENT
from solvers.bound.context import AnalyticRelaxation, _device_bound
from solvers.bound.inequalities import _cross, comm_floor, hits_upper_bound

# edges of each receive row's hull kept (`lower_hull_lines`): the class LPs' time grows with them (production-xl)
RECEIVE_LINES = 12


def widest_part_compute(ctx: AnalyticRelaxation, table: int, max_devices: int) -> np.ndarray:
    """c_t(k), k = 1..max_devices: what the relaxation charges, at least, the device holding the widest part of table t
    when t lies on k devices (W_k = 4 ceil(units / k) of its columns: adding shards never lowers the per-device bound,
    docs/analytic-bound.md, and the bound does not decrease with the width)."""
    units = int(ctx.terms.dims[table]) // DIM_ALIGNMENT
    top = max(1, min(max_devices, units))
    key = (int(table), top)
    if key not in ctx.part_compute:  # (computed once: the relaxation's rows and the fallback bound all use them)
        at: dict[int, float] = {}  # by width: k devices give few distinct widths (512 devices, 64 units: 15)
        vals = []
        for k in range(1, top + 1):
            w = DIM_ALIGNMENT * math.ceil(units / k)
            if w not in at:
                at[w] = _device_bound(ctx, [(table, w)]).total_ms
            vals.append(at[w])
        ctx.part_compute[key] = np.array(vals)
    return ctx.part_compute[key]


def table_cut_values(ctx: AnalyticRelaxation, table: int, max_devices: int) -> np.ndarray:
    """Psi_t(k), k = 1..max_devices: a lower bound of the plan cost when table t lies on k devices: the widest part's
    device pays `widest_part_compute` and an all-to-all >= `comm_floor(W_k)`; with its host mates' sends, the plan
    cost is also >= the receive floor (`ctx.receive`: `host_receive_terms`) of that compute and the least width the all-to-alls
    carry."""
    units = int(ctx.terms.dims[table]) // DIM_ALIGNMENT
    top = max(1, min(max_devices, units))
    key = (int(table), top)
    if key not in ctx.cut_values:
        total = ctx.alltoall_total_floor(table)
        compute = widest_part_compute(ctx, table, max_devices)
        widths = DIM_ALIGNMENT * np.ceil(units / np.arange(1, top + 1)).astype(np.int64)
        floors = {int(w): comm_floor(ctx.bm, float(w), total) for w in np.unique(widths)}  # (few distinct widths)
        values = compute + np.array([floors[int(w)] for w in widths])
        if ctx.receive is not None:
            start, per_compute, per_total = ctx.receive
            values = np.maximum(values, start + per_compute * compute + per_total * total)
        ctx.cut_values[key] = values
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
    return lower_hull_lines(table_cut_values(ctx, table, max_devices))


def receive_cut_lines(ctx: AnalyticRelaxation, table: int, max_devices: int) -> list[tuple[float, float]]:
    """Lines c >= alpha + beta k of the lower convex hull of the points (k, `widest_part_compute`): with
    `host_receive_terms`, rows z >= S + B (alpha + beta k_t) + C T of a relaxation whose all-to-all total T is a
    variable (the width of the tables not replicated nor split within a host), where the constant least total of
    `table_cut_values` counts every table that may leave it as gone."""
    return lower_hull_lines(widest_part_compute(ctx, table, max_devices), RECEIVE_LINES)


def row_block_cut_values(ctx: AnalyticRelaxation, table: int, max_blocks: int) -> np.ndarray:
    """c_t(k), k = 2..max_blocks: what a device holding the largest of k row blocks of table t is charged at least. One
    of k blocks holds a share rho >= 1/k of the rows; its device pays its launches and the block's kernels (`RowTerms`:
    per block + rho x per share, exact at occupancy 1, which only lowers them), the forward less the L2 hits its
    sectors can give (`hits_upper_bound` of rho x the full-width sector bytes, as the relaxation's cache rows take a
    block) and at least the kernels' floor."""
    key = (int(table), max(2, max_blocks))
    if key not in ctx.block_compute:  # (computed once: every class LP's receive rows use them)
        t, rows = ctx.terms, ctx.rows
        launch = ctx.bm.profile.launch_overhead_s * MS
        out = []
        for k in range(2, key[1] + 1):
            rho = 1.0 / k
            hits = max(0.0, hits_upper_bound(t, ctx.lams, ctx.slopes, {int(table): rho * float(rows.sb[table])})) if t.kappa_ms > 0 else 0.0
            fwd = rows.fwd_block_ms[table] + rho * rows.fwd_rho_ms[table] - t.kappa_ms * hits
            bwd = rows.bwd_block_ms[table] + rho * rows.bwd_rho_ms[table]
            out.append((1 + BWD_LAUNCHES) * launch + max(t.min_kernel_ms, fwd) + max(t.min_kernel_ms, bwd))
        ctx.block_compute[key] = np.array(out)
    return ctx.block_compute[key]


def row_block_cut_lines(ctx: AnalyticRelaxation, table: int, max_blocks: int) -> list[tuple[float, float]]:
    """Lines c >= alpha + beta k of the lower convex hull of (k, `row_block_cut_values`), k = 2..max_blocks (a split
    by rows has two blocks or more). Rows with `host_receive_terms`, like `receive_cut_lines`."""
    return [(a - b, b) for a, b in lower_hull_lines(row_block_cut_values(ctx, table, max_blocks), RECEIVE_LINES)]  # (from i = k - 1 to k)


def lower_hull_lines(vals: np.ndarray, most: int | None = None) -> list[tuple[float, float]]:
    """Lines v >= alpha + beta k of the lower convex hull of the points (k, vals[k - 1]), k = 1..len(vals); with `most`,
    at most that many of its edges, spread geometrically from the first (each edge is valid alone: fewer only weaken
    the rows, and a convex curve such as a + b / k over 1,024 block counts has an edge at every k)."""
    pts = list(zip(range(1, len(vals) + 1), np.asarray(vals, dtype=np.float64).tolist()))
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
    if most is not None and len(lines) > most:
        keep = np.unique(np.round(np.geomspace(1, len(lines), most)).astype(int) - 1)
        lines = [lines[i] for i in keep]
    return lines
