"""Plan quality of every registered solver on the standard test suites, judged by the analytic model (simulated).

For each suite: the mean plan cost (max over devices, ms), the mean ratio to the best solver on each instance, how
many instances each solver could not place (counted, never dropped silently: a failure counts as a missing row and
is shown), and the mean solve time. Run: `.venv/bin/python benchmarks/bench_suite_quality.py [SUITE_DIR ...]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.catalog import get_solver, solver_names  # noqa: E402

DEFAULT_SUITES = ["dreamshard-test", "neuroshard-test", "autoshard-test", "production"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="*", type=Path, default=[ROOT / "instances" / "suites" / s for s in DEFAULT_SUITES])
    ap.add_argument("--solvers", default=",".join(solver_names()))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    names = args.solvers.split(",")
    model = get_cost_model("analytic")
    report = []
    for suite in args.suites:
        files = sorted(p for p in suite.glob("*.json") if p.name != "suite.json")
        costs: dict[str, list[float | None]] = {n: [] for n in names}
        times: dict[str, list[float]] = {n: [] for n in names}
        for f in files:
            inst = load_instance(f)
            for n in names:
                r = get_solver(n).solve(inst, model, seed=args.seed)
                costs[n].append(r.predicted_cost if r.status.has_plan else None)
                times[n].append(r.wall_time_s)
        best = [min((costs[n][i] for n in names if costs[n][i] is not None), default=None) for i in range(len(files))]
        print(f"\n{suite.name}: {len(files)} instances (analytic judge, simulated ms)")
        print(f"{'solver':<12} {'mean cost':>10} {'vs best':>8} {'failed':>7} {'mean s':>8}")
        for n in names:
            ok = [(c, b) for c, b in zip(costs[n], best) if c is not None and b]
            mean = statistics.mean(c for c, _ in ok) if ok else float("nan")
            ratio = statistics.mean(c / b for c, b in ok) if ok else float("nan")
            failed = sum(c is None for c in costs[n])
            row = {"suite": suite.name, "solver": n, "instances": len(files), "mean_cost_ms": mean, "mean_ratio_to_best": ratio, "failed": failed, "mean_solve_s": statistics.mean(times[n])}
            report.append(row)
            print(f"{n:<12} {mean:>10.3f} {ratio:>8.3f} {failed:>7d} {row['mean_solve_s']:>8.3f}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
