"""Model cards: what a measured cost model is for, so that nobody uses it where it is wrong without being told.

A model learned from timings predicts one machine's milliseconds, for one kernel, inside the range of workloads it
was trained on (docs/measured.md: `neural-cpu` is 97.5 % off on the next day's CPU, and a model trained on batches
1,024-8,192 was asked about 16,384 without a word). Its card records:

- the hardware fingerprint (shardopt.core.fingerprint) and the hardware profile name an instance uses for that
  machine (`cpu` for this machine's CPU, `h200` for an H200, ...);
- the kernel backend and judge (fbgemm's TBE or the torch fallback) and library versions;
- the training domain (ranges of batch, rows, dims, pooling factor and tables per device);
- the date, the sample counts, device-level and plan-level held-out accuracy, and the command that made it;
- its files (the neural weights, the refitted analytic profile) relative to the card, and which of them to use;
- the machine's speed level (`level`): the ratio of fixed held-out anchor samples timed at the end of the calibration
  (or by `shardopt costmodel level`) to their collected timings, which the neural model's compute predictions are
  multiplied by (shardopt.measure.machine_level).

`--cost-model auto` (costmodels.auto) reads cards to choose; `shardopt costmodel list` prints them. A card that is
missing a field or malformed is a CardError naming the file and the field: exit 2, never a silent default.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardopt.core.errors import UserError
from shardopt.core.fingerprint import Fingerprint, fingerprint_from_dict
from shardopt.core.ir import Instance

CARD_KIND = "shardopt_model_card"
CARD_SUFFIX = ".card.json"
DOMAIN_FIELDS = ("batch_size", "rows", "dim", "pooling_factor", "tables_per_device")
MODEL_KINDS = ("neural", "analytic")
POLICY_ALGOS = ("dreamshard", "autoshard")  # the RL solvers whose policies a card may carry
LEVEL_RANGE = (0.2, 5.0)  # a level outside it is a corrupt card, not a machine


class CardError(UserError, ValueError):
    """A model card that cannot be read or is malformed (a user error: exit 2, the file and field named)."""

    error_kind = "bad_model_card"


@dataclass(frozen=True)
class Domain:
    """The ranges the training samples covered, each (low, high), inclusive."""

    batch_size: tuple[float, float]
    rows: tuple[float, float]
    dim: tuple[float, float]
    pooling_factor: tuple[float, float]
    tables_per_device: tuple[float, float]

    def outside(self, instance: Instance) -> list[str]:
        """Why `instance` lies outside the domain (empty: inside). Tables per device is the instance's mean
        (tables / devices, rounded up): a plan may load one device more, which the model then extrapolates. Rows
        count above the trained range only: collection floors augmented tables at 100 rows, and a smaller table is
        priced as the smallest one seen (its features are clamped to the training range), a small error on a cheap
        table; a larger one is the expensive kind the model never saw."""
        reasons: list[str] = []
        batch = instance.workload.batch_size
        if not self.batch_size[0] <= batch <= self.batch_size[1]:
            reasons.append(f"batch {batch:,} outside the trained {_span(self.batch_size)}")
        checks = (("rows", "rows", lambda t: t.rows), ("dim", "dims", lambda t: t.dim),
                  ("pooling_factor", "pooling factors", lambda t: t.pooling_factor))
        for attr, label, get in checks:
            lo, hi = getattr(self, attr)
            floor = 0 if attr == "rows" else lo
            values = [get(t) for t in instance.tables]
            out = [v for v in values if not floor <= v <= hi]
            if out:
                reasons.append(f"{len(out)} of {len(values)} tables have {label} outside the trained {_span((lo, hi))} "
                               f"(e.g. {_num(max(out, key=lambda v: abs(math.log((v + 1e-9) / ((lo + hi) / 2 + 1e-9)))))})")
        per_device = math.ceil(len(instance.tables) / instance.topology.num_devices)
        if per_device > self.tables_per_device[1]:
            reasons.append(f"{per_device} tables per device (mean) above the trained {_span(self.tables_per_device)}")
        return reasons

    def to_dict(self) -> dict[str, list[float]]:
        return {k: [_plain(v) for v in getattr(self, k)] for k in DOMAIN_FIELDS}

    def describe(self) -> str:
        return (f"batch {_span(self.batch_size)}, rows {_span(self.rows)}, dims {_span(self.dim)}, "
                f"pooling {_span(self.pooling_factor)}, {_span(self.tables_per_device)} tables per device")


def _plain(v: float) -> float | int:
    return int(v) if float(v).is_integer() else float(v)


def _num(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:.3g}"


def _span(r: tuple[float, float]) -> str:
    return _num(r[0]) if r[0] == r[1] else f"{_num(r[0])}-{_num(r[1])}"


def domain_of_samples(samples: list[dict[str, Any]]) -> Domain:
    """The domain covered by compute samples (`shardopt costmodel collect`'s lines). ValueError without any."""
    compute = [s for s in samples if s.get("kind") == "compute"]
    if not compute:
        raise ValueError("no compute samples: a domain needs at least one")
    tables = [t for s in compute for t in s["tables"]]
    batches = [s["batch_size"] for s in compute]
    counts = [len(s["tables"]) for s in compute]

    def span(values: list[float]) -> tuple[float, float]:
        return (min(values), max(values))

    return Domain(batch_size=span(batches), rows=span([t["rows"] for t in tables]), dim=span([t["dim"] for t in tables]),
                  pooling_factor=span([t["pooling_factor"] for t in tables]), tables_per_device=span(counts))


@dataclass(frozen=True)
class ModelCard:
    """One calibrated (measured) cost model and what it is for. `path` is the card's own file: model files are
    relative to its folder."""

    id: str
    backend: str  # cpu | cuda: the judge whose timings it learned
    hardware: str  # the hardware profile name instances use for that machine (cpu, h200, ...)
    fingerprint: Fingerprint
    kernel: str  # the judge's kernel label (fbgemm TBE or the torch fallback)
    domain: Domain
    models: dict[str, str]  # kind (neural / analytic) -> file, relative to the card
    preferred: str  # which of `models` a name or `auto` resolves to
    date: str
    samples: dict[str, int]
    accuracy: dict[str, Any]  # per model kind: held-out device-level figures; "plan_level": the loop's, or absent
    command: str
    libraries: dict[str, str] = field(default_factory=dict)
    description: str = ""
    source: str = "user"  # "shipped" (in the package) or "user" (the model store)
    path: Path | None = None
    # algorithm (dreamshard / autoshard) -> policy file, relative to the card: trained on the preferred model
    # (`calibrate --with-policies`); the RL solvers searching with this model use it
    policies: dict[str, str] = field(default_factory=dict)
    # the machine's speed level against the samples: {"factor", "date", "anchors", "spread", "command"}; the neural
    # model's compute predictions are multiplied by `factor` (absent: 1)
    level: dict[str, Any] = field(default_factory=dict)
    anchors: str = ""  # the samples a level is read on (shardopt.measure.machine_level), relative to the card; "" = none

    def anchors_path(self) -> Path | None:
        if not self.anchors:
            return None
        base = self.path.parent if self.path is not None else Path(".")
        return (base / self.anchors).resolve()

    @property
    def level_factor(self) -> float:
        return float(self.level.get("factor", 1.0))

    def model_path(self, kind: str | None = None) -> Path:
        kind = kind or self.preferred
        if kind not in self.models:
            raise CardError(f"{self.path}: models: the card has no {kind!r} model (it has {', '.join(self.models)})")
        base = self.path.parent if self.path is not None else Path(".")
        return (base / self.models[kind]).resolve()

    def policy_path(self, algo: str) -> Path | None:
        """The policy trained for `algo` on this card's preferred model, or None."""
        rel = self.policies.get(algo)
        if rel is None:
            return None
        base = self.path.parent if self.path is not None else Path(".")
        return (base / rel).resolve()

    def cost_model_name(self, kind: str | None = None) -> str:
        """The registry name of one of its models (costmodels.registry.get_cost_model understands it)."""
        kind = kind or self.preferred
        p = self.model_path(kind)
        return f"analytic:{p}" if kind == "analytic" else str(p)

    @property
    def is_kernel_fallback(self) -> bool:
        return "fbgemm" not in self.kernel.split(";")[0].lower()

    @property
    def kernel_short(self) -> str:
        """fbgemm TBE or the torch fallback, in a few words (tables of models)."""
        return "torch fallback" if self.is_kernel_fallback else "fbgemm TBE"

    def device_accuracy(self, kind: str | None = None) -> dict[str, Any] | None:
        return self.accuracy.get(kind or self.preferred)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": CARD_KIND, "schema_version": 1, "id": self.id, "description": self.description,
            "backend": self.backend, "hardware": self.hardware, "fingerprint": self.fingerprint.to_dict(),
            "kernel": self.kernel, "libraries": self.libraries, "domain": self.domain.to_dict(), "models": self.models,
            "preferred": self.preferred, "date": self.date, "samples": self.samples, "accuracy": self.accuracy,
            "command": self.command, **({"policies": self.policies} if self.policies else {}),
            **({"level": self.level} if self.level else {}),
            **({"anchors": self.anchors} if self.anchors else {}),
        }

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(path)


