"""NeuroShard on a sample of every committed suite (the first few instances of each test suite, production-0000),
plan cost by the analytic judge (simulated) and wall time, as JSON lines: run it against two commits to compare a
change to the search (`git worktree add /tmp/old COMMIT`, then the script with each tree's root).

    .venv/bin/python benchmarks/neuroshard_sample.py [REPO_ROOT]    (default: this checkout)

Limits: 10 s per instance, 20 s on the nvl72 and mixed suites.
"""

from __future__ import annotations

import glob
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE
sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402

SAMPLE = [("dreamshard-test", 5, 10), ("neuroshard-test", 5, 10), ("autoshard-test", 3, 10), ("cpu-test", 4, 10), ("tiered-test", 4, 10),
          ("huge-test", 4, 10), ("production", 1, 10), ("nvl72-test", 4, 20), ("mixed-test", 4, 20)]


def main() -> None:
    cm = AnalyticCostModel()
    for suite, count, limit in SAMPLE:
        files = sorted(f for f in glob.glob(str(HERE / "instances/suites" / suite / "*.json")) if not f.endswith("suite.json"))[:count]
        for f in files:
            inst = load_instance(f)
            start = time.perf_counter()
            r = get_solver("neuroshard").solve(inst, cm, seed=0, time_limit=limit)
            wall = time.perf_counter() - start
            cost = None if r.plan is None else float(cm.plan_costs(inst, r.plan).max_cost)
            print(json.dumps({"instance": inst.name, "limit": limit, "cost_ms": cost, "wall_s": round(wall, 2), "status": r.status.value}), flush=True)


if __name__ == "__main__":
    main()
