"""What every `shardopt` command shares: errors and exit statuses, the console, JSON output, the guard, renderers.

Contract (docs/architecture.md, "Errors and exits"): human output is a rich table; `--json` prints exactly one JSON document on
stdout and nothing else there. Exit status: 0 done; 2 bad input (usage, unreadable or invalid file, unknown solver /
cost model / backend: the message names the field or the name); 3 infeasible or no plan found (the message says
why); 1 anything unexpected (a short message; the traceback only with SHARDOPT_DEBUG=1). Errors go to stderr.

Imports of the project's heavier parts happen inside the commands, so importing this module (and running
`shardopt solve --solver greedy`) never loads torch, OR-Tools or PuLP.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shardopt.core.units import fmt_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from costmodels.base import DeviceCosts
    from shardopt.core.ir import Instance, Shard

DEBUG_ENV = "SHARDOPT_DEBUG"

# when this command started (the first import of the CLI): `solve --time-limit` bounds the command, so start-up and
# reading the instance come out of the solver's share (solver_time_limit)
COMMAND_STARTED = time.perf_counter()
# ... but the solver always gets at least this share of the limit: a start-up slower than the limit (a loaded machine)
# still leaves the solver time to search, and the command then ends at most that start-up past half the limit
SOLVER_SHARE_MIN = 0.5

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3

app = typer.Typer(
    name="shardopt",
    help="Embedding-table sharding as min-max partitioning: solve, judge and inspect plans.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# ---------------------------------------------------------------------------------------------------------------
# errors and output


class CLIError(Exception):
    """A failure the user can act on, with the exit status it maps to."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT, kind: str = "bad_input", extra: dict | None = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.kind = kind
        self.extra = extra or {}


def _console(stderr: bool = False) -> Console:
    """A rich console on the *current* stdout / stderr (tests swap them). Wide when not a terminal."""
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


# while a --json command runs, file descriptor 1 points at stderr (`_native_output_to_stderr`) and the document goes
# to this duplicate of the real stdout
_JSON_FD: int | None = None


def _emit_json(doc: Any) -> None:
    text = json.dumps(doc, indent=1, default=_json_default) + "\n"
    if _JSON_FD is not None:
        sys.stdout.flush()
        data = text.encode()
        while data:
            data = data[os.write(_JSON_FD, data):]
        return
    sys.stdout.write(text)
    sys.stdout.flush()


