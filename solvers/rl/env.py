"""A Gymnasium environment for sequential table-wise placement (id ``shardopt/Placement-v0``).

An episode places the tables of one instance (drawn from the env's instances with its seeded generator at each
`reset`) one at a time, in DreamShard's order (predicted single-table cost, descending; `order="bytes"` for bytes
descending). Each step's observation (a Dict) is:

- ``table`` [FT]: the next table's features (solvers.rl.common.TABLE_FEATURES);
- ``devices`` [max_devices, FD]: each device's state summary (predicted compute, comm and total cost, memory left,
  and the device's and the plan's cost if the table went there: solvers.rl.common.DEVICE_FEATURES), zero-padded;
- ``device_mask`` [max_devices]: 1 for the instance's devices;
- ``action_mask`` [max_devices]: 1 for the valid actions (also `action_masks()`, as sb3-contrib's MaskablePPO asks).

The action is a device index. A device is valid when the table fits in its free memory; with `safe_mask=True` it
must also leave a completion (see solvers.rl.common). An invalid action ends the episode (`terminated`, reward
-`invalid_penalty`, ``info["invalid_action"]``); so does a table that fits on no device (``info["failed"]``, reward
-`FAIL_COST`).

Reward, in units of the instance's scale (ideal per-device compute share + the all-to-all of an even split):
- ``reward="terminal"``: 0 per step, minus the plan cost at the end (the estimated MDP's return);
- ``reward="step"``: minus the change of the partial plan's cost at every step (the returns are equal up to the
  empty plan's cost);
- ``judge``: a callable ``judge(instance, shards) -> cost ms`` (e.g. a measured backend): the final plan's cost
  comes from it instead of the cost model (with ``reward="step"`` the last step adds the difference), so the same
  env serves the estimated and the measured MDP.
``info`` carries the plan cost in ms (``plan_cost_ms``) at the end and the device of every table so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from costmodels.base import CostModel
from shardopt.core.ir import Instance, Shard
from solvers.rl.common import FAIL_COST, FD, FT, Context, Lanes, Observation

ENV_ID = "shardopt/Placement-v0"
DEFAULT_INSTANCE = Path(__file__).resolve().parents[2] / "instances" / "examples" / "small.json"
OBS_BOUND = 100.0  # features are clipped to +-this (they are O(1): costs in units of the instance's scale)
Judge = Callable[[Instance, list[Shard]], float]


class PlacementEnv(gym.Env):
    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium reads it as a class attribute

    def __init__(
        self,
        instances: Instance | Sequence[Instance] | str | Path | None = None,
        cost_model: CostModel | str = "analytic",
        *,
        max_devices: int | None = None,
        reward: str = "terminal",
        judge: Judge | None = None,
        safe_mask: bool = True,
        order: str = "cost",
        invalid_penalty: float = 10.0,
    ):
        super().__init__()
        self.instances = _instances(instances)
        if isinstance(cost_model, str):
            from costmodels.registry import get_cost_model

            cost_model = get_cost_model(cost_model)
        self.cost_model = cost_model
        if reward not in ("terminal", "step"):
            raise ValueError(f"reward: {reward!r} is not 'terminal' or 'step'")
        if order not in ("cost", "bytes"):
            raise ValueError(f"order: {order!r} is not 'cost' or 'bytes'")
        most = max(i.topology.num_devices for i in self.instances)
        self.max_devices = int(max_devices or most)
        if self.max_devices < most:
            raise ValueError(f"max_devices: {self.max_devices} is fewer than an instance's {most} devices")
        self.reward_mode, self.judge, self.safe_mask, self.order_kind = reward, judge, safe_mask, order
        self.invalid_penalty = float(invalid_penalty)
        self.observation_space = spaces.Dict(
            {
                "table": spaces.Box(-OBS_BOUND, OBS_BOUND, (FT,), np.float32),
                "devices": spaces.Box(-OBS_BOUND, OBS_BOUND, (self.max_devices, FD), np.float32),
                "device_mask": spaces.MultiBinary(self.max_devices),
                "action_mask": spaces.MultiBinary(self.max_devices),
            }
        )
        self.action_space = spaces.Discrete(self.max_devices)
        self._contexts: dict[int, Context] = {}
        self._lanes: Lanes | None = None
        self._ob: Observation | None = None
        self._ctx: Context | None = None
        self._prev = 0.0
        self._over = False

    # -- gymnasium API ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        if options and "instance" in options:
            k = int(options["instance"])
        else:
            k = int(self.np_random.integers(len(self.instances)))
        ctx = self._context(k)
        self._ctx = ctx
        self._lanes = Lanes(ctx, 1, ctx.order(self.order_kind), self.safe_mask)
        self._prev = float(self._lanes.plan_max()[0])
        self._ob = self._lanes.observe()
        self._over = False
        return self._obs(), {"instance": k, "instance_name": ctx.instance.name, "table": ctx.instance.tables[self._ob.table].name}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._lanes is None or self._ob is None or self._ctx is None:
            raise RuntimeError("call reset() before step()")
        lanes, ob, ctx = self._lanes, self._ob, self._ctx
        if self._over:
            raise RuntimeError("the episode is over: call reset()")
        a = int(action)
        info: dict[str, Any] = {}
        if not lanes.alive[0]:  # the first table of the episode fits on no device (an infeasible instance)
            self._over = True
            info.update(failed=True, failed_table=ctx.instance.tables[ob.table].name)
            return self._obs(), -FAIL_COST, True, False, info
        if not (0 <= a < ctx.D) or not ob.mask[0, a]:
            lanes.alive[:] = False
            self._over = True
            info["invalid_action"] = True
            return self._obs(), -self.invalid_penalty, True, False, info
        lanes.apply(np.array([a]), ob)
        cost = float(lanes.plan_max()[0])
        reward = -(cost - self._prev) / ctx.scale if self.reward_mode == "step" else 0.0
        self._prev = cost
        info["device_of"] = lanes.device_of[0].copy()
        if lanes.done:
            final = cost
            if self.judge is not None:
                final = float(self.judge(ctx.instance, self.shards()))
            info["plan_cost_ms"] = final
            if self.reward_mode == "terminal":
                reward = -final / ctx.scale
            else:
                reward += -(final - cost) / ctx.scale
            self._over = True
            return self._obs(final=True), float(reward), True, False, info
        self._ob = lanes.observe()
        if not lanes.alive[0]:  # the next table fits on no device
            self._over = True
            info["failed"] = True
            info["failed_table"] = ctx.instance.tables[self._ob.table].name
            return self._obs(), float(reward) - FAIL_COST, True, False, info
        info["table"] = ctx.instance.tables[self._ob.table].name
        return self._obs(), float(reward), False, False, info

    def action_masks(self) -> np.ndarray:
        """The valid actions now (bool [max_devices])."""
        out = np.zeros(self.max_devices, dtype=bool)
        if self._lanes is not None and self._ob is not None and self._lanes.alive[0] and not self._over:
            out[: self._ctx.D] = self._ob.mask[0]
        return out

    # -- helpers ------------------------------------------------------------------------------------------------
    def shards(self) -> list[Shard]:
        """The (partial) plan so far, table-wise."""
        assert self._lanes is not None and self._ctx is not None
        d = self._lanes.device_of[0]
        return [Shard(table=t.name, device=int(d[i])) for i, t in enumerate(self._ctx.instance.tables) if d[i] >= 0]

    def _context(self, k: int) -> Context:
        if k not in self._contexts:
            self._contexts[k] = Context(self.instances[k], self.cost_model.bind(self.instances[k]))
        return self._contexts[k]

    def _obs(self, final: bool = False) -> dict[str, np.ndarray]:
        assert self._ctx is not None and self._ob is not None
        D = self._ctx.D
        devices = np.zeros((self.max_devices, FD), dtype=np.float32)
        device_mask = np.zeros(self.max_devices, dtype=np.int8)
        device_mask[:D] = 1
        action_mask = np.zeros(self.max_devices, dtype=np.int8)
        if final or not self._lanes.alive[0]:
            table = np.zeros(FT, dtype=np.float32)  # no next table
        else:
            table = np.clip(self._ob.tab, -OBS_BOUND, OBS_BOUND).astype(np.float32)
            devices[:D] = np.clip(self._ob.dev[0], -OBS_BOUND, OBS_BOUND)
            action_mask[:D] = self._ob.mask[0]
        return {"table": table, "devices": devices, "device_mask": device_mask, "action_mask": action_mask}


def _instances(spec: Instance | Sequence[Instance] | str | Path | None) -> list[Instance]:
    from shardopt.core.ir import load_instance

    if spec is None:
        return [load_instance(DEFAULT_INSTANCE)]
    if isinstance(spec, Instance):
        return [spec]
    if isinstance(spec, (str, Path)):
        p = Path(spec)
        if p.is_dir():
            files = sorted(f for f in p.glob("*.json") if f.name != "suite.json")
            if not files:
                raise ValueError(f"{p}: no instances")
            return [load_instance(f) for f in files]
        return [load_instance(p)]
    out = list(spec)
    if not out:
        raise ValueError("instances: none given")
    return out


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="solvers.rl.env:PlacementEnv")
