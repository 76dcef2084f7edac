"""The entry point: `analytic_lower_bound` picks the way to a bound (a counting argument, the symmetric LP, the
full relaxation, the table cuts) and reports it as an `AnalyticBound`; `plan_gap` says how far a plan can at
most be from the best covered plan.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from costmodels.analytic import AnalyticCostModel
from costmodels.base import CostModel
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Kernel, Plan, Shard
from shardopt.core.sharding_types import COLUMN_WISE, DATA_PARALLEL, ROW_WISE, TABLE_ROW_WISE, TABLE_WISE, allowed_types
from solvers.bound.context import AnalyticRelaxation, mixed_envelope, network_pooling
from solvers.bound.milp import build_relaxation, pair_fits
from solvers.bound.solve import _solve_highs, relaxation_plan
from solvers.bound.symmetric import classes_lp_bound, devices_interchangeable, symmetric_lp_bound
from solvers.bound.table_cuts import table_cut_bound
from solvers.bound.terms import BoundError
from solvers.status import BoundStatus


def _group_word(ctx: AnalyticRelaxation) -> str:
    """What a table-row-wise split spans: a host, or an NVLink domain of hosts (Topology.intra_group_size)."""
    topo = ctx.bm.instance.topology
    return "host" if topo.intra_group_size == topo.devices_per_host else f"NVLink group of {topo.intra_group_size} devices"


def _roomy_envelope_instance(instance: Instance, cost_model: CostModel | None) -> Instance | None:
    """`instance` with every device's HBM and host memory the largest device's, where the bound prices it on the
    kinds' envelope (a job that mixes kinds, the analytic model of each device's own profile, no placement
    constraints) and its devices' memories differ; None otherwise."""
    topo = instance.topology
    if mixed_envelope(instance) is None or (cost_model is not None and getattr(cost_model, "profile_name", None) is not None):
        return None
    if instance.constraint_kinds() or (len(set(topo.capacities())) == 1 and len(set(topo.host_capacities())) == 1):
        return None
    roomy = topo.model_copy(update={"memory_bytes": max(topo.capacities()), "host_memory_bytes": max(topo.host_capacities())})
    return instance.model_copy(update={"topology": roomy})


def _envelope_words(ctx: AnalyticRelaxation) -> str:
    """How a job that mixes hardware kinds is bounded (nothing for one kind)."""
    p = ctx.bm.profile
    if not p.name.startswith("envelope("):
        return ""
    return (f" with every device priced on the {p.name[len('envelope('):-1].replace('+', ' / ')} envelope (each figure at its "
            "fastest: a bound of the mixed job, looser than one per kind)")


def _network_words(ctx: AnalyticRelaxation) -> str:
    """How topology levels beyond the bound's two roles are priced (nothing where the terms are exact)."""
    pooled = network_pooling(ctx.bm.instance)
    return f" with the network's all-to-all bounded from below ({pooled})" if pooled else ""


def covers_text(ctx: AnalyticRelaxation, table_wise: bool) -> str:
    """The plans a bound of `ctx` covers, in words (what `AnalyticBound.covers` says)."""
    where = "in HBM or host memory (UVM kernels)" if ctx.host_memory else "in HBM"
    not_host = "" if ctx.host_memory else f" or host-memory (UVM) shards ({ctx.host_reason})"
    if table_wise:
        return (f"every table-wise plan {where} (each table whole on one device), under the analytic cost model{_envelope_words(ctx)}; not "
                f"column-, row-wise or data-parallel shards{not_host}, not other cost models{_network_words(ctx)}")
    reps, rows = bool(ctx.replicable.any()), bool(ctx.row_split.any() or ctx.host_row_split.any())
    kinds = ["table-wise", "column-wise"] + (["row-wise"] if rows else []) + (["data-parallel"] if reps else [])
    missing = ([] if rows else ["row-wise"]) + ([] if reps else ["data-parallel"])
    return (f"every plan of {', '.join(kinds[:-1])} and {kinds[-1]} shards {where} (column splits into shards whose widths are "
            f"multiples of {DIM_ALIGNMENT}, several shards of one table on one device, or one whole shard marked column_wise, included"
            + (f"; row splits over any devices or within one {_group_word(ctx)}" if rows else "")
            + ("; a replica of every table that may be replicated" if reps else "")
            + "), under the analytic cost model" + _envelope_words(ctx) + "; not row x column blocks (grid)"
            + (f", {' or '.join(missing)} shards" if missing else "") + f"{not_host}, not other cost models{_network_words(ctx)}")


