"""Re-planning from a previous plan: the model changed (tables added, grown, removed), and moving a table between
devices costs a checkpoint reshuffle, so the new plan is optimised under a budget of bytes moved, or with the moved
bytes priced into the objective (TorchRec's `PlanLoader`, 2025, lets a stored plan seed the next one; this goes
further and trades cost against movement).

Bytes moved: for every shard of the new plan, the bytes of its (rows x columns) region that its device did not hold
in the old plan (the old shards of the same table, clipped to the table's new shape); a new table's shards are
created, not moved (0). Tier changes on one device (HBM <-> host memory) are not counted.

How a plan is found (`replan`), for any solver:
1. carry over: every old table still present whose old shards still tile it keeps them (a plan does not record
   table shapes: a table-wise table that grew stays where it was, with its new bytes; one whose row or column shards
   no longer tile its new shape is "resized" and re-placed like a new one; removed tables are dropped); kept shards
   on a device that no longer has room in either tier are released, largest first, until it has;
2. the warm start: the re-placed and new tables placed table-wise onto the kept ones, each on the device whose
   predicted compute after adding it is lowest where it fits (0 bytes moved);
3. the solver's own plan from scratch, its devices relabelled (among interchangeable devices: equal HBM and host
   memory, within a host or whole hosts) to keep the most bytes where they were (a relabelling that changes the
   predicted cost is not used);
4. from each start (the warm start walked toward the scratch plan first, where the solver has one: each table
   changed to its scratch shards when that lowers the objective, most gain per byte first), a local search over whole tables (every shard of a table moved at once): moves of a table off
   the bottleneck device, and moves of a table back to its old shards, accepted when they lower the objective
   (the plan cost, with `move_weight` plus that many ms per GiB moved) and keep the moved bytes within
   `max_moved_bytes`; from the scratch plan first the tables whose return saves the most bytes per ms of cost are
   moved back until the budget holds; then single shards moved off the bottleneck or swapped with a shard
   elsewhere (solvers.placement.plan_moves), priced the same way; the two searches alternate until neither improves.
The best plan by the objective within the budget is returned, with its moved bytes and the scratch plan's cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from costmodels.hierarchical import OUTPUT_DIST_ORDER
from shardopt.core.ir import Instance, Plan, Shard, Table
from shardopt.core.memory import shard_bytes, shard_host_bytes, table_bytes
from shardopt.core.plan_check import check_plan, constraint_violations
from solvers.base import Budget, ReplanReport, Solver, SolveResult, SolveStatus, StopReason, Stopwatch, fail, finish
from solvers.placement.polish import comm_totals, table_contribution

GIB = float(2**30)


# ---- what moved ---------------------------------------------------------------------------------------------


def _region(shard: Shard, table: Table) -> tuple[int, int, int, int]:
    """(row start, row end, col start, col end) of a shard (a replica holds the whole table)."""
    if shard.replicated:
        return 0, table.rows, 0, table.dim
    return shard.row_offset, shard.row_offset + shard.height(table), shard.col_offset, shard.col_offset + shard.width(table)


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> int:
    rows = min(a[1], b[1]) - max(a[0], b[0])
    cols = min(a[3], b[3]) - max(a[2], b[2])
    return max(rows, 0) * max(cols, 0)


def _regions_by_device(old: list[Shard], table: Table) -> dict[int, list[tuple[int, int, int, int]]]:
    """The old shards' regions of one table per device, clipped to the table's (new) shape."""
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for s in old:
        r0, r1, c0, c1 = s.row_offset, s.row_offset + (s.rows if s.rows is not None else table.rows), s.col_offset, s.col_offset + (s.cols if s.cols is not None else table.dim)
        if s.replicated:
            r0, r1, c0, c1 = 0, table.rows, 0, table.dim
        r1, c1 = min(r1, table.rows), min(c1, table.dim)
        if r1 > r0 and c1 > c0:
            out.setdefault(s.device, []).append((r0, r1, c0, c1))
    return out


def table_moved_bytes(instance: Instance, table: Table, old: list[Shard], new: list[Shard]) -> int:
    """Bytes of `table` the new shards' devices did not hold in the old plan (0 for a table the old plan lacks)."""
    if not old:
        return 0
    held = _regions_by_device(old, table)
    per_element = table_bytes(instance, table) / (table.rows * table.dim)
    moved = 0.0
    for s in new:
        reg = _region(s, table)
        area = (reg[1] - reg[0]) * (reg[3] - reg[2])
        kept = sum(_overlap(reg, h) for h in held.get(s.device, []))  # (old shards of a table do not overlap)
        moved += (area - min(kept, area)) * per_element
    return int(round(moved))


