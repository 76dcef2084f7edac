"""The row and grid splits a hot table is offered: a table whose lookups alone exceed what a balanced device carries.

Why its own module: the placement polish (solvers.placement.polish) judges one move at a time on a fixed plan, and
a row split never pays that way: it adds the table's partial sums to every device it lands on, while the devices
that held the table's column pieces stay where the other tables were balanced around them. The split pays only
once the other tables are moved again around it, so NeuroShard (solvers.neuroshard.finish, `hot_row_splits`)
takes each option offered here, runs its device polish around it and keeps the cheapest plan. Column pieces alone
cannot balance such a table: every piece still runs every one of the table's lookups (a 4-column piece of a
pooling-100 table on 512 H100s costs 1.24 ms of compute, simulated, against 1.86 for a 16-column one), while a
split by rows divides the lookups.

The options (every one a layout TorchRec runs; shardopt.core.torchrec_form checks the same):
- `row-wise`: by rows over every device;
- `table-row-wise`: by rows over the devices of the host (Topology.intra_group_size) the other tables load least;
- `grid CxR`: C equal, 4-aligned column blocks, each split by rows over the R devices of one host (TorchRec's
  `grid_shard`, R the host's size) or held whole-rowed on one device (R = 1: plain column pieces, finer than the
  beam's halvings reach in its budget); the blocks go to the hosts (devices) the other tables load least, round
  robin. Of the grids, the GRID_SHAPES_KEPT cheapest by `_grid_score` are offered (each costs the caller a rebalance).
"""

from __future__ import annotations

import numpy as np

from costmodels.base import BoundCostModel
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Kernel, Shard, Table
from solvers.placement.polish import row_groups, table_contribution
from solvers.placement.tiering import row_wise_shards

HOT_SPLIT_TABLES = 4  # the hottest tables whose row splits are judged with a rebalance (solvers.neuroshard.search)
GRID_SHAPES_KEPT = 3  # grid shapes offered per hot table, the cheapest by _grid_score


def hot_table_splits(instance: Instance, bm: BoundCostModel, shards: list[Shard]) -> list[tuple[int, list[tuple[str, list[Shard]]]]]:
    """The hot tables of a plan, hottest first (at most HOT_SPLIT_TABLES), each with its options (the module's
    docstring). A hot table is held whole-rowed in HBM (table- or column-wise, not replicated) and its compute,
    summed over its shards, exceeds the mean device compute (what a balanced device carries: no placement of its
    whole rows balances it)."""
    index = instance.table_index()
    groups: dict[int, list[Shard]] = {}
    for s in shards:
        groups.setdefault(index[s.table], []).append(s)
    D = bm.num_devices
    if D < 2:
        return []
    compute = {t: float(bm.compute_costs(table_contribution(instance, bm, t, g)[0], bm.devices).sum()) for t, g in groups.items()}
    mean = sum(compute.values()) / D
    out = []
    for t in sorted(groups, key=lambda t: (-compute[t], t)):
        g, table = groups[t], instance.tables[t]
        if compute[t] <= mean or len(out) >= HOT_SPLIT_TABLES:
            break
        if table.rows < 2 or any(s.replicated or s.kernel is not Kernel.fused or s.height(table) != table.rows for s in g):
            continue
        rest = [s for s in shards if index[s.table] != t]
        load = bm.plan_costs(rest).total
        options = [o for o in row_groups(instance, table, set(), Kernel.fused, None) if "host memory" not in o[0]]
        in_host = [k for k, (what, _) in enumerate(options) if what == "table-row-wise"]
        if in_host:
            least = min(in_host, key=lambda k: (float(load[[s.device for s in options[k][1]]].sum()), k))
            options = [o for k, o in enumerate(options) if k == least or k not in in_host]
        out.append((t, options + grid_splits(instance, bm, table, rest, load)))
    return out


def grid_shapes(instance: Instance, table: Table) -> list[tuple[int, int]]:
    """(column blocks, devices per block) of the grids offered for `table`: equal 4-aligned blocks, each on one
    device (at most one block per device) or over one host's devices (at most two blocks per host; one block over
    one host is the `table-row-wise` option), the whole table left out."""
    topo = instance.topology
    D, per_host = topo.num_devices, topo.intra_group_size
    blocks = [c for c in range(1, table.dim // DIM_ALIGNMENT + 1) if table.dim % c == 0 and (table.dim // c) % DIM_ALIGNMENT == 0]
    out = []
    for r in sorted({1, per_host}):
        if r > 1 and table.rows < r:
            continue
        out += [(c, r) for c in blocks if c > 1 and c * r <= (D if r == 1 else 2 * D)]
    return out


def grid_splits(instance: Instance, bm: BoundCostModel, table: Table, rest: list[Shard], load: np.ndarray) -> list[tuple[str, list[Shard]]]:
    """The GRID_SHAPES_KEPT cheapest grids of `table` (grid_shapes) beside `rest` (the plan's other tables, whose
    device costs are `load`), cheapest first."""
    scored = []
    for c, r in grid_shapes(instance, table):
        shards = grid_layout(instance, table, c, r, load)
        scored.append((_grid_score(bm, rest + shards, shards), c, r, shards))
    scored.sort(key=lambda x: (x[0], x[1], x[2]))
    return [(f"grid {c}x{r}", shards) for _, c, r, shards in scored[:GRID_SHAPES_KEPT]]


def grid_layout(instance: Instance, table: Table, blocks: int, per_block: int, load: np.ndarray) -> list[Shard]:
    """`table` as `blocks` equal column blocks, each on the least-loaded free device (`per_block` 1) or split by rows
    over the devices of the least-loaded host (`per_block` the host's size; a host takes a second block once every
    host has one)."""
    topo = instance.topology
    width = table.dim // blocks
    if per_block == 1:
        order = sorted(range(topo.num_devices), key=lambda d: (float(load[d]), d))[:blocks]
        return [Shard(table=table.name, device=d, col_offset=b * width, cols=width) for b, d in enumerate(order)]
    size = topo.intra_group_size
    hosts = sorted(range(topo.num_intra_groups), key=lambda h: (float(load[h * size:(h + 1) * size].sum()), h))
    out = []
    for b in range(blocks):
        h = hosts[b % len(hosts)]
        out += [s.model_copy(update={"col_offset": b * width, "cols": width}) for s in row_wise_shards(table, list(range(h * size, (h + 1) * size)))]
    return out


def _grid_score(bm: BoundCostModel, trial: list[Shard], shards: list[Shard]) -> float:
    """A grid judged before the rebalance: the costliest device holding one of its pieces, or the mean device of
    the plan with it where that is higher (the rebalance can lower the other devices towards the mean, not below)."""
    total = bm.plan_costs(trial).total
    mine = sorted({s.device for s in shards})
    return max(float(total[mine].max()), float(total.mean()))
