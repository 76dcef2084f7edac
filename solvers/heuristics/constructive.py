"""Heuristic solvers: the papers' proxy greedies, random, round-robin, and a cost-model-aware greedy.

All of them build table-wise plans (one whole-table shard per table) and share one packing loop that never puts a
table on a device without room for it (the published implementations put a table that fits nowhere on the last
device and carried on). Each solver is a *device rule* (which of the devices with room gets the next table) plus a
*table order*:

- ``size`` / ``dim`` / ``lookup`` / ``size_lookup``: tables by a proxy, descending (ties by table index), each onto
  the device with the lowest accumulated proxy among those with room (ties by device index). Proxies: table bytes
  (weights + optimizer state, shardopt.core.memory); dim; dim x pooling factor; dim x pooling factor x log10(rows).
- ``random``: tables in instance order, each onto a uniformly random device among those with room.
- ``round_robin``: tables in instance order, a device cursor advancing, skipping devices without room.
- ``greedy``: tables by their predicted single-table cost, descending; each onto the device that minimises the
  predicted plan cost (max over devices of compute + comm) after the move, ties by that device's own cost, then
  index. Every candidate device is scored in one vectorised call of the bound cost model.

Fallback: when the primary pass finds no device with room for some table, `greedy` retries its own order and cost
rule with a completion check (`primary_safe`: only devices after which the remaining tables still fit by worst fit,
`solvers.placement.completion`; the RL policies' safe mask), which keeps the pass cost-driven, and also runs the bytes order
with its cost rule (`memory_order`); of the two plans it keeps the cheaper by its cost model (on the committed test
suites the retry wins on 9 of 9 fallback instances, on one tight production instance the bytes order does). That
costs two complete passes, so by default greedy does it only up to SAFE_FALLBACK_MAX_PAIRS table-device pairs (the
856 x 128 production instances keep the bytes-order fallback alone, within the 0.5 s target); the option
`safe_fallback=True` asks for it at any size, `False` never. The other heuristics are cost-model-free baselines:
they take `primary_safe` only with the option `safe_fallback=True` (then its plan, unjudged), and otherwise go
straight to the bytes order with their own device rule. After those, worst-fit decreasing (the device with the
most free memory), then best-fit decreasing (the device with the least free memory that still fits) (the stages:
FALLBACK_STAGES). If every stage fails the
result is ``no_solution`` naming the table and its bytes against the largest free space at that moment: bin packing
is NP-hard, so this is the solver's failure, not a proof that the instance is infeasible (``infeasible`` is only
returned when shardopt.core.feasibility proves it).

Beyond table-wise HBM: when no table-wise HBM plan can exist (a table larger than every device, or tables beyond
the cluster's HBM), solvers.placement.tiering first splits the oversized tables row-wise over all devices and moves the
coldest tables to host memory (UVM, with an HBM cache); the packing loop then places every other table as above,
each where both its HBM bytes and its host bytes have room.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.feasibility import tiered_infeasibility_reason
from shardopt.core.ir import Instance, Kernel, Shard
from shardopt.core.memory import table_bytes_array
from solvers.base import (
    Budget,
    FallbackUse,
    Solver,
    SolveResult,
    SolveStatus,
    StopReason,
    Stopwatch,
    TieredLayoutChoice,
    fail,
    finish,
)
from solvers.heuristics.device_rules import DeviceRule, FitRule, GreedyCostRule, ProxyRule, RandomRule, RoundRobinRule
from solvers.options import option
from solvers.placement.collectives import mark_column_wise_only
from solvers.placement.completion import completion_mask
from solvers.placement.exact_packing import EXACT_PACKING_MAX_S
from solvers.placement.rules import PlacementRules, placement_conflict
from solvers.placement.tiering import HEADROOM, TieredLayout, needs_tiers, oversized_tables, plan_tiers
from solvers.results import PackingFailure, PackingReport

# above this many table-device pairs greedy skips its completion-checked retry by default (see _safe_fallback_for)
SAFE_FALLBACK_MAX_PAIRS = 20_000
TO_HOST_PREFIXES = 2  # the tiered layouts with only the 1..2 coldest oversized tables in host memory, beside all or none
EXTRA_VARIANTS_SHARE = 0.25  # the layouts beyond the first three are packed only within this share of the time limit

# what each fallback stage does, in words (`shardopt solve` names the one that placed a plan)
FALLBACK_STAGES = {
    "primary_safe": "its own order and rule, each table only where the rest still fit",
    "memory_order": "largest tables first, its own rule",
    "worst_fit": "largest tables first, onto the device with the most free memory",
    "best_fit": "largest tables first, onto the device with the least free memory that fits",
}

# ---------------------------------------------------------------------------------------------------------------
# the shared packing loop


@dataclass
class PackFailure:
    stage: str
    table: int
    table_bytes: int
    largest_free: int
    placed: int


class Packer:
    """Places tables one at a time on devices with room; never on a device without room (nor against the instance's
    placement constraints: PlacementRules.allowed)."""

    def __init__(self, instance: Instance, layout: TieredLayout | None = None):
        self.instance = instance
        self.layout = layout
        self.rules = PlacementRules(instance, whole_tables=True, fixed=layout.fixed if layout is not None else ())
        topo = instance.topology
        self.caps = np.array(topo.capacities(), dtype=np.int64)
        self.host_caps = np.array(topo.host_capacities(), dtype=np.int64)
        if layout is None:
            self.sizes = table_bytes_array(instance)
            self.host_sizes = np.zeros(len(self.sizes), dtype=np.int64)
        else:  # each table's bytes in its tier; the row-wise tables' shards already hold their room
            self.sizes, self.host_sizes = layout.hbm_bytes, layout.host_bytes
            self.caps = self.caps - layout.fixed_hbm
            self.host_caps = self.host_caps - layout.fixed_host
        self.free = self.caps.copy()
        self.free_host = self.host_caps.copy()

    def run(self, stage: str, order: np.ndarray, rule: DeviceRule, safe: bool = False) -> np.ndarray | PackFailure:
        """One pass in `order`; with `safe`, each table only goes where the rest still fit by worst fit (when some
        device with room passes that check)."""
        self.free = self.caps.copy()
        self.free_host = self.host_caps.copy()
        rule.reset()
        device_of = np.full(len(self.sizes), -1, dtype=np.int64)
        rest_bytes = self.sizes[np.asarray(order, dtype=np.int64)]
        for n, t in enumerate(order):
            t = int(t)
            size = self.sizes[t]
            room = self.free >= size
            if self.host_sizes[t]:
                room &= self.free_host >= self.host_sizes[t]
            if self.rules.active:
                room &= self.rules.allowed(t, device_of[None])[0]
            if safe and room.any():
                room = completion_mask(self.free[None], int(size), rest_bytes[n + 1 :], room[None])[0]
            candidates = np.flatnonzero(room)
            if len(candidates) == 0:
                return PackFailure(stage, t, int(size), int(self.free.max()), n)
            d = rule.choose(t, candidates)
            if self.free[d] < size:  # a rule bug must never become a plan over capacity
                raise AssertionError(f"rule chose device {d} without room for table {t}")
            self.free[d] -= size
            self.free_host[d] -= self.host_sizes[t]
            device_of[t] = d
            rule.commit(t, d)
        return device_of

    def bytes_order(self) -> np.ndarray:
        return self.placed_only(np.argsort(-self.sizes, kind="stable"))

    def exact(self, time_limit: float) -> np.ndarray | PackFailure:
        """The tables to pack assigned by the exact feasibility MILP (solvers.placement.exact_packing), within their
        pins and groups, where every order has failed."""
        from solvers.placement.exact_packing import exact_packing

        packed = self.placed_only(np.arange(len(self.sizes)))
        index = {int(t): k for k, t in enumerate(packed)}
        groups = {kind: [{index[j] for j in getattr(self.rules, kind)[int(t)] if j in index} for t in packed]
                  for kind in ("apart", "together")}
        got = exact_packing(self.sizes[packed], self.caps, allowed=self.rules.pins[packed], host_sizes=self.host_sizes[packed],
                            host_caps=self.host_caps, apart=groups["apart"], together=groups["together"], time_limit=time_limit)
        if got is None:
            biggest = int(packed[np.argmax(self.sizes[packed])]) if len(packed) else 0
            return PackFailure("exact_packing", biggest, int(self.sizes[biggest]), int(self.caps.max()), 0)
        device_of = np.full(len(self.sizes), -1, dtype=np.int64)
        device_of[packed] = got
        return device_of

    def placed_only(self, order: np.ndarray) -> np.ndarray:
        """`order` without the row-wise tables (placed before packing)."""
        if self.layout is None:
            return order
        return order[np.isin(order, self.layout.packed)]

    def shards(self, device_of: np.ndarray) -> list[Shard]:
        """The plan's shards, by table in instance order."""
        tables = self.instance.tables
        if self.layout is None:
            return [Shard(table=t.name, device=int(device_of[i])) for i, t in enumerate(tables)]
        fixed: dict[str, list[Shard]] = {}
        for s in self.layout.fixed:
            fixed.setdefault(s.table, []).append(s)
        out: list[Shard] = []
        for i, t in enumerate(tables):
            out.extend(fixed[t.name] if self.layout.tiers[i].preplaced else [self.layout.shard(self.instance, i, int(device_of[i]))])
        return out


