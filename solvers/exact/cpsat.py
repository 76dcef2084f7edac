"""The CP-SAT backend: the linear model (formulation.py) as an OR-Tools CP-SAT model, solved once.

Why a module of its own: CP-SAT needs integers, so this backend has its own arithmetic -- every cost coefficient
rounded down to units of 1 / COST_SCALE ms, the comm planes scaled further so that their slopes keep their digits,
the bound read back one unit low -- and its own way to take a warm start (a complete hint and a cutoff) that the
MILP backends (milp.py) do not share. `solve_cpsat` builds the model a block of constraints at a time (the helpers
below, in the order the model is built: the order of variables and constraints is part of what CP-SAT searches),
solves it and reads the solution back as item counts. OR-Tools is imported only when a model is solved.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardopt.core.ir import DIM_ALIGNMENT
from shardopt.core.work import charge_seconds, current_meter
from solvers.exact import constants
from solvers.exact.formulation import LinearSolve, Problem, _device_plane_bounds, _useful_cuts, table_lower_bounds
from solvers.exact.linearize import Linearization
from solvers.status import SolveStatus, StatusMap, StopReason

# CP-SAT's statuses (by CpSolver.status_name) onto the one vocabulary: FEASIBLE and UNKNOWN both mean a limit ended the
# search (its time limit, or the deterministic time / conflicts it was given), with a point or without
# CP-SAT's deterministic time per work second: with two interleaved workers on the 2-core VM a wall second of its
# search is 1.4-1.6 deterministic seconds (neuroshard-test-s1-0000, dreamshard-test-s1-0000, MLPerf DLRMv2 on
# 8 x H100; docs/results/speed.md, "Work budgets"), so a default budget keeps its meaning in wall time there
CPSAT_DETERMINISTIC_PER_WORK_S = 1.5
# Building a model in Python is work CP-SAT's deterministic time does not see: about 0.6 ms a model plus 6-10 us per
# variable and constraint on the 2-core VM (16 x 4 to 50 x 4 and DLRMv2 on 8 x H100), and the linearisation and the
# read-back about as much again. Charged per model, so that a loop of many small models (the neighbourhoods of a
# small instance: 8,700 models of 169 terms in 29 s on a 3-work-second budget before) ends on its budget.
CPSAT_MODEL_WORK_S = 1.0e-3
CPSAT_WORK_S_PER_TERM = 8.0e-6
CPSAT_STATUS = StatusMap("CP-SAT", {
    "OPTIMAL": (SolveStatus.optimal, StopReason.proven),
    "FEASIBLE": (SolveStatus.feasible, StopReason.time_limit),
    "INFEASIBLE": (SolveStatus.infeasible, StopReason.proven),
    "UNKNOWN": (SolveStatus.feasible, StopReason.time_limit),
    "MODEL_INVALID": (SolveStatus.no_solution, StopReason.error),
})


@dataclass
class _Scaled:
    """The linear model's coefficients in CP-SAT's integers: costs rounded down to units of 1 / S ms (S =
    COST_SCALE), the comm planes to units of 1 / (S plane_scale) ms; and the range of each collective's comm."""

    S: int
    a: np.ndarray  # [I, D]
    c0: np.ndarray  # [D]
    dims: np.ndarray  # [I]
    total: int  # the pooled width of all tables
    plane_scale: int
    k0: np.ndarray  # [C, D, K]
    k1: np.ndarray
    k2: np.ndarray
    k3: np.ndarray
    const: np.ndarray  # [D] comm_const
    m_lo: np.ndarray  # [C, D] (ms, real)
    m_hi: np.ndarray
    always: np.ndarray  # [C] the collective runs whatever the plan

    def m_bounds(self, c: int, d: int) -> tuple[int, int]:
        """The integer range of m[c][d] (comm is never negative; 0 where the collective may not run)."""
        lo = max(0, math.floor(self.m_lo[c, d] * self.S) - 1) if self.always[c] else 0
        return lo, math.ceil(self.m_hi[c, d] * self.S) + 1


