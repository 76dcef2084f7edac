"""TorchRec interop: our plans as TorchRec `ShardingPlan`s and TorchRec plans as ours (instances from
`EmbeddingBagConfig`s: shardopt.data.torchrec_configs; installing and importing TorchRec: shardopt.data.torchrec_install).

TorchRec is an optional extra (`[torchrec]`). It must be installed with `--no-deps` (its metadata asks for the CUDA
`fbgemm-gpu`, 2.7 GB, which would replace the CPU build `fbgemm-gpu-cpu` that shardopt runs on), so this module
imports nothing of TorchRec at import time: every function that needs it calls :func:`require_torchrec`, which
raises :class:`TorchRecUnavailableError` (its message holds the exact pip commands) when TorchRec cannot be imported.

Mapping between the two worlds (docs/torchrec.md has the full account):

- one `ParameterSharding` per table, keyed by the table's name under one module path (the path of the
  `EmbeddingBagCollection` inside the user's model; "" when the collection itself is the model);
- sharding type from the shards: replicated -> data_parallel (compute kernel "dense", the only one TorchRec allows
  for it); one whole-table shard -> table_wise; full-height column slices -> column_wise; full-width row slices ->
  table_row_wise when they are TorchRec's layout over the ranks of one host (of several), row_wise when they are its
  layout over all ranks; row x column blocks -> grid_shard (each column block in the one-host layout);
- compute kernel from the shards' `kernel` (one per table: TorchRec's ParameterSharding has one compute kernel and
  one `cache_params`): fused -> "fused"; fused_uvm_caching -> "fused_uvm_caching" with
  `cache_params=CacheParams(load_factor=cache_load_factor)`; fused_uvm -> "fused_uvm";
- a shard `{table, device, col_offset, cols, row_offset, rows}` is a `ShardMetadata(shard_offsets=[row_offset,
  col_offset], shard_sizes=[rows, cols], placement="rank:N/cuda:M")` with N = device and M = N % devices_per_host;
- shards of size zero (TorchRec's row-wise layout gives the last ranks empty shards when rows < world size) are
  dropped on import and restored on export.

Export refuses (ValueError naming the table) what TorchRec cannot load as it means: a table whose shards mix
kernels or cache load factors; row slices that are not TorchRec's row layout (blocks of ceil(rows / ranks) on
the ranks of the group in rank order: TorchRec's input distribution buckets ids by that block size whatever the
sharding spec says, so another layout would send ids to the wrong rank); and slices of one table on one rank of
different shapes (TorchRec's fused kernel stacks them as equal blocks). Uneven column slices on different ranks,
and equal ones on one rank in any order, are fine (tests/test_torchrec_dmp.py runs them).

Round trip: ours -> TorchRec -> ours gives back the same shard list for every plan whose shards are in
:func:`normalize_shards` form (whole-table shards with default fields, explicit `cols` / `rows` only where a shard
does not span the table, kernel and cache load factor kept) and grouped by table in instance order; this is the
form every solver here produces.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shardopt.core.errors import UserError
from shardopt.core.hardware import PROFILES
from shardopt.core.ir import Instance, IRError, Kernel, Plan, Shard, Table, Topology
from shardopt.core.sharding_types import (  # (the names live in the leaf module the cost model shares)
    COLUMN_WISE,
    DATA_PARALLEL,
    GRID_SHARD,
    ROW_WISE,
    TABLE_COLUMN_WISE,
    TABLE_ROW_WISE,
    TABLE_WISE,
    sharding_type,
)

# the form TorchRec loads a table's shards in: rules on a plan, in the core (the plan checker enforces them)
from shardopt.core.torchrec_form import (
    column_widths,
    grid_problem,
    host_ranks,
    kernel_problem,
    layout_problem,
    row_layout,
    rw_layout,
    same_rank_problem,
)

# installing TorchRec and importing it (torchrec_install), and instances from its configs (torchrec_configs): their
# own modules, their public names handed on here
from shardopt.data.torchrec_configs import apply_optimizer, embedding_bag_configs, instance_from_configs, load_configs
from shardopt.data.torchrec_install import (
    TORCHREC_RUNTIME_PINS,
    TORCHREC_VERSION,
    TorchRecUnavailableError,
    install_commands,
    install_hint,
    require_torchrec,
)

# ---------------------------------------------------------------------------------------------------------------
# sharding types and compute kernels

# every TorchRec sharding type whose shards our IR expresses (and the analytic judge costs: column and row slices,
# replicas); TorchRec's other kinds (key-value / SSD virtual tables) need storage tiers the IR does not model
SUPPORTED_SHARDING_TYPES: tuple[str, ...] = (TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, TABLE_COLUMN_WISE, DATA_PARALLEL, GRID_SHARD)
# TorchRec's compute kernels (torchrec.distributed.embedding_types.EmbeddingComputeKernel values) that the IR holds
FUSED = "fused"
FUSED_UVM_CACHING = "fused_uvm_caching"
FUSED_UVM = "fused_uvm"
DENSE = "dense"
UVM_KERNELS: tuple[str, ...] = (FUSED_UVM_CACHING, FUSED_UVM)
KERNEL_OF: dict[Kernel, str] = {Kernel.fused: FUSED, Kernel.fused_uvm_caching: FUSED_UVM_CACHING, Kernel.fused_uvm: FUSED_UVM}
# The load factor a fused_uvm_caching table gets when its ParameterSharding has no cache_params (or load_factor None)
# and the sharder's fused_params name none: fbgemm's SplitTableBatchedEmbeddingBagsCodegen(cache_load_factor=0.2),
# which TorchRec's BatchedFusedEmbeddingBag builds without one; TorchRec's planner assumes the same
# (torchrec.distributed.planner.constants.UVM_CACHING_RATIO = 0.2, used by its storage and perf estimators).
TORCHREC_DEFAULT_CACHE_LOAD_FACTOR = 0.2
COMPUTE_DEVICES = ("cuda", "cpu")


def placement(rank: int, devices_per_host: int, compute_device: str = "cuda") -> str:
    """TorchRec's placement string of `rank`: "rank:N/cuda:M" with M = N % devices_per_host ("rank:N/cpu" on CPU)."""
    if compute_device == "cpu":
        return f"rank:{rank}/cpu"
    return f"rank:{rank}/{compute_device}:{rank % devices_per_host}"


