"""A certified lower bound of the *analytic* cost model over table-wise and column-wise plans.

The exact solvers' bound (solvers/exact/) is a bound of a model linearised around one plan: a plan better than it
under the real analytic model can exist. This package bounds the analytic model itself: `analytic_lower_bound`
returns a number B such that every plan of the instance made of table-wise and column-wise shards (any column split
into shards whose widths are multiples of DIM_ALIGNMENT, several shards of one table on one device, or one whole
shard marked column_wise, included; not row-wise or data-parallel shards) has an analytic max-device cost >= B.

How: a mixed-integer *relaxation* of the placement problem in which every cost term is replaced by a proven
under-estimate (every inequality and its proof: docs/analytic-bound.md), solved by HiGHS (highspy, scipy.optimize.milp). The
relaxation's optimum is <= the cost of every such plan, and any *dual* bound a branch-and-bound solver proves for
it is <= that optimum; so whatever HiGHS proves by the time limit is a bound, not only a proven optimum.

It is exact (to float rounding) for a device that holds one whole table with occupancy 1; the slack is in the
competition of several tables for the cache (a fractional knapsack instead of the model's hottest-first fill), the
sector rounding of split shards, occupancy below 1, and above all in what branch and bound has not closed by the
time limit (measured: docs/results/bound.md, "Certified bound of the analytic model on the test suites"). The LP relaxation is solved first, so a bound exists even when HiGHS
finds no integer solution in time. The relaxation's best solution describes a real plan (`relaxation_plan`).

The coefficients are derived from the model's constants, then *checked* against `BoundAnalytic.shard_states` for
every table at every shard width (`_verify_terms`): if the analytic model changes, the bound refuses to run rather
than bound a model it no longer matches.

The relaxation's variables and rows: solvers/bound/milp.py. The modules, each importing only those above
it in this list:

- `terms`: the per-table coefficients from the model's constants (`ShardTerms`) and their check; `BoundError`
- `inequalities`: the sector-waste hull, the cache-hit bound (knapsack multipliers), the all-to-all's pieces
- `context`: `AnalyticRelaxation`, the per-instance data, and what it charges a device or a plan
- `table_cuts`: Psi_t(k) per table, as rows and as the bound that needs no solver
- `milp`: `build_relaxation`, the MILP
- `symmetric`: the LP with interchangeable devices' variables equal
- `solve`: HiGHS on the relaxation, the plan its best point describes, its value at a fixed plan
- `bound`: `analytic_lower_bound` and `AnalyticBound`, `plan_gap`
"""

from solvers.bound.bound import analytic_lower_bound, plan_gap, uncovered_reason
from solvers.bound.context import AnalyticRelaxation, device_compute_lower_bound, hardware_refusal, network_pooling
from solvers.bound.inequalities import comm_pieces, sector_hull
from solvers.bound.milp import build_relaxation
from solvers.bound.solve import relaxation_value_at
from solvers.bound.symmetric import devices_interchangeable, symmetric_lp_bound
from solvers.bound.table_cuts import table_cut_bound
from solvers.bound.terms import BoundError

__all__ = [
    "AnalyticRelaxation",
    "BoundError",
    "analytic_lower_bound",
    "build_relaxation",
    "comm_pieces",
    "hardware_refusal",
    "network_pooling",
    "device_compute_lower_bound",
    "devices_interchangeable",
    "plan_gap",
    "relaxation_value_at",
    "sector_hull",
    "symmetric_lp_bound",
    "table_cut_bound",
    "uncovered_reason",
]
