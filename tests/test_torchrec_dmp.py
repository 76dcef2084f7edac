"""TorchRec's DistributedModelParallel runs our exported plans (issue 17, item 4): 4 gloo CPU processes, 2 hosts x 2.

The test builds one instance (2 hosts x 2 devices) and plans that between them hold every placement kind the export
maps: table-wise, uneven column-wise (also out of column order, with two equal slices on one rank), column-wise with
one rank (a whole shard marked column_wise), row-wise over all
ranks (with an empty block), table-row-wise on each host, data-parallel, and grid (column blocks split by rows within a host). It writes
each plan with `shardopt export --format torchrec --compute-device cpu` and launches four processes the way torchrun
would (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE = 2 devices per host, GROUP_RANK, MASTER_ADDR / MASTER_PORT on a
free port); each process (this file run as a script) loads the JSON with `load_torchrec_plan`, shards an
`EmbeddingBagCollection` (meta device) with DistributedModelParallel on gloo, copies the weights of an unsharded
collection (same configs, one seed) into its local shards through the sharded state_dict, checks that the sharded
state_dict holds exactly the plan's shards, and compares the pooled outputs of its own KeyedJaggedTensor batch
(empty bags included) with the unsharded collection's. Then it runs one backward pass with the fused optimizer and
checks that the rows it touched moved.

Kernels: on CPU TorchRec runs every table through its fused kernel with fbgemm's EmbeddingLocation.HOST, whatever
the plan's compute kernel (torchrec.distributed.batched_embedding_kernel.BatchedFusedEmbeddingBag: the kernel picks
DEVICE / MANAGED / MANAGED_CACHING only on CUDA). So the second plan's fused_uvm_caching (with
cache_params.load_factor, which reaches fbgemm's TBE as cache_load_factor) and fused_uvm tables check that
DistributedModelParallel accepts the exported kernels and cache_params and computes the right values, not that UVM
memory or its cache works: that needs a GPU. The UVM fields and their round trip are also tested without DMP in
tests/test_torchrec_tiers.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration  # (gloo ranks: in make test, each small)

ROOT = Path(__file__).resolve().parents[1]
WORLD = 4
PER_HOST = 2
LOCAL_BATCH = 5


def instance_doc() -> dict[str, Any]:
    """Small tables, 2 hosts x 2 devices (the rows are chosen so TorchRec's row layouts are uneven)."""
    tables = [
        ("tw", 40, 8),  # table-wise
        ("cw", 30, 28),  # uneven column-wise: 4 + 8 + 16 columns
        ("rw", 37, 8),  # row-wise over all 4 ranks: blocks 10, 10, 10, 7
        ("rw3", 3, 4),  # row-wise with an empty block: 1, 1, 1, 0
        ("trw", 21, 12),  # table-row-wise on host 1: 11, 10
        ("dp", 16, 4),  # data-parallel
        ("grid", 26, 16),  # columns [0, 8) rows split on host 0, [8, 16) on host 1
        ("cw1", 24, 12),  # column-wise with one rank: one whole shard in the column-wise output dist
    ]
    return {
        "tables": [{"name": n, "rows": r, "dim": d, "pooling_factor": 2.0, "access": {"zipf": 1.0}} for n, r, d in tables],
        "topology": {"num_devices": WORLD, "devices_per_host": PER_HOST, "memory_bytes": 10**8, "host_memory_bytes": 10**8, "hardware": "v100"},
        "workload": {"batch_size": WORLD * LOCAL_BATCH, "optimizer": "sgd"},
    }


def plan_docs() -> dict[str, dict[str, Any]]:
    """Two plans of the instance: every kind once (kernel fused), and the kinds moved to other tables and ranks, three
    tables with UVM kernels (see the module docstring for what that checks on CPU)."""
    from shardopt.data.torchrec_io import rw_layout

    def rows(table: str, n: int, ranks: list[int]) -> list[dict[str, Any]]:
        return [{"table": table, "device": r, "row_offset": o, "rows": k} for (o, k), r in zip(rw_layout(n, len(ranks)), ranks) if k > 0]

    a = [{"table": "tw", "device": 3}]
    a += [{"table": "cw", "device": 2, "col_offset": 0, "cols": 4}, {"table": "cw", "device": 0, "col_offset": 4, "cols": 8}, {"table": "cw", "device": 3, "col_offset": 12, "cols": 16}]
    a += rows("rw", 37, [0, 1, 2, 3]) + rows("rw3", 3, [0, 1, 2, 3]) + rows("trw", 21, [2, 3])
    a += [{"table": "dp", "device": d, "replicated": True} for d in range(WORLD)]
    a += [{**s, "col_offset": 0, "cols": 8} for s in rows("grid", 26, [0, 1])] + [{**s, "col_offset": 8, "cols": 8} for s in rows("grid", 26, [2, 3])]
    a += [{"table": "cw1", "device": 1, "column_wise": True}]
    uvm = {"kernel": "fused_uvm"}
    b = [{"table": "rw", "device": 1, **uvm}, {"table": "rw3", "device": 1}]
    # uneven column slices out of column order, two (of one width: TorchRec needs that, the export checks it) on one rank
    b += [{"table": "cw", "device": 1, "col_offset": 20, "cols": 8}, {"table": "cw", "device": 3, "col_offset": 8, "cols": 12}, {"table": "cw", "device": 1, "col_offset": 0, "cols": 8}]
    b += [{**s, "kernel": "fused_uvm_caching", "cache_load_factor": 0.5} for s in rows("tw", 40, [0, 1, 2, 3])]
    b += [{**s, "kernel": "fused_uvm_caching", "cache_load_factor": 0.25} for s in rows("trw", 21, [0, 1])] + rows("grid", 26, [2, 3])
    b += [{"table": "dp", "device": d, "replicated": True} for d in range(WORLD)]
    b += [{"table": "cw1", "device": 2}]
    return {"every_kind": {"shards": a}, "moved": {"shards": b}}


# ---------------------------------------------------------------------------------------------------------------
# the worker: one rank (this file run as a script)


def _worker(instance_path: str, plan_path: str, out_path: str) -> None:
    import warnings

    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    from torchrec import EmbeddingBagCollection, KeyedJaggedTensor
    from torchrec.distributed.model_parallel import DistributedModelParallel

    from shardopt.core.ir import load_instance
    from shardopt.data.torchrec_io import apply_optimizer, embedding_bag_configs, load_torchrec_plan

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    inst = load_instance(instance_path)
    configs = embedding_bag_configs(inst)
    plan = load_torchrec_plan(plan_path)
    report: dict[str, Any] = {"rank": rank, "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"])}

    torch.manual_seed(1234)  # the same reference weights on every rank
    ref = EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
    with torch.no_grad():
        for t in inst.tables:  # distinct, exactly representable values: any misplaced row or column shows
            w = ref.embedding_bags[t.name].weight
            w.copy_(torch.randint(-64, 64, w.shape).float() / 64)
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    apply_optimizer(inst, ebc)  # sgd, fused into the backward pass as TorchRec trains
    model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan)
    report["sharding_types"] = {n: ps.sharding_type for n, ps in model.plan.plan[""].items()}
    report["kernels"] = {n: [ps.compute_kernel, ps.cache_params.load_factor if ps.cache_params else None] for n, ps in model.plan.plan[""].items()}

    # copy the reference weights into the local shards (views of fbgemm's weights), and check what each rank holds
    held: dict[str, list[list[int]]] = {}
    with torch.no_grad():
        for key, value in model.state_dict().items():
            name = key.split(".")[-2]
            full = ref.embedding_bags[name].weight
            if hasattr(value, "local_shards"):
                for sh in value.local_shards():
                    (r0, c0), (h, w) = sh.metadata.shard_offsets, sh.metadata.shard_sizes
                    sh.tensor.copy_(full[r0 : r0 + h, c0 : c0 + w])
                    held.setdefault(name, []).append([r0, c0, h, w])
            else:  # data-parallel: a plain replicated tensor
                value.copy_(full)
                held.setdefault(name, []).append([0, 0, *full.shape])
        for key, value in model.state_dict().items():  # the copies went into the module's weights
            name = key.split(".")[-2]
            full = ref.embedding_bags[name].weight
            for sh in value.local_shards() if hasattr(value, "local_shards") else []:
                (r0, c0), (h, w) = sh.metadata.shard_offsets, sh.metadata.shard_sizes
                assert torch.equal(sh.tensor, full[r0 : r0 + h, c0 : c0 + w]), f"rank {rank}: {name} shard at {(r0, c0)} did not take the weights"
    report["held"] = held

    # this rank's batch: its own ids, lengths 0..3 (empty bags too), the same keys on every rank
    g = torch.Generator().manual_seed(100 + rank)
    keys = [t.name for t in inst.tables]
    lengths = torch.randint(0, 4, (len(keys) * LOCAL_BATCH,), generator=g)
    values = torch.cat([torch.randint(0, t.rows, (int(lengths[i * LOCAL_BATCH : (i + 1) * LOCAL_BATCH].sum()),), generator=g) for i, t in enumerate(inst.tables)])
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
    out = model(kjt)
    out = out.wait() if hasattr(out, "wait") else out
    got = out.to_dict()
    want = ref(kjt).to_dict()
    report["max_abs_diff"] = {k: float((got[k] - want[k]).abs().max()) if got[k].numel() else 0.0 for k in keys}
    report["shapes"] = {k: list(got[k].shape) for k in keys}

    # one backward pass (fused sgd, lr 0.01): the rows this batch touched move, every rank's shards stay finite
    before = {k: v for k, v in ((k, [sh.tensor.clone() for sh in v.local_shards()]) for k, v in model.state_dict().items() if hasattr(v, "local_shards"))}
    torch.cat([got[k] for k in keys], dim=1).sum().backward()
    moved = 0
    for key, value in model.state_dict().items():
        if key in before:
            for old, sh in zip(before[key], value.local_shards()):
                assert torch.isfinite(sh.tensor).all()
                moved += int((old != sh.tensor).any(dim=1).sum())
    report["rows_moved"] = moved
    dist.barrier()
    dist.destroy_process_group()
    Path(out_path).write_text(json.dumps(report))


