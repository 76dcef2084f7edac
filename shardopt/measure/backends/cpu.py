"""`--backend cpu`: each device's shards as ONE fbgemm SplitTableBatchedEmbeddingBagsCodegen on the CPU.

The kernel is the one TorchRec trains with (HOST location, CPU compute), with the workload's optimizer fused into
backward and the table dtype for the weights. Its inputs are index traces generated from the tables' statistics
(shardopt.core.traces), concatenated table-major as fbgemm expects. Forward and backward (gradient + optimizer update)
are timed separately per repeat, after warm-ups, on one thread by default (shardopt.measure.backends.timing). fbgemm's CPU
build has no fused Adam: with the adam optimizer the torch kernel of shardopt.measure.backends.torch_tbe runs instead, and
every result's label says so.
"""

from __future__ import annotations

from shardopt.core.ir import Instance, Optimizer, Shard
from shardopt.measure.backends.base import BackendUnavailable, KernelTiming, TimingBackend, TimingSettings
from shardopt.measure.backends.timing import FBGEMM_CPU_KERNEL, PreparedKernel, cpu_name, prepare_kernel, time_prepared

NO_ADAM = "fbgemm's CPU TBE has no fused adam"


def fbgemm_available() -> str | None:
    """None when fbgemm's CPU TBE imports; otherwise why not."""
    try:
        import fbgemm_gpu  # noqa: F401
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen  # noqa: F401
    except Exception as exc:  # fbgemm raises OSError / ImportError / RuntimeError for a wrong torch build
        return f"fbgemm-gpu-cpu does not load ({exc.__class__.__name__}: {str(exc).splitlines()[0][:160]}); install it with `pip install fbgemm-gpu-cpu==1.8.0` (the `cpu` extra)"
    return None


class CpuBackend(TimingBackend):
    name = "cpu"

    def kernel_label(self, instance: Instance) -> str:
        if instance.workload.optimizer is Optimizer.adam:
            return f"torch embedding_bag kernel (shardopt.measure.backends.torch_tbe) on CPU; {NO_ADAM}"
        return FBGEMM_CPU_KERNEL

    def hardware_label(self) -> str:
        return cpu_name()

    def prepare(self, instance: Instance, shards: list[Shard], settings: TimingSettings) -> PreparedKernel:
        if instance.workload.optimizer is Optimizer.adam:
            return prepare_kernel(instance, shards, settings, "cpu", use_fbgemm=False, note=NO_ADAM)
        why = fbgemm_available()
        if why:
            raise BackendUnavailable(why)
        return prepare_kernel(instance, shards, settings, "cpu", use_fbgemm=True)

    def time_shards(self, instance: Instance, shards: list[Shard], settings: TimingSettings) -> KernelTiming:
        return time_prepared(self.prepare(instance, shards, settings), settings)
