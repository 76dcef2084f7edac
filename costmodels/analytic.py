"""The analytic cost model: a hardware-profile model of fbgemm's fused TBE kernel and of the all-to-all.

It is the judge where no real kernel can run (`--backend sim`) and the fast predictor solvers search with. It has
to show the effects that make sharding hard, not just "bytes / bandwidth":

* bytes moved per lookup are whole 32-byte sectors, so short rows waste bandwidth;
* rows re-read within a batch can be served from L2, and the hot rows of *all* tables on a device compete for the
  one cache, so a device's cost is not the sum of its tables' costs;
* each pass is one fused kernel launch per device, with a floor for under-occupied kernels;
* backward reads the output gradients, sorts the indices and runs the fused optimizer update over unique rows;
* the all-to-all costs the bytes each device sends and receives over NVLink (same host) or the network.

Every formula and constant is written out, with its source, in docs/analytic-model.md. The model is additive in a
per-device *state* (per access-count bin: cache footprint and reusable bytes; totals of gathered, streamed and
updated bytes; bag and shard counts) and nonlinear in how that state becomes time, which is what makes both the
incremental solver API and the cache competition cheap: everything is a few numpy operations over [devices, 40].
"""

from __future__ import annotations


import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.hardware import HardwareProfile, get_profile, load_profile
from shardopt.core.ir import ACCESS_BINS, Instance, Optimizer

# ---- model constants (see docs/analytic-model.md) -------------------------------------------------------------
INDEX_BYTES = 8  # int64 indices and offsets
OUTPUT_BYTES = 4  # pooled outputs and their gradients are fp32
COMM_BYTES = 4  # the all-to-all carries fp32 pooled embeddings / gradients
SORT_BYTES_PER_LOOKUP = 32  # backward: linearise + radix-sort (key, value) pairs, read and written twice
CACHE_SHARE = 0.75  # share of L2 that hot embedding rows can hold (the rest: outputs, indices, other streams)
BWD_LAUNCHES = 3  # backward = index linearisation + sort + fused gradient/optimizer kernel
MS = 1e3

# representative access count of each bin: 1, 2, mean of (2^(k-1), 2^k] for k = 2..15, and 2^16 for > 2^15
BIN_COUNTS = np.array(
    [1.0, 2.0] + [((2 ** (k - 1) + 1) + 2**k) / 2 for k in range(2, 16)] + [2.0**16], dtype=np.float64
)
assert len(BIN_COUNTS) == ACCESS_BINS

# state layout
_FOOT = slice(0, ACCESS_BINS)  # cache footprint (sector bytes of unique rows) per bin, hottest bin (>2^15) first
_REUSE = slice(ACCESS_BINS, 2 * ACCESS_BINS)  # bytes of re-reads per bin (accesses after the first), same order
_GATHER = 2 * ACCESS_BINS  # all gathered bytes (lookups x sector bytes)
_FWD_STREAM = _GATHER + 1  # forward streamed bytes: indices, offsets, pooled output writes
_BWD_STREAM = _GATHER + 2  # backward HBM bytes: output grads, sort, unique-row weight + optimizer update
_BWD_L2 = _GATHER + 3  # backward on-chip bytes: per-lookup gradient accumulation
_BAGS = _GATHER + 4  # bags (work items: one warp each)
_SHARDS = _GATHER + 5  # shards on the device (launch if > 0)
STATE_SIZE = _GATHER + 6


def sector_bytes(width: np.ndarray, elem_bytes: np.ndarray, sector: int) -> np.ndarray:
    """Bytes actually moved to read one row: whole sectors."""
    return np.ceil(width * elem_bytes / sector) * sector


def mean_count(histogram: np.ndarray) -> np.ndarray:
    """Mean accesses per unique row under a 17-bin histogram ([..., 17] -> [...])."""
    return histogram @ BIN_COUNTS


