"""`shardopt calibrate --backend cpu|cuda`: from nothing to a cost model of this machine, in one command.

The plan a solver finds is only as fast as the cost model it searched with is right (docs/measured.md: 12-40 % on
three CPUs and an H200), and the shipped default is a data-sheet model that is 95 % off on every machine measured so
far. Learning one's own hardware was a five-command recipe; this is that recipe as one resumable pipeline:

1. collect device samples on the judge (`costmodel collect`): the TRAIN pool's tables for training, the disjoint TEST
   pool's for the held-out judgement, each time-boxed within the budget, and the all-to-all samples the judge models
   (the analytic model at the instance's profile; the cpu and single-GPU judges model it too);
2. train the neural model on them (`costmodel train`, epochs fitted to the time left);
3. refit the analytic profile's constants to the same samples (`calibrate DATA.jsonl`);
4. judge both, the data-sheet model and every other model of this backend and hardware on the held-out samples, by
   device-cost band;
5. read the machine's speed level on held-out anchor samples (shardopt.measure.machine_level; with the loop, before
   each round's plans, the devices of which are kept at the samples' level) and register the result with its card
   (costmodels.cards: the level on it) in the user store, where `--cost-model auto` finds it.

The timing settings are the judge's own (`evaluate_plan`: repeats, warm-ups, one pinned thread on the CPU). Every
stage writes into a work folder keyed by the settings and the machine's fingerprint, and stamps itself when done: a
killed calibration, run again with the same command, resumes where it stopped (collection skips the sample ids
already written, so nothing is timed twice and nothing is duplicated).

`--for SUITE|INSTANCE` samples the domain of the instances the user will solve: their batches, rows and tables per
device (the pools' tables, rows capped at the instances' largest), and their hardware profile.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import json
import math
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from costmodels.cards import ModelCard, domain_of_samples
from shardopt.core.errors import UserError
from shardopt.core.fingerprint import Fingerprint
from shardopt.core.ir import Instance
from shardopt.measure.backends.base import kernel_label
from shardopt.measure.machine_level import ANCHORS_FILE, LevelReading, at_level, choose_anchors, write_anchors
from shardopt.measure.machine_level import read_level as read_machine_level

# the recipes behind the shipped measured models (costmodels/weights/*.json): the domain a calibration samples
# without --for
DEFAULT_DOMAIN = {
    # the cpu family's batches (powers of two, 256-16,384, mostly 1,024-16,384) and its row cap
    "cpu": {"batch_choices": (1024, 2048, 4096, 8192, 16384), "max_rows": 50_000, "max_tables": 10},
    "cuda": {"batch_choices": (4096, 8192, 16384, 32768), "max_rows": 100_000, "max_tables": 20},
}
# the share of the budget by which each stage ends: the train and test collections, the first training, the loop's
# rounds (the rest: the refit, the judgement, the registration)
PLAIN_SHARES = {"train": 0.6, "test": 0.75, "train_end": 0.95, "loop_end": 0.95}
LOOP_SHARES = {"train": 0.35, "test": 0.45, "train_end": 0.55, "loop_end": 0.95}
# `--with-policies`: the stages above end by this fraction of their shares, and the RL policies are trained on the
# calibrated model in the rest (split between the algorithms)
POLICY_SHARE = 0.25
# the proposed devices' weight in retraining: repeated until they are about this share of the random samples (they
# are few - a few hundred against thousands - and they are where the search goes), at most LOOP_MAX_WEIGHT times
LOOP_SHARE_OF_TRAIN = 0.25
LOOP_MAX_WEIGHT = 5
# training cost per (sample x epoch), seconds, both networks, measured on the 2-core VM (41 s for 2,500 compute +
# 3,000 comm samples x 150 epochs): what the epoch count is fitted to when the budget is short
TRAIN_S_PER_SAMPLE_EPOCH = 5e-5
MIN_EPOCHS = 10
MAX_BATCH_CHOICES = 7
WORK_DIR = ".work"


class CalibrationError(UserError, ValueError):
    """A calibration request that cannot be met (a user error: exit 2)."""

    error_kind = "bad_calibration_request"


@dataclass(frozen=True)
class CalibrationSettings:
    """What to sample and how to train: with the machine's fingerprint, it names the work folder (resumable)."""

    backend: str  # cpu | cuda
    hardware: str  # the hardware profile instances name for this machine (cpu, h200, ...)
    batch_choices: tuple[int, ...]
    max_rows: int
    max_tables: int
    memory_cap: int | None = None  # bytes per device sample (None: the profile's memory)
    train_samples: int = 6000  # at most: collection stops at its time box
    test_samples: int = 1000
    comm_samples: int = 2000
    repeats: int = 5
    warmup: int = 2
    epochs: int = 150  # at most: fewer when the budget is short
    learning_rate: float = 1e-3
    batch_size: int = 128
    seed: int = 0
    # the compute network's loss on log ms: "absolute" fits the median, which a sample timed in one of the machine's
    # slow spells (up to 30 % above, never below) does not pull up as the squared loss's mean is (the 2026-11-28
    # calibration's data: plan devices 10.1 -> 8.3 % and 14.2 -> 11.7 % MAPE, held-out samples 13.5 -> 13.4 %)
    loss: str = "absolute"

    def key(self, fingerprint: Fingerprint) -> str:
        doc = json.dumps({"settings": asdict(self), "machine": list(map(str, fingerprint.key()))}, sort_keys=True)
        return hashlib.sha256(doc.encode()).hexdigest()[:12]


