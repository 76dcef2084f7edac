"""`shardopt compare` on the real CPU kernels: one plan against itself is not told apart beyond the judge's
session-to-session spread, and a plan with one device deliberately overloaded is detected as slower."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import two_device_instance
from typer.testing import CliRunner

from shardopt.cli.main import app
from shardopt.core.ir import Instance, Plan, Shard, save
from shardopt.measure.compare import compare_plans
from shardopt.measure.evaluate import EvaluationError


def tiny() -> Instance:
    return two_device_instance("tiny-compare")


def balanced() -> Plan:
    return Plan(shards=[Shard(table=f"t{i}", device=i % 2) for i in range(8)], solver="balanced")


def overloaded() -> Plan:
    return Plan(shards=[Shard(table=f"t{i}", device=0 if i < 7 else 1) for i in range(8)], solver="overloaded")


A_A_SESSIONS = 3  # sessions the A/A comparison may take before it fails


def test_a_plan_against_itself_is_indistinguishable_on_cpu() -> None:
    pytest.importorskip("fbgemm_gpu")
    from shardopt.measure.pick import SESSION_SPREAD_PCT

    # a 95 % interval misses 0 one time in twenty on a quiet machine, and more often where the load drifts between the
    # paired rounds (beside two CPU burners: "b is 5.7 % faster than a (95 % CI [+0.4, +10.7] %)"): what must hold is
    # that the interval reaches 0, or comes within the judge's session-to-session spread of it, with a small estimate.
    # A correct interval still misses that now and then, so a miss is retried in a new session, up to A_A_SESSIONS in
    # all: three independent misses on a quiet machine come about once in 8,000 runs, not once in 20.
    seen = []
    for session in range(A_A_SESSIONS):  # (each its own seed: its own index traces and bootstrap draws)
        r = compare_plans(tiny(), [balanced(), balanced()], ["a", "b"], "cpu", repeats="auto", target=0.05, time_cap_s=30, warmup=1,
                          seed=session)
        c = r.comparisons[0]
        iv = c.faster_pct
        assert r.machine is not None and r.machine["threads"] == 1
        if (iv.low <= 0.0 <= iv.high or min(abs(iv.low), abs(iv.high)) <= SESSION_SPREAD_PCT) and abs(iv.estimate) < 15.0:
            return
        seen.append(c.sentence())
    pytest.fail(f"a plan against itself was told apart in {A_A_SESSIONS} sessions in a row: " + "; ".join(seen))


def test_an_overloaded_device_is_detected_on_cpu() -> None:
    pytest.importorskip("fbgemm_gpu")
    r = compare_plans(tiny(), [balanced(), overloaded()], ["balanced", "overloaded"], "cpu", repeats=12, warmup=1)
    c = r.comparisons[0]
    # 7 tables vs 4 on the bottleneck: slower by well over 20 % with 95 % confidence, unless the machine is so busy
    # that the interval spans more than 100 points - then nothing is claimed either way, and the point estimate says
    # nothing: [-190.8, -8.0] % was seen under load 3-5, [-382.0, +66.8] % (estimate -54.7 %) and [-151.2, +57.1] %
    # (estimate +30.2 %) beside two CPU burners on 2 cores. Never a "faster" verdict.
    wide = c.faster_pct.high - c.faster_pct.low > 100
    assert c.verdict != "faster", c.sentence()
    assert wide or (c.verdict == "slower" and c.faster_pct.estimate < -20), c.sentence()
    assert r.plans[1].bottleneck == 0


def test_compare_needs_two_valid_plans() -> None:
    with pytest.raises(EvaluationError, match="at least 2"):
        compare_plans(tiny(), [balanced()], ["a"], "sim")
    bad = Plan(shards=[Shard(table="t0", device=0)])
    with pytest.raises(Exception, match="b: invalid plan"):
        compare_plans(tiny(), [balanced(), bad], ["a", "b"], "sim")


def test_cli_compare_sim_and_json(tmp_path: Path) -> None:
    inst, a, b = tmp_path / "i.json", tmp_path / "a.json", tmp_path / "b.json"
    save(tiny(), inst)
    save(balanced(), a)
    save(overloaded(), b)
    r = CliRunner().invoke(app, ["compare", str(inst), str(a), str(b), "--backend", "sim", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["comparisons"][0]["verdict"] == "slower" and doc["plans"][0]["name"].startswith("a.json")
    r = CliRunner().invoke(app, ["compare", str(inst), str(a), str(a), "--backend", "sim"])
    assert r.exit_code == 0 and "indistinguishable" in r.stdout
    r = CliRunner().invoke(app, ["compare", str(inst), str(a)])
    assert r.exit_code == 2 and "at least 2 plans" in r.output
    r = CliRunner().invoke(app, ["compare", str(inst), str(a), str(b), "--repeats", "zero"])
    assert r.exit_code == 2


@pytest.mark.integration
def test_measured_all_to_all_on_two_gloo_processes() -> None:
    """--comm measured: the torchrun program's gloo mode, one process per device, gives the comm columns."""
    pytest.importorskip("fbgemm_gpu")
    from shardopt.measure.evaluate import evaluate_plan
    from shardopt.measure.plan_timing import measure_comm_gloo

    inst = tiny().model_copy(update={"workload": tiny().workload.model_copy(update={"batch_size": 511})})  # uneven split
    comm = measure_comm_gloo(inst, balanced(), repeats=3, warmup=1)
    assert comm.shape == (2, 2) and (comm > 0).all()
    ev = evaluate_plan(inst, balanced(), "cpu", repeats=2, warmup=0, cache=False, comm="measured")
    assert "gloo" in ev.comm and "measured (CPU gloo)" in ev.judge
    assert (ev.costs.columns[:, 2:4] > 0).all()
    with pytest.raises(EvaluationError, match="comm"):
        evaluate_plan(inst, balanced(), "cpu", repeats=2, cache=False, comm="guessed")


def test_sim_judge_says_exact_and_evaluate_names_the_options_it_ignores(tmp_path: Path) -> None:
    """Issue 'trust': compare --backend sim printed a "95 % CI" of a deterministic judge; evaluate --backend sim
    silently ignored the timing options."""
    inst, a, b = tmp_path / "i.json", tmp_path / "a.json", tmp_path / "b.json"
    save(tiny(), inst)
    save(balanced(), a)
    save(overloaded(), b)
    r = CliRunner().invoke(app, ["compare", str(inst), str(a), str(b), "--backend", "sim"])
    assert r.exit_code == 0 and "exact: a deterministic judge" in r.stdout and "95 % CI" not in r.stdout
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(a), "--threads", "2", "--comm", "measured"])
    assert r.exit_code == 0 and "--threads, --comm: the sim judge" in r.stderr
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(a)])
    assert r.exit_code == 0 and "ignored" not in r.stderr
