"""One status vocabulary for every solve, search and backend call: what the result is (`SolveStatus`) and why it
stopped (`StopReason`), plus the certified bound's own (`BoundStatus`).

Each backend (HiGHS in solvers.milp.highs, CBC in solvers.milp.cbc, CP-SAT in solvers.exact.cpsat) maps its own
statuses onto these at its boundary, through a status map (`StatusMap`) beside its adapter, as CVXPY's solver
interfaces do with their STATUS_MAP: nothing past an adapter reads a backend's codes or names. A leaf module, so that
the backends, the solvers and the CLI import one definition without importing each other (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import Enum


class SolveStatus(str, Enum):
    """What the result is. Why the search stopped is a separate field (StopReason): a plan found when the time limit
    ended the search is `feasible`, stopped by `time_limit`."""

    optimal = "optimal"  # proven optimal (of the model the solver solved)
    feasible = "feasible"  # a plan (a point), not proven optimal
    infeasible = "infeasible"  # proven: no plan exists (the reason says why)
    no_solution = "no_solution"  # no plan found; the instance is not proven infeasible

    @property
    def has_plan(self) -> bool:
        return self in (SolveStatus.optimal, SolveStatus.feasible)


class StopReason(str, Enum):
    """Why a search stopped, whatever it found."""

    time_limit = "time_limit"  # a limit ended it (time; for a backend also its iteration / memory limit): the best found by then
    converged = "converged"  # it ran its whole course (a constructive heuristic, a search that converged)
    proven = "proven"  # optimality or infeasibility was proven
    interrupted = "interrupted"  # the user stopped it (Ctrl-C): the result is the best found by then
    work_budget = "work_budget"  # its default work budget ended it (shardopt.core.work): the same plan on any machine
    wall_cap = "wall_cap"  # the wall-clock safety cap of a work budget ended it: the plan depends on the machine's speed
    error = "error"  # the backend gave up: numerical trouble, an unbounded or rejected model (its message says which)


# a stop reason in a status line: "feasible in 2.0 s, stopped by the time limit"
STOP_WORDS = {StopReason.time_limit: "stopped by the time limit", StopReason.converged: "search converged",
              StopReason.proven: "proven", StopReason.interrupted: "interrupted by the user",
              StopReason.work_budget: "stopped by its work budget", StopReason.wall_cap: "stopped by the wall-clock safety cap",
              StopReason.error: "stopped by a backend error"}


@dataclass(frozen=True)
class Outcome:
    """What one backend call came to, in the one vocabulary."""

    status: SolveStatus
    stopped: StopReason

    @property
    def has_point(self) -> bool:
        return self.status.has_plan


class StatusMap:
    """A backend's statuses onto (SolveStatus, StopReason). Each entry is what the status means when the backend
    returned a point; without one, `feasible` reads `no_solution` (a limit came before any point). A status the map
    does not know is an error, never a guess."""

    def __init__(self, backend: str, entries: Mapping[Hashable, tuple[SolveStatus, StopReason]]) -> None:
        self.backend = backend
        self._entries = dict(entries)

    def read(self, native: Hashable, has_point: bool) -> Outcome:
        status, stopped = self._entries.get(native, (SolveStatus.no_solution, StopReason.error))
        if status is SolveStatus.feasible and not has_point:
            status = SolveStatus.no_solution
        if status is SolveStatus.optimal and not has_point:  # (never reported so; read as trouble, not as a proof)
            status, stopped = SolveStatus.no_solution, StopReason.error
        return Outcome(status, stopped)

    def __contains__(self, native: Hashable) -> bool:
        return native in self._entries


class BoundStatus(str, Enum):
    """What a certified bound (solvers.bound) is."""

    optimal = "optimal"  # its relaxation was solved to the gap asked for: the value is the relaxation's dual bound
    bound = "bound"  # a limit came first: the value is the bound proven by then (the LP's, a class LP's, the table cuts')
    infeasible = "infeasible"  # the relaxation has no solution: no covered plan fits (the reason says why; value +inf)

    @property
    def proves_bound(self) -> bool:
        return self is not BoundStatus.infeasible
