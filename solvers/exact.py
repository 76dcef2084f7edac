"""Exact solvers: the min-max assignment with hard memory capacities, solved by CP-SAT or a MILP solver under a
linearisation of the cost model, re-linearised around every better plan.

Model (one binary x[t, d] per table and device where the table fits; solvers.linearize for the cost terms)::

    minimise z
    sum_d x[t, d] = 1                                   every table on exactly one device
    sum_t bytes_t x[t, d] <= capacity_d                 weights + optimizer state (shardopt.core.memory)
    u_d = sum_t dim_t x[t, d]                           pooled width of device d
    m_d >= k0[d, k] + k1[d, k] u_d + k2[d, k] v_h(d)    comm planes (v_h = sum of u over host h)
    y_d >= x[t, d], y_d <= sum_t x[t, d]                y_d: device d holds a table (an empty device computes nothing)
    z >= c0[d] y_d + sum_t a[t, d] x[t, d] + m_d        device cost, every device

The loop (`ExactSolver.solve`): warm start = the best plan of the heuristics (greedy, the proxy greedies and
round-robin, judged by the full cost model); linearise around it; solve the linear model (CP-SAT gets a complete
hint -- every x, u, m, y and z -- and the cutoff z <= the hint's cost; CBC a warm-start solution; scipy's HiGHS takes
none), preferring among equal z the plan that moves the fewest tables (the linearisation is accurate near its point);
judge the plan with the full model; if it is better, re-linearise around it and solve again; if not, solve again in
a trust region (at most R tables move, R halved each time) until R < 1; stop there or at the time limit. The best
plan by the *full* model is returned, so the result is never worse than the warm start. The reported lower bound is
the best bound of the linearised problem around the returned plan (raised by the table-cut bound): a bound of the
linear model, not of the full cost model (docs/exact-solvers.md).

CP-SAT needs integers: every cost coefficient is rounded down to units of 1e-4 ms (`COST_SCALE`), so the integer
model never over-states a plan's linear cost and its bound less one unit is a bound of the real-coefficient model; a
comm plane constraint is multiplied by a further power of ten so that its per-unit-width slopes keep at least 6
significant digits (`plane_scale` in `info`). The MILPs use the real coefficients.

Valid cuts: ``z >= sum_d lb[t, d] x[t, d]`` (`table_lower_bounds`) for the tables whose cost alone may bind.

Symmetry: devices on one host with the same capacity are interchangeable in the full model; when their linearised
cost terms are identical too (e.g. devices that are empty at the expansion point), the devices of such a class are
ordered by the largest table they hold: the i-th device of a class may only hold tables of rank >= i in the
bytes-descending order (valid: sort the class's devices by the best-ranked table each holds). The hint is permuted
to match. Classes whose linear terms differ are left alone (breaking them would cut off better plans).

Infeasibility: shardopt.core.feasibility's necessary conditions first (status `infeasible` with the table or the byte
count); then a solver that proves the bin packing impossible gives `infeasible` with a reason naming the capacity
problem.

Exact neural mode (`milp_exact_neural`, the neural cost model only, at most EXACT_NEURAL_MAX_TABLES tables x
EXACT_NEURAL_MAX_DEVICES devices): the compute model's head is encoded exactly (see `neural_head_extra`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.feasibility import infeasibility_reason
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Shard
from shardopt.core.memory import slice_bytes, table_bytes_array
from solvers.base import Solver, SolveResult, SolveStatus, Stopwatch, fail, finish
from solvers.linear_search import linear_local_search
from solvers.linearize import COMM_FORMS, Linearization, linearize
from solvers.split_items import Items, build_items, split_candidates, split_counts

COST_SCALE = 10_000  # CP-SAT cost unit: 1e-4 ms
MOVE_TIEBREAK_MS = 1e-7  # MILPs: objective z - this x (tables left where they are): ties in z go to fewer moves
DEFAULT_TIME_LIMIT = 60.0
WARM_START_SOLVERS = ("greedy", "size", "dim", "lookup", "size_lookup", "round_robin")
EXACT_NEURAL_MAX_TABLES = 12
EXACT_NEURAL_MAX_DEVICES = 4
LARGE_MODEL = 20_000  # CP-SAT: above this many (item, device) variables, no presolve (see solve_cpsat)
DEFAULT_MAX_SPLIT = 8  # column pieces offered: halves, quarters, eighths
DEFAULT_SPLIT_TABLES = 16  # ... for the tables with the highest compute alone (split_items.split_candidates)
DEFAULT_NEIGHBOURHOOD = 16  # models over LARGE_MODEL pairs: re-solve 8 slowest + 8 light devices at a time (_neighbourhoods)
DEFAULT_PRESPLIT_SHARE = 0.15  # with splits: the pre-split grid plan is a warm start, its polish within this share of the limit
# large models (neighbourhood search), analytic cost model, `certified_bound=True`: the certified bound's share of the
# time limit. Off by default: on 856 x 128 in 60 s it costs the search ~4.5 s (plan 10.149 against 10.118 ms) for a
# bound of 9.886 ms instead of the table cuts' 7.118; `shardopt bound` gives the same bound outside the solve's time.
CERTIFIED_BOUND_SHARE = 0.15
CERTIFIED_BOUND_MAX_S = 15.0
DEFAULT_SEARCH_SHARE = 0.25  # each new plan: a local search of the linear model (solvers.linear_search) within this share of the time left
SEARCH_STALL = 30  # ... which stops after this many kicks in a row without a new best


class _Bound(CostModel):
    """A cost model that hands back one binding (heuristics for the warm start reuse the solver's)."""

    def __init__(self, bm: BoundCostModel, name: str):
        self.bm = bm
        self.name = name

    def bind(self, instance: Instance) -> BoundCostModel:
        return self.bm

    def describe(self) -> str:
        return self.name


@dataclass
class Problem:
    """What every backend needs besides the linearisation: the items (whole tables and their column splits), memory,
    the allowed (item, device) pairs, symmetry, the plan in hand."""

    instance: Instance
    items: Items
    sizes: np.ndarray  # [I] bytes of one shard of each item
    caps: np.ndarray  # [D] bytes
    allowed: np.ndarray  # [I, D] bool: a shard fits and symmetry breaking allows it
    classes: list[list[int]]  # symmetry classes used (devices, in order), each of >= 2 devices
    rank: np.ndarray  # [I] position of each item in bytes-descending order (symmetry breaking, `_canonical`)
    center: np.ndarray | None = None  # [I, D] the plan in hand: ties in z go to the solution that moves fewest shards from it
    radius: int | None = None  # trust region: at most `radius` shards of `center` may leave their device
    tiebreak: bool = True
    table_cuts: bool = True
    lb: np.ndarray | None = None  # [I, D] table_lower_bounds of the linearisation (for the cuts), when computed

    @property
    def num_tables(self) -> int:
        return self.items.num_tables

    @property
    def num_items(self) -> int:
        return len(self.sizes)

    @property
    def num_devices(self) -> int:
        return len(self.caps)

    @property
    def upper(self) -> np.ndarray:
        """[I] the most pieces of an item one device may hold (Items.most_per_device)."""
        return self.items.most_per_device


@dataclass
class LinearSolve:
    """One backend call on one linearised model."""

    status: str  # optimal | feasible (time limit, solution found) | infeasible | unknown (time limit, none)
    counts: np.ndarray | None  # [I, D] shards of each item on each device
    objective: float | None  # linearised cost of the solution (ms)
    bound: float | None  # best bound of the linearised problem (ms)
    build_s: float
    solve_s: float
    info: dict[str, Any] = field(default_factory=dict)


def _symmetry(instance: Instance, lin: Linearization, fits: np.ndarray, items: Items) -> tuple[np.ndarray, list[list[int]], np.ndarray]:
    """(allowed mask after symmetry breaking, the classes it used, each item's rank in bytes-descending order).

    Rule: give item i ``parts_i`` consecutive slots in rank order; the p-th device of a class may hold only items
    whose last slot is >= p. Valid: sort a class's devices by the best-ranked item each holds; an item is on at most
    parts_i devices, so the devices up to position p hold, as their best items, items whose slots number >= p + 1 --
    the p-th device's best item (and every worse one) ends at slot >= p. Whole tables only: the i-th device holds
    no table ranked before i."""
    D = instance.topology.num_devices
    caps = instance.topology.capacities()
    host = lin.host
    groups: dict[tuple, list[int]] = {}
    for d in range(D):
        key = (
            int(host[d]),
            int(caps[d]),
            lin.a[:, d].round(12).tobytes(),
            round(float(lin.c0[d]), 12),
            np.stack([lin.k0[d], lin.k1[d], lin.k2[d]]).round(12).tobytes(),
        )
        groups.setdefault(key, []).append(d)
    classes = [g for g in groups.values() if len(g) > 1]
    order = np.argsort(-items.size, kind="stable")
    rank = np.empty(items.num_items, dtype=np.int64)
    rank[order] = np.arange(items.num_items)
    last_slot = np.empty(items.num_items, dtype=np.int64)
    last_slot[order] = np.cumsum(items.parts[order]) - 1
    allowed = fits.copy()
    for cls in classes:
        for pos, d in enumerate(cls):
            allowed[last_slot < pos, d] = False
    return allowed, classes, rank


def _canonical(counts: np.ndarray, classes: list[list[int]], rank: np.ndarray) -> np.ndarray:
    """Permute the devices of each class so that the plan meets the symmetry-breaking rule (same costs)."""
    out = counts.copy()
    for cls in classes:
        best = []
        for d in cls:
            on = np.flatnonzero(counts[:, d] > 0)
            best.append(int(rank[on].min()) if len(on) else 10**12)
        order = [cls[i] for i in np.argsort(best, kind="stable")]  # devices by best-ranked item held
        out[:, cls] = counts[:, order]
    return out


def _packing_reason(instance: Instance, prover: str, max_split: int = 1) -> str:
    sizes = table_bytes_array(instance)
    caps = np.array(instance.topology.capacities(), dtype=np.int64)
    order = np.argsort(-sizes, kind="stable")
    largest = ", ".join(f"{instance.tables[i].name!r} {int(sizes[i]):,}" for i in order[:5])
    what = "whole tables" if max_split < 2 else f"whole tables or their column splits (into up to {max_split} shards, on the tables offered splits)"
    why = (
        f"{prover} proved that no assignment of {what} fits in memory: the tables need {int(sizes.sum()):,} bytes "
        f"(weights and {instance.workload.optimizer.value} state) against {int(caps.sum()):,} bytes on {len(caps)} devices, "
        f"but they do not pack (largest tables: {largest}; largest device {int(caps.max()):,} bytes)"
    )
    half = int((sizes * 2 > caps.max()).sum())
    if half > len(caps) and max_split < 2:
        why += f"; {half} tables each need more than half of the largest device, so no two share one, and there are {len(caps)} devices"
    return why


# ---------------------------------------------------------------------------------------------------------------
# backends


def _device_plane_bounds(lin: Linearization, total: float) -> tuple[np.ndarray, np.ndarray]:
    """Per device: a valid lower bound of max_k plane_k(u, v) over 0 <= u, v <= total, and its maximum there."""
    corners = [(0.0, 0.0), (0.0, total), (total, 0.0), (total, total)]
    vals = np.stack([lin.k0 + lin.k1 * u + lin.k2 * v for u, v in corners])  # [4, D, K]
    lo = vals.min(axis=0).max(axis=1)  # each plane's minimum is at a corner; m >= every plane
    hi = vals.max(axis=0).max(axis=1)  # a max of planes is convex: its maximum is at a corner
    return lo, hi


def width_caps(lin: Linearization, sizes: np.ndarray, caps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([D], [D]): upper bounds of the pooled width a device, and its whole host, can hold in memory: the
    fractional-knapsack bound (tables by dim per byte, the last one cut) of the device's / host's capacity."""
    whole = lin.items.whole
    dims, sizes = lin.dims[whole], sizes[whole]  # (a column shard holds no more width per byte than its table)
    order = np.argsort(-(dims / np.maximum(sizes, 1)), kind="stable")
    cum_bytes = np.cumsum(sizes[order].astype(np.float64))
    cum_dims = np.cumsum(dims[order])

    def most(cap: float) -> float:
        k = int(np.searchsorted(cum_bytes, cap, side="right"))  # whole tables that fit
        if k >= len(order):
            return float(cum_dims[-1])
        done_b = cum_bytes[k - 1] if k else 0.0
        done_d = cum_dims[k - 1] if k else 0.0
        return float(done_d + dims[order[k]] * (cap - done_b) / max(float(sizes[order[k]]), 1.0))

    host_cap = np.bincount(lin.host, weights=caps.astype(np.float64))
    umax = np.array([most(float(c)) for c in caps])
    vmax = np.array([most(float(host_cap[h])) for h in lin.host])
    return umax, vmax


def comm_floor(lin: Linearization, widths: np.ndarray, umax: np.ndarray | None = None, vmax: np.ndarray | None = None) -> np.ndarray:
    """[len(widths), D]: a lower bound of each device's linearised comm when its own pooled width is at least
    `widths[i]`: min of max_k plane_k(u, v) over {widths[i] <= u <= umax, u <= v <= vmax} (v: its host's width;
    umax / vmax: what memory lets the device / host hold, `width_caps`), one tiny LP per (width, device), solved
    together as one block-diagonal LP by HiGHS (scipy.optimize.linprog); less 1e-6 ms and 1e-7 relative for the
    LP tolerances."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_array

    widths = np.asarray(widths, dtype=np.float64)
    D, K = lin.num_devices, lin.num_planes
    total = lin.total_width
    umax = np.full(D, total) if umax is None else np.maximum(np.minimum(umax, total), 0.0)
    vmax = np.full(D, total) if vmax is None else np.maximum(np.minimum(vmax, total), umax)
    if K == 1 and not lin.k2.any():  # one plane in u alone: its minimum is at an end of the range
        lo = np.minimum(lin.k0[:, 0] + lin.k1[:, 0] * widths[:, None], lin.k0[:, 0] + lin.k1[:, 0] * np.maximum(umax, widths[:, None]))
        return lo - 1e-6 - 1e-7 * np.abs(lo)
    planes = [np.unique(np.stack([lin.k0[d], lin.k1[d], lin.k2[d]], axis=1), axis=0) for d in range(D)]
    rows, cols, vals, rhs = [], [], [], []
    nb = len(widths) * D
    r = 0
    for i in range(len(widths)):
        for d in range(D):
            b = 3 * (i * D + d)  # variables (w, u, v) of this block
            for k0, k1, k2 in planes[d]:  # k1 u + k2 v - w <= -k0
                rows += [r, r, r]
                cols += [b, b + 1, b + 2]
                vals += [-1.0, k1, k2]
                rhs.append(-k0)
                r += 1
            rows += [r, r]  # u - v <= 0
            cols += [b + 1, b + 2]
            vals += [1.0, -1.0]
            rhs.append(0.0)
            r += 1
    A = coo_array((vals, (rows, cols)), shape=(r, 3 * nb)).tocsr()
    c = np.zeros(3 * nb)
    c[0::3] = 1.0
    lo = np.zeros(3 * nb)
    hi = np.full(3 * nb, total)
    lo[0::3], hi[0::3] = -np.inf, np.inf
    lo[1::3] = np.repeat(np.minimum(widths, total), D)
    hi[1::3] = np.maximum(np.tile(umax, len(widths)), lo[1::3])  # (a table wider than umax: its u is its width)
    hi[2::3] = np.maximum(np.tile(vmax, len(widths)), hi[1::3])
    res = linprog(c, A_ub=A, b_ub=np.array(rhs), bounds=np.stack([lo, hi], axis=1), method="highs")
    if res.status != 0 or res.x is None:  # (never seen) fall back to the weakest valid bound: each plane's own minimum
        verts = [(widths[:, None, None], widths[:, None, None]), (widths[:, None, None], total), (total, total)]
        out = np.min([lin.k0[None] + lin.k1[None] * uu + lin.k2[None] * vv for uu, vv in verts], axis=0).max(axis=2)
    else:
        out = res.x[0::3].reshape(len(widths), D)
    return out - 1e-6 - 1e-7 * np.abs(out)


def table_lower_bounds(lin: Linearization, allowed: np.ndarray, sizes: np.ndarray | None = None, caps: np.ndarray | None = None) -> np.ndarray:
    """[I, D]: a lower bound of device d's linearised cost whenever it holds a shard of item i (inf where not
    allowed; table-wise models: item = table).

    Device d with a shard of i on it costs c0[d] + a[i, d] + (its other terms, >= the sum of d's negative ones, each
    as many times as d may hold that item) + its comm, whose own width is at least the shard's width (`comm_floor`;
    every shipped comm model grows with the own width). Hence the valid inequalities (`_useful_cuts`)
    ``z >= sum_{i of t} sum_d lb[i, d] x[i, d] / parts_i``: the LP relaxation spreads a big table over devices and
    forgets that one device must carry all of it (or a whole shard of it); these cuts remember (on a plan whose
    slowest device holds one huge table they lift the bound from the average load to that device's cost)."""
    upper = lin.items.most_per_device
    neg_terms = np.where(allowed, np.minimum(lin.a, 0.0), 0.0)
    neg = (neg_terms * upper[:, None]).sum(axis=0)  # [D]
    uniq, inv = np.unique(lin.dims, return_inverse=True)
    umax, vmax = width_caps(lin, sizes, caps) if sizes is not None and caps is not None else (None, None)
    floor = comm_floor(lin, uniq, umax, vmax)[inv]  # [I, D]
    lb = lin.c0[None, :] + lin.a + (neg[None, :] - np.minimum(lin.a, 0.0)) + floor
    return np.where(allowed, lb, np.inf)


def table_cut_bound(lb: np.ndarray, items: Items) -> float:
    """A bound of the linear model by itself: every table puts a shard somewhere, so z >= max_t min over t's items
    and devices of lb."""
    least = np.where(np.isfinite(lb), lb, np.inf).min(axis=1)  # [I]
    per_table = np.minimum.reduceat(least, items.first[:-1])
    return float(per_table.max()) if len(per_table) else -math.inf


def _useful_cuts(lb: np.ndarray, items: Items) -> np.ndarray:
    """Tables whose cut may bind: the least cost of holding (a shard of) them is at least half the largest such cost."""
    least = np.minimum.reduceat(np.where(np.isfinite(lb), lb, np.inf).min(axis=1), items.first[:-1])
    top = least.max() if len(least) else -np.inf
    return np.flatnonzero(least >= 0.5 * top) if np.isfinite(top) and top > 0 else np.arange(0)


def solve_cpsat(
    prob: Problem,
    lin: Linearization,
    hint: np.ndarray | None,
    time_limit: float,
    seed: int,
    workers: int,
    deterministic: bool,
    cutoff: bool = True,
    log: bool = False,
    params: dict[str, Any] | None = None,
) -> LinearSolve:
    """CP-SAT on the linear model: one variable per allowed (item, device) -- a Boolean, or a count when the pieces
    of a table need not be apart. A table's pieces cover its dim: sum_i sum_d (width_i / narrowest) x[i, d] =
    dim / narrowest; apart: at most one piece of a table per device."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    items = prob.items
    T, I, D = prob.num_tables, prob.num_items, prob.num_devices
    upper = prob.upper
    S = COST_SCALE
    a_int = np.floor(lin.a * S).astype(np.int64)
    c0_int = np.floor(lin.c0 * S).astype(np.int64)
    dims = lin.dims.astype(np.int64)
    total = int(round(lin.total_width))
    # plane constraints get their own extra factor so that small slopes (ms per unit width) keep their digits
    slopes = np.abs(np.concatenate([lin.k1.ravel(), lin.k2.ravel()]))
    small = slopes[slopes > 0].min() if (slopes > 0).any() else 1.0
    biggest = float(np.abs(lin.k0).max() + (np.abs(lin.k1).max() + np.abs(lin.k2).max()) * max(total, 1)) * S + 1.0
    plane_scale = 1
    while small * S * plane_scale < 1e6 and biggest * plane_scale * 10 < 2**50:
        plane_scale *= 10
    P = S * plane_scale
    k0_int = np.floor(lin.k0 * P).astype(np.int64)
    k1_int = np.floor(lin.k1 * P).astype(np.int64)
    k2_int = np.floor(lin.k2 * P).astype(np.int64)
    m_lo, m_hi = _device_plane_bounds(lin, float(total))

    model = cp_model.CpModel()
    x: dict[tuple[int, int], Any] = {}
    by_item: list[list[tuple[int, Any]]] = [[] for _ in range(I)]
    by_device: list[list[tuple[int, Any]]] = [[] for _ in range(D)]
    for i, d in zip(*np.nonzero(prob.allowed)):
        i, d = int(i), int(d)
        v = model.new_bool_var(f"x{i}_{d}") if upper[i] == 1 else model.new_int_var(0, int(upper[i]), f"x{i}_{d}")
        x[i, d] = v
        by_item[i].append((d, v))
        by_device[d].append((i, v))
    for t in range(T):
        its = range(int(items.first[t]), int(items.first[t + 1]))
        if len(its) == 1:
            model.add_exactly_one([v for _, v in by_item[its[0]]])
            continue
        L = int(items.parts[list(its)].max())  # pieces of the narrowest size that make the table
        model.add(cp_model.LinearExpr.weighted_sum(
            [v for i in its for _, v in by_item[i]], [L // int(items.parts[i]) for i in its for _ in by_item[i]]) == L)
        if items.apart:
            per_device: dict[int, list[Any]] = {}
            for i in its:
                for d, v in by_item[i]:
                    per_device.setdefault(d, []).append(v)
            for vs in per_device.values():
                if len(vs) > 1:
                    model.add_at_most_one(vs)
    for d in range(D):
        its_d = [i for i, _ in by_device[d]]
        if its_d and int((prob.sizes[its_d] * upper[its_d]).sum()) > int(prob.caps[d]):
            model.add(cp_model.LinearExpr.weighted_sum([v for _, v in by_device[d]], [int(prob.sizes[i]) for i in its_d]) <= int(prob.caps[d]))
    u = [model.new_int_var(0, total, f"u{d}") for d in range(D)]
    for d in range(D):
        model.add(u[d] == cp_model.LinearExpr.weighted_sum([v for _, v in by_device[d]], [int(dims[i]) for i, _ in by_device[d]]))
    host_members = [np.flatnonzero(lin.host == h) for h in range(lin.num_hosts)]
    m = [model.new_int_var(math.floor(m_lo[d] * S) - 1, math.ceil(m_hi[d] * S) + 1, f"m{d}") for d in range(D)]
    for d in range(D):
        members = host_members[lin.host[d]]
        for k in range(lin.num_planes):
            terms = [m[d], u[d]] + [u[j] for j in members]
            coefs = [plane_scale, -int(k1_int[d, k])] + [-int(k2_int[d, k])] * len(members)
            if k2_int[d, k] == 0:
                terms, coefs = terms[:2], coefs[:2]
            model.add(cp_model.LinearExpr.weighted_sum(terms, coefs) >= int(k0_int[d, k]))
    y = [model.new_bool_var(f"y{d}") for d in range(D)]
    for d in range(D):
        bools = [v for i, v in by_device[d] if upper[i] == 1]
        for i, v in by_device[d]:
            if upper[i] == 1:
                model.add_implication(v, y[d])
            else:
                model.add(v <= int(upper[i]) * y[d])
        if len(bools) == len(by_device[d]):
            model.add_bool_or(bools + [y[d].Not()])
        else:
            model.add(sum(v for _, v in by_device[d]) >= y[d])
    dev_lo = np.array([min(0, int(c0_int[d])) + sum(min(0, int(a_int[i, d])) * int(upper[i]) for i, _ in by_device[d]) for d in range(D)]) + np.floor(m_lo * S) - 1
    dev_hi = np.array([max(0, int(c0_int[d])) + sum(max(0, int(a_int[i, d])) * int(upper[i]) for i, _ in by_device[d]) for d in range(D)]) + np.ceil(m_hi * S) + 1
    z_lo, z_hi = int(dev_lo.max()), int(dev_hi.max())

    hint_z = None
    if hint is not None:
        dimsum, hostsum = lin.widths(hint)
        m_hint = []
        for d in range(D):
            rhs = k0_int[d] + k1_int[d] * int(round(dimsum[d])) + k2_int[d] * int(round(hostsum[d]))
            m_hint.append(max(int(-(-int(rhs.max()) // plane_scale)), math.floor(m_lo[d] * S) - 1))
        used = hint.sum(axis=0) > 0
        comp = np.where(used, c0_int, 0) + (hint * a_int).sum(axis=0)
        hint_z = int((comp + np.array(m_hint)).max())
        z_hi = max(z_hi, hint_z)
    z = model.new_int_var(z_lo, z_hi, "z")
    for d in range(D):
        its_d = [i for i, _ in by_device[d]]
        model.add(
            z - m[d] - int(c0_int[d]) * y[d] - cp_model.LinearExpr.weighted_sum([v for _, v in by_device[d]], [int(a_int[i, d]) for i in its_d]) >= 0
        )
    if hint is not None:
        for (i, d), v in x.items():
            model.add_hint(v, int(hint[i, d]))
        for d in range(D):
            model.add_hint(u[d], int(round(dimsum[d])))
            model.add_hint(y[d], bool(used[d]))
            model.add_hint(m[d], m_hint[d])
        model.add_hint(z, hint_z)
        if cutoff:
            model.add(z <= hint_z)  # nothing worse than the hint (in the linear model) is of any use
    cuts = 0
    if prob.table_cuts:
        # table_lower_bounds in the integer model: the other terms >= d's negative a_int (as often as d may hold
        # each item); m_d >= the least ceil(plane_int / plane_scale) over {width_i <= u <= v <= total}. For a table
        # with pieces, an average weighted by the share of the dim each holds: L z >= sum_i (L / parts_i) sum_d
        # coef[i, d] x[i, d], L = the largest parts (powers of two)
        lb = prob.lb if prob.lb is not None else table_lower_bounds(lin, prob.allowed, prob.sizes, prob.caps)
        neg_int = (np.where(prob.allowed, np.minimum(a_int, 0), 0) * upper[:, None]).sum(axis=0)  # [D]
        for t in _useful_cuts(lb, items):
            its = range(int(items.first[t]), int(items.first[t + 1]))
            L = int(items.parts[list(its)].max())
            terms, coefs_all = [], []
            for i in its:
                if not by_item[i]:
                    continue
                ds = np.array([d for d, _ in by_item[i]], dtype=np.int64)
                ut = int(dims[i])
                verts = [(ut, ut), (ut, total), (total, total)]
                low = np.min([k0_int[ds] + k1_int[ds] * uu + k2_int[ds] * vv for uu, vv in verts], axis=0)  # [n, K]
                m_min = -((-low) // plane_scale)  # ceil division, exact in integers
                coefs = c0_int[ds] + a_int[i, ds] + neg_int[ds] - np.minimum(a_int[i, ds], 0) + m_min.max(axis=1)
                terms += [v for _, v in by_item[i]]
                coefs_all += [int(c) * (L // int(items.parts[i])) for c in coefs]
            model.add(L * z >= cp_model.LinearExpr.weighted_sum(terms, coefs_all))
            cuts += 1
    tie = prob.center is not None and prob.tiebreak
    N = 0
    if tie:
        assert prob.center is not None
        stay = []
        for i, d in zip(*np.nonzero(prob.center)):
            v = x.get((int(i), int(d)))
            if v is None:
                continue
            c = int(prob.center[i, d])
            if upper[i] == 1:
                stay.append(v)
            else:  # shards kept = min(x, c): pushed up by the objective
                kv = model.new_int_var(0, c, f"k{i}_{d}")
                model.add(kv <= v)
                stay.append(kv)
        N = int(prob.center.sum())
        if prob.radius is not None:
            model.add(sum(stay) >= N - int(prob.radius))
        # lexicographic: z first (one unit of z outweighs every move), then the fewest shards moved -- of the many
        # plans with the same max, the one nearest the expansion point, where the linearisation is accurate
        model.minimize((N + 1) * z - sum(stay))
    else:
        model.minimize(z)
    build_s = time.perf_counter() - t0

    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.01, float(time_limit) - build_s)  # the limit covers building the model too
    if len(x) > LARGE_MODEL:
        prm.cp_model_presolve = False  # presolve of ~1e5 Booleans takes tens of seconds before the hint is used
    prm.num_workers = max(1, int(workers))
    prm.random_seed = int(seed) % (2**31)
    prm.log_search_progress = bool(log)
    for k, v in (params or {}).items():
        setattr(prm, k, v)
    if deterministic and workers > 1:
        prm.interleave_search = True  # deterministic whatever the thread timing (up to the wall-clock limit)
    t1 = time.perf_counter()
    code = solver.solve(model)
    solve_s = time.perf_counter() - t1
    name = solver.status_name(code)
    info = {
        "variables": len(x) + 3 * D + 1,
        "cost_unit_ms": 1.0 / S,
        "plane_scale": plane_scale,
        "planes": lin.num_planes,
        "cpsat_status": name,
        "branches": solver.num_branches,
        "conflicts": solver.num_conflicts,
        "hint_objective": hint_z / S if hint_z is not None else None,
        "table_cuts": cuts,
    }
    if code == cp_model.INFEASIBLE:
        return LinearSolve("infeasible", None, None, None, build_s, solve_s, info)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if code == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT rejected the model: {model.validate()}")
        bound = (_z_bound(solver.best_objective_bound, N, tie) - 1) / S if math.isfinite(solver.best_objective_bound) else None
        return LinearSolve("unknown", None, None, bound, build_s, solve_s, info)
    counts = np.zeros((I, D), dtype=np.int64)
    for (i, d), v in x.items():
        counts[i, d] = int(solver.value(v))
    status = "optimal" if code == cp_model.OPTIMAL else "feasible"
    # the integer model never over-states a cost (coefficients rounded down) except for m_d's own integrality
    # (< 1 unit): one unit below its bound is a bound of the real-coefficient linear model
    bound = (_z_bound(solver.best_objective_bound, N, tie) - 1) / S
    return LinearSolve(status, counts, solver.value(z) / S, bound, build_s, solve_s, info)


def _z_bound(bound: float, N: int, tie: bool) -> float:
    """A bound on z from CP-SAT's bound on (N + 1) z - stay (0 <= stay <= N, z integer): z >= ceil(bound / (N + 1))."""
    return float(math.ceil(bound / (N + 1) - 1e-9)) if tie else float(bound)


@dataclass
class _Rows:
    """A sparse MILP in scipy's form: variables x (pairs), u [D], m [D], z; rows lo <= A v <= hi."""

    pairs: np.ndarray  # [n, 2] (t, d)
    n_vars: int
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)

    def add(self, cols: np.ndarray, vals: np.ndarray, lo: float, hi: float) -> None:
        r = len(self.lo)
        self.rows.extend([r] * len(cols))
        self.cols.extend(int(c) for c in cols)
        self.vals.extend(float(v) for v in vals)
        self.lo.append(lo)
        self.hi.append(hi)


def _milp_rows(prob: Problem, lin: Linearization, hint_cost: float | None) -> tuple[_Rows, dict[str, Any]]:
    """The linearised model as sparse rows (shared by CBC through PuLP and HiGHS through scipy).

    Columns: x (allowed (item, device) pairs, by item then device; binary, or a count 0..parts when the pieces of a
    table need not be apart), k (pieces kept in place, for counts only), then u [D], m [D], y [D], z."""
    items = prob.items
    T, I, D = prob.num_tables, prob.num_items, prob.num_devices
    upper = prob.upper
    pairs = np.argwhere(prob.allowed)  # [n, 2] sorted by item then device
    n = len(pairs)
    center = prob.center
    keep_pairs = (
        np.flatnonzero((center[pairs[:, 0], pairs[:, 1]] > 0) & (upper[pairs[:, 0]] > 1)) if center is not None else np.arange(0)
    )
    K0 = n
    U = K0 + len(keep_pairs)
    M, Y, Z = U + D, U + 2 * D, U + 3 * D
    rows = _Rows(pairs, U + 3 * D + 1)
    total = lin.total_width
    starts = np.searchsorted(pairs[:, 0], np.arange(I + 1))  # pairs are sorted by item
    for t in range(T):  # the pieces cover the table: sum (L / parts_i) x = L (L: the narrowest piece's parts)
        lo_i, hi_i = int(items.first[t]), int(items.first[t + 1])
        idx = np.arange(starts[lo_i], starts[hi_i])
        L = float(items.parts[lo_i:hi_i].max())
        rows.add(idx, L / items.parts[pairs[idx, 0]], L, L)
        if hi_i - lo_i > 1 and items.apart:  # at most one piece of the table per device
            for d in np.unique(pairs[idx, 1]):
                on = idx[pairs[idx, 1] == d]
                if len(on) > 1:
                    rows.add(on, np.ones(len(on)), -np.inf, 1.0)
    order = np.argsort(pairs[:, 1], kind="stable")
    dev_starts = np.searchsorted(pairs[order, 1], np.arange(D + 1))
    by_dev = [order[dev_starts[d] : dev_starts[d + 1]] for d in range(D)]
    # numerics: memory rows are in units of the device's capacity (bytes would put 1e10 beside 1e-5 in one model,
    # which CBC 2.10 cannot take); widths in units of W = the mean device width. Plans are checked exactly after.
    for d in range(D):
        idx = by_dev[d]
        sz = prob.sizes[pairs[idx, 0]].astype(np.float64)
        if (sz * upper[pairs[idx, 0]]).sum() > prob.caps[d]:
            rows.add(idx, sz / float(prob.caps[d]), -np.inf, 1.0)
    W = max(1.0, total / D)
    for d in range(D):
        idx = by_dev[d]
        rows.add(np.append(idx, U + d), np.append(lin.dims[pairs[idx, 0]] / W, -1.0), 0.0, 0.0)
    members = [np.flatnonzero(lin.host == h) for h in range(lin.num_hosts)]
    for d in range(D):
        for k in range(lin.num_planes):
            cols = [M + d, U + d]
            vals = [1.0, -float(lin.k1[d, k]) * W]
            if lin.k2[d, k] != 0:
                cols += [U + j for j in members[lin.host[d]]]
                vals += [-float(lin.k2[d, k]) * W] * len(members[lin.host[d]])
            # merge the duplicate u_d column (d is one of its host's members)
            merged: dict[int, float] = {}
            for c, v in zip(cols, vals):
                merged[c] = merged.get(c, 0.0) + v
            rows.add(np.array(list(merged)), np.array(list(merged.values())), float(lin.k0[d, k]), np.inf)
    for d in range(D):
        idx = by_dev[d]
        if len(idx):  # y_d = 1 iff device d holds a shard (aggregated: one row each way)
            rows.add(np.append(idx, Y + d), np.append(np.ones(len(idx)), -float(upper[pairs[idx, 0]].sum())), -np.inf, 0.0)
        rows.add(np.append(idx, Y + d), np.append(-np.ones(len(idx)), 1.0), -np.inf, 0.0)
        rows.add(
            np.concatenate([idx, [M + d, Y + d, Z]]), np.concatenate([-lin.a[pairs[idx, 0], d], [-1.0, -float(lin.c0[d]), 1.0]]), 0.0, np.inf
        )
    cuts = 0
    if prob.table_cuts:  # z >= sum_{i of t} sum_d lb[i, d] x[i, d] / parts_i (table_lower_bounds), less a hair for tolerances
        lb = prob.lb if prob.lb is not None else table_lower_bounds(lin, prob.allowed, prob.sizes, prob.caps)
        for t in _useful_cuts(lb, items):
            idx = np.arange(starts[items.first[t]], starts[items.first[t + 1]])
            lbv = lb[pairs[idx, 0], pairs[idx, 1]]
            coef = (lbv - 1e-7 * np.maximum(1.0, np.abs(lbv))) / items.parts[pairs[idx, 0]]  # (weights: share of the dim)
            rows.add(np.append(idx, Z), np.append(-coef, 1.0), 0.0, np.inf)
            cuts += 1
    stay = None
    if center is not None:
        on = center[pairs[:, 0], pairs[:, 1]] > 0
        stay_x = np.flatnonzero(on & (upper[pairs[:, 0]] == 1))
        for j, p in enumerate(keep_pairs):  # k <= x (and k <= the center's count, by its bound)
            rows.add(np.array([K0 + j, p]), np.array([1.0, -1.0]), -np.inf, 0.0)
        stay = np.concatenate([stay_x, K0 + np.arange(len(keep_pairs))]).astype(np.int64)
        if prob.radius is not None:
            rows.add(stay, np.ones(len(stay)), float(int(center.sum()) - prob.radius), np.inf)
    m_lo, m_hi = _device_plane_bounds(lin, total)
    keep_hi = center[pairs[keep_pairs, 0], pairs[keep_pairs, 1]].astype(np.float64) if center is not None else np.zeros(0)
    bounds_lo = np.concatenate([np.zeros(n), np.zeros(len(keep_pairs)), np.zeros(D), m_lo - 1.0, np.zeros(D), [-np.inf]])
    bounds_hi = np.concatenate(
        [upper[pairs[:, 0]].astype(np.float64), keep_hi, np.full(D, total / W), m_hi + 1.0, np.ones(D), [np.inf if hint_cost is None else hint_cost + 1e-6]]
    )
    integer = np.arange(Y, Y + D, dtype=np.int64)
    return rows, {"lo": bounds_lo, "hi": bounds_hi, "U": U, "M": M, "Y": Y, "Z": Z, "W": W, "stay": stay, "integer": integer, "cuts": cuts,
                  "keep_pairs": keep_pairs, "K0": K0}


def _hint_vector(rows: _Rows, b: dict[str, Any], lin: Linearization, hint: np.ndarray, D: int) -> np.ndarray:
    n = len(rows.pairs)
    v = np.zeros(rows.n_vars)
    v[:n] = hint[rows.pairs[:, 0], rows.pairs[:, 1]].astype(np.float64)
    kp = b["keep_pairs"]
    v[b["K0"] : b["K0"] + len(kp)] = v[kp]  # (the hint is the center: every shard kept)
    dimsum, hostsum = lin.widths(hint)
    v[b["U"] : b["U"] + D] = dimsum / b["W"]
    v[b["M"] : b["M"] + D] = (lin.k0 + lin.k1 * dimsum[:, None] + lin.k2 * hostsum[:, None]).max(axis=1)
    v[b["Y"] : b["Y"] + D] = hint.sum(axis=0) > 0
    v[b["Z"]] = lin.cost(hint)
    return v


def _counts_from(rows: _Rows, xv: np.ndarray, I: int, D: int) -> np.ndarray:
    n = len(rows.pairs)
    counts = np.zeros((I, D), dtype=np.int64)
    counts[rows.pairs[:, 0], rows.pairs[:, 1]] = np.rint(xv[:n]).astype(np.int64)
    return counts


def solve_highs(prob: Problem, lin: Linearization, hint: np.ndarray | None, time_limit: float, seed: int, workers: int, deterministic: bool, extra: Any = None) -> LinearSolve:
    """scipy.optimize.milp (HiGHS). It takes no starting solution: the warm start only serves as the cutoff z <= its
    linearised cost and as the plan to keep if HiGHS finds nothing better."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    t0 = time.perf_counter()
    hint_cost = lin.cost(hint) if hint is not None else None
    rows, b = _milp_rows(prob, lin, hint_cost)
    if extra is not None:
        rows, b = extra(rows, b)
    n = len(rows.pairs)
    A = csr_array((rows.vals, (rows.rows, rows.cols)), shape=(len(rows.lo), rows.n_vars))
    c = np.zeros(rows.n_vars)
    c[b["Z"]] = 1.0
    if b["stay"] is not None and prob.tiebreak:
        c[b["stay"]] = -MOVE_TIEBREAK_MS
    integrality = np.zeros(rows.n_vars)
    integrality[:n] = 1
    integrality[b["integer"]] = 1
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    res = milp(
        c,
        integrality=integrality,
        bounds=Bounds(b["lo"], b["hi"]),
        constraints=LinearConstraint(A, np.array(rows.lo), np.array(rows.hi)),
        # (HiGHS checks its clock between phases: on models over LARGE_MODEL pairs it was seen 5 s late; 10 % margin)
        options={"time_limit": max(0.01, (float(time_limit) - build_s) * (0.9 if n > LARGE_MODEL else 1.0)), "mip_rel_gap": 1e-9, "disp": False, "presolve": True},
    )
    solve_s = time.perf_counter() - t1
    info = {"variables": rows.n_vars, "rows": len(rows.lo), "table_cuts": b.get("cuts", 0), "highs_status": int(res.status), "highs_message": str(res.message), "planes": lin.num_planes}
    bound = getattr(res, "mip_dual_bound", None)
    bound = float(bound) if bound is not None and np.isfinite(bound) else None
    if res.status == 2:
        if hint is not None:  # only the cutoff z <= the hint's cost makes it so: nothing better than the hint exists
            return LinearSolve("optimal", hint.copy(), hint_cost, hint_cost, build_s, solve_s, {**info, "cutoff_proof": True})
        return LinearSolve("infeasible", None, None, None, build_s, solve_s, info)
    if res.x is None:
        return LinearSolve("unknown", None, None, bound, build_s, solve_s, info)
    counts = _counts_from(rows, res.x, prob.num_items, prob.num_devices)
    info["solution"] = res.x
    status = "optimal" if res.status == 0 else "feasible"
    zval = float(res.x[b["Z"]])
    return LinearSolve(status, counts, zval, bound if bound is not None else (zval if status == "optimal" else None), build_s, solve_s, info)


_CBC_RESULT = re.compile(r"Result - (.+)")
_CBC_BOUND = re.compile(r"Lower bound:\s+(-?[\d.eE+-]+)")
_CBC_OBJ = re.compile(r"Objective value:\s+(-?[\d.eE+-]+)")


def solve_cbc(prob: Problem, lin: Linearization, hint: np.ndarray | None, time_limit: float, seed: int, workers: int, deterministic: bool, extra: Any = None) -> LinearSolve:
    """PuLP + CBC, warm-started from the hint (CBC's mipstart); the bound is read from CBC's log."""
    with warnings.catch_warnings():  # PuLP 3.3 announces its 4.0 API on every variable
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve_cbc(prob, lin, hint, time_limit, seed, workers, deterministic, extra)


def _solve_cbc(prob: Problem, lin: Linearization, hint: np.ndarray | None, time_limit: float, seed: int, workers: int, deterministic: bool, extra: Any = None) -> LinearSolve:
    import pulp

    t0 = time.perf_counter()
    # no cutoff row here: with its incumbent at the cutoff, CBC 2.10 ends with "Problem proven infeasible"
    rows, b = _milp_rows(prob, lin, None)
    if extra is not None:
        rows, b = extra(rows, b)
    n = len(rows.pairs)
    integer = set(np.asarray(b.get("integer", []), dtype=int).tolist())
    variables = []
    for j in range(rows.n_vars):
        lo = None if not np.isfinite(b["lo"][j]) else float(b["lo"][j])
        hi = None if not np.isfinite(b["hi"][j]) else float(b["hi"][j])
        if j < n:
            name = f"x{rows.pairs[j, 0]}_{rows.pairs[j, 1]}"
            variables.append(pulp.LpVariable(name, cat=pulp.LpBinary) if hi == 1.0 else pulp.LpVariable(name, lowBound=0, upBound=hi, cat=pulp.LpInteger))
        else:
            variables.append(pulp.LpVariable(f"v{j}", lowBound=lo, upBound=hi, cat=pulp.LpInteger if j in integer else pulp.LpContinuous))
    prob_lp = pulp.LpProblem("shardopt", pulp.LpMinimize)
    if b["stay"] is not None and prob.tiebreak:
        prob_lp += variables[b["Z"]] - MOVE_TIEBREAK_MS * pulp.lpSum(variables[j] for j in b["stay"])
    else:
        prob_lp += variables[b["Z"]]
    r_cols: list[list[tuple[int, float]]] = [[] for _ in range(len(rows.lo))]
    for r, c, v in zip(rows.rows, rows.cols, rows.vals):
        r_cols[r].append((c, v))
    for r, terms in enumerate(r_cols):
        expr = pulp.LpAffineExpression([(variables[c], v) for c, v in terms])
        lo, hi = rows.lo[r], rows.hi[r]
        if lo == hi:
            prob_lp += expr == lo, f"r{r}"
        else:
            if np.isfinite(lo):
                prob_lp += expr >= lo, f"r{r}_lo"
            if np.isfinite(hi):
                prob_lp += expr <= hi, f"r{r}_hi"
    warm = hint is not None
    if warm:
        values = _hint_vector(rows, b, lin, hint, prob.num_devices)
        if "hint" in b:
            values = b["hint"](values)
        for j, (var, val) in enumerate(zip(variables, values)):
            val = min(max(float(val), b["lo"][j]), b["hi"][j])  # (float noise must not put a start value out of bounds)
            var.setInitialValue(float(round(val)) if var.cat != pulp.LpContinuous else val)
    build_s = time.perf_counter() - t0
    if time_limit - build_s < 1.0:  # CBC's time limit is in whole seconds: less than one left is none
        return LinearSolve("unknown", None, None, None, build_s, 0.0, {"skipped": "under 1 s left"})
    with tempfile.TemporaryDirectory(prefix="shardopt-cbc-") as tmp:
        log = Path(tmp) / "cbc.log"
        cmd = pulp.PULP_CBC_CMD(
            msg=False,
            timeLimit=max(1, int(math.floor(time_limit - build_s))),
            # deterministic: one thread (CBC 2.10.3's deterministic parallel mode, threads + 100, crashes on some
            # of these models)
            threads=1 if deterministic else max(1, int(workers)),
            warmStart=warm,
            logPath=str(log) if not os.environ.get("CBCDEBUG") else "/tmp/cbc_debug.log",
            gapRel=0.0,
            keepFiles=False,
            options=[f"randomCbcSeed {int(seed) % (2**31 - 1) + 1}"],
        )
        t1 = time.perf_counter()
        try:
            prob_lp.solve(cmd)
        except pulp.PulpSolverError as exc:  # CBC died: this solve found nothing; the loop keeps its best plan
            return LinearSolve("unknown", None, None, None, build_s, time.perf_counter() - t1, {"cbc_error": str(exc)[:300]})
        solve_s = time.perf_counter() - t1
        text = log.read_text() if log.exists() else ""
    result = _CBC_RESULT.findall(text)
    bound_m = _CBC_BOUND.findall(text)
    info = {"variables": rows.n_vars, "rows": len(rows.lo), "table_cuts": b.get("cuts", 0), "cbc_result": result[-1].strip() if result else None, "planes": lin.num_planes, "pulp_status": pulp.LpStatus.get(prob_lp.status)}
    bound = float(bound_m[-1]) if bound_m else None
    if prob_lp.status == pulp.LpStatusInfeasible or (result and "infeasible" in result[-1].lower()):
        return LinearSolve("infeasible", None, None, None, build_s, solve_s, info)
    if prob_lp.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return LinearSolve("unknown", None, None, bound, build_s, solve_s, info)
    xv = np.array([v.varValue if v.varValue is not None else 0.0 for v in variables])
    counts = _counts_from(rows, xv, prob.num_items, prob.num_devices)
    info["solution"] = xv
    proven = prob_lp.sol_status == pulp.LpSolutionOptimal and bool(result) and result[-1].strip().startswith("Optimal")
    objective = float(variables[b["Z"]].varValue)
    if proven and bound is None:
        bound = objective
    return LinearSolve("optimal" if proven else "feasible", counts, objective, bound, build_s, solve_s, info)


# ---------------------------------------------------------------------------------------------------------------
# exact neural mode: the compute head of the neural cost model inside the MILP

SOFTPLUS_STEP = 0.15  # tangent spacing of the softplus under-approximation: error <= STEP^2 / 32 (+ 1e-5) ms
SOFTPLUS_RANGE = 12.0  # tangents at points in [-12, 12] (beyond, softplus is 0 or its argument to within 6e-6)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def softplus_tangents(lo: float, hi: float, step: float = SOFTPLUS_STEP) -> np.ndarray:
    """Tangent points whose lines' max under-approximates softplus on [lo, hi] within step^2 / 32 (softplus'' <=
    1/4, so between two tangents `step` apart the gap is at most step^2 / 32) plus 1e-5 outside [-12, 12]."""
    a, b = max(lo, -SOFTPLUS_RANGE), min(hi, SOFTPLUS_RANGE)
    pts = list(np.linspace(a, b, max(2, int(math.ceil((b - a) / step)) + 1))) if b > a else []
    pts += [lo, hi]
    return np.unique(np.array(pts, dtype=np.float64))


def softplus_error(step: float = SOFTPLUS_STEP) -> float:
    return step * step / 32.0 + 1e-5


def _widen(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A hair of slack on enumerated bounds (float summation order differs between the enumeration and a solver)."""
    pad = 1e-9 * (1.0 + np.maximum(np.abs(lo), np.abs(hi)))
    return lo - pad, hi + pad


def _subsets_that_fit(sizes: np.ndarray, cap: int) -> np.ndarray:
    """[S, n] 0/1 rows: every subset of n tables (n <= EXACT_NEURAL_MAX_TABLES) whose bytes fit in `cap`."""
    n = len(sizes)
    masks = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)
    return masks[masks @ sizes.astype(np.float64) <= cap]


