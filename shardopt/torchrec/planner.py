"""`ShardoptPlanner`: shardopt's solvers behind TorchRec's planner interface.

A TorchRec user passes it where `EmbeddingShardingPlanner` goes: `plan(module, sharders)` on one process, or
`collective_plan(module, sharders, pg)`, which plans on rank 0 and broadcasts so that every rank shards by the same
plan. It reads what TorchRec's planner reads - every embedding collection the sharders can shard (at any depth, bag
and sequence collections alike), the `Topology`, the per-rank batch size and the `ParameterConstraints` - turns them
into one instance of shardopt's IR, solves it with the solver, cost model, time limit and seed it was given, and
returns a real `ShardingPlan` (one module plan per collection, keyed by its path in the model).

Why an instance of its own rather than TorchRec's `ShardingOption`s: every solver here plans over the IR, and the IR
is also what the plan checker checks, the cost models price and the certified bound bounds; so the plan TorchRec
receives is one those parts have seen.

What maps, and what is refused (a constraint is never silently dropped):
- tables: name, rows, dim and data type from the collection's configs; a table's feature names are kept in the
  instance's metadata; tables of several collections get the collection's path as a prefix where names repeat;
- topology: world size, local world size, each rank's HBM (less `storage_reservation`, TorchRec's 15 % for the
  dense part of the model) and, on CUDA, its DDR as host memory for UVM; the intra- and inter-host bandwidths;
- batch: TorchRec's per-rank batch x world size (shardopt's batch is global);
- optimizer: the one `_apply_optimizer_in_backward` attached to the tables, else the sharders' `fused_params`
  optimizer, else TorchRec's default for a table without one (exact SGD);
- constraints: `pooling_factors` (summed over a table's features: lookups per sample add up), `num_poolings` and
  `batch_sizes` only where they say what the instance already says; where a table may go (sharding types, compute
  kernels, min_partition, cache load factor, enforce_hbm) becomes the instance's placement constraints
  (shardopt.torchrec.parameter_constraints says how each field maps, and what is refused by name);
  `stochastic_rounding`, `bounds_check_mode`, `output_dtype`, `cache_params` and `enforce_hbm` travel to the table's
  ParameterSharding unchanged;
- placement: shardopt's own constraints, which TorchRec's cannot say - a table pinned to ranks, tables co-located on
  the same ranks, tables kept apart (`PlacementConstraints` or its dict, by table name).

A sequence collection (`EmbeddingCollection`) sends each looked-up row through the all-to-all, not one pooled row
per sample; the IR prices pooled tables only, so its all-to-all is under-estimated by its pooling factor, and the
plan log says so.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from shardopt.core.ir import Instance, PlacementConstraints, Plan, TorchRecForm
from shardopt.core.two_d import TwoDParallel
from shardopt.data.torchrec_install import require_torchrec

require_torchrec()  # (an ImportError naming the exact pip commands when TorchRec is not installed)

from torchrec.distributed.types import ShardingPlanner  # noqa: E402

from shardopt.torchrec.broadcast import plan_on_rank0  # noqa: E402
from shardopt.torchrec.parameter_constraints import (  # noqa: E402
    PASSED_THROUGH,
    ConstraintMappingError,
    table_constraint,
    with_constraints,
    within_offer,
)
from shardopt.torchrec.planner_inputs import (  # noqa: E402
    DEFAULT_STORAGE_RESERVATION,
    TORCHREC_DEFAULT_BATCH,
    PlannerInputError,
    RankMemory,
    default_hardware,
    default_topology,
    enumerator_inputs,
    even_columns_default,
    rank_memory,
    refuse_search_parts,
)
from shardopt.torchrec.planner_stats import stats_lines, stats_record  # noqa: E402

logger = logging.getLogger("shardopt.torchrec")

# the optimizer TorchRec's fused kernel trains a table with when nothing names one (EmbOptimType.EXACT_SGD)
TORCHREC_DEFAULT_OPTIMIZER = "sgd"
_OPTIMIZERS = {"SGD": "sgd", "EXACT_SGD": "sgd", "RowWiseAdagrad": "rowwise_adagrad", "EXACT_ROWWISE_ADAGRAD": "rowwise_adagrad",
               "ROWWISE_ADAGRAD": "rowwise_adagrad", "Adam": "adam", "ADAM": "adam"}


@dataclass
class Collection:
    """One shardable embedding collection of the model: its path, kind, sharder and tables (config per name)."""

    path: str
    kind: str  # "bag" (pooled outputs) or "sequence" (one output row per lookup)
    sharder: Any
    configs: list[Any]


@dataclass
class PlannedTables:
    """The instance made of a model's collections, and which table of which collection each instance table is."""

    instance: Instance
    owner: dict[str, tuple[str, str]]  # instance table name -> (collection path, table name in the collection)
    collections: list[Collection]
    notes: list[str] = field(default_factory=list)


