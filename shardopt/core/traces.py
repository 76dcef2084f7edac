"""Index traces for an instance's tables and shards, generated from their statistics (fbgemm's format).

The measured judges time real kernels on these traces, so they must be deterministic (the measurement cache keys
on the seed) and faithful to the table's statistics (`shardopt.core.stats.generate_trace` states the tolerance). A table
given by a histogram gets a trace with that histogram at the requested batch; one given only by a Zipf exponent
gets i.i.d. Zipf lookups. A row-wise shard sees the lookups of the whole table that fall in its row range,
renumbered from 0, so the shards of one table split the table's own trace.
"""

from __future__ import annotations

import zlib

import numpy as np

from shardopt.core.ir import Shard, Table
from shardopt.core.stats import generate_trace, generate_trace_zipf


def table_seed(table: Table, seed: int) -> int:
    """A per-table seed: tables with different names get independent traces under one instance seed."""
    return (zlib.crc32(table.name.encode()) ^ (seed * 0x9E3779B1)) & 0xFFFFFFFF


def table_trace(table: Table, batch_size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(indices, offsets) of one batch of `batch_size` bags for `table` (int64)."""
    s = table_seed(table, seed)
    if table.access.histogram is not None:
        return generate_trace(table.rows, table.pooling_factor, table.access.histogram, batch_size, s)
    return generate_trace_zipf(table.rows, table.pooling_factor, float(table.access.zipf or 0.0), batch_size, s)


def shard_trace(table: Table, shard: Shard, batch_size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The trace a shard's kernel sees: the table's trace, restricted to the shard's rows (renumbered from 0).
    Column shards see every lookup of the table (they hold a slice of every row)."""
    indices, offsets = table_trace(table, batch_size, seed)
    r0, r1 = shard.row_range(table)
    if (r0, r1) == (0, table.rows):
        return indices, offsets
    keep = (indices >= r0) & (indices < r1)
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    return (indices[keep] - r0).astype(np.int64), kept_before[offsets].astype(np.int64)
