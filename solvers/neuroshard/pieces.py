"""Pieces of a NeuroShard state: halving a piece (`split`), the pre-split state (tables heavier than a device's
share halved up front, `presplit_pieces` / `presplit_plan`), the device polish of a plan (`polish`) and the cuts
of the bottleneck's widest pieces after it (`split_wide_bottlenecks`)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from costmodels.base import BoundCostModel
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Shard
from solvers.base import Budget, Stopwatch
from solvers.neuroshard.config import NeuroShardConfig
from solvers.neuroshard.grid import Piece, PieceModel, grid_greedy
from solvers.placement.rules import PlacementRules
from solvers.placement.tiering import TieredLayout


def polish(pm: PieceModel, pieces: list[Piece], device_of: np.ndarray, cfg: NeuroShardConfig, budget: Budget) -> tuple[np.ndarray, int]:
    """First-improvement local search: move a piece off the bottleneck device, or swap it with a piece elsewhere,
    while memory holds (and halves stay apart with `split_apart`). The pieces on the bottleneck are tried in order,
    each against every device (moves) and then every piece elsewhere (swaps) in order, the first that lowers the plan
    cost taken - or, where no piece's does, the first that keeps it with fewer devices at it (`_better_rows`); all of
    one piece's moves (or swaps) are costed in one batched call from the devices' summed states."""
    if not pieces:
        return device_of.copy(), 0
    return _Polish(pm, pieces, device_of, cfg).run(budget)


class _Polish:
    """One `polish`: the pieces, where they are, each device's memory used and summed state, and the plan's totals,
    changed in place by the moves and swaps it takes."""

    def __init__(self, pm: PieceModel, pieces: list[Piece], device_of: np.ndarray, cfg: NeuroShardConfig):
        self.pm, self.bm, self.cfg, self.pieces = pm, pm.bm, cfg, pieces
        self.states, self.widths, self.sizes, _ = pm.info(pieces)
        self.hsizes = pm.host_sizes(pieces)
        self.owner = np.array([p[0] for p in pieces])
        self.device_of = device_of.copy()
        self.rules = pm.rules if pm.rules.active else None
        n_dev = self.bm.num_devices
        self.used = np.bincount(self.device_of, weights=self.sizes, minlength=n_dev).astype(np.int64)
        self.hused = np.bincount(self.device_of, weights=self.hsizes, minlength=n_dev).astype(np.int64)
        self.fixed = pm.base_extra  # [D]: the fixed shards' comm outside the all-to-all, a constant per device
        self.rows = pm.rows(pieces)  # each piece's output dist: widths are kept apart per collective ([G, D])
        self.summed()

    def summed(self) -> None:
        """The devices' summed states and output widths, compute and totals, and the plan cost with its ties."""
        pm, bm = self.pm, self.bm
        S = pm.base_states.copy()
        dims = pm.base_dists.copy()
        np.add.at(S, self.device_of, self.states)
        np.add.at(dims, (self.rows, self.device_of), self.widths)
        compute = bm.compute_costs(S, bm.devices).sum(axis=-1)
        self.S, self.dims, self.compute = S, dims, compute
        self.totals = compute + bm.dist_comm_totals(dims) + self.fixed
        self.cost, self.ties = _max_and_ties(self.totals)

    def move(self, p: int, hot: int, siblings: np.ndarray, plateau: bool) -> bool:
        """Move piece p off `hot` to the first device in order that the polish takes (`_better_rows`)."""
        pm, bm, rules = self.pm, self.bm, self.rules
        states, widths, sizes, hsizes, rows = self.states, self.widths, self.sizes, self.hsizes, self.rows
        S, dims, compute, used, hused = self.S, self.dims, self.compute, self.used, self.hused
        ok = (used + sizes[p] <= pm.caps) & (hused + hsizes[p] <= pm.host_caps)
        ok[hot] = False
        ok[siblings] = False
        if rules is not None:
            ok &= rules.pins[self.owner[p]]
        cands = np.flatnonzero(ok)
        if not len(cands):
            return False
        k = np.arange(len(cands))
        new = bm.compute_costs(np.concatenate([S[hot][None] - states[p], S[cands] + states[p]]), np.concatenate([[hot], cands])).sum(axis=-1)
        dk = np.repeat(dims[None], len(cands), axis=0)  # [k, G, D]
        dk[:, rows[p], hot] -= widths[p]
        dk[k, rows[p], cands] += widths[p]
        tot = bm.dist_comm_totals(dk) + compute[None, :] + self.fixed[None, :]
        tot[:, hot] += new[0] - compute[hot]
        tot[k, cands] += new[1:] - compute[cands]
        better = _better_rows(tot, self.cost, self.ties, plateau)
        if rules is not None and rules.grouped:
            better = [k for k in better if _groups_kept(rules, self.owner, self.device_of, {int(p): int(cands[k])})]
        if not len(better):
            return False
        target = int(cands[better[0]])
        used[hot] -= sizes[p]
        used[target] += sizes[p]
        hused[hot] -= hsizes[p]
        hused[target] += hsizes[p]
        self.device_of[p] = target
        return True

    def swap(self, p: int, hot: int, siblings: np.ndarray, hot_owners: set[int], plateau: bool) -> bool:
        """Swap piece p on `hot` with the first piece elsewhere in order that the polish takes."""
        pm, bm, rules, owner, device_of = self.pm, self.bm, self.rules, self.owner, self.device_of
        states, widths, sizes, hsizes, rows = self.states, self.widths, self.sizes, self.hsizes, self.rows
        S, dims, compute, used, hused = self.S, self.dims, self.compute, self.used, self.hused
        qs = np.flatnonzero(device_of != hot)
        dq = device_of[qs]
        ok = np.ones(len(qs), dtype=bool)
        if self.cfg.split_apart:
            ok &= ~np.isin(dq, siblings) & (owner[qs] != owner[p]) & ~np.isin(owner[qs], list(hot_owners))
        ok &= (used[dq] - sizes[qs] + sizes[p] <= pm.caps[dq]) & (used[hot] - sizes[p] + sizes[qs] <= pm.caps[hot])
        ok &= (hused[dq] - hsizes[qs] + hsizes[p] <= pm.host_caps[dq]) & (hused[hot] - hsizes[p] + hsizes[qs] <= pm.host_caps[hot])
        if rules is not None:
            ok &= rules.pins[owner[p], dq] & rules.pins[owner[qs], hot]
        qs, dq = qs[ok], dq[ok]
        if not len(qs):
            return False
        k = np.arange(len(qs))
        new = bm.compute_costs(np.concatenate([S[hot][None] - states[p] + states[qs], S[dq] + states[p] - states[qs]]),
                               np.concatenate([np.full(len(qs), hot), dq])).sum(axis=-1)
        dk = np.repeat(dims[None], len(qs), axis=0)  # [k, G, D]
        dk[:, rows[p], hot] -= widths[p]
        dk[k, rows[qs], hot] += widths[qs]
        dk[k, rows[p], dq] += widths[p]
        dk[k, rows[qs], dq] -= widths[qs]
        tot = bm.dist_comm_totals(dk) + compute[None, :] + self.fixed[None, :]
        tot[:, hot] += new[: len(qs)] - compute[hot]
        tot[k, dq] += new[len(qs):] - compute[dq]
        better = _better_rows(tot, self.cost, self.ties, plateau)
        if rules is not None and rules.grouped:
            better = [k for k in better if _groups_kept(rules, owner, device_of, {int(p): int(dq[k]), int(qs[k]): hot})]
        if not len(better):
            return False
        q, d = int(qs[better[0]]), int(dq[better[0]])
        used[hot] += sizes[q] - sizes[p]
        used[d] += sizes[p] - sizes[q]
        hused[hot] += hsizes[q] - hsizes[p]
        hused[d] += hsizes[p] - hsizes[q]
        device_of[p], device_of[q] = d, hot
        return True

    def run(self, budget: Budget) -> tuple[np.ndarray, int]:
        """Steps until none lowers the cost (or the budget is spent). Returns the placement and the steps taken."""
        owner, device_of, cfg = self.owner, self.device_of, self.cfg
        idx = np.arange(len(self.pieces))
        tied_passes = (True,) if len(self.pieces) * self.bm.num_devices > PLATEAU_FIRST_CELLS else (False, True)
        moves = 0
        improved = True
        while improved and not budget.spent():
            improved = False
            hot = int(np.argmax(self.totals))
            hot_owners = set(owner[device_of == hot].tolist())
            # a lower plan cost first, over every piece on the bottleneck; only where none gives one, the same cost with
            # fewer devices at it (a plateau move, `_better_rows`): where the polish was not stuck it ends where it did.
            # Where costing a piece's swaps is large, the first step of either kind (`PLATEAU_FIRST_CELLS`)
            for plateau in (False,) if self.ties == 1 else tied_passes:
                for p in np.flatnonzero(device_of == hot):
                    siblings = np.unique(device_of[(owner == owner[p]) & (idx != p)]) if cfg.split_apart else np.zeros(0, dtype=np.int64)
                    improved = self.move(p, hot, siblings, plateau) or self.swap(p, hot, siblings, hot_owners, plateau)
                    if improved or budget.spent():
                        break
                if improved or budget.spent():
                    break
            if improved:
                moves += 1
                self.summed()
        return device_of, moves


