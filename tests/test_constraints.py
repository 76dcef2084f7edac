"""Placement constraints in the IR (issue 'planner', item 2, first part): validation naming the field, the plan
checker's "constraint" violations, the heuristics honouring pins, co-location and separation (checked here by an
independent test, not by the checker alone), and every other solver refused by name before it solves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, make_instance, solve_on_budget
from typer.testing import CliRunner

from shardopt.cli import app
from shardopt.core.ir import Instance, IRError, Plan, Shard, instance_from_dict, save
from shardopt.core.plan_check import check_plan
from shardopt.core.torchrec_form import rw_layout

HEURISTICS = ["greedy", "random", "round_robin", "size", "dim", "lookup", "size_lookup"]


def _doc(constraints: dict | None, tables: int = 6, devices: int = 4) -> dict:
    doc = {
        "tables": [{"name": f"t{i}", "rows": 1000 * (i + 1), "dim": 16, "pooling_factor": 2.0, "access": {"zipf": 1.0}} for i in range(tables)],
        "topology": {"num_devices": devices, "devices_per_host": devices, "memory_bytes": 10**9, "hardware": "v100"},
        "workload": {"batch_size": 64},
    }
    if constraints is not None:
        doc["constraints"] = constraints
    return doc


def test_constraints_are_validated_naming_the_field_and_leave_other_instances_unchanged(tmp_path: Path) -> None:
    def refused(constraints: dict, *words: str) -> None:
        with pytest.raises(IRError) as err:
            instance_from_dict(_doc(constraints))
        assert all(w in str(err.value) for w in words), str(err.value)

    refused({"tables": [{"table": "nope", "devices": [0]}]}, "constraints.tables[0].table", "'nope'")
    refused({"tables": [{"table": "t0", "devices": [4]}]}, "constraints.tables[0].devices", "4")
    refused({"tables": [{"table": "t0", "sharding_types": ["diagonal"]}]}, "sharding_types", "'diagonal'")
    refused({"tables": [{"table": "t0", "min_partition": 6}]}, "min_partition", "6")
    refused({"tables": [{"table": "t0"}, {"table": "t0", "devices": [1]}]}, "constrained twice")
    refused({"separate": [["t0"]]}, "constraints.separate[0]", "fewer than two")
    refused({"colocate": [["t0", "zz"]]}, "constraints.colocate[0]", "'zz'")
    plain = instance_from_dict(_doc(None))
    assert plain.constraints is None and "constraints" not in json.loads(Path(_saved(plain, tmp_path)).read_text())
    inst = instance_from_dict(_doc({"tables": [{"table": "t1", "devices": [2, 3]}], "separate": [["t0", "t2"]]}))
    assert inst.content_hash() != plain.content_hash()  # (a constraint is part of the problem)
    from shardopt.core.ir import load_instance

    assert load_instance(_saved(inst, tmp_path)) == inst


def _saved(inst, tmp_path: Path) -> str:
    path = tmp_path / f"i{abs(hash(inst.content_hash()))}.json"
    save(inst, path)
    return str(path)


def test_the_checker_names_every_broken_constraint() -> None:
    inst = instance_from_dict(_doc({"tables": [{"table": "t0", "devices": [1]}, {"table": "t1", "sharding_types": ["column_wise"]},
                                               {"table": "t3", "kernels": ["fused_uvm"]}],
                                    "colocate": [["t4", "t5"]], "separate": [["t2", "t3"]]}))
    bad = Plan(shards=[Shard(table=f"t{i}", device=d) for i, d in enumerate([0, 1, 2, 2, 0, 3])])
    messages = [v.message for v in check_plan(inst, bad).violations if v.kind == "constraint"]
    assert any("'t0' has a shard on device 0" in m for m in messages)
    assert any("'t1' is placed table_wise" in m for m in messages)
    assert any("'t3' on device 2: kernel fused" in m for m in messages)
    assert any("co-located tables on different devices" in m for m in messages)
    assert any("'t2' and 't3' must be apart" in m for m in messages)


@pytest.mark.parametrize("seed", range(6))
def test_heuristics_honour_random_pins_colocation_and_separation(seed: int) -> None:
    """Random instances with random constraints: every heuristic's plan meets every constraint (checked here, apart
    from the checker under test), or the solver says it found none - never a plan that breaks one."""
    rng = np.random.default_rng(seed)
    base = make_instance(12, 4, seed=seed, mem_factor=3.0)
    names = [t.name for t in base.tables]
    pick = rng.permutation(names)
    pins = {str(n): sorted(int(d) for d in rng.choice(4, size=int(rng.integers(1, 3)), replace=False)) for n in pick[:3]}
    colocate = [[str(pick[3]), str(pick[4])]]
    separate = [[str(pick[5]), str(pick[6]), str(pick[7])]]
    doc = base.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": n, "devices": d} for n, d in pins.items()], "colocate": colocate, "separate": separate}
    inst = instance_from_dict(doc)
    from costmodels.registry import get_cost_model
    from solvers.catalog import get_solver

    placed = 0
    for name in HEURISTICS:
        r = get_solver(name).solve(inst, get_cost_model("analytic"), seed=seed)
        if r.plan is None:
            assert r.status.value == "no_solution" and "not proven infeasible" in r.reason
            continue
        placed += 1
        where = {s.table: s.device for s in r.plan.shards}
        assert len(where) == len(names) and all(s.rows is None and s.cols is None for s in r.plan.shards)  # whole tables
        for n, d in pins.items():
            assert where[n] in d, (name, n, where[n], d)
        assert where[colocate[0][0]] == where[colocate[0][1]], name
        assert len({where[n] for n in separate[0]}) == 3, name
    assert placed >= len(HEURISTICS) - 1  # (memory is 3x the tables': all but a random packer's bad luck place them)


def test_other_solvers_are_refused_by_name_before_solving(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    save(instance_from_dict(_doc({"tables": [{"table": "t0", "devices": [1]}], "separate": [["t1", "t2"]]})), path)
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "torchrec"])
    assert r.exit_code == 2
    text = " ".join(r.stderr.split())
    assert "solver 'torchrec' does not honour the instance's devices, separate constraint(s)" in text and "greedy" in text
    ok = CliRunner().invoke(app, ["solve", str(path), "--solver", "greedy", "--json"])
    assert ok.exit_code == 0, ok.stderr
    where = {s["table"]: s["device"] for s in json.loads(ok.stdout)["plan"]["shards"]}
    assert where["t0"] == 1 and where["t1"] != where["t2"]
    # a table that must be column-wise: the heuristics place it whole, marked column_wise (TorchRec's column_wise with
    # one rank); one that may only be row-wise they split by rows in TorchRec's layout over every device
    save(instance_from_dict(_doc({"tables": [{"table": "t0", "sharding_types": ["column_wise"]}]})), path)
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "greedy", "--json"])
    assert r.exit_code == 0, r.stderr
    t0 = [s for s in json.loads(r.stdout)["plan"]["shards"] if s["table"] == "t0"]
    assert len(t0) == 1 and t0[0].get("column_wise") is True
    inst = instance_from_dict(_doc({"tables": [{"table": "t0", "sharding_types": ["row_wise"]}]}))
    save(inst, path)
    r = CliRunner().invoke(app, ["solve", str(path), "--solver", "greedy", "--json"])
    assert r.exit_code == 0, r.stderr
    t0 = sorted((s.get("row_offset", 0), s.get("rows"), s["device"]) for s in json.loads(r.stdout)["plan"]["shards"] if s["table"] == "t0")
    rows = inst.tables[0].rows
    assert [(o, n if n is not None else rows, d) for o, n, d in t0] == [(o, n, d) for d, (o, n) in enumerate(rw_layout(rows, 4)) if n > 0]


def _random_constraints(seed: int, cuts: bool = True) -> tuple[Instance, dict]:
    """12 tables on 4 devices with 3 random pins, a co-located pair, a separate triple and (`cuts`) a table that may
    only be column-wise and one with a min_partition of 8 columns."""
    rng = np.random.default_rng(seed)
    base = make_instance(12, 4, seed=seed, mem_factor=3.0)
    pick = [str(n) for n in rng.permutation([t.name for t in base.tables])]
    want = {"pins": {n: sorted(int(d) for d in rng.choice(4, size=int(rng.integers(1, 3)), replace=False)) for n in pick[:3]},
            "colocate": pick[3:5], "separate": pick[5:8], "column_wise": pick[8], "min_partition": pick[9]}
    doc = base.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": n, "devices": d} for n, d in want["pins"].items()]
                          + ([{"table": pick[8], "sharding_types": ["column_wise"]}, {"table": pick[9], "min_partition": 8}] if cuts else []),
                          "colocate": [want["colocate"]], "separate": [want["separate"]]}
    return instance_from_dict(doc), want


@pytest.mark.parametrize("solver", ["cpsat", "milp_highs", "neuroshard"])
@pytest.mark.parametrize("seed", range(3))
def test_searches_honour_random_constraints(solver: str, seed: int) -> None:
    """The exact solvers' model carries the constraints (pins and types in its allowed pairs, co-location and
    separation as rows), NeuroShard's grid, splits and polish keep to them (solvers.placement.rules): each plan
    checked here shard by shard, apart from the checker - including a table that may only be column-wise, which the
    whole-table heuristics place whole and marked column_wise."""
    from costmodels.registry import get_cost_model
    from solvers.catalog import get_solver

    inst, want = _random_constraints(seed)
    r = solve_on_budget(solver, inst, get_cost_model("analytic"), 3, seed=seed)
    assert r.plan is not None, r.reason
    by: dict[str, list[Shard]] = {}
    for s in r.plan.shards:
        by.setdefault(s.table, []).append(s)
    for n, devs in want["pins"].items():
        assert {s.device for s in by[n]} <= set(devs), (n, by[n], devs)
    a, b = want["colocate"]
    assert {s.device for s in by[a]} == {s.device for s in by[b]}
    sep = [{s.device for s in by[n]} for n in want["separate"]]
    assert all(not (sep[i] & sep[j]) for i in range(3) for j in range(i + 1, 3))
    cw = by[want["column_wise"]]
    # column pieces of every row, or one whole shard in the column-wise collective (TorchRec's column_wise on one rank)
    assert all(s.rows is None for s in cw)
    assert (len(cw) >= 2 and all(s.cols is not None for s in cw)) or (len(cw) == 1 and cw[0].is_whole and cw[0].column_wise), cw
    assert all(s.cols is None or s.cols >= 8 for s in by[want["min_partition"]])
    assert check_plan(inst, r.plan).ok
    from solvers.bound import analytic_lower_bound, uncovered_reason

    if uncovered_reason(r.plan.shards) is None:  # (the certified bound counts the constraints and stays below the plan)
        bound = analytic_lower_bound(inst, get_cost_model("analytic"), time_limit=3)
        assert bound.constraints_counted is True and bound.value_ms <= r.predicted_cost * (1 + 1e-7)
    whole = get_solver("greedy").solve(inst, get_cost_model("analytic"), seed=seed)
    assert whole.plan is not None and check_plan(inst, whole.plan).ok
    assert [s.column_wise for s in whole.plan.shards if s.table == want["column_wise"]] == [True]


def test_a_constraint_set_without_a_plan_exits_3_naming_the_constraints(tmp_path: Path) -> None:
    """Constraints that provably leave no plan of any kind: `shardopt solve` exits 3 before any solver runs, naming
    them (shardopt.core.constraint_proofs); a solver that meets them on its own says so too (status infeasible)."""
    from costmodels.registry import get_cost_model
    from shardopt.core.constraint_proofs import constraint_infeasibility

    cases = [
        ({"separate": [["t0", "t1", "t2", "t3", "t4"]]}, "constraints.separate[0]", "only 4"),
        ({"tables": [{"table": "t0", "devices": [0]}, {"table": "t1", "devices": [0]}], "separate": [["t0", "t1"]]}, "constraints.separate[0]", "only 1"),
        ({"tables": [{"table": "t0", "devices": [0]}, {"table": "t1", "devices": [1]}], "colocate": [["t0", "t2"], ["t2", "t1"]]},
         "constraints.colocate", "none in common"),
        ({"colocate": [["t0", "t1"], ["t1", "t2"]], "separate": [["t2", "t0"]]}, "constraints.separate[0] keeps 't2' and 't0' apart", "same devices"),
        ({"tables": [{"table": "t5", "devices": [3]}, {"table": "t4", "devices": [3]}]}, "pinned within devices [3]", "bytes"),
    ]
    for k, (constraints, *words) in enumerate(cases):
        doc = _doc(constraints)
        if k == 4:  # (two big tables on one small device)
            doc["topology"]["memory_bytes"] = 400_000
        inst = instance_from_dict(doc)
        assert constraint_infeasibility(inst) is not None
        path = tmp_path / f"c{k}.json"
        save(inst, path)
        r = CliRunner().invoke(app, ["solve", str(path), "--solver", "cpsat", "--json"])
        assert r.exit_code == 3, r.stderr
        err = json.loads(r.stdout)["error"] if r.stdout.strip() else {}
        text = " ".join((r.stderr + json.dumps(err)).split())
        assert "no plan can meet the instance's placement constraints" in text and all(w in text for w in words), text
    ok = _doc({"tables": [{"table": "t0", "devices": [0, 1]}], "colocate": [["t0", "t1"]], "separate": [["t2", "t3"]]})
    assert constraint_infeasibility(instance_from_dict(ok)) is None
    base = make_instance(8, 4, seed=1, mem_factor=3.0)
    doc = base.model_dump(mode="json")
    doc["constraints"] = {"separate": [[t.name for t in base.tables[:5]]]}
    r = solve_on_budget("cpsat", instance_from_dict(doc), get_cost_model("analytic"), 5, seed=0)
    assert r.plan is None and r.status.value == "infeasible" and "constraints.separate[0]" in r.reason


@pytest.mark.parametrize("solver", ["dreamshard", "autoshard"])
def test_rl_policies_place_within_pins_and_groups(solver: str) -> None:
    """The RL policies' lanes mask the devices the constraints leave each table (whole tables): checked here on the
    plan's devices, over three seeds; a table that may only be column-wise is placed whole, marked column_wise."""
    from costmodels.registry import get_cost_model
    from solvers.catalog import get_solver

    for seed in range(3):
        inst, want = _random_constraints(seed, cuts=False)
        r = get_solver(solver).solve(inst, get_cost_model("analytic"), seed=seed)
        assert r.plan is not None, r.reason
        where = {s.table: s.device for s in r.plan.shards}
        assert all(where[n] in d for n, d in want["pins"].items())
        assert where[want["colocate"][0]] == where[want["colocate"][1]]
        assert len({where[n] for n in want["separate"]}) == 3
    cut, want = _random_constraints(0)
    r = get_solver(solver).solve(cut, get_cost_model("analytic"), seed=0)
    assert r.plan is not None and check_plan(cut, r.plan).ok, r.reason
    assert [s.column_wise for s in r.plan.shards if s.table == want["column_wise"]] == [True]


