"""Write the cards of the shipped measured cost models (costmodels/weights/NAME.card.json) from their committed data.

    python benchmarks/ship_model_cards.py

Two kinds of shipped model. The older ones (SHIPPED) were trained by hand from committed samples: their cards are
computed here. The calibrated ones (CALIBRATED) are `shardopt calibrate` runs whose store folder was committed with
its results (a GPU campaign's `models/<id>/`): their neural weights and refitted profile are copied into the package
and their card is calibrate's own, renamed and marked shipped (its held-out and plan-level figures are calibrate's).

Each card's domain is computed from the model's committed training samples, its held-out accuracy from its committed
test samples (the same figures `shardopt costmodel eval` prints), its machine and commands from the model's note
(costmodels/weights/NAME.json). Fingerprints are what the notes record: the day-before EPYC of `neural-cpu` had no
family or model number recorded, so its card matches no machine (`auto` never picks it; naming it warns).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.cards import ModelCard, domain_of_samples  # noqa: E402
from costmodels.evaluation import accuracy_by_band  # noqa: E402
from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.fingerprint import Fingerprint  # noqa: E402
from shardopt.measure.calibration import kernel_of  # noqa: E402
from shardopt.measure.collect import read_samples  # noqa: E402

WEIGHTS = ROOT / "costmodels" / "weights"
DATA = ROOT / "costmodels" / "measurements"

SHIPPED = {
    "neural-cpu-zen5": {
        "data": ("cpu-zen5-train", "cpu-zen5-test"), "profile": "cpu-zen5-2core", "backend": "cpu", "hardware": "cpu",
        "fingerprint": Fingerprint(kind="cpu", name="AMD EPYC", vendor="AuthenticAMD", family="26", model="2", cores=2),
        "libraries": {"torch": "2.13.0", "fbgemm-gpu-cpu": "1.8.0"},
    },
    "neural-cpu": {
        "data": ("cpu-train", "cpu-test"), "profile": "cpu-2core", "backend": "cpu", "hardware": "cpu",
        "fingerprint": Fingerprint(kind="cpu", name="AMD EPYC", vendor="AuthenticAMD", cores=2),
        "libraries": {"torch": "2.13.0", "fbgemm-gpu-cpu": "1.8.0"},
    },
    "neural-h200-torch": {
        "data": ("h200-torch-train", "h200-torch-test"), "profile": "h200-torch", "backend": "cuda", "hardware": "h200",
        "fingerprint": Fingerprint(kind="gpu", name="NVIDIA H200", memory_bytes=143771 * 2**20, driver="580.159.04", cuda="13.0"),
        "libraries": {"torch": "2.11.0+cu130"},
    },
}


# name -> the committed calibration folder (card.json, neural.npz, profile.json) it ships from
CALIBRATED = {
    "calibrated-h200-torch": ROOT / "benchmarks/results/gpu-h200-2026-11-26/lease4/campaign/models/campaign-h200",
    # `shardopt calibrate --backend cpu --budget-minutes 15 --for instances/suites/cpu-test --rounds 2` on the 2-core
    # AMD EPYC family 25 model 17 VM, 2026-11-29 (docs/measured.md, "The machine's level"; it replaced the 2026-11-28
    # calibration of "On a third CPU": 6.8 against 16.9 % held-out MAPE on the same day's samples). Its card's anchors
    # (anchors.jsonl.gz, written after the run by machine_level.choose_anchors on its test samples: the 24 its level
    # readings re-timed) let `shardopt costmodel level` read this machine's level onto a copy in the user's store
    "calibrated-cpu-epyc-f25m17": ROOT / "benchmarks/results/calibrate-cpu-2026-11-29/model",
}


def ship_calibration(name: str, folder: Path) -> ModelCard:
    """Copy a calibration's models into the package under `name` and write its card there, marked shipped."""
    import shutil
    from dataclasses import replace

    from costmodels.cards import load_card

    card = load_card(folder / "card.json")
    models = {}
    for kind, rel in card.models.items():
        src = (folder / rel).resolve()
        if kind == "analytic":
            dst, models[kind] = ROOT / "costmodels" / "profiles" / f"{name}.json", f"../profiles/{name}.json"
        else:
            dst, models[kind] = WEIGHTS / f"{name}{src.suffix}", f"{name}{src.suffix}"
        shutil.copyfile(src, dst)
    anchors = ""
    if card.anchors:  # the samples `shardopt costmodel level` re-times (onto a copy in the user's store)
        anchors = f"{name}.anchors.jsonl.gz"
        shutil.copyfile(card.anchors_path(), WEIGHTS / anchors)
    note = f" Shipped from {folder.relative_to(ROOT)} as {name}."
    shipped = replace(card, id=name, models=models, source="shipped", path=None, anchors=anchors,
                      description=card.description + note)
    shipped.save(WEIGHTS / f"{name}.card.json")
    return shipped


def _brief(m: dict) -> dict:
    return {k: m[k] for k in ("n", "mape", "median_ape", "kendall_tau") if k in m}


def main() -> None:
    for name, spec in SHIPPED.items():
        note = json.loads((WEIGHTS / f"{name}.json").read_text())
        train = list(read_samples(DATA / f"{spec['data'][0]}.jsonl.gz", "compute"))
        test = list(read_samples(DATA / f"{spec['data'][1]}.jsonl.gz", "compute"))
        acc = {kind: _brief(accuracy_by_band(get_cost_model(model), test)["all"])
               for kind, model in (("neural", name), ("analytic", f"analytic:{spec['profile']}"))}
        commands = note.get("commands", {})
        card = ModelCard(
            id=name, backend=spec["backend"], hardware=spec["hardware"], fingerprint=spec["fingerprint"],
            kernel=kernel_of(train[0]["judge"]), domain=domain_of_samples(train),
            models={"neural": f"{name}.npz", "analytic": f"../profiles/{spec['profile']}.json"}, preferred="neural",
            date=str(note.get("date", "")), samples={"train": len(train), "test": len(test)}, accuracy=acc,
            command=" ; ".join(str(v) for v in commands.values()) if isinstance(commands, dict) else str(commands),
            libraries=spec["libraries"], description=str(note.get("what", "")), source="shipped",
        )
        path = WEIGHTS / f"{name}.card.json"
        card.save(path)
        print(f"{path.relative_to(ROOT)}: {card.domain.describe()}; neural MAPE {acc['neural']['mape']:.3f}, analytic {acc['analytic']['mape']:.3f}")
    for name, folder in CALIBRATED.items():
        card = ship_calibration(name, folder)
        acc = card.accuracy
        print(f"costmodels/weights/{name}.card.json: {card.domain.describe()}; preferred {card.preferred}; "
              f"neural MAPE {acc['neural']['mape']:.3f}, analytic {acc['analytic']['mape']:.3f}")


if __name__ == "__main__":
    main()
