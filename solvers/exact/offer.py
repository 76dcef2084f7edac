"""What the exact models are offered and what they need: the pieces (whole tables, dyadic column pieces, the widths a
warm start cuts), the necessary conditions on an instance before any model is built, and the next neighbourhood of the
large-model search. Pure functions of the instance and the options, apart from `ExactSolver`'s loop (solver.py)."""

from __future__ import annotations

import numpy as np

from costmodels.base import BoundCostModel
from shardopt.core.feasibility import infeasibility_reason
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Shard
from shardopt.core.memory import slice_bytes, table_bytes_array
from solvers.exact.linearize import Linearization
from solvers.exact.options import ExactOptions
from solvers.placement.rules import column_wise_allowed, even_columns, must_split, whole_only
from solvers.placement.split_items import Items, build_items, split_candidates, split_counts


def offered_items(instance: Instance, bm: BoundCostModel, options: ExactOptions, max_split: int,
                  start: list[Shard] | None = None) -> Items:
    """The pieces offered: whole tables, and column pieces (dim/2, dim/4, ... >= dim/max_split) of the
    `split_tables` tables with the highest compute alone and of any table too big for every device whole, and
    the pieces the warm start `start` cuts tables into (any 4-aligned widths: NeuroShard's uneven halves)."""
    split = split_candidates(bm, max_split, options.split_tables)
    caps = instance.topology.capacities()
    too_big = [i for i, b in enumerate(table_bytes_array(instance)) if b > max(caps)]
    if max_split > 1 and too_big:
        split = np.union1d(split, np.array(too_big, dtype=np.int64))
    if max_split > 1 and must_split(instance):  # (placement constraints: tables that may only be column-wise)
        split = np.union1d(split, np.array(sorted(must_split(instance)), dtype=np.int64))
    whole = whole_only(instance)  # (... and tables that must stay whole)
    split = np.array([t for t in split if int(t) not in whole], dtype=np.int64)
    deeper: dict[int, int] = {}
    widths: dict[int, set[int]] = {}
    index = instance.table_index()
    for sh in start or []:
        t = index[sh.table]
        if t in whole:
            continue
        w = sh.width(instance.tables[t])
        if w != instance.tables[t].dim:
            deeper[t] = max(deeper.get(t, 1), instance.tables[t].dim // w)  # (the dyadic pieces down to it too)
            widths.setdefault(t, set()).add(w)
    # (join_collectives: a whole table may join the column-wise all-to-all, marked column_wise, where others are cut)
    joins = column_wise_allowed(instance) if options.join_collectives and max_split > 1 else None
    return build_items(instance, bm, split, max_split, options.split_apart, deeper, widths, joins, even=even_columns(instance))


def split_infeasibility(instance: Instance, max_split: int) -> str | None:
    """Necessary conditions: shardopt.core.feasibility's for whole tables; with splits, a table too big for every
    device must fit once cut into max_split shards."""
    if max_split < 2:
        return infeasibility_reason(instance)
    caps = instance.topology.capacities()
    sizes = table_bytes_array(instance)
    if int(sizes.sum()) > sum(caps):
        return infeasibility_reason(instance)
    for t, size in zip(instance.tables, sizes):
        if size <= max(caps):
            continue
        ks = split_counts(t.dim, max_split)
        if not ks:
            return (f"table {t.name!r} needs {int(size):,} bytes but the largest device holds {max(caps):,} bytes, and its dim "
                    f"{t.dim} cannot be cut into equal {DIM_ALIGNMENT}-aligned column shards (max_split {max_split})")
        piece = slice_bytes(instance, t, t.rows, t.dim // ks[-1])
        if piece > max(caps):
            return (f"table {t.name!r} needs {int(size):,} bytes; even cut into {ks[-1]} column shards of {t.dim // ks[-1]} each, "
                    f"a shard needs {piece:,} bytes, more than the largest device's {max(caps):,} (max_split {max_split})")
    return None


def next_neighbourhood(lin: Linearization, items: Items, fits: np.ndarray, best: np.ndarray, k: int, fails: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The next neighbourhood (`ExactSolver._neighbourhoods`): (its devices -- the k slowest and k light ones, the
    lightest first, the next ones after each failure --, the tables free to move, the allowed (item, device) pairs)."""
    order = np.argsort(-lin.device_costs(best), kind="stable")
    light = order[k:][::-1]  # lightest first
    start = (fails * k) % max(1, len(light))
    chosen = np.unique(np.concatenate([order[:k], np.roll(light, -start)[:k]]))
    # free: the tables whose every piece is on a chosen device (a table also elsewhere stays as it is)
    inside = np.bincount(items.table, weights=best[:, chosen].sum(axis=1), minlength=items.num_tables)
    total = np.bincount(items.table, weights=best.sum(axis=1), minlength=items.num_tables)
    free_tables = np.flatnonzero((inside > 0) & (inside == total))
    free = np.isin(items.table, free_tables)
    allowed = best > 0  # fixed pieces stay where they are
    allowed[free] = False
    allowed[np.ix_(np.flatnonzero(free), chosen)] = fits[np.ix_(np.flatnonzero(free), chosen)]
    return chosen, free_tables, allowed
