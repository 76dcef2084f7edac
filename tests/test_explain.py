"""Explaining a plan (issue 18, item 3): the bottleneck's columns and heaviest shards agree with the cost model, every
suggested change costs what the model says once made and respects both memory tiers, the certified bound is
labelled by what it covers, and the CLI's output and exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodels.registry import get_cost_model
from shardopt.cli.main import app
from shardopt.core.ir import Kernel, Plan, Shard, load_instance, save
from shardopt.core.plan_check import check_plan
from solvers.bound import uncovered_reason
from solvers.catalog import get_solver
from solvers.explain import explain_plan
from solvers.placement.plan_moves import PlanShards

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "instances" / "examples" / "small.json"
TIERED = ROOT / "instances" / "suites" / "tiered-test" / "tiered-test-s1-0000.json"


def overloaded_plan() -> tuple[object, Plan]:
    """small.json placed round-robin, then as many tables as fit moved onto device 0: one device deliberately overloaded."""
    inst = load_instance(SMALL)
    model = get_cost_model("analytic")
    plan = get_solver("round_robin").solve(inst, model, seed=0).plan
    shards = list(plan.shards)
    for k, s in enumerate(shards):
        trial = shards[:k] + [s.model_copy(update={"device": 0})] + shards[k + 1:]
        if check_plan(inst, trial).ok:
            shards = trial
    return inst, plan.model_copy(update={"shards": shards})


def applied(plan: Plan, ps: PlanShards, change) -> list[Shard]:  # noqa: ANN001
    shards = list(plan.shards)
    src = shards[change.shard].device
    shards[change.shard] = shards[change.shard].model_copy(update={"device": change.to_device})
    if change.other is not None:
        shards[change.other] = shards[change.other].model_copy(update={"device": src})
    return shards


def test_the_overloaded_device_is_named_and_the_best_change_helps_as_predicted() -> None:
    inst, plan = overloaded_plan()
    model = get_cost_model("analytic")
    ex = explain_plan(inst, model, plan, bound_time_limit=None)
    costs = model.plan_costs(inst, plan)
    assert ex.bottleneck == 0 == costs.bottleneck
    assert ex.plan_cost == pytest.approx(costs.max_cost, rel=1e-12)
    assert np.allclose(ex.columns, costs.columns)
    assert ex.above_mean > 0.2  # deliberately overloaded
    assert ex.changes and ex.changes[0].delta_ms < 0
    ps = PlanShards(inst, model.bind(inst), plan.shards)
    for c in ex.changes:  # every suggestion is a valid plan that costs what was predicted
        after = applied(plan, ps, c.change)
        assert check_plan(inst, after).ok
        got = model.plan_costs(inst, after)
        assert got.max_cost == pytest.approx(c.cost_ms, rel=1e-9)
        assert got.bottleneck == c.new_bottleneck
    assert [c.cost_ms for c in ex.changes] == sorted(c.cost_ms for c in ex.changes)


def test_marginals_are_the_device_cost_with_and_without_each_shard() -> None:
    inst, plan = overloaded_plan()
    model = get_cost_model("analytic")
    ex = explain_plan(inst, model, plan, top=100, bound_time_limit=None)
    on_hot = [k for k, s in enumerate(plan.shards) if s.device == ex.bottleneck]
    assert len(ex.weights) == len(on_hot) == ex.shards_on_bottleneck
    for w in ex.weights:
        without = [s for k, s in enumerate(plan.shards) if k != w.shard]  # (not a valid plan: the model costs it anyway)
        cols = model.plan_costs(inst, without).columns[ex.bottleneck]
        assert np.allclose(w.marginal, ex.columns[ex.bottleneck] - cols, atol=1e-12)
    assert [w.marginal_ms for w in ex.weights] == sorted((w.marginal_ms for w in ex.weights), reverse=True)
    assert ex.shared_ms == pytest.approx(ex.plan_cost - sum(w.marginal_ms for w in ex.weights))


def test_moves_and_swaps_keep_both_memory_tiers_and_split_pieces_apart() -> None:
    inst = load_instance(TIERED)
    model = get_cost_model("analytic")
    plan = get_solver("greedy").solve(inst, model, seed=0).plan
    ps = PlanShards(inst, model.bind(inst), plan.shards)
    checked = 0
    for p in range(0, len(plan.shards), max(1, len(plan.shards) // 25)):
        cands, tot = ps.moves(p)
        for d, row in list(zip(cands, tot))[:3]:
            shards = list(plan.shards)
            shards[p] = shards[p].model_copy(update={"device": int(d)})
            assert check_plan(inst, shards).ok
            assert sum(1 for s in shards if s.table == shards[p].table and s.device == d) == 1
            assert model.plan_costs(inst, shards).total == pytest.approx(row, rel=1e-9)
            checked += 1
        qs, tot = ps.swaps(p)
        for q, row in list(zip(qs, tot))[:3]:
            shards = list(plan.shards)
            a, b = shards[p].device, shards[int(q)].device
            shards[p] = shards[p].model_copy(update={"device": b})
            shards[int(q)] = shards[int(q)].model_copy(update={"device": a})
            assert check_plan(inst, shards).ok
            assert model.plan_costs(inst, shards).total == pytest.approx(row, rel=1e-9)
            checked += 1
    assert checked > 10
    rowwise = [k for k, s in enumerate(plan.shards) if s.rows is not None]
    assert rowwise, "the tiered instance should have row-wise shards"
    for k in rowwise[:5]:  # a row-wise table over every device has nowhere to go
        siblings = {s.device for s in plan.shards if s.table == plan.shards[k].table}
        cands, _ = ps.moves(k)
        assert not set(cands.tolist()) & siblings


def test_a_local_optimum_says_so() -> None:
    inst = load_instance(SMALL)
    model = get_cost_model("analytic")
    plan = get_solver("neuroshard").solve(inst, model, seed=0).plan
    ex = explain_plan(inst, model, plan, bound_time_limit=None)
    if ex.changes and ex.changes[0].delta_ms < -1e-9 * ex.plan_cost:
        pytest.skip("neuroshard's plan is not a local optimum of single changes here")
    assert any("local optimum" in h for h in ex.hints)


def test_uncovered_reason_names_the_kind() -> None:
    assert uncovered_reason([Shard(table="a", device=0)]) is None
    assert uncovered_reason([Shard(table="a", device=0, cols=4)]) is None
    assert "table-wise" in uncovered_reason([Shard(table="a", device=0, cols=4)], table_wise=True)
    assert "row-wise" in uncovered_reason([Shard(table="a", device=0, rows=10)])
    assert "data-parallel" in uncovered_reason([Shard(table="a", device=0, replicated=True)])
    assert "host memory" in uncovered_reason([Shard(table="a", device=0, kernel=Kernel.fused_uvm)])


def test_cli_explain_json_with_the_bound(tmp_path: Path) -> None:
    inst, plan = overloaded_plan()
    p = tmp_path / "plan.json"
    save(plan, p)
    r = CliRunner().invoke(app, ["explain", str(SMALL), str(p), "--json", "--time-limit", "2", "--changes", "3"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["bottleneck"]["device"] == 0
    assert doc["bound"]["certified"] is True
    assert doc["bound"]["value_ms"] <= doc["plan_cost_ms"] + 1e-9
    assert 0 <= doc["bound"]["gap"] < 1
    assert len(doc["best_changes"]) <= 3 and doc["best_changes"][0]["delta_ms"] < 0
    shares = [c["share"] for c in doc["bottleneck"]["columns"].values()]
    assert sum(shares) == pytest.approx(1.0)


def test_cli_explain_human_output(tmp_path: Path) -> None:
    inst, plan = overloaded_plan()
    p = tmp_path / "plan.json"
    save(plan, p)
    r = CliRunner().invoke(app, ["explain", str(SMALL), str(p), "--no-bound"])
    assert r.exit_code == 0, r.output
    assert "device 0 is the bottleneck" in r.stdout
    assert "best single changes" in r.stdout and "heaviest shards on device 0" in r.stdout


def test_cli_explain_bad_input(tmp_path: Path) -> None:
    inst, plan = overloaded_plan()
    bad = plan.model_copy(update={"shards": plan.shards[1:]})  # a table left out
    p = tmp_path / "bad.json"
    save(bad, p)
    r = CliRunner().invoke(app, ["explain", str(SMALL), str(p), "--no-bound"])
    assert r.exit_code == 2 and "invalid plan" in r.output
    tiered = load_instance(TIERED)
    plan = get_solver("greedy").solve(tiered, get_cost_model("analytic"), seed=0).plan
    save(plan, tmp_path / "tiered.json")
    r = CliRunner().invoke(app, ["explain", str(TIERED), str(tmp_path / "tiered.json"), "--cost-model", "neural", "--no-bound"])
    assert r.exit_code == 2 and "cannot cost" in r.output  # the neural model refuses host-memory shards by name
    r = CliRunner().invoke(app, ["explain", str(SMALL), str(tmp_path / "missing.json")])
    assert r.exit_code == 2