def moved_bytes(instance: Instance, old: Plan | list[Shard], new: Plan | list[Shard]) -> int:
    """Bytes moved going from the old plan to the new one (the module docstring's definition)."""
    old_shards = old.shards if isinstance(old, Plan) else old
    new_shards = new.shards if isinstance(new, Plan) else new
    by_old: dict[str, list[Shard]] = {}
    for s in old_shards:
        by_old.setdefault(s.table, []).append(s)
    by_new: dict[str, list[Shard]] = {}
    for s in new_shards:
        by_new.setdefault(s.table, []).append(s)
    return sum(table_moved_bytes(instance, t, by_old.get(t.name, []), by_new.get(t.name, [])) for t in instance.tables)


# ---- carrying the old plan over -----------------------------------------------------------------------------


@dataclass
class CarryOver:
    """What of the old plan still applies: the kept shards per table, and the tables to (re-)place."""

    kept: dict[int, list[Shard]]  # table index -> its old shards (shape unchanged, devices valid, room left)
    todo: list[int]  # tables to place: new, resized, or released
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # kept shape, but their device no longer had room

    def report(self) -> dict[str, Any]:
        return {"kept_tables": len(self.kept), "added": self.added, "removed": self.removed, "resized": self.resized, "released": self.released}


def _tiles(table: Table, shards: list[Shard]) -> bool:
    """Whether the shards cover the table exactly (each shard inside it, areas adding up to rows x dim; replicas:
    whole-table copies)."""
    if any(s.replicated for s in shards):
        return all(s.replicated and s.rows is None and s.cols is None and s.row_offset == 0 and s.col_offset == 0 for s in shards)
    area = 0
    for s in shards:
        r1 = s.row_offset + (s.rows if s.rows is not None else table.rows - s.row_offset)
        c1 = s.col_offset + (s.cols if s.cols is not None else table.dim - s.col_offset)
        if r1 > table.rows or c1 > table.dim:
            return False
        area += (r1 - s.row_offset) * (c1 - s.col_offset)
    return area == table.rows * table.dim


def carry_over(instance: Instance, old: Plan) -> CarryOver:
    """Match the old plan's tables to the instance's by name (module docstring, step 1)."""
    index = instance.table_index()
    D = instance.topology.num_devices
    by_old: dict[str, list[Shard]] = {}
    for s in old.shards:
        by_old.setdefault(s.table, []).append(s)
    out = CarryOver({}, [])
    out.removed = sorted(name for name in by_old if name not in index)
    for i, t in enumerate(instance.tables):
        mine = by_old.get(t.name)
        if not mine:
            out.added.append(t.name)
            out.todo.append(i)
        elif any(s.device >= D for s in mine) or not _tiles(t, mine):
            out.resized.append(t.name)
            out.todo.append(i)
        else:
            out.kept[i] = mine
    # devices without room for what they keep (capacities or optimizer may have changed): release largest first
    caps = np.array(instance.topology.capacities(), dtype=np.int64)
    hosts = np.array(instance.topology.host_capacities(), dtype=np.int64)
    hbm, host = np.zeros(D, dtype=np.int64), np.zeros(D, dtype=np.int64)
    for i, shards in out.kept.items():
        for s in shards:
            hbm[s.device] += shard_bytes(instance, instance.tables[i], s)
            host[s.device] += shard_host_bytes(instance, instance.tables[i], s)
    for d in np.flatnonzero((hbm > caps) | (host > hosts)):
        on_d = sorted((i for i, sh in out.kept.items() if any(s.device == d for s in sh)), key=lambda i: -table_bytes(instance, instance.tables[i]))
        for i in on_d:
            if hbm[d] <= caps[d] and host[d] <= hosts[d]:
                break
            for s in out.kept.pop(i):
                hbm[s.device] -= shard_bytes(instance, instance.tables[i], s)
                host[s.device] -= shard_host_bytes(instance, instance.tables[i], s)
            out.released.append(instance.tables[i].name)
            out.todo.append(i)
    out.todo.sort()
    return out


