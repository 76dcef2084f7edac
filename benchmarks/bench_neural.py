"""Benchmark: neural cost-model inference on the CPU (target: 10,000 candidate device sets well under 100 ms).

Times (median of repeats): one batched `compute_costs` call on 10,000 device states (each the sum of 1 to 20
random table encodings of the instance), binding (encoding every table), judging one 856 x 128 plan, and the
greedy solver driven by the neural model. Run: `.venv/bin/python benchmarks/bench_neural.py [--model MODEL.npz]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.neural import NeuralCostModel  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--instance", default=str(ROOT / "instances" / "examples" / "large.json"))
    ap.add_argument("--candidates", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    model = NeuralCostModel(args.model)
    inst = load_instance(args.instance)
    bind_s = median_s(lambda: model.bind(inst).table_states, 5)
    bm = model.bind(inst)
    rng = np.random.default_rng(0)
    enc = bm.table_states
    states = np.stack([enc[rng.choice(len(enc), size=rng.integers(1, 21), replace=False)].sum(axis=0) for _ in range(args.candidates)])
    batch_s = median_s(lambda: bm.compute_costs(states), args.repeats)
    device_of = rng.integers(0, inst.topology.num_devices, size=len(inst.tables))
    judge_s = median_s(lambda: bm.assignment_costs(device_of), args.repeats)
    greedy = get_solver("greedy")
    greedy_s = median_s(lambda: greedy.solve(inst, model), 3)
    row = {
        "benchmark": "neural_inference",
        "model": str(model.path.relative_to(ROOT) if model.path.is_relative_to(ROOT) else model.path),
        "instance": args.instance,
        "candidates": args.candidates,
        "batched_compute_costs_ms": batch_s * 1e3,
        "bind_encode_all_tables_ms": bind_s * 1e3,
        "judge_one_plan_ms": judge_s * 1e3,
        "greedy_solve_s": greedy_s,
    }
    print(f"{args.candidates} candidate device sets, one compute_costs call: {row['batched_compute_costs_ms']:.1f} ms")
    print(f"bind (encode {len(inst.tables)} tables): {row['bind_encode_all_tables_ms']:.1f} ms; judge one {len(inst.tables)} x {inst.topology.num_devices} plan: {row['judge_one_plan_ms']:.1f} ms")
    print(f"greedy with the neural model on {Path(args.instance).name}: {greedy_s:.2f} s")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
