"""Memory-tier instances with placement constraints (simulated, analytic model): each instance gets, from a seeded
shuffle of its tables, one table in host memory behind a cache of load factor 0.3, one kept in HBM, one pinned to
devices 0-1, one in host memory without a cache, a separate pair and a co-located pair (the construction of
tests/test_constraints.py's tier test); each solver's status, plan cost and whether the plan passes the checker.

    .venv/bin/python benchmarks/bench_tier_constraints.py --solvers greedy,neuroshard,cpsat \\
        --instances 'instances/suites/tiered-test/*-000[0-2].json' --instances 'instances/suites/huge-test/*-000[0-1].json'
"""

from __future__ import annotations

import argparse
import glob
import json

import numpy as np

from costmodels.registry import get_cost_model
from shardopt.core.ir import Instance, instance_from_dict, load_instance
from shardopt.core.plan_check import check_plan
from solvers.catalog import get_solver


def constrained(inst: Instance, seed: int = 0) -> Instance:
    pick = [str(n) for n in np.random.default_rng(seed).permutation([t.name for t in inst.tables])]
    doc = inst.model_dump(mode="json")
    doc["constraints"] = {"tables": [{"table": pick[0], "kernels": ["fused_uvm_caching"], "cache_load_factor": 0.3},
                                     {"table": pick[1], "kernels": ["fused"]}, {"table": pick[2], "devices": [0, 1]},
                                     {"table": pick[3], "kernels": ["fused_uvm"]}],
                          "separate": [[pick[4], pick[5]]], "colocate": [[pick[6], pick[7]]]}
    return instance_from_dict(doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solvers", default="greedy,neuroshard,cpsat")
    ap.add_argument("--instances", action="append", required=True)
    ap.add_argument("--time-limit", type=float, default=None)
    args = ap.parse_args()
    cm = get_cost_model("analytic")
    for f in [f for g in args.instances for f in sorted(glob.glob(g)) if not f.endswith("suite.json")]:
        inst = constrained(load_instance(f))
        for name in args.solvers.split(","):
            r = get_solver(name).solve(inst, cm, seed=0, time_limit=args.time_limit)
            print(json.dumps({"instance": f.split("/")[-1], "solver": name, "status": r.status.value,
                              "cost_ms_sim": r.predicted_cost if r.plan is not None else None,
                              "plan_valid": check_plan(inst, r.plan).ok if r.plan is not None else None,
                              "reason": r.reason if r.plan is None else None}), flush=True)


if __name__ == "__main__":
    main()
