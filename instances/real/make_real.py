"""Rebuilds the real-model instances of instances/real/ from their committed TorchRec configs, byte for byte, and
writes the manifest real.json (each instance's command and SHA-256; tests/test_real_models.py replays them).

Run from the repository root: `.venv/bin/python instances/real/make_real.py`."""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from pathlib import Path

from typer.testing import CliRunner

from shardopt.cli import app

HERE = Path("instances/real")
CONFIGS = HERE / "configs"


def command(model: str, name: str, args: str) -> str:
    """The import-torchrec command that builds instance `name` of `model`'s configs."""
    return (f"shardopt import-torchrec {CONFIGS / (model + '.tables.json')} --pooling-factors {CONFIGS / (model + '.pooling.json')} "
            f"{args} --name {name} --out {HERE / (name + '.json')}")


# (model, instance, cluster): the cluster and batch are this project's choice where the source gives none (said in
# `choice`); the tables, dims, pooling and optimizer are the published configuration's.
INSTANCES = [
    ("mlperf-dlrmv2", "mlperf-dlrmv2-8xh100", "--devices 8 --devices-per-host 8 --hardware h100 --batch-size 65536",
     "the reference's global batch 65,536 on one host of 8 H100 80GB"),
    ("mlperf-dlrmv2", "mlperf-dlrmv2-64xh100", "--devices 64 --devices-per-host 8 --hardware h100 --batch-size 131072",
     "8 hosts of 8 H100 80GB, global batch 131,072 (2,048 per GPU)"),
    ("mlperf-dlrmv2", "mlperf-dlrmv2-512xh100", "--devices 512 --devices-per-host 8 --hardware h100 --batch-size 262144",
     "64 hosts of 8 H100 80GB, global batch 262,144 (512 per GPU)"),
    ("mlperf-dlrmv2", "mlperf-dlrmv2-4xa100-40gb", "--devices 4 --hardware a100 --memory 40GiB --batch-size 32768",
     "one host of 4 A100 40GB, global batch 32,768: the tables (97.4 GiB) need 61 % of the HBM"),
    ("criteo-kaggle-dlrm", "criteo-kaggle-dlrm-8xv100", "--devices 8 --hardware v100 --batch-size 16384 --optimizer sgd",
     "one host of 8 V100 32GB (as the DLRM paper's Big Basin), global batch 16,384; the reference trains with SGD"),
    ("torchrec-dlrm-criteo1tb-full", "torchrec-dlrm-criteo1tb-full-80xa100-40gb",
     "--devices 80 --devices-per-host 8 --hardware a100 --memory 40GiB --batch-size 65520 --optimizer sgd",
     "the README's own cluster and batch: 10 p4d hosts of 8 A100 40GB, global batch 65,520"),
]


def main() -> int:
    runner = CliRunner()
    manifest: dict[str, object] = {
        "kind": "real-models",
        "description": "published models' table configurations on named clusters (instances/README.md)",
        "instances": {},
    }
    for model, name, args, choice in INSTANCES:
        cmd = command(model, name, args)
        result = runner.invoke(app, shlex.split(cmd)[1:])
        if result.exit_code != 0:
            print(result.output, file=sys.stderr)
            return 1
        path = HERE / (name + ".json")
        manifest["instances"][path.name] = {  # type: ignore[index]
            "command": cmd,
            "cluster": choice,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
        print(f"{path}: {result.output.strip().splitlines()[0]}")
    (HERE / "real.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
