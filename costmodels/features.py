"""Features of shards (for the neural compute model) and of devices in an all-to-all (for the comm model).

A shard is described by what a kernel sees of it: its table's rows (scaled by the shard's row share), width, pooling
factor, bytes, the 17-bin access histogram, dtype, and the workload's batch and optimizer; plus a few quantities
derived from those that grow linearly with the work (lookups, gathered bytes, unique rows per access bin), so that
the sum over a device's shards — the models' pooling — adds up work the way the kernel does.

A device in an all-to-all is described by the bytes it sends and receives over its host's links and over the
network (symmetric functions of every device's pooled width, so any model on them is permutation-equivariant over
devices and works for any device count), the link bandwidths, the start-up latencies and the cluster's shape.
Numpy only: features are computed at solve time without torch.
"""

from __future__ import annotations

import numpy as np

from shardopt.core.hardware import HardwareProfile
from shardopt.core.ir import ACCESS_BINS, Instance, Optimizer, Table

OPTIMIZERS = (Optimizer.sgd, Optimizer.rowwise_adagrad, Optimizer.adam)
# representative access count per bin: 1, 2, mean of (2^(k-1), 2^k], 2^16 for the open last bin (as the papers' bins)
BIN_COUNTS = np.array([1.0, 2.0] + [((2 ** (k - 1) + 1) + 2**k) / 2 for k in range(2, 16)] + [2.0**16])

SHARD_FEATURES = (
    ["log_rows", "log2_dim", "log1p_pooling", "log_bytes", "fp16", "log_batch"]
    + [f"opt_{o.value}" for o in OPTIMIZERS]
    + [f"hist_{b}" for b in range(ACCESS_BINS)]
    + ["lookups_m", "gathered_gb", "unique_m", "unique_gb", "output_gb", "bags_m"]
    + [f"unique_gb_bin_{b}" for b in range(ACCESS_BINS)]
)
COMM_FEATURES = (
    "send_local_ms", "recv_local_ms", "send_remote_ms", "recv_remote_ms", "log_devices", "local_peers_share",
    "multi_host", "latency_ms", "log_width", "log_batch",
    "log_send_local", "log_recv_local", "log_send_remote", "log_recv_remote", "log_latency",
)


def shard_features(
    rows: np.ndarray,
    width: np.ndarray,
    pooling: np.ndarray,
    hist: np.ndarray,
    elem_bytes: np.ndarray,
    batch: np.ndarray,
    optimizer: Optimizer,
) -> np.ndarray:
    """[n, len(SHARD_FEATURES)] for n shards (rows already scaled by the row share, batch by the batch share)."""
    rows = np.asarray(rows, dtype=np.float64)
    width = np.asarray(width, dtype=np.float64)
    pooling = np.asarray(pooling, dtype=np.float64)
    hist = np.asarray(hist, dtype=np.float64)
    elem = np.asarray(elem_bytes, dtype=np.float64)
    batch = np.broadcast_to(np.asarray(batch, dtype=np.float64), rows.shape)
    n = len(rows)
    state = {Optimizer.sgd: 0.0, Optimizer.rowwise_adagrad: 4.0, Optimizer.adam: 8.0}[optimizer]
    row_bytes = width * elem
    table_bytes = rows * (row_bytes + (state * width if optimizer is Optimizer.adam else state))
    lookups = batch * pooling
    mean_count = np.maximum(hist @ BIN_COUNTS, 1.0)
    unique = np.minimum(np.minimum(rows, lookups / mean_count), lookups)
    opt = np.zeros((n, len(OPTIMIZERS)))
    opt[:, OPTIMIZERS.index(optimizer)] = 1.0
    cols = [
        np.log(rows)[:, None],
        np.log2(width)[:, None],
        np.log1p(pooling)[:, None],
        np.log(table_bytes)[:, None],
        (elem == 2).astype(np.float64)[:, None],
        np.log(batch)[:, None],
        opt,
        hist,
        (lookups / 1e6)[:, None],
        (lookups * row_bytes / 1e9)[:, None],
        (unique / 1e6)[:, None],
        (unique * row_bytes / 1e9)[:, None],
        (batch * width * 4 / 1e9)[:, None],
        (batch / 1e6)[:, None],
        hist * (unique * row_bytes / 1e9)[:, None],
    ]
    return np.concatenate(cols, axis=1)


