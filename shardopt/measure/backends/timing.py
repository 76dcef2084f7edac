"""Device-agnostic kernel timing: the fused embedding kernels (fbgemm's TBE, the torch kernel) behind one
prepare / forward / backward_update interface, their inputs from the shards' index traces, and the timing loop.

`time_kernel`: the traces are prepared once, untimed; then ``warmup`` forward + backward passes, then ``repeats``
timed forward passes and backward passes (gradient + fused optimizer update; backward gets a fixed random output
gradient). On a GPU each pass is timed with CUDA events and the L2 cache is flushed before each timed pass by writing
a device buffer twice the GPU's L2 size (256 MB when the size is unknown), so that every pass starts cold, as it
does in training where other layers run in between. On the CPU the same loop uses ``time.perf_counter`` and no
flush, on ``settings.threads`` threads. The result is `summarise`'s median and IQR. The cpu and cuda backends and
the torchrun entry point (shardopt.measure.backends.cuda_dist) all time through here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from shardopt.core.fingerprint import cpu_fingerprint
from shardopt.core.ir import Dtype, Instance, Optimizer, Shard
from shardopt.core.traces import shard_trace
from shardopt.measure.backends.base import KernelTiming, TimingSettings, summarise
from shardopt.measure.backends.dense_replicas import DenseReplicas, GroupBatch, KernelGroup, local_batch

LEARNING_RATE = 0.01
EPS = 1e-8
L2_FALLBACK_BYTES = 256 * 1024**2
FBGEMM_KERNEL = "fbgemm SplitTableBatchedEmbeddingBagsCodegen (CUDA, EmbeddingLocation.DEVICE)"
FBGEMM_CPU_KERNEL = "fbgemm SplitTableBatchedEmbeddingBagsCodegen (CPU, EmbeddingLocation.HOST)"


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU as measurements must name it. A VM's "model name" can be as vague as "AMD EPYC", which two CPUs a
    generation apart share (measured: the same samples timed 1.9x faster on family 26 than the day before), so the
    family and model numbers are added where /proc/cpuinfo has them (shardopt.core.fingerprint): timings from
    different CPUs never look alike."""
    fp = cpu_fingerprint()
    if fp.family is not None and fp.model is not None:
        return f"{fp.name} (family {fp.family}, model {fp.model})"
    return fp.name


def device_name(device: Any) -> str:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return cpu_name()


# ---------------------------------------------------------------------------------------------------------------
# fbgemm's TBE behind the same interface as TorchTBE (prepare / forward / backward_update)


