"""Work budgets: a solve's time measured in the cost-model work it has done, not in seconds of the machine it ran on.

Why: a search that stops on a wall clock returns a different plan on a faster, slower or busier machine, and even on
one machine twice in a row (MLPerf DLRMv2 on 8 x H100 gave 1.333 and 1.414 ms from two identical default solves).
A search that stops after a fixed amount of *work* returns the same plan for the same instance and seed anywhere.

The work is counted where every search spends it: each call of a bound cost model's evaluations
(`costmodels.base.BoundCostModel`: shard states, compute, comm) charges `WORK_PER_CALL` units plus `WORK_PER_ELEMENT`
per number in the states or widths it evaluates, to the meter of the thread it runs on (`metered`). A solver's Stopwatch made
inside `metered()` reads that meter: `WORK_UNITS_PER_S` units make one "work second", a rate chosen so that on the
2-core VM the project is developed on a work second takes about a wall second (docs/results/speed.md, "Work budgets"),
so default budgets keep their meaning. A wall-clock cap (`Meter.cap_s`) stays as the safety net: when it fires the
meter says so (`Meter.cap_fired`) and the solve reports it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# fitted to neuroshard's solves of 7 instances (20 tables on 4 devices to 26 on 512 and 856 on 128) on the 2-core VM:
# 80 us a call and 8.1 ns a number, the wall time of each solve within -21 / +15 % (docs/results/speed.md, "Work budgets")
WORK_PER_CALL = 1.0  # units per cost-model evaluation call
WORK_PER_ELEMENT = 1.0e-4  # units per number in the states or widths it evaluates
WORK_UNITS_PER_S = 12_500.0  # units per work second
WALL_CAP_FACTOR = 5.0  # a work budget's wall-clock safety cap: this many times its work seconds ...
WALL_CAP_EXTRA_S = 30.0  # ... plus this many seconds

_LOCAL = threading.local()


@dataclass
class Meter:
    """The work done on one thread inside `metered`, and the wall-clock cap of the solve that opened it.

    A backend that keeps its own deterministic count (CP-SAT's deterministic time, HiGHS's simplex iterations) is
    given its share of a work budget in that count and charges back what it used (`charge_seconds`); it is given the
    time to the cap (`wall_left`) as its wall-clock limit, so that the cap stays the one safety net."""

    units: float = 0.0
    cap_s: float | None = None
    started: float = field(default_factory=lambda: time.perf_counter())  # (looked up when made, as `capped` does)
    cap_fired: bool = False

    def capped(self) -> bool:
        """Whether the wall-clock cap has passed (and, from then on, that it fired)."""
        if self.cap_s is not None and time.perf_counter() - self.started > self.cap_s:
            self.cap_fired = True
        return self.cap_fired

    def wall_left(self, floor: float = 0.05) -> float:
        """Wall seconds until the cap (at least `floor`; a large number without a cap): a backend's wall-clock limit."""
        if self.cap_s is None:
            return 1.0e6
        return max(floor, self.cap_s - (time.perf_counter() - self.started))


def work_cap_s(work_s: float) -> float:
    """The wall-clock safety cap of a solve on a budget of `work_s` work seconds."""
    return WALL_CAP_FACTOR * work_s + WALL_CAP_EXTRA_S


def current_meter() -> Meter | None:
    """The meter of this thread's open `metered` block (None outside one)."""
    return getattr(_LOCAL, "meter", None)


@contextmanager
def metered(cap_s: float | None = None) -> Iterator[Meter]:
    """Count this thread's cost-model work in a meter (a block already open keeps its own: nested solves share it)."""
    outer = current_meter()
    if outer is not None:
        yield outer
        return
    meter = Meter(cap_s=cap_s)
    _LOCAL.meter = meter
    try:
        yield meter
    finally:
        _LOCAL.meter = None


def charge(elements: int) -> None:
    """One cost-model evaluation of `elements` numbers (states or widths), on this thread's meter (if one is open)."""
    meter = getattr(_LOCAL, "meter", None)
    if meter is not None:
        meter.units += WORK_PER_CALL + WORK_PER_ELEMENT * elements


def charge_seconds(work_s: float) -> None:
    """Work a backend counted in its own deterministic units, converted by the caller to work seconds."""
    meter = getattr(_LOCAL, "meter", None)
    if meter is not None and work_s > 0:
        meter.units += work_s * WORK_UNITS_PER_S
