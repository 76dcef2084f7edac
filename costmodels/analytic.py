"""The analytic cost model: a hardware-profile model of fbgemm's fused TBE kernel and of the all-to-all.

It is the judge where no real kernel can run (`--backend sim`) and the fast predictor solvers search with. It has
to show the effects that make sharding hard, not just "bytes / bandwidth":

* bytes moved per lookup are whole 32-byte sectors, so short rows waste bandwidth;
* rows re-read within a batch can be served from L2, and the hot rows of *all* tables on a device compete for the
  one cache, so a device's cost is not the sum of its tables' costs;
* each pass is one fused kernel launch per device, with a floor for under-occupied kernels;
* backward reads the output gradients, sorts the indices and runs the fused optimizer update over unique rows;
* the all-to-all costs the bytes each device sends and receives over NVLink (same host) or the network;
* a shard in host memory (`fused_uvm_caching`, `fused_uvm`) reads and updates the rows its HBM cache does not hold
  over the host link (PCIe or NVLink-C2C), whose time adds to the kernel's.

Every formula and constant is written out, with its source, in docs/analytic-model.md. The model is additive in a
per-device *state* (per access-count bin: cache footprint and reusable bytes; totals of gathered, streamed and
updated bytes; bytes over the host link each way and pass; bag, shard and kernel-group counts) and nonlinear in how
that state becomes time, which is what makes both the incremental solver API and the cache competition cheap:
everything is a few numpy operations over [devices, 46].
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from costmodels.comm_terms import CommTerms, pooled_level_terms
from costmodels.graph_comm import GraphComm, graph_comm_of
from costmodels.hierarchical import hierarchical_comm_time
from costmodels.level_comm import LevelComm
from shardopt.core.hardware import HardwareProfile, get_profile, load_profile
from shardopt.core.ir import ACCESS_BINS, Instance, Optimizer
from shardopt.core.levels import comm_levels, two_level_network

# ---- model constants (see docs/analytic-model.md) -------------------------------------------------------------
INDEX_BYTES = 8  # int64 indices and offsets
OUTPUT_BYTES = 4  # pooled outputs and their gradients are fp32
COMM_BYTES = 4  # the all-to-all carries fp32 pooled embeddings / gradients
SORT_BYTES_PER_LOOKUP = 32  # backward: linearise + radix-sort (key, value) pairs, read and written twice
CACHE_SHARE = 0.75  # share of L2 that hot embedding rows can hold (the rest: outputs, indices, other streams)
BWD_LAUNCHES = 3  # backward = index linearisation + sort + fused gradient/optimizer kernel
MS = 1e3
# memory tiers (fused_uvm_caching / fused_uvm), docs/analytic-model.md "Memory tiers"
PREFETCH_LAUNCHES = 6  # fbgemm's cache prefetch before the forward: linearize, unique, find-uncached, sort, insert, lookup
CACHE_LOOKUP_BYTES = 72  # HBM bytes per lookup of a cached shard's bookkeeping (itemised in the docs)

# representative access count of each bin: 1, 2, mean of (2^(k-1), 2^k] for k = 2..15, and 2^16 for > 2^15
BIN_COUNTS = np.array(
    [1.0, 2.0] + [((2 ** (k - 1) + 1) + 2**k) / 2 for k in range(2, 16)] + [2.0**16], dtype=np.float64
)
assert len(BIN_COUNTS) == ACCESS_BINS

# the device state's layout (public: the certified bound reads its columns, solvers.bound.terms)
STATE_FOOT = slice(0, ACCESS_BINS)  # cache footprint (sector bytes of unique rows) per bin, hottest bin (>2^15) first
STATE_REUSE = slice(ACCESS_BINS, 2 * ACCESS_BINS)  # bytes of re-reads per bin (accesses after the first), same order
STATE_GATHER = 2 * ACCESS_BINS  # all gathered bytes (lookups x sector bytes)
STATE_FWD_STREAM = STATE_GATHER + 1  # forward streamed bytes: indices, offsets, pooled output writes
STATE_BWD_STREAM = STATE_GATHER + 2  # backward HBM bytes: output grads, sort, unique-row weight + optimizer update
STATE_BWD_L2 = STATE_GATHER + 3  # backward on-chip bytes: per-lookup gradient accumulation
STATE_BAGS = STATE_GATHER + 4  # bags (work items: one warp each)
STATE_SHARDS = STATE_GATHER + 5  # shards on the device (launch if > 0)
# host-memory tier: bytes over the host link per pass and direction (in = host -> device, out = device -> host)
STATE_HOST_FWD_IN = STATE_GATHER + 6  # forward: rows fetched into the cache + rows read directly by the kernel
STATE_HOST_FWD_OUT = STATE_GATHER + 7  # forward: evicted cache rows written back
STATE_HOST_BWD_IN = STATE_GATHER + 8  # backward: uncached rows' weights (and host-side optimizer state) read
STATE_HOST_BWD_OUT = STATE_GATHER + 9  # backward: the same written back
STATE_CACHED = STATE_GATHER + 10  # fused_uvm_caching shards (their own kernel group and the cache prefetch)
STATE_UVM = STATE_GATHER + 11  # fused_uvm shards (their own kernel group)
# rows behind STATE_HOST_FWD_IN / STATE_HOST_BWD_IN: each read on its own over the link (the profile's host_row_rate)
STATE_HOST_FWD_ROWS = STATE_GATHER + 12
STATE_HOST_BWD_ROWS = STATE_GATHER + 13
STATE_SIZE = STATE_GATHER + 14


def sector_bytes(width: np.ndarray, elem_bytes: np.ndarray, sector: int) -> np.ndarray:
    """Bytes actually moved to read one row: whole sectors."""
    return np.ceil(width * elem_bytes / sector) * sector


def mean_count(histogram: np.ndarray) -> np.ndarray:
    """Mean accesses per unique row under a 17-bin histogram ([..., 17] -> [...])."""
    return histogram @ BIN_COUNTS


def cache_hits(states: np.ndarray, profile: HardwareProfile) -> np.ndarray:
    """Bytes of re-reads served by L2: the hottest bins' rows (across all tables on the device) are cached first,
    until the shared cache is full. [..., F] -> [...]."""
    foot = states[..., STATE_FOOT]  # stored hottest bin first
    reuse = states[..., STATE_REUSE]
    capacity = profile.l2_bytes * CACHE_SHARE
    # cached bytes of each bin: what is left of the cache after the hotter bins, at most the bin's footprint
    cached = capacity - np.cumsum(foot, axis=-1)
    cached += foot
    np.clip(cached, 0.0, foot, out=cached)
    # hits = sum of reuse x cached / foot (0 where a bin is empty): reuse / foot is the bin's re-reads per byte
    ratio = np.divide(reuse, foot, out=np.zeros_like(foot), where=foot > 0)
    return np.einsum("...b,...b->...", cached, ratio)


def occupancy(states: np.ndarray, profile: HardwareProfile) -> np.ndarray:
    """Share of the GPU's warp slots the fused kernel fills (one warp per bag); bandwidth scales with it."""
    slots = profile.sm_count * profile.warps_per_sm
    return np.clip(states[..., STATE_BAGS] / slots, 1.0 / slots, 1.0)


