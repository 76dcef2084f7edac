"""2D sparse parallelism: the group size `auto` chooses against every other, on one model at several world sizes.

For each world size N the instance's topology is grown to N devices (its hardware, hosts and links kept), given a
`two_d` section (group size auto, the sync interval and layout given here), and solved by the solver named; then,
with --every, each group size that forms groups is solved by that solver too, so that the chosen G stands beside
every other, beside G = N (flat) and beside G = one host. Costs are simulated (the analytic model; the sync is
analytic, costmodels/replica_sync.py). Wall time and the process's peak memory are the solve's.

    .venv/bin/python benchmarks/bench_two_d.py instances/real/mlperf-dlrmv2-512xh100.json --world 512,1024,4096 --every
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def job_at(path: Path, world: int, interval: int, layout: str) -> object:
    from shardopt.core.ir import instance_from_dict, load_instance

    base = load_instance(path)
    doc = base.model_dump(mode="json", exclude_none=True)
    topo = doc["topology"]
    if isinstance(topo.get("memory_bytes"), list) or topo.get("levels") or topo.get("graph"):
        raise SystemExit(f"{path}: grow only a topology of one memory size without levels or a graph")
    scale = world / topo["num_devices"]
    topo["num_devices"] = world
    doc["workload"]["batch_size"] = int(round(doc["workload"]["batch_size"] * scale))
    doc["two_d"] = {"group_size": "auto", "sync_interval": interval, "layout": layout}
    doc["name"] = f"{base.name or path.stem}-{world}"
    return instance_from_dict(doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance", type=Path)
    ap.add_argument("--world", default="512,1024,4096", help="comma-separated world sizes")
    ap.add_argument("--solver", default="neuroshard")
    ap.add_argument("--sync-interval", type=int, default=100)
    ap.add_argument("--layout", default="alternating", choices=("alternating", "contiguous"))
    ap.add_argument("--every", action="store_true", help="also solve every group size with the solver")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from costmodels.analytic import AnalyticCostModel
    from shardopt.core.ir import instance_from_dict
    from shardopt.core.sharding_groups import candidate_group_sizes
    from solvers.catalog import get_solver

    cm = AnalyticCostModel()
    rows = []
    for world in (int(w) for w in args.world.split(",")):
        inst = job_at(args.instance, world, args.sync_interval, args.layout)
        t0 = time.perf_counter()
        r = get_solver(args.solver).solve(inst, cm, seed=0)
        wall = time.perf_counter() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        row = {"world": world, "solver": args.solver, "chosen": r.two_d.group_size, "cost_ms": r.plan.predicted_cost if r.plan else None,
               "wall_s": round(wall, 2), "peak_rss_mb": round(peak_mb), "trials": [t.to_dict() for t in r.two_d.trials]}
        print(f"N={world}: chose G={row['chosen']} {row['cost_ms']:.4f} ms in {wall:.1f} s (peak RSS {peak_mb:.0f} MB)", flush=True)
        for t in r.two_d.trials:
            total = f"{t.total_ms:.4f}" if t.embedding_ms is not None else "-"
            print(f"   G={t.group_size:5d} {t.solver:12s} {'refined' if t.refined else 'scout  '} {total:>9s} ms "
                  f"(embedding {t.embedding_ms or 0:.4f} + sync {t.sync_ms or 0:.4f}) {t.wall_s:.2f} s {(t.why or '')[:60]}", flush=True)
        if args.every:
            every = []
            for g, why in candidate_group_sizes(inst):
                if why is not None:
                    continue
                doc = inst.model_dump(mode="json", exclude_none=True)
                doc["two_d"]["group_size"] = g
                fixed = instance_from_dict(doc)
                t1 = time.perf_counter()
                rg = get_solver(args.solver).solve(fixed, cm, seed=0)
                trial = rg.two_d.trials[-1]
                every.append({"group_size": g, **trial.to_dict(), "wall_s": round(time.perf_counter() - t1, 2)})
                total = f"{trial.total_ms:.4f}" if trial.embedding_ms is not None else "no plan"
                print(f"   every: G={g:5d} {total:>9s} ms (embedding {trial.embedding_ms or 0:.4f} + sync {trial.sync_ms or 0:.4f})", flush=True)
            row["every"] = every
        rows.append(row)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
