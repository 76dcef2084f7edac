"""A 2D plan in TorchRec's DMPCollection on 4 ranks as 2 sharding groups of 2: ShardoptPlanner(two_d=...) plans the
group, DMPCollection shards by it, the model trains, `sync()` runs, and the replicas then hold equal weights; the
outputs before training equal an unsharded model's.

It needs 4 CUDA devices: TorchRec 1.8's DMPCollection asserts a CUDA or MTIA device, and run past that assertion on
CPU and gloo (python -O) it remaps every shard's placement to `cpu:N`, which torch's ShardedTensor refuses for a CPU
tensor ("Local shard tensor device does not match with local Shard's placement"). ShardoptPlanner's 2D plan itself
is checked on CPU in tests/test_two_d.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORLD, PER_HOST, GROUP, LOCAL_BATCH = 4, 2, 2, 4
TABLES = (("user", 300, 16), ("item", 200, 32), ("page", 120, 16))

pytest.importorskip("torchrec")


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _model(device: str) -> Any:
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    return EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[f"f_{n}"])
                                          for n, r, d in TABLES], device=torch.device(device))


def _worker(out_path: str) -> None:
    import warnings

    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist
    import torchrec.optim as trec_optim
    from torch.distributed.optim import _apply_optimizer_in_backward
    from torchrec import KeyedJaggedTensor
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DMPCollection
    from torchrec.distributed.planner.types import HardwareConfig, KernelConfig, TopologyFactory, TrainerConfig

    from shardopt.torchrec import ShardoptPlanner

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.manual_seed(1234)
    ref = _model("cpu")
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randint(-64, 64, p.shape).float() / 64)
    topology = TopologyFactory.create_topology(trainer_config=TrainerConfig(world_size=world, local_world_size=PER_HOST),
                                               hardware_config=HardwareConfig(ddr_cap_bytes=64 * 1024**2),
                                               kernel_config=KernelConfig(compute_device="cuda"))
    planner = ShardoptPlanner(topology, batch_size=LOCAL_BATCH, solver="neuroshard", cost_model="analytic",
                              two_d={"group_size": GROUP, "sync_interval": 1})
    sharders = [EmbeddingBagCollectionSharder()]
    model = _model("meta")
    _apply_optimizer_in_backward(trec_optim.SGD, model.parameters(), {"lr": 0.5})
    plan = planner.collective_plan(model, sharders, dist.group.WORLD)
    report: dict[str, Any] = {"rank": rank, "group_size": planner.sharding_group_size,
                              "plan_ranks": sorted({r for mp in plan.plan.values() for ps in mp.values() for r in ps.ranks})}
    dmp = DMPCollection(module=model, device=device, plan=plan, sharding_group_size=GROUP, world_size=world,
                        global_pg=dist.group.WORLD, sharders=sharders)
    full = dict(ref.named_parameters())
    with torch.no_grad():
        for key, value in dmp.state_dict().items():
            name = key.removeprefix("module.")
            for sh in value.local_shards() if hasattr(value, "local_shards") else []:
                (r0, c0), (h, w) = sh.metadata.shard_offsets, sh.metadata.shard_sizes
                sh.tensor.copy_(full[name][r0:r0 + h, c0:c0 + w].to(device))
    g = torch.Generator().manual_seed(100 + rank)  # every rank its own batch: the replicas' gradients differ

    def batch() -> Any:
        lengths = torch.randint(0, 4, (len(TABLES) * LOCAL_BATCH,), generator=g)
        values = torch.cat([torch.randint(0, rows, (int(lengths[i * LOCAL_BATCH:(i + 1) * LOCAL_BATCH].sum()),), generator=g)
                            for i, (_, rows, _) in enumerate(TABLES)])
        return KeyedJaggedTensor.from_lengths_sync(keys=[f"f_{n}" for n, _, _ in TABLES], values=values, lengths=lengths).to(device)

    first = batch()
    out = dmp(first)
    out = (out.wait() if hasattr(out, "wait") else out).to_dict()
    want = ref(first.to(torch.device("cpu"))).to_dict()
    report["max_abs_diff"] = max(float((out[k].cpu() - want[k]).abs().max()) for k in want)
    for step in range(3):
        kjt = first if step == 0 else batch()
        res = dmp(kjt)
        res = (res.wait() if hasattr(res, "wait") else res).to_dict()
        sum(v.sum() for v in res.values()).backward()
    before = {k: [sh.tensor.clone() for sh in v.local_shards()] for k, v in dmp.state_dict().items() if hasattr(v, "local_shards")}
    dmp.sync()
    after = {k: [sh.tensor.clone() for sh in v.local_shards()] for k, v in dmp.state_dict().items() if hasattr(v, "local_shards")}
    report["sync_changed"] = any(not torch.equal(a, b) for k in after for a, b in zip(after[k], before[k]))
    # each replica pair (DMPCollection's default layout: ranks 0,1 and 2,3) must now hold the same shards
    flat = torch.cat([t.flatten() for k in sorted(after) for t in after[k]]) if after else torch.zeros(1)
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    peer = rank ^ 1
    report["replica_max_abs_diff"] = float((gathered[rank] - gathered[peer]).abs().max())
    dist.barrier()
    dist.destroy_process_group()
    Path(out_path).write_text(json.dumps(report))
    sys.stdout.flush()
    os._exit(0)


@pytest.mark.integration
@pytest.mark.skipif(_cuda_devices() < WORLD, reason="DMPCollection runs on CUDA or MTIA devices only (TorchRec 1.8); 4 are needed")
def test_dmpcollection_trains_and_syncs_a_two_group_plan_on_4_cuda_ranks(tmp_path: Path) -> None:
    from conftest import launch_ranks

    reports = launch_ranks([sys.executable, __file__], tmp_path, WORLD, PER_HOST)
    assert all(rep["group_size"] == GROUP for rep in reports)
    assert all(set(rep["plan_ranks"]) <= set(range(GROUP)) for rep in reports)  # the group's plan: ranks 0..G-1
    for rep in reports:
        assert rep["max_abs_diff"] < 1e-5, rep
        assert rep["sync_changed"], rep  # (different batches per replica: sync() had something to average)
        assert rep["replica_max_abs_diff"] < 1e-6, rep


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    _worker(sys.argv[1])
