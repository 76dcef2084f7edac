"""`shardopt profile`: each table's pooling factor and access histogram from a sample of the user's own batches.

Why: a plan is only as right as the pooling factors it was made for, and TorchRec users plan with a guess (TorchRec's
default 1.0 per feature; TorchRec issue #2416 asks for exactly this). A few saved batches say how many ids each
feature sends per sample and how the ids repeat within a batch, which is what the cost models price.

Batches come as
- saved `KeyedJaggedTensor`s (`torch.save(kjt, "batch-0.pt")`: one per file, or a list of them in one file), or
- a JSON-lines file, one batch per line: `{"feature": [[ids of sample 0], [ids of sample 1], ...], ...}`.

A feature belongs to the table whose feature names hold it (the instance's `metadata.features`, which
`import-torchrec` writes), else to the table of its own name, else to the table `feature_map` names. Per table: the
pooling factor is its features' ids per sample (lookups per sample add up); the histogram (the IR's 17 bins: the
share of unique rows by their access count within one batch) is measured on consecutive samples grouped into batches
of the instance's global batch size - the size it is priced at - and pooled over the groups (weighted by unique
rows); where the sample holds fewer samples than one such batch, on all of it, and the metadata says so.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardopt.core.errors import UserError
from shardopt.core.ir import Instance, instance_from_dict
from shardopt.core.stats import ACCESS_BINS, histogram_of_counts


class ProfileError(UserError, ValueError):
    """The batches cannot profile the instance (the message names the file, feature or table)."""


@dataclass
class _TableTrace:
    """One table's lookups, sample by sample, in batch order: per sample its ids (all its features')."""

    lengths: list[np.ndarray] = field(default_factory=list)  # per batch: ids per sample
    ids: list[np.ndarray] = field(default_factory=list)  # per batch: the ids, sample after sample


@dataclass
class Profile:
    """What `profile_instance` measured: the new instance and, per table, the figures it took from the batches."""

    instance: Instance
    tables: dict[str, dict[str, Any]]  # name -> {pooling_factor, unique_rows, samples, batch_size_measured}
    unprofiled: list[str]  # tables no feature of the batches reads (left as they were)
    batches: int
    samples: int


def read_batches(paths: list[Path]) -> Iterator[dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Each batch as {feature: (lengths per sample, ids)} from saved KeyedJaggedTensors or JSON lines (module
    docstring)."""
    for path in paths:
        if not path.exists():
            raise ProfileError(f"{path}: no such file or directory")
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        if not files:
            raise ProfileError(f"{path}: the folder holds no batch files")
        for f in files:
            if f.suffix in (".jsonl", ".json"):
                yield from _json_batches(f)
            else:
                yield from _kjt_batches(f)


