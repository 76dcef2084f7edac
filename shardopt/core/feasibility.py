"""Necessary conditions for a table-wise plan to exist, each with a reason a person can act on.

The published systems put a table that fits nowhere on the last device and carried on; here an instance that
fails one of these conditions is reported infeasible with the table or the byte count that makes it so.

The other direction, a sufficient condition: `constructive_tiered_plan` builds one plan with row-wise and UVM
shards (a feasibility witness, not a good plan), which the `huge` and `tiered` instance families use to guarantee
that every instance they emit has a plan.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from shardopt.core.ir import Instance, Kernel, Shard
from shardopt.core.memory import cache_bytes, device_state_bytes, slice_bytes, table_bytes_array


def infeasibility_reason(instance: Instance) -> str | None:
    """Why no table-wise plan can exist, or None when these necessary conditions hold.

    Conditions: every table fits on the largest device on its own; all tables fit in the devices' total memory.
    Passing them does not prove a plan exists (bin packing is NP-hard); failing either proves none does.
    """
    sizes = table_bytes_array(instance)
    caps = instance.topology.capacities()
    largest = max(caps)
    for t, size in zip(instance.tables, sizes):
        if size > largest:
            return (
                f"table {t.name!r} needs {int(size):,} bytes (weights and {instance.workload.optimizer.value} state) "
                f"but the largest device holds {largest:,} bytes: it fits on no device"
            )
    total, room = int(sizes.sum()), sum(caps)
    if total > room:
        return f"the tables need {total:,} bytes in all but the {len(caps)} devices hold {room:,}: short by {total - room:,} bytes"
    return None


def tiered_infeasibility_reason(instance: Instance) -> str | None:
    """Why no plan of any kind (row-wise splits, UVM placements included) can exist, or None.

    With row-wise shards a table is no longer bound to one device, and a UVM shard (`fused_uvm`) keeps nothing in
    HBM, so the one condition every plan needs is that the tables fit in all the cluster's HBM and host memory
    together. Failing it proves no plan exists; passing it is necessary only (shards are whole rows).
    """
    sizes = table_bytes_array(instance)
    topo = instance.topology
    hbm, host = sum(topo.capacities()), sum(topo.host_capacities())
    total = int(sizes.sum())
    if total > hbm + host:
        where = f"{hbm:,} bytes of HBM and {host:,} of host memory" if host else f"{hbm:,} bytes of HBM and no host memory"
        return f"the tables need {total:,} bytes in all but the {topo.num_devices} devices have {where}: short by {total - hbm - host:,} bytes"
    return None


# ---------------------------------------------------------------------------------------------------------------
# A constructive witness: one plan, any plan, that proves an instance with row-wise and UVM placements feasible


DEFAULT_CACHE_LOAD_FACTOR = 0.2  # TorchRec's default cache_load_factor for fused_uvm_caching
_HBM_FILLS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)  # shares of HBM planned for, in turn


def constructive_tiered_plan(instance: Instance, *, cache_load_factor: float = DEFAULT_CACHE_LOAD_FACTOR) -> list[Shard] | None:
    """A plan that fits both memory tiers, built without a cost model, or None when this construction finds none.

    It is a feasibility witness: the instance generators use it to guarantee that every `huge` and `tiered`
    instance has a plan, and tests use it as a known-valid plan with row-wise and UVM shards. It makes no attempt at
    a low cost (no solver should return it as its answer). Every shard spans all columns. The construction:

    1. Tiers. Every table starts in HBM (`fused`). While the HBM tables need more than `fill` x the cluster's HBM,
       the coldest table (fewest looked-up bytes per stored byte, pooling_factor x dim / bytes; then the larger,
       then by name) moves to host memory (`fused_uvm`); when host memory cannot take all of it, only the rows that
       fit move (the table is then split by rows between the tiers) and nothing colder moves. Then the host parts,
       hottest first, get an HBM cache of `cache_load_factor` x their rows (`fused_uvm_caching`) while the caches
       still fit in that budget.
    2. Packing, largest part first within each tier (HBM, then cached, then uncached): a part goes whole onto the
       device with the most free room in its tier (HBM for `fused`, host memory otherwise) that holds it, cache
       included; a part that fits on no device is split into row blocks, each as many rows as the next device
       (most free room first) holds, until every row is placed -- the row-wise first fit, which splits a table
       larger than any device's HBM by rows. A part whose HBM placement or cache finds no room falls back to the
       next tier (cached, then uncached host memory) when there is host memory.
    3. If the packing fails, step 1 is redone with a smaller `fill` (1.0, 0.95, 0.9, 0.8, ..., 0.0), so more goes
       to host memory; without host memory only fill 1.0 is tried.

    None means this construction failed, not that no plan exists (the exact question is bin packing); it is None
    whenever `tiered_infeasibility_reason` gives a reason. A plan it returns passes
    shardopt.core.plan_check.check_plan (the generators and tests check that again).
    """
    if not 0 < cache_load_factor <= 1:
        raise ValueError(f"cache_load_factor: {cache_load_factor} must be in (0, 1]")
    if tiered_infeasibility_reason(instance) is not None:
        return None
    topo = instance.topology
    tables = instance.tables
    sizes = [int(s) for s in table_bytes_array(instance)]
    row_bytes = [slice_bytes(instance, t, 1, t.dim) for t in tables]  # weights + state of one row: bytes are linear in rows
    hbm = np.array(topo.capacities(), dtype=np.int64)
    host = np.array(topo.host_capacities(), dtype=np.int64)
    host_total = int(host.sum())
    heat = [t.pooling_factor * t.dim / max(s, 1) for t, s in zip(tables, sizes)]
    coldest = sorted(range(len(tables)), key=lambda i: (heat[i], -sizes[i], tables[i].name))
    fills = _HBM_FILLS if host_total > 0 else _HBM_FILLS[:1]
    for fill in fills:
        budget = fill * float(hbm.sum())
        host_rows = [0] * len(tables)  # rows of each table (its last rows) that go to host memory
        need, in_host = sum(sizes), 0
        for i in coldest:
            if need <= budget:
                break
            # whole rows per device: one row fewer per device than the total allows, for the per-device rounding;
            # a host row leaves its rowwise optimizer state in HBM (memory.py)
            host_row = row_bytes[i] - device_state_bytes(instance, 1, tables[i].dim)
            rows = min(tables[i].rows, max((host_total - in_host) // host_row - len(host), 0))
            host_rows[i] = rows
            need -= rows * host_row
            in_host += rows * host_row
            if rows < tables[i].rows:
                break  # host memory is full
        if need > budget:
            break  # a smaller fill needs still more host memory
        parts: list[_Part] = []
        for i in coldest:
            t = tables[i]
            if host_rows[i] < t.rows:
                parts.append(_Part(i, 0, t.rows - host_rows[i], Kernel.fused))
        for i in reversed(coldest):  # hottest host parts get their caches first
            t, rows = tables[i], host_rows[i]
            if rows == 0:
                continue
            cache = cache_bytes(instance, t, min(rows, math.ceil(cache_load_factor * rows)), t.dim)
            kernel = Kernel.fused_uvm
            if need + cache <= budget:
                kernel = Kernel.fused_uvm_caching
                need += cache
            parts.append(_Part(i, t.rows - rows, rows, kernel))
        shards = _pack(instance, parts, row_bytes, hbm.copy(), host.copy(), cache_load_factor)
        if shards is not None:
            return shards
    return None


class _Part(NamedTuple):
    table: int  # index in instance.tables
    row_offset: int
    rows: int
    kernel: Kernel


_RANK = {Kernel.fused: 0, Kernel.fused_uvm_caching: 1, Kernel.fused_uvm: 2}
_FALLBACKS = {
    Kernel.fused: (Kernel.fused, Kernel.fused_uvm_caching, Kernel.fused_uvm),
    Kernel.fused_uvm_caching: (Kernel.fused_uvm_caching, Kernel.fused_uvm),
    Kernel.fused_uvm: (Kernel.fused_uvm,),
}


def _pack(instance: Instance, parts: list[_Part], row_bytes: list[int], hbm_free: np.ndarray, host_free: np.ndarray,
          clf: float) -> list[Shard] | None:
    tables = instance.tables
    order = sorted(parts, key=lambda p: (_RANK[p.kernel], -p.rows * row_bytes[p.table], tables[p.table].name, p.row_offset))
    has_host = bool(host_free.sum() > 0)
    shards: list[Shard] = []
    for part in order:
        placed = None
        for kernel in _FALLBACKS[part.kernel]:
            if kernel is not Kernel.fused and not has_host:
                break
            placed = _place(instance, part._replace(kernel=kernel), row_bytes[part.table], hbm_free, host_free, clf)
            if placed is not None:
                shards.extend(placed)
                break
        if placed is None:
            return None
    return shards


def _place(instance: Instance, part: _Part, row_hbm: int, hbm_free: np.ndarray, host_free: np.ndarray, clf: float) -> list[Shard] | None:
    """One part, whole or in row blocks; the free arrays change only when it is placed."""
    t, k = instance.tables[part.table], part.kernel
    slot = cache_bytes(instance, t, 1, t.dim)  # one cache slot
    state = device_state_bytes(instance, 1, t.dim)  # per row: rowwise optimizer state stays in HBM (memory.py)

    def hbm_of(rows: int) -> int:
        if k is Kernel.fused:
            return rows * row_hbm
        if k is Kernel.fused_uvm_caching:
            return min(rows, math.ceil(clf * rows)) * slot + rows * state  # as Shard.cache_rows counts it
        return rows * state

    def host_of(rows: int) -> int:
        return 0 if k is Kernel.fused else rows * (row_hbm - state)

    def most_rows(d: int, limit: int) -> int:
        if k is Kernel.fused:
            return min(limit, int(hbm_free[d]) // row_hbm)
        limit = min(limit, int(host_free[d]) // (row_hbm - state))
        per_row = (clf * slot if k is Kernel.fused_uvm_caching else 0.0) + state
        if per_row > 0:
            limit = min(limit, int(int(hbm_free[d]) / per_row))
            while limit > 0 and hbm_of(limit) > hbm_free[d]:
                limit -= 1
        return max(limit, 0)

    extra: dict = {"kernel": k, "cache_load_factor": clf if k is Kernel.fused_uvm_caching else None}
    whole = part.row_offset == 0 and part.rows == t.rows
    room = hbm_free if k is Kernel.fused else host_free
    by_room = sorted(range(len(room)), key=lambda d: (-int(room[d]), d))
    for d in by_room:  # in one piece, on the roomiest device that holds it
        if hbm_of(part.rows) <= hbm_free[d] and host_of(part.rows) <= host_free[d]:
            hbm_free[d] -= hbm_of(part.rows)
            host_free[d] -= host_of(part.rows)
            rows = {} if whole else {"row_offset": part.row_offset, "rows": part.rows}
            return [Shard(table=t.name, device=d, **rows, **extra)]
    blocks, start, end = [], part.row_offset, part.row_offset + part.rows
    for d in by_room:  # the row-wise first fit
        if start >= end:
            break
        r = most_rows(d, end - start)
        if r > 0:
            blocks.append((d, start, r))
            start += r
    if start < end:
        return None
    out = []
    for d, r0, r in blocks:
        hbm_free[d] -= hbm_of(r)
        host_free[d] -= host_of(r)
        out.append(Shard(table=t.name, device=d, row_offset=r0, rows=r, **extra))
    return out