def cache_hits(states: np.ndarray, profile: HardwareProfile) -> np.ndarray:
    """Bytes of re-reads served by L2: the hottest bins' rows (across all tables on the device) are cached first,
    until the shared cache is full. [..., F] -> [...]."""
    foot = states[..., _FOOT]  # stored hottest bin first
    reuse = states[..., _REUSE]
    capacity = profile.l2_bytes * CACHE_SHARE
    # cached bytes of each bin: what is left of the cache after the hotter bins, at most the bin's footprint
    cached = np.clip(capacity - np.cumsum(foot, axis=-1) + foot, 0.0, None)
    np.minimum(cached, foot, out=cached)
    # hits = sum of reuse x cached / foot (0 where a bin is empty): reuse / foot is the bin's re-reads per byte
    ratio = np.divide(reuse, foot, out=np.zeros_like(foot), where=foot > 0)
    return np.einsum("...b,...b->...", cached, ratio)


def occupancy(states: np.ndarray, profile: HardwareProfile) -> np.ndarray:
    """Share of the GPU's warp slots the fused kernel fills (one warp per bag); bandwidth scales with it."""
    slots = profile.sm_count * profile.warps_per_sm
    return np.clip(states[..., _BAGS] / slots, 1.0 / slots, 1.0)


def device_compute_costs(states: np.ndarray, profile: HardwareProfile) -> np.ndarray:
    """fwd and bwd compute (ms) of devices in `states` [..., F] on `profile` -> [..., 2]. A function of the
    profile too, so calibration can evaluate candidate profiles on fixed states."""
    p = profile
    states = np.asarray(states, dtype=np.float64)
    hbm_bw = p.hbm_bandwidth * p.gather_efficiency
    l2_bw = p.hbm_bandwidth * p.l2_bandwidth_ratio
    occ = occupancy(states, p)
    hits = cache_hits(states, p)
    fwd_hbm = states[..., _GATHER] - hits + states[..., _FWD_STREAM]
    fwd = (fwd_hbm / hbm_bw + hits / l2_bw) / occ
    bwd = (states[..., _BWD_STREAM] / hbm_bw + states[..., _BWD_L2] / l2_bw) / occ / p.bwd_bandwidth_factor
    busy = states[..., _SHARDS] > 0
    out = np.empty(states.shape[:-1] + (2,))
    out[..., 0] = np.where(busy, p.launch_overhead_s + np.maximum(p.min_kernel_s, fwd), 0.0) * MS
    out[..., 1] = np.where(busy, BWD_LAUNCHES * p.launch_overhead_s + np.maximum(p.min_kernel_s, bwd), 0.0) * MS
    return out


