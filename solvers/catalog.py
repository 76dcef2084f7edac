"""The solver catalog: one `SolverSpec` per solver, the single place that says what a solver is.

The CLI (`shardopt solve`, `shardopt solvers`), the leaderboard and the docs read a solver's family, description,
placements and capabilities (whether it reads the cost model, is anytime, is deterministic, which instances it
accepts) from its spec; nothing else keys behaviour on a solver's name. The
class behind a spec is imported on first use, so that `shardopt solve --solver greedy` does not pay for OR-Tools or
torch. Adding a solver is one module with a `Solver` subclass (its `name` and its `Options` dataclass) and one
`register(SolverSpec(...))` - here for the shipped solvers, or in the caller's own code for a solver of its own
(docs/solvers.md, "Adding a solver").
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from shardopt.core.errors import UserError
from shardopt.core.ir import CONSTRAINT_KINDS, Instance
from shardopt.core.sharding_types import (
    COLUMN_WISE,
    DATA_PARALLEL,
    GRID_SHARD,
    ROW_WISE,
    SHARDING_TYPES,
    TABLE_COLUMN_WISE,
    TABLE_ROW_WISE,
    TABLE_WISE,
)
from solvers.base import Solver
from solvers.errors import UnknownSolverError
from solvers.options import OptionSpec, option_specs

__all__ = ["NotAccepted", "SolverSpec", "UnknownSolverError", "check_accepts", "get_solver", "register", "solver_class", "solver_names", "spec_of", "specs", "unregister"]


@dataclass(frozen=True)
class SolverSpec:
    """What a solver is and can do, before its module is imported: CVXPY's solver capability flags, for placement.

    module / cls: where its class lives (`solver_class` imports it); family: heuristic, search, exact, rl or
    baseline; placements: the sharding types its plans may hold (shardopt.core.sharding_types: TABLE_WISE,
    COLUMN_WISE, ...), and placement_note when it uses each, in words (`shardopt solvers`); host_memory: it places
    tables in host memory (UVM-cached / UVM kernels) where the HBM cannot hold them; uses_cost_model: whether its plan
    depends on the cost model it is given (a model-free solver is solved once per instance and reported beside every
    model); anytime: stopped by its time limit, it returns the best plan found by then; deterministic: at its default
    budget its plan depends on the instance, cost model, options and seed only, not on the machine's speed (a work
    budget, or no search at all: benchmarks/plan_equality.py holds these to identical plans); needs: the optional
    extra it needs ('' for none); constraints: the kinds of placement constraint it honours
    (shardopt.core.ir.CONSTRAINT_KINDS); max_tables / max_devices: the largest instance it takes; refusal: where it
    refuses instances for reasons of its own, "module:function" taking the instance and returning why (or None),
    imported on use. `accepts(instance)` says why an instance is refused before any solve starts."""

    name: str
    module: str
    cls: str
    family: str
    description: str
    placements: frozenset[str]
    placement_note: str = ""
    host_memory: bool = False
    uses_cost_model: bool = True
    anytime: bool = False
    deterministic: bool = True
    needs: str = ""
    constraints: frozenset[str] = frozenset()
    max_tables: int | None = None
    max_devices: int | None = None
    refusal: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.placements, str):
            raise TypeError(f"solver spec {self.name!r}: placements is a set of sharding types ({', '.join(SHARDING_TYPES)}), "
                            f"not {self.placements!r}: the words go in placement_note")
        unknown = sorted(set(self.placements) - set(SHARDING_TYPES))
        if unknown or not self.placements:
            raise TypeError(f"solver spec {self.name!r}: placements {sorted(self.placements)}: "
                            f"{'unknown ' + ', '.join(unknown) if unknown else 'none'} (known: {', '.join(SHARDING_TYPES)})")
        bad = sorted(set(self.constraints) - set(CONSTRAINT_KINDS))
        if bad:
            raise TypeError(f"solver spec {self.name!r}: constraints {bad} are not constraint kinds (known: {', '.join(CONSTRAINT_KINDS)})")
        object.__setattr__(self, "placements", frozenset(self.placements))
        object.__setattr__(self, "constraints", frozenset(self.constraints))

    def solver_class(self) -> type[Solver]:
        klass = getattr(importlib.import_module(self.module), self.cls)
        if getattr(klass, "name", None) != self.name:
            raise TypeError(f"solver spec {self.name!r}: class {self.module}.{self.cls} is named {getattr(klass, 'name', None)!r}")
        return klass

    def options(self) -> list[OptionSpec]:
        """The solver's options with their types, defaults, help and allowed values (imports its module)."""
        klass = self.solver_class()
        return option_specs(klass.Options, klass.default_options)

    def places(self, sharding_type: str) -> bool:
        return sharding_type in self.placements

    def accepts(self, instance: Instance) -> str | None:
        """Why this solver refuses `instance` before solving it (None: it takes it): constraint kinds it would not
        honour (its plan would break them, and the plan checker would call that a bug), an instance beyond its size,
        or its own refusal (a topology its model cannot say)."""
        why = unhonoured(self, instance)
        if why is not None:
            return why
        T, D = len(instance.tables), instance.topology.num_devices
        if (self.max_tables is not None and T > self.max_tables) or (self.max_devices is not None and D > self.max_devices):
            return (f"solver {self.name!r} takes at most {self.max_tables or 'any number of'} tables on at most "
                    f"{self.max_devices or 'any number of'} devices; the instance has {T} tables on {D} devices")
        if self.refusal is not None:
            module, _, func = self.refusal.partition(":")
            return getattr(importlib.import_module(module), func)(instance)
        return None


