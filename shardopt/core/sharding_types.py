"""TorchRec's sharding types, and which one a table's shards form.

Why a leaf module: the sharding type is not only an export label. TorchRec runs one output dist (one collective, with
its own start-up) per sharding type present in a plan (`ShardedEmbeddingBagCollection._output_dists`, one per
`EmbeddingSharding`), so the cost model needs the same classification the TorchRec export uses, without importing
the export (and its lazy TorchRec machinery) into `costmodels/`.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardopt.core.ir import Shard, Table, Topology

TABLE_WISE = "table_wise"
COLUMN_WISE = "column_wise"
ROW_WISE = "row_wise"
TABLE_ROW_WISE = "table_row_wise"
TABLE_COLUMN_WISE = "table_column_wise"
DATA_PARALLEL = "data_parallel"
GRID_SHARD = "grid_shard"


def sharding_type(topology: Topology, table: Table, shards: Sequence[Shard]) -> str:
    """TorchRec's sharding type for one table's shards: a replica makes the table data_parallel; one whole shard is
    table_wise, or column_wise where it says so (`Shard.column_wise`: TorchRec's column_wise with one rank, whose
    output joins the column-wise all-to-all); slices of every row are column_wise; slices of every column are table_row_wise when on one host of
    several, else row_wise; anything else (row x column blocks) is grid_shard. Whether the layout is one TorchRec can
    run is the export's question (shardopt.data.torchrec_io.export_problems), not this one."""
    if any(s.replicated for s in shards):
        return DATA_PARALLEL
    spans = [(s.row_range(table), s.col_range(table)) for s in shards]
    if len(shards) == 1 and spans[0] == ((0, table.rows), (0, table.dim)):
        return COLUMN_WISE if shards[0].column_wise else TABLE_WISE
    if all(r == (0, table.rows) for r, _ in spans):
        return COLUMN_WISE
    if all(c == (0, table.dim) for _, c in spans):
        hosts = {topology.intra_group_of(s.device) for s in shards}  # (the host, or an NVLink domain over hosts)
        return TABLE_ROW_WISE if len(hosts) == 1 and topology.num_intra_groups > 1 else ROW_WISE
    return GRID_SHARD
