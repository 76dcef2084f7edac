"""How much planning for the real topology pays (issue 36): each solver plans an instance whose topology lists its
levels (e.g. an NVL72 rack's NVLink domain over hosts of 4) once with the levels and once with the topology as the
two levels of old could describe it (NVLink within the host, the network beyond it), and both plans are judged
with the levels. Simulated (analytic judge). Rows as JSON lines on stdout.

    .venv/bin/python benchmarks/bench_topology_levels.py [INSTANCE.json ...] [--limit 20] [--solvers greedy,neuroshard,cpsat]
        [--bound-limit 60]

With `--bound-limit S` each instance's certified bound first (where the bound covers its network), one row each;
`--solvers ""` runs none.

Without instances: instances/suites/nvl72-test.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import Instance, Topology, load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def without_levels(inst: Instance) -> Instance:
    """The same cluster as the two levels of old describe it: NVLink within the host (the innermost level's link
    where it holds whole hosts, else the profile's), the network (the outermost level's link) beyond."""
    levels = inst.topology.levels
    inner = next((lv for lv in levels if lv.devices >= inst.topology.devices_per_host), levels[0])
    topo = inst.topology.model_copy(update={"levels": None, "intra_host_bandwidth": inner.bandwidth, "inter_host_bandwidth": levels[-1].bandwidth})
    return inst.model_copy(update={"topology": Topology.model_validate(topo.model_dump())})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*")
    ap.add_argument("--limit", type=float, default=20.0, help="time limit of the searches (s)")
    ap.add_argument("--solvers", default="greedy,neuroshard,cpsat")
    ap.add_argument("--bound-limit", type=float, default=0.0, help="time limit of each instance's certified bound (0: none)")
    args = ap.parse_args()
    paths = args.instances or sorted(glob.glob(str(ROOT / "instances/suites/nvl72-test/*.json")))
    cm = AnalyticCostModel()
    for path in paths:
        if Path(path).name == "suite.json":
            continue
        inst = load_instance(path)
        flat = without_levels(inst)
        if args.bound_limit > 0:
            from solvers.bound import BoundError, analytic_lower_bound

            try:
                b = analytic_lower_bound(inst, cm, time_limit=args.bound_limit)
                print(json.dumps({"instance": inst.name, "bound_ms": b.value_ms, "status": b.status, "source": b.source,
                                  "time_s": round(b.time_s, 2)}), flush=True)
            except BoundError as exc:
                print(json.dumps({"instance": inst.name, "bound_ms": None, "why": str(exc)}), flush=True)
        for solver in filter(None, args.solvers.split(",")):
            row: dict = {"instance": inst.name, "tables": len(inst.tables), "devices": inst.topology.num_devices, "solver": solver}
            for label, planned in (("levels", inst), ("two_levels", flat)):
                start = time.perf_counter()
                r = get_solver(solver).solve(planned, cm, seed=0, time_limit=None if solver == "greedy" else args.limit)
                row[f"{label}_wall_s"] = round(time.perf_counter() - start, 2)
                row[f"{label}_ms"] = None if r.plan is None else float(cm.plan_costs(inst, r.plan).max_cost)  # judged with the levels
                if label == "two_levels" and r.plan is not None:
                    row["two_levels_predicted_ms"] = float(cm.plan_costs(flat, r.plan).max_cost)  # what it believed
            if row["levels_ms"] and row["two_levels_ms"]:
                row["levels_faster_pct"] = round(100 * (row["two_levels_ms"] - row["levels_ms"]) / row["two_levels_ms"], 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
