"""Issue 19: the same small leaderboard on the local engine (1 and 2 processes) and on a local Ray (2 CPUs): wall time
and the overhead per task. Fast heuristics make the tasks short, so the wall time is mostly the engine's own cost;
a second case with neuroshard (1 s limit per solve) shows the engines on tasks that do work. Costs are simulated
(analytic judge); the figures are times of this machine.

Run: `.venv/bin/python benchmarks/bench_engine.py [--instances 6] [--out benchmarks/results/engine.json]`
(nothing else running: the 2 cores are the measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shardopt.data.pools import generate_pool  # noqa: E402
from shardopt.data.suites import generate_suite  # noqa: E402
from shardopt.leaderboard.run import run_leaderboard  # noqa: E402
from shardopt.measure.engine import LocalEngine, RayEngine  # noqa: E402

CASES = {
    "heuristics (greedy, size, lookup, dim; 2 seeds)": (["greedy", "size", "lookup", "dim"], 2, None),
    "neuroshard (1 s limit; 1 seed)": (["neuroshard"], 1, 1.0),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=6)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    suite = work / "suite"
    generate_suite("neuroshard", generate_pool(n=64, seed=2), args.instances, 0, "test", suite)
    rows = []
    t0 = time.perf_counter()
    ray_engine = RayEngine(num_cpus=2)
    ray_start = time.perf_counter() - t0
    print(f"local Ray started in {ray_start:.2f} s ({ray_engine.describe()})")
    try:
        for case, (solvers, seeds, limit) in CASES.items():
            for label, engine in (("local, 1 process", LocalEngine(1)), ("local, 2 processes", LocalEngine(2)), ("ray, 2 CPUs (local)", ray_engine)):
                db = work / f"{len(rows)}.sqlite"
                t = time.perf_counter()
                summary = run_leaderboard(suite, solvers, db, seeds=seeds, time_limit=limit, engine=engine)
                wall = time.perf_counter() - t
                solve = sum(r["solve_time_s"] or 0.0 for r in summary.rows)
                rows.append({"case": case, "engine": label, "tasks": summary.done, "wall_s": round(wall, 3),
                             "wall_per_task_ms": round(1000 * wall / summary.done, 1), "solve_s_sum": round(solve, 3)})
                print(f"{case:50s} {label:22s} {summary.done:3d} tasks {wall:7.2f} s ({1000 * wall / summary.done:6.1f} ms/task; solves {solve:.2f} s)")
    finally:
        ray_engine.close()
    doc = {"command": "python benchmarks/bench_engine.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": f"{platform.node()} ({platform.machine()}), {os.cpu_count()} cores", "date": date.today().isoformat(),
           "judge": "sim (analytic model)", "ray_start_s": round(ray_start, 2), "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