def test_torchrec_planner_honours_types_and_min_partition_through_its_own_constraints() -> None:
    """TorchRec's planner gets a table's allowed sharding types, kernels and min_partition in its ParameterConstraints
    (narrowing the solver's own), and its plan keeps them; pins and groups it cannot take are refused by name."""
    pytest.importorskip("torchrec")
    from costmodels.registry import get_cost_model
    from shardopt.core.sharding_types import sharding_type
    from solvers.catalog import UnhonouredConstraints, check_accepts, get_solver

    base = make_instance(10, 4, seed=3, mem_factor=3.0)
    wide = max(base.tables, key=lambda t: t.dim)
    doc = base.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": wide.name, "sharding_types": ["column_wise"], "min_partition": 8},
                                     {"table": base.tables[0].name, "sharding_types": ["row_wise"]}]}
    inst = instance_from_dict(doc)
    check_accepts("torchrec_all", inst)
    r = get_solver("torchrec_all").solve(inst, get_cost_model("analytic"), time_limit=60)
    assert r.plan is not None, r.reason
    by: dict[str, list[Shard]] = {}
    for s in r.plan.shards:
        by.setdefault(s.table, []).append(s)
    assert sharding_type(inst.topology, wide, by[wide.name]) == "column_wise" and all(s.width(wide) >= 8 for s in by[wide.name])
    assert sharding_type(inst.topology, base.tables[0], by[base.tables[0].name]) == "row_wise"
    doc["constraints"] = {"separate": [[base.tables[1].name, base.tables[2].name]]}
    with pytest.raises(UnhonouredConstraints, match="separate"):
        check_accepts("torchrec", instance_from_dict(doc))


