"""2D sparse parallelism (docs/analytic-model.md, "2D sparse parallelism"): the IR section, the groups as
DMPCollection forms them, the group's flat instance, the replica sync's price, and the solve over group sizes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import instance_doc

from costmodels.analytic import AnalyticCostModel
from costmodels.replica_sync import replica_sync
from shardopt.core.ir import Instance, instance_from_dict
from shardopt.core.ir_base import IRError
from shardopt.core.plan_check import check_plan
from shardopt.core.sharding_groups import (
    candidate_group_sizes,
    group_instance,
    job_levels,
    replica_groups,
    ring_span,
    sharding_groups,
)
from shardopt.core.two_d import GroupLayout, divisors
from solvers.catalog import get_solver
from solvers.two_d import planned_instance


def job(two_d: dict[str, Any] | None, *, devices: int = 16, per_host: int = 8, batch: int = 4096,
        tables: int = 12, memory: int = 2 ** 30, optimizer: str = "rowwise_adagrad") -> Instance:
    base = instance_doc([(20_000 + 7_000 * i, 32 + 16 * (i % 3), 2.0 + i % 5) for i in range(tables)], memory,
                        n_devices=devices, per_host=per_host, optimizer=optimizer, hardware="a100")
    doc = base.model_dump(mode="json", exclude_none=True)
    doc["workload"]["batch_size"] = batch
    if two_d is not None:
        doc["two_d"] = two_d
    return instance_from_dict(doc)


# ---- the IR section -------------------------------------------------------------------------------------------

def test_a_group_size_that_does_not_divide_the_world_is_refused_by_name() -> None:
    with pytest.raises(IRError, match=r"two_d.group_size: 6 does not divide topology.num_devices 16"):
        job({"group_size": 6})


def test_pins_name_group_ranks() -> None:
    doc = job({"group_size": 4}).model_dump(mode="json", exclude_none=True)
    doc["constraints"] = {"tables": [{"table": "t0", "devices": [5]}]}
    with pytest.raises(IRError, match=r"constraints.tables\[0\].devices: 5 is not a rank of a sharding group"):
        instance_from_dict(doc)
    doc["two_d"] = {"group_size": "auto"}
    with pytest.raises(IRError, match="fix two_d.group_size to pin tables"):
        instance_from_dict(doc)


def test_old_documents_hash_as_before_and_the_section_changes_the_hash() -> None:
    flat = job(None)
    assert "two_d" not in flat.model_dump(mode="json", exclude_none=True)
    assert job({"group_size": 4}).content_hash() != flat.content_hash()
    assert job({"group_size": 4}).content_hash() != job({"group_size": 8}).content_hash()


def test_divisors() -> None:
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(4096) == [2 ** k for k in range(13)]


# ---- the groups -----------------------------------------------------------------------------------------------

def test_groups_follow_dmpcollection() -> None:
    # DMPCollection's docstring example (TorchRec 1.8): 2 nodes x 4 GPUs, groups of 4, default layout
    assert sharding_groups(8, 4, GroupLayout.alternating).tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert replica_groups(8, 4, GroupLayout.alternating).tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # use_inter_host_allreduce=True: contiguous ranks per group, replicas strided
    assert sharding_groups(8, 4, GroupLayout.contiguous).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert replica_groups(8, 4, GroupLayout.contiguous).tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_the_group_sees_the_links_its_ranks_span() -> None:
    alt = group_instance(job({"group_size": 4, "layout": "alternating"}, devices=32), 4)
    assert alt.topology.num_devices == 4 and alt.topology.devices_per_host == 1  # one rank on each host
    con = group_instance(job({"group_size": 4, "layout": "contiguous"}, devices=32), 4)
    assert con.topology.devices_per_host == 4  # the group inside one host
    assert alt.workload.batch_size == con.workload.batch_size == 4096 * 4 // 32
    levels = job_levels(job(None, devices=32).topology)
    # the alternating layout's replica group: 8 consecutive ranks, one host's NVLink; the contiguous one's (0, 4, ..., 28) crosses hosts
    near = ring_span(levels, replica_groups(32, 4, GroupLayout.alternating)[0])
    far = ring_span(levels, replica_groups(32, 4, GroupLayout.contiguous)[0])
    assert near.levels == ("host",) and far.levels == ("host", "network") and near.bandwidth > far.bandwidth


def test_uneven_groups_and_batches_are_refused_by_name() -> None:
    inst = job({"group_size": "auto", "layout": "contiguous"}, devices=48, per_host=8, batch=4800)
    sizes = dict(candidate_group_sizes(inst))
    assert sizes[48] is None and sizes[8] is None
    assert "two_d.group_size 12 with layout contiguous" in sizes[12]  # 12 contiguous ranks cut a host of 8
    assert sizes[16] is None and sizes[6] is not None and "two_d.group_size 6" in sizes[6]  # ranks 6..11: 2 + 4 on two hosts
    with pytest.raises(IRError, match=r"workload.batch_size: 4097 does not split"):
        group_instance(job({"group_size": 8}, batch=4097), 8)


def test_group_memory_is_the_least_any_group_gives_a_rank() -> None:
    doc = job({"group_size": 4}, devices=8, per_host=4).model_dump(mode="json", exclude_none=True)
    doc["topology"]["memory_bytes"] = [2 ** 30] * 7 + [2 ** 29]
    sub = group_instance(instance_from_dict(doc), 4)
    # alternating: group rank 3 is ranks 6 and 7; rank 7 has half the memory
    assert sub.topology.capacities() == [2 ** 30, 2 ** 30, 2 ** 30, 2 ** 29]


# ---- the sync's price -----------------------------------------------------------------------------------------

def test_replica_sync_counts_every_rank_bytes_and_follows_the_formula() -> None:
    inst = job({"group_size": 4, "sync_interval": 10}, devices=16, per_host=8)
    r = get_solver("greedy").solve(inst, AnalyticCostModel(), seed=0)
    plan = r.plan
    sync = replica_sync(inst, plan, 4)
    sub = planned_instance(inst, plan)
    from shardopt.core.memory import slice_bytes

    total = sum(slice_bytes(sub, sub.tables[sub.table_index()[s.table]], s.height(sub.tables[sub.table_index()[s.table]]),
                            s.width(sub.tables[sub.table_index()[s.table]])) for s in plan.shards)
    assert sync.rank_bytes.sum() == pytest.approx(total)
    assert sync.replicas == 4 and all(sp.levels == ("host",) for sp in sync.spans)  # 4 consecutive ranks: one host
    bw = job_levels(inst.topology)[0].bandwidth
    want = (2 * 3 / 4 * sync.rank_bytes / bw + 15e-6) * 1e3 / 10
    assert np.allclose(sync.rank_ms, want)
    flat = job({"group_size": 16}, devices=16)
    assert replica_sync(flat, get_solver("greedy").solve(flat, AnalyticCostModel(), seed=0).plan, 16).ms == 0.0


def test_fully_sharded_moves_the_weights_every_iteration() -> None:
    default = job({"group_size": 4, "sync_interval": 5}, devices=16)
    full = job({"group_size": 4, "strategy": "fully_sharded", "sync_interval": 5}, devices=16)
    plan = get_solver("greedy").solve(default, AnalyticCostModel(), seed=0).plan
    a, b = replica_sync(default, plan, 4), replica_sync(full, plan, 4)
    assert (b.rank_bytes < a.rank_bytes).all()  # weights only: no optimizer state
    assert b.ms > a.ms  # every iteration, not every fifth


# ---- solving --------------------------------------------------------------------------------------------------

def test_a_fixed_group_size_plans_that_group() -> None:
    inst = job({"group_size": 4}, devices=16)
    r = get_solver("neuroshard").solve(inst, AnalyticCostModel(), seed=0)
    assert r.status.has_plan and r.plan.sharding_group_size == 4
    assert max(s.device for s in r.plan.shards) < 4
    sub = planned_instance(inst, r.plan)
    assert check_plan(sub, r.plan.shards).violations == []
    assert r.plan.instance == inst.content_hash()
    assert r.plan.predicted_cost == pytest.approx(r.two_d.trials[0].total_ms)
    assert r.plan.params["two_d"]["sharding_group_size"] == 4


def test_auto_scouts_every_group_size_and_keeps_the_cheapest_refined() -> None:
    inst = job({"group_size": "auto", "sync_interval": 100}, devices=16, tables=16)
    r = get_solver("neuroshard").solve(inst, AnalyticCostModel(), seed=0)
    choice = r.two_d
    formed = [g for g, why in candidate_group_sizes(inst) if why is None]
    assert sorted({t.group_size for t in choice.trials if not t.refined}) == formed
    refined = [t for t in choice.trials if t.refined and t.embedding_ms is not None]
    assert refined and choice.group_size == min(refined, key=lambda t: t.total_ms).group_size
    assert r.plan.predicted_cost == pytest.approx(min(t.total_ms for t in refined))
    again = get_solver("neuroshard").solve(inst, AnalyticCostModel(), seed=0)
    assert json.dumps([s.model_dump() for s in again.plan.shards]) == json.dumps([s.model_dump() for s in r.plan.shards])


def test_no_group_fits_says_why() -> None:
    inst = job({"group_size": 1}, devices=4, per_host=4, memory=2 ** 22)
    r = get_solver("greedy").solve(inst, AnalyticCostModel(), seed=0)
    assert not r.status.has_plan and "G = 1" in r.reason


# ---- the command line -----------------------------------------------------------------------------------------

def test_cli_solves_a_2d_instance_and_exports_dmpcollection_arguments(tmp_path) -> None:
    from typer.testing import CliRunner

    from shardopt.cli import app
    from shardopt.core.ir import save

    path, plan_path = tmp_path / "job.json", tmp_path / "plan.json"
    save(job({"group_size": "auto", "sync_interval": 50}, devices=16), path)
    r = CliRunner().invoke(app, ["solve", str(path), "--json", "-o", str(plan_path)])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    g = doc["two_d"]["group_size"]
    assert g in divisors(16) and doc["plan"]["sharding_group_size"] == g and len(doc["predicted"]["devices"]) == g
    assert {t["group_size"] for t in doc["two_d"]["trials"]} >= {1, 2, 4, 8, 16}
    text = CliRunner().invoke(app, ["solve", str(path)])
    assert text.exit_code == 0 and "sync ms" in text.stdout and "sharding group sizes tried" in text.stdout
    judged = CliRunner().invoke(app, ["evaluate", str(path), str(plan_path), "--backend", "sim", "--json"])
    assert judged.exit_code == 0, judged.stdout + judged.stderr
    j = json.loads(judged.stdout)["two_d"]
    assert j["group_size"] == g and j["total_ms"] == pytest.approx(j["embedding_ms"] + j["sync_ms"])
    assert j["total_ms"] == pytest.approx(doc["plan"]["predicted_cost"])  # (the sim judge is the analytic model)
    explained = CliRunner().invoke(app, ["explain", str(path), str(plan_path), "--json"])
    assert explained.exit_code == 0 and json.loads(explained.stdout)["two_d"]["sync_ms"] == pytest.approx(j["sync_ms"])
    svg = tmp_path / "curve.svg"
    drawn = CliRunner().invoke(app, ["inspect", str(plan_path), "-i", str(path), "--draw", str(svg)])
    assert drawn.exit_code == 0, drawn.stdout + drawn.stderr
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert {r["group_size"] for r in doc["plan"]["params"]["two_d"]["group_sizes"]} <= set(divisors(16))
    flat_path = tmp_path / "flat.json"
    save(job(None, devices=16), flat_path)
    wrong = CliRunner().invoke(app, ["evaluate", str(flat_path), str(plan_path), "--backend", "sim"])
    assert wrong.exit_code == 2 and "sharding_group_size" in wrong.stderr
    pytest.importorskip("torchrec")
    out = tmp_path / "tr.json"
    e = CliRunner().invoke(app, ["export", str(plan_path), "--format", "torchrec", "-i", str(path), "-o", str(out), "--json"])
    assert e.exit_code == 0, e.stdout + e.stderr
    exported = json.loads(out.read_text())
    assert exported["dmp_collection"] == {"sharding_group_size": g, "world_size": 16, "use_inter_host_allreduce": False,
                                          "sharding_strategy": "default", "sync_interval": 50}


def test_cli_names_a_bad_group_size(tmp_path) -> None:
    from typer.testing import CliRunner

    from shardopt.cli import app

    doc = job(None).model_dump(mode="json", exclude_none=True)
    doc["two_d"] = {"group_size": 5}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["solve", str(path)])
    assert r.exit_code == 2 and "two_d.group_size: 5 does not divide topology.num_devices 16" in r.stderr


# ---- TorchRec: the planner for DMPCollection ------------------------------------------------------------------

def test_shardopt_planner_plans_the_group_for_dmpcollection() -> None:
    pytest.importorskip("torchrec")
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import HardwareConfig, KernelConfig, TopologyFactory, TrainerConfig

    from shardopt.torchrec import ShardoptPlanner
    from shardopt.torchrec.planner_inputs import PlannerInputError

    model = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=f"t{i}", embedding_dim=16 * (1 + i % 2), num_embeddings=500 + 100 * i,
                                                              feature_names=[f"f{i}"]) for i in range(6)], device=torch.device("meta"))
    topology = TopologyFactory.create_topology(trainer_config=TrainerConfig(world_size=8, local_world_size=4),
                                               hardware_config=HardwareConfig(ddr_cap_bytes=64 * 1024**2),
                                               kernel_config=KernelConfig(compute_device="cpu"))
    planner = ShardoptPlanner(topology, batch_size=8, solver="neuroshard", cost_model="analytic", two_d={"group_size": 2})
    plan = planner.plan(model, [EmbeddingBagCollectionSharder()])
    ranks = {r for mp in plan.plan.values() for ps in mp.values() for r in ps.ranks}
    assert planner.sharding_group_size == 2 and ranks <= {0, 1}
    assert planner.last["two_d"]["group_size"] == 2 and planner.last["job"].topology.num_devices == 8
    auto = ShardoptPlanner(topology, batch_size=8, solver="greedy", cost_model="analytic", two_d={"group_size": "auto", "sync_interval": 10})
    auto.plan(model, [EmbeddingBagCollectionSharder()])
    assert auto.sharding_group_size in (1, 2, 4, 8)
    with pytest.raises(PlannerInputError, match="two_d.sync_interval"):
        ShardoptPlanner(topology, batch_size=8, two_d={"group_size": 2, "sync_interval": 0})
    with pytest.raises(PlannerInputError, match="two_d.group_size: 3 does not divide"):
        ShardoptPlanner(topology, batch_size=8, cost_model="analytic", two_d={"group_size": 3}).plan(model, [EmbeddingBagCollectionSharder()])


# ---- the bound ------------------------------------------------------------------------------------------------

def test_the_bound_per_group_size_is_below_every_plan_of_that_size() -> None:
    from solvers.bound.two_d import sync_floor_ms, two_d_lower_bound

    inst = job({"group_size": "auto", "sync_interval": 20}, devices=8, per_host=4, tables=10)
    bounds = {b.group_size: b for b in two_d_lower_bound(inst, AnalyticCostModel(), time_limit=8)}
    assert set(bounds) == set(divisors(8))
    for g in divisors(8):
        doc = inst.model_dump(mode="json", exclude_none=True)
        doc["two_d"]["group_size"] = g
        fixed = instance_from_dict(doc)
        r = get_solver("neuroshard").solve(fixed, AnalyticCostModel(), seed=0)
        if r.plan is None:
            continue
        b = bounds[g]
        assert b.sync_floor_ms <= replica_sync(fixed, r.plan, g).ms + 1e-12
        if b.embedding is not None and b.embedding.status.proves_bound:
            assert b.value_ms <= r.plan.predicted_cost * (1 + 1e-9), g
    assert sync_floor_ms(inst, 8) == 0.0
    only = two_d_lower_bound(job({"group_size": 4}, devices=8, per_host=4, tables=10), AnalyticCostModel(), time_limit=4)
    assert [b.group_size for b in only] == [4]


def test_cli_bound_of_a_2d_instance(tmp_path) -> None:
    from typer.testing import CliRunner

    from shardopt.cli import app
    from shardopt.core.ir import save

    path = tmp_path / "job.json"
    save(job({"group_size": "auto", "sync_interval": 20}, devices=8, per_host=4, tables=10), path)
    r = CliRunner().invoke(app, ["bound", str(path), "--time-limit", "6", "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    values = [g["value_ms"] for g in doc["group_sizes"] if g["value_ms"] is not None and g["status"] in ("optimal", "bound")]
    assert doc["bound_ms"] == pytest.approx(min(values)) and {g["group_size"] for g in doc["group_sizes"]} == set(divisors(8))


def test_the_two_d_family_draws_2d_jobs_at_both_scales() -> None:
    from shardopt.data.pools import load_pool, standard_pool_path
    from shardopt.data.suites import FAMILIES, generate_instance

    pool = load_pool(standard_pool_path("test"))
    made = [generate_instance(FAMILIES["two-d"], pool, 7, i, "test") for i in range(4)]
    assert [m.topology.num_devices for m in made] == [1024, 4096, 1024, 4096]
    assert all(m.two_d is not None and m.two_d.group_size == "auto" for m in made)
    assert len(made[0].tables) > 100 and len(made[2].tables) == 26  # the pool's tables, then MLPerf DLRMv2's
    assert all(m.topology.levels[0].devices == 8 for m in made)
    assert generate_instance(FAMILIES["two-d"], pool, 7, 1, "test") == made[1]
    assert any(len(candidate_group_sizes(m)) and any(why is None for _, why in candidate_group_sizes(m)) for m in made)


def test_the_judge_refuses_a_2d_instance_it_would_price_as_flat() -> None:
    from shardopt.measure.evaluate import EvaluationError, evaluate_plan

    inst = job({"group_size": 4}, devices=8, per_host=4)
    plan = get_solver("greedy").solve(inst, AnalyticCostModel(), seed=0).plan
    with pytest.raises(EvaluationError, match="two_d: a 2D instance's plan is judged on its sharding group"):
        evaluate_plan(inst, plan)
    assert evaluate_plan(planned_instance(inst, plan), plan).costs.max_cost > 0