def descending(values: np.ndarray) -> np.ndarray:
    """Indices by value descending; ties by index (a stable sort of the negated values)."""
    return np.argsort(-np.asarray(values, dtype=np.float64), kind="stable")


# ---------------------------------------------------------------------------------------------------------------
# the solvers


# where a tiered layout splits the tables too big for any device, on clusters of several hosts of several devices:
# both layouts packed and the cheaper plan kept (auto), within one host (table_row_wise), over all devices (row_wise)
ROW_SPLITS = ("auto", "within_host", "all_devices")


@dataclass(frozen=True)
class HeuristicOptions:
    fallback: bool = option(True, "when the primary order and rule leave a table unplaced: retry memory-first (bytes order, worst / best fit)")
    safe_fallback: bool | None = option(None, "retry the primary order with the completion check first (null: by default where affordable)")
    row_splits: str = option("auto", "where a table larger than every device is split by rows (tiered layouts)", choices=ROW_SPLITS)


class HeuristicSolver(Solver):
    """Shared driver: feasibility proof, primary pass, memory-first fallback, plan wrapping."""

    deterministic = True

    # the completion-checked retry of the primary order and rule (`primary_safe`) before the bytes order; a solver
    # with a cost rule (greedy) runs both when the retry places every table and keeps the cheaper plan by its model
    safe_fallback_default = False

    Options = HeuristicOptions

    def _safe_fallback_for(self, instance: Instance) -> bool:
        if self.options.safe_fallback is not None:
            return self.options.safe_fallback
        if not self.safe_fallback_default:
            return False
        # two more complete passes where one did before: kept off where a pass is expensive, so that each heuristic
        # stays within the 0.5 s target on 856 tables x 128 devices (greedy there: 0.39 s without, 0.65 s with)
        return len(instance.tables) * instance.topology.num_devices <= SAFE_FALLBACK_MAX_PAIRS

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"layout": "table-wise", "order": self.order_description, "device_rule": self.rule_description}
        if self.options.safe_fallback is None:
            safe = f"primary_safe up to {SAFE_FALLBACK_MAX_PAIRS} table-device pairs, " if self.safe_fallback_default else ""
        else:
            safe = "primary_safe, " if self.options.safe_fallback else ""
        p["fallback"] = safe + "memory_order, worst_fit, best_fit" if self.options.fallback else "none"
        if self.options.row_splits != "auto":
            p["row_splits"] = self.options.row_splits
        if self.deterministic:
            p["uses_seed"] = False
        return p

    order_description = ""
    rule_description = ""

    # subclasses: the primary order and the device rule
    def setup(self, instance: Instance, cost_model: CostModel, seed: int, layout: TieredLayout | None = None) -> tuple[np.ndarray, DeviceRule]:
        raise NotImplementedError

    def _pack(self, instance: Instance, cost_model: CostModel, seed: int, layout: TieredLayout | None, budget: Budget) -> Packing:
        """One packing attempt: the primary pass and the fallback stages (see the module docstring)."""
        packer = Packer(instance, layout)
        order, rule = self.setup(instance, cost_model, seed, layout)
        order = packer.placed_only(np.asarray(order))
        bound = rule.bm if isinstance(rule, GreedyCostRule) else None  # cost the plan with the binding it searched with
        stages: list[tuple[str, np.ndarray, DeviceRule, bool]] = [("primary", order, rule, False)]
        if self.options.fallback:
            by_bytes = packer.bytes_order()
            if self._safe_fallback_for(instance):
                stages.append(("primary_safe", order, rule, True))
            if not np.array_equal(order, by_bytes):  # (size's own order already is the memory-first order)
                stages.append(("memory_order", by_bytes, rule, False))
            stages += [
                ("worst_fit", by_bytes, FitRule("worst", packer.sizes, lambda: packer.free), False),
                ("best_fit", by_bytes, FitRule("best", packer.sizes, lambda: packer.free), False),
            ]
        got = Packing(packer, bound)
        for name, stage_order, stage_rule, safe in stages:
            if got.placed and not (bound is not None and name == "memory_order"):  # (greedy compares the two)
                break
            if (got.failures or got.placed) and budget.spent():
                got.timed_out = not got.placed
                break
            out = packer.run(name, stage_order, stage_rule, safe)
            got.tried.append(name)
            if isinstance(out, PackFailure):
                if not got.placed:  # (a comparison run that fails is no failure of the solver)
                    got.failures.append(out)
                continue
            got.placed.append((name, out))
            if name == "primary":
                break
        if self._exact and self._exact_left > 0.05 and not got.placed and not got.timed_out and not budget.spent():
            # every order failed: the assignment solved exactly (a packing the first-fit orders missed, most often on
            # devices that differ in memory)
            left = budget.left()
            t0 = time.perf_counter()
            out = packer.exact(self._exact_left if left is None else min(self._exact_left, left))
            self._exact_left -= time.perf_counter() - t0
            got.tried.append("exact_packing")
            if not isinstance(out, PackFailure):  # (where it fails too, the first order's failure says best what is short)
                got.placed.append(("exact_packing", out))
        return got

    def _tiered_pack(self, instance: Instance, cost_model: CostModel, seed: int, budget: Budget, within_host: bool, lean: bool = False,
                     to_host: bool | frozenset[int] = False, retry_to_host: bool = False, start: TieredLayout | str | None = None,
                     headroom: float = HEADROOM) -> str | TieredPacking:
        """The tiered layout (solvers.placement.tiering) and the packing into it, or why no layout could be made. A
        table no device had room for goes row-wise too (with `retry_to_host`: first to host memory whole, behind a
        cache, as TorchRec offloads a cold mid-sized table that the row-wise blocks of the big ones left no device
        room for), and when that is no way out either, the lean layout (smallest caches, largest tables to host
        memory) once. `lean`: start from the lean layout; `to_host`: the tables no device holds (or those named) go to
        host memory whole where they can (plan_tiers' oversized_to_host). `start`: plan_tiers' answer for these
        arguments where the caller has it already."""
        rowwise: set[int] = set()
        if retry_to_host and not isinstance(to_host, frozenset):
            to_host = frozenset(oversized_tables(instance)) if to_host else frozenset()
        layout = start if start is not None else plan_tiers(instance, lean=lean, within_host=within_host, oversized_to_host=to_host, headroom=headroom)
        if isinstance(layout, str) and lean:
            return layout
        if isinstance(layout, str):  # the default layout does not fit: the lean one (smallest caches, largest tables out)
            lean, first = True, layout
            layout = plan_tiers(instance, lean=True, within_host=within_host, oversized_to_host=to_host, headroom=headroom)
            if isinstance(layout, str):
                return f"{first}; and with the smallest caches: {layout}"
        while True:
            packed = self._pack(instance, cost_model, seed, layout, budget)
            if packed.placed or packed.timed_out:
                break
            stuck = packed.failures[-1].table
            if retry_to_host and isinstance(to_host, frozenset) and stuck not in to_host and stuck not in rowwise:
                to_host = to_host | {stuck}
            elif stuck in rowwise:
                if lean:
                    break
                lean, rowwise = True, set()
            else:
                rowwise.add(stuck)
            retry = plan_tiers(instance, frozenset(rowwise), lean=lean, within_host=within_host, oversized_to_host=to_host, headroom=headroom)
            if isinstance(retry, str):
                if lean:
                    break
                lean, rowwise = True, set()
                retry = plan_tiers(instance, frozenset(), lean=True, within_host=within_host, oversized_to_host=to_host, headroom=headroom)
                if isinstance(retry, str):
                    break
            layout = retry
        return TieredPacking(layout, lean, rowwise, packed, to_host)

    def _layout_variants(self, instance: Instance) -> tuple[list[tuple[bool, bool, bool | frozenset[int], bool]], int]:
        """The tiered layouts greedy packs, as (within_host, lean first, to_host, retry_to_host), and how many of them
        come first (the rest only within EXTRA_VARIANTS_SHARE of the time). Oversized tables split within one host
        (table_row_wise: devices-per-host times less network, but one host's HBM full of them, which can starve the
        caches of the host-memory tables) and over all devices (row_wise), both where the cluster has several hosts of
        several devices; the lean layout (the largest tables to host memory first, smallest caches) beside the default
        one (the coldest per byte first), which can move one huge table where the default moves every other table and
        loses their caches; the layout that puts the tables no device holds in host memory whole (a cold huge table
        split by rows fills every device's HBM); with several oversized tables, only the coldest of them in host
        memory (the hot ones split by rows in HBM); the tables the packer finds no room for in host memory whole
        instead of split; and every oversized table named (those a device's host memory holds go there whole, the
        others by rows in HBM). The instances that asked for each: docs/results/design-evidence.md, "Instances
        behind design choices"."""
        topo = instance.topology
        nested = 1 < topo.intra_group_size < topo.num_devices
        attempts = {"auto": (True, False), "within_host": (True,), "all_devices": (False,)}[self.options.row_splits] if nested else (False,)
        variants: list[tuple[bool, bool, bool | frozenset[int], bool]] = (
            [(a, False, False, False) for a in attempts] + [(a, True, False, False) for a in attempts] + [(a, False, True, False) for a in attempts])
        base_variants = len(variants)
        if topo.has_host_memory:
            big = oversized_tables(instance)
            prefixes = [frozenset(big[:k]) for k in range(1, min(len(big), TO_HOST_PREFIXES + 1))]
            variants += [(a, False, p, False) for p in prefixes for a in attempts]
            variants += [(a, False, frozenset(), True) for a in attempts]
            # (last: the extra layouts stop at EXTRA_VARIANTS_SHARE of the time; packed before the retry layout, this
            # one took that layout's time)
            if big and frozenset(big) not in prefixes:
                variants += [(a, False, frozenset(big), False) for a in attempts]
        return variants, base_variants

    def _best_tiered(self, instance: Instance, cost_model: CostModel, seed: int, budget: Budget) -> str | TieredChoice:
        """Every tiered layout of `_layout_variants` packed, the cheapest plan kept (by the cost model; the first that
        packs where there is none), or why none could be made. The layouts within HEADROOM of each device's HBM
        first; only where none of them packs, the same with all of it."""
        variants, base_variants = self._layout_variants(instance)
        best: TieredChoice | None = None
        seen: set[tuple] = set()
        started: set[tuple] = set()
        packed_layouts: list[TieredLayoutChoice] = []  # every distinct layout that packed, with its plan's cost
        failed = ""
        for headroom in (HEADROOM, 1.0):
            for n, (attempt, lean_first, to_host, retry_to_host) in enumerate(variants):
                if n >= base_variants and budget.deadline is not None and budget.clock.elapsed > EXTRA_VARIANTS_SHARE * budget.deadline:
                    break  # (the extra layouts only while the budget allows: the search after greedy needs the rest)
                first = plan_tiers(instance, lean=lean_first, within_host=attempt, oversized_to_host=to_host, headroom=headroom)
                if not isinstance(first, str):  # (a to-host variant whose tables stayed where they were: a layout packed already)
                    start = (first.key(), attempt, lean_first, retry_to_host)
                    if start in started:
                        continue
                    started.add(start)
                got = self._tiered_pack(instance, cost_model, seed, budget, attempt, lean_first, to_host, retry_to_host, first, headroom)
                if isinstance(got, str):
                    failed = got if headroom == 1.0 else (failed or got)  # (the last try's reason: what it tested)
                    continue
                key = got.layout.key()
                if key in seen:  # (the same layout as an earlier attempt: nothing new to pack)
                    continue
                seen.add(key)
                packed = got.packed
                cost = (min((float(packed.bound.plan_costs(packed.packer.shards(d)).max_cost) for _, d in packed.placed), default=np.inf)
                        if packed.bound is not None else 0.0)
                if packed.placed:
                    packed_layouts.append(TieredLayoutChoice(attempt, got.lean, tuple(sorted(instance.tables[i].name for i in got.rowwise)),
                                                             _to_host_names(instance, got.to_host), cost, headroom))
                if best is None or (packed.placed and (not best.placed or cost < best.cost)):
                    best = TieredChoice(bool(packed.placed), cost, attempt, got)
                if packed.timed_out or (packed.placed and packed.bound is None):
                    return _ranked(best, packed_layouts)
            if best is not None and best.placed:
                break
        return failed if best is None else _ranked(best, packed_layouts)

    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult:
        """Pack with the solver's order and the memory-first fallbacks; where every order of every layout gives up,
        once more with the exact packing as each packing's last stage (solvers.placement.exact_packing): the
        first-fit answers are kept wherever they exist, and a heuristic says "no plan" only where the assignment
        itself has none either (or it ran out of time)."""
        clock = Stopwatch()
        budget = Budget.of(clock, time_limit)
        result = self._solve_once(instance, cost_model, time_limit, seed, clock, budget)
        if result.plan is None and result.status is SolveStatus.no_solution and self.options.fallback and not budget.spent():
            self._exact, self._exact_left = True, EXACT_PACKING_MAX_S  # (one cap for all of the retry's layouts)
            try:
                retry = self._solve_once(instance, cost_model, time_limit, seed, clock, budget)
            finally:
                self._exact = False
            if retry.plan is not None:
                return retry
        return result

    _exact = False  # (set during `solve`'s retry: each packing's last stage is the exact one ...)
    _exact_left = 0.0  # (... within this many seconds in all)

    def _solve_once(self, instance: Instance, cost_model: CostModel, time_limit: float | None, seed: int, clock: Stopwatch,
                    budget: Budget) -> SolveResult:
        tiered: TieredChoice | None = None
        # (whole tables, a column_wise-only one marked so; the tiered layouts honour kernels, cache load factors and which
        # tables may be split by rows: solvers.placement.rules.TierRules)
        conflict = placement_conflict(instance, "the heuristics", lambda t, table: False, tiers=True, marks=True)
        if conflict is not None:
            return fail(self, SolveStatus.no_solution, f"{self.name}: {conflict}", clock, {"constraints": "not met"})
        if needs_tiers(instance):
            reason = tiered_infeasibility_reason(instance)
            if reason is not None:
                return fail(self, SolveStatus.infeasible, reason, clock, {"proof": "feasibility"})
            got = self._best_tiered(instance, cost_model, seed, budget)
            if isinstance(got, str):
                return fail(self, SolveStatus.no_solution, f"{self.name}: {got}", clock, {"tiers": "failed"})
            tiered, packed = got, got.packing.packed
        else:
            packed = self._pack(instance, cost_model, seed, None, budget)
        layout = tiered.packing.layout if tiered is not None else None
        packer, bound, placed, failures = packed.packer, packed.bound, packed.placed, packed.failures
        device_of: np.ndarray | None = None
        used = None
        compared: dict[str, float] = {}
        if len(placed) > 1 and bound is not None:
            compared = {n: float(bound.plan_costs(packer.shards(d)).max_cost if layout is not None else bound.assignment_costs(d).max_cost) for n, d in placed}
            used, device_of = min(placed, key=lambda p: compared[p[0]])  # ties: the earlier stage
        elif placed:
            used, device_of = placed[0]

        report = PackingReport(used, tuple(packed.tried), tuple(
            PackingFailure(f.stage, instance.tables[f.table].name, int(f.table_bytes), int(f.largest_free), int(f.placed)) for f in failures))
        info: dict[str, Any] = {"fallbacks_compared": compared} if compared else {}
        if device_of is None:
            info["timed_out"] = packed.timed_out
            out = fail(self, SolveStatus.no_solution, self._no_room_reason(instance, packed, layout, time_limit), clock, info)
            out.packing = report
            return out

        shards, marked = mark_column_wise_only(instance, packer.shards(device_of), lambda: bound if bound is not None else cost_model.bind(instance))
        if marked:
            info["column_wise_only"] = marked
        over = time_limit is not None and clock.elapsed > time_limit
        info["time_limit_exceeded"] = bool(over)
        extra: dict[str, Any] = {"fallback_used": used if used != "primary" else None}
        layouts: tuple[TieredLayoutChoice, ...] = ()
        if tiered is not None:
            assert layout is not None
            extra["placements"] = layout.summary()
            info["lean_tiers"] = tiered.packing.lean
            to_host = _to_host_names(instance, tiered.packing.to_host)
            info["oversized_to_host"] = list(to_host) if isinstance(to_host, tuple) else to_host
            # the other layouts that packed, cheapest first: a search after greedy (neuroshard) may start from several
            layouts = tuple(tiered.ranked)
            info["layouts_ranked"] = [c.to_dict() for c in layouts]
            info["row_splits_within_host"] = tiered.within_host
            info["rowwise_retried"] = sorted(instance.tables[i].name for i in tiered.packing.rowwise)
            info["tiers"] = {instance.tables[i].name: t.describe() for i, t in enumerate(layout.tiers) if t.preplaced or t.kernel is not Kernel.fused}
        fallback = None
        if used not in (None, "primary") and failures:
            fallback = FallbackUse(stage=used, stage_text=FALLBACK_STAGES.get(used, used), failed_table=instance.tables[failures[0].table].name,
                                   placed_before=failures[0].placed, compared=compared)
        out = finish(self, instance, cost_model, shards, clock, seed=seed, stopped=StopReason.time_limit if over else None, info=info,
                     bound=bound, extra_params=extra, fallback=fallback, layouts=layouts)
        out.packing = report
        return out

    def _no_room_reason(self, instance: Instance, packed: Packing, layout: TieredLayout | None, time_limit: float | None) -> str:
        """Why no stage placed every table: the table, its bytes and the largest free space when it failed."""
        f = packed.failures[-1]
        name = instance.tables[f.table].name
        tried = ", ".join(x.stage for x in packed.failures)
        why = (
            f"{self.name}: could not place table {name!r} ({f.table_bytes:,} bytes): the largest free space on any "
            f"device at that moment was {f.largest_free:,} bytes (after placing {f.placed} of {len(instance.tables)} "
            f"tables; stages tried: {tried})"
        )
        if packed.timed_out:
            why += f"; the time limit of {time_limit:g} s ended the search before the remaining fallback stages"
        return why + (". The instance is not proven infeasible: every table fits on some device and the total memory suffices."
                      if layout is None else ". The instance is not proven infeasible: the tables fit in the cluster's HBM and host memory together.")


