"""The costs every committed instance had before topology levels existed (issue 36: "old documents load unchanged and
cost exactly what they cost today"). `python -m tests.topology_golden` rewrote tests/data/topology-golden.json at
commit d1a6b06 (before `Topology.levels`); tests/test_topology_levels.py checks today's model against it. The cpu
suites' entries were refreshed when those suites were regenerated with machine-independent histograms (their costs
moved by less than 1e-12, relative).

The plan for each instance is fixed by its shape alone and exercises every communication term the model has: the
first table replicated on every device, the second split by rows over the devices of host 0 (table_row_wise where
there are hosts of several devices, else row_wise over devices 0 and 1), the third cut in two column halves, the
rest table-wise round the devices."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from shardopt.core.ir import Instance, Plan, Shard, load_instance

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "topology-golden.json"


def committed_instances() -> list[Path]:
    return sorted(p for p in (ROOT / "instances").rglob("*.json") if _is_instance(p))


def _is_instance(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("kind") == "instance"
    except (ValueError, AttributeError):
        return False


def golden_plan(inst: Instance) -> Plan:
    topo, tables = inst.topology, inst.tables
    D = topo.num_devices
    shards: list[Shard] = []
    rest = list(range(len(tables)))
    if D > 1 and len(tables) >= 3:
        t0, t1, t2 = tables[0], tables[1], tables[2]
        shards += [Shard(table=t0.name, device=d, replicated=True) for d in range(D)]
        group = list(range(topo.devices_per_host)) if topo.devices_per_host > 1 else [0, 1]
        step = -(-t1.rows // len(group))
        for k, d in enumerate(group):
            lo = k * step
            if lo < t1.rows:
                shards.append(Shard(table=t1.name, device=d, row_offset=lo, rows=min(step, t1.rows - lo)))
        if t2.dim >= 8 and t2.dim % 8 == 0:
            half = t2.dim // 2
            shards += [Shard(table=t2.name, device=0, cols=half), Shard(table=t2.name, device=D - 1, col_offset=half, cols=half)]
        else:
            shards.append(Shard(table=t2.name, device=D - 1))
        rest = rest[3:]
    shards += [Shard(table=tables[i].name, device=(7 * i) % D) for i in rest]
    return Plan(shards=shards, solver="golden")


def golden_costs() -> dict[str, dict]:
    from costmodels.analytic import AnalyticCostModel

    out = {}
    for path in committed_instances():
        inst = load_instance(path)
        costs = AnalyticCostModel().plan_costs(inst, golden_plan(inst))
        out[str(path.relative_to(ROOT))] = {
            "document_sha256": hashlib.sha256(inst.model_dump_json().encode()).hexdigest(),
            "max_cost_ms": float(costs.max_cost),
            "fwd_comm_ms": [float(x) for x in costs.fwd_comm],
            "bwd_comm_ms": [float(x) for x in costs.bwd_comm],
        }
    return out


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(golden_costs(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
