"""The memory model: what a shard costs in device memory, weights plus optimizer state.

The published systems counted fp32 weights only; a plan that fits by that count can run out of memory once the
optimizer allocates its state. Here the state is counted as fbgemm's fused optimizers allocate it:
sgd keeps none; rowwise_adagrad keeps one fp32 accumulator per row (of each shard: column shards each keep their
own); adam keeps two fp32 moments per weight.
"""

from __future__ import annotations

import numpy as np

from shardopt.core.ir import Instance, Optimizer, Shard, Table

OPTIMIZER_STATE_BYTES = 4  # fp32 state, as fbgemm allocates it


def optimizer_state_bytes(optimizer: Optimizer, rows: int, cols: int) -> int:
    if optimizer is Optimizer.sgd:
        return 0
    if optimizer is Optimizer.rowwise_adagrad:
        return rows * OPTIMIZER_STATE_BYTES
    if optimizer is Optimizer.adam:
        return 2 * rows * cols * OPTIMIZER_STATE_BYTES
    raise ValueError(f"unknown optimizer {optimizer!r}")


def slice_bytes(instance: Instance, table: Table, rows: int, cols: int) -> int:
    """Bytes of a rows x cols slice of `table`: weights in the table's dtype plus optimizer state."""
    weights = rows * cols * instance.table_dtype(table).nbytes
    return weights + optimizer_state_bytes(instance.workload.optimizer, rows, cols)


def table_bytes(instance: Instance, table: Table) -> int:
    return slice_bytes(instance, table, table.rows, table.dim)


def shard_bytes(instance: Instance, table: Table, shard: Shard) -> int:
    return slice_bytes(instance, table, shard.height(table), shard.width(table))


def table_bytes_array(instance: Instance) -> np.ndarray:
    """Whole-table bytes of every table, in instance order (int64)."""
    return np.array([table_bytes(instance, t) for t in instance.tables], dtype=np.int64)


def device_memory_use(instance: Instance, shards: list[Shard]) -> np.ndarray:
    """Bytes used on each device by `shards` (int64, one entry per device; out-of-range devices ignored)."""
    use = np.zeros(instance.topology.num_devices, dtype=np.int64)
    index = instance.table_index()
    for s in shards:
        i = index.get(s.table)
        if i is None or not 0 <= s.device < len(use):
            continue
        use[s.device] += shard_bytes(instance, instance.tables[i], s)
    return use
