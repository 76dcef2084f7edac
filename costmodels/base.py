"""The cost-model interface: per-device fwd / bwd compute and fwd / bwd comm for any plan, and the incremental
questions a solver asks millions of times.

Every predictor here (the analytic model, the neural models) has the same shape, which is also the shape of
DreamShard's and NeuroShard's cost networks: each shard contributes an additive *state* vector to its device; a
device's compute cost is a nonlinear function of its summed state (so a device's cost is not the sum of its tables'
costs); communication is a function of every device's pooled-output width. A solver binds the model to an instance
once (`bind`), then asks "what does device d cost with table t added?" by adding two vectors and calling
`compute_costs` on a batch of states.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from costmodels.hierarchical import host_row_splits, output_dist_rows
from shardopt.core.errors import UserError
from shardopt.core.ir import Instance, Kernel, Plan, Shard
from shardopt.core.work import charge

COST_COLUMNS = ("fwd_compute", "bwd_compute", "fwd_comm", "bwd_comm")


class UnsupportedPlacementError(UserError, ValueError):
    """A predictor asked to cost a placement it has no model of (e.g. a neural model and a UVM shard): refused with
    the table, the device and the kind named, never answered with a number that silently prices it as something
    else. A ValueError, so the CLI reports it as bad input (exit status 2)."""

    error_kind = "unsupported_placement"

    def __init__(self, message: str, *, table: str | None = None, device: int | None = None, kind: str | None = None):
        super().__init__(message)
        self.table = table
        self.device = device
        self.kind = kind


def placement_kind(shard: Shard) -> str:
    """How a shard is costed, in words: 'kernel fused_uvm_caching', 'a data-parallel replica', 'kernel fused'."""
    if shard.replicated:
        return "a data-parallel replica"
    return f"kernel {shard.kernel.value}"


def shard_cache_fraction(shard: Shard, height: int) -> float:
    """Share of a shard's rows held in HBM: 1 for fused, 0 for fused_uvm, cache_rows / rows for fused_uvm_caching."""
    if shard.kernel is Kernel.fused:
        return 1.0
    if shard.kernel is Kernel.fused_uvm:
        return 0.0
    return min(1.0, math.ceil(float(shard.cache_load_factor or 0.0) * height) / height)


@dataclass(frozen=True)
class DeviceCosts:
    """Per-device costs in milliseconds: `columns[d]` = (fwd_compute, bwd_compute, fwd_comm, bwd_comm)."""

    columns: np.ndarray  # float64 [num_devices, 4]

    @property
    def fwd_compute(self) -> np.ndarray:
        return self.columns[:, 0]

    @property
    def bwd_compute(self) -> np.ndarray:
        return self.columns[:, 1]

    @property
    def fwd_comm(self) -> np.ndarray:
        return self.columns[:, 2]

    @property
    def bwd_comm(self) -> np.ndarray:
        return self.columns[:, 3]

    @property
    def total(self) -> np.ndarray:
        """Each device's iteration cost: the sum of its four columns."""
        return self.columns.sum(axis=1)

    @property
    def max_cost(self) -> float:
        """The plan cost (docs/analytic-model.md): max over devices of their sum."""
        return float(self.total.max()) if len(self.columns) else 0.0

    @property
    def critical_path(self) -> float:
        """Sum over phases of the slowest device in that phase (the phases synchronise at each all-to-all)."""
        return float(self.columns.max(axis=0).sum()) if len(self.columns) else 0.0

    @property
    def bottleneck(self) -> int:
        return int(np.argmax(self.total))

    @property
    def imbalance(self) -> float:
        """max / mean of the device totals (1.0 = perfectly balanced)."""
        mean = float(self.total.mean()) if len(self.columns) else 0.0
        return self.max_cost / mean if mean > 0 else 1.0

    def to_dict(self) -> dict:
        return {
            "max_cost_ms": self.max_cost,
            "critical_path_ms": self.critical_path,
            "bottleneck_device": self.bottleneck,
            "imbalance": self.imbalance,
            "devices": [
                {"device": d, **{c: float(self.columns[d, j]) for j, c in enumerate(COST_COLUMNS)}, "total": float(self.total[d])}
                for d in range(len(self.columns))
            ],
        }