def host_read_s(nbytes: np.ndarray, rows: np.ndarray, profile: HardwareProfile) -> np.ndarray:
    """Seconds to read `rows` rows of `nbytes` bytes in all from host memory, row by row (UVM misses): their bytes over
    the link, and where the profile has measured row-gather constants, at least rows / host_row_rate + bytes /
    host_gather_bandwidth (costmodels/host_link.py)."""
    t = nbytes / profile.host_link_bandwidth
    if profile.host_row_rate is not None and profile.host_gather_bandwidth is not None:
        t = np.maximum(t, rows / profile.host_row_rate + nbytes / profile.host_gather_bandwidth)
    return t


def device_compute_costs(states: np.ndarray, profile: HardwareProfile, host: bool = True) -> np.ndarray:
    """fwd and bwd compute (ms) of devices in `states` [..., F] on `profile` -> [..., 2]. A function of the
    profile too, so calibration can evaluate candidate profiles on fixed states. `host=False`: the states hold no
    host-memory shard (an instance without host memory), so the host link's terms, all 0, are not computed."""
    p = profile
    states = np.asarray(states, dtype=np.float64)
    hbm_bw = p.hbm_bandwidth * p.gather_efficiency
    l2_bw = p.hbm_bandwidth * p.l2_bandwidth_ratio
    occ = occupancy(states, p)
    hits = cache_hits(states, p)
    fwd_hbm = states[..., STATE_GATHER] - hits + states[..., STATE_FWD_STREAM]
    fwd = (fwd_hbm / hbm_bw + hits / l2_bw) / occ
    bwd = (states[..., STATE_BWD_STREAM] / hbm_bw + states[..., STATE_BWD_L2] / l2_bw) / occ / p.bwd_bandwidth_factor
    busy = states[..., STATE_SHARDS] > 0
    # TorchRec runs one fused kernel per compute kernel on a device (fused / fused_uvm_caching / fused_uvm): a launch
    # per pass for each group present; the caching group's prefetch runs its own kernels before the forward
    cached = (states[..., STATE_CACHED] > 0.5).astype(np.float64)
    groups = (states[..., STATE_SHARDS] - states[..., STATE_CACHED] - states[..., STATE_UVM] > 0.5) + cached + (states[..., STATE_UVM] > 0.5)  # a count (float)
    # host link: full duplex, each direction limited by its bandwidth; serial with the HBM work (docs: max vs sum)
    if host:
        host_fwd = np.maximum(host_read_s(states[..., STATE_HOST_FWD_IN], states[..., STATE_HOST_FWD_ROWS], p),
                              states[..., STATE_HOST_FWD_OUT] / p.host_link_bandwidth)
        host_bwd = np.maximum(host_read_s(states[..., STATE_HOST_BWD_IN], states[..., STATE_HOST_BWD_ROWS], p),
                              states[..., STATE_HOST_BWD_OUT] / p.host_link_bandwidth)
    else:
        host_fwd = host_bwd = 0.0
    launch = p.launch_overhead_s
    out = np.empty(states.shape[:-1] + (2,))
    out[..., 0] = np.where(busy, launch * groups + PREFETCH_LAUNCHES * launch * cached + np.maximum(p.min_kernel_s, fwd) + host_fwd, 0.0) * MS
    out[..., 1] = np.where(busy, BWD_LAUNCHES * launch * groups + np.maximum(p.min_kernel_s, bwd) + host_bwd, 0.0) * MS
    return out


