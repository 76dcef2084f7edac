"""The machine's speed level: how fast this machine runs now against when a calibration timed its samples.

A measured cost model learns milliseconds of one machine at the time of its samples, and a machine's level moves:
on the 2-core EPYC VM of 2026-11-28 the plans of the calibration's last loop round were timed 9 % faster than the
samples it trained on (their devices re-timed the next day: 0.98 of their labels, the collection's own held-out
samples 0.91), so the registered model over-predicted every held-out plan by 5-20 % while it ranked them as before.
Retraining cannot follow that; a level can. The anchors are fixed held-out samples of the calibration (their
collected timings are the reference, spread over the collection's minutes); re-timing them now and taking the
median ratio gives the factor the neural model's compute predictions are multiplied by (`ModelCard.level`,
`NeuralCostModel(compute_scale=...)`). The median, not the mean: a sample timed in one of the machine's slow spells
(30 % above, for seconds: docs/measured.md "Judge precision") is an outlier of its reference, not of the level.
"""

from __future__ import annotations

import datetime
import gzip
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardopt.core.errors import UserError

# anchors per reading: about 10 s on the 2-core VM (5-60 ms devices, the judge's 5 repeats after 2 warm-ups)
ANCHORS = 24
# anchors come from the samples' middle and upper cost range: tiny devices carry launch noise of their own
ANCHOR_QUANTILES = (0.3, 0.97)
ANCHORS_FILE = "anchors.jsonl.gz"  # beside a calibrated model's card


@dataclass(frozen=True)
class LevelReading:
    """One reading: `factor` = the median of (timed now / collected) over `anchors` samples, with the quartiles."""

    factor: float
    anchors: int
    spread: tuple[float, float]  # the ratios' 25th and 75th percentiles
    seconds: float
    date: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spread"] = [round(x, 4) for x in self.spread]
        d["factor"] = round(self.factor, 4)
        d["seconds"] = round(self.seconds, 1)
        return d


class LevelError(UserError, ValueError):
    """No anchors to read a level from (a user error: exit 2)."""

    error_kind = "no_level_anchors"


def sample_total(sample: dict[str, Any]) -> float:
    return float(sample["fwd_compute"]) + float(sample["bwd_compute"])


def choose_anchors(samples: Sequence[dict[str, Any]], n: int = ANCHORS) -> list[dict[str, Any]]:
    """`n` compute samples spread evenly over the middle and upper part of their measured cost range (deterministic:
    the same samples give the same anchors, so a later reading re-times what an earlier one did)."""
    compute = [s for s in samples if s.get("kind") == "compute" and sample_total(s) > 0]
    if not compute:
        raise LevelError("no compute samples to anchor a level on")
    order = sorted(range(len(compute)), key=lambda i: (sample_total(compute[i]), compute[i].get("id", i)))
    lo, hi = (int(q * (len(order) - 1)) for q in ANCHOR_QUANTILES)
    picks = np.unique(np.linspace(lo, hi, min(n, hi - lo + 1)).round().astype(int))
    return [compute[order[i]] for i in picks]


def read_level(anchors: Sequence[dict[str, Any]], backend: str, *, repeats: int = 5, warmup: int = 2,
               progress: Callable[[int, int], None] | None = None) -> LevelReading:
    """Re-time `anchors` on `backend` with the collection's settings (each with the seed it was collected with, its
    id) and return the level against their recorded timings."""
    from costmodels.evaluation import sample_instance
    from shardopt.measure.evaluate import evaluate_plan

    if not anchors:
        raise LevelError("no anchors to read a level from")
    start = time.monotonic()
    ratios = []
    for k, s in enumerate(anchors):
        inst, plan = sample_instance(s, keep_names=True)  # (the same traces as when it was collected)
        ev = evaluate_plan(inst, plan, backend, repeats=repeats, warmup=warmup, seed=int(s.get("id", k)), cache=False)
        ratios.append(float(ev.costs.fwd_compute[0] + ev.costs.bwd_compute[0]) / sample_total(s))
        if progress is not None:
            progress(k + 1, len(anchors))
    r = np.array(ratios)
    return LevelReading(factor=float(np.median(r)), anchors=len(r), spread=(float(np.quantile(r, 0.25)), float(np.quantile(r, 0.75))),
                        seconds=time.monotonic() - start, date=datetime.date.today().isoformat())


def at_level(samples: Sequence[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    """Samples timed at `factor` of the reference level, moved to the reference (what the network learns): their
    forward and backward compute divided by it."""
    return [{**s, "fwd_compute": float(s["fwd_compute"]) / factor, "bwd_compute": float(s["bwd_compute"]) / factor,
             "level": factor} for s in samples]


def write_anchors(anchors: Sequence[dict[str, Any]], path: Path) -> None:
    """The anchors (with their collected timings, the reference) as gzipped JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for s in anchors:
            f.write(json.dumps(s) + "\n")


def read_anchors(path: Path) -> list[dict[str, Any]]:
    """A card's anchors; LevelError naming the file when it is missing, unreadable or holds none."""
    try:
        with gzip.open(path, "rt") as f:
            anchors = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        raise LevelError(f"{path}: no such file (the samples a level is read on)") from None
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LevelError(f"{path}: not gzipped JSON lines of samples ({exc})") from None
    if not any(isinstance(s, dict) and s.get("kind") == "compute" for s in anchors):
        raise LevelError(f"{path}: holds no compute samples to read a level on")
    return [s for s in anchors if isinstance(s, dict) and s.get("kind") == "compute"]
