"""Precision of the measured judge at its default settings (docs/measured.md, "Judge precision"): for every
instance of a suite, one solver's plan judged on the CPU with `--repeats auto` (2 % target, 120 s cap), and the CI
half-width, rounds and time it took; then the same plan judged a second time, to see how far two judgements of one
plan land apart.

    python benchmarks/bench_judge_precision.py [--suite instances/suites/cpu-test] [--solver greedy] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from shardopt.measure.evaluate import evaluate_plan  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(ROOT / "instances" / "suites" / "cpu-test"))
    ap.add_argument("--solver", default="greedy")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for path in sorted(Path(args.suite).glob("*.json")):
        if path.name == "suite.json":
            continue
        inst = load_instance(path)
        plan = get_solver(args.solver).solve(inst, get_cost_model("analytic"), seed=0).plan
        runs = []
        for _ in range(2):
            t0 = time.perf_counter()
            ev = evaluate_plan(inst, plan, "cpu", repeats="auto", cache=False, seed=0)
            runs.append({"cost_ms": ev.max_cost, "interval": ev.interval, "rounds": ev.repeats,
                         "stop": ev.stop["reason"], "seconds": round(time.perf_counter() - t0, 2),
                         "load": ev.machine["load_avg_before"][0] if ev.machine else None})
        a, b = runs[0]["cost_ms"], runs[1]["cost_ms"]
        row = {"instance": path.name, "devices": inst.topology.num_devices, "batch": inst.workload.batch_size,
               "runs": runs, "rel_diff_between_runs": abs(a - b) / min(a, b)}
        rows.append(row)
        print(f"{path.name}: {a:.3f} / {b:.3f} ms, CI ±{100 * runs[0]['interval']['relative_half_width']:.2f} % / "
              f"±{100 * runs[1]['interval']['relative_half_width']:.2f} %, rounds {runs[0]['rounds']} / {runs[1]['rounds']}, "
              f"{runs[0]['seconds']} / {runs[1]['seconds']} s, runs differ by {100 * row['rel_diff_between_runs']:.2f} %")
    hw = [r["runs"][k]["interval"]["relative_half_width"] for r in rows for k in range(2)]
    diffs = [r["rel_diff_between_runs"] for r in rows]
    covered = sum(1 for r in rows for k in range(2)
                  if r["runs"][k]["interval"]["low"] <= r["runs"][1 - k]["cost_ms"] <= r["runs"][k]["interval"]["high"])
    summary = {"median_half_width": statistics.median(hw), "max_half_width": max(hw),
               "median_rel_diff_between_runs": statistics.median(diffs), "max_rel_diff_between_runs": max(diffs),
               "second_run_inside_first_ci": f"{covered} of {2 * len(rows)}"}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({
            "command": "python benchmarks/bench_judge_precision.py " + " ".join(sys.argv[1:]),
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.node(),
            "processor": platform.processor(), "suite": args.suite, "solver": args.solver,
            "summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
