"""Data-parallel replicas on the measured judges: TorchRec's dense kernel (torch embedding_bag, dense gradient, the
optimizer over every row) on each device's share of the batch (shardopt/measure/backends/dense_replicas.py)."""

from __future__ import annotations

import numpy as np
import pytest

from shardopt.core.ir import Optimizer, Plan, Shard, instance_from_dict
from shardopt.core.traces import table_trace
from shardopt.measure.backends.dense_replicas import DenseReplicas, local_batch
from shardopt.measure.backends.timing import replica_inputs
from shardopt.measure.evaluate import evaluate_plan
from shardopt.measure.plan_timing import MeasureError, plan_comm

torch = pytest.importorskip("torch")


def instance(opt: str = "rowwise_adagrad", devices: int = 2, batch: int = 256):
    tables = [
        {"name": "a", "rows": 5000, "dim": 16, "pooling_factor": 4.0, "access": {"zipf": 1.0}},
        {"name": "b", "rows": 20000, "dim": 32, "pooling_factor": 3.0, "access": {"zipf": 0.7}},
        {"name": "c", "rows": 800, "dim": 8, "pooling_factor": 2.0, "access": {"zipf": 1.2}},
    ]
    return instance_from_dict({
        "tables": tables,
        "topology": {"num_devices": devices, "devices_per_host": devices, "memory_bytes": 10**9, "hardware": "v100"},
        "workload": {"batch_size": batch, "optimizer": opt},
    })


def test_the_replicas_of_a_table_split_its_trace_by_local_batch() -> None:
    inst = instance(devices=4)
    idx, off = table_trace(inst.tables[0], 256, 0)
    pieces = [replica_inputs(inst, [Shard(table="a", device=d, replicated=True)], 256, 0) for d in range(4)]
    assert local_batch(256, 4) == 64
    got = np.concatenate([p.traces[0][0] for p in pieces])
    assert np.array_equal(got, idx)  # every lookup of the global batch once, in order
    assert all(p.traces[0][1][0] == 0 and len(p.traces[0][1]) == 65 for p in pieces)


@pytest.mark.parametrize("opt", ["sgd", "rowwise_adagrad", "adam"])
def test_dense_kernel_pools_and_steps_every_touched_row(opt: str) -> None:
    inst = instance(opt)
    rep = replica_inputs(inst, [Shard(table="a", device=1, replicated=True), Shard(table="c", device=1, replicated=True)], 256, 0)
    k = DenseReplicas(rep.rows, rep.dims, rep.dtypes, Optimizer(opt), 0.01, 1e-8, seed=0)
    before = [w.detach().clone() for w in k.weights]
    batch = k.prepare(rep.traces)
    out = k.forward(batch)
    i, o = rep.traces[0]
    ref = torch.nn.functional.embedding_bag(torch.from_numpy(i), before[0], torch.from_numpy(o[:-1].copy()), mode="sum")
    assert out.shape == (128, 16 + 8) and torch.allclose(out[:, :16], ref, atol=1e-6)
    grad = torch.randn(128, 24, generator=torch.Generator().manual_seed(0))
    k.backward_update(batch, grad)
    touched = np.zeros(rep.rows[0], dtype=bool)
    touched[i] = True
    changed = (k.weights[0].detach() != before[0]).any(dim=1).numpy()
    assert changed[touched].all() and not changed[~touched].any()  # dense step: zero gradient rows keep their weights
    if opt == "sgd":  # one step of w - lr * dense gradient
        dense = torch.zeros_like(before[0])
        lengths = np.diff(o)
        rows = np.repeat(np.arange(128), lengths)
        dense.index_add_(0, torch.from_numpy(i), grad[torch.from_numpy(rows), :16])
        assert torch.allclose(k.weights[0].detach(), before[0] - 0.01 * dense, atol=1e-6)


def test_cpu_judge_times_replicas_beside_sharded_tables(tmp_path) -> None:
    from shardopt.measure.backends.cpu import fbgemm_available

    if fbgemm_available() is not None:
        pytest.skip(str(fbgemm_available()))
    inst = instance()
    plan = Plan(shards=[Shard(table="b", device=0)] + [Shard(table=n, device=d, replicated=True) for n in "ac" for d in (0, 1)])
    ev = evaluate_plan(inst, plan, "cpu", repeats=3, warmup=1, cache=False)
    cols = ev.costs.columns
    assert cols.shape == (2, 4) and (cols[:, :2] > 0).all()
    # device 0 holds table b beside its replicas: the dense kernel and the TBE in one timed unit
    only_replicas = evaluate_plan(inst, Plan(shards=[Shard(table="b", device=1)] + plan.shards[1:]), "cpu", repeats=3, warmup=1, cache=False)
    assert only_replicas.costs.columns.shape == (2, 4)
    with pytest.raises(MeasureError, match="all-reduce"):
        plan_comm(inst, plan, "cpu", "measured")
    # the modelled comm adds the replicas' gradient all-reduce to the backward column (the all-to-all is symmetric)
    comm = plan_comm(inst, plan, "cpu", "modelled")
    assert (comm[:, 1] > comm[:, 0]).all()