def _metered(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` charging the work meter the size of its first argument (the states or widths it evaluates)."""

    @functools.wraps(method)
    def wrapper(self: Any, first: Any, *args: Any, **kwargs: Any) -> Any:
        charge(int(np.size(first)))
        return method(self, first, *args, **kwargs)

    return wrapper


class BoundCostModel(ABC):
    """A cost model specialised to one instance, with per-table work done once.

    `kernels` and `replicas` say which placements the predictor can cost; `unsupported(shard)` says why it cannot
    cost one, and every per-shard path (`shard_contribution`, hence `plan_costs`) raises UnsupportedPlacementError
    for such a shard instead of returning a number."""

    kernels: frozenset[Kernel] = frozenset(Kernel)  # the compute kernels (memory tiers) this predictor models
    replicas: bool = True  # whether it models data-parallel replicas
    unsupported_why: str = ""  # the reason given for what it cannot cost (a clause)

    # the evaluations every search spends its time in: each call charges the thread's work meter (shardopt.core.work),
    # so that a solve on a work budget stops after the same work on any machine
    METERED = ("shard_states", "compute_costs", "comm_costs", "comm_totals", "comm_totals_after_adding", "hierarchical_comm")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.METERED:
            if name in cls.__dict__:
                setattr(cls, name, _metered(cls.__dict__[name]))

    def __init__(self, instance: Instance):
        self.instance = instance
        self.num_devices = instance.topology.num_devices
        self._index = instance.table_index()
        self.model_name = type(self).__name__  # CostModel.bind sets the registered name

    @property
    def label(self) -> str:
        return f"cost model {self.model_name!r}"

    @property
    def comm_group_size(self) -> int:
        """Devices in the innermost group of the all-to-all (consecutive devices): the peers a linearisation of its
        time calls "local". The host here; a model that prices topology levels says its innermost level."""
        return self.instance.topology.devices_per_host

    def unsupported(self, shard: Shard) -> str | None:
        """None when this predictor can cost `shard`; else what it cannot cost, as a clause naming the kind, the
        table and the device: "kernel fused_uvm (table 't3' on device 2): <why>"."""
        if shard.kernel in self.kernels and (self.replicas or not shard.replicated):
            return None
        why = f": {self.unsupported_why}" if self.unsupported_why else ""
        return f"{placement_kind(shard)} (table {shard.table!r} on device {shard.device}){why}"

    def check_supported(self, shards: list[Shard]) -> None:
        """UnsupportedPlacementError for the first shard this predictor cannot cost."""
        for s in shards:
            what = self.unsupported(s)
            if what is not None:
                raise UnsupportedPlacementError(f"{self.label} cannot cost {what}; use --cost-model analytic",
                                                table=s.table, device=s.device, kind=placement_kind(s))

    # -- what each predictor implements ------------------------------------------------------------------------
    @property
    @abstractmethod
    def state_size(self) -> int:
        """Length of the additive per-device state vector."""

    @abstractmethod
    def shard_states(
        self,
        tables: np.ndarray,
        cols: np.ndarray,
        row_fraction: np.ndarray,
        batch_fraction: np.ndarray,
        cache_fraction: np.ndarray | None = None,
        host_tier: np.ndarray | None = None,
    ) -> np.ndarray:
        """The additive state contributions of many shards ([n] arrays -> [n, state_size]): shard k is a slice of
        table `tables[k]` (index) that is `cols[k]` wide, holds `row_fraction[k]` of its rows and serves
        `batch_fraction[k]` of the global batch (1/D for a data-parallel replica: a batch fraction below 1 marks a
        replica, whose optimizer step is dense over all its rows).

        Memory tier: `cache_fraction[k]` in [0, 1] is the share of the shard's rows held in HBM: 1 for `fused`,
        0 for `fused_uvm`, cache_rows / rows for `fused_uvm_caching` (`shard_cache_fraction`). None = every shard
        in HBM (fused). `host_tier[k]` says the shard's weights live in host memory (fused_uvm_caching /
        fused_uvm); None = where cache_fraction < 1. It only matters for a cache of every row (cache_fraction 1):
        fused_uvm_caching with load factor 1 still runs the cache bookkeeping and keeps adam's moments in host
        memory. A predictor that cannot cost a host-memory shard raises UnsupportedPlacementError."""

    def shard_state(self, table: int, cols: int, row_fraction: float = 1.0, batch_fraction: float = 1.0, cache_fraction: float = 1.0,
                    host_tier: bool | None = None) -> np.ndarray:
        """One shard's state (see shard_states); cache_fraction 1.0 with host_tier None = fused (HBM)."""
        cf = None if (cache_fraction == 1.0 and not host_tier) else np.array([float(cache_fraction)])
        ht = None if host_tier is None else np.array([bool(host_tier)])
        return self.shard_states(np.array([table]), np.array([cols]), np.array([row_fraction]), np.array([batch_fraction]), cf, ht)[0]

    @cached_property
    def histograms(self) -> np.ndarray:
        """Each table's 17-bin access histogram [T, 17]: as given, or derived from its Zipf exponent at the batch."""
        from shardopt.core.stats import table_histogram

        batch = self.instance.workload.batch_size
        return np.stack([table_histogram(t, batch) for t in self.instance.tables])

    @abstractmethod
    def compute_costs(self, states: np.ndarray, devices: np.ndarray | int | None = None) -> np.ndarray:
        """fwd and bwd compute in ms for each state: [..., state_size] -> [..., 2]. The empty state costs 0.

        `devices` (broadcast to states.shape[:-1]) says which device each state is on: a job that mixes hardware kinds
        prices each on its own (Topology.device_hardware). None = on no device in particular (a table's cost alone,
        an ordering): the topology's reference kind. A predictor of one kind ignores it."""

    @property
    def mixed(self) -> bool:
        """Whether devices differ in how they price one state (a job that mixes hardware kinds)."""
        return False

    @cached_property
    def devices(self) -> np.ndarray:
        """[D] every device's index: the `devices` argument of compute_costs for a stack of every device's state."""
        return np.arange(self.num_devices)

    @abstractmethod
    def comm_costs(self, dim_sums: np.ndarray) -> np.ndarray:
        """fwd and bwd all-to-all in ms per device from every device's pooled-output width (sum of its shards'
        widths): [..., D] -> [..., D, 2]."""

    def comm_totals(self, dim_sums: np.ndarray, host_widths: np.ndarray | None = None) -> np.ndarray:
        """fwd + bwd comm in ms per device: [..., D] -> [..., D], with the hierarchical collectives of `host_widths`
        ([..., H], see `hierarchical_comm`) when given. Solvers' hot path; predictors may specialise it."""
        out = self.comm_costs(dim_sums).sum(axis=-1)
        if host_widths is not None:
            out = out + 2.0 * self.hierarchical_comm(host_widths)
        return out

    def dist_comm_totals(self, dists: np.ndarray, host_widths: np.ndarray | None = None) -> np.ndarray:
        """fwd + bwd comm in ms per device of one all-to-all per output dist: [..., G, D] widths (a row of zeros runs
        no collective: `shard_sums`) -> [..., D], with the hierarchical collectives of `host_widths` when given. The
        judge's comm (`plan_costs`); a search that tracks widths per output dist prices them with this."""
        dists = np.asarray(dists, dtype=np.float64)
        present = dists.sum(axis=-1) > 0  # [..., G]
        out = np.zeros(dists.shape[:-2] + (dists.shape[-1],))
        for g in range(dists.shape[-2]):
            if present[..., g].any():
                out += np.where(present[..., g, None], self.comm_totals(dists[..., g, :]), 0.0)
        if host_widths is not None:
            out = out + 2.0 * self.hierarchical_comm(host_widths)
        return out

    def dist_comm_totals_after_adding(self, dists: np.ndarray, row: int, width: float, candidates: np.ndarray) -> np.ndarray:
        """[k, D]: every device's fwd + bwd comm (`dist_comm_totals` of widths by output dist [G, D]) if `width` were
        added to output dist `row` on device candidates[i]: the other collectives' times stay, that one's is
        `comm_totals_after_adding` (with its start-up, present or not before)."""
        dists = np.asarray(dists, dtype=np.float64)
        others = dists.copy()
        others[row] = 0.0
        out = self.comm_totals_after_adding(dists[row], width, candidates)
        out += self.dist_comm_totals(others)[None, :]
        return out

    def hierarchical_comm(self, host_widths: np.ndarray) -> np.ndarray:
        """One direction's time (ms) per device of the collectives of row splits held within one host (TorchRec's
        table_row_wise: reduce-scatter in the host, all-to-all across hosts; costmodels.hierarchical), from each
        host's hierarchical width: [..., H] -> [..., D]. Forward and backward are equal. Predictors that cost such
        splits override this; the default refuses, rather than pricing them as something else."""
        raise NotImplementedError(f"{type(self).__name__} does not model row splits held within one host (table_row_wise)")

    def compute_after_adding(self, states: np.ndarray, table: int) -> np.ndarray:
        """[D, 2]: every device's compute if whole table `table` were added to it — no re-encoding of the rest:
        the state is a sum, so this is one vector addition and one batched call."""
        return self.compute_costs(np.asarray(states) + self.table_states[table], self.devices)

    def compute_after_removing(self, states: np.ndarray, table: int) -> np.ndarray:
        """[D, 2]: every device's compute if whole table `table` were removed from it (it must hold it)."""
        return self.compute_costs(np.asarray(states) - self.table_states[table], self.devices)

    def comm_totals_after_adding(self, dim_sums: np.ndarray, width: float, candidates: np.ndarray) -> np.ndarray:
        """[k, D]: every device's fwd + bwd comm if `width` were added to device candidates[i] (the greedy
        solvers' question). This default asks `comm_totals` about k whole dim-sum vectors; predictors may answer
        it faster."""
        cands = np.asarray(candidates)
        dims = np.repeat(np.asarray(dim_sums, dtype=np.float64)[None, :], len(cands), axis=0)
        dims[np.arange(len(cands)), cands] += width
        return self.comm_totals(dims)

    # -- derived, shared by all predictors ---------------------------------------------------------------------
    @cached_property
    def table_states(self) -> np.ndarray:
        """State of each whole table placed table-wise: [T, state_size]."""
        n = len(self.instance.tables)
        return self.shard_states(np.arange(n), self.table_dims, np.ones(n), np.ones(n))

    @cached_property
    def table_dims(self) -> np.ndarray:
        return np.array([t.dim for t in self.instance.tables], dtype=np.float64)

    @cached_property
    def single_table_costs(self) -> np.ndarray:
        """Compute cost (fwd + bwd, ms) of each table alone on a device: the solvers' "predicted cost" order."""
        return self.compute_costs(self.table_states).sum(axis=-1)

    def replicated_comm(self, table: int) -> float:
        """Extra backward comm (ms, per device) of keeping a data-parallel replica of `table` in sync. Predictors
        that model data-parallel placements override this; the default refuses, rather than pretending it is free."""
        raise NotImplementedError(f"{type(self).__name__} does not model replicated (data-parallel) tables")

    def shard_contribution(self, shard: Shard) -> tuple[int, np.ndarray, float]:
        """(device, state, pooled width) a shard adds to its device, its memory tier (kernel, cache) included.
        UnsupportedPlacementError for a shard this predictor cannot cost."""
        self.check_supported([shard])
        i = self._index[shard.table]
        t = self.instance.tables[i]
        if shard.replicated:
            return shard.device, self.shard_state(i, t.dim, 1.0, 1.0 / self.num_devices), 0.0
        width = shard.width(t)
        height = shard.height(t)
        if shard.kernel is Kernel.fused:
            return shard.device, self.shard_state(i, width, height / t.rows, 1.0), float(width)
        cf = shard_cache_fraction(shard, height)
        return shard.device, self.shard_state(i, width, height / t.rows, 1.0, cf, host_tier=True), float(width)

    def device_costs(self, states: np.ndarray, dim_sums: np.ndarray, extra_bwd_comm: np.ndarray | None = None,
                     host_widths: np.ndarray | None = None) -> DeviceCosts:
        """DeviceCosts from each device's summed state [D, F], all-to-all width [D] (or [G, D]: one row per output
        dist, i.e. per sharding type, run one after the other: `shard_sums`), the replicas' all-reduce (backward) and
        each host's hierarchical width [H] (both passes)."""
        cols = np.empty((self.num_devices, 4))
        cols[:, 0:2] = self.compute_costs(states, self.devices)
        dims = np.asarray(dim_sums, dtype=np.float64)
        if dims.ndim == 1:
            cols[:, 2:4] = self.comm_costs(dims)
        else:  # one collective per output dist present, each with its own start-up, one after the other: times add
            cols[:, 2:4] = 0.0
            for row in dims[dims.sum(axis=1) > 0]:
                cols[:, 2:4] += self.comm_costs(row)
        if extra_bwd_comm is not None:
            cols[:, 3] += extra_bwd_comm
        if host_widths is not None and np.any(host_widths):
            hier = self.hierarchical_comm(host_widths)
            cols[:, 2] += hier
            cols[:, 3] += hier
        return DeviceCosts(cols)

    def shard_sums(self, shards: list[Shard]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(summed state [D, F], all-to-all widths [G, D], replicas' all-reduce [D], hierarchical width per host [H])
        of any shards: what they put on the devices. A table's shards are classified together (a row split held within
        one host leaves the all-to-all for the hierarchical collectives: costmodels.hierarchical). The all-to-all
        widths have one row per sharding type (TorchRec runs one output dist per sharding type, each its own
        collective; a row of zeros runs none: `costmodels.hierarchical.output_dist_rows`); their sum over rows is
        every device's width."""
        D = self.num_devices
        states, extra = np.zeros((D, self.state_size)), np.zeros(D)
        nested, hier = host_row_splits(self.instance, shards)
        dists = output_dist_rows(self.instance, shards, nested)
        for s in shards:
            d, st, _ = self.shard_contribution(s)
            states[d] += st
            if s.replicated:
                extra[d] += self.replicated_comm(self._index[s.table])
        return states, dists, extra, hier

    def background(self, shards: list[Shard]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(summed state [D, F], all-to-all widths by output dist [G, D] (`shard_sums`), fwd + bwd comm outside the
        all-to-alls [D]) of shards that stay put while a search places the rest around them: the replicas'
        all-reduce and the hierarchical collectives are then constants per device."""
        states, dists, extra, hier = self.shard_sums(shards)
        if hier.any():
            extra = extra + 2.0 * self.hierarchical_comm(hier)
        return states, dists, extra

    def plan_costs(self, plan: Plan | list[Shard]) -> DeviceCosts:
        shards = plan.shards if isinstance(plan, Plan) else plan
        fast = all(
            s.is_whole and not s.replicated and not s.column_wise and s.kernel is Kernel.fused for s in shards
        )
        if not fast:
            states, dims, extra, hier = self.shard_sums(shards)
            return self.device_costs(states, dims, extra, hier)
        # table-wise plans: one gather + scatter-add
        states = np.zeros((self.num_devices, self.state_size))
        dims = np.zeros(self.num_devices)
        idx = np.fromiter((self._index[s.table] for s in shards), dtype=np.int64, count=len(shards))
        dev = np.fromiter((s.device for s in shards), dtype=np.int64, count=len(shards))
        np.add.at(states, dev, self.table_states[idx])
        np.add.at(dims, dev, self.table_dims[idx])
        return self.device_costs(states, dims)

    def assignment_costs(self, device_of_table: np.ndarray) -> DeviceCosts:
        """Costs of a table-wise assignment given as one device index per table (vectorised)."""
        states = np.zeros((self.num_devices, self.state_size))
        dims = np.zeros(self.num_devices)
        np.add.at(states, device_of_table, self.table_states)
        np.add.at(dims, device_of_table, self.table_dims)
        return self.device_costs(states, dims)


for _name in BoundCostModel.METERED:  # (the defaults a predictor inherits charge too)
    if _name in BoundCostModel.__dict__ and not getattr(BoundCostModel.__dict__[_name], "__isabstractmethod__", False):
        setattr(BoundCostModel, _name, _metered(BoundCostModel.__dict__[_name]))


class CostModel(ABC):
    """A named predictor; `bind` specialises it to an instance."""

    name: str = "cost-model"

    @abstractmethod
    def bind(self, instance: Instance) -> BoundCostModel: ...

    def plan_costs(self, instance: Instance, plan: Plan | list[Shard]) -> DeviceCosts:
        return self.bind(instance).plan_costs(plan)

    def describe(self) -> str:
        return self.name