FULL_RELAXATION_MAX_PAIRS = 20_000  # above this many (table, device) pairs, interchangeable devices get the symmetric LP only
MAX_FULL_PAIRS = 200_000  # nor is the full relaxation built for devices that differ beyond this many (~14 KB a pair: 24 GB at 3,424 x 512)


@dataclass
class AnalyticBound:
    """A certified lower bound of the analytic plan cost (ms) over the plans `covers` names.

    status (solvers.status.BoundStatus): `optimal` (the relaxation was solved to HiGHS's gap MIP_REL_GAP; value = its
    dual bound), `bound` (the time limit came first; value = the dual bound proven by then, still a bound),
    `infeasible` (the relaxation has no solution: no covered plan fits in memory; `reason` says why; value = +inf).
    source: "relaxation" (HiGHS's bound of the relaxation), "symmetric LP" (its LP bound solved with the devices'
    variables equal, `build_symmetric_lp`: for interchangeable devices, when the full relaxation is too large or its
    LP ran out of time), "class LP" (the same with one copy per class of devices that differ in memory, host by host:
    solvers.bound.kinds), "per-kind LP" (a job that mixes hardware kinds, each class on its kind's profile), or "table
    cuts" when nothing else was proven within the limit (value = `table_cut_bound`, valid but weak).
    """

    value_ms: float
    status: BoundStatus
    table_wise: bool
    solver: str
    time_s: float
    covers: str
    cost_model: str = "analytic"
    relaxation_primal_ms: float | None = None  # the best solution of the relaxation found (>= value_ms)
    lp_bound_ms: float | None = None  # the LP relaxation's optimum (<= value_ms)
    plan_cost_ms: float | None = None  # analytic cost of the plan that solution describes (>= value_ms: a real plan)
    plan: Plan | None = None  # that plan (`relaxation_plan`)
    variables: int = 0
    rows: int = 0
    integer_variables: int = 0
    multipliers: int = 0  # knapsack multipliers per device
    reason: str | None = None
    solver_message: str = ""
    info: dict[str, Any] = field(default_factory=dict)  # free-form diagnostics (no caller reads them)
    source: str = "relaxation"
    # whether the bound counts the instance's placement constraints (None: it has none); False: a bound of every plan,
    # so of the constrained ones too
    constraints_counted: bool | None = None
    # the least bound per plan class (by the collectives a plan runs; None: not solved in time), and the refined ones
    # by row class: which kind of plan the bound is tight for (solvers.bound.classes.classes_lp_bound)
    plan_classes: dict[str, float | None] = field(default_factory=dict)
    plan_classes_by_rows: dict[str, dict[str, float]] = field(default_factory=dict)
    envelope_bound_ms: float | None = None  # a mixed job's per-kind LP: the looser bound on its kinds' envelope beside it
    covers_replicas: bool = False  # data-parallel replicas are among the covered plans
    covers_host_memory: bool = False  # so are shards in host memory (UVM kernels)
    covers_row_splits: bool = False  # so are tables split by rows (row_wise, table_row_wise)

    def __post_init__(self) -> None:
        self.status = BoundStatus(self.status)  # (a status outside the vocabulary is a bug, here rather than in a caller)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("plan")
        d["status"] = self.status.value
        if not math.isfinite(self.value_ms):
            d["value_ms"] = None
        return d