@dataclass
class Packing:
    """What one packing attempt (`HeuristicSolver._pack`) found: the plans of the stages that placed every table (by
    stage name), the first stage's failures, the stages tried, and whether the time limit cut it short."""

    packer: Packer
    bound: BoundCostModel | None  # the binding greedy's cost rule searched with (None: a cost-model-free rule)
    placed: list[tuple[str, np.ndarray]] = field(default_factory=list)
    failures: list[PackFailure] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    timed_out: bool = False


@dataclass
class TieredPacking:
    """A tiered layout and its packing (`HeuristicSolver._tiered_pack`): the layout, whether it is the lean one, the
    tables retried row-wise, the packing, and the tables sent to host memory whole."""

    layout: TieredLayout
    lean: bool
    rowwise: set[int]
    packed: Packing
    to_host: bool | frozenset[int]


@dataclass
class TieredChoice:
    """The layout greedy keeps (`HeuristicSolver._best_tiered`): whether it placed every table, its plan's cost, whether
    its row splits stay within a host, its packing, and every layout that packed, cheapest first."""

    placed: bool
    cost: float
    within_host: bool
    packing: TieredPacking
    ranked: list[TieredLayoutChoice] = field(default_factory=list)


def _ranked(best: TieredChoice | None, packed_layouts: list[TieredLayoutChoice]) -> TieredChoice | str:
    if best is None:  # (cannot happen: called only once a layout was packed)
        return "no tiered layout packed"
    best.ranked = sorted(packed_layouts, key=lambda d: float(d.cost or 0.0))
    return best


