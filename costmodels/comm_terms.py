"""`CommTerms`: the numbers one device's all-to-all and the row splits' collectives are made of, as the certified
bound's linear pieces read them (solvers.bound.inequalities), and `pooled_level_terms`, the same numbers for topology
levels that do not fall into the bound's two roles.

Why a leaf module: the analytic model fills these terms in and the bound reads them; neither imports the other's
internals. Why pooling: the bound's inequalities know two roles - the group a table-row-wise split spans (a host, or
an NVLink domain of hosts) and the rest of the job - and a topology of three levels or more (host, NVLink domain,
network) or with a level inside a host has more. `pooled_level_terms` puts every level into the role(s) its peers
fall in and gives terms whose pieces are never above the level model's time (docs/analytic-bound.md, "Three levels
or more"): a send is proportional to the device's own width, so its slowest level is priced exactly; a receive is
priced on the role's levels' summed bandwidth, because max_k(r_k / BW_k) >= sum_k r_k / sum_k BW_k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardopt.core.levels import CommLevel

COMM_BYTES = 4  # fp32 pooled outputs and their gradients (costmodels.level_comm)
MS = 1e3


@dataclass(frozen=True)
class CommTerms:
    """The numbers one device's all-to-all time is made of (docs/analytic-model.md, "Communication"): a start-up
    latency, and per unit of pooled width the ms to each local and each remote peer, with each device's peer counts.
    Public for the certified bound, whose inequalities are linear pieces of this time (solvers.bound.inequalities)."""

    latency_ms: float  # per direction and pass
    local_scale: float | np.ndarray  # ms per unit of pooled width per peer on the same host (NVLink)
    remote_scale: float | np.ndarray  # ... per peer on another host (the network)
    local_peers: np.ndarray  # [D] devices on the device's host other than itself
    remote_peers: np.ndarray  # [D] devices on other hosts
    single_host: bool
    # the row splits' hierarchical collectives (costmodels/hierarchical.py): devices per table-row-wise group and the
    # groups (the host, or an NVLink domain of topology levels), the two links, the collectives' start-ups (ms)
    group_size: int
    num_groups: int
    intra_bw: float
    inter_bw: float
    hier_start_ms: float
    # the table-row-wise collectives per unit of width (ms, one direction): the reduce-scatter's sends per unit of the
    # device's group width W_h, the all-to-all across groups' sends per unit of W_h and receives per unit of the other
    # groups' width
    hier_intra_ms: float
    hier_send_ms: float
    hier_recv_ms: float
    # the sends' ms per unit of width per peer where they differ from the receives' (`local_scale`, `remote_scale`):
    # topology levels of more than the two roles pooled into them (`pooled`), where a send is priced at its slowest
    # level exactly and a receive on the pooled bandwidth; None: the same
    local_send_scale: float | None = None
    remote_send_scale: float | None = None
    pooled: str | None = None  # which levels were pooled into the two roles, in words (None: the terms are exact)
    # a network graph's shared links (an uplink several devices' bytes cross): ms per unit of the device's group width
    # v (its group's sends all cross such a link) and per unit of the width beyond its group (total - v: the bytes all
    # arriving through one); 0 = no such piece
    group_send_scale: float = 0.0
    group_recv_scale: float = 0.0

    @property
    def local_size(self) -> int:
        """Devices in the all-to-all's local group (the host; an NVLink domain where levels list one)."""
        return int(self.local_peers[0]) + 1 if len(self.local_peers) else 1

    @property
    def send_scales(self) -> tuple[float | np.ndarray, float | np.ndarray]:
        """(local, remote) ms per unit of the device's own width per peer of its sends."""
        return (self.local_scale if self.local_send_scale is None else self.local_send_scale,
                self.remote_scale if self.remote_send_scale is None else self.remote_send_scale)


def pooled_level_terms(levels: tuple[CommLevel, ...], *, num_devices: int, group_size: int, batch: float, latency_ms: float,
                       hier_start_ms: float) -> CommTerms:
    """The two roles' terms of topology levels of any nesting: the group a table-row-wise split spans (`group_size`
    devices, Topology.intra_group_size) and the rest of the job. Level k holds `min(devices_k, G) - min(devices_(k-1),
    G)` of a device's group peers and `devices_k - max(devices_(k-1), G)` of its peers beyond (a level that straddles
    the group holds both). Per role, the sends' scale is the slowest level's share exactly, the receives' the role's
    summed bandwidth; the start-ups are the levels' own (exact). Every piece built from these terms is at most the
    level model's time of the same plan (module docstring; docs/analytic-bound.md)."""
    D, G = num_devices, min(group_size, num_devices)
    q_ms = batch / D * COMM_BYTES * MS  # ms x bytes/s per unit of width and peer
    inner: list[tuple[int, CommLevel]] = []
    outer: list[tuple[int, CommLevel]] = []
    prev = 1
    for lv in levels:
        n_in, n_out = min(lv.devices, G) - min(prev, G), lv.devices - max(prev, G)
        if n_in > 0:
            inner.append((n_in, lv))
        if n_out > 0:
            outer.append((n_out, lv))
        prev = lv.devices
    H = D // G

    def slowest(role: list[tuple[int, CommLevel]], per: float) -> float:
        return max(n / per / lv.bandwidth for n, lv in role) * q_ms

    def pooled(role: list[tuple[int, CommLevel]]) -> float:
        return float(sum(lv.bandwidth for _, lv in role))

    # (pooled levels have a group of 2 or more - a group of one device is a network of one level, never pooled - so
    # the inner role always has a level)
    bw_in = pooled(inner)
    bw_out = pooled(outer) if outer else bw_in
    local_recv, remote_recv = q_ms / bw_in, q_ms / bw_out
    local_send = slowest(inner, G - 1)
    remote_send = slowest(outer, D - G) if outer else remote_recv
    names = " + ".join(lv.name for _, lv in inner) + (" | " + " + ".join(lv.name for _, lv in outer) if outer else "")
    return CommTerms(
        latency_ms, local_recv, remote_recv, np.full(D, G - 1, dtype=np.float64), np.full(D, D - G, dtype=np.float64), not outer,
        G, H, bw_in, bw_out, hier_start_ms,
        hier_intra_ms=H * slowest(inner, 1.0),
        hier_send_ms=slowest(outer, G) if outer else 0.0,
        hier_recv_ms=remote_recv,
        local_send_scale=local_send, remote_send_scale=remote_send,
        pooled=f"topology levels pooled into two roles (within a group of {G} | beyond): {names}",
    )
