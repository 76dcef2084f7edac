"""Measure the certified bound of the analytic cost model (solvers/bound/) against real plans.

    .venv/bin/python benchmarks/bench_bound.py                      # neuroshard plans vs the column-wise bound
    .venv/bin/python benchmarks/bench_bound.py --table-wise         # greedy's table-wise plans vs the table-wise bound
    .venv/bin/python benchmarks/bench_bound.py --suites neuroshard-test --limit 3 --time-limit 5

For every instance of the suites: solve with the solver (default `neuroshard` with --solver-time-limit; `greedy` with
--table-wise), judge its plan with the analytic model, compute the certified bound (--time-limit), and record the gap
(cost - bound) / cost, whether the relaxation was solved to optimality, the bound's time, and the analytic cost of the
plan the relaxation's own solution describes (a real plan; its gap is certified too), and what the relaxation
charges the solver's plan itself ("inequality slack at the plan": how much of the gap the inequalities, rather than
the unfinished search, account for at that plan). Rows are appended to a JSONL
file as they finish (a re-run skips instances already there); a summary per suite goes to a JSON file and is printed
as a Markdown table. All costs are SIMULATED by the analytic model.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.bound import AnalyticRelaxation, analytic_lower_bound, plan_gap  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402

SUITES = ("dreamshard-test", "neuroshard-test", "autoshard-test")


def instance_paths(suite: str, limit: int | None) -> list[Path]:
    paths = sorted(p for p in (ROOT / "instances" / "suites" / suite).glob("*.json") if p.name != "suite.json")
    return paths[:limit] if limit else paths


def measure(path: Path, solver: str, solver_limit: float | None, bound_limit: float, table_wise: bool) -> dict:
    """One instance: the solver's plan, the bound, the gap, the relaxation's own plan."""
    inst = load_instance(path)
    cm = AnalyticCostModel()
    t0 = time.perf_counter()
    r = get_solver(solver).solve(inst, cm, seed=0, time_limit=solver_limit)
    solve_s = time.perf_counter() - t0
    cost = cm.plan_costs(inst, r.plan).max_cost
    b = analytic_lower_bound(inst, cm, time_limit=bound_limit, table_wise=table_wise)
    idx = inst.table_index()
    triples = [(idx[s.table], s.device, s.width(inst.tables[idx[s.table]])) for s in r.plan.shards]
    at_plan = float(AnalyticRelaxation(inst, cm).device_costs(triples).max())  # the inequalities' own slack there
    row = {
        "instance": path.name, "tables": len(inst.tables), "devices": inst.topology.num_devices, "solver": solver,
        "solver_s": round(solve_s, 3), "cost_ms": cost, "bound_ms": b.value_ms, "bound_status": b.status, "bound_s": round(b.time_s, 3),
        "gap": plan_gap(inst, cost, b), "relaxation_primal_ms": b.relaxation_primal_ms, "relaxation_plan_ms": b.plan_cost_ms,
        "variables": b.variables, "rows": b.rows, "table_wise": table_wise, "lp_bound_ms": b.lp_bound_ms,
        "relaxation_at_plan_ms": at_plan, "slack_at_plan": (cost - at_plan) / cost,
    }
    if b.plan_cost_ms is not None:
        row["relaxation_plan_gap"] = plan_gap(inst, b.plan_cost_ms, b)
        best = min(cost, b.plan_cost_ms)
        row["best_gap"] = plan_gap(inst, best, b)
    return row


def summarise(rows: list[dict]) -> dict:
    gaps = [r["gap"] for r in rows]
    best = [r.get("best_gap", r["gap"]) for r in rows]
    return {
        "instances": len(rows),
        "mean_gap": statistics.fmean(gaps), "median_gap": statistics.median(gaps), "max_gap": max(gaps),
        "optimal": sum(r["bound_status"] == "optimal" for r in rows),
        "mean_bound_s": statistics.fmean(r["bound_s"] for r in rows),
        "mean_solver_s": statistics.fmean(r["solver_s"] for r in rows),
        "mean_cost_ms": statistics.fmean(r["cost_ms"] for r in rows),
        "mean_bound_ms": statistics.fmean(r["bound_ms"] for r in rows),
        "relaxation_plan_better": sum((r.get("relaxation_plan_ms") or float("inf")) < r["cost_ms"] * (1 - 1e-9) for r in rows),
        "mean_best_gap": statistics.fmean(best), "max_best_gap": max(best),
        "max_slack_at_plan": max((r.get("slack_at_plan", float("nan")) for r in rows), default=float("nan")),
    }


def markdown(summary: dict[str, dict], solver: str) -> str:
    head = (f"| suite | instances | mean {solver} cost ms | mean bound ms | gap mean | gap median | gap max | proven optimal | "
            "mean bound time | relaxation plan better | best-plan gap mean / max | inequality slack at the plans (max) |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for suite, s in summary.items():
        lines.append(
            f"| {suite} | {s['instances']} | {s['mean_cost_ms']:.3f} | {s['mean_bound_ms']:.3f} | {100 * s['mean_gap']:.2f} % | "
            f"{100 * s['median_gap']:.2f} % | {100 * s['max_gap']:.2f} % | {s['optimal']} / {s['instances']} | {s['mean_bound_s']:.1f} s | "
            f"{s['relaxation_plan_better']} / {s['instances']} | {100 * s['mean_best_gap']:.2f} % / {100 * s['max_best_gap']:.2f} % | "
            f"{100 * s['max_slack_at_plan']:.3f} % |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds for the bound")
    ap.add_argument("--solver", default=None, help="default: neuroshard (greedy with --table-wise)")
    ap.add_argument("--solver-time-limit", type=float, default=10.0)
    ap.add_argument("--table-wise", action="store_true")
    ap.add_argument("--limit", type=int, default=None, help="first N instances of each suite")
    ap.add_argument("--out", default=None, help="results stem (default benchmarks/results/bound[-table-wise])")
    args = ap.parse_args()
    solver = args.solver or ("greedy" if args.table_wise else "neuroshard")
    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / ("bound-table-wise" if args.table_wise else "bound")
    stem.parent.mkdir(parents=True, exist_ok=True)
    jsonl = stem.with_suffix(".jsonl")
    done = {}
    if jsonl.exists():
        for line in jsonl.read_text().splitlines():
            r = json.loads(line)
            done[(r["suite"], r["instance"])] = r
    summary: dict[str, dict] = {}
    for suite in args.suites.split(","):
        rows = []
        for path in instance_paths(suite, args.limit):
            row = done.get((suite, path.name))
            if row is None:
                row = {"suite": suite, **measure(path, solver, args.solver_time_limit, args.time_limit, args.table_wise)}
                with jsonl.open("a") as f:
                    f.write(json.dumps(row) + "\n")
            rows.append(row)
            print(f"{suite} {path.name}: cost {row['cost_ms']:.4f} bound {row['bound_ms']:.4f} ({row['bound_status']}, "
                  f"{row['bound_s']:.1f} s) gap {100 * row['gap']:.2f} % relaxation plan {row.get('relaxation_plan_ms')}", flush=True)
        summary[suite] = summarise(rows)
    doc = {
        "what": "certified lower bound of the analytic cost model vs plans; costs SIMULATED by the analytic model",
        "command": "python " + " ".join(sys.argv), "solver": solver, "table_wise": args.table_wise,
        "bound_time_limit_s": args.time_limit, "solver_time_limit_s": args.solver_time_limit,
        "machine": f"{platform.machine()} {platform.system()}, Python {platform.python_version()}",
        "summary": summary,
    }
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(markdown(summary, solver))


if __name__ == "__main__":
    main()
