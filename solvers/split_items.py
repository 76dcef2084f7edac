"""The placement choices an exact model picks among: for each table, the whole table and (optionally) its equal
column splits into 2, 4, ... shards.

An *item* is one way to cut a table: `parts` equal column shards, each `width` columns wide. A plan chooses exactly
one item per table and puts its `parts` shards on devices (on distinct devices when `apart`). The exact solvers
hold a plan as a count matrix ``counts[I, D]`` (shards of item i on device d; the rows of unchosen items are 0),
which covers table-wise plans (only whole-table items) and split ones alike.

Why equal splits in powers of two: it is what the issue asks for (split into 2, 4, ...), what NeuroShard's halvings
produce for a table halved evenly, and it keeps one Boolean per (shard kind, device) -- an uneven cut would need a
variable per column offset. Widths stay multiples of DIM_ALIGNMENT (fbgemm's TBE needs 4-aligned dims).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.base import BoundCostModel
from shardopt.ir import DIM_ALIGNMENT, Instance, Shard
from shardopt.memory import slice_bytes


@dataclass(frozen=True)
class Items:
    """Every table's items, table by table: the items of table t are ``first[t]:first[t + 1]``, whole table first."""

    table: np.ndarray  # [I] table index
    parts: np.ndarray  # [I] shards of the item (1 = the whole table)
    width: np.ndarray  # [I] columns of one shard
    size: np.ndarray  # [I] bytes of one shard (weights + optimizer state), int64
    states: np.ndarray  # [I, F] cost-model state of one shard
    first: np.ndarray  # [T + 1]
    apart: bool = True  # the shards of one item go to distinct devices

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
    def table_wise(self) -> bool:
        return self.num_items == self.num_tables

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

    def device_of(self, counts: np.ndarray) -> np.ndarray | None:
        """[T] device per table if the plan is table-wise (None otherwise)."""
        split = np.ones(self.num_items, dtype=bool)
        split[self.whole] = False
        whole = counts[self.whole]
        if counts[split].any() or (whole.sum(axis=1) != 1).any():
            return None
        return whole.argmax(axis=1)

    def chosen(self, counts: np.ndarray) -> np.ndarray:
        """[T] the item each table uses (the first with shards placed; -1 when none)."""
        placed = counts.sum(axis=1) > 0
        out = np.full(self.num_tables, -1, dtype=np.int64)
        for t in range(self.num_tables):
            on = np.flatnonzero(placed[self.first[t] : self.first[t + 1]])
            if len(on):
                out[t] = self.first[t] + on[0]
        return out

    def is_complete(self, counts: np.ndarray) -> bool:
        """Each table uses exactly one item, with all its shards placed (on distinct devices when `apart`)."""
        per_item = counts.sum(axis=1)
        if (counts < 0).any() or (self.apart and (counts > 1).any()):
            return False
        used = (per_item > 0).astype(np.int64)
        if (np.add.reduceat(used, self.first[:-1]) != 1).any():
            return False
        return bool(((per_item == 0) | (per_item == self.parts)).all())

    def device_states(self, counts: np.ndarray) -> np.ndarray:
        """[D, F] summed state of each device."""
        return counts.T.astype(np.float64) @ self.states

    def device_widths(self, counts: np.ndarray) -> np.ndarray:
        """[D] pooled width of each device."""
        return counts.T.astype(np.float64) @ self.width

    def device_bytes(self, counts: np.ndarray) -> np.ndarray:
        """[D] bytes on each device, exact integers."""
        return counts.T.astype(np.int64) @ self.size

    def shards(self, counts: np.ndarray, instance: Instance) -> list[Shard]:
        """The plan's shards: split items as column ranges, in device order within a table."""
        out: list[Shard] = []
        for i in np.flatnonzero(counts.sum(axis=1) > 0):
            t = instance.tables[int(self.table[i])]
            if self.parts[i] == 1:
                out.append(Shard(table=t.name, device=int(np.flatnonzero(counts[i])[0])))
                continue
            offset = 0
            for d in np.flatnonzero(counts[i]):
                for _ in range(int(counts[i, d])):
                    out.append(Shard(table=t.name, device=int(d), col_offset=offset, cols=int(self.width[i])))
                    offset += int(self.width[i])
        return out


def split_counts(dim: int, max_split: int) -> list[int]:
    """The split counts 2, 4, ... <= max_split that cut `dim` into equal widths that stay multiples of 4."""
    out, k = [], 2
    while k <= max_split and dim % (k * DIM_ALIGNMENT) == 0:
        out.append(k)
        k *= 2
    return out


def split_candidates(bm: BoundCostModel, max_split: int, limit: int) -> np.ndarray:
    """The `limit` tables with the highest compute alone (BoundCostModel.single_table_costs) that can be split at
    all: the ones whose weight on a device a split can spread (cheap tables balance by moving whole)."""
    if max_split < 2 or limit <= 0:
        return np.arange(0)
    dims = bm.table_dims.astype(np.int64)
    ok = np.array([bool(split_counts(int(d), max_split)) for d in dims])
    order = np.argsort(-bm.single_table_costs, kind="stable")
    return np.sort(order[ok[order]][:limit])


def build_items(instance: Instance, bm: BoundCostModel, split: np.ndarray | None = None, max_split: int = 1, apart: bool = True) -> Items:
    """Items of every table: the whole table, and for the tables in `split` its equal splits up to `max_split`
    (powers of two) on distinct devices when `apart`."""
    T = len(instance.tables)
    chosen = set(int(t) for t in (split if split is not None else []))
    table, parts, width = [], [], []
    first = [0]
    for t, tab in enumerate(instance.tables):
        ks = [1] + (split_counts(tab.dim, max_split) if t in chosen else [])
        for k in ks:
            table.append(t)
            parts.append(k)
            width.append(tab.dim // k)
        first.append(len(table))
    table_a = np.array(table, dtype=np.int64)
    width_a = np.array(width, dtype=np.int64)
    size = np.array([slice_bytes(instance, instance.tables[t], instance.tables[t].rows, int(w)) for t, w in zip(table, width)], dtype=np.int64)
    if len(table_a) == T:
        states = np.asarray(bm.table_states, dtype=np.float64)
    else:
        n = len(table_a)
        states = bm.shard_states(table_a, width_a.astype(np.float64), np.ones(n), np.ones(n))
    return Items(table_a, np.array(parts, dtype=np.int64), width_a, size, states, np.array(first, dtype=np.int64), bool(apart))


def table_wise_items(instance: Instance, bm: BoundCostModel) -> Items:
    return build_items(instance, bm)


__all__ = ["Items", "build_items", "split_candidates", "split_counts", "table_wise_items"]