@pytest.mark.parametrize("solver", ["greedy", "neuroshard", "cpsat"])
def test_memory_tiers_honour_kernels_cache_factors_pins_and_groups(solver: str) -> None:
    """A tiered instance (its tables beyond the HBM) with a table held in host memory behind a cache of a given load
    factor, one in host memory without a cache, one kept in HBM, a pin and two groups: the tiered layouts and the
    search within them keep every one (checked here shard by shard)."""
    from costmodels.registry import get_cost_model
    from shardopt.core.ir import load_instance

    inst = load_instance(ROOT / "instances/suites/tiered-test/tiered-test-s1-0001.json")
    pick = [str(n) for n in np.random.default_rng(0).permutation([t.name for t in inst.tables])]
    doc = inst.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": pick[0], "kernels": ["fused_uvm_caching"], "cache_load_factor": 0.3},
                                     {"table": pick[1], "kernels": ["fused"]}, {"table": pick[2], "devices": [0, 1]},
                                     {"table": pick[3], "kernels": ["fused_uvm"]}],
                          "separate": [[pick[4], pick[5]]], "colocate": [[pick[6], pick[7]]]}
    c = instance_from_dict(doc)
    r = solve_on_budget(solver, c, get_cost_model("analytic"), 6, seed=0)
    assert r.plan is not None, r.reason
    by: dict[str, list[Shard]] = {}
    for s in r.plan.shards:
        by.setdefault(s.table, []).append(s)
    assert all(s.kernel.value == "fused_uvm_caching" and s.cache_load_factor == 0.3 for s in by[pick[0]])
    assert all(s.kernel.value == "fused" for s in by[pick[1]]) and all(s.kernel.value == "fused_uvm" for s in by[pick[3]])
    assert {s.device for s in by[pick[2]]} <= {0, 1}
    assert not ({s.device for s in by[pick[4]]} & {s.device for s in by[pick[5]]})
    assert {s.device for s in by[pick[6]]} == {s.device for s in by[pick[7]]}
    assert check_plan(c, r.plan).ok


