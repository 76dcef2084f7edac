"""`shardopt solvers` and `shardopt schema`: what the tool offers."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    JsonOpt,
    _console,
    _emit_json,
    _esc,
    _guard,
    app,
)
from solvers.catalog import DEFAULT_SOLVER


@app.command("solvers")
def list_solvers(
    options_of: Annotated[str | None, typer.Option("--options", metavar="NAME", help="List the options (-O KEY=VALUE) of this solver: type, default, allowed values, help.", show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """List the solvers (family, placements, description, whether the cost model decides their plan), or one solver's options."""
    with _guard(json_out):
        from solvers.catalog import spec_of, specs

        if options_of is not None:
            _list_options(spec_of(options_of), json_out)
            return
        from shardopt.core.sharding_types import SHARDING_TYPES

        rows = [{"name": s.name, "family": s.family, "placements": [t for t in SHARDING_TYPES if s.places(t)],
                 "placement_note": s.placement_note, "host_memory": s.host_memory, "description": s.description,
                 "uses_cost_model": s.uses_cost_model, "anytime": s.anytime, "deterministic": s.deterministic,
                 "needs": s.needs or None, "constraints": sorted(s.constraints), "max_tables": s.max_tables,
                 "max_devices": s.max_devices} for s in specs()]
        if json_out:
            _emit_json({"solvers": rows, "default": DEFAULT_SOLVER})
            return
        from rich.table import Table

        from shardopt.core.ir import CONSTRAINT_KINDS

        table = Table(title="solvers (shardopt solvers --options NAME: a solver's options)", title_justify="left")
        table.add_column("name")
        table.add_column("family")
        table.add_column("placements", overflow="fold")
        table.add_column("description", overflow="fold")
        for r in rows:
            name = r["name"] + (" (default)" if r["name"] == DEFAULT_SOLVER else "")
            about = r["description"] + ("" if r["uses_cost_model"] else "; its plan does not depend on the cost model")
            about += "; anytime" if r["anytime"] else ""
            about += "" if r["deterministic"] else "; stops on a wall clock (the plan can depend on the machine's speed)"
            if r["max_tables"] or r["max_devices"]:
                about += f"; at most {r['max_tables'] or 'any'} tables on {r['max_devices'] or 'any'} devices"
            about += f"; needs the [{r['needs']}] extra" if r["needs"] else ""
            if r["constraints"]:
                every = set(r["constraints"]) >= set(CONSTRAINT_KINDS)
                about += "; honours every placement constraint" if every else f"; honours placement constraints: {', '.join(r['constraints'])}"
            placed = r["placement_note"] or ", ".join(r["placements"]) + ("; host memory" if r["host_memory"] else "")
            table.add_row(_esc(name), _esc(r["family"]), _esc(placed), _esc(about))
        _console().print(table)


def _list_options(spec: Any, json_out: bool) -> None:
    """One solver's options as a table (or JSON): what `-O KEY=VALUE` accepts."""
    import json

    opts = spec.options()
    if json_out:
        _emit_json({"solver": spec.name, "options": [{"name": o.name, "type": o.type_text, "default": o.default, "allowed": o.allowed or None,
                                                      "help": o.help} for o in opts]})
        return
    from rich.table import Table

    table = Table(title=f"options of {spec.name} (-O KEY=VALUE)", title_justify="left")
    for col in ("option", "type", "default", "allowed", "help"):
        table.add_column(col, overflow="fold")
    for o in opts:
        default = json.dumps(list(o.default) if isinstance(o.default, tuple) else o.default)
        table.add_row(_esc(o.name), _esc(o.type_text), _esc(default), _esc(o.allowed), _esc(o.help))
    if not opts:
        table.add_row("(none)", "", "", "", "")
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