def rank_of_placement(text: str) -> int:
    """N of "rank:N/device"."""
    head = str(text).split("/", 1)[0]
    if not head.startswith("rank:"):
        raise ValueError(f"placement {text!r} does not start with 'rank:N'")
    return int(head[len("rank:") :])


# ---------------------------------------------------------------------------------------------------------------
# our shards: normal form and classification


def normalize_shard(table: Table, shard: Shard) -> Shard:
    """The canonical form of `shard`: defaults for a whole-table extent, explicit counts where it does not span;
    kernel and cache load factor as they are."""
    c0, c1 = shard.col_range(table)
    r0, r1 = shard.row_range(table)
    full_cols = c0 == 0 and c1 == table.dim
    full_rows = r0 == 0 and r1 == table.rows
    return Shard(
        table=shard.table,
        device=shard.device,
        col_offset=c0,
        cols=None if full_cols else c1 - c0,
        row_offset=r0,
        rows=None if full_rows else r1 - r0,
        replicated=shard.replicated,
        column_wise=shard.column_wise,
        kernel=shard.kernel,
        cache_load_factor=shard.cache_load_factor,
    )


def normalize_shards(instance: Instance, shards: Iterable[Shard]) -> list[Shard]:
    """Every shard in normal form, grouped by table in instance order (each table's shards in their given order)."""
    by_table: dict[str, list[Shard]] = defaultdict(list)
    for s in shards:
        by_table[s.table].append(s)
    index = instance.table_index()
    unknown = sorted(set(by_table) - set(index))
    if unknown:
        raise IRError([f"shards: table {unknown[0]!r} is not in the instance"])
    out = []
    for t in instance.tables:
        out.extend(normalize_shard(t, s) for s in by_table.get(t.name, []))
    return out


def classify_table(instance: Instance, table: Table, shards: list[Shard]) -> str:
    """TorchRec's sharding type for one table's shards (shardopt.core.sharding_types.sharding_type). Row slices that
    are no TorchRec layout classify as row_wise (table_row_wise when on one host of several); :func:`export_problems`
    says why they cannot be exported."""
    return sharding_type(instance.topology, table, shards)


def table_kernel(table: Table, shards: list[Shard]) -> tuple[Kernel, float | None]:
    """The one (kernel, cache load factor) of a table's shards; ValueError naming the table when they differ
    (TorchRec's ParameterSharding has one compute kernel and one cache_params per table)."""
    why = kernel_problem(table, shards)
    if why:
        raise ValueError(why)
    factors = {s.cache_load_factor for s in shards if s.cache_load_factor is not None}
    return shards[0].kernel, (next(iter(factors)) if factors else None)


# ---------------------------------------------------------------------------------------------------------------
# ours -> TorchRec


def _table_specs(instance: Instance, table: Table, shards: list[Shard]) -> tuple[str, list[tuple[list[int], list[int], int]]]:
    """(sharding type, [(offsets, sizes, rank)]) of one table; ValueError naming the table when TorchRec has no
    layout for its shards."""
    kind = classify_table(instance, table, shards)
    if kind == DATA_PARALLEL:
        return kind, [([0, 0], [table.rows, table.dim], s.device) for s in sorted(shards, key=lambda s: s.device)]
    if kind in (ROW_WISE, TABLE_ROW_WISE):
        kind2, ranks, why = row_layout(instance, table, shards)
        if kind2 is None:
            raise ValueError(why)
        # TorchRec's own layout: one block per rank of the group in rank order, the empty ones included
        return kind2, [([off, 0], [n, table.dim], r) for (off, n), r in zip(rw_layout(table.rows, len(ranks)), ranks)]
    if kind in (COLUMN_WISE, GRID_SHARD):
        why = same_rank_problem(table, shards)
        if why:
            raise ValueError(why)
    if kind == GRID_SHARD:
        why = grid_problem(instance, table, shards)
        if why:
            raise ValueError(why)
        topo = instance.topology
        by_cols: dict[tuple[int, int], list[Shard]] = defaultdict(list)
        for s in shards:
            by_cols[s.col_range(table)].append(s)
        entries = []
        for (c0, c1), group in by_cols.items():  # column blocks in the plan's order, each over its host's ranks
            ranks = host_ranks(instance, topo.intra_group_of(group[0].device))
            entries += [([off, c0], [n, c1 - c0], r) for (off, n), r in zip(rw_layout(table.rows, len(ranks)), ranks)]
        return kind, entries
    return kind, [([s.row_range(table)[0], s.col_range(table)[0]], [s.height(table), s.width(table)], s.device) for s in shards]


