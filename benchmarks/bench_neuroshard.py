"""NeuroShard: solve times (targets: 100 x 8 under 5 s, 856 x 128 under 60 s) and the effect of each improvement.

Ablation: the improved solver with each switch turned off in turn, and the faithful solver, on a suite; mean plan
cost (analytic judge, simulated) and mean solve time. Run: `.venv/bin/python benchmarks/bench_neuroshard.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.neuroshard.config import FAITHFUL, NeuroShardConfig  # noqa: E402
from solvers.neuroshard.search import NeuroShardSolver  # noqa: E402

SWITCHES = ("split_apart", "comm_aware", "dedup", "polish", "seed_with_greedy", "seed_with_presplit")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default=str(ROOT / "instances" / "suites" / "neuroshard-test"))
    ap.add_argument("--skip-times", action="store_true")
    ap.add_argument("--skip-ablation", action="store_true")
    args = ap.parse_args()
    model = AnalyticCostModel()
    report: dict = {}
    if not args.skip_times:
        for label, path in (
            ("100x8", ROOT / "instances" / "suites" / "dreamshard-test" / "dreamshard-test-s1-0003.json"),
            ("856x128", ROOT / "instances" / "suites" / "production" / "production-all-s0-0000.json"),
        ):
            inst = load_instance(path)
            for name, cfg in (("improved", NeuroShardConfig()), ("faithful", FAITHFUL)):
                if label == "856x128" and name == "faithful":
                    cfg = NeuroShardConfig(**{**FAITHFUL.__dict__, "anytime": True, "default_time_limit": 55.0})
                t0 = time.perf_counter()
                r = NeuroShardSolver(cfg).solve(inst, model)
                secs = time.perf_counter() - t0
                report[f"{label}/{name}"] = {"seconds": secs, "status": r.status.value, "cost_ms": r.predicted_cost, "states": r.stats.states_scored if r.stats else None}
                print(f"{label} {name}: {secs:.2f} s, {r.status.value}, cost {r.predicted_cost:.4f} ms (simulated), {r.stats.states_scored if r.stats else None} states")
    if not args.skip_ablation:
        files = sorted(p for p in Path(args.suite).glob("*.json") if p.name != "suite.json")
        variants = {"improved": NeuroShardConfig(), "faithful": FAITHFUL}
        variants.update({f"without {s}": NeuroShardConfig(**{s: False}) for s in SWITCHES})
        for name, cfg in variants.items():
            costs, times = [], []
            for f in files:
                inst = load_instance(f)
                r = NeuroShardSolver(cfg).solve(inst, model)
                costs.append(r.predicted_cost)
                times.append(r.wall_time_s)
            report[f"ablation/{name}"] = {"mean_cost_ms": statistics.mean(costs), "mean_s": statistics.mean(times), "instances": len(files)}
            print(f"{Path(args.suite).name} {name:<26} mean cost {statistics.mean(costs):.4f} ms, mean {statistics.mean(times):.2f} s")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
