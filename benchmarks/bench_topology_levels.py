"""How much planning for the real topology pays (issue 36): each solver plans an instance once as it is and once
as a simpler view of it, and both plans are judged as it is. Simulated (analytic judge). Rows as JSON lines on stdout.

* a topology that lists its levels (e.g. an NVL72 rack's NVLink domain over hosts of 4) against the two levels of
  old (NVLink within the host, the network beyond it): row keys `levels_*` / `two_levels_*`;
* a job that mixes GPU generations (`device_hardware`) against every device priced as the reference kind, each
  keeping its own memory (what a planner with per-rank capacities but one compute model sees, as TorchRec's):
  row keys `mixed_*` / `blind_*`, and each plan's share of the lookup work on the devices not of the reference kind;
* a topology given as a network graph against the two levels of old at device 0's fastest and slowest links (NVLink
  and NIC: blind to shared, oversubscribed uplinks): row keys `graph_*` / `two_levels_*`.

    .venv/bin/python benchmarks/bench_topology_levels.py [INSTANCE.json ...] [--limit 20] [--solvers greedy,neuroshard,cpsat]
        [--bound-limit 60]

With `--bound-limit S` each instance's certified bound first (where the bound covers it), one row each, and each
plan's gap to it (`*_gap_pct`, or `*_uncovered`: why the bound does not cover the plan);
`--solvers ""` runs none. Without instances: instances/suites/nvl72-test.
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
from shardopt.core.ir import Instance, Plan, Topology, load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def without_levels(inst: Instance) -> Instance:
    """The same cluster as the two levels of old describe it: NVLink within the host (the innermost level's link
    where it holds whole hosts, else the profile's), the network (the outermost level's link) beyond."""
    levels = inst.topology.levels
    inner = next((lv for lv in levels if lv.devices >= inst.topology.devices_per_host), levels[0])
    topo = inst.topology.model_copy(update={"levels": None, "intra_host_bandwidth": inner.bandwidth, "inter_host_bandwidth": levels[-1].bandwidth})
    return inst.model_copy(update={"topology": Topology.model_validate(topo.model_dump())})


def without_graph(inst: Instance) -> Instance:
    """The same cluster as the two levels of old describe it: NVLink within the host at the fastest link of device 0,
    the network at its slowest (its NIC): blind to what the graph adds - shared uplinks, their oversubscription."""
    graph = inst.topology.graph
    names = {n["id"]: n for n in graph["nodes"]}
    links = [e["bandwidth"] for e in graph.get("edges", graph.get("links", []))
             if any(names.get(end, {}).get("device") == 0 for end in (e["source"], e["target"]))]
    topo = inst.topology.model_copy(update={"graph": None, "intra_host_bandwidth": max(links), "inter_host_bandwidth": min(links)})
    return inst.model_copy(update={"topology": Topology.model_validate(topo.model_dump())})


def blind_to_mix(inst: Instance) -> Instance:
    """The same job with every device of the reference kind (`topology.hardware`), each keeping its own memory."""
    topo = inst.topology.model_copy(update={"device_hardware": None})
    return inst.model_copy(update={"topology": Topology.model_validate(topo.model_dump())})


def views(inst: Instance) -> tuple[str, str, Instance]:
    """(label of the instance as it is, label of the simpler view, the view)."""
    if inst.topology.is_mixed:
        return "mixed", "blind", blind_to_mix(inst)
    if inst.topology.levels is not None:
        return "levels", "two_levels", without_levels(inst)
    if inst.topology.graph is not None:
        return "graph", "two_levels", without_graph(inst)
    raise SystemExit(f"{inst.name}: neither topology levels nor mixed hardware kinds: nothing to compare")


def other_kind_share(inst: Instance, plan: Plan) -> float:
    """Share of the plan's lookup work (width x pooling x share of rows) on devices not of the reference kind."""
    kinds = inst.topology.hardware_kinds()
    by_name = {t.name: t for t in inst.tables}
    work = np.zeros(2)
    for s in plan.shards:
        t = by_name[s.table]
        if not s.replicated:
            work[int(kinds[s.device] != inst.topology.hardware)] += s.width(t) * t.pooling_factor * s.height(t) / t.rows
    return float(work[1] / work.sum()) if work.sum() > 0 else 0.0


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
        real, simple, view = views(inst)
        bound = None
        if args.bound_limit > 0:
            from solvers.bound import BoundError, analytic_lower_bound

            start = time.perf_counter()
            try:
                bound = b = analytic_lower_bound(inst, cm, time_limit=args.bound_limit)
                print(json.dumps({"instance": inst.name, "bound_ms": b.value_ms, "status": b.status, "source": b.source,
                                  "envelope_bound_ms": b.envelope_bound_ms, "time_s": round(time.perf_counter() - start, 2)}),
                      flush=True)
            except BoundError as exc:
                print(json.dumps({"instance": inst.name, "bound_ms": None, "why": str(exc)}), flush=True)
        for solver in filter(None, args.solvers.split(",")):
            row: dict = {"instance": inst.name, "tables": len(inst.tables), "devices": inst.topology.num_devices, "solver": solver}
            for label, planned in ((real, inst), (simple, view)):
                start = time.perf_counter()
                r = get_solver(solver).solve(planned, cm, seed=0, time_limit=None if solver == "greedy" else args.limit)
                row[f"{label}_wall_s"] = round(time.perf_counter() - start, 2)
                row[f"{label}_ms"] = None if r.plan is None else float(cm.plan_costs(inst, r.plan).max_cost)  # judged as it is
                if label == simple and r.plan is not None:
                    row[f"{simple}_predicted_ms"] = float(cm.plan_costs(view, r.plan).max_cost)  # what it believed
                if inst.topology.is_mixed and r.plan is not None:
                    row[f"{label}_other_kind_work_share"] = round(other_kind_share(inst, r.plan), 3)
                if bound is not None and r.plan is not None:  # the gap where the bound covers the plan (else why not)
                    from solvers.bound.bound import uncovered_reason

                    why = uncovered_reason(list(r.plan.shards), bound=bound)
                    row[f"{label}_gap_pct"] = None if why else round(100 * (row[f"{label}_ms"] - bound.value_ms) / row[f"{label}_ms"], 2)
                    if why:
                        row[f"{label}_uncovered"] = why
            if row[f"{real}_ms"] and row[f"{simple}_ms"]:
                row[f"{real}_faster_pct"] = round(100 * (row[f"{simple}_ms"] - row[f"{real}_ms"]) / row[f"{simple}_ms"], 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
