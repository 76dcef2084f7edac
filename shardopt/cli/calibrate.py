"""`shardopt calibrate`: learn this machine's costs in one command, or fit a profile to samples already collected.

Two forms:

    shardopt calibrate --backend cpu|cuda [--budget-minutes M] [--for SUITE|INSTANCE] [--models DIR]
    shardopt calibrate DATA.jsonl --out PROFILE.json [--profile NAME]

The first is the whole recipe (shardopt.measure.calibration): collect, train the neural model, refit the analytic
profile, judge them on held-out samples beside the shipped models, and register the result with its card in the model
store, where `--cost-model auto` finds it. The second is its refit step alone, on samples of `shardopt costmodel
collect` (what the GPU campaign uses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import CLIError, JsonOpt, ModelsOpt, _console, _emit_json, _esc, _guard, _print_lines, app


@app.command()
def calibrate(
    data: Annotated[Path | None, typer.Argument(metavar="[DATA.jsonl]", help="Fit the analytic profile to these samples (`shardopt costmodel collect`) instead of measuring: needs --out.", show_default=False)] = None,
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="Calibrate this machine on this judge: cpu | cuda.", show_default=False)] = None,
    budget_minutes: Annotated[float, typer.Option("--budget-minutes", help="With --backend: wall time for everything (collection takes the first 75 %).")] = 15.0,
    target: Annotated[Path | None, typer.Option("--for", metavar="SUITE|INSTANCE", help="With --backend: sample the domain of these instances (their batches, rows, tables per device, memory).", show_default=False)] = None,
    models: ModelsOpt = None,
    model_id: Annotated[str | None, typer.Option("--id", help="With --backend: the model's id in the store \\[default: backend, machine, date].", show_default=False)] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="With --backend: the hardware profile instances name for this machine \\[default: cpu; a GPU's own profile].", show_default=False)] = None,
    train_samples: Annotated[int | None, typer.Option("--samples", min=10, help="With --backend: at most this many training samples \\[default: as many as the budget allows, up to 6,000].", show_default=False)] = None,
    test_samples: Annotated[int | None, typer.Option("--test-samples", min=3, help="With --backend: at most this many held-out samples \\[default: up to 1,000].", show_default=False)] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", min=1, help="With --backend: at most this many training epochs \\[default: 150, fewer when the budget is short].", show_default=False)] = None,
    repeats: Annotated[int | None, typer.Option("--repeats", min=1, help="With --backend: timed repeats per sample \\[default: 5, the judge's].", show_default=False)] = None,
    batches: Annotated[str | None, typer.Option("--batches", metavar="B,B,...", help="With --backend: the batches to sample \\[default: the --for instances' and the backend's].", show_default=False)] = None,
    max_rows: Annotated[int | None, typer.Option("--max-rows", min=1, help="With --backend: cap sampled tables' rows at this \\[default: the --for instances' largest, at least the backend's default].", show_default=False)] = None,
    max_tables: Annotated[int | None, typer.Option("--max-tables", min=1, help="With --backend: at most this many tables per device sample \\[default: twice the --for instances' mean per device, at least the backend's default].", show_default=False)] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=0, help="With --for: rounds of the loop (solve the instances with the model, measure the plans, add their devices, retrain), each reporting the plan-level error on held-out instances \\[default: 2 with --for].", show_default=False)] = None,
    proposers: Annotated[str, typer.Option("--proposers", metavar="S,S,...", help="With --rounds: the solvers whose plans the loop measures.")] = "greedy,neuroshard,cpsat",
    propose_time: Annotated[float, typer.Option("--propose-time-limit", min=0.1, help="With --rounds: seconds each proposing solve may take.")] = 2.0,
    out: Annotated[Path | None, typer.Option("--out", "-o", metavar="PROFILE.json", help="With DATA.jsonl: where to write the calibrated profile.", show_default=False)] = None,
    profile: Annotated[str, typer.Option("--profile", help="With DATA.jsonl: base hardware profile (name or PROFILE.json).")] = "v100",
    holdout: Annotated[float, typer.Option("--holdout", help="With DATA.jsonl: share of samples kept out of the fit and judged after it.")] = 0.2,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the samples (--backend) or of the train / hold-out split (DATA.jsonl).")] = 0,
    name: Annotated[str | None, typer.Option("--name", help="With DATA.jsonl: name of the calibrated profile.")] = None,
    with_policies: Annotated[bool, typer.Option("--with-policies", help="With --for: also train DreamShard's and AutoShard's policies on the calibrated model for those instances (the last quarter of the budget); the card carries each one that beats the shipped policy there, and `solve --solver dreamshard|autoshard` with this model uses it.")] = False,
    policy_episodes: Annotated[int, typer.Option("--policy-episodes", min=16, help="With --with-policies: at most this many rollouts per policy (its time box may end it sooner).")] = 8000,
    host_link: Annotated[Path | None, typer.Option("--host-link", metavar="PROBE.json", help="Also fit the device-host link (UVM reads) of the refitted profile to benchmarks/host_link_probe.py's output: row-gather constants and the bulk-copy bandwidth.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Learn this machine's costs (--backend cpu|cuda), or fit the analytic profile to collected samples (DATA.jsonl)."""
    with _guard(json_out):
        if data is not None and backend is not None:
            raise CLIError("calibrate: give DATA.jsonl (fit a profile to samples) or --backend cpu|cuda (measure this machine), not both")
        if data is None and backend is None:
            raise CLIError("calibrate: give --backend cpu|cuda to calibrate this machine (or DATA.jsonl --out PROFILE.json to fit samples)")
        if data is not None:
            if out is None:
                raise CLIError("--out: DATA.jsonl is fitted into a profile file: name it with --out PROFILE.json")
            _fit_profile(data, out, profile, holdout, seed, name, host_link, json_out)
            return
        _calibrate_machine(str(backend).strip().lower(), budget_minutes, target, models, model_id, hardware, train_samples,
                           test_samples, epochs, repeats, seed, json_out, rounds, proposers, propose_time, host_link,
                           batches, max_rows, max_tables, with_policies, policy_episodes)


