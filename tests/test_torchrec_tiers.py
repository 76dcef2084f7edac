"""TorchRec export / import of every placement kind with its memory tier (issue 17, item 4), without processes.

Round trips (plan -> TorchRec ParameterSharding -> plan, identical) for table-, column-, row-, table-row-wise, grid
and data-parallel placements with the kernels fused, fused_uvm_caching (cache_params.load_factor) and fused_uvm;
the ParameterSharding fields against TorchRec's own constructors; the default load factor on import; the
refusals (mixed kernels or load factors in a table, row slices in no TorchRec layout, unequal slices on one rank,
kernels the IR does not hold); and the solver's host memory (ddr_cap) and UVM kernels. DistributedModelParallel on
4 processes is in tests/test_torchrec_dmp.py.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodels.analytic import AnalyticCostModel
from shardopt.cli import app
from shardopt.core.ir import Kernel, Plan, Shard, instance_from_dict
from shardopt.core.plan_check import check_plan

try:
    import shardopt.data.torchrec_io as tio

    tio.require_torchrec()
    HAVE_TORCHREC = True
except ImportError:  # the module itself imports without TorchRec; its functions raise
    HAVE_TORCHREC = False

pytestmark = pytest.mark.skipif(not HAVE_TORCHREC, reason="TorchRec (the [torchrec] extra) is not installed")

UVMC = {"kernel": "fused_uvm_caching", "cache_load_factor": 0.3}
UVM = {"kernel": "fused_uvm"}


def _instance(host_memory: int | list[int] = 10**9, n_devices: int = 4, per_host: int = 2, tables: int = 8, rows: int = 1000, dim: int = 64, memory: int = 10**9):
    return instance_from_dict(
        {
            "tables": [{"name": f"t{i}", "rows": rows + i, "dim": dim, "pooling_factor": 2.0, "access": {"zipf": 1.0}} for i in range(tables)],
            "topology": {"num_devices": n_devices, "devices_per_host": per_host, "memory_bytes": memory, "host_memory_bytes": host_memory, "hardware": "a100"},
            "workload": {"batch_size": 64},
        }
    )


def _rows(table: str, rows: int, ranks: list[int], **kw) -> list[Shard]:
    return [Shard(table=table, device=r, row_offset=o, rows=n, **kw) for (o, n), r in zip(tio.rw_layout(rows, len(ranks)), ranks) if n > 0]


def _tiered_plan(inst) -> Plan:
    """Every kind with every kernel on 4 devices, 2 per host (tables t0..t7, rows 1000 + i)."""
    s = [Shard(table="t0", device=3, **UVMC), Shard(table="t1", device=0, **UVM)]
    s += [Shard(table="t2", device=1, col_offset=0, cols=16, **UVMC), Shard(table="t2", device=2, col_offset=16, cols=48, **UVMC)]
    s += _rows("t3", 1003, [0, 1, 2, 3], **UVM)
    s += _rows("t4", 1004, [2, 3], **UVMC)  # table_row_wise on host 1
    s += [Shard(table="t5", device=d, replicated=True) for d in range(4)]
    s += _rows("t6", 1006, [0, 1], col_offset=0, cols=32, **UVMC) + _rows("t6", 1006, [2, 3], col_offset=32, cols=32, **UVMC)  # grid
    s += _rows("t7", 1007, [0, 1, 2, 3])  # row-wise in HBM
    plan = Plan(shards=tio.normalize_shards(inst, s))
    assert check_plan(inst, plan).ok
    return plan


# ---------------------------------------------------------------------------------------------------------------
# export and round trip


def test_every_kind_with_every_kernel_round_trips_identically(tmp_path: Path) -> None:
    inst = _instance()
    plan = _tiered_plan(inst)
    sp = tio.to_torchrec_plan(inst, plan)
    assert tio.from_torchrec_plan(inst, sp) == plan.shards
    doc = json.loads(json.dumps(tio.plan_to_json(sp, instance=inst)))  # through JSON text
    assert tio.from_torchrec_plan(inst, doc) == plan.shards
    assert tio.from_torchrec_plan(inst, tio.load_torchrec_plan(doc)) == plan.shards
    ps = sp.plan[""]
    kinds = {n: (p.sharding_type, p.compute_kernel, p.cache_params.load_factor if p.cache_params else None) for n, p in ps.items()}
    assert kinds == {
        "t0": ("table_wise", "fused_uvm_caching", 0.3),
        "t1": ("table_wise", "fused_uvm", None),
        "t2": ("column_wise", "fused_uvm_caching", 0.3),
        "t3": ("row_wise", "fused_uvm", None),
        "t4": ("table_row_wise", "fused_uvm_caching", 0.3),
        "t5": ("data_parallel", "dense", None),
        "t6": ("grid_shard", "fused_uvm_caching", 0.3),
        "t7": ("row_wise", "fused", None),
    }
    assert doc["plan"][""]["t0"]["cache_params"] == {"load_factor": 0.3}
    assert "cache_params" not in doc["plan"][""]["t1"] and "cache_params" not in doc["plan"][""]["t7"]
    # load_torchrec_plan gives back the same ParameterShardings, cache_params included
    assert tio.load_torchrec_plan(doc).plan[""] == ps
    # and every kind alone, each kernel (a plan per kernel: all tables of one kernel)
    for kernel in ({}, UVMC, UVM):
        shards = [s.model_copy(update={"kernel": Kernel(kernel.get("kernel", "fused")), "cache_load_factor": kernel.get("cache_load_factor")}) if not s.replicated else s for s in plan.shards]
        p = Plan(shards=shards)
        assert check_plan(inst, p).ok
        assert tio.from_torchrec_plan(inst, tio.to_torchrec_plan(inst, p)) == p.shards


def test_parameter_shardings_match_torchrecs_constructors_with_the_uvm_kernels() -> None:
    """TorchRec's own sharding_plan helpers, given compute_kernel, build the same ParameterSharding (they leave
    cache_params None: ours carries the plan's load factor, which they cannot express)."""
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.sharding_plan import (
        column_wise,
        construct_module_sharding_plan,
        data_parallel,
        grid_shard,
        row_wise,
        table_row_wise,
        table_wise,
    )

    inst = _instance()
    sp = tio.to_torchrec_plan(inst, _tiered_plan(inst))
    ebc = EmbeddingBagCollection(tables=tio.embedding_bag_configs(inst), device=torch.device("meta"))
    tio.apply_optimizer(inst, ebc)
    ref = construct_module_sharding_plan(
        ebc,
        {
            "t0": table_wise(rank=3, compute_kernel="fused_uvm_caching"),
            "t1": table_wise(rank=0, compute_kernel="fused_uvm"),
            "t2": column_wise(ranks=[1, 2]),
            "t3": row_wise(compute_kernel="fused_uvm"),
            "t4": table_row_wise(host_index=1),
            "t5": data_parallel(),
            "t6": grid_shard(host_indexes=[0]),
            "t7": row_wise(),
        },
        local_size=2,
        world_size=4,
        device_type="cuda",
    )
    for name in ("t0", "t1", "t3", "t5", "t7"):  # (table_row_wise and grid_shard take no kernel in these helpers)
        expected, ours = ref[name], sp.plan[""][name]
        assert ours.cache_params == (None if name != "t0" else ours.cache_params)
        assert ours.__class__(**{**ours.__dict__, "cache_params": None}) == expected, name
    # column slices of unequal width are not one of TorchRec's column_wise layouts (it splits evenly): type and ranks agree
    assert (ref["t2"].sharding_type, ref["t2"].ranks) == (sp.plan[""]["t2"].sharding_type, sp.plan[""]["t2"].ranks)
    assert (ref["t4"].sharding_type, ref["t4"].ranks, ref["t4"].sharding_spec) == (sp.plan[""]["t4"].sharding_type, sp.plan[""]["t4"].ranks, sp.plan[""]["t4"].sharding_spec)


