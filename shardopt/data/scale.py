"""Scaling an instance down to what a machine can time: a new instance, given to the solvers *and* the judge.

A measured judge must time exactly the instance's workload (docs/backends.md, "Measuring so that plans can be ranked"):
when the judge itself shrank the batch or capped the rows, it timed a different problem from the one the solver
optimised, and its ranking said nothing about the solver. So scaling is an explicit step that writes a new instance
(`shardopt scale`), and every solver is run on that instance too.

What changes, and why:

- ``batch_size``: the workload's batch. A table's access histogram is the share of its unique rows by their access
  count *in one batch*, so it is moved with the batch: a row hit ``c`` times per batch is hit ``c * B' / B`` times
  at the new batch (the bin's geometric midpoint stands for its rows; bin 0's for 1 access). A row whose expected
  count falls below 1 is only hit at all with probability ``1 - exp(-c')``; the shares are renormalised over the rows
  that are hit. Tables described by a Zipf exponent alone keep it (their histogram is derived at any batch).
- ``max_rows``: each table's hash size is capped (the judge's traces fold indices onto the kept rows). Its
  histogram's shares of unique rows are kept: a batch touches far fewer unique rows than the cap in every use this
  is meant for (the scaled instance says the cap in its metadata).
- memory: by default each device's capacity is scaled by the ratio of the model's bytes after and before, so that
  memory is as tight as it was (``memory="keep"`` keeps the capacities).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from shardopt.core.ir import ACCESS_BINS, AccessProfile, Instance, Table
from shardopt.core.memory import table_bytes_array
from shardopt.core.stats import access_bin

MemoryRule = Literal["scale", "keep"]


class ScaleError(ValueError):
    """A scaling request that cannot give a valid instance (names the setting and the value)."""


def _bin_representatives() -> np.ndarray:
    """One access count standing for each bin's rows: 1 for (0,1], the geometric midpoint 2^(k-1/2) of
    (2^(k-1), 2^k] otherwise (so a ratio of 1 maps every bin onto itself)."""
    reps = np.empty(ACCESS_BINS)
    reps[0] = 1.0
    for k in range(1, ACCESS_BINS):
        reps[k] = 2.0 ** (k - 0.5)
    return reps


def rescale_histogram(histogram: list[float], ratio: float) -> list[float]:
    """The access histogram at a batch `ratio` times the one it was measured at (see the module docstring)."""
    if not (ratio > 0 and math.isfinite(ratio)):
        raise ScaleError(f"batch ratio {ratio!r} must be a positive finite number")
    h = np.asarray(histogram, dtype=np.float64)
    counts = _bin_representatives() * ratio
    # (math.exp, not np.exp: numpy's AVX-512 exp differs from its AVX2 one in the last bit, and a suite generated on
    # one machine must be the same bytes on any other - tests/test_suites_committed.py regenerates them)
    hit = np.array([1.0 - math.exp(-c) if c < 1.0 else 1.0 for c in counts])
    new = np.zeros(ACCESS_BINS)
    np.add.at(new, access_bin(np.maximum(counts, 1.0)), h * hit)
    total = new.sum()
    if total <= 0:  # an empty histogram stays what it was
        return list(histogram)
    return [float(x) for x in new / total]


def scale_table(table: Table, ratio: float, max_rows: int | None) -> Table:
    access = table.access
    if access.histogram is not None and ratio != 1.0:
        access = AccessProfile(histogram=rescale_histogram(access.histogram, ratio), zipf=access.zipf)
    rows = min(table.rows, max_rows) if max_rows is not None else table.rows
    return table.model_copy(update={"rows": rows, "access": access})


def scaled_capacities(instance: Instance, scaled: Instance) -> list[int]:
    """Each device's capacity times the model's bytes after / before (memory as tight as it was), but never below
    the largest scaled table that fitted on that device before: capping rows shrinks the big tables much more than
    the model, and a table that fitted must still fit."""
    before_t, after_t = table_bytes_array(instance), table_bytes_array(scaled)
    before, after = float(before_t.sum()), float(after_t.sum())
    factor = after / before if before > 0 else 1.0
    caps = []
    for cap in instance.topology.capacities():
        fitted = after_t[before_t <= cap]
        caps.append(max(1, int(cap * factor), int(fitted.max()) if fitted.size else 0))
    return caps


def scale_instance(instance: Instance, *, batch_size: int | None = None, max_rows: int | None = None,
                   memory: MemoryRule = "scale", name: str | None = None, hardware: str | None = None) -> Instance:
    """A new instance at `batch_size` with every table's rows capped at `max_rows` (either may be None: unchanged),
    and with `hardware` the hardware profile it names (the machine it will be judged on: `auto` then plans it with
    the model calibrated there; None: unchanged)."""
    from shardopt.core.hardware import PROFILES

    if hardware is not None and hardware not in PROFILES:
        raise ScaleError(f"hardware: {hardware!r} is not a known hardware profile (known: {', '.join(sorted(PROFILES))})")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ScaleError(f"batch_size: {batch_size!r} must be an integer >= 1")
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise ScaleError(f"max_rows: {max_rows!r} must be an integer >= 1")
    if memory not in ("scale", "keep"):
        raise ScaleError(f"memory: {memory!r} is not one of scale, keep")
    old_batch = instance.workload.batch_size
    batch = batch_size or old_batch
    ratio = batch / old_batch
    tables = [scale_table(t, ratio, max_rows) for t in instance.tables]
    scaled = instance.model_copy(update={"tables": tables, "workload": instance.workload.model_copy(update={"batch_size": batch})})
    # (a job that mixes kinds, to be judged on one machine, becomes a job of that machine's kind)
    topology = instance.topology if hardware is None else instance.topology.model_copy(update={"hardware": hardware, "device_hardware": None})
    if memory == "scale":
        caps = scaled_capacities(instance, scaled)
        mem = caps[0] if not isinstance(topology.memory_bytes, list) else caps
        topology = topology.model_copy(update={"memory_bytes": mem})
    metadata = dict(instance.metadata)
    metadata["scaled_from"] = {
        "name": instance.name, "hash": instance.content_hash(), "batch_size": old_batch,
        "to_batch_size": batch, "max_rows": max_rows, "memory": memory,
        **({"hardware": ["+".join(dict.fromkeys(instance.topology.hardware_kinds())), hardware]} if hardware is not None else {}),
    }
    suffix = f"-b{batch}" + (f"-r{max_rows}" if max_rows is not None else "")
    out = scaled.model_copy(update={"topology": topology, "metadata": metadata,
                                    "name": name if name is not None else (instance.name or "instance") + suffix})
    # re-validate the whole document: a scaled instance is held to every rule an instance file is
    return Instance.model_validate(out.model_dump(mode="json"))
