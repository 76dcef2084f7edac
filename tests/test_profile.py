"""`shardopt profile` (issue 'planner', item 4): pooling factors and access histograms from a sample of the user's
batches - saved KeyedJaggedTensors or JSON lines - checked against figures computed here by hand, and every bad
input refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shardopt.cli import app
from shardopt.core.ir import instance_from_dict, load_instance, save
from shardopt.core.stats import histogram_of_counts


def _instance(batch: int = 4):
    doc = {
        "tables": [{"name": "user", "rows": 100, "dim": 8, "pooling_factor": 1.0, "access": {"zipf": 0.9}},
                   {"name": "item", "rows": 50, "dim": 8, "pooling_factor": 1.0, "access": {"zipf": 0.9}},
                   {"name": "cold", "rows": 10, "dim": 8, "pooling_factor": 3.0, "access": {"zipf": 0.5}}],
        "topology": {"num_devices": 2, "devices_per_host": 2, "memory_bytes": 10**8, "hardware": "v100"},
        "workload": {"batch_size": batch, "optimizer": "sgd"},
        # as import-torchrec writes it: item is read by two features
        "metadata": {"features": {"user": ["user_id"], "item": ["item_id", "item_seen"], "cold": ["cold"]}},
    }
    return instance_from_dict(doc)


BATCHES = [  # two batches of 4 samples
    {"user_id": [[1], [2, 2], [], [7]], "item_id": [[3], [3], [4], []], "item_seen": [[3, 5], [], [], [9]]},
    {"user_id": [[1], [1], [1], [2]], "item_id": [[0], [1], [2], [3]], "item_seen": [[], [], [], []]},
]


def _write(tmp_path: Path) -> tuple[Path, Path]:
    inst_path, data = tmp_path / "inst.json", tmp_path / "batches.jsonl"
    save(_instance(), inst_path)
    data.write_text("\n".join(json.dumps(b) for b in BATCHES) + "\n")
    return inst_path, data


def _expected_histogram(batches: list[dict], features: list[str]) -> list[float]:
    """By hand: per batch (4 samples = the instance's batch), each row's count over the table's features."""
    per_bin, unique = np.zeros(17), 0
    for b in batches:
        ids = [i for f in features for s in b[f] for i in s]
        shares, u = histogram_of_counts(np.bincount(ids))
        per_bin += np.asarray(shares) * u
        unique += u
    return list(per_bin / unique)


def test_json_lines_give_each_table_its_ids_per_sample_and_histogram(tmp_path: Path) -> None:
    inst_path, data = _write(tmp_path)
    out = tmp_path / "profiled.json"
    r = CliRunner().invoke(app, ["profile", str(inst_path), "--batches", str(data), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["batches"] == 2 and doc["samples"] == 8 and doc["unprofiled"] == ["cold"]
    got = {t.name: t for t in load_instance(out).tables}
    assert got["user"].pooling_factor == pytest.approx(8 / 8)  # 1+2+0+1 + 1+1+1+1 ids over 8 samples
    assert got["item"].pooling_factor == pytest.approx((3 + 3) / 8 + (4 + 0) / 8)  # item_id and item_seen add up
    assert got["user"].access.histogram == pytest.approx(_expected_histogram(BATCHES, ["user_id"]))
    assert got["item"].access.histogram == pytest.approx(_expected_histogram(BATCHES, ["item_id", "item_seen"]))
    assert got["cold"].pooling_factor == 3.0 and got["cold"].access.zipf == 0.5  # no data: as it was
    meta = load_instance(out).metadata["profiled"]
    assert meta["tables"] == ["item", "user"] and meta["histogram_batch_size"] == 4


def test_saved_keyed_jagged_tensors_read_the_same(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    from torchrec import KeyedJaggedTensor

    inst_path, data = _write(tmp_path)
    folder = tmp_path / "kjt"
    folder.mkdir()
    for k, b in enumerate(BATCHES):
        keys = list(b)
        lengths = torch.tensor([len(s) for f in keys for s in b[f]])
        values = torch.tensor([i for f in keys for s in b[f] for i in s], dtype=torch.int64)
        torch.save(KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths), folder / f"batch-{k}.pt")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for src, out in ((data, a), (folder, b)):
        r = CliRunner().invoke(app, ["profile", str(inst_path), "--batches", str(src), "--out", str(out)])
        assert r.exit_code == 0, r.stderr
    assert [t.model_dump() for t in load_instance(a).tables] == [t.model_dump() for t in load_instance(b).tables]
    assert "pooling factor 1 -> 1.000" in " ".join(r.stdout.split())


def test_bad_batches_are_refused_by_name(tmp_path: Path) -> None:
    inst_path, data = _write(tmp_path)
    out = tmp_path / "o.json"

    def refused(lines: list[dict] | str, *words: str, extra: tuple[str, ...] = ()) -> None:
        f = tmp_path / "bad.jsonl"
        f.write_text(lines if isinstance(lines, str) else "\n".join(json.dumps(x) for x in lines))
        r = CliRunner().invoke(app, ["profile", str(inst_path), "--batches", str(f), "--out", str(out), *extra])
        assert r.exit_code == 2 and all(w in r.stderr for w in words), r.stderr
        assert not out.exists()

    refused([{"who": [[1]]}], "feature 'who' names no table", "--feature-map")
    refused([{"user_id": [[100]]}], "id 100", "'user'", "100 rows")
    refused([{"user_id": [[1], [2]], "item_id": [[1]]}], "different numbers of samples")
    refused("{not json", "bad.jsonl:1", "not JSON")
    refused([{"user_id": [[1.5]]}], "ids must be integers")
    refused([{"who": [[1]]}], "no table 'nope'", extra=("--feature-map", '{"who": "nope"}'))
    r = CliRunner().invoke(app, ["profile", str(inst_path), "--batches", str(tmp_path / "missing.jsonl"), "--out", str(out)])
    assert r.exit_code == 2 and "missing.jsonl: no such file" in r.stderr
    # a feature mapped by hand is profiled into its table
    f = tmp_path / "mapped.jsonl"
    f.write_text(json.dumps({"who": [[1], [2]]}) + "\n")
    r = CliRunner().invoke(app, ["profile", str(inst_path), "--batches", str(f), "--out", str(out), "--feature-map", '{"who": "cold"}'])
    assert r.exit_code == 0, r.stderr
    assert {t.name: t.pooling_factor for t in load_instance(out).tables}["cold"] == pytest.approx(1.0)