class BoundAnalytic(BoundCostModel):
    def __init__(self, instance: Instance, profile: HardwareProfile):
        super().__init__(instance)
        self.profile = profile
        topo = instance.topology
        self.intra_bw = topo.intra_host_bandwidth or profile.nvlink_bandwidth
        self.inter_bw = topo.inter_host_bandwidth or profile.network_bandwidth
        self.batch = instance.workload.batch_size
        tables = instance.tables
        self._rows = np.array([t.rows for t in tables], dtype=np.float64)
        self._pool = np.array([t.pooling_factor for t in tables], dtype=np.float64)
        self._elem = np.array([instance.table_dtype(t).nbytes for t in tables], dtype=np.float64)
        self._optimizer = instance.workload.optimizer
        host = np.arange(topo.num_devices) // topo.devices_per_host
        self._host = host
        self._host_onehot = (host[:, None] == np.arange(topo.num_hosts)[None, :]).astype(np.float64)  # [D, H]
        self._local_peers = self._host_onehot.sum(axis=0)[host] - 1  # devices on my host other than me
        self._remote_peers = topo.num_devices - 1 - self._local_peers
        self._same_host = self._host_onehot @ self._host_onehot.T  # [D, D]: 1 where two devices share a host
        self._single_host = topo.num_hosts == 1
        per_peer = self.batch / topo.num_devices * COMM_BYTES  # bytes per unit of pooled width, per peer
        self._local_scale = per_peer / self.intra_bw * MS
        self._remote_scale = per_peer / self.inter_bw * MS
        self._latency_ms = (profile.alltoall_latency_s + (profile.network_latency_s if not self._single_host else 0.0)) * MS

    @property
    def state_size(self) -> int:
        return STATE_SIZE

    # ---- per-shard state (vectorised over shards) ----------------------------------------------------------
    def shard_states(self, tables: np.ndarray, cols: np.ndarray, row_fraction: np.ndarray, batch_fraction: np.ndarray) -> np.ndarray:
        """States of many shards at once: [n] arrays -> [n, STATE_SIZE]."""
        tables = np.asarray(tables, dtype=np.int64)
        w = np.asarray(cols, dtype=np.float64)
        rf = np.broadcast_to(np.asarray(row_fraction, dtype=np.float64), w.shape)
        bf = np.broadcast_to(np.asarray(batch_fraction, dtype=np.float64), w.shape)
        p = self.profile
        elem = self._elem[tables]
        hist = self.histograms[tables]  # [n, 17]
        bags = self.batch * bf
        lookups = bags * self._pool[tables] * rf  # a row shard sees its share of every bag's lookups
        rows = self._rows[tables] * rf
        unique = np.minimum(rows, lookups / np.maximum(mean_count(hist), 1.0))
        unique = np.minimum(unique, lookups)
        # split the lookups over bins in proportion to (unique rows x count), normalised to exactly `lookups`
        weight = hist * BIN_COUNTS  # [n, 17]
        wsum = weight.sum(axis=1, keepdims=True)
        acc = np.where(wsum > 0, weight / np.where(wsum > 0, wsum, 1.0), 0.0) * lookups[:, None]
        uniq = hist * unique[:, None]
        sb = sector_bytes(w, elem, p.sector_bytes)
        out = np.zeros((len(tables), STATE_SIZE))
        out[:, _FOOT] = (uniq * sb[:, None])[:, ::-1]  # hottest bin first: the order the cache fills in
        out[:, _REUSE] = (np.maximum(acc - uniq, 0.0) * sb[:, None])[:, ::-1]
        out[:, _GATHER] = lookups * sb
        out[:, _FWD_STREAM] = (lookups + bags) * INDEX_BYTES + bags * w * OUTPUT_BYTES
        row_bytes = w * elem
        if self._optimizer is Optimizer.sgd:
            state_bytes = np.zeros_like(w)
        elif self._optimizer is Optimizer.rowwise_adagrad:
            state_bytes = np.full_like(w, 4.0)
        else:  # adam: two fp32 moments per weight
            state_bytes = 2 * w * 4.0
        update = unique * 2 * (np.ceil(row_bytes / p.sector_bytes) * p.sector_bytes + np.ceil(state_bytes / p.sector_bytes) * p.sector_bytes)
        out[:, _BWD_STREAM] = bags * w * OUTPUT_BYTES + lookups * SORT_BYTES_PER_LOOKUP + update
        out[:, _BWD_L2] = lookups * w * OUTPUT_BYTES
        out[:, _BAGS] = bags
        out[:, _SHARDS] = 1.0
        return out

    # ---- state -> time ---------------------------------------------------------------------------------------
    def cache_hits(self, states: np.ndarray) -> np.ndarray:
        return cache_hits(states, self.profile)

    def occupancy(self, states: np.ndarray) -> np.ndarray:
        return occupancy(states, self.profile)

    def compute_costs(self, states: np.ndarray) -> np.ndarray:
        return device_compute_costs(states, self.profile)

    def comm_costs(self, dim_sums: np.ndarray) -> np.ndarray:
        """All-to-all of pooled outputs (forward) and of their gradients (backward).

        Device d computes its tables' pooled outputs for the whole batch and keeps 1/D of them: it sends
        B/D x dimsum_d x 4 bytes to each peer and receives B/D x dimsum_j x 4 from each peer j. NVLink and the
        network work concurrently; each link direction is limited by its bandwidth. Backward reverses the
        directions, which leaves max(send, receive) and so the time unchanged.
        """
        dims = np.asarray(dim_sums, dtype=np.float64)
        t = self.comm_time(dims)
        return np.stack([t, t], axis=-1)

    def comm_time(self, dims: np.ndarray) -> np.ndarray:
        """One direction's all-to-all time (ms) per device: [..., D] -> [..., D] (forward and backward are equal)."""
        if self.num_devices == 1:
            return np.zeros_like(dims)
        total = dims.sum(axis=-1, keepdims=True)
        if self._single_host:  # everything over NVLink: send D-1 shares, receive everyone else's
            t = np.maximum(dims * self._local_peers, total - dims)
            t *= self._local_scale
            t += self._latency_ms
            return t
        my_host = dims @ self._same_host  # [..., D]: width on my host, me included
        local = np.maximum(dims * self._local_peers, my_host - dims)
        local *= self._local_scale
        remote = np.maximum(dims * self._remote_peers, total - my_host)
        remote *= self._remote_scale
        np.maximum(local, remote, out=local)
        local += self._latency_ms
        return local

    def comm_totals(self, dim_sums: np.ndarray) -> np.ndarray:
        return 2.0 * self.comm_time(np.asarray(dim_sums, dtype=np.float64))

    def comm_totals_after_adding(self, dim_sums: np.ndarray, width: float, candidates: np.ndarray) -> np.ndarray:
        """O(D) per device instead of O(D^2): a width added on device c changes c's sends and every other device's
        receives from c's host or from another host, so each device has just two possible new times."""
        dims = np.asarray(dim_sums, dtype=np.float64)
        cands = np.asarray(candidates)
        k = len(cands)
        if self.num_devices == 1:
            return np.zeros((k, 1))
        total = dims.sum()
        my_host = dims @ self._same_host
        l_send, l_recv = dims * self._local_peers, my_host - dims
        r_send, r_recv = dims * self._remote_peers, total - my_host
        w = float(width)

        def time(ls: np.ndarray, lr: np.ndarray, rs: np.ndarray, rr: np.ndarray) -> np.ndarray:
            t = np.maximum(ls, lr) * self._local_scale
            if not self._single_host:
                np.maximum(t, np.maximum(rs, rr) * self._remote_scale, out=t)
            return 2.0 * (t + self._latency_ms)

        same = time(l_send, l_recv + w, r_send, r_recv)  # the width lands on my host, not on me
        own = time(l_send + w * self._local_peers, l_recv, r_send + w * self._remote_peers, r_recv)
        if self._single_host:
            out = np.broadcast_to(same, (k, self.num_devices)).copy()
        else:
            other = time(l_send, l_recv, r_send, r_recv + w)  # the width lands on another host
            out = np.where(self._same_host[cands] > 0, same, other)
        out[np.arange(k), cands] = own[cands]
        return out

    def replicated_comm(self, table: int) -> float:
        """Ring all-reduce of a data-parallel table's gradient (dense, fp32): 2 (D-1)/D x bytes over the slowest link."""
        n_dev = self.num_devices
        if n_dev == 1:
            return 0.0
        t = self.instance.tables[table]
        bw = self.inter_bw if self.instance.topology.num_hosts > 1 else self.intra_bw
        return (2 * (n_dev - 1) / n_dev * t.rows * t.dim * 4 / bw) * MS


class AnalyticCostModel(CostModel):
    """`profile`: None (the topology's own hardware profile), a profile name, a profile JSON file (e.g. one written
    by `shardopt calibrate`), or a HardwareProfile."""

    def __init__(self, profile: str | HardwareProfile | None = None):
        self._fixed: HardwareProfile | None = None
        if isinstance(profile, HardwareProfile):
            self._fixed = profile
        elif isinstance(profile, str) and profile.endswith(".json"):
            self._fixed = load_profile(profile)
        elif profile is not None:
            self._fixed = get_profile(profile)  # fail early on an unknown name
        self.profile_name = None if self._fixed is None else self._fixed.name
        self.name = "analytic" if profile is None else f"analytic:{profile if isinstance(profile, str) else profile.name}"

    def bind(self, instance: Instance) -> BoundAnalytic:
        return BoundAnalytic(instance, self._fixed or get_profile(instance.topology.hardware))

    def describe(self) -> str:
        return self.name