def to_torchrec_plan(instance: Instance, plan: Plan | list[Shard], *, module_path: str = "", compute_device: str = "cuda") -> Any:
    """A TorchRec `ShardingPlan` for `plan`: pass it to `DistributedModelParallel(model, plan=...)`.

    One `ParameterSharding` per table (keyed by table name) under `module_path` (the path of the
    `EmbeddingBagCollection` in the model; "" when the collection is the model), with its sharding type, compute kernel
    ("dense" for data_parallel; else the shards' kernel: "fused", "fused_uvm_caching" with
    `cache_params=CacheParams(load_factor=...)`, or "fused_uvm"), ranks and an `EnumerableShardingSpec` with
    "rank:N/cuda:M" placements (M = N % devices_per_host). ValueError when the plan is not valid for the instance
    (shardopt.core.plan_check), when a table's shards mix kernels or load factors, or when row slices are not a
    TorchRec row layout (the message names the table)."""
    sharding_plan, _ = _to_torchrec_plan(instance, plan, module_path=module_path, compute_device=compute_device)
    return sharding_plan


def export_problems(instance: Instance, plan: Plan | list[Shard]) -> list[str]:
    """Why each table of `plan` that TorchRec cannot load as it means would be refused by :func:`to_torchrec_plan`
    (mixed kernels or load factors in one table, row slices in no TorchRec layout); empty when every table exports."""
    shards = plan.shards if isinstance(plan, Plan) else plan
    by_table: dict[str, list[Shard]] = defaultdict(list)
    for s in shards:
        by_table[s.table].append(s)
    return [why for t in instance.tables if (why := layout_problem(instance, t, by_table.get(t.name, [])))]


def export_warnings(instance: Instance, plan: Plan | list[Shard], compute_device: str = "cuda") -> list[str]:
    """What TorchRec accepts but may not run as the plan means (empty when all is plain): UVM kernels placed on
    compute device cpu, where TorchRec keeps every table in host memory whatever the kernel."""
    shards = plan.shards if isinstance(plan, Plan) else plan
    out = []
    uvm = sorted({s.table for s in shards if s.kernel is not Kernel.fused})
    if compute_device == "cpu" and uvm:
        out.append(
            f"{len(uvm)} table(s) ({', '.join(repr(n) for n in uvm[:5])}{', ...' if len(uvm) > 5 else ''}) use UVM kernels, "
            "exported for compute device cpu: TorchRec's CPU path keeps every table in host memory (fbgemm's HOST "
            "location) whatever the kernel, so the memory tiers of the plan do not apply there"
        )
    uneven = uneven_column_tables(instance, shards)
    if uneven:
        out.append(
            f"{len(uneven)} table(s) ({', '.join(repr(n) for n in uneven[:5])}{', ...' if len(uneven) > 5 else ''}) have column "
            "shards of unequal widths: DistributedModelParallel trains them, but TorchRec's own checkpoint round trip "
            "(dmp.load_state_dict(dmp.state_dict())) fails on them; checkpoint with torch.distributed.checkpoint "
            "(docs/torchrec.md, 'Checkpoints')"
        )
    return out


def uneven_column_tables(instance: Instance, shards: Iterable[Shard]) -> list[str]:
    """The tables whose column slices are not all of one width (cpsat's and neuroshard's uneven pieces)."""
    by_table: dict[str, list[Shard]] = defaultdict(list)
    for s in shards:
        by_table[s.table].append(s)
    return sorted(t.name for t in instance.tables if len(column_widths(t, by_table.get(t.name, []))) > 1)


