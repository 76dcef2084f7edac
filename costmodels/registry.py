"""Cost models by name: `--cost-model analytic` (the topology's profile), `analytic:h100` (a fixed profile) or
`analytic:PROFILE.json` (a profile file, e.g. from `shardopt calibrate`), `analytic:cpu-2core` (a calibrated profile
shipped in costmodels/profiles/), `neural` (the shipped neural model of the analytic v100 judge), `neural-cpu` (a
shipped model by name, costmodels/weights/) or `MODEL.npz` (weights from `shardopt costmodel train`)."""

from __future__ import annotations

from pathlib import Path

from costmodels.base import CostModel

DEFAULT_COST_MODEL = "analytic"
PROFILE_DIR = Path(__file__).resolve().parent / "profiles"  # shipped calibrated profiles: analytic:NAME
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"  # shipped neural models: NAME (e.g. neural-cpu)


class UnknownCostModelError(KeyError):
    def __init__(self, name: str, why: str = ""):
        self.name = name
        super().__init__(why or f"unknown cost model {name!r} (known: {', '.join(cost_model_names())})")

    def __str__(self) -> str:
        return self.args[0]


def cost_model_names() -> list[str]:
    from shardopt.core.hardware import PROFILES

    shipped_profiles = sorted(p.stem for p in PROFILE_DIR.glob("*.json"))
    shipped_models = sorted(p.stem for p in WEIGHTS_DIR.glob("*.npz") if p.stem != "neural-v100")
    return (["analytic"] + [f"analytic:{p}" for p in sorted(PROFILES)] + [f"analytic:{p}" for p in shipped_profiles]
            + ["neural"] + shipped_models + ["MODEL.npz"])


def get_cost_model(name: str = DEFAULT_COST_MODEL) -> CostModel:
    from costmodels.analytic import AnalyticCostModel

    if name == "analytic":
        return AnalyticCostModel()
    if name.startswith("analytic:"):
        profile = name.split(":", 1)[1]
        shipped = PROFILE_DIR / f"{profile}.json"
        if not profile.endswith(".json") and shipped.is_file():  # a shipped calibrated profile by name
            profile = str(shipped)
        try:
            return AnalyticCostModel(profile)
        except (KeyError, ValueError) as exc:
            raise UnknownCostModelError(name, f"cost model {name!r}: {exc.args[0]}") from None
    if name == "neural" or name.endswith(".npz") or (WEIGHTS_DIR / f"{name}.npz").is_file():
        from costmodels.neural import NeuralCostModel

        path = None if name == "neural" else (name if name.endswith(".npz") else str(WEIGHTS_DIR / f"{name}.npz"))
        try:
            return NeuralCostModel(path)
        except ValueError as exc:
            raise UnknownCostModelError(name, f"cost model {name!r}: {exc}") from None
    raise UnknownCostModelError(name)
