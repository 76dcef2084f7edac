"""The `shardopt` command line: solve, evaluate, inspect, solvers, schema (suites: shardopt.cli_suites).

Contract (DESIGN.md, "CLI contract"): human output is a rich table; `--json` prints exactly one JSON document on
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
import traceback
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Optional

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from costmodels.base import DeviceCosts
    from shardopt.ir import Instance, Plan, Shard

DEFAULT_SOLVER = "neuroshard"  # the one place the default lives
DEBUG_ENV = "SHARDOPT_DEBUG"

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


def _emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=1, default=_json_default) + "\n")
    sys.stdout.flush()


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
    """Known user errors raised below the CLI, as CLIErrors; None for anything unexpected."""
    from shardopt.ir import IRError

    if isinstance(exc, CLIError):
        return exc
    if isinstance(exc, IRError):
        return CLIError(str(exc), EXIT_BAD_INPUT, "invalid_input")
    mod = sys.modules.get("solvers.registry")
    if mod is not None and isinstance(exc, mod.UnknownSolverError):
        return CLIError(str(exc), EXIT_BAD_INPUT, "unknown_solver")
    mod = sys.modules.get("costmodels.registry")
    if mod is not None and isinstance(exc, getattr(mod, "UnknownCostModelError", ())):
        return CLIError(str(exc), EXIT_BAD_INPUT, "unknown_cost_model")
    mod = sys.modules.get("shardopt.suites")
    if mod is not None and isinstance(exc, mod.SuiteError):
        return CLIError(str(exc), EXIT_BAD_INPUT, "bad_suite_request")
    mod = sys.modules.get("shardopt.collect")
    if mod is not None and isinstance(exc, mod.CollectError):
        return CLIError(str(exc), EXIT_BAD_INPUT, "bad_collect_request")
    mod = sys.modules.get("shardopt.evaluate")
    if mod is not None and isinstance(exc, mod.EvaluationError):
        return CLIError(str(exc), EXIT_BAD_INPUT, "unknown_backend" if isinstance(exc, mod.UnknownBackendError) else "backend")
    return None


@contextmanager
def _guard(json_out: bool = False) -> Iterator[None]:
    """Map every exception of a command body to its exit status and a message on stderr (JSON error on stdout)."""
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


def _fmt_bytes(n: float) -> str:
    n = float(n)
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _fmt_ms(x: float) -> str:
    return f"{x:.3f}"


def _fmt_num(x: float) -> str:
    if x == int(x) and abs(x) < 1e6:
        return f"{int(x):,}"
    return f"{x:.3g}"


def _shard_label(shard: Shard, instance: Instance | None) -> str:
    label = shard.table
    if shard.col_offset or shard.cols is not None:
        end = shard.col_offset + shard.cols if shard.cols is not None else "end"
        label += f"[c{shard.col_offset}:{end}]"
    if shard.row_offset or shard.rows is not None:
        end = shard.row_offset + shard.rows if shard.rows is not None else "end"
        label += f"[r{shard.row_offset}:{end}]"
    if shard.replicated:
        label += "(rep)"
    return label


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
) -> Any:
    from rich.table import Table

    topo = instance.topology
    table = Table(title=_esc(title), title_justify="left", show_lines=False)
    table.add_column("dev", justify="right")
    if topo.num_hosts > 1:
        table.add_column("host", justify="right")
    table.add_column("shards", overflow="fold", max_width=48)
    table.add_column("memory used / capacity", justify="right")
    if costs is not None:
        for head in ("fwd compute", "bwd compute", "fwd comm", "bwd comm", "total"):
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
            row += [_fmt_ms(float(v)) for v in costs.columns[d]] + [_fmt_ms(float(costs.total[d]))]
        style = "red" if used > cap else ("bold" if d == bottleneck else None)
        table.add_row(*row, style=style)
    return table


def _cost_summary(costs: DeviceCosts, label: str) -> list[str]:
    return [
        f"plan cost {costs.max_cost:.3f} ms (max over devices of fwd + bwd compute + comm; {label})",
        f"critical path {costs.critical_path:.3f} ms · imbalance {costs.imbalance:.3f} (max / mean) · "
        f"bottleneck device {costs.bottleneck}",
    ]


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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(), console=_console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield tick


def _solver_with_options(name: str, options: list[str]) -> Any:
    """get_solver(name, **options) from KEY=VALUE strings; a bad option is bad input naming the option."""
    import inspect
    import json

    from solvers.options import check_option_types
    from solvers.registry import solver_class

    parsed: dict[str, Any] = {}
    for item in options:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--option: {item!r} is not KEY=VALUE")
        try:
            parsed[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key.strip()] = raw
    solver_cls = solver_class(name)  # (unknown solver names fail here)
    accepted = inspect.signature(solver_cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    for key in parsed:
        if key not in accepted and not takes_any:
            known = ", ".join(k for k in accepted if k not in ("self", "config", "options")) or "none"
            raise CLIError(f"--option: solver {name!r} has no option {key!r} (its options: {known})")
    try:
        check_option_types(solver_cls, parsed)
        return solver_cls(**parsed)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"--option: {exc}") from None


def _load_instance(path: Path) -> Instance:
    from shardopt.ir import load_instance

    return load_instance(path)


def _cost_model(name: str | None) -> Any:
    from costmodels.registry import DEFAULT_COST_MODEL, get_cost_model

    return get_cost_model(name or DEFAULT_COST_MODEL)


# ---------------------------------------------------------------------------------------------------------------
# commands


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]


@app.command()
def solve(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance to place.", show_default=False)],
    solver: Annotated[str, typer.Option("--solver", "-s", help="Solver name (see `shardopt solvers`).")] = DEFAULT_SOLVER,
    cost_model: Annotated[
        Optional[str],
        typer.Option("--cost-model", "-c", help="Cost model the solver searches with [default: analytic, the topology's profile].", show_default=False),
    ] = None,
    time_limit: Annotated[Optional[float], typer.Option("--time-limit", min=0.0, help="Seconds the solver may search.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed, same plan.")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", metavar="PLAN.json", help="Write the plan here.")] = None,
    option: Annotated[
        Optional[list[str]],
        typer.Option("--option", "-O", metavar="KEY=VALUE", help="A solver option (repeatable), e.g. -O max_split=4 -O split_apart=false; values are JSON, else text."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Place an instance's tables on its devices and print the plan with its predicted cost."""
    with _guard(json_out):
        from shardopt.evaluate import cost_model_label
        from shardopt.ir import save, to_dict
        from shardopt.memory import device_memory_use

        solver_obj = _solver_with_options(solver, option or [])  # unknown names / options fail before any file is read
        model = _cost_model(cost_model)
        instance = _load_instance(instance_path)
        result = solver_obj.solve(instance, model, time_limit=time_limit, seed=seed)
        head = {"instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()}}
        if not result.status.has_plan or result.plan is None:
            reason = result.reason or "the solver gave no reason"
            status = result.status.value
            if status == "infeasible":
                message = reason
            elif "not proven" in reason:
                message = reason
            else:
                message = f"{reason} (solver {solver} found no plan; the instance is not proven infeasible)"
            raise CLIError(
                message,
                EXIT_INFEASIBLE,
                "infeasible" if status == "infeasible" else "no_solution",
                extra={**head, "solver": solver, "status": status, "reason": reason, "wall_time_s": result.wall_time_s},
            )
        plan = result.plan
        costs = result.predicted if result.predicted is not None else model.plan_costs(instance, plan)
        memory = device_memory_use(instance, plan.shards)
        label = f"predicted by {cost_model_label(model, instance)}"
        if out is not None:
            try:
                save(plan, out)
            except OSError as exc:
                raise CLIError(f"{out}: cannot write the plan ({exc.strerror or exc})") from None
        if json_out:
            _emit_json(
                {
                    **head,
                    "solver": plan.solver,
                    "status": result.status.value,
                    "wall_time_s": result.wall_time_s,
                    "seed": seed,
                    "cost_model": cost_model_label(model, instance),
                    "lower_bound": result.lower_bound,
                    "predicted": costs.to_dict(),
                    "memory": _memory_doc(instance, memory),
                    "out": str(out) if out is not None else None,
                    "plan": to_dict(plan),
                }
            )
            return
        console = _console()
        title = f"plan for {instance.name or instance_path.name} by {plan.solver} ({label})"
        console.print(_device_table(title, instance, plan.shards, memory, costs))
        lines = _cost_summary(costs, label)
        status = f"solver {plan.solver}: {result.status.value} in {result.wall_time_s:.3f} s (seed {seed}"
        status += f", time limit {time_limit:g} s)" if time_limit is not None else ")"
        if result.lower_bound is not None:
            gap = (costs.max_cost - result.lower_bound) / costs.max_cost if costs.max_cost > 0 else 0.0
            what = result.info.get("bound_is_for") or "the solver's model"
            status += f" · lower bound {result.lower_bound:.3f} ms of {what} (gap {100 * gap:.1f}%)"
        lines.append(status)
        fallback = _fallback_line(result.info)
        if fallback:
            lines.append(fallback)
        neighbourhoods = any("neighbourhood_devices" in it for it in result.info.get("iterations", []))
        if neighbourhoods and "certified_bound" not in result.info and getattr(model, "name", None) == "analytic":
            lines.append(f"(solved a neighbourhood at a time: that bound is only the linear model's table cuts; a certified bound of "
                         f"the analytic model: shardopt bound {instance_path} --plan PLAN.json, or -O certified_bound=true)")
        lines.append(f"plan written to {out}" if out is not None else "plan not saved (use --out PLAN.json)")
        _print_lines(console, lines)


def _fallback_line(info: dict[str, Any]) -> str | None:
    """A heuristic that ran out of memory in its own order says so, and which fallback placed the tables (a plan
    from a memory-first pass is not the rule the user asked for)."""
    from solvers.heuristics import FALLBACK_STAGES

    if not info.get("fallback_used") or not info.get("failures"):
        return None
    first = info["failures"][0]
    stage = info["stage"]
    line = (f"memory ran out in the solver's own order (table {first['table']!r} after {first['placed']} tables); "
            f"placed by the fallback {stage} ({FALLBACK_STAGES.get(stage, stage)})")
    compared = info.get("fallbacks_compared") or {}
    others = [f"{name}'s {cost:.3f} ms" for name, cost in compared.items() if name != stage]
    if stage in compared and others:
        line += f": {compared[stage]:.3f} ms, cheaper than " + " and ".join(others)
    return line


@app.command()
def evaluate(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance.", show_default=False)],
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="A plan for it.", show_default=False)],
    backend: Annotated[str, typer.Option("--backend", "-b", help="Judge: sim (analytic, simulated) | cpu | cuda.")] = "sim",
    repeats: Annotated[int, typer.Option("--repeats", "-r", min=1, help="Timed repeats per phase (measured backends).")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed warm-up passes (measured backends).")] = 3,
    batch_size: Annotated[
        Optional[int], typer.Option("--batch-size", min=1, help="Time this batch instead of the workload's (CPU runs); every column is then for it.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Index-trace seed (measured backends).")] = 0,
    threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads for the cpu backend.")] = 1,
    max_rows: Annotated[
        Optional[int], typer.Option("--max-rows", min=1, help="Cap each shard's rows for timing (indices folded onto them; labelled).")
    ] = None,
    cache: Annotated[
        Optional[Path], typer.Option("--cache", metavar="FILE.sqlite", help="Measurement cache [default: $SHARDOPT_CACHE or ~/.cache/shardopt].")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Time everything again; store nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Check a plan and re-time it on a backend (the judge), per device."""
    with _guard(json_out):
        from shardopt.evaluate import evaluate_plan, hash_warning
        from shardopt.ir import load_plan
        from shardopt.plan_check import PlanError

        instance = _load_instance(instance_path)
        plan = load_plan(plan_path)
        warning = hash_warning(instance, plan)
        if warning:  # before the check: a plan for another instance usually fails it, and this says why
            _warn(f"{plan_path}: {warning}")
        measured = backend in ("cpu", "cuda")
        store: Any = None
        if measured and not no_cache:
            from shardopt.backends.cache import MeasurementCache

            store = MeasurementCache(cache) if cache is not None else None
        try:
            with _progress(f"timing devices on {backend}", enabled=measured and not json_out) as tick:
                ev = evaluate_plan(
                    instance, plan, backend, repeats=repeats, warmup=warmup, batch_size=batch_size, seed=seed,
                    threads=threads, max_rows=max_rows, cache=False if no_cache else store, progress=tick,
                )
        except PlanError as exc:
            raise CLIError(f"{plan_path}: {exc}", EXIT_BAD_INPUT, "invalid_plan",
                           extra={"violations": [v.message for v in exc.violations]}) from None
        if json_out:
            _emit_json(
                {
                    "instance": {"path": str(instance_path), "name": instance.name, "hash": instance.content_hash()},
                    "plan": {"path": str(plan_path), "solver": plan.solver, "cost_model": plan.cost_model,
                             "predicted_cost": plan.predicted_cost},
                    **ev.to_dict(),
                }
            )
            return
        console = _console()
        title = f"{plan_path.name} on {instance.name or instance_path.name}, judged by {ev.judge}"
        console.print(_device_table(title, instance, plan.shards, ev.memory_use, ev.costs))
        lines = _cost_summary(ev.costs, f"judged by {ev.judge}")
        if measured:
            cached = sum(1 for t in ev.timings if t and t.get("cached"))
            timed = sum(1 for t in ev.timings if t)
            lines.append(
                f"compute measured at batch {ev.batch_size} (median of {repeats} after {warmup} warm-ups; {cached} of {timed} devices from the cache); comm {ev.comm}"
            )
            lines += [f"warning: {w}" for w in ev.warnings if "batch scaled" in w]
        if plan.predicted_cost is not None:
            lines.append(
                f"the solver {plan.solver or '?'} predicted {plan.predicted_cost:.3f} ms"
                + (f" with {plan.cost_model}" if plan.cost_model else "")
            )
        _print_lines(console, lines)


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(metavar="FILE.json|DIR", help="An instance, a plan, or a suite directory.", show_default=False)],
    instance_path: Annotated[
        Optional[Path], typer.Option("--instance", "-i", metavar="INSTANCE.json", help="For a plan: its instance (memory and costs per device).")
    ] = None,
    top: Annotated[int, typer.Option("--top", min=0, help="How many of the largest tables to list.")] = 10,
    json_out: JsonOpt = False,
) -> None:
    """Summarise an instance (tables, memory, topology, workload), a plan (shards, memory, costs per device) or a suite directory."""
    with _guard(json_out):
        from shardopt.ir import Plan, load_document

        if path.is_dir():
            from shardopt.cli_suites import inspect_suite

            inspect_suite(path, json_out)
            return
        doc = load_document(path)
        if isinstance(doc, Plan):
            instance = _load_instance(instance_path) if instance_path is not None else None
            _inspect_plan(path, doc, instance, json_out)
        else:
            if instance_path is not None:
                _warn("--instance is only used when FILE.json is a plan; ignored")
            _inspect_instance(path, doc, top, json_out)


def _stats(values: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "median": float(np.median(a)), "mean": float(a.mean()), "max": float(a.max())}


def _inspect_instance(path: Path, instance: Instance, top: int, json_out: bool) -> None:
    import numpy as np

    from shardopt.feasibility import infeasibility_reason
    from shardopt.hardware import get_profile
    from shardopt.memory import table_bytes_array

    topo, work = instance.topology, instance.workload
    sizes = table_bytes_array(instance)
    caps = topo.capacities()
    total_mem = sum(caps)
    rows = _stats([t.rows for t in instance.tables])
    pooling = _stats([t.pooling_factor for t in instance.tables])
    dims = sorted({t.dim for t in instance.tables})
    order = [int(i) for i in np.argsort(-sizes, kind="stable")[:top]]
    reason = infeasibility_reason(instance)
    largest = [
        {
            "name": instance.tables[i].name,
            "rows": instance.tables[i].rows,
            "dim": instance.tables[i].dim,
            "pooling_factor": instance.tables[i].pooling_factor,
            "zipf": instance.tables[i].access.zipf,
            "bytes": int(sizes[i]),
            "share_of_largest_device": float(sizes[i] / max(caps)),
        }
        for i in order
    ]
    if json_out:
        _emit_json(
            {
                "kind": "instance",
                "path": str(path),
                "name": instance.name,
                "hash": instance.content_hash(),
                "metadata": instance.metadata,
                "tables": {"count": len(instance.tables), "rows": rows, "dims": dims, "pooling_factor": pooling},
                "memory": {
                    "table_bytes": int(sizes.sum()),
                    "total_bytes": int(total_mem),
                    "fraction": float(sizes.sum() / total_mem),
                    "largest_table_bytes": int(sizes.max()),
                },
                "topology": topo.model_dump(mode="json", exclude_none=True),
                "num_hosts": topo.num_hosts,
                "workload": work.model_dump(mode="json"),
                "feasibility": {"table_wise_necessary_conditions": reason is None, "reason": reason},
                "largest_tables": largest,
            }
        )
        return

    from rich.table import Table

    console = _console()
    profile = get_profile(topo.hardware)
    mem = _fmt_bytes(caps[0]) if len(set(caps)) == 1 else f"{_fmt_bytes(min(caps))} - {_fmt_bytes(max(caps))}"
    summary = Table(title=_esc(f"instance {instance.name or path.name} ({instance.content_hash()})"), title_justify="left", show_header=False)
    summary.add_column(style="bold")
    summary.add_column(overflow="fold")
    summary.add_row("tables", f"{len(instance.tables)}")
    summary.add_row("rows", f"{_fmt_num(rows['min'])} - {_fmt_num(rows['max'])} (median {_fmt_num(rows['median'])}, mean {_fmt_num(rows['mean'])})")
    summary.add_row("dims", ", ".join(str(d) for d in dims))
    summary.add_row("pooling factor", f"{pooling['min']:.3g} - {pooling['max']:.3g} (median {pooling['median']:.3g}, mean {pooling['mean']:.3g})")
    summary.add_row(
        "memory",
        f"tables need {_fmt_bytes(sizes.sum())} (weights + {work.optimizer.value} state) of {_fmt_bytes(total_mem)} in all "
        f"({100 * sizes.sum() / total_mem:.1f}%); largest table {_fmt_bytes(sizes.max())} "
        f"({100 * sizes.max() / max(caps):.1f}% of a device)",
    )
    hosts = f"{topo.num_hosts} host{'s' if topo.num_hosts > 1 else ''} of {topo.devices_per_host}"
    summary.add_row("topology", f"{topo.num_devices} x {profile.name} ({profile.description}); {hosts}; {mem} each")
    bw = []
    if topo.intra_host_bandwidth:
        bw.append(f"intra-host {topo.intra_host_bandwidth / 1e9:.1f} GB/s")
    if topo.inter_host_bandwidth:
        bw.append(f"inter-host {topo.inter_host_bandwidth / 1e9:.1f} GB/s")
    if bw:
        summary.add_row("bandwidth overrides", ", ".join(bw))
    summary.add_row("workload", f"batch {work.batch_size:,}, {work.optimizer.value}, {work.weight_dtype.value} weights")
    summary.add_row("feasibility", _esc(reason) if reason else "necessary conditions for a table-wise plan hold (each table fits a device, total fits)")
    for key in ("suite", "family", "generator", "seed"):
        if key in instance.metadata:
            summary.add_row(key, _esc(str(instance.metadata[key])))
    console.print(summary)
    if top:
        big = Table(title=f"largest tables ({min(top, len(instance.tables))} of {len(instance.tables)})", title_justify="left")
        for head in ("table", "rows", "dim", "pooling", "zipf", "bytes", "% of device"):
            big.add_column(head, justify="left" if head == "table" else "right")
        for t in largest:
            big.add_row(
                _esc(t["name"]), f"{t['rows']:,}", str(t["dim"]), f"{t['pooling_factor']:.3g}",
                "-" if t["zipf"] is None else f"{t['zipf']:.3g}", _fmt_bytes(t["bytes"]),
                f"{100 * t['share_of_largest_device']:.1f}",
            )
        console.print(big)


def _placement_kinds(plan: Plan) -> dict[str, int]:
    from collections import defaultdict

    by_table: dict[str, list[Shard]] = defaultdict(list)
    for s in plan.shards:
        by_table[s.table].append(s)
    kinds: dict[str, int] = defaultdict(int)
    for shards in by_table.values():
        if any(s.replicated for s in shards):
            kinds["replicated"] += 1
        elif len(shards) == 1:
            kinds["table-wise"] += 1
        elif all(s.row_offset == 0 and s.rows is None for s in shards):
            kinds["column-wise"] += 1
        elif all(s.col_offset == 0 and s.cols is None for s in shards):
            kinds["row-wise"] += 1
        else:
            kinds["grid"] += 1
    return dict(kinds)


def _inspect_plan(path: Path, plan: Plan, instance: Instance | None, json_out: bool) -> None:
    meta = {
        "solver": plan.solver,
        "status": plan.status.value,
        "cost_model": plan.cost_model,
        "seed": plan.seed,
        "wall_time_s": plan.wall_time_s,
        "predicted_cost": plan.predicted_cost,
        "lower_bound": plan.lower_bound,
        "instance": plan.instance,
        "params": plan.params,
    }
    kinds = _placement_kinds(plan)
    n_tables = len({s.table for s in plan.shards})
    if instance is None:
        n_dev = max(s.device for s in plan.shards) + 1
        per_dev = _shards_by_device(plan.shards, n_dev)
        if json_out:
            _emit_json({"kind": "plan", "path": str(path), **meta, "tables": n_tables, "shards": len(plan.shards),
                        "placements": kinds, "shards_per_device": [len(x) for x in per_dev]})
            return
        from rich.table import Table

        console = _console()
        table = Table(title=_esc(f"plan {path.name}: shards per device (pass --instance for memory and costs)"), title_justify="left")
        table.add_column("dev", justify="right")
        table.add_column("shards", overflow="fold")
        for d in range(n_dev):
            table.add_row(str(d), _names_cell(per_dev[d], None, show=5))
        console.print(table)
        _print_lines(console, _plan_meta_lines(meta, n_tables, len(plan.shards), kinds))
        return

    from shardopt.evaluate import evaluate_plan, hash_warning
    from shardopt.plan_check import check_plan

    warning = hash_warning(instance, plan)
    if warning:
        _warn(f"{path}: {warning}")
    check = check_plan(instance, plan)
    ev = evaluate_plan(instance, plan) if check.ok else None
    violations = [v.message for v in check.violations]
    if json_out:
        doc: dict[str, Any] = {"kind": "plan", "path": str(path), **meta, "tables": n_tables, "shards": len(plan.shards),
                               "placements": kinds, "valid": check.ok, "violations": violations,
                               "memory": _memory_doc(instance, check.memory_use)}
        if ev is not None:
            doc["evaluation"] = ev.to_dict()
        if not check.ok:
            raise CLIError(f"{path}: invalid plan: {len(violations)} violation(s):\n" + "\n".join("  " + v for v in violations[:20]),
                           EXIT_BAD_INPUT, "invalid_plan", extra=doc)
        _emit_json(doc)
        return
    console = _console()
    title = f"plan {path.name} on {instance.name or 'instance'}" + (f", judged by {ev.judge}" if ev else " (invalid: no costs)")
    console.print(_device_table(title, instance, plan.shards, check.memory_use, ev.costs if ev else None))
    lines = _cost_summary(ev.costs, f"judged by {ev.judge}") if ev else []
    _print_lines(console, lines + _plan_meta_lines(meta, n_tables, len(plan.shards), kinds))
    if not check.ok:
        raise CLIError(f"{path}: invalid plan: {len(violations)} violation(s):\n" + "\n".join("  " + v for v in violations[:20]),
                       EXIT_BAD_INPUT, "invalid_plan")


def _plan_meta_lines(meta: dict[str, Any], n_tables: int, n_shards: int, kinds: dict[str, int]) -> list[str]:
    placed = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    lines = [f"{n_tables} tables in {n_shards} shards ({placed})"]
    solver = f"solver {meta['solver'] or '?'}: {meta['status']}, seed {meta['seed']}, {meta['wall_time_s']:.3f} s"
    if meta["cost_model"]:
        solver += f", cost model {meta['cost_model']}"
    if meta["predicted_cost"] is not None:
        solver += f", predicted {meta['predicted_cost']:.3f} ms"
    if meta["lower_bound"] is not None:
        solver += f", lower bound {meta['lower_bound']:.3f} ms"
    lines.append(solver)
    if meta["params"]:
        lines.append("params " + json.dumps(meta["params"], sort_keys=True))
    lines.append(f"for instance {meta['instance'] or '(not recorded)'}")
    return lines


@app.command("solvers")
def list_solvers(json_out: JsonOpt = False) -> None:
    """List the registered solvers."""
    with _guard(json_out):
        from solvers.registry import entries

        rows = [{"name": e.name, "family": e.family, "description": e.description} for e in entries()]
        if json_out:
            _emit_json({"solvers": rows, "default": DEFAULT_SOLVER})
            return
        from rich.table import Table

        table = Table(title="solvers", title_justify="left")
        table.add_column("name")
        table.add_column("family")
        table.add_column("description", overflow="fold")
        for r in rows:
            name = r["name"] + (" (default)" if r["name"] == DEFAULT_SOLVER else "")
            table.add_row(_esc(name), _esc(r["family"]), _esc(r["description"]))
        _console().print(table)


class SchemaKind(str, Enum):
    instance = "instance"
    plan = "plan"
    all = "all"


@app.command()
def schema(
    kind: Annotated[SchemaKind, typer.Option("--kind", "-k", help="Which document's schema.")] = SchemaKind.all,
) -> None:
    """Print the JSON Schema of instance and plan documents."""
    with _guard(True):
        from shardopt.ir import json_schema

        doc = json_schema()
        if kind is not SchemaKind.all:
            name = "Instance" if kind is SchemaKind.instance else "Plan"
            doc = {k: v for k, v in doc.items() if k != "oneOf"}
            doc["title"] = f"shardopt {kind.value}"
            doc["$ref"] = f"#/$defs/{name}"
        _emit_json(doc)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"shardopt {version('shardopt')}")
        except PackageNotFoundError:
            typer.echo("shardopt (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Embedding-table sharding as min-max partitioning: solve, judge and inspect plans."""


import shardopt.cli_suites  # noqa: E402,F401  (registers generate, make-pool, import-dlrm on `app`)
import shardopt.cli_costmodel  # noqa: E402,F401  (registers the costmodel commands)
import shardopt.cli_rl  # noqa: E402,F401  (registers rl train)
import shardopt.cli_torchrec  # noqa: E402,F401  (registers export and import-torchrec)
import shardopt.cli_leaderboard  # noqa: E402,F401
import shardopt.cli_bound  # noqa: E402,F401  (registers bound)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (`shardopt`, `python -m shardopt`)."""
    app(args=argv, prog_name="shardopt")


if __name__ == "__main__":
    main()
