"""Calibrating the analytic model: fit a hardware profile's constants to measured kernel timings.

The profiles' bandwidths and capacities come from data sheets, but the achievable bandwidth of a random gather, the
launch overhead, the floor of a tiny kernel and how much slower backward runs are assumptions (docs/analytic-model.md).
Given compute samples measured by a real backend (`shardopt costmodel collect --backend cpu|cuda`), this fits them
by least squares on log time (relative error, fwd and bwd together), on a training share of the samples, and
reports the error and rank agreement before and after on the held-out rest as well, so a fit that merely memorises
is visible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from costmodels.analytic import BoundAnalytic, device_compute_costs
from shardopt.core.hardware import PROFILES, HardwareProfile
from shardopt.core.ir import AccessProfile, Instance, Table, Topology, Workload

# (field, lower bound, upper bound) of what the fit may change; everything else stays as the base profile says
FIT_FIELDS: tuple[tuple[str, float, float], ...] = (
    ("hbm_bandwidth", 1e8, 1e13),
    ("l2_bandwidth_ratio", 0.05, 100.0),
    ("l2_bytes", 64 * 1024, 2 * 1024**3),
    ("launch_overhead_s", 1e-7, 1e-2),
    ("min_kernel_s", 1e-7, 1e-2),
    ("bwd_bandwidth_factor", 1e-3, 100.0),
)


class CalibrationError(ValueError):
    """Not enough usable samples, or samples that are not compute measurements."""


@dataclass(frozen=True)
class Agreement:
    """How a profile's predictions agree with measurements: median |relative error| and rank correlations."""

    samples: int
    median_abs_rel_error_fwd: float
    median_abs_rel_error_bwd: float
    spearman_fwd: float
    spearman_bwd: float
    kendall_fwd: float
    kendall_bwd: float

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Calibration:
    base: HardwareProfile
    profile: HardwareProfile
    train_before: Agreement
    train_after: Agreement
    holdout_before: Agreement | None
    holdout_after: Agreement | None
    fitted: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base.name,
            "fitted": self.fitted,
            "train_before": self.train_before.to_dict(),
            "train_after": self.train_after.to_dict(),
            "holdout_before": self.holdout_before.to_dict() if self.holdout_before else None,
            "holdout_after": self.holdout_after.to_dict() if self.holdout_after else None,
        }


def sample_states(samples: Iterable[dict[str, Any]], base: HardwareProfile) -> tuple[np.ndarray, np.ndarray]:
    """Each compute sample's device state under the analytic model, and its measured (fwd, bwd) ms."""
    hardware = base.name if base.name in PROFILES else "v100"  # a topology needs a known name; the profile is fixed below
    states, measured = [], []
    for s in samples:
        if s.get("kind") != "compute":
            continue
        tables = [
            Table(
                name=f"t{i}",
                rows=t["rows"],
                dim=t["dim"],
                pooling_factor=t["pooling_factor"],
                access=AccessProfile(histogram=t.get("histogram"), zipf=t.get("zipf")),
                dtype=t.get("dtype"),
            )
            for i, t in enumerate(s["tables"])
        ]
        inst = Instance(
            tables=tables,
            topology=Topology(num_devices=1, devices_per_host=1, memory_bytes=10**15, hardware=hardware),
            workload=Workload(batch_size=s["batch_size"], optimizer=s["optimizer"]),
        )
        states.append(BoundAnalytic(inst, base).table_states.sum(axis=0))
        measured.append((float(s["fwd_compute"]), float(s["bwd_compute"])))
    if not states:
        return np.zeros((0, 0)), np.zeros((0, 2))
    return np.stack(states), np.asarray(measured)


def agreement(pred: np.ndarray, meas: np.ndarray) -> Agreement:
    from scipy.stats import kendalltau, spearmanr

    rel = np.abs(pred - meas) / meas

    def corr(fn, j: int) -> float:
        if len(meas) < 3:
            return float("nan")
        return float(fn(pred[:, j], meas[:, j])[0])

    return Agreement(
        samples=len(meas),
        median_abs_rel_error_fwd=float(np.median(rel[:, 0])),
        median_abs_rel_error_bwd=float(np.median(rel[:, 1])),
        spearman_fwd=corr(spearmanr, 0),
        spearman_bwd=corr(spearmanr, 1),
        kendall_fwd=corr(kendalltau, 0),
        kendall_bwd=corr(kendalltau, 1),
    )


def _with(base: HardwareProfile, x: np.ndarray) -> HardwareProfile:
    values = {name: float(math.exp(v)) for (name, _, _), v in zip(FIT_FIELDS, x)}
    values["l2_bytes"] = int(values["l2_bytes"])
    return replace(base, **values)


def calibrate(samples: list[dict[str, Any]], base: HardwareProfile, *, holdout: float = 0.2, seed: int = 0, name: str | None = None) -> Calibration:
    from scipy.optimize import least_squares

    states, meas = sample_states(samples, base)
    usable = np.all(meas > 0, axis=1) if len(meas) else np.zeros(0, dtype=bool)
    states, meas = states[usable], meas[usable]
    if len(meas) < 5:
        raise CalibrationError(f"{len(meas)} usable compute samples with positive timings; calibration needs at least 5")
    if not 0 <= holdout < 1:
        raise CalibrationError(f"holdout: {holdout} must be in [0, 1)")
    order = np.random.default_rng(seed).permutation(len(meas))
    n_test = int(round(holdout * len(meas)))
    test, train = order[:n_test], order[n_test:]

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = device_compute_costs(states[train], _with(base, x))
        return (np.log(np.maximum(pred, 1e-12)) - np.log(meas[train])).ravel()

    x0 = np.array([math.log(getattr(base, f)) for f, _, _ in FIT_FIELDS])
    lo = np.array([math.log(b) for _, b, _ in FIT_FIELDS])
    hi = np.array([math.log(b) for _, _, b in FIT_FIELDS])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    fit = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2, max_nfev=2000)
    profile = replace(_with(base, fit.x), name=name or f"{base.name}-calibrated", description=f"{base.description}; constants fitted to measurements")

    def judge(p: HardwareProfile, idx: np.ndarray) -> Agreement:
        return agreement(device_compute_costs(states[idx], p), meas[idx])

    return Calibration(
        base=base,
        profile=profile,
        train_before=judge(base, train),
        train_after=judge(profile, train),
        holdout_before=judge(base, test) if n_test >= 3 else None,
        holdout_after=judge(profile, test) if n_test >= 3 else None,
        fitted={f: getattr(profile, f) for f, _, _ in FIT_FIELDS},
    )