def test_a_tiered_plans_fixed_shards_become_pins_of_the_tables_grouped_with_them() -> None:
    """The exact solvers re-place a tiered plan's HBM tables with its host-memory and row-wise shards fixed: a movable
    table co-located with a fixed one is pinned to its devices, one kept apart from a fixed one is pinned off them,
    groups of movable tables stay groups, and a table left no device stops the re-placement."""
    from solvers.exact.tiered import sub_constraints

    inst = instance_from_dict(_doc({"tables": [{"table": "t0", "devices": [0, 1, 2]}], "colocate": [["t0", "t5"], ["t1", "t2"]],
                                    "separate": [["t3", "t5", "t4"]]}))
    fixed = [Shard(table="t5", device=2, kernel="fused_uvm")]
    got = sub_constraints(inst, {"t0", "t1", "t2", "t3", "t4"}, fixed)
    assert got.of("t0").devices == [2]  # (its own pins and t5's device)
    assert got.of("t3").devices == [0, 1, 3] and got.of("t4").devices == [0, 1, 3]
    assert got.colocate == [["t1", "t2"]] and got.separate == [["t3", "t4"]]
    assert sub_constraints(inst, {"t0", "t1", "t2", "t3", "t4"}, [Shard(table="t5", device=3, kernel="fused_uvm")]) is False


