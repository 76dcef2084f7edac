"""Measure the exact solvers (cpsat, milp, milp_highs) on the standard benchmark instances.

    .venv/bin/python benchmarks/bench_exact.py                       # the two standard runs below
    .venv/bin/python benchmarks/bench_exact.py --case medium --solvers cpsat,milp,milp_highs --time-limit 10
    .venv/bin/python benchmarks/bench_exact.py --instance PATH --time-limit 60 --cost-model neural

Standard cases:
- `medium`: 100 tables x 8 devices (instances/suites/dreamshard-test/dreamshard-test-s1-0003.json), 10 s: is the
  linearised model proven optimal in time? time, status, bound and gap;
- `large`: 856 tables x 128 devices (instances/suites/production/production-all-s0-0000.json), 60 s: never worse than
  the warm start? best plan, bound and gap.

For each solver: status, wall time, the warm start (best heuristic by the full cost model), the best plan's full-model
cost, the bound of the linearised model around it (and the cheap table-cut bound), the gap between them, and every
iteration of the linearise / solve / judge loop. Prints a table per run and one JSON line per run. Costs are
simulated (analytic model) unless --cost-model says otherwise. The bound is of the *linearised* model, not of the
full cost model (docs/exact-solvers.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402

CASES = {
    "medium": ("instances/suites/dreamshard-test/dreamshard-test-s1-0003.json", 10.0),
    "large": ("instances/suites/production/production-all-s0-0000.json", 60.0),
}


def run_one(instance_path: str, solver: str, time_limit: float, cost_model: str, seed: int, options: dict) -> dict:
    instance = load_instance(ROOT / instance_path if not Path(instance_path).is_absolute() else instance_path)
    cm = get_cost_model(cost_model)
    t0 = time.perf_counter()
    r = get_solver(solver, **options).solve(instance, cm, time_limit=time_limit, seed=seed)
    wall = time.perf_counter() - t0
    info = r.info
    warm = asdict(r.stats.warm_start) if r.stats is not None and r.stats.warm_start is not None else {}
    its = [
        {
            k: it.get(k)
            for k in (
                "iteration", "radius", "linear_status", "linear_objective", "linear_bound", "table_cut_bound", "full_cost",
                "improved", "moved_shards", "split_tables", "linearize_s", "build_s", "solve_s", "variables", "planes", "table_cuts",
            )
        }
        for it in info.get("iterations", [])
    ]
    return {
        "instance": instance_path,
        "tables": len(instance.tables),
        "devices": instance.topology.num_devices,
        "solver": solver,
        "options": options,
        "cost_model": cm.describe(),
        "time_limit_s": time_limit,
        "status": r.status.value,
        "wall_s": wall,
        "warm_start_solver": warm.get("solver"),
        "warm_start_cost": warm.get("cost"),
        "warm_start_s": info.get("warm_start_s"),
        "best_cost": r.predicted_cost,
        "never_worse_than_warm_start": (r.predicted_cost is not None and warm.get("cost") is not None and r.predicted_cost <= warm["cost"] + 1e-12),
        "linear_bound": r.model_bound.value if r.model_bound is not None else None,
        "linear_bound_proven_optimal": info.get("linear_bound_proven_optimal"),
        "bound_is_for": r.model_bound.of if r.model_bound is not None else None,
        "gap_to_linear_bound": info.get("gap_to_linear_bound"),
        "converged": info.get("converged"),
        "split_tables_offered": len(info.get("split_tables_offered") or []),
        "split_tables_used": info.get("split_tables_used"),
        "iterations": its,
        "local_searches": info.get("local_searches", []),
        "reason": r.reason,
    }


def show(row: dict) -> None:
    def f(x, spec=".4f"):
        return "-" if x is None else format(x, spec)

    print(
        f"{row['instance']} ({row['tables']} x {row['devices']}), {row['solver']} {row['options'] or ''}, "
        f"{row['cost_model']}, limit {row['time_limit_s']:g} s"
    )
    print(
        f"  status {row['status']} in {row['wall_s']:.2f} s; warm start {row['warm_start_solver']} {f(row['warm_start_cost'])} ms "
        f"-> best {f(row['best_cost'])} ms; linear bound {f(row['linear_bound'])} ms "
        f"(proven optimal: {row['linear_bound_proven_optimal']}); gap {f(row['gap_to_linear_bound'] and 100 * row['gap_to_linear_bound'], '.2f')}%; "
        f"split tables used {len(row['split_tables_used'] or [])} of {row['split_tables_offered']} offered"
    )
    for ls in row["local_searches"]:
        print(
            f"    local search before it {ls['before_iteration']}: linear {f(ls['linear_start'])} -> {f(ls['linear_best'])}, "
            f"full {f(ls['expansion_cost'])} -> {f(ls['full_cost'])} (best of {ls['plans_judged']} plans), improved {ls['improved']}, "
            f"{ls['steps']} steps, {ls['kicks']} kicks, stopped: {ls['stopped']}, {f(ls['search_s'], '.2f')} s"
        )
    for it in row["iterations"]:
        print(
            f"    it {it['iteration']}: radius {it['radius']}, {it['linear_status']}, linear {f(it['linear_objective'])} "
            f"(bound {f(it['linear_bound'])}, cut bound {f(it['table_cut_bound'])}), full {f(it['full_cost'])}, "
            f"improved {it['improved']}, moved {it['moved_shards']} shards, split tables {it['split_tables']}, linearise {f(it['linearize_s'], '.2f')} s, "
            f"build {f(it['build_s'], '.2f')} s, solve {f(it['solve_s'], '.2f')} s"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), action="append", help="standard case(s); default: all")
    ap.add_argument("--instance", help="an instance file instead of the standard cases")
    ap.add_argument("--instances", help="comma-separated globs of instance files instead (e.g. 'instances/suites/dreamshard-test/dreamshard-test-s1-*.json')")
    ap.add_argument("--summary", action="store_true", help="one line per run instead of the iterations")
    ap.add_argument("--solvers", default="cpsat", help="comma-separated (cpsat, milp, milp_highs)")
    ap.add_argument("--time-limit", type=float, default=None, help="override the case's limit")
    ap.add_argument("--cost-model", default="analytic")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--options", default="{}", help='solver options as JSON, e.g. \'{"deterministic": false}\'')
    args = ap.parse_args(argv)

    if args.instances:
        import glob

        runs = [(str(Path(p).relative_to(ROOT)) if Path(p).is_absolute() else p, args.time_limit or 10.0) for g in args.instances.split(",") for p in sorted(glob.glob(g))]
    else:
        runs = [(args.instance, args.time_limit or 60.0)] if args.instance else [CASES[c] for c in (args.case or sorted(CASES, reverse=True))]
    options = json.loads(args.options)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; {time.strftime('%Y-%m-%d')}")
    for path, limit in runs:
        for solver in args.solvers.split(","):
            row = run_one(path, solver.strip(), args.time_limit or limit, args.cost_model, args.seed, options)
            if args.summary:
                gap = row["gap_to_linear_bound"]
                searched = row["local_searches"]
                ls_note = f"{sum(ls['improved'] for ls in searched)}/{len(searched)}"
                print(f"| {Path(path).name} | {solver} | {row['status']} | {row['wall_s']:.2f} | {row['warm_start_solver']} {row['warm_start_cost']:.4f} | {ls_note} | "
                      f"{row['best_cost']:.4f} | {row['linear_bound'] if row['linear_bound'] is None else format(row['linear_bound'], '.4f')} | "
                      f"{'-' if gap is None else format(100 * gap, '.2f')} % | {row['linear_bound_proven_optimal']} |", flush=True)
                continue
            show(row)
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