def _scale(lin: Linearization) -> _Scaled:
    S = constants.COST_SCALE
    a_int = np.floor(lin.a * S).astype(np.int64)
    c0_int = np.floor(lin.c0 * S).astype(np.int64)
    dims = lin.dims.astype(np.int64)
    total = int(round(lin.total_width))
    # plane constraints get their own extra factor so that small slopes (ms per unit width) keep their digits
    slopes = np.abs(np.concatenate([lin.k1.ravel(), lin.k2.ravel(), lin.k3.ravel()]))
    small = slopes[slopes > 0].min() if (slopes > 0).any() else 1.0
    biggest = float(np.abs(lin.k0).max() + (np.abs(lin.k1).max() + np.abs(lin.k2).max() + np.abs(lin.k3).max()) * max(total, 1)) * S + 1.0
    plane_scale = 1
    while small * S * plane_scale < 1e6 and biggest * plane_scale * 10 < 2**50:
        plane_scale *= 10
    P = S * plane_scale
    k0_int, k1_int, k2_int, k3_int = (np.floor(k * P).astype(np.int64) for k in (lin.k0, lin.k1, lin.k2, lin.k3))
    const = np.floor(lin.comm_const * S).astype(np.int64)
    m_lo, m_hi = _device_plane_bounds(lin, float(total))
    return _Scaled(S, a_int, c0_int, dims, total, plane_scale, k0_int, k1_int, k2_int, k3_int, const, m_lo, m_hi, lin.always.copy())


@dataclass
class _Model:
    """The CP-SAT model being built and its variables: x per allowed (item, device) pair (also listed per item and
    per device); per collective c: u[c][d] (width of device d in it), m[c][d] (its comm on d), its total T[c] and
    p[c] (it runs; None where it always does); y (holds a shard) per device, z (the max over devices)."""

    model: Any
    x: dict[tuple[int, int], Any]
    by_item: list[list[tuple[int, Any]]]
    by_device: list[list[tuple[int, Any]]]
    u: list[list[Any]] = field(default_factory=list)
    m: list[list[Any]] = field(default_factory=list)
    T: list[Any] = field(default_factory=list)
    p: list[Any] = field(default_factory=list)
    y: list[Any] = field(default_factory=list)
    z: Any = None
    w: dict[int, Any] = field(default_factory=dict)  # item -> whether its pieces are the table's (Items.even)


@dataclass
class _Hint:
    """The hint plan's values of the variables that are not x."""

    u: np.ndarray  # [C, D]
    T: np.ndarray  # [C]
    runs: np.ndarray  # [C]
    used: np.ndarray
    m: list[list[int]]
    z: int


def _assignment(prob: Problem) -> _Model:
    """A new model with the x variables: a Boolean per allowed pair, or a count when a device may hold several
    pieces of the item."""
    from ortools.sat.python import cp_model

    upper = prob.upper
    model = cp_model.CpModel()
    x: dict[tuple[int, int], Any] = {}
    by_item: list[list[tuple[int, Any]]] = [[] for _ in range(prob.num_items)]
    by_device: list[list[tuple[int, Any]]] = [[] for _ in range(prob.num_devices)]
    for i, d in zip(*np.nonzero(prob.allowed)):
        i, d = int(i), int(d)
        v = model.new_bool_var(f"x{i}_{d}") if upper[i] == 1 else model.new_int_var(0, int(upper[i]), f"x{i}_{d}")
        x[i, d] = v
        by_item[i].append((d, v))
        by_device[d].append((i, v))
    return _Model(model, x, by_item, by_device)


def _add_groups(cm: _Model, prob: Problem) -> None:
    """The placement constraints across tables, on every device: co-located whole tables both there or both not,
    at most one table of a separate group (a pair the mask leaves out is a 0)."""
    for d in range(prob.num_devices):
        for a, b in prob.groups.together:
            xa, xb = cm.x.get((a, d)), cm.x.get((b, d))
            if xa is not None or xb is not None:
                cm.model.add((xa if xa is not None else 0) == (xb if xb is not None else 0))
        for group in prob.groups.apart:
            on = [cm.x[i, d] for i in group if (i, d) in cm.x]
            if len(on) > 1:
                cm.model.add_at_most_one(on)


