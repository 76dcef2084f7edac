"""Time the heuristic solvers and the analytic judge on a production-sized instance (856 tables x 128 devices).

    .venv/bin/python benchmarks/bench_heuristics.py [--tables 856] [--devices 128] [--per-host 8] [--seed 0] [--repeats 5]

Loads instances/examples/large.json when it exists (unless --synthetic), otherwise builds a synthetic DLRM-like
instance. Binding the analytic model to the instance (per-table statistics) is timed on its own; the solvers are
then given a cost model that hands back that one binding, so each solver's time is its own work plus the plan check
and the costing of its plan. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.hardware import get_profile  # noqa: E402
from shardopt.core.ir import Instance, instance_from_dict, load_instance  # noqa: E402
from shardopt.core.memory import table_bytes_array  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402

HEURISTICS = ["greedy", "random", "round_robin", "size", "dim", "lookup", "size_lookup"]
LARGE = ROOT / "instances" / "examples" / "large.json"


def synthetic(n_tables: int, n_devices: int, per_host: int, seed: int, hardware: str = "v100") -> Instance:
    """DLRM-like tables: log-uniform rows in [1e2, 1e7], dims 16..256, log-normal pooling, Zipf access; every
    device has the profile's memory, or 1.3 x the average share when that is larger."""
    rng = np.random.default_rng(seed)
    tables = [
        {
            "name": f"t{i}",
            "rows": int(10 ** rng.uniform(2, 7)),
            "dim": int(rng.choice([16, 32, 64, 128, 256], p=[0.2, 0.3, 0.3, 0.15, 0.05])),
            "pooling_factor": float(np.round(rng.lognormal(1.5, 1.2), 3)),
            "access": {"zipf": float(np.round(rng.uniform(0.3, 1.3), 3))},
        }
        for i in range(n_tables)
    ]
    doc = {
        "name": f"synthetic-{n_tables}x{n_devices}-s{seed}",
        "tables": tables,
        "topology": {"num_devices": n_devices, "devices_per_host": per_host, "memory_bytes": 1, "hardware": hardware},
        "workload": {"batch_size": 65536, "optimizer": "rowwise_adagrad", "weight_dtype": "fp32"},
        "metadata": {"source": "benchmarks/bench_heuristics.py", "seed": seed},
    }
    sizes = table_bytes_array(instance_from_dict(doc))
    doc["topology"]["memory_bytes"] = max(get_profile(hardware).memory_bytes, math.ceil(1.3 * sizes.sum() / n_devices), int(sizes.max()))
    return instance_from_dict(doc)


def median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=856)
    ap.add_argument("--devices", type=int, default=128)
    ap.add_argument("--per-host", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cost-model", default="analytic")
    ap.add_argument("--synthetic", action="store_true", help="ignore instances/examples/large.json")
    ap.add_argument("--instance", type=Path, default=None, help="time on this instance file instead")
    args = ap.parse_args(argv)

    if args.instance is not None:
        instance, source = load_instance(args.instance), str(args.instance)
    elif LARGE.exists() and not args.synthetic:
        instance, source = load_instance(LARGE), str(LARGE.relative_to(ROOT))
    else:
        instance, source = synthetic(args.tables, args.devices, args.per_host, args.seed), "synthetic"
    topo = instance.topology
    cm = get_cost_model(args.cost_model)

    t0 = time.perf_counter()
    bm = cm.bind(instance)
    _ = bm.table_states
    bind_s = time.perf_counter() - t0

    rows = []
    for name in HEURISTICS:
        solver = get_solver(name)
        secs, result = median_time(lambda solver=solver: solver.solve(instance, cm, seed=args.seed), args.repeats)
        rows.append(
            {
                "solver": name,
                "status": result.status.value,
                "median_s": secs,
                "cost_ms": result.predicted_cost,
                "stage": result.packing.stage if result.packing else None,
            }
        )
    plan = next(r for r in [get_solver("greedy").solve(instance, cm)] if r.plan is not None).plan
    judge_s, costs = median_time(lambda: bm.plan_costs(plan), max(args.repeats, 20))
    assign_s, _ = median_time(lambda: bm.assignment_costs(np.array([s.device for s in plan.shards])), max(args.repeats, 20))

    print(f"instance: {source}: {len(instance.tables)} tables, {topo.num_devices} devices ({topo.devices_per_host}/host, {topo.hardware})")
    print(f"cost model {cm.describe()}: bind {bind_s * 1e3:.1f} ms; judge plan_costs {judge_s * 1e3:.2f} ms; assignment_costs {assign_s * 1e3:.2f} ms")
    print(f"{'solver':<12} {'status':<11} {'median ms':>10} {'cost ms':>10}  stage")
    for r in rows:
        cost = f"{r['cost_ms']:.3f}" if r["cost_ms"] is not None else "-"
        print(f"{r['solver']:<12} {r['status']:<11} {r['median_s'] * 1e3:>10.1f} {cost:>10}  {r['stage']}")
    print(
        json.dumps(
            {
                "instance": source,
                "tables": len(instance.tables),
                "devices": topo.num_devices,
                "repeats": args.repeats,
                "bind_s": bind_s,
                "judge_plan_costs_s": judge_s,
                "judge_assignment_costs_s": assign_s,
                "solvers": rows,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
