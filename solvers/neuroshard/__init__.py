"""NeuroShard: a beam search over column splits whose states are scored by a grid-searched greedy packing, as
published (`neuroshard_faithful`) and improved (`neuroshard`, the default solver); docs/neuroshard.md."""

from solvers.neuroshard.config import FAITHFUL, NeuroShardConfig, default_budget
from solvers.neuroshard.pieces import presplit_plan
from solvers.neuroshard.search import NeuroShardFaithfulSolver, NeuroShardSolver

__all__ = ["FAITHFUL", "NeuroShardConfig", "NeuroShardFaithfulSolver", "NeuroShardSolver", "default_budget", "presplit_plan"]