class ShardoptPlanner(ShardingPlanner):
    """A TorchRec `ShardingPlanner` that plans with a shardopt solver.

    It takes `EmbeddingShardingPlanner`'s arguments in its order (shardopt.torchrec.planner_inputs says how each maps):
    `topology` (None: TorchRec's default topology of the running job), `batch_size` (per rank; None: TorchRec's 512),
    `enumerator` (its constraints and batch), `storage_reservation` (a share of each rank's memory, default 0.15, or
    one of TorchRec's StorageReservation objects, priced by its own `reserve`), `stats` ([]: no stats table),
    `constraints` (TorchRec's `ParameterConstraints` per table name), `debug` (the stats table in the log),
    `timeout_seconds` (the time limit); `proposer`, `partitioner`, `performance_model`, `callbacks` and `plan_loader`
    are TorchRec's own search, refused by name. Then shardopt's own, by keyword: `placement` (pins to ranks, co-locate
    and separate groups TorchRec has no field for; `PlacementConstraints` or its dict, by table name), `solver`,
    `cost_model` (`auto`: a calibrated model of this hardware where one is registered, else the analytic model),
    `time_limit` (seconds; None: `timeout_seconds`, else the solver's own budget), `seed`, `options` (the solver's),
    `hardware` (the profile the analytic model prices with; None: `cpu` on a CPU topology, this machine's GPU on CUDA),
    `even_columns` (None: as the installed TorchRec's checkpoint reload needs; False where the job checkpoints with
    torch.distributed.checkpoint only)."""

    def __init__(self, topology: Any = None, batch_size: int | None = None, enumerator: Any = None, storage_reservation: Any = None,
                 proposer: Any = None, partitioner: Any = None, performance_model: Any = None, stats: Any = None,
                 constraints: dict[str, Any] | None = None, debug: bool = True, callbacks: Any = None, timeout_seconds: int | None = None,
                 plan_loader: Any = None, *, solver: str = "neuroshard", cost_model: str = "auto", time_limit: float | None = None,
                 seed: int = 0, options: dict[str, Any] | None = None, hardware: str | None = None,
                 placement: PlacementConstraints | dict[str, Any] | None = None, even_columns: bool | None = None,
                 two_d: TwoDParallel | dict[str, Any] | None = None) -> None:
        from solvers.catalog import get_solver

        refuse_search_parts({"proposer": proposer, "partitioner": partitioner, "performance_model": performance_model,
                             "callbacks": callbacks, "plan_loader": plan_loader}, solver)
        from_enumerator, enum_batch, enum_note = enumerator_inputs(enumerator)
        batch_size = batch_size if batch_size is not None else (enum_batch or TORCHREC_DEFAULT_BATCH)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise PlannerInputError(f"batch_size: {batch_size!r} must be a whole number >= 1 (the per-rank batch)")
        if timeout_seconds is not None and not timeout_seconds > 0:
            raise PlannerInputError(f"timeout_seconds: {timeout_seconds!r} must be > 0")
        if time_limit is not None and not time_limit > 0:
            raise PlannerInputError(f"time_limit: {time_limit} must be > 0 seconds (or None: the solver's own budget)")
        if time_limit is not None and timeout_seconds is not None and float(time_limit) != float(timeout_seconds):
            raise PlannerInputError(f"time_limit: {time_limit} and timeout_seconds: {timeout_seconds} both given and different (one time limit)")
        reservation = DEFAULT_STORAGE_RESERVATION if storage_reservation is None else storage_reservation
        if not hasattr(reservation, "reserve"):
            try:
                share = float(reservation)
            except (TypeError, ValueError):
                raise PlannerInputError(f"storage_reservation: {reservation!r} is neither a share in [0, 1) nor a TorchRec "
                                        "StorageReservation") from None
            if not (math.isfinite(share) and 0.0 <= share < 1.0):
                raise PlannerInputError(f"storage_reservation: {reservation} must be in [0, 1)")
        self.topology = topology if topology is not None else default_topology()
        self.batch_size = int(batch_size)
        self.constraints = dict(constraints if constraints is not None else (from_enumerator or {}))
        self.solver_name, self.cost_model, self.seed = solver, cost_model, int(seed)
        self.time_limit = float(time_limit) if time_limit is not None else (float(timeout_seconds) if timeout_seconds is not None else None)
        if hardware is None:
            self.hardware, hw_note = default_hardware(self.topology.compute_device)
        else:
            self.hardware, hw_note = hardware, None
        self.storage_reservation = reservation
        self.placement = placement
        self.even_columns = even_columns
        self.debug, self.stats = bool(debug), stats
        self._notes = [n for n in (enum_note, hw_note) if n]
        if stats is not None and stats != [] and not isinstance(stats, bool):
            self._notes.append(f"stats: {type(stats).__name__} reads TorchRec's sharding options; shardopt logs its own stats table instead")
        self.two_d = _two_d_section(two_d)
        self.sharding_group_size: int | None = None  # with two_d: the group size of the last plan (DMPCollection's argument)
        self.solver = get_solver(solver, **(options or {}))  # (an unknown solver or option fails here, before any planning)
        self.last: dict[str, Any] | None = None  # what the last plan() did: solver, cost, bound, stop reason, per rank, notes

    # -- TorchRec's interface ------------------------------------------------------------------------------------

    def plan(self, module: Any, sharders: list[Any] | None = None) -> Any:
        """The `ShardingPlan` of every collection in `module` that one of `sharders` (None: TorchRec's default
        sharders) shards."""
        from torchrec.distributed.sharding_plan import get_default_sharders

        from costmodels.auto import choose_cost_model
        from shardopt.core.constraint_proofs import constraint_infeasibility
        from solvers.catalog import check_accepts

        t0 = time.perf_counter()
        sharders = list(sharders) if sharders is not None else get_default_sharders()
        even = self.even_columns if self.even_columns is not None else even_columns_default()
        memory = rank_memory(self.topology, self.storage_reservation, self.batch_size, module, sharders, self.constraints)
        planned = tables_of(module, sharders, self.topology, self.batch_size, self.constraints, self.hardware, memory, self.placement,
                            even_columns=even)
        if self.two_d is not None:  # 2D: the instance of the whole job, its group planned (solvers/two_d.py)
            planned = dataclasses.replace(planned, instance=_with_two_d(planned.instance, self.two_d))
        check_accepts(self.solver_name, planned.instance)
        proof = constraint_infeasibility(planned.instance)
        if proof is not None:
            raise PlannerInputError(f"no plan can meet the placement constraints: {proof}")
        choice = choose_cost_model(self.cost_model, planned.instance)
        notes = self._notes + list(planned.notes) + ([choice.notice] if choice.notice else []) + list(choice.warnings)
        result = self.solver.solve(planned.instance, choice.model, time_limit=self.time_limit, seed=self.seed)
        if not result.status.has_plan or result.plan is None:
            raise PlannerInputError(f"shardopt ({self.solver_name}) found no plan: {result.reason}")
        job = planned.instance
        if result.plan.sharding_group_size is not None:  # the group's plan, for DMPCollection(sharding_group_size=G)
            from solvers.two_d import planned_instance

            planned = dataclasses.replace(planned, instance=planned_instance(job, result.plan))
            self.sharding_group_size = result.plan.sharding_group_size
        sharding_plan = export_plan(planned, result.plan, self.topology.compute_device, self.constraints)
        self.last = {"solver": self.solver_name, "cost_model": choice.name, "status": result.status.value,
                     "stopped": result.stopped.value if result.stopped is not None else None,
                     "predicted_ms": result.predicted_cost, "lower_bound_ms": result.lower_bound,
                     "solver_bound": result.model_bound.to_dict() if result.model_bound is not None else None,
                     "seconds": time.perf_counter() - t0, "tables": len(planned.instance.tables),
                     "collections": [c.path for c in planned.collections], "notes": notes, "instance": planned.instance,
                     "plan": result.plan, "reservation": memory.how, "even_columns": even, "compute_device": self.topology.compute_device,
                     "ranks": stats_record(planned.instance, result.plan, result.predicted) if result.predicted is not None else [],
                     **({"two_d": result.two_d.to_dict(), "sharding_group_size": self.sharding_group_size, "job": job}
                        if result.two_d is not None else {})}
        _log_plan(self.last, result, planned, table=self.debug and self.stats != [])
        return sharding_plan

    def collective_plan(self, module: Any, sharders: list[Any] | None = None, pg: Any = None) -> Any:
        """`plan` on rank 0 of `pg` (the default group when None), broadcast to every rank: all shard by one plan. A
        topology for another world size than the group's is refused on every rank; an error while planning on rank 0
        reaches every rank (a failure record is broadcast in the plan's place), and each raises it."""
        import torch.distributed as dist
        from torchrec.distributed.sharding_plan import get_default_sharders

        if pg is None:
            if not dist.is_initialized():
                raise PlannerInputError("collective_plan: no process group (call torch.distributed.init_process_group first, or use plan())")
            pg = dist.GroupMember.WORLD
        world = int(self.topology.world_size)
        if pg.size() != world:
            raise PlannerInputError(f"topology.world_size: {world}, but the process group has {pg.size()} ranks: the plan would "
                                    f"{'leave ranks without tables' if world < pg.size() else 'name ranks that do not exist'} "
                                    "(give TorchRec's Topology the group's world size)")
        return plan_on_rank0(pg, self.plan, module, sharders if sharders is not None else get_default_sharders())


