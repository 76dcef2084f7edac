"""Cost-data collection: samples of (a device's table set -> its costs) for training and checking cost models.

Two kinds of sample, one JSON object per line (JSONL), each with a stable `id`:

* `compute`: 1 to K tables drawn from a pool, dims augmented over {4, ..., 256} (the published collectors only
  varied dims of real tables; here every table gets a random dim, so the models see each table at many widths),
  under a memory cap, placed on ONE device and judged by the backend: `fwd_compute`, `bwd_compute` in ms.
* `comm`: a random plan of random tables over a random cluster (2 to 128 devices, several host layouts): every
  device's pooled width and its `fwd_comm` / `bwd_comm` in ms (modelled by the analytic model on every backend
  here, and labelled so: measuring it needs several GPUs).

Sample k is drawn from its own generator seeded by (seed, k), so the file's content does not depend on how many
runs it took to write: collection appends, skips ids already present, and a run killed at any moment (even mid
line) resumes with nothing lost and no duplicates.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardopt.core.errors import UserError
from shardopt.core.ir import AccessProfile, Instance, Kernel, Plan, Shard, Table, Topology, Workload
from shardopt.core.memory import table_bytes
from shardopt.data.pools import TablePool
from shardopt.data.scale import scale_table

AUG_DIMS = tuple(range(4, 257, 4))  # every multiple of 4 up to 256
POW2_DIMS = (4, 8, 16, 32, 64, 128, 256)
COMM_DEVICES = (2, 4, 8, 16, 32, 64, 128)
BATCH_CHOICES = (2048, 4096, 8192, 16384, 32768, 65536, 131072)


def _batch(pool: TablePool, settings: CollectSettings, rng: np.random.Generator) -> int:
    if settings.vary_batch:
        return int(rng.choice(settings.batch_choices or BATCH_CHOICES))
    return settings.batch_size or pool.batch_size


@dataclass(frozen=True)
class CollectSettings:
    backend: str = "sim"
    samples: int = 1000
    max_tables: int = 20
    min_tables: int = 1
    seed: int = 0
    hardware: str = "v100"
    batch_size: int | None = None  # None: the pool's batch
    vary_batch: bool = False  # draw each sample's batch from BATCH_CHOICES instead (for models used across workloads)
    augment: bool = False  # also scale each table's rows (x 10^U(-3, 0.3), at least 100) and pooling (x 2^U(-2, 2))
    optimizer: str = "rowwise_adagrad"
    memory_cap: int | None = None  # bytes per device set; None: the hardware's memory
    comm_fraction: float = 0.2
    repeats: int = 5
    warmup: int = 2
    max_rows: int | None = None  # cap every sampled table's rows (the sample records the capped table it timed)
    batch_choices: tuple[int, ...] | None = None  # with vary_batch: draw from these instead of BATCH_CHOICES
    # move the pool's access histograms (measured at the pool's batch) to each sample's batch (shardopt.data.scale);
    # False reproduces data collected before 2026-11-24, which kept the pool's histograms at every batch
    rescale_histograms: bool = True


class CollectError(UserError, ValueError):
    """Bad collection request (a user error)."""

    error_kind = "bad_collect_request"


def existing_ids(path: Path) -> set[int]:
    """Ids already in `path`; a torn last line (a run killed mid-write) is cut off so appending stays valid."""
    if not path.exists():
        return set()
    ids: set[int] = set()
    good_bytes = 0
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() and line.endswith(b"\n"):  # (a blank line, as read_samples skips it)
                good_bytes += len(line)
                continue
            try:
                doc = json.loads(line)
                ids.add(int(doc["id"]))
            except (ValueError, KeyError, TypeError):
                if line.endswith(b"\n"):
                    raise CollectError(f"{path}: line {number} is not a sample; refusing to append to a file that is not a collection") from None
                break  # torn final line
            good_bytes += len(line)
    if good_bytes != path.stat().st_size:
        with path.open("r+b") as f:
            f.truncate(good_bytes)
    return ids


def _dims(rng: np.random.Generator, n: int) -> np.ndarray:
    """Half powers of two (what models use), half any multiple of 4 (sector and alignment effects)."""
    pow2 = rng.choice(POW2_DIMS, size=n)
    anyd = rng.choice(AUG_DIMS, size=n)
    return np.where(rng.random(n) < 0.5, pow2, anyd)


def _table(pool: TablePool, i: int, dim: int, max_rows: int | None = None, scale: tuple[float, float] = (1.0, 1.0)) -> Table:
    pt = pool.tables[i]
    rows = pt.rows if scale[0] == 1.0 else max(100, int(round(pt.rows * scale[0])))
    rows = rows if max_rows is None else min(rows, max_rows)
    pooling = pt.pooling_factor if scale[1] == 1.0 else round(pt.pooling_factor * scale[1], 4)
    return Table(name=pt.name, rows=rows, dim=int(dim), pooling_factor=pooling, access=AccessProfile(histogram=pt.access.histogram, zipf=pt.access.zipf))


def _scales(rng: np.random.Generator, n: int, augment: bool) -> list[tuple[float, float]]:
    """Rows and pooling-factor multipliers: the published collectors varied only dims, so their models never saw
    a small table or a light one; with `augment` every table is also seen at other sizes and loads."""
    if not augment:
        return [(1.0, 1.0)] * n
    rows = 10.0 ** rng.uniform(-3.0, 0.3, size=n)
    pooling = 2.0 ** rng.uniform(-2.0, 2.0, size=n)
    return list(zip(rows.tolist(), pooling.tolist()))


def table_features(t: Table, dtype: str) -> dict[str, Any]:
    return {"name": t.name, "rows": t.rows, "dim": t.dim, "pooling_factor": t.pooling_factor, "histogram": t.access.histogram, "zipf": t.access.zipf, "dtype": dtype}


def compute_instance(pool: TablePool, settings: CollectSettings, k: int) -> Instance:
    """Sample k's device: 1..K pool tables with augmented dims, under the memory cap, on one device."""
    from shardopt.core.hardware import get_profile

    rng = np.random.default_rng([settings.seed, k, 1])
    n = int(rng.integers(min(settings.min_tables, len(pool.tables)), min(settings.max_tables, len(pool.tables)) + 1))
    chosen = rng.choice(len(pool.tables), size=n, replace=False)
    dims = _dims(rng, n)
    scales = _scales(rng, n, settings.augment)
    cap = settings.memory_cap or get_profile(settings.hardware).memory_bytes
    workload = Workload(batch_size=_batch(pool, settings, rng), optimizer=settings.optimizer)
    tables: list[Table] = []
    probe = Instance(tables=[_table(pool, int(chosen[0]), int(dims[0]), settings.max_rows, scales[0])], topology=Topology(num_devices=1, devices_per_host=1, memory_bytes=cap, hardware=settings.hardware), workload=workload)
    used = 0
    for i, d, sc in zip(chosen, dims, scales):
        t = _table(pool, int(i), int(d), settings.max_rows, sc)
        size = table_bytes(probe, t)
        if used + size <= cap:
            tables.append(t)
            used += size
    if not tables:  # the first table alone exceeds the cap: shrink its dim until it fits (at least 4)
        t = _table(pool, int(chosen[0]), 4, settings.max_rows, scales[0])
        tables.append(t)
    if settings.rescale_histograms and workload.batch_size != pool.batch_size:  # the pool's histograms are for its own batch
        tables = [scale_table(t, workload.batch_size / pool.batch_size, None) for t in tables]
    return probe.model_copy(update={"tables": tables, "name": f"collect-{settings.seed}-{k}"})