def analytic_lower_bound(
    instance: Instance,
    cost_model: CostModel | None = None,
    *,
    time_limit: float = 10.0,
    table_wise: bool = False,
    backend: str = "highs",
    per_type: bool = True,
    replicas: bool = True,
    host_memory: bool = True,
    row_splits: bool = True,
) -> AnalyticBound:
    """A certified lower bound of the analytic max-device cost of every table- and column-wise plan of `instance`
    (with `table_wise`: of every table-wise plan, a tighter bound of fewer plans). BoundError for a cost model other
    than the analytic one or an unknown backend. The bound is HiGHS's dual bound of the relaxation at the time
    limit, a bound whether or not the relaxation was solved to optimality. `per_type=False`: the full relaxation
    prices one all-to-all of the summed widths, as before the per-type rows (a weaker bound, for comparisons).
    `replicas` / `host_memory` / `row_splits` False: data-parallel replicas / shards in host memory / row splits are
    left out of the covered plans (a bound of fewer plans, for comparisons); on, they are covered where the instance
    allows them. A job that mixes hardware kinds gets the higher of the per-kind LP (each device on its own kind) and
    the kinds' envelope: `_mixed_kinds_bound`."""
    if backend != "highs":
        raise BoundError(f"backend {backend!r}: the bound is computed with HiGHS only (backend 'highs')")
    if mixed_envelope(instance) is not None and getattr(cost_model, "profile_name", None) is None:
        return _mixed_kinds_bound(instance, cost_model, time_limit=time_limit, table_wise=table_wise, per_type=per_type,
                                  replicas=replicas, host_memory=host_memory, row_splits=row_splits)
    return _lower_bound(instance, cost_model, time_limit=time_limit, table_wise=table_wise, per_type=per_type, replicas=replicas,
                        host_memory=host_memory, row_splits=row_splits)


def _mixed_kinds_bound(instance: Instance, cost_model: CostModel | None, *, time_limit: float, table_wise: bool, per_type: bool,
                       replicas: bool, host_memory: bool, row_splits: bool) -> AnalyticBound:
    """A job that mixes hardware kinds: the per-kind LP (solvers.bound.kinds: each device on its own kind) bounds its
    plans (table- and column-wise shards, replicas, row splits, in HBM and, where every kind's relaxation covers it,
    in host memory); the kinds' envelope bounds the same plans far more loosely. The higher of the two where the
    per-kind LP answers, which then says what it covers (the envelope's value and coverage stay in `info`)."""
    from solvers.bound.kinds import device_classes, kinds_lp_bound

    start = time.perf_counter()
    kinds, kinds_host = ((kinds_lp_bound(instance, table_wise, max(0.1, 0.25 * time_limit), replicas, row_splits, host_memory))
                         if cost_model is None or isinstance(cost_model, AnalyticCostModel) else (None, False))
    left = max(0.1, time_limit - (time.perf_counter() - start))
    out = _lower_bound(instance, cost_model, time_limit=left, table_wise=table_wise, per_type=per_type, replicas=replicas,
                       host_memory=host_memory, row_splits=row_splits)
    out.time_s = time.perf_counter() - start
    classes = device_classes(instance)
    if kinds is None or not math.isfinite(kinds) or kinds <= out.value_ms or out.status is BoundStatus.infeasible:
        why = (classes if isinstance(classes, str) else "HiGHS did not finish it in time" if kinds is None
               else "no covered plan fits" if not math.isfinite(kinds) else f"{kinds:.6g} ms, no higher")
        out.info["per_kind_lp"] = why
        return out
    names = " / ".join(dict.fromkeys(c.kind for c in classes))
    reps = replicas and not table_wise and out.covers_replicas
    rows = row_splits and not table_wise and out.covers_row_splits
    host = kinds_host and out.covers_host_memory
    where = "in HBM or host memory (UVM kernels)" if host else "in HBM"
    if table_wise:
        what = f"every table-wise plan {where} (each table whole on one device)"
    else:
        kinds_of = ["table-wise", "column-wise"] + (["row-wise"] if rows else []) + (["data-parallel"] if reps else [])
        what = (f"every plan of {', '.join(kinds_of[:-1])} and {kinds_of[-1]} shards {where} (column splits into shards whose "
                f"widths are multiples of {DIM_ALIGNMENT}" + ("; row splits over any devices or within one host" if rows else "") + ")")
    missing = ([] if rows or table_wise else ["row-wise"]) + ([] if host else ["host-memory (UVM)"])
    covers = (f"{what}, under the analytic cost model with each device priced on its own kind's profile ({names}); "
              + (f"not {' or '.join(missing)} shards, " if missing else "") + "not row x column blocks, not other cost models (the "
              f"kinds' envelope bound, {out.value_ms:.6g} ms, is looser"
              + (" and covers host-memory shards too)" if out.covers_host_memory and not host else ")"))
    info = dict(out.info, envelope_covers=out.covers, envelope_source=out.source)
    return AnalyticBound(kinds, BoundStatus.bound, table_wise, "HiGHS (scipy.optimize.milp)", time.perf_counter() - start, covers, out.cost_model,
                         source="per-kind LP", info=info, constraints_counted=out.constraints_counted, envelope_bound_ms=out.value_ms, covers_replicas=reps, covers_host_memory=host, covers_row_splits=rows,
                         solver_message="the LP relaxation with one copy of the device variables per class of devices (kind, HBM, host "
                         "memory), each class on its kind's profile")


