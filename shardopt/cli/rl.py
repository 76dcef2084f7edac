"""`shardopt rl train`: train the DreamShard / AutoShard placement policies on an instance suite (resumable)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    CLIError,
    JsonOpt,
    ModelsOpt,
    _choose_cost_model,
    _console,
    _emit_json,
    _esc,
    _guard,
    _print_lines,
    _progress,
    app,
)

rl_app = typer.Typer(help="Reinforcement-learning placement policies: train (the solvers `dreamshard` / `autoshard` use them).", no_args_is_help=True)
app.add_typer(rl_app, name="rl")


class Algo(str, Enum):
    dreamshard = "dreamshard"
    autoshard = "autoshard"


def _shape(text: str) -> tuple[int, int]:
    try:
        t, d = text.lower().split("x")
        shape = (int(t), int(d))
    except ValueError:
        raise CLIError(f"--shape: {text!r} is not TABLESxDEVICES (e.g. 50x4)") from None
    if shape[0] < 1 or shape[1] < 1:
        raise CLIError(f"--shape: {text!r}: tables and devices must be >= 1")
    return shape


@rl_app.command("train")
def train_cmd(
    algo: Annotated[Algo, typer.Option("--algo", "-a", help="Which policy: dreamshard (REINFORCE, shared device scorer) or autoshard (LSTM A2C).")],
    suite: Annotated[Path, typer.Option("--suite", metavar="DIR", help="Directory of training instances (e.g. instances/suites/dreamshard-train).")],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="CKPT.pt", help="Checkpoint to write (its inference export goes beside it as .npz).")],
    episodes: Annotated[int, typer.Option("--episodes", "-n", min=1, help="Total rollouts to train for (with --resume: including those already done).")] = 8000,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of initialisation, instance draws and sampling (a resumed run restores its RNG state).")] = 0,
    cost_model: Annotated[str, typer.Option("--cost-model", "-c", help="The estimated MDP's cost model: auto (the model calibrated on the suite's hardware, else analytic), analytic[:PROFILE], neural, a calibrated model's id or MODEL.npz.")] = "auto",
    models: ModelsOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue training CKPT (weights, optimizer, episode counter, RNG state).")] = False,
    rollouts: Annotated[int, typer.Option("--rollouts", min=2, help="Rollouts per update, in lock-step on one instance.")] = 16,
    learning_rate: Annotated[float, typer.Option("--learning-rate", help="Adam's learning rate.")] = 1e-3,
    entropy: Annotated[float, typer.Option("--entropy", help="Entropy bonus weight.")] = 0.01,
    hidden: Annotated[int, typer.Option("--hidden", min=4, help="Hidden width of the networks (new checkpoints only).")] = 64,
    shape: Annotated[list[str] | None, typer.Option("--shape", metavar="TxD", help="Train only on instances of TABLES x DEVICES (repeatable), e.g. 50x4.")] = None,
    cost_updates: Annotated[bool, typer.Option("--cost-updates/--no-cost-updates", help="dreamshard + neural cost model: fine-tune the cost network on plans judged by the analytic model.")] = True,
    cost_update_every: Annotated[int, typer.Option("--cost-update-every", min=1, help="Policy updates between cost-network rounds.")] = 25,
    threads: Annotated[int, typer.Option("--threads", min=1, help="torch CPU threads.")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """Train a placement policy on the cost model (the estimated MDP), with a progress bar and a resumable checkpoint."""
    with _guard(json_out):
        import os
        import sys

        if "numpy" not in sys.modules:  # numpy's BLAS threads fight torch's for the cores: give it the same budget
            os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
            os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        from costmodels.registry import get_cost_model
        from solvers.rl.common import RLTrainError, TrainSettings
        from solvers.rl.train import load_suite, train_policy

        if out.suffix != ".pt":
            raise CLIError(f"--out: {out} should end in .pt (the inference export is written beside it as {out.with_suffix('.npz').name})")
        if out.exists() and not resume:
            raise CLIError(f"--out: {out} exists: pass --resume to continue training it, or choose another path")
        shapes = [_shape(s) for s in shape] if shape else None
        if cost_model != "auto":
            get_cost_model(cost_model, models_dir=models)  # an unknown name fails before the suite is read
        try:
            instances = load_suite(suite, shapes)
        except RLTrainError as exc:
            raise CLIError(f"--suite: {exc}") from None
        # one model for the whole suite: `auto` chooses it for the suite's first instance (a suite names one hardware)
        model = _choose_cost_model(cost_model, instances[0][1], models).model
        settings = TrainSettings(
            algo=algo.value, episodes=episodes, rollouts=rollouts, learning_rate=learning_rate, entropy=entropy, seed=seed,
            threads=threads, hidden=hidden, cost_updates=cost_updates, cost_update_every=cost_update_every,
        )
        meta = {"suite": str(suite), "shapes": [f"{t}x{d}" for t, d in shapes] if shapes else None, "command": ("shardopt " + " ".join(sys.argv[1:]))}
        resumed = resume and out.exists()
        with _progress(f"training {algo.value}", enabled=not json_out) as tick:
            try:
                summary: dict[str, Any] = train_policy(instances, model, settings, out, resume=resume, progress=tick, meta=meta)
            except RLTrainError as exc:
                raise CLIError(str(exc)) from None
            except ValueError as exc:  # an unreadable checkpoint
                raise CLIError(f"--out: {exc}") from None
        summary["resumed"] = resumed
        summary["instances"] = len(instances)
        if json_out:
            _emit_json(summary)
            return
        first, last = summary["mean_cost_scales_first"], summary["mean_cost_scales_last"]
        lines = [
            (
                f"{'resumed' if resumed else 'trained'} {algo.value} on {len(instances)} instances of {_esc(str(suite))} with {_esc(summary['cost_model'])}: "
                f"{summary['episodes']} episodes, {summary['updates']} updates, {summary['train_seconds']:.1f} s of training"
            ),
        ]
        if first is not None and last is not None:
            lines.append(f"mean sampled plan cost (units of each instance's scale): first tenth {first:.3f}, last tenth {last:.3f}")
        if summary.get("cost_network_fine_tuned"):
            lines.append(f"the neural cost network was fine-tuned on plans judged by the analytic model: {_esc(summary['cost_network'])} (use it with --cost-model)")
        lines.append(f"wrote {_esc(summary['out'])} (resumable) and {_esc(summary['export'])} (solve with it: shardopt solve ... --solver {algo.value} -O checkpoint={_esc(summary['export'])})")
        _print_lines(_console(), lines)
