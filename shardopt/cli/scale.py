"""`shardopt scale`: a smaller instance (batch, rows, memory) to solve and judge on a machine that cannot time the
original - an explicit new instance, never a hidden option of the judge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shardopt.cli.common import (
    CLIError,
    JsonOpt,
    _console,
    _emit_json,
    _fmt_bytes,
    _guard,
    _load_instance,
    _print_lines,
    app,
)


@app.command()
def scale(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance to scale.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="OUT.json", help="Where to write the scaled instance.")],
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="The new global batch (access histograms move with it).")] = None,
    max_rows: Annotated[int | None, typer.Option("--max-rows", help="Cap every table's rows at this.")] = None,
    memory: Annotated[str, typer.Option("--memory", help="scale: capacities shrink with the model (as tight as before); keep: unchanged.")] = "scale",
    name: Annotated[str | None, typer.Option("--name", help="The new instance's name \\[default: the old one with -b<B>-r<R>].")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="Name this hardware profile instead (the machine the instance will be judged on, e.g. h200 or cpu).", show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a scaled copy of an instance: solve it and judge it (both), so the judge times what the solver optimised."""
    with _guard(json_out):
        from shardopt.core.feasibility import infeasibility_reason
        from shardopt.core.ir import save
        from shardopt.core.memory import table_bytes_array
        from shardopt.data.scale import ScaleError, scale_instance

        if batch_size is None and max_rows is None and hardware is None:
            raise CLIError("scale: give --batch-size, --max-rows and / or --hardware (nothing to change)")
        instance = _load_instance(instance_path)
        try:
            scaled = scale_instance(instance, batch_size=batch_size, max_rows=max_rows, memory=memory, name=name,  # type: ignore[arg-type]
                                    hardware=hardware)
        except ScaleError as exc:
            raise CLIError(str(exc)) from None
        try:
            save(scaled, out)
        except OSError as exc:
            raise CLIError(f"{out}: cannot write the instance ({exc.strerror or exc})") from None
        before, after = int(table_bytes_array(instance).sum()), int(table_bytes_array(scaled).sum())
        reason = infeasibility_reason(scaled)
        doc = {"instance": str(instance_path), "out": str(out), "name": scaled.name, "hash": scaled.content_hash(),
               "batch_size": [instance.workload.batch_size, scaled.workload.batch_size],
               "model_bytes": [before, after], "capacities": scaled.topology.capacities(),
               "table_wise_infeasible": reason}
        if json_out:
            _emit_json(doc)
            return
        lines = [
            f"{scaled.name}: batch {instance.workload.batch_size} -> {scaled.workload.batch_size}, "
            f"model {_fmt_bytes(before)} -> {_fmt_bytes(after)}, device memory "
            f"{_fmt_bytes(instance.topology.capacity(0))} -> {_fmt_bytes(scaled.topology.capacity(0))} (device 0)",
            f"written to {out}: solve it and judge it (shardopt solve {out} ...; shardopt evaluate {out} PLAN.json --backend cpu)",
        ]
        if reason:
            lines.append(f"note: no table-wise plan exists for it: {reason}")
        _print_lines(_console(), lines)