def card_from_dict(data: Any, path: Path | None = None, source: str = "user") -> ModelCard:
    """A card from its JSON document; CardError naming the file and the field for anything malformed."""
    where = str(path) if path is not None else "card"

    def bad(fieldname: str, why: str) -> CardError:
        return CardError(f"{where}: {fieldname}: {why}")

    if not isinstance(data, dict) or data.get("kind") != CARD_KIND:
        raise CardError(f"{where}: not a model card (expected a JSON object with kind {CARD_KIND!r})")

    def text(name: str) -> str:
        v = data.get(name)
        if not isinstance(v, str) or not v:
            raise bad(name, f"{v!r} is not a non-empty string" if name in data else "required field is missing")
        return v

    backend = text("backend")
    if backend not in ("cpu", "cuda"):
        raise bad("backend", f"{backend!r} is not cpu or cuda")
    hardware = text("hardware")
    from shardopt.core.hardware import PROFILES

    if hardware not in PROFILES:
        raise bad("hardware", f"{hardware!r} is not a known hardware profile (known: {', '.join(sorted(PROFILES))})")
    try:
        fp = fingerprint_from_dict(data.get("fingerprint"), "fingerprint")
    except ValueError as exc:
        raise CardError(f"{where}: {exc}") from None
    dom = data.get("domain")
    if not isinstance(dom, dict):
        raise bad("domain", "required object is missing" if dom is None else f"{dom!r} is not an object")
    spans: dict[str, tuple[float, float]] = {}
    for k in DOMAIN_FIELDS:
        v = dom.get(k)
        if (not isinstance(v, list) or len(v) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in v)
                or v[0] > v[1] or v[0] < 0):
            raise bad(f"domain.{k}", f"{v!r} is not a [low, high] pair of numbers")
        spans[k] = (v[0], v[1])
    models = data.get("models")
    if not isinstance(models, dict) or not models or any(k not in MODEL_KINDS or not isinstance(v, str) for k, v in models.items()):
        raise bad("models", f"{models!r} is not an object of {' / '.join(MODEL_KINDS)} -> file")
    preferred = data.get("preferred", "neural" if "neural" in models else "analytic")
    if preferred not in models:
        raise bad("preferred", f"{preferred!r} is not one of its models ({', '.join(models)})")
    samples = data.get("samples", {})
    if not isinstance(samples, dict) or any(isinstance(v, bool) or not isinstance(v, int) for v in samples.values()):
        raise bad("samples", f"{samples!r} is not an object of counts")
    accuracy = data.get("accuracy", {})
    if not isinstance(accuracy, dict):
        raise bad("accuracy", f"{accuracy!r} is not an object")
    libraries = data.get("libraries", {})
    if not isinstance(libraries, dict):
        raise bad("libraries", f"{libraries!r} is not an object")
    policies = data.get("policies", {})
    if not isinstance(policies, dict) or any(k not in POLICY_ALGOS or not isinstance(v, str) for k, v in policies.items()):
        raise bad("policies", f"{policies!r} is not an object of {' / '.join(POLICY_ALGOS)} -> file")
    level = data.get("level", {})
    factor = level.get("factor") if isinstance(level, dict) else None
    if not isinstance(level, dict) or (level and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                                                  or not LEVEL_RANGE[0] <= factor <= LEVEL_RANGE[1])):
        raise bad("level", f"{level!r} is not an object with a factor in [{LEVEL_RANGE[0]:g}, {LEVEL_RANGE[1]:g}]")
    anchors = data.get("anchors", "")
    if not isinstance(anchors, str):
        raise bad("anchors", f"{anchors!r} is not a file name")
    card = ModelCard(
        id=text("id"), backend=backend, hardware=hardware, fingerprint=fp, kernel=text("kernel"), domain=Domain(**spans),
        models=dict(models), preferred=preferred, date=text("date"), samples=dict(samples), accuracy=dict(accuracy),
        command=str(data.get("command", "")), libraries={str(k): str(v) for k, v in libraries.items()},
        description=str(data.get("description", "")), source=source, path=path, policies=dict(policies),
        level=dict(level), anchors=anchors,
    )
    if path is not None:
        for kind in card.models:
            if not card.model_path(kind).is_file():
                raise bad(f"models.{kind}", f"{card.models[kind]!r}: no such file beside the card")
        if card.anchors and not card.anchors_path().is_file():
            raise bad("anchors", f"{card.anchors!r}: no such file beside the card")
        for algo in card.policies:
            if not card.policy_path(algo).is_file():
                raise bad(f"policies.{algo}", f"{card.policies[algo]!r}: no such file beside the card")
    return card


def load_card(path: Path, source: str = "user") -> ModelCard:
    """The card in `path`; CardError naming the file (missing, unreadable, not JSON, malformed)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CardError(f"{path}: no such model card") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CardError(f"{path}: cannot read the model card ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CardError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    return card_from_dict(data, path, source)
