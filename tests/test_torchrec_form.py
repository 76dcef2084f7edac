"""The form TorchRec loads, as plan rules (shardopt.core.torchrec_form, constraints.torchrec), and the searches that
keep it; and tables the constraints allow only row splits or replicas (pre-placed by the tiered layouts).

Why here and not only in the DMP tests: the rules are the plan checker's, and every solver must meet them on any
instance, not only on the models DMP runs; these tests hold random and suite instances to them without TorchRec."""

from __future__ import annotations

import pytest
from conftest import make_instance

from costmodels.analytic import AnalyticCostModel
from shardopt.core.constraint_proofs import constraint_infeasibility
from shardopt.core.ir import IRError, PlacementConstraints, Shard, instance_from_dict, load_instance
from shardopt.core.plan_check import check_plan
from shardopt.core.sharding_types import sharding_type
from shardopt.core.torchrec_form import rw_layout
from solvers.catalog import get_solver

SEARCHES = ["neuroshard", "neuroshard_faithful", "cpsat", "milp_highs"]


def _form(instance, even: bool = True, **constraints):  # noqa: ANN001, ANN201
    c = PlacementConstraints.model_validate({**constraints, "torchrec": {"even_columns": even}})
    return instance.model_copy(update={"constraints": c})


def _doc(n_devices: int = 4, per_host: int = 2) -> dict:
    return {"tables": [{"name": f"t{i}", "rows": 1000 + 37 * i, "dim": 32, "pooling_factor": 2.0, "access": {"zipf": 1.0}} for i in range(4)],
            "topology": {"num_devices": n_devices, "devices_per_host": per_host, "memory_bytes": 10**8, "hardware": "v100"},
            "workload": {"batch_size": 512}}


def test_the_checker_holds_a_plan_for_torchrec_to_the_form_torchrec_loads() -> None:
    base = instance_from_dict(_doc())
    inst = _form(base)
    whole = [Shard(table=f"t{i}", device=i) for i in range(4)]
    assert check_plan(inst, whole).ok
    uneven = [Shard(table="t0", device=0, cols=16), Shard(table="t0", device=1, col_offset=16, cols=8), Shard(table="t0", device=2, col_offset=24, cols=8)] + whole[1:]
    assert check_plan(base, uneven).ok  # (no form: any widths)
    bad = check_plan(inst, uneven)
    assert [v.kind for v in bad.violations] == ["torchrec"] and "16, 8 columns wide" in bad.violations[0].message
    assert check_plan(_form(base, even=False), uneven).ok  # (uneven widths on different ranks load; only the reload needs even ones)
    two_shapes = [Shard(table="t0", device=0, cols=16), Shard(table="t0", device=0, col_offset=16, cols=8), Shard(table="t0", device=1, col_offset=24, cols=8)] + whole[1:]
    assert "device 0 holds 2 slices of it of different shapes" in check_plan(_form(base, even=False), two_shapes).violations[0].message
    equal_on_one = [Shard(table="t0", device=0, cols=8), Shard(table="t0", device=0, col_offset=8, cols=8),
                    Shard(table="t0", device=3, col_offset=16, cols=8), Shard(table="t0", device=1, col_offset=24, cols=8)] + whole[1:]
    assert check_plan(inst, equal_on_one).ok  # (TorchRec stacks equal blocks of a table on one rank)
    rows = base.tables[1].rows
    off_layout = [whole[0], Shard(table="t1", device=0, rows=10), Shard(table="t1", device=1, row_offset=10)] + whole[2:]
    assert check_plan(base, off_layout).ok and "not a TorchRec row layout" in check_plan(inst, off_layout).violations[0].message
    torchrec_rows = [whole[0]] + [Shard(table="t1", device=d, row_offset=o, rows=n) for d, (o, n) in enumerate(rw_layout(rows, 4))] + whole[2:]
    assert check_plan(inst, torchrec_rows).ok
    mixed = [whole[0], Shard(table="t1", device=0, rows=500), Shard(table="t1", device=1, row_offset=500, kernel="fused_uvm")] + whole[2:]
    doc = _doc()
    doc["topology"]["host_memory_bytes"] = 10**8
    mixed_inst = _form(instance_from_dict(doc))
    assert any("2 kernels" in v.message for v in check_plan(mixed_inst, mixed).violations)


def test_the_form_is_validated_and_leaves_other_instances_as_they_were() -> None:
    base = instance_from_dict(_doc())
    doc = _doc()
    doc["constraints"] = {"tables": [{"table": "t0", "devices": [1]}]}
    pinned = instance_from_dict(doc)
    assert "torchrec" not in pinned.model_dump(mode="json")["constraints"]  # (written as before: the content hash too)
    assert pinned.content_hash() == instance_from_dict(doc).content_hash()
    doc["constraints"]["torchrec"] = {"even_columns": "sometimes"}
    with pytest.raises(IRError, match="constraints.torchrec.even_columns"):
        instance_from_dict(doc)
    assert _form(base).constraint_kinds() == {"torchrec"} and _form(base).content_hash() != base.content_hash()


