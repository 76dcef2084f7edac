"""Cost-driven choices of *how* a table is held, once the devices are chosen: bigger HBM caches, host-memory tables
back in HBM, and small tables replicated data-parallel, each kept only where the cost model says the plan gets
cheaper and both memory tiers have room.

Why: the tiering layout (solvers.placement.tiering) is model-free: it moves the coldest tables per byte to host memory and
gives each the smallest cache that serves 90 % of its lookups, and it leaves 10 % of every device's HBM free for
the packer. After the packing, that slack is better spent where it pays most: TorchRec's
`EmbeddingOffloadScaleupProposer` grows the UVM tables' caches while HBM allows, ranked by the tables' access
statistics; here the cost model ranks every option against the plan's actual bottleneck. Data-parallel replicas
(TorchRec's `data_parallel`) take a small table's pooled output out of the all-to-all and split its lookups over all
devices, at the price of an all-reduce of its whole gradient and a copy on every device.

The moves (each applies to every shard of one table, on the devices they are on):
- `cache`: a UVM table's HBM cache set to a larger offered load factor (a `fused_uvm` table gets one);
- `hbm`: a UVM table's shards moved into HBM (kernel `fused`);
- `replicate` (only with `data_parallel`): a table held in HBM table- or column-wise replicated whole on every device;
  first, a sweep over sets of replicas at once (`_replica_sweep`: the tables with the fewest rows), which finds
  what single replicas cannot.
- `row-wise` / `table-row-wise` (only with `row_wise`): a table held whole in HBM (table- or column-wise, on the
  plan's bottleneck device) split by rows over all devices (TorchRec's `row_wise`), or over the devices of one host
  (`table_row_wise`, where the cluster has several hosts of several devices); and a table split by rows already
  (the tiering layout splits the tables too big for any device over all devices) split over another such group,
  in its tier, or (where there is host memory and several hosts of several devices) within one host in host memory
  behind HBM caches of ROW_SPLIT_LOAD_FACTORS, which the `cache` moves then grow: the partial sums stay on NVLink and
  only the misses cross the host link. Every table split by rows is
  tried, not only those on the bottleneck device: moving a small table's rows *onto* a device that runs its kernel
  under-occupied makes that device cheaper.
  A row split within a host costs the network `devices per host` times less than one over all devices
  (costmodels.hierarchical), so a model whose big tables were all split over every device gains most from moving
  them host by host, as TorchRec does. A table too hot for any one
  device - its lookups alone above what a balanced device should carry - is what TorchRec splits this way; a
  whole-table search cannot balance it, and a column split still leaves every lookup on the devices holding slices.
  Every device then carries the table's pooled width (its partial sums), which the cost model prices; the move is
  kept only where it lowers the plan cost. Of the whole tables, only those with a shard on the current bottleneck
  device are split: a split adds communication everywhere and can only pay by relieving the device that sets the cost.

Search: best improvement, by (plan cost, then the sum of the device costs: a cheaper non-bottleneck device is kept
when the maximum stays), until no move improves or the deadline passes. Deterministic: candidates in table order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel
from costmodels.hierarchical import OUTPUT_DIST_ORDER, table_comm_widths
from shardopt.core.ir import Instance, Kernel, Shard, Table
from shardopt.core.memory import shard_bytes, shard_host_bytes
from solvers.base import Budget
from solvers.placement.tiering import CACHE_LOAD_FACTORS, TableTier, TieredLayout, row_wise_shards

POLISH_LOAD_FACTORS = tuple(sorted(set(CACHE_LOAD_FACTORS) | {0.75}))  # the caches a table may grow to
REL_EPS = 1e-9  # an improvement must exceed this share of the plan cost
REPLICA_SWEEP_MAX = 256  # the replica sweep tries prefixes of at most this many tables
ROW_SPLIT_LOAD_FACTORS = (0.05, 0.2)  # the caches of a row split moved to host memory (grown by the `cache` moves)
LAYOUT_SWEEP_MAX = 20_000  # the layout sweep builds a shard per table and device: up to this many


@dataclass
class _Plan:
    """The plan as the polish changes it: shards grouped by table, each device's summed state, all-to-all width,
    extra backward comm (replicas' all-reduce), bytes in each tier, and each host's hierarchical width."""

    shards: dict[int, list[Shard]]  # table index -> its shards
    S: np.ndarray  # [D, F]
    dims: np.ndarray  # [G, D]: all-to-all widths by output dist (costmodels.hierarchical.output_dist_rows)
    extra: np.ndarray  # [D]
    hbm: np.ndarray  # [D]
    host: np.ndarray  # [D]
    hier: np.ndarray  # [H]

    def add(self, c: tuple) -> None:
        """Add a table_contribution."""
        self.replace(tuple(np.zeros_like(x) for x in c), c)

    def replace(self, old: tuple, new: tuple) -> None:
        """One table_contribution for another (the difference added: the same sums as before the hierarchical term)."""
        self.S += new[0] - old[0]
        self.dims += new[1] - old[1]
        self.extra += new[2] - old[2]
        self.hbm += new[3] - old[3]
        self.host += new[4] - old[4]
        self.hier += new[5] - old[5]

    def totals(self, bm: BoundCostModel) -> np.ndarray:
        return bm.compute_costs(self.S, bm.devices).sum(axis=-1) + comm_totals(bm, self.dims, self.hier) + self.extra


def comm_totals(bm: BoundCostModel, dims: np.ndarray, hier: np.ndarray) -> np.ndarray:
    """fwd + bwd comm per device from widths by output dist ([..., G, D]): one all-to-all per sharding type present,
    and the hierarchical collectives where a host has any (as the judge: BoundCostModel.dist_comm_totals)."""
    return bm.dist_comm_totals(dims, hier if hier.any() else None)


def table_contribution(instance: Instance, bm: BoundCostModel, table: int, shards: list[Shard]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(state [D, F], all-to-all widths by output dist [G, D], extra comm [D], HBM bytes [D], host bytes [D],
    hierarchical width per host [H]) that `shards` of `table` add (a row split held within one host adds to its host's hierarchical width,
    not to the all-to-all: costmodels.hierarchical)."""
    D, t = bm.num_devices, instance.tables[table]
    S, extra = np.zeros((D, bm.state_size)), np.zeros(D)
    hbm, host = np.zeros(D, dtype=np.int64), np.zeros(D, dtype=np.int64)
    for s in shards:
        d, st, _ = bm.shard_contribution(s)
        S[d] += st
        if s.replicated:
            extra[d] += bm.replicated_comm(table)
        hbm[d] += shard_bytes(instance, t, s)
        host[d] += shard_host_bytes(instance, t, s)
    dims, hier = table_comm_widths(instance, t, shards)
    return S, dims, extra, hbm, host, hier


def _options(instance: Instance, table: int, shards: list[Shard], num_devices: int, data_parallel: bool, row_wise: bool = False) -> list[tuple[str, list[Shard]]]:
    """The moves offered for one table: (what, its shards after the move)."""
    out: list[tuple[str, list[Shard]]] = []
    kernels = {s.kernel for s in shards}
    if len(kernels) != 1 or any(s.replicated for s in shards):
        return out
    (kernel,) = kernels
    t = instance.tables[table]
    whole_rows = all(s.height(t) == t.rows for s in shards)
    if row_wise and num_devices > 1 and t.rows > 1 and not whole_rows and all(s.width(t) == t.dim for s in shards):
        # a row split already: the same blocks' tier over another group of devices (TorchRec's row_wise <-> table_row_wise;
        # tried only when no other move pays, so a host-memory table's cache grows first)
        out += row_groups(instance, t, {s.device for s in shards}, kernel, shards[0].cache_load_factor)
    if kernel.in_host_memory:
        now = shards[0].cache_load_factor if kernel is Kernel.fused_uvm_caching else 0.0
        for f in POLISH_LOAD_FACTORS:
            if f > (now or 0.0):
                out.append((f"cache {f:g}", [s.model_copy(update={"kernel": Kernel.fused_uvm_caching, "cache_load_factor": f}) for s in shards]))
        out.append(("hbm", [s.model_copy(update={"kernel": Kernel.fused, "cache_load_factor": None}) for s in shards]))
        return out
    if data_parallel and num_devices > 1 and whole_rows:
        out.append(("replicate", [Shard(table=t.name, device=d, replicated=True) for d in range(num_devices)]))
    if row_wise and num_devices > 1 and whole_rows and t.rows > 1:
        out += row_groups(instance, t, set(), kernel, None)
    return out


def row_groups(instance: Instance, table: Table, now: set[int], kernel: Kernel, cache_load_factor: float | None) -> list[tuple[str, list[Shard]]]:
    """`table` split by rows over all devices (`row-wise`) and over each host's devices (`table-row-wise`, where the
    cluster has several hosts of several devices; with topology levels each NVLink group's: Topology.intra_group_size),
    the group it is split over now (`now`) left out."""
    topo = instance.topology
    D, per_host = topo.num_devices, topo.intra_group_size
    groups = [("row-wise", list(range(D)))]
    if 1 < per_host < D:
        groups += [("table-row-wise", list(range(h * per_host, (h + 1) * per_host))) for h in range(topo.num_intra_groups)]
    out = [(what, row_wise_shards(table, devs, kernel, cache_load_factor)) for what, devs in groups if set(devs) != now]
    if kernel is Kernel.fused and topo.has_host_memory and 1 < per_host < D:
        # an HBM table's blocks within one host in host memory behind caches: the partial sums stay on NVLink, and
        # only the misses cross the host link, where the blocks in HBM over every device send them over the network
        # (as TorchRec holds a hot table larger than a device)
        out += [(f"{what}, host memory + cache {f:g}", row_wise_shards(table, devs, Kernel.fused_uvm_caching, f))
                for what, devs in groups[1:] for f in ROW_SPLIT_LOAD_FACTORS]
    return out


@dataclass
class _Candidate:
    """One move: the table, what it does, the table's shards after it and what they add (`_contribution`), the
    devices whose state it changes, and (cached until one of those devices changes) their compute after it."""

    table: int
    what: str
    shards: list[Shard]
    new: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    devices: np.ndarray
    all_devices: bool  # a replica or a row split changes every device's comm: re-costed every round
    compute: np.ndarray | None = None  # [len(devices)] compute after the move


def polish_placements(
    instance: Instance, bm: BoundCostModel, shards: list[Shard], *, data_parallel: bool = False, row_wise: bool = False,
    budget: Budget | None = None, max_moves: int = 10_000,
) -> tuple[list[Shard], dict[str, Any]]:
    """The plan after the cost-driven moves of the module docstring, and what was done ({"moves": [...],
    "cost_before", "cost_after"}). The devices of every shard stay; only kernels, caches and replication change.
    Only placements `bm` can price are offered (a neural model has no replicas and no host-memory tier): a search
    never proposes what its cost model cannot cost."""
    polish = _Polish(instance, bm, shards, data_parallel and bm.replicas, row_wise, budget)
    before = float(polish.totals.max())
    if polish.data_parallel and polish.D > 1 and not polish.out_of_time():
        polish.replica_sweep()
    polish.run(max_moves)
    out = [s for t in sorted(polish.plan.shards) for s in polish.plan.shards[t]]
    return out, {"moves": polish.moves, "cost_before": before, "cost_after": float(polish.totals.max())}


class _Polish:
    """One polish of a plan: the plan as it changes, each table's contribution, the per-device costs, the moves
    offered (row splits built lazily: they cost a shard on every device to build) and the moves made."""

    def __init__(self, instance: Instance, bm: BoundCostModel, shards: list[Shard], data_parallel: bool, row_wise: bool,
                 budget: Budget | None) -> None:
        self.instance, self.bm, self.data_parallel, self.row_wise, self.budget = instance, bm, data_parallel, row_wise, budget
        self.D = D = bm.num_devices
        index = instance.table_index()
        groups: dict[int, list[Shard]] = {}
        for s in shards:
            groups.setdefault(index[s.table], []).append(s)
        self.contrib = {t: table_contribution(instance, bm, t, g) for t, g in groups.items()}
        self.plan = _Plan(groups, np.zeros((D, bm.state_size)), np.zeros((len(OUTPUT_DIST_ORDER), D)), np.zeros(D), np.zeros(D, dtype=np.int64),
                          np.zeros(D, dtype=np.int64), np.zeros(instance.topology.num_intra_groups))
        for c in self.contrib.values():
            self.plan.add(c)
        self.caps = np.array(instance.topology.capacities(), dtype=np.int64)
        self.hosts = np.array(instance.topology.host_capacities(), dtype=np.int64)
        self.recost()
        self.moves: list[dict[str, Any]] = []
        self.cands: dict[int, list[_Candidate]] = {}  # built by run(), after the replica sweep
        self.split_cands: dict[int, list[_Candidate]] = {}  # built lazily (see candidates)

    def recost(self) -> None:
        """Every device's compute, comm and total from the plan's sums."""
        self.compute = self.bm.compute_costs(self.plan.S, self.bm.devices).sum(axis=-1)
        self.comm = comm_totals(self.bm, self.plan.dims, self.plan.hier)
        self.totals = self.compute + self.comm + self.plan.extra

    def set_table(self, t: int, shards: list[Shard], new: tuple) -> None:
        self.plan.replace(self.contrib[t], new)
        self.plan.shards[t], self.contrib[t] = shards, new

    def candidates(self, t: int, splits: bool = False) -> list[_Candidate]:
        """The table's moves other than row splits, or (`splits`) its row splits only: those cost a shard on every
        device to build, so they are built only for tables on the bottleneck device, when first needed."""
        out = []
        old = self.contrib[t]
        for what, new_shards in _options(self.instance, t, self.plan.shards[t], self.D, self.data_parallel, self.row_wise and splits):
            if ("row-wise" in what) is not splits or any(s.kernel not in self.bm.kernels for s in new_shards):
                continue
            new = table_contribution(self.instance, self.bm, t, new_shards)
            devs = np.unique([s.device for s in self.plan.shards[t]] + [s.device for s in new_shards])
            widths_change = not (np.array_equal(new[1], old[1]) and np.array_equal(new[2], old[2]) and np.array_equal(new[5], old[5]))
            out.append(_Candidate(t, what, new_shards, new, devs, widths_change))
        return out

    def out_of_time(self) -> bool:
        return self.budget is not None and self.budget.spent()

    def replica_sweep(self) -> None:
        """The replicas no single move finds (`_replica_sweep`), applied before the moves."""
        swept = _replica_sweep(self.instance, self.bm, self.plan, self.contrib, self.caps, self.hosts,
                               (float(self.totals.max()), float(self.totals.sum())))
        for t, new_shards, new in swept:
            self.set_table(t, new_shards, new)
        if swept:
            self.recost()
            self.moves += [{"table": self.instance.tables[t].name, "move": "replicate (sweep)", "cost_ms": float(self.totals.max())} for t, _, _ in swept]

    def split_pool(self, bottleneck: int) -> dict[int, list[_Candidate]]:
        """The row splits of the tables on the bottleneck device (a split pays by relieving the device that sets the
        cost), and the other groups of every table split by rows already, wherever it is: a shard moved *onto* an
        under-occupied device can make it cheaper (its bags raise the kernel's occupancy: one hot table alone on a
        host's devices leaves them under-occupied, and small tables' rows moved there cost almost nothing)."""
        instance = self.instance
        pool = {}
        for t in sorted(self.cands):
            g = self.plan.shards[t]
            split_elsewhere = len(g) > 1 and all(s.height(instance.tables[t]) != instance.tables[t].rows for s in g)
            if split_elsewhere or any(s.device == bottleneck for s in g):
                if t not in self.split_cands:
                    self.split_cands[t] = self.candidates(t, True)
                pool[t] = self.split_cands[t]
        return pool

    def best_move(self, pool: dict[int, list[_Candidate]]) -> tuple[tuple[float, float], _Candidate] | None:
        """The move of `pool` with the lowest (plan cost, sum of device costs) that both memory tiers allow."""
        plan, bm, caps, hosts = self.plan, self.bm, self.caps, self.hosts
        best: tuple[tuple[float, float], _Candidate] | None = None
        for t in sorted(pool):
            old = self.contrib[t]
            for c in pool[t]:
                if self.out_of_time():
                    return best
                d = c.devices
                if (plan.hbm[d] - old[3][d] + c.new[3][d] > caps[d]).any() or (plan.host[d] - old[4][d] + c.new[4][d] > hosts[d]).any():
                    continue
                if c.all_devices:
                    dims, hier = plan.dims - old[1] + c.new[1], plan.hier - old[5] + c.new[5]
                    cand = bm.compute_costs(plan.S - old[0] + c.new[0], bm.devices).sum(axis=-1) + comm_totals(bm, dims, hier) + plan.extra - old[2] + c.new[2]
                else:  # only its devices' compute changes (and their extra comm: none for kernel moves)
                    if c.compute is None:
                        c.compute = bm.compute_costs(plan.S[d] - old[0][d] + c.new[0][d], d).sum(axis=-1)
                    cand = self.totals.copy()
                    cand[d] = c.compute + self.comm[d] + plan.extra[d] - old[2][d] + c.new[2][d]
                key = (float(cand.max()), float(cand.sum()))
                if best is None or key < best[0]:
                    best = (key, c)
        return best

    def sweep_layout(self, cur: tuple[float, float]) -> bool:
        """Every table split by rows at once (`_layout_sweep`), where that beats `cur`. Returns whether it did."""
        layout = _layout_sweep(self.instance, self.bm, self.plan, self.caps, self.hosts, cur)
        if layout is None:
            return False
        what, new_shards_of = layout
        for t, new_shards in new_shards_of.items():
            self.set_table(t, new_shards, table_contribution(self.instance, self.bm, t, new_shards))
        self.recost()
        self.moves.append({"table": f"{len(new_shards_of)} tables", "move": what, "cost_ms": float(self.totals.max())})
        self.cands = {t: self.candidates(t) for t in sorted(self.plan.shards)}
        self.split_cands.clear()
        return True

    def apply(self, chosen: _Candidate) -> None:
        """Make the move, re-cost what it changed, and rebuild the table's moves (the cached compute of every move on
        a changed device is dropped)."""
        t = chosen.table
        self.set_table(t, chosen.shards, chosen.new)
        changed = chosen.devices if not chosen.all_devices else np.arange(self.D)
        self.compute[changed] = self.bm.compute_costs(self.plan.S[changed], changed).sum(axis=-1)
        if chosen.all_devices:
            self.comm = comm_totals(self.bm, self.plan.dims, self.plan.hier)
        self.totals = self.compute + self.comm + self.plan.extra
        self.moves.append({"table": self.instance.tables[t].name, "move": chosen.what, "cost_ms": float(self.totals.max())})
        self.cands[t] = self.candidates(t)
        self.split_cands.pop(t, None)
        hit = np.zeros(self.D, dtype=bool)
        hit[changed] = True
        for lst in self.cands.values():
            for c in lst:
                if c.compute is not None and hit[c.devices].any():
                    c.compute = None

    def run(self, max_moves: int) -> None:
        """The best move while one pays: kernel, cache and replica moves first; row splits only when none of those
        pays; every table split by rows at once, once, when no single move does."""
        self.cands = {}
        for t in sorted(self.plan.shards):  # (a table's moves are costed as they are built: on 856 tables, seconds)
            if self.out_of_time():
                break
            self.cands[t] = self.candidates(t)
        swept = False
        while len(self.moves) < max_moves and not self.out_of_time():
            cur = (float(self.totals.max()), float(self.totals.sum()))
            found = self.best_move(self.cands)
            if self.row_wise and (found is None or not _better(found[0], cur)):  # row splits only when no other move pays
                found = self.best_move(self.split_pool(int(np.argmax(self.totals))))
            if (found is None or not _better(found[0], cur)) and self.row_wise and self.D > 1 and not swept:
                # nothing one table can do: every table split by rows at once, then the moves again
                swept = True
                if self.sweep_layout(cur):
                    continue
            if found is None or not _better(found[0], cur):
                break
            self.apply(found[1])


def _better(key: tuple[float, float], than: tuple[float, float]) -> bool:
    """(plan cost, sum of device costs) `key` beats `than` by more than REL_EPS of the plan cost: a lower maximum, or
    the same maximum and a lower sum."""
    eps = REL_EPS * max(than[0], 1e-12)
    return key[0] < than[0] - eps or (key[0] <= than[0] + eps and key[1] < than[1] - eps)


def _replica_sweep(instance: Instance, bm: BoundCostModel, plan: _Plan, contrib: dict[int, tuple], caps: np.ndarray, hosts: np.ndarray,
                   current: tuple[float, float], limit: int = REPLICA_SWEEP_MAX) -> list[tuple[int, list[Shard], tuple]]:
    """The replicas one move at a time cannot find: with few devices, a replica takes its table's pooled output off
    one device's all-to-all only, and a device's all-to-all is the larger of what it sends and receives, so no
    single replica lowers the plan cost; several do (on a 2-device instance, replicating 5 small tables took the
    cost from 2.447 to 1.537 ms where each alone raised it). So: the HBM tables, fewest rows first (a replica's price,
    the dense update and the gradient all-reduce, grows with its rows; its gain, the pooled width, does not),
    replicated as prefixes of that order (a table without room for a copy on every device skipped); the best prefix by (plan cost, sum of device costs) is kept if it beats
    `current`. Memory: every device must hold a whole copy of each table in the prefix."""
    D = bm.num_devices
    order = sorted((t for t, g in plan.shards.items()
                    if all(s.kernel is Kernel.fused and not s.replicated and s.height(instance.tables[t]) == instance.tables[t].rows for s in g)),
                   key=lambda t: (instance.tables[t].rows, t))[:limit]
    S, dims, extra, hbm, host = plan.S.copy(), plan.dims.copy(), plan.extra.copy(), plan.hbm.copy(), plan.host.copy()
    best: tuple[float, float] = current
    best_k = 0
    made: list[tuple[int, list[Shard], tuple]] = []
    for t in order:
        name = instance.tables[t].name
        new_shards = [Shard(table=name, device=d, replicated=True) for d in range(D)]
        new = table_contribution(instance, bm, t, new_shards)
        old = contrib[t]
        hbm_t, host_t = hbm - old[3] + new[3], host - old[4] + new[4]
        if (hbm_t > caps).any() or (host_t > hosts).any():
            continue  # (no room for a copy on every device: left out of this and every longer prefix)
        hbm, host = hbm_t, host_t
        S, dims, extra = S - old[0] + new[0], dims - old[1] + new[1], extra - old[2] + new[2]
        made.append((t, new_shards, new))
        totals = bm.compute_costs(S, bm.devices).sum(axis=-1) + comm_totals(bm, dims, plan.hier) + extra
        key = (float(totals.max()), float(totals.sum()))
        if _better(key, best):
            best, best_k = key, len(made)
    return made[:best_k]


def _layout_sweep(instance: Instance, bm: BoundCostModel, plan: _Plan, caps: np.ndarray, hosts: np.ndarray,
                  current: tuple[float, float], limit: int = LAYOUT_SWEEP_MAX) -> tuple[str, dict[int, list[Shard]]] | None:
    """What single row splits cannot find: every table of the plan split by rows at once, over all devices
    (`row-wise (sweep)`) or each within one host (`table-row-wise (sweep)`, on clusters of several hosts of several
    devices: tables by decreasing predicted cost, each onto the host with the least predicted load so far that has
    room), each table in its own memory tier. Why: the judge runs one all-to-all per sharding type (docs/analytic-
    model.md), so a plan of whole tables, column pieces and row splits pays a collective for each kind; one table
    moved to another kind removes none of them, all of them together do (TorchRec's plans are often of one or two
    kinds for this reason). Replicas stay. (what, the new shards of every table it changes), or None when
    neither layout fits both tiers and beats `current` (plan cost, sum of device costs). Skipped above `limit`
    table x device pairs (each layout is a shard per table and device)."""
    topo = instance.topology
    D, per_host = topo.num_devices, topo.intra_group_size  # (the host, or an NVLink group over hosts)
    movable = [t for t, g in sorted(plan.shards.items()) if len({s.kernel for s in g}) == 1 and not any(s.replicated for s in g)
               and instance.tables[t].rows > 1]
    if not movable or len(movable) * D > limit:
        return None
    fixed = [s for t, g in sorted(plan.shards.items()) if t not in set(movable) for s in g]
    layouts: list[tuple[str, dict[int, list[Shard]]]] = []

    def tier(t: int) -> tuple[Kernel, float | None]:
        g = plan.shards[t]
        return g[0].kernel, g[0].cache_load_factor

    index = instance.table_index()

    def used(shards: list[Shard]) -> tuple[np.ndarray, np.ndarray]:
        hbm, host = np.zeros(D, dtype=np.int64), np.zeros(D, dtype=np.int64)
        for s in shards:
            table = instance.tables[index[s.table]]
            hbm[s.device] += shard_bytes(instance, table, s)
            host[s.device] += shard_host_bytes(instance, table, s)
        return hbm, host

    everywhere = {t: row_wise_shards(instance.tables[t], list(range(D)), *tier(t)) for t in movable}
    layouts.append(("row-wise (sweep)", everywhere))
    if 1 < per_host < D:  # each table within the least loaded host with room; where no host has room, over all devices
        load = np.zeros(topo.num_intra_groups)
        hbm, host = used(fixed)
        out: dict[int, list[Shard]] = {}
        for t in sorted(movable, key=lambda t: (-float(bm.single_table_costs[t]), t)):
            for h in np.argsort(load, kind="stable"):
                cand = row_wise_shards(instance.tables[t], list(range(int(h) * per_host, (int(h) + 1) * per_host)), *tier(t))
                dh, dho = used(cand)
                if (hbm + dh <= caps).all() and (host + dho <= hosts).all():
                    out[t] = cand
                    hbm, host = hbm + dh, host + dho
                    load[h] += float(bm.single_table_costs[t])
                    break
        for t in movable:
            if t not in out:  # (placed last: the rooms above were taken by the tables that fit in a host)
                out[t] = everywhere[t]
        layouts.append(("table-row-wise (sweep)", out))
    best: tuple[tuple[float, float], str, dict[int, list[Shard]]] | None = None
    for what, layout in layouts:
        shards = fixed + [s for t in movable for s in layout[t]]
        hbm, host = used(shards)
        if (hbm > caps).any() or (host > hosts).any():
            continue
        totals = bm.plan_costs(shards).total
        key = (float(totals.max()), float(totals.sum()))
        if _better(key, current) and (best is None or _better(key, best[0])):
            best = (key, what, layout)
    return None if best is None else (best[1], best[2])


def layout_of(instance: Instance, shards: list[Shard]) -> TieredLayout:
    """The tiered layout a plan follows, for a search that moves its tables again: a table split by rows or
    replicated is fixed (its shards pre-placed), every other table is packed in its shards' tier (kernel and cache
    load factor)."""
    index = instance.table_index()
    D = instance.topology.num_devices
    groups: dict[int, list[Shard]] = {}
    for s in shards:
        groups.setdefault(index[s.table], []).append(s)
    tiers: list[TableTier] = []
    hbm = np.zeros(len(instance.tables), dtype=np.int64)
    host = np.zeros(len(instance.tables), dtype=np.int64)
    fixed: list[Shard] = []
    fixed_hbm, fixed_host = np.zeros(D, dtype=np.int64), np.zeros(D, dtype=np.int64)
    for i, t in enumerate(instance.tables):
        g = groups.get(i, [])
        pinned = any(s.replicated or s.height(t) != t.rows for s in g)
        tiers.append(TableTier(g[0].kernel, g[0].cache_load_factor, pinned) if g else TableTier())
        if pinned:
            fixed += g
            for s in g:
                fixed_hbm[s.device] += shard_bytes(instance, t, s)
                fixed_host[s.device] += shard_host_bytes(instance, t, s)
        else:
            probe = Shard(table=t.name, device=0, kernel=tiers[-1].kernel, cache_load_factor=tiers[-1].cache_load_factor)
            hbm[i], host[i] = shard_bytes(instance, t, probe), shard_host_bytes(instance, t, probe)
    return TieredLayout(tiers, hbm, host, fixed, fixed_hbm, fixed_host)


def describe_placements(instance: Instance, shards: list[Shard]) -> tuple[dict[str, int], dict[str, str]]:
    """(count per placement kind, each table's kind where it is not table- or column-wise in HBM) of a plan, in
    the words of solvers.placement.tiering's TableTier.describe ('row-wise, HBM', 'table-wise, host memory + HBM cache
    (0.2 of rows)', 'data-parallel, HBM')."""
    tables = {t.name: t for t in instance.tables}
    groups: dict[str, list[Shard]] = {}
    for s in shards:
        groups.setdefault(s.table, []).append(s)
    counts: dict[str, int] = {}
    special: dict[str, str] = {}
    for name, g in groups.items():
        t = tables[name]
        if any(s.replicated for s in g):
            what = "data-parallel, HBM"
        else:
            what = TableTier(g[0].kernel, g[0].cache_load_factor, any(s.height(t) != t.rows for s in g)).describe()
        key = what.split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
        if key != "table-wise, HBM":
            special[name] = what
    return counts, special
