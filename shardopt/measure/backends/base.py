"""The measured-backend interface: time one device's shards, forward and backward, as one fused kernel.

A backend answers one question — how long do these shards take on this hardware, forward and backward (with the
fused optimizer update), at this batch — so that `shardopt.measure.evaluate` can build the four per-device columns from
it (compute measured, all-to-all measured where it can be, modelled otherwise and labelled so) and the measurement
cache can key on exactly what was timed.
"""

from __future__ import annotations

import re
import statistics
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

from shardopt.core.ir import Instance, Shard


def kernel_label(label: str) -> str:
    """A kernel label without its per-device call count: 'torch embedding_bag, one fused call per distinct dim
    (4 calls), ...' and the same with (5 calls) are one kernel to a reader of a judge line or a model card."""
    return re.sub(r" \(\d+ calls?\)", "", label)


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (no fbgemm, no GPU, ...); the message says what is missing and how to get it."""


@dataclass(frozen=True)
class TimingSettings:
    batch_size: int  # the batch actually timed (may be scaled down from the workload's)
    repeats: int = 10
    warmup: int = 3
    seed: int = 0  # index-trace seed
    threads: int = 1  # CPU threads (timing on this project's machines uses one)
    max_rows: int | None = None  # cap on a shard's rows (indices folded onto them): CPUs cannot hold production tables
    method: str = "sequential"  # how repeats were taken: "sequential", or "interleaved:<stop rule>" (the judge's)

    def key(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KernelTiming:
    """Median forward and backward time of one device's fused kernel, with the spread over repeats."""

    fwd_ms: float
    bwd_ms: float
    fwd_iqr_ms: float  # interquartile range over the repeats
    bwd_iqr_ms: float
    repeats: int
    kernel: str  # what ran, e.g. "fbgemm SplitTableBatchedEmbeddingBagsCodegen (CPU)"
    hardware: str  # where it ran, e.g. the CPU model or GPU name
    batch_size: int
    samples_fwd_ms: tuple[float, ...] = field(default=(), repr=False)
    samples_bwd_ms: tuple[float, ...] = field(default=(), repr=False)
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_fwd_ms"] = list(self.samples_fwd_ms)
        d["samples_bwd_ms"] = list(self.samples_bwd_ms)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelTiming:
        d = dict(d)
        d["samples_fwd_ms"] = tuple(d.get("samples_fwd_ms", ()))
        d["samples_bwd_ms"] = tuple(d.get("samples_bwd_ms", ()))
        return cls(**d)


def summarise(fwd_s: list[float], bwd_s: list[float], kernel: str, hardware: str, batch_size: int) -> KernelTiming:
    """Median and interquartile range (ms) of repeated timings given in seconds."""

    def iqr(xs: list[float]) -> float:
        if len(xs) < 2:
            return 0.0
        q = statistics.quantiles(xs, n=4, method="inclusive")
        return q[2] - q[0]

    f = [x * 1e3 for x in fwd_s]
    b = [x * 1e3 for x in bwd_s]
    return KernelTiming(
        fwd_ms=statistics.median(f),
        bwd_ms=statistics.median(b),
        fwd_iqr_ms=iqr(f),
        bwd_iqr_ms=iqr(b),
        repeats=len(f),
        kernel=kernel,
        hardware=hardware,
        batch_size=batch_size,
        samples_fwd_ms=tuple(f),
        samples_bwd_ms=tuple(b),
    )


class TimingBackend(ABC):
    name: str = "backend"

    @abstractmethod
    def kernel_label(self, instance: Instance) -> str:
        """What kernel this backend runs for `instance` (part of the cache key and of every result)."""

    @abstractmethod
    def hardware_label(self) -> str:
        """Where it runs (part of the cache key)."""

    @abstractmethod
    def time_shards(self, instance: Instance, shards: list[Shard], settings: TimingSettings) -> KernelTiming:
        """Forward and backward (with the optimizer update) of `shards` as one fused kernel. Raises
        BackendUnavailable when it cannot run here."""

    def prepare(self, instance: Instance, shards: list[Shard], settings: TimingSettings) -> Any:
        """`shards` built as one kernel with its inputs, ready to be timed a pass at a time (a
        shardopt.measure.backends.timing.PreparedKernel): what the interleaved judge cycles through. Raises
        BackendUnavailable when it cannot run here."""
        raise BackendUnavailable(f"backend {self.name!r} cannot prepare kernels for interleaved timing")
