"""Probe why the exact solvers cannot prove the 100 x 8 linear models optimal: is it the bound or the search?

    .venv/bin/python benchmarks/probe_linear_gap.py                       # s1-0003, every probe
    .venv/bin/python benchmarks/probe_linear_gap.py --instances 'instances/suites/dreamshard-test/dreamshard-test-s1-00[01][37].json' --probes lp,widths

On the table-wise linear model around the best heuristic's plan (what `cpsat max_split=1` solves first):
- `lp`: the LP relaxation (HiGHS) and how full it packs each device's memory;
- `widths`: the same with every device's pooled width forced to an integer multiple of the table-dim gcd -- the
  most that cuts from the integrality of the widths could add to the bound;
- `feasible`: CP-SAT asked only for *some* plan within each --deltas (ms) of the LP bound (no hint, no objective),
  --feasible-limit seconds each: a plan found, none possible (proven), or neither;
- `search`: the local search of the linear model alone (solvers.exact.linear_search), --search-seeds x --search-limit s.
- `config`: is --config-target (ms above the LP bound) feasible for the *configuration* LP (one column per device
  and item subset that fits in memory and costs <= the target; the relaxation stronger than the LP that
  branch-and-price would use)? Column generation: HiGHS LP master (uncovered items as slack), one knapsack MILP per
  device as pricing, until no column prices out (master 0: feasible; > 0: the configuration bound is above the
  target) or --config-limit seconds.
A proof of optimality needs a plan and a bound within the model's unit (1e-4 ms); these say which side is stuck.
Prints a line per probe and one JSON line per instance. Costs are simulated (analytic model).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402
from solvers.exact.constants import COST_SCALE  # noqa: E402
from solvers.exact.formulation import Problem, table_lower_bounds  # noqa: E402
from solvers.exact.linear_search import linear_local_search  # noqa: E402
from solvers.exact.linearize import linearize  # noqa: E402
from solvers.exact.milp import _milp_rows  # noqa: E402

DEFAULT = "instances/suites/dreamshard-test/dreamshard-test-s1-0003.json"


def table_wise_model(path: str):
    """(instance, items, caps, fits, the start's counts, its linearisation, the start's name)."""
    instance = load_instance(ROOT / path)
    cm = get_cost_model("analytic")
    bm = cm.bind(instance)
    solver = get_solver("cpsat", max_split=1)
    starts = [s for s in solver.warm_starts(instance, bm, cm.describe(), 0, 10.0) if s["cost"] is not None]
    start = min(starts, key=lambda s: s["cost"])
    items = solver.items(instance, bm, start["shards"])
    caps = np.array(instance.topology.capacities(), dtype=np.int64)
    counts = items.counts_from_shards(instance, start["shards"], len(caps))
    lin = linearize(bm, counts, "planes", items)
    fits = items.size[:, None] <= caps[None, :]
    return instance, items, caps, fits, counts, lin, start["solver"]


def lp_bound(instance, items, caps, fits, lin, width_unit: int | None = None) -> tuple[float, np.ndarray]:
    """(LP bound of the linear model (with the table cuts), memory use of each device in its solution); with
    `width_unit`, each u_d = width_unit * an integer variable (everything else continuous)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    lb = table_lower_bounds(lin, fits, items.size, caps)
    prob = Problem(instance, items, items.size, caps, fits, [], np.arange(items.num_items), None, None, False, True, lb)
    rows, b = _milp_rows(prob, lin, None)
    D = len(caps)
    n0 = rows.n_vars
    extra = D if width_unit else 0
    if width_unit:
        for d in range(D):  # u_d is stored in units of W
            rows.add(np.array([b["U"] + d, n0 + d]), np.array([b["W"], -float(width_unit)]), 0.0, 0.0)
    A = csr_array((rows.vals, (rows.rows, rows.cols)), shape=(len(rows.lo), n0 + extra))
    c = np.zeros(n0 + extra)
    c[b["Z"]] = 1.0
    integrality = np.zeros(n0 + extra)
    integrality[n0:] = 1
    lo = np.concatenate([b["lo"], np.zeros(extra)])
    hi = np.concatenate([b["hi"], np.full(extra, lin.total_width)])
    res = milp(c, integrality=integrality, bounds=Bounds(lo, hi), constraints=LinearConstraint(A, np.array(rows.lo), np.array(rows.hi)),
               options={"time_limit": 60})
    x = res.x[: len(rows.pairs)]
    use = np.bincount(rows.pairs[:, 1], weights=items.size[rows.pairs[:, 0]] * x, minlength=D) / caps
    return float(res.fun), use