def _batches(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise CLIError(f"--batches: {text!r} is not a comma-separated list of batch sizes") from None
    if not values or min(values) < 1:
        raise CLIError(f"--batches: {text!r} must list batch sizes >= 1")
    return values


def _targets(path: Path) -> list[Any]:
    """The instances of --for: a suite folder's instance files, or one instance file."""
    from shardopt.core.ir import load_instance

    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.name != "suite.json")
        if not files:
            raise CLIError(f"--for: {path} holds no instance files (*.json)")
        return [load_instance(p) for p in files]
    if not path.is_file():
        raise CLIError(f"--for: {path}: no such file or folder")
    return [load_instance(path)]


def _calibrate_machine(backend: str, budget_minutes: float, target: Path | None, models: Path | None, model_id: str | None,
                       hardware: str | None, train_samples: int | None, test_samples: int | None, epochs: int | None,
                       repeats: int | None, seed: int, json_out: bool, rounds: int | None = None,
                       proposers: str = "greedy,neuroshard,cpsat", propose_time: float = 2.0,
                       host_link: Path | None = None, batches: str | None = None, max_rows: int | None = None,
                       max_tables: int | None = None, with_policies: bool = False,
                       policy_episodes: int = 8000) -> None:
    from shardopt.cli.common import _command_line, _machine_fingerprint, _progress_stages
    from shardopt.core.fingerprint import gpu_profile_name
    from shardopt.core.hardware import PROFILES
    from shardopt.measure.calibration import CalibrationError, calibrate_machine, domain_settings

    if backend not in ("cpu", "cuda"):
        raise CLIError(f"--backend: {backend!r} is not cpu or cuda (a calibration measures: sim has nothing to learn)")
    if not budget_minutes > 0:
        raise CLIError(f"--budget-minutes: {budget_minutes:g} must be > 0")
    if hardware is not None and hardware not in PROFILES:
        raise CLIError(f"--hardware: {hardware!r} is not a known hardware profile (known: {', '.join(sorted(PROFILES))})")
    fingerprint = _machine_fingerprint(backend)
    if backend == "cpu":
        hw = hardware or "cpu"
    else:
        hw = hardware or gpu_profile_name(fingerprint.name)
        if hw is None:
            raise CLIError(f"--hardware: no hardware profile names the GPU {fingerprint.name!r}: say which one instances use for it")
    targets = _targets(target) if target is not None else []
    if rounds is None:
        rounds = 2 if targets else 0
    if rounds and not targets:
        raise CLIError("--rounds: the loop solves the instances you will solve: name them with --for SUITE|INSTANCE")
    if with_policies and not targets:
        raise CLIError("--with-policies: the policies learn to place the instances you will solve: name them with --for SUITE|INSTANCE")
    policies = ("dreamshard", "autoshard") if with_policies else ()
    from shardopt.cli.pick import check_portfolio

    propose = _proposer(check_portfolio(proposers), propose_time, seed) if rounds else None
    link = _host_link_fit(host_link) if host_link is not None else None
    try:
        settings = domain_settings(backend, hw, targets, train_samples=train_samples, test_samples=test_samples, epochs=epochs,
                                   repeats=repeats, seed=seed, batch_choices=_batches(batches), max_rows=max_rows,
                                   max_tables=max_tables)
    except CalibrationError as exc:
        raise CLIError(str(exc)) from None
    command = _command_line()
    console = _console(stderr=True)
    if not json_out:
        from shardopt.measure.calibration import stage_plan

        _print_lines(console, [f"calibrating {fingerprint.describe()} on the {backend} judge for hardware {hw!r}, budget {budget_minutes:g} min: "
                               f"batches {', '.join(f'{b:,}' for b in settings.batch_choices)}, rows up to {settings.max_rows:,}, "
                               f"up to {settings.max_tables} tables per device sample",
                               "plan: " + stage_plan(budget_minutes * 60, bool(rounds and targets), rounds or 0, policies)])
    with _progress_stages(enabled=not json_out) as tick:
        try:
            result = calibrate_machine(settings, fingerprint, budget_s=budget_minutes * 60, models_dir=models, model_id=model_id,
                                       command=command, progress=tick, log=None if json_out else (lambda m: _print_lines(console, [m])),
                                       targets=targets, rounds=rounds, propose=propose, host_link=link, policies=policies,
                                       policy_episodes=policy_episodes, train_policies=_policy_trainer() if policies else None)
        except CalibrationError as exc:
            raise CLIError(str(exc)) from None
    card = result.card
    if json_out:
        _emit_json({"card": card.to_dict(), "path": str(card.path), "seconds": result.seconds, "resumed": result.resumed,
                    "stages": [vars(s) for s in result.stages], "heldout": result.heldout, "plan_rounds": result.plan_rounds})
        return
    _print_heldout(result.heldout, card)
    if result.plan_rounds:
        _print_rounds(result.plan_rounds, card)
    from rich.table import Table as RichTable

    stages = RichTable(title="stages", title_justify="left")
    for col in ("stage", "seconds", "what"):
        stages.add_column(col, justify="right" if col == "seconds" else "left")
    for s in result.stages:
        what = s.detail + (" (cut by its time box)" if s.cut else "") + (" (done before: resumed)" if s.skipped else "")
        stages.add_row(s.name, f"{s.seconds:.1f}", _esc(what))
    _console().print(stages)
    acc = card.device_accuracy()
    _print_lines(_console(), [
        f"registered {card.id} in {_esc(str(card.path.parent))} ({result.seconds / 60:.1f} min): {card.preferred} model, held-out device "
        f"MAPE {acc['mape']:.1%}, Kendall tau {acc['kendall_tau']:.3f} on {acc['n']} samples",
        f"domain: {card.domain.describe()}",
        *([f"level: this machine ran at {card.level_factor:.3f} of its samples' timings at the end (the model's compute predictions "
           f"are multiplied by it; `shardopt costmodel level {card.id}` reads it again)"] if card.level else []),
        f"`--cost-model auto` now plans instances of hardware {card.hardware!r} inside that domain with it; name it with --cost-model {card.id}",
        *([f"policies trained on it: {', '.join(card.policies)} (`solve --solver {'|'.join(card.policies)}` with this model uses them)"]
          if card.policies else []),
    ])