# ---------------------------------------------------------------------------------------------------------------
# the test


def _launch(instance_path: Path, plan_path: Path, tmp: Path, timeout: float = 420.0) -> list[dict[str, Any]]:
    """The 4 ranks, as torchrun would start them on 2 hosts of 2; every rank's report (AssertionError otherwise)."""
    from conftest import launch_ranks

    return launch_ranks([sys.executable, __file__, str(instance_path), str(plan_path)], tmp, WORLD, PER_HOST, timeout)


# 37-57 s on the shared 2-core machine (two plans x 4 processes, each importing TorchRec): under the ~60 s above which
# a test is marked slow, so `make test` runs it
def test_distributed_model_parallel_on_4_gloo_processes_matches_the_unsharded_collection(tmp_path: Path) -> None:
    import pytest
    try:
        import shardopt.data.torchrec_io as tio

        tio.require_torchrec()
    except ImportError:
        pytest.skip("TorchRec (the [torchrec] extra) is not installed")
    from typer.testing import CliRunner

    from shardopt.cli import app
    from shardopt.core.ir import Plan, instance_from_dict
    from shardopt.core.plan_check import check_plan

    inst = instance_from_dict(instance_doc())
    inst_path = tmp_path / "instance.json"
    inst_path.write_text(json.dumps(inst.model_dump(mode="json")))
    expected_types = {
        "every_kind": {"tw": "table_wise", "cw": "column_wise", "rw": "row_wise", "rw3": "row_wise", "trw": "table_row_wise", "dp": "data_parallel", "grid": "grid_shard", "cw1": "column_wise"},
        "moved": {"tw": "row_wise", "cw": "column_wise", "rw": "table_wise", "rw3": "table_wise", "trw": "table_row_wise", "dp": "data_parallel", "grid": "table_row_wise", "cw1": "table_wise"},
    }
    expected_kernels = {"every_kind": {}, "moved": {"rw": ["fused_uvm", None], "tw": ["fused_uvm_caching", 0.5], "trw": ["fused_uvm_caching", 0.25]}}
    for label, doc in plan_docs().items():
        plan = Plan.model_validate(doc)
        assert check_plan(inst, plan).ok, label
        plan_path, export = tmp_path / f"{label}.plan.json", tmp_path / f"{label}.torchrec.json"
        plan_path.write_text(json.dumps(plan.model_dump(mode="json")))
        result = CliRunner().invoke(app, ["export", str(plan_path), "--format", "torchrec", "--instance", str(inst_path), "--compute-device", "cpu", "--out", str(export), "--json"])
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["round_trip"] == "identical"
        run_dir = tmp_path / label
        run_dir.mkdir()
        reports = _launch(inst_path, export, run_dir)
        tables = {t.name: t for t in inst.tables}
        holdings: dict[str, list[tuple[int, int, int, int, int]]] = {}
        for rep in reports:
            assert rep["local_world_size"] == PER_HOST
            assert rep["sharding_types"] == expected_types[label], (label, rep["sharding_types"])
            assert rep["kernels"] == {**{n: ["fused", None] for n in tables if n != "dp"}, "dp": ["dense", None], **expected_kernels[label]}, label
            # the pooled outputs equal the unsharded collection's on every rank, for every table
            assert rep["shapes"] == {n: [LOCAL_BATCH, t.dim] for n, t in tables.items()}, label
            bad = {k: v for k, v in rep["max_abs_diff"].items() if v > 1e-5}
            assert not bad, (label, rep["rank"], bad)
            assert rep["rows_moved"] > 0, (label, rep["rank"])
            for name, blocks in rep["held"].items():
                holdings.setdefault(name, []).extend((rep["rank"], *b) for b in blocks if b[2] > 0)
        # together the ranks hold exactly the plan's shards (TorchRec's empty row blocks aside)
        want = sorted(
            (s.device, s.row_range(tables[s.table])[0], s.col_range(tables[s.table])[0], s.height(tables[s.table]), s.width(tables[s.table]), s.table)
            for s in plan.shards
        )
        got = sorted((r, r0, c0, h, w, name) for name, blocks in holdings.items() for r, r0, c0, h, w in blocks)
        assert got == want, label


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _worker(sys.argv[1], sys.argv[2], sys.argv[3])
