"""`shardopt export --format torchrec` and `shardopt import-torchrec`: TorchRec interop on the command line.

Both need the optional extra [torchrec]; without it they exit 2 with the exact pip commands that install it (the
`torchrec` solver does the same through `shardopt solve`). Everything else in the CLI works without TorchRec.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from shardopt.cli.common import (
    EXIT_BAD_INPUT,
    CLIError,
    JsonOpt,
    _console,
    _emit_json,
    _esc,
    _fmt_bytes,
    _guard,
    _plan_scope,
    _print_lines,
    _warn,
    app,
)


class ExportFormat(str, Enum):
    torchrec = "torchrec"
    torchrec_text = "torchrec-text"


class ComputeDevice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def _resolve_device(device: ComputeDevice) -> str:
    """auto: cuda where CUDA is available here, cpu otherwise (load_torchrec_plan(..., compute_device=) overrides it
    where the plan runs)."""
    if device is not ComputeDevice.auto:
        return device.value
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _need_torchrec() -> None:
    from shardopt.data.torchrec_io import TorchRecUnavailableError, require_torchrec

    try:
        require_torchrec()
    except TorchRecUnavailableError as exc:
        raise CLIError(str(exc), EXIT_BAD_INPUT, "missing_extra") from None


def _shard_key(s: Any) -> tuple:
    return (s.table, s.device, s.row_offset, s.col_offset, s.rows or 0, s.cols or 0, s.replicated, s.kernel.value, s.cache_load_factor or 0.0)


@app.command("export")
def export_cmd(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="The plan to export.", show_default=False)],
    fmt: Annotated[ExportFormat, typer.Option("--format", help="torchrec: JSON of a TorchRec ShardingPlan (read back with shardopt.data.torchrec_io.load_torchrec_plan); torchrec-text: TorchRec's own printout of it.")],
    instance_path: Annotated[
        Path | None, typer.Option("--instance", "-i", metavar="INSTANCE.json", help="The plan's instance (needed: table sizes and devices per host are not in the plan).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", metavar="FILE", help="Write here instead of stdout.")] = None,
    module_path: Annotated[str, typer.Option("--module-path", help="Path of the EmbeddingBagCollection in the model ('' when it is the model).")] = "",
    compute_device: Annotated[ComputeDevice, typer.Option("--compute-device", help="Placement device: rank:N/cuda:M (M = N % devices per host) or rank:N/cpu; auto: cuda where CUDA is available here, else cpu (load_torchrec_plan(..., compute_device=) overrides it where the plan runs).")] = ComputeDevice.auto,
    json_out: JsonOpt = False,
) -> None:
    """Export a plan to TorchRec: one ParameterSharding per table, for DistributedModelParallel(plan=...)."""
    with _guard(json_out):
        from shardopt.core.ir import dumps_document, load_instance, load_plan
        from shardopt.measure.evaluate import hash_warning

        plan = load_plan(plan_path)
        if instance_path is None:
            raise CLIError(
                "--instance: required for --format torchrec: a TorchRec plan needs every shard's size and the devices "
                "per host (for rank:N/cuda:M placements), which a plan does not record; pass the instance it was made for"
            )
        instance = load_instance(instance_path)
        warning = hash_warning(instance, plan)
        if warning:
            _warn(f"{plan_path}: {warning}")
        job = instance
        instance, sync = _plan_scope(instance, plan)  # (a 2D plan: TorchRec's plan is the sharding group's)
        dmp = None if sync is None else job.two_d.dmp_collection_args(plan.sharding_group_size, job.topology.num_devices)
        _need_torchrec()
        from shardopt.data.torchrec_io import _to_torchrec_plan, from_torchrec_plan, normalize_shards, plan_to_json

        device = _resolve_device(compute_device)

        try:
            sharding_plan, warnings = _to_torchrec_plan(instance, plan, module_path=module_path, compute_device=device)
        except ValueError as exc:
            raise CLIError(f"{plan_path}: {exc}", EXIT_BAD_INPUT, "invalid_plan") from None
        # the export must say exactly what the plan says: read it back and compare, shard for shard
        back = from_torchrec_plan(instance, sharding_plan, module_path=module_path)
        if sorted(map(_shard_key, back)) != sorted(map(_shard_key, normalize_shards(instance, plan.shards))):
            raise RuntimeError("the TorchRec plan does not read back as the plan it was made from (a bug in shardopt.data.torchrec_io)")
        for w in warnings:
            _warn(w)
        types = Counter(ps.sharding_type for ps in sharding_plan.plan[module_path].values())
        kernels = Counter(ps.compute_kernel for ps in sharding_plan.plan[module_path].values())
        if fmt is ExportFormat.torchrec:
            doc = plan_to_json(sharding_plan, instance=instance, plan=plan, compute_device=device, warnings=warnings)
            if dmp is not None:
                doc["dmp_collection"] = dmp
            text = dumps_document(doc) + "\n"
        else:
            text = str(sharding_plan).rstrip("\n") + "\n"
        summary = {
            "plan": str(plan_path),
            "instance": str(instance_path),
            "format": fmt.value,
            "out": str(out) if out is not None else None,
            "module_path": module_path,
            "tables": len(instance.tables),
            "sharding_types": dict(types),
            "compute_kernels": dict(kernels),
            "world_size": instance.topology.num_devices if dmp is None else dmp["world_size"],
            **({"dmp_collection": dmp} if dmp is not None else {}),
            "compute_device": device,
            "warnings": warnings,
            "round_trip": "identical",
        }
        if out is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        try:
            out.write_text(text)
        except OSError as exc:
            raise CLIError(f"{out}: cannot write the export ({exc.strerror or exc})") from None
        if json_out:
            _emit_json(summary)
            return
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(types.items()))
        kerns = ", ".join(f"{n} {k}" for k, n in sorted(kernels.items()))
        lines = [
            f"wrote {_esc(str(out))}: TorchRec ShardingPlan ({fmt.value}) of {len(instance.tables)} tables ({kinds}; kernels {kerns}) "
            f"on {instance.topology.num_devices} ranks"
        ]
        if dmp is not None:
            lines.append(f"2D: DMPCollection(module, device, plan=..., sharding_group_size={dmp['sharding_group_size']}, "
                         f"world_size={dmp['world_size']}, global_pg=..., use_inter_host_allreduce="
                         f"{dmp['use_inter_host_allreduce']}, sharding_strategy=ShardingStrategy.{dmp['sharding_strategy'].upper()}); "
                         f"sync() every {dmp['sync_interval']} iteration(s)")
        elif fmt is ExportFormat.torchrec:
            lines.append("load it with shardopt.data.torchrec_io.load_torchrec_plan(PATH) and pass it to DistributedModelParallel(model, plan=...)")
        _print_lines(_console(), lines)


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text: str, what: str = "--memory") -> int | list[int]:
    """'17179869184', '16GiB', '80GB', '1.5e9' or a comma-separated list of those (one per device)."""
    parts = [p.strip() for p in str(text).split(",")]
    values = []
    for p in parts:
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)", p)
        if not m or m.group(2).upper() not in _UNITS:
            raise CLIError(f"{what}: {p!r} is not a byte count (e.g. 17179869184, 16GiB, 80GB)")
        v = float(m.group(1)) * _UNITS[m.group(2).upper()]
        if v < 1 or v != v:
            raise CLIError(f"{what}: {p!r} must be at least one byte")
        values.append(int(v))
    return values[0] if len(values) == 1 else values


def _pooling_arg(text: str | None) -> tuple[dict[str, Any] | None, str]:
    if text is None:
        return None, "pooling factors"
    p = Path(text)
    if p.is_file() or text.strip().endswith(".json") and not text.strip().startswith("{"):
        from shardopt.core.ir import read_json

        data, source = read_json(p), str(p)
    else:
        source = "--pooling-factors"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CLIError(f"--pooling-factors: neither a file nor valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise CLIError(f"{source}: expected an object mapping table or feature names to a pooling factor or {{pooling_factor, zipf, histogram}}")
    return data, source


class OptimizerChoice(str, Enum):
    sgd = "sgd"
    rowwise_adagrad = "rowwise_adagrad"
    adam = "adam"


@app.command("import-torchrec")
def import_torchrec_cmd(
    configs: Annotated[str, typer.Argument(metavar="CONFIGS", help="EmbeddingBagConfigs: a JSON file (a list of {name, num_embeddings, embedding_dim, feature_names?, data_type?}) or a Python path module:attribute.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="INSTANCE.json", help="Where to write the instance.")],
    devices: Annotated[int, typer.Option("--devices", min=1, help="Number of devices (world size).")],
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Global batch size per iteration.")],
    devices_per_host: Annotated[int | None, typer.Option("--devices-per-host", min=1, help="Devices per host (local world size) \\[default: all on one host].", show_default=False)] = None,
    memory: Annotated[str | None, typer.Option("--memory", "-m", metavar="BYTES", help="Memory per device for embeddings: 17179869184, 16GiB, 80GB, or one per device comma-separated \\[default: the hardware profile's].", show_default=False)] = None,
    hardware: Annotated[str, typer.Option("--hardware", help="Hardware profile (v100, a100, h100, h200).")] = "v100",
    pooling_factors: Annotated[
        str | None,
        typer.Option("--pooling-factors", metavar="JSON", help="File or inline JSON: {name: pooling_factor} or {name: {pooling_factor, zipf, histogram}}, name = table or feature \\[default: 1.0 per feature, zipf 0.9; flagged as assumed].", show_default=False),
    ] = None,
    optimizer: Annotated[OptimizerChoice, typer.Option("--optimizer", help="Optimizer (decides optimizer-state memory).")] = OptimizerChoice.rowwise_adagrad,
    name: Annotated[str, typer.Option("--name", help="Instance name \\[default: the output file's stem].", show_default=False)] = "",
    source_cite: Annotated[str | None, typer.Option("--source", metavar="TEXT", help="Where the configuration was published, kept as metadata.source \\[default: the configs document's \"source\" field, if any].", show_default=False)] = None,
    for_torchrec: Annotated[str | None, typer.Option("--for-torchrec", metavar="even|uneven", help="The plans are for TorchRec's DistributedModelParallel: constraints.torchrec, so every solver keeps the form TorchRec loads (even: a table's column slices of one width, as TorchRec's own checkpoint reload needs; uneven: any widths) \\[default: no such constraint].", show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Make an instance from TorchRec EmbeddingBagConfigs and pooling statistics."""
    with _guard(json_out):
        from shardopt.core.ir import save

        if for_torchrec is not None and for_torchrec not in ("even", "uneven"):
            raise CLIError(f"--for-torchrec: {for_torchrec!r} is not even or uneven")
        mem = parse_bytes(memory) if memory is not None else None
        pooling, source = _pooling_arg(pooling_factors)
        _need_torchrec()
        from shardopt.core.feasibility import infeasibility_reason
        from shardopt.core.memory import table_bytes_array
        from shardopt.data.torchrec_configs import configs_citation
        from shardopt.data.torchrec_io import instance_from_configs, load_configs

        cfgs, provenance = load_configs(configs)
        citation = configs_citation(configs)
        if source_cite is not None:
            if not source_cite.strip():
                raise CLIError("--source: an empty citation")
            citation["source"] = source_cite
        instance = instance_from_configs(
            cfgs,
            num_devices=devices,
            devices_per_host=devices_per_host,
            memory_bytes=mem,
            hardware=hardware,
            batch_size=batch_size,
            pooling=pooling,
            optimizer=optimizer.value,
            name=name or out.name.removesuffix(".json"),
            provenance=provenance,
            source=source,
            metadata_extra=citation,
        )
        if for_torchrec is not None:
            from shardopt.core.ir import PlacementConstraints, TorchRecForm

            form = TorchRecForm(even_columns=for_torchrec == "even")
            instance = instance.model_copy(update={"constraints": (instance.constraints or PlacementConstraints()).model_copy(update={"torchrec": form})})
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            save(instance, out)
        except OSError as exc:
            raise CLIError(f"{out}: cannot write the instance ({exc.strerror or exc})") from None
        assumed = instance.metadata["assumed"]
        sizes = table_bytes_array(instance)
        total = sum(instance.topology.capacities())
        reason = infeasibility_reason(instance)
        doc = {
            "out": str(out),
            "hash": instance.content_hash(),
            "tables": len(instance.tables),
            "devices": devices,
            "memory_fraction": float(sizes.sum() / total),
            "assumed_pooling_factor": len(assumed["pooling_factor"]["tables"]),
            "assumed_access": len(assumed["access"]["tables"]),
            "feasibility": reason,
        }
        if json_out:
            _emit_json(doc)
            return
        lines = [
            f"wrote {_esc(str(out))}: {len(instance.tables)} tables on {devices} x {hardware} ({_fmt_bytes(sizes.sum())} of {_fmt_bytes(total)} memory, {100 * doc['memory_fraction']:.1f}%)",
        ]
        if doc["assumed_pooling_factor"]:
            lines.append(f"assumed pooling factor 1.0 per feature for {doc['assumed_pooling_factor']} table(s) (metadata.assumed.pooling_factor); pass --pooling-factors")
        if doc["assumed_access"]:
            lines.append(f"assumed access profile zipf 0.9 for {doc['assumed_access']} table(s) (metadata.assumed.access)")
        _print_lines(_console(), lines)
        if reason:
            _warn(f"the instance has no table-wise plan: {reason}")