_SPECS: dict[str, SolverSpec] = {}


class NotAccepted(UserError, ValueError):
    """The solver refuses the instance before solving it (SolverSpec.accepts: the message says why)."""


class UnhonouredConstraints(NotAccepted):
    """The instance has placement constraints the solver does not honour (the message names them and the solvers that
    do)."""


def check_accepts(name: str, instance: Instance) -> None:
    """NotAccepted (UnhonouredConstraints for constraints) when solver `name` refuses `instance`: exit 2 with the
    reason, before any time is spent."""
    spec = spec_of(name)
    if unhonoured(spec, instance) is not None:
        raise UnhonouredConstraints(unhonoured(spec, instance))
    why = spec.accepts(instance)
    if why is not None:
        raise NotAccepted(why)



def unhonoured(spec: SolverSpec, instance: Instance) -> str | None:
    """Why `spec`'s solver cannot be given `instance` (the constraint kinds it would not honour), or None. A solver
    never sees constraints it ignores: its plan would break them, and the plan checker would call that a bug."""
    used = instance.constraint_kinds()
    missing = sorted(used - set(spec.constraints))
    if not missing:
        return None
    honours = ", ".join(sorted(spec.constraints)) if spec.constraints else "none"
    return (f"solver {spec.name!r} does not honour the instance's {', '.join(missing)} constraint(s) (it honours: {honours}); "
            f"solvers that do: {', '.join(s.name for s in specs() if not (used - set(s.constraints))) or 'none yet'}")


def register(spec: SolverSpec) -> None:
    """Add (or replace) a solver in the catalog."""
    _SPECS[spec.name] = spec


def unregister(name: str) -> None:
    _SPECS.pop(name, None)


ENTRY_POINT_GROUP = "shardopt.solvers"
DEFAULT_SOLVER = "neuroshard"  # the one place the default lives: `solve` without --solver, and the plan --pick keeps in a near-tie
_plugins_loaded = False


