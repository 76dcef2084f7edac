"""NeuroShard (MLSys 2023): beam search over column-wise splits, an inner greedy under a grid of dimension caps.

Faithful mode (`neuroshard_faithful`) is the published algorithm: beam width 3; the split candidates of a state are
its 10 largest pieces by bytes and its 10 most expensive by predicted single-piece cost; a split halves a piece's
columns (only where the half stays a multiple of 4), up to 10 steps; every state is scored by the best of an inner
greedy run under each dimension-cap scale 1.0, 1.05, ..., 1.5 (cap = scale x total dims / devices): pieces by
predicted cost, largest first, onto the feasible device (memory and dim cap) whose predicted compute after adding
it is lowest; every grid plan is scored by the full cost model (compute + both all-to-alls, max over devices).

`neuroshard` (the default solver) adds, each a switch in NeuroShardConfig whose effect is measured in
docs/results/neuroshard.md:
- `split_apart`: the two halves of a split table never share a device (halving on one device only adds work);
- `comm_aware`: the best beam states are re-run with an inner greedy that picks the device minimising the
  predicted *plan* cost (compute and all-to-all, max over devices) after the move, not just that device's compute;
- `dedup`: a state reached twice (the same multiset of pieces) is scored once;
- `polish`: a local search (moves and swaps off the bottleneck device) on the best plan;
- `anytime`: the time limit (when none is given, `default_budget`: 2-60 s from the instance's size) is honoured and
  the best plan so far returned (status `timeout`); the search stops at `polish_reserve` (15 %) of the budget before
  it, so the polish always runs;
- `patience`: the beam stops after 3 steps without a cheaper plan; `refine_extra`: the comm-aware refinement also
  re-runs the 4 cheapest states the search scored (docs/results/speed.md, "Fast by default");
- `seed_with_greedy`: the cost-model greedy's table-wise plan is scored beside the no-split grid plan, so the
  search starts from the better of the two (and never ends worse than the greedy solver).
- `one_collective`: in HBM searches, beside the beam search, the pre-split state with every other table halved too
  (`one_collective_pieces`) placed by the comm-aware grid and polished (within 20 % of the search's budget then
  left), the cheaper plan kept: its plans run the
  column-wise all-to-all alone, where a mix of whole tables and pieces runs two collectives, each of which must
  balance on its own (docs/neuroshard.md).
- `join_collectives`: whole tables may join the column-wise all-to-all (`Shard.column_wise`: TorchRec's column_wise
  with one rank): the search prices them there (`PieceModel.rows`), and the plan's whole tables are marked where
  that is cheaper (solvers.placement.collectives: one all-to-all instead of two).
- `seed_with_presplit`: the pre-split state (`presplit_pieces`: tables heavier than a device's fair share, or bigger
  than half a device, halved up front) joins the first beam, so the search does not spend one step per halving to
  reach them (docs/neuroshard.md).

Beyond HBM: where table-wise and column-wise placements in HBM cannot hold the instance (or the search over them
found no plan, even when the time limit ended it: greedy's tiered plan is still an answer), the same search
runs within the heuristics' tiered layouts (solvers.placement.tiering: every layout greedy packed, its cheapest first and the
cheapest that splits the oversized tables the other way second, each searched and polished, the cheapest plan
kept: greedy's packed cost ranks them poorly, `tiered_layouts`): the row-wise tables' blocks
are every device's background from the start, the UVM tables are pieces in their tier (HBM and host bytes, the
cache's miss share in their state), and the search chooses devices and column splits for the packed tables under
both capacities (`PieceModel`, docs/placements.md). After the search, the placement polish (solvers.placement.polish)
chooses how tables are held: caches and HBM moves in a tiered layout, data-parallel replicas (`data_parallel`: in
tiered layouts by default; on HBM instances opt-in: a replica plan the model prefers can be slower when measured,
docs/results/gpu.md, "Measured on a GPU"), and (`row_wise`, on by default)
row-wise or table-row-wise splits of a table on the bottleneck device where the cost model says the split pays, as
TorchRec splits hot tables; the device polish then runs again around the split tables.

The search is split by job: `config` (the options), `grid` (a state's pieces and the grid-searched greedy that
scores it), `pieces` (splitting, the pre-split state, the device polish) and this module (the beam search, the
tiered layouts and the solvers). The grid's 11 greedy runs of every beam state of a step go in lock-step: one batched cost-model call per piece
position for all (state, scale) lanes, using the cost models' additive device states (no re-encoding of a
device's other pieces).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.feasibility import tiered_infeasibility_reason
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Shard
from shardopt.core.memory import slice_bytes
from shardopt.core.plan_check import constraint_violations
from solvers.base import (
    Budget,
    Solver,
    SolveResult,
    SolveStatus,
    StopReason,
    Stopwatch,
    TieredLayoutChoice,
    fail,
    finish,
    on_work_budget,
    unplaceable,
)
from solvers.heuristics.constructive import GreedySolver
from solvers.neuroshard.config import FAITHFUL, NeuroShardConfig, default_budget
from solvers.neuroshard.finish import polish_searched_plan, rebalanced_replica_sets
from solvers.neuroshard.grid import BATCH_STATES, LANE_DEVICES, GridResult, Piece, PieceModel, grid_greedy
from solvers.neuroshard.layouts import search_order, tiered_layouts
from solvers.neuroshard.pieces import (
    cut_state,
    one_collective_pieces,
    polish,
    presplit_pieces,
    split,
    split_wide_bottlenecks,
    start_pieces,
)
from solvers.options import options_as_dict
from solvers.placement.collectives import allow_whole_column_wise, column_wise_whole, join_one_collective
from solvers.placement.polish import describe_placements
from solvers.placement.rules import (
    even_columns,
    even_widths,
    min_widths,
    placement_conflict,
    tiers_first,
    torchrec_form,
)
from solvers.placement.tiering import TieredLayout, replica_layout, replica_order
from solvers.progress import report
from solvers.protocols import LayoutProposer, PlanPolisher, SeedSolver
from solvers.results import SearchStats

LATER_LAYOUTS_SHARE = 0.2  # of the time left after the first tiered layout's search, what the layouts beyond the second share
REPLICA_PREFIXES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # replica sets searched around (replica_order prefixes)
REPLICA_REFINE_SHARE = 0.1  # of the budget the replica searches start with: the rebalanced replica sets around the best
REPLICA_PATIENCE = 2  # prefixes in a row not cheaper than the best before the replica searches stop
# an HBM plan that packed only with the completion check is compared with a tiered one only where this share of the
# budget is left: the tiered layouts' search and placement polish need it (on production, with 7 % left, they overran
# the 10 s budget by 7 s)
TIGHT_TIERED_SHARE = 0.25
ONE_COLLECTIVE_SHARE = 0.2  # of the search's budget left after its grid, what the one-collective lane's polish may take
REFINE_BATCH_PAIRS = 20_000  # tables x devices up to which the comm-aware refinement runs its states in one batch


class _StateScorer:
    """Scores beam states by their best grid plan (`grid_greedy`), in lock-step batches of one piece count, with
    `dedup` remembering every state scored; counts the states scored. One per solve: the seeds, the beam steps and
    the info all go through it."""

    def __init__(self, pm: PieceModel, cfg: NeuroShardConfig, budget: Budget, num_devices: int):
        self.pm, self.cfg, self.budget = pm, cfg, budget
        self.seen: dict[tuple[Piece, ...], GridResult] = {}
        self.evaluated = 0
        self.rescored_safe = 0  # states no grid lane packed, scored again with the completion check
        # states per lock-step batch: bounded lanes x devices keeps each batched call in cache-friendly sizes
        self.batch = max(1, min(BATCH_STATES, LANE_DEVICES // (len(cfg.scales) * num_devices)))

    def score(self, states: list[tuple[Piece, ...]]) -> list[GridResult | None]:
        """Grid results aligned with `states`, new ones scored in lock-step batches (with dedup, a state seen
        before is not scored again); None for states the time budget left unscored."""
        cfg, seen, batch, budget = self.cfg, self.seen, self.batch, self.budget
        results: list[GridResult | None] = [seen.get(st) if cfg.dedup else None for st in states]
        todo = [i for i, r in enumerate(results) if r is None]
        if cfg.dedup:
            todo = list({states[i]: i for i in reversed(todo)}.values())[::-1]  # first occurrence of each
        # lock-step batches of states of similar piece counts (grid_greedy pads the fewer; sorted, little padding)
        ordered = sorted(todo, key=lambda i: len(states[i]))  # (stable)
        chunks = [ordered[k : k + batch] for k in range(0, len(ordered), batch)]
        for chunk in chunks:
            scored = grid_greedy(self.pm, [list(states[i]) for i in chunk], cfg, budget=budget)
            if scored is None:
                break
            unpacked = [k for k, r in enumerate(scored) if r.device_of is None]
            if cfg.safe_fallback and unpacked:  # (no lane packed: again, each piece only where the rest still fit)
                again = grid_greedy(self.pm, [list(states[chunk[k]]) for k in unpacked], cfg, budget=budget, safe=True)
                if again is None:
                    break
                self.rescored_safe += len(unpacked)
                for k, r in zip(unpacked, again):
                    scored[k] = r
            for i, r in zip(chunk, scored):
                self.evaluated += 1
                results[i] = r
                if cfg.dedup:
                    seen[states[i]] = r
            if budget.spent():
                break
        if cfg.dedup:
            results = [seen.get(st) for st in states]
        return results


@dataclass
class _Search:
    """The beam search's running state: the best plan so far and the state it places, the beam (cost, state),
    and what the solve reports (steps taken, whether the time ran out, whether the comm-aware re-run won)."""

    best: GridResult
    best_state: tuple[Piece, ...]
    beam: list[tuple[float, tuple[Piece, ...]]]
    steps: int = 0
    timed_out: bool = False
    comm_refined: bool = False


def _seeded_search(
    instance: Instance, cost_model: CostModel, pm: PieceModel, scorer: _StateScorer, start: tuple[Piece, ...], first: GridResult, seed: int,
    greedy: SolveResult | None = None, seed_solver: SeedSolver | None = None,
) -> tuple[_Search, float | None, float | None]:
    """The first beam: the unsplit state, its best plan the grid's (`first`) or the greedy's when cheaper
    (`seed_with_greedy`), and beside it the pre-split state (`seed_with_presplit`), which becomes the best when
    its grid plan is cheaper. Returns the search and the greedy and pre-split seeds' costs (None: not scored)."""
    cfg = scorer.cfg
    best, best_state = first, start
    greedy_cost = None
    if cfg.seed_with_greedy:
        seeded = _greedy_seed(instance, cost_model, pm, start, seed, greedy, seed_solver)
        if seeded is not None:
            greedy_cost = seeded.cost
            if greedy_cost < best.cost:
                best = seeded
    beam = [(best.cost, start)]
    presplit_cost = None
    if cfg.seed_with_presplit:  # tables heavier than a device's share start halved (docs/neuroshard.md)
        pre = tuple(presplit_pieces(pm, uneven=cfg.uneven_halves))
        if pre != start:
            (scored,) = scorer.score([pre])
            if scored is not None and scored.device_of is not None:
                presplit_cost = scored.cost
                beam.append((scored.cost, pre))
                if scored.cost < best.cost:
                    best, best_state = scored, pre
    return _Search(best, best_state, beam), greedy_cost, presplit_cost