def _to_host_names(instance: Instance, to_host: bool | frozenset[int]) -> bool | tuple[str, ...]:
    """plan_tiers' `oversized_to_host` by name: the flag, or the names of the tables."""
    return tuple(sorted(instance.tables[i].name for i in to_host)) if isinstance(to_host, frozenset) else bool(to_host)


class ProxySolver(HeuristicSolver):
    """The papers' proxy greedy: tables by proxy descending onto the device with the lowest accumulated proxy."""

    proxy_name = ""
    rule_description = "lowest accumulated proxy among devices with room (ties: lowest device index)"

    @property
    def order_description(self) -> str:  # type: ignore[override]
        return f"{self.proxy_name} descending (ties: table index)"

    def params(self) -> dict[str, Any]:
        return {"proxy": self.proxy_name, **super().params()}

    def proxy(self, instance: Instance) -> np.ndarray:
        raise NotImplementedError

    def setup(self, instance: Instance, cost_model: CostModel, seed: int, layout: TieredLayout | None = None) -> tuple[np.ndarray, DeviceRule]:
        p = np.asarray(self.proxy(instance), dtype=np.float64)
        return descending(p), ProxyRule(p, instance.topology.num_devices)


def _dims(instance: Instance) -> np.ndarray:
    return np.array([t.dim for t in instance.tables], dtype=np.float64)


