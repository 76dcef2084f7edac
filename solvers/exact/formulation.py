"""The linear model of the exact solvers, apart from any backend that solves it.

What is here: the problem every backend is handed (`Problem`: the items -- whole tables and their column pieces --,
memory, the allowed (item, device) pairs after symmetry breaking, the plan in hand) and what one backend call
returns (`LinearSolve`); the symmetry rule and the canonical form of a plan that meets it; the valid bounds the
backends add as cuts or report (`width_caps`, `comm_floor`, `table_lower_bounds`, `table_cut_bound`); the checks
and the full model's cost of a plan given as item counts; the reason given when a backend proves that the tables do
not pack.

Why apart: the CP-SAT backend (cpsat.py) and the MILP backends (milp.py, neural_head.py) build the same model from
these, and the solver (solver.py) drives them with it; nothing here depends on a backend, so every other module of
the package may import this one and none of them each other round a circle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.ir import Instance
from shardopt.core.memory import table_bytes_array
from solvers.exact.constraints import TableGroups
from solvers.exact.linearize import Linearization
from solvers.milp import solve_lp
from solvers.placement.split_items import Items
from solvers.status import SolveStatus, StopReason


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
    groups: TableGroups = field(default_factory=TableGroups)  # co-locate / separate rows (the constraints' pins are in `allowed`)

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

    status: SolveStatus  # optimal | feasible (a limit, a solution found) | infeasible | no_solution (a limit, none)
    stopped: StopReason
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
            np.stack([lin.k0[:, d], lin.k1[:, d], lin.k2[:, d], lin.k3[:, d]]).round(12).tobytes(),
            round(float(lin.comm_const[d]), 12),
            fits[:, d].tobytes(),  # (a placement constraint's pin tells devices apart)
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
# valid bounds of the linear model


def _device_plane_bounds(lin: Linearization, total: float) -> tuple[np.ndarray, np.ndarray]:
    """Per collective and device [C, D]: a valid lower bound of max(0, max_k plane_k(u, v, T)) over
    0 <= u, v, T <= total, and its maximum there."""
    corners = [(u, v, t) for u in (0.0, total) for v in (0.0, total) for t in (0.0, total)]
    vals = np.stack([lin.k0 + lin.k1 * u + lin.k2 * v + lin.k3 * t for u, v, t in corners])  # [8, C, D, K]
    lo = np.maximum(vals.min(axis=0).max(axis=2), 0.0)  # each plane's minimum is at a corner; m >= every plane, >= 0
    hi = np.maximum(vals.max(axis=0).max(axis=2), 0.0)  # a max of planes is convex: its maximum is at a corner
    return lo, hi


def always_floor(lin: Linearization, lo: np.ndarray | None = None) -> np.ndarray:
    """[C, D]: what each collective costs each device at least whatever the plan -- its lower bound where it always
    runs, 0 where a plan may leave it out."""
    lo = _device_plane_bounds(lin, lin.total_width)[0] if lo is None else lo
    return np.where(lin.always[:, None], lo, 0.0)


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


def comm_floor(
    lin: Linearization, widths: np.ndarray, umax: np.ndarray | None = None, vmax: np.ndarray | None = None, kinds: np.ndarray | None = None
) -> np.ndarray:
    """[len(widths), D]: a lower bound of each device's linearised comm in collective kinds[i] (default 0) when its
    own width in it is at least `widths[i]`: min of max(0, max_k plane_k(u, v, T)) over {widths[i] <= u <= umax,
    u <= v <= vmax, v <= T <= total} (v: its host's width; umax / vmax: what memory lets the device / host hold,
    `width_caps`), one tiny LP per (width, device), solved together as one block-diagonal LP by HiGHS
    (scipy.optimize.linprog); less 1e-6 ms and 1e-7 relative for the LP tolerances. The device's other collectives
    and its constant are not in it."""
    from scipy.sparse import coo_array

    widths = np.asarray(widths, dtype=np.float64)
    kinds = np.zeros(len(widths), dtype=np.int64) if kinds is None else np.asarray(kinds, dtype=np.int64)
    D = lin.num_devices
    total = lin.total_width
    umax = np.full(D, total) if umax is None else np.maximum(np.minimum(umax, total), 0.0)
    vmax = np.full(D, total) if vmax is None else np.maximum(np.minimum(vmax, total), umax)
    planes = [[np.unique(np.stack([lin.k0[c, d], lin.k1[c, d], lin.k2[c, d], lin.k3[c, d]], axis=1), axis=0) for d in range(D)]
              for c in range(lin.num_collectives)]
    rows, cols, vals, rhs = [], [], [], []
    nb = len(widths) * D
    r = 0
    for i in range(len(widths)):
        for d in range(D):
            b = 4 * (i * D + d)  # variables (w, u, v, T) of this block
            for k0, k1, k2, k3 in planes[kinds[i]][d]:  # k1 u + k2 v + k3 T - w <= -k0
                rows += [r, r, r, r]
                cols += [b, b + 1, b + 2, b + 3]
                vals += [-1.0, k1, k2, k3]
                rhs.append(-k0)
                r += 1
            for lo_c, hi_c in ((b + 1, b + 2), (b + 2, b + 3)):  # u <= v <= T
                rows += [r, r]
                cols += [lo_c, hi_c]
                vals += [1.0, -1.0]
                rhs.append(0.0)
                r += 1
    A = coo_array((vals, (rows, cols)), shape=(r, 4 * nb)).tocsr()
    c = np.zeros(4 * nb)
    c[0::4] = 1.0
    lo = np.zeros(4 * nb)
    hi = np.full(4 * nb, total)
    lo[0::4], hi[0::4] = 0.0, np.inf  # (comm is never negative: the models' m >= 0)
    lo[1::4] = np.repeat(np.minimum(widths, total), D)
    hi[1::4] = np.maximum(np.tile(umax, len(widths)), lo[1::4])  # (a table wider than umax: its u is its width)
    hi[2::4] = np.maximum(np.tile(vmax, len(widths)), hi[1::4])
    hi[3::4] = np.maximum(total, hi[2::4])
    res = solve_lp(c, A, np.array(rhs), np.stack([lo, hi], axis=1))
    if res.status is not SolveStatus.optimal or res.x is None:  # (never seen) fall back to the weakest valid bound: 0
        out = np.zeros((len(widths), D))
    else:
        out = res.x[0::4].reshape(len(widths), D)
    return np.maximum(out - 1e-6 - 1e-7 * np.abs(out), 0.0)


def table_lower_bounds(lin: Linearization, allowed: np.ndarray, sizes: np.ndarray | None = None, caps: np.ndarray | None = None) -> np.ndarray:
    """[I, D]: a lower bound of device d's linearised cost whenever it holds a shard of item i (inf where not
    allowed; table-wise models: item = table).

    Device d with a shard of i on it costs c0[d] + a[i, d] + (its other terms, >= the sum of d's negative ones, each
    as many times as d may hold that item) + its comm in the item's collective, whose own width is at least the shard's
    width (`comm_floor`; every shipped comm model grows with the own width) + the other collectives' least cost where
    they always run (`always_floor`) + the constant. Hence the valid inequalities (`_useful_cuts`)
    ``z >= sum_{i of t} sum_d lb[i, d] x[i, d] / parts_i``: the LP relaxation spreads a big table over devices and
    forgets that one device must carry all of it (or a whole shard of it); these cuts remember (on a plan whose
    slowest device holds one huge table they lift the bound from the average load to that device's cost)."""
    upper = lin.items.most_per_device
    neg_terms = np.where(allowed, np.minimum(lin.a, 0.0), 0.0)
    neg = (neg_terms * upper[:, None]).sum(axis=0)  # [D]
    pairs, inv = np.unique(np.stack([lin.dims, lin.kind.astype(np.float64)], axis=1), axis=0, return_inverse=True)
    umax, vmax = width_caps(lin, sizes, caps) if sizes is not None and caps is not None else (None, None)
    floor = comm_floor(lin, pairs[:, 0], umax, vmax, pairs[:, 1].astype(np.int64))[inv.ravel()]  # [I, D]: its own collective
    rest = always_floor(lin)  # [C, D]: the other collectives, where they always run
    floor = floor + rest.sum(axis=0)[None, :] - rest[lin.kind] + lin.comm_const[None, :]
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


# ---------------------------------------------------------------------------------------------------------------
# plans as item counts


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
    """The full cost model's plan cost (max over devices) of a plan given as item counts: one all-to-all per output
    dist (Items.device_dists), as BoundCostModel.plan_costs judges the plan's shards."""
    return float(bm.device_costs(items.device_states(counts), items.device_dists(counts), items.device_extra(bm.num_devices)).max_cost)
