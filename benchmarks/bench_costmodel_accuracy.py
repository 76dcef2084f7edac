"""Held-out accuracy of cost models against CPU measurements (docs/measured.md, "Cost models learned from
measurements"): the neural model trained on measured samples of the TRAIN pool, the analytic model refitted to the
same samples, and the analytic model as shipped, each judged on measured samples of the disjoint TEST pool, overall
and by the size of the device's measured cost (the cpu family's devices are 5-50 ms).

    python benchmarks/bench_costmodel_accuracy.py [--data costmodels/measurements/cpu-test.jsonl.gz] [--models A,B,...]
        [--out FILE.json]

The models must have learned (or been fitted on) measurements of the same CPU as the test data: timings of one
sample differ by 2x between two EPYC generations (docs/measured.md, "A second CPU").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.evaluation import predict_samples  # noqa: E402
from costmodels.registry import get_cost_model  # noqa: E402
from costmodels.train import metrics  # noqa: E402
from shardopt.measure.collect import read_samples  # noqa: E402

MODELS = ("neural-cpu", "analytic:cpu-2core", "analytic")
BANDS = ((0.0, 2.0), (2.0, 5.0), (5.0, 10.0), (10.0, 20.0), (20.0, 50.0), (50.0, float("inf")), (5.0, 50.0), (0.0, 5.0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT / "costmodels" / "measurements" / "cpu-test.jsonl.gz"))
    ap.add_argument("--models", default=",".join(MODELS), help="cost models to judge, comma-separated")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    samples = list(read_samples(args.data, "compute"))
    out: dict[str, dict] = {}
    for name in args.models.split(","):
        pred, true = predict_samples(get_cost_model(name), samples)
        total_p, total_t = pred.sum(axis=1), true.sum(axis=1)
        row = {"all": {"fwd": metrics(pred[:, 0], true[:, 0]), "bwd": metrics(pred[:, 1], true[:, 1]),
                       "total": metrics(total_p, total_t)}}
        for lo, hi in BANDS:
            k = (total_t >= lo) & (total_t < hi)
            row[f"total {lo:g}-{hi:g} ms"] = metrics(total_p[k], total_t[k]) if k.sum() > 2 else {"n": int(k.sum())}
        out[name] = row
        print(f"{name:20s} total MAPE {row['all']['total']['mape']:.4f} tau {row['all']['total']['kendall_tau']:.4f} | "
              + " | ".join(f"{band}: MAPE {m.get('mape', float('nan')):.4f} tau {m.get('kendall_tau', float('nan')):.4f} (n={m['n']})"
                           for band, m in row.items() if band != "all"))
    if args.out:
        import datetime

        from shardopt.measure.backends.timing import cpu_name

        judges = sorted({str(x.get("judge", "")) for x in samples})
        Path(args.out).write_text(json.dumps({
            "command": "python " + " ".join(sys.argv), "date": datetime.date.today().isoformat(), "evaluated_on": cpu_name(),
            "data": args.data, "data_judges": judges, "samples": len(samples), "models": out}, indent=1) + "\n")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
