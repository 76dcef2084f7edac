"""DreamShard (NeurIPS 2022): a device-scoring policy with weights shared across devices, trained by REINFORCE on the
*estimated* MDP (a cost model stands in for the GPU), alternating with cost-network updates on judged plans.

Policy: for the next table (tables in DreamShard's order: predicted single-table cost, descending), every device d
is scored by one MLP on [table features, device-d features] (solvers.rl.common.TABLE_FEATURES / DEVICE_FEATURES:
the device's predicted compute and comm, the device's and the plan's predicted cost if the table went there, its
memory); a softmax over the devices with room (and, with the safe mask, a completion) gives the action. The weights
do not depend on the device count, so one policy serves 4, 8 or 128 devices.

Training (`shardopt rl train --algo dreamshard`): each update draws one training instance, runs K rollouts of the
current policy in lock-step on the cost model, and takes a REINFORCE step with the K rollouts' mean cost as the
baseline (advantage = (mean - cost) / std, costs in units of the instance's scale so instances of different sizes
weigh alike) and an entropy bonus. With a neural cost model the cost network is fine-tuned every
`cost_update_every` updates on the device costs of the policy's recent best plans as judged by the analytic model
(here the stand-in for the hardware the published system measured on); with the analytic model there is nothing to
fine-tune (it is the judge itself) and the cost network stays fixed. docs/rl-solvers.md has the details.

Inference (`dreamshard` solver): the greedy (argmax) rollout and `samples` sampled rollouts (seeded), numpy only;
the best plan by the cost model wins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from costmodels.base import CostModel
from solvers.rl.common import (
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
    rollout,
)


class DreamShardPolicy(NumpyPolicy):
    algo = "dreamshard"

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]):
        super().__init__(arrays, meta)
        self.layers = layers_from(arrays, "mlp")
        self.w_tab, self.w_dev = np.ascontiguousarray(self.layers[0][0][:FT]), np.ascontiguousarray(self.layers[0][0][FT:])

    def step(self, state: Any, ob: Observation) -> tuple[np.ndarray, Any, Any]:
        # the first layer split: the table's part is computed once, not once per device
        h = ob.dev @ self.w_dev + (ob.tab @ self.w_tab + self.layers[0][1])
        np.maximum(h, 0.0, out=h)
        return mlp_np(h, self.layers[1:])[..., 0], None, None


def make_net(hidden: int = 64) -> Any:
    import torch
    from torch import nn

    class DreamShardNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(FT + FD, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        def forward(self, tab: Any, dev: Any) -> Any:
            """tab [..., FT], dev [..., D, FD] -> logits [..., D]."""
            x = torch.cat([tab.unsqueeze(-2).expand(*dev.shape[:-1], tab.shape[-1]), dev], dim=-1)
            return self.mlp(x).squeeze(-1)

    return DreamShardNet()


def numpy_policy(net: Any, hidden: int) -> DreamShardPolicy:
    return DreamShardPolicy(export_arrays("dreamshard", net.state_dict()), {"algo": "dreamshard", "hidden": hidden})


def update(net: Any, opt: Any, ctx: Context, policy: NumpyPolicy, rng: np.random.Generator, settings: TrainSettings) -> dict[str, Any]:
    """One REINFORCE step on K lock-step rollouts of one instance (mean-cost baseline, entropy bonus)."""
    import torch

    ro = rollout(ctx, policy, settings.rollouts, rng, record=True)
    costs = lane_costs_in_scales(ctx, ro)  # [K]
    adv = (costs.mean() - costs) / (costs.std() + 1e-3)
    rec = ro.record
    tab = torch.as_tensor(rec["tab"], dtype=torch.float32)  # [T, FT]
    dev = torch.as_tensor(rec["dev"])  # [T, K, D, FD]
    mask = torch.as_tensor(rec["mask"])  # [T, K, D]
    acts = torch.as_tensor(rec["actions"], dtype=torch.int64)  # [T, K]
    alive = torch.as_tensor(rec["alive"], dtype=torch.float32)  # [T, K]
    T, K = acts.shape
    logits = net(tab[:, None, :].expand(T, K, FT), dev).masked_fill(~mask, -1e9)
    logp = torch.log_softmax(logits, dim=-1)
    lp_a = logp.gather(-1, acts[..., None])[..., 0]
    ent = -(logp.exp() * logp).sum(-1)
    n = alive.sum().clamp(min=1.0)
    a = torch.as_tensor(adv, dtype=torch.float32)[None, :]
    loss = -(a * lp_a * alive).sum() / n - settings.entropy * (ent * alive).sum() / n
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    ok = np.flatnonzero(~ro.failed)
    best = ro.device_of[int(ok[np.argmin(ro.costs[ok])])] if len(ok) else None
    return {"mean_cost_scales": float(costs.mean()), "best_device_of": best, "failed": int(ro.failed.sum())}


# ---------------------------------------------------------------------------------------------------------------
# the alternating cost-network updates (neural cost model only)


class JudgedPlans:
    """Device samples of the policy's plans, judged by the analytic model (the stand-in for the hardware), and the
    fine-tuning of the neural compute network (encoder + head) on them; the comm network stays as trained."""

    def __init__(self, model: CostModel, capacity: int = 4096, steps: int = 40, batch: int = 64, learning_rate: float = 3e-4):
        from costmodels.analytic import AnalyticCostModel

        self.model = model
        self.judge = AnalyticCostModel()
        self.capacity, self.steps, self.batch, self.learning_rate = capacity, steps, batch, learning_rate
        self.samples: list[tuple[np.ndarray, np.ndarray]] = []
        self._cache: dict[int, tuple[Any, np.ndarray, Any]] = {}
        self.history: list[dict[str, float]] = []

    def add(self, ctx: Context, device_of: np.ndarray | None) -> None:
        from costmodels.features import instance_shard_features

        if device_of is None:
            return
        inst = ctx.instance
        hit = self._cache.get(id(inst))
        if hit is None or hit[0] is not inst:
            n = len(inst.tables)
            hist = self.judge.bind(inst).histograms
            feats = instance_shard_features(inst, np.arange(n), ctx.widths, np.ones(n), np.ones(n), hist)
            hit = (inst, feats, self.judge.bind(inst))
            self._cache[id(inst)] = hit
        _, feats, ja = hit
        for d in range(ctx.D):
            tables = np.flatnonzero(device_of == d)
            if len(tables) == 0:
                continue
            y = np.asarray(ja.compute_costs(ja.table_states[tables].sum(axis=0), d), dtype=np.float64)
            if np.all(y > 0):
                self.samples.append((feats[tables], y))
        if len(self.samples) > self.capacity:
            del self.samples[: len(self.samples) - self.capacity]

    def fine_tune(self, rng: np.random.Generator) -> Any:
        """A few Adam steps of log-MSE on the buffer, from the current weights; returns the new NeuralWeights."""
        import torch
        from torch import nn

        from costmodels.neural import NeuralWeights

        w = self.model.weights
        arrays = w.arrays
        enc_l, head_l = w.layers("enc"), w.layers("head")

        def seq(layers: list[tuple[np.ndarray, np.ndarray]], last_relu: bool) -> nn.Sequential:
            mods: list[nn.Module] = []
            for i, (W, b) in enumerate(layers):
                lin = nn.Linear(W.shape[0], W.shape[1])
                with torch.no_grad():
                    lin.weight.copy_(torch.as_tensor(W.T, dtype=torch.float32))
                    lin.bias.copy_(torch.as_tensor(b, dtype=torch.float32))
                mods.append(lin)
                if i < len(layers) - 1 or last_relu:
                    mods.append(nn.ReLU())
            return nn.Sequential(*mods)

        enc, head = seq(enc_l, True), seq(head_l, False)
        n = len(self.samples)
        tmax = max(len(x) for x, _ in self.samples)
        F = self.samples[0][0].shape[1]
        X = np.zeros((n, tmax, F))
        M = np.zeros((n, tmax))
        Y = np.zeros((n, 2))
        for i, (x, y) in enumerate(self.samples):
            X[i, : len(x)] = x
            M[i, : len(x)] = 1.0
            Y[i] = y
        z = (X - arrays["feat_mean"]) / arrays["feat_std"]
        if "feat_lo" in arrays:
            z = np.clip(z, arrays["feat_lo"], arrays["feat_hi"])
        xt = torch.as_tensor(z, dtype=torch.float32)
        mt = torch.as_tensor(M, dtype=torch.float32)
        yt = torch.log(torch.as_tensor(Y, dtype=torch.float32))

        def pred(idx: Any) -> Any:
            e = enc(xt[idx]) * mt[idx][..., None]
            p = torch.cat([e.sum(dim=1), mt[idx].sum(dim=1, keepdim=True)], dim=1)
            return torch.log(torch.nn.functional.softplus(head(p)) + 1e-9)

        allidx = torch.arange(n)
        with torch.no_grad():
            before = float(((pred(allidx) - yt) ** 2).mean())
        params = list(enc.parameters()) + list(head.parameters())
        opt = torch.optim.Adam(params, lr=self.learning_rate)
        for _ in range(self.steps):
            idx = torch.as_tensor(rng.integers(0, n, size=min(self.batch, n)))
            opt.zero_grad()
            loss = ((pred(idx) - yt[idx]) ** 2).mean()
            loss.backward()
            opt.step()
        with torch.no_grad():
            after = float(((pred(allidx) - yt) ** 2).mean())
        self.history.append({"samples": n, "log_mse_before": round(before, 5), "log_mse_after": round(after, 5)})
        new = dict(arrays)
        for prefix, s in (("enc", enc), ("head", head)):
            k = 0
            for layer in s:
                if isinstance(layer, nn.Linear):
                    new[f"{prefix}.{k}.w"] = layer.weight.detach().numpy().T.astype(np.float64)
                    new[f"{prefix}.{k}.b"] = layer.bias.detach().numpy().astype(np.float64)
                    k += 1
        meta = dict(w.meta)
        meta["rl_fine_tune"] = {"rounds": len(self.history), "last": self.history[-1], "judge": "analytic (topology profile)"}
        return NeuralWeights(new, meta)


def neural_from_weights(weights: Any, base: CostModel) -> CostModel:
    """A neural cost model with in-memory weights (the fine-tuned network), named after `base`."""
    from costmodels.neural import NeuralCostModel

    class _FineTuned(NeuralCostModel):
        def __init__(self) -> None:  # no file: the weights are in memory
            self.path = getattr(base, "path", None)
            self.weights = weights
            self.name = getattr(base, "name", "neural").removesuffix("+rl-fine-tuned") + "+rl-fine-tuned"

    return _FineTuned()


def costnet_to_checkpoint(weights: Any) -> dict[str, Any]:
    import json

    import torch

    return {"costnet": {k: torch.as_tensor(v) for k, v in weights.arrays.items()}, "costnet_meta": json.dumps(weights.meta)}


def costnet_from_checkpoint(ckpt: dict[str, Any]) -> Any:
    import json

    from costmodels.neural import NeuralWeights

    return NeuralWeights({k: v.numpy().astype(np.float64) for k, v in ckpt["costnet"].items()}, json.loads(ckpt["costnet_meta"]))


# ---------------------------------------------------------------------------------------------------------------
# the solver


class DreamShardSolver(PolicySolver):
    name = "dreamshard"
    algo = "dreamshard"
    default_checkpoint = "dreamshard.npz"
    policy_cls = DreamShardPolicy