def feasible_within(lin, items, caps, target: float, limit: float, workers: int) -> str:
    """CP-SAT: is there a table-wise plan whose linear cost is <= target (ms)? found / none / unknown."""
    from ortools.sat.python import cp_model

    S = COST_SCALE
    I, D = lin.a.shape
    a = np.floor(lin.a * S).astype(np.int64)  # (rounded down: "none" is then a proof for the real coefficients)
    c0 = np.floor(lin.c0 * S).astype(np.int64)
    dims = lin.dims.astype(np.int64)
    m = cp_model.CpModel()
    x = [[m.new_bool_var(f"x{i}_{d}") for d in range(D)] for i in range(I)]
    for i in range(I):
        m.add_exactly_one(x[i])
    goal = math.floor(target * S)
    for d in range(D):
        m.add(sum(int(items.size[i]) * x[i][d] for i in range(I)) <= int(caps[d]))
        u = sum(int(dims[i]) * x[i][d] for i in range(I))
        comp = int(c0[d]) + sum(int(a[i, d]) * x[i][d] for i in range(I))
        for k in range(lin.num_planes):  # (one host, whole tables: one collective; host width and total are the constant total)
            const = lin.k0[0, d, k] + (lin.k2[0, d, k] + lin.k3[0, d, k]) * lin.total_width + lin.comm_const[d]
            m.add(1000 * comp + math.floor(const * S * 1000) + math.floor(lin.k1[0, d, k] * S * 1000) * u <= 1000 * goal)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = limit
    code = solver.solve(m)
    return {cp_model.OPTIMAL: "found", cp_model.FEASIBLE: "found", cp_model.INFEASIBLE: "none"}.get(code, "unknown")


