"""TorchRec's planner beside greedy and NeuroShard on the standard suites: solve time and plan cost (analytic judge).

Every plan is judged by `AnalyticCostModel().plan_costs(instance, plan)` (simulated ms, max over devices). A solver
that returns no plan is counted as failed, with its reason, never dropped silently. TorchRec variants:

- `torchrec`: the registered solver: table-, column-, row-, table-row-wise and data-parallel, UVM kernels when the
  instance has host memory (min_partition 128: dims <= 128 are never split by columns);
- `torchrec_twcw`: table_wise + column_wise only (the registered solver's defaults before issue 17; the tables of
  docs/torchrec.md "Measured" were taken with it under the name `torchrec`);
- `torchrec_all`: every sharding type the IR expresses;
- `torchrec_cw32`: table_wise + column_wise with min_partition 32 (lets TorchRec split the suites' dims 64 and 128).

Run: `.venv/bin/python benchmarks/bench_torchrec.py [SUITE_DIR ...] [--solvers torchrec,greedy,neuroshard]
[--out results.json]`. Times are wall-clock; say on which machine they were taken.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402

DEFAULT_SUITES = ["dreamshard-test", "neuroshard-test", "autoshard-test", "production"]


def make_solver(name: str):
    """A catalog solver, or one of this benchmark's TorchRec variants (a subclass under its own name, so that its plans
    say which variant made them)."""
    if name in ("torchrec_cw32", "torchrec_twcw"):
        from solvers.torchrec_solver import TorchRecSolver

        variant = type(f"TorchRecVariant_{name}", (TorchRecSolver,), {"name": name})
        if name == "torchrec_twcw":
            return variant(sharding_types=("table_wise", "column_wise"))
        return variant(sharding_types=("table_wise", "column_wise"), min_partition=32)
    return get_solver(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="*", type=Path, default=[ROOT / "instances" / "suites" / s for s in DEFAULT_SUITES])
    ap.add_argument("--solvers", default="torchrec,greedy,neuroshard")
    ap.add_argument("--time-limit", type=float, default=None, help="passed to every solver (default: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write every row (per instance and solver) as JSON here")
    args = ap.parse_args(argv)
    names = args.solvers.split(",")
    judge = AnalyticCostModel()
    solvers = {n: make_solver(n) for n in names}
    rows = []
    summary = []
    for suite in args.suites:
        files = sorted(p for p in suite.glob("*.json") if p.name != "suite.json")
        per: dict[str, list[dict]] = {n: [] for n in names}
        for f in files:
            inst = load_instance(f)
            for n in names:
                t0 = time.perf_counter()
                r = solvers[n].solve(inst, judge, time_limit=args.time_limit, seed=args.seed)
                wall = time.perf_counter() - t0
                cost = judge.plan_costs(inst, r.plan).max_cost if r.plan is not None else None
                row = {
                    "suite": suite.name, "instance": f.name, "solver": n, "status": r.status.value, "cost_ms": cost,
                    "solve_s": wall, "reason": r.reason,
                    "planner_s": r.info.get("planner_seconds"), "torchrec_perf_rating_ms": r.info.get("torchrec_perf_rating_ms"),
                    "sharding_types": r.info.get("sharding_types_chosen"),
                    "split_tables": sum(1 for c in Counter(s.table for s in r.plan.shards).values() if c > 1) if r.plan else None,
                }
                rows.append(row)
                per[n].append(row)
                print(f"{suite.name}/{f.name} {n}: {r.status.value} cost={cost if cost is None else round(cost, 3)} in {wall:.2f} s"
                      + (f" ({r.reason[:160]})" if r.reason else ""), file=sys.stderr, flush=True)
        best = []
        for i in range(len(files)):
            cs = [per[n][i]["cost_ms"] for n in names if per[n][i]["cost_ms"] is not None]
            best.append(min(cs) if cs else None)
        print(f"\n{suite.name}: {len(files)} instances (analytic judge, simulated ms)")
        print(f"{'solver':<14} {'mean cost':>10} {'vs best':>8} {'failed':>7} {'mean s':>8} {'max s':>8}")
        for n in names:
            ok = [(r["cost_ms"], b) for r, b in zip(per[n], best) if r["cost_ms"] is not None and b]
            mean = statistics.mean(c for c, _ in ok) if ok else float("nan")
            ratio = statistics.mean(c / b for c, b in ok) if ok else float("nan")
            failed = sum(r["cost_ms"] is None for r in per[n])
            times = [r["solve_s"] for r in per[n]]
            s = {"suite": suite.name, "solver": n, "instances": len(files), "mean_cost_ms": mean, "mean_ratio_to_best": ratio,
                 "failed": failed, "mean_solve_s": statistics.mean(times), "max_solve_s": max(times)}
            summary.append(s)
            print(f"{n:<14} {mean:>10.3f} {ratio:>8.3f} {failed:>7d} {s['mean_solve_s']:>8.2f} {s['max_solve_s']:>8.2f}")
    meta = {"machine": platform.platform(), "python": platform.python_version(), "time_limit": args.time_limit, "seed": args.seed}
    print(json.dumps(summary))
    if args.out is not None:
        args.out.write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
