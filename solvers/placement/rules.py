"""Placement constraints (shardopt.core.ir.PlacementConstraints) as the searches read them.

Why one module: the exact solvers (solvers.exact.constraints: a mask of (item, device) pairs and rows) and
NeuroShard (its grid greedy, split proposals and device polish) honour the same constraints in different shapes, and
must agree on what each asks of a plan of whole tables and column pieces:
- a pinned table's pieces go only on its devices;
- a table in a co-locate or separate group is placed whole ("on the same devices" and "never on one device" are then
  a device each; pieces would only multiply the cases), and a table that may not be column-wise too;
- a table that may not be table-wise is cut into at least two pieces, kept on different devices (two pieces on one
  device would be merged back into the whole table);
- no column piece narrower than the table's `min_partition` (one wider than the table keeps it whole in columns);
- for a plan meant for TorchRec with `even_columns` (shardopt.core.torchrec_form), a table is cut into pieces of one
  width: a search cuts the whole table again (`even_cut`), never one piece of it.
Row-wise splits, replicas and memory tiers are not among these placements: a stage that makes them keeps its plan
only where `shardopt.core.plan_check.constraint_violations` finds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from shardopt.core.ir import DIM_ALIGNMENT, Instance, Kernel, Shard, Table
from shardopt.core.sharding_types import COLUMN_WISE, DATA_PARALLEL, ROW_WISE, TABLE_ROW_WISE, TABLE_WISE, allowed_types


def grouped_tables(instance: Instance) -> set[int]:
    """The tables named in a co-locate or separate group."""
    c = instance.constraints
    if c is None:
        return set()
    index = instance.table_index()
    return {index[name] for group in (*c.colocate, *c.separate) for name in group}


def whole_only(instance: Instance) -> set[int]:
    """Tables not to be cut into column pieces: grouped ones and those that may not be column-wise."""
    c = instance.constraints
    if c is None:
        return set()
    return grouped_tables(instance) | {int(t) for t in np.flatnonzero(~column_wise_allowed(instance))}


def with_required_marks(instance: Instance, shards: list[Shard]) -> list[Shard]:
    """`shards` with each whole, unmarked shard of a column_wise-only table (its sharding types leave out table_wise
    and allow column_wise) marked column-wise: the layout is the same, and only the mark says that it is TorchRec's
    column_wise with one shard rather than table_wise. Why here: an exact model's counts, a re-plan or a tiered start
    that keeps such a table whole loses the mark its seed had, and the plan checker refused the plan."""
    names = column_wise_only(instance)
    if not names:
        return shards
    count: dict[str, int] = {}
    for s in shards:
        count[s.table] = count.get(s.table, 0) + 1
    return [s.model_copy(update={"column_wise": True}) if s.table in names and count[s.table] == 1 and s.is_whole and not s.replicated
            and not s.column_wise else s for s in shards]


def column_wise_only(instance: Instance) -> set[str]:
    """The tables whose constraint leaves out table_wise but allows column_wise: a solver that places whole tables
    meets it with the table's one shard marked column-wise (TorchRec's column_wise with one rank)."""
    allowed = column_wise_allowed(instance)
    return {instance.tables[t].name for t in must_split(instance) if allowed[t]}


def column_wise_allowed(instance: Instance) -> np.ndarray:
    """[T] whether each table may be column-wise (its constraint's sharding types, if any, include column_wise): then
    its whole shard may be marked so (`Shard.column_wise`) and join the column-wise all-to-all."""
    out = np.ones(len(instance.tables), dtype=bool)
    c = instance.constraints
    if c is None:
        return out
    index = instance.table_index()
    for tc in c.tables:
        types = allowed_types(instance.topology, tc.sharding_types)
        if types is not None and COLUMN_WISE not in types:
            out[index[tc.table]] = False
    return out


def must_split(instance: Instance) -> set[int]:
    """Tables that may not be placed whole (their sharding types leave out table_wise): column pieces only."""
    c = instance.constraints
    if c is None:
        return set()
    index = instance.table_index()
    return {index[tc.table] for tc in c.tables
            if (types := allowed_types(instance.topology, tc.sharding_types)) is not None and TABLE_WISE not in types}


def min_widths(instance: Instance) -> np.ndarray:
    """[T] the narrowest column piece each table may be cut into (0: any; `TableConstraint.min_piece_width`: a
    min_partition wider than the table keeps it whole in columns, as TorchRec reads it)."""
    out = np.zeros(len(instance.tables), dtype=np.int64)
    c = instance.constraints
    if c is None:
        return out
    index = instance.table_index()
    for tc in c.tables:
        t = index[tc.table]
        narrowest = tc.min_piece_width(instance.tables[t].dim)
        if narrowest is not None:
            out[t] = narrowest
    return out


def even_columns(instance: Instance) -> bool:
    """Whether every table's column pieces must be of one width (a plan for TorchRec's own checkpoint reload)."""
    return instance.constraints is not None and instance.constraints.even_columns


def torchrec_form(instance: Instance) -> bool:
    """Whether the plan must be in the form TorchRec loads (one shape for a table's slices on one device, ...)."""
    return instance.constraints is not None and instance.constraints.torchrec is not None


def even_widths(dim: int, narrowest: int = 0) -> list[int]:
    """The widths an even cut of a `dim`-column table can give, widest first: dim / k for k = 2, 3, ... where that is
    a whole multiple of 4 columns and at least `narrowest`."""
    out = []
    for k in range(2, dim // DIM_ALIGNMENT + 1):
        if dim % k == 0 and (dim // k) % DIM_ALIGNMENT == 0 and dim // k >= max(narrowest, DIM_ALIGNMENT):
            out.append(dim // k)
    return out


def placement_conflict(instance: Instance, who: str, can_split: Callable[[int, Table], bool], tiers: bool = False,
                       marks: bool = False) -> str | None:
    """Why whole tables and column pieces in HBM (the placements of `who`) cannot meet the constraints, or None (they
    can try: whether a plan exists is the search's to find). `can_split(t, table)`: whether `who` can cut table t
    into two or more pieces at all. `tiers`: `who` also lays out memory tiers (TierRules), so a table kept out of HBM
    is no conflict. `marks`: `who` meets a column_wise-only table with its whole shard marked column-wise
    (solvers.placement.collectives.mark_column_wise_only), so such a table is no conflict either."""
    c = instance.constraints
    if c is None:
        return None
    grouped = grouped_tables(instance)
    index = instance.table_index()
    for tc in c.tables:
        t = index[tc.table]
        if tc.kernels is not None and Kernel.fused not in tc.kernels and not tiers:
            return f"table {tc.table!r} may not be in HBM (constraint: {', '.join(k.value for k in tc.kernels)}), and {who} place every table there"
        types = allowed_types(instance.topology, tc.sharding_types)
        if types is None or TABLE_WISE in types:
            continue
        if COLUMN_WISE not in types:
            kind = preplaced_kind(types)
            if tiers and kind is not None:
                why = _preplaced_conflict(instance, t, kind)
                if why is None:
                    continue  # (the tiered layouts pre-place it: split by rows, or a replica on every device)
                return why
            placed = "whole tables, table-wise or column-wise with one shard" if marks else "whole tables and column pieces (table_wise, column_wise)"
            also = "" if tiers or kind is None else " (the solvers with memory-tier layouts - greedy, neuroshard, cpsat - place it)"
            return f"table {tc.table!r} may be only {', '.join(types)}: neither table_wise nor column_wise, and {who} place {placed}{also}"
        if marks:
            continue
        if t in grouped:
            return f"table {tc.table!r} may only be column_wise, and {who} place the tables of co-locate / separate groups whole"
        if not can_split(t, instance.tables[t]):
            return f"table {tc.table!r} may only be column_wise, but {who} cannot cut its {instance.tables[t].dim} columns into pieces within its constraints"
    return None


# the placements the tiered layouts give a table whose sharding types leave out table_wise and column_wise: split by
# rows (row_wise over every device, table_row_wise over one host's), or a data-parallel replica on every device
PREPLACED_ROWS = "rows"
PREPLACED_REPLICA = "replica"


def preplaced_kind(types: list[str] | None) -> str | None:
    """How the tiered layouts place a table of these sharding types that may be neither table_wise nor column_wise:
    PREPLACED_ROWS, PREPLACED_REPLICA, or None (it may be whole or cut in columns; or only grid_shard /
    table_column_wise, which no layout here makes)."""
    if types is None or TABLE_WISE in types or COLUMN_WISE in types:
        return None
    if ROW_WISE in types or TABLE_ROW_WISE in types:
        return PREPLACED_ROWS
    return PREPLACED_REPLICA if DATA_PARALLEL in types else None


def preplaced_tables(instance: Instance) -> dict[int, str]:
    """The tables the placement constraints leave only row splits or replicas (`preplaced_kind`), by index."""
    c = instance.constraints
    if c is None:
        return {}
    index = instance.table_index()
    return {index[tc.table]: k for tc in c.tables if (k := preplaced_kind(allowed_types(instance.topology, tc.sharding_types))) is not None}


def _preplaced_conflict(instance: Instance, t: int, kind: str) -> str | None:
    """Why the tiered layouts cannot pre-place table t (only row splits or a replica allowed) within its other
    constraints, or None. What no plan at all can do is shardopt.core.constraint_proofs' to say (exit 3)."""
    name = instance.tables[t].name
    together = {n for g in instance.constraints.colocate for n in g if name in g} - {name} if instance.constraints else set()
    if together:
        return (f"table {name!r} may only be split by rows or replicated (its sharding types), and is co-located with "
                f"{', '.join(sorted(together))}: the layouts here place a co-located table's partners whole, never on the same "
                "several devices")
    if kind == PREPLACED_ROWS and not TierRules(instance).rows[t]:
        return f"table {name!r} may only be split by rows, but its pins and groups leave it no row layout (row_wise over every device, or table_row_wise over one host within its pins)"
    return None


def tiers_first(instance: Instance) -> str | None:
    """Why a solver goes to its memory-tier layouts at once (None: it may search HBM placements first): tables the
    placement constraints keep out of HBM, or allow only row splits or replicas."""
    why = kept_out_of_hbm(instance)
    forced = preplaced_tables(instance)
    if forced:
        names = ", ".join(repr(instance.tables[t].name) for t in sorted(forced))
        why = (why + "; " if why else "") + f"the placement constraints allow {names} only row splits or data-parallel replicas"
    return why


class PlacementRules:
    """The constraints for a search that places pieces one at a time or moves them: per table its devices (`pins`,
    [T, D]), the tables it must share no device with (`apart`: a must-split table is apart from itself: its pieces
    on different devices) and the ones it goes with (`together`), whether it may be cut and how narrow.
    `whole_tables`: the rules of a search that places whole tables only, which meets a must-split (column_wise-only)
    table with one shard marked column-wise: such a table is not apart from itself."""

    def __init__(self, instance: Instance, whole_tables: bool = False, fixed: Sequence[Shard] = ()):
        T, D = len(instance.tables), instance.topology.num_devices
        c = instance.constraints
        self.active = bool(instance.constraint_kinds())
        self.pins = np.ones((T, D), dtype=bool)
        self.apart: list[set[int]] = [set() for _ in range(T)]
        self.together: list[set[int]] = [set() for _ in range(T)]
        self.whole = whole_only(instance)
        self.split_only = must_split(instance)
        self.min_width = min_widths(instance)
        self.even = even_columns(instance)
        if c is None:
            return
        index = instance.table_index()
        for tc in c.tables:
            if tc.devices is not None:
                self.pins[index[tc.table]] = False
                self.pins[index[tc.table], tc.devices] = True
        for kind, out in (("separate", self.apart), ("colocate", self.together)):
            for group in getattr(c, kind):
                ids = {index[name] for name in group}
                for i in ids:
                    out[i] |= ids - {i}
        for t in () if whole_tables else self.split_only:
            self.apart[t].add(t)
        for t in range(T):  # a co-located group shares its devices: every member's pins and separations bind them all
            for j in self.together[t]:
                self.pins[t] &= self.pins[j]
        joined = [set().union(*(self.apart[j] for j in self.together[t] | {t})) for t in range(T)]
        for t in range(T):
            for a in list(joined[t]):
                joined[a].add(t)  # (apart is symmetric: a table kept from a group is kept from each member)
        self.apart = joined
        # the layout's fixed shards (row splits, replicas) are placed already: a table kept apart from one avoids its
        # devices, one that goes with it may use only them
        held: dict[int, set[int]] = {}
        for s in fixed:
            held.setdefault(index[s.table], set()).add(s.device)
        for j, devices in held.items():
            on = np.zeros(D, dtype=bool)
            on[sorted(devices)] = True
            for t in self.apart[j] - set(held):
                self.pins[t] &= ~on
            for t in self.together[j] - set(held):
                self.pins[t] &= on

    @property
    def grouped(self) -> bool:
        """Whether any table has to be apart from or together with another (beyond the pins)."""
        return any(self.apart) or any(self.together)

    def may_split(self, t: int, halves: tuple[int, int]) -> bool:
        """Whether table t may be cut into pieces of these two widths."""
        return t not in self.whole and min(halves) >= self.min_width[t]

    def even_cut(self, t: int, dim: int, width: int) -> int | None:
        """The width of the next even cut of table t (`dim` columns) that is now in pieces `width` wide: the widest
        narrower one (even_widths) its constraints allow; None where there is none."""
        if t in self.whole:
            return None
        narrower = [w for w in even_widths(dim, int(self.min_width[t])) if w < width]
        return narrower[0] if narrower else None

    def allowed(self, t: int, device_of: np.ndarray) -> np.ndarray:
        """[K, D] where whole table t may go in each of K partial placements (`device_of` [K, T], -1: not placed
        yet): its pins, less the devices of the placed tables it must be apart from, only the device of a placed table
        it goes with. The heuristics' packer asks for one placement, the RL policies for their lanes."""
        K = device_of.shape[0]
        ok = np.broadcast_to(self.pins[t], (K, self.pins.shape[1])).copy()
        lanes = np.arange(K)
        for j in self.apart[t]:
            on = device_of[:, j] >= 0
            ok[lanes[on], device_of[on, j]] = False
        for j in self.together[t]:
            on = device_of[:, j] >= 0
            keep = np.zeros_like(ok)
            keep[lanes[on], device_of[on, j]] = True
            ok[on] &= keep[on]
        return ok


class TierRules:
    """The placement constraints as memory-tier layouts (solvers.placement.tiering) read them, per table: the kernels
    it may use (None: any), its cache load factor (None: the layout's choice), the row splits it may be cut into (its
    sharding types' row_wise, over all devices, and table_row_wise, within one host; none for a co-located table, no
    row_wise for one kept apart from others or pinned off some device), the hosts a table_row_wise split may use
    (`hosts`: those within its pins; None: any), and whether it must be pre-placed (`preplaced`: split by rows or
    replicated, where its sharding types leave out table_wise and column_wise)."""

    def __init__(self, instance: Instance):
        T = len(instance.tables)
        topo = instance.topology
        self.kernels: list[set[Kernel] | None] = [None] * T
        self.factor: list[float | None] = [None] * T
        self.rows: list[set[str]] = [{ROW_WISE, TABLE_ROW_WISE} for _ in range(T)]
        self.hosts: list[list[int] | None] = [None] * T
        self.preplaced: dict[int, str] = preplaced_tables(instance)
        c = instance.constraints
        # the tables a data-parallel replica may hold (their sharding types, if any, include it): a pre-placed table
        # whose row splits cannot go is replicated instead where it may be
        self.replicable: set[int] = set(range(T))
        self.active = bool(instance.constraint_kinds())
        if c is None:
            return
        index = instance.table_index()
        groups = [list(range(h * topo.intra_group_size, (h + 1) * topo.intra_group_size)) for h in range(topo.num_intra_groups)]
        for tc in c.tables:
            t = index[tc.table]
            if tc.kernels is not None:
                self.kernels[t] = set(tc.kernels)
            self.factor[t] = tc.cache_load_factor
            types = allowed_types(topo, tc.sharding_types)
            if types is not None:
                if DATA_PARALLEL not in types:
                    self.replicable.discard(t)
                self.rows[t] &= set(types)
                if topo.num_intra_groups == 1 and TABLE_ROW_WISE in self.rows[t]:
                    self.rows[t].add(ROW_WISE)  # (one host: table_row_wise over it is the row_wise layout)
            if tc.devices is not None:
                pinned = set(tc.devices)
                if len(pinned) < topo.num_devices:
                    self.rows[t].discard(ROW_WISE)
                    self.replicable.discard(t)
                self.hosts[t] = [h for h, devs in enumerate(groups) if set(devs) <= pinned]
                if not self.hosts[t]:
                    self.rows[t].discard(TABLE_ROW_WISE)
        for group in c.colocate:
            for name in group:
                self.rows[index[name]] = set()
                self.replicable.discard(index[name])
        for group in c.separate:
            for name in group:
                self.rows[index[name]].discard(ROW_WISE)
                self.replicable.discard(index[name])
                if topo.num_intra_groups == 1:
                    self.rows[index[name]].discard(TABLE_ROW_WISE)

    def allows(self, t: int, kernel: Kernel) -> bool:
        return self.kernels[t] is None or kernel in self.kernels[t]  # type: ignore[operator]

    def host_only(self, t: int) -> bool:
        """Whether table t may not be in HBM (its kernels are host-memory ones only)."""
        return not self.allows(t, Kernel.fused)

    def cache_factor(self, t: int, default: float) -> float:
        return self.factor[t] if self.factor[t] is not None else default


def kept_out_of_hbm(instance: Instance) -> str | None:
    """Why a solver goes to its memory-tier layouts at once: tables the placement constraints keep out of HBM."""
    rules = TierRules(instance)
    out = [t.name for i, t in enumerate(instance.tables) if rules.active and rules.host_only(i)]
    return f"the placement constraints keep {', '.join(out)} out of HBM" if out else None
