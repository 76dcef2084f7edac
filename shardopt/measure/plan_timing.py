"""Timing whole plans on a measured backend: each plan's devices built as kernels, the all-to-all modelled beside
them, and all of it measured interleaved (shardopt.measure.interleaved). Shared by `evaluate` (one plan) and
`compare` (several plans, paired).

The judge times exactly the instance's workload: its batch, its tables' rows. A machine that cannot hold that is told
so before anything is built (`MemoryShortError`), with the way out: `shardopt scale`, which makes a smaller instance
that the solvers are then given too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.hierarchical import in_host_row_split_tables
from shardopt.core.ir import Instance, Kernel, Plan, Shard
from shardopt.core.memory import shard_bytes
from shardopt.measure.backends.base import TimingBackend, TimingSettings
from shardopt.measure.confidence import StopRule
from shardopt.measure.interleaved import (
    MEMORY_SHARE,
    Measurement,
    available_memory_bytes,
    machine_state,
    measure_interleaved,
    pinned_cpu,
)

INDEX_BYTES = 8  # int64 indices of the traces


class MeasureError(ValueError):
    """A measurement that cannot be taken as asked (a user error: the message says what to change)."""


class MemoryShortError(MeasureError):
    pass


def timing_backend(name: str) -> TimingBackend:
    if name == "cpu":
        from shardopt.measure.backends.cpu import CpuBackend

        return CpuBackend()
    if name == "cuda":
        from shardopt.measure.backends.cuda import CudaBackend

        return CudaBackend()
    raise MeasureError(f"backend {name!r} is not a measured backend (cpu, cuda)")


def shards_by_device(instance: Instance, plan: Plan) -> list[list[Shard]]:
    out: list[list[Shard]] = [[] for _ in range(instance.topology.num_devices)]
    for s in plan.shards:
        out[s.device].append(s)
    return out


def modelled_comm(instance: Instance, plan: Plan) -> np.ndarray:
    """[devices, 2]: forward and backward all-to-all (ms) of the analytic model of the instance's own profile."""
    from costmodels.analytic import AnalyticCostModel

    return AnalyticCostModel().plan_costs(instance, plan).columns[:, 2:4].copy()


COMM_MODES = ("modelled", "measured")


def plan_comm(instance: Instance, plan: Plan, backend: str, comm: str, *, seed: int = 0) -> np.ndarray:
    """The all-to-all columns [devices, 2] the judge adds to measured compute: modelled, or measured on gloo."""
    if comm not in COMM_MODES:
        raise MeasureError(f"comm: {comm!r} is not one of {', '.join(COMM_MODES)}")
    if comm == "modelled":
        return modelled_comm(instance, plan)
    if backend != "cpu":
        raise MeasureError("comm measured: only the cpu judge measures the all-to-all in-process (gloo); on GPUs run "
                           "torchrun -m shardopt.measure.backends.cuda_dist (NCCL, one process per GPU)")
    replicas = [s for s in plan.shards if s.replicated]
    if replicas:
        raise MeasureError(f"comm measured: the gloo program times the all-to-all only, not the gradient all-reduce of "
                           f"data-parallel replicas (table {replicas[0].table!r}); judge this plan with --comm modelled")
    nested = in_host_row_split_tables(instance, plan.shards)
    if nested:
        raise MeasureError(f"comm measured: the gloo program times one all-to-all, not the reduce-scatter within a host and "
                           f"all-to-all across hosts of a row split held within one host (table {nested[0]!r}, "
                           f"table_row_wise); judge this plan with --comm modelled")
    return measure_comm_gloo(instance, plan, seed=seed)


def comm_label(comm: str, profile: str) -> str:
    return GLOO_LABEL if comm == "measured" else f"modelled by the analytic model ({profile} profile)"


def host_bytes_needed(instance: Instance, plans: Sequence[Plan]) -> int:
    """What building every device kernel of every plan takes in host memory: weights and optimizer state, the
    index traces, and the pooled outputs and their gradients."""
    index = instance.table_index()
    batch = instance.workload.batch_size
    total = 0
    for plan in plans:
        for s in plan.shards:
            t = instance.tables[index[s.table]]
            total += shard_bytes(instance, t, s)
            total += int(batch * t.pooling_factor) * INDEX_BYTES + (batch + 1) * INDEX_BYTES
            total += 2 * batch * s.width(t) * 4
    return total


def host_memory_refusal(backend: str, plan: Plan) -> str | None:
    """Why a measured backend cannot judge `plan`'s host-memory shards (None when it has none): the cpu backend
    times fbgemm's TBE on HOST memory for every shard, so HBM and host memory are one tier there, and the cuda
    backend builds every table in device memory (it has no UVM); either would time a UVM shard as an HBM one."""
    uvm = [s for s in plan.shards if s.kernel is not Kernel.fused]
    if backend not in ("cpu", "cuda") or not uvm:
        return None
    s = uvm[0]
    what = ("the CPU kernel reads every table from host memory, so it cannot tell HBM from host memory" if backend == "cpu"
            else "the cuda backend places every table in device memory (no UVM)")
    return (f"backend {backend!r} does not time host-memory shards ({len(uvm)} shard(s), e.g. table {s.table!r} on device "
            f"{s.device} with kernel {s.kernel.value}): {what}; judge this plan with --backend sim")