# ---------------------------------------------------------------------------------------------------------------
# the model's collections -> an instance


def collections_of(module: Any, sharders: list[Any]) -> list[Collection]:
    """Every submodule (the module itself included, at any depth) that a sharder shards and that holds embedding
    configs, outermost first; the submodules of a sharded collection are its own business."""
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

    found: list[Collection] = []
    taken: list[str] = []
    for path, child in module.named_modules():
        if any(outer == "" or path == outer or path.startswith(outer + ".") for outer in taken):
            continue
        sharder = next((s for s in sharders if isinstance(child, s.module_type)), None)
        if sharder is None:
            continue
        if isinstance(child, EmbeddingBagCollection):
            found.append(Collection(path, "bag", sharder, list(child.embedding_bag_configs())))
        elif isinstance(child, EmbeddingCollection):
            found.append(Collection(path, "sequence", sharder, list(child.embedding_configs())))
        else:
            raise PlannerInputError(f"module {path or '(the model)'!r}: {type(child).__name__} is sharded by {type(sharder).__name__}, "
                                    "but this planner places EmbeddingBagCollection and EmbeddingCollection tables only")
        taken.append(path)
    return found


def tables_of(module: Any, sharders: list[Any], topology: Any, batch_size: int, constraints: dict[str, Any], hardware: str,
              memory: RankMemory | float = DEFAULT_STORAGE_RESERVATION, placement: PlacementConstraints | dict[str, Any] | None = None,
              *, even_columns: bool | None = None) -> PlannedTables:
    """The instance of `module`'s collections on `topology` (the module docstring says what maps). `memory`: each
    rank's memory for the tables (planner_inputs.rank_memory), or the share of it to keep back; `even_columns`: whether
    the plan's column slices of a table share one width (None: as the installed TorchRec needs). The instance's
    constraints always carry TorchRec's form (constraints.torchrec): the plan is for DistributedModelParallel."""
    from shardopt.data.torchrec_configs import instance_from_configs

    collections = collections_of(module, sharders)
    if not collections:
        raise PlannerInputError(f"the module ({type(module).__name__}) holds no EmbeddingBagCollection or EmbeddingCollection "
                                f"that the sharders given ({', '.join(type(s).__name__ for s in sharders) or 'none'}) shard")
    names = [c.name for col in collections for c in col.configs]
    clash = len(set(names)) < len(names)
    owner: dict[str, tuple[str, str]] = {}
    configs: list[Any] = []
    for col in collections:
        for c in col.configs:
            name = f"{col.path}.{c.name}" if clash and col.path else c.name
            if name in owner:
                raise PlannerInputError(f"table {c.name!r}: two collections hold a table of this name and one of them is the model itself")
            owner[name] = (col.path, c.name)
            configs.append(_renamed(c, name))
    unknown = sorted(set(constraints) - {c.name for col in collections for c in col.configs} - set(owner))
    if unknown:
        raise PlannerInputError(f"constraints: {unknown[0]!r} names no table of the model's collections")
    keys = {name: name if name in constraints else owner[name][1] for name in owner}  # (the constraint's key as the user wrote it)
    pooling = {name: _pooling_factor(keys[name], constraints.get(keys[name]), batch_size) for name in owner}
    pooling = {k: v for k, v in pooling.items() if v is not None}
    if not isinstance(memory, RankMemory):
        memory = rank_memory(topology, memory, batch_size, module, sharders, constraints)
    topo = _topology_fields(topology, memory, hardware)
    named = _named_optimizer(module, collections)
    optimizer = _optimizer(named)
    instance = instance_from_configs(configs, num_devices=topo.pop("num_devices"), devices_per_host=topo.pop("devices_per_host"),
                                     memory_bytes=topo.pop("memory_bytes"), hardware=hardware, batch_size=batch_size * topology.world_size,
                                     pooling=pooling, optimizer=optimizer, name=type(module).__name__, provenance="ShardoptPlanner",
                                     source="ParameterConstraints.pooling_factors", topology_extra=topo,
                                     metadata_extra={"collections": {name: owner[name][0] for name in owner}})
    try:
        features = {c.name: list(c.feature_names) for c in configs}
        sharder_of = {col.path: col.sharder for col in collections}
        mapped = [tc for name in owner
                  if (tc := within_offer(keys[name], name, table_constraint(keys[name], name, constraints.get(keys[name]), features[name],
                                                                              topology.compute_device),
                                         sharder_of[owner[name][0]], topology.compute_device)) is not None]
        own = [owner[n][1] for n in owner]
        instance = with_constraints(instance, mapped, placement, {owner[n][1]: n for n in owner if own.count(owner[n][1]) == 1})
    except ConstraintMappingError as exc:
        raise PlannerInputError(str(exc)) from None
    form = TorchRecForm(even_columns=even_columns_default() if even_columns is None else bool(even_columns))
    instance = instance.model_copy(update={"constraints": (instance.constraints or PlacementConstraints()).model_copy(update={"torchrec": form})})
    notes = []
    sequence = [col.path or "(the model)" for col in collections if col.kind == "sequence"]
    if sequence:
        notes.append(f"sequence collection(s) {', '.join(sequence)}: their all-to-all is priced as pooled (one row per sample), "
                     "under-estimated by each table's pooling factor")
    if named is None:
        notes.append("no optimizer attached to the tables or in the sharders' fused_params: planned for TorchRec's default, exact SGD")
    return PlannedTables(instance, owner, collections, notes)


