"""The device-host link's row-gather model, fitted to `benchmarks/host_link_probe.py`'s measurements.

A UVM shard's misses are rows a kernel reads one by one out of host memory. On the first GPU measured (an H200, PCIe
Gen5 x16; docs/results/gpu.md, "Measured on a GPU") such reads ran at 36-48 million rows a second whatever the row's
width (64 B - 1 KiB), 3.1-37 GB/s against 55 GB/s for bulk copies: the link's bytes alone price a narrow row's miss
about 20x too cheaply. Each row costs a fixed time plus a small per-byte time,

    t(rows, bytes) = rows / host_row_rate + bytes / host_gather_bandwidth,

which is what the analytic model charges for row-granular host reads (at least bytes / host_link_bandwidth), and
what this module fits by least squares to the probe's per-width medians.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class HostRowFit:
    """host_row_rate (rows/s), host_gather_bandwidth (bytes/s), and the fit's largest relative error per width."""

    host_row_rate: float
    host_gather_bandwidth: float
    max_rel_error: float
    points: int


def gather_points(probe: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(row bytes, seconds per row) of each zero-copy gather width a probe document measured."""
    gathers = probe.get("gather_zero_copy")
    if not isinstance(gathers, dict) or not gathers:
        raise ValueError("probe: no zero-copy gather measurements ('gather_zero_copy')")
    row_bytes, per_row = [], []
    for _, entry in sorted(gathers.items(), key=lambda kv: int(kv[0])):
        z = entry["host_zero_copy"]
        rows = z["bytes"] / z["row_bytes"]
        row_bytes.append(float(z["row_bytes"]))
        per_row.append(z["median_s"] / rows)
    return np.asarray(row_bytes), np.asarray(per_row)


def fit_host_rows(probe: dict[str, Any]) -> HostRowFit:
    """Least-squares fit of seconds per row = 1 / host_row_rate + row bytes / host_gather_bandwidth."""
    b, t = gather_points(probe)
    if len(b) < 2:
        raise ValueError(f"probe: {len(b)} gather width(s); the fit needs two or more")
    a = np.stack([np.ones_like(b), b], axis=1)
    (fixed, per_byte), *_ = np.linalg.lstsq(a, t, rcond=None)
    if fixed <= 0 or per_byte <= 0:
        raise ValueError(f"probe: the fit is not physical (fixed {fixed:.3g} s, per byte {per_byte:.3g} s)")
    err = float(np.max(np.abs((fixed + per_byte * b) / t - 1.0)))
    return HostRowFit(float(1.0 / fixed), float(1.0 / per_byte), err, len(b))
