"""shardopt for TorchRec users: `ShardoptPlanner`, a `ShardingPlanner` that plans with shardopt's solvers, the stable
public import (`from shardopt.torchrec import ShardoptPlanner`). Importing it needs TorchRec (the `[torchrec]` extra):
without it the ImportError names the exact pip commands. docs/torchrec.md shows a whole training loop."""

from shardopt.torchrec.planner import PlannerInputError, ShardoptPlanner, collections_of, tables_of

__all__ = ["PlannerInputError", "ShardoptPlanner", "collections_of", "tables_of"]
