"""The shards an exact model places: for each table, the whole table and (optionally) its dyadic column pieces --
halves, quarters, ... -- in any mix that covers the table, and the widths a warm start cuts it into (NeuroShard's
uneven halves of a table of an odd number of 4-column units: 28 -> 12 + 16).

An *item* is one piece size of one table: ``width`` columns, at most ``parts = dim // width`` pieces of it in a
plan (for the dyadic ones, exactly that many make the table); pieces of a table cover it when their widths add up
to its dim. A plan places, for each table, pieces whose widths add up to the table's dim: the whole table
on one device, or e.g. two halves, or a half and two quarters, ... -- one piece per device when `apart`. Equal
splits into 2, 4, ... shards are the special cases "parts_i pieces of item i"; the mixes are what NeuroShard's
repeated halvings produce, so its plans are representable exactly (and can warm-start the exact solvers). The
exact solvers hold a plan as a count matrix ``counts[I, D]`` (pieces of item i on device d).

Why dyadic pieces: one Boolean per (piece size, device) covers every plan a sequence of halvings can make, with
widths that stay multiples of DIM_ALIGNMENT (fbgemm's TBE needs 4-aligned dims); an arbitrary cut would need a
variable per column offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.base import BoundCostModel
from costmodels.hierarchical import DIST_ROW, OUTPUT_DIST_ORDER
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Kernel, Shard
from shardopt.core.memory import slice_bytes
from shardopt.core.sharding_types import COLUMN_WISE, TABLE_WISE


@dataclass(frozen=True)
class Items:
    """Every table's items, table by table: the items of table t are ``first[t]:first[t + 1]``, whole table first."""

    table: np.ndarray  # [I] table index
    parts: np.ndarray  # [I] the most pieces of this size a plan can hold: dim // width (dyadic: they make the table)
    width: np.ndarray  # [I] columns of one piece (a multiple of DIM_ALIGNMENT; dim / parts for the dyadic ones)
    size: np.ndarray  # [I] bytes of one piece (weights + optimizer state), int64
    states: np.ndarray  # [I, F] cost-model state of one piece
    first: np.ndarray  # [T + 1]
    apart: bool = True  # at most one piece of a table per device
    # what every device holds besides the items (a tiered layout's fixed row-wise and host-memory shards, placed
    # before the items: solvers.exact.tiered): its summed state [D, F], pooled width [D] and replicas' extra backward
    # comm [D]; None = empty devices
    base_states: np.ndarray | None = None
    base_widths: np.ndarray | None = None
    base_extra: np.ndarray | None = None
    base_dists: np.ndarray | None = None  # [G, D] base_widths by output dist (None: base_widths, if any, table-wise)
    # [T] tables whose whole item joins the column-wise all-to-all (a whole shard marked column_wise, where the plan
    # cuts some table: one collective instead of two); None: every whole item is table-wise
    whole_column_wise: np.ndarray | None = None
    # a table's pieces are all of one item (one width): a plan for TorchRec's checkpoint reload
    # (shardopt.core.torchrec_form); the models then choose one item per table (`solvers.exact.cpsat`, `.milp`)
    even: bool = False

    @property
    def num_items(self) -> int:
        return len(self.table)

    @property
    def num_tables(self) -> int:
        return len(self.first) - 1

    @property
    def whole(self) -> np.ndarray:
        """[T] the whole-table item of each table."""
        return self.first[:-1]

    @property
    def table_dim(self) -> np.ndarray:
        """[I] the dim of each item's table (the width of its whole-table item)."""
        return self.width[self.whole][self.table]

    @property
    def is_whole(self) -> np.ndarray:
        """[I] whether the item is its whole table (table-wise) rather than a column piece."""
        return self.width == self.table_dim

    @property
    def is_table_wise(self) -> np.ndarray:
        """[I] whether the item joins the table-wise all-to-all: a whole table not in `whole_column_wise`."""
        if self.whole_column_wise is None:
            return self.is_whole
        return self.is_whole & ~self.whole_column_wise[self.table]

    @property
    def share(self) -> np.ndarray:
        """[I] the share of its table's dim one piece holds (width / dim): pieces cover a table when these add to 1."""
        return self.width / self.table_dim

    @property
    def most_per_device(self) -> np.ndarray:
        """[I] the most pieces of an item one device may hold: 1, or all of them when pieces need not be apart."""
        return np.where(self.apart, 1, self.parts).astype(np.int64)

    def split_tables(self) -> np.ndarray:
        """Tables that have split items."""
        return np.flatnonzero(np.diff(self.first) > 1)

    def counts_from_device_of(self, device_of: np.ndarray, num_devices: int) -> np.ndarray:
        """[I, D] counts of a table-wise plan (one device per table; -1 = nowhere)."""
        device_of = np.asarray(device_of, dtype=np.int64)
        counts = np.zeros((self.num_items, num_devices), dtype=np.int64)
        placed = np.flatnonzero(device_of >= 0)
        counts[self.whole[placed], device_of[placed]] = 1
        return counts

    def is_complete(self, counts: np.ndarray) -> bool:
        """Every table's pieces add up to its dim (at most one piece of a table per device when `apart`)."""
        if (counts < 0).any():
            return False
        cover = np.add.reduceat(counts.sum(axis=1) * self.width, self.first[:-1])
        dims = self.width[self.whole]
        if (cover != dims).any():
            return False
        if self.apart and (np.add.reduceat(counts, self.first[:-1], axis=0) > 1).any():
            return False
        if self.even and (np.add.reduceat((counts.sum(axis=1) > 0).astype(np.int64), self.first[:-1]) > 1).any():
            return False
        return True

    def split_used(self, counts: np.ndarray) -> np.ndarray:
        """Tables the plan cuts into pieces."""
        return np.flatnonzero(counts[self.whole].sum(axis=1) == 0)

    def device_states(self, counts: np.ndarray) -> np.ndarray:
        """[D, F] summed state of each device (the base included)."""
        S = counts.T.astype(np.float64) @ self.states
        return S if self.base_states is None else S + self.base_states

    def device_widths(self, counts: np.ndarray) -> np.ndarray:
        """[D] pooled width of each device (the base included)."""
        w = counts.T.astype(np.float64) @ self.width
        return w if self.base_widths is None else w + self.base_widths

    def device_dists(self, counts: np.ndarray) -> np.ndarray:
        """[G, D] pooled width of each device by output dist (costmodels.hierarchical.output_dist_rows), the base
        included: whole tables are table-wise (`is_table_wise`), pieces and the `whole_column_wise` tables
        column-wise. TorchRec runs one all-to-all per sharding type, so the full model's judge
        (solvers.exact.formulation.plan_cost) costs each apart; the linear model sees their sum (`device_widths`)."""
        counts = counts.T.astype(np.float64)
        out = np.zeros((len(OUTPUT_DIST_ORDER), counts.shape[0]))
        tw = self.is_table_wise
        out[DIST_ROW[TABLE_WISE]] = counts[:, tw] @ self.width[tw]
        out[DIST_ROW[COLUMN_WISE]] = counts[:, ~tw] @ self.width[~tw]
        if self.base_dists is not None:
            out += self.base_dists
        elif self.base_widths is not None:
            out[DIST_ROW[TABLE_WISE]] += self.base_widths
        return out

    def device_extra(self, num_devices: int) -> np.ndarray:
        """[D] extra backward comm of the base's replicas (0 without a base)."""
        return np.zeros(num_devices) if self.base_extra is None else self.base_extra

    def device_bytes(self, counts: np.ndarray) -> np.ndarray:
        """[D] bytes on each device, exact integers."""
        return counts.T.astype(np.int64) @ self.size

    def shards(self, counts: np.ndarray, instance: Instance) -> list[Shard]:
        """The plan's shards: pieces as column ranges, widest first (items are stored widest first; a dyadic
        piece's offset is then a multiple of its width), in device order within a size; the whole tables of
        `whole_column_wise` marked column_wise where the column-wise collective runs anyway (the plan cuts some table,
        or the base has column-wise widths: a tiered layout's fixed shards); else they stay table-wise (one collective
        either way, or the base's table-wise one)."""
        out: list[Shard] = []
        cut = bool(counts[~self.is_whole].any()) or (self.base_dists is not None and bool(self.base_dists[DIST_ROW[COLUMN_WISE]].any()))
        for t in range(self.num_tables):
            tab = instance.tables[t]
            its = range(int(self.first[t]), int(self.first[t + 1]))
            if counts[its[0]].sum() == 1:  # the whole table (then no piece: the pieces cover the table)
                mark = cut and self.whole_column_wise is not None and bool(self.whole_column_wise[t])
                out.append(Shard(table=tab.name, device=int(np.flatnonzero(counts[its[0]])[0]), column_wise=mark))
                continue
            offset = 0
            for i in its:  # widest first: items are stored by width descending
                for d in np.flatnonzero(counts[i]):
                    for _ in range(int(counts[i, d])):
                        out.append(Shard(table=tab.name, device=int(d), col_offset=offset, cols=int(self.width[i])))
                        offset += int(self.width[i])
        return out

    def counts_from_shards(self, instance: Instance, shards: list[Shard], num_devices: int) -> np.ndarray | None:
        """[I, D] counts of a plan made of whole tables and dyadic column pieces of the tables that have them here
        (None: a shard this item set cannot express -- a row, replicated or host-memory shard, or a width with no
        item: every item is an HBM shard, so a host-memory table read as one would be a plan over its device's HBM)."""
        index = instance.table_index()
        counts = np.zeros((self.num_items, num_devices), dtype=np.int64)
        for s in shards:
            t = index.get(s.table)
            if t is None or s.replicated or s.row_offset or s.rows is not None or s.kernel is not Kernel.fused or not 0 <= s.device < num_devices:
                return None
            w = s.width(instance.tables[t])
            its = np.arange(self.first[t], self.first[t + 1])
            hit = its[self.width[its] == w]
            if len(hit) != 1:
                return None
            counts[hit[0], s.device] += 1
        return counts if self.is_complete(counts) else None


