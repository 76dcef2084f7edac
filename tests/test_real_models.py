"""Real models' instances (instances/real) and the `skewed` family: they rebuild byte for byte from what is committed,
cite their source, validate and round-trip; the family has the shape it promises."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shardopt.cli import app
from shardopt.core.ir import IRError, dumps, load_instance
from shardopt.core.memory import table_bytes_array
from shardopt.core.plan_check import check_plan
from shardopt.data.pools import load_pool, standard_pool_path
from shardopt.data.suites import (
    FAMILIES,
    SKEWED_DEVICES,
    SKEWED_HOT_POOLING,
    SKEWED_HOT_ROWS,
    SKEWED_HOT_TABLES,
    SKEWED_SMALL_MAX_ROWS,
    SKEWED_SMALL_TABLES,
    generate_instance,
)

pytest.importorskip("torchrec")

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "instances" / "real"
MANIFEST = json.loads((REAL / "real.json").read_text())
REAL_NAMES = sorted(MANIFEST["instances"])


@pytest.mark.parametrize("name", REAL_NAMES)
def test_real_instance_rebuilds_byte_for_byte(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    entry = MANIFEST["instances"][name]
    argv = shlex.split(entry["command"])
    assert argv[:2] == ["shardopt", "import-torchrec"]
    args = argv[1:]
    args[args.index("--out") + 1] = str(tmp_path / name)
    monkeypatch.chdir(ROOT)  # the commands name the configs relative to the repository, as the metadata records them
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rebuilt = (tmp_path / name).read_bytes()
    assert rebuilt == (REAL / name).read_bytes()
    assert hashlib.sha256(rebuilt).hexdigest() == entry["sha256"]


@pytest.mark.parametrize("name", REAL_NAMES)
def test_real_instance_cites_its_configs(name: str):
    inst = load_instance(REAL / name)
    assert dumps(inst) + "\n" == (REAL / name).read_text()  # round trip
    meta = inst.metadata
    configs_path = ROOT / meta["provenance"].removeprefix("EmbeddingBagConfigs from JSON ")
    doc = json.loads(configs_path.read_text())
    assert meta["source"] == doc["source"] and len(meta["source"]) > 40
    assert [(t.name, t.rows, t.dim) for t in inst.tables] == [(c["name"], c["num_embeddings"], c["embedding_dim"]) for c in doc["tables"]]
    pooling = json.loads(configs_path.with_name(configs_path.name.replace(".tables.", ".pooling.")).read_text())
    for t, c in zip(inst.tables, doc["tables"]):
        assert t.pooling_factor == pytest.approx(sum(pooling[f] for f in c["feature_names"]))
    assert meta["assumed"]["pooling_factor"]["tables"] == []  # every pooling factor is the published one


def test_real_dlrmv2_matches_the_published_sizes():
    """MLPerf's DLRMv2: 26 tables of dim 128, five of 40M rows, 97.36 GiB of fp32 weights (TorchRec's README)."""
    inst = load_instance(REAL / "mlperf-dlrmv2-8xh100.json")
    assert len(inst.tables) == 26 and {t.dim for t in inst.tables} == {128}
    assert sum(t.rows == 40_000_000 for t in inst.tables) == 5
    assert sum(t.rows for t in inst.tables) * 128 * 4 / 2**30 == pytest.approx(97.36, abs=0.01)
    assert max(t.pooling_factor for t in inst.tables) == 100


def test_configs_citation_fields_are_checked(tmp_path: Path):
    from shardopt.data.torchrec_configs import configs_citation, load_configs

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"source": 3, "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 8}]}))
    with pytest.raises(IRError, match="source: 3 is not a non-empty string"):
        configs_citation(str(bad))
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"sources": "x", "tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 8}]}))
    with pytest.raises(IRError, match="sources: unknown field"):
        load_configs(str(odd))


def test_import_source_option_overrides_the_document(tmp_path: Path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"source": "the document", "tables": [{"name": "t", "num_embeddings": 1000, "embedding_dim": 8}]}))
    out = tmp_path / "i.json"
    args = ["import-torchrec", str(cfg), "--out", str(out), "--devices", "2", "--batch-size", "64"]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert load_instance(out).metadata["source"] == "the document"
    assert CliRunner().invoke(app, [*args, "--source", "a paper, table 2"]).exit_code == 0
    assert load_instance(out).metadata["source"] == "a paper, table 2"
    result = CliRunner().invoke(app, [*args, "--source", " "])
    assert result.exit_code != 0 and "--source" in result.output


@pytest.fixture(scope="module")
def skewed_instances():
    pool = load_pool(standard_pool_path("test"))
    return pool, [generate_instance(FAMILIES["skewed"], pool, 5, i, "test") for i in range(len(SKEWED_DEVICES))]


def test_skewed_family_shape(skewed_instances):
    pool, instances = skewed_instances
    pool_rows = {t.name: t.rows for t in pool.tables}
    assert [i.topology.num_devices for i in instances] == list(SKEWED_DEVICES)
    for inst in instances:
        hot = {h["name"] for h in inst.metadata["hot_tables"]}
        assert SKEWED_HOT_TABLES[0] <= len(hot) <= SKEWED_HOT_TABLES[1]
        small = [t for t in inst.tables if t.name not in hot]
        assert SKEWED_SMALL_TABLES[0] <= len(small) <= SKEWED_SMALL_TABLES[1]
        assert all(t.rows == pool_rows[t.name] < SKEWED_SMALL_MAX_ROWS for t in small)
        for t in inst.tables:
            if t.name in hot:
                assert SKEWED_HOT_ROWS[0] <= t.rows <= SKEWED_HOT_ROWS[1]
                assert SKEWED_HOT_POOLING[0] <= t.pooling_factor <= SKEWED_HOT_POOLING[1]
                assert abs(sum(t.access.histogram) - 1) < 1e-6
        # from 64 devices the hottest table carries more lookups than a device's fair share: the shape that asks for
        # splits that memory does not force
        lookups = np.array([t.pooling_factor * t.dim for t in inst.tables])
        if inst.topology.num_devices >= 64:
            assert lookups.max() / lookups.sum() > 1 / inst.topology.num_devices
        assert inst.workload.batch_size % inst.topology.num_devices == 0
        sizes = table_bytes_array(inst)
        assert sizes.sum() <= 0.6 * inst.topology.num_devices * inst.topology.capacity(0) + 1


def test_skewed_family_is_feasible_reproducible_and_round_trips(skewed_instances):
    from shardopt.core.feasibility import constructive_tiered_plan

    pool, instances = skewed_instances
    for inst in instances[:3]:
        plan = constructive_tiered_plan(inst)
        assert plan is not None and check_plan(inst, plan).ok
        text = dumps(inst)
        assert dumps(load_instance_text(text)) == text
    again = generate_instance(FAMILIES["skewed"], pool, 5, 2, "test")
    assert dumps(again) == dumps(instances[2])
    other = generate_instance(FAMILIES["skewed"], pool, 6, 2, "test")
    assert dumps(other) != dumps(instances[2])


def load_instance_text(text: str):
    from shardopt.core.ir import instance_from_dict

    return instance_from_dict(json.loads(text))
