"""benchmarks/gpu_campaign.sh: the measured GPU campaign in one command, a thin wrapper around `shardopt calibrate
--backend cuda --for <suite> --rounds R` and a measured leaderboard. Its --dry-run (a tiny campaign on the cpu judge)
runs end to end here and writes every output a GPU run writes; a second run skips every finished step."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # (the GPU campaign script end to end: in make test, each small)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_campaign.sh"
STEPS = ["environment", "generate", "scale", "calibrate", "placements", "leaderboard", "report"]
PROBE = ROOT / "benchmarks" / "results" / "gpu-h200-2026-11-26" / "lease1" / "host-link.json"


def campaign(out: Path, *args: str, **settings: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SHARDOPT_CACHE"}  # the campaign's own cache, under out/
    env.update(SHARDOPT=f"{sys.executable} -m shardopt", PYTHON=sys.executable, **settings)
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", "--out", str(out), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, subprocess.CompletedProcess]:
    pytest.importorskip("fbgemm_gpu")  # the cpu judge's kernel
    out = tmp_path_factory.mktemp("campaign") / "gpu-dry"
    first = campaign(out, HOST_LINK=str(PROBE))
    assert first.returncode == 0, first.stderr[-3000:]
    second = campaign(out, HOST_LINK=str(PROBE))
    return out, first, second


def test_dry_run_writes_every_output(dry_run):
    out, first, _ = dry_run
    suite = out / "dreamshard-cpu"
    instances = sorted(suite.glob("*.json"))
    assert len(instances) == 2 and (out / "generated" / "suite.json").is_file()
    for f in instances:  # the judged suite is the scaled one, names the machine it is judged on, and says so
        doc = json.loads(f.read_text())
        assert doc["workload"]["batch_size"] == 512 and doc["metadata"]["scaled_from"]["max_rows"] == 2000
        assert doc["topology"]["hardware"] == "cpu" and doc["metadata"]["scaled_from"]["hardware"] == ["v100", "cpu"]
    # the calibration: a card and its models in the campaign's own store, the held-out table, one round of the loop
    card = json.loads((out / "models" / "campaign-cpu" / "card.json").read_text())
    assert card["backend"] == "cpu" and card["hardware"] == "cpu"
    assert card["samples"]["train"] == 20 and card["samples"]["test"] == 10 and card["samples"]["proposed"] > 0
    assert [r["round"] for r in card["accuracy"]["plan_level"]["rounds"]] == [0, 1]
    cal = json.loads((out / "calibration.json").read_text())
    assert cal["heldout"]["neural (this calibration)"]["bands"]["all"]["n"] == 10
    profile = json.loads((out / "models" / "campaign-cpu" / "profile.json").read_text())  # HOST_LINK: the link fitted too
    assert 40e6 < profile["host_row_rate"] < 60e6 and profile["calibration"]["host_link"]["probe"] == str(PROBE)
    con = sqlite3.connect(out / "leaderboard.sqlite")
    rows = con.execute("SELECT solver, cost_model, measured_ms, status FROM measured").fetchall()
    con.close()
    # size once (model-free), greedy with each of the three cost models, 2 instances; every plan measured
    assert len(rows) == 2 * 4 and all(r[3] != "no_solution" and r[2] > 0 for r in rows)
    assert sorted(r[0] for r in rows) == ["greedy"] * 6 + ["size"] * 2
    assert {r[1] for r in rows} == {"auto", "analytic", "campaign-cpu/analytic"}
    assert (out / "report" / "measured-leaderboard.md").is_file()
    assert (out / "report" / "measured-leaderboard.html").is_file()
    for check in ("rowsplit", "replicas"):  # the committed placement checks, paired on this judge
        cmp = json.loads((out / "placements" / f"{check}.json").read_text())
        assert cmp["backend"] == "cpu" and len(cmp["plans"]) == 2 and cmp["comparisons"][0]["verdict"]

    rec = json.loads((out / "campaign.json").read_text())
    assert rec["command"] == f"bash benchmarks/gpu_campaign.sh --dry-run --out {out}"
    assert rec["date"] and rec["torch"] and rec["profile"] == "v100" and "gpu" in rec
    assert rec["kernel"] and any("fbgemm" in k or "torch" in k for k in rec["kernel"])
    assert rec["settings"]["backend"] == "cpu" and rec["settings"]["dry_run"] == "1"
    assert rec["leaderboard_rows"] == 8 and rec["model"]["id"] == "campaign-cpu" and rec["samples"]["train"] == 20
    assert list(rec["steps"]) == STEPS
    for s in rec["steps"].values():
        assert s["wall_s"] >= 0 and s["commands"]
    readme = (out / "README.md").read_text()
    assert readme.startswith("# Measured campaign") and "neural (this calibration): MAPE" in readme
    assert "Plan-level error" in readme
    for step in STEPS:
        assert f"run  {step}" in first.stderr


def test_second_run_skips_done_steps(dry_run):
    out, first, second = dry_run
    assert second.returncode == 0, second.stderr[-3000:]
    for step in STEPS:
        assert f"skip {step}" in second.stderr and f"run  {step}" not in second.stderr
    rec = json.loads((out / "campaign.json").read_text())
    assert all(s["this_run"].startswith("skipped") for s in rec["steps"].values())


def test_other_settings_are_refused(dry_run):
    out, _, _ = dry_run
    env = {**os.environ, "COUNT": "3", "SHARDOPT": f"{sys.executable} -m shardopt", "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--out", str(out)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 2 and "other settings" in r.stderr


def test_bad_arguments(tmp_path):
    r = subprocess.run(["bash", str(SCRIPT), "--backend", "tpu"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                       check=False)
    assert r.returncode == 2 and "not cuda or cpu" in r.stderr
    env = {**os.environ, "HOST_LINK": "/nonexistent/host-link.json"}
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--out", str(tmp_path / "c")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2 and "HOST_LINK: /nonexistent/host-link.json: no such file" in r.stderr
    r = subprocess.run(["bash", str(SCRIPT), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                       check=False)
    assert r.returncode == 0 and "--dry-run" in r.stdout


def test_time_box_and_keep_going(tmp_path):
    """A lease's campaign (benchmarks/gpu_lease.sh): a step cut by its time box is recorded as cut and the campaign goes
    on; with KEEP_GOING=1 a failed step (here a bad setting) is logged, not fatal, and the leaderboard runs without
    its model (auto says why and plans with the analytic model)."""
    pytest.importorskip("fbgemm_gpu")
    out = tmp_path / "lease"
    r = campaign(out, KEEP_GOING="1", TEST_SAMPLES="many", LB_SECONDS="0.3")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "FAIL calibrate" in r.stderr
    assert "cut  leaderboard at its time box" in r.stderr
    rec = json.loads((out / "campaign.json").read_text())
    assert rec["failed_steps"] == ["calibrate"] and rec["model"]["id"] is None
    assert rec["steps"]["leaderboard"]["this_run"].startswith("cut")
    assert "time box 0.3 s" in rec["steps"]["leaderboard"]["commands"][0]
    assert "--cost-model auto,analytic " in rec["steps"]["leaderboard"]["commands"][0]
    assert (out / "placements" / "rowsplit.json").is_file()
    assert not (out / "steps" / "leaderboard").exists()  # cut: not stamped, a rerun without the box resumes it
    assert "Failed (see the campaign's log): calibrate." in (out / "README.md").read_text()