def _lower_bound(instance: Instance, cost_model: CostModel | None, *, time_limit: float, table_wise: bool, per_type: bool,
                 replicas: bool, host_memory: bool, row_splits: bool) -> AnalyticBound:
    """`analytic_lower_bound` of one kind, or of a mixed job on its kinds' envelope."""
    start = time.perf_counter()
    roomy = _roomy_envelope_instance(instance, cost_model)
    if roomy is not None:
        # a job that mixes kinds is bounded on the kinds' envelope, every device alike but for its memory: with the
        # largest device's memory on every device (more room, more plans: still a bound) the devices are
        # interchangeable, and the symmetric LP answers where the full relaxation over devices that differ would not
        out = _lower_bound(roomy, cost_model, time_limit=time_limit, table_wise=table_wise, per_type=per_type, replicas=replicas,
                           host_memory=host_memory, row_splits=row_splits)
        out.covers += "; every device's memory taken as the largest device's"
        out.time_s = time.perf_counter() - start
        return out
    ctx = AnalyticRelaxation(instance, cost_model, replicas=replicas, host_memory=host_memory, row_splits=row_splits)
    model_name = (cost_model or AnalyticCostModel()).name
    covers = covers_text(ctx, table_wise)
    flags = dict(covers_replicas=bool(ctx.replicable.any()) and not table_wise, covers_host_memory=ctx.host_memory,
                 covers_row_splits=bool(ctx.row_split.any() or ctx.host_row_split.any()) and not table_wise)
    reason = _memory_reason(instance, ctx, table_wise) or _constraint_reason(instance, ctx, table_wise)
    if reason is not None:
        return AnalyticBound(math.inf, BoundStatus.infeasible, table_wise, "a counting argument (no solver needed)", time.perf_counter() - start, covers,
                             model_name, reason=reason, **flags)
    if instance.constraint_kinds():
        free = instance.model_copy(update={"constraints": None})
        if np.count_nonzero(pair_fits(free, ctx.terms, table_wise, ctx.host_memory)) > FULL_RELAXATION_MAX_PAIRS:
            # too large for the full relaxation, which alone carries the constraints (pins make the devices differ,
            # so the symmetric LP does not hold for it): the bound of every plan, also a bound of the constrained ones
            out = analytic_lower_bound(free, cost_model, time_limit=max(0.1, time_limit - (time.perf_counter() - start)),
                                       table_wise=table_wise, per_type=per_type, replicas=replicas, host_memory=host_memory,
                                       row_splits=row_splits)
            out.constraints_counted = _constraints_counted(instance, counted=False)
            out.time_s = time.perf_counter() - start
            return out
    solver = "HiGHS (highspy; LPs by scipy.optimize.milp)"
    symmetric = devices_interchangeable(instance)
    sym: float | None = None  # the relaxation's LP bound the cheap way (build_symmetric_lp), solved only when needed
    n_pairs = int(np.count_nonzero(pair_fits(instance, ctx.terms, table_wise, ctx.host_memory)))
    if not symmetric and n_pairs > FULL_RELAXATION_MAX_PAIRS and not instance.constraint_kinds():
        # devices that differ only in memory, host by host: the class LP (one copy of the device variables per memory
        # class) answers where the full relaxation's LP does not in time (856 x 128 with two HBM sizes: 9 s against
        # nothing in 60); where it does not hold or did not finish, the full relaxation as before
        classes = _class_lp(instance, cost_model, ctx, table_wise, replicas, row_splits, max(0.1, 0.8 * time_limit))
        if classes is not None:
            return AnalyticBound(classes, BoundStatus.bound, table_wise, solver, time.perf_counter() - start, covers, model_name, source="class LP", **flags,
                                 solver_message=f"{n_pairs:,} (table, device) pairs on devices that differ in memory: the LP relaxation "
                                 "with one copy of the device variables per class of devices (HBM, host memory)")
    if symmetric and n_pairs > FULL_RELAXATION_MAX_PAIRS:
        sym = symmetric_lp_bound(ctx, table_wise, max(0.1, 0.8 * time_limit))  # (the classes get what is left)
        if sym is None or not math.isfinite(sym):
            # never the full relaxation at this size (3,424 x 512: ~24 GB); the symmetric LP's "infeasible" is the
            # relaxation's, and without an answer in time the bound that needs no solver stands
            elapsed = time.perf_counter() - start
            if sym is not None:
                return AnalyticBound(math.inf, BoundStatus.infeasible, table_wise, solver, elapsed, covers, model_name, source="symmetric LP", **flags,
                                     reason="no plan of the covered kinds fits in the devices' memory (HiGHS proved the LP relaxation infeasible)")
            return AnalyticBound(table_cut_bound(ctx, table_wise), BoundStatus.bound, table_wise, solver, elapsed, covers, model_name, source="table cuts",
                                 solver_message=f"the symmetric LP did not finish within {0.8 * time_limit:g} s ({n_pairs:,} pairs: too large "
                                 "for the full relaxation); a longer --time-limit gives its bound", **flags)
    elif n_pairs > MAX_FULL_PAIRS:  # devices that differ, and too many pairs to build the relaxation in memory
        return AnalyticBound(table_cut_bound(ctx, table_wise), BoundStatus.bound, table_wise, solver, time.perf_counter() - start, covers, model_name,
                             source="table cuts", **flags,
                             solver_message=f"{n_pairs:,} (table, device) pairs on devices that differ: beyond what the full relaxation "
                             f"is built for ({MAX_FULL_PAIRS:,}); the bound that needs no solver")
    if sym is not None and math.isfinite(sym):
        # too large to branch on (856 x 128: building alone ~11 s, the LP not done in 20 s); the symmetric LP is the
        # one-all-to-all relaxation's LP bound (build_symmetric_lp), of every plan: constraints only take plans away.
        # With the time left, the per-type judge's classes (classes_lp_bound: by the collectives a plan runs, each
        # start-up paid whole) each bounded apart, the least of them
        classes: dict[str, float | None] = {}
        by_rows: dict[str, dict[str, float]] = {}
        value, how = sym, "one all-to-all of the summed widths"
        left = 0.9 * time_limit - (time.perf_counter() - start)
        if not table_wise and left > 0:
            found = classes_lp_bound(ctx, left)
            classes, by_rows = found.classes, found.by_rows or {}
            if found.value is not None and found.value > sym:
                value, how = found.value, ("the least over plan classes (by the collectives they run: table-wise only, column-wise only, "
                                           "both, neither; with or without row splits)")
        return AnalyticBound(
            value_ms=value, status=BoundStatus.bound, table_wise=table_wise, solver=solver, time_s=time.perf_counter() - start, covers=covers,
            cost_model=model_name, lp_bound_ms=sym, multipliers=len(ctx.lams), source="symmetric LP",
            solver_message=f"LP relaxation with the devices' variables equal ({n_pairs:,} pairs: not branched on): {how}",
            constraints_counted=_constraints_counted(instance, counted=False), plan_classes=classes, plan_classes_by_rows=by_rows, **flags,
        )
    return _full_relaxation_bound(instance, ctx, table_wise=table_wise, per_type=per_type, symmetric=symmetric,
                                  time_limit=time_limit, start=start, covers=covers, model_name=model_name, solver=solver, flags=flags)