@contextmanager
def _native_output_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr while a --json command runs: native solver code (HiGHS inside scipy, CBC)
    writes to it directly, past Python's sys.stdout, and a line of theirs before the document makes stdout no JSON.
    The document itself goes to the real stdout (`_emit_json`). Where stdout is no file (a test's captured stream),
    nothing native can reach it and nothing changes."""
    global _JSON_FD
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    if _JSON_FD is not None or out_fd != 1:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(out_fd)
    os.dup2(err_fd, out_fd)
    _JSON_FD = saved
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, out_fd)
        os.close(saved)
        _JSON_FD = None


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _err(message: str, style: str = "red", prefix: str = "error") -> None:
    from rich.text import Text

    text = Text()
    if prefix:
        text.append(f"{prefix}: ", style=f"bold {style}")
    text.append(message)
    _console(stderr=True).print(text, soft_wrap=True)


def _warn(message: str) -> None:
    _err(message, style="yellow", prefix="warning")


def _classify(exc: BaseException) -> CLIError | None:
    """A user's mistake raised below the CLI (shardopt.core.errors.UserError: every such error derives from it) as a
    CLIError, bad input; None for anything unexpected."""
    from shardopt.core.errors import UserError

    if isinstance(exc, CLIError):
        return exc
    if isinstance(exc, UserError):
        return CLIError(str(exc), EXIT_BAD_INPUT, exc.error_kind)
    return None


def _flags_show_no_type() -> None:
    """Typer (0.2x) prints a type column of `<bool>` beside every on/off flag (--json, --help), which reads as if the
    flag took a value. A flag has no value to describe: its type column is left empty. Done once, at import."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_shardopt_flags", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> Any:
        if getattr(self, "is_bool_flag", False) and self.metavar is None:
            return None
        return shown(self, ctx)

    display_type_rich._shardopt_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_type()


@contextmanager
def _guard(json_out: bool = False) -> Iterator[None]:
    """Map every exception of a command body to its exit status and a message on stderr (JSON error on stdout).
    With `json_out`, native code's writes to stdout go to stderr (`_native_output_to_stderr`)."""
    with _native_output_to_stderr() if json_out else nullcontext():
        try:
            yield
        except (typer.Exit, typer.Abort, KeyboardInterrupt, BrokenPipeError):
            raise
        except Exception as exc:  # noqa: BLE001 - the one place that turns exceptions into exit statuses
            known = _classify(exc)
            if known is None:
                if os.environ.get(DEBUG_ENV):
                    traceback.print_exc(file=sys.stderr)
                    hint = ""
                else:
                    hint = f" (set {DEBUG_ENV}=1 for the traceback)"
                known = CLIError(f"unexpected {type(exc).__name__}: {exc}{hint}", EXIT_UNEXPECTED, "unexpected")
            label = {EXIT_INFEASIBLE: "infeasible" if known.kind == "infeasible" else "no plan"}.get(known.exit_code, "error")
            _err(known.message, prefix=label)
            if json_out:
                _emit_json({**known.extra, "error": {"kind": known.kind, "exit_status": known.exit_code, "message": known.message}})
            raise typer.Exit(known.exit_code) from None


# ---------------------------------------------------------------------------------------------------------------
# formatting helpers


_fmt_bytes = fmt_bytes  # (shardopt.core.units: the planner's stats log formats bytes the same way)


def _fmt_ms(x: float) -> str:
    return f"{x:.3f}"


def _fmt_num(x: float) -> str:
    if x == int(x) and abs(x) < 1e6:
        return f"{int(x):,}"
    return f"{x:.3g}"


def _shard_label(shard: Shard, instance: Instance | None) -> str:
    return shard.label


def _shards_by_device(shards: list[Shard], num_devices: int) -> list[list[Shard]]:
    out: list[list[Shard]] = [[] for _ in range(num_devices)]
    for s in shards:
        if 0 <= s.device < num_devices:
            out[s.device].append(s)
    return out


def _esc(text: str) -> str:
    """User text (table names, paths) inside rich markup: brackets stay brackets."""
    from rich.markup import escape

    return escape(text)


def _names_cell(shards: list[Shard], instance: Instance | None, show: int = 3) -> str:
    if not shards:
        return "0"
    names = [_shard_label(s, instance) for s in shards[:show]]
    more = f", +{len(shards) - show}" if len(shards) > show else ""
    return _esc(f"{len(shards)}: " + ", ".join(names) + more)


def _device_table(
    title: str,
    instance: Instance,
    shards: list[Shard],
    memory_use: Any,
    costs: DeviceCosts | None,
    sync_ms: Any = None,
) -> Any:
    """One row per device. `sync_ms`: a 2D plan's replica sync per group rank (costmodels/replica_sync.py), its own
    column and part of the total."""
    from rich.table import Table

    topo = instance.topology
    table = Table(title=_esc(title), title_justify="left", show_lines=False)
    table.add_column("dev", justify="right")
    if topo.num_hosts > 1:
        table.add_column("host", justify="right")
    table.add_column("shards", overflow="fold", max_width=48)
    table.add_column("memory used / capacity", justify="right")
    if costs is not None:
        for head in ("fwd compute", "bwd compute", "fwd comm", "bwd comm") + (("sync",) if sync_ms is not None else ()) + ("total",):
            table.add_column(f"{head} ms", justify="right")
    per_dev = _shards_by_device(shards, topo.num_devices)
    bottleneck = costs.bottleneck if costs is not None else None
    for d in range(topo.num_devices):
        cap = topo.capacity(d)
        used = int(memory_use[d])
        mem = f"{_fmt_bytes(used)} / {_fmt_bytes(cap)} ({100 * used / cap:.0f}%)"
        row = [str(d)]
        if topo.num_hosts > 1:
            row.append(str(topo.host_of(d)))
        row += [_names_cell(per_dev[d], instance), mem]
        if costs is not None:
            row += [_fmt_ms(float(v)) for v in costs.columns[d]]
            extra = float(sync_ms[d]) if sync_ms is not None else 0.0
            row += ([_fmt_ms(extra)] if sync_ms is not None else []) + [_fmt_ms(float(costs.total[d]) + extra)]
        style = "red" if used > cap else ("bold" if d == bottleneck else None)
        table.add_row(*row, style=style)
    return table


def _cost_summary(costs: DeviceCosts, label: str) -> list[str]:
    return [
        f"plan cost {costs.max_cost:.3f} ms (max over devices of fwd + bwd compute + comm; {label})",
        f"critical path {costs.critical_path:.3f} ms · imbalance {costs.imbalance:.3f} (max / mean) · "
        f"bottleneck device {costs.bottleneck}",
    ]


def _machine_fingerprint(backend: str, asked_by: str = "--backend cuda") -> Any:
    """This machine's fingerprint for a measured backend: its CPU, or (cuda) its GPU; CLIError, starting with
    `asked_by` (what asked for the GPU), when no GPU answers."""
    from shardopt.core.fingerprint import cpu_fingerprint

    if backend == "cpu":
        return cpu_fingerprint()
    from shardopt.measure.backends.base import BackendUnavailable
    from shardopt.measure.backends.cuda import gpu_fingerprint

    try:
        return gpu_fingerprint()
    except BackendUnavailable as exc:
        raise CLIError(f"{asked_by}: {exc}") from None


def _command_line() -> str:
    """The command as typed, for records (a report's "made by", a model card's "command")."""
    import shlex

    return "shardopt " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _print_lines(console: Console, lines: list[str]) -> None:
    from rich.text import Text

    for line in lines:
        console.print(Text(line), soft_wrap=True)


def _memory_doc(instance: Instance, memory_use: Any) -> list[dict[str, int]]:
    return [
        {"device": d, "used_bytes": int(memory_use[d]), "capacity_bytes": int(instance.topology.capacity(d))}
        for d in range(instance.topology.num_devices)
    ]


@contextmanager
def _progress(description: str, enabled: bool) -> Iterator[Any]:
    """A rich progress bar on stderr for long work; yields a `tick(done, total)` callback (None when disabled)."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(), console=_console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield tick


@contextmanager
def _progress_stages(enabled: bool) -> Iterator[Any]:
    """A progress bar per stage of a long pipeline (calibration): yields `tick(stage, done, total)`; a new stage name
    starts a new bar, the finished ones stay."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=_console(stderr=True), transient=False) as bar:
        tasks: dict[str, Any] = {}

        def tick(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield tick


def _solver_with_options(name: str, options: list[str]) -> Any:
    """The named solver built with `-O KEY=VALUE` options, each checked against its options dataclass: an unknown
    name, option or a value it does not allow is bad input naming the option, the value and what is allowed."""
    from solvers.catalog import get_solver
    from solvers.options import OptionError, parse_option_text

    try:
        return get_solver(name, **parse_option_text(options))
    except OptionError as exc:
        raise CLIError(f"--option: {exc}") from None


def _load_instance(path: Path) -> Instance:
    from shardopt.core.ir import load_instance

    return load_instance(path)


def _cost_model(name: str | None) -> Any:
    """A cost model by name, for commands that have no instance to choose for (`auto` needs one: _choose_cost_model)."""
    from costmodels.registry import DEFAULT_COST_MODEL, get_cost_model

    return get_cost_model(name or DEFAULT_COST_MODEL)


def _choose_cost_model(name: str | None, instance: Instance, models: Path | None = None, quiet: bool = False) -> Any:
    """The cost model for `instance` (costmodels.auto: None or 'auto' picks the calibrated model of the instance's
    hardware, else the analytic model with a notice); the notice and any warning (a model measured on other hardware,
    an instance outside its domain) go to stderr unless `quiet`. Returns the CostModelChoice."""
    from costmodels.auto import choose_cost_model

    choice = choose_cost_model(name, instance, models)
    if not quiet:
        if choice.notice:
            _err(choice.notice, style="cyan", prefix="note")
        for w in choice.warnings:
            _warn(w)
    return choice


def _model_label(choice: Any, instance: Instance) -> str:
    """How output names the model a command used: the registry label, the card's id and machine where it has one."""
    from shardopt.measure.evaluate import cost_model_label

    label = cost_model_label(choice.model, instance)
    card = choice.card
    if card is not None:
        named = choice.asked if "/" in choice.asked else card.id  # (ID/analytic, ID/neural or a path as given)
        label = f"{named} (calibrated on {card.fingerprint.describe()}, {card.backend} judge)"
    return ("auto: " + label) if choice.asked == "auto" else label




JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
ModelsOpt = Annotated[
    Path | None,
    typer.Option("--models", metavar="DIR", help="The calibrated-model store \\[default: $SHARDOPT_MODELS, else ~/.cache/shardopt/models].", show_default=False),
]
CostModelOpt = Annotated[
    str | None,
    typer.Option("--cost-model", "-c", help="Cost model: auto (the model calibrated on the instance's hardware, else analytic), analytic[:PROFILE], neural, a shipped or store model's id, MODEL.npz \\[default: auto].", show_default=False),
]


class PoolChoice(str, Enum):
    """Which half of the standard table pool a command draws from (shardopt.data.pools.standard_pool_path)."""

    train = "train"
    test = "test"
    all = "all"


def _check_repeats(value: str) -> str:
    """--repeats: a count >= 1 or 'auto' (a usage error otherwise, before any file is read)."""
    v = value.strip().lower()
    if v == "auto" or (v.isdigit() and int(v) >= 1):
        return v
    raise typer.BadParameter(f"{value!r} is not a count >= 1 or 'auto'")


RepeatsOpt = Annotated[
    str,
    typer.Option("--repeats", "-r", callback=_check_repeats,
                 help="Measured backends: rounds (every device timed once per round, interleaved), or 'auto': until the 95 % CI is within --target."),
]


EngineOpt = Annotated[
    str,
    typer.Option("--engine", help="Where the work runs: local (this machine) | ray (a Ray cluster; see --address and docs/cluster.md)."),
]
AddressOpt = Annotated[
    str | None,
    typer.Option("--address", metavar="ADDR", help="With --engine ray: the cluster to join ('auto': the one this machine is part of) \\[default: start a local Ray].", show_default=False),
]


def _engine(name: str, address: str | None, jobs: int = 1) -> Any:
    """The engine of --engine / --address / --jobs (shardopt.measure.engine); Ray is imported only for 'ray'."""
    from shardopt.measure.engine import make_engine

    return make_engine(name.strip().lower(), jobs=jobs, address=address)


def _check_engine_name(engine: str) -> None:
    """--engine names a known engine (for commands that run locally whatever it says, e.g. the sim judge)."""
    from shardopt.measure.engine import ENGINES, EngineError

    if engine not in ENGINES:
        raise EngineError(f"--engine: unknown engine {engine!r} (known: {', '.join(ENGINES)})")


def solver_time_limit(limit: float | None) -> float | None:
    """The time a solve started now may take so that the command ends within `limit` seconds of its start (at least
    SOLVER_SHARE_MIN of it); None (the solver's own budget) stays None."""
    if limit is None:
        return None
    return max(limit - (time.perf_counter() - COMMAND_STARTED), SOLVER_SHARE_MIN * limit)


def _plan_scope(instance: Instance, plan: Any) -> tuple[Instance, Any]:
    """What a plan places and what else its iteration pays: a 2D instance's group plan places the sharding group's flat
    instance and pays the replica sync (solvers/two_d.py, costmodels/replica_sync.py); a flat plan, the instance and
    nothing (None). Exit 2 where plan and instance disagree on being 2D."""
    if instance.two_d is None and plan.sharding_group_size is None:
        return instance, None
    if instance.two_d is None or plan.sharding_group_size is None:
        which = ("has no two_d section, but the plan is a sharding group's (sharding_group_size)" if instance.two_d is None
                 else "is 2D (two_d), but the plan names no sharding_group_size")
        raise CLIError(f"the instance {which}: use a plan with the instance it was solved for")
    from costmodels.replica_sync import replica_sync
    from solvers.two_d import planned_instance

    return planned_instance(instance, plan), replica_sync(instance, plan, plan.sharding_group_size)


def _sync_lines(sync: Any, embedding_ms: float, judge: str) -> list[str]:
    """A 2D plan's iteration: the judged embedding cost plus the analytic replica sync."""
    if sync is None:
        return []
    doc = sync.to_dict()
    links = ", ".join(doc["links"]) or "none"
    return [f"2D: {doc['replicas']} replicas of a group of {doc['group_size']} ranks; per iteration embedding "
            f"{embedding_ms:.3f} ms ({judge}) + replica sync {sync.ms:.3f} ms (analytic, over {links}; strategy "
            f"{doc['strategy']}, sync every {doc['sync_interval']}) = {embedding_ms + sync.ms:.3f} ms"]