@pytest.mark.parametrize("solver", ["greedy", "size", "dreamshard", "autoshard"])
def test_whole_table_solvers_meet_a_column_wise_only_table_with_one_marked_shard(solver: str) -> None:
    """A table that may only be column-wise, co-located with another: the whole-table solvers place it whole, its shard
    marked column_wise (TorchRec's column_wise with one rank), beside its partner; the plan meets the constraints,
    and its other whole tables join the column-wise collective where that is cheaper (here: all of them)."""
    from costmodels.hierarchical import output_dist_widths
    from costmodels.registry import get_cost_model

    base = make_instance(8, 4, seed=1, mem_factor=3.0)
    doc = base.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": "t2", "sharding_types": ["column_wise"]}], "colocate": [["t2", "t3"]]}
    inst = instance_from_dict(doc)
    r = solve_on_budget(solver, inst, get_cost_model("analytic"), 5, seed=0)
    assert r.plan is not None, r.reason
    assert check_plan(inst, r.plan).ok
    by = {s.table: s for s in r.plan.shards}
    assert len(r.plan.shards) == len(inst.tables) and by["t2"].column_wise and by["t2"].device == by["t3"].device
    assert r.info["column_wise_only"] == ["t2"]
    assert output_dist_widths(inst, r.plan.shards)[1] == ["column_wise"]
