"""Why a plan costs what it costs: the bottleneck device, what it spends its time on, the shards that weigh most
on it, how far it sits above the other devices and above the certified bound, and the best single changes.

Users of TorchRec's planner ask for exactly this: a plan is a max over devices, so the one question that matters is
why *that* device is slowest and what one could do about it. Everything here is the cost model's prediction (the
plan is judged by the model named in `cost_model`); the bound is the analytic model's certified one and says
which plans it covers.

A shard's weight on its device is its *marginal* cost: the device's cost with the shard minus without it. The
device's cost is not the sum of its shards' costs (one kernel launch per pass, a floor for under-occupied kernels,
hot rows competing for one cache), so the marginals do not add up to the device's cost; what is left over is
reported as the device's shared cost (negative when the shards crowd each other out of the cache, so each costs
more beside the others than alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodels.base import COST_COLUMNS, CostModel, placement_kind
from shardopt.core.ir import Instance, Plan
from solvers.placement.plan_moves import Change, PlanShards

DOMINANT_SHARE = 0.5  # a column with at least this share of the bottleneck's cost is named as what dominates it
FULL_MEMORY = 0.95  # a device this full leaves little room for moves onto it


@dataclass
class ShardWeight:
    """One shard of the bottleneck device and what it costs there."""

    shard: int  # index into the plan's shards
    table: str
    label: str  # "t3", "t3[c0:32]", "t3[r0:1000]", "t3(rep)"
    kind: str  # "kernel fused", "a data-parallel replica", ...
    hbm_bytes: int
    host_bytes: int
    alone_ms: float  # its compute on a device of its own
    marginal: np.ndarray  # [4] the device's columns with it minus without it
    share: float  # marginal total / the device's total

    @property
    def marginal_ms(self) -> float:
        return float(self.marginal.sum())

    def to_dict(self) -> dict[str, Any]:
        return {"shard": self.shard, "table": self.table, "label": self.label, "kind": self.kind, "hbm_bytes": self.hbm_bytes,
                "host_bytes": self.host_bytes, "alone_ms": self.alone_ms, "marginal_ms": self.marginal_ms,
                "marginal": {c: float(v) for c, v in zip(COST_COLUMNS, self.marginal)}, "share": self.share}


@dataclass
class SuggestedChange:
    """A single move or swap and the plan cost it leads to (predicted)."""

    change: Change
    text: str  # "move t3[c0:32] from device 4 to device 9"
    cost_ms: float
    delta_ms: float  # cost after - cost now (negative: better)
    new_bottleneck: int

    def to_dict(self) -> dict[str, Any]:
        c = self.change
        return {"kind": c.kind, "text": self.text, "shard": c.shard, "to_device": c.to_device, "other": c.other, "cost_ms": self.cost_ms,
                "delta_ms": self.delta_ms, "delta_share": self.delta_ms / self.cost_ms if self.cost_ms else 0.0,
                "new_bottleneck_device": self.new_bottleneck}


@dataclass
class BoundNote:
    """The certified bound of the analytic model beside the plan, or why there is none."""

    value_ms: float | None
    covers: str | None
    certified: bool  # the plan is of the kinds the bound covers (so cost - bound is a certified gap)
    gap: float | None  # (cost - bound) / cost
    note: str  # how it was obtained, or why it is missing / not certified

    def to_dict(self) -> dict[str, Any]:
        return {"value_ms": self.value_ms, "covers": self.covers, "certified": self.certified, "gap": self.gap, "note": self.note}


@dataclass
class Explanation:
    cost_model: str
    columns: np.ndarray  # [D, 4]
    bottleneck: int
    runner_up: int | None  # the next most expensive device (None with one device)
    hbm_used: int
    hbm_capacity: int
    host_used: int
    host_capacity: int
    shards_on_bottleneck: int
    weights: list[ShardWeight]  # the heaviest, most first
    shared_ms: float  # the bottleneck's total minus the sum of all its shards' marginals
    changes: list[SuggestedChange]
    bound: BoundNote | None
    hints: list[str] = field(default_factory=list)

    @property
    def totals(self) -> np.ndarray:
        return self.columns.sum(axis=1)

    @property
    def plan_cost(self) -> float:
        return float(self.totals[self.bottleneck])

    @property
    def mean_ms(self) -> float:
        return float(self.totals.mean())

    @property
    def runner_up_ms(self) -> float | None:
        return None if self.runner_up is None else float(self.totals[self.runner_up])

    @property
    def above_mean(self) -> float:
        return self.plan_cost / self.mean_ms - 1.0 if self.mean_ms > 0 else 0.0

    @property
    def above_runner_up(self) -> float | None:
        r = self.runner_up_ms
        return None if r is None or r <= 0 else self.plan_cost / r - 1.0

    def to_dict(self) -> dict[str, Any]:
        cols = self.columns[self.bottleneck]
        total = self.plan_cost
        return {
            "cost_model": self.cost_model,
            "plan_cost_ms": total,
            "critical_path_ms": float(self.columns.max(axis=0).sum()),
            "bottleneck": {
                "device": self.bottleneck,
                "total_ms": total,
                "columns": {c: {"ms": float(v), "share": float(v / total) if total > 0 else 0.0} for c, v in zip(COST_COLUMNS, cols)},
                "above_mean": self.above_mean,
                "above_runner_up": self.above_runner_up,
                "hbm_used_bytes": self.hbm_used, "hbm_capacity_bytes": self.hbm_capacity,
                "host_used_bytes": self.host_used, "host_capacity_bytes": self.host_capacity,
                "shards": self.shards_on_bottleneck,
                "shared_ms": self.shared_ms,
            },
            "mean_device_ms": self.mean_ms,
            "mean_columns": {c: float(v) for c, v in zip(COST_COLUMNS, self.columns.mean(axis=0))},
            "runner_up": None if self.runner_up is None else {"device": self.runner_up, "total_ms": self.runner_up_ms},
            "heaviest_shards": [w.to_dict() for w in self.weights],
            "best_changes": [c.to_dict() for c in self.changes],
            "bound": None if self.bound is None else self.bound.to_dict(),
            "hints": self.hints,
        }


def _change_text(ps: PlanShards, c: Change) -> str:
    s = ps.shards[c.shard]
    src = int(ps.device[c.shard])
    if c.other is None:
        return f"move {s.label} from device {src} to device {c.to_device}"
    return f"swap {s.label} (device {src}) with {ps.shards[c.other].label} (device {c.to_device})"


def _bound_note(instance: Instance, cost_model: CostModel, plan: Plan, cost: float, time_limit: float) -> BoundNote:
    from solvers.bound import BoundError, analytic_lower_bound, plan_gap, uncovered_reason
    from solvers.status import BoundStatus

    try:
        b = analytic_lower_bound(instance, cost_model, time_limit=time_limit)
    except BoundError as exc:
        return BoundNote(None, None, False, None, f"no certified bound: {exc}")
    if not b.status.proves_bound:
        return BoundNote(None, b.covers, False, None, f"no certified bound: no plan of the kinds it covers fits ({b.reason}); the bound covers no plan of this instance")
    how = "the relaxation solved" if b.status is BoundStatus.optimal else f"HiGHS's dual bound at its {time_limit:g} s limit"
    if b.source != "relaxation":
        how = f"the {b.source} bound"
    why = uncovered_reason(plan.shards, bound=b)
    gap = plan_gap(instance, cost, b)
    if why is not None:
        return BoundNote(b.value_ms, b.covers, False, gap, f"{how}; not certified for this plan: {why}")
    return BoundNote(b.value_ms, b.covers, True, gap, how)


def _hints(ex: Explanation, ps: PlanShards) -> list[str]:
    out: list[str] = []
    cols, total = ex.columns[ex.bottleneck], ex.plan_cost
    if total > 0:
        j = int(np.argmax(cols))
        if cols[j] / total >= DOMINANT_SHARE:
            what = {"fwd_compute": "the forward kernel", "bwd_compute": "the backward kernel (gradient scatter and optimizer update)",
                    "fwd_comm": "the forward all-to-all", "bwd_comm": "the backward all-to-all"}[COST_COLUMNS[j]]
            out.append(f"{what} is {100 * cols[j] / total:.0f} % of device {ex.bottleneck}'s cost")
        comm = float(cols[2] + cols[3])
        if comm / total >= DOMINANT_SHARE:
            out.append(f"communication is {100 * comm / total:.0f} % of the bottleneck's cost: its pooled outputs "
                       f"({float(ps.dims[:, ex.bottleneck].sum()):.0f} columns wide) are what to spread, not its lookups")
    if ex.weights and ex.runner_up_ms is not None:
        heavy = max(ex.weights, key=lambda w: w.alone_ms)
        least_comm = float((ex.columns[:, 2] + ex.columns[:, 3]).min())
        if heavy.alone_ms + least_comm >= ex.runner_up_ms:
            out.append(f"{heavy.label}'s kernel alone costs {heavy.alone_ms:.3f} ms; with the all-to-all every device pays (at least "
                       f"{least_comm:.3f} ms) no device can hold it below the next device's load ({ex.runner_up_ms:.3f} ms): moving it "
                       "only moves the bottleneck; split it (column- or row-wise)")
    uvm = [w for w in ex.weights if w.host_bytes > 0]
    uvm_ms = sum(w.marginal_ms for w in uvm)
    if total > 0 and uvm_ms / total >= DOMINANT_SHARE:
        names = ", ".join(w.label for w in uvm[:3]) + (", ..." if len(uvm) > 3 else "")
        out.append(f"shards in host memory ({names}) weigh {100 * uvm_ms / total:.0f} % of device {ex.bottleneck}'s cost: their misses "
                   "cross the host link; a larger HBM cache (cache_load_factor) or HBM room for the hottest of them is what pays")
    if ex.hbm_capacity and ex.hbm_used / ex.hbm_capacity >= FULL_MEMORY:
        out.append(f"device {ex.bottleneck}'s HBM is {100 * ex.hbm_used / ex.hbm_capacity:.0f} % full: swaps, not moves onto it, are what memory allows")
    if ex.changes and ex.changes[0].delta_ms >= -1e-9 * max(total, 1.0):
        out.append("no single move or swap of the bottleneck's shards lowers the plan cost: the plan is a local optimum of "
                   "these changes (gains need several at once: a solver, e.g. shardopt solve --from PLAN)")
    elif not ex.changes:
        out.append("no shard of the bottleneck can move: no other device has room for any of them in either tier")
    if ex.bound is not None and ex.bound.certified and ex.bound.gap is not None and ex.bound.gap < 0.01:
        out.append(f"the plan is within {100 * ex.bound.gap:.2f} % of the certified bound: little is left to gain under this cost model")
    return out


def explain_plan(
    instance: Instance,
    cost_model: CostModel,
    plan: Plan,
    *,
    top: int = 8,
    changes: int = 5,
    bound_time_limit: float | None = 10.0,
    cost_model_label: str | None = None,
) -> Explanation:
    """The explanation of a valid plan (check it first): the `top` heaviest shards of the bottleneck device and the
    `changes` best single changes; the certified bound when `bound_time_limit` is not None and the model is the
    analytic one. UnsupportedPlacementError when the model cannot cost one of the plan's shards."""
    bm = cost_model.bind(instance)
    bm.check_supported(plan.shards)
    ps = PlanShards(instance, bm, plan.shards)
    cols = ps.columns()
    totals = cols.sum(axis=1)
    hot = int(np.argmax(totals))
    order = np.argsort(-totals, kind="stable")
    runner = int(order[1]) if len(order) > 1 else None
    on_hot = np.flatnonzero(ps.device == hot)
    weights: list[ShardWeight] = []
    for p in on_hot:
        p = int(p)
        marginal = cols[hot] - ps.columns_without(p)
        s = ps.shards[p]
        weights.append(ShardWeight(p, s.table, s.label, placement_kind(s), int(ps.hbm_of[p]), int(ps.host_of[p]), ps.alone(p), marginal,
                                   float(marginal.sum() / totals[hot]) if totals[hot] > 0 else 0.0))
    weights.sort(key=lambda w: (-w.marginal_ms, w.shard))
    shared = float(totals[hot] - sum(w.marginal_ms for w in weights))
    cost = float(totals[hot])
    suggested = [SuggestedChange(c, _change_text(ps, c), c.cost, c.cost - cost, c.bottleneck) for c in ps.best_changes(changes, on_hot)]
    bound = None
    if bound_time_limit is not None:
        bound = _bound_note(instance, cost_model, plan, cost, bound_time_limit)
    label = cost_model_label or cost_model.describe()
    topo = instance.topology
    ex = Explanation(label, cols, hot, runner, int(ps.hbm[hot]), int(topo.capacity(hot)), int(ps.host[hot]), int(topo.host_capacity(hot)),
                     len(on_hot), weights[:top], shared, suggested, bound)
    ex.hints = _hints(ex, ps)
    if not math.isfinite(cost):
        raise ValueError(f"the cost model predicts a non-finite cost ({cost}) for device {hot}")
    return ex
