"""The sharding groups and replica groups of 2D sparse parallelism, and the flat instance one group plans.

Why derive a flat instance: every solver, cost model and judge plans one flat group of devices. A sharding group of
G ranks is such a group - its own batch (B x G / N: each rank keeps its local batch B / N), its own links (the levels
of the job's topology its ranks span, counted rank by rank) and its own memory - so the 2D problem is the flat
problem of `group_instance(instance, G)` plus the replica sync (costmodels/replica_sync.py). The groups are formed
as DMPCollection forms them (`_create_process_groups`, TorchRec 1.8): see shardopt.core.two_d.GroupLayout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardopt.core.hardware import get_profile
from shardopt.core.ir import Instance, Topology, TopologyLevel
from shardopt.core.ir_base import IRError
from shardopt.core.levels import CommLevel, comm_levels
from shardopt.core.two_d import GroupLayout, divisors


def _refused(message: str) -> IRError:
    return IRError([message])


def sharding_groups(num_devices: int, group_size: int, layout: GroupLayout) -> np.ndarray:
    """[N / G, G]: row j the global ranks of sharding group j, by group rank (DMPCollection's device mesh)."""
    replicas = num_devices // group_size
    if layout is GroupLayout.contiguous:
        return np.arange(num_devices).reshape(replicas, group_size)
    return np.arange(num_devices).reshape(group_size, replicas).T  # group j: j, j + N/G, j + 2 N/G, ...


def replica_groups(num_devices: int, group_size: int, layout: GroupLayout) -> np.ndarray:
    """[G, N / G]: row r the global ranks holding group rank r's shards (the ranks one sync all-reduces over)."""
    return sharding_groups(num_devices, group_size, layout).T


@dataclass(frozen=True)
class RingSpan:
    """What a ring over a set of ranks crosses: its slowest link (bytes/s per device and direction), the start-up of
    the outermost level it crosses, and the levels by name (empty for one rank)."""

    bandwidth: float
    latency_s: float
    levels: tuple[str, ...]


def ring_span(levels: tuple[CommLevel, ...], ranks: np.ndarray) -> RingSpan:
    """The levels a ring over `ranks` (in rank order) crosses: for each neighbouring pair, the innermost level whose
    group holds both."""
    ranks = np.sort(np.asarray(ranks))
    if len(ranks) < 2 or not levels:
        return RingSpan(float("inf"), 0.0, ())
    a, b = ranks, np.roll(ranks, -1)
    first = np.full(len(ranks), len(levels) - 1)
    for k in reversed(range(len(levels))):  # (the innermost shared level wins: walk from the outside in)
        first = np.where(a // levels[k].devices == b // levels[k].devices, k, first)
    crossed = [levels[k] for k in sorted(set(first.tolist()))]
    return RingSpan(min(lv.bandwidth for lv in crossed), max(lv.latency_s for lv in crossed), tuple(lv.name for lv in crossed))


def job_levels(topology: Topology) -> tuple[CommLevel, ...]:
    """The job topology's levels, resolved with its reference hardware profile."""
    return comm_levels(topology, get_profile(topology.hardware))


def _per_group(ranks: np.ndarray, size: int, what: str) -> int:
    """How many of a group's ranks share each group of `size` consecutive devices; IRError where unequal."""
    counts = np.unique(np.bincount(ranks // size)[np.unique(ranks // size)])
    if len(counts) > 1:
        raise _refused(what.format(counts=", ".join(str(int(c)) for c in counts)))
    return int(counts[0])


def group_topology(topology: Topology, group_size: int, layout: GroupLayout) -> Topology:
    """The topology of one sharding group: its G ranks, as many to a host (and to each level's group) as the layout
    puts there, the links between them as the job's, and per rank the least memory any group gives that rank."""
    n = topology.num_devices
    if topology.graph is not None:
        raise _refused("two_d: a topology given as topology.graph is not planned in sharding groups (give levels instead)")
    groups = sharding_groups(n, group_size, layout)
    hint = (f"two_d.group_size {group_size} with layout {layout.value} puts {{counts}} ranks of one sharding group on "
            f"the hosts of {topology.devices_per_host} devices: choose a group size whose ranks fill hosts evenly "
            f"(divisors of {n}: {', '.join(str(d) for d in divisors(n))})")
    per_host = _per_group(groups[0], topology.devices_per_host, hint)
    for row in groups[1:]:  # (every group must see the same hosts)
        _per_group(row, topology.devices_per_host, hint)
    kinds = np.array(topology.hardware_kinds())[groups]
    if (kinds != kinds[:1]).any():
        r = int(np.argwhere((kinds != kinds[:1]).any(axis=0))[0][0])
        raise _refused(f"topology.device_hardware: group rank {r} is {sorted(set(kinds[:, r]))} across the sharding groups "
                      f"of two_d.group_size {group_size}: every group holds one plan, so its ranks must be of one kind")
    memory = np.array(topology.capacities())[groups].min(axis=0)
    host = np.array(topology.host_capacities())[groups].min(axis=0)
    body = topology.model_dump(mode="json", exclude_none=True)
    body.update(num_devices=group_size, devices_per_host=per_host,
                memory_bytes=int(memory[0]) if (memory == memory[0]).all() else [int(m) for m in memory],
                host_memory_bytes=int(host[0]) if (host == host[0]).all() else [int(m) for m in host])
    if topology.device_hardware is not None:
        body["device_hardware"] = [str(k) for k in kinds[0]]
    if topology.levels is not None:
        body["levels"] = _group_levels(topology.levels, groups, per_host, group_size)
    return Topology.model_validate(body)


def _group_levels(levels: list[TopologyLevel], groups: np.ndarray, per_host: int, group_size: int) -> list[dict] | None:
    """The job's levels as the group's ranks see them: each level's group holds as many group ranks as the layout
    puts in it; a level that adds no peer to the group is dropped."""
    out: list[dict] = []
    last = 1
    for lv in levels:
        hint = (f"topology.levels: a {lv.name!r} group of {lv.devices} devices holds {{counts}} ranks of one sharding group "
                f"of two_d.group_size {group_size}: choose a group size whose ranks fill each level's groups evenly")
        count = max(_per_group(row, lv.devices, hint) for row in groups)
        if count > last:
            out.append({"name": lv.name, "devices": count, "bandwidth": lv.bandwidth, "latency_s": lv.latency_s})
            last = count
    if not out:
        return None
    if out[-1]["devices"] != group_size:  # (the outermost level spans the job, so it always holds the whole group)
        raise _refused(f"topology.levels: the outermost level holds {out[-1]['devices']} of the {group_size} ranks of a group")
    return out


def group_batch(instance: Instance, group_size: int) -> int:
    """The batch one sharding group plans for: B x G / N (each rank keeps its local batch B / N); IRError where the
    global batch does not split into equal groups."""
    n, b = instance.topology.num_devices, instance.workload.batch_size
    if (b * group_size) % n:
        raise _refused(f"workload.batch_size: {b} does not split over {n // group_size} replica groups of two_d.group_size "
                      f"{group_size} in whole samples (B x G / N = {b * group_size / n:g})")
    return b * group_size // n


def group_instance(instance: Instance, group_size: int) -> Instance:
    """The flat instance one sharding group plans: the tables, the group's topology and batch, the constraints (pins
    name group ranks), no two_d section. Every group holds the same plan."""
    two_d = instance.two_d
    if two_d is None:
        raise _refused("two_d: the instance has no two_d section")
    n = instance.topology.num_devices
    if n % group_size:
        raise _refused(f"two_d.group_size: {group_size} does not divide topology.num_devices {n}")
    body = instance.model_dump(mode="json", exclude_none=True)
    if group_size < n:
        body["topology"] = group_topology(instance.topology, group_size, two_d.layout).model_dump(mode="json", exclude_none=True)
        body["workload"] = {**body["workload"], "batch_size": group_batch(instance, group_size)}
    body.pop("two_d", None)
    body["name"] = f"{instance.name or 'instance'}@G{group_size}"
    body["metadata"] = {**instance.metadata, "sharding_group_of": instance.name, "sharding_group_size": group_size,
                        "world_size": n, "group_layout": two_d.layout.value}
    return Instance.model_validate(body)


def candidate_group_sizes(instance: Instance) -> list[tuple[int, str | None]]:
    """Every divisor G of the world size with why it cannot form groups (None: it can), ascending."""
    out: list[tuple[int, str | None]] = []
    for g in divisors(instance.topology.num_devices):
        try:
            group_instance(instance, g)
        except (IRError, ValueError) as exc:
            out.append((g, str(exc).splitlines()[0]))
        else:
            out.append((g, None))
    return out
