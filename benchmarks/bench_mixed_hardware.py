"""How much planning for a job that mixes GPU generations pays (issue 36): each solver plans an instance whose devices
are of two kinds (Topology.device_hardware, e.g. A100 and H200 hosts) once knowing each device's kind and once
blind to the mix - every device priced as the topology's reference kind, with each device's own memory (what a
planner that takes per-rank capacities but one compute model sees, as TorchRec's does) - and both plans are judged
with each device on its own kind. Simulated (analytic judge). Rows as JSON lines on stdout.

    .venv/bin/python benchmarks/bench_mixed_hardware.py [INSTANCE.json ...] [--limit 20] [--solvers greedy,neuroshard,cpsat]

Without instances: instances/suites/mixed-test.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import Instance, Topology, load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def blind_to_mix(inst: Instance) -> Instance:
    """The same job with every device of the reference kind (`topology.hardware`), each keeping its own memory."""
    topo = inst.topology.model_copy(update={"device_hardware": None})
    return inst.model_copy(update={"topology": Topology.model_validate(topo.model_dump())})


def newer_share(inst: Instance, plan) -> float:  # noqa: ANN001 - a Plan
    """Share of the plan's pooled width (the tables' lookup work proxy: dim x pooling) on devices not of the reference kind."""
    kinds = inst.topology.hardware_kinds()
    by_name = {t.name: t for t in inst.tables}
    work = np.zeros(2)
    for s in plan.shards:
        t = by_name[s.table]
        w = (s.width(t) * t.pooling_factor * s.height(t) / t.rows) if not s.replicated else 0.0
        work[int(kinds[s.device] != inst.topology.hardware)] += w
    return float(work[1] / work.sum()) if work.sum() > 0 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*")
    ap.add_argument("--limit", type=float, default=20.0, help="time limit of the searches (s)")
    ap.add_argument("--solvers", default="greedy,neuroshard,cpsat")
    args = ap.parse_args()
    paths = args.instances or sorted(glob.glob(str(ROOT / "instances/suites/mixed-test/*.json")))
    cm = AnalyticCostModel()
    for path in paths:
        if Path(path).name == "suite.json":
            continue
        inst = load_instance(path)
        blind = blind_to_mix(inst)
        for solver in filter(None, args.solvers.split(",")):
            row: dict = {"instance": inst.name, "tables": len(inst.tables), "devices": inst.topology.num_devices, "solver": solver}
            for label, planned in (("mixed", inst), ("blind", blind)):
                start = time.perf_counter()
                r = get_solver(solver).solve(planned, cm, seed=0, time_limit=None if solver == "greedy" else args.limit)
                row[f"{label}_wall_s"] = round(time.perf_counter() - start, 2)
                row[f"{label}_ms"] = None if r.plan is None else float(cm.plan_costs(inst, r.plan).max_cost)  # judged with the mix
                if r.plan is not None:
                    row[f"{label}_newer_work_share"] = round(newer_share(inst, r.plan), 3)
                if label == "blind" and r.plan is not None:
                    row["blind_predicted_ms"] = float(cm.plan_costs(blind, r.plan).max_cost)  # what it believed
            if row["mixed_ms"] and row["blind_ms"]:
                row["mixed_faster_pct"] = round(100 * (row["blind_ms"] - row["mixed_ms"]) / row["blind_ms"], 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
