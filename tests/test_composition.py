"""Typed composition (issue 'house' item 2): NeuroShardSolver is built from injected parts (solvers.protocols), each
with a default - the seed solver, the tiered layout proposer, the polisher - and what greedy hands it is a typed value
(`SolveResult.layouts`), not its `info`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from costmodels.registry import get_cost_model
from shardopt.core.ir import instance_from_dict, load_instance, to_dict
from shardopt.core.plan_check import check_plan
from solvers.heuristics.constructive import GreedySolver, SizeSolver
from solvers.neuroshard.finish import polish_searched_plan
from solvers.neuroshard.layouts import tiered_layouts
from solvers.neuroshard.search import NeuroShardSolver
from solvers.protocols import SeedSolver
from solvers.results import TieredLayoutChoice

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "instances" / "examples" / "small.json"
CM = get_cost_model("analytic")


def _oversized() -> Any:
    """small.json with its first table grown to 1.5 x a device's memory: only a tiered layout holds it."""
    d = to_dict(load_instance(SMALL))
    t = d["tables"][0]
    t["rows"] = int(1.5 * d["topology"]["memory_bytes"] / (t["dim"] * 4 + 4))
    return instance_from_dict(d)


class Recording:
    """A seed solver that records its calls and hands on another solver's result."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls, self.name = inner, 0, f"recording-{inner.name}"

    def solve(self, instance: Any, cost_model: Any, *, time_limit: float | None = None, seed: int = 0) -> Any:
        self.calls += 1
        return self.inner.solve(instance, cost_model, time_limit=time_limit, seed=seed)


def test_the_default_parts() -> None:
    s = NeuroShardSolver()
    assert isinstance(s.seed_solver, GreedySolver) and s.propose_layouts is tiered_layouts and s.polisher is polish_searched_plan
    assert isinstance(s.seed_solver, SeedSolver) and "parts" not in s.params()


def test_an_injected_seed_is_the_one_searched_from_and_recorded_in_the_plan() -> None:
    inst = load_instance(SMALL)
    seed = Recording(SizeSolver())
    r = NeuroShardSolver(seed_solver=seed).solve(inst, CM, seed=0)
    assert seed.calls >= 1 and r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.plan.params["parts"] == {"seed_solver": "recording-size"}
    # never dearer than the seed it was handed
    assert r.predicted_cost <= SizeSolver().solve(inst, CM, seed=0).predicted_cost + 1e-12


def test_greedy_hands_its_layouts_typed_and_an_injected_proposer_decides_what_is_searched() -> None:
    inst = _oversized()
    greedy = GreedySolver().solve(inst, CM, seed=0)
    assert greedy.layouts and all(isinstance(c, TieredLayoutChoice) for c in greedy.layouts)
    costs = [c.cost for c in greedy.layouts]
    assert costs == sorted(costs)
    seen: list[int] = []

    def first_only(instance: Any, seed_result: Any) -> Any:
        got = tiered_layouts(instance, seed_result)
        assert not isinstance(got, str)
        seen.append(len(got))
        return got[:1]

    r = NeuroShardSolver(layouts=first_only).solve(inst, CM, seed=0)
    assert seen and r.status.has_plan and check_plan(inst, r.plan).ok
    assert "layouts_compared" not in r.info  # (one layout searched: nothing compared)

    asked: list[str] = []

    def nothing(instance: Any, seed_result: Any) -> str:
        asked.append(seed_result.solver)
        return "no layout wanted here"

    # no tiered layout offered: the plan is the HBM search's (column pieces of the oversized table), never a tiered one
    hbm = NeuroShardSolver(layouts=nothing).solve(inst, CM, seed=0)
    assert asked == ["greedy"] and hbm.status.has_plan and check_plan(inst, hbm.plan).ok
    assert all(s.rows is None and not s.kernel.in_host_memory for s in hbm.plan.shards)
    # the tiered search itself has nothing to search then, and says why; with the default proposer it places the
    # oversized table by rows
    from solvers.base import Budget, Stopwatch

    tiered = NeuroShardSolver(layouts=nothing)._solve_tiered(inst, CM, Budget.of(Stopwatch(), 5.0), 0, "test")
    assert not tiered.status.has_plan and "no layout wanted here" in (tiered.reason or "")
    default = NeuroShardSolver()._solve_tiered(inst, CM, Budget.of(Stopwatch(), 5.0), 0, "test")
    assert default.status.has_plan and any(s.rows is not None or s.kernel.in_host_memory for s in default.plan.shards)


def test_an_injected_polisher_runs_on_the_searched_plan() -> None:
    inst = load_instance(SMALL)
    calls: list[int] = []

    def counting(instance: Any, bm: Any, shards: Any, cfg: Any, data_parallel: bool, budget: Any, timed_out: bool) -> Any:
        calls.append(len(shards))
        return polish_searched_plan(instance, bm, shards, cfg, data_parallel, budget, timed_out)

    r = NeuroShardSolver(polisher=counting).solve(inst, CM, seed=0)
    assert calls and r.status.has_plan
    assert r.plan.shards == NeuroShardSolver().solve(inst, CM, seed=0).plan.shards  # (the default polisher, wrapped: the same plan)


class _Recording:
    """A seed solver that records each call and answers with the wrapped solver's plan."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.calls = inner, inner.name, 0

    def solve(self, instance: Any, cost_model: Any, *, time_limit: float | None = None, seed: int = 0) -> Any:
        self.calls += 1
        return self.inner.solve(instance, cost_model, time_limit=time_limit, seed=seed)


def test_the_exact_solvers_starts_are_injected_parts() -> None:
    """cpsat starts from the plans of the solvers it is handed (its heuristics, the default solver's plan), each a
    SeedSolver, and records every start's cost typed (`SolveResult.stats`); the defaults are the heuristics and
    NeuroShard."""
    from solvers.exact.solver import CpSatSolver

    inst = load_instance(SMALL)
    size, default = _Recording(SizeSolver()), _Recording(GreedySolver())
    cpsat = CpSatSolver(heuristic_starts=(size,), default_start=default, default_time_limit=2.0, relaxation_share=0)
    assert isinstance(size, SeedSolver)
    r = cpsat.solve(inst, CM, seed=0)
    assert size.calls == 1 and default.calls == 1 and check_plan(inst, r.plan).ok
    assert r.stats is not None and set(r.stats.warm_starts) >= {"size", "greedy"}  # (each start by its solver's name)
    assert "dim" not in r.stats.warm_starts  # (the default heuristics were not asked)
    assert r.stats.warm_start is not None and r.predicted_cost <= r.stats.warm_start.cost + 1e-12
    plain = CpSatSolver()
    assert [h.name for h in plain.heuristic_starts][0] == "greedy" and plain.default_start.name == "neuroshard"
