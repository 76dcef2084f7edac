"""`shardopt profile`: an instance's pooling factors and access histograms measured on a sample of the user's own
batches (shardopt.data.profile), so that plans are made for the real access pattern rather than a guess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from shardopt.cli.common import CLIError, JsonOpt, _console, _emit_json, _guard, _load_instance, _print_lines, app


@app.command("profile")
def profile_cmd(
    instance_path: Annotated[Path, typer.Argument(metavar="INSTANCE.json", help="The instance whose tables the batches read.", show_default=False)],
    batches: Annotated[list[Path], typer.Option("--batches", metavar="PATH", help="Saved KeyedJaggedTensors (torch.save: a file, a list in a file, or a folder of files) or a JSON-lines file, one batch per line: {feature: [[ids of a sample], ...]}. Repeatable.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="INSTANCE.json", help="Where to write the profiled instance.", show_default=False)],
    feature_map: Annotated[str | None, typer.Option("--feature-map", metavar="JSON", help="Inline JSON or a file: {feature: table} for features whose table the instance does not name.", show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure each table's pooling factor and access histogram on sample batches and write the instance with them."""
    with _guard(json_out):
        from shardopt.core.ir import save
        from shardopt.data.profile import profile_instance

        instance = _load_instance(instance_path)
        mapping = None
        if feature_map is not None:
            text = Path(feature_map).read_text() if Path(feature_map).is_file() else feature_map
            try:
                mapping = json.loads(text)
            except json.JSONDecodeError as exc:
                raise CLIError(f"--feature-map: neither a file nor valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
                raise CLIError("--feature-map: expected an object {feature: table}")
        got = profile_instance(instance, list(batches), mapping)
        try:
            save(got.instance, out)
        except OSError as exc:
            raise CLIError(f"{out}: cannot write the instance ({exc.strerror or exc})") from None
        if json_out:
            _emit_json({"instance": str(instance_path), "out": str(out), "batches": got.batches, "samples": got.samples,
                        "tables": got.tables, "unprofiled": got.unprofiled})
            return
        old = {t.name: t.pooling_factor for t in instance.tables}
        lines = [f"profiled {len(got.tables)} of {len(instance.tables)} tables on {got.batches} batches ({got.samples:,} samples); wrote {out}"]
        for name, m in sorted(got.tables.items()):
            lines.append(f"  {name}: pooling factor {old[name]:g} -> {m['pooling_factor']:.3f}, {m['unique_rows']:,} unique rows "
                         f"(histogram in batches of {m['batch_size_measured']:,} samples)")
        if got.unprofiled:
            lines.append(f"not read by the batches (left as they were): {', '.join(got.unprofiled[:10])}{', ...' if len(got.unprofiled) > 10 else ''}")
        _print_lines(_console(), lines)
