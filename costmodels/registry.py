"""Cost models by name: `--cost-model analytic` (the topology's profile), `analytic:h100` (a fixed profile) or
`analytic:PROFILE.json` (a profile file, e.g. from `shardopt calibrate`), `analytic:cpu-2core` (a calibrated profile
shipped in costmodels/profiles/), `neural` (the shipped neural model of the analytic v100 judge), `neural-cpu` (a
shipped model by name, costmodels/weights/) or `MODEL.npz` (weights from `shardopt costmodel train`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from costmodels.base import CostModel
from shardopt.core.errors import UserError

DEFAULT_COST_MODEL = "analytic"
PROFILE_DIR = Path(__file__).resolve().parent / "profiles"  # shipped calibrated profiles: analytic:NAME
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"  # shipped neural models: NAME (e.g. neural-cpu)


class UnknownCostModelError(UserError, KeyError):
    error_kind = "unknown_cost_model"

    def __init__(self, name: str, why: str = ""):
        self.name = name
        super().__init__(why or f"unknown cost model {name!r} (known: {', '.join(cost_model_names())})")

    def __str__(self) -> str:
        return self.args[0]


def cost_model_names() -> list[str]:
    """The names `get_cost_model` knows (store ids aside: `shardopt costmodel list` shows those)."""
    from shardopt.core.hardware import PROFILES

    shipped_profiles = sorted(p.stem for p in PROFILE_DIR.glob("*.json"))
    shipped_models = sorted(p.stem for p in WEIGHTS_DIR.glob("*.npz") if p.stem != "neural-v100")
    return (["analytic"] + [f"analytic:{p}" for p in sorted(PROFILES)] + [f"analytic:{p}" for p in shipped_profiles]
            + ["neural"] + shipped_models + ["MODEL.npz", "auto", "a store id (shardopt costmodel list)"])


def get_cost_model(name: str = DEFAULT_COST_MODEL, models_dir: Path | str | None = None) -> CostModel:
    from costmodels.analytic import AnalyticCostModel

    if name == "auto":
        raise UnknownCostModelError(name, "cost model 'auto' is chosen per instance (costmodels.auto.choose_cost_model)")
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
    if name != "neural" and not name.endswith(".npz"):  # a card's id (shipped or in the store): its preferred model
        card, kind = _store_card(name, models_dir)
        if card is not None:
            return get_cost_model(card.cost_model_name(kind))
    if name == "neural" or name.endswith(".npz") or (WEIGHTS_DIR / f"{name}.npz").is_file():
        from costmodels.neural import NeuralCostModel

        path = None if name == "neural" else (name if name.endswith(".npz") else str(WEIGHTS_DIR / f"{name}.npz"))
        try:
            model = NeuralCostModel(path)
        except ValueError as exc:
            raise UnknownCostModelError(name, f"cost model {name!r}: {exc}") from None
        if path is not None:  # a calibrated model predicts at the machine level its card last read
            from costmodels.store import card_beside

            card = card_beside(Path(path))
            if card is not None:
                model.compute_scale = card.level_factor
        return model
    raise UnknownCostModelError(name)


def _store_card(name: str, models_dir: Path | str | None) -> tuple[Any, str | None]:
    """The card a store id names (`ID`, `ID/neural`, `ID/analytic`) and the model kind asked, or (None, None)."""
    from costmodels.store import find_card

    base, sep, kind = name.partition("/")
    if sep and kind not in ("neural", "analytic"):
        return None, None
    card = find_card(base, models_dir)
    if card is None or (sep and kind not in card.models):
        return None, None
    return card, (kind if sep else None)


def card_of(name: str, models_dir: Path | str | None = None) -> Any:
    """The model card behind a cost-model name, or None (the data-sheet analytic models and uncarded files have
    none): a store or shipped id, a shipped model's name, or a file a card lists."""
    from costmodels.store import card_beside

    if name == "analytic" or name == "neural":
        return None
    if name.startswith("analytic:"):
        ref = name.split(":", 1)[1]
        path = Path(ref) if ref.endswith(".json") else PROFILE_DIR / f"{ref}.json"
        return card_beside(path) if path.is_file() else None
    card, _ = _store_card(name, models_dir)
    if card is not None:
        return card
    path = Path(name) if name.endswith(".npz") else WEIGHTS_DIR / f"{name}.npz"
    return card_beside(path) if path.is_file() else None
