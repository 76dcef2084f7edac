"""The machine's speed level (shardopt.measure.machine_level): anchors, a reading on real kernels, the card's `level`,
the neural model scaled by it, and `shardopt costmodel level`."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodels.cards import CardError, load_card
from costmodels.neural import NeuralCostModel
from costmodels.registry import get_cost_model
from costmodels.store import SHIPPED_DIR
from shardopt.cli import app
from shardopt.core.fingerprint import Fingerprint, cpu_fingerprint
from shardopt.core.ir import load_instance
from shardopt.measure.machine_level import ANCHORS, LevelError, at_level, choose_anchors, read_level, sample_total

ROOT = Path(__file__).resolve().parents[1]
CPU_INSTANCE = ROOT / "instances" / "suites" / "cpu-test" / "cpu-test-s1-0001.json"


def run(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def _fake(i: int, total: float) -> dict:
    return {"id": i, "kind": "compute", "fwd_compute": total / 3, "bwd_compute": 2 * total / 3, "tables": [], "batch_size": 1024}


@pytest.fixture(scope="module")
def cpu_samples() -> list[dict]:
    """Four tiny device samples timed on this machine's CPU (fbgemm's TBE), as a calibration collects them."""
    from shardopt.data.pools import load_pool, standard_pool_path
    from shardopt.measure.collect import CollectSettings, compute_sample

    cs = CollectSettings(backend="cpu", samples=4, max_tables=2, seed=3, hardware="cpu", vary_batch=True, batch_choices=(1024,),
                         comm_fraction=0.0, repeats=3, warmup=1, max_rows=2000, augment=True)
    pool = load_pool(standard_pool_path("test"))
    return [{"id": k, **compute_sample(pool, cs, k, False)} for k in range(4)]


def test_anchors_spread_over_the_middle_and_upper_costs_and_are_the_same_every_time():
    samples = [_fake(i, float(t)) for i, t in enumerate(np.random.default_rng(0).permutation(np.arange(1, 201)))]
    anchors = choose_anchors(samples)
    totals = sorted(sample_total(a) for a in anchors)
    assert len(anchors) == ANCHORS and len({a["id"] for a in anchors}) == ANCHORS
    assert totals[0] >= 50 and totals[-1] <= 200 and totals[-1] - totals[0] >= 100  # not the cheapest 30 %, spread
    assert [a["id"] for a in choose_anchors(list(reversed(samples)))] == [a["id"] for a in anchors]
    assert len(choose_anchors(samples[:5])) <= 5
    with pytest.raises(LevelError):
        choose_anchors([{"kind": "comm"}])


def test_samples_timed_at_a_level_are_moved_to_the_reference():
    moved = at_level([_fake(0, 9.0)], 0.9)[0]
    assert moved["fwd_compute"] == pytest.approx(3.0 / 0.9) and moved["bwd_compute"] == pytest.approx(6.0 / 0.9)
    assert moved["level"] == 0.9


def test_a_scaled_neural_model_scales_compute_and_leaves_the_all_to_all():
    inst = load_instance(CPU_INSTANCE)
    from solvers.catalog import get_solver

    plan = get_solver("greedy").solve(inst, get_cost_model("analytic"), seed=0).plan
    base = NeuralCostModel(SHIPPED_DIR / "neural-cpu-zen5.npz").plan_costs(inst, plan)
    half = NeuralCostModel(SHIPPED_DIR / "neural-cpu-zen5.npz", compute_scale=0.5).plan_costs(inst, plan)
    assert np.allclose(half.fwd_compute, base.fwd_compute / 2) and np.allclose(half.bwd_compute, base.bwd_compute / 2)
    assert np.allclose(half.fwd_comm, base.fwd_comm) and half.max_cost < base.max_cost
    with pytest.raises(ValueError, match="compute_scale"):
        NeuralCostModel(SHIPPED_DIR / "neural-cpu-zen5.npz", compute_scale=0.0)


def _store_copy(store: Path, model_id: str, level: dict | None = None, fingerprint: Fingerprint | None = None,
                test_samples: list[dict] | None = None) -> Path:
    shipped = load_card(SHIPPED_DIR / "neural-cpu-zen5.card.json", source="shipped")
    folder = store / model_id
    (folder / "data").mkdir(parents=True)
    shutil.copy2(shipped.model_path("neural"), folder / "neural.npz")
    shutil.copy2(shipped.model_path("analytic"), folder / "profile.json")
    card = replace(shipped, id=model_id, fingerprint=fingerprint or cpu_fingerprint(), models={"neural": "neural.npz", "analytic": "profile.json"},
                   source="user", path=None, level=level or {})
    card.save(folder / "card.json")
    if test_samples is not None:
        with gzip.open(folder / "data" / "test.jsonl.gz", "wt") as f:
            for s in test_samples:
                f.write(json.dumps(s) + "\n")
    return folder


def test_a_cards_level_scales_the_model_named_by_its_id_or_its_file(tmp_path: Path):
    folder = _store_copy(tmp_path, "mine", level={"factor": 0.8, "date": "2026-11-29", "anchors": 24})
    assert get_cost_model("mine", models_dir=tmp_path).compute_scale == pytest.approx(0.8)
    assert get_cost_model(str(folder / "neural.npz")).compute_scale == pytest.approx(0.8)
    assert "level 0.800" in get_cost_model("mine", models_dir=tmp_path).describe()
    # an uncarded file, and a card without a level, predict at their samples' level
    shutil.copy2(folder / "neural.npz", tmp_path / "loose.npz")
    assert get_cost_model(str(tmp_path / "loose.npz")).compute_scale == 1.0
    assert get_cost_model("neural-cpu-zen5").compute_scale == 1.0


@pytest.mark.parametrize("level", [{"factor": 0}, {"factor": "fast"}, {"factor": 9.0}, {"date": "2026-11-29"}, [0.9]])
def test_a_malformed_level_is_refused_naming_the_field(tmp_path: Path, level: object):
    folder = _store_copy(tmp_path, "mine")
    doc = json.loads((folder / "card.json").read_text())
    doc["level"] = level
    (folder / "card.json").write_text(json.dumps(doc))
    with pytest.raises(CardError, match=r"card\.json: level"):
        load_card(folder / "card.json")


def test_a_reading_on_the_cpu_follows_the_recorded_timings(cpu_samples: list[dict]):
    now = read_level(cpu_samples, "cpu", repeats=3, warmup=1)
    assert now.anchors == 4 and now.factor > 0 and now.spread[0] <= now.factor <= now.spread[1]
    # the same kernels recorded four times slower: this machine now runs at about a quarter of that
    slower = [{**s, "fwd_compute": 4 * s["fwd_compute"], "bwd_compute": 4 * s["bwd_compute"]} for s in cpu_samples]
    assert read_level(slower, "cpu", repeats=3, warmup=1).factor < 0.6 * now.factor


def test_costmodel_level_reads_and_records_this_machines_level(tmp_path: Path, cpu_samples: list[dict]):
    folder = _store_copy(tmp_path, "mine", test_samples=cpu_samples)
    r = run("costmodel", "level", "mine", "--models", tmp_path, "--json")
    assert r.exit_code == 0, r.output
    first = load_card(folder / "card.json").level
    assert first["factor"] > 0 and first["anchors"] == len(choose_anchors(cpu_samples)) and first["previous"] is None and first["command"].startswith("shardopt ")
    assert get_cost_model("mine", models_dir=tmp_path).compute_scale == pytest.approx(first["factor"])
    assert run("costmodel", "level", "mine", "--models", tmp_path).exit_code == 0
    assert load_card(folder / "card.json").level["previous"]["factor"] == first["factor"]


def test_a_shipped_models_level_goes_on_a_copy_in_the_store_that_auto_prefers(tmp_path: Path, cpu_samples: list[dict],
                                                                              monkeypatch: pytest.MonkeyPatch):
    import costmodels.store as store_module
    from costmodels.auto import choose_cost_model
    from shardopt.measure.machine_level import write_anchors

    shipped_dir = tmp_path / "package"  # a package whose shipped calibrated model is of this machine
    shipped_dir.mkdir()
    zen5 = load_card(SHIPPED_DIR / "neural-cpu-zen5.card.json", source="shipped")
    shutil.copy2(zen5.model_path("neural"), shipped_dir / "here.npz")
    shutil.copy2(zen5.model_path("analytic"), shipped_dir / "here.json")
    write_anchors(cpu_samples, shipped_dir / "here.anchors.jsonl.gz")
    replace(zen5, id="here", fingerprint=cpu_fingerprint(), models={"neural": "here.npz", "analytic": "here.json"},
            anchors="here.anchors.jsonl.gz", path=None).save(shipped_dir / "here.card.json")
    monkeypatch.setattr(store_module, "SHIPPED_DIR", shipped_dir)
    store = tmp_path / "store"
    inst = load_instance(CPU_INSTANCE)
    assert choose_cost_model("auto", inst, store).card_id == "here"
    r = run("costmodel", "level", "here", "--models", store, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["id"] == "here-local"
    copy = load_card(store / "here-local" / "card.json")
    assert copy.source == "user" and copy.level["factor"] > 0 and copy.level["anchors"] == 4 and copy.anchors_path().is_file()
    assert not load_card(shipped_dir / "here.card.json").level  # the shipped card is untouched
    choice = choose_cost_model("auto", inst, store)
    assert choice.card_id == "here-local" and choice.model.compute_scale == pytest.approx(copy.level["factor"])
    # read again: the copy is updated, not copied again
    assert run("costmodel", "level", "here", "--models", store).exit_code == 0
    assert load_card(store / "here-local" / "card.json").level["previous"]["factor"] == copy.level["factor"]


def test_costmodel_level_refuses_what_it_cannot_anchor(tmp_path: Path, cpu_samples: list[dict]):
    r = run("costmodel", "level", "nothing-here", "--models", tmp_path)
    assert r.exit_code == 2 and "no calibrated model 'nothing-here'" in r.output
    r = run("costmodel", "level", "neural-cpu-zen5", "--models", tmp_path)
    assert r.exit_code == 2 and ("ships without anchor samples" in r.output or "this machine is" in r.output)
    folder = _store_copy(tmp_path, "broken", test_samples=cpu_samples)
    (folder / "anchors.jsonl.gz").write_text("not gzip")
    doc = json.loads((folder / "card.json").read_text())
    doc["anchors"] = "anchors.jsonl.gz"
    (folder / "card.json").write_text(json.dumps(doc))
    r = run("costmodel", "level", "broken", "--models", tmp_path)
    assert r.exit_code == 2 and "anchors.jsonl.gz: not gzipped JSON lines" in r.output
    shutil.rmtree(folder)
    other = Fingerprint(kind="cpu", name="Some CPU", vendor="GenuineIntel", family="6", model="143", cores=2)
    _store_copy(tmp_path, "theirs", fingerprint=other, test_samples=cpu_samples)
    r = run("costmodel", "level", "theirs", "--models", tmp_path)
    assert r.exit_code == 2 and "family 6 model 143" in r.output and "this machine is" in r.output
    _store_copy(tmp_path, "bare")
    r = run("costmodel", "level", "bare", "--models", tmp_path)
    assert r.exit_code == 2 and "test.jsonl.gz: no such file" in r.output