def comm_sample(pool: TablePool, settings: CollectSettings, k: int) -> dict[str, Any]:
    """Sample k's cluster: a random plan's per-device pooled widths and the modelled all-to-all."""
    from costmodels.analytic import AnalyticCostModel

    rng = np.random.default_rng([settings.seed, k, 2])
    n_dev = int(rng.choice(COMM_DEVICES))
    per_host = int(rng.choice([p for p in (1, 2, 4, 8, n_dev) if p <= n_dev]))
    n_tab = int(rng.integers(1, 4 * n_dev + 1))
    chosen = rng.choice(len(pool.tables), size=min(n_tab, len(pool.tables)), replace=n_tab > len(pool.tables))
    dims = _dims(rng, len(chosen))
    tables = [_table(pool, int(i), int(d)).model_copy(update={"name": f"x{j}"}) for j, (i, d) in enumerate(zip(chosen, dims))]
    topo = Topology(num_devices=n_dev, devices_per_host=per_host, memory_bytes=10**15, hardware=settings.hardware)
    inst = Instance(tables=tables, topology=topo, workload=Workload(batch_size=_batch(pool, settings, rng), optimizer=settings.optimizer))
    device_of = rng.integers(0, n_dev, size=len(tables))
    costs = AnalyticCostModel().plan_costs(inst, [Shard(table=t.name, device=int(d)) for t, d in zip(tables, device_of)])
    dim_sums = np.zeros(n_dev)
    np.add.at(dim_sums, device_of, dims)
    return {
        "kind": "comm",
        "num_devices": n_dev,
        "devices_per_host": per_host,
        "hardware": settings.hardware,
        "batch_size": inst.workload.batch_size,
        "dim_sums": [int(x) for x in dim_sums],
        "fwd_comm": costs.fwd_comm.tolist(),
        "bwd_comm": costs.bwd_comm.tolist(),
        "source": f"analytic model ({settings.hardware} profile), modelled",
    }


