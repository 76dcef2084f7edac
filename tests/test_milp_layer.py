"""The MILP layer (solvers.milp): one sparse model and one HiGHS adapter whose statuses every caller reads the same way."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.milp import SparseModel, solve_lp, solve_milp, solve_milp_with_dual, solve_model_lp_ipm
from solvers.status import SolveStatus, StopReason


def knapsack() -> tuple[SparseModel, np.ndarray]:
    """max 5a + 4b + 3c s.t. 2a + 3b + c <= 5, a, b, c binary (as a minimisation): optimum a = b = 1, value -9."""
    m = SparseModel()
    xs = [m.var(0, 1, integer=True) for _ in range(3)]
    m.row({xs[0]: 2, xs[1]: 3, xs[2]: 1}, -np.inf, 5)
    return m, -np.array([5.0, 4.0, 3.0])


def test_an_integer_optimum_and_its_relaxation() -> None:
    m, c = knapsack()
    res = solve_milp(m, c, time_limit=10)
    assert res.status is SolveStatus.optimal and res.objective == pytest.approx(-9.0)
    assert np.allclose(res.x, [1, 1, 0]) and res.dual_bound == pytest.approx(-9.0)
    lp = solve_milp(m, c, time_limit=10, integrality=False)
    assert lp.status is SolveStatus.optimal and lp.objective <= res.objective  # the relaxation bounds the MILP


def test_fixed_bounds_and_array_rows() -> None:
    m, c = knapsack()
    first = m.reserve(1)  # a fourth variable, bounds set by the caller below
    m.add(np.array([first, 0]), np.array([1.0, -1.0]), 0.0, 0.0)  # x3 = a
    res = solve_milp(m, np.append(c, 0.0), time_limit=10, lb=np.zeros(4), ub=np.array([0, 1, 1, 1]))  # a fixed to 0
    assert res.status is SolveStatus.optimal and res.objective == pytest.approx(-7.0) and res.x[first] == pytest.approx(0.0)


def test_infeasible_and_unbounded_are_named() -> None:
    m = SparseModel()
    x = m.var(0, 1)
    m.row({x: 1.0}, 2.0, np.inf)  # x >= 2 with x <= 1
    res = solve_milp(m, np.array([1.0]), time_limit=10)
    assert res.status is SolveStatus.infeasible and res.x is None and res.objective is None
    free = SparseModel()
    y = free.var(-np.inf, np.inf)
    free.row({y: 1.0}, -np.inf, 0.0)
    assert solve_milp(free, np.array([1.0]), time_limit=10, integrality=False).stopped is StopReason.error


def test_the_lp_form() -> None:
    res = solve_lp(np.array([1.0, 1.0]), np.array([[-1.0, -2.0]]), np.array([-4.0]), np.array([[0, 10], [0, 10]]))
    assert res.status is SolveStatus.optimal and res.objective == pytest.approx(2.0) and res.code == 0


def test_the_interior_point_gives_the_simplex_optimum() -> None:
    """`solve_model_lp_ipm` reads the model's ranged, equality and one-sided rows and its bounds as `solve_milp` does:
    the same LP optimum on a model with each kind, and infeasibility named."""
    rng = np.random.default_rng(5)
    m = SparseModel()
    xs = [m.var(0, 4) for _ in range(6)] + [m.var(-np.inf, np.inf)]
    for _ in range(8):
        cols = rng.choice(6, size=3, replace=False)
        m.row({int(j): float(rng.uniform(0.5, 2.0)) for j in cols}, float(rng.uniform(0, 0.2)), float(rng.uniform(3, 6)))
    m.row({xs[0]: 1.0, xs[1]: 1.0}, 1.0, 1.0)  # an equality
    m.row({xs[6]: 1.0, xs[2]: -1.0, xs[3]: -2.0}, 0.0, np.inf)  # a free variable above a sum
    c = np.append(-rng.uniform(0.5, 1.5, size=6), 1.0)
    simplex = solve_milp(m, c, time_limit=10, integrality=False)
    ipm = solve_model_lp_ipm(m, c, time_limit=10)
    assert simplex.status is ipm.status is SolveStatus.optimal and ipm.objective == pytest.approx(simplex.objective, rel=1e-9, abs=1e-9)
    bad = SparseModel()
    x = bad.var(0, 1)
    bad.row({x: 1.0}, 2.0, np.inf)
    assert solve_model_lp_ipm(bad, np.array([1.0]), time_limit=10).status is SolveStatus.infeasible


def test_the_highspy_adapter_reads_as_the_scipy_one() -> None:
    """`solve_milp_with_dual` (highspy: the certified bound's MILPs, for the dual bound scipy leaves out without a
    point) gives the scipy adapter's optimum, fixed bounds and statuses on the same models."""
    m, c = knapsack()
    res = solve_milp_with_dual(m, c, time_limit=10)
    assert res.status is SolveStatus.optimal and res.objective == pytest.approx(-9.0) and res.dual_bound == pytest.approx(-9.0)
    assert np.allclose(res.x, [1, 1, 0])
    fixed = solve_milp_with_dual(m, c, time_limit=10, lb=np.zeros(3), ub=np.array([0.0, 1.0, 1.0]))
    assert fixed.status is SolveStatus.optimal and fixed.objective == pytest.approx(-7.0)
    bad = SparseModel()
    x = bad.var(0, 1, integer=True)
    bad.row({x: 1.0}, 2.0, np.inf)
    out = solve_milp_with_dual(bad, np.array([1.0]), time_limit=10)
    assert out.status is SolveStatus.infeasible and out.x is None and out.objective is None
    rng = np.random.default_rng(3)
    for _ in range(5):  # random covering MILPs: the two adapters agree on the optimum
        m = SparseModel()
        xs = [m.var(0, 3, integer=bool(k % 2)) for k in range(6)]
        for _ in range(4):
            cols = rng.choice(6, size=3, replace=False)
            m.row({xs[int(j)]: float(rng.integers(1, 5)) for j in cols}, float(rng.integers(2, 9)), np.inf)
        cost = rng.uniform(1, 3, size=6)
        a, b = solve_milp(m, cost, time_limit=10), solve_milp_with_dual(m, cost, time_limit=10)
        assert a.status is b.status is SolveStatus.optimal and b.objective == pytest.approx(a.objective, rel=2e-4)  # (HiGHS's gap)


def test_without_highspy_the_scipy_adapter_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without highspy (the GPU machine has no network to install it) still gets the MILP solved, by scipy."""
    import sys

    monkeypatch.setitem(sys.modules, "highspy", None)  # (import highspy raises ImportError)
    m, c = knapsack()
    res = solve_milp_with_dual(m, c, time_limit=10)
    assert res.status is SolveStatus.optimal and res.objective == pytest.approx(-9.0) and "highspy" not in res.message
