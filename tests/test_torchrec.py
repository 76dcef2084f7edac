"""TorchRec interop (issue 9): the planner as a solver, plans exported to TorchRec and read back, configs imported.

Skipped cleanly when TorchRec does not import, except the tests of the not-installed path, which simulate the
missing extra (sys.modules["torchrec"] = None) and run everywhere.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import make_instance
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel
from shardopt.cli import app
from shardopt.core.ir import Plan, Shard, instance_from_dict, load_instance
from shardopt.core.plan_check import check_plan

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "instances" / "examples" / "small.json"

try:
    import shardopt.data.torchrec_io as tio

    tio.require_torchrec()
    HAVE_TORCHREC = True
except ImportError:
    HAVE_TORCHREC = False

needs_torchrec = pytest.mark.skipif(not HAVE_TORCHREC, reason="TorchRec (the [torchrec] extra) is not installed")


def run(*args: object):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.stdout + result.stderr
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result


def _instance(n_devices: int = 4, per_host: int = 2, tables: int = 5, dim: int = 64) -> object:
    return instance_from_dict(
        {
            "tables": [{"name": f"t{i}", "rows": 1000 + i, "dim": dim, "pooling_factor": 2.0, "access": {"zipf": 1.0}} for i in range(tables)],
            "topology": {"num_devices": n_devices, "devices_per_host": per_host, "memory_bytes": 10**9, "hardware": "v100"},
            "workload": {"batch_size": 64},
        }
    )


def _mixed_plan(inst) -> Plan:
    """Every placement kind on 4 devices, 2 per host: table-wise, column-wise, row-wise (TorchRec's layout),
    replicated, table-row-wise on host 1."""
    shards = [Shard(table="t0", device=3), Shard(table="t1", device=1, col_offset=0, cols=32), Shard(table="t1", device=2, col_offset=32, cols=32)]
    shards += [Shard(table="t2", device=d, row_offset=o, rows=n) for d, (o, n) in enumerate(tio.rw_layout(1002, 4))]
    shards += [Shard(table="t3", device=d, replicated=True) for d in range(4)]
    shards += [Shard(table="t4", device=2 + d, row_offset=o, rows=n) for d, (o, n) in enumerate(tio.rw_layout(1004, 2))]
    plan = Plan(shards=shards)
    assert check_plan(inst, plan).ok
    return plan


# ---------------------------------------------------------------------------------------------------------------
# the solver


@pytest.fixture(scope="module")
def small_result():
    from solvers.catalog import get_solver

    inst = load_instance(SMALL)
    return inst, get_solver("torchrec").solve(inst, AnalyticCostModel())


@needs_torchrec
def test_planner_on_the_small_instance_passes_our_checker(small_result) -> None:
    inst, r = small_result
    assert r.status.value == "feasible" and r.plan is not None, r.reason
    assert check_plan(inst, r.plan).ok
    assert r.plan.solver == "torchrec" and r.predicted_cost and r.predicted_cost > 0
    assert r.plan.params["sharding_types"] == ["table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel"]
    assert r.plan.params["batch_size_per_rank"] == 16384 // 4
    assert r.plan.params["compute_kernels"] == ["fused", "dense"]  # no host memory: no UVM kernels
    # TorchRec's own estimates are kept beside the plan: per rank perf (ms) and storage (bytes)
    per_rank = r.info["per_rank"]
    assert [p["rank"] for p in per_rank] == [0, 1, 2, 3]
    assert all(p["total_ms"] > 0 and p["hbm_bytes"] > 0 for p in per_rank)
    assert r.info["torchrec_perf_rating_ms"] == max(p["total_ms"] for p in per_rank)
    # the hardware profile's bandwidths reach TorchRec's topology (bytes/ms)
    assert r.info["topology"]["intra_host_bw_bytes_per_ms"] == pytest.approx(150e9 / 1000)
    assert r.info["topology"]["hbm_cap_bytes"] == inst.topology.memory_bytes


@needs_torchrec
def test_planning_makes_no_cuda_call(monkeypatch) -> None:
    import torch

    from solvers.torchrec_solver import TorchRecSolver

    def boom(*a, **k):
        raise AssertionError("CUDA initialised during planning")

    monkeypatch.setattr(torch.cuda, "_lazy_init", boom)
    inst = make_instance(12, 4, seed=2, mem_factor=2.0)
    r = TorchRecSolver(compute_device="cuda").solve(inst, AnalyticCostModel())
    assert r.plan is not None and check_plan(inst, r.plan).ok
    assert not torch.cuda.is_initialized()


@needs_torchrec
@pytest.mark.parametrize("types", ["column_wise", "row_wise", "table_row_wise", "grid_shard"])
def test_every_sharding_type_converts_and_round_trips(types: str) -> None:
    from solvers.torchrec_solver import TorchRecSolver

    inst = _instance(n_devices=4, per_host=2, tables=6, dim=64)
    r = TorchRecSolver(sharding_types=types, min_partition=32).solve(inst, AnalyticCostModel())
    assert r.plan is not None, r.reason
    assert check_plan(inst, r.plan).ok
    assert set(r.info["sharding_types_chosen"]) == {types}
    assert len(r.plan.shards) > len(inst.tables)  # split tables came back as several shards
    assert tio.from_torchrec_plan(inst, tio.to_torchrec_plan(inst, r.plan)) == r.plan.shards


@needs_torchrec
def test_any_table_name_plans_and_the_planner_is_deterministic() -> None:
    """TorchRec keeps tables in a torch ModuleDict (no dots, not "keys" / "training" ...): the solver plans under
    aliases and renames back."""
    from solvers.torchrec_solver import TorchRecSolver

    doc = _instance(n_devices=2, per_host=2, tables=3).model_dump(mode="json")
    for t, name in zip(doc["tables"], ["user.id", "keys", "training"]):
        t["name"] = name
    inst = instance_from_dict(doc)
    a = TorchRecSolver().solve(inst, AnalyticCostModel(), seed=1)
    b = TorchRecSolver().solve(inst, AnalyticCostModel(), seed=2)
    assert a.plan is not None and check_plan(inst, a.plan).ok
    assert {s.table for s in a.plan.shards} == {"user.id", "keys", "training"}
    assert a.plan.shards == b.plan.shards


@needs_torchrec
def test_heterogeneous_memory_reaches_the_planner() -> None:
    from solvers.torchrec_solver import TorchRecSolver

    inst = _instance(n_devices=2, per_host=2, tables=4)
    doc = inst.model_dump(mode="json")
    doc["topology"]["memory_bytes"] = [10**9, 400_000]  # device 1 holds at most one 1000 x 64 table (260 kB)
    inst = instance_from_dict(doc)
    r = TorchRecSolver().solve(inst, AnalyticCostModel())
    assert r.plan is not None and check_plan(inst, r.plan).ok
    assert r.info["topology"]["hbm_cap_bytes"] == [10**9, 400_000]
    # TorchRec kept rank 1 within its 400 kB by its own storage estimate (it may split tables by rows onto it)
    assert r.info["per_rank"][1]["hbm_bytes"] <= 400_000 and check_plan(inst, r.plan).memory_use[1] <= 400_000


@needs_torchrec
def test_overflow_of_our_memory_model_is_reported_not_hidden() -> None:
    """TorchRec's storage model is not ours: with fp16 weights and adam it counts the two moments in the weights'
    dtype (6 bytes a weight), fbgemm keeps them in fp32 (10 bytes a weight). Three tables of 64 MB (ours) on two
    devices of 100 MB: TorchRec (38.4 MB each) stacks two on one device; our checker must name that device. (Table-wise
    only: allowed row-wise splits, TorchRec spreads the third table and the plan fits both models.)"""
    from solvers.torchrec_solver import TorchRecSolver

    inst = instance_from_dict(
        {
            "tables": [{"name": f"t{i}", "rows": 100_000, "dim": 64, "pooling_factor": 2.0, "access": {"zipf": 1.0}} for i in range(3)],
            "topology": {"num_devices": 2, "devices_per_host": 2, "memory_bytes": 100_000_000, "hardware": "v100"},
            "workload": {"batch_size": 64, "optimizer": "adam", "weight_dtype": "fp16"},
        }
    )
    r = TorchRecSolver(sharding_types="table_wise").solve(inst, AnalyticCostModel())
    assert r.plan is None and r.status.value == "no_solution"
    assert "overflows shardopt's memory model" in r.reason and "not proven infeasible" in r.reason
    o = r.info["overflow"][0]
    assert o["used_bytes"] == 2 * 64_000_000 and o["capacity_bytes"] == 100_000_000 and o["tier"] == "HBM"
    assert o["torchrec_hbm_estimate_bytes"] < o["capacity_bytes"] < o["used_bytes"]
    assert f"device {o['device']} needs {o['used_bytes']:,} bytes" in r.reason


@needs_torchrec
def test_time_limit_maps_to_the_planner_timeout() -> None:
    from solvers.torchrec_solver import TorchRecSolver

    r = TorchRecSolver().solve(load_instance(SMALL), AnalyticCostModel(), time_limit=2)
    assert r.plan is not None and r.plan.params["timeout_seconds"] == 1  # 75 % of the limit, rounded down
    assert "timeout_seconds=1" in r.info["time_limit"]
    assert TorchRecSolver().params()["default_time_limit"] == 300.0  # without a limit: its own
    # a limit the planner cannot keep: stopped there, no plan, saying so (never a late plan)
    r = TorchRecSolver().solve(load_instance(SMALL), AnalyticCostModel(), time_limit=0.01)
    if r.plan is None:
        assert r.info["hard_stopped"] and "ended TorchRec's planner" in r.reason


@needs_torchrec
def test_when_the_planner_timeout_fires_the_plan_so_far_is_kept_as_timeout(monkeypatch) -> None:
    """TorchRec reads time.time() between proposals; a clock that jumps after a few reads makes its timeout fire."""
    import types

    import torchrec.distributed.planner.planners as planners

    from solvers.torchrec_solver import TorchRecSolver

    calls = {"n": 0}

    def fake_time() -> float:
        calls["n"] += 1
        return 0.0 if calls["n"] <= 8 else 100.0

    monkeypatch.setattr(planners, "time", types.SimpleNamespace(time=fake_time))
    inst = load_instance(SMALL)
    # (the fake clock fires TorchRec's own timeout; the solver's hard stop at its time limit must not come first, which
    # a limit of 1 s did on a loaded 2-core VM)
    r = TorchRecSolver().solve(inst, AnalyticCostModel(), time_limit=30)
    # a plan the limit stopped: feasible, and why it stopped in a field of its own
    assert r.status.value == "feasible" and r.stopped.value == "time_limit" and r.info["timed_out"] is True
    assert r.plan is not None and check_plan(inst, r.plan).ok
    assert r.plan.status.value == "feasible" and r.plan.stopped == "time_limit"


@needs_torchrec
def test_planner_failure_is_no_solution_with_torchrecs_reason() -> None:
    from solvers.torchrec_solver import TorchRecSolver

    inst = _instance(n_devices=2, per_host=2, tables=3)
    doc = inst.model_dump(mode="json")
    doc["topology"]["memory_bytes"] = 100_000  # no table fits anywhere
    r = TorchRecSolver().solve(instance_from_dict(doc), AnalyticCostModel())
    assert r.plan is None and r.status.value == "no_solution"
    assert r.reason.startswith("TorchRec's planner found no plan")


# ---------------------------------------------------------------------------------------------------------------
# export and round trip


@needs_torchrec
def test_round_trip_ours_to_torchrec_to_ours_is_identical(small_result) -> None:
    from solvers.catalog import get_solver

    inst, r = small_result
    plans = [r.plan, get_solver("greedy").solve(inst, AnalyticCostModel()).plan, get_solver("neuroshard").solve(inst, AnalyticCostModel(), time_limit=5).plan]
    for plan in plans:
        sp = tio.to_torchrec_plan(inst, plan)
        assert tio.from_torchrec_plan(inst, sp) == plan.shards
        doc = json.loads(json.dumps(tio.plan_to_json(sp, instance=inst)))  # through JSON text and back
        assert tio.from_torchrec_plan(inst, doc) == plan.shards
        assert tio.from_torchrec_plan(inst, tio.load_torchrec_plan(doc)) == plan.shards
    inst2 = _instance()
    mixed = _mixed_plan(inst2)
    assert tio.from_torchrec_plan(inst2, tio.to_torchrec_plan(inst2, mixed)) == mixed.shards


@needs_torchrec
def test_export_matches_torchrecs_own_constructors_and_validation() -> None:
    """Each ParameterSharding equals the one TorchRec's own sharding_plan helpers build for that placement, and
    TorchRec's own validators accept the plan."""
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.planner.planners import validate_rank_assignment
    from torchrec.distributed.planner.types import Topology
    from torchrec.distributed.sharding_plan import (
        column_wise,
        construct_module_sharding_plan,
        data_parallel,
        row_wise,
        table_row_wise,
        table_wise,
    )
    from torchrec.distributed.types import ParameterSharding, ShardingPlan

    inst = _instance()
    sp = tio.to_torchrec_plan(inst, _mixed_plan(inst))
    assert isinstance(sp, ShardingPlan) and all(isinstance(ps, ParameterSharding) for ps in sp.plan[""].values())
    ebc = EmbeddingBagCollection(tables=tio.embedding_bag_configs(inst), device=torch.device("meta"))
    tio.apply_optimizer(inst, ebc)  # fused optimizer: TorchRec's helpers then choose the "fused" kernel as we do
    ref = construct_module_sharding_plan(
        ebc,
        {"t0": table_wise(rank=3), "t1": column_wise(ranks=[1, 2]), "t2": row_wise(), "t3": data_parallel(), "t4": table_row_wise(host_index=1)},
        local_size=2,
        world_size=4,
        device_type="cuda",
    )
    for name, expected in ref.items():
        assert sp.plan[""][name] == expected, name
    placements = [str(m.placement) for m in sp.plan[""]["t1"].sharding_spec.shards]
    assert placements == ["rank:1/cuda:1", "rank:2/cuda:0"]  # rank:N/cuda:(N % devices per host)
    validate_rank_assignment(sp, Topology(world_size=4, local_world_size=2, compute_device="cuda"))
    # torch's own sharding-spec check: the shards tile each table exactly
    from torch.distributed._shard.sharded_tensor.metadata import TensorProperties

    for t in inst.tables:
        spec = sp.plan[""][t.name].sharding_spec
        if spec is not None:
            spec.build_metadata(torch.Size([t.rows, t.dim]), TensorProperties())


@needs_torchrec
def test_a_whole_table_marked_column_wise_exports_as_torchrecs_one_rank_column_wise() -> None:
    """`Shard.column_wise`: the ParameterSharding TorchRec's own `column_wise(ranks=[r])` builds (one shard of the whole
    width), and back to the same marked shard; unmarked, the same table is table_wise."""
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.sharding_plan import column_wise, construct_module_sharding_plan, table_wise

    inst = _instance()
    shards = [Shard(table="t0", device=2, column_wise=True), Shard(table="t1", device=1, col_offset=0, cols=32),
              Shard(table="t1", device=3, col_offset=32, cols=32)] + [Shard(table=f"t{i}", device=i - 2) for i in (2, 3, 4)]
    plan = Plan(shards=shards)
    assert check_plan(inst, plan).ok
    sp = tio.to_torchrec_plan(inst, plan)
    ebc = EmbeddingBagCollection(tables=tio.embedding_bag_configs(inst), device=torch.device("meta"))
    tio.apply_optimizer(inst, ebc)
    ref = construct_module_sharding_plan(ebc, {"t0": column_wise(ranks=[2]), "t1": column_wise(ranks=[1, 3]), "t2": table_wise(rank=0),
                                               "t3": table_wise(rank=1), "t4": table_wise(rank=2)}, local_size=2, world_size=4, device_type="cuda")
    for name, expected in ref.items():
        assert sp.plan[""][name] == expected, name
    assert [s.shard_sizes for s in sp.plan[""]["t0"].sharding_spec.shards] == [[1000, 64]]
    assert tio.from_torchrec_plan(inst, sp) == plan.shards
    doc = json.loads(json.dumps(tio.plan_to_json(sp, instance=inst)))
    assert tio.from_torchrec_plan(inst, tio.load_torchrec_plan(doc)) == plan.shards


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
@needs_torchrec
def test_distributed_model_parallel_accepts_the_exported_plan(tmp_path: Path) -> None:
    """The strongest check available without GPUs: DistributedModelParallel (one CPU rank, gloo) shards a model
    with the exported plan and runs a forward pass."""
    script = textwrap.dedent(
        f"""
        import os, warnings
        warnings.simplefilter("ignore")
        import torch, torch.distributed as dist
        from torchrec import EmbeddingBagCollection, KeyedJaggedTensor
        from torchrec.distributed.model_parallel import DistributedModelParallel
        from shardopt.core.ir import Plan, Shard, instance_from_dict
        from shardopt.data.torchrec_io import apply_optimizer, embedding_bag_configs, to_torchrec_plan
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{_free_port()}")
        dist.init_process_group("gloo", rank=0, world_size=1)
        inst = instance_from_dict({{"tables": [{{"name": f"t{{i}}", "rows": 100 + i, "dim": 8 * (i + 1), "pooling_factor": 1.0,
            "access": {{"zipf": 1.0}}}} for i in range(3)], "topology": {{"num_devices": 1, "devices_per_host": 1,
            "memory_bytes": 10**9, "hardware": "v100"}}, "workload": {{"batch_size": 4}}}})
        plan = Plan(shards=[Shard(table="t0", device=0), Shard(table="t1", device=0, col_offset=0, cols=8),
                            Shard(table="t1", device=0, col_offset=8, cols=8), Shard(table="t2", device=0, replicated=True)])
        ebc = EmbeddingBagCollection(tables=embedding_bag_configs(inst), device=torch.device("meta"))
        apply_optimizer(inst, ebc)
        model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=to_torchrec_plan(inst, plan, compute_device="cpu"))
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=["t0", "t1", "t2"], values=torch.arange(12), lengths=torch.ones(12, dtype=torch.int64))
        out = model(kjt)
        out = out.wait() if hasattr(out, "wait") else out
        shapes = {{k: list(v.shape) for k, v in out.to_dict().items()}}
        assert shapes == {{"t0": [4, 8], "t1": [4, 16], "t2": [4, 24]}}, shapes
        print("ok", model.plan.plan[""]["t1"].sharding_type)
        dist.destroy_process_group()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok column_wise" in proc.stdout


@needs_torchrec
def test_export_cli_writes_the_json_and_it_loads(tmp_path: Path, small_result) -> None:
    from shardopt.core.ir import save

    inst, r = small_result
    plan_path = tmp_path / "plan.json"
    save(r.plan, plan_path)
    out = tmp_path / "tr.json"
    result = run("export", plan_path, "--format", "torchrec", "--instance", SMALL, "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["round_trip"] == "identical" and summary["tables"] == 20
    doc = json.loads(out.read_text())
    assert doc["format"] == tio.EXPORT_FORMAT and doc["world_size"] == 4 and doc["instance"] == inst.content_hash()
    assert set(doc["plan"][""]) == {t.name for t in inst.tables}
    assert tio.from_torchrec_plan(inst, tio.load_torchrec_plan(out)) == r.plan.shards
    # to stdout, and TorchRec's own text
    result = run("export", plan_path, "--format", "torchrec", "--instance", SMALL)
    assert result.exit_code == 0 and json.loads(result.stdout)["plan"][""]["t00"]["compute_kernel"] == "fused"
    result = run("export", plan_path, "--format", "torchrec-text", "--instance", SMALL)
    assert result.exit_code == 0 and "sharding type" in result.stdout
    # without the instance: exit 2 saying why
    result = run("export", plan_path, "--format", "torchrec")
    assert result.exit_code == 2 and "--instance" in result.stderr


@needs_torchrec
def test_export_cli_refuses_an_invalid_plan(tmp_path: Path) -> None:
    bad = Plan(shards=[Shard(table="t00", device=0)])  # 19 tables missing
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad.model_dump(mode="json")))
    result = run("export", p, "--format", "torchrec", "--instance", SMALL)
    assert result.exit_code == 2 and "not placed on any device" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# import


@needs_torchrec
def test_import_from_json_configs_with_pooling_statistics(tmp_path: Path) -> None:
    from shardopt.data.torchrec_configs import DEFAULT_ACCESS

    cfgs = [
        {"name": "user", "num_embeddings": 100000, "embedding_dim": 64},
        {"name": "item", "num_embeddings": 50000, "embedding_dim": 128, "feature_names": ["item", "item_hist"]},
        {"name": "cat", "num_embeddings": 1000, "embedding_dim": 16, "data_type": "fp16"},
    ]
    src = tmp_path / "configs.json"
    src.write_text(json.dumps(cfgs))
    out = tmp_path / "inst.json"
    pooling = json.dumps({"user": 3.0, "item_hist": {"pooling_factor": 20, "zipf": 1.1}})
    result = run("import-torchrec", src, "--out", out, "--devices", 4, "--devices-per-host", 2, "--memory", "2GiB",
                 "--hardware", "a100", "--batch-size", 8192, "--pooling-factors", pooling)
    assert result.exit_code == 0, result.stderr
    inst = load_instance(out)
    t = {x.name: x for x in inst.tables}
    assert (t["user"].rows, t["user"].dim, t["user"].pooling_factor) == (100000, 64, 3.0)
    assert t["item"].pooling_factor == 21.0 and t["item"].access.zipf == 1.1  # item (assumed 1.0) + item_hist (20)
    assert t["cat"].dtype is not None and t["cat"].dtype.value == "fp16"
    assert inst.topology.num_devices == 4 and inst.topology.devices_per_host == 2 and inst.topology.memory_bytes == 2**30 * 2
    assumed = inst.metadata["assumed"]
    assert assumed["pooling_factor"]["value"] == 1.0 and assumed["pooling_factor"]["tables"] == ["item", "cat"]
    assert assumed["access"]["value"] == DEFAULT_ACCESS and assumed["access"]["tables"] == ["user", "cat"]
    # the imported instance plans with TorchRec and round-trips
    from solvers.torchrec_solver import TorchRecSolver

    r = TorchRecSolver().solve(inst, AnalyticCostModel())
    assert r.plan is not None and tio.from_torchrec_plan(inst, tio.to_torchrec_plan(inst, r.plan)) == r.plan.shards


@needs_torchrec
def test_import_from_a_python_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "my_model_tables.py").write_text(
        "from torchrec import EmbeddingBagConfig\n"
        "TABLES = [EmbeddingBagConfig(name=f't{i}', num_embeddings=1000 * (i + 1), embedding_dim=32, feature_names=[f'f{i}']) for i in range(5)]\n"
        "def make():\n    return TABLES\n"
    )
    monkeypatch.chdir(tmp_path)
    for spec in ("my_model_tables:TABLES", "my_model_tables:make"):
        out = tmp_path / f"{spec.split(':')[1]}.json"
        result = run("import-torchrec", spec, "--out", out, "--devices", 2, "--batch-size", 512, "--pooling-factors", '{"f1": 7.5}')
        assert result.exit_code == 0, result.stderr
        inst = load_instance(out)
        assert [t.rows for t in inst.tables] == [1000, 2000, 3000, 4000, 5000]
        assert inst.tables[1].pooling_factor == 7.5 and inst.tables[0].pooling_factor == 1.0
        assert inst.topology.memory_bytes == 32 * 2**30  # the v100 profile's memory, flagged as assumed
        assert "memory_bytes" in inst.metadata["assumed"]
    result = run("import-torchrec", "my_model_tables:nope", "--out", tmp_path / "x.json", "--devices", 2, "--batch-size", 512)
    assert result.exit_code == 2 and "no attribute" in result.stderr


@needs_torchrec
def test_import_errors_name_the_field(tmp_path: Path) -> None:
    src = tmp_path / "configs.json"
    src.write_text(json.dumps([{"name": "a", "num_embeddings": 10, "embedding_dim": 30}]))
    result = run("import-torchrec", src, "--out", tmp_path / "i.json", "--devices", 2, "--batch-size", 8)
    assert result.exit_code == 2 and "tables[0].dim: 30 is not a multiple of 4" in result.stderr
    src.write_text(json.dumps([{"name": "a", "num_embeddings": 10, "embedding_dim": 32, "colour": 1}]))
    result = run("import-torchrec", src, "--out", tmp_path / "i.json", "--devices", 2, "--batch-size", 8)
    assert result.exit_code == 2 and "[0].colour: unknown field" in result.stderr
    src.write_text(json.dumps([{"name": "a", "num_embeddings": 10, "embedding_dim": 32}]))
    result = run("import-torchrec", src, "--out", tmp_path / "i.json", "--devices", 2, "--batch-size", 8, "--pooling-factors", '{"b": 1}')
    assert result.exit_code == 2 and "b: names no table or feature" in result.stderr
    result = run("import-torchrec", src, "--out", tmp_path / "i.json", "--devices", 2, "--batch-size", 8, "--memory", "12XB")
    assert result.exit_code == 2 and "--memory" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# without the extra (simulated: runs whether TorchRec is installed or not)


@pytest.fixture
def no_torchrec(monkeypatch):
    """TorchRec made unimportable for the test (None in sys.modules makes `import torchrec` raise ImportError)."""
    monkeypatch.setitem(sys.modules, "torchrec", None)
    yield


def _assert_install_hint(text: str) -> None:
    flat = " ".join(text.split())
    assert "pip install --no-deps torchrec==1.8.0" in flat
    assert "pip install --no-deps " + " ".join(tio.TORCHREC_RUNTIME_PINS) in flat


def test_without_the_extra_solver_and_commands_exit_2_with_the_install_hint(no_torchrec, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    result = run("solve", SMALL, "--solver", "greedy", "--out", plan)  # everything else works
    assert result.exit_code == 0, result.stderr
    result = run("solve", SMALL, "--solver", "torchrec")
    assert result.exit_code == 2
    _assert_install_hint(result.stderr)
    result = run("solve", SMALL, "--solver", "torchrec", "--json")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["exit_status"] == 2
    result = run("export", plan, "--format", "torchrec", "--instance", SMALL)
    assert result.exit_code == 2
    _assert_install_hint(result.stderr)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps([{"name": "a", "num_embeddings": 10, "embedding_dim": 32}]))
    result = run("import-torchrec", cfg, "--out", tmp_path / "i.json", "--devices", 2, "--batch-size", 8)
    assert result.exit_code == 2
    _assert_install_hint(result.stderr)
    assert run("evaluate", SMALL, plan).exit_code == 0
    assert run("solvers").exit_code == 0


def test_without_the_extra_the_python_api_raises_an_import_error_with_the_hint(no_torchrec) -> None:
    from solvers.catalog import get_solver

    with pytest.raises(ImportError) as exc:
        tio.require_torchrec()
    _assert_install_hint(str(exc.value))
    with pytest.raises(KeyError) as exc2:
        get_solver("torchrec")
    _assert_install_hint(str(exc2.value))


def test_makefile_installs_the_same_pins_with_no_deps() -> None:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    deps = re.search(r"^TORCHREC_DEPS\s*:=\s*(.+)$", text, re.M).group(1).split()
    assert deps == list(tio.TORCHREC_RUNTIME_PINS)
    assert re.search(r"^TORCHREC\s*:=\s*torchrec==" + re.escape(tio.TORCHREC_VERSION) + r"\s*$", text, re.M)
    assert "install -q --no-deps $(TORCHREC) $(TORCHREC_DEPS)" in text
    assert 'torchrec = ["torchrec==1.8.0"]' in (ROOT / "pyproject.toml").read_text()


def test_the_solver_is_made_without_importing_torchrec_and_prepare_imports_it() -> None:
    """Importing TorchRec takes seconds: making the solver only checks that it is installed (an unknown-solver style
    error otherwise); the import happens where the planning does, or in prepare() for a batch."""
    code = ("import sys; from solvers.catalog import get_solver; s = get_solver('torchrec'); "
            "a = 'torchrec.distributed.types' in sys.modules; s.prepare(); "
            "print(a, 'torchrec.distributed.types' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["False", "True"]


@needs_torchrec
def test_the_proposer_order_changes_no_plan_rating_without_a_limit() -> None:
    """`-O proposers=cheap_first` runs TorchRec's four default proposers cheapest first: without a limit they propose
    the same plans, so TorchRec's best rating is the same; the plan says which order ran."""
    from solvers.torchrec_solver import TorchRecSolver

    inst = _instance(n_devices=4, per_host=2, tables=6, dim=64)
    own = TorchRecSolver().solve(inst, AnalyticCostModel())
    cheap = TorchRecSolver(proposers="cheap_first").solve(inst, AnalyticCostModel())
    assert own.plan is not None and cheap.plan is not None
    assert own.plan.params["proposers"] == "torchrec" and cheap.plan.params["proposers"] == "cheap_first"
    assert cheap.info["torchrec_perf_rating_ms"] == pytest.approx(own.info["torchrec_perf_rating_ms"])


@needs_torchrec
def test_the_topology_round_trip_keeps_per_rank_capacities_and_the_nvlink_group() -> None:
    """Our topology -> TorchRec's (CustomTopologyData per rank, pod_size for an NVLink domain of hosts) -> back the
    way ShardoptPlanner reads one: the same per-rank HBM and host memory, the same levels."""
    from shardopt.torchrec.planner import _topology_fields
    from shardopt.torchrec.planner_inputs import rank_memory
    from solvers.torchrec_solver import TorchRecSolver

    inst = _instance(n_devices=8, per_host=2, tables=4)
    doc = inst.model_dump(mode="json")
    caps = [10**9 + 10**7 * d for d in range(8)]
    doc["topology"].update(memory_bytes=caps, host_memory_bytes=[2 * 10**9] * 4 + [3 * 10**9] * 4,
                           levels=[{"name": "nvlink_domain", "devices": 4, "bandwidth": 3e11},
                                   {"name": "network", "devices": 8, "bandwidth": 2.5e10, "latency_s": 1e-5}])
    doc["topology"].pop("intra_host_bandwidth", None)
    doc["topology"].pop("inter_host_bandwidth", None)
    inst = instance_from_dict(doc)
    torchrec_topology, note = TorchRecSolver()._topology(inst)
    assert note["pod_size"] == 2 and torchrec_topology.intra_group_size == 4
    back = _topology_fields(torchrec_topology, rank_memory(torchrec_topology, 0.0, 8, None, [], {}), inst.topology.hardware)
    assert back["memory_bytes"] == caps and back["host_memory_bytes"] == inst.topology.host_capacities()
    assert back["levels"] == [{"name": "nvlink_domain", "devices": 4, "bandwidth": 3e11},
                              {"name": "network", "devices": 8, "bandwidth": 2.5e10, "latency_s": 1e-5}]


@needs_torchrec
def test_import_for_torchrec_sets_the_form_every_solver_then_keeps(tmp_path: Path) -> None:
    src = tmp_path / "configs.json"
    src.write_text(json.dumps([{"name": f"t{i}", "num_embeddings": 20000 * (i + 1), "embedding_dim": 96} for i in range(6)]))
    out = tmp_path / "i.json"
    result = run("import-torchrec", src, "--out", out, "--devices", 4, "--batch-size", 4096, "--for-torchrec", "even",
                 "--pooling-factors", '{"t5": 40}')
    assert result.exit_code == 0, result.stderr
    inst = load_instance(out)
    assert inst.constraints is not None and inst.constraints.torchrec is not None and inst.constraints.even_columns
    ok = run("solve", out, "--solver", "cpsat", "--time-limit", "3", "--json")
    assert ok.exit_code == 0, ok.stderr
    plan = json.loads(ok.stdout)["plan"]["shards"]
    for name in {s["table"] for s in plan}:
        widths = {s.get("cols", 96) for s in plan if s["table"] == name}
        assert len(widths) == 1, (name, widths)
    bad = run("import-torchrec", src, "--out", tmp_path / "x.json", "--devices", 4, "--batch-size", 8, "--for-torchrec", "odd")
    assert bad.exit_code == 2 and "--for-torchrec: 'odd' is not even or uneven" in bad.stderr
