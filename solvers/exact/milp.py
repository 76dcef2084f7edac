"""The MILP backends: the linear model (formulation.py) as sparse rows, solved by HiGHS (scipy.optimize.milp) or by
CBC (through PuLP).

Why together and apart from CP-SAT: both MILP solvers take one model in real coefficients -- `_milp_rows` builds it
once as rows lo <= A v <= hi, and the exact neural mode (neural_head.py) extends those rows before either solver
sees them --, and both differ from CP-SAT (cpsat.py) in arithmetic (no integer scaling), in how a warm start is
given (HiGHS takes none: a cutoff; CBC a mipstart of every column). Each backend's statuses and bound are read in
solvers.milp, the one place that knows them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardopt.core.ir import DIM_ALIGNMENT
from shardopt.core.work import charge_seconds, current_meter
from solvers.exact import constants
from solvers.exact.formulation import LinearSolve, Problem, _device_plane_bounds, _useful_cuts, table_lower_bounds
from solvers.exact.linearize import Linearization
from solvers.milp import SparseModel, solve_milp, solve_milp_cbc
from solvers.status import SolveStatus, StopReason

MOVE_TIEBREAK_MS = 1e-7  # MILPs: objective z - this x (tables left where they are): ties in z go to fewer moves
# HiGHS on a work budget (shardopt.core.work): its branch-and-bound stops on a node limit, so that the same model gives
# the same answer on any machine, and each call charges its root node and its nodes per column of the model. Fitted on
# the 2-core VM (scipy 1.17's HiGHS) to the models of neuroshard-test, dreamshard-test, skewed-test and production
# (331 to 2,841 columns): the root node (presolve, LP, cuts, heuristics) took 0.7-2.6 s at 331-731 columns and 10 s
# at 2,841; a node 4-9 ms at 331-731 and 29 ms at 2,841. The root is the rough part: on some models it runs far longer
# (huge-test-s1-0000, 691 columns: 15-30 s), which the charge does not see, so the wall time of such a solve can
# exceed its work budget; the plan stays the same, and the wall-clock cap still ends it (docs/results/speed.md,
# "HiGHS on a node limit")
HIGHS_ROOT_WORK_S = 0.3
HIGHS_ROOT_WORK_S_PER_COLUMN = 3.5e-3
HIGHS_NODE_WORK_S_PER_COLUMN = 1.2e-5


@dataclass
class _Rows(SparseModel):
    """The linearised model as a sparse MILP: variables x (pairs), k, u [C, D], m [C, D], M [D], y [D], T [C], p [C],
    z (their bounds and integrality kept beside it, in `_milp_rows`'s layout dict); rows lo <= A v <= hi."""

    pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))  # [n, 2] (t, d)