def load_plugins() -> None:
    """Register the solvers that installed packages declare under the entry-point group `shardopt.solvers` (each
    entry a SolverSpec), once per process: how a solver of one's own reaches the `shardopt` command. A broken entry
    is reported on stderr and skipped, never the end of every other solver."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    import sys
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = ep.load()
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not take the catalog down
            print(f"warning: solver plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        if not isinstance(spec, SolverSpec):
            print(f"warning: solver plugin {ep.name!r} ({ep.value}) is not a SolverSpec; skipped", file=sys.stderr)
            continue
        register(spec)


def solver_names() -> list[str]:
    load_plugins()
    return list(_SPECS)


def specs() -> list[SolverSpec]:
    load_plugins()
    return list(_SPECS.values())


def spec_of(name: str) -> SolverSpec:
    """The spec of a registered solver; UnknownSolverError otherwise."""
    load_plugins()
    spec = _SPECS.get(name)
    if spec is None:
        raise UnknownSolverError(f"unknown solver {name!r} (known: {', '.join(solver_names())})", name)
    return spec


def solver_class(name: str) -> type[Solver]:
    """The class behind a registered name (imported on first use); UnknownSolverError otherwise."""
    return spec_of(name).solver_class()


def get_solver(name: str, options: Any = None, **overrides: Any) -> Solver:
    """A solver by name, with its options (a dataclass of its `Options` type, and/or keyword overrides, checked)."""
    return solver_class(name)(options, **overrides)


# -------------------------------------------------------------------------------------------------------------------
# the shipped solvers

_H = "solvers.heuristics.constructive"
_HEURISTIC_PLACEMENTS = frozenset({TABLE_WISE, ROW_WISE, TABLE_ROW_WISE})
_HEURISTIC_NOTE = "table-wise; row-wise (-O row_splits=within_host: table-row-wise) for a table larger than every device; UVM-cached / UVM when the tables exceed the HBM"
_EXACT_PLACEMENTS = frozenset({TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, DATA_PARALLEL})
_EXACT_NOTE = (
    "table-wise, column-wise, then row-wise / table-row-wise splits of a table on the bottleneck device where the cost "
    "model says they pay (-O row_wise=false: none); where table- and column-wise cannot hold the instance in HBM: the "
    "best tiered plan of greedy / neuroshard (row-wise, UVM-cached / UVM, data-parallel shards kept as it has them) "
    "with its HBM tables re-placed exactly"
)
# what TorchRec's planner honours through its own ParameterConstraints (it has no pins nor groups), and the form
# TorchRec loads, which its plans keep (the plan check still holds its column widths to even_columns)
_TORCHREC_CONSTRAINTS = frozenset({"sharding_types", "kernels", "min_partition", "cache_load_factor", "torchrec"})
_TORCHREC_REFUSAL = "shardopt.data.torchrec_io:topology_refusal"
_EXACT_COMMON = ("on the linearised cost model, re-linearised until no improvement; whole tables and dyadic column pieces "
                 "(and the warm start's widths); hard memory capacities")
_ALL = frozenset(CONSTRAINT_KINDS)


def _heuristic(name: str, cls: str, description: str, *, uses_cost_model: bool = False) -> SolverSpec:
    return SolverSpec(name, _H, cls, "heuristic", description, _HEURISTIC_PLACEMENTS, _HEURISTIC_NOTE, host_memory=True,
                      uses_cost_model=uses_cost_model, constraints=_ALL)


for _spec in (
    _heuristic("greedy", "GreedySolver", "largest predicted cost first onto the device of lowest predicted cost (cost-model aware)",
               uses_cost_model=True),
    _heuristic("random", "RandomSolver", "uniformly random device among those with memory left"),
    _heuristic("round_robin", "RoundRobinSolver", "tables in order onto devices in turn, skipping full devices"),
    _heuristic("size", "SizeSolver", "proxy = table bytes; largest first onto the lowest accumulated proxy"),
    _heuristic("dim", "DimSolver", "proxy = dim; largest first onto the lowest accumulated proxy"),
    _heuristic("lookup", "LookupSolver", "proxy = dim x pooling factor; largest first onto the lowest accumulated proxy"),
    _heuristic("size_lookup", "SizeLookupSolver", "proxy = dim x pooling factor x log10(rows); largest first onto the lowest accumulated proxy"),
    SolverSpec("neuroshard", "solvers.neuroshard.search", "NeuroShardSolver", "search",
               "NeuroShard beam search over column splits + grid-searched greedy, improved (halves apart, comm-aware, "
               "de-duplicated, polished, anytime)",
               frozenset({TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, DATA_PARALLEL}),
               "table-wise, column-wise, and row-wise / table-row-wise splits of a table on the bottleneck device where the "
               "cost model says they pay (-O row_wise=false: none); where those cannot hold the instance in HBM: row-wise for "
               "a table larger than every device, UVM-cached / UVM for the coldest tables (the heuristics' tiers), the rest "
               "searched table- and column-wise, then caches grown / tables moved back to HBM / small tables replicated "
               "data-parallel where the cost model says so; on HBM instances the search again around sets of the smallest tables "
               "replicated, in the time left (-O data_parallel=false: no replicas; true: the polish replicates too)",
               host_memory=True, anytime=True, constraints=_ALL),
    SolverSpec("neuroshard_faithful", "solvers.neuroshard.search", "NeuroShardFaithfulSolver", "search",
               "NeuroShard as published (beam 3, top-10 size/cost candidates, 10 halvings, dim-cap grid 1.0..1.5)",
               frozenset({TABLE_WISE, COLUMN_WISE, ROW_WISE}),
               "table-wise, column-wise; where those cannot hold the instance in HBM: row-wise for a table larger than every "
               "device, UVM-cached / UVM for the coldest tables (the heuristics' tiers), the rest searched table- and column-wise",
               host_memory=True, anytime=True, constraints=_ALL),
    SolverSpec("cpsat", "solvers.exact.solver", "CpSatSolver", "exact",
               f"OR-Tools CP-SAT {_EXACT_COMMON}; warm start from the best heuristic / pre-split plan; reports the linear model's bound",
               _EXACT_PLACEMENTS, _EXACT_NOTE, host_memory=True, anytime=True, constraints=_ALL),
    SolverSpec("milp", "solvers.exact.solver", "MilpSolver", "exact",
               f"MILP (PuLP + CBC) {_EXACT_COMMON}; warm start; reports the linear model's bound", _EXACT_PLACEMENTS, _EXACT_NOTE,
               host_memory=True, anytime=True, deterministic=False, constraints=_ALL),
    SolverSpec("milp_highs", "solvers.exact.solver", "MilpHighsSolver", "exact",
               f"MILP (scipy.optimize.milp, i.e. HiGHS) {_EXACT_COMMON}; the warm start only as a cutoff (scipy's HiGHS "
               f"takes no starting solution); reports the linear model's bound", _EXACT_PLACEMENTS, _EXACT_NOTE,
               host_memory=True, anytime=True, constraints=_ALL),
    SolverSpec("milp_exact_neural", "solvers.exact.solver", "MilpExactNeuralSolver", "exact",
               "MILP (HiGHS) with the neural compute head encoded exactly (big-M per ReLU, softplus by tangents), comm "
               "linearised; neural cost model only", frozenset({TABLE_WISE}), "table-wise (HBM only)",
               anytime=True, constraints=_ALL, max_tables=12, max_devices=4),
    SolverSpec("torchrec", "solvers.torchrec_solver", "TorchRecSolver", "baseline",
               "TorchRec's EmbeddingShardingPlanner (its analytic perf / storage estimators, proposers, greedy partitioner)",
               frozenset({TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, DATA_PARALLEL}),
               "table-wise, column-wise, row-wise, table-row-wise, data-parallel; UVM-cached / UVM when the instance has host "
               "memory (TorchRec's planner chooses)", host_memory=True, uses_cost_model=False, deterministic=False,
               needs="torchrec", constraints=_TORCHREC_CONSTRAINTS, refusal=_TORCHREC_REFUSAL),
    SolverSpec("torchrec_all", "solvers.torchrec_solver", "TorchRecAllTypesSolver", "baseline",
               "TorchRec's planner with every sharding type the IR expresses",
               frozenset({TABLE_WISE, COLUMN_WISE, ROW_WISE, TABLE_ROW_WISE, TABLE_COLUMN_WISE, GRID_SHARD, DATA_PARALLEL}),
               "table-wise, column-wise, row-wise, table-row-wise, table-column-wise, grid, data-parallel; UVM-cached / UVM "
               "when the instance has host memory (TorchRec's planner chooses)", host_memory=True, uses_cost_model=False,
               deterministic=False, needs="torchrec", constraints=_TORCHREC_CONSTRAINTS, refusal=_TORCHREC_REFUSAL),
    SolverSpec("dreamshard", "solvers.rl.dreamshard", "DreamShardSolver", "rl",
               "DreamShard policy (per-device scorer shared across devices, REINFORCE on the estimated MDP): greedy + "
               "best-of-k sampled rollouts", frozenset({TABLE_WISE}), "table-wise (HBM only)", anytime=True, constraints=_ALL),
    SolverSpec("autoshard", "solvers.rl.autoshard", "AutoShardSolver", "rl",
               "AutoShard LSTM actor-critic (A2C, reward = -plan cost) over the table sequence: greedy + best-of-k sampled "
               "rollouts", frozenset({TABLE_WISE}), "table-wise (HBM only)", anytime=True, constraints=_ALL),
):
    register(_spec)


def _scout_solve(instance: Instance, cost_model: Any, time_limit: float | None, seed: int) -> Any:
    """solvers/two_d.py's scout: SCOUT_SOLVER's flat solve of one sharding group, on its short work budget."""
    from solvers.two_d import SCOUT_SOLVER, SCOUT_WORK_S

    return get_solver(SCOUT_SOLVER, default_time_limit=SCOUT_WORK_S).solve(instance, cost_model, time_limit=time_limit, seed=seed)


def _register_scout() -> None:
    from solvers.two_d import SCOUT_SOLVER, register_scout

    register_scout(SCOUT_SOLVER, _scout_solve)


_register_scout()
