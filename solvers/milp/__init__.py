"""One MILP layer for the solvers that build linear models (the certified bound, the exact solvers' HiGHS backend): a
sparse model built row by row (`SparseModel`), one adapter to HiGHS through scipy (`solve_milp`, `solve_lp`; through
highspy where a dual bound without a point is wanted, `solve_milp_with_dual`) and one to CBC through PuLP
(`solve_milp_cbc`), each the one reader of its backend's statuses, which it maps onto solvers.status at its boundary
(`HIGHS_STATUS`, `CBC_STATUS`). The model says nothing of the backend, the backend nothing of the problem - the
separation of CVXPY's reductions / solvers and of OR-Tools' model_builder."""

from solvers.milp.cbc import solve_milp_cbc
from solvers.milp.highs import MilpResult, solve_lp, solve_milp, solve_milp_with_dual, solve_model_lp_ipm
from solvers.milp.model import SparseModel

__all__ = ["MilpResult", "SparseModel", "solve_lp", "solve_milp", "solve_milp_cbc", "solve_milp_with_dual", "solve_model_lp_ipm"]
