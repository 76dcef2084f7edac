"""Solving a 2D instance: one sharding group's plan, and the group size G when the instance leaves it to the planner.

Why every solver goes through here (solvers.base routes an instance with a `two_d` section to `solve_in_groups`):
the group is planned as the flat instance `group_instance(instance, G)` by the solver asked for, and the iteration
costs that plan's embedding cost plus the replica sync (costmodels/replica_sync.py). With `group_size: auto` every G
that forms groups is scouted with a fast solver (`SCOUT_SOLVER` on a work budget of `SCOUT_WORK_S`), and the `REFINED` cheapest by scout cost are solved
again by the solver asked for; the cheapest total wins. A scout that finds no plan for a G still lets the refinement
try it when fewer than `REFINED` G have plans. docs/analytic-model.md, "2D sparse parallelism".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from costmodels.base import CostModel
from costmodels.replica_sync import ReplicaSync, replica_sync
from shardopt.core.ir import Instance, Plan, PlanStatus
from shardopt.core.sharding_groups import candidate_group_sizes, group_instance
from solvers.results import GroupSizeTrial, SolveResult, TwoDChoice
from solvers.status import SolveStatus, StopReason

# the scout: NeuroShard on a short work budget. greedy's plans cost far more on large groups than a search's, so its
# ranking sent the refinement to small groups: on MLPerf DLRMv2 grown to 4,096 H100s it chose G = 64 (2.62 ms, simulated),
# where this scout's ranking leads to G = 512 (1.67 ms at its budget); 13 group sizes scouted in 15 s (docs/results/two-d.md)
SCOUT_SOLVER = "neuroshard"
SCOUT_WORK_S = 0.3
REFINED = 3  # group sizes solved again by the solver asked for
SCOUT_RISES = 2  # scouting stops after this many sizes in a row each dearer than the one before and than the best

InnerSolve = Callable[[Instance, CostModel, float | None, int], SolveResult]
_scouts: dict[str, InnerSolve] = {}  # the scout's flat solve, registered by solvers.catalog (which may import solvers)


def register_scout(name: str, solve: InnerSolve) -> None:
    """The scout's flat solve (solvers.catalog registers SCOUT_SOLVER's: this module sits below the solvers, whose base
    routes 2D instances here, so it cannot import them). Without one, the solver asked for scouts too."""
    _scouts[name] = solve


@dataclass(frozen=True)
class _Tried:
    trial: GroupSizeTrial
    result: SolveResult | None
    sync: ReplicaSync | None


def planned_instance(instance: Instance, plan: Plan) -> Instance:
    """The flat instance a plan places: its sharding group's where the plan is a 2D instance's group plan."""
    if instance.two_d is not None and plan.sharding_group_size is not None:
        return group_instance(instance, plan.sharding_group_size)
    return instance


def _trial(instance: Instance, g: int, name: str, solve: InnerSolve, cost_model: CostModel, time_limit: float | None,
           seed: int, refined: bool) -> _Tried:
    sub = group_instance(instance, g)
    t0 = time.perf_counter()
    result = solve(sub, cost_model, time_limit, seed)
    wall = time.perf_counter() - t0
    if not result.status.has_plan or result.plan is None:
        trial = GroupSizeTrial(g, name, refined, result.status.value, None, None, wall, result.reason)
        return _Tried(trial, None, None)
    embedding = float(result.plan.predicted_cost if result.plan.predicted_cost is not None else result.predicted.max_cost)
    sync = replica_sync(instance, result.plan, g)
    return _Tried(GroupSizeTrial(g, name, refined, result.status.value, embedding, sync.ms, wall, None), result, sync)


def solve_in_groups(name: str, solve: InnerSolve, instance: Instance, cost_model: CostModel, time_limit: float | None,
                    seed: int) -> SolveResult:
    """`solve` (the solver `name`'s flat solve) on the sharding group of a 2D instance: at its fixed group size, or
    at each candidate size as the module docstring says. The result's plan is the group's, marked with its size."""
    assert instance.two_d is not None
    t0 = time.perf_counter()
    fixed = instance.two_d.fixed_group_size
    sizes = [(fixed, None)] if fixed is not None else candidate_group_sizes(instance)
    tried: list[_Tried] = [_Tried(GroupSizeTrial(g, "", False, "not_formed", None, None, 0.0, why), None, None)
                           for g, why in sizes if why is not None]
    formed = [g for g, why in sizes if why is None]
    if fixed is not None or len(formed) <= 1:
        tried += [_trial(instance, g, name, solve, cost_model, time_limit, seed, True) for g in formed]
    else:
        scout_name, scout = (SCOUT_SOLVER, _scouts[SCOUT_SOLVER]) if SCOUT_SOLVER in _scouts else (name, solve)
        scouted = _scout(instance, formed, scout_name, scout, cost_model, seed)
        ranked = sorted((t for t in scouted if t.result is not None), key=lambda t: (t.trial.total_ms, t.trial.group_size))
        chosen = [t.trial.group_size for t in ranked[:REFINED]]
        chosen += [t.trial.group_size for t in scouted if t.result is None][: max(0, REFINED - len(chosen))]
        each = None if time_limit is None else max(0.1, (time_limit - (time.perf_counter() - t0)) / max(1, len(chosen)))
        refined = [_trial(instance, g, name, solve, cost_model, each, seed, True) for g in chosen]
        tried += scouted + refined
    return _chosen(name, instance, tried, time.perf_counter() - t0)


def _tried_record(trials: tuple[GroupSizeTrial, ...]) -> list[dict[str, Any]]:
    """The sizes tried with a plan, as the plan records them (`params.two_d.group_sizes`: `inspect --draw` reads them)."""
    return [{"group_size": t.group_size, "solver": t.solver, "refined": t.refined, "embedding_ms": round(t.embedding_ms, 9),
             "sync_ms": round(t.sync_ms, 9)} for t in trials if t.embedding_ms is not None and t.sync_ms is not None]


def _scout(instance: Instance, formed: list[int], name: str, scout: InnerSolve, cost_model: CostModel, seed: int) -> list[_Tried]:
    """The scout's trial of each size, ascending, stopped once `SCOUT_RISES` sizes in a row each cost more than the
    one before and than the best so far: the sync falls and the embedding grows with G, and the largest sizes are the
    dearest to plan (at 4,096 devices a scout of the pool's 428 tables took 95 s). The sizes left are recorded."""
    out: list[_Tried] = []
    rises = 0
    for k, g in enumerate(formed):
        if rises >= SCOUT_RISES:
            best = min((t.trial for t in out if t.result is not None), key=lambda t: t.total_ms)
            why = f"not scouted: the {SCOUT_RISES} sizes below it each cost more than the one before and than G = {best.group_size}'s"
            out += [_Tried(GroupSizeTrial(h, name, False, "not_scouted", None, None, 0.0, why), None, None) for h in formed[k:]]
            break
        tried = _trial(instance, g, name, scout, cost_model, None, seed, False)
        planned = [t.trial.total_ms for t in out if t.result is not None]
        cost = tried.trial.total_ms
        rises = rises + 1 if tried.result is not None and planned and cost > planned[-1] and cost > min(planned) else 0
        out.append(tried)
    return out


def _chosen(name: str, instance: Instance, tried: list[_Tried], wall: float) -> SolveResult:
    trials = tuple(sorted((t.trial for t in tried), key=lambda t: (t.group_size, t.refined)))
    # the winner among the plans of the solver asked for; a scout's plan only where none of those has one
    own = [t for t in tried if t.result is not None and t.trial.refined]
    pool = own or [t for t in tried if t.result is not None]
    if not pool:
        why = "; ".join(f"G = {t.group_size}: {t.why}" for t in trials if t.why) or "no group size formed groups"
        status = SolveStatus.infeasible if all(t.status in ("infeasible", "not_formed") for t in trials) else SolveStatus.no_solution
        return SolveResult(name, status, None, f"no plan for any sharding group size ({why})", wall,
                           two_d=TwoDChoice(None, trials))
    best = min(pool, key=lambda t: (t.trial.total_ms, t.trial.group_size))
    result, sync = best.result, best.sync
    assert result is not None and result.plan is not None and sync is not None
    g = best.trial.group_size
    status = SolveStatus.feasible if result.status is SolveStatus.optimal else result.status  # (the group's optimum is not the job's)
    plan = result.plan.model_copy(update={
        "instance": instance.content_hash(), "sharding_group_size": g, "predicted_cost": best.trial.total_ms,
        "wall_time_s": wall, "status": PlanStatus(status.value),
        "params": {**result.plan.params, "two_d": {**_two_d_params(instance, g, sync), "group_sizes": _tried_record(trials)}}})
    return SolveResult(result.solver, status, plan, result.reason, wall, None, result.predicted, result.info,
                       result.stopped if result.stopped is not StopReason.proven else StopReason.converged,
                       stats=result.stats, work_budget=result.work_budget, two_d=TwoDChoice(g, trials, sync.to_dict()))


def _two_d_params(instance: Instance, g: int, sync: ReplicaSync) -> dict[str, Any]:
    """What the plan records of its 2D setting: DMPCollection's arguments and the sync it was costed with."""
    assert instance.two_d is not None
    return {**instance.two_d.dmp_collection_args(g, instance.topology.num_devices), "sync_ms": round(sync.ms, 9)}
