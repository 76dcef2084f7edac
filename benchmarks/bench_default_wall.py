"""Default solves against their work budgets: each instance's solve with no --time-limit, its wall time beside the
work seconds it was given, why it stopped and its plan cost (simulated, the analytic model). A wall time far above
the budget is work the meter (shardopt.core.work) does not charge.

    .venv/bin/python benchmarks/bench_default_wall.py instances/suites/huge-test/huge-test-s1-*.json --out wall.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="+", type=Path)
    ap.add_argument("--solver", default="neuroshard")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    from costmodels.analytic import AnalyticCostModel
    from shardopt.core.ir import load_instance
    from solvers.catalog import get_solver

    rows = {}
    for path in args.instances:
        inst = load_instance(path)
        t0 = time.perf_counter()
        r = get_solver(args.solver).solve(inst, AnalyticCostModel(), seed=args.seed)
        rows[path.name] = {"wall_s": round(time.perf_counter() - t0, 2), "work_s": r.work_budget.work_s if r.work_budget else None,
                           "stopped": r.stopped.value if r.stopped else None, "cost_ms": r.predicted_cost}
        row = rows[path.name]
        print(f"{path.name:40s} {row['wall_s']:7.2f} s on {row['work_s']} work s  {row['stopped']:12s} {row['cost_ms']}", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"solver": args.solver, "seed": args.seed, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
