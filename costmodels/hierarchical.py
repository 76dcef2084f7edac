"""Communication of row-wise splits held within one host: TorchRec's `table_row_wise` (and `grid_shard`) output dist.

Why its own term: a table split by rows over the devices of one host (of several) does not join the all-to-all of
pooled outputs. TorchRec's `TwRwPooledEmbeddingDist` first reduce-scatters the partial sums *within the host*
(NVLink), then runs an all-to-all *across hosts* among the devices of equal local rank (network), one collective
after the other (torchrec/distributed/sharding/twrw_sharding.py), and apart from the all-to-all of the other
sharding types. Priced as a direct reduce-scatter over all devices, as every row split was before, it paid the
network `L` times too much and NVLink `D / L` times too little (`L` devices per host), so a solver rarely chose it
even where TorchRec's planner does. The formulas are in docs/analytic-model.md ("Row-wise splits within a host").

The input is each host's *hierarchical width* `W_h`: the summed width of the column blocks split by rows over its
devices (a table-row-wise table adds its dim once, not once per device). `table_comm_widths` says which shards of a
table are such blocks; `hierarchical_comm_time` turns the widths into every device's time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from shardopt.core.ir import Instance, Shard, Table
from shardopt.core.sharding_types import COLUMN_WISE, GRID_SHARD, ROW_WISE, TABLE_ROW_WISE, TABLE_WISE, sharding_type

COMM_BYTES = 4  # fp32 pooled partial sums and their gradients, as the all-to-all
MS = 1e3


def in_host_row_split(instance: Instance, table: Table, shards: Sequence[Shard]) -> list[bool]:
    """For each of one table's shards: whether it belongs to a column block split by rows within one host.

    Such a block (the shards of one column range) has row slices on every device of one host and on no other, in a
    cluster of several hosts of several devices: TorchRec's table_row_wise and grid_shard layouts are made of them,
    and the hierarchical collectives run over the whole host. Any other shard - whole, a column slice, a row split
    across hosts (TorchRec's row_wise: the direct reduce-scatter) or over part of a host (no TorchRec layout; priced as
    the direct reduce-scatter, which such a split can always run), a replica - is not."""
    topo = instance.topology
    out = [False] * len(shards)
    group = topo.intra_group_size  # (the host; with topology levels an NVLink domain over hosts: Topology.intra_group_size)
    if topo.num_intra_groups < 2 or group < 2:
        return out
    blocks: dict[tuple[int, int], list[int]] = defaultdict(list)
    for k, s in enumerate(shards):
        if not s.replicated:
            blocks[s.col_range(table)].append(k)
    for members in blocks.values():
        block = [shards[k] for k in members]
        hosts = {topo.intra_group_of(s.device) for s in block}
        if len(hosts) == 1 and len({s.device for s in block}) == group and any(s.height(table) < table.rows for s in block):
            for k in members:
                out[k] = True
    return out


def host_row_splits(instance: Instance, shards: Sequence[Shard]) -> tuple[list[bool], np.ndarray]:
    """(for each shard: whether it is in a column block split by rows within one host (`in_host_row_split`), each
    host's hierarchical width [H]) of any shards, of any tables: every such block adds its width once to its host."""
    topo = instance.topology
    flags = [False] * len(shards)
    hier = np.zeros(topo.num_intra_groups)
    by_table: dict[str, list[int]] = defaultdict(list)
    for k, s in enumerate(shards):
        by_table[s.table].append(k)
    tables = {t.name: t for t in instance.tables}
    for name, ks in by_table.items():
        table = tables[name]
        inner = in_host_row_split(instance, table, [shards[k] for k in ks])
        counted: set[tuple[int, int]] = set()
        for k, nested in zip(ks, inner):
            if nested:
                flags[k] = True
                block = shards[k].col_range(table)
                if block not in counted:
                    counted.add(block)
                    hier[topo.intra_group_of(shards[k].device)] += block[1] - block[0]
    return flags, hier


def in_host_row_split_tables(instance: Instance, shards: Sequence[Shard]) -> list[str]:
    """The tables (in instance order) of which some column block is split by rows within one host."""
    flags, _ = host_row_splits(instance, shards)
    names = {s.table for s, nested in zip(shards, flags) if nested}
    return [t.name for t in instance.tables if t.name in names]


OUTPUT_DIST_ORDER = (TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, GRID_SHARD)  # (data_parallel: no all-to-all)
DIST_ROW = {k: g for g, k in enumerate(OUTPUT_DIST_ORDER)}


def output_dist_rows(instance: Instance, shards: Sequence[Shard], nested: Sequence[bool] | None = None) -> np.ndarray:
    """All-to-all widths [G, D] of any shards, one row per sharding type of OUTPUT_DIST_ORDER (G = 5 always; a row
    of zeros is a type absent, which runs no collective).

    TorchRec runs one output dist per sharding type (`ShardedEmbeddingBagCollection._output_dists`), one after the
    other on one stream, every rank taking part in each: a plan that mixes table- and column-wise tables runs two
    all-to-alls, each with its start-up. A shard's row is its table's sharding type
    (shardopt.core.sharding_types.sharding_type); replicas (their all-reduce is `replicated_comm`) and blocks split by
    rows within one host (`nested`, default `host_row_splits`: their own collectives) join no row. Widths add in
    shard order, as the single all-to-all always had them."""
    topo = instance.topology
    out = np.zeros((len(OUTPUT_DIST_ORDER), topo.num_devices))
    tables = {t.name: t for t in instance.tables}
    for s, row in zip(shards, shard_dist_rows(instance, shards, nested)):
        if row >= 0:
            out[row, s.device] += float(s.width(tables[s.table]))
    return out


def shard_dist_rows(instance: Instance, shards: Sequence[Shard], nested: Sequence[bool] | None = None) -> np.ndarray:
    """[n] each shard's output dist (its row in `output_dist_rows`; -1: a replica or a block split by rows within one
    host, which join no all-to-all): its table's sharding type, all of a table's shards classified together."""
    topo = instance.topology
    if nested is None:
        nested, _ = host_row_splits(instance, shards)
    by_table: dict[str, list[int]] = defaultdict(list)
    for k, s in enumerate(shards):
        by_table[s.table].append(k)
    tables = {t.name: t for t in instance.tables}
    out = np.full(len(shards), -1, dtype=np.int64)
    for name, ks in by_table.items():
        row = DIST_ROW.get(sharding_type(topo, tables[name], [shards[k] for k in ks]), -1)
        for k in ks:
            if not (nested[k] or shards[k].replicated):
                out[k] = row
    return out


def output_dist_widths(instance: Instance, shards: Sequence[Shard], nested: Sequence[bool] | None = None) -> tuple[np.ndarray, list[str]]:
    """(all-to-all widths [G, D], their sharding types [G]) of the output dists a plan runs: `output_dist_rows`
    without the absent types."""
    rows = output_dist_rows(instance, shards, nested)
    present = rows.sum(axis=1) > 0
    return rows[present], [k for k, p in zip(OUTPUT_DIST_ORDER, present) if p]


def table_comm_widths(instance: Instance, table: Table, shards: Sequence[Shard]) -> tuple[np.ndarray, np.ndarray]:
    """(all-to-all widths [G, D] by output dist (`output_dist_rows`: the table's sharding type's row), hierarchical
    width per host [H]) of one table's shards: a column block split by rows within one host (`in_host_row_split`)
    adds its width once to its host; every other shard adds its width to its device in its type's all-to-all;
    replicas add nothing (their all-reduce is `replicated_comm`)."""
    flags, hier = host_row_splits(instance, shards)
    return output_dist_rows(instance, shards, flags), hier


def hierarchical_comm_time(
    host_widths: np.ndarray,
    *,
    devices_per_host: int,
    num_devices: int,
    batch: float,
    intra_bw: float,
    inter_bw: float,
    latency_s: float,
    network_latency_s: float,
) -> np.ndarray:
    """One direction's time (ms) of the hierarchical collectives on every device: [..., H] -> [..., D].

    With `L` devices per host, `H` hosts, `q = B / D * 4` bytes per unit of width and peer, device d on host h:
    the reduce-scatter within the host sends and receives `(L - 1) / L * B * W_h * 4 = (L - 1) H q W_h` over NVLink;
    the all-to-all across hosts (each device with the `B / L` samples it reduced, to the `H - 1` devices of its local
    rank elsewhere) sends `(H - 1) q W_h` and receives `q (sum W - W_h)` over the network. The two run one after the
    other (their times add), each with its start-up latency, on every device once any host has a hierarchical block
    (TorchRec runs the collectives on every rank). Backward (all-to-all back, all-gather within the host) moves the
    same bytes."""
    w = np.asarray(host_widths, dtype=np.float64)
    L = int(devices_per_host)
    host = np.arange(num_devices) // L
    n_hosts = w.shape[-1]
    q = batch / num_devices * COMM_BYTES
    mine = w[..., host]  # [..., D]: my host's width
    total = w.sum(axis=-1, keepdims=True)
    intra = (L - 1) * n_hosts * q * mine / intra_bw
    inter = np.maximum((n_hosts - 1) * q * mine, q * (total - mine)) / inter_bw
    active = total > 0
    start = np.where(active, 2 * latency_s + network_latency_s, 0.0)
    return (intra + inter + start) * MS
