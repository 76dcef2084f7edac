"""`shardopt generate`, `make-pool`, `import-dlrm` and the suite view of `inspect DIR`: the instance-suite side of
the CLI, kept apart from the solve / evaluate commands in shardopt.cli."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    EXIT_BAD_INPUT,
    CLIError,
    JsonOpt,
    PoolChoice,
    _command_line,
    _console,
    _emit_json,
    _esc,
    _fmt_bytes,
    _guard,
    _print_lines,
    app,
)


@app.command()
def generate(
    family: Annotated[str, typer.Option("--family", "-f", help="Task family: dreamshard, neuroshard, autoshard, production, production-xl (3,424 tables on 512 devices), cpu, huge (tables 2-20x a device's HBM), tiered (tables 1.5-4x the cluster's HBM, with host memory), nvl72 (GB200 NVL72 racks: an NVLink domain of 72 over hosts of 4, as topology levels), mixed (A100 and H200 hosts in one job).")],
    count: Annotated[int, typer.Option("--count", "-n", help="How many instances.")],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Directory for the instances and suite.json.")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed: same seed, same suite, byte for byte.")] = 0,
    pool: Annotated[PoolChoice, typer.Option("--pool", help="Which half of the standard pool the tables come from.")] = PoolChoice.train,
    pool_file: Annotated[
        Path | None, typer.Option("--pool-file", metavar="POOL.json", help="Draw from this pool file instead of the standard one.")
    ] = None,
    memory_slack: Annotated[
        float | None, typer.Option("--memory-slack", metavar="X", help="Tight-rule families: device memory = X x the tables' bytes / devices (grown 2 % until first-fit-decreasing packs them) instead of 1.10; room for a planner whose storage model adds buffers (TorchRec's: 2 or more).", show_default=False)
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the suite already in --out (its suite.json and the instances it lists).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Generate a benchmark suite of one task family from a table pool."""
    with _guard(json_out):
        from shardopt.data.pools import load_pool, standard_pool_path
        from shardopt.data.suites import FAMILIES, generate_suite

        if family not in FAMILIES:
            raise CLIError(f"--family: unknown family {family!r} (known: {', '.join(FAMILIES)})")
        if count <= 0:
            raise CLIError(f"--count: {count} must be >= 1")
        if memory_slack is not None and FAMILIES[family].make is not None:
            raise CLIError(f"--memory-slack: family {family!r} sizes its memory by its own rule, not the tight rule")
        if memory_slack is not None and not memory_slack >= 1.0:
            raise CLIError(f"--memory-slack: {memory_slack:g} must be >= 1 (device memory = slack x the tables' bytes / devices)")
        _check_suite_out(out, overwrite)
        path = pool_file or standard_pool_path(pool.value)
        table_pool = load_pool(path)
        label = pool.value if pool_file is None else f"{pool.value}:{path.name}"
        paths = generate_suite(family, table_pool, count, seed, label, out, command=_command_line(), memory_slack=memory_slack)
        doc = {"family": family, "count": count, "seed": seed, "pool": label, "out": str(out), "instances": [p.name for p in paths]}
        if json_out:
            _emit_json(doc)
        else:
            _print_lines(_console(), [f"wrote {len(paths)} {family} instances ({label} pool, seed {seed}) and suite.json to {_esc(str(out))}"])


def _check_suite_out(out: Path, overwrite: bool) -> None:
    """--out must be a folder that holds no suite (or, with --overwrite, the old suite goes first): instances of an
    older suite left beside a new suite.json would be read as part of it."""
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out: {out} is a file, not a folder for the suite")
    if not out.is_dir():
        return
    manifest = out / "suite.json"
    if manifest.is_file():
        if not overwrite:
            raise CLIError(f"--out: {out} already holds a suite (suite.json): choose another folder or pass --overwrite")
        try:
            listed = list(json.loads(manifest.read_text()).get("instances", {}))
        except (ValueError, AttributeError, OSError) as exc:
            raise CLIError(f"--out: {manifest}: cannot read the old suite's manifest ({exc}); remove it by hand") from None
        for name in listed:
            (out / Path(name).name).unlink(missing_ok=True)
        manifest.unlink()
    others = sorted(p.name for p in out.glob("*.json"))
    if others:
        raise CLIError(f"--out: {out} holds instance files of no suite ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): "
                       "choose an empty folder")


