"""The replica sync of 2D sparse parallelism: what keeping N / G copies of a sharding group's plan in step costs.

Why analytic whatever the cost model: the sync is a ring collective over the replica group's links, priced from
bytes and bandwidth as the all-reduce of data-parallel replicas is (costmodels/analytic.py, `replicated_comm`); no
kernel timing or trained model here measures it. docs/analytic-model.md, "2D sparse parallelism", has the formulas:

- strategy `default`: every `sync_interval` iterations each rank all-reduces (AVG) its shards' weights and optimizer
  state over its replica group of R = N / G ranks, a ring: 2 (R - 1) / R x bytes / bandwidth + its start-up, spread
  over the interval;
- strategy `fully_sharded`: every iteration a reduce-scatter and an all-gather of the weights, (R - 1) / R x bytes /
  bandwidth + a start-up each.

The bandwidth is the slowest link the ring over the replica group's ranks crosses (shardopt.core.sharding_groups,
`ring_span`); replica groups run at once, each over its own ranks' links, and the iteration waits for the slowest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardopt.core.hardware import get_profile
from shardopt.core.ir import Instance, Plan
from shardopt.core.memory import slice_bytes, weight_bytes
from shardopt.core.sharding_groups import RingSpan, job_levels, replica_groups, ring_span
from shardopt.core.two_d import SyncStrategy

MS = 1e3


@dataclass(frozen=True)
class ReplicaSync:
    """The sync of one group plan: per group rank the bytes it syncs and the ms per iteration that costs."""

    group_size: int
    replicas: int
    strategy: SyncStrategy
    interval: int
    rank_bytes: np.ndarray  # [G] bytes each group rank's collectives carry per sync
    rank_ms: np.ndarray  # [G] ms per iteration
    spans: tuple[RingSpan, ...]  # per group rank, what its replica group's ring crosses

    @property
    def ms(self) -> float:
        """ms per iteration the sync adds: the slowest replica group's."""
        return float(self.rank_ms.max()) if len(self.rank_ms) else 0.0

    def to_dict(self) -> dict[str, Any]:
        worst = int(np.argmax(self.rank_ms)) if len(self.rank_ms) else 0
        span = self.spans[worst] if self.spans else RingSpan(float("inf"), 0.0, ())
        return {"group_size": self.group_size, "replicas": self.replicas, "strategy": self.strategy.value,
                "sync_interval": self.interval, "sync_ms": self.ms, "bytes_per_rank_max": int(self.rank_bytes.max(initial=0)),
                "links": list(span.levels), "bandwidth": span.bandwidth if span.levels else None}


def synced_bytes(instance: Instance, table: Any, rows: int, cols: int) -> int:
    """Bytes a rows x cols slice of `table` puts into the sync: weights and optimizer state (strategy default), the
    weights alone (fully_sharded)."""
    assert instance.two_d is not None
    if instance.two_d.strategy is SyncStrategy.fully_sharded:
        return weight_bytes(instance, table, rows, cols)
    return slice_bytes(instance, table, rows, cols)


def sync_time_ms(instance: Instance, replicas: int, rank_bytes: Any, bandwidth: Any, start_s: Any) -> Any:
    """ms per iteration of syncing `rank_bytes` over rings of `replicas` ranks (the module docstring's formulas)."""
    two_d = instance.two_d
    assert two_d is not None
    moved = 2 * (replicas - 1) / replicas * rank_bytes / bandwidth
    if two_d.strategy is SyncStrategy.fully_sharded:  # a reduce-scatter and an all-gather every iteration
        return (moved + 2 * start_s) * MS
    return (moved + start_s) * MS / two_d.sync_interval  # one ring all-reduce every sync_interval iterations


def replica_sync(instance: Instance, plan: Plan, group_size: int) -> ReplicaSync:
    """The replica sync of `plan` (a plan for one sharding group of `group_size` ranks) in the 2D job `instance`."""
    if instance.two_d is None:
        raise ValueError("replica_sync: the instance has no two_d section")
    two_d = instance.two_d
    n = instance.topology.num_devices
    replicas = n // group_size
    tables = instance.table_index()
    rank_bytes = np.zeros(group_size)
    for s in plan.shards:
        table = instance.tables[tables[s.table]]
        rank_bytes[s.device] += synced_bytes(instance, table, s.height(table), s.width(table))
    if replicas == 1:
        return ReplicaSync(group_size, 1, two_d.strategy, two_d.sync_interval, rank_bytes, np.zeros(group_size), ())
    levels = job_levels(instance.topology)
    start_s = get_profile(instance.topology.hardware).alltoall_latency_s
    spans = tuple(ring_span(levels, ranks) for ranks in replica_groups(n, group_size, two_d.layout))
    bw = np.array([sp.bandwidth for sp in spans])
    start = np.array([start_s + sp.latency_s for sp in spans])
    rank_ms = sync_time_ms(instance, replicas, rank_bytes, bw, start)
    return ReplicaSync(group_size, replicas, two_d.strategy, two_d.sync_interval, rank_bytes, rank_ms, spans)
