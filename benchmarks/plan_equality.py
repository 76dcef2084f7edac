"""Behaviour unchanged: the same plans before and after a change, on 30 committed instances and every deterministic solver.

A refactor (a module split, typed composition, a new status vocabulary) must not move a plan. This script solves each
instance of INSTANCES with each solver of SOLVERS at its defaults (seed 0, the analytic cost model, no --time-limit:
neuroshard's default budget is a work budget, so its plan does not depend on the machine's speed) and writes, per
(instance, solver), a digest of the plan's shards and its predicted cost.

    python benchmarks/plan_equality.py record                  # write benchmarks/results/plan-equality.json
    python benchmarks/plan_equality.py record --solvers cpsat  # replace cpsat's rows only
    python benchmarks/plan_equality.py check                   # solve again; exit 1 and list every plan that moved

A solver is in SOLVERS only if two records in a row agree on it (`record --twice` checks that), and a plan whose
search the wall-clock safety cap stopped (`stopped: wall_cap`) is refused as a reference. cpsat's default is a work
budget too (CP-SAT's deterministic time), compared on a budget of 2 work seconds (`OPTIONS`), and milp_highs's (HiGHS
on a node limit) on 4. CBC (milp) stops on a wall-clock limit, so its plans may differ from one run to the next; TorchRec's planner breaks ties between
equal-cost plans by iterating Python sets, so its plan depends on the process's PYTHONHASHSEED (docs/results/plan-equality.md,
"The same plans before and after a refactor"); neither is compared here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import Plan, load_instance  # noqa: E402
from solvers.catalog import get_solver, specs  # noqa: E402

BASELINE = ROOT / "benchmarks" / "results" / "plan-equality.json"
# the catalog's deterministic solvers (SolverSpec.deterministic: no wall clock decides their plan at the defaults)
SOLVERS = tuple(s.name for s in specs() if s.deterministic)
# cpsat's default work budget (60 work seconds) shortened, still a work budget, so that a check takes minutes
# (milp_highs: 4, as HiGHS's root node of these models is charged 1.5-3 work seconds)
OPTIONS: dict[str, dict[str, Any]] = {"cpsat": {"default_time_limit": 2.0}, "milp_highs": {"default_time_limit": 4.0}}
# 30 instances across the families: small to mid-sized ones, so that a check takes minutes, not hours
SUITES = {
    "instances/examples": ("small.json", "tight.json"),
    "instances/suites/dreamshard-test": ("dreamshard-test-s1-0000.json", "dreamshard-test-s1-0003.json", "dreamshard-test-s1-0007.json"),
    "instances/suites/neuroshard-test": ("neuroshard-test-s1-0000.json", "neuroshard-test-s1-0005.json", "neuroshard-test-s1-0011.json"),
    "instances/suites/autoshard-test": ("autoshard-test-s1-0000.json", "autoshard-test-s1-0004.json", "autoshard-test-s1-0008.json"),
    "instances/suites/cpu-test": ("cpu-test-s1-0000.json", "cpu-test-s1-0006.json"),
    "instances/suites/cpu-roomy-test": ("cpu-test-s2-0000-m2.json", "cpu-test-s2-0005-m2.json"),
    "instances/suites/huge-test": ("huge-test-s1-0000.json", "huge-test-s1-0004.json", "huge-test-s1-0008.json"),
    "instances/suites/tiered-test": ("tiered-test-s1-0000.json", "tiered-test-s1-0004.json", "tiered-test-s1-0008.json"),
    "instances/suites/skewed-test": ("skewed-test-s1-0000.json", "skewed-test-s1-0003.json", "skewed-test-s1-0006.json"),
    "instances/suites/mixed-test": ("mixed-test-s1-0000.json", "mixed-test-s1-0002.json"),
    "instances/real": ("criteo-kaggle-dlrm-8xv100.json", "mlperf-dlrmv2-8xh100.json",
                       "mlperf-dlrmv2-4xa100-40gb.json", "mlperf-dlrmv2-64xh100.json"),
}


def instances() -> list[Path]:
    out = [ROOT / folder / name for folder, names in SUITES.items() for name in names]
    missing = [str(p.relative_to(ROOT)) for p in out if not p.exists()]
    if missing:
        raise SystemExit(f"plan_equality: instances missing: {missing}")
    return out


def plan_digest(plan: Plan) -> str:
    """The plan's shards in a canonical order, hashed: equal digests are the same placement."""
    shards = sorted(json.dumps(s.model_dump(mode="json"), sort_keys=True) for s in plan.shards)
    return hashlib.sha256("\n".join(shards).encode()).hexdigest()[:16]


