"""Where calibrated cost models live: the shipped ones in the package, the user's in a store of their own.

The user store is `--models DIR`, else the environment variable SHARDOPT_MODELS, else the user's cache directory
(`$XDG_CACHE_HOME/shardopt/models`, by default `~/.cache/shardopt/models`): one folder per model, holding its
`card.json` (costmodels.cards) beside the model files. `shardopt calibrate` writes there; `shardopt costmodel list`
and `--cost-model auto` read there and from the shipped cards (`costmodels/weights/NAME.card.json`).

Store ids are unique: a user model may not take a shipped model's name (`register` refuses), so a name always means
one model.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from costmodels.cards import CARD_SUFFIX, CardError, ModelCard, load_card

MODELS_ENV = "SHARDOPT_MODELS"
SHIPPED_DIR = Path(__file__).resolve().parent / "weights"
CARD_FILE = "card.json"


def user_store_dir(models_dir: Path | str | None = None) -> Path:
    """The user store's folder (it need not exist yet)."""
    if models_dir is not None:
        return Path(models_dir).expanduser()
    env = os.environ.get(MODELS_ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "shardopt" / "models"


def shipped_cards() -> list[ModelCard]:
    return [load_card(p, source="shipped") for p in sorted(SHIPPED_DIR.glob(f"*{CARD_SUFFIX}"))]


def user_cards(models_dir: Path | str | None = None) -> list[ModelCard]:
    """Every card of the user store; CardError naming the first file that is corrupt (a store with a bad card is
    refused rather than half-read: `auto` must not quietly skip the model the user calibrated). A model folder
    without a card (a calibration still running or killed before it registered) is not a model yet and is skipped."""
    root = user_store_dir(models_dir)
    if not root.is_dir():
        return []
    cards = []
    for sub in sorted(root.iterdir()):
        if sub.is_dir() and not sub.name.startswith(".") and (sub / CARD_FILE).exists():
            cards.append(load_card(sub / CARD_FILE, source="user"))
    return cards


def all_cards(models_dir: Path | str | None = None) -> list[ModelCard]:
    return shipped_cards() + user_cards(models_dir)


def find_card(name: str, models_dir: Path | str | None = None) -> ModelCard | None:
    """The card with this id (shipped first), or None."""
    for card in all_cards(models_dir):
        if card.id == name:
            return card
    return None


def card_beside(model_file: Path) -> ModelCard | None:
    """The card of a model file named by path: `NAME.card.json` beside `NAME.npz`, the `card.json` of the store
    folder it sits in, or a shipped card, when that card lists the file. None when the file has no card."""
    model_file = model_file.resolve()
    sibling = model_file.with_name(model_file.stem + CARD_SUFFIX)
    candidates = [sibling, model_file.parent / CARD_FILE]
    cards = [load_card(p, source="shipped" if p.parent == SHIPPED_DIR else "user") for p in candidates if p.is_file()]
    for card in cards + shipped_cards():  # a shipped card may list a file elsewhere in the package (a profile)
        if any(card.model_path(kind) == model_file for kind in card.models):
            return card
    return None


def register(card: ModelCard, folder: Path, models_dir: Path | str | None = None) -> ModelCard:
    """Move a finished model folder (its files and card) into the user store under the card's id; the card as stored.
    CardError when the id is a shipped model's or already taken in the store."""
    if any(c.id == card.id for c in shipped_cards()):
        raise CardError(f"model id {card.id!r} is a shipped model's name: choose another")
    root = user_store_dir(models_dir)
    dest = root / card.id
    if dest.exists():
        raise CardError(f"{dest}: a model with id {card.id!r} is already in the store")
    root.mkdir(parents=True, exist_ok=True)
    card.save(folder / CARD_FILE)
    shutil.move(str(folder), str(dest))
    return load_card(dest / CARD_FILE)


def card_of_model(model: Any) -> ModelCard | None:
    """The card behind a cost-model object (a neural model's weights file, or an analytic model built from a profile
    file a card lists), or None: what lets a solver use what the card carries (its policies) for that model."""
    path = getattr(model, "path", None)
    name = str(getattr(model, "name", ""))
    if path is None and name.startswith("analytic:") and name.endswith(".json"):
        path = name.split(":", 1)[1]
    if path is None:
        return None
    try:
        return card_beside(Path(path))
    except CardError:
        return None
