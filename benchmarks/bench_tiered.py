"""Issue 17's targets: who finds a plan where table-wise HBM placement is not enough, and at what (simulated) cost.

On the committed `huge-test` and `tiered-test` suites and on N seeded random instances (tables of 10^2-10^8 rows,
dims 4-256, 1-16 devices, memory from roomy to too small, host memory on half of them), every solver is run and every
plan judged by the analytic model (**simulated** ms, max over devices). Reported per family: on how many instances
TorchRec's planner (`torchrec_all`: every sharding type, UVM kernels where there is host memory) finds a plan, how
many of those each solver also places, and each solver's mean cost relative to TorchRec's on the instances both
placed. A solver without a plan is counted, with its status, never dropped.

Run: `.venv/bin/python benchmarks/bench_tiered.py [--random 200] [--solvers torchrec_all,greedy,neuroshard,cpsat]
[--time-limit 10] [--out benchmarks/results/tiered.json]` (the committed rows are that file gzipped).
A solver may carry options: `neuroshard:data_parallel=true` (several separated by `;`).
`--reuse OLD.json[.gz]` takes the rows of the solvers *not* in `--solvers` from an earlier run of the same
instances (e.g. TorchRec's, which take most of the time) and re-runs only the named ones; the output says which
rows were reused and from which file and date. `--only nested` runs only the instances whose cluster has several
hosts of several devices (where a row split can be held within one host, TorchRec's table_row_wise) and, with
`--reuse`, keeps every row of the other instances from the earlier run: a change that only touches such clusters
is re-measured where it can matter. `--only tiered` likewise runs only the instances that need more than table-wise
HBM (`solvers.placement.tiering.needs_tiers`: a table fits on no device, or the tables exceed the HBM), where the tiering
layout is used. `--instances a,b,...` runs only the named instances (the same way).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from costmodels.hierarchical import in_host_row_split_tables  # noqa: E402
from shardopt.core.ir import Instance, instance_from_dict, load_instance  # noqa: E402
from shardopt.core.memory import table_bytes_array  # noqa: E402
from shardopt.core.plan_check import check_plan  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402
from solvers.placement.polish import describe_placements  # noqa: E402

SUITES = ["huge-test", "tiered-test"]


def random_instance(seed: int, tables: tuple[int, int] = (2, 30), devices: tuple[int, ...] = (1, 2, 4, 8, 16)) -> Instance:
    """One seeded random instance: any shape a user might bring, memory from roomy to too small. `tables` (inclusive
    range) and `devices` (choices) set its size; the defaults are the ones the committed rows were drawn with."""
    rng = np.random.default_rng(seed)
    n_dev = int(rng.choice(list(devices)))
    per_host = int(rng.choice([d for d in (1, 2, 4, 8) if n_dev % d == 0]))
    n_tab = int(rng.integers(tables[0], tables[1] + 1))
    tables = []
    for i in range(n_tab):
        tables.append({
            "name": f"t{i}", "rows": int(10 ** rng.uniform(2, 8)), "dim": int(4 * rng.integers(1, 65)),
            "pooling_factor": float(round(rng.uniform(0.5, 40), 2)), "access": {"zipf": float(round(rng.uniform(0, 1.4), 2))},
        })
    doc = {"name": f"random-{seed}", "tables": tables,
           "topology": {"num_devices": n_dev, "devices_per_host": per_host, "hardware": str(rng.choice(["a100", "h100", "gh200"])),
                        "memory_bytes": 1},
           "workload": {"batch_size": int(rng.choice([4096, 16384, 65536])), "optimizer": "rowwise_adagrad"},
           "metadata": {"family": "random", "seed": seed}}
    total = int(table_bytes_array(instance_from_dict(doc)).sum())
    # device memory: total / devices x a factor from 0.3 (HBM far short) to 3 (roomy)
    factor = float(rng.choice([0.3, 0.6, 0.9, 1.2, 2.0, 3.0]))
    doc["topology"]["memory_bytes"] = max(1, int(total * factor / n_dev))
    if rng.random() < 0.5:
        doc["topology"]["host_memory_bytes"] = int(doc["topology"]["memory_bytes"] * float(rng.choice([1.0, 3.2, 5.0])))
    return instance_from_dict(doc)


def make_solver(label: str):  # noqa: ANN201
    """A solver from a label 'name' or 'name:key=value,key=value' (options as JSON values, e.g. neuroshard:data_parallel=true)."""
    name, _, opts = label.partition(":")
    kwargs = {}
    for item in filter(None, opts.split(";")):
        key, _, raw = item.partition("=")
        try:
            kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key] = raw
    return get_solver(name, **kwargs)


def run(names: list[str], instances: list[tuple[str, Instance]], time_limit: float | None) -> list[dict]:
    judge = AnalyticCostModel()
    rows = []
    for family, inst in instances:
        for name in names:
            t0 = time.perf_counter()
            try:
                r = make_solver(name).solve(inst, judge, time_limit=time_limit, seed=0)
                status, reason, plan = r.status.value, r.reason, r.plan
            except Exception as exc:  # noqa: BLE001 - a crash is a result too, recorded
                status, reason, plan = "error", f"{type(exc).__name__}: {exc}", None
            wall = time.perf_counter() - t0
            cost = None
            if plan is not None:
                assert check_plan(inst, plan).ok, (inst.name, name)
                cost = judge.plan_costs(inst, plan).max_cost
            kinds = sorted({s.kernel.value for s in plan.shards}) if plan is not None else []
            rowwise = sum(1 for t in inst.tables if plan is not None and sum(1 for s in plan.shards if s.table == t.name) > 1)
            layouts = {} if plan is None else {kind: n for kind, n in describe_placements(inst, plan.shards)[0].items() if kind != "table-wise, HBM"}
            if plan is not None and in_host_row_split_tables(inst, plan.shards):
                layouts["row split within a host"] = len(in_host_row_split_tables(inst, plan.shards))
            rows.append({"family": family, "instance": inst.name, "solver": name, "status": status, "reason": (reason or "")[:300],
                         "cost_ms": cost, "wall_s": round(wall, 3), "kernels": kinds, "split_tables": rowwise,
                         "placements": layouts, "host_memory": inst.topology.has_host_memory})
    return rows


def summarise(rows: list[dict], names: list[str], baseline: str) -> list[dict]:
    out = []
    for family in sorted({r["family"] for r in rows}):
        fam = [r for r in rows if r["family"] == family]
        by = {(r["instance"], r["solver"]): r for r in fam}
        insts = sorted({r["instance"] for r in fam})
        base_ok = [i for i in insts if by[(i, baseline)]["cost_ms"] is not None]
        for name in names:
            mine_ok = [i for i in insts if by[(i, name)]["cost_ms"] is not None]
            both = [i for i in base_ok if by[(i, name)]["cost_ms"] is not None]
            ratios = [by[(i, name)]["cost_ms"] / by[(i, baseline)]["cost_ms"] for i in both if by[(i, baseline)]["cost_ms"] > 0]
            out.append({
                "family": family, "solver": name, "instances": len(insts), "plans": len(mine_ok),
                f"plans_where_{baseline}_has_one": len(both), f"{baseline}_plans": len(base_ok),
                "geo_mean_cost_ratio_to_baseline": math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None,
                "mean_cost_ratio_to_baseline": statistics.fmean(ratios) if ratios else None,
                "statuses": {s: sum(1 for i in insts if by[(i, name)]["status"] == s) for s in sorted({by[(i, name)]["status"] for i in insts})},
                "median_wall_s": statistics.median(by[(i, name)]["wall_s"] for i in insts),
            })
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=200, help="seeded random instances (seeds 0..N-1)")
    ap.add_argument("--solvers", default="torchrec_all,greedy,neuroshard,cpsat")
    ap.add_argument("--baseline", default="torchrec_all")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reuse", type=Path, default=None, help="an earlier run's JSON (.gz): its rows of other solvers are kept")
    ap.add_argument("--instances", default=None, help="comma-separated instance names: only these (the others' rows from --reuse)")
    ap.add_argument("--only", choices=["all", "nested", "tiered"], default="all",
                    help="nested: only clusters of several hosts of several devices; tiered: only instances that need "
                         "more than table-wise HBM (solvers.placement.tiering.needs_tiers) (the other instances' rows from --reuse)")
    args = ap.parse_args(argv)
    names = args.solvers.split(",")
    reused: list[dict] = []
    reused_from = None
    if args.reuse is not None:
        opener = gzip.open if args.reuse.suffix == ".gz" else open
        with opener(args.reuse, "rt") as fh:
            old = json.load(fh)
        reused = [r for r in old["rows"] if r["solver"] not in names]
        reused_from = {"file": str(args.reuse), "date": old.get("date"), "command": old.get("command"),
                       "solvers": sorted({r["solver"] for r in reused})}
    instances: list[tuple[str, Instance]] = []
    for suite in SUITES:
        for p in sorted((ROOT / "instances" / "suites" / suite).glob(f"{suite}-*.json")):
            instances.append((suite, load_instance(p)))
    instances += [("random", random_instance(s)) for s in range(args.random)]
    kept: list[dict] = []
    if args.only != "all" or args.instances:
        from solvers.placement.tiering import needs_tiers

        chosen = {"all": lambda i: True, "nested": lambda i: i.topology.num_hosts > 1 and i.topology.devices_per_host > 1, "tiered": needs_tiers}[args.only]
        named = set(args.instances.split(",")) if args.instances else None
        nested = [(f, i) for f, i in instances if chosen(i) and (named is None or i.name in named)]
        others = {(f, i.name) for f, i in instances} - {(f, i.name) for f, i in nested}
        if args.reuse is not None:
            kept = [r for r in old["rows"] if (r["family"], r["instance"]) in others and r["solver"] in names]
            reused_from["kept_instances"] = len(others)  # type: ignore[index]
        instances = nested
    t0 = time.perf_counter()
    rows = run(names, instances, args.time_limit) + kept
    if reused:
        wanted = {(f, i.name) for f, i in instances} | ({(r["family"], r["instance"]) for r in kept} if kept else set())
        rows += [r for r in reused if (r["family"], r["instance"]) in wanted]
        names = reused_from["solvers"] + names  # type: ignore[index]
    summary = summarise(rows, names, args.baseline)
    doc = {"command": "python benchmarks/bench_tiered.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": f"{platform.node()} ({platform.machine()}), 2-core VM", "date": date.today().isoformat(),
           "judge": "sim (analytic model, the instance's own hardware profile)", "wall_s": round(time.perf_counter() - t0, 1),
           "reused": reused_from, "summary": summary, "rows": rows}
    for s in summary:
        ratio = s["geo_mean_cost_ratio_to_baseline"]
        print(f"{s['family']:12s} {s['solver']:14s} plans {s['plans']:4d}/{s['instances']:4d}  where {args.baseline} has one: "
              f"{s[f'plans_where_{args.baseline}_has_one']:4d}/{s[f'{args.baseline}_plans']:4d}  cost / {args.baseline} (geo mean) "
              f"{'-' if ratio is None else f'{ratio:.3f}'}  statuses {s['statuses']}")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
