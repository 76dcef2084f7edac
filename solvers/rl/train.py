"""Training the RL placement policies (`shardopt rl train`): the loop DreamShard and AutoShard share, resumable.

It lives apart from `solvers.rl.common` because it is the one place that needs both policies (`solvers.rl.dreamshard`
and `solvers.rl.autoshard` give the network and the update, and both import solvers.rl.common): keeping it there made a
circle. torch is imported here only inside the functions, so loading this module stays cheap.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.base import CostModel
from shardopt.core.ir import Instance
from solvers.rl import autoshard, dreamshard
from solvers.rl.common import (
    CHECKPOINT_KIND,
    DEVICE_FEATURES,
    FEATURE_VERSION,
    TABLE_FEATURES,
    Context,
    ProgressFn,
    RLTrainError,
    TrainSettings,
    costnet_path,
    export_arrays,
    load_checkpoint,
    save_policy_npz,
)

ALGORITHMS = {"dreamshard": dreamshard, "autoshard": autoshard}


def load_suite(path: str | Path, shapes: list[tuple[int, int]] | None = None) -> list[tuple[str, Instance]]:
    """(file name, instance) of every instance file in a suite directory (suite.json aside), optionally only
    those of the given (tables, devices) shapes."""
    from shardopt.core.ir import load_instance

    d = Path(path)
    if not d.is_dir():
        raise RLTrainError(f"{d}: not a directory of instances")
    files = sorted(p for p in d.glob("*.json") if p.name != "suite.json")
    out = [(f.name, load_instance(f)) for f in files]
    if shapes:
        out = [(n, i) for n, i in out if (len(i.tables), i.topology.num_devices) in shapes]
    if not out:
        raise RLTrainError(f"{d}: no instances" + (f" of shape {', '.join(f'{t}x{dv}' for t, dv in shapes)}" if shapes else ""))
    return out


def _rng_state(rng: np.random.Generator) -> dict[str, Any]:
    st = rng.bit_generator.state
    return {"bit_generator": st["bit_generator"], "state": str(st["state"]["state"]), "inc": str(st["state"]["inc"]),
            "has_uint32": int(st["has_uint32"]), "uinteger": int(st["uinteger"])}


def _rng_from(d: dict[str, Any]) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = {"bit_generator": d["bit_generator"], "state": {"state": int(d["state"]), "inc": int(d["inc"])},
                               "has_uint32": int(d["has_uint32"]), "uinteger": int(d["uinteger"])}
    return rng


def _is_neural(model: CostModel) -> bool:
    from costmodels.neural import NeuralCostModel

    return isinstance(model, NeuralCostModel)


class _Training:
    """One training run's state (network, optimiser, RNGs, counters, the fine-tuned cost network), so that a
    checkpoint written at any moment holds all of it and a resumed run continues exactly where it stopped."""

    def __init__(self, instances: list[tuple[str, Instance]], cost_model: CostModel, settings: TrainSettings,
                 out: Path, meta: dict[str, Any] | None):
        import torch

        if settings.algo not in ALGORITHMS:
            raise RLTrainError(f"algo: {settings.algo!r} is not one of {', '.join(ALGORITHMS)}")
        if settings.rollouts < 2:
            raise RLTrainError(f"rollouts: {settings.rollouts} must be >= 2 (the rollouts of an update are each other's baseline)")
        self.instances, self.cost_model, self.settings, self.out = instances, cost_model, settings, out
        self.mod = ALGORITHMS[settings.algo]
        torch.set_num_threads(max(1, settings.threads))
        torch.manual_seed(settings.seed)  # the initial weights (a resumed run overwrites them)
        self._new_net()
        self.episodes, self.updates, self.history = 0, 0, []
        self.elapsed_before = 0.0
        self.costnet = None  # fine-tuned neural cost model (dreamshard + neural): NeuralWeights
        self.rng = np.random.default_rng(settings.seed)
        self.contexts: dict[int, Context] = {}
        self.meta = meta or {}
        self.record: dict[str, Any] = {}
        self.judge = None
        self.started = time.perf_counter()

    def _new_net(self) -> None:
        import torch

        self.net = self.mod.make_net(self.settings.hidden)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=self.settings.learning_rate)

    def resume(self) -> None:
        """Load the checkpoint at `out`: weights, optimiser, counters, both RNG states, the cost network."""
        import torch

        ckpt = load_checkpoint(self.out)
        if ckpt["algo"] != self.settings.algo:
            raise RLTrainError(f"{self.out}: a {ckpt['algo']} checkpoint; --algo is {self.settings.algo}")
        if ckpt["hidden"] != self.settings.hidden:
            self.settings.hidden = int(ckpt["hidden"])
            self._new_net()
        self.net.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["optimizer"])
        self.episodes, self.updates = int(ckpt["episodes"]), int(ckpt["updates"])
        self.history = list(ckpt.get("history", []))
        self.elapsed_before = float(ckpt.get("train_seconds", 0.0))
        self.rng = _rng_from(ckpt["rng"])
        torch.set_rng_state(ckpt["torch_rng"])
        if ckpt.get("costnet"):
            self.costnet = dreamshard.costnet_from_checkpoint(ckpt)

    def start_cost_fine_tuning(self) -> None:
        """DreamShard with a neural cost model fine-tunes that model on the plans it judges (the paper's loop)."""
        s = self.settings
        fine_tune = s.algo == "dreamshard" and s.cost_updates and _is_neural(self.cost_model)
        if self.costnet is not None and fine_tune:
            self.cost_model = dreamshard.neural_from_weights(self.costnet, self.cost_model)
        self.judge = dreamshard.JudgedPlans(self.cost_model) if fine_tune else None
        self.record = {
            "suite": self.meta.get("suite"),
            "instances": [n for n, _ in self.instances],
            "cost_model": self.cost_model.describe(),
            **{k: v for k, v in self.meta.items() if k != "suite"},
        }

    def context(self, i: int) -> Context:
        if i not in self.contexts:
            inst = self.instances[i][1]
            self.contexts[i] = Context(inst, self.cost_model.bind(inst))
        return self.contexts[i]

    def step(self) -> None:
        """One update: a batch of rollouts on one random instance, the policy update, and every
        `cost_update_every` updates a round of cost-network fine-tuning."""
        s = self.settings
        ctx = self.context(int(self.rng.integers(len(self.instances))))
        policy = self.mod.numpy_policy(self.net, s.hidden)
        stats = self.mod.update(self.net, self.opt, ctx, policy, self.rng, s)
        self.episodes += s.rollouts
        self.updates += 1
        self.history.append(round(float(stats["mean_cost_scales"]), 5))
        if self.judge is not None:
            self.judge.add(ctx, stats["best_device_of"])
            if self.updates % s.cost_update_every == 0:
                self.costnet = self.judge.fine_tune(self.rng)
                self.cost_model = dreamshard.neural_from_weights(self.costnet, self.cost_model)
                self.judge.model = self.cost_model
                self.contexts.clear()

    def train_seconds(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    def policy_meta(self) -> dict[str, Any]:
        s = self.settings
        return {
            "algo": s.algo,
            "feature_version": FEATURE_VERSION,
            "table_features": list(TABLE_FEATURES),
            "device_features": list(DEVICE_FEATURES),
            "hidden": s.hidden,
            "episodes": self.episodes,
            "updates": self.updates,
            "seed": s.seed,
            "date": datetime.date.today().isoformat(),
            "cost_network_fine_tuned": self.costnet is not None,
            **self.record,
        }

    def save(self) -> None:
        """The checkpoint (written atomically), its numpy inference export, and the fine-tuned cost network."""
        import torch

        state = {
            "kind": CHECKPOINT_KIND,
            "algo": self.settings.algo,
            "hidden": self.settings.hidden,
            "model": self.net.state_dict(),
            "optimizer": self.opt.state_dict(),
            "episodes": self.episodes,
            "updates": self.updates,
            "rng": _rng_state(self.rng),
            "torch_rng": torch.get_rng_state(),
            "history": self.history,
            "train_seconds": self.train_seconds(),
            "settings": {k: v for k, v in self.settings.__dict__.items()},
            "meta": self.policy_meta(),
        }
        if self.costnet is not None:
            state.update(dreamshard.costnet_to_checkpoint(self.costnet))
        out = self.out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        torch.save(state, tmp)
        tmp.replace(out)
        save_policy_npz(out.with_suffix(".npz"), export_arrays(self.settings.algo, self.net.state_dict()), self.policy_meta())
        if self.costnet is not None:  # the fine-tuned cost network, usable as --cost-model PATH
            self.costnet.save(costnet_path(out))

    def summary(self) -> dict[str, Any]:
        history = self.history
        tail = history[-max(1, len(history) // 10):]
        return {
            "out": str(self.out),
            "export": str(self.out.with_suffix(".npz")),
            "algo": self.settings.algo,
            "episodes": self.episodes,
            "updates": self.updates,
            "train_seconds": round(self.train_seconds(), 2),
            "mean_cost_scales_first": float(np.mean(history[: max(1, len(history) // 10)])) if history else None,
            "mean_cost_scales_last": float(np.mean(tail)) if history else None,
            "cost_model": self.cost_model.describe(),
            "cost_network_fine_tuned": self.costnet is not None,
            "cost_network": str(costnet_path(self.out)) if self.costnet is not None else None,
            "cost_network_rounds": self.judge.history if self.judge is not None else None,
        }


def train_policy(
    instances: list[tuple[str, Instance]],
    cost_model: CostModel,
    settings: TrainSettings,
    out: str | Path,
    *,
    resume: bool = False,
    progress: ProgressFn | None = None,
    meta: dict[str, Any] | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Train (or, with `resume`, continue training) a policy; writes the checkpoint `out` (.pt: weights, optimizer,
    episode counter, RNG states) and its inference export (`out` with suffix .npz). Returns a summary. `deadline`
    (time.monotonic()) ends the training early, after the update in progress (`calibrate --with-policies`: a time box);
    the summary's `stopped_at_deadline` says so."""
    run = _Training(instances, cost_model, settings, Path(out), meta)
    if resume and run.out.exists():
        run.resume()
    run.start_cost_fine_tuning()
    total = settings.episodes
    if progress is not None:
        progress(min(run.episodes, total), total)
    last_save = time.perf_counter()
    stopped = False
    while run.episodes < total:
        if deadline is not None and time.monotonic() >= deadline:
            stopped = True
            break
        run.step()
        if progress is not None:
            progress(min(run.episodes, total), total)
        if time.perf_counter() - last_save > settings.save_every_s:
            run.save()
            last_save = time.perf_counter()
    run.save()
    return {**run.summary(), "stopped_at_deadline": stopped}


@dataclass
class PolicyOutcome:
    """One policy of `train_policies_for`: the file kept (None: not kept), what happened, how long it took."""

    algo: str
    export: Path | None
    detail: str
    seconds: float
    cut: bool = False  # its time box ended the training


def train_policies_for(algos: Sequence[str], targets: Sequence[Instance], model: CostModel, out_dir: Path,
                       deadline: float, seed: int, episodes: int = 8000,
                       progress: Callable[[str, int, int], None] | None = None) -> list[PolicyOutcome]:
    """Train each RL policy (`algos`) on `model` for `targets` (`shardopt calibrate --with-policies`), at most
    `episodes` rollouts each, in equal shares of the time left before `deadline` (time.monotonic()), and keep it where
    its plans for the targets cost less under `model` than the shipped policy's (geometric mean of the greedy
    rollouts' costs). Resumable: a policy trained by an earlier run of the same calibration is kept (`<algo>.done`).

    Why: DreamShard and AutoShard learn the estimated MDP of the cost model they train on; the shipped policies
    learned the analytic model's, and place tables for costs this machine does not have."""
    import json

    from solvers.catalog import solver_class
    from solvers.rl.common import CHECKPOINT_DIR, evaluate_policy, load_policy
    from solvers.rl.common import TrainSettings as PolicySettings

    out_dir.mkdir(parents=True, exist_ok=True)
    named = [(f"target-{i:03d}", inst) for i, inst in enumerate(targets)]
    out: list[PolicyOutcome] = []
    for k, algo in enumerate(algos):
        start = time.monotonic()
        ckpt, stamp = out_dir / f"{algo}.pt", out_dir / f"{algo}.done"
        done = json.loads(stamp.read_text()) if stamp.is_file() else None
        if done is None:
            left = deadline - time.monotonic()
            if left <= 1.0:
                out.append(PolicyOutcome(algo, None, "no time left in the budget", 0.0, cut=True))
                continue
            end = time.monotonic() + left / (len(algos) - k)
            tick = (lambda d, t, _a=algo: progress(f"policy {_a}", d, t)) if progress else None
            summary = train_policy(named, model, PolicySettings(algo=algo, episodes=episodes, seed=seed, cost_updates=False),
                                   ckpt, resume=ckpt.exists(), progress=tick, deadline=end,
                                   meta={"suite": "calibrate --with-policies targets"})
            if not summary["updates"]:
                out.append(PolicyOutcome(algo, None, "no update within its time box", time.monotonic() - start, cut=True))
                continue
            solver_cls = solver_class(algo)
            trained = load_policy(ckpt.with_suffix(".npz"), solver_cls.policy_cls, algo)
            shipped = load_policy(CHECKPOINT_DIR / solver_cls.default_checkpoint, solver_cls.policy_cls, algo)
            mine = evaluate_policy(trained, list(targets), model, seed=seed)
            theirs = evaluate_policy(shipped, list(targets), model, seed=seed)
            ok = np.isfinite(mine) & np.isfinite(theirs)
            ratio = float(np.exp(np.mean(np.log(mine[ok] / theirs[ok])))) if ok.any() else float("inf")
            placed = bool(np.isfinite(mine).sum() >= np.isfinite(theirs).sum())
            done = {"episodes": summary["episodes"], "ratio": ratio, "keep": bool(placed and ratio <= 1.0),
                    "cut": bool(summary["stopped_at_deadline"])}
            stamp.write_text(json.dumps(done))
        verdict = "kept" if done["keep"] else "not kept (the shipped policy placed these targets as well or better)"
        detail = (f"{done['episodes']} episodes; plan cost {100 * (done['ratio'] - 1):+.1f} % against the shipped policy "
                  f"(geometric mean over {len(targets)} targets, under the calibrated model): {verdict}")
        out.append(PolicyOutcome(algo, ckpt.with_suffix(".npz") if done["keep"] else None, detail,
                                 time.monotonic() - start, cut=done["cut"]))
    return out