# ---- the plan as the local search changes it --------------------------------------------------------------


class _State:
    """Shards per table with each device's summed state, width, extra comm and bytes per tier: a table's shards are
    replaced as a unit and the plan cost re-evaluated incrementally."""

    def __init__(self, instance: Instance, bm: BoundCostModel, groups: dict[int, list[Shard]], old: dict[int, list[Shard]], weight: float):
        self.instance, self.bm, self.old, self.weight = instance, bm, old, weight
        D = bm.num_devices
        self.caps = np.array(instance.topology.capacities(), dtype=np.int64)
        self.hosts = np.array(instance.topology.host_capacities(), dtype=np.int64)
        self.groups = dict(groups)
        self.contrib = {t: table_contribution(instance, bm, t, g) for t, g in self.groups.items()}
        self.moved = {t: table_moved_bytes(instance, instance.tables[t], old.get(t, []), g) for t, g in self.groups.items()}
        self.S = np.zeros((D, bm.state_size))
        self.dims, self.extra = np.zeros((len(OUTPUT_DIST_ORDER), D)), np.zeros(D)  # widths by output dist [G, D]
        self.hbm, self.host = np.zeros(D, dtype=np.int64), np.zeros(D, dtype=np.int64)
        self.hier = np.zeros(instance.topology.num_intra_groups)  # each group's hierarchical width (row splits within it)
        for c in self.contrib.values():
            self._add(c, 1)
        self.old_regions = {t: _regions_by_device(g, instance.tables[t]) for t, g in old.items()}
        self.totals = self._totals()

    def _add(self, c: tuple, sign: int) -> None:
        self.S += sign * c[0]
        self.dims += sign * c[1]
        self.extra += sign * c[2]
        self.hbm += sign * c[3]
        self.host += sign * c[4]
        self.hier += sign * c[5]

    def comm(self, dims: np.ndarray, hier: np.ndarray | None = None) -> np.ndarray:
        """fwd + bwd comm per device ([..., G, D] widths by output dist): the all-to-alls and the hierarchical
        collectives."""
        return comm_totals(self.bm, dims, self.hier if hier is None else hier)

    def _totals(self) -> np.ndarray:
        self.compute = self.bm.compute_costs(self.S, self.bm.devices).sum(axis=-1)
        return self.compute + self.comm(self.dims) + self.extra

    @property
    def cost(self) -> float:
        return float(self.totals.max())

    @property
    def moved_bytes(self) -> int:
        return int(sum(self.moved.values()))

    def objective(self, cost: float, moved: int) -> float:
        return cost + self.weight * moved / GIB

    def trial(self, t: int, shards: list[Shard]) -> tuple[float, int, tuple] | None:
        """(cost, moved bytes, contribution) with table t's shards replaced, or None when memory does not hold."""
        new = table_contribution(self.instance, self.bm, t, shards)
        old = self.contrib[t]
        if (self.hbm - old[3] + new[3] > self.caps).any() or (self.host - old[4] + new[4] > self.hosts).any():
            return None
        S = self.S - old[0] + new[0]
        tot = self.bm.compute_costs(S, self.bm.devices).sum(axis=-1) + self.comm(self.dims - old[1] + new[1], self.hier - old[5] + new[5]) + self.extra - old[2] + new[2]
        mv = self.moved_bytes - self.moved[t] + table_moved_bytes(self.instance, self.instance.tables[t], self.old.get(t, []), shards)
        return float(tot.max()), mv, new

    def apply(self, t: int, shards: list[Shard], new: tuple) -> None:
        self._add(self.contrib[t], -1)
        self._add(new, 1)
        self.groups[t], self.contrib[t] = shards, new
        self.moved[t] = table_moved_bytes(self.instance, self.instance.tables[t], self.old.get(t, []), shards)
        self.totals = self._totals()

    def shards(self) -> list[Shard]:
        return [s for t in sorted(self.groups) for s in self.groups[t]]


def _budget_ok(moved: int, budget: int | None) -> bool:
    return budget is None or moved <= budget


