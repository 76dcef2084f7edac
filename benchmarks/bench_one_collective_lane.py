"""NeuroShard's one-collective lane on or off (`one_collective`), default budget, on the first three instances of
five test suites: what the lane is worth now that whole tables may join the column-wise all-to-all (docs/results/bound.md,
"Whole tables in the column-wise all-to-all"; simulated, analytic judge).

    .venv/bin/python benchmarks/bench_one_collective_lane.py
"""

from __future__ import annotations

import glob

from costmodels.analytic import AnalyticCostModel
from shardopt.core.ir import load_instance
from solvers.neuroshard.search import NeuroShardSolver

SUITES = ("dreamshard-test", "neuroshard-test", "autoshard-test", "nvl72-test", "mixed-test")


def main() -> None:
    cm = AnalyticCostModel()
    files = [f for suite in SUITES for f in sorted(glob.glob(f"instances/suites/{suite}/*-00*.json"))[:3]]
    ratios = []
    print("instance | lane on ms | lane off ms | off vs on")
    for f in files:
        inst = load_instance(f)
        on = NeuroShardSolver().solve(inst, cm, seed=0)
        off = NeuroShardSolver(one_collective=False).solve(inst, cm, seed=0)
        if on.plan is None or off.plan is None:
            print(f"{f}: no plan")
            continue
        r = off.predicted_cost / on.predicted_cost - 1
        ratios.append(r)
        print(f"{f.split('/')[-1]} | {on.predicted_cost:.4f} | {off.predicted_cost:.4f} | {100 * r:+.2f} %", flush=True)
    print(f"mean off vs on {100 * sum(ratios) / len(ratios):+.2f} %")


if __name__ == "__main__":
    main()
