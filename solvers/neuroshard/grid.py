"""A beam state's pieces (`PieceModel`: pieces, their shards and costs, a tiered layout's fixed background) and
the grid-searched greedy that scores it: every dimension-cap scale a lane, all lanes of all states in lock-step,
one batched cost-model call per piece position."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, shard_cache_fraction
from costmodels.hierarchical import DIST_ROW, OUTPUT_DIST_ORDER
from shardopt.core.ir import Instance, Kernel, Shard
from shardopt.core.memory import shard_bytes, shard_host_bytes, slice_bytes
from shardopt.core.sharding_types import COLUMN_WISE, TABLE_WISE
from solvers.base import Budget
from solvers.neuroshard.config import NeuroShardConfig
from solvers.placement.completion import completion_mask
from solvers.placement.rules import PlacementRules, column_wise_allowed
from solvers.placement.tiering import TieredLayout

Piece = tuple[int, int, int]  # (table index, column offset, columns)


BATCH_STATES = 64  # at most this many beam states scored together in one lock-step grid run


LANE_DEVICES = 40_000  # and at most about this many (state x scale x device) rows per batched call


@dataclass
class GridResult:
    cost: float
    device_of: np.ndarray | None  # device per piece (None: no scale gave a feasible plan)
    scale: float | None


class PieceModel:
    """Per-piece states, widths, bytes and single costs of one instance, cached across beam states.

    With a `layout` (solvers.placement.tiering: the instance does not fit table-wise / column-wise in HBM), the pieces are
    the packed tables and their column slices, each in its table's memory tier (kernel and cache: its state prices
    the cache misses, its bytes are split between HBM and host memory), and the row-wise tables' fixed shards are
    every device's background: their state, pooled width and bytes are on the devices before any piece is placed.
    The search then chooses devices and column splits within the layout's tiers."""

    def __init__(self, instance: Instance, bm: BoundCostModel, layout: TieredLayout | None = None, whole_column_wise: bool = False):
        self.instance, self.bm, self.layout = instance, bm, layout
        self.rules = PlacementRules(instance, fixed=layout.fixed if layout is not None else ())  # (the placement constraints: pins, co-location, separation, splits)
        # whole tables that join the column-wise all-to-all (marked column_wise where that collective runs anyway:
        # `to_shards`): every table its constraints let be column-wise, with `whole_column_wise`; else none
        self.joins_cw = column_wise_allowed(instance) if whole_column_wise else np.zeros(len(instance.tables), dtype=bool)
        self._cache: dict[Piece, tuple[np.ndarray, int, float, int]] = {}
        D = instance.topology.num_devices
        self.base_states = np.zeros((D, bm.state_size))
        self.base_dists = np.zeros((len(OUTPUT_DIST_ORDER), D))  # the fixed shards' all-to-all widths by output dist
        self.base_extra = np.zeros(D)  # fixed shards' comm outside the all-to-all (replicas, row splits within a host)
        self.caps = np.array(instance.topology.capacities(), dtype=np.int64)
        self.host_caps = np.array(instance.topology.host_capacities(), dtype=np.int64)
        if layout is not None:
            self.base_states, self.base_dists, self.base_extra = bm.background(layout.fixed)
            self.caps = self.caps - layout.fixed_hbm
            self.host_caps = self.host_caps - layout.fixed_host
        self.base_compute = bm.compute_costs(self.base_states, bm.devices).sum(axis=-1)  # [D]
        self.base_dims = self.base_dists.sum(axis=0)  # [D] (the dim cap's measure)

    @property
    def tables(self) -> list[int]:
        """The tables the search places (all, or the layout's packed ones)."""
        if self.layout is None:
            return list(range(len(self.instance.tables)))
        return [int(i) for i in self.layout.packed]

    def shard(self, piece: Piece, device: int, column_wise: bool = False) -> Shard:
        """The shard of `piece` on `device`, in its table's tier (`column_wise`: a whole table's shard marked so)."""
        t, off, cols = piece
        table = self.instance.tables[t]
        tier = self.layout.tiers[t] if self.layout is not None else None
        kw: dict[str, Any] = {} if tier is None or tier.kernel is Kernel.fused else {"kernel": tier.kernel, "cache_load_factor": tier.cache_load_factor}
        if off == 0 and cols == table.dim:
            return Shard(table=table.name, device=int(device), column_wise=column_wise, **kw)
        return Shard(table=table.name, device=int(device), col_offset=off, cols=cols, **kw)

    def info(self, pieces: list[Piece]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(states [P, F], widths [P], HBM bytes [P], single compute costs [P]) of `pieces`."""
        self._fill(pieces)
        rows = [self._cache[p] for p in pieces]
        return (
            np.stack([r[0] for r in rows]),
            np.array([p[2] for p in pieces], dtype=np.float64),
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows]),
        )

    def host_sizes(self, pieces: list[Piece]) -> np.ndarray:
        """Host-memory bytes of `pieces` [P] (0 for pieces in HBM)."""
        self._fill(pieces)
        return np.array([self._cache[p][3] for p in pieces], dtype=np.int64)

    def _fill(self, pieces: list[Piece]) -> None:
        missing = [p for p in pieces if p not in self._cache]
        if not missing:
            return
        t = np.array([p[0] for p in missing])
        c = np.array([p[2] for p in missing])
        ones = np.ones(len(missing))
        if self.layout is None:
            states = self.bm.shard_states(t, c, ones, ones)
        else:  # each piece in its table's tier: the share of its rows its HBM cache holds
            probes = [self.shard(p, 0) for p in missing]
            cf = np.array([shard_cache_fraction(s, self.instance.tables[p[0]].rows) for s, p in zip(probes, missing)])
            host = np.array([s.kernel.in_host_memory for s in probes])
            states = self.bm.shard_states(t, c, ones, ones, cf, host)
        single = self.bm.compute_costs(states).sum(axis=-1)
        for k, p in enumerate(missing):
            table = self.instance.tables[p[0]]
            if self.layout is None:
                hbm, host_b = slice_bytes(self.instance, table, table.rows, p[2]), 0
            else:
                probe = self.shard(p, 0)
                hbm, host_b = shard_bytes(self.instance, table, probe), shard_host_bytes(self.instance, table, probe)
            self._cache[p] = (states[k], hbm, float(single[k]), host_b)

    def plan_cost(self, states: np.ndarray, widths: np.ndarray, device_of: np.ndarray, rows: np.ndarray) -> tuple[float, np.ndarray]:
        """The plan cost (max over devices of compute + the all-to-all of each output dist) of the pieces on
        `device_of` (`rows`: their output dists), the background included, and every device's total."""
        return plan_cost(self.bm, states, widths, device_of, self.base_states, self.base_dists, self.base_extra, rows)

    def rows(self, pieces: Sequence[Piece]) -> np.ndarray:
        """Each piece's output dist (its row of `base_dists`: costmodels.hierarchical.output_dist_rows): a whole
        table is table-wise unless it joins the column-wise collective (`joins_cw`), a slice column-wise. TorchRec
        runs one all-to-all per sharding type, so the search keeps the widths of each apart: balanced in sum is not
        balanced per collective. (A plan of whole tables only runs one collective whichever it is: the same cost.)"""
        dims = self.bm.table_dims
        tw, cw = DIST_ROW[TABLE_WISE], DIST_ROW[COLUMN_WISE]
        return np.array([tw if p[2] == dims[p[0]] and not self.joins_cw[p[0]] else cw for p in pieces], dtype=np.int64)

    def all_pieces(self) -> tuple[Piece, ...]:
        """The unsplit state: every table the search places, whole."""
        return tuple(sorted((i, 0, self.instance.tables[i].dim) for i in self.tables))

    def to_shards(self, pieces: list[Piece], device_of: np.ndarray) -> list[Shard]:
        """The plan: each piece on its device in its tier, and the layout's fixed row-wise shards. Where the
        column-wise collective runs anyway (some table is cut, or the fixed shards have column-wise widths), the whole
        tables that join it (`joins_cw`) are marked column_wise, as `rows` priced them; else they stay table-wise (one
        collective either way, or the fixed shards' table-wise one)."""
        dims = self.bm.table_dims
        cut = any(p[2] != dims[p[0]] for p in pieces) or bool(self.base_dists[DIST_ROW[COLUMN_WISE]].any())
        shards = [self.shard(p, int(d), cut and bool(self.joins_cw[p[0]])) for p, d in zip(pieces, device_of)]
        return shards + (list(self.layout.fixed) if self.layout is not None else [])


def grid_greedy(
    pm: PieceModel,
    states_list: list[list[Piece]],
    cfg: NeuroShardConfig,
    comm_aware: bool = False,
    budget: Budget | None = None,
    safe: bool = False,
) -> list[GridResult] | None:
    """The inner greedy for several beam states under every dim-cap scale, all in lock-step: one batched cost-model
    call per piece position for every distinct (state, scale) lane. Returns each state's best grid plan by the full
    cost model, or None when the deadline passed first. States of fewer pieces are padded with empty ones
    (`_greedy_order`), placed after every real piece, which change nothing: a step's states of any piece counts go in
    one batch, and the loop over positions - whose numpy calls are most of a small instance's time - runs once.

    Lanes of one state differ only in their dim cap, so until a cap binds they make the same choices and hold the
    same devices: `group` tracks which lanes are still identical, and the cost model is asked once per group (the
    lanes split when their choices differ). Same results as asking per lane, several times fewer rows.

    `safe`: each piece only where the state's remaining pieces still fit by worst fit (solvers.placement.completion, greedy's
    `primary_safe`): for tight instances whose cost-ordered grid fills the devices so that a large piece left for
    later fits nowhere (no lane packs, and the search falls back to splitting the table by rows, far dearer than
    the column-wise plan that exists)."""
    bm = pm.bm
    order = _greedy_order(pm, states_list)
    sib = _sibling_positions(order.owner)
    rules = pm.rules if pm.rules.active else None
    grouped = rules is not None and rules.grouped  # (pins alone need no positions of related pieces)
    if grouped:
        apart_pos = _sibling_positions(order.owner, rules.apart)
        together_pos = _sibling_positions(order.owner, rules.together)
    lanes = _start_lanes(pm, order, cfg.scales, cfg.soft_dim_cap)
    group = lanes.state.copy()  # lanes with equal group hold equal devices
    for i in range(order.widths.shape[1]):
        if budget is not None and i % 32 == 31 and budget.spent():
            return None
        x = order.states[lanes.state, i]  # [L, F]
        w = order.widths[lanes.state, i]
        size = order.sizes[lanes.state, i]
        ok = (lanes.free >= size[:, None]) & lanes.alive[:, None]
        if lanes.host_free is not None:
            ok &= lanes.host_free >= order.host[lanes.state, i][:, None]
        if rules is not None:  # (before the dim cap: its fallback to memory alone must not undo them)
            own = order.owner[lanes.state, i]
            ok &= np.where((own >= 0)[:, None], rules.pins[np.maximum(own, 0)], True)  # (a padding piece: anywhere)
            if grouped:
                _keep_rules(ok, apart_pos[lanes.state, i], together_pos[lanes.state, i], lanes)
        room = ok.copy() if cfg.soft_dim_cap else None
        ok &= lanes.dims + w[:, None] <= lanes.cap[:, None] + 1e-9
        if room is not None:  # the cap is a balance target: a piece it admits nowhere goes where memory allows
            over = ~ok.any(axis=1)
            ok[over] = room[over]
        if cfg.split_apart:
            _keep_apart(ok, sib[lanes.state, i], lanes)
        if safe:
            for b in np.unique(lanes.state[lanes.alive]):
                sel = lanes.ids[lanes.alive & (lanes.state == b)]
                ok[sel] = completion_mask(lanes.free[sel], int(order.sizes[b, i]), order.sizes[b, i + 1:], ok[sel])
        inv = group  # (labels 0..G-1, each lane's group: `_relabel` keeps them so)
        first = np.full(int(group.max()) + 1, -1, dtype=np.int64)
        first[group[::-1]] = lanes.ids[::-1]  # (the first lane of each group)
        live_rep = first[lanes.alive[first]]  # (a dead lane's group is not asked: its scores are all inf)
        new_rep = np.zeros((len(first), lanes.S.shape[1]))
        if len(live_rep):
            new_rep[lanes.alive[first]] = bm.compute_costs(lanes.S[live_rep] + x[live_rep][:, None, :], bm.devices).sum(axis=-1)
        new = new_rep[inv]  # [L, D]
        score = np.where(ok, new, np.inf)
        if comm_aware:
            _score_by_plan_cost(bm, score, ok, new, lanes, w, order.rows[lanes.state, i], first, inv)
        chosen = _place(lanes, i, score, new, x, w, size, order.rows[lanes.state, i], order.host[lanes.state, i] if lanes.host_free is not None else None)
        group = _relabel(inv.astype(np.int64) * (lanes.S.shape[1] + 1) + chosen + 1)
    return _best_per_state(bm, lanes, order, cfg.scales, pm.base_extra)


def _relabel(keys: np.ndarray) -> np.ndarray:
    """Non-negative integer keys as labels 0..G-1 in the order of the keys (np.unique's inverse, by a table over the
    keys' range: the lock-step greedy relabels its lane groups at every piece, where np.unique's sort was a tenth of
    the search's time on small instances)."""
    present = np.zeros(int(keys.max()) + 1, dtype=np.int64)
    present[keys] = 1
    return (np.cumsum(present) - 1)[keys]


@dataclass
class _GreedyOrder:
    """The pieces of each beam state in greedy order (largest predicted single cost first; ties by position),
    stacked over states: what every lane of one state reads at each step."""

    perm: list[np.ndarray]  # per state: greedy position -> index in the state's piece list (>= counts[b]: padding)
    counts: np.ndarray  # [B] each state's real pieces (the rest of its P positions are padding: empty, owner -1)
    states: np.ndarray  # [B, P, F]
    widths: np.ndarray  # [B, P]
    sizes: np.ndarray  # [B, P] bytes
    owner: np.ndarray  # [B, P] table index
    host: np.ndarray  # [B, P] host-memory bytes
    rows: np.ndarray  # [B, P] output dist (PieceModel.rows)


def _greedy_order(pm: PieceModel, states_list: list[list[Piece]]) -> _GreedyOrder:
    """Pieces by decreasing single cost, so the greedy places the heaviest first (the stable sort keeps it
    deterministic); under placement constraints, the pieces of pinned tables first, by how few devices they may use."""
    infos = [pm.info(pieces) for pieces in states_list]
    orders = [np.argsort(-info[3], kind="stable") for info in infos]
    if pm.rules.active:  # pinned pieces first, fewest devices first: a device filled before its pinned tables came loses them
        allowed = pm.rules.pins.sum(axis=1)
        orders = [o[np.argsort(allowed[np.array([p[0] for p in pieces])][o], kind="stable")] for pieces, o in zip(states_list, orders)]
    counts = np.array([len(pieces) for pieces in states_list], dtype=np.int64)
    P = int(counts.max())

    def stacked(per_state: list[np.ndarray], fill: float | int) -> np.ndarray:  # [B, P, ...], each state padded to P
        out = np.full((len(per_state), P) + per_state[0].shape[1:], fill, dtype=per_state[0].dtype)
        for b, a in enumerate(per_state):
            out[b, : len(a)] = a
        return out

    st = stacked([info[0][o] for info, o in zip(infos, orders)], 0.0)  # [B, P, F]
    wd = stacked([info[1][o] for info, o in zip(infos, orders)], 0.0)  # [B, P]
    sz = stacked([info[2][o] for info, o in zip(infos, orders)], 0)  # [B, P]
    own = stacked([np.array([p[0] for p in pieces], dtype=np.int64)[o] for pieces, o in zip(states_list, orders)], -1)  # [B, P]
    hb = stacked([pm.host_sizes(pieces)[o] for pieces, o in zip(states_list, orders)], 0)  # [B, P]
    rw = stacked([pm.rows(pieces)[o] for pieces, o in zip(states_list, orders)], 0)  # [B, P]
    perm = [np.concatenate([o, np.arange(len(o), P)]) for o in orders]
    return _GreedyOrder(perm=perm, counts=counts, states=st, widths=wd, sizes=sz, owner=own, host=hb, rows=rw)


def _sibling_positions(own: np.ndarray, related: list[set[int]] | None = None) -> np.ndarray:
    """[B, P, K] greedy positions of the earlier pieces of the same table (-1 padded): `split_apart` keeps a piece
    off the devices its siblings already went to, and this lets every lane look them up in one indexing. With
    `related` (per table, a set of tables): the earlier pieces of those tables instead (the placement constraints'
    separate and co-locate groups)."""
    n_states, n_pieces = own.shape
    k_max = 1
    sib_lists = []
    for b in range(n_states):
        first: dict[int, list[int]] = {}
        rows = []
        for i in range(n_pieces):
            t = int(own[b, i])
            if t < 0:  # (padding: related to nothing)
                rows.append([])
                continue
            rows.append(list(first.get(t, [])) if related is None else sorted(j for r in related[t] for j in first.get(r, [])))
            first.setdefault(t, []).append(i)
        k_max = max(k_max, max((len(r) for r in rows), default=0))
        sib_lists.append(rows)
    sib = np.full((n_states, n_pieces, k_max), -1, dtype=np.int64)
    for b, rows in enumerate(sib_lists):
        for i, r in enumerate(rows):
            sib[b, i, : len(r)] = r
    return sib


@dataclass
class _Lanes:
    """The lock-step greedy's running state, one lane per (beam state, dim-cap scale), lanes of a state
    consecutive: per device the summed piece states, widths, free bytes and compute; whether the lane has placed
    every piece so far; and the device of each greedy position."""

    state: np.ndarray  # [L] the beam state of each lane
    cap: np.ndarray  # [L] dim cap
    S: np.ndarray  # [L, D, F]
    dims: np.ndarray  # [L, D] (the dim cap's measure: all output dists together)
    dists: np.ndarray  # [L, G, D] widths by output dist (what the all-to-alls cost)
    free: np.ndarray  # [L, D]
    host_free: np.ndarray | None  # [L, D] (None: no piece uses host memory)
    compute: np.ndarray  # [L, D]
    alive: np.ndarray  # [L]
    placed_on: np.ndarray  # [L, P] device per greedy position (-1: not placed)
    ids: np.ndarray  # [L] arange, for fancy indexing


def _start_lanes(pm: PieceModel, order: _GreedyOrder, scales: tuple[float, ...], soft_cap: bool = True) -> _Lanes:
    """Devices holding only the background (nothing without a layout) in every lane; each lane's dim cap is its
    scale x its state's total width (background included) / devices, and at least its widest piece: a cap below
    it left that piece no device in any lane, so no state holding the piece whole could pack (a wide table on many
    devices: the beam never found a state that packed)."""
    n_states, n_pieces, F = order.states.shape
    n_scales, n_dev = len(scales), pm.bm.num_devices
    L = n_states * n_scales
    lane_state = np.repeat(np.arange(n_states), n_scales)
    cap = np.tile(np.array(scales), n_states) * (order.widths.sum(axis=1)[lane_state] + pm.base_dims.sum()) / n_dev  # [L]
    if soft_cap and n_pieces:
        cap = np.maximum(cap, order.widths.max(axis=1)[lane_state])
    return _Lanes(
        state=lane_state,
        cap=cap,
        S=np.broadcast_to(pm.base_states, (L, n_dev, F)).copy(),
        dims=np.broadcast_to(pm.base_dims, (L, n_dev)).copy(),
        dists=np.broadcast_to(pm.base_dists, (L,) + pm.base_dists.shape).copy(),
        free=np.broadcast_to(pm.caps, (L, n_dev)).copy(),
        host_free=np.broadcast_to(pm.host_caps, (L, n_dev)).copy() if order.host.any() else None,
        compute=np.broadcast_to(pm.base_compute, (L, n_dev)).copy(),
        alive=np.ones(L, dtype=bool),
        placed_on=np.full((L, n_pieces), -1, dtype=np.int64),
        ids=np.arange(L),
    )


def _keep_apart(ok: np.ndarray, sibs: np.ndarray, lanes: _Lanes) -> None:
    """`split_apart`, in place on the [L, D] mask `ok`: a piece avoids the devices holding its siblings (`sibs`:
    [L, K] their greedy positions) where some other device has room; together only if nothing else has room."""
    has = sibs >= 0
    if has.any():
        devs = np.where(has, lanes.placed_on[lanes.ids[:, None], np.maximum(sibs, 0)], -1)
        apart = ok.copy()
        rr, kk = np.nonzero(devs >= 0)
        apart[rr, devs[rr, kk]] = False
        use = apart.any(axis=1)  # apart when possible; together only if nothing else has room
        ok[use] = apart[use]


def _keep_rules(ok: np.ndarray, apart: np.ndarray, together: np.ndarray, lanes: _Lanes) -> None:
    """The placement constraints' groups, in place on the [L, D] mask `ok` (PlacementRules): never a device that holds
    an earlier piece of a table to keep apart from (`apart`: [L, K] their greedy positions), only the device of an
    earlier-placed table to go with (`together`). Hard, unlike `_keep_apart`: a lane left no device dies."""
    for pos, keep in ((apart, False), (together, True)):
        if not (pos >= 0).any():
            continue
        devs = np.where(pos >= 0, lanes.placed_on[lanes.ids[:, None], np.maximum(pos, 0)], -1)
        rr, kk = np.nonzero(devs >= 0)
        if not keep:
            ok[rr, devs[rr, kk]] = False
            continue
        only = np.zeros_like(ok)
        only[rr, devs[rr, kk]] = True
        bound = np.unique(rr)
        ok[bound] &= only[bound]


def _score_by_plan_cost(bm: BoundCostModel, score: np.ndarray, ok: np.ndarray, new: np.ndarray, lanes: _Lanes, w: np.ndarray,
                        rows: np.ndarray, first: np.ndarray, inv: np.ndarray) -> None:
    """`comm_aware`, in place on `score`: each allowed device scored by the plan cost (compute and all-to-all, max
    over devices) after the move instead of that device's compute alone; ties go to the lower own total. Asked
    once per group of identical lanes (`first`: a lane of each group, `inv`: each lane's group), for the devices
    any lane of the group allows."""
    dists, compute = lanes.dists, lanes.compute
    ok_any = np.zeros((len(first), ok.shape[1]), dtype=bool)
    np.logical_or.at(ok_any, inv, ok)
    members = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[members], np.arange(len(first) + 1))
    for g in np.flatnonzero(ok_any.any(axis=1)):
        lane = first[g]
        cands = np.flatnonzero(ok_any[g])
        totals = bm.dist_comm_totals_after_adding(dists[lane], int(rows[lane]), w[lane], cands)  # [k, D]
        totals += compute[lane]
        totals[np.arange(len(cands)), cands] += new[lane, cands] - compute[lane, cands]
        own_total = totals[np.arange(len(cands)), cands]
        val = totals.max(axis=1) + 1e-9 * own_total  # plan cost after the move; ties: own
        for m in members[bounds[g]:bounds[g + 1]]:
            sel = ok[m, cands]
            score[m, cands[sel]] = val[sel]


