"""The cuda backend: its timing path run on the CPU, its refusal without CUDA, the torchrun entry point's argument
handling and validation (and its whole program on one gloo rank); the GPU tests run only where CUDA is."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import torch
from conftest import make_instance

from shardopt.core.ir import Plan, Shard, instance_from_dict, save
from shardopt.measure.backends import cuda_dist
from shardopt.measure.backends.base import BackendUnavailable, KernelTiming, TimingSettings
from shardopt.measure.backends.cuda import CudaBackend
from shardopt.measure.backends.timing import shard_inputs, time_torch_tbe

HAS_CUDA = torch.cuda.is_available()


def tiny(optimizer="rowwise_adagrad", n_devices=2, batch=64, dtype="fp32"):
    doc = {
        "tables": [
            {"name": "a", "rows": 500, "dim": 8, "pooling_factor": 3.0, "access": {"zipf": 1.0}},
            {"name": "b", "rows": 300, "dim": 16, "pooling_factor": 2.0, "access": {"zipf": 0.5}},
            {"name": "c", "rows": 200, "dim": 8, "pooling_factor": 4.0, "access": {"zipf": 1.2}},
        ],
        "topology": {"num_devices": n_devices, "devices_per_host": n_devices, "memory_bytes": 10**9, "hardware": "h200"},
        "workload": {"batch_size": batch, "optimizer": optimizer, "weight_dtype": dtype},
    }
    return instance_from_dict(doc)


def tiny_plan(n_devices=2):
    # a column-split table (b over two devices), a row-split one (c) and a whole one (a)
    return Plan(
        shards=[
            Shard(table="a", device=n_devices - 1),
            Shard(table="b", device=0, cols=4),
            Shard(table="b", device=n_devices - 1, col_offset=4),
            Shard(table="c", device=0, rows=120),
            Shard(table="c", device=n_devices - 1, row_offset=120),
        ]
    )


SETTINGS = TimingSettings(batch_size=64, repeats=3, warmup=1, seed=1)


@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad", "adam"])
def test_time_torch_tbe_on_cpu(optimizer):
    inst = tiny(optimizer)
    shards = [s for s in tiny_plan().shards if s.device == 0]
    t = time_torch_tbe(inst, shards, SETTINGS, "cpu")
    assert isinstance(t, KernelTiming)
    assert t.fwd_ms > 0 and t.bwd_ms > 0 and t.repeats == 3 and len(t.samples_bwd_ms) == 3
    assert t.batch_size == 64 and t.hardware
    # device 0 holds b's first 4 columns and c's first 120 rows (8 wide): two dims, two calls
    assert t.kernel.startswith("torch embedding_bag, one fused call per distinct dim (2 calls)")
    assert optimizer in t.kernel and "(cpu)" in t.kernel
    assert torch.get_num_threads() >= 1


def test_time_torch_tbe_labels_calls_caps_and_notes():
    inst = tiny("sgd")
    shards = [Shard(table="a", device=0), Shard(table="b", device=0)]
    t = time_torch_tbe(inst, shards, TimingSettings(batch_size=32, repeats=2, warmup=0, max_rows=100), "cpu", note="why")
    assert "(2 calls)" in t.kernel and ", rows capped at 100" in t.kernel and t.kernel.endswith("; why")
    with pytest.raises(ValueError, match="no shards"):
        time_torch_tbe(inst, [], SETTINGS, "cpu")


def test_shard_inputs_follow_the_shards():
    inst = tiny()
    plan = tiny_plan()
    inputs = shard_inputs(inst, plan.shards, 64, seed=1, max_rows=150)
    assert inputs.dims == [8, 4, 12, 8, 8]
    assert inputs.rows == [150, 150, 150, 120, 80] and inputs.capped
    for (idx, off), r in zip(inputs.traces, inputs.rows):
        assert len(off) == 65 and off[-1] == len(idx) and (len(idx) == 0 or idx.max() < r)


@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
def test_fbgemm_adapter_and_timing_loop_on_cpu(optimizer):
    """The cuda path's fbgemm adapter (table-major inputs, forward keeping the graph, fused backward) and the shared
    timing loop, on fbgemm's CPU TBE; its forward agrees with the torch kernel on equal weights."""
    pytest.importorskip("fbgemm_gpu")
    from shardopt.measure.backends.timing import FbgemmTBE, time_kernel
    from shardopt.measure.backends.torch_tbe import TorchTBE

    inst = tiny(optimizer)
    inputs = shard_inputs(inst, tiny_plan(1).shards, 64, seed=2)
    fb = FbgemmTBE(inputs.rows, inputs.dims, inputs.dtypes, inst.workload.optimizer, device="cpu")
    assert fb.label.startswith("fbgemm SplitTableBatchedEmbeddingBagsCodegen (CPU")
    tt = TorchTBE(inputs.rows, inputs.dims, inputs.dtypes, inst.workload.optimizer, device="cpu")
    tt.set_weights([w.detach().clone() for w in fb.split_weights()])
    fb_batch, tt_batch = fb.prepare(inputs.traces), tt.prepare(inputs.traces)
    torch.testing.assert_close(fb.forward(fb_batch).detach(), tt.forward(tt_batch), rtol=1e-6, atol=1e-6)
    grad = torch.randn(64, fb.total_dim)
    fb.backward_update(fb_batch, grad)
    tt.backward_update(tt_batch, grad)
    for a, b in zip(fb.split_weights(), tt.split_weights()):
        torch.testing.assert_close(a.detach(), b, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="needs a forward"):
        fb.backward_update(fb_batch, grad)
    t = time_kernel(fb, fb_batch, grad, SETTINGS, "cpu", label=fb.label, hardware="cpu")
    assert t.fwd_ms > 0 and t.bwd_ms > 0 and t.repeats == SETTINGS.repeats and t.kernel == fb.label


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without CUDA")
def test_cuda_backend_unavailable_without_cuda():
    backend = CudaBackend()
    assert backend.name == "cuda"
    inst = tiny()
    for call in (lambda: backend.hardware_label(), lambda: backend.kernel_label(inst),
                 lambda: backend.time_shards(inst, tiny_plan().shards[:1], SETTINGS)):
        with pytest.raises(BackendUnavailable, match="no CUDA device"):
            call()
    with pytest.raises(ValueError, match="kernel"):
        CudaBackend(kernel="triton")


