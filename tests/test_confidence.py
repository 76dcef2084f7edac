"""The statistics of the measured judge, on synthetic timings: the bootstrap interval, the paired comparison, the
stopping rule, and the interleaved round loop."""

from __future__ import annotations

import numpy as np
import pytest

from shardopt.measure.confidence import PlanSamples, StopRule, compare_paired, plan_cost_interval
from shardopt.measure.interleaved import measure_interleaved


def synthetic(means: list[float], rounds: int, noise: float, seed: int, drift: np.ndarray | None = None) -> PlanSamples:
    """Per-device forward times ~ mean * (1 + noise * N(0,1)) (+ a per-round drift shared by all devices); backward
    twice the forward; no fixed cost."""
    rng = np.random.default_rng(seed)
    m = np.asarray(means)[:, None]
    f = m * (1 + noise * rng.standard_normal((len(means), rounds)))
    if drift is not None:
        f = f * drift[None, :]
    return PlanSamples(f, 2 * f, np.zeros(len(means)), np.ones(len(means), dtype=bool))


def test_interval_covers_the_true_cost_in_most_repetitions() -> None:
    """95 % nominal: over 60 synthetic measurements of a known plan the interval holds the truth most times (the
    max of medians is biased a little upward with few rounds, so not exactly 95 %)."""
    true = 3 * 10.0  # device 0: median fwd 10 + bwd 20
    hits = 0
    for seed in range(60):
        iv = plan_cost_interval(synthetic([10.0, 6.0, 4.0], 30, 0.05, seed), seed=seed)
        assert iv.low <= iv.estimate <= iv.high
        hits += iv.low <= true <= iv.high
    assert hits >= 48, hits


def test_interval_narrows_with_more_rounds() -> None:
    few = plan_cost_interval(synthetic([10.0, 9.0], 8, 0.1, 1))
    many = plan_cost_interval(synthetic([10.0, 9.0], 200, 0.1, 1))
    assert many.relative_half_width < few.relative_half_width / 2


def test_idle_devices_cost_their_fixed_part_only() -> None:
    ps = synthetic([10.0, 1.0], 10, 0.0, 0)
    ps = PlanSamples(ps.fwd_ms, ps.bwd_ms, np.array([0.0, 100.0]), np.array([True, False]))
    assert ps.plan_cost() == pytest.approx(100.0)
    assert plan_cost_interval(ps).low == pytest.approx(100.0)


def test_a_plan_against_itself_is_indistinguishable() -> None:
    a = synthetic([10.0, 8.0], 40, 0.1, 3)
    c = compare_paired(a, a, names=("a", "a"))
    assert c.verdict == "indistinguishable" and c.faster_pct.estimate == 0.0


def test_two_noisy_measurements_of_one_plan_are_indistinguishable() -> None:
    a = synthetic([10.0, 8.0], 40, 0.05, 3)
    b = synthetic([10.0, 8.0], 40, 0.05, 4)
    assert compare_paired(a, b).verdict == "indistinguishable"


def test_an_overloaded_device_is_detected() -> None:
    balanced = synthetic([10.0, 10.0], 30, 0.05, 5)
    overloaded = synthetic([15.0, 5.0], 30, 0.05, 6)
    c = compare_paired(balanced, overloaded, names=("balanced", "overloaded"))
    assert c.verdict == "slower" and c.faster_pct.high < 0
    assert "slower" in c.sentence() and "95 % CI" in c.sentence()
    c = compare_paired(overloaded, balanced, names=("overloaded", "balanced"))
    assert c.verdict == "faster" and c.faster_pct.low > 0


def test_pairing_cancels_drift_shared_by_a_round() -> None:
    """A slow drift of the machine multiplies every unit of a round: the paired interval stays narrow, the one
    from two independent drifts does not."""
    rounds = 40
    drift = 1 + 0.5 * np.sin(np.linspace(0, 6, rounds))
    a = synthetic([10.0, 9.0], rounds, 0.01, 7, drift)
    b = synthetic([10.0 * 0.97, 9.0], rounds, 0.01, 8, drift)
    paired = compare_paired(a, b)
    assert paired.verdict == "faster"
    shuffled = synthetic([10.0 * 0.97, 9.0], rounds, 0.01, 8, drift[::-1])
    unpaired = compare_paired(a, shuffled)
    assert paired.faster_pct.half_width < unpaired.faster_pct.half_width / 3


def test_stop_rule_fixed_auto_cap() -> None:
    fixed = StopRule(fixed=4)
    assert fixed.decide(3, 0.0, None) is None and fixed.decide(4, 0.0, None) == "repeats"
    auto = StopRule(target=0.02, min_rounds=5, max_rounds=50, time_cap_s=10, min_time_s=2.0)
    tight = plan_cost_interval(synthetic([10.0], 30, 0.001, 0))
    loose = plan_cost_interval(synthetic([10.0], 30, 0.5, 0))
    assert auto.decide(4, 5.0, [tight]) is None  # too few rounds yet
    assert auto.decide(5, 1.0, [tight]) is None  # too short yet: the measurement must span the machine's drift
    assert auto.decide(5, 2.0, [tight]) == "converged"
    assert auto.decide(5, 2.0, [tight, loose]) is None  # every plan must be tight
    assert auto.decide(6, 11.0, [loose]) == "time cap"
    assert auto.decide(50, 0.0, [loose]) == "max rounds"
    for bad in (dict(fixed=0), dict(target=0.0), dict(target=2.0), dict(min_rounds=1), dict(time_cap_s=0),
                dict(min_time_s=-1)):
        with pytest.raises(ValueError):
            StopRule(**bad)


