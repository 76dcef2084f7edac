"""Planning on one rank and handing every rank the outcome: the plan, or the error it ended with.

Why not TorchRec's `invoke_on_rank_and_broadcast_result`: it broadcasts only a result, so an error while planning on
rank 0 leaves the other ranks waiting in the broadcast for ever. Here rank 0 broadcasts a failure record in the plan's
place, and every rank raises: rank 0 its own exception, the others a `PlanningFailed` (a `PlannerInputError` where the
error was the user's input) with rank 0's message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardopt.core.errors import UserError
from shardopt.torchrec.planner_inputs import PlannerInputError


class PlanningFailed(RuntimeError):
    """Planning failed on rank 0 of the group for another reason than the user's input (the message is rank 0's)."""


@dataclass(frozen=True)
class FailureRecord:
    """What rank 0's planning raised: its type's name, its message, and whether it was the user's input."""

    kind: str
    message: str
    user_error: bool


def plan_on_rank0(pg: Any, plan: Callable[..., Any], *args: Any) -> Any:
    """`plan(*args)` on rank 0 of `pg`, its result broadcast to every rank of it; an exception there is raised on every
    rank (module docstring)."""
    import torch.distributed as dist

    mine: BaseException | None = None
    if pg.rank() == 0:
        try:
            box: list[Any] = [plan(*args)]
        except Exception as exc:  # noqa: BLE001 - every error must reach the other ranks, not only rank 0
            mine = exc
            box = [FailureRecord(type(exc).__name__, str(exc), isinstance(exc, UserError))]
    else:
        box = [None]
    if pg.size() > 1:
        dist.broadcast_object_list(box, group=pg, group_src=0)
    if mine is not None:
        raise mine
    got = box[0]
    if isinstance(got, FailureRecord):
        text = f"planning failed on rank 0 ({got.kind}): {got.message}"
        raise PlannerInputError(text) if got.user_error else PlanningFailed(text)
    return got
