"""`--backend cuda`: each device's shards timed as ONE fused embedding kernel on a GPU.

Kernel: fbgemm's ``SplitTableBatchedEmbeddingBagsCodegen`` (EmbeddingLocation.DEVICE, ComputeDevice.CUDA, the
workload's optimizer fused into backward, sum pooling) when fbgemm-gpu with CUDA kernels is installed; otherwise the
torch kernel of the same semantics in shardopt.measure.backends.torch_tbe (one ``embedding_bag`` call per distinct dim),
and every result's label says which ran.

Timing: shardopt.measure.backends.timing (CUDA events, the L2 flushed before every timed pass, median and IQR of repeats).

With several GPUs, shardopt.measure.backends.cuda_dist (a torchrun entry point) times every device at once with a real
NCCL all-to-all; this backend times one device's shards at a time and the evaluator models the all-to-all.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from shardopt.core.fingerprint import Fingerprint
from shardopt.core.ir import Dtype, Instance, Optimizer, Shard
from shardopt.measure.backends.base import BackendUnavailable, KernelTiming, TimingBackend, TimingSettings
from shardopt.measure.backends.timing import (
    EPS,
    FBGEMM_KERNEL,
    LEARNING_RATE,
    PreparedKernel,
    _fbgemm_module,
    device_name,
    prepare_kernel,
    time_prepared,
)

TORCH_FALLBACK_NOTE = "fbgemm-gpu with CUDA not installed"
NO_CUDA = (
    "no CUDA device is visible to torch (torch.cuda.is_available() is False); run on a machine with an NVIDIA GPU "
    "and a CUDA build of torch, or judge with --backend sim / cpu"
)


# ---------------------------------------------------------------------------------------------------------------
# what can run here


def cuda_unavailable() -> str | None:
    """None when torch sees a CUDA device; otherwise why not."""
    try:
        import torch
    except Exception as exc:  # pragma: no cover - torch is a dependency
        return f"torch does not import ({exc.__class__.__name__}: {exc})"
    if not torch.cuda.is_available():
        return NO_CUDA
    return None


@cache
def fbgemm_cuda_unavailable(device: str = "cuda") -> str | None:
    """None when fbgemm-gpu's training TBE runs on `device` (a one-row probe); otherwise why not. Imports fbgemm
    (seconds), so it is asked only once CUDA is known to be there."""
    try:
        import fbgemm_gpu
    except Exception as exc:
        return f"fbgemm-gpu is not installed ({exc.__class__.__name__})"
    variant = getattr(fbgemm_gpu, "__variant__", None)
    if variant == "cpu":
        return "fbgemm-gpu-cpu is installed (it has no CUDA kernels)"
    try:
        import torch

        module = _fbgemm_module([4], [4], Dtype.fp32, Optimizer.sgd, LEARNING_RATE, EPS, torch.device(device))
        module(torch.zeros(1, dtype=torch.int64, device=device), torch.tensor([0, 1], dtype=torch.int64, device=device))
        torch.cuda.synchronize(device)
    except Exception as exc:
        return f"fbgemm-gpu's CUDA TBE does not run ({exc.__class__.__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})"
    return None


# ---------------------------------------------------------------------------------------------------------------
# the backend


class CudaBackend(TimingBackend):
    """Times one device's shards at a time on one GPU (`device`, default the current one).

    kernel: "auto" (fbgemm where it runs, else the torch kernel), "fbgemm" (BackendUnavailable without it) or
    "torch". flush_l2: flush the L2 cache before every timed pass."""

    name = "cuda"

    def __init__(self, device: Any = None, kernel: str = "auto", flush_l2: bool = True):
        if kernel not in ("auto", "fbgemm", "torch"):
            raise ValueError(f"kernel: {kernel!r} is not one of auto, fbgemm, torch")
        self._device_arg = device
        self.kernel = kernel
        self.flush_l2 = flush_l2

    def device(self):
        """The torch device timed on; BackendUnavailable without CUDA."""
        why = cuda_unavailable()
        if why:
            raise BackendUnavailable(why)
        import torch

        if self._device_arg is None:
            return torch.device("cuda", torch.cuda.current_device())
        dev = torch.device(self._device_arg)
        if dev.type != "cuda":
            raise BackendUnavailable(f"device {self._device_arg!r} is not a CUDA device")
        return dev

    def uses_fbgemm(self) -> bool:
        dev = self.device()
        if self.kernel == "torch":
            return False
        why = fbgemm_cuda_unavailable(str(dev))
        if why and self.kernel == "fbgemm":
            raise BackendUnavailable(why + "; install fbgemm-gpu matching this torch and CUDA (the `gpu` extra)")
        return why is None

    def kernel_label(self, instance: Instance) -> str:
        if self.uses_fbgemm():
            return FBGEMM_KERNEL
        return f"{self._torch_kind()}"

    def _torch_kind(self) -> str:
        from shardopt.measure.backends.torch_tbe import TORCH_KERNEL

        note = TORCH_FALLBACK_NOTE if self.kernel == "auto" else "torch kernel requested"
        return f"{TORCH_KERNEL}, one fused call per distinct dim; {note}"

    def hardware_label(self) -> str:
        return device_name(self.device())

    def prepare(self, instance: Instance, shards: list[Shard], settings: TimingSettings) -> PreparedKernel:
        dev = self.device()
        if self.uses_fbgemm():
            return prepare_kernel(instance, shards, settings, dev, use_fbgemm=True, flush_l2=self.flush_l2)
        note = TORCH_FALLBACK_NOTE if self.kernel == "auto" else "torch kernel requested"
        return prepare_kernel(instance, shards, settings, dev, use_fbgemm=False, flush_l2=self.flush_l2, note=note)

    def time_shards(self, instance: Instance, shards: list[Shard], settings: TimingSettings) -> KernelTiming:
        return time_prepared(self.prepare(instance, shards, settings), settings)


def gpu_fingerprint(device: Any = None) -> Fingerprint:
    """The GPU a cuda measurement runs on (shardopt.core.fingerprint): its name, memory, the driver (from
    /proc/driver/nvidia/version where the driver exposes it) and torch's CUDA version. BackendUnavailable without a
    GPU."""
    import re

    import torch

    why = cuda_unavailable()
    if why is not None:
        raise BackendUnavailable(why)
    dev = torch.device(device if device is not None else "cuda")
    props = torch.cuda.get_device_properties(dev)
    driver = None
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", f.read())
            driver = m.group(1) if m else None
    except OSError:
        pass
    return Fingerprint(kind="gpu", name=torch.cuda.get_device_name(dev), memory_bytes=int(props.total_memory),
                       driver=driver, cuda=torch.version.cuda)
