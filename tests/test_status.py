"""One status vocabulary (issue 'house' item 3): every backend's statuses map onto SolveStatus + StopReason at its
boundary, the bound's status is typed, the catalog's specs carry capability flags and say why they refuse an
instance, and the leaderboard's `pick` entry is told apart by its registry, not by its name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import make_instance
from typer.testing import CliRunner

from shardopt.cli import app
from shardopt.core.ir import instance_from_dict
from shardopt.core.sharding_types import SHARDING_TYPES
from solvers.catalog import NotAccepted, SolverSpec, check_accepts, spec_of, specs
from solvers.status import BoundStatus, SolveStatus, StatusMap, StopReason


def test_a_status_map_reads_a_limit_without_a_point_as_no_solution_and_an_unknown_status_as_an_error() -> None:
    m = StatusMap("test", {"limit": (SolveStatus.feasible, StopReason.time_limit), "opt": (SolveStatus.optimal, StopReason.proven)})
    assert m.read("limit", True).status is SolveStatus.feasible
    assert m.read("limit", False).status is SolveStatus.no_solution and m.read("limit", False).stopped is StopReason.time_limit
    assert m.read("opt", True).status is SolveStatus.optimal
    odd = m.read("never heard of", True)
    assert odd.status is SolveStatus.no_solution and odd.stopped is StopReason.error  # (never a guess)
    assert m.read("opt", False).stopped is StopReason.error  # an "optimal" without a point is no proof
    assert not hasattr(SolveStatus, "timeout")  # (a limit is a StopReason, not a status)


def test_every_cpsat_status_is_in_its_map() -> None:
    from ortools.sat.python import cp_model

    from solvers.exact.cpsat import CPSAT_STATUS

    solver = cp_model.CpSolver()
    for code in (cp_model.UNKNOWN, cp_model.MODEL_INVALID, cp_model.FEASIBLE, cp_model.INFEASIBLE, cp_model.OPTIMAL):
        assert solver.status_name(code) in CPSAT_STATUS, solver.status_name(code)
    assert CPSAT_STATUS.read("FEASIBLE", True).stopped is StopReason.time_limit
    assert CPSAT_STATUS.read("UNKNOWN", False).status is SolveStatus.no_solution


def test_every_highspy_limit_status_reads_as_a_limit() -> None:
    highspy = pytest.importorskip("highspy")
    from solvers.milp.highs import HIGHSPY_STATUS

    names = [n for n in dir(highspy.HighsModelStatus) if n.startswith("k")]
    limits = [n for n in names if "Limit" in n]
    assert limits
    for n in limits:
        assert n in HIGHSPY_STATUS and HIGHSPY_STATUS.read(n, True).stopped is StopReason.time_limit, n
    assert HIGHSPY_STATUS.read("kOptimal", True).stopped is StopReason.proven


def test_highs_results_carry_the_one_vocabulary() -> None:
    from solvers.milp import SparseModel, solve_milp

    model = SparseModel()
    x = model.var(0.0, 1.0, integer=True)
    model.row({x: 1.0}, 2.0, np.inf)  # x >= 2 with x <= 1: infeasible
    res = solve_milp(model, np.array([1.0]), time_limit=10)
    assert res.status is SolveStatus.infeasible and res.stopped is StopReason.proven and res.x is None


def test_the_bound_status_is_typed() -> None:
    from solvers.bound import analytic_lower_bound
    from solvers.bound.bound import AnalyticBound

    b = analytic_lower_bound(make_instance(6, 2, seed=0), None, time_limit=10)
    assert isinstance(b.status, BoundStatus) and b.status.proves_bound
    assert b.to_dict()["status"] == b.status.value
    with pytest.raises(ValueError):
        AnalyticBound(1.0, "maybe", False, "x", 0.0, "x")  # (a status outside the vocabulary is a bug, caught where made)


def test_a_spec_takes_placements_as_sharding_types_not_words() -> None:
    with pytest.raises(TypeError, match="placements is a set of sharding types"):
        SolverSpec("x", "m", "C", "heuristic", "d", "table-wise")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown sideways"):
        SolverSpec("x", "m", "C", "heuristic", "d", frozenset({"table_wise", "sideways"}))
    with pytest.raises(TypeError, match="not constraint kinds"):
        SolverSpec("x", "m", "C", "heuristic", "d", frozenset({"table_wise"}), constraints=frozenset({"gravity"}))
    for s in specs():
        assert s.placements <= set(SHARDING_TYPES) and s.places("table_wise"), s.name


def test_plan_equality_compares_the_deterministic_solvers() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "plan_equality.py"
    spec = importlib.util.spec_from_file_location("plan_equality", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    assert set(mod.SOLVERS) == {s.name for s in specs() if s.deterministic}
    # (cpsat's and milp_highs' defaults are work budgets; CBC's stops on a wall clock)
    assert {"neuroshard", "cpsat", "milp_highs"} <= set(mod.SOLVERS) and "milp" not in set(mod.SOLVERS)


def test_accepts_says_why_an_instance_is_refused() -> None:
    big = make_instance(13, 2, seed=0)
    why = spec_of("milp_exact_neural").accepts(big)
    assert why is not None and "at most 12 tables" in why and "13 tables" in why
    assert spec_of("milp_exact_neural").accepts(make_instance(6, 2, seed=0)) is None
    with pytest.raises(NotAccepted, match="13 tables"):
        check_accepts("milp_exact_neural", big)
    from solvers.exact.neural_head import EXACT_NEURAL_MAX_DEVICES, EXACT_NEURAL_MAX_TABLES

    spec = spec_of("milp_exact_neural")
    assert (spec.max_tables, spec.max_devices) == (EXACT_NEURAL_MAX_TABLES, EXACT_NEURAL_MAX_DEVICES)  # (the solver's own check)


def _three_levels() -> dict:
    doc = json.loads(make_instance(8, 8, seed=0).model_dump_json())
    doc["topology"].update(devices_per_host=2, levels=[
        {"name": "host", "devices": 2, "bandwidth": 4e11}, {"name": "nvlink_domain", "devices": 4, "bandwidth": 2e11},
        {"name": "network", "devices": 8, "bandwidth": 2.5e10}])
    return doc


def test_torchrec_refuses_three_levels_through_its_spec_before_any_solve(tmp_path) -> None:
    doc = _three_levels()
    why = spec_of("torchrec").accepts(instance_from_dict(doc))
    assert why is not None and "models two levels" in why
    assert spec_of("neuroshard").accepts(instance_from_dict(doc)) is None
    path = tmp_path / "three.json"
    path.write_text(json.dumps(doc))
    out = CliRunner().invoke(app, ["solve", str(path), "--solver", "torchrec", "--time-limit", "2", "--json"])
    assert out.exit_code == 2, out.output
    assert "models two levels" in json.loads(out.stdout)["error"]["message"]


def test_pick_is_a_portfolio_entry_of_the_measured_leaderboard() -> None:
    from shardopt.leaderboard.entries import portfolio_entry
    from shardopt.leaderboard.measured import models_for
    from shardopt.leaderboard.run import plan_tasks
    from shardopt.leaderboard.store import LeaderboardError

    entry = portfolio_entry("pick")
    assert entry is not None and entry.measured_only and "neuroshard" in entry.portfolio
    assert portfolio_entry("greedy") is None
    assert models_for("pick", ["analytic", "neural"]) == ["analytic", "neural"]
    assert models_for("size", ["analytic", "neural"]) == ["analytic"]  # (its plan does not depend on the model)
    with pytest.raises(LeaderboardError, match="'pick' measures its candidates"):
        plan_tasks("instances/examples", ["pick"], 1, "sim", "analytic", None)