def _full_relaxation_bound(instance: Instance, ctx: AnalyticRelaxation, *, table_wise: bool, per_type: bool, symmetric: bool,
                           time_limit: float, start: float, covers: str, model_name: str, solver: str,
                           flags: dict[str, bool]) -> AnalyticBound:
    """The full relaxation (`build_relaxation`) branched on by HiGHS in the time left since `start`: the bound of the
    instances small enough to build it whole; `_lower_bound`'s last case."""
    model, layout = build_relaxation(ctx, table_wise, per_type=per_type)
    left = max(0.1, 0.97 * time_limit - 0.1 - (time.perf_counter() - start))  # a reserve for judging the plan
    res = _solve_highs(model, layout, left)
    elapsed = time.perf_counter() - start
    sizes = dict(variables=model.n_vars, rows=model.n_rows, integer_variables=int(sum(model.integer)), multipliers=len(ctx.lams))
    if res["status"] is BoundStatus.infeasible:
        why = ("no assignment of whole tables fits in the devices' memory (HiGHS proved the bin packing infeasible)" if table_wise else
               "no split of the tables into column shards (widths multiples of 4) fits in the devices' memory "
               "(HiGHS proved the memory rows of the relaxation infeasible)")
        return AnalyticBound(math.inf, BoundStatus.infeasible, table_wise, solver, elapsed, covers, model_name, reason=why,
                             solver_message=res["message"], **sizes, **flags)
    plan = relaxation_plan(ctx, layout, res["x"], model_name) if res["x"] is not None else None
    plan_cost = ctx.bm.plan_costs(plan).max_cost if plan is not None else None
    value, source, lp_bound = res["bound"], "relaxation", res["lp_bound"]
    if lp_bound is None and symmetric:  # the full LP ran out of time: the same LP bound, the cheap way
        sym = symmetric_lp_bound(ctx, table_wise, max(0.1, time_limit - (time.perf_counter() - start)))
        if sym is not None and math.isfinite(sym):
            lp_bound = sym
            if sym > value:
                value, source = sym, "symmetric LP"
    if not math.isfinite(value):  # HiGHS proved nothing in time (not even the LP): the bound that needs no solver
        value, source = table_cut_bound(ctx, table_wise), "table cuts"  # (its values computed for the relaxation's rows)
    return AnalyticBound(
        value_ms=value, status=res["status"], table_wise=table_wise, solver=solver, time_s=time.perf_counter() - start, covers=covers,
        cost_model=model_name, relaxation_primal_ms=res["primal"], lp_bound_ms=lp_bound, plan_cost_ms=plan_cost, plan=plan,
        solver_message=res["message"], source=source, **sizes, constraints_counted=_constraints_counted(instance, counted=source == "relaxation"), **flags,
    )


