"""Work budgets: how much wall time a unit of cost-model work takes here, and how far each default solve's work
seconds are from its wall seconds (shardopt.core.work).

For each instance: neuroshard on a wall-clock limit (--limit s) with the cost-model calls and numbers counted, then
a least-squares fit (relative error) of wall = a x calls + b x numbers over all instances, the constants that
WORK_PER_CALL / WORK_PER_ELEMENT / WORK_UNITS_PER_S encode; then every instance's default solve (the work budget)
twice, with its wall time, work seconds and whether the two plans are the same.

    .venv/bin/python benchmarks/bench_work_budget.py instances/examples/small.json instances/real/mlperf-dlrmv2-8xh100.json ...
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="+")
    ap.add_argument("--limit", type=float, default=8.0, help="the wall-clock limit of the counted solves")
    args = ap.parse_args()
    import costmodels.base as cb
    import shardopt.core.work as work
    from costmodels.analytic import AnalyticCostModel
    from shardopt.core.ir import load_instance
    from solvers.catalog import get_solver

    counted = {"calls": 0, "elements": 0}
    charge = cb.charge

    def counting(elements: int) -> None:
        counted["calls"] += 1
        counted["elements"] += elements
        charge(elements)

    cb.charge = counting
    rows = []
    for path in args.instances:
        inst = load_instance(path)
        counted.update(calls=0, elements=0)
        t0 = time.perf_counter()
        get_solver("neuroshard").solve(inst, AnalyticCostModel(), seed=0, time_limit=args.limit)
        rows.append((inst.name, counted["calls"], counted["elements"], time.perf_counter() - t0))
        print(f"{inst.name}: {rows[-1][1]} calls, {rows[-1][2]:.3g} numbers, {rows[-1][3]:.2f} s wall", flush=True)
    a = np.array([[r[1], r[2]] for r in rows], dtype=float)
    y = np.array([r[3] for r in rows])
    fit, *_ = np.linalg.lstsq(a / y[:, None], np.ones(len(y)), rcond=None)
    print(f"fit: {fit[0] * 1e6:.1f} us a call, {fit[1] * 1e9:.2f} ns a number; predicted / wall: "
          + ", ".join(f"{p:.2f}" for p in (a @ fit) / y))
    cb.charge = charge
    for path in args.instances:
        inst = load_instance(path)
        plans = []
        for _ in range(2):
            with work.metered() as meter:
                t0 = time.perf_counter()
                r = get_solver("neuroshard").solve(inst, AnalyticCostModel(), seed=0)
                wall = time.perf_counter() - t0
            plans.append(r.plan.shards if r.plan is not None else None)
        print(f"{inst.name}: default {r.predicted_cost:.4f} ms, {r.stopped.value}, {wall:.2f} s wall, "
              f"{meter.units / work.WORK_UNITS_PER_S:.2f} work s, same plan twice: {plans[0] == plans[1]}", flush=True)


if __name__ == "__main__":
    main()