def _moved_if_on(st: _State, t: int, device: int) -> int:
    """Bytes table t would have moved with all its current shards on `device`."""
    if t not in st.old:
        return 0
    table = st.instance.tables[t]
    per_element = table_bytes(st.instance, table) / (table.rows * table.dim)
    held = st.old_regions[t].get(device, [])
    moved = 0.0
    for s in st.groups[t]:
        reg = _region(s, table)
        area = (reg[1] - reg[0]) * (reg[3] - reg[2])
        moved += (area - min(area, sum(_overlap(reg, h) for h in held))) * per_element
    return int(round(moved))


def _local_search(st: _State, budget: int | None, time: Budget) -> int:
    """Returns of tables to their old shards and whole-table moves off the bottleneck (a table whose shards all sit
    on it, to every other device in order: all such moves of one table costed in one batched call), first
    improvement of the objective within the budget."""
    steps = 0
    bm = st.bm
    while not time.spent():
        cur = st.objective(st.cost, st.moved_bytes)
        hot = int(np.argmax(st.totals))
        improved = False
        # returns first: they lower the moved bytes and often the cost of the device they leave
        for t in sorted(st.groups):
            if t in st.old and st.moved[t] > 0 and any(s.device == hot for s in st.groups[t]):
                got = st.trial(t, st.old[t])
                if got is not None and _budget_ok(got[1], budget) and st.objective(got[0], got[1]) < cur - 1e-12:
                    st.apply(t, st.old[t], got[2])
                    improved = True
                    break
        if not improved:
            for t in sorted(st.groups):
                if not all(s.device == hot and not s.replicated for s in st.groups[t]):
                    continue
                c = st.contrib[t]
                x, w, hb, hh = c[0][hot], c[1][:, hot], c[3][hot], c[4][hot]
                ok = (st.hbm + hb <= st.caps) & (st.host + hh <= st.hosts)
                ok[hot] = False
                cands = np.flatnonzero(ok)
                if not len(cands):
                    continue
                k = np.arange(len(cands))
                new = bm.compute_costs(np.concatenate([st.S[hot][None] - x, st.S[cands] + x]), np.concatenate([[hot], cands])).sum(axis=-1)
                dk = np.repeat(st.dims[None], len(cands), axis=0)  # [k, G, D]
                dk[:, :, hot] -= w
                dk[k, :, cands] += w
                tot = st.comm(dk) + st.compute[None, :] + st.extra[None, :]
                tot[:, hot] += new[0] - st.compute[hot]
                tot[k, cands] += new[1:] - st.compute[cands]
                base = st.moved_bytes - st.moved[t]
                moved = np.array([base + _moved_if_on(st, t, int(d)) for d in cands])
                obj = tot.max(axis=1) + st.weight * moved / GIB
                good = np.flatnonzero((obj < cur - 1e-12) & ((moved <= budget) if budget is not None else True))
                if len(good):
                    d = int(cands[good[0]])
                    shards = [sh.model_copy(update={"device": d}) for sh in st.groups[t]]
                    st.apply(t, shards, table_contribution(st.instance, bm, t, shards))
                    improved = True
                    break
                if time.spent():
                    break
        if not improved:
            break
        steps += 1
    return steps


class _ShardMoved:
    """Bytes each shard of a plan would have moved on each device: its area minus what that device held of it in
    the old plan (0 for a new table's shards). Fixed per shard, so moves and swaps are priced from a lookup."""

    def __init__(self, st: _State, shards: list[Shard]):
        index = st.instance.table_index()
        self.area = np.zeros(len(shards))
        self.kept: list[dict[int, float]] = []
        for s in shards:
            t = index[s.table]
            table = st.instance.tables[t]
            if t not in st.old:
                self.kept.append({})
                continue
            per_element = table_bytes(st.instance, table) / (table.rows * table.dim)
            reg = _region(s, table)
            self.area[len(self.kept)] = (reg[1] - reg[0]) * (reg[3] - reg[2]) * per_element
            self.kept.append({d: min(sum(_overlap(reg, h) for h in regs) * per_element, self.area[len(self.kept)])
                              for d, regs in st.old_regions[t].items()})

    def on(self, p: int, devices: np.ndarray) -> np.ndarray:
        kept = self.kept[p]
        return self.area[p] - np.array([kept.get(int(d), 0.0) for d in devices])


