"""What the RL solvers share: the sequential-placement core (batched over rollout lanes), its features, numpy
policy inference, rollouts, the solve driver, and the checkpoint formats.

Sequential table-wise placement: the tables of an instance are visited in a fixed order (DreamShard's: predicted
single-table cost, descending) and each is put on one device. The state of a device is what the cost model needs
to price it: its summed additive state (BoundCostModel.table_states), its pooled width, its free memory. Every
question a policy's features ask ("what would device d cost with this table?", "what would the plan cost be?") is
one batched call of the bound cost model, for all devices of all lanes at once, so K rollouts of one instance run
in lock-step at about the price of one.

Features are in units of an instance *scale* (ideal per-device compute share plus the all-to-all of an even
split), so one policy serves any table count, device count and cost model:

- table features (per step, shared by the lanes): TABLE_FEATURES;
- device features (per lane and device): DEVICE_FEATURES - the device's current compute / comm / total, its cost
  and the plan's cost if the table went there (a one-step look-ahead in the estimated MDP), the regret of that
  choice against the best device, its memory before and after.

Masks: a device is valid when the table fits in its free memory; with `safe=True` (the policies' default) it must
also leave a completion: the remaining tables (bytes descending) must still fit by worst-fit from the state after
the move (`solvers.placement.completion.completion_mask`, shared with the heuristics' completion-checked pass). When no valid
device passes the check the plain room mask is used. A lane whose table fits on no device fails at that step.

numpy only: torch is imported by the training code (`solvers.rl.train`, `solvers.rl.dreamshard`, `solvers.rl.autoshard`) and to
read a `.pt` checkpoint, never to solve with an exported `.npz`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.feasibility import infeasibility_reason
from shardopt.core.ir import Instance, Shard
from shardopt.core.memory import table_bytes_array
from shardopt.core.npz_meta import load_npz_meta, save_npz_meta
from solvers.base import (
    Budget,
    PolicyUse,
    Solver,
    SolveResult,
    SolveStatus,
    StopReason,
    Stopwatch,
    fail,
    finish,
    unplaceable,
)
from solvers.options import existing_file, option
from solvers.placement.collectives import mark_column_wise_only
from solvers.placement.completion import completion_mask
from solvers.placement.rules import PlacementRules, placement_conflict
from solvers.results import PackingFailure, PackingReport

CHECKPOINT_DIR = Path(__file__).resolve().parents[1] / "checkpoints"  # solvers/checkpoints
FEATURE_VERSION = 1
TABLE_FEATURES = (
    "single_cost", "bytes_share", "dim_rel", "log1p_pooling", "progress", "remaining_cost", "remaining_bytes_share",
)
DEVICE_FEATURES = (
    "compute", "comm", "total", "slack_to_max", "plan_max", "own_after", "own_increase", "plan_after",
    "plan_increase", "plan_regret", "free_share", "free_after_share", "table_vs_free", "count_rel", "dims_rel",
    "own_regret",
)
FT, FD = len(TABLE_FEATURES), len(DEVICE_FEATURES)
FAIL_COST = 2.0  # a lane that cannot place a table costs its partial plan + this many scales (always worse)
BATCHED_COMM_LIMIT = 4096  # lanes x candidates x devices up to this: one comm_totals call, else per lane (O(D) each)


# ---------------------------------------------------------------------------------------------------------------
# one instance's static data


class Context:
    """An instance bound to a cost model: per-table states, sizes, orders, scale and static table features."""

    def __init__(self, instance: Instance, bm: BoundCostModel):
        self.instance, self.bm = instance, bm
        self.T, self.D = len(instance.tables), instance.topology.num_devices
        self.states = np.asarray(bm.table_states, dtype=np.float64)
        self.widths = np.asarray(bm.table_dims, dtype=np.float64)
        self.sizes = table_bytes_array(instance)
        self.caps = np.array(instance.topology.capacities(), dtype=np.int64)
        self.single = np.asarray(bm.single_table_costs, dtype=np.float64)
        # DreamShard's order: predicted single-table cost, descending (ties: table index)
        self.cost_order = np.argsort(-self.single, kind="stable")
        self.bytes_order = np.argsort(-self.sizes, kind="stable")
        even = np.full(self.D, self.widths.sum() / self.D)
        comm = float(np.mean(bm.comm_totals(even))) if self.D > 1 else 0.0
        self.scale = max(float(self.single.sum()) / self.D + comm, 1e-6)
        self.empty_comm = np.asarray(bm.comm_totals(np.zeros(self.D)), dtype=np.float64)
        mean_cap = float(self.caps.mean())
        pooling = np.array([t.pooling_factor for t in instance.tables], dtype=np.float64)
        self.tab_static = np.stack(
            [self.single / self.scale, self.sizes / mean_cap, self.widths / max(self.widths.mean(), 1.0), np.log1p(pooling) / 5.0], axis=1
        )
        self.total_width = float(self.widths.sum())
        rules = PlacementRules(instance, whole_tables=True)
        self.rules = rules if rules.active else None  # (whole tables: pins and groups narrow each lane's devices)

    def order(self, kind: str) -> np.ndarray:
        """The table order of a rollout; under placement constraints the pinned tables first, by how few devices
        they may use (a device filled before its pinned tables came loses them)."""
        base = self.cost_order if kind == "cost" else self.bytes_order
        if self.rules is None:
            return base
        return base[np.argsort(self.rules.pins.sum(axis=1)[base], kind="stable")]


# ---------------------------------------------------------------------------------------------------------------
# K lanes placing the same table sequence


@dataclass
class Observation:
    table: int
    tab: np.ndarray  # [FT]
    dev: np.ndarray  # [K, D, FD]
    mask: np.ndarray  # [K, D] bool: valid actions (dummy all-True on dead lanes)
    room: np.ndarray  # [K, D] bool: devices with room
    alive: np.ndarray  # [K] bool: lanes still placing
    new_compute: np.ndarray  # [K, D]
    comm_after: np.ndarray  # [K, D(candidate), D]
    plan_after: np.ndarray  # [K, D]


class Lanes:
    """K placements of one instance advancing in lock-step through one table order."""

    def __init__(self, ctx: Context, k: int, order: np.ndarray, safe: bool = True):
        self.ctx, self.K, self.order, self.safe = ctx, int(k), np.asarray(order), safe
        D, F = ctx.D, ctx.states.shape[1]
        self.S = np.zeros((self.K, D, F))
        self.dims = np.zeros((self.K, D))
        self.free = np.broadcast_to(ctx.caps, (self.K, D)).copy()
        self.compute = np.zeros((self.K, D))
        self.comm = np.broadcast_to(ctx.empty_comm, (self.K, D)).copy()
        self.count = np.zeros((self.K, D))
        self.device_of = np.full((self.K, ctx.T), -1, dtype=np.int64)
        self.alive = np.ones(self.K, dtype=bool)
        self.fail_step = np.full(self.K, -1, dtype=np.int64)
        self.fail_largest_free = np.zeros(self.K, dtype=np.int64)
        self.i = 0
        self._eye = np.eye(D)
        self._rem_cost = float(ctx.single[self.order].sum())
        self._rem_bytes = int(ctx.sizes[self.order].sum())

    @property
    def done(self) -> bool:
        return self.i >= len(self.order)

    def plan_max(self) -> np.ndarray:
        """[K] current plan cost (max over devices of compute + comm) of each lane's partial plan."""
        return (self.compute + self.comm).max(axis=1)

    def _comm_after(self, width: float) -> np.ndarray:
        K, D = self.K, self.ctx.D
        bm = self.ctx.bm
        if K * D * D <= BATCHED_COMM_LIMIT:
            dims = self.dims[:, None, :] + width * self._eye[None]
            return np.asarray(bm.comm_totals(dims), dtype=np.float64)
        cand = np.arange(D)
        return np.stack([np.asarray(bm.comm_totals_after_adding(self.dims[k], width, cand), dtype=np.float64) for k in range(K)])

    def _safe_mask(self, room: np.ndarray, size: int) -> np.ndarray:
        return completion_mask(self.free, size, self.ctx.sizes[self.order[self.i + 1 :]], room)

    def observe(self) -> Observation:
        ctx, K, D = self.ctx, self.K, self.ctx.D
        t = int(self.order[self.i])
        size = int(ctx.sizes[t])
        s = ctx.scale
        room = self.free >= size
        if ctx.rules is not None:  # (pins, and the devices of the tables placed so far it must avoid or join)
            room &= ctx.rules.allowed(t, self.device_of)
        newly_dead = self.alive & ~room.any(axis=1)
        if newly_dead.any():
            self.fail_step[newly_dead] = self.i
            self.fail_largest_free[newly_dead] = self.free[newly_dead].max(axis=1)
            self.alive &= ~newly_dead
        mask = self._safe_mask(room, size) if self.safe else room
        mask = np.where(self.alive[:, None], mask, True)
        new_compute = np.asarray(ctx.bm.compute_costs(self.S + ctx.states[t], ctx.bm.devices), dtype=np.float64).sum(axis=-1)  # [K, D]
        comm_after = self._comm_after(float(ctx.widths[t]))  # [K, c, D]
        totals = comm_after + self.compute[:, None, :]
        ar = np.arange(D)
        totals[:, ar, ar] += new_compute - self.compute
        plan_after = totals.max(axis=2)  # [K, c]
        own_after = totals[:, ar, ar]
        total = self.compute + self.comm
        cur_max = total.max(axis=1, keepdims=True)
        big = np.where(mask, 0.0, np.inf)
        best_plan = (plan_after + big).min(axis=1, keepdims=True)
        best_own = (own_after + big).min(axis=1, keepdims=True)
        cap = ctx.caps[None, :].astype(np.float64)
        dev = np.empty((K, D, FD))
        dev[..., 0] = self.compute / s
        dev[..., 1] = self.comm / s
        dev[..., 2] = total / s
        dev[..., 3] = (total - cur_max) / s
        dev[..., 4] = cur_max / s
        dev[..., 5] = own_after / s
        dev[..., 6] = (own_after - total) / s
        dev[..., 7] = plan_after / s
        dev[..., 8] = (plan_after - cur_max) / s
        dev[..., 9] = np.minimum(plan_after - best_plan, 10 * s) / s
        dev[..., 10] = self.free / cap
        dev[..., 11] = (self.free - size) / cap
        dev[..., 12] = np.minimum(size / np.maximum(self.free, 1.0), 4.0) / 4.0
        dev[..., 13] = self.count * D / ctx.T
        dev[..., 14] = self.dims * D / max(ctx.total_width, 1.0)
        dev[..., 15] = np.minimum(own_after - best_own, 10 * s) / s
        total_free = float(self.free[0].sum())
        tab = np.concatenate([ctx.tab_static[t], [self.i / ctx.T, self._rem_cost / (ctx.D * s), self._rem_bytes / max(total_free, 1.0)]])
        return Observation(t, tab, dev, mask, room, self.alive.copy(), new_compute, comm_after, plan_after)

    def apply(self, actions: np.ndarray, ob: Observation) -> None:
        ctx = self.ctx
        t = ob.table
        lanes = np.flatnonzero(self.alive)
        a = np.asarray(actions)[lanes]
        if np.any(~ob.room[lanes, a]):
            raise AssertionError("an action chose a device without room")  # masks make this impossible
        self.S[lanes, a] += ctx.states[t]
        self.dims[lanes, a] += ctx.widths[t]
        self.free[lanes, a] -= ctx.sizes[t]
        self.count[lanes, a] += 1
        self.compute[lanes, a] = ob.new_compute[lanes, a]
        self.comm[lanes] = ob.comm_after[lanes, a]
        self.device_of[lanes, t] = a
        self._rem_cost -= float(ctx.single[t])
        self._rem_bytes -= int(ctx.sizes[t])
        self.i += 1


