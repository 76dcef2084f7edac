"""The plans a tree's solvers make, hashed, one JSON line per (instance, solver): run it in two trees (a git worktree
of an older commit, and this one) and compare the lines, to check that a restructuring left the plans as they were.

    PYTHONPATH=TREE .venv/bin/python benchmarks/plans_identical.py --solvers greedy,neuroshard --time-limit 10 \\
        --instances 'instances/suites/cpu-test/*-000[0-5].json' > plans.jsonl

(PYTHONPATH picks the tree whose code runs; run it from that tree, so the instance paths are its own.) A search the
clock ends (status feasible, stopped time_limit) can differ between runs of one tree: compare those by cost."""

from __future__ import annotations

import argparse
import glob
import hashlib
import json

from costmodels.registry import get_cost_model
from shardopt.core.ir import load_instance
from solvers.catalog import get_solver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solvers", required=True, help="comma-separated solver names")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per solve (none: each solver's own)")
    ap.add_argument("--instances", action="append", required=True, help="a glob of instance files (repeatable)")
    ap.add_argument("--cost-model", default="analytic")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cm = get_cost_model(args.cost_model)
    files = [f for pattern in args.instances for f in sorted(glob.glob(pattern)) if not f.endswith("suite.json")]
    for f in files:
        inst = load_instance(f)
        for name in args.solvers.split(","):
            r = get_solver(name).solve(inst, cm, seed=args.seed, time_limit=args.time_limit)
            shards = [s.model_dump(mode="json") for s in r.plan.shards] if r.plan is not None else None
            digest = hashlib.sha1(json.dumps(shards, sort_keys=True).encode()).hexdigest()[:12] if shards is not None else None
            print(json.dumps({"file": f.split("/")[-1], "solver": name, "status": r.status.value, "stopped": r.stopped.value if r.stopped else None,
                              "plan": digest, "cost": r.plan.predicted_cost if r.plan else None}), flush=True)


if __name__ == "__main__":
    main()