def test_cli_export_writes_kernels_and_cache_params(tmp_path: Path) -> None:
    inst = _instance()
    plan = _tiered_plan(inst)
    ip, pp, out = tmp_path / "i.json", tmp_path / "p.json", tmp_path / "t.json"
    ip.write_text(json.dumps(inst.model_dump(mode="json")))
    pp.write_text(json.dumps(plan.model_dump(mode="json")))
    result = CliRunner().invoke(app, ["export", str(pp), "--format", "torchrec", "--instance", str(ip), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["round_trip"] == "identical"
    assert summary["compute_kernels"] == {"fused_uvm_caching": 4, "fused_uvm": 2, "dense": 1, "fused": 1}
    doc = json.loads(out.read_text())
    assert doc["plan"][""]["t4"]["compute_kernel"] == "fused_uvm_caching" and doc["plan"][""]["t4"]["cache_params"] == {"load_factor": 0.3}
    assert tio.from_torchrec_plan(inst, tio.load_torchrec_plan(out)) == plan.shards
    # TorchRec's text form names the kernels too
    result = CliRunner().invoke(app, ["export", str(pp), "--format", "torchrec-text", "--instance", str(ip)])
    assert result.exit_code == 0 and "fused_uvm_caching" in result.stdout


def test_uvm_kernels_on_compute_device_cpu_export_with_a_warning() -> None:
    inst = _instance()
    plan = _tiered_plan(inst)
    _, warnings = tio._to_torchrec_plan(inst, plan, module_path="", compute_device="cpu")
    uvm = [w for w in warnings if "host memory" in w]
    assert len(uvm) == 1 and "'t0'" in uvm[0]
    uneven = tio.uneven_column_tables(inst, plan.shards)  # (the other warning: uneven column widths, where there are any)
    assert len(warnings) == 1 + bool(uneven) and all(f"{n!r}" in warnings[-1] for n in uneven[:5])
    assert not [w for w in tio.export_warnings(inst, plan, "cuda") if "host memory" in w]


# ---------------------------------------------------------------------------------------------------------------
# import


def _ps(kind: str, kernel: str, ranks: list[int], entries: list[tuple[list[int], list[int], int]], cache=None):
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.types import ParameterSharding

    spec = EnumerableShardingSpec([ShardMetadata(shard_offsets=o, shard_sizes=s, placement=f"rank:{r}/cuda:{r % 2}") for o, s, r in entries]) if entries else None
    return ParameterSharding(sharding_type=kind, compute_kernel=kernel, ranks=ranks, sharding_spec=spec, cache_params=cache)


def _sp(tables: dict):
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ShardingPlan

    m = EmbeddingModuleShardingPlan()
    m.update(tables)
    return ShardingPlan({"": m})


def test_import_of_uvm_caching_without_cache_params_takes_torchrecs_default_load_factor() -> None:
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
    from torchrec.distributed.planner.constants import UVM_CACHING_RATIO
    from torchrec.distributed.types import CacheParams

    # the default is TorchRec's (and fbgemm's), read from their sources
    fbgemm_default = inspect.signature(SplitTableBatchedEmbeddingBagsCodegen.__init__).parameters["cache_load_factor"].default
    assert tio.TORCHREC_DEFAULT_CACHE_LOAD_FACTOR == fbgemm_default == UVM_CACHING_RATIO == 0.2
    inst = _instance(tables=3)
    sp = _sp(
        {
            "t0": _ps("table_wise", "fused_uvm_caching", [1], [([0, 0], [1000, 64], 1)]),  # no cache_params
            "t1": _ps("table_wise", "fused_uvm_caching", [2], [([0, 0], [1001, 64], 2)], CacheParams(load_factor=None)),
            "t2": _ps("row_wise", "fused_uvm_caching", [0, 1, 2, 3], [([i * 251, 0], [251 if i < 3 else 249, 64], i) for i in range(4)], CacheParams(load_factor=0.05)),
        }
    )
    shards = tio.from_torchrec_plan(inst, sp)
    assert {(s.table, s.kernel, s.cache_load_factor) for s in shards} == {
        ("t0", Kernel.fused_uvm_caching, 0.2),
        ("t1", Kernel.fused_uvm_caching, 0.2),
        ("t2", Kernel.fused_uvm_caching, 0.05),
    }
    assert check_plan(inst, shards).ok
    # a sharder built with fused_params={"cache_load_factor": x} is not in the plan: the caller says x
    again = tio.from_torchrec_plan(inst, sp, default_cache_load_factor=0.5)
    assert {s.cache_load_factor for s in again if s.table in ("t0", "t1")} == {0.5}
    # the JSON form without cache_params reads the same way
    doc = tio.plan_to_json(sp)
    assert "cache_params" not in doc["plan"][""]["t0"] and doc["plan"][""]["t2"]["cache_params"] == {"load_factor": 0.05}
    assert tio.from_torchrec_plan(inst, doc) == shards


@pytest.mark.parametrize(
    ("table", "ps_args", "message"),
    [
        ("t0", ("table_wise", "quant", [0], [([0, 0], [1000, 64], 0)]), "compute kernel 'quant' has no shardopt equivalent"),
        ("t0", ("table_wise", "key_value", [0], [([0, 0], [1000, 64], 0)]), "compute kernel 'key_value' has no shardopt equivalent"),
        ("t0", ("table_wise", "dense", [0], [([0, 0], [1000, 64], 0)]), "compute kernel 'dense' has no shardopt equivalent"),
        ("t0", ("data_parallel", "fused_uvm", [0, 1, 2, 3], []), "data_parallel with compute kernel 'fused_uvm'"),
    ],
)
def test_import_refuses_kernels_the_ir_does_not_hold(table: str, ps_args: tuple, message: str) -> None:
    inst = _instance(tables=1)
    with pytest.raises(ValueError, match="table 't0': " + message.replace("(", r"\(")):
        tio.from_torchrec_plan(inst, _sp({table: _ps(*ps_args)}))


def test_import_refuses_a_load_factor_outside_0_1() -> None:
    from torchrec.distributed.types import CacheParams

    inst = _instance(tables=1)
    for lf in (0.0, 1.5):
        sp = _sp({"t0": _ps("table_wise", "fused_uvm_caching", [0], [([0, 0], [1000, 64], 0)], CacheParams(load_factor=lf))})
        with pytest.raises(ValueError, match=rf"table 't0': cache_params.load_factor {lf} is not a share"):
            tio.from_torchrec_plan(inst, sp)
    doc = tio.plan_to_json(_sp({"t0": _ps("table_wise", "fused_uvm_caching", [0], [([0, 0], [1000, 64], 0)], CacheParams(load_factor=0.5))}))
    doc["plan"][""]["t0"]["cache_params"] = {"load_factor": 0.5, "colour": 1}
    from shardopt.core.ir import IRError

    with pytest.raises(IRError, match="cache_params.colour: unknown field"):
        tio.from_torchrec_plan(inst, doc)


# ---------------------------------------------------------------------------------------------------------------
# refusals on export


def _refused(inst, shards: list[Shard]) -> str:
    with pytest.raises(ValueError) as exc:
        tio.to_torchrec_plan(inst, Plan(shards=shards))
    assert tio.export_problems(inst, shards) == [str(exc.value)]
    return str(exc.value)


def _whole(inst, skip: set[str]) -> list[Shard]:
    return [Shard(table=t.name, device=i % inst.topology.num_devices) for i, t in enumerate(inst.tables) if t.name not in skip]


def test_export_refuses_mixed_kernels_and_load_factors_within_a_table(tmp_path: Path) -> None:
    inst = _instance(tables=2)
    mixed = _whole(inst, {"t1"}) + [Shard(table="t1", device=0, col_offset=0, cols=32), Shard(table="t1", device=1, col_offset=32, cols=32, **UVM)]
    assert check_plan(inst, mixed).ok  # the plan itself is valid: only TorchRec cannot express it
    msg = _refused(inst, mixed)
    assert msg.startswith("table 't1': its shards use 2 kernels") and "fused_uvm on device(s) [1]" in msg and "one compute kernel" in msg
    factors = _whole(inst, {"t1"}) + _rows("t1", 1001, [0, 1, 2, 3], **UVMC)
    factors[-1] = factors[-1].model_copy(update={"cache_load_factor": 0.6})
    msg = _refused(inst, factors)
    assert msg.startswith("table 't1': its fused_uvm_caching shards use 2 cache load factors (0.3, 0.6)")
    # the CLI: exit 2, naming the table
    ip, pp = tmp_path / "i.json", tmp_path / "p.json"
    ip.write_text(json.dumps(inst.model_dump(mode="json")))
    pp.write_text(json.dumps(Plan(shards=mixed).model_dump(mode="json")))
    result = CliRunner().invoke(app, ["export", str(pp), "--format", "torchrec", "--instance", str(ip)])
    assert result.exit_code == 2 and "table 't1': its shards use 2 kernels" in result.stderr


def test_export_refuses_row_slices_in_no_torchrec_layout() -> None:
    inst = _instance(tables=2)  # 4 devices, 2 per host; t1 has 1001 rows: TorchRec's blocks 251, 251, 251, 248 / 501, 500
    cases = {
        "even split, not ceil blocks": [Shard(table="t1", device=d, row_offset=250 * d, rows=250 if d < 3 else 251) for d in range(4)],
        "blocks on the wrong ranks": [Shard(table="t1", device=3 - d, row_offset=o, rows=n) for d, (o, n) in enumerate(tio.rw_layout(1001, 4))],
        "two devices of different hosts": [Shard(table="t1", device=1, row_offset=0, rows=501), Shard(table="t1", device=2, row_offset=501, rows=500)],
        "one host, uneven": [Shard(table="t1", device=2, row_offset=0, rows=400), Shard(table="t1", device=3, row_offset=400, rows=601)],
    }
    for label, rows in cases.items():
        shards = _whole(inst, {"t1"}) + rows
        assert check_plan(inst, shards).ok, label
        msg = _refused(inst, shards)
        assert msg.startswith("table 't1': its row shards") and "not a TorchRec row layout" in msg, label
        assert "row_wise over all 4 ranks: [0, 251) on 0, [251, 502) on 1, [502, 753) on 2, [753, 1001) on 3" in msg, label
    assert "table_row_wise on host 1 (ranks 2..3): [0, 501) on 2, [501, 1001) on 3" in _refused(inst, _whole(inst, {"t1"}) + cases["one host, uneven"])
    # on one host (4 devices) row slices over a subset of the devices are no layout either
    one = _instance(tables=2, per_host=4)
    assert "row_wise over all 4 ranks" in _refused(one, _whole(one, {"t1"}) + _rows("t1", 1001, [0, 1]))


def test_export_refuses_grid_blocks_not_split_within_one_host() -> None:
    inst = _instance(tables=2)
    across = _rows("t1", 1001, [1, 2], col_offset=0, cols=32) + _rows("t1", 1001, [3, 0], col_offset=32, cols=32)
    msg = _refused(inst, _whole(inst, {"t1"}) + across)
    assert msg.startswith("table 't1': columns [0, 32) are split by rows") and "grid_shard layout" in msg


def test_export_refuses_unequal_slices_of_a_table_on_one_rank() -> None:
    """TorchRec's fused kernel stacks a table's slices on one rank as equal blocks; DistributedModelParallel fails on
    unequal ones (seen: "shape '[-1, 16]' is invalid for input of size 600")."""
    inst = _instance(tables=2)
    shards = _whole(inst, {"t1"}) + [
        Shard(table="t1", device=1, col_offset=0, cols=16),
        Shard(table="t1", device=2, col_offset=16, cols=16),
        Shard(table="t1", device=1, col_offset=32, cols=32),
    ]
    assert check_plan(inst, shards).ok
    msg = _refused(inst, shards)
    assert msg.startswith("table 't1': device 1 holds 2 slices of it of different shapes (1001 x 16, 1001 x 32")
    equal = _whole(inst, {"t1"}) + [Shard(table="t1", device=1, col_offset=32, cols=16), Shard(table="t1", device=2, col_offset=16, cols=16), Shard(table="t1", device=1, col_offset=0, cols=16), Shard(table="t1", device=3, col_offset=48, cols=16)]
    assert tio.from_torchrec_plan(inst, tio.to_torchrec_plan(inst, Plan(shards=equal))) == tio.normalize_shards(inst, equal)


# ---------------------------------------------------------------------------------------------------------------
# the solver: host memory and UVM kernels reach TorchRec's planner


def test_solver_passes_host_memory_as_ddr_cap_and_allows_uvm_kernels() -> None:
    from solvers.torchrec_solver import TorchRecSolver

    solver = TorchRecSolver()
    inst = _instance(host_memory=[3 * 10**8, 3 * 10**8, 2 * 10**8, 0])
    topology, note = solver._topology(inst)
    assert [d.storage.ddr for d in topology.devices] == [3 * 10**8, 3 * 10**8, 2 * 10**8, 0]
    assert [d.storage.hbm for d in topology.devices] == [10**9] * 4
    assert note["ddr_cap_bytes"] == [3 * 10**8, 3 * 10**8, 2 * 10**8, 0]
    assert note["hbm_to_ddr_mem_bw_bytes_per_ms"] == pytest.approx(31.5e9 / 1000)  # a100: PCIe Gen4 x16
    assert solver.compute_kernels(inst) == ["fused", "fused_uvm_caching", "fused_uvm", "dense"]
    uniform = _instance(host_memory=4 * 10**8)
    assert [d.storage.ddr for d in solver._topology(uniform)[0].devices] == [4 * 10**8] * 4
    none = _instance(host_memory=0)
    assert [d.storage.ddr for d in solver._topology(none)[0].devices] == [0] * 4  # not TorchRec's 128 GiB default
    assert solver.compute_kernels(none) == ["fused", "dense"]
    assert TorchRecSolver(uvm=False).compute_kernels(inst) == ["fused", "dense"]
    assert TorchRecSolver(sharding_types="table_wise").compute_kernels(inst) == ["fused", "fused_uvm_caching", "fused_uvm"]


def test_solver_places_tables_beyond_hbm_in_host_memory_and_the_plan_checks() -> None:
    """Eight tables of 1.3 MB (weights + rowwise state) on 4 devices of 2 MB HBM: 10.4 MB of tables, 8 MB of HBM;
    with 10 MB of host memory per device TorchRec must use its UVM kernels, and its plan passes our checker."""
    from solvers.torchrec_solver import TorchRecSolver

    inst = _instance(host_memory=10**7, tables=8, rows=5000, dim=64, memory=2 * 10**6)
    r = TorchRecSolver().solve(inst, AnalyticCostModel())
    assert r.plan is not None, r.reason
    assert check_plan(inst, r.plan).ok
    assert set(r.info["compute_kernels_chosen"]) & {"fused_uvm_caching", "fused_uvm"}
    assert {s.kernel for s in r.plan.shards} & {Kernel.fused_uvm_caching, Kernel.fused_uvm}
    assert r.plan.params["compute_kernels"] == ["fused", "fused_uvm_caching", "fused_uvm", "dense"]
    cached = [s for s in r.plan.shards if s.kernel is Kernel.fused_uvm_caching]
    assert all(s.cache_load_factor == tio.TORCHREC_DEFAULT_CACHE_LOAD_FACTOR for s in cached)  # TorchRec planned with 0.2
    assert all("ddr_bytes" in p for p in r.info["per_rank"])
    assert tio.from_torchrec_plan(inst, tio.to_torchrec_plan(inst, r.plan)) == r.plan.shards
    # without host memory the same tables do not fit: TorchRec finds no plan (it is not given UVM kernels)
    r2 = TorchRecSolver().solve(_instance(host_memory=0, tables=8, rows=5000, dim=64, memory=2 * 10**6), AnalyticCostModel())
    assert r2.plan is None and r2.reason.startswith("TorchRec's planner found no plan")