# ---------------------------------------------------------------------------------------------------------------
# numpy policies


def mlp_np(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        if i < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def layers_from(arrays: dict[str, np.ndarray], prefix: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(W [in, out], b [out]), ...] from arrays named `prefix.{i}.w` / `.b`."""
    out, i = [], 0
    while f"{prefix}.{i}.w" in arrays:
        out.append((np.ascontiguousarray(arrays[f"{prefix}.{i}.w"]), np.ascontiguousarray(arrays[f"{prefix}.{i}.b"])))
        i += 1
    return out


def pooled(dev: np.ndarray) -> np.ndarray:
    """[..., D, FD] -> [..., 2 FD]: mean and max over devices (a device-count-free summary of the cluster)."""
    return np.concatenate([dev.mean(axis=-2), dev.max(axis=-2)], axis=-1)


class NumpyPolicy:
    """Inference of a trained policy: `start(K)` -> recurrent state; `step(state, obs)` -> (logits [K, D], new state,
    anything the training update wants recorded for the step)."""

    algo = ""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]):
        self.arrays, self.meta = arrays, meta

    def start(self, k: int) -> Any:
        return None

    def step(self, state: Any, ob: Observation) -> tuple[np.ndarray, Any]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------------------------
# rollouts


@dataclass
class Rollout:
    device_of: np.ndarray  # [K, T]
    costs: np.ndarray  # [K] plan cost in ms (inf for failed lanes)
    failed: np.ndarray  # [K] bool
    fail_step: np.ndarray  # [K]
    fail_largest_free: np.ndarray  # [K]
    order: np.ndarray
    record: dict[str, Any] = field(default_factory=dict)


def sample_actions(logits: np.ndarray, mask: np.ndarray, u: np.ndarray, greedy: np.ndarray, temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Masked softmax sampling (inverse CDF on uniforms `u` [K]) or argmax on `greedy` lanes -> (actions, probs)."""
    z = np.where(mask, logits / max(temperature, 1e-6), -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    cdf = np.cumsum(p, axis=1)
    sampled = np.minimum((cdf < u[:, None] * cdf[:, -1:]).sum(axis=1), p.shape[1] - 1)
    # a sampled index must be valid (float noise at the cdf's end could point at a masked device)
    bad = ~mask[np.arange(len(sampled)), sampled]
    if bad.any():
        sampled[bad] = np.argmax(np.where(mask[bad], p[bad], -1.0), axis=1)
    a = np.where(greedy, np.argmax(np.where(mask, logits, -np.inf), axis=1), sampled)
    return a, p


class RolloutTimeout(Exception):
    """A rollout stopped by its `stop` check (the solver's time limit) after placing `placed` tables."""

    def __init__(self, placed: int):
        super().__init__(f"stopped after placing {placed} tables")
        self.placed = placed


def rollout(
    ctx: Context,
    policy: NumpyPolicy,
    k: int,
    rng: np.random.Generator,
    *,
    greedy_lanes: int = 0,
    order: str = "cost",
    record: bool = False,
    safe: bool = True,
    temperature: float = 1.0,
    stop: Callable[[], bool] | None = None,
) -> Rollout:
    """K lanes of `policy` on one instance; the first `greedy_lanes` take the argmax, the others sample. `stop`,
    asked before every step: True raises RolloutTimeout (a solver's time limit; a partial plan is no plan)."""
    lanes = Lanes(ctx, k, ctx.order(order), safe)
    state = policy.start(k)
    greedy = np.arange(k) < greedy_lanes
    rec: dict[str, list[Any]] = {"tab": [], "dev": [], "mask": [], "actions": [], "alive": [], "plan_max": [], "extra": []}
    prev_max = lanes.plan_max()
    placed = 0
    while not lanes.done:
        if stop is not None and stop():
            raise RolloutTimeout(placed)
        placed += 1
        ob = lanes.observe()
        logits, state, extra = policy.step(state, ob)
        u = rng.random(k)
        a, _ = sample_actions(logits, ob.mask, u, greedy, temperature)
        lanes.apply(a, ob)
        if record:
            rec["tab"].append(ob.tab)
            rec["dev"].append(ob.dev.astype(np.float32))
            rec["mask"].append(ob.mask)
            rec["actions"].append(a)
            rec["alive"].append(ob.alive)
            rec["plan_max"].append(lanes.plan_max())
            rec["extra"].append(extra)
        if not lanes.alive.any():
            break
    failed = ~lanes.alive
    costs = np.where(failed, np.inf, lanes.plan_max())
    out = Rollout(lanes.device_of, costs, failed, lanes.fail_step, lanes.fail_largest_free, lanes.order)
    if record:
        out.record = {key: np.stack(v) if v and key != "extra" else v for key, v in rec.items()}
        out.record["start_max"] = prev_max
        out.record["scale"] = ctx.scale
    return out


def lane_costs_in_scales(ctx: Context, ro: Rollout) -> np.ndarray:
    """[K] each lane's final plan cost in scale units; a failed lane costs its partial plan + FAIL_COST."""
    rec = ro.record
    pm = rec["plan_max"]  # [T', K]
    last = np.zeros(len(ro.costs))
    for k in range(len(ro.costs)):
        alive_steps = np.flatnonzero(rec["alive"][:, k])
        last[k] = pm[alive_steps[-1], k] if len(alive_steps) else rec["start_max"][k]
    out = last / ctx.scale
    return np.where(ro.failed, out + FAIL_COST, out)


# ---------------------------------------------------------------------------------------------------------------
# policy files: `.npz` (inference export, numpy) and `.pt` (resumable training checkpoint, torch)

POLICY_KIND = "shardopt-rl-policy"
CHECKPOINT_KIND = "shardopt-rl-checkpoint"


def save_policy_npz(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    save_npz_meta(path, arrays, {"kind": POLICY_KIND, **meta})


def load_policy_file(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, meta) of an exported `.npz` or of a training checkpoint `.pt`; ValueError when it is neither."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    if p.suffix == ".npz":
        return load_npz_meta(p, POLICY_KIND, "a shardopt RL policy")
    ckpt = load_checkpoint(p)
    return export_arrays(ckpt["algo"], ckpt["model"]), {"kind": POLICY_KIND, **ckpt["meta"]}


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    import torch

    try:
        ckpt = torch.load(Path(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input error
        raise ValueError(f"{path}: not a shardopt RL checkpoint ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(ckpt, dict) or ckpt.get("kind") != CHECKPOINT_KIND:
        raise ValueError(f"{path}: not a shardopt RL checkpoint")
    return ckpt


def export_arrays(algo: str, state_dict: dict[str, Any]) -> dict[str, np.ndarray]:
    """A torch state_dict of one of the policy networks -> the numpy arrays the inference code reads."""
    out: dict[str, np.ndarray] = {}
    for name, tensor in state_dict.items():
        a = tensor.detach().cpu().numpy().astype(np.float64)
        parts = name.split(".")
        if parts[-1] == "weight" and parts[0] in ("mlp", "actor", "critic"):
            idx = _linear_index(state_dict, parts[0], int(parts[1]))
            out[f"{parts[0]}.{idx}.w"] = a.T
        elif parts[-1] == "bias" and parts[0] in ("mlp", "actor", "critic"):
            idx = _linear_index(state_dict, parts[0], int(parts[1]))
            out[f"{parts[0]}.{idx}.b"] = a
        else:  # lstm.weight_ih_l0 etc.
            out[name] = a
    return out


def _linear_index(state_dict: dict[str, Any], prefix: str, seq_index: int) -> int:
    """nn.Sequential indices count the ReLUs too: the k-th Linear of `prefix`."""
    seq = sorted({int(k.split(".")[1]) for k in state_dict if k.startswith(prefix + ".") and k.endswith(".weight")})
    return seq.index(seq_index)


# ---------------------------------------------------------------------------------------------------------------
# the solve driver both RL solvers use


@dataclass(frozen=True)
class PolicyOptions:
    checkpoint: str | None = option(None, "the policy: a .npz export or a .pt training checkpoint (null: the cost model's "
                                          "card's policy, else the shipped one)", check=existing_file, check_text="an existing file")
    samples: int = option(16, "sampled rollouts besides the greedy one (the best plan wins)", low=0)
    temperature: float = option(1.0, "the sampled rollouts' softmax temperature", low=0.0, low_open=True)
    safe_mask: bool = option(True, "mask devices where the tables left could no longer be placed")


class PolicySolver(Solver):
    """Greedy (argmax) rollout of a trained policy, plus `samples` sampled rollouts (seeded); the best plan wins.

    Options: PolicyOptions.

    Tables in the policy's order (predicted cost descending); if no rollout can place every table, the rollouts are
    repeated with tables by bytes descending (the heuristics' memory-first order). Infeasibility is proven by
    shardopt.core.feasibility first; a policy that places no plan returns `no_solution` naming the table."""

    algo = ""
    default_checkpoint = ""
    policy_cls: type[NumpyPolicy] = NumpyPolicy

    Options = PolicyOptions

    def __init__(self, options: PolicyOptions | None = None, **overrides: Any):
        super().__init__(options, **overrides)
        # without a checkpoint named, a cost model whose card carries a policy of this algorithm (trained on that
        # model: `shardopt calibrate --with-policies`) brings its own; else the shipped one
        named = self.options.checkpoint
        self.named_checkpoint = named is not None
        self.checkpoint = Path(named) if named is not None else CHECKPOINT_DIR / self.default_checkpoint
        self._policy: NumpyPolicy | None = None

    @property
    def policy(self) -> NumpyPolicy:
        if self._policy is None:
            self._policy = load_policy(self.checkpoint, self.policy_cls, self.algo)
        return self._policy

    def use_policy_of(self, cost_model: CostModel) -> str | None:
        """Switch to the policy the cost model's card carries for this algorithm, unless a checkpoint was named;
        the card's id where it did."""
        if self.named_checkpoint:
            return None
        from costmodels.store import card_of_model

        card = card_of_model(cost_model)
        path = card.policy_path(self.algo) if card is not None else None
        target = path if path is not None else CHECKPOINT_DIR / self.default_checkpoint
        if target != self.checkpoint:
            self.checkpoint, self._policy = target, None
        return card.id if path is not None else None

    def params(self) -> dict[str, Any]:
        meta = self.policy.meta
        return {
            "layout": "table-wise",
            "checkpoint": self.checkpoint.name,
            "samples": self.options.samples,
            "temperature": self.options.temperature,
            "safe_mask": self.options.safe_mask,
            "order": "predicted single-table cost descending; fallback: bytes descending",
            "trained_on": meta.get("suite"),
            "trained_episodes": meta.get("episodes"),
            "uses_seed": self.options.samples > 0,
        }

    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult:
        policy_card = self.use_policy_of(cost_model)
        policy = self.policy  # loaded (and cached) before the clock starts: loading is not solving
        clock = Stopwatch()
        conflict = placement_conflict(instance, self.name, lambda t, table: False, marks=True)  # (whole tables only)
        if conflict is not None:
            return fail(self, SolveStatus.no_solution, f"{self.name}: {conflict}", clock, {"constraints": "not met"})
        reason = infeasibility_reason(instance)
        if reason is not None:
            return unplaceable(self, instance, reason, clock, "table-wise in HBM")
        bm = cost_model.bind(instance)
        ctx = Context(instance, bm)
        rng = np.random.default_rng(seed)
        best: tuple[float, np.ndarray] | None = None
        tried: list[str] = []
        last: Rollout | None = None
        info: dict[str, Any] = {"policy": str(self.checkpoint)}
        if policy_card is not None:
            info["policy_from_card"] = policy_card
        budget = Budget.of(clock, time_limit)
        try:
            best, last = self._rollouts(ctx, policy, rng, budget, tried, info)
        except RolloutTimeout as cut:
            why = (f"{self.name}: the time limit of {time_limit:g} s ended the policy's rollout ({'; '.join(tried)}) after "
                   f"{cut.placed} of {ctx.T} tables, before it had a plan")
            return fail(self, SolveStatus.no_solution, why, clock, {**info, "stages_tried": tried, "timed_out": True})
        if best is None:
            assert last is not None
            k = 0
            step = int(last.fail_step[k])
            t = int(last.order[step])
            name = instance.tables[t].name
            why = (
                f"{self.name}: could not place table {name!r} ({int(ctx.sizes[t]):,} bytes): the largest free space on any "
                f"device at that moment was {int(last.fail_largest_free[k]):,} bytes (after placing {step} of {ctx.T} tables; "
                f"stages tried: {', '.join(tried)}). The instance is not proven infeasible: every table fits on some device "
                f"and the total memory suffices."
            )
            if ctx.rules is not None:
                why = why.replace(" (after placing", " among the devices its placement constraints left it (after placing", 1)
            out = fail(self, SolveStatus.no_solution, why, clock, info)
            out.packing = PackingReport(None, tuple(tried), (PackingFailure(tried[-1], name, int(ctx.sizes[t]), int(last.fail_largest_free[k]), step),))
            return out
        device_of = best[1]
        shards = [Shard(table=t.name, device=int(device_of[i])) for i, t in enumerate(instance.tables)]
        shards, marked = mark_column_wise_only(instance, shards, lambda: bm)  # (a column_wise-only table: whole, marked)
        if marked:
            info["column_wise_only"] = marked
        over = budget.spent()
        out = finish(self, instance, cost_model, shards, clock, seed=seed, bound=bm, info=info, stopped=StopReason.time_limit if over else None,
                     extra_params={"fallback_used": tried[-1] if tried[-1] != "primary" else None}, policy=PolicyUse(str(self.checkpoint), policy_card))
        out.packing = PackingReport(tried[-1], tuple(tried))
        return out

    def _rollouts(self, ctx: Context, policy: NumpyPolicy, rng: np.random.Generator, budget: Budget, tried: list[str],
                  info: dict[str, Any]) -> tuple[tuple[float, np.ndarray] | None, Rollout | None]:
        """The policy's greedy rollout (and its samples while half the budget is left), in the cost order and, if
        that finds no plan, in the memory order: (best (cost, devices) or None, the last rollout)."""
        stop = None if budget.deadline is None else budget.spent
        samples_until = Budget.of(budget.clock, None if budget.deadline is None else 0.5 * budget.deadline)  # (half the limit)
        best: tuple[float, np.ndarray] | None = None
        last: Rollout | None = None
        for stage in ("cost", "bytes"):
            tried.append("primary" if stage == "cost" else "memory_order")
            ro = rollout(ctx, policy, 1, rng, greedy_lanes=1, order=stage, safe=self.options.safe_mask, temperature=self.options.temperature, stop=stop)
            last = ro
            cands = [(float(ro.costs[0]), ro.device_of[0])] if not ro.failed[0] else []
            info["greedy_cost"] = float(ro.costs[0]) if not ro.failed[0] else None
            sampled_best = None
            if self.options.samples > 0 and not samples_until.spent():
                try:
                    rs = rollout(ctx, policy, self.options.samples, rng, greedy_lanes=0, order=stage, safe=self.options.safe_mask, temperature=self.options.temperature, stop=stop)
                except RolloutTimeout:  # (the greedy rollout's plan stands)
                    info["samples_cut_by_time_limit"] = True
                    if cands:
                        best = cands[0]
                        break
                    continue
                ok = np.flatnonzero(~rs.failed)
                if len(ok):
                    j = int(ok[np.argmin(rs.costs[ok])])
                    cands.append((float(rs.costs[j]), rs.device_of[j]))
                    sampled_best = float(rs.costs[j])
                info["samples_failed"] = int(rs.failed.sum())
                if last.failed[0] and len(ok) == 0:
                    last = rs
            info["sampled_best_cost"] = sampled_best
            if cands:
                best = min(cands, key=lambda c: c[0])  # min keeps the first of equals: the greedy rollout
                break
        return best, last


def load_policy(path: Path, cls: type[NumpyPolicy], algo: str) -> NumpyPolicy:
    """A policy file, checked to be of `algo` (each solver loads its policy once, on first use)."""
    p = Path(path).resolve()
    if not p.is_file():
        raise ValueError(f"checkpoint {path}: no such file")
    arrays, meta = load_policy_file(p)
    if meta.get("algo") != algo:
        raise ValueError(f"checkpoint {path}: a {meta.get('algo')!r} policy, expected {algo!r}")
    if meta.get("feature_version") != FEATURE_VERSION:
        raise ValueError(f"checkpoint {path}: feature version {meta.get('feature_version')!r}, this shardopt reads {FEATURE_VERSION}")
    return cls(arrays, meta)


ProgressFn = Callable[[int, int], None]


# ---------------------------------------------------------------------------------------------------------------
# training (torch): the loop both algorithms share; `solvers.rl.dreamshard` / `solvers.rl.autoshard` give the network
# and the update


class RLTrainError(ValueError):
    """Unusable training input or settings (a user error)."""


@dataclass
class TrainSettings:
    algo: str = "dreamshard"
    episodes: int = 8000  # total rollouts (one rollout = one placement of one instance)
    rollouts: int = 16  # rollouts per update, all on one instance, in lock-step
    learning_rate: float = 1e-3
    entropy: float = 0.01
    seed: int = 0
    threads: int = 1
    hidden: int = 64
    value_coef: float = 0.5  # autoshard's critic loss weight
    gae_lambda: float = 0.95  # autoshard
    cost_updates: bool = True  # dreamshard with a neural cost model: fine-tune it on judged plans
    cost_update_every: int = 25  # updates between cost-network rounds
    save_every_s: float = 60.0


def costnet_path(out: str | Path) -> Path:
    """Where training writes a fine-tuned neural cost network beside checkpoint `out`."""
    p = Path(out)
    return p.with_name(p.stem + "-costnet.npz")


def evaluate_policy(policy: NumpyPolicy, instances: list[Instance], cost_model: CostModel, *, samples: int = 0, seed: int = 0) -> np.ndarray:
    """Plan cost (ms, the cost model's) of the best of the greedy rollout and `samples` sampled ones, per instance
    (inf where no rollout placed every table)."""
    out = []
    for inst in instances:
        ctx = Context(inst, cost_model.bind(inst))
        rng = np.random.default_rng(seed)
        ro = rollout(ctx, policy, 1, rng, greedy_lanes=1)
        best = float(ro.costs[0])
        if samples:
            rs = rollout(ctx, policy, samples, rng)
            best = min(best, float(rs.costs.min()))
        out.append(best)
    return np.array(out)


def mean_sampled_cost(policy: NumpyPolicy, instances: list[Instance], cost_model: CostModel, *, k: int = 16, seed: int = 0) -> float:
    """The policy's expected plan cost, estimated: the mean over instances of the mean cost (ms) of `k` sampled
    rollouts (seeded). A lane that fails counts its partial plan + FAIL_COST scales."""
    means = []
    for inst in instances:
        ctx = Context(inst, cost_model.bind(inst))
        ro = rollout(ctx, policy, k, np.random.default_rng(seed), record=True)
        means.append(float(lane_costs_in_scales(ctx, ro).mean()) * ctx.scale)
    return float(np.mean(means))
