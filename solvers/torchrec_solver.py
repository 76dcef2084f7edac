"""TorchRec's planner as a baseline solver: `EmbeddingShardingPlanner.plan()` on the instance, its plan in our IR.

What the solver hands TorchRec (docs/torchrec.md has the full account):

- the tables as `EmbeddingBagConfig`s of an `EmbeddingBagCollection` on the meta device (nothing is allocated),
  with the instance's optimizer attached to the weights so that TorchRec's storage estimator counts its state;
- a `Topology` built by TorchRec's `TopologyFactory`: world size = devices, local world size = devices per host,
  HBM capacity = each device's memory and DDR capacity (`ddr_cap`) = each device's share of host memory
  (`host_memory_bytes`; per device through `CustomTopologyData` when it differs between devices or is 0), the
  hardware profile's HBM, intra-host (NVLink), inter-host (network) and device-host link (`hbm_to_ddr_mem_bw`,
  what UVM reads cross) bandwidths in bytes/ms, and compute device "cuda" by default: TorchRec's perf model for
  GPUs, used on a machine without one (planning does no CUDA call; tests/test_torchrec.py checks that CUDA is never
  initialised);
- `ParameterConstraints` per table: its pooling factor, the sharding types asked for (default table_wise,
  column_wise, row_wise, table_row_wise and data_parallel), the compute kernels: "fused" (TBE in HBM), and, when the
  instance has host memory, "fused_uvm_caching" (host memory behind an HBM cache; no cache_params, so TorchRec
  plans with its default load factor 0.2 and the plan comes back with it) and "fused_uvm" (host memory only);
  "dense" for data_parallel, the only kernel TorchRec allows there; and `min_partition` for column-wise splits
  (TorchRec's default 128: tables of dim <= 128 are never split by columns unless it is lowered);
- the per-rank batch, ceil(global batch / devices) (TorchRec's batch_size is per rank, ours is global);
- a storage reservation of 0 % by default (our memory_bytes is memory for the embeddings; TorchRec's default keeps
  15 % back for the dense part of the model), configurable; TorchRec's default pipeline type (none) and storage
  estimator otherwise.

The plan comes back through shardopt.data.torchrec_io.from_torchrec_plan and the plan checker. TorchRec's storage model
is not ours: it adds input/output buffers of the per-rank batch to every shard's HBM (table-wise: the ids of the
whole world's batch, 8 bytes each, and the pooled outputs), counts rowwise_adagrad state as 1/dim of a shard's
weights (fbgemm keeps one fp32 per row of *every* column shard) and a UVM cache as load factor x (weights + state);
docs/torchrec.md has the numbers. So TorchRec refuses some instances our checker would accept (INSUFFICIENT_STORAGE
on the CPU-scale suites), and when its plan overflows our memory model on a device (HBM or host memory) the result is
`no_solution` naming the device, the tier and the bytes, never a hidden or repaired plan. TorchRec's own per-rank
perf and storage estimates are kept in `info`.

`--time-limit` maps to the planner's `timeout_seconds`: an integer, 75 % of the limit rounded down, at least 1 (the
rest is for what follows its last proposal - partitioning it, sending the plan back, checking and costing it; with
the whole limit the planner's own stop came at 2.0-2.3 s of a 2 s limit on 100-160 tables x 16 devices, and the
solve ended past the limit's 10 % + 1 s). TorchRec checks it between proposals only: enumerating the search space and
partitioning one proposal are not interrupted, and when it fires (TorchRec logs "Exceeded time limit", which the solver
listens for) the best plan so far is kept (stop `time_limit`). So that the limit holds anyway (every solver stops
within 10 % + 1 s of it), with a limit the planner runs in a forked child process that is killed at the limit + 0.1 s;
a planner stopped that way has no plan to give (`no_solution`, saying so). Importing TorchRec takes seconds (about 3 on
the 2-core VM) and happens where the planning does: a single `shardopt solve` pays it inside its limit (so at a limit of
a few seconds the planner has no time left); a batch of solves (the leaderboard, the sweeps) calls `prepare()` first.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from costmodels.base import CostModel
from shardopt.core.ir import Instance
from shardopt.core.plan_check import check_plan
from shardopt.data.torchrec_configs import apply_optimizer, embedding_bag_configs
from shardopt.data.torchrec_install import TorchRecUnavailableError, require_torchrec, torchrec_installed
from shardopt.data.torchrec_io import (
    COLUMN_WISE,
    DATA_PARALLEL,
    DENSE,
    FUSED,
    ROW_WISE,
    SUPPORTED_SHARDING_TYPES,
    TABLE_ROW_WISE,
    TABLE_WISE,
    UVM_KERNELS,
    from_torchrec_plan,
    per_rank_batch,
    topology_bandwidths,
    torchrec_pod_size,
)
from solvers.base import Solver, SolveResult, SolveStatus, StopReason, Stopwatch, fail, finish
from solvers.errors import UnknownSolverError
from solvers.options import option

# TorchRec at full strength: every kind of placement its planner proposes by default for an EmbeddingBagCollection
# (table_column_wise and grid_shard are kept for `torchrec_all`: they add enumeration time, and the IR holds them)
DEFAULT_SHARDING_TYPES: tuple[str, ...] = (TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, DATA_PARALLEL)
ALIAS = "table_"
HARD_LIMIT_SHARE, HARD_LIMIT_SLACK_S = 1.0, 0.1  # with a time limit, the planner is stopped at the limit + 0.1 s
TIMEOUT_SHARE = 0.75  # TorchRec's own timeout_seconds: this share of the limit, rounded down, at least 1 s
# the limit when the caller gives none, so that the default baseline answers within minutes at production size
# (docs/torchrec.md); `-O default_time_limit=null`: every proposer, however long
DEFAULT_TIME_LIMIT_S = 300.0
# TorchRec's four default proposers run one after another and the planner keeps the best-rated proposal of all of
# them. Its own order (the default here: the baseline is TorchRec as it ships) starts with grid search (skipped
# above 1e4 combinations) and greedy by depth, which on a large model spends minutes on proposals that do not fit, so
# a time limit can end the search before uniform and greedy without depth - the two that found TorchRec's
# best-rated plans - have proposed anything. `cheap_first` runs the same four cheapest first: the same proposals
# without a limit, its best-rated plan early with one (ties between equally rated plans may then resolve otherwise).
# Why TorchRec's planner is slow at production size: docs/torchrec.md, "Where the planner's time goes".
PROPOSER_ORDERS = ("torchrec", "cheap_first")


def _bound_ahead(cost_model: CostModel, instance: Instance) -> Any:
    """The cost model bound to the instance with what costing a plan needs computed (the tables' access histograms:
    most of a second on a hundred Zipf tables), so that the plan the planner returns is costed at once."""
    bm = cost_model.bind(instance)
    bm.histograms  # noqa: B018 - a cached property: computed now, in the planner's time
    return bm


def _run_with_deadline(fn: Any, seconds: float, meanwhile: Any = None) -> Any:
    """fn() in a forked child process, its (picklable) result, or None when it has not returned after `seconds`
    (the child is then killed). Fork, not spawn: the child inherits the imported TorchRec and starts in
    milliseconds. Why a process: TorchRec's planner cannot be interrupted inside enumeration or partitioning.
    `meanwhile()` runs here while the child works (work the parent needs afterwards, done in the child's time)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the parent
            send.send(("error", exc))
        finally:
            send.close()

    proc = ctx.Process(target=child, daemon=True)
    try:
        proc.start()
    except AssertionError:  # (inside a daemonic process, which may have no children: run here, unstoppable)
        send.close()
        recv.close()
        return fn()
    send.close()
    started = time.perf_counter()
    try:
        if meanwhile is not None:
            meanwhile()
        if not recv.poll(max(0.0, seconds - (time.perf_counter() - started))):
            return None
        kind, value = recv.recv()
    except EOFError:  # the child died without an answer
        proc.join(1)
        raise RuntimeError(f"TorchRec's planner process exited with status {proc.exitcode} without a result") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        recv.close()
    if kind == "error":
        raise value
    return value


def _real_names(text: str, instance: Instance) -> str:
    """TorchRec's messages name the aliases: put the instance's table names back."""
    names = [t.name for t in instance.tables]
    return re.sub(rf"\b{ALIAS}(\d+)\b", lambda m: repr(names[int(m.group(1))]) if int(m.group(1)) < len(names) else m.group(0), text)


def aliased(instance: Instance) -> Instance:
    """The instance with tables renamed table_0, table_1, ...: TorchRec keeps tables in a torch ModuleDict, which
    refuses names with a dot and names of its own attributes ("keys", "values", "training", ...), and the IR allows
    any name. The plan is renamed back after planning."""
    tables = [t.model_copy(update={"name": f"{ALIAS}{i}"}) for i, t in enumerate(instance.tables)]
    return instance.model_copy(update={"tables": tables})


ALL_SHARDING_TYPES: tuple[str, ...] = SUPPORTED_SHARDING_TYPES


class TorchRecNotInstalledError(UnknownSolverError):
    """The solver exists but its extra is not installed: bad input (exit 2) with the install commands."""

    def __init__(self, name: str, cause: TorchRecUnavailableError):
        super().__init__(f"solver {name!r} needs TorchRec. {cause}", name)
        self.cause = cause


class _TimeoutWatch(logging.Handler):
    """Catches the planner's own "Exceeded time limit" record: whether its timeout actually cut the search short."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.fired = False

    def emit(self, record: logging.LogRecord) -> None:
        if "Exceeded time limit" in record.getMessage():
            self.fired = True


@contextlib.contextmanager
def _watch_timeout() -> Iterator[_TimeoutWatch]:
    lg = logging.getLogger("torchrec.distributed.planner.planners")
    watch = _TimeoutWatch()
    level, propagate = lg.level, lg.propagate
    lg.setLevel(logging.INFO)
    lg.propagate = False  # the planner's info records stay off the user's terminal
    lg.addHandler(watch)
    try:
        yield watch
    finally:
        lg.removeHandler(watch)
        lg.setLevel(level)
        lg.propagate = propagate


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """TorchRec logs warnings per table (kernels filtered out by our constraints, a Topology note) and fbgemm warns
    at import: keep them off the user's terminal while planning, restoring the levels afterwards."""
    names = ["torchrec", "torchrec.distributed.planner", "torchrec.distributed.planner.enumerators", "torchrec.distributed.planner.types"]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    # TorchRec also warns through the root logger ("Sharding spec not found" for every data-parallel table), and the
    # module-level logging.warning() would install a stderr handler on a root without one (basicConfig): a
    # placeholder handler prevents that, a filter drops those records, both removed afterwards
    root = logging.getLogger()
    placeholder = logging.NullHandler() if not root.handlers else None
    drop = logging.Filter("torchrec")  # passes only records of the torchrec loggers: drops root's own
    if placeholder is not None:
        root.addHandler(placeholder)
    root.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lvl in zip(loggers, levels):
            lg.setLevel(lvl)
        root.removeFilter(drop)
        if placeholder is not None:
            root.removeHandler(placeholder)



def _multiple_of_4(v: int | None) -> bool:
    return v is None or (v >= 4 and v % 4 == 0)


@dataclass(frozen=True)
class TorchRecOptions:
    sharding_types: tuple[str, ...] = option(DEFAULT_SHARDING_TYPES, "the sharding types TorchRec's planner may propose (a,b,...)",
                                             choices=SUPPORTED_SHARDING_TYPES, check=bool, check_text="at least one")
    min_partition: int | None = option(None, "TorchRec's min_partition for column-wise splits (null: its default, 128)",
                                       check=_multiple_of_4, check_text="a multiple of 4 (fbgemm's alignment)")
    compute_device: str = option("cuda", "the device kind TorchRec's perf estimates assume", choices=("cuda", "cpu"))
    storage_reservation: float = option(0.0, "the share of each device's memory TorchRec keeps free", low=0.0, high=1.0, high_open=True)
    uvm: bool = option(True, "allow TorchRec's UVM kernels (fused_uvm_caching, fused_uvm) when the instance has host memory")
    default_time_limit: float | None = option(DEFAULT_TIME_LIMIT_S, "seconds TorchRec's planner may run when no --time-limit is given (null: no limit)",
                                              low=0.0, low_open=True)
    proposers: str = option("torchrec", "the order of TorchRec's four default proposers: torchrec (its own: grid search, greedy, "
                            "greedy without depth, uniform) or cheap_first (uniform, greedy without depth, greedy, grid search)",
                            choices=PROPOSER_ORDERS)


@dataclass(frozen=True)
class TorchRecAllTypesOptions(TorchRecOptions):
    sharding_types: tuple[str, ...] = option(ALL_SHARDING_TYPES, "the sharding types TorchRec's planner may propose (a,b,...)",
                                             choices=SUPPORTED_SHARDING_TYPES, check=bool, check_text="at least one")


def torchrec_topology(instance: Instance, compute_device: str = "cuda") -> tuple[Any, dict[str, Any]]:
    """TorchRec's `Topology` of the instance (the table in docs/torchrec.md, "The solver"), and a note of what went
    into it."""
    from torchrec.distributed.planner.types import (
        CustomTopologyData,
        HardwareConfig,
        KernelConfig,
        TopologyFactory,
        TrainerConfig,
    )

    topo = instance.topology
    caps = topo.capacities()
    ddr = topo.host_capacities()
    if compute_device == "cpu":  # (a CPU rank's memory is its DDR: TorchRec's CPU storage model counts ddr_cap, no HBM)
        caps, ddr = [0] * topo.num_devices, list(caps)
    bw = topology_bandwidths(topo)
    extra: dict[str, Any] = {}
    custom: dict[str, list[int]] = {}
    note: dict[str, Any] = {"hbm_cap_bytes": caps[0] if len(set(caps)) == 1 else caps, "ddr_cap_bytes": ddr[0] if len(set(ddr)) == 1 else ddr}
    if len(set(caps)) > 1:
        custom["hbm_cap"] = list(caps)
        note["heterogeneous_memory"] = "per-device HBM capacities passed through TorchRec's CustomTopologyData"
    if len(set(ddr)) > 1 or min(ddr) == 0:
        # per device (and 0, which TorchRec's HardwareConfig would flag as a detection failure) through the
        # same CustomTopologyData; left out, TorchRec would assume 128 GiB of DDR per rank (constants.DDR_CAP)
        custom["ddr_cap"] = list(ddr)
    if custom:
        extra["custom_topology_data"] = CustomTopologyData(data=custom, world_size=topo.num_devices)
    hardware = HardwareConfig(hbm_cap_bytes=min(caps), ddr_cap_bytes=min(ddr) if min(ddr) > 0 else None, **bw)
    pod_size = torchrec_pod_size(topo)  # (None without topology levels; refuses levels TorchRec cannot say)
    if pod_size is not None:
        note["pod_size"] = pod_size
    trainer = TrainerConfig(world_size=topo.num_devices, local_world_size=topo.devices_per_host, pod_size=pod_size, additional_params=extra)
    kernel = KernelConfig(compute_device=compute_device, use_hardware_based_bandwidth=True)
    topology = TopologyFactory.create_topology(trainer_config=trainer, hardware_config=hardware, kernel_config=kernel)
    note.update({"world_size": topo.num_devices, "local_world_size": topo.devices_per_host, "compute_device": compute_device,
                 **{f"{k}_bytes_per_ms": v for k, v in bw.items()}})
    if topo.is_mixed:  # (TorchRec removed its heterogeneous planner in 2026-04: one speed for every rank)
        note["mixed_hardware"] = (f"TorchRec's topology has one compute device and one set of bandwidths: every rank is estimated "
                                  f"as {topo.hardware} (topology.hardware), with its own HBM / DDR capacity")
    return topology, note


def rank_estimates(instance: Instance, options: list[Any]) -> dict[str, Any]:
    """TorchRec's own per-rank perf (ms) and storage (bytes) estimates of a plan given as its ShardingOptions (each
    shard's rank set): the sum over a rank's shards, and the max over ranks (its partitioner's and stats' rating)."""
    n = instance.topology.num_devices
    keys = ("fwd_compute", "fwd_comms", "bwd_compute", "bwd_comms", "input_dist_comms", "prefetch_compute")
    perf = [{k: 0.0 for k in keys} for _ in range(n)]
    hbm = [0] * n
    ddr = [0] * n
    for so in options:
        for sh in so.shards:
            if sh.rank is None or not 0 <= sh.rank < n:
                continue
            if sh.perf is not None:
                for k in keys:
                    perf[sh.rank][k] += float(getattr(sh.perf, k, 0.0) or 0.0)
            if sh.storage is not None:
                hbm[sh.rank] += int(sh.storage.hbm)
                ddr[sh.rank] += int(sh.storage.ddr)
    per_rank = [
        {"rank": r, **{f"{k}_ms": v for k, v in perf[r].items()}, "total_ms": sum(perf[r].values()), "hbm_bytes": hbm[r], "ddr_bytes": ddr[r]}
        for r in range(n)
    ]
    return {
        "per_rank": per_rank,
        "torchrec_perf_rating_ms": max(r["total_ms"] for r in per_rank) if per_rank else None,
        "sharding_types_chosen": dict(Counter(so.sharding_type for so in options)),
        "compute_kernels_chosen": dict(Counter(so.compute_kernel for so in options)),
        "estimates_note": "TorchRec's own analytic estimates (its perf model for the compute device above), not shardopt's cost model",
    }


class TorchRecSolver(Solver):
    """TorchRec's `EmbeddingShardingPlanner` (default proposers, greedy perf partitioner) on the instance.

    Options: `sharding_types` (default DEFAULT_SHARDING_TYPES), `min_partition` (TorchRec's default 128),
    `compute_device` ("cuda"), `storage_reservation` (0.0), `uvm` (True: allow fused_uvm_caching and fused_uvm
    when the instance has host memory)."""

    name = "torchrec"

    Options = TorchRecOptions

    def __init__(self, options: TorchRecOptions | None = None, **overrides: Any):
        super().__init__(options, **overrides)
        missing = torchrec_installed()  # fail at construction (before any file is read), like an unknown solver name;
        if missing is not None:         # the import itself (seconds) happens where the planning does, inside the limit
            raise TorchRecNotInstalledError(self.name, missing)

    def _proposers(self) -> list[Any] | None:
        """TorchRec's four default proposers in the order the options ask for (None: TorchRec's own list)."""
        if self.options.proposers == "torchrec":
            return None
        from torchrec.distributed.planner.proposers import GreedyProposer, GridSearchProposer, UniformProposer

        return [UniformProposer(), GreedyProposer(use_depth=False), GreedyProposer(), GridSearchProposer()]

    def prepare(self) -> None:
        """Import TorchRec in this process (seconds), so that the solves after it - forked from here - spend their
        limit planning. `shardopt solve` does not call it: one solve's wait includes the import, and so does its limit."""
        try:
            require_torchrec()
        except TorchRecUnavailableError as exc:
            raise TorchRecNotInstalledError(self.name, exc) from None

    def params(self) -> dict[str, Any]:
        return {
            "sharding_types": list(self.options.sharding_types),
            "min_partition": self.options.min_partition if self.options.min_partition is not None else "torchrec default (128)",
            "compute_device": self.options.compute_device,
            "storage_reservation": self.options.storage_reservation,
            "uvm": self.options.uvm,
            "default_time_limit": self.options.default_time_limit,
            "proposers": self.options.proposers,
            "uses_seed": False,
        }

    # -- TorchRec's inputs -----------------------------------------------------------------------------------------

    def _topology(self, instance: Instance) -> tuple[Any, dict[str, Any]]:
        return torchrec_topology(instance, self.options.compute_device)

    def compute_kernels(self, instance: Instance) -> list[str]:
        """The compute kernels TorchRec may choose from: fused (HBM), the UVM kernels when the instance has host
        memory (and `uvm` is on), dense when data_parallel is allowed."""
        kernels = [FUSED]
        if self.options.uvm and instance.topology.has_host_memory:
            kernels += list(UVM_KERNELS)
        if DATA_PARALLEL in self.options.sharding_types:
            kernels.append(DENSE)
        return kernels

    def _constraints(self, planned: Instance, instance: Instance) -> dict[str, Any]:
        """TorchRec's ParameterConstraints per table of `planned` (the aliased `instance`): the solver's sharding types,
        kernels and min_partition, narrowed by the table's placement constraints (`table_options`)."""
        from torchrec.distributed.planner import ParameterConstraints
        from torchrec.distributed.types import CacheParams

        out = {}
        for t, own in zip(planned.tables, instance.tables):
            types, kernels, min_partition, load_factor = self.table_options(instance, own.name)
            out[t.name] = ParameterConstraints(
                sharding_types=types,
                compute_kernels=kernels,
                min_partition=min_partition,
                pooling_factors=[float(t.pooling_factor)],
                cache_params=CacheParams(load_factor=load_factor) if load_factor is not None else None,
            )
        return out

    def table_options(self, instance: Instance, table: str) -> tuple[list[str], list[str], int | None, float | None]:
        """(sharding types, compute kernels, min_partition, cache load factor) TorchRec's planner gets for `table`: the
        solver's own, narrowed by the table's placement constraint (types and kernels intersected; a replica's kernel
        is HBM's, so a table kept out of HBM gets no data_parallel; the larger min_partition); empty lists where
        nothing is left (`constraint_gap` says so first)."""
        types, kernels = list(self.options.sharding_types), self.compute_kernels(instance)
        min_partition, load_factor = self.options.min_partition, None
        tc = instance.constraints.of(table) if instance.constraints is not None else None
        if tc is None:
            return types, kernels, min_partition, load_factor
        if tc.sharding_types is not None:
            types = [k for k in types if k in tc.sharding_types]
        if tc.kernels is not None:
            allowed = {k.value for k in tc.kernels}
            if FUSED not in allowed:
                types = [k for k in types if k != DATA_PARALLEL]
            kernels = [k for k in kernels if k in allowed or (k == DENSE and FUSED in allowed)]
        if DATA_PARALLEL not in types:
            kernels = [k for k in kernels if k != DENSE]
        if tc.min_partition is not None:
            min_partition = max(min_partition or 0, tc.min_partition)
        return types, kernels, min_partition, tc.cache_load_factor

    def constraint_gap(self, instance: Instance) -> str | None:
        """Why the planner cannot be offered what a table's constraint allows (None: every table has a type and a
        kernel left)."""
        c = instance.constraints
        for tc in c.tables if c is not None else []:
            types, kernels, _, _ = self.table_options(instance, tc.table)
            if not types or not [k for k in kernels if k != DENSE or DATA_PARALLEL in types]:
                return (f"table {tc.table!r}: its constraint and the solver's options ({', '.join(self.options.sharding_types)}; kernels "
                        f"{', '.join(self.compute_kernels(instance))}) leave TorchRec's planner no sharding type and kernel to offer")
        return None

    # -- the solve -------------------------------------------------------------------------------------------------

    def solve(self, instance: Instance, cost_model: CostModel, *, time_limit: float | None = None, seed: int = 0) -> SolveResult:
        clock = Stopwatch()
        gap = self.constraint_gap(instance)
        if gap is not None:
            return fail(self, SolveStatus.no_solution, f"{self.name}: {gap}; the instance is not proven infeasible", clock, {"constraints": "not met"})
        torchrec_pod_size(instance.topology)  # (a topology TorchRec's planner cannot take is refused by name before it plans)
        if time_limit is None:  # (the default budget: without one the planner runs every proposer, 30 min on production)
            time_limit = self.options.default_time_limit
        timeout = None if time_limit is None else max(1, math.floor(TIMEOUT_SHARE * time_limit))
        bound: list[Any] = []
        batch = per_rank_batch(instance)
        warm = "torchrec.distributed.types" in sys.modules  # imported by an earlier solve of this process
        try:
            if time_limit is None:
                out = self._plan(instance, timeout)
            else:  # the planner's own timeout is checked between proposals only: a forked child is stopped at the limit;
                # meanwhile this process binds the cost model (the access histograms of every table). Where this
                # process has not imported TorchRec (prepare()), the child imports it, within the limit
                out = _run_with_deadline(lambda: self._plan(instance, timeout), HARD_LIMIT_SHARE * time_limit + HARD_LIMIT_SLACK_S - clock.elapsed,
                                         meanwhile=lambda: bound.append(_bound_ahead(cost_model, instance)))
        except TorchRecUnavailableError as exc:  # (a broken native library shows only when the import runs)
            raise TorchRecNotInstalledError(self.name, exc) from None
        if out is None:
            why = (f"the time limit of {time_limit:g} s ended TorchRec's planner before it returned a plan (its own timeout is checked "
                   "only between proposals; enumerating the search space and partitioning a proposal cannot be interrupted, so the "
                   "planner was stopped)" + ("" if warm else "; the solve also imported TorchRec within the limit (seconds; a "
                                               "batch calls prepare() first)") + "; the instance is not proven infeasible")
            return fail(self, SolveStatus.no_solution, why, clock, {"timed_out": True, "hard_stopped": True, "time_limit": time_limit,
                                                                   "imported_torchrec": not warm})
        info: dict[str, Any] = {
            "torchrec_version": out.get("torchrec_version", "?"),
            "topology": out["topo_note"],
            "batch_size_per_rank": batch,
            "compute_kernels_allowed": self.compute_kernels(instance),
            "planner_seconds": out["plan_s"],
            "num_proposals": out["num_proposals"],
            "num_plans": out["num_plans"],
            "time_limit": (
                f"TorchRec's timeout_seconds={timeout} ({100 * TIMEOUT_SHARE:g} % of the limit, at least 1 s; checked between proposals "
                f"only; the planner is stopped at the limit + {HARD_LIMIT_SLACK_S:g} s)"
                if timeout is not None else "none (the planner runs all its proposers)"
            ),
        }
        timed_out = out["timed_out"]  # TorchRec logged that its timeout stopped a proposer
        info["timed_out"] = timed_out
        if out["shards"] is None:
            msg, kind = out["error"]
            info["planner_error"] = msg
            head = msg.split(" Planner evaluated", 1)[0]
            last = msg.split("Last planner error:", 1)[1].strip() if "Last planner error:" in msg else ""
            reason = f"TorchRec's planner found no plan ({kind}, after {out['num_proposals']} proposals): {head}"
            if last:
                reason += f" Last error: {last[:400]}"
            if timed_out:
                reason += f" The planner's timeout ({timeout} s, from --time-limit) stopped its search."
            return fail(self, SolveStatus.no_solution, reason + " (full message in info['planner_error']); the instance is not proven infeasible", clock, info)

        info.update(out["estimates"])
        shards = out["shards"]
        check = check_plan(instance, shards)
        broken = [v.message for v in check.violations if v.kind == "constraint"]
        if broken:  # (never a silent wrong plan: TorchRec's reading of a constraint differs from the IR's)
            info["violations"] = broken
            return fail(self, SolveStatus.no_solution, f"TorchRec's plan breaks a placement constraint ({broken[0]}); the plan is not "
                        "repaired; the instance is not proven infeasible", clock, info)
        over = [v for v in check.violations if v.kind in ("memory", "host_memory")]
        if over:
            topo = instance.topology
            est = {r["rank"]: r for r in info["per_rank"]}
            tiers = (
                ("HBM", check.memory_use, topo.capacity, "hbm_bytes"),
                ("host memory", check.host_memory_use, topo.host_capacity, "ddr_bytes"),
            )
            info["overflow"] = [
                {"device": d, "tier": tier, "used_bytes": int(use[d]), "capacity_bytes": cap(d),
                 "torchrec_hbm_estimate_bytes": est.get(d, {}).get("hbm_bytes"), "torchrec_ddr_estimate_bytes": est.get(d, {}).get("ddr_bytes"),
                 "torchrec_estimate_bytes": est.get(d, {}).get(key)}
                for tier, use, cap, key in tiers
                for d in range(topo.num_devices)
                if use[d] > cap(d)
            ]
            first = info["overflow"][0]
            what = f"weights + {instance.workload.optimizer.value} state" + (" + UVM caches" if first["tier"] == "HBM" else "")
            reason = (
                f"TorchRec's plan overflows shardopt's memory model on {len(info['overflow'])} device tier(s): device {first['device']} needs "
                f"{first['used_bytes']:,} bytes of {first['tier']} ({what}) of its "
                f"{first['capacity_bytes']:,} (over by {first['used_bytes'] - first['capacity_bytes']:,}); TorchRec's own "
                f"{first['tier']} estimate for that rank was {first['torchrec_estimate_bytes']:,} bytes. The plan is not "
                "repaired; the instance is not proven infeasible"
            )
            info["violations"] = [v.message for v in over]
            return fail(self, SolveStatus.no_solution, reason, clock, info)
        return finish(
            self, instance, cost_model, shards, clock, seed=seed,
            stopped=StopReason.time_limit if timed_out else None,
            info=info, bound=bound[0] if bound else None,
            extra_params={"batch_size_per_rank": batch, "timeout_seconds": timeout, "compute_kernels": self.compute_kernels(instance)},
        )

    def _plan(self, instance: Instance, timeout: int | None) -> dict[str, Any]:
        """Run TorchRec's planner on the instance: what `solve` needs of it, picklable (the plan as shardopt shards
        under the real table names, or the planner's error; its counts, its own estimates, whether its timeout
        fired), so it can come back from a child process. Imports TorchRec where it is not loaded yet."""
        torchrec = require_torchrec()
        import torch
        from torchrec import EmbeddingBagCollection
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.distributed.planner import EmbeddingShardingPlanner
        from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
        from torchrec.distributed.planner.types import PlannerError

        batch = per_rank_batch(instance)
        planned = aliased(instance)
        with _quiet():
            ebc = EmbeddingBagCollection(tables=embedding_bag_configs(planned), device=torch.device("meta"))
            apply_optimizer(planned, ebc)
            topology, topo_note = self._topology(planned)
            planner = EmbeddingShardingPlanner(
                topology=topology,
                batch_size=batch,
                proposer=self._proposers(),
                constraints=self._constraints(planned, instance),
                storage_reservation=FixedPercentageStorageReservation(self.options.storage_reservation),
                stats=[],
                debug=False,
                timeout_seconds=timeout,
            )
            t0 = time.perf_counter()
            with _watch_timeout() as watch:
                try:
                    sharding_plan = planner.plan(module=ebc, sharders=[EmbeddingBagCollectionSharder()])
                    error = None
                except PlannerError as exc:
                    sharding_plan, error = None, exc
            plan_s = time.perf_counter() - t0
        out: dict[str, Any] = {"torchrec_version": getattr(torchrec, "__version__", "?"), "topo_note": topo_note, "plan_s": plan_s, "num_proposals": planner._num_proposals,
                               "num_plans": planner._num_plans, "timed_out": watch.fired, "shards": None, "error": None, "estimates": None}
        if sharding_plan is None:
            out["error"] = (_real_names(" ".join(str(error).split()), instance), getattr(getattr(error, "error_type", None), "name", "error"))
            return out
        out["estimates"] = self._estimates(instance, planner._best_plan or [])
        names = [t.name for t in instance.tables]
        out["shards"] = [s.model_copy(update={"table": names[int(s.table[len(ALIAS):])]}) for s in from_torchrec_plan(planned, sharding_plan, module_path="")]
        return out

    @staticmethod
    def _estimates(instance: Instance, best: list[Any]) -> dict[str, Any]:
        return rank_estimates(instance, best)


class TorchRecAllTypesSolver(TorchRecSolver):
    """TorchRec's planner allowed every sharding type the IR expresses."""

    name = "torchrec_all"

    Options = TorchRecAllTypesOptions
