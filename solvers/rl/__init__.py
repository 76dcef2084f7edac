"""Reinforcement-learning solvers (DreamShard, AutoShard): a trained policy rolled out greedily and sampled, the best
plan kept; their shared rollout, environment and training loop (torch is imported only to train); docs/rl-solvers.md."""

from solvers.rl.autoshard import AutoShardSolver
from solvers.rl.common import PolicyOptions, PolicySolver
from solvers.rl.dreamshard import DreamShardSolver

__all__ = ["AutoShardSolver", "DreamShardSolver", "PolicyOptions", "PolicySolver"]