def _policy_trainer() -> Any:
    """`calibrate --with-policies`' trainer: the RL solvers' (the measure layer does not import the solvers)."""
    from solvers.rl.train import train_policies_for

    return train_policies_for


def _proposer(solvers: list[str], time_limit: float, seed: int) -> Any:
    """The loop's proposer: each solver's plan of an instance with the model being calibrated (the plans a user's
    solves would make with it)."""
    from solvers.catalog import get_solver

    def propose(instance: Any, model: Any) -> list[tuple[str, Any]]:
        out = []
        for name in solvers:
            res = get_solver(name).solve(instance, model, time_limit=time_limit, seed=seed)
            if res.status.has_plan and res.plan is not None:
                out.append((name, res.plan))
        return out

    return propose


def _print_rounds(rounds: list[dict[str, Any]], card: Any) -> None:
    from rich.table import Table as RichTable

    heldout = card.accuracy.get("plan_level", {}).get("heldout_instances", [])
    table = RichTable(title=f"plan-level error: the model's predicted plan cost vs the plan measured on this machine "
                            f"({len(heldout)} held-out instances; the loop learns from the others)", title_justify="left")
    for col in ("round", "level", "plans", "MAPE", "mean signed error", "Kendall tau", "learning instances' plans: MAPE / signed"):
        table.add_column(col, justify="right")
    for r in rounds:
        tau = r.get("kendall_tau")
        learning = r.get("learning")
        table.add_row("first fit" if r["round"] == 0 else str(r["round"]), f"{r['level']:.3f}" if "level" in r else "-", str(r["n"]), f"{r['mape']:.1%}", f"{r['bias']:+.1%}",
                      "-" if tau is None or tau != tau else f"{tau:.3f}",
                      f"{learning['mape']:.1%} / {learning['bias']:+.1%} ({learning['n']})" if learning else "-")
    _console().print(table)