def _to_torchrec_plan(instance: Instance, plan: Plan | list[Shard], *, module_path: str, compute_device: str) -> tuple[Any, list[str]]:
    require_torchrec()
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.types import CacheParams, EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan

    from shardopt.core.plan_check import check_plan

    if compute_device not in COMPUTE_DEVICES:
        raise ValueError(f"compute_device: {compute_device!r} is not one of {', '.join(COMPUTE_DEVICES)}")
    shards = plan.shards if isinstance(plan, Plan) else list(plan)
    check = check_plan(instance, shards)
    if not check.ok:
        shown = "\n".join("  " + v.message for v in check.violations[:10])
        raise ValueError(f"the plan is not valid for this instance ({len(check.violations)} violation(s)):\n{shown}")
    by_table: dict[str, list[Shard]] = defaultdict(list)
    for s in shards:
        by_table[s.table].append(s)
    dph = instance.topology.devices_per_host
    module_plan = EmbeddingModuleShardingPlan()
    for t in instance.tables:
        kernel, load_factor = table_kernel(t, by_table[t.name])
        kind, entries = _table_specs(instance, t, by_table[t.name])
        ranks = [r for _, _, r in entries]
        if kind == DATA_PARALLEL:  # replicas live in HBM (the IR allows no other kernel for them)
            module_plan[t.name] = ParameterSharding(sharding_type=kind, compute_kernel=DENSE, ranks=ranks, sharding_spec=None)
            continue
        spec = EnumerableShardingSpec(
            [ShardMetadata(shard_offsets=list(off), shard_sizes=list(size), placement=placement(r, dph, compute_device)) for off, size, r in entries]
        )
        cache = CacheParams(load_factor=float(load_factor)) if kernel is Kernel.fused_uvm_caching else None
        module_plan[t.name] = ParameterSharding(sharding_type=kind, compute_kernel=KERNEL_OF[kernel], ranks=ranks, sharding_spec=spec, cache_params=cache)
    return ShardingPlan({module_path: module_plan}), export_warnings(instance, shards, compute_device)


# ---------------------------------------------------------------------------------------------------------------
# TorchRec -> ours

# one table of a TorchRec plan, as read from a ShardingPlan or its JSON form
_Row = tuple[str, str, "list[int] | None", "list[tuple[list[int], list[int], int]] | None", "float | None"]


def _module_plan(sharding_plan: Any, module_path: str | None) -> Mapping[str, Any]:
    plans = sharding_plan.plan if hasattr(sharding_plan, "plan") else sharding_plan
    if module_path is None:
        if len(plans) != 1:
            raise ValueError(f"the TorchRec plan has {len(plans)} module paths ({', '.join(repr(p) for p in plans)}): say which one holds the tables")
        return next(iter(plans.values()))
    if module_path not in plans:
        raise ValueError(f"the TorchRec plan has no module path {module_path!r} (it has {', '.join(repr(p) for p in plans)})")
    return plans[module_path]


def from_torchrec_plan(
    instance: Instance, sharding_plan: Any, *, module_path: str | None = None, default_cache_load_factor: float = TORCHREC_DEFAULT_CACHE_LOAD_FACTOR
) -> list[Shard]:
    """Our shards of a TorchRec `ShardingPlan` (or its JSON form, see :func:`plan_to_json`) for `instance`, in normal
    form, grouped by table in instance order.

    Compute kernels: "fused" -> fused; "fused_uvm_caching" -> fused_uvm_caching with `cache_params.load_factor`, or,
    when the ParameterSharding has no cache_params (or its load_factor is None), `default_cache_load_factor`:
    TorchRec's default 0.2 (fbgemm's SplitTableBatchedEmbeddingBagsCodegen(cache_load_factor=0.2), which TorchRec
    builds without one; its planner assumes UVM_CACHING_RATIO = 0.2) unless you gave the sharder
    `fused_params={"cache_load_factor": x}`, then pass x here; "fused_uvm" -> fused_uvm; "dense" only with
    data_parallel (replicas in HBM). ValueError naming the table when a table is missing, unknown, or has a shard,
    kernel or load factor our IR cannot hold."""
    if isinstance(sharding_plan, dict) and "plan" in sharding_plan and isinstance(sharding_plan["plan"], dict):
        return _shards_from_rows(instance, _json_rows(_check_export_doc(sharding_plan, "TorchRec plan"), module_path), default_cache_load_factor)
    module_plan = _module_plan(sharding_plan, module_path)
    rows: dict[str, _Row] = {}
    for name, ps in module_plan.items():
        spec = ps.sharding_spec
        entries = None
        if spec is not None:
            entries = [(list(m.shard_offsets), list(m.shard_sizes), _rank(m.placement)) for m in spec.shards]
        cache = getattr(ps, "cache_params", None)
        load_factor = getattr(cache, "load_factor", None) if cache is not None else None
        rows[name] = (ps.sharding_type, str(ps.compute_kernel), list(ps.ranks) if ps.ranks is not None else None, entries, load_factor)
    return _shards_from_rows(instance, rows, default_cache_load_factor)


def _rank(p: Any) -> int:
    if hasattr(p, "rank") and callable(p.rank):
        r = p.rank()
        if r is not None:
            return int(r)
    return rank_of_placement(str(p))


