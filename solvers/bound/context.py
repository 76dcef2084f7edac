"""`AnalyticRelaxation`: everything per instance the bound needs, computed once (the analytic model bound to the
instance, the terms, hulls and knapsack multipliers), and what the relaxation charges a device (`_device_bound`,
`device_compute_lower_bound`) or a plan (`relaxed_device_costs`) at a given point: the numbers the relaxation's
rows add up to at an integral point, for tests and to see where the slack is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from costmodels.analytic import BWD_LAUNCHES, MS, AnalyticCostModel, BoundAnalytic, envelope_profile, sector_bytes
from costmodels.base import CostModel
from shardopt.core.hardware import HardwareProfile, get_profile
from shardopt.core.ir import DIM_ALIGNMENT, Instance
from shardopt.core.levels import two_level_network
from solvers.bound.coverage import ReplicaTerms, RowTerms, host_tier_reason, replica_terms, row_terms
from solvers.bound.inequalities import (
    comm_pieces,
    hit_slopes,
    hits_upper_bound,
    host_receive_terms,
    knapsack_multipliers,
    sector_hull,
)
from solvers.bound.terms import BoundError, _verify_terms, shard_terms

# ---------------------------------------------------------------------------------------------------------------
# per-device bounds for a given set of shards (what the relaxation charges a device at that point)


@dataclass(frozen=True)
class DeviceComputeBound:
    """Lower bounds (ms) of one device's analytic fwd and bwd compute for a set of shards, and the parts."""

    fwd_ms: float
    bwd_ms: float
    hits_bytes_upper: float  # the relaxation's upper bound of the device's L2 hits
    sector_bytes_lower: dict[int, float] = field(default_factory=dict)  # per table index

    @property
    def total_ms(self) -> float:
        return self.fwd_ms + self.bwd_ms


def network_pooling(instance: Instance) -> str | None:
    """What the bound does to `instance`'s network, in words, where its terms are below the model's all-to-all rather
    than equal to it (topology levels beyond two roles, a network graph); None where they are exact. Said in the
    bound's `covers`. Every network the model prices is covered (none is refused)."""
    topo = instance.topology
    if topo.graph is not None:
        return ("topology.graph: each device's sends priced at the busiest of its own links' share of its bytes, its receives "
                "over the summed bandwidth of the links they arrive by, a shared link's load from the device's host together, "
                "the least device's figures for all (a lower bound of the all-to-all; other hosts' load on a shared link is "
                "counted only at the least host's)")
    why = two_level_network(topo)
    if why is None:
        return None
    return (f"{why}: more than two roles, so each level is pooled into the role its peers fall in (a table-row-wise "
            "group, beyond it): each send priced at its slowest level, each receive on its role's summed bandwidth (a "
            "lower bound of the all-to-all, looser than the levels' own)")


def hardware_refusal(instance: Instance) -> str | None:
    """Why the bound does not cover `instance`'s devices, or None. A job that mixes hardware kinds is covered through
    the kinds' envelope (`envelope_profile`); refused only where the kinds have none."""
    topo = instance.topology
    if not topo.is_mixed:
        return None
    try:
        envelope_profile([get_profile(k) for k in dict.fromkeys(topo.hardware_kinds())])
    except ValueError as exc:
        return f"topology.device_hardware: {exc}"
    return None


def mixed_envelope(instance: Instance) -> HardwareProfile | None:
    """The profile the bound prices every device of a job that mixes kinds with (None for one kind): the kinds'
    envelope, no slower than any of them on any state, so the bound of the envelope is a bound of the mixed job
    (looser than one priced per kind: it lets every device be as fast as the fastest kind)."""
    topo = instance.topology
    if not topo.is_mixed:
        return None
    return envelope_profile([get_profile(k) for k in dict.fromkeys(topo.hardware_kinds())])


def _analytic_binding(instance: Instance, cost_model: CostModel | None, own_kinds: bool = False) -> BoundAnalytic:
    """The analytic model bound to `instance`; BoundError naming the model for anything else. A job that mixes kinds
    binds to the kinds' envelope, or with `own_kinds` to each device's own kind (what the per-kind LP,
    solvers.bound.kinds, prices the all-to-all and the replicas' all-reduce with)."""
    model = cost_model if cost_model is not None else AnalyticCostModel()
    if not isinstance(model, AnalyticCostModel):
        name = getattr(model, "name", type(model).__name__)
        raise BoundError(
            f"cost model {name!r}: the certified bound is for the analytic cost model only (analytic or "
            "analytic:PROFILE); its inequalities are proven for the analytic formulas, not for a learned model"
        )
    refusal = hardware_refusal(instance) if model.profile_name is None else None
    if refusal is not None:
        raise BoundError(refusal)
    envelope = mixed_envelope(instance) if model.profile_name is None and not own_kinds else None
    bm = model.bind(instance) if envelope is None else BoundAnalytic(instance, envelope)
    if type(bm) is not BoundAnalytic:
        raise BoundError(f"cost model {model.name!r} binds to {type(bm).__name__}, not the analytic model the bound is proven for")
    return bm