def _class_lp(instance: Instance, cost_model: CostModel | None, ctx: AnalyticRelaxation, table_wise: bool, replicas: bool, row_splits: bool,
              time_limit: float) -> float | None:
    """The class LP's bound (solvers.bound.kinds.kinds_lp_bound) of a job of one kind whose devices differ in memory,
    where it covers the same plans as `ctx` (host memory included where `ctx` covers it); None where it does not
    hold (placement constraints, a host of two classes, levels), did not finish, or the job mixes kinds."""
    from solvers.bound.kinds import kinds_lp_bound

    if instance.topology.is_mixed:
        return None
    value, host = kinds_lp_bound(instance, table_wise, time_limit, replicas, row_splits, ctx.host_memory, cost_model)
    if value is None or not math.isfinite(value) or host != ctx.host_memory:
        return None  # (its +inf is left to the full relaxation and the counting arguments to prove with a reason)
    return value


def _constraints_counted(instance: Instance, counted: bool) -> bool | None:
    """Whether the bound counts the instance's placement constraints (None: it has none): the relaxation carries them
    (solvers.bound.milp); the symmetric LP and the table cuts bound every plan, also a bound of the plans that meet them."""
    return counted if instance.constraint_kinds() else None


def _constraint_reason(instance: Instance, ctx: AnalyticRelaxation, table_wise: bool) -> str | None:
    """Why no covered plan meets the placement constraints, where that follows from one table's constraint alone."""
    c = instance.constraints
    for tc in c.tables if c is not None else []:
        if tc.kernels is not None and Kernel.fused not in tc.kernels and not ctx.host_memory:
            return (f"table {tc.table!r} may not be in HBM (its constraint allows {', '.join(k.value for k in tc.kernels)}), and the bound "
                    f"covers HBM plans here ({ctx.host_reason})")
        types = allowed_types(instance.topology, tc.sharding_types)
        t = instance.table_index()[tc.table]
        if types is None or TABLE_WISE in types or (COLUMN_WISE in types and not table_wise):
            continue
        if not table_wise and DATA_PARALLEL in types and ctx.replicable[t]:
            continue
        if not table_wise and ((ROW_WISE in types and ctx.row_split[t]) or (TABLE_ROW_WISE in types and (ctx.row_split[t] or ctx.host_row_split[t]))):
            continue
        return f"table {tc.table!r} may be only {', '.join(types)}, which no plan the bound covers is ({covers_text(ctx, table_wise)})"
    return None


