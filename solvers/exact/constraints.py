"""Placement constraints (shardopt.core.ir.PlacementConstraints) in the exact solvers' model.

Why a module of its own: the constraints enter the model in two forms every backend shares -- a mask of the (item,
device) pairs they allow (pins, allowed sharding types, `min_partition`) folded into the pairs that fit, and rows
across tables (co-locate, separate) -- and the solver decides once which tables it may cut (solvers.placement.rules:
what NeuroShard reads too). A grouped table is placed whole, so "on the same devices" and "never on one device" are
one equality or one at-most-one row per device over Booleans. The stages that do not read the model (the local
search of the linear model, the device polish, the row splits) keep their plans only where `constraint_violations`
finds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardopt.core.ir import Instance, Table
from solvers.placement.rules import min_widths, must_split, placement_conflict, whole_only
from solvers.placement.split_items import Items, split_counts


@dataclass(frozen=True)
class TableGroups:
    """The cross-table constraints as rows over whole-table items, one of each per device."""

    together: tuple[tuple[int, int], ...] = ()  # x[a, d] == x[b, d]: co-located tables, chained pairwise
    apart: tuple[tuple[int, ...], ...] = ()  # sum of x[i, d] <= 1: tables to keep apart

    @property
    def empty(self) -> bool:
        return not (self.together or self.apart)

    def met_by(self, counts: np.ndarray) -> bool:
        """Whether a plan given as item counts [I, D] meets every row."""
        for a, b in self.together:
            if not np.array_equal(counts[a] > 0, counts[b] > 0):
                return False
        return all(int((counts[list(group)] > 0).sum(axis=0).max()) <= 1 for group in self.apart)


def exact_conflict(instance: Instance, max_split: int, tiers: bool = True) -> str | None:
    """Why the exact solvers' placements (whole tables and column pieces in HBM; with `tiers`, a tiered start plan
    too) cannot meet the instance's constraints (None: they can try; whether a plan exists is the model's to find)."""
    narrowest = min_widths(instance)

    def can_split(t: int, table: Table) -> bool:  # (their pieces: equal dyadic widths down to dim / max_split)
        ks = split_counts(table.dim, max_split)
        return bool(ks) and table.dim // ks[0] >= narrowest[t]

    return placement_conflict(instance, "the exact solvers", can_split, tiers=tiers)


def constraint_mask(instance: Instance, items: Items) -> np.ndarray:
    """[I, D] the (item, device) pairs the constraints allow: a pinned table's items on its devices only, no whole
    item of a table that must be cut, no piece of a table that must stay whole or narrower than its min_partition."""
    D = instance.topology.num_devices
    ok = np.ones((items.num_items, D), dtype=bool)
    c = instance.constraints
    if c is None:
        return ok
    index = instance.table_index()
    whole = items.is_whole
    narrowest = min_widths(instance)
    for t in whole_only(instance):
        ok[(items.table == t) & ~whole] = False
    for t in must_split(instance):
        ok[items.first[t]] = False
    for tc in c.tables:
        of_t = items.table == index[tc.table]
        if tc.devices is not None:
            pinned = np.zeros(D, dtype=bool)
            pinned[tc.devices] = True
            ok[of_t] &= pinned[None, :]
        ok[of_t & ~whole & (items.width < narrowest[index[tc.table]])] = False
    return ok


def table_groups(instance: Instance, items: Items) -> TableGroups:
    """The co-locate and separate groups as rows over the tables' whole items."""
    c = instance.constraints
    if c is None:
        return TableGroups()
    index = instance.table_index()
    whole = items.first
    together = tuple((int(whole[index[g[k]]]), int(whole[index[g[k + 1]]])) for g in c.colocate for k in range(len(g) - 1))
    apart = tuple(tuple(sorted({int(whole[index[name]]) for name in g})) for g in c.separate)
    return TableGroups(together, apart)
