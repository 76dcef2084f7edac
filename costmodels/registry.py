"""Cost models by name: `--cost-model analytic` (the topology's profile), `analytic:h100` (a fixed profile) or
`analytic:PROFILE.json` (a profile file, e.g. from `shardopt calibrate`), `neural` (the shipped neural model) or
`MODEL.npz` (weights from `shardopt costmodel train`)."""

from __future__ import annotations

from costmodels.base import CostModel

DEFAULT_COST_MODEL = "analytic"


class UnknownCostModelError(KeyError):
    def __init__(self, name: str, why: str = ""):
        self.name = name
        super().__init__(why or f"unknown cost model {name!r} (known: {', '.join(cost_model_names())})")

    def __str__(self) -> str:
        return self.args[0]


def cost_model_names() -> list[str]:
    from shardopt.core.hardware import PROFILES

    return ["analytic"] + [f"analytic:{p}" for p in sorted(PROFILES)] + ["neural", "MODEL.npz"]


def get_cost_model(name: str = DEFAULT_COST_MODEL) -> CostModel:
    from costmodels.analytic import AnalyticCostModel

    if name == "analytic":
        return AnalyticCostModel()
    if name.startswith("analytic:"):
        profile = name.split(":", 1)[1]
        try:
            return AnalyticCostModel(profile)
        except (KeyError, ValueError) as exc:
            raise UnknownCostModelError(name, f"cost model {name!r}: {exc.args[0]}") from None
    if name == "neural" or name.endswith(".npz"):
        from costmodels.neural import NeuralCostModel

        try:
            return NeuralCostModel(None if name == "neural" else name)
        except ValueError as exc:
            raise UnknownCostModelError(name, f"cost model {name!r}: {exc}") from None
    raise UnknownCostModelError(name)
