"""The solver catalog: one `SolverSpec` per solver, the single place that says what a solver is.

The CLI (`shardopt solve`, `shardopt solvers`), the leaderboard and the docs read a solver's family, description,
placements and whether it reads the cost model from its spec; nothing else keys behaviour on a solver's name. The
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
from solvers.base import Solver
from solvers.errors import UnknownSolverError
from solvers.options import OptionSpec, option_specs

__all__ = ["SolverSpec", "UnknownSolverError", "get_solver", "register", "solver_class", "solver_names", "spec_of", "specs", "unregister"]


@dataclass(frozen=True)
class SolverSpec:
    """What a solver is, before its module is imported.

    module / cls: where its class lives (`solver_class` imports it); family: heuristic, search, exact, rl or
    baseline; placements: the placement kinds it can produce, in words; uses_cost_model: whether its plan depends on
    the cost model it is given (a model-free solver is solved once per instance and reported beside every model);
    needs: the optional extra it needs ('' for none), for `shardopt solvers`; constraints: the kinds of placement
    constraint it honours (shardopt.core.ir.CONSTRAINT_KINDS): an instance with any other is refused by name before
    it solves (`unhonoured`)."""

    name: str
    module: str
    cls: str
    family: str
    description: str
    placements: str
    uses_cost_model: bool = True
    needs: str = ""
    constraints: tuple[str, ...] = ()

    def solver_class(self) -> type[Solver]:
        klass = getattr(importlib.import_module(self.module), self.cls)
        if getattr(klass, "name", None) != self.name:
            raise TypeError(f"solver spec {self.name!r}: class {self.module}.{self.cls} is named {getattr(klass, 'name', None)!r}")
        return klass

    def options(self) -> list[OptionSpec]:
        """The solver's options with their types, defaults, help and allowed values (imports its module)."""
        klass = self.solver_class()
        return option_specs(klass.Options, klass.default_options)


_SPECS: dict[str, SolverSpec] = {}


class UnhonouredConstraints(UserError, ValueError):
    """The instance has placement constraints the solver does not honour (the message names them and the solvers that
    do)."""


def check_honoured(name: str, instance: Instance) -> None:
    """UnhonouredConstraints when solver `name` would not honour the instance's constraints."""
    why = unhonoured(spec_of(name), instance)
    if why is not None:
        raise UnhonouredConstraints(why)


def unhonoured(spec: SolverSpec, instance: Instance) -> str | None:
    """Why `spec`'s solver cannot be given `instance` (the constraint kinds it would not honour), or None. A solver
    never sees constraints it ignores: its plan would break them, and the plan checker would call that a bug."""
    used = instance.constraint_kinds()
    missing = sorted(used - set(spec.constraints))
    if not missing:
        return None
    honours = ", ".join(spec.constraints) if spec.constraints else "none"
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
_HEURISTIC_PLACEMENTS = "table-wise; row-wise for a table larger than every device; UVM-cached / UVM when the tables exceed the HBM"
_EXACT_PLACEMENTS = (
    "table-wise, column-wise, then row-wise / table-row-wise splits of a table on the bottleneck device where the cost "
    "model says they pay (-O row_wise=false: none); where table- and column-wise cannot hold the instance in HBM: the "
    "best tiered plan of greedy / neuroshard (row-wise, UVM-cached / UVM, data-parallel shards kept as it has them) "
    "with its HBM tables re-placed exactly"
)
# what TorchRec's planner honours through its own ParameterConstraints (it has no pins nor groups), and the form
# TorchRec loads, which its plans keep (the plan check still holds its column widths to even_columns)
_TORCHREC_CONSTRAINTS = ("sharding_types", "kernels", "min_partition", "cache_load_factor", "torchrec")
_EXACT_COMMON = ("on the linearised cost model, re-linearised until no improvement; whole tables and dyadic column pieces "
                 "(and the warm start's widths); hard memory capacities")