def neural_head_extra(bm: BoundCostModel, prob: Problem) -> tuple[Any, dict[str, Any]]:
    """A `_milp_rows` extension that adds each device's exact neural compute cost c_d and the rows z >= m_d + c_d.

    The neural compute model (costmodels.neural) pools a device's tables by summing their encodings e_t (the state,
    shard count last), then runs a ReLU MLP head and a softplus per output (fwd, bwd ms). With x[t, d] binary the
    first layer's pre-activations are linear in x: a1 = b1 + sum_t (e_t W1) x[t, d]. Each ReLU unit becomes
    h >= a, h >= 0, h <= a - lo (1 - s), h <= hi s with a binary s and [lo, hi] the unit's range over the possible
    pooled states (every subset of the tables that fit on d); units whose range is one-signed need no
    binary (always off: dropped; always on: h = a). The bounds are exact: a forward pass over every subset of the
tables that fits in the device's memory (at most 2^12 of them). The second layer likewise.
    Softplus is convex and only bounded below here (z is minimised), so its epigraph is the max of tangent lines:
    an under-approximation within softplus_error() ms per output. An empty device computes nothing:
    c_d >= fwd + bwd - M (1 - y_d), c_d >= 0."""
    layers = bm.w.layers("head")  # type: ignore[attr-defined]
    if len(layers) != 3:
        raise ValueError(f"exact neural mode encodes a head of 3 layers; this model has {len(layers)}")
    (W1, b1), (W2, b2), (W3, b3) = layers
    E = np.asarray(bm.table_states, dtype=np.float64)  # [T, E + 1]
    stats = {"relu_binaries": 0, "relu_linear": 0, "relu_off": 0, "tangents": 0, "softplus_error_ms": softplus_error()}

    def extend(rows: _Rows, b: dict[str, Any]) -> tuple[_Rows, dict[str, Any]]:
        pairs = rows.pairs
        D = prob.num_devices
        lo_b, hi_b = list(b["lo"]), list(b["hi"])
        integer = list(np.asarray(b.get("integer", []), dtype=int))
        hi_b[b["Z"]] = np.inf  # the linear model's cutoff does not apply to this model
        plan: list[dict[str, Any]] = []  # per device: what the hint needs to fill the new columns in

        def new_var(lo: float, hi: float, is_int: bool = False) -> int:
            j = rows.n_vars
            rows.n_vars += 1
            lo_b.append(lo)
            hi_b.append(hi)
            if is_int:
                integer.append(j)
            return j

        def relu_layer(cols: np.ndarray, coef: np.ndarray, bias: np.ndarray, lo: np.ndarray, hi: np.ndarray, rec: list) -> tuple[list, np.ndarray, np.ndarray]:
            """Units j: a_j = bias_j + coef[:, j] . cols. Returns (per unit: column or None (always 0)), h lo / hi."""
            out: list[int | None] = []
            for j in range(len(bias)):
                c = coef[:, j]
                keep = c != 0
                cc, cv = cols[keep], c[keep]
                if hi[j] <= 0:
                    out.append(None)
                    stats["relu_off"] += 1
                    rec.append(("off",))
                    continue
                h = new_var(0.0, float(hi[j]))
                if lo[j] >= 0:  # h = a
                    rows.add(np.append(cc, h), np.append(-cv, 1.0), float(bias[j]), float(bias[j]))
                    stats["relu_linear"] += 1
                    rec.append(("lin", h))
                else:
                    sv = new_var(0.0, 1.0, True)
                    rows.add(np.append(cc, h), np.append(-cv, 1.0), float(bias[j]), np.inf)  # h >= a
                    rows.add(np.concatenate([cc, [h, sv]]), np.concatenate([-cv, [1.0, -float(lo[j])]]), -np.inf, float(bias[j] - lo[j]))
                    rows.add(np.array([h, sv]), np.array([1.0, -float(hi[j])]), -np.inf, 0.0)  # h <= hi s
                    stats["relu_binaries"] += 1
                    rec.append(("bin", h, sv))
                out.append(h)
            return out, np.maximum(lo, 0.0), np.maximum(hi, 0.0)

        for d in range(D):
            idx = np.flatnonzero(pairs[:, 1] == d)
            ts = pairs[idx, 0]
            rec: dict[str, Any] = {"d": d, "l1": [], "l2": [], "sp": []}
            C1 = E[ts] @ W1  # [n, H1]
            # the bounds of every unit: exact, from a forward pass over every subset of the tables that fits on d
            # (empty included) -- the tightest big-Ms there are; interval arithmetic is far looser
            sub = _subsets_that_fit(prob.sizes[ts], int(prob.caps[d]))  # [S, n] 0/1
            A1 = sub @ C1 + b1  # [S, H1]
            lo1, hi1 = _widen(A1.min(axis=0), A1.max(axis=0))
            h1, _, _ = relu_layer(idx, C1, b1, lo1, hi1, rec["l1"])
            on1 = [j for j, c in enumerate(h1) if c is not None]
            cols1 = np.array([h1[j] for j in on1], dtype=np.int64)
            W2a = W2[on1] if on1 else np.zeros((0, W2.shape[1]))
            A2 = np.maximum(A1[:, on1], 0.0) @ W2a + b2  # [S, H2]
            lo2, hi2 = _widen(A2.min(axis=0), A2.max(axis=0))
            h2, _, _ = relu_layer(cols1, W2a, b2, lo2, hi2, rec["l2"])
            on2 = [k for k, c in enumerate(h2) if c is not None]
            cols2 = np.array([h2[k] for k in on2], dtype=np.int64)
            W3a = W3[on2] if on2 else np.zeros((0, W3.shape[1]))
            O = np.maximum(A2[:, on2], 0.0) @ W3a + b3  # [S, 2]
            stats["subsets"] = stats.get("subsets", 0) + len(sub)
            sp_cols, sp_max = [], 0.0
            for m_out in range(W3.shape[1]):
                w = W3a[:, m_out]
                olo, ohi = (float(v) for v in _widen(O[:, m_out].min(), O[:, m_out].max()))
                sp = new_var(0.0, float(_softplus(np.array(ohi))) + 1.0)
                for p in softplus_tangents(olo, ohi):  # sp >= softplus(p) + sigmoid(p) (o - p)
                    g = float(_sigmoid(np.array(p)))
                    rows.add(np.append(cols2, sp), np.append(-g * w, 1.0), float(_softplus(np.array(p)) + g * (b3[m_out] - p)), np.inf)
                    stats["tangents"] += 1
                sp_cols.append(sp)
                sp_max += float(_softplus(np.array(ohi)))
                rec["sp"].append((sp, w, float(b3[m_out]), olo, ohi))
            M = sp_max + 1.0
            cd = new_var(0.0, M)
            y = b["Y"] + d
            rows.add(np.array([cd, *sp_cols, y]), np.array([1.0, *([-1.0] * len(sp_cols)), -M]), -M, np.inf)
            rows.add(np.array([b["Z"], b["M"] + d, cd]), np.array([1.0, -1.0, -1.0]), 0.0, np.inf)
            rec.update(cd=cd, on1=on1, on2=on2)
            plan.append(rec)

        def hint(values: np.ndarray) -> np.ndarray:
            """The new columns' values at the hint plan: a forward pass of the head per device."""
            v = np.zeros(rows.n_vars)
            v[: len(values)] = values
            n = len(pairs)
            zmax = -np.inf
            for rec in plan:
                d = rec["d"]
                on = [j for j in range(n) if pairs[j, 1] == d and values[j] > 0.5]
                pooled = E[pairs[on, 0]].sum(axis=0) if on else np.zeros(E.shape[1])
                a1 = b1 + pooled @ W1
                for j, r in enumerate(rec["l1"]):
                    if r[0] != "off":
                        v[r[1]] = max(a1[j], 0.0)
                        if r[0] == "bin":
                            v[r[2]] = float(a1[j] > 0)
                h1 = np.maximum(a1, 0.0)
                a2 = b2 + h1 @ W2
                for k, r in enumerate(rec["l2"]):
                    if r[0] != "off":
                        v[r[1]] = max(a2[k], 0.0)
                        if r[0] == "bin":
                            v[r[2]] = float(a2[k] > 0)
                h2 = np.maximum(a2, 0.0)
                total = 0.0
                for sp, w, bias, olo, ohi in rec["sp"]:
                    o = float(bias + h2[rec["on2"]] @ w)
                    val = max(0.0, max(float(_softplus(np.array(p)) + _sigmoid(np.array(p)) * (o - p)) for p in softplus_tangents(olo, ohi)))
                    v[sp] = val
                    total += val
                v[rec["cd"]] = total if on else 0.0
                zmax = max(zmax, v[b["M"] + d] + v[rec["cd"]])
            v[b["Z"]] = zmax
            return v

        b = {**b, "lo": np.array(lo_b), "hi": np.array(hi_b), "integer": np.array(integer, dtype=np.int64), "hint": hint}
        return rows, b

    return extend, stats


