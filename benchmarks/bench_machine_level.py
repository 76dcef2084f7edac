"""How far a calibrated model's predictions are off on this machine now, and how much of that its level explains.

For a calibrated model of the store (a card with its data folder):
1. the level: its anchor samples re-timed now (shardopt.measure.machine_level.read_level), median of now / collected;
2. with `--drift`, the same ratio on its loop's proposed-plan devices by round and on other held-out samples: whether
   the machine moved during the calibration itself;
3. the plan-level error on the held-out instances of `--suite` (every third, as the calibration holds them out): the
   plans greedy, neuroshard and cpsat make with the model, each measured `--passes` times on the judge (the judge's
   settings: 5 repeats after 2 warm-ups), predicted at level 1 and at the level just read - the same plans.

    python benchmarks/bench_machine_level.py --models DIR --id MODEL_ID --suite instances/suites/cpu-test --drift \
        --out benchmarks/results/machine-level-2026-11-29/bench.json

Timing: run nothing else beside it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    e = (pred - measured) / measured
    return {"mape": float(np.mean(np.abs(e))), "bias": float(np.mean(e))}


def _ratios(samples: list[dict], backend: str) -> list[float]:
    from shardopt.measure.machine_level import read_level

    out = []
    for s in samples:
        out.append(read_level([s], backend).factor)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="the store folder holding the model")
    ap.add_argument("--id", required=True, help="the model's id")
    ap.add_argument("--suite", required=True, help="the suite the model was calibrated --for")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=2.0, help="seconds per proposing solve (the loop's default)")
    ap.add_argument("--drift", action="store_true", help="also re-time the loop's devices by round and 60 held-out samples")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from costmodels.neural import NeuralCostModel
    from costmodels.store import find_card
    from shardopt.core.fingerprint import cpu_fingerprint
    from shardopt.core.ir import load_instance
    from shardopt.measure.calibration import split_targets
    from shardopt.measure.collect import read_samples
    from shardopt.measure.evaluate import evaluate_plan
    from shardopt.measure.machine_level import choose_anchors, read_level, sample_total
    from solvers.catalog import get_solver

    card = find_card(args.id, args.models)
    if card is None or card.path is None:
        sys.exit(f"no model {args.id!r} in {args.models}")
    data = card.path.parent / "data"
    test = list(read_samples(data / "test.jsonl.gz", "compute"))
    t0 = time.time()
    reading = read_level(choose_anchors(test), card.backend)
    doc: dict = {"model": card.id, "card_level": card.level or None, "machine": cpu_fingerprint().describe(), "date": time.strftime("%Y-%m-%d"),
                 "level": reading.to_dict()}
    print(f"level now: {reading.factor:.3f} (quartiles {reading.spread[0]:.3f}-{reading.spread[1]:.3f}, {reading.seconds:.0f} s)", flush=True)

    if args.drift:
        rng = np.random.default_rng(0)
        anchor_ids = {a.get("id") for a in choose_anchors(test)}
        others = [s for s in test if s.get("id") not in anchor_ids and 5 <= sample_total(s) <= 60]
        groups = {"held-out samples": list(rng.choice(others, min(60, len(others)), replace=False))} if others else {}
        loop_file = data / "loop.jsonl.gz"
        if loop_file.is_file():
            with gzip.open(loop_file, "rt") as f:
                loop = [json.loads(line) for line in f if line.strip()]
            for r in sorted({d["origin"]["round"] for d in loop}):
                devs = [d for d in loop if d["origin"]["round"] == r]
                # (a device kept at the samples' level carries the level it was timed at: undo it to compare with then)
                devs = [{**d, "fwd_compute": d["fwd_compute"] * d.get("level", 1.0), "bwd_compute": d["bwd_compute"] * d.get("level", 1.0)} for d in devs]
                groups[f"loop round {r} devices"] = list(rng.choice(devs, min(40, len(devs)), replace=False))
        doc["drift"] = {}
        for name, group in groups.items():
            r = np.array(_ratios(group, card.backend))
            doc["drift"][name] = {"n": len(r), "median": float(np.median(r)), "q25": float(np.quantile(r, 0.25)), "q75": float(np.quantile(r, 0.75))}
            print(f"now / then, {name}: median {np.median(r):.3f} (n = {len(r)})", flush=True)

    suite = Path(args.suite)
    files = sorted(p for p in suite.glob("*.json") if not p.name.startswith("suite"))
    _, heldout = split_targets([load_instance(p) for p in files])
    model = NeuralCostModel(card.model_path("neural"))
    rows = []
    for inst in heldout:
        for solver in ("greedy", "neuroshard", "cpsat"):
            plan = get_solver(solver).solve(inst, model, time_limit=args.time_limit, seed=0).plan
            costs = model.plan_costs(inst, plan)
            at_level = NeuralCostModel(card.model_path("neural"), compute_scale=reading.factor).plan_costs(inst, plan)
            rows.append({"instance": inst.name, "solver": solver, "plan": plan, "inst": inst,
                         "predicted_level_1": float(costs.max_cost), "predicted_at_level": float(at_level.max_cost), "measured": []})
    for k in range(args.passes):
        for row in rows:
            ev = evaluate_plan(row["inst"], row["plan"], card.backend, repeats=5, warmup=2, seed=100 + k, cache=False)
            row["measured"].append(float(ev.costs.max_cost))
    measured = np.array([np.median(r["measured"]) for r in rows])
    doc["plans"] = [{k: v for k, v in r.items() if k not in ("plan", "inst")} for r in rows]
    doc["plan_level"] = {
        "level_1": _errors(np.array([r["predicted_level_1"] for r in rows]), measured),
        "at_level": _errors(np.array([r["predicted_at_level"] for r in rows]), measured),
        "passes": [{"level_1": _errors(np.array([r["predicted_level_1"] for r in rows]), np.array([r["measured"][k] for r in rows])),
                    "at_level": _errors(np.array([r["predicted_at_level"] for r in rows]), np.array([r["measured"][k] for r in rows]))}
                   for k in range(args.passes)],
    }
    doc["seconds"] = time.time() - t0
    pl = doc["plan_level"]
    print(f"{len(rows)} plans of {len(heldout)} held-out instances: MAPE {pl['level_1']['mape']:.1%} (signed {pl['level_1']['bias']:+.1%}) "
          f"at level 1, {pl['at_level']['mape']:.1%} ({pl['at_level']['bias']:+.1%}) at level {reading.factor:.3f}; {doc['seconds']:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
