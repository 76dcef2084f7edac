"""One MILP layer for the solvers that build linear models (the certified bound, the exact solvers' HiGHS backend): a
sparse model built row by row (`SparseModel`) and one adapter to HiGHS through scipy (`solve_milp`, `solve_lp`) with
one map of its status codes (`MilpStatus`). The model says nothing of the backend, the backend nothing of the
problem - the separation of CVXPY's reductions / solvers and of OR-Tools' model_builder."""

from solvers.milp.highs import MilpResult, MilpStatus, solve_lp, solve_milp
from solvers.milp.model import SparseModel

__all__ = ["MilpResult", "MilpStatus", "SparseModel", "solve_lp", "solve_milp"]
