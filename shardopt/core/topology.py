"""The cluster of an instance: devices, hosts, memory per device and per host, hardware kinds, network levels and
an optional link graph. Its own module because it is the largest part of the IR; `shardopt.core.ir` re-exports it."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from shardopt.core.hardware import PROFILES
from shardopt.core.ir_base import MAX_DEVICES, IRModel, a_number, check_byte_counts


class TopologyLevel(IRModel):
    """One level of the network above the device (a host, an NVLink domain, a pod): groups of `devices` consecutive
    devices, and the link each device uses for its traffic to the peers whose innermost common group is this one.
    The levels of a topology run from the innermost out; the outermost spans the job. Why levels: an NVLink domain can
    span hosts (72 GPUs over 18 hosts), and a pod's network is faster than the spine above it - two numbers (NVLink
    in a host, the network between hosts) cannot say either (docs/analytic-model.md, "Topology levels")."""

    name: str = Field(min_length=1, description="what the level is: host, nvlink_domain, pod, ...")
    devices: int = Field(ge=2, le=MAX_DEVICES, description="devices in one group of this level")
    bandwidth: float = Field(gt=0, allow_inf_nan=False, description="bytes/s per device and direction for this level's traffic")
    latency_s: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="start-up a collective pays once it crosses this level")

    _numbers = field_validator("devices", "bandwidth", "latency_s", mode="before")(a_number)


class Topology(IRModel):
    num_devices: int = Field(ge=1, le=MAX_DEVICES)
    devices_per_host: int = Field(ge=1, le=MAX_DEVICES)
    memory_bytes: int | list[int] = Field(description="per-device memory: one value for all, or one per device")
    hardware: str = Field(description="hardware profile name: " + ", ".join(sorted(PROFILES)) + "; with device_hardware, the "
                          "reference kind (what a device-free figure such as a table's cost alone is priced on)")
    device_hardware: list[str] | None = Field(
        default=None,
        description="each device's hardware profile, for a job that mixes generations (A100 and H100 hosts); every device "
        "of a host is of one kind, and `hardware` is one of them; None (the default) = every device is `hardware`",
    )
    intra_host_bandwidth: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="bytes/s override of NVLink")
    inter_host_bandwidth: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="bytes/s override of the network")
    host_memory_bytes: int | list[int] = Field(
        default=0,
        description="per-device share of its host's DRAM for UVM shards (TorchRec's ddr_cap): one value for all, or one "
        "per device; 0 (the default) = no host memory, every shard in HBM",
    )
    host_link_bandwidth: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="bytes/s override of the device-host link (UVM)")
    levels: list[TopologyLevel] | None = Field(
        default=None, min_length=1,
        description="the network as levels, innermost first (host, NVLink domain, pod, ...), the outermost spanning the "
        "job; None (the default) = two levels from the profile: NVLink within a host, the network between hosts",
    )
    graph: dict[str, Any] | None = Field(
        default=None,
        description="the network as an explicit graph: a networkx node-link document of devices (nodes with \"device\"), "
        "switches (nodes with an optional \"latency_s\") and full-duplex links (\"bandwidth\" bytes/s each way); "
        "shardopt/core/network_graph.py",
    )

    _numbers = field_validator("num_devices", "devices_per_host", "memory_bytes", "host_memory_bytes", "intra_host_bandwidth",
                               "inter_host_bandwidth", "host_link_bandwidth", mode="before")(a_number)

    @field_validator("hardware")
    @classmethod
    def _check_hardware(cls, v: str) -> str:
        if v not in PROFILES:
            raise ValueError(f"{v!r} is not a known hardware profile (known: {', '.join(sorted(PROFILES))})")
        return v

    @field_validator("device_hardware")
    @classmethod
    def _check_device_hardware(cls, v: list[str] | None) -> list[str] | None:
        for i, name in enumerate(v or []):
            if name not in PROFILES:
                raise ValueError(f"[{i}]: {name!r} is not a known hardware profile (known: {', '.join(sorted(PROFILES))})")
        return v

    @field_validator("memory_bytes")
    @classmethod
    def _check_memory(cls, v: int | list[int]) -> int | list[int]:
        return check_byte_counts(v, zero_ok=False)

    @field_validator("host_memory_bytes")
    @classmethod
    def _check_host_memory(cls, v: int | list[int]) -> int | list[int]:
        return check_byte_counts(v, zero_ok=True)

    @model_validator(mode="after")
    def _check_lengths(self) -> Topology:
        for name in ("memory_bytes", "host_memory_bytes"):
            v = getattr(self, name)
            if isinstance(v, list) and len(v) != self.num_devices:
                raise ValueError(f"{name}: {len(v)} values for {self.num_devices} devices")
        if self.devices_per_host > self.num_devices:
            # a topology describes the devices the job uses: a job on 4 GPUs of an 8-GPU host is one host of 4, and
            # TorchRec's local world size cannot exceed its world size either
            raise ValueError(
                f"devices_per_host: {self.devices_per_host} is more than num_devices {self.num_devices}: give the "
                f"devices the job uses on each host (a job on {self.num_devices} devices of one host has "
                f"devices_per_host {self.num_devices})"
            )
        if self.num_devices % self.devices_per_host:
            # uneven hosts: TorchRec's topology (local world size) and its table_row_wise layout assume every host
            # has the same number of devices
            raise ValueError(
                f"devices_per_host: {self.devices_per_host} does not divide num_devices {self.num_devices}: hosts must "
                f"have equal device counts (use {self.num_devices} devices on one host, or a divisor of {self.num_devices})"
            )
        if self.device_hardware is not None:
            self._check_mixed(self.device_hardware)
        if self.levels is not None:
            self._check_levels(self.levels)
        if self.graph is not None:
            self._check_graph()
        return self

    def _check_graph(self) -> None:
        from shardopt.core.network_graph import parse_network_graph

        if self.levels is not None:
            raise ValueError("graph: give the network as levels or as a graph, not both")
        for name in ("intra_host_bandwidth", "inter_host_bandwidth"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: {getattr(self, name)} beside graph: give each link's bandwidth in the graph instead")
        parse_network_graph(self.graph, self.num_devices, self.devices_per_host)

    def _check_mixed(self, kinds: list[str]) -> None:
        """One kind per host (a server is built around one GPU model, and its NVLink is that model's), and the
        reference kind among them."""
        if len(kinds) != self.num_devices:
            raise ValueError(f"device_hardware: {len(kinds)} values for {self.num_devices} devices")
        for h in range(self.num_hosts):
            on_host = kinds[h * self.devices_per_host:(h + 1) * self.devices_per_host]
            if len(set(on_host)) > 1:
                first = h * self.devices_per_host
                other = next(i for i, k in enumerate(on_host) if k != on_host[0])
                raise ValueError(f"device_hardware[{first + other}]: {on_host[other]!r} on host {h} beside "
                                 f"device_hardware[{first}] {on_host[0]!r}: every device of a host is of one kind")
        if self.hardware not in kinds:
            raise ValueError(f"hardware: {self.hardware!r} is none of the devices' kinds in device_hardware "
                             f"({', '.join(sorted(set(kinds)))}): name one of them as the reference kind")

    def hardware_of(self, device: int) -> str:
        """The hardware profile name of device `device`."""
        return self.device_hardware[device] if self.device_hardware is not None else self.hardware

    def hardware_kinds(self) -> list[str]:
        """Each device's hardware profile name."""
        return list(self.device_hardware) if self.device_hardware is not None else [self.hardware] * self.num_devices

    @property
    def is_mixed(self) -> bool:
        """Whether the job mixes hardware kinds (device_hardware naming two or more)."""
        return self.device_hardware is not None and len(set(self.device_hardware)) > 1

    @property
    def lists_network(self) -> bool:
        """Whether the topology describes its network itself (levels or a graph) rather than by the two numbers of
        old (NVLink within a host, the network between hosts)."""
        return self.levels is not None or self.graph is not None

    def _check_levels(self, levels: list[TopologyLevel]) -> None:
        """Levels nest (each group holds whole groups of the level below), the outermost spans the job, and a level
        holds whole hosts or lies within one (a group cut across hosts is no link of a real cluster)."""
        for name in ("intra_host_bandwidth", "inter_host_bandwidth"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: {getattr(self, name)} beside levels: give each level's bandwidth in levels instead")
        seen: dict[str, int] = {}
        for i, lv in enumerate(levels):
            if lv.name in seen:
                raise ValueError(f"levels[{i}].name: {lv.name!r} repeats levels[{seen[lv.name]}].name")
            seen[lv.name] = i
            if i and lv.devices <= levels[i - 1].devices:
                raise ValueError(f"levels[{i}].devices: {lv.devices} is not more than levels[{i - 1}].devices "
                                 f"{levels[i - 1].devices} (levels run from the innermost out)")
            if i and lv.devices % levels[i - 1].devices:
                raise ValueError(f"levels[{i}].devices: {lv.devices} is not a multiple of levels[{i - 1}].devices "
                                 f"{levels[i - 1].devices}: a group of {lv.name!r} must hold whole groups of {levels[i - 1].name!r}")
            if lv.devices % self.devices_per_host and self.devices_per_host % lv.devices:
                raise ValueError(f"levels[{i}].devices: {lv.devices} cuts across hosts of {self.devices_per_host} devices "
                                 f"(devices_per_host): a level holds whole hosts or lies within one")
        if levels[-1].devices != self.num_devices:
            raise ValueError(f"levels[{len(levels) - 1}].devices: {levels[-1].devices} is not num_devices {self.num_devices}: "
                             f"the outermost level spans the job (add a level for the network above {levels[-1].name!r})")

    @model_serializer(mode="wrap")
    def _drop_default_tiers(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A topology without host memory or levels is written as before the tiers and the levels existed: old
        documents, their content hashes and every stored result keyed by them stay the same."""
        out = handler(self)
        if out.get("host_memory_bytes") == 0:
            out.pop("host_memory_bytes")
        for name in ("host_link_bandwidth", "levels", "graph", "device_hardware"):
            if name in out and out[name] is None:
                out.pop(name)
        return out

    def host_capacity(self, device: int) -> int:
        """Bytes of host memory (UVM) device `device` may use; 0 = none."""
        m = self.host_memory_bytes
        return m[device] if isinstance(m, list) else m

    def host_capacities(self) -> list[int]:
        return [self.host_capacity(d) for d in range(self.num_devices)]

    @property
    def has_host_memory(self) -> bool:
        m = self.host_memory_bytes
        return any(c > 0 for c in m) if isinstance(m, list) else m > 0

    def capacity(self, device: int) -> int:
        m = self.memory_bytes
        return m[device] if isinstance(m, list) else m

    def capacities(self) -> list[int]:
        return [self.capacity(d) for d in range(self.num_devices)]

    def host_of(self, device: int) -> int:
        return device // self.devices_per_host

    @property
    def num_hosts(self) -> int:
        return -(-self.num_devices // self.devices_per_host)

    @property
    def intra_group_size(self) -> int:
        """Devices a table-row-wise split spans (TorchRec's `intra_group_size`): the host; with topology levels, the
        innermost level of whole hosts short of the whole job - an NVLink domain over several hosts where one is
        listed - and the host where there is none. Its reduce-scatter stays inside the group, its all-to-all crosses
        to the other groups (costmodels/hierarchical.py)."""
        for lv in self.levels or []:
            if lv.devices % self.devices_per_host == 0:
                return lv.devices if lv.devices < self.num_devices else self.devices_per_host
        return self.devices_per_host

    def intra_group_of(self, device: int) -> int:
        return device // self.intra_group_size

    @property
    def num_intra_groups(self) -> int:
        return self.num_devices // self.intra_group_size
