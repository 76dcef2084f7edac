"""CBC through PuLP: the one place that reads PuLP's statuses and CBC's log.

A caller hands a `SparseModel` and gets a `MilpResult`, as from HiGHS (solvers.milp.highs). CBC differs in two ways
a caller never sees: it takes a starting solution (its mipstart), and it reports its dual bound only in its log,
which is written to a temporary directory of its own and read back."""

from __future__ import annotations

import math
import re
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from solvers.milp.highs import MilpResult
from solvers.milp.model import SparseModel
from solvers.status import SolveStatus, StatusMap, StopReason

# what a CBC run came to, as `_solve` reads it from PuLP's statuses and CBC's own "Result - ..." line
CBC_STATUS = StatusMap("CBC", {
    "optimal": (SolveStatus.optimal, StopReason.proven),  # PuLP's LpSolutionOptimal and CBC's line "Optimal solution found"
    "stopped": (SolveStatus.feasible, StopReason.time_limit),  # its time limit (in whole seconds) ended it
    "infeasible": (SolveStatus.infeasible, StopReason.proven),
    "failed": (SolveStatus.no_solution, StopReason.error),  # CBC died (PuLP's PulpSolverError)
})

_CBC_RESULT = re.compile(r"Result - (.+)")
_CBC_BOUND = re.compile(r"Lower bound:\s+(-?[\d.eE+-]+)")


def solve_milp_cbc(model: SparseModel, c: np.ndarray, *, time_limit: float, integrality: np.ndarray, lb: np.ndarray, ub: np.ndarray,
                   start: np.ndarray | None = None, seed: int = 0, threads: int = 1, names: Sequence[str] | None = None) -> MilpResult:
    """Minimise c x over the model with CBC. `integrality`, `lb`, `ub`: per variable (an integer variable with bounds
    0..1 is a binary); `start`: a value per variable as CBC's mipstart (rounded for the integer ones, clipped to the
    bounds); `names`: the variables' names (CBC orders columns by them, so a caller that wants the same search every
    time keeps them). CBC's time limit is in whole seconds: under one second it does not start (stopped by
    the time limit, no point). The status is `optimal` only when CBC proved it (`CBC_STATUS`); the dual bound is the one its log reports."""
    if time_limit < 1.0:
        return _cbc_result("stopped", None, None, None, "under 1 s left", -1)
    with warnings.catch_warnings():  # PuLP 3.3 announces its 4.0 API on every variable
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve(model, c, time_limit, integrality, lb, ub, start, seed, threads, names)


def _solve(model: SparseModel, c: np.ndarray, time_limit: float, integrality: np.ndarray, lb: np.ndarray, ub: np.ndarray,
           start: np.ndarray | None, seed: int, threads: int, names: Sequence[str] | None) -> MilpResult:
    import pulp

    t0 = time.perf_counter()
    problem, variables = _pulp_model(model, c, integrality, lb, ub, names)
    if start is not None:
        for j, (var, val) in enumerate(zip(variables, start)):
            val = min(max(float(val), lb[j]), ub[j])  # (float noise must not put a start value out of bounds)
            var.setInitialValue(float(round(val)) if var.cat != pulp.LpContinuous else val)
    time_limit -= time.perf_counter() - t0
    if time_limit < 1.0:
        return _cbc_result("stopped", None, None, None, "under 1 s left", -1)
    with tempfile.TemporaryDirectory(prefix="shardopt-cbc-") as tmp:
        log = Path(tmp) / "cbc.log"
        cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, int(math.floor(time_limit))), threads=max(1, int(threads)),
                                warmStart=start is not None, logPath=str(log), gapRel=0.0, keepFiles=False,
                                options=[f"randomCbcSeed {int(seed) % (2**31 - 1) + 1}"])
        try:
            problem.solve(cmd)
        except pulp.PulpSolverError as exc:  # CBC died: this solve found nothing
            return _cbc_result("failed", None, None, None, f"CBC failed: {str(exc)[:300]}", -1)
        text = log.read_text() if log.exists() else ""
    result = _CBC_RESULT.findall(text)
    line = result[-1].strip() if result else ""
    bound_m = _CBC_BOUND.findall(text)
    bound = float(bound_m[-1]) if bound_m else None
    message = f"{line or 'no result line'} (PuLP: {pulp.LpStatus.get(problem.status)})"
    if problem.status == pulp.LpStatusInfeasible or "infeasible" in line.lower():
        return _cbc_result("infeasible", None, None, None, message, int(problem.status))
    if problem.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return _cbc_result("stopped", None, None, bound, message, int(problem.status))
    x = np.array([v.varValue if v.varValue is not None else 0.0 for v in variables])
    proven = problem.sol_status == pulp.LpSolutionOptimal and line.startswith("Optimal")
    return _cbc_result("optimal" if proven else "stopped", x, float(np.dot(c, x)), bound, message, int(problem.status))


def _cbc_result(reading: str, x: np.ndarray | None, objective: float | None, bound: float | None, message: str, code: int) -> MilpResult:
    out = CBC_STATUS.read(reading, x is not None)
    return MilpResult(out.status, out.stopped, x, objective, bound, message, code)


def _pulp_model(model: SparseModel, c: np.ndarray, integrality: np.ndarray, lb: np.ndarray, ub: np.ndarray,
                names: Sequence[str] | None) -> tuple[Any, list[Any]]:
    """The model as a PuLP problem: (the problem, its variables in column order)."""
    import pulp

    variables = []
    for j in range(model.n_vars):
        lo = None if not np.isfinite(lb[j]) else float(lb[j])
        hi = None if not np.isfinite(ub[j]) else float(ub[j])
        name = names[j] if names is not None else f"v{j}"
        if integrality[j] and lo == 0.0 and hi == 1.0:
            variables.append(pulp.LpVariable(name, cat=pulp.LpBinary))
        else:
            variables.append(pulp.LpVariable(name, lowBound=lo, upBound=hi, cat=pulp.LpInteger if integrality[j] else pulp.LpContinuous))
    problem = pulp.LpProblem("shardopt", pulp.LpMinimize)
    problem += pulp.LpAffineExpression([(variables[j], float(c[j])) for j in np.flatnonzero(c)])
    r_cols: list[list[tuple[int, float]]] = [[] for _ in range(len(model.row_lo))]
    for r, col, v in zip(model.rows, model.cols, model.vals):
        r_cols[r].append((col, v))
    for r, terms in enumerate(r_cols):
        expr = pulp.LpAffineExpression([(variables[col], v) for col, v in terms])
        lo, hi = model.row_lo[r], model.row_hi[r]
        if lo == hi:
            problem += expr == lo, f"r{r}"
        else:
            if np.isfinite(lo):
                problem += expr >= lo, f"r{r}_lo"
            if np.isfinite(hi):
                problem += expr <= hi, f"r{r}_hi"
    return problem, variables
