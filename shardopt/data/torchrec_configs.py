"""Instances from TorchRec `EmbeddingBagConfig`s (a JSON list or a Python file that defines them) with pooling
statistics, and the configs back from an instance (`embedding_bag_configs`, with its optimizer: `apply_optimizer`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shardopt.core.hardware import DEFAULT_PROFILE, PROFILES
from shardopt.core.ir import Dtype, Instance, IRError, Optimizer, instance_from_dict
from shardopt.data.torchrec_install import require_torchrec

DEFAULT_POOLING_FACTOR = 1.0


# the synthetic pool draws Zipf exponents uniformly in [0.4, 1.4] (instances/README.md); its midpoint is the default
DEFAULT_ACCESS = {"zipf": 0.9}


def embedding_bag_configs(instance: Instance) -> list[Any]:
    """One `EmbeddingBagConfig` per table: its feature names as imported (the instance's metadata "features"), else
    the table's name; fp16 tables as DataType.FP16."""
    require_torchrec()
    from torchrec import EmbeddingBagConfig
    from torchrec.modules.embedding_configs import DataType

    features = feature_names_of(instance)
    out = []
    for t in instance.tables:
        dtype = DataType.FP16 if instance.table_dtype(t) is Dtype.fp16 else DataType.FP32
        out.append(EmbeddingBagConfig(name=t.name, num_embeddings=t.rows, embedding_dim=t.dim, feature_names=features[t.name], data_type=dtype))
    return out


def feature_names_of(instance: Instance) -> dict[str, list[str]]:
    """Each table's feature names: as its configs had them (metadata "features", written by `instance_from_configs`),
    else the table's own name."""
    kept = instance.metadata.get("features") if isinstance(instance.metadata, dict) else None
    kept = kept if isinstance(kept, dict) else {}
    return {t.name: [str(f) for f in kept[t.name]] if isinstance(kept.get(t.name), list) and kept[t.name] else [t.name] for t in instance.tables}


def load_configs(spec: str) -> tuple[list[Any], str]:
    """`EmbeddingBagConfig`s from a JSON file (a list of {name, num_embeddings, embedding_dim, feature_names?,
    data_type?, pooling?}, or {"tables": [...]}) or a Python import path `module:attribute` (a list of configs, an
    `EmbeddingBagCollection`, or a callable without arguments returning either). Returns (configs, provenance);
    IRError naming the spec or the field otherwise."""
    require_torchrec()
    p = Path(spec)
    if p.suffix.lower() == ".json" or p.is_file():
        return _configs_from_json(p), f"EmbeddingBagConfigs from JSON {spec}"
    if ":" not in spec:
        raise IRError(["expected a JSON file of configs or a Python import path 'module:attribute' (no such file, no ':')"], spec)
    return _configs_from_python(spec), f"EmbeddingBagConfigs from Python {spec}"


# a configs document's own fields beside "tables": where the configuration was published, and what it leaves unsaid
CITATION_FIELDS = ("source", "note")


def configs_citation(spec: str) -> dict[str, str]:
    """The citation a JSON configs document carries ({"source": ..., "note": ..., "tables": [...]}), for the
    instance's metadata: a real model's instance names where its tables were published. Empty for a list document
    or a Python spec; IRError naming the field when one is not a string."""
    p = Path(spec)
    if not (p.suffix.lower() == ".json" or p.is_file()):
        return {}
    from shardopt.core.ir import read_json

    data = read_json(p)
    if not isinstance(data, dict):
        return {}
    bad = [k for k in CITATION_FIELDS if k in data and not (isinstance(data[k], str) and data[k].strip())]
    if bad:
        raise IRError([f"{bad[0]}: {data[bad[0]]!r} is not a non-empty string"], spec)
    return {k: data[k] for k in CITATION_FIELDS if k in data}


_JSON_CONFIG_FIELDS = {"name", "num_embeddings", "embedding_dim", "feature_names", "data_type", "pooling", "weight_init_max", "weight_init_min", "need_pos"}


def _configs_from_json(path: Path) -> list[Any]:
    from torchrec import EmbeddingBagConfig
    from torchrec.modules.embedding_configs import DataType, PoolingType

    from shardopt.core.ir import read_json

    data = read_json(path)
    source = str(path)
    if isinstance(data, dict) and "tables" in data:
        unknown = sorted(set(data) - {"tables", *CITATION_FIELDS})
        if unknown:
            raise IRError([f"{unknown[0]}: unknown field of a configs document (known: tables, {', '.join(CITATION_FIELDS)})"], source)
        data = data["tables"]
    if not isinstance(data, list) or not data:
        raise IRError(["(document): expected a non-empty list of EmbeddingBagConfig objects (or {\"tables\": [...]})"], source)
    out = []
    errors: list[str] = []
    for i, c in enumerate(data):
        where = f"[{i}]"
        if not isinstance(c, dict):
            errors.append(f"{where}: expected an object, got {type(c).__name__}")
            continue
        extra = sorted(set(c) - _JSON_CONFIG_FIELDS)
        if extra:
            errors.append(f"{where}.{extra[0]}: unknown field (known: {', '.join(sorted(_JSON_CONFIG_FIELDS))})")
            continue
        missing = [k for k in ("name", "num_embeddings", "embedding_dim") if k not in c]
        if missing:
            errors.append(f"{where}.{missing[0]}: required field is missing")
            continue
        kw: dict[str, Any] = {"name": c["name"], "num_embeddings": c["num_embeddings"], "embedding_dim": c["embedding_dim"]}
        for key in ("name",):
            if not isinstance(c[key], str) or not c[key]:
                errors.append(f"{where}.{key}: {c[key]!r} is not a non-empty string")
        for key in ("num_embeddings", "embedding_dim"):
            if isinstance(c[key], bool) or not isinstance(c[key], int) or c[key] < 1:
                errors.append(f"{where}.{key}: {c[key]!r} is not an integer >= 1")
        fn = c.get("feature_names", [c["name"]])
        if not isinstance(fn, list) or not all(isinstance(x, str) and x for x in fn):
            errors.append(f"{where}.feature_names: {fn!r} is not a list of names")
        kw["feature_names"] = fn
        if "data_type" in c:
            try:
                kw["data_type"] = DataType[str(c["data_type"]).upper()]
            except KeyError:
                errors.append(f"{where}.data_type: {c['data_type']!r} is not a TorchRec DataType ({', '.join(d.name for d in DataType)})")
        if "pooling" in c:
            try:
                kw["pooling"] = PoolingType[str(c["pooling"]).upper()]
            except KeyError:
                errors.append(f"{where}.pooling: {c['pooling']!r} is not a TorchRec PoolingType ({', '.join(d.name for d in PoolingType)})")
        for key in ("weight_init_max", "weight_init_min", "need_pos"):
            if key in c:
                kw[key] = c[key]
        if errors:
            continue
        try:
            out.append(EmbeddingBagConfig(**kw))
        except Exception as exc:  # noqa: BLE001 - TorchRec's own validation, reported with the entry
            errors.append(f"{where}: TorchRec refused it ({type(exc).__name__}: {exc})")
    if errors:
        raise IRError(errors, source)
    return out


def _configs_from_python(spec: str) -> list[Any]:
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise IRError(["expected 'module:attribute'"], spec)
    added = False
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # like `python -m`: modules beside the user resolve
        sys.path.insert(0, cwd)
        added = True
    try:
        try:
            obj: Any = importlib.import_module(mod_name)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's module is bad input
            raise IRError([f"cannot import module {mod_name!r} ({type(exc).__name__}: {exc})"], spec) from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise IRError([f"module {mod_name!r} has no attribute {attr!r}"], spec)
            obj = getattr(obj, part)
        if callable(obj) and not isinstance(obj, (list, tuple, EmbeddingBagCollection)):
            try:
                obj = obj()
            except Exception as exc:  # noqa: BLE001
                raise IRError([f"calling {attr} failed ({type(exc).__name__}: {exc})"], spec) from None
    finally:
        if added:
            sys.path.remove(cwd)
    if isinstance(obj, EmbeddingBagCollection):
        obj = obj.embedding_bag_configs()
    if isinstance(obj, EmbeddingBagConfig):
        obj = [obj]
    if not isinstance(obj, (list, tuple)) or not obj:
        raise IRError([f"expected a non-empty list of EmbeddingBagConfig (or an EmbeddingBagCollection), got {type(obj).__name__}"], spec)
    bad = [i for i, c in enumerate(obj) if not isinstance(c, EmbeddingBagConfig)]
    if bad:
        raise IRError([f"[{bad[0]}]: {type(obj[bad[0]]).__name__} is not an EmbeddingBagConfig"], spec)
    return list(obj)


def _parse_stat(key: str, value: Any, source: str) -> tuple[float | None, dict[str, Any] | None]:
    """(pooling factor, access profile dict) of one --pooling-factors entry."""
    if isinstance(value, bool):
        raise IRError([f"{key}: {value!r} is not a number"], source)
    if isinstance(value, (int, float)):
        return float(value), None
    if isinstance(value, dict):
        extra = sorted(set(value) - {"pooling_factor", "zipf", "histogram"})
        if extra:
            raise IRError([f"{key}.{extra[0]}: unknown field (known: pooling_factor, zipf, histogram)"], source)
        pf = value.get("pooling_factor")
        if pf is not None and (isinstance(pf, bool) or not isinstance(pf, (int, float))):
            raise IRError([f"{key}.pooling_factor: {pf!r} is not a number"], source)
        access = {k: value[k] for k in ("zipf", "histogram") if k in value} or None
        return (float(pf) if pf is not None else None), access
    raise IRError([f"{key}: expected a number or an object {{pooling_factor, zipf, histogram}}, got {type(value).__name__}"], source)


def instance_from_configs(
    configs: list[Any],
    *,
    num_devices: int,
    devices_per_host: int | None = None,
    memory_bytes: int | list[int] | None = None,
    hardware: str = DEFAULT_PROFILE,
    batch_size: int,
    pooling: Mapping[str, Any] | None = None,
    optimizer: str = "rowwise_adagrad",
    weight_dtype: str = "fp32",
    name: str = "",
    provenance: str = "",
    source: str = "pooling factors",
    topology_extra: Mapping[str, Any] | None = None,
    metadata_extra: Mapping[str, Any] | None = None,
) -> Instance:
    """An instance of `configs` (one table per config) on a topology of `num_devices` devices.

    `pooling` maps a table name or a feature name to its pooling factor (a number) or to {pooling_factor, zipf,
    histogram}. A table's pooling factor is its own entry's, else the sum over its features (lookups per sample add
    up; a feature without an entry counts DEFAULT_POOLING_FACTOR); its access profile is its own entry's, else the
    first of its features' that gives one, else DEFAULT_ACCESS. Every default used is listed in the instance's
    metadata under "assumed", per table. `topology_extra` / `metadata_extra`: more topology fields (host memory,
    bandwidths) and metadata. IRError naming the field for anything invalid."""
    if hardware not in PROFILES:
        raise IRError([f"hardware: {hardware!r} is not a known hardware profile (known: {', '.join(sorted(PROFILES))})"])
    pooling = dict(pooling or {})
    table_names = {c.name for c in configs}
    feature_names = {f for c in configs for f in c.feature_names}
    unused = sorted(set(pooling) - table_names - feature_names)
    if unused:
        raise IRError([f"{unused[0]}: names no table or feature of the configs"], source)
    tables: list[dict[str, Any]] = []
    assumed_pf: list[str] = []
    assumed_access: list[str] = []
    for c in configs:
        pf, access = _parse_stat(c.name, pooling[c.name], source) if c.name in pooling else (None, None)
        others = [f for f in c.feature_names if f != c.name]
        if pf is None:
            total, defaulted = 0.0, False
            for f in c.feature_names:
                fpf = None
                if f != c.name and f in pooling:
                    fpf, facc = _parse_stat(f, pooling[f], source)
                    access = access or facc
                if fpf is None:
                    fpf, defaulted = DEFAULT_POOLING_FACTOR, True
                total += fpf
            pf = total
            if defaulted:
                assumed_pf.append(c.name)
        else:
            for f in others:
                if access is None and f in pooling:
                    access = _parse_stat(f, pooling[f], source)[1]
        if access is None:
            access = dict(DEFAULT_ACCESS)
            assumed_access.append(c.name)
        dtype_name = getattr(getattr(c, "data_type", None), "name", "FP32")
        if dtype_name not in ("FP32", "FP16"):
            raise IRError([f"{c.name}: data_type {dtype_name} has no shardopt equivalent (fp32, fp16)"], provenance or None)
        entry: dict[str, Any] = {"name": c.name, "rows": int(c.num_embeddings), "dim": int(c.embedding_dim), "pooling_factor": pf, "access": access}
        if dtype_name.lower() != weight_dtype:
            entry["dtype"] = dtype_name.lower()
        tables.append(entry)
    topology: dict[str, Any] = {
        "num_devices": num_devices,
        "devices_per_host": devices_per_host or num_devices,
        "memory_bytes": memory_bytes if memory_bytes is not None else PROFILES[hardware].memory_bytes,
        "hardware": hardware,
        **(topology_extra or {}),
    }
    metadata: dict[str, Any] = {"generator": "shardopt import-torchrec", "provenance": provenance, **(metadata_extra or {}),
                                "features": {c.name: list(c.feature_names) for c in configs}}
    multi = [c.name for c in configs if len(c.feature_names) > 1]
    if multi:
        metadata["shared_tables"] = {
            "tables": multi,
            "note": "a table read by several features gets the sum of their pooling factors (lookups per sample); the IR has one bag per table and sample",
        }
    metadata["assumed"] = {
        "pooling_factor": {"value": DEFAULT_POOLING_FACTOR, "per": "feature", "tables": assumed_pf},
        "access": {"value": DEFAULT_ACCESS, "tables": assumed_access},
    }
    if memory_bytes is None:
        metadata["assumed"]["memory_bytes"] = f"the {hardware} profile's device memory"
    doc = {
        "schema_version": 1,
        "kind": "instance",
        "name": name,
        "tables": tables,
        "topology": topology,
        "workload": {"batch_size": batch_size, "optimizer": optimizer, "weight_dtype": weight_dtype},
        "metadata": metadata,
    }
    return instance_from_dict(doc, provenance or None)


OPTIMIZER_CLASSES = {Optimizer.sgd: "SGD", Optimizer.rowwise_adagrad: "RowWiseAdagrad", Optimizer.adam: "Adam"}


def apply_optimizer(instance: Instance, module: Any) -> None:
    """Attach the instance's optimizer to `module`'s parameters (as `_apply_optimizer_in_backward` does), so that
    TorchRec's storage estimator counts its state (rowwise_adagrad: 1/dim of the weights; adam: 2x; sgd: none)."""
    import torchrec.optim as trec_optim
    from torch.distributed.optim import _apply_optimizer_in_backward

    cls = getattr(trec_optim, OPTIMIZER_CLASSES[instance.workload.optimizer])
    _apply_optimizer_in_backward(optimizer_class=cls, params=module.parameters(), optimizer_kwargs={"lr": 0.01})
