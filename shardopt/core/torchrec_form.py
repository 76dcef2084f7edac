"""The form TorchRec's DistributedModelParallel can load a table's shards in, as rules on a plan.

Why in the core: these are rules a plan breaks or keeps, like memory and coverage, and a plan meant for TorchRec (an
instance with `constraints.torchrec`, which ShardoptPlanner always sets) must keep them before any solver returns it.
So the plan checker enforces them (shardopt.core.plan_check), the searches that cut tables read them
(solvers.placement.rules), and the TorchRec export (shardopt.data.torchrec_io) refuses with the same words; none of it
needs TorchRec installed.

The rules, per table (each found by running DistributedModelParallel on the shapes it refuses, docs/torchrec.md):
- one compute kernel and one cache load factor (TorchRec's ParameterSharding has one of each);
- row slices in one of TorchRec's row layouts: blocks of ceil(rows / ranks) on the ranks of the group in rank order,
  over every rank (`row_wise`) or the ranks of one host (`table_row_wise`); for row x column blocks each column block
  so laid out over one host (`grid_shard`). TorchRec's input distribution routes each id by that block size whatever
  the sharding spec says, so any other layout sends ids to the wrong rank;
- the slices of the table on one rank of one shape: the fused kernel views them as one stack of equal blocks
  (torchrec.distributed.batched_embedding_kernel: `data.view(-1, width of the first)`);
- with `even_columns` (TorchRec 1.8's own checkpoint path needs it: `dmp.load_state_dict(dmp.state_dict())` fails on
  a table whose column slices differ in width, on every rank; torch.distributed.checkpoint does not): every column
  slice of the table of one width.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from shardopt.core.ir import Instance, Shard, Table
from shardopt.core.sharding_types import COLUMN_WISE, GRID_SHARD, ROW_WISE, TABLE_ROW_WISE, sharding_type


def rw_layout(rows: int, num_ranks: int) -> list[tuple[int, int]]:
    """TorchRec's row-wise layout: (row_offset, rows) of rank i's block, blocks of ceil(rows / num_ranks), the last
    ones shorter or empty (torchrec.distributed.sharding_plan._calculate_rw_shard_sizes_and_offsets)."""
    block = -(-rows // num_ranks)
    out = []
    for i in range(num_ranks):
        start = min(i * block, rows)
        out.append((start, min(block, rows - start)))
    return out


def host_ranks(instance: Instance, host: int) -> list[int]:
    """The ranks of a table-row-wise group: a host (an NVLink group of hosts with topology levels, as TorchRec's
    intra_group_size with pod_size)."""
    topo = instance.topology
    return [d for d in range(topo.num_devices) if topo.intra_group_of(d) == host]


def layout_entries(rows: int, ranks: list[int]) -> list[tuple[int, int, int]]:
    """(row_offset, rows, rank) of TorchRec's row layout over `ranks`, the non-empty blocks only."""
    return [(off, n, r) for (off, n), r in zip(rw_layout(rows, len(ranks)), ranks) if n > 0]


def _fmt_rows(entries: list[tuple[int, int, int]], limit: int = 6) -> str:
    shown = ", ".join(f"[{o}, {o + n}) on {r}" for o, n, r in entries[:limit])
    return shown + (f", ... ({len(entries)} in all)" if len(entries) > limit else "")


def row_layout(instance: Instance, table: Table, shards: Sequence[Shard]) -> tuple[str | None, list[int], str]:
    """For full-width row slices: (TorchRec sharding type, its ranks, "") when they are one of TorchRec's row layouts
    (table_row_wise over one host's ranks of several hosts, tried first; row_wise over all ranks), else (None, [],
    why) with the layouts that would have been accepted."""
    topo = instance.topology
    ours = sorted((s.row_range(table)[0], s.height(table), s.device) for s in shards)
    tried = []
    hosts = {topo.intra_group_of(s.device) for s in shards}
    if len(hosts) == 1 and topo.num_intra_groups > 1:
        host = next(iter(hosts))
        ranks = host_ranks(instance, host)
        expected = layout_entries(table.rows, ranks)
        if ours == expected:
            return TABLE_ROW_WISE, ranks, ""
        tried.append(f"table_row_wise on host {host} (ranks {ranks[0]}..{ranks[-1]}): {_fmt_rows(expected)}")
    ranks = list(range(topo.num_devices))
    expected = layout_entries(table.rows, ranks)
    if ours == expected:
        return ROW_WISE, ranks, ""
    tried.append(f"row_wise over all {len(ranks)} ranks: {_fmt_rows(expected)}")
    why = (
        f"table {table.name!r}: its row shards ({_fmt_rows(ours)}) are not a TorchRec row layout: TorchRec puts blocks "
        f"of ceil(rows / ranks) rows on the ranks of the group in rank order (and routes each id to the rank of its "
        f"block whatever the sharding spec says), i.e. " + "; or ".join(tried) + ". Re-split the table in one of these "
        "layouts (shardopt.core.torchrec_form.rw_layout)"
    )
    return None, [], why


