"""AutoShard (KDD 2022): an LSTM actor-critic placing the tables one by one, with memory masking.

The LSTM reads the table sequence (DreamShard's order, predicted single-table cost descending, so that both RL
solvers see the same sequence): its input at each step is the table's features and a device-count-free summary of
the cluster (mean and max over devices of the device features, solvers.rl.common.DEVICE_FEATURES). The actor
scores each device with an MLP on [LSTM state, table features, device features] (the published actor had one
output per device, which ties a policy to one device count; a per-device scorer keeps the LSTM context and works for
4, 8 or 128 devices); a softmax over the valid devices (room, and with the safe mask a completion) gives the action.
The critic is an MLP on [LSTM state, table features, cluster summary].

Reward: the *negative plan cost* (max over devices of predicted compute + comm), paid per step as the change of the
partial plan's cost (so the return of an episode is minus its final plan cost, in units of the instance's scale),
not the published balance ratio (which rewards uniformly slow plans; docs/rl-solvers.md says why). Training is A2C:
K lock-step rollouts of one instance per update, generalised advantage estimation (gamma 1, lambda 0.95), an
entropy bonus, the critic fitted to the lambda-returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from solvers.rl.common import (
    FAIL_COST,
    FD,
    FT,
    Context,
    NumpyPolicy,
    Observation,
    PolicySolver,
    TrainSettings,
    export_arrays,
    lane_costs_in_scales,
    layers_from,
    mlp_np,
    pooled,
    rollout,
)

FX = FT + 2 * FD  # LSTM input: table features + mean and max of the device features


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class AutoShardPolicy(NumpyPolicy):
    algo = "autoshard"

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]):
        super().__init__(arrays, meta)
        self.w_ih = np.ascontiguousarray(arrays["lstm.weight_ih_l0"].T)  # [FX, 4H], gates i, f, g, o (torch's order)
        self.w_hh = np.ascontiguousarray(arrays["lstm.weight_hh_l0"].T)
        self.b = arrays["lstm.bias_ih_l0"] + arrays["lstm.bias_hh_l0"]
        self.H = self.w_hh.shape[0]
        self.actor = layers_from(arrays, "actor")
        W0 = self.actor[0][0]
        self.a_h, self.a_tab, self.a_dev = (np.ascontiguousarray(w) for w in (W0[: self.H], W0[self.H : self.H + FT], W0[self.H + FT :]))

    def start(self, k: int) -> Any:
        return np.zeros((k, self.H)), np.zeros((k, self.H))

    def step(self, state: Any, ob: Observation) -> tuple[np.ndarray, Any, Any]:
        h, c = state
        k = h.shape[0]
        x = np.concatenate([np.broadcast_to(ob.tab, (k, FT)), pooled(ob.dev)], axis=1)
        g = x @ self.w_ih + h @ self.w_hh + self.b
        H = self.H
        i, f, gg, o = _sigmoid(g[:, :H]), _sigmoid(g[:, H : 2 * H]), np.tanh(g[:, 2 * H : 3 * H]), _sigmoid(g[:, 3 * H :])
        c = f * c + i * gg
        h = o * np.tanh(c)
        z = ob.dev @ self.a_dev + (h @ self.a_h + ob.tab @ self.a_tab + self.actor[0][1])[:, None, :]
        np.maximum(z, 0.0, out=z)
        return mlp_np(z, self.actor[1:])[..., 0], (h, c), None


def make_net(hidden: int = 64) -> Any:
    import torch
    from torch import nn

    class AutoShardNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(FX, hidden)
            self.actor = nn.Sequential(nn.Linear(hidden + FT + FD, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
            self.critic = nn.Sequential(nn.Linear(hidden + FX, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        def forward(self, tab: Any, dev: Any) -> tuple[Any, Any]:
            """tab [T, K, FT], dev [T, K, D, FD] -> logits [T, K, D], values [T, K]."""
            x = torch.cat([tab, dev.mean(dim=-2), dev.amax(dim=-2)], dim=-1)
            h, _ = self.lstm(x)
            D = dev.shape[-2]
            a_in = torch.cat([h.unsqueeze(-2).expand(*h.shape[:-1], D, h.shape[-1]), tab.unsqueeze(-2).expand(*tab.shape[:-1], D, FT), dev], dim=-1)
            logits = self.actor(a_in).squeeze(-1)
            values = self.critic(torch.cat([h, x], dim=-1)).squeeze(-1)
            return logits, values

    return AutoShardNet()


def numpy_policy(net: Any, hidden: int) -> AutoShardPolicy:
    return AutoShardPolicy(export_arrays("autoshard", net.state_dict()), {"algo": "autoshard", "hidden": hidden})


def step_rewards(ctx: Context, rec: dict[str, Any], failed: np.ndarray) -> np.ndarray:
    """[T, K] per-step rewards: minus the change of the partial plan's cost (scales); a lane that fails pays
    FAIL_COST on its last step. Steps of dead lanes get 0."""
    pm = rec["plan_max"]  # [T, K] after each step
    prev = np.vstack([rec["start_max"][None, :], pm[:-1]])
    alive = rec["alive"]
    r = np.where(alive, -(pm - prev) / ctx.scale, 0.0)
    for k in np.flatnonzero(failed):
        steps = np.flatnonzero(alive[:, k])
        if len(steps):
            r[steps[-1], k] -= FAIL_COST
    return r


def update(net: Any, opt: Any, ctx: Context, policy: NumpyPolicy, rng: np.random.Generator, settings: TrainSettings) -> dict[str, Any]:
    """One A2C step on K lock-step rollouts of one instance (GAE, entropy bonus, critic on lambda-returns)."""
    import torch

    ro = rollout(ctx, policy, settings.rollouts, rng, record=True)
    rec = ro.record
    costs = lane_costs_in_scales(ctx, ro)
    r = step_rewards(ctx, rec, ro.failed)
    tab = torch.as_tensor(rec["tab"], dtype=torch.float32)
    dev = torch.as_tensor(rec["dev"])
    mask = torch.as_tensor(rec["mask"])
    acts = torch.as_tensor(rec["actions"], dtype=torch.int64)
    alive_np = rec["alive"].astype(np.float64)
    alive = torch.as_tensor(alive_np, dtype=torch.float32)
    T, K = acts.shape
    logits, values = net(tab[:, None, :].expand(T, K, FT), dev)
    v = values.detach().numpy().astype(np.float64) * alive_np
    adv = np.zeros((T, K))
    last = np.zeros(K)
    for t in range(T - 1, -1, -1):
        nxt = v[t + 1] if t + 1 < T else np.zeros(K)
        delta = r[t] + nxt - v[t]
        last = np.where(alive_np[t] > 0, delta + settings.gae_lambda * last, 0.0)
        adv[t] = last
    target = torch.as_tensor(adv + v, dtype=torch.float32)
    sel = alive_np > 0
    a_norm = (adv - adv[sel].mean()) / (adv[sel].std() + 1e-6)
    logp = torch.log_softmax(logits.masked_fill(~mask, -1e9), dim=-1)
    lp_a = logp.gather(-1, acts[..., None])[..., 0]
    ent = -(logp.exp() * logp).sum(-1)
    n = alive.sum().clamp(min=1.0)
    pg = -(torch.as_tensor(a_norm, dtype=torch.float32) * lp_a * alive).sum() / n
    vf = (((values - target) ** 2) * alive).sum() / n
    loss = pg + settings.value_coef * vf - settings.entropy * (ent * alive).sum() / n
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    ok = np.flatnonzero(~ro.failed)
    best = ro.device_of[int(ok[np.argmin(ro.costs[ok])])] if len(ok) else None
    return {"mean_cost_scales": float(costs.mean()), "best_device_of": best, "failed": int(ro.failed.sum()), "value_loss": float(vf.detach())}


class AutoShardSolver(PolicySolver):
    name = "autoshard"
    algo = "autoshard"
    default_checkpoint = "autoshard.npz"
    policy_cls = AutoShardPolicy