def _kernel_fields(table: str, kind: str, compute_kernel: str, load_factor: float | None, default_lf: float) -> dict[str, Any]:
    """Shard fields of a TorchRec compute kernel (see from_torchrec_plan)."""
    if kind == DATA_PARALLEL:
        if compute_kernel not in (DENSE, FUSED):
            raise ValueError(f"table {table!r}: data_parallel with compute kernel {compute_kernel!r}: shardopt's replicas live in HBM (TorchRec's kernel 'dense')")
        return {}
    if compute_kernel == FUSED:
        return {}
    if compute_kernel == FUSED_UVM:
        return {"kernel": Kernel.fused_uvm}
    if compute_kernel == FUSED_UVM_CACHING:
        lf = default_lf if load_factor is None else load_factor
        if isinstance(lf, bool) or not isinstance(lf, (int, float)) or not 0 < lf <= 1:
            raise ValueError(f"table {table!r}: cache_params.load_factor {lf!r} is not a share of the shard's rows in (0, 1]")
        return {"kernel": Kernel.fused_uvm_caching, "cache_load_factor": float(lf)}
    known = f"{FUSED}, {FUSED_UVM_CACHING}, {FUSED_UVM}; {DENSE} with data_parallel"
    raise ValueError(f"table {table!r}: compute kernel {compute_kernel!r} has no shardopt equivalent (supported: {known})")


def _shards_from_rows(instance: Instance, rows: dict[str, _Row], default_lf: float = TORCHREC_DEFAULT_CACHE_LOAD_FACTOR) -> list[Shard]:
    index = instance.table_index()
    unknown = [n for n in rows if n not in index]
    if unknown:
        raise ValueError(f"the TorchRec plan shards {len(unknown)} table(s) the instance does not have: {', '.join(repr(n) for n in unknown[:5])}")
    missing = [t.name for t in instance.tables if t.name not in rows]
    if missing:
        raise ValueError(f"the TorchRec plan does not place {len(missing)} table(s) of the instance: {', '.join(repr(n) for n in missing[:5])}")
    n_dev = instance.topology.num_devices
    out: list[Shard] = []
    for t in instance.tables:
        kind, compute_kernel, ranks, entries, load_factor = rows[t.name]
        if kind not in SUPPORTED_SHARDING_TYPES:
            raise ValueError(f"table {t.name!r}: sharding type {kind!r} has no shardopt equivalent (supported: {', '.join(SUPPORTED_SHARDING_TYPES)})")
        fields = _kernel_fields(t.name, kind, compute_kernel, load_factor, default_lf)
        if kind == DATA_PARALLEL:
            devices = ranks if ranks else list(range(n_dev))
            out.extend(Shard(table=t.name, device=int(d), replicated=True) for d in devices)
            continue
        if not entries:
            raise ValueError(f"table {t.name!r}: {kind} sharding without a sharding spec")
        mine: list[Shard] = []
        for (r0, c0), (h, w), rank in entries:
            if h == 0 or w == 0:
                continue  # TorchRec's empty row blocks: nothing to hold
            if not 0 <= rank < n_dev:
                raise ValueError(f"table {t.name!r}: a shard on rank {rank}, but the instance has devices 0..{n_dev - 1}")
            shard = Shard(table=t.name, device=int(rank), col_offset=int(c0), cols=int(w), row_offset=int(r0), rows=int(h), **fields)
            mine.append(normalize_shard(t, shard))
        if kind == COLUMN_WISE and len(mine) == 1 and mine[0].is_whole:
            mine[0] = mine[0].model_copy(update={"column_wise": True})  # (one rank: its output joins the column-wise all-to-all)
        out.extend(mine)
    return out


# ---------------------------------------------------------------------------------------------------------------
# JSON form of a ShardingPlan (what `shardopt export --format torchrec` writes)

EXPORT_FORMAT = "shardopt.torchrec_sharding_plan"
EXPORT_FORMAT_VERSION = 1  # cache_params (optional per table) was added compatibly: older files still read
# the CacheParams fields the JSON form carries: plain numbers and flags, and two enums by name
_CACHE_NUMBERS = ("load_factor", "reserved_memory")
_CACHE_FLAGS = ("prefetch_pipeline",)
_CACHE_ENUMS = ("algorithm", "precision")


def _cache_params_json(cache: Any) -> dict[str, Any] | None:
    if cache is None:
        return None
    out: dict[str, Any] = {}
    for k in _CACHE_NUMBERS + _CACHE_FLAGS:
        v = getattr(cache, k, None)
        if v is not None:
            out[k] = v
    for k in _CACHE_ENUMS:
        v = getattr(cache, k, None)
        if v is not None:
            out[k] = getattr(v, "name", str(v))
    return out or None