def compute_sample(pool: TablePool, settings: CollectSettings, k: int, cache: Any) -> dict[str, Any]:
    from shardopt.measure.evaluate import evaluate_plan

    inst = compute_instance(pool, settings, k)
    plan = Plan(shards=[Shard(table=t.name, device=0) for t in inst.tables])
    measured = settings.backend != "sim"
    ev = evaluate_plan(
        inst, plan, settings.backend, repeats=settings.repeats, warmup=settings.warmup, seed=k,
        cache=cache if measured else False,
    )
    dtype = inst.workload.weight_dtype.value
    sample: dict[str, Any] = {
        "kind": "compute",
        "backend": settings.backend,
        "judge": ev.judge,
        "hardware": settings.hardware,
        "batch_size": inst.workload.batch_size,
        "optimizer": inst.workload.optimizer.value,
        "tables": [table_features(t, dtype) for t in inst.tables],
        "fwd_compute": float(ev.costs.fwd_compute[0]),
        "bwd_compute": float(ev.costs.bwd_compute[0]),
    }
    if measured and ev.timings and ev.timings[0]:
        sample["fwd_iqr_ms"] = ev.timings[0]["fwd_iqr_ms"]
        sample["bwd_iqr_ms"] = ev.timings[0]["bwd_iqr_ms"]
    return sample


def plan_device_samples(instance: Instance, plan: Plan, evaluation: Any, origin: dict[str, Any]) -> list[dict[str, Any]]:
    """The compute samples a measured plan holds: one per device whose shards the sample format can describe (HBM
    shards of whole rows, not replicated: a column piece is the table at the piece's width), with the device's
    measured medians. How calibration learns from the plans the searches propose (shardopt.measure.calibration)."""
    from shardopt.core.stats import table_histogram

    tables = {t.name: t for t in instance.tables}
    dtype = instance.workload.weight_dtype.value
    per_device: dict[int, list[Shard]] = {}
    for s in plan.shards:
        per_device.setdefault(s.device, []).append(s)
    out = []
    for d, shards in sorted(per_device.items()):
        if any(s.replicated or s.kernel is not Kernel.fused or s.height(tables[s.table]) != tables[s.table].rows for s in shards):
            continue
        feats = []
        for s in shards:
            t = tables[s.table]
            width = s.width(t)
            piece = t if width == t.dim else t.model_copy(update={"name": f"{t.name}[{s.col_offset}:{s.col_offset + width}]", "dim": width})
            f = table_features(piece, dtype)
            f["histogram"] = table_histogram(t, instance.workload.batch_size).tolist()
            feats.append(f)
        out.append({
            "kind": "compute", "backend": evaluation.backend, "judge": evaluation.judge, "hardware": instance.topology.hardware,
            "batch_size": instance.workload.batch_size, "optimizer": instance.workload.optimizer.value, "tables": feats,
            "fwd_compute": float(evaluation.costs.fwd_compute[d]), "bwd_compute": float(evaluation.costs.bwd_compute[d]),
            "origin": {**origin, "device": d},
        })
    return out


def sample(pool: TablePool, settings: CollectSettings, k: int, cache: Any = None) -> dict[str, Any]:
    """Sample k as the line written for it: its id, the pool, and a comm or compute sample (by its own draw)."""
    kind_rng = np.random.default_rng([settings.seed, k, 0])
    if kind_rng.random() < settings.comm_fraction:
        body = comm_sample(pool, settings, k)
    else:
        body = compute_sample(pool, settings, k, cache)
    return {"id": k, "pool": pool.name, **body}


