"""Fine-tuning a shipped neural model on a few samples of a new machine, against learning from those samples alone.

A calibration on a lent GPU collects 100-200 device samples in its minutes (leases 5 and 6); a neural model trained on
them alone was held out at 51-53 % MAPE there, twice the refitted analytic profile. This measures, offline on samples
already collected, whether starting from a shipped model of a similar machine (same backend, same GPU kind or another
CPU) does better, for several sample counts, learning rates and seeds:

    python benchmarks/bench_finetune.py --train T.jsonl.gz --test H.jsonl.gz --comm C.jsonl.gz --base neural-h200-torch \
        [--sizes 50,100,177] [--seeds 0,1,2] [--lrs 2e-3,5e-4] [--epochs 150] [--out rows.json]

Every figure is a device-level MAPE (fwd + bwd compute) on the held-out samples, judged as `calibrate` judges.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodels.evaluation import accuracy_by_band  # noqa: E402
from costmodels.neural import NeuralCostModel  # noqa: E402
from costmodels.registry import get_cost_model  # noqa: E402
from costmodels.train import TrainSettings, train  # noqa: E402
from shardopt.measure.collect import read_samples  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--comm", required=True)
    ap.add_argument("--base", required=True, help="a registered neural model (name) or a .npz")
    ap.add_argument("--sizes", default="50,100,200")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lrs", default="2e-3,5e-4")
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--out")
    a = ap.parse_args()

    train_all = list(read_samples(a.train, "compute"))
    test = list(read_samples(a.test, "compute"))
    comm = list(read_samples(a.comm, "comm"))
    base_model = get_cost_model(a.base)
    base = base_model.weights  # (a NeuralCostModel: its arrays and record)
    rows = [{"arm": "base alone", "n": 0, "mape": accuracy_by_band(base_model, test)["all"]["mape"]}]
    print(f"{len(train_all)} train, {len(test)} held-out, {len(comm)} comm samples; base {a.base}: {rows[0]['mape']:.1%}")
    for n in (int(v) for v in a.sizes.split(",")):
        n = min(n, len(train_all))
        for lr in (float(v) for v in a.lrs.split(",")):
            for arm in ("scratch", "fine-tuned"):
                mapes = []
                for seed in (int(v) for v in a.seeds.split(",")):
                    picked = [train_all[i] for i in sorted(__import__("random").Random(seed).sample(range(len(train_all)), n))]
                    ts = TrainSettings(epochs=a.epochs, learning_rate=lr, seed=seed)
                    t0 = time.perf_counter()
                    w = train(picked + comm, ts, base=base if arm == "fine-tuned" else None)
                    path = Path(f"/tmp/bench-finetune-{arm}-{n}-{seed}.npz")
                    w.save(path)
                    m = accuracy_by_band(NeuralCostModel(path), test)["all"]
                    mapes.append(m["mape"])
                    rows.append({"arm": arm, "n": n, "lr": lr, "seed": seed, "mape": m["mape"], "tau": m["kendall_tau"],
                                 "train_s": time.perf_counter() - t0})
                print(f"n={n:4d} lr={lr:g} {arm:10s}: MAPE {statistics.mean(mapes):.1%} (seeds {', '.join(f'{v:.1%}' for v in mapes)})", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