def _milp_rows(prob: Problem, lin: Linearization, hint_cost: float | None) -> tuple[_Rows, dict[str, Any]]:
    """The linearised model as sparse rows (shared by CBC through PuLP and HiGHS through scipy).

    Columns: x (allowed (item, device) pairs, by item then device; binary, or a count 0..parts when the pieces of a
    table need not be apart), k (pieces kept in place, for counts only), then per collective c u[c, D] (widths) and
    m[c, D] (its comm), M [D] (each device's comm: the sum and the constant), y [D], T [C] (each collective's total
    width), p [C] (it runs), z."""
    I, D, C = prob.num_items, prob.num_devices, lin.num_collectives
    upper = prob.upper
    pairs = np.argwhere(prob.allowed)  # [n, 2] sorted by item then device
    n = len(pairs)
    center = prob.center
    keep_pairs = (
        np.flatnonzero((center[pairs[:, 0], pairs[:, 1]] > 0) & (upper[pairs[:, 0]] > 1)) if center is not None else np.arange(0)
    )
    K0 = n
    U = K0 + len(keep_pairs)
    MC = U + C * D
    M = MC + C * D
    Y = M + D
    TT = Y + D
    PP = TT + C
    Z = PP + C
    rows = _Rows(n_vars=Z + 1, pairs=pairs)
    total = lin.total_width
    starts = np.searchsorted(pairs[:, 0], np.arange(I + 1))  # pairs are sorted by item
    _add_cover(rows, prob, starts)
    _add_groups(rows, prob)
    order = np.argsort(pairs[:, 1], kind="stable")
    dev_starts = np.searchsorted(pairs[order, 1], np.arange(D + 1))
    by_dev = [order[dev_starts[d] : dev_starts[d + 1]] for d in range(D)]
    W = _add_memory_and_widths(rows, prob, lin, by_dev, U, TT, PP)
    m_lo, m_hi = _device_plane_bounds(lin, total)
    m_lo = np.where(lin.always[:, None], m_lo, 0.0)  # (0 where the collective may not run)
    _add_planes(rows, lin, D, U, MC, TT, PP, W)
    for d in range(D):  # M_d = sum_c m[c, d] + the constant
        rows.add(np.append(MC + np.arange(C) * D + d, M + d), np.append(-np.ones(C), 1.0), float(lin.comm_const[d]), float(lin.comm_const[d]))
    _add_device_costs(rows, prob, lin, by_dev, M, Y, Z)
    cuts = _add_table_cuts(rows, prob, lin, starts, Z) if prob.table_cuts else 0
    stay = _add_stay(rows, prob, keep_pairs, K0) if center is not None else None
    keep_hi = center[pairs[keep_pairs, 0], pairs[keep_pairs, 1]].astype(np.float64) if center is not None else np.zeros(0)
    M_lo = m_lo.sum(axis=0) + lin.comm_const
    M_hi = (m_hi + 1.0).sum(axis=0) + lin.comm_const
    bounds_lo = np.concatenate([np.zeros(n), np.zeros(len(keep_pairs)), np.zeros(C * D), m_lo.ravel(), M_lo - 1.0, np.zeros(D),
                                np.zeros(C), np.where(lin.always, 1.0, 0.0), [-np.inf]])
    bounds_hi = np.concatenate(
        [upper[pairs[:, 0]].astype(np.float64), keep_hi, np.full(C * D, total / W), (m_hi + 1.0).ravel(), M_hi + 1.0, np.ones(D),
         np.full(C, total / W), np.ones(C), [np.inf if hint_cost is None else hint_cost + 1e-6]]
    )
    integer = np.concatenate([np.arange(Y, Y + D), np.arange(PP, PP + C)]).astype(np.int64)
    if prob.items.even:  # one item per table: w_i (binary) per item of a cut table, its pieces all or none
        even_items, W0 = _add_even_widths(rows, prob, starts)
        bounds_lo = np.concatenate([bounds_lo, np.zeros(len(even_items))])
        bounds_hi = np.concatenate([bounds_hi, np.ones(len(even_items))])
        integer = np.concatenate([integer, W0 + np.arange(len(even_items))]).astype(np.int64)
    else:
        even_items, W0 = np.zeros(0, dtype=np.int64), rows.n_vars
    return rows, {"even_items": even_items, "W0": W0, "lo": bounds_lo, "hi": bounds_hi, "U": U, "MC": MC, "M": M, "Y": Y, "T": TT, "P": PP, "Z": Z, "W": W, "stay": stay,
                  "integer": integer, "cuts": cuts, "keep_pairs": keep_pairs, "K0": K0}


def _add_groups(rows: _Rows, prob: Problem) -> None:
    """The placement constraints across tables, on every device: x[a, d] - x[b, d] = 0 for co-located whole tables
    (where the mask leaves one pair out, the other is fixed at 0), sum of a separate group's x[i, d] <= 1."""
    if prob.groups.empty:
        return
    col = {(int(i), int(d)): k for k, (i, d) in enumerate(rows.pairs)}
    for d in range(prob.num_devices):
        for a, b in prob.groups.together:
            ka, kb = col.get((a, d)), col.get((b, d))
            if ka is not None and kb is not None:
                rows.add(np.array([ka, kb]), np.array([1.0, -1.0]), 0.0, 0.0)
            elif ka is not None or kb is not None:
                rows.add(np.array([ka if ka is not None else kb]), np.array([1.0]), 0.0, 0.0)
        for group in prob.groups.apart:
            on = [col[i, d] for i in group if (i, d) in col]
            if len(on) > 1:
                rows.add(np.array(on), np.ones(len(on)), -np.inf, 1.0)


