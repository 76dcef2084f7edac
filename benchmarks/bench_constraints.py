"""What placement constraints cost (simulated): an instance solved with and without random constraints, each solver's
plan cost under the analytic model, and the analytic model's certified bound (of every plan, so also of the
constrained ones: the bound does not count the constraints).

    .venv/bin/python benchmarks/bench_constraints.py --instance instances/suites/production/production-all-s0-0000.json \\
        --pins 20 --colocate 5 --separate 5 --solvers greedy,neuroshard,cpsat --time-limit cpsat=60 \\
        --out benchmarks/results/constraints-production-2026-11-27.jsonl

The constraints (seeded): `--pins` random tables each pinned to 1-4 random devices, `--colocate` random pairs and
`--separate` random triples of other tables. One JSON line per (solver, constrained or not), then one per bound (of
the instance, and of it with the constraints: whether the bound counted them). `--solvers ''` with `--append`: the
bounds only, added to an earlier run's lines.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.registry import get_cost_model
from shardopt.core.ir import Instance, instance_from_dict, load_instance
from shardopt.core.plan_check import check_plan
from solvers.catalog import get_solver


def random_constraints(instance: Instance, pins: int, colocate: int, separate: int, seed: int) -> Instance:
    """`instance` with seeded random constraints: distinct tables for the pins and every group."""
    rng = np.random.default_rng(seed)
    D = instance.topology.num_devices
    names = [str(n) for n in rng.permutation([t.name for t in instance.tables])]
    need = pins + 2 * colocate + 3 * separate
    if need > len(names):
        raise SystemExit(f"--pins/--colocate/--separate need {need} distinct tables; the instance has {len(names)}")
    tables = [{"table": n, "devices": sorted(int(d) for d in rng.choice(D, size=int(rng.integers(1, min(4, D) + 1)), replace=False))}
              for n in names[:pins]]
    rest = names[pins:]
    groups = {"colocate": [rest[2 * k : 2 * k + 2] for k in range(colocate)],
              "separate": [rest[2 * colocate + 3 * k : 2 * colocate + 3 * k + 3] for k in range(separate)]}
    doc = instance.model_dump(mode="json")
    doc["constraints"] = {"tables": tables, **groups}
    return instance_from_dict(doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", required=True)
    ap.add_argument("--pins", type=int, default=20)
    ap.add_argument("--colocate", type=int, default=5)
    ap.add_argument("--separate", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--solvers", default="greedy,neuroshard,cpsat")
    ap.add_argument("--time-limit", action="append", default=[], help="SOLVER=SECONDS (default: the solver's own budget)")
    ap.add_argument("--bound-time", type=float, default=120.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--append", action="store_true", help="add to --out instead of writing it anew (no header line)")
    args = ap.parse_args()
    limits = {k: float(v) for k, v in (x.split("=") for x in args.time_limit)}
    cm = get_cost_model("analytic")
    free = load_instance(args.instance)
    constrained = random_constraints(free, args.pins, args.colocate, args.separate, args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a" if args.append else "w") as f:
        def emit(row: dict[str, Any]) -> None:
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
            f.flush()

        if not args.append:
            emit({"instance": Path(args.instance).name, "tables": len(free.tables), "devices": free.topology.num_devices,
                  "constraints": constrained.constraints.model_dump(mode="json") if constrained.constraints else None})
        for name in [n for n in args.solvers.split(",") if n]:
            for label, inst in (("without", free), ("with", constrained)):
                t0 = time.perf_counter()
                r = get_solver(name).solve(inst, cm, seed=args.seed, time_limit=limits.get(name))
                ok = check_plan(inst, r.plan).ok if r.plan is not None else None
                emit({"solver": name, "constraints": label, "status": r.status.value, "seconds": round(time.perf_counter() - t0, 2),
                      "cost_ms_sim": r.predicted_cost, "plan_valid": ok, "reason": r.reason if r.plan is None else None})
        from solvers.bound import analytic_lower_bound

        for label, inst in (("without", free), ("with", constrained)):
            t0 = time.perf_counter()
            b = analytic_lower_bound(inst, cm, time_limit=args.bound_time)
            emit({"bound": "certified (analytic, table- and column-wise plans in HBM)", "constraints": label, "status": b.status,
                  "source": b.source, "counted": b.constraints_counted, "value_ms": b.value_ms, "seconds": round(time.perf_counter() - t0, 2)})


if __name__ == "__main__":
    main()