class AnalyticRelaxation:
    """Everything per instance the bound needs, computed once (terms, hulls, multipliers), and what the relaxation
    charges a device or a plan at a given point (for tests, and to see where the slack is)."""

    def __init__(self, instance: Instance, cost_model: CostModel | None = None, *, replicas: bool = True, host_memory: bool = True,
                 row_splits: bool = True, own_kinds: bool = False):
        """`replicas` / `host_memory` / `row_splits`: whether the relaxation covers data-parallel replicas, shards in
        host memory and row splits (where the instance allows them: `replicable`, `host_tier_reason`,
        `row_split_kinds`); off, it bounds fewer plans. `own_kinds`: a job that mixes kinds is bound with each device
        on its own kind, not on the envelope (`_analytic_binding`; its terms are then the reference kind's)."""
        bm = _analytic_binding(instance, cost_model, own_kinds)
        self.bm = bm
        self.terms = shard_terms(bm)
        _verify_terms(bm, self.terms)
        self.hulls = [sector_hull(int(d), float(e), self.terms.sector) for d, e in zip(self.terms.dims, self.terms.elem)]
        self.lams = knapsack_multipliers(self.terms)
        self.slopes = hit_slopes(self.terms, self.lams)
        self.cut_values: dict[tuple[int, int], np.ndarray] = {}  # table_cut_values, by (table, max devices)
        self.part_compute: dict[tuple[int, int], np.ndarray] = {}  # widest_part_compute, likewise
        self.block_compute: dict[tuple[int, int], np.ndarray] = {}  # row_block_cut_values, by (table, max blocks)
        self.receive: tuple[float, float, float] | None = host_receive_terms(bm)  # the receive floor's (S, B, C)
        self.replicas: ReplicaTerms = replica_terms(bm)
        self.host_reason: str | None = host_tier_reason(bm) if host_memory else "not asked for"  # None: covered
        # [T] tables the relaxation lets be replicated (a replica variable each)
        self.replicable: np.ndarray = self.replicas.allowed & replicas
        self.rows: RowTerms = row_terms(bm, self.terms)
        # [T] tables the relaxation lets be split by rows: over any devices (direct collective), over one host (hierarchical)
        self.row_split: np.ndarray = self.rows.rw & row_splits
        self.host_row_split: np.ndarray = self.rows.twrw & row_splits

    @property
    def host_memory(self) -> bool:
        """Whether shards in host memory are covered (the relaxation counts host memory as room for columns)."""
        return self.host_reason is None

    def alltoall_total_floor(self, table: int | None = None) -> float:
        """The least total pooled width the all-to-alls can carry: every table's width but those of the tables that
        may join none (a replica; a row split within one host), `table`'s own included."""
        dims = self.terms.dims
        leaves = self.replicable | self.host_row_split  # (a split within one host runs the hierarchical collectives)
        out = float(dims.sum() - dims[leaves].sum())
        if table is not None and leaves[table]:
            out += float(dims[table])
        return out

    def replica_floor_ms(self, table: int) -> float:
        """What a replica of `table` alone charges a device (launches, kernels at their floor, all-reduce): the
        least any plan that replicates it costs."""
        r, t = self.replicas, self.terms
        return float(t.launch_ms + max(t.min_kernel_ms, r.fwd_ms[table]) + max(t.min_kernel_ms, r.bwd_ms[table]) + r.allreduce_ms[table])

    def device_bound(self, shards: Sequence[tuple[int, int]], replicas: Sequence[int] = ()) -> DeviceComputeBound:
        """See `device_compute_lower_bound`."""
        return _device_bound(self, shards, replicas)

    def device_costs(self, shards: Sequence[tuple[int, int, int]], replicas: Sequence[int] = ()) -> np.ndarray:
        """See `relaxed_device_costs`."""
        return _relaxed_device_costs(self, shards, replicas)


