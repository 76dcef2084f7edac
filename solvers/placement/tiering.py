"""Placements beyond table-wise HBM for the heuristic solvers: row-wise splits of tables too big for any device, and
host-memory (UVM) placements when the tables do not fit in the cluster's HBM.

The heuristics pack whole tables onto devices. Two kinds of instance defeat that: a table larger than every
device's HBM (no device can hold it whole), and a model larger than all the HBM there is (some tables must live in
host memory). TorchRec's planner answers both: it shards such tables by rows and puts cold tables in host memory
behind an HBM cache (`fused_uvm_caching`). This module decides, before the packing pass, which tables get which
placement; the packer then places every remaining table (UVM ones included, table-wise on one device whose host
memory and HBM both have room) with the solver's own rule.

The decisions, in order (each one TorchRec can express, so the plan exports one to one):

1. A table larger than the largest device's HBM (or one the packer found no room for, on a retry), hottest per byte
   (lookups per byte) first, is split by rows within one host in TorchRec's `table_row_wise` layout (blocks of ceil(rows / devices per host), the roomiest host
   first) where the cluster has several hosts of several devices and a host's HBM holds the blocks: its partial sums
   then cross the network devices-per-host times less than split over every device (costmodels.hierarchical).
   Otherwise it is split row-wise over all devices in TorchRec's `row_wise` layout
   (blocks of ceil(rows / devices) in rank order). Its blocks stay in HBM when each fits in HEADROOM of the
   smallest device's HBM, else they live in host memory behind a cache (the load factor as in 2.), and without one
   (`fused_uvm`, coldest first) where those caches would crowd out the HBM.
2. While the tables left for HBM need more than HEADROOM of the cluster's HBM, the coldest table per byte (fewest
   lookups per byte) moves to host memory with the smallest HBM cache from CACHE_LOAD_FACTORS that serves
   HIT_TARGET of its lookups under its access histogram (hottest rows cached first, as fbgemm's LRU / LFU cache
   holds them in steady state: the analytic model's miss share, docs/analytic-model.md); if the caches alone are still too much, the coldest cached tables lose their cache
   (`fused_uvm`).

Variants (arguments of `plan_tiers`): `lean` (the smallest caches, the largest tables to host memory first),
`within_host=False` (every row split over all devices), `oversized_to_host` (a table no device holds goes to host
memory whole, behind a cache on one device, where a device's host memory holds it; or only the named ones of them). The cost-aware heuristics pack
every variant that differs and keep the cheapest plan (solvers.heuristics.constructive); neuroshard and the exact solvers search
the layout greedy chose.

No cost model is consulted for these choices: every heuristic, cost-aware or not, gets the same layout, and the
cost-aware `greedy` then places the tables with its cost rule, pricing UVM tables by the cost model's cache_fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from costmodels.analytic import cache_miss_share
from shardopt.core.feasibility import infeasibility_reason, tiered_infeasibility_reason
from shardopt.core.ir import Instance, Kernel, Shard, Table
from shardopt.core.memory import shard_bytes, shard_host_bytes, slice_bytes, table_bytes_array
from shardopt.core.sharding_types import ROW_WISE, TABLE_ROW_WISE
from shardopt.core.stats import table_histogram
from shardopt.core.torchrec_form import rw_layout
from solvers.placement.rules import PREPLACED_REPLICA, PREPLACED_ROWS, TierRules

HEADROOM = 0.9  # share of HBM the pre-placed and tiered tables plan for first (the packer needs slack); a preference: the solvers retry their layouts with all of it where none packs within it
HIT_TARGET = 0.9  # share of a UVM table's lookups its HBM cache should serve
CACHE_LOAD_FACTORS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)  # the caches offered (TorchRec's default is 0.2)


@dataclass(frozen=True)
class TableTier:
    """Where one table goes: its kernel, cache load factor, and whether it is split row-wise over all devices or
    replicated data-parallel on every device (either way pre-placed: the layout's fixed shards, not packed)."""

    kernel: Kernel = Kernel.fused
    cache_load_factor: float | None = None
    rowwise: bool = False
    replicated: bool = False

    @property
    def preplaced(self) -> bool:
        return self.rowwise or self.replicated

    def describe(self) -> str:
        if self.replicated:
            return "data-parallel, HBM"
        kind = "row-wise" if self.rowwise else "table-wise"
        if self.kernel is Kernel.fused_uvm_caching:
            return f"{kind}, host memory + HBM cache ({self.cache_load_factor:g} of rows)"
        if self.kernel is Kernel.fused_uvm:
            return f"{kind}, host memory"
        return f"{kind}, HBM"


@dataclass
class TieredLayout:
    """Each table's tier, the row-wise tables' shards (placed before packing), and each remaining table's bytes in
    each memory tier as the packer must find room for them."""

    tiers: list[TableTier]
    hbm_bytes: np.ndarray  # [T] HBM bytes of the table's table-wise shard (0 for row-wise tables: pre-placed)
    host_bytes: np.ndarray  # [T] host bytes of the table's table-wise shard
    fixed: list[Shard] = field(default_factory=list)  # the row-wise tables' shards
    fixed_hbm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [D]
    fixed_host: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [D]

    @property
    def packed(self) -> np.ndarray:
        """Indices of the tables the packer places (all but the row-wise and replicated ones)."""
        return np.array([i for i, t in enumerate(self.tiers) if not t.preplaced], dtype=np.int64)

    def shard(self, instance: Instance, table: int, device: int) -> Shard:
        """The table-wise shard of `table` on `device`, with its tier's kernel."""
        tier = self.tiers[table]
        return Shard(table=instance.tables[table].name, device=device, kernel=tier.kernel, cache_load_factor=tier.cache_load_factor)

    def key(self) -> tuple:
        """What makes two layouts the same plan space: every table's tier and the fixed shards."""
        return (tuple(self.tiers), tuple((s.table, s.device, s.rows, s.row_offset, s.kernel, s.cache_load_factor) for s in self.fixed))

    def summary(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tiers:
            key = t.describe().split(" (")[0]
            out[key] = out.get(key, 0) + 1
        return out


def replica_order(instance: Instance) -> list[int]:
    """The tables a data-parallel replica suits best first: fewest rows first (a replica's price, its dense update
    and gradient all-reduce, grows with its rows; its gain, the pooled output it takes off the all-to-all, does not),
    those whose copy fits in every device's HBM only."""
    caps = np.array(instance.topology.capacities(), dtype=np.int64)
    out = [i for i, t in enumerate(instance.tables)
           if shard_bytes(instance, t, Shard(table=t.name, device=0, replicated=True)) <= caps.min()]
    return sorted(out, key=lambda i: (instance.tables[i].rows, i))


def replica_layout(instance: Instance, replicated: Sequence[int]) -> TieredLayout | None:
    """Every table in HBM, the `replicated` ones data-parallel (a copy on every device, pre-placed as the layout's
    fixed shards) and the others left to the packer: the plan space of a search that chooses where the other tables
    go around those replicas. None where the copies do not fit in every device's HBM."""
    D = instance.topology.num_devices
    caps = np.array(instance.topology.capacities(), dtype=np.int64)
    chosen = set(int(i) for i in replicated)
    hbm = table_bytes_array(instance).astype(np.int64).copy()
    fixed: list[Shard] = []
    fixed_hbm = np.zeros(D, dtype=np.int64)
    for i in sorted(chosen):
        t = instance.tables[i]
        hbm[i] = 0
        fixed += [Shard(table=t.name, device=d, replicated=True) for d in range(D)]
        fixed_hbm += shard_bytes(instance, t, fixed[-1])  # (a whole copy, the same on every device)
    if (fixed_hbm > caps).any():
        return None
    tiers = [TableTier(replicated=i in chosen) for i in range(len(instance.tables))]
    return TieredLayout(tiers, hbm, np.zeros(len(instance.tables), dtype=np.int64), fixed, fixed_hbm, np.zeros(D, dtype=np.int64))


def row_wise_shards(table: Table, devices: list[int] | np.ndarray, kernel: Kernel = Kernel.fused, cache_load_factor: float | None = None) -> list[Shard]:
    """`table` split by rows over `devices` as TorchRec's `row_wise` / `table_row_wise` lay it out: blocks of
    ceil(rows / len(devices)) in the devices' order, the last one shorter; a device left without rows (a table with
    fewer rows than devices) gets no shard."""
    devices = [int(d) for d in devices]
    out: list[Shard] = []
    for d, (start, n) in zip(devices, rw_layout(table.rows, len(devices))):
        if n <= 0:
            continue
        out.append(Shard(table=table.name, device=d, row_offset=start, rows=None if start == 0 and n == table.rows else n,
                         kernel=kernel, cache_load_factor=cache_load_factor))
    return out


def needs_tiers(instance: Instance) -> bool:
    """Whether table-wise HBM placement is impossible (a table fits on no device, or the tables exceed all HBM), or
    the placement constraints keep a table out of HBM or allow it only row splits or replicas."""
    if infeasibility_reason(instance) is not None:
        return True
    rules = TierRules(instance)
    return rules.active and (any(rules.host_only(i) for i in range(len(instance.tables))) or bool(rules.preplaced))


def cached_lookup_share(histogram: np.ndarray, rows: int, lookups: float, cache_rows: float) -> float:
    """Share of a shard's lookups served by an HBM cache of `cache_rows` rows: the analytic model's steady-state
    miss share (costmodels.analytic.cache_miss_share: the hottest rows resident), so the cache chosen here is the
    one the cost model prices."""
    return 1.0 - cache_miss_share(histogram, float(rows), float(lookups), float(cache_rows))


def cache_load_factor_for(instance: Instance, table: Table, rows: int | None = None) -> float:
    """The smallest offered load factor whose cache serves HIT_TARGET of the table's lookups (the largest offered
    when none does). `rows`: the rows of the shard (a row-wise block sees its share of the lookups)."""
    n = table.rows if rows is None else rows
    lookups = instance.workload.batch_size * table.pooling_factor * n / table.rows
    hist = table_histogram(table, instance.workload.batch_size)
    for f in CACHE_LOAD_FACTORS:
        if cached_lookup_share(hist, n, lookups, f * n) >= HIT_TARGET:
            return f
    return CACHE_LOAD_FACTORS[-1]


def _host_with_room(instance: Instance, table: Table, caps: np.ndarray, fixed_hbm: np.ndarray,
                    headroom: float = HEADROOM, hosts: list[int] | None = None) -> list[int] | None:
    """The devices of the host whose HBM (`headroom` of it, less what is fixed there already) holds `table` split by
    rows over them, the roomiest host first; None when no host does. Within a host the split's partial sums take a
    reduce-scatter over NVLink and 1 / (devices per host) of the network bytes of a split over all devices
    (costmodels.hierarchical): TorchRec's table_row_wise, what its planner picks for such tables."""
    topo = instance.topology
    per_host = topo.intra_group_size  # (the host, or an NVLink group over hosts: Topology.intra_group_size)
    block = slice_bytes(instance, table, -(-table.rows // per_host), table.dim)
    groups = [list(range(h * per_host, (h + 1) * per_host)) for h in range(topo.num_intra_groups)]
    rooms = [headroom * caps[devs].min() - fixed_hbm[devs].max() for devs in groups]
    for h in sorted(range(len(groups)), key=lambda h: (-rooms[h], h)):
        if block <= rooms[h] and (hosts is None or h in hosts):
            return groups[h]
    return None


def oversized_tables(instance: Instance) -> list[int]:
    """The tables larger than the largest device's HBM, coldest per byte (fewest lookups per byte) first: the
    candidates for host memory whole (`plan_tiers(oversized_to_host=...)`), in the order they should go there."""
    full = table_bytes_array(instance)
    cap = max(instance.topology.capacities())
    big = [i for i in range(len(instance.tables)) if full[i] > cap]
    return sorted(big, key=lambda i: (instance.tables[i].pooling_factor / max(int(full[i]), 1), i))


def plan_tiers(instance: Instance, rowwise: frozenset[int] = frozenset(), lean: bool = False, within_host: bool = True,
               oversized_to_host: bool | frozenset[int] = False, headroom: float = HEADROOM) -> TieredLayout | str:
    """`_plan_tiers` with the oversized tables hottest per byte first, or, where that layout cannot be made (the hot
    tables' blocks took the HBM and host memory that a later table's blocks needed), in table order. `headroom`: the
    share of each device's HBM the layout plans for; HEADROOM is a preference, never a refusal: a solver whose
    layouts all fail (or do not pack) within it tries them again with 1.0, every byte of HBM (a table split into
    blocks of 200,000 bytes on devices of 210,000 is placed, as TorchRec places it); the reason then quotes the
    capacities that try tested."""
    got = _plan_tiers(instance, rowwise, lean, within_host, oversized_to_host, hot_first=True, headroom=headroom)
    if isinstance(got, str):
        other = _plan_tiers(instance, rowwise, lean, within_host, oversized_to_host, hot_first=False, headroom=headroom)
        if not isinstance(other, str):
            return other
    return got


def _plan_tiers(instance: Instance, rowwise: frozenset[int], lean: bool, within_host: bool, oversized_to_host: bool | frozenset[int],
                hot_first: bool, headroom: float = HEADROOM) -> TieredLayout | str:
    """Each table's placement kind (see the module docstring), or why this layout cannot be made. `rowwise`: tables
    to split row-wise although a device could hold them whole (the packer found no room for them). `lean`: the
    layout for when the default one does not pack - every HBM cache as small as offered (CACHE_LOAD_FACTORS[0]) and
    the *largest* tables to host memory first (fewest tables moved, TorchRec's choice), so that the caches and the
    host-memory tables leave room for the rest; the cost-driven polish may grow the caches again. `within_host`:
    split in HBM within one host where a host holds the blocks (False: every split over all devices, the layout
    for when the first does not pack: it fills one host's HBM where the other spreads over every device).
    `oversized_to_host`: a table no device can hold goes to host memory whole, behind an HBM cache on one device,
    where a device's host memory holds it (else row-wise as above): a cold huge table split by rows fills every
    device's HBM with rows that are seldom read, which the hot tables then miss.
    A set of table indices instead of True: only those tables go to host memory whole, oversized or not (the cold
    ones of several oversized tables, `oversized_tables`' prefixes: a hot oversized table is better split by rows in HBM, and the
    HBM it then leaves can hold a mid-sized table whole that would otherwise be split too). The instances that
    showed each: docs/results/design-evidence.md, "Instances behind design choices"."""
    reason = tiered_infeasibility_reason(instance)
    if reason is not None:
        return reason
    st = _TierState.of(instance)
    why = _host_only_first(instance, st, lean) or _replicas_first(instance, st)
    if why is not None:
        return why
    # 1. tables no device can hold: row-wise within one host where its blocks fit there in HBM (several hosts of
    # several devices), else over all devices, in HBM when the blocks fit, else behind a cache
    # hottest per byte first: the HBM left for row-wise blocks goes to the tables with the most lookups per byte
    # (in table order, a cold huge table could take the HBM that a hot one then misses)
    tables, full = instance.tables, st.full
    named = oversized_to_host if isinstance(oversized_to_host, frozenset) else frozenset()
    forced = {i for i, kind in st.rules.preplaced.items() if kind == PREPLACED_ROWS}  # (its constraint: row splits only)
    oversized = [i for i in range(len(tables)) if full[i] > st.caps.max() or i in rowwise or i in named or i in forced]
    if hot_first:
        oversized.sort(key=lambda i: (-tables[i].pooling_factor / max(int(full[i]), 1), i))
    if st.rules.active:  # (tables their constraints keep in HBM first: the others have host memory to go to)
        oversized.sort(key=lambda i: st.rules.allows(i, Kernel.fused_uvm_caching) or st.rules.allows(i, Kernel.fused_uvm))
    for i in oversized:
        if st.tiers[i].kernel is not Kernel.fused:  # (kept out of HBM by its constraint: in host memory already)
            continue
        to_host = i in oversized_to_host if isinstance(oversized_to_host, frozenset) else bool(oversized_to_host)
        if (to_host or not st.rules.rows[i]) and i not in rowwise and i not in forced and _whole_to_host(instance, st, i, lean, headroom):
            continue
        replica = i in forced and i in st.rules.replicable  # (its constraint allows a replica too: the other way to place it)
        if not st.rules.rows[i]:
            if replica and _replicate(instance, st, i) is None:
                continue
            return (f"table {tables[i].name!r} ({int(full[i]):,} bytes) needs a row split or host memory, and its placement constraints "
                    "allow neither (pinned or grouped, its sharding types, or its kernels)")
        why = _split_by_rows(instance, st, i, lean, within_host, oversized_to_host is True and i not in rowwise, headroom)
        if why is not None:
            if replica and _replicate(instance, st, i) is None:
                continue
            return why
    why = _uncache_row_blocks(instance, st, headroom)
    if why is not None:
        return why
    # 2. more than the HBM holds: the coldest tables per byte to host memory, first with a cache, then without
    return _coldest_to_host(instance, st, lean, headroom)


@dataclass
class _TierState:
    """A layout as `_plan_tiers` builds it: each table's tier and bytes in each memory, the row-wise blocks fixed so
    far and what they take on each device, and the devices' capacities."""

    tiers: list[TableTier]
    hbm: np.ndarray  # [T] each table's HBM bytes (0 for a row-wise table: its blocks are in `fixed`)
    host: np.ndarray  # [T] its host-memory bytes
    fixed: list[Shard]
    fixed_hbm: np.ndarray  # [D]
    fixed_host: np.ndarray  # [D]
    caps: np.ndarray  # [D] HBM
    hosts: np.ndarray  # [D] host memory
    full: np.ndarray  # [T] each table's bytes whole in HBM
    rules: TierRules  # the placement constraints' kernels, cache load factors and row splits

    @classmethod
    def of(cls, instance: Instance) -> _TierState:
        topo, D = instance.topology, instance.topology.num_devices
        full = table_bytes_array(instance)
        return cls([TableTier() for _ in instance.tables], full.astype(np.int64).copy(), np.zeros(len(instance.tables), dtype=np.int64), [],
                   np.zeros(D, dtype=np.int64), np.zeros(D, dtype=np.int64), np.array(topo.capacities(), dtype=np.int64),
                   np.array(topo.host_capacities(), dtype=np.int64), full, TierRules(instance))


def _host_only_first(instance: Instance, st: _TierState, lean: bool) -> str | None:
    """The tables the placement constraints keep out of HBM, whole to host memory before anything else: behind a
    cache (the constraint's load factor, else the layout's) where their kernels allow one, else without. Returns why
    one cannot go (None: they went)."""
    for i, t in enumerate(instance.tables):
        if not st.rules.host_only(i):
            continue
        if st.rules.allows(i, Kernel.fused_uvm_caching):
            f = st.rules.cache_factor(i, CACHE_LOAD_FACTORS[0] if lean else cache_load_factor_for(instance, t))
            probe = Shard(table=t.name, device=0, kernel=Kernel.fused_uvm_caching, cache_load_factor=f)
        else:
            f, probe = None, Shard(table=t.name, device=0, kernel=Kernel.fused_uvm)
        need = shard_host_bytes(instance, t, probe)
        if need > (st.hosts - st.fixed_host).max() - st.host.sum():
            if st.rules.rows[i] and st.full[i] > st.caps.max():
                continue  # (too big for one device's host memory: split by rows in host memory with the oversized tables)
            return (f"table {t.name!r} may only be in host memory (its constraint), but no device has {need:,} bytes of host memory "
                    "left for it")
        st.tiers[i] = TableTier(probe.kernel, f, False)
        st.hbm[i], st.host[i] = shard_bytes(instance, t, probe), need
    return None


def _whole_to_host(instance: Instance, st: _TierState, i: int, lean: bool, headroom: float) -> bool:
    """Table i whole in host memory behind the largest offered cache (up to its own) that a device's HBM holds, where
    a device's host memory has room. Returns whether it went."""
    t = instance.tables[i]
    if not st.rules.allows(i, Kernel.fused_uvm_caching):
        return False
    f = CACHE_LOAD_FACTORS[0] if lean else cache_load_factor_for(instance, t)
    # the largest offered cache up to that one that a device's HBM holds (a huge table's cache can be huge); the
    # constraint's load factor where it names one
    offered = [st.rules.factor[i]] if st.rules.factor[i] is not None else sorted((g for g in CACHE_LOAD_FACTORS if g <= f), reverse=True)
    for f in offered:
        probe = Shard(table=t.name, device=0, kernel=Kernel.fused_uvm_caching, cache_load_factor=f)
        if shard_bytes(instance, t, probe) <= headroom * st.caps.max():
            break
    need = shard_host_bytes(instance, t, probe)
    if need <= (st.hosts - st.fixed_host).max() - st.host.sum() and shard_bytes(instance, t, probe) <= headroom * st.caps.max():
        st.tiers[i] = TableTier(Kernel.fused_uvm_caching, f, False)
        st.hbm[i], st.host[i] = shard_bytes(instance, t, probe), need
        return True
    return False


def _split_by_rows(instance: Instance, st: _TierState, i: int, lean: bool, within_host: bool, to_host: bool, headroom: float) -> str | None:
    """Table i split by rows: within one host in HBM where a host holds its blocks (`within_host`), else over all
    devices, in HBM when the blocks fit, else in host memory behind caches. `to_host` (oversized_to_host=True): a
    table sent to host memory but too big for one device's goes there by rows, as TorchRec places such a table (split
    by rows in HBM, two such tables left no room for the rest). Returns why it cannot be split (None: it was)."""
    topo, D, t = instance.topology, instance.topology.num_devices, instance.tables[i]
    caps, hosts = st.caps, st.hosts
    block = -(-t.rows // D)
    uvm_block = Shard(table=t.name, device=0, rows=block, kernel=Kernel.fused_uvm)
    host_ok = shard_host_bytes(instance, t, uvm_block) <= (hosts - st.fixed_host).min()
    blocks_to_host = to_host and host_ok
    per_host = topo.intra_group_size
    rules = st.rules
    in_host_ok = TABLE_ROW_WISE in rules.rows[i] and rules.allows(i, Kernel.fused)
    only_in_host = ROW_WISE not in rules.rows[i]  # (its constraints: table_row_wise or nothing)
    host_devices = (_host_with_room(instance, t, caps, st.fixed_hbm, headroom, rules.hosts[i])
                    if (within_host or only_in_host) and 1 < per_host < D and not blocks_to_host and in_host_ok else None)
    if host_devices is None and only_in_host:
        what = "fits on no device" if st.full[i] > caps.max() else "may only be split by rows"
        return (f"table {t.name!r} {what}, and its constraints allow no row split over all {D} devices (row_wise), nor does any "
                f"host{' within its pins' if rules.hosts[i] is not None else ''} hold its table_row_wise blocks in HBM")
    if host_devices is not None:
        st.tiers[i] = TableTier(Kernel.fused, None, True)
        st.hbm[i] = st.host[i] = 0
        for s in row_wise_shards(t, host_devices):
            st.fixed.append(s)
            st.fixed_hbm[s.device] += shard_bytes(instance, t, s)
        return None
    block_bytes = slice_bytes(instance, t, block, t.dim)
    if block_bytes <= headroom * caps.min() - st.fixed_hbm.max() and not blocks_to_host and rules.allows(i, Kernel.fused):
        tier = TableTier(Kernel.fused, None, True)
    elif host_ok and rules.allows(i, Kernel.fused_uvm_caching):
        tier = TableTier(Kernel.fused_uvm_caching, rules.cache_factor(i, CACHE_LOAD_FACTORS[0] if lean else cache_load_factor_for(instance, t, block)), True)
    elif host_ok and rules.allows(i, Kernel.fused_uvm):
        tier = TableTier(Kernel.fused_uvm, None, True)
    else:
        room = "no host memory" if hosts.max() == 0 else f"at most {int((hosts - st.fixed_host).min()):,} bytes of host memory left on some device"
        tested = f"{int(caps.min()):,} bytes on the smallest device" + (
            f", {headroom:.0%} of it planned for" if headroom < 1 else "") + (
            f", {int(st.fixed_hbm.max()):,} taken by other tables' blocks" if st.fixed_hbm.max() else "")
        kept = "" if rules.kernels[i] is None else f" (its constraint allows the kernels {', '.join(sorted(k.value for k in rules.kernels[i]))})"
        return (f"table {t.name!r} ({int(st.full[i]):,} bytes) fits on no device, and its row-wise blocks over all "
                f"{D} devices ({block_bytes:,} bytes each) fit neither in HBM ({tested}) nor in host memory ({room}){kept}")
    st.tiers[i] = tier
    st.hbm[i] = st.host[i] = 0
    for s in row_wise_shards(t, range(D), tier.kernel, tier.cache_load_factor):
        st.fixed.append(s)
        st.fixed_hbm[s.device] += shard_bytes(instance, t, s)
        st.fixed_host[s.device] += shard_host_bytes(instance, t, s)
    return None


def _replicas_first(instance: Instance, st: _TierState) -> str | None:
    """The tables the placement constraints allow only data-parallel replicas: a copy on every device, in HBM,
    before anything else. Returns why one does not fit (None: they went)."""
    for i, kind in sorted(st.rules.preplaced.items()):
        if kind != PREPLACED_REPLICA:
            continue
        why = _replicate(instance, st, i)
        if why is not None:
            return why
    return None


def _replicate(instance: Instance, st: _TierState, i: int) -> str | None:
    """Table i as a data-parallel replica, a copy on every device in HBM. Returns why it does not fit (None: it went)."""
    D = instance.topology.num_devices
    t = instance.tables[i]
    copy = Shard(table=t.name, device=0, replicated=True)
    need = shard_bytes(instance, t, copy)
    if (st.fixed_hbm + need > st.caps).any():
        d = int(np.argmax(st.fixed_hbm + need - st.caps))
        return (f"table {t.name!r} may only be data_parallel (its constraint), but its copy ({need:,} bytes) does not fit "
                f"in device {d}'s HBM ({int(st.caps[d] - st.fixed_hbm[d]):,} bytes left)")
    st.tiers[i] = TableTier(replicated=True)
    st.hbm[i] = st.host[i] = 0
    st.fixed += [Shard(table=t.name, device=d, replicated=True) for d in range(D)]
    st.fixed_hbm += need
    return None


def _uncache_row_blocks(instance: Instance, st: _TierState, headroom: float) -> str | None:
    """The row-wise tables' caches crowd out the HBM: the coldest of them lose their cache until they fit. Returns
    why the row-wise blocks cannot fit (None: they do)."""
    tables, full, caps, hosts = instance.tables, st.full, st.caps, st.hosts
    cached_rw = [i for i, t in enumerate(st.tiers) if t.rowwise and t.kernel is Kernel.fused_uvm_caching and st.rules.allows(i, Kernel.fused_uvm)]
    cached_rw.sort(key=lambda i: tables[i].pooling_factor / max(int(full[i]), 1))
    for i in cached_rw:
        if (st.fixed_hbm <= headroom * caps).all():
            break
        st.tiers[i] = TableTier(Kernel.fused_uvm, None, True)
        for k, sh in enumerate(st.fixed):
            if sh.table == tables[i].name:
                st.fixed[k] = sh.model_copy(update={"kernel": Kernel.fused_uvm, "cache_load_factor": None})
                st.fixed_hbm[sh.device] += shard_bytes(instance, tables[i], st.fixed[k]) - shard_bytes(instance, tables[i], sh)
    if (st.fixed_hbm > caps).any() or (st.fixed_host > hosts).any():
        d = int(np.argmax(np.maximum(st.fixed_hbm - caps, st.fixed_host - hosts)))
        return (f"the row-wise blocks of the tables that fit on no device need {int(st.fixed_hbm[d]):,} bytes of HBM and "
                f"{int(st.fixed_host[d]):,} of host memory on device {d}, which has {int(caps[d]):,} and {int(hosts[d]):,}")
    return None


def _coldest_to_host(instance: Instance, st: _TierState, lean: bool, headroom: float) -> TieredLayout | str:
    """More than the HBM holds: the coldest tables per byte (`lean`: the largest) to host memory, first with a cache,
    then without; the layout, or why the tables left in HBM still do not fit."""
    tables, full, caps, hosts, tiers, hbm, host = instance.tables, st.full, st.caps, st.hosts, st.tiers, st.hbm, st.host
    budget = headroom * caps.sum() - st.fixed_hbm.sum()
    packed = [i for i, t in enumerate(tiers) if not t.preplaced]
    rules = st.rules
    # (a table whose kernels are constrained moves only where they allow host memory and HBM both: one kept out of
    # HBM is there already)
    movable = [i for i in packed if rules.kernels[i] is None
               or (not rules.host_only(i) and (rules.allows(i, Kernel.fused_uvm_caching) or rules.allows(i, Kernel.fused_uvm)))]
    heat = np.array([tables[i].pooling_factor / max(int(full[i]), 1) for i in movable])
    coldest = [movable[k] for k in np.argsort(heat, kind="stable")]
    if lean:  # the largest first (ties: the colder)
        coldest = sorted(coldest, key=lambda i: (-int(full[i]), tables[i].pooling_factor / max(int(full[i]), 1), i))
    host_left = (hosts - st.fixed_host).astype(np.float64)  # host memory the table-wise UVM tables may still take
    if hbm[packed].sum() > budget and hosts.sum() > 0:
        for i in coldest:
            if hbm[packed].sum() <= budget:
                break
            t = tables[i]
            if rules.allows(i, Kernel.fused_uvm_caching):
                f = rules.cache_factor(i, CACHE_LOAD_FACTORS[0] if lean else cache_load_factor_for(instance, t))
                probe = Shard(table=t.name, device=0, kernel=Kernel.fused_uvm_caching, cache_load_factor=f)
            else:  # (its kernels allow host memory without a cache only)
                f, probe = None, Shard(table=t.name, device=0, kernel=Kernel.fused_uvm)
            need = shard_host_bytes(instance, t, probe)
            if need > host_left.max() or host[packed].sum() + need > host_left.sum():
                continue  # (no device, or not the cluster, has the host memory left for it: it stays in HBM)
            tiers[i] = TableTier(probe.kernel, f, False)
            hbm[i], host[i] = shard_bytes(instance, t, probe), need
        for i in coldest:
            if hbm[packed].sum() <= budget:
                break
            if tiers[i].kernel is Kernel.fused_uvm_caching and rules.allows(i, Kernel.fused_uvm):
                tiers[i] = TableTier(Kernel.fused_uvm, None, False)
                hbm[i] = shard_bytes(instance, tables[i], Shard(table=tables[i].name, device=0, kernel=Kernel.fused_uvm))
    if hbm[packed].sum() > caps.sum() - st.fixed_hbm.sum():
        return (f"the tables left in HBM need {int(hbm[packed].sum()):,} bytes after moving every table that can go to "
                f"host memory there, but the devices have {int(caps.sum() - st.fixed_hbm.sum()):,} bytes of HBM left")
    return TieredLayout(tiers, hbm, host, st.fixed, st.fixed_hbm, st.fixed_host)
