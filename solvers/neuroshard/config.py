"""NeuroShard's options (one frozen dataclass, checked by solvers.options) and its default time budget."""

from __future__ import annotations

from dataclasses import dataclass

from shardopt.core.ir import Instance
from solvers.options import option


@dataclass(frozen=True)
class NeuroShardConfig:
    """NeuroShard's options (`-O KEY=VALUE`); FAITHFUL is the published search."""

    beam_width: int = option(3, "states kept per beam step", low=1)
    candidates_by_size: int = option(10, "split candidates per step among the largest pieces on the bottleneck device", low=0)
    candidates_by_cost: int = option(10, "split candidates per step among the costliest pieces", low=0)
    max_steps: int = option(10, "beam steps (column halvings) at most", low=1)
    scales: tuple[float, ...] = option(tuple(round(1.0 + 0.05 * i, 2) for i in range(11)),
                                       "the grid of dim-cap scales the inner greedy tries", low=0.0, low_open=True,
                                       check=bool, check_text="at least one")
    split_apart: bool = option(True, "keep the two halves of a split on different devices")
    comm_aware: bool = option(True, "refine the cheapest states with the all-to-all in the greedy's rule")
    dedup: bool = option(True, "score each distinct beam state once")
    polish: bool = option(True, "local-search polish of the best plan")
    wide_splits: bool = option(True, "after the polish, cut the bottleneck's widest pieces while that pays (the all-to-all's send)")
    anytime: bool = option(True, "honour a time budget (the published search has none)")
    seed_with_greedy: bool = option(True, "the cost-model greedy's table-wise plan competes with the grid plans")
    seed_with_presplit: bool = option(True, "the pre-split state (tables heavier than a device's share halved) joins the first beam")
    one_collective: bool = option(True, "beside the beam search, the one-collective state (the pre-split state with every other "
                                        "table halved too: the column-wise all-to-all alone) placed and polished; the cheaper plan kept")
    join_collectives: bool = option(True, "whole tables may join the column-wise all-to-all (marked column_wise: TorchRec's "
                                          "column_wise with one rank): the search prices them so, and the plan's are marked where cheaper")
    default_time_limit: float | None = option(None, "the budget when no --time-limit is given (null: 2-60 s by instance size)",
                                              low=0.0, low_open=True)
    refine_extra: int = option(4, "more of the cheapest scored states the comm-aware refinement re-runs", low=0)
    patience: int | None = option(3, "beam steps without a cheaper plan before the search stops (null: max_steps)", low=1)
    polish_reserve: float = option(0.15, "share of the budget the search leaves for the polish", low=0.0, high=1.0, high_open=True)
    placement_polish: bool = option(True, "in a tiered layout: cost-driven caches and moves back to HBM")
    data_parallel: bool | None = option(None, "offer data-parallel replicas (null: in tiered layouts, and on HBM instances the search "
                                              "again around replica sets in the time left; true: also the polish's replicate moves; false: none)")
    row_wise: bool = option(True, "offer row-wise / table-row-wise splits of HBM tables on the bottleneck device")
    safe_fallback: bool = option(True, "score a state none of whose grid lanes packs again with the completion check")
    uneven_halves: bool = option(True, "cut a piece of an odd number of 4-column units unevenly too (false: exact halves)")
    soft_dim_cap: bool = option(True, "a lane's dim cap admits the state's widest piece, and a piece no device admits goes "
                                      "where memory allows (false: a hard cap, as published)")


FAITHFUL = NeuroShardConfig(
    split_apart=False, comm_aware=False, dedup=False, polish=False, wide_splits=False, seed_with_greedy=False, seed_with_presplit=False, one_collective=False,
    join_collectives=False, refine_extra=0, patience=None, placement_polish=False, data_parallel=False, row_wise=False, safe_fallback=False,
    uneven_halves=False, soft_dim_cap=False,
)  # (anytime: the published search has no budget; here it honours --time-limit and the default budget)


DEVICES_PER_BUDGET_SECOND = 32  # the default budget is at least 1 s per this many devices


def default_budget(instance: Instance) -> float:
    """The time budget when the caller gives none, from the instance's size: 2 s up to 20,000 table x device pairs,
    growing linearly to 10 s at 100,000 (a production model, 856 x 128, gets 10 s), 10 s up to 300,000, then 1 s per
    30,000 pairs up to 60 s (3,424 x 512, the production-xl family, gets 58 s: in 10 s its greedy seed and first grid
    state were not done, and the answer was greedy's plan, 40.9 % above the bound against 5.5 % at 58 s; docs/results/bound.md,
    "Bound gaps on production and production-xl"); and at least 1 s per DEVICES_PER_BUDGET_SECOND devices, whatever the tables (every grid
    state costs a pass over the devices, and a few hot tables on many devices need the hot-table grids, which come
    after the search: MLPerf DLRMv2, 26 tables on 512 H100s, gets 16 s; in 2 s they never ran and its plan cost 2.63
    times the one found in 16 s, simulated, docs/results/real-models.md, "Real models"). Small instances end well before it (the beam stops after `patience` steps without a cheaper
    plan: 100 x 8 in well under 1 s on a 2-core VM); the budget only caps them on a slow or loaded machine. Measured
    against the search run to 55 s in docs/results/speed.md ("Fast by default")."""
    pairs = len(instance.tables) * instance.topology.num_devices
    by_devices = instance.topology.num_devices / DEVICES_PER_BUDGET_SECOND
    by_pairs = min(60.0, pairs / 30_000) if pairs > 300_000 else min(10.0, max(2.0, pairs / 10_000))
    return float(min(60.0, max(by_pairs, by_devices)))
