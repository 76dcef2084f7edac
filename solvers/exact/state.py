"""What one exact solve works on (`_Run`) and the re-linearisation loop's state (`_Loop`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel, CostModel
from shardopt.core.ir import Instance
from solvers.base import Budget, Stopwatch
from solvers.exact.constraints import TableGroups
from solvers.exact.linearize import Linearization
from solvers.placement.split_items import Items
from solvers.results import WarmStart


@dataclass
class _Run:
    """What one solve works on: the instance, its bound cost model, the items offered, memory, the clock and the
    time, the info it reports."""

    instance: Instance
    cost_model: CostModel
    bm: BoundCostModel
    items: Items
    caps: np.ndarray  # [D] bytes
    fits: np.ndarray  # [I, D] a shard of the item fits on the device
    clock: Stopwatch
    budget: float  # the time limit (s)
    reserve: float  # kept back for extracting, judging and checking the last plan
    seed: int
    info: dict[str, Any]
    tiered: Any = None  # solvers.exact.tiered.TieredSplit: the instance above is its sub-instance of HBM tables
    whole: Instance | None = None  # ... and this the whole instance the plan is for
    start_plan: dict[str, Any] | None = None  # a warm start that fits but the items cannot express: returned if nothing else is found
    groups: TableGroups = field(default_factory=TableGroups)  # the placement constraints' co-locate / separate rows
    # the tiered path's start on the whole instance ({"solver", "cost", "shards"}): never returned dearer than it
    tiered_start: dict[str, Any] | None = None
    warm_starts: dict[str, float | None] = field(default_factory=dict)  # every warm start's plan cost (None: no plan)
    warm_start: WarmStart | None = None  # the start the search began from

    @property
    def time(self) -> Budget:
        """The whole solve's time: the limit on the solve's clock."""
        return Budget.of(self.clock, self.budget)

    @property
    def search(self) -> Budget:
        """The searches' time: the limit less the reserve for the last plan."""
        return Budget.of(self.clock, self.budget - self.reserve)


@dataclass
class _Loop:
    """The re-linearisation loop's state."""

    best: np.ndarray | None  # the best plan by the full model (item counts), None until one is found
    best_cost: float
    point: np.ndarray  # the expansion point of the linearisation
    lin: Linearization | None = None
    radius: int | None = None  # trust region: None = unrestricted
    tried: dict[int | None, bool] = field(default_factory=dict)  # radii tried around the current point -> proven (no repeats)
    final: bool = False  # the last unrestricted solve around the current point, with all the time left
    bound: dict[str, Any] | None = None  # the last unrestricted solve: its bound and its expansion point
    timed_out: bool = False
    converged: bool = False
    proven_infeasible: bool = False
    lb: np.ndarray | None = None
    cut_bound: float = -math.inf
    searched: np.ndarray | None = None  # the plan the last local search of the linear model started from
