"""The statistics of a measured plan cost: per-device medians, a bootstrap 95 % confidence interval of the plan cost
(max over devices), paired comparisons of plans, and the rule that says when to stop repeating.

Why a (block) bootstrap over *rounds*: the judge times every device of every plan once per round, in a shuffled order, so the
samples of one round share the machine's state at that moment (frequency, cache, neighbours' load). Resampling whole
rounds - the same resampled rounds for every device and every plan - keeps that pairing, so drift that hit all plans
alike cancels in a comparison instead of widening it. The plan cost is a max of medians, which has no closed-form
interval; the percentile bootstrap gives one without assuming a distribution.

numpy only: the tests drive it with synthetic timings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 1000
# bootstrap work is (devices x samples x rounds) medians: chunk the samples so memory stays bounded
_CHUNK_ELEMENTS = 4_000_000


@dataclass
class PlanSamples:
    """The timings of one plan: per device, one forward and one backward time (ms) per round (NaN where a device
    has no shards), plus the per-device costs that were not timed (the modelled all-to-all)."""

    fwd_ms: np.ndarray  # [devices, rounds]
    bwd_ms: np.ndarray  # [devices, rounds]
    fixed_ms: np.ndarray  # [devices]: added to every device's measured compute (e.g. modelled comm)
    busy: np.ndarray  # [devices] bool: devices that hold shards (the others cost fixed_ms only)

    @property
    def rounds(self) -> int:
        return int(self.fwd_ms.shape[1])

    def device_medians(self) -> tuple[np.ndarray, np.ndarray]:
        """Median forward and backward ms per device (0 for idle devices)."""
        if self.rounds == 0:
            z = np.zeros(len(self.busy))
            return z, z.copy()
        f = np.where(self.busy, np.nanmedian(np.where(self.busy[:, None], self.fwd_ms, 0.0), axis=1), 0.0)
        b = np.where(self.busy, np.nanmedian(np.where(self.busy[:, None], self.bwd_ms, 0.0), axis=1), 0.0)
        return f, b

    def plan_cost(self) -> float:
        f, b = self.device_medians()
        return float(np.max(f + b + self.fixed_ms))


@dataclass
class Interval:
    """An estimate with its bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    level: float = CONFIDENCE

    def __post_init__(self) -> None:
        # the bounds are percentiles of resampled statistics and the estimate the statistic of the sample, computed by
        # different arithmetic: where the resamples all agree with the sample (a constant difference, one round) they
        # differ in the last bits. An interval contains its estimate by construction.
        if not math.isnan(self.estimate):
            object.__setattr__(self, "low", min(self.low, self.estimate))
            object.__setattr__(self, "high", max(self.high, self.estimate))

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def relative_half_width(self) -> float:
        return self.half_width / abs(self.estimate) if self.estimate else math.inf

    def to_dict(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "level": self.level,
                "relative_half_width": self.relative_half_width}


def block_length(rounds: int) -> int:
    """Consecutive rounds resampled together: the machine's state drifts over seconds (on the 2-core VM a device
    switches between a fast and a slow regime ~30 % apart every few seconds), so neighbouring rounds are correlated
    and resampling them one by one would make the interval too narrow. n^(1/3) is the usual block-bootstrap rate."""
    return max(1, int(round(rounds ** (1 / 3))))


