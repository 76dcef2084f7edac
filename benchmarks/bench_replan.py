"""Issue 18, item 2: re-planning from a previous plan. The production instance (856 tables x 128 devices) is solved;
then 50 new tables (the first 50 of `production-all-s0-0001`, renamed) join it and every device gets memory in
proportion (the model stays as tight). The grown model is re-planned from the old plan with a budget of 0, 1 %,
5 % and 100 % of its bytes moved, by greedy and neuroshard (cpsat with --solvers), beside each solver's plan from
scratch. Costs are SIMULATED (analytic model).

Run: `.venv/bin/python benchmarks/bench_replan.py [--solvers greedy,neuroshard] [--time-limit 20]
[--out benchmarks/results/replan.json]` (sequentially; the time limits are wall-clock).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import Instance, instance_from_dict, load_instance, to_dict  # noqa: E402
from shardopt.core.memory import table_bytes_array  # noqa: E402
from shardopt.core.plan_check import check_plan  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402
from solvers.replan.replan import moved_bytes, replan  # noqa: E402

PROD = ROOT / "instances" / "suites" / "production"


def grown(old: Instance, extra: int) -> Instance:
    d = to_dict(old)
    donor = to_dict(load_instance(PROD / "production-all-s0-0001.json"))["tables"][:extra]
    for k, t in enumerate(donor):
        t["name"] = f"new_{k:03d}"
    before = int(table_bytes_array(old).sum())
    d["tables"] = d["tables"] + donor
    d["name"] = f"{old.name}+{extra}"
    probe = instance_from_dict(d)
    d["topology"]["memory_bytes"] = int(d["topology"]["memory_bytes"] * int(table_bytes_array(probe).sum()) / before)
    return instance_from_dict(d)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solvers", default="greedy,neuroshard")
    ap.add_argument("--extra", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=20.0, help="per re-plan (the scratch solve gets half)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    model = AnalyticCostModel()
    old_inst = load_instance(PROD / "production-all-s0-0000.json")
    new_inst = grown(old_inst, args.extra)
    total = int(table_bytes_array(new_inst).sum())
    rows = []
    for name in args.solvers.split(","):
        old = get_solver(name).solve(old_inst, model, seed=0).plan
        assert old is not None
        t0 = time.perf_counter()
        scratch = get_solver(name).solve(new_inst, model, time_limit=args.time_limit, seed=0)
        row = {"solver": name, "budget": "from scratch", "cost_ms": scratch.predicted_cost, "moved_bytes": moved_bytes(new_inst, old, scratch.plan),
               "wall_s": round(time.perf_counter() - t0, 2)}
        rows.append(row)
        print(f"{name:11s} from scratch ({args.time_limit:g} s): {row['cost_ms']:.4f} ms (sim), {100 * row['moved_bytes'] / total:.2f} % moved")
        for share in (0.0, 0.01, 0.05, 1.0):
            t0 = time.perf_counter()
            r = replan(get_solver(name), new_inst, model, old, max_moved_bytes=int(share * total), time_limit=args.time_limit, seed=0)
            wall = time.perf_counter() - t0
            if r.plan is None:
                rows.append({"solver": name, "budget": share, "cost_ms": None, "reason": r.reason, "wall_s": round(wall, 2)})
                print(f"{name:11s} budget {100 * share:5.1f} %: no plan: {r.reason}")
                continue
            assert check_plan(new_inst, r.plan).ok
            info = r.info["replan"]
            row = {"solver": name, "budget": share, "cost_ms": r.predicted_cost, "moved_bytes": info["moved_bytes"], "wall_s": round(wall, 2),
                   "status": r.status.value, "starts": info["starts"], "scratch_in_replan": info["scratch"]}
            rows.append(row)
            print(f"{name:11s} budget {100 * share:5.1f} %: {r.predicted_cost:.4f} ms (sim), {100 * info['moved_bytes'] / total:.2f} % moved, {wall:.1f} s")
    doc = {"command": "python benchmarks/bench_replan.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": f"{platform.node()} ({platform.machine()}), 2-core VM", "date": date.today().isoformat(),
           "judge": "sim (analytic model)", "instance": new_inst.name, "tables": len(new_inst.tables), "devices": new_inst.topology.num_devices,
           "model_bytes": total, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