# pieces x devices from which the polish takes the first step that lowers the cost or leaves fewer devices at it,
# instead of looking for a lower one first. Why: a bottleneck's twin (the device holding the other halves of its
# tables) ties with it, so no single step lowers the cost, and looking costs every swap of every bottleneck piece
# first. On production-xl (3,424 tables on 512 devices, ~7,000 pieces: 3.5 M) the one-collective plan's polish
# reached 10.831 ms in 16 s and 10.753 in 60 s this way, 10.878 and 10.833 the other (simulated); below it (every
# other committed suite) the steps are cheap and the polish keeps its order.
PLATEAU_FIRST_CELLS = 1_000_000
TIE_SHARE = 1e-9  # devices within this share of the plan cost are at the maximum with it


def _max_and_ties(totals: np.ndarray) -> tuple[float, int]:
    """(plan cost, devices at it) of device totals [D]."""
    top = float(totals.max())
    return top, int(np.count_nonzero(totals >= top - TIE_SHARE * abs(top)))


def _better_rows(tot: np.ndarray, cost: float, ties: int, plateau: bool = True) -> np.ndarray:
    """Rows of candidate device totals [k, D] that the polish takes: a lower plan cost, or (`plateau`) the same with
    fewer devices at it. Why the second: where devices tie at the maximum - the two halves of a table on twin devices,
    each holding the other half of the same tables - no single move lowers the maximum, but each move off one of them
    that leaves the rest below it brings the move that does one step nearer (nvl72-test-s1-0000: twins at 1.5468 ms).
    The pair (cost, ties) falls with every move taken, so the polish cannot cycle."""
    top = tot.max(axis=1)
    lower = top < cost - 1e-12
    if not plateau:
        return np.flatnonzero(lower)
    at_top = np.count_nonzero(tot >= (top - TIE_SHARE * np.abs(top))[:, None], axis=1)
    return np.flatnonzero(lower | ((top <= cost) & (at_top < ties)))


