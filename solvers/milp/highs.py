"""HiGHS through scipy (`scipy.optimize.milp`, `linprog(method="highs")`): the one place that reads its status codes.

A caller gets a `MilpResult`: what HiGHS found (its status read through `HIGHS_STATUS` onto solvers.status), the
point, the objective and, for a MILP, the dual bound where HiGHS reports a finite one. Why one adapter: five call
sites each read scipy's integer codes by hand, and a code read differently in one of them is a bound or a plan read
wrongly."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from solvers.milp.model import SparseModel
from solvers.status import SolveStatus, StatusMap, StopReason

# scipy's codes, the same for milp and linprog's HiGHS methods: 0 optimal, 1 a limit (time, iterations, nodes),
# 2 infeasible, 3 unbounded; anything else is numerical trouble
HIGHS_STATUS = StatusMap("HiGHS", {
    0: (SolveStatus.optimal, StopReason.proven),
    1: (SolveStatus.feasible, StopReason.time_limit),
    2: (SolveStatus.infeasible, StopReason.proven),
    3: (SolveStatus.no_solution, StopReason.error),  # (every model here is bounded below: an unbounded one is a bug)
})
# highspy's HighsModelStatus, by member name
HIGHSPY_STATUS = StatusMap("HiGHS (highspy)", {
    "kOptimal": (SolveStatus.optimal, StopReason.proven),
    "kInfeasible": (SolveStatus.infeasible, StopReason.proven),
    "kUnbounded": (SolveStatus.no_solution, StopReason.error),
    "kUnboundedOrInfeasible": (SolveStatus.no_solution, StopReason.error),
    **{name: (SolveStatus.feasible, StopReason.time_limit)
       for name in ("kTimeLimit", "kIterationLimit", "kSolutionLimit", "kMemoryLimit", "kInterrupt", "kHighsInterrupt",
                    "kObjectiveBound", "kObjectiveTarget")},
})


@dataclass(frozen=True)
class MilpResult:
    """What HiGHS (or CBC, solvers.milp.cbc) found: `status` / `stopped` in the one vocabulary (solvers.status; a limit
    with a point is `feasible`, without one `no_solution`), the point where there is one, its objective and the dual
    bound."""

    status: SolveStatus
    stopped: StopReason
    x: np.ndarray | None
    objective: float | None
    dual_bound: float | None  # a MILP's dual bound where HiGHS reports a finite one
    message: str
    code: int  # the backend's status code, for the record
    nodes: int = 0  # branch-and-bound nodes HiGHS explored (a MILP's; 0 for an LP)

    @property
    def has_point(self) -> bool:
        return self.x is not None


def _result(res: Any, node_limit: int | None = None) -> MilpResult:
    code = int(res.status)
    dual = getattr(res, "mip_dual_bound", None)
    dual = float(dual) if dual is not None and math.isfinite(dual) else None
    objective = float(res.fun) if getattr(res, "fun", None) is not None and res.x is not None else None
    nodes = int(getattr(res, "mip_node_count", 0) or 0)
    if node_limit is not None and (_node_limit_reached(code, str(res.message)) or (code == 1 and nodes >= node_limit)):
        # the node limit, a deterministic budget, ended it
        status = SolveStatus.feasible if res.x is not None else SolveStatus.no_solution
        return MilpResult(status, StopReason.work_budget, res.x, objective, dual, str(res.message), code, nodes)
    out = HIGHS_STATUS.read(code, res.x is not None)
    return MilpResult(out.status, out.stopped, res.x, objective, dual, str(res.message), code, nodes)


def _node_limit_reached(code: int, message: str) -> bool:
    """Whether HiGHS stopped at its node limit: its model status for that is kSolutionLimit ("Solution limit
    reached"), which scipy 1.17 does not know and reports as code 4, "The HiGHS status code was not recognized"."""
    return code == 4 and "Solution limit reached" in message


def solve_milp(model: SparseModel, c: np.ndarray, *, time_limit: float, integrality: np.ndarray | bool = True,
               lb: np.ndarray | None = None, ub: np.ndarray | None = None, mip_rel_gap: float | None = None,
               presolve: bool | None = None, node_limit: int | None = None) -> MilpResult:
    """Minimise c x over the model. `integrality`: True for the model's own, False for its LP relaxation, or an
    array; `lb` / `ub` replace the model's variable bounds (a point fixed, the caller's bounds)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    if integrality is True:
        integ = np.array(model.integer)
    elif integrality is False:
        integ = None
    else:
        integ = integrality
    options: dict[str, Any] = {"time_limit": float(time_limit), "disp": False}
    if mip_rel_gap is not None:
        options["mip_rel_gap"] = mip_rel_gap
    if presolve is not None:
        options["presolve"] = presolve
    if node_limit is not None:  # (a deterministic stop: the same answer on any machine, where the time limit is not hit)
        options["node_limit"] = int(node_limit)
    res = milp(c, integrality=integ,
               bounds=Bounds(np.array(model.lb) if lb is None else lb, np.array(model.ub) if ub is None else ub),
               constraints=LinearConstraint(model.matrix(), np.array(model.row_lo), np.array(model.row_hi)),
               options=options)
    return _result(res, node_limit)


def solve_lp(c: np.ndarray, a_ub: Any, b_ub: np.ndarray, bounds: np.ndarray) -> MilpResult:
    """Minimise c x subject to a_ub x <= b_ub within `bounds` ([n, 2]) with HiGHS (linprog's form)."""
    from scipy.optimize import linprog

    return _result(linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs"))


def solve_model_lp_ipm(model: SparseModel, c: np.ndarray, *, time_limit: float) -> MilpResult:
    """Minimise c x over the model's LP relaxation with HiGHS's interior-point method (linprog's `highs-ipm`, which
    ends in a crossover to a basic optimum). Why beside `solve_milp`: scipy's `milp` always takes the simplex, and on
    the certified bound's largest LPs the interior point is several times faster."""
    from scipy.optimize import linprog
    from scipy.sparse import vstack

    a = model.matrix().tocsr()
    lo, hi = np.array(model.row_lo), np.array(model.row_hi)
    eq = lo == hi
    upper, lower = np.isfinite(hi) & ~eq, np.isfinite(lo) & ~eq
    a_ub = vstack([a[upper], -a[lower]]).tocsr()
    b_ub = np.concatenate([hi[upper], -lo[lower]])
    bounds = [(lb if math.isfinite(lb) else None, ub if math.isfinite(ub) else None) for lb, ub in zip(model.lb, model.ub)]
    res = linprog(c, A_ub=a_ub if a_ub.shape[0] else None, b_ub=b_ub if a_ub.shape[0] else None,
                  A_eq=a[eq] if eq.any() else None, b_eq=lo[eq] if eq.any() else None,
                  bounds=bounds, method="highs-ipm", options={"time_limit": float(time_limit), "disp": False})
    return _result(res)


def solve_milp_with_dual(model: SparseModel, c: np.ndarray, *, time_limit: float, lb: np.ndarray | None = None,
                         ub: np.ndarray | None = None, mip_rel_gap: float | None = None, stop_at_dual: float | None = None) -> MilpResult:
    """`solve_milp` through highspy, HiGHS's own Python interface: the same solver, and its dual bound also where it
    found no integer point in time, which scipy's `milp` leaves out (the certified bound's per-class MILPs often
    end so: without it a class falls back to its LP bound; docs/analytic-bound.md). `stop_at_dual`: HiGHS stops (status
    `limit`) once its dual bound reaches this value, where a caller needs no more of this model. Without highspy
    installed, scipy's (which ignores `stop_at_dual`)."""
    try:
        import highspy
    except ImportError:  # (a dependency of the package; a bare environment still gets an answer)
        return solve_milp(model, c, time_limit=time_limit, lb=lb, ub=ub, mip_rel_gap=mip_rel_gap)
    a = model.matrix().tocsc()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = model.n_vars, model.n_rows
    lp.col_cost_ = np.asarray(c, dtype=float)
    lp.col_lower_ = np.array(model.lb if lb is None else lb, dtype=float)
    lp.col_upper_ = np.array(model.ub if ub is None else ub, dtype=float)
    lp.row_lower_, lp.row_upper_ = np.array(model.row_lo, dtype=float), np.array(model.row_hi, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = a.indptr, a.indices, a.data
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = model.n_vars, model.n_rows
    lp.integrality_ = [highspy.HighsVarType.kInteger if k else highspy.HighsVarType.kContinuous for k in model.integer]
    # (the core class: highspy's Python wrapper prints HiGHS's banner on stdout, into a --json document)
    h = getattr(getattr(highspy, "_core", None), "_Highs", highspy.Highs)()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(max(time_limit, 0.05)))
    if mip_rel_gap is not None:
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.passModel(lp)
    if stop_at_dual is not None:
        def interrupt(_type: Any, _message: str, out: Any, into: Any, _data: Any) -> None:
            if into is not None and out.mip_dual_bound >= stop_at_dual:
                into.user_interrupt = True

        h.setCallback(interrupt, None)
        h.startCallback(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    text = f"{h.modelStatusToString(status)} (highspy {h.version()})"
    dual = float(info.mip_dual_bound) if math.isfinite(info.mip_dual_bound) else None
    x = np.array(h.getSolution().col_value) if info.primal_solution_status == 2 else None  # 2: a feasible point
    objective = float(info.objective_function_value) if x is not None else None
    name = getattr(status, "name", str(status))
    if name in ("kInfeasible", "kUnbounded", "kUnboundedOrInfeasible"):  # (no point, nor a bound, to read)
        x, objective, dual = None, None, None
    out = HIGHSPY_STATUS.read(name, x is not None)
    return MilpResult(out.status, out.stopped, x, objective, dual, text, int(getattr(status, "value", -1)),
                      max(0, int(info.mip_node_count)))
