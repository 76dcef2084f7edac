"""Does one all-to-all per sharding type cost more than one all-to-all of the same widths? Measured on CPU gloo.

The judge prices a plan that mixes table- and column-wise tables as two all-to-alls (TorchRec runs one output dist
per sharding type: docs/analytic-model.md). This times, with the torchrun program's gloo mode (`--comm measured`:
one CPU process per device, `all_to_all_single`), pairs of plans with the SAME per-device widths: all tables whole
(one collective), and the same widths with some tables cut into column pieces held on the same devices' neighbours
(two collectives). The pairs are measured interleaved (A, B, A, B, ...) and each round's medians compared; the
analytic model's prediction of the difference is printed beside the measurement (its profile is a GPU's, NCCL
start-ups: the sign, not the size, is what the CPU can check).

    python benchmarks/bench_output_dists.py [--devices 4] [--batch 4096] [--rounds 5] [--out FILE.json]

CPU gloo, one process per device, on this machine's cores: a figure about gloo on this CPU, not about NCCL.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.analytic import AnalyticCostModel  # noqa: E402
from costmodels.hierarchical import output_dist_widths  # noqa: E402
from shardopt.core.ir import Instance, Plan, Shard, instance_from_dict  # noqa: E402
from shardopt.core.plan_check import check_plan  # noqa: E402
from shardopt.measure.plan_timing import measure_comm_gloo  # noqa: E402


def instance(devices: int, batch: int) -> Instance:
    """2 tables of dim 64 per device (small rows: only the all-to-all is timed)."""
    tables = [{"name": f"t{i}", "rows": 1000, "dim": 64, "pooling_factor": 2.0, "access": {"zipf": 0.5}} for i in range(2 * devices)]
    return instance_from_dict({"schema_version": 1, "kind": "instance", "name": f"output-dists-{devices}",
                               "tables": tables, "topology": {"num_devices": devices, "devices_per_host": devices, "memory_bytes": 2**30, "hardware": "v100"},
                               "workload": {"batch_size": batch, "optimizer": "sgd"}})


def plans(inst: Instance) -> dict[str, Plan]:
    """`one`: every table whole, two per device. `two`: the same widths, but on each device one of its tables is
    replaced by two half-width pieces, one of its own table and one of its neighbour's (so every device still holds
    128 columns): a table-wise and a column-wise all-to-all."""
    D = inst.topology.num_devices
    one = [Shard(table=t.name, device=k // 2) for k, t in enumerate(inst.tables)]
    two = []
    for d in range(D):
        whole, cut = inst.tables[2 * d], inst.tables[2 * d + 1]
        two.append(Shard(table=whole.name, device=d))
        two.append(Shard(table=cut.name, device=d, cols=32))
        two.append(Shard(table=cut.name, device=(d + 1) % D, col_offset=32))
    return {"one": Plan(solver="bench", shards=one), "two": Plan(solver="bench", shards=two)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    inst = instance(args.devices, args.batch)
    ps = plans(inst)
    bm = AnalyticCostModel().bind(inst)
    for name, p in ps.items():
        assert check_plan(inst, p).ok, name
    widths = {n: output_dist_widths(inst, p.shards) for n, p in ps.items()}
    assert np.array_equal(widths["one"][0].sum(axis=0), widths["two"][0].sum(axis=0))  # the same per-device widths
    measured: dict[str, list[float]] = {n: [] for n in ps}
    for r in range(args.rounds):
        for n, p in ps.items():  # interleaved: A, B, A, B, ...
            cols = measure_comm_gloo(inst, p, repeats=args.repeats, warmup=3, seed=r)
            measured[n].append(float(cols.sum(axis=1).max()))  # fwd + bwd, slowest device
        print(f"round {r + 1}: one {measured['one'][-1]:.3f} ms, two {measured['two'][-1]:.3f} ms")
    diffs = [b - a for a, b in zip(measured["one"], measured["two"])]
    model = {n: float(bm.plan_costs(p).columns[:, 2:4].sum(axis=1).max()) for n, p in ps.items()}
    summary = {
        "one_collective_ms": statistics.median(measured["one"]),
        "two_collectives_ms": statistics.median(measured["two"]),
        "median_difference_ms": statistics.median(diffs),
        "rounds_two_slower": sum(d > 0 for d in diffs),
        "analytic_model_ms": model,
    }
    print(json.dumps(summary, indent=2))
    doc = {"command": "python " + " ".join(sys.argv), "machine": platform.node(), "cpu": platform.processor() or platform.machine(),
           "date": datetime.now(UTC).isoformat(timespec="seconds"), "judge": "cpu gloo all_to_all_single (measured)",
           "devices": args.devices, "batch": args.batch, "rounds": args.rounds, "repeats": args.repeats,
           "measured_ms": measured, "summary": summary}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