def domain_settings(backend: str, hardware: str, targets: Sequence[Instance] = (), **overrides: Any) -> CalibrationSettings:
    """The settings that sample `targets`' domain - their batches, rows, tables per device and device memory -
    widened to the backend's default domain (so that the model also covers instances like them: unseen instances of
    the same family came with batches the suite did not have), or the default domain alone without targets.
    CalibrationError when the targets do not name `hardware`."""
    if backend not in DEFAULT_DOMAIN:
        raise CalibrationError(f"--backend: {backend!r} is not cpu or cuda (a calibration measures; sim has nothing to learn)")
    base = dict(DEFAULT_DOMAIN[backend])
    if targets:
        mixed = next((t for t in targets if t.topology.is_mixed), None)
        if mixed is not None:
            raise CalibrationError(
                f"--for: {mixed.name or 'an instance'} mixes hardware kinds ({', '.join(dict.fromkeys(mixed.topology.hardware_kinds()))}; "
                "topology.device_hardware): a model calibrated on this machine is of one kind; calibrate for instances of "
                "this machine's kind (shardopt scale --hardware makes one)")
        named = sorted({t.topology.hardware for t in targets})
        if named != [hardware]:
            raise CalibrationError(
                f"--for: the instances name hardware {', '.join(map(repr, named))}, but a model calibrated on this machine "
                f"({backend}) is for hardware {hardware!r}: set their topology.hardware to {hardware!r} (or calibrate where they run)")
        batches = sorted({t.workload.batch_size for t in targets} | set(base["batch_choices"]))
        if len(batches) > MAX_BATCH_CHOICES:  # the extremes and evenly spaced ones between (the domain is their span)
            idx = sorted({round(i * (len(batches) - 1) / (MAX_BATCH_CHOICES - 1)) for i in range(MAX_BATCH_CHOICES)})
            batches = [batches[i] for i in idx]
        per_device = max(math.ceil(len(t.tables) / t.topology.num_devices) for t in targets)
        base = {
            "batch_choices": tuple(batches),
            "max_rows": max(base["max_rows"], max(tb.rows for t in targets for tb in t.tables)),
            # a device of a plan holds more than the mean (uneven loads, column pieces): twice it
            "max_tables": min(40, max(base["max_tables"], 2 * per_device)),
            "memory_cap": max(t.topology.capacity(d) for t in targets for d in range(t.topology.num_devices)),
        }
    base.update({k: v for k, v in overrides.items() if v is not None})
    settings = CalibrationSettings(backend=backend, hardware=hardware, **base)
    if settings.max_rows < 1 or settings.max_tables < 1 or not settings.batch_choices or min(settings.batch_choices) < 1:
        raise CalibrationError(f"calibration domain: {settings} is empty")
    return settings


@dataclass
class StageRecord:
    name: str
    seconds: float
    detail: str
    cut: bool = False  # its time box ended it (what it made is used)
    skipped: bool = False  # done by an earlier run of the same calibration


@dataclass
class CalibrationResult:
    card: ModelCard
    stages: list[StageRecord]
    heldout: dict[str, dict[str, Any]]  # label -> {"model": name, "bands": accuracy_by_band(...)}
    work_dir: Path
    seconds: float
    resumed: bool = False
    plan_rounds: list[dict[str, Any]] = field(default_factory=list)  # per round: the held-out plan-level error (and "learning")


