"""Judging a finished plan: check it, then re-time it on a backend, in the four cost columns of docs/analytic-model.md.

A *cost model* is what a solver searches with; an *evaluator* (this module) is what judges the plan the solver
returned, so that every leaderboard row says which predictor found a plan and which judge measured it. The judge
always runs the plan checker first: an invalid plan is an error listing its violations, never a cost.

Backends:

- ``sim``: the analytic model (costmodels.analytic) with the instance's hardware profile: deterministic, fast,
  runs anywhere. Its label says "simulated" so that nobody mistakes it for a measurement.
- ``cpu`` / ``cuda``: each device's shards timed as one fused embedding kernel (fbgemm's TBE on the CPU; fbgemm-gpu
  or a torch kernel of the same semantics on a GPU) on index traces generated from the tables' statistics, at the
  instance's own workload (a smaller one is a new instance: `shardopt scale`); forward and backward (with the
  optimizer update) measured, every device once per round in a shuffled order (shardopt.measure.interleaved), the
  plan cost reported with a bootstrap 95 % CI (shardopt.measure.confidence); the all-to-all modelled by the
  analytic model and labelled so. Timings go through the on-disk measurement cache (shardopt.measure.cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodels.base import CostModel, DeviceCosts
from shardopt.core.errors import UserError
from shardopt.core.ir import Instance, Plan
from shardopt.core.plan_check import PlanCheck, PlanError, check_plan
from shardopt.measure.confidence import PlanSamples, StopRule, plan_cost_interval

BACKENDS: dict[str, str] = {
    "sim": "the analytic cost model of the instance's hardware profile (simulated, deterministic)",
    "cpu": "fbgemm's fused TBE kernel timed on the CPU (fbgemm-gpu-cpu)",
    "cuda": "fbgemm's fused TBE kernel timed on a GPU (fbgemm-gpu, or a torch kernel of the same semantics)",
}
BUILT_BACKENDS = ("sim", "cpu", "cuda")
MEASURED_BACKENDS = ("cpu", "cuda")
DEFAULT_BACKEND = "sim"


class EvaluationError(UserError, ValueError):
    """A request the judge cannot serve (unknown or unavailable backend, bad repeat count): a user error."""

    error_kind = "backend"


class UnknownBackendError(EvaluationError):
    error_kind = "unknown_backend"

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")


class BackendUnavailableError(EvaluationError):
    def __init__(self, name: str, why: str):
        self.name = name
        super().__init__(f"backend {name!r} is not available: {why}")


@dataclass
class Evaluation:
    """What the judge found: per-device costs (ms), memory per device (bytes), and the plan check it passed."""

    backend: str
    judge: str  # e.g. "analytic (v100 profile), simulated"
    costs: DeviceCosts
    memory_use: np.ndarray  # int64 [num_devices]: weights + optimizer state
    capacities: list[int]
    check: PlanCheck
    repeats: int = 1  # measurements taken per phase (1 for the deterministic simulator)
    wall_time_s: float = 0.0
    instance_hash: str = ""
    plan_instance_hash: str = ""
    warnings: list[str] = field(default_factory=list)
    batch_size: int = 0  # the batch the costs are for: always the instance's own
    comm: str = "simulated"  # where the all-to-all columns come from
    timings: list[dict[str, Any] | None] = field(default_factory=list)  # per device: the kernel measurement
    interval: dict[str, float] | None = None  # measured: the plan cost's bootstrap 95 % CI (confidence.Interval)
    stop: dict[str, Any] | None = None  # measured: why repeating stopped, after how many rounds
    machine: dict[str, Any] | None = None  # measured: host, pinning, threads, load average before / after
    rule: str = ""  # measured: the stopping rule

    @property
    def max_cost(self) -> float:
        return self.costs.max_cost

    @property
    def hash_matches(self) -> bool:
        """False when the plan names a different instance than the one it was judged on."""
        return not self.plan_instance_hash or self.plan_instance_hash == self.instance_hash

    def to_dict(self) -> dict[str, Any]:
        costs = self.costs.to_dict()
        for d, row in enumerate(costs["devices"]):
            row["memory_bytes"] = int(self.memory_use[d])
            row["capacity_bytes"] = int(self.capacities[d])
        return {
            "backend": self.backend,
            "judge": self.judge,
            "repeats": self.repeats,
            "wall_time_s": self.wall_time_s,
            "instance_hash": self.instance_hash,
            "plan_instance_hash": self.plan_instance_hash,
            "hash_matches": self.hash_matches,
            "warnings": list(self.warnings),
            "batch_size": self.batch_size,
            "comm": self.comm,
            "interval": self.interval,
            "stop": self.stop,
            "machine": self.machine,
            "rule": self.rule,
            **costs,
            "timings": self.timings,
        }


def cost_model_label(model: CostModel, instance: Instance) -> str:
    """A cost model's name with the hardware profile it applies to this instance: "analytic (v100 profile)"."""
    name = model.describe()
    if hasattr(model, "profile_name"):  # the analytic model: None means "the topology's own profile" (each device's kind's)
        if model.profile_name is None and instance.topology.is_mixed:
            return f"{name.split(':', 1)[0]} ({' + '.join(dict.fromkeys(instance.topology.hardware_kinds()))} profiles, each device its own kind's)"
        profile = model.profile_name or instance.topology.hardware
        return f"{name.split(':', 1)[0]} ({profile} profile)"
    return name


