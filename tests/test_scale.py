"""`shardopt scale`: a smaller instance that is still a valid instance, as tight in memory, with its access
statistics moved with the batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from shardopt.cli.main import app
from shardopt.core.feasibility import infeasibility_reason
from shardopt.core.ir import ACCESS_BINS, load_instance
from shardopt.core.memory import table_bytes_array
from shardopt.data.scale import ScaleError, rescale_histogram, scale_instance

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "instances" / "examples" / "small.json"


def test_scaled_instance_is_valid_and_as_tight() -> None:
    inst = load_instance(SMALL)
    small = scale_instance(inst, batch_size=1024, max_rows=50_000)
    assert small.workload.batch_size == 1024
    assert max(t.rows for t in small.tables) <= 50_000
    assert [t.name for t in small.tables] == [t.name for t in inst.tables]
    before = table_bytes_array(inst).sum() / sum(inst.topology.capacities())
    after = table_bytes_array(small).sum() / sum(small.topology.capacities())
    assert after == pytest.approx(before, rel=0.05) or after < before  # capacities never cut below a table that fitted
    assert infeasibility_reason(small) is None
    assert small.metadata["scaled_from"]["hash"] == inst.content_hash()
    assert small.name.endswith("-b1024-r50000")


def test_memory_keep_and_bad_settings() -> None:
    inst = load_instance(SMALL)
    kept = scale_instance(inst, batch_size=512, memory="keep")
    assert kept.topology.capacities() == inst.topology.capacities()
    for kwargs in (dict(batch_size=0), dict(max_rows=-3), dict(batch_size=2.5), dict(memory="shrink")):
        with pytest.raises(ScaleError):
            scale_instance(inst, **kwargs)


def test_histogram_moves_with_the_batch() -> None:
    h = [0.0] * ACCESS_BINS
    h[5] = 1.0  # every row hit 17-32 times a batch
    assert rescale_histogram(h, 1.0) == h
    half = rescale_histogram(h, 0.5)
    assert half[4] == pytest.approx(1.0)  # 8-16 times at half the batch
    tiny = rescale_histogram(h, 1 / 1024)
    assert tiny[0] == pytest.approx(1.0)  # rarely hit: the rows that are hit, once
    double = rescale_histogram(h, 2.0)
    assert double[6] == pytest.approx(1.0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=ACCESS_BINS, max_size=ACCESS_BINS).filter(lambda v: sum(v) > 0.1),
       st.floats(1e-4, 1e3))
def test_rescaled_histograms_are_histograms(raw: list[float], ratio: float) -> None:
    h = [x / sum(raw) for x in raw]
    out = rescale_histogram(h, ratio)
    assert len(out) == ACCESS_BINS and all(x >= 0 for x in out) and sum(out) == pytest.approx(1.0)


def test_cli_scale(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    r = CliRunner().invoke(app, ["scale", str(SMALL), "--batch-size", "256", "--max-rows", "1000", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["batch_size"] == [16384, 256] and doc["model_bytes"][1] < doc["model_bytes"][0]
    assert load_instance(out).workload.batch_size == 256
    r = CliRunner().invoke(app, ["scale", str(SMALL), "--out", str(out)])
    assert r.exit_code == 2 and "nothing to change" in r.output
    r = CliRunner().invoke(app, ["scale", str(SMALL), "--batch-size", "0", "--out", str(out)])
    assert r.exit_code == 2 and "batch_size" in r.output


def test_cli_scale_relabels_the_hardware(tmp_path: Path) -> None:
    """`--hardware` names the machine the instance will be judged on (the GPU campaign's suite names the GPU, so that
    `auto` plans it with the model calibrated there); the tables and memory stay as they were."""
    out = tmp_path / "h.json"
    r = CliRunner().invoke(app, ["scale", str(SMALL), "--hardware", "h200", "--out", str(out)])
    assert r.exit_code == 0, r.output
    before, after = load_instance(SMALL), load_instance(out)
    assert before.topology.hardware == "v100" and after.topology.hardware == "h200"
    assert after.tables == before.tables and after.topology.capacities() == before.topology.capacities()
    assert after.metadata["scaled_from"]["hardware"] == ["v100", "h200"]
    r = CliRunner().invoke(app, ["scale", str(SMALL), "--hardware", "tpu9", "--out", str(out)])
    assert r.exit_code == 2 and "hardware: 'tpu9' is not a known hardware profile" in r.output
