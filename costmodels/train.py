"""Training and judging the neural cost model on collected cost data (`shardopt costmodel collect`).

Training (torch, CPU is enough): the compute network (encoder, masked sum, head) on `compute` samples and the comm
network on every device of every `comm` sample, both on squared log error (relative error, as MAPE judges it; the
compute network's on absolute log error with `loss="absolute"`: the median, which outlying slow timings do not pull),
Adam with a cosine schedule, a seeded 10 % validation split, the best validation epoch kept. The result is saved
as numpy arrays (costmodels.neural.NeuralWeights) so that solving never needs torch.

Judging (numpy, the solve-time path): MAPE, RMSE and Kendall tau per column, on compute samples and on every device
of comm samples.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodels.features import COMM_FEATURES, SHARD_FEATURES, comm_features, shard_features
from costmodels.neural import NeuralWeights, comm_head, encode_shards, head_costs
from shardopt.core.hardware import get_profile
from shardopt.core.ir import Optimizer

ENCODER = (128, 128, 64)
HEAD = (128, 64)
COMM = (64, 64)


LOSSES = ("squared", "absolute")


class TrainError(ValueError):
    """Unusable training data or settings (a user error)."""


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 60
    batch_size: int = 256
    learning_rate: float = 2e-3
    seed: int = 0
    validation: float = 0.1
    threads: int = 2
    # the compute network's loss on log milliseconds: "squared" (the mean) or "absolute" (the median)
    loss: str = "squared"


# ---- data -----------------------------------------------------------------------------------------------------


def compute_arrays(samples: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded shard features [N, Tmax, F], mask [N, Tmax], targets [N, 2] (fwd, bwd ms)."""
    rows = [s for s in samples if s.get("kind") == "compute"]
    if not rows:
        return np.zeros((0, 1, len(SHARD_FEATURES))), np.zeros((0, 1)), np.zeros((0, 2))
    tmax = max(len(s["tables"]) for s in rows)
    x = np.zeros((len(rows), tmax, len(SHARD_FEATURES)))
    mask = np.zeros((len(rows), tmax))
    y = np.zeros((len(rows), 2))
    for i, s in enumerate(rows):
        ts = s["tables"]
        hist = np.array([t["histogram"] for t in ts], dtype=np.float64)
        hist = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1e-12)
        x[i, : len(ts)] = shard_features(
            np.array([t["rows"] for t in ts]),
            np.array([t["dim"] for t in ts]),
            np.array([t["pooling_factor"] for t in ts]),
            hist,
            np.array([2.0 if t.get("dtype") == "fp16" else 4.0 for t in ts]),
            float(s["batch_size"]),
            Optimizer(s["optimizer"]),
        )
        mask[i, : len(ts)] = 1.0
        y[i] = (s["fwd_compute"], s["bwd_compute"])
    return x, mask, y


