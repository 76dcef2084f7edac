"""`shardopt solvers` and `shardopt schema`: what the tool offers."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from shardopt.cli.common import (
    DEFAULT_SOLVER,
    JsonOpt,
    _console,
    _emit_json,
    _esc,
    _guard,
    app,
)


@app.command("solvers")
def list_solvers(json_out: JsonOpt = False) -> None:
    """List the registered solvers."""
    with _guard(json_out):
        from solvers.registry import entries, placements

        rows = [{"name": e.name, "family": e.family, "placements": placements(e.name), "description": e.description} for e in entries()]
        if json_out:
            _emit_json({"solvers": rows, "default": DEFAULT_SOLVER})
            return
        from rich.table import Table

        table = Table(title="solvers", title_justify="left")
        table.add_column("name")
        table.add_column("family")
        table.add_column("placements", overflow="fold")
        table.add_column("description", overflow="fold")
        for r in rows:
            name = r["name"] + (" (default)" if r["name"] == DEFAULT_SOLVER else "")
            table.add_row(_esc(name), _esc(r["family"]), _esc(r["placements"]), _esc(r["description"]))
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
        from shardopt.core.ir import json_schema

        doc = json_schema()
        if kind is not SchemaKind.all:
            name = "Instance" if kind is SchemaKind.instance else "Plan"
            doc = {k: v for k, v in doc.items() if k != "oneOf"}
            doc["title"] = f"shardopt {kind.value}"
            doc["$ref"] = f"#/$defs/{name}"
        _emit_json(doc)
