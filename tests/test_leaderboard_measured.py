"""The measured leaderboard: an instance's plans measured together on the CPU, rows with predicted and measured
costs and CIs, and a report whose rank correlations are what scipy says of the same rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.stats import kendalltau
from typer.testing import CliRunner

from shardopt.cli.main import app
from shardopt.core.ir import load_instance, save
from shardopt.data.scale import scale_instance
from shardopt.leaderboard.measured import (
    MEASURED_COLUMNS,
    build_measured_reports,
    load_measured,
    measured_html,
    open_measured,
)

ROOT = Path(__file__).resolve().parents[1]
CPU_TEST = ROOT / "instances" / "suites" / "cpu-test"


def synthetic_store(db: Path) -> list[dict]:
    """2 cost models x 3 solvers x 4 instances with known numbers."""
    con = open_measured(db)
    rows = []
    for i in range(4):
        for cm, scale in (("analytic", 0.01), ("neural-cpu", 1.0)):
            for k, solver in enumerate(("greedy", "neuroshard", "size")):
                measured = 10.0 + i + 2.0 * k + (0.5 if cm == "analytic" else 0.0)
                predicted = scale * (10.0 + i + (3 - k) * 0.3 if cm == "analytic" else measured * (1 + 0.01 * k))
                r = {"suite": "syn", "instance_file": f"i{i}.json", "instance_hash": f"h{i}", "solver": solver,
                     "cost_model": cm, "seed": 0, "backend": "cpu", "status": "feasible", "predicted_ms": predicted,
                     "measured_ms": measured, "ci_low_ms": measured * 0.99, "ci_high_ms": measured * 1.01,
                     "rounds": 12, "session_s": 3.0, "judge": "synthetic", "code_version": "t", "created_at": "now"}
                con.execute(f"INSERT INTO measured ({', '.join(MEASURED_COLUMNS)}) VALUES ({', '.join('?' for _ in MEASURED_COLUMNS)})",
                            [r.get(c) for c in MEASURED_COLUMNS])
                rows.append(r)
    con.commit()
    con.close()
    return rows


def test_report_numbers_match_an_independent_computation(tmp_path: Path) -> None:
    rows = synthetic_store(tmp_path / "m.sqlite")
    (rep,) = build_measured_reports(load_measured(tmp_path / "m.sqlite"))
    assert rep.instances == 4
    for cm in ("analytic", "neural-cpu"):
        mine = [r for r in rows if r["cost_model"] == cm]
        want = kendalltau([r["predicted_ms"] for r in mine], [r["measured_ms"] for r in mine])[0]
        assert rep.tau_rows[cm] == pytest.approx(want)
    # the analytic model orders the solvers backwards within every instance; neural-cpu exactly right
    assert rep.tau_within["analytic"] == pytest.approx(-1.0) and rep.tau_within["neural-cpu"] == pytest.approx(1.0)
    assert rep.ranking_tau["analytic"] == pytest.approx(-1.0) and rep.ranking_tau["neural-cpu"] == pytest.approx(1.0)
    greedy = next(e for e in rep.entries if e.solver == "greedy" and e.cost_model == "neural-cpu")
    assert greedy.measured_ratio == pytest.approx(1.0) and greedy.wins == 4
    size = next(e for e in rep.entries if e.solver == "size" and e.cost_model == "neural-cpu")
    want = math.exp(sum(math.log((14 + i) / (10 + i)) for i in range(4)) / 4)
    assert size.measured_ratio == pytest.approx(want) and size.ratio_low <= want <= size.ratio_high
    assert size.mean_ci_pct == pytest.approx(1.0)
    page = measured_html([rep])
    assert page.count("<svg") == 2
    assert 'href="http' not in page and "<script" not in page and "<link" not in page  # one self-contained file
    assert measured_html([rep]) == page  # deterministic


def tiny_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "tiny"
    suite.mkdir()
    for name in ("cpu-test-s1-0008.json", "cpu-test-s1-0009.json"):
        inst = scale_instance(load_instance(CPU_TEST / name), batch_size=256, max_rows=2000)
        save(inst, suite / name)
    return suite


def test_measured_leaderboard_end_to_end_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("fbgemm_gpu")
    suite, db = tiny_suite(tmp_path), tmp_path / "lb.sqlite"
    args = ["leaderboard", "run", str(suite), "--backend", "cpu", "--solvers", "greedy,size",
            "--cost-model", "analytic,neural-cpu", "--db", str(db), "--repeats", "3", "--time-limit", "5", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["rows"] == 2 * 3 and len(doc["sessions"]) == 2  # size reads no cost model: solved once per instance
    rows = load_measured(db)
    assert all(r["ci_low_ms"] <= r["measured_ms"] <= r["ci_high_ms"] and r["predicted_ms"] > 0 for r in rows)
    assert all(r["rounds"] == 3 for r in rows)
    again = CliRunner().invoke(app, args)  # resumable: nothing left to do
    assert again.exit_code == 0 and json.loads(again.stdout)["skipped"] == 2
    out = tmp_path / "report"
    r = CliRunner().invoke(app, ["leaderboard", "report", "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "measured-leaderboard.md").exists() and "<svg" in (out / "measured-leaderboard.html").read_text()


def test_measured_leaderboard_refuses_bounds_and_sim(tmp_path: Path) -> None:
    suite = tiny_suite(tmp_path)
    r = CliRunner().invoke(app, ["leaderboard", "run", str(suite), "--backend", "cpu", "--solvers", "greedy",
                                 "--db", str(tmp_path / "x.sqlite"), "--bounds"])
    assert r.exit_code == 2 and "bound" in r.output
