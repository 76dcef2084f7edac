"""The running solve's channel to whoever started it: progress out (the best cost so far, a bound), a stop request in.

A search that runs for minutes owes its user two things: a sign of life, and a way to stop it without losing what it
found. Both go through this leaf module rather than through every solver's signature. A solver reports an improvement
with `report(best_cost=..., bound=...)` (a no-op when nobody listens); `shardopt solve` listens and draws a live line.
Ctrl-C calls `request_stop()`: from then on every solver's Stopwatch reads as past any deadline, so each anytime
search winds down exactly as at its time limit and returns its best plan, which the result marks `interrupted`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_STOP = threading.Event()


def request_stop() -> None:
    """Ask the running search to stop now with its best plan (as if its time limit had passed)."""
    _STOP.set()


def clear_stop() -> None:
    _STOP.clear()


def stop_requested() -> bool:
    return _STOP.is_set()


@dataclass
class Progress:
    """What a listener sees: the best plan cost a solver reported so far (its own model's ms), the best bound, and
    when the listening began."""

    started: float = field(default_factory=time.perf_counter)
    best_cost: float | None = None
    bound: float | None = None

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


_LISTENER: Progress | None = None
_LOCK = threading.Lock()


def report(*, best_cost: float | None = None, bound: float | None = None) -> None:
    """A solver's improvement: a lower plan cost, a higher bound. Cheap, and nothing when nobody listens (the
    listener reads the state when it redraws)."""
    state = _LISTENER
    if state is None:
        return
    with _LOCK:
        if best_cost is not None and (state.best_cost is None or best_cost < state.best_cost):
            state.best_cost = float(best_cost)
        if bound is not None and (state.bound is None or bound > state.bound):
            state.bound = float(bound)


@contextmanager
def listening() -> Iterator[Progress]:
    """Collect the reports of the solves run inside. The stop request is cleared on entry and on exit: it belongs
    to one solve."""
    global _LISTENER
    state = Progress()
    previous = _LISTENER
    _LISTENER = state
    clear_stop()
    try:
        yield state
    finally:
        _LISTENER = previous
        clear_stop()
