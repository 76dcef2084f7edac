"""The certified bound of a 2D instance: per sharding group size G, the group's analytic bound plus a floor of its
replica sync; the least over G bounds every 2D plan of the instance (with a fixed group size, that size's).

Why the sync floor holds: every group rank all-reduces the bytes of the shards it holds over its replica group, and
the group's shards hold at least every table's slice once (a column or row cut only adds optimizer state or
replicas), so some rank holds at least T / G of those T bytes, and no rank's ring is faster than the fastest replica
group's link. docs/analytic-model.md, "2D sparse parallelism".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodels.base import CostModel
from costmodels.replica_sync import sync_time_ms, synced_bytes
from shardopt.core.hardware import get_profile
from shardopt.core.ir import Instance
from shardopt.core.sharding_groups import candidate_group_sizes, group_instance, job_levels, replica_groups, ring_span
from solvers.bound.bound import AnalyticBound, analytic_lower_bound


@dataclass(frozen=True)
class GroupSizeBound:
    """One group size's bound: the group's embedding bound (None where the size forms no groups: `why`), the sync
    floor, their sum."""

    group_size: int
    embedding: AnalyticBound | None
    sync_floor_ms: float
    why: str | None = None

    @property
    def value_ms(self) -> float:
        return float("inf") if self.embedding is None else self.embedding.value_ms + self.sync_floor_ms

    def to_dict(self) -> dict[str, Any]:
        e = self.embedding
        return {"group_size": self.group_size, "value_ms": self.value_ms if e is not None else None,
                "embedding_bound_ms": e.value_ms if e is not None else None, "status": e.status.value if e is not None else "not_formed",
                "sync_floor_ms": self.sync_floor_ms, "why": self.why}


def sync_floor_ms(instance: Instance, group_size: int) -> float:
    """The least replica sync any plan of one group of `group_size` ranks pays per iteration (module docstring)."""
    two_d = instance.two_d
    assert two_d is not None
    n = instance.topology.num_devices
    replicas = n // group_size
    if replicas == 1:
        return 0.0
    total = sum(synced_bytes(instance, t, t.rows, t.dim) for t in instance.tables)
    levels = job_levels(instance.topology)
    spans = [ring_span(levels, ranks) for ranks in replica_groups(n, group_size, two_d.layout)]
    start = get_profile(instance.topology.hardware).alltoall_latency_s + min(sp.latency_s for sp in spans)
    return float(sync_time_ms(instance, replicas, total / group_size, max(sp.bandwidth for sp in spans), start))


def two_d_lower_bound(instance: Instance, cost_model: CostModel | None = None, *, time_limit: float = 10.0,
                      table_wise: bool = False) -> list[GroupSizeBound]:
    """The bound of every group size the instance allows (its fixed one, or every divisor that forms groups), each
    group's relaxation within an equal share of `time_limit`, ascending by G."""
    two_d = instance.two_d
    assert two_d is not None
    fixed = two_d.fixed_group_size
    sizes = [(fixed, None)] if fixed is not None else candidate_group_sizes(instance)
    formed = [g for g, why in sizes if why is None]
    each = time_limit / max(1, len(formed))
    out = []
    for g, why in sizes:
        if why is not None:
            out.append(GroupSizeBound(g, None, 0.0, why))
            continue
        bound = analytic_lower_bound(group_instance(instance, g), cost_model, time_limit=each, table_wise=table_wise)
        out.append(GroupSizeBound(g, bound, sync_floor_ms(instance, g)))
    return out