@dataclass(frozen=True)
class CollectBatch:
    """A batch of sample ids: one task for an engine (shardopt.measure.engine)."""

    pool: TablePool
    settings: CollectSettings
    ids: tuple[int, ...]


def collect_batch(job: CollectBatch) -> list[dict[str, Any]]:
    """The samples of one batch (on the worker's own measurement cache)."""
    return [sample(job.pool, job.settings, k) for k in job.ids]


def _check_settings(settings: CollectSettings) -> None:
    if settings.samples < 1:
        raise CollectError(f"samples: {settings.samples} must be >= 1")
    if settings.max_tables < 1:
        raise CollectError(f"max_tables: {settings.max_tables} must be >= 1")
    if not 1 <= settings.min_tables <= settings.max_tables:
        raise CollectError(f"min_tables: {settings.min_tables} must be between 1 and max_tables ({settings.max_tables})")
    if not 0 <= settings.comm_fraction <= 1:
        raise CollectError(f"comm_fraction: {settings.comm_fraction} must be in [0, 1]")
    if settings.backend not in ("sim", "cpu", "cuda"):
        raise CollectError(f"backend: unknown backend {settings.backend!r} (known: sim, cpu, cuda)")


def collect(
    pool: TablePool,
    out: Path,
    settings: CollectSettings,
    *,
    progress: Callable[[int, int], None] | None = None,
    cache: Any = None,
    engine: Any = None,
    batch: int = 16,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Append the samples of ids 0..N-1 not yet in `out`; return counts and throughput.

    `deadline` (time.monotonic seconds) stops a local collection before the next sample once passed (`stopped`:
    "deadline" in the summary): the samples written so far are whole, and a later run resumes after them.

    Without an engine (or with the local one) the samples are drawn here one by one, each line written and synced
    as it is made. On a Ray engine the ids go out in batches of `batch`, one task each (timing tasks ask for a GPU
    on the cuda backend), and this process, the one writer, appends each batch's lines as it comes back: lines may
    be out of id order, never twice (ids already in the file are skipped on resume)."""
    from shardopt.measure.engine import LocalEngine, Resources, results, timing_resources

    _check_settings(settings)
    if batch < 1:
        raise CollectError(f"batch: {batch} must be >= 1")
    out.parent.mkdir(parents=True, exist_ok=True)
    have = existing_ids(out)
    todo = [k for k in range(settings.samples) if k not in have]
    start = time.perf_counter()
    done = 0
    with out.open("a") as f:

        def write(lines: list[dict[str, Any]]) -> None:
            nonlocal done
            for doc in lines:
                f.write(json.dumps(doc) + "\n")
            f.flush()
            os.fsync(f.fileno())
            done += len(lines)
            if progress is not None:
                progress(len(have) + done, settings.samples)

        stopped = "done"
        if engine is None or isinstance(engine, LocalEngine):
            for k in todo:
                if deadline is not None and time.monotonic() >= deadline:
                    stopped = "deadline"
                    break
                write([sample(pool, settings, k, cache)])
        else:
            jobs = [CollectBatch(pool, settings, tuple(todo[i:i + batch])) for i in range(0, len(todo), batch)]
            resources = timing_resources(settings.backend) if settings.backend != "sim" else Resources()
            with results(engine, collect_batch, jobs, resources=resources) as batches:
                for _, lines in batches:
                    write(sorted(lines, key=lambda d: d["id"]))
    elapsed = time.perf_counter() - start
    return {
        "file": str(out),
        "requested": settings.samples,
        "already_present": len(have),
        "collected": done,
        "stopped": stopped,
        "seconds": elapsed,
        "samples_per_minute": done / elapsed * 60 if elapsed > 0 and done else 0.0,
    }


def read_samples(path: str | Path, kind: str | None = None) -> Iterator[dict[str, Any]]:
    """The samples of a JSONL file (gzip-compressed when its name ends in .gz, as the committed data is)."""
    import gzip

    path = Path(path)
    opener = gzip.open(path, "rt") if path.suffix == ".gz" else path.open()
    with opener as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as exc:  # (its own position says "line 1": the line is parsed alone)
                    raise CollectError(f"{path}: line {number}: not a JSON sample ({exc.msg}, column {exc.colno})") from None
                if not isinstance(doc, dict):
                    raise CollectError(f"{path}: line {number}: not a JSON sample (a {type(doc).__name__}, not an object)")
                if kind is None or doc.get("kind") == kind:
                    yield doc