def _add_cover(rows: _Rows, prob: Problem, starts: np.ndarray) -> None:
    """The pieces cover the table: sum (width_i / 4) x = dim / 4 (in 4-column units, integers); apart: at most one
    piece of the table per device."""
    items, pairs = prob.items, rows.pairs
    for t in range(prob.num_tables):
        lo_i, hi_i = int(items.first[t]), int(items.first[t + 1])
        idx = np.arange(starts[lo_i], starts[hi_i])
        U = float(items.width[lo_i]) / DIM_ALIGNMENT  # (the whole table is the first item)
        rows.add(idx, items.width[pairs[idx, 0]] / DIM_ALIGNMENT, U, U)
        if hi_i - lo_i > 1 and items.apart:  # at most one piece of the table per device
            for d in np.unique(pairs[idx, 1]):
                on = idx[pairs[idx, 1] == d]
                if len(on) > 1:
                    rows.add(on, np.ones(len(on)), -np.inf, 1.0)


def _add_even_widths(rows: _Rows, prob: Problem, starts: np.ndarray) -> tuple[np.ndarray, int]:
    """Items.even: for each table with pieces, a binary w_i per item and sum_d x[i, d] = parts_i w_i, sum_i w_i = 1 (a
    table in one width). Returns the items given a w column and the first of those columns."""
    items = prob.items
    even = [i for t in items.split_tables() for i in range(int(items.first[t]), int(items.first[t + 1]))]
    W0 = rows.reserve(len(even))
    col = {i: W0 + k for k, i in enumerate(even)}
    for t in items.split_tables():
        its = range(int(items.first[t]), int(items.first[t + 1]))
        for i in its:
            idx = np.arange(starts[i], starts[i + 1])
            rows.add(np.append(idx, col[i]), np.append(np.ones(len(idx)), -float(items.parts[i])), 0.0, 0.0)
        rows.add(np.array([col[i] for i in its]), np.ones(len(its)), 1.0, 1.0)
    return np.array(even, dtype=np.int64), W0


def _add_memory_and_widths(rows: _Rows, prob: Problem, lin: Linearization, by_dev: list[np.ndarray], U: int, TT: int, PP: int) -> float:
    """The capacity rows; u[c, d] = the width of device d in collective c, T[c] = its total, p[c] >= T[c] / total
    (it runs when any width is in it). Returns W, the unit of the widths."""
    pairs, upper, D, C = rows.pairs, prob.upper, prob.num_devices, lin.num_collectives
    # numerics: memory rows are in units of the device's capacity (bytes would put 1e10 beside 1e-5 in one model,
    # which CBC 2.10 cannot take); widths in units of W = the mean device width. Plans are checked exactly after.
    for d in range(D):
        idx = by_dev[d]
        sz = prob.sizes[pairs[idx, 0]].astype(np.float64)
        if (sz * upper[pairs[idx, 0]]).sum() > prob.caps[d]:
            rows.add(idx, sz / float(prob.caps[d]), -np.inf, 1.0)
    W = max(1.0, lin.total_width / D)
    for c in range(C):
        for d in range(D):
            idx = by_dev[d][lin.kind[pairs[by_dev[d], 0]] == c]
            rows.add(np.append(idx, U + c * D + d), np.append(lin.dims[pairs[idx, 0]] / W, -1.0), 0.0, 0.0)
        rows.add(np.append(U + c * D + np.arange(D), TT + c), np.append(np.ones(D), -1.0), 0.0, 0.0)
        if not lin.always[c]:
            rows.add(np.array([TT + c, PP + c]), np.array([1.0, -lin.total_width / W]), -np.inf, 0.0)
    return W


