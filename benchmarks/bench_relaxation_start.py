"""cpsat with two sets of options on one suite and one cost model: which warm starts pay for their share of the time.

    .venv/bin/python benchmarks/bench_relaxation_start.py SUITE_DIR --cost-model NAME [--time-limit 5]
        [--with-options k=v,...] [--without-options k=v,...] [--out F.json]

Default pair: cpsat at its defaults against `relaxation_share=0` (no relaxation warm start: the analytic model's
relaxation, which only an analytic search gets). `--with-options neuroshard_share=0.3,relaxation_share=0` tries
NeuroShard's plan as a start instead. For every instance, the same seed and time limit: each run's plan cost under the
search's own model (simulated: the model is the judge here), the warm starts' costs and which start won. Plan quality
only: re-time the plans with `shardopt compare` to measure them.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from shardopt.leaderboard.run import suite_files  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def parse_options(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (kv.split("=", 1) for kv in text.split(",") if kv)}


def run(path: Path, model_name: str, time_limit: float, seed: int, variants: dict[str, dict[str, float]]) -> dict:
    inst = load_instance(path)
    model = get_cost_model(model_name)
    row: dict = {"instance": path.name, "tables": len(inst.tables), "devices": inst.topology.num_devices}
    for label, options in variants.items():
        t0 = time.perf_counter()
        r = get_solver("cpsat", **options).solve(inst, model, time_limit=time_limit, seed=seed)
        cost = float(model.plan_costs(inst, r.plan).max_cost) if r.plan is not None else None
        row[label] = {"cost_ms": cost, "status": r.status.value, "wall_s": round(time.perf_counter() - t0, 2),
                      **(r.stats.to_dict() if r.stats else {})}
    a, b = row["with"]["cost_ms"], row["without"]["cost_ms"]
    row["change_pct"] = 100.0 * (a - b) / b if a is not None and b else None
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path)
    ap.add_argument("--cost-model", required=True)
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-options", default="", help="cpsat options of the 'with' run, k=v,... (default: cpsat's defaults)")
    ap.add_argument("--without-options", default="relaxation_share=0", help="cpsat options of the 'without' run")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    variants = {"with": parse_options(args.with_options), "without": parse_options(args.without_options)}
    rows = []
    for path in suite_files(args.suite):
        row = run(path, args.cost_model, args.time_limit, args.seed, variants)
        rows.append(row)
        ws = row["with"]["warm_starts"] or {}
        print(f"{row['instance']}: with {row['with']['cost_ms']:.4f} ms, without {row['without']['cost_ms']:.4f} ms "
              f"({row['change_pct']:+.2f} %); relaxation start {ws.get('relaxation')}, best start "
              f"{(row['with']['warm_start'] or {}).get('solver')}", flush=True)
    changes = [r["change_pct"] for r in rows if r["change_pct"] is not None]
    geo = 100.0 * (math.exp(sum(math.log(1 + c / 100) for c in changes) / len(changes)) - 1) if changes else None
    summary = {"suite": str(args.suite), "cost_model": args.cost_model, "time_limit": args.time_limit, "variants": variants,
               "machine": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d"),
               "better": sum(c < -1e-9 for c in changes), "worse": sum(c > 1e-9 for c in changes),
               "geo_mean_change_pct": geo, "rows": rows}
    print(f"with the relaxation start: better on {summary['better']}, worse on {summary['worse']} of {len(changes)}; "
          f"geometric mean {geo:+.2f} % (simulated, {args.cost_model})")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
