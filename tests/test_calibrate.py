"""Calibration recovers a profile that generated the timings; calibrated profiles load as cost models."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel, device_compute_costs
from costmodels.calibrate import CalibrationError, agreement, calibrate, sample_states
from costmodels.registry import UnknownCostModelError, get_cost_model
from shardopt.cli import app
from shardopt.core.hardware import get_profile, load_profile, profile_from_dict, profile_to_dict
from shardopt.data.pools import generate_pool
from shardopt.measure.collect import CollectSettings, collect, read_samples

TRUTH = replace(get_profile("v100"), hbm_bandwidth=300e9, launch_overhead_s=25e-6, bwd_bandwidth_factor=0.4, l2_bandwidth_ratio=1.5)


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """Compute samples whose timings come from a known, different profile (so the right answer is known)."""
    path = tmp_path_factory.mktemp("cal") / "d.jsonl"
    collect(generate_pool(n=40, seed=2), path, CollectSettings(samples=60, max_tables=8, seed=1, comm_fraction=0.0, batch_size=4096))
    docs = list(read_samples(path))
    states, _ = sample_states(docs, get_profile("v100"))
    truth = device_compute_costs(states, TRUTH)
    for d, (f, b) in zip(docs, truth):
        d["fwd_compute"], d["bwd_compute"], d["backend"] = float(f), float(b), "test-truth"
    return docs


def test_calibration_recovers_the_generating_profile(samples):
    result = calibrate(samples, get_profile("v100"), holdout=0.25, seed=0)
    assert result.train_before.median_abs_rel_error_fwd > 0.5  # the data-sheet profile is far off
    assert result.train_after.median_abs_rel_error_fwd < 0.02
    assert result.train_after.median_abs_rel_error_bwd < 0.02
    assert result.holdout_after is not None and result.holdout_after.median_abs_rel_error_fwd < 0.02
    assert result.holdout_after.spearman_fwd > 0.99
    assert result.profile.hbm_bandwidth == pytest.approx(TRUTH.hbm_bandwidth, rel=0.05)


def test_too_few_samples(samples):
    with pytest.raises(CalibrationError, match="at least 5"):
        calibrate(samples[:3], get_profile("v100"))


def test_profile_files_round_trip_and_load_as_cost_models(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile_to_dict(TRUTH, calibration={"note": "x"})))
    assert load_profile(path) == TRUTH
    model = get_cost_model(f"analytic:{path}")
    assert isinstance(model, AnalyticCostModel)
    bad = profile_to_dict(TRUTH)
    bad["hbm_bandwidth"] = -1
    with pytest.raises(ValueError, match="hbm_bandwidth"):
        profile_from_dict(bad)
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(UnknownCostModelError, match="hbm_bandwidth"):
        get_cost_model(f"analytic:{tmp_path / 'bad.json'}")


def test_cli_calibrate(samples, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(s) + "\n" for s in samples))
    out = tmp_path / "prof.json"
    r = CliRunner().invoke(app, ["calibrate", str(data), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["train_after"]["median_abs_rel_error_fwd"] < 0.02
    prof = load_profile(out)
    assert json.loads(out.read_text())["calibration"]["backends"] == ["test-truth"]
    assert np.isclose(prof.hbm_bandwidth, TRUTH.hbm_bandwidth, rtol=0.05)
    r = CliRunner().invoke(app, ["calibrate", str(tmp_path / "missing.jsonl"), "--out", str(out)])
    assert r.exit_code == 2 and "no such file" in r.output
    r = CliRunner().invoke(app, ["calibrate", str(data), "--out", str(out), "--profile", "x100"])
    assert r.exit_code == 2 and "x100" in r.output


def test_cli_calibrate_fits_the_host_link_from_a_probe(samples, tmp_path):
    """--host-link: the first GPU lease's probe gives the profile its row-gather constants and the measured bulk-copy
    bandwidth, recorded with the calibration; a bad probe is refused naming the option and the file."""
    from pathlib import Path

    probe = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gpu-h200-2026-11-26" / "lease1" / "host-link.json"
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(s) + "\n" for s in samples))
    out = tmp_path / "prof.json"
    r = CliRunner().invoke(app, ["calibrate", str(data), "--out", str(out), "--host-link", str(probe), "--json"])
    assert r.exit_code == 0, r.output
    prof = load_profile(out)
    doc = json.loads(probe.read_text())
    assert prof.host_link_bandwidth == pytest.approx(min(doc["copy_h2d"]["gb_per_s"], doc["copy_d2h"]["gb_per_s"]) * 1e9)
    assert 40e6 < prof.host_row_rate < 60e6 and 100e9 < prof.host_gather_bandwidth < 170e9
    rec = json.loads(out.read_text())["calibration"]["host_link"]
    assert rec["gpu"] == "NVIDIA H200" and rec["max_rel_error"] < 0.05
    assert np.isclose(prof.hbm_bandwidth, TRUTH.hbm_bandwidth, rtol=0.05)  # the compute fit is unchanged by it
    bad = tmp_path / "probe.json"
    for text, why in (("{", "not valid JSON"), ("[]", "not a host-link probe"), ('{"gather_zero_copy": {}}', "gather_zero_copy")):
        bad.write_text(text)
        r = CliRunner().invoke(app, ["calibrate", str(data), "--out", str(out), "--host-link", str(bad)])
        assert r.exit_code == 2 and "--host-link" in r.output and why in r.output, r.output
    no_copies = {k: v for k, v in doc.items() if k != "copy_h2d"}
    bad.write_text(json.dumps(no_copies))
    r = CliRunner().invoke(app, ["calibrate", str(data), "--out", str(out), "--host-link", str(bad)])
    assert r.exit_code == 2 and "no field 'copy_h2d'" in r.output, r.output
    r = CliRunner().invoke(app, ["calibrate", str(data), "--out", str(out), "--host-link", str(tmp_path / "none.json")])
    assert r.exit_code == 2 and "no such file" in r.output


def test_shipped_cpu_profile_reproduces_its_recorded_figures():
    """costmodels/profiles/cpu-xeon-2core.json: refitting its committed samples gives the recorded profile and errors."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "costmodels" / "profiles"
    shipped = json.loads((root / "cpu-xeon-2core.json").read_text())
    record = shipped["calibration"]
    profile = load_profile(root / "cpu-xeon-2core.json")
    samples = list(read_samples(root / "cpu-reference-samples.jsonl", "compute"))
    assert len(samples) == 200 and {s["backend"] for s in samples} == {"cpu"}
    # the shipped profile, judged on its recorded hold-out split, gives the recorded figures
    states, meas = sample_states(samples, get_profile(record["base"]))
    holdout = np.random.default_rng(0).permutation(len(meas))[: int(round(0.25 * len(meas)))]
    got = agreement(device_compute_costs(states[holdout], profile), meas[holdout]).to_dict()
    assert got == pytest.approx(record["holdout_after"], abs=1e-3)
    assert record["holdout_after"]["median_abs_rel_error_fwd"] < 0.2
    # and refitting lands on an equally good profile (the optimum is flat: the constants themselves may drift)
    result = calibrate(samples, get_profile(record["base"]), holdout=0.25, seed=0, name=profile.name)
    assert result.holdout_after.median_abs_rel_error_fwd <= record["holdout_after"]["median_abs_rel_error_fwd"] + 0.01
    assert result.holdout_after.median_abs_rel_error_bwd <= record["holdout_after"]["median_abs_rel_error_bwd"] + 0.01