@app.command("make-pool")
def make_pool(
    out: Annotated[Path, typer.Option("--out", "-o", metavar="POOL.json", help="The pool file; the halves go beside it as -train / -test.")],
    tables: Annotated[int, typer.Option("--tables", help="Number of tables.")] = 856,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed of the pool.")] = 0,
    split_seed: Annotated[int, typer.Option("--split-seed", help="Random seed of the train / test split.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Generate a synthetic DLRM-like table pool (and its disjoint train / test halves)."""
    with _guard(json_out):
        from shardopt.data.pools import generate_pool, pool_statistics, save_pool, split_pool

        if tables < 2:
            raise CLIError(f"--tables: {tables} must be >= 2 (the pool is split in halves)")
        name = out.name.removesuffix(".json")
        pool = generate_pool(n=tables, seed=seed, name=name)
        train, test = split_pool(pool, seed=split_seed)
        out.parent.mkdir(parents=True, exist_ok=True)
        files = {"all": out, "train": out.with_name(f"{name}-train.json"), "test": out.with_name(f"{name}-test.json")}
        for part, p in zip(("all", "train", "test"), (pool, train, test)):
            save_pool(p, files[part])
        doc = {k: {"file": str(v), **pool_statistics(p)} for (k, v), p in zip(files.items(), (pool, train, test))}
        if json_out:
            _emit_json(doc)
        else:
            _print_lines(_console(), [f"wrote {_esc(str(v))} ({int(doc[k]['tables'])} tables)" for k, v in files.items()])


@app.command("import-dlrm")
def import_dlrm_cmd(
    file: Annotated[Path, typer.Argument(metavar="FILE.pt", help="The dataset file: a tuple (indices, offsets, lengths).", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="POOL.json", help="Where to write the pool.")],
    split_seed: Annotated[int | None, typer.Option("--split-seed", help="Also write -train / -test halves split with this seed.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Build a table pool from Meta's DLRM embedding dataset (fbgemm_t856_bs65536.pt) with the papers' statistics."""
    with _guard(json_out):
        from shardopt.data.dlrm_import import import_dlrm
        from shardopt.data.pools import pool_statistics, save_pool, split_pool

        pool = import_dlrm(file, name=out.name.removesuffix(".json"))
        out.parent.mkdir(parents=True, exist_ok=True)
        save_pool(pool, out)
        written = [out]
        if split_seed is not None:
            for part, p in zip(("train", "test"), split_pool(pool, seed=split_seed)):
                path = out.with_name(f"{out.name.removesuffix('.json')}-{part}.json")
                save_pool(p, path)
                written.append(path)
        stats = pool_statistics(pool)
        if json_out:
            _emit_json({"files": [str(p) for p in written], **stats})
        else:
            _print_lines(
                _console(),
                [f"wrote {_esc(str(p))}" for p in written]
                + [f"{int(stats['tables'])} tables, batch {pool.batch_size}; rows mean {stats['rows_mean']:,.0f}, pooling factor mean {stats['pooling_mean']:.2f}"],
            )


def inspect_suite(path: Path, json_out: bool) -> None:
    """`shardopt inspect DIR`: a suite's instances, their sizes, memory tightness and table statistics."""
    import numpy as np
    from rich.table import Table as RichTable

    from shardopt.core.ir import load_instance
    from shardopt.core.memory import table_bytes_array

    files = sorted(p for p in path.glob("*.json") if p.name != "suite.json")
    if not files:
        raise CLIError(f"{path}: no instance files (*.json) in this directory", EXIT_BAD_INPUT)
    manifest: dict[str, Any] = {}
    if (path / "suite.json").is_file():
        try:
            manifest = json.loads((path / "suite.json").read_text())
        except json.JSONDecodeError as exc:
            raise CLIError(f"{path / 'suite.json'}: not valid JSON ({exc.msg})") from None
    rows = []
    for f in files:
        inst = load_instance(f)
        sizes = table_bytes_array(inst)
        cap = sum(inst.topology.capacities())
        rows.append(
            {
                "file": f.name,
                "tables": len(inst.tables),
                "devices": inst.topology.num_devices,
                "hosts": inst.topology.num_hosts,
                "hardware": "+".join(dict.fromkeys(inst.topology.hardware_kinds())),
                "memory_per_device": inst.topology.capacity(0),
                "host_memory_per_device": inst.topology.host_capacity(0),
                "utilisation": float(sizes.sum()) / cap,
                "pooling_mean": float(np.mean([t.pooling_factor for t in inst.tables])),
                "rows_mean": float(np.mean([t.rows for t in inst.tables])),
                "dims": sorted({t.dim for t in inst.tables}),
                "family": inst.metadata.get("family"),
                "pool": inst.metadata.get("pool"),
            }
        )
    summary = {
        "suite": str(path),
        "manifest": {k: v for k, v in manifest.items() if k != "instances"},
        "instances": len(rows),
        "tables": {"min": min(r["tables"] for r in rows), "max": max(r["tables"] for r in rows)},
        "devices": sorted({r["devices"] for r in rows}),
        "utilisation": {"min": min(r["utilisation"] for r in rows), "max": max(r["utilisation"] for r in rows)},
        "rows": rows,
    }
    if json_out:
        _emit_json(summary)
        return
    console = _console()
    head = [f"suite {_esc(str(path))}: {len(rows)} instances"]
    if manifest:
        head.append(f"family {manifest.get('family')}, pool {manifest.get('pool')}, seed {manifest.get('seed')}; made by: {_esc(manifest.get('command') or '?')}")
    _print_lines(console, head)
    table = RichTable(title=None)
    hosted = any(r["host_memory_per_device"] for r in rows)  # host memory (UVM) column only where a suite has some
    columns = [("instance", "left"), ("tables", "right"), ("devices", "right"), ("hw", "left"), ("memory / device", "right")]
    columns += [("host memory / device", "right")] if hosted else []
    columns += [("tables / HBM" if hosted else "memory used", "right"), ("mean pooling", "right"), ("mean rows", "right"), ("dims", "left")]
    for col, just in columns:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rows:
        host = [_fmt_bytes(r["host_memory_per_device"]) if r["host_memory_per_device"] else "-"] if hosted else []
        table.add_row(
            _esc(r["file"]),
            str(r["tables"]),
            f"{r['devices']} ({r['hosts']} host{'s' if r['hosts'] > 1 else ''})",
            r["hardware"],
            _fmt_bytes(r["memory_per_device"]),
            *host,
            f"{r['utilisation']:.1%}",
            f"{r['pooling_mean']:.2f}",
            f"{r['rows_mean']:,.0f}",
            ",".join(map(str, r["dims"])),
        )
    console.print(table)