def _groups_kept(rules: PlacementRules, owner: np.ndarray, device_of: np.ndarray, moved: dict[int, int]) -> bool:
    """Whether the plan with the pieces `moved` (piece -> new device) keeps the placement constraints' groups for the
    tables of the moved pieces: apart from every table of their separate groups (and, for a table that must be cut,
    its pieces from each other), on the devices of every table they go with."""
    after = device_of.copy()
    for k, d in moved.items():
        after[k] = d
    for t in {int(owner[k]) for k in moved}:
        mine = after[owner == t]
        for j in rules.apart[t]:
            theirs = after[owner == j]
            if j == t and len(np.unique(mine)) < len(mine):
                return False
            if j != t and np.intersect1d(mine, theirs).size:
                return False
        if any(set(mine.tolist()) != set(after[owner == j].tolist()) for j in rules.together[t] if (owner == j).any()):
            return False
    return True


def cuttable(pm: PieceModel, piece: Piece, uneven: bool = True) -> tuple[Piece, Piece] | None:
    """`split(piece)` where the placement constraints let its table be cut into those halves (PlacementRules), else None.
    (A plan whose tables must be cut evenly cuts whole tables again instead: `even_pieces`, `cut_state`.)"""
    halves = split(piece, uneven)
    if halves is None or not pm.rules.may_split(piece[0], (halves[0][2], halves[1][2])):
        return None
    return halves


