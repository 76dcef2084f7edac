"""Hardware fingerprints: which machine a measurement (and a model learned from it) belongs to.

A measured cost model predicts the milliseconds of the machine it was timed on and no other: the same 800 samples
timed 1.9x faster on a Zen 5 EPYC than on the day-before EPYC of the same "model name" (docs/measured.md). A model
card therefore records the fingerprint of its machine, and `--cost-model auto` uses a model only where the fingerprint
matches. For a CPU that is vendor, family and model number (a VM's model name alone can be as vague as "AMD EPYC") and
the core count; for a GPU its name, memory, driver and CUDA version (the name decides: the rest is recorded).

This module reads /proc/cpuinfo and nothing else (the core never imports torch); a GPU's fingerprint is taken by the
cuda backend (shardopt.measure.backends.cuda.gpu_fingerprint) and comes back here as a dict.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

# GPU names -> the hardware profile an instance names for them (the first profile whose name is in the GPU's name)
GPU_PROFILE_NAMES = ("gh200", "h200", "h100", "a100", "v100")


@dataclass(frozen=True)
class Fingerprint:
    """One machine's identity as far as its kernel timings go."""

    kind: str  # "cpu" or "gpu"
    name: str  # CPU model name / GPU name
    vendor: str | None = None  # CPU vendor id (AuthenticAMD, GenuineIntel, ...)
    family: str | None = None  # CPU family number
    model: str | None = None  # CPU model number
    cores: int | None = None  # CPU cores the process sees
    memory_bytes: int | None = None  # GPU memory
    driver: str | None = None  # GPU driver version
    cuda: str | None = None  # CUDA version torch was built with

    def key(self) -> tuple[Any, ...]:
        """What must be equal for two machines' timings to be interchangeable."""
        if self.kind == "gpu":
            return ("gpu", self.name)
        return ("cpu", self.vendor, self.family, self.model, self.name, self.cores)

    def matches(self, other: Fingerprint) -> bool:
        """Same machine kind for timing purposes; a CPU whose family or model is unknown matches nothing."""
        if self.kind != other.kind:
            return False
        if self.kind == "cpu" and (self.family is None or self.model is None):
            return False
        return self.key() == other.key()

    def describe(self) -> str:
        if self.kind == "gpu":
            mem = f", {self.memory_bytes / 2**30:.0f} GiB" if self.memory_bytes else ""
            extra = "".join(f", {k} {v}" for k, v in (("driver", self.driver), ("CUDA", self.cuda)) if v)
            return f"{self.name}{mem}{extra}"
        fam = f" family {self.family} model {self.model}" if self.family is not None and self.model is not None else " (family and model unknown)"
        cores = f", {self.cores} cores" if self.cores else ""
        return f"{self.name}{fam}{cores}"

    def short(self) -> str:
        """A few words for a table cell: the GPU's name, or the CPU's name with its family and model (f25m17)."""
        if self.kind == "gpu":
            return self.name
        fam = f" f{self.family}m{self.model}" if self.family is not None and self.model is not None else ""
        return f"{self.name}{fam}"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def fingerprint_from_dict(data: Any, source: str = "fingerprint") -> Fingerprint:
    """A fingerprint from JSON; ValueError naming the field for anything malformed."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: not an object")
    kind = data.get("kind")
    if kind not in ("cpu", "gpu"):
        raise ValueError(f"{source}.kind: {kind!r} is not 'cpu' or 'gpu'")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{source}.name: {name!r} is not a non-empty string")
    values: dict[str, Any] = {"kind": kind, "name": name}
    for key in ("vendor", "family", "model", "driver", "cuda"):
        v = data.get(key)
        if v is not None and not isinstance(v, (str, int)):
            raise ValueError(f"{source}.{key}: {v!r} is not a string")
        values[key] = None if v is None else str(v)
    for key in ("cores", "memory_bytes"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{source}.{key}: {v!r} is not a positive integer")
        values[key] = v
    return Fingerprint(**values)


@lru_cache(maxsize=1)
def cpu_fingerprint() -> Fingerprint:
    """This machine's CPU: the first processor block of /proc/cpuinfo, and the cores this process may use."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if sep and key in ("model name", "cpu family", "model", "vendor_id") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    return Fingerprint(kind="cpu", name=name, vendor=fields.get("vendor_id"), family=fields.get("cpu family"),
                       model=fields.get("model"), cores=cores)


def gpu_profile_name(gpu_name: str) -> str | None:
    """The hardware profile a GPU of this name is ('NVIDIA H200' -> 'h200'); None for a GPU no profile names."""
    upper = gpu_name.upper()
    for profile in GPU_PROFILE_NAMES:
        if profile.upper() in upper:
            return profile
    return None