def _json_batches(path: Path) -> Iterator[dict[str, tuple[np.ndarray, np.ndarray]]]:
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ProfileError(f"{path}:{n}: not JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(doc, dict) or not doc:
                raise ProfileError(f"{path}:{n}: expected one batch as {{feature: [[ids of a sample], ...]}}")
            batch = {}
            for feature, samples in doc.items():
                if not isinstance(samples, list) or not all(isinstance(s, list) for s in samples):
                    raise ProfileError(f"{path}:{n}: {feature!r}: expected a list of samples, each a list of ids")
                flat = [i for s in samples for i in s]
                if not all(isinstance(i, int) and not isinstance(i, bool) for i in flat):
                    raise ProfileError(f"{path}:{n}: {feature!r}: ids must be integers")
                try:
                    ids = np.array(flat, dtype=np.int64)
                except OverflowError:
                    raise ProfileError(f"{path}:{n}: {feature!r}: an id is beyond 64 bits") from None
                batch[feature] = (np.array([len(s) for s in samples], dtype=np.int64), ids)
            yield batch


def _kjt_batches(path: Path) -> Iterator[dict[str, tuple[np.ndarray, np.ndarray]]]:
    import torch

    try:
        obj = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix, named
        raise ProfileError(f"{path}: not a saved KeyedJaggedTensor (torch.load: {str(exc)[:200]})") from None
    for k, kjt in enumerate(obj if isinstance(obj, (list, tuple)) else [obj]):
        if not all(hasattr(kjt, a) for a in ("keys", "lengths", "values", "stride")):
            raise ProfileError(f"{path}{f'[{k}]' if isinstance(obj, (list, tuple)) else ''}: {type(kjt).__name__} is not a KeyedJaggedTensor")
        lengths = kjt.lengths().to(torch.int64).numpy()
        values = kjt.values().to(torch.int64).numpy()
        stride = int(kjt.stride())
        batch, at = {}, 0
        for j, key in enumerate(kjt.keys()):
            lens = lengths[j * stride : (j + 1) * stride]
            n = int(lens.sum())
            batch[key] = (lens, values[at : at + n])
            at += n
        yield batch


def feature_tables(instance: Instance, feature_map: dict[str, str] | None = None) -> dict[str, str]:
    """feature -> table: the instance's own feature names, each table's name, then `feature_map` (which wins)."""
    from shardopt.data.torchrec_configs import feature_names_of

    out = {}
    for table, features in feature_names_of(instance).items():
        out[table] = table
        for f in features:
            out[f] = table
    names = {t.name for t in instance.tables}
    for f, t in (feature_map or {}).items():
        if t not in names:
            raise ProfileError(f"--feature-map: {f!r} -> {t!r}: the instance has no table {t!r}")
        out[f] = t
    return out


def profile_instance(instance: Instance, paths: list[Path], feature_map: dict[str, str] | None = None) -> Profile:
    """The instance with each table that the batches read given its measured pooling factor and access histogram."""
    owner = feature_tables(instance, feature_map)
    rows = {t.name: t.rows for t in instance.tables}
    traces: dict[str, _TableTrace] = defaultdict(_TableTrace)
    batches = samples = 0
    for batch in read_batches(paths):
        per_table: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        sizes = {len(lens) for lens, _ in batch.values()}
        if len(sizes) != 1:
            raise ProfileError(f"batch {batches}: its features hold different numbers of samples ({sorted(sizes)})")
        for feature, (lens, ids) in batch.items():
            table = owner.get(feature)
            if table is None:
                raise ProfileError(f"batch {batches}: feature {feature!r} names no table of the instance (its tables' features: "
                                   f"{', '.join(sorted(owner)[:8])}{', ...' if len(owner) > 8 else ''}); map it with --feature-map")
            if ids.size and (ids.min() < 0 or ids.max() >= rows[table]):
                bad = int(ids.max()) if ids.max() >= rows[table] else int(ids.min())
                raise ProfileError(f"batch {batches}: feature {feature!r} looks up id {bad}, outside table {table!r}'s {rows[table]:,} rows: "
                                   "the batches are not of this instance")
            per_table[table].append((lens, ids))
        for table, parts in per_table.items():
            lens = np.sum([p[0] for p in parts], axis=0)
            # a sample's ids over the table's features, sample by sample (the order within a sample does not count)
            sample = np.concatenate([np.repeat(np.arange(len(p[0])), p[0]) for p in parts])
            ids = np.concatenate([p[1] for p in parts])[np.argsort(sample, kind="stable")]
            traces[table].lengths.append(lens)
            traces[table].ids.append(ids)
        batches += 1
        samples += sizes.pop()
    if batches == 0:
        raise ProfileError(f"{', '.join(map(str, paths))}: no batches")
    doc = instance.model_dump(mode="json")
    measured: dict[str, dict[str, Any]] = {}
    group = instance.workload.batch_size
    for t in doc["tables"]:
        trace = traces.get(t["name"])
        if trace is None:
            continue
        lengths = np.concatenate(trace.lengths)
        ids = np.concatenate(trace.ids)
        histogram, unique, measured_at = _grouped_histogram(lengths, ids, group)
        t["pooling_factor"] = float(lengths.sum() / len(lengths))
        if unique:
            t["access"] = {"histogram": histogram}
        measured[t["name"]] = {"pooling_factor": t["pooling_factor"], "unique_rows": unique, "samples": int(len(lengths)),
                               "batch_size_measured": measured_at}
    unprofiled = sorted({t.name for t in instance.tables} - set(measured))
    doc["metadata"] = {**doc.get("metadata", {}), "profiled": {
        "source": [str(p) for p in paths], "batches": batches, "samples": samples, "tables": sorted(measured), "unprofiled": unprofiled,
        "histogram_batch_size": min((m["batch_size_measured"] for m in measured.values()), default=None),
        "note": "pooling factors are ids per sample; histograms are measured within batches of the instance's batch size "
                "(histogram_batch_size smaller: the sample held fewer samples than one such batch)"}}
    if "assumed" in doc["metadata"]:  # (the measured tables no longer assume a pooling factor or an access profile)
        for key in ("pooling_factor", "access"):
            a = doc["metadata"]["assumed"].get(key)
            if isinstance(a, dict) and isinstance(a.get("tables"), list):
                a["tables"] = [n for n in a["tables"] if n not in measured]
    return Profile(instance_from_dict(doc, "shardopt profile"), measured, unprofiled, batches, samples)


def _grouped_histogram(lengths: np.ndarray, ids: np.ndarray, group: int) -> tuple[list[float], int, int]:
    """(histogram, unique rows over the groups, samples per group) of consecutive samples in groups of `group`."""
    ends = np.concatenate(([0], np.cumsum(lengths)))
    n = len(lengths)
    size = min(group, n)
    per_bin = np.zeros(ACCESS_BINS)
    unique = 0
    for g0 in range(0, n - size + 1, size):  # (a short last group is left out: its counts are of a smaller batch)
        chunk = ids[ends[g0] : ends[g0 + size]]
        if chunk.size == 0:
            continue
        shares, u = histogram_of_counts(np.bincount(chunk))
        per_bin += np.asarray(shares) * u
        unique += u
    if unique == 0:
        return [0.0] * ACCESS_BINS, 0, size
    h = per_bin / unique
    return [float(x) for x in h / h.sum()], unique, size
