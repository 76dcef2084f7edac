"""CP-SAT's parameters as the exact solvers set them, on a model that broke OR-Tools 9.15.

The tiered exact loop on bench_tiered's generator at seed 1366 built this model (its hint is a plan that satisfies
it). With default presolve, CP-SAT's inclusion presolve called it infeasible, and with `interleave_search` (our
deterministic mode) and 2 workers it aborted the whole Python process ("Check failed: heuristics.fixed_search !=
nullptr"): `shardopt solve --solver cpsat` died with a core dump. `_set_parameters` turns that presolve step off.
The solve runs in a child process, so an abort fails this test instead of killing the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODEL = Path(__file__).resolve().parent / "data" / "cpsat-inclusion-presolve.txt.gz"

SCRIPT = """
import gzip, sys
sys.path.insert(0, {root!r})
from ortools.sat.python import cp_model
from solvers.exact.cpsat import _set_parameters
model = cp_model.CpModel()
model.proto.parse_text_format(gzip.open({model!r}, "rt").read())
solver = cp_model.CpSolver()
_set_parameters(solver.parameters, 100, 5.0, 0.0, 0, 2, True, False, {params})
print(solver.status_name(solver.solve(model)))
"""


def _solve(params: dict | None = None) -> subprocess.CompletedProcess:
    code = SCRIPT.format(root=str(MODEL.parents[2]), model=str(MODEL), params=repr(params))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_model_is_feasible_its_hint_satisfies_it() -> None:
    got = _solve({"fix_variables_to_their_hinted_value": True})
    assert got.returncode == 0, got.stderr[-500:]
    assert got.stdout.split()[-1] in ("OPTIMAL", "FEASIBLE")


def test_the_deterministic_two_worker_solve_neither_aborts_nor_calls_it_infeasible() -> None:
    got = _solve()
    assert got.returncode == 0, got.stderr[-500:]  # (an abort: -6)
    assert got.stdout.split()[-1] in ("OPTIMAL", "FEASIBLE")