# ---------------------------------------------------------------------------------------------------------------
# the torchrun entry point


def test_dist_args_and_validation(tmp_path):
    args = cuda_dist.parse_args(["i.json", "p.json", "--out", "r.json", "--batch-size", "64", "--repeats", "4"])
    assert (args.batch_size, args.repeats, args.warmup, args.seed, args.kernel) == (64, 4, 3, 0, "auto")
    with pytest.raises(SystemExit):
        cuda_dist.parse_args(["i.json", "p.json"])  # --out is required
    with pytest.raises(SystemExit):
        cuda_dist.parse_args(["i.json", "p.json", "--out", "r", "--repeats", "0"])

    inst, plan = tiny(n_devices=2), tiny_plan(2)
    with pytest.raises(cuda_dist.DistSetupError, match=r"world size 4 != the topology's 2 devices.*--nproc_per_node=2"):
        cuda_dist.validate(inst, plan, 4)
    with pytest.raises(cuda_dist.DistSetupError, match="batch size 1 is smaller than the world size 2"):
        cuda_dist.validate(inst, plan, 2, 1)
    uneven = cuda_dist.validate(inst, plan, 2, 63)  # all_to_all_single takes uneven splits
    assert uneven.local_batches == (32, 31)
    u0, u1 = cuda_dist.split_sizes(uneven, 0), cuda_dist.split_sizes(uneven, 1)
    for p, sp in enumerate((u0, u1)):
        for q, sq in enumerate((u0, u1)):
            assert sp["fwd_in"][q] == sq["fwd_out"][p] and sp["bwd_in"][q] == sq["bwd_out"][p]
    assert sum(u0["bwd_out"]) == 63 * 12  # rank 0 gets back the gradient of its whole [B, D_0] output
    bad = Plan(shards=[Shard(table="a", device=0)])
    with pytest.raises(cuda_dist.DistSetupError, match="not valid"):
        cuda_dist.validate(inst, bad, 2)
    layout = cuda_dist.validate(inst, plan, 2)
    assert layout.batch_size == 64 and layout.local_batch == 32 and layout.dims == (12, 28)
    s0, s1 = cuda_dist.split_sizes(layout, 0), cuda_dist.split_sizes(layout, 1)
    assert s0 == {"fwd_in": [32 * 12] * 2, "fwd_out": [32 * 12, 32 * 28], "bwd_in": [32 * 12, 32 * 28], "bwd_out": [32 * 12] * 2}
    # what rank p sends to rank q is what q expects from p, both ways
    for p, sp in enumerate((s0, s1)):
        for q, sq in enumerate((s0, s1)):
            assert sp["fwd_in"][q] == sq["fwd_out"][p] and sp["bwd_in"][q] == sq["bwd_out"][p]


