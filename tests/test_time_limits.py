"""Every solver honours --time-limit (issue 18): on a production-size instance (856 tables x 128 devices) with a
2 s limit, each registered solver's solve returns within 10 % + 1 s of the limit (wall or CPU time, the lesser), with a
plan or with a reason.

(What is timed is `solve` itself: loading a solver's checkpoint or importing TorchRec happens when the solver is
built, before any limit applies.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from costmodels.registry import get_cost_model
from shardopt.core.ir import load_instance
from shardopt.core.plan_check import check_plan
from solvers.catalog import get_solver, solver_names

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 2.0


@pytest.fixture(scope="module")
def production():
    return load_instance(ROOT / "instances" / "suites" / "production" / "production-all-s0-0000.json")


def timed_solve(solver, production):
    """(result, wall s, CPU s) of the solver on production within LIMIT, after a first solve of a small instance that
    imports what the solver's path needs (OR-Tools, HiGHS, ...: seconds on a busy machine, once per process, not the
    search the limit bounds; cpsat took 3.6 s of a 2 s limit beside two CPU burners)."""
    cm = get_cost_model("analytic")
    solver.solve(load_instance(ROOT / "instances" / "examples" / "small.json"), cm, time_limit=0.5, seed=0)
    t0, c0 = time.perf_counter(), time.process_time()
    r = solver.solve(production, cm, time_limit=LIMIT, seed=0)
    return r, time.perf_counter() - t0, time.process_time() - c0


@pytest.mark.parametrize("name", solver_names())
def test_every_solver_stops_within_its_time_limit(name: str, production) -> None:
    r, wall, cpu = timed_solve(get_solver(name), production)
    # the lesser of wall and CPU time: on a busy machine the wall time of what cannot be interrupted (building a model,
    # the last judging) stretches with the load - this VM beside two CPU burners took cpsat / milp to 5 s of a 2 s
    # limit at every commit tried - while a solver that ignored its limit would overrun in both
    assert min(wall, cpu) <= 1.1 * LIMIT + 1.0, f"{name} took {wall:.2f} s ({cpu:.2f} s of CPU) with --time-limit {LIMIT:g}"
    if r.plan is not None:
        assert check_plan(production, r.plan).ok
    else:
        assert r.reason


def test_solve_commands_limit_counts_from_the_commands_start(monkeypatch) -> None:
    """`shardopt solve --time-limit L` bounds the command: what start-up and loading took comes out of the solver's
    share, which is never below half the limit (a slow start on a loaded machine still leaves a search)."""
    from shardopt.cli import common

    now = time.perf_counter()
    monkeypatch.setattr(common, "COMMAND_STARTED", now - 0.3)
    assert 1.6 <= common.solver_time_limit(2.0) <= 1.7
    monkeypatch.setattr(common, "COMMAND_STARTED", now - 5.0)
    assert common.solver_time_limit(2.0) == pytest.approx(common.SOLVER_SHARE_MIN * 2.0)
    assert common.solver_time_limit(None) is None


def test_a_budget_hands_on_shares_of_what_is_left() -> None:
    from solvers.base import Budget, Stopwatch

    clock = Stopwatch()
    clock.start -= 4.0  # 4 s into the solve
    budget = Budget.of(clock, 10.0)
    assert budget.left() == pytest.approx(6.0, abs=0.05) and not budget.spent()
    half = budget.share(0.5)
    assert half.deadline == pytest.approx(7.0, abs=0.05) and half.clock is clock
    assert Budget.of(clock, 3.0).spent() and Budget.of(clock, 3.0).left() == 0.0
    free = Budget.of(clock, None)
    assert free.left() is None and not free.spent() and free.share(0.1) is free and budget.unlimited().deadline is None


def test_the_exact_solvers_warm_starts_leave_the_search_its_time(production) -> None:
    """Each warm start's share is of the whole limit, so together they may ask for more than it: cpsat with the pre-split
    and one-collective starts at 0.9 each still returns within the limit (no start runs into its last quarter)."""
    r, wall, cpu = timed_solve(get_solver("cpsat", presplit_share=0.9, one_collective_share=0.9), production)
    assert min(wall, cpu) <= 1.1 * LIMIT + 1.0, f"took {wall:.2f} s ({cpu:.2f} s of CPU) with a {LIMIT:g} s limit"
    assert r.plan is not None and check_plan(production, r.plan).ok
