"""`shardopt costmodel ...`: collecting cost data, training and judging predictors, listing the calibrated ones
(`shardopt calibrate` is in shardopt.cli.calibrate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    AddressOpt,
    CLIError,
    EngineOpt,
    JsonOpt,
    ModelsOpt,
    PoolChoice,
    _console,
    _emit_json,
    _engine,
    _esc,
    _guard,
    _print_lines,
    _progress,
    app,
)

costmodel_app = typer.Typer(help="Cost data and cost models: collect samples (train / eval come with the neural models).", no_args_is_help=True)
app.add_typer(costmodel_app, name="costmodel")


@costmodel_app.command("collect")
def collect_cmd(
    backend: Annotated[str, typer.Option("--backend", "-b", help="Judge of the samples: sim | cpu | cuda.")] = "sim",
    pool: Annotated[PoolChoice, typer.Option("--pool", help="Which half of the standard pool the tables come from.")] = PoolChoice.train,
    pool_file: Annotated[Path | None, typer.Option("--pool-file", metavar="POOL.json", help="Draw from this pool instead.")] = None,
    samples: Annotated[int, typer.Option("--samples", "-n", help="Total samples wanted in the file (ids 0..N-1).")] = 1000,
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE.jsonl", help="Appended to; a rerun resumes.")] = Path("costdata.jsonl"),
    max_tables: Annotated[int, typer.Option("--max-tables", help="At most this many tables per device sample.")] = 20,
    min_tables: Annotated[int, typer.Option("--min-tables", help="At least this many tables per device sample.")] = 1,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Sample k is drawn from (seed, k).")] = 0,
    hardware: Annotated[str, typer.Option("--hardware", help="Hardware profile of the samples' topology.")] = "v100",
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1, help="Batch of every sample \\[default: the pool's].")] = None,
    vary_batch: Annotated[bool, typer.Option("--vary-batch", help="Draw each sample's batch from 2,048 to 131,072 (or --batch-choices).")] = False,
    pool_histograms: Annotated[bool, typer.Option("--pool-histograms", help="Keep the pool's access histograms at every batch (as collections before 2026-11-24 did) instead of moving them to the sample's batch.")] = False,
    batch_choices: Annotated[str | None, typer.Option("--batch-choices", metavar="B,B,...", help="With --vary-batch: the batches to draw from, e.g. 1024,2048,4096,8192.")] = None,
    augment: Annotated[bool, typer.Option("--augment", help="Also scale tables' rows and pooling factors (not only dims).")] = False,
    optimizer: Annotated[str, typer.Option("--optimizer", help="sgd | rowwise_adagrad | adam.")] = "rowwise_adagrad",
    memory_cap: Annotated[int | None, typer.Option("--memory-cap", min=1, help="Bytes per device sample \\[default: the profile's memory].")] = None,
    comm_fraction: Annotated[float, typer.Option("--comm-fraction", help="Share of communication samples.")] = 0.2,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed repeats (measured backends).")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Warm-ups (measured backends).")] = 2,
    max_rows: Annotated[int | None, typer.Option("--max-rows", min=1, help="Cap every sampled table's rows (a CPU cannot hold production tables); samples record the capped tables.")] = None,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="With --engine ray: samples per task.")] = 16,
    json_out: JsonOpt = False,
) -> None:
    """Collect (device table set -> cost columns) samples for training cost models; resumable."""
    with _guard(json_out):
        if out.is_dir():
            raise CLIError(f"--out: {out} is a folder: name the JSONL file the samples go to (e.g. {out / 'costdata.jsonl'})")
        from shardopt.core.hardware import PROFILES
        from shardopt.core.ir import Optimizer
        from shardopt.data.pools import load_pool, standard_pool_path
        from shardopt.measure.collect import CollectSettings, collect

        if hardware not in PROFILES:
            raise CLIError(f"--hardware: {hardware!r} is not a known hardware profile (known: {', '.join(sorted(PROFILES))})")
        if optimizer not in Optimizer.__members__:
            raise CLIError(f"--optimizer: {optimizer!r} is not one of {', '.join(Optimizer.__members__)}")
        choices = None
        if batch_choices is not None:
            try:
                choices = tuple(int(x) for x in batch_choices.split(",") if x.strip())
            except ValueError:
                raise CLIError(f"--batch-choices: {batch_choices!r} is not a comma-separated list of batch sizes") from None
            if not choices or min(choices) < 1:
                raise CLIError(f"--batch-choices: {batch_choices!r} must list batch sizes >= 1")
        table_pool = load_pool(pool_file or standard_pool_path(pool.value))
        settings = CollectSettings(
            backend=backend, samples=samples, max_tables=max_tables, min_tables=min_tables, seed=seed, hardware=hardware, batch_size=batch_size, vary_batch=vary_batch or choices is not None, augment=augment,
            optimizer=optimizer, memory_cap=memory_cap, comm_fraction=comm_fraction, repeats=repeats, warmup=warmup,
            max_rows=max_rows, batch_choices=choices, rescale_histograms=not pool_histograms,
        )
        with _engine(engine, address) as eng, _progress(f"collecting on {backend} ({eng.describe()})", enabled=not json_out) as tick:
            summary: dict[str, Any] = collect(table_pool, out, settings, progress=tick, engine=eng, batch=batch)
        if json_out:
            _emit_json(summary)
        else:
            _print_lines(
                _console(),
                [
                    f"{_esc(str(out))}: {summary['already_present'] + summary['collected']} of {samples} samples "
                    f"({summary['collected']} new, {summary['already_present']} already there)",
                    f"{summary['samples_per_minute']:.1f} samples/minute on {backend} ({summary['seconds']:.1f} s)",
                ],
            )


def _read_data(path: Path) -> list[dict[str, Any]]:
    import json

    from shardopt.measure.collect import read_samples

    if not path.is_file():
        raise CLIError(f"{path}: no such file")
    try:
        return list(read_samples(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: not a JSONL file of samples ({exc})") from None


@costmodel_app.command("train")
def train_cmd(
    data: Annotated[list[Path], typer.Argument(metavar="DATA.jsonl[.gz] ...", help="Samples from `shardopt costmodel collect` (several files are joined, e.g. measured compute + modelled comm).", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="MODEL.npz", help="Where to write the weights.")],
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Training epochs (each network).")] = 60,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Samples per step.")] = 256,
    learning_rate: Annotated[float, typer.Option("--learning-rate", help="Adam's initial learning rate (cosine decay).")] = 2e-3,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of initialisation, validation split and batches.")] = 0,
    threads: Annotated[int, typer.Option("--threads", min=1, help="torch CPU threads.")] = 2,
    loss: Annotated[str, typer.Option("--loss", help="The compute network's loss on log ms: squared (the mean) or absolute (the median: slow outlying timings do not pull it).")] = "squared",
    json_out: JsonOpt = False,
) -> None:
    """Train the neural compute and communication models on collected cost data."""
    with _guard(json_out):
        import sys

        from costmodels.train import TrainError, TrainSettings, train

        samples = [s for path in data for s in _read_data(path)]
        settings = TrainSettings(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, seed=seed, threads=threads, loss=loss)
        meta = {"data": [str(p) for p in data], "command": "shardopt " + " ".join(sys.argv[1:])}
        with _progress("training", enabled=not json_out) as tick:
            def report(name: str, epoch: int, total: int, val: float) -> None:
                if tick is not None:
                    tick(epoch, total)

            try:
                weights = train(samples, settings, progress=report, meta=meta)
            except TrainError as exc:
                raise CLIError(f"{', '.join(map(str, data))}: {exc}") from None
        out.parent.mkdir(parents=True, exist_ok=True)
        weights.save(out)
        rec = weights.meta["train"]
        if json_out:
            _emit_json({"out": str(out), **rec})
        else:
            _print_lines(_console(), [
                f"wrote {_esc(str(out))}: {rec['compute_samples']} compute samples, {rec['comm_device_rows']} comm device rows",
                f"best validation loss: compute {rec['best_val_log_mse_compute']:.5f} ({settings.loss} log error), comm {rec['best_val_log_mse_comm']:.5f} (squared)",
            ])


@costmodel_app.command("eval")
def eval_cmd(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="A weights file, `neural` (the shipped model) or `analytic[:PROFILE]`.", show_default=False)],
    data: Annotated[Path, typer.Argument(metavar="DATA.jsonl", help="Samples to judge it on (e.g. from the test pool).", show_default=False)],
    json_out: JsonOpt = False,
) -> None:
    """MAPE, RMSE and Kendall tau per cost column of a cost model on collected samples."""
    with _guard(json_out):
        from costmodels.neural import SHIPPED, NeuralWeights
        from costmodels.train import TrainError, evaluate

        samples = _read_data(data)
        if model == "analytic" or model.startswith("analytic:"):
            from costmodels.evaluation import evaluate_model
            from costmodels.registry import get_cost_model

            path = Path(model)
            try:
                result = evaluate_model(get_cost_model(model), samples)
            except ValueError as exc:
                raise CLIError(f"{data}: {exc}") from None
        else:
            from costmodels.registry import WEIGHTS_DIR

            path = SHIPPED if model == "neural" else Path(model)
            if not path.exists() and (WEIGHTS_DIR / f"{model}.npz").is_file():  # a shipped model by name
                path = WEIGHTS_DIR / f"{model}.npz"
            try:
                weights = NeuralWeights.load(path)
            except ValueError as exc:
                raise CLIError(f"MODEL: {exc}") from None
            try:
                result = evaluate(weights, samples)
            except TrainError as exc:
                raise CLIError(f"{data}: {exc}") from None
        if json_out:
            _emit_json({"model": str(path), "data": str(data), "columns": result})
            return
        from rich.table import Table as RichTable

        table = RichTable(title=f"{_esc(path.name)} on {_esc(data.name)}")
        for col in ("column", "samples", "MAPE", "median APE", "RMSE ms", "Kendall tau"):
            table.add_column(col, justify="left" if col == "column" else "right")
        for name, m in result.items():
            table.add_row(name, str(m["n"]), f"{m['mape']:.2%}", f"{m['median_ape']:.2%}", f"{m['rmse_ms']:.4f}", f"{m['kendall_tau']:.4f}")
        _console().print(table)


# the ID argument of `level` and `show`
ModelIdArg = Annotated[str, typer.Argument(metavar="ID", help="A calibrated model, shipped or in the store (shardopt costmodel list).",
                                           show_default=False)]


@costmodel_app.command("list")
def list_cmd(
    models: ModelsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The calibrated cost models, shipped and in the store: machine, kernel, date, held-out accuracy and level, one
    line each (`shardopt costmodel show ID`: a model's whole card)."""
    with _guard(json_out):
        from costmodels.store import all_cards, user_store_dir
        from shardopt.core.fingerprint import cpu_fingerprint

        cards = all_cards(models)
        here = cpu_fingerprint()
        if json_out:
            _emit_json({"store": str(user_store_dir(models)), "machine": here.to_dict(),
                        "models": [{**c.to_dict(), "source": c.source, "path": str(c.path),
                                    "this_machine": c.backend == "cpu" and c.fingerprint.matches(here)} for c in cards]})
            return
        from rich import box
        from rich.table import Table as RichTable

        # (one line per model in 100 columns: the domain, samples, command and source are the card's, `show`)
        table = RichTable(title="calibrated cost models", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("id", "measured on", "kernel", "date", "MAPE", "tau", "level"):
            table.add_column(col, no_wrap=col in ("id", "date"), overflow="fold", justify="right" if col in ("MAPE", "tau", "level") else "left")
        for c in cards:
            acc = c.device_accuracy() or {}
            mine = " *" if c.backend == "cpu" and c.fingerprint.matches(here) else ""
            table.add_row(_esc(c.id), _esc(c.fingerprint.short() + mine), c.kernel_short, c.date,
                          f"{acc['mape']:.1%}" if "mape" in acc else "-", f"{acc['kendall_tau']:.3f}" if "kendall_tau" in acc else "-",
                          f"{c.level_factor:.3f}" if c.level else "-")
        console = _console()
        console.print(table)
        _print_lines(console, [f"store: {user_store_dir(models)}", f"this machine (*): {here.describe()}",
                               "MAPE, tau: the preferred model on held-out devices; a model's card: shardopt costmodel show ID",
                               "data-sheet models (no card): analytic, analytic:PROFILE (shardopt solve --help)"])


@costmodel_app.command("show")
def show_cmd(
    model_id: ModelIdArg,
    models: ModelsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """A calibrated model's whole card: the machine it was measured on, its kernel and libraries, the training domain,
    sample counts, held-out accuracy per model, its level, and the command that made it."""
    with _guard(json_out):
        from costmodels.store import find_card
        from shardopt.core.fingerprint import cpu_fingerprint

        card = find_card(model_id, models)
        if card is None:
            raise CLIError(f"ID: no calibrated model {model_id!r} (shardopt costmodel list shows them)")
        if json_out:
            _emit_json({**card.to_dict(), "source": card.source, "path": str(card.path)})
            return
        from rich.table import Table as RichTable

        here = cpu_fingerprint()
        table = RichTable(title=f"cost model {_esc(card.id)}", title_justify="left", show_header=False)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        mine = " (this machine)" if card.backend == "cpu" and card.fingerprint.matches(here) else ""
        rows = [("source", f"{card.source}: {card.path}"), ("hardware", card.hardware), ("measured on", card.fingerprint.describe() + mine),
                ("backend / kernel", f"{card.backend}: {card.kernel}"),
                ("libraries", ", ".join(f"{k} {v}" for k, v in card.libraries.items()) or "-"),
                ("domain", card.domain.describe()), ("date", card.date),
                ("samples", f"{card.samples.get('train', 0):,} train / {card.samples.get('test', 0):,} held out"),
                ("preferred", card.preferred)]
        for kind, acc in card.accuracy.items():
            if isinstance(acc, dict) and "mape" in acc:
                tau = f", Kendall tau {acc['kendall_tau']:.3f}" if "kendall_tau" in acc else ""
                rows.append((f"held out: {kind}", f"MAPE {acc['mape']:.1%}{tau}" + (f" ({acc['n']:,} samples)" if "n" in acc else "")))
        rows.append(("level", f"{card.level_factor:.3f} ({card.level.get('date', '?')})" if card.level else "- (none read)"))
        rows += [("command", card.command or "-"), ("description", card.description or "-")]
        for k, v in rows:
            table.add_row(k, _esc(str(v)))
        _console().print(table)


@costmodel_app.command("level")
def level_cmd(
    model_id: ModelIdArg,
    models: ModelsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Read this machine's speed level for a calibrated model: re-time its anchor samples (about 10 s) and set the
    factor its compute predictions are multiplied by. A machine's level moves by 5-15 % between hours or days; the
    model's shape does not (docs/measured.md). A shipped model is read-only: its level goes on a copy in the store,
    ID-local, which `auto` then prefers."""
    with _guard(json_out):
        from dataclasses import replace

        from costmodels.store import find_card
        from shardopt.cli.common import _command_line, _machine_fingerprint
        from shardopt.measure.collect import read_samples
        from shardopt.measure.machine_level import LevelError, choose_anchors, read_anchors, read_level

        card = find_card(model_id, models)
        if card is None:
            raise CLIError(f"ID: no calibrated model {model_id!r} (shardopt costmodel list shows them)")
        here = _machine_fingerprint(card.backend, f"ID: {model_id!r} was measured on cuda")
        same = card.fingerprint.matches(here) if card.backend == "cpu" else card.fingerprint.name == here.name
        if not same:
            raise CLIError(f"ID: {model_id!r} was calibrated on {card.fingerprint.describe()}, this machine is {here.describe()}: "
                           "a level is this machine's speed against its own samples; calibrate this machine instead")
        try:
            if card.anchors:
                anchors = read_anchors(card.anchors_path())
            elif card.source != "shipped" and card.path is not None:  # (a store model from before cards named anchors)
                data = card.path.parent / "data" / "test.jsonl.gz"
                if not data.is_file():
                    raise LevelError(f"{data}: no such file (the held-out samples a level is read on)")
                anchors = choose_anchors(list(read_samples(data, "compute")))
            else:
                raise LevelError(f"{model_id!r} ships without anchor samples: `shardopt calibrate --backend {card.backend}` makes a "
                                 "model of this machine with them")
        except (ValueError, OSError, EOFError) as exc:
            raise CLIError(str(exc)) from None
        repeats, warmup = int(card.level.get("repeats", 5)), int(card.level.get("warmup", 2))
        with _progress("re-timing the anchors", enabled=not json_out) as tick:
            reading = read_level(anchors, card.backend, repeats=repeats, warmup=warmup, progress=tick)
        target = _local_copy(card, models) if card.source == "shipped" else card
        before = target.level_factor if target.level else None
        level = {**reading.to_dict(), "repeats": repeats, "warmup": warmup, "command": _command_line(),
                 "previous": ({"factor": target.level["factor"], "date": target.level.get("date")} if target.level else None)}
        target = replace(target, level=level)
        target.save(target.path)
        if json_out:
            _emit_json({"id": target.id, "of": card.id, "path": str(target.path), "level": level})
            return
        was = f" (was {before:.3f})" if before is not None else " (the card had none: 1)"
        _print_lines(_console(), [
            f"{card.id}: this machine runs at {reading.factor:.3f} of its samples' timings{was}; quartiles "
            f"{reading.spread[0]:.3f}-{reading.spread[1]:.3f} over {reading.anchors} anchors, {reading.seconds:.0f} s",
            (f"{target.id} (a copy in the store: {_esc(str(target.path.parent))}) predicts at it, and `auto` prefers it to the shipped {card.id}"
             if target.id != card.id else
             f"its neural model's compute predictions are multiplied by {reading.factor:.3f} from now on ({_esc(str(card.path))})"),
        ])


def _local_copy(card: Any, models: Path | None) -> Any:
    """The store's copy of a shipped calibrated model (ID-local: its model files, anchors and card, source user), made
    the first time; the card as loaded from there."""
    import shutil
    from dataclasses import replace

    from costmodels.cards import load_card
    from costmodels.store import CARD_FILE, user_store_dir

    folder = user_store_dir(models) / f"{card.id}-local"
    if not (folder / CARD_FILE).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        files = {kind: f"{kind}{card.model_path(kind).suffix}" for kind in card.models}
        for kind, name in files.items():
            shutil.copy2(card.model_path(kind), folder / name)
        shutil.copy2(card.anchors_path(), folder / "anchors.jsonl.gz")
        policies = {algo: f"policies/{algo}.npz" for algo in card.policies}
        for algo, rel in policies.items():
            (folder / rel).parent.mkdir(exist_ok=True)
            shutil.copy2(card.policy_path(algo), folder / rel)
        replace(card, id=f"{card.id}-local", models=files, anchors="anchors.jsonl.gz", source="user", path=None, policies=policies,
                description=f"{card.description} Copied from the shipped {card.id} by `shardopt costmodel level` to carry this machine's level.").save(folder / CARD_FILE)
    return load_card(folder / CARD_FILE)
