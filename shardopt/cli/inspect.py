"""`shardopt inspect`: summarise an instance, a plan or a suite directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from shardopt.core.ir import Instance, Plan, Shard

from shardopt.cli.common import (
    EXIT_BAD_INPUT,
    CLIError,
    JsonOpt,
    _console,
    _cost_summary,
    _device_table,
    _emit_json,
    _esc,
    _fmt_bytes,
    _fmt_num,
    _guard,
    _load_instance,
    _memory_doc,
    _names_cell,
    _plan_scope,
    _print_lines,
    _shards_by_device,
    _warn,
    app,
)


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(metavar="FILE.json|DIR", help="An instance, a plan, or a suite directory.", show_default=False)],
    instance_path: Annotated[
        Path | None, typer.Option("--instance", "-i", metavar="INSTANCE.json", help="For a plan: its instance (memory and costs per device).")
    ] = None,
    top: Annotated[int, typer.Option("--top", min=0, help="How many of the largest tables to list.")] = 10,
    draw: Annotated[
        Path | None, typer.Option("--draw", metavar="FILE.svg", help="For an instance: draw its network (graph, or the tree of its levels) to an SVG file; for a 2D plan: its cost per sharding group size tried.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Summarise an instance (tables, memory, topology, workload), a plan (shards, memory, costs per device) or a suite directory."""
    with _guard(json_out):
        from shardopt.core.ir import Plan, load_document

        if path.is_dir():
            from shardopt.cli.suites import inspect_suite

            inspect_suite(path, json_out)
            return
        doc = load_document(path)
        if isinstance(doc, Plan):
            instance = _load_instance(instance_path) if instance_path is not None else None
            if instance is not None:
                instance, _ = _plan_scope(instance, doc)  # (a 2D plan: its sharding group's flat instance)
            _inspect_plan(path, doc, instance, json_out)
            if draw is not None:
                _draw_two_d(doc, draw, json_out)
        else:
            if instance_path is not None:
                _warn("--instance is only used when FILE.json is a plan; ignored")
            _inspect_instance(path, doc, top, json_out)
            if draw is not None:
                from shardopt.cli.topology_drawing import draw_topology
                from shardopt.core.hardware import get_profile

                if draw.suffix.lower() != ".svg":
                    raise CLIError(f"--draw: {str(draw)!r} is not an .svg file")
                draw_topology(doc.topology, get_profile(doc.topology.hardware), draw)
                if not json_out:
                    _console().print(f"drew the network to {_esc(str(draw))}")


def _draw_two_d(plan: Plan, draw: Path, json_out: bool) -> None:
    """`--draw` for a plan: the curve of a 2D plan's group sizes (exit 2 for any other plan)."""
    two_d = plan.params.get("two_d") if isinstance(plan.params, dict) else None
    if not two_d or not two_d.get("group_sizes"):
        raise CLIError("--draw: a plan is drawn only where it is a 2D plan with its group sizes tried (params.two_d.group_sizes)")
    if draw.suffix.lower() != ".svg":
        raise CLIError(f"--draw: {str(draw)!r} is not an .svg file")
    from shardopt.cli.two_d_view import draw_group_size_curve

    draw_group_size_curve(two_d, draw)
    if not json_out:
        _console().print(f"drew the cost per group size to {_esc(str(draw))}")


def _levels_text(topo: Any, profile: Any) -> str:
    """The levels a device's traffic crosses, innermost first: what the all-to-all is priced over."""
    from shardopt.core.levels import comm_levels

    if topo.graph is not None:
        from shardopt.core.network_graph import parse_network_graph

        g = parse_network_graph(topo.graph, topo.num_devices, topo.devices_per_host).graph
        bws = sorted({d["bandwidth"] for _, _, d in g.edges(data=True)})
        return (f"a graph of {g.number_of_nodes()} nodes ({topo.num_devices} devices, {g.number_of_nodes() - topo.num_devices} switches) "
                f"and {g.number_of_edges()} links of {bws[0] / 1e9:.3g}-{bws[-1] / 1e9:.3g} GB/s (topology.graph; --draw FILE.svg draws it)")
    levels = comm_levels(topo, profile)
    if not levels:
        return "one device: no communication"
    if topo.is_mixed and topo.levels is None:  # each device's links are its own kind's
        from shardopt.core.hardware import get_profile

        per_kind = [f"{k}: " + ", ".join(f"{lv.name} {lv.bandwidth / 1e9:.1f} GB/s" for lv in comm_levels(topo, get_profile(k)))
                    for k in dict.fromkeys(topo.hardware_kinds())]
        parts = [f"{lv.name}: groups of {lv.devices} ({lv.peers} more peer{'s' if lv.peers > 1 else ''})" for lv in levels]
        return " -> ".join(parts) + f"; each device on its own kind's links ({'; '.join(per_kind)})"
    parts = [f"{lv.name}: groups of {lv.devices} ({lv.peers} more peer{'s' if lv.peers > 1 else ''}), {lv.bandwidth / 1e9:.1f} GB/s"
             + (f", +{lv.latency_s * 1e6:.3g} us" if lv.latency_s else "") for lv in levels]
    where = "listed in topology.levels" if topo.levels is not None else f"from the {profile.name} profile and overrides"
    return " -> ".join(parts) + f" ({where})"


