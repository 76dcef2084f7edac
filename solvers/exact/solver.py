"""The exact solvers themselves: `ExactSolver`, the loop around the backends, and the registered solvers `cpsat`,
`milp`, `milp_highs` and `milp_exact_neural`.

Why here and not with the backends: the backends (cpsat.py, milp.py) each solve one linear model once; everything
that makes that a solver -- options, the refusal and the necessary conditions, the warm starts, the items offered,
the re-linearisation loop with its trust region, the local search of the linear model, the neighbourhood search of
large models, the bound reported and its meaning, the status -- is the same whatever the backend, and lives here
(the package's docstring tells the method).

`ExactSolver.solve` works on a `_Run` (what one solve is given) and a `_Loop` (the plan in hand, the linearisation,
the trust region, the bound so far), both changed in place by the methods that make up the loop.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.ir import Instance, Shard
from shardopt.core.plan_check import constraint_violations
from shardopt.core.work import current_meter
from solvers.base import (
    Budget,
    ProvenBound,
    Solver,
    SolveResult,
    SolveStatus,
    StopReason,
    Stopwatch,
    fail,
    finish,
    on_work_budget,
    unplaceable,
)
from solvers.exact import constants
from solvers.exact.constraints import constraint_mask, exact_conflict, table_groups
from solvers.exact.cpsat import solve_cpsat
from solvers.exact.formulation import (
    LinearSolve,
    Problem,
    _Bound,
    _canonical,
    _packing_reason,
    _symmetry,
    _unusable,
    plan_cost,
    table_cut_bound,
    table_lower_bounds,
)
from solvers.exact.linear_search import judged_local_search
from solvers.exact.linearize import Linearization, linearize
from solvers.exact.milp import solve_cbc, solve_highs
from solvers.exact.neural_head import exact_neural_refusal, neural_head_extra
from solvers.exact.offer import next_neighbourhood, offered_items, split_infeasibility
from solvers.exact.options import WARM_START_RESERVE, ExactNeuralOptions, ExactOptions
from solvers.exact.starts import relaxation_start, tiered_starts
from solvers.exact.state import _Loop, _Run
from solvers.heuristics.constructive import (
    DimSolver,
    GreedySolver,
    LookupSolver,
    RoundRobinSolver,
    SizeLookupSolver,
    SizeSolver,
)
from solvers.options import OptionError
from solvers.placement.collectives import allow_whole_column_wise, column_wise_whole, join_one_collective
from solvers.placement.polish import polish_placements
from solvers.placement.rules import tiers_first
from solvers.placement.split_items import Items
from solvers.progress import report
from solvers.protocols import SeedSolver
from solvers.results import SearchStats, WarmStart

# the heuristics whose plans are warm starts (whole tables; handed to the solver, not looked up by name)
WARM_START_SOLVERS: tuple[type[Solver], ...] = (GreedySolver, SizeSolver, DimSolver, LookupSolver, SizeLookupSolver, RoundRobinSolver)
# analytic cost model, `certified_bound=True`: the certified bound's share of the time limit. Off by default: on the
# largest models it costs the search seconds of its limit for a bound that `shardopt bound` gives outside the solve's time.
CERTIFIED_BOUND_SHARE = 0.15
CERTIFIED_BOUND_MAX_S = 15.0
# each heuristic warm start may use this share of the limit: they finish in milliseconds on most instances, but packing a
# tight tiered instance of 100-160 tables on 16 devices took greedy 3.5 s, twice, where the limit was 2 s
HEURISTIC_START_SHARE = 0.2
WORK_BUDGET_WORKERS = 2  # CP-SAT's workers on a work budget, unless -O workers says otherwise: the same plan on any machine

BACKENDS = {"cpsat": solve_cpsat, "cbc": solve_cbc, "highs": solve_highs}
BACKEND_LABEL = {"cpsat": "CP-SAT", "cbc": "CBC", "highs": "HiGHS"}


class ExactSolver(Solver):
    """Linearise -> solve exactly -> judge with the full model -> re-linearise, from the best heuristic's plan."""

    backend = "cpsat"

    Options = ExactOptions

    def __init__(self, options: ExactOptions | None = None, *, heuristic_starts: Sequence[SeedSolver] | None = None,
                 default_start: SeedSolver | None = None, tiered_seed: SeedSolver | None = None,
                 tiered_search: SeedSolver | None = None, **overrides: Any):
        """The solvers whose plans it starts from are injected parts (solvers.protocols.SeedSolver) with defaults:
        `heuristic_starts` the whole-table heuristics (WARM_START_SOLVERS), `default_start` the default solver (NeuroShard,
        row splits only where this solver offers them), `tiered_seed` / `tiered_search` greedy / NeuroShard's tiered starts."""
        super().__init__(options, **overrides)
        o = self.options
        self.heuristic_starts = tuple(heuristic_starts) if heuristic_starts is not None else tuple(k() for k in WARM_START_SOLVERS)
        self._default_start, self._tiered_seed, self._tiered_search = default_start, tiered_seed, tiered_search
        if o.exact_neural and self.backend == "cpsat":
            raise OptionError("option exact_neural=true for solver 'cpsat': the neural head is encoded for the MILP backends (milp, milp_highs), not CP-SAT")
        # the settings that differ from the options as this solve uses them: the exact neural mode encodes whole
        # tables (no splits, no table cuts, which bound the linearised compute), and no worker count means every core
        # (one worker proves some small models several times faster, but finds worse plans within short limits on
        # the test suites: docs/exact-solvers.md, "Workers"; -O workers=1 asks for it)
        self.table_cuts = o.table_cuts and not o.exact_neural
        self.max_split = 1 if o.exact_neural else o.max_split

    @property
    def default_start(self) -> SeedSolver:
        from solvers.neuroshard.search import NeuroShardSolver  # (imported on first use: most small solves never ask)

        return self._default_start or NeuroShardSolver(row_wise=self.options.row_wise)

    @property
    def tiered_start_solvers(self) -> tuple[SeedSolver, SeedSolver]:
        from solvers.neuroshard.search import NeuroShardSolver

        return (self._tiered_seed or GreedySolver(), self._tiered_search or NeuroShardSolver())

    @property
    def work_budget(self) -> bool:
        """Whether a solve without a time limit runs on a work budget: CP-SAT's deterministic time, HiGHS's node limit."""
        return self.backend in ("cpsat", "highs") and self.options.deterministic

    @property
    def workers(self) -> int:
        """Solver threads: the option, else every core -- on a work budget, WORK_BUDGET_WORKERS whatever the machine
        (CP-SAT's deterministic search depends on its worker count)."""
        return self.options.workers or (WORK_BUDGET_WORKERS if current_meter() is not None else (os.cpu_count() or 1))

    @property
    def relaxation_share(self) -> float:
        """The relaxation start's share of the limit: none on a work budget (HiGHS spends it at the root node, where no
        deterministic limit reaches it: its plan would depend on the machine's speed)."""
        return 0.0 if current_meter() is not None or self.max_split < 2 else self.options.relaxation_share

    def params(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "layout": "table-wise" if self.max_split < 2 or self.options.split_tables == 0 else "table-wise + column splits",
            "max_split": self.max_split,
            "split_tables": self.options.split_tables,
            "split_apart": self.options.split_apart,
            "neuroshard_share": self.options.neuroshard_share if self.max_split > 1 else 0.0,
            "presplit_share": self.options.presplit_share if self.max_split > 1 else 0.0,
            "one_collective_share": self.options.one_collective_share if self.max_split > 1 else 0.0,
            "relaxation_share": self.relaxation_share,
            "neighbourhood": self.options.neighbourhood,
            "search_share": self.options.search_share,
            "certified_bound": self.options.certified_bound,
            "tiered": self.options.tiered,
            "tiered_share": self.options.tiered_share,
            "row_wise": self.options.row_wise,
            "comm": self.options.comm,
            "max_iterations": self.options.max_iterations,
            "workers": self.workers,
            "deterministic": self.options.deterministic,
            "symmetry": self.options.symmetry,
            "warm_start": self.options.warm_start,
            "trust_region": self.options.trust_region,
            "tiebreak": self.options.tiebreak,
            "table_cuts": self.table_cuts,
            "exact_neural": self.options.exact_neural,
            "cost_unit_ms": 1.0 / constants.COST_SCALE if self.backend == "cpsat" else None,
        }

    # -- pieces a subclass may change ------------------------------------------------------------------------
    def check(self, instance: Instance, bm: BoundCostModel) -> str | None:
        """A reason to refuse this instance / cost model (None: go ahead)."""
        return exact_neural_refusal(self.name, instance, bm) if self.options.exact_neural else None

    def linear_solve(self, prob: Problem, lin: Linearization, bm: BoundCostModel, hint: np.ndarray | None, time_limit: float, seed: int) -> LinearSolve:
        fn = BACKENDS[self.backend]
        if self.options.exact_neural:  # the compute terms come from the encoded head; the comm planes stay
            zero = dataclasses.replace(lin, a=np.zeros_like(lin.a), c0=np.zeros_like(lin.c0))
            extra, stats = neural_head_extra(bm, prob)
            res = fn(prob, zero, hint, time_limit, seed, self.workers, self.options.deterministic, extra)
            res.info.update(stats)
            return res
        if self.backend == "cpsat":
            return fn(prob, lin, hint, time_limit, seed, self.workers, self.options.deterministic, self.options.cutoff)
        return fn(prob, lin, hint, time_limit, seed, self.workers, self.options.deterministic)

    # -- the loop --------------------------------------------------------------------------------------------
    def warm_starts(self, instance: Instance, bm: BoundCostModel, label: str, seed: int, budget: float,
                    cost_model: CostModel | None = None) -> list[dict[str, Any]]:
        """Plans of the heuristics (whole tables); with splits offered, the pre-split grid plan
        (`solvers.neuroshard.pieces.presplit_plan`, its polish within `presplit_share` of the budget), the one-collective
        grid plan (the same with every other table halved: one all-to-all, within `one_collective_share`), the plan of the
        analytic bound's relaxation (`relaxation_start`, within `relaxation_share`: the analytic model only) and, first,
        the default solver's (NeuroShard at its default budget, at most `neuroshard_share` of the limit); each judged
        by the full cost model. No start runs into the last `WARM_START_RESERVE` of the limit (the heuristics, the
        fallback, get 0.05 s there)."""
        from solvers.neuroshard.config import default_budget as neuroshard_default_budget
        from solvers.neuroshard.pieces import presplit_plan

        model, out, clock = _Bound(bm, label), [], Stopwatch()
        until = (1.0 - WARM_START_RESERVE) * budget  # (each share is of the whole limit; the search keeps the rest)

        def limit(share: float) -> float:
            return min(share * budget, until - clock.elapsed)

        starts: list[tuple[SeedSolver, float]] = [(h, HEURISTIC_START_SHARE) for h in self.heuristic_starts]
        if self.max_split > 1 and self.options.neuroshard_share > 0 and limit(self.options.neuroshard_share) > 0:
            # first, so the other starts' shares cannot crowd it out: the search then never ends above the default
            # solver's plan (a plan its items cannot express, a row split, is returned as it is: `_start`). Its
            # default solve (a work budget: the very plan `shardopt solve` gives) where that budget is within the
            # share; else the share of the limit, on the wall clock
            room = limit(self.options.neuroshard_share)
            first = self.default_start
            r = first.solve(instance, model, seed=seed, time_limit=None if neuroshard_default_budget(instance) <= room else room)
            out.append({"solver": first.name, "status": r.status.value, "cost": None} if r.plan is None else
                       {"solver": first.name, "status": r.status.value, "cost": float(bm.plan_costs(r.plan).max_cost), "shards": r.plan.shards})
        for name, share in (("presplit", self.options.presplit_share), ("one_collective", self.options.one_collective_share)):
            if self.max_split > 1 and share > 0 and limit(share) > 0:
                got = presplit_plan(instance, bm, self.max_split, time_limit=limit(share), one_collective=name == "one_collective",
                                    whole_column_wise=self.options.join_collectives)
                out.append({"solver": name, "status": "feasible" if got else "no_solution", "cost": got[1] if got else None,
                            **({"shards": got[0]} if got else {})})
        for solver, share in starts:  # (whole-table plans, in milliseconds on most models: the fallback, always asked)
            name = solver.name
            r = solver.solve(instance, model, seed=seed, time_limit=max(0.05, limit(share)))
            if r.plan is None:
                out.append({"solver": name, "status": r.status.value, "cost": None})
                continue
            out.append({"solver": name, "status": r.status.value, "cost": float(bm.plan_costs(r.plan).max_cost), "shards": r.plan.shards})
        if self.relaxation_share > 0 and cost_model is not None:  # (last: ties keep the others first)
            got = relaxation_start(instance, cost_model, bm, limit(self.relaxation_share))
            if got is not None:
                out.append(got)
        return out

    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult:
        """Without a time limit, cpsat's and milp_highs' default is a work budget of `default_time_limit` work seconds
        (shardopt.core.work: CP-SAT on its deterministic time, HiGHS on a node limit, the searches on their counted
        work), so the same instance and seed give the same plan on any machine; CBC (milp), which has no deterministic
        limit here, takes it in wall seconds. A time limit is the user's promise about wall time."""
        budget = self.options.default_time_limit if time_limit is None else float(time_limit)
        if time_limit is None and self.work_budget:
            return on_work_budget(budget, lambda: self._solve(instance, cost_model, budget, seed))
        return self._solve(instance, cost_model, budget, seed)

    def _solve(self, instance: Instance, cost_model: CostModel, budget: float, seed: int) -> SolveResult:
        clock = Stopwatch()
        tiers = self.options.tiered and not self.options.exact_neural
        conflict = exact_conflict(instance, self.max_split, tiers=tiers)
        if conflict is not None:
            relaxed = allow_whole_column_wise(instance)  # (a column_wise-only table it cannot cut: placed whole, marked)
            if relaxed is not None and exact_conflict(relaxed, self.max_split, tiers=tiers) is None:
                return column_wise_whole(self, instance, cost_model, self._solve(relaxed, cost_model, budget, seed), clock, seed)
            return fail(self, SolveStatus.no_solution, f"{self.name}: {conflict}", clock, {"constraints": "not met"})
        reason = self._infeasibility(instance) or tiers_first(instance)
        if reason is not None:
            return self._solve_tiered(instance, cost_model, budget, seed, clock, reason)
        bm = cost_model.bind(instance)
        refuse = self.check(instance, bm)
        if refuse is not None:
            return fail(self, SolveStatus.no_solution, refuse, clock, {"refused": True})
        caps = np.array(instance.topology.capacities(), dtype=np.int64)
        info: dict[str, Any] = {"backend": self.backend, "time_limit_s": budget, "iterations": []}
        items, best, best_cost, start_plan, starts, began = self._start(instance, bm, cost_model.describe(), seed, budget, caps, info, cost_model)
        info["warm_start_s"] = clock.elapsed
        fits = (items.size[:, None] <= caps[None, :]) & constraint_mask(instance, items)
        run = _Run(instance, cost_model, bm, items, caps, fits, clock, budget, 0.1 + 0.02 * budget, seed, info,
                   start_plan=start_plan, groups=table_groups(instance, items), warm_starts=starts, warm_start=began)
        st = _Loop(best, best_cost, best if best is not None else np.zeros((items.num_items, len(caps)), dtype=np.int64))
        # the analytic model's certified bound, when asked for: the one bound of the plan cost (solvers.results)
        certified = self._certified_bound(instance, cost_model, budget, clock, info) if self.options.certified_bound and best is not None else None
        if self.options.neighbourhood > 0 and best is not None and int(fits.sum()) > constants.LARGE_MODEL:
            self._solve_large(run, st)
        else:
            self._relinearise(run, st)
        kinds = ", ".join(sorted(instance.constraint_kinds()))
        if st.proven_infeasible and self.options.tiered and not self.options.exact_neural:  # its own placements do not pack: try a tiered layout
            why = _packing_reason(instance, BACKEND_LABEL[self.backend], self.max_split if len(items.split_tables()) else 1)
            return self._solve_tiered(instance, cost_model, budget, seed, clock, why + (f" under the placement constraints ({kinds})" if kinds else ""))
        if st.proven_infeasible and kinds:  # (the constraint proofs, which would name them, ran first)
            return fail(self, SolveStatus.no_solution, (
                f"{self.name}: {BACKEND_LABEL[self.backend]} proved that no plan of whole tables and the column pieces offered fits in memory "
                f"and meets the placement constraints ({kinds}); the instance is not proven infeasible (other placements may exist)"),
                clock, {**info, "constraints": "not met"})
        return self._outcome(run, st, certified)

    def _solve_tiered(self, instance: Instance, cost_model: CostModel, budget: float, seed: int, clock: Stopwatch, reason: str) -> SolveResult:
        """Where table- and column-wise HBM plans cannot hold the instance (`reason`): the best tiered start
        (greedy's, or NeuroShard's within `tiered_share` of the time limit), its HBM tables re-placed by the exact
        loop with its row-wise and host-memory shards fixed as every device's base (solvers.exact.tiered)."""
        from shardopt.core.feasibility import tiered_infeasibility_reason
        from solvers.exact.tiered import split_tiered

        if tiered_infeasibility_reason(instance) is not None or self.options.exact_neural or not self.options.tiered:
            return unplaceable(self, instance, reason, clock, self._placements())
        bm = cost_model.bind(instance)
        model = _Bound(bm, cost_model.describe())
        info: dict[str, Any] = {"backend": self.backend, "time_limit_s": budget, "iterations": [], "tiered": {"why": reason}}
        starts, costs, shards_of, names = tiered_starts(instance, cost_model, bm, model, self.tiered_start_solvers, Budget.of(clock, budget),
                                                        self.options.tiered_share * budget, self.relaxation_share * budget, seed)
        info["tiered"]["starts"] = {n: costs.get(n) for n in names}
        if not costs:
            whys = "; ".join(f"{n}: {r.reason}" for n, r in starts.items())
            return fail(self, SolveStatus.no_solution, f"{reason}; and no tiered start plan ({whys}); the instance is not proven infeasible", clock, info)
        name = min(costs, key=lambda n: (costs[n], n))
        start_shards = shards_of[name]
        info["tiered"].update(start=name, start_cost=costs[name])
        split = split_tiered(instance, bm, start_shards)
        if split is None:  # nothing in HBM to place (or the constraints leave a movable table no device): the start is the plan
            info["tiered"]["movable_tables"] = 0
            return finish(self, instance, cost_model, start_shards, clock, seed=seed, status=SolveStatus.feasible, info=info, bound=bm,
                          extra_params={"placements": "tiered: the start plan (no HBM table to re-place under its constraints)"})
        info["tiered"].update(split.describe())
        sub_bm = cost_model.bind(split.sub)
        D = instance.topology.num_devices
        items = dataclasses.replace(self.items(split.sub, sub_bm, split.movable), base_states=split.base_states,
                                    base_widths=split.base_widths, base_extra=split.base_extra, base_dists=split.base_dists)
        best = items.counts_from_shards(split.sub, split.movable, D)
        if best is None:  # pieces the items cannot express (a table cut on its own device, uneven pieces)
            info["tiered"]["note"] = "the start's pieces are beyond the items (a table cut on one device): the start is the plan"
            return finish(self, instance, cost_model, start_shards, clock, seed=seed, status=SolveStatus.feasible, info=info, bound=bm,
                          extra_params={"placements": "tiered: the start plan (its pieces beyond the items offered)"
                                        if split.fixed else "the start plan's column pieces, all in HBM (beyond the items offered)"})
        best_cost = plan_cost(sub_bm, items, best)
        info["tiered"]["start_cost_in_model"] = best_cost
        info["items"] = items.num_items
        caps = np.array(split.sub.topology.capacities(), dtype=np.int64)
        fits = (items.size[:, None] <= caps[None, :]) & constraint_mask(split.sub, items)  # (solvers.exact.tiered.sub_constraints)
        run = _Run(split.sub, cost_model, sub_bm, items, caps, fits, clock, budget, 0.1 + 0.02 * budget, seed, info, split, instance,
                   groups=table_groups(split.sub, items), tiered_start={"solver": name, "cost": costs[name], "shards": start_shards},
                   warm_starts={n: costs.get(n) for n in names}, warm_start=WarmStart(name, best_cost))
        st = _Loop(best, best_cost, best)
        if self.options.neighbourhood > 0 and int(fits.sum()) > constants.LARGE_MODEL:
            self._solve_large(run, st)
        else:
            self._relinearise(run, st)
        st.proven_infeasible = False  # (the start fits: a proof here would be of the trust region only)
        return self._outcome(run, st, None)

    def _start(
        self, instance: Instance, bm: BoundCostModel, label: str, seed: int, budget: float, caps: np.ndarray, info: dict[str, Any],
        cost_model: CostModel | None = None,
    ) -> tuple[Items, np.ndarray | None, float, dict[str, Any] | None, dict[str, float | None], WarmStart | None]:
        """The warm starts, the items offered (with pieces for what the best start cuts), the best start's plan
        as item counts with its full cost (None, inf: none), where the cheapest start that fits is not expressible
        in the items, that start (the plan to return if the search finds none, or none cheaper; else None), every
        start's plan cost and the start the search begins from."""
        starts = self.warm_starts(instance, bm, label, seed, budget, cost_model) if self.options.warm_start else []
        for s in starts:  # (the heuristics honour the constraints; the pre-split, relaxation and NeuroShard starts may not)
            if s["cost"] is not None and constraint_violations(instance, s["shards"]):
                s.update(cost=None, status="breaks the placement constraints")
        good = sorted((s for s in starts if s["cost"] is not None), key=lambda s: s["cost"])  # (stable: ties keep list order)
        items = self.items(instance, bm, good[0]["shards"] if good else None)  # (pieces for what the best start cuts)
        info.update(split_tables_offered=[instance.tables[int(t)].name for t in items.split_tables()], items=items.num_items)
        best: np.ndarray | None = None
        best_cost = math.inf
        began: WarmStart | None = None
        for cand in good:
            counts = items.counts_from_shards(instance, cand["shards"], len(caps))
            if counts is None:  # (e.g. two pieces of a table on one device when split_apart) not expressible here
                continue
            best, best_cost = counts, plan_cost(bm, items, counts)
            began = WarmStart(cand["solver"], best_cost)
            break
        costs = {s["solver"]: s["cost"] for s in starts}
        return items, best, best_cost, (good[0] if good and good[0]["cost"] < best_cost * (1 - 1e-12) else None), costs, began

    def _solve_large(self, run: _Run, st: _Loop) -> None:
        """A model too large to solve whole: neighbourhoods of it, the rest of the plan fixed."""
        assert st.best is not None
        st.best, st.best_cost, st.cut_bound = self._neighbourhoods(run, st.best, st.best_cost)
        if math.isfinite(st.cut_bound):
            st.bound = {"value": st.cut_bound, "point": st.best.copy(), "proven": False,
                        "of": "the linear model's table cuts (solved a neighbourhood at a time)"}
        st.timed_out = True

    # -- the re-linearisation loop ------------------------------------------------------------------------------
    def _relinearise(self, run: _Run, st: _Loop) -> None:
        """Linearise around the plan in hand, solve, judge with the full model; again around every better plan, in
        a shrinking trust region around a plan the linear model did not improve (the package's docstring)."""
        for it in range(self.options.max_iterations):
            if run.search.left() <= 0.05:
                st.timed_out = True
                break
            if not self._iteration(run, st, it):
                break

    def _iteration(self, run: _Run, st: _Loop, it: int) -> bool:
        """One pass of the loop. Returns False when the loop is over."""
        lin_s = 0.0
        if st.lin is None or not np.array_equal(st.lin.point, st.point):
            t_lin = time.perf_counter()
            st.lin, st.lb, st.cut_bound = self._linearisation(run, st.point)  # (with table cuts: every plan puts each table somewhere)
            lin_s = time.perf_counter() - t_lin
        lin = st.lin
        if self._search_first(run, st, it):
            return True
        restricted = st.radius is not None
        prob, classes = self._problem(run, st)
        remaining = run.search.left()
        n_center = int(st.best.sum()) if st.best is not None else len(run.instance.tables)  # shards of the plan in hand
        res = self.linear_solve(prob, lin, run.bm, prob.center, max(0.05, remaining * self._time_share(run, st)), run.seed)
        st.tried[st.radius] = res.stopped is StopReason.proven
        row = self._row(it, st, res, lin_s, len(classes))
        run.info["iterations"].append(row)
        if not restricted and res.status is not SolveStatus.infeasible:
            self._keep_bound(st, res)
        if res.status is SolveStatus.infeasible:
            if st.best is None:
                st.proven_infeasible = True
                return False
            res = LinearSolve(SolveStatus.optimal, StopReason.proven, st.best.copy(), lin.cost(st.best), None, res.build_s, res.solve_s)  # (cutoff)
        why = _unusable(run.items, res.counts, run.caps)
        if res.counts is not None and why is not None:  # (never seen) never use such a plan
            row["rejected"] = why
        if why is not None:
            if st.best is None:  # nothing in hand and nothing found: the time is gone
                st.timed_out = True
                return False
            full, moved, improved = math.inf, n_center, False  # no solution in this solve's time: look closer
        else:
            full, moved, improved = self._judge(run, st, res, row, n_center)
        row["improved"] = bool(improved)
        if improved:
            assert res.counts is not None
            self._accept(st, res.counts, full)
            return True
        return self._look_closer(run, st, moved)

    def _linearisation(self, run: _Run, point: np.ndarray) -> tuple[Linearization, np.ndarray | None, float]:
        """The linear model around `point`, with the table cuts' lower bounds and their bound (None, -inf without)."""
        lin = linearize(run.bm, point, self.options.comm, run.items)
        if not self.table_cuts:
            return lin, None, -math.inf
        lb = table_lower_bounds(lin, run.fits, run.items.size, run.caps)
        return lin, lb, table_cut_bound(lb, run.items)

    def _search_first(self, run: _Run, st: _Loop, it: int) -> bool:
        """Once per plan in hand (outside a trust region): a local search of the linear model. Returns whether it
        found a better plan (now in hand)."""
        if not (self.options.search_share > 0 and st.best is not None and st.radius is None and (st.searched is None or not np.array_equal(st.searched, st.best))):
            return False
        assert st.lin is not None
        st.searched = st.best.copy()  # (once per plan in hand: with its seed the search is deterministic)
        found = judged_local_search(
            run, st.lin, st.best, st.best_cost, run.seed + it, run.search.left() * self.options.search_share, it
        )
        if found is None:
            return False
        st.best, st.best_cost = found
        st.point, st.tried, st.final = st.best, {}, False
        report(best_cost=st.best_cost)
        return True

    def _problem(self, run: _Run, st: _Loop) -> tuple[Problem, list[list[int]]]:
        """The model to solve: symmetry broken (not in a trust region), the plan in hand as its hint and center.
        Returns it and the symmetry classes used."""
        assert st.lin is not None
        allowed, classes, rank = _symmetry(run.instance, st.lin, run.fits, run.items)
        if not self.options.symmetry or st.radius is not None:  # (a trust region around a plan is not symmetric in the devices)
            allowed, classes = run.fits.copy(), []
        hint = _canonical(st.best, classes, rank) if st.best is not None else None
        if hint is not None and (hint[~allowed] > 0).any():
            hint = None  # (cannot happen: the canonical form meets the rule) never hand a solver a bad hint
        prob = Problem(
            run.instance, run.items, run.items.size, run.caps, allowed, classes, rank, hint, st.radius if hint is not None else None, self.options.tiebreak,
            self.table_cuts, st.lb, run.groups,
        )
        return prob, classes

    def _time_share(self, run: _Run, st: _Loop) -> float:
        """The share of the time left for this solve: an unrestricted solve of a plan in hand leaves time for the
        trust-region steps that may follow (on a large model one solve is all the time allows: it gets all of it)."""
        small = int(run.fits.sum()) <= constants.LARGE_MODEL
        restricted = st.radius is not None
        return 0.5 if (self.options.trust_region and small and st.best is not None and not restricted and len(run.instance.tables) > 1 and not st.final) else 1.0

    def _row(self, it: int, st: _Loop, res: LinearSolve, lin_s: float, n_classes: int) -> dict[str, Any]:
        """The iteration's row of info["iterations"]."""
        return {
            "iteration": it,
            "radius": st.radius,
            "linear_status": res.status,
            "linear_objective": res.objective,
            "linear_bound": res.bound if st.radius is None else None,
            "table_cut_bound": st.cut_bound if math.isfinite(st.cut_bound) else None,
            "expansion_cost": st.best_cost if st.best is not None else None,
            "linearize_s": round(lin_s, 4),
            "build_s": round(res.build_s, 4),
            "solve_s": round(res.solve_s, 4),
            "symmetry_classes": n_classes,
            **{k: v for k, v in res.info.items() if k != "solution"},
        }

    @staticmethod
    def _keep_bound(st: _Loop, res: LinearSolve) -> None:
        """An unrestricted solve's bound (raised by the table cuts): kept when it is around a new point, higher, or
        proven."""
        value = max(res.bound if res.bound is not None else -math.inf, st.cut_bound)
        same = st.bound is not None and np.array_equal(st.bound["point"], st.point)
        if math.isfinite(value) and (not same or value > st.bound["value"] or res.status is SolveStatus.optimal):
            st.bound = {"value": value, "point": st.point.copy(), "proven": res.status is SolveStatus.optimal or (same and st.bound["proven"])}

    @staticmethod
    def _judge(run: _Run, st: _Loop, res: LinearSolve, row: dict[str, Any], n_center: int) -> tuple[float, int, bool]:
        """A usable plan of the linear model judged by the full model: (its cost, the shards that left their
        device, whether it is better than the plan in hand)."""
        assert res.counts is not None
        full = plan_cost(run.bm, run.items, res.counts)
        moved = int(np.maximum(st.point - res.counts, 0).sum()) if st.best is not None else n_center  # shards that left
        row["full_cost"] = full
        row["moved_shards"] = moved
        row["split_tables"] = len(run.items.split_used(res.counts))
        improved = st.best is None or full < st.best_cost - 1e-9 * max(1.0, abs(st.best_cost))
        return full, moved, improved

    @staticmethod
    def _accept(st: _Loop, counts: np.ndarray, full: float) -> None:
        """A better plan: in hand, the new expansion point; a trust region around the old one doubles."""
        st.best, st.best_cost = counts.copy(), full
        st.point, st.tried, st.final = st.best, {}, False
        report(best_cost=full)
        if st.radius is not None:
            st.radius = None if 2 * st.radius >= int(st.best.sum()) else 2 * st.radius

    def _look_closer(self, run: _Run, st: _Loop, moved: int) -> bool:
        """No better plan by the full model: the linear model misled us; look closer (halve the trust region), or
        stop. Returns False when the loop is over."""
        if not self.options.trust_region or st.best is None:
            st.converged = True
            return False
        radius = max(0, (moved if st.radius is None else min(st.radius, moved)) // 2)
        while radius in st.tried:
            radius //= 2
        st.radius = radius
        if radius < 1:
            # the bound of the linear model around this plan needs an unrestricted solve; one that ended on its
            # time share without a proof gets the rest of the time
            if None not in st.tried or (not st.tried[None] and not st.final and run.time.left() > 0.5):
                st.final = None in st.tried
                st.radius = None
                return True
            st.converged = True
            return False
        return True

    # -- the result -------------------------------------------------------------------------------------------
    def _outcome(self, run: _Run, st: _Loop, certified: float | None) -> SolveResult:
        """The best plan with its status and bound, or why there is none, with what the search did."""
        out = self._outcome_of(run, st, certified)
        out.stats = SearchStats(steps=len(run.info["iterations"]), warm_starts=dict(run.warm_starts), warm_start=run.warm_start)
        return out

    def _outcome_of(self, run: _Run, st: _Loop, certified: float | None) -> SolveResult:
        instance, items, clock, info = run.instance, run.items, run.clock, run.info
        start_plan = run.start_plan
        if st.proven_infeasible:
            # the solver proved its own placements (HBM table-wise and column pieces) impossible; row-wise or
            # host-memory plans may still exist, so this is `infeasible` only with the tiered proof (unplaceable)
            why = _packing_reason(instance, BACKEND_LABEL[self.backend], self.max_split if len(items.split_tables()) else 1)
            return unplaceable(self, instance, why, clock, self._placements(), {**info, "placements_disproved_by": self.backend})
        best = st.best
        beaten = best is not None and start_plan is not None and start_plan["cost"] < st.best_cost * (1 - 1e-12)
        if (best is None or beaten) and start_plan is not None:
            # a search seeded by a plan that fits never returns less than that plan
            found = (f"it is cheaper than the best plan {BACKEND_LABEL[self.backend]} found ({st.best_cost:.6g} ms)" if beaten else
                     f"{BACKEND_LABEL[self.backend]} found no assignment of its own in time")
            info["returned_warm_start"] = (f"{start_plan['solver']}'s plan: it fits, but the items offered (whole tables and "
                                           f"dyadic column pieces) cannot express it and {found}")
            stopped = StopReason.time_limit if run.time.spent() or st.timed_out else None
            shards = list(start_plan["shards"])
            if run.tiered is not None:
                assert run.whole is not None
                return finish(self, run.whole, run.cost_model, shards + run.tiered.fixed, clock, seed=run.seed, stopped=stopped, info=info,
                              extra_params={"placements": self._tiered_placements(run)})
            return finish(self, instance, run.cost_model, shards, clock, seed=run.seed, stopped=stopped, info=info, bound=run.bm)
        if best is None:
            packed = [name for name, cost in run.warm_starts.items() if cost is not None]
            starts = (f"the plans of {', '.join(packed)} fit but none is expressible in its items (whole tables and "
                      "dyadic column pieces)" if packed else "no heuristic packed the tables")
            why = (
                f"{self.name}: no plan found within the time limit of {run.budget:g} s ({starts}, and "
                f"{BACKEND_LABEL[self.backend]} found no assignment in time); the instance is not proven infeasible"
            )
            return fail(self, SolveStatus.no_solution, why, clock, info)
        bound = st.bound
        linear = None if bound is None else ProvenBound(bound["value"], bound.get("of") or (
            "the linearised model around the returned plan" if np.array_equal(bound["point"], best)
            else "the linearised model around an earlier plan"))
        # the certified bound of the analytic model itself, over every table- and column-wise plan (solvers.bound):
        # the only one that bounds the plan cost; the linear model's bound is the search's own
        lower = None if certified is None else ProvenBound(certified, "every table- and column-wise plan (certified, the analytic model)")
        info.update(
            best_full_cost=st.best_cost,
            linear_bound=linear.value if linear is not None else None,
            linear_bound_proven_optimal=bool(bound and bound["proven"]),
            converged=st.converged,
            iterations_run=len(info["iterations"]),
            split_tables_used=[instance.tables[t].name for t in items.split_used(best)],
        )
        if linear is not None and st.best_cost > 0:
            info["gap_to_linear_bound"] = (st.best_cost - linear.value) / st.best_cost
        over = run.time.spent()
        around_best = bound is not None and np.array_equal(bound["point"], best)
        stopped = StopReason.time_limit if st.timed_out or over else None
        if st.converged and not over and around_best and bound is not None and bound["proven"]:
            status = SolveStatus.optimal
        else:
            status = SolveStatus.feasible  # the limit, max_iterations reached, or no proven linear optimum around the plan
        shards = items.shards(best, instance)
        if run.tiered is None and info["split_tables_used"] and not run.time.spent():
            shards, moved, after = self._per_type_polish(run, shards)
            if moved:
                info["per_type_polish"] = {"moves": moved, "cost_before": st.best_cost, "cost_after": after}
                status = SolveStatus.feasible if status is SolveStatus.optimal else status
        if run.tiered is None and self.options.join_collectives and not run.time.spent():
            shards, marked, after = join_one_collective(instance, run.bm, shards)
            if marked:  # (whole tables the items left table-wise, marked column_wise: a plan beyond the linear model's optimum)
                info["marked_column_wise"] = {"tables": marked, "cost_after": after}
                status = SolveStatus.feasible if status is SolveStatus.optimal else status
        if run.tiered is not None:
            if status is SolveStatus.optimal:  # (optimal for the HBM tables only: the fixed shards were never optimised)
                status = SolveStatus.feasible  # the HBM tables' plan and the fixed row-wise / host-memory shards, on the whole instance
            assert run.whole is not None
            fixed = None if linear is None else ProvenBound(linear.value, f"{linear.of}, with the tiered plan's row-wise and host-memory shards fixed")
            whole = shards + run.tiered.fixed
            start = run.tiered_start
            if start is not None:
                # the items price the sub-instance; the whole plan's full cost can come out above the start's where the
                # search was cut early (a loaded machine: 12.14 against 11.79 ms at 1 s): the start is then the answer
                got = float(run.cost_model.bind(run.whole).plan_costs(whole).max_cost)
                if got > start["cost"] * (1 + 1e-9):
                    info["returned_warm_start"] = (f"{start['solver']}'s tiered start ({start['cost']:.6g} ms): the exact loop's plan "
                                                   f"costs {got:.6g} ms on the whole instance")
                    whole = list(start["shards"])
            return finish(self, run.whole, run.cost_model, whole, clock, seed=run.seed, status=status, stopped=stopped, model_bound=fixed, info=info,
                          extra_params={"placements": self._tiered_placements(run)})
        if self.options.row_wise and not run.time.spent():
            shards, status, lower = self._row_splits(run, shards, status, lower)
        return finish(self, instance, run.cost_model, shards, clock, seed=run.seed, status=status, stopped=stopped, lower_bound=lower,
                      model_bound=linear, info=info, bound=run.bm)

    @staticmethod
    def _tiered_placements(run: _Run) -> str:
        """What a plan of the tiered path holds, in words (its `placements` parameter)."""
        assert run.tiered is not None
        if run.tiered.fixed:
            return "tiered: HBM tables placed exactly, row-wise and host-memory shards as the start plan has them"
        return "the start plan's column pieces (any 4-aligned widths), all in HBM, placed exactly"

    def _per_type_polish(self, run: _Run, shards: list[Shard]) -> tuple[list[Shard], int, float]:
        """NeuroShard's device polish (moves and swaps of pieces, solvers.neuroshard.search) on a plan of whole tables and
        column pieces, under the full model: the linear model prices each collective apart too, but is exact only at
        its expansion point, and the polish moves what the judge (not the linearisation) says pays. Kept only where
        the judge says it is cheaper. (plan, moves, its cost)."""
        from solvers.neuroshard.config import NeuroShardConfig
        from solvers.neuroshard.finish import device_polish

        before = float(run.bm.plan_costs(shards).max_cost)
        polished, n = device_polish(run.instance, run.bm, shards, NeuroShardConfig(), run.time)
        if n and constraint_violations(run.instance, polished):  # (the polish moves pieces anywhere they fit)
            return shards, 0, before
        after = float(run.bm.plan_costs(polished).max_cost) if n else before
        if after < before * (1 - 1e-12):
            return polished, n, after
        return shards, 0, before

    def _row_splits(self, run: _Run, shards: list[Shard], status: SolveStatus, lower: ProvenBound | None) -> tuple[list[Shard], SolveStatus, ProvenBound | None]:
        """Row-wise / table-row-wise splits of tables on the bottleneck device where the cost model says they pay
        (solvers.placement.polish): a table too hot for one device that column pieces cannot balance. The linear
        model and the certified bound know only table- and column-wise placements, so a plan with a split is never
        `optimal` and the certified bound is dropped (kept in info as `table_column_wise_bound`: a split plan may be
        below it)."""
        split, got = polish_placements(run.instance, run.bm, shards, row_wise=True, budget=run.time)
        if not got["moves"] or constraint_violations(run.instance, split):
            return shards, status, lower
        run.info["row_splits"] = got["moves"]
        run.info["table_column_wise_bound"] = lower.value if lower is not None else None
        return split, SolveStatus.feasible if status is SolveStatus.optimal else status, None

    def _certified_bound(self, instance: Instance, cost_model: CostModel, budget: float, clock: Stopwatch, info: dict[str, Any]) -> float | None:
        """The analytic model's certified bound (solvers.bound) within CERTIFIED_BOUND_SHARE of the time
        limit, for large models, where the linear model's only bound is the weak table cuts. None for another cost
        model or when nothing finite was proven."""
        from solvers.bound import BoundError, analytic_lower_bound

        t0 = clock.elapsed
        try:
            res = analytic_lower_bound(instance, cost_model, time_limit=min(CERTIFIED_BOUND_MAX_S, CERTIFIED_BOUND_SHARE * budget))
        except BoundError:  # (not the analytic model: nothing to certify with)
            return None
        ok = res.status.proves_bound and math.isfinite(res.value_ms)
        info["certified_bound"] = {"value": res.value_ms if ok else None, "status": res.status, "source": res.source,
                                   "seconds": clock.elapsed - t0}
        return res.value_ms if ok else None

    def _neighbourhoods(self, run: _Run, best: np.ndarray, best_cost: float) -> tuple[np.ndarray, float, float]:
        """Large-neighbourhood search with the exact model: the `neighbourhood` / 2 slowest devices and as many light
        ones (the lightest first, the next ones after each failure) are re-solved exactly -- the tables that lie wholly
        on them free to move among them, the rest of the plan fixed -- linearised around the best plan, judged by the
        full model. Tables with pieces on other devices too stay fixed. Returns (best, its cost, the table-cut bound
        of the last linearisation)."""
        info, items, caps = run.info, run.items, run.caps
        search = run.search
        k = max(1, self.options.neighbourhood // 2)
        fails, cut = 0, -math.inf
        lin: Linearization | None = None
        rank = np.zeros(items.num_items, dtype=np.int64)
        searched: np.ndarray | None = None
        last_lin_s = 0.0  # (a linearisation of 3,424 tables on 512 devices takes 6 s: none is begun that cannot end)
        while search.left() > 0.5:
            t0 = time.perf_counter()
            if lin is None or not np.array_equal(lin.point, best):
                if lin is not None and search.left() < last_lin_s + 0.5:
                    break
                lin, _, cut = self._linearisation(run, best)
                last_lin_s = time.perf_counter() - t0
            lin_s = time.perf_counter() - t0
            if self.options.search_share > 0 and (searched is None or not np.array_equal(searched, best)):
                # the local search first (a step costs ~50 ms on 856 x 128, a neighbourhood solve seconds), again
                # after every plan a neighbourhood improved
                searched = best.copy()
                found = judged_local_search(run, lin, best, best_cost, run.seed + len(info["iterations"]),
                                           search.left() * self.options.search_share, len(info["iterations"]))
                if found is not None:
                    best, best_cost = found
                    continue
            chosen, free_tables, allowed = next_neighbourhood(lin, items, run.fits, best, k, fails)
            prob = Problem(run.instance, items, items.size, caps, allowed, [], rank, best, None, self.options.tiebreak, False, None, run.groups)
            share = min(search.left() - 0.3, max(1.0, 0.1 * search.deadline))
            res = self._neighbourhood_solve(prob, lin, run.bm, best, max(0.2, share), run.seed + fails)
            row: dict[str, Any] = {"neighbourhood_devices": [int(d) for d in chosen], "free_tables": int(len(free_tables)),
                                   "linear_status": res.status, "linear_objective": res.objective, "solve_s": round(res.solve_s, 4),
                                   "build_s": round(res.build_s, 4), "table_cut_bound": cut if math.isfinite(cut) else None,
                                   "expansion_cost": best_cost, "variables": res.info.get("variables")}
            improved = False
            if _unusable(items, res.counts, caps) is None:
                assert res.counts is not None
                full = plan_cost(run.bm, items, res.counts)
                row.update(full_cost=full, moved_shards=int(np.maximum(best - res.counts, 0).sum()), split_tables=len(items.split_used(res.counts)))
                if full < best_cost - 1e-9 * max(1.0, abs(best_cost)):
                    best, best_cost, improved = res.counts.copy(), full, True
            row.update(improved=improved, iteration=len(info["iterations"]), radius=None, linearize_s=round(lin_s, 4))
            info["iterations"].append(row)
            fails = 0 if improved else fails + 1
        return best, best_cost, cut

    def _neighbourhood_solve(self, prob: Problem, lin: Linearization, bm: BoundCostModel, best: np.ndarray, time_limit: float, seed: int) -> LinearSolve:
        """One neighbourhood's model solved by this solver's backend."""
        if self.backend == "cpsat":
            # deterministic: one worker (CP-SAT 9.15's interleaved search aborted the process -- "Check failed:
            # heuristics.fixed_search != nullptr" -- on these part-fixed models); else the full portfolio
            workers = 1 if self.options.deterministic else self.workers
            return solve_cpsat(prob, lin, best, time_limit, seed, workers, False, self.options.cutoff)
        return self.linear_solve(prob, lin, bm, best, time_limit, seed)

    def items(self, instance: Instance, bm: BoundCostModel, start: list[Shard] | None = None) -> Items:
        """The pieces offered (solvers/exact/offer.py)."""
        return offered_items(instance, bm, self.options, self.max_split, start)

    def _placements(self) -> str:
        kinds = "table-wise and column-wise in HBM" if self.max_split >= 2 else "table-wise in HBM"
        return kinds + ("" if self.options.exact_neural or not self.options.tiered else ", or within a tiered start plan")

    def _infeasibility(self, instance: Instance) -> str | None:
        return split_infeasibility(instance, self.max_split)


class CpSatSolver(ExactSolver):
    name = "cpsat"
    backend = "cpsat"


class MilpSolver(ExactSolver):
    name = "milp"
    backend = "cbc"


class MilpExactNeuralSolver(ExactSolver):
    name = "milp_exact_neural"
    backend = "highs"
    Options = ExactNeuralOptions


class MilpHighsSolver(ExactSolver):
    name = "milp_highs"
    backend = "highs"
