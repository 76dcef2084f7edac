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
SHARDING_TYPES = (TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, TABLE_COLUMN_WISE, DATA_PARALLEL, GRID_SHARD)


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


def layouts_it_is(topology: Topology, table: Table, shards: Sequence[Shard]) -> set[str]:
    """Every sharding type one table's shards are a layout of: `sharding_type`'s, and where one layout is several
    types at once, those too. A row split over every device of a one-device job is the whole table, and so is one over
    a host (or NVLink domain) of one device; a row split over the only host is row_wise as well as table_row_wise.
    Why: a placement constraint allows types, and a plan that meets one of them in its only possible form (TorchRec's
    row_wise on one rank: one shard of every row) must not be refused for the name the classifier gives it."""
    kind = sharding_type(topology, table, shards)
    out = {kind}
    if kind == TABLE_WISE:
        if topology.num_devices == 1:
            out.add(ROW_WISE)
        if topology.intra_group_size == 1 or topology.num_devices == 1:
            out.add(TABLE_ROW_WISE)
    if kind == ROW_WISE and topology.num_intra_groups == 1:
        out.add(TABLE_ROW_WISE)
    return out


def allowed_types(topology: Topology, types: Sequence[str] | None) -> list[str] | None:
    """A constraint's sharding types with the ones that are the same layout on this topology (`layouts_it_is`): on
    hosts (or NVLink domains) of one device table_row_wise is the whole table, so table_wise too; on one device
    row_wise is; on one host row_wise and table_row_wise are one layout. None stays None (any type). Every solver and
    the bound read a constraint's types through this, so that a type no layout of its own can take on this topology
    (a table_row_wise split over a host of one device) is met by the layout that is the same thing."""
    if types is None:
        return None
    out = list(types)
    def add(kind: str) -> None:
        if kind not in out:
            out.append(kind)
    if TABLE_ROW_WISE in types and (topology.intra_group_size == 1 or topology.num_devices == 1):
        add(TABLE_WISE)
    if ROW_WISE in types and topology.num_devices == 1:
        add(TABLE_WISE)
    if topology.num_intra_groups == 1:
        if TABLE_ROW_WISE in types:
            add(ROW_WISE)
        if ROW_WISE in types:
            add(TABLE_ROW_WISE)
    return out