def envelope_profile(profiles: list[HardwareProfile]) -> HardwareProfile:
    """A profile no slower than any of `profiles` for any device state: each figure at its most favourable (the
    largest bandwidths, L2, achievable shares and backward factor; the fewest warp slots - a smaller GPU is filled by
    fewer bags -, the least launch cost, kernel floor and start-ups; host-link row costs only where every profile has
    them). `device_compute_costs` and the collectives fall or stay as each of these moves that way (with the L2 faster
    than HBM, a hit is cheaper than a miss), so a plan priced with it costs no more than with any of the profiles on
    any device: the certified bound of a job that mixes kinds prices every device with it (docs/analytic-bound.md,
    "Mixed hardware kinds"). ValueError where the profiles cannot share one state (DRAM sectors differ) or the
    envelope's L2 would not be faster than its HBM."""
    ps = list(profiles)
    if len({p.sector_bytes for p in ps}) > 1:
        raise ValueError("profiles with different DRAM sector sizes (" + ", ".join(f"{p.name} {p.sector_bytes} B" for p in ps) + ") have no envelope")
    rows = None if any(p.host_row_rate is None or p.host_gather_bandwidth is None for p in ps) else max(p.host_row_rate for p in ps)
    gather = None if rows is None else max(p.host_gather_bandwidth for p in ps)
    slots = min(ps, key=lambda p: p.sm_count * p.warps_per_sm)
    env = HardwareProfile(
        name="envelope(" + "+".join(p.name for p in ps) + ")",
        description="the most favourable figure of " + ", ".join(p.name for p in ps) + " each (a lower envelope, for bounds)",
        hbm_bandwidth=max(p.hbm_bandwidth for p in ps), memory_bytes=max(p.memory_bytes for p in ps), l2_bytes=max(p.l2_bytes for p in ps),
        sm_count=slots.sm_count, warps_per_sm=slots.warps_per_sm,
        nvlink_bandwidth=max(p.nvlink_bandwidth for p in ps), network_bandwidth=max(p.network_bandwidth for p in ps),
        sector_bytes=ps[0].sector_bytes, gather_efficiency=max(p.gather_efficiency for p in ps),
        l2_bandwidth_ratio=max(p.l2_bandwidth_ratio for p in ps), launch_overhead_s=min(p.launch_overhead_s for p in ps),
        min_kernel_s=min(p.min_kernel_s for p in ps), alltoall_latency_s=min(p.alltoall_latency_s for p in ps),
        network_latency_s=min(p.network_latency_s for p in ps), bwd_bandwidth_factor=max(p.bwd_bandwidth_factor for p in ps),
        host_link_bandwidth=max(p.host_link_bandwidth for p in ps), host_link="/".join(dict.fromkeys(p.host_link for p in ps)),
        host_row_rate=rows, host_gather_bandwidth=gather,
    )
    if env.l2_bandwidth_ratio < env.gather_efficiency:
        raise ValueError(f"the envelope of {', '.join(p.name for p in ps)} would read L2 slower than HBM: no monotone envelope")
    return env