def _renamed(config: Any, name: str) -> Any:
    if config.name == name:
        return config
    return dataclasses.replace(config, name=name)


def _pooling_factor(name: str, pc: Any, batch_size: int) -> float | None:
    """A table's pooling factor from its ParameterConstraints (None: no constraints, the default applies); the batch
    sizes and poolings per sample must say what the instance says."""
    if pc is None:
        return None
    if pc.batch_sizes is not None and any(int(b) != batch_size for b in pc.batch_sizes):
        raise PlannerInputError(f"constraints[{name!r}].batch_sizes: {list(pc.batch_sizes)} differ from the planner's batch_size {batch_size} "
                                "(shardopt's IR has one batch for all tables)")
    if pc.num_poolings is not None and any(float(n) != 1.0 for n in pc.num_poolings):
        raise PlannerInputError(f"constraints[{name!r}].num_poolings: {list(pc.num_poolings)} (several poolings per sample are not in shardopt's IR)")
    factors = [float(x) for x in pc.pooling_factors]
    if not factors or any(not math.isfinite(x) or x < 0 for x in factors):
        raise PlannerInputError(f"constraints[{name!r}].pooling_factors: {factors} must be finite numbers >= 0, one per feature")
    return sum(factors)


def _topology_fields(topology: Any, memory: RankMemory, hardware: str) -> dict[str, Any]:
    """The IR topology fields of TorchRec's `Topology`: devices, each rank's memory for the tables (HBM after the
    reservation; on CPU its DDR, the only memory there), host memory for UVM on CUDA, bandwidths (TorchRec's bytes per
    ms as bytes per second). An NVLink group larger than a host (TorchRec's `pod_size`: `intra_group_size` = pod_size x
    local_world_size) becomes the topology's levels: the group at the intra-host bandwidth, then the network with
    `hardware`'s start-up."""
    world, local = int(topology.world_size), int(topology.local_world_size)
    if world % local:
        raise PlannerInputError(f"topology: world_size {world} is not a multiple of local_world_size {local} (equal hosts only)")
    if topology.compute_device not in ("cuda", "cpu"):
        raise PlannerInputError(f"topology.compute_device: {topology.compute_device!r} (this planner plans for cuda or cpu)")
    usable, ddr = memory.memory, memory.host

    def one(v: list[int]) -> int | list[int]:
        return v[0] if len(set(v)) == 1 else v

    out = {"num_devices": world, "devices_per_host": local, "memory_bytes": one(usable), "host_memory_bytes": one(ddr)}
    intra, inter = float(topology.intra_host_bw) * 1000.0, float(topology.inter_host_bw) * 1000.0
    group = int(getattr(topology, "intra_group_size", local) or local)
    if local < group and world % group == 0:
        from shardopt.core.hardware import get_profile

        levels = [{"name": "nvlink_domain", "devices": group, "bandwidth": intra}]
        if group < world:
            levels.append({"name": "network", "devices": world, "bandwidth": inter, "latency_s": get_profile(hardware).network_latency_s})
        return {**out, "levels": levels}
    return {**out, "intra_host_bandwidth": intra, "inter_host_bandwidth": inter}