def _add_planes(rows: _Rows, lin: Linearization, D: int, U: int, MC: int, TT: int, PP: int, W: float) -> None:
    """m[c, d] >= every comm plane of collective c on device d (its own width, its host's, the total); where c may
    not run, its constant times p[c] (exact at p = 1; at p = 0 every width of c is 0, so m >= 0)."""
    members = [np.flatnonzero(lin.host == h) for h in range(lin.num_hosts)]
    for c in range(lin.num_collectives):
        for d in range(D):
            for k in range(lin.num_planes):
                merged: dict[int, float] = {MC + c * D + d: 1.0}
                merged[U + c * D + d] = -float(lin.k1[c, d, k]) * W
                if lin.k2[c, d, k] != 0:
                    for j in members[lin.host[d]]:  # (d is one of its host's members: merge the duplicate column)
                        merged[U + c * D + j] = merged.get(U + c * D + j, 0.0) - float(lin.k2[c, d, k]) * W
                if lin.k3[c, d, k] != 0:
                    merged[TT + c] = -float(lin.k3[c, d, k]) * W
                lo = float(lin.k0[c, d, k])
                if not lin.always[c]:  # the constant paid p times: exact at p = 1; at p = 0 c's widths are 0
                    merged[PP + c] = -lo
                    lo = 0.0
                rows.add(np.array(list(merged)), np.array(list(merged.values())), lo, np.inf)


def _add_device_costs(rows: _Rows, prob: Problem, lin: Linearization, by_dev: list[np.ndarray], M: int, Y: int, Z: int) -> None:
    """y_d = 1 iff device d holds a shard, and z >= c0[d] y_d + sum a[i, d] x[i, d] + m_d, every device."""
    pairs, upper = rows.pairs, prob.upper
    for d in range(prob.num_devices):
        idx = by_dev[d]
        if len(idx):  # y_d = 1 iff device d holds a shard (aggregated: one row each way)
            rows.add(np.append(idx, Y + d), np.append(np.ones(len(idx)), -float(upper[pairs[idx, 0]].sum())), -np.inf, 0.0)
        rows.add(np.append(idx, Y + d), np.append(-np.ones(len(idx)), 1.0), -np.inf, 0.0)
        rows.add(
            np.concatenate([idx, [M + d, Y + d, Z]]), np.concatenate([-lin.a[pairs[idx, 0], d], [-1.0, -float(lin.c0[d]), 1.0]]), 0.0, np.inf
        )


def _add_table_cuts(rows: _Rows, prob: Problem, lin: Linearization, starts: np.ndarray, Z: int) -> int:
    """z >= sum_{i of t} sum_d lb[i, d] x[i, d] width_i / dim (table_lower_bounds), less a hair for tolerances. Returns
    how many cuts were added."""
    items, pairs = prob.items, rows.pairs
    lb = prob.lb if prob.lb is not None else table_lower_bounds(lin, prob.allowed, prob.sizes, prob.caps)
    cuts = 0
    share = items.share
    for t in _useful_cuts(lb, items):
        idx = np.arange(starts[items.first[t]], starts[items.first[t + 1]])
        lbv = lb[pairs[idx, 0], pairs[idx, 1]]
        coef = (lbv - 1e-7 * np.maximum(1.0, np.abs(lbv))) * share[pairs[idx, 0]]  # (weights: share of the dim)
        rows.add(np.append(idx, Z), np.append(-coef, 1.0), 0.0, np.inf)
        cuts += 1
    return cuts


def _add_stay(rows: _Rows, prob: Problem, keep_pairs: np.ndarray, K0: int) -> np.ndarray:
    """The shards of the plan in hand kept in place (x for Booleans, k <= x for counts) and the trust region's row.
    Returns their columns (the objective's tie-break)."""
    center, pairs, upper = prob.center, rows.pairs, prob.upper
    assert center is not None
    on = center[pairs[:, 0], pairs[:, 1]] > 0
    stay_x = np.flatnonzero(on & (upper[pairs[:, 0]] == 1))
    for j, p in enumerate(keep_pairs):  # k <= x (and k <= the center's count, by its bound)
        rows.add(np.array([K0 + j, p]), np.array([1.0, -1.0]), -np.inf, 0.0)
    stay = np.concatenate([stay_x, K0 + np.arange(len(keep_pairs))]).astype(np.int64)
    if prob.radius is not None:
        rows.add(stay, np.ones(len(stay)), float(int(center.sum()) - prob.radius), np.inf)
    return stay


