"""The neural cost model: DreamShard / NeuroShard-shaped, with inference in numpy.

Compute: a per-shard encoder (MLP on `costmodels.features.shard_features`, normalised with the training data's
statistics), summed over a device's shards, then a head (MLP) giving forward and backward ms. The sum is the model's
additive device *state* (plus a shard count), so it plugs into the BoundCostModel interface the solvers use: adding
or removing a table is adding or subtracting its encoding, and thousands of candidate devices are one matrix product.

Communication: one model for any cluster: an MLP applied to each device's all-to-all features (bytes over each link
kind divided by its bandwidth, latencies, cluster shape; `costmodels.features.comm_features`), which are symmetric in
the other devices' widths, so the prediction is permutation-equivariant over devices and defined for any count.

Weights live in one `.npz` (arrays plus a JSON record of the architecture, the data and the command that made them);
training is in `costmodels.train` (torch). Here nothing imports torch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel, UnsupportedPlacementError
from costmodels.features import comm_features, comm_features_after_adding, instance_shard_features
from costmodels.hierarchical import hierarchical_comm_time
from shardopt.core.hardware import HardwareProfile, get_profile
from shardopt.core.ir import Instance, Kernel
from shardopt.core.npz_meta import load_npz_meta, save_npz_meta

SHIPPED = Path(__file__).resolve().parent / "weights" / "neural-v100.npz"


def mlp(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]], last_relu: bool) -> np.ndarray:
    """ReLU MLP in numpy: `layers` = [(W [in, out], b [out]), ...]."""
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        if i < len(layers) - 1 or last_relu:
            np.maximum(x, 0.0, out=x)
    return x


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def normalise(weights: NeuralWeights, prefix: str, x: np.ndarray) -> np.ndarray:
    """Features standardised with the training statistics, clamped to the range seen in training: a table unlike
    any training table is treated as the nearest seen one instead of being extrapolated wildly."""
    a = weights.arrays
    mean, std = (a["feat_mean"], a["feat_std"]) if prefix == "feat" else (a["comm_mean"], a["comm_std"])
    z = (x - mean) / std
    lo, hi = a.get(f"{prefix}_lo"), a.get(f"{prefix}_hi")
    if lo is not None and hi is not None:
        z = np.clip(z, lo, hi)
    return z


def encode_shards(weights: NeuralWeights, x: np.ndarray) -> np.ndarray:
    """Shard features [n, F] -> encodings [n, E] (the additive part of a device's state)."""
    return mlp(normalise(weights, "feat", x), weights.layers("enc"), last_relu=True)


def head_costs(weights: NeuralWeights, pooled: np.ndarray) -> np.ndarray:
    """Pooled states [n, E + 1] (encodings summed, shard count last) -> fwd, bwd compute ms [n, 2]."""
    return softplus(mlp(pooled, weights.layers("head"), last_relu=False))


def comm_head(weights: NeuralWeights, x: np.ndarray) -> np.ndarray:
    """Per-device all-to-all features [n, Fc] -> fwd, bwd comm ms [n, 2]."""
    return softplus(mlp(normalise(weights, "comm", x), weights.layers("comm"), last_relu=False))


class NeuralWeights:
    """The arrays of a trained model and its record; `load` / `save` a single .npz."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]):
        self.arrays = arrays
        self.meta = meta

    def layers(self, prefix: str) -> list[tuple[np.ndarray, np.ndarray]]:
        out, i = [], 0
        while f"{prefix}.{i}.w" in self.arrays:
            out.append((self.arrays[f"{prefix}.{i}.w"], self.arrays[f"{prefix}.{i}.b"]))
            i += 1
        return out

    @classmethod
    def load(cls, path: str | Path) -> NeuralWeights:
        arrays, meta = load_npz_meta(path, "shardopt-neural-cost-model", "a shardopt neural cost model")
        return cls(arrays, meta)

    def save(self, path: str | Path) -> None:
        save_npz_meta(path, self.arrays, self.meta)


class BoundNeural(BoundCostModel):
    """What it can cost (docs/neural-cost-model.md, "What it can cost"): table-wise, column-wise and row-wise shards
    in HBM (a row-wise shard is described as the table it is: its share of the rows and of every bag's lookups,
    all bags). It refuses host-memory shards (fused_uvm_caching, fused_uvm): its features have no host-memory tier;
    and data-parallel replicas: it has no model of their dense optimizer step and gradient all-reduce."""

    kernels = frozenset({Kernel.fused})
    replicas = False

    @property
    def label(self) -> str:
        return f"neural cost model {self.model_name!r}"

    def unsupported(self, shard) -> str | None:  # noqa: ANN001 - a Shard
        if shard.replicated:
            return (f"a data-parallel replica (table {shard.table!r} on device {shard.device}): it has no model of a "
                    "replica's dense optimizer step and gradient all-reduce")
        if shard.kernel is not Kernel.fused:
            return (f"kernel {shard.kernel.value} (table {shard.table!r} on device {shard.device}): its features have "
                    "no host-memory tier")
        return None

    def __init__(self, instance: Instance, weights: NeuralWeights, compute_scale: float = 1.0):
        super().__init__(instance)
        self.w = weights
        self.compute_scale = compute_scale
        self._encoding_size = weights.layers("enc")[-1][0].shape[1]
        topo = instance.topology
        if topo.lists_network:
            listed = (f"topology.levels: {', '.join(lv.name for lv in topo.levels)}" if topo.levels is not None else "topology.graph")
            raise UnsupportedPlacementError(
                f"a neural cost model cannot cost a topology that lists its network ({listed}): its communication features are "
                "NVLink in a host and the network between hosts; use --cost-model analytic")
        if topo.is_mixed:
            raise UnsupportedPlacementError(
                f"a neural cost model cannot cost a job that mixes hardware kinds (topology.device_hardware: "
                f"{', '.join(dict.fromkeys(topo.hardware_kinds()))}): it was trained on one kind; use --cost-model analytic")
        self.profile: HardwareProfile = get_profile(topo.hardware)
        host = np.arange(topo.num_devices) // topo.devices_per_host
        self._same_host = (host[:, None] == host[None, :]).astype(np.float64)
        self._intra = topo.intra_host_bandwidth or self.profile.nvlink_bandwidth
        self._inter = topo.inter_host_bandwidth or self.profile.network_bandwidth

    @property
    def state_size(self) -> int:
        return self._encoding_size + 1

    def shard_states(self, tables: np.ndarray, cols: np.ndarray, row_fraction: np.ndarray, batch_fraction: np.ndarray,
                     cache_fraction: np.ndarray | None = None, host_tier: np.ndarray | None = None) -> np.ndarray:
        if cache_fraction is not None or host_tier is not None:
            cf = np.ones(np.shape(tables)) if cache_fraction is None else np.broadcast_to(np.asarray(cache_fraction, dtype=np.float64), np.shape(tables))
            host = (cf < 1) if host_tier is None else np.broadcast_to(np.asarray(host_tier, dtype=bool), np.shape(tables))
            if host.any():
                k = int(np.flatnonzero(host)[0])
                name = self.instance.tables[int(np.asarray(tables)[k])].name
                kind = "kernel fused_uvm" if cf[k] <= 0 else "kernel fused_uvm_caching"
                raise UnsupportedPlacementError(
                    f"{self.label} cannot cost {kind} (table {name!r}): its features have no host-memory tier; use --cost-model analytic",
                    table=name, kind=kind)
        x = instance_shard_features(self.instance, np.asarray(tables), np.asarray(cols, dtype=np.float64), np.asarray(row_fraction, dtype=np.float64), np.asarray(batch_fraction, dtype=np.float64), self.histograms)
        z = encode_shards(self.w, x)
        return np.concatenate([z, np.ones((len(z), 1))], axis=1)

    def compute_costs(self, states: np.ndarray, devices: np.ndarray | int | None = None) -> np.ndarray:
        s = np.asarray(states, dtype=np.float64)
        flat = s.reshape(-1, s.shape[-1])
        out = head_costs(self.w, flat) * self.compute_scale
        out[flat[:, -1] < 0.5] = 0.0  # no shard, no kernel
        return out.reshape(s.shape[:-1] + (2,))

    def comm_costs(self, dim_sums: np.ndarray) -> np.ndarray:
        dims = np.asarray(dim_sums, dtype=np.float64)
        if self.num_devices == 1:
            return np.zeros(dims.shape + (2,))
        x = comm_features(dims, self._same_host, self.instance.workload.batch_size, self._intra, self._inter, self.profile)
        flat = x.reshape(-1, x.shape[-1])
        out = comm_head(self.w, flat)
        return out.reshape(dims.shape + (2,))


    def hierarchical_comm(self, host_widths: np.ndarray) -> np.ndarray:
        """Row splits held within one host (table_row_wise) are priced by the analytic formula of their two
        collectives (costmodels.hierarchical) on the instance's profile: the comm head learned the all-to-all only
        (docs/neural-cost-model.md, "What it can cost")."""
        topo = self.instance.topology
        return hierarchical_comm_time(host_widths, devices_per_host=topo.devices_per_host, num_devices=topo.num_devices,
                                      batch=self.instance.workload.batch_size, intra_bw=self._intra, inter_bw=self._inter,
                                      latency_s=self.profile.alltoall_latency_s, network_latency_s=self.profile.network_latency_s)

    def comm_totals_after_adding(self, dim_sums: np.ndarray, width: float, candidates: np.ndarray) -> np.ndarray:
        """The greedy solvers' question in O(D) model evaluations: each device has three possible new inputs."""
        dims = np.asarray(dim_sums, dtype=np.float64)
        cands = np.asarray(candidates)
        if self.num_devices == 1:
            return np.zeros((len(cands), 1))
        own, same, other = comm_features_after_adding(dims, float(width), self._same_host, self.instance.workload.batch_size, self._intra, self._inter, self.profile)
        t_own, t_same, t_other = (comm_head(self.w, f).sum(axis=1) for f in (own, same, other))
        out = np.where(self._same_host[cands] > 0, t_same, t_other)
        out[np.arange(len(cands)), cands] = t_own[cands]
        return out


class NeuralCostModel(CostModel):
    """`path`: a weights file from `shardopt costmodel train` (default: the shipped model). `compute_scale`: the
    machine's speed level relative to the samples the model learned (a calibrated card's `level`,
    shardopt.measure.machine_level): every compute prediction is multiplied by it. The network learns the shape of
    the costs; a measured machine's level moves by 5-15 % from one hour or day to the next (docs/measured.md), and a
    level read on fixed anchor samples follows that without retraining."""

    def __init__(self, path: str | Path | None = None, compute_scale: float = 1.0):
        if not (math.isfinite(compute_scale) and compute_scale > 0):
            raise ValueError(f"compute_scale: {compute_scale!r} must be a positive number")
        self.path = Path(path) if path is not None else SHIPPED
        self.weights = NeuralWeights.load(self.path)
        self.name = "neural" if path is None else f"neural:{self.path.name}"
        self.compute_scale = float(compute_scale)

    def bind(self, instance: Instance) -> BoundNeural:
        bm = BoundNeural(instance, self.weights, self.compute_scale)
        bm.model_name = self.name
        return bm

    def describe(self) -> str:
        trained = self.weights.meta.get("hardware")
        backends = self.weights.meta.get("backends") or {}
        compute = ", ".join(backends.get("compute") or [])
        level = f", at level {self.compute_scale:.3f} of its samples" if self.compute_scale != 1.0 else ""
        if compute and compute != "sim":
            return f"{self.name} (compute learned from {compute} measurements{level}; {trained} topology)"
        return f"{self.name} (trained on {trained} data)" if trained else self.name
