"""Hardware profiles: the published figures of each accelerator that the analytic cost model needs.

They live beside the IR (not inside the cost model) because the IR validates a topology's profile name, and the IR
must not import the cost models. Sources for every figure are listed in docs/analytic-model.md; figures that are
not vendor specifications (kernel launch overhead, achievable fraction of peak for random gathers) are marked as
assumptions there.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

GB = 1e9
GiB = 1024**3
MiB = 1024**2


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator model and the links of a typical server built around it."""

    name: str
    description: str
    hbm_bandwidth: float  # bytes/s, peak device-memory bandwidth
    memory_bytes: int  # device-memory capacity
    l2_bytes: int  # last-level (L2) cache size
    sm_count: int  # streaming multiprocessors
    nvlink_bandwidth: float  # bytes/s per direction per device, intra-host
    network_bandwidth: float  # bytes/s per direction per device, inter-host
    sector_bytes: int = 32  # DRAM access granularity of one memory transaction
    gather_efficiency: float = 0.65  # achievable share of peak bandwidth for random row gathers (assumption)
    l2_bandwidth_ratio: float = 3.0  # L2 hit bandwidth relative to HBM (assumption)
    launch_overhead_s: float = 6e-6  # host-side launch + kernel start per kernel (assumption)
    min_kernel_s: float = 8e-6  # floor of one under-occupied kernel (assumption)
    warps_per_sm: int = 64  # resident warps per SM: occupancy of the gather kernel
    alltoall_latency_s: float = 15e-6  # start-up latency of one all-to-all (assumption)
    network_latency_s: float = 10e-6  # extra start-up latency when peers are on other hosts (assumption)
    bwd_bandwidth_factor: float = 1.0  # backward's achievable bandwidth relative to forward's (1 until calibrated)
    host_link_bandwidth: float = 15.75 * GB  # bytes/s per direction between a device and its host's DRAM (UVM)
    host_link: str = "PCIe Gen3 x16"  # what that link is (data sheet), for reports
    # row-granular reads of host memory by a kernel (UVM misses): rows / host_row_rate + bytes / host_gather_bandwidth
    # (at least bytes / host_link_bandwidth); measured (benchmarks/host_link_probe.py, costmodels/host_link.py). None:
    # not measured for this profile, and such reads cost their bytes over the link alone (optimistic for narrow rows)
    host_row_rate: float | None = None  # rows/s
    host_gather_bandwidth: float | None = None  # bytes/s of the per-byte part of those reads


# fields added after profiles were first written to JSON: a file without them takes the default
OPTIONAL_FIELDS = frozenset({"host_link_bandwidth", "host_link", "host_row_rate", "host_gather_bandwidth"})
NULLABLE_FIELDS = frozenset({"host_row_rate", "host_gather_bandwidth"})  # null in JSON: not measured
# The row-gather constants measured on NVIDIA H200 machines (PCIe Gen5 x16; docs/results/gpu.md, "Measured on a GPU"):
# the median over the committed probes (benchmarks/results/gpu-h200-*/lease*/host-link.json, each fitted by
# costmodels.host_link.fit_host_rows within 3 % at 64 B - 1 KiB rows). The row rate agrees within 1 % across the four
# machines; the per-byte bandwidth ranged 133-148 GB/s (hosts differ). The H100 SXM5 has the same GH100 die and PCIe Gen5 x16 host interface: it takes them too
# (not measured on an H100). a100 / v100 (PCIe Gen4 / Gen3) and gh200 (NVLink-C2C) are not measured: bytes only.
HOPPER_PCIE5_ROW_RATE = 48.9e6
HOPPER_PCIE5_GATHER_BANDWIDTH = 135 * GB