def _one_collective_lane(pm: PieceModel, cfg: NeuroShardConfig, search_budget: Budget, share: float) -> tuple[list[Piece], np.ndarray, float] | None:
    """`one_collective`: the one-collective state (`one_collective_pieces`: every table cut, the column-wise all-to-all
    alone) placed by the comm-aware grid (else the plain one) within the search's budget, and polished within `share`
    of what is then left of it; (pieces, devices, cost), or None when no lane packs it. A lane of its own, compared with
    the beam search's plan at the end: in the beam it crowded out the mixed states it does not beat (small.json: 0.927
    against 0.917 ms), and its comm-aware grid plan is better than the beam's children of it (production: 10.43 against
    10.59 ms, simulated). Why the grid is not held to the share: on production-xl (3,424 tables on 512 devices) it takes
    8 s, more than the share left after the first grid (13 s), and without the lane the search's plan was 12.7 ms
    where the lane's is 10.8 (simulated)."""
    pieces = one_collective_pieces(pm, uneven=cfg.uneven_halves)
    for comm_aware in (True, False):
        got = grid_greedy(pm, [pieces], cfg, comm_aware=comm_aware, budget=search_budget)
        if got is None:
            return None
        if got[0].device_of is not None:
            break
    else:
        return None
    device_of = got[0].device_of
    budget = search_budget.share(share)
    if cfg.polish and not budget.spent():
        device_of, _ = polish(pm, pieces, device_of, cfg, budget)
    states, widths, _, _ = pm.info(pieces)
    cost, _ = pm.plan_cost(states, widths, device_of, pm.rows(pieces))
    return pieces, device_of, float(cost)


