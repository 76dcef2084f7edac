"""What the solvers share about where shards go beyond table-wise HBM: memory tiers (row-wise splits, UVM caches),
the completion check that keeps a partial plan packable, column-split items, the cost-driven placement polish, and
a plan's moves as changes of its shards."""

from solvers.placement.completion import completion_mask
from solvers.placement.polish import polish_placements
from solvers.placement.tiering import TableTier, TieredLayout, needs_tiers, plan_tiers

__all__ = ["TableTier", "TieredLayout", "completion_mask", "needs_tiers", "plan_tiers", "polish_placements"]