def configuration_lp(lin, items, caps, target: float, limit: float) -> tuple[float | None, int, int]:
    """(master optimum at the end -- None when cut by `limit` --, rounds, columns): column generation for the
    configuration LP at `target` (see the module docstring)."""
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp

    I, D = lin.a.shape
    size = items.size.astype(np.float64)
    cols: list[tuple[int, np.ndarray]] = []
    t0 = time.perf_counter()
    rnd = 0
    while True:
        n = len(cols)
        a_cov = np.zeros((I, n + I))
        a_dev = np.zeros((D, n + I))
        for j, (d, mask) in enumerate(cols):
            a_cov[mask, j] = 1.0
            a_dev[d, j] = 1.0
        a_cov[:, n:] = np.eye(I)
        master = linprog(np.concatenate([np.zeros(n), np.ones(I)]), A_ub=np.vstack([-a_cov, a_dev]),
                         b_ub=np.concatenate([-np.ones(I), np.ones(D)]), bounds=(0, None), method="highs")
        pi, mu = -master.ineqlin.marginals[:I], master.ineqlin.marginals[I:]  # cover duals >= 0, device duals <= 0
        added = 0
        for d in range(D):  # pricing: the subset of most dual value that fits and costs <= target on d
            rows = [size / caps[d]] + [lin.a[:, d] + lin.k1[0, d, k] * lin.dims for k in range(lin.num_planes)]
            hi = [1.0] + [target - lin.c0[d] - lin.comm_const[d] - lin.k0[0, d, k] - (lin.k2[0, d, k] + lin.k3[0, d, k]) * lin.total_width
                          for k in range(lin.num_planes)]
            res = milp(-pi, integrality=np.ones(I), bounds=Bounds(0, 1), constraints=LinearConstraint(np.array(rows), -np.inf, np.array(hi)),
                       options={"time_limit": 30.0})
            if res.x is not None and -res.fun > -mu[d] + 1e-9:
                cols.append((d, np.round(res.x).astype(bool)))
                added += 1
        rnd += 1
        if rnd % 20 == 0:
            print(f"  config: round {rnd}: master {master.fun:.6f}, {len(cols)} columns, {time.perf_counter() - t0:.0f} s", flush=True)
        if added == 0:
            return float(master.fun), rnd, len(cols)
        if time.perf_counter() - t0 > limit:
            return None, rnd, len(cols)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default=DEFAULT, help="comma-separated globs, relative to the repository")
    ap.add_argument("--probes", default="lp,widths,feasible,search", help="any of lp, widths, feasible, search, config")
    ap.add_argument("--deltas", default="0.002,0.005,0.01,0.02", help="ms above the LP bound (feasible probe)")
    ap.add_argument("--feasible-limit", type=float, default=30.0)
    ap.add_argument("--search-seeds", type=int, default=6)
    ap.add_argument("--search-limit", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--config-target", type=float, default=0.0033, help="ms above the LP bound (config probe)")
    ap.add_argument("--config-limit", type=float, default=600.0)
    args = ap.parse_args(argv)
    probes = set(args.probes.split(","))
    paths = [str(Path(p).relative_to(ROOT)) if Path(p).is_absolute() else p for g in args.instances.split(",") for p in sorted(glob.glob(str(ROOT / g)))]
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; {time.strftime('%Y-%m-%d')}")
    for path in paths:
        instance, items, caps, fits, counts, lin, start = table_wise_model(path)
        row: dict = {"instance": path, "start": start, "start_linear_cost": lin.cost(counts), "memory_use": float(items.size.sum() / caps.sum())}
        print(f"{Path(path).name}: {items.num_tables} x {len(caps)}, linear model around {start}'s plan ({lin.cost(counts):.4f} ms); "
              f"tables use {100 * row['memory_use']:.1f} % of device memory")
        lp = None
        if probes & {"lp", "widths", "feasible", "config"}:
            lp, use = lp_bound(instance, items, caps, fits, lin)
            row.update(lp_bound=lp, lp_devices_full=int((use > 1 - 1e-6).sum()))
            print(f"  lp: bound {lp:.5f} ms; devices filled to capacity in its solution: {row['lp_devices_full']} of {len(caps)}")
        if "widths" in probes:
            g = int(np.gcd.reduce(lin.dims.astype(np.int64)))
            wb, _ = lp_bound(instance, items, caps, fits, lin, width_unit=g)
            row.update(width_gcd=g, integral_width_bound=wb)
            print(f"  widths: integral widths (multiples of {g}): bound {wb:.5f} ms (+{(wb - lp) * COST_SCALE:.1f} units of 1e-4 ms)")
        if "feasible" in probes:
            out = {}
            for delta in (float(x) for x in args.deltas.split(",")):
                t0 = time.perf_counter()
                out[delta] = feasible_within(lin, items, caps, lp + delta, args.feasible_limit, args.workers)
                print(f"  feasible: a plan within {delta:g} ms of the LP bound? {out[delta]} ({time.perf_counter() - t0:.1f} s)", flush=True)
            row["feasible_within"] = out
        if "search" in probes:
            found = []
            for seed in range(args.search_seeds):
                res = linear_local_search(lin, items.size, caps, counts, seed=seed, time_limit=args.search_limit, stall=10**9)
                found.append(res.cost)
                print(f"  search: seed {seed}: {res.cost:.5f} ms ({res.steps} steps, {res.kicks} kicks, {res.seconds:.1f} s)", flush=True)
            row["search_best"] = found
        if "config" in probes:
            target = lp + args.config_target
            t0 = time.perf_counter()
            value, rounds, ncols = configuration_lp(lin, items, caps, target, args.config_limit)
            verdict = "unknown (time)" if value is None else ("infeasible: the configuration bound is above it" if value > 1e-7 else "feasible")
            row["config"] = {"target": target, "master": value, "rounds": rounds, "columns": ncols, "verdict": verdict, "seconds": time.perf_counter() - t0}
            print(f"  config: target {target:.5f} ms (LP + {args.config_target:g}): {verdict} after {rounds} rounds, {ncols} columns, {time.perf_counter() - t0:.0f} s")
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
