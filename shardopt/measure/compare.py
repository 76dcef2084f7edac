"""Comparing plans of one instance on one judge: "B is x % faster than A (95 % CI [l, u])" or "indistinguishable".

On a measured backend the plans are timed together, interleaved round by round (shardopt.measure.interleaved), and
each plan is compared with the first through a paired bootstrap over the same rounds
(shardopt.measure.confidence.compare_paired): drift that hit every plan in a round cancels. On `sim` the analytic
model is deterministic: the difference is exact and its interval is a point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardopt.core.ir import Instance, Plan
from shardopt.core.plan_check import PlanError, check_plan
from shardopt.measure.backends.base import kernel_label
from shardopt.measure.confidence import Comparison, Interval, StopRule, compare_paired
from shardopt.measure.evaluate import (
    BACKENDS,
    MEASURED_BACKENDS,
    BackendUnavailableError,
    EvaluationError,
    UnknownBackendError,
    hash_warning,
    stop_rule,
)


@dataclass
class PlanResult:
    name: str
    cost_ms: float
    interval: Interval
    device_costs_ms: list[float]
    bottleneck: int


@dataclass
class CompareReport:
    backend: str
    judge: str
    plans: list[PlanResult]
    comparisons: list[Comparison]
    rounds: int = 1
    stop: dict[str, Any] | None = None
    machine: dict[str, Any] | None = None
    rule: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "judge": self.judge, "rounds": self.rounds, "stop": self.stop,
            "machine": self.machine, "rule": self.rule, "warnings": self.warnings,
            "plans": [{"name": p.name, "cost_ms": p.cost_ms, "interval": p.interval.to_dict(),
                       "device_costs_ms": p.device_costs_ms, "bottleneck": p.bottleneck} for p in self.plans],
            "comparisons": [c.to_dict() for c in self.comparisons],
        }


def compare_plans(
    instance: Instance,
    plans: Sequence[Plan],
    names: Sequence[str],
    backend: str = "cpu",
    *,
    repeats: int | str = "auto",
    target: float = 0.02,
    time_cap_s: float = 120.0,
    warmup: int = 3,
    seed: int = 0,
    threads: int = 1,
    comm: str = "modelled",
    progress: Callable[[int, int], None] | None = None,
    reference: str = "first",
    rule: StopRule | None = None,
) -> CompareReport:
    """Judge `plans` together and compare each with the first (`reference="first"`) or with the one judged cheapest
    (`reference="fastest"`: `solve --pick`; the report then lists that plan first). A given stop `rule` replaces the
    one `repeats`, `target` and `time_cap_s` make. Raises PlanError for an invalid plan (its name in the message),
    EvaluationError for bad settings or an unavailable backend."""
    if reference not in ("first", "fastest"):
        raise ValueError(f"reference: {reference!r} is not 'first' or 'fastest'")
    if backend not in BACKENDS:
        raise UnknownBackendError(backend)
    if len(plans) < 2:
        raise EvaluationError(f"compare needs at least 2 plans, got {len(plans)}")
    if len(names) != len(plans):
        raise ValueError("one name per plan")
    from shardopt.measure.plan_timing import host_memory_refusal, mixed_hardware_refusal

    if rule is None:
        rule = stop_rule(repeats, target, time_cap_s)
    warnings = []
    for name, plan in zip(names, plans):
        check = check_plan(instance, plan)
        if not check.ok:
            raise PlanError(check.violations, context=name)
        w = hash_warning(instance, plan)
        if w:
            warnings.append(f"{name}: {w}")
        why = host_memory_refusal(backend, plan)
        if why:
            raise EvaluationError(f"{name}: {why}")
    why = mixed_hardware_refusal(backend, instance)
    if why:
        raise EvaluationError(why)
    if backend not in MEASURED_BACKENDS:
        return _compare_simulated(instance, plans, names, backend, warnings, reference)
    return _compare_measured(instance, plans, names, backend, rule, warmup=warmup, seed=seed, threads=threads,
                             progress=progress, warnings=warnings, comm=comm, reference=reference)


def _reference_index(costs: Sequence[float], reference: str) -> int:
    return min(range(len(costs)), key=lambda i: (costs[i], i)) if reference == "fastest" else 0


def _compare_simulated(instance: Instance, plans: Sequence[Plan], names: Sequence[str], backend: str,
                       warnings: list[str], reference: str = "first") -> CompareReport:
    from costmodels.analytic import AnalyticCostModel
    from shardopt.measure.evaluate import cost_model_label

    model = AnalyticCostModel()
    results = []
    for name, plan in zip(names, plans):
        c = model.plan_costs(instance, plan)
        results.append(PlanResult(name, c.max_cost, Interval(c.max_cost, c.max_cost, c.max_cost),
                                  c.total.tolist(), c.bottleneck))
    k = _reference_index([r.cost_ms for r in results], reference)
    results = [results[k]] + results[:k] + results[k + 1:]
    ref = results[0]
    comparisons = []
    for r in results[1:]:
        pct = 100.0 * (ref.cost_ms - r.cost_ms) / ref.cost_ms if ref.cost_ms else 0.0
        comparisons.append(Comparison(ref.name, r.name, Interval(pct, pct, pct)))
    return CompareReport(backend, f"{cost_model_label(model, instance)}, simulated", results, comparisons,
                         warnings=warnings, rule="deterministic")


def _compare_measured(instance: Instance, plans: Sequence[Plan], names: Sequence[str], backend: str, rule: StopRule,
                      *, warmup: int, seed: int, threads: int, progress: Callable[[int, int], None] | None,
                      warnings: list[str], comm: str = "modelled", reference: str = "first") -> CompareReport:
    from shardopt.measure.backends.base import BackendUnavailable
    from shardopt.measure.plan_timing import MeasureError, measure_plans

    try:
        m, _ = measure_plans(instance, plans, backend, rule, warmup=warmup, seed=seed, threads=threads, progress=progress,
                             comm=comm)
    except BackendUnavailable as exc:
        raise BackendUnavailableError(backend, str(exc)) from None
    except MeasureError as exc:
        raise EvaluationError(str(exc)) from None
    results = []
    for name, ps, iv in zip(names, m.samples, m.intervals):
        f, b = ps.device_medians()
        totals = f + b + ps.fixed_ms
        results.append(PlanResult(name, ps.plan_cost(), iv, totals.tolist(), int(totals.argmax())))
    k = _reference_index([r.cost_ms for r in results], reference)
    order = [k] + [i for i in range(len(results)) if i != k]
    results = [results[i] for i in order]
    comparisons = [compare_paired(m.samples[k], m.samples[i], names=(names[k], names[i]), seed=seed) for i in order[1:]]
    kernels = sorted({kernel_label(lab) for plan_labels in m.labels for lab in plan_labels if lab})
    profile = instance.topology.hardware
    comm_what = "all-to-all measured (CPU gloo)" if comm == "measured" else f"all-to-all modelled (analytic, {profile} profile)"
    judge = f"{'; '.join(kernels)} on {m.hardware}, measured compute (interleaved across plans and devices); {comm_what}"
    return CompareReport(backend, judge, results, comparisons, rounds=m.stop.rounds, stop=vars(m.stop),
                         machine=m.machine.to_dict() if m.machine else None, rule=rule.describe(), warnings=warnings)