class SyntheticUnit:
    """A kernel whose pass takes a known time (plus seeded noise) and that logs when it ran."""

    label = "synthetic"
    hardware = "none"

    def __init__(self, name: str, ms: float, noise: float, log: list[str], seed: int):
        self.name, self.ms, self.noise, self.log = name, ms, noise, log
        self.rng = np.random.default_rng(seed)
        self.warmed = 0

    def warm(self, passes: int) -> None:
        self.warmed += passes

    def run_once(self) -> tuple[float, float]:
        self.log.append(self.name)
        f = self.ms * (1 + self.noise * self.rng.standard_normal()) / 1e3
        return f, 2 * f


def test_interleaved_rounds_visit_every_unit_once_in_varying_order() -> None:
    log: list[str] = []
    units = [[SyntheticUnit("a0", 10, 0.01, log, 0), None, SyntheticUnit("a2", 5, 0.01, log, 1)],
             [SyntheticUnit("b0", 7, 0.01, log, 2), SyntheticUnit("b1", 7, 0.01, log, 3), None]]
    fixed = [np.array([1.0, 1.0, 1.0]), np.zeros(3)]
    m = measure_interleaved(units, fixed, StopRule(fixed=6), warmup=2, seed=0)
    rounds = [log[i:i + 4] for i in range(0, len(log), 4)]
    assert len(rounds) == 6 and all(sorted(r) == ["a0", "a2", "b0", "b1"] for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # shuffled, not the same order every round
    assert all(u.warmed == 2 for plan in units for u in plan if u is not None)
    assert m.stop.reason == "repeats" and m.stop.rounds == 6
    assert m.samples[0].plan_cost() == pytest.approx(3 * 10 + 1, rel=0.05)
    assert m.labels[0][1] is None and m.labels[1][0] == "synthetic"


def test_interleaved_auto_stops_when_tight_or_at_the_cap() -> None:
    log: list[str] = []
    quiet = [[SyntheticUnit("q", 10, 0.001, log, 0)]]
    m = measure_interleaved(quiet, [np.zeros(1)], StopRule(target=0.02, min_rounds=5, max_rounds=100, min_time_s=0),
                            warmup=0)
    assert m.stop.reason == "converged" and m.stop.rounds == 5
    noisy = [[SyntheticUnit("n", 10, 0.8, log, 1)]]
    ticks = iter(range(1000))
    m = measure_interleaved(noisy, [np.zeros(1)], StopRule(target=0.001, min_rounds=5, max_rounds=100, time_cap_s=8),
                            warmup=0, clock=lambda: float(next(ticks)))
    assert m.stop.reason == "time cap" and m.stop.rounds < 100


def test_same_seed_same_order() -> None:
    def order(seed: int) -> list[str]:
        log: list[str] = []
        units = [[SyntheticUnit(f"u{d}", 1, 0, log, d) for d in range(4)]]
        measure_interleaved(units, [np.zeros(4)], StopRule(fixed=3), warmup=0, seed=seed)
        return log

    assert order(1) == order(1) and order(1) != order(2)


def test_block_bootstrap_widens_the_interval_of_drifting_rounds() -> None:
    """Rounds in two regimes (a slow machine for a stretch, then a fast one): resampling rounds one by one would
    treat them as independent; blocks of consecutive rounds keep the drift and give a wider interval."""
    from shardopt.measure.confidence import block_length, resampled_rounds

    assert block_length(8) == 2 and block_length(64) == 4 and block_length(1) == 1
    idx = resampled_rounds(27, 5, 0)
    assert idx.shape == (5, 27) and ((idx[:, 1:3] - idx[:, 0:2]) % 27 == 1).all()  # blocks of 3 consecutive rounds
    regimes = np.repeat([1.0, 1.3, 1.0, 1.3], 16)
    drifting = synthetic([10.0], 64, 0.01, 0, regimes)
    iid = synthetic([10.0], 64, 0.01, 0, np.random.default_rng(1).permutation(regimes))
    assert plan_cost_interval(drifting).half_width > plan_cost_interval(iid).half_width


def test_an_interval_contains_its_estimate_by_construction() -> None:
    """Issue 'trust': the bounds are percentiles of resamples and the estimate the sample's own statistic; where all
    resamples agree they differed in the last bit (ci_low 3.0165991688557328 > estimate 3.0165991688557323)."""
    from shardopt.measure.confidence import Interval

    iv = Interval(3.0165991688557323, 3.0165991688557328, 3.0165991688557328)
    assert iv.low <= iv.estimate <= iv.high
    iv = Interval(2.0, 1.0, 1.5)  # an estimate above the resampled range widens the interval to it
    assert (iv.low, iv.high) == (1.0, 2.0)