@pytest.mark.parametrize("solver", SEARCHES)
@pytest.mark.parametrize("seed", range(3))
def test_the_searches_cut_tables_in_one_width_for_torchrec(solver: str, seed: int) -> None:
    """On random instances where the searches cut tables (the plan checker would refuse any other plan: a crash), every
    cut table is in pieces of one width."""
    inst = _form(make_instance(12, 4, seed=seed, mem_factor=1.2))
    r = get_solver(solver).solve(inst, AnalyticCostModel(), time_limit=3, seed=seed)
    assert r.plan is not None, r.reason
    for t in inst.tables:
        widths = {s.width(t) for s in r.plan.shards if s.table == t.name}
        assert len(widths) == 1, (t.name, widths)


def test_an_even_neuroshard_search_is_no_worse_than_its_greedy_seed_and_cuts_where_it_pays() -> None:
    inst = _form(load_instance("instances/suites/neuroshard-test/neuroshard-test-s1-0001.json"))
    cm = AnalyticCostModel()
    r = get_solver("neuroshard").solve(inst, cm, seed=0)
    g = get_solver("greedy").solve(inst, cm, seed=0)
    assert r.predicted_cost <= g.predicted_cost and any(s.cols is not None for s in r.plan.shards)


@pytest.mark.parametrize("solver", ["greedy", "neuroshard", "cpsat"])
def test_a_table_the_constraints_allow_only_row_splits_or_replicas_is_placed_so(solver: str) -> None:
    """row_wise only: TorchRec's layout over every device; table_row_wise only: one host's, within its pins, the tables
    kept apart from it elsewhere; data_parallel only: a replica on every device - beside a pin and a separate group."""
    doc = _doc()
    doc["tables"] += [{"name": f"u{i}", "rows": 20_000, "dim": 16, "pooling_factor": 3.0, "access": {"zipf": 1.0}} for i in range(3)]
    inst = instance_from_dict({**doc, "constraints": {
        "tables": [{"table": "u0", "sharding_types": ["row_wise"]}, {"table": "u1", "sharding_types": ["table_row_wise"], "devices": [2, 3]},
                   {"table": "u2", "sharding_types": ["data_parallel"]}, {"table": "t0", "devices": [1]}],
        "separate": [["u1", "t1"], ["t0", "t2"]], "torchrec": {"even_columns": True}}})
    r = get_solver(solver).solve(inst, AnalyticCostModel(), time_limit=5, seed=0)
    assert r.plan is not None, r.reason
    assert check_plan(inst, r.plan).ok
    by = {t.name: [s for s in r.plan.shards if s.table == t.name] for t in inst.tables}
    topo = inst.topology
    rows = inst.tables[4].rows
    assert sorted((s.device, s.row_offset) for s in by["u0"]) == [(d, o) for d, (o, n) in enumerate(rw_layout(rows, 4)) if n > 0]
    assert sharding_type(topo, inst.tables[5], by["u1"]) == "table_row_wise" and {s.device for s in by["u1"]} == {2, 3}
    assert {s.device for s in by["t1"]}.isdisjoint({2, 3})
    assert sorted(s.device for s in by["u2"]) == [0, 1, 2, 3] and all(s.replicated for s in by["u2"])
    assert {s.device for s in by["t0"]} == {1}


def test_row_splits_only_where_no_plan_can_meet_them_is_proven_infeasible() -> None:
    def proof(**c: object) -> str | None:
        return constraint_infeasibility(instance_from_dict({**_doc(), "constraints": c}))

    assert "puts a shard on every device, so 't1', kept apart from it, has no device" in proof(
        tables=[{"table": "t0", "sharding_types": ["row_wise"]}], separate=[["t0", "t1"]])
    assert "which puts a shard on every device, but it is pinned to [0, 1]" in proof(tables=[{"table": "t0", "sharding_types": ["data_parallel"], "devices": [0, 1]}])
    assert "hold no whole host" in proof(tables=[{"table": "t0", "sharding_types": ["table_row_wise"], "devices": [1, 2]}])
    assert proof(tables=[{"table": "t0", "sharding_types": ["table_row_wise"], "devices": [2, 3]}], separate=[["t0", "t1"]]) is None
    # a table of fewer rows than devices leaves some devices without a block: no proof that it is everywhere
    doc = _doc()
    doc["tables"][0]["rows"] = 3
    assert constraint_infeasibility(instance_from_dict({**doc, "constraints": {"tables": [{"table": "t0", "sharding_types": ["row_wise"]}],
                                                                                "separate": [["t0", "t1"]]}})) is None


def test_torchrecs_own_plan_is_rated_by_its_estimators_as_its_planner_rated_it() -> None:
    pytest.importorskip("torchrec")
    from solvers.torchrec_estimate import NotRatable, torchrec_rating

    inst = load_instance("instances/suites/dreamshard-test/dreamshard-test-s1-0000.json")
    r = get_solver("torchrec").solve(inst, AnalyticCostModel(), seed=0)
    got = torchrec_rating(inst, r.plan)
    assert got["torchrec_perf_rating_ms"] == pytest.approx(r.info["torchrec_perf_rating_ms"], rel=1e-9)
    assert len(got["per_rank"]) == inst.topology.num_devices
    t = next(t for t in inst.tables if t.dim % 16 == 0)
    uneven = [Shard(table=t.name, device=0, cols=t.dim // 2), Shard(table=t.name, device=1, col_offset=t.dim // 2, cols=t.dim // 4),
              Shard(table=t.name, device=2, col_offset=3 * t.dim // 4)] + [s for s in r.plan.shards if s.table != t.name]
    with pytest.raises(NotRatable, match="pieces of one width only"):
        torchrec_rating(inst, uneven)
