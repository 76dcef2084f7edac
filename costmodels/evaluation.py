"""Judging any cost model (analytic with any profile, neural) on collected samples, the same way.

A compute sample records what one device held (its tables' statistics, dims, dtypes) and the workload (batch,
optimizer, hardware profile): that is an instance with one device and a plan that puts every table on it, so any
CostModel can price it with its own `plan_costs` - the path a solver uses - and the prediction is compared with the
sample's measured (or simulated) forward and backward compute. The neural model also has a batched fast path
(costmodels.train.evaluate); this one is what makes the analytic model and a calibrated profile comparable with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from costmodels.base import CostModel
from costmodels.train import metrics
from shardopt.core.ir import AccessProfile, Instance, Plan, Shard, Table, Topology, Workload

MEMORY = 1 << 50  # samples were placed under their own cap already; the model only prices them


def sample_instance(sample: dict[str, Any], keep_names: bool = False) -> tuple[Instance, Plan]:
    """The one-device instance and plan a compute sample describes. Its tables are s0, s1, ... (pricing does not
    look at names), or with `keep_names` the names the sample records (a table's index trace is seeded by its name:
    re-timing a sample times the workload its timing did; a name twice gets its position appended)."""
    recorded = [str(t.get("name") or f"s{k}") for k, t in enumerate(sample["tables"])]
    names = ([n if recorded.count(n) == 1 else f"{n}#{k}" for k, n in enumerate(recorded)] if keep_names
             else [f"s{k}" for k in range(len(recorded))])
    tables = [
        Table(name=names[k], rows=int(t["rows"]), dim=int(t["dim"]), pooling_factor=float(t["pooling_factor"]),
              access=AccessProfile(histogram=t.get("histogram"), zipf=t.get("zipf")), dtype=t.get("dtype"))
        for k, t in enumerate(sample["tables"])
    ]
    inst = Instance(
        tables=tables,
        topology=Topology(num_devices=1, devices_per_host=1, memory_bytes=MEMORY, hardware=sample.get("hardware", "v100")),
        workload=Workload(batch_size=int(sample["batch_size"]), optimizer=sample.get("optimizer", "rowwise_adagrad")),
    )
    return inst, Plan(shards=[Shard(table=t.name, device=0) for t in tables])


def predict_samples(model: CostModel, samples: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(predicted [N, 2], measured [N, 2]) forward / backward compute (ms) of the compute samples."""
    pred, true = [], []
    for s in samples:
        if s.get("kind") != "compute":
            continue
        inst, plan = sample_instance(s)
        costs = model.plan_costs(inst, plan)
        pred.append([float(costs.fwd_compute[0]), float(costs.bwd_compute[0])])
        true.append([float(s["fwd_compute"]), float(s["bwd_compute"])])
    return np.array(pred).reshape(-1, 2), np.array(true).reshape(-1, 2)


def evaluate_model(model: CostModel, samples: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """MAPE, median APE, RMSE (ms) and Kendall tau of forward, backward and total compute."""
    pred, true = predict_samples(model, samples)
    if not len(true):
        raise ValueError("no compute samples to judge")
    return {
        "fwd_compute": metrics(pred[:, 0], true[:, 0]),
        "bwd_compute": metrics(pred[:, 1], true[:, 1]),
        "compute_total": metrics(pred.sum(axis=1), true.sum(axis=1)),
    }


# device-cost bands (ms of measured fwd + bwd compute) of held-out reports: a GPU's devices are mostly under 2 ms,
# the cpu family's 5-50 ms; a model's error is rarely the same across them (docs/measured.md)
DEVICE_BANDS = ((0.0, 0.5), (0.5, 2.0), (2.0, 5.0), (5.0, 20.0), (20.0, 50.0), (50.0, float("inf")))


def band_label(lo: float, hi: float) -> str:
    return f">= {lo:g} ms" if hi == float("inf") else f"{lo:g}-{hi:g} ms"


def accuracy_by_band(model: CostModel, samples: Sequence[dict[str, Any]],
                     bands: Sequence[tuple[float, float]] = DEVICE_BANDS) -> dict[str, dict[str, float]]:
    """Device-total (fwd + bwd compute) accuracy of `model` on compute samples: "all", then each band of measured
    cost that holds any sample (MAPE, median APE, RMSE, Kendall tau and the count; tau needs 3 samples)."""
    pred, true = predict_samples(model, samples)
    if not len(true):
        raise ValueError("no compute samples to judge")
    tp, tt = pred.sum(axis=1), true.sum(axis=1)
    out = {"all": metrics(tp, tt)}
    for lo, hi in bands:
        k = (tt >= lo) & (tt < hi)
        if k.any():
            out[band_label(lo, hi)] = metrics(tp[k], tt[k])
    return out
