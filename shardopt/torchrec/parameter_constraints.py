"""TorchRec's `ParameterConstraints` as shardopt's placement constraints (shardopt.core.ir.PlacementConstraints).

Why a module of its own: the planner reads a table's workload from its constraints (pooling factors) and where it may
go (sharding types, kernels, column widths, cache), and the second is a mapping with rules of its own, each field
either honoured or refused by name, never dropped:
- `sharding_types` -> the table's sharding types (TorchRec's names are the IR's);
- `compute_kernels` -> its kernels: fused, fused_uvm, fused_uvm_caching as they are; "dense" is the kernel of a
  data-parallel table, so a list without it rules data_parallel out, and "dense" alone means data_parallel only;
  any other kernel (quant, key-value, SSD) is refused;
- `min_partition` -> the narrowest column piece, rounded up to a multiple of 4 (TorchRec's column shards are
  multiples of 4 anyway, so a piece of at least 30 columns is one of at least 32);
- `cache_params.load_factor` -> the cache load factor of its UVM-cached shards; the whole `cache_params` (algorithm,
  precision, ...) also travels to the table's ParameterSharding;
- `enforce_hbm=True` -> every weight in HBM (fused only), and the flag travels to the ParameterSharding;
- `feature_names` must be the table's own features; `device_group` the topology's compute device;
- `key_value_params` and `use_virtual_table` are refused (no key-value or SSD tables in the IR).
The planner's own `placement` argument adds what TorchRec cannot say: pins to ranks, co-locate and separate groups.
Every table also keeps to what its collection's sharder offers on the topology's compute device (`within_offer`):
TorchRec's EmbeddingBagCollectionSharder has no row_wise on CPU, nor any UVM kernel, so a plan for a CPU job never
holds them; a constraint that asks only for what the sharder does not offer is refused, naming both.
"""

from __future__ import annotations

import math
from typing import Any

from shardopt.core.errors import UserError
from shardopt.core.ir import (
    CONSTRAINT_SHARDING_TYPES,
    DIM_ALIGNMENT,
    Instance,
    IRError,
    Kernel,
    PlacementConstraints,
    instance_from_dict,
)

KERNELS = {k.value: k for k in Kernel}  # TorchRec's compute kernel names for the IR's tiers
DENSE = "dense"  # TorchRec's kernel for a data-parallel table
DATA_PARALLEL = "data_parallel"
# fields that change nothing about where a table goes, copied onto its ParameterSharding as they are
PASSED_THROUGH = ("stochastic_rounding", "bounds_check_mode", "output_dtype", "cache_params", "enforce_hbm")


class ConstraintMappingError(UserError, ValueError):
    """A ParameterConstraints field (or a placement given beside them) that cannot be honoured; the message names it."""


def table_constraint(key: str, table: str, pc: Any, features: list[str], compute_device: str) -> dict[str, Any] | None:
    """The IR's constraint for one table (`table`: its name in the instance) from TorchRec's ParameterConstraints
    `pc` given under `key`, or None when `pc` asks nothing about where the table goes."""
    if pc is None:
        return None
    where = f"constraints[{key!r}]"
    if getattr(pc, "key_value_params", None) is not None:
        raise ConstraintMappingError(f"{where}.key_value_params: set (key-value / SSD tables are not in shardopt's IR)")
    if getattr(pc, "use_virtual_table", False):
        raise ConstraintMappingError(f"{where}.use_virtual_table: True (key-value / SSD tables are not in shardopt's IR)")
    group = getattr(pc, "device_group", None)
    if group is not None and group != compute_device:
        raise ConstraintMappingError(f"{where}.device_group: {group!r}, but the topology's compute device is {compute_device!r} "
                                     "(shardopt places every table on the ranks' own devices)")
    named = getattr(pc, "feature_names", None)
    if named is not None and list(named) != list(features):
        raise ConstraintMappingError(f"{where}.feature_names: {list(named)} are not the table's features {list(features)}")
    out: dict[str, Any] = {}
    types = _sharding_types(where, pc.sharding_types)
    kernels, kernel_types = _kernels(where, getattr(pc, "compute_kernels", None))
    if kernel_types is not None:
        types = [t for t in (types or list(CONSTRAINT_SHARDING_TYPES)) if t in kernel_types]
        if not types:
            raise ConstraintMappingError(f"{where}: sharding_types {list(pc.sharding_types)} and compute_kernels "
                                         f"{list(pc.compute_kernels)} leave the table no placement")
    if getattr(pc, "enforce_hbm", None):
        kernels = [k for k in (kernels or list(Kernel)) if k is Kernel.fused]
        if not kernels:
            raise ConstraintMappingError(f"{where}.enforce_hbm: True, but compute_kernels {list(pc.compute_kernels)} keep the table out of HBM")
    if types is not None:
        out["sharding_types"] = types
    if kernels is not None:
        out["kernels"] = [k.value for k in kernels]
    if pc.min_partition is not None:
        if not isinstance(pc.min_partition, int) or pc.min_partition < 1:
            raise ConstraintMappingError(f"{where}.min_partition: {pc.min_partition!r} must be a whole number of columns >= 1")
        out["min_partition"] = max(DIM_ALIGNMENT, math.ceil(pc.min_partition / DIM_ALIGNMENT) * DIM_ALIGNMENT)
    cache = getattr(pc, "cache_params", None)
    if cache is not None and cache.load_factor is not None:
        lf = cache.load_factor
        if not (isinstance(lf, (int, float)) and 0 < float(lf) <= 1):
            raise ConstraintMappingError(f"{where}.cache_params.load_factor: {lf!r} must be in (0, 1]")
        out["cache_load_factor"] = float(lf)
    return {"table": table, **out} if out else None


