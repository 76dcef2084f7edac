"""How a packer chooses a device for each table: the rules of the heuristics (a proxy, random, round robin, memory
fit, greedy's predicted cost), each choosing among the devices with room, one table at a time. Their own module so that
the packing loop (constructive.py) stays the loop."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from costmodels.base import BoundCostModel
from costmodels.hierarchical import DIST_ROW
from shardopt.core.ir import Kernel
from shardopt.core.sharding_types import TABLE_WISE
from solvers.placement.tiering import TieredLayout


class DeviceRule:
    """Chooses a device for each table among those with room; may keep state across one pass."""

    def reset(self) -> None:  # called before every pass
        pass

    def choose(self, table: int, candidates: np.ndarray) -> int:
        """A device from `candidates` (ascending device indices, all with room for `table`)."""
        raise NotImplementedError

    def commit(self, table: int, device: int) -> None:
        pass


class ProxyRule(DeviceRule):
    """Lowest accumulated proxy among devices with room; ties by lowest device index."""

    def __init__(self, proxy: np.ndarray, num_devices: int):
        self.proxy = np.asarray(proxy, dtype=np.float64)
        self.loads = np.zeros(num_devices)

    def reset(self) -> None:
        self.loads[:] = 0.0

    def choose(self, table: int, candidates: np.ndarray) -> int:
        return int(candidates[np.argmin(self.loads[candidates])])  # argmin: first minimum = lowest index

    def commit(self, table: int, device: int) -> None:
        self.loads[device] += self.proxy[table]


class RandomRule(DeviceRule):
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def choose(self, table: int, candidates: np.ndarray) -> int:
        return int(candidates[self.rng.integers(len(candidates))])


class RoundRobinRule(DeviceRule):
    def __init__(self, num_devices: int):
        self.num_devices = num_devices
        self.cursor = 0

    def reset(self) -> None:
        self.cursor = 0

    def choose(self, table: int, candidates: np.ndarray) -> int:
        # the first candidate at or after the cursor, wrapping around
        k = int(np.searchsorted(candidates, self.cursor))
        return int(candidates[k % len(candidates)])

    def commit(self, table: int, device: int) -> None:
        self.cursor = (device + 1) % self.num_devices


class FitRule(DeviceRule):
    """Memory-only rules on the packer's free space: `worst` = most free memory, `best` = least that still fits."""

    def __init__(self, kind: str, sizes: np.ndarray, free: Callable[[], np.ndarray]):
        self.kind = kind
        self.sizes = sizes
        self.free = free

    def choose(self, table: int, candidates: np.ndarray) -> int:
        left = self.free()[candidates]
        k = np.argmax(left) if self.kind == "worst" else np.argmin(left)
        return int(candidates[k])


class GreedyCostRule(DeviceRule):
    """The device that minimises the predicted plan cost after the move, ties by its own cost, then index."""

    def __init__(self, bm: BoundCostModel, layout: TieredLayout | None = None):
        self.bm = bm
        self.D = bm.num_devices
        self.states = np.array(bm.table_states, dtype=np.float64)
        self.dims = np.asarray(bm.table_dims, dtype=np.float64)
        self.S0 = np.zeros((self.D, self.states.shape[1]))
        self.dims0 = np.zeros(self.D)
        if layout is not None:  # UVM tables priced by their cache; the row-wise tables' shards are there from the start
            instance = bm.instance
            for i in layout.packed:
                if layout.tiers[i].kernel is not Kernel.fused:
                    _, self.states[i], _ = bm.shard_contribution(layout.shard(instance, int(i), 0))
            # the fixed shards' own output dists (row-wise, ...) are collectives apart from the table-wise all-to-all
            # this greedy fills: their comm is a constant per device (costmodels.hierarchical.output_dist_rows)
            self.S0, dists, self.extra0 = bm.background(layout.fixed)
            tw = DIST_ROW[TABLE_WISE]
            self.dims0 = dists[tw].copy()
            dists[tw] = 0.0
            self.extra0 = self.extra0 + bm.dist_comm_totals(dists)
        else:
            self.extra0 = np.zeros(self.D)  # fixed shards' comm outside the all-to-all (a constant per device)
        self.compute0 = np.asarray(bm.compute_costs(self.S0, bm.devices)).sum(axis=1) if layout is not None else np.zeros(self.D)
        self.reset()

    def reset(self) -> None:
        self.S = self.S0.copy()
        self.dim_sums = self.dims0.copy()
        self.compute = self.compute0.copy()  # fwd + bwd compute of each device's current state (empty state: 0)
        self._last: tuple[int, float] | None = None
        self._rows = np.arange(self.D)

    def choose(self, table: int, candidates: np.ndarray) -> int:
        k = len(candidates)
        rows = self._rows[:k]
        # compute of each candidate device with the table added: one batched call ([k, 2] -> fwd + bwd)
        c2 = np.asarray(self.bm.compute_costs(self.S[candidates] + self.states[table], candidates))
        new_compute = c2[:, 0] + c2[:, 1]
        # comm of every device for each candidate placement ([k, D]; the cost model answers it incrementally)
        totals = self.bm.comm_totals_after_adding(self.dim_sums, self.dims[table], candidates)  # [k, D] fwd + bwd
        totals += self.compute + self.extra0
        totals[rows, candidates] += new_compute - self.compute[candidates]
        plan_cost = totals.max(axis=1)
        own = totals[rows, candidates]
        best = plan_cost.min()
        tied = plan_cost <= best + 1e-12 * abs(best) + 1e-15  # float noise only
        i = int(np.argmin(np.where(tied, own, np.inf)))  # first minimum = lowest device index
        self._last = (int(candidates[i]), float(new_compute[i]))
        return int(candidates[i])

    def commit(self, table: int, device: int) -> None:
        self.S[device] += self.states[table]
        self.dim_sums[device] += self.dims[table]
        if self._last is not None and self._last[0] == device:
            self.compute[device] = self._last[1]
        else:
            self.compute[device] = float(np.asarray(self.bm.compute_costs(self.S[device], device)).sum())
        self._last = None