def split_counts(dim: int, max_split: int) -> list[int]:
    """The piece counts 2, 4, ... <= max_split that cut `dim` into equal widths that stay multiples of 4."""
    out, k = [], 2
    while k <= max_split and dim % (k * DIM_ALIGNMENT) == 0:
        out.append(k)
        k *= 2
    return out


def even_split_counts(dim: int, max_split: int) -> list[int]:
    """The piece counts 2, 3, ... <= max_split that cut `dim` into equal widths that stay multiples of 4: the cuts a
    table whose pieces must share one width can take (not only the dyadic ones: 96 columns cut in 3 too)."""
    return [k for k in range(2, max_split + 1) if dim % k == 0 and (dim // k) % DIM_ALIGNMENT == 0]


def split_candidates(bm: BoundCostModel, max_split: int, limit: int) -> np.ndarray:
    """The `limit` tables with the highest compute alone (BoundCostModel.single_table_costs) that can be split at
    all: the ones whose weight on a device a split can spread (cheap tables balance by moving whole)."""
    if max_split < 2 or limit <= 0:
        return np.arange(0)
    dims = bm.table_dims.astype(np.int64)
    ok = np.array([bool(split_counts(int(d), max_split)) for d in dims])
    order = np.argsort(-bm.single_table_costs, kind="stable")
    return np.sort(order[ok[order]][:limit])


def build_items(
    instance: Instance, bm: BoundCostModel, split: np.ndarray | None = None, max_split: int = 1, apart: bool = True,
    deeper: dict[int, int] | None = None, widths: dict[int, set[int]] | None = None, whole_column_wise: np.ndarray | None = None,
    even: bool = False,
) -> Items:
    """Items of every table: the whole table, and for the tables in `split` its pieces dim/2, dim/4, ... down to
    dim/max_split (or dim/deeper[t] for a table a given plan cuts finer), and any width in `widths[t]` (the pieces a
    given plan cuts table t into, dyadic or not), at most one piece of a table per device when `apart`;
    `whole_column_wise` [T]: the tables whose whole item joins the column-wise all-to-all (`Items.whole_column_wise`);
    `even`: a table's pieces share one width (`Items.even`), so its items are the equal cuts dim/2, dim/3, ... and the
    widths in `widths` that divide it."""
    T = len(instance.tables)
    chosen = set(int(t) for t in (split if split is not None else []))
    deeper = deeper or {}
    widths = widths or {}
    table, parts, width = [], [], []
    first = [0]
    for t, tab in enumerate(instance.tables):
        limit = max(max_split, deeper.get(t, 1))
        ks = (even_split_counts if even else split_counts)(tab.dim, limit) if t in chosen or t in deeper else []
        ws = {tab.dim // k for k in ks} | {int(w) for w in widths.get(t, ()) if 0 < int(w) < tab.dim and int(w) % DIM_ALIGNMENT == 0
                                           and not (even and tab.dim % int(w))}
        for w in [tab.dim] + sorted(ws, reverse=True):
            table.append(t)
            parts.append(tab.dim // w)
            width.append(w)
        first.append(len(table))
    table_a = np.array(table, dtype=np.int64)
    width_a = np.array(width, dtype=np.int64)
    size = np.array([slice_bytes(instance, instance.tables[t], instance.tables[t].rows, int(w)) for t, w in zip(table, width)], dtype=np.int64)
    if len(table_a) == T:
        states = np.asarray(bm.table_states, dtype=np.float64)
    else:
        n = len(table_a)
        states = bm.shard_states(table_a, width_a.astype(np.float64), np.ones(n), np.ones(n))
    return Items(table_a, np.array(parts, dtype=np.int64), width_a, size, states, np.array(first, dtype=np.int64), bool(apart),
                 whole_column_wise=whole_column_wise, even=bool(even))


__all__ = ["Items", "build_items", "even_split_counts", "split_candidates", "split_counts"]