def _add_cover(cm: _Model, prob: Problem) -> None:
    """Every table on exactly one device, or covered by its pieces (and, apart, at most one piece per device; even,
    pieces of one width: all `parts` pieces of one item)."""
    from ortools.sat.python import cp_model

    items, model, by_item = prob.items, cm.model, cm.by_item
    for t in range(prob.num_tables):
        its = range(int(items.first[t]), int(items.first[t + 1]))
        if len(its) == 1:
            model.add_exactly_one([v for _, v in by_item[its[0]]])
            continue
        U = int(items.width[its[0]]) // DIM_ALIGNMENT  # the table's dim in 4-column units (the whole table is first)
        model.add(cp_model.LinearExpr.weighted_sum(
            [v for i in its for _, v in by_item[i]], [int(items.width[i]) // DIM_ALIGNMENT for i in its for _ in by_item[i]]) == U)
        if items.apart:
            per_device: dict[int, list[Any]] = {}
            for i in its:
                for d, v in by_item[i]:
                    per_device.setdefault(d, []).append(v)
            for vs in per_device.values():
                if len(vs) > 1:
                    model.add_at_most_one(vs)
        if items.even:  # one item per table: all of its pieces or none (with the cover, exactly one item is used)
            used = []
            for i in its:
                y = model.new_bool_var(f"w{i}")
                model.add(sum(v for _, v in by_item[i]) == int(items.parts[i]) * y)
                used.append(y)
                cm.w[i] = y
            model.add_exactly_one(used)


def _add_memory(cm: _Model, prob: Problem) -> None:
    """The capacity rows, on the devices where what they may hold could overflow them."""
    from ortools.sat.python import cp_model

    upper = prob.upper
    for d in range(prob.num_devices):
        its_d = [i for i, _ in cm.by_device[d]]
        if its_d and int((prob.sizes[its_d] * upper[its_d]).sum()) > int(prob.caps[d]):
            cm.model.add(cp_model.LinearExpr.weighted_sum([v for _, v in cm.by_device[d]], [int(prob.sizes[i]) for i in its_d]) <= int(prob.caps[d]))


def _add_comm(cm: _Model, prob: Problem, lin: Linearization, sc: _Scaled) -> None:
    """Per collective c: u[c][d] = device d's width in it, T[c] its total, p[c] it runs (T > 0 forces it); m[c][d] >=
    every comm plane of c on d, its constant times p[c] (in units of 1 / (S plane_scale) ms), m >= 0."""
    from ortools.sat.python import cp_model

    model, D, plane_scale = cm.model, prob.num_devices, sc.plane_scale
    host_members = [np.flatnonzero(lin.host == h) for h in range(lin.num_hosts)]
    for c in range(lin.num_collectives):
        u = [model.new_int_var(0, sc.total, f"u{c}_{d}") for d in range(D)]
        for d in range(D):
            on = [(i, v) for i, v in cm.by_device[d] if lin.kind[i] == c]
            model.add(u[d] == cp_model.LinearExpr.weighted_sum([v for _, v in on], [int(sc.dims[i]) for i, _ in on]))
        T = model.new_int_var(0, sc.total, f"T{c}")
        model.add(T == sum(u))
        p = None
        if not lin.always[c]:
            p = model.new_bool_var(f"p{c}")
            model.add(T <= sc.total * p)
        m = [model.new_int_var(*sc.m_bounds(c, d), f"m{c}_{d}") for d in range(D)]
        for d in range(D):
            members = host_members[lin.host[d]]
            for k in range(lin.num_planes):
                # where c may not run, the plane's constant is paid p times: exact at p = 1, and at p = 0 every width
                # of c is 0, so m >= 0 (a far tighter LP relaxation than enforcing the plane only if p)
                terms = [m[d], u[d]] + [u[j] for j in members] + [T] + ([p] if p is not None else [])
                coefs = ([plane_scale, -int(sc.k1[c, d, k])] + [-int(sc.k2[c, d, k])] * len(members) + [-int(sc.k3[c, d, k])]
                         + ([-int(sc.k0[c, d, k])] if p is not None else []))
                keep = [j for j, co in enumerate(coefs) if co != 0 or j == 0]
                model.add(cp_model.LinearExpr.weighted_sum([terms[j] for j in keep], [coefs[j] for j in keep]) >= (int(sc.k0[c, d, k]) if p is None else 0))
        cm.u.append(u)
        cm.m.append(m)
        cm.T.append(T)
        cm.p.append(p)


def _add_used(cm: _Model, prob: Problem) -> None:
    """y_d = 1 iff device d holds a shard (an empty device computes nothing)."""
    model, upper = cm.model, prob.upper
    y = [model.new_bool_var(f"y{d}") for d in range(prob.num_devices)]
    for d in range(prob.num_devices):
        bools = [v for i, v in cm.by_device[d] if upper[i] == 1]
        for i, v in cm.by_device[d]:
            if upper[i] == 1:
                model.add_implication(v, y[d])
            else:
                model.add(v <= int(upper[i]) * y[d])
        if len(bools) == len(cm.by_device[d]):
            model.add_bool_or(bools + [y[d].Not()])
        else:
            model.add(sum(v for _, v in cm.by_device[d]) >= y[d])
    cm.y = y


def _z_range(cm: _Model, prob: Problem, sc: _Scaled) -> tuple[int, int]:
    """Bounds of z: the range of the largest device cost."""
    D, upper = prob.num_devices, prob.upper
    C = len(cm.m)
    m_lo = np.array([sum(sc.m_bounds(c, d)[0] for c in range(C)) for d in range(D)])
    m_hi = np.array([sum(sc.m_bounds(c, d)[1] for c in range(C)) for d in range(D)])
    dev_lo = np.array([min(0, int(sc.c0[d])) + sum(min(0, int(sc.a[i, d])) * int(upper[i]) for i, _ in cm.by_device[d]) for d in range(D)]) + m_lo + sc.const
    dev_hi = np.array([max(0, int(sc.c0[d])) + sum(max(0, int(sc.a[i, d])) * int(upper[i]) for i, _ in cm.by_device[d]) for d in range(D)]) + m_hi + sc.const
    return int(dev_lo.max()), int(dev_hi.max())


def _hint_values(lin: Linearization, sc: _Scaled, hint: np.ndarray, D: int) -> _Hint:
    """The integer model's values at the hint plan (m rounded up to the plane constraints' integers)."""
    u, v, T, runs = lin.collective_widths(hint)
    m_hint: list[list[int]] = []
    for c in range(lin.num_collectives):
        row = []
        for d in range(D):
            lo = sc.m_bounds(c, d)[0]
            if not runs[c]:
                row.append(lo)
                continue
            rhs = sc.k0[c, d] + sc.k1[c, d] * int(round(u[c, d])) + sc.k2[c, d] * int(round(v[c, d])) + sc.k3[c, d] * int(round(T[c]))
            row.append(max(int(-(-int(rhs.max()) // sc.plane_scale)), lo))
        m_hint.append(row)
    used = hint.sum(axis=0) > 0
    comp = np.where(used, sc.c0, 0) + (hint * sc.a).sum(axis=0) + sc.const
    return _Hint(u, T, runs, used, m_hint, int((comp + np.array(m_hint).sum(axis=0)).max()))


def _add_device_costs(cm: _Model, prob: Problem, sc: _Scaled, z_lo: int, z_hi: int) -> None:
    """z >= c0[d] y_d + sum_i a[i, d] x[i, d] + sum_c m[c][d] + const[d], every device."""
    from ortools.sat.python import cp_model

    model = cm.model
    z = model.new_int_var(z_lo, z_hi, "z")
    for d in range(prob.num_devices):
        its_d = [i for i, _ in cm.by_device[d]]
        model.add(
            z - sum(m[d] for m in cm.m) - int(sc.c0[d]) * cm.y[d]
            - cp_model.LinearExpr.weighted_sum([v for _, v in cm.by_device[d]], [int(sc.a[i, d]) for i in its_d]) >= int(sc.const[d])
        )
    cm.z = z


def _add_hint(cm: _Model, hint: np.ndarray, h: _Hint, cutoff: bool) -> None:
    """A complete hint (every x, u, T, p, y, m and z) and, with `cutoff`, nothing worse than it."""
    model = cm.model
    for (i, d), v in cm.x.items():
        model.add_hint(v, int(hint[i, d]))
    for c in range(len(cm.u)):
        for d in range(len(cm.u[c])):
            model.add_hint(cm.u[c][d], int(round(h.u[c, d])))
            model.add_hint(cm.m[c][d], h.m[c][d])
        model.add_hint(cm.T[c], int(round(h.T[c])))
        if cm.p[c] is not None:
            model.add_hint(cm.p[c], bool(h.runs[c]))
    for d in range(len(cm.y)):
        model.add_hint(cm.y[d], bool(h.used[d]))
    for i, w in cm.w.items():
        model.add_hint(w, bool(hint[i].sum() > 0))
    model.add_hint(cm.z, h.z)
    if cutoff:
        model.add(cm.z <= h.z)  # nothing worse than the hint (in the linear model) is of any use


def _add_table_cuts(cm: _Model, prob: Problem, lin: Linearization, sc: _Scaled) -> int:
    """table_lower_bounds in the integer model: the other terms >= d's negative a_int (as often as d may hold each
    item); m[c][d] of the item's collective >= the least ceil(plane_int / plane_scale) over {width_i <= u <= v <= T <=
    total}, the other collectives' m >= their lower bounds, plus the constant. For a table with pieces, an average
    weighted by the share of the dim each holds: U z >= sum_i (width_i / 4) sum_d coef[i, d] x[i, d], U = dim / 4
    (integers). Returns how many cuts were added."""
    from ortools.sat.python import cp_model

    items, upper, total = prob.items, prob.upper, sc.total
    lb = prob.lb if prob.lb is not None else table_lower_bounds(lin, prob.allowed, prob.sizes, prob.caps)
    neg_int = (np.where(prob.allowed, np.minimum(sc.a, 0), 0) * upper[:, None]).sum(axis=0)  # [D]
    C, D = lin.num_collectives, prob.num_devices
    m_lo = np.array([[sc.m_bounds(c, d)[0] for d in range(D)] for c in range(C)], dtype=np.int64)  # [C, D]
    cuts = 0
    for t in _useful_cuts(lb, items):
        its = range(int(items.first[t]), int(items.first[t + 1]))
        U = int(items.width[its[0]]) // DIM_ALIGNMENT
        terms, coefs_all = [], []
        for i in its:
            if not cm.by_item[i]:
                continue
            ds = np.array([d for d, _ in cm.by_item[i]], dtype=np.int64)
            ut, c = int(sc.dims[i]), int(lin.kind[i])
            verts = [(ut, ut, ut), (ut, ut, total), (ut, total, total), (total, total, total)]
            low = np.min([sc.k0[c, ds] + sc.k1[c, ds] * uu + sc.k2[c, ds] * vv + sc.k3[c, ds] * tt for uu, vv, tt in verts], axis=0)  # [n, K]
            m_min = np.maximum(-((-low) // sc.plane_scale).max(axis=1), 0)  # ceil division, exact in integers
            others = m_lo[:, ds].sum(axis=0) - m_lo[c, ds]
            coefs = sc.c0[ds] + sc.a[i, ds] + neg_int[ds] - np.minimum(sc.a[i, ds], 0) + m_min + others + sc.const[ds]
            terms += [v for _, v in cm.by_item[i]]
            coefs_all += [int(co) * (int(items.width[i]) // DIM_ALIGNMENT) for co in coefs]
        cm.model.add(U * cm.z >= cp_model.LinearExpr.weighted_sum(terms, coefs_all))
        cuts += 1
    return cuts


def _set_objective(cm: _Model, prob: Problem) -> tuple[bool, int]:
    """Minimise z; with a plan in hand and `tiebreak`, lexicographically z and then the shards moved from it (and
    the trust region's row). Returns (tie-break used, N = the plan in hand's shards)."""
    model, upper = cm.model, prob.upper
    tie = prob.center is not None and prob.tiebreak
    N = 0
    if tie:
        assert prob.center is not None
        stay = []
        for i, d in zip(*np.nonzero(prob.center)):
            v = cm.x.get((int(i), int(d)))
            if v is None:
                continue
            c = int(prob.center[i, d])
            if upper[i] == 1:
                stay.append(v)
            else:  # shards kept = min(x, c): pushed up by the objective
                kv = model.new_int_var(0, c, f"k{i}_{d}")
                model.add(kv <= v)
                stay.append(kv)
        N = int(prob.center.sum())
        if prob.radius is not None:
            model.add(sum(stay) >= N - int(prob.radius))
        # lexicographic: z first (one unit of z outweighs every move), then the fewest shards moved -- of the many
        # plans with the same max, the one nearest the expansion point, where the linearisation is accurate
        model.minimize((N + 1) * cm.z - sum(stay))
    else:
        model.minimize(cm.z)
    return tie, N


def _set_parameters(
    prm: Any, n_pairs: int, time_limit: float, build_s: float, seed: int, workers: int, deterministic: bool, log: bool, params: dict[str, Any] | None
) -> None:
    meter = current_meter()
    if meter is not None:
        # on a work budget (shardopt.core.work): the limit in CP-SAT's deterministic time, so that the same model and
        # seed give the same answer on any machine; the wall clock only as the budget's safety cap
        prm.max_deterministic_time = max(0.01, float(time_limit)) * CPSAT_DETERMINISTIC_PER_WORK_S
        prm.max_time_in_seconds = meter.wall_left()
    else:
        prm.max_time_in_seconds = max(0.01, float(time_limit) - build_s)  # the limit covers building the model too
    if n_pairs > constants.LARGE_MODEL:
        prm.cp_model_presolve = False  # presolve of ~1e5 Booleans takes tens of seconds before the hint is used
    prm.num_workers = max(1, int(workers))
    # OR-Tools 9.15's inclusion presolve declared a feasible model (its hint satisfies it) infeasible, and with
    # interleave_search and 2 workers aborted the whole process ("Check failed: heuristics.fixed_search != nullptr"):
    # the tiered exact loop on bench_tiered's generator at seed 1366; tests/data/cpsat-inclusion-presolve.txt.gz
    prm.presolve_inclusion_work_limit = 0
    prm.random_seed = int(seed) % (2**31)
    prm.log_search_progress = bool(log)
    for k, v in (params or {}).items():
        setattr(prm, k, v)
    if deterministic and workers > 1:
        prm.interleave_search = True  # deterministic whatever the thread timing (up to the wall-clock limit)


def _read_solution(
    solver: Any, code: Any, cm: _Model, prob: Problem, lin: Linearization, sc: _Scaled, hint_z: int | None, tie: bool, N: int, cuts: int,
    build_s: float, solve_s: float,
) -> LinearSolve:
    """The solve's status, item counts, linear cost and bound (in ms) and what it did."""
    from ortools.sat.python import cp_model

    S = sc.S
    info = {
        "variables": len(cm.x) + (2 * lin.num_collectives + 1) * prob.num_devices + 2 * lin.num_collectives + 1,
        "collectives": list(lin.dists),
        "cost_unit_ms": 1.0 / S,
        "plane_scale": sc.plane_scale,
        "planes": lin.num_planes,
        "cpsat_status": solver.status_name(code),
        "branches": solver.num_branches,
        "conflicts": solver.num_conflicts,
        "deterministic_s": solver.deterministic_time,
        "hint_objective": hint_z / S if hint_z is not None else None,
        "table_cuts": cuts,
    }
    name = solver.status_name(code)
    if code == cp_model.MODEL_INVALID:  # (a bug of the formulation, never a user's mistake)
        raise RuntimeError(f"CP-SAT rejected the model: {cm.model.validate()}")
    out = CPSAT_STATUS.read(name, code in (cp_model.OPTIMAL, cp_model.FEASIBLE))
    if out.status is SolveStatus.infeasible:
        return LinearSolve(out.status, out.stopped, None, None, None, build_s, solve_s, info)
    if not out.has_point:
        bound = (_z_bound(solver.best_objective_bound, N, tie) - 1) / S if math.isfinite(solver.best_objective_bound) else None
        return LinearSolve(out.status, out.stopped, None, None, bound, build_s, solve_s, info)
    counts = np.zeros((prob.num_items, prob.num_devices), dtype=np.int64)
    for (i, d), v in cm.x.items():
        counts[i, d] = int(solver.value(v))
    # the integer model never over-states a cost (coefficients rounded down) except for m_d's own integrality
    # (< 1 unit): one unit below its bound is a bound of the real-coefficient linear model
    bound = (_z_bound(solver.best_objective_bound, N, tie) - 1) / S
    return LinearSolve(out.status, out.stopped, counts, solver.value(cm.z) / S, bound, build_s, solve_s, info)


def solve_cpsat(
    prob: Problem,
    lin: Linearization,
    hint: np.ndarray | None,
    time_limit: float,
    seed: int,
    workers: int,
    deterministic: bool,
    cutoff: bool = True,
    log: bool = False,
    params: dict[str, Any] | None = None,
) -> LinearSolve:
    """CP-SAT on the linear model: one variable per allowed (item, device) -- a Boolean, or a count when the pieces
    of a table need not be apart. A table's pieces cover its dim: sum_i sum_d (width_i / narrowest) x[i, d] =
    dim / narrowest; apart: at most one piece of a table per device."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    sc = _scale(lin)
    cm = _assignment(prob)
    _add_cover(cm, prob)
    _add_groups(cm, prob)
    _add_memory(cm, prob)
    _add_comm(cm, prob, lin, sc)
    _add_used(cm, prob)
    z_lo, z_hi = _z_range(cm, prob, sc)
    h = _hint_values(lin, sc, hint, prob.num_devices) if hint is not None else None
    if h is not None:
        z_hi = max(z_hi, h.z)
    _add_device_costs(cm, prob, sc, z_lo, z_hi)
    if hint is not None and h is not None:
        _add_hint(cm, hint, h, cutoff)
    cuts = _add_table_cuts(cm, prob, lin, sc) if prob.table_cuts else 0
    tie, N = _set_objective(cm, prob)
    build_s = time.perf_counter() - t0
    charge_seconds(CPSAT_MODEL_WORK_S + CPSAT_WORK_S_PER_TERM * (len(cm.x) + len(cm.model.Proto().constraints)))

    solver = cp_model.CpSolver()
    _set_parameters(solver.parameters, len(cm.x), time_limit, build_s, seed, workers, deterministic, log, params)
    t1 = time.perf_counter()
    code = solver.solve(cm.model)
    solve_s = time.perf_counter() - t1
    charge_seconds(solver.deterministic_time / CPSAT_DETERMINISTIC_PER_WORK_S)  # (on a work budget: what it used)
    return _read_solution(solver, code, cm, prob, lin, sc, h.z if h is not None else None, tie, N, cuts, build_s, solve_s)


def _z_bound(bound: float, N: int, tie: bool) -> float:
    """A bound on z from CP-SAT's bound on (N + 1) z - stay (0 <= stay <= N, z integer): z >= ceil(bound / (N + 1))."""
    return float(math.ceil(bound / (N + 1) - 1e-9)) if tie else float(bound)