def test_dist_main_refuses_outside_torchrun(tmp_path, monkeypatch, capsys):
    inst, plan = tiny(n_devices=2), tiny_plan(2)
    save(inst, tmp_path / "i.json")
    save(plan, tmp_path / "p.json")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    argv = [str(tmp_path / "i.json"), str(tmp_path / "p.json"), "--out", str(tmp_path / "r.json")]
    assert cuda_dist.main(argv) == 2
    assert "start this with torchrun" in capsys.readouterr().err
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert cuda_dist.main(argv) == 2
    assert "world size 3 != the topology's 2 devices" in capsys.readouterr().err
    assert cuda_dist.main([str(tmp_path / "missing.json"), *argv[1:]]) == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dist_program_on_one_gloo_rank(tmp_path, monkeypatch):
    """The whole program (kernel, four timed phases, gather, JSON) on one CPU rank with gloo."""
    inst, plan = tiny(n_devices=1, optimizer="adam"), tiny_plan(1)
    save(inst, tmp_path / "i.json")
    save(plan, tmp_path / "p.json")
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "sub" / "r.json"
    rc = cuda_dist.main([str(tmp_path / "i.json"), str(tmp_path / "p.json"), "--out", str(out), "--device-type", "cpu",
                         "--repeats", "2", "--warmup", "1", "--batch-size", "32"])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["world_size"] == 1 and doc["batch_size"] == 32 and doc["process_group"] == "gloo"
    (dev,) = doc["devices"]
    assert dev["shards"] == 5 and dev["pooled_dim"] == 40
    assert "(3 calls)" in dev["kernel"]
    for col in cuda_dist.PHASES:
        assert dev[col] > 0 and len(dev["samples_ms"][col]) == 2
    assert doc["max_cost_ms"] == pytest.approx(sum(dev[c] for c in cuda_dist.PHASES))


# ---------------------------------------------------------------------------------------------------------------
# on a GPU


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("kernel", ["auto", "torch"])
def test_cuda_backend_times_a_device(kernel):
    backend = CudaBackend(kernel=kernel)
    inst = make_instance(6, 2, seed=0, max_rows=20_000, batch_size=4096)
    shards = [Shard(table=t.name, device=0) for t in inst.tables]
    settings = TimingSettings(batch_size=4096, repeats=5, warmup=2)
    label = backend.kernel_label(inst)
    assert backend.hardware_label() == torch.cuda.get_device_name()
    t = backend.time_shards(inst, shards, settings)
    assert t.fwd_ms > 0 and t.bwd_ms > 0 and t.repeats == 5
    assert t.hardware == backend.hardware_label()
    if backend.uses_fbgemm():
        assert t.kernel.startswith("fbgemm SplitTableBatchedEmbeddingBagsCodegen (CUDA")
    else:
        assert label.startswith("torch embedding_bag") and "(cuda)" in t.kernel
        assert "one fused call per distinct dim" in t.kernel
    # more lookups cost more: 50 x the lookups, fast and slow passes together (at 10 x, a 0.2 ms forward pass on an H200
    # is mostly launches, and the heavier one measured faster once in two runs there)
    heavy = inst.model_copy(update={"tables": [tb.model_copy(update={"pooling_factor": tb.pooling_factor * 50}) for tb in inst.tables]})
    h = backend.time_shards(heavy, shards, settings)
    assert h.fwd_ms + h.bwd_ms > t.fwd_ms + t.bwd_ms


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_time_torch_tbe_cuda_matches_interface():
    inst = tiny("rowwise_adagrad", dtype="fp16")
    t = time_torch_tbe(inst, tiny_plan().shards, SETTINGS, "cuda")
    assert t.fwd_ms > 0 and t.bwd_ms > 0 and "(cuda)" in t.kernel
    assert np.isfinite(t.fwd_iqr_ms)