def _device_bound(ctx: AnalyticRelaxation, shards: Sequence[tuple[int, int]], replicas: Sequence[int] = ()) -> DeviceComputeBound:
    t = ctx.terms
    if not shards and not replicas:
        return DeviceComputeBound(0.0, 0.0, 0.0)
    width: dict[int, float] = {}
    for table, w in shards:
        if not 0 <= int(table) < len(t.dims) or w <= 0 or w % DIM_ALIGNMENT:
            raise ValueError(f"shard ({table}, {w}): expected a table index and a width that is a positive multiple of {DIM_ALIGNMENT}")
        width[int(table)] = width.get(int(table), 0.0) + float(w)
    for i, w in width.items():
        if w > t.dims[i]:
            raise ValueError(f"table {i}: shards {w:g} columns wide in all, but the table has {int(t.dims[i])}")
    # sum_i sb(w_i) >= sb(sum_i w_i): what the relaxation's s >= 32 c charges at an integral point
    ssum = {i: float(sector_bytes(np.array([w]), t.elem[i : i + 1], t.sector)[0]) for i, w in width.items()}
    hits = max(0.0, hits_upper_bound(t, ctx.lams, ctx.slopes, ssum)) if t.kappa_ms > 0 else 0.0
    fwd = sum(t.fwd_fixed_ms[i] + t.fwd_col_ms[i] * w + t.fwd_sb_ms[i] * ssum[i] for i, w in width.items()) - t.kappa_ms * hits
    bwd = sum(t.bwd_fixed_ms[i] + t.bwd_col_ms[i] * w + t.bwd_sb_ms[i] * ssum[i] for i, w in width.items())
    fwd += sum(float(ctx.replicas.fwd_ms[i]) for i in replicas)  # (a replica's re-reads all counted as hits already)
    bwd += sum(float(ctx.replicas.bwd_ms[i]) for i in replicas)
    launch = ctx.bm.profile.launch_overhead_s * MS
    return DeviceComputeBound(
        fwd_ms=launch + max(t.min_kernel_ms, fwd),
        bwd_ms=BWD_LAUNCHES * launch + max(t.min_kernel_ms, bwd),
        hits_bytes_upper=hits,
        sector_bytes_lower=ssum,
    )


def device_compute_lower_bound(
    instance: Instance, shards: Sequence[tuple[int, int]], cost_model: CostModel | None = None
) -> DeviceComputeBound:
    """What the relaxation charges one device holding `shards` ((table index, width in columns) pairs; a table may
    appear several times): lower bounds of its analytic fwd and bwd compute. Exact for one whole table alone at
    occupancy 1. Tests compare it with `BoundAnalytic.compute_costs` of the shards' summed states."""
    return AnalyticRelaxation(instance, cost_model).device_bound(shards)


# ---------------------------------------------------------------------------------------------------------------
# a whole plan: compute lower bound + all-to-all (exact), per device


def relaxed_device_costs(instance: Instance, shards: Sequence[tuple[int, int, int]], cost_model: CostModel | None = None,
                         replicas: Sequence[int] = ()) -> np.ndarray:
    """Per device, what the relaxation charges a plan given as (table index, device, width) triples and the tables
    it replicates on every device: compute lower bound + one all-to-all of the summed widths (exact for one; the
    judge's one per sharding type costs at least as much) + the replicas' all-reduce. [D] ms; every entry <= the
    analytic model's device total."""
    return AnalyticRelaxation(instance, cost_model).device_costs(shards, replicas)


def _relaxed_device_costs(ctx: AnalyticRelaxation, shards: Sequence[tuple[int, int, int]], replicas: Sequence[int] = ()) -> np.ndarray:
    bm = ctx.bm
    per_dev: list[list[tuple[int, int]]] = [[] for _ in range(bm.num_devices)]
    u = np.zeros(bm.num_devices)
    for t, d, w in shards:
        per_dev[d].append((t, w))
        u[d] += w
    total = float(ctx.terms.dims.sum() - sum(ctx.terms.dims[i] for i in set(replicas)))
    host = np.arange(bm.num_devices) // bm.comm_terms().local_size  # (the all-to-all's local group)
    v = np.array([u[host == host[d]].sum() for d in range(bm.num_devices)])
    allreduce = sum(float(bm.replicated_comm(i)) for i in set(replicas))
    out = np.zeros(bm.num_devices)
    for d in range(bm.num_devices):
        comm = max(p.const + p.cu * u[d] + p.cv * v[d] for p in comm_pieces(bm, d, total)) if shards else 0.0
        out[d] = _device_bound(ctx, per_dev[d], sorted(set(replicas))).total_ms + comm + allreduce
    return out