def instance_shard_features(instance: Instance, tables: np.ndarray, cols: np.ndarray, row_fraction: np.ndarray, batch_fraction: np.ndarray, hist: np.ndarray) -> np.ndarray:
    ts: list[Table] = [instance.tables[int(i)] for i in tables]
    rows = np.array([t.rows for t in ts], dtype=np.float64) * row_fraction
    pooling = np.array([t.pooling_factor for t in ts], dtype=np.float64) * row_fraction
    elem = np.array([instance.table_dtype(t).nbytes for t in ts], dtype=np.float64)
    batch = instance.workload.batch_size * np.asarray(batch_fraction, dtype=np.float64)
    return shard_features(np.maximum(rows, 1.0), cols, pooling, hist[tables], elem, batch, instance.workload.optimizer)


def comm_features(
    dims: np.ndarray,
    same_host: np.ndarray,
    batch: float,
    intra_bw: float,
    inter_bw: float,
    profile: HardwareProfile,
) -> np.ndarray:
    """Per-device features of an all-to-all: dims [..., D] pooled widths -> [..., D, len(COMM_FEATURES)]."""
    dims = np.asarray(dims, dtype=np.float64)
    n_dev = dims.shape[-1]
    local_peers = same_host.sum(axis=0) - 1
    remote_peers = n_dev - 1 - local_peers
    q = batch / n_dev * 4.0  # bytes per unit of width per peer (fp32)
    my_host = dims @ same_host
    total = dims.sum(axis=-1, keepdims=True)
    multi = float(local_peers.min() < n_dev - 1)
    latency = (profile.alltoall_latency_s + profile.network_latency_s * multi) * 1e3
    shape = dims.shape + (len(COMM_FEATURES),)
    out = np.empty(shape)
    out[..., 0] = dims * local_peers * q / intra_bw * 1e3
    out[..., 1] = (my_host - dims) * q / intra_bw * 1e3
    out[..., 2] = dims * remote_peers * q / inter_bw * 1e3
    out[..., 3] = (total - my_host) * q / inter_bw * 1e3
    out[..., 4] = np.log(n_dev)
    out[..., 5] = local_peers / max(n_dev - 1, 1)
    out[..., 6] = multi
    out[..., 7] = latency
    out[..., 8] = np.log1p(dims)
    out[..., 9] = np.log(batch)
    out[..., 10:14] = np.log(out[..., 0:4] + 1e-4)  # log time: the all-to-all spans 4 orders of magnitude
    out[..., 14] = np.log(latency)
    return out


def comm_features_after_adding(
    dims: np.ndarray, width: float, same_host: np.ndarray, batch: float, intra_bw: float, inter_bw: float, profile: HardwareProfile
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each device's features if `width` were added to one device c, in the three cases that exist: d is c (`own`),
    d shares c's host (`same`), d is on another host (`other`). [D] -> three [D, F]: O(D) rather than O(D^2)."""
    base = comm_features(dims, same_host, batch, intra_bw, inter_bw, profile)
    n_dev = len(dims)
    local_peers = same_host.sum(axis=0) - 1
    remote_peers = n_dev - 1 - local_peers
    q = batch / n_dev * 4.0
    local, remote = width * q / intra_bw * 1e3, width * q / inter_bw * 1e3
    own, same, other = base.copy(), base.copy(), base.copy()
    own[:, 0] += local * local_peers
    own[:, 2] += remote * remote_peers
    own[:, 8] = np.log1p(dims + width)
    same[:, 1] += local
    other[:, 3] += remote
    for f in (own, same, other):
        f[:, 10:14] = np.log(f[:, 0:4] + 1e-4)
    return own, same, other
