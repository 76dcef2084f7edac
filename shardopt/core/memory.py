"""The memory model: what a shard costs in each memory tier, weights plus optimizer state.

The published systems counted fp32 weights only; a plan that fits by that count can run out of memory once the
optimizer allocates its state. Here the state is counted as fbgemm's fused optimizers allocate it:
sgd keeps none; rowwise_adagrad keeps one fp32 accumulator per row (of each shard: column shards each keep their
own); adam keeps two fp32 moments per weight.

Tiers (the shard's `kernel`, TorchRec's compute kernels):
- `fused`: weights and optimizer state in HBM.
- `fused_uvm_caching`: weights in host memory (UVM, fbgemm's MANAGED_CACHING); in HBM the cache:
  ceil(cache_load_factor x rows) slots, each a row of weights plus CACHE_SLOT_META_BYTES of fbgemm's cache state
  (lxu_cache_state: the int64 row index of the slot; lxu_state: the int64 LRU / LFU stamp). TorchRec's planner
  estimates the HBM side as load factor x (weights + optimizer state).
- `fused_uvm`: weights in host memory, no cache.
- Optimizer state of a UVM shard: fbgemm's `construct_split_state` keeps *rowwise* state on the device even for a
  managed table ("if optimizer state is rowwise, optimizer is on device"), so rowwise_adagrad's accumulator stays in
  HBM; adam's moments are managed like the weights (host memory).
"""

from __future__ import annotations

import numpy as np

from shardopt.core.ir import Instance, Kernel, Optimizer, Shard, Table

OPTIMIZER_STATE_BYTES = 4  # fp32 state, as fbgemm allocates it
CACHE_SLOT_META_BYTES = 16  # per cache slot: lxu_cache_state (int64) + lxu_state (int64), fbgemm's split_table_batched_embeddings_ops_training


def optimizer_state_bytes(optimizer: Optimizer, rows: int, cols: int) -> int:
    if optimizer is Optimizer.sgd:
        return 0
    if optimizer is Optimizer.rowwise_adagrad:
        return rows * OPTIMIZER_STATE_BYTES
    if optimizer is Optimizer.adam:
        return 2 * rows * cols * OPTIMIZER_STATE_BYTES
    raise ValueError(f"unknown optimizer {optimizer!r}")


def weight_bytes(instance: Instance, table: Table, rows: int, cols: int) -> int:
    """Bytes of a rows x cols slice of `table`'s weights, in the table's dtype."""
    return rows * cols * instance.table_dtype(table).nbytes


def slice_bytes(instance: Instance, table: Table, rows: int, cols: int) -> int:
    """Bytes of a rows x cols slice of `table`: weights in the table's dtype plus optimizer state."""
    return weight_bytes(instance, table, rows, cols) + optimizer_state_bytes(instance.workload.optimizer, rows, cols)


def table_bytes(instance: Instance, table: Table) -> int:
    return slice_bytes(instance, table, table.rows, table.dim)


def cache_bytes(instance: Instance, table: Table, cache_rows: int, cols: int) -> int:
    """HBM bytes of a UVM cache of `cache_rows` rows `cols` wide: the cached weights and each slot's state."""
    return cache_rows * (cols * instance.table_dtype(table).nbytes + CACHE_SLOT_META_BYTES)


def device_state_bytes(instance: Instance, rows: int, cols: int) -> int:
    """Optimizer state that stays in HBM when the weights are in host memory: fbgemm keeps rowwise state on the
    device (rowwise_adagrad's accumulator), other state is managed with the weights."""
    if instance.workload.optimizer is Optimizer.rowwise_adagrad:
        return optimizer_state_bytes(Optimizer.rowwise_adagrad, rows, cols)
    return 0


def shard_bytes(instance: Instance, table: Table, shard: Shard) -> int:
    """HBM bytes of a shard: the whole slice for `fused`; for UVM kernels the cache (`fused_uvm_caching`) and the
    rowwise optimizer state fbgemm keeps on the device."""
    rows, cols = shard.height(table), shard.width(table)
    if shard.kernel is Kernel.fused:
        return slice_bytes(instance, table, rows, cols)
    cache = cache_bytes(instance, table, shard.cache_rows(table), cols) if shard.kernel is Kernel.fused_uvm_caching else 0
    return cache + device_state_bytes(instance, rows, cols)


def shard_host_bytes(instance: Instance, table: Table, shard: Shard) -> int:
    """Host-memory (UVM) bytes of a shard: for UVM kernels its weights and the optimizer state managed with them."""
    if shard.kernel is Kernel.fused:
        return 0
    rows, cols = shard.height(table), shard.width(table)
    return slice_bytes(instance, table, rows, cols) - device_state_bytes(instance, rows, cols)


def table_bytes_array(instance: Instance) -> np.ndarray:
    """Whole-table bytes of every table, in instance order (int64)."""
    return np.array([table_bytes(instance, t) for t in instance.tables], dtype=np.int64)


def device_memory_use(instance: Instance, shards: list[Shard]) -> np.ndarray:
    """HBM bytes used on each device by `shards` (int64, one entry per device; out-of-range devices ignored)."""
    return _use(instance, shards, shard_bytes)


def device_host_memory_use(instance: Instance, shards: list[Shard]) -> np.ndarray:
    """Host-memory (UVM) bytes used by each device's shards (int64, one entry per device)."""
    return _use(instance, shards, shard_host_bytes)


def _use(instance: Instance, shards: list[Shard], bytes_of) -> np.ndarray:  # noqa: ANN001 - one of the two above
    use = np.zeros(instance.topology.num_devices, dtype=np.int64)
    index = instance.table_index()
    for s in shards:
        i = index.get(s.table)
        if i is None or not 0 <= s.device < len(use):
            continue
        use[s.device] += bytes_of(instance, instance.tables[i], s)
    return use