def _polish_the_better(pm: PieceModel, cfg: NeuroShardConfig, budget: Budget, beam: tuple[list[Piece], np.ndarray | None, float],
                       one: tuple[list[Piece], np.ndarray, float] | None) -> tuple[list[Piece], np.ndarray, int]:
    """(pieces, devices, polish moves) of the cheaper of the beam search's best plan and the one-collective lane's,
    each polished: the cheaper start first, with the budget left, then the other with what remains. Why: the lane's
    plan was polished within its 20 % share only, and the polish of the beam's plan alone could spend the time on the
    plan that then lost (nvl72-test-s1-0000: the lane's plan won at 1.5468 ms with 4 devices still at the maximum)."""
    starts = [c for c in (beam, one) if c is not None and c[1] is not None]
    starts.sort(key=lambda c: c[2])
    best: tuple[list[Piece], np.ndarray, int] | None = None
    best_cost = float("inf")
    for pieces, device_of, cost in starts:
        pieces, moves = list(pieces), 0
        if cfg.polish and not budget.spent():
            device_of, moves = polish(pm, pieces, device_of, cfg, budget)
            cost = pm.plan_cost(*pm.info(pieces)[:2], device_of, pm.rows(pieces))[0]
        if cost < best_cost:
            best, best_cost = (pieces, device_of, moves), cost
    assert best is not None  # (the caller returned when neither has a plan)
    return best


def _greedy_seed(instance: Instance, cost_model: CostModel, pm: PieceModel, start: tuple[Piece, ...], seed: int,
                 seeded: SolveResult | None = None, seed_solver: SeedSolver | None = None) -> GridResult | None:
    """The seed's plan (the cost-model greedy's table-wise plan by default) as a result for the unsplit state `start`,
    judged by the full cost model (no scale: it is not a grid plan); None when the seed finds no plan. Why: the search
    then never ends worse than its seed solver."""
    if seeded is None:
        seeded = (seed_solver or GreedySolver()).solve(instance, cost_model, seed=seed)
    if seeded.plan is None:
        return None
    device_of = seed_devices(pm, seeded.plan.shards, start)
    if device_of is None:
        return None
    states0, widths0, _, _ = pm.info(list(start))
    greedy_cost, _ = pm.plan_cost(states0, widths0, device_of, pm.rows(start))
    return GridResult(greedy_cost, device_of, None)


def seed_devices(pm: PieceModel, shards: list[Shard], start: tuple[Piece, ...]) -> np.ndarray | None:
    """The device of each whole-table piece of `start` in a plan (`shards`), or None when the plan is not one of
    the search's states: it must place the packed tables whole, each in its layout tier, and the rest exactly as
    the layout's fixed shards (a greedy plan with row-wise or host-memory shards is no seed for a table-wise HBM
    state, nor one whose layout differs)."""
    fixed = {(s.table, s.device, s.row_offset, s.rows, s.kernel, s.cache_load_factor) for s in (pm.layout.fixed if pm.layout else [])}
    where: dict[str, Shard] = {}
    for s in shards:
        key = (s.table, s.device, s.row_offset, s.rows, s.kernel, s.cache_load_factor)
        if key in fixed:
            fixed.discard(key)
            continue
        if s.table in where:
            return None
        where[s.table] = s
    if fixed:
        return None
    out = []
    for t, off, cols in start:
        s = where.get(pm.instance.tables[t].name)
        if s is None or s != pm.shard((t, off, cols), s.device):  # (also: not whole, or in another tier)
            return None
        out.append(s.device)
    return np.array(out, dtype=np.int64)


