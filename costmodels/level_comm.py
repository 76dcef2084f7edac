"""Collectives priced over a topology's levels (host, NVLink domain, pod, ...): the analytic model's communication
when a topology lists `levels` (shardopt.core.levels).

Why its own module: the level formulas generalise the two-level ones of costmodels/analytic.py (NVLink in a host,
the network between hosts) to any nesting, and the analytic model keeps its two-level code for topologies without
levels, so an old document costs exactly what it did. On a topology whose levels are the host and the network the
two agree (tests/test_topology_levels.py). docs/analytic-model.md, "Topology levels", has the formulas.

Each device reaches `peers_k` devices first at level k and sends them `q dimsum_d` each, where `q = B / D * 4` bytes
per unit of pooled width; it receives from them the widths of the part of its level-k group outside its level-(k-1)
group. Every level's links work at once, each direction limited by its own bandwidth, so the slowest level decides:
    t_d = latency + max_k  max(peers_k q dimsum_d, q recv_k(d)) / BW_k
with one start-up: the all-to-all's own plus the largest latency among the levels it crosses.
"""

from __future__ import annotations

import numpy as np

from shardopt.core.levels import CommLevel, group_sums, level_groups

COMM_BYTES = 4  # fp32 pooled outputs and their gradients
MS = 1e3
SHARED_TABLE_MAX = 2048  # devices up to which the innermost-shared-level table is kept ([D, D] indices: 32 MB)


