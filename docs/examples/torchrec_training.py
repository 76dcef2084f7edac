"""Train a TorchRec model sharded by shardopt: `ShardoptPlanner` where `EmbeddingShardingPlanner` would go.

Run on one machine's CPUs with two processes (gloo):

    torchrun --standalone --nproc-per-node 2 docs/examples/torchrec_training.py

On GPUs, use backend "nccl", compute device "cuda" in the topology, and torch.device("cuda", local_rank).
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import torch
import torch.distributed as dist
import torchrec.optim as trec_optim
from torch.distributed.optim import _apply_optimizer_in_backward
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner.types import (
    HardwareConfig,
    KernelConfig,
    ParameterConstraints,
    TopologyFactory,
    TrainerConfig,
)
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper

from shardopt.torchrec import ShardoptPlanner

BATCH = 32  # per rank, as TorchRec's planner takes it


class Model(torch.nn.Module):
    """Two pooled features and a sequence feature, summed into one score per sample."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.ebc = EmbeddingBagCollection(device=device, tables=[
            EmbeddingBagConfig(name="user", embedding_dim=16, num_embeddings=1000, feature_names=["user_id"]),
            EmbeddingBagConfig(name="item", embedding_dim=16, num_embeddings=500, feature_names=["item_id"]),
        ])
        self.ec = EmbeddingCollection(device=device, tables=[
            EmbeddingConfig(name="history", embedding_dim=16, num_embeddings=500, feature_names=["history_ids"]),
        ])
        self.top = torch.nn.Linear(48, 1, device=device if device.type != "meta" else None)

    def forward(self, pooled: KeyedJaggedTensor, sequence: KeyedJaggedTensor) -> torch.Tensor:
        p = self.ebc(pooled)
        s = self.ec(sequence)["history_ids"]
        history = _sum_per_sample(s)
        return self.top(torch.cat([p["user_id"], p["item_id"], history], dim=1)).squeeze(1)


def _sum_per_sample(jt: Any) -> torch.Tensor:
    """The sequence's rows summed per sample (a simple pooling for the example's dense part)."""
    lengths = jt.lengths()
    sample = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    out = torch.zeros(len(lengths), jt.values().shape[1])
    return out.index_add(0, sample, jt.values())


def batch(generator: torch.Generator) -> tuple[KeyedJaggedTensor, KeyedJaggedTensor, torch.Tensor]:
    def kjt(features: list[tuple[str, int]], most: int) -> KeyedJaggedTensor:
        lengths = torch.randint(0, most + 1, (len(features) * BATCH,), generator=generator)
        values = torch.cat([torch.randint(0, rows, (int(lengths[i * BATCH : (i + 1) * BATCH].sum()),), generator=generator)
                            for i, (_, rows) in enumerate(features)])
        return KeyedJaggedTensor.from_lengths_sync(keys=[f for f, _ in features], values=values, lengths=lengths)

    return kjt([("user_id", 1000), ("item_id", 500)], 2), kjt([("history_ids", 500)], 5), torch.rand(BATCH, generator=generator)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    torch.manual_seed(0)

    model = Model(torch.device("meta"))  # the tables are made where the plan puts them
    # the embedding tables' optimizer, fused into the backward pass (the planner prices its state's memory)
    _apply_optimizer_in_backward(trec_optim.RowWiseAdagrad, list(model.ebc.parameters()) + list(model.ec.parameters()), {"lr": 0.05})

    topology = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(world_size=world, local_world_size=local),
        hardware_config=HardwareConfig(ddr_cap_bytes=256 * 1024**2),
        kernel_config=KernelConfig(compute_device="cpu"),
    )
    sharders = [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]
    planner = ShardoptPlanner(topology, batch_size=BATCH, solver="neuroshard", cost_model="auto", time_limit=10, seed=0,
                              constraints={"user": ParameterConstraints(pooling_factors=[1.0]),
                                           "item": ParameterConstraints(pooling_factors=[1.5])})
    plan = planner.collective_plan(model, sharders, dist.group.WORLD)  # planned on rank 0, the same plan on every rank
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=sharders)

    # the dense part trains with an ordinary optimizer; the tables' optimizer is already fused into their backward
    dense = KeyedOptimizerWrapper(dict(p for p in dmp.named_parameters() if "top" in p[0]), lambda ps: torch.optim.SGD(ps, lr=0.05))
    optimizer = CombinedOptimizer([dmp.fused_optimizer, dense])
    generator = torch.Generator().manual_seed(100 + rank)
    for step in range(20):
        pooled, sequence, label = batch(generator)
        loss = torch.nn.functional.mse_loss(dmp(pooled, sequence), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    if rank == 0:
        print("plan:", {path: {t: ps.sharding_type for t, ps in mp.items()} for path, mp in plan.plan.items()})
        print(f"predicted {planner.last['predicted_ms']:.3f} ms per iteration by {planner.last['cost_model']}")
    # release the sharded model (its DDP and gloo work) before the process group, and both before the interpreter's
    # own teardown: left to it, the exit sometimes aborted with "terminate called without an active exception"
    # (1 run in 8 beside two CPU burners; 0 in 22 with this order)
    dist.barrier()
    del optimizer, dense, dmp, model, plan, planner
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