def comm_arrays(samples: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-device comm features [M, Fc], targets [M, 2], and the sample each device belongs to [M]."""
    xs, ys, owner = [], [], []
    for k, s in enumerate(samples):
        if s.get("kind") != "comm":
            continue
        n, per = s["num_devices"], s["devices_per_host"]
        host = np.arange(n) // per
        same = (host[:, None] == host[None, :]).astype(np.float64)
        profile = get_profile(s["hardware"])
        xs.append(comm_features(np.asarray(s["dim_sums"], dtype=np.float64), same, float(s["batch_size"]), profile.nvlink_bandwidth, profile.network_bandwidth, profile))
        ys.append(np.stack([s["fwd_comm"], s["bwd_comm"]], axis=1))
        owner.append(np.full(n, k))
    if not xs:
        return np.zeros((0, len(COMM_FEATURES))), np.zeros((0, 2)), np.zeros(0, dtype=np.int64)
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(owner)


def _ranges(prefix: str, z: np.ndarray, mask: np.ndarray | None) -> dict[str, np.ndarray]:
    """The normalised features' range in the training data: inference clamps to it rather than extrapolate."""
    flat = z.reshape(-1, z.shape[-1])
    if mask is not None:
        flat = flat[mask.reshape(-1) > 0]
    return {f"{prefix}_lo": flat.min(axis=0), f"{prefix}_hi": flat.max(axis=0)}


def _norm_stats(x: np.ndarray, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    flat = x.reshape(-1, x.shape[-1])
    if mask is not None:
        flat = flat[mask.reshape(-1) > 0]
    mean, std = flat.mean(axis=0), flat.std(axis=0)
    return mean, np.where(std > 1e-9, std, 1.0)


# ---- training -------------------------------------------------------------------------------------------------


def _torch_mlp(sizes: Sequence[int], last_relu: bool):
    import torch.nn as nn

    layers: list[Any] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _export(prefix: str, seq: Any) -> dict[str, np.ndarray]:
    import torch.nn as nn

    out, i = {}, 0
    for layer in seq:
        if isinstance(layer, nn.Linear):
            out[f"{prefix}.{i}.w"] = layer.weight.detach().numpy().T.astype(np.float64)
            out[f"{prefix}.{i}.b"] = layer.bias.detach().numpy().astype(np.float64)
            i += 1
    return out


def _load_layers(seq: Any, prefix: str, base: NeuralWeights) -> None:
    """A base model's `prefix` network copied into `seq` (same architecture, checked): fine-tuning starts from it."""
    import torch
    import torch.nn as nn

    linear = [layer for layer in seq if isinstance(layer, nn.Linear)]
    arrays = base.layers(prefix)
    shapes = [(layer.in_features, layer.out_features) for layer in linear]
    if [w.shape for w, _ in arrays] != shapes:
        raise TrainError(f"base model: its {prefix} network has layers {[w.shape for w, _ in arrays]}, this version trains "
                         f"{shapes}; retrain it, or calibrate without a base")
    with torch.no_grad():
        for (w, b), layer in zip(arrays, linear):
            layer.weight.copy_(torch.as_tensor(w.T, dtype=torch.float32))
            layer.bias.copy_(torch.as_tensor(b, dtype=torch.float32))


def _base_norm(base: NeuralWeights, prefix: str, features: Sequence[str], field: str) -> tuple[np.ndarray, np.ndarray]:
    """The base model's input normalisation (its networks were trained on inputs scaled so), its features checked."""
    if list(base.meta.get(field, [])) != list(features):
        raise TrainError(f"base model: its {field} {base.meta.get(field)} are not this version's {list(features)}; "
                         "retrain it, or calibrate without a base")
    return base.arrays[f"{prefix}_mean"], base.arrays[f"{prefix}_std"]


def _union_ranges(prefix: str, ours: dict[str, np.ndarray], base: NeuralWeights | None) -> dict[str, np.ndarray]:
    """Inference clamps to the training range: a fine-tuned model has seen the base's range and the new data's."""
    if base is None:
        return ours
    return {f"{prefix}_lo": np.minimum(ours[f"{prefix}_lo"], base.arrays[f"{prefix}_lo"]),
            f"{prefix}_hi": np.maximum(ours[f"{prefix}_hi"], base.arrays[f"{prefix}_hi"])}


def _fit(params: list[Any], loss_of: Callable[[np.ndarray], Any], n: int, val_loss: Callable[[], float], settings: TrainSettings, progress: Callable[[str, int, int, float], None] | None, name: str) -> tuple[list[float], float, dict[int, Any]]:
    """Adam + cosine schedule over index batches; keeps the parameters of the best validation epoch."""
    import torch

    opt = torch.optim.Adam(params, lr=settings.learning_rate)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(settings.epochs, 1))
    gen = np.random.default_rng(settings.seed)
    history, best, best_state = [], math.inf, None
    for epoch in range(settings.epochs):
        order = gen.permutation(n)
        for start in range(0, n, settings.batch_size):
            idx = order[start : start + settings.batch_size]
            opt.zero_grad()
            loss = loss_of(idx)
            loss.backward()
            opt.step()
        sched.step()
        v = val_loss()
        history.append(v)
        if v < best:
            best = v
            best_state = {id(p): p.detach().clone() for p in params}
        if progress is not None:
            progress(name, epoch + 1, settings.epochs, v)
    if best_state is not None:
        with torch.no_grad():
            for p in params:
                p.copy_(best_state[id(p)])
    return history, best, {}


def _fit_comm(cx: np.ndarray, cy: np.ndarray, cmean: np.ndarray, cstd: np.ndarray, rng: np.random.Generator,
              settings: TrainSettings, progress: Callable[[str, int, int, float], None] | None,
              base: NeuralWeights | None) -> tuple[Any, list[float], float]:
    """`train`'s communication network: fitted to the log of the comm device rows, in batches 8 times the compute
    network's (its rows are many and small). Returns (network, validation history, best validation loss)."""
    import torch

    cperm = rng.permutation(len(cy))
    cn_val = max(1, int(len(cy) * settings.validation))
    cval, ctr = cperm[:cn_val], cperm[cn_val:]
    cxt = torch.tensor((cx - cmean) / cstd, dtype=torch.float32)
    cyt = torch.log(torch.tensor(cy, dtype=torch.float32))
    comm = _torch_mlp([cx.shape[-1], *COMM, 2], last_relu=False)
    if base is not None:
        _load_layers(comm, "comm", base)

    def cpred(t: Any) -> Any:
        return torch.log(torch.nn.functional.softplus(comm(cxt[t])) + 1e-9)

    def comm_loss(idx: np.ndarray) -> Any:
        t = torch.as_tensor(ctr[idx])
        return ((cpred(t) - cyt[t]) ** 2).mean()

    def comm_val() -> float:
        with torch.no_grad():
            t = torch.as_tensor(cval)
            return float(((cpred(t) - cyt[t]) ** 2).mean())

    comm_settings = TrainSettings(**{**settings.__dict__, "batch_size": settings.batch_size * 8})
    hist_m, best_m, _ = _fit(list(comm.parameters()), comm_loss, len(ctr), comm_val, comm_settings, progress, "comm")
    return comm, hist_m, best_m


def train(samples: Sequence[dict[str, Any]], settings: TrainSettings = TrainSettings(), *, progress: Callable[[str, int, int, float], None] | None = None,
          meta: dict[str, Any] | None = None, base: NeuralWeights | None = None) -> NeuralWeights:
    """A neural cost model fitted to `samples`. With `base`, its networks start from the base model's weights and keep
    its input normalisation (fine-tuning from a model of a similar machine). Measured on GPU lease 6's 50-177 samples
    it did not beat a fit from nothing (docs/results/gpu.md, "H200, 2026-11-28 (lease 6): the pick's model-free hedge and a longer calibration"), so `calibrate` does not use it;
    benchmarks/bench_finetune.py asks the question again of new data."""
    import torch

    if settings.epochs < 1:
        raise TrainError(f"epochs: {settings.epochs} must be >= 1")
    if settings.loss not in LOSSES:
        raise TrainError(f"loss: {settings.loss!r} is not one of {', '.join(LOSSES)}")
    torch.manual_seed(settings.seed)
    torch.set_num_threads(settings.threads)
    x, mask, y = compute_arrays(samples)
    cx, cy, _ = comm_arrays(samples)
    if len(y) < 10:
        raise TrainError(f"{len(y)} compute samples: training needs at least 10")
    if len(cy) < 10:
        raise TrainError(f"{len(cy)} comm device rows: training needs comm samples (collect with --comm-fraction > 0)")
    if np.any(y <= 0) or np.any(cy <= 0):
        raise TrainError("targets must be positive milliseconds")
    hardware = sorted({str(s.get("hardware")) for s in samples if s.get("kind") == "compute"})
    if base is None:
        mean, std = _norm_stats(x, mask)
        cmean, cstd = _norm_stats(cx)
    else:
        mean, std = _base_norm(base, "feat", SHARD_FEATURES, "shard_features")
        cmean, cstd = _base_norm(base, "comm", COMM_FEATURES, "comm_features")

    rng = np.random.default_rng(settings.seed)
    perm = rng.permutation(len(y))
    n_val = max(1, int(len(y) * settings.validation))
    val, tr = perm[:n_val], perm[n_val:]
    xt = torch.tensor((x - mean) / std, dtype=torch.float32) * torch.tensor(mask[..., None], dtype=torch.float32)
    mt = torch.tensor(mask, dtype=torch.float32)
    yt = torch.log(torch.tensor(y, dtype=torch.float32))
    enc = _torch_mlp([x.shape[-1], *ENCODER], last_relu=True)
    head = _torch_mlp([ENCODER[-1] + 1, *HEAD, 2], last_relu=False)
    if base is not None:
        _load_layers(enc, "enc", base)
        _load_layers(head, "head", base)

    def predict(idx: Any) -> Any:
        z = enc(xt[idx]) * mt[idx][..., None]
        pooled = torch.cat([z.sum(dim=1), mt[idx].sum(dim=1, keepdim=True)], dim=1)
        return torch.log(torch.nn.functional.softplus(head(pooled)) + 1e-9)

    def residual_loss(r: Any) -> Any:
        return r.abs().mean() if settings.loss == "absolute" else (r ** 2).mean()

    def compute_loss(idx: np.ndarray) -> Any:
        t = torch.as_tensor(tr[idx])
        return residual_loss(predict(t) - yt[t])

    def compute_val() -> float:
        with torch.no_grad():
            t = torch.as_tensor(val)
            return float(residual_loss(predict(t) - yt[t]))

    hist_c, best_c, _ = _fit(list(enc.parameters()) + list(head.parameters()), compute_loss, len(tr), compute_val, settings, progress, "compute")

    comm, hist_m, best_m = _fit_comm(cx, cy, cmean, cstd, rng, settings, progress, base)

    arrays = {"feat_mean": mean, "feat_std": std, "comm_mean": cmean, "comm_std": cstd}
    arrays.update(_union_ranges("feat", _ranges("feat", (x - mean) / std, mask), base))
    arrays.update(_union_ranges("comm", _ranges("comm", (cx - cmean) / cstd, None), base))
    arrays.update(_export("enc", enc))
    arrays.update(_export("head", head))
    arrays.update(_export("comm", comm))
    record = {
        "kind": "shardopt-neural-cost-model",
        "version": 1,
        "shard_features": list(SHARD_FEATURES),
        "comm_features": list(COMM_FEATURES),
        "architecture": {"encoder": list(ENCODER), "head": list(HEAD), "comm": list(COMM)},
        "hardware": hardware[0] if len(hardware) == 1 else hardware,
        "backends": {  # which judge labelled the samples: a model is only as real as its data
            "compute": sorted({str(s.get("backend", "sim")) for s in samples if s.get("kind") == "compute"}),
            "comm": sorted({str(s.get("backend", "sim")) for s in samples if s.get("kind") == "comm"}),
        },
        "train": {
            "compute_samples": int(len(y)),
            "comm_device_rows": int(len(cy)),
            "settings": settings.__dict__,
            "best_val_log_mse_compute": best_c,
            "best_val_log_mse_comm": best_m,
            "val_history_compute": [round(v, 6) for v in hist_c],
            "val_history_comm": [round(v, 6) for v in hist_m],
        },
        "date": datetime.date.today().isoformat(),
        **({"base": base.meta.get("model") or base.meta.get("id") or "given"} if base is not None else {}),
        **(meta or {}),
    }
    return NeuralWeights(arrays, record)


# ---- judging --------------------------------------------------------------------------------------------------


def predict_compute(weights: NeuralWeights, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    n, t, f = x.shape
    z = encode_shards(weights, x.reshape(-1, f)).reshape(n, t, -1) * mask[..., None]
    return head_costs(weights, np.concatenate([z.sum(axis=1), mask.sum(axis=1, keepdims=True)], axis=1))


def predict_comm(weights: NeuralWeights, cx: np.ndarray) -> np.ndarray:
    return comm_head(weights, cx)


def metrics(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    from scipy.stats import kendalltau

    if len(true) == 0:
        return {"n": 0}
    ape = np.abs(pred - true) / np.abs(true)
    tau = float(kendalltau(pred, true)[0]) if len(true) > 2 else float("nan")
    return {"n": int(len(true)), "mape": float(ape.mean()), "median_ape": float(np.median(ape)), "rmse_ms": float(np.sqrt(np.mean((pred - true) ** 2))), "kendall_tau": tau}


def evaluate(weights: NeuralWeights, samples: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per column: MAPE, median APE, RMSE (ms) and Kendall tau against the samples' own costs."""
    out: dict[str, dict[str, float]] = {}
    x, mask, y = compute_arrays(samples)
    if len(y):
        p = predict_compute(weights, x, mask)
        out["fwd_compute"] = metrics(p[:, 0], y[:, 0])
        out["bwd_compute"] = metrics(p[:, 1], y[:, 1])
        out["compute_total"] = metrics(p.sum(axis=1), y.sum(axis=1))
    cx, cy, _ = comm_arrays(samples)
    if len(cy):
        p = predict_comm(weights, cx)
        out["fwd_comm"] = metrics(p[:, 0], cy[:, 0])
        out["bwd_comm"] = metrics(p[:, 1], cy[:, 1])
    if not out:
        raise TrainError("no compute or comm samples to judge")
    return out