def _beam_search(search: _Search, pm: PieceModel, scorer: _StateScorer, budget: Budget) -> None:
    """Up to `max_steps` steps: every split proposal of the beam scored, the best child kept as the best plan,
    the `beam_width` cheapest children (distinct with `dedup`) the next beam. Stops when nothing splits, or with
    `timed_out` when the budget left proposals unscored or ran out (the beam then stays as it was)."""
    cfg = scorer.cfg
    stale = 0
    for _ in range(cfg.max_steps):
        if cfg.patience is not None and stale >= cfg.patience:
            break
        proposals = _split_proposals(pm, search.beam, cfg)
        if not proposals:
            break
        results = scorer.score(proposals)
        search.steps += 1
        children = [(r.cost, st) for st, r in zip(proposals, results) if r is not None]
        stale += 1
        for (c, st), r in zip(children, [r for r in results if r is not None]):
            if c < search.best.cost:
                search.best, search.best_state = r, st
                stale = 0
                report(best_cost=c)
        if len(children) < len(proposals) or budget.spent():
            search.timed_out = True
            break
        children.sort(key=lambda c: (c[0], c[1]))
        if cfg.dedup:  # distinct states only
            uniq, keep = set(), []
            for c in children:
                if c[1] not in uniq:
                    uniq.add(c[1])
                    keep.append(c)
            children = keep
        search.beam = children[: cfg.beam_width]


def _split_proposals(pm: PieceModel, beam: list[tuple[float, tuple[Piece, ...]]], cfg: NeuroShardConfig) -> list[tuple[Piece, ...]]:
    """The children of the beam's states: one per split candidate (the `candidates_by_size` largest and the
    `candidates_by_cost` most expensive splittable pieces of the state), that piece halved."""
    proposals: list[tuple[Piece, ...]] = []
    for _, state in beam:
        pieces = list(state)
        _, _, sizes, single = pm.info(pieces)
        cuts = {k: cut_state(pm, pieces, k, cfg.uneven_halves) for k in range(len(pieces))}
        if pm.rules.even:  # (a table is cut evenly, all its pieces at once: one candidate per table, its first piece)
            firsts = {p[0]: k for k, p in reversed(list(enumerate(pieces)))}
            cuts = {k: c for k, c in cuts.items() if firsts[pieces[k][0]] == k}
        splittable = [k for k, c in cuts.items() if c is not None]
        by_size = heapq.nlargest(cfg.candidates_by_size, splittable, key=lambda k: (sizes[k], -k))
        by_cost = heapq.nlargest(cfg.candidates_by_cost, splittable, key=lambda k: (single[k], -k))
        for k in sorted(set(by_size) | set(by_cost)):
            proposals.append(tuple(cuts[k]))  # type: ignore[arg-type]
    return proposals


def _refine_comm_aware(search: _Search, pm: PieceModel, cfg: NeuroShardConfig, budget: Budget,
                       seen: dict[tuple[Piece, ...], GridResult] | None = None) -> None:
    """`comm_aware`: the grid re-run for the best few states with the comm-aware greedy (it scores each move by
    the plan cost, all-to-all included); whatever is best is kept. Sets `timed_out` when the budget ends it.
    The states: the best and the last beam (`beam_width` of them), and with `refine_extra` that many more of the
    cheapest states the search scored (`seen`)."""
    finalists = list(dict.fromkeys([search.best_state] + [st for _, st in search.beam]))[: cfg.beam_width]
    if cfg.refine_extra and seen:
        ranked = sorted((r.cost, st) for st, r in seen.items() if r.device_of is not None)
        extra = [st for _, st in ranked if st not in finalists][: cfg.refine_extra]
        finalists += extra
    # one lock-step batch on a small instance (its loop's numpy calls are most of the time); one state at a time on a
    # large one, so that the budget ends it between states, each refined one kept
    small = len(pm.tables) * pm.bm.num_devices <= REFINE_BATCH_PAIRS
    for batch in [finalists] if small else [[st] for st in finalists]:
        refined = grid_greedy(pm, [list(st) for st in batch], cfg, comm_aware=True, budget=budget)
        if refined is None:
            search.timed_out = True
            break
        for st, r in zip(batch, refined):
            if r.cost < search.best.cost:
                search.best, search.best_state, search.comm_refined = r, st, True
                report(best_cost=r.cost)
        if budget.spent():
            search.timed_out = True
            break