def within_offer(key: str, table: str, tc: dict[str, Any] | None, sharder: Any, compute_device: str) -> dict[str, Any] | None:
    """The table's constraint (`tc`, from its ParameterConstraints; None: none) narrowed to the sharding types and
    kernels its collection's `sharder` offers on `compute_device` (TorchRec's `sharding_types` / `compute_kernels`);
    None where nothing is left to say. ConstraintMappingError when the constraint leaves the table nothing offered."""
    offered = [t for t in sharder.sharding_types(compute_device) if t in CONSTRAINT_SHARDING_TYPES]
    kernels = sorted({k for t in offered for k in sharder.compute_kernels(t, compute_device) if k in KERNELS}, key=list(KERNELS).index)
    out = dict(tc or {"table": table})
    types = out.get("sharding_types") or list(CONSTRAINT_SHARDING_TYPES)
    kept = [t for t in types if t in offered]
    if not kept:
        raise ConstraintMappingError(f"constraints[{key!r}].sharding_types: {types}, but {type(sharder).__name__} offers on {compute_device} "
                                     f"only {', '.join(offered)}")
    if kept != list(CONSTRAINT_SHARDING_TYPES):
        out["sharding_types"] = kept
    want = out.get("kernels") or list(KERNELS)
    left = [k for k in want if k in kernels]
    if not left and [t for t in kept if t != DATA_PARALLEL]:
        raise ConstraintMappingError(f"constraints[{key!r}].compute_kernels: {want}, but {type(sharder).__name__} offers on {compute_device} "
                                     f"only {', '.join(kernels + [DENSE])}")
    if left and left != list(KERNELS):
        out["kernels"] = left
    return out if set(out) - {"table"} else None


def _sharding_types(where: str, types: Any) -> list[str] | None:
    if types is None:
        return None
    out = [str(getattr(t, "value", t)) for t in types]
    for t in out:
        if t not in CONSTRAINT_SHARDING_TYPES:
            raise ConstraintMappingError(f"{where}.sharding_types: {t!r} is not a sharding type shardopt places ({', '.join(CONSTRAINT_SHARDING_TYPES)})")
    if not out:
        raise ConstraintMappingError(f"{where}.sharding_types: [] leaves the table no placement")
    return out


def _kernels(where: str, kernels: Any) -> tuple[list[Kernel] | None, set[str] | None]:
    """(the IR's kernels, the sharding types the list allows: without "dense" no data_parallel, with "dense" alone
    data_parallel only; None: no restriction)."""
    if kernels is None:
        return None, None
    names = [str(getattr(k, "value", k)) for k in kernels]
    for k in names:
        if k not in KERNELS and k != DENSE:
            raise ConstraintMappingError(f"{where}.compute_kernels: {k!r} is not a kernel shardopt places "
                                         f"({', '.join([*KERNELS, DENSE])})")
    tiers = [KERNELS[k] for k in names if k in KERNELS]
    if not tiers:
        if not names:
            raise ConstraintMappingError(f"{where}.compute_kernels: [] leaves the table no placement")
        return None, {DATA_PARALLEL}
    return tiers, None if DENSE in names else set(CONSTRAINT_SHARDING_TYPES) - {DATA_PARALLEL}


def with_constraints(instance: Instance, tables: list[dict[str, Any]], placement: PlacementConstraints | dict[str, Any] | None,
                     names: dict[str, str] | None = None) -> Instance:
    """`instance` with the constraints mapped from ParameterConstraints (`tables`) and the planner's `placement`
    (pins, co-locate, separate, and per-table fields), merged per table; a field both set is refused by name.
    `names`: the table names a user may write in `placement` (a collection's own table name where it is unique)
    -> the instance's."""
    extra = placement.model_dump(mode="json", exclude_none=True) if isinstance(placement, PlacementConstraints) else dict(placement or {})
    unknown = sorted(set(extra) - {"tables", "colocate", "separate"})
    if unknown:
        raise ConstraintMappingError(f"placement.{unknown[0]}: not a placement field (tables, colocate, separate)")
    names = names or {}

    def named(where: str, name: Any) -> str:
        if not isinstance(name, str) or name not in names and name not in {t.name for t in instance.tables}:
            raise ConstraintMappingError(f"{where}: {name!r} names no table of the model's collections")
        return names.get(name, name)

    merged: dict[str, dict[str, Any]] = {tc["table"]: dict(tc) for tc in tables}
    for i, tc in enumerate(extra.get("tables") or []):
        if not isinstance(tc, dict):
            raise ConstraintMappingError(f"placement.tables[{i}]: {tc!r} is not a table's constraint (a dict with 'table')")
        name = named(f"placement.tables[{i}].table", tc.get("table"))
        have = merged.setdefault(name, {"table": name})
        for k, v in tc.items():
            if k != "table" and v is not None:
                if k in have:
                    raise ConstraintMappingError(f"placement.tables[{i}].{k}: set for table {name!r} by its ParameterConstraints too")
                have[k] = v
    groups = {kind: [[named(f"placement.{kind}[{g}]", n) for n in group] for g, group in enumerate(extra.get(kind) or [])]
              for kind in ("colocate", "separate")}
    body = {"tables": list(merged.values()), **groups}
    if not (body["tables"] or body["colocate"] or body["separate"]):
        return instance
    doc = instance.model_dump(mode="json")
    doc["constraints"] = body
    try:
        return instance_from_dict(doc)
    except IRError as exc:
        raise ConstraintMappingError(f"placement constraints: {exc}") from None
