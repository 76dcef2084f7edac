"""Every registered solver on random instances it was not tuned on: what breaks?

The solvers are developed against the committed suites and bench_tiered's seeds 0-999; users bring other shapes. This
runs every solver of the registry (or `--solvers`) on bench_tiered's generator at other seeds (default 1000-1299)
with a short time limit, and reports, per solver, its statuses and every finding of these kinds:

- `error`: an exception (a stack trace where a user should get a plan or a reason);
- `invalid`: a plan that fails the independent two-tier checker (shardopt.core.plan_check);
- `wrong_infeasible`: status `infeasible` (a proof) where another solver returned a valid plan;
- `give_up`: no plan from a search seeded by greedy's plan (neuroshard, neuroshard_faithful, cpsat, milp, milp_highs)
  where greedy, run in the sweep too, placed the instance: a seeded search must never return less than its seed;
- `overrun`: a solve that took longer than its time limit + 10 % + 1 s (the rule every solver keeps), wall clock
  around the solve call in this process;
- `no_plan`: no plan where another solver of the sweep (TorchRec's planner, an RL policy, ...) found one (only for the
  solvers whose placements cover every other's: `--covering`, default greedy, neuroshard, cpsat, milp, milp_highs).

Costs are **simulated** (analytic model); nothing here is timed but the solves' wall clock. Exit status 1 when any
finding but `no_plan` is made (a `no_plan` under a short time limit is reported, not failed: an anytime solver may run
out). `--size large` draws 100-160 tables on 8 or 16 devices instead of 2-30 on 1-16.

Run: `.venv/bin/python benchmarks/sweep_random.py [--seeds 1000-1299] [--size small|large] [--time-limit 2]
[--solvers a,b,...] [--out benchmarks/results/sweep-random.json]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from collections import Counter
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import numpy as np  # noqa: E402
from bench_tiered import make_solver, random_instance  # noqa: E402

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import Instance, IRError, instance_from_dict  # noqa: E402
from shardopt.core.plan_check import check_plan  # noqa: E402
from solvers.catalog import solver_names  # noqa: E402

COVERING = ("greedy", "neuroshard", "cpsat", "milp", "milp_highs")
SEEDED_BY_GREEDY = ("neuroshard", "neuroshard_faithful", "cpsat", "milp", "milp_highs")
FAILING = ("error", "invalid", "wrong_infeasible", "give_up", "overrun")
SIZES = {"small": {}, "large": {"tables": (100, 160), "devices": (8, 16)}}


def overran(wall_s: float, time_limit: float) -> bool:
    """The time-limit rule: within 10 % + 1 s of the limit."""
    return wall_s > 1.1 * time_limit + 1.0


def seed_range(text: str) -> list[int]:
    """'1000-1299' or '5,7,9' -> seeds."""
    if "-" in text and "," not in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


SHARDING_TYPES = ("table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel")


def with_random_constraints(inst: Instance, seed: int) -> Instance:
    """`inst` with seeded random placement constraints on some of its tables and, sometimes, network levels or mixed
    hardware: what a user's ParameterConstraints and cluster bring. Each draw is kept only where the IR accepts it, so
    the instance is always a valid document (whether it has a plan is the solvers' to find)."""
    rng = np.random.default_rng(10_000 + seed)
    doc = json.loads(inst.model_dump_json())
    topo = doc["topology"]
    n_dev, per_host = topo["num_devices"], topo["devices_per_host"]
    names = [t["name"] for t in doc["tables"]]
    if rng.random() < 0.25 and n_dev >= 4 and per_host < n_dev and n_dev % (2 * per_host) == 0:
        topo["levels"] = [{"name": "host", "devices": per_host, "bandwidth": 4e11}] if per_host > 1 else []
        topo["levels"] += [{"name": "nvlink_domain", "devices": 2 * per_host, "bandwidth": 2e11, "latency_s": 2e-6},
                           {"name": "network", "devices": n_dev, "bandwidth": 2.5e10, "latency_s": 1e-5}]
    elif rng.random() < 0.2 and n_dev >= 2 and per_host < n_dev:
        hosts = n_dev // per_host
        kinds = [str(rng.choice(["a100", "h200"])) for _ in range(hosts)]
        topo["device_hardware"] = [k for k in kinds for _ in range(per_host)]
        topo["hardware"] = kinds[0]
        mem = topo["memory_bytes"]
        topo["memory_bytes"] = [int(mem * (1.6 if k == "h200" else 1.0)) for k in topo["device_hardware"]]
    tables = []
    for name, t in zip(names, doc["tables"]):
        if rng.random() > 0.4:
            continue
        tc: dict = {"table": name}
        if rng.random() < 0.5:
            k = int(rng.integers(1, len(SHARDING_TYPES) + 1))
            tc["sharding_types"] = sorted(rng.choice(SHARDING_TYPES, size=k, replace=False).tolist())
        if rng.random() < 0.3:
            tc["devices"] = list(range(n_dev)) if rng.random() < 0.3 else sorted(rng.choice(n_dev, size=int(rng.integers(1, n_dev + 1)), replace=False).tolist())
        if rng.random() < 0.3:
            tc["min_partition"] = int(4 * rng.integers(1, max(2, t["dim"] // 2)))  # (up to twice the dim)
        if rng.random() < 0.15 and "host_memory_bytes" in topo:
            tc["kernels"] = sorted(rng.choice(["fused", "fused_uvm_caching", "fused_uvm"], size=int(rng.integers(1, 3)), replace=False).tolist())
        if len(tc) > 1:
            tables.append(tc)
    constraints: dict = {"tables": tables}
    if len(names) >= 4 and rng.random() < 0.3:
        constraints["colocate"] = [sorted(rng.choice(names, size=2, replace=False).tolist())]
    if len(names) >= 4 and rng.random() < 0.3:
        taken = {n for g in constraints.get("colocate", []) for n in g}
        free = [n for n in names if n not in taken]
        if len(free) >= 2:
            constraints["separate"] = [sorted(rng.choice(free, size=min(len(free), int(rng.integers(2, 4))), replace=False).tolist())]
    doc["constraints"] = constraints
    doc["name"] += "-constrained"
    try:
        return instance_from_dict(doc)
    except IRError:
        doc["topology"] = json.loads(inst.model_dump_json())["topology"]
        try:
            return instance_from_dict(doc)
        except IRError:
            return inst


def sweep_instance(seed: int, size: str = "small", constraints: bool = False) -> Instance:
    """The sweep's instance of `seed`: bench_tiered's random instance, with random constraints on every other seed
    when `constraints`."""
    inst = random_instance(seed, **SIZES[size])
    return with_random_constraints(inst, seed) if constraints and seed % 2 == 0 else inst


def run_one(label: str, seed: int, time_limit: float, judge: AnalyticCostModel, size: str = "small", constraints: bool = False) -> dict:
    inst = sweep_instance(seed, size, constraints)
    row: dict = {"seed": seed, "solver": label, "tables": len(inst.tables), "devices": inst.topology.num_devices,
                 "constraints": sorted(inst.constraint_kinds())}
    t0 = time.perf_counter()
    try:
        solver = make_solver(label)
        solver.prepare()  # one-time imports (TorchRec's), outside the solve's wall clock
        t0 = time.perf_counter()
        r = solver.solve(inst, judge, time_limit=time_limit, seed=0)
        row["status"], row["reason"] = r.status.value, (r.reason or "")[:300]
        if r.plan is not None:
            report = check_plan(inst, r.plan)
            row["valid"] = report.ok
            if not report.ok:
                row["problems"] = str(report)[:500]
            row["cost_ms"] = judge.plan_costs(inst, r.plan).max_cost
    except Exception as exc:  # noqa: BLE001 - the finding itself
        row["status"], row["reason"] = "error", f"{type(exc).__name__}: {exc}"[:300]
        row["traceback"] = traceback.format_exc()[-2000:]
    row["wall_s"] = round(time.perf_counter() - t0, 3)
    return row


def findings(rows: list[dict], covering: tuple[str, ...], time_limit: float | None = None) -> list[dict]:
    by: dict[int, dict[str, dict]] = {}
    for r in rows:
        by.setdefault(r["seed"], {})[r["solver"]] = r
    out = []
    for seed, got in sorted(by.items()):
        planned = any(r.get("valid") for r in got.values())
        greedy = got.get("greedy", {}).get("valid", False)
        placed_by = sorted(n for n, r in got.items() if r.get("valid"))
        for name, r in got.items():
            if greedy and name.split(":")[0] in SEEDED_BY_GREEDY and not r.get("valid"):
                out.append({"seed": seed, "solver": name, "kind": "give_up", "detail": f"{r['status']}: {r['reason']}"})
            if time_limit is not None and overran(r["wall_s"], time_limit):
                out.append({"seed": seed, "solver": name, "kind": "overrun", "detail": f"{r['wall_s']} s at a {time_limit:g} s limit"})
            if r["status"] == "error":
                out.append({"seed": seed, "solver": name, "kind": "error", "detail": r["reason"]})
            if r.get("valid") is False:
                out.append({"seed": seed, "solver": name, "kind": "invalid", "detail": r.get("problems", "")})
            if r["status"] == "infeasible" and planned:
                out.append({"seed": seed, "solver": name, "kind": "wrong_infeasible", "detail": r["reason"]})
            if placed_by and name.split(":")[0] in covering and not r.get("valid"):
                out.append({"seed": seed, "solver": name, "kind": "no_plan",
                            "detail": f"placed by {', '.join(placed_by)}; {r['status']}: {r['reason']}"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1000-1299")
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--solvers", default=None, help="comma-separated (default: every registered solver)")
    ap.add_argument("--covering", default=",".join(COVERING), help="solvers that must place what any other solver places")
    ap.add_argument("--constraints", action="store_true", help="random placement constraints and topologies on every other seed")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    try:
        seeds = seed_range(args.seeds)
    except ValueError:
        ap.error(f"--seeds: {args.seeds!r} is neither a range like 1000-1299 nor a list like 5,7,9")
    names = args.solvers.split(",") if args.solvers else sorted(solver_names())
    unknown = sorted(set(n.split(":")[0] for n in names) - set(solver_names()))
    if unknown:
        ap.error(f"--solvers: unknown {', '.join(unknown)} (known: {', '.join(sorted(solver_names()))})")
    judge = AnalyticCostModel()
    t0 = time.perf_counter()
    rows = [run_one(name, seed, args.time_limit, judge, args.size, args.constraints) for seed in seeds for name in names]
    found = findings(rows, tuple(args.covering.split(",")), args.time_limit)
    statuses = {name: dict(Counter(r["status"] for r in rows if r["solver"] == name)) for name in names}
    doc = {"command": "python benchmarks/sweep_random.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": f"{platform.node()} ({platform.machine()})", "date": date.today().isoformat(),
           "judge": "sim (analytic model): plans checked, nothing timed", "wall_s": round(time.perf_counter() - t0, 1),
           "statuses": statuses, "max_wall_s": {n: max(r["wall_s"] for r in rows if r["solver"] == n) for n in names},
           "findings": found, "rows": rows}
    for name in names:
        print(f"{name:22s} {statuses[name]}  slowest {doc['max_wall_s'][name]:.2f} s")
    kinds = Counter(f["kind"] for f in found)
    print(f"findings: {dict(kinds) or 'none'}")
    for f in found:
        print(f"  {f['kind']:16s} seed {f['seed']:5d} {f['solver']:20s} {f['detail'][:160]}")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if any(f["kind"] in FAILING for f in found) else 0


if __name__ == "__main__":
    raise SystemExit(main())