def solve_all(paths: list[Path], solvers: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    cm = AnalyticCostModel()
    rows: dict[str, dict[str, Any]] = {}
    for path in paths:
        inst = load_instance(path)
        for name in solvers:
            t0 = time.perf_counter()
            try:
                result = get_solver(name, **OPTIONS.get(name, {})).solve(inst, cm, seed=0)
            except Exception as exc:  # a solver that refuses the instance is a result too, and must stay one
                rows[f"{path.relative_to(ROOT)}::{name}"] = {"status": f"error: {type(exc).__name__}"}
                continue
            row: dict[str, Any] = {"status": result.status.value, "stopped": getattr(result.stopped, "value", result.stopped)}
            if result.plan is not None:
                row["digest"] = plan_digest(result.plan)
                row["cost_ms"] = round(cm.plan_costs(inst, result.plan).max_cost, 6)
            rows[f"{path.relative_to(ROOT)}::{name}"] = row
            print(f"{path.name:40s} {name:20s} {row.get('cost_ms', '-')!s:>12} {time.perf_counter() - t0:6.1f} s",
                  file=sys.stderr, flush=True)
    return rows


def differences(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            out.append(f"{key}: only in {'after' if a is None else 'before'}")
        elif (a.get("status"), a.get("digest")) != (b.get("status"), b.get("digest")):
            out.append(f"{key}: {a.get('status')} {a.get('cost_ms')} ({a.get('digest')}) -> "
                       f"{b.get('status')} {b.get('cost_ms')} ({b.get('digest')})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "check"))
    ap.add_argument("--baseline", type=Path, default=BASELINE)
    ap.add_argument("--solvers", default=",".join(SOLVERS), help="comma-separated subset of the compared solvers")
    ap.add_argument("--twice", action="store_true", help="record: solve twice and refuse a solver whose plans differ")
    ap.add_argument("--only", default="", help="check: only the instances whose path contains this")
    ap.add_argument("--accept", metavar="WHY", default=None,
                    help="check: write the moved plans into the baseline, with WHY (a change meant to move them)")
    args = ap.parse_args(argv)
    solvers = tuple(s for s in args.solvers.split(",") if s)
    paths = [p for p in instances() if args.only in str(p.relative_to(ROOT))]
    if args.mode == "check":
        doc = json.loads(args.baseline.read_text())
        skipped = [s for s in solvers if s not in doc["solvers"]]
        if skipped:  # (no reference for them: solving them would only report "only in after")
            print(f"not in the baseline, not solved: {', '.join(skipped)}", file=sys.stderr)
        solvers = tuple(s for s in solvers if s in doc["solvers"])
    rows = solve_all(paths, solvers)
    if args.mode == "record":
        capped = [k for k, r in rows.items() if r.get("stopped") == "wall_cap"]
        if capped:
            print("stopped by the wall-clock cap (no reference: the plan depends on the machine's speed):\n" + "\n".join(capped),
                  file=sys.stderr)
            return 1
        if args.twice:
            moved = differences(rows, solve_all(paths, solvers))
            if moved:
                print("not deterministic:\n" + "\n".join(moved), file=sys.stderr)
                return 1
        # a record of some solvers replaces only their rows: the other solvers' references stay as they were
        doc = json.loads(args.baseline.read_text()) if args.baseline.exists() else {"solvers": [], "rows": {}}
        kept = {k: v for k, v in doc["rows"].items() if k.split("::")[1] not in solvers}
        doc.update({"command": "python benchmarks/plan_equality.py record", "date": time.strftime("%Y-%m-%d"),
                    "solvers": [s for s in doc["solvers"] if s not in solvers] + list(solvers), "rows": {**kept, **rows}})
        args.baseline.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{len(rows)} plans recorded in {args.baseline} ({len(kept)} of other solvers kept)")
        return 0
    checked = {str(p.relative_to(ROOT)) for p in paths}
    base = {k: v for k, v in doc["rows"].items() if k.split("::")[1] in solvers and k.split("::")[0] in checked}
    moved = differences(base, rows)
    print(f"{len(rows) - len(moved)} of {len(rows)} plans unchanged")
    for line in moved:
        print("  moved: " + line)
    if moved and args.accept is not None:
        keys = [k for k in rows if base.get(k) != rows[k] and rows[k].get("stopped") != "wall_cap"]
        for k in keys:
            doc["rows"][k] = rows[k]
        doc.setdefault("accepted", []).append({"date": time.strftime("%Y-%m-%d"), "why": args.accept, "rows": keys})
        args.baseline.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{len(keys)} moved plans written into {args.baseline}")
        return 0
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main())
