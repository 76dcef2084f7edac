"""The 2D sparse parallelism section of an instance: TorchRec's `DMPCollection` shards the tables over a sharding
group of G ranks and replicates that group N / G times.

Why a section of its own and not a different topology: the instance's topology stays the whole job (N devices, its
hosts and links), so that the same document can be planned flat (G = N) or in groups, and which links a group's
all-to-all and a replica group's sync cross follows from the layout of the ranks (shardopt.core.sharding_groups).
The fields mirror DMPCollection's arguments (TorchRec 1.8, torchrec/distributed/model_parallel.py):
`sharding_group_size`, `sharding_strategy`, `use_inter_host_allreduce`; `sync_interval` is how often the training
loop calls `sync()`. docs/analytic-model.md, "2D sparse parallelism", prices it.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import Field

from shardopt.core.ir_base import MAX_DEVICES, IRModel

AUTO = "auto"


class SyncStrategy(str, Enum):
    """DMPCollection's `ShardingStrategy`: `default` all-reduces (AVG) the weights and optimizer states over each
    replica group at `sync()`; `fully_sharded` reduce-scatters and all-gathers the weights every iteration."""

    default = "default"
    fully_sharded = "fully_sharded"


class GroupLayout(str, Enum):
    """How the ranks form the groups. `alternating` (DMPCollection's default, use_inter_host_allreduce=False): group
    g holds ranks g, g + N/G, g + 2 N/G, ..., so each replica group is N/G consecutive ranks and its sync stays within
    a host where N/G fits in one. `contiguous` (use_inter_host_allreduce=True): group g holds ranks g G .. g G + G - 1,
    so the group's all-to-all uses the links inside its hosts and the replica sync crosses hosts."""

    alternating = "alternating"
    contiguous = "contiguous"


class TwoDParallel(IRModel):
    """The sharding group and its replica sync. The world size is the topology's `num_devices`."""

    group_size: int | Literal["auto"] = Field(
        default=AUTO, description="ranks one sharding group spans (a divisor of topology.num_devices), or \"auto\": "
        "the planner chooses it")
    strategy: SyncStrategy = Field(default=SyncStrategy.default, description="DMPCollection's sharding_strategy")
    sync_interval: int = Field(default=1, ge=1, le=1_000_000, description="iterations between sync() calls (strategy default)")
    layout: GroupLayout = Field(default=GroupLayout.alternating, description="alternating: use_inter_host_allreduce=false "
                                "(DMPCollection's default); contiguous: use_inter_host_allreduce=true")

    @property
    def fixed_group_size(self) -> int | None:
        """The group size when the instance fixes it (None: `auto`)."""
        return None if self.group_size == AUTO else int(self.group_size)

    def dmp_collection_args(self, group_size: int, world_size: int) -> dict[str, object]:
        """DMPCollection's arguments for a plan of one group of `group_size` ranks (and the sync interval its loop uses)."""
        return {"sharding_group_size": group_size, "world_size": world_size,
                "use_inter_host_allreduce": self.layout is GroupLayout.contiguous, "sharding_strategy": self.strategy.value,
                "sync_interval": self.sync_interval}

    def check_group_size(self, num_devices: int) -> None:
        """Raise ValueError naming the field where a fixed group size does not divide the world size."""
        g = self.fixed_group_size
        if g is None:
            return
        if not 1 <= g <= min(num_devices, MAX_DEVICES):
            raise ValueError(f"two_d.group_size: {g} is not between 1 and topology.num_devices {num_devices}")
        if num_devices % g:
            raise ValueError(f"two_d.group_size: {g} does not divide topology.num_devices {num_devices} (DMPCollection "
                             f"replicates the group num_devices / group_size times); divisors: "
                             f"{', '.join(str(d) for d in divisors(num_devices))}")


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})