Progress = Callable[[str, int, int], None]  # (stage description, done, total)
Proposer = Callable[[Instance, Any], list[tuple[str, Any]]]  # (instance, cost model) -> [(solver name, Plan), ...]
# (algos, targets, model, out dir, deadline (time.monotonic()), seed, episodes, progress) -> outcomes with .algo,
# .export (the kept policy file, or None), .detail, .seconds, .cut: solvers.rl.train.train_policies_for
PolicyTrainer = Callable[..., list[Any]]


def stage_shares(loop: bool, policies: bool = False) -> dict[str, float]:
    """The share of the budget by which each stage ends (with policies, scaled to leave them POLICY_SHARE)."""
    sh = LOOP_SHARES if loop else PLAIN_SHARES
    return {k: v * (1 - POLICY_SHARE) for k, v in sh.items()} if policies else dict(sh)


def stage_plan(budget_s: float, loop: bool, rounds: int, policies: Sequence[str] = ()) -> str:
    """When each stage ends at the latest, in minutes from the start (what the progress bars then fill in)."""
    sh = stage_shares(loop, bool(policies))
    m = budget_s / 60
    parts = [f"train-pool samples until {sh['train'] * m:.1f} min", f"held-out samples until {sh['test'] * m:.1f}",
             f"training until {sh['train_end'] * m:.1f}"]
    if loop:
        parts.append(f"{rounds} rounds on proposed plans until {sh['loop_end'] * m:.1f}")
    parts.append("the refit and the judgement")
    if policies:
        parts.append(f"{' and '.join(policies)} policies trained on the model until {m:.1f}")
    return ", ".join(parts) + ", then the card (a rerun of the same command resumes)"


def split_targets(targets: Sequence[Instance]) -> tuple[list[Instance], list[Instance]]:
    """(the instances whose proposed plans are learned from, the held-out ones the plan-level error is measured on):
    every third instance held out; with fewer than 3, all of them serve both (the error is then in-sample)."""
    if len(targets) < 3:
        return list(targets), list(targets)
    return [t for i, t in enumerate(targets) if i % 3 != 2], [t for i, t in enumerate(targets) if i % 3 == 2]