def resampled_rounds(rounds: int, samples: int, seed: int) -> np.ndarray:
    """[samples, rounds] round indices of a circular block bootstrap (blocks of `block_length` consecutive rounds,
    start points drawn with replacement): one draw shared by every device and plan, so comparisons stay paired."""
    rng = np.random.default_rng(seed)
    length = block_length(rounds)
    blocks = -(-rounds // length)
    starts = rng.integers(0, rounds, size=(samples, blocks))
    idx = (starts[:, :, None] + np.arange(length)[None, None, :]) % rounds
    return idx.reshape(samples, blocks * length)[:, :rounds]


def bootstrap_plan_costs(ps: PlanSamples, draws: np.ndarray) -> np.ndarray:
    """The plan cost (max over devices of median fwd + median bwd + fixed) under each resampling of the rounds."""
    n_samples, rounds = draws.shape
    out = np.empty(n_samples)
    busy = np.flatnonzero(ps.busy)
    idle_max = float(ps.fixed_ms[~ps.busy].max()) if (~ps.busy).any() else -math.inf
    if busy.size == 0:
        out[:] = max(idle_max, 0.0)
        return out
    fwd, bwd, fixed = ps.fwd_ms[busy], ps.bwd_ms[busy], ps.fixed_ms[busy]
    step = max(1, _CHUNK_ELEMENTS // max(1, busy.size * rounds))
    for lo in range(0, n_samples, step):
        idx = draws[lo:lo + step]  # [s, rounds]
        f = np.median(fwd[:, idx], axis=2)  # [devices, s]
        b = np.median(bwd[:, idx], axis=2)
        out[lo:lo + step] = np.maximum((f + b + fixed[:, None]).max(axis=0), idle_max)
    return out


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


def plan_cost_interval(ps: PlanSamples, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0,
                       level: float = CONFIDENCE) -> Interval:
    """The plan cost (from the medians of all rounds) and its percentile-bootstrap interval."""
    estimate = ps.plan_cost()
    if ps.rounds < 2:
        return Interval(estimate, -math.inf, math.inf, level)
    boot = bootstrap_plan_costs(ps, resampled_rounds(ps.rounds, samples, seed))
    lo, hi = _percentiles(boot, level)
    return Interval(estimate, lo, hi, level)


@dataclass
class Comparison:
    """Plan `other` against the `reference` plan: how much faster (+) or slower (-) it is, in % of the reference's
    cost, with a paired bootstrap interval; indistinguishable when the interval holds 0."""

    reference: str
    other: str
    faster_pct: Interval

    @property
    def verdict(self) -> str:
        iv = self.faster_pct
        if iv.low <= 0.0 <= iv.high or not math.isfinite(iv.low) or not math.isfinite(iv.high):
            return "indistinguishable"
        return "faster" if iv.estimate > 0 else "slower"

    def sentence(self) -> str:
        iv = self.faster_pct
        # a deterministic judge (sim) has no spread to give an interval of: its difference is exact
        ci = "(exact: a deterministic judge)" if iv.low == iv.high else f"(95 % CI [{iv.low:+.1f}, {iv.high:+.1f}] %)"
        if self.verdict == "indistinguishable":
            return f"{self.other} vs {self.reference}: indistinguishable, {iv.estimate:+.1f} % {ci}"
        word = "faster" if iv.estimate > 0 else "slower"
        return f"{self.other} is {abs(iv.estimate):.1f} % {word} than {self.reference} {ci}"

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "other": self.other, "verdict": self.verdict,
                "faster_pct": self.faster_pct.to_dict(), "sentence": self.sentence()}


def compare_paired(reference: PlanSamples, other: PlanSamples, *, names: tuple[str, str] = ("A", "B"),
                   samples: int = BOOTSTRAP_SAMPLES, seed: int = 0, level: float = CONFIDENCE) -> Comparison:
    """Paired comparison: both plans' costs under the *same* resampled rounds, the % difference per resample."""
    if reference.rounds != other.rounds:
        raise ValueError(f"paired comparison needs the same rounds: {reference.rounds} vs {other.rounds}")
    ref_cost, other_cost = reference.plan_cost(), other.plan_cost()
    estimate = 100.0 * (ref_cost - other_cost) / ref_cost if ref_cost else 0.0
    if reference.rounds < 2:
        return Comparison(names[0], names[1], Interval(estimate, -math.inf, math.inf, level))
    draws = resampled_rounds(reference.rounds, samples, seed)
    a = bootstrap_plan_costs(reference, draws)
    b = bootstrap_plan_costs(other, draws)
    diff = 100.0 * (a - b) / np.where(a > 0, a, 1.0)
    lo, hi = _percentiles(diff, level)
    return Comparison(names[0], names[1], Interval(estimate, lo, hi, level))


@dataclass(frozen=True)
class StopRule:
    """When to stop repeating: a fixed count (`fixed`), or - `repeats auto` - once every plan's interval is within
    `target` (relative half-width) and at least `min_rounds` are in, or at `max_rounds`, or after `time_cap_s`."""

    fixed: int | None = None
    target: float = 0.02
    min_rounds: int = 10
    max_rounds: int = 200
    time_cap_s: float = 120.0
    min_time_s: float = 3.0  # never declare convergence sooner: a measurement must span the machine's slow drift

    def __post_init__(self) -> None:
        if self.fixed is not None and self.fixed < 1:
            raise ValueError(f"repeats: {self.fixed} must be >= 1")
        if not (0 < self.target < 1):
            raise ValueError(f"target: {self.target} must be a fraction in (0, 1), e.g. 0.02 for 2 %")
        if self.min_time_s < 0:
            raise ValueError(f"min time: {self.min_time_s} s must be >= 0")
        if self.min_rounds < 2 or self.max_rounds < self.min_rounds:
            raise ValueError(f"rounds: min {self.min_rounds} must be >= 2 and <= max {self.max_rounds}")
        if not self.time_cap_s > 0:
            raise ValueError(f"time cap: {self.time_cap_s} s must be > 0")

    @property
    def auto(self) -> bool:
        return self.fixed is None

    def describe(self) -> str:
        if self.fixed is not None:
            return f"{self.fixed} rounds"
        return (f"auto: until the 95 % CI half-width is under {100 * self.target:g} % of the plan cost "
                f"({self.min_rounds}-{self.max_rounds} rounds, {self.min_time_s:g}-{self.time_cap_s:g} s)")

    def key(self) -> str:
        return (str(self.fixed) if self.fixed is not None
                else f"auto:{self.target}:{self.min_rounds}:{self.max_rounds}:{self.min_time_s}:{self.time_cap_s}")

    def decide(self, rounds: int, elapsed_s: float, intervals: list[Interval] | None) -> str | None:
        """None to go on; otherwise why the measurement stops ("repeats", "converged", "max rounds", "time cap")."""
        if self.fixed is not None:
            return "repeats" if rounds >= self.fixed else None
        if rounds >= self.max_rounds:
            return "max rounds"
        if rounds >= self.min_rounds and elapsed_s >= self.min_time_s and intervals is not None and all(
                iv.relative_half_width <= self.target for iv in intervals):
            return "converged"
        if elapsed_s >= self.time_cap_s and rounds >= 2:
            return "time cap"
        return None


@dataclass
class StopRecord:
    """What the stopping rule saw at the end."""

    reason: str
    rounds: int
    elapsed_s: float
    relative_half_widths: list[float] = field(default_factory=list)