def _shard_search(st: _State, budget: int | None, time: Budget) -> int:
    """Single shards moved off the bottleneck device, or swapped with a shard elsewhere (solvers.placement.plan_moves: both
    memory tiers checked, pieces of one table kept apart), the best change of the first shard that has an improving
    one taken, while the objective improves and the moved bytes stay within the budget. Finer than the whole-table
    moves of `_local_search`: a column piece can leave without its sibling, and a swap frees room a move lacks."""
    from solvers.placement.plan_moves import PlanShards

    ps = PlanShards(st.instance, st.bm, st.shards())
    mv = _ShardMoved(st, ps.shards)
    moved = np.array([mv.on(p, np.array([d]))[0] for p, d in enumerate(ps.device)])
    steps = 0
    while not time.spent():
        cur = st.objective(ps.cost, int(round(moved.sum())))
        hot = ps.bottleneck
        improved = False
        for p in np.flatnonzero(ps.device == hot):
            p = int(p)
            base = moved.sum() - moved[p]
            cands, tot = ps.moves(p)
            if len(cands):
                after = base + mv.on(p, cands)
                obj = tot.max(axis=1) + st.weight * after / GIB
                ok = (obj < cur - 1e-12) & ((after <= budget + 0.5) if budget is not None else True)
                if ok.any():
                    j = int(np.flatnonzero(ok)[np.argmin(obj[ok])])
                    ps.device[p] = int(cands[j])
                    moved[p] = after[j] - base
                    improved = True
            if not improved:
                qs, tot = ps.swaps(p)
                if len(qs):
                    dq = ps.device[qs]
                    new_p = mv.on(p, dq)
                    new_q = np.array([mv.on(int(q), np.array([hot]))[0] for q in qs])
                    after = base - moved[qs] + new_p + new_q
                    obj = tot.max(axis=1) + st.weight * after / GIB
                    ok = (obj < cur - 1e-12) & ((after <= budget + 0.5) if budget is not None else True)
                    if ok.any():
                        j = int(np.flatnonzero(ok)[np.argmin(obj[ok])])
                        q = int(qs[j])
                        ps.device[p], ps.device[q] = int(dq[j]), hot
                        moved[p], moved[q] = new_p[j], new_q[j]
                        improved = True
            if improved:
                ps.refresh()
                steps += 1
                break
            if time.spent():
                break
        if not improved:
            break
    if steps:
        before = dict(st.groups)
        groups: dict[int, list[Shard]] = {}
        index = st.instance.table_index()
        for sh in ps.plan():
            groups.setdefault(index[sh.table], []).append(sh)
        changed = [t for t, g in groups.items() if g != st.groups[t]]
        for t in changed:
            st.apply(t, groups[t], table_contribution(st.instance, st.bm, t, groups[t]))
        if not _budget_ok(st.moved_bytes, budget):  # (per-table rounding of the recount: never over the budget)
            for t in changed:
                st.apply(t, before[t], table_contribution(st.instance, st.bm, t, before[t]))
            return 0
    return steps


def _return_until_within(st: _State, budget: int, time: Budget) -> bool:
    """Move tables back to their old shards, most bytes saved per ms of cost added first, until the moved bytes
    are within the budget. Whether it got there."""
    while st.moved_bytes > budget and not time.spent():
        best: tuple[float, int, tuple] | None = None
        for t in sorted(st.groups):
            if t not in st.old or st.moved[t] == 0:
                continue
            got = st.trial(t, st.old[t])
            if got is None:
                continue
            saved = st.moved_bytes - got[1]
            if saved <= 0:
                continue
            score = (got[0] - st.cost) / saved  # ms added per byte saved (negative: cheaper too)
            if best is None or score < best[0]:
                best = (score, t, got)
        if best is None:
            return False
        _, t, got = best
        st.apply(t, st.old[t], got[2])
    return st.moved_bytes <= budget


# ---- starts -----------------------------------------------------------------------------------------------------


