"""Around one `shardopt solve`: a live line while the search runs, and Ctrl-C that keeps the best plan.

A search can run for minutes (NeuroShard's default budget on a production instance, CP-SAT's). On a terminal the user
sees a line on stderr - elapsed time, the best cost a solver reported so far, the best bound - redrawn a few times a
second and gone when the solve ends; piped or with --json nothing is drawn. The first Ctrl-C asks the search to stop
(solvers.progress.request_stop): it winds down as at its time limit and returns its best plan, which `solve` prints,
saves with --out marked `interrupted`, and then exits 130. A second Ctrl-C aborts at once.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from solvers.progress import Progress, listening, request_stop

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command Ctrl-C ended


class _Line:
    """The live line, computed each time Rich redraws it (the elapsed time moves between reports)."""

    def __init__(self, state: Progress, what: str) -> None:
        self.state, self.what = state, what
        self.stopping = False

    def __rich__(self) -> Text:
        s = self.state
        parts = [f"{self.what}: {s.elapsed:.1f} s"]
        if s.best_cost is not None:
            parts.append(f"best {s.best_cost:.3f} ms")
        if s.bound is not None:
            parts.append(f"bound {s.bound:.3f} ms")
        parts.append("stopping with the best plan so far (Ctrl-C again to abort)" if self.stopping else "Ctrl-C stops with the best plan so far")
        return Text(" · ".join(parts), style="dim")


@contextmanager
def live_solve(what: str, *, quiet: bool) -> Iterator[Progress]:
    """Run one solve inside: its progress reports collected (yielded), drawn on a terminal unless `quiet`, and the
    first Ctrl-C turned into a stop request (the second raises KeyboardInterrupt)."""
    console = Console(stderr=True)
    with listening() as state:
        line = _Line(state, what)
        presses = {"n": 0}

        def on_sigint(signum: int, frame: Any) -> None:
            presses["n"] += 1
            if presses["n"] > 1:
                raise KeyboardInterrupt
            line.stopping = True
            request_stop()
            if not draw:
                print("stopping: the search returns its best plan so far (Ctrl-C again to abort)", file=sys.stderr, flush=True)

        draw = not quiet and console.is_terminal
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, on_sigint) if main else None
        try:
            if draw:
                with Live(line, console=console, refresh_per_second=4, transient=True):
                    yield state
            else:
                yield state
        finally:
            if main:  # (a handler not set from Python reads as None: Python's own is then put back)
                signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
