"""Issue 18, item 1: the default solver answers in seconds. neuroshard with its default budget (solvers.neuroshard.search.
default_budget: 2-10 s from the instance's size) against the same search given 55 s (the old default), on the
production instance (856 x 128) and the 100 x 8 dreamshard instance, and its default's suite means on the
dreamshard-test and neuroshard-test suites. Costs are SIMULATED (analytic model, the instance's own profile).

Run: `.venv/bin/python benchmarks/bench_fast_default.py [--out benchmarks/results/fast-default.json]`
(one run after another, never beside another timing job: the budgets are wall-clock).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.neuroshard.config import default_budget  # noqa: E402

SUITES = ROOT / "instances" / "suites"
CASES = {
    "856x128": SUITES / "production" / "production-all-s0-0000.json",
    "100x8": SUITES / "dreamshard-test" / "dreamshard-test-s1-0003.json",
}


def solve(path: Path, time_limit: float | None, name: str = "neuroshard") -> dict:
    from solvers.catalog import get_solver

    inst = load_instance(path)
    t0 = time.perf_counter()
    r = get_solver(name).solve(inst, AnalyticCostModel(), time_limit=time_limit, seed=0)
    wall = time.perf_counter() - t0
    return {"instance": path.stem, "solver": name, "time_limit_s": time_limit, "default_budget_s": default_budget(inst),
            "wall_s": round(wall, 3), "status": r.status.value, "cost_ms": r.predicted_cost,
            **(r.stats.to_dict() if r.stats else {})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip-55", action="store_true", help="skip the 55 s reference runs")
    args = ap.parse_args(argv)
    rows = []
    for label, path in CASES.items():
        for tl in ([None] if args.skip_55 else [None, 55.0]):
            row = {"case": label, **solve(path, tl)}
            rows.append(row)
            print(f"{label:8s} time_limit={tl}: {row['wall_s']:.2f} s, {row['status']}, {row['cost_ms']:.4f} ms (sim)")
        row = {"case": label, **solve(path, None, "neuroshard_faithful")}
        rows.append(row)
        print(f"{label:8s} neuroshard_faithful default: {row['wall_s']:.2f} s, {row['status']}, {row['cost_ms']:.4f} ms (sim)")
    suites = {}
    for suite in ("dreamshard-test", "neuroshard-test"):
        got = [solve(p, None) for p in sorted((SUITES / suite).glob(f"{suite}-*.json"))]
        suites[suite] = {"instances": len(got), "mean_cost_ms": statistics.fmean(g["cost_ms"] for g in got),
                         "mean_wall_s": statistics.fmean(g["wall_s"] for g in got), "max_wall_s": max(g["wall_s"] for g in got),
                         "timeouts": sum(g["status"] == "timeout" for g in got)}
        print(f"{suite}: mean {suites[suite]['mean_cost_ms']:.6f} ms (sim), mean {suites[suite]['mean_wall_s']:.2f} s, max {suites[suite]['max_wall_s']:.2f} s")
    doc = {"command": "python benchmarks/bench_fast_default.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": f"{platform.node()} ({platform.machine()}), 2-core VM", "date": date.today().isoformat(),
           "judge": "sim (analytic model)", "rows": rows, "suites": suites}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
