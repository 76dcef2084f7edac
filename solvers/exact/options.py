"""The exact solvers' options (one frozen dataclass, checked by solvers.options) and the defaults they start from."""

from __future__ import annotations

from dataclasses import dataclass

from solvers.exact.linearize import COMM_FORMS
from solvers.options import option, power_of_two

DEFAULT_TIME_LIMIT = 60.0
DEFAULT_MAX_SPLIT = 8  # column pieces offered: halves, quarters, eighths
DEFAULT_SPLIT_TABLES = 16  # ... for the tables with the highest compute alone (split_items.split_candidates)
DEFAULT_NEIGHBOURHOOD = 16  # models over LARGE_MODEL pairs: re-solve 8 slowest + 8 light devices at a time (_neighbourhoods)
DEFAULT_PRESPLIT_SHARE = 0.45  # with splits: the pre-split grid plan is a warm start, its grid and polish within this share of the limit
# ... and the one-collective grid plan (every table cut), within this share. Whole tables join the column-wise
# collective in the pre-split plan too (Shard.column_wise), so it runs one collective without cutting every table, and
# on large models it needs the time: production-xl (3,424 tables on 512 devices) cpsat 60 s 10.802 ms with shares
# 0.15 / 0.45 (the pre-split grid cut by its 9 s), 10.660 with 0.45 / 0.15; production-0000 10.126 -> 10.119,
# -0001 9.7495 both (simulated, docs/results/bound.md, "Whole tables in the column-wise all-to-all")
DEFAULT_ONE_COLLECTIVE_SHARE = 0.15
# the default solver's plan as a start (NeuroShard at its own default budget, capped at this share of the limit): the
# exact search then never returns a plan costlier than the default solver's, whose row splits and uneven pieces its
# items cannot express
DEFAULT_NEUROSHARD_SHARE = 0.3
# the warm starts stop where less than this share of the limit is left, for the search (each start's share is of the
# whole limit: together they may ask for more than it)
WARM_START_RESERVE = 0.25
# with splits and the analytic model: the plan of shardopt bound's relaxation (HiGHS) is a warm start, found within
# this share of the limit, on models of at most RELAXATION_MAX_PAIRS (table, device) pairs (solvers.bound)
DEFAULT_RELAXATION_SHARE = 0.3
DEFAULT_TIERED_SHARE = 0.3  # beyond table-wise HBM: NeuroShard's tiered plan as a start within this share of the limit (solvers.exact.tiered)
DEFAULT_SEARCH_SHARE = 0.25  # each new plan: a local search of the linear model (solvers.exact.linear_search) within this share of the time left
_SHARE = {"low": 0.0, "high": 1.0, "high_open": True}  # a share of the time limit: [0, 1)


@dataclass(frozen=True)
class ExactOptions:
    comm: str = option("planes", "how the all-to-all term is linearised", choices=COMM_FORMS)
    max_iterations: int = option(30, "re-linearisations at most", low=1)
    workers: int | None = option(None, "solver threads (null: every core)", low=1)
    deterministic: bool = option(True, "CP-SAT's deterministic time: the same seed gives the same plan")
    symmetry: bool = option(True, "break the symmetry of identical devices")
    warm_start: bool = option(True, "start from the best heuristic plan")
    default_time_limit: float = option(DEFAULT_TIME_LIMIT, "seconds when no --time-limit is given", low=0.0, low_open=True)
    cutoff: bool = option(True, "cut off plans no better than the warm start")
    trust_region: bool = option(True, "re-linearise within a shrinking neighbourhood of the incumbent")
    tiebreak: bool = option(True, "a small secondary objective between plans of equal linear cost")
    table_cuts: bool = option(True, "per-table cuts that tighten the linear model's bound")
    exact_neural: bool = option(False, "encode the neural compute head exactly (MILP backends, small instances)")
    max_split: int = option(DEFAULT_MAX_SPLIT, "column pieces offered per table: halves (2), quarters (4), ... (1: whole tables)",
                            check=power_of_two, check_text="a power of two >= 1")
    split_tables: int = option(DEFAULT_SPLIT_TABLES, "tables offered column pieces (the highest compute first)", low=0)
    split_apart: bool = option(True, "pieces of one table on different devices")
    neuroshard_share: float = option(DEFAULT_NEUROSHARD_SHARE, "with pieces offered: the default solver's plan (NeuroShard at its default budget) "
                                     "as a warm start, within this share of the limit at most (0: none)", **_SHARE)
    presplit_share: float = option(DEFAULT_PRESPLIT_SHARE, "share of the limit for the pre-split warm start's grid and polish", **_SHARE)
    one_collective_share: float = option(DEFAULT_ONE_COLLECTIVE_SHARE, "share of the limit for the one-collective warm start's grid and polish "
                                         "(the pre-split state with every other table halved too)", **_SHARE)
    join_collectives: bool = option(True, "whole tables may join the column-wise all-to-all (marked column_wise: TorchRec's "
                                          "column_wise with one rank): the items price them so, and the plan's are marked where cheaper")
    relaxation_share: float = option(DEFAULT_RELAXATION_SHARE, "share of the limit for the bound relaxation's warm start", **_SHARE)
    neighbourhood: int = option(DEFAULT_NEIGHBOURHOOD, "devices re-solved at a time on large models (0: solve whole)", low=0)
    search_share: float = option(DEFAULT_SEARCH_SHARE, "share of the time left for a local search of each new plan (0: none)", **_SHARE)
    certified_bound: bool = option(False, "compute the analytic model's certified bound of the plan cost within the limit")
    tiered: bool = option(True, "beyond table-wise HBM: start from NeuroShard's tiered plan")
    tiered_share: float = option(DEFAULT_TIERED_SHARE, "share of the limit for NeuroShard's tiered start", **_SHARE)
    row_wise: bool = option(True, "offer row-wise / table-row-wise splits of a table on the bottleneck device")


@dataclass(frozen=True)
class ExactNeuralOptions(ExactOptions):
    exact_neural: bool = option(True, "encode the neural compute head exactly (MILP backends, small instances)")