PROFILES: dict[str, HardwareProfile] = {
    "v100": HardwareProfile(
        name="v100",
        description="NVIDIA V100 SXM2 32 GB, NVLink 2, 100 Gb/s EDR InfiniBand per GPU",
        hbm_bandwidth=900 * GB,
        memory_bytes=32 * GiB,
        l2_bytes=6 * MiB,
        sm_count=80,
        nvlink_bandwidth=150 * GB,
        network_bandwidth=12.5 * GB,
        host_link_bandwidth=15.75 * GB,
        host_link="PCIe Gen3 x16",
    ),
    "a100": HardwareProfile(
        name="a100",
        description="NVIDIA A100 SXM4 80 GB, NVLink 3, 200 Gb/s HDR InfiniBand per GPU",
        hbm_bandwidth=2039 * GB,
        memory_bytes=80 * GiB,
        l2_bytes=40 * MiB,
        sm_count=108,
        nvlink_bandwidth=300 * GB,
        network_bandwidth=25 * GB,
        host_link_bandwidth=31.5 * GB,
        host_link="PCIe Gen4 x16",
    ),
    "h100": HardwareProfile(
        name="h100",
        description="NVIDIA H100 SXM5 80 GB, NVLink 4, 400 Gb/s NDR InfiniBand per GPU",
        hbm_bandwidth=3350 * GB,
        memory_bytes=80 * GiB,
        l2_bytes=50 * MiB,
        sm_count=132,
        nvlink_bandwidth=450 * GB,
        network_bandwidth=50 * GB,
        host_link_bandwidth=63 * GB,
        host_link="PCIe Gen5 x16",
        host_row_rate=HOPPER_PCIE5_ROW_RATE,
        host_gather_bandwidth=HOPPER_PCIE5_GATHER_BANDWIDTH,
    ),
    "h200": HardwareProfile(
        name="h200",
        description="NVIDIA H200 SXM 141 GB, NVLink 4, 400 Gb/s NDR InfiniBand per GPU",
        hbm_bandwidth=4800 * GB,
        memory_bytes=141 * GB,
        l2_bytes=50 * MiB,
        sm_count=132,
        nvlink_bandwidth=450 * GB,
        network_bandwidth=50 * GB,
        host_link_bandwidth=63 * GB,
        host_link="PCIe Gen5 x16",
        host_row_rate=HOPPER_PCIE5_ROW_RATE,
        host_gather_bandwidth=HOPPER_PCIE5_GATHER_BANDWIDTH,
    ),
    "gh200": HardwareProfile(
        name="gh200",
        description="NVIDIA GH200 Grace Hopper Superchip, H100 with 96 GB HBM3, NVLink-C2C to 480 GB LPDDR5X, NVLink 4, 400 Gb/s NDR InfiniBand per GPU",
        hbm_bandwidth=4000 * GB,
        memory_bytes=96 * GB,
        l2_bytes=50 * MiB,
        sm_count=132,
        nvlink_bandwidth=450 * GB,
        network_bandwidth=50 * GB,
        host_link_bandwidth=450 * GB,
        host_link="NVLink-C2C",
    ),
    # a Blackwell GPU of a GB200 NVL72 rack: 72 GPUs in one NVLink domain across 18 compute trays of 4 (describe the
    # domain with topology levels; the nvlink figure here is the domain's per-GPU link). L2 and SM count are not in
    # NVIDIA's data sheets (docs/analytic-model.md, "Hardware profiles": where they come from)
    "gb200": HardwareProfile(
        name="gb200",
        description="NVIDIA GB200 (Blackwell B200 in a GB200 NVL72 rack), 186 GB HBM3e, NVLink 5, 400 Gb/s InfiniBand per GPU",
        hbm_bandwidth=8000 * GB,
        memory_bytes=186 * GB,
        l2_bytes=126 * MiB,
        sm_count=148,
        nvlink_bandwidth=900 * GB,
        network_bandwidth=50 * GB,
        host_link_bandwidth=450 * GB,
        host_link="NVLink-C2C",
    ),
}
# A CPU timed by the cpu judge (fbgemm's CPU TBE): what an instance names when its plan is for this machine's CPU, so
# that `--cost-model auto` can pick a model calibrated on it (costmodels/auto.py). No data sheet describes "a CPU" in
# the analytic model's GPU terms: its constants are the v100 profile's (the analytic model ranks plans; a CPU's
# milliseconds are what `shardopt calibrate --backend cpu` learns), and so are its links, which is how the cpu judge
# models the all-to-all it cannot measure on one CPU. An instance relabelled v100 -> cpu costs exactly the same.
PROFILES["cpu"] = replace(
    PROFILES["v100"], name="cpu",
    description="a CPU timed by the cpu judge (fbgemm CPU TBE); the v100 profile's analytic constants and all-to-all links",
)

DEFAULT_PROFILE = "v100"


def get_profile(name: str) -> HardwareProfile:
    """The profile called `name`; a KeyError that lists the known names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown hardware profile {name!r} (known: {', '.join(sorted(PROFILES))})") from None


PROFILE_KIND = "hardware_profile"


def profile_to_dict(profile: HardwareProfile, **extra: Any) -> dict[str, Any]:
    return {"kind": PROFILE_KIND, **asdict(profile), **extra}


def profile_from_dict(data: Any, source: str = "profile") -> HardwareProfile:
    """A profile from JSON: every field of HardwareProfile (others, like a calibration record, are ignored).
    ValueError naming the field for anything missing or not a positive number."""
    if not isinstance(data, dict) or data.get("kind") != PROFILE_KIND:
        raise ValueError(f"{source}: not a hardware profile (expected an object with kind {PROFILE_KIND!r})")
    values: dict[str, Any] = {}
    for f in fields(HardwareProfile):
        if f.name not in data:
            if f.name in OPTIONAL_FIELDS:
                continue
            raise ValueError(f"{source}: {f.name}: required field is missing")
        v = data[f.name]
        if v is None and f.name in NULLABLE_FIELDS:
            continue
        if f.name in ("name", "description", "host_link"):
            if not isinstance(v, str):
                raise ValueError(f"{source}: {f.name}: {v!r} is not a string")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{source}: {f.name}: {v!r} must be a number > 0")
        values[f.name] = v
    return HardwareProfile(**values)


def load_profile(path: str | Path) -> HardwareProfile:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc.msg})") from None
    return profile_from_dict(data, str(p))


def with_overrides(profile: HardwareProfile, **values: Any) -> HardwareProfile:
    return replace(profile, **values)