def cache_residency(uniq_h: np.ndarray, rows: np.ndarray, cache_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which rows of a host-memory shard are in its HBM cache of `cache_rows` slots ([n, 17] unique rows per bin,
    hottest bin first; [n] rows and cache slots) -> (psi, phi), each [n, 17] in the same order:

    psi_b: share of bin b's rows of this batch in HBM while the kernel runs: the cache takes the batch's hottest rows
        first, psi_b = clip((C - before_b) / U_b, 0, 1) (before_b: the batch's rows in hotter bins);
    phi_b: share resident before the batch (steady state of fbgemm's LRU/LFU cache: the C hottest rows of the
        shard): the rows read twice or more (bins 1..16) are the hottest, as for psi; the rows read once (bin 0)
        are indistinguishable from the rows not read at all, so they are spread evenly over the remaining
        `rows - U_hot` rows, phi_0 = clip((C - U_hot) / (rows - U_hot), 0, 1) (TorchRec's estimate, hit rate =
        cached share, for the part of the table the histogram cannot rank).
    """
    u = np.asarray(uniq_h, dtype=np.float64)
    c = np.asarray(cache_rows, dtype=np.float64)[:, None]
    before = np.cumsum(u, axis=1) - u
    psi = np.clip(np.divide(c - before, u, out=np.ones_like(u), where=u > 0), 0.0, 1.0)
    phi = psi.copy()
    hot = u[:, :-1].sum(axis=1)  # rows read more than once this batch
    tail = np.maximum(np.asarray(rows, dtype=np.float64) - hot, u[:, -1])
    phi[:, -1] = np.clip(np.divide(c[:, 0] - hot, tail, out=np.ones_like(tail), where=tail > 0), 0.0, 1.0)
    return psi, phi


def cache_miss_share(histogram: np.ndarray, rows: float, lookups: float, cache_rows: float) -> float:
    """Steady-state share of `lookups` lookups (one batch) into a shard of `rows` rows with the 17-bin access
    `histogram` that miss an HBM cache of `cache_rows` rows (`cache_residency`'s phi)."""
    h = np.asarray(histogram, dtype=np.float64)[None, :]
    if lookups <= 0:
        return 0.0
    if not (h * BIN_COUNTS).sum() > 0:
        # no access measured (a table read less than once a batch has an all-zero histogram): its rows are taken as
        # equally likely, so the cache holds its share of them (0 / 0 made this NaN, and the cache sizing then took
        # the largest cache for the coldest table)
        return float(np.clip(1.0 - cache_rows / rows, 0.0, 1.0)) if rows > 0 else 0.0
    unique = min(rows, lookups / max(float(mean_count(h)[0]), 1.0), lookups)
    weight = h * BIN_COUNTS
    acc = (weight / weight.sum() * lookups)[:, ::-1]
    _, phi = cache_residency((h * unique)[:, ::-1], np.array([rows]), np.array([cache_rows]))
    return float(np.clip((acc * (1.0 - phi)).sum() / lookups, 0.0, 1.0))


@dataclass(frozen=True)
class TableTerms:
    """Per table what the compute terms scale with: rows, bytes per element, and the workload's optimizer. Public
    for the certified bound's per-shard coefficients (solvers.bound.terms)."""

    rows: np.ndarray  # [T]
    elem_bytes: np.ndarray  # [T]
    optimizer: Optimizer


class BoundAnalytic(BoundCostModel):
    def __init__(self, instance: Instance, profile: HardwareProfile, device_profiles: list[HardwareProfile] | None = None):
        """`profile` prices what no device is named for (a table's cost alone, the solvers' ordering); each device is
        priced on `device_profiles[d]` (a job that mixes generations: Topology.device_hardware), `profile` where
        None."""
        super().__init__(instance)
        topo = instance.topology
        if topo.host_link_bandwidth is not None:  # the topology's override of the device-host link (UVM)
            profile = replace(profile, host_link_bandwidth=float(topo.host_link_bandwidth))
            if device_profiles is not None:
                device_profiles = [replace(p, host_link_bandwidth=float(topo.host_link_bandwidth)) for p in device_profiles]
        self.profile = profile
        # the hardware kinds of the job: each device's index into `kinds` (one kind: every device on `profile`)
        self.kinds: list[HardwareProfile] = [profile]
        self.kind_of_device = np.zeros(topo.num_devices, dtype=np.int64)
        if device_profiles is not None and any(p != profile for p in device_profiles):
            self.kinds = list(dict.fromkeys(device_profiles))
            self.kind_of_device = np.array([self.kinds.index(p) for p in device_profiles], dtype=np.int64)
        self._mixed = len(self.kinds) > 1
        # links: each device its own (an A100 host's NVLink and NICs are the A100's); a topology's override holds for all
        dev_kinds = [self.kinds[k] for k in self.kind_of_device]
        intra = np.array([topo.intra_host_bandwidth or p.nvlink_bandwidth for p in dev_kinds], dtype=np.float64)
        inter = np.array([topo.inter_host_bandwidth or p.network_bandwidth for p in dev_kinds], dtype=np.float64)
        # a collective's start-up and the row splits' / replicas' collectives wait for the slowest participant
        self.intra_bw = float(intra.min())
        self.inter_bw = float(inter.min())
        if len({p.sector_bytes for p in self.kinds}) > 1:
            raise ValueError("device_hardware: kinds with different DRAM sector sizes ("
                             + ", ".join(f"{p.name} {p.sector_bytes} B" for p in self.kinds) + ") cannot share one device state")
        profile = replace(profile, alltoall_latency_s=max(p.alltoall_latency_s for p in self.kinds),
                          network_latency_s=max(p.network_latency_s for p in self.kinds)) if self.mixed else profile
        self._start_profile = profile  # the collectives' start-ups (with mixed kinds, the slowest kind's)
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
        self._host_starts = np.arange(0, topo.num_devices, topo.devices_per_host)  # hosts are contiguous blocks
        self._single_host = topo.num_hosts == 1
        per_peer = self.batch / topo.num_devices * COMM_BYTES  # bytes per unit of pooled width, per peer
        # ms per unit of width per peer: one number, or with mixed kinds one per device (each waits for its own links)
        self._local_scale: float | np.ndarray = per_peer / self.intra_bw * MS
        self._remote_scale: float | np.ndarray = per_peer / self.inter_bw * MS
        if self.mixed:
            self._local_scale = per_peer / intra * MS
            self._remote_scale = per_peer / inter * MS
        self._latency_ms = (profile.alltoall_latency_s + (profile.network_latency_s if not self._single_host else 0.0)) * MS
        self.levels = comm_levels(topo, profile)
        # a topology that lists its levels is priced level by level, one with a graph link by link; one without keeps
        # the two-level code below, so an old document costs exactly what it did (costmodels/level_comm.py, graph_comm.py)
        self._by_level: LevelComm | GraphComm | None = None
        if topo.levels is not None:
            self._by_level = LevelComm(self.levels, num_devices=topo.num_devices, group_size=topo.intra_group_size, batch=self.batch,
                                       alltoall_latency_s=profile.alltoall_latency_s)
        elif topo.graph is not None:
            self._by_level = graph_comm_of(topo.graph, num_devices=topo.num_devices, devices_per_host=topo.devices_per_host,
                                           group_size=topo.intra_group_size, batch=self.batch, alltoall_latency_s=profile.alltoall_latency_s)

    @property
    def mixed(self) -> bool:
        return self._mixed

    @property
    def lists_network(self) -> bool:
        """Whether the topology describes its network itself (levels or a graph) rather than the two levels of old."""
        return self._by_level is not None

    @property
    def comm_group_size(self) -> int:
        topo = self.instance.topology
        return self.levels[0].devices if topo.levels is not None else topo.devices_per_host

    def comm_terms(self) -> CommTerms:
        """The two-level terms; also of a topology whose levels are two levels of that kind (an inner level that is
        also the table-row-wise group - an NVLink domain over hosts - and the network), or one. Levels of any other
        nesting (three or more, an inner level inside a host) are pooled into those two roles, each send at its
        slowest level and each receive on the summed bandwidths: `pooled_level_terms`, a lower bound of the time
        (docs/analytic-bound.md, "Three levels or more"); a network graph's likewise per device
        (`GraphComm.bound_terms`, "Network graphs")."""
        topo = self.instance.topology
        p = self.profile
        q = self.batch / topo.num_devices * COMM_BYTES
        if self._by_level is None:
            L, H = topo.devices_per_host, topo.num_hosts
            return CommTerms(self._latency_ms, self._local_scale, self._remote_scale, self._local_peers.copy(), self._remote_peers.copy(),
                             self._single_host, L, H, self.intra_bw, self.inter_bw,
                             (2 * p.alltoall_latency_s + p.network_latency_s) * MS,
                             hier_intra_ms=(L - 1) * H * q / self.intra_bw * MS, hier_send_ms=(H - 1) * q / self.inter_bw * MS,
                             hier_recv_ms=q / self.inter_bw * MS)
        if isinstance(self._by_level, GraphComm):
            return self._by_level.bound_terms()
        lc = self._by_level
        if two_level_network(topo) is not None:
            return pooled_level_terms(self.levels, num_devices=topo.num_devices, group_size=topo.intra_group_size, batch=self.batch,
                                      latency_ms=lc.latency_ms, hier_start_ms=lc.hier_start_ms)
        levels = topo.levels
        size, D = levels[0].devices, topo.num_devices
        L, H = topo.intra_group_size, topo.num_intra_groups
        local = np.full(D, size - 1, dtype=np.float64)
        remote = np.full(D, D - size, dtype=np.float64)
        intra, inter = float(levels[0].bandwidth), float(levels[-1].bandwidth)
        return CommTerms(lc.latency_ms, float(lc.scales[0]), float(lc.scales[-1]), local, remote, len(levels) == 1, L, H, intra, inter,
                         lc.hier_start_ms, hier_intra_ms=(L - 1) * H * q / intra * MS, hier_send_ms=(H - 1) * q / inter * MS,
                         hier_recv_ms=q / inter * MS)

    def table_terms(self) -> TableTerms:
        return TableTerms(self._rows.copy(), self._elem.copy(), self._optimizer)

    @property
    def state_size(self) -> int:
        return STATE_SIZE

    # ---- per-shard state (vectorised over shards) ----------------------------------------------------------
    def shard_states(
        self,
        tables: np.ndarray,
        cols: np.ndarray,
        row_fraction: np.ndarray,
        batch_fraction: np.ndarray,
        cache_fraction: np.ndarray | None = None,
        host_tier: np.ndarray | None = None,
    ) -> np.ndarray:
        """States of many shards at once: [n] arrays -> [n, STATE_SIZE] (arguments: BoundCostModel.shard_states).
        Shards in HBM (cache_fraction None or 1, not host_tier) get exactly the state they had before memory tiers."""
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
        row_bytes = w * elem
        if self._optimizer is Optimizer.sgd:
            state_bytes = np.zeros_like(w)
        elif self._optimizer is Optimizer.rowwise_adagrad:
            state_bytes = np.full_like(w, 4.0)
        else:  # adam: two fp32 moments per weight
            state_bytes = 2 * w * 4.0
        row_sb = np.ceil(row_bytes / p.sector_bytes) * p.sector_bytes
        state_sb = np.ceil(state_bytes / p.sector_bytes) * p.sector_bytes
        out = np.zeros((len(tables), STATE_SIZE))
        host = None
        if cache_fraction is not None or host_tier is not None:
            cf = np.ones(w.shape) if cache_fraction is None else np.broadcast_to(np.asarray(cache_fraction, dtype=np.float64), w.shape)
            if np.any((cf < 0) | (cf > 1)) or not np.all(np.isfinite(cf)):
                raise ValueError(f"cache_fraction: {cf[(cf < 0) | (cf > 1) | ~np.isfinite(cf)][0]} is not a share in [0, 1]")
            host = (cf < 1) if host_tier is None else np.broadcast_to(np.asarray(host_tier, dtype=bool), w.shape)
            if not host.any():
                host = None
        if host is None:  # every shard in HBM: the model as it always was
            out[:, STATE_FOOT] = (uniq * sb[:, None])[:, ::-1]  # hottest bin first: the order the cache fills in
            out[:, STATE_REUSE] = (np.maximum(acc - uniq, 0.0) * sb[:, None])[:, ::-1]
            out[:, STATE_GATHER] = lookups * sb
            out[:, STATE_FWD_STREAM] = (lookups + bags) * INDEX_BYTES + bags * w * OUTPUT_BYTES
            update = unique * 2 * (row_sb + state_sb)
        else:
            # host-memory tier (docs/analytic-model.md, "Memory tiers"): with C = cf x rows cache slots, psi_b is the
            # share of bin b's rows of this batch that sit in HBM while the kernel runs (the C hottest of the batch),
            # phi_b the share resident before the batch (steady state: the C hottest rows of the shard)
            cf = np.where(host, cf, 1.0)
            uniq_h, acc_h = uniq[:, ::-1], acc[:, ::-1]  # hottest bin first
            psi, phi = cache_residency(uniq_h, rows, cf * rows)
            missed = (uniq_h * (1.0 - phi)).sum(axis=1)  # unique rows not in the cache before the batch
            overflow = (uniq_h * (1.0 - psi)).sum(axis=1)  # = max(U - C, 0): rows the cache cannot take this batch
            inserted = np.maximum(missed - overflow, 0.0)  # fetched into the cache (evicting as many dirty rows)
            direct = (acc_h * (1.0 - psi)).sum(axis=1)  # lookups the kernel reads from host memory directly
            caching = host & (cf > 0)
            adam_host = host if self._optimizer is Optimizer.adam else np.zeros_like(host)  # fbgemm: non-rowwise state in UVM
            out[:, STATE_FOOT] = uniq_h * psi * sb[:, None]
            out[:, STATE_REUSE] = np.maximum(acc_h - uniq_h, 0.0) * psi * sb[:, None]
            # (without a cache, psi is 0 and nothing is gathered from HBM: exactly 0, not lookups - sum(acc) rounded)
            out[:, STATE_GATHER] = np.where(host & (cf <= 0), 0.0, np.maximum(lookups - direct, 0.0)) * sb
            out[:, STATE_FWD_STREAM] = ((lookups + bags) * INDEX_BYTES + bags * w * OUTPUT_BYTES
                                   + caching * (lookups * CACHE_LOOKUP_BYTES + 2 * inserted * sb))
            update = np.where(host, (unique - overflow) * 2 * row_sb + np.where(adam_host, 0.0, unique * 2 * state_sb),
                              unique * 2 * (row_sb + state_sb))
            out[:, STATE_HOST_FWD_IN] = (inserted + direct) * sb
            out[:, STATE_HOST_FWD_OUT] = inserted * sb
            out[:, STATE_HOST_BWD_IN] = overflow * row_sb + adam_host * unique * state_sb
            out[:, STATE_HOST_BWD_OUT] = out[:, STATE_HOST_BWD_IN]
            out[:, STATE_HOST_FWD_ROWS] = inserted + direct
            out[:, STATE_HOST_BWD_ROWS] = overflow + adam_host * unique
            out[:, STATE_CACHED] = caching
            out[:, STATE_UVM] = host & (cf <= 0)
        replica = bf < 1.0
        if replica.any():  # data-parallel (TorchRec's dense kernel): dense gradient, optimizer step over every row
            dense = rows * (2 * w * OUTPUT_BYTES + 2 * (row_bytes + state_bytes))
            update = np.where(replica, dense, update)
        out[:, STATE_BWD_STREAM] = bags * w * OUTPUT_BYTES + lookups * SORT_BYTES_PER_LOOKUP + update
        out[:, STATE_BWD_L2] = lookups * w * OUTPUT_BYTES
        out[:, STATE_BAGS] = bags
        out[:, STATE_SHARDS] = 1.0
        return out

    def cache_miss_share(self, table: int, cache_fraction: float, row_fraction: float = 1.0) -> float:
        """Steady-state share of a shard's lookups that miss an HBM cache of `cache_fraction` x its rows (the
        hottest rows resident; docs/analytic-model.md)."""
        return float(cache_miss_share(self.histograms[table], self._rows[table] * row_fraction,
                                      self.batch * self._pool[table] * row_fraction, cache_fraction * self._rows[table] * row_fraction))

    # ---- state -> time ---------------------------------------------------------------------------------------
    def cache_hits(self, states: np.ndarray) -> np.ndarray:
        return cache_hits(states, self.profile)

    def occupancy(self, states: np.ndarray) -> np.ndarray:
        return occupancy(states, self.profile)

    def compute_costs(self, states: np.ndarray, devices: np.ndarray | int | None = None) -> np.ndarray:
        host = self.instance.topology.has_host_memory  # (without it no state holds a host-memory shard)
        if not self.mixed:
            return device_compute_costs(states, self.profile, host)
        states = np.asarray(states, dtype=np.float64)
        if devices is None:
            return device_compute_costs(states, self.profile, host)
        kind = np.broadcast_to(self.kind_of_device[np.asarray(devices)], states.shape[:-1])
        out = np.empty(states.shape[:-1] + (2,))
        for k, p in enumerate(self.kinds):
            on = kind == k
            if on.any():
                out[on] = device_compute_costs(states[on], p, host)
        return out

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

    def _host_widths(self, dims: np.ndarray) -> np.ndarray:
        """[..., D] widths -> [..., D]: the width on each device's host, its own included. Summed per block of
        devices (hosts are contiguous): O(D) per row where the product with the [D, D] same-host matrix was O(D^2),
        which made a polish of 512 devices spend most of its time here."""
        return np.add.reduceat(dims, self._host_starts, axis=-1)[..., self._host]

    def comm_time(self, dims: np.ndarray) -> np.ndarray:
        """One direction's all-to-all time (ms) per device: [..., D] -> [..., D] (forward and backward are equal)."""
        if self._by_level is not None:
            return self._by_level.time(dims)
        if self.num_devices == 1:
            return np.zeros_like(dims)
        total = dims.sum(axis=-1, keepdims=True)
        if self._single_host:  # everything over NVLink: send D-1 shares, receive everyone else's
            t = np.maximum(dims * self._local_peers, total - dims)
            t *= self._local_scale
            t += self._latency_ms
            return t
        my_host = self._host_widths(dims)
        local = np.maximum(dims * self._local_peers, my_host - dims)
        local *= self._local_scale
        remote = np.maximum(dims * self._remote_peers, total - my_host)
        remote *= self._remote_scale
        np.maximum(local, remote, out=local)
        local += self._latency_ms
        return local

    def comm_totals(self, dim_sums: np.ndarray, host_widths: np.ndarray | None = None) -> np.ndarray:
        out = 2.0 * self.comm_time(np.asarray(dim_sums, dtype=np.float64))
        if host_widths is not None:
            out += 2.0 * self.hierarchical_comm(host_widths)
        return out

    def hierarchical_comm(self, host_widths: np.ndarray) -> np.ndarray:
        """Row splits held within one host: reduce-scatter over NVLink, then all-to-all across hosts over the
        network (costmodels.hierarchical; docs/analytic-model.md)."""
        if self._by_level is not None:
            return self._by_level.hierarchical_time(host_widths)
        topo = self.instance.topology
        return hierarchical_comm_time(host_widths, devices_per_host=topo.devices_per_host, num_devices=topo.num_devices,
                                      batch=self.batch, intra_bw=self.intra_bw, inter_bw=self.inter_bw,
                                      latency_s=self._start_profile.alltoall_latency_s, network_latency_s=self._start_profile.network_latency_s)

    def comm_totals_after_adding(self, dim_sums: np.ndarray, width: float, candidates: np.ndarray) -> np.ndarray:
        """O(D) per device instead of O(D^2): a width added on device c changes c's sends and every other device's
        receives from c's host or from another host, so each device has just two possible new times."""
        if self._by_level is not None:
            return self._by_level.totals_after_adding(dim_sums, width, candidates)
        dims = np.asarray(dim_sums, dtype=np.float64)
        cands = np.asarray(candidates)
        k = len(cands)
        if self.num_devices == 1:
            return np.zeros((k, 1))
        total = dims.sum()
        my_host = self._host_widths(dims)
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
        """Ring all-reduce of a data-parallel table's gradient (dense, fp32): 2 (D-1)/D x bytes over the slowest link
        (the network when the topology spans hosts, NVLink otherwise; with levels, the slowest level's)."""
        n_dev = self.num_devices
        if n_dev == 1:
            return 0.0
        t = self.instance.tables[table]
        if self._by_level is not None:
            bw = self._by_level.allreduce_bandwidth
        else:
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
        """A fixed profile prices every device; otherwise each device is priced on its own kind's profile."""
        topo = instance.topology
        if self._fixed is not None:
            return BoundAnalytic(instance, self._fixed)
        kinds = topo.hardware_kinds() if topo.is_mixed else None
        return BoundAnalytic(instance, get_profile(topo.hardware), None if kinds is None else [get_profile(k) for k in kinds])

    def describe(self) -> str:
        return self.name