def _print_heldout(heldout: dict[str, dict[str, Any]], card: Any) -> None:
    from rich.table import Table as RichTable

    bands = [b for b in next(iter(heldout.values()))["bands"]]
    table = RichTable(title=f"held-out device accuracy ({card.samples.get('test', 0)} test-pool samples measured on this machine): MAPE / Kendall tau",
                      title_justify="left")
    table.add_column("model")
    for b in bands:
        n = next(iter(heldout.values()))["bands"][b]["n"]
        table.add_column(f"{b} (n={n})", justify="right")
    for label, doc in heldout.items():
        cells = []
        for b in bands:
            m = doc["bands"].get(b, {})
            tau = m.get("kendall_tau")
            cells.append("-" if "mape" not in m else f"{m['mape']:.1%} / " + ("-" if tau is None or tau != tau else f"{tau:.2f}"))
        table.add_row(_esc(label), *cells)
    _console().print(table)


def _fit_profile(data: Path, out: Path, profile: str, holdout: float, seed: int, name: str | None, host_link: Path | None,
                 json_out: bool) -> None:
    """The analytic model's profile constants fitted to measured timings; the error before and after."""
    import datetime
    import json
    import sys

    from costmodels.calibrate import CalibrationError
    from costmodels.calibrate import calibrate as fit
    from shardopt.core.hardware import get_profile, load_profile, profile_to_dict
    from shardopt.measure.collect import read_samples

    try:
        base = load_profile(profile) if profile.endswith(".json") else get_profile(profile)
    except (KeyError, ValueError) as exc:
        raise CLIError(f"--profile: {exc.args[0]}") from None
    if not data.is_file():
        raise CLIError(f"{data}: no such file")
    try:
        samples = list(read_samples(data, "compute"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CLIError(f"{data}: not a JSONL file of samples ({exc})") from None
    backends = sorted({str(s.get("backend")) for s in samples})
    link = _host_link_fit(host_link) if host_link is not None else None
    try:
        result = fit(samples, base, holdout=holdout, seed=seed, name=name)
    except CalibrationError as exc:
        raise CLIError(f"{data}: {exc}") from None
    fitted_profile = result.profile
    if link is not None:
        from dataclasses import replace

        fitted_profile = replace(fitted_profile, **link["constants"])
    record = {
        "data": str(data),
        "backends": backends,
        "command": "shardopt " + " ".join(sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
        **result.to_dict(),
    }
    if link is not None:
        record["host_link"] = link
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile_to_dict(fitted_profile, calibration=record), indent=1) + "\n")
    if json_out:
        _emit_json({"out": str(out), **record})
        return
    from rich.table import Table as RichTable

    table = RichTable(title=f"{base.name} -> {result.profile.name}: analytic model vs {', '.join(backends)} measurements")
    for col in ("samples", "split", "profile", "median |err| fwd", "median |err| bwd", "spearman fwd", "spearman bwd", "kendall fwd", "kendall bwd"):
        table.add_column(col, justify="right" if col not in ("split", "profile") else "left")
    for split, before, after in (("train", result.train_before, result.train_after), ("hold-out", result.holdout_before, result.holdout_after)):
        if before is None or after is None:
            continue
        for label, a in (("before", before), ("after", after)):
            table.add_row(str(a.samples), split, label, f"{a.median_abs_rel_error_fwd:.1%}", f"{a.median_abs_rel_error_bwd:.1%}",
                          f"{a.spearman_fwd:.3f}", f"{a.spearman_bwd:.3f}", f"{a.kendall_fwd:.3f}", f"{a.kendall_bwd:.3f}")
    console = _console()
    console.print(table)
    if "sim" in backends:
        _print_lines(console, ["warning: some samples were judged by the simulator, not measured"])
    if link is not None:
        c = link["constants"]
        _print_lines(console, [f"host link ({_esc(str(host_link))}, {_esc(str(link['gpu']))}): {c['host_row_rate'] / 1e6:.1f} M rows/s + "
                               f"{c['host_gather_bandwidth'] / 1e9:.0f} GB/s per row read (fit within {link['max_rel_error']:.1%}), "
                               f"bulk copies {c['host_link_bandwidth'] / 1e9:.1f} GB/s"])
    _print_lines(console, [f"wrote {_esc(str(out))} (use it with --cost-model analytic:{_esc(str(out))})"])


def _host_link_fit(path: Path) -> dict[str, Any]:
    """The profile constants a host-link probe gives (costmodels.host_link): row-gather rate and bandwidth, and the
    link's bandwidth as the slower of the two bulk copies; CLIError naming the file for a bad probe."""
    import json

    from costmodels.host_link import fit_host_rows

    try:
        probe = json.loads(path.read_text())
    except FileNotFoundError:
        raise CLIError(f"--host-link: {path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CLIError(f"--host-link: {path}: not valid JSON ({exc})") from None
    try:
        if not isinstance(probe, dict):
            raise ValueError("not a host-link probe (a JSON object from benchmarks/host_link_probe.py)")
        fitted = fit_host_rows(probe)
        copies = [float(probe[k]["gb_per_s"]) * 1e9 for k in ("copy_h2d", "copy_d2h")]
    except KeyError as exc:
        raise CLIError(f"--host-link: {path}: no field {exc.args[0]!r} (not the output of benchmarks/host_link_probe.py?)") from None
    except (TypeError, ValueError) as exc:
        raise CLIError(f"--host-link: {path}: {exc.args[0] if exc.args else exc}") from None
    return {"probe": str(path), "gpu": probe.get("gpu"), "date": probe.get("date"), "max_rel_error": fitted.max_rel_error,
            "constants": {"host_row_rate": fitted.host_row_rate, "host_gather_bandwidth": fitted.host_gather_bandwidth,
                          "host_link_bandwidth": min(copies)}}