def _fbgemm_module(rows, dims, dtype: Dtype, optimizer: Optimizer, lr: float, eps: float, device):
    """fbgemm's training TBE: DEVICE / CUDA on a GPU, HOST / CPU on the CPU (where fbgemm has no fused adam)."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    optim = {
        Optimizer.sgd: EmbOptimType.EXACT_SGD,
        Optimizer.rowwise_adagrad: EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        Optimizer.adam: EmbOptimType.ADAM,
    }[optimizer]
    on_gpu = torch.device(device).type == "cuda"
    location, compute = (EmbeddingLocation.DEVICE, ComputeDevice.CUDA) if on_gpu else (EmbeddingLocation.HOST, ComputeDevice.CPU)
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(int(r), int(d), location, compute) for r, d in zip(rows, dims)],
        optimizer=optim,
        learning_rate=lr,
        eps=eps,
        weights_precision=SparseType.FP16 if dtype is Dtype.fp16 else SparseType.FP32,
        output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.SUM,
        device=torch.device(device) if on_gpu else None,
    )


@dataclass
class FbgemmBatch:
    batch_size: int
    indices: Any  # torch int64, table-major concatenation
    offsets: Any  # torch int64, T * B + 1


class FbgemmTBE:
    """fbgemm's training TBE with TorchTBE's interface: on a GPU (the cuda backend) or, for the tests, on the CPU.
    One module has one weight dtype: tables of mixed dtypes run as fp32 (the label says so). `forward` keeps its
    output's autograd graph; `backward_update` runs fbgemm's fused backward + optimizer on it."""

    def __init__(self, rows: Sequence[int], dims: Sequence[int], dtypes: Sequence[Dtype], optimizer: Optimizer,
                 learning_rate: float = LEARNING_RATE, eps: float = EPS, *, device: Any = "cuda", seed: int = 0):
        import torch

        self.rows, self.dims = list(rows), list(dims)
        self.device = torch.device(device)
        kinds = set(dtypes)
        self.dtype = Dtype.fp16 if kinds == {Dtype.fp16} else Dtype.fp32
        self.mixed = len(kinds) > 1
        self.optimizer = optimizer
        torch.manual_seed(seed)
        self.module = _fbgemm_module(self.rows, self.dims, self.dtype, optimizer, learning_rate, eps, self.device)
        self._out = None

    @property
    def label(self) -> str:
        base = FBGEMM_KERNEL if self.device.type == "cuda" else FBGEMM_CPU_KERNEL
        return base + (", mixed dtypes run as fp32" if self.mixed else "")

    @property
    def total_dim(self) -> int:
        return sum(self.dims)

    def split_weights(self) -> list[Any]:
        return list(self.module.split_embedding_weights())

    def prepare(self, traces: Sequence[tuple[Any, Any]]) -> FbgemmBatch:
        import torch

        idx, offs, base = [], [], 0
        batch = len(traces[0][1]) - 1
        for t, (i, o) in enumerate(traces):
            i, o = np.asarray(i, dtype=np.int64), np.asarray(o, dtype=np.int64)
            if len(o) - 1 != batch:
                raise ValueError(f"table {t}: batch {len(o) - 1}, other tables have batch {batch}")
            idx.append(i)
            offs.append(o[:-1] + base)
            base += len(i)
        offsets = np.concatenate(offs + [np.array([base], dtype=np.int64)])
        return FbgemmBatch(
            batch_size=batch,
            indices=torch.from_numpy(np.concatenate(idx)).to(self.device),
            offsets=torch.from_numpy(offsets).to(self.device),
        )

    def forward(self, batch: FbgemmBatch):
        self._out = self.module(indices=batch.indices, offsets=batch.offsets)
        return self._out

    def backward_update(self, batch: FbgemmBatch, grad_output) -> None:
        """fbgemm's fused backward (gradient + optimizer update) of the last forward's output."""
        if self._out is None:
            raise RuntimeError("FbgemmTBE.backward_update needs a forward of the same batch first")
        out, self._out = self._out, None
        out.backward(grad_output)


# ---------------------------------------------------------------------------------------------------------------
# timing


class L2Flush:
    """Writes a device buffer larger than the L2 cache, so that the next pass starts with a cold cache."""

    def __init__(self, device: Any, factor: int = 2):
        import torch

        dev = torch.device(device)
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0
        self.nbytes = factor * int(l2) if l2 > 0 else L2_FALLBACK_BYTES
        self.buffer = torch.empty(self.nbytes, dtype=torch.uint8, device=dev)

    def __call__(self) -> None:
        self.buffer.zero_()


def make_timer(device: Any) -> Callable[[Callable[[], Any]], float]:
    """A function that runs a callable and returns its time in seconds: CUDA events on a GPU (on the current
    stream, waiting for the end event), time.perf_counter on the CPU."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":

        def run_cuda(fn: Callable[[], Any]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        return run_cuda

    def run_cpu(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return run_cpu


class PreparedKernel:
    """One device's fused kernel, built and fed once, ready to be timed a pass at a time: the unit the interleaved
    judge (shardopt.measure.interleaved) cycles through, so that the repeats of every device and every plan are
    spread over the same stretch of time. `run_once` times one forward and one backward (+ fused optimizer) pass."""

    def __init__(self, kernel: Any, batch: Any, grad_output: Any, device: Any, *, label: str, hardware: str,
                 batch_size: int, threads: int = 1, flush_l2: bool = True):
        import torch

        self.kernel, self.batch, self.grad_output = kernel, batch, grad_output
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.label, self.hardware, self.batch_size, self.threads = label, hardware, batch_size, threads
        self._timed = make_timer(self.device)
        self._flush = L2Flush(self.device) if self.cuda and flush_l2 else None

    def _threads(self) -> Any:
        return _torch_threads(self.threads)

    def warm(self, passes: int) -> None:
        import torch

        with self._threads(), (torch.cuda.device(self.device) if self.cuda else _null()):
            for _ in range(passes):
                self.kernel.forward(self.batch)
                self.kernel.backward_update(self.batch, self.grad_output)
            if self.cuda:
                torch.cuda.synchronize(self.device)

    def run_once(self) -> tuple[float, float]:
        """(forward seconds, backward seconds) of one pass; the L2 cache flushed before each on a GPU."""
        import torch

        with self._threads(), (torch.cuda.device(self.device) if self.cuda else _null()):
            if self._flush is not None:
                self._flush()
            fwd = self._timed(lambda: self.kernel.forward(self.batch))
            if self._flush is not None:
                self._flush()
            bwd = self._timed(lambda: self.kernel.backward_update(self.batch, self.grad_output))
        return fwd, bwd


class _torch_threads:
    """torch's intra-op thread count set for a block and restored after it."""

    def __init__(self, threads: int):
        self.threads = threads

    def __enter__(self) -> None:
        import torch

        self.before = torch.get_num_threads()
        if self.before != self.threads:
            torch.set_num_threads(self.threads)

    def __exit__(self, *exc: Any) -> bool:
        import torch

        if torch.get_num_threads() != self.before:
            torch.set_num_threads(self.before)
        return False


def time_kernel(kernel: Any, batch: Any, grad_output: Any, settings: TimingSettings, device: Any, *,
                label: str, hardware: str, flush_l2: bool = True) -> KernelTiming:
    """Warm-ups, then `settings.repeats` timed forward and backward passes of `kernel` (TorchTBE / FbgemmTBE)."""
    unit = PreparedKernel(kernel, batch, grad_output, device, label=label, hardware=hardware,
                          batch_size=settings.batch_size, threads=settings.threads, flush_l2=flush_l2)
    return time_prepared(unit, settings)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@dataclass
class ShardInputs:
    """What one device's kernel is built from: each shard's rows x cols, dtype and index trace."""

    rows: list[int]
    dims: list[int]
    dtypes: list[Dtype]
    traces: list[tuple[np.ndarray, np.ndarray]]
    capped: bool  # some shard's rows were capped at max_rows (its indices folded onto them)


def shard_inputs(instance: Instance, shards: Sequence[Shard], batch_size: int, seed: int,
                 max_rows: int | None = None) -> ShardInputs:
    """Traces and shapes of `shards` at `batch_size`. With `max_rows`, a taller shard keeps `max_rows` rows and its
    indices are folded onto them (index mod max_rows), as the cpu backend does."""
    index = instance.table_index()
    rows, dims, dtypes, traces, capped = [], [], [], [], False
    for s in shards:
        if s.table not in index:
            raise ValueError(f"shard of unknown table {s.table!r}")
        t = instance.tables[index[s.table]]
        idx, off = shard_trace(t, s, batch_size, seed)
        height = s.height(t)
        if max_rows is not None and height > max_rows:
            idx, height, capped = idx % max_rows, max_rows, True
        rows.append(height)
        dims.append(s.width(t))
        dtypes.append(instance.table_dtype(t))
        traces.append((idx, off))
    return ShardInputs(rows, dims, dtypes, traces, capped)


def replica_inputs(instance: Instance, shards: Sequence[Shard], batch_size: int, seed: int, max_rows: int | None = None) -> ShardInputs:
    """Each replica's table at full size (as `shard_inputs` builds it) and only the bags of the device's local batch:
    bags [d*b, (d+1)*b) of the table's trace at the global batch (b = local_batch), so the replicas of one table on
    all devices split that trace between them."""
    for s in shards:
        if not s.replicated:
            raise ValueError(f"replica_inputs: shard of table {s.table!r} on device {s.device} is not a replica")
    whole = shard_inputs(instance, shards, batch_size, seed, max_rows)
    b = local_batch(batch_size, instance.topology.num_devices)
    traces = []
    for s, (idx, off) in zip(shards, whole.traces):
        first = min(s.device * b, batch_size - b)
        o = np.asarray(off[first:first + b + 1], dtype=np.int64)
        traces.append((np.asarray(idx[o[0]:o[-1]], dtype=np.int64), o - o[0]))
    return ShardInputs(whole.rows, whole.dims, whole.dtypes, traces, whole.capped)


def _grad_output(batch_size: int, total_dim: int, seed: int, device: Any):
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(batch_size, total_dim, generator=gen).to(device)


def prepare_kernel(instance: Instance, shards: Sequence[Shard], settings: TimingSettings, device: Any = "cpu", *,
                   use_fbgemm: bool, flush_l2: bool = True, note: str | None = None) -> PreparedKernel:
    """`shards` built as one fused kernel on `device` (fbgemm's TBE, or the torch kernel) with its inputs: the traces
    at `settings.batch_size` and a fixed random output gradient. `note` is appended to the label (why this kernel)."""
    import torch

    if not shards:
        raise ValueError("prepare_kernel: no shards to time")
    dev = torch.device(device)
    sharded = [s for s in shards if not s.replicated]
    replicas = [s for s in shards if s.replicated]
    parts: list[tuple[Any, Any, Any]] = []  # (kernel, batch, grad_output)
    capped = False
    if sharded:
        inputs = shard_inputs(instance, sharded, settings.batch_size, settings.seed, settings.max_rows)
        kernel = build_kernel(inputs, instance.workload.optimizer, dev, settings.seed, use_fbgemm)
        parts.append((kernel, kernel.prepare(inputs.traces), _grad_output(settings.batch_size, kernel.total_dim, settings.seed, dev)))
        capped = inputs.capped
    if replicas:  # data-parallel replicas: TorchRec's dense kernel on the device's share of the batch
        rep = replica_inputs(instance, replicas, settings.batch_size, settings.seed, settings.max_rows)
        dense = DenseReplicas(rep.rows, rep.dims, rep.dtypes, instance.workload.optimizer, LEARNING_RATE, EPS, device=dev, seed=settings.seed)
        b = local_batch(settings.batch_size, instance.topology.num_devices)
        parts.append((dense, dense.prepare(rep.traces), _grad_output(b, dense.total_dim, settings.seed + 1, dev)))
        capped = capped or rep.capped
    if len(parts) == 1:
        kernel, batch, grad = parts[0]
    else:
        kernel = KernelGroup([p[0] for p in parts])
        batch, grad = GroupBatch([p[1] for p in parts]), tuple(p[2] for p in parts)
    suffix = f", rows capped at {settings.max_rows}" if capped else ""
    label = kernel.label + suffix + (f"; {note}" if note else "")
    return PreparedKernel(kernel, batch, grad, dev, label=label, hardware=device_name(dev),
                          batch_size=settings.batch_size, threads=settings.threads, flush_l2=flush_l2)


def time_prepared(unit: PreparedKernel, settings: TimingSettings) -> KernelTiming:
    unit.warm(settings.warmup)
    fwd_s, bwd_s = [], []
    for _ in range(settings.repeats):
        f, b = unit.run_once()
        fwd_s.append(f)
        bwd_s.append(b)
    return summarise(fwd_s, bwd_s, unit.label, unit.hardware, settings.batch_size)


def time_torch_tbe(instance: Instance, shards: Sequence[Shard], settings: TimingSettings, device: Any = "cpu", *,
                   flush_l2: bool = True, note: str | None = None) -> KernelTiming:
    """Time `shards` as one TorchTBE on `device` (cuda or cpu) with the workload's optimizer: the cuda backend's
    path without fbgemm, and runnable on the CPU. `note` is appended to the label (why this kernel ran)."""
    if not shards:
        raise ValueError("time_torch_tbe: no shards to time")
    unit = prepare_kernel(instance, shards, settings, device, use_fbgemm=False, flush_l2=flush_l2, note=note)
    return time_prepared(unit, settings)


def time_fbgemm_tbe(instance: Instance, shards: Sequence[Shard], settings: TimingSettings, device: Any = "cuda", *,
                    flush_l2: bool = True) -> KernelTiming:
    """Time `shards` as one fbgemm TBE on `device` (CUDA; HOST / CPU on the CPU)."""
    if not shards:
        raise ValueError("time_fbgemm_tbe: no shards to time")
    unit = prepare_kernel(instance, shards, settings, device, use_fbgemm=True, flush_l2=flush_l2)
    return time_prepared(unit, settings)


def build_kernel(inputs: ShardInputs, optimizer: Optimizer, device: Any, seed: int, use_fbgemm: bool) -> Any:
    """The kernel a device's shards run as (for cuda_dist): FbgemmTBE or TorchTBE."""
    if use_fbgemm:
        return FbgemmTBE(inputs.rows, inputs.dims, inputs.dtypes, optimizer, device=device, seed=seed)
    from shardopt.measure.backends.torch_tbe import TorchTBE

    return TorchTBE(inputs.rows, inputs.dims, inputs.dtypes, optimizer, LEARNING_RATE, EPS, device=device, seed=seed)
