"""Interleaved measurement: every device of every plan timed once per round, in a shuffled order, round after round,
until the stopping rule is met - so that plans can be ranked on a real kernel.

Timing one device's repeats back to back, then the next device's, then the next plan's, lets a drift of the machine
(frequency, a neighbour's load, the page cache) land on one device or one plan and decide the ranking. Here each
round visits all (plan, device) kernels once in a fresh seeded order; the statistics (shardopt.measure.confidence)
then resample whole rounds, so what hit one round hit every plan in it.

On the CPU the timing thread is pinned to one core (the last one this process may use, away from core 0 where the
system's interrupts land by default) and torch runs one intra-op thread, unless more threads are asked for; the
machine's load average before and after is recorded with the result.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from shardopt.measure.confidence import Interval, PlanSamples, StopRecord, StopRule, plan_cost_interval

# how much of the machine's available memory the kernels of one measurement may take
MEMORY_SHARE = 0.6


class TimedUnit(Protocol):
    """One device's kernel, ready to time (shardopt.measure.backends.timing.PreparedKernel, or a synthetic one)."""

    label: str
    hardware: str

    def warm(self, passes: int) -> None: ...

    def run_once(self) -> tuple[float, float]: ...


@dataclass
class MachineState:
    """Where and under what load a measurement ran: recorded with every measured result."""

    host: str
    processor: str
    cores: int
    pinned_cpus: list[int] | None
    threads: int
    load_avg_before: list[float]
    load_avg_after: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        pin = f"pinned to CPU {','.join(map(str, self.pinned_cpus))}" if self.pinned_cpus else "not pinned"
        after = f" -> {self.load_avg_after[0]:.2f}" if self.load_avg_after else ""
        return (f"{self.threads} thread(s), {pin}; load average {self.load_avg_before[0]:.2f}{after} "
                f"on {self.cores} cores")


def _load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        return []


class pinned_cpu:
    """Pins this process to `threads` cores (the highest-numbered ones it may use) for a block, then restores its
    affinity. A no-op where the OS has no affinity call (`pinned` stays None)."""

    def __init__(self, threads: int = 1, enabled: bool = True):
        self.threads = threads
        self.enabled = enabled
        self.pinned: list[int] | None = None
        self._before: set[int] | None = None

    def __enter__(self) -> pinned_cpu:
        if not self.enabled or not hasattr(os, "sched_setaffinity"):
            return self
        try:
            self._before = set(os.sched_getaffinity(0))
            chosen = sorted(self._before)[-self.threads:]
            os.sched_setaffinity(0, set(chosen))
            self.pinned = chosen
        except OSError:  # pragma: no cover - a container may forbid it
            self._before = None
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._before is not None:
            try:
                os.sched_setaffinity(0, self._before)
            except OSError:  # pragma: no cover
                pass
        return False


def machine_state(pinned: list[int] | None, threads: int) -> MachineState:
    return MachineState(host=platform.node(), processor=platform.processor() or platform.machine(),
                        cores=os.cpu_count() or 1, pinned_cpus=pinned, threads=threads,
                        load_avg_before=_load_average())


@dataclass
class Measurement:
    """The result of an interleaved measurement of several plans (one entry per plan, in the order given)."""

    samples: list[PlanSamples]
    intervals: list[Interval]
    stop: StopRecord
    machine: MachineState | None
    labels: list[list[str | None]]  # per plan, per device: the kernel that ran (None: idle device)
    hardware: str

    def device_samples(self, plan: int, device: int) -> tuple[list[float], list[float]]:
        ps = self.samples[plan]
        return ps.fwd_ms[device].tolist(), ps.bwd_ms[device].tolist()


def available_memory_bytes() -> int | None:
    """Memory the OS can give now (Linux: MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def measure_interleaved(
    units: Sequence[Sequence[TimedUnit | None]],
    fixed_ms: Sequence[np.ndarray],
    rule: StopRule,
    *,
    warmup: int = 3,
    seed: int = 0,
    machine: MachineState | None = None,
    progress: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Time every (plan, device) unit once per round, in a seeded shuffled order, until `rule` says stop.

    `units[p][d]` is plan p's kernel on device d (None for an idle device); `fixed_ms[p][d]` is added to each
    device's measured compute (the modelled all-to-all). `progress(round, max_rounds)` is called after each round.
    """
    if len(units) != len(fixed_ms):
        raise ValueError(f"{len(units)} plans but {len(fixed_ms)} fixed-cost rows")
    order = [(p, d) for p, plan_units in enumerate(units) for d, u in enumerate(plan_units) if u is not None]
    for p, d in order:
        units[p][d].warm(warmup)
    rng = np.random.default_rng([seed, 7])
    fwd: dict[tuple[int, int], list[float]] = {k: [] for k in order}
    bwd: dict[tuple[int, int], list[float]] = {k: [] for k in order}
    start = clock()
    rounds = 0
    intervals: list[Interval] | None = None
    total = rule.fixed if rule.fixed is not None else rule.max_rounds
    while True:
        for i in rng.permutation(len(order)):
            p, d = order[i]
            f, b = units[p][d].run_once()
            fwd[p, d].append(f * 1e3)
            bwd[p, d].append(b * 1e3)
        rounds += 1
        samples = _plan_samples(units, fixed_ms, fwd, bwd, rounds)
        if rule.auto and rounds >= rule.min_rounds:
            intervals = [plan_cost_interval(ps, seed=seed) for ps in samples]
        if progress is not None:
            progress(rounds, total)
        reason = rule.decide(rounds, clock() - start, intervals)
        if reason is not None:
            break
    if intervals is None:
        intervals = [plan_cost_interval(ps, seed=seed) for ps in samples]
    stop = StopRecord(reason=reason, rounds=rounds, elapsed_s=round(clock() - start, 3),
                      relative_half_widths=[iv.relative_half_width for iv in intervals])
    if machine is not None:
        machine.load_avg_after = _load_average()
    labels = [[u.label if u is not None else None for u in plan_units] for plan_units in units]
    hardware = next((units[p][d].hardware for p, d in order), "")
    return Measurement(samples, intervals, stop, machine, labels, hardware)


def _plan_samples(units: Sequence[Sequence[TimedUnit | None]], fixed_ms: Sequence[np.ndarray],
                  fwd: dict[tuple[int, int], list[float]], bwd: dict[tuple[int, int], list[float]],
                  rounds: int) -> list[PlanSamples]:
    out = []
    for p, plan_units in enumerate(units):
        n = len(plan_units)
        f = np.zeros((n, rounds))
        b = np.zeros((n, rounds))
        busy = np.array([u is not None for u in plan_units], dtype=bool)
        for d in np.flatnonzero(busy):
            f[d] = fwd[p, int(d)]
            b[d] = bwd[p, int(d)]
        out.append(PlanSamples(f, b, np.asarray(fixed_ms[p], dtype=np.float64), busy))
    return out
