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
    MEASURED_SCHEMA,
    build_measured_reports,
    load_measured,
    measured_html,
    measured_markdown,
    open_measured,
)
from shardopt.leaderboard.store import settings_key
from shardopt.measure.pick import PICK_PORTFOLIO

ROOT = Path(__file__).resolve().parents[1]
CPU_TEST = ROOT / "instances" / "suites" / "cpu-test"


SYN_SETTINGS = settings_key(5.0, "12")  # the synthetic rows' run settings: a 5 s limit, 12 rounds

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
                     "rounds": 12, "session_s": 3.0, "judge": "synthetic", "code_version": "t", "created_at": "now", "settings": SYN_SETTINGS}
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
    # tables as HTML tables (a browser shows them as such), not Markdown text in a <pre> block
    assert page.count("<table>") == 3 and "<pre>" not in page and "| solver |" not in page
    assert "<th>solver</th>" in page and "<td class='num'>" in page
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
            "--cost-model", "analytic,neural-cpu", "--db", str(db), "--repeats", "3", "--time-limit", "5", "--jobs", "2", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["rows"] == 2 * 3 and len(doc["sessions"]) == 2  # size reads no cost model: solved once per instance
    assert doc["jobs"] == 1 and "--jobs 2 ignored" in doc["note"]  # nothing is timed beside other work
    rows = load_measured(db)
    assert all(r["ci_low_ms"] <= r["measured_ms"] <= r["ci_high_ms"] and r["predicted_ms"] > 0 for r in rows)
    assert all(r["rounds"] == 3 for r in rows)
    again = CliRunner().invoke(app, args)  # resumable: nothing left to do
    assert again.exit_code == 0 and json.loads(again.stdout)["skipped"] == 2
    out = tmp_path / "report"
    r = CliRunner().invoke(app, ["leaderboard", "report", "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "measured-leaderboard.md").exists() and "<svg" in (out / "measured-leaderboard.html").read_text()


def test_the_pick_entry_keeps_a_portfolio_plan_and_is_measured_with_the_rest(tmp_path: Path) -> None:
    """`pick`: per cost model, the portfolio's plans (with that model and with analytic) timed in a session of their
    own, the fastest kept; its row is then measured in the instance's session, with the very plan of a portfolio row."""
    pytest.importorskip("fbgemm_gpu")
    suite, db = tiny_suite(tmp_path), tmp_path / "lb.sqlite"
    r = CliRunner().invoke(app, ["leaderboard", "run", str(suite), "--backend", "cpu", "--solvers", "greedy,size,pick",
                                 "--cost-model", "neural-cpu-zen5", "--db", str(db), "--repeats", "3", "--time-limit", "2", "--json"])
    assert r.exit_code == 0, r.output
    rows = load_measured(db)
    picks = [x for x in rows if x["solver"] == "pick"]
    assert len(picks) == 2 and all(x["cost_model"] == "neural-cpu-zen5" and x["measured_ms"] > 0 for x in picks)
    for x in picks:
        assert x["reason"].startswith("picked ") and x["solve_time_s"] > 0
        label = x["reason"][len("picked "):].split(":")[0]  # "<solver> / <cost model>"
        solver, model = label.split(" / ")
        assert solver in PICK_PORTFOLIO and model in ("neural-cpu-zen5", "analytic")
        assert model == "neural-cpu-zen5" or solver not in ("size", "random")  # the model-free hedge is run once
        same = [y for y in rows if y["instance_file"] == x["instance_file"] and y["plan_key"] == x["plan_key"] and y is not x]
        assert all(y["measured_ms"] == x["measured_ms"] for y in same)  # one plan, one measurement
    r = CliRunner().invoke(app, ["leaderboard", "run", str(suite), "--solvers", "pick", "--db", str(tmp_path / "sim.sqlite")])
    assert r.exit_code == 2 and "measured leaderboard" in r.output


def test_measured_leaderboard_refuses_bounds_and_sim(tmp_path: Path) -> None:
    suite = tiny_suite(tmp_path)
    r = CliRunner().invoke(app, ["leaderboard", "run", str(suite), "--backend", "cpu", "--solvers", "greedy",
                                 "--db", str(tmp_path / "x.sqlite"), "--bounds"])
    assert r.exit_code == 2 and "bound" in r.output


# ---------------------------------------------------------------------------------------------------------------
# Spearman, means over the common instances, the rankings; the results table's new columns and their migration


def test_report_spearman_common_means_and_rankings(tmp_path: Path) -> None:
    from scipy.stats import spearmanr

    db = tmp_path / "m.sqlite"
    rows = synthetic_store(db)
    # a fifth instance that greedy fails under neural-cpu: every mean must stay over the 4 instances all measured
    con = open_measured(db)
    for k, solver in enumerate(("greedy", "neuroshard", "size")):
        for cm in ("analytic", "neural-cpu"):
            failed = solver == "greedy" and cm == "neural-cpu"
            r = {"suite": "syn", "instance_file": "i4.json", "instance_hash": "h4", "solver": solver, "cost_model": cm,
                 "seed": 0, "backend": "cpu", "status": "no_solution" if failed else "feasible",
                 "predicted_ms": None if failed else 100.0 + k, "measured_ms": None if failed else 100.0 + k,
                 "ci_low_ms": None if failed else 99.0 + k, "ci_high_ms": None if failed else 101.0 + k,
                 "judge": "synthetic", "code_version": "t", "created_at": "now", "settings": SYN_SETTINGS}
            con.execute(f"INSERT INTO measured ({', '.join(MEASURED_COLUMNS)}) VALUES ({', '.join('?' for _ in MEASURED_COLUMNS)})",
                        [r.get(c) for c in MEASURED_COLUMNS])
            rows.append(r)
    con.commit()
    con.close()
    (rep,) = build_measured_reports(load_measured(db))
    assert rep.instances == 5 and rep.common == 4
    common = [f"i{i}.json" for i in range(4)]
    for e in rep.entries:
        mine = [r for r in rows if r["solver"] == e.solver and r["cost_model"] == e.cost_model and r["instance_file"] in common]
        assert e.mean_measured_ms == pytest.approx(sum(r["measured_ms"] for r in mine) / 4)
        assert e.mean_predicted_ms == pytest.approx(sum(r["predicted_ms"] for r in mine) / 4)
        assert e.failed == (1 if (e.solver, e.cost_model) == ("greedy", "neural-cpu") else 0)
    for cm in ("analytic", "neural-cpu"):
        ok = [r for r in rows if r["cost_model"] == cm and r["measured_ms"] is not None]
        x, y = [r["predicted_ms"] for r in ok], [r["measured_ms"] for r in ok]
        assert rep.tau_rows[cm] == pytest.approx(kendalltau(x, y)[0])
        assert rep.rho_rows[cm] == pytest.approx(spearmanr(x, y)[0])
    # measured: greedy < neuroshard < size under both models; analytic predicts the reverse, neural-cpu the same
    assert rep.ranking_measured["neural-cpu"] == ["greedy", "neuroshard", "size"]
    assert rep.ranking_predicted["analytic"] == ["size", "neuroshard", "greedy"]
    md = measured_markdown([rep])
    assert "Spearman" in md and "size < neuroshard < greedy" in md and "over the 4 instances" in md
    page = measured_html([rep])
    assert page.count("<svg") == 2
    # tables as HTML tables (a browser shows them as such), not Markdown text in a <pre> block
    assert page.count("<table>") == 3 and "<pre>" not in page and "| solver |" not in page
    assert "<th>solver</th>" in page and "<td class='num'>" in page and "src=" not in page and "@import" not in page


def test_a_solver_that_failed_everywhere_leaves_the_other_means(tmp_path: Path) -> None:
    """A baseline that refused every instance (TorchRec's planner on tight CPU-scale memory) is reported as failed,
    and the other entries' means stay over all the instances they measured."""
    db = tmp_path / "m.sqlite"
    rows = synthetic_store(db)
    con = open_measured(db)
    for i in range(4):
        r = {"suite": "syn", "instance_file": f"i{i}.json", "instance_hash": f"h{i}", "solver": "torchrec",
             "cost_model": "analytic", "seed": 0, "backend": "cpu", "status": "no_solution", "reason": "storage",
             "judge": "synthetic", "code_version": "t", "created_at": "now", "settings": SYN_SETTINGS}
        con.execute(f"INSERT INTO measured ({', '.join(MEASURED_COLUMNS)}) VALUES ({', '.join('?' for _ in MEASURED_COLUMNS)})",
                    [r.get(c) for c in MEASURED_COLUMNS])
    con.commit()
    con.close()
    (rep,) = build_measured_reports(load_measured(db))
    assert rep.common == 4
    by = {(e.solver, e.cost_model): e for e in rep.entries}
    assert by[("torchrec", "analytic")].failed == 4 and math.isnan(by[("torchrec", "analytic")].mean_measured_ms)
    mine = [r["measured_ms"] for r in rows if r["solver"] == "greedy" and r["cost_model"] == "analytic"]
    assert by[("greedy", "analytic")].mean_measured_ms == pytest.approx(sum(mine) / 4)


OLD_RESULTS_SCHEMA = """
CREATE TABLE results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, suite TEXT NOT NULL, instance_file TEXT NOT NULL,
    instance_name TEXT NOT NULL, instance_hash TEXT NOT NULL, solver TEXT NOT NULL, params TEXT NOT NULL,
    seed INTEGER NOT NULL, backend TEXT NOT NULL, cost_model TEXT NOT NULL, judge TEXT, time_limit REAL, columns TEXT,
    max_cost_ms REAL, critical_path_ms REAL, solve_time_s REAL, status TEXT NOT NULL, reason TEXT, lower_bound REAL,
    code_version TEXT NOT NULL, created_at TEXT NOT NULL,
    UNIQUE (instance_hash, solver, seed, backend, cost_model)
)
"""


def test_old_store_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    from shardopt.leaderboard.store import connect, insert_row, load_rows

    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.execute(OLD_RESULTS_SCHEMA)
    old = {"suite": "s", "instance_file": "a.json", "instance_name": "a", "instance_hash": "h", "solver": "greedy",
           "params": "{}", "seed": 0, "backend": "sim", "cost_model": "analytic", "max_cost_ms": 1.0,
           "status": "feasible", "code_version": "old", "created_at": "then"}
    con.execute(f"INSERT INTO results ({', '.join(old)}) VALUES ({', '.join('?' for _ in old)})", list(old.values()))
    con.commit()
    con.close()
    con = connect(db)  # adds the missing columns
    new = dict(old, solver="size", backend="cpu", predicted_ms=0.5, ci_low_ms=0.9, ci_high_ms=1.1, judge_rounds=12,
               machine=json.dumps({"host": "x"}), settings=settings_key(None))
    assert insert_row(con, new)
    assert not insert_row(con, new)  # the same key, settings included
    assert insert_row(con, dict(new, settings=settings_key(2.0)))  # another time limit: a row of its own
    con.close()
    connect(db).close()  # a second connect finds nothing to add
    rows = {(r["solver"], r["settings"]): r for r in load_rows(db)}
    assert set(rows) == {("greedy", settings_key(None)), ("size", settings_key(None)), ("size", settings_key(2.0))}
    rows = {s: r for (s, key), r in rows.items() if key == settings_key(None)}  # (the old row's: its time limit, none)
    assert rows["greedy"]["predicted_ms"] is None and rows["greedy"]["max_cost_ms"] == 1.0
    assert rows["size"]["predicted_ms"] == 0.5 and rows["size"]["judge_rounds"] == 12
    assert json.loads(rows["size"]["machine"]) == {"host": "x"}
    con = open_measured(db)  # the measured table joins an old store too
    con.execute("SELECT COUNT(*) FROM measured").fetchone()
    con.close()


OLD_MEASURED_SCHEMA = MEASURED_SCHEMA.replace("    settings TEXT NOT NULL,\n", "").replace(", settings)", ")")


def test_an_old_measured_table_is_rekeyed_and_its_rows_say_their_settings_were_not_recorded(tmp_path: Path) -> None:
    """A measured table written before the settings were keyed did not record its time limit: its rows keep their
    figures, are reported in a section of their own that says so, and a new run does not take them as its own."""
    import sqlite3

    from shardopt.leaderboard.store import UNRECORDED_SETTINGS

    assert "settings" not in OLD_MEASURED_SCHEMA
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.execute(OLD_MEASURED_SCHEMA)
    columns = [c for c in MEASURED_COLUMNS if c != "settings"]
    for i in range(3):
        r = {"suite": "syn", "instance_file": f"i{i}.json", "instance_hash": f"h{i}", "solver": "greedy",
             "cost_model": "analytic", "seed": 0, "backend": "cpu", "status": "feasible", "predicted_ms": 1.0 + i,
             "measured_ms": 2.0 + i, "ci_low_ms": 1.9 + i, "ci_high_ms": 2.1 + i, "rounds": 10, "session_s": 3.0,
             "judge": "synthetic", "code_version": "old", "created_at": "then"}
        con.execute(f"INSERT INTO measured ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                    [r.get(c) for c in columns])
    con.commit()
    con.close()
    rows = load_measured(db)
    assert len(rows) == 3 and all(r["settings"] == UNRECORDED_SETTINGS for r in rows)
    assert [r["measured_ms"] for r in rows] == [2.0, 3.0, 4.0]
    (rep,) = build_measured_reports(rows)
    assert rep.settings.startswith("settings not recorded") and "settings not recorded" in measured_markdown([rep])
    con = open_measured(db)  # rebuilt once: a second open finds the new key
    assert "settings" in con.execute("SELECT sql FROM sqlite_master WHERE name = 'measured'").fetchone()[0]
    con.close()


def test_sim_rows_carry_the_solvers_prediction(tmp_path: Path) -> None:
    from shardopt.leaderboard.run import run_leaderboard
    from shardopt.leaderboard.store import load_rows

    suite, db = tiny_suite(tmp_path), tmp_path / "sim.sqlite"
    profile = ROOT / "costmodels" / "profiles" / "cpu-xeon-2core.json"
    summary = run_leaderboard(suite, ["greedy", "size"], db, cost_model=f"analytic:{profile}", jobs=2)
    assert summary.done == 4 and not summary.sequential
    for r in load_rows(db):
        assert r["predicted_ms"] > 0 and r["ci_low_ms"] is None and r["judge_rounds"] is None and r["machine"] is None
        assert r["cost_model"] == f"analytic:{profile}"


def test_results_path_measured_is_sequential_with_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_leaderboard with a measured judge: one task at a time whatever --jobs says; CI, rounds, machine stored."""
    pytest.importorskip("fbgemm_gpu")
    from shardopt.leaderboard.run import run_leaderboard
    from shardopt.leaderboard.store import load_rows

    monkeypatch.setenv("SHARDOPT_CACHE", str(tmp_path / "cache.sqlite"))
    suite, db = tiny_suite(tmp_path), tmp_path / "cpu.sqlite"
    summary = run_leaderboard(suite, ["greedy", "size"], db, backend="cpu", jobs=2, repeats=2)
    assert summary.sequential and summary.done == 4 and summary.failed == 0
    for r in load_rows(db):
        # (to the last place: with 2 rounds a bound of the bootstrap CI can be the point estimate, summed in another order)
        assert r["ci_low_ms"] <= r["max_cost_ms"] * (1 + 1e-12) and r["max_cost_ms"] <= r["ci_high_ms"] * (1 + 1e-12)
        assert r["predicted_ms"] > 0 and r["judge_rounds"] == 2 and json.loads(r["machine"])["cores"] >= 1