def mixed_hardware_refusal(backend: str, instance: Instance) -> str | None:
    """Why a measured backend cannot judge a job that mixes hardware kinds (None otherwise): it times every device's
    shards on this one machine, so the devices of the other kinds would be timed as this machine's."""
    if backend not in ("cpu", "cuda") or not instance.topology.is_mixed:
        return None
    kinds = ", ".join(dict.fromkeys(instance.topology.hardware_kinds()))
    return (f"backend {backend!r} times every device on this machine, and topology.device_hardware mixes kinds ({kinds}): "
            "each kind's devices must be timed on that kind; judge this plan with --backend sim, or time each kind's "
            "devices on a machine of that kind")


def check_memory(instance: Instance, plans: Sequence[Plan], backend: str) -> None:
    if backend != "cpu":
        return  # a GPU's own memory is checked by the kernel allocation, which names the device
    need = host_bytes_needed(instance, plans)
    have = available_memory_bytes()
    if have is not None and need > MEMORY_SHARE * have:
        raise MemoryShortError(
            f"timing {len(plans)} plan(s) of this instance at its own workload (batch {instance.workload.batch_size}) "
            f"needs about {need / 2**30:.2f} GiB of memory, more than {int(100 * MEMORY_SHARE)} % of the "
            f"{have / 2**30:.2f} GiB available; make a smaller instance with `shardopt scale INSTANCE --batch-size B "
            f"--max-rows R --out SMALL.json` and solve and judge that one")


def timing_settings(instance: Instance, rule: StopRule, *, warmup: int, seed: int, threads: int) -> TimingSettings:
    return TimingSettings(batch_size=instance.workload.batch_size, repeats=rule.fixed or 0, warmup=warmup, seed=seed,
                          threads=threads, method=f"interleaved:{rule.key()}")


def measure_plans(
    instance: Instance,
    plans: Sequence[Plan],
    backend: str,
    rule: StopRule,
    *,
    warmup: int = 3,
    seed: int = 0,
    threads: int = 1,
    progress: Callable[[int, int], None] | None = None,
    comm: str = "modelled",
    comms: list[np.ndarray] | None = None,
) -> tuple[Measurement, list[np.ndarray]]:
    """Every device of every plan timed interleaved on `backend`; returns the measurement and, per plan, the
    all-to-all [devices, 2] that was added to each device's measured compute: modelled by the analytic model, or
    with comm="measured" (cpu only) timed on gloo first, before any kernel is built."""
    for plan in plans:  # never time a host-memory shard as an HBM one (evaluate / compare say so earlier, by name)
        why = host_memory_refusal(backend, plan) or mixed_hardware_refusal(backend, instance)
        if why:
            raise MeasureError(why)
    check_memory(instance, plans, backend)
    timer = timing_backend(backend)
    settings = timing_settings(instance, rule, warmup=warmup, seed=seed, threads=threads)
    if comms is None:  # (a caller that already has them - measured on gloo, say - passes them)
        comms = [plan_comm(instance, plan, backend, comm, seed=seed) for plan in plans]
    with pinned_cpu(threads, enabled=backend == "cpu") as pin:
        machine = machine_state(pin.pinned, threads)
        units: list[list[Any]] = [
            [timer.prepare(instance, shards, settings) if shards else None for shards in shards_by_device(instance, plan)]
            for plan in plans
        ]
        measurement = measure_interleaved(units, [c.sum(axis=1) for c in comms], rule, warmup=warmup, seed=seed,
                                          machine=machine, progress=progress)
    return measurement, comms


GLOO_LABEL = "measured: CPU gloo all_to_all_single, one process per device"


def measure_comm_gloo(instance: Instance, plan: Plan, *, repeats: int = 10, warmup: int = 3, seed: int = 0,
                      timeout_s: float = 600.0) -> np.ndarray:
    """[devices, 2]: forward and backward all-to-all (ms, medians) measured by the torchrun program
    (shardopt.measure.backends.cuda_dist) on gloo: one CPU process per device, the real all_to_all_single of the
    pooled outputs and of their gradients at the instance's batch (--comm-only: no kernels are built)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from shardopt.core.ir import save

    n = instance.topology.num_devices
    with tempfile.TemporaryDirectory(prefix="shardopt-gloo-") as tmp:
        inst_path, plan_path, out = Path(tmp) / "instance.json", Path(tmp) / "plan.json", Path(tmp) / "result.json"
        save(instance, inst_path)
        save(plan, plan_path)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
               "-m", "shardopt.measure.backends.cuda_dist", str(inst_path), str(plan_path), "--out", str(out),
               "--device-type", "cpu", "--comm-only", "--repeats", str(repeats), "--warmup", str(warmup),
               "--seed", str(seed)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
        except subprocess.TimeoutExpired:
            raise MeasureError(f"the gloo all-to-all of {n} processes did not finish in {timeout_s:g} s") from None
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise MeasureError(f"the gloo all-to-all run failed (exit {proc.returncode}): {' | '.join(tail)}")
        doc = json.loads(out.read_text())
    devices = sorted(doc["devices"], key=lambda r: r["device"])
    return np.array([[r["fwd_comm"], r["bwd_comm"]] for r in devices], dtype=np.float64)
