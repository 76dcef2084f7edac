"""The exact solvers beyond table-wise HBM: a tiered plan's HBM tables re-placed exactly, its row-wise and
host-memory shards held where they are.

Why this way: where no table- or column-wise HBM plan exists (a table larger than every device, or tables beyond
the cluster's HBM), a plan needs row-wise splits and host-memory (UVM) tables, chosen by `solvers.placement.tiering` and placed
by the heuristics and NeuroShard. The exact model (whole tables and dyadic column pieces, one count per item and
device) cannot express a row-wise block or a second memory tier, but it can place the rest exactly: the tables that
a tiered plan keeps whole (or in column pieces) in HBM, which carry most of the compute. So the start plan is split
into

- the *fixed* shards: every shard of a table that is row-wise, replicated, or in host memory, kept on its device;
  every device's summed state, pooled width and replica sync become its *base* (Items.base_*: the linearisation
  and the full model's judgement both see it), and its HBM bytes come off the device's memory;
- the *movable* tables: the rest, in HBM, whole or in column pieces: a sub-instance of them (same topology and
  workload, each device's memory less its fixed bytes) that the exact loop solves as usual.

The plan returned is the exact loop's plan of the movable tables plus the fixed shards, checked on the whole
instance. Host memory is not touched (only HBM shards move), so it stays within its capacities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.base import BoundCostModel
from shardopt.core.ir import Instance, Kernel, PlacementConstraints, Shard
from shardopt.core.memory import shard_bytes


@dataclass
class TieredSplit:
    """A start plan split into fixed shards (with the base they give each device) and the movable tables' sub-instance."""

    sub: Instance  # the movable tables; each device's memory less its fixed HBM bytes
    fixed: list[Shard]
    movable: list[Shard]  # the start plan's shards of the movable tables
    base_states: np.ndarray  # [D, F]
    base_widths: np.ndarray  # [D]
    base_extra: np.ndarray  # [D]
    fixed_hbm: np.ndarray  # [D]
    base_dists: np.ndarray  # [G, D] base_widths by output dist (costmodels.hierarchical.output_dist_rows)

    def describe(self) -> dict[str, int]:
        return {"movable_tables": len(self.sub.tables), "fixed_tables": len({s.table for s in self.fixed}), "fixed_shards": len(self.fixed)}


def _movable(shards: list[Shard]) -> bool:
    """A table whose shards the exact model can hold: in HBM, not replicated, whole rows (whole or column pieces)."""
    return all(s.kernel is Kernel.fused and not s.replicated and s.row_offset == 0 and s.rows is None for s in shards)


def split_tiered(instance: Instance, bm: BoundCostModel, shards: list[Shard]) -> TieredSplit | None:
    """The split of a valid plan (module docstring); None when it leaves nothing to move."""
    by_table: dict[str, list[Shard]] = {}
    for s in shards:
        by_table.setdefault(s.table, []).append(s)
    movable_names = [t.name for t in instance.tables if _movable(by_table.get(t.name, []))]
    if not movable_names:
        return None
    keep = set(movable_names)
    D = instance.topology.num_devices
    fixed = [s for s in shards if s.table not in keep]
    index = instance.table_index()
    base_states, base_dists, base_extra = bm.background(fixed)
    base_widths = base_dists.sum(axis=0)
    fixed_hbm = np.zeros(D, dtype=np.int64)
    for s in fixed:
        fixed_hbm[s.device] += shard_bytes(instance, instance.tables[index[s.table]], s)
    caps = np.array(instance.topology.capacities(), dtype=np.int64)
    left = np.maximum(caps - fixed_hbm, 1)  # (a device the fixed shards fill keeps 1 byte: nothing else fits)
    topo = instance.topology.model_copy(update={"memory_bytes": [int(x) for x in left]})
    carried = sub_constraints(instance, keep, fixed)
    if carried is False:  # (a movable table the fixed shards leave no device: the start plan stays as it is)
        return None
    sub = instance.model_copy(update={"tables": [instance.tables[index[n]] for n in movable_names], "topology": topo,
                                      "name": f"{instance.name or 'instance'} (HBM tables of a tiered plan)", "constraints": carried})
    movable = [s for s in shards if s.table in keep]
    return TieredSplit(sub, fixed, movable, base_states, base_widths, base_extra, fixed_hbm, base_dists)


def sub_constraints(instance: Instance, keep: set[str], fixed: list[Shard]) -> PlacementConstraints | None | bool:
    """The placement constraints of the movable tables (`keep`) with the fixed shards where they are: their own per-table
    constraints; a movable table co-located with a fixed one pinned to that one's devices, one kept apart from fixed
    ones pinned off their devices; the groups' movable members still grouped. None: no constraints; False: a movable
    table left no device."""
    c = instance.constraints
    if c is None:
        return None
    D = instance.topology.num_devices
    held: dict[str, set[int]] = {}
    for s in fixed:
        held.setdefault(s.table, set()).add(s.device)
    pins: dict[str, set[int]] = {tc.table: set(tc.devices) for tc in c.tables if tc.table in keep and tc.devices is not None}

    def narrow(name: str, allowed: set[int]) -> None:
        pins[name] = pins.get(name, set(range(D))) & allowed

    groups: dict[str, list[list[str]]] = {"colocate": [], "separate": []}
    for kind in ("colocate", "separate"):
        for group in getattr(c, kind):
            inside = [n for n in group if n in keep]
            outside = set().union(*(held.get(n, set()) for n in group if n not in keep))
            for n in inside if outside else []:
                narrow(n, outside if kind == "colocate" else set(range(D)) - outside)
            if len(set(inside)) >= 2:
                groups[kind].append(inside)
    if any(not p for p in pins.values()):
        return False
    tables = []
    for tc in c.tables:
        if tc.table in keep:
            tables.append(tc.model_copy(update={"devices": sorted(pins.pop(tc.table))} if tc.table in pins else {}))
    tables += [{"table": n, "devices": sorted(p)} for n, p in pins.items()]
    return PlacementConstraints.model_validate({"tables": [t if isinstance(t, dict) else t.model_dump() for t in tables], **groups,
                                                "torchrec": c.torchrec.model_dump() if c.torchrec is not None else None})