for _spec in (
    SolverSpec("greedy", _H, "GreedySolver", "heuristic",
               "largest predicted cost first onto the device of lowest predicted cost (cost-model aware)", _HEURISTIC_PLACEMENTS, constraints=CONSTRAINT_KINDS),
    SolverSpec("random", _H, "RandomSolver", "heuristic", "uniformly random device among those with memory left",
               _HEURISTIC_PLACEMENTS, uses_cost_model=False, constraints=CONSTRAINT_KINDS),
    SolverSpec("round_robin", _H, "RoundRobinSolver", "heuristic", "tables in order onto devices in turn, skipping full devices",
               _HEURISTIC_PLACEMENTS, uses_cost_model=False, constraints=CONSTRAINT_KINDS),
    SolverSpec("size", _H, "SizeSolver", "heuristic", "proxy = table bytes; largest first onto the lowest accumulated proxy",
               _HEURISTIC_PLACEMENTS, uses_cost_model=False, constraints=CONSTRAINT_KINDS),
    SolverSpec("dim", _H, "DimSolver", "heuristic", "proxy = dim; largest first onto the lowest accumulated proxy",
               _HEURISTIC_PLACEMENTS, uses_cost_model=False, constraints=CONSTRAINT_KINDS),
    SolverSpec("lookup", _H, "LookupSolver", "heuristic", "proxy = dim x pooling factor; largest first onto the lowest accumulated proxy",
               _HEURISTIC_PLACEMENTS, uses_cost_model=False, constraints=CONSTRAINT_KINDS),
    SolverSpec("size_lookup", _H, "SizeLookupSolver", "heuristic",
               "proxy = dim x pooling factor x log10(rows); largest first onto the lowest accumulated proxy",
               _HEURISTIC_PLACEMENTS, uses_cost_model=False, constraints=CONSTRAINT_KINDS),
    SolverSpec("neuroshard", "solvers.neuroshard.search", "NeuroShardSolver", "search",
               "NeuroShard beam search over column splits + grid-searched greedy, improved (halves apart, comm-aware, "
               "de-duplicated, polished, anytime)",
               "table-wise, column-wise, and row-wise / table-row-wise splits of a table on the bottleneck device where the "
               "cost model says they pay (-O row_wise=false: none); where those cannot hold the instance in HBM: row-wise for "
               "a table larger than every device, UVM-cached / UVM for the coldest tables (the heuristics' tiers), the rest "
               "searched table- and column-wise, then caches grown / tables moved back to HBM / small tables replicated "
               "data-parallel where the cost model says so; on HBM instances the search again around sets of the smallest tables "
               "replicated, in the time left (-O data_parallel=false: no replicas; true: the polish replicates too)",
               constraints=CONSTRAINT_KINDS),
    SolverSpec("neuroshard_faithful", "solvers.neuroshard.search", "NeuroShardFaithfulSolver", "search",
               "NeuroShard as published (beam 3, top-10 size/cost candidates, 10 halvings, dim-cap grid 1.0..1.5)",
               "table-wise, column-wise; where those cannot hold the instance in HBM: row-wise for a table larger than every "
               "device, UVM-cached / UVM for the coldest tables (the heuristics' tiers), the rest searched table- and column-wise",
               constraints=CONSTRAINT_KINDS),
    SolverSpec("cpsat", "solvers.exact.solver", "CpSatSolver", "exact",
               f"OR-Tools CP-SAT {_EXACT_COMMON}; warm start from the best heuristic / pre-split plan; reports the linear model's bound",
               _EXACT_PLACEMENTS, constraints=CONSTRAINT_KINDS),
    SolverSpec("milp", "solvers.exact.solver", "MilpSolver", "exact",
               f"MILP (PuLP + CBC) {_EXACT_COMMON}; warm start; reports the linear model's bound", _EXACT_PLACEMENTS, constraints=CONSTRAINT_KINDS),
    SolverSpec("milp_highs", "solvers.exact.solver", "MilpHighsSolver", "exact",
               f"MILP (scipy.optimize.milp, i.e. HiGHS) {_EXACT_COMMON}; the warm start only as a cutoff (scipy's HiGHS "
               f"takes no starting solution); reports the linear model's bound", _EXACT_PLACEMENTS, constraints=CONSTRAINT_KINDS),
    SolverSpec("milp_exact_neural", "solvers.exact.solver", "MilpExactNeuralSolver", "exact",
               "MILP (HiGHS) with the neural compute head encoded exactly (big-M per ReLU, softplus by tangents), comm "
               "linearised; neural cost model only, at most 12 tables x 4 devices", "table-wise (HBM only)",
               constraints=CONSTRAINT_KINDS),
    SolverSpec("torchrec", "solvers.torchrec_solver", "TorchRecSolver", "baseline",
               "TorchRec's EmbeddingShardingPlanner (its analytic perf / storage estimators, proposers, greedy partitioner)",
               "table-wise, column-wise, row-wise, table-row-wise, data-parallel; UVM-cached / UVM when the instance has host "
               "memory (TorchRec's planner chooses)", uses_cost_model=False, needs="torchrec",
               constraints=_TORCHREC_CONSTRAINTS),
    SolverSpec("torchrec_all", "solvers.torchrec_solver", "TorchRecAllTypesSolver", "baseline",
               "TorchRec's planner with every sharding type the IR expresses",
               "table-wise, column-wise, row-wise, table-row-wise, table-column-wise, grid, data-parallel; UVM-cached / UVM "
               "when the instance has host memory (TorchRec's planner chooses)", uses_cost_model=False, needs="torchrec",
               constraints=_TORCHREC_CONSTRAINTS),
    SolverSpec("dreamshard", "solvers.rl.dreamshard", "DreamShardSolver", "rl",
               "DreamShard policy (per-device scorer shared across devices, REINFORCE on the estimated MDP): greedy + "
               "best-of-k sampled rollouts", "table-wise (HBM only)", constraints=CONSTRAINT_KINDS),
    SolverSpec("autoshard", "solvers.rl.autoshard", "AutoShardSolver", "rl",
               "AutoShard LSTM actor-critic (A2C, reward = -plan cost) over the table sequence: greedy + best-of-k sampled "
               "rollouts", "table-wise (HBM only)", constraints=CONSTRAINT_KINDS),
):
    register(_spec)
