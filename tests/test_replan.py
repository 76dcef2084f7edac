"""Re-planning from a previous plan (issue 18, item 2): tables matched by name, the bytes moved counted by region,
budgets and move prices honoured, the CLI's --from / --max-moved-bytes / --move-weight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import solve_on_budget
from typer.testing import CliRunner

from costmodels.registry import get_cost_model
from shardopt.cli.main import app
from shardopt.core.ir import Instance, Shard, instance_from_dict, load_instance, save, to_dict
from shardopt.core.memory import table_bytes, table_bytes_array
from shardopt.core.plan_check import check_plan
from solvers.catalog import get_solver
from solvers.replan.replan import carry_over, moved_bytes, replan

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "instances" / "examples" / "small.json"


def grown() -> tuple[Instance, Instance]:
    """small.json, and a next version: two tables removed, four added (copies of others under new names), one
    table's rows doubled, 30 % more memory per device."""
    old = load_instance(SMALL)
    d = to_dict(old)
    tables = d["tables"]
    extra = [dict(tables[k], name=f"new{k}") for k in range(4)]
    tables = tables[2:] + extra
    tables[0] = dict(tables[0], rows=tables[0]["rows"] * 2)
    d["tables"] = tables
    d["topology"]["memory_bytes"] = int(d["topology"]["memory_bytes"] * 1.3)
    return old, instance_from_dict(d)


def test_moved_bytes_counts_regions_not_tables() -> None:
    inst = load_instance(SMALL)
    t = inst.tables[0]
    whole = [Shard(table=t.name, device=0)]
    assert moved_bytes(inst, whole, whole) == 0
    assert moved_bytes(inst, whole, [Shard(table=t.name, device=1)]) == table_bytes(inst, t)
    half = t.dim // 2
    split = [Shard(table=t.name, device=0, col_offset=0, cols=half), Shard(table=t.name, device=1, col_offset=half, cols=half)]
    assert moved_bytes(inst, whole, split) == pytest.approx(table_bytes(inst, t) / 2, rel=1e-6)  # only the half that left
    assert moved_bytes(inst, [], whole) == 0  # a new table is created, not moved


def test_carry_over_matches_tables_by_name() -> None:
    old_inst, new_inst = grown()
    old = get_solver("greedy").solve(old_inst, get_cost_model("analytic"), seed=0).plan
    t2 = old_inst.tables[2]  # row-wise in the old plan: its blocks no longer tile it once its rows doubled
    half = t2.rows // 2
    rows = [Shard(table=t2.name, device=0, row_offset=0, rows=half), Shard(table=t2.name, device=1, row_offset=half, rows=t2.rows - half)]
    old = old.model_copy(update={"shards": [s for s in old.shards if s.table != t2.name] + rows})
    c = carry_over(new_inst, old)
    assert c.removed == [old_inst.tables[0].name, old_inst.tables[1].name]
    assert c.added == ["new0", "new1", "new2", "new3"]
    assert c.resized == [old_inst.tables[2].name]
    todo = {new_inst.tables[i].name for i in c.todo}
    assert todo >= {"new0", "new1", "new2", "new3", old_inst.tables[2].name}
    assert all(new_inst.tables[i].name not in todo for i in c.kept)


@pytest.mark.parametrize("solver", ["greedy", "neuroshard"])
def test_budgets_are_honoured_and_more_budget_never_hurts(solver: str) -> None:
    old_inst, new_inst = grown()
    cm = get_cost_model("analytic")
    old = solve_on_budget(solver, old_inst, cm, 10, seed=0).plan
    total = int(table_bytes_array(new_inst).sum())
    results = {}
    for share in (0.0, 0.05, None):
        budget = None if share is None else int(share * total)
        r = replan(get_solver(solver), new_inst, cm, old, max_moved_bytes=budget, time_limit=20, seed=0)
        assert r.plan is not None, r.reason
        assert check_plan(new_inst, r.plan).ok
        moved = r.info["replan"]["moved_bytes"]
        assert moved == moved_bytes(new_inst, old, r.plan)  # reported = recounted
        if budget is not None:
            assert moved <= budget
        results[share] = r.predicted_cost
    assert results[None] <= results[0.0] + 1e-9  # the zero-move start is among the unlimited run's candidates
    assert results[0.05] <= results[0.0] + 1e-9


def test_a_heavy_move_price_keeps_everything_in_place() -> None:
    old_inst, new_inst = grown()
    cm = get_cost_model("analytic")
    old = get_solver("greedy").solve(old_inst, cm, seed=0).plan
    r = replan(get_solver("greedy"), new_inst, cm, old, move_weight=1e9, time_limit=20, seed=0)
    assert r.info["replan"]["moved_bytes"] == 0
    kept = {s.table: s.device for s in old.shards}
    for s in r.plan.shards:
        if s.table in kept and s.table != old_inst.tables[2].name:
            assert s.device == kept[s.table]


def test_same_seed_same_replan() -> None:
    old_inst, new_inst = grown()
    cm = get_cost_model("analytic")
    old = get_solver("greedy").solve(old_inst, cm, seed=0).plan
    a = replan(get_solver("greedy"), new_inst, cm, old, max_moved_bytes=10**7, time_limit=30, seed=1)
    b = replan(get_solver("greedy"), new_inst, cm, old, max_moved_bytes=10**7, time_limit=30, seed=1)
    assert a.plan.shards == b.plan.shards


def test_cli_from_with_a_percentage_budget(tmp_path: Path) -> None:
    old_inst, new_inst = grown()
    runner = CliRunner()
    old_path, new_path = tmp_path / "old.json", tmp_path / "new.json"
    save(get_solver("greedy").solve(old_inst, get_cost_model("analytic"), seed=0).plan, old_path)
    save(new_inst, new_path)
    res = runner.invoke(app, ["solve", str(new_path), "--solver", "greedy", "--from", str(old_path), "--max-moved-bytes", "5%", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["replan"]["moved_bytes"] <= 0.05 * doc["replan"]["model_bytes"]
    assert doc["replan"]["carried_over"]["added"] == ["new0", "new1", "new2", "new3"]
    text = runner.invoke(app, ["solve", str(new_path), "--solver", "greedy", "--from", str(old_path), "--move-weight", "1000"])
    assert text.exit_code == 0 and "re-planned:" in text.output


@pytest.mark.parametrize("args, needle", [
    (["--max-moved-bytes", "5%"], "need --from"),
    (["--from", "OLD", "--max-moved-bytes", "lots"], "--max-moved-bytes: 'lots'"),
    (["--from", "OLD", "--max-moved-bytes", "150%"], "--max-moved-bytes: '150%'"),
])
def test_cli_replan_bad_input_exits_2(tmp_path: Path, args: list[str], needle: str) -> None:
    old_path = tmp_path / "old.json"
    inst = load_instance(SMALL)
    save(get_solver("greedy").solve(inst, get_cost_model("analytic"), seed=0).plan, old_path)
    args = [str(old_path) if a == "OLD" else a for a in args]
    res = CliRunner().invoke(app, ["solve", str(SMALL), "--solver", "greedy", *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output


def test_cli_from_a_file_that_is_not_a_plan_exits_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["solve", str(SMALL), "--from", str(SMALL)])
    assert res.exit_code == 2
    assert "kind" in res.output