BACKENDS = {"cpsat": solve_cpsat, "cbc": solve_cbc, "highs": solve_highs}
BACKEND_LABEL = {"cpsat": "CP-SAT", "cbc": "CBC", "highs": "HiGHS"}


# ---------------------------------------------------------------------------------------------------------------
# the solvers


class ExactSolver(Solver):
    """Linearise -> solve exactly -> judge with the full model -> re-linearise, from the best heuristic's plan."""

    family = "exact"
    backend = "cpsat"

    def __init__(
        self,
        comm: str = "planes",
        max_iterations: int = 30,
        workers: int | None = None,
        deterministic: bool = True,
        symmetry: bool = True,
        warm_start: bool = True,
        default_time_limit: float = DEFAULT_TIME_LIMIT,
        cutoff: bool = True,
        trust_region: bool = True,
        tiebreak: bool = True,
        table_cuts: bool = True,
        exact_neural: bool = False,
        max_split: int = DEFAULT_MAX_SPLIT,
        split_tables: int = DEFAULT_SPLIT_TABLES,
        split_apart: bool = True,
        neuroshard_share: float = 0.0,
        presplit_share: float = DEFAULT_PRESPLIT_SHARE,
        neighbourhood: int = DEFAULT_NEIGHBOURHOOD,
        search_share: float = DEFAULT_SEARCH_SHARE,
        certified_bound: bool = False,
    ):
        if comm not in COMM_FORMS:
            raise ValueError(f"comm: {comm!r} is not one of {', '.join(COMM_FORMS)}")
        if max_iterations < 1:
            raise ValueError(f"max_iterations: {max_iterations} must be >= 1")
        self.comm = comm
        self.max_iterations = int(max_iterations)
        self.deterministic = bool(deterministic)
        # (one worker proves some small models several times faster, but finds worse plans within short limits on
        # the test suites: docs/exact-solvers.md, "Workers"; -O workers=1 asks for it)
        self.workers = int(workers) if workers else (os.cpu_count() or 1)
        self.symmetry = bool(symmetry)
        self.warm_start = bool(warm_start)
        self.default_time_limit = float(default_time_limit)
        self.cutoff = bool(cutoff)
        self.trust_region = bool(trust_region)
        self.tiebreak = bool(tiebreak)
        self.exact_neural = bool(exact_neural)
        if self.exact_neural and self.backend == "cpsat":
            raise ValueError("exact_neural: the neural head is encoded for the MILP backends (milp, milp_highs), not CP-SAT")
        self.table_cuts = bool(table_cuts) and not self.exact_neural  # (the cuts bound the linearised compute)
        if int(max_split) < 1 or int(max_split) & (int(max_split) - 1):
            raise ValueError(f"max_split: {max_split} must be a power of two >= 1 (1: whole tables only)")
        if int(split_tables) < 0:
            raise ValueError(f"split_tables: {split_tables} must be >= 0")
        # the exact neural mode encodes whole tables' encodings: it stays table-wise
        self.max_split = 1 if self.exact_neural else int(max_split)
        self.split_tables = int(split_tables)
        self.split_apart = bool(split_apart)
        if not 0.0 <= float(neuroshard_share) < 1.0:
            raise ValueError(f"neuroshard_share: {neuroshard_share} must be in [0, 1) (the share of the time limit NeuroShard's warm start may use)")
        self.neuroshard_share = float(neuroshard_share)
        if not 0.0 <= float(presplit_share) < 1.0:
            raise ValueError(f"presplit_share: {presplit_share} must be in [0, 1) (the share of the time limit the pre-split warm start's polish may use)")
        self.presplit_share = float(presplit_share)
        if int(neighbourhood) < 0:
            raise ValueError(f"neighbourhood: {neighbourhood} must be >= 0 (0: solve large models whole)")
        self.neighbourhood = int(neighbourhood)
        if not 0.0 <= float(search_share) < 1.0:
            raise ValueError(f"search_share: {search_share} must be in [0, 1) (the share of the time left a local search of the linear model may use; 0: none)")
        self.search_share = float(search_share)
        self.certified_bound = bool(certified_bound)

    def params(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "layout": "table-wise" if self.max_split < 2 or self.split_tables == 0 else "table-wise + column splits",
            "max_split": self.max_split,
            "split_tables": self.split_tables,
            "split_apart": self.split_apart,
            "neuroshard_share": self.neuroshard_share if self.max_split > 1 else 0.0,
            "presplit_share": self.presplit_share if self.max_split > 1 else 0.0,
            "neighbourhood": self.neighbourhood,
            "search_share": self.search_share,
            "certified_bound": self.certified_bound,
            "comm": self.comm,
            "max_iterations": self.max_iterations,
            "workers": self.workers,
            "deterministic": self.deterministic,
            "symmetry": self.symmetry,
            "warm_start": self.warm_start,
            "trust_region": self.trust_region,
            "tiebreak": self.tiebreak,
            "table_cuts": self.table_cuts,
            "exact_neural": self.exact_neural,
            "cost_unit_ms": 1.0 / COST_SCALE if self.backend == "cpsat" else None,
        }

    # -- pieces a subclass may change ------------------------------------------------------------------------
    def check(self, instance: Instance, bm: BoundCostModel) -> str | None:
        """A reason to refuse this instance / cost model (None: go ahead)."""
        if not self.exact_neural:
            return None
        T, D = len(instance.tables), instance.topology.num_devices
        if T > EXACT_NEURAL_MAX_TABLES or D > EXACT_NEURAL_MAX_DEVICES:
            return (
                f"{self.name}: exact neural mode is for small instances only (at most {EXACT_NEURAL_MAX_TABLES} tables on "
                f"at most {EXACT_NEURAL_MAX_DEVICES} devices: the head's ReLUs cost up to 192 binaries per device); this "
                f"instance has {T} tables on {D} devices. Use milp / cpsat (linearised) instead."
            )
        if not (hasattr(bm, "w") and hasattr(bm.w, "layers") and bm.w.layers("head")):
            return f"{self.name}: exact neural mode needs the neural cost model (--cost-model neural or a MODEL.npz), not {type(bm).__name__}"
        return None

    def linear_solve(self, prob: Problem, lin: Linearization, bm: BoundCostModel, hint: np.ndarray | None, time_limit: float, seed: int) -> LinearSolve:
        fn = BACKENDS[self.backend]
        if self.exact_neural:  # the compute terms come from the encoded head; the comm planes stay
            zero = dataclasses.replace(lin, a=np.zeros_like(lin.a), c0=np.zeros_like(lin.c0))
            extra, stats = neural_head_extra(bm, prob)
            res = fn(prob, zero, hint, time_limit, seed, self.workers, self.deterministic, extra)
            res.info.update(stats)
            return res
        if self.backend == "cpsat":
            return fn(prob, lin, hint, time_limit, seed, self.workers, self.deterministic, self.cutoff)
        return fn(prob, lin, hint, time_limit, seed, self.workers, self.deterministic)

    # -- the loop --------------------------------------------------------------------------------------------
    def warm_starts(self, instance: Instance, bm: BoundCostModel, label: str, seed: int, budget: float) -> list[dict[str, Any]]:
        """Plans of the heuristics (whole tables); with splits offered, the pre-split grid plan
        (`solvers.neuroshard.presplit_plan`, its polish within `presplit_share` of the budget) and NeuroShard's
        (within `neuroshard_share`; off by default); each judged by the full cost model."""
        from solvers.neuroshard import presplit_plan
        from solvers.registry import get_solver

        model = _Bound(bm, label)
        out = []
        names = list(WARM_START_SOLVERS)
        if self.max_split > 1 and self.neuroshard_share > 0:
            names.append("neuroshard")
        if self.max_split > 1 and self.presplit_share > 0:
            got = presplit_plan(instance, bm, self.max_split, time_limit=self.presplit_share * budget)
            out.append({"solver": "presplit", "status": "feasible" if got else "no_solution", "cost": got[1] if got else None,
                        **({"shards": got[0]} if got else {})})
        for name in names:
            if name == "neuroshard":
                r = get_solver(name).solve(instance, model, seed=seed, time_limit=max(0.05, self.neuroshard_share * budget))
            else:
                r = get_solver(name).solve(instance, model, seed=seed)
            if r.plan is None:
                out.append({"solver": name, "status": r.status.value, "cost": None})
                continue
            out.append({"solver": name, "status": r.status.value, "cost": float(bm.plan_costs(r.plan).max_cost), "shards": r.plan.shards})
        return out

    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult:
        clock = Stopwatch()
        budget = self.default_time_limit if time_limit is None else float(time_limit)
        reason = self._infeasibility(instance)
        if reason is not None:
            return fail(self, SolveStatus.infeasible, reason, clock, {"proof": "feasibility"})
        bm = cost_model.bind(instance)
        refuse = self.check(instance, bm)
        if refuse is not None:
            return fail(self, SolveStatus.no_solution, refuse, clock, {"refused": True})
        T = len(instance.tables)
        caps = np.array(instance.topology.capacities(), dtype=np.int64)
        info: dict[str, Any] = {"backend": self.backend, "time_limit_s": budget, "iterations": []}
        starts = self.warm_starts(instance, bm, cost_model.describe(), seed, budget) if self.warm_start else []
        good = sorted((s for s in starts if s["cost"] is not None), key=lambda s: s["cost"])  # (stable: ties keep list order)
        items = self.items(instance, bm, good[0]["shards"] if good else None)  # (pieces for what the best start cuts)
        sizes = items.size
        fits = sizes[:, None] <= caps[None, :]
        info.update(split_tables_offered=[instance.tables[int(t)].name for t in items.split_tables()], items=items.num_items)
        best: np.ndarray | None = None
        best_cost = math.inf
        if self.warm_start:
            info["warm_starts"] = {s["solver"]: s["cost"] for s in starts}
            for cand in good:
                counts = items.counts_from_shards(instance, cand["shards"], len(caps))
                if counts is None:  # (e.g. two pieces of a table on one device when split_apart) not expressible here
                    continue
                best, best_cost = counts, plan_cost(bm, items, counts)
                info["warm_start"] = {"solver": cand["solver"], "cost": best_cost}
                break
        info["warm_start_s"] = clock.elapsed
        if best is None:
            info["warm_start"] = None

        point = best if best is not None else np.zeros((items.num_items, len(caps)), dtype=np.int64)
        lin: Linearization | None = None
        radius: int | None = None  # trust region: None = unrestricted
        tried: dict[int | None, bool] = {}  # radii tried around the current point -> proven (no repeats)
        final = False  # the last unrestricted solve around the current point, with all the time left
        bound: dict[str, Any] | None = None  # the last unrestricted solve: its bound and its expansion point
        timed_out = converged = proven_infeasible = False
        reserve = 0.1 + 0.02 * budget  # for extracting, judging and checking the last plan
        lb: np.ndarray | None = None
        cut_bound = -math.inf
        searched: np.ndarray | None = None  # the plan the last local search of the linear model started from
        lns = self.neighbourhood > 0 and best is not None and int(fits.sum()) > LARGE_MODEL
        certified: float | None = None
        if lns:  # a model too large to solve whole: neighbourhoods of it, the rest of the plan fixed
            assert best is not None
            if self.certified_bound:
                certified = self._certified_bound(instance, cost_model, budget, clock, info)
            best, best_cost, cut_bound = self._neighbourhoods(instance, bm, items, fits, best, best_cost, clock, budget - reserve, seed, info)
            if math.isfinite(cut_bound):
                bound = {"value": cut_bound, "point": best.copy(), "proven": False}
            timed_out = True
        for it in range(0 if lns else self.max_iterations):
            if budget - reserve - clock.elapsed <= 0.05:
                timed_out = True
                break
            lin_s = 0.0
            if lin is None or not np.array_equal(lin.point, point):
                t_lin = time.perf_counter()
                lin = linearize(bm, point, self.comm, items)
                if self.table_cuts:
                    lb = table_lower_bounds(lin, fits, sizes, caps)
                    cut_bound = table_cut_bound(lb, items)  # every plan puts each table somewhere
                lin_s = time.perf_counter() - t_lin
            if self.search_share > 0 and best is not None and radius is None and (searched is None or not np.array_equal(searched, best)):
                searched = best.copy()  # (once per plan in hand: with its seed the search is deterministic)
                found = self._local_search(bm, lin, items, caps, best, best_cost, seed + it, (budget - reserve - clock.elapsed) * self.search_share, info, it)
                if found is not None:
                    best, best_cost = found
                    point, tried, final = best, {}, False
                    continue
            restricted = radius is not None
            allowed, classes, rank = _symmetry(instance, lin, fits, items)
            if not self.symmetry or restricted:  # (a trust region around a plan is not symmetric in the devices)
                allowed, classes = fits.copy(), []
            hint = _canonical(best, classes, rank) if best is not None else None
            if hint is not None and (hint[~allowed] > 0).any():
                hint = None  # (cannot happen: the canonical form meets the rule) never hand a solver a bad hint
            prob = Problem(
                instance, items, sizes, caps, allowed, classes, rank, hint, radius if hint is not None else None, self.tiebreak, self.table_cuts, lb
            )
            remaining = budget - reserve - clock.elapsed
            # an unrestricted solve of a plan in hand leaves time for the trust-region steps that may follow
            # (on a large model one solve is all the time allows: it gets all of it)
            small = int(fits.sum()) <= LARGE_MODEL
            n_center = int(best.sum()) if best is not None else T  # shards of the plan in hand
            share = 0.5 if (self.trust_region and small and best is not None and not restricted and T > 1 and not final) else 1.0
            res = self.linear_solve(prob, lin, bm, hint, max(0.05, remaining * share), seed)
            tried[radius] = res.status in ("optimal", "infeasible")
            row: dict[str, Any] = {
                "iteration": it,
                "radius": radius,
                "linear_status": res.status,
                "linear_objective": res.objective,
                "linear_bound": res.bound if not restricted else None,
                "table_cut_bound": cut_bound if math.isfinite(cut_bound) else None,
                "expansion_cost": best_cost if best is not None else None,
                "linearize_s": round(lin_s, 4),
                "build_s": round(res.build_s, 4),
                "solve_s": round(res.solve_s, 4),
                "symmetry_classes": len(classes),
                **{k: v for k, v in res.info.items() if k != "solution"},
            }
            info["iterations"].append(row)
            if not restricted and res.status in ("optimal", "feasible", "unknown"):
                value = max(res.bound if res.bound is not None else -math.inf, cut_bound)
                same = bound is not None and np.array_equal(bound["point"], point)
                if math.isfinite(value) and (not same or value > bound["value"] or res.status == "optimal"):
                    bound = {"value": value, "point": point.copy(), "proven": res.status == "optimal" or (same and bound["proven"])}
            if res.status == "infeasible":
                if best is None:
                    proven_infeasible = True
                    break
                res = LinearSolve("optimal", best.copy(), lin.cost(best), None, res.build_s, res.solve_s)  # (cutoff)
            why = _unusable(items, res.counts, caps)
            usable = why is None
            if res.counts is not None and why is not None:  # (never seen) never use such a plan
                row["rejected"] = why
            if not usable:
                if best is None:  # nothing in hand and nothing found: the time is gone
                    timed_out = True
                    break
                full, moved, improved = math.inf, n_center, False  # no solution in this solve's time: look closer
            else:
                assert res.counts is not None
                full = plan_cost(bm, items, res.counts)
                moved = int(np.maximum(point - res.counts, 0).sum()) if best is not None else n_center  # shards that left
                row["full_cost"] = full
                row["moved_shards"] = moved
                row["split_tables"] = len(items.split_used(res.counts))
                improved = best is None or full < best_cost - 1e-9 * max(1.0, abs(best_cost))
            row["improved"] = bool(improved)
            if improved:
                assert res.counts is not None
                best, best_cost = res.counts.copy(), full
                point, tried, final = best, {}, False
                if radius is not None:
                    radius = None if 2 * radius >= int(best.sum()) else 2 * radius
                continue
            if not self.trust_region or best is None:
                converged = True
                break
            # no better by the full model: the linear model misled us; look closer (halve the trust region)
            radius = max(0, (moved if radius is None else min(radius, moved)) // 2)
            while radius in tried:
                radius //= 2
            if radius < 1:
                # the bound of the linear model around this plan needs an unrestricted solve; one that ended on its
                # time share without a proof gets the rest of the time
                if None not in tried or (not tried[None] and not final and budget - clock.elapsed > 0.5):
                    final = None in tried
                    radius = None
                    continue
                converged = True
                break
        if proven_infeasible:
            why = _packing_reason(instance, BACKEND_LABEL[self.backend], self.max_split if len(items.split_tables()) else 1)
            return fail(self, SolveStatus.infeasible, why, clock, {**info, "proof": self.backend})
        if best is None:
            why = (
                f"{self.name}: no plan found within the time limit of {budget:g} s (no heuristic packed the tables and "
                f"{BACKEND_LABEL[self.backend]} found no assignment in time); the instance is not proven infeasible"
            )
            return fail(self, SolveStatus.no_solution, why, clock, info)
        lower = bound["value"] if bound is not None else None
        around_best = bound is not None and np.array_equal(bound["point"], best)
        bound_is_for = None if bound is None else (
            "the linearised model around the returned plan" if around_best else "the linearised model around an earlier plan"
        )
        linear_lower = lower
        if certified is not None and (lower is None or certified > lower):
            # a bound of the cost model itself over every table- and column-wise plan: stronger in meaning (and, on
            # 856 x 128, in value) than the linear model's table cuts
            lower, bound_is_for = certified, "the analytic model itself (certified: every table- and column-wise plan)"
        info.update(
            best_full_cost=best_cost,
            linear_bound=linear_lower,
            linear_bound_proven_optimal=bool(bound and bound["proven"]),
            bound_is_for=bound_is_for,
            converged=converged,
            iterations_run=len(info["iterations"]),
            split_tables_used=[instance.tables[t].name for t in items.split_used(best)],
        )
        if linear_lower is not None and best_cost > 0:
            info["gap_to_linear_bound"] = (best_cost - linear_lower) / best_cost
        over = clock.elapsed > budget
        if converged and not over and around_best and bound is not None and bound["proven"]:
            status = SolveStatus.optimal
        elif timed_out or over:
            status = SolveStatus.timeout
        else:
            status = SolveStatus.feasible  # max_iterations reached, or no proven linear optimum around the plan
        shards = items.shards(best, instance)
        return finish(self, instance, cost_model, shards, clock, seed=seed, status=status, lower_bound=lower, info=info, bound=bm)

    def _local_search(
        self, bm: BoundCostModel, lin: Linearization, items: Items, caps: np.ndarray, best: np.ndarray, best_cost: float,
        seed: int, time_limit: float, info: dict[str, Any], iteration: int,
    ) -> tuple[np.ndarray, float] | None:
        """A local search of the linear model around `best` (solvers.linear_search); the plans along its path judged
        by the full model. Returns a better plan and its full cost, or None. Each search is a row of
        info["local_searches"]."""
        res = linear_local_search(lin, items.size, caps, best, seed=seed, time_limit=max(0.05, time_limit), stall=SEARCH_STALL)
        t0 = time.perf_counter()
        plans = res.plans()
        judged = [(plan_cost(bm, items, c), k) for k, c in enumerate(plans) if _unusable(items, c, caps) is None]
        full, k = min(judged) if judged else (math.inf, -1)
        improved = bool(judged) and full < best_cost - 1e-9 * max(1.0, abs(best_cost))
        plan = plans[k] if improved else None
        info.setdefault("local_searches", []).append({
            "before_iteration": iteration, "expansion_cost": best_cost, "linear_start": res.start_cost, "linear_best": res.cost,
            "full_cost": full if judged else None, "improved": improved, "plans_judged": len(judged), "steps": res.steps, "kicks": res.kicks,
            "stopped": res.stopped, "search_s": round(res.seconds, 4), "judge_s": round(time.perf_counter() - t0, 4),
            "moved_shards": int(np.maximum(best - plan, 0).sum()) if plan is not None else 0,
        })
        return (plan, full) if plan is not None else None

    def _certified_bound(self, instance: Instance, cost_model: CostModel, budget: float, clock: Stopwatch, info: dict[str, Any]) -> float | None:
        """The analytic model's certified bound (solvers.analytic_bound) within CERTIFIED_BOUND_SHARE of the time
        limit, for large models, where the linear model's only bound is the weak table cuts. None for another cost
        model or when nothing finite was proven."""
        from solvers.analytic_bound import BoundError, analytic_lower_bound

        t0 = clock.elapsed
        try:
            res = analytic_lower_bound(instance, cost_model, time_limit=min(CERTIFIED_BOUND_MAX_S, CERTIFIED_BOUND_SHARE * budget))
        except BoundError:  # (not the analytic model: nothing to certify with)
            return None
        ok = res.status in ("optimal", "bound") and math.isfinite(res.value_ms)
        info["certified_bound"] = {"value": res.value_ms if ok else None, "status": res.status, "source": res.source,
                                   "seconds": clock.elapsed - t0}
        return res.value_ms if ok else None

    def _neighbourhoods(
        self, instance: Instance, bm: BoundCostModel, items: Items, fits: np.ndarray, best: np.ndarray, best_cost: float,
        clock: Stopwatch, deadline: float, seed: int, info: dict[str, Any],
    ) -> tuple[np.ndarray, float, float]:
        """Large-neighbourhood search with the exact model: the `neighbourhood` / 2 slowest devices and as many light
        ones (the lightest first, the next ones after each failure) are re-solved exactly -- the tables that lie wholly
        on them free to move among them, the rest of the plan fixed -- linearised around the best plan, judged by the
        full model. Tables with pieces on other devices too stay fixed. Returns (best, its cost, the table-cut bound
        of the last linearisation)."""
        caps = np.array(instance.topology.capacities(), dtype=np.int64)
        k = max(1, self.neighbourhood // 2)
        fails, cut = 0, -math.inf
        lin: Linearization | None = None
        rank = np.zeros(items.num_items, dtype=np.int64)
        searched: np.ndarray | None = None
        while deadline - clock.elapsed > 0.5:
            t0 = time.perf_counter()
            if lin is None or not np.array_equal(lin.point, best):
                lin = linearize(bm, best, self.comm, items)
                if self.table_cuts:
                    cut = table_cut_bound(table_lower_bounds(lin, fits, items.size, caps), items)
            lin_s = time.perf_counter() - t0
            if self.search_share > 0 and (searched is None or not np.array_equal(searched, best)):
                # the local search first (a step costs ~50 ms on 856 x 128, a neighbourhood solve seconds), again
                # after every plan a neighbourhood improved
                searched = best.copy()
                found = self._local_search(bm, lin, items, caps, best, best_cost, seed + len(info["iterations"]),
                                           (deadline - clock.elapsed) * self.search_share, info, len(info["iterations"]))
                if found is not None:
                    best, best_cost = found
                    continue
            order = np.argsort(-lin.device_costs(best), kind="stable")
            light = order[k:][::-1]  # lightest first
            start = (fails * k) % max(1, len(light))
            chosen = np.unique(np.concatenate([order[:k], np.roll(light, -start)[:k]]))
            # free: the tables whose every piece is on a chosen device (a table also elsewhere stays as it is)
            inside = np.bincount(items.table, weights=best[:, chosen].sum(axis=1), minlength=items.num_tables)
            total = np.bincount(items.table, weights=best.sum(axis=1), minlength=items.num_tables)
            free_tables = np.flatnonzero((inside > 0) & (inside == total))
            free = np.isin(items.table, free_tables)
            allowed = best > 0  # fixed pieces stay where they are
            allowed[free] = False
            allowed[np.ix_(np.flatnonzero(free), chosen)] = fits[np.ix_(np.flatnonzero(free), chosen)]
            prob = Problem(instance, items, items.size, caps, allowed, [], rank, best, None, self.tiebreak, False, None)
            share = min(deadline - clock.elapsed - 0.3, max(1.0, 0.1 * deadline))
            if self.backend == "cpsat":
                # deterministic: one worker (CP-SAT 9.15's interleaved search aborted the process -- "Check failed:
                # heuristics.fixed_search != nullptr" -- on these part-fixed models); else the full portfolio
                workers = 1 if self.deterministic else self.workers
                res = solve_cpsat(prob, lin, best, max(0.2, share), seed + fails, workers, False, self.cutoff)
            else:
                res = self.linear_solve(prob, lin, bm, best, max(0.2, share), seed + fails)
            row: dict[str, Any] = {"neighbourhood_devices": [int(d) for d in chosen], "free_tables": int(len(free_tables)),
                                   "linear_status": res.status, "linear_objective": res.objective, "solve_s": round(res.solve_s, 4),
                                   "build_s": round(res.build_s, 4), "table_cut_bound": cut if math.isfinite(cut) else None,
                                   "expansion_cost": best_cost, "variables": res.info.get("variables")}
            improved = False
            if _unusable(items, res.counts, caps) is None:
                assert res.counts is not None
                full = plan_cost(bm, items, res.counts)
                row.update(full_cost=full, moved_shards=int(np.maximum(best - res.counts, 0).sum()), split_tables=len(items.split_used(res.counts)))
                if full < best_cost - 1e-9 * max(1.0, abs(best_cost)):
                    best, best_cost, improved = res.counts.copy(), full, True
            row.update(improved=improved, iteration=len(info["iterations"]), radius=None, linearize_s=round(lin_s, 4))
            info["iterations"].append(row)
            fails = 0 if improved else fails + 1
        return best, best_cost, cut

    def items(self, instance: Instance, bm: BoundCostModel, start: list[Shard] | None = None) -> Items:
        """The pieces offered: whole tables, and column pieces (dim/2, dim/4, ... >= dim/max_split) of the
        `split_tables` tables with the highest compute alone, of any table too big for every device whole, and of
        the tables the warm start `start` cuts (as fine as it cuts them)."""
        split = split_candidates(bm, self.max_split, self.split_tables)
        caps = instance.topology.capacities()
        too_big = [i for i, b in enumerate(table_bytes_array(instance)) if b > max(caps)]
        if self.max_split > 1 and too_big:
            split = np.union1d(split, np.array(too_big, dtype=np.int64))
        deeper: dict[int, int] = {}
        index = instance.table_index()
        for sh in start or []:
            t = index[sh.table]
            w = sh.width(instance.tables[t])
            if w != instance.tables[t].dim:
                deeper[t] = max(deeper.get(t, 1), instance.tables[t].dim // w)
        return build_items(instance, bm, split, self.max_split, self.split_apart, deeper)

    def _infeasibility(self, instance: Instance) -> str | None:
        """Necessary conditions: shardopt.core.feasibility's for whole tables; with splits, a table too big for every
        device must fit once cut into max_split shards."""
        if self.max_split < 2:
            return infeasibility_reason(instance)
        caps = instance.topology.capacities()
        sizes = table_bytes_array(instance)
        if int(sizes.sum()) > sum(caps):
            return infeasibility_reason(instance)
        for t, size in zip(instance.tables, sizes):
            if size <= max(caps):
                continue
            ks = split_counts(t.dim, self.max_split)
            if not ks:
                return (f"table {t.name!r} needs {int(size):,} bytes but the largest device holds {max(caps):,} bytes, and its dim "
                        f"{t.dim} cannot be cut into equal {DIM_ALIGNMENT}-aligned column shards (max_split {self.max_split})")
            piece = slice_bytes(instance, t, t.rows, t.dim // ks[-1])
            if piece > max(caps):
                return (f"table {t.name!r} needs {int(size):,} bytes; even cut into {ks[-1]} column shards of {t.dim // ks[-1]} each, "
                        f"a shard needs {piece:,} bytes, more than the largest device's {max(caps):,} (max_split {self.max_split})")
        return None


def _unusable(items: Items, counts: np.ndarray | None, caps: np.ndarray) -> str | None:
    """Why a solver's plan cannot be used (None: it can): none, pieces not covering a table (a broken row), or memory
    over a capacity in exact integers (the MILPs' tolerances)."""
    if counts is None:
        return "no plan"
    if not items.is_complete(counts):
        return "the pieces do not cover every table"
    if not bool((items.device_bytes(counts) <= caps).all()):
        return "memory over capacity after rounding the solver's values"
    return None


def plan_cost(bm: BoundCostModel, items: Items, counts: np.ndarray) -> float:
    """The full cost model's plan cost (max over devices) of a plan given as item counts."""
    return float(bm.device_costs(items.device_states(counts), items.device_widths(counts)).max_cost)


class CpSatSolver(ExactSolver):
    name = "cpsat"
    backend = "cpsat"
    description = "OR-Tools CP-SAT on the linearised cost (re-linearised until no improvement), whole tables and dyadic column pieces, hard memory capacities, warm start, bound"


class MilpSolver(ExactSolver):
    name = "milp"
    backend = "cbc"
    description = "MILP (PuLP + CBC) on the linearised cost (re-linearised until no improvement), whole tables and dyadic column pieces, hard memory capacities, warm start, bound"


class MilpExactNeuralSolver(ExactSolver):
    name = "milp_exact_neural"
    backend = "highs"
    description = (
        f"MILP (HiGHS) with the neural compute head encoded exactly (big-M per ReLU, softplus by tangents); the neural "
        f"cost model only, at most {EXACT_NEURAL_MAX_TABLES} tables x {EXACT_NEURAL_MAX_DEVICES} devices"
    )

    def __init__(self, **options: Any):
        options.setdefault("exact_neural", True)
        super().__init__(**options)


class MilpHighsSolver(ExactSolver):
    name = "milp_highs"
    backend = "highs"
    description = "MILP (scipy.optimize.milp = HiGHS) on the linearised cost, re-linearised until no improvement; whole tables and dyadic column pieces; no warm start (HiGHS via scipy takes none)"


__all__ = ["COST_SCALE", "DEFAULT_TIME_LIMIT", "CpSatSolver", "ExactSolver", "MilpExactNeuralSolver", "MilpHighsSolver", "MilpSolver"]
