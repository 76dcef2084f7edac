"""One registry: solver name -> solver class, imported lazily so that `shardopt solve --solver greedy` does not
pay for OR-Tools or torch."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from solvers.base import Solver


@dataclass(frozen=True)
class SolverEntry:
    name: str
    module: str
    cls: str
    family: str
    description: str


_ENTRIES: dict[str, SolverEntry] = {}


def register(name: str, module: str, cls: str, family: str, description: str) -> None:
    _ENTRIES[name] = SolverEntry(name, module, cls, family, description)


class UnknownSolverError(KeyError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"unknown solver {name!r} (known: {', '.join(solver_names())})")

    def __str__(self) -> str:
        return self.args[0]


def solver_names() -> list[str]:
    return list(_ENTRIES)


def entries() -> list[SolverEntry]:
    return list(_ENTRIES.values())


def solver_class(name: str) -> type[Solver]:
    """The class behind a registered name (imported on first use); UnknownSolverError otherwise."""
    entry = _ENTRIES.get(name)
    if entry is None:
        raise UnknownSolverError(name)
    return getattr(importlib.import_module(entry.module), entry.cls)


def get_solver(name: str, **options) -> Solver:
    return solver_class(name)(**options)


_H = "solvers.heuristics"
register("greedy", _H, "GreedySolver", "heuristic", "largest predicted cost first onto the device of lowest predicted cost (cost-model aware)")
register("random", _H, "RandomSolver", "heuristic", "uniformly random device among those with memory left")
register("round_robin", _H, "RoundRobinSolver", "heuristic", "tables in order onto devices in turn, skipping full devices")
register("size", _H, "SizeSolver", "heuristic", "proxy = table bytes; largest first onto the lowest accumulated proxy")
register("dim", _H, "DimSolver", "heuristic", "proxy = dim")
register("lookup", _H, "LookupSolver", "heuristic", "proxy = dim x pooling factor")
register("size_lookup", _H, "SizeLookupSolver", "heuristic", "proxy = dim x pooling factor x log10(rows)")
register("neuroshard", "solvers.neuroshard", "NeuroShardSolver", "search", "NeuroShard beam search over column splits + grid-searched greedy, improved (halves apart, comm-aware, de-duplicated, polished, anytime)")
register("neuroshard_faithful", "solvers.neuroshard", "NeuroShardFaithfulSolver", "search", "NeuroShard as published (beam 3, top-10 size/cost candidates, 10 halvings, dim-cap grid 1.0..1.5)")
register("cpsat", "solvers.exact.solver", "CpSatSolver", "exact", "OR-Tools CP-SAT on the linearised cost model (re-linearised until no improvement); whole tables and dyadic column pieces (and the warm start's widths); hard memory capacities; warm start from the best heuristic / pre-split plan; reports the linear model's bound")
register("milp", "solvers.exact.solver", "MilpSolver", "exact", "MILP (PuLP + CBC) on the linearised cost model (re-linearised until no improvement); whole tables and dyadic column pieces (and the warm start's widths); hard memory capacities; warm start; reports the linear model's bound")
register("milp_highs", "solvers.exact.solver", "MilpHighsSolver", "exact", "MILP (scipy.optimize.milp, i.e. HiGHS) on the linearised cost model (re-linearised until no improvement); whole tables and dyadic column pieces; hard memory capacities; reports the linear model's bound")
register("torchrec", "solvers.torchrec_solver", "TorchRecSolver", "baseline", "TorchRec's EmbeddingShardingPlanner: table-, column-, row-, table-row-wise, data-parallel; UVM kernels (ddr_cap) when the instance has host memory (optional extra [torchrec], installed with --no-deps)")
register("torchrec_all", "solvers.torchrec_solver", "TorchRecAllTypesSolver", "baseline", "TorchRec's planner with every sharding type the IR expresses: table/column/row-wise, table-row/column-wise, grid, data-parallel; UVM kernels with host memory (extra [torchrec])")
register("dreamshard", "solvers.dreamshard", "DreamShardSolver", "rl", "DreamShard policy (per-device scorer shared across devices, REINFORCE on the estimated MDP): greedy + best-of-16 sampled rollouts")
register("autoshard", "solvers.autoshard", "AutoShardSolver", "rl", "AutoShard LSTM actor-critic (A2C, reward = -plan cost) over the table sequence: greedy + best-of-16 sampled rollouts")
register("milp_exact_neural", "solvers.exact.solver", "MilpExactNeuralSolver", "exact", "MILP (HiGHS) with the neural compute head encoded exactly (big-M per ReLU, softplus by tangents), comm linearised; neural cost model only, at most 12 tables x 4 devices")

# which placements each solver can produce (DESIGN.md: a solver that supports only some says so; `shardopt solvers`)
_HEURISTIC_PLACEMENTS = "table-wise; row-wise for a table larger than every device; UVM-cached / UVM when the tables exceed the HBM"
PLACEMENTS: dict[str, str] = {
    **{n: _HEURISTIC_PLACEMENTS for n in ("greedy", "random", "round_robin", "size", "dim", "lookup", "size_lookup")},
    "neuroshard": ("table-wise, column-wise, and row-wise / table-row-wise splits of a table on the bottleneck device where "
                   "the cost model says they pay (-O row_wise=false: none); where those cannot hold the instance in HBM: row-wise "
                   "for a table larger than every device, UVM-cached / UVM for the coldest tables (the heuristics' tiers), the "
                   "rest searched table- and column-wise, then caches grown / tables moved back to HBM / small tables replicated "
                   "data-parallel where the cost model says so (data-parallel on HBM instances with -O data_parallel=true)"),
    "neuroshard_faithful": ("table-wise, column-wise; where those cannot hold the instance in HBM: row-wise for a table larger "
                            "than every device, UVM-cached / UVM for the coldest tables (the heuristics' tiers), the rest "
                            "searched table- and column-wise"),
    **{n: ("table-wise, column-wise, then row-wise / table-row-wise splits of a table on the bottleneck device where the cost "
           "model says they pay (-O row_wise=false: none); where table- and column-wise cannot hold the instance in HBM: the "
           "best tiered plan of greedy / neuroshard (row-wise, UVM-cached / UVM, data-parallel shards kept as it has them) "
           "with its HBM tables re-placed exactly")
       for n in ("cpsat", "milp", "milp_highs")},
    "milp_exact_neural": "table-wise (HBM only)",
    "torchrec": "table-wise, column-wise, row-wise, table-row-wise, data-parallel; UVM-cached / UVM when the instance has host memory (TorchRec's planner chooses)",
    "torchrec_all": "table-wise, column-wise, row-wise, table-row-wise, table-column-wise, grid, data-parallel; UVM-cached / UVM when the instance has host memory (TorchRec's planner chooses)",
    "dreamshard": "table-wise (HBM only)",
    "autoshard": "table-wise (HBM only)",
}


def placements(name: str) -> str:
    """The placements solver `name` can produce, in words ('' for a solver registered without a note)."""
    return PLACEMENTS.get(name, "")