def _hint_vector(rows: _Rows, b: dict[str, Any], lin: Linearization, hint: np.ndarray, D: int) -> np.ndarray:
    n = len(rows.pairs)
    v = np.zeros(rows.n_vars)
    v[:n] = hint[rows.pairs[:, 0], rows.pairs[:, 1]].astype(np.float64)
    kp = b["keep_pairs"]
    v[b["K0"] : b["K0"] + len(kp)] = v[kp]  # (the hint is the center: every shard kept)
    u, _, T, runs = lin.collective_widths(hint)
    C = lin.num_collectives
    m = np.maximum(lin.collective_costs(hint), b["lo"][b["MC"] : b["MC"] + C * D].reshape(C, D))
    v[b["U"] : b["U"] + C * D] = (u / b["W"]).ravel()
    v[b["MC"] : b["MC"] + C * D] = m.ravel()
    v[b["M"] : b["M"] + D] = m.sum(axis=0) + lin.comm_const
    v[b["Y"] : b["Y"] + D] = hint.sum(axis=0) > 0
    v[b["T"] : b["T"] + C] = T / b["W"]
    v[b["P"] : b["P"] + C] = runs
    v[b["Z"]] = float((lin.compute_costs(hint) + v[b["M"] : b["M"] + D]).max())
    even = b.get("even_items", np.zeros(0, dtype=np.int64))
    v[b.get("W0", 0) + np.arange(len(even))] = hint[even].sum(axis=1) > 0
    return v