def plan_to_json(sharding_plan: Any, *, instance: Instance | None = None, plan: Plan | None = None, compute_device: str = "cuda", warnings: list[str] | None = None) -> dict[str, Any]:
    """A JSON document of a TorchRec `ShardingPlan`: per module path, per table, its sharding type, compute kernel,
    ranks, shards (offsets [row, col], sizes [rows, cols], placement) and, for UVM-cached tables, `cache_params`
    ({"load_factor": x}, plus TorchRec's other plain CacheParams fields where set). :func:`load_torchrec_plan` reads
    it back."""
    modules: dict[str, Any] = {}
    for path, module_plan in sharding_plan.plan.items():
        tables: dict[str, Any] = {}
        for name, ps in module_plan.items():
            spec = ps.sharding_spec
            entry: dict[str, Any] = {
                "sharding_type": ps.sharding_type,
                "compute_kernel": ps.compute_kernel,
                "ranks": list(ps.ranks) if ps.ranks is not None else None,
            }
            cache = _cache_params_json(getattr(ps, "cache_params", None))
            if cache is not None:
                entry["cache_params"] = cache
            entry["shards"] = (
                None if spec is None else [{"offsets": list(m.shard_offsets), "sizes": list(m.shard_sizes), "placement": str(m.placement)} for m in spec.shards]
            )
            tables[name] = entry
        modules[path] = tables
    doc: dict[str, Any] = {"format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION, "torchrec_version": TORCHREC_VERSION}
    try:
        import torchrec

        doc["torchrec_version"] = getattr(torchrec, "__version__", TORCHREC_VERSION)
    except ImportError:  # pragma: no cover - callers hold a ShardingPlan, so torchrec imports
        pass
    doc["compute_device"] = compute_device
    if instance is not None:
        doc["instance"] = instance.content_hash()
        doc["world_size"] = instance.topology.num_devices
        doc["local_world_size"] = instance.topology.devices_per_host
        if instance.topology.levels is not None:
            doc["pod_size"] = torchrec_pod_size(instance.topology)  # (hosts per NVLink group: TorchRec's Topology pod_size)
    if plan is not None:
        doc["solver"] = plan.solver
        doc["predicted_cost_ms"] = plan.predicted_cost
    doc["load_with"] = "shardopt.data.torchrec_io.load_torchrec_plan(PATH) -> torchrec ShardingPlan (for DistributedModelParallel(plan=...))"
    if instance is not None:
        doc["optimizer"] = {
            "instance": instance.workload.optimizer.value,
            "fused_params": {"optimizer": FUSED_OPTIMIZERS[instance.workload.optimizer.value], "learning_rate": "yours (the instance has none)"},
            "how": "EmbeddingBagCollectionSharder(fused_params=shardopt.data.torchrec_io.fused_params_for(instance, learning_rate)): "
                   "without it TorchRec trains every table with exact SGD, whatever the plan was priced for",
        }
        dp = sorted(name for mp in sharding_plan.plan.values() for name, ps in mp.items() if ps.sharding_type == DATA_PARALLEL)
        if dp:
            doc["optimizer"]["data_parallel_tables"] = {
                "tables": dp,
                "note": "replicated tables are dense parameters: DistributedModelParallel wraps them in DDP, which averages their "
                        "gradients; train them with a dense optimizer (e.g. KeyedOptimizerWrapper over torch.optim.SGD) beside dmp.fused_optimizer",
            }
    doc["warnings"] = list(warnings or [])
    doc["plan"] = modules
    return doc


def _check_export_doc(doc: Any, source: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise IRError([f"format: expected {EXPORT_FORMAT!r} (a file written by `shardopt export --format torchrec`)"], source)
    if doc.get("format_version") != EXPORT_FORMAT_VERSION:
        raise IRError([f"format_version: {doc.get('format_version')!r} is not supported (this shardopt reads {EXPORT_FORMAT_VERSION})"], source)
    if not isinstance(doc.get("plan"), dict):
        raise IRError(["plan: expected an object of module paths"], source)
    for path, tables in doc["plan"].items():
        if not isinstance(tables, dict):
            raise IRError([f"plan.{path!r}: expected an object of tables"], source)
        for name, e in tables.items():
            where = f"plan.{path!r}.{name}"
            if not isinstance(e, dict) or not isinstance(e.get("sharding_type"), str) or not isinstance(e.get("compute_kernel"), str):
                raise IRError([f"{where}: expected an object with sharding_type and compute_kernel"], source)
            cache = e.get("cache_params")
            if cache is not None:
                if not isinstance(cache, dict):
                    raise IRError([f"{where}.cache_params: expected an object (e.g. {{\"load_factor\": 0.2}})"], source)
                extra = sorted(set(cache) - set(_CACHE_NUMBERS + _CACHE_FLAGS + _CACHE_ENUMS))
                if extra:
                    raise IRError([f"{where}.cache_params.{extra[0]}: unknown field (known: {', '.join(_CACHE_NUMBERS + _CACHE_FLAGS + _CACHE_ENUMS)})"], source)
                for k in _CACHE_NUMBERS:
                    v = cache.get(k)
                    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                        raise IRError([f"{where}.cache_params.{k}: {v!r} is not a number"], source)
    return doc


def _json_rows(doc: dict[str, Any], module_path: str | None) -> dict[str, _Row]:
    module_plan = _module_plan(doc["plan"], module_path)
    rows: dict[str, _Row] = {}
    for name, entry in module_plan.items():
        shards = entry.get("shards")
        entries = None if shards is None else [(list(s["offsets"]), list(s["sizes"]), rank_of_placement(s["placement"])) for s in shards]
        cache = entry.get("cache_params") or {}
        rows[name] = (entry["sharding_type"], entry["compute_kernel"], entry.get("ranks"), entries, cache.get("load_factor"))
    return rows


def _cache_params_from_json(cache: dict[str, Any] | None, where: str) -> Any:
    if not cache:
        return None
    from torchrec.distributed.types import CacheAlgorithm, CacheParams, DataType

    kw: dict[str, Any] = {k: cache[k] for k in _CACHE_NUMBERS + _CACHE_FLAGS if cache.get(k) is not None}
    for k, enum in (("algorithm", CacheAlgorithm), ("precision", DataType)):
        if cache.get(k) is not None:
            try:
                kw[k] = enum[str(cache[k])]
            except KeyError:
                raise IRError([f"{where}.cache_params.{k}: {cache[k]!r} is not one of {', '.join(e.name for e in enum)}"]) from None
    return CacheParams(**kw)


class TorchRecPlanError(UserError, ValueError):
    """A TorchRec plan that cannot serve as asked: another world size, a module path the model lacks (the message
    names both sides)."""


class TorchRecTopologyError(UserError, ValueError):
    """A topology TorchRec's planner cannot express (topology levels beyond its NVLink group and network)."""


def load_torchrec_plan(source: str | Path | dict[str, Any], *, compute_device: str | None = None, world_size: int | None = None,
                       model: Any = None) -> Any:
    """The TorchRec `ShardingPlan` of a document written by `shardopt export --format torchrec` (a path or the dict),
    cache_params included.

    `compute_device` ("cuda" / "cpu"): the placements' device, whatever the export said (rank:N/cuda:M with M = N %
    the plan's local world size, or rank:N/cpu). `world_size`: the world the plan will run in (default: the
    initialised default process group's, if any); a plan for another world is refused naming both sizes, where
    TorchRec would fail deep inside with an IndexError. `model`: every module path of the plan must be an embedding
    collection of it, else the refusal names the path and the collections the model has (a wrong path leaves the
    collection unsharded, every rank holding every table, and TorchRec says nothing)."""
    require_torchrec()
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan

    if isinstance(source, dict):
        doc, where = source, "TorchRec plan"
    else:
        from shardopt.core.ir import read_json

        doc, where = read_json(source), str(source)
    doc = _check_export_doc(doc, where)
    if compute_device is not None and compute_device not in COMPUTE_DEVICES:
        raise TorchRecPlanError(f"compute_device: {compute_device!r} is not one of {', '.join(COMPUTE_DEVICES)}")
    local = int(doc.get("local_world_size") or doc.get("world_size") or 1)
    _check_world(doc, where, world_size)
    if model is not None:
        check_module_paths(list(doc["plan"]), model, where)
    plans = {}
    for path, tables in doc["plan"].items():
        module_plan = EmbeddingModuleShardingPlan()
        for name, e in tables.items():
            spec = None
            if e.get("shards") is not None:
                spec = EnumerableShardingSpec([
                    ShardMetadata(shard_offsets=list(s["offsets"]), shard_sizes=list(s["sizes"]),
                                  placement=s["placement"] if compute_device is None else placement(rank_of_placement(s["placement"]), local, compute_device))
                    for s in e["shards"]
                ])
            module_plan[name] = ParameterSharding(
                sharding_type=e["sharding_type"],
                compute_kernel=e["compute_kernel"],
                ranks=e.get("ranks"),
                sharding_spec=spec,
                cache_params=_cache_params_from_json(e.get("cache_params"), f"plan.{path!r}.{name}"),
            )
        plans[path] = module_plan
    return ShardingPlan(plans)


def _check_world(doc: dict[str, Any], where: str, world_size: int | None) -> None:
    if world_size is None:
        import torch.distributed as dist

        world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else None
    if world_size is None:
        return
    ranks = [r for tables in doc["plan"].values() for e in tables.values() for r in (e.get("ranks") or [])]
    planned = int(doc.get("world_size") or (max(ranks) + 1 if ranks else 0))
    if planned != world_size or (ranks and max(ranks) >= world_size):
        raise TorchRecPlanError(f"{where}: the plan is for a world of {planned} ranks, this one has {world_size}: plan again for "
                                f"{world_size} ranks (shardopt solve on an instance of {world_size} devices, or ShardoptPlanner)")


def check_module_paths(paths: list[str], model: Any, where: str = "the plan") -> None:
    """Every path names an embedding collection of `model` (TorchRec leaves a collection at another path unsharded,
    silently); TorchRecPlanError naming the path and the collections the model has otherwise."""
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

    found = {p: m for p, m in model.named_modules() if isinstance(m, (EmbeddingBagCollection, EmbeddingCollection))}
    for path in paths:
        if path not in found:
            have = ", ".join(repr(p) for p in found) or "none"
            raise TorchRecPlanError(f"{where}: module path {path!r} is no embedding collection of the model (its collections: {have}); "
                                    "export again with --module-path set to one of them")


# the sharders' fused optimizer for the instance's optimizer (fbgemm's EmbOptimType names)
FUSED_OPTIMIZERS = {"sgd": "EXACT_SGD", "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD", "adam": "ADAM"}


def fused_params_for(instance: Instance, learning_rate: float) -> dict[str, Any]:
    """The `fused_params` for the sharders (`EmbeddingBagCollectionSharder(fused_params=...)`) that train the tables
    with the optimizer the plan was priced for (its state's memory is in the plan); without them TorchRec trains every
    table with exact SGD. The IR holds no learning rate: give yours."""
    require_torchrec()
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    if not learning_rate > 0:
        raise TorchRecPlanError(f"learning_rate: {learning_rate} must be > 0")
    return {"optimizer": getattr(EmbOptimType, FUSED_OPTIMIZERS[instance.workload.optimizer.value]), "learning_rate": float(learning_rate)}


# ---------------------------------------------------------------------------------------------------------------
# instances <-> EmbeddingBagConfigs


# ---------------------------------------------------------------------------------------------------------------
# the planner's inputs from an instance (used by solvers.torchrec_solver)


def per_rank_batch(instance: Instance) -> int:
    """TorchRec's planner takes the batch of one rank; ours is global: ceil(global / devices)."""
    return max(1, math.ceil(instance.workload.batch_size / instance.topology.num_devices))


def torchrec_pod_size(topology: Topology) -> int | None:
    """TorchRec's `pod_size` (hosts per NVLink group: its `intra_group_size` is pod_size x local_world_size, and its
    intra-host bandwidth holds within the group) for a topology that lists its levels; None without levels.
    TorchRec's model has two levels - a group of whole hosts and the network above it - so levels it cannot say (a
    level inside a host, three levels or more) are refused by name (TorchRecTopologyError, exit 2)."""
    if topology.graph is not None:
        raise TorchRecTopologyError("topology.graph: TorchRec's planner models an NVLink group of whole hosts and the network "
                                    "above it, not a network graph (describe it with topology.levels where two levels say it)")
    levels = topology.levels
    if levels is None:
        return None
    names = ", ".join(f"{lv.name} ({lv.devices} devices)" for lv in levels)
    if len(levels) > 2:
        raise TorchRecTopologyError(f"topology.levels: TorchRec's planner models two levels (an NVLink group of whole hosts and "
                                    f"the network above it), not {len(levels)}: {names}")
    inner = levels[0]
    if inner.devices % topology.devices_per_host:
        raise TorchRecTopologyError(f"topology.levels[0]: {inner.name!r} ({inner.devices} devices) lies inside a host of "
                                    f"{topology.devices_per_host}: TorchRec's innermost group is whole hosts (pod_size)")
    return inner.devices // topology.devices_per_host


def topology_refusal(instance: Instance) -> str | None:
    """Why TorchRec's planner cannot take the instance's topology (`torchrec_pod_size`'s refusal), or None: the
    catalog asks before any solve starts (solvers.catalog.SolverSpec.accepts)."""
    try:
        torchrec_pod_size(instance.topology)
    except TorchRecTopologyError as exc:
        return str(exc)
    return None


def topology_bandwidths(topology: Topology) -> dict[str, float]:
    """The hardware profile's bandwidths (topology overrides first) in TorchRec's unit, bytes per millisecond:
    HBM, intra-host (NVLink), inter-host (network) and the device-host link that UVM reads cross (TorchRec's
    hbm_to_ddr_mem_bw). With topology levels: the innermost level's as intra-host (TorchRec holds it within its
    NVLink group, `torchrec_pod_size`), the outer level's as inter-host."""
    p = PROFILES[topology.hardware]
    intra = topology.intra_host_bandwidth or p.nvlink_bandwidth
    inter = topology.inter_host_bandwidth or p.network_bandwidth
    if topology.lists_network:
        torchrec_pod_size(topology)  # (refuses what TorchRec cannot say)
        intra, inter = topology.levels[0].bandwidth, topology.levels[-1].bandwidth
    host = topology.host_link_bandwidth or p.host_link_bandwidth
    return {"hbm_mem_bw": p.hbm_bandwidth / 1000.0, "intra_host_bw": intra / 1000.0, "inter_host_bw": inter / 1000.0, "hbm_to_ddr_mem_bw": host / 1000.0}


def dumps_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1)


__all__ = [
    "apply_optimizer",
    "SUPPORTED_SHARDING_TYPES",
    "TORCHREC_DEFAULT_CACHE_LOAD_FACTOR",
    "TORCHREC_RUNTIME_PINS",
    "TORCHREC_VERSION",
    "TorchRecUnavailableError",
    "embedding_bag_configs",
    "export_problems",
    "export_warnings",
    "from_torchrec_plan",
    "install_commands",
    "install_hint",
    "instance_from_configs",
    "load_configs",
    "load_torchrec_plan",
    "normalize_shards",
    "plan_to_json",
    "require_torchrec",
    "to_torchrec_plan",
]