def merge_colocated_columns(instance: Instance, bm: BoundCostModel, shards: list[Shard], force: bool = False) -> list[Shard]:
    """`shards` with each table's column pieces on one device merged into one shard, the table's columns laid out
    again so that each device's share is one contiguous range (columns are interchangeable in the cost model), where
    that is no dearer by the cost model (`force`: whatever it costs). Why: the safe grid (completion-checked) can leave
    several slices of one table on a device, each paying its own per-shard costs; and TorchRec loads a table's slices
    on one device only where they share a shape (shardopt.core.torchrec_form)."""
    by_table: dict[str, list[Shard]] = {}
    for s in shards:
        by_table.setdefault(s.table, []).append(s)
    tables = {t.name: t for t in instance.tables}
    out: list[Shard] = []
    changed = False
    for name, group in by_table.items():
        devices = [s.device for s in group]
        plain = all(s.rows is None and s.row_offset == 0 and not s.replicated for s in group)
        same_tier = len({(s.kernel, s.cache_load_factor) for s in group}) == 1
        if len(set(devices)) == len(devices) or not plain or not same_tier:
            out += group
            continue
        width: dict[int, int] = {}
        for s in sorted(group, key=lambda s: s.col_offset):
            width[s.device] = width.get(s.device, 0) + s.width(tables[name])
        offset = 0
        for d, w in width.items():  # (devices in the order of their first column)
            whole = w == tables[name].dim
            out.append(Shard(table=name, device=d, col_offset=0 if whole else offset, cols=None if whole else w,
                             kernel=group[0].kernel, cache_load_factor=group[0].cache_load_factor))
            offset += w
        changed = True
    if not changed:
        return shards
    return out if force or bm.plan_costs(out).max_cost <= bm.plan_costs(shards).max_cost else shards