def _devices_text(topo: Any) -> str:
    """The devices by hardware kind: "16 x a100 (NVIDIA A100 ...)", or per kind for a job that mixes them."""
    from shardopt.core.hardware import get_profile

    kinds = topo.hardware_kinds()
    if not topo.is_mixed:
        p = get_profile(topo.hardware)
        return f"{topo.num_devices} x {p.name} ({p.description})"
    caps = topo.capacities()
    out = []
    for k in dict.fromkeys(kinds):
        on = [d for d in range(topo.num_devices) if kinds[d] == k]
        mem = sorted({caps[d] for d in on})
        out.append(f"{len(on)} x {k} (devices {on[0]}-{on[-1]}, {_fmt_bytes(mem[0])}"
                   + (f" - {_fmt_bytes(mem[-1])}" if len(mem) > 1 else "") + f"; {get_profile(k).description})")
    return " + ".join(out) + f"; reference kind {topo.hardware}"


def _stats(values: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "median": float(np.median(a)), "mean": float(a.mean()), "max": float(a.max())}


def _inspect_instance(path: Path, instance: Instance, top: int, json_out: bool) -> None:
    from dataclasses import asdict

    import numpy as np

    from shardopt.core.feasibility import infeasibility_reason
    from shardopt.core.hardware import get_profile
    from shardopt.core.levels import comm_levels
    from shardopt.core.memory import table_bytes_array

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
                "hardware_kinds": {k: topo.hardware_kinds().count(k) for k in dict.fromkeys(topo.hardware_kinds())},
                "comm_levels": [asdict(lv) for lv in comm_levels(topo, get_profile(topo.hardware))],
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
    summary.add_row("topology", _esc(f"{_devices_text(topo)}; {hosts}; {mem} each"))
    bw = []
    if topo.intra_host_bandwidth:
        bw.append(f"intra-host {topo.intra_host_bandwidth / 1e9:.1f} GB/s")
    if topo.inter_host_bandwidth:
        bw.append(f"inter-host {topo.inter_host_bandwidth / 1e9:.1f} GB/s")
    if bw:
        summary.add_row("bandwidth overrides", ", ".join(bw))
    summary.add_row("network levels", _esc(_levels_text(topo, profile)))
    summary.add_row("workload", f"batch {work.batch_size:,}, {work.optimizer.value}, {work.weight_dtype.value} weights")
    summary.add_row("feasibility", _esc(reason) if reason else "necessary conditions for a table-wise plan hold (each table fits a device, total fits)")
    for key in ("suite", "family", "generator", "seed"):
        if key in instance.metadata:
            summary.add_row(key, _esc(str(instance.metadata[key])))
    console.print(summary)
    if top:
        console.print(_largest_tables_table(largest, top, len(instance.tables)))



def _largest_tables_table(largest: list[dict[str, Any]], top: int, n_tables: int) -> Any:
    """`inspect`'s table of the largest tables (rich)."""
    from rich.table import Table

    big = Table(title=f"largest tables ({min(top, n_tables)} of {n_tables})", title_justify="left")
    for head in ("table", "rows", "dim", "pooling", "zipf", "bytes", "% of device"):
        big.add_column(head, justify="left" if head == "table" else "right")
    for t in largest:
        big.add_row(
            _esc(t["name"]), f"{t['rows']:,}", str(t["dim"]), f"{t['pooling_factor']:.3g}",
            "-" if t["zipf"] is None else f"{t['zipf']:.3g}", _fmt_bytes(t["bytes"]),
            f"{100 * t['share_of_largest_device']:.1f}",
        )
    return big

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
            kinds["column-wise (one whole shard)" if shards[0].column_wise else "table-wise"] += 1
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

    from shardopt.core.plan_check import check_plan
    from shardopt.measure.evaluate import evaluate_plan, hash_warning

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
