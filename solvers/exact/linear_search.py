"""Local search on the linearised model: moves and swaps of pieces that flatten the device costs, with random kicks.

Why: on 100 tables x 8 devices CP-SAT seldom improves a good warm start within 10 s (docs/exact-solvers.md) -- its
search is spent on a balancing problem whose LP bound it cannot raise -- while the linear model is cheap enough to
evaluate every single move and swap at once (~5 ms a step on 100 x 8). This search takes the plan in hand down a
long way in a second or two; the exact loop judges its plan with the full model, re-linearises and hands the better plan to
CP-SAT / the MILPs as their warm start and cutoff.

The objective is a smooth stand-in for the max: ``sum_d exp((cost_d - M) / tau)`` (M the current max, tau a
thousandth of it by default), so a step that lowers the slowest device is always taken and, where none exists,
the step that lowers the next-slowest devices is (a plateau move on the max). Moves keep every piece whole (the
column splits are what CP-SAT chooses), memory capacities and the "pieces apart" rule hold after every step.

Reproducible: every random choice takes the seed; the search stops after `stall` kicks in a row that found
nothing better (or `max_steps`), so the same seed gives the same plan -- unless the wall-clock `time_limit`
cuts it first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shardopt.core.work import charge_seconds
from solvers.base import Stopwatch
from solvers.exact.formulation import _unusable, plan_cost
from solvers.exact.linearize import Linearization
from solvers.exact.state import _Run

# on a work budget (shardopt.core.work), each pass charges this many work seconds per number of its move and swap
# deltas (pieces considered x (devices + pieces)): 420-510 ns on the 2-core VM, over 33 x 4 to 856 x 128 pieces
STEP_WORK_S_PER_ELEMENT = 4.5e-7
SEARCH_STALL = 30  # the exact loop's searches (judged_local_search) stop after this many kicks in a row without a new best
DEFAULT_STALL = 30  # kicks in a row without a better plan before the search stops
DEFAULT_TAU = 1e-3  # softmax temperature, as a share of the current max cost
_EXP_CAP = 60.0  # exp() arguments are capped here (a device far above the max cannot be: only far below)
_ALL_PIECES = 400  # up to this many pieces, every move and swap is a candidate; above, those of the pieces on
_HOT_DEVICES = 4  # ... this many slowest devices (or D / 16)
PATH_KEPT = 64  # the latest new-best plans kept for the caller to judge


@dataclass(frozen=True)
class LocalSearchResult:
    """The best plan the search found (counts [I, D]) and how it went."""

    counts: np.ndarray
    cost: float  # its linearised max cost (ms)
    start_cost: float
    steps: int  # improving moves / swaps taken
    kicks: int
    seconds: float
    stopped: str  # "stall" | "max_steps" | "time_limit" | "nothing to move"
    path: tuple[np.ndarray, ...] = ()  # every new best plan in the order found (the last is `counts`), at most PATH_KEPT

    def plans(self) -> list[np.ndarray]:
        """The plans worth judging with the full model: the path of new bests, latest first (the linear model is
        exact only at its expansion point, so a plan part of the way along may be the better one in truth)."""
        return list(reversed(self.path)) or [self.counts]


class _State:
    """Units (one per piece placed) and the per-device sums the search updates. A step moves pieces whole, so each
    collective's total width and whether it runs stay as they are; its widths per device change."""

    def __init__(self, lin: Linearization, sizes: np.ndarray, counts: np.ndarray, allowed: np.ndarray | None = None):
        self.lin = lin
        item, dev = [], []
        for i, d in zip(*np.nonzero(counts)):
            item += [int(i)] * int(counts[i, d])
            dev += [int(d)] * int(counts[i, d])
        self.item = np.array(item, dtype=np.int64)
        self.dev = np.array(dev, dtype=np.int64)
        self.table = lin.items.table[self.item]
        self.kind = lin.kind[self.item]
        self.width = lin.dims[self.item].astype(np.float64)
        self.bytes = sizes[self.item].astype(np.float64)
        self.a = lin.a[self.item]  # [n, D]
        self.allowed = None if allowed is None else np.asarray(allowed, dtype=bool)[self.item]  # [n, D] where a unit may go
        D = lin.num_devices
        self.D = D
        C = lin.num_collectives
        self.T = np.array([self.width[self.kind == c].sum() for c in range(C)])
        self.runs = lin.always | np.array([bool((self.kind == c).any()) for c in range(C)])
        self.multi_host = lin.num_hosts > 1 and bool((lin.k2 != 0).any())
        self.members = [np.flatnonzero(lin.host == h) for h in range(lin.num_hosts)]
        self.refresh()

    def refresh(self) -> None:
        lin, D, n = self.lin, self.D, len(self.item)
        self.held = np.bincount(self.dev, minlength=D)
        self.comp = np.where(self.held > 0, lin.c0, 0.0) + np.bincount(self.dev, weights=self.a[np.arange(n), self.dev], minlength=D)
        C = lin.num_collectives
        self.uc = np.stack([np.bincount(self.dev, weights=np.where(self.kind == c, self.width, 0.0), minlength=D) for c in range(C)])
        self.vc = np.stack([np.bincount(lin.host, weights=self.uc[c], minlength=lin.num_hosts) for c in range(C)])
        self.mem = np.bincount(self.dev, weights=self.bytes, minlength=D)
        self.occ = np.zeros((lin.items.num_tables, D), dtype=np.int64)
        np.add.at(self.occ, (self.table, self.dev), 1)
        devs = np.arange(D)
        self.coll = np.stack([self.comm_of(c, devs, self.uc[c], self.vc[c][lin.host]) for c in range(C)])  # [C, D]
        self.cost = self.comp + self.coll.sum(axis=0) + lin.comm_const

    def comm_of(self, c: int, d: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Linearised comm of collective c on devices d at own widths u and host widths v (broadcast together)."""
        if not self.runs[c]:
            return np.zeros(np.broadcast(d, u, v).shape)
        return self.lin.plane_values(c, d, u, v, float(self.T[c]))

    def view(self, c: int) -> _CollectiveView:
        return _CollectiveView(self, c)


class _CollectiveView:
    """The state as the steps of pieces of collective c see it: every other term of a device's cost (its compute,
    the other collectives, the constant) in `comp` -- a step moves compute and c's widths only."""

    def __init__(self, s: _State, c: int):
        self._s, self._c = s, c
        self.comp = s.cost - s.coll[c]  # (its compute part is corrected by the step's own a and c0)
        self.u = s.uc[c]
        self.v = s.vc[c]
        self.multi_host = s.lin.num_hosts > 1 and bool((s.lin.k2[c] != 0).any())

    def __getattr__(self, name: str):  # lin, D, dev, held, width, bytes, a, mem, occ, table, cost, members
        return getattr(self._s, name)

    def comm(self, d: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self._s.comm_of(self._c, d, u, v)


def _host_deltas(s: _State, F: Callable[[np.ndarray], np.ndarray], shifts: np.ndarray) -> np.ndarray:
    """[H, len(shifts)]: the objective change of every device of host h when h's width moves by each shift with
    the devices' own widths unchanged (the move's own two devices are corrected by the caller)."""
    lin = s.lin
    out = np.zeros((lin.num_hosts, len(shifts)))
    for h, mem in enumerate(s.members):
        new = s.comp[mem][None, :] + s.comm(mem[None, :], np.broadcast_to(s.u[mem], (len(shifts), len(mem))), s.v[h] + shifts[:, None])
        out[h] = (F(new) - F(s.cost[mem])[None, :]).sum(axis=1)
    return out


def step_deltas(s: _State, rows: np.ndarray, F: Callable[[np.ndarray], np.ndarray], caps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The objective change sum_d F(cost_d) of every candidate step (inf where it breaks memory or "apart"):
    moves [len(rows), D] (piece rows[r] to device q; inf at its own device) and swaps
    [len(rows), n] (piece rows[r] with piece j of the same collective: a whole table with a whole table, a piece
    with a piece). On several hosts a step also changes the host widths, and with them the comm of every device of
    the two hosts: `_host_deltas` carries those."""
    dmove = np.full((len(rows), s.D), np.inf)
    dswap = np.full((len(rows), len(s.item)), np.inf)
    kinds = s.kind[rows]
    for c in np.unique(kinds):
        sel = np.flatnonzero(kinds == c)
        dm, ds = _collective_deltas(s.view(int(c)), rows[sel], F, caps)  # type: ignore[arg-type]
        ds[:, s.kind != c] = np.inf
        dmove[sel], dswap[sel] = dm, ds
    return dmove, dswap


def _collective_deltas(s: _State, rows: np.ndarray, F: Callable[[np.ndarray], np.ndarray], caps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """step_deltas for pieces of one collective, on its view (`_CollectiveView`)."""
    lin = s.lin
    n, D = len(s.item), s.D
    units, devs, hosts = np.arange(n), np.arange(D), lin.host
    apart = lin.items.apart
    Fc = F(s.cost)
    # ---- moves: piece i (of `rows`) from p = dev[i] to q
    src = s.dev[rows]
    n_r = len(rows)
    w = s.width[rows]
    a_rows = s.a[rows]
    a_p = a_rows[np.arange(n_r), src]
    empties = s.held[src] == 1
    comp_p = s.comp[src] - a_p - np.where(empties, lin.c0[src], 0.0)
    comp_q = s.comp[None, :] + a_rows + np.where(s.held == 0, lin.c0, 0.0)[None, :]
    same_host = hosts[src][:, None] == hosts[None, :]  # [n_r, D]
    all_q = np.broadcast_to(devs, (n_r, D))
    if s.multi_host:
        vp_same = s.v[hosts[src]]
        new_p_same = comp_p + s.comm(src, s.u[src] - w, vp_same)
        new_p_other = comp_p + s.comm(src, s.u[src] - w, vp_same - w)
        new_q_same = comp_q + s.comm(all_q, s.u[None, :] + w[:, None], np.broadcast_to(s.v[hosts], (n_r, D)))
        new_q_other = comp_q + s.comm(all_q, s.u[None, :] + w[:, None], s.v[hosts][None, :] + w[:, None])
        shifts, inv = np.unique(np.concatenate([-w, w]), return_inverse=True)
        G = _host_deltas(s, F, shifts)  # [H, S]
        minus, plus = inv[:n_r], inv[n_r:]
        # host terms for different hosts: every device of p's host sees -w, of q's host +w; p and q themselves
        # are replaced by their exact new costs (their host-only change is taken back out of G)
        p_only = F(s.cost[src] - s.comm(src, s.u[src], s.v[hosts[src]]) + s.comm(src, s.u[src], s.v[hosts[src]] - w)) - Fc[src]
        q_only = F(s.cost[None, :] - s.comm(devs, s.u, s.v[hosts])[None, :] + s.comm(all_q, np.broadcast_to(s.u, (n_r, D)), s.v[hosts][None, :] + w[:, None])) - Fc[None, :]
        host_term = (G[hosts[src], minus] - p_only)[:, None] + G[hosts[None, :], plus[:, None]] - q_only
        dmove = np.where(
            same_host,
            (F(new_p_same) - Fc[src])[:, None] + F(new_q_same) - Fc[None, :],
            (F(new_p_other) - Fc[src])[:, None] + F(new_q_other) - Fc[None, :] + host_term,
        )
    else:
        vv = s.v[hosts]
        new_p = comp_p + s.comm(src, s.u[src] - w, vv[src])
        new_q = comp_q + s.comm(all_q, s.u[None, :] + w[:, None], np.broadcast_to(vv, (n_r, D)))
        dmove = (F(new_p) - Fc[src])[:, None] + F(new_q) - Fc[None, :]
    ok = (s.mem[None, :] + s.bytes[rows][:, None] <= caps[None, :]) & (devs[None, :] != src[:, None])
    if s.allowed is not None:
        ok &= s.allowed[rows]
    if apart:
        ok &= s.occ[s.table[rows]] == 0
    dmove = np.where(ok, dmove, np.inf)
    # ---- swaps: unit i (on p) with unit j (on q)
    p, q = src[:, None], s.dev[None, :]
    wi, wj = w[:, None], s.width[None, :]
    a_q_own = s.a[units, s.dev]  # [n] each piece's term on its own device
    comp_p2 = s.comp[p] - a_p[:, None] + s.a[units[None, :], p]  # p loses i, gains j
    comp_q2 = s.comp[q] - a_q_own[None, :] + a_rows[:, s.dev]  # q loses j, gains i
    up, uq = s.u[p] + wj - wi, s.u[q] + wi - wj
    hp, hq = hosts[p], hosts[q]
    same = np.broadcast_to(hp == hq, (n_r, n))
    shift = wj - wi  # p's host gains this (q's loses it) when the hosts differ
    vp = s.v[hp] + np.where(same, 0.0, shift)
    vq = s.v[hq] - np.where(same, 0.0, shift)
    newp = comp_p2 + s.comm(np.broadcast_to(p, (n_r, n)), up, vp)
    newq = comp_q2 + s.comm(np.broadcast_to(q, (n_r, n)), uq, vq)
    dswap = F(newp) - Fc[p] + F(newq) - Fc[q]
    if s.multi_host and not same.all():
        shifts, inv = np.unique(np.concatenate([shift.ravel(), -shift.ravel()]), return_inverse=True)
        G = _host_deltas(s, F, shifts)
        k = shift.size
        gp = G[np.broadcast_to(hp, shift.shape).ravel(), inv[:k]].reshape(shift.shape)
        gq = G[np.broadcast_to(hq, shift.shape).ravel(), inv[k:]].reshape(shift.shape)
        p_host_only = F(s.cost[p] - s.comm(p, s.u[p], s.v[hp]) + s.comm(np.broadcast_to(p, shift.shape), np.broadcast_to(s.u[p], shift.shape), s.v[hp] + shift)) - Fc[p]
        q_host_only = F(s.cost[q] - s.comm(q, s.u[q], s.v[hq]) + s.comm(np.broadcast_to(q, shift.shape), np.broadcast_to(s.u[q], shift.shape), s.v[hq] - shift)) - Fc[q]
        dswap = dswap + np.where(same, 0.0, gp - p_host_only + gq - q_host_only)
    okS = (p != q) & (s.table[rows][:, None] != s.table[None, :])
    okS &= (s.mem[p] - s.bytes[rows][:, None] + s.bytes[None, :] <= caps[p]) & (s.mem[q] - s.bytes[None, :] + s.bytes[rows][:, None] <= caps[q])
    if apart:
        okS &= (s.occ[s.table[None, :], p] == 0) & (s.occ[s.table[rows][:, None], q] == 0)
    if s.allowed is not None:  # unit rows[r] goes to q = dev[j], unit j to p = dev[rows[r]]
        okS &= s.allowed[rows][:, s.dev] & s.allowed[:, src].T
    dswap = np.where(okS, dswap, np.inf)
    return dmove, dswap


def linear_local_search(
    lin: Linearization,
    sizes: np.ndarray,
    caps: np.ndarray,
    counts: np.ndarray,
    *,
    seed: int = 0,
    time_limit: float = 1.0,
    stall: int = DEFAULT_STALL,
    max_steps: int | None = None,
    tau: float = DEFAULT_TAU,
    allowed: np.ndarray | None = None,
) -> LocalSearchResult:
    """Improve the plan `counts` ([I, D] pieces of item i on device d, a complete plan that fits) under `lin`; with
    `allowed` ([I, D]), no step puts a piece where it is False (the placement constraints' pins).

    Returns the best plan seen (never worse than `counts` in the linear model; the same plan when nothing helps).
    `time_limit` is read on a solve's clock (`Stopwatch`): work seconds on a work budget, else wall seconds."""
    t0 = time.perf_counter()
    clock = Stopwatch()
    counts = np.asarray(counts, dtype=np.int64)
    caps = np.asarray(caps, dtype=np.float64)
    rng = np.random.default_rng(seed)
    s = _State(lin, sizes, counts, allowed)
    n, D = len(s.item), s.D
    start_cost = float(s.cost.max())
    best_dev, best_cost = s.dev.copy(), start_cost
    path: list[np.ndarray] = []
    apart = lin.items.apart
    steps = kicks = since_better = 0
    stopped = "stall"
    if n == 0 or D < 2:
        return LocalSearchResult(counts.copy(), start_cost, start_cost, 0, 0, time.perf_counter() - t0, "nothing to move")
    units = np.arange(n)
    while True:
        if clock.elapsed > time_limit:
            stopped = "time_limit"
            break
        if max_steps is not None and steps >= max_steps:
            stopped = "max_steps"
            break
        M = float(s.cost.max())
        scale = max(tau * abs(M), 1e-12)

        def F(c: np.ndarray, M: float = M, scale: float = scale) -> np.ndarray:
            return np.exp(np.minimum((c - M) / scale, _EXP_CAP))

        Fc = F(s.cost)
        if n <= _ALL_PIECES:
            rows = units
        else:  # the pieces on the slowest devices (the others' steps barely move the objective)
            hot = np.argsort(-s.cost, kind="stable")[: max(_HOT_DEVICES, D // 16)]
            rows = np.flatnonzero(np.isin(s.dev, hot))
        dmove, dswap = step_deltas(s, rows, F, caps)
        charge_seconds(STEP_WORK_S_PER_ELEMENT * len(rows) * (D + n))
        mi, mq = np.unravel_index(int(np.argmin(dmove)), dmove.shape)
        best_move = float(dmove[mi, mq])
        si, sj = np.unravel_index(int(np.argmin(dswap)), dswap.shape)
        best_swap = float(dswap[si, sj])
        # ---- take the better step, or kick
        tol = 1e-9 * max(1.0, float(Fc.sum()))
        if min(best_move, best_swap) < -tol:
            if best_move <= best_swap:
                s.dev[rows[mi]] = mq
            else:
                i, j = int(rows[si]), int(sj)
                s.dev[i], s.dev[j] = s.dev[j], s.dev[i]
            steps += 1
            s.refresh()
            now = float(s.cost.max())
            if now < best_cost - 1e-12 * max(1.0, abs(best_cost)):
                best_dev, best_cost, since_better = s.dev.copy(), now, 0
                path = path[-(PATH_KEPT - 1):] + [best_dev]
            continue
        since_better += 1
        if since_better > stall:
            break
        kicks += 1
        s.dev = best_dev.copy()
        s.refresh()
        for _ in range(int(rng.integers(2, 6))):  # a few random swaps that keep the plan valid
            i, j = (int(x) for x in rng.integers(0, n, size=2))
            pi, pj = int(s.dev[i]), int(s.dev[j])
            if pi == pj or s.table[i] == s.table[j]:
                continue
            if s.mem[pi] - s.bytes[i] + s.bytes[j] > caps[pi] or s.mem[pj] - s.bytes[j] + s.bytes[i] > caps[pj]:
                continue
            if apart and (s.occ[s.table[j], pi] > 0 or s.occ[s.table[i], pj] > 0):
                continue
            if s.allowed is not None and not (s.allowed[i, pj] and s.allowed[j, pi]):
                continue
            s.dev[i], s.dev[j] = pj, pi
            s.refresh()
    plans = []
    for dev in path:
        out = np.zeros_like(counts)
        np.add.at(out, (s.item, dev), 1)
        plans.append(out)
    best = plans[-1] if plans else counts.copy()
    return LocalSearchResult(best, best_cost, start_cost, steps, kicks, time.perf_counter() - t0, stopped, tuple(plans))


def judged_local_search(
    run: _Run, lin: Linearization, best: np.ndarray, best_cost: float, seed: int, time_limit: float, iteration: int,
) -> tuple[np.ndarray, float] | None:
    """A local search of the linear model around `best` (solvers.exact.linear_search), its steps within the pairs the
    constraints allow; the plans along its path judged by the full model (those that part co-located tables or
    join separate ones left out). Returns a better plan and its full cost, or None. Each search is a row of
    info["local_searches"]."""
    bm, items, caps, info = run.bm, run.items, run.caps, run.info
    res = linear_local_search(lin, items.size, caps, best, seed=seed, time_limit=max(0.05, time_limit), stall=SEARCH_STALL,
                              allowed=run.fits if run.instance.constraints is not None else None)
    t0 = time.perf_counter()
    plans = res.plans()
    judged = [(plan_cost(bm, items, c), k) for k, c in enumerate(plans) if _unusable(items, c, caps) is None and run.groups.met_by(c)]
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
