"""`--backend cpu`: each device's shards as ONE fbgemm SplitTableBatchedEmbeddingBagsCodegen on the CPU.

The kernel is the one TorchRec trains with (HOST location, CPU compute), with the workload's optimizer fused into
backward and the table dtype for the weights. Its inputs are index traces generated from the tables' statistics
(shardopt.traces), concatenated table-major as fbgemm expects. Forward and backward (gradient + optimizer update)
are timed separately per repeat, after warm-ups, on one thread by default. fbgemm's CPU build has no fused Adam:
with the adam optimizer the torch kernel of shardopt.backends.torch_tbe runs instead, and the label says so.
"""

from __future__ import annotations

import platform
import time
from functools import lru_cache

import numpy as np

from shardopt.backends.base import BackendUnavailable, KernelTiming, TimingBackend, TimingSettings, summarise
from shardopt.ir import Dtype, Instance, Optimizer, Shard
from shardopt.traces import shard_trace

FBGEMM_KERNEL = "fbgemm SplitTableBatchedEmbeddingBagsCodegen (CPU, fbgemm-gpu-cpu)"
LEARNING_RATE = 0.01
EPS = 1e-8


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fbgemm_available() -> str | None:
    """None when fbgemm's CPU TBE imports; otherwise why not."""
    try:
        import fbgemm_gpu  # noqa: F401
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen  # noqa: F401
    except Exception as exc:  # fbgemm raises OSError / ImportError / RuntimeError for a wrong torch build
        return f"fbgemm-gpu-cpu does not load ({exc.__class__.__name__}: {str(exc).splitlines()[0][:160]}); install it with `pip install fbgemm-gpu-cpu==1.8.0` (the `cpu` extra)"
    return None


def fused_inputs(instance: Instance, shards: list[Shard], batch_size: int, seed: int, max_rows: int | None = None):
    """Per-shard traces concatenated table-major: (indices, offsets) as fbgemm wants them, plus each shard's rows.

    With `max_rows`, a shard taller than that keeps `max_rows` rows and its indices are folded onto them (index
    mod max_rows): a CPU cannot hold a production table, and the label of the result says the rows were capped."""
    index = instance.table_index()
    all_idx, all_off, heights = [], [], []
    base = 0
    for s in shards:
        t = instance.tables[index[s.table]]
        idx, off = shard_trace(t, s, batch_size, seed)
        height = s.height(t)
        if max_rows is not None and height > max_rows:
            idx = idx % max_rows
            height = max_rows
        all_idx.append(idx)
        all_off.append(off[:-1] + base)
        base += len(idx)
        heights.append(height)
    indices = np.concatenate(all_idx) if all_idx else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate(all_off + [np.array([base])]).astype(np.int64)
    return indices.astype(np.int64), offsets, heights


class CpuBackend(TimingBackend):
    name = "cpu"

    def kernel_label(self, instance: Instance) -> str:
        if instance.workload.optimizer is Optimizer.adam:
            return "torch embedding_bag kernel (shardopt.backends.torch_tbe) on CPU: fbgemm's CPU TBE has no fused adam"
        return FBGEMM_KERNEL

    def hardware_label(self) -> str:
        return cpu_model()

    def time_shards(self, instance: Instance, shards: list[Shard], settings: TimingSettings) -> KernelTiming:
        import torch

        if not shards:
            raise ValueError("time_shards: no shards to time")
        torch.set_num_threads(settings.threads)
        if instance.workload.optimizer is Optimizer.adam:
            from shardopt.backends.cuda import time_torch_tbe

            return time_torch_tbe(instance, shards, settings, torch.device("cpu"))
        why = fbgemm_available()
        if why:
            raise BackendUnavailable(why)
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen

        index = instance.table_index()
        indices, offsets, heights = fused_inputs(instance, shards, settings.batch_size, settings.seed, settings.max_rows)
        widths = [s.width(instance.tables[index[s.table]]) for s in shards]
        dtypes = {instance.table_dtype(instance.tables[index[s.table]]) for s in shards}
        weights = SparseType.FP16 if dtypes == {Dtype.fp16} else SparseType.FP32  # one TBE has one weight dtype
        optimizer = EmbOptimType.EXACT_SGD if instance.workload.optimizer is Optimizer.sgd else EmbOptimType.EXACT_ROWWISE_ADAGRAD
        torch.manual_seed(settings.seed)
        emb = SplitTableBatchedEmbeddingBagsCodegen(
            [(h, w, EmbeddingLocation.HOST, ComputeDevice.CPU) for h, w in zip(heights, widths)],
            optimizer=optimizer,
            learning_rate=LEARNING_RATE,
            eps=EPS,
            weights_precision=weights,
            pooling_mode=PoolingMode.SUM,
        )
        idx_t = torch.from_numpy(indices)
        off_t = torch.from_numpy(offsets)
        grad = torch.randn(settings.batch_size, sum(widths), generator=torch.Generator().manual_seed(settings.seed))
        fwd_s, bwd_s = [], []
        for i in range(settings.warmup + settings.repeats):
            t0 = time.perf_counter()
            out = emb(idx_t, off_t)
            t1 = time.perf_counter()
            out.backward(grad)
            t2 = time.perf_counter()
            if i >= settings.warmup:
                fwd_s.append(t1 - t0)
                bwd_s.append(t2 - t1)
        label = FBGEMM_KERNEL + (f", rows capped at {settings.max_rows}" if settings.max_rows and max(s.height(instance.tables[index[s.table]]) for s in shards) > settings.max_rows else "")
        if len(dtypes) > 1:
            label += ", mixed dtypes timed as fp32"
        return summarise(fwd_s, bwd_s, label, self.hardware_label(), settings.batch_size)