def _memory_reason(instance: Instance, ctx: AnalyticRelaxation, table_wise: bool) -> str | None:
    """Counting arguments that prove no covered plan fits: a table none of whose shards fits anywhere; the tables'
    least bytes (one shard each) beyond the devices' total (their host memory included where it is covered; a
    shard there keeps its `mem_fixed` optimizer state in HBM). A table that may be split by rows fits anywhere in
    pieces: only the total counts for it."""
    terms = ctx.terms
    caps = instance.topology.capacities()
    hosts = instance.topology.host_capacities() if ctx.host_memory else [0] * len(caps)
    opt = instance.workload.optimizer.value
    where = "the largest device holds" if not ctx.host_memory else "the largest device and its host memory hold"
    room = max(c + h for c, h in zip(caps, hosts))
    for i, tab in enumerate(instance.tables):
        if not table_wise and (ctx.row_split[i] or ctx.host_row_split[i]):
            continue  # (a row block can be as small as one row)
        need = terms.mem_col[i] * (tab.dim if table_wise else DIM_ALIGNMENT) + terms.mem_fixed[i]
        if need > room or terms.mem_fixed[i] > max(caps):
            what = "the whole table" if table_wise else f"even a {DIM_ALIGNMENT}-column shard"
            return f"table {tab.name!r}: {what} needs {int(need):,} bytes (weights and {opt} state) but {where} {int(room):,} bytes"
    least = float((terms.mem_col * terms.dims + terms.mem_fixed).sum())
    if least > sum(caps) + sum(hosts):
        return (f"the tables need at least {int(least):,} bytes (weights and {opt} state, one shard each) but the "
                f"{len(caps)} devices hold {sum(caps) + sum(hosts):,}{' with their host memory' if ctx.host_memory else ''}: "
                f"short by {int(least - sum(caps) - sum(hosts)):,} bytes")
    return None


def uncovered_reason(shards: list[Shard], table_wise: bool = False, bound: AnalyticBound | None = None) -> str | None:
    """Why a plan is outside what a bound covers (its gap to the bound is then not certified), or None when the
    bound covers it: row x column blocks never; data-parallel replicas, row splits and shards in host memory where
    `bound` says it covers them (without a bound: not); column-wise shards not for a table-wise bound."""
    if any(s.replicated for s in shards) and not (bound is not None and bound.covers_replicas):
        return "it has data-parallel replicas, which the bound does not cover"
    by_rows = [s for s in shards if (s.row_offset or s.rows is not None) and not s.replicated]
    if by_rows and any(s.col_offset or s.cols is not None for s in by_rows):
        return "it has row x column blocks (grid_shard), which the bound does not cover"
    if by_rows and not (bound is not None and bound.covers_row_splits):
        return "it has row-wise shards, which the bound does not cover"
    if any(s.kernel is not Kernel.fused for s in shards) and not (bound is not None and bound.covers_host_memory):
        return "it has shards in host memory (UVM kernels), which the bound does not cover"
    if table_wise and any(s.col_offset or s.cols is not None for s in shards):
        return "it splits tables by columns, but a table-wise bound covers table-wise plans only"
    return None


def plan_gap(instance: Instance, plan_cost: float | Plan, bound: AnalyticBound | float, cost_model: CostModel | None = None) -> float:
    """(cost - bound) / cost: how far a plan can at most be from the best covered plan. `plan_cost` may be a Plan,
    judged by the analytic model (`cost_model`, else the one the bound was computed for)."""
    if isinstance(plan_cost, Plan):
        if cost_model is None:
            from costmodels.registry import get_cost_model

            cost_model = get_cost_model(bound.cost_model if isinstance(bound, AnalyticBound) else "analytic")
        plan_cost = cost_model.plan_costs(instance, plan_cost).max_cost
    value = bound.value_ms if isinstance(bound, AnalyticBound) else float(bound)
    return (float(plan_cost) - value) / float(plan_cost) if plan_cost > 0 else 0.0