def _named_optimizer(module: Any, collections: list[Collection]) -> str | None:
    """The optimizer class or type the model names for its tables: `_apply_optimizer_in_backward`'s on a table's
    weight, else a sharder's fused_params; None when nothing names one."""
    by_path = dict(module.named_modules())
    for col in collections:
        for p in by_path[col.path].parameters():
            classes = getattr(p, "_optimizer_classes", None)
            if classes:
                return classes[0].__name__
    for col in collections:
        opt = (getattr(col.sharder, "fused_params", None) or {}).get("optimizer")
        if opt is not None:
            return getattr(opt, "name", str(opt))
    return None


def _optimizer(named: str | None) -> str:
    """The IR's optimizer for the one the model names (`_named_optimizer`; None: TorchRec's default)."""
    if named is None:
        return TORCHREC_DEFAULT_OPTIMIZER
    if named not in _OPTIMIZERS:
        raise PlannerInputError(f"optimizer {named!r}: shardopt's IR prices the memory of {', '.join(sorted(set(_OPTIMIZERS.values())))} only")
    return _OPTIMIZERS[named]


# ---------------------------------------------------------------------------------------------------------------
# the plan -> TorchRec's ShardingPlan


def _two_d_section(two_d: TwoDParallel | dict[str, Any] | None) -> TwoDParallel | None:
    """The planner's `two_d` argument validated (PlannerInputError naming the field)."""
    if two_d is None or isinstance(two_d, TwoDParallel):
        return two_d
    from pydantic import ValidationError

    try:
        return TwoDParallel.model_validate(two_d)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise PlannerInputError(f"two_d.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def _with_two_d(instance: Instance, two_d: TwoDParallel) -> Instance:
    """The job's instance with its 2D section (PlannerInputError where the group size does not fit the job)."""
    from shardopt.core.ir import IRError, instance_from_dict

    doc = instance.model_dump(mode="json", exclude_none=True)
    doc["two_d"] = two_d.model_dump(mode="json")
    try:
        return instance_from_dict(doc)
    except IRError as exc:
        raise PlannerInputError(str(exc)) from None


def export_plan(planned: PlannedTables, plan: Plan, compute_device: str, constraints: dict[str, Any]) -> Any:
    """One module plan per collection, each table's ParameterSharding as `shardopt.data.torchrec_io` exports it, under
    the table's own name; refused (naming the table) where the collection's sharder does not offer the sharding
    type or compute kernel the plan chose."""
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ShardingPlan

    from shardopt.data.torchrec_io import to_torchrec_plan

    whole = to_torchrec_plan(planned.instance, plan, module_path="", compute_device=compute_device).plan[""]
    by_path = {col.path: col for col in planned.collections}
    plans: dict[str, Any] = {col.path: EmbeddingModuleShardingPlan() for col in planned.collections}
    for name, ps in whole.items():
        path, table = planned.owner[name]
        sharder = by_path[path].sharder
        types = sharder.sharding_types(compute_device)
        if ps.sharding_type not in types:
            raise PlannerInputError(f"table {table!r} of {path or '(the model)'}: the plan shards it {ps.sharding_type}, which "
                                    f"{type(sharder).__name__} does not offer ({', '.join(types)})")
        kernels = sharder.compute_kernels(ps.sharding_type, compute_device)
        if ps.compute_kernel not in kernels:
            raise PlannerInputError(f"table {table!r} of {path or '(the model)'}: compute kernel {ps.compute_kernel} is not one "
                                    f"{type(sharder).__name__} offers for {ps.sharding_type} ({', '.join(kernels)})")
        pc = constraints.get(table) or constraints.get(name)
        for f in PASSED_THROUGH:
            value = getattr(pc, f, None) if pc is not None else None
            if f == "cache_params" and value is not None and ps.cache_params is not None:  # (the user's cache, at the plan's load factor)
                value = dataclasses.replace(value, load_factor=ps.cache_params.load_factor)
            if value is not None:
                setattr(ps, f, value)
        plans[path][table] = ps
    return ShardingPlan(plans)


def _log_plan(last: dict[str, Any], result: Any, planned: PlannedTables, table: bool) -> None:
    """The plan on the `shardopt.torchrec` logger, as TorchRec's planner logs its stats: what was planned, by which
    solver and cost model, in how long; with `table` (debug, and stats not turned off) the stats table per rank
    (shardopt.torchrec.planner_stats); the notes as warnings."""
    instance = planned.instance
    logger.info("shardopt planner: %s with %s placed %d tables of %s on %d ranks in %.2f s (%s, %s); memory: %s", last["solver"],
                last["cost_model"], last["tables"], ", ".join(p or "(the model)" for p in last["collections"]), instance.topology.num_devices,
                last["seconds"], last["status"], last["stopped"], last["reservation"])
    if table and result.predicted is not None:
        memory = "DDR" if last["compute_device"] == "cpu" else "HBM"
        for line in stats_lines(instance, result.plan, result.predicted, last["cost_model"], last["lower_bound_ms"], memory):
            logger.info("shardopt planner: %s", line)
    else:
        logger.info("shardopt planner: predicted %.3f ms per iteration (max over ranks, %s)", last["predicted_ms"], last["cost_model"])
    for note in last["notes"]:
        logger.warning("shardopt planner: %s", note)
