"""The communication levels of a topology, resolved: what every collective's price is made of.

A topology either lists its levels (`Topology.levels`: host, NVLink domain, pod, ...) or gives the two of old - NVLink
within a host, the network between hosts - from its hardware profile and overrides. Cost models read one list either
way, so a level-aware formula computes exactly today's numbers for a topology without levels (its two levels, the
second only where there are several hosts). docs/analytic-model.md, "Topology levels", has the formulas.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardopt.core.hardware import HardwareProfile
from shardopt.core.ir import Topology


@dataclass(frozen=True)
class CommLevel:
    """One resolved level: groups of `devices` consecutive devices; `peers` = the devices each device reaches first
    at this level (those in its group but not in its group of the level below); `bandwidth` bytes/s per device and
    direction; `latency_s` the start-up a collective crossing it pays."""

    name: str
    devices: int
    peers: int
    bandwidth: float
    latency_s: float


def comm_levels(topology: Topology, profile: HardwareProfile) -> tuple[CommLevel, ...]:
    """The levels a device's traffic crosses, innermost first, each with at least one peer (empty for one device).
    Without `levels`: a host level (NVLink: `intra_host_bandwidth` or the profile's, no extra latency) where hosts
    have several devices, and a network level (`inter_host_bandwidth` or the profile's, the profile's network
    latency) where there are several hosts. A topology given as a graph has no levels: empty (its links are its
    own: shardopt.core.network_graph)."""
    if topology.graph is not None:
        return ()
    if topology.levels is not None:
        sizes = [lv.devices for lv in topology.levels]
        return tuple(CommLevel(lv.name, lv.devices, lv.devices - (sizes[i - 1] if i else 1), float(lv.bandwidth), float(lv.latency_s))
                     for i, lv in enumerate(topology.levels))
    out = []
    per_host, n = topology.devices_per_host, topology.num_devices
    if per_host > 1:
        out.append(CommLevel("host", per_host, per_host - 1, float(topology.intra_host_bandwidth or profile.nvlink_bandwidth), 0.0))
    if n > per_host:
        out.append(CommLevel("network", n, n - per_host, float(topology.inter_host_bandwidth or profile.network_bandwidth),
                             float(profile.network_latency_s)))
    return tuple(out)


def two_level_network(topology: Topology) -> str | None:
    """None when the topology's network is of the two-level kind - the two levels of old, one level, or two levels
    whose inner one is also the table-row-wise group (an NVLink domain of whole hosts, then the network) - which the
    certified bound's terms price exactly; else why not (a graph, three levels or more, an inner level inside a host:
    the bound pools those, costmodels.comm_terms)."""
    levels = topology.levels
    if topology.graph is not None:
        return "topology.graph: a network graph"
    if levels is None or len(levels) == 1 or (len(levels) == 2 and levels[0].devices == topology.intra_group_size):
        return None
    return "topology.levels: " + " -> ".join(f"{lv.name} ({lv.devices})" for lv in levels)


def level_groups(levels: tuple[CommLevel, ...], num_devices: int) -> np.ndarray:
    """[K, D] each device's group index at each level (groups are consecutive devices)."""
    dev = np.arange(num_devices)
    return np.stack([dev // lv.devices for lv in levels]) if levels else np.zeros((0, num_devices), dtype=np.int64)


def group_sums(values: np.ndarray, group_size: int) -> np.ndarray:
    """[..., D] -> [..., D]: each device's value summed over its group of `group_size` consecutive devices."""
    v = np.asarray(values, dtype=np.float64)
    shape = v.shape
    sums = v.reshape(*shape[:-1], shape[-1] // group_size, group_size).sum(axis=-1)
    return np.repeat(sums, group_size, axis=-1)