def even_pieces(pm: PieceModel, t: int, width: int) -> list[Piece] | None:
    """Table t, now in pieces `width` wide (its dim when whole), cut again into the next even width its constraints
    allow (PlacementRules.even_cut); None where there is none. Why the whole table: a plan for TorchRec's checkpoint
    reload holds a table's column pieces in one width (shardopt.core.torchrec_form), so halving one piece of it would
    leave the state no plan can be."""
    dim = pm.instance.tables[t].dim
    w = pm.rules.even_cut(t, dim, width)
    return None if w is None else [(t, j * w, w) for j in range(dim // w)]


def cut_state(pm: PieceModel, pieces: list[Piece], k: int, uneven: bool = True) -> list[Piece] | None:
    """The state `pieces` with piece k cut: halved (`cuttable`), or, where tables must be cut evenly, its whole table
    cut to the next even width (`even_pieces`); None where it cannot be."""
    p = pieces[k]
    if pm.rules.even:
        again = even_pieces(pm, p[0], p[2])
        return None if again is None else sorted([q for q in pieces if q[0] != p[0]] + again)
    halves = cuttable(pm, p, uneven)
    return None if halves is None else sorted(pieces[:k] + pieces[k + 1 :] + list(halves))


def _first_cut(pm: PieceModel, p: Piece, uneven: bool) -> list[Piece] | None:
    """A whole table's first cut: its halves, or its first even cut where tables must be cut evenly."""
    if pm.rules.even:
        return even_pieces(pm, p[0], p[2])
    halves = cuttable(pm, p, uneven)
    return None if halves is None else list(halves)


def start_pieces(pm: PieceModel, uneven: bool = True) -> tuple[Piece, ...]:
    """The search's first state: every table whole (PieceModel.all_pieces), but a table the placement constraints do
    not let be whole (it may only be column-wise) cut once."""
    out: list[Piece] = []
    for p in pm.all_pieces():
        cut = _first_cut(pm, p, uneven) if p[0] in pm.rules.split_only else None
        out += cut if cut is not None else [p]
    return tuple(sorted(out))


def split(piece: Piece, uneven: bool = True) -> tuple[Piece, Piece] | None:
    """The piece cut in two 4-aligned halves, the wider second where its width is an odd number of 4-column units
    (28 -> 12 + 16; `uneven=False`: exact halves only, as published); None below 8 columns. Why not only exact
    halves: random dims (4 x 1..64) are mostly not 4 x a power of two, and exact halving could not cut a 108-column
    table at all, so a table too big for one device went row-wise over all devices where column pieces are far
    cheaper."""
    t, off, cols = piece
    units = cols // DIM_ALIGNMENT
    if units < 2 or (not uneven and units % 2):
        return None
    first = (units // 2) * DIM_ALIGNMENT
    return (t, off, first), (t, off + first, cols - first)


def presplit_plan(
    instance: Instance, bm: BoundCostModel, max_pieces: int = 8, cfg: NeuroShardConfig | None = None, time_limit: float | None = None,
    layout: TieredLayout | None = None, uneven: bool = True, one_collective: bool = False, whole_column_wise: bool = False,
) -> tuple[list[Shard], float] | None:
    """One NeuroShard state chosen up front instead of searched: every table whose compute alone exceeds the mean
    device compute, or whose bytes exceed half the largest device, is halved until its pieces do not (at most
    `max_pieces` pieces, halves that stay 4-aligned),
    then the comm-aware grid greedy places the pieces and the polish improves the plan. (shards, cost), or None where
    no grid plan packs within `time_limit`.

    Why: on instances where a few tables are heavier than a whole device's fair share (production models), the
    beam search needs one step per halving and tens of seconds to find the splits, while table-wise starts leave
    the slowest device holding one such table; this start takes seconds and gives the exact solvers (which
    polish, not restructure, a plan) a split layout to work from. `time_limit` bounds the grid and the polish: on
    production-xl (3,424 tables on 512 devices) the pre-split grid took 16 s of the exact solver's 60, for a 14.8 ms
    start where the one-collective one gave 10.97 (simulated). `whole_column_wise`: whole tables may join the
    column-wise all-to-all (PieceModel)."""
    cfg = cfg or NeuroShardConfig()
    clock = Stopwatch()
    budget = Budget.of(clock, time_limit)
    pm = PieceModel(instance, bm, layout, whole_column_wise)
    pieces = (one_collective_pieces if one_collective else presplit_pieces)(pm, max_pieces, uneven)
    results = grid_greedy(pm, [pieces], cfg, comm_aware=True, budget=budget)
    if not budget.spent() and (not results or results[0].device_of is None):
        results = grid_greedy(pm, [pieces], cfg, budget=budget)
    if not results or results[0].device_of is None:
        return None
    device_of, _ = polish(pm, pieces, results[0].device_of, cfg, budget)
    states, widths, _, _ = pm.info(pieces)
    cost, _ = pm.plan_cost(states, widths, device_of, pm.rows(pieces))
    return pm.to_shards(pieces, device_of), cost


def one_collective_pieces(pm: PieceModel, max_pieces: int = 8, uneven: bool = True) -> list[Piece]:
    """The pre-split state (`presplit_pieces`) with every table still whole halved too, where it may be cut: a plan of
    it runs the column-wise all-to-all alone (the judge runs one collective per sharding type, each its own max over
    devices and its own start-up).

    Why: where whole tables and column pieces mix, each collective must be balanced on its own, and a small
    column-wise collective cannot be (its few pieces are wide against its per-device share): on production
    (856 x 128) the searches' mixed plans ended 12-17 % above the bound, a plan of one collective 4-7 %
    (docs/analytic-bound.md). Cutting every table costs its per-shard work (indices read twice, sector
    rounding), which the comm balance pays for where devices are many."""
    pieces = presplit_pieces(pm, max_pieces, uneven)
    whole = {t for t, n in Counter(p[0] for p in pieces).items() if n == 1}
    out: list[Piece] = []
    for p in pieces:
        cut = _first_cut(pm, p, uneven) if p[0] in whole else None
        out += cut if cut is not None else [p]
    return sorted(out)


def presplit_pieces(pm: PieceModel, max_pieces: int = 8, uneven: bool = True) -> list[Piece]:
    """The pre-split state: each table's pieces halved, round by round, while a piece's bytes exceed half the largest
    device (as far as 4-column pieces go: a table several devices large needs that many pieces to fit at all) or
    its compute alone exceeds the mean device compute (while the table stays within `max_pieces` pieces). A piece
    is halved on its own (`split`): a 28-column table too big for 8-column pieces ends as seven 4-column ones, where
    halving every piece of a round at once stopped at the first piece that could not be halved (then no state
    packed, and the table went row-wise)."""
    whole: list[Piece] = list(start_pieces(pm, uneven))
    _, _, nbytes, single = pm.info(whole)
    target = (float(single.sum()) + float(pm.base_compute.sum())) / pm.bm.num_devices
    room = float(pm.caps.max()) / 2  # a piece bigger than half a device is hard to pack: halve it too
    pieces: list[Piece] = []
    for p in whole:
        todo = [p]
        while pm.rules.even:  # (a table cut evenly: all of its pieces at once, while one of them is too big)
            _, _, b, c = pm.info(todo)
            again = even_pieces(pm, todo[0][0], todo[0][2])
            if again is None or not (b[0] > room or (len(again) <= max_pieces and c[0] > target)):
                break
            todo = again
        while not pm.rules.even:
            _, _, b, c = pm.info(todo)
            more = len(todo) * 2 <= max_pieces
            halves = [cuttable(pm, q, uneven) for q in todo]
            cut = {k for k, h in enumerate(halves) if h is not None and (b[k] > room or (more and c[k] > target))}
            if not cut:
                break
            todo = [h for k, q in enumerate(todo) for h in (halves[k] if k in cut else (q,))]  # type: ignore[union-attr]
        pieces += todo
    return sorted(pieces)


WIDE_SPLITS_MAX = 256  # cuts the wide-piece phase makes at most


def split_wide_bottlenecks(pm: PieceModel, pieces: list[Piece], device_of: np.ndarray, cfg: NeuroShardConfig,
                           budget: Budget) -> tuple[list[Piece], np.ndarray, int]:
    """Columns cut off the bottleneck device's widest pieces - half of one, else a quarter, an eighth... - onto the
    device the plan prices lowest with room for them, while the plan gets cheaper or keeps its cost with fewer
    devices at it (`_better_rows`); then the polish. Why: where the all-to-all sets the cost, a device's send is the
    width of its pieces, and the beam splits the largest and the most expensive pieces (`candidates_by_size`,
    `_by_cost`): a piece that is neither - a wide table of small pooling - stays whole, and where several such pieces
    sit on devices at the maximum, no single cut lowers the plan, so the beam stops as stale (skewed-test-s1-0005,
    256 H100s: two 256-column tables left in 128-column halves, each device 4x the receive floor). Less than a half
    because the device with the least load often has no room for a half's send (skewed-test-s1-0003: 64 columns took
    the lightest device from 0.99 to 1.68 ms, above the plan's 1.48). Kept only where the plan ends cheaper, not
    merely with fewer devices at its cost. Where tables are cut evenly (TorchRec's form), a cut re-cuts the whole
    table (`_wide_cuts`). Returns the pieces, their devices and the cuts made."""
    if not pieces:
        return pieces, device_of, 0
    info = pm.info(pieces)
    cost, totals = pm.plan_cost(*info[:2], device_of, pm.rows(pieces))
    start, start_pieces, start_devices = cost, pieces, device_of
    ties = int(np.count_nonzero(totals >= cost - TIE_SHARE * abs(cost)))
    cuts = 0
    while cuts < WIDE_SPLITS_MAX and not budget.spent():
        got = _cut_one_wide(pm, pieces, device_of, cfg, totals, cost, ties)
        if got is None:
            break
        pieces, device_of, cost, totals = got
        ties = int(np.count_nonzero(totals >= cost - TIE_SHARE * abs(cost)))
        cuts += 1
    if cuts and cfg.polish and not budget.spent():
        device_of, _ = polish(pm, pieces, device_of, cfg, budget)
        cost = pm.plan_cost(*pm.info(pieces)[:2], device_of, pm.rows(pieces))[0]
    if cost >= start * (1 - 1e-9):  # (cuts that only thinned the plateau: more shards for nothing)
        return start_pieces, start_devices, 0
    return pieces, device_of, cuts


def _cut_one_wide(pm: PieceModel, pieces: list[Piece], device_of: np.ndarray, cfg: NeuroShardConfig, totals: np.ndarray,
                  cost: float, ties: int) -> tuple[list[Piece], np.ndarray, float, np.ndarray] | None:
    """One cut of `split_wide_bottlenecks` that the polish would take, or None."""
    hot = int(np.argmax(totals))
    _, widths, _, _ = pm.info(pieces)
    on_hot = sorted((k for k in range(len(pieces)) if device_of[k] == hot), key=lambda k: (-widths[k], k))
    for k in on_hot[:2]:  # (the widest two: the next may cut where the widest may not)
        for trial, devices in _wide_cuts(pm, pieces, device_of, k, totals, hot, cfg.uneven_halves):
            if pm.rules.active and pm.rules.grouped:
                moved = {j: int(devices[j]) for j in range(len(trial)) if j >= len(pieces) - 1 or trial[j][0] == pieces[k][0]}
                if not _groups_kept(pm.rules, np.array([p[0] for p in trial]), devices, moved):
                    continue
            t_cost, t_totals = pm.plan_cost(*pm.info(trial)[:2], devices, pm.rows(trial))
            if len(_better_rows(t_totals[None], cost, ties)):
                return trial, devices, t_cost, t_totals
    return None


def _wide_cuts(pm: PieceModel, pieces: list[Piece], device_of: np.ndarray, k: int, totals: np.ndarray, hot: int, uneven: bool):  # type: ignore[no-untyped-def]
    """The cuts of piece k (on device `hot`) to try, as (pieces, devices): its last half, quarter, eighth... of
    columns (halving it, then its right half, ...: the pieces stay dyadic, so the plan can warm-start the exact
    solvers) onto the device the plan prices lowest with room for them; where tables are cut evenly, its whole table
    cut to the next even width (`even_pieces`), each old piece's device keeping the first new piece within it, the
    others onto the lowest-priced devices with room that hold none of the table."""
    t, _, cols = pieces[k]
    if pm.rules.even:
        again = even_pieces(pm, t, cols)
        if again is None:
            return
        rest = [j for j in range(len(pieces)) if pieces[j][0] != t]
        trial = [pieces[j] for j in rest] + again
        devices = np.concatenate([device_of[rest], np.full(len(again), -1)])
        holder = {pieces[j][1]: int(device_of[j]) for j in range(len(pieces)) if pieces[j][0] == t}
        for j, (_, off, _) in enumerate(again):
            if off in holder:
                devices[len(rest) + j] = holder[off]
        free = _free_devices(pm, trial, devices, totals, exclude=set(holder.values()))
        todo = [j for j in range(len(rest), len(trial)) if devices[j] < 0]
        if len(free) < len(todo):
            return
        devices[todo] = free[: len(todo)]
        if _within_memory(pm, trial, devices, set(holder.values())):
            yield trial, devices
        return
    others = pieces[:k] + pieces[k + 1:]
    stay: list[Piece] = []  # (halving: every piece stays one of the halving tree's, as the exact solvers' items are)
    current = pieces[k]
    while (halves := cuttable(pm, current, uneven)) is not None:
        left, right = halves
        trial = others + stay + [left, right]
        devices = np.concatenate([np.delete(device_of, k), np.full(len(stay) + 1, hot), [-1]])
        free = _free_devices(pm, trial, devices, totals, exclude={hot})
        if len(free):
            devices[-1] = free[0]
            if _within_memory(pm, trial, devices, {hot}):  # (each piece left on it carries its own optimizer rows)
                yield trial, devices
        stay.append(left)
        current = right


def _within_memory(pm: PieceModel, trial: list[Piece], devices: np.ndarray, kept: set[int]) -> bool:
    """Whether the devices that keep pieces of the cut table still hold everything placed on them: a table cut into
    more pieces on one device takes more bytes there than before (each piece has its own per-row optimizer state)."""
    _, _, sizes, _ = pm.info(trial)
    hsizes = pm.host_sizes(trial)
    for d in kept:
        on = devices == d
        if sizes[on].sum() > pm.caps[d] or hsizes[on].sum() > pm.host_caps[d]:
            return False
    return True


def _free_devices(pm: PieceModel, trial: list[Piece], devices: np.ndarray, totals: np.ndarray, exclude: set[int]) -> np.ndarray:
    """The devices, the lowest-priced first, with room for every unplaced piece of `trial` (devices -1) at once, as
    far as its pins allow, but `exclude`."""
    _, _, sizes, _ = pm.info(trial)
    hsizes = pm.host_sizes(trial)
    known = devices >= 0
    used = np.bincount(devices[known], weights=sizes[known], minlength=len(totals))
    hused = np.bincount(devices[known], weights=hsizes[known], minlength=len(totals))
    need, hneed = sizes[~known].max(initial=0), hsizes[~known].max(initial=0)
    ok = (used + need <= pm.caps) & (hused + hneed <= pm.host_caps)
    ok[list(exclude)] = False
    if pm.rules.active:
        for p in np.flatnonzero(~known):
            ok &= pm.rules.pins[trial[p][0]]
    cands = np.flatnonzero(ok)
    return cands[np.argsort(totals[cands], kind="stable")]
