"""Proofs that an instance's placement constraints leave no plan at all, each naming the constraints that conflict.

Why apart from the solvers: a solver that finds no plan under constraints knows only that its own search failed; these
arguments hold for every plan of every kind (table-, column-, row-wise, replicas, host memory), so the instance is
`infeasible` (exit 3) and the user learns which constraints to loosen. Each is a necessary condition only: passing
them all proves nothing.
- a separate group whose tables cannot each get a device of their own within their pins (no system of distinct
  representatives: every table needs at least one device, and no two of the group may share one);
- co-located tables (joined through shared groups) whose pins have no device in common (they hold the same
  non-empty set of devices, within every member's pins);
- two tables both co-located (through groups) and kept apart;
- the tables pinned within a set of devices needing more bytes than those devices' HBM and host memory together
  (splitting conserves a table's bytes; replicas only add);
- a table kept out of HBM (its kernels host-memory only) pinned to devices without host memory;
- a table whose sharding types put it on every device (row_wise over all of them, data_parallel) pinned off some
  device, or kept apart from another table (that one would have no device); one that may only be table_row_wise
  pinned within no whole host.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from shardopt.core.ir import Instance, Kernel
from shardopt.core.memory import table_bytes_array
from shardopt.core.torchrec_form import rw_layout


def constraint_infeasibility(instance: Instance) -> str | None:
    """Why no plan can meet the instance's placement constraints (naming them), or None when these necessary
    conditions hold."""
    c = instance.constraints
    if c is None:
        return None
    D = instance.topology.num_devices
    pins: dict[str, set[int]] = {t.name: set(range(D)) for t in instance.tables}
    for tc in c.tables:
        if tc.devices is not None:
            pins[tc.table] = set(tc.devices)
    for g, group in enumerate(c.separate):
        why = _no_distinct_devices(group, pins)
        if why is not None:
            return f"constraints.separate[{g}]: {why}"
    components = _colocated(instance)
    for comp in components:
        common = set.intersection(*(pins[n] for n in comp))
        if not common:
            shown = "; ".join(f"{n} on {sorted(pins[n])}" for n in sorted(comp))
            return f"constraints.colocate: tables {sorted(comp)} must share their devices, but their pins have none in common ({shown})"
    where = {n: k for k, comp in enumerate(components) for n in comp}
    for g, group in enumerate(c.separate):
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if a in where and where.get(b) == where[a]:
                    return (f"constraints.separate[{g}] keeps {a!r} and {b!r} apart, but constraints.colocate puts them on the same "
                            f"devices (through the group {sorted(components[where[a]])})")
    return _pinned_memory(instance, pins) or _host_only_without_host(instance, pins) or _spanning(instance, pins)


def _no_distinct_devices(group: list[str], pins: dict[str, set[int]]) -> str | None:
    """Why the tables of a separate group cannot each have a device of their own within their pins (Hall's condition,
    by a maximum bipartite matching), or None."""
    names = list(dict.fromkeys(group))
    g = nx.Graph()
    left = [("t", n) for n in names]
    g.add_nodes_from(left, bipartite=0)
    for n in names:
        g.add_edges_from((("t", n), ("d", d)) for d in pins[n])
    matching = nx.bipartite.hopcroft_karp_matching(g, top_nodes=left)
    matched = sum(1 for node in left if node in matching)
    if matched == len(names):
        return None
    devices = sorted(set().union(*(pins[n] for n in names)))
    return (f"its {len(names)} tables {names} must each be on devices of their own, but their pins allow only {matched} "
            f"such tables at once (devices {devices})")


def _colocated(instance: Instance) -> list[set[str]]:
    """The co-locate groups joined where they share a table (co-location is transitive)."""
    c = instance.constraints
    g = nx.Graph()
    for group in c.colocate if c is not None else []:
        g.add_nodes_from(group)
        g.add_edges_from(zip(group[:-1], group[1:]))
    return [set(comp) for comp in nx.connected_components(g)]


def _pinned_memory(instance: Instance, pins: dict[str, set[int]]) -> str | None:
    """For each distinct pin set: the tables pinned within it against its devices' HBM and host memory."""
    topo = instance.topology
    D = topo.num_devices
    sizes = dict(zip((t.name for t in instance.tables), table_bytes_array(instance)))
    room = np.array(topo.capacities(), dtype=np.int64) + np.array(topo.host_capacities(), dtype=np.int64)
    for s in {frozenset(p) for p in pins.values() if len(p) < D}:
        inside = sorted(n for n, p in pins.items() if p <= s)
        need = int(sum(int(sizes[n]) for n in inside))
        have = int(room[sorted(s)].sum())
        if need > have:
            return (f"constraints.tables: the tables pinned within devices {sorted(s)} ({', '.join(inside)}) need {need:,} bytes, but "
                    f"those devices hold {have:,} bytes of HBM and host memory together")
    return None


def _host_only_without_host(instance: Instance, pins: dict[str, set[int]]) -> str | None:
    c = instance.constraints
    host = instance.topology.host_capacities()
    for tc in c.tables if c is not None else []:
        if tc.kernels is not None and Kernel.fused not in tc.kernels and not any(host[d] > 0 for d in pins[tc.table]):
            return (f"constraints.tables: table {tc.table!r} may only be in host memory ({', '.join(k.value for k in tc.kernels)}), "
                    f"but its devices {sorted(pins[tc.table])} have none")
    return None


def _spanning(instance: Instance, pins: dict[str, set[int]]) -> str | None:
    """A table whose sharding types put shards on every device (row_wise in TorchRec's layout, with a block per
    device; data_parallel), pinned off one or kept apart from another table; a table_row_wise-only one pinned within
    no whole host (of several)."""
    c = instance.constraints
    topo = instance.topology
    D = topo.num_devices
    rows = {t.name: t.rows for t in instance.tables}
    apart = {n: {m for g in c.separate if n in g for m in g} - {n} for n in pins} if c is not None else {}
    for tc in c.tables if c is not None else []:
        types = set(tc.sharding_types or ())
        if not types or types & {"table_wise", "column_wise", "table_column_wise", "grid_shard"}:
            continue
        spans = {"data_parallel": True, "row_wise": all(n > 0 for _, n in rw_layout(rows[tc.table], D)),
                 "table_row_wise": topo.num_intra_groups == 1 and all(n > 0 for _, n in rw_layout(rows[tc.table], D))}
        everywhere = all(spans.get(k, False) for k in types)
        if everywhere and len(pins[tc.table]) < D:
            return (f"constraints.tables: table {tc.table!r} may only be {', '.join(sorted(types))}, which puts a shard on every "
                    f"device, but it is pinned to {sorted(pins[tc.table])}")
        if everywhere and apart[tc.table]:
            return (f"constraints.separate: table {tc.table!r} may only be {', '.join(sorted(types))}, which puts a shard on every "
                    f"device, so {sorted(apart[tc.table])[0]!r}, kept apart from it, has no device")
        if types <= {"table_row_wise"} and topo.num_intra_groups > 1:
            size = topo.intra_group_size
            hosts = [set(range(h * size, (h + 1) * size)) for h in range(topo.num_intra_groups)]
            if not any(h <= pins[tc.table] for h in hosts):
                return (f"constraints.tables: table {tc.table!r} may only be table_row_wise, which puts it on every device of one "
                        f"host, but its pins {sorted(pins[tc.table])} hold no whole host (hosts of {size} devices)")
    return None
