"""Solving the relaxation with HiGHS (`_solve_highs`: the LP, then the MILP with the time left, per row-split class
where rows may be split), the plan its best point describes (`relaxation_plan`), and its optimum at a fixed plan
(`relaxation_value_at`, the validity check of docs/analytic-bound.md in one number).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from costmodels.base import CostModel
from shardopt.core.ir import DIM_ALIGNMENT, Instance, Plan
from solvers.bound.context import AnalyticRelaxation
from solvers.bound.milp import _Layout, _symmetry_classes, build_relaxation
from solvers.milp import SparseModel, solve_milp, solve_milp_with_dual
from solvers.placement.collectives import join_one_collective
from solvers.status import BoundStatus, SolveStatus, StopReason

MIP_REL_GAP = 1e-4  # HiGHS stops when its primal and dual bounds are this close ("optimal")


def _solve_highs(model: SparseModel, layout: _Layout, time_limit: float) -> dict[str, Any]:
    """Solve the LP relaxation, then the MILP with the time left; the bound is the larger of the LP optimum and
    the MILP's dual bound (HiGHS's, through highspy also where it found no integer point in time; both are lower
    bounds of the relaxation's optimum). Where some table may be split by rows, the MILP is solved per class
    (`_solve_row_classes`)."""
    start = time.perf_counter()
    c = np.zeros(model.n_vars)
    c[layout.z] = 1.0
    lp = solve_milp(model, c, time_limit=max(time_limit, 0.05), integrality=False)
    if lp.status is SolveStatus.infeasible:
        return {"status": BoundStatus.infeasible, "bound": math.inf, "primal": None, "x": None, "lp_bound": None, "message": lp.message}
    if lp.stopped is StopReason.time_limit:  # the limit came during the LP: the MILP (its presolve alone) would only overrun it
        return {"status": BoundStatus.bound, "bound": -math.inf, "primal": None, "x": None, "lp_bound": None, "message": f"LP relaxation: {lp.message}"}
    lp_bound = lp.objective if lp.status is SolveStatus.optimal and lp.objective is not None else -math.inf
    left = time_limit - (time.perf_counter() - start)
    if layout.split_by_rows is not None:
        out = _solve_row_classes(model, layout, c, left)
    else:
        out = _solve_class(model, c, None, None, left)
    out["lp_bound"] = lp_bound if math.isfinite(lp_bound) else None
    if out["status"] is not BoundStatus.infeasible:
        out["bound"] = max(out["bound"], lp_bound)
        if out["status"] is BoundStatus.optimal and out["primal"] is not None:
            out["bound"] = min(out["bound"], out["primal"])
    return out


def _solve_class(model: SparseModel, c: np.ndarray, lb: np.ndarray | None, ub: np.ndarray | None, time_limit: float,
                 stop_at: float | None = None) -> dict[str, Any]:
    """The MILP within the bounds `lb` / `ub` (one class of plans; None: all): its status ("optimal", "bound",
    "infeasible"), bound (HiGHS's dual bound; the caller takes the larger of it and the LP's), best point and its
    value. `stop_at`: stop once the dual bound reaches it (`solve_milp_with_dual`)."""
    res = solve_milp_with_dual(model, c, time_limit=max(time_limit, 0.05), lb=lb, ub=ub, mip_rel_gap=MIP_REL_GAP, stop_at_dual=stop_at)
    out = {"primal": res.objective, "x": res.x, "message": res.message}
    if res.status is SolveStatus.infeasible:
        return {**out, "status": BoundStatus.infeasible, "bound": math.inf}
    bound = res.dual_bound if res.dual_bound is not None else -math.inf
    if res.status is SolveStatus.optimal and res.objective is not None:
        return {**out, "status": BoundStatus.optimal, "bound": min(bound, res.objective)}
    return {**out, "status": BoundStatus.bound, "bound": bound}


ROW_CLASS_ROUNDS = 4  # solves of the two classes at most (each restarts HiGHS's search)


def _solve_row_classes(model: SparseModel, layout: _Layout, c: np.ndarray, time_limit: float) -> dict[str, Any]:
    """The relaxation's optimum is the lesser of its optima over plans without a row split and plans with one
    (`split_by_rows` fixed to 0, then 1): every plan is in one class, so the lesser of the classes' bounds is a bound.
    Apart, each class's LP no longer mixes a fraction of a row split with column shards of the same table, which
    branch and bound on the whole MILP did not undo (100 x 8: 8.994 ms after 180 s; the classes 9.069 and 9.013 in
    30 s each; docs/analytic-bound.md). Only the lower class's bound counts, so the class with the lower bound is
    searched, with all the time left, until its dual bound passes the other's (then that one, the same way), at most
    `ROW_CLASS_ROUNDS` solves; a class proven optimal or infeasible is done."""
    start = time.perf_counter()
    e = layout.split_by_rows
    box = []
    for value in (0.0, 1.0):
        lb, ub = np.array(model.lb, dtype=float), np.array(model.ub, dtype=float)
        lb[e] = ub[e] = value
        box.append((lb, ub))
    bound, done, best, notes = [-math.inf, -math.inf], [False, False], [None, None], [[], []]
    for k, (lb, ub) in enumerate(box):  # each class's LP: its bound before any branching
        lp = solve_milp(model, c, time_limit=max(time_limit - (time.perf_counter() - start), 0.05), integrality=False, lb=lb, ub=ub)
        if lp.status is SolveStatus.infeasible:
            bound[k], done[k] = math.inf, True
            notes[k].append("infeasible (LP)")
        elif lp.status is SolveStatus.optimal and lp.objective is not None:
            bound[k] = lp.objective
    for _ in range(ROW_CLASS_ROUNDS):
        k = 0 if bound[0] <= bound[1] else 1
        left = time_limit - (time.perf_counter() - start)
        if done[k] or left <= 0.05:
            break
        other = bound[1 - k]
        res = _solve_class(model, c, *box[k], left, stop_at=other if math.isfinite(other) else None)
        bound[k] = max(bound[k], res["bound"])
        done[k] = res["status"] in (BoundStatus.optimal, BoundStatus.infeasible)
        notes[k].append(res["message"])
        if res["primal"] is not None and (best[k] is None or res["primal"] < best[k]["primal"]):
            best[k] = res
    k = 0 if bound[0] <= bound[1] else 1
    if math.isinf(bound[k]) and bound[k] > 0:
        return {"status": BoundStatus.infeasible, "bound": math.inf, "primal": None, "x": None, "message": "both row-split classes infeasible"}
    found = [r for r in best if r is not None]
    point = min(found, key=lambda r: r["primal"]) if found else None
    proven = done[k] and best[k] is not None
    words = ["without a row split", "with a row split"]
    message = "; ".join(f"{words[j]}: {bound[j]:.6g} ms ({', '.join(notes[j]) or 'its LP'})" for j in range(2))
    return {"status": BoundStatus.optimal if proven else BoundStatus.bound, "bound": bound[k], "primal": point["primal"] if point else None,
            "x": point["x"] if point else None, "message": message}


def relaxation_plan(ctx: AnalyticRelaxation, layout: _Layout, solution: np.ndarray, cost_model: str = "analytic") -> Plan | None:
    """The plan the relaxation's best point describes (n[t, d] x 4 columns of t on d, one shard each): a real plan
    that fits in memory (the memory rows are exact for one shard per pair), judged by the full model. With the
    bound it gives a plan whose distance from the best covered plan is certified. None if it fails the checker."""
    from shardopt.core.ir import Kernel, Shard
    from shardopt.core.plan_check import check_plan

    inst = ctx.bm.instance
    shards = []
    offset = [0] * len(inst.tables)
    for t, r in layout.r.items():  # replicated: a replica on every device
        if solution[r] > 0.5:
            shards += [Shard(table=inst.tables[t].name, device=d, replicated=True) for d in range(ctx.bm.num_devices)]
    for t, d in layout.pairs:
        units = int(round(solution[layout.n[(t, d)]]))
        if units <= 0:
            continue
        table = inst.tables[t]
        width = units * DIM_ALIGNMENT
        whole = offset[t] == 0 and width == table.dim
        # (columns in host memory: the shard there, without a cache)
        kernel = Kernel.fused_uvm if (t, d) in layout.hu and solution[layout.hu[(t, d)]] > 1e-6 else Kernel.fused
        cols = {} if whole else dict(col_offset=offset[t], cols=width)
        shards.append(Shard(table=table.name, device=d, kernel=kernel, **cols))
        offset[t] += width
    blocks: dict[int, list[tuple[int, float]]] = {}
    for (t, d), rho in layout.rho.items():  # row splits: blocks of about rho x rows, the last taking the rest
        if solution[rho] > 1e-9:
            blocks.setdefault(t, []).append((d, float(solution[rho])))
    for t, parts in blocks.items():
        table = inst.tables[t]
        start = 0
        for i, (d, rho) in enumerate(parts):
            height = table.rows - start if i == len(parts) - 1 else min(table.rows - start, max(1, round(rho * table.rows)))
            if height <= 0:
                continue
            kernel = Kernel.fused_uvm if (t, d) in layout.hr and solution[layout.hr[(t, d)]] > 1e-9 else Kernel.fused
            shards.append(Shard(table=table.name, device=d, row_offset=start, rows=height, kernel=kernel))
            start += height
    # whole tables in the column-wise collective where the point cuts some table and that is cheaper (the relaxation
    # may put a whole table there: w = 1, `Shard.column_wise`)
    shards, _, _ = join_one_collective(inst, ctx.bm, shards)
    plan = Plan(solver="analytic_bound", cost_model=cost_model, shards=shards, instance=inst.content_hash())
    return plan if check_plan(inst, plan).ok else None


def relaxation_value_at(instance: Instance, shards: Sequence[tuple[int, int, int]], cost_model: CostModel | None = None,
                        *, table_wise: bool = False, time_limit: float = 10.0, replicas: Sequence[int] = (),
                        host: Sequence[tuple[int, int, int]] = (), rows: Sequence[tuple[int, int, float, bool]] = ()) -> float:
    """The relaxation's optimum with x and n fixed to a plan ((table index, device, width) triples; several shards
    of a table on a device allowed; `replicas` the tables replicated on every device, `host` the shards among
    `shards` in host memory; `rows` the row blocks as (table index, device, share of its rows, in host memory)):
    the whole MILP, every row included, judged at one point. It must be <= the plan's
    analytic cost (the validity argument of docs/analytic-bound.md, in one number); +inf when the point is
    infeasible in the relaxation (which for a plan that fits in memory would be a bug). Devices of a symmetry class
    are first reordered by pooled width, as the symmetry rows require (the cost is unchanged by the reordering)."""
    ctx = AnalyticRelaxation(instance, cost_model)
    width: dict[tuple[int, int], int] = {}
    for t, d, w in shards:
        width[(t, d)] = width.get((t, d), 0) + int(w)
    in_host: dict[tuple[int, int], int] = {}
    for t, d, w in host:
        in_host[(t, d)] = in_host.get((t, d), 0) + int(w)
    perm = _symmetry_order(instance, width)
    width = {(t, perm[d]): w for (t, d), w in width.items()}
    in_host = {(t, perm[d]): w for (t, d), w in in_host.items()}
    rows = [(t, perm[d], rho, h) for t, d, rho, h in rows]  # (permuted with the rest: the cost is unchanged)
    model, layout = build_relaxation(ctx, table_wise)
    lb, ub = np.array(model.lb), np.array(model.ub)
    for p in layout.pairs:
        units = width.get(p, 0) // DIM_ALIGNMENT
        lb[layout.n[p]] = ub[layout.n[p]] = units
        lb[layout.x[p]] = ub[layout.x[p]] = 1 if units else 0
        if p in layout.hu:
            lb[layout.hu[p]] = ub[layout.hu[p]] = in_host.get(p, 0) / DIM_ALIGNMENT
    for t, r in layout.r.items():
        lb[r] = ub[r] = 1.0 if t in set(replicas) else 0.0
    if any(p not in layout.x for p in width) or any(p not in layout.hu for p in in_host) or any(t not in layout.r for t in replicas):
        return math.inf  # a shard (or replica) where the relaxation has no variable: it does not fit there
    share: dict[tuple[int, int], float] = {}
    count: dict[tuple[int, int], int] = {}
    for t, d, rho, _ in rows:
        share[(t, d)] = share.get((t, d), 0.0) + float(rho)
        count[(t, d)] = count.get((t, d), 0) + 1
    topo = instance.topology
    nested = set()  # tables split over every device of one host (of several): the hierarchical collectives
    for t in {t for t, _ in share}:
        devs = {d for (tt, d) in share if tt == t}
        hosts = {topo.intra_group_of(d) for d in devs}
        if topo.num_intra_groups > 1 and len(hosts) == 1 and len(devs) == topo.intra_group_size:
            nested.add((t, hosts.pop()))
    if any(p not in layout.rho for p in share) or any(k not in layout.tw for k in nested):
        return math.inf
    for p in layout.rho:
        lb[layout.rho[p]] = ub[layout.rho[p]] = share.get(p, 0.0)
        lb[layout.xr[p]] = ub[layout.xr[p]] = 1.0 if p in share else 0.0
    for p, qr in layout.qr.items():
        lb[qr] = ub[qr] = 1.0 if count.get(p, 0) > 1 and not any(k[0] == p[0] for k in nested) else 0.0
    for p, hr in layout.hr.items():
        lb[hr] = ub[hr] = sum(rho for t, d, rho, h in rows if (t, d) == p and h)
    for k, tw in layout.tw.items():
        lb[tw] = ub[tw] = 1.0 if k in nested else 0.0
    for t, g in layout.g.items():
        lb[g] = ub[g] = 1.0 if any(tt == t for tt, _ in share) and not any(k[0] == t for k in nested) else 0.0
    c = np.zeros(model.n_vars)
    c[layout.z] = 1.0
    res = solve_milp(model, c, time_limit=time_limit, lb=lb, ub=ub, mip_rel_gap=1e-9)
    return res.objective if res.status is SolveStatus.optimal and res.objective is not None else math.inf


def _symmetry_order(instance: Instance, width: dict[tuple[int, int], int]) -> dict[int, int]:
    """device -> device: within each symmetry class, the widest device first (stable)."""
    u: dict[int, int] = {}
    for (_, d), w in width.items():
        u[d] = u.get(d, 0) + w
    perm = {d: d for d in range(instance.topology.num_devices)}
    for cls in _symmetry_classes(instance):
        for new, old in zip(cls, sorted(cls, key=lambda d: -u.get(d, 0))):
            perm[old] = new
    return perm
