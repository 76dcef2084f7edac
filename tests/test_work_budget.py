"""Work budgets (shardopt.core.work): the default solve stops on cost-model work, not wall time, so the same
instance and seed give the same plan on a fast, slow or busy machine; the wall-clock cap stays as the safety net and
the result says when it fired."""

from __future__ import annotations

import time

import pytest
from conftest import ROOT

from costmodels.analytic import AnalyticCostModel
from shardopt.core.ir import load_instance
from shardopt.core.work import current_meter, metered
from solvers.catalog import get_solver
from solvers.results import StopReason

CM = AnalyticCostModel()
DLRMV2_8 = ROOT / "instances/real/mlperf-dlrmv2-8xh100.json"


def _slowed(monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    """The machine `factor` times slower, as the solvers' clocks see it."""
    real = time.perf_counter
    start = real()
    monkeypatch.setattr(time, "perf_counter", lambda: start + factor * (real() - start))


def test_the_default_solve_gives_the_same_plan_on_a_slower_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLPerf DLRMv2 on 8 H100s: its default solve ends on its budget, so a wall-clock budget cut it short wherever
    the machine was slower (two default solves gave 1.333 and 1.414 ms); on the work budget the plan is the same."""
    inst = load_instance(DLRMV2_8)
    first = get_solver("neuroshard").solve(inst, CM, seed=0)
    _slowed(monkeypatch, 4.0)
    second = get_solver("neuroshard").solve(inst, CM, seed=0)
    assert first.plan is not None and second.plan is not None
    assert second.plan.shards == first.plan.shards and second.predicted_cost == first.predicted_cost
    assert first.stopped in (StopReason.work_budget, StopReason.converged) and first.stopped is second.stopped
    assert not second.work_budget.wall_cap_fired


def test_an_explicit_time_limit_stays_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--time-limit` is the user's promise about wall time: on a machine 50 times slower it stops the search."""
    inst = load_instance(DLRMV2_8)
    _slowed(monkeypatch, 50.0)
    r = get_solver("neuroshard").solve(inst, CM, seed=0, time_limit=2.0)
    assert r.plan is not None and r.stopped is StopReason.time_limit and r.work_budget is None


def test_the_wall_clock_cap_fires_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import shardopt.core.work as work

    monkeypatch.setattr(work, "WALL_CAP_FACTOR", 0.0)
    monkeypatch.setattr(work, "WALL_CAP_EXTRA_S", 0.05)
    inst = load_instance(DLRMV2_8)
    _slowed(monkeypatch, 20.0)
    r = get_solver("neuroshard").solve(inst, CM, seed=0)
    assert r.plan is not None  # (the best plan so far, as at a time limit)
    assert r.stopped is StopReason.wall_cap and r.plan.stopped == "wall_cap" and r.work_budget.wall_cap_fired


def test_meters_count_per_thread_and_nest() -> None:
    """Work outside a metered block is not counted; a nested block shares the outer meter."""
    inst = load_instance(ROOT / "instances/examples/small.json")
    bm = CM.bind(inst)
    assert current_meter() is None
    bm.compute_costs(bm.table_states)  # (no meter: nothing to charge)
    with metered() as outer:
        bm.compute_costs(bm.table_states)
        once = outer.units
        assert once > 0
        with metered() as inner:
            assert inner is outer
            bm.compute_costs(bm.table_states)
        assert outer.units == pytest.approx(2 * once)
    assert current_meter() is None


def test_cpsat_default_gives_the_same_plan_on_a_slower_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """cpsat without a time limit runs on a work budget: CP-SAT on its deterministic time, the local searches and
    warm starts on their counted work, a fixed worker count; a machine 4 times slower gives the same plan."""
    inst = load_instance(DLRMV2_8)
    first = get_solver("cpsat", default_time_limit=2.0).solve(inst, CM, seed=0)
    _slowed(monkeypatch, 4.0)
    second = get_solver("cpsat", default_time_limit=2.0).solve(inst, CM, seed=0)
    assert first.plan is not None and second.plan is not None
    assert second.plan.shards == first.plan.shards and second.predicted_cost == first.predicted_cost
    assert first.stopped is second.stopped and first.stopped in (StopReason.work_budget, StopReason.converged, StopReason.proven)
    assert first.work_budget.work_s == 2.0 and not second.work_budget.wall_cap_fired
    assert first.plan.params["workers"] == 2 and first.plan.params["relaxation_share"] == 0.0


def test_cpsat_with_a_time_limit_stays_wall_clock() -> None:
    inst = load_instance(ROOT / "instances/examples/small.json")
    r = get_solver("cpsat").solve(inst, CM, seed=0, time_limit=3.0)
    assert r.plan is not None and r.work_budget is None


def test_many_small_cpsat_models_end_on_the_work_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a CP-SAT model is charged, not only CP-SAT's own deterministic time: re-solving a small instance two
    devices at a time made thousands of models whose deterministic time was near zero, and the solve ran to its
    wall-clock cap (60 s on a 6-work-second budget) instead of ending on its budget."""
    from conftest import make_instance

    import solvers.exact.constants as constants

    monkeypatch.setattr(constants, "LARGE_MODEL", 10)  # (the small instance counts as large: neighbourhoods)
    inst = make_instance(16, 4, seed=7, mem_factor=1.4)
    r = get_solver("cpsat", neighbourhood=2, neuroshard_share=0, default_time_limit=2.0).solve(inst, CM, seed=0)
    assert r.plan is not None and r.stopped in (StopReason.work_budget, StopReason.converged, StopReason.proven)
    assert not r.work_budget.wall_cap_fired
    assert len(r.info["iterations"]) < 2_000  # (8,700 models in 29 s on a 3-work-second budget before)


def test_solve_json_reports_the_work_budget_and_the_search() -> None:
    import json

    from typer.testing import CliRunner

    from shardopt.cli import app

    r = CliRunner().invoke(app, ["solve", str(ROOT / "instances/examples/small.json"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["work_budget"]["work_s"] > 0 and doc["work_budget"]["wall_cap_fired"] is False
    assert doc["search"]["states_scored"] > 0 and doc["stopped"] in ("converged", "work_budget")
    timed = json.loads(CliRunner().invoke(app, ["solve", str(ROOT / "instances/examples/small.json"), "--time-limit", "5", "--json"]).stdout)
    assert "work_budget" not in timed  # (a time limit is wall clock)