def grid_problem(instance: Instance, table: Table, shards: Sequence[Shard]) -> str:
    """'' when row x column blocks are TorchRec's grid layout (each column block split by rows over the ranks of one
    host in TorchRec's row layout), else why not."""
    topo = instance.topology
    by_cols: dict[tuple[int, int], list[Shard]] = defaultdict(list)
    for s in shards:
        by_cols[s.col_range(table)].append(s)
    for (c0, c1), group in sorted(by_cols.items()):
        ours = sorted((s.row_range(table)[0], s.height(table), s.device) for s in group)
        hosts = sorted({topo.intra_group_of(s.device) for s in group})
        if len(hosts) != 1 or ours != layout_entries(table.rows, host_ranks(instance, hosts[0])):
            host = hosts[0]
            expected = layout_entries(table.rows, host_ranks(instance, host))
            return (
                f"table {table.name!r}: columns [{c0}, {c1}) are split by rows as {_fmt_rows(ours)}, which is not TorchRec's "
                f"grid_shard layout (each column block split over the ranks of one host in blocks of ceil(rows / devices "
                f"per host), in rank order: on host {host} {_fmt_rows(expected)})"
            )
    return ""


def same_rank_problem(table: Table, shards: Sequence[Shard]) -> str:
    """'' unless one rank holds several slices of the table of different shapes, which TorchRec cannot shard: its
    fused kernel views a table's slices on one rank as one stack of equal blocks
    (torchrec.distributed.batched_embedding_kernel._gen_named_parameters_by_table_fused: data.view(-1, width of the
    first)), so DistributedModelParallel fails ("shape '[-1, 16]' is invalid for input of size 600") or builds a
    parameter of the wrong shape. TorchRec's own column-wise layouts use equal blocks, so never meet this."""
    by_rank: dict[int, list[Shard]] = defaultdict(list)
    for s in shards:
        by_rank[s.device].append(s)
    for rank, group in sorted(by_rank.items()):
        shapes = sorted({(s.height(table), s.width(table)) for s in group})
        if len(shapes) > 1:
            shown = ", ".join(f"{h} x {w}" for h, w in shapes)
            return (
                f"table {table.name!r}: device {rank} holds {len(group)} slices of it of different shapes ({shown} rows x "
                "columns); TorchRec's fused kernel keeps a table's slices on one rank as equal blocks and cannot shard "
                "this (DistributedModelParallel fails): give the slices on one device the same width, or put them on "
                "different devices"
            )
    return ""


def kernel_problem(table: Table, shards: Sequence[Shard]) -> str:
    """'' unless the table's shards mix kernels or cache load factors (TorchRec's ParameterSharding has one compute
    kernel and one cache_params per table)."""
    kernels = sorted({s.kernel for s in shards}, key=lambda k: k.value)
    if len(kernels) > 1:
        where = "; ".join(f"{k.value} on device(s) {sorted({s.device for s in shards if s.kernel is k})}" for k in kernels)
        return (f"table {table.name!r}: its shards use {len(kernels)} kernels ({where}), but TorchRec has one compute kernel "
                "per table (one ParameterSharding): give all of the table's shards the same kernel")
    factors = sorted({s.cache_load_factor for s in shards if s.cache_load_factor is not None})
    if len(factors) > 1:
        return (f"table {table.name!r}: its fused_uvm_caching shards use {len(factors)} cache load factors "
                f"({', '.join(f'{f:g}' for f in factors)}), but TorchRec has one cache_params.load_factor per table: give "
                "all of the table's shards the same cache_load_factor")
    return ""


def column_widths(table: Table, shards: Sequence[Shard]) -> set[int]:
    """The widths of the table's column slices (narrower than the table; replicas aside)."""
    return {s.width(table) for s in shards if not s.replicated and s.width(table) != table.dim}


def uneven_problem(table: Table, shards: Sequence[Shard]) -> str:
    """'' unless the table's column slices differ in width (TorchRec 1.8's state_dict reload fails on them)."""
    widths = column_widths(table, shards)
    if len(widths) > 1:
        return (f"table {table.name!r}: its column slices are {', '.join(str(w) for w in sorted(widths, reverse=True))} columns wide; "
                "TorchRec's own checkpoint reload (dmp.load_state_dict(dmp.state_dict())) fails on slices of unequal width, "
                "so a plan for it cuts a table into slices of one width (constraints.torchrec.even_columns)")
    return ""


def layout_problem(instance: Instance, table: Table, shards: Sequence[Shard]) -> str:
    """'' when TorchRec can shard the table's shards as they are (one kernel, a TorchRec row or grid layout, equal
    slices on one rank), else why not. Evenness of widths is `uneven_problem`'s."""
    if not shards:
        return ""
    why = kernel_problem(table, shards)
    if why:
        return why
    kind = sharding_type(instance.topology, table, shards)
    if kind in (ROW_WISE, TABLE_ROW_WISE):
        return row_layout(instance, table, shards)[2]
    if kind in (COLUMN_WISE, GRID_SHARD):
        why = same_rank_problem(table, shards)
        if why:
            return why
    if kind == GRID_SHARD:
        return grid_problem(instance, table, shards)
    return ""


def form_problems(instance: Instance, by_table: dict[str, list[Shard]], even_columns: bool) -> list[tuple[str, str]]:
    """(table, why) for every table whose shards TorchRec cannot load as they are (`even_columns`: also where its
    column slices differ in width)."""
    out = []
    for t in instance.tables:
        shards = by_table.get(t.name, [])
        why = layout_problem(instance, t, shards) or (uneven_problem(t, shards) if even_columns else "")
        if why:
            out.append((t.name, why))
    return out
