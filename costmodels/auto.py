"""`--cost-model auto`: plan with the model measured on the hardware the instance names, or say why not.

An instance names its hardware by profile (`topology.hardware`): `h200` for H200 GPUs, `cpu` for this machine's CPU
(the cpu judge). `auto` takes the calibrated models (costmodels.cards) made for that profile - for `cpu`, only
those whose card's CPU fingerprint is this machine's, since a CPU model predicts its own CPU's milliseconds; for a GPU
the card's GPU must be the profile's (the plan may be made on another machine than the cluster) - and among those
whose training domain covers the instance, the one timed with fbgemm's kernel before a torch-fallback one, a user's
before a shipped one, then the newest. Where none qualifies it uses the analytic model and returns one line naming
the reason and `shardopt calibrate`.

A model named explicitly is used as asked; when its card says it was measured on other hardware, or the instance
lies outside its domain, the choice carries a warning naming both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from costmodels.base import CostModel
from costmodels.cards import ModelCard
from shardopt.core.fingerprint import Fingerprint, cpu_fingerprint
from shardopt.core.ir import Instance

AUTO = "auto"


@dataclass
class CostModelChoice:
    """The model a command searches (or judges) with, how it was chosen, and what the user must be told."""

    asked: str  # "auto" or the name the user gave
    name: str  # the registry name in use
    model: CostModel
    card: ModelCard | None = None
    notice: str | None = None  # auto fell back to the analytic model: why
    warnings: list[str] = field(default_factory=list)

    @property
    def card_id(self) -> str | None:
        return self.card.id if self.card is not None else None

    def to_dict(self) -> dict[str, object]:
        return {"asked": self.asked, "name": self.name, "card": self.card_id, "notice": self.notice, "warnings": self.warnings}


def hardware_mismatch(card: ModelCard, instance: Instance, machine: Fingerprint | None = None) -> str | None:
    """Why `card`'s model is not for `instance`'s hardware (None when it is)."""
    hw = instance.topology.hardware
    if card.hardware != hw:
        return f"{card.id} was measured on {card.fingerprint.describe()} (hardware {card.hardware!r}); the instance names {hw!r}"
    if card.backend == "cpu":
        machine = machine or cpu_fingerprint()
        if not card.fingerprint.matches(machine):
            return f"{card.id} was measured on another CPU ({card.fingerprint.describe()}); this machine: {machine.describe()}"
    return None


def use_warnings(card: ModelCard, instance: Instance, machine: Fingerprint | None = None) -> list[str]:
    """What to tell a user who named `card`'s model for `instance`: other hardware, outside the domain."""
    out = []
    why = hardware_mismatch(card, instance, machine)
    if why:
        out.append(why + ": its milliseconds are that machine's")
    outside = card.domain.outside(instance)
    if outside:
        out.append(f"the instance lies outside {card.id}'s training domain ({card.domain.describe()}): " + "; ".join(outside))
    return out


def _rank(card: ModelCard) -> tuple[int, int, str]:
    return (0 if card.is_kernel_fallback else 1, 1 if card.source == "user" else 0, card.date)


def _topology_outside(card: ModelCard, instance: Instance) -> list[str]:
    """A neural model's communication features know NVLink in a host and the network between hosts only; a model
    calibrated on one hardware kind does not price a job that mixes kinds."""
    topo = instance.topology
    out = []
    if card.preferred == "neural" and topo.lists_network:
        out.append("the topology lists its network (topology.levels or topology.graph), and the neural model knows a host's NVLink "
                   "and the network only")
    if topo.is_mixed:
        out.append(f"the job mixes hardware kinds ({', '.join(dict.fromkeys(topo.hardware_kinds()))}), and the model is of "
                   f"{card.hardware} only")
    return out


def choose_auto(instance: Instance, cards: list[ModelCard], machine: Fingerprint | None = None) -> tuple[ModelCard | None, str | None]:
    """The card `auto` uses for `instance`, or None and the reason (one line, naming `shardopt calibrate`)."""
    hw = instance.topology.hardware
    mismatch = {c.id: hardware_mismatch(c, instance, machine) for c in cards if c.hardware == hw}
    mine = [c for c in cards if c.id in mismatch and mismatch[c.id] is None]
    outside = {c.id: c.domain.outside(instance) + _topology_outside(c, instance) for c in mine}
    covering = [c for c in mine if not outside[c.id]]
    if covering:
        return max(covering, key=_rank), None
    if not mismatch:
        reason = f"no calibrated model for hardware {hw!r}"
    elif not mine:
        reason = "; ".join(list(mismatch.values())[:3])  # (all str here: no card matched)
    else:
        c = max(mine, key=_rank)
        reason = f"{c.id} does not cover this instance: " + "; ".join(outside[c.id])
    backend = "cpu" if hw == "cpu" else "cuda"
    kinds = " + ".join(dict.fromkeys(instance.topology.hardware_kinds()))
    profiles = f"{kinds} profiles, each device its own kind's" if instance.topology.is_mixed else f"{hw} profile"
    return None, (f"auto: {reason}; planning with the analytic model ({profiles}). "
                  f"`shardopt calibrate --backend {backend} --for INSTANCE` learns this hardware")


def choose_cost_model(asked: str | None, instance: Instance, models_dir: Path | str | None = None,
                      machine: Fingerprint | None = None) -> CostModelChoice:
    """The cost model for `instance`: `auto` (None means auto) or a name (costmodels.registry)."""
    from costmodels.registry import card_of, get_cost_model
    from costmodels.store import all_cards

    asked = asked or AUTO
    if asked == AUTO:
        card, notice = choose_auto(instance, all_cards(models_dir), machine)
        if card is None:
            return CostModelChoice(asked, "analytic", get_cost_model("analytic"), notice=notice)
        kind = card.preferred
        if kind == "neural" and instance.topology.has_host_memory and "analytic" in card.models:
            # the neural model has no host-memory tier (costmodels.neural): the card's refitted profile prices UVM
            kind = "analytic"
            notice = (f"auto: the instance has host memory, which {card.id}'s neural model cannot price: planning with its "
                      "refitted analytic profile")
        name = card.cost_model_name(kind)
        return CostModelChoice(asked, name, get_cost_model(name), card=card, notice=notice)
    model = get_cost_model(asked, models_dir=models_dir)
    card = card_of(asked, models_dir)
    return CostModelChoice(asked, asked, model, card=card, warnings=use_warnings(card, instance, machine) if card else [])


def model_for(name: str, instance: Instance, models_dir: Path | str | None = None) -> CostModel:
    """The model `name` means for `instance` (`auto` chosen for it, quietly: batch runs record the name asked)."""
    return choose_cost_model(name, instance, models_dir).model


def check_cost_model_name(name: str, models_dir: Path | str | None = None) -> None:
    """UnknownCostModelError for a name no instance could resolve (`auto` always resolves)."""
    from costmodels.registry import get_cost_model

    if name != AUTO:
        get_cost_model(name, models_dir=models_dir)
