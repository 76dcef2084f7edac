"""Real models: each solver's plan against the certified bound, and ours against TorchRec's under both models.

For each instance (instances/real, the skewed test suite):
- the certified bound (`shardopt bound`, --bound-limit s), and which covered plan kinds it proves;
- greedy, neuroshard's default, cpsat (--limit s) and TorchRec's planner (`torchrec`, its own proposers), each in its
  own process (`shardopt solve --json`, wall time its own): the plan's cost under the analytic model (sim) and its gap
  to the bound;
- both referees (issue 'real models' item 4): our default plan for TorchRec (neuroshard on the instance with
  TorchRec's form, constraints.torchrec: even column widths, what ShardoptPlanner plans) and TorchRec's plan, each
  priced by the analytic model and by TorchRec's own estimators (`solvers.torchrec_estimate.torchrec_rating`).
Rows as JSON lines (stdout, and --out).

    .venv/bin/python benchmarks/bench_real_models.py instances/real/*.json instances/suites/skewed-test/*.json \\
        --limit 60 --bound-limit 60 --out benchmarks/results/real-models.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_bound_gaps import _timed  # noqa: E402  (one way to time a CLI run: its wall time and peak memory)


def _solve(py: list[str], path: str, solver: str, extra: list[str], plan_out: str) -> dict[str, Any]:
    doc, wall, gib = _timed([*py, "solve", path, "--solver", solver, "-c", "analytic", *extra, "--json", "--out", plan_out])
    pred = doc.get("predicted") or {}
    return {"cost_ms": pred.get("max_cost_ms"), "wall_s": round(wall, 2), "peak_gib": round(gib, 3), "status": doc.get("status"),
            "error": (doc.get("error") or {}).get("message") if isinstance(doc.get("error"), dict) else doc.get("error")}


def _rated(instance: Any, plan_path: str) -> dict[str, Any]:
    """The plan at `plan_path` under the analytic model and TorchRec's estimators (cuda: every instance here is a GPU job)."""
    from costmodels.analytic import AnalyticCostModel
    from shardopt.core.ir import load_plan
    from solvers.torchrec_estimate import NotRatable, torchrec_rating

    if not os.path.exists(plan_path):
        return {"sim_ms": None, "torchrec_ms": None, "torchrec_note": "no plan"}
    plan = load_plan(plan_path)
    bare = instance.model_copy(update={"constraints": None}) if instance.constraints is not None and instance.constraints.torchrec else instance
    sim = float(max(AnalyticCostModel().bind(bare).plan_costs(plan).total))
    try:
        rating = torchrec_rating(bare, plan, compute_device="cuda")
        return {"sim_ms": round(sim, 5), "torchrec_ms": round(float(rating["torchrec_perf_rating_ms"]), 5), "torchrec_note": None}
    except NotRatable as exc:
        return {"sim_ms": round(sim, 5), "torchrec_ms": None, "torchrec_note": str(exc)[:200]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="+")
    ap.add_argument("--limit", type=float, default=60.0, help="cpsat's time limit")
    ap.add_argument("--bound-limit", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--solvers", default="greedy,neuroshard,cpsat,torchrec,referees",
                    help="comma-separated subset of greedy, neuroshard, cpsat, torchrec, referees (referees needs torchrec)")
    ap.add_argument("--bounds-from", type=Path, default=None,
                    help="a JSONL of an earlier run: its bound rows are reused (the row says so) instead of running the bound")
    args = ap.parse_args()
    wanted = set(args.solvers.split(","))
    unknown = wanted - {"greedy", "neuroshard", "cpsat", "torchrec", "referees"}
    if unknown or ("referees" in wanted and "torchrec" not in wanted):
        ap.error(f"--solvers: {args.solvers!r}: " + (f"unknown {sorted(unknown)}" if unknown else "referees needs torchrec"))
    earlier = {}
    if args.bounds_from:
        for line in args.bounds_from.read_text().splitlines():
            row = json.loads(line)
            if row.get("bound_ms") is not None:
                earlier[row["path"]] = row
    from shardopt.core.ir import PlacementConstraints, TorchRecForm, load_instance, read_json, save

    py = [sys.executable, "-m", "shardopt"]
    out = args.out.open("a") if args.out else None

    def emit(row: dict[str, Any]) -> None:
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    for path in args.instances:
        if read_json(path).get("kind") != "instance":  # (instances/real/real.json, the folder's index, matches *.json)
            print(f"skipped {path}: not an instance document", file=sys.stderr)
            continue
        inst = load_instance(path)
        if path in earlier:
            e = earlier[path]
            value, status, b_s = e["bound_ms"], e["bound_status"], e["bound_s"]
        else:
            doc, b_s, _ = _timed([*py, "bound", path, "--time-limit", str(args.bound_limit), "--json"])
            bound = doc.get("bound") or {}
            value, status = bound.get("value_ms"), bound.get("status")
        base = {"instance": inst.name, "path": path, "tables": len(inst.tables), "devices": inst.topology.num_devices,
                "bound_ms": value, "bound_status": status, "bound_s": round(b_s, 2),
                "date": time.strftime("%Y-%m-%d"), "judge": "sim (analytic)"}
        if path in earlier:
            base["bound_from"] = f"{args.bounds_from} ({earlier[path]['date']})"
        with tempfile.TemporaryDirectory() as tmp:
            plans: dict[str, str] = {}
            for label, solver, extra in (("greedy", "greedy", []), ("neuroshard", "neuroshard", []),
                                         (f"cpsat {args.limit:g}s", "cpsat", ["--time-limit", str(args.limit)]),
                                         ("torchrec", "torchrec", [])):
                if solver not in wanted:
                    continue
                plans[label] = os.path.join(tmp, f"{solver}.json")
                got = _solve(py, path, solver, extra, plans[label])
                gap = (got["cost_ms"] - value) / got["cost_ms"] if got["cost_ms"] and value else None
                emit({**base, "solver": label, **got, "gap": None if gap is None else round(gap, 5)})
            if "referees" not in wanted:
                continue
            # both referees: our plan for TorchRec (even widths, as ShardoptPlanner plans) and TorchRec's
            formed = inst.model_copy(update={"constraints": (inst.constraints or PlacementConstraints()).model_copy(
                update={"torchrec": TorchRecForm(even_columns=True)})})
            formed_path = os.path.join(tmp, "formed.json")
            save(formed, formed_path)
            plans["ours (torchrec form)"] = os.path.join(tmp, "ours.json")
            got = _solve(py, formed_path, "neuroshard", [], plans["ours (torchrec form)"])
            ours = _rated(inst, plans["ours (torchrec form)"])
            theirs = _rated(inst, plans["torchrec"])
            emit({**base, "solver": "referees", "ours_wall_s": got["wall_s"], "ours_status": got["status"],
                  "ours_sim_ms": ours["sim_ms"], "theirs_sim_ms": theirs["sim_ms"],
                  "ours_torchrec_ms": ours["torchrec_ms"], "theirs_torchrec_ms": theirs["torchrec_ms"],
                  "ours_note": ours["torchrec_note"], "theirs_note": theirs["torchrec_note"]})
    if out:
        out.close()


if __name__ == "__main__":
    main()
