"""The certified bound of a job of one kind whose hosts differ in HBM (simulated, analytic judge): too many (table,
device) pairs for the full relaxation, so the bound was the table cuts; the class LP (solvers/bound/kinds.py, one
copy of the device variables per memory class) now stands in. Rows as JSON lines on stdout: the bound, its source
and time, the table cuts' value, and greedy's plan with its gap to each.

    .venv/bin/python benchmarks/bench_class_lp.py [INSTANCE.json ...] [--shares 0.8,1.2] [--bound-limit 60]

Each instance's hosts are split in halves: the first half's devices get `shares[0]` x the instance's HBM, the
second `shares[1]` x (the total HBM unchanged when the shares average 1). Default: production-xl-all-s0-0000.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from shardopt.core.ir import Instance, Topology, load_instance  # noqa: E402
from solvers.bound import analytic_lower_bound  # noqa: E402
from solvers.bound.context import AnalyticRelaxation  # noqa: E402
from solvers.bound.table_cuts import table_cut_bound  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def uneven(inst: Instance, shares: tuple[float, float]) -> Instance:
    """`inst` with its first half of hosts at shares[0] x its HBM per device and the rest at shares[1] x."""
    topo = inst.topology
    hosts = topo.num_devices // topo.devices_per_host
    caps = [int(topo.capacities()[d] * shares[0 if d // topo.devices_per_host < hosts // 2 else 1]) for d in range(topo.num_devices)]
    doc = topo.model_dump()
    doc["memory_bytes"] = caps
    return inst.model_copy(update={"topology": Topology.model_validate(doc), "name": f"{inst.name}-hbm{shares[0]:g}-{shares[1]:g}"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*")
    ap.add_argument("--shares", default="0.8,1.2")
    ap.add_argument("--bound-limit", type=float, default=60.0)
    args = ap.parse_args()
    shares = tuple(float(x) for x in args.shares.split(","))
    paths = args.instances or [str(ROOT / "instances/suites/production-xl/production-xl-all-s0-0000.json")]
    cm = AnalyticCostModel()
    for path in paths:
        inst = uneven(load_instance(path), shares)
        start = time.perf_counter()
        b = analytic_lower_bound(inst, cm, time_limit=args.bound_limit)
        bound_s = time.perf_counter() - start
        cuts = table_cut_bound(AnalyticRelaxation(inst))
        start = time.perf_counter()
        plan = get_solver("greedy").solve(inst, cm, seed=0).plan
        greedy_s = time.perf_counter() - start
        cost = float(cm.plan_costs(inst, plan).max_cost) if plan is not None else None
        row = {"instance": inst.name, "tables": len(inst.tables), "devices": inst.topology.num_devices, "bound_ms": b.value_ms,
               "source": b.source, "bound_s": round(bound_s, 1), "table_cuts_ms": cuts, "greedy_ms": cost, "greedy_s": round(greedy_s, 1)}
        if cost:
            row["greedy_gap_pct"] = round(100 * (cost - b.value_ms) / cost, 2)
            row["greedy_gap_to_cuts_pct"] = round(100 * (cost - cuts) / cost, 2)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
