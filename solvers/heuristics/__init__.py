"""Constructive heuristics: tables one at a time, each onto a device by a rule (the cost model's, a proxy's, random,
round robin), with a memory-first fallback and the tiers (row-wise, UVM) where HBM cannot hold the instance."""

from solvers.heuristics.constructive import (
    FALLBACK_STAGES,
    ROW_SPLITS,
    DimSolver,
    GreedySolver,
    HeuristicOptions,
    HeuristicSolver,
    LookupSolver,
    RandomSolver,
    RoundRobinSolver,
    SizeLookupSolver,
    SizeSolver,
)

__all__ = ["FALLBACK_STAGES", "ROW_SPLITS", "DimSolver", "GreedySolver", "HeuristicOptions", "HeuristicSolver", "LookupSolver",
           "RandomSolver", "RoundRobinSolver", "SizeLookupSolver", "SizeSolver"]