def _pooling(instance: Instance) -> np.ndarray:
    return np.array([t.pooling_factor for t in instance.tables], dtype=np.float64)


def _rows(instance: Instance) -> np.ndarray:
    return np.array([t.rows for t in instance.tables], dtype=np.float64)


class SizeSolver(ProxySolver):
    name = "size"
    proxy_name = "bytes"

    def proxy(self, instance: Instance) -> np.ndarray:
        return table_bytes_array(instance).astype(np.float64)


class DimSolver(ProxySolver):
    name = "dim"
    proxy_name = "dim"

    def proxy(self, instance: Instance) -> np.ndarray:
        return _dims(instance)


class LookupSolver(ProxySolver):
    name = "lookup"
    proxy_name = "dim x pooling_factor"

    def proxy(self, instance: Instance) -> np.ndarray:
        return _dims(instance) * _pooling(instance)


class SizeLookupSolver(ProxySolver):
    name = "size_lookup"
    proxy_name = "dim x pooling_factor x log10(rows)"

    def proxy(self, instance: Instance) -> np.ndarray:
        return _dims(instance) * _pooling(instance) * np.log10(_rows(instance))


class RandomSolver(HeuristicSolver):
    name = "random"
    deterministic = False
    order_description = "instance order"
    rule_description = "uniformly random device among those with room (numpy default_rng(seed))"

    def setup(self, instance: Instance, cost_model: CostModel, seed: int, layout: TieredLayout | None = None) -> tuple[np.ndarray, DeviceRule]:
        return np.arange(len(instance.tables)), RandomRule(seed)


