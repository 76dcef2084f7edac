"""Single changes to a finished plan, costed in batches: one shard moved to another device, or two shards on
different devices swapped.

Why a module of its own: explaining a plan (`solvers.explain`) lists the best few changes a user could make by hand,
and re-planning (`solvers.replan.replan`) searches with the same changes under a budget of bytes moved. Both ask the same
questions of any plan - any shard kind and memory tier, since a shard's state does not depend on its device - so
the answer lives here once: every device's summed state, pooled width, replica comm and bytes per tier, and all the
moves (or all the swaps) of one shard costed in one batched call of the cost model.

What is allowed: a shard goes to a device with room for it in both tiers (HBM and host memory) and holding no other
shard of its table (the pieces of a split table stay apart); a swap needs both devices to have room after the
exchange. Data-parallel replicas are never moved (there is one on every device).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.base import BoundCostModel
from costmodels.hierarchical import OUTPUT_DIST_ORDER, host_row_splits, shard_dist_rows
from shardopt.core.ir import Instance, Shard
from shardopt.core.memory import shard_bytes, shard_host_bytes


@dataclass(frozen=True)
class Change:
    """One move (`other` None) or swap of the plan's shards (indices into `PlanShards.shards`), and the plan cost
    after it, with the device that is the bottleneck then."""

    kind: str  # "move" | "swap"
    shard: int
    to_device: int
    other: int | None
    cost: float
    bottleneck: int


class PlanShards:
    """A plan as summed per-device quantities, so that one change is costed from two devices' states."""

    def __init__(self, instance: Instance, bm: BoundCostModel, shards: list[Shard]):
        self.instance, self.bm, self.shards = instance, bm, list(shards)
        D, n = bm.num_devices, len(self.shards)
        index = instance.table_index()
        self.owner = np.array([index[s.table] for s in self.shards], dtype=np.int64)
        self.device = np.array([s.device for s in self.shards], dtype=np.int64)
        self.movable = np.array([not s.replicated for s in self.shards], dtype=bool)
        self.states = np.zeros((n, bm.state_size))
        self.widths = np.zeros(n)
        self.extra_of = np.zeros(n)
        self.hbm_of = np.zeros(n, dtype=np.int64)
        self.host_of = np.zeros(n, dtype=np.int64)
        for k, s in enumerate(self.shards):
            table = instance.tables[self.owner[k]]
            _, self.states[k], self.widths[k] = bm.shard_contribution(s)
            if s.replicated:
                self.extra_of[k] = bm.replicated_comm(int(self.owner[k]))
            self.hbm_of[k] = shard_bytes(instance, table, s)
            self.host_of[k] = shard_host_bytes(instance, table, s)
        # a row split held within one host stays where it is (one block moved elsewhere would be another layout): its
        # shards leave the all-to-all for the hierarchical collectives, a constant per device here (both passes)
        flags, hier = host_row_splits(instance, self.shards)
        nested = np.array(flags, dtype=bool)
        # each shard's output dist (TorchRec runs one all-to-all per sharding type: widths are kept apart per
        # collective), as classified in the plan given; a change keeps it (a move or swap keeps a table's layout)
        self.row_of = np.maximum(shard_dist_rows(instance, self.shards, flags), 0)  # (replicas, nested: width 0)
        self.widths[nested] = 0.0
        self.movable[nested] = False
        self.hier_comm = bm.hierarchical_comm(hier) if hier.any() else np.zeros(D)  # [D], one direction
        self.caps = np.array(instance.topology.capacities(), dtype=np.int64)
        self.host_caps = np.array(instance.topology.host_capacities(), dtype=np.int64)
        self.refresh()

    def refresh(self) -> None:
        """Recompute the per-device sums after `device` changed."""
        D = self.bm.num_devices
        self.S = np.zeros((D, self.bm.state_size))
        np.add.at(self.S, self.device, self.states)
        self.dims = np.zeros((len(OUTPUT_DIST_ORDER), D))  # widths by output dist [G, D]
        np.add.at(self.dims, (self.row_of, self.device), self.widths)
        self.extra = np.bincount(self.device, weights=self.extra_of, minlength=D) + 2.0 * self.hier_comm
        self.hbm = np.bincount(self.device, weights=self.hbm_of, minlength=D).astype(np.int64)
        self.host = np.bincount(self.device, weights=self.host_of, minlength=D).astype(np.int64)
        self.compute = self.bm.compute_costs(self.S, self.bm.devices).sum(axis=-1)
        self.totals = self.compute + self.bm.dist_comm_totals(self.dims) + self.extra

    @property
    def cost(self) -> float:
        return float(self.totals.max())

    @property
    def bottleneck(self) -> int:
        return int(np.argmax(self.totals))

    def columns(self) -> np.ndarray:
        """[D, 4]: fwd / bwd compute and fwd / bwd comm of every device (replicas' sync in bwd comm)."""
        cols = np.empty((self.bm.num_devices, 4))
        cols[:, 0:2] = self.bm.compute_costs(self.S, self.bm.devices)
        cols[:, 2:4] = self._comm_columns(self.dims)
        cols[:, 2] += self.hier_comm
        cols[:, 3] += self.extra - self.hier_comm
        return cols

    def columns_without(self, p: int) -> np.ndarray:
        """[4]: shard p's device's four columns if p were not there (its marginal share is the difference)."""
        d = int(self.device[p])
        dims = self.dims.copy()
        dims[self.row_of[p], d] -= self.widths[p]
        out = np.empty(4)
        out[0:2] = self.bm.compute_costs(self.S[d] - self.states[p], d)
        out[2:4] = self._comm_columns(dims)[d]
        out[2] += self.hier_comm[d]
        out[3] += self.extra[d] - self.hier_comm[d] - self.extra_of[p]
        return out

    def _comm_columns(self, dists: np.ndarray) -> np.ndarray:
        """[D, 2] fwd / bwd all-to-all of widths by output dist: one collective per row present."""
        out = np.zeros((self.bm.num_devices, 2))
        for row in dists[dists.sum(axis=1) > 0]:
            out += self.bm.comm_costs(row)
        return out

    def alone(self, p: int) -> float:
        """Shard p's compute (fwd + bwd, ms) alone on a device of its device's kind: its kernel's cost without company."""
        return float(self.bm.compute_costs(self.states[p], int(self.device[p])).sum())

    def _siblings(self, p: int) -> np.ndarray:
        """Devices holding another shard of p's table."""
        same = (self.owner == self.owner[p]) & (np.arange(len(self.shards)) != p)
        return np.unique(self.device[same])

    def moves(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(devices, the plan's device totals after moving shard p to each [k, D]) for every allowed move."""
        if not self.movable[p]:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.bm.num_devices))
        src = int(self.device[p])
        ok = (self.hbm + self.hbm_of[p] <= self.caps) & (self.host + self.host_of[p] <= self.host_caps)
        ok[src] = False
        ok[self._siblings(p)] = False
        cands = np.flatnonzero(ok)
        if not len(cands):
            return cands, np.zeros((0, self.bm.num_devices))
        k = np.arange(len(cands))
        new = self.bm.compute_costs(np.concatenate([self.S[src][None] - self.states[p], self.S[cands] + self.states[p]]),
                                   np.concatenate([[src], cands])).sum(axis=-1)
        r = self.row_of[p]
        dk = np.repeat(self.dims[None], len(cands), axis=0)  # [k, G, D]
        dk[:, r, src] -= self.widths[p]
        dk[k, r, cands] += self.widths[p]
        tot = self.bm.dist_comm_totals(dk) + self.compute[None, :] + self.extra[None, :]
        tot[:, src] += new[0] - self.compute[src]
        tot[k, cands] += new[1:] - self.compute[cands]
        return cands, tot

    def swaps(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(the other shards, the plan's device totals after swapping each with shard p [k, D]) for every allowed
        swap: the other shard on another device, of another table, neither table already on the other's device."""
        n, D = len(self.shards), self.bm.num_devices
        if not self.movable[p]:
            return np.zeros(0, dtype=np.int64), np.zeros((0, D))
        src = int(self.device[p])
        qs = np.flatnonzero(self.movable & (self.device != src) & (self.owner != self.owner[p]))
        if not len(qs):
            return qs, np.zeros((0, D))
        dq = self.device[qs]
        ok = ~np.isin(dq, self._siblings(p))
        on_src = np.unique(self.owner[(self.device == src) & (np.arange(n) != p)])
        ok &= ~np.isin(self.owner[qs], on_src)
        hp, hq, sp, sq = self.hbm_of[p], self.hbm_of[qs], self.host_of[p], self.host_of[qs]
        ok &= (self.hbm[dq] - hq + hp <= self.caps[dq]) & (self.hbm[src] - hp + hq <= self.caps[src])
        ok &= (self.host[dq] - sq + sp <= self.host_caps[dq]) & (self.host[src] - sp + sq <= self.host_caps[src])
        qs, dq = qs[ok], dq[ok]
        if not len(qs):
            return qs, np.zeros((0, D))
        k = np.arange(len(qs))
        new = self.bm.compute_costs(np.concatenate([self.S[src][None] - self.states[p] + self.states[qs],
                                                    self.S[dq] + self.states[p] - self.states[qs]]),
                                    np.concatenate([np.full(len(qs), src), dq])).sum(axis=-1)
        rp, rq = self.row_of[p], self.row_of[qs]
        dk = np.repeat(self.dims[None], len(qs), axis=0)  # [k, G, D]
        dk[:, rp, src] -= self.widths[p]
        dk[k, rq, src] += self.widths[qs]
        dk[k, rp, dq] += self.widths[p]
        dk[k, rq, dq] -= self.widths[qs]
        tot = self.bm.dist_comm_totals(dk) + self.compute[None, :] + self.extra[None, :]
        tot[:, src] += new[: len(qs)] - self.compute[src]
        tot[k, dq] += new[len(qs):] - self.compute[dq]
        return qs, tot

    def best_changes(self, limit: int, shards: np.ndarray | None = None) -> list[Change]:
        """The `limit` cheapest plans one change away, from moves and swaps of `shards` (default: those on the
        bottleneck device): per (kind, shard) only its best change, so the list is not one table to many devices.
        Sorted by the plan cost after, improving or not (compare with `cost`)."""
        if shards is None:
            shards = np.flatnonzero(self.device == self.bottleneck)
        found: list[Change] = []
        for p in shards:
            p = int(p)
            cands, tot = self.moves(p)
            if len(cands):
                costs = tot.max(axis=1)
                j = int(np.argmin(costs))
                found.append(Change("move", p, int(cands[j]), None, float(costs[j]), int(np.argmax(tot[j]))))
            qs, tot = self.swaps(p)
            if len(qs):
                costs = tot.max(axis=1)
                j = int(np.argmin(costs))
                q = int(qs[j])
                found.append(Change("swap", p, int(self.device[q]), q, float(costs[j]), int(np.argmax(tot[j]))))
        found.sort(key=lambda c: (c.cost, c.kind, c.shard, c.other if c.other is not None else -1))
        return found[:limit]

    def apply(self, change: Change) -> None:
        """Make the change (the caller checked it is allowed: it came from `moves` / `swaps`)."""
        if change.other is not None:
            self.device[change.other] = self.device[change.shard]
        self.device[change.shard] = change.to_device
        self.refresh()

    def plan(self) -> list[Shard]:
        """The shards on their current devices."""
        return [s if s.device == int(d) else s.model_copy(update={"device": int(d)}) for s, d in zip(self.shards, self.device)]