class LevelComm:
    """The all-to-all, the hierarchical collectives of row splits held within a group (a host, or an NVLink domain
    of hosts), and the replicas' all-reduce of one topology's levels, for a batch of `batch` samples. `alltoall_latency_s` is the profile's start-up of one
    collective."""

    def __init__(self, levels: tuple[CommLevel, ...], *, num_devices: int, group_size: int, batch: float, alltoall_latency_s: float):
        self.levels = levels
        self.num_devices = num_devices
        self.group_size = group_size  # devices a table-row-wise split spans (Topology.intra_group_size)
        q = batch / num_devices * COMM_BYTES
        self._q = q
        self._peers = np.array([lv.peers for lv in levels], dtype=np.float64)
        self.scales = np.array([q / lv.bandwidth * MS for lv in levels])  # ms per unit of width per peer, per level
        self._groups = level_groups(levels, num_devices)  # [K, D]
        self._first_shared: np.ndarray | None = None  # [D, D] where two devices first share a group (on first use)
        crossing = max((lv.latency_s for lv in levels), default=0.0)
        self.latency_ms = (alltoall_latency_s + crossing) * MS  # the all-to-all's start-up
        self.hier_start_ms = (2 * alltoall_latency_s + crossing) * MS  # the table-row-wise collectives' two start-ups

    # ---- the all-to-all of pooled outputs -------------------------------------------------------------------
    def _nested(self, dims: np.ndarray) -> np.ndarray:
        """[..., D] as [..., D / size_(K-1), ..., size_1 / size_0, size_0]: the outermost group first, so a level's
        group sums are sums over the last axes and broadcast back to the devices without copies."""
        sizes = [lv.devices for lv in self.levels]
        factors = [sizes[0]] + [b // a for a, b in zip(sizes, sizes[1:])]
        return dims.reshape(*dims.shape[:-1], *reversed(factors))

    def _sends_receives(self, dims: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per level, each device's sends and receives ([..., D] each)."""
        x = self._nested(dims)
        sends, recvs = [], []
        inner = x
        for k in range(len(self.levels)):
            outer = inner.sum(axis=-(k + 1), keepdims=True)
            sends.append(dims * self._peers[k])
            recvs.append(np.broadcast_to(outer - inner, x.shape).reshape(dims.shape))
            inner = outer
        return sends, recvs

    def time(self, dims: np.ndarray) -> np.ndarray:
        """One direction's all-to-all (ms) per device: [..., D] -> [..., D] (backward moves the same bytes)."""
        dims = np.asarray(dims, dtype=np.float64)
        if self.num_devices == 1 or not self.levels:
            return np.zeros_like(dims)
        x = self._nested(dims)
        t = x * float((self._peers * self.scales).max())  # the sends: the slowest level's share of the width (x >= 0)
        inner = x
        for k in range(len(self.levels)):  # the receives: each level's on its own group sums (broadcast, no copies)
            outer = inner.sum(axis=-(k + 1), keepdims=True)
            np.maximum(t, (outer - inner) * self.scales[k], out=t)
            inner = outer
        return t.reshape(dims.shape) + self.latency_ms

    def totals_after_adding(self, dims: np.ndarray, width: float, candidates: np.ndarray) -> np.ndarray:
        """[k, D] fwd + bwd all-to-all of every device after adding `width` to device candidates[i] (row i): the
        device itself sends more at every level; another device receives more at the innermost level it shares with
        the candidate, so each device has one new time per level."""
        dims = np.asarray(dims, dtype=np.float64)
        cands = np.asarray(candidates)
        if self.num_devices == 1 or not self.levels:
            return np.zeros((len(cands), self.num_devices))
        sends, recvs = (np.array(a) for a in self._sends_receives(dims))  # [K, D] each
        K, w = len(self.levels), float(width)
        scales, peers = self.scales[:, None], self._peers[:, None]
        base = np.maximum(sends, recvs) * scales  # [K, D]
        bumped = np.maximum(sends, recvs + w) * scales
        own = (np.maximum(sends + w * peers, recvs) * scales).max(axis=0)
        # the time of every device when the width lands at level j: bumped there, the largest of the other levels'
        # (the top one unless j holds it, then the second)
        if K > 1:
            top = np.argmax(base, axis=0)
            ordered = np.sort(base, axis=0)
            others = np.where(np.arange(K)[:, None] == top[None, :], ordered[-2][None, :], ordered[-1][None, :])  # [K, D]
            per_level = np.maximum(bumped, others)
        else:
            per_level = bumped
        # [k, D]: each device's time at the innermost level it shares with the candidate (flat indices into per_level)
        out = per_level.ravel().take(self._innermost_shared(cands))
        out[np.arange(len(cands)), cands] = own[cands]
        return 2.0 * (out + self.latency_ms)

    def _innermost_shared(self, cands: np.ndarray) -> np.ndarray:
        """[k, D] the innermost level whose group holds both a candidate and a device - the count of levels whose
        groups part them (groups nest) - as a flat index into a [K, D] array. Up to SHARED_TABLE_MAX devices the
        [D, D] table is computed once and gathered from; above, per call."""
        def parted(rows: np.ndarray) -> np.ndarray:  # as flat indices level x D + device into a [K, D] array
            first = np.zeros((len(rows), self.num_devices), dtype=np.intp)
            for g in self._groups:
                first += g[rows, None] != g[None, :]
            return first * self.num_devices + np.arange(self.num_devices, dtype=first.dtype)[None, :]

        if self.num_devices > SHARED_TABLE_MAX:
            return parted(np.asarray(cands))
        if self._first_shared is None:
            self._first_shared = parted(np.arange(self.num_devices))
        return self._first_shared[cands]

    # ---- row splits held within one group (a host, or an NVLink domain over hosts) -----------------------------
    def hierarchical_time(self, host_widths: np.ndarray) -> np.ndarray:
        """One direction's time (ms) of TorchRec's table-row-wise collectives per device: [..., H] -> [..., D], with
        H the groups a table-row-wise split spans (`group_size` devices each: the host, or an NVLink domain).

        The reduce-scatter within the group sends every group peer `H q W_h` (the levels inside the group carry it,
        each with its own peers there); the all-to-all across groups among the devices of one local rank sends each
        such peer `q W_h` and receives the hierarchical widths of the groups it reaches at each level above the group.
        The two run one after the other, each with its start-up, once any group has such a split."""
        w = np.asarray(host_widths, dtype=np.float64)
        L, D = self.group_size, self.num_devices
        H = w.shape[-1]
        group = np.arange(D) // L
        mine = w[..., group]  # [..., D]
        total = w.sum(axis=-1, keepdims=True)
        intra = np.zeros_like(mine)
        inter = np.zeros_like(mine)
        inner = w  # [..., H]: each group's width summed over its part of the level below (itself at first)
        prev = 1
        for lv in self.levels:
            bw_ms = MS / lv.bandwidth
            in_group = min(lv.devices, L) - min(prev, L)  # this level's peers inside my group
            if in_group > 0:
                np.maximum(intra, in_group * H * self._q * mine * bw_ms, out=intra)
            if lv.devices > L:  # this level reaches other groups: my local rank's peers there
                per_level_group = lv.devices // L
                outer = group_sums(w, per_level_group)
                peers = per_level_group - max(prev, L) // L
                recv = (outer - inner)[..., group]
                np.maximum(inter, np.maximum(peers * self._q * mine, self._q * recv) * bw_ms, out=inter)
                inner = outer
            prev = lv.devices
        start = np.where(total > 0, self.hier_start_ms, 0.0)
        return intra + inter + start

    # ---- data-parallel replicas -----------------------------------------------------------------------------
    @property
    def allreduce_bandwidth(self) -> float:
        """The slowest link a ring over every device crosses (bytes/s)."""
        return min(lv.bandwidth for lv in self.levels)