def warm_start(instance: Instance, bm: BoundCostModel, carried: CarryOver, max_pieces: int = 8) -> dict[int, list[Shard]] | None:
    """The kept shards plus each table to place (largest predicted single cost first) in HBM on the device with room
    whose predicted compute after adding it is lowest: whole, or, where no device has room for it whole, halved by
    columns (halves on different devices, up to `max_pieces` pieces of 4-aligned widths). Nothing kept moves (0
    bytes moved). None when some table finds no room even so."""
    D = bm.num_devices
    caps = np.array(instance.topology.capacities(), dtype=np.int64)
    groups = dict(carried.kept)
    S = np.zeros((D, bm.state_size))
    used = np.zeros(D, dtype=np.int64)
    for t, g in groups.items():
        c = table_contribution(instance, bm, t, g)
        S += c[0]
        used += c[3]
    order = sorted(carried.todo, key=lambda t: (-float(bm.single_table_costs[t]), t))
    for t in order:
        table = instance.tables[t]
        parts = 1
        while True:
            width = table.dim // parts
            if parts > 1 and (table.dim % parts or width % 4 or width < 4 or parts > min(max_pieces, D)):
                return None
            state = bm.shard_state(t, width)
            size = shard_bytes(instance, table, Shard(table=table.name, device=0, col_offset=0, cols=width) if parts > 1 else Shard(table=table.name, device=0))
            free = used.copy()
            placed: list[Shard] = []
            S_try = S.copy()
            for k in range(parts):
                ok = free + size <= caps
                ok[[sh.device for sh in placed]] = False
                if not ok.any():
                    break
                new = bm.compute_costs(S_try + state, bm.devices).sum(axis=-1)
                d = int(np.argmin(np.where(ok, new, np.inf)))
                placed.append(Shard(table=table.name, device=d) if parts == 1 else Shard(table=table.name, device=d, col_offset=k * width, cols=width))
                S_try[d] += state
                free[d] += size
            if len(placed) == parts:
                groups[t], S, used = placed, S_try, free
                break
            parts *= 2
    return groups


def _toward(st: _State, target: dict[int, list[Shard]], budget: int | None, time: Budget) -> int:
    """From the plan in `st`, tables changed to their shards in `target` (the scratch plan), the one that lowers
    the objective most per byte it moves first, while the budget and memory hold and the objective improves."""
    steps = 0
    while not time.spent():
        cur = st.objective(st.cost, st.moved_bytes)
        best: tuple[float, int, tuple] | None = None
        for t in sorted(target):
            if t not in st.groups or st.groups[t] == target[t]:
                continue
            got = st.trial(t, target[t])
            if got is None or not _budget_ok(got[1], budget):
                continue
            gain = cur - st.objective(got[0], got[1])
            if gain <= 1e-12:
                continue
            score = gain / max(got[1] - st.moved_bytes, 1)
            if best is None or score > best[0]:
                best = (score, t, got)
        if best is None:
            break
        _, t, got = best
        st.apply(t, target[t], got[2])
        steps += 1
    return steps