def _place(lanes: _Lanes, i: int, score: np.ndarray, new: np.ndarray, x: np.ndarray, w: np.ndarray, size: np.ndarray,
           rows: np.ndarray, host: np.ndarray | None = None) -> np.ndarray:
    """Greedy position `i` onto each lane's best-scored device; a lane with no allowed device dies (no plan).
    Returns each lane's device (-1: dead)."""
    best = np.argmin(score, axis=1)
    lanes.alive &= np.isfinite(score[lanes.ids, best])
    live = lanes.ids[lanes.alive]
    d = best[live]
    lanes.S[live, d] += x[live]
    lanes.dims[live, d] += w[live]
    lanes.dists[live, rows[live], d] += w[live]
    lanes.free[live, d] -= size[live]
    if host is not None and lanes.host_free is not None:
        lanes.host_free[live, d] -= host[live]
    lanes.compute[live, d] = new[live, d]
    lanes.placed_on[live, i] = d
    return np.where(lanes.alive, best, -1)


def _best_per_state(bm: BoundCostModel, lanes: _Lanes, order: _GreedyOrder, scales: tuple[float, ...],
                    base_extra: np.ndarray | None = None) -> list[GridResult]:
    """Every surviving lane judged by the full cost model; per state, its cheapest scale's plan (devices mapped
    back from greedy order to the state's piece order)."""
    n_states, n_pieces = order.widths.shape
    n_scales = len(scales)
    L = len(lanes.ids)
    lane_cost = np.full(L, np.inf)
    if lanes.alive.any():
        live = lanes.ids[lanes.alive]
        tot = lanes.compute[live] + bm.dist_comm_totals(lanes.dists[live])
        lane_cost[live] = (tot if base_extra is None else tot + base_extra).max(axis=1)
    results = []
    for b in range(n_states):
        block = lane_cost[b * n_scales : (b + 1) * n_scales]
        s_best = int(np.argmin(block))
        if not np.isfinite(block[s_best]):
            results.append(GridResult(np.inf, None, None))
            continue
        device_of = np.empty(int(order.counts[b]), dtype=np.int64)
        real = order.perm[b] < order.counts[b]
        device_of[order.perm[b][real]] = lanes.placed_on[b * n_scales + s_best][real]
        results.append(GridResult(float(block[s_best]), device_of, scales[s_best]))
    return results


def plan_cost(bm: BoundCostModel, states: np.ndarray, widths: np.ndarray, device_of: np.ndarray,
              base_states: np.ndarray | None = None, base_dists: np.ndarray | None = None,
              base_extra: np.ndarray | None = None, rows: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """(plan cost, every device's total) of pieces with `states` and `widths` on `device_of` (`rows`: their output
    dists, PieceModel.rows; None: all table-wise), on devices that already hold `base_states` / `base_dists` (widths
    by output dist [G, D]) / `base_extra` (a layout's fixed shards; None: empty devices)."""
    S = np.zeros((bm.num_devices, states.shape[1])) if base_states is None else base_states.copy()
    dists = np.zeros((len(OUTPUT_DIST_ORDER), bm.num_devices)) if base_dists is None else base_dists.copy()
    np.add.at(S, device_of, states)
    np.add.at(dists, (np.zeros(len(widths), dtype=np.int64) if rows is None else rows, device_of), widths)
    totals = bm.compute_costs(S, bm.devices).sum(axis=-1) + bm.dist_comm_totals(dists)
    if base_extra is not None:
        totals += base_extra
    return float(totals.max()), totals