def hash_warning(instance: Instance, plan: Plan) -> str | None:
    """A warning when `plan` records a different instance hash than `instance` has (None when they agree)."""
    have = instance.content_hash()
    if plan.instance and plan.instance != have:
        return (
            f"the plan was made for instance {plan.instance}, but this instance's content hash is {have}: "
            "it is judged anyway"
        )
    return None


def evaluate_plan(
    instance: Instance,
    plan: Plan,
    backend: str = DEFAULT_BACKEND,
    *,
    repeats: int | str = 5,
    warmup: int = 3,
    seed: int = 0,
    threads: int = 1,
    target: float = 0.02,
    time_cap_s: float = 120.0,
    comm: str = "modelled",
    cache: Any = None,
    cost_model: CostModel | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Check `plan` against `instance` and judge it on `backend`.

    Raises PlanError (listing every violation) for an invalid plan, UnknownBackendError for a backend name that
    does not exist, BackendUnavailableError for one that cannot run here, EvaluationError for bad settings.
    `cost_model` replaces the simulator's judge (default: the analytic model of the instance's own hardware
    profile). Measured backends time the instance's own workload, every device once per round, interleaved:
    `repeats` rounds, or "auto" (until the plan cost's 95 % CI half-width is under `target` of it, or `time_cap_s`);
    `comm` "measured" (cpu) times the all-to-all on gloo, one process per device, instead of modelling it;
    `cache` is a MeasurementCache (None: the default file; False: none), `progress(round, rounds)` after each round.
    """
    if backend not in BACKENDS:
        raise UnknownBackendError(backend)
    if instance.two_d is not None:  # (judging it as a flat job of N devices would price another problem)
        raise EvaluationError("two_d: a 2D instance's plan is judged on its sharding group: pass the group's flat instance "
                              "(shardopt.core.sharding_groups.group_instance) and add the replica sync "
                              "(costmodels.replica_sync), as `shardopt evaluate` does")
    rule = stop_rule(repeats, target, time_cap_s)
    for name, value, low in (("warmup", warmup, 0), ("threads", threads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise EvaluationError(f"{name}: {value!r} must be an integer >= {low}")

    start = time.perf_counter()
    check = check_plan(instance, plan)
    if not check.ok:
        raise PlanError(check.violations)
    warnings = [w for w in [hash_warning(instance, plan)] if w]
    common = dict(
        memory_use=check.memory_use,
        capacities=instance.topology.capacities(),
        check=check,
        instance_hash=instance.content_hash(),
        plan_instance_hash=plan.instance,
        warnings=warnings,
        batch_size=instance.workload.batch_size,
    )
    if backend not in MEASURED_BACKENDS:
        from costmodels.analytic import AnalyticCostModel

        if cost_model is None:
            cost_model = AnalyticCostModel()
        costs = cost_model.plan_costs(instance, plan)
        return Evaluation(
            backend=backend, judge=f"{cost_model_label(cost_model, instance)}, simulated", costs=costs, repeats=1,
            wall_time_s=time.perf_counter() - start, **common,
        )
    from shardopt.measure.plan_timing import host_memory_refusal, mixed_hardware_refusal

    why = host_memory_refusal(backend, plan) or mixed_hardware_refusal(backend, instance)
    if why:
        raise EvaluationError(why)
    measured = _measure_with_cache(instance, plan, backend, rule, warmup=warmup, seed=seed, threads=threads,
                                   cache=cache, progress=progress, comm=comm)
    return Evaluation(backend=backend, wall_time_s=time.perf_counter() - start, **measured, **common)


def stop_rule(repeats: int | str, target: float = 0.02, time_cap_s: float = 120.0) -> StopRule:
    """The stopping rule of a measured judge from `repeats` (a count >= 1 or "auto"); EvaluationError otherwise."""
    if isinstance(repeats, str) and repeats.strip().lower() == "auto":
        fixed = None
    elif isinstance(repeats, int) and not isinstance(repeats, bool):
        fixed = repeats
    elif isinstance(repeats, str) and repeats.strip().isdigit():
        fixed = int(repeats)
    else:
        raise EvaluationError(f"repeats: {repeats!r} must be an integer >= 1 or 'auto'")
    if fixed is not None and fixed < 1:
        raise EvaluationError(f"repeats: {fixed} must be an integer >= 1 or 'auto'")
    try:
        return StopRule(fixed=fixed, target=target, time_cap_s=time_cap_s)
    except ValueError as exc:
        raise EvaluationError(str(exc)) from None


def _measure_with_cache(instance: Instance, plan: Plan, backend: str, rule: StopRule, *, warmup: int, seed: int,
                        threads: int, cache: Any, progress: Callable[[int, int], None] | None,
                        comm: str = "modelled") -> dict[str, Any]:
    """The measured Evaluation's fields: from the cache when every busy device of this plan was measured the same
    way before (the same rounds for all of them), else timed interleaved and stored."""
    from shardopt.measure.backends.base import BackendUnavailable, summarise
    from shardopt.measure.cache import MeasurementCache, measurement_key
    from shardopt.measure.plan_timing import (
        MeasureError,
        comm_label,
        measure_plans,
        plan_comm,
        shards_by_device,
        timing_backend,
        timing_settings,
    )

    try:
        timer = timing_backend(backend)
        kernel, hardware = timer.kernel_label(instance), timer.hardware_label()
    except BackendUnavailable as exc:
        raise BackendUnavailableError(backend, str(exc)) from None
    store = MeasurementCache() if cache is None else (None if cache is False else cache)
    settings = timing_settings(instance, rule, warmup=warmup, seed=seed, threads=threads)
    by_device = shards_by_device(instance, plan)
    keys = [measurement_key(backend, kernel, hardware, instance, sh, settings) if sh else None for sh in by_device]
    cached = [store.get(k) if (store is not None and k) else None for k in keys]
    busy = [d for d, sh in enumerate(by_device) if sh]
    lengths = {len(cached[d].samples_fwd_ms) for d in busy if cached[d] is not None}
    comm_mode = comm
    try:
        comm = plan_comm(instance, plan, backend, comm_mode, seed=seed)
    except MeasureError as exc:
        raise EvaluationError(str(exc)) from None
    if busy and all(cached[d] is not None for d in busy) and len(lengths) == 1:
        fwd = np.zeros((len(by_device), lengths.pop()))
        bwd = np.zeros_like(fwd)
        for d in busy:
            fwd[d], bwd[d] = cached[d].samples_fwd_ms, cached[d].samples_bwd_ms
        samples = PlanSamples(fwd, bwd, comm.sum(axis=1), np.array([bool(sh) for sh in by_device]))
        interval = plan_cost_interval(samples, seed=seed)
        timings = [cached[d] if by_device[d] else None for d in range(len(by_device))]
        stop, machine = {"reason": "cached", "rounds": samples.rounds}, None
    else:
        try:
            m, _ = measure_plans(instance, [plan], backend, rule, warmup=warmup, seed=seed, threads=threads,
                                 progress=progress, comms=[comm])
        except BackendUnavailable as exc:
            raise BackendUnavailableError(backend, str(exc)) from None
        except MeasureError as exc:
            raise EvaluationError(str(exc)) from None
        samples, interval = m.samples[0], m.intervals[0]
        timings = []
        for d in range(len(by_device)):
            if m.labels[0][d] is None:
                timings.append(None)
                continue
            f, b = m.device_samples(0, d)
            kt = summarise([x / 1e3 for x in f], [x / 1e3 for x in b], m.labels[0][d], m.hardware, instance.workload.batch_size)
            if store is not None:
                store.put(keys[d], backend, kt)
            timings.append(kt)
        stop, machine = vars(m.stop), (m.machine.to_dict() if m.machine else None)
    fwd_med, bwd_med = samples.device_medians()
    cols = np.column_stack([fwd_med, bwd_med, comm])
    rows = []
    for kt in timings:
        if kt is None:
            rows.append(None)
            continue
        row = kt.to_dict()
        row.pop("samples_fwd_ms"), row.pop("samples_bwd_ms")
        rows.append(row)
    kernels = sorted({r["kernel"] for r in rows if r})
    profile = instance.topology.hardware
    comm_what = "all-to-all measured (CPU gloo)" if comm_mode == "measured" else f"all-to-all modelled (analytic, {profile} profile)"
    judge = f"{'; '.join(kernels) or kernel} on {hardware}, measured compute; {comm_what}"
    return dict(judge=judge, costs=DeviceCosts(cols), repeats=samples.rounds,
                comm=comm_label(comm_mode, profile), timings=rows,
                interval=interval.to_dict(), stop=stop, machine=machine, rule=rule.describe())