def _device_classes(instance: Instance) -> list[list[int]]:
    """Devices that can trade places without changing the model: equal HBM and host memory on the same host (and in
    the same innermost group of topology levels, where that is smaller than a host)."""
    topo = instance.topology
    per = min(topo.devices_per_host, topo.levels[0].devices) if topo.levels else topo.devices_per_host
    classes: dict[tuple, list[int]] = {}
    for d in range(topo.num_devices):
        classes.setdefault((d // per, topo.capacity(d), topo.host_capacity(d)), []).append(d)
    return list(classes.values())


def relabel(instance: Instance, bm: BoundCostModel, shards: list[Shard], old: dict[int, list[Shard]]) -> list[Shard]:
    """The plan with its devices relabelled within interchangeable classes (and whole hosts of equal shape swapped)
    to keep the most old bytes in place (an assignment problem per class, solved exactly); the relabelling is only
    used if the predicted cost stays the same."""
    from scipy.optimize import linear_sum_assignment

    D = instance.topology.num_devices
    index = instance.table_index()
    # kept[d_new, d_old]: bytes the plan's device d_new would keep if it became device d_old
    keep = np.zeros((D, D))
    for s in shards:
        t = index[s.table]
        if t not in old:
            continue
        table = instance.tables[t]
        per_element = table_bytes(instance, table) / (table.rows * table.dim)
        reg = _region(s, table)
        for d_old, regs in _regions_by_device(old[t], table).items():
            keep[s.device, d_old] += sum(_overlap(reg, h) for h in regs) * per_element
    mapping = np.arange(D)
    for cls in _device_classes(instance):
        if len(cls) < 2:
            continue
        sub = keep[np.ix_(cls, cls)]
        rows, cols = linear_sum_assignment(-sub)
        for r, c in zip(rows, cols):
            mapping[cls[r]] = cls[c]
    per = instance.topology.devices_per_host
    # (with topology levels, a host swapped into another NVLink domain changes the model: none swapped)
    hosts = D // per if instance.topology.num_hosts > 1 and not instance.topology.lists_network else 1
    if hosts > 1 and hosts <= 8:  # whole hosts of the same shape swapped too (after the within-host matching)
        base = mapping.copy()
        shape = [tuple((instance.topology.capacity(h * per + i), instance.topology.host_capacity(h * per + i)) for i in range(per)) for h in range(hosts)]
        best_perm, best_keep = tuple(range(hosts)), -1.0
        for perm in permutations(range(hosts)) if hosts <= 6 else [tuple(range(hosts))]:
            if any(shape[h] != shape[perm[h]] for h in range(hosts)):
                continue
            m = np.array([perm[base[d] // per] * per + base[d] % per for d in range(D)])
            k = float(keep[np.arange(D), m].sum())
            if k > best_keep + 1e-9:
                best_perm, best_keep = perm, k
        mapping = np.array([best_perm[base[d] // per] * per + base[d] % per for d in range(D)])
    out = [s.model_copy(update={"device": int(mapping[s.device])}) for s in shards]
    if not np.isclose(bm.plan_costs(out).max_cost, bm.plan_costs(shards).max_cost, rtol=1e-9, atol=1e-12):
        return shards
    return out


# ---- the whole re-planning solve --------------------------------------------------------------------------------


def replan(
    solver: Solver, instance: Instance, cost_model: CostModel, old: Plan, *, max_moved_bytes: int | None = None, move_weight: float = 0.0,
    time_limit: float | None = None, seed: int = 0,
) -> SolveResult:
    """A plan for `instance` from `old` (module docstring): within `max_moved_bytes` (None: any) and minimising the
    predicted cost plus `move_weight` ms per GiB moved. The result's info has the moved bytes, the scratch plan's
    cost and moves, and what was carried over."""
    from solvers.neuroshard.config import default_budget

    if max_moved_bytes is not None and max_moved_bytes < 0:
        raise ValueError(f"max_moved_bytes: {max_moved_bytes} is negative")
    if move_weight < 0:
        raise ValueError(f"move_weight: {move_weight} is negative")
    clock = Stopwatch()
    bm = cost_model.bind(instance)
    carried = carry_over(instance, old)
    old_groups: dict[int, list[Shard]] = {}
    index = instance.table_index()
    for s in old.shards:
        if s.table in index:
            old_groups.setdefault(index[s.table], []).append(s)
    # the solver's own plan gets half the budget (its own default without one); the local searches the rest (without
    # a limit: neuroshard's size-based default budget, so a large instance still returns in seconds)
    scratch = solver.solve(instance, cost_model, time_limit=None if time_limit is None else 0.5 * time_limit, seed=seed)
    time = Budget.of(clock, time_limit if time_limit is not None else clock.elapsed + default_budget(instance))
    starts: list[tuple[str, dict[int, list[Shard]]]] = []
    warm = warm_start(instance, bm, carried)
    if warm is not None:
        starts.append(("warm_start", warm))
    scratch_info: dict[str, Any] = {"status": scratch.status.value}
    if scratch.plan is not None:
        relabelled = relabel(instance, bm, scratch.plan.shards, old_groups)
        scratch_info.update(cost=float(bm.plan_costs(scratch.plan).max_cost), moved_bytes=moved_bytes(instance, old.shards, scratch.plan.shards),
                            moved_bytes_relabelled=moved_bytes(instance, old.shards, relabelled))
        g: dict[int, list[Shard]] = {}
        for s in relabelled:
            g.setdefault(index[s.table], []).append(s)
        starts.append(("scratch", g))
    if not starts:
        return fail(solver, SolveStatus.no_solution, f"re-planning: no start: the kept shards leave no room for the tables to place "
                    f"({len(carried.todo)}) and {solver.name} found no plan from scratch ({scratch.reason})", clock,
                    {"carried_over": carried.report(), "scratch": scratch_info})
    best: _State | None = None
    tried: dict[str, Any] = {}
    target = dict(starts[-1][1]) if starts[-1][0] == "scratch" else None
    if warm is not None and target is not None:  # (the warm start's search alone never beat its walk toward the scratch plan: docs/results/replan.md)
        starts = [("warm_start_toward_scratch", warm), starts[-1]]
        if max_moved_bytes is not None and max_moved_bytes > 0:
            # and the warm start walked and searched moving no old byte (what a budget of 0 does, in a third of the
            # time): the walk and the searches are greedy, and on 906 x 128 1 % ended above the 0-byte plan without it
            starts.insert(0, ("warm_start_kept", warm))
    for k, (name, groups) in enumerate(starts):
        st = _State(instance, bm, groups, old_groups, move_weight)
        budget = 0 if name == "warm_start_kept" else max_moved_bytes
        within = True
        if budget is not None and st.moved_bytes > budget:
            within = _return_until_within(st, budget, time)
        # each start's search gets an equal share of the time left, so a slow first start cannot starve the others
        share = time.share(1.0 / (len(starts) - k))
        # (the walk gets half of the start's time at most: on 906 x 128 it otherwise took all of it, and the local
        # searches none, ending above the plan the 0-byte budget found)
        walk = share.share(0.5)
        toward = _toward(st, target, budget, walk) if name.startswith("warm_start") and target is not None else 0
        steps = shard_steps = 0
        while within:  # whole-table returns and moves, then single-shard moves and swaps, until neither improves
            steps += _local_search(st, budget, share)
            more = _shard_search(st, budget, share)
            shard_steps += more
            if not more or share.spent():
                break
        tried[name] = {"cost": st.cost, "moved_bytes": st.moved_bytes, "within_budget": within, "search_steps": steps, "shard_steps": shard_steps,
                       "toward_scratch_steps": toward}
        # (the moves know memory, not the placement constraints: a start whose search broke one is not taken)
        kept = within and not constraint_violations(instance, st.shards())
        tried[name]["keeps_constraints"] = kept or not within
        if kept and (best is None or st.objective(st.cost, st.moved_bytes) < best.objective(best.cost, best.moved_bytes) - 1e-12):
            best = st
    if best is None and scratch.plan is not None and _budget_ok(moved_bytes(instance, old.shards, scratch.plan.shards), max_moved_bytes):
        best = _State(instance, bm, {index[t]: [s for s in scratch.plan.shards if s.table == t] for t in {s.table for s in scratch.plan.shards}},
                      old_groups, move_weight)  # (the solver's own plan keeps them: the searches' starts did not)
        tried["scratch_as_planned"] = {"cost": best.cost, "moved_bytes": best.moved_bytes}
    if best is None:
        limit = f"{max_moved_bytes:,}" if max_moved_bytes is not None else "any number of"
        return fail(solver, SolveStatus.no_solution, f"re-planning: no plan within {limit} bytes "
                    "moved that keeps the placement constraints: the tables to place do not fit beside the kept ones, and moving tables back to "
                    "their old devices does not get the scratch plan under the budget", clock,
                    {"carried_over": carried.report(), "scratch": scratch_info, "starts": tried})
    shards = best.shards()
    check = check_plan(instance, shards)
    if not check.ok:  # (a bug, never a silent wrong plan)
        raise AssertionError(f"re-planning produced an invalid plan: {check.violations[:3]}")
    moves = ReplanReport(moved_bytes=best.moved_bytes, max_moved_bytes=max_moved_bytes, move_weight_ms_per_gib=move_weight,
                          model_bytes=int(sum(table_bytes(instance, t) for t in instance.tables)), carried_over=carried.report(),
                          scratch=scratch_info, starts=tried)
    timed_out = time.spent()
    return finish(solver, instance, cost_model, shards, clock, seed=seed, stopped=StopReason.time_limit if timed_out else None,
                  info={"replan": moves.to_dict()}, bound=bm, replan=moves,
                  extra_params={"replanned_from": old.instance or "?", "max_moved_bytes": max_moved_bytes, "move_weight_ms_per_gib": move_weight})