class NeuroShardSolver(Solver):
    """NeuroShard's search, composed from injected parts (solvers.protocols), each with its default: `seed_solver`
    (GreedySolver: the plan the search starts from, reads its tiered layouts off and falls back to), `layouts` (the
    tiered layout proposer, solvers.neuroshard.layouts.tiered_layouts) and `polisher` (polish_searched_plan)."""

    name = "neuroshard"
    Options = NeuroShardConfig

    def __init__(self, options: Any = None, *, seed_solver: SeedSolver | None = None, layouts: LayoutProposer | None = None,
                 polisher: PlanPolisher | None = None, **overrides: Any) -> None:
        super().__init__(options, **overrides)
        self.seed_solver: SeedSolver = seed_solver if seed_solver is not None else GreedySolver()
        self.propose_layouts: LayoutProposer = layouts if layouts is not None else tiered_layouts
        self.polisher: PlanPolisher = polisher if polisher is not None else polish_searched_plan
        self._custom_parts = {k: getattr(v, "name", None) or getattr(v, "__qualname__", type(v).__name__)
                              for k, v in (("seed_solver", seed_solver), ("layouts", layouts), ("polisher", polisher)) if v is not None}

    @property
    def config(self) -> NeuroShardConfig:
        return self.options

    def params(self) -> dict[str, Any]:
        return {**options_as_dict(self.options), **({"parts": self._custom_parts} if self._custom_parts else {})}

    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult:
        """The search over table-wise and column-wise placements in HBM; where those cannot hold the instance (or
        the search finds no plan that fits), the same search within a tiered layout (solvers.placement.tiering: row-wise
        tables fixed over all devices, cold tables in host memory behind HBM caches). Never less than its seed: where
        the search ends without a plan (its budget spent before the first state was scored on a large tight instance)
        and greedy places the instance, greedy's plan is the answer."""
        if time_limit is not None:
            return self._solve_on(instance, cost_model, Budget.of(Stopwatch(), time_limit), seed)
        # no time limit: the default budget is work, not wall time (shardopt.core.work), so the same instance and seed
        # give the same plan on any machine; a wall-clock cap stays as the safety net, and the result says when it fired
        seconds = self.config.default_time_limit or default_budget(instance)
        return on_work_budget(seconds, lambda: self._solve_on(instance, cost_model, Budget.of(Stopwatch(), seconds), seed))

    def _solve_on(self, instance: Instance, cost_model: CostModel, budget: Budget, seed: int) -> SolveResult:
        clock = budget.clock
        cfg = self.config
        conflict = self._constraint_conflict(instance)
        if conflict is not None:
            relaxed = allow_whole_column_wise(instance)  # (a column_wise-only table it cannot cut: placed whole, marked)
            if relaxed is not None and self._constraint_conflict(relaxed) is None:
                return column_wise_whole(self, instance, cost_model, self._solve_on(relaxed, cost_model, budget, seed), clock, seed)
            return fail(self, SolveStatus.no_solution, f"{self.name}: {conflict}", clock, {"constraints": "not met"})
        # its seed, computed once: the HBM search starts from it, the tiered layouts are read off it, and it is the
        # answer where the search ends without a plan (a search that is not seeded with it computes it on demand)
        greedy = self.seed_solver.solve(instance, cost_model, seed=seed, time_limit=budget.left()) if cfg.seed_with_greedy else None
        result = self._solve(instance, cost_model, budget, seed, greedy)
        made_late = greedy is None and result.plan is None and result.status is not SolveStatus.infeasible and budget.spent()
        if made_late:  # (a search without a seed, the published one, cut before its first plan: the seed's plan is still an answer)
            greedy = self.seed_solver.solve(instance, cost_model, seed=seed)
        if result.plan is not None or result.status is SolveStatus.infeasible or greedy is None or greedy.plan is None:
            return result
        made = "made when the search ran out of time" if made_late else "its seed"
        info = {"fallback": f"the search ended without a plan: {self.seed_solver.name}'s plan, {made}, is the answer",
                "search_reason": result.reason, "greedy": greedy.info}
        return finish(self, instance, cost_model, list(greedy.plan.shards), clock, seed=seed, info=info,
                      stopped=StopReason.time_limit if budget.spent() else None)

    def _solve(self, instance: Instance, cost_model: CostModel, budget: Budget, seed: int, greedy: SolveResult | None) -> SolveResult:
        clock = budget.clock
        reason = split_infeasibility(instance) or tiers_first(instance)
        hbm: SolveResult | None = None
        if reason is None:
            result = self._search(instance, cost_model, None, budget, seed, greedy)
            if result.plan is not None:
                # a tight instance (some state packed only with the completion check) may still be cheaper in a tiered
                # layout: a cold table in host memory frees the HBM the column slices crowd; both are searched (the
                # tiered layouts in the time left) and the cheaper kept
                left = budget.left()
                tight = result.stats is not None and result.stats.states_rescored_safe > 0 and (left is None or left > TIGHT_TIERED_SHARE * (budget.deadline or 0.0))
                if not tight:
                    return self._replica_searches(instance, cost_model, result, budget, seed)
                hbm, reason = result, "the HBM plan packed only with the completion check"
            else:  # (out of time too: the tiered layout's greedy plan is still an answer; the search there stops at once)
                reason = result.reason or "no plan in HBM"
        if tiered_infeasibility_reason(instance) is not None:
            return hbm if hbm is not None else unplaceable(self, instance, reason, clock, "table-wise and column-wise in HBM, or in a tiered layout")
        tiered = self._solve_tiered(instance, cost_model, budget, seed, reason, greedy)
        if hbm is None:
            return tiered
        costs = {"hbm": float(hbm.predicted.max_cost) if hbm.predicted is not None else np.inf,
                 "tiered": float(tiered.predicted.max_cost) if tiered.plan is not None and tiered.predicted is not None else np.inf}
        chosen = tiered if costs["tiered"] < costs["hbm"] else hbm
        chosen.info["hbm_or_tiered"] = costs
        return chosen

    def _constraint_conflict(self, instance: Instance) -> str | None:
        """Why the search's placements (whole tables and column halves in HBM) cannot meet the placement constraints."""
        narrowest = min_widths(instance)
        uneven = self.config.uneven_halves

        def can_split(t: int, table: Any) -> bool:
            if even_columns(instance):
                return bool(even_widths(table.dim, int(narrowest[t])))
            halves = split((t, 0, table.dim), uneven)
            return halves is not None and min(h[2] for h in halves) >= narrowest[t]

        return placement_conflict(instance, self.name, can_split, tiers=True)

    def _replica_searches(self, instance: Instance, cost_model: CostModel, result: SolveResult, budget: Budget, seed: int) -> SolveResult:
        """On an HBM instance (unless `data_parallel=False`), the search again around sets of replicas in the time the
        search left, the cheapest plan kept. Why: the placement polish replicates tables of the searched plan where
        they sit (on HBM instances only with `data_parallel=True`), and a replica set it
        would need the other tables moved for never looks cheaper there (TorchRec's plans replicate the smallest tables
        and balance the rest around them). So the
        smallest tables (`replica_order`) are pre-placed as replicas, prefixes of growing size (REPLICA_PREFIXES), and
        the other tables searched around them, each prefix an equal share of the time left, until REPLICA_PATIENCE
        prefixes in a row are not cheaper or the copies no longer fit."""
        if (self.config.data_parallel is False or result.plan is None or result.predicted is None
                or instance.constraint_kinds() - {"torchrec"}  # (TorchRec's form loads replicas: data_parallel)
                or not cost_model.bind(instance).replicas):  # (a model that cannot price replicas: none proposed)
            return result
        order = replica_order(instance)
        sizes = [k for k in REPLICA_PREFIXES if k <= len(order)]
        have = sorted({s.table for s in result.plan.shards if s.replicated})
        best, best_cost = result, float(result.predicted.max_cost)
        tried: list[dict[str, Any]] = []
        worse = 0
        searches = budget.share(1.0 - REPLICA_REFINE_SHARE)  # (the rest: the replica sets around the best, rebalanced)
        for j, k in enumerate(sizes):
            if searches.spent():
                break
            names = sorted(instance.tables[i].name for i in order[:k])
            if names == have:
                continue
            layout = replica_layout(instance, order[:k])
            if layout is None:  # (the copies no longer fit on every device: no longer prefix does)
                break
            got = self._search(instance, cost_model, layout, searches.share(1.0 / (len(sizes) - j)), seed)
            cost = float(got.predicted.max_cost) if got.plan is not None and got.predicted is not None else float("inf")
            tried.append({"replicas": k, "cost": cost})
            if cost < best_cost:
                best, best_cost, worse = got, cost, 0
            else:
                worse += 1
                if worse >= REPLICA_PATIENCE:
                    break
        best.info["replica_searches"] = {"searched_cost": float(result.predicted.max_cost), "prefixes": tried}
        return self._rebalanced_replicas(instance, cost_model, best, budget, seed)

    def _rebalanced_replicas(self, instance: Instance, cost_model: CostModel, result: SolveResult, budget: Budget, seed: int) -> SolveResult:
        """The plan with the replica sets a few tables shorter and longer than its own, each judged with the other
        tables moved again around it (solvers.neuroshard.finish, `rebalanced_replica_sets`): the prefix searches
        try sizes REPLICA_PREFIXES apart, and the placement polish's replica sweep prices each prefix with the other
        tables where they sit. `result` where none is cheaper."""
        if result.plan is None or result.predicted is None or budget.spent() or not self.config.polish:
            return result
        bm = cost_model.bind(instance)
        shards, moves, n = rebalanced_replica_sets(instance, bm, list(result.plan.shards), self.config, budget)
        if not moves:
            return result
        info = dict(result.info, rebalanced_replicas={"moves": moves, "device_moves": n, "cost_before": float(result.predicted.max_cost)})
        extra: dict[str, Any] = {}
        extra["placements"], info["tiers"] = describe_placements(instance, shards)
        stopped = StopReason.time_limit if result.stopped is StopReason.time_limit or budget.spent() else None
        return finish(self, instance, cost_model, shards, budget.clock, seed=seed, stopped=stopped, info=info, bound=bm, extra_params=extra)

    def _solve_tiered(self, instance: Instance, cost_model: CostModel, budget: Budget, seed: int, reason: str,
                      greedy: SolveResult | None = None) -> SolveResult:
        """The search within greedy's tiered layouts (`reason`: why the HBM search gave no plan, for the messages;
        `greedy`: greedy's result when the caller has it)."""
        if greedy is None:
            greedy = self.seed_solver.solve(instance, cost_model, seed=seed, time_limit=budget.left())
        layouts = self.propose_layouts(instance, greedy)
        if isinstance(layouts, str):
            return fail(self, SolveStatus.no_solution, f"{reason}; and no tiered layout: {layouts}. The instance is not proven infeasible", budget.clock,
                        {"tiers": "failed"})
        # every layout greedy packed is searched, the cheapest packed first, and the cheapest with the oversized tables
        # split the other way (within one host / over all devices) second, the cheapest plan kept: greedy's packed
        # cost ranks the layouts poorly, the search and the placement polish change their order. The first gets half
        # the time left, the second all but LATER_LAYOUTS_SHARE of what is then left (on large instances the polish
        # needs it), the rest equal shares of the remainder (on small
        # instances every search ends long before its deadline and the next gets the time it left)
        layouts = search_order(layouts)
        searched: list[tuple[TieredLayoutChoice, SolveResult]] = []
        n = len(layouts)
        for k, (about, layout) in enumerate(layouts):
            if k > 0 and budget.spent():
                break
            share = 0.5 if k == 0 and n > 1 else (1.0 - LATER_LAYOUTS_SHARE) if k == 1 and n > 2 else 1.0 / (n - k)
            searched.append((about, self._search(instance, cost_model, layout, budget.share(share), seed, greedy)))
        costs = [float(r.predicted.max_cost) if r.plan is not None and r.predicted is not None else np.inf for _, r in searched]
        k = int(np.argmin(costs))  # (ties: the layout greedy packed cheaper)
        about, chosen = searched[k]
        if len(layouts) > 1:
            chosen.info["row_splits_within_host"] = about.within_host
            chosen.info["layouts_compared"] = [dict(a.to_dict(), searched_cost=c) for (a, _), c in zip(searched, costs)]
            chosen.info["layouts_not_searched"] = len(layouts) - len(searched)
        return chosen

    def _search(self, instance: Instance, cost_model: CostModel, layout: TieredLayout | None, budget: Budget, seed: int,
                greedy: SolveResult | None = None) -> SolveResult:
        """The seeded beam search, the comm-aware refinement and the polish over the pieces of `layout`'s packed
        tables (all tables in HBM without one)."""
        cfg = self.config
        clock = budget.clock
        if not cfg.anytime:  # (the published search has no budget)
            budget = budget.unlimited()
        bm = cost_model.bind(instance)
        pm = PieceModel(instance, bm, layout, whole_column_wise=cfg.join_collectives)
        if not pm.tables:  # the layout splits every table by rows: no piece to search, only the tiers to polish
            assert layout is not None
            return self._polished_plan(instance, cost_model, bm, list(layout.fixed), cfg, budget, seed, 0,
                                       "every table row-wise in the tiered layout: nothing to search")
        # the search stops early enough to leave the polish its share of the budget
        # (of the time from now to the deadline: a layout searched after another starts late on the clock)
        search_budget = budget.share(1.0 - cfg.polish_reserve) if cfg.polish else budget
        scorer = _StateScorer(pm, cfg, search_budget, instance.topology.num_devices)

        start = start_pieces(pm, cfg.uneven_halves)
        (first,) = scorer.score([start])
        if first is None:
            return fail(self, SolveStatus.no_solution, f"the time limit ended the search before the first grid plan was scored ({clock.wall:.2g} s "
                        f"into the solve, its deadline {budget.deadline:g} s)", clock)
        search, greedy_cost, presplit_cost = _seeded_search(instance, cost_model, pm, scorer, start, first, seed, greedy, self.seed_solver)
        one = (_one_collective_lane(pm, cfg, search_budget, ONE_COLLECTIVE_SHARE)
               if cfg.one_collective and layout is None and not search_budget.spent() else None)
        if one is not None:
            report(best_cost=one[2])
        if search.best.device_of is not None:
            report(best_cost=search.best.cost)
        _beam_search(search, pm, scorer, search_budget)
        if cfg.comm_aware and search.best.device_of is not None and not search.timed_out:
            _refine_comm_aware(search, pm, cfg, search_budget, scorer.seen)

        best = search.best
        if best.device_of is None and layout is not None and greedy is not None and greedy.plan is not None:
            # no grid plan fits within the layout, but greedy's plan does (its packer's memory-first fallbacks): it
            # is the plan, after the placement polish
            return self._polished_plan(instance, cost_model, bm, greedy.plan.shards, cfg, budget, seed, scorer.evaluated,
                                       "no grid plan fits within the tiered layout: greedy's plan, polished")
        if best.device_of is None and one is None:
            where = "within the tiered layout" if layout is not None else "split or not"
            return fail(self, SolveStatus.no_solution, f"no dimension-cap scale gave a plan that fits in memory, {where}; the instance is not proven infeasible", clock, {"states": scorer.evaluated})
        polished = cfg.polish and not budget.spent()
        pieces, device_of, moves = _polish_the_better(pm, cfg, budget, (list(search.best_state), best.device_of, best.cost), one)
        wide_cuts = 0
        if cfg.wide_splits and layout is None and not budget.spent():  # (in a tiered layout: after its placement phase)
            pieces, device_of, wide_cuts = split_wide_bottlenecks(pm, pieces, device_of, cfg, budget)
        timed_out = search.timed_out or (polished and budget.spent())
        shards = pm.to_shards(pieces, device_of)
        # (for TorchRec without even widths, slices of one table on one device must share a shape: merged whatever the
        # cost; with even widths a merge would break them, and the check below keeps the plan as it is)
        form = torchrec_form(instance) and not even_columns(instance)
        if cfg.safe_fallback or form:
            merged = merge_colocated_columns(instance, bm, shards, force=form)
            shards = shards if constraint_violations(instance, merged) else merged  # (a table that may only be column-wise stays cut)
        joined = 0
        if cfg.join_collectives:
            shards, joined, _ = join_one_collective(instance, bm, shards)
        dp = cfg.data_parallel if cfg.data_parallel is not None else layout is not None
        placed: dict[str, Any] | None = None
        if (cfg.placement_polish and layout is not None) or dp or cfg.row_wise:
            shards, placed, timed_out = self.polisher(instance, bm, shards, cfg, dp, budget, timed_out)
        info: dict[str, Any] = {  # (free-form diagnostics; what the next stage reads is SearchStats, below)
            "no_split_grid_cost": first.cost,
            "greedy_seed_cost": greedy_cost,
            "presplit_seed_cost": presplit_cost,
            "one_collective_cost": one[2] if one is not None else None,
            "best_grid_cost": best.cost,
            "best_scale": best.scale,
            "split_tables": len({p[0] for p in pieces if p[2] != instance.tables[p[0]].dim}),
            "wide_cuts": wide_cuts,
            "comm_refined": search.comm_refined,
            "marked_column_wise": joined,
        }
        extra: dict[str, Any] = {}
        if placed is not None:
            info["placement_polish"] = placed
        if layout is not None or any(s.replicated or s.rows is not None or s.row_offset for s in shards):
            extra["placements"], info["tiers"] = describe_placements(instance, shards)
        stopped = StopReason.time_limit if timed_out else None
        broken = constraint_violations(instance, shards)
        if broken:  # (never expected: every stage keeps to them) never a plan that breaks one
            return fail(self, SolveStatus.no_solution, f"{self.name}: its plan breaks a placement constraint ({broken[0].message}); "
                        "the instance is not proven infeasible", clock, info)
        out = finish(self, instance, cost_model, shards, clock, seed=seed, stopped=stopped, info=info, bound=bm, extra_params=extra or None)
        out.stats = SearchStats(states_scored=scorer.evaluated, states_rescored_safe=scorer.rescored_safe, steps=search.steps, polish_moves=moves)
        return out


    def _polished_plan(self, instance: Instance, cost_model: CostModel, bm: BoundCostModel, shards: list[Shard], cfg: NeuroShardConfig,
                       budget: Budget, seed: int, scored: int, note: str) -> SolveResult:
        """A plan the search did not make (the layout's fixed shards when nothing is left to search; greedy's plan
        when no grid plan fits) as the result, after the placement polish."""
        placed: dict[str, Any] | None = None
        timed_out = False
        dp = cfg.data_parallel if cfg.data_parallel is not None else True  # (a tiered layout: replicas offered, as in _search)
        if cfg.placement_polish or dp or cfg.row_wise:
            shards, placed, timed_out = self.polisher(instance, bm, shards, cfg, dp, budget, False)
        info: dict[str, Any] = {"note": note}
        if placed is not None:
            info["placement_polish"] = placed
        extra: dict[str, Any] = {}
        extra["placements"], info["tiers"] = describe_placements(instance, shards)
        stopped = StopReason.time_limit if timed_out else None
        out = finish(self, instance, cost_model, shards, budget.clock, seed=seed, stopped=stopped, info=info, bound=bm, extra_params=extra)
        out.stats = SearchStats(states_scored=scored)
        return out


class NeuroShardFaithfulSolver(NeuroShardSolver):
    name = "neuroshard_faithful"
    default_options = FAITHFUL


def constrained(instance: Instance) -> bool:
    """Whether the instance has placement constraints (the search then stays with whole tables and column pieces in
    HBM, where solvers.placement.rules says how it keeps them)."""
    return bool(instance.constraint_kinds())


def split_infeasibility(instance: Instance) -> str | None:
    """Why no plan exists even with column splits: total memory short, or a table whose narrowest slice (4
    columns) fits on no device."""
    from shardopt.core.memory import table_bytes_array

    caps = instance.topology.capacities()
    total = int(table_bytes_array(instance).sum())
    if total > sum(caps):
        return f"the tables need {total:,} bytes in all but the {len(caps)} devices hold {sum(caps):,}: short by {total - sum(caps):,} bytes"
    for t in instance.tables:
        narrow = slice_bytes(instance, t, t.rows, DIM_ALIGNMENT)
        if narrow > max(caps):
            return f"table {t.name!r}: even a {DIM_ALIGNMENT}-column slice needs {narrow:,} bytes, more than the largest device's {max(caps):,}"
    return None
