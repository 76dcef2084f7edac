"""Benchmark: the analytic judge on one 856-table x 128-device plan (target: under 20 ms).

Times `bind` (per-table states, once per instance) and `plan_costs` (judging one plan) separately and together, as
the median of repeats. Run: `.venv/bin/python benchmarks/bench_analytic.py [--instance instances/examples/large.json]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from costmodels.analytic import AnalyticCostModel
from shardopt.core.ir import Shard, load_instance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--instance", default="instances/examples/large.json")
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    inst = load_instance(Path(args.instance))
    rng = np.random.default_rng(args.seed)
    devices = rng.integers(0, inst.topology.num_devices, size=len(inst.tables))
    shards = [Shard(table=t.name, device=int(d)) for t, d in zip(inst.tables, devices)]
    model = AnalyticCostModel()
    bind, judge, both = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        bm = model.bind(inst)
        t1 = time.perf_counter()
        costs = bm.plan_costs(shards)
        t2 = time.perf_counter()
        both.append(t2 - t0)
        bind.append(t1 - t0)
        judge.append(t2 - t1)
    row = {
        "benchmark": "analytic_judge",
        "instance": args.instance,
        "tables": len(inst.tables),
        "devices": inst.topology.num_devices,
        "bind_ms": statistics.median(bind) * 1e3,
        "plan_costs_ms": statistics.median(judge) * 1e3,
        "bind_plus_judge_ms": statistics.median(both) * 1e3,
        "repeats": args.repeats,
        "plan_max_cost_ms_simulated": costs.max_cost,
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}".strip(),
    }
    print(f"analytic judge, {row['tables']} tables x {row['devices']} devices (median of {args.repeats}):")
    print(f"  bind (per-table states)  {row['bind_ms']:8.2f} ms")
    print(f"  plan_costs (one plan)    {row['plan_costs_ms']:8.2f} ms")
    print(f"  bind + plan_costs        {row['bind_plus_judge_ms']:8.2f} ms")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
