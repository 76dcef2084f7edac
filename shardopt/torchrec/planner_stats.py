"""The planner's stats table: what TorchRec users read in its log, for shardopt's plan.

Why its own module: TorchRec's planner logs a table per rank (shards, storage, perf) and the plan's imbalance; a
TorchRec user looks there first. ShardoptPlanner logs the same in spirit, from shardopt's own figures: per rank the
shards by sharding type, the HBM and DDR (host memory for UVM) the plan uses of what the rank has, the predicted
forward / backward / all-to-all milliseconds and their total, the bottleneck rank marked; then the plan cost (max
over ranks), the critical path, the imbalance (max / mean) and the certified bound where the solver computed one.
Every figure names the cost model that predicted it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from costmodels.base import DeviceCosts
from shardopt.core.ir import Instance, Plan, Shard
from shardopt.core.plan_check import check_plan
from shardopt.core.sharding_types import sharding_type
from shardopt.core.units import fmt_bytes

# short names of the sharding types, as TorchRec's stats table abbreviates them
SHORT = {"table_wise": "TW", "column_wise": "CW", "row_wise": "RW", "table_row_wise": "TWRW", "table_column_wise": "TWCW",
         "data_parallel": "DP", "grid_shard": "GS"}


def stats_lines(instance: Instance, plan: Plan | list[Shard], costs: DeviceCosts, cost_model: str, bound: float | None,
                memory: str = "HBM") -> list[str]:
    """The stats table, one string per line (the module docstring says what it holds). `memory`: what the ranks'
    memory is called (DDR on a CPU job, where it is the only memory)."""
    shards = plan.shards if isinstance(plan, Plan) else plan
    topo = instance.topology
    check = check_plan(instance, shards)
    by_table: dict[str, list[Shard]] = defaultdict(list)
    for s in shards:
        by_table[s.table].append(s)
    kinds = {t.name: SHORT[sharding_type(topo, t, by_table[t.name])] for t in instance.tables if by_table.get(t.name)}
    per_rank: list[Counter[str]] = [Counter() for _ in range(topo.num_devices)]
    for s in shards:
        per_rank[s.device][kinds[s.table]] += 1
    host = topo.has_host_memory
    head = ["rank", "shards", f"{memory} used / cap", *(["DDR used / cap"] if host else []), "fwd ms", "bwd ms", "comm ms", "total ms"]
    rows = []
    for d in range(topo.num_devices):
        shown = " ".join(f"{k}:{n}" for k, n in sorted(per_rank[d].items())) or "-"
        mem = f"{fmt_bytes(check.memory_use[d])} / {fmt_bytes(topo.capacity(d))}"
        ddr = [f"{fmt_bytes(check.host_memory_use[d])} / {fmt_bytes(topo.host_capacity(d))}"] if host else []
        fwd, bwd, fc, bc = (float(x) for x in costs.columns[d])
        mark = " *" if d == costs.bottleneck else ""
        rows.append([f"{d}{mark}", shown, mem, *ddr, f"{fwd:.3f}", f"{bwd:.3f}", f"{fc + bc:.3f}", f"{costs.total[d]:.3f}"])
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return " | ".join(c.rjust(w) if k else c.ljust(w) for k, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), "-+-".join("-" * w for w in widths)] + [line(r) for r in rows]
    types = Counter(kinds.values())
    out.append(f"sharding types: {', '.join(f'{k} {n}' for k, n in sorted(types.items()))}; * = bottleneck rank {costs.bottleneck}")
    out.append(f"plan cost {costs.max_cost:.4f} ms per iteration (max over ranks, {cost_model}); critical path {costs.critical_path:.4f} ms; "
               f"imbalance {costs.imbalance:.3f} (max / mean)")
    if bound is not None:
        gap = (costs.max_cost / bound - 1.0) * 100 if bound > 0 else float("nan")
        out.append(f"certified lower bound {bound:.4f} ms: the plan is within {gap:.1f} % of the best possible by this model")
    return out


def stats_record(instance: Instance, plan: Plan | list[Shard], costs: DeviceCosts) -> list[dict[str, Any]]:
    """The table's per-rank figures as data (`planner.last["ranks"]`)."""
    shards = plan.shards if isinstance(plan, Plan) else plan
    check = check_plan(instance, shards)
    out = []
    for d in range(instance.topology.num_devices):
        fwd, bwd, fc, bc = (float(x) for x in costs.columns[d])
        out.append({"rank": d, "shards": sum(1 for s in shards if s.device == d), "hbm_bytes": int(check.memory_use[d]),
                    "ddr_bytes": int(check.host_memory_use[d]), "fwd_ms": fwd, "bwd_ms": bwd, "comm_ms": fc + bc,
                    "total_ms": float(costs.total[d])})
    return out