def plan_level(instances: Sequence[Instance], model: Any, propose: Proposer, settings: CalibrationSettings, *,
               measure_devices: bool, seed: int, round_: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Propose plans for `instances` with `model`, measure each on the judge (the judge's own settings), and return
    the plan-level error of the model's predictions (MAPE, mean signed error, Kendall tau over the plans, per plan)
    and, with `measure_devices`, the measured devices as compute samples (collect.plan_device_samples)."""
    import numpy as np

    from costmodels.train import metrics
    from shardopt.measure.collect import plan_device_samples
    from shardopt.measure.evaluate import evaluate_plan

    rows, samples = [], []
    for inst in instances:
        for solver, plan in propose(inst, model):
            predicted = float(model.plan_costs(inst, plan).max_cost)
            ev = evaluate_plan(inst, plan, settings.backend, repeats=settings.repeats, warmup=settings.warmup, seed=seed, cache=False)
            measured = float(ev.costs.max_cost)
            rows.append({"instance": inst.name, "solver": solver, "predicted_ms": predicted, "measured_ms": measured})
            if measure_devices:
                samples += plan_device_samples(inst, plan, ev, {"instance": inst.name, "solver": solver, "round": round_})
    if not rows:
        return {"n": 0, "mape": float("nan"), "bias": float("nan"), "kendall_tau": float("nan"), "plans": []}, samples
    p = np.array([r["predicted_ms"] for r in rows])
    m = np.array([r["measured_ms"] for r in rows])
    return {**metrics(p, m), "bias": float(((p - m) / m).mean()), "plans": rows}, samples


def _stamp_path(work: Path, stage: str) -> Path:
    return work / f"{stage}.done"


def _stamped(work: Path, stage: str) -> dict[str, Any] | None:
    p = _stamp_path(work, stage)
    return json.loads(p.read_text()) if p.is_file() else None


def _stamp(work: Path, stage: str, doc: dict[str, Any]) -> None:
    tmp = _stamp_path(work, stage).with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(_stamp_path(work, stage))


def kernel_of(judge: str) -> str:
    """A judge label's kernel part, without the per-device call count ('... (15 calls) ... on NVIDIA H200, ...')."""
    return kernel_label(judge.split(" on ", 1)[0])


def library_versions(backend: str) -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for dist in ("torch", "fbgemm-gpu-cpu" if backend == "cpu" else "fbgemm-gpu"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def model_id_for(backend: str, fingerprint: Fingerprint, date: str) -> str:
    """A readable id: backend, machine, date ('cpu-amd-epyc-f26m2-2c-20261126')."""
    slug = re.sub(r"[^a-z0-9]+", "-", fingerprint.name.lower()).strip("-")
    if fingerprint.kind == "cpu":
        if fingerprint.family is not None and fingerprint.model is not None:
            slug += f"-f{fingerprint.family}m{fingerprint.model}"
        if fingerprint.cores:
            slug += f"-{fingerprint.cores}c"
    return f"{backend}-{slug}-{date.replace('-', '')}"


def _gzip_copy(src: Path, dest: Path) -> None:
    with src.open("rb") as f, gzip.open(dest, "wb") as g:
        shutil.copyfileobj(f, g)


def calibrate_machine(
    settings: CalibrationSettings,
    fingerprint: Fingerprint,
    *,
    budget_s: float,
    models_dir: Path | str | None = None,
    model_id: str | None = None,
    command: str = "",
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
    targets: Sequence[Instance] = (),
    rounds: int = 0,
    propose: Proposer | None = None,
    host_link: dict[str, Any] | None = None,
    policies: Sequence[str] = (),
    policy_episodes: int = 8000,
    train_policies: PolicyTrainer | None = None,
) -> CalibrationResult:
    """Run (or resume) the calibration of this machine within `budget_s` seconds and register its model. With
    `targets` and `rounds`, close the loop on the plans `propose` makes for them (module docstring). With `policies`
    (dreamshard, autoshard) and `targets`, `train_policies` (solvers.rl.train.train_policies_for: the solvers are
    not this layer's to import) trains those RL policies on the calibrated model for the targets; the card carries
    each one that beats the shipped policy there."""
    from costmodels.store import find_card, user_store_dir

    if budget_s <= 0:
        raise CalibrationError(f"--budget-minutes: {budget_s / 60:g} must be > 0")
    if policies and not targets:
        raise CalibrationError("--with-policies: needs --for SUITE|INSTANCE (the instances the policies learn to place)")
    if model_id is not None and (find_card(model_id, models_dir) is not None or (user_store_dir(models_dir) / model_id).exists()):
        raise CalibrationError(f"--id: a model {model_id!r} exists already (shardopt costmodel list): choose another id")
    run = _Calibration(settings, fingerprint, budget_s, models_dir, command, progress, log or (lambda _msg: None))
    shares = stage_shares(bool(rounds and targets), bool(policies))
    run.collect("collect-train", "train", run.train_file, settings.train_samples, settings.seed, shares["train"], settings.backend, 0.0)
    run.collect("collect-test", "test", run.test_file, settings.test_samples, settings.seed + 1, shares["test"], settings.backend, 0.0)
    run.collect("collect-comm", "train", run.comm_file, settings.comm_samples, settings.seed + 5, 1.0, "sim", 1.0)
    run.read_samples()
    if _stamped(run.work, "train") is not None and run.neural_file.is_file():
        run.stages.append(StageRecord("train", 0.0, "(an earlier run)", skipped=True))
    else:
        run.fit_neural([], shares["train_end"], run.neural_file, "train")
    if rounds and targets:
        if propose is None:
            raise CalibrationError("--rounds: no proposer of plans was given")
        run.close_loop(targets, rounds, propose, shares)
    run.refit_profile(host_link)
    heldout = run.judge()
    if run.level is None:  # (the loop read it before its last plans; without a loop, read it now)
        run.read_level("level")
    preferred = "neural" if heldout["neural (this calibration)"]["bands"]["all"]["mape"] <= heldout["analytic refitted (this calibration)"]["bands"]["all"]["mape"] else "analytic"
    trained = run.train_policies(policies, targets, preferred, policy_episodes, train_policies) if policies else {}
    stored = run.register(model_id, heldout, preferred, trained)
    shutil.rmtree(run.work, ignore_errors=True)
    return CalibrationResult(card=stored, stages=run.stages, heldout=heldout, work_dir=run.work, seconds=time.monotonic() - run.t0,
                             resumed=run.resumed, plan_rounds=run.plan_rounds)


class _Calibration:
    """One calibration's state as its stages run: the work folder they stamp, the budget's clock, the samples, and
    the record of each stage. Its methods are `calibrate_machine`'s stages, in order."""

    def __init__(self, settings: CalibrationSettings, fingerprint: Fingerprint, budget_s: float, models_dir: Path | str | None,
                 command: str, progress: Progress | None, say: Callable[[str], None]) -> None:
        from costmodels.store import user_store_dir

        self.settings, self.fingerprint, self.budget_s, self.models_dir = settings, fingerprint, budget_s, models_dir
        self.command, self.progress, self.say = command, progress, say
        self.t0 = time.monotonic()
        self.store = user_store_dir(models_dir)
        self.work = self.store / WORK_DIR / settings.key(fingerprint)
        self.resumed = self.work.is_dir()
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "settings.json").write_text(json.dumps({"settings": asdict(settings), "fingerprint": fingerprint.to_dict()}, indent=1))
        self.stages: list[StageRecord] = []
        self.train_file, self.test_file, self.comm_file = self.work / "train.jsonl", self.work / "test.jsonl", self.work / "comm.jsonl"
        self.neural_file = self.work / "neural.npz"
        self.profile_file = self.work / "profile.json"
        self.train_samples: list[dict[str, Any]] = []
        self.test_samples: list[dict[str, Any]] = []
        self.comm_samples: list[dict[str, Any]] = []
        self.plan_rounds: list[dict[str, Any]] = []
        self.n_loop = 0
        self.anchors: list[dict[str, Any]] = []
        self.level: LevelReading | None = None  # the last reading of the machine's level (machine_level)

    def collect(self, name: str, pool_part: str, out: Path, n: int, seed: int, end_share: float, backend: str, comm_fraction: float) -> None:
        """One time-boxed collection (skipped when an earlier run stamped it done)."""
        from shardopt.data.pools import load_pool, standard_pool_path
        from shardopt.measure.collect import CollectSettings, collect

        settings = self.settings
        done = _stamped(self.work, name)
        if done is not None:
            self.stages.append(StageRecord(name, 0.0, f"{done['samples']} samples (an earlier run)", cut=done["cut"], skipped=True))
            return
        start = time.monotonic()
        cs = CollectSettings(backend=backend, samples=n, max_tables=settings.max_tables, seed=seed, hardware=settings.hardware,
                             vary_batch=True, batch_choices=settings.batch_choices, memory_cap=settings.memory_cap,
                             comm_fraction=comm_fraction, repeats=settings.repeats, warmup=settings.warmup,
                             max_rows=settings.max_rows, augment=True)
        deadline = self.t0 + end_share * self.budget_s if backend != "sim" else None
        progress = self.progress
        tick = (lambda d, t: progress(name, d, t)) if progress else None
        summary = collect(load_pool(standard_pool_path(pool_part)), out, cs, progress=tick, deadline=deadline)
        have = summary["already_present"] + summary["collected"]
        cut = summary["stopped"] == "deadline"
        _stamp(self.work, name, {"samples": have, "cut": cut, "seconds": summary["seconds"]})
        rate = f", {summary['samples_per_minute']:.0f}/min" if summary["collected"] else ""
        self.stages.append(StageRecord(name, time.monotonic() - start, f"{have} samples{rate}", cut=cut))
        self.say(f"{name}: {have} samples" + (" (its time box ended it)" if cut else ""))

    def read_samples(self) -> None:
        """The collected samples, refused when the budget left too few to train on."""
        from shardopt.measure.collect import read_samples

        self.train_samples = list(read_samples(self.train_file, "compute"))
        self.test_samples = list(read_samples(self.test_file, "compute"))
        self.comm_samples = list(read_samples(self.comm_file, "comm"))
        if len(self.train_samples) < 10 or len(self.test_samples) < 3:
            for stage in ("collect-train", "collect-test"):  # the rerun collects on after the samples it keeps
                _stamp_path(self.work, stage).unlink(missing_ok=True)
            raise CalibrationError(
                f"only {len(self.train_samples)} train and {len(self.test_samples)} held-out samples were timed within the budget "
                f"({self.budget_s / 60:g} min): give it more time (--budget-minutes); the samples are kept and a rerun resumes")
        self.anchors = choose_anchors(self.test_samples)

    def read_level(self, stage: str) -> LevelReading:
        """The machine's level now against the held-out samples' collection (the anchors re-timed): what the model's
        compute predictions are multiplied by from here on."""
        settings, progress = self.settings, self.progress
        tick = (lambda d, t: progress(stage, d, t)) if progress else None
        reading = read_machine_level(self.anchors, settings.backend, repeats=settings.repeats, warmup=settings.warmup, progress=tick)
        self.level = reading
        self.stages.append(StageRecord(stage, reading.seconds, f"level {reading.factor:.3f} of the samples' "
                                       f"(quartiles {reading.spread[0]:.3f}-{reading.spread[1]:.3f}, {reading.anchors} anchors)"))
        self.say(f"{stage}: the machine runs at {reading.factor:.3f} of its samples' level")
        return reading

    def fit_neural(self, extra: list[dict[str, Any]], end_share: float, out: Path, stage: str, min_epochs: int = MIN_EPOCHS) -> None:
        """The neural model, its epochs fitted to the time left before `end_share` of the budget (at least
        `min_epochs` unless the settings ask for fewer; the epochs are stamped in the work folder)."""
        from costmodels.train import TrainError, TrainSettings, train

        settings = self.settings
        start = time.monotonic()
        samples = self.train_samples + extra
        left = self.t0 + end_share * self.budget_s - time.monotonic()
        per_epoch = TRAIN_S_PER_SAMPLE_EPOCH * (len(samples) + len(self.comm_samples))
        fits = left / per_epoch if per_epoch > 0 else settings.epochs
        epochs = int(min(settings.epochs, max(min_epochs, fits)))
        ts = TrainSettings(epochs=epochs, batch_size=settings.batch_size, learning_rate=settings.learning_rate, seed=settings.seed,
                           loss=settings.loss)
        progress = self.progress

        def report(net: str, epoch: int, total: int, _val: float) -> None:
            if progress:
                progress(f"{stage} ({net} network)", epoch, total)

        try:
            weights = train(samples + self.comm_samples, ts, progress=report,
                            meta={"data": [str(self.train_file), str(self.comm_file)], "command": self.command})
        except TrainError as exc:
            raise CalibrationError(f"training on {self.train_file}: {exc}") from None
        weights.save(out)
        _stamp(self.work, stage, {"epochs": epochs})
        self.stages.append(StageRecord(stage, time.monotonic() - start,
                                       f"{epochs} epochs on {len(self.train_samples)} + {len(extra)} proposed + {len(self.comm_samples)} comm samples"))

    def close_loop(self, targets: Sequence[Instance], rounds: int, propose: Proposer, shares: dict[str, float]) -> None:
        """The plans the searches propose with the model, measured; their devices added; retrained, `rounds` times,
        with the plan-level error on the held-out targets before each round and after the last."""
        from costmodels.neural import NeuralCostModel

        settings = self.settings
        learn, heldout = split_targets(targets)
        loop_file = self.work / "loop.jsonl"
        loop_file.unlink(missing_ok=True)  # (a resumed run redoes the rounds: they measure with the models it trains)
        loop_samples: list[dict[str, Any]] = []
        slot = (shares["loop_end"] - shares["train_end"]) * self.budget_s / rounds
        first_epochs = int((_stamped(self.work, "train") or {}).get("epochs", self.settings.epochs))
        current = self.neural_file
        for r in range(rounds + 1):
            # the model as it would be registered now: its network at the machine's level just read
            level = self.read_level(f"level r{r}")
            model = NeuralCostModel(current, compute_scale=level.factor)
            start = time.monotonic()
            errors, _ = plan_level(heldout, model, propose, settings, measure_devices=False, seed=settings.seed + 100 + r)
            self.plan_rounds.append({"round": r, "model": current.name, "level": round(level.factor, 4), **errors})
            self.stages.append(StageRecord(f"plans r{r}", time.monotonic() - start,
                                           f"held-out plan MAPE {errors['mape']:.1%} (bias {errors['bias']:+.1%}) on {errors['n']} plans of {len(heldout)} instances"))
            self.say(f"round {r}: plan-level error {errors['mape']:.1%} (bias {errors['bias']:+.1%}) on {errors['n']} held-out plans")
            if r == rounds:
                break
            start = time.monotonic()
            learned, new = plan_level(learn, model, propose, settings, measure_devices=True, seed=settings.seed + r, round_=r + 1)
            # the same error on the learning instances' plans, measured before this model trains on them: whether the
            # held-out figure's movement across rounds is the model's or the held-out instances' (not chosen on)
            self.plan_rounds[-1]["learning"] = {k: learned[k] for k in ("n", "mape", "bias", "kendall_tau")}
            new = at_level(new, level.factor)  # timed at this round's level: the network learns the samples' level
            with loop_file.open("a") as f:
                for doc in new:
                    f.write(json.dumps(doc) + "\n")
            loop_samples += new
            self.stages.append(StageRecord(f"propose r{r + 1}", time.monotonic() - start, f"{len(new)} device samples from plans of {len(learn)} instances"))
            weight = max(1, min(LOOP_MAX_WEIGHT, round(LOOP_SHARE_OF_TRAIN * len(self.train_samples) / max(1, len(loop_samples)))))
            current = self.work / f"neural-r{r + 1}.npz"
            # a retrain is a fit from nothing on more samples: fewer epochs than the first fit's make a worse model
            # than the one it replaces (lease 6: 10 epochs where proposing had used the round's time, held-out
            # device MAPE 24 -> 58 %), so it trains at least as long, over the budget if it must
            self.fit_neural(loop_samples * weight, shares["train_end"] + (r + 1) * slot / self.budget_s, current, f"retrain r{r + 1}",
                            min_epochs=first_epochs)
        if current != self.neural_file:
            shutil.copy2(current, self.neural_file)
        self.n_loop = len(loop_samples)

    def refit_profile(self, host_link: dict[str, Any] | None) -> None:
        """The analytic profile refitted to the same samples (and, with `--host-link`, the device-host link's measured
        constants: what UVM reads cost)."""
        from costmodels.calibrate import CalibrationError as FitError
        from costmodels.calibrate import calibrate as fit_profile
        from shardopt.core.hardware import get_profile, profile_to_dict

        settings = self.settings
        start = time.monotonic()
        try:
            fitted = fit_profile(self.train_samples, get_profile(settings.hardware), holdout=0.2, seed=settings.seed, name=f"{settings.hardware}-calibrated")
        except FitError as exc:
            raise CalibrationError(f"refitting the analytic profile: {exc}") from None
        record = {"data": str(self.train_file), "command": self.command, "date": datetime.date.today().isoformat(), **fitted.to_dict()}
        profile = fitted.profile
        if host_link is not None:
            from dataclasses import replace

            profile = replace(profile, **host_link["constants"])
            record["host_link"] = host_link
        self.profile_file.write_text(json.dumps(profile_to_dict(profile, calibration=record), indent=1) + "\n")
        self.stages.append(StageRecord("refit", time.monotonic() - start, f"analytic {settings.hardware} profile, {len(self.train_samples)} samples"))

    def judge(self) -> dict[str, Any]:
        """The held-out judgement by device-cost band: both new models, the data-sheet model and the other models of
        this backend and hardware."""
        from costmodels.evaluation import accuracy_by_band
        from costmodels.neural import NeuralCostModel
        from costmodels.registry import get_cost_model
        from costmodels.store import all_cards

        settings, fingerprint = self.settings, self.fingerprint
        start = time.monotonic()
        candidates: list[tuple[str, str, Any]] = [
            ("neural (this calibration)", str(self.neural_file), NeuralCostModel(self.neural_file)),
            ("analytic refitted (this calibration)", f"analytic:{self.profile_file}", get_cost_model(f"analytic:{self.profile_file}")),
            (f"analytic ({settings.hardware} data sheet)", "analytic", get_cost_model("analytic")),
        ]
        for card in all_cards(self.models_dir):
            if card.backend == settings.backend and card.hardware == settings.hardware:
                same = card.fingerprint.matches(fingerprint) if fingerprint.kind == "cpu" else card.fingerprint.name == fingerprint.name
                where = "this machine" if same else f"other machine: {card.fingerprint.describe()}"
                candidates.append((f"{card.id} ({card.source}; {where})", card.cost_model_name(), get_cost_model(card.cost_model_name())))
        heldout = {label: {"model": name, "bands": accuracy_by_band(model, self.test_samples)} for label, name, model in candidates}
        self.stages.append(StageRecord("judge", time.monotonic() - start, f"{len(candidates)} models on {len(self.test_samples)} held-out samples"))
        return heldout

    def train_policies(self, policies: Sequence[str], targets: Sequence[Instance], preferred: str, episodes: int,
                       trainer: PolicyTrainer | None) -> dict[str, Path]:
        """The RL policies trained on the preferred calibrated model for the targets: algorithm -> the exported
        policy, for those that beat the shipped one there."""
        from costmodels.neural import NeuralCostModel
        from costmodels.registry import get_cost_model

        factor = self.level.factor if self.level is not None else 1.0
        chosen = NeuralCostModel(self.neural_file, compute_scale=factor) if preferred == "neural" else get_cost_model(f"analytic:{self.profile_file}")
        if trainer is None:
            raise CalibrationError("--with-policies: no policy trainer was given (the CLI passes solvers.rl.train.train_policies_for)")
        trained: dict[str, Path] = {}
        for outcome in trainer(policies, targets, chosen, self.work / "policies", self.t0 + self.budget_s, self.settings.seed,
                               episodes, self.progress):
            self.stages.append(StageRecord(f"policy {outcome.algo}", outcome.seconds, outcome.detail, cut=outcome.cut))
            self.say(f"policy {outcome.algo}: {outcome.detail}")
            if outcome.export is not None:
                trained[outcome.algo] = outcome.export
        return trained

    def register(self, model_id: str | None, heldout: dict[str, Any], preferred: str, trained: dict[str, Path]) -> ModelCard:
        """The model folder (both models, the samples, the held-out judgement, the policies) and its card, into the
        store."""
        from costmodels.store import find_card, register

        settings, fingerprint, models_dir = self.settings, self.fingerprint, self.models_dir
        date = datetime.date.today().isoformat()
        mid = model_id or model_id_for(settings.backend, fingerprint, date)
        if model_id is None:
            n = 2
            while find_card(mid, models_dir) is not None or (self.store / mid).exists():
                mid = f"{model_id_for(settings.backend, fingerprint, date)}-{n}"
                n += 1
        neural_acc = heldout["neural (this calibration)"]["bands"]["all"]
        analytic_acc = heldout["analytic refitted (this calibration)"]["bands"]["all"]
        judge = next((s.get("judge") for s in self.train_samples if s.get("judge")), settings.backend)
        folder = self.work / "model"
        if folder.exists():
            shutil.rmtree(folder)
        (folder / "data").mkdir(parents=True)
        shutil.copy2(self.neural_file, folder / "neural.npz")
        shutil.copy2(self.profile_file, folder / "profile.json")
        for src in (self.train_file, self.test_file, self.comm_file):
            _gzip_copy(src, folder / "data" / f"{src.stem}.jsonl.gz")
        write_anchors(self.anchors, folder / ANCHORS_FILE)
        (folder / "heldout.json").write_text(json.dumps({"devices": heldout, "plan_rounds": self.plan_rounds}, indent=1) + "\n")
        if (self.work / "loop.jsonl").is_file():
            _gzip_copy(self.work / "loop.jsonl", folder / "data" / "loop.jsonl.gz")
        if trained:
            (folder / "policies").mkdir()
            for algo, export in trained.items():
                shutil.copy2(export, folder / "policies" / f"{algo}.npz")
        rounds = self.plan_rounds
        card = ModelCard(
            id=mid, backend=settings.backend, hardware=settings.hardware, fingerprint=fingerprint, kernel=kernel_of(judge),
            domain=domain_of_samples(self.train_samples), models={"neural": "neural.npz", "analytic": "profile.json"},
            preferred=preferred, date=date,
            samples={"train": len(self.train_samples), "test": len(self.test_samples), "comm": len(self.comm_samples), "proposed": self.n_loop},
            accuracy={"neural": _brief(neural_acc), "analytic": _brief(analytic_acc),
                      **({"plan_level": {**{k: rounds[-1][k] for k in ("n", "mape", "bias", "kendall_tau")},
                                         "heldout_instances": sorted({p["instance"] for p in rounds[-1]["plans"]}),
                                         "rounds": [{k: v for k, v in pr.items() if k != "plans"} for pr in rounds]}}
                         if rounds else {})},
            command=self.command, libraries=library_versions(settings.backend),
            description=f"calibrated on {fingerprint.describe()} by the {settings.backend} judge ({kernel_of(judge)})",
            policies={algo: f"policies/{algo}.npz" for algo in trained},
            level=({**self.level.to_dict(), "repeats": settings.repeats, "warmup": settings.warmup, "command": self.command}
                   if self.level is not None else {}),
            anchors=ANCHORS_FILE,
        )
        return register(card, folder, models_dir)


def _brief(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in ("n", "mape", "median_ape", "kendall_tau") if k in m}