def _objective(rows: _Rows, b: dict[str, Any], prob: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Both backends' objective (z, less the move tie-break where the problem asks for it) and integrality (the item
    counts and the model's integer columns: 1, the rest 0)."""
    c = np.zeros(rows.n_vars)
    c[b["Z"]] = 1.0
    if b["stay"] is not None and prob.tiebreak:
        c[b["stay"]] = -MOVE_TIEBREAK_MS
    integrality = np.zeros(rows.n_vars)
    integrality[: len(rows.pairs)] = 1
    integrality[np.asarray(b.get("integer", []), dtype=int)] = 1
    return c, integrality


def _counts_from(rows: _Rows, xv: np.ndarray, I: int, D: int) -> np.ndarray:
    n = len(rows.pairs)
    counts = np.zeros((I, D), dtype=np.int64)
    counts[rows.pairs[:, 0], rows.pairs[:, 1]] = np.rint(xv[:n]).astype(np.int64)
    return counts


# ---------------------------------------------------------------------------------------------------------------
# HiGHS


def solve_highs(prob: Problem, lin: Linearization, hint: np.ndarray | None, time_limit: float, seed: int, workers: int, deterministic: bool, extra: Any = None) -> LinearSolve:
    """scipy.optimize.milp (HiGHS). It takes no starting solution: the warm start only serves as the cutoff z <= its
    linearised cost and as the plan to keep if HiGHS finds nothing better."""
    t0 = time.perf_counter()
    hint_cost = lin.cost(hint) if hint is not None else None
    rows, b = _milp_rows(prob, lin, hint_cost)
    if extra is not None:
        rows, b = extra(rows, b)
    n = len(rows.pairs)
    c, integrality = _objective(rows, b, prob)
    build_s = time.perf_counter() - t0
    info: dict[str, Any] = {"variables": rows.n_vars, "rows": rows.n_rows, "table_cuts": b.get("cuts", 0), "planes": lin.num_planes}
    meter = current_meter()
    node_limit = None
    if meter is not None:  # on a work budget: a node limit within the budget left, the wall clock only as its safety cap
        root_s, node_s = HIGHS_ROOT_WORK_S + HIGHS_ROOT_WORK_S_PER_COLUMN * rows.n_vars, HIGHS_NODE_WORK_S_PER_COLUMN * rows.n_vars
        if float(time_limit) < root_s:
            info["highs_message"] = f"not run: {float(time_limit):.3g} work s left, its root node is charged {root_s:.3g}"
            charge_seconds(float(time_limit))  # (the share it was given is spent: a loop of such calls ends on its budget)
            return LinearSolve(SolveStatus.no_solution, StopReason.work_budget, None, None, None, build_s, 0.0, info)
        node_limit = max(1, int((float(time_limit) - root_s) / node_s))
        limit = meter.wall_left()
    else:
        # (HiGHS checks its clock between phases: on models over LARGE_MODEL pairs it was seen 5 s late; 10 % margin)
        limit = max(0.01, (float(time_limit) - build_s) * (0.9 if n > constants.LARGE_MODEL else 1.0))
    t1 = time.perf_counter()
    res = solve_milp(rows, c, time_limit=limit, integrality=integrality, lb=b["lo"], ub=b["hi"], mip_rel_gap=1e-9, presolve=True,
                     node_limit=node_limit)
    solve_s = time.perf_counter() - t1
    if meter is not None:
        charge_seconds(root_s + node_s * res.nodes)
    info.update(highs_status=res.code, highs_message=res.message, highs_nodes=res.nodes)
    bound = res.dual_bound
    if res.status is SolveStatus.infeasible:
        if hint is not None:  # only the cutoff z <= the hint's cost makes it so: nothing better than the hint exists
            return LinearSolve(SolveStatus.optimal, StopReason.proven, hint.copy(), hint_cost, hint_cost, build_s, solve_s, {**info, "cutoff_proof": True})
        return LinearSolve(res.status, res.stopped, None, None, None, build_s, solve_s, info)
    if res.x is None:
        return LinearSolve(SolveStatus.no_solution, res.stopped, None, None, bound, build_s, solve_s, info)
    counts = _counts_from(rows, res.x, prob.num_items, prob.num_devices)
    info["solution"] = res.x
    status = SolveStatus.optimal if res.status is SolveStatus.optimal else SolveStatus.feasible
    zval = float(res.x[b["Z"]])
    return LinearSolve(status, res.stopped, counts, zval, bound if bound is not None else (zval if status is SolveStatus.optimal else None),
                       build_s, solve_s, info)


# ---------------------------------------------------------------------------------------------------------------
# CBC


def solve_cbc(prob: Problem, lin: Linearization, hint: np.ndarray | None, time_limit: float, seed: int, workers: int, deterministic: bool, extra: Any = None) -> LinearSolve:
    """PuLP + CBC (solvers.milp.cbc), warm-started from the hint (CBC's mipstart)."""
    t0 = time.perf_counter()
    # no cutoff row here: with its incumbent at the cutoff, CBC 2.10 ends with "Problem proven infeasible"
    rows, b = _milp_rows(prob, lin, None)
    if extra is not None:
        rows, b = extra(rows, b)
    n = len(rows.pairs)
    c, integrality = _objective(rows, b, prob)
    start = None
    if hint is not None:
        start = _hint_vector(rows, b, lin, hint, prob.num_devices)
        if "hint" in b:
            start = b["hint"](start)
    names = [f"x{rows.pairs[j, 0]}_{rows.pairs[j, 1]}" if j < n else f"v{j}" for j in range(rows.n_vars)]
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    res = solve_milp_cbc(rows, c, time_limit=time_limit - build_s, integrality=integrality, lb=np.array(b["lo"], dtype=float), ub=np.array(b["hi"], dtype=float),
                         start=start, seed=seed, names=names,
                         # deterministic: one thread (CBC 2.10.3's deterministic parallel mode, threads + 100, crashes on
                         # some of these models)
                         threads=1 if deterministic else max(1, int(workers)))
    solve_s = time.perf_counter() - t1
    info = {"variables": rows.n_vars, "rows": len(rows.row_lo), "table_cuts": b.get("cuts", 0), "cbc_result": res.message, "planes": lin.num_planes}
    if res.status is SolveStatus.infeasible:
        return LinearSolve(res.status, res.stopped, None, None, None, build_s, solve_s, info)
    if res.x is None:
        return LinearSolve(SolveStatus.no_solution, res.stopped, None, None, res.dual_bound, build_s, solve_s, info)
    counts = _counts_from(rows, res.x, prob.num_items, prob.num_devices)
    info["solution"] = res.x
    objective = float(res.x[b["Z"]])
    proven = res.status is SolveStatus.optimal
    bound = res.dual_bound if res.dual_bound is not None else (objective if proven else None)
    return LinearSolve(SolveStatus.optimal if proven else SolveStatus.feasible, res.stopped, counts, objective, bound, build_s, solve_s, info)
