"""Exact solvers: the min-max assignment with hard memory capacities, solved by CP-SAT or a MILP solver under a
linearisation of the cost model, re-linearised around every better plan.

Model (one binary x[t, d] per table and device where the table fits; solvers.exact.linearize for the cost terms)::

    minimise z
    sum_d x[t, d] = 1                                   every table on exactly one device
    sum_t bytes_t x[t, d] <= capacity_d                 weights + optimizer state (shardopt.core.memory)
    u_cd = sum_{t of collective c} dim_t x[t, d]        pooled width of device d in collective c (whole tables:
                                                        table-wise; column pieces: column-wise)
    T_c = sum_d u_cd,  T_c <= total p_c                 its total width; p_c: it runs (always, when it must)
    m_cd >= k0 p_c + k1 u_cd + k2 v_ch(d) + k3 T_c     comm planes of collective c (v_ch = sum of u_c over host h),
    m_cd >= 0                                           one all-to-all per collective, as the judge runs them (p_c = 1
                                                        where c always runs; at p_c = 0 its widths are 0: m_cd >= 0)
    y_d >= x[t, d], y_d <= sum_t x[t, d]                y_d: device d holds a table (an empty device computes nothing)
    z >= c0[d] y_d + sum_t a[t, d] x[t, d] + sum_c m_cd + const_d    device cost, every device

The loop (`ExactSolver.solve`): warm start = the best plan of the heuristics (greedy, the proxy greedies and
round-robin, judged by the full cost model); linearise around it; solve the linear model (CP-SAT gets a complete
hint -- every x, u, T, p, m, y and z -- and the cutoff z <= the hint's cost; CBC a warm-start solution; scipy's HiGHS takes
none), preferring among equal z the plan that moves the fewest tables (the linearisation is accurate near its point);
judge the plan with the full model; if it is better, re-linearise around it and solve again; if not, solve again in
a trust region (at most R tables move, R halved each time) until R < 1; stop there or at the time limit. The best
plan by the *full* model is returned, so the result is never worse than the warm start. The reported lower bound is
the best bound of the linearised problem around the returned plan (raised by the table-cut bound): a bound of the
linear model, not of the full cost model (docs/exact-solvers.md).

CP-SAT needs integers: every cost coefficient is rounded down to units of 1e-4 ms (`COST_SCALE`), so the integer
model never over-states a plan's linear cost and its bound less one unit is a bound of the real-coefficient model; a
comm plane constraint is multiplied by a further power of ten so that its per-unit-width slopes keep at least 6
significant digits (`plane_scale` in `info`). The MILPs use the real coefficients.

Valid cuts: ``z >= sum_d lb[t, d] x[t, d]`` (`table_lower_bounds`) for the tables whose cost alone may bind.

Symmetry: devices on one host with the same capacity are interchangeable in the full model; when their linearised
cost terms are identical too (e.g. devices that are empty at the expansion point), the devices of such a class are
ordered by the largest table they hold: the i-th device of a class may only hold tables of rank >= i in the
bytes-descending order (valid: sort the class's devices by the best-ranked table each holds). The hint is permuted
to match. Classes whose linear terms differ are left alone (breaking them would cut off better plans).

Infeasibility: shardopt.core.feasibility's necessary conditions first; then a solver that proves the bin packing of
its placements (HBM table-wise and column pieces) impossible says so with a reason naming the capacity problem. Both
are `infeasible` only when the tables exceed all HBM and host memory together (solvers.base.unplaceable); otherwise
row-wise or host-memory plans may exist and the status is `no_solution`.

Exact neural mode (`milp_exact_neural`, the neural cost model only, at most EXACT_NEURAL_MAX_TABLES tables x
EXACT_NEURAL_MAX_DEVICES devices): the compute model's head is encoded exactly (see `neural_head_extra`).

The modules, each importing only those above it in this list (no circles):

- `constants`: the numbers several modules read (COST_SCALE, LARGE_MODEL), read through the module at run time
- `formulation`: `Problem`, `LinearSolve`, symmetry, the valid bounds (`width_caps`, `comm_floor`,
  `table_lower_bounds`, `table_cut_bound`), `plan_cost`, the packing reason
- `cpsat`: `solve_cpsat`, the CP-SAT backend (integer model, hint, cutoff)
- `milp`: `_milp_rows` (the model as sparse rows), `solve_highs` (HiGHS) and `solve_cbc` (PuLP + CBC)
- `neural_head`: the exact neural mode's encoding of the compute head (`neural_head_extra`, softplus tangents)
- `solver`: `ExactSolver` (warm starts, the re-linearisation loop, local and neighbourhood search, the bound and
  status) and the registered `CpSatSolver`, `MilpSolver`, `MilpHighsSolver`, `MilpExactNeuralSolver`; `BACKENDS`

This package re-exports the names other code uses. A tuning number is changed where it is read: LARGE_MODEL and
COST_SCALE in `solvers.exact.constants`, the others in the module that defines them (a copy re-exported here
would not be the one read).
"""

from solvers.exact.constants import COST_SCALE
from solvers.exact.cpsat import solve_cpsat
from solvers.exact.formulation import (
    LinearSolve,
    Problem,
    comm_floor,
    plan_cost,
    table_cut_bound,
    table_lower_bounds,
    width_caps,
)
from solvers.exact.milp import _milp_rows, solve_cbc, solve_highs
from solvers.exact.neural_head import neural_head_extra, softplus_error, softplus_tangents
from solvers.exact.options import DEFAULT_TIME_LIMIT, ExactNeuralOptions, ExactOptions
from solvers.exact.solver import (
    BACKEND_LABEL,
    BACKENDS,
    CpSatSolver,
    ExactSolver,
    MilpExactNeuralSolver,
    MilpHighsSolver,
    MilpSolver,
)

__all__ = [
    "BACKENDS",
    "BACKEND_LABEL",
    "COST_SCALE",
    "DEFAULT_TIME_LIMIT",
    "CpSatSolver",
    "ExactNeuralOptions",
    "ExactOptions",
    "ExactSolver",
    "LinearSolve",
    "MilpExactNeuralSolver",
    "MilpHighsSolver",
    "MilpSolver",
    "Problem",
    "_milp_rows",
    "comm_floor",
    "neural_head_extra",
    "plan_cost",
    "softplus_error",
    "softplus_tangents",
    "solve_cbc",
    "solve_cpsat",
    "solve_highs",
    "table_cut_bound",
    "table_lower_bounds",
    "width_caps",
]
