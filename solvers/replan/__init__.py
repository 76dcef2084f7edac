"""Re-planning from a plan in service: a new plan that moves at most a budget of bytes, or weighs the bytes moved
against the cost (`shardopt solve --from OLD_PLAN.json`)."""

from solvers.replan.replan import moved_bytes, replan

__all__ = ["moved_bytes", "replan"]
