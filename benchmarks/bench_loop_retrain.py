"""Replays a calibration's loop offline: how long the retrain on proposed plans' devices must train.

`calibrate --rounds R` retrains the neural model from nothing on the train-pool samples plus the devices of the plans
the searches proposed. Where proposing used a round's share of the budget, the retrain once got MIN_EPOCHS (10) and
made a model worse than the one it replaced (GPU lease 6). This replays the rounds on a calibration's committed data
(`<store>/<id>/data/`: train, test, comm and loop samples, the loop's tagged with their round) with the short retrain
and with the first fit's epochs, and judges each model on the held-out test-pool samples as `calibrate` does:

    python benchmarks/bench_loop_retrain.py DATA_DIR [--epochs 150] [--short 10] [--seeds 0,1] [--out rows.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodels.evaluation import accuracy_by_band  # noqa: E402
from costmodels.neural import NeuralCostModel  # noqa: E402
from costmodels.train import TrainSettings, train  # noqa: E402
from shardopt.measure.calibration import LOOP_MAX_WEIGHT, LOOP_SHARE_OF_TRAIN  # noqa: E402
from shardopt.measure.collect import read_samples  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--short", type=int, default=10)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--out")
    a = ap.parse_args()
    train_s = list(read_samples(a.data / "train.jsonl.gz", "compute"))
    test = list(read_samples(a.data / "test.jsonl.gz", "compute"))
    comm = list(read_samples(a.data / "comm.jsonl.gz", "comm"))
    loop = list(read_samples(a.data / "loop.jsonl.gz", "compute"))
    rounds = sorted({int(d["origin"]["round"]) for d in loop})
    print(f"{len(train_s)} train, {len(test)} held-out, {len(comm)} comm, {len(loop)} loop samples (rounds {rounds})")
    tmp = Path(tempfile.mkdtemp())
    rows = []

    def judged(samples: list, epochs: int, seed: int, tag: str) -> float:
        path = tmp / f"{tag}.npz"
        train(samples + comm, TrainSettings(epochs=epochs, seed=seed)).save(path)
        m = accuracy_by_band(NeuralCostModel(path), test)["all"]
        rows.append({"model": tag, "seed": seed, "epochs": epochs, "mape": m["mape"], "kendall_tau": m["kendall_tau"]})
        print(f"seed {seed} {tag:>12s}, {epochs:3d} epochs: held-out MAPE {m['mape']:.1%} (tau {m['kendall_tau']:.3f})", flush=True)
        return m["mape"]

    for seed in (int(v) for v in a.seeds.split(",")):
        judged(train_s, a.epochs, seed, "first fit")
        for r in rounds:
            extra = [d for d in loop if int(d["origin"]["round"]) <= r]
            weight = max(1, min(LOOP_MAX_WEIGHT, round(LOOP_SHARE_OF_TRAIN * len(train_s) / len(extra))))  # as calibrate weighs them
            extra = extra * weight
            for epochs in (a.short, a.epochs):
                judged(train_s + extra, epochs, seed, f"retrain r{r}")
    if a.out:
        Path(a.out).write_text(json.dumps({"args": {**vars(a), "data": str(a.data)}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