class RoundRobinSolver(HeuristicSolver):
    name = "round_robin"
    order_description = "instance order"
    rule_description = "device cursor advancing by one, skipping devices without room"

    def setup(self, instance: Instance, cost_model: CostModel, seed: int, layout: TieredLayout | None = None) -> tuple[np.ndarray, DeviceRule]:
        return np.arange(len(instance.tables)), RoundRobinRule(instance.topology.num_devices)


class GreedySolver(HeuristicSolver):
    name = "greedy"
    safe_fallback_default = True
    order_description = "single-table predicted compute cost descending (ties: table index)"
    rule_description = "device minimising the predicted plan cost (max over devices of compute + comm) after the move; ties: that device's own cost, then index"

    def setup(self, instance: Instance, cost_model: CostModel, seed: int, layout: TieredLayout | None = None) -> tuple[np.ndarray, DeviceRule]:
        bm = cost_model.bind(instance)
        rule = GreedyCostRule(bm, layout)
        cost = np.asarray(bm.compute_costs(rule.states)).sum(axis=1) if layout is not None else np.asarray(bm.single_table_costs)
        return descending(cost), rule


__all__ = [
    "GreedySolver",
    "RandomSolver",
    "RoundRobinSolver",
    "SizeSolver",
    "DimSolver",
    "LookupSolver",
    "SizeLookupSolver",
    "HeuristicSolver",
    "ProxySolver",
    "Packer",
    "DeviceRule",
]
