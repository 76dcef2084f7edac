"""The torch kernel of the cuda path (shardopt.measure.backends.torch_tbe.TorchTBE), run on the CPU, against
torch.nn.EmbeddingBag (sum pooling) per table and a straightforward reference of fbgemm's optimizer update rules,
and against fbgemm's own CPU TBE on a tiny case."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardopt.measure.backends.torch_tbe import TorchTBE

ROWS = [40, 30, 50, 20, 25, 10]
DIMS = [4, 8, 8, 16, 4, 8]  # three distinct dims, interleaved in table order
B = 16
LR, EPS, B1, B2 = 0.05, 1e-8, 0.9, 0.999


def make_traces(rows, batch, seed, empty_tables=()):
    """fbgemm-format traces: bags of 0..6 lookups with repeats, only rows [0, rows/2) ever looked up."""
    rng = np.random.default_rng(seed)
    traces = []
    for t, r in enumerate(rows):
        lengths = np.zeros(batch, dtype=np.int64) if t in empty_tables else rng.integers(0, 7, batch)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = rng.integers(0, max(1, r // 2), int(offsets[-1])).astype(np.int64)
        traces.append((indices, offsets))
    return traces


def reference_bags(kernel: TorchTBE) -> list[torch.nn.EmbeddingBag]:
    bags = []
    for w in kernel.split_weights():
        bag = torch.nn.EmbeddingBag(w.shape[0], w.shape[1], mode="sum", include_last_offset=True)
        with torch.no_grad():
            bag.weight.copy_(w.float())
        bags.append(bag)
    return bags


def reference_forward(bags, traces):
    return torch.cat([bag(torch.from_numpy(i), torch.from_numpy(o)) for bag, (i, o) in zip(bags, traces)], dim=1)


def touched(traces, rows):
    masks = []
    for (i, _), r in zip(traces, rows):
        m = np.zeros(r, dtype=bool)
        m[i] = True
        masks.append(torch.from_numpy(m))
    return masks


class ReferenceOptimizer:
    """fbgemm's EXACT_SGD / EXACT_ROWWISE_ADAGRAD / ADAM, applied to the dense gradient of EmbeddingBag, only on
    the rows the batch looked up, written out plainly."""

    def __init__(self, optimizer, rows, dims):
        self.optimizer = optimizer
        self.t = 0
        self.sum = [torch.zeros(r) for r in rows]
        self.m = [torch.zeros(r, d) for r, d in zip(rows, dims)]
        self.v = [torch.zeros(r, d) for r, d in zip(rows, dims)]

    def step(self, bags, masks):
        self.t += 1
        with torch.no_grad():
            for k, (bag, mask) in enumerate(zip(bags, masks)):
                w, g = bag.weight, bag.weight.grad
                for r in torch.nonzero(mask).flatten().tolist():
                    if self.optimizer == "sgd":
                        w[r] -= LR * g[r]
                    elif self.optimizer == "rowwise_adagrad":
                        self.sum[k][r] += (g[r] ** 2).mean()
                        w[r] -= LR * g[r] / (torch.sqrt(self.sum[k][r]) + EPS)
                    else:
                        self.m[k][r] = B1 * self.m[k][r] + (1 - B1) * g[r]
                        self.v[k][r] = B2 * self.v[k][r] + (1 - B2) * g[r] ** 2
                        m_hat = self.m[k][r] / (1 - B1**self.t)
                        v_hat = self.v[k][r] / (1 - B2**self.t)
                        w[r] -= LR * m_hat / (torch.sqrt(v_hat) + EPS)
                bag.weight.grad = None


def test_forward_matches_embedding_bag_with_mixed_dims():
    kernel = TorchTBE(ROWS, DIMS, "fp32", "sgd", device="cpu", seed=3)
    assert kernel.num_calls == 3
    assert kernel.label.startswith("torch embedding_bag, one fused call per distinct dim (3 calls)")
    traces = make_traces(ROWS, B, seed=1, empty_tables=(4,))
    out = kernel.forward(kernel.prepare(traces))
    assert out.shape == (B, sum(DIMS)) and out.dtype == torch.float32
    ref = reference_forward(reference_bags(kernel), traces)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad", "adam"])
def test_gradients_and_updates_match_reference(optimizer):
    kernel = TorchTBE(ROWS, DIMS, "fp32", optimizer, LR, EPS, beta1=B1, beta2=B2, device="cpu", seed=0)
    bags = reference_bags(kernel)
    ref_opt = ReferenceOptimizer(optimizer, ROWS, DIMS)
    before = [w.clone() for w in kernel.split_weights()]
    ever = [torch.zeros(r, dtype=torch.bool) for r in ROWS]
    gen = torch.Generator().manual_seed(7)
    for step in range(2):  # two steps: adagrad accumulates, adam's bias correction moves on
        traces = make_traces(ROWS, B, seed=10 + step, empty_tables=(4,))
        masks = touched(traces, ROWS)
        ever = [e | m for e, m in zip(ever, masks)]
        batch = kernel.prepare(traces)
        out = kernel.forward(batch)
        ref_out = reference_forward(bags, traces)
        torch.testing.assert_close(out, ref_out.detach(), rtol=1e-5, atol=1e-6)
        grad = torch.randn(B, sum(DIMS), generator=gen)
        ref_out.backward(grad)
        if optimizer == "sgd" and step == 0:  # the kernel's sparse gradient is EmbeddingBag's dense one
            kernel_w0 = [w.clone() for w in kernel.split_weights()]
            kernel.backward_update(batch, grad)
            for w0, w1, bag in zip(kernel_w0, kernel.split_weights(), bags):
                torch.testing.assert_close((w0 - w1) / LR, bag.weight.grad, rtol=1e-4, atol=1e-5)
        else:
            kernel.backward_update(batch, grad)
        ref_opt.step(bags, masks)
        for t, (w, bag) in enumerate(zip(kernel.split_weights(), bags)):
            torch.testing.assert_close(w, bag.weight.detach(), rtol=1e-5, atol=1e-6, msg=f"table {t}, step {step}")
    for t in range(len(ROWS)):
        state = kernel.optimizer_state(t)
        if optimizer == "rowwise_adagrad":
            torch.testing.assert_close(state["sum"], ref_opt.sum[t], rtol=1e-5, atol=1e-7)
        if optimizer == "adam":
            torch.testing.assert_close(state["exp_avg"], ref_opt.m[t], rtol=1e-5, atol=1e-7)
            torch.testing.assert_close(state["exp_avg_sq"], ref_opt.v[t], rtol=1e-5, atol=1e-7)
        # rows never looked up keep their weights and their (zero) optimizer state, bit for bit
        never = ~ever[t]
        assert never.any()
        assert torch.equal(kernel.split_weights()[t][never], before[t][never])
        for name, s in state.items():
            assert torch.all(s[never] == 0), (t, name)
        if t == 4:  # a table with only empty bags: nothing changes
            assert torch.equal(kernel.split_weights()[t], before[t])


def test_fp16_weights_run():
    kernel = TorchTBE(ROWS, DIMS, "fp16", "rowwise_adagrad", LR, device="cpu", seed=1)
    traces = make_traces(ROWS, B, seed=2)
    batch = kernel.prepare(traces)
    before = [w.clone() for w in kernel.split_weights()]
    assert all(w.dtype == torch.float16 for w in before)
    out = kernel.forward(batch)
    assert out.dtype == torch.float32 and out.shape == (B, sum(DIMS))
    torch.testing.assert_close(out, reference_forward(reference_bags(kernel), traces).detach(), rtol=1e-2, atol=1e-2)
    kernel.backward_update(batch, torch.randn(B, sum(DIMS)))
    for w0, w1, m in zip(before, kernel.split_weights(), touched(traces, ROWS)):
        assert w1.dtype == torch.float16 and torch.isfinite(w1.float()).all()
        assert torch.equal(w1[~m], w0[~m])
        assert not torch.equal(w1[m], w0[m])


def test_mixed_dtypes_group_by_dim_and_dtype():
    kernel = TorchTBE([10, 10, 10], [8, 8, 8], ["fp32", "fp16", "fp32"], "sgd", device="cpu")
    assert kernel.num_calls == 2 and "(dim, dtype)" in kernel.label
    traces = make_traces([10, 10, 10], 4, seed=0)
    out = kernel.forward(kernel.prepare(traces))
    torch.testing.assert_close(out, reference_forward(reference_bags(kernel), traces).detach(), rtol=1e-2, atol=1e-2)


def test_prepare_rejects_bad_traces():
    kernel = TorchTBE([10, 10], [4, 4], device="cpu")
    good = (np.array([1, 2]), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"table 1: indices must lie in \[0, 10\)"):
        kernel.prepare([good, (np.array([1, 10]), np.array([0, 1, 2]))])
    with pytest.raises(ValueError, match="table 1: batch 1"):
        kernel.prepare([good, (np.array([1]), np.array([0, 1]))])
    with pytest.raises(ValueError, match="3 traces for 2 tables"):
        kernel.prepare([good, good, good])
    with pytest.raises(ValueError, match="optimizer"):
        TorchTBE([10], [4], optimizer="lamb")


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "sgd"])
def test_matches_fbgemm_cpu_tbe(optimizer):
    pytest.importorskip("fbgemm_gpu")
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    rows, dims, batch = [20, 12, 16], [4, 8, 4], 8
    fb = SplitTableBatchedEmbeddingBagsCodegen(
        [(r, d, EmbeddingLocation.HOST, ComputeDevice.CPU) for r, d in zip(rows, dims)],
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD if optimizer == "rowwise_adagrad" else EmbOptimType.EXACT_SGD,
        learning_rate=LR,
        eps=EPS,
        pooling_mode=PoolingMode.SUM,
    )
    kernel = TorchTBE(rows, dims, "fp32", optimizer, LR, EPS, device="cpu")
    kernel.set_weights([w.detach().clone() for w in fb.split_embedding_weights()])
    initial = [w.detach().clone() for w in fb.split_embedding_weights()]
    traces = make_traces(rows, batch, seed=5)
    idx = torch.from_numpy(np.concatenate([i for i, _ in traces]))
    base = np.cumsum([0] + [len(i) for i, _ in traces])
    off = torch.from_numpy(np.concatenate([o[:-1] + b for (_, o), b in zip(traces, base)] + [[base[-1]]]).astype(np.int64))
    for step in range(2):
        out_fb = fb(idx, off)
        prepared = kernel.prepare(traces)
        out = kernel.forward(prepared)
        torch.testing.assert_close(out, out_fb.detach(), rtol=1e-5 if step else 0, atol=1e-6 if step else 0)
        grad = torch.randn(batch, sum(dims), generator=torch.Generator().manual_seed(step))
        out_fb.backward(grad)
        kernel.backward_update(prepared, grad)
        for w, w_fb in zip(kernel.split_weights(), fb.split_embedding_weights()):
            torch.testing.assert_close(w, w_fb.detach(), rtol=1e-5, atol=1e-6)
    assert not all(torch.equal(w0, w) for w0, w in zip(initial, kernel.split_weights()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_kernel_matches_cpu_kernel():
    traces = make_traces(ROWS, B, seed=4)
    cpu = TorchTBE(ROWS, DIMS, "fp32", "adam", LR, device="cpu", seed=2)
    gpu = TorchTBE(ROWS, DIMS, "fp32", "adam", LR, device="cuda", seed=2)
    gpu.set_weights([w for w in cpu.split_weights()])
    grad = torch.randn(B, sum(DIMS))
    pc, pg = cpu.prepare(traces), gpu.prepare(traces)
    torch.testing.assert_close(gpu.forward(pg).cpu(), cpu.forward(pc), rtol=1e-5, atol=1e-6)
    cpu.backward_update(pc, grad)
    gpu.backward_update(pg, grad.cuda())
    for wc, wg in zip(cpu.split_weights(), gpu.split_weights()):
        torch.testing.assert_close(wg.cpu(), wc, rtol=1e-5, atol=1e-6)
